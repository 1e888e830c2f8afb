/* schedule/zb.c: list-scheduled compute orders with split backward (Qi et al., "Zero Bubble
 * Pipeline Parallelism", arXiv 2401.10241, and "Pipeline Parallelism with Controllable Memory",
 * arXiv 2405.15362): zb-h1, zb-h2, zb-auto (one chunk per rank), zb-v / v-zb, v-half, v-min (two
 * chunks per rank in a V).
 *
 * Backward is split into I (input gradient, on the critical path) and W (weight gradient, free to
 * wait). Each rank has ONE memory budget, in units of one chunk's activations (a chunk slot; a
 * stage's full activations M_B are v chunk slots): its open forwards (F run, I not yet) count 1
 * each, its pending W's (I run, W not yet) count w_stash each, the part of a slot that W still
 * needs (sched_costs.w_stash, 1 unless the memory model says less). The budget is the family's
 * cap (sched_memory_cap): zb-h1 p M_B with at most 1F1B's p - r open forwards on rank r (so rank r
 * may keep r W's pending beside them), zb-h2 2p - 1 M_B with at most 2(p - r) - 1 open forwards,
 * zb-auto the user's --mem-limit, zb-v / v-zb p, v-half floor((p+2)/2), v-min floor((p+4)/3).
 *
 * Whenever a rank is free it takes, in this order:
 *   1. its oldest W, if it holds the user's --max-pending-w of them;
 *   2. an I whose output gradient has arrived (the critical path; later stage first);
 *   3. an F whose input has arrived and that fits the budget (later stage first: in a V, chunk 1
 *      carries micro-batches on to their backward and frees memory sooner);
 *   4. its oldest W, if an F is ready but only fits once W's have freed their memory (at the cap
 *      the oldest W runs first);
 *   5. its oldest W, to fill a gap: only when it ends before the next I or F can start (a W that
 *      overruns it would delay the critical path), unless the variant fills every gap, or (the
 *      zero-bubble paper's rule) a gap that would make the rank's idle time so far the largest
 *      of all ranks' (or larger than the largest by a quarter);
 * else it waits for the next arrival. Decisions are made in time order over all ranks (a
 * tournament tree of each rank's next choice), so a rank decides knowing everything that started
 * before.
 *
 * Deadlock-freedom under the budget: a W can always run (it needs only its own I), so pending W's
 * never block for long; with one chunk per rank the open forwards of rank r+1 are a subset of rank
 * r's, and the caps do not grow with r, so the last rank can always run its F then I and the
 * pipeline drains from the end. In a V a chunk-0 forward (which admits a micro-batch deeper into
 * the rank) must leave room for one chunk-1 forward, so a micro-batch coming back up the V always
 * finds a slot: rank 0's chunk-1 stage is the last one, whose F is followed by its I at once.
 *
 * Two more constructors are in zb_rounds.c: the V in rounds (zb-v, v-zb; and v-half / v-min's
 * building block) and the micro-batch rounds (zb-h1, zb-h2, zb-auto); each one's order is timed
 * under the costs like the list scheduler's, and the driver below (sched_compile_zb) compares
 * them all.
 *
 * Variants (whether W fills every gap or only gaps it fits; in a V, how much room chunk 0 leaves
 * for chunk 1; for zb-auto, how many forwards a rank may open) are each scheduled in full, and the
 * one with the shortest longest span (then makespan) is kept: the paper's "best of the heuristic's
 * variants". A variant a run shows would decide every choice as that run did is not run again
 * (the agree masks), and none is built once the best reaches the least span and the least end
 * any order can have (zb_end_floor). With F = B = W this gives the paper's bubbles: zb-h1 (p-1)(F+B-W), a third of
 * 1F1B's, zb-h2 and zb-v none once m fills the warm-up; tests/schedule/test_zb.c. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/progress.h"
#include "schedule/internal.h"
#include "schedule/zb_internal.h"

int sched_zb_skip_repeats = 1;


/* The same, a producer not yet run counted as starting when its rank is free (a lower bound):
 * used only to judge whether a W fits in a gap. */
