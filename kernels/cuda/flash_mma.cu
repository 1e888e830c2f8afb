// kernels/cuda/flash_mma.cu: fused causal attention for bf16 mixed precision, head size 64, the
// default kernels of flash_cuda.cu's entry points (BRIGADE_CUDA_FLASH=wmma takes that file's
// WMMA kernels instead). The maths and the cache are flash_cuda.cu's (FlashAttention-2, Dao
// 2023; the cache: L [B*NH*T] natural log-sum-exps, then O [B*NH, T, 64] fp32); the products run
// on mma.sync with their operands from ldmatrix (kernels/cuda/ptx.cuh).
//
// A pre-pass (k_heads_bf16) writes q, k, v (and in backward dO) as bf16 per head, [B*NH][Tp][64]
// with Tp = T rounded up to 64 and zeros past T. The forward keeps q, k, v in the cache, after L
// and O, for the backward; the backward's pre-pass computes D = rowsum(dO * O) as it reads dO.
// (The values are what the WMMA kernels round as they load; under bf16 training the activations
// are bf16 values already.) Tiles then go from device
// memory to shared memory by cp.async, 16 bytes a thread, double-buffered: a block issues the
// next tile's copies before it computes on the current one, holding no registers for them.
// Shared tiles are 64 x 64 bf16 in rows of 72 (144 bytes: ldmatrix's 8 row reads hit distinct
// banks). ldmatrix gives every operand from these row-major tiles, .trans the ones whose pairs run
// down a column (V, dO, Q and K as the right factor of P V, P^T dO, dS^T Q, dS K).
//
// Each warp owns 16 rows of a tile, with the scores of its rows in registers: S = Q K^T is 8
// m16n8 tiles, the softmax (or the backward's P and dS) works on them in place, and they are
// rounded and paired straight into the A operand of the next product. No barrier inside a tile's
// arithmetic; one a tile, after its copies are waited for.
//   forward (per query tile of 64): Q's A operands in registers; per key tile up to the diagonal,
//     S, online softmax (row max over the 4 lanes sharing a row, two shuffles; row sums per lane,
//     added at the end), O = O alpha + P V in registers.
//   dK, dV (per key tile): K's and V's A operands in registers; per query tile at or after it,
//     S^T = K Q^T, P^T, dP^T = V dO^T, dS^T = P^T (dP^T - D) scale, dV += P^T dO, dK += dS^T Q.
//   dQ (per query tile): Q's and dO's A operands in registers; per key tile up to the diagonal,
//     S, P, dP = dO V^T, dS, dQ += dS K.
// Grids are one-dimensional, one block per (head, tile), a head's tiles adjacent so that the
// blocks running together share their heads' tiles in L2; the longest blocks of a head first.
// Every output is written once by one block, so results repeat bit for bit.
//
// Measured on an H100 at GPT-2-124M's shape (bench/attention, B=16, T=1024, 12 heads): forward
// 0.25 ms a layer (104 TFLOP/s of causal products, the pre-pass included), backward 0.54 ms (120);
// the WMMA kernels 0.63 and 1.49. Registers (sm_90): forward 128 (4 blocks an SM), dK/dV 236 (2),
// dQ 166 (3), no spills. Tried and not kept: blocks of 8 warps (128 rows: half the tile traffic
// per row, but fewer blocks; slower), and the backward held to fewer registers for more blocks
// an SM (no faster).
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "kernels/cuda/cuda.h"
#include "kernels/cuda/ptx.cuh"

typedef __nv_bfloat16 bf16;

enum {
  HS = 64,                    // head size
  TILE = 64,                  // rows of a tile (query rows or keys)
  WARPS = 4,                  // each warp 16 rows of a tile
  THREADS = 32 * WARPS,       //
  LD = 72,                    // a shared tile's row, in bf16
  TILE_ELEMS = TILE * LD,     //
  KS = HS / 16, NJ = TILE / 8, ND = HS / 8 // k-steps over a head, 8-column tiles of a tile row and of a head
};

