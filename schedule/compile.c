/* schedule/compile.c: compute orders (which F and B each rank runs, in which order).
 * Transfers, loads and buffer slots are added by schedule/lower.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/progress.h"
#include "schedule/internal.h"

/* GPipe (fill-drain): all forwards, then all backwards. */
static void compile_gpipe(sched_program *pr) {
  for (int r = 0; r < pr->p; r++) {
    for (int j = 0; j < pr->m; j++) sched_push_action(pr, SCHED_FORWARD, r, j);
    for (int j = 0; j < pr->m; j++) sched_push_action(pr, SCHED_BACKWARD, r, j);
  }
}

/* Forward only (DeepSpeed's InferenceSchedule): each rank runs its chunks' forwards in
 * micro-batch order, chunk by chunk within a micro-batch. */
static void compile_inference(sched_program *pr) {
  pr->forward_only = 1;
  for (int j = 0; j < pr->m; j++)
    for (int s = 0; s < pr->p * pr->v; s++) sched_push_action(pr, SCHED_FORWARD, s, j);
}

/* 1F1B (PipeDream-Flush): min(p-r-1, m) warm-up forwards, then one forward and one backward
 * alternately, then the remaining backwards. */
static void compile_1f1b(sched_program *pr) {
  for (int r = 0; r < pr->p; r++) {
    int warm = pr->p - r - 1 < pr->m ? pr->p - r - 1 : pr->m;
    int f = 0, b = 0;
    for (; f < warm; f++) sched_push_action(pr, SCHED_FORWARD, r, f);
    for (; f < pr->m; f++, b++) {
      sched_push_action(pr, SCHED_FORWARD, r, f);
      sched_push_action(pr, SCHED_BACKWARD, r, b);
    }
    for (; b < pr->m; b++) sched_push_action(pr, SCHED_BACKWARD, r, b);
  }
}

/* The k-th forward (or backward) unit of a rank in Megatron-LM's interleaved order:
 * micro-batches go in groups; within a group all micro-batches run chunk 0, then chunk 1, ...
 * (backward: the last chunk first). Megatron's groups have p micro-batches and it requires
 * m % p == 0. Here the remainder m % p joins the *first* group (m < 2p: one group of m):
 *  - every group but a lone one has at least p micro-batches, so the first micro-batch of a group
 *    comes back to rank 0 for its next chunk only after the group's other forwards, as in
 *    Megatron;
 *  - the largest group comes first, so the warm-up sized for it keeps every backward behind its
 *    own forward in the later, smaller groups.
 * The order is deadlock-free for every m >= 1 (checked for p <= 16, m <= 64 by the tests). */
static int first_group(int p, int m) { return m < 2 * p ? m : p + m % p; }

static void interleaved_unit(int p, int v, int m, int k, int backward, int *chunk, int *mb) {
  int g0 = first_group(p, m), in, gsize, base;
  if (k < g0 * v) {
    in = k, gsize = g0, base = 0;
  } else {
    int g = (k - g0 * v) / (p * v);
    in = (k - g0 * v) % (p * v), gsize = p, base = g0 + g * p;
  }
  int c = in / gsize;
  *mb = base + in % gsize;
  *chunk = backward ? v - 1 - c : c;
}

static void compile_interleaved(sched_program *pr) {
  int p = pr->p, v = pr->v, m = pr->m, n = m * v;
  for (int r = 0; r < p; r++) {
    /* Megatron's warm-up: the first v-1 chunks of the first group, plus two forwards per
     * downstream rank; capped by the work there is. */
    int warm = (p - r - 1) * 2 + (v - 1) * first_group(p, m);
    if (warm > n) warm = n;
    int f = 0, b = 0, c, j;
    for (; f < warm; f++) {
      interleaved_unit(p, v, m, f, 0, &c, &j);
      sched_push_action(pr, SCHED_FORWARD, pr->stage_of[r * v + c], j);
    }
    for (; f < n; f++, b++) {
      interleaved_unit(p, v, m, f, 0, &c, &j);
      sched_push_action(pr, SCHED_FORWARD, pr->stage_of[r * v + c], j);
      interleaved_unit(p, v, m, b, 1, &c, &j);
      sched_push_action(pr, SCHED_BACKWARD, pr->stage_of[r * v + c], j);
    }
    for (; b < n; b++) {
      interleaved_unit(p, v, m, b, 1, &c, &j);
      sched_push_action(pr, SCHED_BACKWARD, pr->stage_of[r * v + c], j);
    }
  }
}

