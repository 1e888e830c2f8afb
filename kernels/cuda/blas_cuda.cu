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
// with fp32 accumulation (CUBLAS_COMPUTE_32F); C stays fp32. BRIGADE_CUDA_HALF=fast hands cuBLAS
// the fp32 operands with CUBLAS_COMPUTE_32F_FAST_16BF / _FAST_16F instead, rounding them inside
// its own kernels (no copies); the two differ in the last bits, cuBLAS rounding its own way. On
// an H200 (make bench-gpu, GPT-2-124M, B=16 T=1024, bf16, 2026-11-26) the copies are the faster:
// 0.079 s/step against 0.084, cuBLAS's native 16-bit kernels (and cuBLASLt's, linear_forward)
// outrunning its FAST_16BF ones by more than the float4 conversions cost. (Before the
// conversions and cuBLASLt, fast had been the faster: 117,953 tokens/s against 98,099.) Large
// products with an odd dimension run padded (cuda_gemm_ld, below).
#include <cublasLt.h>
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
  if (e && *e && strcmp(e, "copy") && strcmp(e, "fast"))
    cuda_fail("matmul_half", __FILE__, __LINE__, "BRIGADE_CUDA_HALF", "is neither \"copy\" (the default) nor \"fast\"");
  hmode.kind = kind == 1 || kind == 2 ? kind : 0;
  hmode.fast = hmode.kind && e && !strcmp(e, "fast");
}
int cuda_matmul_half_kind(void) { return hmode.kind; }

// Grow-only device buffers: the 16-bit copies of the operands (the default under 16-bit) and the
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

__device__ inline uint32_t half_bits(float x, int bf) {
  return bf ? __bfloat16_as_ushort(__float2bfloat16_rn(x)) : __half_as_ushort(__float2half_rn(x));
}

