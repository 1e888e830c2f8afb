// kernels/cuda/blas_cuda.cu: GEMM and strided batched GEMM through cuBLAS.
//
// The op table is row-major; cuBLAS is column-major. A row-major [R, S] matrix with leading
// dimension S is, read column-major, its transpose [S, R] with the same leading dimension. So
// row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: call cuBLAS with the
// operands swapped (B first, then A) and M, N swapped; each operand keeps its own transpose
// flag, and the leading dimensions are the row-major ones (the stored matrix's column count).
// Math mode: see backend.cu (full fp32 by default, no TF32). With matmul_bf16(1) (bf16 mixed
// precision) A and B are rounded to bf16 into two grow-only device buffers and multiplied by
// cublasGemmEx / cublasGemmStridedBatchedEx on tensor cores with fp32 accumulation
// (CUBLAS_COMPUTE_32F); C stays fp32. BRIGADE_CUDA_BF16=fast instead hands cuBLAS the fp32
// operands with CUBLAS_COMPUTE_32F_FAST_16BF, letting it round them to bf16 inside its own
// kernels (no copies, no extra passes over memory; cuBLAS picks the rounding). Which one is
// faster is for bench/train_step to tell on the GPU: it times both.
#include <cuda_bf16.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda.h"

static int max1(int x) { return x > 1 ? x : 1; }

// 0: fp32; 1: bf16 copies + CUBLAS_COMPUTE_32F; 2: fp32 operands, CUBLAS_COMPUTE_32F_FAST_16BF
static int bf16_mode;
void cuda_matmul_bf16(int on) {
  const char *e = getenv("BRIGADE_CUDA_BF16");
  bf16_mode = on == 0 ? 0 : e && !strcmp(e, "fast") ? 2 : 1;
}

// Grow-only bf16 copies of the operands; growing frees the old buffer with cudaFree, which
// waits for the device, so no queued GEMM still reads it.
static __nv_bfloat16 *bf_buf[2];
static size_t bf_cap[2];
static __nv_bfloat16 *bf16_buffer(int k, size_t n, const char *op) {
  if (n > bf_cap[k]) {
    if (bf_buf[k]) CUDA_CHECK_OP(op, cudaFree(bf_buf[k]));
    bf_buf[k] = nullptr;
    CUDA_CHECK_OP(op, cudaMalloc((void **)&bf_buf[k], n * sizeof(__nv_bfloat16)));
    bf_cap[k] = n;
  }
  return bf_buf[k];
}

__global__ void k_to_bf16(__nv_bfloat16 *out, const float *in, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    out[i] = __float2bfloat16_rn(in[i]);
}

// n floats at x as bf16 in buffer k
static const __nv_bfloat16 *as_bf16(int k, const float *x, size_t n, const char *op) {
  __nv_bfloat16 *b = bf16_buffer(k, n ? n : 1, op);
  if (n) {
    k_to_bf16<<<cuda_grid(n), CUDA_THREADS, 0, cuda_stream()>>>(b, x, n);
    LAUNCH_CHECK_OP(op);
  }
  return b;
}

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
  if (bf16_mode == 2) {
    cublasStatus_t s = cublasGemmEx(cuda_blas(), opb, opa, N, M, K, &alpha, b, CUDA_R_32F, ldb, a, CUDA_R_32F,
                                    lda, &beta, c, CUDA_R_32F, N, CUBLAS_COMPUTE_32F_FAST_16BF, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS)
      cuda_fail("gemm", __FILE__, __LINE__, "cublasGemmEx (fast bf16)", cublasGetStatusString(s));
    return;
  }
  if (bf16_mode) {
    const __nv_bfloat16 *ab = as_bf16(0, a, (size_t)M * K, "gemm"), *bb = as_bf16(1, b, (size_t)K * N, "gemm");
    cublasStatus_t s = cublasGemmEx(cuda_blas(), opb, opa, N, M, K, &alpha, bb, CUDA_R_16BF, ldb, ab, CUDA_R_16BF,
                                    lda, &beta, c, CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS)
      cuda_fail("gemm", __FILE__, __LINE__, "cublasGemmEx (bf16)", cublasGetStatusString(s));
    return;
  }
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
  if (bf16_mode == 2) {
    cublasStatus_t s = cublasGemmStridedBatchedEx(
        cuda_blas(), opb, opa, N, M, K, &alpha, b, CUDA_R_32F, ldb, (long long)stride_b, a, CUDA_R_32F, lda,
        (long long)stride_a, &beta, c, CUDA_R_32F, N, (long long)stride_c, batch, CUBLAS_COMPUTE_32F_FAST_16BF,
        CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS)
      cuda_fail("gemm_batched", __FILE__, __LINE__, "cublasGemmStridedBatchedEx (fast bf16)", cublasGetStatusString(s));
    return;
  }
  if (bf16_mode) { // each operand converted over its whole span (a stride of 0 shares one matrix)
    size_t na = (size_t)(batch - 1) * stride_a + (size_t)M * K, nb = (size_t)(batch - 1) * stride_b + (size_t)K * N;
    const __nv_bfloat16 *ab = as_bf16(0, a, na, "gemm_batched"), *bb = as_bf16(1, b, nb, "gemm_batched");
    cublasStatus_t s = cublasGemmStridedBatchedEx(
        cuda_blas(), opb, opa, N, M, K, &alpha, bb, CUDA_R_16BF, ldb, (long long)stride_b, ab, CUDA_R_16BF, lda,
        (long long)stride_a, &beta, c, CUDA_R_32F, N, (long long)stride_c, batch, CUBLAS_COMPUTE_32F,
        CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS)
      cuda_fail("gemm_batched", __FILE__, __LINE__, "cublasGemmStridedBatchedEx (bf16)", cublasGetStatusString(s));
    return;
  }
  cublasStatus_t s = cublasSgemmStridedBatched(cuda_blas(), opb, opa, N, M, K, &alpha, b, ldb,
                                               (long long)stride_b, a, lda, (long long)stride_a,
                                               &beta, c, N, (long long)stride_c, batch);
  if (s != CUBLAS_STATUS_SUCCESS)
    cuda_fail("gemm_batched", __FILE__, __LINE__, "cublasSgemmStridedBatched",
              cublasGetStatusString(s));
}
