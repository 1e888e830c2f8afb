// kernels/cuda/blas_cuda.cu: GEMM and strided batched GEMM through cuBLAS.
//
// The op table is row-major; cuBLAS is column-major. A row-major [R, S] matrix with leading
// dimension S is, read column-major, its transpose [S, R] with the same leading dimension. So
// row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: call cuBLAS with the
// operands swapped (B first, then A) and M, N swapped; each operand keeps its own transpose
// flag, and the leading dimensions are the row-major ones (the stored matrix's column count).
// Math mode: see backend.cu (full fp32 by default, no TF32). With matmul_half(1) (bf16 mixed
// precision) or matmul_half(2) (fp16), A and B are rounded to bf16 / fp16 into two grow-only
// device buffers and multiplied by cublasGemmEx / cublasGemmStridedBatchedEx on tensor cores
// with fp32 accumulation (CUBLAS_COMPUTE_32F); C stays fp32. By default ("fast") cuBLAS is handed
// the fp32 operands with CUBLAS_COMPUTE_32F_FAST_16BF / _FAST_16F instead, rounding them inside
// its own kernels (no copies, no extra passes over memory); BRIGADE_CUDA_HALF=copy takes the
// copies. On an H200 (bench/train_step, GPT-2-124M, B=16 T=1024, bf16) fast gave 117,953
// tokens/s against 98,099 with the copies; the two differ in the last bits (losses within 5e-5
// relative over 4 steps), cuBLAS rounding its own way. Large products with an odd dimension
// run padded (cuda_gemm, below).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda.h"

static int max1(int x) { return x > 1 ? x : 1; }

// kind 0: fp32; 1: bf16; 2: fp16. fast: fp32 operands with a FAST_16BF / FAST_16F compute type.
static struct {
  int kind, fast;
} hmode;
void cuda_matmul_half(int kind) {
  const char *e = getenv("BRIGADE_CUDA_HALF");
  hmode.kind = kind == 1 || kind == 2 ? kind : 0;
  hmode.fast = hmode.kind && !(e && !strcmp(e, "copy"));
}
int cuda_matmul_half_kind(void) { return hmode.kind; }

// Grow-only device buffers: the 16-bit copies of the operands (BRIGADE_CUDA_HALF=copy) and the
// padded copies (cuda_gemm). Growing waits for the stream before it frees the old buffer, as
// cuda_workspace does: CUDA documents only that cudaFree *may* synchronise, and a GEMM or
// conversion queued before still reads it.
typedef struct {
  void *p;
  size_t cap; // bytes
} grow_buf;
static void *grow(grow_buf *b, size_t bytes, const char *op) {
  if (bytes > b->cap) {
    if (b->p) {
      CUDA_CHECK_OP(op, cudaStreamSynchronize(cuda_stream()));
      CUDA_CHECK_OP(op, cudaFree(b->p));
    }
    b->p = nullptr;
    CUDA_CHECK_OP(op, cudaMalloc(&b->p, bytes));
    b->cap = bytes;
  }
  return b->p;
}
static grow_buf h_buf[2]; // A's and B's 16-bit copies
static uint16_t *half_buffer(int k, size_t n, const char *op) {
  return (uint16_t *)grow(&h_buf[k], n * sizeof(uint16_t), op);
}

__global__ void k_to_bf16(__nv_bfloat16 *out, const float *in, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    out[i] = __float2bfloat16_rn(in[i]);
}

__global__ void k_to_fp16(__half *out, const float *in, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    out[i] = __float2half_rn(in[i]);
}

// n floats at x as bf16 / fp16 (hmode.kind) in buffer k
static const void *as_half(int k, const float *x, size_t n, const char *op) {
  uint16_t *b = half_buffer(k, n ? n : 1, op);
  if (n) {
    if (hmode.kind == 1)
      k_to_bf16<<<cuda_grid(n), CUDA_THREADS, 0, cuda_stream()>>>((__nv_bfloat16 *)b, x, n);
    else
      k_to_fp16<<<cuda_grid(n), CUDA_THREADS, 0, cuda_stream()>>>((__half *)b, x, n);
    LAUNCH_CHECK_OP(op);
  }
  return b;
}

