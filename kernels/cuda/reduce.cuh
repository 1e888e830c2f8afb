// kernels/cuda/reduce.cuh: warp and block reductions with a fixed order (shuffle trees, then
// warps in index order), so a reduction over the same data always gives the same bits.
#ifndef BRIGADE_KERNELS_CUDA_REDUCE_CUH
#define BRIGADE_KERNELS_CUDA_REDUCE_CUH

template <typename T> __device__ inline T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v; // every lane holds the same value (each step adds the same two operands)
}

__device__ inline float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) {
    float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = w > v ? w : v;
  }
  return v;
}

// Block-wide sum / max; blockDim.x a multiple of 32, at most 1024. Every thread gets the
// result. `sh` is shared scratch of 32 elements; the call ends with a barrier, so `sh` can be
// reused by the next call.
template <typename T> __device__ inline T block_sum(T v, T *sh) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum(v);
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  T s = lane < nw ? sh[lane] : T(0);
  s = warp_sum(s);
  __syncthreads();
  return s;
}

__device__ inline float block_max(float v, float *sh) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_max(v);
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  float m = lane < nw ? sh[lane] : -INFINITY;
  m = warp_max(m);
  __syncthreads();
  return m;
}

#endif
