/* DualPipeV (schedule/compile.c): every shape with m >= 2p compiles and verifies; every
 * (stage, micro-batch) gets one forward and one backward, whole or split into I then W on the
 * same rank; each chunk's backwards and weight halves run in micro-batch order (so weight
 * gradients add up as in a single process); with unit costs the step takes 6m + p - 1 (zb-v's
 * makespan: p - 1 units of bubble) while no rank holds more than 2p + 2 chunk activations at
 * once (zb-v: up to 6p - 1); shapes it cannot run are input errors. */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "core/error.h"
#include "schedule/schedule.h"

static void check_orders(const sched_program *pr) {
  int S = pr->p * 2, m = pr->m;
  int *f = calloc((size_t)S * m, sizeof(int)), *b = calloc((size_t)S * m, sizeof(int));
  int *i = calloc((size_t)S * m, sizeof(int)), *w = calloc((size_t)S * m, sizeof(int));
  for (int r = 0; r < pr->p; r++) {
    int last_b[2] = {-1, -1}, last_w[2] = {-1, -1};
    const sched_stream *st = &pr->streams[r];
    for (int k = 0; k < st->len; k++) {
      const sched_instr *in = &st->ins[k];
      if (!sched_op_is_compute((sched_op)in->op)) continue;
      int s = pr->stage_of[r * 2 + in->chunk], at = s * m + in->mb;
      cr_assert(in->mb >= 0 && in->mb < m);
      switch (in->op) {
      case SCHED_FORWARD: f[at]++; break;
      case SCHED_BACKWARD:
      case SCHED_BACKWARD_INPUT:
        (in->op == SCHED_BACKWARD ? b : i)[at]++;
        cr_assert_gt(in->mb, last_b[in->chunk], "p=%d m=%d rank %d chunk %d: backward of %d after %d", pr->p, m,
                     r, in->chunk, in->mb, last_b[in->chunk]);
        last_b[in->chunk] = in->mb;
        if (in->op == SCHED_BACKWARD) { /* a whole backward adds its weight gradient now */
          cr_assert_gt(in->mb, last_w[in->chunk]);
          last_w[in->chunk] = in->mb;
        }
        break;
      case SCHED_BACKWARD_WEIGHT:
        w[at]++;
        cr_assert_eq(i[at], 1, "p=%d m=%d stage %d mb %d: W before its I", pr->p, m, s, in->mb);
        cr_assert_gt(in->mb, last_w[in->chunk], "p=%d m=%d rank %d chunk %d: weight gradients out of order",
                     pr->p, m, r, in->chunk);
        last_w[in->chunk] = in->mb;
        break;
      default: cr_assert_fail("unexpected op %d", in->op);
      }
    }
  }
  for (int k = 0; k < S * m; k++) {
    cr_assert_eq(f[k], 1, "p=%d m=%d stage %d mb %d: %d forwards", pr->p, m, k / m, k % m, f[k]);
    cr_assert(b[k] + i[k] == 1 && i[k] == w[k], "p=%d m=%d stage %d mb %d: B %d, I %d, W %d", pr->p, m, k / m,
              k % m, b[k], i[k], w[k]);
  }
  free(f), free(b), free(i), free(w);
}

Test(dualpipev, every_shape_verifies_with_zb_v_makespan_and_p_plus_1_memory) {
  sched_costs c = sched_costs_unit();
  for (int p = 1; p <= 12; p++)
    for (int m = 2 * p; m <= 2 * p + 24; m++) {
      sched_shape sh = {.family = SCHED_DUALPIPE_V, .p = p, .v = 2, .m = m};
      sched_program pr;
      cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_OK, "p=%d m=%d: %s", p, m, core_error_msg());
      check_orders(&pr);
      sched_sim_result res;
      cr_assert_eq(sched_simulate(&pr, &c, &res, NULL), CORE_OK, "%s", core_error_msg());
      cr_assert_float_eq(res.makespan, 6.0 * m + p - 1, 1e-9, "p=%d m=%d: makespan %g", p, m, res.makespan);
      for (int r = 0; r < p; r++)
        cr_assert_leq(res.ranks[r].peak_activations, 2 * p + 2, "p=%d m=%d rank %d: %d activations", p, m, r,
                      res.ranks[r].peak_activations);
      sched_sim_result_free(&res);
      sched_program_free(&pr);
    }
}

Test(dualpipev, shapes_it_cannot_run_are_input_errors) {
  sched_costs c = sched_costs_unit();
  const struct { int p, v, m; } bad[] = {{4, 2, 7}, {2, 1, 8}, {2, 3, 8}, {1, 2, 1}};
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    sched_shape sh = {.family = SCHED_DUALPIPE_V, .p = bad[k].p, .v = bad[k].v, .m = bad[k].m};
    sched_program pr;
    cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_EINPUT, "p=%d v=%d m=%d accepted", bad[k].p, bad[k].v, bad[k].m);
  }
  sched_shape sh = {.family = SCHED_DUALPIPE_V, .p = 2, .v = 2, .m = 8, .max_pending_w = 2};
  sched_program pr;
  cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_EINPUT, "--max-pending-w accepted for dualpipev");
}
