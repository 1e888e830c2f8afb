/* kernels/cpu/blas_cpu.c: OpenBLAS set-up (which kernels, how many threads) and GEMM. */
#include <cblas.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kernels/cpu/cpu.h"
#include "kernels/ops.h"

/* A DYNAMIC_ARCH OpenBLAS (Debian's) picks its kernel set in a library constructor, before main
 * runs, from OPENBLAS_CORETYPE or from CPUID. These two exported functions redo that choice;
 * weak, so a build linked against an OpenBLAS without them still links (and keeps its choice). */
extern void gotoblas_dynamic_init(void) __attribute__((weak));
extern void gotoblas_dynamic_quit(void) __attribute__((weak));
/* A threaded OpenBLAS's own stop of its worker threads (what it does before a fork); its next
 * threaded call starts them again. Weak, like the two above. */
extern int blas_thread_shutdown_(void) __attribute__((weak));

/* Kernel sets of this OpenBLAS that use AVX-512. */
static int core_has_avx512(const char *core) {
  return !strcasecmp(core, "SkylakeX") || !strcasecmp(core, "Cooperlake") ||
         !strcasecmp(core, "SapphireRapids");
}

static void select_core_once(void) {
  __builtin_cpu_init();
  /* A user's OPENBLAS_CORETYPE wins. Under valgrind, CPUID hides AVX-512, so nothing changes
   * there (valgrind 3.19 cannot run AVX-512 code). */
  if (getenv("OPENBLAS_CORETYPE") || !__builtin_cpu_supports("avx512f")) return;
  const char *core = openblas_get_corename();
  if (core && core_has_avx512(core)) return; /* CPUID already gave an AVX-512 set */
  setenv("OPENBLAS_CORETYPE", "SkylakeX", 0); /* also seen by child processes (MPI ranks) */
  if (gotoblas_dynamic_quit && gotoblas_dynamic_init) {
    gotoblas_dynamic_quit(); /* forget the constructor's choice... */
    gotoblas_dynamic_init(); /* ...and choose again, now reading OPENBLAS_CORETYPE */
  }
}

void kernels_cpu_select_core(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, select_core_once);
}

void kernels_cpu_init(int threads) {
  kernels_cpu_select_core();
  /* threads > 1: the pool's workers run every op, GEMMs split over them on a single-threaded
   * OpenBLAS (kernels_cpu_gemm) */
  if (threads > 0) openblas_set_num_threads(threads > 1 ? 1 : threads);
  kernels_cpu_pool_init(threads);
}

void kernels_cpu_setup(void) {
  kernels_cpu_select_core();
  if (blas_thread_shutdown_) blas_thread_shutdown_();
}

const char *kernels_cpu_blas_core(void) {
  const char *core = openblas_get_corename();
  return core ? core : "unknown";
}

static int max1(int x) { return x > 1 ? x : 1; }

/* Mixed precision (matmul_half): 1 while the table's GEMMs run on bf16 operands (bgemm.c). */
static int gemm_bf16;

const char *kernels_cpu_matmul_half(int kind) {
  const char *e = getenv("BRIGADE_CPU_BGEMM");
  int off = e && !strcmp(e, "0");
  gemm_bf16 = kind == 1 && !off && kernels_cpu_bgemm_supported();
  if (kind != 1) return kind == 2 ? "fp32 GEMMs (the CPU table has no fp16 GEMM)" : "fp32 GEMMs";
  if (gemm_bf16)
    return kernels_cpu_bgemm_uses_amx() ? "bf16 GEMMs on AMX tiles (fp32 sums)" : "bf16 GEMMs on AVX512-BF16 (fp32 sums)";
  return off ? "fp32 GEMMs (BRIGADE_CPU_BGEMM=0)" : "fp32 GEMMs (this CPU has no AVX512-BF16)";
}

int kernels_cpu_gemm_bf16(void) { return gemm_bf16; }

