/* kernels/cpu/bgemm.c: a bf16 GEMM on AVX512-BF16 (C fp32 = alpha * bf16(A) @ bf16(B) + beta * C).
 *
 * Debian's OpenBLAS (0.3.21) is built without its bf16 GEMM (sbgemm), so the CPU table's mixed
 * precision has its own, for CPUs with AVX512-BF16 (AMD Zen 4, Intel Cooper Lake and Sapphire
 * Rapids): VDPBF16PS multiplies 32 pairs of bf16 and adds them to 16 fp32 sums, twice the
 * multiply-adds of an fp32 FMA of the same width. The layout is GotoBLAS's:
 *
 *   for each block of NC columns
 *     for each block of KC values of k: pack B's [KC x NC] block into strips of NR columns
 *                                        (A and B are rounded to bf16 as they are packed)
 *       for each block of MC rows: pack A's [MC x KC] block into panels of MR rows
 *         for each strip, for each panel: the micro-kernel, an MR x NR tile of C in registers
 *
 * Packed values go in pairs along k (a 32-bit word holds bf16(x[k]) in its low half and
 * bf16(x[k+1]) in its high half, VDPBF16PS's operand layout): a strip is [KC/2][NR] words, a
 * panel [KC/2][MR] words, each zero-padded past the matrix's edge (rows, columns, an odd k), so
 * the micro-kernel never branches inside its loop. The tile is MR = 8 rows by NR = 48 columns:
 * 24 accumulators, 3 strip loads and 8 broadcasts per pair of k, 28 of the 32 vector registers.
 *
 * Rounding: both operands round to nearest even (VCVTNE2PS2BF16); each product of two bf16 is
 * exact in fp32 and VDPBF16PS adds the pair's two products to the running sum in fp32, so the
 * result is the fp32 product of the rounded operands up to the order of fp32 additions (K
 * terms, in pairs along k, one block of KC after another). The instruction flushes subnormal
 * inputs and results to zero, which bf16's fp32 range makes irrelevant for training values.
 *
 * Single-threaded: the CPU table splits a product over its pool's workers (blas_cpu.c); each
 * thread packs into its own buffers, kept between calls (grown, never shrunk). */
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/error.h"
#include "kernels/cpu/cpu.h"

#define TGT __attribute__((target("avx512f,avx512bw,avx512bf16")))

enum {
  MR = 8,    /* rows of a tile */
  NR = 48,   /* columns of a tile: 3 vectors of 16 sums */
  KC = 384,  /* k per block (even): a strip, KC/2 * NR words, is 36 KiB, read once per tile row */
  MC = 128,  /* rows per block of A: its panels, MC * KC * 2 bytes = 96 KiB, stay in L2 */
  NC = 1536, /* columns per block of B: KC * NC * 2 bytes = 1.1 MiB */
};

int kernels_cpu_bgemm_supported(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512bf16");
}

/* Each thread's packing buffers: grown to the largest block it has packed, kept for the next
 * call (the pool's workers live as long as the process); 64-byte aligned for the strip loads. */
typedef struct {
  void *raw;
  size_t words;
} pack_buf;
static __thread pack_buf pack_a_buf, pack_b_buf;

static uint32_t *grow(pack_buf *p, size_t words) {
  if (p->words < words) {
    free(p->raw);
    p->raw = core_malloc(words * sizeof(uint32_t) + 64);
    p->words = words;
  }
  return (uint32_t *)(((uintptr_t)p->raw + 63) & ~(uintptr_t)63);
}

static __mmask16 mask16(int n) { return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n > 0 ? n : 0)) - 1); }

/* Where a group of 16 packed rows goes. A block of `rows` rows (rows of op(A), or columns of
 * op(B)) is packed as panels of pw rows (pw = MR or NR, a multiple of 8): row r sits in panel
 * r / pw at place r % pw, a panel is [kc2][pw] words. `w` rows hold values, the rest of the
 * block (up to `rows`, a multiple of pw) is written as zeros. A group of 16 rows starting at r0
 * lies in one panel when pw is a multiple of 16, else (pw = 8) in two. */
TGT static inline __attribute__((always_inline)) void store_group(uint32_t *out, int pw, int kc2, int r0, int rows, int kk, __m512i v) {
  if (pw % 16 == 0) {
    _mm512_store_si512(out + ((size_t)(r0 / pw) * kc2 + kk) * pw + r0 % pw, v);
  } else { /* pw == 8 */
    _mm256_store_si256((__m256i *)(out + ((size_t)(r0 / 8) * kc2 + kk) * 8), _mm512_castsi512_si256(v));
    if (r0 + 8 < rows)
      _mm256_store_si256((__m256i *)(out + ((size_t)(r0 / 8 + 1) * kc2 + kk) * 8), _mm512_extracti64x4_epi64(v, 1));
  }
}

