// tests/emu/include/cuda_runtime.h: the part of the CUDA runtime and of the device built-ins that
// kernels/cuda/ uses, declared for the emulator (tests/emu/emu.cpp defines them). Not NVIDIA's.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <type_traits>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) alignas(n)

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct alignas(16) float4 {
  float x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }
extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;

typedef enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorNotReady = 600
} cudaError_t;
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventDisableTiming 0x02

const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetLastError(void);
cudaError_t cudaMalloc(void **p, size_t bytes);
template <class T> cudaError_t cudaMalloc(T **p, size_t bytes) {
  return cudaMalloc((void **)p, bytes);
}
cudaError_t cudaFree(void *p);
cudaError_t cudaMemsetAsync(void *p, int v, size_t bytes, cudaStream_t s = 0);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind k,
                            cudaStream_t s = 0);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamQuery(cudaStream_t s);
// pinned host memory and events: the emulator runs everything at once, in call order
cudaError_t cudaMallocHost(void **p, size_t bytes);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventQuery(cudaEvent_t e);
// ms from a's record to b's (both recorded, neither made with cudaEventDisableTiming): the host's
// clock at each record, the emulator running every call at once
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDevice(int *d);
struct cudaUUID_t {
  char bytes[16];
};
struct cudaDeviceProp {
  char name[256];
  cudaUUID_t uuid;
};
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int d);
cudaError_t cudaDeviceGetPCIBusId(char *bus, int len, int d);
cudaError_t emu_func_set_attr(const void *k, int attr, int value);
template <class K> cudaError_t cudaFuncSetAttribute(K k, cudaFuncAttribute a, int v) {
  return emu_func_set_attr((const void *)k, (int)a, v);
}

// ---- device side ----
void __syncthreads(void);
void __syncwarp(unsigned mask = 0xffffffffu);
void emu_shfl_slot_write(const void *v, size_t sz);
void emu_shfl_slot_read(void *v, size_t sz, int src_lane);
void emu_shfl_begin(unsigned mask);
void emu_warp_barrier(void);
template <class T> T __shfl_xor_sync(unsigned mask, T v, int lm, int width = 32) {
  static_assert(sizeof(T) <= 8, "shfl");
  if (width != 32) {
    fprintf(stderr, "tests/emu: shuffle width other than 32 (not emulated)\n");
    abort();
  }
  emu_shfl_begin(mask);
  emu_shfl_slot_write(&v, sizeof v);
  emu_warp_barrier();
  T r;
  emu_shfl_slot_read(&r, sizeof r, (int)((threadIdx.x & 31) ^ (unsigned)lm));
  emu_warp_barrier();
  return r;
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  memcpy(&u, &f, 4);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
float __fmul_rn(float a, float b);
inline int min(int a, int b) { return a < b ? a : b; }
inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) {
  auto o = *p;
  *p += v;
  return o;
}
unsigned char *emu_dyn_smem(void);
void emu_static_smem(void *p, size_t bytes); // a static __shared__ array: NaN at a block's start

// Work queued on the legacy default stream (0) is not ordered with the backend's
// cudaStreamNonBlocking streams: a launch, copy, memset, event or GEMM given no stream aborts.
void emu_check_stream(cudaStream_t s, const char *what);
// An asynchronous call on stream s has run (an NCCL call: tests/emu/nccl_emu.cpp; a copy): what
// it read (in, in_bytes; none: NULL, 0) must not change, and what it wrote (out, out_bytes) stays
// hidden (NaN), until s is waited for (tests/emu/emu.cpp, streams and events).
void emu_call_done(cudaStream_t s, const char *what, const void *in, size_t in_bytes, void *out, size_t out_bytes);
// Such a call is issued on s (the stream checked, s's earlier results made visible to it; their
// inputs stay watched), and it is about to write [p, p + bytes): the inputs of s's earlier calls
// there are settled first (s writing them after reading them is in order).
void emu_check_stream_call(cudaStream_t s, const char *what);
void emu_stream_writes(cudaStream_t s, const void *p, size_t bytes);

// ---- launches: tests/emu/prep.sed turns k<<<grid, block, smem, stream>>>(args) into
// emu_launch(k, grid, block, smem, stream)(args) ----
void emu_run_grid(const void *k, dim3 grid, dim3 block, size_t smem,
                  const std::function<void()> &body);
template <class... P> struct EmuLauncher {
  void (*k)(P...);
  dim3 grid, block;
  size_t smem;
  cudaStream_t stream;
  template <class... A> void operator()(A &&...a) {
    emu_check_stream(stream, "a kernel launch");
    std::function<void()> f = [&]() { k(a...); };
    emu_run_grid((const void *)k, grid, block, smem, f);
  }
};
template <class... P>
EmuLauncher<P...> emu_launch(void (*k)(P...), dim3 grid, dim3 block, size_t smem = 0,
                             cudaStream_t stream = 0) {
  return EmuLauncher<P...>{k, grid, block, smem, stream};
}
