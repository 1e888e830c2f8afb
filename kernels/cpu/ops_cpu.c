/* kernels/cpu/ops_cpu.c: the CPU op table. GEMMs through OpenBLAS; everything else is plain C
 * loops in a fixed order (deterministic), written after llm.c's train_gpt2.c. */
#include <cblas.h>
#include <unistd.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/ops.h"

static void gemm(float *c, const float *a, const float *b, int M, int N, int K, int transa,
                 int transb, float alpha, float beta) {
  cblas_sgemm(CblasRowMajor, transa ? CblasTrans : CblasNoTrans, transb ? CblasTrans : CblasNoTrans,
              M, N, K, alpha, a, transa ? M : K, b, transb ? K : N, beta, c, N);
}

static void bias_add(float *out, const float *bias, int N, int C) {
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) out[(size_t)n * C + c] += bias[c];
}

static void bias_grad(float *dbias, const float *dout, int N, int C) {
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) dbias[c] += dout[(size_t)n * C + c];
}

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */

static void gelu_forward(float *out, const float *in, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float x = in[i], cube = 0.044715f * x * x * x;
    out[i] = 0.5f * x * (1.0f + tanhf(GELU_K * (x + cube)));
  }
}

static void gelu_backward(float *din, const float *in, const float *dout, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float x = in[i], cube = 0.044715f * x * x * x;
    float t = tanhf(GELU_K * (x + cube));
    float sech2 = 1.0f - t * t;
    float local = 0.5f * (1.0f + t) + x * 0.5f * sech2 * GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
    din[i] = local * dout[i];
  }
}

static void relu_forward(float *out, const float *in, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = in[i] > 0 ? in[i] : 0;
}

static void relu_backward(float *din, const float *in, const float *dout, size_t n) {
  for (size_t i = 0; i < n; i++) din[i] = in[i] > 0 ? dout[i] : 0;
}

static void layernorm_forward(float *out, float *mean, float *rstd, const float *in, const float *w,
                              const float *b, int N, int C, float eps) {
  for (int n = 0; n < N; n++) {
    const float *x = in + (size_t)n * C;
    float m = 0, v = 0;
    for (int c = 0; c < C; c++) m += x[c];
    m /= C;
    for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
    v /= C;
    float s = 1.0f / sqrtf(v + eps);
    float *o = out + (size_t)n * C;
    for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * w[c] + b[c];
    mean[n] = m, rstd[n] = s;
  }
}

static void layernorm_backward_input(float *din, const float *dout, const float *in, const float *w,
                                     const float *mean, const float *rstd, int N, int C) {
  for (int n = 0; n < N; n++) {
    const float *x = in + (size_t)n * C, *dy = dout + (size_t)n * C;
    float m = mean[n], s = rstd[n], dmean = 0, dnorm = 0;
    for (int c = 0; c < C; c++) {
      float norm = (x[c] - m) * s, dn = w[c] * dy[c];
      dmean += dn, dnorm += dn * norm;
    }
    dmean /= C, dnorm /= C;
    float *dx = din + (size_t)n * C;
    for (int c = 0; c < C; c++) {
      float norm = (x[c] - m) * s;
      dx[c] = (w[c] * dy[c] - dmean - norm * dnorm) * s;
    }
  }
}

static void layernorm_backward_weight(float *dw, float *db, const float *dout, const float *in,
                                      const float *mean, const float *rstd, int N, int C) {
  for (int n = 0; n < N; n++) {
    const float *x = in + (size_t)n * C, *dy = dout + (size_t)n * C;
    for (int c = 0; c < C; c++) {
      dw[c] += (x[c] - mean[n]) * rstd[n] * dy[c];
      db[c] += dy[c];
    }
  }
}

