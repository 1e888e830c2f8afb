// kernels/cuda/ptx.cuh: the warp-level tensor-core and copy instructions flash_mma.cu is built
// on, as PTX (sm_80 and later), each with its emulation for the CUDA emulator (tests/emu, where
// __CUDACC__ is not defined: tests/emu/emu.cpp computes them across a warp's lanes).
//
// mma_bf16_16816: D (16 x 8, fp32) += A (16 x 16, bf16) B (16 x 8, bf16), one warp, PTX
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, whose register layout is documented (WMMA's
// is not), so values can stay in registers between products. Lane l, g = l / 4, q = l % 4; each
// 32-bit register holds two bf16, the lower column (A) or row (B) in its low half:
//   A: a[0] = A(g, 2q..2q+1), a[1] = A(g+8, 2q..2q+1), a[2] = A(g, 2q+8..2q+9), a[3] = A(g+8, 2q+8..2q+9)
//   B: b[0] = B(2q..2q+1, g), b[1] = B(2q+8..2q+9, g)
//   D: d[0], d[1] = D(g, 2q), D(g, 2q+1); d[2], d[3] = D(g+8, 2q), D(g+8, 2q+1)
// So the D tiles of two adjacent 8-column blocks, rounded to bf16 and paired, are an A operand
// over their 16 columns.
//
// ldsm_x4 / ldsm_x4_t: ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16, four 8 x 8 bf16
// matrices from shared memory, one warp: lanes 8i..8i+7 give the addresses of matrix i's 8 rows
// (16 bytes each), and r[i] of lane l holds matrix i's elements (l / 4, 2(l % 4)..+1), or with
// .trans its (2(l % 4)..+1, l / 4): an A operand, or B operands, straight from a row-major tile.
//
// cp_async16 / cp_async_commit / cp_async_wait<N>: cp.async.cg.shared.global of 16 bytes, issued
// without waiting; commit closes this thread's group of copies; wait<N> waits until at most N of
// its groups are still in flight. Another thread sees the copied bytes only after the wait and a
// barrier. The emulator poisons the destination at the call and copies at the first block
// barrier after the wait, so a read before the wait or the barrier, or a copy over a buffer still
// being read, shows there.
#pragma once
#include <cuda_bf16.h>
#include <stdint.h>

#ifdef __CUDACC__
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const __nv_bfloat16 *p) {
  unsigned a = (unsigned)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a)
               : "memory");
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const __nv_bfloat16 *p) {
  unsigned a = (unsigned)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a)
               : "memory");
}
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem) {
  unsigned a = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(a), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
// (lo, hi) rounded to bf16, lo in the low half
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *(uint32_t *)&v;
}
#else
void emu_mma_bf16_16816(float *d, const uint32_t *a, const uint32_t *b);
void emu_ldmatrix_x4(uint32_t *r, const void *p, int trans);
void emu_cp_async16(void *smem, const void *gmem);
void emu_cp_async_commit(void);
void emu_cp_async_wait(int n);
inline void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  emu_mma_bf16_16816(d, a, b);
}
inline void ldsm_x4(uint32_t (&r)[4], const __nv_bfloat16 *p) { emu_ldmatrix_x4(r, p, 0); }
inline void ldsm_x4_t(uint32_t (&r)[4], const __nv_bfloat16 *p) { emu_ldmatrix_x4(r, p, 1); }
inline void cp_async16(void *smem, const void *gmem) { emu_cp_async16(smem, gmem); }
inline void cp_async_commit() { emu_cp_async_commit(); }
template <int N> inline void cp_async_wait() { emu_cp_async_wait(N); }
inline uint32_t pack_bf16(float lo, float hi) {
  return (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(lo)) |
         (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(hi)) << 16;
}
#endif
