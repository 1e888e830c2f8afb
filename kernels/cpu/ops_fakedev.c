/* kernels/cpu/ops_fakedev.c: "fakedev", the CPU kernels behind buffers the host cannot touch.
 *
 * A test backend for the code that moves data between host and backend memory (layers/,
 * pipe/, zero/) on machines without a GPU. alloc returns the calloc'd address with bit 62 set:
 * a non-canonical x86-64 address, so any host dereference of a buffer that should have gone
 * through to_host / to_device faults at once. Every op checks that each buffer argument
 * carries the tag (a host pointer handed to a "device" op aborts, naming the op and the
 * argument), clears it and calls the CPU table: results are the CPU's, bit for bit. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops.h"

#define TAG ((uintptr_t)1 << 62)

static const kernels_ops *cpu(void) { return kernels_cpu_ops(); }

static void *untag(const char *op, const char *arg, const void *p, int null_ok) {
  uintptr_t u = (uintptr_t)p;
  if (!p && null_ok) return NULL;
  if (!(u & TAG)) {
    fprintf(stderr, "fakedev: %s got a host pointer (%p) for %s, not backend memory\n", op, p, arg);
    abort();
  }
  return (void *)(u & ~TAG);
}

static void *host_side(const char *op, const void *p) {
  if ((uintptr_t)p & TAG) {
    fprintf(stderr, "fakedev: %s got backend memory (%p) where host memory belongs\n", op, p);
    abort();
  }
  return (void *)p;
}

static void *fd_alloc(size_t bytes) {
  void *p = calloc(bytes ? bytes : 1, 1);
  return p ? (void *)((uintptr_t)p | TAG) : NULL;
}
static void fd_free(void *p) {
  if (p) free(untag("free", "p", p, 0));
}
static void fd_to_device(void *dst, const void *src, size_t bytes) {
  memcpy(untag("to_device", "dst", dst, 0), host_side("to_device", src), bytes);
}
static void fd_to_host(void *dst, const void *src, size_t bytes) {
  memcpy(host_side("to_host", dst), untag("to_host", "src", src, 0), bytes);
}
static void fd_sync(void) {}

static void fd_gemm(float *c, const float *a, const float *b, int M, int N, int K, int transa,
                    int transb, float alpha, float beta) {
  cpu()->gemm((float *)untag("gemm", "c", c, 0), (const float *)untag("gemm", "a", a, 0),
              (const float *)untag("gemm", "b", b, 0), M, N, K, transa, transb, alpha, beta);
}

static void fd_gemm_batched(float *c, const float *a, const float *b, int batch, size_t stride_c,
                            size_t stride_a, size_t stride_b, int M, int N, int K, int transa,
                            int transb, float alpha, float beta) {
  cpu()->gemm_batched((float *)untag("gemm_batched", "c", c, 0),
                      (const float *)untag("gemm_batched", "a", a, 0),
                      (const float *)untag("gemm_batched", "b", b, 0), batch, stride_c, stride_a,
                      stride_b, M, N, K, transa, transb, alpha, beta);
}

static void fd_bias_add(float *out, const float *bias, int N, int C) {
  cpu()->bias_add((float *)untag("bias_add", "out", out, 0),
                  (const float *)untag("bias_add", "bias", bias, 0), N, C);
}

static void fd_bias_grad(float *dbias, const float *dout, int N, int C) {
  cpu()->bias_grad((float *)untag("bias_grad", "dbias", dbias, 0),
                   (const float *)untag("bias_grad", "dout", dout, 0), N, C);
}

static void fd_gelu_forward(float *out, const float *in, size_t n) {
  cpu()->gelu_forward((float *)untag("gelu_forward", "out", out, 0),
                      (const float *)untag("gelu_forward", "in", in, 0), n);
}

static void fd_gelu_backward(float *din, const float *in, const float *dout, size_t n) {
  cpu()->gelu_backward((float *)untag("gelu_backward", "din", din, 0),
                       (const float *)untag("gelu_backward", "in", in, 0),
                       (const float *)untag("gelu_backward", "dout", dout, 0), n);
}

static void fd_relu_forward(float *out, const float *in, size_t n) {
  cpu()->relu_forward((float *)untag("relu_forward", "out", out, 0),
                      (const float *)untag("relu_forward", "in", in, 0), n);
}

static void fd_relu_backward(float *din, const float *in, const float *dout, size_t n) {
  cpu()->relu_backward((float *)untag("relu_backward", "din", din, 0),
                       (const float *)untag("relu_backward", "in", in, 0),
                       (const float *)untag("relu_backward", "dout", dout, 0), n);
}

static void fd_layernorm_forward(float *out, float *mean, float *rstd, const float *in,
                                 const float *w, const float *b, int N, int C, float eps) {
  cpu()->layernorm_forward((float *)untag("layernorm_forward", "out", out, 0),
                           (float *)untag("layernorm_forward", "mean", mean, 0),
                           (float *)untag("layernorm_forward", "rstd", rstd, 0),
                           (const float *)untag("layernorm_forward", "in", in, 0),
                           (const float *)untag("layernorm_forward", "w", w, 0),
                           (const float *)untag("layernorm_forward", "b", b, 0), N, C, eps);
}

static void fd_layernorm_backward_input(float *din, const float *dout, const float *in,
                                        const float *w, const float *mean, const float *rstd, int N,
                                        int C) {
  cpu()->layernorm_backward_input((float *)untag("layernorm_backward_input", "din", din, 0),
                                  (const float *)untag("layernorm_backward_input", "dout", dout, 0),
                                  (const float *)untag("layernorm_backward_input", "in", in, 0),
                                  (const float *)untag("layernorm_backward_input", "w", w, 0),
                                  (const float *)untag("layernorm_backward_input", "mean", mean, 0),
                                  (const float *)untag("layernorm_backward_input", "rstd", rstd, 0),
                                  N, C);
}

static void fd_layernorm_backward_weight(float *dw, float *db, const float *dout, const float *in,
                                         const float *mean, const float *rstd, int N, int C) {
  cpu()->layernorm_backward_weight(
      (float *)untag("layernorm_backward_weight", "dw", dw, 0),
      (float *)untag("layernorm_backward_weight", "db", db, 0),
      (const float *)untag("layernorm_backward_weight", "dout", dout, 0),
      (const float *)untag("layernorm_backward_weight", "in", in, 0),
      (const float *)untag("layernorm_backward_weight", "mean", mean, 0),
      (const float *)untag("layernorm_backward_weight", "rstd", rstd, 0), N, C);
}

static void fd_softmax_forward(float *out, const float *in, int N, int V) {
  cpu()->softmax_forward((float *)untag("softmax_forward", "out", out, 0),
                         (const float *)untag("softmax_forward", "in", in, 0), N, V);
}

static void fd_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                                 int NH) {
  cpu()->attention_forward((float *)untag("attention_forward", "out", out, 0),
                           (float *)untag("attention_forward", "att", att, 0),
                           (const float *)untag("attention_forward", "qkv", qkv, 0), B, T, C, NH);
}

static void fd_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                                  const float *att, int B, int T, int C, int NH) {
  cpu()->attention_backward((float *)untag("attention_backward", "dqkv", dqkv, 0),
                            (float *)untag("attention_backward", "scratch", scratch, 0),
                            (const float *)untag("attention_backward", "dout", dout, 0),
                            (const float *)untag("attention_backward", "qkv", qkv, 0),
                            (const float *)untag("attention_backward", "att", att, 0), B, T, C, NH);
}

static void fd_embedding_forward(float *out, const int32_t *tok, const float *wte, const float *wpe,
                                 int B, int T, int C) {
  cpu()->embedding_forward((float *)untag("embedding_forward", "out", out, 0),
                           (const int32_t *)untag("embedding_forward", "tok", tok, 0),
                           (const float *)untag("embedding_forward", "wte", wte, 0),
                           (const float *)untag("embedding_forward", "wpe", wpe, 0), B, T, C);
}

static void fd_embedding_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tok,
                                  int B, int T, int C) {
  cpu()->embedding_backward((float *)untag("embedding_backward", "dwte", dwte, 0),
                            (float *)untag("embedding_backward", "dwpe", dwpe, 0),
                            (const float *)untag("embedding_backward", "dout", dout, 0),
                            (const int32_t *)untag("embedding_backward", "tok", tok, 0), B, T, C);
}

static void fd_xent_forward(float *losses, float *probs, const float *logits,
                            const int32_t *targets, int N, int V) {
  cpu()->xent_forward((float *)untag("xent_forward", "losses", losses, 0),
                      (float *)untag("xent_forward", "probs", probs, 0),
                      (const float *)untag("xent_forward", "logits", logits, 0),
                      (const int32_t *)untag("xent_forward", "targets", targets, 0), N, V);
}

static void fd_xent_backward(float *dlogits, const float *probs, const int32_t *targets,
                             float scale, int N, int V) {
  cpu()->xent_backward((float *)untag("xent_backward", "dlogits", dlogits, 0),
                       (const float *)untag("xent_backward", "probs", probs, 0),
                       (const int32_t *)untag("xent_backward", "targets", targets, 0), scale, N, V);
}

static void fd_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                     float beta2, float eps, float weight_decay, int t, float grad_scale) {
  cpu()->adamw((float *)untag("adamw", "p", p, 0), (const float *)untag("adamw", "g", g, 0),
               (float *)untag("adamw", "m", m, 0), (float *)untag("adamw", "v", v, 0), n, lr, beta1,
               beta2, eps, weight_decay, t, grad_scale);
}

static void fd_sgd(float *p, const float *g, float *mom, size_t n, float lr, float momentum,
                   float weight_decay, float grad_scale) {
  cpu()->sgd((float *)untag("sgd", "p", p, 0), (const float *)untag("sgd", "g", g, 0),
             (float *)untag("sgd", "mom", mom, 1), n, lr, momentum, weight_decay, grad_scale);
}

static void fd_axpy(float *y, float a, const float *x, size_t n) {
  cpu()->axpy((float *)untag("axpy", "y", y, 0), a, (const float *)untag("axpy", "x", x, 0), n);
}

static void fd_scale(float *x, float a, size_t n) {
  cpu()->scale((float *)untag("scale", "x", x, 0), a, n);
}

static void fd_fill(float *x, float v, size_t n) {
  cpu()->fill((float *)untag("fill", "x", x, 0), v, n);
}

static void fd_zero(float *x, size_t n) { cpu()->zero((float *)untag("zero", "x", x, 0), n); }

static void fd_copy(float *dst, const float *src, size_t n) {
  cpu()->copy((float *)untag("copy", "dst", dst, 0), (const float *)untag("copy", "src", src, 0),
              n);
}

static double fd_sumsq(const float *x, size_t n) {
  return cpu()->sumsq((const float *)untag("sumsq", "x", x, 0), n);
}

static size_t fd_nonfinite(const float *x, size_t n) {
  return cpu()->nonfinite((const float *)untag("nonfinite", "x", x, 0), n);
}

static void fd_cast_f32_to_bf16(uint16_t *out, const float *in, size_t n) {
  cpu()->cast_f32_to_bf16((uint16_t *)untag("cast_f32_to_bf16", "out", out, 0),
                          (const float *)untag("cast_f32_to_bf16", "in", in, 0), n);
}

static void fd_cast_bf16_to_f32(float *out, const uint16_t *in, size_t n) {
  cpu()->cast_bf16_to_f32((float *)untag("cast_bf16_to_f32", "out", out, 0),
                          (const uint16_t *)untag("cast_bf16_to_f32", "in", in, 0), n);
}

static void fd_cast_f32_to_f16(uint16_t *out, const float *in, size_t n) {
  cpu()->cast_f32_to_f16((uint16_t *)untag("cast_f32_to_f16", "out", out, 0),
                         (const float *)untag("cast_f32_to_f16", "in", in, 0), n);
}

static void fd_cast_f16_to_f32(float *out, const uint16_t *in, size_t n) {
  cpu()->cast_f16_to_f32((float *)untag("cast_f16_to_f32", "out", out, 0),
                         (const uint16_t *)untag("cast_f16_to_f32", "in", in, 0), n);
}

static void fd_round_bf16(float *x, size_t n) {
  cpu()->round_bf16((float *)untag("round_bf16", "x", x, 0), n);
}

static void fd_round_fp16(float *x, size_t n) {
  cpu()->round_fp16((float *)untag("round_fp16", "x", x, 0), n);
}

static kernels_ops table;

const kernels_ops *kernels_fakedev_ops(void) {
  if (!table.name) {
    table = *cpu();
    table.name = "fakedev";
    table.device_memory = 1;
    table.alloc = fd_alloc, table.free = fd_free, table.to_device = fd_to_device,
    table.to_host = fd_to_host;
    table.sync = fd_sync;
    table.gemm = fd_gemm;
    table.gemm_batched = fd_gemm_batched;
    table.bias_add = fd_bias_add;
    table.bias_grad = fd_bias_grad;
    table.gelu_forward = fd_gelu_forward;
    table.gelu_backward = fd_gelu_backward;
    table.relu_forward = fd_relu_forward;
    table.relu_backward = fd_relu_backward;
    table.layernorm_forward = fd_layernorm_forward;
    table.layernorm_backward_input = fd_layernorm_backward_input;
    table.layernorm_backward_weight = fd_layernorm_backward_weight;
    table.softmax_forward = fd_softmax_forward;
    table.attention_forward = fd_attention_forward;
    table.attention_backward = fd_attention_backward;
    table.embedding_forward = fd_embedding_forward;
    table.embedding_backward = fd_embedding_backward;
    table.xent_forward = fd_xent_forward;
    table.xent_backward = fd_xent_backward;
    table.adamw = fd_adamw;
    table.sgd = fd_sgd;
    table.axpy = fd_axpy;
    table.scale = fd_scale;
    table.fill = fd_fill;
    table.zero = fd_zero;
    table.copy = fd_copy;
    table.sumsq = fd_sumsq;
    table.nonfinite = fd_nonfinite;
    table.cast_f32_to_bf16 = fd_cast_f32_to_bf16;
    table.cast_bf16_to_f32 = fd_cast_bf16_to_f32;
    table.cast_f32_to_f16 = fd_cast_f32_to_f16;
    table.cast_f16_to_f32 = fd_cast_f16_to_f32;
    table.round_bf16 = fd_round_bf16;
    table.round_fp16 = fd_round_fp16;
  }
  return &table;
}
