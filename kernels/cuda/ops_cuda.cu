// kernels/cuda/ops_cuda.cu: every op of the table except GEMM (blas_cuda.cu), attention
// (attention_cuda.cu) and memory (backend.cu), as CUDA kernels with the CPU table's semantics
// (kernels/cpu/ops_cpu.c is the reference; kernels/ops.h the contract).
//
// Determinism: no float atomics anywhere. Sums over rows (bias and LayerNorm weight gradients)
// run in two passes: fixed chunks of rows into a partial per (chunk, column), then the
// partials in chunk order; the chunking depends only on the shape. Row reductions (LayerNorm,
// softmax) use fixed shuffle trees. Embedding gradients add rows in (b, t) order, as the CPU
// does, so they match it bit for bit. The results differ from the CPU's in the last bits
// where the summation order differs (reductions) or the math library does (expf, tanhf: CUDA's
// are within 2 ulp), and nvcc contracts a*b+c into FMAs.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>

#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/cuda.h"
#include "kernels/cuda/reduce.cuh"

#define GRID_STRIDE(i, n)                                                                          \
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);                          \
       i += (size_t)gridDim.x * blockDim.x)

// Launch an element-wise kernel over n elements (nothing when n is 0) and check the launch;
// the op named in an error is the calling function (named like the table entry).
#define LAUNCH_N(kernel, n, ...)                                                                   \
  do {                                                                                             \
    size_t n_ = (n);                                                                               \
    if (n_ == 0) break;                                                                            \
    kernel<<<cuda_grid(n_), CUDA_THREADS, 0, cuda_stream()>>>(__VA_ARGS__);                        \
    LAUNCH_CHECK();                                                                                \
  } while (0)

static size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }

// ---- low precision: CUDA's round-to-nearest-even conversions; NaNs made exactly as the CPU
// table makes them (kernels/convert.c), so every result is the same bits ----

__device__ inline uint16_t d_f32_to_bf16(float x) {
  uint32_t u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); // quiet NaN
  return __bfloat16_as_ushort(__float2bfloat16_rn(x)); // RNE; past the range: +-Inf
}

__device__ inline float d_bf16_to_f32(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

__device__ inline uint16_t d_f32_to_f16(float x) {
  uint32_t u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)(((u >> 16) & 0x8000u) | 0x7e00u);
  return __half_as_ushort(__float2half_rn(x)); // RNE; |x| >= 65520 gives +-Inf
}

__device__ inline float d_f16_to_f32(uint16_t h) {
  if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu)) // NaN: keep sign and payload, as the CPU
    return __uint_as_float(((uint32_t)(h & 0x8000u) << 16) | 0x7f800000u |
                           ((uint32_t)(h & 0x3ffu) << 13));
  return __half2float(__ushort_as_half(h)); // exact
}

// x rounded to bf16 (kind 1) or fp16 (kind 2) and back, as kernels_round; else x
__device__ inline float d_round(float x, int kind) {
  return kind == 1 ? d_bf16_to_f32(d_f32_to_bf16(x)) : kind == 2 ? d_f16_to_f32(d_f32_to_f16(x)) : x;
}

// ---- float4: the element-wise kernels' memory traffic ----
// One float per thread leaves too few bytes in flight to fill a GPU's memory: on an H200 the
// element-wise ops of GPT-2-124M's step (bench/train_step) moved about 2.2 TB/s of its 4.8. So
// the memory-bound kernels below move float4s: groups g < v cover elements 0 .. 4v-1, where v is
// n / 4 when every pointer the kernel touches is 16-byte aligned (vec_groups) and 0 otherwise;
// single floats cover the rest (TAIL). Each element gets the same arithmetic either way, so the
// results do not depend on the path.
static bool a16(const void *p) { return ((uintptr_t)p & 15u) == 0; }
template <typename... P> static bool a16_all(P... p) { return (a16(p) && ...); }
template <typename... P> static size_t vec_groups(size_t n, P... p) { return a16_all(p...) ? n / 4 : 0; }
// threads for v groups and the n - 4v single elements after them
static unsigned vec_grid(size_t n, size_t v) {
  size_t t = n - 4 * v;
  return cuda_grid(v > t ? v : t);
}
#define LD4(p, g) (reinterpret_cast<const float4 *>(p)[g])
#define ST4(p, g) (reinterpret_cast<float4 *>(p)[g])
#define MAP4(f, a) make_float4(f((a).x), f((a).y), f((a).z), f((a).w))
#define MAP4B(f, a, b) make_float4(f((a).x, (b).x), f((a).y, (b).y), f((a).z, (b).z), f((a).w, (b).w))
#define TAIL(i, v, n)                                                                              \
  for (size_t i = 4 * (v) + blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);                \
       i += (size_t)gridDim.x * blockDim.x)
// Launch a float4 kernel: its arguments end with (n, v); nothing when n is 0
#define LAUNCH_V(kernel, n, v, ...)                                                                \
  do {                                                                                             \
    size_t n_ = (n), v_ = (v);                                                                     \
    if (n_ == 0) break;                                                                            \
    kernel<<<vec_grid(n_, v_), CUDA_THREADS, 0, cuda_stream()>>>(__VA_ARGS__, n_, v_);             \
    LAUNCH_CHECK();                                                                                \
  } while (0)

// ---- bias ----

// float4 groups when C is a multiple of 4 (a group then never straddles two rows); the group's
// column in 32 bits (a 64-bit remainder per element cost as much as the memory traffic)
__global__ void k_bias_add(float *out, const float *bias, unsigned C, size_t n, size_t v) {
  unsigned C4 = C / 4;
  GRID_STRIDE(g, v) {
    float4 o = LD4(out, g), b = LD4(bias, (unsigned)g % C4);
    o.x += b.x, o.y += b.y, o.z += b.z, o.w += b.w;
    ST4(out, g) = o;
  }
  TAIL(i, v, n) out[i] += bias[i % C];
}

