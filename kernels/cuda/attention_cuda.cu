// kernels/cuda/attention_cuda.cu: causal multi-head self-attention core on the GPU.
//
// The same maths as kernels/cpu/attention_cpu.c. Per (batch b, head h), Q, K, V the [T, hs]
// slices of qkv (row stride 3C), A = softmax(scale * Q K^T + causal mask), scale = 1/sqrt(hs):
//   forward:  S = scale * Q K^T;  A = causal softmax of each row of S;  out_h = A V
//   backward: dA = dY V^T;  dS = A * (dA - rowsum(A * dA)) * scale (lower triangle, 0 above);
//             dQ = dS K;  dK = dS^T Q;  dV = A^T dY
// The four products of each pass run as cuBLAS strided batched GEMMs over the B*NH heads
// (cuda_gemm_batched: fp32, or bf16 / fp16 inputs with fp32 accumulation under matmul_half), on
// dense per-head copies: a split kernel copies qkv [B, T, 3, NH, hs] into q, k, v [B, NH, T, hs]
// and a merge kernel writes the results back in the caller's layout. The row kernels (causal
// softmax, its backward) are one block per row of A with fixed-order reductions, and the GEMMs
// are deterministic, so results repeat bit for bit.
//
// The GEMMs compute the whole T x T square and multiply the masked zeros of A and dS by later
// tokens' values: for finite inputs that adds exact zeros, but a NaN or Inf in a later token
// spreads to earlier rows of out and dqkv (0 * NaN), unlike the CPU table, whose loops stop at
// the diagonal. A itself stays exact: its rows read S only up to the diagonal. (An overflow is
// caught by the loss-scale check either way.)
//
// Under bf16 mixed precision (matmul_half(1)), shapes that flash_cuda.cu takes (head size 64,
// T > 64) run its fused kernels instead (the default since they were measured on a GPU: on an
// H200, GPT-2-124M at B=16 T=1024, attention forward and backward took 25 ms a step against these
// GEMMs' 69 ms); BRIGADE_CUDA_ATTENTION=gemm keeps the GEMMs. Fused: no T x T matrix in device
// memory, att then holds that path's cache (row log-sum-exps and the output), which only this
// table's attention_backward reads.
//
// Memory: att is the caller's (the layer keeps it for backward): B*NH*T*T floats, or under the
// fused path only its cache, as attention_cache_floats says (the layers size it that way). The workspace holds
// the per-head copies: 4 * B*T*C floats in forward; in backward dS (B*NH*T*T floats) plus
// 7 * B*T*C. attention_backward ignores the caller's scratch (sized for the CPU).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda.h"
#include "kernels/cuda/reduce.cuh"

enum { ROW_THREADS = 256 };

// Where element (row, c) of a token-layout matrix [B*T, C] lives in the head layout
// [B, NH, T, hs]: row = b*T + t, column c = h*hs + d.
__device__ inline size_t head_pos(size_t row, int c, int T, int C, int NH) {
  int hs = C / NH;
  size_t b = row / T, t = row % T;
  return ((b * NH + c / hs) * T + t) * hs + c % hs;
}

// qkv [B, T, 3C] -> q, k, v [B, NH, T, hs]; one thread per element of qkv (coalesced reads)
__global__ void k_split_qkv(float *q, float *k, float *v, const float *qkv, int T, int C, int NH,
                            size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t row = i / (3 * (size_t)C);
    int col = (int)(i % (3 * (size_t)C)), which = col / C;
    float *dst = which == 0 ? q : which == 1 ? k : v;
    dst[head_pos(row, col % C, T, C, NH)] = qkv[i];
  }
}

// the inverse: dq, dk, dv [B, NH, T, hs] -> dqkv [B, T, 3C] (every element written)
__global__ void k_merge_qkv(float *dqkv, const float *dq, const float *dk, const float *dv, int T,
                            int C, int NH, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t row = i / (3 * (size_t)C);
    int col = (int)(i % (3 * (size_t)C)), which = col / C;
    const float *src = which == 0 ? dq : which == 1 ? dk : dv;
    dqkv[i] = src[head_pos(row, col % C, T, C, NH)];
  }
}