/* DualPipeV: DeepSeek's DualPipe (DeepSeek-V3 report) cut in half by Sea AI Lab, as in
 * deepseek-ai/DualPipe's dualpipev.py. The V placement of zb-v (chunk 0 of rank r is stage r,
 * chunk 1 is stage 2p-1-r) and m >= 2p micro-batches; rank r runs, in eight phases,
 *   1. 2(p-r-1) x F0     2. (r+1) x F0 F1     3. (p-r-1) x I1 W F1
 *   4. (m-2p+r+1) x F0 B1 F1 B0     5. (p-r-1) x B1 F1 B0
 *   6. (r+1) x B1 B0, from the middle on split (I, W deferred)   7. (p-r-1) x W I0   8. (r+1) x W
 * where Fc / Bc are the next forward / full backward of chunk c, Ic the input half of the next
 * backward with its weight half queued, and W the oldest queued weight half. DualPipe's point is
 * to overlap the F and B of a pair in phases 4-5 (one's compute with the other's all-to-all);
 * here a pair runs F first, then B. The queue is FIFO and every chunk's backwards go in
 * micro-batch order, so each chunk's weight gradients add up in micro-batch order. */
typedef struct {
  sched_program *pr;
  int r, f[2], b[2];
  int *wq; /* queued W: chunk * m + micro-batch */
  int wh, wt;
} dualpipev;

static int dpv_stage(const dualpipev *d, int c) { return d->pr->stage_of[d->r * 2 + c]; }
static void dpv_f(dualpipev *d, int c) { sched_push_action(d->pr, SCHED_FORWARD, dpv_stage(d, c), d->f[c]++); }
static void dpv_b(dualpipev *d, int c, int split) {
  int mb = d->b[c]++;
  sched_push_action(d->pr, split ? SCHED_BACKWARD_INPUT : SCHED_BACKWARD, dpv_stage(d, c), mb);
  if (split) d->wq[d->wt++] = c * d->pr->m + mb;
}
static void dpv_w(dualpipev *d) {
  int k = d->wq[d->wh++];
  sched_push_action(d->pr, SCHED_BACKWARD_WEIGHT, dpv_stage(d, k / d->pr->m), k % d->pr->m);
}

static void compile_dualpipev(sched_program *pr) {
  int p = pr->p, m = pr->m;
  for (int r = 0; r < p; r++) {
    dualpipev d = {.pr = pr, .r = r, .wq = core_malloc(sizeof(int) * 2 * (size_t)m)};
    for (int i = 0; i < 2 * (p - r - 1); i++) dpv_f(&d, 0);
    for (int i = 0; i < r + 1; i++) dpv_f(&d, 0), dpv_f(&d, 1);
    for (int i = 0; i < p - r - 1; i++) dpv_b(&d, 1, 1), dpv_w(&d), dpv_f(&d, 1);
    for (int i = 0; i < m - 2 * p + r + 1; i++) dpv_f(&d, 0), dpv_b(&d, 1, 0), dpv_f(&d, 1), dpv_b(&d, 0, 0);
    for (int i = 0; i < p - r - 1; i++) dpv_b(&d, 1, 0), dpv_f(&d, 1), dpv_b(&d, 0, 0);
    int split = 0;
    for (int i = 0; i < r + 1; i++) {
      if (i == (r + 1) / 2 && r % 2 == 1) split = 1;
      dpv_b(&d, 1, split);
      if (i == (r + 1) / 2 && r % 2 == 0) split = 1;
      dpv_b(&d, 0, split);
    }
    for (int i = 0; i < p - r - 1; i++) dpv_w(&d), dpv_b(&d, 0, 1);
    while (d.wh < d.wt) dpv_w(&d); /* phase 8: r + 1 of them */
    free(d.wq);
  }
}

