/* ZeRO-3's parameter gathers as instructions: every compiled family verifies with them under
 * each policy, the gathered count stays within the program's limit, the verifier rejects
 * hand-made misuse naming the instruction, and the simulator charges the gathers as analysed. */
#include <criterion/criterion.h>
#include <string.h>

#include "core/error.h"
#include "schedule/schedule.h"

static sched_program compiled(sched_family f, int p, int v, int m, int keep, int prefetch) {
  sched_shape sh = {.family = f, .p = p, .v = v, .m = m, .zero3 = 1, .keep_gathered = keep, .prefetch = prefetch};
  sched_costs c = sched_costs_unit();
  sched_program pr;
  cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_OK, "%s p=%d v=%d m=%d keep=%d prefetch=%d: %s",
               sched_family_name(f), p, v, m, keep, prefetch, core_error_msg());
  return pr;
}

static int count_op(const sched_program *pr, int r, sched_op op) {
  int n = 0;
  for (int i = 0; i < pr->streams[r].len; i++) n += pr->streams[r].ins[i].op == op;
  return n;
}

static int find_op(const sched_program *pr, int r, sched_op op, int nth) {
  for (int i = 0; i < pr->streams[r].len; i++)
    if (pr->streams[r].ins[i].op == op && nth-- == 0) return i;
  cr_assert_fail("no %s #%d on rank %d", sched_op_name(op), nth, r);
  return -1;
}

static void erase(sched_program *pr, int r, int i) {
  sched_stream *st = &pr->streams[r];
  memmove(&st->ins[i], &st->ins[i + 1], sizeof(sched_instr) * (size_t)(st->len - i - 1));
  st->len--;
}

static void expect_fail(const sched_program *pr, const char *needle) {
  core_error_clear();
  cr_assert_eq(sched_verify(pr), CORE_EINPUT, "verifier accepted a bad program (wanted '%s')", needle);
  cr_assert(strstr(core_error_msg(), needle), "message '%s' lacks '%s'", core_error_msg(), needle);
  cr_assert(strstr(core_error_msg(), "rank "), "message '%s' names no rank", core_error_msg());
}

static double makespan(const sched_program *pr, const sched_costs *c) {
  sched_sim_result res;
  cr_assert_eq(sched_simulate(pr, c, &res, NULL), CORE_OK, "%s", core_error_msg());
  double t = res.makespan;
  sched_sim_result_free(&res);
  return t;
}

static const struct {
  sched_family f;
  int v;
} families[] = {{SCHED_GPIPE, 1},  {SCHED_1F1B, 1},  {SCHED_INTERLEAVED, 2}, {SCHED_INTERLEAVED, 3},
                {SCHED_ZB_H1, 1},  {SCHED_ZB_H2, 1}, {SCHED_ZB_V, 2},         {SCHED_V_HALF, 2},
                {SCHED_ZB_AUTO, 1}};

Test(gather, every_family_verifies_with_its_gathers_under_each_policy) {
  for (size_t k = 0; k < sizeof families / sizeof families[0]; k++)
    for (int keep = 0; keep < 2; keep++)
      for (int pf = 0; pf <= 2; pf++) {
        sched_program pr = compiled(families[k].f, 4, families[k].v, 8, keep, pf);
        int v = families[k].v, want = keep ? v : (pf + 1 < v ? pf + 1 : v);
        cr_assert_eq(pr.gather_limit, want);
        sched_costs c = sched_costs_unit();
        c.gather = 0.25;
        sched_sim_result res;
        cr_assert_eq(sched_simulate(&pr, &c, &res, NULL), CORE_OK);
        for (int r = 0; r < pr.p; r++) {
          int g = count_op(&pr, r, SCHED_GATHER_PARAMS);
          cr_assert_eq(g, count_op(&pr, r, SCHED_RELEASE_PARAMS));
          cr_assert(g >= v, "rank %d gathers %d times for %d chunks", r, g);
          if (keep) cr_assert_eq(g, v, "keep_gathered: one gather per chunk, got %d", g);
          cr_assert(res.ranks[r].peak_gathered >= 1 && res.ranks[r].peak_gathered <= want);
          cr_assert_float_eq(res.ranks[r].gather_time, g * c.gather, 1e-12);
        }
        sched_sim_result_free(&res);
        sched_program_free(&pr);
      }
}

/* Resharding: an interleaved rank gives a chunk back when it moves to another one, so without
 * prefetch it holds one chunk at a time and gathers each chunk more than once. */
Test(gather, resharding_holds_one_chunk_without_prefetch) {
  sched_program pr = compiled(SCHED_INTERLEAVED, 2, 2, 4, 0, 0);
  sched_costs c = sched_costs_unit();
  sched_sim_result res;
  cr_assert_eq(sched_simulate(&pr, &c, &res, NULL), CORE_OK);
  for (int r = 0; r < pr.p; r++) {
    cr_assert_eq(res.ranks[r].peak_gathered, 1);
    cr_assert_gt(count_op(&pr, r, SCHED_GATHER_PARAMS), 2);
  }
  sched_sim_result_free(&res);
  sched_program_free(&pr);
}

