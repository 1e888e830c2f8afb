/* viz/stats.c: timeline checks, event names and bubble statistics shared by the writers. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "viz/viz.h"

enum { VIZ_MAX_P = 1 << 20, VIZ_MAX_V = 1 << 10 };

int viz_check(const sched_timeline *tl) {
  if (!tl) return core_error_set(CORE_EINPUT, "no timeline");
  if (tl->p < 1 || tl->p > VIZ_MAX_P)
    return core_error_set(CORE_EINPUT, "timeline has p=%d ranks (expected 1..%d)", tl->p,
                          VIZ_MAX_P);
  if (tl->v < 1 || tl->v > VIZ_MAX_V)
    return core_error_set(CORE_EINPUT, "timeline has v=%d chunks per rank (expected 1..%d)", tl->v,
                          VIZ_MAX_V);
  if (tl->n < 0 || (tl->n > 0 && !tl->ev))
    return core_error_set(CORE_EINPUT, "timeline has a bad event count %d", tl->n);
  for (int i = 0; i < tl->n; i++) {
    const sched_event *e = &tl->ev[i];
    if (e->rank < 0 || e->rank >= tl->p)
      return core_error_set(CORE_EINPUT, "timeline event %d: rank %d is not in 0..%d", i, e->rank,
                            tl->p - 1);
    if (e->op >= SCHED_OP_COUNT)
      return core_error_set(CORE_EINPUT, "timeline event %d: unknown op %d", i, e->op);
    if (!isfinite(e->start) || !isfinite(e->end) || e->end < e->start)
      return core_error_set(CORE_EINPUT, "timeline event %d (%s on rank %d): bad times %g .. %g", i,
                            sched_op_name((sched_op)e->op), e->rank, e->start, e->end);
  }
  double t0 = INFINITY, t1 = -INFINITY; /* every time finite, but their distance too */
  for (int i = 0; i < tl->n; i++) t0 = fmin(t0, tl->ev[i].start), t1 = fmax(t1, tl->ev[i].end);
  if (tl->n > 0 && !isfinite(t1 - t0))
    return core_error_set(CORE_EINPUT, "timeline events span %g .. %g, too long to measure", t0, t1);
  if (tl->n > 0 && t1 - t0 > 0 && t1 - t0 < 1e-200) /* a scale of pixels or columns per unit past a double */
    return core_error_set(CORE_EINPUT, "timeline events span %g .. %g, too short to draw (a span is 0 or at least 1e-200)",
                          t0, t1);
  return CORE_OK;
}

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

int viz_rows(const sched_timeline *tl, viz_row **rows) {
  int *ranks = core_malloc(sizeof *ranks * ((size_t)tl->n + 1)), k = 0, next = 0;
  for (int i = 0; i < tl->n; i++) ranks[i] = tl->ev[i].rank;
  qsort(ranks, (size_t)tl->n, sizeof *ranks, cmp_int);
  viz_row *out = core_malloc(sizeof *out * (2 * (size_t)tl->n + 1));
  for (int i = 0; i < tl->n; i++) { /* next: the first rank not yet in a row */
    int r = ranks[i];
    if (r < next) continue; /* another event of the same rank */
    if (r > next) out[k++] = (viz_row){next, r - 1}; /* the ranks without events before r */
    out[k++] = (viz_row){r, r};
    next = r + 1;
  }
  if (next < tl->p) out[k++] = (viz_row){next, tl->p - 1};
  free(ranks);
  *rows = out;
  return k;
}

void viz_event_name(const sched_timeline *tl, const sched_event *e, char *buf, size_t n) {
  sched_op op = (sched_op)e->op;
  char l = sched_op_letter(op), chunk[24] = "";
  if (tl->v > 1 && e->chunk >= 0) snprintf(chunk, sizeof chunk, " c%d", e->chunk);
  if (l) {
    snprintf(buf, n, "%c%d%s", l, e->mb, chunk);
  } else if (sched_is_p2p(op)) {
    const char *arrow = op == SCHED_SEND_ACT || op == SCHED_SEND_GRAD ? "->" : "<-";
    snprintf(buf, n, "%s %d %s r%d%s", sched_op_name(op), e->mb, arrow, e->peer, chunk);
  } else if (op == SCHED_REDUCE_TIED_GRADS && e->peer >= 0) {
    snprintf(buf, n, "%s <-> r%d", sched_op_name(op), e->peer);
  } else if (e->mb >= 0) {
    snprintf(buf, n, "%s %d%s", sched_op_name(op), e->mb, chunk);
  } else {
    snprintf(buf, n, "%s", sched_op_name(op));
  }
}

