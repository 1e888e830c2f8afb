// tests/emu/include/cuda_fp16.h: __half for the emulator (conversions through GCC's _Float16:
// IEEE).
#pragma once
#include <cstdint>
#include <cstring>
struct __half {
  uint16_t x;
};
inline __half __float2half_rn(float f) {
  _Float16 h = (_Float16)f;
  __half r;
  memcpy(&r.x, &h, 2);
  return r;
}
inline float __half2float(__half h) {
  _Float16 v;
  memcpy(&v, &h.x, 2);
  return (float)v;
}
inline unsigned short __half_as_ushort(__half h) { return h.x; }
inline __half __ushort_as_half(unsigned short u) {
  __half h;
  h.x = u;
  return h;
}
