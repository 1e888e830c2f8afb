/* Simulator semantics: latencies, per-stage costs, split backward, timeline events. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

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
  /* the tied reduction is a meeting: rank 1 gets there at 7 and waits for rank 0 (at 9), so
   * both leave it at 9.5; every event names its virtual stage (here the rank's) */
  int tied = 0;
  for (int i = 0; i < tl.n; i++) {
    const sched_event *e = &tl.ev[i];
    cr_assert_eq(e->stage, e->chunk < 0 ? -1 : pr.stage_of[e->rank * pr.v + e->chunk], "event %d", i);
    if (e->op != SCHED_REDUCE_TIED_GRADS) continue;
    tied++;
    cr_assert(fabs(e->end - 9.5) < 1e-9, "rank %d leaves the tied reduction at %g", e->rank, e->end);
  }
  cr_assert_eq(tied, 2);
  /* idle over the whole step, tail included: 1 - 12 busy / (2 ranks x 12.5) */
  cr_assert(fabs(res.idle_fraction - 0.52) < 1e-12, "idle fraction %g", res.idle_fraction);
  /* the statistics do not depend on where the clock starts (measured runs start far from 0) */
  double makespan = tl.makespan, bubble = tl.bubble_rate;
  for (int i = 0; i < tl.n; i++) tl.ev[i].start += 1000, tl.ev[i].end += 1000;
  sched_timeline_stats(&tl);
  cr_assert(fabs(tl.makespan - makespan) < 1e-9 && fabs(tl.bubble_rate - bubble) < 1e-12,
            "shifted by 1000: makespan %g bubble %g, was %g %g", tl.makespan, tl.bubble_rate, makespan, bubble);
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

/* The time of one compute op as the cost model documents it: a full backward is b + w plus the
 * data-parallel traffic of its weight gradient, W is w plus that traffic. */
static double op_cost(const sched_costs *c, sched_op op, int s) {
  double f = c->stage_f ? c->stage_f[s] : c->f, b = c->stage_b ? c->stage_b[s] : c->b;
  double w = c->stage_w ? c->stage_w[s] : c->w, dp = c->stage_dp_w ? c->stage_dp_w[s] : c->dp_w;
  switch (op) {
  case SCHED_FORWARD: return f;
  case SCHED_BACKWARD: return b + w + dp;
  case SCHED_BACKWARD_INPUT: return b;
  default: return w + dp;
  }
}

/* Without latency, the transfers lowering adds never hold a compute op back: each rank's
 * compute ops start as soon as the rank is free and their inputs exist (F after the previous
 * stage's F, B or I after its own F and the next stage's B or I, W after its I), in the order the
 * program gives them, and each takes its cost. Checked against the simulator's events for every
 * family, with uneven per-stage costs and a data-parallel share in W. */
Test(sim, lowering_adds_no_wait_without_latency) {
  double sf[8], sb[8], sw[8], sdp[8];
  for (int s = 0; s < 8; s++) sf[s] = 1 + 0.5 * (s % 3), sb[s] = 1.25 * sf[s], sw[s] = 0.75 + 0.25 * (s % 2), sdp[s] = 0.125 * s;
  for (int f = SCHED_GPIPE; f < SCHED_CUSTOM; f++)
    for (int p = 1; p <= 4; p++)
      for (int m = 1; m <= 10; m++)
        for (int uneven = 0; uneven < 2; uneven++) {
          int v = f == SCHED_INTERLEAVED || f == SCHED_ZB_V || f == SCHED_DUALPIPE_V ? 2 : 1;
          if (f == SCHED_DUALPIPE_V && m < 2 * p) continue;
          sched_shape sh = {.family = (sched_family)f, .p = p, .v = v, .m = m};
          sched_costs c = sched_costs_unit();
          if (uneven) c.stage_f = sf, c.stage_b = sb, c.stage_w = sw, c.stage_dp_w = sdp;
          else c.w = 0.5, c.dp_w = 0.25;
          sched_program pr;
          cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_OK, "%s", core_error_msg());
          sched_timeline tl;
          sched_timeline_init(&tl, sched_family_name(sh.family), "unit", p, v, m);
          sched_sim_result res;
          cr_assert_eq(sched_simulate(&pr, &c, &res, &tl), CORE_OK);
          /* the ASAP times of each rank's compute order */
          int S = p * v;
          double fe[8 * 10], be[8 * 10], free_at[4] = {0}, *start[4];
          int pc[4] = {0};
          for (int k = 0; k < S * m; k++) fe[k] = be[k] = -1;
          for (int r = 0; r < p; r++) start[r] = calloc((size_t)pr.streams[r].len, sizeof(double));
          for (int moved = 1; moved;) {
            moved = 0;
            for (int r = 0; r < p; r++)
              for (; pc[r] < pr.streams[r].len; pc[r]++) {
                const sched_instr *in = &pr.streams[r].ins[pc[r]];
                if (!sched_op_is_compute((sched_op)in->op)) continue;
                int s = pr.stage_of[r * v + in->chunk], j = in->mb;
                double t = free_at[r], need[2] = {0, 0};
                if (in->op == SCHED_FORWARD) need[0] = s > 0 ? fe[(s - 1) * m + j] : 0;
                else if (in->op == SCHED_BACKWARD_WEIGHT) need[0] = be[s * m + j];
                else need[0] = fe[s * m + j], need[1] = s < S - 1 ? be[(s + 1) * m + j] : 0;
                if (need[0] < 0 || need[1] < 0) break; /* waits for another rank */
                t = fmax(t, fmax(need[0], need[1]));
                start[r][pc[r]] = t;
                free_at[r] = t + op_cost(&c, (sched_op)in->op, s);
                if (in->op == SCHED_FORWARD) fe[s * m + j] = free_at[r];
                else if (in->op != SCHED_BACKWARD_WEIGHT) be[s * m + j] = free_at[r];
                moved = 1;
              }
          }
          int next[4] = {0};
          for (int i = 0; i < tl.n; i++) { /* a rank's events come in its stream order */
            const sched_event *e = &tl.ev[i];
            if (!sched_op_is_compute((sched_op)e->op)) continue;
            int r = e->rank;
            while (!sched_op_is_compute((sched_op)pr.streams[r].ins[next[r]].op)) next[r]++;
            double want = start[r][next[r]++];
            cr_assert(fabs(e->start - want) < 1e-9, "%s p=%d m=%d%s: rank %d %c%d of stage %d starts at %g, its inputs allow %g",
                      sched_family_name(sh.family), p, m, uneven ? " (per-stage costs)" : "", r,
                      sched_op_letter((sched_op)e->op), e->mb, e->stage, e->start, want);
            double d = op_cost(&c, (sched_op)e->op, e->stage);
            cr_assert(fabs(e->end - e->start - d) < 1e-9, "%s p=%d m=%d: %c%d of stage %d lasts %g, costs %g",
                      sched_family_name(sh.family), p, m, sched_op_letter((sched_op)e->op), e->mb, e->stage,
                      e->end - e->start, d);
          }
          for (int r = 0; r < p; r++) free(start[r]);
          sched_timeline_free(&tl);
          sched_sim_result_free(&res);
          sched_program_free(&pr);
        }
}