/* "--virtual 2" or "pipeline.virtual_stages = 2" */
static void named_v(char *buf, size_t n, const char *name, int v) {
  snprintf(buf, n, "%s%s%d", name, strncmp(name, "--", 2) == 0 ? " " : " = ", v);
}

int sched_check_virtual(sched_family family, int v, const char *name, const char *where) {
  char got[96], give[96], at[300] = "";
  named_v(got, sizeof got, name, v);
  named_v(give, sizeof give, name, 2);
  if (where) snprintf(at, sizeof at, " (%s)", where);
  switch (family) {
  case SCHED_GPIPE:
  case SCHED_1F1B:
    if (v != 1)
      return core_error_set(CORE_EINPUT, "schedule %s runs one chunk per rank (got %s); use interleaved for virtual "
                            "stages%s", sched_family_name(family), got, at);
    break;
  case SCHED_ZB_H1:
  case SCHED_ZB_H2:
  case SCHED_ZB_AUTO:
    if (v != 1)
      return core_error_set(CORE_EINPUT, "schedule %s runs one chunk per rank (got %s)%s", sched_family_name(family), got,
                            at);
    break;
  case SCHED_ZB_V:
  case SCHED_V_ZB:
  case SCHED_V_HALF:
  case SCHED_V_MIN:
  case SCHED_DUALPIPE_V:
    if (v != 2)
      return core_error_set(CORE_EINPUT, "schedule %s runs two chunks per rank in a V (give %s, got %d)%s",
                            sched_family_name(family), give, v, at);
    break;
  case SCHED_INTERLEAVED:
    if (v < 2)
      return core_error_set(CORE_EINPUT, "schedule interleaved needs %s >= 2 chunks per rank (got %d)%s", name, v, at);
    break;
  default: break;
  }
  return CORE_OK;
}