// x [B, T, C] (token layout) -> y [B, NH, T, hs] (head layout)
__global__ void k_to_heads(float *y, const float *x, int T, int C, int NH, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    y[head_pos(i / C, (int)(i % C), T, C, NH)] = x[i];
}

// the inverse: y [B, NH, T, hs] -> x [B, T, C] (every element written)
__global__ void k_from_heads(float *x, const float *y, int T, int C, int NH, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    x[i] = y[head_pos(i / C, (int)(i % C), T, C, NH)];
}

// Block = one row (b, h, t) of S: in place, the causal softmax of s[0..t], zeros above the
// diagonal (entries above it are never read: they may hold anything).
__global__ void k_causal_softmax(float *att, int T) {
  __shared__ float sh[32];
  size_t row = blockIdx.x;
  int t = (int)(row % T);
  float *a = att + row * T;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j <= t; j += blockDim.x)
    mx = a[j] > mx ? a[j] : mx;
  mx = block_max(mx, sh);
  float sum = 0.0f;
  for (int j = threadIdx.x; j <= t; j += blockDim.x)
    sum += (a[j] = expf(a[j] - mx));
  sum = block_sum(sum, sh); // >= 1: the max term is exp(0)
  float inv = 1.0f / sum;
  for (int j = threadIdx.x; j < T; j += blockDim.x)
    a[j] = j <= t ? a[j] * inv : 0.0f;
}

// Block = one row (b, h, t): in place, dS = A * (dA - sum_{j<=t} A dA) * scale on the lower
// triangle, 0 above it (the products after this one read the whole row).
__global__ void k_softmax_backward(float *ds, const float *att, int T, float scale) {
  __shared__ float sh[32];
  size_t row = blockIdx.x;
  int t = (int)(row % T);
  float *r = ds + row * T;
  const float *a = att + row * T;
  float dot = 0.0f;
  for (int j = threadIdx.x; j <= t; j += blockDim.x)
    dot += a[j] * r[j];
  dot = block_sum(dot, sh);
  for (int j = threadIdx.x; j < T; j += blockDim.x)
    r[j] = j <= t ? a[j] * (r[j] - dot) * scale : 0.0f;
}

static void shape_check(const char *op, int C, int NH) {
  if (NH <= 0 || C % NH != 0)
    cuda_fail(op, __FILE__, __LINE__, "shape check", "C must be a multiple of NH");
}

// the fused kernels: asked for, bf16 mixed precision, and a shape they take (forward and
// backward decide alike, so backward reads the cache its forward wrote)
// The path attention_cache_floats last sized a cache for, for a shape the fused kernels take: -1
// none yet, 0 the GEMM path (B*NH*T*T floats), 1 the fused one (smaller than that for T >= 173,
// larger for T from 65 to 172 at head size 64). Neither cache holds the other path's data.
static int sized_path = -1;

static int use_flash_for(const char *op, int T, int C, int NH) {
  const char *e = getenv("BRIGADE_CUDA_ATTENTION");
  if (e && *e && strcmp(e, "flash") && strcmp(e, "gemm"))
    cuda_fail(op ? op : "attention_cache_floats", __FILE__, __LINE__, "BRIGADE_CUDA_ATTENTION",
              "is neither \"flash\" (the default) nor \"gemm\"");
  int usable = cuda_flash_usable(T, C, NH);
  int on = !(e && !strcmp(e, "gemm")) && cuda_matmul_half_kind() == 1 && usable;
  if (op && usable && sized_path >= 0 && on != sized_path)
    cuda_fail(op, __FILE__, __LINE__, "the attention cache",
              on ? "was sized for the GEMM path (fp32, or BRIGADE_CUDA_ATTENTION=gemm), and this call "
                   "would take the fused one: the precision or the environment changed after the "
                   "model's buffers were made"
                 : "was sized for the fused path (the default under bf16), which this call would "
                   "not take: the precision or the environment changed after the model's buffers were made");
  return on;
}
static int use_flash(int T, int C, int NH) { return use_flash_for(nullptr, T, C, NH); }

size_t cuda_attention_cache_floats(int B, int T, int C, int NH) {
  if (NH > 0 && C % NH == 0 && use_flash(T, C, NH)) {
    sized_path = 1;
    return cuda_flash_cache_floats(B, T, C, NH); // L, O, then bf16 q, k, v (flash_mma.cu)
  }
  if (cuda_flash_usable(T, C, NH)) sized_path = 0;
  return (size_t)B * NH * T * T;
}

