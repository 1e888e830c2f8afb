/* schedule/zb_rounds.c: the two constructors of zero-bubble compute orders that build in rounds
 * rather than op by op in time order (zb.c has the list scheduler and the driver that compares
 * them all): the V in rounds for zb-v / v-zb with v-half / v-min's building block, and the
 * micro-batch rounds for zb-h1, zb-h2 and zb-auto. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/progress.h"
#include "schedule/internal.h"
#include "schedule/zb_internal.h"

/* ---- the V in rounds (two chunks per rank) ----
 * The list scheduler (zb.c) decides op by op; in a V it leaves a bubble that grows with p, since a
 * rank cannot see that the micro-batch coming back up the V needs it soon. This second constructor
 * builds the V as the zero-bubble V schedules are drawn: a warm-up wave of chunk-0 forwards sized
 * by when the first chunk-1 forward comes back, then 2m rounds in which every rank runs one input
 * gradient then one forward, each rank's W's filling the gaps in front of them. A rank whose gap
 * would push its idle time above the worst rank's (or above what an earlier pass allowed it: the
 * "approved" bubbles) fills it with a W even if the W overruns, so the idle time evens out over the
 * ranks; passes repeat with each pass's bubbles approved while the worst one shrinks. Every op
 * starts at max(its rank free, its input arrived): the times are the simulator's. The memory budget
 * is the same (open forwards plus w_stash per pending W, at most cap chunk slots): a forward that
 * would overrun it runs the oldest W's first, and a pass that cannot keep it, or finds an input not
 * yet produced, is dropped (the list scheduler's variants stay). */

/* Places op (chunk c, its next micro-batch) on rank r; 0 if its input is not there or memory
 * would overrun. */
static int zbv_put(zb_state *z, zbv_rank *vr, int r, int op, int c) {
  const sched_program *pr = z->pr;
  zb_rank *k = &z->rk[r];
  zbv_rank *q = &vr[r];
  int j, s;
  double ready = 0, dm;
  if (op == SCHED_BACKWARD_WEIGHT) {
    if (pending(k) == 0) return 0;
    int code = k->wq[k->wh];
    c = wq_chunk(code), j = wq_mb(code), s = pr->stage_of[r * pr->v + c];
    dm = -z->ws;
  } else if (op == SCHED_FORWARD) {
    j = k->nf[c], s = pr->stage_of[r * pr->v + c];
    if (j >= z->m) return 0;
    ready = f_ready(z, s, j);
    dm = 1;
  } else {
    j = k->ni[c], s = pr->stage_of[r * pr->v + c];
    if (j >= z->m) return 0;
    while (z->max_w > 0 && pending(k) >= z->max_w) /* the user's limit on pending W's */
      zbv_put(z, vr, r, SCHED_BACKWARD_WEIGHT, 0);
    ready = i_ready(z, s, j);
    dm = z->ws - 1;
  }
  if (ready == INFINITY || q->mem + dm > k->cap + z->eps) return 0;
  double t = ready > q->cur ? ready : q->cur;
  if (k->nf[0] > 0) {
    q->bubble += t - q->cur;
    if (q->bubble > vr[z->pr->p].bubble) vr[z->pr->p].bubble = q->bubble; /* the worst so far */
  }
  k->t = t, k->op = op, k->chunk = c, k->mb = j;
  zb_run_op(z, r); /* counts, end, order, first / last */
  q->cur = k->free_at, q->mem += dm;
  return 1;
}

/* When the input of rank r's next op (chunk c) arrives; -INFINITY with none to wait for. */
static double zbv_arrival(const zb_state *z, int r, int op, int c) {
  const sched_program *pr = z->pr;
  const zb_rank *k = &z->rk[r];
  int s = pr->stage_of[r * pr->v + c];
  if (op == SCHED_FORWARD) return s == 0 ? -INFINITY : f_ready(z, s, k->nf[c]);
  return s == z->S - 1 ? -INFINITY : i_ready(z, s, k->ni[c]);
}

/* Before rank r's next op: W's that end before its input arrives, then one more if the gap would
 * leave the rank idle beyond what it is allowed, where this op's gaps take such a W (flag: -1
 * always, 0 as ps->fill_f says, 1 as ps->fill_b says). */
