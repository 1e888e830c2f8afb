// tests/emu/include/cub/device/device_radix_sort.cuh: CUB's SortPairs for the emulator: a stable
// sort by key on the host (all bits).
#pragma once
#include "cuda_runtime.h"
#include <algorithm>
#include <numeric>
#include <vector>
bool emu_is_device_range(const void *p, size_t bytes);
namespace cub {
struct DeviceRadixSort {
  template <class K, class V>
  static cudaError_t SortPairs(void *temp, size_t &bytes, const K *kin, K *kout, const V *vin,
                               V *vout, int n, int begin_bit = 0, int end_bit = sizeof(K) * 8,
                               cudaStream_t stream = 0) {
    if (!temp) {
      bytes = 4096 + 16 * (size_t)n;
      return cudaSuccess;
    }
    emu_check_stream(stream, "cub::DeviceRadixSort::SortPairs");
    if (begin_bit != 0 || end_bit != (int)sizeof(K) * 8) {
      fprintf(stderr, "tests/emu: SortPairs on part of the key bits (not emulated)\n");
      abort();
    }
    if (!emu_is_device_range(temp, bytes) || !emu_is_device_range(kin, n * sizeof(K)) ||
        !emu_is_device_range(kout, n * sizeof(K)) || !emu_is_device_range(vin, n * sizeof(V)) ||
        !emu_is_device_range(vout, n * sizeof(V))) {
      fprintf(stderr, "tests/emu: SortPairs on memory outside device allocations\n");
      abort();
    }
    std::vector<int> idx(n);
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return kin[a] < kin[b]; });
    std::vector<K> k2(n);
    std::vector<V> v2(n);
    for (int i = 0; i < n; i++)
      k2[i] = kin[idx[i]], v2[i] = vin[idx[i]];
    std::copy(k2.begin(), k2.end(), kout);
    std::copy(v2.begin(), v2.end(), vout);
    return cudaSuccess;
  }
};
} // namespace cub
