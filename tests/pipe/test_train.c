/* Training end to end, as a user runs it: pipeline runs equal the single-process run bit for
 * bit (d = 1, fp32) for every family, data parallelism and ZeRO match within 1e-5, mixed
 * precision and the device paths, and bad configs are one clear error with exit 2. What is
 * saved and done from a checkpoint (resume, reshape, refusals, sampling) is test_resume.c. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/config.h"
#include "core/json.h"
#include "layers/layers.h"
#include "pipe/ckpt.h"
#include "core/error.h"
#include "tests/common/mpirun.h"
#include "tests/pipe/train_run.h"
#include "viz/viz.h"

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
      {4, "--set pipeline.stages=4 --set pipeline.schedule=zb-auto --set pipeline.mem_limit=6"},
      {4, "--set pipeline.stages=4 --set pipeline.schedule=v-half"},
      {4, "--set pipeline.stages=4 --set pipeline.schedule=v-min"},
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

/* Start-up errors of some ranks only end the whole job at once with the error, exit 2: a
 * --log-json that rank 0 (the only rank that opens it) cannot write, under 2 replicas whose
 * first step would wait in a collective; and a checkpoint whose stage-1 rank file holds none of
 * its layers, resumed on 2 stages (rank 1 lacks its layers, rank 0 has all of its own). */
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
  /* stage 1's rank file without its layers' records (a missing file is refused on every rank) */
  char path[700];
  snprintf(path, sizeof path, "%s/step_00000002/rank_00001.ckpt", dir);
  pipe_ckpt_reader r;
  cr_assert_eq(pipe_ckpt_open(&r, path), 0, "%s", core_error_msg());
  pipe_ckpt_writer w;
  cr_assert_eq(pipe_ckpt_create(&w, path), 0);
  for (uint32_t i = 0; i < r.nrec; i++)
    if (strncmp(r.rec[i].name, "layer.", 6) != 0)
      cr_assert_eq(pipe_ckpt_put(&w, r.rec[i].name, r.rec[i].dtype, r.rec[i].data, r.rec[i].count), 0);
  cr_assert_eq(pipe_ckpt_commit(&w), 0, "%s", core_error_msg());
  pipe_ckpt_close(&r);
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
  bad_config("data = { path = \"data/kjv.txt\"; };\n" MODEL "zero_optimization = { stage = 2;\n  prefetch = 2; };\n", "",
             "zero_optimization.prefetch applies to zero_optimization.stage = 3 (the stage is 2) (/tmp/brigade_bad_");
  bad_config("data = { path = \"data/kjv.txt\"; };\n" MODEL "zero_optimization = {\n  offload_optimizer = { device = \"cpu\"; }; };\n", "",
             "backend = \"cpu\" keeps everything in host memory already: nothing to offload (/tmp/brigade_bad_");
  bad_config("data = { path = \"data/kjv.txt\"; };\n" MODEL, "--set backend=fakedev --set zero_optimization.offload_optimizer.device=nvme",
             "zero_optimization.offload_optimizer.device = \"nvme\" is not \"cpu\" or \"none\"");
  bad_config("data = { path = \"data/kjv.txt\"; };\n" MODEL, "--set zero_optimization.stage=3 --set zero_optimization.prefetch=65",
             "zero_optimization.prefetch");
  bad_config("data = { path = \"data/kjv.txt\"; };\n" MODEL "pipeline = {\n  boundaries = [0, 1, 2]; };\n",
             "--set pipeline.stages=1", "pipeline.boundaries are given, but pipeline.partition_method is 'parameters'");
  /* a fraction too small for one token: the error says which fraction, not 0 */
  bad_config("data = { path = \"data/kjv.txt\"; val_fraction = 1e-300; };\n" MODEL "train = { eval_interval = 1; };\n", "",
             "data.val_fraction = 1e-300 leaves it no token of the 4404412");
  /* a 64-bit boundary that an int would read as 2, a valid cut */
  bad_config("data = { path = \"data/kjv.txt\"; };\n" MODEL "pipeline = { partition_method = \"explicit\";\n  boundaries = [0L, 4294967298L]; };\n",
             "--set pipeline.stages=1", "pipeline.boundaries[1] = 4294967298 is not a layer boundary in [0, 3] (/tmp/brigade_bad_");
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

/* Element k of array `key` of the first record of a --log-json file. */
static double first_record(const char *log, const char *key, int k) {
  core_json *j = first_step(log);
  const core_json *a = core_json_get(j, key);
  cr_assert(a && (size_t)k < core_json_len(a), "no %s[%d] in %s", key, k, log);
  double x = core_json_at(a, (size_t)k)->num;
  core_json_free(j);
  return x;
}

/* ZeRO-3: parameters sharded, gathered by the schedule's GATHER_PARAMS before each run of a
 * chunk's ops (or kept gathered over the step), trains to the single-process losses within 1e-5
 * for 1F1B, interleaved and ZB-H1 at p=2 x d=2 and at d=4, resharding or not, on the CPU and on
 * fakedev. Each rank starts with its shard only (1/d of the parameters), its measured peak
 * (shards + chunks gathered) is the memory model's figure to the byte, and the bytes its
 * all-gathers brought in are what the simulator counts for the program's gathers. */
