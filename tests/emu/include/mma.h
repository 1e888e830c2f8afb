// tests/emu/include/mma.h: nvcuda::wmma for the emulator (tests/emu/emu.cpp), 16x16x16 only.
// Every lane holds the whole tile (v[r * 16 + c]); a load reads all of it, a store writes only
// the elements e with e % 32 == lane, so another lane's read before __syncwarp sees stale data.
// Fragments have no x[]: code that indexes one (its layout is unspecified) does not compile here.
#pragma once
#include "cuda_bf16.h"
#include "cuda_fp16.h"
#include "cuda_runtime.h"
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <type_traits>
void emu_wmma_check(const void *p, unsigned ldm, size_t elem, bool rowmajor, const char *what);
namespace nvcuda {
namespace wmma {
struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };
template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "emu: 16x16x16 only");
  float v[256]; // (r, c) at v[r * 16 + c]
};
inline float emu_val(float x) { return x; }
inline float emu_val(__nv_bfloat16 x) { return __bfloat162float(x); }
inline float emu_val(__half x) { return __half2float(x); }
template <class Use, class T, class L>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, L> &f, const T *p, unsigned ldm) {
  static_assert(!std::is_same<Use, accumulator>::value, "accumulator needs a layout");
  constexpr bool rm = std::is_same<L, row_major>::value;
  static_assert(rm || std::is_same<L, col_major>::value, "layout");
  emu_wmma_check(p, ldm, sizeof(T), rm, "load_matrix_sync (matrix_a / matrix_b)");
  for (int r = 0; r < 16; r++)
    for (int c = 0; c < 16; c++)
      f.v[r * 16 + c] = emu_val(rm ? p[(size_t)r * ldm + c] : p[r + (size_t)c * ldm]);
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p,
                             unsigned ldm, layout_t l) {
  bool rm = l == mem_row_major;
  emu_wmma_check(p, ldm, 4, rm, "load_matrix_sync (accumulator)");
  for (int r = 0; r < 16; r++)
    for (int c = 0; c < 16; c++)
      f.v[r * 16 + c] = rm ? p[(size_t)r * ldm + c] : p[r + (size_t)c * ldm];
}
inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f,
                              unsigned ldm, layout_t l) {
  bool rm = l == mem_row_major;
  emu_wmma_check(p, ldm, 4, rm, "store_matrix_sync");
  unsigned lane = threadIdx.x & 31;
  for (int e = (int)lane; e < 256; e += 32) {
    int r = e / 16, c = e % 16;
    (rm ? p[(size_t)r * ldm + c] : p[r + (size_t)c * ldm]) = f.v[e];
  }
}
template <class Use, class T, class L>
void fill_fragment(fragment<Use, 16, 16, 16, T, L> &f, float v) {
  for (int i = 0; i < 256; i++)
    f.v[i] = v;
}
template <class T, class LA, class LB>
void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
              const fragment<matrix_a, 16, 16, 16, T, LA> &a,
              const fragment<matrix_b, 16, 16, 16, T, LB> &b,
              const fragment<accumulator, 16, 16, 16, float> &c) {
  float t[256];
  for (int i = 0; i < 16; i++)
    for (int j = 0; j < 16; j++) {
      float s = c.v[i * 16 + j];
      for (int k = 0; k < 16; k++)
        s += a.v[i * 16 + k] * b.v[k * 16 + j];
      t[i * 16 + j] = s;
    }
  for (int i = 0; i < 256; i++)
    d.v[i] = t[i];
}
} // namespace wmma
} // namespace nvcuda
