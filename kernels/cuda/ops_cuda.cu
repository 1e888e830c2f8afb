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

// ---- bias ----

__global__ void k_bias_add(float *out, const float *bias, size_t n, size_t C) {
  GRID_STRIDE(i, n) out[i] += bias[i % C];
}

static void bias_add(float *out, const float *bias, int N, int C) {
  if (N <= 0 || C <= 0) return;
  LAUNCH_N(k_bias_add, (size_t)N * C, out, bias, (size_t)N * C, (size_t)C);
}

// Column sums in two passes. Rows are cut into `chunks` chunks of `rows` rows (the last may be
// shorter); pass 1 sums each chunk's rows in order per column, pass 2 adds the chunk sums in
// chunk order to the output (+=).
struct colsum_plan {
  int rows, chunks;
};

static colsum_plan plan_colsum(int N) {
  int chunks = (N + 31) / 32;
  if (chunks > 512) chunks = 512;
  int rows = (N + chunks - 1) / chunks;
  return {rows, (N + rows - 1) / rows};
}

__global__ void k_bias_grad_partial(float *partial, const float *dout, int N, int C, int rows) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  int n0 = blockIdx.y * rows, n1 = min(N, n0 + rows);
  float s = 0.0f;
  for (int n = n0; n < n1; n++)
    s += dout[(size_t)n * C + c];
  partial[(size_t)blockIdx.y * C + c] = s;
}

__global__ void k_colsum_finish(float *out, const float *partial, int chunks, int C) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float s = 0.0f;
  for (int k = 0; k < chunks; k++)
    s += partial[(size_t)k * C + c];
  out[c] += s;
}

static unsigned col_blocks(int C) { return (unsigned)((C + CUDA_THREADS - 1) / CUDA_THREADS); }

static void bias_grad(float *dbias, const float *dout, int N, int C) {
  if (N <= 0 || C <= 0) return;
  colsum_plan p = plan_colsum(N);
  float *partial = (float *)cuda_workspace(sizeof(float) * (size_t)p.chunks * C);
  k_bias_grad_partial<<<dim3(col_blocks(C), p.chunks), CUDA_THREADS, 0, cuda_stream()>>>(
      partial, dout, N, C, p.rows);
  LAUNCH_CHECK();
  k_colsum_finish<<<col_blocks(C), CUDA_THREADS, 0, cuda_stream()>>>(dbias, partial, p.chunks, C);
  LAUNCH_CHECK();
}

// ---- activations ----

#define GELU_K 0.7978845608028654f // sqrt(2/pi)
#define GELU_A 0.044715f

// The CPU table's formula: x sigmoid(2u) = x / (1 + exp(-2u)), u = k (x + a x^3), the same
// function as 0.5 x (1 + tanh u) with one expf (see kernels/cpu/ops_cpu.c)
__device__ inline float gelu_s(float x) { return 1.0f / (1.0f + expf(-2.0f * GELU_K * (x + GELU_A * x * x * x))); }

__global__ void k_gelu_forward(float *out, const float *in, size_t n) {
  GRID_STRIDE(i, n) out[i] = in[i] * gelu_s(in[i]);
}

__global__ void k_gelu_backward(float *din, const float *in, const float *dout, size_t n) {
  GRID_STRIDE(i, n) {
    float x = in[i], s = gelu_s(x);
    float du = GELU_K * (1.0f + 3.0f * GELU_A * x * x);
    din[i] = (s + 2.0f * x * s * (1.0f - s) * du) * dout[i];
  }
}

__global__ void k_relu_forward(float *out, const float *in, size_t n) {
  GRID_STRIDE(i, n) out[i] = in[i] > 0.0f ? in[i] : 0.0f;
}

__global__ void k_relu_backward(float *din, const float *in, const float *dout, size_t n) {
  GRID_STRIDE(i, n) din[i] = in[i] > 0.0f ? dout[i] : 0.0f;
}

static void gelu_forward(float *out, const float *in, size_t n) {
  LAUNCH_N(k_gelu_forward, n, out, in, n);
}
static void gelu_backward(float *din, const float *in, const float *dout, size_t n) {
  LAUNCH_N(k_gelu_backward, n, din, in, dout, n);
}
static void relu_forward(float *out, const float *in, size_t n) {
  LAUNCH_N(k_relu_forward, n, out, in, n);
}
static void relu_backward(float *din, const float *in, const float *dout, size_t n) {
  LAUNCH_N(k_relu_backward, n, din, in, dout, n);
}

// ---- layernorm: one warp per row ----

enum { ROWS_PER_BLOCK = CUDA_THREADS / 32 };

