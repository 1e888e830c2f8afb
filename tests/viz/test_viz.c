/* viz: Chrome trace write -> read round trip, readable errors for files that are not brigade
 * traces, the SVG Gantt chart and the terminal chart, on timelines built by hand. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/json.h"
#include "schedule/events.h"
#include "schedule/schedule.h"
#include "viz/viz.h"

/* ---- timelines by hand ---- */

static void add(sched_timeline *tl, int rank, sched_op op, int mb, int chunk, int stage, int peer,
                double t0, double t1) {
  sched_timeline_add(tl, (sched_event){.rank = rank,
                                       .op = (uint8_t)op,
                                       .mb = mb,
                                       .chunk = chunk,
                                       .stage = stage,
                                       .peer = peer,
                                       .start = t0,
                                       .end = t1});
}

/* 1F1B on p ranks and m micro-batches with forward cost F, backward B, transfer latency comm
 * and a tail (REDUCE_GRADS then OPTIMIZER_STEP) of `tail` each: rank r runs min(p-r-1, m)
 * warm-up forwards, then alternates one forward and one backward, then drains. Times come from
 * a list schedule over the dependencies; transfers are drawn as events of length comm. */
static void make_1f1b(sched_timeline *tl, int p, int m, double F, double B, double comm,
                      double tail) {
  sched_timeline_init(tl, "1f1b", "unit", p, 1, m);
  int(*order)[64] = calloc((size_t)p, sizeof *order); /* encoded op: mb for F, m + mb for B */
  double(*fend)[32] = calloc((size_t)p, sizeof *fend),
  (*bend)[32] = calloc((size_t)p, sizeof *bend);
  int *len = calloc((size_t)p, sizeof *len), *next = calloc((size_t)p, sizeof *next);
  double *free_at = calloc((size_t)p, sizeof *free_at);
  cr_assert(m <= 32);
  for (int r = 0; r < p; r++) {
    int w = p - r - 1 < m ? p - r - 1 : m, f = 0, b = 0;
    while (f < w)
      order[r][len[r]++] = f++;
    while (f < m)
      order[r][len[r]++] = f++, order[r][len[r]++] = m + b++;
    while (b < m)
      order[r][len[r]++] = m + b++;
    for (int i = 0; i < m; i++)
      fend[r][i] = bend[r][i] = -1;
  }
  for (int done = 0; done < 2 * m * p;)
    for (int r = 0; r < p; r++) {
      if (next[r] == len[r]) continue;
      int code = order[r][next[r]], mb = code % m, bwd = code >= m;
      double ready;
      if (!bwd)
        ready = r == 0 ? 0 : fend[r - 1][mb] < 0 ? -1 : fend[r - 1][mb] + comm;
      else
        ready = r == p - 1 ? fend[r][mb] : bend[r + 1][mb] < 0 ? -1 : bend[r + 1][mb] + comm;
      if (ready < 0) continue;
      double t0 = fmax(ready, free_at[r]), t1 = t0 + (bwd ? B : F);
      add(tl, r, bwd ? SCHED_BACKWARD : SCHED_FORWARD, mb, 0, r, -1, t0, t1);
      if (!bwd && r + 1 < p) {
        add(tl, r, SCHED_SEND_ACT, mb, 0, r, r + 1, t1, t1 + comm);
        add(tl, r + 1, SCHED_RECV_ACT, mb, 0, r + 1, r, t1, t1 + comm);
      }
      if (bwd && r > 0) {
        add(tl, r, SCHED_SEND_GRAD, mb, 0, r, r - 1, t1, t1 + comm);
        add(tl, r - 1, SCHED_RECV_GRAD, mb, 0, r - 1, r, t1, t1 + comm);
      }
      (bwd ? bend : fend)[r][mb] = t1;
      free_at[r] = t1, next[r]++, done++;
    }
  if (tail > 0)
    for (int r = 0; r < p; r++) {
      add(tl, r, SCHED_REDUCE_GRADS, -1, -1, -1, -1, free_at[r], free_at[r] + tail);
      add(tl, r, SCHED_OPTIMIZER_STEP, -1, -1, -1, -1, free_at[r] + tail, free_at[r] + 2 * tail);
    }
  sched_timeline_stats(tl);
  free(order), free(fend), free(bend), free(len), free(next), free(free_at);
}

/* Two ranks, two chunks, split backward (I and W), measured in seconds at an odd origin. */
static void make_v2_seconds(sched_timeline *tl) {
  sched_timeline_init(tl, "zb-v", "s", 2, 2, 2);
  double t = 1234.5678901234; /* a clock's epoch, not zero */
  const struct {
    int rank;
    sched_op op;
    int mb, chunk;
    double d;
  } seq[] = {{0, SCHED_FORWARD, 0, 0, 0.0011},         {1, SCHED_FORWARD, 0, 0, 0.0012},
             {1, SCHED_FORWARD, 0, 1, 0.0013},         {0, SCHED_FORWARD, 0, 1, 0.0010},
             {0, SCHED_BACKWARD_INPUT, 0, 1, 0.0014},  {1, SCHED_BACKWARD_INPUT, 0, 1, 0.0015},
             {1, SCHED_BACKWARD_WEIGHT, 0, 1, 0.0007}, {1, SCHED_FORWARD, 1, 0, 0.001},
             {0, SCHED_BACKWARD_WEIGHT, 0, 1, 0.0009}, {0, SCHED_FORWARD, 1, 0, 0.0011}};
  double clock[2] = {t, t};
  for (size_t i = 0; i < sizeof seq / sizeof seq[0]; i++) {
    int r = seq[i].rank, stage = seq[i].chunk == 0 ? r : 3 - r;
    add(tl, r, seq[i].op, seq[i].mb, seq[i].chunk, stage, -1, clock[r], clock[r] + seq[i].d);
    clock[r] += seq[i].d + 0.0001 * (double)i;
  }
  add(tl, 0, SCHED_SEND_ACT, 1, 0, 0, 1, clock[0], clock[0] + 2.5e-5);
  add(tl, 1, SCHED_RECV_ACT, 1, 0, 1, 0, clock[0] - 1e-4, clock[0] + 2.5e-5);
  add(tl, 0, SCHED_REDUCE_TIED_GRADS, -1, -1, -1, 1, clock[0] + 1e-4, clock[0] + 3e-4);
  add(tl, 0, SCHED_LOAD_MICROBATCH, 1, 0, 0, -1, t, t);
  sched_timeline_stats(tl);
}

/* ---- small helpers ---- */

static char *tmp_path(const char *stem) {
  char *p = malloc(64);
  snprintf(p, 64, "/tmp/brigade_%s_XXXXXX", stem);
  close(mkstemp(p));
  return p;
}

static char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  cr_assert(f, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  rewind(f);
  char *b = malloc((size_t)len + 1);
  cr_assert_eq(fread(b, 1, (size_t)len, f), (size_t)len);
  b[len] = 0;
  fclose(f);
  if (n) *n = (size_t)len;
  return b;
}

static void spit(const char *path, const char *text, size_t n) {
  FILE *f = fopen(path, "wb");
  cr_assert(f);
  cr_assert_eq(fwrite(text, 1, n, f), n);
  fclose(f);
}

static int count(const char *hay, const char *needle) {
  int k = 0;
  for (const char *s = hay; (s = strstr(s, needle)); s += strlen(needle))
    k++;
  return k;
}

static int compute_events(const sched_timeline *tl, sched_op only) {
  int k = 0;
  for (int i = 0; i < tl->n; i++)
    k += sched_op_is_compute((sched_op)tl->ev[i].op) &&
         (only == SCHED_OP_COUNT || tl->ev[i].op == only);
  return k;
}

