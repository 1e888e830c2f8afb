/* viz/svg.c: an SVG Gantt chart of a timeline, made to be put on a slide.
 *
 * Layout, top to bottom: title and subtitle; one row per rank (rank 0 on top; a run of ranks
 * without any event shares one row, viz_rows) on a light background, so idle time (the bubble)
 * shows as empty background; thin strips for loads and
 * transfers (and ZeRO-3 parameter gathers) in the gap under each row; the time axis with round ticks and faint grid lines;
 * the legend. Right of each row: the share of the step (first start to last end) that the rank
 * is not computing, what the eye sees as empty row; the title gives the bubble rate as
 * sched_timeline_stats defines it, the subtitle the idle fraction (the mean over the ranks). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "viz/viz.h"

enum { WIDTH = 1200, LEFT = 84, RIGHT = 92, TOP = 82 };
static const char *ROW_BG = "#eceff4";

typedef struct {
  const sched_timeline *tl;
  viz_row *rows; /* viz_rows: the ranks with events, runs of ranks without */
  int nrows;
  double t0, t1, sx; /* time range drawn and pixels per time unit */
  int widened;        /* the events span no time: t1 is t0 + 1 to draw them */
  double row_h, gap; /* row height and the gap under it */
  double scale;      /* axis label = (t - t0) * scale */
  const char *axis_unit;
} layout;

static unsigned base_colour(sched_op op) {
  switch (op) {
  case SCHED_FORWARD: return 0x4e79a7;
  case SCHED_BACKWARD: return 0x59a14f;
  case SCHED_BACKWARD_INPUT: return 0xf28e2b;
  case SCHED_BACKWARD_WEIGHT: return 0xb07aa1;
  case SCHED_LOAD_MICROBATCH: return 0xa0a0a0;
  case SCHED_SEND_ACT:
  case SCHED_RECV_ACT: return 0x7fa7d0;
  case SCHED_SEND_GRAD:
  case SCHED_RECV_GRAD: return 0x8fc47f;
  case SCHED_REDUCE_TIED_GRADS: return 0xc4c4c4;
  case SCHED_REDUCE_GRADS: return 0x9d9d9d;
  case SCHED_GATHER_PARAMS:
  case SCHED_RELEASE_PARAMS: return 0xe15759;
  case SCHED_OFFLOAD: return 0xedc948;
  case SCHED_RELOAD: return 0x76b7b2;
  case SCHED_VALIDATE: return 0xff9da7;
  default: return 0x707070; /* OPTIMIZER_STEP */
  }
}

/* Chunk c of v: chunk 0 in the base colour, later chunks mixed towards white (up to half). */
static unsigned shade(unsigned rgb, int chunk, int v) {
  if (v <= 1 || chunk <= 0) return rgb;
  double t = 0.5 * (chunk < v ? chunk : v - 1) / (v - 1);
  unsigned out = 0;
  for (int s = 16; s >= 0; s -= 8) {
    double c = (rgb >> s) & 0xff;
    out |= (unsigned)lround(c + (255 - c) * t) << s;
  }
  return out;
}

static const char *text_colour(unsigned rgb) {
  double l = 0.2126 * ((rgb >> 16) & 0xff) + 0.7152 * ((rgb >> 8) & 0xff) + 0.0722 * (rgb & 0xff);
  return l > 165 ? "#1b1b1b" : "#ffffff";
}

static int is_tail(sched_op op) {
  return op == SCHED_REDUCE_TIED_GRADS || op == SCHED_REDUCE_GRADS || op == SCHED_OPTIMIZER_STEP;
}

/* Text for XML: markup characters escaped, control characters and bytes that are not UTF-8
 * (a name cut short, say) written as '?', so the file stays well-formed whatever comes in. */
