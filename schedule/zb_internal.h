/* schedule/zb_internal.h: what zb.c (the list scheduler, and the driver that runs and compares
 * every constructor's variants) and zb_rounds.c (the V in rounds, v-half / v-min's building
 * block, the micro-batch rounds) share: the state a run builds its order in, the ops' ready times
 * under it, and the entry points each file gives the other. */
#ifndef BRIGADE_SCHEDULE_ZB_INTERNAL_H
#define BRIGADE_SCHEDULE_ZB_INTERNAL_H

#include <math.h>
#include <stddef.h>

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

static inline double cost(const zb_state *z, sched_op op, int s) { return z->cost[4 * s + op - SCHED_FORWARD]; }

/* When the input of the F of stage s, micro-batch j arrives; INFINITY while its producer has not
 * run. */
static inline double f_ready(const zb_state *z, int s, int j) {
  if (s == 0) return 0;
  double e = z->end[(size_t)j * z->S + s - 1].f;
  return e >= 0 ? e + z->hop[s - 1] : INFINITY;
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

static inline int pending(const zb_rank *k) { return k->wt - k->wh; }
/* A pending W's chunk and micro-batch (one or two chunks per rank here) */
static inline int wq_chunk(int code) { return code & 1; }
static inline int wq_mb(int code) { return code >> 1; }
static inline double mem(const zb_state *z, const zb_rank *k) { return k->open + z->ws * pending(k); }

/* zb.c: runs rank r's chosen op (k->op, k->chunk, k->mb) at k->t: its end, the rank's counts and
 * clocks, the order */
void zb_run_op(zb_state *z, int r);
/* zb.c: open forwards rank r may hold (var_fcap as zb_variant.fcap) */
int zb_open_cap(const zb_state *z, int r, int var_fcap);
/* zb.c: nothing scheduled yet: every op not run, every rank empty and free at 0 */
void zb_reset(zb_state *z);

/* zb_rounds.c: the V in rounds, one pass (zbv_run: which gaps a W fills, and the bubbles an
 * earlier pass approved; vr gets each rank's bubble), the building block of v-half (half = 1) and
 * v-min (vpat_run), the micro-batch rounds (zbr_run); each CORE_OK with z's order built, or an
 * error when it cannot keep the budget */
typedef struct {
  int fill_f, fill_b;     /* a W fills an over-long gap before an F / before a chunk-1 I */
  const double *approved; /* per rank, or NULL */
  double max_approved;
} zbv_pass;

typedef struct {
  double cur, mem, bubble;
} zbv_rank;

typedef struct {
  int eager, greedy, b_first; /* see zb_rounds.c */
} zbr_variant;

int zbv_run(zb_state *z, zbv_rank *vr, const zbv_pass *ps);
int vpat_run(zb_state *z, int half);
int zbr_run(zb_state *z, zbr_variant var);

#endif