static double f_ready_est(const zb_state *z, int s, int j) {
  double e = f_ready(z, s, j);
  if (e < INFINITY) return e;
  const zb_rank *q = &z->rk[z->pr->rank_of[s - 1]];
  int c = z->pr->chunk_of[s - 1];
  if (q->nf[c] != j) return INFINITY; /* not its next F: later than its next one */
  double in = f_ready(z, s - 1, j);
  double t0 = in > q->free_at ? in : q->free_at;
  if (in == INFINITY) t0 = q->free_at;
  return t0 + cost(z, SCHED_FORWARD, s - 1) + z->hop[s - 1];
}

/* The same with f_ready_est's lower bound for a gradient not yet produced. */
static double i_ready_est(const zb_state *z, int s, int j) {
  const zb_end *at = &z->end[(size_t)j * z->S + s];
  double t = at->f;
  if (t < 0) return INFINITY;
  if (s == z->S - 1) return t;
  double e = at[1].i;
  if (e >= 0) {
    e += z->hop[s];
  } else {
    const zb_rank *q = &z->rk[z->pr->rank_of[s + 1]];
    int c = z->pr->chunk_of[s + 1];
    if (q->ni[c] != j) return INFINITY;
    double in = i_ready(z, s + 1, j);
    double t0 = in > q->free_at && in < INFINITY ? in : q->free_at;
    e = t0 + cost(z, SCHED_BACKWARD_INPUT, s + 1) + z->hop[s];
  }
  return e > t ? e : t;
}

/* Room a forward of chunk c needs beyond its own slot: in a V, chunk 0 leaves room for chunk 1
 * while chunk-1 forwards remain (and fewer are open than that room). */
static int reserve(const zb_state *z, const zb_rank *k, int r, int c) {
  if (z->pr->v != 2 || c != 0 || k->nf[1] >= z->m) return 0;
  int want = z->var.reserve < 0 ? r + 1 : z->var.reserve;
  int left = z->m - k->nf[1]; /* chunk-1 forwards still to come */
  if (want > left) want = left;
  return want > k->open1 ? want - k->open1 : 0;
}

/* Whether a forward of chunk c fits: with the pending W's as they are (now), or once they have
 * all run (after_w). */
static int f_fits(zb_state *z, const zb_rank *k, int r, int c, int after_w) {
  int open_ok = k->open < k->fcap;
  unsigned others = z->agree_fcap & ~(1u << z->var.fcap);
  if (!open_ok && !others) return 0;
  double used = after_w ? k->open : mem(z, k);
  int mem_ok = used + 1 + reserve(z, k, r, c) <= k->cap + z->eps;
  if (mem_ok) /* the answer under each other open-forward limit */
    for (int f = 0; f < 3; f++)
      if ((others >> f & 1) && (k->open < k->fcaps[f]) != open_ok) z->agree_fcap &= ~(1u << f);
  return open_ok && mem_ok;
}

/* The earliest rank r's next I or (fitting) F could start, producers not yet run counted as
 * starting when their rank is free: what a W filling a gap must end by. */
static double next_start(const zb_state *z, int r, const int *fits) {
  const sched_program *pr = z->pr;
  const zb_rank *k = &z->rk[r];
  double e = INFINITY;
  for (int c = 0; c < pr->v; c++) {
    int s = pr->stage_of[r * pr->v + c];
    if (k->ni[c] < z->m) {
      double t = i_ready_est(z, s, k->ni[c]);
      if (t < e) e = t;
    }
    if (k->nf[c] < z->m && fits[c]) {
      double t = f_ready_est(z, s, k->nf[c]);
      if (t < e) e = t;
    }
  }
  return e;
}

