/* viz/ascii.c: a terminal chart. Each column is a slice of time; it shows the letter of the
 * compute op that covers most of the slice (F, B, I, W; lower case for odd micro-batches so
 * neighbours stay apart), '.' when the rank is idle there. */
#include <math.h>
#include <stdlib.h>

#include "viz/viz.h"

void viz_write_ascii(const sched_timeline *tl, FILE *f, int width) {
  double t0 = INFINITY, t1 = -INFINITY;
  for (int i = 0; i < tl->n; i++)
    if (sched_op_is_compute((sched_op)tl->ev[i].op))
      t0 = fmin(t0, tl->ev[i].start), t1 = fmax(t1, tl->ev[i].end);
  fprintf(f, "%s p=%d v=%d m=%d  bubble rate %.1f%%\n", tl->schedule, tl->p, tl->v, tl->m, 100 * tl->bubble_rate);
  if (!(t1 > t0) || width < 1) return;
  double span = t1 - t0;
  /* one column per unit when that fits, so unit-cost schedules read op by op */
  int cols = span <= width && fabs(span - round(span)) < 1e-9 ? (int)round(span) : width;
  double dt = span / cols;
  char *row = malloc((size_t)cols + 1);
  double *cover = malloc(sizeof(double) * (size_t)cols);
  for (int r = 0; r < tl->p; r++) {
    for (int c = 0; c < cols; c++) row[c] = '.', cover[c] = 0;
    for (int i = 0; i < tl->n; i++) {
      const sched_event *e = &tl->ev[i];
      char l = sched_op_letter((sched_op)e->op);
      if (e->rank != r || !l) continue;
      if (e->mb % 2) l = (char)(l - 'A' + 'a');
      int c0 = (int)floor((e->start - t0) / dt), c1 = (int)ceil((e->end - t0) / dt);
      for (int c = c0 < 0 ? 0 : c0; c < c1 && c < cols; c++) {
        double a = fmax(e->start, t0 + c * dt), b = fmin(e->end, t0 + (c + 1) * dt);
        if (b - a > cover[c]) cover[c] = b - a, row[c] = l;
      }
    }
    row[cols] = 0;
    fprintf(f, "rank %2d |%s|\n", r, row);
  }
  fprintf(f, "         F forward, B backward, I input grad, W weight grad (lower case: odd micro-batch), . idle\n");
  free(row), free(cover);
}
