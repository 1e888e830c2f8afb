/* Logger: the line format per level, the rank prefix, filtering, and the monotonic clock. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <stdio.h>

#include "core/log.h"

static void setup(void) {
  cr_redirect_stderr();
  core_log_set_level(CORE_LOG_INFO);
  core_log_set_rank(-1);
}

Test(log, levels_rank_and_filtering, .init = setup) {
  core_log(CORE_LOG_INFO, "step %d", 3);
  core_log(CORE_LOG_WARN, "slow");
  core_log(CORE_LOG_ERROR, "bad %s", "thing");
  core_log(CORE_LOG_DEBUG, "hidden at INFO");
  core_log_set_rank(2);
  core_log(CORE_LOG_INFO, "hello");
  core_log_set_level(CORE_LOG_DEBUG);
  core_log(CORE_LOG_DEBUG, "shown");
  core_log_set_level(CORE_LOG_ERROR);
  core_log(CORE_LOG_WARN, "hidden at ERROR");
  core_log_set_rank(-1);
  core_log_set_level(99); /* clamped to DEBUG */
  cr_assert_eq(core_log_level(), CORE_LOG_DEBUG);
  core_log(-5, "clamped to error");
  core_log(42, "clamped to debug");
  fflush(stderr);
  cr_assert_stderr_eq_str("brigade: step 3\n"
                          "brigade: warning: slow\n"
                          "brigade: error: bad thing\n"
                          "brigade: [rank 2] hello\n"
                          "brigade: [rank 2] debug: shown\n"
                          "brigade: error: clamped to error\n"
                          "brigade: debug: clamped to debug\n");
}

Test(log, now_is_monotonic) {
  double a = core_now(), b = core_now();
  cr_assert(a > 0 && b >= a);
}