/* Row-major storage: a matrix stored [rows, cols] has leading dimension cols. BLAS requires a
 * leading dimension >= 1 even for empty matrices, hence max1. Under bf16 (gemm_bf16) the same
 * product on bf16 operands. */
static void sgemm(float *c, const float *a, const float *b, int M, int N, int K, int transa, int transb, float alpha,
                  float beta, int lda, int ldb, int ldc) {
  if (gemm_bf16) {
    kernels_cpu_bgemm(c, a, b, M, N, K, transa, transb, alpha, beta, lda, ldb, ldc);
    return;
  }
  cblas_sgemm(CblasRowMajor, transa ? CblasTrans : CblasNoTrans, transb ? CblasTrans : CblasNoTrans, M, N, K, alpha,
              a, max1(lda), b, max1(ldb), beta, c, max1(ldc));
}

typedef struct {
  float *c;
  const float *a, *b;
  int M, N, K, transa, transb, by_cols, lda, ldb, ldc;
  float alpha, beta;
} gemm_job;

/* columns [lo, hi) of C (each worker packs its own part of B, and all of A), or rows */
static void gemm_part(void *ctx, size_t lo, size_t hi) {
  const gemm_job *j = ctx;
  int lda = j->lda, ldb = j->ldb, n = (int)(hi - lo);
  if (j->by_cols) {
    const float *b = j->transb ? j->b + lo * (size_t)ldb : j->b + lo;
    sgemm(j->c + lo, j->a, b, j->M, n, j->K, j->transa, j->transb, j->alpha, j->beta, lda, ldb, j->ldc);
  } else {
    const float *a = j->transa ? j->a + lo : j->a + lo * (size_t)lda;
    sgemm(j->c + lo * (size_t)j->ldc, a, j->b, n, j->N, j->K, j->transa, j->transb, j->alpha, j->beta, lda, ldb,
          j->ldc);
  }
}

/* With the pool's workers (threads > 1) OpenBLAS runs single-threaded and the product is split
 * over the workers by the larger of C's dimensions, so GEMMs and the other ops share one set of
 * threads and no OpenBLAS thread spins on a core another op needs. The CPU leaves padding alone
 * (it reads and writes only the operands' stored widths). */
void kernels_cpu_gemm_ld(float *c, const float *a, const float *b, int M, int N, int K, int transa, int transb,
                         float alpha, float beta, int lda, int ldb, int ldc) {
  if (M <= 0 || N <= 0) return; /* nothing to write */
  int t = kernels_cpu_pool_threads();
  if (t <= 1 || (double)M * N * (K > 0 ? K : 1) < 1 << 21) {
    sgemm(c, a, b, M, N, K, transa, transb, alpha, beta, lda, ldb, ldc);
    return;
  }
  gemm_job j = {.c = c, .a = a, .b = b, .M = M, .N = N, .K = K, .transa = transa, .transb = transb,
                .by_cols = N >= M, .lda = lda, .ldb = ldb, .ldc = ldc, .alpha = alpha, .beta = beta};
  size_t n = j.by_cols ? (size_t)N : (size_t)M;
  kernels_cpu_parallel(n, 64, 16, gemm_part, &j);
}

void kernels_cpu_gemm(float *c, const float *a, const float *b, int M, int N, int K, int transa,
                      int transb, float alpha, float beta) {
  kernels_cpu_gemm_ld(c, a, b, M, N, K, transa, transb, alpha, beta, transa ? M : K, transb ? K : N, N);
}

/* One BLAS call per matrix: OpenBLAS 0.3.21 has no strided-batch sgemm, and for the sizes the
 * layers use each product is large enough to keep the cores busy on its own. */
void kernels_cpu_gemm_batched(float *c, const float *a, const float *b, int batch, size_t stride_c,
                              size_t stride_a, size_t stride_b, int M, int N, int K, int transa,
                              int transb, float alpha, float beta) {
  for (int i = 0; i < batch; i++)
    kernels_cpu_gemm(c + i * stride_c, a + i * stride_a, b + i * stride_b, M, N, K, transa, transb,
                     alpha, beta);
}
