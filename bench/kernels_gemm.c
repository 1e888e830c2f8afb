/* bench/kernels_gemm.c: GFLOP/s of the CPU table's gemm (OpenBLAS sgemm) on the products a
 * GPT-2 124M layer makes with B*T = 256 tokens, on 1 and 2 threads. Prints figures; exits 0.
 * Each shape runs for about BENCH_SECONDS after one warm-up call (first touch of the pages and
 * OpenBLAS's buffers is slow on these machines), so the whole run takes a few seconds. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cblas.h>

#include "kernels/ops.h"

#define BENCH_SECONDS 0.25

typedef struct {
  const char *what;
  int M, N, K, transa, transb; /* as kernels_ops.gemm takes them */
} shape;

/* A linear layer out[BT,OC] = in[BT,C] @ W[OC,C]^T (forward), din = dout @ W (backward
 * input), dW += dout^T @ in (backward weight), as layers/basic.c calls them. */
static const shape shapes[] = {
    {"attn qkv   fwd  256x2304x768", 256, 2304, 768, 0, 1},
    {"attn proj  fwd  256x768x768 ", 256, 768, 768, 0, 1},
    {"mlp fc     fwd  256x3072x768", 256, 3072, 768, 0, 1},
    {"mlp proj   fwd  256x768x3072", 256, 768, 3072, 0, 1},
    {"mlp fc     dinp 256x768x3072", 256, 768, 3072, 0, 0},
    {"mlp fc     dW   3072x768x256", 3072, 768, 256, 1, 0},
};

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float *random_buffer(size_t n, unsigned *seed) {
  float *x = malloc(n * sizeof(float));
  if (!x) {
    fprintf(stderr, "kernels_gemm: out of memory\n");
    exit(1);
  }
  for (size_t i = 0; i < n; i++) x[i] = (float)rand_r(seed) / (float)RAND_MAX - 0.5f;
  return x;
}

/* Calls per second of one product, as GFLOP/s (2 M N K flops a call) */
static double measure(const kernels_ops *ops, const shape *s, float *a, float *b, float *c) {
  float beta = s->transa ? 1.0f : 0.0f; /* weight gradients accumulate */
  ops->gemm(c, a, b, s->M, s->N, s->K, s->transa, s->transb, 1.0f, beta); /* warm-up */
  int calls = 0;
  double t0 = now(), t;
  do {
    ops->gemm(c, a, b, s->M, s->N, s->K, s->transa, s->transb, 1.0f, beta);
    calls++;
  } while ((t = now() - t0) < BENCH_SECONDS);
  return 2.0 * s->M * s->N * s->K * calls / t / 1e9;
}

int main(void) {
  const char *env = getenv("OPENBLAS_CORETYPE"); /* as the user gave it, before init */
  printf("OPENBLAS_CORETYPE at start: %s\n", env ? env : "(unset)");
  kernels_cpu_init(1);
  const kernels_ops *ops = kernels_cpu_ops();
  printf("OpenBLAS kernels in use: %s, %d cores\n", kernels_cpu_blas_core(),
         openblas_get_num_procs());
  size_t most = 3072 * 768; /* the largest operand of any shape above */
  unsigned seed = 1;
  float *a = random_buffer(most, &seed), *b = random_buffer(most, &seed);
  float *c = random_buffer(most, &seed);
  printf("%-30s %12s %12s\n", "product (M x N x K)", "1 thread", "2 threads");
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    double gf[2];
    for (int threads = 1; threads <= 2; threads++) {
      openblas_set_num_threads(threads);
      gf[threads - 1] = measure(ops, &shapes[i], a, b, c);
    }
    printf("%-30s %7.1f GF/s %7.1f GF/s\n", shapes[i].what, gf[0], gf[1]);
  }
  free(a), free(b), free(c);
  return 0;
}