static void bias_add(float *out, const float *bias, int N, int C) {
  if (N <= 0 || C <= 0) return;
  size_t n = (size_t)N * C, v = C % 4 == 0 && n / 4 <= UINT32_MAX ? vec_groups(n, out, bias) : 0;
  LAUNCH_V(k_bias_add, n, v, out, bias, (unsigned)C);
}

static void axpy(float *y, float a, const float *x, size_t n);

// A linear layer's forward: one cuBLASLt product with the bias and residual in its epilogue, or
// (fp32, odd shapes) the product, then the bias, then the residual, as the CPU table
static void linear_forward(float *out, const float *in, const float *w, const float *bias, const float *res, int N,
                           int C, int OC) {
  if (cuda_linear_lt(out, in, w, bias, res, N, C, OC)) return;
  cuda_gemm(out, in, w, N, OC, C, 0, 1, 1.0f, 0.0f);
  if (bias) bias_add(out, bias, N, OC);
  if (res && N > 0 && OC > 0) axpy(out, 1.0f, res, (size_t)N * OC);
}

// Column sums in two passes. Rows are cut into `chunks` chunks of `rows` rows (the last may be
// shorter); pass 1 sums each chunk's rows in order per column; pass 2 adds the chunk sums to the
// output (+=), one warp a column: lane i sums chunks i, i + 32, ... in order, then the lanes'
// sums go through warp_sum's fixed tree. (Before, one thread a column read its 512 chunk sums
// one after another: 3 blocks for C = 768, bound by memory latency. On an H200 a GPT-2-124M step's
// 48 bias gradients took 2.7 ms; this form is not measured on a GPU yet.)
struct colsum_plan {
  int rows, chunks;
};

static colsum_plan plan_colsum(int N) {
  int chunks = (N + 31) / 32;
  if (chunks > 512) chunks = 512;
  int rows = (N + chunks - 1) / chunks;
  return {rows, (N + rows - 1) / rows};
}

// vec: C a multiple of 4 and dout 16-byte aligned; a thread then sums 4 columns, float4 by float4
// (the same additions in the same order per column)
__global__ void k_bias_grad_partial(float *partial, const float *dout, int N, int C, int rows, int vec) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  int n0 = blockIdx.y * rows, n1 = min(N, n0 + rows);
  if (vec) {
    if (4 * c >= C) return;
    float4 s = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 8
    for (int n = n0; n < n1; n++) { // unrolled: eight rows' loads in flight, added in row order
      float4 d = LD4(dout + (size_t)n * C, c);
      s.x += d.x, s.y += d.y, s.z += d.z, s.w += d.w;
    }
    float *p = partial + (size_t)blockIdx.y * C + 4 * c;
    p[0] = s.x, p[1] = s.y, p[2] = s.z, p[3] = s.w;
    return;
  }
  if (c >= C) return;
  float s = 0.0f;
  for (int n = n0; n < n1; n++)
    s += dout[(size_t)n * C + c];
  partial[(size_t)blockIdx.y * C + c] = s;
}

__global__ void k_colsum_finish(float *out, const float *partial, int chunks, int C) {
  int c = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (c >= C) return; // the whole warp: warp_sum below sees all 32 lanes
  float s = 0.0f;
  for (int k = lane; k < chunks; k += 32)
    s += partial[(size_t)k * C + c];
  s = warp_sum(s);
  if (lane == 0) out[c] += s;
}

static unsigned col_blocks(int C) { return (unsigned)((C + CUDA_THREADS - 1) / CUDA_THREADS); }
static unsigned warp_col_blocks(int C) { return (unsigned)((C + CUDA_THREADS / 32 - 1) / (CUDA_THREADS / 32)); }

static void bias_grad(float *dbias, const float *dout, int N, int C) {
  if (N <= 0 || C <= 0) return;
  colsum_plan p = plan_colsum(N);
  float *partial = (float *)cuda_workspace(sizeof(float) * (size_t)p.chunks * C);
  int vec = C % 4 == 0 && a16_all(dout);
  k_bias_grad_partial<<<dim3(col_blocks(vec ? C / 4 : C), p.chunks), CUDA_THREADS, 0, cuda_stream()>>>(
      partial, dout, N, C, p.rows, vec);
  LAUNCH_CHECK();
  k_colsum_finish<<<warp_col_blocks(C), CUDA_THREADS, 0, cuda_stream()>>>(dbias, partial, p.chunks, C);
  LAUNCH_CHECK();
}

// ---- activations ----

#define GELU_K 0.7978845608028654f // sqrt(2/pi)
#define GELU_A 0.044715f

// The CPU table's formula: x sigmoid(2u) = x / (1 + exp(-2u)), u = k (x + a x^3), the same
// function as 0.5 x (1 + tanh u) with one expf (see kernels/cpu/ops_cpu.c)
__device__ inline float gelu_s(float x) { return 1.0f / (1.0f + expf(-2.0f * GELU_K * (x + GELU_A * x * x * x))); }

__device__ inline float gelu_f(float x) { return x * gelu_s(x); }
__device__ inline float gelu_b(float x, float dy) {
  float s = gelu_s(x), du = GELU_K * (1.0f + 3.0f * GELU_A * x * x);
  float slope = s == 0.0f || s == 1.0f ? 0.0f : 2.0f * x * s * (1.0f - s) * du; // saturated: 0, not 0 * inf
  return (s + slope) * dy;
}
// NaN passes through both ways, as on the CPU
__device__ inline float relu_f(float x) { return x > 0.0f || isnan(x) ? x : 0.0f; }
__device__ inline float relu_b(float x, float dy) { return x > 0.0f ? dy : isnan(x) ? x : 0.0f; }

