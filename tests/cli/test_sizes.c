/* Sizes checked before work, as a user meets them: compile, sim, tune and train refuse a shape or a
 * config too large for the limits (--max-instructions; --max-memory, BRIGADE_MAX_MEMORY or the
 * machine's memory) in well under a second, naming the flags or keys and the estimate; tune
 * bounds its search; long work prints progress (BRIGADE_PROGRESS shortens the delays here). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/common/mpirun.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Runs ENV build/brigade ARGS; exit status, stdout+stderr in *out (caller frees), seconds in *s. */
static int brigade_env(const char *env, const char *args, char **out, double *s) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 %s %s/brigade %s", env, test_build_dir(), args);
  double t0 = now();
  int rc = test_capture(cmd, out);
  if (s) *s = now() - t0;
  cr_assert(rc >= 0, "could not run %s", cmd);
  return rc;
}

static int brigade(const char *args, char **out, double *s) { return brigade_env("", args, out, s); }

static void expect_refusal(const char *env, const char *args, const char *const *want) {
  char *out;
  double s;
  cr_assert_eq(brigade_env(env, args, &out, &s), 2, "%s: %s", args, out);
  cr_assert(s < 2, "%s took %.2f s", args, s);
  const char *nl = strchr(out, '\n');
  cr_assert(strncmp(out, "brigade: error: ", 16) == 0 && nl && nl[1] == 0, "%s: not one error line: %s", args, out);
  for (int i = 0; want[i]; i++) cr_assert(strstr(out, want[i]), "%s: no '%s' in %s", args, want[i], out);
  free(out);
}

Test(sizes, sim_shapes_beyond_the_machine_are_refused_at_once) {
  expect_refusal("", "sim --schedule 1f1b --stages 65536 --microbatches 1048576",
                 (const char *[]){"--stages 65536", "--microbatches 1048576", "instructions", "TiB", "memory limit",
                                  "this machine's memory", "--max-memory", NULL});
  expect_refusal("", "sim --schedule 1f1b --stages 4096 --microbatches 4096",
                 (const char *[]){"--stages 4096", "--microbatches 4096", "1.01e+08 instructions", "GiB",
                                  "--max-instructions 33554432", NULL});
  expect_refusal("", "compile --schedule zb-v --stages 4096 --microbatches 8192",
                 (const char *[]){"zb-v", "--virtual 2", "--microbatches 8192", NULL});
}

Test(sizes, a_lower_memory_limit_refuses_before_building) {
  const char *const want[] = {"--stages 64", "--microbatches 512", "memory limit, 1.000 MiB", "(--max-memory 1M)", NULL};
  expect_refusal("", "sim --schedule 1f1b --stages 64 --microbatches 512 --max-memory 1M", want);
  expect_refusal("", "compile --schedule 1f1b --stages 64 --microbatches 512 --max-memory 1M", want);
  expect_refusal("BRIGADE_MAX_MEMORY=1M", "sim --schedule 1f1b --stages 64 --microbatches 512",
                 (const char *[]){"(BRIGADE_MAX_MEMORY=1M)", NULL});
  /* the flag wins over the environment; a raised instruction limit builds what it allows */
  char *out;
  cr_assert_eq(brigade_env("BRIGADE_MAX_MEMORY=1M", "sim --schedule 1f1b --stages 64 --microbatches 512 --max-memory 1G "
                           "--json", &out, NULL), 0, "%s", out);
  free(out);
  expect_refusal("", "sim --schedule 1f1b --stages 64 --microbatches 512 --max-instructions 1000",
                 (const char *[]){"more than --max-instructions 1000", NULL});
  cr_assert_eq(brigade("sim --schedule 1f1b --stages 64 --microbatches 64 --max-instructions 30000 --json", &out, NULL), 0,
               "%s", out);
  free(out);
  const char *bad[] = {"sim --schedule 1f1b --stages 2 --microbatches 2 --max-memory 0",
                       "sim --schedule 1f1b --stages 2 --microbatches 2 --max-memory lots",
                       "compile --schedule 1f1b --stages 2 --microbatches 2 --max-instructions 0.5",
                       "sim --schedule 1f1b --stages 2 --microbatches 2 --max-instructions",
                       "train configs/tiny.cfg --max-memory 12x"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cr_assert_eq(brigade(bad[i], &out, NULL), 2, "%s: %s", bad[i], out);
    free(out);
  }
  cr_assert_eq(brigade_env("BRIGADE_MAX_MEMORY=nope", "sim --schedule 1f1b --stages 2 --microbatches 2", &out, NULL), 2,
               "%s", out);
  cr_assert(strstr(out, "BRIGADE_MAX_MEMORY"), "%s", out);
  free(out);
}

