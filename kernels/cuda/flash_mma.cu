// kernels/cuda/flash_mma.cu: the fused causal attention of flash_cuda.cu (same maths, same cache,
// same grids and tiles) with its products on mma.sync (flash.cuh's mma_bf16_16816) instead of
// WMMA: the default fused kernels; BRIGADE_CUDA_FLASH=wmma takes flash_cuda.cu's.
//
// WMMA's fragments have no documented layout, so flash_cuda.cu passes every score tile through
// shared memory (stored fp32, read back by the softmax, P written bf16, loaded again as a
// fragment) and keeps the forward's output accumulator there too. With mma.sync each lane knows
// which elements it holds: a warp's 16 rows of S = Q K^T stay in registers (8 tiles of 16 x 8),
// the softmax (or the backward's P and dS) works on them in place, and they are rounded and
// paired straight into the A operand of the next product (P V, P^T dO, dS^T Q, dS K). Shared
// memory holds only the bf16 tiles of Q, K, V and dO, some of them transposed (put_t) so that
// every operand pair is one 32-bit load, conflict-free with rows 72 elements apart. Each warp
// works on its own 16 rows from there: no barrier inside a tile's arithmetic.
//   forward (per query tile): Q's A operands in registers; per key tile up to the diagonal,
//     S = Q K^T, online softmax (the row max over the 4 lanes that share a row, two shuffles; the
//     row sums kept per lane and added at the end), O = O alpha + P V in registers.
//   dK, dV (per key tile): K's and V's A operands in registers; per query tile at or after it,
//     S^T = K Q^T, P^T, dP^T = V dO^T, dS^T = P^T (dP^T - D) scale, dV += P^T dO, dK += dS^T Q.
//   dQ (per query tile): Q's and dO's A operands in registers; per key tile up to the diagonal,
//     S, P, dP = dO V^T, dS, dQ += dS K.
// Every output is written once by one block, so results repeat bit for bit.
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "kernels/cuda/cuda.h"
#include "kernels/cuda/flash.cuh"

enum { LD = TILE + 8 }; // every shared tile: rows of 64 bf16 (a tile, or a transposed 64-wide head) + 8

// a[kk] = the A operands of this warp's 16 rows (row-major bf16 at rows, ld LD), k-steps of 16
template <int KS> __device__ __forceinline__ void load_a(uint32_t (&a)[KS][4], const bf16 *rows, int g, int q) {
#pragma unroll
  for (int kk = 0; kk < KS; kk++) {
    const bf16 *p = rows + g * LD + 16 * kk + 2 * q;
    a[kk][0] = ld32(p), a[kk][1] = ld32(p + 8 * LD), a[kk][2] = ld32(p + 8), a[kk][3] = ld32(p + 8 * LD + 8);
  }
}

// acc[j] (+)= A (this warp's 16 rows x 16 KS) times the transpose of Y's rows 8j..8j+7 (Y bf16,
// row-major at ld LD: B(k, n) = Y[8j + n][k], so each pair runs along a row of Y), for j < NJ
template <int NJ, int KS>
__device__ __forceinline__ void times_rows(float (&acc)[NJ][4], const uint32_t (&a)[KS][4], const bf16 *Y, int g,
                                           int q) {
#pragma unroll
  for (int j = 0; j < NJ; j++)
#pragma unroll
    for (int kk = 0; kk < KS; kk++) {
      const bf16 *p = Y + (8 * j + g) * LD + 16 * kk + 2 * q;
      uint32_t b[2] = {ld32(p), ld32(p + 8)};
      mma_bf16_16816(acc[j], a[kk], b);
    }
}

// the D tiles s[2kk], s[2kk + 1] (fp32, this warp's 16 rows x 16 columns) as bf16 A operands
template <int NJ> __device__ __forceinline__ void to_a(uint32_t (&a)[NJ / 2][4], const float (&s)[NJ][4]) {
#pragma unroll
  for (int j = 0; j < NJ; j++) {
    a[j / 2][2 * (j % 2)] = pack_bf16(s[j][0], s[j][1]);
    a[j / 2][2 * (j % 2) + 1] = pack_bf16(s[j][2], s[j][3]);
  }
}