Test(train, zero3_matches_single_process, .timeout = 300) {
  run_log ref, got;
  char log[] = "/tmp/brigade_train_XXXXXX";
  close(mkstemp(log));
  train_read(0, log, &ref, "--set gradient_accumulation_steps=4");
  double whole[2];
  train_read(2, log, &got, "--set gradient_accumulation_steps=2 --set pipeline.stages=2");
  for (int q = 0; q < 2; q++) whole[q] = first_record(log, "param_startup_bytes", q);
  const char *layouts[] = {
      "--set pipeline.stages=2 --set gradient_accumulation_steps=2 --set pipeline.schedule=1f1b",
      "--set pipeline.stages=2 --set gradient_accumulation_steps=2 --set pipeline.schedule=interleaved "
      "--set pipeline.virtual_stages=2",
      "--set pipeline.stages=2 --set gradient_accumulation_steps=2 --set pipeline.schedule=zb-h1",
      "--set pipeline.stages=1 --set gradient_accumulation_steps=1 --set pipeline.schedule=1f1b",
      "--set pipeline.stages=1 --set gradient_accumulation_steps=1 --set pipeline.schedule=interleaved "
      "--set pipeline.virtual_stages=2",
      "--set pipeline.stages=1 --set gradient_accumulation_steps=1 --set pipeline.schedule=zb-h1"};
  const char *backends[] = {"", "--set backend=fakedev"};
  for (int b = 0; b < 2; b++)
    for (size_t k = 0; k < sizeof layouts / sizeof layouts[0]; k++)
      for (int keep = 0; keep < 2; keep++) {
        char sets[512];
        snprintf(sets, sizeof sets, "--set zero_optimization.stage=3 --set zero_optimization.reshard_after_forward=%s "
                 "%s %s", keep ? "false" : "true", layouts[k], backends[b]);
        train_read(4, log, &got, "%s", sets);
        cr_assert_eq(got.n, ref.n, "%s", sets);
        close_to(&ref, &got, 0, sets);
        int p = k >= 3 ? 1 : 2, d = 4 / p;
        for (int q = 0; q < p; q++) {
          double start = first_record(log, "param_startup_bytes", q), peak = first_record(log, "param_peak_bytes", q);
          cr_assert_eq(peak, first_record(log, "param_predicted_bytes", q), "%s: rank %d measured %g", sets, q, peak);
          cr_assert_leq(peak, first_record(log, "param_allocated_bytes", q));
          if (p == 2) /* a shard of each chunk: 1/d of the rank's parameters, padded by less than a float per replica */
            cr_assert(start * d >= whole[q] && start * d < whole[q] + 4.0 * d * 2, "%s: rank %d holds %g of %g at start-up",
                      sets, q, start, whole[q]);
          cr_assert_gt(peak, start, "%s: nothing gathered", sets);
          /* the step's all-gathers brought in what the simulator counts for the program's gathers */
          double moved = first_record(log, "param_gather_bytes", q);
          cr_assert_eq(moved, first_record(log, "param_gather_predicted_bytes", q), "%s: rank %d gathered %g", sets, q, moved);
          cr_assert_gt(moved, 0);
        }
      }
  unlink(log);
}

/* ZeRO-Offload on a device backend (fakedev: any host pointer reaching a device op aborts):
 * the optimizer state, fp32 master and update on the host, with every ZeRO stage at p=2 x d=2
 * and in one process, train to the CPU's losses within 1e-5, and the log counts no optimizer
 * state and no master weights in the backend's memory, all of it in the host's. */
Test(train, offload_matches_the_cpu, .timeout = 300) {
  run_log ref, got;
  char log[] = "/tmp/brigade_train_XXXXXX";
  close(mkstemp(log));
  train_read(0, log, &ref, "--set gradient_accumulation_steps=4");
  const char *off = "--set backend=fakedev --set zero_optimization.offload_optimizer.device=cpu";
  for (int z = -1; z <= 3; z++) {
    char sets[512];
    if (z < 0) snprintf(sets, sizeof sets, "%s --set gradient_accumulation_steps=4", off);
    else snprintf(sets, sizeof sets, "%s --set zero_optimization.stage=%d --set pipeline.stages=2 "
                  "--set gradient_accumulation_steps=2", off, z);
    train_read(z < 0 ? 0 : 4, log, &got, "%s", sets);
    cr_assert_eq(got.n, ref.n, "%s", sets);
    close_to(&ref, &got, 0, sets);
    core_json *j = first_step(log);
    cr_assert_eq(core_json_get(j, "opt_state_bytes")->num, 0, "%s", sets);
    cr_assert_eq(core_json_get(j, "master_bytes")->num, 0, "%s", sets);
    cr_assert_gt(core_json_get(j, "opt_state_host_bytes")->num, 0, "%s", sets);
    cr_assert_eq(core_json_get(j, "master_host_bytes")->num, core_json_get(j, "opt_state_host_bytes")->num / 2, "%s", sets);
    core_json_free(j);
  }
  unlink(log);
}

/* The user's layer names, however much they look like brigade's own (a number, "id", a repeat's
 * derived name, the same name twice), are what the log and the checkpoint show at every ZeRO
 * stage and layout: partitioning never rewrites them. */
