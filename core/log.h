/* core/log.h: messages to stderr, "brigade: [rank N] warning: ..." (the rank only in multi-rank
 * runs, once core_log_set_rank() gave one), and a monotonic clock. */
#ifndef BRIGADE_CORE_LOG_H
#define BRIGADE_CORE_LOG_H

enum { CORE_LOG_ERROR = 0, CORE_LOG_WARN, CORE_LOG_INFO, CORE_LOG_DEBUG };

/* Messages above level are dropped; INFO by default. Out-of-range levels are clamped. */
void core_log_set_level(int level);
int core_log_level(void);
void core_log_set_rank(int rank); /* < 0: no rank prefix (the default) */
/* One line: "brigade: " [rank] tag message "\n", tag "error: ", "warning: ", "" or "debug: ". */
void core_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
double core_now(void); /* monotonic seconds, for durations */

#endif
