/* core/log.c: one-line messages to stderr and a monotonic clock. */
#include "core/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

static int log_level = CORE_LOG_INFO;
static int log_rank = -1;

static int clamp_level(int level) {
  return level < CORE_LOG_ERROR ? CORE_LOG_ERROR : level > CORE_LOG_DEBUG ? CORE_LOG_DEBUG : level;
}

void core_log_set_level(int level) { log_level = clamp_level(level); }
int core_log_level(void) { return log_level; }
void core_log_set_rank(int rank) { log_rank = rank; }

void core_log(int level, const char *fmt, ...) {
  level = clamp_level(level);
  if (level > log_level) return;
  static const char *const tag[] = {"error: ", "warning: ", "", "debug: "};
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  /* one fprintf per line, so that lines of different ranks sharing a terminal do not mix */
  if (log_rank >= 0)
    fprintf(stderr, "brigade: [rank %d] %s%s\n", log_rank, tag[level], msg);
  else
    fprintf(stderr, "brigade: %s%s\n", tag[level], msg);
}

double core_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