// out = f(in), element-wise (out may be in)
#define UNARY_KERNEL(name, f)                                                                      \
  __global__ void name(float *out, const float *in, size_t n, size_t v) {                          \
    GRID_STRIDE(g, v) {                                                                            \
      float4 a = LD4(in, g);                                                                       \
      ST4(out, g) = MAP4(f, a);                                                                    \
    }                                                                                              \
    TAIL(i, v, n) out[i] = f(in[i]);                                                               \
  }
// din = f(in, dout), element-wise (din may be dout)
#define BACKWARD_KERNEL(name, f)                                                                   \
  __global__ void name(float *din, const float *in, const float *dout, size_t n, size_t v) {       \
    GRID_STRIDE(g, v) {                                                                            \
      float4 a = LD4(in, g), d = LD4(dout, g);                                                     \
      ST4(din, g) = MAP4B(f, a, d);                                                                \
    }                                                                                              \
    TAIL(i, v, n) din[i] = f(in[i], dout[i]);                                                      \
  }
UNARY_KERNEL(k_gelu_forward, gelu_f)
BACKWARD_KERNEL(k_gelu_backward, gelu_b)
UNARY_KERNEL(k_relu_forward, relu_f)
BACKWARD_KERNEL(k_relu_backward, relu_b)

static void gelu_forward(float *out, const float *in, size_t n) {
  LAUNCH_V(k_gelu_forward, n, vec_groups(n, out, in), out, in);
}
static void gelu_backward(float *din, const float *in, const float *dout, size_t n) {
  LAUNCH_V(k_gelu_backward, n, vec_groups(n, din, in, dout), din, in, dout);
}
static void relu_forward(float *out, const float *in, size_t n) {
  LAUNCH_V(k_relu_forward, n, vec_groups(n, out, in), out, in);
}
static void relu_backward(float *din, const float *in, const float *dout, size_t n) {
  LAUNCH_V(k_relu_backward, n, vec_groups(n, din, in, dout), din, in, dout);
}

// ---- layernorm: one warp per row ----

enum { ROWS_PER_BLOCK = CUDA_THREADS / 32 };

static unsigned row_blocks(int N) { return (unsigned)((N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK); }

// vec (C a multiple of 4, every pointer 16-byte aligned): each lane takes float4 groups of its
// row, with the same arithmetic per element as the single-element loops, and the sums over the
// row in the same order (a lane's groups of 4 in turn): the same bits either way.
__global__ void k_layernorm_forward(float *out, float *mean, float *rstd, const float *in,
                                    const float *w, const float *b, int N, int C, float eps, int vec) {
  int row = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (row >= N) return; // the whole warp: shuffles below see all 32 lanes
  const float *x = in + (size_t)row * C;
  float *o = out + (size_t)row * C;
  if (vec) { // the same arithmetic as below, float4 by float4
    float s = 0.0f;
    for (int g = lane; g < C / 4; g += 32) {
      float4 a = LD4(x, g);
      s += a.x, s += a.y, s += a.z, s += a.w;
    }
    float m = warp_sum(s) / (float)C, v = 0.0f;
    for (int g = lane; g < C / 4; g += 32) {
      float4 a = LD4(x, g);
      v += (a.x - m) * (a.x - m), v += (a.y - m) * (a.y - m), v += (a.z - m) * (a.z - m), v += (a.w - m) * (a.w - m);
    }
    v = warp_sum(v) / (float)C;
    float rs = 1.0f / sqrtf(v + eps);
    for (int g = lane; g < C / 4; g += 32) {
      float4 a = LD4(x, g), w4 = LD4(w, g), b4 = LD4(b, g);
      a.x = (a.x - m) * rs * w4.x + b4.x, a.y = (a.y - m) * rs * w4.y + b4.y;
      a.z = (a.z - m) * rs * w4.z + b4.z, a.w = (a.w - m) * rs * w4.w + b4.w;
      ST4(o, g) = a;
    }
    if (lane == 0) mean[row] = m, rstd[row] = rs;
    return;
  }
  // the sums in the vec path's order (a lane takes groups of 4 in turn), so that a row's mean and
  // rstd do not depend on whether its pointers are 16-byte aligned
  float s = 0.0f;
  for (int g = lane; 4 * g < C; g += 32)
    for (int c = 4 * g; c < 4 * g + 4 && c < C; c++)
      s += x[c];
  float m = warp_sum(s) / (float)C;
  float v = 0.0f;
  for (int g = lane; 4 * g < C; g += 32)
    for (int c = 4 * g; c < 4 * g + 4 && c < C; c++)
      v += (x[c] - m) * (x[c] - m); // two passes, as the CPU
  v = warp_sum(v) / (float)C;
  float rs = 1.0f / sqrtf(v + eps);
  for (int c = lane; c < C; c += 32)
    o[c] = (x[c] - m) * rs * w[c] + b[c];
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = rs;
  }
}

