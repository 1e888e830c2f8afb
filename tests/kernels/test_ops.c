/* Tests of the CPU op table against straightforward double-precision references written here,
 * and finite-difference gradient checks of every backward op.
 *
 * How the checks work:
 * - Inputs are uniform random from a fixed seed; sizes include 1, 3 and 17 to catch edge bugs.
 * - Outputs an op overwrites are poisoned with NaN first, so an element it never writes fails
 *   (NaN fails every comparison). Outputs an op accumulates into start from random values.
 * - fp32 results are compared with double references: |got - want| <= atol + rtol * |want|,
 *   tolerances stated at each check.
 * - Gradients: loss = sum(W * forward(x)) with random W, so dout = W; the kernel's backward must
 *   match central differences of the double reference forward (step FD_H = 1e-5; their own error
 *   is about 1e-10, far below the fp32 tolerances).
 * - Determinism: the same inputs give the same bits, whatever the outputs held before. */
#include <cblas.h>
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/ops.h"
#include "tests/common/ops_table.h"
#include "tests/common/splitmix.h"

/* ------------------------------------------------------------------------------------------ */
/* buffers: every allocation of a test is freed by the suite's fini (LeakSanitizer stays quiet) */

enum { POOL_MAX = 4096 };
static void *pool[POOL_MAX];
static int pool_n;

static void *alloc(size_t bytes) {
  cr_assert_lt(pool_n, POOL_MAX, "test allocation pool full");
  void *p = malloc(bytes ? bytes : 1);
  cr_assert_not_null(p);
  return pool[pool_n++] = p;
}
static void free_pool(void) {
  while (pool_n > 0) free(pool[--pool_n]);
}
static float *fbuf(size_t n) { return alloc(n * sizeof(float)); }
static double *dbuf(size_t n) { return alloc(n * sizeof(double)); }

TestSuite(ops, .fini = free_pool);

static const kernels_ops *cpu(void) { return kernels_cpu_ops(); }

static float *rand_buf(rng *r, size_t n, float lo, float hi) {
  float *x = fbuf(n);
  for (size_t i = 0; i < n; i++) x[i] = uniform(r, lo, hi);
  return x;
}
static float *poisoned(size_t n) {
  float *x = fbuf(n);
  for (size_t i = 0; i < n; i++) x[i] = NAN;
  return x;
}
static double *to_double(const float *x, size_t n) {
  double *d = dbuf(n);
  for (size_t i = 0; i < n; i++) d[i] = x[i];
  return d;
}
static float *dup(const float *x, size_t n) {
  float *y = fbuf(n);
  memcpy(y, x, n * sizeof(float));
  return y;
}

/* Fails on the first element outside tolerance, naming it. NaN never passes. */
static void expect_close(const char *what, const float *got, const double *want, size_t n,
                         double atol, double rtol) {
  for (size_t i = 0; i < n; i++) {
    double g = got[i], w = want[i];
    if (!(fabs(g - w) <= atol + rtol * fabs(w)))
      cr_assert_fail("%s[%zu]: got %.9g, want %.9g (atol %g, rtol %g)", what, i, g, w, atol, rtol);
  }
}
static void expect_same_bits(const char *what, const void *a, const void *b, size_t bytes) {
  cr_assert_eq(memcmp(a, b, bytes), 0, "%s: results differ between two identical calls", what);
}

/* Central differences of loss(ctx) with respect to x[0..n) (x is part of ctx). */
#define FD_H 1e-5
typedef double (*loss_fn)(void *ctx);
static double *fd_grad(double *x, size_t n, loss_fn loss, void *ctx) {
  double *g = dbuf(n);
  for (size_t i = 0; i < n; i++) {
    double x0 = x[i];
    x[i] = x0 + FD_H;
    double lp = loss(ctx);
    x[i] = x0 - FD_H;
    double lm = loss(ctx);
    x[i] = x0;
    g[i] = (lp - lm) / (2 * FD_H);
  }
  return g;
}
static double dot(const double *a, const double *b, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

static const int odd[] = {1, 3, 17};
#define NODD 3

/* ------------------------------------------------------------------------------------------ */
/* backend table */

Test(ops, backend_lookup) {
  const kernels_ops *t = NULL;
  cr_assert_eq(kernels_get_ops("cpu", &t), CORE_OK);
  cr_assert_eq(t, kernels_cpu_ops());
  cr_assert_str_eq(t->name, "cpu");
  cr_assert_eq(t->device_memory, 0, "cpu buffers are host memory");

  cr_assert_eq(kernels_get_ops("fakedev", &t), CORE_OK);
  cr_assert_eq(t, kernels_fakedev_ops());
  cr_assert_str_eq(t->name, "fakedev");
  cr_assert_eq(t->device_memory, 1, "fakedev buffers are not host memory");

  core_error_clear();
  int rc = kernels_get_ops("cuda", &t);
#if BRIGADE_CUDA
  cr_assert(rc == CORE_OK || rc == CORE_ERUNTIME);
  if (rc == CORE_OK) cr_assert_eq(t->device_memory, 1, "cuda buffers are device memory");
#else
  cr_assert_eq(rc, CORE_ERUNTIME, "cuda without a CUDA build must be a runtime error");
  cr_assert_not_null(strstr(core_error_msg(), "CUDA"), "message: %s", core_error_msg());
  cr_assert_null(t);
#endif
  cr_assert_eq(kernels_get_ops("tpu", &t), CORE_EINPUT);
  cr_assert_not_null(strstr(core_error_msg(), "\"tpu\""), "message: %s", core_error_msg());
  cr_assert_not_null(strstr(core_error_msg(), "fakedev"), "lists every backend: %s",
                     core_error_msg());
  cr_assert_null(t);
  cr_assert_eq(kernels_get_ops(NULL, &t), CORE_EINPUT);
  cr_assert_eq(kernels_get_ops("CPU", &t), CORE_EINPUT, "names are exact");
}

#if BRIGADE_CUDA
/* cuBLAS and cuBLASLt are not linked but loaded on the CUDA backend's first call
 * (kernels/cuda/cublas_load.cu): the library's own functions answer through the loader, GPU or
 * not (declared here as a C caller sees them: enums are ints, handles pointers). */
const char *cublasGetStatusString(int status);
int cublasLtMatmulPreferenceCreate(void **pref);
int cublasLtMatmulPreferenceDestroy(void *pref);
Test(ops_table, cublas_is_loaded_on_first_call) {
  const char *ok = cublasGetStatusString(0); /* the library's own text ("success"), not the loader's */
  cr_assert(ok && ok[0] && !strstr(ok, "could not load") && !strstr(ok, " has no "), "%s", ok ? ok : "(null)");
  void *pref = NULL; /* cuBLASLt's host-side object: made and freed by the library, GPU or not */
  cr_assert_eq(cublasLtMatmulPreferenceCreate(&pref), 0, "%s", cublasGetStatusString(1));
  cr_assert_not_null(pref);
  cr_assert_eq(cublasLtMatmulPreferenceDestroy(pref), 0);
}
#endif

Test(ops, table_is_complete) {
  const kernels_ops *t = cpu();
  const char *miss = test_ops_missing(t);
  cr_assert_null(miss, "%s table lacks %s", t->name, miss);
}

/* The core choice must happen even though OpenBLAS chose before main; checked by clearing the
 * variable (this environment may set one) before the first call, as a fresh shell would. */
Test(ops, blas_core_avx512_when_unset) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f")) cr_skip_test("this CPU has no AVX-512");
  unsetenv("OPENBLAS_CORETYPE");
  kernels_cpu_init(1);
  const char *core = kernels_cpu_blas_core();
  cr_assert(!strcmp(core, "SkylakeX") || !strcmp(core, "Cooperlake") ||
                !strcmp(core, "SapphireRapids"),
            "OpenBLAS core is %s, expected an AVX-512 one", core);
  /* and the switched kernels compute: a 17x17x17 product against the reference below */
  rng r = {7};
  float *a = rand_buf(&r, 289, -1, 1), *b = rand_buf(&r, 289, -1, 1), *c = poisoned(289);
  cpu()->gemm(c, a, b, 17, 17, 17, 0, 0, 1.0f, 0.0f);
  for (int i = 0; i < 17; i++)
    for (int j = 0; j < 17; j++) {
      double s = 0;
      for (int k = 0; k < 17; k++) s += (double)a[i * 17 + k] * b[k * 17 + j];
      cr_assert(fabs(c[i * 17 + j] - s) <= 1e-5, "c[%d,%d] = %g, want %g", i, j, c[i * 17 + j], s);
    }
}