/* rounds, rank_end: see sched_compile_zb (zero-bubble families only) */
static int compile_compute(const sched_shape *sh, const sched_costs *costs, sched_program *out, int rounds,
                           double *rank_end) {
  if (sh->p < 1) return core_error_set(CORE_EINPUT, "--stages must be >= 1 (got %d)", sh->p);
  if (sh->m < 1) return core_error_set(CORE_EINPUT, "--microbatches must be >= 1 (got %d)", sh->m);
  if (sh->v < 1) return core_error_set(CORE_EINPUT, "--virtual must be >= 1 (got %d)", sh->v);
  if (sh->zero3 && (sh->prefetch < 0 || sh->prefetch > 64))
    return core_error_set(CORE_EINPUT, "--prefetch must be in [0, 64] runs of a chunk's ops (got %d)", sh->prefetch);
  if (!sh->zero3 && (sh->keep_gathered || sh->prefetch))
    return core_error_set(CORE_EINPUT, "--keep-gathered and --prefetch place ZeRO-3's parameter gathers: give --zero3");
  if (sh->max_pending_w < 0)
    return core_error_set(CORE_EINPUT, "--max-pending-w must be >= 1, or 0 for the default (got %d)", sh->max_pending_w);
  if (sh->max_pending_w > 0 && !sched_family_is_zb(sh->family))
    return core_error_set(CORE_EINPUT, "--max-pending-w applies to zb-h1, zb-h2, zb-auto, zb-v and the v-* "
                          "schedules (not %s)", sched_family_name(sh->family));
  if (!(sh->mem_limit >= 0) || sh->mem_limit > 1e9)
    return core_error_set(CORE_EINPUT, "--mem-limit must be a number of stage activations >= 1 (got %g)", sh->mem_limit);
  if (sh->mem_limit > 0 && sh->family != SCHED_ZB_AUTO)
    return core_error_set(CORE_EINPUT, "--mem-limit applies to zb-auto (not %s, whose memory is fixed: %g "
                          "stage activations)", sched_family_name(sh->family), sched_memory_cap(sh));
  if (sh->family == SCHED_ZB_AUTO && sh->mem_limit > 0 && sh->mem_limit < 1)
    return core_error_set(CORE_EINPUT, "--mem-limit %g holds less than one micro-batch's activations (give >= 1)",
                          sh->mem_limit);
  if (!(costs->w_stash >= 0 && costs->w_stash <= 1))
    return core_error_set(CORE_EINPUT, "--w-stash must be a fraction in (0, 1] (got %g)", costs->w_stash);
  int rc = sched_check_virtual(sh->family, sh->v, "--virtual", NULL);
  if (rc) return rc;
  switch (sh->family) {
  case SCHED_DUALPIPE_V:
    if (sh->m < 2 * sh->p)
      return core_error_set(CORE_EINPUT, "schedule dualpipev needs at least 2 micro-batches per stage "
                            "(m >= 2p = %d, got %d)", 2 * sh->p, sh->m);
    break;
  case SCHED_GPIPE:
  case SCHED_1F1B:
  case SCHED_ZB_H1:
  case SCHED_ZB_H2:
  case SCHED_ZB_AUTO:
  case SCHED_ZB_V:
  case SCHED_V_ZB:
  case SCHED_V_HALF:
  case SCHED_V_MIN:
  case SCHED_INFERENCE:
  case SCHED_INTERLEAVED: break;
  default: return core_error_set(CORE_EINPUT, "schedule family %d cannot be compiled", sh->family);
  }
  rc = sched_costs_check(costs, sh->p * sh->v, sh->m); /* zb.c's list scheduler times by them */
  if (rc) return rc;
  /* the V placement: chunk 0 of rank r is stage r, chunk 1 is stage 2p-1-r */
  int *vshape = NULL;
  if (sched_family_is_v(sh->family)) {
    vshape = core_malloc(sizeof(int) * 2 * (size_t)sh->p);
    for (int r = 0; r < sh->p; r++) vshape[2 * r] = r, vshape[2 * r + 1] = 2 * sh->p - 1 - r;
  }
  rc = sched_program_init(out, sh->family, sh->p, sh->v, sh->m, vshape);
  free(vshape);
  if (rc) return rc;
  out->tied = sh->tied;
  for (int r = 0; r < sh->p; r++) { /* each rank's compute ops, exactly (dualpipev: its split backwards too) */
    size_t vm = (size_t)sh->v * (size_t)sh->m;
    size_t n = sh->family == SCHED_INFERENCE ? vm : sched_family_is_zb(sh->family) ? 3 * vm : 2 * vm;
    if (sh->family == SCHED_DUALPIPE_V) n += 2 * (size_t)(sh->p - r - 1) + (size_t)r + 1;
    sched_reserve(out, r, n);
  }
  double cap = sched_memory_cap(sh);
  out->mem_cap = cap < INFINITY ? cap : 0;
  switch (sh->family) {
  case SCHED_GPIPE: compile_gpipe(out); break;
  case SCHED_1F1B: compile_1f1b(out); break;
  case SCHED_INTERLEAVED: compile_interleaved(out); break;
  case SCHED_INFERENCE: compile_inference(out); break;
  case SCHED_DUALPIPE_V: compile_dualpipev(out); break;
  default: rc = sched_compile_zb(out, sh, costs, rounds, rank_end); break; /* zb-h1, zb-h2, zb-auto, zb-v, v-* */
  }
  if (rc) sched_program_free(out);
  return rc;
}

int sched_compile_compute(const sched_shape *sh, const sched_costs *costs, sched_program *out) {
  return compile_compute(sh, costs, out, 0, NULL);
}