// din = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = w * dout
__global__ void k_layernorm_backward_input(float *din, const float *dout, const float *in,
                                           const float *w, const float *mean, const float *rstd,
                                           int N, int C, int vec) {
  int row = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (row >= N) return;
  const float *x = in + (size_t)row * C, *dy = dout + (size_t)row * C;
  float *dx = din + (size_t)row * C;
  float m = mean[row], s = rstd[row], gm = 0.0f, gxm = 0.0f;
  if (vec) { // the same arithmetic as below, float4 by float4
    for (int g = lane; g < C / 4; g += 32) {
      float4 w4 = LD4(w, g), d4 = LD4(dy, g), x4 = LD4(x, g);
      float ga[4] = {__fmul_rn(w4.x, d4.x), __fmul_rn(w4.y, d4.y), __fmul_rn(w4.z, d4.z), __fmul_rn(w4.w, d4.w)};
      float xa[4] = {x4.x, x4.y, x4.z, x4.w};
      for (int k = 0; k < 4; k++) {
        gm += ga[k];
        gxm += ga[k] * (xa[k] - m) * s;
      }
    }
    gm = warp_sum(gm) / (float)C;
    gxm = warp_sum(gxm) / (float)C;
    for (int g = lane; g < C / 4; g += 32) {
      float4 w4 = LD4(w, g), d4 = LD4(dy, g), x4 = LD4(x, g), r;
      r.x = (__fmul_rn(w4.x, d4.x) - gm - (x4.x - m) * s * gxm) * s;
      r.y = (__fmul_rn(w4.y, d4.y) - gm - (x4.y - m) * s * gxm) * s;
      r.z = (__fmul_rn(w4.z, d4.z) - gm - (x4.z - m) * s * gxm) * s;
      r.w = (__fmul_rn(w4.w, d4.w) - gm - (x4.w - m) * s * gxm) * s;
      ST4(dx, g) = r;
    }
    return;
  }
  for (int q = lane; 4 * q < C; q += 32) // the vec path's order of the sums, as in the forward
    for (int c = 4 * q; c < 4 * q + 4 && c < C; c++) {
      float g = __fmul_rn(w[c], dy[c]);
      gm += g;
      gxm += g * (x[c] - m) * s;
    }
  gm = warp_sum(gm) / (float)C;
  gxm = warp_sum(gxm) / (float)C;
  // __fmul_rn: no FMA here, so w*dy - mean(g) cancels as on the CPU (exactly 0 when C = 1)
  for (int c = lane; c < C; c += 32)
    dx[c] = (__fmul_rn(w[c], dy[c]) - gm - (x[c] - m) * s * gxm) * s;
}

// vec: a thread takes 4 columns, float4 by float4 (the same sums in the same order per column)
__global__ void k_layernorm_weight_partial(float *pw, float *pb, const float *dout, const float *in,
                                           const float *mean, const float *rstd, int N, int C,
                                           int rows, int vec) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  int n0 = blockIdx.y * rows, n1 = min(N, n0 + rows);
  if (vec) {
    if (4 * c >= C) return;
    float sw[4] = {0.0f, 0.0f, 0.0f, 0.0f}, sb[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 4
    for (int n = n0; n < n1; n++) {
      float4 d4 = LD4(dout + (size_t)n * C, c), x4 = LD4(in + (size_t)n * C, c);
      float dy[4] = {d4.x, d4.y, d4.z, d4.w}, xv[4] = {x4.x, x4.y, x4.z, x4.w}, mn = mean[n], rs = rstd[n];
      for (int k = 0; k < 4; k++) {
        sw[k] += (xv[k] - mn) * rs * dy[k];
        sb[k] += dy[k];
      }
    }
    for (int k = 0; k < 4; k++) {
      pw[(size_t)blockIdx.y * C + 4 * c + k] = sw[k];
      pb[(size_t)blockIdx.y * C + 4 * c + k] = sb[k];
    }
    return;
  }
  if (c >= C) return;
  float sw = 0.0f, sb = 0.0f;
  for (int n = n0; n < n1; n++) {
    float dy = dout[(size_t)n * C + c];
    sw += (in[(size_t)n * C + c] - mean[n]) * rstd[n] * dy;
    sb += dy;
  }
  pw[(size_t)blockIdx.y * C + c] = sw;
  pb[(size_t)blockIdx.y * C + c] = sb;
}

static void layernorm_forward(float *out, float *mean, float *rstd, const float *in, const float *w,
                              const float *b, int N, int C, float eps) {
  if (N <= 0) return;
  int vec = C % 4 == 0 && a16_all(out, in, w, b);
  k_layernorm_forward<<<row_blocks(N), CUDA_THREADS, 0, cuda_stream()>>>(out, mean, rstd, in, w, b,
                                                                         N, C, eps, vec);
  LAUNCH_CHECK();
}

static void layernorm_backward_input(float *din, const float *dout, const float *in, const float *w,
                                     const float *mean, const float *rstd, int N, int C) {
  if (N <= 0 || C <= 0) return;
  int vec = C % 4 == 0 && a16_all(din, dout, in, w);
  k_layernorm_backward_input<<<row_blocks(N), CUDA_THREADS, 0, cuda_stream()>>>(din, dout, in, w,
                                                                                mean, rstd, N, C, vec);
  LAUNCH_CHECK();
}

static void layernorm_backward_weight(float *dw, float *db, const float *dout, const float *in,
                                      const float *mean, const float *rstd, int N, int C) {
  if (N <= 0 || C <= 0) return;
  colsum_plan p = plan_colsum(N);
  size_t part = (size_t)p.chunks * C;
  float *pw = (float *)cuda_workspace(2 * sizeof(float) * part), *pb = pw + part;
  int vec = C % 4 == 0 && a16_all(dout, in);
  k_layernorm_weight_partial<<<dim3(col_blocks(vec ? C / 4 : C), p.chunks), CUDA_THREADS, 0, cuda_stream()>>>(
      pw, pb, dout, in, mean, rstd, N, C, p.rows, vec);
  LAUNCH_CHECK();
  k_colsum_finish<<<warp_col_blocks(C), CUDA_THREADS, 0, cuda_stream()>>>(dw, pw, p.chunks, C);
  LAUNCH_CHECK();
  k_colsum_finish<<<warp_col_blocks(C), CUDA_THREADS, 0, cuda_stream()>>>(db, pb, p.chunks, C);
  LAUNCH_CHECK();
}