static void xml_text(FILE *f, const char *s) {
  for (const unsigned char *c = (const unsigned char *)s; *c;) {
    int n = 1;
    if (*c == '<')
      fputs("&lt;", f);
    else if (*c == '>')
      fputs("&gt;", f);
    else if (*c == '&')
      fputs("&amp;", f);
    else if (*c == '"')
      fputs("&quot;", f);
    else if (*c == '\'')
      fputs("&apos;", f);
    else if (*c < 0x20 || *c == 0x7f)
      fputc('?', f);
    else if (*c < 0x80)
      fputc(*c, f);
    else {
      int want = *c >= 0xc2 && *c <= 0xdf   ? 2
                 : *c >= 0xe0 && *c <= 0xef ? 3
                 : *c >= 0xf0 && *c <= 0xf4 ? 4
                                            : 0;
      int ok = want > 0;
      for (int i = 1; ok && i < want; i++)
        ok = (c[i] & 0xc0) == 0x80;
      if (ok)
        fwrite(c, 1, (size_t)want, f), n = want;
      else
        fputc('?', f);
    }
    c += n;
  }
}

static double row_y(const layout *L, int k) { return TOP + k * (L->row_h + L->gap); }

/* The row of a rank that has events (its own: rows are in rank order). */
static int row_of(const layout *L, int rank) {
  int lo = 0, hi = L->nrows - 1;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (L->rows[mid].last < rank) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
static double x_of(const layout *L, double t) { return LEFT + (t - L->t0) * L->sx; }

/* A round step (1, 2 or 5 times a power of ten) for about eight ticks at least 56 px apart. */
static double tick_step(const layout *L) {
  double span = (L->t1 - L->t0) * L->scale, px_per = L->sx / L->scale;
  double raw = span / 8, p = pow(10, floor(log10(raw > 0 ? raw : 1)));
  static const double nice[] = {1, 2, 5, 10, 20, 50, 100};
  for (int i = 0; i < 7; i++)
    if (nice[i] * p >= raw && nice[i] * p * px_per >= 56) return nice[i] * p;
  return 100 * p;
}

static void axis(FILE *f, const layout *L, double axis_y) {
  double rows_bottom = axis_y - 6, step = tick_step(L), span = (L->t1 - L->t0) * L->scale;
  int decimals = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
  fprintf(f, "<g class=\"axis\">\n");
  for (long i = 0;; i++) {
    double v = i * step;
    if (!(v <= span * (1 + 1e-9))) break; /* and never loop on a nan */
    double x = LEFT + v / L->scale * L->sx;
    fprintf(f,
            "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#d0d5dd\" "
            "stroke-width=\"1\"/>"
            "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#555\"/>"
            "<text x=\"%.2f\" y=\"%.2f\" class=\"tick\">%.*f</text>\n",
            x, (double)TOP - 4, x, rows_bottom, x, axis_y, x, axis_y + 5, x, axis_y + 19, decimals,
            v);
  }
  fprintf(f, "<line x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\" stroke=\"#555\"/>\n", LEFT, axis_y,
          WIDTH - RIGHT, axis_y);
  fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" class=\"axt\">time (", LEFT + (WIDTH - LEFT - RIGHT) / 2.0, axis_y + 38);
  xml_text(f, L->axis_unit); /* a trace's own unit, as the subtitle writes it */
  fputs(")</text>\n</g>\n", f);
}

/* Steps back to back (a timeline with several OPTIMIZER_STEPs per rank): where each step ends, the
 * latest end of the step's k-th OPTIMIZER_STEP over the ranks, a dashed line across the rows
 * labelled with the step. Nothing for one step. */
static int by_rank_end(const void *a, const void *b) {
  const sched_event *x = *(const sched_event *const *)a, *y = *(const sched_event *const *)b;
  if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
  return (x->end > y->end) - (x->end < y->end);
}

