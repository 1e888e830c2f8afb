// The CUDA emulator's PTX (kernels/cuda/ptx.cuh, emulated in tests/emu/emu.cpp) held to the
// register layouts PTX documents for mma.sync m16n8k16 and ldmatrix, which flash_mma.cu is
// written against (on a GPU, make test-gpu checks the kernels themselves), and to cp.async's
// rules: the destination is not to be read before the wait and a barrier after it, and every copy
// is waited for.
// Matrices of small integers, so that every product and sum is exact in bf16 and fp32.
#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <string.h>

#include "cuda_runtime.h"
#include "kernels/cuda/ptx.cuh"

namespace {

typedef __nv_bfloat16 bf16;

cudaStream_t stream() {
  static cudaStream_t s;
  if (!s) cr_assert_eq(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  return s;
}
template <class T> T *dev(const T *host, size_t n) {
  T *d;
  cr_assert_eq(cudaMalloc(&d, n * sizeof(T)), cudaSuccess);
  if (host) cudaMemcpyAsync(d, host, n * sizeof(T), cudaMemcpyHostToDevice, stream());
  cudaStreamSynchronize(stream());
  return d;
}
template <class T> void back(T *host, const T *d, size_t n) {
  cudaMemcpyAsync(host, d, n * sizeof(T), cudaMemcpyDeviceToHost, stream()); // pageable: returns when done
}
float val(int i) { return (float)(i % 7 - 3); } // -3..3

// D (16 x 8) = A (16 x 16) B (16 x 8), each lane giving and taking the elements ptx.cuh names
void k_mma(const float *A, const float *B, float *D) {
  int l = threadIdx.x, g = l / 4, q = l % 4;
  uint32_t a[4] = {pack_bf16(A[g * 16 + 2 * q], A[g * 16 + 2 * q + 1]),
                   pack_bf16(A[(g + 8) * 16 + 2 * q], A[(g + 8) * 16 + 2 * q + 1]),
                   pack_bf16(A[g * 16 + 2 * q + 8], A[g * 16 + 2 * q + 9]),
                   pack_bf16(A[(g + 8) * 16 + 2 * q + 8], A[(g + 8) * 16 + 2 * q + 9])};
  uint32_t b[2] = {pack_bf16(B[2 * q * 8 + g], B[(2 * q + 1) * 8 + g]),
                   pack_bf16(B[(2 * q + 8) * 8 + g], B[(2 * q + 9) * 8 + g])};
  float d[4] = {1, 1, 1, 1}; // accumulates: D = 1 + A B
  mma_bf16_16816(d, a, b);
  D[g * 8 + 2 * q] = d[0], D[g * 8 + 2 * q + 1] = d[1], D[(g + 8) * 8 + 2 * q] = d[2], D[(g + 8) * 8 + 2 * q + 1] = d[3];
}

// a 16 x 16 bf16 tile in shared memory (rows 24 elements apart: 48 bytes, 16-byte aligned), then
// ldmatrix x4 (trans or not) with lane l giving row l % 16, column 8 (l / 16): out[l][i] = r[i]
void k_ldsm(const float *X, uint32_t *out, int trans) {
  bf16 *t = (bf16 *)emu_dyn_smem();
  int l = threadIdx.x;
  for (int i = l; i < 256; i += 32) t[i / 16 * 24 + i % 16] = __float2bfloat16_rn(X[i]);
  __syncwarp();
  uint32_t r[4];
  const bf16 *p = t + (l % 16) * 24 + 8 * (l / 16);
  if (trans) ldsm_x4_t(r, p);
  else ldsm_x4(r, p);
  for (int i = 0; i < 4; i++) out[l * 4 + i] = r[i];
}

// cp.async of 16 bytes a lane into shared memory: what a lane reads there before the wait and
// after it (the wait, then a barrier); `wait` 0: the copies are never waited for
void k_cp(const float *src, float *before, float *after, int wait) {
  float *t = (float *)emu_dyn_smem();
  int l = threadIdx.x;
  cp_async16(t + 4 * l, src + 4 * l);
  cp_async_commit();
  before[l] = t[4 * l];
  if (!wait) return;
  cp_async_wait<0>();
  __syncthreads();
  after[l] = t[4 * ((l + 1) % 32)]; // another lane's copy
}

// as k_cp, but another lane's bytes read right after the wait, with no barrier: a race on a GPU
void k_cp_no_barrier(const float *src, float *after) {
  float *t = (float *)emu_dyn_smem();
  int l = threadIdx.x;
  cp_async16(t + 4 * l, src + 4 * l);
  cp_async_commit();
  cp_async_wait<0>();
  after[l] = t[4 * ((l + 1) % 32)];
  __syncthreads(); // (so that the copies land before the block ends)
}

void k_cp_to_global(float *dst, const float *src) {
  cp_async16(dst, src);
  cp_async_commit();
  cp_async_wait<0>();
}

float bf(uint32_t w, int high) {
  uint32_t u = (high ? w >> 16 : w & 0xffffu) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

} // namespace

Test(emu_ptx, mma_sync_multiplies_in_the_documented_layout) {
  float A[256], B[128], D[128];
  for (int i = 0; i < 256; i++) A[i] = val(i * 5 + 1);
  for (int i = 0; i < 128; i++) B[i] = val(i * 3 + 2);
  float *dA = dev(A, 256), *dB = dev(B, 128), *dD = dev<float>(nullptr, 128);
  emu_launch(k_mma, dim3(1), dim3(32), 0, stream())(dA, dB, dD);
  back(D, dD, 128);
  for (int r = 0; r < 16; r++)
    for (int c = 0; c < 8; c++) {
      float s = 1;
      for (int k = 0; k < 16; k++) s += A[r * 16 + k] * B[k * 8 + c];
      cr_expect_eq(D[r * 8 + c], s, "D(%d, %d) = %g, expected %g", r, c, D[r * 8 + c], s);
    }
  cudaFree(dA), cudaFree(dB), cudaFree(dD);
}

Test(emu_ptx, ldmatrix_gives_the_documented_fragments) {
  float X[256];
  for (int i = 0; i < 256; i++) X[i] = (float)i; // X(r, c) = 16 r + c, exact in bf16
  float *dX = dev(X, 256);
  uint32_t *dout = dev<uint32_t>(nullptr, 128), out[128];
  for (int trans = 0; trans <= 1; trans++) {
    emu_launch(k_ldsm, dim3(1), dim3(32), 16 * 24 * sizeof(bf16), stream())(dX, dout, trans);
    back(out, dout, 128);
    for (int l = 0; l < 32; l++)
      for (int i = 0; i < 4; i++) {
        // matrix i: rows 8 (i % 2).., columns 8 (i / 2)..; element (r, c) of it
        int r = trans ? 2 * (l % 4) : l / 4, c = trans ? l / 4 : 2 * (l % 4), r0 = 8 * (i % 2), c0 = 8 * (i / 2);
        float lo = X[(r0 + r) * 16 + c0 + c], hi = trans ? X[(r0 + r + 1) * 16 + c0 + c] : X[(r0 + r) * 16 + c0 + c + 1];
        cr_expect(bf(out[l * 4 + i], 0) == lo && bf(out[l * 4 + i], 1) == hi,
                  "%s lane %d r[%d] = (%g, %g), expected (%g, %g)", trans ? "trans" : "plain", l, i,
                  bf(out[l * 4 + i], 0), bf(out[l * 4 + i], 1), lo, hi);
      }
  }
  cudaFree(dX), cudaFree(dout);
}

Test(emu_ptx, cp_async_lands_at_the_wait) {
  float src[128], before[32], after[32];
  for (int i = 0; i < 128; i++) src[i] = (float)i;
  float *ds = dev(src, 128), *db = dev<float>(nullptr, 32), *da = dev<float>(nullptr, 32);
  emu_launch(k_cp, dim3(1), dim3(32), 128 * sizeof(float), stream())(ds, db, da, 1);
  back(before, db, 32), back(after, da, 32);
  for (int l = 0; l < 32; l++) {
    cr_expect(isnan(before[l]), "lane %d read %g before the wait", l, before[l]);
    cr_expect_eq(after[l], (float)(4 * ((l + 1) % 32)), "lane %d after the wait and the barrier", l);
  }
  cudaFree(ds), cudaFree(db), cudaFree(da);
}

Test(emu_ptx, cp_async_is_not_seen_by_other_threads_before_a_barrier) {
  float src[128], after[32];
  for (int i = 0; i < 128; i++) src[i] = (float)i;
  float *ds = dev(src, 128), *da = dev<float>(nullptr, 32);
  emu_launch(k_cp_no_barrier, dim3(1), dim3(32), 128 * sizeof(float), stream())(ds, da);
  back(after, da, 32);
  for (int l = 0; l < 32; l++) cr_expect(isnan(after[l]), "lane %d read another lane's copy (%g) without a barrier", l, after[l]);
  cudaFree(ds), cudaFree(da);
}

Test(emu_ptx, cp_async_never_waited_for_aborts, .signal = SIGABRT) {
  float *ds = dev<float>(nullptr, 128), *db = dev<float>(nullptr, 32), *da = dev<float>(nullptr, 32);
  emu_launch(k_cp, dim3(1), dim3(32), 128 * sizeof(float), stream())(ds, db, da, 0);
}

Test(emu_ptx, cp_async_outside_shared_memory_aborts, .signal = SIGABRT) {
  float *a = dev<float>(nullptr, 4), *b = dev<float>(nullptr, 4);
  emu_launch(k_cp_to_global, dim3(1), dim3(1), 0, stream())(a, b);
}