int sched_compile_compute_rounds(const sched_shape *sh, const sched_costs *costs, sched_program *out, double *rank_end) {
  return compile_compute(sh, costs, out, 1, rank_end);
}

/* zb-h1, zb-h2 and zb-auto have two constructors of their compute order, the list scheduler and
 * the micro-batch rounds (zb.c, zb_rounds.c), each timing compute alone; the transfers and the memory
 * promise that lowering adds move their figures apart, either way. So both orders are lowered
 * and simulated (one step) and the one with the smaller bubble rate (then makespan) is kept;
 * ties keep the list scheduler's. Measured on the zero-bubble paper's 12 set-ups
 * (bench/zb_paper.sh). */
static int two_orders(const sched_shape *sh) {
  return sh->v == 1 && (sh->family == SCHED_ZB_H1 || sh->family == SCHED_ZB_H2 || sh->family == SCHED_ZB_AUTO);
}

/* What internal.h says: for each whole o, the most pending W's the budget leaves room for (within
 * its own tolerance, as f_fits has it, and a hair more, so that rounding in the division never
 * drops one that fits). */
double sched_left_at_last_forward(double cap, double ws, int omax, int m, double i, double w) {
  double best = 0, room = cap + 1e-9 * (1 + cap);
  for (int o = 1; o <= omax; o++) {
    double q = m - o, fit = ws > 0 ? floor((room - o) / ws + 1e-9) : q;
    q = fit < q ? fit : q;
    double work = (o - 1) * (i + w) + (q > 0 ? q : 0) * w;
    best = work > best ? work : best;
  }
  return best;
}

/* What internal.h says of sched_budget_ends and sched_order_bound. */
void sched_budget_ends(const sched_program *pr, const double *ct, double comm, double cap, double ws, int m,
                       double *end) {
  CORE_ASSERT(pr->v == 1); /* one chunk per rank: stage s is the only one of its rank */
  int S = pr->p;
  double held = floor(cap + 1e-9 * (1 + cap)); /* open forwards the budget holds, a chunk slot each */
  double *down = core_malloc(sizeof(double) * 3 * (size_t)S), *up = down + S, *back = up + S;
  for (int s = 0; s < S; s++) /* when stage s can first start: a forward has come down to it */
    down[s] = s ? down[s - 1] + ct[4 * (s - 1)] + (pr->rank_of[s - 1] != pr->rank_of[s] ? comm : 0) : 0;
  up[S - 1] = down[S - 1] + ct[4 * (S - 1)]; /* when stage s can first start an I (or B) */
  for (int s = S - 2; s >= 0; s--)
    up[s] = up[s + 1] + ct[4 * (s + 1) + 2] + (pr->rank_of[s + 1] != pr->rank_of[s] ? comm : 0);
  back[S - 1] = 0; /* from the end of a micro-batch's F on stage s to the earliest start of its I there */
  for (int s = S - 2; s >= 0; s--) {
    double hop = pr->rank_of[s + 1] != pr->rank_of[s] ? comm : 0;
    back[s] = back[s + 1] + hop + ct[4 * (s + 1)] + ct[4 * (s + 1) + 2] + hop;
  }
  for (int s = 0; s < S; s++) {
    int r = pr->rank_of[s];
    double f = ct[4 * s], i = ct[4 * s + 2], w = ct[4 * s + 3];
    double most = pr->family == SCHED_ZB_H1 ? S - r : pr->family == SCHED_ZB_H2 ? 2 * (S - r) - 1 : held;
    most = most < held ? most : held;
    int n = most < m ? (int)most : m; /* (a whole count: held is floored) */
    double start = up[s] - n * f; /* those forwards leave the rest of the wait idle */
    start = start > down[s] ? start : down[s];
    /* the cool-down: after the last F the rank waits for its gradient with only the work the
     * budget let it keep; that idle time comes after the first I when more forwards than the
     * budget holds must run (m > n), else it is counted from the first op alone */
    double cool = back[s] - sched_left_at_last_forward(cap, ws, n, m, i, w);
    cool = cool > 0 ? cool : 0;
    double busy = m * f + m * i + m * w; /* F, I, W (B = I + W) */
    if (m > n) end[r] = start + busy + cool;
    else end[r] = (start > down[s] + cool ? start : down[s] + cool) + busy;
  }
  free(down);
}

