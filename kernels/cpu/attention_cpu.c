/* kernels/cpu/attention_cpu.c: causal multi-head self-attention core on the CPU.
 *
 * Per (batch b, head h), with Q, K, V the [T, hs] slices of qkv (row stride 3C) and
 * A = softmax(scale * Q K^T + causal mask), scale = 1/sqrt(hs):
 *   forward:  out_h = A V
 *   backward: dV = A^T dY;  dA = dY V^T;  dS = A * (dA - rowsum(A * dA)) * scale;
 *             dQ = dS K;    dK = dS^T Q
 * BLAS does the products; the slices are read in place through leading dimensions, so nothing
 * is gathered or copied per head. Products with A use its lower triangle only (strmm), so a
 * NaN or Inf in a later token can never reach an earlier one, as the mask promises. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/cpu/cpu.h"

/* Rows of scores computed per GEMM: a block of rows [t0, t0+rows) only needs keys [0, t0+rows),
 * so blocking skips most of the masked upper triangle while keeping the GEMMs large. */
enum { SCORE_ROWS = 64 };

static int min_int(int a, int b) { return a < b ? a : b; }

/* Row t of the scores: softmax over entries 0..t in place; entries t+1..T-1 get 0, so the
 * whole cache is written and backward may read full rows. */
static void causal_softmax_row(float *a, int t, int T) {
  float mx = a[0];
  for (int j = 1; j <= t; j++) mx = a[j] > mx ? a[j] : mx;
  float sum = 0.0f;
  kernels_cpu_exp_shifted(a, a, mx, (size_t)t + 1);
  for (int j = 0; j <= t; j++) sum += a[j];
  float inv = 1.0f / sum; /* sum >= 1: the max term is exp(0) */
  for (int j = 0; j <= t; j++) a[j] *= inv;
  for (int j = t + 1; j < T; j++) a[j] = 0.0f;
}

static void head_forward(float *o, float *a, const float *q, int T, int C, int hs) {
  const float *k = q + C, *v = q + 2 * C;
  const int ld = 3 * C;
  const float scale = 1.0f / sqrtf((float)hs);
  for (int t0 = 0; t0 < T; t0 += SCORE_ROWS) {
    int rows = min_int(SCORE_ROWS, T - t0);
    /* a[t0.., 0..t0+rows) = scale * q[t0..] @ k[0..t0+rows)^T; cells above the diagonal are
     * computed but overwritten by the softmax below */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, t0 + rows, hs, scale,
                q + (size_t)t0 * ld, ld, k, ld, 0.0f, a + (size_t)t0 * T, T);
  }
  for (int t = 0; t < T; t++) causal_softmax_row(a + (size_t)t * T, t, T);
  /* o = tril(a) @ v: strmm multiplies in place, so v is first copied into o's slice */
  for (int t = 0; t < T; t++) memcpy(o + (size_t)t * C, v + (size_t)t * ld, sizeof(float) * hs);
  cblas_strmm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasNonUnit, T, hs, 1.0f, a, T,
              o, C);
}

typedef struct {
  float *out, *att, *scratch;
  const float *qkv, *dout;
  int T, C, NH;
} att_job;

/* heads [lo, hi) of the B * NH, each on its own slices: the pool's workers take whole heads */
static void forward_heads(void *ctx, size_t lo, size_t hi) {
  const att_job *j = ctx;
  int T = j->T, C = j->C, hs = C / j->NH;
  for (size_t bh = lo; bh < hi; bh++) {
    size_t b = bh / (size_t)j->NH, h = bh % (size_t)j->NH;
    head_forward(j->out + b * T * C + h * hs, j->att + bh * T * T, j->qkv + b * T * 3 * C + h * hs, T, C, hs);
  }
}

void kernels_cpu_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                                   int NH) {
  CORE_ASSERT(NH > 0 && C % NH == 0);
  if (T <= 0) return; /* BLAS rejects empty matrices' leading dimensions */
  att_job j = {.out = out, .att = att, .qkv = qkv, .T = T, .C = C, .NH = NH};
  kernels_cpu_parallel(B > 0 ? (size_t)B * (size_t)NH : 0, 1, 1, forward_heads, &j);
}

