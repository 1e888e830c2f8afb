/* kernels/cpu/vec_body.h: the CPU table's vector loops (exp, softmax, GELU, LayerNorm, AdamW), written once for a
 * vector of VEC_W floats and compiled three times: vec_sse.c (VEC_W 4, x86-64's baseline SSE),
 * vec_avx2.c (VEC_W 8, every function marked target("avx2"), chosen at run time where the CPU
 * has it) and vec_avx512.c (VEC_W 16, target("avx512f"), on request); see kernels_cpu_vec in
 * cpu.h. Include it once per file, after defining VEC_W and VEC_TABLE.
 *
 * The builds give the same bits: each lane runs the same IEEE single-precision operations in the
 * same order (add, multiply, divide, square root, round-to-integer by a magic constant, integer
 * shift; no FMA: -std=c11 keeps GCC from contracting a*b+c), so only how many lanes run at once
 * differs. Sums over a row (LayerNorm's in float, the softmax's in double) are 8 partial sums
 * whatever the width (element i goes to partial i % 8, the partials are then added in order
 * 0..7), so they too give the same bits (the 16-lane build runs LayerNorm on AVX2's loops).
 * tests/kernels/test_vec.c checks all of it.
 *
 * GELU: GPT-2's gelu, 0.5 x (1 + tanh u) with u = sqrt(2/pi) (x + 0.044715 x^3), computed as
 * x sigmoid(2u) = x / (1 + exp(-2u)): the same function (1 + tanh u = 2 / (1 + exp(-2u))), one
 * exp instead of a tanh, and no cancellation at either end. s = sigmoid(2u) below.
 *
 * The exp is our own, because glibc's scalar expf made gelu forward + backward 17% of a step of
 * configs/default.cfg. e^x = 2^k e^r with k = round(x log2 e), r = x - k ln 2 (ln 2 in two parts,
 * Cody-Waite, so r is exact), e^r = 1 + r + r^2 p(r) with Cephes' expf polynomial (about 1 ulp
 * on |r| <= ln2/2), for x in [-87, 88], where 2^k stays a normal float; above ln FLT_MAX it is
 * +inf and below -87 it is 0, as expf (but for expf's subnormals, flushed here); between 88 and
 * ln FLT_MAX it is e^88 (the sigmoid and softmax callers never get there). Every element goes
 * through the same lane arithmetic (the tail of an array is padded into one more vector), so a
 * value's result does not depend on where it sits. */
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/cpu.h"

#if VEC_W == 4
#define VEC_FN static
#elif VEC_W == 8
#define VEC_FN static __attribute__((target("avx2")))
#elif VEC_W == 16
#define VEC_FN static __attribute__((target("avx512f")))
#else
#error "VEC_W must be 4, 8 or 16"
#endif

typedef float vf __attribute__((vector_size(VEC_W * sizeof(float))));
typedef int32_t vi __attribute__((vector_size(VEC_W * sizeof(int32_t))));
/* half a vector of floats, and as many doubles (one register's worth: GCC keeps a wider generic
 * vector in memory) */
typedef float vfh __attribute__((vector_size(VEC_W / 2 * sizeof(float))));
typedef double vdh __attribute__((vector_size(VEC_W / 2 * sizeof(double))));

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f

/* lane-wise: where m (all ones or zero), a, else b */
VEC_FN inline vf v_select(vi m, vf a, vf b) {
  vi ai, bi;
  memcpy(&ai, &a, sizeof ai), memcpy(&bi, &b, sizeof bi);
  vi r = (m & ai) | (~m & bi);
  vf f;
  memcpy(&f, &r, sizeof f);
  return f;
}

