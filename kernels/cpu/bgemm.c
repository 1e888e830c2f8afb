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
#include <cpuid.h>
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

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
TGT static inline __attribute__((always_inline)) void store_group(uint32_t *out, int pw, int kc2p, int r0, int rows, int kk, __m512i v) {
  if (pw % 16 == 0) {
    _mm512_store_si512(out + ((size_t)(r0 / pw) * kc2p + kk) * pw + r0 % pw, v);
  } else { /* pw == 8 */
    _mm256_store_si256((__m256i *)(out + ((size_t)(r0 / 8) * kc2p + kk) * 8), _mm512_castsi512_si256(v));
    if (r0 + 8 < rows)
      _mm256_store_si256((__m256i *)(out + ((size_t)(r0 / 8 + 1) * kc2p + kk) * 8), _mm512_extracti64x4_epi64(v, 1));
  }
}

/* Pairs kc2 .. kc2p - 1 of every panel (AMX's tiles take k in steps of 32): zeros. */
static void zero_tail(uint32_t *out, int pw, int rows, int kc2, int kc2p) {
  if (kc2p > kc2)
    for (int p = 0; p < rows / pw; p++) memset(out + ((size_t)p * kc2p + kc2) * pw, 0, (size_t)(kc2p - kc2) * pw * 4);
}

/* r[i] word p becomes r[p] word i: a 16 x 16 transpose of 32-bit words. */
TGT static inline __attribute__((always_inline)) void transpose16(__m512i r[16]) {
  __m512i t[16];
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
}

/* Two rows of k, x0 and x1 (x1 NULL past k's end), of the 16 rows from r0 (w rows hold values):
 * word m of the result is row r0 + m's pair. */
TGT static inline __attribute__((always_inline)) __m512i pair_of_rows(const float *x0, const float *x1, int r0, int w) {
  const __m512i inter = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                         21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  __mmask16 m = mask16(w - r0);
  __m512 a = _mm512_maskz_loadu_ps(m, x0 + r0);
  __m512 b = x1 ? _mm512_maskz_loadu_ps(m, x1 + r0) : _mm512_setzero_ps();
  return _mm512_permutexvar_epi16(inter, (__m512i)_mm512_cvtne2ps_pbh(b, a));
}

/* 32 values of k of one row from x (masked to kc - k values) as 16 pairs */
TGT static inline __attribute__((always_inline)) __m512i pairs_of_row(const float *x, int left) {
  __m512 a = _mm512_maskz_loadu_ps(mask16(left), x), b = _mm512_maskz_loadu_ps(mask16(left - 16), x + 16);
  return (__m512i)_mm512_cvtne2ps_pbh(b, a); /* words 0-15: pairs of a, then of b */
}

/* x holds the block's rows r < w, each holding its kc values of k contiguously (x[r * ld + k]):
 * the pairs (x[r][2kk], x[r][2kk + 1]) into the panels (zero past kc and past w). 16 rows at a
 * time: 32 values of each row become its 16 pairs in one vector, and a 16 x 16 transpose of
 * 32-bit words turns the rows' vectors into the pairs' vectors. */
TGT static inline __attribute__((always_inline)) void pack_rows(uint32_t *out, int pw, int rows, const float *x, size_t ld, int w, int kc, int kc2p) {
  int kc2 = (kc + 1) / 2;
  for (int r0 = 0; r0 < rows; r0 += 16) {
    for (int k = 0; k < kc; k += 32) {
      __m512i r[16];
      for (int i = 0; i < 16; i++) {
        if (r0 + i < w) {
          const float *row = x + (size_t)(r0 + i) * ld + k;
          _mm_prefetch((const char *)(row + 128), _MM_HINT_T0); /* 4 blocks of k ahead: the row's */
          _mm_prefetch((const char *)(row + 144), _MM_HINT_T0); /* stream is one of 16 */
          r[i] = pairs_of_row(row, kc - k);
        } else {
          r[i] = _mm512_setzero_si512();
        }
      }
      transpose16(r); /* r[p] word i = row i, pair p */
      int pairs = kc2 - k / 2 < 16 ? kc2 - k / 2 : 16;
      for (int q = 0; q < pairs; q++) store_group(out, pw, kc2p, r0, rows, k / 2 + q, r[q]);
    }
  }
  zero_tail(out, pw, rows, kc2, kc2p);
}

