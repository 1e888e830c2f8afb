/* The CPU table's ops split over the pool's workers (kernels/cpu/pool.c), attention's heads
 * included, give the same bits with 1, 2, 3 and 4 threads: every output is computed by one worker as one thread would. Sizes are
 * awkward (rows and columns not multiples of the parts, a vector length with a tail). GEMMs,
 * split over C's columns or rows on a single-threaded OpenBLAS, agree within float rounding. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "kernels/cpu/cpu.h"
#include "kernels/ops.h"

enum { N = 301, C = 2053, V = 1031, NE = 2 * N * C + 11 }; /* NE: every buffer, larger than any op's use */

static float *rnd(size_t n, uint64_t key) {
  float *x = malloc(sizeof(float) * n);
  core_rng r = core_rng_keyed(7, key, 0, 0);
  for (size_t i = 0; i < n; i++) x[i] = core_rng_normal(&r);
  return x;
}

typedef struct {
  float *out[16];
  size_t len[16];
  int n;
} result;

static void keep(result *r, const float *x, size_t n) {
  r->out[r->n] = malloc(sizeof(float) * n);
  memcpy(r->out[r->n], x, sizeof(float) * n);
  r->len[r->n++] = n;
}

/* every pooled op once on fixed inputs; the outputs kept */
static result run_ops(void) {
  const kernels_ops *o = kernels_cpu_ops();
  result r = {0};
  float *x = rnd(NE, 1), *y = rnd(NE, 2), *z = rnd(NE, 3), *w = rnd(NE, 4);
  float *m = calloc(NE, sizeof(float)), *v = calloc(NE, sizeof(float));
  o->gelu_forward(z, x, NE), keep(&r, z, NE);
  o->gelu_backward(z, x, y, NE), keep(&r, z, NE);
  o->adamw(w, x, m, v, NE, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, 0.5f), keep(&r, w, NE);
  o->axpy(w, 0.25f, y, NE), o->scale(w, 1.5f, NE), keep(&r, w, NE);
  float *mean = calloc(N, sizeof(float)), *rstd = calloc(N, sizeof(float)), *dw = calloc(C, sizeof(float)),
        *db = calloc(C, sizeof(float));
  o->layernorm_forward(z, mean, rstd, x, y, w, N, C, 1e-5f);
  o->layernorm_backward_input(z + (size_t)N * C, y, x, w, mean, rstd, N, C);
  o->layernorm_backward_weight(dw, db, y, x, mean, rstd, N, C);
  o->bias_add(z, y, N, C), o->bias_grad(db, x, N, C);
  keep(&r, z, 2 * (size_t)N * C), keep(&r, dw, C), keep(&r, db, C);
  int32_t *tgt = malloc(sizeof(int32_t) * N);
  for (int i = 0; i < N; i++) tgt[i] = (i * 37) % V;
  float *loss = calloc(N, sizeof(float)), *probs = calloc((size_t)N * V, sizeof(float));
  o->xent_forward(loss, probs, x, tgt, N, V, V, 0);
  o->xent_backward(z, probs, tgt, 0.01f, N, V, V, 0);
  o->softmax_forward(z + (size_t)N * V, y, N, V);
  keep(&r, loss, N), keep(&r, z, 2 * (size_t)N * V);
  /* attention: B = 3 sequences of T = 37, 4 heads of 8: heads split over the workers */
  int AB = 3, AT = 37, AC = 32, NH = 4;
  float *att = calloc((size_t)AB * NH * AT * AT, sizeof(float)), *scr = calloc((size_t)AT * AT + 16, sizeof(float));
  o->attention_forward(z, att, x, AB, AT, AC, NH);
  keep(&r, z, (size_t)AB * AT * AC), keep(&r, att, (size_t)AB * NH * AT * AT);
  o->attention_backward(w, scr, y, x, att, AB, AT, AC, NH);
  keep(&r, w, (size_t)AB * AT * 3 * AC);
  free(att), free(scr);
  /* the sum of squares (fixed 64K blocks) and the non-finite count, as bits */
  x[12345] = INFINITY;
  double sq = o->sumsq(y, NE), nf = (double)o->nonfinite(x, NE);
  float bits[4];
  memcpy(bits, &sq, sizeof sq), memcpy(bits + 2, &nf, sizeof nf);
  keep(&r, bits, 4);
  free(mean), free(rstd), free(dw), free(db), free(tgt), free(loss), free(probs);
  free(x), free(y), free(z), free(w), free(m), free(v);
  return r;
}