// ---- softmax and cross-entropy: one block per row ----

// o = softmax(x) over V entries, the sum of exp(x - max) in double as on the CPU; with
// `losses`, also losses[row] = log(sum) - (x[target] - max). Two passes over the row, not three:
// the first keeps each thread's running max and its sum of exp(x - that max) (rescaled when the
// max grows: the online softmax), which the block combines at the block's max; the second writes
// exp(x - max) / sum, the same expf and the same product as three passes would give. out may be
// in: every x is read before the barriers of the combination, and each thread then overwrites
// only its own elements. A row's first h elements (up to its first 16-byte boundary) and its
// last (V - h) % 4 are read one by one, the rest as float4s; the second pass writes float4s too
// when out's rows have in's alignment (vec_out). Rows are ld floats apart; out's V..ld-1 get
// zeros (xent_forward's padding).
struct online_sum {
  float m = -INFINITY;
  double s = 0.0;
  __device__ void add(float v) {
    if (v > m) {
      s = m == -INFINITY ? 0.0 : s * exp((double)m - (double)v);
      m = v;
    }
    s += expf(v - m);
  }
};

__global__ void k_softmax_rows(float *out, float *losses, const float *in, const int32_t *targets,
                               int V, int ld, int vec_out, int kind) {
  __shared__ float shf[32];
  __shared__ double shd[32];
  size_t row = blockIdx.x;
  const float *x = in + row * ld;
  float *o = out + row * ld;
  float xt = losses && threadIdx.x == 0 ? d_round(x[targets[row]], kind) : 0.0f; // before any write
  int h = (int)((16u - ((uintptr_t)x & 15u)) & 15u) / 4;
  if (h > V) h = V;
  int v4 = (V - h) / 4, t0 = h + 4 * v4; // float4 groups at x + h; single elements from t0
  const float *xv = x + h;
  online_sum acc;
#define X(v) d_round(v, kind) // each logit as read (kind 0: as is)
  for (int i = threadIdx.x; i < h; i += blockDim.x)
    acc.add(X(x[i]));
  for (int g = threadIdx.x; g < v4; g += blockDim.x) {
    float4 a = LD4(xv, g);
    acc.add(X(a.x)), acc.add(X(a.y)), acc.add(X(a.z)), acc.add(X(a.w));
  }
  for (int i = t0 + threadIdx.x; i < V; i += blockDim.x)
    acc.add(X(x[i]));
  float m = acc.m;
  double s = acc.s;
  float mx = block_max(m, shf);
  s = m == -INFINITY ? 0.0 : s * exp((double)m - (double)mx); // this thread's sum at the block's max
  s = block_sum(s, shd);                                      // >= 1: the max term is exp(0)
  float inv = (float)(1.0 / s);
  if (vec_out) {
    for (int i = threadIdx.x; i < h; i += blockDim.x)
      o[i] = expf(X(x[i]) - mx) * inv;
    float *ov = o + h;
    for (int g = threadIdx.x; g < v4; g += blockDim.x) {
      float4 a = LD4(xv, g);
      a.x = expf(X(a.x) - mx) * inv, a.y = expf(X(a.y) - mx) * inv;
      a.z = expf(X(a.z) - mx) * inv, a.w = expf(X(a.w) - mx) * inv;
      ST4(ov, g) = a;
    }
    for (int i = t0 + threadIdx.x; i < V; i += blockDim.x)
      o[i] = expf(X(x[i]) - mx) * inv;
  } else {
    for (int i = threadIdx.x; i < V; i += blockDim.x)
      o[i] = expf(X(x[i]) - mx) * inv;
  }
#undef X
  for (int i = V + threadIdx.x; i < ld; i += blockDim.x) // the row's padding (never read above)
    o[i] = 0.0f;
  if (losses && threadIdx.x == 0) losses[row] = (float)(log(s) - ((double)xt - mx));
}

// out's rows start at in's offsets modulo 16 bytes (then each row's float4 groups line up)
static int same_phase(const float *out, const float *in) { return (((uintptr_t)out ^ (uintptr_t)in) & 15u) == 0; }

static void softmax_forward(float *out, const float *in, int N, int V) {
  if (N <= 0 || V <= 0) return;
  k_softmax_rows<<<N, CUDA_THREADS, 0, cuda_stream()>>>(out, nullptr, in, nullptr, V, V, same_phase(out, in), 0);
  LAUNCH_CHECK();
}

static void xent_forward(float *losses, float *probs, const float *logits, const int32_t *targets,
                         int N, int V, int ld, int round) {
  if (N <= 0 || V <= 0) return;
  k_softmax_rows<<<N, CUDA_THREADS, 0, cuda_stream()>>>(probs, losses, logits, targets, V, ld > V ? ld : V,
                                                        same_phase(probs, logits), round);
  LAUNCH_CHECK();
}

// element-wise, so dlogits may alias probs: each element is read and written by one thread.
// Rows of ld floats, the first V of them classes, the rest padding (zeros written). In float4
// groups (v > 0 only when N * ld < 2^32, so that indices fit 32 bits, and ld >= 4), a group's
// four elements lie in its first element's row r or in row r + 1.
__device__ inline float xent_grad(float p, unsigned col, unsigned target, unsigned V, float scale, int kind) {
  return col >= V ? 0.0f : d_round((col == target ? p - 1.0f : p) * scale, kind);
}

