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
