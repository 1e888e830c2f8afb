// kernels/cuda/flash_cuda.cu: fused ("flash") causal attention on bf16 tensor cores, for bf16
// mixed precision: attention_cuda.cu calls it when cuda_flash_usable() says yes (the default
// under bf16; BRIGADE_CUDA_ATTENTION=gemm takes the per-head GEMMs instead). These are the WMMA
// kernels (BRIGADE_CUDA_FLASH=wmma); the default is flash_mma.cu's, the same maths and cache on
// mma.sync with the scores in registers, to which forward() and backward() below hand over.
//
// The maths of attention_cuda.cu (ops.h's attention contract), computed the FlashAttention-2
// way (Dao 2023): the T x T scores never reach device memory. Tiles of 64 query rows x 64 keys;
// one block of 4 warps per (query or key tile, b, h); each warp owns 16 rows of every tile and
// multiplies 16x16x16 bf16 fragments with fp32 accumulation (WMMA). Q, K, V, P, dO and dS are
// rounded to bf16 as they enter shared memory; scores, softmax statistics and the output and
// gradient accumulators stay fp32.
//   forward (per query tile): for each key tile up to the diagonal, S = Q K^T * scale, online
//     softmax (running row max m and sum l, the accumulator rescaled by exp(m_old - m_new)),
//     O += P V; at the end O /= l and L = m + log(l).
//   backward: D = rowsum(dO * O); per key tile, over the query tiles at or after it,
//     P = exp(S * scale - L), dV += P^T dO, dP = dO V^T, dS = P (dP - D) scale, dK += dS^T Q;
//     per query tile, over the key tiles up to the diagonal, dQ += dS K (recomputing S and dP:
//     a second kernel instead of FlashAttention-2's atomic adds into dQ, so every output is
//     written once by one block and results repeat bit for bit).
// Speed: every block fetches its next K/V (or Q/dO) tile into registers (float4 loads) before it
// computes on the current one, so global latency hides behind the tensor-core work; the forward's
// online softmax gives each row two lanes (one shuffle per reduction) and works in base 2
// (exp2f); the query-tile grids run their longest blocks (the most tiles under the diagonal)
// first.
// The caller's att buffer (cuda_flash_cache_floats: kernels_fused_attention_floats) holds this
// path's cache: L [B*NH*T], then O [B*NH, T, hs]; flash_mma.cu keeps its bf16 q, k, v after them.
// D lives in the workspace.
#include <cuda_bf16.h>
#include <math.h>
#include <mma.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda.h"
#include "kernels/cuda/reduce.cuh"

using namespace nvcuda;
typedef __nv_bfloat16 bf16;

enum { TILE = 64, WARPS = 4, FA_THREADS = 32 * WARPS, SLD = TILE + 4, PLD = TILE + 8 };

// Shared-memory layout of one block, in elements: bf16 tiles [TILE][HS + 8], fp32 tiles
// [TILE][TILE + 4] or [TILE][HS + 4]; every array starts on a 128-byte boundary (WMMA wants 32).
template <int HS> struct Smem {
  static constexpr int HLD = HS + 8, FLD = HS + 4;
  static constexpr size_t bf_tile = (size_t)TILE * HLD * sizeof(bf16);
  static constexpr size_t p_tile = (size_t)TILE * PLD * sizeof(bf16);
  static constexpr size_t s_tile = (size_t)TILE * SLD * sizeof(float);
  static constexpr size_t o_tile = (size_t)TILE * FLD * sizeof(float);
  __host__ __device__ static constexpr size_t up(size_t b) { return (b + 127) & ~(size_t)127; }
};