static void attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
  int hs = C / NH;
  float scale = 1.0f / sqrtf((float)hs);
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int h = 0; h < NH; h++) {
        const float *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
        float *a = att + (((size_t)b * NH + h) * T + t) * T;
        float mx = -INFINITY;
        for (int t2 = 0; t2 <= t; t2++) {
          const float *k = qkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
          float d = 0;
          for (int i = 0; i < hs; i++) d += q[i] * k[i];
          d *= scale;
          a[t2] = d;
          if (d > mx) mx = d;
        }
        float sum = 0;
        for (int t2 = 0; t2 <= t; t2++) sum += (a[t2] = expf(a[t2] - mx));
        float inv = 1.0f / sum;
        for (int t2 = 0; t2 < T; t2++) a[t2] = t2 <= t ? a[t2] * inv : 0.0f;
        float *o = out + ((size_t)b * T + t) * C + h * hs;
        for (int i = 0; i < hs; i++) o[i] = 0;
        for (int t2 = 0; t2 <= t; t2++) {
          const float *v = qkv + ((size_t)b * T + t2) * 3 * C + 2 * C + h * hs;
          for (int i = 0; i < hs; i++) o[i] += a[t2] * v[i];
        }
      }
}

/* scratch: 2*T floats (gradient of one attention row before and after the softmax). */
static void attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                               const float *att, int B, int T, int C, int NH) {
  int hs = C / NH;
  float scale = 1.0f / sqrtf((float)hs);
  memset(dqkv, 0, sizeof(float) * (size_t)B * T * 3 * C);
  float *datt = scratch, *dpre = scratch + T;
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int h = 0; h < NH; h++) {
        const float *a = att + (((size_t)b * NH + h) * T + t) * T;
        const float *dy = dout + ((size_t)b * T + t) * C + h * hs;
        const float *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
        float *dq = dqkv + ((size_t)b * T + t) * 3 * C + h * hs;
        float dot = 0;
        for (int t2 = 0; t2 <= t; t2++) {
          const float *v = qkv + ((size_t)b * T + t2) * 3 * C + 2 * C + h * hs;
          float *dv = dqkv + ((size_t)b * T + t2) * 3 * C + 2 * C + h * hs;
          float d = 0;
          for (int i = 0; i < hs; i++) {
            d += v[i] * dy[i];
            dv[i] += a[t2] * dy[i];
          }
          datt[t2] = d;
          dot += a[t2] * d;
        }
        for (int t2 = 0; t2 <= t; t2++) dpre[t2] = a[t2] * (datt[t2] - dot) * scale;
        for (int t2 = 0; t2 <= t; t2++) {
          const float *k = qkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
          float *dk = dqkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
          for (int i = 0; i < hs; i++) {
            dq[i] += k[i] * dpre[t2];
            dk[i] += q[i] * dpre[t2];
          }
        }
      }
}

static void embedding_forward(float *out, const int32_t *tok, const float *wte, const float *wpe,
                              int B, int T, int C) {
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      float *o = out + ((size_t)b * T + t) * C;
      const float *e = wte + (size_t)tok[b * T + t] * C, *p = wpe + (size_t)t * C;
      for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
    }
}

static void embedding_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tok,
                               int B, int T, int C) {
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      const float *d = dout + ((size_t)b * T + t) * C;
      float *de = dwte + (size_t)tok[b * T + t] * C, *dp = dwpe + (size_t)t * C;
      for (int c = 0; c < C; c++) de[c] += d[c], dp[c] += d[c];
    }
}

static void xent_forward(float *losses, float *probs, const float *logits, const int32_t *targets,
                         int N, int V) {
  for (int n = 0; n < N; n++) {
    const float *x = logits + (size_t)n * V;
    float *pr = probs + (size_t)n * V;
    float mx = -INFINITY;
    for (int i = 0; i < V; i++) mx = x[i] > mx ? x[i] : mx;
    double sum = 0;
    for (int i = 0; i < V; i++) sum += (pr[i] = expf(x[i] - mx));
    float inv = (float)(1.0 / sum);
    for (int i = 0; i < V; i++) pr[i] *= inv;
    losses[n] = (float)log(sum) - (x[targets[n]] - mx);
  }
}

static void xent_backward(float *dlogits, const float *probs, const int32_t *targets, float scale,
                          int N, int V) {
  for (int n = 0; n < N; n++) {
    const float *pr = probs + (size_t)n * V;
    float *d = dlogits + (size_t)n * V;
    for (int i = 0; i < V; i++) d[i] = (pr[i] - (i == targets[n] ? 1.0f : 0.0f)) * scale;
  }
}

