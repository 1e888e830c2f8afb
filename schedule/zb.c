/* schedule/zb.c: zero-bubble compute orders (Qi et al., arXiv 2401.10241).
 *
 * Backward is split into I (input gradient, on the critical path) and W (weight gradient, free
 * to wait). The order is built by list scheduling under the cost model: whenever a rank is
 * free it runs, in this priority,
 *   1. an I whose output gradient has arrived (keeps the critical path moving),
 *   2. an F whose input has arrived, if the rank's memory allows another micro-batch,
 *   3. the oldest pending W (fills what would be a bubble, and frees memory),
 * and otherwise waits for the next arrival; a W goes first when too many are pending. Within a
 * chunk, F's and I's run in micro-batch order; between chunks the later virtual stage goes
 * first (it finishes micro-batches sooner and frees their memory).
 *
 * Two limits set the memory, counted in chunk-stashes. Between F and I a micro-batch holds its
 * whole stash: zb-h1 allows 1F1B's min(p-r, m), zb-h2 2(p-r)-1, zb-v 2p (two half-size chunks
 * per rank: 1F1B's memory, the same on every rank). Between I and W it holds only what W needs
 * (layer inputs and output gradients of the matmuls): up to the first limit plus p-1 (zb-h1,
 * enough to fill the p-1 gaps of the drain) or 2(p-1) (zb-h2, zb-v) more. Under a latency,
 * zb-v's chunk 0 keeps r + 1 of rank r's 2p for chunk 1 (f_limit): chunk 0's forwards are ready
 * first and would otherwise fill every rank, leaving the chunk-1 forwards that carry the V on to
 * its backwards stuck at the limit (p=16, m=64, unit costs, comm 0.25: a step of 931.5 where
 * comm 0 gives 399, and a rank with 62 stashes open once the limit gave way; now 413.75, 32).
 * With F = B = W this gives the paper's bubbles: zb-h1 (p-1)(F+B-W), a third of 1F1B's, and
 * zb-h2 (p-1)(F+B-2W) = 0 once m fills the warm-up; see tests/schedule/test_zb.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "schedule/internal.h"

typedef struct {
  int *nf, *ni;  /* per chunk: next F, next I (micro-batch order) */
  int f_open;    /* stashes between F and I */
  int open1;     /* of which chunk 1's (zb-v) */
  int w_pending; /* stashes between I and W */
  int *wq, wq_head, wq_tail; /* pending W's as (chunk, mb) codes, oldest first */
  double free_at;
  int limit, wlimit;
  int hard_w; /* the user's limit: at wlimit pending, a W runs before anything else */
} zb_rank;

typedef struct {
  const sched_program *pr;
  const sched_costs *c;
  int S, m;
  double *f_end, *i_end; /* [S*m], < 0 until done */
  int relax;             /* ignore the memory limits (only when nothing else can move) */
} zb_state;

/* Earliest start of the F (or I) of stage s, micro-batch j given what has finished. */
static double f_ready(const zb_state *z, int s, int j) {
  if (s == 0) return 0;
  double e = z->f_end[(size_t)(s - 1) * z->m + j];
  if (e < 0) return INFINITY;
  return e + (z->pr->rank_of[s - 1] != z->pr->rank_of[s] ? z->c->comm : 0);
}

static double i_ready(const zb_state *z, int s, int j) {
  double t = z->f_end[(size_t)s * z->m + j];
  if (t < 0) return INFINITY;
  if (s == z->S - 1) return t;
  double e = z->i_end[(size_t)(s + 1) * z->m + j];
  if (e < 0) return INFINITY;
  e += z->pr->rank_of[s + 1] != z->pr->rank_of[s] ? z->c->comm : 0;
  return e > t ? e : t;
}

typedef struct {
  double t;
  int op, chunk, mb;
} zb_choice;

/* How many stashes may be open when a forward of chunk c starts on rank r. In a V, chunk 0 keeps
 * room for the chunk-1 stashes the rank will hold: r + 1 (a chunk-1 stash of rank r lives while
 * the r stages after it run that micro-batch's F and I; the comm-0 order holds exactly r + 1 on
 * every rank once m >= 2p), or fewer if fewer micro-batches are left. Under a latency chunk 0's
 * forwards are ready before chunk 1's, and without the room they fill the rank: the chunk-1
 * forwards that carry micro-batches on to their backwards then wait on the limit, every rank at
 * once, until the limit gives way (the relaxed pass). At comm = 0 the V never got stuck that
 * way, and the orders there stay as they were; on one rank there is no latency. */
static int f_limit(const zb_state *z, const zb_rank *k, int r, int c) {
  const sched_program *pr = z->pr;
  if (pr->v != 2 || c != 0 || k->nf[1] >= z->m || z->c->comm <= 0 || pr->p == 1) return k->limit;
  int room = r + 1 < z->m - k->ni[1] ? r + 1 : z->m - k->ni[1];
  return room > k->open1 ? k->limit - (room - k->open1) : k->limit;
}

/* What rank r would run next and when: the highest-priority op ready when the rank is free,
 * else the op that becomes ready first. */