// One TILE x HS fp32 tile of one head (q, k or v of qkv, or dO) on its way into a bf16 shared
// tile, held in registers between the two halves: fetch() issues every global load of the tile
// at once (float4 when the rows are 16-byte aligned), put() rounds to bf16 and writes shared
// memory. A kernel fetches the next tile before it computes on the current one, so the loads'
// latency hides behind the tensor-core work instead of stalling each tile. Rows at or past T
// are zero. src points at row 0's first element of the head; rows are `stride` floats apart.
template <int HS> struct Staged {
  static constexpr int N = TILE * HS / 4 / FA_THREADS; // float4s per thread (8 at HS 64)
  static_assert(TILE * HS % (4 * FA_THREADS) == 0, "a tile is whole float4s per thread");
  float4 v[N];
  __device__ void fetch(const float *src, size_t stride, int r0, int T, bool vec) {
#pragma unroll
    for (int i = 0; i < N; i++) {
      int e = threadIdx.x + i * FA_THREADS, r = e / (HS / 4), d = 4 * (e % (HS / 4)), t = r0 + r;
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
  __device__ void put(bf16 *dst) const {
    constexpr int HLD = Smem<HS>::HLD;
#pragma unroll
    for (int i = 0; i < N; i++) {
      int e = threadIdx.x + i * FA_THREADS, r = e / (HS / 4), d = 4 * (e % (HS / 4));
      bf16 *o = dst + r * HLD + d;
      o[0] = __float2bfloat16_rn(v[i].x), o[1] = __float2bfloat16_rn(v[i].y);
      o[2] = __float2bfloat16_rn(v[i].z), o[3] = __float2bfloat16_rn(v[i].w);
    }
  }
};

// acc(16 x 16) = sum over k of A[16 x 16k] B[16k x 16]; A row-major at a (ld lda), B read
// through `Bfrag` (row- or column-major) at b + k*bstep.
template <typename BLayout, int KSTEPS>
__device__ void mma_row(wmma::fragment<wmma::accumulator, 16, 16, 16, float> &acc, const bf16 *a, int lda,
                        const bf16 *b, int ldb, size_t bstep) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, BLayout> fb;
  for (int k = 0; k < KSTEPS; k++) {
    wmma::load_matrix_sync(fa, a + 16 * k, lda);
    wmma::load_matrix_sync(fb, b + k * bstep, ldb);
    wmma::mma_sync(acc, fa, fb, acc);
  }
}

// out[16 rows of warp w][TILE] (fp32, ld SLD) = X[16 rows][HS] Y[TILE][HS]^T: scores (X = Q,
// Y = K) or dP (X = dO, Y = V), both bf16 with ld HLD.
template <int HS> __device__ void rows_times_t(float *out, const bf16 *X, const bf16 *Y, int w) {
  constexpr int HLD = Smem<HS>::HLD;
  for (int n = 0; n < TILE / 16; n++) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    // B(k, n') = Y[16n + n'][k]: column-major at Y + 16n rows, k advancing along the row
    mma_row<wmma::col_major, HS / 16>(acc, X + 16 * w * HLD, HLD, Y + 16 * n * HLD, HLD, 16);
    wmma::store_matrix_sync(out + 16 * w * SLD + 16 * n, acc, SLD, wmma::mem_row_major);
  }
}

// acc[16 rows of warp w][HS] (fp32, ld HS + 4) += A[16 rows][TILE] Z[TILE][HS], A bf16 (ld PLD)
// read as stored (transposed = false) or as its transpose (A^T rows = A's columns), Z bf16
// (ld HLD).
template <int HS, bool TRANSPOSED>
__device__ void rows_times(float *acc_s, const bf16 *A, const bf16 *Z, int w) {
  constexpr int HLD = Smem<HS>::HLD, FLD = Smem<HS>::FLD;
  for (int n = 0; n < HS / 16; n++) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    float *o = acc_s + 16 * w * FLD + 16 * n;
    wmma::load_matrix_sync(acc, o, FLD, wmma::mem_row_major);
    for (int k = 0; k < TILE / 16; k++) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> fb;
      wmma::load_matrix_sync(fb, Z + 16 * k * HLD + 16 * n, HLD);
      if (TRANSPOSED) { // a(r, c) = A[16k + c][16w + r]: column-major at A[16k][16w]
        wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::col_major> fa;
        wmma::load_matrix_sync(fa, A + 16 * k * PLD + 16 * w, PLD);
        wmma::mma_sync(acc, fa, fb, acc);
      } else {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa;
        wmma::load_matrix_sync(fa, A + 16 * w * PLD + 16 * k, PLD);
        wmma::mma_sync(acc, fa, fb, acc);
      }
    }
    wmma::store_matrix_sync(o, acc, FLD, wmma::mem_row_major);
  }
}