static void zbv_fill(zb_state *z, zbv_rank *vr, const zbv_pass *ps, int r, int op, int c, int flag) {
  double arr = zbv_arrival(z, r, op, c);
  if (arr == -INFINITY || arr == INFINITY) return;
  while (pending(&z->rk[r]) > 0 && arr >= vr[r].cur + cost(z, SCHED_BACKWARD_WEIGHT, z->pr->stage_of[r * z->pr->v + wq_chunk(z->rk[r].wq[z->rk[r].wh])]))
    zbv_put(z, vr, r, SCHED_BACKWARD_WEIGHT, 0);
  if (pending(&z->rk[r]) == 0) return;
  double worst = vr[z->pr->p].bubble;
  if (ps->approved && ps->max_approved - ps->approved[r] > worst) worst = ps->max_approved - ps->approved[r];
  if (!(arr - vr[r].cur > worst - vr[r].bubble)) return; /* no W either way */
  if (flag >= 0) z->agree_v &= ~(1u << flag);         /* the flag decides this one */
  if (flag < 0 || (flag ? ps->fill_b : ps->fill_f)) zbv_put(z, vr, r, SCHED_BACKWARD_WEIGHT, 0);
}

static int zbv_forward(zb_state *z, zbv_rank *vr, const zbv_pass *ps, int r, int c) {
  while (vr[r].mem + 1 > z->rk[r].cap + z->eps)
    if (!zbv_put(z, vr, r, SCHED_BACKWARD_WEIGHT, 0)) return 0;
  zbv_fill(z, vr, ps, r, SCHED_FORWARD, c, 0);
  return zbv_put(z, vr, r, SCHED_FORWARD, c);
}

/* One pass; CORE_OK with z->order filled and bubble[] the ranks' idle times, else nonzero. */
int zbv_run(zb_state *z, zbv_rank *vr, const zbv_pass *ps) {
  const sched_program *pr = z->pr;
  int p = pr->p, m = z->m;
  size_t n = (size_t)z->S * (size_t)m;
  zb_reset(z);
  for (int r = 0; r <= p; r++) vr[r] = (zbv_rank){0, 0, 0};
  /* warm-up: one chunk-0 forward per rank; then from the last rank up, chunk-0 forwards on ranks
   * 0..r while they fit before rank r's first chunk-1 forward comes back (leaving room for the
   * 2 + 2r forwards of the micro-batches still in flight below), then that chunk-1 forward */
  for (int r = 0; r < p; r++)
    if (!zbv_put(z, vr, r, SCHED_FORWARD, 0)) return CORE_ERUNTIME;
  for (int r = p - 1; r >= 0; r--) {
    if (r < p - 1) {
      double back = f_ready(z, pr->stage_of[r * 2 + 1], 0);
      while (vr[r].mem + 2 + 2 * r <= z->rk[r].cap + z->eps && vr[r].cur + cost(z, SCHED_FORWARD, r) <= back &&
             z->rk[r].nf[0] < m)
        for (int q = 0; q <= r; q++)
          if (!zbv_put(z, vr, q, SCHED_FORWARD, 0)) return CORE_ERUNTIME;
    }
    if (!zbv_put(z, vr, r, SCHED_FORWARD, 1)) return CORE_ERUNTIME;
  }
  /* every rank as far ahead in forwards as the one above it, chunk 1 at least level with it */
  int it = 0;
  for (int i = 1; i < p; i++) {
    for (int guard = 0;; guard++) {
      const zb_rank *a = &z->rk[i], *b = &z->rk[i - 1];
      if (!(a->nf[0] + a->nf[1] < b->nf[0] + b->nf[1] || (a->nf[1] <= b->nf[1] && b->nf[1] < m))) break;
      if (guard > 4 * m) return CORE_ERUNTIME;
      for (int q = p - 1; q >= i; q--)
        if (z->rk[q].nf[it] < m && !zbv_put(z, vr, q, SCHED_FORWARD, it)) return CORE_ERUNTIME;
      it ^= 1;
    }
  }
  /* rounds: one input gradient per rank (chunk 0's, which flow up the ranks, from the last rank
   * up; then chunk 1's, which flow down, from rank 0 down), then one forward per rank */
  int *ic = core_malloc(sizeof(int) * (size_t)p);
  int rc = CORE_OK;
  for (int round = 0; round < 2 * m && rc == CORE_OK; round++) {
    for (int r = 0; r < p; r++) {
      const zb_rank *k = &z->rk[r];
      if (k->ni[0] >= k->ni[1]) ic[r] = 1;
      else if (r == p - 1 || k->ni[1] >= m || i_ready(z, r, k->ni[0]) < INFINITY) ic[r] = 0;
      else ic[r] = 1;
    }
    for (int pass = 0; pass < 2 && rc == CORE_OK; pass++)
      for (int i = 0; i < p; i++) {
        int r = pass == 0 ? p - 1 - i : i, want = pass == 0 ? 0 : 1;
        if (ic[r] != want || z->rk[r].ni[want] >= m) continue;
        zbv_fill(z, vr, ps, r, SCHED_BACKWARD_INPUT, want, want == 0 ? -1 : 1);
        if (!zbv_put(z, vr, r, SCHED_BACKWARD_INPUT, want)) rc = CORE_ERUNTIME;
      }
    for (int r = 0; r < p && rc == CORE_OK; r++) {
      const zb_rank *k = &z->rk[r];
      if (k->nf[1] >= m) continue;
      int c = -1;
      if (k->nf[1] >= k->nf[0]) c = 0;
      else if (r == p - 1 || f_ready(z, pr->stage_of[r * 2 + 1], k->nf[1]) < INFINITY) c = 1;
      else if (k->nf[0] < m && f_ready(z, r, k->nf[0]) < INFINITY) c = 0;
      if (c >= 0 && !zbv_forward(z, vr, ps, r, c)) rc = CORE_ERUNTIME;
    }
  }
  free(ic);
  if (rc) return rc;
  for (int r = 0; r < p; r++)
    while (pending(&z->rk[r]) > 0) zbv_put(z, vr, r, SCHED_BACKWARD_WEIGHT, 0);
  return z->norder == 3 * n ? CORE_OK : CORE_ERUNTIME;
}