static void free_result(result *r) {
  for (int i = 0; i < r->n; i++) free(r->out[i]);
}

Test(pool, ops_give_the_same_bits_at_every_thread_count) {
  kernels_cpu_init(4);
  cr_assert_geq(kernels_cpu_pool_threads(), 2, "no pool workers started");
  kernels_cpu_pool_use(1);
  result one = run_ops();
  for (int t = 2; t <= 4; t++) {
    kernels_cpu_pool_use(t);
    result many = run_ops();
    for (int k = 0; k < one.n; k++)
      cr_assert(!memcmp(one.out[k], many.out[k], sizeof(float) * one.len[k]), "output %d differs at %d threads", k, t);
    free_result(&many);
  }
  free_result(&one);
}

Test(pool, gemms_split_over_the_workers_agree) {
  kernels_cpu_init(4);
  cr_assert_geq(kernels_cpu_pool_threads(), 2, "no pool workers started: nothing would be split");
  const kernels_ops *o = kernels_cpu_ops();
  const int shapes[][5] = {{64, 1000, 96, 0, 0}, {1000, 48, 96, 0, 1}, {129, 257, 63, 1, 0}, {300, 301, 17, 1, 1}};
  for (int s = 0; s < 4; s++) {
    int M = shapes[s][0], Nn = shapes[s][1], K = shapes[s][2], ta = shapes[s][3], tb = shapes[s][4];
    float *a = rnd((size_t)M * K, 10 + s), *b = rnd((size_t)K * Nn, 20 + s), *c1 = rnd((size_t)M * Nn, 30 + s);
    float *c4 = malloc(sizeof(float) * (size_t)M * Nn);
    memcpy(c4, c1, sizeof(float) * (size_t)M * Nn);
    kernels_cpu_pool_use(1);
    o->gemm(c1, a, b, M, Nn, K, ta, tb, 0.5f, 1.0f);
    kernels_cpu_pool_use(4);
    o->gemm(c4, a, b, M, Nn, K, ta, tb, 0.5f, 1.0f);
    for (size_t i = 0; i < (size_t)M * Nn; i++)
      cr_assert(fabsf(c1[i] - c4[i]) <= 1e-5f * (1.0f + fabsf(c1[i])), "shape %d, element %zu: %g vs %g", s, i, c1[i], c4[i]);
    free(a), free(b), free(c1), free(c4);
  }
}

/* A split of nothing runs nothing, whatever the grain: with grain 0 and a pool running, n = 0
 * divided by a step of 0 (SIGFPE) where cpu.h promises "none when n is 0". */
static void count_calls(void *ctx, size_t lo, size_t hi) {
  (void)lo, (void)hi;
  __atomic_add_fetch((int *)ctx, 1, __ATOMIC_RELAXED);
}

Test(pool, nothing_to_split_runs_nothing) {
  kernels_cpu_init(4);
  int calls = 0;
  kernels_cpu_parallel(0, 0, 1, count_calls, &calls);
  kernels_cpu_parallel(0, 8, 4, count_calls, &calls);
  cr_assert_eq(calls, 0, "%d calls for n = 0", calls);
  kernels_cpu_parallel(10, 0, 1, count_calls, &calls);
  cr_assert_geq(calls, 1);
}
