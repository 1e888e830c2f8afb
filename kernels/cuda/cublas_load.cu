/* kernels/cuda/cublas_load.cu: cuBLAS and cuBLASLt loaded when the CUDA backend first calls them,
 * not when brigade starts.
 *
 * Linked in, cuBLASLt (a 500 MB library) costs every process that loads it about 0.1 s and 90 MB
 * of private memory for its relocations before main() runs: every `brigade` command, CPU runs
 * and `--help` included, and every rank of an `mpirun` on the CPU. So the binary does not link
 * them; the functions brigade calls are defined here, and each finds its real one in the
 * library (dlopen, dlsym) on its first call. The compiler checks each definition against the
 * library's own header (a C function of the same name with another signature does not compile).
 * Where the library cannot be loaded, every call returns CUBLAS_STATUS_NOT_INITIALIZED and
 * cublasGetStatusString says which library and why, which the backend's set-up reports. */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <dlfcn.h>

#include <cstdio>
#include <mutex>

#define BRIGADE_STR2(x) #x
#define BRIGADE_STR(x) BRIGADE_STR2(x)

namespace {

struct lib {
  const char *name; /* "cublas", "cublasLt" */
  void *h;
  std::once_flag once;
};
lib blas = {"cublas", nullptr, {}}, blaslt = {"cublasLt", nullptr, {}};
char load_msg[1024] = "";

/* The library by its soname of the version brigade was built with, then by its plain name, then
 * from /usr/local/cuda/lib64 (a CUDA toolkit's own place, where the loader's path may not
 * look). */
void open_lib(lib *l) {
  char cand[4][160];
  snprintf(cand[0], sizeof cand[0], "lib%s.so.%s", l->name, BRIGADE_STR(CUBLAS_VER_MAJOR));
  snprintf(cand[1], sizeof cand[1], "lib%s.so", l->name);
  snprintf(cand[2], sizeof cand[2], "/usr/local/cuda/lib64/lib%s.so.%s", l->name, BRIGADE_STR(CUBLAS_VER_MAJOR));
  snprintf(cand[3], sizeof cand[3], "/usr/local/cuda/lib64/lib%s.so", l->name);
  char err[512] = ""; /* the first candidate's reason */
  for (int i = 0; i < 4 && !l->h; i++) {
    l->h = dlopen(cand[i], RTLD_NOW | RTLD_LOCAL);
    const char *e = l->h ? nullptr : dlerror();
    if (!l->h && !err[0]) snprintf(err, sizeof err, "%s", e ? e : "not found");
  }
  if (!l->h)
    snprintf(load_msg, sizeof load_msg, "could not load lib%s (tried %s, %s and /usr/local/cuda/lib64): %s", l->name,
             cand[0], cand[1], err);
}

void *sym(lib *l, const char *name) {
  std::call_once(l->once, open_lib, l);
  if (!l->h) return nullptr;
  void *f = dlsym(l->h, name);
  if (!f) snprintf(load_msg, sizeof load_msg, "lib%s has no %s", l->name, name);
  return f;
}

} // namespace

/* One forwarding definition: RET NAME PARAMS, calling the library's NAME with ARGS. The pointer is
 * looked up once (a function-local static: initialised once, thread-safe). */