/* v-half (half) or v-min: the building block's slots (vblock.c) timed under the costs, every op
 * in slot order at max(its rank free, its input in). CORE_OK with z->order filled, else nonzero
 * (the memory budget not kept). */
int vpat_run(zb_state *z, int half) {
  const sched_program *pr = z->pr;
  int p = pr->p, m = z->m, T;
  int *slots = sched_vblock_slots(p, m, half, &T);
  zb_reset(z);
  int rc = CORE_OK;
  static const int op_of[5] = {SCHED_FORWARD, SCHED_FORWARD, SCHED_BACKWARD_INPUT, SCHED_BACKWARD_INPUT, SCHED_BACKWARD_WEIGHT};
  static const int chunk_of[5] = {0, 1, 1, 0, 0};
  for (int x = 0; x < T && rc == CORE_OK; x++)
    for (int r = 0; r < p && rc == CORE_OK; r++) {
      int e = slots[(size_t)r * T + x] - 1;
      if (e < 0) continue;
      zb_rank *k = &z->rk[r];
      int ch = chunk_of[e], s = pr->stage_of[r * 2 + ch];
      double ready = 0;
      if (e == 4) ch = wq_chunk(k->wq[k->wh]);
      else if (e < 2) ready = f_ready(z, s, k->nf[ch]);
      else ready = i_ready(z, s, k->ni[ch]);
      if (ready == INFINITY) { /* an input in a later slot: cannot happen */
        rc = CORE_ERUNTIME;
        break;
      }
      k->t = ready > k->free_at ? ready : k->free_at, k->op = op_of[e], k->chunk = ch;
      k->mb = e == 4 ? wq_mb(k->wq[k->wh]) : e < 2 ? k->nf[ch] : k->ni[ch];
      zb_run_op(z, r);
      if (mem(z, k) > k->cap + z->eps) rc = CORE_ERUNTIME;
    }
  free(slots);
  return rc == CORE_OK && z->norder == 3 * (size_t)z->S * (size_t)m ? CORE_OK : CORE_ERUNTIME;
}

