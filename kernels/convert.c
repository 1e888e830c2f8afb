/* kernels/convert.c: fp32 <-> bf16 / fp16, round to nearest even. */
#include <math.h>
#include <string.h>

#include "kernels/ops.h"

static uint32_t bits(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}
static float from_bits(uint32_t u) {
  float x;
  memcpy(&x, &u, 4);
  return x;
}

uint16_t kernels_f32_to_bf16(float x) {
  uint32_t u = bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}

float kernels_bf16_to_f32(uint16_t h) { return from_bits((uint32_t)h << 16); }

uint16_t kernels_f32_to_f16(float x) {
  uint32_t u = bits(x), sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  /* NaN */
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: inf */
  if (a < 0x38800000u) {                                   /* below 2^-14: subnormal or 0 */
    /* scale to units of 2^-24 and round to nearest even */
    float f = from_bits(a) * 16777216.0f;
    float r = nearbyintf(f);
    return (uint16_t)(sign | (uint32_t)r);
  }
  uint32_t mant = a & 0x7fffffu, exp = (a >> 23) - 127 + 15;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1))) h++;
  return (uint16_t)(sign | h);
}

float kernels_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ffu;
  if (exp == 0) {
    float f = (float)mant / 16777216.0f;
    return sign ? -f : f;
  }
  if (exp == 31) return from_bits(sign | 0x7f800000u | (mant << 13));
  return from_bits(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}