// this warp's 16 rows x 8 ND columns of acc, times `mul`, to rows row0 and row0 + 8 of dst (rows
// `stride` floats apart; a row at or past T is not written)
template <int ND>
__device__ __forceinline__ void store_rows(float *dst, size_t stride, const float (&acc)[ND][4], int row0, int T,
                                           float mul0, float mul1, int q) {
#pragma unroll
  for (int d = 0; d < ND; d++) {
    int c = 8 * d + 2 * q;
    if (row0 < T) dst[(size_t)row0 * stride + c] = acc[d][0] * mul0, dst[(size_t)row0 * stride + c + 1] = acc[d][1] * mul0;
    if (row0 + 8 < T)
      dst[(size_t)(row0 + 8) * stride + c] = acc[d][2] * mul1, dst[(size_t)(row0 + 8) * stride + c + 1] = acc[d][3] * mul1;
  }
}

// ---- forward ----

// grid: one block per (head, query tile), a head's tiles adjacent (so that the blocks running
// together share their heads' K and V in L2), the last query tile of each head (the most keys)
// first. out [B, T, C] =; cache: L [B*NH*T] then
// O [B*NH, T, HS]. vec: qkv's rows are 16-byte aligned (float4 loads).
template <int HS, bool PF>
__global__ void __launch_bounds__(FA_THREADS)
    k_mma_forward(float *out, float *cache, const float *qkv, int T, int C, int NH, float scale, int vec) {
  static_assert(HS <= TILE, "a transposed head fits a tile's rows");
  constexpr int KS = HS / 16, NJ = TILE / 8, ND = HS / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16 *Qs = (bf16 *)smem, *Ks = Qs + TILE * LD, *Vt = Ks + TILE * LD; // Vt: V transposed, [HS][LD]

  int ntiles = (T + TILE - 1) / TILE, bh = blockIdx.x / ntiles, qt = ntiles - 1 - blockIdx.x % ntiles;
  int h = bh % NH, b = bh / NH;
  int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4, q0 = qt * TILE;
  int row0 = q0 + 16 * w + g; // this lane's rows: row0 and row0 + 8
  float sl2 = scale * FA_LOG2E;
  size_t stride = 3 * (size_t)C;
  const float *base = qkv + (size_t)b * T * stride + (size_t)h * HS;
  Staged<HS> kst, vst;
  kst.fetch(base, stride, q0, T, vec); // Q first, through the K registers
  kst.put(Qs, LD);
  kst.fetch(base + C, stride, 0, T, vec);
  vst.fetch(base + 2 * (size_t)C, stride, 0, T, vec);
  __syncthreads();
  uint32_t qa[KS][4];
  load_a<KS>(qa, Qs + 16 * w * LD, g, q);
  float o[ND][4];
#pragma unroll
  for (int d = 0; d < ND; d++) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f; // rows row0, row0 + 8 (base-2 max; this lane's sums)

  for (int kt = 0; kt <= qt; kt++) {
    int k0 = kt * TILE;
    __syncthreads(); // the previous tile's K and V are no longer read
    if (!PF && kt > 0) {
      kst.fetch(base + C, stride, k0, T, vec);
      vst.fetch(base + 2 * (size_t)C, stride, k0, T, vec);
    }
    kst.put(Ks, LD);
    vst.put_t(Vt, LD);
    __syncthreads();
    if (PF && kt < qt) { // the next tile's loads fly while this one is computed
      kst.fetch(base + C, stride, k0 + TILE, T, vec);
      vst.fetch(base + 2 * (size_t)C, stride, k0 + TILE, T, vec);
    }
    float s[NJ][4];
#pragma unroll
    for (int j = 0; j < NJ; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
    times_rows<NJ, KS>(s, qa, Ks, g, q);
    // scores in base 2, the diagonal tile masked (keys past a row; key k0 <= every row, so
    // each row has a finite max)
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int j = 0; j < NJ; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        int key = k0 + 8 * j + 2 * q + (e & 1), row = row0 + 8 * (e / 2);
        float x = kt == qt && key > row ? -INFINITY : s[j][e] * sl2;
        s[j][e] = x;
        if (e < 2) mx0 = fmaxf(mx0, x);
        else mx1 = fmaxf(mx1, x);
      }
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
    float al0 = exp2f(m0 - mn0), al1 = exp2f(m1 - mn1); // 0 on the first tile (m = -inf)
    m0 = mn0, m1 = mn1;
    float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
    for (int j = 0; j < NJ; j++) {
      s[j][0] = exp2f(s[j][0] - mn0), s[j][1] = exp2f(s[j][1] - mn0);
      s[j][2] = exp2f(s[j][2] - mn1), s[j][3] = exp2f(s[j][3] - mn1);
      sum0 += s[j][0] + s[j][1], sum1 += s[j][2] + s[j][3];
    }
    l0 = l0 * al0 + sum0, l1 = l1 * al1 + sum1;
#pragma unroll
    for (int d = 0; d < ND; d++) o[d][0] *= al0, o[d][1] *= al0, o[d][2] *= al1, o[d][3] *= al1;
    uint32_t pa[NJ / 2][4];
    to_a<NJ>(pa, s);
    times_rows<ND, NJ / 2>(o, pa, Vt, g, q); // O += P V: B(k, n) = V[k][n] = Vt[n][k]
  }
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  float inv0 = 1.0f / l0, inv1 = 1.0f / l1; // l >= 1: the row's max term is exp2(0)
  float *L = cache + (size_t)bh * T, *Oc = cache + (size_t)(gridDim.x / ntiles) * T + (size_t)bh * T * HS;
  store_rows<ND>(out + (size_t)b * T * C + (size_t)h * HS, C, o, row0, T, inv0, inv1, q);
  store_rows<ND>(Oc, HS, o, row0, T, inv0, inv1, q);
  if (q == 0) {
    if (row0 < T) L[row0] = (m0 + log2f(l0)) * FA_LN2;
    if (row0 + 8 < T) L[row0 + 8] = (m1 + log2f(l1)) * FA_LN2;
  }
}