static zb_choice zb_next(const zb_state *z, const zb_rank *k, int r) {
  const sched_program *pr = z->pr;
  zb_choice best_i = {INFINITY, SCHED_BACKWARD_INPUT, -1, -1}, best_f = {INFINITY, SCHED_FORWARD, -1, -1};
  int w_full = !z->relax && k->w_pending >= k->wlimit;
  for (int c = pr->v - 1; c >= 0; c--) { /* later stages first on ties */
    int s = pr->stage_of[r * pr->v + c];
    if (k->ni[c] < z->m) {
      double t = i_ready(z, s, k->ni[c]);
      t = t > k->free_at ? t : k->free_at;
      if (t < best_i.t) best_i = (zb_choice){t, SCHED_BACKWARD_INPUT, c, k->ni[c]};
    }
    if (k->nf[c] < z->m && (z->relax || k->f_open < f_limit(z, k, r, c)) && !w_full) {
      double t = f_ready(z, s, k->nf[c]);
      t = t > k->free_at ? t : k->free_at;
      if (t < best_f.t) best_f = (zb_choice){t, SCHED_FORWARD, c, k->nf[c]};
    }
  }
  zb_choice w = {INFINITY, SCHED_BACKWARD_WEIGHT, -1, -1};
  if (k->wq_head < k->wq_tail) {
    int code = k->wq[k->wq_head];
    w = (zb_choice){k->free_at, SCHED_BACKWARD_WEIGHT, code / z->m, code % z->m};
  }
  if (w.t <= k->free_at && k->hard_w && !z->relax && k->w_pending >= k->wlimit) return w;
  if (best_i.t <= k->free_at) return best_i;
  if (best_f.t <= k->free_at) return best_f;
  if (w.t <= k->free_at) return w;
  return best_i.t <= best_f.t ? best_i : best_f;
}

/* max_pending_w > 0 (the user's --max-pending-w) replaces the default W limit and makes it hard:
 * a rank with that many W's pending runs its oldest W before any I or F (the default limit only
 * holds back forwards). Fewer pending W's hold fewer slots (lower peak memory) at the price of
 * bubbles the W's no longer fill. A rank at a hard limit always has a W to run, so the limit
 * never stalls the scheduler. */
static void zb_limits(sched_family f, int p, int r, int m, int max_pending_w, zb_rank *k) {
  int lim = f == SCHED_ZB_H1 ? p - r : f == SCHED_ZB_H2 ? 2 * (p - r) - 1 : 2 * p;
  int cap = f == SCHED_ZB_V ? 2 * m : m;
  k->limit = lim < cap ? lim : cap;
  k->wlimit = max_pending_w > 0 ? max_pending_w : k->limit + (f == SCHED_ZB_H1 ? 1 : 2) * (p - 1);
  k->hard_w = max_pending_w > 0;
}

int sched_compile_zb(sched_program *pr, const sched_costs *costs, int max_pending_w) {
  int p = pr->p, v = pr->v, m = pr->m;
  zb_state z = {.pr = pr, .c = costs, .S = p * v, .m = m};
  size_t n = (size_t)z.S * (size_t)m;
  z.f_end = core_malloc(sizeof(double) * n);
  z.i_end = core_malloc(sizeof(double) * n);
  for (size_t i = 0; i < n; i++) z.f_end[i] = z.i_end[i] = -1;
  zb_rank *rk = core_calloc((size_t)p, sizeof(zb_rank));
  for (int r = 0; r < p; r++) {
    rk[r].nf = core_calloc((size_t)v, sizeof(int));
    rk[r].ni = core_calloc((size_t)v, sizeof(int));
    rk[r].wq = core_malloc(sizeof(int) * (size_t)v * (size_t)m);
    zb_limits(pr->family, p, r, m, max_pending_w, &rk[r]);
  }
  for (size_t done = 0; done < 3 * n; done++) {
    int best_r = -1;
    zb_choice best = {INFINITY, 0, 0, 0};
    for (z.relax = 0; best_r < 0 && z.relax < 2; z.relax++)
      for (int r = 0; r < p; r++) {
        zb_choice ch = zb_next(&z, &rk[r], r);
        if (ch.t < best.t) best = ch, best_r = r;
      }
    /* Should the limits ever leave every rank waiting on another's forward, one forward beyond
     * them (on the rank that can start soonest) breaks the wait. Unit costs at comm up to 1.5
     * never need it (tests/schedule/test_zb.c); zb-v did before f_limit. */
    CORE_ASSERT(best_r >= 0);
    zb_rank *k = &rk[best_r];
    int s = pr->stage_of[best_r * v + best.chunk];
    double end = best.t + sched_op_cost(costs, (sched_op)best.op, s);
    size_t key = (size_t)s * m + best.mb;
    if (best.op == SCHED_FORWARD) {
      k->nf[best.chunk]++, k->f_open++, k->open1 += best.chunk == 1;
      z.f_end[key] = end;
    } else if (best.op == SCHED_BACKWARD_INPUT) {
      k->ni[best.chunk]++, k->f_open--, k->w_pending++, k->open1 -= best.chunk == 1;
      k->wq[k->wq_tail++] = best.chunk * m + best.mb;
      z.i_end[key] = end;
    } else {
      k->wq_head++, k->w_pending--;
    }
    k->free_at = end;
    sched_push_action(pr, (sched_op)best.op, s, best.mb);
  }
  for (int r = 0; r < p; r++) free(rk[r].nf), free(rk[r].ni), free(rk[r].wq);
  free(rk), free(z.f_end), free(z.i_end);
  return CORE_OK;
}
