/* bench/train_step.c: one process, one chunk holding the whole GPT-2-124M-shaped model
 * (configs/gpt2-124m.cfg, B=4, T=64): forward + backward + AdamW per step on random tokens.
 * Prints tokens/s, the share of step time spent in GEMMs (the op table's gemm, timed through a
 * wrapper), and OpenBLAS sgemm GFLOP/s measured in the same run on the model's largest matmul.
 *   bench/train_step [CONFIG] [STEPS] [THREADS] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/config.h"
#include "core/error.h"
#include "core/rng.h"
#include "kernels/ops.h"
#include "layers/layers.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

static kernels_ops timed;
static double gemm_s, gemm_flops;
static void (*real_gemm)(float *, const float *, const float *, int, int, int, int, int, float, float);

static void gemm_timed(float *c, const float *a, const float *b, int M, int N, int K, int ta, int tb, float al, float be) {
  double t = now();
  real_gemm(c, a, b, M, N, K, ta, tb, al, be);
  gemm_s += now() - t;
  gemm_flops += 2.0 * M * N * K;
}

static double sgemm_gflops(int M, int N, int K) {
  float *a = calloc((size_t)M * K, 4), *b = calloc((size_t)K * N, 4), *c = calloc((size_t)M * N, 4);
  for (size_t i = 0; i < (size_t)M * K; i++) a[i] = (float)(i % 7) * 0.1f;
  for (size_t i = 0; i < (size_t)K * N; i++) b[i] = (float)(i % 5) * 0.1f;
  real_gemm(c, a, b, M, N, K, 0, 1, 1, 0); /* warm */
  int reps = 5;
  double t = now();
  for (int r = 0; r < reps; r++) real_gemm(c, a, b, M, N, K, 0, 1, 1, 0);
  t = now() - t;
  free(a), free(b), free(c);
  return 2.0 * M * N * K * reps / t / 1e9;
}

int main(int argc, char **argv) {
  kernels_cpu_reexec(argv);
  const char *path = argc > 1 ? argv[1] : "configs/gpt2-124m.cfg";
  int steps = argc > 2 ? atoi(argv[2]) : 3, threads = argc > 3 ? atoi(argv[3]) : 1;
  kernels_cpu_init(threads);
  core_config *c;
  layers_model m = {0};
  int64_t B = 4;
  if (core_config_load(&c, path) || core_config_get_int(c, "train_micro_batch_size_per_gpu", 4, &B) ||
      layers_model_build(&m, c, 0)) {
    fprintf(stderr, "train_step: %s\n", core_error_msg());
    return 1;
  }
  timed = *kernels_cpu_ops();
  real_gemm = timed.gemm;
  timed.gemm = gemm_timed;
  layers_chunk ch;
  double t0 = now();
  if (layers_chunk_init(&ch, &m, 0, m.n, &timed, (int)B, m.T, 1)) return 1;
  printf("model %s: %.1f M parameters (the tied head is a second copy), B=%d T=%d, %d OpenBLAS "
         "thread(s), OPENBLAS_CORETYPE=%s; init %.1f s\n", path, layers_model_params(&m) / 1e6, (int)B, m.T,
         threads, getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "(default)", now() - t0);
  float *mv = calloc(ch.nparams, 4), *vv = calloc(ch.nparams, 4);
  core_rng r = core_rng_keyed(1, 2, 3, 4);
  int N = (int)B * m.T;
  double total = 0, gemm_total = 0, flops = 0;
  for (int s = 0; s <= steps; s++) { /* step 0 warms up and is not counted */
    for (int i = 0; i < N; i++) {
      layers_chunk_tokens(&ch, 0)[i] = (int32_t)core_rng_below(&r, (uint64_t)m.V);
      layers_chunk_targets(&ch, 0)[i] = (int32_t)core_rng_below(&r, (uint64_t)m.V);
    }
    gemm_s = gemm_flops = 0;
    double t = now();
    layers_chunk_forward(&ch, 0);
    layers_chunk_backward_input(&ch, 0, 1.0f / N);
    layers_chunk_backward_weight(&ch, 0);
    timed.adamw(ch.params, ch.grads, mv, vv, ch.nparams, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, s + 1, 1.0f);
    memset(ch.grads, 0, sizeof(float) * ch.nparams);
    t = now() - t;
    if (s == 0) continue;
    total += t, gemm_total += gemm_s, flops += gemm_flops;
    printf("  step %d: %.3f s, %.0f tokens/s, GEMM %.1f%% of the step\n", s, t, N / t, 100 * gemm_s / t);
  }
  printf("mean: %.3f s/step, %.0f tokens/s; GEMMs %.1f%% of step time at %.1f GFLOP/s; other kernels %.1f%%\n",
         total / steps, N * steps / total, 100 * gemm_total / total, flops / gemm_total / 1e9,
         100 * (1 - gemm_total / total));
  printf("OpenBLAS sgemm in this run, M=%d N=%d K=%d (the LM head): %.1f GFLOP/s; M=%d N=%d K=%d (MLP): %.1f GFLOP/s\n",
         N, m.V, m.C, sgemm_gflops(N, m.V, m.C), N, 4 * m.C, m.C, sgemm_gflops(N, 4 * m.C, m.C));
  free(mv), free(vv);
  layers_chunk_free(&ch);
  layers_model_free(&m);
  core_config_free(c);
  return 0;
}
