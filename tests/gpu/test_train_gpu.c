/* The tiny GPT trained on the GPU (backend = "cuda") follows the CPU's loss curve: one process,
 * and a 2-stage pipeline whose ranks share the GPU (transfers through host copies over MPI).
 * Tolerance: every step's loss within 1e-3 relative of the CPU's (fp32 GEMMs without TF32 and
 * reductions in another order drift by about 1e-6 per step; 20 steps of AdamW stay far inside).
 * Under bf16 mixed precision (head size 64, T = 128, so the fused attention applies; lr 1e-3)
 * the GPU, with BRIGADE_CUDA_ATTENTION=gemm and =flash (the fused attention, the default), follows the CPU's
 * emulated bf16 curve within 1% per step: the GPU also rounds attention's probabilities and dS
 * to bf16 inside its products, the CPU only what it stores. Calibrated on the CPU: adding those
 * roundings to the CPU's attention moved this run's losses by at most 8e-5 relative; at the
 * config's lr 3e-3 the same change set off a loss spike at step 14 (43%), so lr is lowered.
 * Without a usable GPU the test skips, saying why; with BRIGADE_REQUIRE_GPU=1 (make test-gpu)
 * that is a failure. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "kernels/ops.h"
#include "tests/common/mpirun.h"

static void need_gpu(void) {
  const kernels_ops *t = NULL;
  if (kernels_get_ops("cuda", &t) == CORE_OK) return;
  const char *e = getenv("BRIGADE_REQUIRE_GPU");
  if (e && strcmp(e, "1") == 0) cr_assert_fail("a GPU is required: %s", core_error_msg());
  fprintf(stderr, "[----] test_train_gpu: GPU training test skipped: %s\n", core_error_msg());
  cr_skip_test("no usable GPU: %s", core_error_msg());
}

static int losses(int np, const char *sets, double *out, int max) {
  char log[] = "/tmp/brigade_gpu_XXXXXX", args[1024];
  close(mkstemp(log));
  snprintf(args, sizeof args, "train configs/tiny.cfg --set train.steps=20 %s --log-json %s", sets, log);
  int rc;
  if (np > 0) {
    rc = test_mpirun(np, "brigade", args);
  } else {
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "%s/brigade %s 1>&2", test_build_dir(), args);
    rc = test_sh(cmd);
  }
  cr_assert_eq(rc, 0, "brigade %s failed", args);
  FILE *f = fopen(log, "r");
  char line[1024];
  int n = 0;
  while (f && n < max && fgets(line, sizeof line, f)) {
    if (strncmp(line, "{\"step\":0,", 10) == 0) continue; /* the val loss before the first update */
    char *s = strstr(line, "\"loss\":");
    cr_assert(s, "no loss in %s", line);
    out[n++] = atof(s + 7);
  }
  if (f) fclose(f);
  unlink(log);
  return n;
}

Test(train_gpu, tiny_gpt_follows_the_cpu, .timeout = 600) {
  need_gpu();
  double cpu[32], gpu[32];
  const struct { int np; const char *sets; } runs[] = {
      {0, ""},
      {2, "--set pipeline.stages=2 --set pipeline.schedule=1f1b"},
  };
  for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
    char sets[512];
    int n = losses(runs[k].np, runs[k].sets, cpu, 32);
    snprintf(sets, sizeof sets, "%s --set backend=cuda", runs[k].sets);
    cr_assert_eq(losses(runs[k].np, sets, gpu, 32), n);
    cr_assert_eq(n, 20);
    for (int i = 0; i < n; i++)
      cr_assert(fabs(gpu[i] - cpu[i]) <= 1e-3 * fabs(cpu[i]), "%s: step %d loss %.9g on the GPU, %.9g on the CPU",
                sets, i + 1, gpu[i], cpu[i]);
    cr_assert(gpu[19] < gpu[0] - 0.5, "the loss did not fall on the GPU: %g -> %g", gpu[0], gpu[19]);
  }
}

Test(train_gpu, tiny_gpt_bf16_follows_the_cpu, .timeout = 600) {
  need_gpu();
  const char *shape = "--set bf16.enabled=true --set model.d_model=128 --set model.n_heads=2 "
                      "--set model.seq_len=128 --set gradient_accumulation_steps=1 --set optimizer.params.lr=1e-3";
  double cpu[32], gpu[32];
  char sets[512];
  int n = losses(0, shape, cpu, 32);
  cr_assert_eq(n, 20);
  for (int flash = 0; flash <= 1; flash++) {
    setenv("BRIGADE_CUDA_ATTENTION", flash ? "flash" : "gemm", 1);
    snprintf(sets, sizeof sets, "%s --set backend=cuda", shape);
    cr_assert_eq(losses(0, sets, gpu, 32), n);
    for (int i = 0; i < n; i++)
      cr_assert(fabs(gpu[i] - cpu[i]) <= 1e-2 * fabs(cpu[i]),
                "bf16%s: step %d loss %.6g on the GPU, %.6g on the CPU", flash ? " flash" : "", i + 1, gpu[i],
                cpu[i]);
    cr_assert(gpu[19] < gpu[0] - 0.5, "bf16%s: the loss did not fall on the GPU: %g -> %g", flash ? " flash" : "",
              gpu[0], gpu[19]);
  }
  unsetenv("BRIGADE_CUDA_ATTENTION");
}
