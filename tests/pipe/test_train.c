/* Training end to end, as a user runs it: pipeline runs equal the single-process run bit for
 * bit (d = 1, fp32) for every family, data parallelism matches within 1e-5, resuming gives the
 * uninterrupted losses bit for bit, and bad configs are one clear error with exit 2. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/config.h"
#include "core/error.h"
#include "core/json.h"
#include "layers/layers.h"
#include "pipe/ckpt.h"
#include "pipe/ckpt_model.h"
#include "tests/common/mpirun.h"

typedef struct {
  int n;
  double loss[64], val[64];
  char text[64][32]; /* losses as printed (%.9g): compared as text, i.e. bit for bit */
} run_log;

static void read_log(const char *path, run_log *lg) {
  FILE *f = fopen(path, "r");
  cr_assert(f, "no log %s", path);
  char line[512];
  lg->n = 0;
  while (fgets(line, sizeof line, f) && lg->n < 64) {
    core_json *j;
    cr_assert_eq(core_json_parse(line, strlen(line), path, &j), 0, "bad log line %s", line);
    lg->loss[lg->n] = core_json_get(j, "loss")->num;
    const core_json *v = core_json_get(j, "val_loss");
    lg->val[lg->n] = v ? v->num : -1;
    char *s = strstr(line, "\"loss\":");
    snprintf(lg->text[lg->n], sizeof lg->text[0], "%.*s", (int)strcspn(s + 7, ","), s + 7);
    lg->n++;
    core_json_free(j);
  }
  fclose(f);
}

/* Runs brigade train on np ranks (np = 0: plain process) with extra --set options. Open MPI
 * leaks at MPI_Init even in one process, so sanitizer builds run it without leak checks. */
static int train_prog(const char *prog, int np, const char *sets, const char *log) {
  char args[2048];
  snprintf(args, sizeof args, "train configs/tiny.cfg --set train.steps=20 --set train.eval_interval=10 %s --log-json %s", sets, log);
  if (np > 0) return test_mpirun(np, prog, args);
  char cmd[2300];
  snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 %s/brigade %s 1>&2", test_build_dir(), args);
  return test_sh(cmd);
}

static int train(int np, const char *sets, const char *log) { return train_prog("brigade", np, sets, log); }

/* Removes a test's temporary directory and everything in it. */
static void remove_tree(const char *dir) {
  char cmd[1100];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  test_sh(cmd);
}

/* Runs `brigade train configs/tiny.cfg` in one process with the arguments from a format; returns
 * the exit status, the output (stdout and stderr) in *out (caller frees). */
