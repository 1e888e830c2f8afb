/* Tests of the CPU table's vector loops (kernels/cpu/vec_body.h): the exp against glibc's expf
 * over its range, the softmax against a long-double one, and the AVX2 and AVX-512 builds against
 * the SSE one bit for bit (the table in use must not change a result, whatever the CPU). How
 * close LayerNorm and AdamW are to references is tests/kernels/test_ops.c's part. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/ops.h"
#include "tests/common/splitmix.h"

static float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
static uint32_t to_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

/* Distance in representable floats between two finite floats of the same sign (or zeros). */
static int64_t ulps(float a, float b) {
  int64_t x = to_bits(a) & 0x7fffffffu, y = to_bits(b) & 0x7fffffffu;
  if (signbit(a) != signbit(b)) return x + y;
  return x > y ? x - y : y - x;
}

enum { MAXT = 3 };

/* The tables this CPU can run, narrowest first: SSE always, AVX2 and AVX-512 where it has them. */
static int tables(const kernels_cpu_vec *out[MAXT]) {
  __builtin_cpu_init();
  int n = 0;
  out[n++] = &kernels_cpu_vec_sse;
  if (__builtin_cpu_supports("avx2")) out[n++] = &kernels_cpu_vec_avx2;
  if (__builtin_cpu_supports("avx512f")) out[n++] = &kernels_cpu_vec_avx512;
  return n;
}

enum { CHUNK = 1 << 16 };

/* Floats in [-87, 88) (where the result is a normal float; the ends are checked below), through
 * each table in chunks of CHUNK: within 1 ulp of expf. Every 31st bit pattern (odd and prime:
 * every residue of the low bits comes up); BRIGADE_TEST_EXP_STRIDE=1 takes every one of the 2.2e9
 * floats (about 35 s; it gave a worst of 1 ulp for both tables on 2026-11-23). */
Test(vec, exp_within_one_ulp_of_expf_over_its_range, .timeout = 600) {
  const kernels_cpu_vec *t[MAXT];
  int nt = tables(t);
  const char *e = getenv("BRIGADE_TEST_EXP_STRIDE");
  uint64_t stride = e && atoi(e) > 0 ? (uint64_t)atoi(e) : 31;
  float *x = malloc(CHUNK * sizeof(float)), *y = malloc(CHUNK * sizeof(float));
  cr_assert(x && y);
  for (int k = 0; k < nt; k++) {
    int64_t worst = 0, n_all = 0;
    float worst_x = 0;
    /* two runs of bit patterns: [-87, -0] downwards from -0, and [+0, 88) upwards */
    const uint32_t start[2] = {0x80000000u, 0}, stop[2] = {to_bits(-87.0f) + 1, to_bits(88.0f)};
    for (int side = 0; side < 2; side++)
      for (uint64_t u = start[side]; u < stop[side];) {
        int n = 0;
        for (; n < CHUNK && u < stop[side]; n++, u += stride) x[n] = from_bits((uint32_t)u);
        t[k]->exp_shifted(y, x, 0.0f, (size_t)n);
        for (int i = 0; i < n; i++) {
          int64_t d = ulps(y[i], expf(x[i]));
          if (d > worst) worst = d, worst_x = x[i];
        }
        n_all += n;
      }
    cr_log_info("%s exp: %lld floats (1 in %llu), worst %lld ulp (at %a)", t[k]->name, (long long)n_all, (unsigned long long)stride,
                (long long)worst, (double)worst_x);
    cr_expect_leq(worst, 1, "%s exp is %lld ulp from expf at %a", t[k]->name, (long long)worst, (double)worst_x);
  }
  free(x), free(y);
}

Test(vec, exp_ends_as_expf) {
  const kernels_cpu_vec *t[MAXT];
  int nt = tables(t);
  const float in[] = {INFINITY, -INFINITY, 88.8f, 89.0f, 1e30f, -87.5f, -100.0f, -1e30f, 0.0f, -0.0f};
  const float want[] = {INFINITY, 0.0f, INFINITY, INFINITY, INFINITY, 0.0f, 0.0f, 0.0f, 1.0f, 1.0f};
  enum { N = sizeof in / sizeof in[0] };
  for (int k = 0; k < nt; k++) {
    float y[N];
    t[k]->exp_shifted(y, in, 0.0f, N);
    for (int i = 0; i < N; i++) cr_expect_eq(y[i], want[i], "%s: exp(%g) = %g, want %g", t[k]->name, in[i], y[i], want[i]);
    float nan_in = NAN, nan_out = 0;
    t[k]->exp_shifted(&nan_out, &nan_in, 0.0f, 1);
    cr_expect(isnan(nan_out), "%s: exp(NaN) = %g", t[k]->name, nan_out);
  }
}