static void assert_same_events(const sched_timeline *a, const sched_timeline *b, double rel) {
  cr_assert_str_eq(a->schedule, b->schedule);
  cr_assert_str_eq(a->unit, b->unit);
  cr_assert(a->p == b->p && a->v == b->v && a->m == b->m, "shape %d/%d/%d vs %d/%d/%d", a->p, a->v,
            a->m, b->p, b->v, b->m);
  cr_assert_eq(a->makespan, b->makespan);
  cr_assert_eq(a->bubble_rate, b->bubble_rate);
  cr_assert_eq(a->n, b->n);
  for (int i = 0; i < a->n; i++) {
    const sched_event *x = &a->ev[i], *y = &b->ev[i];
    cr_assert(x->rank == y->rank && x->op == y->op && x->mb == y->mb && x->chunk == y->chunk &&
                  x->stage == y->stage && x->peer == y->peer,
              "event %d differs", i);
    if (rel == 0) {
      cr_assert(memcmp(&x->start, &y->start, sizeof(double)) == 0 &&
                    memcmp(&x->end, &y->end, sizeof(double)) == 0,
                "event %d: %.17g..%.17g came back as %.17g..%.17g", i, x->start, x->end, y->start,
                y->end);
    } else {
      cr_assert(fabs(x->start - y->start) <= rel * fabs(x->start) &&
                    fabs(x->end - y->end) <= rel * fabs(x->end),
                "event %d: %.17g..%.17g came back as %.17g..%.17g", i, x->start, x->end, y->start,
                y->end);
    }
  }
}

/* ---- the hand-made timelines are what they claim ---- */

Test(viz, hand_made_1f1b_has_the_textbook_bubble) {
  sched_timeline tl;
  make_1f1b(&tl, 4, 8, 1, 2, 0, 0);
  cr_assert_eq(compute_events(&tl, SCHED_OP_COUNT), 2 * 4 * 8);
  cr_assert_eq(tl.makespan, 33);
  cr_assert(fabs(tl.bubble_rate - 3.0 / 11) < 1e-12, "%g", tl.bubble_rate);
  viz_rank_stat st[4];
  cr_assert(fabs(viz_stats(&tl, st) - 3.0 / 11) < 1e-12);
  for (int r = 0; r < 4; r++) {
    cr_assert_eq(st[r].busy, 24);
    cr_assert_eq(st[r].ops, 16);
    cr_assert_eq(st[r].span, 33 - 3 * r);
    cr_assert_eq(st[r].idle, 9 - 3 * r);
    cr_assert(fabs(st[r].bubble - 9.0 / 33) < 1e-12);
  }
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  viz_write_stats(&tl, f);
  fclose(f);
  cr_assert(strstr(buf, "bubble rate 27.27%") && count(buf, "\n") == 6, "%s", buf);
  for (int r = 0; r < 4; r++) { /* rank, ops, busy, span, idle, bubble */
    char row[96];
    snprintf(row, sizeof row, "%6d %8d %12.6g %12.6g %12.6g %7.2f%%\n", r, 16, 24.0, 33.0 - 3 * r, 9.0 - 3 * r, 100 * 9.0 / 33);
    cr_assert(strstr(buf, row), "no row '%s' in:\n%s", row, buf);
  }
  free(buf);
  sched_timeline_free(&tl);
}

/* ---- Chrome trace ---- */

Test(viz, event_names) {
  sched_timeline tl;
  sched_timeline_init(&tl, "x", "unit", 4, 1, 8);
  char b[64];
  struct {
    sched_event e;
    const char *v1, *v2;
  } cases[] = {
      {{0, SCHED_FORWARD, 3, 0, 0, -1, 0, 1}, "F3", "F3 c0"},
      {{0, SCHED_BACKWARD, 3, 1, 4, -1, 0, 1}, "B3", "B3 c1"},
      {{0, SCHED_BACKWARD_INPUT, 12, 0, 0, -1, 0, 1}, "I12", "I12 c0"},
      {{0, SCHED_BACKWARD_WEIGHT, 0, 1, 0, -1, 0, 1}, "W0", "W0 c1"},
      {{1, SCHED_SEND_ACT, 3, 0, 1, 2, 0, 1}, "SEND_ACT 3 -> r2", "SEND_ACT 3 -> r2 c0"},
      {{2, SCHED_RECV_GRAD, 5, 1, 1, 3, 0, 1}, "RECV_GRAD 5 <- r3", "RECV_GRAD 5 <- r3 c1"},
      {{0, SCHED_LOAD_MICROBATCH, 2, 0, 0, -1, 0, 1}, "LOAD_MICROBATCH 2", "LOAD_MICROBATCH 2 c0"},
      {{0, SCHED_REDUCE_TIED_GRADS, -1, -1, -1, 3, 0, 1},
       "REDUCE_TIED_GRADS <-> r3",
       "REDUCE_TIED_GRADS <-> r3"},
      {{0, SCHED_REDUCE_GRADS, -1, -1, -1, -1, 0, 1}, "REDUCE_GRADS", "REDUCE_GRADS"},
      {{0, SCHED_OPTIMIZER_STEP, -1, -1, -1, -1, 0, 1}, "OPTIMIZER_STEP", "OPTIMIZER_STEP"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    tl.v = 1;
    viz_event_name(&tl, &cases[i].e, b, sizeof b);
    cr_assert_str_eq(b, cases[i].v1);
    tl.v = 2;
    viz_event_name(&tl, &cases[i].e, b, sizeof b);
    cr_assert_str_eq(b, cases[i].v2);
  }
  sched_timeline_free(&tl);
}

Test(viz, trace_round_trip_is_exact) {
  sched_timeline tl, back;
  char *path = tmp_path("trace");
  make_1f1b(&tl, 4, 8, 1, 2, 0.1, 0.75); /* times like 10.700000000000001 */
  cr_assert_eq(viz_write_trace(&tl, path), CORE_OK, "%s", core_error_msg());
  cr_assert_eq(viz_read_trace(path, &back), CORE_OK, "%s", core_error_msg());
  assert_same_events(&tl, &back, 0);
  sched_timeline_free(&back);
  sched_timeline_free(&tl);

  make_v2_seconds(&tl);
  cr_assert_eq(viz_write_trace(&tl, path), CORE_OK, "%s", core_error_msg());
  cr_assert_eq(viz_read_trace(path, &back), CORE_OK, "%s", core_error_msg());
  assert_same_events(&tl, &back, 0);
  sched_timeline_free(&back);

  /* a second round trip writes the same bytes */
  char *path2 = tmp_path("trace2");
  cr_assert_eq(viz_read_trace(path, &back), CORE_OK);
  cr_assert_eq(viz_write_trace(&back, path2), CORE_OK);
  char *a = slurp(path, NULL), *b = slurp(path2, NULL);
  cr_assert_str_eq(a, b);
  free(a), free(b);
  sched_timeline_free(&back);
  sched_timeline_free(&tl);
  unlink(path), unlink(path2);
  free(path), free(path2);
}

/* What Perfetto and chrome://tracing need: the known top-level keys only, complete events in
 * microseconds, one named row per rank, no pid/tid 0. */
Test(viz, trace_is_chrome_trace_event_json) {
  sched_timeline tl;
  make_1f1b(&tl, 4, 8, 1, 2, 0.25, 1);
  char *path = tmp_path("chrome");
  cr_assert_eq(viz_write_trace(&tl, path), CORE_OK);
  size_t n;
  char *text = slurp(path, &n);
  cr_assert(strncmp(text, "{\"displayTimeUnit\":\"ms\",", 24) == 0, "%.40s", text);
  cr_assert(!strstr(text, "\\u"), "Perfetto's reader takes no \\u escapes");
  core_json *j;
  cr_assert_eq(core_json_parse(text, n, path, &j), CORE_OK, "%s", core_error_msg());
  cr_assert_eq(core_json_len(j), 3);
  cr_assert_str_eq(core_json_at(j, 0)->key, "displayTimeUnit");
  cr_assert_str_eq(core_json_at(j, 1)->key, "otherData");
  cr_assert_str_eq(core_json_at(j, 2)->key, "traceEvents");
  const core_json *meta = core_json_get(j, "otherData"), *evs = core_json_get(j, "traceEvents");
  cr_assert_str_eq(core_json_get(meta, "generator")->str, "brigade");
  cr_assert_str_eq(core_json_get(meta, "schedule")->str, "1f1b");
  cr_assert_eq(core_json_get(meta, "p")->num, 4);
  cr_assert_eq(core_json_get(meta, "makespan")->num, tl.makespan);
  cr_assert_eq(core_json_get(meta, "bubble_rate")->num, tl.bubble_rate);
  int x = 0, names = 0;
  for (size_t i = 0; i < core_json_len(evs); i++) {
    const core_json *e = core_json_at(evs, i);
    cr_assert_neq(core_json_get(e, "pid")->num, 0);
    const char *ph = core_json_get(e, "ph")->str;
    if (strcmp(ph, "M") == 0) {
      cr_assert_null(core_json_get(e, "ts"));
      if (strcmp(core_json_get(e, "name")->str, "thread_name") == 0) {
        char want[32];
        int tid = (int)core_json_get(e, "tid")->num; /* compute rows, then (past 2p) transfer rows */
        snprintf(want, sizeof want, tid > 2 * tl.p ? "rank %d transfers" : "rank %d", (tid - 1) % tl.p);
        cr_assert(tid <= tl.p || tid > 2 * tl.p, "tid %d: a copy row without copies", tid);
        cr_assert_str_eq(core_json_get(core_json_get(e, "args"), "name")->str, want);
        names++;
      }
      continue;
    }
    cr_assert_str_eq(ph, "X");
    const sched_event *ev = &tl.ev[x++]; /* transfers on rows of their own: they overlap compute */
    cr_assert_eq(core_json_get(e, "tid")->num, ev->rank + 1 + (sched_is_p2p((sched_op)ev->op) ? 2 * tl.p : 0));
    cr_assert_str_eq(core_json_get(e, "cat")->str, sched_op_name((sched_op)ev->op));
    cr_assert(fabs(core_json_get(e, "ts")->num - ev->start * 1000) < 1e-9 * (1 + ev->start * 1000));
    cr_assert(fabs(core_json_get(e, "dur")->num - (ev->end - ev->start) * 1000) < 1e-9 * 1000);
    for (size_t k = 0; k < core_json_len(e); k++) /* Perfetto's event reader takes no arrays */
      cr_assert_neq(core_json_at(e, k)->type, CORE_JSON_ARRAY);
  }
  cr_assert_eq(x, tl.n);
  cr_assert_eq(names, 8);
  const char *want[] = {"\"name\":\"F3\"",
                        "\"name\":\"B3\"",
                        "\"name\":\"SEND_ACT 3 -> r2\"",
                        "\"name\":\"RECV_ACT 3 <- r1\"",
                        "\"name\":\"SEND_GRAD 3 -> r0\"",
                        "\"name\":\"REDUCE_GRADS\"",
                        "\"name\":\"OPTIMIZER_STEP\"",
                        "\"cat\":\"FORWARD\"",
                        "\"cat\":\"BACKWARD\"",
                        "\"args\":{\"mb\":3,\"chunk\":0,\"stage\":2,\"peer\":-1,"};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    cr_assert(strstr(text, want[i]), "no %s", want[i]);
  core_json_free(j);
  free(text);
  sched_timeline_free(&tl);

  make_v2_seconds(&tl); /* seconds: ts in microseconds; chunks in names */
  cr_assert_eq(viz_write_trace(&tl, path), CORE_OK);
  text = slurp(path, &n);
  cr_assert(strstr(text, "\"name\":\"F0 c1\"") && strstr(text, "\"name\":\"I0 c1\"") &&
                strstr(text, "\"us_per_unit\":1000000") && strstr(text, "\"ts\":1234567890.1234"),
            "%s", text);
  free(text);
  sched_timeline_free(&tl);
  unlink(path);
  free(path);
}

/* Without args.start/end (a trace another tool wrote) times come from ts/dur. */
Test(viz, trace_times_from_ts_and_dur) {
  sched_timeline tl, back;
  char *path = tmp_path("tsdur");
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 0)
      make_1f1b(&tl, 3, 5, 1.1, 2.3, 0.07, 0.4);
    else
      make_v2_seconds(&tl);
    cr_assert_eq(viz_write_trace(&tl, path), CORE_OK);
    size_t n;
    char *text = slurp(path, &n), *o = malloc(n + 1), *w = o;
    for (const char *s = text; *s;) { /* drop ,"start":...,"end":... */
      if (strncmp(s, ",\"start\":", 9) == 0) {
        s = strchr(s, '}');
        continue;
      }
      *w++ = *s++;
    }
    *w = 0;
    cr_assert(!strstr(o, "\"start\"") && strstr(o, "\"peer\":-1}"));
    spit(path, o, strlen(o));
    cr_assert_eq(viz_read_trace(path, &back), CORE_OK, "%s", core_error_msg());
    assert_same_events(&tl, &back, 1e-9);
    free(text), free(o);
    sched_timeline_free(&back);
    sched_timeline_free(&tl);
  }
  unlink(path);
  free(path);
}