double sched_order_bound(const sched_shape *sh, const sched_program *out, const sched_costs *costs, double *floor_end) {
  double *ct = sched_cost_table(costs, out->p), *e = floor_end ? floor_end : core_malloc(sizeof(double) * (size_t)out->p);
  double end = 0;
  sched_budget_ends(out, ct, costs->comm, sched_memory_cap(sh), sched_w_stash(costs), sh->m, e);
  for (int r = 0; r < out->p; r++) end = e[r] > end ? e[r] : end;
  if (!floor_end) free(e);
  free(ct);
  return end + costs->reduce + costs->norm + costs->step;
}

/* Replaces *out by the rounds' lowered program when it simulates faster; errors of the second
 * attempt are dropped (the first program stands). Not lowered when it cannot win, judged from the
 * rounds' compute order run as early as it can (no lowering of it ends anything sooner), then the
 * step's tail (reduce, the norm, the update: what a step adds after its last compute op, at the
 * least): it ends no sooner than *out, so it cannot win on a tie, and either *out has no bubble or the rounds'
 * first rank ends no sooner than *out's longest span. That rank holds stage 0 alone, whose first
 * forward starts at 0, so its span, and the longest, is at least that end: the bubble rate
 * (1 - mean busy / longest span, the busy times the same ops' either way) no smaller. Not even
 * built when sched_order_bound shows the same of every order that keeps the budget: *out reaches
 * its least makespan and has no bubble, or a longest span no longer than the first rank's least
 * end. */
int sched_skip_second_order = 1;
long sched_second_orders_built = 0;

/* The skip of keep_faster decided without simulating *out (fl: sched_order_bound's floors):
 * lowering placed it on time to the bit (low->exact), so the simulator would run each compute op
 * at its ASAP time, each rank's span from low->first to low->last, and (no tied reduction) end
 * the step at the latest of those ends plus the reduce, then the norm and the update. When that
 * latest end reaches the least any order keeping the budget can have and the longest span is no
 * longer than the first rank's least end, no order simulates to a smaller bubble rate or
 * makespan. */
static int at_floor_as_lowered(const sched_program *out, const sched_lower_info *low, const double *fl) {
  if (!sched_skip_second_order || !low || !low->exact || out->tied) return 0;
  double least = 0, end = 0, span = 0;
  for (int r = 0; r < out->p; r++) {
    least = fl[r] > least ? fl[r] : least, end = low->last[r] > end ? low->last[r] : end;
    span = low->last[r] - low->first[r] > span ? low->last[r] - low->first[r] : span;
  }
  return !(least < end * (1 - 1e-12)) && !(fl[out->rank_of[0]] < span * (1 - 0.5e-12));
}

/* What internal.h says. */
void sched_exact_times(const sched_program *pr, const sched_costs *c, const sched_lower_info *low, double *makespan,
                       double *span) {
  double latest = 0;
  *span = 0;
  for (int r = 0; r < pr->p; r++) {
    latest = low->last[r] + c->reduce > latest ? low->last[r] + c->reduce : latest;
    *span = low->last[r] - low->first[r] > *span ? low->last[r] - low->first[r] : *span;
  }
  *makespan = latest + c->norm + c->step;
}

/* *out's makespan and longest span as the simulator gives them (one step, under the barrier):
 * sched_exact_times where lowering placed *out on time to the bit (known), else a simulation
 * (*a, then held: *have_a). */
