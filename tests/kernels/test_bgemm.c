/* Tests of the CPU table's bf16 GEMM (kernels/cpu/bgemm.c) on CPUs with AVX512-BF16: each
 * product against a double-precision product of the operands rounded to bf16 (every
 * transposition, alpha and beta, edges of every block and tile, padding left alone), in both
 * kernels where the CPU has AMX (its tiles, then AVX512-BF16), and the table's routing under
 * matmul_half. Skipped, saying so, on a CPU without AVX512-BF16, where the table keeps fp32
 * GEMMs under bf16 (also checked). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/ops.h"
#include "tests/common/splitmix.h"

static float rb(float x) { return kernels_bf16_to_f32(kernels_f32_to_bf16(x)); }

#define SKIP_WITHOUT_BF16()                                                                        \
  do {                                                                                             \
    if (!kernels_cpu_bgemm_supported()) cr_skip_test("this CPU has no AVX512-BF16: no bf16 GEMM to test"); \
  } while (0)

/* One product with leading dimensions past the widths (padding that must stay as it was);
 * returns the worst error as a fraction of the bound (K + 2) * 2^-24 * (|alpha| sum |a b| +
 * |beta c|): sums of exact bf16 products in fp32, so only the additions round. */
static double check(rng *r, int M, int N, int K, int ta, int tb, float alpha, float beta) {
  int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 7;
  size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb, nc = (size_t)M * ldc;
  float *a = malloc(na * 4 + 4), *b = malloc(nb * 4 + 4), *c = malloc(nc * 4 + 4), *c0 = malloc(nc * 4 + 4);
  for (size_t i = 0; i < na; i++) a[i] = uniform(r, -0.5f, 0.5f);
  for (size_t i = 0; i < nb; i++) b[i] = uniform(r, -0.5f, 0.5f);
  for (size_t i = 0; i < nc; i++) c[i] = c0[i] = uniform(r, -0.5f, 0.5f);
  kernels_cpu_bgemm(c, a, b, M, N, K, ta, tb, alpha, beta, lda, ldb, ldc);
  double worst = 0;
  for (int i = 0; i < M; i++)
    for (int j = 0; j < ldc; j++) {
      size_t ci = (size_t)i * ldc + j;
      if (j >= N) {
        cr_assert(c[ci] == c0[ci], "M=%d N=%d K=%d: padding at row %d column %d written", M, N, K, i, j);
        continue;
      }
      double s = 0, sa = 0;
      for (int k = 0; k < K; k++) {
        double x = rb(ta ? a[(size_t)k * lda + i] : a[(size_t)i * lda + k]);
        double y = rb(tb ? b[(size_t)j * ldb + k] : b[(size_t)k * ldb + j]);
        s += x * y, sa += fabs(x * y);
      }
      double ref = alpha * s + (beta == 0.0f ? 0.0 : beta * (double)c0[ci]);
      double tol = (K + 2) * ldexp(1.0, -24) * (fabs(alpha) * sa + fabs(beta * c0[ci])) + 1e-30;
      double e = fabs(c[ci] - ref) / tol;
      if (e > worst) worst = e;
    }
  free(a), free(b), free(c), free(c0);
  return worst;
}

static void products_within_the_bound(void) {
  rng r = {20261126};
  /* AVX512-BF16: tiles 8 x 48, blocks 128 rows x 1536 columns x 384 of k; AMX: tiles 32 x 32,
   * blocks 256 rows x 768 columns x 768 of k (A packed once per block of k up to 256 rows, in
   * GotoBLAS's order beyond); edges of each, odd k */
  static const int shapes[][3] = {{1, 1, 1},    {8, 48, 2},    {7, 47, 3},     {9, 49, 33},    {17, 100, 385},
                                  {129, 97, 31}, {13, 5, 1},   {64, 1537, 20}, {300, 160, 770}, {32, 32, 32},
                                  {33, 65, 769}, {257, 769, 64}, {31, 31, 63}, {40, 800, 800},
                                  {24, 70, 1600}, {50, 33, 900}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++) {
        float alpha = s % 2 ? 1.0f : 0.5f, beta = s % 3 == 0 ? 0.0f : s % 3 == 1 ? 1.0f : -0.7f;
        int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        double w = check(&r, M, N, K, ta, tb, alpha, beta);
        cr_assert(w <= 1.0, "%s: M=%d N=%d K=%d transa=%d transb=%d alpha=%g beta=%g: error %.3f of the bound",
                  kernels_cpu_bgemm_uses_amx() ? "AMX" : "AVX512-BF16", M, N, K, ta, tb, alpha, beta, w);
      }
}

Test(bgemm, matches_the_product_of_the_rounded_operands, .timeout = 300) {
  SKIP_WITHOUT_BF16();
  kernels_cpu_bgemm_use_amx(0);
  cr_assert(!kernels_cpu_bgemm_uses_amx());
  products_within_the_bound();
  kernels_cpu_bgemm_use_amx(1);
  if (!kernels_cpu_bgemm_amx_supported())
    cr_skip_test("this CPU has no AMX-BF16 (or the kernel does not grant its tiles): AVX512-BF16's GEMM checked, "
                 "AMX's not");
  cr_assert(kernels_cpu_bgemm_uses_amx());
  products_within_the_bound();
}

/* BRIGADE_CPU_BGEMM=avx512 keeps AVX512-BF16's GEMM where AMX runs (read once: each test is a
 * process of its own), and the log line says which. */