static unsigned row_blocks(int N) { return (unsigned)((N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK); }

__global__ void k_layernorm_forward(float *out, float *mean, float *rstd, const float *in,
                                    const float *w, const float *b, int N, int C, float eps) {
  int row = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (row >= N) return; // the whole warp: shuffles below see all 32 lanes
  const float *x = in + (size_t)row * C;
  float s = 0.0f;
  for (int c = lane; c < C; c += 32)
    s += x[c];
  float m = warp_sum(s) / (float)C;
  float v = 0.0f;
  for (int c = lane; c < C; c += 32)
    v += (x[c] - m) * (x[c] - m); // two passes, as the CPU
  v = warp_sum(v) / (float)C;
  float rs = 1.0f / sqrtf(v + eps);
  float *o = out + (size_t)row * C;
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
                                           int N, int C) {
  int row = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (row >= N) return;
  const float *x = in + (size_t)row * C, *dy = dout + (size_t)row * C;
  float m = mean[row], s = rstd[row], gm = 0.0f, gxm = 0.0f;
  for (int c = lane; c < C; c += 32) {
    float g = __fmul_rn(w[c], dy[c]);
    gm += g;
    gxm += g * (x[c] - m) * s;
  }
  gm = warp_sum(gm) / (float)C;
  gxm = warp_sum(gxm) / (float)C;
  float *dx = din + (size_t)row * C;
  // __fmul_rn: no FMA here, so w*dy - mean(g) cancels as on the CPU (exactly 0 when C = 1)
  for (int c = lane; c < C; c += 32)
    dx[c] = (__fmul_rn(w[c], dy[c]) - gm - (x[c] - m) * s * gxm) * s;
}

__global__ void k_layernorm_weight_partial(float *pw, float *pb, const float *dout, const float *in,
                                           const float *mean, const float *rstd, int N, int C,
                                           int rows) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  int n0 = blockIdx.y * rows, n1 = min(N, n0 + rows);
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
  k_layernorm_forward<<<row_blocks(N), CUDA_THREADS, 0, cuda_stream()>>>(out, mean, rstd, in, w, b,
                                                                         N, C, eps);
  LAUNCH_CHECK();
}

static void layernorm_backward_input(float *din, const float *dout, const float *in, const float *w,
                                     const float *mean, const float *rstd, int N, int C) {
  if (N <= 0 || C <= 0) return;
  k_layernorm_backward_input<<<row_blocks(N), CUDA_THREADS, 0, cuda_stream()>>>(din, dout, in, w,
                                                                                mean, rstd, N, C);
  LAUNCH_CHECK();
}

static void layernorm_backward_weight(float *dw, float *db, const float *dout, const float *in,
                                      const float *mean, const float *rstd, int N, int C) {
  if (N <= 0 || C <= 0) return;
  colsum_plan p = plan_colsum(N);
  size_t part = (size_t)p.chunks * C;
  float *pw = (float *)cuda_workspace(2 * sizeof(float) * part), *pb = pw + part;
  k_layernorm_weight_partial<<<dim3(col_blocks(C), p.chunks), CUDA_THREADS, 0, cuda_stream()>>>(
      pw, pb, dout, in, mean, rstd, N, C, p.rows);
  LAUNCH_CHECK();
  k_colsum_finish<<<col_blocks(C), CUDA_THREADS, 0, cuda_stream()>>>(dw, pw, p.chunks, C);
  LAUNCH_CHECK();
  k_colsum_finish<<<col_blocks(C), CUDA_THREADS, 0, cuda_stream()>>>(db, pb, p.chunks, C);
  LAUNCH_CHECK();
}

// ---- softmax and cross-entropy: one block per row ----

// o = softmax(x) over V entries, the sum of exp(x - max) in double as on the CPU; with
// `losses`, also losses[row] = log(sum) - (x[target] - max). Two passes over the row, not three:
// the first keeps each thread's running max and its sum of exp(x - that max) (rescaled when the
// max grows: the online softmax), which the block combines at the block's max; the second writes
// exp(x - max) / sum, the same expf and the same product as three passes would give. out may be
// in: every x is read before the barriers of the combination, and each thread then overwrites
// only its own elements.
__global__ void k_softmax_rows(float *out, float *losses, const float *in, const int32_t *targets,
                               int V) {
  __shared__ float shf[32];
  __shared__ double shd[32];
  size_t row = blockIdx.x;
  const float *x = in + row * V;
  float *o = out + row * V;
  float xt = losses && threadIdx.x == 0 ? x[targets[row]] : 0.0f; // before any write
  float m = -INFINITY;
  double s = 0.0;
  for (int i = threadIdx.x; i < V; i += blockDim.x) {
    float v = x[i];
    if (v > m) {
      s = m == -INFINITY ? 0.0 : s * exp((double)m - (double)v);
      m = v;
    }
    s += expf(v - m);
  }
  float mx = block_max(m, shf);
  s = m == -INFINITY ? 0.0 : s * exp((double)m - (double)mx); // this thread's sum at the block's max
  s = block_sum(s, shd);                                      // >= 1: the max term is exp(0)
  float inv = (float)(1.0 / s);
  for (int i = threadIdx.x; i < V; i += blockDim.x)
    o[i] = expf(x[i] - mx) * inv;
  if (losses && threadIdx.x == 0) losses[row] = (float)(log(s) - ((double)xt - mx));
}