/* Rank r's next op and when it starts. */
static void choose(zb_state *z, int r) {
  const sched_program *pr = z->pr;
  zb_rank *k = &z->rk[r];
  double t0 = k->free_at;
  double ti = INFINITY, tf = INFINITY, tb = INFINITY;
  int ci = -1, cf = -1, fits[2] = {0, 0};
  for (int c = pr->v - 1; c >= 0; c--) { /* later stages first on ties */
    int s = pr->stage_of[r * pr->v + c];
    if (k->ni[c] < z->m) {
      double t = i_ready(z, s, k->ni[c]);
      if (t < ti) ti = t, ci = c;
    }
    if (k->nf[c] < z->m) {
      double t = f_ready(z, s, k->nf[c]);
      if ((fits[c] = f_fits(z, k, r, c, 0))) {
        if (t < tf) tf = t, cf = c;
      } else if (f_fits(z, k, r, c, 1) && t < tb) {
        tb = t;
      }
    }
  }
  int w = pending(k) > 0;
  k->t = INFINITY, k->op = -1, k->dep = 0;
  if (w && z->max_w > 0 && pending(k) >= z->max_w) {
    k->t = t0, k->op = SCHED_BACKWARD_WEIGHT;
  } else if (ti <= t0 && !(z->var.f_first && tf <= t0)) {
    k->t = t0, k->op = SCHED_BACKWARD_INPUT, k->chunk = ci;
  } else if (tf <= t0) {
    k->t = t0, k->op = SCHED_FORWARD, k->chunk = cf;
  } else if (w && tb <= t0) {
    k->t = t0, k->op = SCHED_BACKWARD_WEIGHT;
  } else {
    int fill = z->var.fill_all, take = 0;
    k->dep = w && fill != 1;
    if (w && fill == 1) {
      take = 1;
    } else if (w) { /* whether the W fills the gap, under each fill rule */
      int s = pr->stage_of[r * pr->v + wq_chunk(k->wq[k->wh])];
      double ns = next_start(z, r, fits), gap = k->idle + (ns - t0);
      int fits_gap = t0 + cost(z, SCHED_BACKWARD_WEIGHT, s) <= ns + z->eps;
      int idle_ok = k->first < INFINITY && ns < INFINITY;
      int d[4] = {fits_gap, 1, fits_gap || (idle_ok && gap > z->max_idle + z->eps),
                  fits_gap || (idle_ok && gap > z->max_idle * 1.25 + z->eps)};
      take = d[fill];
      for (int f = 0; f < 4; f++)
        if (d[f] != take) z->agree_fill &= ~(1u << f);
    }
    if (take) {
      k->t = t0, k->op = SCHED_BACKWARD_WEIGHT;
    } else { /* wait for the first arrival */
      double tw = w ? tb : INFINITY;
      if (ti <= tf && ti <= tw && ti < INFINITY) k->t = ti, k->op = SCHED_BACKWARD_INPUT, k->chunk = ci;
      else if (tf <= tw && tf < INFINITY) k->t = tf, k->op = SCHED_FORWARD, k->chunk = cf;
      else if (tw < INFINITY) k->t = tw, k->op = SCHED_BACKWARD_WEIGHT;
      else if (w && ti == INFINITY && tf == INFINITY) k->t = t0, k->op = SCHED_BACKWARD_WEIGHT; /* nothing else left to wait for */
    }
  }
  if (k->op == SCHED_BACKWARD_WEIGHT) {
    int code = k->wq[k->wh];
    k->chunk = wq_chunk(code), k->mb = wq_mb(code);
  } else if (k->op == SCHED_FORWARD) {
    k->mb = k->nf[k->chunk];
  } else if (k->op == SCHED_BACKWARD_INPUT) {
    k->mb = k->ni[k->chunk];
  }
}

/* ---- the tournament tree ----
 * Every rank of node 2i's subtree is below every rank of node 2i + 1's, so on equal times the
 * left one, the lower rank, wins: the order (time, rank). A changed time replays its path, one
 * compare and select per level, where a binary heap sifted with branches. */
static void tree_play(zb_state *z, int i) {
  zb_node a = z->tree[2 * i], b = z->tree[2 * i + 1];
  z->tree[i] = b.t < a.t ? b : a;
}
static void update(zb_state *z, int r) {
  double t = z->rk[r].t;
  choose(z, r);
  if (z->rk[r].t == t) return; /* keys are (t, rank): an unchanged one keeps its place */
  /* the winner climbs in registers: each level reads only the sibling, so the loads do not wait
   * on the store below them */
  int i = z->P2 + r;
  zb_node cur = {z->rk[r].t, r};
  z->tree[i] = cur;
  for (; i > 1; i >>= 1) {
    zb_node sib = z->tree[i ^ 1];
    if (i & 1 ? sib.t <= cur.t : sib.t < cur.t) cur = sib; /* the left one wins ties */
    int was = z->tree[i >> 1].r;
    z->tree[i >> 1] = cur;
    if (cur.r == was && was != r) break; /* the same winner, its key unchanged: so is every match above */
  }
}