VEC_FN inline vf v_exp(vf x) {
  const vf zero = {0}, inf = zero + __builtin_inff();
  const vf hi = zero + 88.0f, lo = zero - 87.0f, big = zero + 88.7228394f; /* ln FLT_MAX */
  vi over = x > big, under = x < lo; /* the ends, as expf gives them (flushing its subnormals) */
  x = v_select(x > hi, hi, x);
  x = v_select(x < lo, lo, x);
  const float magic = 12582912.0f; /* 1.5 * 2^23: adding and subtracting it rounds to an integer */
  vf k = (x * 1.44269504088896341f + magic) - magic;
  vf r = x - k * 0.693359375f;
  r = r - k * -2.12194440e-4f;
  vf p = 1.9875691500e-4f * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  vf e = p * (r * r) + r + 1.0f;
  vi bits = (__builtin_convertvector(k, vi) + 127) << 23; /* 2^k */
  vf two_k;
  memcpy(&two_k, &bits, sizeof two_k);
  return v_select(over, inf, v_select(under, zero, e * two_k));
}

VEC_FN inline vf v_gelu_s(vf x) { return 1.0f / (1.0f + v_exp(-2.0f * GELU_K * (x + GELU_A * x * x * x))); }

/* Loads n <= VEC_W floats into a zero-padded vector, stores the first n lanes back (whole
 * vectors with a constant size, so they compile to one move). */
VEC_FN inline vf v_load(const float *p, size_t n) {
  vf v = {0};
  if (n == VEC_W) memcpy(&v, p, sizeof v);
  else memcpy(&v, p, n * sizeof(float));
  return v;
}
VEC_FN inline void v_store(float *p, vf v, size_t n) {
  if (n == VEC_W) memcpy(p, &v, sizeof v);
  else memcpy(p, &v, n * sizeof(float));
}

VEC_FN void exp_shifted(float *out, const float *x, float shift, size_t n) {
  for (size_t i = 0; i < n; i += VEC_W) {
    size_t k = n - i < VEC_W ? n - i : VEC_W;
    v_store(out + i, v_exp(v_load(x + i, k) - shift), k);
  }
}

/* A row's largest value, as the loop mx = x[i] > mx ? x[i] : mx from mx = x[0] finds it: NaNs
 * never enter (but for a NaN at x[0], which stays); each lane keeps its own maximum from x[0] on,
 * the lanes then met in order. (Of equal zeros the one kept may differ in sign from the scalar
 * loop's; x - max and the softmax are the same for either.) */
VEC_FN float row_max(const float *x, size_t n) {
  vf mv = (vf){0} + x[0];
  size_t i = 0;
  for (; i + VEC_W <= n; i += VEC_W) {
    vf v = v_load(x + i, VEC_W);
    mv = v_select(v > mv, v, mv);
  }
  float m = x[0];
  for (int j = 0; j < VEC_W; j++) m = mv[j] > m ? mv[j] : m;
  for (; i < n; i++) m = x[i] > m ? x[i] : m;
  return m;
}

enum { SOFTMAX_BLOCK = 1024 }; /* floats exped, then summed while in L1 */

/* out = softmax(x) over n > 0 values (out may be x); returns the sum of exp(x - max) (as
 * double: 8 partial sums, element i into partial i % 8 in order, the partials then added 0..7,
 * so every table gives the same bits) and the max in *max_out. */
VEC_FN double softmax(float *out, const float *x, size_t n, float *max_out) {
  float mx = row_max(x, n);
  enum { H = VEC_W / 2, NACC = 8 / H }; /* the 8 partial sums: NACC vectors of H doubles */
  vdh acc[NACC] = {{0}};
  for (size_t b = 0; b < n; b += SOFTMAX_BLOCK) { /* whole groups of 8 (b is a multiple of 8) */
    size_t e = n - b < SOFTMAX_BLOCK ? n : b + SOFTMAX_BLOCK;
    exp_shifted(out + b, x + b, mx, e - b);
    for (size_t i = b; i + 8 <= e; i += 8)
#pragma GCC unroll 4
      for (int a = 0; a < NACC; a++) {
        vfh f;
        memcpy(&f, out + i + (size_t)a * H, sizeof f);
        acc[a] += __builtin_convertvector(f, vdh);
      }
  }
  double part[8], sum;
  memcpy(part, acc, sizeof part);
  for (size_t i = n & ~(size_t)7; i < n; i++) part[i % 8] += (double)out[i]; /* the last group's few */
  sum = part[0];
  for (int j = 1; j < 8; j++) sum += part[j];
  vf inv = (vf){0} + (float)(1.0 / sum); /* sum >= 1: the max term is exp(0) */
  for (size_t i = 0; i < n; i += VEC_W) {
    size_t k = n - i < VEC_W ? n - i : VEC_W;
    v_store(out + i, v_load(out + i, k) * inv, k);
  }
  *max_out = mx;
  return sum;
}