__global__ void k_xent_backward(float *dlogits, const float *probs, const int32_t *targets,
                                float scale, size_t V, size_t ld, int kind, size_t n, size_t v) {
  GRID_STRIDE(g, v) {
    unsigned L = (unsigned)ld, e = 4 * (unsigned)g, r = e / L, next = (r + 1) * L; // next: row r + 1's start
    unsigned t0 = (unsigned)targets[r], t1 = next <= e + 3 ? (unsigned)targets[r + 1] : 0u;
    float4 p = LD4(probs, g);
    float q[4] = {p.x, p.y, p.z, p.w};
    for (int k = 0; k < 4; k++) {
      unsigned i = e + k;
      q[k] = i < next ? xent_grad(q[k], i - r * L, t0, (unsigned)V, scale, kind)
                      : xent_grad(q[k], i - next, t1, (unsigned)V, scale, kind);
    }
    ST4(dlogits, g) = make_float4(q[0], q[1], q[2], q[3]);
  }
  TAIL(i, v, n) dlogits[i] = xent_grad(probs[i], (unsigned)(i % ld), (unsigned)targets[i / ld], (unsigned)V, scale, kind);
}

static void xent_backward(float *dlogits, const float *probs, const int32_t *targets, float scale,
                          int N, int V, int ld, int round) {
  if (N <= 0 || V <= 0) return;
  if (ld < V) ld = V;
  size_t n = (size_t)N * ld, v = ld >= 4 && n < UINT32_MAX - 4 ? vec_groups(n, dlogits, probs) : 0;
  LAUNCH_V(k_xent_backward, n, v, dlogits, probs, targets, scale, (size_t)V, (size_t)ld, round);
}

// ---- embedding ----

__global__ void k_embedding_forward(float *out, const int32_t *tok, const float *wte,
                                    const float *wpe, size_t n, int T, int C) {
  GRID_STRIDE(i, n) {
    size_t bt = i / C, c = i % C, t = bt % T;
    out[i] = wte[(size_t)tok[bt] * C + c] + wpe[t * C + c];
  }
}

static void embedding_forward(float *out, const int32_t *tok, const float *wte, const float *wpe,
                              int B, int T, int C) {
  if (B <= 0 || T <= 0 || C <= 0) return;
  size_t n = (size_t)B * T * C;
  LAUNCH_N(k_embedding_forward, n, out, tok, wte, wpe, n, T, C);
}

// dwpe[t, c] += dout[b, t, c] for b in order: the CPU's order exactly
__global__ void k_embedding_dwpe(float *dwpe, const float *dout, int B, int T, int C) {
  GRID_STRIDE(i, (size_t)T * C) {
    float acc = dwpe[i];
    for (int b = 0; b < B; b++)
      acc += dout[(size_t)b * T * C + i];
    dwpe[i] = acc;
  }
}

__global__ void k_iota(int32_t *v, int n) { GRID_STRIDE(i, (size_t)n) v[i] = (int32_t)i; }

// keys: the tokens stably sorted; pos: their positions b*T+t. One block per sorted index; the
// first index of each token's run adds that token's rows, in position order (the sort is
// stable), to dwte: the CPU's order exactly.
__global__ void k_embedding_dwte(float *dwte, const float *dout, const int32_t *keys,
                                 const int32_t *pos, int n, int C) {
  int i = blockIdx.x;
  int v = keys[i];
  if (i > 0 && keys[i - 1] == v) return;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = dwte[(size_t)v * C + c];
    for (int k = i; k < n && keys[k] == v; k++)
      acc += dout[(size_t)pos[k] * C + c];
    dwte[(size_t)v * C + c] = acc;
  }
}

static void embedding_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tok,
                               int B, int T, int C) {
  if (B <= 0 || T <= 0 || C <= 0) return;
  cudaStream_t s = cuda_stream();
  k_embedding_dwpe<<<cuda_grid((size_t)T * C), CUDA_THREADS, 0, s>>>(dwpe, dout, B, T, C);
  LAUNCH_CHECK();
  int n = B * T;
  size_t temp = 0;
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp, (const int32_t *)nullptr,
                                             (int32_t *)nullptr, (const int32_t *)nullptr,
                                             (int32_t *)nullptr, n, 0, 32, s));
  size_t ints = align256(sizeof(int32_t) * (size_t)n);
  char *ws = (char *)cuda_workspace(3 * ints + align256(temp));
  int32_t *keys = (int32_t *)ws, *pos_in = (int32_t *)(ws + ints),
          *pos = (int32_t *)(ws + 2 * ints);
  k_iota<<<cuda_grid((size_t)n), CUDA_THREADS, 0, s>>>(pos_in, n);
  LAUNCH_CHECK();
  CUDA_CHECK(
      cub::DeviceRadixSort::SortPairs(ws + 3 * ints, temp, tok, keys, pos_in, pos, n, 0, 32, s));
  k_embedding_dwte<<<n, 128, 0, s>>>(dwte, dout, keys, pos, n, C);
  LAUNCH_CHECK();
}

// ---- optimizers ----

// one element's AdamW step: *m and *v updated, the new parameter returned
struct adamw_k {
  float lr, beta1, beta2, eps, weight_decay, c1, c2, grad_scale;
  __device__ float step(float p, float g, float *m, float *v) const {
    float gi = g * grad_scale;
    float mi = beta1 * *m + (1.0f - beta1) * gi;
    float vi = beta2 * *v + (1.0f - beta2) * gi * gi;
    *m = mi;
    *v = vi;
    float mhat = mi / c1, vhat = vi / c2;
    return p - lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * p);
  }
};