Test(bgemm, the_environment_keeps_avx512_bf16) {
  SKIP_WITHOUT_BF16();
  setenv("BRIGADE_CPU_BGEMM", "avx512", 1);
  cr_assert(!kernels_cpu_bgemm_uses_amx());
  const char *say = kernels_cpu_matmul_half(1);
  cr_assert(strstr(say, "AVX512-BF16"), "%s", say);
  kernels_cpu_ops()->matmul_half(0);
  unsetenv("BRIGADE_CPU_BGEMM");
}

/* Operands that bf16 changes: 1 + 2^-10 rounds to 1 (ties to even at 1 + 2^-8 would go down
 * too), so a K = 1 product is exactly 1 in bf16 and 1 + 2^-9 + 2^-20 in fp32. */
Test(bgemm, rounds_the_operands_to_bf16) {
  SKIP_WITHOUT_BF16();
  float a[4] = {1.0f + 0x1p-10f, 1.0f + 0x1p-7f + 0x1p-9f, -3.0f, 0x1p-8f};
  float b[4] = {1.0f + 0x1p-10f, 1.0f, 1.0f + 0x1p-9f, 1.0f};
  float c[16];
  kernels_cpu_bgemm(c, a, b, 4, 4, 1, 0, 0, 1.0f, 0.0f, 1, 4, 4);
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++)
      cr_assert(c[i * 4 + j] == rb(a[i]) * rb(b[j]), "c[%d][%d] = %a, want %a", i, j, c[i * 4 + j],
                rb(a[i]) * rb(b[j]));
  cr_assert(c[0] == 1.0f);
}

/* The table's gemm takes the bf16 GEMM under matmul_half(1) only (and not with
 * BRIGADE_CPU_BGEMM=0); split over the pool's threads, the same bits as one thread. */
Test(bgemm, the_cpu_table_routes_its_gemms_under_matmul_half, .timeout = 120) {
  const kernels_ops *ops = kernels_cpu_ops();
  float a = 1.0f + 0x1p-10f, b = 1.0f + 0x1p-10f, c = 0, fp32 = a * b;
  ops->matmul_half(1);
  ops->gemm(&c, &a, &b, 1, 1, 1, 0, 0, 1.0f, 0.0f);
  if (!kernels_cpu_bgemm_supported()) {
    cr_assert(!kernels_cpu_gemm_bf16() && c == fp32, "no AVX512-BF16: the GEMMs must stay fp32");
    ops->matmul_half(0);
    cr_skip_test("this CPU has no AVX512-BF16: checked only that its GEMMs stay fp32 under bf16");
  }
  cr_assert(kernels_cpu_gemm_bf16() && c == 1.0f, "under bf16: %a", c);
  const char *say = kernels_cpu_matmul_half(1), *e = getenv("BRIGADE_CPU_BGEMM");
  /* AMX where it runs (unless the environment keeps AVX512-BF16), and the log says which */
  cr_assert(kernels_cpu_bgemm_uses_amx() == (kernels_cpu_bgemm_amx_supported() && !(e && !strcmp(e, "avx512"))));
  cr_assert(strstr(say, kernels_cpu_bgemm_uses_amx() ? "AMX" : "AVX512-BF16"), "%s", say);
  ops->matmul_half(2);
  ops->gemm(&c, &a, &b, 1, 1, 1, 0, 0, 1.0f, 0.0f);
  cr_assert(!kernels_cpu_gemm_bf16() && c == fp32, "fp16 has no CPU GEMM: fp32 expected, got %a", c);
  setenv("BRIGADE_CPU_BGEMM", "0", 1);
  ops->matmul_half(1);
  ops->gemm(&c, &a, &b, 1, 1, 1, 0, 0, 1.0f, 0.0f);
  cr_assert(!kernels_cpu_gemm_bf16() && c == fp32, "BRIGADE_CPU_BGEMM=0 keeps fp32");
  unsetenv("BRIGADE_CPU_BGEMM");
  ops->matmul_half(1);

  /* a product large enough to be split over two threads (by columns, then by rows; the third
   * splits 400 rows into two blocks of 200, which AMX's GEMM packs in its other loop order) */
  kernels_cpu_init(2);
  rng r = {7};
  for (int shape = 0; shape < 3; shape++) {
    int M = shape == 2 ? 400 : shape ? 700 : 96, N = shape ? 96 : 700, K = shape == 2 ? 900 : 300;
    float *x = malloc(sizeof(float) * M * K), *y = malloc(sizeof(float) * K * N);
    float *c1 = malloc(sizeof(float) * M * N), *c2 = malloc(sizeof(float) * M * N);
    for (int i = 0; i < M * K; i++) x[i] = uniform(&r, -0.5f, 0.5f);
    for (int i = 0; i < K * N; i++) y[i] = uniform(&r, -0.5f, 0.5f);
    kernels_cpu_pool_use(1);
    ops->gemm(c1, x, y, M, N, K, 0, 0, 1.0f, 0.0f);
    kernels_cpu_pool_use(2);
    ops->gemm(c2, x, y, M, N, K, 0, 0, 1.0f, 0.0f);
    cr_assert(!memcmp(c1, c2, sizeof(float) * M * N), "M=%d N=%d: two threads differ from one", M, N);
    free(x), free(y), free(c1), free(c2);
  }
  ops->matmul_half(0);
}