// The same product accumulated in registers: acc[n] holds columns [16n, 16n + 16) of this
// warp's 16 rows (the backward's dK, dV and dQ, which need no rescaling between tiles).
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> Acc;
template <int HS, bool TRANSPOSED> __device__ void rows_times_reg(Acc (&acc)[HS / 16], const bf16 *A, const bf16 *Z, int w) {
  constexpr int HLD = Smem<HS>::HLD;
#pragma unroll
  for (int n = 0; n < HS / 16; n++) {
#pragma unroll
    for (int k = 0; k < TILE / 16; k++) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> fb;
      wmma::load_matrix_sync(fb, Z + 16 * k * HLD + 16 * n, HLD);
      if (TRANSPOSED) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::col_major> fa;
        wmma::load_matrix_sync(fa, A + 16 * k * PLD + 16 * w, PLD);
        wmma::mma_sync(acc[n], fa, fb, acc[n]);
      } else {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa;
        wmma::load_matrix_sync(fa, A + 16 * w * PLD + 16 * k, PLD);
        wmma::mma_sync(acc[n], fa, fb, acc[n]);
      }
    }
  }
}

// this warp's 16 rows of acc into an fp32 tile (ld SLD >= HS) for the global write
template <int HS> __device__ void store_rows(float *tile, Acc (&acc)[HS / 16], int w) {
#pragma unroll
  for (int n = 0; n < HS / 16; n++)
    wmma::store_matrix_sync(tile + 16 * w * SLD + 16 * n, acc[n], SLD, wmma::mem_row_major);
}

// ---- forward ----

// Scores go through exp2: S * scale * log2(e) in base-2 units (one multiply, and exp2f is one
// special-function instruction); the cache's L stays the natural log-sum-exp.
#define FA_LOG2E 1.4426950408889634f
#define FA_LN2 0.6931471805599453f

