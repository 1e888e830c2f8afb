/* bench/gemm_shapes.c: GFLOP/s of a backend's gemm on GPT-2-124M's products at B*T = 16384
 * tokens, the LM head's three (forward, backward input, backward weight) with GPT-2's vocabulary
 * (50257) and with it padded to a multiple of 64 (50304, as llm.c pads it), and as the model
 * runs them (gemm_ld: 50257 classes in logits rows of 50304 floats, zeros in the padding, the
 * weight unpadded), beside the MLP's. Prints figures; exits 0.
 *     build/bench/gemm_shapes [BACKEND [MODE]]    BACKEND: cpu (default) or cuda; MODE: fp32,
 *     bf16 (the operands' 16-bit copies: training's default on cuda), bf16fast (cuBLAS rounds
 *     the fp32 operands). On the CPU the shapes are cut to 256 tokens (seconds, not minutes). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "kernels/ops.h"

typedef struct {
  const char *what;
  int M, N, K, transa, transb; /* as kernels_ops.gemm takes them (layers/basic.c's linear) */
  int lda, ldb, ldc;           /* 0: gemm; else gemm_ld with these (layers/basic.c's lm_head) */
} shape;

#define TOK 16384
static const shape shapes[] = {
    {"mlp fc      fwd ", TOK, 3072, 768, 0, 1, 0, 0, 0},   {"mlp fc      dinp", TOK, 768, 3072, 0, 0, 0, 0, 0},
    {"mlp fc      dW  ", 3072, 768, TOK, 1, 0, 0, 0, 0},   {"head 50257  fwd ", TOK, 50257, 768, 0, 1, 0, 0, 0},
    {"head 50304  fwd ", TOK, 50304, 768, 0, 1, 0, 0, 0},  {"head 50257  dinp", TOK, 768, 50257, 0, 0, 0, 0, 0},
    {"head 50304  dinp", TOK, 768, 50304, 0, 0, 0, 0, 0},  {"head 50257  dW  ", 50257, 768, TOK, 1, 0, 0, 0, 0},
    {"head 50304  dW  ", 50304, 768, TOK, 1, 0, 0, 0, 0},
    {"head ld     fwd ", TOK, 50257, 768, 0, 1, 768, 768, 50304},
    {"head ld     dinp", TOK, 768, 50257, 0, 0, 50304, 768, 768},
    {"head ld     dW  ", 50257, 768, TOK, 1, 0, 50304, 768, 768},
};

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
  const char *backend = argc > 1 ? argv[1] : "cpu", *mode = argc > 2 ? argv[2] : "fp32";
  const kernels_ops *ops;
  kernels_cpu_init(1);
  if (kernels_get_ops(backend, &ops)) {
    fprintf(stderr, "gemm_shapes: %s\n", core_error_msg());
    return 1;
  }
  int kind = !strncmp(mode, "bf16", 4) ? 1 : !strncmp(mode, "fp16", 4) ? 2 : 0;
  if (strcmp(mode, "fp32") && (!kind || (mode[4] && strcmp(mode + 4, "fast")))) {
    fprintf(stderr, "gemm_shapes: mode \"%s\": expected fp32, bf16, fp16, bf16fast or fp16fast\n", mode);
    return 2;
  }
  if (kind) setenv("BRIGADE_CUDA_HALF", mode[4] ? "fast" : "copy", 1);
  ops->matmul_half(kind);
  int tok = ops->device_memory ? TOK : 256; /* the CPU: a cut, so that the run takes seconds */
  printf("gemm_shapes: backend %s, mode %s, %d tokens; best of 5 after a warm-up call\n", ops->name, mode, tok);
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    shape h = shapes[s];
    if (h.M == TOK) h.M = tok;
    if (h.N == TOK) h.N = tok;
    if (h.K == TOK) h.K = tok;
    size_t na = (size_t)h.M * h.K, nb = (size_t)h.K * h.N, nc = (size_t)h.M * h.N;
    if (h.lda) { /* the stored rows with their lengths (padding included) */
      na = (size_t)(h.transa ? h.K : h.M) * h.lda, nb = (size_t)(h.transb ? h.N : h.K) * h.ldb;
      nc = (size_t)h.M * h.ldc;
    }
    float *a = ops->alloc(na * 4), *b = ops->alloc(nb * 4), *c = ops->alloc(nc * 4);
    if (!a || !b || !c) {
      fprintf(stderr, "gemm_shapes: out of memory at %s\n", h.what);
      return 1;
    }
    float va = h.lda ? 0.0f : 0.01f, vb = h.lda ? 0.0f : 0.02f; /* gemm_ld: zeros in the padding */
    ops->fill(a, va, na), ops->fill(b, vb, nb), ops->fill(c, 0.0f, nc);
#define RUN_GEMM()                                                                                 \
  (h.lda ? ops->gemm_ld(c, a, b, h.M, h.N, h.K, h.transa, h.transb, 1.0f, 0.0f, h.lda, h.ldb, h.ldc)           \
         : ops->gemm(c, a, b, h.M, h.N, h.K, h.transa, h.transb, 1.0f, 0.0f))
    RUN_GEMM(); /* warm */
    double best = 0;
    for (int r = 0; r < 5; r++) {
      ops->sync();
      double t = now();
      RUN_GEMM();
      ops->sync();
      t = now() - t;
      double g = 2.0 * h.M * h.N * h.K / t / 1e9;
      if (g > best) best = g;
    }
    printf("  %s M=%-6d N=%-6d K=%-6d %c%c  %10.1f GFLOP/s\n", h.what, h.M, h.N, h.K, h.transa ? 'T' : 'N',
           h.transb ? 'T' : 'N', best);
    ops->free(a), ops->free(b), ops->free(c);
  }
  return 0;
}
