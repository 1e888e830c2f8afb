/* kernels/convert.c: fp32 <-> bf16 / fp16 for one value, round to nearest, ties to even.
 * Done on the bit patterns so the result does not depend on the FPU's rounding mode or on
 * compiler support for _Float16 / __bf16. */
#include <string.h>

#include "kernels/ops.h"

static uint32_t bits_of(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

static float float_of(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* bf16 is the top half of an fp32: same exponent range, 7 mantissa bits instead of 23. */
uint16_t kernels_f32_to_bf16(float x) {
  uint32_t u = bits_of(x);
  /* NaN: keep sign and top payload bits, and set the quiet bit, so a NaN whose payload lies
   * only in the low half does not turn into Inf when truncated. */
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
  /* Add just under half an ulp of bf16, plus one when the kept part is odd: a tie then carries
   * into the kept part only when that makes it even. A carry out of the mantissa bumps the
   * exponent, which is right, up to Inf for values past bf16's largest finite one. */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

float kernels_bf16_to_f32(uint16_t h) { return float_of((uint32_t)h << 16); }

/* fp16: 5 exponent bits (bias 15), 10 mantissa bits; normal from 2^-14, subnormal steps of
 * 2^-24, largest finite 65504. */
uint16_t kernels_f32_to_f16(float x) {
  uint32_t u = bits_of(x);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu; /* |x| */
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u); /* NaN -> quiet NaN */
  /* 0x477ff000 is 65520, halfway between 65504 and 65536 (which fp16 cannot hold); the tie
   * goes to the even neighbour, 65536, so from there on the result is Inf. Inf lands here too. */
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
  uint32_t exp = a >> 23; /* biased fp32 exponent */
  if (exp < 113) {        /* |x| < 2^-14: an fp16 subnormal (or zero) */
    if (exp < 102) return sign; /* |x| < 2^-25: rounds to zero (2^-25 itself is a tie to 0) */
    /* The value in units of 2^-24 is mant * 2^(exp - 150) with the implicit 1 restored; shift
     * right by 126 - exp (14..24 bits) and round the dropped bits to nearest even. */
    uint32_t mant = (a & 0x7fffffu) | 0x800000u, shift = 126 - exp;
    uint32_t kept = mant >> shift, rest = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (kept & 1u))) kept++; /* may carry into 2^-14: fine */
    return (uint16_t)(sign | kept);
  }
  /* Normal: rebias the exponent (127 -> 15) and drop 13 mantissa bits, rounding to even; a
   * carry out of the mantissa correctly bumps the exponent (65520 and up was handled above). */
  uint32_t h = ((exp - 112) << 10) | ((a >> 13) & 0x3ffu);
  uint32_t rest = a & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
  return (uint16_t)(sign | h);
}

float kernels_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 31) return float_of(sign | 0x7f800000u | (mant << 13)); /* Inf, NaN */
  if (exp != 0) return float_of(sign | ((exp + 112) << 23) | (mant << 13));
  /* subnormal: mant * 2^-24, exact in fp32 (the product is a power-of-two scaling) */
  float f = (float)mant * 0x1p-24f;
  return sign ? -f : f;
}

float kernels_round(float x, int kind) {
  if (kind == 1) return kernels_bf16_to_f32(kernels_f32_to_bf16(x));
  if (kind == 2) return kernels_f16_to_f32(kernels_f32_to_f16(x));
  return x;
}