/* The text of a valid small trace with `from` replaced by `to` must be refused with a message
 * holding `needle` (and the file's name); *tl comes back empty. */
/* Every row of a Chrome trace holds events that nest (Perfetto draws nothing else): simulated
 * programs whose receives overlap compute (zb-h1 with latency 0.5, B = 1.5, W = 0.5: on one row
 * with compute, a receive there overlaps a W) and whose copies to and from the host run on two
 * streams (offload full), each kind on its rank's row of its own. */
Test(viz, trace_rows_hold_events_that_nest) {
  const sched_shape shapes[] = {
      {.family = SCHED_ZB_H1, .p = 4, .v = 1, .m = 8},
      {.family = SCHED_INTERLEAVED, .p = 4, .v = 2, .m = 8, .offload = SCHED_OFFLOAD_FULL},
      {.family = SCHED_1F1B, .p = 4, .v = 1, .m = 8, .offload = SCHED_OFFLOAD_FULL},
  };
  for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
    sched_costs c = sched_costs_unit();
    c.b = 1.5, c.w = 0.5, c.comm = 0.5, c.offload = 0.4;
    sched_program pr;
    cr_assert_eq(sched_compile(&shapes[k], &c, &pr), CORE_OK, "%s", core_error_msg());
    sched_timeline tl;
    sched_timeline_init(&tl, sched_family_name(shapes[k].family), "unit", pr.p, pr.v, pr.m);
    sched_sim_result res;
    cr_assert_eq(sched_simulate(&pr, &c, &res, &tl), CORE_OK, "%s", core_error_msg());
    char *path = tmp_path("nest");
    cr_assert_eq(viz_write_trace(&tl, path), CORE_OK);
    core_json *j;
    cr_assert_eq(core_json_parse_file(path, &j), CORE_OK, "%s", core_error_msg());
    const core_json *evs = core_json_get(j, "traceEvents");
    int rows = 4 * pr.p, copies = 0, overlaps = 0;
    for (int row = 1; row <= rows; row++) { /* each row's events: sorted by start, longest first */
      double st[4096], en[4096];
      int n = 0;
      for (size_t i = 0; i < core_json_len(evs); i++) {
        const core_json *e = core_json_at(evs, i);
        if (strcmp(core_json_get(e, "ph")->str, "X") != 0 || (int)core_json_get(e, "tid")->num != row) continue;
        cr_assert_lt(n, 4096);
        st[n] = core_json_get(e, "ts")->num, en[n] = st[n] + core_json_get(e, "dur")->num, n++;
        copies += row > pr.p && row <= 2 * pr.p;
      }
      for (int a = 1; a < n; a++)
        for (int b = a; b > 0 && (st[b] < st[b - 1] || (st[b] == st[b - 1] && en[b] > en[b - 1])); b--) {
          double t = st[b]; st[b] = st[b - 1], st[b - 1] = t;
          t = en[b], en[b] = en[b - 1], en[b - 1] = t;
        }
      double stack[4096];
      int top = 0;
      for (int a = 0; a < n; a++) {
        while (top > 0 && stack[top - 1] <= st[a] + 1e-9) top--;
        if (top > 0 && en[a] > stack[top - 1] + 1e-9) overlaps++;
        stack[top++] = en[a];
      }
    }
    cr_assert_eq(overlaps, 0, "%s: %d events overlap another on their row", sched_family_name(shapes[k].family), overlaps);
    if (shapes[k].offload) cr_assert_gt(copies, 0, "no copies to the host in the trace");
    core_json_free(j);
    unlink(path), free(path);
    sched_sim_result_free(&res), sched_timeline_free(&tl), sched_program_free(&pr);
  }
}