/* ---- micro-batch rounds (one chunk per rank) ----
 * A third constructor for zb-h1, zb-h2 and zb-auto, after the zero-bubble paper's own heuristic
 * for its automatic schedules: the order is built micro-batch by micro-batch rather than in time
 * order. Round 0 runs every stage's first F, then as many more F's per stage as fit before its
 * first I's gradient can arrive (fewer on each later stage), then the I's from the last stage
 * back. Each later round gives every stage (that has one left) its next F, first to last, then
 * every stage its next I, last to first. In front of each F and I the rank runs its oldest W's
 * while they end before that op's input arrives, and one more W into the gap left when the gap
 * would raise the rank's idle time above the worst rank's (or always, with `greedy`); W's also
 * run first whenever an F would not fit the memory budget (open forwards plus w_stash per pending
 * W, at most the cap) or the family's open-forward limit, and whenever the user's --max-pending-w
 * of them are pending. Variants: `eager` (round 0 adds an F only
 * while it ends before the first gradient arrives; else while it starts before), `greedy`, and
 * `b_first` (a stage two or more F's ahead of the next one skips its F when the next stage's F
 * and I would otherwise wait on it). Every op starts at max(its rank free, its input arrived), as
 * the simulator runs it. CORE_ERUNTIME when the budget cannot be kept. */

/* zb_state.agree_rounds: bit 0, 1, 2 set while flipping eager, greedy, b_first
 * would have changed no decision so far (each decision reads one of them) */
enum { ZBR_EAGER = 1, ZBR_GREEDY = 2, ZBR_B_FIRST = 4 };

/* Runs rank r's next op of kind op at max(its rank free, its input in); 0, or nonzero when its
 * input has not been produced (cannot happen in round order) or the budget overflows. */
static int zbr_put(zb_state *z, int r, int op) {
  const sched_program *pr = z->pr;
  zb_rank *k = &z->rk[r];
  if (op != SCHED_BACKWARD_WEIGHT) /* the user's --max-pending-w: W's first, as the list scheduler */
    while (z->max_w > 0 && pending(k) >= z->max_w)
      if (zbr_put(z, r, SCHED_BACKWARD_WEIGHT)) return 1;
  int s = pr->stage_of[r];
  double ready = 0;
  if (op == SCHED_FORWARD) ready = f_ready(z, s, k->nf[0]), k->mb = k->nf[0];
  else if (op == SCHED_BACKWARD_INPUT) ready = i_ready(z, s, k->ni[0]), k->mb = k->ni[0];
  else k->mb = wq_mb(k->wq[k->wh]);
  if (ready == INFINITY) return 1;
  k->t = ready > k->free_at ? ready : k->free_at, k->op = op, k->chunk = 0;
  zb_run_op(z, r);
  return mem(z, k) > k->cap + z->eps;
}

/* W's in front of an op of rank r whose input arrives at `arrive`: those that end by then, and
 * one more into the gap that remains when the gap would make r's idle time the worst (or when
 * greedy) */
static int zbr_fill(zb_state *z, int r, double arrive, int greedy) {
  zb_rank *k = &z->rk[r];
  int rc = 0;
  double w = cost(z, SCHED_BACKWARD_WEIGHT, z->pr->stage_of[r]);
  while (!rc && pending(k) > 0 && k->free_at + w <= arrive + z->eps) rc = zbr_put(z, r, SCHED_BACKWARD_WEIGHT);
  if (!rc && pending(k) > 0 && k->free_at < arrive - z->eps) {
    int worst = k->idle + (arrive - k->free_at) > z->max_idle + z->eps;
    if (!worst) z->agree_rounds &= ~(unsigned)ZBR_GREEDY; /* greedy decides this one */
    if (greedy || worst) rc = zbr_put(z, r, SCHED_BACKWARD_WEIGHT);
  }
  return rc;
}

/* room for one more F on rank r: its oldest W's first while it does not fit the budget or the
 * open-forward limit; nonzero when no W is left to make it */
static int zbr_room(zb_state *z, int r) {
  zb_rank *k = &z->rk[r];
  int rc = 0;
  while (!rc && (mem(z, k) + 1 > k->cap + z->eps || k->open >= k->fcap))
    rc = pending(k) == 0 || zbr_put(z, r, SCHED_BACKWARD_WEIGHT);
  return rc;
}

