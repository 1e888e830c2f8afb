/* Simulator semantics: latencies, per-stage costs, split backward, timeline events. */
#include <criterion/criterion.h>
#include <math.h>

#include "core/error.h"
#include "schedule/schedule.h"

Test(sim, comm_latency_adds_to_each_cross_rank_hop) {
  /* p stages, one micro-batch: the critical path is p forwards, p backwards, 2(p-1) hops */
  for (int p = 1; p <= 6; p++) {
    sched_shape sh = {.family = SCHED_1F1B, .p = p, .v = 1, .m = 1};
    sched_costs c = sched_costs_unit();
    c.comm = 0.25;
    sched_program pr;
    cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_OK, "%s", core_error_msg());
    sched_sim_result res;
    cr_assert_eq(sched_simulate(&pr, &c, &res, NULL), CORE_OK);
    cr_assert(fabs(res.makespan - (3.0 * p + 0.5 * (p - 1))) < 1e-9, "p=%d makespan %g", p, res.makespan);
    sched_sim_result_free(&res);
    sched_program_free(&pr);
  }
}

Test(sim, slowest_stage_sets_the_pace) {
  double f[4] = {1, 1, 3, 1}, b[4] = {1, 1, 3, 1}, w[4] = {0, 0, 0, 0};
  sched_costs c = sched_costs_unit();
  c.stage_f = f, c.stage_b = b, c.stage_w = w;
  sched_shape sh = {.family = SCHED_1F1B, .p = 4, .v = 1, .m = 16};
  sched_program pr;
  cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_OK, "%s", core_error_msg());
  sched_sim_result res;
  cr_assert_eq(sched_simulate(&pr, &c, &res, NULL), CORE_OK);
  cr_assert(res.makespan >= 16 * 6.0); /* the slow stage alone is busy 16 * (3 + 3) */
  cr_assert(fabs(res.ranks[2].busy - 96) < 1e-9);
  cr_assert(res.ranks[0].idle > res.ranks[2].idle);
  sched_sim_result_free(&res);
  sched_program_free(&pr);
}

Test(sim, tail_costs_and_events) {
  sched_shape sh = {.family = SCHED_GPIPE, .p = 2, .v = 1, .m = 2, .tied = 1};
  sched_costs c = sched_costs_unit();
  c.tied = 0.5, c.reduce = 2, c.step = 1;
  sched_program pr;
  cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_OK, "%s", core_error_msg());
  sched_timeline tl;
  sched_timeline_init(&tl, "gpipe", "unit", 2, 1, 2);
  sched_sim_result res;
  cr_assert_eq(sched_simulate(&pr, &c, &res, &tl), CORE_OK);
  /* compute ends at (m + p - 1) * 3 = 9 on rank 0; then tied 0.5, reduce 2, step 1 */
  cr_assert(fabs(res.makespan - 12.5) < 1e-9, "makespan %g", res.makespan);
  cr_assert_eq(tl.makespan, res.makespan);
  int compute = 0;
  for (int i = 0; i < tl.n; i++) compute += sched_op_is_compute((sched_op)tl.ev[i].op);
  cr_assert_eq(compute, 2 * 2 * 2);
  sched_timeline_stats(&tl);
  cr_assert(fabs(tl.bubble_rate - res.bubble_rate) < 1e-12);
  sched_timeline_free(&tl);
  sched_sim_result_free(&res);
  sched_program_free(&pr);
}

Test(sim, idle_fraction_and_memory_bytes) {
  sched_shape sh = {.family = SCHED_1F1B, .p = 4, .v = 1, .m = 8};
  sched_costs c = sched_costs_unit();
  c.act_bytes = 1 << 20;
  sched_program pr;
  cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_OK);
  sched_sim_result res;
  cr_assert_eq(sched_simulate(&pr, &c, &res, NULL), CORE_OK);
  /* zero-bubble paper, p=4 m=8, F=B=W=1: 1F1B span 33 */
  cr_assert(fabs(res.makespan - 33) < 1e-9);
  cr_assert(fabs(res.idle_fraction - (1 - 4 * 24.0 / (4 * 33))) < 1e-12);
  cr_assert_eq(res.ranks[0].peak_bytes, 4.0 * (1 << 20));
  sched_sim_result_free(&res);
  sched_program_free(&pr);
}