/* Ranks whose choice may depend on rank q's state, once q has run an op of stage s, micro-batch
 * j: q, and the ranks of its stages' neighbours whose choice read what changed. A choice reads its
 * own rank, the arrivals of the inputs of its next F and next I (q's F of s changes the next
 * stage's, if micro-batch j is its next F; q's I of s the previous stage's, if j is its next I)
 * and, only when it weighs a W in a gap (dep), the neighbours' clocks and every rank's idle time,
 * which any op moves. A neighbour's choice that read nothing that changed would come out the
 * same (its agree masks too), so it is not redone. */
static void update_around(zb_state *z, int q, int op, int s_run, int j) {
  const sched_program *pr = z->pr;
  int done[4], fed[4], nd = 0; /* each neighbour once: in a V both chunks have the same two */
  update(z, q);
  for (int c = 0; c < pr->v; c++) {
    int s = pr->stage_of[q * pr->v + c];
    for (int d = -1; d <= 1; d += 2) {
      if (s + d < 0 || s + d >= z->S) continue;
      int r = pr->rank_of[s + d], i = 0;
      if (r == q) continue;
      const zb_rank *n = &z->rk[r];
      int f = s == s_run && ((op == SCHED_FORWARD && d == 1 && n->nf[pr->chunk_of[s + 1]] == j) ||
                             (op == SCHED_BACKWARD_INPUT && d == -1 && n->ni[pr->chunk_of[s - 1]] == j));
      while (i < nd && done[i] != r) i++;
      if (i == nd) done[nd] = r, fed[nd++] = f;
      else fed[i] |= f;
    }
  }
  for (int i = 0; i < nd; i++)
    if (fed[i] || z->rk[done[i]].dep) update(z, done[i]);
}

void zb_run_op(zb_state *z, int r) {
  const sched_program *pr = z->pr;
  zb_rank *k = &z->rk[r];
  int c = k->chunk, j = k->mb, s = pr->stage_of[r * pr->v + c];
  double end = k->t + cost(z, (sched_op)k->op, s);
  zb_end *at = &z->end[(size_t)j * z->S + s];
  if (k->op == SCHED_FORWARD) {
    k->nf[c]++, k->open++, k->open1 += c == 1;
    at->f = end;
  } else if (k->op == SCHED_BACKWARD_INPUT) {
    k->ni[c]++, k->open--, k->open1 -= c == 1;
    k->wq[k->wt++] = j << 1 | c;
    at->i = end;
  } else {
    k->wh++;
  }
  if (k->first > k->t) k->first = k->t;
  else if ((k->idle += k->t - k->free_at) > z->max_idle) z->max_idle = k->idle;
  k->last = end;
  k->left -= end - k->t;
  k->free_at = end;
  core_progress_tick(&z->tick, (double)++z->placed);
  int *o = &z->order[4 * z->norder++];
  o[0] = r, o[1] = k->op, o[2] = s, o[3] = j;
}

/* Open forwards rank r may hold: zb-h1 1F1B's p - r, zb-h2 2(p - r) - 1, else what the variant
 * asks (var_fcap: 0 none, 1 p - r, 2 2(p - r) - 1), none meaning all of its forwards */
int zb_open_cap(const zb_state *z, int r, int var_fcap) {
  const sched_program *pr = z->pr;
  int p = pr->p, fc = var_fcap == 1 ? p - r : var_fcap == 2 ? 2 * (p - r) - 1 : 0;
  if (pr->family == SCHED_ZB_H1) fc = p - r;
  if (pr->family == SCHED_ZB_H2) fc = 2 * (p - r) - 1;
  return fc > 0 ? fc : pr->v * z->m;
}