// ---- backward (D = rowsum(dO * O) comes from flash_cuda.cu's k_flash_d) ----

// grid: one block per (head, key tile), a head's tiles adjacent, the first key tile (the most
// query tiles) first: dK and dV of one key tile, over the query tiles at or after it. vec:
// qkv's and dout's rows are 16-byte aligned.
template <int HS, bool PF>
__global__ void __launch_bounds__(FA_THREADS)
    k_mma_dkv(float *dqkv, const float *dout, const float *qkv, const float *cache, const float *D, int T, int C,
              int NH, float scale, int vec) {
  constexpr int KS = HS / 16, NJ = TILE / 8, ND = HS / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16 *Qs = (bf16 *)smem, *dOs = Qs + TILE * LD, *Qt = dOs + TILE * LD, *dOt = Qt + TILE * LD;
  float *Lr = (float *)(dOt + TILE * LD), *Dr = Lr + TILE;

  int ntiles = (T + TILE - 1) / TILE, bh = blockIdx.x / ntiles, kt = blockIdx.x % ntiles, h = bh % NH, b = bh / NH;
  int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4, k0 = kt * TILE;
  int key0 = k0 + 16 * w + g; // this lane's keys: key0, key0 + 8
  float sl2 = scale * FA_LOG2E;
  size_t stride = 3 * (size_t)C;
  const float *base = qkv + (size_t)b * T * stride + (size_t)h * HS;
  const float *dy = dout + (size_t)b * T * C + (size_t)h * HS;
  const float *L = cache + (size_t)bh * T, *Db = D + (size_t)bh * T;
  Staged<HS> qst, dst; // K and V first (their A operands), then each query tile's Q and dO
  qst.fetch(base + C, stride, k0, T, vec);
  dst.fetch(base + 2 * (size_t)C, stride, k0, T, vec);
  qst.put(Qs, LD);
  dst.put(dOs, LD);
  __syncthreads();
  uint32_t ka[KS][4], va[KS][4];
  load_a<KS>(ka, Qs + 16 * w * LD, g, q);
  load_a<KS>(va, dOs + 16 * w * LD, g, q);
  qst.fetch(base, stride, k0, T, vec); // the first query tile is the key tile's own
  dst.fetch(dy, C, k0, T, vec);
  float dk[ND][4], dv[ND][4];
#pragma unroll
  for (int d = 0; d < ND; d++)
#pragma unroll
    for (int e = 0; e < 4; e++) dk[d][e] = dv[d][e] = 0.0f;

  for (int qt = kt; qt < ntiles; qt++) {
    int q0 = qt * TILE;
    __syncthreads(); // the previous query tile (or K and V) is no longer read
    if (!PF && qt > kt) {
      qst.fetch(base, stride, q0, T, vec);
      dst.fetch(dy, C, q0, T, vec);
    }
    qst.put(Qs, LD);
    qst.put_t(Qt, LD);
    dst.put(dOs, LD);
    dst.put_t(dOt, LD);
    for (int i = threadIdx.x; i < TILE; i += blockDim.x) {
      Lr[i] = q0 + i < T ? L[q0 + i] * FA_LOG2E : 0.0f;
      Dr[i] = q0 + i < T ? Db[q0 + i] : 0.0f;
    }
    __syncthreads();
    if (PF && qt + 1 < ntiles) { // the next query tile's loads fly while this one is computed
      qst.fetch(base, stride, q0 + TILE, T, vec);
      dst.fetch(dy, C, q0 + TILE, T, vec);
    }
    float st[NJ][4], dpt[NJ][4]; // S^T and dP^T: this warp's 16 keys x the tile's 64 queries
#pragma unroll
    for (int j = 0; j < NJ; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) st[j][e] = dpt[j][e] = 0.0f;
    times_rows<NJ, KS>(st, ka, Qs, g, q);
    times_rows<NJ, KS>(dpt, va, dOs, g, q);
    // P^T = exp(S scale - L) where the query is at or after the key and before T; dS^T
#pragma unroll
    for (int j = 0; j < NJ; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        int c = 8 * j + 2 * q + (e & 1), qr = q0 + c, key = key0 + 8 * (e / 2);
        float p = qr < T && qr >= key ? exp2f(st[j][e] * sl2 - Lr[c]) : 0.0f;
        st[j][e] = p;
        dpt[j][e] = p * (dpt[j][e] - Dr[c]) * scale;
      }
    uint32_t pa[NJ / 2][4], dsa[NJ / 2][4];
    to_a<NJ>(pa, st);
    to_a<NJ>(dsa, dpt);
    times_rows<ND, NJ / 2>(dv, pa, dOt, g, q);  // dV += P^T dO: B(k, n) = dO[k][n] = dOt[n][k]
    times_rows<ND, NJ / 2>(dk, dsa, Qt, g, q);  // dK += dS^T Q
  }
  float *rows = dqkv + (size_t)b * T * stride + (size_t)h * HS;
  store_rows<ND>(rows + C, stride, dk, key0, T, 1.0f, 1.0f, q);
  store_rows<ND>(rows + 2 * (size_t)C, stride, dv, key0, T, 1.0f, 1.0f, q);
}

