/* A backend's op table against the CPU table, op by op (ggml's test-backend-ops style).
 *
 * The table under test is BRIGADE_TEST_BACKEND ("cuda" when unset; make test-gpu sets it to
 * cuda). A file that includes this one may fix it instead by defining OPS_HARNESS_BACKEND
 * (and OPS_HARNESS_SUITE, the suite name) first: tests/gpu/test_ops_fakedev.c runs the whole
 * harness against "fakedev" (the CPU kernels behind memory the host cannot touch), so every
 * `make test` exercises the harness itself (poisoning, to_host, tolerances) without a GPU.
 * Below, "gpu" means the table under test.
 *
 * How the checks work:
 * - Inputs are uniform random from a fixed seed, the same on both sides: the CPU table runs on
 *   host buffers, the table under test on device copies (alloc + to_device), and the results
 *   come back with to_host. Sizes include 1, odd sizes and rows longer than a block.
 * - Outputs an op overwrites ("=") are poisoned with NaN on the device first, so an element the
 *   kernel never writes fails. Outputs an op accumulates into ("+=") start from the same random
 *   values on both sides.
 * - Results are compared by normalised MSE, sum (cpu - gpu)^2 / sum cpu^2, with NaNs required
 *   at the same places. Tolerances (fp32 arithmetic; bf16 matmuls are checked on inputs bf16
 *   holds exactly, so they are fp32 sums too; bf16/fp16 casts and roundings bit for bit):
 *     TOL_EXACT  0      ops that are one IEEE operation per element, or sums in the CPU's order
 *                       (bias_add, relu, embeddings, xent_backward, fill/zero/copy/scale, casts)
 *     TOL_ELEM   1e-12  one FMA contraction per element (axpy, sgd)
 *     TOL_MATH   1e-10  CUDA's expf/tanhf (within 2 ulp of glibc's), and sums of up to a few
 *                       thousand terms in another order (gelu, layernorm, softmax,
 *                       cross-entropy, adamw, bias and LayerNorm weight gradients)
 *     TOL_GEMM   1e-8   fp32 products with K up to 300 and attention built on such sums; TF32
 *                       (BRIGADE_CUDA_TF32=1) is about 1e-6 and fails here on purpose
 *     TOL_BF16   1e-4   attention under bf16 mixed precision (probabilities and dS rounded to
 *                       bf16 inside the products: a CPU emulation of the fused kernels' roundings
 *                       gave 0.7-1.1e-6 for out and 2.8e-6 for dqkv at head size 64, T 65..1024)
 *   sumsq (double sums of up to 3M squares, in another order) is compared relatively at 1e-11,
 *   nonfinite exactly. The whole tiny GPT (whole_model_loss_and_gradients): every layer's weight
 *   gradients at TOL_MODEL 1e-7, the summed loss at 1e-6 relative.
 * - Determinism: the ops that reduce (GEMM, column sums, attention, embedding backward,
 *   sumsq) give the same bits twice.
 *
 * For "cuda" without a usable GPU (no CUDA build, no driver, no device) every test skips and
 * the runner prints one line saying why; with BRIGADE_REQUIRE_GPU=1 (make test-gpu) they fail
 * instead. Any other backend ("fakedev", "cpu") is always there: failing to get it is a
 * failure. The probe runs in a child process: CUDA does not survive fork, and Criterion forks
 * every test from the runner. */
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/error.h"
#include "core/config.h"
#include "kernels/ops.h"
#include "layers/layers.h"
#include "tests/common/ops_table.h"
#include "tests/common/splitmix.h"

#define TOL_EXACT 0.0
#define TOL_ELEM 1e-12
#define TOL_MATH 1e-10
#define TOL_GEMM 1e-8

#ifndef OPS_HARNESS_SUITE
#define OPS_HARNESS_SUITE gpu
#endif

/* the name of the table under test */
static const char *backend(void) {
#ifdef OPS_HARNESS_BACKEND
  return OPS_HARNESS_BACKEND;
#else
  const char *e = getenv("BRIGADE_TEST_BACKEND");
  return e && e[0] ? e : "cuda";
#endif
}

/* whether an unusable table fails the tests rather than skipping them */
static int require_backend(void) {
  const char *e = getenv("BRIGADE_REQUIRE_GPU");
  return (e && strcmp(e, "1") == 0) || strcmp(backend(), "cuda") != 0;
}

/* ------------------------------------------------------------------------------------------ */
/* the one skip line, from the runner, probing in a child */

ReportHook(PRE_ALL)(struct criterion_test_set *set) {
  (void)set;
  int fd[2];
  if (pipe(fd) != 0) return;
  pid_t pid = fork();
  if (pid < 0) return;
  if (pid == 0) {
    close(fd[0]);
    const kernels_ops *t = NULL;
    int rc = kernels_get_ops(backend(), &t);
    if (rc != CORE_OK) {
      const char *m = core_error_msg();
      ssize_t w = write(fd[1], m, strlen(m));
      (void)w;
    }
    _exit(rc == CORE_OK ? 0 : 1);
  }
  close(fd[1]);
  char msg[512];
  size_t len = 0;
  ssize_t r;
  while (len < sizeof msg - 1 && (r = read(fd[0], msg + len, sizeof msg - 1 - len)) > 0)
    len += (size_t)r;
  msg[len] = 0;
  close(fd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
  if (require_backend())
    fprintf(stderr, "[----] %s: backend \"%s\" required but unusable: %s\n",
            program_invocation_short_name, backend(), msg[0] ? msg : "probe failed");
  else
    fprintf(stderr, "[----] %s: backend \"%s\" tests skipped: %s\n", program_invocation_short_name,
            backend(), msg[0] ? msg : "probe failed");
}

/* ------------------------------------------------------------------------------------------ */
/* buffers: host ones from malloc, device ones from the table under test; all freed by the fini */

static const kernels_ops *G; /* the table under test */
static const kernels_ops *H; /* cpu */

enum { POOL_MAX = 4096 };
static void *hpool[POOL_MAX], *dpool[POOL_MAX];
static int hn, dn;

static void free_pools(void) {
  while (hn > 0)
    free(hpool[--hn]);
  while (dn > 0)
    G->free(dpool[--dn]);
}

TestSuite(OPS_HARNESS_SUITE, .fini = free_pools);

/* Every test starts here: the table under test, or a skip (cuda without a usable GPU; a
 * failure under BRIGADE_REQUIRE_GPU=1 and for any other backend). */
static void need_backend(void) {
  const kernels_ops *t = NULL;
  H = kernels_cpu_ops();
  if (kernels_get_ops(backend(), &t) != CORE_OK) {
    if (require_backend())
      cr_assert_fail("backend \"%s\" is required but unusable: %s", backend(), core_error_msg());
    cr_skip_test("no usable %s backend: %s", backend(), core_error_msg());
  }
  G = t;
}

static void *halloc(size_t bytes) {
  cr_assert_lt(hn, POOL_MAX, "host pool full");
  void *p = malloc(bytes ? bytes : 1);
  cr_assert_not_null(p);
  return hpool[hn++] = p;
}
static float *fbuf(size_t n) { return halloc(n * sizeof(float)); }

/* a device copy of `bytes` host bytes */
static void *dev(const void *h, size_t bytes) {
  cr_assert_lt(dn, POOL_MAX, "device pool full");
  void *p = G->alloc(bytes);
  cr_assert(p || !bytes, "%s alloc(%zu) failed", G->name, bytes);
  if (bytes) G->to_device(p, h, bytes);
  return dpool[dn++] = p;
}
static float *devf(const float *h, size_t n) { return dev(h, n * sizeof(float)); }
static float *dev_poisoned(size_t n) {
  float *h = fbuf(n);
  for (size_t i = 0; i < n; i++)
    h[i] = NAN;
  return devf(h, n);
}
/* a device copy of n host floats starting `shift` floats past a 16-byte aligned allocation,
 * NaNs around it */
static float *devf_shifted(const float *h, size_t n, int shift) {
  float *base = dev_poisoned(n + 4);
  if (n) G->to_device(base + shift, h, n * sizeof(float));
  return base + shift;
}

static void *back(const void *d, size_t bytes) {
  void *h = halloc(bytes);
  if (bytes) G->to_host(h, d, bytes);
  return h;
}
static float *backf(const float *d, size_t n) { return back(d, n * sizeof(float)); }

static float *rand_buf(rng *r, size_t n, float lo, float hi) {
  float *x = fbuf(n);
  for (size_t i = 0; i < n; i++)
    x[i] = uniform(r, lo, hi);
  return x;
}
static float *fdup(const float *x, size_t n) {
  float *y = fbuf(n);
  memcpy(y, x, n * sizeof(float));
  return y;
}
static int32_t *rand_tokens(rng *r, size_t n, int V) {
  int32_t *t = halloc(n * sizeof(int32_t));
  for (size_t i = 0; i < n; i++)
    t[i] = (int32_t)(next_u64(r) % (uint64_t)V);
  return t;
}

/* The CPU's result `want` (host) against the tested table's `got_dev` (device): NaNs at the same
 * places, and normalised MSE <= tol (tol 0: the same bits). */
static void expect_close(const char *what, const float *want, const float *got_dev, size_t n,
                         double tol) {
  const float *got = backf(got_dev, n);
  if (tol == 0.0) {
    for (size_t i = 0; i < n; i++) {
      uint32_t a, b;
      memcpy(&a, &want[i], 4);
      memcpy(&b, &got[i], 4);
      cr_assert(a == b || (isnan(want[i]) && isnan(got[i])),
                "%s[%zu]: %s %.9g (0x%08x), cpu %.9g (0x%08x): expected the same bits", what, i,
                G->name, got[i], b, want[i], a);
    }
    return;
  }
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < n; i++) {
    cr_assert(isnan(want[i]) == isnan(got[i]), "%s[%zu]: %s %g, cpu %g (NaN on one side only)",
              what, i, G->name, got[i], want[i]);
    if (isnan(want[i])) continue;
    double d = (double)want[i] - got[i];
    num += d * d;
    den += (double)want[i] * want[i];
  }
  double nmse = den > 0.0 ? num / den : num;
  cr_assert(nmse <= tol, "%s: normalised MSE %.3g > %.3g (n = %zu)", what, nmse, tol, n);
}

