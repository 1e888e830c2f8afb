// kernels/cuda/attention_cuda.cu: causal multi-head self-attention core on the GPU.
//
// The same maths as kernels/cpu/attention_cpu.c. Per (batch b, head h), Q, K, V the [T, hs]
// slices of qkv (row stride 3C), A = softmax(scale * Q K^T + causal mask), scale = 1/sqrt(hs):
//   forward:  out_h = A V
//   backward: dS = A * (dA - rowsum(A * dA)) * scale with dA = dY V^T (rows of the lower
//             triangle only); dQ = dS K; dK = dS^T Q; dV = A^T dY
// Straightforward kernels, one block per row of A (or per key, for dK and dV), each output
// element written once by one thread: no atomics, so results are repeatable bit for bit. Every
// loop stops at the diagonal, so a NaN or Inf in a later token never reaches an earlier one,
// as on the CPU. Not tuned: a fused (flash) kernel or cuBLAS batched products would be much
// faster for long sequences; this is the correct baseline the faster ones are tested against.
//
// attention_backward ignores the caller's scratch (2*T floats, host-sized) and keeps dS,
// B*NH*T*T floats, in the backend's workspace.
#include <math.h>

#include "kernels/cuda/cuda.h"
#include "kernels/cuda/reduce.cuh"

enum { ATT_THREADS = 128 };

// Block = one row (b, h, t) of the scores: att[b,h,t,:] = the causal softmax of
// scale * q_t . k_j, zero above the diagonal. Dynamic shared memory: q_t (hs floats).
__global__ void k_att_softmax(float *att, const float *qkv, int T, int C, int NH, int hs,
                              float scale) {
  extern __shared__ float q[];
  __shared__ float sh[32];
  size_t row = blockIdx.x; // (b*NH + h)*T + t
  int t = (int)(row % T);
  size_t bh = row / T;
  int h = (int)(bh % NH);
  size_t b = bh / NH;
  const float *base = qkv + b * T * 3 * C + (size_t)h * hs; // q of token 0 of this head
  for (int d = threadIdx.x; d < hs; d += blockDim.x)
    q[d] = base[(size_t)t * 3 * C + d];
  __syncthreads();
  float *a = att + row * T;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j <= t; j += blockDim.x) {
    const float *k = base + (size_t)j * 3 * C + C;
    float s = 0.0f;
    for (int d = 0; d < hs; d++)
      s += q[d] * k[d];
    s *= scale;
    a[j] = s;
    mx = s > mx ? s : mx;
  }
  mx = block_max(mx, sh);
  float sum = 0.0f;
  for (int j = threadIdx.x; j <= t; j += blockDim.x)
    sum += (a[j] = expf(a[j] - mx));
  sum = block_sum(sum, sh); // >= 1: the max term is exp(0)
  float inv = 1.0f / sum;
  for (int j = threadIdx.x; j < T; j += blockDim.x)
    a[j] = j <= t ? a[j] * inv : 0.0f;
}

// Block = one row (b, h, t): out[b,t,h*hs+d] = sum_{j<=t} att[t,j] v_j[d], threads over d.
__global__ void k_att_out(float *out, const float *att, const float *qkv, int T, int C, int NH,
                          int hs) {
  size_t row = blockIdx.x;
  int t = (int)(row % T);
  size_t bh = row / T;
  int h = (int)(bh % NH);
  size_t b = bh / NH;
  const float *a = att + row * T, *v = qkv + b * T * 3 * C + 2 * (size_t)C + (size_t)h * hs;
  float *o = out + (b * T + t) * C + (size_t)h * hs;
  for (int d = threadIdx.x; d < hs; d += blockDim.x) {
    float s = 0.0f;
    for (int j = 0; j <= t; j++)
      s += a[j] * v[(size_t)j * 3 * C + d];
    o[d] = s;
  }
}

void cuda_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
  if (NH <= 0 || C % NH != 0)
    cuda_fail("attention_forward", __FILE__, __LINE__, "shape check", "C must be a multiple of NH");
  if (B <= 0 || T <= 0) return;
  int hs = C / NH;
  unsigned rows = (unsigned)((size_t)B * NH * T);
  float scale = 1.0f / sqrtf((float)hs);
  cudaStream_t s = cuda_stream();
  k_att_softmax<<<rows, ATT_THREADS, sizeof(float) * hs, s>>>(att, qkv, T, C, NH, hs, scale);
  CUDA_CHECK_OP("attention_forward", cudaGetLastError());
  k_att_out<<<rows, ATT_THREADS, 0, s>>>(out, att, qkv, T, C, NH, hs);
  CUDA_CHECK_OP("attention_forward", cudaGetLastError());
}

