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
 * Two more constructors sit below the list scheduler: the V in rounds (zb-v, v-zb) and v-half /
 * v-min's building block; each one's order is timed under the costs like the list scheduler's.
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

typedef struct {
  int nf[2], ni[2]; /* per chunk (one or two): next F, next I (micro-batch order) */
  int open, open1;  /* chunk slots between F and I; of which chunk 1's */
  int *wq, wh, wt;  /* pending W's as micro-batch * 2 + chunk (wq_chunk, wq_mb), oldest first */
  double free_at;   /* when the rank's last op ends */
  double first, last; /* first compute start, last end */
  double left;        /* compute time of its ops not yet run */
  double idle;        /* idle time since its first op */
  double cap;       /* budget in chunk slots: open + w_stash * pending */
  int fcap;         /* open forwards at most */
  int fcaps[3];     /* what fcap would be under each zb_variant.fcap (open_cap) */
  double t;         /* its next choice: time, op, chunk, mb */
  int op, chunk, mb;
  int dep;          /* the choice weighed a W in a gap: it read the neighbours' clocks
                     * (next_start) or every rank's idle time (max_idle), not only arrivals */
} zb_rank;

typedef struct {
  int fill_all; /* W fills every gap (1), only gaps it fits (0), or also a gap that would make
                 * the rank's idle time the largest of all ranks (2: the paper's rule), or larger
                 * than the largest by a quarter (3) */
  int reserve;  /* V: chunk slots a chunk-0 forward leaves free for chunk 1 (>= 1); -1: r + 1 */
  int fcap;     /* zb-auto: open forwards at most on rank r: 0 none, 1 p - r, 2 2(p-r) - 1 */
  int f_first;  /* an F ready with an I goes first (1F1B's order) rather than the I */
} zb_variant;

typedef struct {
  double f, i;
} zb_end;

typedef struct {
  double t; /* a rank's next choice's time, beside the rank: one load per match */
  int r;
} zb_node;

typedef struct {
  sched_program *pr;
  const sched_costs *c;
  zb_variant var;
  int S, m, max_w;
  double ws, eps;
  zb_end *end; /* [m][S]: when each (micro-batch, stage)'s F and I end, < 0 until done; micro-batch
                * major, so the stages a decision reads (s - 1, s, s + 1) share cache lines */
  double *cost;          /* [S][4]: sched_op_cost of F, B, I, W of each virtual stage */
  double *hop;           /* [S]: the hop between stages s and s + 1 (comm across ranks, else 0) */
  zb_rank *rk;
  /* a tournament tree over the ranks by (next choice's time, rank): leaf P2 + r is rank r (r >= p:
   * none, its key INFINITY), node i the earlier of nodes 2i and 2i + 1, node 1 the rank to run
   * next; each node holds its winner's time with it */
  zb_node *tree;
  int P2;
  int *order;           /* the chosen ops in time order: (rank, op, chunk, mb) */
  size_t norder;
  double bound;         /* a variant whose longest span must exceed this is given up */
  double max_idle;      /* the largest idle time of a rank so far */
  size_t placed;        /* ops placed over every variant tried (progress) */
  double *kept_last;    /* [p]: each rank's last end in the order zb_keep last kept */
  /* the variants this run's decisions agree with, as masks over zb_variant.fill_all (bit f) and
   * .fcap (bit c): a bit is cleared once some decision would have come out differently under
   * that value; agree_rounds the same over a rounds run's flags (ZBR_*), agree_v over the V in
   * rounds' fill_f (bit 0) and fill_b (bit 1), over every pass of a variant. See sched_compile_zb,
   * which skips the variants a run shows would repeat it. */
  unsigned agree_fill, agree_fcap, agree_rounds, agree_v;
  unsigned tick;
} zb_state;

int sched_zb_skip_repeats = 1;

static double cost(const zb_state *z, sched_op op, int s) { return z->cost[4 * s + op - SCHED_FORWARD]; }

/* When the input of the F of stage s, micro-batch j arrives; INFINITY while its producer has not
 * run. */
static inline double f_ready(const zb_state *z, int s, int j) {
  if (s == 0) return 0;
  double e = z->end[(size_t)j * z->S + s - 1].f;
  return e >= 0 ? e + z->hop[s - 1] : INFINITY;
}

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

/* When the I of stage s, micro-batch j can start: its F done and its output gradient arrived;
 * INFINITY until both. */
static inline double i_ready(const zb_state *z, int s, int j) {
  const zb_end *at = &z->end[(size_t)j * z->S + s];
  double t = at->f;
  if (t < 0) return INFINITY;
  if (s == z->S - 1) return t;
  double e = at[1].i;
  if (e < 0) return INFINITY;
  e += z->hop[s];
  return e > t ? e : t;
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

static int pending(const zb_rank *k) { return k->wt - k->wh; }
/* A pending W's chunk and micro-batch (one or two chunks per rank here) */
static inline int wq_chunk(int code) { return code & 1; }
static inline int wq_mb(int code) { return code >> 1; }
static double mem(const zb_state *z, const zb_rank *k) { return k->open + z->ws * pending(k); }

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

static void run_op(zb_state *z, int r) {
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
static int open_cap(const zb_state *z, int r, int var_fcap) {
  const sched_program *pr = z->pr;
  int p = pr->p, fc = var_fcap == 1 ? p - r : var_fcap == 2 ? 2 * (p - r) - 1 : 0;
  if (pr->family == SCHED_ZB_H1) fc = p - r;
  if (pr->family == SCHED_ZB_H2) fc = 2 * (p - r) - 1;
  return fc > 0 ? fc : pr->v * z->m;
}

/* Nothing scheduled yet: every op not run, every rank empty and free at 0. */
static void zb_reset(zb_state *z) {
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
    for (int f = 0; f < 3; f++) z->rk[r].fcaps[f] = open_cap(z, r, f);
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
    run_op(z, r);
    if (k->free_at - k->first + k->left > z->bound * (1 + 1e-9)) return CORE_ERUNTIME;
    update_around(z, r, op, s, j);
  }
  return CORE_OK;
}

/* ---- the V in rounds (two chunks per rank) ----
 * The list scheduler above decides op by op; in a V it leaves a bubble that grows with p, since a
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
typedef struct {
  int fill_f, fill_b;       /* a W fills an over-long gap before an F / before a chunk-1 I */
  const double *approved;   /* per rank, or NULL */
  double max_approved;
} zbv_pass;

typedef struct {
  double cur, mem, bubble;
} zbv_rank;

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
  run_op(z, r); /* counts, end, order, first / last */
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
static int zbv_run(zb_state *z, zbv_rank *vr, const zbv_pass *ps) {
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
static int vpat_run(zb_state *z, int half) {
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
      run_op(z, r);
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
typedef struct {
  int eager, greedy, b_first;
} zbr_variant;

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
  run_op(z, r);
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

static int zbr_run(zb_state *z, zbr_variant var) {
  const sched_program *pr = z->pr;
  int p = pr->p, m = z->m, rc = 0;
  zb_reset(z);
  z->agree_rounds = ZBR_EAGER | ZBR_GREEDY | ZBR_B_FIRST;
  int *req = core_calloc((size_t)p, sizeof(int));
  for (int r = 0; r < p; r++) z->rk[r].fcap = open_cap(z, r, 0);
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
