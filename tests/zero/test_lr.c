#include <criterion/criterion.h>
#include <math.h>

#include "core/error.h"
#include "zero/lr.h"

Test(lr, warmup_then_cosine) {
  zero_lr s = {ZERO_LR_WARMUP_COSINE, 1e-3, 1e-4, 10, 110};
  cr_assert(fabs(zero_lr_at(&s, 0) - 1e-4) < 1e-15);
  cr_assert(fabs(zero_lr_at(&s, 9) - 1e-3) < 1e-15);
  cr_assert(fabs(zero_lr_at(&s, 10) - 1e-3) < 1e-15);
  cr_assert(fabs(zero_lr_at(&s, 60) - 5.5e-4) < 1e-12);
  cr_assert(fabs(zero_lr_at(&s, 110) - 1e-4) < 1e-15);
  cr_assert(fabs(zero_lr_at(&s, 500) - 1e-4) < 1e-15);
  for (long t = 11; t < 110; t++) cr_assert(zero_lr_at(&s, t) <= zero_lr_at(&s, t - 1));
}

Test(lr, kinds) {
  zero_lr_kind k;
  cr_assert_eq(zero_lr_parse_kind("WarmupLR", &k), CORE_OK);
  cr_assert_eq(k, ZERO_LR_WARMUP);
  cr_assert_eq(zero_lr_parse_kind("bogus", &k), CORE_EINPUT);
  zero_lr s = {ZERO_LR_WARMUP, 2, 0, 4, 0};
  cr_assert_eq(zero_lr_at(&s, 1), 1.0);
  cr_assert_eq(zero_lr_at(&s, 100), 2.0);
  zero_lr c = {ZERO_LR_CONSTANT, 3, 0, 4, 0};
  cr_assert_eq(zero_lr_at(&c, 0), 3.0);
}

/* The three names docs/reference.md documents for scheduler.type, each to its own schedule. */
Test(lr, every_documented_name) {
  const char *names[] = {"constant", "WarmupLR", "WarmupCosineLR"};
  zero_lr_kind want[] = {ZERO_LR_CONSTANT, ZERO_LR_WARMUP, ZERO_LR_WARMUP_COSINE};
  for (int i = 0; i < 3; i++) {
    zero_lr_kind k = (zero_lr_kind)-1;
    cr_assert_eq(zero_lr_parse_kind(names[i], &k), CORE_OK, "%s", names[i]);
    cr_assert_eq(k, want[i], "%s parsed as %d", names[i], k);
  }
  cr_assert_eq(zero_lr_parse_kind("WarmupCosine", &want[0]), CORE_EINPUT);
}

/* A cosine schedule with no room to decay (total_num_steps at or below the warm-up) stays at the
 * peak after the warm-up; no schedule ever gives a rate that is not finite or leaves
 * [min(min_lr, first warm-up rate), lr]. */
Test(lr, finite_and_bounded_for_any_lengths) {
  for (long warmup = 0; warmup <= 4; warmup++)
    for (long total = 1; total <= 8; total++)
      for (int kind = ZERO_LR_CONSTANT; kind <= ZERO_LR_WARMUP_COSINE; kind++) {
        if (kind == ZERO_LR_WARMUP && warmup == 0) continue; /* train_cfg makes that 1 */
        zero_lr s = {(zero_lr_kind)kind, 1e-3, 1e-4, warmup, total};
        for (long t = 0; t < 3 * total + 3; t++) {
          double lr = zero_lr_at(&s, t), lo = warmup ? 1e-3 / (double)warmup : 1e-3;
          lo = lo < 1e-4 ? lo : 1e-4;
          cr_assert(isfinite(lr) && lr >= lo - 1e-18 && lr <= 1e-3 + 1e-18, "kind %d warmup %ld total %ld step %ld: lr %g",
                    kind, warmup, total, t, lr);
          if (kind == ZERO_LR_WARMUP_COSINE && total <= warmup && t >= warmup) cr_assert_eq(lr, 1e-3);
        }
      }
}
