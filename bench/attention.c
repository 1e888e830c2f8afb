/* bench/attention.c: the attention op alone, forward and backward, at GPT-2-124M's shape (B=16,
 * T=1024, C=768, 12 heads of 64) on a GPU, cut to B=1, T=256 on the CPU (seconds, not minutes):
 * milliseconds per call (best of 5 after a warm-up, the device waited for) and TFLOP/s of the
 * causal products (forward 4 B NH hs T(T+1)/2 FLOPs, backward 2.5 times that, FlashAttention's
 * count). On "cuda" under bf16 mixed precision, each kernel kind in turn: the fused kernels as
 * BRIGADE_CUDA_FLASH picks them (mma, the default; wmma), or with
 * BRIGADE_CUDA_ATTENTION=gemm set the per-head GEMMs alone; elsewhere the backend's one path in fp32. Random inputs in
 * [-2, 2] (q, k, v) and [-1, 1] (the output's gradient). Prints figures; exits 0.
 *     build/bench/attention [BACKEND [B T]]    BACKEND: cpu (default) or cuda */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "core/rng.h"
#include "kernels/ops.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float *random_device(const kernels_ops *ops, core_rng *r, size_t n, float lo, float hi) {
  float *h = malloc(n * sizeof(float)), *d = ops->alloc(n * sizeof(float));
  if (!h || !d) {
    fprintf(stderr, "attention: out of memory (%zu floats)\n", n);
    exit(1);
  }
  for (size_t i = 0; i < n; i++) h[i] = lo + (hi - lo) * core_rng_uniform(r);
  ops->to_device(d, h, n * sizeof(float));
  free(h);
  return d;
}

/* one kind: the cache and buffers sized for it (the fused path's cache is smaller) */
static void run(const kernels_ops *ops, const char *label, int B, int T, int C, int NH) {
  core_rng r = core_rng_keyed(1234, 0, 0, 0);
  size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C;
  size_t natt = ops->attention_cache_floats ? ops->attention_cache_floats(B, T, C, NH) : (size_t)B * NH * T * T;
  float *qkv = random_device(ops, &r, nqkv, -2, 2), *dout = random_device(ops, &r, nout, -1, 1);
  float *out = ops->alloc(nout * 4), *att = ops->alloc(natt * 4), *dqkv = ops->alloc(nqkv * 4);
  float *scratch = ops->alloc(kernels_attention_scratch_floats(T) * 4);
  if (!out || !att || !dqkv || !scratch) {
    fprintf(stderr, "attention: out of memory at %s\n", label);
    exit(1);
  }
  double fwd = 1e30, bwd = 1e30;
  for (int k = 0; k < 6; k++) { /* the first call warms up */
    ops->sync();
    double t0 = now();
    ops->attention_forward(out, att, qkv, B, T, C, NH);
    ops->sync();
    double t1 = now();
    ops->attention_backward(dqkv, scratch, dout, qkv, att, B, T, C, NH);
    ops->sync();
    double t2 = now();
    if (k && t1 - t0 < fwd) fwd = t1 - t0;
    if (k && t2 - t1 < bwd) bwd = t2 - t1;
  }
  double hs = (double)C / NH, f = 4.0 * B * NH * hs * ((double)T * (T + 1) / 2);
  double unit = ops->device_memory ? 1e12 : 1e9; /* TFLOP/s on a GPU, GFLOP/s on the CPU */
  const char *u = ops->device_memory ? "TFLOP/s" : "GFLOP/s";
  printf("  %-38s forward %8.3f ms %7.1f %s   backward %8.3f ms %7.1f %s\n", label, 1e3 * fwd, f / fwd / unit, u,
         1e3 * bwd, 2.5 * f / bwd / unit, u);
  ops->free(qkv), ops->free(dout), ops->free(out), ops->free(att), ops->free(dqkv), ops->free(scratch);
}

int main(int argc, char **argv) {
  const char *backend = argc > 1 ? argv[1] : "cpu";
  const kernels_ops *ops;
  kernels_cpu_init(1);
  if (kernels_get_ops(backend, &ops)) {
    fprintf(stderr, "attention: %s\n", core_error_msg());
    return 1;
  }
  int gpu = ops->device_memory != 0, C = 768, NH = 12;
  int B = argc > 2 ? atoi(argv[2]) : gpu ? 16 : 1, T = argc > 3 ? atoi(argv[3]) : gpu ? 1024 : 256;
  if (B <= 0 || T <= 0) {
    fprintf(stderr, "attention: B and T must be positive (usage: attention [BACKEND [B T]])\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  printf("attention: backend %s, B=%d T=%d C=%d NH=%d; best of 5 after a warm-up\n", ops->name, B, T, C, NH);
  if (strcmp(ops->name, "cuda") != 0) {
    run(ops, "fp32", B, T, C, NH);
    return 0;
  }
  ops->matmul_half(1);
  /* a process sizes its caches for one path (the CUDA table refuses a switch between the fused
   * kernels and the GEMMs after that), so the GEMMs are a run of their own */
  const char *a = getenv("BRIGADE_CUDA_ATTENTION");
  if (a && !strcmp(a, "gemm")) {
    run(ops, "bf16 per-head GEMMs", B, T, C, NH);
    return 0;
  }
  static const char *kinds[] = {"mma", "wmma"};
  char label[64];
  for (int k = 0; k < 2; k++) {
    setenv("BRIGADE_CUDA_FLASH", kinds[k], 1);
    snprintf(label, sizeof label, "bf16 fused, BRIGADE_CUDA_FLASH=%s", kinds[k]);
    run(ops, label, B, T, C, NH);
  }
  unsetenv("BRIGADE_CUDA_FLASH");
  return 0;
}