static int first_times(const sched_program *out, const sched_costs *costs, const sched_lower_info *low, int known,
                       sched_sim_result *a, int *have_a, double *makespan, double *span) {
  if (known) {
    sched_exact_times(out, costs, low, makespan, span);
    return CORE_OK;
  }
  int rc = sched_simulate_time(out, costs, a);
  if (rc) return rc;
  *have_a = 1, *makespan = a->makespan, *span = 0;
  for (int r = 0; r < a->p; r++) *span = a->ranks[r].span > *span ? a->ranks[r].span : *span;
  return CORE_OK;
}

static void keep_faster(const sched_shape *sh, const sched_costs *costs, sched_program *out, const sched_lower_info *low) {
  sched_program compute, alt;
  sched_sim_result a, b;
  double asap = 0, span, makespan, *rank_end = core_malloc(sizeof(double) * (size_t)sh->p);
  double least = sched_order_bound(sh, out, costs, rank_end); /* rank_end: each rank's floor, for now */
  /* lowering's times stand for the simulation's (the bubble rate aside: the tests below then
   * use the span alone, and *out is simulated only when they do not hold) */
  int known = sched_skip_second_order && low && low->exact && !out->tied && !out->forward_only, have_a = 0;
  if (at_floor_as_lowered(out, low, rank_end) ||
      first_times(out, costs, low, known, &a, &have_a, &makespan, &span) != CORE_OK) {
    free(rank_end); /* at the floor: the second order is not even built; or nothing to compare with */
    return;
  }
  if (sched_skip_second_order && have_a && !(least < makespan * (1 - 1e-12)) &&
      (a.bubble_rate <= 1e-12 || !(rank_end[out->rank_of[0]] < span * (1 - 0.5e-12)))) {
    free(rank_end); /* no order ends sooner, nor has a smaller bubble: the second one is not even built */
    sched_sim_result_free(&a);
    return;
  }
  sched_second_orders_built++;
  if (compile_compute(sh, costs, &compute, 1, rank_end) != CORE_OK) { /* rank_end: its ops as early as they can */
    free(rank_end);
    if (have_a) sched_sim_result_free(&a);
    return;
  }
  for (int r = 0; r < compute.p; r++) asap = rank_end[r] > asap ? rank_end[r] : asap;
  asap += costs->reduce + costs->norm + costs->step; /* the step's tail follows the latest, as in sched_order_bound */
  int no_sooner = sched_skip_second_order && !(asap < makespan * (1 - 1e-12));
  int cannot = no_sooner && rank_end[compute.rank_of[0]] >= span, rc = CORE_OK;
  if (!cannot && !have_a) /* the test by *out's bubble rate, and the comparison, need it simulated */
    rc = sched_simulate_time(out, costs, &a), have_a = !rc;
  if (!rc) rc = cannot || (no_sooner && a.bubble_rate <= 1e-12) ? CORE_EINPUT : sched_lower(&compute, costs, &alt);
  free(rank_end);
  sched_program_free(&compute);
  if (rc) {
    if (have_a) sched_sim_result_free(&a);
    return;
  }
  int rb = sched_simulate_time(&alt, costs, &b);
  int better = !rb && (b.bubble_rate < a.bubble_rate - 1e-12 ||
                       (b.bubble_rate <= a.bubble_rate + 1e-12 && b.makespan < a.makespan * (1 - 1e-12)));
  sched_sim_result_free(&a);
  if (!rb) sched_sim_result_free(&b);
  if (better) {
    sched_program_free(out);
    *out = alt;
  } else {
    sched_program_free(&alt);
  }
}