static void step_bounds(FILE *f, const layout *L, double rows_bottom) {
  const sched_timeline *tl = L->tl;
  int n = 0, steps = 0;
  for (int i = 0; i < tl->n; i++) n += tl->ev[i].op == SCHED_OPTIMIZER_STEP;
  const sched_event **opt = core_malloc(sizeof *opt * (size_t)(n ? n : 1));
  n = 0;
  for (int i = 0; i < tl->n; i++)
    if (tl->ev[i].op == SCHED_OPTIMIZER_STEP) opt[n++] = &tl->ev[i];
  qsort(opt, (size_t)n, sizeof *opt, by_rank_end); /* each rank's steps in time order */
  double *end = core_malloc(sizeof(double) * (size_t)(n ? n : 1));
  for (int i = 0, k = 0; i < n; i++, k++) { /* k: the step of opt[i] on its rank */
    if (i > 0 && opt[i]->rank != opt[i - 1]->rank) k = 0;
    if (k >= steps) end[steps++] = -INFINITY;
    if (opt[i]->end > end[k]) end[k] = opt[i]->end;
  }
  if (steps >= 2) {
    fputs("<g class=\"steps\">\n", f);
    for (int k = 0; k < steps; k++) {
      double x = x_of(L, end[k]);
      fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#c0392b\" stroke-width=\"1\" "
              "stroke-dasharray=\"4 3\"><title>step %d ends at %.6g</title></line>"
              "<text x=\"%.2f\" y=\"%.2f\" class=\"tick\" fill=\"#c0392b\">step %d</text>\n",
              x, (double)TOP - 4, x, rows_bottom, k + 1, end[k] - L->t0, x - 22, (double)TOP - 8, k + 1);
    }
    fputs("</g>\n", f);
  }
  free(opt), free(end);
}

/* The legend, wrapped to the width; returns its number of lines (f NULL: only counts). */
static int legend(FILE *f, const layout *L, double y0) {
  const sched_timeline *tl = L->tl;
  int has[SCHED_OP_COUNT] = {0}, tail = 0;
  for (int i = 0; i < tl->n; i++) /* zero-length loads, transfers and tail ops are not drawn */
    has[tl->ev[i].op] |=
        sched_op_is_compute((sched_op)tl->ev[i].op) || tl->ev[i].end > tl->ev[i].start;
  for (int o = 0; o < SCHED_OP_COUNT; o++)
    tail |= has[o] && is_tail((sched_op)o);
  struct {
    int show;
    unsigned colour;
    const char *label;
  } items[] = {
      {has[SCHED_FORWARD], base_colour(SCHED_FORWARD), "F  forward"},
      {has[SCHED_BACKWARD], base_colour(SCHED_BACKWARD), "B  backward"},
      {has[SCHED_BACKWARD_INPUT], base_colour(SCHED_BACKWARD_INPUT), "I  backward, input grad"},
      {has[SCHED_BACKWARD_WEIGHT], base_colour(SCHED_BACKWARD_WEIGHT), "W  backward, weight grad"},
      {tail, base_colour(SCHED_REDUCE_GRADS), "grad reduction / optimizer step"},
      {has[SCHED_LOAD_MICROBATCH], base_colour(SCHED_LOAD_MICROBATCH), "load (strip)"},
      {has[SCHED_SEND_ACT] | has[SCHED_RECV_ACT], base_colour(SCHED_SEND_ACT),
       "activation send/recv (strip)"},
      {has[SCHED_SEND_GRAD] | has[SCHED_RECV_GRAD], base_colour(SCHED_SEND_GRAD),
       "gradient send/recv (strip)"},
      {has[SCHED_GATHER_PARAMS], base_colour(SCHED_GATHER_PARAMS), "parameter gather (strip)"},
      {has[SCHED_OFFLOAD], base_colour(SCHED_OFFLOAD), "activations to host (copy strip)"},
      {has[SCHED_RELOAD], base_colour(SCHED_RELOAD), "activations back (copy strip)"},
      {has[SCHED_VALIDATE], base_colour(SCHED_VALIDATE), "waits for the last step's norm (strip)"},
      {1, 0, "idle (bubble)"},
  };
  int lines = 1;
  double x = LEFT, y = y0;
  for (size_t i = 0; i < sizeof items / sizeof items[0]; i++) {
    if (!items[i].show) continue;
    double w = 22 + 6.8 * strlen(items[i].label) + 20;
    if (x + w > WIDTH - 10 && x > LEFT) x = LEFT, y += 22, lines++;
    if (f) {
      if (items[i].colour == 0) /* idle: the row background */
        fprintf(f,
                "<rect class=\"key\" x=\"%.1f\" y=\"%.1f\" width=\"16\" height=\"14\" fill=\"%s\" "
                "stroke=\"#b8bec8\"/>",
                x, y, ROW_BG);
      else
        fprintf(
            f,
            "<rect class=\"key\" x=\"%.1f\" y=\"%.1f\" width=\"16\" height=\"14\" fill=\"#%06x\"/>",
            x, y, items[i].colour);
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"leg\">%s</text>\n", x + 22, y + 11.5,
              items[i].label);
    }
    x += w;
  }
  if (tl->v > 1) { /* the chunk shades, on the forward colour */
    int shown = tl->v < 4 ? tl->v : 4;
    double w = 16.0 * shown + 6 + 6.8 * 24 + 20;
    if (x + w > WIDTH - 10 && x > LEFT) x = LEFT, y += 22, lines++;
    if (f) {
      for (int c = 0; c < shown; c++) {
        int chunk = shown == tl->v ? c : (int)lround((double)c * (tl->v - 1) / (shown - 1));
        fprintf(
            f,
            "<rect class=\"key\" x=\"%.1f\" y=\"%.1f\" width=\"16\" height=\"14\" fill=\"#%06x\"/>",
            x + 16 * c, y, shade(base_colour(SCHED_FORWARD), chunk, tl->v));
      }
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"leg\">chunk 0 to %d (lighter)</text>\n",
              x + 16 * shown + 6, y + 11.5, tl->v - 1);
    }
  }
  return lines;
}