/* x holds the block's rows r < w, each holding its kc values of k contiguously (x[r * ld + k]):
 * the pairs (x[r][2kk], x[r][2kk + 1]) into the panels (zero past kc and past w). 16 rows at a
 * time: 32 values of each row become its 16 pairs in one vector, and a 16 x 16 transpose of
 * 32-bit words turns the rows' vectors into the pairs' vectors. */
TGT static inline __attribute__((always_inline)) void pack_rows(uint32_t *out, int pw, int rows, const float *x, size_t ld, int w, int kc) {
  int kc2 = (kc + 1) / 2;
  for (int r0 = 0; r0 < rows; r0 += 16) {
    for (int k = 0; k < kc; k += 32) {
      __m512i r[16], t[16];
      __mmask16 lo = mask16(kc - k), hi = mask16(kc - k - 16);
      for (int i = 0; i < 16; i++) {
        if (r0 + i < w) {
          const float *row = x + (size_t)(r0 + i) * ld + k;
          _mm_prefetch((const char *)(row + 128), _MM_HINT_T0); /* 4 blocks of k ahead: the row's */
          _mm_prefetch((const char *)(row + 144), _MM_HINT_T0); /* stream is one of 16 */
          __m512 a = _mm512_maskz_loadu_ps(lo, row), b = _mm512_maskz_loadu_ps(hi, row + 16);
          r[i] = (__m512i)_mm512_cvtne2ps_pbh(b, a); /* words 0-15: pairs of a, then of b */
        } else {
          r[i] = _mm512_setzero_si512();
        }
      }
      /* r[i] word p = row i, pair p; after the transpose, r[p] word i */
      for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
      }
      for (int i = 0; i < 4; i++) {
        r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
      }
      /* r[4g + j], 128-bit lane L: rows 4g .. 4g + 3 of pair 4L + j */
      for (int j = 0; j < 4; j++) {
        t[j] = _mm512_shuffle_i32x4(r[j], r[4 + j], 0x88);     /* lanes 0, 2 of rows 0-3, then of 4-7 */
        t[4 + j] = _mm512_shuffle_i32x4(r[j], r[4 + j], 0xdd); /* lanes 1, 3 */
        t[8 + j] = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0x88);
        t[12 + j] = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0xdd);
      }
      for (int j = 0; j < 4; j++) {
        r[j] = _mm512_shuffle_i32x4(t[j], t[8 + j], 0x88);          /* pair j */
        r[8 + j] = _mm512_shuffle_i32x4(t[j], t[8 + j], 0xdd);      /* pair 8 + j */
        r[4 + j] = _mm512_shuffle_i32x4(t[4 + j], t[12 + j], 0x88); /* pair 4 + j */
        r[12 + j] = _mm512_shuffle_i32x4(t[4 + j], t[12 + j], 0xdd); /* pair 12 + j */
      }
      int pairs = kc2 - k / 2 < 16 ? kc2 - k / 2 : 16;
      for (int q = 0; q < pairs; q++) store_group(out, pw, kc2, r0, rows, k / 2 + q, r[q]);
    }
  }
}

/* x holds the block with k as its outer index (x[k * ld + r], rows r < w contiguous): the same
 * panels as pack_rows. Two rows of k interleave into one vector of pairs; each pair of k walks
 * the whole block (rows read contiguously). */
TGT static inline __attribute__((always_inline)) void pack_cols(uint32_t *out, int pw, int rows, const float *x, size_t ld, int w, int kc) {
  int kc2 = (kc + 1) / 2;
  const __m512i inter = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                         21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  for (int k = 0; k < kc; k += 2) {
    const float *x0 = x + (size_t)k * ld, *x1 = x0 + ld;
    for (int r0 = 0; r0 < rows; r0 += 16) {
      __mmask16 m = mask16(w - r0);
      _mm_prefetch((const char *)(x0 + 4 * ld + r0), _MM_HINT_T0); /* two pairs of k ahead */
      _mm_prefetch((const char *)(x1 + 4 * ld + r0), _MM_HINT_T0);
      __m512 a = _mm512_maskz_loadu_ps(m, x0 + r0);
      __m512 b = k + 1 < kc ? _mm512_maskz_loadu_ps(m, x1 + r0) : _mm512_setzero_ps();
      __m512i v = _mm512_permutexvar_epi16(inter, (__m512i)_mm512_cvtne2ps_pbh(b, a));
      store_group(out, pw, kc2, r0, rows, k / 2, v);
    }
  }
}

/* The two panel widths as constants, so that store_group's divisions are shifts and multiplies. */
TGT static void pack_rows_a(uint32_t *out, int rows, const float *x, size_t ld, int w, int kc) {
  pack_rows(out, MR, rows, x, ld, w, kc);
}
TGT static void pack_rows_b(uint32_t *out, int rows, const float *x, size_t ld, int w, int kc) {
  pack_rows(out, NR, rows, x, ld, w, kc);
}
TGT static void pack_cols_a(uint32_t *out, int rows, const float *x, size_t ld, int w, int kc) {
  pack_cols(out, MR, rows, x, ld, w, kc);
}
TGT static void pack_cols_b(uint32_t *out, int rows, const float *x, size_t ld, int w, int kc) {
  pack_cols(out, NR, rows, x, ld, w, kc);
}