static int compile_once(const sched_shape *sh, const sched_costs *costs, sched_program *out, int fewest) {
  sched_program compute;
  core_progress_start("compiling %s p=%d v=%d m=%d", sched_family_name(sh->family), sh->p, sh->v, sh->m);
  core_progress_phase("ordering compute ops:", 0, "ops placed");
  int rc = sched_compile_compute(sh, costs, &compute);
  if (rc) {
    core_progress_stop();
    return rc;
  }
  /* its phases: timing, preparing, placing transfers; for keep_faster, how it placed them */
  double *times = two_orders(sh) ? core_malloc(sizeof(double) * 2 * (size_t)sh->p) : NULL;
  sched_lower_info low = {.first = times, .last = times ? times + sh->p : NULL};
  rc = sched_lower_how(&compute, costs, out, SCHED_LOWER_DIRECT_FIRST, &low);
  sched_program_free(&compute);
  if (rc) {
    free(times);
    core_progress_stop();
    return rc;
  }
  if (two_orders(sh)) keep_faster(sh, costs, out, &low);
  free(times);
  if (sh->zero3) rc = sched_place_gathers(out, sh->keep_gathered, sh->prefetch);
  if (!rc && sh->offload &&
      (rc = sched_place_offload(out, costs, (sched_offload_mode)sh->offload, sh->offload_limit, fewest))) {
    core_progress_stop();
    sched_program_free(out); /* the placement's own error (a limit no placement meets) */
    return rc;
  }
  if (!rc && sh->post_validation) rc = sched_place_validate(out);
  core_progress_phase("verifying:", (double)sched_program_count(out), "instructions");
  if (!rc) rc = sched_verify(out);
  core_progress_stop();
  if (rc) {
    core_error_prefix("compiled %s schedule (p=%d v=%d m=%d) failed verification",
                      sched_family_name(sh->family), sh->p, sh->v, sh->m);
    sched_program_free(out);
  }
  return rc;
}

/* The rank whose simulated peak is furthest above limit (-1: none), and by how much. */
static int over_limit(const sched_program *pr, const sched_costs *costs, double limit, double *over, double *peak,
                      int *rc) {
  sched_sim_result res;
  int worst = -1;
  *over = 0, *peak = 0;
  if ((*rc = sched_simulate(pr, costs, &res, NULL))) return -1;
  for (int r = 0; r < res.p; r++) {
    double x = res.ranks[r].peak_memory - limit;
    if (x > 1e-9 * (1 + limit) && x > *over) *over = x, worst = r, *peak = res.ranks[r].peak_memory;
  }
  sched_sim_result_free(&res);
  return worst;
}

/* What schedule.h says. */
int sched_offload_within(double limit, const sched_costs *costs, sched_program *out,
                         int (*build)(void *ctx, double limit, int fewest, sched_program *out), void *ctx) {
  int rc = build(ctx, limit, 1, out);
  if (rc || out->forward_only) return rc;
  double lim = limit;
  for (int tries = 0;; tries++) {
    double over, peak;
    int r = over_limit(out, costs, limit, &over, &peak, &rc);
    if (rc || r < 0) {
      if (rc) sched_program_free(out);
      return rc;
    }
    sched_program_free(out);
    if (tries > 0) lim -= over; /* (the first retry: the same limit, every pair taken) */
    if (tries < 4 && lim > 0 && !build(ctx, lim, 0, out)) continue;
    core_error_clear();
    return core_error_set(CORE_EINPUT, "offload auto: rank %d holds %.4g stages' activations at its simulated peak, "
                          "above the limit of %.4g, where the placement planned it under (a reload issued after a "
                          "receive it waits for), and no placement under a lower limit met it: raise the limit or "
                          "make the copies faster", r, peak, limit);
  }
}

typedef struct {
  const sched_shape *sh;
  const sched_costs *costs;
} compile_args;

static int compile_at(void *ctx, double limit, int fewest, sched_program *out) {
  const compile_args *a = ctx;
  sched_shape t = *a->sh;
  t.offload_limit = limit;
  return compile_once(&t, a->costs, out, fewest);
}

int sched_compile(const sched_shape *sh, const sched_costs *costs, sched_program *out) {
  if (sh->offload != SCHED_OFFLOAD_AUTO) return compile_once(sh, costs, out, 0);
  compile_args a = {sh, costs};
  return sched_offload_within(sh->offload_limit, costs, out, compile_at, &a);
}