// grid as the forward's: dQ of one query tile, over the key tiles up to the diagonal
template <int HS, bool PF>
__global__ void __launch_bounds__(FA_THREADS)
    k_mma_dq(float *dqkv, const float *dout, const float *qkv, const float *cache, const float *D, int T, int C,
             int NH, float scale, int vec) {
  constexpr int KS = HS / 16, NJ = TILE / 8, ND = HS / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16 *Ks = (bf16 *)smem, *Vs = Ks + TILE * LD, *Kt = Vs + TILE * LD;

  int ntiles = (T + TILE - 1) / TILE, bh = blockIdx.x / ntiles, qt = ntiles - 1 - blockIdx.x % ntiles;
  int h = bh % NH, b = bh / NH;
  int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4, q0 = qt * TILE;
  int row0 = q0 + 16 * w + g;
  float sl2 = scale * FA_LOG2E;
  size_t stride = 3 * (size_t)C;
  const float *base = qkv + (size_t)b * T * stride + (size_t)h * HS;
  const float *L = cache + (size_t)bh * T, *Db = D + (size_t)bh * T;
  float lr0 = row0 < T ? L[row0] * FA_LOG2E : 0.0f, lr1 = row0 + 8 < T ? L[row0 + 8] * FA_LOG2E : 0.0f;
  float d0 = row0 < T ? Db[row0] : 0.0f, d1 = row0 + 8 < T ? Db[row0 + 8] : 0.0f;
  Staged<HS> kst, vst; // Q and dO first (their A operands), then each key tile's K and V
  kst.fetch(base, stride, q0, T, vec);
  vst.fetch(dout + (size_t)b * T * C + (size_t)h * HS, C, q0, T, vec);
  kst.put(Ks, LD);
  vst.put(Vs, LD);
  __syncthreads();
  uint32_t qa[KS][4], da[KS][4];
  load_a<KS>(qa, Ks + 16 * w * LD, g, q);
  load_a<KS>(da, Vs + 16 * w * LD, g, q);
  kst.fetch(base + C, stride, 0, T, vec);
  vst.fetch(base + 2 * (size_t)C, stride, 0, T, vec);
  float dq[ND][4];
#pragma unroll
  for (int d = 0; d < ND; d++) dq[d][0] = dq[d][1] = dq[d][2] = dq[d][3] = 0.0f;

  for (int kt = 0; kt <= qt; kt++) {
    int k0 = kt * TILE;
    __syncthreads(); // the previous key tile (or Q and dO) is no longer read
    if (!PF && kt > 0) {
      kst.fetch(base + C, stride, k0, T, vec);
      vst.fetch(base + 2 * (size_t)C, stride, k0, T, vec);
    }
    kst.put(Ks, LD);
    kst.put_t(Kt, LD);
    vst.put(Vs, LD);
    __syncthreads();
    if (PF && kt < qt) { // the next key tile's loads fly while this one is computed
      kst.fetch(base + C, stride, k0 + TILE, T, vec);
      vst.fetch(base + 2 * (size_t)C, stride, k0 + TILE, T, vec);
    }
    float s[NJ][4], dp[NJ][4];
#pragma unroll
    for (int j = 0; j < NJ; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) s[j][e] = dp[j][e] = 0.0f;
    times_rows<NJ, KS>(s, qa, Ks, g, q);
    times_rows<NJ, KS>(dp, da, Vs, g, q); // dP = dO V^T
#pragma unroll
    for (int j = 0; j < NJ; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        int key = k0 + 8 * j + 2 * q + (e & 1), row = row0 + 8 * (e / 2);
        float p = row < T && key <= row ? exp2f(s[j][e] * sl2 - (e < 2 ? lr0 : lr1)) : 0.0f;
        dp[j][e] = p * (dp[j][e] - (e < 2 ? d0 : d1)) * scale;
      }
    uint32_t dsa[NJ / 2][4];
    to_a<NJ>(dsa, dp);
    times_rows<ND, NJ / 2>(dq, dsa, Kt, g, q); // dQ += dS K: B(k, n) = K[k][n] = Kt[n][k]
  }
  store_rows<ND>(dqkv + (size_t)b * T * stride + (size_t)h * HS, stride, dq, row0, T, 1.0f, 1.0f, q);
}

