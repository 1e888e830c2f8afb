#include "schedule/events.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

void sched_timeline_init(sched_timeline *tl, const char *schedule, const char *unit, int p, int v,
                         int m) {
  memset(tl, 0, sizeof *tl);
  snprintf(tl->schedule, sizeof tl->schedule, "%s", schedule ? schedule : "");
  snprintf(tl->unit, sizeof tl->unit, "%s", unit ? unit : "unit");
  tl->p = p, tl->v = v, tl->m = m;
}

void sched_timeline_add(sched_timeline *tl, sched_event e) {
  if (tl->n == tl->cap) {
    CORE_ASSERT(tl->cap <= INT_MAX / 2);
    tl->cap = tl->cap ? 2 * tl->cap : 256;
    tl->ev = core_realloc(tl->ev, sizeof(sched_event) * (size_t)tl->cap);
  }
  tl->ev[tl->n++] = e;
}

void sched_timeline_reserve(sched_timeline *tl, size_t n) {
  CORE_ASSERT(n <= INT_MAX);
  if ((size_t)tl->cap >= n) return;
  tl->ev = core_realloc(tl->ev, sizeof(sched_event) * n);
  tl->cap = (int)n;
}

void sched_timeline_free(sched_timeline *tl) {
  free(tl->ev);
  memset(tl, 0, sizeof *tl);
}

/* bubble_rate = 1 - mean(busy) / max(span): busy counts compute ops only, a rank's span runs
 * from its first op's start to its last op's end. */
void sched_timeline_stats(sched_timeline *tl) {
  if (tl->p < 1 || tl->n == 0) {
    tl->makespan = 0, tl->bubble_rate = 0;
    return;
  }
  double *busy = core_calloc((size_t)tl->p, sizeof(double));
  double *lo = core_malloc(sizeof(double) * (size_t)tl->p);
  double *hi = core_malloc(sizeof(double) * (size_t)tl->p);
  for (int r = 0; r < tl->p; r++) lo[r] = INFINITY, hi[r] = -INFINITY;
  double t0 = INFINITY, t1 = -INFINITY;
  for (int i = 0; i < tl->n; i++) {
    const sched_event *e = &tl->ev[i];
    if (e->rank < 0 || e->rank >= tl->p) continue;
    if (e->start < t0) t0 = e->start;
    if (e->end > t1) t1 = e->end;
    if (!sched_op_is_compute((sched_op)e->op)) continue;
    busy[e->rank] += e->end - e->start;
    if (e->start < lo[e->rank]) lo[e->rank] = e->start;
    if (e->end > hi[e->rank]) hi[e->rank] = e->end;
  }
  double sum = 0, maxspan = 0;
  for (int r = 0; r < tl->p; r++) {
    sum += busy[r];
    if (hi[r] > lo[r] && hi[r] - lo[r] > maxspan) maxspan = hi[r] - lo[r];
  }
  tl->makespan = t1 > t0 ? t1 - t0 : 0;
  tl->bubble_rate = maxspan > 0 ? 1.0 - (sum / tl->p) / maxspan : 0;
  free(busy), free(lo), free(hi);
}