/* A trace whose transfers sit on their ranks' compute rows, as brigades before the transfer rows
 * wrote them, reads back to the same events. */
Test(viz, trace_with_transfers_on_compute_rows_reads) {
  sched_timeline tl, back;
  make_1f1b(&tl, 2, 2, 1, 2, 0.5, 1);
  char *path = tmp_path("old");
  cr_assert_eq(viz_write_trace(&tl, path), CORE_OK);
  size_t n;
  char *text = slurp(path, &n);
  int moved = 0;
  for (char *at = text; (at = strstr(at, "\"tid\":")) != NULL; at += 6) /* rows 5, 6 -> 1, 2 */
    if ((at[6] == '5' || at[6] == '6') && at[7] == ',' && strncmp(at + 8, "\"args\"", 6) == 0) at[6] -= 4, moved++;
  cr_assert_gt(moved, 0, "no transfer row in the trace");
  spit(path, text, n);
  cr_assert_eq(viz_read_trace(path, &back), CORE_OK, "%s", core_error_msg());
  cr_assert_eq(back.n, tl.n);
  for (int i = 0; i < tl.n; i++)
    cr_assert(back.ev[i].rank == tl.ev[i].rank && back.ev[i].op == tl.ev[i].op && back.ev[i].mb == tl.ev[i].mb,
              "event %d", i);
  sched_timeline_free(&tl), sched_timeline_free(&back);
  free(text);
  unlink(path);
  free(path);
}

static void refuse(const char *from, const char *to, const char *needle) {
  sched_timeline tl;
  make_1f1b(&tl, 2, 2, 1, 2, 0.5, 1);
  char *path = tmp_path("bad");
  cr_assert_eq(viz_write_trace(&tl, path), CORE_OK);
  sched_timeline_free(&tl);
  size_t n;
  char *text = slurp(path, &n), *at = strstr(text, from);
  cr_assert(at, "'%s' is not in the trace", from);
  char *o = malloc(n + strlen(to) + 1);
  size_t k = (size_t)(at - text);
  memcpy(o, text, k);
  strcpy(o + k, to);
  strcat(o, at + strlen(from));
  spit(path, o, strlen(o));
  memset(&tl, 0x5a, sizeof tl);
  core_error_clear();
  cr_assert_eq(viz_read_trace(path, &tl), CORE_EINPUT, "'%s' -> '%s' accepted", from, to);
  cr_assert(strstr(core_error_msg(), needle), "'%s' -> '%s': '%s' lacks '%s'", from, to,
            core_error_msg(), needle);
  cr_assert(strstr(core_error_msg(), path), "'%s' does not name the file", core_error_msg());
  cr_assert(tl.n == 0 && tl.ev == NULL);
  free(text), free(o);
  unlink(path);
  free(path);
}

Test(viz, read_trace_refuses_what_is_not_a_brigade_trace) {
  refuse("\"generator\":\"brigade\"", "\"generator\":\"chrome\"", "is not a brigade trace");
  refuse("\"otherData\":{", "\"metadata\":{", "is not a brigade trace");
  refuse("\"version\":1", "\"version\":2", "trace format version 2 is not supported");
  refuse("\"p\":2", "\"p\":\"2\"",
         ":2:103: 'p' must be an integer in [1, 1048576], found a string");
  refuse("\"p\":2", "\"p\":0", "'p' must be an integer in [1, 1048576], found 0");
  refuse(",\"m\":2", "", ":2:13: missing member 'm'");
  refuse("\"schedule\":\"1f1b\"", "\"schedule\":\"a-schedule-name-longer-than-31-bytes\"",
         "longer than 31 bytes");
  refuse(
      "\"makespan\":", "\"makespan\":\"x\",\"_\":", "'makespan' must be a number, found a string");
  refuse("\"us_per_unit\":1000", "\"us_per_unit\":0", "'us_per_unit' must be positive");
  refuse("\"makespan\":", "\"makespan\":-1,\"_\":", "'makespan' must not be negative");
  refuse("\"unit\":\"unit\"", "\"unit\":\"a-unit-name-of-16b\"", "'unit' is longer than 15 bytes");
  refuse("\"traceEvents\":[", "\"traceEvents\":{},\"x\":[",
         "'traceEvents' must be an array, found an object");
  refuse("{\"name\":\"F0\"", "7,{\"name\":\"F0\"", "a trace event must be an object");
  refuse("\"ph\":\"X\"", "\"ph\":\"B\"", "unexpected event phase");
  refuse("\"ph\":\"X\"", "\"ph\":1", "'ph' must be a string, found a number");
  refuse("\"tid\":2,\"args\":{\"mb\":0", "\"tid\":9,\"args\":{\"mb\":0",
         "'tid' must be an integer in [1, 8], found 9"); /* ranks' rows, copies out, transfers, copies back */
  refuse("\"tid\":2,\"args\":{\"mb\":0", "\"tid\":3,\"args\":{\"mb\":0",
         "'tid' names a copy row but the event is not a copy");
  refuse("\"tid\":2,\"args\":{\"mb\":0", "\"tid\":5,\"args\":{\"mb\":0",
         "'tid' names a transfer row but the event is not a transfer");
  refuse("\"tid\":2,\"args\":{\"mb\":0", "\"tid\":7,\"args\":{\"mb\":0",
         "'tid' names a copy row but the event is not a copy");
  refuse("\"cat\":\"FORWARD\"", "\"cat\":\"FORWARDS\"", "'cat' is not one of brigade's op names");
  refuse("\"cat\":\"FORWARD\"", "\"kat\":\"FORWARD\"", "missing member 'cat'");
  refuse("\"dur\":1000", "\"dur\":-1000", "'dur' must not be negative");
  refuse("\"mb\":0", "\"mb\":0.5", "'mb' must be an integer in [-1, 2147483647], found 0.5");
  refuse("\"chunk\":0", "\"chunk\":1", "'chunk' must be an integer in [-1, 0], found 1");
  refuse("\"stage\":0", "\"stage\":2", "'stage' must be an integer in [-1, 1], found 2");
  refuse("\"peer\":-1", "\"peer\":true", "'peer' must be an integer in [-1, 1], found a boolean");
  refuse("\"start\":0,", "\"start\":9,", "the event ends before it starts");
  refuse("\"start\":0,", "\"start\":null,", "'start' must be a number, found null");
  refuse(",\"end\":1}", "}", "missing member 'end'");
  refuse("\"args\":{\"mb\"", "\"args\":[1],\"x\":{\"mb\"",
         "'args' must be an object, found an array");
  refuse("\"args\":{\"mb\":0", "\"args\":{\"mb\":0,\"mb\":1", "duplicate member name 'mb'");
  refuse("\"displayTimeUnit\":\"ms\",", "\"displayTimeUnit\":\"ms\" ",
         ":2:1: expected ',' or '}' after an object member, found '\"'");
  refuse("]}", "]", "expected ',' or '}' after an object member, found end of input");
}

/* Every time is finite, the distance from the first start to the last end is not (drawing it
 * wrote axis ticks forever): refused with the file's name. */
Test(viz, read_trace_refuses_a_span_too_long_to_measure) {
  sched_timeline tl;
  make_1f1b(&tl, 2, 2, 1, 2, 0.5, 1);
  char *path = tmp_path("span");
  cr_assert_eq(viz_write_trace(&tl, path), CORE_OK);
  sched_timeline_free(&tl);
  size_t n;
  char *text = slurp(path, &n), *first = strstr(text, "\"start\":0,"), *last = NULL;
  for (char *q = text; (q = strstr(q, "\"end\":")); q++) last = q;
  cr_assert(first && last && first < last);
  char *o = calloc(1, n + 64);
  memcpy(o, text, (size_t)(first - text));
  strcat(o, "\"start\":-1e308,");
  strncat(o, first + 10, (size_t)(last - first - 10));
  strcat(o, "\"end\":1e308");
  strcat(o, strchr(last, '}'));
  spit(path, o, strlen(o));
  memset(&tl, 0x5a, sizeof tl);
  cr_assert_eq(viz_read_trace(path, &tl), CORE_EINPUT, "accepted:\n%s", o);
  cr_assert(strstr(core_error_msg(), "too long to measure") && strstr(core_error_msg(), path), "%s",
            core_error_msg());
  cr_assert(tl.n == 0 && tl.ev == NULL);
  free(text), free(o);
  unlink(path);
  free(path);
}