/* Nothing scheduled yet: every op not run, every rank empty and free at 0. */
void zb_reset(zb_state *z) {
  const sched_program *pr = z->pr;
  size_t n = (size_t)z->S * (size_t)z->m;
  for (size_t i = 0; i < n; i++) z->end[i] = (zb_end){-1, -1};
  z->norder = 0, z->max_idle = 0;
  for (int r = 0; r < pr->p; r++) {
    zb_rank *k = &z->rk[r];
    k->nf[0] = k->nf[1] = k->ni[0] = k->ni[1] = 0;
    k->open = k->open1 = k->wh = k->wt = 0;
    k->free_at = 0, k->first = INFINITY, k->last = 0, k->left = 0, k->idle = 0;
    for (int c = 0; c < pr->v; c++) {
      int s = pr->stage_of[r * pr->v + c];
      k->left += z->m * (cost(z, SCHED_FORWARD, s) + cost(z, SCHED_BACKWARD_INPUT, s) + cost(z, SCHED_BACKWARD_WEIGHT, s));
    }
  }
}

/* The least longest span any order can have: the most work one rank has. */
static double zb_work(const zb_state *z) {
  double w = 0;
  for (int r = 0; r < z->pr->p; r++) w = z->rk[r].left > w ? z->rk[r].left : w;
  return w;
}

/* The least latest end any order can have: no op of stage s starts before a forward has come
 * down stages 0 .. s-1 (each after its hop), and a rank runs its work one op at a time after its
 * first. With one chunk per rank, sched_budget_ends: the budget leaves each rank idle too until
 * micro-batch 0's gradient comes back; *first_end then gets the least end of the rank holding
 * stage 0, whose first op every constructor here starts at 0, so the least span it can have
 * (else 0). */
static double zb_end_floor(const zb_state *z, double *first_end) {
  const sched_program *pr = z->pr;
  double arrive = 0, end = 0, *tmp = core_malloc(sizeof(double) * (size_t)pr->p); /* each rank's earliest start */
  *first_end = 0;
  if (pr->v == 1) {
    sched_budget_ends(pr, z->cost, z->c->comm, z->rk[0].cap, z->ws, z->m, tmp);
    for (int r = 0; r < pr->p; r++) end = tmp[r] > end ? tmp[r] : end;
    *first_end = tmp[pr->rank_of[0]];
    free(tmp);
    return end;
  }
  for (int r = 0; r < pr->p; r++) tmp[r] = INFINITY;
  for (int s = 0; s < z->S; s++) {
    int r = pr->rank_of[s];
    if (arrive < tmp[r]) tmp[r] = arrive;
    arrive += cost(z, SCHED_FORWARD, s) + z->hop[s]; /* (none after the last stage) */
  }
  for (int r = 0; r < pr->p; r++) end = tmp[r] + z->rk[r].left > end ? tmp[r] + z->rk[r].left : end;
  free(tmp);
  return end;
}

/* Schedules every op under one variant; fills z->order. CORE_ERUNTIME if every rank waits, or
 * once some rank's span so far plus the work it has left exceeds z->bound (it cannot win). */
static int zb_run(zb_state *z) {
  const sched_program *pr = z->pr;
  size_t n = (size_t)z->S * (size_t)z->m;
  zb_reset(z);
  int p = pr->p;
  for (int r = 0; r < z->P2; r++) z->tree[z->P2 + r] = (zb_node){INFINITY, r};
  /* a run under fill rule 1 re-chooses fewer ranks (no dep), so it vouches for no other rule */
  z->agree_fill = z->var.fill_all == 1 ? 1u << 1 : 0xfu;
  /* only zb-auto's variants differ in the open-forward limit: elsewhere nothing to track */
  z->agree_fcap = pr->family == SCHED_ZB_AUTO ? 0x7u : 1u << z->var.fcap;
  for (int r = 0; r < p; r++) {
    for (int f = 0; f < 3; f++) z->rk[r].fcaps[f] = zb_open_cap(z, r, f);
    z->rk[r].fcap = z->rk[r].fcaps[z->var.fcap];
    choose(z, r);
    z->tree[z->P2 + r].t = z->rk[r].t;
  }
  for (int i = z->P2 - 1; i >= 1; i--) tree_play(z, i);
  for (size_t done = 0; done < 3 * n; done++) {
    int r = z->tree[1].r;
    if (z->rk[r].op < 0 || z->rk[r].t == INFINITY)
      return core_error_set(CORE_ERUNTIME, "%s: every rank waits with %zu of %zu ops scheduled (a bug)",
                            sched_family_name(pr->family), done, 3 * n);
    const zb_rank *k = &z->rk[r];
    int op = k->op, s = pr->stage_of[r * pr->v + k->chunk], j = k->mb;
    zb_run_op(z, r);
    if (k->free_at - k->first + k->left > z->bound * (1 + 1e-9)) return CORE_ERUNTIME;
    update_around(z, r, op, s, j);
  }
  return CORE_OK;
}