// out[i] = in[i] rounded to bf16 (bf) or fp16. Groups g < v of four (in 16-byte aligned: a float4
// read, two 32-bit writes into out, which grow_buf keeps 256-byte aligned), then one by one: one
// float per thread left too few bytes in flight (see ops_cuda.cu's float4 kernels).
__global__ void k_to_half(uint16_t *out, const float *in, size_t n, size_t v, int bf) {
  for (size_t g = blockIdx.x * (size_t)blockDim.x + threadIdx.x; g < v; g += (size_t)gridDim.x * blockDim.x) {
    float4 a = reinterpret_cast<const float4 *>(in)[g];
    uint32_t *o = reinterpret_cast<uint32_t *>(out + 4 * g);
    o[0] = half_bits(a.x, bf) | half_bits(a.y, bf) << 16;
    o[1] = half_bits(a.z, bf) | half_bits(a.w, bf) << 16;
  }
  for (size_t i = 4 * v + blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    out[i] = (uint16_t)half_bits(in[i], bf);
}

// n floats at x as bf16 / fp16 (hmode.kind) in buffer k
static const void *as_half(int k, const float *x, size_t n, const char *op) {
  uint16_t *b = half_buffer(k, n ? n : 1, op);
  if (n) {
    size_t v = ((uintptr_t)x & 15u) ? 0 : n / 4, t = n - 4 * v;
    k_to_half<<<cuda_grid(v > t ? v : t), CUDA_THREADS, 0, cuda_stream()>>>(b, x, n, v, hmode.kind == 1);
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

// dst [dr, dc] = src [sr, sc] (rows of sld floats; dr >= sr, dc >= sc) in its top-left corner,
// zeros around it
__global__ void k_pad_copy(float *dst, size_t dr, size_t dc, const float *src, size_t sr, size_t sc, size_t sld) {
  size_t n = dr * dc;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    size_t r = i / dc, c = i % dc;
    dst[i] = r < sr && c < sc ? src[r * sld + c] : 0.0f;
  }
}
// dst [dr, dc] (rows of dld floats) = the top-left corner of src (rows of sc floats)
__global__ void k_crop_copy(float *dst, size_t dr, size_t dc, size_t dld, const float *src, size_t sc) {
  size_t n = dr * dc;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    dst[i / dc * dld + i % dc] = src[i / dc * sc + i % dc];
}

// The product as given, with the row-major leading dimensions (each operand's stored row length)
static void gemm_plain(float *c, const float *a, const float *b, int M, int N, int K, int transa, int transb,
                       float alpha, float beta, int lda, int ldb, int ldc) {
  cublasOperation_t opa = transa ? CUBLAS_OP_T : CUBLAS_OP_N,
                    opb = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
  lda = max1(lda), ldb = max1(ldb), ldc = max1(ldc);
  if (hmode.kind) {
    const void *ah = a, *bh = b;
    if (!hmode.fast) { // the copies keep the operands' row lengths (the last row without its padding)
      int ra = transa ? K : M, ca = transa ? M : K, rb = transb ? N : K, cb = transb ? K : N;
      ah = as_half(0, a, (size_t)(ra - 1) * lda + ca, "gemm");
      bh = as_half(1, b, (size_t)(rb - 1) * ldb + cb, "gemm");
    }
    cublasStatus_t s = cublasGemmEx(cuda_blas(), opb, opa, N, M, K, &alpha, bh, half_type(), ldb, ah, half_type(),
                                    lda, &beta, c, CUDA_R_32F, ldc, half_compute(), CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS)
      cuda_fail("gemm", __FILE__, __LINE__, "cublasGemmEx (16-bit)", cublasGetStatusString(s));
    return;
  }
  cublasStatus_t s =
      cublasSgemm(cuda_blas(), opb, opa, N, M, K, &alpha, b, ldb, a, lda, &beta, c, ldc);
  if (s != CUBLAS_STATUS_SUCCESS)
    cuda_fail("gemm", __FILE__, __LINE__, "cublasSgemm", cublasGetStatusString(s));
}

// An operand stored [r, c] in rows of ld floats, as a [pr, pc] matrix: x itself when its rows
// already reach pc floats (its padding, zeros by gemm_ld's contract, or nothing to pad) and no
// row is missing; else a zero-padded copy in pad buffer k (rows of pc floats). *pld: the result's
// row length.
static const float *padded(int k, const float *x, int r, int c, int ld, int pr, int pc, int *pld) {
  if (r == pr && ld >= pc) {
    *pld = ld;
    return x;
  }
  float *t = pad_buffer(k, (size_t)pr * pc, "gemm");
  k_pad_copy<<<cuda_grid((size_t)pr * pc), CUDA_THREADS, 0, cuda_stream()>>>(t, (size_t)pr, (size_t)pc, x, (size_t)r,
                                                                             (size_t)c, (size_t)ld);
  LAUNCH_CHECK_OP("gemm");
  *pld = pc;
  return t;
}

void cuda_gemm_ld(float *c, const float *a, const float *b, int M, int N, int K, int transa, int transb, float alpha,
                  float beta, int lda, int ldb, int ldc) {
  if (M <= 0 || N <= 0) return; // nothing to write
  if (K <= 0) {
    if (ldc == N) empty_product("gemm", c, (size_t)M * N, beta);
    else
      for (int i = 0; i < M; i++) empty_product("gemm", c + (size_t)i * ldc, (size_t)N, beta);
    return;
  }
  int Mp = pad_dim(M), Np = pad_dim(N), Kp = pad_dim(K);
  if ((double)M * N * K < PAD_MIN || (M % 8 == 0 && N % 8 == 0 && K % 8 == 0)) {
    gemm_plain(c, a, b, M, N, K, transa, transb, alpha, beta, lda, ldb, ldc);
    return;
  }
  int pa, pb, pcl;
  const float *ap = transa ? padded(0, a, K, M, lda, Kp, Mp, &pa) : padded(0, a, M, K, lda, Mp, Kp, &pa);
  const float *bp = transb ? padded(1, b, N, K, ldb, Np, Kp, &pb) : padded(1, b, K, N, ldb, Kp, Np, &pb);
  float *cp = c;
  pcl = ldc;
  if (M != Mp || ldc < Np) { // C's copy (read when beta != 0); the pads' results are dropped
    cp = pad_buffer(2, (size_t)Mp * Np, "gemm");
    pcl = Np;
    if (beta != 0.0f) {
      k_pad_copy<<<cuda_grid((size_t)Mp * Np), CUDA_THREADS, 0, cuda_stream()>>>(cp, (size_t)Mp, (size_t)Np, c,
                                                                                 (size_t)M, (size_t)N, (size_t)ldc);
      LAUNCH_CHECK_OP("gemm");
    }
  }
  gemm_plain(cp, ap, bp, Mp, Np, Kp, transa, transb, alpha, beta, pa, pb, pcl);
  if (cp != c) {
    k_crop_copy<<<cuda_grid((size_t)M * N), CUDA_THREADS, 0, cuda_stream()>>>(c, (size_t)M, (size_t)N, (size_t)ldc, cp,
                                                                              (size_t)Np);
    LAUNCH_CHECK_OP("gemm");
  }
}

void cuda_gemm(float *c, const float *a, const float *b, int M, int N, int K, int transa,
               int transb, float alpha, float beta) {
  cuda_gemm_ld(c, a, b, M, N, K, transa, transb, alpha, beta, transa ? M : K, transb ? K : N, N);
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

// ---- a linear layer's forward in one cuBLASLt call: out = in w^T + bias + res ----
// Under mixed precision (matmul_half 1 or 2) the bias and the residual ride in the product's
// epilogue (CUBLASLT_EPILOGUE_BIAS; the residual as C with beta = 1, D = out), so neither
// costs a pass over out of its own; on an H200 the separate bias add alone took 5 ms of
// GPT-2-124M's 107 ms step. Column-major, as in gemm_plain: out^T [OC, N] = w (stored [C, OC]
// column-major, transposed) times in^T (stored [C, N]). Products whose dimensions are not all
// multiples of 8, pointers less than 16-byte aligned, fp32 mode, or shapes cuBLASLt finds no
// algorithm for take the plain path (cuda_linear_lt returns 0 and the caller runs gemm, bias
// add, axpy); BRIGADE_CUDA_LINEAR=plain in the environment (read at the first call) takes it
// always. One plan per shape and alignment is kept (descriptors and the algorithm), so the
// heuristic runs once per shape.

enum { LT_PLANS = 128 }; // shapes x alignments x modes (a GPT block has 4 shapes)
static const size_t LT_WORKSPACE = (size_t)32 << 20; // cuBLAS's recommendation for Hopper
typedef struct {
  int N, C, OC, bias, kind, fast, align, ok; // the key, then ok: 1 usable, 0 no algorithm
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t a, b, cd;
  cublasLtMatmulAlgo_t algo;
} lt_plan;
static struct {
  cublasLtHandle_t h;
  int tried, n;
  lt_plan plan[LT_PLANS];
  grow_buf ws;
} lt;

// the largest power of two (<= 256) that divides every address
static int common_alignment(const void *const *p, int n) {
  uintptr_t bits = 256;
  for (int i = 0; i < n; i++)
    if (p[i]) bits |= (uintptr_t)p[i];
  return (int)(bits & (~bits + 1));
}

// A cuBLASLt set-up call: true on success, false when cuBLASLt does not support the case (the
// plain path then); any other status is a mistake here (a layout that does not fit, say): fatal
static bool lt_ok_at(cublasStatus_t s, int line, const char *call) {
  if (s == CUBLAS_STATUS_SUCCESS) return true;
  if (s == CUBLAS_STATUS_NOT_SUPPORTED) return false;
  cuda_fail("linear_forward", __FILE__, line, call, cublasGetStatusString(s));
}
#define lt_ok(call) lt_ok_at((call), __LINE__, #call)

static lt_plan *lt_find(int N, int C, int OC, int bias, int align) {
  for (int i = 0; i < lt.n; i++) {
    lt_plan *p = &lt.plan[i];
    if (p->N == N && p->C == C && p->OC == OC && p->bias == bias && p->kind == hmode.kind && p->fast == hmode.fast &&
        p->align == align)
      return p;
  }
  if (lt.n == LT_PLANS) return nullptr; // this many shapes: the rest go the plain way (correct, slower)
  lt_plan *p = &lt.plan[lt.n++];
  *p = {N, C, OC, bias, hmode.kind, hmode.fast, align, 0, nullptr, nullptr, nullptr, nullptr, {}};
  cudaDataType ab = half_type();
  cublasOperation_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
  cublasLtEpilogue_t epi = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  uint64_t ws = LT_WORKSPACE;
  uint32_t al = (uint32_t)align;
  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtMatmulHeuristicResult_t r = {};
  int found = 0;
  int ok = lt_ok(cublasLtMatmulDescCreate(&p->desc, half_compute(), CUDA_R_32F)) &&
           lt_ok(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t)) &&
           lt_ok(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof n)) &&
           lt_ok(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi)) &&
           lt_ok(cublasLtMatrixLayoutCreate(&p->a, ab, (uint64_t)C, (uint64_t)OC, (int64_t)C)) &&
           lt_ok(cublasLtMatrixLayoutCreate(&p->b, ab, (uint64_t)C, (uint64_t)N, (int64_t)C)) &&
           lt_ok(cublasLtMatrixLayoutCreate(&p->cd, CUDA_R_32F, (uint64_t)OC, (uint64_t)N, (int64_t)OC)) &&
           lt_ok(cublasLtMatmulPreferenceCreate(&pref)) &&
           lt_ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws)) &&
           lt_ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof al)) &&
           lt_ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, sizeof al)) &&
           lt_ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, sizeof al)) &&
           lt_ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof al)) &&
           lt_ok(cublasLtMatmulAlgoGetHeuristic(lt.h, p->desc, p->a, p->b, p->cd, p->cd, pref, 1, &r, &found)) &&
           found > 0;
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  if (ok) {
    p->algo = r.algo;
    p->ok = 1;
  }
  return p;
}