Test(sizes, sim_config_names_the_config_keys) {
  expect_refusal("", "sim configs/tiny.cfg --set pipeline.stages=4 --set gradient_accumulation_steps=4096 "
                     "--max-instructions 10000",
                 (const char *[]){"configs/tiny.cfg", "pipeline.stages = 4", "gradient_accumulation_steps = 4096",
                                  "--max-instructions 10000", NULL});
}

Test(sizes, train_refuses_what_does_not_fit_before_allocating) {
  /* 1.1 T parameters: refused from the estimate, naming model.d_model, in well under a second */
  expect_refusal("", "train configs/tiny.cfg --set model.d_model=65536",
                 (const char *[]){"training needs about", "TiB", "model.d_model = 65536", "--set model.d_model",
                                  "parameters", "optimizer state", "this machine's memory", NULL});
  /* activations the largest part: the keys that make them */
  expect_refusal("", "train configs/tiny.cfg --max-memory 40M --set train_micro_batch_size_per_gpu=64",
                 (const char *[]){"more than the memory limit, 40.00 MiB (--max-memory 40M)", "activations",
                                  "train_micro_batch_size_per_gpu = 64 (--set", "model.seq_len = 32 (configs/tiny.cfg:15)",
                                  NULL});
  /* the data the largest part */
  expect_refusal("", "train configs/tiny.cfg --max-memory 2M",
                 (const char *[]){"(--max-memory 2M)", "data.path = \"data/kjv.txt\" (configs/tiny.cfg:9)", NULL});
  /* the program's own size, before it is compiled */
  expect_refusal("", "train configs/tiny.cfg --set gradient_accumulation_steps=1048576 --max-instructions 100000",
                 (const char *[]){"gradient_accumulation_steps = 1048576", "--max-instructions 100000", NULL});
}

Test(sizes, train_counts_every_rank_of_the_machine) {
  /* one rank fits in 20 MiB (about 12), two ranks of this machine do not (about 24): every rank
   * refuses alike */
  char *out, cmd[512];
  snprintf(cmd, sizeof cmd, TEST_MPI_ENV " BRIGADE_MAX_MEMORY=20M timeout 60 mpirun -np 2 %s/brigade train configs/tiny.cfg "
           "--set pipeline.stages=2 --set train.steps=1", test_build_dir());
  int rc = test_capture(cmd, &out);
  cr_assert_eq(rc, 2, "%s", out);
  cr_assert(strstr(out, "this machine (2 ranks)") && strstr(out, "(BRIGADE_MAX_MEMORY=20M)"), "%s", out);
  free(out);
}

Test(sizes, tune_bounds_its_search_and_shows_progress) {
  char *out;
  double s;
  /* a batch of 2^20 sequences: shapes over the candidate limit are counted, not built */
  cr_assert_eq(brigade_env("BRIGADE_PROGRESS=0.05", "tune configs/tiny.cfg --set pipeline.stages=4 --set "
                           "train_micro_batch_size_per_gpu=1024 --set gradient_accumulation_steps=1024 --memory 1T "
                           "--max-instructions 3000 --svg /dev/null", &out, &s), 0, "%s", out);
  cr_assert(strstr(out, "shapes not simulated, from m = ") && strstr(out, "--max-instructions 3000"), "%s", out);
  cr_assert(strstr(out, "brigade: tune configs/tiny.cfg: ") && strstr(out, "shapes looked at"), "no progress: %s", out);
  cr_assert(s < 10, "took %.1f s", s);
  free(out);
  expect_refusal("", "tune configs/tiny.cfg --set pipeline.stages=4 --memory 1G --max-instructions 10",
                 (const char *[]){"too large to simulate", "--max-instructions 10", NULL});
}

Test(sizes, long_work_says_how_far_it_is) {
  char *out;
  cr_assert_eq(brigade_env("BRIGADE_PROGRESS=0.01", "train configs/tiny.cfg --set train.steps=1 --set "
                           "train.eval_interval=0 --set gradient_accumulation_steps=64", &out, NULL), 0, "%s", out);
  cr_assert(strstr(out, "brigade: step 1: rank 0 at micro-batch ") && strstr(out, " of 64 "), "%s", out);
  cr_assert(strstr(out, "brigade: step 1: done in "), "%s", out);
  free(out);
  cr_assert_eq(brigade_env("BRIGADE_PROGRESS=0.01", "sim --schedule zb-h1 --stages 16 --microbatches 2048 --json", &out,
                           NULL), 0, "%s", out);
  cr_assert(strstr(out, "brigade: compiling zb-h1 p=16 v=1 m=2048: "), "%s", out);
  free(out);
  /* BRIGADE_PROGRESS=0: never */
  cr_assert_eq(brigade_env("BRIGADE_PROGRESS=0", "sim --schedule zb-h1 --stages 16 --microbatches 2048 --json", &out,
                           NULL), 0, "%s", out);
  cr_assert(!strstr(out, "brigade: compiling"), "%s", out);
  free(out);
}