Test(train, user_layer_names_kept_at_every_stage, .timeout = 120) {
  char cfgp[] = "/tmp/brigade_names_XXXXXX", dir[] = "/tmp/brigade_names_ck_XXXXXX";
  FILE *f = fdopen(mkstemp(cfgp), "w");
  cr_assert(f && mkdtemp(dir));
  fputs("train_micro_batch_size_per_gpu = 2;\ngradient_accumulation_steps = 2;\n"
        "train = { steps = 2; eval_interval = 0; };\ndata = { path = \"data/kjv.txt\"; };\n"
        "model = { seq_len = 16; d_model = 16; n_heads = 2; layers = (\n"
        "  { type = \"embedding\"; name = \"0\"; },\n"
        "  { type = \"transformer_block\"; name = \"id\"; },\n"
        "  { type = \"transformer_block\"; name = \"block.1\"; },\n"
        "  { type = \"transformer_block\"; name = \"dup\"; },\n"
        "  { type = \"transformer_block\"; name = \"dup\"; },\n"
        "  { type = \"transformer_block\"; name = \"7\"; repeat = 2; },\n"
        "  { type = \"layernorm\"; name = \"layer.3\"; },\n"
        "  { type = \"lm_head\"; name = \"stage\"; tie = \"0\"; },\n"
        "  { type = \"cross_entropy\"; name = \"x\"; } ); };\n", f);
  fclose(f);
  const char *names[] = {"0", "id", "block.1", "dup", "dup", "7.0", "7.1", "layer.3", "stage", "x"};
  const char *layouts[] = {"--set zero_optimization.stage=3 --set pipeline.stages=2 --set pipeline.schedule=interleaved "
                           "--set pipeline.virtual_stages=2",
                           "--set zero_optimization.stage=1 --set pipeline.stages=4"};
  for (int k = 0; k < 2; k++) {
    char cmd[2048], *out = NULL, sub[256];
    snprintf(cmd, sizeof cmd, TEST_MPI_ENV " timeout 100 mpirun -np 4 %s/brigade train %s %s --set checkpoint.dir=%s/%d 2>&1",
             test_build_dir(), cfgp, layouts[k], dir, k);
    int rc = test_capture(cmd, &out);
    cr_assert_eq(rc, 0, "%s", out);
    /* the start-up log names each virtual stage's first and last layer as the user did */
    cr_assert(strstr(out, "layers 0..") && strstr(out, "(0 .. "), "%s", out);
    cr_assert(strstr(out, " .. x)"), "%s", out);
    free(out);
    /* every layer's record carries its name, whichever rank file holds it */
    int found[10] = {0};
    for (int r = 0; r < 4; r++) {
      char path[400];
      snprintf(sub, sizeof sub, "%s/%d/step_00000002", dir, k);
      snprintf(path, sizeof path, "%s/rank_%05d.ckpt", sub, r);
      if (access(path, R_OK) != 0) continue;
      pipe_ckpt_reader rd;
      cr_assert_eq(pipe_ckpt_open(&rd, path), CORE_OK, "%s", core_error_msg());
      for (int i = 0; i < 10; i++) {
        char key[64];
        snprintf(key, sizeof key, "layer.%d.name", i);
        const pipe_ckpt_record *rec = pipe_ckpt_find(&rd, key);
        if (!rec) continue;
        found[i]++;
        cr_assert(rec->count == strlen(names[i]) && !memcmp(rec->data, names[i], rec->count), "%s: %s is '%.*s', not '%s'",
                  path, key, (int)rec->count, (const char *)rec->data, names[i]);
      }
      pipe_ckpt_close(&rd);
    }
    for (int i = 0; i < 10; i++) cr_assert_eq(found[i], 1, "layer %d's name is in %d rank files", i, found[i]);
  }
  remove_tree(dir);
  unlink(cfgp);
}

/* Several machines: the path two nodes take, Open MPI's TCP transport with ranks placed from a
 * hostfile (here one host, four slots), trains p=2 x d=2 ZeRO-2 to the shared-memory run's losses
 * within 1e-5, so every CI run exercises the multi-node transport. */
Test(train, hostfile_over_tcp_matches_shared_memory, .timeout = 200) {
  run_log shm, tcp;
  char log[] = "/tmp/brigade_train_XXXXXX", hosts[] = "/tmp/brigade_hosts_XXXXXX", cmd[2048];
  close(mkstemp(log));
  FILE *f = fdopen(mkstemp(hosts), "w");
  fputs("localhost slots=4\n", f);
  fclose(f);
  const char *sets = "--set pipeline.stages=2 --set zero_optimization.stage=2 --set gradient_accumulation_steps=2";
  train_read(4, log, &shm, "%s", sets);
  snprintf(cmd, sizeof cmd, TEST_MPI_ENV " timeout 150 mpirun --hostfile %s --mca btl tcp,self -np 4 %s/brigade train "
           "configs/tiny.cfg --set train.steps=20 --set train.eval_interval=10 %s --log-json %s 2>&1", hosts,
           test_build_dir(), sets, log);
  char *out = NULL;
  cr_assert_eq(test_capture(cmd, &out), 0, "%s", cmd);
  for (int r = 0; r < 4; r++) { /* the start-up log's rank map: host, local rank, device */
    char want[96];
    snprintf(want, sizeof want, "rank %d (stage %d, replica %d): host ", r, r / 2, r % 2);
    const char *at = strstr(out, want);
    cr_assert(at, "no rank map line for rank %d: %s", r, out);
    snprintf(want, sizeof want, ", local rank %d of 4, CPU", r);
    cr_assert(strstr(at, want) && strstr(at, want) < strchr(at, '\n'), "rank %d's line lacks '%s': %s", r, want, out);
  }
  free(out);
  read_log(log, &tcp);
  cr_assert_eq(tcp.n, shm.n);
  close_to(&shm, &tcp, 0, "hostfile, --mca btl tcp,self");
  unlink(log), unlink(hosts);
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
  cr_assert(f32.n == 20 && f32.loss[19] < f32.loss[0], "fp32: %d steps, loss %g -> %g", f32.n, f32.loss[0], f32.loss[19]);
  const char *modes[] = {"--set bf16.enabled=true", "--set fp16.enabled=true"};
  for (int k = 0; k < 2; k++) {
    cr_assert_eq(train(0, modes[k], log), 0);
    read_log(log, &got);
    cr_assert(got.n == 20 && got.loss[19] < got.loss[0], "%s: %d steps, loss %g -> %g", modes[k], got.n, got.loss[0],
              got.loss[19]);
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
  char line[4096];
  int skipped = 0, first_ok = -1, step = 0;
  double prev_scale = 1e300;
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "{\"step\":0,", 10) == 0) continue; /* the val loss before the first update */
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

/* The fp16 dynamic scaler is DeepSpeed's (DynamicLossScaler, consecutive_hysteresis false): given
 * the run's own overflows, every step's logged scale (after the step) is the one DeepSpeed's
 * update_scale gives: the first hysteresis - 1 overflows leave the scale, each later one halves
 * it, and only a growth after loss_scale_window clean steps starts the count again. Scales of
 * 2^19 overflow the tiny GPT's fp16 gradients at once; a window of 1 or 2 grows the scale back
 * into overflows, so hysteresis is exercised after growth too. */