// ---- host side ----

// one block per (head, tile) in a one-dimensional grid
static unsigned blocks(int B, int T, int NH, const char *op) {
  size_t n = (size_t)B * NH * ((T + TILE - 1) / TILE);
  if (n > 0x7fffffffu) cuda_fail(op, __FILE__, __LINE__, "the fused attention's grid", "B * NH * T / 64 exceeds 2^31 - 1 blocks");
  return (unsigned)n;
}

// prefetch: each block loads its next tile into registers while it computes on the current one
// (255 registers a thread, 2 blocks an SM on sm_90); else it loads each tile when it needs it
// (fewer registers, more blocks an SM to hide the loads instead)
void cuda_flash_mma_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH, int vec,
                            int prefetch) {
  size_t smem = 3 * (size_t)TILE * LD * sizeof(bf16); // 27 KiB: no opt-in above 48 KiB needed
  unsigned grid = blocks(B, T, NH, "attention_forward");
  float scale = 1.0f / sqrtf(64.0f);
  auto fwd = prefetch ? k_mma_forward<64, true> : k_mma_forward<64, false>;
  fwd<<<grid, FA_THREADS, smem, cuda_stream()>>>(out, att, qkv, T, C, NH, scale, vec);
  LAUNCH_CHECK_OP("attention_forward");
}

void cuda_flash_mma_backward(float *dqkv, const float *dout, const float *qkv, const float *att, const float *D,
                             int B, int T, int C, int NH, int vec, int prefetch) {
  unsigned grid = blocks(B, T, NH, "attention_backward");
  cudaStream_t s = cuda_stream();
  float scale = 1.0f / sqrtf(64.0f);
  size_t smem_kv = 4 * (size_t)TILE * LD * sizeof(bf16) + 2 * TILE * sizeof(float); // 36.5 KiB
  size_t smem_q = 3 * (size_t)TILE * LD * sizeof(bf16);
  auto dkv = prefetch ? k_mma_dkv<64, true> : k_mma_dkv<64, false>;
  auto dq = prefetch ? k_mma_dq<64, true> : k_mma_dq<64, false>;
  dkv<<<grid, FA_THREADS, smem_kv, s>>>(dqkv, dout, qkv, att, D, T, C, NH, scale, vec);
  LAUNCH_CHECK_OP("attention_backward");
  dq<<<grid, FA_THREADS, smem_q, s>>>(dqkv, dout, qkv, att, D, T, C, NH, scale, vec);
  LAUNCH_CHECK_OP("attention_backward");
}