/* A stride through all 2^32 bit patterns (NaNs, infinities and subnormals included), through
 * exp (unshifted and shifted) and GELU forward and backward: each wider table's bits are SSE's. */
Test(vec, wider_tables_give_the_bits_of_sse, .timeout = 240) {
  const kernels_cpu_vec *t[MAXT];
  int nt = tables(t);
  if (nt < 2) cr_skip_test("this CPU has neither AVX2 nor AVX-512: only the SSE table runs here, nothing to compare");
  enum { STRIDE = 61 }; /* odd and prime: every residue of the low bits comes up */
  float *x = malloc(CHUNK * sizeof(float)), *dy = malloc(CHUNK * sizeof(float));
  float *a = malloc(CHUNK * sizeof(float)), *b = malloc(CHUNK * sizeof(float));
  cr_assert(x && dy && a && b);
  uint64_t compared = 0;
  for (uint64_t u = 0; u < (1ull << 32);) {
    int n = 0;
    for (; n < CHUNK && u < (1ull << 32); n++, u += STRIDE) {
      x[n] = from_bits((uint32_t)u);
      dy[n] = from_bits((uint32_t)(u * 2654435761u)); /* any float, NaNs too */
    }
    for (int op = 0; op < 4; op++) {
      for (int k = 0; k < nt; k++) {
        float *o = k ? b : a;
        switch (op) {
        case 0: t[k]->exp_shifted(o, x, 0.0f, (size_t)n); break;
        case 1: t[k]->exp_shifted(o, x, 3.25f, (size_t)n); break;
        case 2: t[k]->gelu_forward(o, x, (size_t)n); break;
        default: t[k]->gelu_backward(o, x, dy, (size_t)n); break;
        }
        if (k && memcmp(a, b, (size_t)n * sizeof(float))) {
          int i = 0;
          while (to_bits(a[i]) == to_bits(b[i])) i++;
          cr_assert_fail("op %d at x = %a: sse %a, %s %a", op, (double)x[i], (double)a[i], t[k]->name, (double)b[i]);
        }
      }
    }
    compared += (uint64_t)n;
  }
  cr_log_info("%llu floats compared through 4 ops, %d tables", (unsigned long long)compared, nt);
  free(x), free(dy), free(a), free(b);
}

/* The softmax of rows of every length 1..70 (the 8 partial sums' tails, each table's vector
 * tail) and of a vocabulary's 50257 (over several of the 1024-float blocks), with values spread
 * over [-30, 30) (no probability near the subnormals): every table gives SSE's bits
 * (probabilities, sum and max), the max is the row's, and each probability is within 4 ulp of
 * the long-double softmax of the same float differences x - max. */
Test(vec, softmax_is_exact_to_a_few_ulp_and_the_same_in_every_table) {
  const kernels_cpu_vec *t[MAXT];
  int nt = tables(t);
  enum { V = 50257 };
  float *x = malloc(V * sizeof(float)), *y = malloc(V * sizeof(float)), *y0 = malloc(V * sizeof(float));
  cr_assert(x && y && y0);
  rng r = {2026};
  int64_t worst = 0;
  for (int n = 1; n <= 71; n++) {
    int len = n <= 70 ? n : V;
    for (int i = 0; i < len; i++) x[i] = uniform(&r, -30.0f, 30.0f);
    float want_max = x[0];
    for (int i = 1; i < len; i++) want_max = fmaxf(want_max, x[i]);
    long double ref = 0; /* of the float differences x - max the kernel takes the exp of */
    for (int i = 0; i < len; i++) ref += expl((long double)(x[i] - want_max));
    double sum0 = 0;
    float max0 = 0;
    for (int k = 0; k < nt; k++) {
      float mx;
      double sum = t[k]->softmax(k ? y : y0, x, (size_t)len, &mx);
      cr_assert_eq(to_bits(mx), to_bits(want_max), "%s n %d: max %a, want %a", t[k]->name, len, (double)mx,
                   (double)want_max);
      cr_assert_float_eq(sum, (double)ref, 1e-5 * (double)ref, "%s n %d: sum %.17g, want %.17Lg", t[k]->name, len, sum, ref);
      if (!k) {
        sum0 = sum, max0 = mx;
        for (int i = 0; i < len; i++) {
          int64_t d = ulps(y0[i], (float)(expl((long double)(x[i] - want_max)) / ref));
          if (d > worst) worst = d;
        }
        continue;
      }
      cr_assert(sum == sum0 && to_bits(mx) == to_bits(max0), "%s n %d: sum %a max %a, sse %a %a", t[k]->name, len, sum,
                (double)mx, sum0, (double)max0);
      cr_assert(!memcmp(y, y0, (size_t)len * sizeof(float)), "%s n %d: probabilities differ from sse's", t[k]->name, len);
    }
  }
  cr_log_info("softmax: worst %lld ulp from the long-double one", (long long)worst);
  cr_expect_leq(worst, 4, "softmax is %lld ulp from the long-double one", (long long)worst);
  /* a NaN anywhere gives NaN probabilities and sum; a NaN at the start is the max (as the loop
   * mx = x[i] > mx ? x[i] : mx from x[0] has it) */
  for (int k = 0; k < nt; k++)
    for (int at = 0; at < 20; at += 19) {
      for (int i = 0; i < 20; i++) x[i] = (float)i - 7.5f;
      x[at] = NAN;
      float mx;
      double sum = t[k]->softmax(y, x, 20, &mx);
      cr_expect(isnan(sum) && isnan(y[3]), "%s NaN at %d: sum %g, y[3] %g", t[k]->name, at, sum, (double)y[3]);
      cr_expect(at ? mx == 10.5f : isnan(mx), "%s NaN at %d: max %g", t[k]->name, at, (double)mx);
    }
  free(x), free(y), free(y0);
}

