// kernels/cuda/cuda.h: the CUDA backend's shared pieces (not public: layers reach the backend
// through kernels_get_ops("cuda")). C++ (nvcc) only.
//
// One stream and one cuBLAS handle per process, created on first use; every op is issued on
// that stream in call order. Every CUDA / cuBLAS call goes through CUDA_CHECK / CUBLAS_CHECK,
// and every kernel launch is followed by LAUNCH_CHECK(): a failure prints the op (the calling
// function, named like the op table's entry), file:line and the error, then aborts. A GPU
// error in the middle of a training step cannot be recovered from, and a clear message beats
// a wrong loss.
#ifndef BRIGADE_KERNELS_CUDA_CUDA_H
#define BRIGADE_KERNELS_CUDA_CUDA_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

extern "C" {
#include "kernels/ops.h"
}

[[noreturn]] void cuda_fail(const char *op, const char *file, int line, const char *call,
                            const char *err);

// CUDA_CHECK_OP names the op explicitly, for helpers shared by several ops.
#define CUDA_CHECK_OP(op, call)                                                                    \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) cuda_fail(op, __FILE__, __LINE__, #call, cudaGetErrorString(e_));       \
  } while (0)
#define CUDA_CHECK(call) CUDA_CHECK_OP(__func__, call)

#define CUBLAS_CHECK(call)                                                                         \
  do {                                                                                             \
    cublasStatus_t s_ = (call);                                                                    \
    if (s_ != CUBLAS_STATUS_SUCCESS)                                                               \
      cuda_fail(__func__, __FILE__, __LINE__, #call, cublasGetStatusString(s_));                   \
  } while (0)

// After a <<<...>>> launch: launch errors (bad configuration) show here, at the op that made
// them; errors while the kernel runs show at the next checked call (synchronous ones name
// their own op).
#define LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())
#define LAUNCH_CHECK_OP(op) CUDA_CHECK_OP(op, cudaGetLastError())

// The process's stream and cuBLAS handle (created by the first kernels_cuda_get_ops()).
cudaStream_t cuda_stream(void);
cublasHandle_t cuda_blas(void);

// A device scratch buffer of at least `bytes`, shared by all ops (they run one after another
// on one stream, so one op's use is over before the next op's kernels start). It only grows;
// growing waits for the stream and then frees the old one, so no queued kernel still uses it.
// The pointer is valid until the next call.
void *cuda_workspace(size_t bytes);

// Threads per block for the simple kernels, and a grid that covers n elements with a
// grid-stride loop (n > 0).
enum { CUDA_THREADS = 256 };
static inline unsigned cuda_grid(size_t n) {
  size_t b = (n + CUDA_THREADS - 1) / CUDA_THREADS;
  return (unsigned)(b < (1u << 20) ? b : (1u << 20));
}

// The op implementations, one file each area; kernels/cuda/backend.cu puts them in the table.
// blas_cuda.cu
void cuda_gemm(float *c, const float *a, const float *b, int M, int N, int K, int transa,
               int transb, float alpha, float beta);
void cuda_gemm_ld(float *c, const float *a, const float *b, int M, int N, int K, int transa, int transb, float alpha,
                  float beta, int lda, int ldb, int ldc);
void cuda_gemm_batched(float *c, const float *a, const float *b, int batch, size_t stride_c,
                       size_t stride_a, size_t stride_b, int M, int N, int K, int transa,
                       int transb, float alpha, float beta);
void cuda_matmul_half(int kind);
// out = in w^T + bias + res in one cuBLASLt product when it can (mixed precision, dimensions
// multiples of 8, 16-byte aligned pointers): 1 when done, 0 when the caller must do it
int cuda_linear_lt(float *out, const float *in, const float *w, const float *bias, const float *res, int N, int C,
                   int OC);
int cuda_matmul_half_kind(void); // 0 fp32, 1 bf16, 2 fp16
// flash_cuda.cu: fused causal attention on bf16 tensor cores (see attention_cuda.cu for when)
int cuda_flash_usable(int T, int C, int NH);
void cuda_flash_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH);
void cuda_flash_backward(float *dqkv, const float *dout, const float *qkv, const float *att, int B, int T, int C,
                         int NH);
// flash_mma.cu: the default kernels of the two above (head size 64), on mma.sync, and the
// floats of the fused path's cache (L, O, then the bf16 q, k, v the backward reads)
size_t cuda_flash_cache_floats(int B, int T, int C, int NH);
void cuda_flash_mma_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH);
void cuda_flash_mma_backward(float *dqkv, const float *dout, const float *qkv, const float *att, int B, int T, int C,
                             int NH);
// attention_cuda.cu
void cuda_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH);
void cuda_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                             const float *att, int B, int T, int C, int NH);
size_t cuda_attention_cache_floats(int B, int T, int C, int NH);
// ops_cuda.cu: fills every other entry of the table
void cuda_fill_table(kernels_ops *t);
// coll_cuda.cu: the device collectives over NCCL (kernels/coll.h), the table's coll entry
const struct kernels_coll *cuda_coll(void);

#endif