/* dq, dk, dv: this head's slices of dqkv (row stride 3C); dy: its slice of dout (stride C).
 * ds: T x T scratch for dA, then dS, on the lower triangle (the upper is never read). All four
 * products are level-3 BLAS: dA by row blocks as in the forward, then triangular products with
 * dS (strmm reads the lower triangle only, so a NaN in a later token cannot reach an earlier
 * one's gradients either). */
static void head_backward(float *dq, float *ds, const float *dy, const float *q, const float *a,
                          int T, int C, int hs) {
  const float *k = q + C, *v = q + 2 * C;
  float *dk = dq + C, *dv = dq + 2 * C;
  const int ld = 3 * C;
  const float scale = 1.0f / sqrtf((float)hs);
  /* dv = tril(a)^T @ dy, in place in dv's slice */
  for (int t = 0; t < T; t++) memcpy(dv + (size_t)t * ld, dy + (size_t)t * C, sizeof(float) * hs);
  cblas_strmm(CblasRowMajor, CblasLeft, CblasLower, CblasTrans, CblasNonUnit, T, hs, 1.0f, a, T, dv,
              ld);
  /* dA = dy @ v^T, rows [t0, t0+rows) against keys [0, t0+rows) */
  for (int t0 = 0; t0 < T; t0 += SCORE_ROWS) {
    int rows = min_int(SCORE_ROWS, T - t0);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, t0 + rows, hs, 1.0f, dy + (size_t)t0 * C, C, v,
                ld, 0.0f, ds + (size_t)t0 * T, T);
  }
  /* dS = A * (dA - rowsum(A * dA)) * scale, row by row up to the diagonal */
  for (int t = 0; t < T; t++) {
    const float *at = a + (size_t)t * T;
    float *dst = ds + (size_t)t * T, dot = 0.0f; /* the softmax Jacobian's shared term */
    for (int j = 0; j <= t; j++) dot += at[j] * dst[j];
    for (int j = 0; j <= t; j++) dst[j] = at[j] * (dst[j] - dot) * scale;
  }
  /* dq = tril(dS) @ k and dk = tril(dS)^T @ q, each in place in its slice */
  for (int t = 0; t < T; t++) {
    memcpy(dq + (size_t)t * ld, k + (size_t)t * ld, sizeof(float) * hs);
    memcpy(dk + (size_t)t * ld, q + (size_t)t * ld, sizeof(float) * hs);
  }
  cblas_strmm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasNonUnit, T, hs, 1.0f, ds, T, dq, ld);
  cblas_strmm(CblasRowMajor, CblasLeft, CblasLower, CblasTrans, CblasNonUnit, T, hs, 1.0f, ds, T, dk, ld);
}

/* A worker's own T x T scratch for dS (the caller's part uses the scratch it was given), kept
 * for the thread's life and grown only when T does: no allocation in a steady step. */
static _Thread_local float *own_ds;
static _Thread_local size_t own_ds_n;

static void backward_heads(void *ctx, size_t lo, size_t hi) {
  const att_job *j = ctx;
  int T = j->T, C = j->C, hs = C / j->NH;
  float *ds = j->scratch;
  if (lo > 0) { /* not the caller's part: the caller's scratch is the caller's */
    size_t need = (size_t)T * T;
    if (own_ds_n < need) free(own_ds), own_ds = malloc(sizeof(float) * need), own_ds_n = own_ds ? need : 0;
    CORE_ASSERT(own_ds);
    ds = own_ds;
  }
  for (size_t bh = lo; bh < hi; bh++) {
    size_t b = bh / (size_t)j->NH, h = bh % (size_t)j->NH;
    size_t row = b * T * 3 * C + h * hs; /* this head's first q column in (d)qkv */
    head_backward(j->out + row, ds, j->dout + b * T * C + h * hs, j->qkv + row, j->att + bh * T * T, T, C, hs);
  }
}

void kernels_cpu_attention_backward(float *dqkv, float *scratch, const float *dout,
                                    const float *qkv, const float *att, int B, int T, int C,
                                    int NH) {
  CORE_ASSERT(NH > 0 && C % NH == 0);
  if (T <= 0) return;
  att_job j = {.out = dqkv, .scratch = scratch, .dout = dout, .qkv = qkv, .att = (float *)att, .T = T, .C = C, .NH = NH};
  kernels_cpu_parallel(B > 0 ? (size_t)B * (size_t)NH : 0, 1, 1, backward_heads, &j);
}