static double zbv_worst(const zbv_rank *vr, int p) {
  double w = 0;
  for (int r = 0; r < p; r++) w = vr[r].bubble > w ? vr[r].bubble : w;
  return w;
}

/* Longest span over the ranks, then the latest end: what the variants are compared by. */
static void zb_score(const zb_state *z, double *span, double *end) {
  *span = 0, *end = 0;
  for (int r = 0; r < z->pr->p; r++) {
    const zb_rank *k = &z->rk[r];
    double s = k->last - (k->first < INFINITY ? k->first : 0);
    if (s > *span) *span = s;
    if (k->last > *end) *end = k->last;
  }
}

/* Keeps z's order as *best if it scores better (the two buffers swap: the next run writes over
 * the one best held); 1 if it did. */
static int zb_keep(zb_state *z, int **best, double *best_span, double *best_end) {
  double span, end;
  zb_score(z, &span, &end);
  if (span < *best_span - z->eps * span || (span <= *best_span + z->eps * span && end < *best_end - z->eps * end)) {
    *best_span = span, *best_end = end;
    int *held = *best;
    *best = z->order, z->order = held;
    for (int r = 0; r < z->pr->p; r++) z->kept_last[r] = z->rk[r].last;
    return 1;
  }
  return 0;
}

double sched_memory_cap(const sched_shape *sh) {
  int p = sh->p;
  switch (sh->family) {
  case SCHED_GPIPE: return sh->m;
  case SCHED_1F1B:
  case SCHED_ZB_H1: return p < sh->m ? p : sh->m;
  case SCHED_ZB_H2: return 2 * p - 1 < sh->m ? 2 * p - 1 : sh->m;
  case SCHED_ZB_V:
  case SCHED_V_ZB: return p;
  case SCHED_V_HALF: return (p + 2) / 2;
  case SCHED_V_MIN: return (p + 4) / 3;
  case SCHED_ZB_AUTO: return sh->mem_limit > 0 ? sh->mem_limit : p;
  default: return INFINITY;
  }
}