/* (cr_expect: every case that differs is reported, with how many 4-byte words and the first) */
static void expect_same_bits(const char *what, const void *a_dev, const void *b_dev, size_t bytes) {
  const unsigned char *a = back(a_dev, bytes), *b = back(b_dev, bytes);
  size_t diff = 0, first = 0;
  for (size_t i = 0; i + 4 <= bytes; i += 4)
    if (memcmp(a + i, b + i, 4) && !diff++) first = i / 4;
  int tail = memcmp(a + bytes / 4 * 4, b + bytes / 4 * 4, bytes % 4);
  float x = 0, y = 0;
  if (diff) memcpy(&x, a + 4 * first, 4), memcpy(&y, b + 4 * first, 4);
  cr_expect(diff == 0 && tail == 0, "%s: not the same bits: %zu of %zu words differ, the first at %zu (%.9g vs %.9g)",
            what, diff, bytes / 4, first, x, y);
}

/* ------------------------------------------------------------------------------------------ */
/* table and memory */

Test(OPS_HARNESS_SUITE, table_is_complete) {
  need_backend();
  const kernels_ops *t = G;
  cr_assert_str_eq(t->name, backend());
  cr_assert_eq(t->device_memory, strcmp(t->name, "cpu") != 0,
               "%s table: device_memory %d (1 for every backend but cpu)", t->name,
               t->device_memory);
  const char *miss = test_ops_missing(t);
  cr_assert_null(miss, "%s table lacks %s", t->name, miss);
}

Test(OPS_HARNESS_SUITE, memory_entries) {
  need_backend();
  enum { N = 100003 };
  float *d = G->alloc(N * sizeof(float));
  cr_assert_not_null(d);
  dpool[dn++] = d;
  float *z = backf(d, N);
  for (int i = 0; i < N; i++)
    cr_assert_eq(z[i], 0.0f, "alloc is not zeroed at %d", i);
  rng r = {1};
  float *x = rand_buf(&r, N, -5, 5);
  G->to_device(d, x, N * sizeof(float));
  G->sync();
  cr_assert_eq(memcmp(backf(d, N), x, N * sizeof(float)), 0, "round trip");
  G->to_device(d, NULL, 0);
  G->to_host(NULL, d, 0);
  G->free(G->alloc(0));
  G->free(NULL);
}

/* Copies to and from host_alloc's memory (page-locked on a GPU): the offload path's (copy_out,
 * then copy_in waiting for it, the compute stream for that: copy_wait), 40 MiB, and a transfer's
 * staging (to_host, to_device), sizes above the CUDA table's upload ring (1 MiB) at odd offsets.
 * Each arrives whole. */
static void host_alloc_copies(void) {
  need_backend();
  size_t n = ((size_t)40 << 20) / sizeof(float) + 12345;
  rng r = {7};
  float *x = rand_buf(&r, n, -3, 3);
  float *d = devf(x, n), *e = dev_poisoned(n);
  float *h = G->host_alloc(n * sizeof(float));
  cr_assert_not_null(h, "%s host_alloc", G->name);
  G->copy_out(h, d, n * sizeof(float), 0);
  G->copy_in(e, h, n * sizeof(float), 1, 0);
  G->copy_wait(1);
  G->sync();
  float *got = backf(e, n);
  for (size_t i = 0; i < n; i++)
    if (got[i] != x[i]) cr_assert_fail("%s: copy_out/in: float %zu of %zu came back as %g, not %g", G->name, i, n, got[i], x[i]);
  G->copy_sync(1);
  static const size_t len[] = {((size_t)3 << 20) + 3, ((size_t)2 << 20) + 16}, off[] = {0, 1, 5, 16};
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 4; b++) {
      unsigned char *hb = (unsigned char *)h + off[b], *db = (unsigned char *)e + off[3 - b];
      memset(h, 0, n * sizeof(float));
      G->to_host(hb, (const unsigned char *)d + off[b], len[a]); /* device -> page-locked host */
      cr_assert_eq(memcmp(hb, (const unsigned char *)x + off[b], len[a]), 0, "%s: to_host of %zu bytes at +%zu", G->name,
                   len[a], off[b]);
      G->to_device(db, hb, len[a]); /* and back, elsewhere */
      G->sync();
      unsigned char *back_b = back(db, len[a]);
      cr_assert_eq(memcmp(back_b, hb, len[a]), 0, "%s: to_device of %zu bytes to +%zu", G->name, len[a], off[3 - b]);
    }
  G->host_free(h);
}
Test(OPS_HARNESS_SUITE, host_alloc_copies_round_trip) { host_alloc_copies(); }
/* The same with the offload copies fed in pieces of 1 MiB (the CUDA table: 40 of them and a rest,
 * 4 queued at a time; the rest of the copy out issued when copy_in waits for it, the rest of the
 * copy back by copy_wait). Other tables ignore it. */
Test(OPS_HARNESS_SUITE, host_alloc_copies_in_pieces) {
  setenv("BRIGADE_COPY_PIECE_MB", "1", 1); /* read when the table first copies (a test is its own process) */
  /* the CUDA emulator: a piece is reported done at every 1000th query only, so the queue is not
   * emptied by the pump alone (on a GPU: no effect) */
  setenv("EMU_EVENT_POLLS", "1000", 1);
  host_alloc_copies();
}

/* ------------------------------------------------------------------------------------------ */
/* matrix products */

static void check_gemm(rng *r, int M, int N, int K, int ta, int tb, float alpha, float beta) {
  size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N;
  float *a = rand_buf(r, na, -1, 1), *b = rand_buf(r, nb, -1, 1);
  float *c = beta == 0.0f ? fbuf(nc) : rand_buf(r, nc, -1, 1);
  float *dc = beta == 0.0f ? dev_poisoned(nc) : devf(c, nc);
  H->gemm(c, a, b, M, N, K, ta, tb, alpha, beta);
  G->gemm(dc, devf(a, na), devf(b, nb), M, N, K, ta, tb, alpha, beta);
  char what[96];
  snprintf(what, sizeof what, "gemm M=%d N=%d K=%d ta=%d tb=%d beta=%g", M, N, K, ta, tb, beta);
  expect_close(what, c, dc, nc, TOL_GEMM);
}

Test(OPS_HARNESS_SUITE, gemm_all_transposes) {
  need_backend();
  rng r = {2};
  /* {128, 257, 513}: odd sizes (as the LM head's 50257) in a product large enough that the CUDA
   * table runs it padded (blas_cuda.cu) */
  const int shapes[][3] = {{1, 1, 1}, {17, 33, 65}, {128, 96, 300}, {3, 200, 7}, {128, 257, 513}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++) {
        check_gemm(&r, shapes[s][0], shapes[s][1], shapes[s][2], ta, tb, 1.0f, 0.0f);
        check_gemm(&r, shapes[s][0], shapes[s][1], shapes[s][2], ta, tb, 0.7f, 1.0f);
      }
}

/* 16-bit matmuls: on inputs that bf16 / fp16 hold exactly (what mixed precision stores), the
 * products are exact in fp32 and only the order of the fp32 sums may differ: TOL_GEMM. Every
 * table must keep the results fp32 products of the rounded inputs (the CPU tables ignore the
 * mode, so theirs are exactly those). kind: 1 bf16, 2 fp16. */
static void round_kind(float *x, size_t n, int kind) {
  if (kind == 1)
    H->round_bf16(x, n);
  else
    H->round_fp16(x, n);
}

static void check_gemm_half_inputs(int kind) {
  rng r = {12};
  const int shapes[][3] = {{17, 33, 65}, {128, 96, 300}, {128, 257, 513}};
  const char *name = kind == 1 ? "bf16" : "fp16";
  G->matmul_half(kind);
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int t = 0; t < 4; t++) {
      int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2], ta = t & 1, tb = t >> 1;
      size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N;
      float *a = rand_buf(&r, na, -1, 1), *b = rand_buf(&r, nb, -1, 1), *c = fbuf(nc);
      round_kind(a, na, kind), round_kind(b, nb, kind);
      float *dc = dev_poisoned(nc);
      H->gemm(c, a, b, M, N, K, ta, tb, 1.0f, 0.0f);
      G->gemm(dc, devf(a, na), devf(b, nb), M, N, K, ta, tb, 1.0f, 0.0f);
      char what[96];
      snprintf(what, sizeof what, "%s gemm M=%d N=%d K=%d ta=%d tb=%d", name, M, N, K, ta, tb);
      expect_close(what, c, dc, nc, TOL_GEMM);
    }
  /* batched, with a shared A */
  int B = 3, M = 16, N = 24, K = 40;
  float *a = rand_buf(&r, (size_t)M * K, -1, 1), *b = rand_buf(&r, (size_t)B * K * N, -1, 1);
  float *c = fbuf((size_t)B * M * N), *dc = dev_poisoned((size_t)B * M * N);
  round_kind(a, (size_t)M * K, kind), round_kind(b, (size_t)B * K * N, kind);
  H->gemm_batched(c, a, b, B, (size_t)M * N, 0, (size_t)K * N, M, N, K, 0, 0, 1.0f, 0.0f);
  G->gemm_batched(dc, devf(a, (size_t)M * K), devf(b, (size_t)B * K * N), B, (size_t)M * N, 0, (size_t)K * N, M, N,
                  K, 0, 0, 1.0f, 0.0f);
  char what[64];
  snprintf(what, sizeof what, "%s gemm_batched", name);
  expect_close(what, c, dc, (size_t)B * M * N, TOL_GEMM);
  G->matmul_half(0);
}

/* Both ways the CUDA table has of running them: its own 16-bit copies of the operands (the
 * default) and BRIGADE_CUDA_HALF=fast (cuBLAS rounds the fp32 operands itself); the variable is
 * read when the mode is set. Other tables ignore it. */
Test(OPS_HARNESS_SUITE, gemm_half_inputs) {
  need_backend();
  for (int kind = 1; kind <= 2; kind++) {
    unsetenv("BRIGADE_CUDA_HALF");
    check_gemm_half_inputs(kind);
    setenv("BRIGADE_CUDA_HALF", "fast", 1);
    check_gemm_half_inputs(kind);
  }
  unsetenv("BRIGADE_CUDA_HALF");
}