/* The threads of this process, from /proc. */
static int threads_now(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  int n = -1;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "Threads:", 8)) n = atoi(line + 8);
  if (f) fclose(f);
  return n;
}

/* A GEMM of n x n ones by twos on the CPU table: every entry 2n. */
static void gemm_twos(int n) {
  float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n), *c = malloc(sizeof(float) * n * n);
  for (int i = 0; i < n * n; i++) a[i] = 1, b[i] = 2;
  cpu()->gemm(c, a, b, n, n, n, 0, 0, 1.0f, 0.0f);
  for (int i = 0; i < n * n; i += 97) cr_assert(c[i] == 2.0f * n, "c[%d] = %g, want %d", i, c[i], 2 * n);
  free(a), free(b), free(c);
}

/* main's set-up stops the worker threads a threaded OpenBLAS keeps (it starts them when it is
 * loaded, and in every forked child); a GEMM that wants OpenBLAS's threads afterwards gets them
 * back and a right answer. The workers are made to exist first, whatever OPENBLAS_NUM_THREADS
 * says. */
Test(ops, setup_stops_openblas_workers) {
  openblas_set_num_threads(2);
  gemm_twos(256);
  int before = threads_now();
  cr_assert(before >= 1, "cannot read the thread count from /proc/self/status");
  if (before == 1) cr_skip_test("OpenBLAS runs no worker threads here (a serial OpenBLAS)");
  kernels_cpu_setup();
  int after = threads_now();
  cr_assert(after < before, "threads: %d before the set-up, %d after (OpenBLAS's workers still run)", before, after);
  openblas_set_num_threads(2); /* OpenBLAS's threads wanted again */
  gemm_twos(256);
}

/* The set-up makes the kernel choice in process: the test keeps running. */
Test(ops, blas_core_setup_is_in_process) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f")) cr_skip_test("this CPU has no AVX-512");
  unsetenv("OPENBLAS_CORETYPE");
  kernels_cpu_setup();
  const char *core = kernels_cpu_blas_core();
  cr_assert(!strcmp(core, "SkylakeX") || !strcmp(core, "Cooperlake") ||
                !strcmp(core, "SapphireRapids"),
            "OpenBLAS core is %s, expected an AVX-512 one", core);
}

Test(ops, blas_core_user_choice_kept) {
  const char *before = kernels_cpu_blas_core();
  char saved[64];
  snprintf(saved, sizeof saved, "%s", before);
  setenv("OPENBLAS_CORETYPE", "Haswell", 1);
  kernels_cpu_init(1);
  cr_assert_str_eq(getenv("OPENBLAS_CORETYPE"), "Haswell");
  cr_assert_str_eq(kernels_cpu_blas_core(), saved, "a user's OPENBLAS_CORETYPE must win");
}

/* ------------------------------------------------------------------------------------------ */
/* gemm */

/* C = alpha op(A) op(B) + beta C in double; with beta == 0, C is not read */
static void ref_gemm(double *c, const float *a, const float *b, int M, int N, int K, int ta,
                     int tb, double alpha, double beta) {
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double s = 0;
      for (int k = 0; k < K; k++)
        s += (double)(ta ? a[(size_t)k * M + i] : a[(size_t)i * K + k]) *
             (tb ? b[(size_t)j * K + k] : b[(size_t)k * N + j]);
      double *cij = c + (size_t)i * N + j;
      *cij = alpha * s + (beta != 0 ? beta * *cij : 0);
    }
}

/* One case: every transpose combination, beta 0 (C poisoned: must be written, not read), beta 1
 * (accumulate) and beta -0.5. Tolerance: atol 1e-5 + 1e-6 K, rtol 1e-5 (inputs in [-1, 1]). */
static void check_gemm(rng *r, int M, int N, int K) {
  static const float betas[] = {0.0f, 1.0f, -0.5f};
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (int bi = 0; bi < 3; bi++) {
        float beta = betas[bi], alpha = 0.75f;
        float *a = rand_buf(r, (size_t)M * K, -1, 1), *b = rand_buf(r, (size_t)K * N, -1, 1);
        float *c = beta == 0 ? poisoned((size_t)M * N) : rand_buf(r, (size_t)M * N, -1, 1);
        double *want = to_double(c, (size_t)M * N);
        ref_gemm(want, a, b, M, N, K, ta, tb, alpha, beta);
        cpu()->gemm(c, a, b, M, N, K, ta, tb, alpha, beta);
        char what[96];
        snprintf(what, sizeof what, "gemm M=%d N=%d K=%d ta=%d tb=%d beta=%g", M, N, K, ta, tb,
                 beta);
        expect_close(what, c, want, (size_t)M * N, 1e-5 + 1e-6 * K, 1e-5);
      }
}

Test(ops, gemm_matches_reference) {
  rng r = {1};
  for (int i = 0; i < NODD; i++)
    for (int j = 0; j < NODD; j++)
      for (int k = 0; k < NODD; k++) check_gemm(&r, odd[i], odd[j], odd[k]);
  check_gemm(&r, 67, 130, 70); /* past BLAS's register blocking in every dimension */
}

/* gemm_ld: each operand in rows padded by 3 floats (NaN there: the CPU reads only the stored
 * widths, and leaves C's padding alone), every transpose, beta 0 and 1, against the reference on
 * the compact operands; 67 x 130 x 70 also takes the pool's split product */
static float *pad_rows(const float *x, int rows, int cols, int ld) {
  float *y = poisoned((size_t)rows * ld);
  for (int i = 0; i < rows; i++) memcpy(y + (size_t)i * ld, x + (size_t)i * cols, sizeof(float) * cols);
  return y;
}

Test(ops, gemm_ld_reads_and_writes_only_the_stored_widths) {
  rng r = {31};
  const int shapes[][3] = {{5, 17, 3}, {67, 130, 70}};
  for (int s = 0; s < 2; s++)
    for (int t = 0; t < 8; t++) {
      int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2], ta = t & 1, tb = (t >> 1) & 1;
      float beta = (t >> 2) ? 1.0f : 0.0f;
      int ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
      float *a = rand_buf(&r, (size_t)M * K, -1, 1), *b = rand_buf(&r, (size_t)K * N, -1, 1),
            *c = rand_buf(&r, (size_t)M * N, -1, 1);
      double *want = to_double(c, (size_t)M * N);
      ref_gemm(want, a, b, M, N, K, ta, tb, 0.75, beta);
      float *ap = pad_rows(a, ar, ac, ac + 3), *bp = pad_rows(b, br, bc, bc + 3), *cp = pad_rows(c, M, N, N + 3);
      cpu()->gemm_ld(cp, ap, bp, M, N, K, ta, tb, 0.75f, beta, ac + 3, bc + 3, N + 3);
      float *got = fbuf((size_t)M * N);
      for (int i = 0; i < M; i++) {
        memcpy(got + (size_t)i * N, cp + (size_t)i * (N + 3), sizeof(float) * N);
        for (int k = N; k < N + 3; k++) cr_assert(isnan(cp[(size_t)i * (N + 3) + k]), "gemm_ld wrote C's padding");
      }
      char what[96];
      snprintf(what, sizeof what, "gemm_ld M=%d N=%d K=%d ta=%d tb=%d beta=%g", M, N, K, ta, tb, beta);
      expect_close(what, got, want, (size_t)M * N, 1e-5 + 1e-6 * K, 1e-5);
    }
}

Test(ops, gemm_empty_shapes) {
  float c[6] = {1, 2, 3, 4, 5, 6}, a[1] = {0}, b[1] = {0};
  cpu()->gemm(c, a, b, 0, 3, 2, 0, 0, 1.0f, 0.0f); /* M = 0: nothing to write */
  cpu()->gemm(c, a, b, 2, 0, 2, 1, 1, 1.0f, 0.0f); /* N = 0 */
  for (int i = 0; i < 6; i++) cr_assert_eq(c[i], (float)(i + 1));
  cpu()->gemm(c, a, b, 2, 3, 0, 0, 0, 1.0f, 0.5f); /* K = 0: C = beta C */
  for (int i = 0; i < 6; i++) cr_assert_eq(c[i], 0.5f * (float)(i + 1));
}

Test(ops, gemm_batched_matches_separate_products) {
  rng r = {2};
  enum { BATCH = 3, M = 5, N = 17, K = 3 };
  float *a = rand_buf(&r, BATCH * M * K, -1, 1), *b = rand_buf(&r, K * N, -1, 1); /* b shared */
  float *c = rand_buf(&r, BATCH * M * N, -1, 1);
  double *want = to_double(c, BATCH * M * N);
  for (int i = 0; i < BATCH; i++)
    ref_gemm(want + i * M * N, a + i * M * K, b, M, N, K, 0, 0, 2.0, 1.0);
  cpu()->gemm_batched(c, a, b, BATCH, M * N, M * K, 0, M, N, K, 0, 0, 2.0f, 1.0f);
  expect_close("gemm_batched", c, want, BATCH * M * N, 1e-5, 1e-5);
}

