/* tests/common/splitmix.h: the tests' random inputs. splitmix64: a fixed seed gives the same
 * values on every machine, so a failing comparison can be replayed. */
#ifndef BRIGADE_TESTS_SPLITMIX_H
#define BRIGADE_TESTS_SPLITMIX_H

#include <stdint.h>

typedef struct {
  uint64_t s;
} rng;

static inline uint64_t next_u64(rng *r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* uniform in [lo, hi), 24 random bits */
static inline float uniform(rng *r, float lo, float hi) {
  return lo + (hi - lo) * (float)((double)(next_u64(r) >> 40) * 0x1p-24);
}

#endif