/* linear_forward = gemm, bias_add, axpy: against the CPU's in fp32 and under mixed precision
 * (inputs that bf16 / fp16 hold exactly, so only the order of the fp32 sums may differ; the CUDA
 * table then runs one cuBLASLt product with the bias and the residual in its epilogue when the
 * dimensions are multiples of 8 and the pointers 16-byte aligned). `shift` floats past an
 * aligned allocation for every device operand: 1 takes the CUDA table's plain path, 4 its
 * cuBLASLt path at 16-byte alignment. */
static void check_linear(rng *r, int N, int C, int OC, int with_bias, int with_res, int kind, int shift) {
  size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
  float *in = rand_buf(r, ni, -1, 1), *w = rand_buf(r, nw, -1, 1), *b = rand_buf(r, OC, -1, 1),
        *res = rand_buf(r, no, -2, 2), *out = fbuf(no);
  if (kind) round_kind(in, ni, kind), round_kind(w, nw, kind);
  float *db = with_bias ? devf_shifted(b, OC, shift) : NULL, *dres = with_res ? devf_shifted(res, no, shift) : NULL;
  float *dout = devf_shifted(res, no, shift); /* overwritten */
  H->linear_forward(out, in, w, with_bias ? b : NULL, with_res ? res : NULL, N, C, OC);
  G->linear_forward(dout, devf_shifted(in, ni, shift), devf_shifted(w, nw, shift), db, dres, N, C, OC);
  char what[128];
  snprintf(what, sizeof what, "linear_forward N=%d C=%d OC=%d bias %d res %d kind %d shift %d", N, C, OC, with_bias,
           with_res, kind, shift);
  expect_close(what, out, dout, no, TOL_GEMM);
}

Test(OPS_HARNESS_SUITE, linear_forward) {
  need_backend();
  rng r = {22};
  const int shapes[][3] = {{37, 67, 29}, {64, 96, 40}, {16, 8, 24}};
  for (int mode = 0; mode < 4; mode++) { /* fp32; bf16 copies (the default); bf16 and fp16 fast */
    int kind = mode == 0 ? 0 : mode == 3 ? 2 : 1;
    if (mode >= 2) setenv("BRIGADE_CUDA_HALF", "fast", 1);
    else unsetenv("BRIGADE_CUDA_HALF");
    G->matmul_half(kind);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
      for (int v = 0; v < 4; v++)
        for (int shift = 0; shift <= 4; shift += 4)
          check_linear(&r, shapes[s][0], shapes[s][1], shapes[s][2], v & 1, v >> 1, kind, shift);
    check_linear(&r, 64, 96, 40, 1, 1, kind, 1);
  }
  unsetenv("BRIGADE_CUDA_HALF");
  G->matmul_half(0);
}

/* gemm_ld: the LM head's three products over logits rows padded to a multiple of 64 (zeros in
 * A's and B's padding, as the contract asks; C's padding poisoned and not compared), V = 513 so
 * that the CUDA table runs them padded (the logits used in place, the weight and its gradient
 * copied); fp32 and mixed precision on inputs 16-bit types hold exactly. */
static float *pad_cols(const float *x, int rows, int cols, int ld, float fill) {
  float *y = fbuf((size_t)rows * ld);
  for (int i = 0; i < rows; i++)
    for (int k = 0; k < ld; k++)
      y[(size_t)i * ld + k] = k < cols ? x[(size_t)i * cols + k] : fill;
  return y;
}

static void check_head_products(rng *r, int kind) {
  int N = 128, C = 256, V = 513, ld = 576;
  float *x = rand_buf(r, (size_t)N * C, -1, 1), *w = rand_buf(r, (size_t)V * C, -1, 1),
        *dl = rand_buf(r, (size_t)N * V, -1, 1), *dw = rand_buf(r, (size_t)V * C, -1, 1);
  if (kind) round_kind(x, (size_t)N * C, kind), round_kind(w, (size_t)V * C, kind), round_kind(dl, (size_t)N * V, kind);
  float *gx = devf(x, (size_t)N * C), *gw = devf(w, (size_t)V * C), *gdl = devf(pad_cols(dl, N, V, ld, 0.0f), (size_t)N * ld);
  /* forward: logits [N, ld] = x w^T */
  float *lg = fbuf((size_t)N * V), *glg = dev_poisoned((size_t)N * ld);
  H->gemm(lg, x, w, N, V, C, 0, 1, 1.0f, 0.0f);
  G->gemm_ld(glg, gx, gw, N, V, C, 0, 1, 1.0f, 0.0f, C, C, ld);
  float *got = backf(glg, (size_t)N * ld), *cmp = fbuf((size_t)N * V);
  for (int i = 0; i < N; i++) memcpy(cmp + (size_t)i * V, got + (size_t)i * ld, sizeof(float) * V);
  expect_close("gemm_ld head forward", lg, devf(cmp, (size_t)N * V), (size_t)N * V, TOL_GEMM);
  /* backward input: dx = dlogits w */
  float *dx = fbuf((size_t)N * C), *gdx = dev_poisoned((size_t)N * C);
  H->gemm(dx, dl, w, N, C, V, 0, 0, 1.0f, 0.0f);
  G->gemm_ld(gdx, gdl, gw, N, C, V, 0, 0, 1.0f, 0.0f, ld, C, C);
  expect_close("gemm_ld head backward input", dx, gdx, (size_t)N * C, TOL_GEMM);
  /* backward weight: dw += dlogits^T x */
  float *gdw = devf(dw, (size_t)V * C);
  H->gemm(dw, dl, x, V, C, N, 1, 0, 1.0f, 1.0f);
  G->gemm_ld(gdw, gdl, gx, V, C, N, 1, 0, 1.0f, 1.0f, ld, C, C);
  expect_close("gemm_ld head backward weight", dw, gdw, (size_t)V * C, TOL_GEMM);
}

Test(OPS_HARNESS_SUITE, gemm_ld_head_products) {
  need_backend();
  rng r = {23};
  for (int mode = 0; mode < 3; mode++) { /* fp32; bf16 copies (the default); bf16 fast */
    if (mode == 2) setenv("BRIGADE_CUDA_HALF", "fast", 1);
    else unsetenv("BRIGADE_CUDA_HALF");
    G->matmul_half(mode ? 1 : 0);
    check_head_products(&r, mode ? 1 : 0);
  }
  unsetenv("BRIGADE_CUDA_HALF");
  G->matmul_half(0);
}

Test(OPS_HARNESS_SUITE, gemm_empty_k) {
  need_backend();
  rng r = {3};
  check_gemm(&r, 5, 7, 0, 0, 0, 1.0f, 0.0f);            /* C = 0, even from NaN */
  check_gemm(&r, 5, 7, 0, 1, 1, 1.0f, 0.5f);            /* C = 0.5 C */
  check_gemm(&r, 5, 7, 0, 0, 1, 1.0f, 1.0f);            /* untouched */
  G->gemm(NULL, NULL, NULL, 0, 7, 3, 0, 0, 1.0f, 0.0f); /* nothing to write */
  G->sync();
}

static void check_gemm_batched(rng *r, int batch, int shared_a, int shared_c, int M, int N, int K,
                               int ta, int tb, float beta) {
  size_t sa = shared_a ? 0 : (size_t)M * K, sb = (size_t)K * N, sc = shared_c ? 0 : (size_t)M * N;
  size_t na = shared_a ? (size_t)M * K : sa * batch, nb = sb * batch;
  size_t nc = shared_c ? (size_t)M * N : sc * batch;
  float *a = rand_buf(r, na, -1, 1), *b = rand_buf(r, nb, -1, 1);
  float *c = beta == 0.0f ? fbuf(nc) : rand_buf(r, nc, -1, 1);
  float *dc = beta == 0.0f ? dev_poisoned(nc) : devf(c, nc);
  H->gemm_batched(c, a, b, batch, sc, sa, sb, M, N, K, ta, tb, 0.5f, beta);
  G->gemm_batched(dc, devf(a, na), devf(b, nb), batch, sc, sa, sb, M, N, K, ta, tb, 0.5f, beta);
  char what[128];
  snprintf(what, sizeof what, "gemm_batched batch=%d shared_a=%d shared_c=%d M=%d N=%d K=%d", batch,
           shared_a, shared_c, M, N, K);
  expect_close(what, c, dc, nc, TOL_GEMM);
}

Test(OPS_HARNESS_SUITE, gemm_batched) {
  need_backend();
  rng r = {4};
  check_gemm_batched(&r, 5, 0, 0, 17, 9, 33, 0, 1, 0.0f);
  check_gemm_batched(&r, 5, 0, 0, 17, 9, 33, 1, 0, 1.0f);
  check_gemm_batched(&r, 4, 1, 0, 8, 31, 16, 0, 0, 0.0f); /* one A for every product */
  check_gemm_batched(&r, 4, 0, 1, 8, 31, 16, 1, 1, 1.0f); /* products added into one C */
  check_gemm_batched(&r, 1, 0, 0, 1, 1, 1, 0, 0, 0.0f);
}

/* ------------------------------------------------------------------------------------------ */
/* bias, activations */

Test(OPS_HARNESS_SUITE, bias_add_and_grad) {
  need_backend();
  rng r = {5};
  const int shapes[][2] = {{1, 1}, {37, 67}, {1000, 300}, {3, 1030}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    int N = shapes[s][0], C = shapes[s][1];
    size_t n = (size_t)N * C;
    float *out = rand_buf(&r, n, -2, 2), *bias = rand_buf(&r, C, -1, 1);
    float *dout = rand_buf(&r, n, -1, 1), *dbias = rand_buf(&r, C, -1, 1);
    float *d_out = devf(out, n), *d_dbias = devf(dbias, C);
    H->bias_add(out, bias, N, C);
    G->bias_add(d_out, devf(bias, C), N, C);
    expect_close("bias_add", out, d_out, n, TOL_EXACT);
    H->bias_grad(dbias, dout, N, C);
    G->bias_grad(d_dbias, devf(dout, n), N, C);
    expect_close("bias_grad", dbias, d_dbias, C, TOL_MATH);
  }
}

