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
  if (threads > 0) openblas_set_num_threads(threads);
}

void kernels_cpu_reexec(char **argv) { kernels_cpu_select_core(); }

const char *kernels_cpu_blas_core(void) {
  const char *core = openblas_get_corename();
  return core ? core : "unknown";
}

static int max1(int x) { return x > 1 ? x : 1; }

/* Row-major storage: a matrix stored [rows, cols] has leading dimension cols. BLAS requires a
 * leading dimension >= 1 even for empty matrices, hence max1. */
void kernels_cpu_gemm(float *c, const float *a, const float *b, int M, int N, int K, int transa,
                      int transb, float alpha, float beta) {
  if (M <= 0 || N <= 0) return; /* nothing to write */
  cblas_sgemm(CblasRowMajor, transa ? CblasTrans : CblasNoTrans, transb ? CblasTrans : CblasNoTrans,
              M, N, K, alpha, a, max1(transa ? M : K), b, max1(transb ? K : N), beta, c, N);
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