Test(viz, read_trace_survives_every_truncation) {
  sched_timeline tl;
  make_1f1b(&tl, 2, 2, 1, 2, 0.5, 1);
  char *path = tmp_path("cut"), *cut = tmp_path("cut2");
  cr_assert_eq(viz_write_trace(&tl, path), CORE_OK);
  sched_timeline_free(&tl);
  size_t n;
  char *text = slurp(path, &n);
  for (size_t k = 0; k + 2 < n; k += 1 + k / 64) { /* every prefix short of the closing "}\n" */
    spit(cut, text, k);
    core_error_clear();
    cr_assert_eq(viz_read_trace(cut, &tl), CORE_EINPUT, "a prefix of %zu bytes was accepted", k);
    cr_assert(strncmp(core_error_msg(), cut, strlen(cut)) == 0 ||
                  strstr(core_error_msg(), "not a brigade trace"),
              "%zu bytes: %s", k, core_error_msg());
  }
  core_error_clear();
  cr_assert_eq(viz_read_trace("/nonexistent/trace.json", &tl), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "cannot open /nonexistent/trace.json"), "%s",
            core_error_msg());
  spit(cut, "[]", 2);
  cr_assert_eq(viz_read_trace(cut, &tl), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "not a brigade trace"));
  free(text);
  unlink(path), unlink(cut);
  free(path), free(cut);
}

Test(viz, writers_refuse_a_bad_timeline) {
  sched_timeline tl;
  make_1f1b(&tl, 2, 2, 1, 2, 0, 0);
  char *path = tmp_path("refuse");
  tl.ev[1].rank = 7;
  cr_assert_eq(viz_write_trace(&tl, path), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "event 1: rank 7 is not in 0..1"), "%s", core_error_msg());
  cr_assert_eq(viz_write_svg(&tl, path), CORE_EINPUT);
  tl.ev[1].rank = 2; /* p itself is out of range too */
  cr_assert_eq(viz_check(&tl), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "event 1: rank 2 is not in 0..1"), "%s", core_error_msg());
  tl.ev[1].rank = 0;
  tl.ev[2].end = tl.ev[2].start - 1;
  cr_assert_eq(viz_write_svg(&tl, path), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "bad times"), "%s", core_error_msg());
  tl.ev[2].end = NAN;
  cr_assert_eq(viz_check(&tl), CORE_EINPUT);
  /* finite times whose distance is not: the SVG's axis wrote ticks forever */
  double s0 = tl.ev[0].start, e2 = tl.ev[2].start + 1;
  tl.ev[0].start = -1e308, tl.ev[2].end = 1e308;
  cr_assert_eq(viz_check(&tl), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "too long to measure"), "%s", core_error_msg());
  cr_assert_eq(viz_write_svg(&tl, path), CORE_EINPUT);
  tl.ev[0].start = s0, tl.ev[2].end = e2;
  tl.ev[3].op = SCHED_OP_COUNT;
  cr_assert_eq(viz_check(&tl), CORE_EINPUT);
  tl.ev[3].op = SCHED_FORWARD;
  cr_assert_eq(viz_check(&tl), CORE_OK);
  tl.p = 0;
  cr_assert_eq(viz_check(&tl), CORE_EINPUT);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  viz_write_ascii(&tl, f, 80); /* says why instead of drawing */
  fclose(f);
  cr_assert(strstr(buf, "cannot draw") && strstr(buf, "p=0"), "%s", buf);
  free(buf);
  tl.p = 2;
  cr_assert_eq(viz_write_trace(&tl, "/nonexistent/dir/t.json"), CORE_ERUNTIME);
  cr_assert_eq(viz_write_svg(&tl, "/nonexistent/dir/t.svg"), CORE_ERUNTIME);
  cr_assert(strstr(core_error_msg(), "cannot write /nonexistent/dir/t.svg"));
  sched_timeline_free(&tl);
  unlink(path);
  free(path);
}

/* ---- SVG ---- */

/* Well-formed enough for any XML reader: tags nest and close, attribute values are quoted,
 * text holds no raw '<' and every '&' starts an entity. */
static void assert_well_formed(const char *s) {
  const char *stack[64];
  size_t depth = 0, lens[64];
  int roots = 0;
  while (*s) {
    if (*s == '&') {
      cr_assert(strncmp(s, "&lt;", 4) == 0 || strncmp(s, "&gt;", 4) == 0 ||
                    strncmp(s, "&amp;", 5) == 0 || strncmp(s, "&quot;", 6) == 0 ||
                    strncmp(s, "&apos;", 6) == 0,
                "bare '&' at '%.20s'", s);
      s++;
      continue;
    }
    if (*s != '<') {
      cr_assert(depth > 0 || *s == '\n', "text outside the root: '%.20s'", s);
      s++;
      continue;
    }
    int closing = s[1] == '/';
    const char *name = s + 1 + closing;
    size_t nl = strcspn(name, " \t\n/>");
    cr_assert(nl > 0, "empty tag at '%.20s'", s);
    const char *q = name + nl;
    while (*q && *q != '>') { /* attributes: skip quoted values */
      if (*q == '"') {
        const char *e = strchr(q + 1, '"');
        cr_assert(e, "unterminated attribute value");
        cr_assert(memchr(q + 1, '<', (size_t)(e - q - 1)) == NULL, "'<' in an attribute value");
        q = e + 1;
      } else {
        cr_assert(*q != '<', "'<' inside a tag at '%.20s'", s);
        q++;
      }
    }
    cr_assert_eq(*q, '>', "unterminated tag");
    if (closing) {
      cr_assert(depth > 0 && lens[depth - 1] == nl && strncmp(stack[depth - 1], name, nl) == 0,
                "</%.*s> does not close the open tag", (int)nl, name);
      depth--;
    } else if (q[-1] != '/') {
      if (depth == 0) roots++;
      cr_assert(depth < 64, "nested too deep");
      stack[depth] = name, lens[depth] = nl, depth++;
    }
    s = q + 1;
  }
  cr_assert_eq(depth, 0, "%zu tags left open", depth);
  cr_assert_eq(roots, 1);
}

static char *svg_of(const sched_timeline *tl, size_t *n) {
  char *path = tmp_path("svg");
  cr_assert_eq(viz_write_svg(tl, path), CORE_OK, "%s", core_error_msg());
  char *svg = slurp(path, n);
  if (system("command -v xmllint >/dev/null 2>&1") ==
      0) { /* a real XML reader, where there is one */
    char cmd[160];
    snprintf(cmd, sizeof cmd, "xmllint --noout %s", path);
    cr_assert_eq(system(cmd), 0, "xmllint refused %s", path);
  }
  unlink(path);
  free(path);
  return svg;
}