Test(gather, misuse_is_rejected_naming_the_instruction) {
  sched_program pr = compiled(SCHED_INTERLEAVED, 2, 2, 4, 0, 0);
  cr_assert_eq(sched_verify(&pr), CORE_OK);
  /* a forward on a chunk that was never gathered */
  erase(&pr, 0, find_op(&pr, 0, SCHED_GATHER_PARAMS, 0));
  expect_fail(&pr, "whose parameters are not gathered");
  sched_program_free(&pr);

  pr = compiled(SCHED_INTERLEAVED, 2, 2, 4, 0, 0); /* chunk 0 not released, then gathered again */
  erase(&pr, 0, find_op(&pr, 0, SCHED_RELEASE_PARAMS, 0));
  pr.gather_limit = 2; /* so that the limit is not what fails first */
  expect_fail(&pr, "gathered already");
  sched_program_free(&pr);

  pr = compiled(SCHED_INTERLEAVED, 2, 2, 4, 0, 0); /* left gathered */
  erase(&pr, 1, find_op(&pr, 1, SCHED_RELEASE_PARAMS, count_op(&pr, 1, SCHED_RELEASE_PARAMS) - 1));
  expect_fail(&pr, "still gathered at the end of the step");
  sched_program_free(&pr);

  pr = compiled(SCHED_INTERLEAVED, 2, 2, 4, 1, 0); /* keep: both chunks gathered; limit lowered */
  pr.gather_limit = 1;
  expect_fail(&pr, "more than the program's limit of 1");
  sched_program_free(&pr);

  pr = compiled(SCHED_1F1B, 2, 1, 4, 0, 1); /* a gather in a program that shards nothing */
  pr.gather_limit = 0;
  expect_fail(&pr, "parameters are not sharded");
  pr.gather_limit = 1;
  pr.streams[0].ins[find_op(&pr, 0, SCHED_GATHER_PARAMS, 0)].chunk = 3;
  expect_fail(&pr, "names chunk 3 of 1");
  sched_program_free(&pr);
}

Test(gather, shape_flags_need_zero3) {
  sched_shape sh = {.family = SCHED_1F1B, .p = 2, .v = 1, .m = 2, .prefetch = 1};
  sched_costs c = sched_costs_unit();
  sched_program pr;
  cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "--zero3"));
  sh.zero3 = 1, sh.prefetch = 65;
  cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_EINPUT);
}

/* One rank, one chunk, one micro-batch: the gather cannot hide, g + F + B (a whole backward
 * costs b + w). */
Test(gather, a_lone_stage_pays_its_gather_once) {
  for (int keep = 0; keep < 2; keep++) {
    sched_program pr = compiled(SCHED_1F1B, 1, 1, 1, keep, 1);
    sched_costs c = sched_costs_unit();
    c.f = 2, c.b = 3, c.w = 1.5, c.gather = 0.75, c.reduce = c.step = c.tied = 0;
    double t = makespan(&pr, &c);
    cr_assert_float_eq(t, 0.75 + 2 + 3 + 1.5, 1e-12, "keep=%d: makespan %g", keep, t);
    cr_assert_eq(count_op(&pr, 0, SCHED_GATHER_PARAMS), 1);
    sched_program_free(&pr);
  }
}

/* With prefetch a gather no longer than one op hides behind the previous op: only rank 0's
 * first gather shows, so the step is exactly that much longer than without ZeRO-3. Without
 * prefetch an interleaved rank waits for each of its gathers. Prefetch is never worse. */
Test(gather, prefetch_hides_gathers_no_longer_than_an_op) {
  for (size_t k = 0; k < sizeof families / sizeof families[0]; k++) {
    sched_shape sh = {.family = families[k].f, .p = 4, .v = families[k].v, .m = 8};
    sched_costs c = sched_costs_unit();
    c.gather = 0.5;
    sched_program base;
    cr_assert_eq(sched_compile(&sh, &c, &base), CORE_OK);
    double t0 = makespan(&base, &c);
    sched_program_free(&base);
    double prev = 0;
    for (int pf = 0; pf <= 2; pf++) {
      sched_program pr = compiled(families[k].f, 4, families[k].v, 8, 0, pf);
      double t = makespan(&pr, &c);
      if (pf >= 1)
        cr_assert_float_eq(t, t0 + c.gather, 1e-9, "%s v=%d prefetch %d: %g, unsharded %g",
                           sched_family_name(families[k].f), families[k].v, pf, t, t0);
      else if (families[k].v > 1)
        cr_assert_gt(t, t0 + c.gather, "%s: without prefetch the gathers should show", sched_family_name(families[k].f));
      if (pf) cr_assert_leq(t, prev + 1e-9, "prefetch %d is worse than %d", pf, pf - 1);
      prev = t;
      sched_program_free(&pr);
    }
  }
}

/* The memory model: gathered bytes at most, with the stage's parameter bytes. */
Test(gather, gather_buffers_counted_in_bytes) {
  sched_program pr = compiled(SCHED_INTERLEAVED, 2, 2, 4, 1, 0);
  sched_costs c = sched_costs_unit();
  double bytes[4] = {100, 200, 400, 800}; /* virtual stages 0..3: rank 0 holds 0 and 2 */
  c.stage_param_bytes = bytes;
  sched_sim_result res;
  cr_assert_eq(sched_simulate(&pr, &c, &res, NULL), CORE_OK);
  cr_assert_float_eq(res.ranks[0].peak_gather_bytes, 100 + 400, 1e-9);
  cr_assert_float_eq(res.ranks[1].peak_gather_bytes, 200 + 800, 1e-9);
  sched_sim_result_free(&res);
  sched_program_free(&pr);
}
