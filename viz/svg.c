/* viz/svg.c: an SVG Gantt chart of a timeline, meant for a slide: ranks as rows, time to the
 * right, one colour per op kind (later chunks lighter), micro-batch numbers in the boxes. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "viz/viz.h"

enum { LEFT = 80, RIGHT = 30, TOP = 64, ROW = 30, GAP = 8, WIDTH = 1200 };

static const char *colour(sched_op op) {
  switch (op) {
  case SCHED_FORWARD: return "#4c78a8";
  case SCHED_BACKWARD: return "#54a24b";
  case SCHED_BACKWARD_INPUT: return "#72b7b2";
  case SCHED_BACKWARD_WEIGHT: return "#b279a2";
  default: return "#9d9d9d";
  }
}

/* A round tick step (1, 2 or 5 times a power of ten) giving about eight ticks. */
static double tick_step(double span) {
  double raw = span / 8, p = pow(10, floor(log10(raw > 0 ? raw : 1)));
  double m = raw / p;
  return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

static void xml_text(FILE *f, const char *s) {
  for (; *s; s++) {
    if (*s == '<') fputs("&lt;", f);
    else if (*s == '>') fputs("&gt;", f);
    else if (*s == '&') fputs("&amp;", f);
    else if (*s == '"') fputs("&quot;", f);
    else fputc(*s, f);
  }
}

static void legend(FILE *f, int y, int split) {
  struct { sched_op op; const char *label; } items[] = {
      {SCHED_FORWARD, "forward (F)"}, {SCHED_BACKWARD, "backward (B)"},
      {SCHED_BACKWARD_INPUT, "input grad (I)"}, {SCHED_BACKWARD_WEIGHT, "weight grad (W)"},
      {SCHED_REDUCE_GRADS, "reduce / step"}};
  int x = LEFT;
  for (size_t i = 0; i < sizeof items / sizeof items[0]; i++) {
    if (split && items[i].op == SCHED_BACKWARD) continue;
    if (!split && (items[i].op == SCHED_BACKWARD_INPUT || items[i].op == SCHED_BACKWARD_WEIGHT)) continue;
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"14\" fill=\"%s\"/>", x, y, colour(items[i].op));
    fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"l\">%s</text>\n", x + 20, y + 12, items[i].label);
    x += 170;
  }
  fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"l\">white: idle (bubble)</text>\n", x, y + 12);
}

int viz_write_svg(const sched_timeline *tl, const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) return core_error_set(CORE_ERUNTIME, "cannot write %s: %s", path, strerror(errno));
  double t0 = INFINITY, t1 = -INFINITY;
  int split = 0;
  for (int i = 0; i < tl->n; i++) {
    t0 = fmin(t0, tl->ev[i].start), t1 = fmax(t1, tl->ev[i].end);
    split |= tl->ev[i].op == SCHED_BACKWARD_INPUT;
  }
  if (!(t1 > t0)) t0 = 0, t1 = 1;
  double plot_w = WIDTH - LEFT - RIGHT, sx = plot_w / (t1 - t0);
  int height = TOP + tl->p * (ROW + GAP) + 80;
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
             "font-family=\"Helvetica, Arial, sans-serif\">\n", WIDTH, height, WIDTH, height);
  fprintf(f, "<style>.t{font-size:20px;font-weight:bold}.l{font-size:13px;fill:#333}"
             ".n{font-size:11px;fill:white;text-anchor:middle}.a{font-size:11px;fill:#555;text-anchor:middle}</style>\n");
  fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n<text x=\"%d\" y=\"32\" class=\"t\">", LEFT);
  xml_text(f, tl->schedule);
  fprintf(f, "  p=%d v=%d m=%d  bubble rate %.1f%%  makespan %.4g %s</text>\n", tl->p, tl->v, tl->m,
          100 * tl->bubble_rate, tl->makespan, strcmp(tl->unit, "s") == 0 ? "s" : "units");
  for (int r = 0; r < tl->p; r++) { /* row labels and light row backgrounds */
    int y = TOP + r * (ROW + GAP);
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"#f4f4f4\"/>", LEFT, y, plot_w, ROW);
    fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"l\" text-anchor=\"end\">rank %d</text>\n", LEFT - 10, y + ROW / 2 + 5, r);
  }
  for (int i = 0; i < tl->n; i++) {
    const sched_event *e = &tl->ev[i];
    if (e->op >= SCHED_SEND_ACT && e->op <= SCHED_RECV_GRAD) continue; /* transfers: not drawn */
    if (e->rank < 0 || e->rank >= tl->p || !(e->end > e->start)) continue;
    double x = LEFT + (e->start - t0) * sx, w = (e->end - e->start) * sx;
    int y = TOP + e->rank * (ROW + GAP);
    double op = e->chunk > 0 && sched_op_is_compute((sched_op)e->op) ? 1.0 - 0.35 * e->chunk / (tl->v > 1 ? tl->v - 1 : 1) : 1.0;
    fprintf(f, "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\" fill-opacity=\"%.2f\" "
               "stroke=\"white\" stroke-width=\"0.5\"><title>rank %d %s mb %d chunk %d: %.6g - %.6g</title></rect>",
            x, y, w, ROW, colour((sched_op)e->op), op, e->rank, sched_op_name((sched_op)e->op), e->mb, e->chunk,
            e->start, e->end);
    if (e->mb >= 0 && w >= 14 && sched_op_is_compute((sched_op)e->op))
      fprintf(f, "<text x=\"%.2f\" y=\"%d\" class=\"n\">%d</text>", x + w / 2, y + ROW / 2 + 4, e->mb);
    fputc('\n', f);
  }
  int axis_y = TOP + tl->p * (ROW + GAP) + 4;
  fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#555\"/>\n", LEFT, axis_y, LEFT + plot_w, axis_y);
  double step = tick_step(t1 - t0);
  for (double t = ceil(t0 / step) * step; t <= t1 + 1e-9 * step; t += step) {
    double x = LEFT + (t - t0) * sx;
    fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#555\"/><text x=\"%.1f\" y=\"%d\" class=\"a\">%.4g</text>\n",
            x, axis_y, x, axis_y + 5, x, axis_y + 18, t);
  }
  fprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"a\">time (%s)</text>\n", LEFT + plot_w / 2, axis_y + 34,
          strcmp(tl->unit, "s") == 0 ? "seconds" : "cost units");
  legend(f, axis_y + 44, split);
  fprintf(f, "</svg>\n");
  if (ferror(f) | (fclose(f) != 0)) return core_error_set(CORE_ERUNTIME, "writing %s failed", path);
  return CORE_OK;
}