Test(viz, svg_gantt_chart) {
  sched_timeline tl;
  make_1f1b(&tl, 4, 8, 1, 2, 0.25, 1);
  size_t n;
  char *svg = svg_of(&tl, &n);
  cr_assert(strncmp(svg, "<svg", 4) == 0);
  cr_assert(n > 7 && strcmp(svg + n - 7, "</svg>\n") == 0);
  assert_well_formed(svg);
  char title[128];
  snprintf(title, sizeof title, "1f1b \xc2\xb7 p=4, v=1, m=8 \xc2\xb7 bubble rate %.1f%%</text>",
           100 * tl.bubble_rate);
  cr_assert(strstr(svg, title), "no title '%s'", title);
  cr_assert_eq(count(svg, "<rect class=\"op "), compute_events(&tl, SCHED_OP_COUNT));
  cr_assert_eq(count(svg, "<rect class=\"op F\""), 32);
  cr_assert_eq(count(svg, "<rect class=\"op B\""), 32);
  cr_assert_eq(count(svg, "<rect class=\"tail\""), 8);
  cr_assert_eq(count(svg, "<rect class=\"row\""), 4);
  cr_assert(count(svg, "<rect class=\"xfer\"") > 0);
  cr_assert(strstr(svg, ">rank 0</text>") && strstr(svg, ">rank 3</text>"));
  cr_assert(strstr(svg, ">time (cost units)</text>") && strstr(svg, "class=\"tick\">0</text>") &&
            strstr(svg, "class=\"tick\">10</text>"));
  cr_assert(strstr(svg, "F  forward") && strstr(svg, "B  backward") &&
            strstr(svg, "idle (bubble)") && !strstr(svg, "W  backward"));
  cr_assert(strstr(svg, "fill=\"#ffffff\">7</text>"), "micro-batch numbers in the boxes");
  cr_assert_eq(count(svg, "<text"), count(svg, "</text>"));
  /* rank 0 on top: its row is above rank 3's */
  const char *r0 = strstr(svg, "<rect class=\"row\" x=\"84\" y=\""),
             *r1 = strstr(r0 + 1, "<rect class=\"row\"");
  cr_assert(atof(r0 + 28) < atof(r1 + 28));
  free(svg);
  sched_timeline_free(&tl);
}

/* Steps back to back: a dashed line where each step ends (the latest OPTIMIZER_STEP of its
 * round), labelled; one step has none. zb-h2 p=4 m=8, unit costs, a step of 0.5, post-validation:
 * the three steps end at 27.5, 52 and 76.5. */
Test(viz, svg_marks_where_each_step_ends) {
  sched_shape sh = {.family = SCHED_ZB_H2, .p = 4, .v = 1, .m = 8, .post_validation = 1};
  sched_costs c = sched_costs_unit();
  c.step = 0.5;
  sched_program pr;
  cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_OK, "%s", core_error_msg());
  for (int steps = 1; steps <= 3; steps += 2) {
    sched_timeline tl;
    sched_timeline_init(&tl, "zb-h2", "unit", 4, 1, 8);
    sched_sim_result res;
    cr_assert_eq(sched_simulate_steps(&pr, &c, steps, SCHED_STEP_POST_VALIDATION, &res, &tl), CORE_OK);
    size_t n;
    char *svg = svg_of(&tl, &n);
    assert_well_formed(svg);
    if (steps == 1) {
      cr_assert(!strstr(svg, "class=\"steps\""), "one step, yet step marks");
    } else {
      cr_assert_eq(count(svg, "stroke-dasharray"), 3);
      cr_assert(strstr(svg, "<title>step 1 ends at 27.5</title>") && strstr(svg, "<title>step 2 ends at 52</title>") &&
                    strstr(svg, "<title>step 3 ends at 76.5</title>"), "%s", svg);
      cr_assert(strstr(svg, ">step 3</text>"));
    }
    free(svg);
    sched_sim_result_free(&res);
    sched_timeline_free(&tl);
  }
  sched_program_free(&pr);
}

Test(viz, svg_chunks_seconds_and_escaping) {
  sched_timeline tl;
  make_v2_seconds(&tl);
  snprintf(tl.schedule, sizeof tl.schedule, "a<b & \"c\"\x01");
  size_t n;
  char *svg = svg_of(&tl, &n);
  assert_well_formed(svg);
  cr_assert(strstr(svg, "a&lt;b &amp; &quot;c&quot;? \xc2\xb7 p=2, v=2, m=2"), "name not escaped");
  cr_assert_eq(count(svg, "<rect class=\"op "), compute_events(&tl, SCHED_OP_COUNT));
  cr_assert_eq(count(svg, "<rect class=\"op I\""), 2);
  cr_assert_eq(count(svg, "<rect class=\"op W\""), 2);
  cr_assert(strstr(svg, "time (ms)"), "a 10 ms measured run is labelled in ms");
  cr_assert(strstr(svg, "chunk 0 to 1 (lighter)"));
  /* chunk 1's forward is a lighter blue than chunk 0's */
  cr_assert(strstr(svg, "<rect class=\"op F\"") && strstr(svg, "fill=\"#4e79a7\"") &&
                strstr(svg, "fill=\"#a7bcd3\""),
            "chunk shades missing");
  free(svg);
  sched_timeline_free(&tl);

  sched_timeline_init(&tl, "empty", "unit", 3, 1, 1); /* no events: still a picture, one row */
  svg = svg_of(&tl, &n);
  assert_well_formed(svg);
  cr_assert(strstr(svg, "no events") && count(svg, "<rect class=\"row\"") == 1 &&
            strstr(svg, ">ranks 0\xe2\x80\x93" "2</text>"));
  free(svg);
  sched_timeline_free(&tl);

  make_1f1b(&tl, 32, 32, 1, 2, 0, 0); /* many ranks: rows shrink, still one box per op */
  svg = svg_of(&tl, &n);
  assert_well_formed(svg);
  cr_assert_eq(count(svg, "<rect class=\"op "), 2 * 32 * 32);
  free(svg);
  sched_timeline_free(&tl);
}

/* A timeline (a trace read back) may claim far more ranks than have events: the charts draw a
 * row for each rank with events and one for each run of ranks without, so their size follows
 * the events. Ranks keep their numbers; a single rank without events keeps its own row. */
Test(viz, rows_follow_the_events_not_the_rank_count) {
  sched_timeline tl;
  sched_timeline_init(&tl, "1f1b", "unit", 1000000, 1, 1);
  add(&tl, 0, SCHED_FORWARD, 0, 0, 0, -1, 0, 1);
  add(&tl, 5, SCHED_FORWARD, 0, 0, 1, -1, 1, 2);
  add(&tl, 7, SCHED_BACKWARD, 0, 0, 1, -1, 2, 4);
  add(&tl, 999999, SCHED_BACKWARD, 0, 0, 0, -1, 4, 6);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  cr_assert_eq(viz_fwrite_svg(&tl, f), CORE_OK, "%s", core_error_msg());
  fclose(f);
  cr_assert(len < 16384, "an SVG of 4 events takes %zu bytes", len);
  free(buf);
  size_t n;
  char *svg = svg_of(&tl, &n);
  assert_well_formed(svg);
  cr_assert_eq(count(svg, "<rect class=\"row\""), 7, "%s", svg);
  const char *rows[] = {">rank 0<", ">ranks 1\xe2\x80\x93" "4<", ">rank 5<", ">rank 6<", ">rank 7<",
                        ">ranks 8\xe2\x80\x93" "999998<", ">rank 999999<"};
  const char *at = svg;
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) { /* in rank order */
    at = strstr(at, rows[i]);
    cr_assert(at, "no row %s in order", rows[i]);
  }
  cr_assert_eq(count(svg, ">no events</text>"), 2);
  cr_assert_eq(count(svg, "<rect class=\"op "), 4);
  /* each box on its rank's row: rank 999999's B is on the last row */
  const char *row = strstr(svg, ">rank 999999<"), *box = strstr(svg, "<title>B0 on rank 999999");
  cr_assert(row && box);
  while (row > svg && strncmp(row, "<rect class=\"row\"", 17) != 0) row--;
  while (box > svg && strncmp(box, "<rect class=\"op ", 16) != 0) box--;
  cr_assert(atof(strstr(box, " y=\"") + 4) == atof(strstr(row, " y=\"") + 4), "B0 of rank 999999 is off its row");
  free(svg);

  f = open_memstream(&buf, &len);
  viz_write_ascii(&tl, f, 100);
  fclose(f);
  cr_assert(len < 4096, "a terminal chart of 4 events takes %zu bytes", len);
  cr_assert(strstr(buf, "\nrank      0 |") && strstr(buf, "\nranks 1-4: no events\n") && strstr(buf, "\nrank      6 |.") &&
                strstr(buf, "\nranks 8-999998: no events\n") && strstr(buf, "\nrank 999999 |"),
            "%s", buf);
  free(buf);
  sched_timeline_free(&tl);
}

/* ---- terminal chart ---- */

static char *ascii_of(const sched_timeline *tl, int width) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  viz_write_ascii(tl, f, width);
  fclose(f);
  return buf;
}