static float *randoms(rng *r, size_t n, float lo, float hi) {
  float *x = malloc((n ? n : 1) * sizeof(float));
  cr_assert(x);
  for (size_t i = 0; i < n; i++) x[i] = uniform(r, lo, hi);
  return x;
}

/* What one table computes from the same inputs: LayerNorm forward, both backwards (accumulating
 * into dw, db from given values) and an AdamW step; every output of it, in one buffer. */
static float *layernorm_and_adamw(const kernels_cpu_vec *t, int N, int C, uint64_t seed, size_t *len) {
  rng r = {seed};
  size_t nc = (size_t)N * C;
  float *x = randoms(&r, nc, -3, 5), *w = randoms(&r, C, 0.5f, 1.5f), *b = randoms(&r, C, -1, 1);
  float *dy = randoms(&r, nc, -1, 1), *dw = randoms(&r, C, -1, 1), *db = randoms(&r, C, -1, 1);
  float *p = randoms(&r, nc, -1, 1), *g = randoms(&r, nc, -1, 1), *m = randoms(&r, nc, -0.1f, 0.1f);
  float *v = randoms(&r, nc, 0, 0.01f);
  *len = 5 * nc + 2 * (size_t)N + 2 * (size_t)C; /* y, mean, rstd, dx, dw, db, p, m, v */
  float *out = malloc(*len * sizeof(float)), *o = out;
  cr_assert(out);
  float *y = o, *mean = (o += nc), *rstd = (o += N), *dx = (o += N);
  t->layernorm_forward(y, mean, rstd, x, w, b, N, C, 1e-5f);
  t->layernorm_backward_input(dx, dy, x, w, mean, rstd, N, C);
  t->layernorm_backward_weight(dw, db, dy, x, mean, rstd, N, C);
  o += nc, memcpy(o, dw, C * sizeof(float)), o += C, memcpy(o, db, C * sizeof(float)), o += C;
  t->adamw(p, g, m, v, nc, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.1f, 0.05f, 0.5f);
  memcpy(o, p, nc * sizeof(float)), o += nc, memcpy(o, m, nc * sizeof(float)), o += nc;
  memcpy(o, v, nc * sizeof(float)), o += nc;
  cr_assert_eq((size_t)(o - out), *len);
  free(x), free(w), free(b), free(dy), free(dw), free(db), free(p), free(g), free(m), free(v);
  return out;
}

/* Row lengths around the 8 partial sums (1..17), GPT-2 widths, and a long odd one. */
Test(vec, wider_layernorm_and_adamw_give_the_bits_of_sse) {
  const kernels_cpu_vec *t[MAXT];
  int nt = tables(t);
  if (nt < 2) cr_skip_test("this CPU has neither AVX2 nor AVX-512: only the SSE table runs here, nothing to compare");
  const int widths[] = {1, 2, 3, 4, 5, 7, 8, 9, 12, 15, 16, 17, 31, 33, 64, 128, 768, 1001};
  for (int w = 1; w < nt; w++)
    for (size_t k = 0; k < sizeof widths / sizeof widths[0]; k++) {
      size_t na, nb;
      float *a = layernorm_and_adamw(t[0], 3, widths[k], 7 + k, &na), *b = layernorm_and_adamw(t[w], 3, widths[k], 7 + k, &nb);
      cr_assert_eq(na, nb);
      for (size_t i = 0; i < na; i++)
        cr_assert_eq(to_bits(a[i]), to_bits(b[i]), "C=%d, output float %zu: sse %a, %s %a", widths[k], i,
                     (double)a[i], t[w]->name, (double)b[i]);
      free(a), free(b);
    }
}