// out of place (outputs may be the inputs: each element is read before it is written)
__global__ void k_adamw_to(float *po, float *mo, float *vo, const float *p, const float *g, const float *m,
                           const float *v, adamw_k k, size_t n, size_t nv) {
  GRID_STRIDE(q, nv) {
    float4 p4 = LD4(p, q), g4 = LD4(g, q), m4 = LD4(m, q), v4 = LD4(v, q);
    p4.x = k.step(p4.x, g4.x, &m4.x, &v4.x);
    p4.y = k.step(p4.y, g4.y, &m4.y, &v4.y);
    p4.z = k.step(p4.z, g4.z, &m4.z, &v4.z);
    p4.w = k.step(p4.w, g4.w, &m4.w, &v4.w);
    ST4(mo, q) = m4;
    ST4(vo, q) = v4;
    ST4(po, q) = p4;
  }
  TAIL(i, nv, n) {
    float mi = m[i], vi = v[i];
    float pi = k.step(p[i], g[i], &mi, &vi);
    mo[i] = mi;
    vo[i] = vi;
    po[i] = pi;
  }
}

static void adamw_to(float *po, float *mo, float *vo, const float *p, const float *g, const float *m, const float *v,
                     size_t n, float lr, float beta1, float beta2, float eps, float weight_decay, int t,
                     float grad_scale) {
  // bias corrections in double on the host, as the CPU table
  float c1 = (float)(1.0 - pow(beta1, t)), c2 = (float)(1.0 - pow(beta2, t));
  adamw_k k = {lr, beta1, beta2, eps, weight_decay, c1, c2, grad_scale};
  LAUNCH_V(k_adamw_to, n, vec_groups(n, po, mo, vo, p, g, m, v), po, mo, vo, p, g, m, v, k);
}

static void adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                  float beta2, float eps, float weight_decay, int t, float grad_scale) {
  adamw_to(p, m, v, p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, t, grad_scale);
}

__global__ void k_sgd(float *p, const float *g, float *mom, size_t n, float lr, float momentum,
                      float weight_decay, float grad_scale) {
  GRID_STRIDE(i, n) {
    float step = g[i] * grad_scale + weight_decay * p[i];
    if (mom) step = mom[i] = momentum * mom[i] + step;
    p[i] -= lr * step;
  }
}

static void sgd(float *p, const float *g, float *mom, size_t n, float lr, float momentum,
                float weight_decay, float grad_scale) {
  LAUNCH_N(k_sgd, n, p, g, mom, n, lr, momentum, weight_decay, grad_scale);
}

// ---- vector utilities ----

__global__ void k_axpy(float *y, float a, const float *x, size_t n, size_t v) {
  GRID_STRIDE(g, v) {
    float4 y4 = LD4(y, g), x4 = LD4(x, g);
    y4.x += a * x4.x, y4.y += a * x4.y, y4.z += a * x4.z, y4.w += a * x4.w;
    ST4(y, g) = y4;
  }
  TAIL(i, v, n) y[i] += a * x[i];
}
__global__ void k_scale(float *x, float a, size_t n, size_t v) {
  GRID_STRIDE(g, v) {
    float4 x4 = LD4(x, g);
    x4.x *= a, x4.y *= a, x4.z *= a, x4.w *= a;
    ST4(x, g) = x4;
  }
  TAIL(i, v, n) x[i] *= a;
}
__global__ void k_fill(float *x, float c, size_t n, size_t v) {
  GRID_STRIDE(g, v) ST4(x, g) = make_float4(c, c, c, c);
  TAIL(i, v, n) x[i] = c;
}

static void axpy(float *y, float a, const float *x, size_t n) { LAUNCH_V(k_axpy, n, vec_groups(n, y, x), y, a, x); }
static void scale(float *x, float a, size_t n) { LAUNCH_V(k_scale, n, vec_groups(n, x), x, a); }
static void fill(float *x, float v, size_t n) { LAUNCH_V(k_fill, n, vec_groups(n, x), x, v); }

static void zero(float *x, size_t n) {
  if (n) CUDA_CHECK(cudaMemsetAsync(x, 0, sizeof(float) * n, cuda_stream())); // +0.0 bits
}

// memmove semantics: overlapping ranges go through the workspace
static void copy(float *dst, const float *src, size_t n) {
  if (!n || dst == src) return;
  size_t bytes = sizeof(float) * n;
  uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
  cudaStream_t st = cuda_stream();
  if (d + bytes <= s || s + bytes <= d) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st));
    return;
  }
  void *tmp = cuda_workspace(bytes);
  CUDA_CHECK(cudaMemcpyAsync(tmp, src, bytes, cudaMemcpyDeviceToDevice, st));
  CUDA_CHECK(cudaMemcpyAsync(dst, tmp, bytes, cudaMemcpyDeviceToDevice, st));
}

// Sum of squares in double: a fixed grid (it depends on n only) of block partials, then one
// block adds the partials in a fixed tree; the result comes back to the host.
static const size_t SUMSQ_BLOCKS = 1024;

