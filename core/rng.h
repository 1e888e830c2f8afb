/* core/rng.h: deterministic random numbers. Every stream is a pure function of its keys
 * (seed, layer index; or seed, step, data rank, micro-batch), so a model gets the same weights
 * and the same batches however it is partitioned. */
#ifndef BRIGADE_CORE_RNG_H
#define BRIGADE_CORE_RNG_H

#include <stdint.h>

typedef struct {
  uint64_t state;
} core_rng;

/* Mixes a list of keys into one 64-bit value (splitmix64 finaliser over each key). */
uint64_t core_hash64(uint64_t a, uint64_t b);
/* A generator keyed by (seed, a, b, c); use distinct keys for distinct streams. */
core_rng core_rng_keyed(uint64_t seed, uint64_t a, uint64_t b, uint64_t c);
uint64_t core_rng_u64(core_rng *r);
/* Uniform in [0, n) without modulo bias; n > 0. */
uint64_t core_rng_below(core_rng *r, uint64_t n);
/* Uniform float in [0, 1) with 24 random bits. */
float core_rng_uniform(core_rng *r);
/* Standard normal (Box-Muller, both values used in turn is avoided: one per call, deterministic). */
float core_rng_normal(core_rng *r);

#endif