Test(train, fp16_scaler_follows_deepspeed, .timeout = 120) {
  char log[] = "/tmp/brigade_train_XXXXXX";
  close(mkstemp(log));
  const int cases[][2] = {{2, 1000}, {3, 1000}, {2, 1}, {3, 2}}; /* hysteresis, window */
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    int h = cases[k][0], window = cases[k][1];
    char sets[256];
    snprintf(sets, sizeof sets, "--set fp16.enabled=true --set fp16.initial_scale_power=19 --set fp16.hysteresis=%d "
             "--set fp16.loss_scale_window=%d --set train.eval_interval=0", h, window);
    cr_assert_eq(train(0, sets, log), 0, "%s failed", sets);
    FILE *f = fopen(log, "r");
    cr_assert(f);
    char line[1 << 14];
    double cur = 524288; /* DeepSpeed's state */
    int hyst = h, iter = 0, last_overflow = -1, overflows = 0, grown_then_overflow = 0, grown = 0;
    while (fgets(line, sizeof line, f)) {
      if (strncmp(line, "{\"step\":0,", 10) == 0) continue;
      char *sk = strstr(line, "\"skipped\":"), *sc = strstr(line, "\"loss_scale\":");
      cr_assert(sk && sc, "no loss_scale/skipped in %s", line);
      int overflow = sk[10] == '1';
      cr_assert(!overflow || strstr(line, "\"grad_norm\":null"), "%s: a skipped step logs a norm: %.200s", sets, line);
      if (overflow) {
        overflows++, grown_then_overflow |= grown;
        if (h == 1 || hyst == 1) cur = cur / 2 > 1 ? cur / 2 : 1;
        else hyst--;
        last_overflow = iter;
      } else if ((iter - last_overflow) % window == 0) {
        hyst = h, cur *= 2, grown = 1;
      }
      iter++;
      cr_assert_eq(atof(sc + 13), cur, "%s, step %d: scale %s, DeepSpeed's %g", sets, iter, sc + 13, cur);
    }
    fclose(f);
    cr_assert_eq(iter, 20, "%s: %d steps logged", sets, iter);
    cr_assert_geq(overflows, h + 1, "%s: %d overflows, too few to test the hysteresis", sets, overflows);
    if (window <= 2) cr_assert(grown_then_overflow, "%s: no overflow after a growth", sets);
  }
  unlink(log);
}

/* bf16 on the CPU over 50 steps of the tiny GPT: on a CPU with AVX512-BF16 the GEMMs run on bf16
 * operands (kernels/cpu/bgemm.c), elsewhere in fp32 (the log says which; the tolerance holds for
 * both). The stated tolerance against fp32: every step's loss within 5% (bf16's rounding moves a
 * loss spike, 3.2% at step 23 on the machine where it was set), the mean relative difference
 * over the 50 steps under 0.5% (0.1% measured), the last 10 steps' mean within 1% (0.07%). */