__global__ void k_sumsq_partial(double *partial, const float *x, size_t n) {
  __shared__ double sh[32];
  double s = 0.0;
  GRID_STRIDE(i, n) {
    double xi = x[i];
    s += xi * xi;
  }
  s = block_sum(s, sh);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void k_sumsq_finish(double *out, const double *partial, int nb) {
  __shared__ double sh[32];
  double s = 0.0;
  for (int k = threadIdx.x; k < nb; k += blockDim.x)
    s += partial[k];
  s = block_sum(s, sh);
  if (threadIdx.x == 0) *out = s;
}

static double sumsq(const float *x, size_t n) {
  if (!n) return 0.0;
  size_t nb = (n + CUDA_THREADS - 1) / CUDA_THREADS;
  if (nb > SUMSQ_BLOCKS) nb = SUMSQ_BLOCKS;
  double *ws = (double *)cuda_workspace(sizeof(double) * (nb + 1)), r = 0.0;
  cudaStream_t st = cuda_stream();
  k_sumsq_partial<<<(unsigned)nb, CUDA_THREADS, 0, st>>>(ws + 1, x, n);
  LAUNCH_CHECK();
  k_sumsq_finish<<<1, CUDA_THREADS, 0, st>>>(ws, ws + 1, (int)nb);
  LAUNCH_CHECK();
  CUDA_CHECK(cudaMemcpyAsync(&r, ws, sizeof r, cudaMemcpyDeviceToHost, st));
  CUDA_CHECK(cudaStreamSynchronize(st));
  return r;
}

// counting is exact in any order: integer atomics are fine here
__global__ void k_nonfinite(unsigned long long *count, const float *x, size_t n) {
  __shared__ unsigned long long sh[32];
  unsigned long long k = 0;
  GRID_STRIDE(i, n) k += (__float_as_uint(x[i]) & 0x7f800000u) == 0x7f800000u;
  k = block_sum(k, sh);
  if (threadIdx.x == 0 && k) atomicAdd(count, k);
}

static size_t nonfinite(const float *x, size_t n) {
  if (!n) return 0;
  unsigned long long *count = (unsigned long long *)cuda_workspace(sizeof *count), r = 0;
  cudaStream_t st = cuda_stream();
  CUDA_CHECK(cudaMemsetAsync(count, 0, sizeof *count, st));
  size_t nb = (n + CUDA_THREADS - 1) / CUDA_THREADS;
  k_nonfinite<<<(unsigned)(nb < SUMSQ_BLOCKS ? nb : SUMSQ_BLOCKS), CUDA_THREADS, 0, st>>>(count, x,
                                                                                          n);
  LAUNCH_CHECK();
  CUDA_CHECK(cudaMemcpyAsync(&r, count, sizeof r, cudaMemcpyDeviceToHost, st));
  CUDA_CHECK(cudaStreamSynchronize(st));
  return (size_t)r;
}

__global__ void k_cast_f32_to_bf16(uint16_t *out, const float *in, size_t n) {
  GRID_STRIDE(i, n) out[i] = d_f32_to_bf16(in[i]);
}
__global__ void k_cast_bf16_to_f32(float *out, const uint16_t *in, size_t n) {
  GRID_STRIDE(i, n) out[i] = d_bf16_to_f32(in[i]);
}
__global__ void k_cast_f32_to_f16(uint16_t *out, const float *in, size_t n) {
  GRID_STRIDE(i, n) out[i] = d_f32_to_f16(in[i]);
}
__global__ void k_cast_f16_to_f32(float *out, const uint16_t *in, size_t n) {
  GRID_STRIDE(i, n) out[i] = d_f16_to_f32(in[i]);
}
__device__ inline float d_round_bf16(float x) { return d_bf16_to_f32(d_f32_to_bf16(x)); }
__device__ inline float d_round_fp16(float x) { return d_f16_to_f32(d_f32_to_f16(x)); }
UNARY_KERNEL(k_round_bf16, d_round_bf16)
UNARY_KERNEL(k_round_fp16, d_round_fp16)

static void cast_f32_to_bf16(uint16_t *out, const float *in, size_t n) {
  LAUNCH_N(k_cast_f32_to_bf16, n, out, in, n);
}
static void cast_bf16_to_f32(float *out, const uint16_t *in, size_t n) {
  LAUNCH_N(k_cast_bf16_to_f32, n, out, in, n);
}
static void cast_f32_to_f16(uint16_t *out, const float *in, size_t n) {
  LAUNCH_N(k_cast_f32_to_f16, n, out, in, n);
}
static void cast_f16_to_f32(float *out, const uint16_t *in, size_t n) {
  LAUNCH_N(k_cast_f16_to_f32, n, out, in, n);
}
static void round_bf16(float *x, size_t n) { LAUNCH_V(k_round_bf16, n, vec_groups(n, x), x, x); }
static void round_fp16(float *x, size_t n) { LAUNCH_V(k_round_fp16, n, vec_groups(n, x), x, x); }

void cuda_fill_table(kernels_ops *t) {
  t->linear_forward = linear_forward;
  t->bias_add = bias_add;
  t->bias_grad = bias_grad;
  t->gelu_forward = gelu_forward;
  t->gelu_backward = gelu_backward;
  t->relu_forward = relu_forward;
  t->relu_backward = relu_backward;
  t->layernorm_forward = layernorm_forward;
  t->layernorm_backward_input = layernorm_backward_input;
  t->layernorm_backward_weight = layernorm_backward_weight;
  t->softmax_forward = softmax_forward;
  t->embedding_forward = embedding_forward;
  t->embedding_backward = embedding_backward;
  t->xent_forward = xent_forward;
  t->xent_backward = xent_backward;
  t->adamw = adamw;
  t->adamw_to = adamw_to;
  t->sgd = sgd;
  t->axpy = axpy;
  t->scale = scale;
  t->fill = fill;
  t->zero = zero;
  t->copy = copy;
  t->sumsq = sumsq;
  t->nonfinite = nonfinite;
  t->cast_f32_to_bf16 = cast_f32_to_bf16;
  t->cast_bf16_to_f32 = cast_bf16_to_f32;
  t->cast_f32_to_f16 = cast_f32_to_f16;
  t->cast_f16_to_f32 = cast_f16_to_f32;
  t->round_bf16 = round_bf16;
  t->round_fp16 = round_fp16;
}