VEC_FN void gelu_forward(float *out, const float *in, size_t n) {
  for (size_t i = 0; i < n; i += VEC_W) {
    size_t k = n - i < VEC_W ? n - i : VEC_W;
    vf x = v_load(in + i, k);
    v_store(out + i, x * v_gelu_s(x), k);
  }
}

/* d/dx x s(2u) = s + 2 x s (1 - s) du/dx, with du/dx = k (1 + 3a x^2); in tanh terms the usual
 * 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx. Where s is 0 or 1 (saturated) the second term
 * is 0: for |x| above about 1.8e19, x^2 is inf and 0 * inf would make it NaN (the same bits
 * everywhere else: there it was +-0 added to s) */
VEC_FN void gelu_backward(float *din, const float *in, const float *dout, size_t n) {
  const vf zero = {0};
  for (size_t i = 0; i < n; i += VEC_W) {
    size_t k = n - i < VEC_W ? n - i : VEC_W;
    vf x = v_load(in + i, k), dy = v_load(dout + i, k), s = v_gelu_s(x);
    vf du = GELU_K * (1.0f + 3.0f * GELU_A * x * x);
    vf slope = v_select((s == 0.0f) | (s == 1.0f), zero, 2.0f * x * s * (1.0f - s) * du);
    v_store(din + i, (s + slope) * dy, k);
  }
}

/* ---- LayerNorm: row sums as 8 partial sums (SUM_LANES), ACCS vectors of VEC_W lanes ---- */
#if VEC_W <= 8

enum { SUM_LANES = 8, ACCS = SUM_LANES / VEC_W };