/* Linear-layer gradients through gemm: L = sum(W * (A @ B)), dA = W @ B^T, dB = A^T @ W. */
typedef struct {
  double *a, *b, *w;
  int M, N, K;
} gemm_ctx;
static double gemm_loss(void *p) {
  gemm_ctx *g = p;
  double L = 0;
  for (int i = 0; i < g->M; i++)
    for (int j = 0; j < g->N; j++) {
      double s = 0;
      for (int k = 0; k < g->K; k++) s += g->a[i * g->K + k] * g->b[k * g->N + j];
      L += g->w[i * g->N + j] * s;
    }
  return L;
}

Test(ops, gemm_gradients_finite_difference) {
  rng r = {3};
  for (int i = 0; i < NODD; i++) {
    int M = odd[i], N = odd[(i + 1) % NODD], K = odd[(i + 2) % NODD];
    float *a = rand_buf(&r, (size_t)M * K, -1, 1), *b = rand_buf(&r, (size_t)K * N, -1, 1);
    float *w = rand_buf(&r, (size_t)M * N, -1, 1);
    float *da = poisoned((size_t)M * K), *db = poisoned((size_t)K * N);
    cpu()->gemm(da, w, b, M, K, N, 0, 1, 1.0f, 0.0f); /* [M,N] @ [K,N]^T */
    cpu()->gemm(db, a, w, K, N, M, 1, 0, 1.0f, 0.0f); /* [M,K]^T @ [M,N] */
    gemm_ctx g = {to_double(a, (size_t)M * K), to_double(b, (size_t)K * N),
                  to_double(w, (size_t)M * N), M, N, K};
    expect_close("gemm dA", da, fd_grad(g.a, (size_t)M * K, gemm_loss, &g), (size_t)M * K, 1e-5,
                 1e-4);
    expect_close("gemm dB", db, fd_grad(g.b, (size_t)K * N, gemm_loss, &g), (size_t)K * N, 1e-5,
                 1e-4);
  }
}

/* ------------------------------------------------------------------------------------------ */
/* bias */