Test(viz, ascii_chart) {
  sched_timeline tl;
  make_1f1b(&tl, 4, 8, 1, 2, 0, 0);
  char *out = ascii_of(&tl, 100), *save, *ln;
  const char *head =
      "1f1b p=4 v=1 m=8  bubble rate 27.3%  makespan 33 units  (1 column = 1 unit)\n";
  cr_assert(strncmp(out, head, strlen(head)) == 0, "%s", out);
  int ranks = 0, lines = 0;
  for (ln = strtok_r(out, "\n", &save); ln; ln = strtok_r(NULL, "\n", &save), lines++) {
    cr_assert(strlen(ln) <= 100, "line too long: %s", ln);
    if (strncmp(ln, "rank ", 5) != 0) continue;
    char want[32];
    snprintf(want, sizeof want, "rank %2d |", ranks);
    cr_assert(strncmp(ln, want, 9) == 0, "%s", ln);
    const char *row = ln + 9;
    cr_assert_eq(strlen(row), 34, "one column per unit: %s", ln); /* 33 and the closing '|' */
    int f = 0, b = 0, idle = 0;
    for (const char *c = row; *c != '|'; c++)
      f += *c == 'F' || *c == 'f', b += *c == 'B' || *c == 'b', idle += *c == '.';
    cr_assert(f == 8 && b == 16 && idle == 9, "%s: %d F, %d B, %d idle", ln, f, b, idle);
    ranks++;
  }
  cr_assert_eq(ranks, 4);
  cr_assert_eq(lines, 6);
  free(out);
  out = ascii_of(&tl, 100);
  cr_assert(strstr(out, "rank  0 |FfFf......BBFbbfBBFbbfBB.bb.BB.bb|"), "%s", out);
  cr_assert(strstr(out, "rank  3 |...FBBfbbFBBfbbFBBfbbFBBfbb......|"), "%s", out);
  cr_assert(strstr(out, "F forward  B backward  (lower case: odd micro-batch)  . idle\n"), "%s",
            out);
  free(out);

  out = ascii_of(&tl, 24); /* narrow: scaled, and no line longer than asked */
  for (ln = strtok_r(out, "\n", &save); ln; ln = strtok_r(NULL, "\n", &save))
    cr_assert(strlen(ln) <= 24, "'%s'", ln);
  free(out);
  sched_timeline_free(&tl);

  make_v2_seconds(&tl); /* seconds: scaled columns, I and W in the legend */
  out = ascii_of(&tl, 80);
  cr_assert(strstr(out, "(1 column = ") && strstr(out, " ms)") && strstr(out, "rank  1 |"), "%s",
            out);
  cr_assert(strstr(out, "I input grad") || strstr(out, "I in-grad"), "%s", out);
  cr_assert(strchr(out, 'W') && strchr(out, '#'), "%s", out);
  free(out);
  sched_timeline_free(&tl);

  sched_timeline_init(&tl, "none", "unit", 2, 1, 1);
  out = ascii_of(&tl, 80);
  cr_assert(strstr(out, "(no events to draw)"), "%s", out);
  free(out);
  sched_timeline_free(&tl);
}

/* ---- what the writers compute ---- */

/* A timeline whose makespan and bubble rate were never computed (0) gets them from its events,
 * in the trace's otherData, the SVG title and the terminal header. */
Test(viz, summary_from_events_when_not_given) {
  sched_timeline tl;
  make_1f1b(&tl, 4, 8, 1, 2, 0, 0);
  tl.makespan = 0, tl.bubble_rate = 0;
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  cr_assert_eq(viz_fwrite_trace(&tl, f), CORE_OK);
  fclose(f);
  core_json *j;
  cr_assert_eq(core_json_parse(buf, len, "mem", &j), CORE_OK, "%s", core_error_msg());
  const core_json *meta = core_json_get(j, "otherData");
  cr_assert_eq(core_json_get(meta, "makespan")->num, 33);
  cr_assert(fabs(core_json_get(meta, "bubble_rate")->num - 3.0 / 11) < 1e-12);
  core_json_free(j);
  free(buf);
  size_t n;
  char *svg = svg_of(&tl, &n);
  cr_assert(strstr(svg, "bubble rate 27.3%</text>") && strstr(svg, "makespan 33 cost units"), "title or subtitle");
  free(svg);
  buf = ascii_of(&tl, 100);
  cr_assert(strstr(buf, "bubble rate 27.3%  makespan 33 units"), "%s", buf);
  free(buf);
  sched_timeline_free(&tl);
}

/* A rank without compute events has span, idle and busy 0 (not infinities) in the statistics. */
Test(viz, stats_of_a_rank_without_compute) {
  sched_timeline tl;
  sched_timeline_init(&tl, "x", "unit", 2, 1, 1);
  add(&tl, 0, SCHED_FORWARD, 0, 0, 0, -1, 0, 2);
  add(&tl, 1, SCHED_RECV_ACT, 0, 0, 1, 0, 2, 3);
  viz_rank_stat st[2];
  cr_assert(fabs(viz_stats(&tl, st) - 0.5) < 1e-12);
  cr_assert(st[1].ops == 0 && st[1].busy == 0 && st[1].span == 0 && st[1].idle == 0 && st[1].bubble == 1,
            "rank 1: ops %d busy %g span %g idle %g bubble %g", st[1].ops, st[1].busy, st[1].span, st[1].idle, st[1].bubble);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  viz_write_stats(&tl, f);
  fclose(f);
  cr_assert(!strstr(buf, "inf") && !strstr(buf, "nan"), "%s", buf);
  free(buf);
  sched_timeline_free(&tl);
}

/* Each row's "idle X%" is the share of the drawn step (first start to last end, the tail and
 * transfers included) the rank does not compute; the subtitle holds their mean (the idle
 * fraction) and the makespan. */
Test(viz, svg_idle_shares_and_subtitle) {
  sched_timeline tl;
  make_1f1b(&tl, 4, 8, 1, 2, 0.25, 1);
  double t0 = INFINITY, t1 = -INFINITY, idle[4], mean = 0;
  for (int i = 0; i < tl.n; i++) t0 = fmin(t0, tl.ev[i].start), t1 = fmax(t1, tl.ev[i].end);
  viz_rank_stat st[4];
  viz_stats(&tl, st);
  size_t n;
  char *svg = svg_of(&tl, &n), want[160];
  for (int r = 0; r < 4; r++) idle[r] = 100 * (1 - st[r].busy / (t1 - t0)), mean += idle[r] / 4;
  /* rows in rank order, each with its own share */
  const char *at = svg;
  for (int r = 0; r < 4; r++) {
    snprintf(want, sizeof want, ">rank %d</text>", r);
    at = strstr(at, want);
    cr_assert(at, "no row for rank %d", r);
    snprintf(want, sizeof want, "class=\"idle\" font-size=\"12.0\">idle %.1f%%</text>", idle[r]);
    cr_assert(strncmp(strstr(at, "class=\"idle\""), want, strlen(want)) == 0, "rank %d: wanted '%s'", r, want);
  }
  snprintf(want, sizeof want, "class=\"sub\">makespan %.6g cost units, simulated \xc2\xb7 idle fraction %.1f%%", tl.makespan, mean);
  cr_assert(strstr(svg, want), "no subtitle '%s'", want);
  free(svg);
  sched_timeline_free(&tl);
}

