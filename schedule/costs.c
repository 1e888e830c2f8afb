/* schedule/costs.c: the cost model's arithmetic, shared by the compilers, lowering and the
 * simulator: an op's time (one at a time, or a table of every stage's), the copy time of an offloaded slot, the W stash fraction, the unit
 * costs, and the check that a step under the costs is a time a double holds to the op. */
#include <math.h>

#include "core/error.h"
#include "schedule/internal.h"

double sched_op_cost(const sched_costs *c, sched_op op, int s) {
  double f = c->stage_f ? c->stage_f[s] : c->f;
  double b = c->stage_b ? c->stage_b[s] : c->b;
  double w = c->stage_w ? c->stage_w[s] : c->w;
  double dp = c->stage_dp_w ? c->stage_dp_w[s] : c->dp_w;
  switch (op) {
  case SCHED_FORWARD: return f;
  case SCHED_BACKWARD: return b + w + dp;
  case SCHED_BACKWARD_INPUT: return b;
  case SCHED_BACKWARD_WEIGHT: return w + dp;
  default: return 0;
  }
}

double *sched_cost_table(const sched_costs *c, int S) {
  double *t = core_malloc(sizeof(double) * 4 * (size_t)(S > 0 ? S : 1));
  for (int s = 0; s < S; s++)
    for (int o = 0; o < 4; o++) t[4 * s + o] = sched_op_cost(c, (sched_op)(SCHED_FORWARD + o), s);
  return t;
}

int sched_costs_check(const sched_costs *c, int S, int m) {
  double op = 0; /* the dearest F + backward of one stage and micro-batch */
  for (int s = 0; s < S; s++) {
    double t = sched_op_cost(c, SCHED_FORWARD, s) + sched_op_cost(c, SCHED_BACKWARD, s);
    if (!(t <= op)) op = t; /* and a nan */
    if (!c->stage_f && !c->stage_b && !c->stage_w && !c->stage_dp_w) break;
  }
  for (int s = 0; s < S && (c->stage_w_stash || c->stage_act_bytes); s++) {
    if (c->stage_w_stash && !(c->stage_w_stash[s] >= 0 && c->stage_w_stash[s] <= 1))
      return core_error_set(CORE_EINPUT, "virtual stage %d: W stash fraction %g is not in [0, 1]", s, c->stage_w_stash[s]);
    if (c->stage_act_bytes && !(c->stage_act_bytes[s] >= 0 && c->stage_act_bytes[s] < INFINITY))
      return core_error_set(CORE_EINPUT, "virtual stage %d: slot bytes %g are not a size", s, c->stage_act_bytes[s]);
  }
  double clock = (double)S * m * (op + 2 * c->comm); /* the compute of a step runs on a clock of at most this */
  if (!(clock + c->tied + c->reduce + c->step < INFINITY))
    return core_error_set(CORE_EINPUT, "costs too large: a step of %d virtual stages x %d micro-batches "
                          "under them overflows a double", S, m);
  /* an op far below the clock it runs on is lost to rounding (a rank busy 0 for its forwards) */
  for (int s = 0; s < S; s++) {
    for (sched_op o = SCHED_FORWARD; o <= SCHED_BACKWARD_WEIGHT; o++) {
      double t = sched_op_cost(c, o, s);
      if (t > 0 && t < 1e-12 * clock)
        return core_error_set(CORE_EINPUT, "costs too far apart: a step's compute under them may reach %g, and %s of virtual "
                              "stage %d takes %g, below 1e-12 of it, where rounding loses it; give the costs in "
                              "units closer together", clock, sched_op_name(o), s, t);
    }
    if (!c->stage_f && !c->stage_b && !c->stage_w && !c->stage_dp_w) break;
  }
  return CORE_OK;
}

sched_costs sched_costs_unit(void) {
  sched_costs c = {.f = 1, .b = 1, .w = 1};
  return c;
}

double sched_offload_cost(const sched_costs *c, int s) {
  if (c->offload > 0) return c->offload;
  double bytes = c->stage_act_bytes ? c->stage_act_bytes[s] : c->act_bytes;
  if (c->offload_gbps > 0 && bytes > 0) return bytes / (c->offload_gbps * 1e9);
  return -1;
}

double sched_w_stash(const sched_costs *c) { return c->w_stash > 0 ? c->w_stash : 1; }