/* lanes below k all ones, the others zero (k may be <= 0 or >= VEC_W) */
VEC_FN inline vi v_first(long k) {
  static const int32_t iota[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  vi idx, kk = {0};
  memcpy(&idx, iota, sizeof idx);
  kk += (int32_t)(k < 0 ? 0 : k > VEC_W ? VEC_W : k);
  return idx < kk;
}

/* The ACCS vectors at x + i (i a multiple of 8, n the row length): whole ones while i + 8 <= n
 * (constant sizes, unrolled, so the vectors stay in registers), zero lanes past n. */
VEC_FN inline void v_load8(vf out[ACCS], const float *x, size_t i, size_t n) {
  if (i + SUM_LANES <= n) {
#pragma GCC unroll 2
    for (int a = 0; a < ACCS; a++) out[a] = v_load(x + i + (size_t)a * VEC_W, VEC_W);
    return;
  }
  for (int a = 0; a < ACCS; a++) {
    size_t at = i + (size_t)a * VEC_W;
    out[a] = v_load(x + at, at >= n ? 0 : n - at < VEC_W ? n - at : VEC_W);
  }
}
VEC_FN inline void v_store8(float *x, const vf v[ACCS], size_t i, size_t n) {
  if (i + SUM_LANES <= n) {
#pragma GCC unroll 2
    for (int a = 0; a < ACCS; a++) v_store(x + i + (size_t)a * VEC_W, v[a], VEC_W);
    return;
  }
  for (int a = 0; a < ACCS; a++) {
    size_t at = i + (size_t)a * VEC_W;
    if (at < n) v_store(x + at, v[a], n - at < VEC_W ? n - at : VEC_W);
  }
}
VEC_FN inline float v_sum8(const vf acc[ACCS]) {
  float p[SUM_LANES], s;
  memcpy(p, acc, sizeof p);
  s = p[0];
  for (int j = 1; j < SUM_LANES; j++) s += p[j];
  return s;
}

/* mean, then the variance about it (two passes: no cancellation), then the normalised row */
VEC_FN void layernorm_forward(float *out, float *mean, float *rstd, const float *in, const float *w, const float *b,
                              int N, int C, float eps) {
  size_t n = C > 0 ? (size_t)C : 0;
  for (int r = 0; r < N; r++) {
    const float *x = in + (size_t)r * n;
    vf acc[ACCS] = {{0}}, v[ACCS];
    for (size_t i = 0; i < n; i += SUM_LANES) {
      v_load8(v, x, i, n);
      for (int a = 0; a < ACCS; a++) acc[a] += v[a];
    }
    float m = v_sum8(acc) / (float)C;
    for (int a = 0; a < ACCS; a++) acc[a] = (vf){0};
    for (size_t i = 0; i < n; i += SUM_LANES) {
      v_load8(v, x, i, n);
      for (int a = 0; a < ACCS; a++) {
        vf d = v_select(v_first((long)(n - i) - a * VEC_W), v[a] - m, (vf){0});
        acc[a] += d * d;
      }
    }
    float var = v_sum8(acc) / (float)C, s = 1.0f / __builtin_sqrtf(var + eps);
    float *o = out + (size_t)r * n;
    for (size_t i = 0; i < n; i += SUM_LANES) {
      vf wv[ACCS], bv[ACCS];
      v_load8(v, x, i, n), v_load8(wv, w, i, n), v_load8(bv, b, i, n);
      for (int a = 0; a < ACCS; a++) v[a] = (v[a] - m) * s * wv[a] + bv[a];
      v_store8(o, v, i, n);
    }
    mean[r] = m;
    rstd[r] = s;
  }
}

/* With xhat = (x - mean) * rstd and g = w * dout (the gradient reaching xhat):
 * din = rstd * (g - mean(g) - xhat * mean(g * xhat)) */
VEC_FN void layernorm_backward_input(float *din, const float *dout, const float *in, const float *w,
                                     const float *mean, const float *rstd, int N, int C) {
  size_t n = C > 0 ? (size_t)C : 0;
  for (int r = 0; r < N; r++) {
    const float *x = in + (size_t)r * n, *dy = dout + (size_t)r * n;
    float m = mean[r], s = rstd[r];
    vf ga[ACCS] = {{0}}, gxa[ACCS] = {{0}}, xv[ACCS], dv[ACCS], wv[ACCS];
    for (size_t i = 0; i < n; i += SUM_LANES) {
      v_load8(xv, x, i, n), v_load8(dv, dy, i, n), v_load8(wv, w, i, n);
      for (int a = 0; a < ACCS; a++) { /* padded lanes: w = dy = 0, so g = 0 and g * xhat = 0 */
        vf g = wv[a] * dv[a];
        ga[a] += g;
        gxa[a] += g * ((xv[a] - m) * s);
      }
    }
    float gmean = v_sum8(ga) / (float)C, gxmean = v_sum8(gxa) / (float)C;
    float *dx = din + (size_t)r * n;
    for (size_t i = 0; i < n; i += SUM_LANES) {
      v_load8(xv, x, i, n), v_load8(dv, dy, i, n), v_load8(wv, w, i, n);
      for (int a = 0; a < ACCS; a++) xv[a] = (wv[a] * dv[a] - gmean - (xv[a] - m) * s * gxmean) * s;
      v_store8(dx, xv, i, n);
    }
  }
}

/* Accumulates over rows: each column's sum in row order (the vector runs across columns). */
VEC_FN void layernorm_backward_weight(float *dw, float *db, const float *dout, const float *in, const float *mean,
                                      const float *rstd, int N, int C) {
  size_t n = C > 0 ? (size_t)C : 0;
  for (int r = 0; r < N; r++) {
    const float *x = in + (size_t)r * n, *dy = dout + (size_t)r * n;
    float m = mean[r], s = rstd[r];
    for (size_t i = 0; i < n; i += VEC_W) {
      size_t k = n - i < VEC_W ? n - i : VEC_W;
      vf xv = v_load(x + i, k), dv = v_load(dy + i, k);
      v_store(dw + i, v_load(dw + i, k) + (xv - m) * s * dv, k);
      v_store(db + i, v_load(db + i, k) + dv, k);
    }
  }
}

#else /* 16 lanes: the 8 partial sums are one AVX2 vector, so AVX2's loops serve */
VEC_FN void layernorm_forward(float *out, float *mean, float *rstd, const float *in, const float *w, const float *b,
                              int N, int C, float eps) {
  kernels_cpu_vec_avx2.layernorm_forward(out, mean, rstd, in, w, b, N, C, eps);
}
VEC_FN void layernorm_backward_input(float *din, const float *dout, const float *in, const float *w,
                                     const float *mean, const float *rstd, int N, int C) {
  kernels_cpu_vec_avx2.layernorm_backward_input(din, dout, in, w, mean, rstd, N, C);
}
VEC_FN void layernorm_backward_weight(float *dw, float *db, const float *dout, const float *in, const float *mean,
                                      const float *rstd, int N, int C) {
  kernels_cpu_vec_avx2.layernorm_backward_weight(dw, db, dout, in, mean, rstd, N, C);
}
#endif

/* ---- AdamW: element-wise (GCC vectorises the loop to the file's width; vec_*.o are built with
 * -fno-math-errno so sqrtf can be one instruction) ---- */
VEC_FN void adamw(float *restrict p, const float *restrict g, float *restrict m, float *restrict v, size_t n,
                  float lr, float beta1, float beta2, float eps, float weight_decay, float c1, float c2,
                  float grad_scale) {
  for (size_t i = 0; i < n; i++) {
    float gi = g[i] * grad_scale;
    m[i] = beta1 * m[i] + (1.0f - beta1) * gi;
    v[i] = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    float mhat = m[i] / c1, vhat = v[i] / c2;
    p[i] -= lr * (mhat / (__builtin_sqrtf(vhat) + eps) + weight_decay * p[i]);
  }
}

/* out of place, the same expressions (so the same bits) */
VEC_FN void adamw_to(float *restrict po, float *restrict mo, float *restrict vo, const float *restrict p,
                     const float *restrict g, const float *restrict m, const float *restrict v, size_t n, float lr,
                     float beta1, float beta2, float eps, float weight_decay, float c1, float c2, float grad_scale) {
  for (size_t i = 0; i < n; i++) {
    float gi = g[i] * grad_scale;
    float mn = beta1 * m[i] + (1.0f - beta1) * gi;
    float vn = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    mo[i] = mn, vo[i] = vn;
    float mhat = mn / c1, vhat = vn / c2;
    po[i] = p[i] - lr * (mhat / (__builtin_sqrtf(vhat) + eps) + weight_decay * p[i]);
  }
}

/* out[i] = in[i] rounded to bf16 (kernels_f32_to_bf16's bits: nearest, ties to even; a NaN
 * keeps its sign and top payload bits and turns quiet), as a float; out may be in */
VEC_FN void round_bf16(float *out, const float *in, size_t n) {
  typedef uint32_t vu __attribute__((vector_size(VEC_W * sizeof(uint32_t))));
  for (size_t i = 0; i < n; i += VEC_W) {
    size_t k = n - i < VEC_W ? n - i : VEC_W;
    vf x = v_load(in + i, k);
    vu u;
    memcpy(&u, &x, sizeof u);
    vu nan = (vu)((u & 0x7fffffffu) > 0x7f800000u); /* all ones where a NaN */
    vu q = (u | 0x00400000u) & 0xffff0000u, r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    u = (nan & q) | (~nan & r);
    memcpy(&x, &u, sizeof x);
    v_store(out + i, x, k);
  }
}

const kernels_cpu_vec VEC_TABLE = {
    .name = VEC_W == 4 ? "sse" : VEC_W == 8 ? "avx2" : "avx512",
    .width = VEC_W,
    .exp_shifted = exp_shifted,
    .softmax = softmax,
    .gelu_forward = gelu_forward,
    .gelu_backward = gelu_backward,
    .layernorm_forward = layernorm_forward,
    .layernorm_backward_input = layernorm_backward_input,
    .layernorm_backward_weight = layernorm_backward_weight,
    .adamw = adamw,
    .adamw_to = adamw_to,
    .round_bf16 = round_bf16,
};
