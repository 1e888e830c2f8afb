#include "core/rng.h"

#include <math.h>

static uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t core_hash64(uint64_t a, uint64_t b) { return mix(mix(a) ^ (b + 0x632be59bd9b4e019ull)); }

core_rng core_rng_keyed(uint64_t seed, uint64_t a, uint64_t b, uint64_t c) {
  core_rng r = {core_hash64(core_hash64(core_hash64(seed, a), b), c)};
  return r;
}

uint64_t core_rng_u64(core_rng *r) {
  r->state += 0x9e3779b97f4a7c15ull;
  uint64_t z = r->state;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t core_rng_below(core_rng *r, uint64_t n) {
  uint64_t limit = UINT64_MAX - UINT64_MAX % n; /* reject the biased tail */
  uint64_t x;
  do x = core_rng_u64(r);
  while (x >= limit);
  return x % n;
}

float core_rng_uniform(core_rng *r) { return (float)(core_rng_u64(r) >> 40) * (1.0f / 16777216.0f); }

float core_rng_normal(core_rng *r) {
  /* u1 in (0, 1] so the log is finite */
  double u1 = ((double)(core_rng_u64(r) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
  double u2 = (double)(core_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
  return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
