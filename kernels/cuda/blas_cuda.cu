// kernels/cuda/blas_cuda.cu: GEMM and strided batched GEMM through cuBLAS.
//
// The op table is row-major; cuBLAS is column-major. A row-major [R, S] matrix with leading
// dimension S is, read column-major, its transpose [S, R] with the same leading dimension. So
// row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: call cuBLAS with the
// operands swapped (B first, then A) and M, N swapped; each operand keeps its own transpose
// flag, and the leading dimensions are the row-major ones (the stored matrix's column count).
// Math mode: see backend.cu (full fp32 by default, no TF32).
#include "kernels/cuda/cuda.h"

static int max1(int x) { return x > 1 ? x : 1; }

__global__ void k_scale_matrix(float *c, size_t n, float beta) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    c[i] = beta == 0.0f ? 0.0f : c[i] * beta; // beta = 0: C is only written, never read
}

// K = 0: the product is empty and C = beta * C; done here, since BLAS libraries differ on
// whether they touch C then. One M*N matrix at c.
static void empty_product(const char *op, float *c, size_t mn, float beta) {
  if (beta == 1.0f) return;
  k_scale_matrix<<<cuda_grid(mn), CUDA_THREADS, 0, cuda_stream()>>>(c, mn, beta);
  LAUNCH_CHECK_OP(op);
}

void cuda_gemm(float *c, const float *a, const float *b, int M, int N, int K, int transa,
               int transb, float alpha, float beta) {
  if (M <= 0 || N <= 0) return; // nothing to write
  if (K <= 0) {
    empty_product("gemm", c, (size_t)M * N, beta);
    return;
  }
  cublasOperation_t opa = transa ? CUBLAS_OP_T : CUBLAS_OP_N,
                    opb = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
  int lda = max1(transa ? M : K), ldb = max1(transb ? K : N);
  cublasStatus_t s =
      cublasSgemm(cuda_blas(), opb, opa, N, M, K, &alpha, b, ldb, a, lda, &beta, c, N);
  if (s != CUBLAS_STATUS_SUCCESS)
    cuda_fail("gemm", __FILE__, __LINE__, "cublasSgemm", cublasGetStatusString(s));
}

void cuda_gemm_batched(float *c, const float *a, const float *b, int batch, size_t stride_c,
                       size_t stride_a, size_t stride_b, int M, int N, int K, int transa,
                       int transb, float alpha, float beta) {
  if (batch <= 0 || M <= 0 || N <= 0) return;
  if (K <= 0) { // in batch order, as the CPU does (a shared C is scaled once per product)
    for (int i = 0; i < batch; i++)
      empty_product("gemm_batched", c + i * stride_c, (size_t)M * N, beta);
    return;
  }
  if (batch > 1 && stride_c < (size_t)M * N) {
    // products share (part of) C: cuBLAS would run them at once and race; one after another
    // on the stream, as the CPU does, accumulates in batch order
    for (int i = 0; i < batch; i++)
      cuda_gemm(c + i * stride_c, a + i * stride_a, b + i * stride_b, M, N, K, transa, transb,
                alpha, beta);
    return;
  }
  cublasOperation_t opa = transa ? CUBLAS_OP_T : CUBLAS_OP_N,
                    opb = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
  int lda = max1(transa ? M : K), ldb = max1(transb ? K : N);
  cublasStatus_t s = cublasSgemmStridedBatched(cuda_blas(), opb, opa, N, M, K, &alpha, b, ldb,
                                               (long long)stride_b, a, lda, (long long)stride_a,
                                               &beta, c, N, (long long)stride_c, batch);
  if (s != CUBLAS_STATUS_SUCCESS)
    cuda_fail("gemm_batched", __FILE__, __LINE__, "cublasSgemmStridedBatched",
              cublasGetStatusString(s));
}
