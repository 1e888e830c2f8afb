/* Property tests of the schedule compilers: every family and shape compiles and verifies, the
 * unit-cost bubbles equal the closed forms, and each rank allocates exactly its peak number of
 * in-flight activations. */
#include <criterion/criterion.h>
#include <math.h>

#include "core/error.h"
#include "schedule/schedule.h"

static void compile_ok(sched_family f, int p, int v, int m, const sched_costs *c, sched_program *pr) {
  sched_shape sh = {.family = f, .p = p, .v = v, .m = m};
  int rc = sched_compile(&sh, c, pr);
  cr_assert_eq(rc, CORE_OK, "%s p=%d v=%d m=%d: %s", sched_family_name(f), p, v, m, core_error_msg());
}

static double max_span(const sched_sim_result *res) {
  double s = 0;
  for (int r = 0; r < res->p; r++) s = res->ranks[r].span > s ? res->ranks[r].span : s;
  return s;
}

Test(compile, gpipe_and_1f1b_every_shape) {
  sched_costs c = sched_costs_unit(); /* F = B = W = 1: a full backward costs 2 */
  for (int f = SCHED_GPIPE; f <= SCHED_1F1B; f++)
    for (int p = 1; p <= 16; p++)
      for (int m = 1; m <= 64; m++) {
        sched_program pr;
        compile_ok((sched_family)f, p, 1, m, &c, &pr);
        sched_sim_result res;
        cr_assert_eq(sched_simulate(&pr, &c, &res, NULL), CORE_OK, "%s", core_error_msg());
        /* bubble: (p-1)/(m+p-1) of the span, exactly */
        double want = (double)(p - 1) / (m + p - 1);
        cr_assert(fabs(res.bubble_rate - want) < 1e-12, "%s p=%d m=%d bubble %.15g want %.15g",
                  sched_family_name((sched_family)f), p, m, res.bubble_rate, want);
        cr_assert(fabs(max_span(&res) - (m + p - 1) * 3.0) < 1e-9);
        for (int r = 0; r < p; r++) {
          int peak = f == SCHED_GPIPE ? m : (p - r < m ? p - r : m);
          cr_assert_eq(res.ranks[r].peak_activations, peak, "%s p=%d m=%d rank %d: peak %d want %d",
                       sched_family_name((sched_family)f), p, m, r, res.ranks[r].peak_activations, peak);
          cr_assert_eq(pr.nslots[r], peak, "rank %d allocates %d slots, peak is %d", r, pr.nslots[r], peak);
        }
        sched_sim_result_free(&res);
        sched_program_free(&pr);
      }
}

Test(compile, interleaved_every_shape) {
  sched_costs c = sched_costs_unit();
  for (int p = 1; p <= 16; p++)
    for (int v = 2; v <= 4; v++)
      for (int m = 1; m <= 64; m++) {
        sched_program pr;
        compile_ok(SCHED_INTERLEAVED, p, v, m, &c, &pr);
        sched_sim_result res;
        cr_assert_eq(sched_simulate(&pr, &c, &res, NULL), CORE_OK, "%s", core_error_msg());
        /* per-chunk costs f = 1, b = 2 (one stage costs v times that): when m is a multiple of p
         * the bubble time is (p-1)(F+B)/v = (p-1)(f+b) on the longest rank. */
        double busy = m * v * 3.0;
        for (int r = 0; r < p; r++) cr_assert(fabs(res.ranks[r].busy - busy) < 1e-9);
        if (m % p == 0)
          cr_assert(fabs(max_span(&res) - busy - (p - 1) * 3.0) < 1e-9,
                    "interleaved p=%d v=%d m=%d: bubble %g want %g", p, v, m, max_span(&res) - busy,
                    (p - 1) * 3.0);
        else /* never worse than the plain 1F1B bubble, (p-1)(F+B) */
          cr_assert(max_span(&res) - busy <= (p - 1) * 3.0 * v + 1e-9);
        sched_sim_result_free(&res);
        sched_program_free(&pr);
      }
}