/* A value's result does not depend on where it sits: every length 1..3 vectors + 1, and the
 * last element of each (the padded tail) equals the same input at the start of a full vector. */
Test(vec, tail_gives_the_bits_of_a_full_vector) {
  const kernels_cpu_vec *t[MAXT];
  int nt = tables(t);
  float x[49], dy[49], full[16], y[49];
  for (int i = 0; i < 49; i++) x[i] = -6.0f + 0.5f * (float)i, dy[i] = 0.25f * (float)(i % 7) - 0.75f;
  for (int k = 0; k < nt; k++)
    for (int n = 1; n <= 3 * t[k]->width + 1; n++)
      for (int op = 0; op < 3; op++) {
        float xs[16] = {x[n - 1]}, ds[16] = {dy[n - 1]};
        for (int i = 1; i < 16; i++) xs[i] = 1.0f, ds[i] = 1.0f;
        if (op == 0) t[k]->exp_shifted(y, x, 0.5f, (size_t)n), t[k]->exp_shifted(full, xs, 0.5f, 16);
        if (op == 1) t[k]->gelu_forward(y, x, (size_t)n), t[k]->gelu_forward(full, xs, 16);
        if (op == 2) t[k]->gelu_backward(y, x, dy, (size_t)n), t[k]->gelu_backward(full, xs, ds, 16);
        cr_expect_eq(to_bits(y[n - 1]), to_bits(full[0]), "%s op %d n %d: %a vs %a", t[k]->name, op, n,
                     (double)y[n - 1], (double)full[0]);
      }
}

/* The table in use is AVX2's where the CPU has it, SSE's with BRIGADE_CPU_VEC=sse, AVX-512's
 * with BRIGADE_CPU_VEC=avx512 where the CPU has it. */
Test(vec, the_table_in_use_is_avx2s_unless_asked) {
  const kernels_cpu_vec *t[MAXT];
  int nt = tables(t);
  const char *e = getenv("BRIGADE_CPU_VEC");
  int cap = e && !strcmp(e, "sse") ? 1 : e && !strcmp(e, "avx512") ? 3 : 2;
  const kernels_cpu_vec *want = t[(cap < nt ? cap : nt) - 1];
  cr_expect_eq(kernels_cpu_vec_get(), want, "in use: %s, want %s", kernels_cpu_vec_get()->name, want->name);
}

/* round_bf16 gives kernels_f32_to_bf16's bits in every table: ties both ways, the largest finite
 * values (rounding up to Inf), Inf, NaNs with payloads only in the low half, subnormals, random
 * bit patterns; in place and out of place, every tail length. */
Test(vec, round_bf16_gives_the_bits_of_the_scalar_rounding) {
  const kernels_cpu_vec *t[MAXT];
  int nt = tables(t);
  enum { N = 4096 };
  static float x[N], y[N];
  static const uint32_t special[] = {0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x3f808001u, 0x7f7fffffu, 0x7f7f8000u,
                                     0x7f800000u, 0xff800000u, 0x7f800001u, 0xff800001u, 0x7fc00000u, 0x7f80ffffu,
                                     0x00000001u, 0x80008000u, 0x00018000u, 0x00000000u, 0x80000000u, 0xbf7fffffu};
  size_t ns = sizeof special / sizeof special[0];
  rng r = {99};
  for (size_t i = 0; i < N; i++) x[i] = from_bits(i < ns ? special[i] : (uint32_t)next_u64(&r));
  for (int k = 0; k < nt; k++) {
    for (size_t n = 1; n <= 40; n++) {
      t[k]->round_bf16(y, x, n);
      for (size_t i = 0; i < n; i++) {
        uint32_t want = (uint32_t)kernels_f32_to_bf16(x[i]) << 16;
        cr_assert_eq(to_bits(y[i]), want, "%s n %zu: %08x rounds to %08x, want %08x", t[k]->name, n, to_bits(x[i]),
                     to_bits(y[i]), want);
      }
    }
    memcpy(y, x, sizeof y);
    t[k]->round_bf16(y, y, N);
    for (size_t i = 0; i < N; i++)
      cr_assert_eq(to_bits(y[i]), (uint32_t)kernels_f32_to_bf16(x[i]) << 16, "%s in place: %08x", t[k]->name,
                   to_bits(x[i]));
  }
}