int zbr_run(zb_state *z, zbr_variant var) {
  const sched_program *pr = z->pr;
  int p = pr->p, m = z->m, rc = 0;
  zb_reset(z);
  z->agree_rounds = ZBR_EAGER | ZBR_GREEDY | ZBR_B_FIRST;
  int *req = core_calloc((size_t)p, sizeof(int));
  for (int r = 0; r < p; r++) z->rk[r].fcap = zb_open_cap(z, r, 0);
#define RANK(j) (pr->rank_of[j])
#define COST(op, j) cost(z, (op), (j))
  for (int j = 0; j < p && !rc; j++) rc = zbr_room(z, RANK(j)) || zbr_put(z, RANK(j), SCHED_FORWARD);
  /* round 0's extra F's: how many fit on stage j before its first I's gradient can come back */
  double back = 0; /* when the first I's gradient reaches the stage below */
  for (int j = p - 1; j >= 0 && !rc; j--) {
    const zb_rank *k = &z->rk[RANK(j)];
    req[j] = 0;
    if (j == p - 1) {
      back = z->end[j].f + COST(SCHED_BACKWARD_INPUT, j); /* micro-batch 0 */
      continue;
    }
    double at = k->free_at, used = mem(z, k), arrive = back + z->c->comm;
    while (k->nf[0] + req[j] < m && used + 1 <= k->cap + z->eps && k->open + req[j] < k->fcap) {
      int eager_stop = at + COST(SCHED_FORWARD, j) > arrive, stop = at >= arrive;
      if (eager_stop != stop) z->agree_rounds &= ~(unsigned)ZBR_EAGER;
      if (var.eager ? eager_stop : stop) break;
      used += 1, at += COST(SCHED_FORWARD, j), req[j]++;
    }
    back = (at > arrive ? at : arrive) + COST(SCHED_BACKWARD_INPUT, j);
  }
  for (int j = 1; j < p; j++)
    while (req[j] > 0 && req[j] >= req[j - 1]) req[j]--;
  for (int j = 0; j < p && !rc; j++) /* first to last: each extra F's input is made before it */
    for (int q = 0; q < req[j] && !rc; q++) rc = zbr_room(z, RANK(j)) || zbr_put(z, RANK(j), SCHED_FORWARD);
  for (int j = p - 1; j >= 0 && !rc; j--) rc = zbr_put(z, RANK(j), SCHED_BACKWARD_INPUT);
  for (int i = 1; i < m && !rc; i++) {
    for (int j = 0; j < p; j++) {
      const zb_rank *k = &z->rk[RANK(j)];
      req[j] = k->nf[0] < m;
      if (!req[j] || !(var.b_first || (z->agree_rounds & ZBR_B_FIRST)) || j + 1 >= p ||
          k->nf[0] < z->rk[RANK(j + 1)].nf[0] + 2)
        continue;
      const zb_rank *n = &z->rk[RANK(j + 1)];
      double next = n->free_at + COST(SCHED_FORWARD, j + 1) + COST(SCHED_BACKWARD_INPUT, j + 1) + z->c->comm;
      int skip = k->free_at >= next ||
                 (k->free_at + COST(SCHED_FORWARD, j) > next && next - k->free_at <= z->max_idle - k->idle);
      if (skip) z->agree_rounds &= ~(unsigned)ZBR_B_FIRST; /* b_first decides this one */
      if (skip && var.b_first) req[j] = 0;
    }
    for (int j = p - 2; j >= 0; j--) req[j] = req[j] < req[j + 1] ? req[j] : req[j + 1];
    for (int j = 0; j < p && !rc; j++) {
      if (!req[j]) continue;
      rc = zbr_room(z, RANK(j));
      if (!rc && j > 0) rc = zbr_fill(z, RANK(j), f_ready(z, j, z->rk[RANK(j)].nf[0]), var.greedy);
      if (!rc) rc = zbr_room(z, RANK(j)) || zbr_put(z, RANK(j), SCHED_FORWARD);
    }
    for (int j = p - 1; j >= 0 && !rc; j--) {
      zb_rank *k = &z->rk[RANK(j)];
      if (k->ni[0] != i || k->nf[0] <= i) rc = 1; /* cannot happen: every stage has run F i */
      if (!rc && j + 1 < p) rc = zbr_fill(z, RANK(j), i_ready(z, j, i), var.greedy);
      if (!rc) rc = zbr_put(z, RANK(j), SCHED_BACKWARD_INPUT);
    }
  }
  for (int j = 0; j < p && !rc; j++)
    while (!rc && pending(&z->rk[RANK(j)]) > 0) rc = zbr_put(z, RANK(j), SCHED_BACKWARD_WEIGHT);
#undef COST
#undef RANK
  free(req);
  return !rc && z->norder == 3 * (size_t)z->S * (size_t)m ? CORE_OK : CORE_ERUNTIME;
}