Test(train, bf16_tracks_fp32_over_50_steps, .timeout = 300) {
  run_log f32, b16;
  char log[] = "/tmp/brigade_train_XXXXXX";
  close(mkstemp(log));
  train_read(0, log, &f32, "--set train.steps=50");
  train_read(0, log, &b16, "--set train.steps=50 --set bf16.enabled=true");
  cr_assert(f32.n == 50 && b16.n == 50, "%d and %d steps logged", f32.n, b16.n);
  double sum = 0, tail_f = 0, tail_b = 0;
  int differ = 0;
  for (int i = 0; i < 50; i++) {
    double rel = fabs(b16.loss[i] - f32.loss[i]) / f32.loss[i];
    cr_assert(rel < 0.05, "step %d: bf16 %g, fp32 %g", i + 1, b16.loss[i], f32.loss[i]);
    sum += rel, differ += b16.loss[i] != f32.loss[i];
    if (i >= 40) tail_f += f32.loss[i], tail_b += b16.loss[i];
  }
  cr_assert(sum / 50 < 0.005, "mean relative difference %g", sum / 50);
  cr_assert(fabs(tail_b - tail_f) / tail_f < 0.01, "last 10 steps: bf16 %g, fp32 %g", tail_b / 10, tail_f / 10);
  cr_assert(differ > 10, "bf16 gave fp32's losses at %d of 50 steps: no rounding happened", 50 - differ);
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
  double P = (double)layers_model_params(&m), d = 4;
  for (int i = 0; i < m.n; i++) /* one stage: the tied head shares the embedding's wte, no copy */
    if (m.layers[i].tied_to >= 0) P -= (double)m.layers[i].nparams;
  double shard = ceil(P / d);
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

/* Each step's ZeRO traffic, as --log-json reports it, under post-validation: a step's line is held
 * until the next step has checked its update, and read the counters only then, so step 1 showed
 * two steps' bytes and the last none. The same bytes every step, and the synchronous run's. */
static void step_traffic(const char *log, double *red, double *gat, int n) {
  FILE *f = fopen(log, "r");
  static char line[1 << 14];
  int k = 0;
  while (f && fgets(line, sizeof line, f)) {
    if (strncmp(line, "{\"step\":0,", 10) == 0) continue;
    core_json *j;
    cr_assert_eq(core_json_parse(line, strlen(line), log, &j), 0);
    cr_assert_lt(k, n, "more steps than %d in %s", n, log);
    red[k] = core_json_get(j, "dp_reduce_bytes")->num, gat[k] = core_json_get(j, "dp_gather_bytes")->num, k++;
    core_json_free(j);
  }
  if (f) fclose(f);
  cr_assert_eq(k, n, "%d steps in %s", k, log);
}

Test(train, zero_traffic_per_step_under_post_validation, .timeout = 120) {
  char log[] = "/tmp/brigade_train_XXXXXX";
  close(mkstemp(log));
  double red[2][4], gat[2][4];
  for (int pv = 0; pv < 2; pv++) {
    char sets[256];
    snprintf(sets, sizeof sets, "--set pipeline.stages=2 --set pipeline.schedule=zb-h1 --set zero_optimization.stage=3 "
             "--set gradient_accumulation_steps=2 --set train.steps=4 --set optimizer.post_validation=%s",
             pv ? "true" : "false");
    cr_assert_eq(train(4, sets, log), 0, "%s", sets);
    step_traffic(log, red[pv], gat[pv], 4);
  }
  for (int i = 0; i < 4; i++) {
    cr_assert(red[1][i] > 0 && red[1][i] == red[0][i] && red[1][i] == red[1][0],
              "step %d: post-validation reduced %.0f bytes, synchronous %.0f, step 1 %.0f", i + 1, red[1][i], red[0][i], red[1][0]);
    cr_assert(gat[1][i] == gat[0][i], "step %d: post-validation gathered %.0f bytes, synchronous %.0f", i + 1, gat[1][i], gat[0][i]);
  }
  unlink(log);
}

/* The embedding on one stage, the tied head on another, 3 replicas each: the two copies of wte
 * stay equal to the bit at every ZeRO stage. The pipeline's tied exchange gives both the same
 * gradient, but an all-reduce of a whole chunk's buffer added each element in an order that
 * depends on the buffer's size and the element's place in it, and the two chunks differ: after 20
 * steps at ZeRO-0, 1867 of 8192 values differed (ZeRO-2/3: 221). Read from the checkpoint, which
 * holds both copies. */
Test(train, tied_copies_stay_equal_across_replicas, .timeout = 300) {
  char dir[] = "/tmp/brigade_tiedcopy_XXXXXX";
  cr_assert(mkdtemp(dir));
  for (int z = 0; z <= 3; z++) {
    char sets[512], path[2][600], log[700];
    snprintf(log, sizeof log, "%s/log", dir);
    snprintf(sets, sizeof sets, "--set pipeline.stages=2 --set zero_optimization.stage=%d --set gradient_accumulation_steps=2 "
             "--set train.steps=8 --set train.eval_interval=0 --set checkpoint.dir=%s/z%d", z, dir, z);
    cr_assert_eq(train(6, sets, log), 0, "%s", sets);
    float *w[2];
    size_t n = 0;
    for (int r = 0; r < 2; r++) {
      snprintf(path[r], sizeof path[r], "%s/z%d/step_00000008/rank_%05d.ckpt", dir, z, r);
      pipe_ckpt_reader rd;
      cr_assert_eq(pipe_ckpt_open(&rd, path[r]), CORE_OK, "%s", core_error_msg());
      const pipe_ckpt_record *head = pipe_ckpt_find(&rd, r ? "layer.8.params" : "layer.0.params");
      cr_assert(head, "%s: no record of the %s", path[r], r ? "head (layer 8)" : "embedding (layer 0)");
      if (r) n = head->count; /* the head's copy: [V, C], the embedding's wte its first V x C */
      w[r] = malloc(sizeof(float) * head->count);
      cr_assert_eq(pipe_ckpt_get(&rd, r ? "layer.8.params" : "layer.0.params", PIPE_CKPT_F32, w[r], head->count), CORE_OK);
      pipe_ckpt_close(&rd);
    }
    size_t differ = 0;
    for (size_t i = 0; i < n; i++) differ += memcmp(&w[0][i], &w[1][i], sizeof(float)) != 0;
    cr_assert(n > 0 && differ == 0, "ZeRO-%d: %zu of %zu values of wte differ from the head's copy", z, differ, n);
    free(w[0]), free(w[1]);
  }
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  test_sh(cmd);
}

/* ZeRO-2 keeps no full-size gradient buffer: rank 0 holds its shard's accumulator, two buckets
 * (overlap_comm) of the largest layer (the bucket size asked is smaller) and the layer holding
 * the tied weight (the embedding; the head, in the same single stage, shares its wte and adds
 * its gradient into wte's before the data-parallel group). Its reduce-scatters send every gradient outside its own shard once per micro-batch;
 * the kept layers are all-reduced once per step. Sizes come from building the model here. */
Test(train, zero2_gradient_memory_and_traffic, .timeout = 120) {
  core_config *c;
  cr_assert_eq(core_config_load(&c, "configs/tiny.cfg"), 0);
  layers_model m = {0};
  cr_assert_eq(layers_model_build(&m, c, 256), 0);
  double P = (double)layers_model_params(&m), d = 4, kept = 0, largest = 0;
  for (int i = 0; i < m.n; i++) {
    const layer *l = &m.layers[i];
    if (l->tied_to >= 0) P -= (double)l->nparams; /* one stage: the head shares wte, no copy to keep */
    else if (i == 0) kept += (double)l->nparams;  /* layer 0: the embedding */
    else if ((double)l->nparams > largest) largest = (double)l->nparams;
  }
  double shard = ceil(P / d);
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
    if (strncmp(line, "{\"step\":0,", 10) == 0) continue; /* the val loss before the first update */
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
    if (strncmp(line, "{\"step\":0,", 10) == 0) continue; /* the val loss before the first update */
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

/* What training holds is what the simulator counts. A slot's aside part (attention
 * probabilities, the MLP's pre-activation and the like) goes back at a split backward's I, so a
 * pending W holds only what the weight gradient reads; each rank's measured activation peak
 * (the run's first --log-json record) equals, to the byte, `brigade sim CONFIG`'s
 * peak_activation_bytes for the same program, and the runner's own prediction beside it. */
Test(train, measured_activation_peak_is_the_simulators, .timeout = 300) {
  const struct { int np; const char *sets; } layouts[] = {
      {4, "--set pipeline.stages=4 --set pipeline.schedule=zb-h1"},
      {3, "--set pipeline.stages=3 --set pipeline.schedule=zb-h2"},
      {2, "--set pipeline.stages=2 --set pipeline.schedule=zb-v"},
      {4, "--set pipeline.stages=4 --set pipeline.schedule=zb-auto --set pipeline.mem_limit=6"},
      {4, "--set pipeline.stages=4 --set pipeline.schedule=v-half"},
      {4, "--set pipeline.stages=4 --set pipeline.schedule=v-min"},
      {4, "--set pipeline.stages=4 --set pipeline.schedule=1f1b"},
  };
  char log[] = "/tmp/brigade_act_XXXXXX";
  close(mkstemp(log));
  for (size_t k = 0; k < sizeof layouts / sizeof layouts[0]; k++) {
    char sets[512], args[1024], cmd[1400], *out = NULL;
    snprintf(sets, sizeof sets, "--set gradient_accumulation_steps=8 %s", layouts[k].sets);
    snprintf(args, sizeof args, "train configs/tiny.cfg --set train.steps=1 --set train.eval_interval=0 %s --log-json %s",
             sets, log);
    cr_assert_eq(test_mpirun(layouts[k].np, "brigade", args), 0, "%s failed", sets);
    core_json *rec, *sim;
    cr_assert_eq(core_json_parse_file(log, &rec), 0, "%s: bad log", sets);
    snprintf(cmd, sizeof cmd, "%s/brigade sim configs/tiny.cfg %s --json 2>/dev/null", test_build_dir(), sets);
    cr_assert_eq(test_capture(cmd, &out), 0, "%s failed", cmd);
    cr_assert_eq(core_json_parse(out, strlen(out), "sim", &sim), 0, "%s: bad json", cmd);
    const core_json *peak = core_json_get(rec, "activation_peak_bytes"), *pred = core_json_get(rec, "activation_predicted_bytes");
    const core_json *alloc = core_json_get(rec, "activation_allocated_bytes"), *ranks = core_json_get(sim, "ranks");
    cr_assert(peak && pred && alloc && ranks, "%s: the log or sim lacks the activation figures", sets);
    cr_assert_eq(core_json_len(peak), (size_t)layouts[k].np);
    for (int r = 0; r < layouts[k].np; r++) {
      double got = core_json_at(peak, r)->num, p = core_json_at(pred, r)->num, a = core_json_at(alloc, r)->num, s;
      cr_assert_eq(core_json_get_number(core_json_at(ranks, r), "peak_activation_bytes", &s), 0);
      cr_assert_gt(got, 0, "%s rank %d: no activation memory measured", sets, r);
      cr_assert(fabs(got - s) < 0.5 && fabs(got - p) < 0.5, "%s rank %d: measured %.0f bytes, sim CONFIG %.0f, the "
                "runner's prediction %.0f", sets, r, got, s, p);
      cr_assert_leq(got, a, "%s rank %d: %.0f bytes in use, %.0f allocated", sets, r, got, a);
    }
    core_json_free(rec), core_json_free(sim), free(out);
  }
  unlink(log);
}

/* A count of a --log-json file's last record ("rollbacks", "restarts"; -1 without one). */
static long last_count(const char *log, const char *key) {
  FILE *f = fopen(log, "r");
  cr_assert(f, "no log %s", log);
  char line[1 << 14], k[64];
  snprintf(k, sizeof k, "\"%s\":", key);
  long n = -1;
  while (fgets(line, sizeof line, f)) {
    const char *r = strstr(line, k);
    if (r) n = atol(r + strlen(k));
  }
  fclose(f);
  return n;
}
static long last_rollbacks(const char *log) { return last_count(log, "rollbacks"); }

/* Optimizer post-validation (each rank updates as soon as its gradients are done, the global
 * norm follows, an update clipping should have changed is redone): the synchronous step's losses
 * bit for bit, on 2 stages (1f1b) and 4 (zb-h2), with clipping that never fires (no rollback),
 * with clipping at 0.01 (fires every step: a rollback, then PIPE_PV_BACKOFF = 10 synchronous
 * steps before the next eager try, so 2 rollbacks and restarts in 14 steps) and with none (eager:
 * nothing to check, no VALIDATE, no restarts; ZeRO-2 across replicas too), and on 2 stages x 2 ZeRO-2
 * replicas, 2 x 2 ZeRO-3 (the shard swaps with its second copy), bf16 (the fp32 master does) and
 * fp16 with a loss scale that doubles every 2 steps (a redone update divides by the scale its
 * gradients had, not the one the check has just grown for the next step); under fp16 an overflow injected into one rank's gradient still skips the step on every rank
 * (undone there, counted as a rollback). On 1f1b and zb-h2 the check is the next
 * step's VALIDATE, after the forwards each rank can redo: a redone update starts that step again
 * (steps 2 and 13 when clipping fires every step), and the losses, norms and rates are still the
 * synchronous ones; ZeRO-2 across replicas
 * checks at the step's end (no restarts recorded). */
Test(train, post_validation_matches_the_synchronous_step, .timeout = 300) {
  char log[] = "/tmp/brigade_train_XXXXXX";
  close(mkstemp(log));
  run_log sync, post;
  const char *layouts[] = {"--set pipeline.stages=2 --set pipeline.schedule=1f1b", "--set pipeline.stages=4 --set pipeline.schedule=zb-h2",
                           "--set pipeline.stages=2 --set zero_optimization.stage=2 --set gradient_accumulation_steps=2",
                           "--set pipeline.stages=2 --set pipeline.schedule=zb-h1 --set zero_optimization.stage=3 "
                           "--set gradient_accumulation_steps=2",
                           "--set pipeline.stages=2 --set pipeline.schedule=zb-v --set bf16.enabled=true",
                           "--set pipeline.stages=2 --set pipeline.schedule=zb-h1 --set fp16.enabled=true "
                           "--set fp16.initial_scale_power=12 --set fp16.loss_scale_window=2"};
  const int np[] = {2, 4, 4, 4, 2, 2};
  const char *clips[] = {"--set gradient_clipping=1e9", "--set gradient_clipping=0.01", "--set gradient_clipping=0"};
  for (int l = 0; l < 6; l++)
    for (int k = 0; k < 3; k++) {
      if (l >= 2 && k == 0) continue;
      if (l >= 3 && k == 2) continue;
      train_read(np[l], log, &sync, "%s %s --set train.steps=14 --set optimizer.post_validation=false", layouts[l], clips[k]);
      cr_assert_eq(last_rollbacks(log), -1, "a synchronous run logged rollbacks");
      train_read(np[l], log, &post, "%s %s --set train.steps=14 --set optimizer.post_validation=true", layouts[l], clips[k]);
      same_bits(&sync, &post, layouts[l]);
      long rb = last_rollbacks(log), rs = last_count(log, "restarts");
      /* clipping at 0.01 fires every step: step 1's eager update is redone, steps 2 to 11 go
       * synchronously (the backoff), step 12's is redone again, 13 and 14 synchronous */
      cr_assert_eq(rb, k == 1 ? 2 : 0, "%s %s: %ld rollbacks", layouts[l], clips[k], rb);
      cr_assert_eq(rs, l == 2 || k == 2 ? -1 : k == 0 ? 0 : 2, "%s %s: %ld restarts", layouts[l], clips[k], rs);
      for (int i = 0; i < sync.n; i++)
        cr_assert(sync.norm[i] == post.norm[i] && sync.lr[i] == post.lr[i], "%s %s step %d: norm %.9g / %.9g, lr %.9g / %.9g",
                  layouts[l], clips[k], i + 1, sync.norm[i], post.norm[i], sync.lr[i], post.lr[i]);
    }
  char args[1024];
  snprintf(args, sizeof args, "train configs/tiny.cfg --set fp16.enabled=true --set fp16.hysteresis=1 --set pipeline.stages=4 "
           "--set pipeline.schedule=zb-h2 --set optimizer.post_validation=true --set train.steps=6 --set gradient_clipping=0 "
           "--log-json %s", log);
  setenv("BRIGADE_INJECT_INF", "3:2", 1);
  cr_assert_eq(test_mpirun(4, "brigade", args), 0);
  unsetenv("BRIGADE_INJECT_INF");
  int skipped[8], n = read_skipped(log, skipped, 8);
  cr_assert_eq(n, 6);
  for (int i = 0; i < n; i++) cr_assert_eq(skipped[i], i == 2, "step %d skipped %d", i + 1, skipped[i]);
  cr_assert_eq(last_rollbacks(log), 1);
  cr_assert_eq(last_count(log, "restarts"), 1, "the skip undone in step 4's VALIDATE starts step 4 again");
  unlink(log);
}

/* A traced step that post-validation starts again (clipping at 0.01 fires every step: step 1's
 * eager update is redone in step 2's VALIDATE, and step 2 is traced) keeps only the attempt that
 * stands: each rank's micro-batches run their forward once in the timeline (the thrown-away
 * attempt's events were kept too, so the forwards before the VALIDATE showed twice). */
Test(train, a_traced_step_started_again_records_one_attempt, .timeout = 120) {
  char log[] = "/tmp/brigade_train_XXXXXX", trace[64], svg[80];
  close(mkstemp(log));
  snprintf(trace, sizeof trace, "%s.json", log), snprintf(svg, sizeof svg, "%s.json.svg", log);
  run_log run;
  train_read(4, log, &run, "--set pipeline.stages=4 --set pipeline.schedule=zb-h2 --set gradient_clipping=0.01 "
             "--set optimizer.post_validation=true --set train.steps=3 --set trace.step=2 --set trace.path=%s", trace);
  cr_assert_eq(last_count(log, "restarts"), 1, "the traced step did not start again");
  sched_timeline tl;
  cr_assert_eq(viz_read_trace(trace, &tl), 0, "%s", core_error_msg());
  int fwd[4] = {0};
  for (int i = 0; i < tl.n; i++)
    if (tl.ev[i].op == SCHED_FORWARD) fwd[tl.ev[i].rank]++;
  for (int r = 0; r < 4; r++) cr_assert_eq(fwd[r], tl.m * tl.v, "rank %d: %d forwards in the timeline, %d micro-batches", r, fwd[r], tl.m);
  sched_timeline_free(&tl);
  unlink(log), unlink(trace), unlink(svg);
}

/* recompute_gelu and recompute_layernorm on the blocks (the MLP's GELU and the LayerNorms run
 * again for the weight gradients): the same losses bit for bit, with the zero-bubble split (W
 * apart from I), with offload, and with ZeRO-3 (a W on gathered parameters, the LayerNorm's
 * among them), and rank 0's activation peak smaller, every rank's as the simulator predicts it. */
Test(train, recompute_keeps_the_losses, .timeout = 300) {
  char log[] = "/tmp/brigade_train_XXXXXX";
  close(mkstemp(log));
  const char *layouts[] = {"--set pipeline.stages=4 --set pipeline.schedule=zb-h1",
                           "--set pipeline.stages=4 --set 'pipeline.offload=\"full\"'",
                           "--set pipeline.stages=2 --set pipeline.schedule=zb-h1 --set zero_optimization.stage=3"};
  for (int k = 0; k < 3; k++) {
    run_log ref, rg;
    double before[4], after[4];
    int stages = k == 2 ? 2 : 4; /* the log's peaks: one per stage */
    train_read(4, log, &ref, "%s --set train.steps=4 --set backend=fakedev", layouts[k]);
    for (int q = 0; q < stages; q++) before[q] = first_record(log, "activation_peak_bytes", q);
    train_read(4, log, &rg, "%s --set train.steps=4 --set backend=fakedev --set 'model.layers.[1].recompute_gelu=true' "
               "--set 'model.layers.[1].recompute_layernorm=true'", layouts[k]);
    same_bits(&ref, &rg, layouts[k]);
    for (int q = 0; q < stages; q++) {
      after[q] = first_record(log, "activation_peak_bytes", q);
      cr_assert_eq(after[q], first_record(log, "activation_predicted_bytes", q), "%s: rank %d measured %g, predicted %g",
                   layouts[k], q, after[q], first_record(log, "activation_predicted_bytes", q));
    }
    cr_assert_lt(after[0], before[0], "%s: rank 0 holds %g with recompute_gelu, %g without", layouts[k], after[0], before[0]);
  }
  char *out = NULL; /* the log says what runs again */
  int rc = train_capture(&out, "--set train.steps=1 --set 'model.layers.[1].recompute_layernorm=true'");
  cr_assert(rc == 0 && strstr(out, "recompute: 0 block(s) run the MLP's GELU again and 6 block(s) their LayerNorms again"),
            "exit %d: %s", rc, out);
  free(out);
  unlink(log);
}

/* Activation offload in training (pipeline.offload): on fakedev the program's OFFLOADs copy each
 * micro-batch's activations to host memory and fill them with NaN on the device until the RELOAD
 * brings them back, so the losses equal the run without offload bit for bit only if no
 * instruction touches activations while they are away; 1f1b, zb-h1 (its W parts offloaded too)
 * and interleaved on 4 ranks, dualpipev on 2 (rank 1's backward of stage 2 hands its gradient to
 * stage 1's pair, which must be back by then), each evaluating on more micro-batches than a step has (an
 * evaluation has no copies; its micro-batches once read the training program's reload table past
 * its end). On the CPU the copies do nothing and the log says so. Bad keys are refused naming them. */
Test(train, activation_offload_keeps_the_losses, .timeout = 300) {
  char log[] = "/tmp/brigade_train_XXXXXX";
  close(mkstemp(log));
  const char *layouts[] = {"--set pipeline.stages=4", "--set pipeline.stages=4 --set pipeline.schedule=zb-h1",
                           "--set pipeline.stages=2 --set pipeline.schedule=interleaved --set gradient_accumulation_steps=4",
                           "--set pipeline.stages=2 --set pipeline.schedule=dualpipev --set gradient_accumulation_steps=4"};
  const int np[] = {4, 4, 2, 2};
  for (int k = 0; k < 4; k++) {
    run_log ref, off;
    const char *ev = "--set train.eval_interval=3 --set train.eval_batches=32";
    train_read(np[k], log, &ref, "%s %s --set train.steps=6 --set backend=fakedev", layouts[k], ev);
    double before = first_record(log, "activation_peak_bytes", 0);
    train_read(np[k], log, &off, "%s %s --set train.steps=6 --set backend=fakedev --set 'pipeline.offload=\"full\"'", layouts[k],
               ev);
    same_bits(&ref, &off, layouts[k]);
    cr_assert(off.val[2] > 0 && off.val[5] > 0, "%s: steps 3 and 6 were not evaluated", layouts[k]);
    /* the device holds less, as measured, and exactly what the simulator predicts for the program */
    for (int q = 0; q < np[k]; q++)
      cr_assert_eq(first_record(log, "activation_peak_bytes", q), first_record(log, "activation_predicted_bytes", q),
                   "%s: rank %d measured %g, predicted %g", layouts[k], q, first_record(log, "activation_peak_bytes", q),
                   first_record(log, "activation_predicted_bytes", q));
    cr_assert_lt(first_record(log, "activation_peak_bytes", 0), before, "%s: rank 0 holds as much as without", layouts[k]);
    char cmd[1024], *js = NULL; /* the very program offloads on rank 0 */
    snprintf(cmd, sizeof cmd, "%s/brigade sim configs/tiny.cfg %s --set backend=fakedev --set 'pipeline.offload=\"full\"' "
             "--steps 1 --json", test_build_dir(), layouts[k]);
    cr_assert_eq(test_capture(cmd, &js), 0, "%s", js);
    const char *r0 = strstr(js, "{\"rank\":0,"), *o0 = r0 ? strstr(r0, "\"offloaded\":") : NULL;
    cr_assert(o0 && atoi(o0 + 12) > 0, "%s: %s", layouts[k], js);
    /* the run's prediction is sim's peak in instruction order, as the run counts (zb-h1's rank 1:
     * 2105344 bytes, where the peak in time holds a pair while its copies run, 2764800) */
    core_json *j;
    const core_json *ranks;
    cr_assert_eq(core_json_parse(js, strlen(js), "sim", &j), 0, "%s", core_error_msg());
    cr_assert_eq(core_json_get_array(j, "ranks", &ranks), 0, "%s", core_error_msg());
    for (int q = 0; q < np[k]; q++) {
      double order = -1;
      cr_assert_eq(core_json_get_number(core_json_at(ranks, (size_t)q), "order_peak_activation_bytes", &order), 0,
                   "%s: %s", layouts[k], core_error_msg());
      cr_assert_eq(order, first_record(log, "activation_predicted_bytes", q), "%s: rank %d: sim %g, the run predicted %g",
                   layouts[k], q, order, first_record(log, "activation_predicted_bytes", q));
    }
    core_json_free(j);
    free(js);
  }
  char *out = NULL;
  int rc = train_capture(&out, "--set train.steps=1 --set 'pipeline.offload=\"full\"'");
  cr_assert(rc == 0 && strstr(out, "activations are host memory already, so the program has no copies") &&
                strstr(out, " 15 instructions per step"), "exit %d: %s", rc, out); /* as without offload */
  free(out);
  /* a device backend says what it offloads, and never that its activations are host memory */
  rc = train_capture(&out, "--set train.steps=1 --set backend=fakedev --set 'pipeline.offload=\"full\"' "
                     "--set 'checkpoint.dir=\"/tmp/brigade_offload_log_ckpt\"'");
  remove_tree("/tmp/brigade_offload_log_ckpt");
  cr_assert(rc == 0 && strstr(out, "rank 0 offloads 0 time(s) per step, on the fakedev backend") &&
                !strstr(out, "host memory already"), "exit %d: %s", rc, out);
  free(out);
  rc = train_capture(&out, "--set train.steps=1 --set 'pipeline.offload=\"auto\"'");
  cr_assert(rc == 2 && strstr(out, "pipeline.offload = \"auto\" needs pipeline.memory_limit"), "exit %d: %s", rc, out);
  free(out);
  rc = train_capture(&out, "--set train.steps=1 --set 'pipeline.offload=\"some\"'");
  cr_assert(rc == 2 && strstr(out, "pipeline.offload = \"some\" is not"), "exit %d: %s", rc, out);
  free(out);
  unlink(log);
}