void cuda_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
  shape_check("attention_forward", C, NH);
  if (B <= 0 || T <= 0) return;
  if (use_flash_for("attention_forward", T, C, NH)) {
    cuda_flash_forward(out, att, qkv, B, T, C, NH);
    return;
  }
  int hs = C / NH, heads = B * NH;
  size_t n = (size_t)B * T * C, th = (size_t)T * hs, tt = (size_t)T * T;
  unsigned rows = (unsigned)((size_t)heads * T);
  float scale = 1.0f / sqrtf((float)hs);
  float *q = (float *)cuda_workspace(sizeof(float) * 4 * n), *k = q + n, *v = k + n, *y = v + n;
  cudaStream_t s = cuda_stream();
  k_split_qkv<<<cuda_grid(3 * n), CUDA_THREADS, 0, s>>>(q, k, v, qkv, T, C, NH, 3 * n);
  LAUNCH_CHECK_OP("attention_forward");
  // S = scale * Q K^T into att, then the causal softmax in place
  cuda_gemm_batched(att, q, k, heads, tt, th, th, T, T, hs, 0, 1, scale, 0.0f);
  k_causal_softmax<<<rows, ROW_THREADS, 0, s>>>(att, T);
  LAUNCH_CHECK_OP("attention_forward");
  cuda_gemm_batched(y, att, v, heads, th, tt, th, T, hs, T, 0, 0, 1.0f, 0.0f); // Y = A V
  k_from_heads<<<cuda_grid(n), CUDA_THREADS, 0, s>>>(out, y, T, C, NH, n);
  LAUNCH_CHECK_OP("attention_forward");
}

void cuda_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                             const float *att, int B, int T, int C, int NH) {
  (void)scratch; // sized for the CPU; everything lives in the workspace here
  shape_check("attention_backward", C, NH);
  if (B <= 0 || T <= 0) return;
  if (use_flash_for("attention_backward", T, C, NH)) {
    cuda_flash_backward(dqkv, dout, qkv, att, B, T, C, NH);
    return;
  }
  int hs = C / NH, heads = B * NH;
  size_t n = (size_t)B * T * C, th = (size_t)T * hs, tt = (size_t)T * T;
  unsigned rows = (unsigned)((size_t)heads * T);
  float scale = 1.0f / sqrtf((float)hs);
  float *ds = (float *)cuda_workspace(sizeof(float) * ((size_t)heads * tt + 7 * n));
  float *q = ds + (size_t)heads * tt, *k = q + n, *v = k + n, *dy = v + n;
  float *dq = dy + n, *dk = dq + n, *dv = dk + n;
  cudaStream_t s = cuda_stream();
  k_split_qkv<<<cuda_grid(3 * n), CUDA_THREADS, 0, s>>>(q, k, v, qkv, T, C, NH, 3 * n);
  LAUNCH_CHECK_OP("attention_backward");
  k_to_heads<<<cuda_grid(n), CUDA_THREADS, 0, s>>>(dy, dout, T, C, NH, n);
  LAUNCH_CHECK_OP("attention_backward");
  cuda_gemm_batched(ds, dy, v, heads, tt, th, th, T, T, hs, 0, 1, 1.0f, 0.0f); // dA = dY V^T
  k_softmax_backward<<<rows, ROW_THREADS, 0, s>>>(ds, att, T, scale);
  LAUNCH_CHECK_OP("attention_backward");
  cuda_gemm_batched(dq, ds, k, heads, th, tt, th, T, hs, T, 0, 0, 1.0f, 0.0f);   // dQ = dS K
  cuda_gemm_batched(dk, ds, q, heads, th, tt, th, T, hs, T, 1, 0, 1.0f, 0.0f);   // dK = dS^T Q
  cuda_gemm_batched(dv, att, dy, heads, th, tt, th, T, hs, T, 1, 0, 1.0f, 0.0f); // dV = A^T dY
  k_merge_qkv<<<cuda_grid(3 * n), CUDA_THREADS, 0, s>>>(dqkv, dq, dk, dv, T, C, NH, 3 * n);
  LAUNCH_CHECK_OP("attention_backward");
}