#define FA_LOG2E 1.4426950408889634f
#define FA_LN2 0.6931471805599453f

// ---- the pre-pass ----

// Part p (< parts) of src's rows, head h: row t of batch b at src + (b T + t) stride + p C + 64 h,
// into dst [parts][B*NH][Tp][64] bf16, zeros for t >= T. One thread per 8 elements (16 bytes
// written); vec: src's rows 16-byte aligned (float4 loads). With O (parts = 1): D[bh T + t] =
// sum_d src * O[bh, t, d] (O's rows 16-byte aligned if ovec), summed over the row's 8 threads.
__global__ void k_heads_bf16(bf16 *dst, float *D, const float *O, const float *src, int B, int T, int Tp, int C,
                             int NH, int parts, size_t stride, int vec, int ovec) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x, n = (size_t)parts * B * NH * Tp * 8;
  bool in = i < n; // not returning: the D sum shuffles across the warp
  size_t row = in ? i / 8 : 0, bh = row / Tp % ((size_t)B * NH);
  int c8 = (int)(i % 8), t = (int)(row % Tp), p = (int)(row / ((size_t)Tp * B * NH));
  int b = (int)(bh / NH), h = (int)(bh % NH);
  float x[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  if (in && t < T) {
    const float *s = src + ((size_t)b * T + t) * stride + (size_t)p * C + (size_t)h * HS + 8 * c8;
    if (vec) {
      float4 u = *(const float4 *)s, w = *(const float4 *)(s + 4);
      x[0] = u.x, x[1] = u.y, x[2] = u.z, x[3] = u.w, x[4] = w.x, x[5] = w.y, x[6] = w.z, x[7] = w.w;
    } else {
      for (int k = 0; k < 8; k++) x[k] = s[k];
    }
  }
  if (in)
    *(uint4 *)(dst + row * HS + 8 * c8) =
        make_uint4(pack_bf16(x[0], x[1]), pack_bf16(x[2], x[3]), pack_bf16(x[4], x[5]), pack_bf16(x[6], x[7]));
  if (!D) return; // uniform across the grid
  float s = 0.0f;
  if (in && t < T) {
    const float *o = O + (bh * T + t) * HS + 8 * c8;
    float y[8];
    if (ovec) {
      float4 u = *(const float4 *)o, w = *(const float4 *)(o + 4);
      y[0] = u.x, y[1] = u.y, y[2] = u.z, y[3] = u.w, y[4] = w.x, y[5] = w.y, y[6] = w.z, y[7] = w.w;
    } else {
      for (int k = 0; k < 8; k++) y[k] = o[k];
    }
    // one sum for both loads, its fused multiply-adds spelled out: written as one expression the
    // compiler contracted it otherwise than the loop, and an O one float off 16 bytes (a cache
    // anywhere in its slot) gave other bits
    for (int k = 0; k < 8; k++) s = fmaf(x[k], y[k], s);
  }
  s += __shfl_xor_sync(0xffffffffu, s, 1);
  s += __shfl_xor_sync(0xffffffffu, s, 2);
  s += __shfl_xor_sync(0xffffffffu, s, 4);
  if (in && c8 == 0 && t < T) D[bh * T + t] = s;
}

// ---- tiles and operands ----

// the 64 x 64 bf16 tile at src (rows 64 elements apart) into dst (rows LD apart): 512 copies of
// 16 bytes, 4 a thread; the caller commits
__device__ __forceinline__ void load_tile(bf16 *dst, const bf16 *src) {
#pragma unroll
  for (int i = 0; i < TILE * HS / 8 / THREADS; i++) {
    int c = threadIdx.x + i * THREADS, r = c / 8, k = 8 * (c % 8);
    cp_async16(dst + r * LD + k, src + (size_t)r * HS + k);
  }
}