#define BRIGADE_FORWARD(L, RET, NAME, PARAMS, ARGS)                                                                  \
  RET CUBLASWINAPI NAME PARAMS {                                                                                     \
    typedef RET(*fn_t) PARAMS;                                                                                       \
    static fn_t f = reinterpret_cast<fn_t>(sym(&L, #NAME));                                                          \
    return f ? f ARGS : CUBLAS_STATUS_NOT_INITIALIZED;                                                               \
  }

extern "C" {

const char *CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
  typedef const char *(*fn_t)(cublasStatus_t);
  static fn_t f = reinterpret_cast<fn_t>(sym(&blas, "cublasGetStatusString"));
  if (load_msg[0] && status == CUBLAS_STATUS_NOT_INITIALIZED) return load_msg; /* what went wrong loading */
  return f ? f(status) : load_msg;
}

BRIGADE_FORWARD(blas, cublasStatus_t, cublasCreate_v2, (cublasHandle_t * handle), (handle))
BRIGADE_FORWARD(blas, cublasStatus_t, cublasSetStream_v2, (cublasHandle_t handle, cudaStream_t streamId), (handle, streamId))
BRIGADE_FORWARD(blas, cublasStatus_t, cublasSetMathMode, (cublasHandle_t handle, cublasMath_t mode), (handle, mode))
BRIGADE_FORWARD(blas, cublasStatus_t, cublasSgemm_v2,
                (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                 const float *alpha, const float *A, int lda, const float *B, int ldb, const float *beta, float *C,
                 int ldc),
                (handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc))
BRIGADE_FORWARD(blas, cublasStatus_t, cublasSgemmStridedBatched,
                (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                 const float *alpha, const float *A, int lda, long long int strideA, const float *B, int ldb,
                 long long int strideB, const float *beta, float *C, int ldc, long long int strideC, int batchCount),
                (handle, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc, strideC,
                 batchCount))
BRIGADE_FORWARD(blas, cublasStatus_t, cublasGemmEx,
                (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                 const void *alpha, const void *A, cudaDataType Atype, int lda, const void *B, cudaDataType Btype,
                 int ldb, const void *beta, void *C, cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                 cublasGemmAlgo_t algo),
                (handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc,
                 computeType, algo))
BRIGADE_FORWARD(blas, cublasStatus_t, cublasGemmStridedBatchedEx,
                (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                 const void *alpha, const void *A, cudaDataType Atype, int lda, long long int strideA, const void *B,
                 cudaDataType Btype, int ldb, long long int strideB, const void *beta, void *C, cudaDataType Ctype,
                 int ldc, long long int strideC, int batchCount, cublasComputeType_t computeType,
                 cublasGemmAlgo_t algo),
                (handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb, strideB, beta, C,
                 Ctype, ldc, strideC, batchCount, computeType, algo))

BRIGADE_FORWARD(blaslt, cublasStatus_t, cublasLtCreate, (cublasLtHandle_t * lightHandle), (lightHandle))
BRIGADE_FORWARD(blaslt, cublasStatus_t, cublasLtMatmul,
                (cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void *alpha, const void *A,
                 cublasLtMatrixLayout_t Adesc, const void *B, cublasLtMatrixLayout_t Bdesc, const void *beta,
                 const void *C, cublasLtMatrixLayout_t Cdesc, void *D, cublasLtMatrixLayout_t Ddesc,
                 const cublasLtMatmulAlgo_t *algo, void *workspace, size_t workspaceSizeInBytes, cudaStream_t stream),
                (lightHandle, computeDesc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo, workspace,
                 workspaceSizeInBytes, stream))
BRIGADE_FORWARD(blaslt, cublasStatus_t, cublasLtMatmulAlgoGetHeuristic,
                (cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc, cublasLtMatrixLayout_t Adesc,
                 cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                 cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                 cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int *returnAlgoCount),
                (lightHandle, operationDesc, Adesc, Bdesc, Cdesc, Ddesc, preference, requestedAlgoCount,
                 heuristicResultsArray, returnAlgoCount))
BRIGADE_FORWARD(blaslt, cublasStatus_t, cublasLtMatmulDescCreate,
                (cublasLtMatmulDesc_t * matmulDesc, cublasComputeType_t computeType, cudaDataType_t scaleType),
                (matmulDesc, computeType, scaleType))
BRIGADE_FORWARD(blaslt, cublasStatus_t, cublasLtMatmulDescSetAttribute,
                (cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr, const void *buf,
                 size_t sizeInBytes),
                (matmulDesc, attr, buf, sizeInBytes))
BRIGADE_FORWARD(blaslt, cublasStatus_t, cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t * pref), (pref))
BRIGADE_FORWARD(blaslt, cublasStatus_t, cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t pref), (pref))
BRIGADE_FORWARD(blaslt, cublasStatus_t, cublasLtMatmulPreferenceSetAttribute,
                (cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                 size_t sizeInBytes),
                (pref, attr, buf, sizeInBytes))
BRIGADE_FORWARD(blaslt, cublasStatus_t, cublasLtMatrixLayoutCreate,
                (cublasLtMatrixLayout_t * matLayout, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld),
                (matLayout, type, rows, cols, ld))

} /* extern "C" */
