/* kernels/cpu/ops_cpu.c: the CPU op table. GEMMs and attention go through OpenBLAS (blas_cpu.c,
 * attention_cpu.c); GELU, the exps, LayerNorm and AdamW through the vector loops of vec_body.h
 * (4 or 8 lanes, the same bits); everything else here is a plain loop in a fixed order, after
 * llm.c's train_gpt2.c, so results are bit-for-bit repeatable. Sums that can grow long (a
 * softmax over a vocabulary, a sum of squares over all parameters) are kept in double. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/ops.h"

/* ---- memory: host memory is the CPU backend's memory ---- */

/* calloc(1, 0) may return NULL or a pointer; either is fine for free() */
static void *mem_alloc(size_t bytes) { return calloc(1, bytes); }
static void mem_free(void *p) { free(p); }
static void mem_to_device(void *dst, const void *src_host, size_t bytes) {
  if (bytes) memcpy(dst, src_host, bytes);
}
static void mem_to_host(void *dst_host, const void *src, size_t bytes) {
  if (bytes) memcpy(dst_host, src, bytes);
}
static void mem_sync(void) {} /* every op has finished when it returns */

/* ---- bias ---- */

static void bias_add(float *out, const float *bias, int N, int C) {
  for (int n = 0; n < N; n++) {
    float *o = out + (size_t)n * C;
    for (int c = 0; c < C; c++) o[c] += bias[c];
  }
}

static void bias_grad(float *dbias, const float *dout, int N, int C) {
  for (int n = 0; n < N; n++) {
    const float *d = dout + (size_t)n * C;
    for (int c = 0; c < C; c++) dbias[c] += d[c];
  }
}

/* ---- activations ---- */

/* GELU, exp, LayerNorm and AdamW run on the vector loops of vec_body.h, 4 or 8 lanes by what
 * the CPU has (the same bits either way). */
static const kernels_cpu_vec *vec_in_use;
static void select_vec_once(void) {
  __builtin_cpu_init();
  const char *e = getenv("BRIGADE_CPU_VEC");
  int avx2 = __builtin_cpu_supports("avx2") && !(e && !strcmp(e, "sse"));
  vec_in_use = avx2 ? &kernels_cpu_vec_avx2 : &kernels_cpu_vec_sse;
}
const kernels_cpu_vec *kernels_cpu_vec_get(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, select_vec_once);
  return vec_in_use;
}

const char *kernels_cpu_vec_name(void) { return kernels_cpu_vec_get()->name; }

void kernels_cpu_exp_shifted(float *out, const float *x, float shift, size_t n) {
  kernels_cpu_vec_get()->exp_shifted(out, x, shift, n);
}

static void gelu_forward(float *out, const float *in, size_t n) { kernels_cpu_vec_get()->gelu_forward(out, in, n); }

static void gelu_backward(float *din, const float *in, const float *dout, size_t n) {
  kernels_cpu_vec_get()->gelu_backward(din, in, dout, n);
}

static void relu_forward(float *out, const float *in, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = in[i] > 0.0f ? in[i] : 0.0f;
}

static void relu_backward(float *din, const float *in, const float *dout, size_t n) {
  for (size_t i = 0; i < n; i++) din[i] = in[i] > 0.0f ? dout[i] : 0.0f;
}

/* ---- layernorm (vector loops: vec_body.h) ---- */

static void layernorm_forward(float *out, float *mean, float *rstd, const float *in, const float *w,
                              const float *b, int N, int C, float eps) {
  kernels_cpu_vec_get()->layernorm_forward(out, mean, rstd, in, w, b, N, C, eps);
}

static void layernorm_backward_input(float *din, const float *dout, const float *in, const float *w,
                                     const float *mean, const float *rstd, int N, int C) {
  kernels_cpu_vec_get()->layernorm_backward_input(din, dout, in, w, mean, rstd, N, C);
}

static void layernorm_backward_weight(float *dw, float *db, const float *dout, const float *in,
                                      const float *mean, const float *rstd, int N, int C) {
  kernels_cpu_vec_get()->layernorm_backward_weight(dw, db, dout, in, mean, rstd, N, C);
}

/* ---- softmax and cross-entropy ---- */

/* out = softmax(x) over V entries; returns the sum of exp(x - max), in double, and the max */
static double softmax_row(float *out, const float *x, int V, float *max_out) {
  float mx = x[0];
  for (int i = 1; i < V; i++) mx = x[i] > mx ? x[i] : mx;
  double sum = 0.0;
  kernels_cpu_exp_shifted(out, x, mx, (size_t)V);
  for (int i = 0; i < V; i++) sum += out[i];
  float inv = (float)(1.0 / sum); /* sum >= 1: the max term is exp(0) */
  for (int i = 0; i < V; i++) out[i] *= inv;
  *max_out = mx;
  return sum;
}

static void softmax_forward(float *out, const float *in, int N, int V) {
  if (V <= 0) return; /* no row to normalise (and no x[0] to start the max from) */
  float mx;
  for (int n = 0; n < N; n++) softmax_row(out + (size_t)n * V, in + (size_t)n * V, V, &mx);
}

/* -log p[target] = log(sum exp(x - max)) - (x[target] - max), not -log of the rounded
 * probability: exact for confident predictions, finite where p underflows to 0 */
static void xent_forward(float *losses, float *probs, const float *logits, const int32_t *targets,
                         int N, int V) {
  if (V <= 0) return; /* no class can be a valid target */
  for (int n = 0; n < N; n++) {
    const float *x = logits + (size_t)n * V;
    float mx, xt = x[targets[n]]; /* read first: probs may be logits */
    double sum = softmax_row(probs + (size_t)n * V, x, V, &mx);
    losses[n] = (float)(log(sum) - ((double)xt - mx));
  }
}