// a[kk] = the A operands of rows r0..r0+15 of the tile X (row-major), k-steps of 16 columns
__device__ __forceinline__ void load_a(uint32_t (&a)[KS][4], const bf16 *X, int r0, int lane) {
#pragma unroll
  for (int kk = 0; kk < KS; kk++) ldsm_x4(a[kk], X + (r0 + lane % 16) * LD + 16 * kk + 8 * (lane / 16));
}

// acc[j] += A times Y^T: B(k, n) = Y[n][k] for the tile Y's rows n in 8j..8j+7 (S = Q K^T: Y = K;
// dP = dO V^T: Y = V; and the transposed ones), k over the KS k-steps
__device__ __forceinline__ void times_t(float (&acc)[NJ][4], const uint32_t (&a)[KS][4], const bf16 *Y, int lane) {
#pragma unroll
  for (int jp = 0; jp < NJ / 2; jp++)
#pragma unroll
    for (int kk = 0; kk < KS; kk++) {
      uint32_t r[4];
      ldsm_x4(r, Y + (16 * jp + lane % 8 + 8 * (lane / 16)) * LD + 16 * kk + 8 * (lane / 8 % 2));
      uint32_t b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
      mma_bf16_16816(acc[2 * jp], a[kk], b0);
      mma_bf16_16816(acc[2 * jp + 1], a[kk], b1);
    }
}

// acc[d] += A times Z: B(k, n) = Z[k][n], the tile Z's rows k over the NJ / 2 k-steps of 16 and
// its columns n in 8d..8d+7 (O += P V, dV += P^T dO, dK += dS^T Q, dQ += dS K)
__device__ __forceinline__ void times(float (&acc)[ND][4], const uint32_t (&a)[NJ / 2][4], const bf16 *Z, int lane) {
#pragma unroll
  for (int dp = 0; dp < ND / 2; dp++)
#pragma unroll
    for (int kk = 0; kk < NJ / 2; kk++) {
      uint32_t r[4];
      ldsm_x4_t(r, Z + (16 * kk + lane % 8 + 8 * (lane / 8 % 2)) * LD + 16 * dp + 8 * (lane / 16));
      uint32_t b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
      mma_bf16_16816(acc[2 * dp], a[kk], b0);
      mma_bf16_16816(acc[2 * dp + 1], a[kk], b1);
    }
}

// the D tiles s[2kk], s[2kk + 1] (fp32, 16 rows x 16 columns) as bf16 A operands
__device__ __forceinline__ void to_a(uint32_t (&a)[NJ / 2][4], const float (&s)[NJ][4]) {
#pragma unroll
  for (int j = 0; j < NJ; j++) {
    a[j / 2][2 * (j % 2)] = pack_bf16(s[j][0], s[j][1]);
    a[j / 2][2 * (j % 2) + 1] = pack_bf16(s[j][2], s[j][3]);
  }
}

