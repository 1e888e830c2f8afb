/* viz/ascii.c: a terminal chart. Each column is a slice of time on one rank; it shows the op
 * covering most of the slice, idle time competing as '.': F, B, I, W (upper case for even
 * micro-batches, lower case for odd ones, so neighbours stay apart), '#' for the tail ops
 * (tied/data-parallel gradient reduction, optimizer step). Loads and transfers are not drawn. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "viz/viz.h"

enum { MIN_COLS = 10 };

static char cell_char(const sched_event *e) {
  sched_op op = (sched_op)e->op;
  char l = sched_op_letter(op);
  if (!l) return op >= SCHED_REDUCE_TIED_GRADS && op <= SCHED_OPTIMIZER_STEP ? '#' : 0;
  return e->mb >= 0 && e->mb % 2 ? (char)(l - 'A' + 'a') : l;
}

/* Prints s cut to at most `width` bytes, then a newline. */
static void line(FILE *f, const char *s, int width) {
  int n = (int)strlen(s);
  fprintf(f, "%.*s\n", n > width ? width : n, s);
}

static void legend(const sched_timeline *tl, FILE *f, int width) {
  int has[SCHED_OP_COUNT] = {0};
  for (int i = 0; i < tl->n; i++)
    has[tl->ev[i].op] |= tl->ev[i].end > tl->ev[i].start;
  int tail = has[SCHED_REDUCE_TIED_GRADS] | has[SCHED_REDUCE_GRADS] | has[SCHED_OPTIMIZER_STEP];
  char lng[256], sht[256];
  snprintf(lng, sizeof lng, "F forward%s%s%s  (lower case: odd micro-batch)%s  . idle",
           has[SCHED_BACKWARD] ? "  B backward" : "",
           has[SCHED_BACKWARD_INPUT] ? "  I input grad" : "",
           has[SCHED_BACKWARD_WEIGHT] ? "  W weight grad" : "", tail ? "  # reduce/step" : "");
  snprintf(sht, sizeof sht, "F fwd%s%s%s, odd mb lower case%s, . idle",
           has[SCHED_BACKWARD] ? " B bwd" : "", has[SCHED_BACKWARD_INPUT] ? " I in-grad" : "",
           has[SCHED_BACKWARD_WEIGHT] ? " W wt-grad" : "", tail ? ", # reduce/step" : "");
  line(f, (int)strlen(lng) <= width ? lng : sht, width);
}

void viz_write_ascii(const sched_timeline *tl, FILE *f, int width) {
  if (viz_check(tl)) {
    fprintf(f, "(cannot draw the timeline: %s)\n", core_error_msg());
    return;
  }
  double makespan, bubble, t0 = INFINITY, t1 = -INFINITY;
  viz_summary(tl, &makespan, &bubble);
  for (int i = 0; i < tl->n; i++)
    t0 = fmin(t0, tl->ev[i].start), t1 = fmax(t1, tl->ev[i].end);
  int rw = 2;
  for (int x = tl->p - 1; x >= 100; x /= 10)
    rw++;
  int maxcols = width - (5 + rw + 2) - 1; /* "rank NN |" ... "|" */
  if (maxcols < MIN_COLS) maxcols = MIN_COLS;
  if (width < maxcols + 8 + rw) width = maxcols + 8 + rw;

  int seconds = sched_unit_is_seconds(tl->unit);
  char head[256], scale[64] = "";
  double span = t1 - t0;
  int cols = maxcols;
  if (tl->n > 0 && span > 0) {
    if (span >= 1 && span <= maxcols && fabs(span - round(span)) < 1e-9 && !seconds) {
      cols = (int)round(span);
      snprintf(scale, sizeof scale, "  (1 column = 1 unit)");
    } else {
      double dt = span / cols;
      if (seconds)
        snprintf(scale, sizeof scale, "  (1 column = %.3g ms)", dt * 1e3);
      else
        snprintf(scale, sizeof scale, "  (1 column = %.3g units)", dt);
    }
  }
  char name[sizeof tl->schedule]; /* a trace's own name, its control bytes shown as '?' as the SVG does */
  snprintf(name, sizeof name, "%s", tl->schedule);
  for (char *c = name; *c; c++)
    if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
  snprintf(head, sizeof head, "%s p=%d v=%d m=%d  bubble rate %.1f%%  makespan %.6g %s%s",
           name, tl->p, tl->v, tl->m, 100 * bubble, makespan, seconds ? "s" : "units",
           scale);
  line(f, head, width);
  if (tl->n == 0 || !(span > 0)) {
    line(f, "(no events to draw)", width);
    return;
  }

  /* events grouped by rank (counting sort), so each row is one pass over its own events */
  int *start = core_calloc((size_t)tl->p + 1, sizeof *start),
      *order = core_malloc(sizeof *order * (size_t)tl->n);
  for (int i = 0; i < tl->n; i++)
    start[tl->ev[i].rank + 1]++;
  for (int r = 0; r < tl->p; r++)
    start[r + 1] += start[r];
  int *fill = core_malloc(sizeof *fill * (size_t)tl->p);
  memcpy(fill, start, sizeof *fill * (size_t)tl->p);
  for (int i = 0; i < tl->n; i++)
    order[fill[tl->ev[i].rank]++] = i;

  double dt = span / cols;
  char *row = core_malloc((size_t)cols + 1);
  double *best = core_malloc(sizeof *best * (size_t)cols),
         *busy = core_malloc(sizeof *busy * (size_t)cols);
  viz_row *rows;
  int nrows = viz_rows(tl, &rows);
  for (int ri = 0; ri < nrows; ri++) {
    int r = rows[ri].first;
    if (rows[ri].last > r) { /* ranks without events: one line for the run */
      char text[64];
      snprintf(text, sizeof text, "ranks %d-%d: no events", r, rows[ri].last);
      line(f, text, width);
      continue;
    }
    memset(row, '.', (size_t)cols);
    row[cols] = 0;
    for (int c = 0; c < cols; c++)
      best[c] = busy[c] = 0;
    for (int k = start[r]; k < start[r + 1]; k++) {
      const sched_event *e = &tl->ev[order[k]];
      char ch = cell_char(e);
      if (!ch || !(e->end > e->start)) continue;
      int c0 = (int)floor((e->start - t0) / dt), c1 = (int)ceil((e->end - t0) / dt);
      if (c0 < 0) c0 = 0;
      if (c1 > cols) c1 = cols;
      for (int c = c0; c < c1; c++) {
        double cover = fmin(e->end, t0 + (c + 1) * dt) - fmax(e->start, t0 + c * dt);
        if (cover <= 0) continue;
        busy[c] += cover;
        if (cover > best[c]) best[c] = cover, row[c] = ch;
      }
    }
    for (int c = 0; c < cols; c++)
      if (best[c] > 0 && best[c] < dt - busy[c]) row[c] = '.'; /* idle covers more than any op */
    fprintf(f, "rank %*d |%s|\n", rw, r, row);
  }
  legend(tl, f, width);
  free(start), free(order), free(fill), free(row), free(best), free(busy), free(rows);
}
