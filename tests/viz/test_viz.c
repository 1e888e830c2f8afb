/* viz: trace round trip, SVG and terminal charts; JSON reader on good and bad input. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/json.h"
#include "schedule/schedule.h"
#include "viz/viz.h"

static void simulated(sched_family f, int p, int v, int m, sched_timeline *tl) {
  sched_shape sh = {.family = f, .p = p, .v = v, .m = m, .tied = 1};
  sched_costs c = sched_costs_unit();
  c.comm = 0.125, c.reduce = 1;
  sched_program pr;
  cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_OK, "%s", core_error_msg());
  sched_timeline_init(tl, sched_family_name(f), "unit", p, v, m);
  sched_sim_result res;
  cr_assert_eq(sched_simulate(&pr, &c, &res, tl), CORE_OK);
  sched_sim_result_free(&res);
  sched_program_free(&pr);
}

static char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  cr_assert(f);
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  rewind(f);
  char *b = malloc(*n + 1);
  cr_assert_eq(fread(b, 1, *n, f), *n);
  b[*n] = 0;
  fclose(f);
  return b;
}

Test(viz, trace_round_trip) {
  sched_timeline tl, back;
  simulated(SCHED_INTERLEAVED, 3, 2, 5, &tl);
  char path[] = "/tmp/brigade_trace_XXXXXX";
  close(mkstemp(path));
  cr_assert_eq(viz_write_trace(&tl, path), CORE_OK);
  cr_assert_eq(viz_read_trace(path, &back), CORE_OK, "%s", core_error_msg());
  cr_assert_str_eq(back.schedule, "interleaved");
  cr_assert_eq(back.p, 3);
  cr_assert_eq(back.v, 2);
  cr_assert_eq(back.m, 5);
  cr_assert_eq(back.n, tl.n);
  cr_assert_eq(back.makespan, tl.makespan);
  cr_assert_eq(back.bubble_rate, tl.bubble_rate);
  for (int i = 0; i < tl.n; i++) {
    cr_assert(memcmp(&tl.ev[i].start, &back.ev[i].start, sizeof(double)) == 0);
    cr_assert_eq(tl.ev[i].end, back.ev[i].end);
    cr_assert_eq(tl.ev[i].op, back.ev[i].op);
    cr_assert_eq(tl.ev[i].mb, back.ev[i].mb);
    cr_assert_eq(tl.ev[i].rank, back.ev[i].rank);
    cr_assert_eq(tl.ev[i].stage, back.ev[i].stage);
  }
  sched_timeline_stats(&back);
  cr_assert(back.bubble_rate - tl.bubble_rate < 1e-12 && tl.bubble_rate - back.bubble_rate < 1e-12);
  size_t n;
  char *text = slurp(path, &n); /* Chrome's format: traceEvents with complete events */
  cr_assert(strstr(text, "\"traceEvents\"") && strstr(text, "\"ph\":\"X\"") && strstr(text, "\"name\":\"F0.c0\""));
  free(text);
  sched_timeline_free(&tl), sched_timeline_free(&back);
  unlink(path);
}

Test(viz, svg_and_ascii) {
  sched_timeline tl;
  simulated(SCHED_1F1B, 4, 1, 8, &tl);
  char path[] = "/tmp/brigade_svg_XXXXXX";
  close(mkstemp(path));
  cr_assert_eq(viz_write_svg(&tl, path), CORE_OK);
  size_t n;
  char *svg = slurp(path, &n);
  cr_assert(strncmp(svg, "<svg", 4) == 0);
  cr_assert(strstr(svg, "</svg>\n") == svg + n - 7);
  cr_assert(strstr(svg, "1f1b") && strstr(svg, "bubble rate"));
  int rects = 0;
  for (char *s = svg; (s = strstr(s, "<rect")); s++) rects++;
  int compute = 0;
  for (int i = 0; i < tl.n; i++) compute += sched_op_is_compute((sched_op)tl.ev[i].op);
  cr_assert(rects >= compute + 4, "%d rects for %d compute events", rects, compute);
  free(svg);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  viz_write_ascii(&tl, f, 100);
  fclose(f);
  int lines = 0;
  for (char *s = buf; (s = strstr(s, "rank ")); s++) lines++;
  cr_assert_eq(lines, 4);
  cr_assert(strstr(buf, "rank  0 |F") && strstr(buf, "rank  3 |."), "%s", buf);
  free(buf);
  sched_timeline_free(&tl);
  unlink(path);
}

static void bad_json(const char *text, const char *needle) {
  core_json *j;
  core_error_clear();
  cr_assert_eq(core_json_parse(text, strlen(text), "x.json", &j), CORE_EINPUT, "accepted %s", text);
  cr_assert(strstr(core_error_msg(), needle), "'%s' lacks '%s'", core_error_msg(), needle);
}

Test(json, good_and_bad) {
  const char *t = "{\"a\": [1, 2.5e3, -0.5, true, null], \"s\": \"x\\u00e9\\ud83d\\ude00\\n\", \"o\": {}}";
  core_json *j;
  cr_assert_eq(core_json_parse(t, strlen(t), "x.json", &j), CORE_OK, "%s", core_error_msg());
  cr_assert_eq(core_json_at(core_json_get(j, "a"), 1)->num, 2500);
  cr_assert_eq(core_json_get(j, "a")->len, 5);
  cr_assert_str_eq(core_json_get(j, "s")->str, "x\xc3\xa9\xf0\x9f\x98\x80\n");
  cr_assert_null(core_json_get(j, "missing"));
  core_json_free(j);
  bad_json("{\"a\": 1", "x.json:1:8");
  bad_json("{\"a\": 1,\n \"b\" 2}", "x.json:2:6: expected ':'");
  bad_json("[1, 2,]", "unexpected character");
  bad_json("\"abc", "unterminated");
  bad_json("\"\\q\"", "bad escape");
  bad_json("\"\\ud800\"", "surrogate");
  bad_json("1e999", "bad number");
  bad_json("[1] 2", "trailing");
  bad_json("", "unexpected end");
  char deep[400];
  memset(deep, '[', sizeof deep - 1);
  deep[sizeof deep - 1] = 0;
  bad_json(deep, "too deep");
}

Test(viz, read_trace_rejects_foreign_files) {
  char path[] = "/tmp/brigade_bad_trace_XXXXXX";
  int fd = mkstemp(path);
  const char *t = "{\"traceEvents\": []}";
  cr_assert_eq(write(fd, t, strlen(t)), (ssize_t)strlen(t));
  close(fd);
  sched_timeline tl;
  cr_assert_eq(viz_read_trace(path, &tl), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "not a brigade trace"));
  cr_assert_eq(viz_read_trace("/nonexistent.json", &tl), CORE_EINPUT);
  unlink(path);
}
