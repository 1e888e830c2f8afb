/* core/progress.c: progress lines (see progress.h). */
#include "core/progress.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

static struct {
  int depth;                   /* tasks started and not stopped; only the outermost speaks */
  char task[192], phase[64], unit[32];
  double total, done, t0, next; /* next: when the next line is due */
  int said;                    /* a line was printed for this task */
} pg;

/* The delay before the first line and between lines: 2 and 5 s, or $BRIGADE_PROGRESS. */
static void delays(double *first, double *every) {
  const char *e = getenv("BRIGADE_PROGRESS");
  char *end;
  double s = e && *e ? strtod(e, &end) : -1;
  if (e && *e && *end == 0 && s >= 0 && s < 1e9) {
    *first = *every = s > 0 ? s : INFINITY;
    return;
  }
  *first = 2, *every = 5;
}

static void count_str(double v, char *buf, size_t n) {
  if (v >= 1e7) snprintf(buf, n, "%.1f M", v / 1e6);
  else snprintf(buf, n, "%.0f", v);
}

void core_progress_start(const char *fmt, ...) {
  if (pg.depth++ > 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(pg.task, sizeof pg.task, fmt, ap);
  va_end(ap);
  double first, every;
  delays(&first, &every);
  pg.phase[0] = pg.unit[0] = 0, pg.total = pg.done = 0, pg.said = 0;
  pg.t0 = core_now(), pg.next = pg.t0 + first;
}

void core_progress_phase(const char *phase, double total, const char *unit) {
  if (pg.depth != 1) return;
  snprintf(pg.phase, sizeof pg.phase, "%s", phase ? phase : "");
  snprintf(pg.unit, sizeof pg.unit, "%s", unit ? unit : "");
  pg.total = total, pg.done = 0;
}

void core_progress_at(double done) {
  if (pg.depth != 1) return;
  pg.done = done;
  double now = core_now();
  if (now < pg.next) return;
  double first, every;
  delays(&first, &every);
  pg.next = now + every, pg.said = 1;
  char d[32], t[32], pct[16] = "";
  count_str(done, d, sizeof d);
  count_str(pg.total, t, sizeof t);
  if (pg.total > 0) snprintf(pct, sizeof pct, " (%.0f%%)", 100 * done / pg.total);
  double el = now - pg.t0;
  core_log(CORE_LOG_INFO, "%s: %s%s%s%s%s%s%s%s, %.*f s", pg.task, pg.phase, pg.phase[0] ? " " : "", d,
           pg.total > 0 ? " of " : "", pg.total > 0 ? t : "", pg.unit[0] ? " " : "", pg.unit, pct, el < 10 ? 1 : 0, el);
}

void core_progress_stop(void) {
  if (pg.depth == 0 || --pg.depth > 0) return;
  if (pg.said) core_log(CORE_LOG_INFO, "%s: done in %.1f s", pg.task, core_now() - pg.t0);
  pg.said = 0;
}