Test(OPS_HARNESS_SUITE, gelu_and_relu) {
  need_backend();
  rng r = {6};
  size_t sizes[] = {1, 1001, 300007};
  for (size_t s = 0; s < 3; s++) {
    size_t n = sizes[s];
    float *x = rand_buf(&r, n, -6, 6), *dy = rand_buf(&r, n, -1, 1), *y = fbuf(n), *dx = fbuf(n);
    x[0] = 0.0f; /* relu's subgradient at 0 */
    if (n > 4) x[2] = 1e20f, x[3] = -1e20f; /* gelu saturated where x^2 overflows: slopes 1 and 0, not NaN */
    float *dx_ = devf(x, n), *ddy = devf(dy, n);
    float *dyo = dev_poisoned(n), *ddx = dev_poisoned(n);
    H->gelu_forward(y, x, n);
    G->gelu_forward(dyo, dx_, n);
    expect_close("gelu_forward", y, dyo, n, TOL_MATH);
    H->gelu_backward(dx, x, dy, n);
    G->gelu_backward(ddx, dx_, ddy, n);
    expect_close("gelu_backward", dx, ddx, n, TOL_MATH);
    /* din may alias dout */
    float *alias = devf(dy, n);
    G->gelu_backward(alias, dx_, alias, n);
    expect_close("gelu_backward in place", dx, alias, n, TOL_MATH);
    if (n > 1) x[1] = NAN; /* relu passes NaN on both ways, as the CPU does */
    float *rx = devf(x, n);
    H->relu_forward(y, x, n);
    G->relu_forward(dyo, rx, n);
    expect_close("relu_forward", y, dyo, n, TOL_EXACT);
    H->relu_backward(dx, x, dy, n);
    G->relu_backward(ddx, rx, ddy, n);
    expect_close("relu_backward", dx, ddx, n, TOL_EXACT);
    cr_assert(n == 1 || (isnan(y[1]) && isnan(dx[1])), "relu dropped a NaN");
  }
}

/* ------------------------------------------------------------------------------------------ */
/* layernorm, softmax, cross-entropy */

Test(OPS_HARNESS_SUITE, layernorm) {
  need_backend();
  rng r = {7};
  const int shapes[][2] = {{1, 1}, {37, 67}, {300, 768}, {5, 2049}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    int N = shapes[s][0], C = shapes[s][1];
    size_t n = (size_t)N * C;
    float *x = rand_buf(&r, n, -3, 3), *w = rand_buf(&r, C, 0.5f, 1.5f),
          *b = rand_buf(&r, C, -1, 1);
    float *dy = rand_buf(&r, n, -1, 1), *dw = rand_buf(&r, C, -1, 1), *db = rand_buf(&r, C, -1, 1);
    float *y = fbuf(n), *mean = fbuf(N), *rstd = fbuf(N), *dx = fbuf(n);
    float *gx = devf(x, n), *gw = devf(w, C), *gy = dev_poisoned(n), *gmean = dev_poisoned(N);
    float *grstd = dev_poisoned(N), *gdy = devf(dy, n), *gdx = dev_poisoned(n);
    float *gdw = devf(dw, C), *gdb = devf(db, C);
    H->layernorm_forward(y, mean, rstd, x, w, b, N, C, 1e-5f);
    G->layernorm_forward(gy, gmean, grstd, gx, gw, devf(b, C), N, C, 1e-5f);
    expect_close("layernorm_forward out", y, gy, n, TOL_MATH);
    expect_close("layernorm_forward mean", mean, gmean, N, TOL_MATH);
    expect_close("layernorm_forward rstd", rstd, grstd, N, TOL_MATH);
    /* backward from the CPU's caches on both sides, so each op is tested on its own */
    float *cmean = devf(mean, N), *crstd = devf(rstd, N);
    H->layernorm_backward_input(dx, dy, x, w, mean, rstd, N, C);
    G->layernorm_backward_input(gdx, gdy, gx, gw, cmean, crstd, N, C);
    expect_close("layernorm_backward_input", dx, gdx, n, TOL_MATH);
    H->layernorm_backward_weight(dw, db, dy, x, mean, rstd, N, C);
    G->layernorm_backward_weight(gdw, gdb, gdy, gx, cmean, crstd, N, C);
    expect_close("layernorm_backward_weight dw", dw, gdw, C, TOL_MATH);
    expect_close("layernorm_backward_weight db", db, gdb, C, TOL_MATH);
  }
}

Test(OPS_HARNESS_SUITE, softmax) {
  need_backend();
  rng r = {8};
  const int shapes[][2] = {{1, 1}, {7, 5}, {33, 3001}, {2, 50257}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    int N = shapes[s][0], V = shapes[s][1];
    size_t n = (size_t)N * V;
    float *x = rand_buf(&r, n, -20, 20), *y = fbuf(n), *gy = dev_poisoned(n);
    H->softmax_forward(y, x, N, V);
    G->softmax_forward(gy, devf(x, n), N, V);
    expect_close("softmax_forward", y, gy, n, TOL_MATH);
  }
}

Test(OPS_HARNESS_SUITE, cross_entropy) {
  need_backend();
  rng r = {9};
  const int shapes[][2] = {{1, 1}, {7, 5}, {65, 3001}, {3, 50257}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    int N = shapes[s][0], V = shapes[s][1];
    size_t n = (size_t)N * V;
    float *x = rand_buf(&r, n, -30, 30), *p = fbuf(n), *loss = fbuf(N), *d = fbuf(n);
    int32_t *tg = rand_tokens(&r, N, V);
    int32_t *gtg = dev(tg, N * sizeof(int32_t));
    float *gp = dev_poisoned(n), *gl = dev_poisoned(N), *gd = dev_poisoned(n);
    H->xent_forward(loss, p, x, tg, N, V, V, 0);
    G->xent_forward(gl, gp, devf(x, n), gtg, N, V, V, 0);
    expect_close("xent_forward losses", loss, gl, N, TOL_MATH);
    expect_close("xent_forward probs", p, gp, n, TOL_MATH);
    float *gx = devf(x, n), *gl2 = dev_poisoned(N); /* probs over the logits: the layer's way */
    G->xent_forward(gl2, gx, gx, gtg, N, V, V, 0);
    expect_close("xent_forward in place: losses", loss, gl2, N, TOL_MATH);
    expect_close("xent_forward in place: probs", p, gx, n, TOL_MATH);
    /* backward from the CPU's probabilities on both sides */
    float *cp = devf(p, n);
    H->xent_backward(d, p, tg, 1.0f / N, N, V, V, 0);
    G->xent_backward(gd, cp, gtg, 1.0f / N, N, V, V, 0);
    expect_close("xent_backward", d, gd, n, TOL_EXACT);
    G->xent_backward(cp, cp, gtg, 1.0f / N, N, V, V, 0); /* dlogits may alias probs */
    expect_close("xent_backward in place", d, cp, n, TOL_EXACT);
    /* rows padded to ld (NaN in the logits' padding: never read; zeros written in probs' and
     * dlogits' padding): the same rows as unpadded */
    int ld = (V + 63) / 64 * 64 + 64;
    float *gxp = devf(pad_cols(x, N, V, ld, NAN), (size_t)N * ld), *glp = dev_poisoned(N);
    G->xent_forward(glp, gxp, gxp, gtg, N, V, ld, 0);
    expect_close("xent_forward padded: losses", loss, glp, N, TOL_MATH);
    G->xent_backward(gxp, gxp, gtg, 1.0f / N, N, V, ld, 0);
    expect_close("xent_backward padded (from its own probs)", pad_cols(d, N, V, ld, 0.0f), gxp, (size_t)N * ld, TOL_MATH);
    /* rounding the logits as read (bf16, fp16) and the gradient as written */
    for (int kind = 1; kind <= 2; kind++) {
      float *pk = fbuf(n), *lk = fbuf(N), *dk = fbuf(n), *gk = devf(x, n), *glk = dev_poisoned(N);
      H->xent_forward(lk, pk, x, tg, N, V, V, kind);
      G->xent_forward(glk, gk, gk, gtg, N, V, V, kind);
      expect_close("xent_forward rounding: losses", lk, glk, N, TOL_MATH);
      expect_close("xent_forward rounding: probs", pk, gk, n, TOL_MATH);
      float *gpk = devf(pk, n);
      H->xent_backward(dk, pk, tg, 1.0f / N, N, V, V, kind);
      G->xent_backward(gpk, gpk, gtg, 1.0f / N, N, V, V, kind);
      expect_close("xent_backward rounding", dk, gpk, n, TOL_EXACT);
    }
  }
}

/* ------------------------------------------------------------------------------------------ */
/* attention */

static void check_attention(rng *r, int B, int T, int C, int NH, int nan_last) {
  size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
  float *qkv = rand_buf(r, nqkv, -2, 2), *dout = rand_buf(r, nout, -1, 1);
  if (nan_last) /* the last token's q, k, v of batch 0 */
    for (int i = 0; i < 3 * C; i++)
      qkv[(size_t)(T - 1) * 3 * C + i] = NAN;
  float *out = fbuf(nout), *att = fbuf(natt), *dqkv = fbuf(nqkv), *scratch = fbuf(kernels_attention_scratch_floats(T));
  float *gqkv = devf(qkv, nqkv), *gout = dev_poisoned(nout), *gatt = dev_poisoned(natt);
  float *gdqkv = dev_poisoned(nqkv), *gscratch = dev_poisoned(kernels_attention_scratch_floats(T));
  cr_expect_eq(kernels_attention_cache_floats(G->name, 0, B, T, C, NH),
               G->attention_cache_floats ? G->attention_cache_floats(B, T, C, NH) : natt,
               "%s: the planner's count of the fp32 attention cache differs from the table's", G->name);
  H->attention_forward(out, att, qkv, B, T, C, NH);
  G->attention_forward(gout, gatt, gqkv, B, T, C, NH);
  char what[96];
  if (nan_last) {
    /* The mask's promise every table keeps: row t of the probabilities reads scores up to the
     * diagonal only, so the rows before the poisoned token stay finite and equal to the CPU's.
     * (out and dqkv may differ there: a GEMM-based table multiplies A's masked zeros by the
     * NaN values, see ops.h; the CPU table's own test checks that its rows stay clean.) */
    size_t clean = (size_t)(T - 1) * T; /* rows 0..T-2 of (b=0, h=0) */
    float *g = backf(gatt, natt);
    for (size_t i = 0; i < clean; i++)
      cr_assert(isfinite(g[i]), "attention_forward: NaN of the last token reached att[%zu]", i);
    snprintf(what, sizeof what, "attention_forward T=%d C=%d NH=%d att before the NaN", T, C, NH);
    expect_close(what, att, gatt, clean, TOL_GEMM);
    return;
  }
  snprintf(what, sizeof what, "attention_forward B=%d T=%d C=%d NH=%d out", B, T, C, NH);
  expect_close(what, out, gout, nout, TOL_GEMM);
  snprintf(what, sizeof what, "attention_forward B=%d T=%d C=%d NH=%d att", B, T, C, NH);
  expect_close(what, att, gatt, natt, TOL_GEMM);
  H->attention_backward(dqkv, scratch, dout, qkv, att, B, T, C, NH);
  G->attention_backward(gdqkv, gscratch, devf(dout, nout), gqkv, devf(att, natt), B, T, C, NH);
  snprintf(what, sizeof what, "attention_backward B=%d T=%d C=%d NH=%d dqkv", B, T, C, NH);
  expect_close(what, dqkv, gdqkv, nqkv, TOL_GEMM);
}