// Block = one row (b, h, t): ds[t,j] for j <= t (dA = dy_t . v_j, then the softmax Jacobian).
// Dynamic shared memory: dy_t (hs floats).
__global__ void k_att_ds(float *ds, const float *dout, const float *qkv, const float *att, int T,
                         int C, int NH, int hs, float scale) {
  extern __shared__ float dy[];
  __shared__ float sh[32];
  size_t row = blockIdx.x;
  int t = (int)(row % T);
  size_t bh = row / T;
  int h = (int)(bh % NH);
  size_t b = bh / NH;
  const float *dyt = dout + (b * T + t) * C + (size_t)h * hs;
  for (int d = threadIdx.x; d < hs; d += blockDim.x)
    dy[d] = dyt[d];
  __syncthreads();
  const float *v = qkv + b * T * 3 * C + 2 * (size_t)C + (size_t)h * hs, *a = att + row * T;
  float *r = ds + row * T;
  float dot = 0.0f;
  for (int j = threadIdx.x; j <= t; j += blockDim.x) {
    const float *vj = v + (size_t)j * 3 * C;
    float s = 0.0f;
    for (int d = 0; d < hs; d++)
      s += dy[d] * vj[d];
    r[j] = s;
    dot += a[j] * s;
  }
  dot = block_sum(dot, sh); // sum_j A[t,j] dA[t,j]
  for (int j = threadIdx.x; j <= t; j += blockDim.x)
    r[j] = a[j] * (r[j] - dot) * scale;
}

// Block = one row (b, h, t): dq_t[d] = sum_{j<=t} ds[t,j] k_j[d].
__global__ void k_att_dq(float *dqkv, const float *ds, const float *qkv, int T, int C, int NH,
                         int hs) {
  size_t row = blockIdx.x;
  int t = (int)(row % T);
  size_t bh = row / T;
  int h = (int)(bh % NH);
  size_t b = bh / NH;
  const float *k = qkv + b * T * 3 * C + (size_t)C + (size_t)h * hs, *r = ds + row * T;
  float *dq = dqkv + (b * T + t) * 3 * C + (size_t)h * hs;
  for (int d = threadIdx.x; d < hs; d += blockDim.x) {
    float s = 0.0f;
    for (int j = 0; j <= t; j++)
      s += r[j] * k[(size_t)j * 3 * C + d];
    dq[d] = s;
  }
}

// Block = one key (b, h, j): dk_j[d] = sum_{t>=j} ds[t,j] q_t[d], dv_j[d] = sum_{t>=j}
// att[t,j] dy_t[d].
__global__ void k_att_dkv(float *dqkv, const float *ds, const float *dout, const float *qkv,
                          const float *att, int T, int C, int NH, int hs) {
  size_t key = blockIdx.x;
  int j = (int)(key % T);
  size_t bh = key / T;
  int h = (int)(bh % NH);
  size_t b = bh / NH;
  const float *q = qkv + b * T * 3 * C + (size_t)h * hs, *dy = dout + b * T * C + (size_t)h * hs;
  const float *r = ds + bh * T * T + j, *a = att + bh * T * T + j; // column j, row stride T
  float *dk = dqkv + (b * T + j) * 3 * C + (size_t)C + (size_t)h * hs, *dv = dk + C;
  for (int d = threadIdx.x; d < hs; d += blockDim.x) {
    float sk = 0.0f, sv = 0.0f;
    for (int t = j; t < T; t++) {
      sk += r[(size_t)t * T] * q[(size_t)t * 3 * C + d];
      sv += a[(size_t)t * T] * dy[(size_t)t * C + d];
    }
    dk[d] = sk;
    dv[d] = sv;
  }
}

void cuda_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                             const float *att, int B, int T, int C, int NH) {
  (void)scratch; // sized for the CPU; dS lives in the workspace here
  if (NH <= 0 || C % NH != 0)
    cuda_fail("attention_backward", __FILE__, __LINE__, "shape check",
              "C must be a multiple of NH");
  if (B <= 0 || T <= 0) return;
  int hs = C / NH;
  unsigned rows = (unsigned)((size_t)B * NH * T);
  float scale = 1.0f / sqrtf((float)hs);
  float *ds = (float *)cuda_workspace(sizeof(float) * (size_t)rows * T);
  cudaStream_t s = cuda_stream();
  k_att_ds<<<rows, ATT_THREADS, sizeof(float) * hs, s>>>(ds, dout, qkv, att, T, C, NH, hs, scale);
  CUDA_CHECK_OP("attention_backward", cudaGetLastError());
  k_att_dq<<<rows, ATT_THREADS, 0, s>>>(dqkv, ds, qkv, T, C, NH, hs);
  CUDA_CHECK_OP("attention_backward", cudaGetLastError());
  k_att_dkv<<<rows, ATT_THREADS, 0, s>>>(dqkv, ds, dout, qkv, att, T, C, NH, hs);
  CUDA_CHECK_OP("attention_backward", cudaGetLastError());
}