static int train_capture(char **out, const char *fmt, ...) {
  char args[1500], cmd[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 %s/brigade train configs/tiny.cfg %s", test_build_dir(), args);
  return test_capture(cmd, out);
}

/* train() with --set options from a format, which must succeed; its log into *out. */
static void train_read(int np, const char *log, run_log *out, const char *fmt, ...) {
  char sets[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(sets, sizeof sets, fmt, ap);
  va_end(ap);
  cr_assert_eq(train(np, sets, log), 0, "train %s failed", sets);
  read_log(log, out);
}

/* The first step's line of a --log-json file, parsed (the caller frees it). */
static core_json *first_step(const char *log) {
  FILE *f = fopen(log, "r");
  char line[1024];
  cr_assert(f && fgets(line, sizeof line, f), "no step in %s", log);
  fclose(f);
  core_json *j;
  cr_assert_eq(core_json_parse(line, strlen(line), log, &j), 0);
  return j;
}

static void same_bits(const run_log *a, const run_log *b, const char *what) {
  cr_assert_eq(a->n, b->n, "%s: %d steps vs %d", what, a->n, b->n);
  for (int i = 0; i < a->n; i++) {
    cr_assert_str_eq(a->text[i], b->text[i], "%s: step %d loss %s vs %s", what, i + 1, a->text[i], b->text[i]);
    cr_assert(a->val[i] == b->val[i], "%s: step %d val loss %.9g vs %.9g", what, i + 1, a->val[i], b->val[i]);
  }
}

/* Losses within 1e-5 relative of ref's from step from + 1 on, and the validation losses too: an
 * evaluation is the same eval_batches global micro-batches whatever the layout. */
static void close_to(const run_log *ref, const run_log *got, int from, const char *what) {
  for (int i = 0; i < got->n; i++) {
    double want = ref->loss[from + i], val = ref->val[from + i];
    cr_assert(fabs(got->loss[i] - want) <= 1e-5 * fabs(want), "%s: step %d loss %.9g vs %.9g", what,
              from + i + 1, got->loss[i], want);
    cr_assert((val < 0) == (got->val[i] < 0), "%s: step %d evaluated in one run only", what, from + i + 1);
    cr_assert(fabs(got->val[i] - val) <= 1e-5 * fabs(val), "%s: step %d val loss %.9g vs %.9g", what,
              from + i + 1, got->val[i], val);
  }
}

Test(train, pipelines_equal_single_process_bit_for_bit, .timeout = 300) {
  run_log ref, got;
  char log[] = "/tmp/brigade_train_XXXXXX";
  close(mkstemp(log));
  const char *m3 = "--set gradient_accumulation_steps=3";
  cr_assert_eq(train(0, m3, log), 0);
  read_log(log, &ref);
  cr_assert_eq(ref.n, 20);
  cr_assert(ref.loss[19] < ref.loss[0] - 0.5, "the loss did not fall: %g -> %g", ref.loss[0], ref.loss[19]);
  const struct { int np; const char *sets; } layouts[] = {
      {2, "--set pipeline.stages=2 --set pipeline.schedule=gpipe"},
      {4, "--set pipeline.stages=4 --set pipeline.schedule=1f1b"}, /* m < p */
      {2, "--set pipeline.stages=2 --set pipeline.schedule=interleaved --set pipeline.virtual_stages=2"},
      {4, "--set pipeline.stages=4 --set pipeline.schedule=zb-h1"},
      {3, "--set pipeline.stages=3 --set pipeline.schedule=zb-h2"},
      {2, "--set pipeline.stages=2 --set pipeline.schedule=zb-v"},
      {4, "--set pipeline.stages=4 --set pipeline.schedule=interleaved --set pipeline.partition_method=uniform"},
      {2, "--set pipeline.stages=2 --set activation_checkpointing.enabled=true"},
      {0, "--set activation_checkpointing.enabled=true"},
  };
  for (size_t k = 0; k < sizeof layouts / sizeof layouts[0]; k++) {
    char sets[512];
    snprintf(sets, sizeof sets, "%s %s", m3, layouts[k].sets);
    cr_assert_eq(train(layouts[k].np, sets, log), 0, "%s failed", layouts[k].sets);
    read_log(log, &got);
    same_bits(&ref, &got, layouts[k].sets);
  }
  unlink(log);
}

/* MPI tags name (micro-batch, stage, direction): m * S * 2 of them, far fewer than the 2^31 - 1
 * Open MPI allows; 16384 micro-batches in one process (32769 tags, one more than the least any
 * MPI must allow, which the worker assumed because the pipeline's communicator, a split of
 * MPI_COMM_WORLD, carries no MPI_TAG_UB) train, and a 2-stage interleaved program of 4096. */
Test(train, many_micro_batches_fit_the_mpi_tags, .timeout = 120) {
  run_log got;
  char log[] = "/tmp/brigade_train_XXXXXX";
  close(mkstemp(log));
  const char *small = "--set train_micro_batch_size_per_gpu=1 --set model.seq_len=4 --set train.steps=1 "
                      "--set train.eval_interval=0";
  train_read(0, log, &got, "%s --set gradient_accumulation_steps=16384", small);
  cr_assert_eq(got.n, 1);
  train_read(2, log, &got, "%s --set gradient_accumulation_steps=4096 --set pipeline.stages=2 "
             "--set pipeline.schedule=interleaved", small);
  cr_assert_eq(got.n, 1);
  unlink(log);
}

/* DualPipeV needs m >= 2p: its own reference with 4 micro-batches; 2 stages (4 virtual) and 1. */
Test(train, dualpipev_equals_single_process_bit_for_bit, .timeout = 120) {
  run_log ref, got;
  char log[] = "/tmp/brigade_train_XXXXXX";
  close(mkstemp(log));
  const char *m4 = "--set gradient_accumulation_steps=4";
  train_read(0, log, &ref, "%s", m4);
  train_read(2, log, &got, "%s --set pipeline.stages=2 --set pipeline.schedule=dualpipev", m4);
  same_bits(&ref, &got, "dualpipev p=2");
  train_read(0, log, &got, "%s --set pipeline.schedule=dualpipev", m4);
  same_bits(&ref, &got, "dualpipev p=1");
  unlink(log);
}

Test(train, data_parallel_matches_within_1e5, .timeout = 120) {
  run_log ref, got;
  char log[] = "/tmp/brigade_train_XXXXXX";
  close(mkstemp(log));
  cr_assert_eq(train(0, "--set gradient_accumulation_steps=4", log), 0);
  read_log(log, &ref);
  /* p = 2, d = 2: micro-batch j of data rank r is micro-batch 2r + j of the single run */
  cr_assert_eq(train(4, "--set gradient_accumulation_steps=2 --set pipeline.stages=2", log), 0);
  read_log(log, &got);
  cr_assert_eq(got.n, ref.n);
  close_to(&ref, &got, 0, "p=2 d=2");
  unlink(log);
}

Test(train, resume_is_bit_identical, .timeout = 120) {
  run_log full, first, rest;
  char log[] = "/tmp/brigade_train_XXXXXX", dir[] = "/tmp/brigade_ckpt_XXXXXX";
  close(mkstemp(log));
  cr_assert(mkdtemp(dir));
  const char *sched = "--set scheduler.params.total_num_steps=20";
  char sets[512];
  cr_assert_eq(train(0, sched, log), 0);
  read_log(log, &full);
  /* 10 steps and a checkpoint, then resume to 20, on 2 stages for a change of process count */
  snprintf(sets, sizeof sets, "%s --set train.steps=10 --set checkpoint.dir=%s", sched, dir);
  char args[1024], cmd[2048];
  snprintf(args, sizeof args, "train configs/tiny.cfg --set train.eval_interval=10 %s --log-json %s", sets, log);
  snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 %s/brigade %s 1>&2", test_build_dir(), args);
  cr_assert_eq(test_sh(cmd), 0);
  read_log(log, &first);
  snprintf(sets, sizeof sets, "%s --set pipeline.stages=2 --resume %s", sched, dir);
  cr_assert_eq(train(2, sets, log), 0);
  read_log(log, &rest);
  cr_assert_eq(first.n + rest.n, full.n);
  for (int i = 0; i < full.n; i++) {
    const char *t = i < first.n ? first.text[i] : rest.text[i - first.n];
    cr_assert_str_eq(t, full.text[i], "step %d: %s vs uninterrupted %s", i + 1, t, full.text[i]);
  }
  remove_tree(dir);
  unlink(log);
}

/* fp16 resumes bit for bit too: the checkpoint holds the fp32 master weights (not the rounded
 * working copy) and the loss scale's state. A scale of 2^26 overflows at once, so by step 10 the
 * scale has been halved step after step and training goes on at the last one. */
Test(train, fp16_resume_is_bit_identical, .timeout = 120) {
  char log[] = "/tmp/brigade_train_XXXXXX", dir[] = "/tmp/brigade_ckpt_XXXXXX", sets[512];
  close(mkstemp(log));
  cr_assert(mkdtemp(dir));
  const char *fp16 = "--set scheduler.params.total_num_steps=20 --set fp16.enabled=true "
                     "--set fp16.initial_scale_power=26 --set fp16.hysteresis=1";
  run_log full, first, rest;
  char scales[3][20][24];
  run_log *logs[3] = {&full, &first, &rest};
  for (int k = 0; k < 3; k++) {
    if (k == 0) snprintf(sets, sizeof sets, "%s", fp16);
    if (k == 1) snprintf(sets, sizeof sets, "%s --set train.steps=10 --set checkpoint.dir=%s", fp16, dir);
    if (k == 2) snprintf(sets, sizeof sets, "%s --resume %s", fp16, dir);
    train_read(0, log, logs[k], "%s", sets);
    FILE *f = fopen(log, "r"); /* the loss scale of each step, as printed */
    char line[1024];
    for (int i = 0; i < 20 && fgets(line, sizeof line, f); i++) {
      const char *sc = strstr(line, "\"loss_scale\":");
      cr_assert(sc, "no loss_scale in %s", line);
      snprintf(scales[k][i], sizeof scales[k][i], "%.*s", (int)strcspn(sc + 13, ","), sc + 13);
    }
    fclose(f);
  }
  cr_assert(strcmp(scales[0][0], scales[0][9]) != 0, "the scale did not move in the first 10 steps");
  cr_assert_eq(first.n + rest.n, full.n);
  for (int i = 0; i < full.n; i++) {
    int a = i < first.n ? 1 : 2, j = i < first.n ? i : i - first.n;
    cr_assert_str_eq(logs[a]->text[j], full.text[i], "step %d: loss %s vs uninterrupted %s", i + 1, logs[a]->text[j],
                     full.text[i]);
    cr_assert_str_eq(scales[a][j], scales[0][i], "step %d: loss scale %s vs uninterrupted %s", i + 1, scales[a][j],
                     scales[0][i]);
  }
  remove_tree(dir);
  unlink(log);
}

/* checkpoint.dir reused by a run on fewer stages (a layout change, then training from scratch
 * into the same directory): the step directory the earlier run wrote on 4 stages, with another
 * model (d_model 16), gets the new run's 2 rank files; resuming must read only those, not the
 * earlier run's rank_00002/3, and continue as the uninterrupted run does. */
Test(train, checkpoint_dir_reused_with_fewer_stages, .timeout = 120) {
  run_log full, rest;
  char log[] = "/tmp/brigade_train_XXXXXX", dir[] = "/tmp/brigade_ckpt_XXXXXX", sets[512];
  close(mkstemp(log));
  cr_assert(mkdtemp(dir));
  const char *base = "--set scheduler.params.total_num_steps=20 --set train.eval_interval=0";
  train_read(0, log, &full, "%s --set train.steps=4", base);
  snprintf(sets, sizeof sets, "%s --set train.steps=2 --set checkpoint.dir=%s --set pipeline.stages=4 "
           "--set model.d_model=16", base, dir);
  cr_assert_eq(train(4, sets, log), 0, "%s", sets);
  snprintf(sets, sizeof sets, "%s --set train.steps=2 --set checkpoint.dir=%s --set pipeline.stages=2", base, dir);
  cr_assert_eq(train(2, sets, log), 0, "%s", sets);
  snprintf(sets, sizeof sets, "%s --set train.steps=4 --resume %s", base, dir);
  cr_assert_eq(train(0, sets, log), 0, "resuming the 2-stage run's checkpoint failed");
  read_log(log, &rest);
  cr_assert_eq(rest.n, 2);
  for (int i = 0; i < 2; i++)
    cr_assert_str_eq(rest.text[i], full.text[2 + i], "step %d: %s vs uninterrupted %s", 3 + i, rest.text[i],
                     full.text[2 + i]);
  /* a step directory that holds a layer twice (a rank file of another run, seed 7, copied in)
   * is refused rather than loaded in directory order */
  snprintf(sets, sizeof sets, "%s --set train.steps=2 --set checkpoint.dir=%s/other --set train.seed=7", base, dir);
  cr_assert_eq(train(0, sets, log), 0, "%s", sets);
  char cmd[2048], *out = NULL;
  snprintf(cmd, sizeof cmd, "cp %s/other/step_00000002/rank_00000.ckpt %s/step_00000002/rank_00002.ckpt", dir, dir);
  cr_assert_eq(test_sh(cmd), 0);
  int rc = train_capture(&out, "%s --set train.steps=4 --resume %s", base, dir);
  cr_assert(rc == 2 && strstr(out, "in more than one rank file"), "exit %d: %s", rc, out);
  free(out);
  remove_tree(dir);
  unlink(log);
}

/* trace.path without trace.step traces the second step the run takes, also when it resumes: a
 * run resumed at step 2 writes the timeline of step 4 (step 2, the default of a fresh run, is
 * not among its steps). */
Test(train, resumed_run_writes_its_trace, .timeout = 60) {
  char log[] = "/tmp/brigade_train_XXXXXX", dir[] = "/tmp/brigade_ckpt_XXXXXX", sets[1024], path[1100];
  close(mkstemp(log));
  cr_assert(mkdtemp(dir));
  snprintf(sets, sizeof sets, "--set train.steps=2 --set checkpoint.dir=%s", dir);
  cr_assert_eq(train(0, sets, log), 0);
  snprintf(sets, sizeof sets, "--set train.steps=6 --set trace.path=%s/trace.json --resume %s", dir, dir);
  cr_assert_eq(train(0, sets, log), 0);
  snprintf(path, sizeof path, "%s/trace.json", dir);
  cr_assert_eq(access(path, R_OK), 0, "the resumed run wrote no trace");
  /* a trace.step the resumed run does not take is an error, not a run without its trace */
  char *out = NULL;
  int rc = train_capture(&out, "--set train.steps=6 --set trace.path=%s/t2.json --set trace.step=2 --resume %s", dir, dir);
  cr_assert(rc == 2 && strstr(out, "trace.step 2 is not a step of this run, which resumes after step 2 (--set trace.step)"),
            "exit %d: %s", rc, out);
  free(out);
  remove_tree(dir);
  unlink(log);
}

/* Runs that would do nothing, or less than asked, say so and exit 0: a resume at or past
 * train.steps, checkpoint.interval without checkpoint.dir; train.steps = 0 with a warm-up LR
 * schedule is a run of no step (not an error about scheduler.params.total_num_steps). */
Test(train, runs_that_do_little_say_so, .timeout = 60) {
  char dir[] = "/tmp/brigade_ckpt_XXXXXX", *out = NULL;
  cr_assert(mkdtemp(dir));
  int rc = train_capture(&out, "--set train.steps=2 --set train.eval_interval=0 --set checkpoint.dir=%s", dir);
  cr_assert_eq(rc, 0, "%s", out);
  free(out);
  rc = train_capture(&out, "--set train.steps=2 --resume %s", dir);
  cr_assert(rc == 0 && strstr(out, "warning: nothing to train: the checkpoint is at step 2 and train.steps is 2") &&
                !strstr(out, "step     3"),
            "exit %d: %s", rc, out);
  free(out);
  rc = train_capture(&out, "--set train.steps=1 --set train.eval_interval=0 --set checkpoint.interval=1");
  cr_assert(rc == 0 && strstr(out, "warning: checkpoint.interval is 1 but checkpoint.dir is not set"), "exit %d: %s",
            rc, out);
  free(out);
  rc = train_capture(&out, "--set train.steps=0");
  cr_assert(rc == 0 && !strstr(out, "step     1"), "exit %d: %s", rc, out);
  free(out);
  remove_tree(dir);
}

/* A checkpoint that lacks one layer's records (a rank file from another model, or damaged) is
 * refused on resume, not trained on with that layer zeroed. */
Test(train, resume_refuses_a_checkpoint_missing_a_layer, .timeout = 60) {
  char log[] = "/tmp/brigade_train_XXXXXX", dir[] = "/tmp/brigade_ckpt_XXXXXX", sets[512], path[700];
  close(mkstemp(log));
  cr_assert(mkdtemp(dir));
  snprintf(sets, sizeof sets, "--set train.steps=2 --set checkpoint.dir=%s", dir);
  cr_assert_eq(train(0, sets, log), 0);
  snprintf(path, sizeof path, "%s/step_00000002/rank_00000.ckpt", dir);
  pipe_ckpt_reader r; /* the rank file again, without layer 3's records */
  cr_assert_eq(pipe_ckpt_open(&r, path), 0, "%s", core_error_msg());
  pipe_ckpt_writer w;
  cr_assert_eq(pipe_ckpt_create(&w, path), 0);
  int dropped = 0;
  for (uint32_t i = 0; i < r.nrec; i++) {
    if (strncmp(r.rec[i].name, "layer.3.", 8) == 0) {
      dropped++;
      continue;
    }
    cr_assert_eq(pipe_ckpt_put(&w, r.rec[i].name, r.rec[i].dtype, r.rec[i].data, r.rec[i].count), 0);
  }
  cr_assert_eq(pipe_ckpt_commit(&w), 0, "%s", core_error_msg());
  pipe_ckpt_close(&r);
  cr_assert_eq(dropped, 3);
  char *out = NULL;
  int rc = train_capture(&out, "--set train.steps=4 --resume %s", dir);
  cr_assert(rc == 2 && strstr(out, "lacks 1 of this rank's") && strstr(out, "layers (a different model?)"),
            "exit %d: %s", rc, out);
  free(out);
  remove_tree(dir);
  unlink(log);
}

/* Rewrites the rank file `path` with record `name` holding `data` instead (count values of
 * dtype), every other record as it was; the writer computes the hash, so the file is valid. */
static void forge_record(const char *path, const char *name, int dtype, const void *data, uint64_t count) {
  pipe_ckpt_reader r;
  cr_assert_eq(pipe_ckpt_open(&r, path), 0, "%s", core_error_msg());
  pipe_ckpt_writer w;
  cr_assert_eq(pipe_ckpt_create(&w, path), 0, "%s", core_error_msg());
  int replaced = 0;
  for (uint32_t i = 0; i < r.nrec; i++) {
    int mine = strcmp(r.rec[i].name, name) == 0;
    replaced += mine;
    cr_assert_eq(pipe_ckpt_put(&w, r.rec[i].name, mine ? dtype : r.rec[i].dtype, mine ? data : r.rec[i].data,
                               mine ? count : r.rec[i].count), 0);
  }
  cr_assert_eq(pipe_ckpt_commit(&w), 0, "%s", core_error_msg());
  pipe_ckpt_close(&r);
  cr_assert_eq(replaced, 1, "%s has no record %s", path, name);
}

/* A checkpoint's counters are input too: a step, opt_t or fp16 scaler state that no run writes
 * (negative, beyond int, opt_t past the step, a loss scale that is not a finite positive
 * number) is refused on resume, naming the rank file, the field and the value, rather than
 * truncated or trained with. */
Test(train, resume_refuses_out_of_range_counters, .timeout = 120) {
  char log[] = "/tmp/brigade_train_XXXXXX", dir[] = "/tmp/brigade_ckpt_XXXXXX", sets[512], path[700], cmd[2048];
  close(mkstemp(log));
  cr_assert(mkdtemp(dir));
  const char *fp16 = "--set fp16.enabled=true --set train.eval_interval=0";
  snprintf(sets, sizeof sets, "%s --set train.steps=2 --set checkpoint.dir=%s", fp16, dir);
  cr_assert_eq(train(0, sets, log), 0);
  snprintf(path, sizeof path, "%s/step_00000002/rank_00000.ckpt", dir);
  snprintf(cmd, sizeof cmd, "cp %s %s/good.ckpt", path, dir);
  cr_assert_eq(test_sh(cmd), 0);
  char *out = NULL; /* the checkpoint as written resumes */
  int rc = train_capture(&out, "%s --set train.steps=3 --resume %s", fp16, dir);
  cr_assert_eq(rc, 0, "%s", out);
  free(out);
  const int64_t big = (int64_t)1 << 40; /* what (int) used to truncate */
  const struct {
    const char *name;
    int64_t i;
    double d;
    const char *want;
  } cases[] = {
      {"step", -1, 0, "step -1 is not in [0, 1073741824]"},
      {"step", big, 0, "step 1099511627776 is not in [0, 1073741824]"},
      {"opt_t", -1, 0, "opt_t -1 is not in [0, 2]"},
      {"opt_t", 3, 0, "opt_t 3 is not in [0, 2]"},
      {"loss_scale", 0, NAN, "loss_scale nan is not a finite number > 0"},
      {"loss_scale", 0, INFINITY, "loss_scale inf is not a finite number > 0"},
      {"loss_scale", 0, 0.0, "loss_scale 0 is not a finite number > 0"},
      {"loss_scale", 0, -8.0, "loss_scale -8 is not a finite number > 0"},
      {"good_steps", -1, 0, "good_steps -1 is not in [0, 2]"},
      {"good_steps", big, 0, "good_steps 1099511627776 is not in [0, 2]"},
      {"hysteresis_left", 0, 0, "hysteresis_left 0 is not in [1, 1048576]"},
      {"hysteresis_left", big, 0, "hysteresis_left 1099511627776 is not in [1, 1048576]"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    snprintf(cmd, sizeof cmd, "cp %s/good.ckpt %s", dir, path);
    cr_assert_eq(test_sh(cmd), 0);
    if (strcmp(cases[i].name, "loss_scale") == 0)
      forge_record(path, "loss_scale", PIPE_CKPT_BYTES, &cases[i].d, sizeof(double));
    else
      forge_record(path, cases[i].name, PIPE_CKPT_I64, &cases[i].i, 1);
    rc = train_capture(&out, "%s --set train.steps=4 --resume %s", fp16, dir);
    cr_assert(rc == 2 && strstr(out, "brigade: error: checkpoint ") && strstr(out, path) && strstr(out, cases[i].want),
              "%s: exit %d, expected '%s': %s", cases[i].name, rc, cases[i].want, out);
    free(out);
  }
  remove_tree(dir);
  unlink(log);
}

/* The rank files of one checkpoint hold the same step, opt_t and scaler state; a step directory
 * whose rank files come from different steps (stage 1's file of step 4 copied over step 2's)
 * is refused rather than loaded with the counters of whichever file was read last. */
Test(train, resume_refuses_rank_files_of_different_steps, .timeout = 120) {
  char log[] = "/tmp/brigade_train_XXXXXX", dir[] = "/tmp/brigade_ckpt_XXXXXX", sets[512], cmd[2048];
  close(mkstemp(log));
  cr_assert(mkdtemp(dir));
  snprintf(sets, sizeof sets, "--set train.eval_interval=0 --set train.steps=4 --set checkpoint.interval=2 "
           "--set pipeline.stages=2 --set checkpoint.dir=%s", dir);
  cr_assert_eq(train(2, sets, log), 0, "%s", sets);
  snprintf(cmd, sizeof cmd, "cp %s/step_00000004/rank_00001.ckpt %s/step_00000002/rank_00001.ckpt", dir, dir);
  cr_assert_eq(test_sh(cmd), 0);
  char *out = NULL;
  int rc = train_capture(&out, "--set train.steps=6 --resume %s/step_00000002", dir);
  cr_assert(rc == 2 && strstr(out, "brigade: error: checkpoint ") && strstr(out, "step_00000002 mixes rank files of different steps or runs: rank_0000") &&
                strstr(out, "has step 2") && strstr(out, "has step 4"),
            "exit %d: %s", rc, out);
  free(out);
  remove_tree(dir);
  unlink(log);
}

/* Start-up errors of some ranks only end the whole job at once with the error, exit 2: a
 * --log-json that rank 0 (the only rank that opens it) cannot write, under 2 replicas whose
 * first step would wait in a collective; and a checkpoint without stage 1's rank file, resumed
 * on 2 stages (rank 1 lacks its layers, rank 0 has all of its own). */
Test(train, start_up_error_of_one_rank_ends_the_job, .timeout = 120) {
  char dir[] = "/tmp/brigade_ckpt_XXXXXX", cmd[2048], *out = NULL;
  cr_assert(mkdtemp(dir));
  snprintf(cmd, sizeof cmd, TEST_MPI_ENV " timeout 60 mpirun -np 2 %s/brigade train configs/tiny.cfg --set train.steps=2 "
           "--log-json /nonexistent/brigade/log.json", test_build_dir());
  int rc = test_capture(cmd, &out);
  cr_assert_eq(rc, 2, "exit %d: %s", rc, out);
  const char *msg = "brigade: error: cannot write --log-json /nonexistent/brigade/log.json";
  const char *at = strstr(out, msg);
  cr_assert(at && !strstr(at + 1, msg) && !strstr(out, "timed out"), "%s", out);
  free(out);
  snprintf(cmd, sizeof cmd, TEST_MPI_ENV " timeout 60 mpirun -np 2 %s/brigade train configs/tiny.cfg --set train.steps=2 "
           "--set pipeline.stages=2 --set checkpoint.dir=%s 1>&2", test_build_dir(), dir);
  cr_assert_eq(test_sh(cmd), 0);
  snprintf(cmd, sizeof cmd, "rm %s/step_00000002/rank_00001.ckpt", dir);
  cr_assert_eq(test_sh(cmd), 0);
  snprintf(cmd, sizeof cmd, TEST_MPI_ENV " timeout 60 mpirun -np 2 %s/brigade train configs/tiny.cfg --set train.steps=4 "
           "--set pipeline.stages=2 --set train.timeout=30 --resume %s", test_build_dir(), dir);
  rc = test_capture(cmd, &out);
  cr_assert(rc == 2 && strstr(out, "brigade: error: checkpoint ") && strstr(out, "lacks 6 of this rank's 6 layers") &&
            !strstr(out, "timed out"), "exit %d: %s", rc, out);
  free(out);
  remove_tree(dir);
}

/* One bad config: exit 2, one line "brigade: error: ..." containing `needle`. */
static void bad_config(const char *body, const char *sets, const char *needle) {
  char path[] = "/tmp/brigade_bad_XXXXXX";
  FILE *f = fdopen(mkstemp(path), "w");
  fputs(body, f);
  fclose(f);
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 %s/brigade train %s %s > %s.out 2>&1", test_build_dir(), path, sets, path);
  int rc = test_sh(cmd);
  char out[4096] = "", outp[64];
  snprintf(outp, sizeof outp, "%s.out", path);
  f = fopen(outp, "r");
  size_t n = fread(out, 1, sizeof out - 1, f);
  out[n] = 0;
  fclose(f);
  cr_assert_eq(rc, 2, "exit %d for %s: %s", rc, needle, out);
  cr_assert(strncmp(out, "brigade: error: ", 16) == 0 && strstr(out, needle), "'%s' lacks '%s'", out, needle);
  cr_assert(strchr(out, '\n') == out + strlen(out) - 1, "more than one line: %s", out);
  unlink(path), unlink(outp);
}

#define MODEL "model = { layers = ( { type = \"embedding\"; }, { type = \"lm_head\"; }, { type = \"cross_entropy\"; } ); };\n"

Test(train, bad_configs_name_the_line) {
  bad_config("data = { path = \"data/kjv.txt\"; };\n" MODEL "train = {\n  stepz = 3; };\n", "", "unknown key 'train.stepz' (/tmp/brigade_bad_");
  bad_config("data = { path = \"data/kjv.txt\"; };\n" MODEL "train = {\n  steps = \"ten\"; };\n", "", "train.steps must be an integer");
  bad_config("data = { path = \"data/kjv.txt\"; };\n" MODEL, "--set train.steps=x", "train.steps must be an integer (--set train.steps)");
  bad_config("data = { path = \"/nonexistent/corpus.txt\"; };\n" MODEL, "", "/nonexistent/corpus.txt");
  bad_config("data = { path = \"data/kjv.txt\"; };\nmodel = { d_model = 8; n_heads = 2; layers = ( { type = \"embedding\"; },\n"
             "{ type = \"linear\"; out = 6; }, { type = \"transformer_block\"; }, { type = \"lm_head\"; }, { type = \"cross_entropy\"; } ); };\n",
             "", "do not chain");
  bad_config("data = { path = \"data/kjv.txt\"; };\n" MODEL "pipeline = { stages = 4; };\n", "", "does not divide");
  bad_config("data = { path = \"data/kjv.txt\"; };\n" MODEL "pipeline = { schedule = \"fast\"; };\n", "", "unknown schedule 'fast'");
  bad_config("data = { path = \"data/kjv.txt\"; };\n" MODEL "train = { steps = 1; };\n", "--resume /nonexistent", "no complete checkpoint");
  bad_config("data = {\n path = ; };\n", "", ":2: syntax error");
  bad_config("data = { path = \"data/kjv.txt\"; };\n" MODEL "pipeline = {\n  boundaries = [0, 1, 2]; };\n",
             "--set pipeline.stages=1", "pipeline.boundaries are given, but pipeline.partition_method is 'parameters'");
  /* a fraction too small for one token: the error says which fraction, not 0 */
  bad_config("data = { path = \"data/kjv.txt\"; val_fraction = 1e-300; };\n" MODEL "train = { eval_interval = 1; };\n", "",
             "data.val_fraction = 1e-300 leaves it no token of the 4404412");
  /* a 64-bit boundary that an int would read as 2, a valid cut */
  bad_config("data = { path = \"data/kjv.txt\"; };\n" MODEL "pipeline = { partition_method = \"explicit\";\n  boundaries = [0L, 4294967298L]; };\n",
             "--set pipeline.stages=1", "pipeline.boundaries[1] = 4294967298 is not a layer boundary in [0, 2] (/tmp/brigade_bad_");
  bad_config("data = { path = \"data/kjv.txt\"; };\n" MODEL "train_micro_batch_size_per_gpu = 1048576;\ngradient_accumulation_steps = 4096;\n",
             "", "1048576 x gradient_accumulation_steps 4096 = 4294967296 sequences per replica, more than 2147483647 (/tmp/brigade_bad_");
  /* B*T positions in one micro-batch are an int in the layers (2^32 wrapped to N = 0); before,
   * this went on to allocate the activation slots (exit 1 here, out of memory; a wrapped N
   * where the memory is there) */
  bad_config("data = { path = \"data/kjv.txt\"; };\nmodel = { seq_len = 65536; layers = ( { type = \"embedding\"; }, "
             "{ type = \"lm_head\"; }, { type = \"cross_entropy\"; } ); };\ntrain_micro_batch_size_per_gpu = 65536;\n",
             "", "train_micro_batch_size_per_gpu 65536 x model.seq_len 65536 = 4294967296 positions per micro-batch, "
             "more than 2147483647 (/tmp/brigade_bad_");
}

/* Greedy decoding written out here, apart from pipe/sample.c: the whole model, loss included, on
 * each window (the last T tokens, zeros after them), and the argmax of the probabilities the loss
 * leaves over the logits at the last real position. */
static void greedy_reference(const char *dir, const char *prompt, int ntok, char *text) {
  char *cfg_text = NULL;
  int64_t vocab = 0;
  cr_assert_eq(pipe_ckpt_model_config(dir, &cfg_text, &vocab), 0, "%s", core_error_msg());
  core_config *c;
  cr_assert_eq(core_config_load_string(&c, cfg_text, "saved.cfg"), 0, "%s", core_error_msg());
  free(cfg_text);
  layers_model m = {0};
  cr_assert_eq(layers_model_build(&m, c, (int)vocab), 0, "%s", core_error_msg());
  layers_chunk ch;
  cr_assert_eq(layers_chunk_init(&ch, &m, 0, m.n, kernels_cpu_ops(), 1, m.T, 1), 0);
  float *om = calloc(ch.nparams, sizeof(float)), *ov = calloc(ch.nparams, sizeof(float));
  pipe_topo topo = {0};
  pipe_runner rn = {.v = 1, .chunks = &ch, .opt_m = &om, .opt_v = &ov, .topo = &topo};
  long step;
  cr_assert_eq(pipe_ckpt_model_load(dir, &rn, &topo, &step), 0, "%s", core_error_msg());
  int n = (int)strlen(prompt), T = m.T, V = m.V;
  strcpy(text, prompt);
  int32_t *tok = calloc((size_t)T, sizeof(int32_t));
  for (int len = n; len < n + ntok; len++) {
    int start = len > T ? len - T : 0, w = len - start;
    memset(tok, 0, sizeof(int32_t) * (size_t)T);
    for (int i = 0; i < w; i++) tok[i] = (unsigned char)text[start + i];
    layers_chunk_set_batch(&ch, 0, tok, tok);
    layers_chunk_forward(&ch, 0);
    const float *p = layers_chunk_input(&ch, 0) + ch.out_off[m.n - 2] + (size_t)(w - 1) * V;
    int best = 0;
    for (int i = 1; i < V; i++) best = p[i] > p[best] ? i : best;
    text[len] = (char)best, text[len + 1] = 0;
  }
  free(tok), free(om), free(ov);
  layers_chunk_free(&ch);
  layers_model_free(&m);
  core_config_free(c);
}

Test(train, sample_from_a_checkpoint, .timeout = 120) {
  char dir[] = "/tmp/brigade_sample_XXXXXX", cmd[1024], out[] = "/tmp/brigade_sample_out_XXXXXX";
  cr_assert(mkdtemp(dir));
  close(mkstemp(out));
  snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 %s/brigade train configs/tiny.cfg --set train.steps=3 "
           "--set checkpoint.dir=%s 1>&2", test_build_dir(), dir);
  cr_assert_eq(test_sh(cmd), 0);
  snprintf(cmd, sizeof cmd, "%s/brigade sample --checkpoint %s --prompt 'In the beginning' --tokens 40 --seed 3 > %s",
           test_build_dir(), dir, out);
  cr_assert_eq(test_sh(cmd), 0);
  FILE *f = fopen(out, "rb");
  char text[256] = "";
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  cr_assert_eq(n, strlen("In the beginning") + 40 + 1, "%zu bytes: %s", n, text);
  cr_assert(strncmp(text, "In the beginning", 16) == 0);
  /* temperature 0 is greedy: the same text as decoding by hand (checked past the model's
   * window, T = 32 in tiny.cfg, so the window slides) */
  snprintf(cmd, sizeof cmd, "%s/brigade sample --checkpoint %s --prompt 'In the beginning' --tokens 30 "
           "--temperature 0 > %s", test_build_dir(), dir, out);
  cr_assert_eq(test_sh(cmd), 0);
  f = fopen(out, "rb");
  n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = 0;
  char want[256];
  greedy_reference(dir, "In the beginning", 30, want);
  strcat(want, "\n");
  cr_assert_str_eq(text, want);
  snprintf(cmd, sizeof cmd, "%s/brigade sample --checkpoint /nonexistent --prompt x 2>/dev/null", test_build_dir());
  cr_assert_eq(test_sh(cmd), 2);
  remove_tree(dir);
  unlink(out);
}

/* A checkpoint whose weights give NaN logits (written at step 1 of a run with lr 1e30, which
 * then stops on its non-finite gradient norm): sampling is an error (exit 1) naming the
 * checkpoint, greedy or not, where it printed NUL bytes (argmax over NaNs) or byte 255 (a NaN
 * softmax falls through to the last token) and exited 0. */
Test(train, sample_from_a_diverged_checkpoint_is_an_error, .timeout = 120) {
  char dir[] = "/tmp/brigade_sample_XXXXXX", cmd[1024];
  cr_assert(mkdtemp(dir));
  snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 %s/brigade train configs/tiny.cfg --set train.steps=3 "
           "--set optimizer.params.lr=1e30 --set checkpoint.interval=1 --set checkpoint.dir=%s 1>&2", test_build_dir(), dir);
  cr_assert_eq(test_sh(cmd), 1, "the run was meant to diverge after its first checkpoint");
  const char *temps[] = {"0", "0.8", "1e300"};
  for (int i = 0; i < 3; i++) {
    char *out;
    snprintf(cmd, sizeof cmd, "{ %s/brigade sample --checkpoint %s --prompt 'In the beginning' --tokens 5 "
             "--temperature %s 2>&1 1>/dev/null; }", test_build_dir(), dir, temps[i]); /* stderr only */
    int rc = test_capture(cmd, &out);
    cr_expect_eq(rc, 1, "temperature %s: exit %d:\n%s", temps[i], rc, out);
    cr_expect(strncmp(out, "brigade: error: ", 16) == 0 && strstr(out, dir) && strstr(out, "diverged"),
              "temperature %s: %s", temps[i], out);
    free(out);
  }
  remove_tree(dir);
}

/* ZeRO 0, 1, 2 with p=2, d=2 and p=1, d=4 give the single-process losses of the same global
 * batch within 1e-5 relative (fp32). */
Test(train, zero_stages_match_single_process, .timeout = 300) {
  run_log ref, got;
  char log[] = "/tmp/brigade_train_XXXXXX";
  close(mkstemp(log));
  cr_assert_eq(train(0, "--set gradient_accumulation_steps=4", log), 0);
  read_log(log, &ref);
  for (int z = 0; z <= 2; z++) {
    char sets[256];
    snprintf(sets, sizeof sets, "--set zero_optimization.stage=%d --set pipeline.stages=2 --set gradient_accumulation_steps=2", z);
    cr_assert_eq(train(4, sets, log), 0, "%s", sets);
    read_log(log, &got);
    cr_assert_eq(got.n, ref.n);
    close_to(&ref, &got, 0, sets);
    snprintf(sets, sizeof sets, "--set zero_optimization.stage=%d --set pipeline.stages=1 --set gradient_accumulation_steps=1", z);
    cr_assert_eq(train(4, sets, log), 0, "%s", sets);
    read_log(log, &got);
    close_to(&ref, &got, 0, sets);
  }
  /* ZeRO-2 with buckets smaller than a layer (one reduce-scatter per layer), overlapped */
  const char *z2 = "--set zero_optimization.stage=2 --set zero_optimization.reduce_bucket_size=1000 "
                   "--set zero_optimization.overlap_comm=true --set pipeline.stages=2 --set gradient_accumulation_steps=2";
  cr_assert_eq(train(4, z2, log), 0, "%s", z2);
  read_log(log, &got);
  close_to(&ref, &got, 0, z2);
  unlink(log);
}

/* A checkpoint saved at p=2, d=2, ZeRO-1 resumes at p=4, d=1, ZeRO-0 and at p=1, d=4, ZeRO-2:
 * the losses continue within 1e-5 of the original layout's own continuation. */
Test(train, checkpoints_reshape, .timeout = 300) {
  run_log full, rest;
  char log[] = "/tmp/brigade_train_XXXXXX", dir[] = "/tmp/brigade_reshape_XXXXXX", sets[512];
  close(mkstemp(log));
  cr_assert(mkdtemp(dir));
  const char *base = "--set scheduler.params.total_num_steps=20 --set train.eval_interval=0";
  snprintf(sets, sizeof sets, "%s --set zero_optimization.stage=1 --set pipeline.stages=2 --set gradient_accumulation_steps=2", base);
  cr_assert_eq(train(4, sets, log), 0);
  read_log(log, &full);
  snprintf(sets, sizeof sets, "%s --set zero_optimization.stage=1 --set pipeline.stages=2 --set gradient_accumulation_steps=2 "
           "--set train.steps=10 --set checkpoint.dir=%s", base, dir);
  char args[1024];
  snprintf(args, sizeof args, "train configs/tiny.cfg %s", sets);
  cr_assert_eq(test_mpirun(4, "brigade", args), 0);
  snprintf(sets, sizeof sets, "%s --set zero_optimization.stage=0 --set pipeline.stages=4 --set gradient_accumulation_steps=4 --resume %s", base, dir);
  cr_assert_eq(train(4, sets, log), 0, "%s", sets);
  read_log(log, &rest);
  cr_assert_eq(rest.n, 10);
  close_to(&full, &rest, 10, "p=4 d=1 ZeRO-0");
  snprintf(sets, sizeof sets, "%s --set zero_optimization.stage=2 --set pipeline.stages=1 --set gradient_accumulation_steps=1 --resume %s", base, dir);
  cr_assert_eq(train(4, sets, log), 0, "%s", sets);
  read_log(log, &rest);
  close_to(&full, &rest, 10, "p=1 d=4 ZeRO-2");
  remove_tree(dir);
  unlink(log);
}

/* Mixed precision (emulated: fp32 compute, values rounded to bf16/fp16 as they are stored):
 * the loss still falls and ends within 1% of fp32; a pipeline gives the single process's
 * losses bit for bit; an fp16 overflow skips the step on every rank and backs the scale off. */
Test(train, mixed_precision, .timeout = 300) {
  run_log f32, got, pipe;
  char log[] = "/tmp/brigade_train_XXXXXX";
  close(mkstemp(log));
  cr_assert_eq(train(0, "", log), 0);
  read_log(log, &f32);
  const char *modes[] = {"--set bf16.enabled=true", "--set fp16.enabled=true"};
  for (int k = 0; k < 2; k++) {
    cr_assert_eq(train(0, modes[k], log), 0);
    read_log(log, &got);
    cr_assert(fabs(got.loss[19] - f32.loss[19]) < 0.01 * f32.loss[19], "%s: %g vs fp32 %g", modes[k], got.loss[19], f32.loss[19]);
    char sets[256];
    snprintf(sets, sizeof sets, "%s --set pipeline.stages=2 --set pipeline.schedule=interleaved", modes[k]);
    cr_assert_eq(train(2, sets, log), 0);
    read_log(log, &pipe);
    same_bits(&got, &pipe, sets);
  }
  /* a scale of 2^26 overflows fp16 at once: skipped steps, halving scale, then training */
  cr_assert_eq(train(2, "--set fp16.enabled=true --set fp16.initial_scale_power=26 --set fp16.hysteresis=1 "
                        "--set pipeline.stages=2", log), 0);
  FILE *f = fopen(log, "r");
  char line[512];
  int skipped = 0, first_ok = -1, step = 0;
  double prev_scale = 1e300;
  while (fgets(line, sizeof line, f)) {
    step++;
    char *s = strstr(line, "\"skipped\":"), *sc = strstr(line, "\"loss_scale\":");
    cr_assert(s && sc, "no loss_scale/skipped in %s", line);
    double scale = atof(sc + 13);
    if (s[10] == '1') {
      skipped++;
      cr_assert(first_ok < 0, "a skipped step after training resumed");
      cr_assert(scale < prev_scale, "the scale did not back off: %s", line);
    } else if (first_ok < 0) {
      first_ok = step;
    }
    prev_scale = scale;
  }
  fclose(f);
  cr_assert(skipped >= 5 && first_ok > 0 && first_ok < 20, "skipped %d, first good step %d", skipped, first_ok);
  unlink(log);
}

/* The ZeRO accounting a run reports: optimizer state of ceil(P/d) parameters per rank (rank
 * 0's shard), and per step, in stage 1, a reduce-scatter and an all-gather of (d-1) shards each.
 * P is counted here independently, by building the model. */
Test(train, zero_accounting_matches_the_model, .timeout = 120) {
  core_config *c;
  cr_assert_eq(core_config_load(&c, "configs/tiny.cfg"), 0);
  layers_model m = {0};
  cr_assert_eq(layers_model_build(&m, c, 256), 0);
  double P = (double)layers_model_params(&m), d = 4, shard = ceil(P / d);
  layers_model_free(&m);
  core_config_free(c);
  char log[] = "/tmp/brigade_train_XXXXXX";
  close(mkstemp(log));
  cr_assert_eq(train(4, "--set zero_optimization.stage=1 --set pipeline.stages=1 --set gradient_accumulation_steps=1 "
                        "--set fp16.enabled=true", log), 0);
  core_json *j = first_step(log);
  double red = core_json_get(j, "dp_reduce_bytes")->num, gat = core_json_get(j, "dp_gather_bytes")->num;
  double state = core_json_get(j, "opt_state_bytes")->num, master = core_json_get(j, "master_bytes")->num;
  core_json_free(j);
  cr_assert_eq(state, 2 * 4 * shard, "optimizer state %.0f bytes, expected 2 x 4 x ceil(%.0f/4)", state, P);
  cr_assert_eq(master, 4 * shard, "master weights %.0f bytes", master);
  cr_assert_eq(red, 4 * shard * (d - 1), "reduce-scatter moved %.0f bytes, expected %.0f", red, 4 * shard * (d - 1));
  cr_assert_eq(gat, 4 * shard * (d - 1), "all-gather moved %.0f bytes", gat);
  unlink(log);
}

/* ZeRO-2 keeps no full-size gradient buffer: rank 0 holds its shard's accumulator, two buckets
 * (overlap_comm) of the largest layer (the bucket size asked is smaller) and the layers holding
 * the tied weight (embedding and head, summed across the pipeline before the data-parallel
 * group). Its reduce-scatters send every gradient outside its own shard once per micro-batch;
 * the kept layers are all-reduced once per step. Sizes come from building the model here. */
Test(train, zero2_gradient_memory_and_traffic, .timeout = 120) {
  core_config *c;
  cr_assert_eq(core_config_load(&c, "configs/tiny.cfg"), 0);
  layers_model m = {0};
  cr_assert_eq(layers_model_build(&m, c, 256), 0);
  double P = (double)layers_model_params(&m), d = 4, shard = ceil(P / d), kept = 0, largest = 0;
  for (int i = 0; i < m.n; i++) {
    const layer *l = &m.layers[i];
    if (i == 0 || l->tied_to >= 0) kept += (double)l->nparams; /* layer 0: the embedding */
    else if ((double)l->nparams > largest) largest = (double)l->nparams;
  }
  double emb = (double)m.layers[0].nparams; /* rank 0's shard starts with the kept embedding */
  layers_model_free(&m);
  core_config_free(c);
  cr_assert(shard > emb);
  char log[] = "/tmp/brigade_train_XXXXXX";
  close(mkstemp(log));
  cr_assert_eq(train(4, "--set zero_optimization.stage=2 --set zero_optimization.reduce_bucket_size=1000 "
                        "--set zero_optimization.overlap_comm=true --set pipeline.stages=1 "
                        "--set gradient_accumulation_steps=2", log), 0);
  core_json *j = first_step(log);
  double grads = core_json_get(j, "grad_bytes")->num, red = core_json_get(j, "dp_reduce_bytes")->num;
  double gat = core_json_get(j, "dp_gather_bytes")->num;
  core_json_free(j);
  cr_assert_eq(grads, 4 * (shard + 2 * largest + kept), "gradient bytes %.0f, expected 4 x (%.0f + 2 x %.0f + %.0f)",
               grads, shard, largest, kept);
  cr_assert(grads < 4 * P, "ZeRO-2 holds %.0f gradient bytes, a full buffer is %.0f", grads, 4 * P);
  double per_mb = 4 * ((P - kept) - (shard - emb)), tied = 2 * 4 * kept * (d - 1) / d;
  cr_assert_eq(red, 2 * per_mb + tied, "reduce bytes %.0f, expected 2 x %.0f + %.0f", red, per_mb, tied);
  cr_assert_eq(gat, 4 * (P - shard), "all-gather bytes %.0f", gat);
  unlink(log);
}

/* An inf injected into one rank's gradient skips that step on every rank and halves the scale;
 * training goes on. */
Test(train, one_rank_overflow_skips_everywhere, .timeout = 120) {
  char log[] = "/tmp/brigade_train_XXXXXX", args[1024];
  close(mkstemp(log));
  snprintf(args, sizeof args, "train configs/tiny.cfg --set fp16.enabled=true --set fp16.hysteresis=1 "
           "--set pipeline.stages=2 --set train.steps=8 --log-json %s", log);
  setenv("BRIGADE_INJECT_INF", "3:1", 1); /* world rank 1: stage 0's second replica */
  cr_assert_eq(test_mpirun(4, "brigade", args), 0);
  unsetenv("BRIGADE_INJECT_INF");
  FILE *f = fopen(log, "r");
  char line[1024];
  double scale[9] = {0}, lr[9] = {0};
  int skipped[9] = {0}, n = 0;
  while (fgets(line, sizeof line, f) && n < 8) {
    scale[n] = atof(strstr(line, "\"loss_scale\":") + 13);
    lr[n] = atof(strstr(line, "\"lr\":") + 5);
    skipped[n] = strstr(line, "\"skipped\":1") != NULL;
    n++;
  }
  fclose(f);
  cr_assert_eq(n, 8);
  for (int i = 0; i < 8; i++) cr_assert_eq(skipped[i], i == 2, "step %d skipped=%d", i + 1, skipped[i]);
  cr_assert_eq(scale[2], scale[1] / 2, "scale %g after the overflow, %g before", scale[2], scale[1]);
  /* the learning-rate schedule counts updates: the skipped step's rate comes again (warm-up) */
  cr_assert(lr[1] < lr[2], "warm-up: lr %g then %g", lr[1], lr[2]);
  cr_assert_eq(lr[3], lr[2], "the step after the skip has lr %g, the skipped one %g", lr[3], lr[2]);
  cr_assert(lr[4] > lr[3]);
  unlink(log);
}

/* The skipped flags of a --log-json file (fp16 runs), one per step. */
static int read_skipped(const char *log, int *skipped, int max) {
  FILE *f = fopen(log, "r");
  cr_assert(f, "no log %s", log);
  char line[1024];
  int n = 0;
  while (fgets(line, sizeof line, f) && n < max) {
    cr_assert(strstr(line, "\"skipped\":"), "no skipped flag in %s", line);
    skipped[n++] = strstr(line, "\"skipped\":1") != NULL;
  }
  fclose(f);
  return n;
}

/* fp16 gradient buffers overflow under ZeRO-2 as under ZeRO-0: a weight gradient beyond fp16's
 * range (65504) at a loss scale of 2^20 skips the step, whichever stage holds the gradients, and
 * the losses then agree within 1e-5 (one micro-batch per replica: each stage rounds the same
 * values once). */
Test(train, zero2_fp16_overflow_skips_as_zero0, .timeout = 120) {
  run_log ref, got;
  char log[] = "/tmp/brigade_train_XXXXXX";
  close(mkstemp(log));
  const char *fp16 = "--set fp16.enabled=true --set fp16.initial_scale_power=20 --set fp16.hysteresis=1 "
                     "--set pipeline.stages=1 --set gradient_accumulation_steps=1 --set train.eval_interval=0";
  int skip0[20], skip2[20];
  train_read(2, log, &ref, "%s --set zero_optimization.stage=0", fp16);
  int n0 = read_skipped(log, skip0, 20), any = 0;
  for (int i = 0; i < n0; i++) any += skip0[i];
  cr_assert(any > 0 && !skip0[n0 - 1], "ZeRO-0 skipped %d steps (expected some, then training)", any);
  for (int b = 0; b < 2; b++) { /* whole-layer buckets, and buckets of one layer overlapped */
    train_read(2, log, &got, "%s --set zero_optimization.stage=2%s", fp16,
               b ? " --set zero_optimization.reduce_bucket_size=1 --set zero_optimization.overlap_comm=true" : "");
    int n2 = read_skipped(log, skip2, 20);
    cr_assert_eq(n2, n0);
    for (int i = 0; i < n0; i++)
      cr_assert_eq(skip2[i], skip0[i], "step %d: ZeRO-2 skipped=%d, ZeRO-0 skipped=%d", i + 1, skip2[i], skip0[i]);
    close_to(&ref, &got, 0, "ZeRO-2 fp16");
  }
  unlink(log);
}

/* --log-json gives the fp16 loss scale exactly: the dynamic scale is a power of two at every
 * step, also above 2^20 (where six significant digits are not enough). */
Test(train, log_json_loss_scale_is_exact, .timeout = 60) {
  char log[] = "/tmp/brigade_train_XXXXXX";
  close(mkstemp(log));
  cr_assert_eq(train(0, "--set fp16.enabled=true --set fp16.initial_scale_power=24 --set fp16.hysteresis=1 "
                        "--set train.steps=4 --set train.eval_interval=0", log), 0);
  FILE *f = fopen(log, "r");
  char line[1024];
  int n = 0;
  while (fgets(line, sizeof line, f)) {
    const char *sc = strstr(line, "\"loss_scale\":");
    cr_assert(sc, "no loss_scale in %s", line);
    int e;
    double scale = atof(sc + 13);
    cr_assert(scale >= 1 << 20 && frexp(scale, &e) == 0.5, "step %d: loss scale %.17g is not a power of two (%s)",
              n + 1, scale, line);
    n++;
  }
  fclose(f);
  cr_assert_eq(n, 4);
  unlink(log);
}

/* The model on a backend whose memory the host cannot touch (fakedev: the CPU kernels behind
 * pointers that fault on a host dereference) trains to the CPU's losses bit for bit: every
 * batch, loss, transfer, tied-gradient exchange, ZeRO collective, mixed-precision master copy
 * and checkpoint goes through to_host / to_device. The layouts cover a pipeline with two chunks
 * per rank, data parallelism with ZeRO-1 and ZeRO-2 (buckets, overlapped), bf16 with activation
 * checkpointing, and a checkpoint saved and resumed. */
Test(train, device_memory_backend_matches_cpu, .timeout = 300) {
  char log[] = "/tmp/brigade_train_XXXXXX", dir[] = "/tmp/brigade_fakedev_XXXXXX";
  close(mkstemp(log));
  cr_assert(mkdtemp(dir));
  const struct { int np; const char *sets; } layouts[] = {
      {0, "--set bf16.enabled=true --set activation_checkpointing.enabled=true"},
      {2, "--set pipeline.stages=2 --set pipeline.schedule=interleaved --set pipeline.virtual_stages=2"},
      {4, "--set pipeline.stages=2 --set zero_optimization.stage=1 --set gradient_accumulation_steps=2"},
      {4, "--set pipeline.stages=2 --set zero_optimization.stage=2 --set gradient_accumulation_steps=2 "
          "--set zero_optimization.reduce_bucket_size=1000 --set zero_optimization.overlap_comm=true "
          "--set fp16.enabled=true --set pipeline.schedule=zb-h1"},
  };
  for (size_t k = 0; k < sizeof layouts / sizeof layouts[0]; k++) {
    run_log cpu, dev, a, b;
    int np = layouts[k].np;
    const char *base = layouts[k].sets;
    train_read(np, log, &cpu, "%s --set checkpoint.dir=%s/cpu%zu", base, dir, k);
    train_read(np, log, &dev, "%s --set backend=fakedev --set checkpoint.dir=%s/dev%zu", base, dir, k);
    same_bits(&cpu, &dev, base);
    /* the device run's checkpoint, resumed on fakedev, continues as the CPU's does on the CPU */
    train_read(np, log, &a, "%s --set train.steps=24 --resume %s/cpu%zu", base, dir, k);
    train_read(np, log, &b, "%s --set train.steps=24 --resume %s/dev%zu --set backend=fakedev", base, dir, k);
    cr_assert_eq(a.n, 4);
    same_bits(&a, &b, "resumed");
  }
  remove_tree(dir);
  unlink(log);
}

/* The device path of the pipeline's transfers: "fakedev" given a fake device communicator over
 * MPI (tests/pipe/worker_fakenccl.c, tests/common/fake_coll.h), so activations and gradients go
 * through send/recv tickets on the table's memory (no host copies) and ZeRO's collectives
 * through the coll table. The fake receives into a private buffer and copies it over only when
 * the worker waits for the ticket, and checks that a sent buffer is unchanged when its ticket is
 * waited for: a consumer that runs before its wait, or a slot overwritten while its send is in
 * flight, changes the losses or fails the run. Every layout trains to the CPU's losses bit for
 * bit; ranks that share a GPU fall back to MPI through host copies and say so. */
Test(train, device_transfers_match_cpu, .timeout = 300) {
  char log[] = "/tmp/brigade_train_XXXXXX";
  close(mkstemp(log));
  const struct { int np; const char *sets; } layouts[] = {
      {2, "--set pipeline.stages=2 --set gradient_accumulation_steps=3"},
      {2, "--set pipeline.stages=2 --set pipeline.schedule=interleaved --set pipeline.virtual_stages=2"},
      {2, "--set pipeline.stages=2 --set pipeline.schedule=dualpipev --set gradient_accumulation_steps=4"},
      {3, "--set pipeline.stages=3 --set pipeline.schedule=zb-h2 --set bf16.enabled=true"},
      {4, "--set pipeline.stages=2 --set zero_optimization.stage=2 --set gradient_accumulation_steps=2 "
          "--set zero_optimization.reduce_bucket_size=1000 --set zero_optimization.overlap_comm=true "
          "--set fp16.enabled=true --set pipeline.schedule=zb-h1"},
  };
  setenv("FAKE_COLL_EXPECT", "p2p", 1);
  for (size_t k = 0; k < sizeof layouts / sizeof layouts[0]; k++) {
    run_log cpu, dev;
    train_read(layouts[k].np, log, &cpu, "%s", layouts[k].sets);
    char sets[1024];
    /* step 2 traced: the worker then waits for each instruction's transfer and the device (as on
     * a GPU, where ops return before they run), which must not change a bit either */
    snprintf(sets, sizeof sets, "%s --set backend=fakedev --set trace.path=%s.trace.json --set trace.step=2",
             layouts[k].sets, log);
    cr_assert_eq(train_prog("tests/pipe/worker_fakenccl", layouts[k].np, sets, log), 0, "device path: %s failed",
                 layouts[k].sets);
    read_log(log, &dev);
    cr_assert_eq(cpu.n, 20);
    same_bits(&cpu, &dev, layouts[k].sets);
  }
  unsetenv("FAKE_COLL_EXPECT");
  char trace[1100];
  snprintf(trace, sizeof trace, "%s.trace.json", log);
  unlink(trace);
  snprintf(trace, sizeof trace, "%s.trace.json.svg", log);
  unlink(trace);
  /* ranks sharing a GPU: MPI through host copies, said once, the same losses */
  char cmd[2048], *out = NULL;
  snprintf(cmd, sizeof cmd,
           TEST_MPI_ENV " FAKE_COLL_SHARED=1 "
           "FAKE_COLL_EXPECT=none timeout 120 mpirun -np 2 %s/tests/pipe/worker_fakenccl train configs/tiny.cfg "
           "--set train.steps=4 --set pipeline.stages=2 --set backend=fakedev",
           test_build_dir());
  int rc = test_capture(cmd, &out);
  cr_assert_eq(rc, 0, "shared GPU run failed (exit %d):\n%s", rc, out);
  const char *line = "pipeline transfers: MPI through host copies (ranks of a pipeline share a GPU; NCCL needs one "
                     "GPU per rank)";
  const char *at = strstr(out, line);
  cr_assert(at && !strstr(at + 1, line), "\"%s\" not said exactly once in:\n%s", line, out);
  free(out);
  unlink(log);
}