// The data type of the operands cuBLAS reads and the compute type, for the current mode
static cudaDataType half_type(void) {
  return hmode.fast ? CUDA_R_32F : hmode.kind == 1 ? CUDA_R_16BF : CUDA_R_16F;
}
static cublasComputeType_t half_compute(void) {
  if (!hmode.fast) return CUBLAS_COMPUTE_32F;
  return hmode.kind == 1 ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F_FAST_16F;
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

// Odd sizes. cuBLAS runs a large product with a dimension that is not a multiple of 8 (GPT-2's
// vocabulary, 50257, in the LM head's three products) on kernels two to six times slower than
// the same product padded: on an H200 (bench/gemm_shapes, bf16, 16384 tokens) the head's forward
// ran at 129 TFLOP/s with N = 50257 and 413 with N = 50304; backward input 130 and 423, backward
// weight 118 and 266. (Padding only the rows' length, keeping N, did not help: measured.) So a
// product of PAD_MIN multiply-adds or more with an odd dimension runs on copies padded to
// multiples of PAD_TO, the pads zero (a padded K adds 0 * 0), the result's rows and columns that
// exist copied back; A, B and C are copied only where their stored shape changes (the head's
// forward copies its weight and its logits, backward its logits' gradient once per product).
// Costs grow-only device buffers, up to the largest padded operand of each role. Measured on the
// H200 with the copies: the head's products at 223/222/168 TFLOP/s, GPT-2-124M's bf16 step (B=16,
// T=1024) 0.118 -> 0.107 s.
enum { PAD_TO = 64 };
static const double PAD_MIN = 16777216.0; // 2^24 multiply-adds
static int pad_dim(int n) { return (n + PAD_TO - 1) / PAD_TO * PAD_TO; }

static grow_buf p_buf[3]; // A's, B's and C's padded copies
static float *pad_buffer(int k, size_t n, const char *op) { return (float *)grow(&p_buf[k], n * sizeof(float), op); }

// dst [dr, dc] = src [sr, sc] (dr >= sr, dc >= sc) in its top-left corner, zeros around it
__global__ void k_pad_copy(float *dst, size_t dr, size_t dc, const float *src, size_t sr, size_t sc) {
  size_t n = dr * dc;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    size_t r = i / dc, c = i % dc;
    dst[i] = r < sr && c < sc ? src[r * sc + c] : 0.0f;
  }
}
// dst [dr, dc] = the top-left corner of src [sr, sc] (sr >= dr, sc >= dc)
__global__ void k_crop_copy(float *dst, size_t dr, size_t dc, const float *src, size_t sc) {
  size_t n = dr * dc;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    dst[i] = src[i / dc * sc + i % dc];
}

// The product as given (row-major leading dimensions: each operand's stored row length)
static void gemm_plain(float *c, const float *a, const float *b, int M, int N, int K, int transa, int transb,
                       float alpha, float beta) {
  cublasOperation_t opa = transa ? CUBLAS_OP_T : CUBLAS_OP_N,
                    opb = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
  int lda = max1(transa ? M : K), ldb = max1(transb ? K : N);
  if (hmode.kind) {
    const void *ah = a, *bh = b;
    if (!hmode.fast) ah = as_half(0, a, (size_t)M * K, "gemm"), bh = as_half(1, b, (size_t)K * N, "gemm");
    cublasStatus_t s = cublasGemmEx(cuda_blas(), opb, opa, N, M, K, &alpha, bh, half_type(), ldb, ah, half_type(),
                                    lda, &beta, c, CUDA_R_32F, N, half_compute(), CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS)
      cuda_fail("gemm", __FILE__, __LINE__, "cublasGemmEx (16-bit)", cublasGetStatusString(s));
    return;
  }
  cublasStatus_t s =
      cublasSgemm(cuda_blas(), opb, opa, N, M, K, &alpha, b, ldb, a, lda, &beta, c, N);
  if (s != CUBLAS_STATUS_SUCCESS)
    cuda_fail("gemm", __FILE__, __LINE__, "cublasSgemm", cublasGetStatusString(s));
}

