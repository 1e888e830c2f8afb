// kernels/cuda/flash.cuh: what the two fused-attention kernel sets share (flash_cuda.cu on WMMA,
// flash_mma.cu on mma.sync): the tile shape, the staging of fp32 tiles into bf16 shared memory,
// and one warp's m16n8k16 bf16 product with its documented register layout.
#pragma once
#include <cuda_bf16.h>
#include <stdint.h>

typedef __nv_bfloat16 bf16;

// 64 query rows or keys a tile; one block of 4 warps, each warp 16 rows of the tile
enum { TILE = 64, WARPS = 4, FA_THREADS = 32 * WARPS };

// Scores go through exp2: S * scale * log2(e) in base-2 units (one multiply, and exp2f is one
// special-function instruction); the cache's L stays the natural log-sum-exp.
#define FA_LOG2E 1.4426950408889634f
#define FA_LN2 0.6931471805599453f

// One TILE x HS fp32 tile of one head (q, k or v of qkv, or dO) on its way into a bf16 shared
// tile, held in registers between the two halves: fetch() issues every global load of the tile
// at once (float4 when the rows are 16-byte aligned), put() rounds to bf16 and writes shared
// memory row by row (ld elements apart), put_t() its transpose (column d of the tile is row d
// of dst). A kernel fetches the next tile before it computes on the current one, so the loads'
// latency hides behind the tensor-core work instead of stalling each tile. Rows at or past T
// are zero. src points at row 0's first element of the head; rows are `stride` floats apart.
template <int HS> struct Staged {
  static constexpr int N = TILE * HS / 4 / FA_THREADS; // float4s per thread (8 at HS 64)
  static_assert(TILE * HS % (4 * FA_THREADS) == 0 && TILE % 16 == 0 && HS % 8 == 0, "a tile is whole float4s per thread");
  float4 v[N];
  // float4 number e of the tile: row r, columns d..d+3. A warp's 32 float4s are 16 rows x 2
  // adjacent float4s (16 full 32-byte sectors read), so that put_t's 2-byte writes land in 32
  // distinct banks (rows LD = 72 elements apart) and put's in few
  static __device__ __forceinline__ void where(int e, int &r, int &d) {
    r = e % 16 + 16 * (e / (4 * HS)), d = 4 * ((e / 16) % (HS / 4));
  }
  __device__ void fetch(const float *src, size_t stride, int r0, int T, bool vec) {
#pragma unroll
    for (int i = 0; i < N; i++) {
      int r, d;
      where(threadIdx.x + i * FA_THREADS, r, d);
      int t = r0 + r;
      if (t >= T) {
        v[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      } else if (vec) {
        v[i] = *(const float4 *)(src + (size_t)t * stride + d);
      } else {
        const float *x = src + (size_t)t * stride + d;
        v[i] = make_float4(x[0], x[1], x[2], x[3]);
      }
    }
  }
  __device__ void put(bf16 *dst, int ld = HS + 8) const {
#pragma unroll
    for (int i = 0; i < N; i++) {
      int r, d;
      where(threadIdx.x + i * FA_THREADS, r, d);
      bf16 *o = dst + r * ld + d;
      o[0] = __float2bfloat16_rn(v[i].x), o[1] = __float2bfloat16_rn(v[i].y);
      o[2] = __float2bfloat16_rn(v[i].z), o[3] = __float2bfloat16_rn(v[i].w);
    }
  }
  __device__ void put_t(bf16 *dst, int ld) const {
#pragma unroll
    for (int i = 0; i < N; i++) {
      int r, d;
      where(threadIdx.x + i * FA_THREADS, r, d);
      bf16 *o = dst + d * ld + r;
      o[0] = __float2bfloat16_rn(v[i].x), o[ld] = __float2bfloat16_rn(v[i].y);
      o[2 * ld] = __float2bfloat16_rn(v[i].z), o[3 * ld] = __float2bfloat16_rn(v[i].w);
    }
  }
};

// D (16 x 8, fp32) += A (16 x 16, bf16) B (16 x 8, bf16), one warp: PTX
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, whose register layout is documented (WMMA's
// is not), so scores and probabilities can stay in registers between products. Lane l, g = l / 4,
// q = l % 4; each 32-bit register holds two bf16, the lower column (A) or row (B) in its low half:
//   A: a[0] = A(g, 2q..2q+1), a[1] = A(g+8, 2q..2q+1), a[2] = A(g, 2q+8..2q+9), a[3] = A(g+8, 2q+8..2q+9)
//   B: b[0] = B(2q..2q+1, g), b[1] = B(2q+8..2q+9, g)
//   D: d[0], d[1] = D(g, 2q), D(g, 2q+1); d[2], d[3] = D(g+8, 2q), D(g+8, 2q+1)
// So the D tiles of two adjacent 8-column blocks, rounded to bf16 and paired, are an A operand
// over their 16 columns (flash_mma.cu's P and dS), and an A or B operand whose pairs run along a
// row of a row-major bf16 tile in shared memory is one 32-bit load (ld32).
#ifdef __CUDACC__
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// (lo, hi) rounded to bf16, lo in the low half
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *(uint32_t *)&v;
}
#else // the CUDA emulator (tests/emu): the same layout, computed across the warp's lanes
void emu_mma_bf16_16816(float *d, const uint32_t *a, const uint32_t *b);
inline void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  emu_mma_bf16_16816(d, a, b);
}
inline uint32_t pack_bf16(float lo, float hi) {
  return (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(lo)) |
         (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(hi)) << 16;
}
#endif
// two adjacent bf16 of shared memory (p 4-byte aligned) as one register
__device__ __forceinline__ uint32_t ld32(const bf16 *p) { return *(const uint32_t *)p; }