static void event_box(FILE *f, const layout *L, const sched_event *e) {
  const sched_timeline *tl = L->tl;
  sched_op op = (sched_op)e->op;
  double x = x_of(L, e->start), w = (e->end - e->start) * L->sx, y = row_y(L, row_of(L, e->rank));
  char name[96];
  viz_event_name(tl, e, name, sizeof name);
  if (!sched_op_is_compute(op) && !(e->end > e->start)) return; /* nothing to see */
  if (!sched_op_is_compute(op) && !is_tail(op)) { /* loads and transfers: a strip under the row */
    double h = L->gap > 6 ? 3.0 : L->gap / 2;
    int copy = op == SCHED_OFFLOAD || op == SCHED_RELOAD; /* the copy streams: a second strip below */
    fprintf(f,
            "<rect class=\"%s\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" "
            "fill=\"#%06x\"><title>",
            copy ? "copy" : "xfer", x, y + L->row_h + 1 + (copy ? h + 0.5 : 0), w, h, base_colour(op));
  } else {
    unsigned rgb =
        sched_op_is_compute(op) ? shade(base_colour(op), e->chunk, tl->v) : base_colour(op);
    if (w < 0.5) w = 0.5;
    if (sched_op_is_compute(op))
      fprintf(f, "<rect class=\"op %c\"", sched_op_letter(op));
    else
      fputs("<rect class=\"tail\"", f);
    fprintf(f, " x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"#%06x\"%s><title>", x,
            y, w, L->row_h, rgb,
            w >= 12  ? " stroke=\"#fff\" stroke-width=\"1\""
            : w >= 4 ? " stroke=\"#fff\" stroke-width=\"0.5\""
                     : "");
  }
  xml_text(f, name);
  fprintf(f, " on rank %d: %.6g to %.6g</title></rect>", e->rank, (e->start - L->t0),
          (e->end - L->t0));
  /* the micro-batch number (compute) or a short word (tail), when it fits */
  double fs = L->row_h >= 24 ? 12 : L->row_h * 0.5;
  if (sched_op_is_compute(op) && e->mb >= 0 && fs >= 7) {
    char num[16];
    int len = snprintf(num, sizeof num, "%d", e->mb);
    if (w < len * fs * 0.62 + 3) fs = fs * 0.8;
    if (w >= len * fs * 0.62 + 3 && fs >= 7)
      fprintf(f,
              "<text x=\"%.2f\" y=\"%.2f\" class=\"mb\" font-size=\"%.1f\" fill=\"%s\">%s</text>",
              x + w / 2, y + L->row_h / 2 + fs * 0.36, fs,
              text_colour(shade(base_colour(op), e->chunk, tl->v)), num);
  } else if (is_tail(op) && fs >= 7) {
    const char *word = op == SCHED_OPTIMIZER_STEP ? "step"
                       : op == SCHED_REDUCE_GRADS ? "reduce"
                                                  : "tied";
    if (w >= strlen(word) * fs * 0.6 + 4)
      fprintf(f,
              "<text x=\"%.2f\" y=\"%.2f\" class=\"mb\" font-size=\"%.1f\" fill=\"%s\">%s</text>",
              x + w / 2, y + L->row_h / 2 + fs * 0.36, fs, text_colour(base_colour(op)), word);
  }
  fputc('\n', f);
}