/* The micro-kernel: c[MR x NR] (rows < mv, columns < nv written) = alpha * panel . strip +
 * beta * c, over kc2 pairs of k. beta == 0: c is only written. */
TGT static void tile(int kc2, const uint32_t *restrict a, const uint32_t *restrict b, float *c, size_t ldc,
                     float alpha, float beta, int mv, int nv) {
  __m512 s[MR][3];
  for (int i = 0; i < MR; i++) s[i][0] = s[i][1] = s[i][2] = _mm512_setzero_ps();
  if (beta != 0.0f) /* the tile of C the sums are added to, on its way while they are computed */
    for (int i = 0; i < mv; i++)
      for (int j = 0; j < nv; j += 16) _mm_prefetch((const char *)(c + (size_t)i * ldc + j), _MM_HINT_T0);
  for (int p = 0; p < kc2; p++, a += MR, b += NR) {
    __m512bh b0 = (__m512bh)_mm512_load_si512(b), b1 = (__m512bh)_mm512_load_si512(b + 16),
             b2 = (__m512bh)_mm512_load_si512(b + 32);
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++) {
      __m512bh ai = (__m512bh)_mm512_set1_epi32((int)a[i]);
      s[i][0] = _mm512_dpbf16_ps(s[i][0], ai, b0);
      s[i][1] = _mm512_dpbf16_ps(s[i][1], ai, b1);
      s[i][2] = _mm512_dpbf16_ps(s[i][2], ai, b2);
    }
  }
  __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  __mmask16 m0 = mask16(nv), m1 = mask16(nv - 16), m2 = mask16(nv - 32);
  for (int i = 0; i < MR && i < mv; i++) {
    float *ci = c + (size_t)i * ldc;
    __m512 r0 = _mm512_mul_ps(va, s[i][0]), r1 = _mm512_mul_ps(va, s[i][1]), r2 = _mm512_mul_ps(va, s[i][2]);
    if (beta != 0.0f) {
      r0 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m0, ci), r0);
      r1 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m1, ci + 16), r1);
      r2 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m2, ci + 32), r2);
    }
    _mm512_mask_storeu_ps(ci, m0, r0);
    _mm512_mask_storeu_ps(ci + 16, m1, r1);
    _mm512_mask_storeu_ps(ci + 32, m2, r2);
  }
}

/* Row-major, as kernels_cpu_gemm_ld: op(A) [M,K] (A stored [M,K], or [K,M] when transa), op(B)
 * [K,N] (stored [K,N], or [N,K] when transb). */
TGT void kernels_cpu_bgemm(float *c, const float *a, const float *b, int M, int N, int K, int transa, int transb,
                           float alpha, float beta, int lda, int ldb, int ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) { /* C = beta * C: no product */
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) {
        float *x = c + (size_t)i * ldc + j;
        *x = beta == 0.0f ? 0.0f : beta * *x;
      }
    return;
  }
  for (int jc = 0; jc < N; jc += NC) {
    int nc = N - jc < NC ? N - jc : NC, strips = (nc + NR - 1) / NR;
    for (int pc = 0; pc < K; pc += KC) { /* inside jc: C's [M x NC] block stays in cache across k */
      int kc = K - pc < KC ? K - pc : KC, kc2 = (kc + 1) / 2;
      float be = pc == 0 ? beta : 1.0f; /* later blocks add to the first's */
      uint32_t *bp = grow(&pack_b_buf, (size_t)strips * kc2 * NR);
      if (transb) /* op(B)'s columns are B's rows */
        pack_rows_b(bp, strips * NR, b + (size_t)jc * ldb + pc, (size_t)ldb, nc, kc);
      else
        pack_cols_b(bp, strips * NR, b + (size_t)pc * ldb + jc, (size_t)ldb, nc, kc);
      for (int ic = 0; ic < M; ic += MC) {
        int mc = M - ic < MC ? M - ic : MC, panels = (mc + MR - 1) / MR;
        uint32_t *ap = grow(&pack_a_buf, (size_t)panels * kc2 * MR);
        if (transa)
          pack_cols_a(ap, panels * MR, a + (size_t)pc * lda + ic, (size_t)lda, mc, kc);
        else
          pack_rows_a(ap, panels * MR, a + (size_t)ic * lda + pc, (size_t)lda, mc, kc);
        for (int s = 0; s < strips; s++) {
          int j = jc + s * NR, nv = N - j < NR ? N - j : NR;
          for (int q = 0; q < panels; q++) {
            int i = ic + q * MR, mv = M - i < MR ? M - i : MR;
            tile(kc2, ap + (size_t)q * kc2 * MR, bp + (size_t)s * kc2 * NR, c + (size_t)i * ldc + j, (size_t)ldc,
                 alpha, be, mv, nv);
          }
        }
      }
    }
  }
}