double viz_stats(const sched_timeline *tl, viz_rank_stat *out) {
  if (!tl || tl->p < 1) return 0;
  viz_rank_stat *s = out ? out : core_calloc((size_t)tl->p, sizeof *s);
  for (int r = 0; r < tl->p; r++)
    s[r] = (viz_rank_stat){.first = INFINITY, .last = -INFINITY};
  for (int i = 0; i < tl->n; i++) {
    const sched_event *e = &tl->ev[i];
    if (e->rank < 0 || e->rank >= tl->p || !sched_op_is_compute((sched_op)e->op)) continue;
    viz_rank_stat *r = &s[e->rank];
    r->busy += e->end - e->start, r->ops++;
    r->first = fmin(r->first, e->start), r->last = fmax(r->last, e->end);
  }
  double maxspan = 0, sum = 0;
  for (int r = 0; r < tl->p; r++) {
    if (s[r].ops == 0) s[r].first = s[r].last = 0;
    s[r].span = s[r].last - s[r].first;
    maxspan = fmax(maxspan, s[r].span);
  }
  for (int r = 0; r < tl->p; r++) {
    s[r].idle = s[r].span - s[r].busy;
    s[r].bubble = maxspan > 0 ? (maxspan - s[r].busy) / maxspan : 0;
    sum += s[r].bubble;
  }
  if (!out) free(s);
  return maxspan > 0 ? sum / tl->p : 0;
}

void viz_summary(const sched_timeline *tl, double *makespan, double *bubble_rate) {
  double mk = tl->makespan, br = tl->bubble_rate;
  if (mk == 0 && tl->n > 0) {
    double t0 = INFINITY, t1 = -INFINITY;
    for (int i = 0; i < tl->n; i++)
      t0 = fmin(t0, tl->ev[i].start), t1 = fmax(t1, tl->ev[i].end);
    mk = t1 > t0 ? t1 - t0 : 0;
    br = viz_stats(tl, NULL);
  }
  if (makespan) *makespan = mk;
  if (bubble_rate) *bubble_rate = br;
}

void viz_write_stats(const sched_timeline *tl, FILE *f) {
  if (viz_check(tl)) {
    fprintf(f, "(no statistics: %s)\n", core_error_msg());
    return;
  }
  viz_rank_stat *s = core_calloc((size_t)tl->p, sizeof *s);
  double rate = viz_stats(tl, s), mk;
  viz_summary(tl, &mk, NULL);
  fprintf(f, "%6s %8s %12s %12s %12s %8s\n", "rank", "ops", "busy", "span", "idle", "bubble");
  for (int r = 0; r < tl->p; r++)
    fprintf(f, "%6d %8d %12.6g %12.6g %12.6g %7.2f%%\n", r, s[r].ops, s[r].busy, s[r].span,
            s[r].idle, 100 * s[r].bubble);
  fprintf(f, "%s p=%d v=%d m=%d  makespan %.6g %s  bubble rate %.2f%%\n", tl->schedule, tl->p,
          tl->v, tl->m, mk, sched_unit_is_seconds(tl->unit) ? "s" : "units", 100 * rate);
  free(s);
}

int viz_write_file(const sched_timeline *tl, const char *path, int (*fw)(const sched_timeline *, FILE *)) {
  int rc = viz_check(tl);
  if (rc) return rc;
  FILE *f = fopen(path, "w");
  if (!f) return core_error_set(CORE_ERUNTIME, "cannot write %s: %s", path, strerror(errno));
  rc = fw(tl, f);
  int bad = ferror(f);
  if (fclose(f) != 0 || bad) {
    int err = errno; /* the failed write's or close's */
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISREG(st.st_mode)) remove(path);
    return core_error_set(CORE_ERUNTIME, "writing %s failed: %s", path, strerror(err));
  }
  return rc;
}