// grid (B*NH, query tiles), the last query tiles (the most keys) first, so that the longest
// blocks start earliest. out [B, T, C] =; cache: L [B*NH*T] then O [B*NH, T, HS]. vec: qkv's rows
// are 16-byte aligned (float4 loads).
template <int HS>
__global__ void __launch_bounds__(FA_THREADS)
    k_flash_forward(float *out, float *cache, const float *qkv, int T, int C, int NH, float scale, int vec) {
  typedef Smem<HS> S;
  constexpr int FLD = S::FLD;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16 *Qs = (bf16 *)smem, *Ks = (bf16 *)(smem + S::up(S::bf_tile)), *Vs = (bf16 *)(smem + 2 * S::up(S::bf_tile));
  unsigned char *rest = smem + 3 * S::up(S::bf_tile);
  float *Ss = (float *)rest, *Os = (float *)(rest + S::up(S::s_tile));
  bf16 *Ps = (bf16 *)(rest + S::up(S::s_tile) + S::up(S::o_tile));
  float *Ls = (float *)(rest + S::up(S::s_tile) + S::up(S::o_tile) + S::up(S::p_tile)), *Ms = Ls + TILE;

  int qt = gridDim.y - 1 - blockIdx.y, bh = blockIdx.x, h = bh % NH, b = bh / NH;
  int w = threadIdx.x / 32, lane = threadIdx.x % 32, q0 = qt * TILE;
  // the softmax's share of this lane: row rr of the tile (two lanes a row), columns 2c + half
  int rr = 16 * w + lane / 2, half = lane % 2, t = q0 + rr;
  float sl2 = scale * FA_LOG2E;
  size_t stride = 3 * (size_t)C;
  const float *base = qkv + (size_t)b * T * stride + (size_t)h * HS;
  Staged<HS> kst, vst;
  kst.fetch(base, stride, q0, T, vec); // Q first, through the K registers
  kst.put(Qs);
  kst.fetch(base + C, stride, 0, T, vec);
  vst.fetch(base + 2 * (size_t)C, stride, 0, T, vec);
  for (int i = threadIdx.x; i < TILE * FLD; i += blockDim.x) Os[i] = 0.0f;
  float m = -INFINITY, l = 0.0f; // this lane's row: running max (base-2 units) and sum

  for (int kt = 0; kt <= qt; kt++) {
    int k0 = kt * TILE;
    __syncthreads(); // the previous tile's K and V are no longer read
    kst.put(Ks);
    vst.put(Vs);
    __syncthreads();
    if (kt < qt) { // the next tile's loads fly while this one is computed
      kst.fetch(base + C, stride, k0 + TILE, T, vec);
      vst.fetch(base + 2 * (size_t)C, stride, k0 + TILE, T, vec);
    }
    rows_times_t<HS>(Ss, Qs, Ks, w); // S for this warp's rows
    __syncwarp();
    // online softmax: each lane its half of its row (columns 2c + half, the last one under the
    // diagonal `last`), the pair combined by one shuffle; two passes over the row in shared
    // memory (max, then exp2) rather than 32 more registers
    int last = t < T ? t - k0 : -1; // columns past it are masked (and rows past T entirely)
    float mx = -INFINITY;
#pragma unroll
    for (int c = 0; c < TILE / 2; c++) {
      int j = 2 * c + half;
      if (j <= last) mx = fmaxf(mx, Ss[rr * SLD + j] * sl2);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    float mnew = fmaxf(m, mx), sum = 0.0f;
#pragma unroll
    for (int c = 0; c < TILE / 2; c++) {
      int j = 2 * c + half;
      float p = j <= last ? exp2f(Ss[rr * SLD + j] * sl2 - mnew) : 0.0f;
      sum += p;
      Ps[rr * PLD + j] = __float2bfloat16_rn(p);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    float alpha = m == -INFINITY ? 0.0f : exp2f(m - mnew);
    l = l * alpha + sum, m = mnew;
#pragma unroll
    for (int d = 0; d < HS / 2; d++) Os[rr * FLD + 2 * d + half] *= alpha;
    __syncwarp();
    rows_times<HS, false>(Os, Ps, Vs, w); // O += P V for this warp's rows
    __syncwarp();
  }
  if (half == 0) Ls[rr] = l, Ms[rr] = m;
  __syncwarp();
  float *L = cache + (size_t)bh * T, *Oc = cache + (size_t)gridDim.x * T + (size_t)bh * T * HS;
  for (int r = 0; r < 16; r++) { // lanes over the columns of each row: coalesced writes
    int r2 = 16 * w + r, t2 = q0 + r2;
    if (t2 >= T) break;
    float inv = 1.0f / Ls[r2]; // l >= 1: the row's max term is exp2(0)
    for (int d = lane; d < HS; d += 32) {
      float o = Os[r2 * FLD + d] * inv;
      out[((size_t)b * T + t2) * C + (size_t)h * HS + d] = o;
      Oc[(size_t)t2 * HS + d] = o;
    }
    if (lane == 0) L[t2] = (Ms[r2] + log2f(Ls[r2])) * FA_LN2;
  }
}

// ---- backward ----

// D[bh*T + t] = sum_d dO[b, t, h, d] O[bh, t, d]: one warp per row
template <int HS>
__global__ void k_flash_d(float *D, const float *dout, const float *cache, int B, int T, int C, int NH) {
  size_t row = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32, rows = (size_t)B * NH * T;
  int lane = threadIdx.x % 32;
  if (row >= rows) return;
  size_t bh = row / T, t = row % T, b = bh / NH, h = bh % NH;
  const float *o = cache + rows + row * HS, *dy = dout + (b * T + t) * C + h * HS;
  float s = 0.0f;
  for (int d = lane; d < HS; d += 32) s += dy[d] * o[d];
  s = warp_sum(s);
  if (lane == 0) D[row] = s;
}

// For this warp's 16 rows of a (query tile q0, key tile k0) pair, with S (fp32, Ss) and dP (fp32,
// dPs) computed: P = exp(S scale - L) masked (as exp2(S scale log2(e) - L log2(e)), Lr holding
// L log2(e)), into Ps (bf16) when Ps is not NULL, and dS = P (dP - D) scale into dSs (bf16).
__device__ void p_and_ds(bf16 *Ps, bf16 *dSs, const float *Ss, const float *dPs, const float *Lr,
                         const float *Dr, int q0, int k0, int T, float scale, int w, int lane) {
  float sl2 = scale * FA_LOG2E;
  for (int r = 0; r < 16; r++) {
    int rr = 16 * w + r, t = q0 + rr;
    for (int c = 0; c < 2; c++) {
      int j = lane + 32 * c, s = k0 + j;
      float p = t < T && s <= t ? exp2f(Ss[rr * SLD + j] * sl2 - Lr[rr]) : 0.0f;
      if (Ps) Ps[rr * PLD + j] = __float2bfloat16_rn(p);
      dSs[rr * PLD + j] = __float2bfloat16_rn(p * (dPs[rr * SLD + j] - Dr[rr]) * scale);
    }
  }
}

// L (times log2(e), for p_and_ds) and D of query rows [q0, q0 + TILE) into shared memory (0 past T)
__device__ void load_stats(float *Lr, float *Dr, const float *L, const float *D, int q0, int T) {
  for (int i = threadIdx.x; i < TILE; i += blockDim.x) {
    Lr[i] = q0 + i < T ? L[q0 + i] * FA_LOG2E : 0.0f;
    Dr[i] = q0 + i < T ? D[q0 + i] : 0.0f;
  }
}

// The backward kernels' shared memory: Q, K, V, dO (bf16 tiles), S and dP (fp32), P and dS
// (bf16; the dQ kernel leaves P unused), then L and D of the query tile. One layout for both.
template <int HS> struct BwdTiles {
  bf16 *Q, *K, *V, *dO, *P, *dS;
  float *S, *dP, *L, *D;
  static constexpr size_t bt = Smem<HS>::up(Smem<HS>::bf_tile), st = Smem<HS>::up(Smem<HS>::s_tile),
                          pt = Smem<HS>::up(Smem<HS>::p_tile);
  static constexpr size_t bytes = 4 * bt + 2 * st + 2 * pt + 2 * TILE * sizeof(float);
  __device__ explicit BwdTiles(unsigned char *m) {
    Q = (bf16 *)m, K = (bf16 *)(m + bt), V = (bf16 *)(m + 2 * bt), dO = (bf16 *)(m + 3 * bt);
    unsigned char *rest = m + 4 * bt;
    S = (float *)rest, dP = (float *)(rest + st);
    P = (bf16 *)(rest + 2 * st), dS = (bf16 *)(rest + 2 * st + pt);
    L = (float *)(rest + 2 * st + 2 * pt), D = L + TILE;
  }
};

// grid (B*NH, key tiles): dK and dV of one key tile, over the query tiles at or after it (the
// first key tiles, the most query tiles, start first). vec: qkv's and dout's rows are 16-byte
// aligned.
template <int HS>
__global__ void __launch_bounds__(FA_THREADS)
    k_flash_dkv(float *dqkv, const float *dout, const float *qkv, const float *cache, const float *D, int T,
                int C, int NH, float scale, int vec) {
  extern __shared__ __align__(128) unsigned char smem[];
  BwdTiles<HS> tl(smem);
  bf16 *Ks = tl.K, *Vs = tl.V, *Qs = tl.Q, *dOs = tl.dO, *Ps = tl.P, *dSs = tl.dS;
  float *Ss = tl.S, *dPs = tl.dP, *Lr = tl.L, *Dr = tl.D;
  Acc dK[HS / 16], dV[HS / 16]; // this warp's 16 key rows
#pragma unroll
  for (int n = 0; n < HS / 16; n++) wmma::fill_fragment(dK[n], 0.0f), wmma::fill_fragment(dV[n], 0.0f);

  int kt = blockIdx.y, bh = blockIdx.x, h = bh % NH, b = bh / NH;
  int w = threadIdx.x / 32, lane = threadIdx.x % 32, k0 = kt * TILE, ntiles = (T + TILE - 1) / TILE;
  size_t stride = 3 * (size_t)C;
  const float *base = qkv + (size_t)b * T * stride + (size_t)h * HS;
  const float *dy = dout + (size_t)b * T * C + (size_t)h * HS;
  const float *L = cache + (size_t)bh * T, *Db = D + (size_t)bh * T;
  Staged<HS> qst, dst; // K and V first, then each query tile's Q and dO
  qst.fetch(base + C, stride, k0, T, vec);
  dst.fetch(base + 2 * (size_t)C, stride, k0, T, vec);
  qst.put(Ks);
  dst.put(Vs);
  qst.fetch(base, stride, k0, T, vec); // the first query tile is the key tile's own
  dst.fetch(dy, C, k0, T, vec);

  for (int qt = kt; qt < ntiles; qt++) {
    int q0 = qt * TILE;
    __syncthreads(); // the previous query tile's Q, dO, P and dS are no longer read
    qst.put(Qs);
    dst.put(dOs);
    load_stats(Lr, Dr, L, Db, q0, T);
    __syncthreads();
    if (qt + 1 < ntiles) { // the next query tile's loads fly while this one is computed
      qst.fetch(base, stride, q0 + TILE, T, vec);
      dst.fetch(dy, C, q0 + TILE, T, vec);
    }
    rows_times_t<HS>(Ss, Qs, Ks, w);  // S rows of this warp
    rows_times_t<HS>(dPs, dOs, Vs, w); // dP = dO V^T
    __syncwarp();
    p_and_ds(Ps, dSs, Ss, dPs, Lr, Dr, q0, k0, T, scale, w, lane);
    __syncthreads(); // every row of P and dS: the products below read their columns
    rows_times_reg<HS, true>(dV, Ps, dOs, w); // dV rows (keys) of this warp += P^T dO
    rows_times_reg<HS, true>(dK, dSs, Qs, w); // dK += dS^T Q
  }
  __syncthreads(); // Ss and dPs are free: the accumulators go out through them
  store_rows<HS>(Ss, dK, w);
  store_rows<HS>(dPs, dV, w);
  __syncwarp();
  for (int r = 0; r < 16; r++) {
    int rr = 16 * w + r, s = k0 + rr;
    if (s >= T) break;
    float *row = dqkv + ((size_t)b * T + s) * stride + (size_t)h * HS;
    for (int d = lane; d < HS; d += 32) {
      row[C + d] = Ss[rr * SLD + d];
      row[2 * (size_t)C + d] = dPs[rr * SLD + d];
    }
  }
}

// grid (B*NH, query tiles): dQ of one query tile, over the key tiles up to the diagonal (the
// last query tiles, the most key tiles, start first)
template <int HS>
__global__ void __launch_bounds__(FA_THREADS)
    k_flash_dq(float *dqkv, const float *dout, const float *qkv, const float *cache, const float *D, int T,
               int C, int NH, float scale, int vec) {
  extern __shared__ __align__(128) unsigned char smem[];
  BwdTiles<HS> tl(smem);
  bf16 *Qs = tl.Q, *dOs = tl.dO, *Ks = tl.K, *Vs = tl.V, *dSs = tl.dS;
  float *Ss = tl.S, *dPs = tl.dP, *Lr = tl.L, *Dr = tl.D;
  Acc dQ[HS / 16]; // this warp's 16 query rows
#pragma unroll
  for (int n = 0; n < HS / 16; n++) wmma::fill_fragment(dQ[n], 0.0f);

  int qt = gridDim.y - 1 - blockIdx.y, bh = blockIdx.x, h = bh % NH, b = bh / NH;
  int w = threadIdx.x / 32, lane = threadIdx.x % 32, q0 = qt * TILE;
  size_t stride = 3 * (size_t)C;
  const float *base = qkv + (size_t)b * T * stride + (size_t)h * HS;
  const float *L = cache + (size_t)bh * T, *Db = D + (size_t)bh * T;
  Staged<HS> kst, vst; // Q and dO first, then each key tile's K and V
  kst.fetch(base, stride, q0, T, vec);
  vst.fetch(dout + (size_t)b * T * C + (size_t)h * HS, C, q0, T, vec);
  kst.put(Qs);
  vst.put(dOs);
  load_stats(Lr, Dr, L, Db, q0, T);
  kst.fetch(base + C, stride, 0, T, vec);
  vst.fetch(base + 2 * (size_t)C, stride, 0, T, vec);

  for (int kt = 0; kt <= qt; kt++) {
    int k0 = kt * TILE;
    __syncthreads(); // the previous key tile is no longer read
    kst.put(Ks);
    vst.put(Vs);
    __syncthreads();
    if (kt < qt) { // the next key tile's loads fly while this one is computed
      kst.fetch(base + C, stride, k0 + TILE, T, vec);
      vst.fetch(base + 2 * (size_t)C, stride, k0 + TILE, T, vec);
    }
    rows_times_t<HS>(Ss, Qs, Ks, w);
    rows_times_t<HS>(dPs, dOs, Vs, w);
    __syncwarp();
    p_and_ds(nullptr, dSs, Ss, dPs, Lr, Dr, q0, k0, T, scale, w, lane);
    __syncwarp();
    rows_times_reg<HS, false>(dQ, dSs, Ks, w); // dQ rows of this warp += dS K
    __syncwarp();
  }
  store_rows<HS>(Ss, dQ, w); // this warp's rows of Ss: no other warp reads them any more
  __syncwarp();
  for (int r = 0; r < 16; r++) {
    int rr = 16 * w + r, t = q0 + rr;
    if (t >= T) break;
    for (int d = lane; d < HS; d += 32)
      dqkv[((size_t)b * T + t) * stride + (size_t)h * HS + d] = Ss[rr * SLD + d];
  }
}

// ---- host side ----

template <int HS> static size_t fwd_smem() {
  typedef Smem<HS> S;
  return 3 * S::up(S::bf_tile) + S::up(S::s_tile) + S::up(S::o_tile) + S::up(S::p_tile) + 2 * TILE * sizeof(float);
}
// whether every row a kernel reads of x (a [.., C] or [.., 3C] matrix, heads HS apart, HS a
// multiple of 4) starts on a 16-byte boundary: float4 loads
static int rows16(const float *x, int C) { return (uintptr_t)x % 16 == 0 && C % 4 == 0; }
// More than 48 KiB of dynamic shared memory needs the kernel's opt-in, once per kernel.
template <typename K> static void allow_smem(K kernel, size_t bytes, const char *op) {
  CUDA_CHECK_OP(op, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

// Head size 64 (GPT-2's) only, the one instantiated (shared memory per block at 64: forward
// 70.5 KiB, each backward kernel 88.5 KiB).
int cuda_flash_usable(int T, int C, int NH) {
  // the WMMA kernels' grids hold at most 65535 tiles in y
  return kernels_fused_attention_shape(T, C, NH) && (T + TILE - 1) / TILE <= 65535;
}

// BRIGADE_CUDA_FLASH: "mma" (the default: flash_mma.cu's kernels) or "wmma" (this file's)
static int use_wmma(const char *op) {
  const char *e = getenv("BRIGADE_CUDA_FLASH");
  if (!e || !*e || !strcmp(e, "mma")) return 0;
  if (!strcmp(e, "wmma")) return 1;
  cuda_fail(op, __FILE__, __LINE__, "BRIGADE_CUDA_FLASH", "is neither \"mma\" (the default) nor \"wmma\"");
}

template <int HS> static void forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
  if (!use_wmma("attention_forward")) {
    cuda_flash_mma_forward(out, att, qkv, B, T, C, NH);
    return;
  }
  static bool ready = false;
  size_t smem = fwd_smem<HS>();
  if (!ready) allow_smem(k_flash_forward<HS>, smem, "attention_forward"), ready = true;
  dim3 grid((unsigned)(B * NH), (unsigned)((T + TILE - 1) / TILE)); // y: at most 65535 tiles
  k_flash_forward<HS><<<grid, FA_THREADS, smem, cuda_stream()>>>(out, att, qkv, T, C, NH,
                                                                 1.0f / sqrtf((float)HS), rows16(qkv, C));
  LAUNCH_CHECK_OP("attention_forward");
}

template <int HS>
static void backward(float *dqkv, const float *dout, const float *qkv, const float *att, int B, int T, int C,
                     int NH) {
  if (!use_wmma("attention_backward")) {
    cuda_flash_mma_backward(dqkv, dout, qkv, att, B, T, C, NH);
    return;
  }
  static bool ready = false;
  const size_t smem = BwdTiles<HS>::bytes;
  if (!ready) {
    allow_smem(k_flash_dkv<HS>, smem, "attention_backward");
    allow_smem(k_flash_dq<HS>, smem, "attention_backward");
    ready = true;
  }
  size_t rows = (size_t)B * NH * T;
  float *D = (float *)cuda_workspace(sizeof(float) * rows), scale = 1.0f / sqrtf((float)HS);
  cudaStream_t s = cuda_stream();
  k_flash_d<HS><<<(unsigned)((rows * 32 + 255) / 256), 256, 0, s>>>(D, dout, att, B, T, C, NH);
  LAUNCH_CHECK_OP("attention_backward");
  dim3 grid((unsigned)(B * NH), (unsigned)((T + TILE - 1) / TILE)); // y: at most 65535 tiles
  int vec = rows16(qkv, C) && rows16(dout, C);
  k_flash_dkv<HS><<<grid, FA_THREADS, smem, s>>>(dqkv, dout, qkv, att, D, T, C, NH, scale, vec);
  LAUNCH_CHECK_OP("attention_backward");
  k_flash_dq<HS><<<grid, FA_THREADS, smem, s>>>(dqkv, dout, qkv, att, D, T, C, NH, scale, vec);
  LAUNCH_CHECK_OP("attention_backward");
}

void cuda_flash_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
  forward<64>(out, att, qkv, B, T, C, NH);
}

void cuda_flash_backward(float *dqkv, const float *dout, const float *qkv, const float *att, int B, int T, int C,
                         int NH) {
  backward<64>(dqkv, dout, qkv, att, B, T, C, NH);
}