Test(compile, interleaved_beats_1f1b) {
  sched_costs c = sched_costs_unit();
  sched_program a, b;
  c.f = 2, c.b = 2, c.w = 2; /* 1F1B: one chunk of cost 2 per op */
  compile_ok(SCHED_1F1B, 4, 1, 8, &c, &a);
  sched_sim_result ra, rb;
  cr_assert_eq(sched_simulate(&a, &c, &ra, NULL), 0);
  sched_costs ci = sched_costs_unit(); /* two chunks of half the cost */
  compile_ok(SCHED_INTERLEAVED, 4, 2, 8, &ci, &b);
  cr_assert_eq(sched_simulate(&b, &ci, &rb, NULL), 0);
  cr_assert(rb.makespan < ra.makespan, "interleaved %g vs 1f1b %g", rb.makespan, ra.makespan);
  cr_assert(fabs(ra.makespan - rb.makespan - 3 * 3.0) < 1e-9); /* (p-1)(F+B)(1 - 1/v) */
  sched_sim_result_free(&ra), sched_sim_result_free(&rb);
  sched_program_free(&a), sched_program_free(&b);
}

Test(compile, bad_shapes_are_input_errors) {
  sched_program pr;
  sched_costs c = sched_costs_unit();
  sched_shape bad[] = {
      {.family = SCHED_1F1B, .p = 0, .v = 1, .m = 4},        {.family = SCHED_1F1B, .p = 4, .v = 1, .m = 0}, {.family = SCHED_GPIPE, .p = 4, .v = 1, .m = -3},
      {.family = SCHED_INTERLEAVED, .p = 4, .v = 1, .m = 8}, {.family = SCHED_1F1B, .p = 4, .v = 2, .m = 8}, {.family = SCHED_GPIPE, .p = 2, .v = 0, .m = 8},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    core_error_clear();
    cr_assert_eq(sched_compile(&bad[i], &c, &pr), CORE_EINPUT, "shape %zu accepted", i);
    cr_assert(strlen(core_error_msg()) > 10);
  }
}

Test(compile, tied_weights_add_reduction_on_end_ranks) {
  sched_shape sh = {.family = SCHED_1F1B, .p = 4, .v = 1, .m = 4, .tied = 1};
  sched_costs c = sched_costs_unit();
  sched_program pr;
  cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_OK, "%s", core_error_msg());
  for (int r = 0; r < 4; r++) {
    int n = 0;
    for (int i = 0; i < pr.streams[r].len; i++) n += pr.streams[r].ins[i].op == SCHED_REDUCE_TIED_GRADS;
    cr_assert_eq(n, (r == 0 || r == 3) ? 1 : 0);
    sched_op last = (sched_op)pr.streams[r].ins[pr.streams[r].len - 1].op;
    cr_assert_eq(last, SCHED_OPTIMIZER_STEP);
  }
  sched_program_free(&pr);
}

Test(compile, loads_on_first_and_last_stage_only) {
  sched_shape sh = {.family = SCHED_INTERLEAVED, .p = 3, .v = 2, .m = 5};
  sched_costs c = sched_costs_unit();
  sched_program pr;
  cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_OK, "%s", core_error_msg());
  int loads = 0;
  for (int r = 0; r < pr.p; r++)
    for (int i = 0; i < pr.streams[r].len; i++)
      if (pr.streams[r].ins[i].op == SCHED_LOAD_MICROBATCH) {
        int s = pr.stage_of[r * pr.v + pr.streams[r].ins[i].chunk];
        cr_assert(s == 0 || s == 5);
        loads++;
      }
  cr_assert_eq(loads, 2 * 5);
  sched_program_free(&pr);
}

/* The makespan of a forward-only program under unit costs and no latency, worked out here from
 * its forwards alone: each runs when its rank has run the ones before it and the previous stage
 * has run its micro-batch. */
static double forward_only_makespan(const sched_program *pr) {
  int S = pr->p * pr->v, pc[8] = {0};
  double done[24 * 16], free_at[8] = {0}, end = 0; /* [stage * m + mb]: when its forward ended */
  cr_assert(pr->p <= 8 && S * pr->m <= 24 * 16);
  for (int k = 0; k < S * pr->m; k++) done[k] = -1;
  for (int moved = 1; moved;) {
    moved = 0;
    for (int r = 0; r < pr->p; r++)
      for (; pc[r] < pr->streams[r].len; pc[r]++) {
        const sched_instr *in = &pr->streams[r].ins[pc[r]];
        if (in->op != SCHED_FORWARD) continue;
        int s = pr->stage_of[r * pr->v + in->chunk];
        double ready = s > 0 ? done[(s - 1) * pr->m + in->mb] : 0;
        if (ready < 0) break; /* its input is not made yet */
        double t = (ready > free_at[r] ? ready : free_at[r]) + 1;
        done[s * pr->m + in->mb] = free_at[r] = t, end = t > end ? t : end, moved = 1;
      }
  }
  for (int r = 0; r < pr->p; r++) cr_assert_eq(pc[r], pr->streams[r].len, "rank %d's forwards do not run", r);
  return end;
}