Test(ops, bias_add_and_grad_accumulate) {
  rng r = {4};
  for (int i = 0; i < NODD; i++)
    for (int j = 0; j < NODD; j++) {
      int N = odd[i], C = odd[j];
      float *out = rand_buf(&r, (size_t)N * C, -1, 1), *bias = rand_buf(&r, C, -1, 1);
      float *dout = rand_buf(&r, (size_t)N * C, -1, 1), *db = rand_buf(&r, C, -1, 1);
      double *want = to_double(out, (size_t)N * C), *dwant = to_double(db, C);
      for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
          want[n * C + c] += bias[c];
          dwant[c] += dout[n * C + c];
        }
      cpu()->bias_add(out, bias, N, C);
      cpu()->bias_grad(db, dout, N, C);
      expect_close("bias_add", out, want, (size_t)N * C, 1e-6, 1e-6);
      expect_close("bias_grad (+=)", db, dwant, C, 1e-6 * N, 1e-6);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* gelu, relu */

static double ref_gelu(double x) {
  return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

/* d(sum_i w_i f(x_i))/dx_i by central differences, one element at a time (elements are
 * independent, so this is the full gradient at O(n) cost) */
static double *fd_elementwise(double (*f)(double), const float *x, const float *w, size_t n) {
  double *g = dbuf(n);
  for (size_t i = 0; i < n; i++) g[i] = w[i] * (f(x[i] + FD_H) - f(x[i] - FD_H)) / (2 * FD_H);
  return g;
}

Test(ops, gelu_forward_and_backward) {
  rng r = {5};
  enum { N = 203 };
  float *x = rand_buf(&r, N, -6, 6), *dout = rand_buf(&r, N, -1, 1);
  x[0] = 0.0f, x[1] = 10.0f, x[2] = -10.0f, x[3] = 1e-4f; /* saturated ends, origin */
  float *y = poisoned(N), *dx = poisoned(N);
  cpu()->gelu_forward(y, x, N);
  double want[N];
  for (int i = 0; i < N; i++) want[i] = ref_gelu(x[i]);
  expect_close("gelu_forward", y, want, N, 1e-6, 1e-6);
  cpu()->gelu_backward(dx, x, dout, N);
  expect_close("gelu_backward vs finite differences", dx, fd_elementwise(ref_gelu, x, dout, N), N,
               1e-5, 1e-4);
  /* in place: din may be dout */
  float *d2 = dup(dout, N);
  cpu()->gelu_backward(d2, x, d2, N);
  expect_same_bits("gelu_backward in place", d2, dx, sizeof(float) * N);
  /* saturated far out: the slope is 1 above and 0 below, also where x^2 overflows (it was NaN
   * for |x| above about 1.8e19: 0 * inf) */
  const float far[] = {1e10f, 1.9e19f, 1e20f, 3e38f, -1e10f, -1.9e19f, -1e20f, -3e38f};
  float ones[8], g[8];
  for (int i = 0; i < 8; i++) ones[i] = 1.0f;
  cpu()->gelu_backward(g, far, ones, 8);
  for (int i = 0; i < 8; i++)
    cr_assert(g[i] == (far[i] > 0 ? 1.0f : 0.0f), "gelu_backward at %g: %g", (double)far[i], (double)g[i]);
}

static double ref_relu(double x) { return x > 0 ? x : 0; }

Test(ops, relu_forward_and_backward) {
  rng r = {6};
  for (int k = 0; k < NODD; k++) {
    size_t n = (size_t)odd[k];
    float *x = rand_buf(&r, n, -1, 1), *dout = rand_buf(&r, n, -1, 1);
    for (size_t i = 0; i < n; i++) /* keep 2*FD_H away from the kink */
      if (fabsf(x[i]) < 1e-3f) x[i] = 0.5f;
    float *y = poisoned(n), *dx = poisoned(n);
    cpu()->relu_forward(y, x, n);
    cpu()->relu_backward(dx, x, dout, n);
    for (size_t i = 0; i < n; i++) {
      cr_assert_eq(y[i], x[i] > 0 ? x[i] : 0.0f, "relu_forward[%zu]", i);
      cr_assert_eq(dx[i], x[i] > 0 ? dout[i] : 0.0f, "relu_backward[%zu]", i);
    }
    expect_close("relu_backward vs finite differences", dx, fd_elementwise(ref_relu, x, dout, n),
                 n, 1e-6, 1e-6);
  }
  float z = 0.0f, one = 1.0f, out = NAN;
  cpu()->relu_backward(&out, &z, &one, 1);
  cr_assert_eq(out, 0.0f, "the subgradient at 0 is 0");
  /* NaN passes through both ways (it was 0: a NaN before a relu vanished from the loss, the norm
   * and the overflow check) */
  float nan = NAN, got = 0.0f;
  cpu()->relu_forward(&got, &nan, 1);
  cr_assert(isnan(got), "relu(NaN) = %g", got);
  got = 0.0f;
  cpu()->relu_backward(&got, &nan, &one, 1);
  cr_assert(isnan(got), "relu'(NaN) dy = %g", got);
}

/* ------------------------------------------------------------------------------------------ */
/* layernorm */

static void ref_layernorm(double *out, double *mean, double *rstd, const double *x,
                          const double *w, const double *b, int N, int C, double eps) {
  for (int n = 0; n < N; n++) {
    const double *xn = x + (size_t)n * C;
    double m = 0, v = 0;
    for (int c = 0; c < C; c++) m += xn[c];
    m /= C;
    for (int c = 0; c < C; c++) v += (xn[c] - m) * (xn[c] - m);
    v /= C;
    double s = 1 / sqrt(v + eps);
    for (int c = 0; c < C; c++) out[(size_t)n * C + c] = (xn[c] - m) * s * w[c] + b[c];
    if (mean) mean[n] = m, rstd[n] = s;
  }
}

typedef struct {
  double *x, *w, *b, *dout, *tmp;
  int N, C;
} ln_ctx;
static double ln_loss(void *p) {
  ln_ctx *l = p;
  ref_layernorm(l->tmp, NULL, NULL, l->x, l->w, l->b, l->N, l->C, 1e-5);
  return dot(l->tmp, l->dout, (size_t)l->N * l->C);
}

static void check_layernorm(rng *r, int N, int C) {
  size_t NC = (size_t)N * C;
  float *x = rand_buf(r, NC, -2, 2), *w = rand_buf(r, C, 0.5f, 1.5f), *b = rand_buf(r, C, -1, 1);
  float *dout = rand_buf(r, NC, -1, 1);
  float *out = poisoned(NC), *mean = poisoned(N), *rstd = poisoned(N), *dx = poisoned(NC);
  float *dw = rand_buf(r, C, -1, 1), *db = rand_buf(r, C, -1, 1); /* accumulated into */
  double *dw0 = to_double(dw, C), *db0 = to_double(db, C);
  cpu()->layernorm_forward(out, mean, rstd, x, w, b, N, C, 1e-5f);
  cpu()->layernorm_backward_input(dx, dout, x, w, mean, rstd, N, C);
  cpu()->layernorm_backward_weight(dw, db, dout, x, mean, rstd, N, C);

  ln_ctx l = {to_double(x, NC), to_double(w, C), to_double(b, C), to_double(dout, NC), dbuf(NC),
              N, C};
  double *want = dbuf(NC), *wmean = dbuf(N), *wrstd = dbuf(N);
  ref_layernorm(want, wmean, wrstd, l.x, l.w, l.b, N, C, 1e-5);
  char what[64];
  snprintf(what, sizeof what, "layernorm N=%d C=%d", N, C);
  expect_close(what, out, want, NC, 1e-5, 1e-5);
  expect_close("layernorm mean", mean, wmean, N, 1e-6, 1e-6);
  expect_close("layernorm rstd", rstd, wrstd, N, 1e-6, 1e-5);

  expect_close("layernorm din vs finite differences", dx, fd_grad(l.x, NC, ln_loss, &l), NC, 1e-4,
               1e-4);
  double *gw = fd_grad(l.w, C, ln_loss, &l), *gb = fd_grad(l.b, C, ln_loss, &l);
  for (int c = 0; c < C; c++) gw[c] += dw0[c], gb[c] += db0[c];
  expect_close("layernorm dweight (+=) vs finite differences", dw, gw, C, 1e-5 * N, 1e-4);
  expect_close("layernorm dbias (+=) vs finite differences", db, gb, C, 1e-5 * N, 1e-4);
}

Test(ops, layernorm_forward_and_gradients) {
  rng r = {7};
  for (int i = 0; i < NODD; i++)
    for (int j = 0; j < NODD; j++) check_layernorm(&r, odd[i], odd[j]);
  check_layernorm(&r, 5, 768); /* GPT-2 width */
}

/* ------------------------------------------------------------------------------------------ */
/* softmax */

static void ref_softmax(double *p, const float *x, int V) {
  double mx = x[0], sum = 0;
  for (int i = 1; i < V; i++) mx = fmax(mx, x[i]);
  for (int i = 0; i < V; i++) sum += (p[i] = exp(x[i] - mx));
  for (int i = 0; i < V; i++) p[i] /= sum;
}

Test(ops, softmax_rows) {
  rng r = {8};
  static const int Vs[] = {1, 3, 17, 1000};
  for (int k = 0; k < 4; k++) {
    int N = 3, V = Vs[k];
    float *x = rand_buf(&r, (size_t)N * V, -5, 5);
    for (int i = 0; i < V; i++) x[V + i] += 1000.0f; /* row 1: exp(x) overflows without max */
    float *p = poisoned((size_t)N * V);
    cpu()->softmax_forward(p, x, N, V);
    double *want = dbuf((size_t)N * V);
    for (int n = 0; n < N; n++) ref_softmax(want + n * V, x + n * V, V);
    expect_close("softmax", p, want, (size_t)N * V, 1e-7, 1e-5);
  }
}

/* ------------------------------------------------------------------------------------------ */
/* attention */

/* qkv [B,T,3C] -> out [B,T,C], att [B,NH,T,T] (0 above the diagonal), in double */
static void ref_attention(double *out, double *att, const double *qkv, int B, int T, int C,
                          int NH) {
  int hs = C / NH;
  double scale = 1 / sqrt((double)hs);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        const double *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
        double *a = att + (((size_t)b * NH + h) * T + t) * T, mx = -INFINITY, sum = 0;
        for (int j = 0; j < T; j++) {
          const double *k = qkv + ((size_t)b * T + j) * 3 * C + C + h * hs;
          double s = 0;
          for (int i = 0; i < hs; i++) s += q[i] * k[i];
          a[j] = s * scale;
          if (j <= t) mx = fmax(mx, a[j]);
        }
        for (int j = 0; j < T; j++) sum += (a[j] = j <= t ? exp(a[j] - mx) : 0);
        for (int j = 0; j < T; j++) a[j] /= sum;
        double *o = out + ((size_t)b * T + t) * C + h * hs;
        for (int i = 0; i < hs; i++) {
          double s = 0;
          for (int j = 0; j <= t; j++)
            s += a[j] * qkv[((size_t)b * T + j) * 3 * C + 2 * C + h * hs + i];
          o[i] = s;
        }
      }
}

typedef struct {
  double *qkv, *dout, *out, *att;
  int B, T, C, NH;
} att_ctx;
static double att_loss(void *p) {
  att_ctx *a = p;
  ref_attention(a->out, a->att, a->qkv, a->B, a->T, a->C, a->NH);
  return dot(a->out, a->dout, (size_t)a->B * a->T * a->C);
}

static void check_attention(rng *r, int B, int T, int C, int NH, int finite_diff) {
  size_t n3 = (size_t)B * T * 3 * C, n = (size_t)B * T * C, na = (size_t)B * NH * T * T;
  float *qkv = rand_buf(r, n3, -1, 1), *dout = rand_buf(r, n, -1, 1);
  float *out = poisoned(n), *att = poisoned(na), *dqkv = poisoned(n3), *scratch = poisoned(kernels_attention_scratch_floats(T));
  cpu()->attention_forward(out, att, qkv, B, T, C, NH);
  cpu()->attention_backward(dqkv, scratch, dout, qkv, att, B, T, C, NH);

  att_ctx a = {to_double(qkv, n3), to_double(dout, n), dbuf(n), dbuf(na), B, T, C, NH};
  att_loss(&a);
  char what[80];
  snprintf(what, sizeof what, "attention out B=%d T=%d C=%d NH=%d", B, T, C, NH);
  expect_close(what, out, a.out, n, 1e-6, 1e-5);
  expect_close("attention probabilities", att, a.att, na, 1e-7, 1e-5);
  for (size_t i = 0; i < na; i++) /* the masked half is exactly zero */
    if ((i % T) > (i / T) % T) cr_assert_eq(att[i], 0.0f, "att[%zu] above the diagonal", i);

  if (finite_diff) {
    double *g = fd_grad(a.qkv, n3, att_loss, &a);
    snprintf(what, sizeof what, "attention dqkv vs finite differences T=%d C=%d NH=%d", T, C, NH);
    expect_close(what, dqkv, g, n3, 1e-5, 1e-4);
  } else { /* large shapes: finite differences would be slow; the gradient must still be finite */
    cr_assert_eq(cpu()->nonfinite(dqkv, n3), 0, "attention dqkv has unwritten elements");
  }
}

Test(ops, attention_forward_and_gradients) {
  rng r = {9};
  static const int shapes[][2] = {{6, 2}, {51, 3}, {8, 1}}; /* C, NH: hs = 3, 17, 8 */
  for (int i = 0; i < NODD; i++)
    for (int s = 0; s < 3; s++) check_attention(&r, 2, odd[i], shapes[s][0], shapes[s][1], 1);
  check_attention(&r, 1, 70, 8, 2, 1);   /* more rows than one block of scores (64) */
  check_attention(&r, 2, 131, 48, 4, 0); /* several blocks, a ragged last one */
}

/* A NaN in the last token (q, k and v, and its output gradient) must not reach earlier tokens'
 * outputs, nor their queries' gradients (dq_t reads scores and keys of positions <= t only;
 * keys and values of earlier tokens do get the later token's gradient, legitimately): the mask
 * promises that position t sees only positions <= t. T spans two blocks of score rows. */
Test(ops, attention_is_causal_even_for_nan) {
  rng r = {10};
  enum { B = 1, T = 77, C = 16, NH = 2 };
  float *qkv = rand_buf(&r, B * T * 3 * C, -1, 1), *dout = rand_buf(&r, B * T * C, -1, 1);
  float *out[2], *dqkv[2], *sc = poisoned(kernels_attention_scratch_floats(T));
  for (int k = 0; k < 2; k++) {
    float *att = poisoned(B * NH * T * T);
    out[k] = poisoned(B * T * C), dqkv[k] = poisoned(B * T * 3 * C);
    if (k)
      for (int i = 0; i < 3 * C; i++) qkv[(T - 1) * 3 * C + i] = NAN, dout[(T - 1) * C + i % C] = NAN;
    cpu()->attention_forward(out[k], att, qkv, B, T, C, NH);
    cpu()->attention_backward(dqkv[k], sc, dout, qkv, att, B, T, C, NH);
  }
  expect_same_bits("attention rows before the poisoned token", out[0], out[1], sizeof(float) * (T - 1) * C);
  for (int t = 0; t < T - 1; t++)
    expect_same_bits("attention dq rows before the poisoned token", dqkv[0] + (size_t)t * 3 * C,
                     dqkv[1] + (size_t)t * 3 * C, sizeof(float) * C);
}

Test(ops, attention_deterministic) {
  rng r = {11};
  enum { B = 2, T = 45, C = 24, NH = 3 };
  float *qkv = rand_buf(&r, B * T * 3 * C, -1, 1), *dout = rand_buf(&r, B * T * C, -1, 1);
  float *o[2], *a[2], *d[2];
  for (int k = 0; k < 2; k++) {
    /* different garbage in the outputs and scratch each time */
    o[k] = rand_buf(&r, B * T * C, -9, 9), a[k] = rand_buf(&r, B * NH * T * T, -9, 9);
    d[k] = rand_buf(&r, B * T * 3 * C, -9, 9);
    float *scratch = rand_buf(&r, kernels_attention_scratch_floats(T), -9, 9);
    cpu()->attention_forward(o[k], a[k], qkv, B, T, C, NH);
    cpu()->attention_backward(d[k], scratch, dout, qkv, a[k], B, T, C, NH);
  }
  expect_same_bits("attention out", o[0], o[1], sizeof(float) * B * T * C);
  expect_same_bits("attention att", a[0], a[1], sizeof(float) * B * NH * T * T);
  expect_same_bits("attention dqkv", d[0], d[1], sizeof(float) * B * T * 3 * C);
}

/* ------------------------------------------------------------------------------------------ */
/* embedding */

typedef struct {
  double *wte, *wpe, *dout;
  const int32_t *tok;
  int B, T, C;
} emb_ctx;
static double emb_loss(void *p) {
  emb_ctx *e = p;
  double L = 0;
  for (int bt = 0; bt < e->B * e->T; bt++)
    for (int c = 0; c < e->C; c++)
      L += e->dout[bt * e->C + c] *
           (e->wte[e->tok[bt] * e->C + c] + e->wpe[(bt % e->T) * e->C + c]);
  return L;
}

Test(ops, embedding_forward_and_gradients) {
  rng r = {12};
  for (int i = 0; i < NODD; i++) {
    int B = 2, T = odd[i], C = odd[(i + 1) % NODD], V = 5, BT = B * T;
    int32_t *tok = alloc(sizeof(int32_t) * BT);
    for (int k = 0; k < BT; k++) tok[k] = (int32_t)(next_u64(&r) % V);
    tok[0] = V - 1, tok[BT - 1] = tok[0]; /* the last row, and a repeated token */
    float *wte = rand_buf(&r, (size_t)V * C, -1, 1), *wpe = rand_buf(&r, (size_t)T * C, -1, 1);
    float *dout = rand_buf(&r, (size_t)BT * C, -1, 1), *out = poisoned((size_t)BT * C);
    float *dwte = rand_buf(&r, (size_t)V * C, -1, 1), *dwpe = rand_buf(&r, (size_t)T * C, -1, 1);
    double *dwte0 = to_double(dwte, (size_t)V * C), *dwpe0 = to_double(dwpe, (size_t)T * C);
    cpu()->embedding_forward(out, tok, wte, wpe, B, T, C);
    cpu()->embedding_backward(dwte, dwpe, dout, tok, B, T, C);
    for (int bt = 0; bt < BT; bt++)
      for (int c = 0; c < C; c++) /* one fp32 addition: exact match */
        cr_assert_eq(out[bt * C + c], wte[tok[bt] * C + c] + wpe[(bt % T) * C + c]);
    emb_ctx e = {to_double(wte, (size_t)V * C), to_double(wpe, (size_t)T * C),
                 to_double(dout, (size_t)BT * C), tok, B, T, C};
    double *gte = fd_grad(e.wte, (size_t)V * C, emb_loss, &e);
    double *gpe = fd_grad(e.wpe, (size_t)T * C, emb_loss, &e);
    for (int k = 0; k < V * C; k++) gte[k] += dwte0[k];
    for (int k = 0; k < T * C; k++) gpe[k] += dwpe0[k];
    expect_close("embedding dwte (+=) vs finite differences", dwte, gte, (size_t)V * C, 1e-5, 1e-5);
    expect_close("embedding dwpe (+=) vs finite differences", dwpe, gpe, (size_t)T * C, 1e-5, 1e-5);
  }
}

Test(ops, embedding_backward_deterministic) {
  rng r = {13};
  enum { B = 4, T = 33, C = 16, V = 3 }; /* few tokens: many repeats */
  int32_t tok[B * T];
  for (int k = 0; k < B * T; k++) tok[k] = (int32_t)(next_u64(&r) % V);
  float *dout = rand_buf(&r, B * T * C, -1, 1);
  float *g[2][2];
  for (int k = 0; k < 2; k++) {
    g[k][0] = fbuf(V * C), g[k][1] = fbuf(T * C);
    cpu()->zero(g[k][0], V * C);
    cpu()->zero(g[k][1], T * C);
    cpu()->embedding_backward(g[k][0], g[k][1], dout, tok, B, T, C);
  }
  expect_same_bits("embedding dwte", g[0][0], g[1][0], sizeof(float) * V * C);
  expect_same_bits("embedding dwpe", g[0][1], g[1][1], sizeof(float) * T * C);
}

/* ------------------------------------------------------------------------------------------ */
/* softmax + cross-entropy */

typedef struct {
  double *x;
  const int32_t *targets;
  int N, V;
  double scale;
} xent_ctx;
static double xent_loss(void *p) { /* scale * sum of -log softmax(x)[target], in double */
  xent_ctx *e = p;
  double L = 0;
  for (int n = 0; n < e->N; n++) {
    const double *x = e->x + (size_t)n * e->V;
    double mx = x[0], sum = 0;
    for (int i = 1; i < e->V; i++) mx = fmax(mx, x[i]);
    for (int i = 0; i < e->V; i++) sum += exp(x[i] - mx);
    L += log(sum) + mx - x[e->targets[n]];
  }
  return e->scale * L;
}

static void check_xent(rng *r, int N, int V, float spread) {
  size_t NV = (size_t)N * V;
  float *x = rand_buf(r, NV, -spread, spread);
  int32_t *targets = alloc(sizeof(int32_t) * N);
  for (int n = 0; n < N; n++) targets[n] = (int32_t)(next_u64(r) % V);
  targets[0] = 0, targets[N - 1] = V - 1; /* both ends of the range */
  float *losses = poisoned(N), *probs = poisoned(NV), *dx = poisoned(NV);
  float scale = 1.0f / N;
  cpu()->xent_forward(losses, probs, x, targets, N, V, V, 0);
  cpu()->xent_backward(dx, probs, targets, scale, N, V, V, 0);

  xent_ctx e = {to_double(x, NV), targets, N, V, 1.0};
  double *wl = dbuf(N), *wp = dbuf(NV), *wd = dbuf(NV);
  for (int n = 0; n < N; n++) {
    xent_ctx one = {e.x + (size_t)n * V, targets + n, 1, V, 1.0};
    wl[n] = xent_loss(&one);
    ref_softmax(wp + (size_t)n * V, x + (size_t)n * V, V);
    for (int i = 0; i < V; i++) wd[n * V + i] = (wp[n * V + i] - (i == targets[n])) * scale;
  }
  char what[64];
  snprintf(what, sizeof what, "xent losses N=%d V=%d", N, V);
  expect_close(what, losses, wl, N, 1e-5, 1e-5);
  expect_close("xent probs", probs, wp, NV, 1e-7, 1e-5);
  expect_close("xent dlogits", dx, wd, NV, 1e-7, 1e-5);
  e.scale = scale; /* the mean loss, whose gradient dlogits is */
  expect_close("xent dlogits vs finite differences", dx, fd_grad(e.x, NV, xent_loss, &e), NV, 1e-6,
               1e-4);
  /* probs may overwrite logits, then dlogits probs: the loss layer's one buffer, same bits */
  float *one = alloc(sizeof(float) * NV), *losses2 = poisoned(N);
  memcpy(one, x, sizeof(float) * NV);
  cpu()->xent_forward(losses2, one, one, targets, N, V, V, 0);
  expect_same_bits("xent_forward in place: losses", losses2, losses, sizeof(float) * N);
  expect_same_bits("xent_forward in place: probs", one, probs, sizeof(float) * NV);
  cpu()->xent_backward(one, one, targets, scale, N, V, V, 0);
  expect_same_bits("xent_backward in place", one, dx, sizeof(float) * NV);
  /* round 1 / 2: the same bits as rounding the logits first, and the gradient after */
  for (int kind = 1; kind <= 2; kind++) {
    float *xr = alloc(sizeof(float) * NV), *lr = poisoned(N), *pr = poisoned(NV), *dr = poisoned(NV);
    float *lk = poisoned(N), *pk = poisoned(NV), *dk = poisoned(NV);
    memcpy(xr, x, sizeof(float) * NV);
    if (kind == 1) cpu()->round_bf16(xr, NV);
    else cpu()->round_fp16(xr, NV);
    cpu()->xent_forward(lr, pr, xr, targets, N, V, V, 0);
    cpu()->xent_backward(dr, pr, targets, scale, N, V, V, 0);
    if (kind == 1) cpu()->round_bf16(dr, NV);
    else cpu()->round_fp16(dr, NV);
    cpu()->xent_forward(lk, pk, x, targets, N, V, V, kind);
    expect_same_bits("xent_forward rounding as read: losses", lk, lr, sizeof(float) * N);
    expect_same_bits("xent_forward rounding as read: probs", pk, pr, sizeof(float) * NV);
    cpu()->xent_backward(dk, pk, targets, scale, N, V, V, kind);
    expect_same_bits("xent_backward rounding as written", dk, dr, sizeof(float) * NV);
    memcpy(xr, x, sizeof(float) * NV); /* in place, as the layer runs it */
    cpu()->xent_forward(lk, xr, xr, targets, N, V, V, kind);
    cpu()->xent_backward(xr, xr, targets, scale, N, V, V, kind);
    expect_same_bits("xent rounding in place", xr, dr, sizeof(float) * NV);
  }
  /* rows padded to ld = V + 5 (NaN in the padding: never read): the same rows, zeros written in
   * the padding of probs and dlogits */
  size_t ld = (size_t)V + 5;
  float *xp = poisoned((size_t)N * ld), *lp = poisoned(N), *dp = poisoned((size_t)N * ld);
  for (int n = 0; n < N; n++) memcpy(xp + n * ld, x + (size_t)n * V, sizeof(float) * V);
  cpu()->xent_forward(lp, xp, xp, targets, N, V, (int)ld, 0);
  expect_same_bits("xent padded rows: losses", lp, losses, sizeof(float) * N);
  cpu()->xent_backward(dp, xp, targets, scale, N, V, (int)ld, 0);
  for (int n = 0; n < N; n++) {
    expect_same_bits("xent padded rows: probs", xp + n * ld, probs + (size_t)n * V, sizeof(float) * V);
    expect_same_bits("xent padded rows: dlogits", dp + n * ld, dx + (size_t)n * V, sizeof(float) * V);
    for (size_t i = V; i < ld; i++)
      cr_assert(xp[n * ld + i] == 0.0f && dp[n * ld + i] == 0.0f, "xent padded rows: row %d pad %zu not zero", n, i);
  }
}

Test(ops, cross_entropy_forward_and_gradients) {
  rng r = {14};
  for (int i = 0; i < NODD; i++)
    for (int j = 0; j < NODD; j++) check_xent(&r, odd[i], odd[j], 3.0f);
  check_xent(&r, 2, 1000, 3.0f);
  check_xent(&r, 3, 17, 60.0f); /* confident: probabilities near 0 and 1 */
}

Test(ops, cross_entropy_extreme_logits) {
  enum { V = 4 };
  float x[V] = {1000.0f, 0.0f, -1000.0f, 999.0f}, losses[2], probs[2 * V];
  float x2[2 * V];
  memcpy(x2, x, sizeof x), memcpy(x2 + V, x, sizeof x);
  int32_t targets[2] = {0, 2};
  cpu()->xent_forward(losses, probs, x2, targets, 2, V, V, 0);
  double lse = 1000.0 + log(1.0 + exp(-1.0)); /* exp(-1000) vanishes against 1 */
  cr_assert(fabs(losses[0] - (lse - 1000.0)) < 1e-6, "loss %g", losses[0]);
  cr_assert(fabs(losses[1] - (lse + 1000.0)) < 1e-3, "loss %g: finite though p underflows",
            losses[1]);
  cr_assert_eq(cpu()->nonfinite(probs, 2 * V), 0);
}

/* ------------------------------------------------------------------------------------------ */
/* optimizers */

/* Two AdamW steps worked by hand (the values are in the comments) with lr 0.1, betas 0.9 and
 * 0.999, eps 1e-8, weight decay 0.01, from p = 1, m = v = 0. Tolerances: fp32 holds 1 - 0.999
 * to a relative 1.3e-5, so v is checked to 1e-8 (4e-5 relative), p to 3 ulps. */
Test(ops, adamw_hand_computed) {
  float p = 1.0f, m = 0.0f, v = 0.0f, g = 0.25f;
  /* step 1, g = 0.25 * grad_scale 2 = 0.5: m = 0.05, v = 0.00025, mhat = 0.5, vhat = 0.25,
   * p = 1 - 0.1 * (0.5 / (0.5 + 1e-8) + 0.01 * 1) = 0.899000002 */
  cpu()->adamw(&p, &g, &m, &v, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, 2.0f);
  cr_assert_float_eq(m, 0.05f, 1e-7);
  cr_assert_float_eq(v, 0.00025f, 1e-8);
  cr_assert_float_eq(p, 0.899000002f, 2e-7);
  /* step 2, g = -0.25: m = 0.045 - 0.025 = 0.02, v = 0.00024975 + 0.0000625 = 0.00031225,
   * mhat = 0.02 / 0.19 = 0.1052631579, vhat = 0.00031225 / 0.001999 = 0.1562031016,
   * p = 0.899000002 - 0.1 * (0.1052631579 / 0.3952253808 + 0.00899000002) = 0.8714672987 */
  g = -0.25f;
  cpu()->adamw(&p, &g, &m, &v, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, 2, 1.0f);
  cr_assert_float_eq(m, 0.02f, 1e-7);
  cr_assert_float_eq(v, 0.00031225f, 1e-8);
  cr_assert_float_eq(p, 0.8714672987f, 3e-7);
}

Test(ops, adamw_matches_reference_on_a_range) {
  rng r = {15};
  enum { N = 17, STEPS = 5 };
  float *p = rand_buf(&r, N, -1, 1), *m = fbuf(N), *v = fbuf(N);
  cpu()->zero(m, N), cpu()->zero(v, N);
  double *wp = to_double(p, N), wm[N] = {0}, wv[N] = {0};
  for (int t = 1; t <= STEPS; t++) {
    float *g = rand_buf(&r, N, -1, 1);
    cpu()->adamw(p, g, m, v, N, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, t, 0.5f);
    for (int i = 0; i < N; i++) {
      double gi = 0.5 * g[i];
      wm[i] = 0.9 * wm[i] + 0.1 * gi;
      wv[i] = 0.95 * wv[i] + 0.05 * gi * gi;
      double mh = wm[i] / (1 - pow(0.9, t)), vh = wv[i] / (1 - pow(0.95, t));
      wp[i] -= 1e-2 * (mh / (sqrt(vh) + 1e-8) + 0.1 * wp[i]);
    }
  }
  expect_close("adamw p", p, wp, N, 1e-6, 1e-5);
  expect_close("adamw m", m, wm, N, 1e-7, 1e-5);
  expect_close("adamw v", v, wv, N, 1e-8, 1e-5);
}

/* adamw_to (post-validation's update into a second set of arrays) gives adamw's bits, on a range
 * long enough for every thread and vector width, and leaves its inputs as they were. */
Test(ops, adamw_to_equals_adamw_bit_for_bit) {
  rng r = {16};
  enum { N = 100003 };
  float *p = rand_buf(&r, N, -1, 1), *m = rand_buf(&r, N, -0.1f, 0.1f), *v = rand_buf(&r, N, 0, 0.01f);
  float *p2 = fbuf(N), *m2 = fbuf(N), *v2 = fbuf(N), *po = fbuf(N), *mo = fbuf(N), *vo = fbuf(N);
  float *pk = fbuf(N), *mk = fbuf(N), *vk = fbuf(N); /* the inputs as they were, to compare with after */
  size_t bytes = sizeof(float) * N;
  for (int t = 1; t <= 3; t++) {
    float *g = rand_buf(&r, N, -1, 1), *gk = fbuf(N);
    memcpy(p2, p, bytes), memcpy(m2, m, bytes), memcpy(v2, v, bytes);
    memcpy(pk, p, bytes), memcpy(mk, m, bytes), memcpy(vk, v, bytes), memcpy(gk, g, bytes);
    cpu()->adamw_to(po, mo, vo, p2, g, m2, v2, N, 1e-3f, 0.9f, 0.95f, 1e-8f, t == 2 ? 0.0f : 0.1f, t, 0.5f);
    cr_assert(memcmp(p2, pk, bytes) == 0 && memcmp(m2, mk, bytes) == 0 && memcmp(v2, vk, bytes) == 0 &&
                  memcmp(g, gk, bytes) == 0, "step %d: adamw_to wrote into its inputs", t);
    cpu()->adamw(p, g, m, v, N, 1e-3f, 0.9f, 0.95f, 1e-8f, t == 2 ? 0.0f : 0.1f, t, 0.5f);
    cr_assert(memcmp(po, p, bytes) == 0 && memcmp(mo, m, bytes) == 0 && memcmp(vo, v, bytes) == 0,
              "step %d: adamw_to differs from adamw", t);
    cr_assert(memcmp(po, pk, bytes) != 0, "step %d: the update changed nothing (the comparison would prove nothing)", t);
  }
}

/* SGD by hand: lr 0.1, weight decay 0.1, from p = 1; gradients 0.5 then -0.25. */
Test(ops, sgd_hand_computed) {
  float p = 1.0f, mom = 0.0f, g = 0.5f;
  /* momentum 0.9: step = 0.5 + 0.1 = 0.6, mom = 0.6, p = 0.94; then step = -0.25 + 0.094 =
   * -0.156, mom = 0.54 - 0.156 = 0.384, p = 0.94 - 0.0384 = 0.9016 */
  cpu()->sgd(&p, &g, &mom, 1, 0.1f, 0.9f, 0.1f, 1.0f);
  cr_assert_float_eq(mom, 0.6f, 1e-7);
  cr_assert_float_eq(p, 0.94f, 1e-7);
  g = -0.125f; /* times grad_scale 2 */
  cpu()->sgd(&p, &g, &mom, 1, 0.1f, 0.9f, 0.1f, 2.0f);
  cr_assert_float_eq(mom, 0.384f, 1e-7);
  cr_assert_float_eq(p, 0.9016f, 1e-7);
  /* no momentum buffer: p = 0.94, then 0.94 - 0.1 * (-0.156) = 0.9556 */
  p = 1.0f, g = 0.5f;
  cpu()->sgd(&p, &g, NULL, 1, 0.1f, 0.0f, 0.1f, 1.0f);
  cr_assert_float_eq(p, 0.94f, 1e-7);
  g = -0.25f;
  cpu()->sgd(&p, &g, NULL, 1, 0.1f, 0.0f, 0.1f, 1.0f);
  cr_assert_float_eq(p, 0.9556f, 1e-7);
}

/* ------------------------------------------------------------------------------------------ */
/* vector utilities */

Test(ops, vector_utilities) {
  rng r = {16};
  enum { N = 17 };
  float *x = rand_buf(&r, N, -1, 1), *y = rand_buf(&r, N, -1, 1);
  double want[N];
  for (int i = 0; i < N; i++) want[i] = y[i] + (double)(-0.5f * x[i]);
  cpu()->axpy(y, -0.5f, x, N);
  expect_close("axpy", y, want, N, 0, 1e-7);
  for (int i = 0; i < N; i++) want[i] = 3.0 * y[i];
  cpu()->scale(y, 3.0f, N);
  expect_close("scale", y, want, N, 0, 1e-7);
  cpu()->fill(y, 2.5f, N);
  for (int i = 0; i < N; i++) cr_assert_eq(y[i], 2.5f);
  float *z = poisoned(N);
  cpu()->zero(z, N);
  for (int i = 0; i < N; i++) cr_assert(z[i] == 0.0f && !signbit(z[i]));
  float *c = poisoned(N);
  cpu()->copy(c, x, N);
  expect_same_bits("copy", c, x, sizeof(float) * N);
  cpu()->copy(c + 1, c, N - 1); /* overlapping: a shift by one */
  expect_same_bits("overlapping copy", c + 1, x, sizeof(float) * (N - 1));
}

Test(ops, sumsq_in_double) {
  enum { N = 1000 };
  float x[N];
  for (int i = 0; i < N; i++) x[i] = (float)(i + 1);
  cr_assert_eq(cpu()->sumsq(x, N), (double)N * (N + 1) * (2 * N + 1) / 6, "exact for integers");
  /* 1e8^2 + 1000 ones: an fp32 sum would lose every 1 */
  x[0] = 1e4f;
  for (int i = 1; i < N; i++) x[i] = 1.0f;
  cr_assert_eq(cpu()->sumsq(x, N), 1e8 + (N - 1));
  x[0] = 4097.0f; /* 4097^2 = 16785409 needs 25 bits: an fp32 product would round it */
  cr_assert_eq(cpu()->sumsq(x, 1), 16785409.0);
  cr_assert_eq(cpu()->sumsq(x, 0), 0.0);
}

Test(ops, nonfinite_count) {
  float x[7] = {0.0f, NAN, INFINITY, -INFINITY, FLT_MAX, -FLT_MIN, 0x1p-149f};
  cr_assert_eq(cpu()->nonfinite(x, 7), 3);
  cr_assert_eq(cpu()->nonfinite(x, 1), 0);
  cr_assert_eq(cpu()->nonfinite(x + 4, 3), 0);
}

/* ------------------------------------------------------------------------------------------ */
/* low precision */

static uint32_t bits(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}
static float from_bits(uint32_t u) {
  float x;
  memcpy(&x, &u, 4);
  return x;
}

/* Independent reference: the nearest number with p significant bits and exponent >= emin
 * (gradual underflow below), ties to even (nearbyint in the default rounding mode); Inf past
 * maxfin. Exact in double for every fp32 input. */
static double ref_round(double x, int p, int emin, double maxfin) {
  if (x == 0 || !isfinite(x)) return x;
  int e;
  frexp(x, &e); /* |x| in [2^(e-1), 2^e) */
  int lead = e - 1 < emin ? emin : e - 1;
  double ulp = ldexp(1.0, lead - (p - 1));
  double y = nearbyint(x / ulp) * ulp;
  return fabs(y) > maxfin ? copysign(INFINITY, x) : y;
}
#define BF16_MAX 0x1.fep127
#define F16_MAX 65504.0

Test(ops, bf16_known_values) {
  static const struct {
    float x;
    uint16_t h;
    int exact; /* x is a bf16 value: converting back gives x */
  } cases[] = {
      {1.0f, 0x3f80, 1},
      {-2.0f, 0xc000, 1},
      {3.0f, 0x4040, 1},
      {0.0f, 0x0000, 1},
      {-0.0f, 0x8000, 1},
      {65504.0f, 0x4780, 0},   /* 0x477fe000: more than half an ulp up, to 65536 */
      {0x1.01p0f, 0x3f80, 0},   /* 1 + 2^-8: a tie, kept part even: down */
      {0x1.03p0f, 0x3f82, 0},   /* 1 + 3 * 2^-8: a tie, kept part odd: up */
      {0x1.0102p0f, 0x3f81, 0}, /* just past the tie: up */
      {FLT_MAX, 0x7f80, 0},     /* rounds past bf16's largest: Inf */
      {INFINITY, 0x7f80, 1},
      {-INFINITY, 0xff80, 1},
      {0x1p-126f, 0x0080, 1},   /* smallest normal */
      {0x1p-133f, 0x0001, 1},   /* smallest bf16 subnormal */
      {0x1p-134f, 0x0000, 0},   /* half of it: a tie, to even (0) */
      {0x1.8p-133f, 0x0002, 0}, /* 1.5 subnormal steps: a tie, to even (2) */
      {0x1p-149f, 0x0000, 0},   /* fp32's smallest subnormal */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint16_t h = kernels_f32_to_bf16(cases[i].x);
    cr_assert_eq(h, cases[i].h, "bf16(%a) = 0x%04x, want 0x%04x", cases[i].x, h, cases[i].h);
    if (cases[i].exact)
      cr_assert_eq(bits(kernels_bf16_to_f32(h)), bits(cases[i].x), "bf16 0x%04x back", h);
  }
  cr_assert_eq(kernels_bf16_to_f32(0x4780), 65536.0f);
  cr_assert_eq(kernels_bf16_to_f32(0x0001), 0x1p-133f);
  cr_assert(isinf(kernels_bf16_to_f32(0xff80)) && kernels_bf16_to_f32(0xff80) < 0);
  /* NaN stays NaN, even one whose payload sits only in the bits bf16 drops */
  uint16_t n1 = kernels_f32_to_bf16(NAN), n2 = kernels_f32_to_bf16(from_bits(0x7f800001u));
  cr_assert(isnan(kernels_bf16_to_f32(n1)) && isnan(kernels_bf16_to_f32(n2)), "0x%x 0x%x", n1, n2);
  cr_assert_eq(kernels_f32_to_bf16(from_bits(0xff800001u)) & 0x8000, 0x8000, "NaN sign kept");
}

Test(ops, f16_known_values) {
  static const struct {
    float x;
    uint16_t h;
  } cases[] = {
      {1.0f, 0x3c00},          {-2.0f, 0xc000},       {0.0f, 0x0000},
      {-0.0f, 0x8000},         {65504.0f, 0x7bff},    /* largest finite */
      {65519.0f, 0x7bff},      /* below the halfway point */
      {65520.0f, 0x7c00},      /* halfway to 65536: to even, which is past the range: Inf */
      {1e6f, 0x7c00},          {INFINITY, 0x7c00},    {-INFINITY, 0xfc00},
      {0x1p-14f, 0x0400},      /* smallest normal */
      {0x1p-24f, 0x0001},      /* smallest subnormal */
      {-0x1p-24f, 0x8001},     {0x1p-25f, 0x0000},    /* half a step: a tie, to even (0) */
      {0x1.000002p-25f, 0x0001}, /* just past half a step */
      {0x1.8p-24f, 0x0002},    /* 1.5 steps: a tie, to even (2) */
      {0x1.ffcp-15f, 0x0400},  /* 1023.5 steps: a tie, up into the smallest normal */
      {0x1p-30f, 0x0000},      {0x1.002p0f, 0x3c00}, /* 1 + 2^-11: a tie, to even */
      {0x1.006p0f, 0x3c02},    /* 1 + 3 * 2^-11: a tie, to even (up) */
      {0.1f, 0x2e66},          {1.0f / 3.0f, 0x3555},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint16_t h = kernels_f32_to_f16(cases[i].x);
    cr_assert_eq(h, cases[i].h, "f16(%a) = 0x%04x, want 0x%04x", cases[i].x, h, cases[i].h);
  }
  cr_assert_eq(kernels_f16_to_f32(0x0001), 0x1p-24f);
  cr_assert_eq(kernels_f16_to_f32(0x03ff), 1023 * 0x1p-24f);
  cr_assert_eq(kernels_f16_to_f32(0x7bff), 65504.0f);
  cr_assert_eq(kernels_f16_to_f32(0x3555), 0.333251953125f);
  cr_assert(isinf(kernels_f16_to_f32(0x7c00)) && kernels_f16_to_f32(0xfc00) < 0);
  cr_assert_eq(bits(kernels_f16_to_f32(0x8000)), 0x80000000u, "-0");
  cr_assert(isnan(kernels_f16_to_f32(kernels_f32_to_f16(NAN))));
  cr_assert(isnan(kernels_f16_to_f32(kernels_f32_to_f16(from_bits(0x7f800001u)))));
  cr_assert(isnan(kernels_f16_to_f32(0x7e00)) && isnan(kernels_f16_to_f32(0x7c01)));
}

/* Every 16-bit pattern converts to fp32 and back to itself (NaNs: to a NaN). */
Test(ops, half_round_trips_all_patterns) {
  for (uint32_t h = 0; h < 65536; h++) {
    float b = kernels_bf16_to_f32((uint16_t)h), f = kernels_f16_to_f32((uint16_t)h);
    if (isnan(b))
      cr_assert(isnan(kernels_bf16_to_f32(kernels_f32_to_bf16(b))), "bf16 0x%04x", h);
    else
      cr_assert_eq(kernels_f32_to_bf16(b), h, "bf16 0x%04x", h);
    if (isnan(f))
      cr_assert(isnan(kernels_f16_to_f32(kernels_f32_to_f16(f))), "f16 0x%04x", h);
    else
      cr_assert_eq(kernels_f32_to_f16(f), h, "f16 0x%04x", h);
  }
}

/* Random bit patterns (all of fp32) and random values near fp16's range, against ref_round. */
Test(ops, half_rounding_matches_reference) {
  rng r = {17};
  for (int i = 0; i < 400000; i++) {
    uint32_t u = (uint32_t)next_u64(&r);
    if (i & 1) /* exponents 2^-30 .. 2^17: fp16's subnormals, normals and overflow */
      u = (u & 0x807fffffu) | ((uint32_t)(97 + next_u64(&r) % 48) << 23);
    float x = from_bits(u);
    float b = kernels_bf16_to_f32(kernels_f32_to_bf16(x));
    float f = kernels_f16_to_f32(kernels_f32_to_f16(x));
    if (isnan(x)) {
      cr_assert(isnan(b) && isnan(f), "NaN 0x%08x", u);
      continue;
    }
    float wb = (float)ref_round(x, 8, -126, BF16_MAX), wf = (float)ref_round(x, 11, -14, F16_MAX);
    cr_assert_eq(bits(b), bits(wb), "bf16 of %a (0x%08x): got %a, want %a", x, u, b, wb);
    cr_assert_eq(bits(f), bits(wf), "f16 of %a (0x%08x): got %a, want %a", x, u, f, wf);
  }
}

Test(ops, cast_buffers_and_round_in_place) {
  rng r = {18};
  enum { N = 1003 };
  float *x = rand_buf(&r, N, -70000, 70000);
  x[0] = NAN, x[1] = 65520.0f, x[2] = 1e-8f, x[3] = -0.0f, x[4] = 0x1p-24f;
  uint16_t *hb = alloc(2 * N), *hf = alloc(2 * N);
  float *b = poisoned(N), *f = poisoned(N), *rb = dup(x, N), *rf = dup(x, N);
  cpu()->cast_f32_to_bf16(hb, x, N);
  cpu()->cast_f32_to_f16(hf, x, N);
  cpu()->cast_bf16_to_f32(b, hb, N);
  cpu()->cast_f16_to_f32(f, hf, N);
  cpu()->round_bf16(rb, N);
  cpu()->round_fp16(rf, N);
  for (int i = 0; i < N; i++) {
    cr_assert_eq(hb[i], kernels_f32_to_bf16(x[i]), "cast_f32_to_bf16[%d]", i);
    cr_assert_eq(hf[i], kernels_f32_to_f16(x[i]), "cast_f32_to_f16[%d]", i);
    cr_assert_eq(bits(b[i]), bits(kernels_bf16_to_f32(hb[i])), "cast_bf16_to_f32[%d]", i);
    cr_assert_eq(bits(f[i]), bits(kernels_f16_to_f32(hf[i])), "cast_f16_to_f32[%d]", i);
    cr_assert_eq(bits(rb[i]), bits(b[i]), "round_bf16[%d]", i);
    cr_assert_eq(bits(rf[i]), bits(f[i]), "round_fp16[%d]", i);
  }
  cr_assert(isnan(rb[0]) && isnan(rf[0]));
  cr_assert(isinf(rf[1]), "65520 is past fp16's range");
  cr_assert_eq(rb[1], 65536.0f);
  cr_assert_eq(rf[2], 0.0f, "1e-8 underflows fp16");
  cr_assert_eq(bits(rf[3]), 0x80000000u, "-0 stays -0");
  cr_assert_eq(rf[4], 0x1p-24f);
}

/* The memory entries on the CPU: alloc is zeroed host memory, the copies are memcpy. */
Test(ops, memory_entries) {
  const kernels_ops *t = cpu();
  enum { N = 1001 };
  float *d = t->alloc(N * sizeof(float));
  cr_assert_not_null(d);
  for (int i = 0; i < N; i++) cr_assert_eq(bits(d[i]), 0u, "alloc is zeroed at %d", i);
  float *src = fbuf(N), *back = fbuf(N);
  for (int i = 0; i < N; i++) src[i] = (float)i - 0.5f, back[i] = NAN;
  t->to_device(d, src, N * sizeof(float));
  t->sync();
  t->to_host(back, d, N * sizeof(float));
  cr_assert_eq(memcmp(back, src, N * sizeof(float)), 0);
  t->to_device(d, NULL, 0); /* empty copies touch nothing */
  t->to_host(NULL, d, 0);
  t->free(d);
  t->free(NULL);
  t->free(t->alloc(0));
}
