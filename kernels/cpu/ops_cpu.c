/* kernels/cpu/ops_cpu.c: the CPU op table. GEMMs and attention go through OpenBLAS (blas_cpu.c,
 * attention_cpu.c); GELU, the exps, LayerNorm and AdamW through the vector loops of vec_body.h
 * (4 or 8 lanes, the same bits); everything else here is a plain loop in a fixed order, after
 * llm.c's train_gpt2.c, so results are bit-for-bit repeatable. The element-wise, row-wise and
 * column-wise ops split their work over the pool's `threads` workers (pool.c), each output
 * computed by one worker as one thread would: the same bits for any thread count. Sums that can grow long (a
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
/* offload's copies: at once, as to_host / to_device */
static void copy_out(void *dst_host, const void *src, size_t bytes, int ticket) {
  (void)ticket;
  mem_to_host(dst_host, src, bytes);
}
static void copy_in(void *dst, const void *src_host, size_t bytes, int ticket, int after) {
  (void)ticket, (void)after;
  mem_to_device(dst, src_host, bytes);
}
static void copy_wait(int ticket) { (void)ticket; } /* every copy is done when it returns */
static void copy_sync(int ticket) { (void)ticket; }
static void *host_alloc(size_t bytes) { return calloc(1, bytes ? bytes : 1); }
static void host_free(void *p) { free(p); }

/* ---- splitting work over the pool (pool.c): each output element computed by one worker, as
 * one thread would, so the bits do not depend on `threads` ---- */

enum { GRAIN = 1 << 15 /* floats of element-wise work worth a worker */, ALIGN = 16 };

/* rows worth a worker for rows of C floats */
static size_t row_grain(int C) { return C > 0 && (size_t)C < GRAIN ? GRAIN / (size_t)C : 1; }

typedef struct {
  float *x, *y;
  const float *a, *b, *c;
  const int32_t *idx;
  float f, f2;
  int N, C;
  int kind; /* cross-entropy's rounding: 0 none, 1 bf16, 2 fp16 */
  size_t n;
} job;

/* ---- bias ---- */

static void bias_add_rows(void *ctx, size_t lo, size_t hi) {
  const job *j = ctx;
  for (size_t n = lo; n < hi; n++) {
    float *o = j->x + n * (size_t)j->C;
    for (int c = 0; c < j->C; c++) o[c] += j->a[c];
  }
}

static void bias_add(float *out, const float *bias, int N, int C) {
  job j = {.x = out, .a = bias, .C = C};
  kernels_cpu_parallel(N > 0 ? (size_t)N : 0, row_grain(C), 1, bias_add_rows, &j);
}

/* columns [lo, hi) summed over the rows in row order */
static void bias_grad_cols(void *ctx, size_t lo, size_t hi) {
  const job *j = ctx;
  for (int n = 0; n < j->N; n++) {
    const float *d = j->a + (size_t)n * j->C;
    for (size_t c = lo; c < hi; c++) j->x[c] += d[c];
  }
}

static void bias_grad(float *dbias, const float *dout, int N, int C) {
  job j = {.x = dbias, .a = dout, .N = N, .C = C};
  kernels_cpu_parallel(C > 0 ? (size_t)C : 0, N > 0 && (size_t)N < GRAIN ? GRAIN / (size_t)N : 1, ALIGN,
                       bias_grad_cols, &j);
}

/* ---- activations ---- */

/* GELU, exp, softmax, LayerNorm and AdamW run on the vector loops of vec_body.h, 8 lanes where
 * the CPU has AVX2, else 4, or 16 on request (the same bits whichever). */