static void softmax_forward(float *out, const float *in, int N, int V) {
  if (N <= 0 || V <= 0) return;
  k_softmax_rows<<<N, CUDA_THREADS, 0, cuda_stream()>>>(out, nullptr, in, nullptr, V);
  LAUNCH_CHECK();
}

static void xent_forward(float *losses, float *probs, const float *logits, const int32_t *targets,
                         int N, int V) {
  if (N <= 0 || V <= 0) return;
  k_softmax_rows<<<N, CUDA_THREADS, 0, cuda_stream()>>>(probs, losses, logits, targets, V);
  LAUNCH_CHECK();
}

// element-wise, so dlogits may alias probs: each element is read and written by one thread
__global__ void k_xent_backward(float *dlogits, const float *probs, const int32_t *targets,
                                float scale, size_t n, size_t V) {
  GRID_STRIDE(i, n) {
    float p = probs[i];
    dlogits[i] = ((size_t)targets[i / V] == i % V ? p - 1.0f : p) * scale;
  }
}

static void xent_backward(float *dlogits, const float *probs, const int32_t *targets, float scale,
                          int N, int V) {
  if (N <= 0 || V <= 0) return;
  LAUNCH_N(k_xent_backward, (size_t)N * V, dlogits, probs, targets, scale, (size_t)N * V,
           (size_t)V);
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

// out of place (outputs may be the inputs: each element is read before it is written)
__global__ void k_adamw_to(float *po, float *mo, float *vo, const float *p, const float *g, const float *m,
                           const float *v, size_t n, float lr, float beta1, float beta2, float eps,
                           float weight_decay, float c1, float c2, float grad_scale) {
  GRID_STRIDE(i, n) {
    float gi = g[i] * grad_scale;
    float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    mo[i] = mi;
    vo[i] = vi;
    float mhat = mi / c1, vhat = vi / c2, pi = p[i];
    po[i] = pi - lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * pi);
  }
}

static void adamw_to(float *po, float *mo, float *vo, const float *p, const float *g, const float *m, const float *v,
                     size_t n, float lr, float beta1, float beta2, float eps, float weight_decay, int t,
                     float grad_scale) {
  // bias corrections in double on the host, as the CPU table
  float c1 = (float)(1.0 - pow(beta1, t)), c2 = (float)(1.0 - pow(beta2, t));
  LAUNCH_N(k_adamw_to, n, po, mo, vo, p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, c1, c2, grad_scale);
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

__global__ void k_axpy(float *y, float a, const float *x, size_t n) {
  GRID_STRIDE(i, n) y[i] += a * x[i];
}
__global__ void k_scale(float *x, float a, size_t n) { GRID_STRIDE(i, n) x[i] *= a; }
__global__ void k_fill(float *x, float v, size_t n) { GRID_STRIDE(i, n) x[i] = v; }

static void axpy(float *y, float a, const float *x, size_t n) { LAUNCH_N(k_axpy, n, y, a, x, n); }
static void scale(float *x, float a, size_t n) { LAUNCH_N(k_scale, n, x, a, n); }
static void fill(float *x, float v, size_t n) { LAUNCH_N(k_fill, n, x, v, n); }

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
__global__ void k_round_bf16(float *x, size_t n) {
  GRID_STRIDE(i, n) x[i] = d_bf16_to_f32(d_f32_to_bf16(x[i]));
}
__global__ void k_round_fp16(float *x, size_t n) {
  GRID_STRIDE(i, n) x[i] = d_f16_to_f32(d_f32_to_f16(x[i]));
}

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
static void round_bf16(float *x, size_t n) { LAUNCH_N(k_round_bf16, n, x, n); }
static void round_fp16(float *x, size_t n) { LAUNCH_N(k_round_fp16, n, x, n); }

void cuda_fill_table(kernels_ops *t) {
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
