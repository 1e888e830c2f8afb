/* schedule/zb.c: zero-bubble compute orders (Qi et al., arXiv 2401.10241).
 *
 * Backward is split into I (input gradient, on the critical path) and W (weight gradient, free
 * to wait). The order is built by list scheduling under the cost model: whenever a rank is
 * free it runs, in this priority,
 *   1. the next I whose output gradient has arrived (keeps the critical path moving),
 *   2. the next F whose input has arrived, if fewer than `limit` micro-batches are in flight
 *      on the rank (a micro-batch is in flight from its F until its W: W still needs the stash),
 *   3. the oldest pending W (fills what would be a bubble, and frees memory),
 * and otherwise waits for the next arrival; a W goes first when too many are pending.
 * Two limits set the memory. Between F and I a micro-batch holds its whole stash: zb-h1 allows
 * 1F1B's min(p-r, m) such micro-batches, zb-h2 2(p-r)-1. Between I and W it holds only what W
 * needs (layer inputs and output gradients of the matmuls): up to the first limit plus p-1 of
 * them for zb-h1 (enough to fill the p-1 gaps of the drain), plus 2(p-1) for zb-h2.
 * With F = B = W this gives the paper's bubbles: zb-h1 (p-1)(F+B-W), a third of 1F1B's, and
 * zb-h2 (p-1)(F+B-2W) = 0 (for m large enough to fill the warm-up; see the tests). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "schedule/internal.h"

typedef struct {
  int nf, ni, nw; /* next F, next I (micro-batch order), W's done */
  int wq_head;    /* W's are run in the order of their I's: wq[wq_head .. ni) */
  int *wq;
  double free_at;
  int limit;  /* micro-batches between F and I */
  int wlimit; /* micro-batches between I and W */
} zb_rank;

/* Time at which op (stage s, micro-batch j) could start on its rank, or INFINITY. */
static double f_ready(const sched_program *pr, const double *f_end, const sched_costs *c, int s, int j) {
  if (s == 0) return 0;
  double e = f_end[(size_t)(s - 1) * pr->m + j];
  return e < 0 ? INFINITY : e + c->comm;
}

static double i_ready(const sched_program *pr, const double *f_end, const double *i_end,
                      const sched_costs *c, int s, int j) {
  double t = f_end[(size_t)s * pr->m + j];
  if (t < 0) return INFINITY;
  if (s == pr->p * pr->v - 1) return t;
  double e = i_end[(size_t)(s + 1) * pr->m + j];
  if (e < 0) return INFINITY;
  return e + c->comm > t ? e + c->comm : t;
}

static void compile_zb_1chunk(sched_program *pr, const sched_costs *costs, int h2) {
  int p = pr->p, m = pr->m;
  size_t n = (size_t)p * (size_t)m;
  double *f_end = core_malloc(sizeof(double) * n), *i_end = core_malloc(sizeof(double) * n);
  for (size_t k = 0; k < n; k++) f_end[k] = i_end[k] = -1;
  zb_rank *rk = core_calloc((size_t)p, sizeof(zb_rank));
  for (int r = 0; r < p; r++) {
    rk[r].wq = core_malloc(sizeof(int) * (size_t)m);
    int lim = h2 ? 2 * (p - r) - 1 : p - r;
    rk[r].limit = lim < m ? lim : m;
    /* pending W's: enough to fill the p-1 gaps of the drain (twice that for zb-h2) */
    rk[r].wlimit = rk[r].limit + (h2 ? 2 : 1) * (p - 1);
  }
  for (size_t done = 0; done < 3 * n;) {
    /* the rank that can start something earliest runs its highest-priority op */
    int best_r = -1, best_op = 0;
    double best_t = INFINITY;
    for (int r = 0; r < p; r++) {
      zb_rank *k = &rk[r];
      double ti = k->ni < m ? i_ready(pr, f_end, i_end, costs, r, k->ni) : INFINITY;
      int w_full = k->ni - k->nw >= k->wlimit; /* too many stashes wait for their W */
      double tf = k->nf < m && k->nf - k->ni < k->limit && !w_full ? f_ready(pr, f_end, costs, r, k->nf) : INFINITY;
      double tw = k->wq_head < k->ni ? k->free_at : INFINITY;
      ti = ti > k->free_at ? ti : k->free_at;
      tf = tf > k->free_at ? tf : k->free_at;
      /* at the moment the rank is free, take I, else F, else W; if nothing is ready then,
       * the earliest of them */
      double t;
      int op;
      if (ti <= k->free_at) t = ti, op = SCHED_BACKWARD_INPUT;
      else if (tf <= k->free_at) t = tf, op = SCHED_FORWARD;
      else if (tw <= k->free_at) t = tw, op = SCHED_BACKWARD_WEIGHT;
      else if (ti <= tf) t = ti, op = SCHED_BACKWARD_INPUT;
      else t = tf, op = SCHED_FORWARD;
      if (t < best_t) best_t = t, best_r = r, best_op = op;
    }
    CORE_ASSERT(best_r >= 0);
    zb_rank *k = &rk[best_r];
    int j = best_op == SCHED_FORWARD ? k->nf++ : best_op == SCHED_BACKWARD_INPUT ? k->ni++ : k->wq[k->wq_head++];
    if (best_op == SCHED_BACKWARD_INPUT) k->wq[k->ni - 1] = j;
    if (best_op == SCHED_BACKWARD_WEIGHT) k->nw++;
    double end = best_t + sched_op_cost(costs, (sched_op)best_op, best_r);
    if (best_op == SCHED_FORWARD) f_end[(size_t)best_r * m + j] = end;
    if (best_op == SCHED_BACKWARD_INPUT) i_end[(size_t)best_r * m + j] = end;
    k->free_at = end;
    sched_push_action(pr, (sched_op)best_op, best_r, j);
    done++;
  }
  for (int r = 0; r < p; r++) free(rk[r].wq);
  free(rk), free(f_end), free(i_end);
}

int sched_compile_zb(sched_program *pr, const sched_costs *costs) {
  if (pr->v != 1)
    return core_error_set(CORE_EINPUT, "schedule %s runs one chunk per rank (got --virtual %d)",
                          sched_family_name(pr->family), pr->v);
  compile_zb_1chunk(pr, costs, pr->family == SCHED_ZB_H2);
  return CORE_OK;
}