/* x holds the block with k as its outer index (x[k * ld + r], rows r < w contiguous): the same
 * panels as pack_rows. Two rows of k interleave into one vector of pairs; each pair of k walks
 * the whole block (rows read contiguously). */
TGT static inline __attribute__((always_inline)) void pack_cols(uint32_t *out, int pw, int rows, const float *x, size_t ld, int w, int kc, int kc2p) {
  for (int k = 0; k < kc; k += 2) {
    const float *x0 = x + (size_t)k * ld, *x1 = k + 1 < kc ? x0 + ld : NULL;
    for (int r0 = 0; r0 < rows; r0 += 16) {
      _mm_prefetch((const char *)(x0 + 4 * ld + r0), _MM_HINT_T0); /* two pairs of k ahead */
      _mm_prefetch((const char *)(x0 + 5 * ld + r0), _MM_HINT_T0);
      store_group(out, pw, kc2p, r0, rows, k / 2, pair_of_rows(x0, x1, r0, w));
    }
  }
  zero_tail(out, pw, rows, (kc + 1) / 2, kc2p);
}

/* The panel widths as constants, so that store_group's divisions are shifts and multiplies. */
TGT static void pack_rows_a(uint32_t *out, int rows, const float *x, size_t ld, int w, int kc) {
  pack_rows(out, MR, rows, x, ld, w, kc, (kc + 1) / 2);
}
TGT static void pack_rows_b(uint32_t *out, int rows, const float *x, size_t ld, int w, int kc) {
  pack_rows(out, NR, rows, x, ld, w, kc, (kc + 1) / 2);
}
TGT static void pack_cols_a(uint32_t *out, int rows, const float *x, size_t ld, int w, int kc) {
  pack_cols(out, MR, rows, x, ld, w, kc, (kc + 1) / 2);
}
TGT static void pack_cols_b(uint32_t *out, int rows, const float *x, size_t ld, int w, int kc) {
  pack_cols(out, NR, rows, x, ld, w, kc, (kc + 1) / 2);
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

/* The AVX512-BF16 GEMM, arguments as kernels_cpu_bgemm's (M, N, K > 0). */
TGT static void bgemm_avx512(float *c, const float *a, const float *b, int M, int N, int K, int transa, int transb,
                             float alpha, float beta, int lda, int ldb, int ldc) {
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

/* ---- AMX ----------------------------------------------------------------------------------
 * The tile unit of Intel's Xeons since Sapphire Rapids: TDPBF16PS multiplies a 16 x 32 bf16
 * tile of A by a 32 x 16 one of B (its 16 rows are pairs of k, each 16 words of pairs: the
 * strips' layout above) and adds the exact products to a 16 x 16 fp32 tile, 16 times the
 * multiply-adds of one VDPBF16PS. The tile
 * is 2 x 2 of those: C tiles 0-3 stay in the unit over the block's k, A tiles 4-5 and B tiles
 * 6-7 are loaded for each 32 values of k, 4 KiB read for 4 products. A panel of A (32 rows, up
 * to 768 values of k: 48 KiB) is held while the strips of B's block go by, so C is written along
 * its rows, 128 bytes of each of 32 rows per tile; with k's block as long as GPT-2's widths
 * (768), each element of C is written once for those products.
 *
 * A's panels for AMX are [KC/32][32 rows][16 words]: a tile's 16 rows of 32 values of k are
 * 1 KiB in a row. The sum of each element runs over k in the same order as the AVX-512 GEMM's
 * (pairs, in blocks of KC), so both give the product of the rounded operands within the same
 * bound, not the same bits (each instruction's internal order of additions is its own).
 *
 * alpha = 1 with beta 0 or 1 (nearly every product training makes): the C tiles start at zero
 * or at C and are written back as they are. Otherwise they start at zero and the epilogue forms
 * alpha * sum + beta * C. A tile past M or N goes through a 32 x 32 buffer, so the arithmetic of
 * an element never depends on where the pool's split put it. */
#define TGT_AMX __attribute__((target("avx512f,avx512bw,avx512bf16,amx-tile,amx-bf16")))

enum {
  AMR = 32,  /* rows of an AMX tile block: two tiles */
  ANR = 32,  /* columns: two tiles */
  AKC = 768, /* k per block, a multiple of 32: a panel of A is 48 KiB */
  AMC = 256, /* rows per block of A: its panels 384 KiB, in L2 */
  ANC = 768, /* columns per block of B: its strips 1.1 MiB, in L2 */
};

typedef struct {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} amx_config;

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static int amx_ok;   /* the CPU has AMX-BF16 and the kernel lets this process use its tiles */
static int amx_use;  /* kernels_cpu_bgemm takes AMX (amx_ok, unless BRIGADE_CPU_BGEMM=avx512) */

static void amx_probe(void) {
  unsigned a, b, c, d;
  if (!kernels_cpu_bgemm_supported() || !__get_cpuid_count(7, 0, &a, &b, &c, &d)) return;
  if (!(d & (1u << 22)) || !(d & (1u << 24))) return; /* AMX-BF16, AMX-TILE */
  /* Linux hands out the tiles' 8 KiB of state only to a process that asks (5.16 and later) */
  if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) return;
  amx_ok = 1;
  const char *e = getenv("BRIGADE_CPU_BGEMM");
  amx_use = !(e && !strcmp(e, "avx512"));
}

static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

int kernels_cpu_bgemm_amx_supported(void) {
  pthread_once(&amx_once, amx_probe);
  return amx_ok;
}

void kernels_cpu_bgemm_use_amx(int on) {
  pthread_once(&amx_once, amx_probe);
  amx_use = on && amx_ok;
}

int kernels_cpu_bgemm_uses_amx(void) {
  pthread_once(&amx_once, amx_probe);
  return amx_use;
}

/* A's rows (k contiguous, x[r * ld + k]) into AMX panels: one row's 32 values of k per vector. */
TGT_AMX static void pack_rows_amx(uint32_t *out, int rows, const float *x, size_t ld, int w, int kc, int nq) {
  for (int r = 0; r < rows; r++) {
    uint32_t *o = out + ((size_t)(r / AMR) * nq * AMR + r % AMR) * 16;
    const float *row = x + (size_t)r * ld;
    for (int q = 0; q < nq; q++, o += AMR * 16)
      _mm512_store_si512(o, r < w ? pairs_of_row(row + 32 * q, kc - 32 * q) : _mm512_setzero_si512());
  }
}

/* A stored k-major (x[k * ld + r]) into AMX panels: 16 pairs of k of 16 rows, transposed. */
TGT_AMX static void pack_cols_amx(uint32_t *out, int rows, const float *x, size_t ld, int w, int kc, int nq) {
  for (int q = 0; q < nq; q++)
    for (int r0 = 0; r0 < rows; r0 += 16) {
      __m512i v[16];
      for (int p = 0; p < 16; p++) {
        int k = 32 * q + 2 * p;
        const float *x0 = x + (size_t)k * ld;
        v[p] = k < kc ? pair_of_rows(x0, k + 1 < kc ? x0 + ld : NULL, r0, w) : _mm512_setzero_si512();
      }
      transpose16(v); /* v[m] word p = row r0 + m, pair p */
      uint32_t *o = out + ((size_t)(r0 / AMR) * nq * AMR + (size_t)q * AMR + r0 % AMR) * 16;
      for (int m = 0; m < 16; m++) _mm512_store_si512(o + m * 16, v[m]);
    }
}

TGT_AMX static void pack_rows_b_amx(uint32_t *out, int rows, const float *x, size_t ld, int w, int kc, int kc2p) {
  pack_rows(out, ANR, rows, x, ld, w, kc, kc2p);
}
TGT_AMX static void pack_cols_b_amx(uint32_t *out, int rows, const float *x, size_t ld, int w, int kc, int kc2p) {
  pack_cols(out, ANR, rows, x, ld, w, kc, kc2p);
}

/* One 32 x 32 block of C over nq steps of 32 values of k: a is the panel, b the strip. */
TGT_AMX static void tile_amx(int nq, const uint32_t *a, const uint32_t *b, float *c, size_t ldc, float alpha,
                             float beta, int mv, int nv) {
  float buf[AMR * ANR] __attribute__((aligned(64)));
  int plain = alpha == 1.0f && (beta == 0.0f || beta == 1.0f), whole = mv == AMR && nv == ANR;
  float *t = whole ? c : buf; /* where the tiles are loaded from and stored to */
  size_t ldt = whole ? ldc : ANR;
  if (plain && beta == 1.0f) {
    if (!whole) {
      memset(buf, 0, sizeof buf);
      for (int i = 0; i < mv; i++) memcpy(buf + i * ANR, c + (size_t)i * ldc, (size_t)nv * 4);
    }
    _tile_loadd(0, t, ldt * 4);
    _tile_loadd(1, t + 16, ldt * 4);
    _tile_loadd(2, t + 16 * ldt, ldt * 4);
    _tile_loadd(3, t + 16 * ldt + 16, ldt * 4);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  for (int q = 0; q < nq; q++, a += AMR * 16, b += 16 * ANR) {
    _tile_loadd(4, a, 64);
    _tile_loadd(6, b, ANR * 4);
    _tile_loadd(5, a + 16 * 16, 64);
    _tile_loadd(7, b + 16, ANR * 4);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  if (plain && whole) {
    _tile_stored(0, c, ldc * 4);
    _tile_stored(1, c + 16, ldc * 4);
    _tile_stored(2, c + 16 * ldc, ldc * 4);
    _tile_stored(3, c + 16 * ldc + 16, ldc * 4);
    return;
  }
  _tile_stored(0, buf, ANR * 4);
  _tile_stored(1, buf + 16, ANR * 4);
  _tile_stored(2, buf + 16 * ANR, ANR * 4);
  _tile_stored(3, buf + 16 * ANR + 16, ANR * 4);
  __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  for (int i = 0; i < mv; i++)
    for (int j = 0; j < nv; j += 16) {
      __mmask16 m = mask16(nv - j);
      float *ci = c + (size_t)i * ldc + j;
      __m512 r = _mm512_load_ps(buf + i * ANR + j);
      if (!plain) {
        r = _mm512_mul_ps(va, r);
        if (beta != 0.0f) r = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m, ci), r);
      }
      _mm512_mask_storeu_ps(ci, m, r);
    }
}

/* The tiles of C's block [ic, ic + panels * 32) x [jc, jc + strips * 32) over one block of k. */
TGT_AMX static void tiles_amx(const uint32_t *ap, const uint32_t *bp, int panels, int strips, int nq, float *c,
                              int ic, int jc, int M, int N, size_t ldc, float alpha, float be) {
  size_t kc2p = (size_t)16 * nq;
  for (int q = 0; q < panels; q++) {
    int i = ic + q * AMR, mv = M - i < AMR ? M - i : AMR;
    for (int s = 0; s < strips; s++) {
      int j = jc + s * ANR, nv = N - j < ANR ? N - j : ANR;
      tile_amx(nq, ap + (size_t)q * kc2p * AMR, bp + (size_t)s * kc2p * ANR, c + (size_t)i * ldc + j, ldc, alpha, be,
               mv, nv);
    }
  }
}

/* B's block [pc, pc + kc) x [jc, jc + nc) into strips; A's [ic, ic + mc) x [pc, pc + kc) into panels. */
TGT_AMX static uint32_t *pack_b_amx(const float *b, int transb, int ldb, int pc, int kc, int jc, int nc) {
  int strips = (nc + ANR - 1) / ANR, nq = (kc + 31) / 32, kc2p = 16 * nq;
  uint32_t *bp = grow(&pack_b_buf, (size_t)strips * kc2p * ANR);
  if (transb) /* op(B)'s columns are B's rows */
    pack_rows_b_amx(bp, strips * ANR, b + (size_t)jc * ldb + pc, (size_t)ldb, nc, kc, kc2p);
  else
    pack_cols_b_amx(bp, strips * ANR, b + (size_t)pc * ldb + jc, (size_t)ldb, nc, kc, kc2p);
  return bp;
}
TGT_AMX static uint32_t *pack_a_amx(const float *a, int transa, int lda, int ic, int mc, int pc, int kc) {
  int panels = (mc + AMR - 1) / AMR, nq = (kc + 31) / 32;
  uint32_t *ap = grow(&pack_a_buf, (size_t)panels * 16 * nq * AMR);
  if (transa)
    pack_cols_amx(ap, panels * AMR, a + (size_t)pc * lda + ic, (size_t)lda, mc, kc, nq);
  else
    pack_rows_amx(ap, panels * AMR, a + (size_t)ic * lda + pc, (size_t)lda, mc, kc, nq);
  return ap;
}

/* GotoBLAS's order (blocks of columns, then of k, then of rows: B's block packed once, A's once
 * per block of columns), except that where A is one block of rows (M <= 256: a micro-batch's
 * tokens) A goes outside, packed once per block of k, and B's blocks go by under it: the LM
 * head's forward (N = 50257) packed its A 66 times otherwise. Each element of C sums its blocks
 * of k in the same order either way. */
TGT_AMX static void bgemm_amx(float *c, const float *a, const float *b, int M, int N, int K, int transa, int transb,
                              float alpha, float beta, int lda, int ldb, int ldc) {
  amx_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int i = 0; i < 8; i++) cfg.rows[i] = 16, cfg.colsb[i] = 64;
  _tile_loadconfig(&cfg);
  if (M <= AMC) {
    for (int pc = 0; pc < K; pc += AKC) {
      int kc = K - pc < AKC ? K - pc : AKC, nq = (kc + 31) / 32;
      float be = pc == 0 ? beta : 1.0f; /* later blocks add to the first's */
      const uint32_t *ap = pack_a_amx(a, transa, lda, 0, M, pc, kc);
      for (int jc = 0; jc < N; jc += ANC) {
        int nc = N - jc < ANC ? N - jc : ANC;
        const uint32_t *bp = pack_b_amx(b, transb, ldb, pc, kc, jc, nc);
        tiles_amx(ap, bp, (M + AMR - 1) / AMR, (nc + ANR - 1) / ANR, nq, c, 0, jc, M, N, (size_t)ldc, alpha, be);
      }
    }
  } else {
    for (int jc = 0; jc < N; jc += ANC) {
      int nc = N - jc < ANC ? N - jc : ANC;
      for (int pc = 0; pc < K; pc += AKC) {
        int kc = K - pc < AKC ? K - pc : AKC, nq = (kc + 31) / 32;
        float be = pc == 0 ? beta : 1.0f;
        const uint32_t *bp = pack_b_amx(b, transb, ldb, pc, kc, jc, nc);
        for (int ic = 0; ic < M; ic += AMC) {
          int mc = M - ic < AMC ? M - ic : AMC;
          const uint32_t *ap = pack_a_amx(a, transa, lda, ic, mc, pc, kc);
          tiles_amx(ap, bp, (mc + AMR - 1) / AMR, (nc + ANR - 1) / ANR, nq, c, ic, jc, M, N, (size_t)ldc, alpha, be);
        }
      }
    }
  }
  _tile_release();
}

/* Row-major, as kernels_cpu_gemm_ld: op(A) [M,K] (A stored [M,K], or [K,M] when transa), op(B)
 * [K,N] (stored [K,N], or [N,K] when transb). AMX's tiles where the CPU has them, else
 * AVX512-BF16. */
void kernels_cpu_bgemm(float *c, const float *a, const float *b, int M, int N, int K, int transa, int transb,
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
  if (kernels_cpu_bgemm_uses_amx())
    bgemm_amx(c, a, b, M, N, K, transa, transb, alpha, beta, lda, ldb, ldc);
  else
    bgemm_avx512(c, a, b, M, N, K, transa, transb, alpha, beta, lda, ldb, ldc);
}