static const kernels_cpu_vec *vec_in_use;
static void select_vec_once(void) {
  __builtin_cpu_init();
  const char *e = getenv("BRIGADE_CPU_VEC");
  /* AVX-512 only when asked: on a Xeon (Emerald Rapids) its 16-lane loops made the step's GEMMs
   * 9-20% slower, more than they saved (docs/benchmarks.md) */
  int cap = e && !strcmp(e, "sse") ? 4 : e && !strcmp(e, "avx512") ? 16 : 8;
  vec_in_use = cap >= 16 && __builtin_cpu_supports("avx512f") ? &kernels_cpu_vec_avx512
               : cap >= 8 && __builtin_cpu_supports("avx2")   ? &kernels_cpu_vec_avx2
                                                               : &kernels_cpu_vec_sse;
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

static void gelu_forward_part(void *ctx, size_t lo, size_t hi) {
  const job *j = ctx;
  kernels_cpu_vec_get()->gelu_forward(j->x + lo, j->a + lo, hi - lo);
}
static void gelu_forward(float *out, const float *in, size_t n) {
  job j = {.x = out, .a = in};
  kernels_cpu_parallel(n, GRAIN, ALIGN, gelu_forward_part, &j);
}

static void gelu_backward_part(void *ctx, size_t lo, size_t hi) {
  const job *j = ctx;
  kernels_cpu_vec_get()->gelu_backward(j->x + lo, j->a + lo, j->b + lo, hi - lo);
}
static void gelu_backward(float *din, const float *in, const float *dout, size_t n) {
  job j = {.x = din, .a = in, .b = dout};
  kernels_cpu_parallel(n, GRAIN, ALIGN, gelu_backward_part, &j);
}

/* NaN passes through both ways (as IEEE max and PyTorch have it), so that the loss, the
 * gradient norm and the overflow check see it rather than a 0 */
static void relu_forward(float *out, const float *in, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = in[i] > 0.0f || isnan(in[i]) ? in[i] : 0.0f;
}

static void relu_backward(float *din, const float *in, const float *dout, size_t n) {
  for (size_t i = 0; i < n; i++) din[i] = in[i] > 0.0f ? dout[i] : isnan(in[i]) ? in[i] : 0.0f;
}

/* ---- layernorm (vector loops: vec_body.h) ---- */

typedef struct {
  float *out, *mean, *rstd, *dw, *db;
  const float *in, *w, *b, *dout, *cmean, *crstd;
  int N, C;
  float eps;
} ln_job;

static void ln_forward_rows(void *ctx, size_t lo, size_t hi) {
  const ln_job *j = ctx;
  size_t C = (size_t)j->C;
  kernels_cpu_vec_get()->layernorm_forward(j->out + lo * C, j->mean + lo, j->rstd + lo, j->in + lo * C, j->w, j->b,
                                           (int)(hi - lo), j->C, j->eps);
}

static void layernorm_forward(float *out, float *mean, float *rstd, const float *in, const float *w,
                              const float *b, int N, int C, float eps) {
  ln_job j = {.out = out, .mean = mean, .rstd = rstd, .in = in, .w = w, .b = b, .C = C, .eps = eps};
  kernels_cpu_parallel(N > 0 ? (size_t)N : 0, row_grain(C), 1, ln_forward_rows, &j);
}

static void ln_backward_input_rows(void *ctx, size_t lo, size_t hi) {
  const ln_job *j = ctx;
  size_t C = (size_t)j->C;
  kernels_cpu_vec_get()->layernorm_backward_input(j->out + lo * C, j->dout + lo * C, j->in + lo * C, j->w,
                                                  j->cmean + lo, j->crstd + lo, (int)(hi - lo), j->C);
}

static void layernorm_backward_input(float *din, const float *dout, const float *in, const float *w,
                                     const float *mean, const float *rstd, int N, int C) {
  ln_job j = {.out = din, .dout = dout, .in = in, .w = w, .cmean = mean, .crstd = rstd, .C = C};
  kernels_cpu_parallel(N > 0 ? (size_t)N : 0, row_grain(C), 1, ln_backward_input_rows, &j);
}

/* columns [lo, hi): the vector loop runs across columns, each column summed in row order, so a
 * part starting on a multiple of the widest vector gives the same bits as the whole */
static void ln_backward_weight_cols(void *ctx, size_t lo, size_t hi) {
  const ln_job *j = ctx;
  size_t C = (size_t)j->C, N = (size_t)j->N;
  for (size_t r = 0; r < N; r++)
    kernels_cpu_vec_get()->layernorm_backward_weight(j->dw + lo, j->db + lo, j->dout + r * C + lo, j->in + r * C + lo,
                                                     j->cmean + r, j->crstd + r, 1, (int)(hi - lo));
}

static void layernorm_backward_weight(float *dw, float *db, const float *dout, const float *in,
                                      const float *mean, const float *rstd, int N, int C) {
  if (kernels_cpu_pool_threads() <= 1 || N <= 0 || C <= 0) {
    kernels_cpu_vec_get()->layernorm_backward_weight(dw, db, dout, in, mean, rstd, N, C);
    return;
  }
  ln_job j = {.dw = dw, .db = db, .dout = dout, .in = in, .cmean = mean, .crstd = rstd, .N = N, .C = C};
  kernels_cpu_parallel((size_t)C, 256, ALIGN, ln_backward_weight_cols, &j);
}

/* ---- softmax and cross-entropy ---- */

/* out = softmax(x) over V entries; returns the sum of exp(x - max), in double, and the max */
static double softmax_row(float *out, const float *x, int V, float *max_out) {
  return kernels_cpu_vec_get()->softmax(out, x, (size_t)V, max_out);
}

static void softmax_rows(void *ctx, size_t lo, size_t hi) {
  const job *j = ctx;
  float mx;
  for (size_t n = lo; n < hi; n++) softmax_row(j->x + n * (size_t)j->C, j->a + n * (size_t)j->C, j->C, &mx);
}

static void softmax_forward(float *out, const float *in, int N, int V) {
  if (V <= 0) return; /* no row to normalise (and no x[0] to start the max from) */
  job j = {.x = out, .a = in, .C = V};
  kernels_cpu_parallel(N > 0 ? (size_t)N : 0, row_grain(V), 1, softmax_rows, &j);
}

/* -log p[target] = log(sum exp(x - max)) - (x[target] - max), not -log of the rounded
 * probability: exact for confident predictions, finite where p underflows to 0 */
/* rows of j->n floats, the first j->C of them the classes, the rest padding (zeros written) */
static void xent_forward_rows(void *ctx, size_t lo, size_t hi) {
  const job *j = ctx;
  size_t V = (size_t)j->C, ld = j->n;
  for (size_t n = lo; n < hi; n++) {
    const float *x = j->a + n * ld;
    float *y = j->y + n * ld;
    float mx, xt = kernels_round(x[j->idx[n]], j->kind); /* read first: probs may be logits */
    if (j->kind == 1) { /* the row rounded into probs (in cache), then the softmax in place */
      kernels_cpu_vec_get()->round_bf16(y, x, V);
      x = y;
    } else if (j->kind) {
      for (size_t i = 0; i < V; i++) y[i] = kernels_round(x[i], j->kind);
      x = y;
    }
    double sum = softmax_row(y, x, j->C, &mx);
    for (size_t i = V; i < ld; i++) y[i] = 0.0f;
    j->x[n] = (float)(log(sum) - ((double)xt - mx));
  }
}

static void xent_forward(float *losses, float *probs, const float *logits, const int32_t *targets,
                         int N, int V, int ld, int round) {
  if (V <= 0) return; /* no class can be a valid target */
  job j = {.x = losses, .y = probs, .a = logits, .idx = targets, .C = V, .n = (size_t)(ld > V ? ld : V),
           .kind = round == 1 || round == 2 ? round : 0};
  kernels_cpu_parallel(N > 0 ? (size_t)N : 0, row_grain(V), 1, xent_forward_rows, &j);
}

static void xent_backward_rows(void *ctx, size_t lo, size_t hi) {
  const job *j = ctx;
  size_t V = (size_t)j->C, ld = j->n;
  for (size_t n = lo; n < hi; n++) {
    const float *p = j->a + n * ld;
    float *d = j->x + n * ld;
    float pt = p[j->idx[n]]; /* read before the loop: d may be p */
    if (j->kind == 1) { /* the products, then rounded in place (in cache) */
      for (size_t i = 0; i < V; i++) d[i] = p[i] * j->f;
      kernels_cpu_vec_get()->round_bf16(d, d, V);
    } else if (j->kind) {
      for (size_t i = 0; i < V; i++) d[i] = kernels_round(p[i] * j->f, j->kind);
    } else {
      for (size_t i = 0; i < V; i++) d[i] = p[i] * j->f;
    }
    for (size_t i = V; i < ld; i++) d[i] = 0.0f;
    d[j->idx[n]] = kernels_round((pt - 1.0f) * j->f, j->kind);
  }
}

static void xent_backward(float *dlogits, const float *probs, const int32_t *targets, float scale,
                          int N, int V, int ld, int round) {
  job j = {.x = dlogits, .a = probs, .idx = targets, .f = scale, .C = V, .n = (size_t)(ld > V ? ld : V),
           .kind = round == 1 || round == 2 ? round : 0};
  kernels_cpu_parallel(N > 0 ? (size_t)N : 0, row_grain(V), 1, xent_backward_rows, &j);
}

/* ---- embedding ---- */

static void embedding_rows(void *ctx, size_t lo, size_t hi) {
  const job *j = ctx;
  size_t C = (size_t)j->C;
  for (size_t r = lo; r < hi; r++) { /* position r of the B*T: time step r % T */
    float *o = j->x + r * C;
    const float *e = j->a + (size_t)j->idx[r] * C, *p = j->b + (r % (size_t)j->N) * C;
    for (size_t c = 0; c < C; c++) o[c] = e[c] + p[c];
  }
}

static void embedding_forward(float *out, const int32_t *tok, const float *wte, const float *wpe,
                              int B, int T, int C) {
  if (T <= 0) return;
  job j = {.x = out, .a = wte, .b = wpe, .idx = tok, .N = T, .C = C};
  kernels_cpu_parallel(B > 0 ? (size_t)B * (size_t)T : 0, row_grain(C), 1, embedding_rows, &j);
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
typedef struct {
  float *p, *m, *v;
  const float *g;
  float lr, beta1, beta2, eps, wd, c1, c2, gs;
  float *po, *mo, *vo; /* adamw_to's outputs */
} adam_job;

static void adamw_part(void *ctx, size_t lo, size_t hi) {
  const adam_job *j = ctx;
  kernels_cpu_vec_get()->adamw(j->p + lo, j->g + lo, j->m + lo, j->v + lo, hi - lo, j->lr, j->beta1, j->beta2, j->eps,
                               j->wd, j->c1, j->c2, j->gs);
}

static void adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1, float beta2, float eps,
                  float weight_decay, int t, float grad_scale) {
  /* bias corrections in double: 1 - beta2^t is small for early steps */
  float c1 = (float)(1.0 - pow(beta1, t)), c2 = (float)(1.0 - pow(beta2, t));
  adam_job j = {.p = p, .m = m, .v = v, .g = g, .lr = lr, .beta1 = beta1, .beta2 = beta2, .eps = eps,
                .wd = weight_decay, .c1 = c1, .c2 = c2, .gs = grad_scale};
  kernels_cpu_parallel(n, GRAIN, ALIGN, adamw_part, &j);
}

static void adamw_to_part(void *ctx, size_t lo, size_t hi) {
  const adam_job *j = ctx;
  kernels_cpu_vec_get()->adamw_to(j->po + lo, j->mo + lo, j->vo + lo, j->p + lo, j->g + lo, j->m + lo, j->v + lo,
                                  hi - lo, j->lr, j->beta1, j->beta2, j->eps, j->wd, j->c1, j->c2, j->gs);
}

static void adamw_to(float *po, float *mo, float *vo, const float *p, const float *g, const float *m, const float *v,
                     size_t n, float lr, float beta1, float beta2, float eps, float weight_decay, int t, float grad_scale) {
  float c1 = (float)(1.0 - pow(beta1, t)), c2 = (float)(1.0 - pow(beta2, t));
  adam_job j = {.p = (float *)p, .m = (float *)m, .v = (float *)v, .g = g, .lr = lr, .beta1 = beta1, .beta2 = beta2,
                .eps = eps, .wd = weight_decay, .c1 = c1, .c2 = c2, .gs = grad_scale, .po = po, .mo = mo, .vo = vo};
  kernels_cpu_parallel(n, GRAIN, ALIGN, adamw_to_part, &j);
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

static void axpy_part(void *ctx, size_t lo, size_t hi) {
  const job *j = ctx;
  for (size_t i = lo; i < hi; i++) j->x[i] += j->f * j->a[i];
}
static void axpy(float *y, float a, const float *x, size_t n) {
  job j = {.x = y, .a = x, .f = a};
  kernels_cpu_parallel(n, GRAIN, ALIGN, axpy_part, &j);
}

static void scale_part(void *ctx, size_t lo, size_t hi) {
  const job *j = ctx;
  for (size_t i = lo; i < hi; i++) j->x[i] *= j->f;
}
static void scale(float *x, float a, size_t n) {
  job j = {.x = x, .f = a};
  kernels_cpu_parallel(n, GRAIN, ALIGN, scale_part, &j);
}

static void fill_part(void *ctx, size_t lo, size_t hi) {
  const job *j = ctx;
  for (size_t i = lo; i < hi; i++) j->x[i] = j->f;
}
static void fill(float *x, float v, size_t n) {
  job j = {.x = x, .f = v};
  kernels_cpu_parallel(n, GRAIN, ALIGN, fill_part, &j);
}

static void zero_part(void *ctx, size_t lo, size_t hi) {
  const job *j = ctx;
  memset(j->x + lo, 0, sizeof(float) * (hi - lo)); /* all-zero bits: +0 */
}
static void zero(float *x, size_t n) {
  job j = {.x = x};
  kernels_cpu_parallel(n, 4 * GRAIN, ALIGN, zero_part, &j);
}

static void copy_part(void *ctx, size_t lo, size_t hi) {
  const job *j = ctx;
  memcpy(j->x + lo, j->a + lo, sizeof(float) * (hi - lo));
}
static void copy(float *dst, const float *src, size_t n) {
  if (dst == src || !n) return;
  if ((dst < src ? (size_t)(src - dst) : (size_t)(dst - src)) < n) { /* overlapping: one memmove */
    memmove(dst, src, sizeof(float) * n);
    return;
  }
  job j = {.x = dst, .a = src};
  kernels_cpu_parallel(n, 4 * GRAIN, ALIGN, copy_part, &j);
}

/* Sums of squares in fixed blocks of SUM_BLOCK floats, each summed in order in double, the
 * block sums then added in block order: the blocks go to the pool's workers, and since the
 * blocks do not depend on the thread count, neither do the bits. */
enum { SUM_BLOCK = 1 << 16 };

typedef struct {
  const float *x;
  size_t n;
  double *part;
  size_t *count;
} sum_job;

/* the block results: one buffer per calling thread, grown when a longer vector comes, kept */
static _Thread_local void *blocks_buf;
static _Thread_local size_t blocks_cap;
static void *blocks(size_t nb) {
  if (nb > blocks_cap) {
    free(blocks_buf);
    blocks_buf = malloc(8 * nb), blocks_cap = blocks_buf ? nb : 0;
    if (!blocks_buf) abort(); /* 8 bytes per 64K floats of a vector that exists */
  }
  return blocks_buf;
}

static void sumsq_blocks(void *ctx, size_t lo, size_t hi) {
  const sum_job *j = ctx;
  for (size_t b = lo; b < hi; b++) {
    size_t a = b * SUM_BLOCK, e = a + SUM_BLOCK < j->n ? a + SUM_BLOCK : j->n;
    double s = 0.0;
    for (size_t i = a; i < e; i++) s += (double)j->x[i] * j->x[i];
    j->part[b] = s;
  }
}

static double sumsq(const float *x, size_t n) {
  size_t nb = (n + SUM_BLOCK - 1) / SUM_BLOCK;
  if (nb <= 1) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return s;
  }
  double *part = blocks(nb);
  sum_job j = {.x = x, .n = n, .part = part};
  kernels_cpu_parallel(nb, 4, 1, sumsq_blocks, &j);
  double s = 0.0;
  for (size_t b = 0; b < nb; b++) s += part[b];
  return s;
}

static void nonfinite_blocks(void *ctx, size_t lo, size_t hi) {
  const sum_job *j = ctx;
  for (size_t b = lo; b < hi; b++) {
    size_t a = b * SUM_BLOCK, e = a + SUM_BLOCK < j->n ? a + SUM_BLOCK : j->n, k = 0;
    for (size_t i = a; i < e; i++) k += !isfinite(j->x[i]);
    j->count[b] = k;
  }
}

static size_t nonfinite(const float *x, size_t n) {
  size_t nb = (n + SUM_BLOCK - 1) / SUM_BLOCK, k = 0;
  if (!nb) return 0;
  size_t *count = blocks(nb);
  sum_job j = {.x = x, .n = n, .count = count};
  kernels_cpu_parallel(nb, 4, 1, nonfinite_blocks, &j);
  for (size_t b = 0; b < nb; b++) k += count[b];
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

static void round_bf16_part(void *ctx, size_t lo, size_t hi) {
  const job *j = ctx;
  kernels_cpu_vec_get()->round_bf16(j->x + lo, j->x + lo, hi - lo);
}
static void round_bf16(float *x, size_t n) {
  job j = {.x = x};
  kernels_cpu_parallel(n, GRAIN, ALIGN, round_bf16_part, &j);
}

static void round_fp16(float *x, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = kernels_f16_to_f32(kernels_f32_to_f16(x[i]));
}

/* gemm, bias_add and axpy, one after another: the CUDA table fuses them, the results here are
 * the reference (bit for bit the three ops) */
static void linear_forward(float *out, const float *in, const float *w, const float *bias, const float *res, int N,
                           int C, int OC) {
  kernels_cpu_gemm(out, in, w, N, OC, C, 0, 1, 1.0f, 0.0f);
  if (bias) bias_add(out, bias, N, OC);
  if (res && N > 0 && OC > 0) axpy(out, 1.0f, res, (size_t)N * OC);
}

/* Mixed precision: bf16 GEMMs where the CPU has AVX512-BF16 (blas_cpu.c says which), the rest by rounding on store. */
static void matmul_half(int kind) { (void)kernels_cpu_matmul_half(kind); }

static const kernels_ops cpu_ops = {
    .matmul_half = matmul_half,
    .name = "cpu",
    .device_memory = 0, /* host memory: host code may touch the buffers */
    .alloc = mem_alloc,
    .free = mem_free,
    .to_device = mem_to_device,
    .to_host = mem_to_host,
    .sync = mem_sync,
    .copy_out = copy_out,
    .copy_in = copy_in,
    .copy_wait = copy_wait,
    .copy_sync = copy_sync,
    .host_alloc = host_alloc,
    .host_free = host_free,
    .gemm = kernels_cpu_gemm,
    .gemm_batched = kernels_cpu_gemm_batched,
    .gemm_ld = kernels_cpu_gemm_ld,
    .linear_forward = linear_forward,
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
    .adamw_to = adamw_to,
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