int cuda_linear_lt(float *out, const float *in, const float *w, const float *bias, const float *res, int N, int C,
                   int OC) {
  if (!hmode.kind || N <= 0 || C <= 0 || OC <= 0 || N % 8 || C % 8 || OC % 8) return 0;
  const void *ptrs[] = {out, in, w, bias, res};
  int align = common_alignment(ptrs, 5);
  if (align < 16) return 0;
  if (!lt.tried) {
    lt.tried = 1;
    const char *e = getenv("BRIGADE_CUDA_LINEAR");
    if (e && *e && strcmp(e, "lt") && strcmp(e, "plain"))
      cuda_fail("linear_forward", __FILE__, __LINE__, "BRIGADE_CUDA_LINEAR", "is neither \"lt\" (the default) nor \"plain\"");
    if ((e && !strcmp(e, "plain")) || cublasLtCreate(&lt.h) != CUBLAS_STATUS_SUCCESS)
      lt.h = nullptr; // the plain path: gemm, bias add, axpy
  }
  if (!lt.h) return 0;
  lt_plan *p = lt_find(N, C, OC, bias != nullptr, align);
  if (!p || !p->ok) return 0;
  if (bias) CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  const void *wa = w, *ib = in;
  if (!hmode.fast) wa = as_half(0, w, (size_t)OC * C, "linear_forward"), ib = as_half(1, in, (size_t)N * C, "linear_forward");
  void *ws = grow(&lt.ws, LT_WORKSPACE, "linear_forward");
  float one = 1.0f, beta = res ? 1.0f : 0.0f;
  cublasStatus_t s = cublasLtMatmul(lt.h, p->desc, &one, wa, p->a, ib, p->b, &beta, res ? res : out, p->cd, out, p->cd,
                                    &p->algo, ws, LT_WORKSPACE, cuda_stream());
  if (s != CUBLAS_STATUS_SUCCESS)
    cuda_fail("linear_forward", __FILE__, __LINE__, "cublasLtMatmul", cublasGetStatusString(s));
  return 1;
}