static void make_layout(const sched_timeline *tl, layout *L) {
  *L = (layout){.tl = tl, .t0 = INFINITY, .t1 = -INFINITY};
  L->nrows = viz_rows(tl, &L->rows);
  for (int i = 0; i < tl->n; i++)
    L->t0 = fmin(L->t0, tl->ev[i].start), L->t1 = fmax(L->t1, tl->ev[i].end);
  if (tl->n == 0) L->t0 = 0, L->t1 = 1;
  if ((L->widened = !(L->t1 > L->t0))) L->t1 = fmax(L->t0 + 1, nextafter(L->t0, INFINITY)); /* t0 + 1 may be t0 */
  L->sx = (WIDTH - LEFT - RIGHT) / (L->t1 - L->t0);
  L->row_h = fmin(30, fmax(8, 480.0 / L->nrows));
  L->gap = fmax(3, round(L->row_h * 0.36));
  double span = L->t1 - L->t0;
  L->scale = 1, L->axis_unit = "cost units";
  if (sched_unit_is_seconds(tl->unit)) {
    if (span < 1e-3)
      L->scale = 1e6, L->axis_unit = "\xc2\xb5s";
    else if (span < 1)
      L->scale = 1e3, L->axis_unit = "ms";
    else
      L->axis_unit = "s";
  } else if (strcmp(tl->unit, "unit") != 0) {
    L->axis_unit = tl->unit;
  }
}