Test(OPS_HARNESS_SUITE, attention) {
  need_backend();
  rng r = {10};
  check_attention(&r, 1, 1, 4, 1, 0);
  check_attention(&r, 2, 17, 12, 3, 0);
  check_attention(&r, 1, 130, 64, 2, 0); /* rows longer than a block */
  check_attention(&r, 2, 64, 96, 4, 0);
  check_attention(&r, 1, 9, 8, 2, 1); /* the probabilities stay causal even for NaN */
}

/* Attention under bf16 mixed precision, on inputs bf16 holds exactly (as training stores them),
 * against the CPU's fp32: the CUDA table rounds A (and dS) to bf16 inside its products, so the
 * results differ by bf16 rounding, normalised MSE about 1e-6 (TOL_BF16 leaves 30x). Run with
 * BRIGADE_CUDA_ATTENTION=gemm (the GEMM path) and =flash (the fused kernels, the default, for head size 64 and T > 64; other
 * shapes fall back to the GEMMs); att is compared only where it holds the probabilities (not
 * under flash, where it is the fused path's own cache). Twice each, for repeatability. */
#define TOL_BF16 1e-4
static void check_attention_bf16(rng *r, int B, int T, int C, int NH, int flash) {
  size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
  float *qkv = rand_buf(r, nqkv, -2, 2), *dout = rand_buf(r, nout, -1, 1);
  H->round_bf16(qkv, nqkv), H->round_bf16(dout, nout);
  float *out = fbuf(nout), *att = fbuf(natt), *dqkv = fbuf(nqkv), *scratch = fbuf(kernels_attention_scratch_floats(T));
  H->attention_forward(out, att, qkv, B, T, C, NH);
  H->attention_backward(dqkv, scratch, dout, qkv, att, B, T, C, NH);
  float *gqkv = devf(qkv, nqkv), *gdout = devf(dout, nout), *gsc = dev_poisoned(kernels_attention_scratch_floats(T));
  float *gout[3], *gdqkv[3];
  char what[112];
  /* the cache the table asks for: the probabilities, or under the fused path its own (smaller)
   * one, which then must be all it touches (the emulator's ASan sees an overrun) */
  size_t gnatt = G->attention_cache_floats ? G->attention_cache_floats(B, T, C, NH) : natt;
  int fused = flash && C / NH == 64 && T > 64 && !strcmp(G->name, "cuda");
  /* fused: L and O (fp32), then from the next 128-byte boundary (32 floats of slack) q, k, v in
   * bf16 with T rounded up to 64 */
  size_t fused_floats = (size_t)B * NH * T * (1 + C / NH) + 32 + 3 * (size_t)B * NH * ((T + 63) / 64 * 64) * (C / NH) / 2;
  cr_expect_eq(kernels_attention_cache_floats(G->name, 1, B, T, C, NH), gnatt, "%s: the planner's count of the "
               "attention cache differs from the table's (B=%d T=%d C=%d NH=%d)", G->name, B, T, C, NH);
  cr_expect_eq(gnatt, fused ? fused_floats : natt, "%s: attention cache of %zu floats for "
               "B=%d T=%d C=%d NH=%d%s", G->name, gnatt, B, T, C, NH, flash ? " (flash asked for)" : "");
  for (int k = 0; k < 3; k++) {
    /* the second time the same again (the kernels are deterministic), the third time the cache
     * starts one float into its buffer, as it may inside a layer's activation slot: the same
     * results */
    int at = k == 2;
    float *gatt = dev_poisoned(gnatt + at) + at;
    gout[k] = dev_poisoned(nout), gdqkv[k] = dev_poisoned(nqkv);
    G->attention_forward(gout[k], gatt, gqkv, B, T, C, NH);
    G->attention_backward(gdqkv[k], gsc, gdout, gqkv, gatt, B, T, C, NH);
    if (k) continue;
    snprintf(what, sizeof what, "bf16%s attention_forward B=%d T=%d C=%d NH=%d out", flash ? " flash" : "", B, T,
             C, NH);
    expect_close(what, out, gout[0], nout, TOL_BF16);
    if (!flash) {
      snprintf(what, sizeof what, "bf16 attention_forward B=%d T=%d C=%d NH=%d att", B, T, C, NH);
      expect_close(what, att, gatt, natt, TOL_BF16);
    }
    snprintf(what, sizeof what, "bf16%s attention_backward B=%d T=%d C=%d NH=%d dqkv", flash ? " flash" : "", B,
             T, C, NH);
    expect_close(what, dqkv, gdqkv[0], nqkv, TOL_BF16);
  }
  static const char *const again[2] = {"again", "with the cache one float into its buffer"};
  for (int k = 1; k < 3; k++) {
    snprintf(what, sizeof what, "bf16%s attention_forward B=%d T=%d C=%d NH=%d out, %s", flash ? " flash" : "", B, T,
             C, NH, again[k - 1]);
    expect_same_bits(what, gout[0], gout[k], sizeof(float) * nout);
    snprintf(what, sizeof what, "bf16%s attention_backward B=%d T=%d C=%d NH=%d dqkv, %s", flash ? " flash" : "", B,
             T, C, NH, again[k - 1]);
    expect_same_bits(what, gdqkv[0], gdqkv[k], sizeof(float) * nqkv);
  }
}

Test(OPS_HARNESS_SUITE, attention_bf16) {
  need_backend();
  rng r = {13};
  G->matmul_half(1);
  /* the GEMMs, then the fused kernels on mma.sync (the default) and on WMMA */
  static const char *kinds[] = {"mma", "mma", "wmma"};
  for (int mode = 0; mode <= 2; mode++) {
    int flash = mode > 0;
    setenv("BRIGADE_CUDA_ATTENTION", flash ? "flash" : "gemm", 1);
    setenv("BRIGADE_CUDA_FLASH", kinds[mode], 1);
    check_attention_bf16(&r, 1, 65, 64, 1, flash);   /* one full tile and one row more */
    check_attention_bf16(&r, 2, 100, 128, 2, flash); /* a ragged second tile */
    check_attention_bf16(&r, 1, 256, 128, 2, flash); /* whole tiles, several off the diagonal */
    check_attention_bf16(&r, 1, 40, 96, 3, flash);   /* head size 32: GEMMs either way */
  }
  unsetenv("BRIGADE_CUDA_ATTENTION");
  unsetenv("BRIGADE_CUDA_FLASH");
  G->matmul_half(0);
}

/* A cache sized for one path, then a mode in which the call would take the other: the call must
 * stop, naming the cause, rather than overrun (the GEMM path writes B*NH*T*T floats; the fused
 * one more than that for T from 65 to 172). In a child process (its stderr read back), which
 * stops before any CUDA call. */