static void adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                  float beta2, float eps, float weight_decay, int t, float grad_scale) {
  float c1 = 1.0f - powf(beta1, (float)t), c2 = 1.0f - powf(beta2, (float)t);
  for (size_t i = 0; i < n; i++) {
    float gi = g[i] * grad_scale;
    m[i] = beta1 * m[i] + (1.0f - beta1) * gi;
    v[i] = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    float mh = m[i] / c1, vh = v[i] / c2;
    p[i] -= lr * (mh / (sqrtf(vh) + eps) + weight_decay * p[i]);
  }
}

static void sgd(float *p, const float *g, float *mom, size_t n, float lr, float momentum,
                float weight_decay, float grad_scale) {
  for (size_t i = 0; i < n; i++) {
    float gi = g[i] * grad_scale;
    if (mom) gi = mom[i] = momentum * mom[i] + gi;
    p[i] -= lr * (gi + weight_decay * p[i]);
  }
}

static void axpy(float *y, float a, const float *x, size_t n) {
  for (size_t i = 0; i < n; i++) y[i] += a * x[i];
}
static void scale(float *x, float a, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] *= a;
}
static void fill(float *x, float v, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = v;
}
static void copy(float *dst, const float *src, size_t n) { memmove(dst, src, sizeof(float) * n); }
static double sumsq(const float *x, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
  return s;
}
static size_t nonfinite(const float *x, size_t n) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) k += !isfinite(x[i]);
  return k;
}
static void round_bf16(float *x, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = kernels_bf16_to_f32(kernels_f32_to_bf16(x[i]));
}
static void round_fp16(float *x, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = kernels_f16_to_f32(kernels_f32_to_f16(x[i]));
}

static const kernels_ops cpu_ops = {
    .name = "cpu", .gemm = gemm, .bias_add = bias_add, .bias_grad = bias_grad,
    .gelu_forward = gelu_forward, .gelu_backward = gelu_backward, .relu_forward = relu_forward,
    .relu_backward = relu_backward, .layernorm_forward = layernorm_forward,
    .layernorm_backward_input = layernorm_backward_input,
    .layernorm_backward_weight = layernorm_backward_weight, .attention_forward = attention_forward,
    .attention_backward = attention_backward, .embedding_forward = embedding_forward,
    .embedding_backward = embedding_backward, .xent_forward = xent_forward,
    .xent_backward = xent_backward, .adamw = adamw, .sgd = sgd, .axpy = axpy, .scale = scale,
    .fill = fill, .copy = copy, .sumsq = sumsq, .nonfinite = nonfinite, .round_bf16 = round_bf16,
    .round_fp16 = round_fp16,
};

void openblas_set_num_threads(int);

void kernels_cpu_init(int threads) {
  if (threads > 0) openblas_set_num_threads(threads);
}

void kernels_cpu_reexec(char **argv) {
  /* OpenBLAS 0.3.21 does not know Zen 5 and falls back to its Haswell kernels (about 107
   * GFLOP/s a core here); its SkylakeX kernels run at about 202. The choice is made when the
   * library is loaded, before main, so the variable has to be in the environment at exec:
   * set it and exec ourselves once. BRIGADE_NO_REEXEC=1 (or any OPENBLAS_CORETYPE) skips it. */
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f") || getenv("OPENBLAS_CORETYPE") || getenv("BRIGADE_NO_REEXEC")) return;
  setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
  execv("/proc/self/exe", argv); /* returns only on failure: then run with the default kernels */
}

const kernels_ops *kernels_cpu_ops(void) { return &cpu_ops; }

int kernels_get_ops(const char *backend, const kernels_ops **out) {
  if (strcmp(backend, "cpu") == 0) {
    *out = &cpu_ops;
    return CORE_OK;
  }
  if (strcmp(backend, "cuda") == 0)
    return core_error_set(CORE_ERUNTIME, "backend \"cuda\": this build has no CUDA backend yet");
  return core_error_set(CORE_EINPUT, "unknown backend \"%s\" (expected cpu or cuda)", backend);
}