// x stored [r, c] into pad buffer k as [pr, pc], or x itself when nothing changes
static const float *padded(int k, const float *x, int r, int c, int pr, int pc) {
  if (r == pr && c == pc) return x;
  float *t = pad_buffer(k, (size_t)pr * pc, "gemm");
  k_pad_copy<<<cuda_grid((size_t)pr * pc), CUDA_THREADS, 0, cuda_stream()>>>(t, (size_t)pr, (size_t)pc, x, (size_t)r,
                                                                             (size_t)c);
  LAUNCH_CHECK_OP("gemm");
  return t;
}

void cuda_gemm(float *c, const float *a, const float *b, int M, int N, int K, int transa,
               int transb, float alpha, float beta) {
  if (M <= 0 || N <= 0) return; // nothing to write
  if (K <= 0) {
    empty_product("gemm", c, (size_t)M * N, beta);
    return;
  }
  int Mp = pad_dim(M), Np = pad_dim(N), Kp = pad_dim(K);
  if ((double)M * N * K < PAD_MIN || (M % 8 == 0 && N % 8 == 0 && K % 8 == 0)) {
    gemm_plain(c, a, b, M, N, K, transa, transb, alpha, beta);
    return;
  }
  const float *ap = transa ? padded(0, a, K, M, Kp, Mp) : padded(0, a, M, K, Mp, Kp);
  const float *bp = transb ? padded(1, b, N, K, Np, Kp) : padded(1, b, K, N, Kp, Np);
  float *cp = c;
  if (Mp != M || Np != N) { // beta != 0 reads C: its copy; the pads' results are dropped
    cp = pad_buffer(2, (size_t)Mp * Np, "gemm");
    if (beta != 0.0f) {
      k_pad_copy<<<cuda_grid((size_t)Mp * Np), CUDA_THREADS, 0, cuda_stream()>>>(cp, (size_t)Mp, (size_t)Np, c,
                                                                                 (size_t)M, (size_t)N);
      LAUNCH_CHECK_OP("gemm");
    }
  }
  gemm_plain(cp, ap, bp, Mp, Np, Kp, transa, transb, alpha, beta);
  if (cp != c) {
    k_crop_copy<<<cuda_grid((size_t)M * N), CUDA_THREADS, 0, cuda_stream()>>>(c, (size_t)M, (size_t)N, cp,
                                                                              (size_t)Np);
    LAUNCH_CHECK_OP("gemm");
  }
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
  if (hmode.kind) { // each operand converted over its whole span (a stride of 0 shares one matrix)
    const void *ah = a, *bh = b;
    if (!hmode.fast) {
      size_t na = (size_t)(batch - 1) * stride_a + (size_t)M * K, nb = (size_t)(batch - 1) * stride_b + (size_t)K * N;
      ah = as_half(0, a, na, "gemm_batched"), bh = as_half(1, b, nb, "gemm_batched");
    }
    cublasStatus_t s = cublasGemmStridedBatchedEx(
        cuda_blas(), opb, opa, N, M, K, &alpha, bh, half_type(), ldb, (long long)stride_b, ah, half_type(), lda,
        (long long)stride_a, &beta, c, CUDA_R_32F, N, (long long)stride_c, batch, half_compute(), CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS)
      cuda_fail("gemm_batched", __FILE__, __LINE__, "cublasGemmStridedBatchedEx (16-bit)", cublasGetStatusString(s));
    return;
  }
  cublasStatus_t s = cublasSgemmStridedBatched(cuda_blas(), opb, opa, N, M, K, &alpha, b, ldb,
                                               (long long)stride_b, a, lda, (long long)stride_a,
                                               &beta, c, N, (long long)stride_c, batch);
  if (s != CUBLAS_STATUS_SUCCESS)
    cuda_fail("gemm_batched", __FILE__, __LINE__, "cublasSgemmStridedBatched",
              cublasGetStatusString(s));
}