static void mode_change_stops(int sized_half, int T, const char *cause) {
  need_backend();
  if (strcmp(G->name, "cuda") != 0) cr_skip_test("%s has one attention cache size", G->name);
  G->matmul_half(sized_half);
  setenv("BRIGADE_CUDA_ATTENTION", "flash", 1);
  int B = 1, C = 64, NH = 1;
  size_t n = G->attention_cache_floats(B, T, C, NH), nf = kernels_fused_attention_floats(B, T, NH, C / NH);
  cr_assert_eq(n, sized_half ? nf : (size_t)B * NH * T * T, "the cache asked for %zu floats", n);
  float *qkv = dev_poisoned((size_t)B * T * 3 * C), *out = dev_poisoned((size_t)B * T * C), *att = dev_poisoned(n);
  G->fill(qkv, 0.5f, (size_t)B * T * 3 * C);
  G->sync();
  int fd[2];
  cr_assert_eq(pipe(fd), 0);
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    dup2(fd[1], 2), close(fd[0]);
    G->matmul_half(!sized_half); /* the other path applies now */
    G->attention_forward(out, att, qkv, B, T, C, NH);
    _exit(0);
  }
  close(fd[1]);
  char msg[1024] = "";
  size_t got = 0;
  ssize_t k;
  while (got + 1 < sizeof msg && (k = read(fd[0], msg + got, sizeof msg - 1 - got)) > 0) got += (size_t)k;
  msg[got] = 0;
  close(fd[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  cr_expect(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "the call did not stop (status %d)", st);
  cr_expect(strstr(msg, "op attention_forward") && strstr(msg, cause), "the message does not name the op and the cause: %s",
            msg);
  unsetenv("BRIGADE_CUDA_ATTENTION");
  G->matmul_half(0);
}

Test(OPS_HARNESS_SUITE, attention_cache_mode_change_stops) {
  mode_change_stops(1, 512, "was sized for the fused path"); /* a smaller cache than the GEMM path's */
}

Test(OPS_HARNESS_SUITE, attention_cache_mode_change_to_fused_stops) {
  mode_change_stops(0, 128, "was sized for the GEMM path"); /* fused: 20608 floats, GEMM 16384 */
}

/* ------------------------------------------------------------------------------------------ */
/* embedding */

Test(OPS_HARNESS_SUITE, embedding) {
  need_backend();
  rng r = {11};
  const int shapes[][4] = {{1, 1, 1, 1}, {3, 33, 40, 7}, {4, 64, 96, 50}, {2, 17, 300, 1000}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    int B = shapes[s][0], T = shapes[s][1], C = shapes[s][2], V = shapes[s][3];
    size_t n = (size_t)B * T * C;
    int32_t *tok = rand_tokens(&r, (size_t)B * T, V); /* small V: many repeats */
    float *wte = rand_buf(&r, (size_t)V * C, -1, 1), *wpe = rand_buf(&r, (size_t)T * C, -1, 1);
    float *out = fbuf(n), *dout = rand_buf(&r, n, -1, 1);
    float *dwte = rand_buf(&r, (size_t)V * C, -1, 1), *dwpe = rand_buf(&r, (size_t)T * C, -1, 1);
    int32_t *gtok = dev(tok, (size_t)B * T * sizeof(int32_t));
    float *gout = dev_poisoned(n), *gdwte = devf(dwte, (size_t)V * C),
          *gdwpe = devf(dwpe, (size_t)T * C);
    H->embedding_forward(out, tok, wte, wpe, B, T, C);
    G->embedding_forward(gout, gtok, devf(wte, (size_t)V * C), devf(wpe, (size_t)T * C), B, T, C);
    expect_close("embedding_forward", out, gout, n, TOL_EXACT);
    float *gdout = devf(dout, n);
    H->embedding_backward(dwte, dwpe, dout, tok, B, T, C);
    G->embedding_backward(gdwte, gdwpe, gdout, gtok, B, T, C);
    expect_close("embedding_backward dwte (rows in (b, t) order)", dwte, gdwte, (size_t)V * C,
                 TOL_EXACT);
    expect_close("embedding_backward dwpe", dwpe, gdwpe, (size_t)T * C, TOL_EXACT);
  }
}

/* ------------------------------------------------------------------------------------------ */
/* optimizers */

/* AdamW's operands on the host (parameters, gradients, moments), and their copies on G */
typedef struct {
  float *p, *g, *m, *v, *gp, *gg, *gm, *gv;
} adam_bufs;
static adam_bufs adam_state(rng *r, size_t n) {
  adam_bufs a = {.p = rand_buf(r, n, -1, 1), .g = rand_buf(r, n, -1, 1), .m = rand_buf(r, n, -0.1f, 0.1f),
                 .v = rand_buf(r, n, 0, 0.01f)};
  a.gp = devf(a.p, n), a.gg = devf(a.g, n), a.gm = devf(a.m, n), a.gv = devf(a.v, n);
  return a;
}

Test(OPS_HARNESS_SUITE, adamw) {
  need_backend();
  rng r = {12};
  size_t n = 100003;
  adam_bufs s = adam_state(&r, n);
  float *p = s.p, *g = s.g, *m = s.m, *v = s.v, *gp = s.gp, *gg = s.gg, *gm = s.gm, *gv = s.gv;
  for (int t = 1; t <= 3; t++) {
    H->adamw(p, g, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t, 0.5f);
    G->adamw(gp, gg, gm, gv, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t, 0.5f);
  }
  expect_close("adamw p", p, gp, n, TOL_MATH);
  expect_close("adamw m", m, gm, n, TOL_MATH);
  expect_close("adamw v", v, gv, n, TOL_MATH);
}

/* out of place: the backend's adamw_to gives its own adamw's bits and leaves p, m, v alone */
Test(OPS_HARNESS_SUITE, adamw_to_equals_adamw) {
  need_backend();
  rng r = {14};
  size_t n = 100003;
  adam_bufs s = adam_state(&r, n);
  float *p = s.p, *m = s.m, *v = s.v, *gp = s.gp, *gg = s.gg, *gm = s.gm, *gv = s.gv;
  float *ip = devf(p, n), *im = devf(m, n), *iv = devf(v, n), *op = devf(p, n), *om = devf(m, n), *ov = devf(v, n);
  G->adamw_to(op, om, ov, ip, gg, im, iv, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 2, 0.5f);
  G->adamw(gp, gg, gm, gv, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 2, 0.5f);
  float *a = backf(op, n), *b = backf(gp, n), *c = backf(ip, n);
  cr_assert(memcmp(a, b, sizeof(float) * n) == 0, "adamw_to p differs from adamw's");
  cr_assert(memcmp(c, p, sizeof(float) * n) == 0, "adamw_to wrote its input p");
  a = backf(om, n), b = backf(gm, n);
  cr_assert(memcmp(a, b, sizeof(float) * n) == 0, "adamw_to m differs from adamw's");
  a = backf(ov, n), b = backf(gv, n);
  cr_assert(memcmp(a, b, sizeof(float) * n) == 0, "adamw_to v differs from adamw's");
}

Test(OPS_HARNESS_SUITE, sgd) {
  need_backend();
  rng r = {13};
  size_t n = 100003;
  float *p = rand_buf(&r, n, -1, 1), *g = rand_buf(&r, n, -1, 1), *mom = rand_buf(&r, n, -1, 1);
  float *gp = devf(p, n), *gg = devf(g, n), *gmom = devf(mom, n);
  H->sgd(p, g, mom, n, 0.1f, 0.9f, 0.01f, 2.0f);
  G->sgd(gp, gg, gmom, n, 0.1f, 0.9f, 0.01f, 2.0f);
  expect_close("sgd p (momentum)", p, gp, n, TOL_ELEM);
  expect_close("sgd mom", mom, gmom, n, TOL_ELEM);
  H->sgd(p, g, NULL, n, 0.1f, 0.0f, 0.0f, 1.0f);
  G->sgd(gp, gg, NULL, n, 0.1f, 0.0f, 0.0f, 1.0f);
  expect_close("sgd p (no momentum)", p, gp, n, TOL_ELEM);
}

/* ------------------------------------------------------------------------------------------ */
/* vector utilities */

Test(OPS_HARNESS_SUITE, vector_utilities) {
  need_backend();
  rng r = {14};
  size_t n = 300007;
  float *x = rand_buf(&r, n, -1, 1), *y = rand_buf(&r, n, -1, 1);
  float *gx = devf(x, n), *gy = devf(y, n);
  H->axpy(y, -0.3f, x, n);
  G->axpy(gy, -0.3f, gx, n);
  expect_close("axpy", y, gy, n, TOL_ELEM);
  H->scale(y, 1.7f, n);
  G->scale(gy, 1.7f, n);
  expect_close("scale", y, gy, n, TOL_ELEM); /* after axpy: inherits its last-bit differences */
  float *f = fbuf(n), *gf = dev_poisoned(n);
  H->fill(f, -2.5f, n);
  G->fill(gf, -2.5f, n);
  expect_close("fill", f, gf, n, TOL_EXACT);
  H->zero(f, n);
  G->zero(gf, n);
  expect_close("zero", f, gf, n, TOL_EXACT);
  float *c = fbuf(n), *gc = dev_poisoned(n);
  H->copy(c, x, n);
  G->copy(gc, gx, n);
  expect_close("copy", c, gc, n, TOL_EXACT);
  /* overlapping copies, both directions, as memmove */
  float *o = fdup(x, n), *go = devf(x, n);
  H->copy(o + 5, o, n - 5);
  G->copy(go + 5, go, n - 5);
  expect_close("copy overlapping forward", o, go, n, TOL_EXACT);
  H->copy(o, o + 1000, n - 1000);
  G->copy(go, go + 1000, n - 1000);
  expect_close("copy overlapping backward", o, go, n, TOL_EXACT);
}

/* ------------------------------------------------------------------------------------------ */
/* float4 paths: the CUDA table's element-wise kernels move float4s when every pointer is 16-byte
 * aligned and single floats otherwise. Each op here runs on buffers shifted by 1-3 floats (the
 * single-float path, or a row's unaligned head) against the aligned run: the same bits where the
 * kernel promises the same arithmetic per element, the CPU's result within tolerance where the
 * summation order may differ (row reductions). */

static void expect_same_floats(const char *what, int shift, const float *a_dev, const float *b_dev, size_t n) {
  const float *a = backf(a_dev, n), *b = backf(b_dev, n);
  for (size_t i = 0; i < n; i++) {
    uint32_t x, y;
    memcpy(&x, &a[i], 4);
    memcpy(&y, &b[i], 4);
    cr_assert(x == y || (isnan(a[i]) && isnan(b[i])), "%s, shift %d, [%zu]: %.9g against %.9g aligned", what, shift,
              i, b[i], a[i]);
  }
}

Test(OPS_HARNESS_SUITE, float4_and_single_paths_agree) {
  need_backend();
  rng r = {21};
  size_t n = 1001;
  float *x = rand_buf(&r, n, -6, 6), *dy = rand_buf(&r, n, -1, 1);
  float *ax = devf(x, n), *ady = devf(dy, n), *ao = dev_poisoned(n);
  for (int sh = 1; sh < 4; sh++) {
    float *sx = devf_shifted(x, n, sh), *sdy = devf_shifted(dy, n, sh), *so = devf_shifted(x, n, (sh + 1) % 4);
    G->gelu_forward(ao, ax, n), G->gelu_forward(so, sx, n);
    expect_same_floats("gelu_forward", sh, ao, so, n);
    G->gelu_backward(ao, ax, ady, n), G->gelu_backward(so, sx, sdy, n);
    expect_same_floats("gelu_backward", sh, ao, so, n);
    G->relu_backward(ao, ax, ady, n), G->relu_backward(so, sx, sdy, n);
    expect_same_floats("relu_backward", sh, ao, so, n);
    G->copy(ao, ax, n), G->copy(so, sx, n);
    G->round_bf16(ao, n), G->round_bf16(so, n);
    expect_same_floats("round_bf16", sh, ao, so, n);
    G->copy(ao, ady, n), G->copy(so, sdy, n);
    G->axpy(ao, -0.3f, ax, n), G->axpy(so, -0.3f, sx, n);
    expect_same_floats("axpy", sh, ao, so, n);
    G->scale(ao, 1.7f, n), G->scale(so, 1.7f, n);
    expect_same_floats("scale", sh, ao, so, n);
    G->fill(ao, 0.25f, n), G->fill(so, 0.25f, n);
    expect_same_floats("fill", sh, ao, so, n);
  }
  /* AdamW: one of the seven pointers shifted is enough to take the single path */
  adam_bufs s = adam_state(&r, n), t = adam_state(&r, n);
  float *sp = devf_shifted(t.p, n, 3);
  G->copy(sp, s.gp, n), G->copy(t.gg, s.gg, n), G->copy(t.gm, s.gm, n), G->copy(t.gv, s.gv, n);
  G->adamw(s.gp, s.gg, s.gm, s.gv, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 2, 0.5f);
  G->adamw(sp, t.gg, t.gm, t.gv, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 2, 0.5f);
  expect_same_floats("adamw p", 3, s.gp, sp, n);
  expect_same_floats("adamw m", 3, s.gm, t.gm, n);
  expect_same_floats("adamw v", 3, s.gv, t.gv, n);
  /* bias add and gradient: C a multiple of 4 (float4 groups) with out or dout shifted */
  int N = 37, C = 68;
  size_t nc = (size_t)N * C;
  float *o = rand_buf(&r, nc, -2, 2), *b = rand_buf(&r, C, -1, 1), *d = rand_buf(&r, nc, -1, 1);
  float *oa = devf(o, nc), *os = devf_shifted(o, nc, 2), *gb = devf(b, C), *da = devf(d, nc), *ds = devf_shifted(d, nc, 1);
  G->bias_add(oa, gb, N, C), G->bias_add(os, gb, N, C);
  expect_same_floats("bias_add", 2, oa, os, nc);
  float *dba = dev_poisoned(C), *dbs = dev_poisoned(C);
  G->zero(dba, C), G->zero(dbs, C);
  G->bias_grad(dba, da, N, C), G->bias_grad(dbs, ds, N, C);
  expect_same_floats("bias_grad", 1, dba, dbs, C);
  /* layernorm's weight gradient: per column, the same sums in the same order on both paths */
  float *mean = rand_buf(&r, N, -0.5f, 0.5f), *rstd = rand_buf(&r, N, 0.5f, 2.0f), *gmean = devf(mean, N),
        *grstd = devf(rstd, N), *dwa = dev_poisoned(C), *dba2 = dev_poisoned(C), *dws = dev_poisoned(C),
        *dbs2 = dev_poisoned(C);
  G->zero(dwa, C), G->zero(dba2, C), G->zero(dws, C), G->zero(dbs2, C);
  G->layernorm_backward_weight(dwa, dba2, da, oa, gmean, grstd, N, C);
  G->layernorm_backward_weight(dws, dbs2, ds, devf_shifted(backf(oa, nc), nc, 3), gmean, grstd, N, C);
  expect_same_floats("layernorm_backward_weight dw", 3, dwa, dws, C);
  expect_same_floats("layernorm_backward_weight db", 3, dba2, dbs2, C);
  /* cross-entropy's backward: groups of four straddling rows, V >= 4 and V < 4; targets at random,
   * all first (a row's target can be a group's last element) and all last */
  const int xs[][2] = {{7, 5}, {65, 3001}, {9, 3}, {5, 4}, {11, 7}};
  for (size_t k = 0; k < 3 * sizeof xs / sizeof xs[0]; k++) {
    int XN = xs[k / 3][0], V = xs[k / 3][1];
    size_t nv = (size_t)XN * V;
    float *pr = rand_buf(&r, nv, 0, 1), *want = fbuf(nv);
    int32_t *tg = rand_tokens(&r, XN, V);
    for (int i = 0; i < XN && k % 3; i++)
      tg[i] = k % 3 == 1 ? 0 : V - 1;
    int32_t *gtg = dev(tg, XN * sizeof(int32_t));
    H->xent_backward(want, pr, tg, 0.5f, XN, V, V, 0);
    float *ga = dev_poisoned(nv), *gs = devf_shifted(pr, nv, 1);
    G->xent_backward(ga, devf(pr, nv), gtg, 0.5f, XN, V, V, 0);
    expect_close("xent_backward (float4)", want, ga, nv, TOL_EXACT);
    G->xent_backward(gs, gs, gtg, 0.5f, XN, V, V, 0);
    expect_close("xent_backward (shifted, in place)", want, gs, nv, TOL_EXACT);
  }
  /* row kernels: softmax rows with an unaligned head (in and out in phase, and not), layernorm
   * with C a multiple of 4 but rows shifted: against the CPU */
  int SN = 5, V = 1027;
  size_t sv = (size_t)SN * V;
  float *lg = rand_buf(&r, sv, -20, 20), *pw = fbuf(sv), *lw = fbuf(SN);
  int32_t *tg = rand_tokens(&r, SN, V), *gtg = dev(tg, SN * sizeof(int32_t));
  H->xent_forward(lw, pw, lg, tg, SN, V, V, 0);
  for (int sh = 0; sh < 4; sh++) {
    float *gl = devf_shifted(lg, sv, 1), *gp = devf_shifted(lg, sv, sh), *gls = dev_poisoned(SN);
    G->xent_forward(gls, gp, gl, gtg, SN, V, V, 0);
    expect_close("xent_forward probs (shifted)", pw, gp, sv, TOL_MATH);
    expect_close("xent_forward losses (shifted)", lw, gls, SN, TOL_MATH);
  }
  int LN = 9, LC = 768;
  size_t ln = (size_t)LN * LC;
  float *lx = rand_buf(&r, ln, -3, 3), *lwt = rand_buf(&r, LC, 0.5f, 1.5f), *lb = rand_buf(&r, LC, -1, 1),
        *ly = fbuf(ln), *lm = fbuf(LN), *lr = fbuf(LN), *ldy = rand_buf(&r, ln, -1, 1), *ldx = fbuf(ln);
  H->layernorm_forward(ly, lm, lr, lx, lwt, lb, LN, LC, 1e-5f);
  H->layernorm_backward_input(ldx, ldy, lx, lwt, lm, lr, LN, LC);
  float *gy = devf_shifted(ly, ln, 2), *gm = dev_poisoned(LN), *gr = dev_poisoned(LN), *gx = devf_shifted(lx, ln, 1);
  G->layernorm_forward(gy, gm, gr, gx, devf(lwt, LC), devf(lb, LC), LN, LC, 1e-5f);
  expect_close("layernorm_forward (shifted)", ly, gy, ln, TOL_MATH);
  float *gdx = devf_shifted(ldx, ln, 3);
  G->layernorm_backward_input(gdx, devf(ldy, ln), gx, devf(lwt, LC), devf(lm, LN), devf(lr, LN), LN, LC);
  expect_close("layernorm_backward_input (shifted)", ldx, gdx, ln, TOL_MATH);
  /* and the aligned run (the float4 path) gives the shifted run's bits: the row sums in one order */
  float *ay = dev_poisoned(ln), *am = dev_poisoned(LN), *ar = dev_poisoned(LN), *adx = dev_poisoned(ln);
  G->layernorm_forward(ay, am, ar, devf(lx, ln), devf(lwt, LC), devf(lb, LC), LN, LC, 1e-5f);
  expect_same_floats("layernorm_forward mean", 1, am, gm, LN);
  expect_same_floats("layernorm_forward rstd", 1, ar, gr, LN);
  expect_same_floats("layernorm_forward", 1, ay, gy, ln);
  G->layernorm_backward_input(adx, devf(ldy, ln), devf(lx, ln), devf(lwt, LC), devf(lm, LN), devf(lr, LN), LN, LC);
  expect_same_floats("layernorm_backward_input", 1, adx, gdx, ln);
}

Test(OPS_HARNESS_SUITE, sumsq_and_nonfinite) {
  need_backend();
  rng r = {15};
  size_t sizes[] = {1, 1000, 3000017};
  for (size_t s = 0; s < 3; s++) {
    size_t n = sizes[s];
    float *x = rand_buf(&r, n, -3, 3);
    float *gx = devf(x, n);
    double want = H->sumsq(x, n), got = G->sumsq(gx, n);
    cr_assert(fabs(got - want) <= 1e-11 * want, "sumsq n=%zu: %s %.17g, cpu %.17g", n, G->name, got,
              want);
    cr_assert_eq(G->sumsq(gx, n), got, "sumsq: not the same bits twice");
    cr_assert_eq(G->nonfinite(gx, n), 0);
    x[n / 2] = NAN;
    x[n - 1] = INFINITY;
    x[0] = -INFINITY;
    G->to_device(gx, x, n * sizeof(float));
    cr_assert_eq(G->nonfinite(gx, n), H->nonfinite(x, n), "nonfinite n=%zu", n);
  }
  cr_assert_eq(G->sumsq(NULL, 0), 0.0);
  cr_assert_eq(G->nonfinite(NULL, 0), 0);
}

/* ------------------------------------------------------------------------------------------ */
/* low precision: bit for bit */

static uint32_t bits(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}

Test(OPS_HARNESS_SUITE, casts_and_rounding) {
  need_backend();
  rng r = {16};
  enum { N = 200003 };
  float *x = fbuf(N);
  const float special[] = {0.0f,        -0.0f,      1.0f,       -1.0f,    65504.0f,
                           65519.99f,   65520.0f,   -65520.0f,  0x1p-24f, 0x1p-25f,
                           0x1.8p-25f,  0x1p-14f,   1e-8f,      3.0e38f,  3.4028235e38f,
                           INFINITY,    -INFINITY,  NAN,        -NAN,     1.00390625f,
                           1.01171875f, 0x1.002p0f, 0x1.006p0f, 1e-40f,   -1e-45f};
  size_t ns = sizeof special / sizeof special[0];
  for (size_t i = 0; i < N; i++) {
    if (i < ns) {
      x[i] = special[i];
    } else if (i % 3 == 0) { /* any bit pattern: NaN payloads, subnormals, everything */
      uint32_t u = (uint32_t)next_u64(&r);
      memcpy(&x[i], &u, 4);
    } else {
      x[i] = uniform(&r, -70000, 70000) * (i % 3 == 1 ? 1.0f : 1e-6f);
    }
  }
  /* a NaN with its payload only in the low half (must stay NaN in bf16) */
  uint32_t low_nan = 0x7f800001u;
  memcpy(&x[ns], &low_nan, 4);
  float *gx = devf(x, N);
  uint16_t *hb = halloc(2 * N), *hf = halloc(2 * N);
  memset(hb, 0xff, 2 * N); /* NaN patterns: the casts must overwrite them */
  memset(hf, 0xff, 2 * N);
  uint16_t *gb = dev(hb, 2 * N), *gf = dev(hf, 2 * N);
  H->cast_f32_to_bf16(hb, x, N);
  G->cast_f32_to_bf16(gb, gx, N);
  H->cast_f32_to_f16(hf, x, N);
  G->cast_f32_to_f16(gf, gx, N);
  uint16_t *bb = back(gb, 2 * N), *bf = back(gf, 2 * N);
  for (int i = 0; i < N; i++) {
    cr_assert_eq(bb[i], hb[i], "cast_f32_to_bf16(0x%08x): %s 0x%04x, cpu 0x%04x", bits(x[i]),
                 G->name, bb[i], hb[i]);
    cr_assert_eq(bf[i], hf[i], "cast_f32_to_f16(0x%08x): %s 0x%04x, cpu 0x%04x", bits(x[i]),
                 G->name, bf[i], hf[i]);
  }
  /* widening every 16-bit pattern */
  enum { P = 65536 };
  uint16_t *pat = halloc(2 * P);
  for (int i = 0; i < P; i++)
    pat[i] = (uint16_t)i;
  uint16_t *gpat = dev(pat, 2 * P);
  float *wb = fbuf(P), *wf = fbuf(P), *gwb = dev_poisoned(P), *gwf = dev_poisoned(P);
  H->cast_bf16_to_f32(wb, pat, P);
  G->cast_bf16_to_f32(gwb, gpat, P);
  H->cast_f16_to_f32(wf, pat, P);
  G->cast_f16_to_f32(gwf, gpat, P);
  float *cwb = backf(gwb, P), *cwf = backf(gwf, P);
  for (int i = 0; i < P; i++) {
    cr_assert_eq(bits(cwb[i]), bits(wb[i]), "cast_bf16_to_f32(0x%04x)", i);
    cr_assert_eq(bits(cwf[i]), bits(wf[i]), "cast_f16_to_f32(0x%04x)", i);
  }
  float *rb = fdup(x, N), *rf = fdup(x, N), *grb = devf(x, N), *grf = devf(x, N);
  H->round_bf16(rb, N);
  G->round_bf16(grb, N);
  H->round_fp16(rf, N);
  G->round_fp16(grf, N);
  float *crb = backf(grb, N), *crf = backf(grf, N);
  for (int i = 0; i < N; i++) {
    cr_assert_eq(bits(crb[i]), bits(rb[i]), "round_bf16(0x%08x)", bits(x[i]));
    cr_assert_eq(bits(crf[i]), bits(rf[i]), "round_fp16(0x%08x)", bits(x[i]));
  }
}

/* ------------------------------------------------------------------------------------------ */
/* determinism of the reducing ops: the same inputs twice give the same bits */

Test(OPS_HARNESS_SUITE, reductions_are_deterministic) {
  need_backend();
  rng r = {17};
  int M = 96, N = 200, K = 300, Nr = 1000, C = 300, B = 2, T = 64, AC = 96, NH = 4, V = 50;
  float *a = devf(rand_buf(&r, (size_t)M * K, -1, 1), (size_t)M * K);
  float *b = devf(rand_buf(&r, (size_t)K * N, -1, 1), (size_t)K * N);
  float *c1 = dev_poisoned((size_t)M * N), *c2 = dev_poisoned((size_t)M * N);
  G->gemm(c1, a, b, M, N, K, 0, 0, 1.0f, 0.0f);
  G->gemm(c2, a, b, M, N, K, 0, 0, 1.0f, 0.0f);
  expect_same_bits("gemm", c1, c2, sizeof(float) * M * N);

  float *dy = devf(rand_buf(&r, (size_t)Nr * C, -1, 1), (size_t)Nr * C);
  float *x = devf(rand_buf(&r, (size_t)Nr * C, -1, 1), (size_t)Nr * C);
  float *mean = devf(rand_buf(&r, Nr, -0.1f, 0.1f), Nr),
        *rstd = devf(rand_buf(&r, Nr, 0.5f, 2), Nr);
  float *start = rand_buf(&r, C, -1, 1);
  float *w1 = devf(start, C), *w2 = devf(start, C), *b1 = devf(start, C), *b2 = devf(start, C);
  G->layernorm_backward_weight(w1, b1, dy, x, mean, rstd, Nr, C);
  G->layernorm_backward_weight(w2, b2, dy, x, mean, rstd, Nr, C);
  expect_same_bits("layernorm_backward_weight dw", w1, w2, sizeof(float) * C);
  expect_same_bits("layernorm_backward_weight db", b1, b2, sizeof(float) * C);
  G->bias_grad(w1, dy, Nr, C);
  G->bias_grad(w2, dy, Nr, C);
  expect_same_bits("bias_grad", w1, w2, sizeof(float) * C);

  size_t nqkv = (size_t)B * T * 3 * AC, nout = (size_t)B * T * AC, natt = (size_t)B * NH * T * T;
  float *qkv = devf(rand_buf(&r, nqkv, -2, 2), nqkv), *dout = devf(rand_buf(&r, nout, -1, 1), nout);
  float *out = dev_poisoned(nout), *att = dev_poisoned(natt), *sc = dev_poisoned(kernels_attention_scratch_floats(T));
  G->attention_forward(out, att, qkv, B, T, AC, NH);
  float *d1 = dev_poisoned(nqkv), *d2 = devf(rand_buf(&r, nqkv, -1, 1), nqkv);
  G->attention_backward(d1, sc, dout, qkv, att, B, T, AC, NH);
  G->attention_backward(d2, sc, dout, qkv, att, B, T, AC, NH);
  expect_same_bits("attention_backward", d1, d2, sizeof(float) * nqkv);

  int32_t *tok = dev(rand_tokens(&r, (size_t)B * T, V), sizeof(int32_t) * B * T);
  float *edout = devf(rand_buf(&r, (size_t)B * T * C, -1, 1), (size_t)B * T * C);
  float *e0 = rand_buf(&r, (size_t)V * C, -1, 1), *p0 = rand_buf(&r, (size_t)T * C, -1, 1);
  float *e1 = devf(e0, (size_t)V * C), *e2 = devf(e0, (size_t)V * C);
  float *p1 = devf(p0, (size_t)T * C), *p2 = devf(p0, (size_t)T * C);
  G->embedding_backward(e1, p1, edout, tok, B, T, C);
  G->embedding_backward(e2, p2, edout, tok, B, T, C);
  expect_same_bits("embedding_backward dwte", e1, e2, sizeof(float) * V * C);
  expect_same_bits("embedding_backward dwpe", p1, p2, sizeof(float) * T * C);
}

/* ------------------------------------------------------------------------------------------ */
/* the whole model */

/* A tiny GPT (two blocks, final LayerNorm, head tied to the embedding) on both tables, one
 * forward and backward through chunks as training runs them: the same init (from the seed), the
 * same micro-batch, 1/N loss scale. The summed loss within 1e-6 relative, and every layer's
 * weight gradients within TOL_MODEL normalised MSE: op differences of TOL_GEMM size carried
 * through two blocks, with room; a wrong element anywhere is far above it. fakedev gives the
 * CPU's bits; the tolerance has not yet been measured against a GPU. */
#define TOL_MODEL 1e-7
Test(OPS_HARNESS_SUITE, whole_model_loss_and_gradients) {
  need_backend();
  static const char *cfg =
      "model = { vocab_size = 64; seq_len = 32; d_model = 64; n_heads = 4;\n"
      "  layers = ( { type = \"embedding\"; name = \"wte\"; }, { type = \"transformer_block\"; repeat = 2; },\n"
      "             { type = \"layernorm\"; }, { type = \"lm_head\"; tie = \"wte\"; },\n"
      "             { type = \"cross_entropy\"; } ); };\n"
      "train = { seed = 7; };\n";
  core_config *c;
  cr_assert_eq(core_config_load_string(&c, cfg, "tiny_gpt.cfg"), CORE_OK, "%s", core_error_msg());
  layers_model m = {0};
  cr_assert_eq(layers_model_build(&m, c, 64), CORE_OK, "%s", core_error_msg());
  enum { MB = 4 };
  layers_chunk hc, gc;
  cr_assert_eq(layers_chunk_init(&hc, &m, 0, m.n, H, MB, m.T, 1), CORE_OK, "%s", core_error_msg());
  cr_assert_eq(layers_chunk_init(&gc, &m, 0, m.n, G, MB, m.T, 1), CORE_OK, "%s", core_error_msg());
  rng r = {21};
  size_t N = (size_t)MB * m.T;
  int32_t *tok = rand_tokens(&r, N, m.V), *tg = rand_tokens(&r, N, m.V);
  layers_chunk *both[2] = {&hc, &gc};
  for (int k = 0; k < 2; k++) {
    layers_chunk_set_batch(both[k], 0, tok, tg);
    layers_chunk_forward(both[k], 0);
    layers_chunk_backward_input(both[k], 0, 1.0f / (float)N);
    layers_chunk_backward_weight(both[k], 0);
  }
  double hl = layers_chunk_loss_sum(&hc, 0), gl = layers_chunk_loss_sum(&gc, 0);
  cr_assert(fabs(gl - hl) <= 1e-6 * fabs(hl), "summed loss %.9g on %s, %.9g on the cpu", gl, G->name, hl);
  for (int i = 0; i < m.n; i++) {
    size_t n = hc.layers[i].nparams, off = hc.param_off[i];
    if (!n) continue;
    char what[96];
    snprintf(what, sizeof what, "gradients of layer %s (%s)", hc.layers[i].name, hc.layers[i].type->name);
    expect_close(what, hc.grads + off, gc.grads + off, n, TOL_MODEL);
  }
  layers_chunk_free(&hc), layers_chunk_free(&gc);
  layers_model_free(&m);
  core_config_free(c);
}