template <int N> __device__ __forceinline__ void zero(float (&acc)[N][4]) {
#pragma unroll
  for (int j = 0; j < N; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
}

// 16 rows x 64 columns of acc times mul0 (row row0) or mul1 (row0 + 8) into dst's rows (stride
// floats apart; rows at or past T are not written); q = lane % 4
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

// q, k, v: the pre-pass's [B*NH][Tp][64]. out [B, T, C] =; cache: L then O.
__global__ void __launch_bounds__(THREADS)
    k_mma_forward(float *out, float *cache, const bf16 *q, const bf16 *k, const bf16 *v, int T, int Tp, int C, int NH,
                  float scale) {
  extern __shared__ __align__(128) unsigned char smem[];
  bf16 *Ks = (bf16 *)smem, *Vs = Ks + 2 * TILE_ELEMS; // two buffers each; Q goes through Ks[1]

  int ntiles = Tp / TILE, bh = blockIdx.x / ntiles, qt = ntiles - 1 - blockIdx.x % ntiles;
  int h = bh % NH, b = bh / NH;
  int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q4 = lane % 4, q0 = qt * TILE;
  int row0 = q0 + 16 * w + g; // this lane's rows: row0 and row0 + 8
  float sl2 = scale * FA_LOG2E;
  size_t head = (size_t)bh * Tp * HS;
  load_tile(Ks + TILE_ELEMS, q + head + (size_t)q0 * HS);
  load_tile(Ks, k + head);
  load_tile(Vs, v + head);
  cp_async_commit();
  uint32_t qa[KS][4];
  float o[ND][4];
  zero<ND>(o);
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f; // rows row0, row0 + 8 (base-2 max; this lane's sums)

  for (int kt = 0; kt <= qt; kt++) {
    int k0 = kt * TILE, buf = kt & 1;
    cp_async_wait<0>();
    __syncthreads(); // tile kt is in; every warp is done with tile kt - 1's buffers
    if (kt == 0) {
      load_a(qa, Ks + TILE_ELEMS, 16 * w, lane);
      __syncthreads(); // Q is read: its buffer takes tile 1
    }
    if (kt < qt) { // the next tile's copies fly while this one is computed
      load_tile(Ks + (buf ^ 1) * TILE_ELEMS, k + head + (size_t)(k0 + TILE) * HS);
      load_tile(Vs + (buf ^ 1) * TILE_ELEMS, v + head + (size_t)(k0 + TILE) * HS);
      cp_async_commit();
    }
    float s[NJ][4];
    zero<NJ>(s);
    times_t(s, qa, Ks + buf * TILE_ELEMS, lane);
    // scores in base 2, the diagonal tile masked (keys past a row; key k0 <= every row of the
    // tile, so every row has a finite max)
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int j = 0; j < NJ; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        int key = k0 + 8 * j + 2 * q4 + (e & 1), row = row0 + 8 * (e / 2);
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
    to_a(pa, s);
    times(o, pa, Vs + buf * TILE_ELEMS, lane); // O += P V
  }
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  float inv0 = 1.0f / l0, inv1 = 1.0f / l1; // l >= 1: the row's max term is exp2(0)
  float *L = cache + (size_t)bh * T, *Oc = cache + (size_t)(gridDim.x / ntiles) * T + (size_t)bh * T * HS;
  store_rows(out + (size_t)b * T * C + (size_t)h * HS, C, o, row0, T, inv0, inv1, q4);
  store_rows(Oc, HS, o, row0, T, inv0, inv1, q4);
  if (q4 == 0) {
    if (row0 < T) L[row0] = (m0 + log2f(l0)) * FA_LN2;
    if (row0 + 8 < T) L[row0 + 8] = (m1 + log2f(l1)) * FA_LN2;
  }
}

// ---- backward ----

// dK and dV of one key tile, over the query tiles at or after it (per head, the first key tile,
// with the most query tiles, first). q, k, v, dO: the pre-pass's; D: rowsum(dO * O) [B*NH*T].
__global__ void __launch_bounds__(THREADS, 2)
    k_mma_dkv(float *dqkv, const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *dO, const float *cache,
              const float *D, int T, int Tp, int C, int NH, float scale) {
  extern __shared__ __align__(128) unsigned char smem[];
  bf16 *Qs = (bf16 *)smem, *dOs = Qs + 2 * TILE_ELEMS; // two buffers each; K and V go through [1]
  float *Lr = (float *)(dOs + 2 * TILE_ELEMS), *Dr = Lr + 2 * TILE; // [2][TILE] each

  int ntiles = Tp / TILE, bh = blockIdx.x / ntiles, kt = blockIdx.x % ntiles, h = bh % NH, b = bh / NH;
  int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q4 = lane % 4, k0 = kt * TILE;
  int key0 = k0 + 16 * w + g; // this lane's keys: key0, key0 + 8
  float sl2 = scale * FA_LOG2E;
  size_t head = (size_t)bh * Tp * HS;
  const float *L = cache + (size_t)bh * T, *Db = D + (size_t)bh * T;
  load_tile(Qs + TILE_ELEMS, k + head + (size_t)k0 * HS);
  load_tile(dOs + TILE_ELEMS, v + head + (size_t)k0 * HS);
  load_tile(Qs, q + head + (size_t)k0 * HS); // the first query tile is the key tile's own
  load_tile(dOs, dO + head + (size_t)k0 * HS);
  cp_async_commit();
  for (int i = threadIdx.x; i < TILE; i += THREADS) {
    Lr[i] = k0 + i < T ? L[k0 + i] * FA_LOG2E : 0.0f;
    Dr[i] = k0 + i < T ? Db[k0 + i] : 0.0f;
  }
  uint32_t ka[KS][4], va[KS][4];
  float dk[ND][4], dv[ND][4];
  zero<ND>(dk), zero<ND>(dv);

  for (int qt = kt; qt < ntiles; qt++) {
    int q0 = qt * TILE, buf = (qt - kt) & 1;
    cp_async_wait<0>();
    __syncthreads(); // query tile qt is in; every warp is done with the last one's buffers
    if (qt == kt) {
      load_a(ka, Qs + TILE_ELEMS, 16 * w, lane);
      load_a(va, dOs + TILE_ELEMS, 16 * w, lane);
      __syncthreads(); // K and V are read: their buffers take the next query tile
    }
    if (qt + 1 < ntiles) { // the next query tile's copies (and statistics) while this one is computed
      int n0 = q0 + TILE, nb = buf ^ 1;
      load_tile(Qs + nb * TILE_ELEMS, q + head + (size_t)n0 * HS);
      load_tile(dOs + nb * TILE_ELEMS, dO + head + (size_t)n0 * HS);
      cp_async_commit();
      for (int i = threadIdx.x; i < TILE; i += THREADS) {
        Lr[nb * TILE + i] = n0 + i < T ? L[n0 + i] * FA_LOG2E : 0.0f;
        Dr[nb * TILE + i] = n0 + i < T ? Db[n0 + i] : 0.0f;
      }
    }
    const bf16 *Qb = Qs + buf * TILE_ELEMS, *dOb = dOs + buf * TILE_ELEMS;
    const float *Lb = Lr + buf * TILE, *Dq = Dr + buf * TILE;
    float st[NJ][4], dpt[NJ][4]; // S^T and dP^T: this warp's 16 keys x the tile's 64 queries
    zero<NJ>(st), zero<NJ>(dpt);
    times_t(st, ka, Qb, lane);
    times_t(dpt, va, dOb, lane);
    // P^T = exp(S scale - L) where the query is at or after the key and before T; dS^T
#pragma unroll
    for (int j = 0; j < NJ; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        int c = 8 * j + 2 * q4 + (e & 1), qr = q0 + c, key = key0 + 8 * (e / 2);
        float p = qr < T && qr >= key ? exp2f(st[j][e] * sl2 - Lb[c]) : 0.0f;
        st[j][e] = p;
        dpt[j][e] = p * (dpt[j][e] - Dq[c]) * scale;
      }
    uint32_t pa[NJ / 2][4], dsa[NJ / 2][4];
    to_a(pa, st);
    to_a(dsa, dpt);
    times(dv, pa, dOb, lane);  // dV += P^T dO
    times(dk, dsa, Qb, lane);  // dK += dS^T Q
  }
  size_t stride = 3 * (size_t)C;
  float *rows = dqkv + (size_t)b * T * stride + (size_t)h * HS;
  store_rows(rows + C, stride, dk, key0, T, 1.0f, 1.0f, q4);
  store_rows(rows + 2 * (size_t)C, stride, dv, key0, T, 1.0f, 1.0f, q4);
}

// dQ of one query tile, over the key tiles up to the diagonal (per head, the last query tile first)
__global__ void __launch_bounds__(THREADS, 3)
    k_mma_dq(float *dqkv, const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *dO, const float *cache,
             const float *D, int T, int Tp, int C, int NH, float scale) {
  extern __shared__ __align__(128) unsigned char smem[];
  bf16 *Ks = (bf16 *)smem, *Vs = Ks + 2 * TILE_ELEMS; // two buffers each; Q and dO go through [1]

  int ntiles = Tp / TILE, bh = blockIdx.x / ntiles, qt = ntiles - 1 - blockIdx.x % ntiles;
  int h = bh % NH, b = bh / NH;
  int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q4 = lane % 4, q0 = qt * TILE;
  int row0 = q0 + 16 * w + g;
  float sl2 = scale * FA_LOG2E;
  size_t head = (size_t)bh * Tp * HS;
  const float *L = cache + (size_t)bh * T, *Db = D + (size_t)bh * T;
  load_tile(Ks + TILE_ELEMS, q + head + (size_t)q0 * HS);
  load_tile(Vs + TILE_ELEMS, dO + head + (size_t)q0 * HS);
  load_tile(Ks, k + head);
  load_tile(Vs, v + head);
  cp_async_commit();
  float lr0 = row0 < T ? L[row0] * FA_LOG2E : 0.0f, lr1 = row0 + 8 < T ? L[row0 + 8] * FA_LOG2E : 0.0f;
  float d0 = row0 < T ? Db[row0] : 0.0f, d1 = row0 + 8 < T ? Db[row0 + 8] : 0.0f;
  uint32_t qa[KS][4], da[KS][4];
  float dq[ND][4];
  zero<ND>(dq);

  for (int kt = 0; kt <= qt; kt++) {
    int k0 = kt * TILE, buf = kt & 1;
    cp_async_wait<0>();
    __syncthreads(); // key tile kt is in; every warp is done with the last one's buffers
    if (kt == 0) {
      load_a(qa, Ks + TILE_ELEMS, 16 * w, lane);
      load_a(da, Vs + TILE_ELEMS, 16 * w, lane);
      __syncthreads(); // Q and dO are read: their buffers take key tile 1
    }
    if (kt < qt) { // the next key tile's copies fly while this one is computed
      load_tile(Ks + (buf ^ 1) * TILE_ELEMS, k + head + (size_t)(k0 + TILE) * HS);
      load_tile(Vs + (buf ^ 1) * TILE_ELEMS, v + head + (size_t)(k0 + TILE) * HS);
      cp_async_commit();
    }
    const bf16 *Kb = Ks + buf * TILE_ELEMS;
    float s[NJ][4], dp[NJ][4];
    zero<NJ>(s), zero<NJ>(dp);
    times_t(s, qa, Kb, lane);
    times_t(dp, da, Vs + buf * TILE_ELEMS, lane); // dP = dO V^T
#pragma unroll
    for (int j = 0; j < NJ; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        int key = k0 + 8 * j + 2 * q4 + (e & 1), row = row0 + 8 * (e / 2);
        float p = row < T && key <= row ? exp2f(s[j][e] * sl2 - (e < 2 ? lr0 : lr1)) : 0.0f;
        dp[j][e] = p * (dp[j][e] - (e < 2 ? d0 : d1)) * scale;
      }
    uint32_t dsa[NJ / 2][4];
    to_a(dsa, dp);
    times(dq, dsa, Kb, lane); // dQ += dS K
  }
  store_rows(dqkv + (size_t)b * T * 3 * C + (size_t)h * HS, 3 * (size_t)C, dq, row0, T, 1.0f, 1.0f, q4);
}

// ---- host side ----

static int aligned16(const void *p, size_t row_floats) { return (uintptr_t)p % 16 == 0 && row_floats % 4 == 0; }

// one block per (head, tile) in a one-dimensional grid
static unsigned blocks(int B, int Tp, int NH, const char *op) {
  size_t n = (size_t)B * NH * (Tp / TILE);
  if (n > 0x7fffffffu)
    cuda_fail(op, __FILE__, __LINE__, "the fused attention's grid", "B * NH * T / 64 exceeds 2^31 - 1 blocks");
  return (unsigned)n;
}

// the pre-pass over `parts` parts of src into dst (and D from O when given)
static void heads_bf16(bf16 *dst, float *D, const float *O, const float *src, int B, int T, int Tp, int C, int NH,
                       int parts, size_t stride, const char *op) {
  size_t n = (size_t)parts * B * NH * Tp * 8;
  k_heads_bf16<<<(unsigned)((n + 255) / 256), 256, 0, cuda_stream()>>>(
      dst, D, O, src, B, T, Tp, C, NH, parts, stride, aligned16(src, stride), O ? aligned16(O, HS) : 0);
  LAUNCH_CHECK_OP(op);
}

// The fused path's cache (att): L [B*NH*T] and O [B*NH*T*64] (fp32, flash_cuda.cu's), then, from
// the next 128-byte boundary (att itself may lie anywhere in a layer's activation slot: 32 floats
// of slack), the forward's pre-pass's q, k, v (bf16 [3][B*NH][Tp][64]), which the backward reads
// back instead of converting qkv again (cp.async and the pre-pass's 16-byte stores need them
// aligned)
static bf16 *qkv_copies(const float *att, size_t BH, int T) {
  uintptr_t p = (uintptr_t)(att + BH * T * (1 + HS));
  return (bf16 *)((p + 127) & ~(uintptr_t)127);
}
size_t cuda_flash_cache_floats(int B, int T, int C, int NH) { return kernels_fused_attention_floats(B, T, NH, C / NH); }

void cuda_flash_mma_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
  int Tp = (T + TILE - 1) / TILE * TILE;
  size_t per = (size_t)B * NH * Tp * HS; // elements of one of q, k, v
  bf16 *q = qkv_copies(att, (size_t)B * NH, T), *k = q + per, *v = k + per;
  heads_bf16(q, nullptr, nullptr, qkv, B, T, Tp, C, NH, 3, 3 * (size_t)C, "attention_forward");
  size_t smem = 4 * (size_t)TILE_ELEMS * sizeof(bf16); // 36 KiB: no opt-in above 48 KiB needed
  k_mma_forward<<<blocks(B, Tp, NH, "attention_forward"), THREADS, smem, cuda_stream()>>>(
      out, att, q, k, v, T, Tp, C, NH, 1.0f / sqrtf((float)HS));
  LAUNCH_CHECK_OP("attention_forward");
}