int viz_fwrite_svg(const sched_timeline *tl, FILE *f) {
  int rc = viz_check(tl);
  if (rc) return rc;
  layout L;
  make_layout(tl, &L);
  double makespan, bubble;
  viz_summary(tl, &makespan, &bubble);
  viz_rank_stat *st = core_calloc((size_t)tl->p, sizeof *st);
  viz_stats(tl, st);
  /* each row's idle share is what the eye sees: the part of the whole step (t0 to t1) that the
   * rank spends outside compute; their mean is the idle fraction of ranks x makespan */
  /* (none when every event has no length: the axis is widened to draw them, the table says 0) */
  double drawn = tl->n && !L.widened ? L.t1 - L.t0 : 0, idle_sum = 0;
  for (int r = 0; r < tl->p; r++)
    idle_sum += drawn > 0 ? 1 - st[r].busy / drawn : 0;
  double axis_y = row_y(&L, L.nrows) - L.gap + 8, legend_y = axis_y + 54;
  int height = (int)ceil(legend_y + 22 * legend(NULL, &L, legend_y) + 8);
  const char *label_unit = sched_unit_is_seconds(tl->unit) ? "s"
                           : strcmp(tl->unit, "unit") == 0 ? "cost units"
                                                           : tl->unit;

  fprintf(
      f,
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
      "font-family=\"Helvetica, Arial, 'DejaVu Sans', sans-serif\">\n",
      WIDTH, height, WIDTH, height);
  fputs("<style>.title{font-size:21px;font-weight:bold;fill:#1b1b1b}.sub{font-size:13px;fill:#555}"
        ".rank{font-size:13px;fill:#333;text-anchor:end}.idle{font-size:12px;fill:#666}"
        ".mb{text-anchor:middle}.tick{font-size:11px;fill:#444;text-anchor:middle}"
        ".axt{font-size:12px;fill:#444;text-anchor:middle}.leg{font-size:12px;fill:#333}</style>\n",
        f);
  fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", WIDTH, height);
  fprintf(f, "<text x=\"%d\" y=\"34\" class=\"title\">", LEFT);
  xml_text(f, tl->schedule[0] ? tl->schedule : "timeline");
  fprintf(f, " \xc2\xb7 p=%d, v=%d, m=%d \xc2\xb7 bubble rate %.1f%%</text>\n", tl->p, tl->v, tl->m,
          100 * bubble);
  fprintf(f, "<text x=\"%d\" y=\"58\" class=\"sub\">makespan %.6g ", LEFT, makespan);
  xml_text(f, label_unit);
  fprintf(f,
          ", %s \xc2\xb7 idle fraction %.1f%% \xc2\xb7 %d events \xc2\xb7 rank 0 on top%s</text>\n",
          sched_unit_is_measured(tl->unit) ? "measured" : "simulated", 100 * idle_sum / tl->p, tl->n,
          tl->n ? "" : " \xc2\xb7 no events");

  for (int k = 0; k < L.nrows; k++) { /* row backgrounds (the bubble shows through), names, idle */
    int r = L.rows[k].first, many = L.rows[k].last > r;
    double y = row_y(&L, k), fs = fmin(13, L.row_h * 0.75);
    char name[48];
    if (many) snprintf(name, sizeof name, "ranks %d\xe2\x80\x93%d", r, L.rows[k].last); /* en dash */
    else snprintf(name, sizeof name, "rank %d", r);
    double name_fs = fmin(fs, (LEFT - 14) / (0.6 * (double)strlen(name))); /* inside the margin */
    fprintf(f, "<rect class=\"row\" x=\"%d\" y=\"%.2f\" width=\"%d\" height=\"%.2f\" fill=\"%s\"",
            LEFT, y, WIDTH - LEFT - RIGHT, L.row_h, ROW_BG);
    if (many) fprintf(f, "><title>ranks %d to %d: no events</title></rect>", r, L.rows[k].last);
    else fputs("/>", f);
    fprintf(f, "<text x=\"%d\" y=\"%.2f\" class=\"rank\" font-size=\"%.1f\">%s</text>",
            LEFT - 10, y + L.row_h / 2 + fs * 0.36, name_fs, name);
    if (many)
      fprintf(f, "<text x=\"%d\" y=\"%.2f\" class=\"idle\" font-size=\"%.1f\">no events</text>\n",
              WIDTH - RIGHT + 8, y + L.row_h / 2 + fs * 0.36, fmin(12, fs));
    else
      fprintf(f, "<text x=\"%d\" y=\"%.2f\" class=\"idle\" font-size=\"%.1f\">idle %.1f%%</text>\n",
              WIDTH - RIGHT + 8, y + L.row_h / 2 + fs * 0.36, fmin(12, fs),
              drawn > 0 ? 100 * (1 - st[r].busy / drawn) : 0.0);
  }
  axis(f, &L, axis_y);
  /* tail first, then compute, then the strips, so small things are never hidden */
  for (int pass = 0; pass < 3; pass++)
    for (int i = 0; i < tl->n; i++) {
      sched_op op = (sched_op)tl->ev[i].op;
      int kind = is_tail(op) ? 0 : sched_op_is_compute(op) ? 1 : 2;
      if (kind == pass) event_box(f, &L, &tl->ev[i]);
    }
  step_bounds(f, &L, axis_y - 6);
  legend(f, &L, legend_y);
  fputs("</svg>\n", f);
  free(st);
  free(L.rows);
  return CORE_OK;
}

int viz_write_svg(const sched_timeline *tl, const char *path) { return viz_write_file(tl, path, viz_fwrite_svg); }