static void xent_backward(float *dlogits, const float *probs, const int32_t *targets, float scale,
                          int N, int V) {
  for (int n = 0; n < N; n++) {
    const float *p = probs + (size_t)n * V;
    float *d = dlogits + (size_t)n * V;
    float pt = p[targets[n]]; /* read before the loop: d may be p */
    for (int i = 0; i < V; i++) d[i] = p[i] * scale;
    d[targets[n]] = (pt - 1.0f) * scale;
  }
}

/* ---- embedding ---- */

static void embedding_forward(float *out, const int32_t *tok, const float *wte, const float *wpe,
                              int B, int T, int C) {
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      float *o = out + ((size_t)b * T + t) * C;
      const float *e = wte + (size_t)tok[(size_t)b * T + t] * C, *p = wpe + (size_t)t * C;
      for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
    }
}

static void embedding_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tok,
                               int B, int T, int C) {
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      const float *d = dout + ((size_t)b * T + t) * C;
      float *de = dwte + (size_t)tok[(size_t)b * T + t] * C, *dp = dwpe + (size_t)t * C;
      for (int c = 0; c < C; c++) {
        de[c] += d[c];
        dp[c] += d[c];
      }
    }
}

/* ---- optimizers ---- */

/* AdamW runs on the vector loops (vec_body.h); p, g, m, v are distinct buffers. */
static void adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1, float beta2, float eps,
                  float weight_decay, int t, float grad_scale) {
  /* bias corrections in double: 1 - beta2^t is small for early steps */
  float c1 = (float)(1.0 - pow(beta1, t)), c2 = (float)(1.0 - pow(beta2, t));
  kernels_cpu_vec_get()->adamw(p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, c1, c2, grad_scale);
}

static void sgd(float *p, const float *g, float *mom, size_t n, float lr, float momentum,
                float weight_decay, float grad_scale) {
  for (size_t i = 0; i < n; i++) {
    float step = g[i] * grad_scale + weight_decay * p[i];
    if (mom) step = mom[i] = momentum * mom[i] + step;
    p[i] -= lr * step;
  }
}

/* ---- vector utilities ---- */

static void axpy(float *y, float a, const float *x, size_t n) {
  for (size_t i = 0; i < n; i++) y[i] += a * x[i];
}

static void scale(float *x, float a, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] *= a;
}

static void fill(float *x, float v, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = v;
}

static void zero(float *x, size_t n) { memset(x, 0, sizeof(float) * n); } /* all-zero bits: +0 */

static void copy(float *dst, const float *src, size_t n) { memmove(dst, src, sizeof(float) * n); }

static double sumsq(const float *x, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
  return s;
}

static size_t nonfinite(const float *x, size_t n) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) k += !isfinite(x[i]);
  return k;
}

/* ---- low precision ---- */

static void cast_f32_to_bf16(uint16_t *out, const float *in, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = kernels_f32_to_bf16(in[i]);
}

static void cast_bf16_to_f32(float *out, const uint16_t *in, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = kernels_bf16_to_f32(in[i]);
}

static void cast_f32_to_f16(uint16_t *out, const float *in, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = kernels_f32_to_f16(in[i]);
}

static void cast_f16_to_f32(float *out, const uint16_t *in, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = kernels_f16_to_f32(in[i]);
}

static void round_bf16(float *x, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = kernels_bf16_to_f32(kernels_f32_to_bf16(x[i]));
}

static void round_fp16(float *x, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = kernels_f16_to_f32(kernels_f32_to_f16(x[i]));
}

/* Mixed precision is emulated on the CPU by rounding on store; the products stay fp32. */
static void matmul_half_ignored(int kind) { (void)kind; }

static const kernels_ops cpu_ops = {
    .matmul_half = matmul_half_ignored,
    .name = "cpu",
    .device_memory = 0, /* host memory: host code may touch the buffers */
    .alloc = mem_alloc,
    .free = mem_free,
    .to_device = mem_to_device,
    .to_host = mem_to_host,
    .sync = mem_sync,
    .gemm = kernels_cpu_gemm,
    .gemm_batched = kernels_cpu_gemm_batched,
    .bias_add = bias_add,
    .bias_grad = bias_grad,
    .gelu_forward = gelu_forward,
    .gelu_backward = gelu_backward,
    .relu_forward = relu_forward,
    .relu_backward = relu_backward,
    .layernorm_forward = layernorm_forward,
    .layernorm_backward_input = layernorm_backward_input,
    .layernorm_backward_weight = layernorm_backward_weight,
    .softmax_forward = softmax_forward,
    .attention_forward = kernels_cpu_attention_forward,
    .attention_backward = kernels_cpu_attention_backward,
    .embedding_forward = embedding_forward,
    .embedding_backward = embedding_backward,
    .xent_forward = xent_forward,
    .xent_backward = xent_backward,
    .adamw = adamw,
    .sgd = sgd,
    .axpy = axpy,
    .scale = scale,
    .fill = fill,
    .zero = zero,
    .copy = copy,
    .sumsq = sumsq,
    .nonfinite = nonfinite,
    .cast_f32_to_bf16 = cast_f32_to_bf16,
    .cast_bf16_to_f32 = cast_bf16_to_f32,
    .cast_f32_to_f16 = cast_f32_to_f16,
    .cast_f16_to_f32 = cast_f16_to_f32,
    .round_bf16 = round_bf16,
    .round_fp16 = round_fp16,
};

const kernels_ops *kernels_cpu_ops(void) {
  kernels_cpu_select_core(); /* once; a no-op after kernels_cpu_init() */
  return &cpu_ops;
}