int sched_compile_zb(sched_program *pr, const sched_shape *sh, const sched_costs *costs, int rounds, double *rank_end) {
  int p = pr->p, v = pr->v, m = pr->m;
  CORE_ASSERT((v == 1 || v == 2) && m <= INT_MAX / 2); /* wq's codes */
  zb_state z = {.pr = pr, .c = costs, .S = p * v, .m = m, .max_w = sh->max_pending_w, .ws = sched_w_stash(costs)};
  double cap = sched_memory_cap(sh) * v; /* chunk slots */
  z.eps = 1e-9 * (1 + cap);
  if (cap < (v == 2 ? 2 : 1) - z.eps)
    return core_error_set(CORE_EINPUT, "schedule %s: a memory limit of %g stage activations holds no micro-batch "
                          "(at least %d needed)", sched_family_name(pr->family), cap / v, v == 2 ? 1 : 1);
  size_t n = (size_t)z.S * (size_t)m;
  z.end = core_malloc(sizeof(zb_end) * n);
  z.cost = sched_cost_table(costs, z.S);
  z.hop = core_malloc(sizeof(double) * (size_t)z.S);
  for (int s = 0; s < z.S; s++) z.hop[s] = s + 1 < z.S && pr->rank_of[s] != pr->rank_of[s + 1] ? costs->comm : 0;
  z.rk = core_calloc((size_t)p, sizeof(zb_rank));
  z.kept_last = core_calloc((size_t)p, sizeof(double));
  for (z.P2 = 2; z.P2 < p; z.P2 *= 2) {}
  z.tree = core_malloc(sizeof(zb_node) * 2 * (size_t)z.P2);
  z.order = core_malloc(sizeof(int) * 4 * 3 * n);
  int *best = core_malloc(sizeof(int) * 4 * 3 * n);
  for (int r = 0; r < p; r++) {
    z.rk[r].wq = core_malloc(sizeof(int) * (size_t)v * (size_t)m);
    z.rk[r].cap = cap;
  }
  /* the variants: W fills gaps it fits / every gap; V: chunk 0 leaves 1 or r + 1 slots for chunk
   * 1; zb-auto: no limit on open forwards, 1F1B's, zb-h2's. With one chunk per rank 1F1B's order
   * of a ready F and I comes first: it is the one that reaches the floor at even costs (zb-h1's
   * and zb-auto's orders there), after which no other is built; ties keep the first tried */
  zb_variant vars[32];
  int nv = 0;
  for (int k = 0; k < 2; k++)
    for (int fill = 0, ff = v == 1 ? 1 - k : k; fill < 4; fill++) {
      if (v == 2) {
        vars[nv++] = (zb_variant){fill, 0, 0, ff};
        vars[nv++] = (zb_variant){fill, 1, 0, ff};
        vars[nv++] = (zb_variant){fill, -1, 0, ff};
      } else if (pr->family == SCHED_ZB_AUTO) {
        for (int fc = 0; fc < 3; fc++) vars[nv++] = (zb_variant){fill, 1, fc, ff};
      } else {
        vars[nv++] = (zb_variant){fill, 1, 0, ff};
      }
    }
  /* On large programs (65536 stage micro-batches or more) the variants are compared on the
   * first 2S micro-batches (warm-up, a steady state as long, cool-down: what tells them apart)
   * and only the winner is scheduled in full; that keeps p=64, m=1024 compiling in well under a
   * second, at the price of a winner that may not be the best one in full. */
  int mp = (size_t)z.S * (size_t)m >= 65536 && m > 2 * z.S ? 2 * z.S : m;
  int won = -1, won_iter = 0; /* list variant index, or nv + (V in rounds variant) */
  double best_span = INFINITY, best_end = INFINITY;
  int rc = CORE_OK, ok = 0;
  zbv_rank *vr = core_malloc(sizeof(zbv_rank) * (size_t)(p + 1)); /* vr[p].bubble: the worst rank's */
  double *appr = core_malloc(sizeof(double) * (size_t)p);
  char same[32];
  for (int probe = mp < m; probe >= 0; probe--) {
    z.m = probe ? mp : m;
    best_span = best_end = INFINITY;
    zb_reset(&z);
    double first_end, least = zb_work(&z), floor_end = zb_end_floor(&z, &first_end);
    double floor_span = least > first_end ? least : first_end;
    /* once the best order has the least span and the least end any order can have, no later one
     * could be kept (zb_keep wants a shorter span, or as short and an earlier end): none is built */
#define AT_FLOOR \
  (sched_zb_skip_repeats && best_span <= floor_span * (1 + 1e-12) && best_end <= floor_end * (1 + 1e-12))
    int only = probe ? -1 : won, only_iter = won_iter; /* the full pass after a probe: its winner */
    /* v-half, v-min: the building block */
    int vb = pr->family == SCHED_V_HALF || pr->family == SCHED_V_MIN;
    if (!rounds && vb && (only < 0 || only == nv + 4) && vpat_run(&z, pr->family == SCHED_V_HALF) == CORE_OK &&
        zb_keep(&z, &best, &best_span, &best_end))
      ok = 1, won = nv + 4;
    /* the V in rounds: four variants, each refined with its own bubbles approved; one whose flags
     * differ from an earlier one's only where that one's passes show they decided nothing would
     * run those passes again, to the op (and could not be kept): skipped */
    memset(same, 0, 4);
    for (int k = 0; !rounds && v == 2 && k < 4 && !AT_FLOOR; k++) {
      if ((only >= 0 && only != nv + k) || same[k]) continue;
      zbv_pass ps = {k & 1, k >> 1, NULL, 0};
      double prev = INFINITY;
      z.agree_v = 3;
      for (int iter = 0; iter < 16 && (only < 0 || iter <= only_iter) && !AT_FLOOR && zbv_run(&z, vr, &ps) == CORE_OK;
           iter++) {
        double w = zbv_worst(vr, p);
        if (zb_keep(&z, &best, &best_span, &best_end)) ok = 1, won = nv + k, won_iter = iter;
        if (!(w < prev - z.eps * (1 + w))) break;
        prev = w;
        for (int r = 0; r < p; r++) appr[r] = vr[r].bubble;
        ps.approved = appr, ps.max_approved = w;
      }
      for (int j = k + 1; sched_zb_skip_repeats && j < 4; j++)
        if (!((unsigned)(j ^ k) & ~z.agree_v)) same[j] = 1;
    }
    /* micro-batch rounds (asked for, and one chunk per rank): eight variants, and nothing else */
    memset(same, 0, 8);
    for (int k = 0; rounds && v == 1 && k < 8 && !AT_FLOOR; k++) {
      if ((only >= 0 && only != nv + 8 + k) || same[k]) continue;
      int run = zbr_run(&z, (zbr_variant){k & 1, (k >> 1) & 1, k >> 2}); /* bits: eager, greedy, b_first */
      for (int j = k + 1; sched_zb_skip_repeats && j < 8; j++) /* flipping only flags that decided nothing: this run again */
        if (!((unsigned)(j ^ k) & ~z.agree_rounds)) same[j] = 1;
      if (run == CORE_OK && zb_keep(&z, &best, &best_span, &best_end)) ok = 1, won = nv + 8 + k;
    }
    /* the list scheduler's variants, each given up once it cannot beat the best so far, none
     * tried once the best reaches the least span possible, the most work of one rank, or
     * AT_FLOOR. A variant whose every decision a run shows would have come out the same (the
     * run's agree masks) is that run again, to the op: it could not be kept (a tie keeps the
     * first), and it is skipped. */
    memset(same, 0, (size_t)nv);
    for (int i = 0; !rounds && i < nv && best_span > least * (1 + 1e-9) && !AT_FLOOR; i++) {
      if ((only >= 0 && i != only) || same[i]) continue;
      z.var = vars[i];
      z.bound = best_span;
      int run = zb_run(&z);
      for (int j = i + 1; sched_zb_skip_repeats && j < nv; j++)
        if (vars[j].f_first == vars[i].f_first && vars[j].reserve == vars[i].reserve &&
            (z.agree_fill >> vars[j].fill_all & 1) && (z.agree_fcap >> vars[j].fcap & 1))
          same[j] = 1;
      if (run) {
        rc = CORE_ERUNTIME;
        continue;
      }
      if (zb_keep(&z, &best, &best_span, &best_end)) ok = 1, won = i;
    }
#undef AT_FLOOR
    if (probe) {
      if (!ok) won = -1; /* nothing scheduled the probe: all of them in full */
      ok = 0;
    } else if (!ok && won >= 0) {
      won = -1, probe = 1; /* the winner failed in full: all of them in full */
    }
  }
  free(vr), free(appr);
  if (!ok && rc == CORE_OK) /* the rounds alone (every variant over the budget): no order, an error */
    rc = core_error_set(CORE_ERUNTIME, "%s: no micro-batch-rounds order keeps the memory budget", sched_family_name(pr->family));
  if (ok) {
    rc = CORE_OK;
    /* each rank's stream written in place through its own pointer (compile_compute reserved its
     * ops exactly): no per-op push with its checks and stream lookups */
    sched_instr **w = core_malloc(sizeof(sched_instr *) * (size_t)p);
    for (int r = 0; r < p; r++) {
      CORE_ASSERT(pr->streams[r].cap >= pr->streams[r].len + 3 * v * m);
      w[r] = pr->streams[r].ins + pr->streams[r].len;
    }
    for (size_t i = 0; i < 3 * n; i++) {
      const int *o = &best[4 * i];
      *w[o[0]]++ = (sched_instr){.op = (uint8_t)o[1], .mb = o[3], .chunk = pr->chunk_of[o[2]], .peer = -1, .slot = -1, .aslot = -1};
    }
    for (int r = 0; r < p; r++) pr->streams[r].len = (int)(w[r] - pr->streams[r].ins);
    free(w);
    if (rank_end) memcpy(rank_end, z.kept_last, sizeof(double) * (size_t)p);
  }
  for (int r = 0; r < p; r++) free(z.rk[r].wq);
  free(z.rk), free(z.kept_last), free(z.end), free(z.cost), free(z.hop), free(z.tree), free(z.order), free(best);
  return rc;
}