/* The legend's colours are the ones viz.h names: F blue, B green, I orange, W purple. */
Test(viz, svg_legend_colours) {
  sched_timeline tl;
  sched_timeline_init(&tl, "x", "unit", 1, 1, 1);
  add(&tl, 0, SCHED_FORWARD, 0, 0, 0, -1, 0, 1);
  add(&tl, 0, SCHED_BACKWARD, 0, 0, 0, -1, 1, 3);
  add(&tl, 0, SCHED_BACKWARD_INPUT, 0, 0, 0, -1, 3, 4);
  add(&tl, 0, SCHED_BACKWARD_WEIGHT, 0, 0, 0, -1, 4, 5);
  size_t n;
  char *svg = svg_of(&tl, &n);
  const char *label[] = {">F  forward<", ">B  backward<", ">I  backward, input grad<", ">W  backward, weight grad<"};
  const char *colour[] = {"#4e79a7", "#59a14f", "#f28e2b", "#b07aa1"};
  const char *cls[] = {"<rect class=\"op F\"", "<rect class=\"op B\"", "<rect class=\"op I\"", "<rect class=\"op W\""};
  for (int k = 0; k < 4; k++) {
    const char *at = strstr(svg, label[k]), *fill = NULL;
    cr_assert(at, "no legend entry %s", label[k]);
    for (const char *p = svg; (p = strstr(p, "fill=\"#")) && p < at; p++) fill = p;
    cr_assert(fill && strncmp(fill + 6, colour[k], 7) == 0, "%s drawn in %.7s, not %s", label[k], fill ? fill + 6 : "?", colour[k]);
    const char *box = strstr(svg, cls[k]); /* the box of chunk 0 in the same colour */
    cr_assert(box && strncmp(strstr(box, "fill=\"") + 6, colour[k], 7) == 0, "%s box", cls[k]);
  }
  free(svg);
  sched_timeline_free(&tl);
}

/* Every compute event is one box, even one that takes no time; boxes of a measured run (whose
 * clock starts far from 0) lie inside the chart; its axis counts milliseconds from the start. */
Test(viz, svg_boxes_inside_the_chart) {
  sched_timeline tl;
  make_v2_seconds(&tl);
  add(&tl, 1, SCHED_FORWARD, 1, 1, 2, -1, tl.ev[0].start + 0.002, tl.ev[0].start + 0.002);
  size_t n;
  char *svg = svg_of(&tl, &n);
  cr_assert_eq(count(svg, "<rect class=\"op "), compute_events(&tl, SCHED_OP_COUNT));
  int boxes = 0;
  for (const char *p = svg; (p = strstr(p, "<rect class=\"op ")); p++, boxes++) {
    double x = atof(strstr(p, " x=\"") + 4), w = atof(strstr(p, " width=\"") + 8);
    cr_assert(x >= 84 - 1e-9 && x + w <= 1200 - 92 + 0.5 + 1e-6, "box %d at x %g, width %g", boxes, x, w);
  }
  double tmax = 0;
  for (const char *p = svg; (p = strstr(p, "class=\"tick\">")); p++) tmax = fmax(tmax, atof(p + 13));
  double t0 = INFINITY, t1 = -INFINITY;
  for (int i = 0; i < tl.n; i++) t0 = fmin(t0, tl.ev[i].start), t1 = fmax(t1, tl.ev[i].end);
  cr_assert(tmax <= (t1 - t0) * 1e3 + 1e-9 && tmax >= 0.5 * (t1 - t0) * 1e3, "last tick %g ms, the step takes %g ms", tmax,
            (t1 - t0) * 1e3);
  free(svg);
  sched_timeline_free(&tl);
}

/* The tail ops are drawn as '#'; a span that is not a whole number of units is scaled. */
Test(viz, ascii_tail_and_scaling) {
  sched_timeline tl;
  make_1f1b(&tl, 4, 8, 1, 2, 0, 1);
  char *out = ascii_of(&tl, 100);
  cr_assert(strstr(out, "(1 column = 1 unit)") && strstr(out, "rank  0 |FfFf......BBFbbfBBFbbfBB.bb.BB.bb##|") &&
                strstr(out, "# reduce/step"),
            "%s", out);
  free(out);
  sched_timeline_free(&tl);
  make_1f1b(&tl, 2, 2, 1, 2, 0, 0.25); /* 9.5 units */
  out = ascii_of(&tl, 100);
  cr_assert(strstr(out, "makespan 9.5 units  (1 column = ") && !strstr(out, "1 column = 1 unit"), "%s", out);
  free(out);
  sched_timeline_free(&tl);
}

/* Events of no length far from zero (a clock at 1e17, where 1 is below the resolution): the
 * drawn range still has a width, so every coordinate is a number and the box is in the chart. */
Test(viz, svg_of_events_without_length_far_from_zero) {
  sched_timeline tl;
  sched_timeline_init(&tl, "1f1b", "unit", 2, 1, 1);
  add(&tl, 0, SCHED_FORWARD, 0, 0, 0, -1, 1e17, 1e17);
  add(&tl, 1, SCHED_FORWARD, 0, 0, 1, -1, 1e17, 1e17);
  size_t n;
  char *svg = svg_of(&tl, &n);
  cr_assert(!strstr(svg, "nan") && !strstr(svg, "inf"), "%s", svg);
  cr_assert_eq(count(svg, "<rect class=\"op "), 2);
  for (const char *p = svg; (p = strstr(p, "<rect class=\"op ")); p++) {
    double x = atof(strstr(p, " x=\"") + 4), w = atof(strstr(p, " width=\"") + 8);
    cr_assert(x >= 84 - 1e-9 && x + w <= 1200 - 92 + 0.5 + 1e-6, "box at x %g, width %g", x, w);
  }
  free(svg);
  sched_timeline_free(&tl);
}

/* A write that fails removes what it left only from a regular file: a link (or a device) named
 * as the output stays, where the writers removed whatever the path named (a link to /dev/full;
 * run as root, /dev/full itself). */
Test(viz, failed_write_leaves_what_is_not_a_regular_file) {
  if (access("/dev/full", W_OK) != 0) cr_skip_test("no writable /dev/full here");
  sched_timeline tl;
  make_1f1b(&tl, 2, 4, 1, 2, 0, 0);
  char *link = tmp_path("full_link");
  unlink(link);
  cr_assert_eq(symlink("/dev/full", link), 0);
  cr_assert_eq(viz_write_trace(&tl, link), CORE_ERUNTIME);
  cr_assert(strstr(core_error_msg(), "No space left"), "%s", core_error_msg());
  cr_assert_eq(viz_write_svg(&tl, link), CORE_ERUNTIME);
  char to[64] = "";
  cr_assert(readlink(link, to, sizeof to - 1) > 0 && strcmp(to, "/dev/full") == 0, "the link is gone");
  unlink(link);
  free(link);
  sched_timeline_free(&tl);
}

/* A trace's own unit is the axis label: escaped as the subtitle is (it went out raw, "a<b&c"
 * making the SVG unreadable); a span below what a scale can divide is refused (the ASCII chart
 * cast a NaN to an int, the SVG drew "nan"); a timeline of events without length draws no idle
 * share (100% on every row, where sim's table said 0%); the ASCII head shows control bytes of a
 * trace's name as '?'. */
Test(viz, odd_units_names_and_spans) {
  sched_timeline tl;
  make_1f1b(&tl, 2, 2, 1, 2, 0, 0);
  snprintf(tl.unit, sizeof tl.unit, "a<b&c");
  size_t n;
  char *svg = svg_of(&tl, &n);
  assert_well_formed(svg);
  cr_assert(strstr(svg, "time (a&lt;b&amp;c)"), "%s", svg);
  free(svg);
  snprintf(tl.schedule, sizeof tl.schedule, "x\x01y\x7f");
  char *a = ascii_of(&tl, 80);
  cr_assert(strstr(a, "x?y? p=2"), "%s", a);
  free(a);
  sched_timeline_free(&tl);

  sched_timeline_init(&tl, "tiny", "unit", 2, 1, 1);
  sched_timeline_add(&tl, (sched_event){.rank = 0, .op = SCHED_FORWARD, .mb = 0, .chunk = 0, .stage = 0, .peer = -1, .start = 0, .end = 0});
  sched_timeline_add(&tl, (sched_event){.rank = 1, .op = SCHED_FORWARD, .mb = 0, .chunk = 0, .stage = 1, .peer = -1, .start = 0, .end = 5e-324});
  cr_assert_eq(viz_check(&tl), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "too short to draw"), "%s", core_error_msg());
  tl.ev[1].end = 0; /* no length at all: drawn on a widened axis, no idle share */
  sched_timeline_stats(&tl);
  svg = svg_of(&tl, &n);
  assert_well_formed(svg);
  cr_assert(strstr(svg, "idle fraction 0.0%") && !strstr(svg, "idle 100.0%"), "%s", svg);
  free(svg);
  sched_timeline_free(&tl);
}