void cuda_flash_mma_backward(float *dqkv, const float *dout, const float *qkv, const float *att, int B, int T, int C,
                             int NH) {
  (void)qkv; // its bf16 copies are in the cache
  int Tp = (T + TILE - 1) / TILE * TILE;
  size_t per = (size_t)B * NH * Tp * HS, rows = (size_t)B * NH * T;
  size_t dbytes = (rows * sizeof(float) + 127) / 128 * 128;
  unsigned char *ws = (unsigned char *)cuda_workspace(dbytes + per * sizeof(bf16));
  float *D = (float *)ws;
  bf16 *dO = (bf16 *)(ws + dbytes);
  const bf16 *q = qkv_copies(att, (size_t)B * NH, T), *k = q + per, *v = k + per;
  heads_bf16(dO, D, att + rows, dout, B, T, Tp, C, NH, 1, (size_t)C, "attention_backward");
  unsigned grid = blocks(B, Tp, NH, "attention_backward");
  float scale = 1.0f / sqrtf((float)HS);
  cudaStream_t s = cuda_stream();
  size_t smem_kv = 4 * (size_t)TILE_ELEMS * sizeof(bf16) + 4 * TILE * sizeof(float); // 37 KiB
  k_mma_dkv<<<grid, THREADS, smem_kv, s>>>(dqkv, q, k, v, dO, att, D, T, Tp, C, NH, scale);
  LAUNCH_CHECK_OP("attention_backward");
  size_t smem_q = 4 * (size_t)TILE_ELEMS * sizeof(bf16);
  k_mma_dq<<<grid, THREADS, smem_q, s>>>(dqkv, q, k, v, dO, att, D, T, Tp, C, NH, scale);
  LAUNCH_CHECK_OP("attention_backward");
}