Test(compile, inference_forward_only) {
  sched_costs c = sched_costs_unit();
  for (int p = 1; p <= 8; p++)
    for (int v = 1; v <= 3; v++)
      for (int m = 1; m <= 16; m++) {
        sched_program pr;
        compile_ok(SCHED_INFERENCE, p, v, m, &c, &pr);
        cr_assert(pr.forward_only);
        for (int r = 0; r < p; r++)
          for (int i = 0; i < pr.streams[r].len; i++) {
            sched_op op = (sched_op)pr.streams[r].ins[i].op;
            cr_assert(op != SCHED_BACKWARD && op != SCHED_REDUCE_GRADS && op != SCHED_OPTIMIZER_STEP);
          }
        sched_sim_result res;
        cr_assert_eq(sched_simulate(&pr, &c, &res, NULL), CORE_OK);
        double want = forward_only_makespan(&pr);
        cr_assert(fabs(res.makespan - want) < 1e-9, "p=%d v=%d m=%d: makespan %g, its forwards take %g", p, v, m,
                  res.makespan, want);
        if (v == 1) cr_assert(fabs(want - (m + p - 1)) < 1e-9, "p=%d m=%d: %g, not m + p - 1", p, m, want);
        sched_sim_result_free(&res);
        sched_program_free(&pr);
      }
}

/* Forward only, several chunks per rank: a rank runs its forwards in micro-batch order, chunk by
 * chunk within a micro-batch (DeepSpeed's InferenceSchedule). */
Test(compile, inference_runs_micro_batches_in_order) {
  sched_costs c = sched_costs_unit();
  for (int p = 1; p <= 4; p++)
    for (int v = 2; v <= 3; v++)
      for (int m = 2; m <= 6; m++) {
        sched_program pr;
        compile_ok(SCHED_INFERENCE, p, v, m, &c, &pr);
        for (int r = 0; r < p; r++) {
          int last = -1;
          for (int i = 0; i < pr.streams[r].len; i++) {
            const sched_instr *in = &pr.streams[r].ins[i];
            if (in->op != SCHED_FORWARD) continue;
            int at = in->mb * v + in->chunk;
            cr_assert_gt(at, last, "inference p=%d v=%d m=%d rank %d: F%d of chunk %d after F%d of chunk %d", p, v, m,
                         r, in->mb, in->chunk, last / v, last % v);
            last = at;
          }
          cr_assert_eq(last, m * v - 1);
        }
        sched_program_free(&pr);
      }
}

/* The simulator's peak of live (chunk, micro-batch) pairs and the slots lowering allocates are
 * counted apart; both must be the same number for every family (lowering allocates exactly the
 * peak). */
Test(compile, every_family_allocates_its_peak) {
  sched_costs c = sched_costs_unit();
  for (int f = SCHED_GPIPE; f < SCHED_CUSTOM; f++)
    for (int p = 1; p <= 6; p++)
      for (int m = 1; m <= 16; m++) {
        int v = f == SCHED_INTERLEAVED || sched_family_is_v((sched_family)f) ? 2 : 1;
        if (f == SCHED_DUALPIPE_V && m < 2 * p) continue;
        sched_program pr;
        compile_ok((sched_family)f, p, v, m, &c, &pr);
        sched_sim_result res;
        cr_assert_eq(sched_simulate(&pr, &c, &res, NULL), CORE_OK);
        for (int r = 0; r < p; r++)
          cr_assert_eq(res.ranks[r].peak_activations, pr.nslots[r], "%s p=%d m=%d rank %d: peak %d, %d slots",
                       sched_family_name((sched_family)f), p, m, r, res.ranks[r].peak_activations, pr.nslots[r]);
        sched_sim_result_free(&res);
        sched_program_free(&pr);
      }
}

Test(compile, lowering_takes_compute_actions_only) {
  sched_shape sh = {.family = SCHED_1F1B, .p = 2, .v = 1, .m = 2};
  sched_costs c = sched_costs_unit();
  sched_program compute, full;
  cr_assert_eq(sched_compile_compute(&sh, &c, &compute), CORE_OK, "%s", core_error_msg());
  sched_push(&compute, 0, (sched_instr){.op = SCHED_SEND_ACT, .mb = 0, .chunk = 0, .peer = 1, .slot = -1, .aslot = -1});
  core_error_clear();
  cr_assert_eq(sched_lower(&compute, &c, &full), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "lowering takes compute actions only (rank 0 #"), "%s", core_error_msg());
  sched_program_free(&compute);
}
