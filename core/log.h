/* core/log.h: messages to stderr, "brigade: ..." (with "[rank N] " in multi-rank runs). */
#ifndef BRIGADE_CORE_LOG_H
#define BRIGADE_CORE_LOG_H

enum { CORE_LOG_ERROR = 0, CORE_LOG_WARN, CORE_LOG_INFO, CORE_LOG_DEBUG };

void core_log_set_level(int level);
void core_log_set_rank(int rank); /* < 0: no rank prefix */
void core_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
double core_now(void); /* monotonic seconds */

#endif
