/* Checkpoints as a user meets them: resuming gives the uninterrupted losses bit for bit, under
 * any other layout and precision state; a reused directory, a missing layer, counters no run
 * writes and rank files of different steps are refused; sampling continues a prompt as greedy
 * decoding written out here does. (Suite "train", as these were in test_train.c.) */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/config.h"
#include "core/error.h"
#include "layers/layers.h"
#include "pipe/ckpt.h"
#include "pipe/ckpt_model.h"
#include "tests/common/mpirun.h"
#include "core/json.h"
#include "tests/pipe/train_run.h"

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
      if (strncmp(line, "{\"step\":0,", 10) == 0 && fgets(line, sizeof line, f) == NULL) break; /* step 0: val only */
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

/* A static fp16.loss_scale is the resumed run's own: a checkpoint saved at 128 resumed with 1024
 * runs at 1024 (it ran at 128 before, silently), saying that the checkpoint's differs; a
 * dynamic run resumed with a static scale runs at that scale, not the checkpoint's 2^16. */
Test(train, resume_keeps_a_static_fp16_loss_scale, .timeout = 60) {
  char dir[] = "/tmp/brigade_ckpt_XXXXXX";
  cr_assert(mkdtemp(dir));
  const char *saved[2] = {"--set fp16.loss_scale=128", ""};
  for (int k = 0; k < 2; k++) {
    char *out = NULL;
    int rc = train_capture(&out, "--set train.steps=2 --set train.eval_interval=0 --set fp16.enabled=true %s "
                           "--set checkpoint.dir=%s/%d", saved[k], dir, k);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    rc = train_capture(&out, "--set train.steps=3 --set train.eval_interval=0 --set fp16.enabled=true "
                       "--set fp16.loss_scale=1024 --resume %s/%d --log-json %s/log%d", dir, k, dir, k);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, k ? "was saved at fp16 loss scale 65536; this run's static fp16.loss_scale = 1024 applies"
                            : "was saved at fp16 loss scale 128; this run's static fp16.loss_scale = 1024 applies"),
              "no word of the checkpoint's scale: %s", out);
    free(out);
    char path[1100], line[1 << 14];
    snprintf(path, sizeof path, "%s/log%d", dir, k);
    FILE *f = fopen(path, "r");
    cr_assert(f && fgets(line, sizeof line, f));
    fclose(f);
    cr_assert(strstr(line, "\"step\":3,") && strstr(line, "\"loss_scale\":1024,"), "%s", line);
  }
  remove_tree(dir);
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
  cr_assert_eq(dropped, 4); /* name, params, adam_m, adam_v */
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
  pipe_ckpt_info info;
  cr_assert_eq(pipe_ckpt_model_load(dir, &rn, NULL, &info), 0, "%s", core_error_msg());
  int n = (int)strlen(prompt), T = m.T, V = m.V;
  strcpy(text, prompt);
  int32_t *tok = calloc((size_t)T, sizeof(int32_t));
  for (int len = n; len < n + ntok; len++) {
    int start = len > T ? len - T : 0, w = len - start;
    memset(tok, 0, sizeof(int32_t) * (size_t)T);
    for (int i = 0; i < w; i++) tok[i] = (unsigned char)text[start + i];
    layers_chunk_set_batch(&ch, 0, tok, tok);
    layers_chunk_forward(&ch, 0);
    const float *p = layers_chunk_layer_output(&ch, 0, m.n - 2) + (size_t)(w - 1) * V;
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

/* ZeRO-3 checkpoints are read and written shard by shard and reshape both ways: saved at p=2,
 * d=2, ZeRO-3 (interleaved), resumed at p=4, d=1, ZeRO-1; saved there, resumed at p=2, d=2,
 * ZeRO-3 (1F1B, kept gathered): both continue within 1e-5 of an uninterrupted run. */
Test(train, zero3_checkpoints_reshape, .timeout = 300) {
  run_log full, rest;
  char log[] = "/tmp/brigade_train_XXXXXX", dir[] = "/tmp/brigade_reshape_XXXXXX", dir2[] = "/tmp/brigade_reshape_XXXXXX";
  char sets[640], args[1024];
  close(mkstemp(log));
  cr_assert(mkdtemp(dir) && mkdtemp(dir2));
  const char *base = "--set scheduler.params.total_num_steps=20 --set train.eval_interval=0";
  const char *z3 = "--set zero_optimization.stage=3 --set pipeline.stages=2 --set gradient_accumulation_steps=2";
  const char *z1 = "--set zero_optimization.stage=1 --set pipeline.stages=4 --set gradient_accumulation_steps=4";
  snprintf(sets, sizeof sets, "%s %s", base, z1);
  cr_assert_eq(train(4, sets, log), 0);
  read_log(log, &full);
  snprintf(args, sizeof args, "train configs/tiny.cfg %s %s --set pipeline.schedule=interleaved "
           "--set pipeline.virtual_stages=2 --set train.steps=10 --set checkpoint.dir=%s", base, z3, dir);
  cr_assert_eq(test_mpirun(4, "brigade", args), 0);
  snprintf(sets, sizeof sets, "%s %s --resume %s", base, z1, dir);
  cr_assert_eq(train(4, sets, log), 0, "%s", sets);
  read_log(log, &rest);
  cr_assert_eq(rest.n, 10);
  close_to(&full, &rest, 10, "ZeRO-3 p=2 d=2 -> ZeRO-1 p=4 d=1");
  snprintf(args, sizeof args, "train configs/tiny.cfg %s %s --set train.steps=10 --set checkpoint.dir=%s", base, z1, dir2);
  cr_assert_eq(test_mpirun(4, "brigade", args), 0);
  snprintf(sets, sizeof sets, "%s %s --set zero_optimization.reshard_after_forward=false --resume %s", base, z3, dir2);
  cr_assert_eq(train(4, sets, log), 0, "%s", sets);
  read_log(log, &rest);
  cr_assert_eq(rest.n, 10);
  close_to(&full, &rest, 10, "ZeRO-1 p=4 d=1 -> ZeRO-3 p=2 d=2");
  /* loaded shard by shard: after the load each rank holds its shard (half of its chunk at d = 2)
   * and, in the step, the chunk gathered beside it: shard + chunk = 3 x shard */
  core_json *j = first_step(log);
  for (int q = 0; q < 2; q++) {
    double start = core_json_at(core_json_get(j, "param_startup_bytes"), (size_t)q)->num;
    double peak = core_json_at(core_json_get(j, "param_peak_bytes"), (size_t)q)->num;
    cr_assert(start > 0 && fabs(peak - 3 * start) <= 3 * 4.0, "rank %d: %g at start-up, %g at the peak", q, start, peak);
  }
  core_json_free(j);
  remove_tree(dir), remove_tree(dir2);
  unlink(log);
}
