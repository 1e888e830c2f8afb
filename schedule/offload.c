/* schedule/offload.c: activation offload placed by the compiler.
 *
 * A (chunk, micro-batch) pair's activations sit idle on the device from the end of its forward
 * work (its FORWARD, the SEND_ACT after it, or the next virtual stage's FORWARD on the same rank
 * that takes its output) to the start of its backward work (its RECV_GRAD, B or I). OFFLOAD,
 * issued right after the forward work, copies them to host memory on the rank's device-to-host
 * copy stream; RELOAD, issued before the backward work, copies them back on the host-to-device
 * stream. Each stream runs one copy at a time, in issue order.
 *
 * A gradient may arrive long before its backward runs (the receive is where its data is there,
 * and the rank is busy with its other chunk meanwhile, as interleaved's last ranks in the
 * cool-down): the RECV_GRAD needs the pair back on the device (it lands in the pair's buffers),
 * but from its end to the backward the pair may go to host memory once more, a second window.
 *
 * Placement works from the simulated times of the program without offload (sched_sim_times):
 * the offload of a pair can start when its forward work ends (or when the stream is free), its
 * reload must end when its backward work starts, as late as the stream allows. A pair is
 * offloaded only when both copies fit ("hide") that way. FULL offloads every pair that hides;
 * AUTO offloads, rank by rank, the pair with the longest gap among those that would be on the
 * host at the rank's memory peak, until the peak is within the limit, and then (fewest) leaves
 * each pair it took on the device again, the last taken first, where the limit holds without it.
 * Each RELOAD goes before the last instruction that starts by its planned start, so it is issued
 * in time (a little early at most: the pair is held from then); neither copy goes inside a run of
 * transfers after a receive of it (first_recv). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/progress.h"
#include "schedule/internal.h"

typedef struct {
  int k;              /* pair: chunk * m + mb */
  int s;              /* its virtual stage */
  int fe, bf;         /* its last forward-work instruction, its first backward-work one */
  int of;             /* the OFFLOAD goes after this instruction (candidates()) */
  int slot, aslot;    /* its buffers (for the instructions' fields) */
  double part;        /* the part of the pair it moves: 1, or (from its I to its W) the W's part */
  double t_off, t_need, c; /* forward work ends, backward work starts, one copy's time */
  int chosen, bad;    /* offloaded; can never hide (tried and failed) */
  double off_end, rl_start; /* planned: the offload's end, the reload's latest start */
  int rl_pos;               /* the RELOAD goes before this instruction */
  double rl_hold;           /* when the reload, issued there, starts: the pair is held from then */
} cand;

/* A run of consecutive transfers is posted together (sim.c's post_run, the worker's groups); a
 * copy instruction inside one splits it, and the part after the copy is posted only once the
 * receives of the part before it are done (measured: dualpipev p=2 m=8, comm 0.5, copies 0.25
 * ran 51 -> 56.25 so). The rank's clock does not move over a run, so a copy issued elsewhere in
 * it is issued at the same time: a RELOAD goes before the run's first receive (sends before it
 * stay in front: a slot they free can still serve the reload), an OFFLOAD after the run (only
 * where it would follow a receive: a reload placed after its forward work could not take the
 * buffers it frees). first_recv: the first receive of the run instruction j is in, before j
 * (j itself when none, or j not a transfer). */
static int is_recv(const sched_instr *in) { return in->op == SCHED_RECV_ACT || in->op == SCHED_RECV_GRAD; }
static int first_recv(const sched_stream *st, int j) {
  int a = j;
  while (a > 0 && sched_is_p2p((sched_op)st->ins[a].op) && sched_is_p2p((sched_op)st->ins[a - 1].op)) a--;
  while (a < j && !is_recv(&st->ins[a])) a++;
  return a;
}

/* Where a reload planned to start at rl_start goes: before the last instruction of its window
 * that starts by then (a wait or a long op spanning rl_start makes it start a little early). */
static int reload_pos(const cand *x, const double *ts) {
  /* a rank runs its stream in order, so its start times never decrease: the last such j by
   * bisection (a scan of the window would make a long gap, gpipe's, quadratic in m) */
  double by = x->rl_start + 1e-9 * (1 + fabs(x->rl_start));
  int lo = x->of + 1, hi = x->bf; /* the answer is in [lo, hi]: after its offload; lo when none starts by then */
  while (lo < hi) {
    int mid = lo + (hi - lo + 1) / 2;
    if (ts[mid] <= by) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/* Offloads in the order insert() issues them: by the instruction they follow, then by when they
 * can start, then by when they are due back (the one due first copies out first), then by
 * candidate (their place in the rank's array); the device-to-host stream runs them so. */
static int issue_order(const cand *x, const cand *y) {
  if (x->of != y->of) return x->of < y->of ? -1 : 1;
  if (x->t_off != y->t_off) return x->t_off < y->t_off ? -1 : 1;
  if (x->t_need != y->t_need) return x->t_need < y->t_need ? -1 : 1;
  return (x > y) - (x < y);
}
static int by_issue(const void *a, const void *b) { return issue_order(*(cand *const *)a, *(cand *const *)b); }
static int by_need(const void *a, const void *b) {
  const cand *x = *(cand *const *)a, *y = *(cand *const *)b;
  return x->t_need != y->t_need ? (x->t_need < y->t_need ? -1 : 1) : x->k - y->k;
}

/* Plans both copy streams of one rank for its chosen candidates: offloads in issue order, each
 * as early as its forward work and the stream allow (planned by their times instead, two whose
 * forward work ends at once, such as two sends, were planned in the other order than the stream
 * runs them: the buffer planned free first was freed a copy later and its next user waited),
 * reloads (earliest deadline first) as late as the stream
 * allows (planned from the latest deadline back, so that two due at once go one after the
 * other). Returns the candidate whose reload cannot end in time, if any (the one with the
 * shortest gap among those), else NULL. */
static cand *plan_lanes(cand *cs, int n, cand **tmp, const double *ts, const sched_stream *str) {
  int q = 0;
  for (int i = 0; i < n; i++)
    if (cs[i].chosen) tmp[q++] = &cs[i];
  qsort(tmp, (size_t)q, sizeof *tmp, by_issue);
  double d2h = -INFINITY, h2d = -INFINITY;
  for (int i = 0; i < q; i++) {
    double st = tmp[i]->t_off > d2h ? tmp[i]->t_off : d2h;
    tmp[i]->off_end = d2h = st + tmp[i]->c;
  }
  qsort(tmp, (size_t)q, sizeof *tmp, by_need);
  /* reloads as late as possible: from the latest deadline back, each ending by its deadline and
   * by the next one's start (two due at once go one after the other, the earlier one sooner) */
  double next = INFINITY;
  for (int i = q - 1; i >= 0; i--) {
    double end = tmp[i]->t_need < next ? tmp[i]->t_need : next;
    tmp[i]->rl_start = next = end - tmp[i]->c;
  }
  cand *worst = NULL;
  for (int i = 0; i < q; i++) { /* in issue order: the stream and its own offload may hold it back */
    double st = tmp[i]->rl_start;
    if (st < h2d) st = h2d;
    if (st < tmp[i]->off_end) st = tmp[i]->off_end;
    tmp[i]->rl_start = st;
    tmp[i]->rl_pos = reload_pos(tmp[i], ts);
    double hold = ts[tmp[i]->rl_pos]; /* issued there: it starts then, once the stream and its offload allow */
    if (hold < h2d) hold = h2d;
    if (hold < tmp[i]->off_end) hold = tmp[i]->off_end;
    tmp[i]->rl_hold = hold < st ? hold : st;
    h2d = st + tmp[i]->c;
    if (h2d > tmp[i]->t_need + 1e-9 * (1 + fabs(tmp[i]->t_need)) &&
        (!worst || tmp[i]->t_need - tmp[i]->t_off < worst->t_need - worst->t_off))
      worst = tmp[i];
  }
  /* a reload after a receive of its run goes before the run's first receive (the reloads of one
   * run are side by side here, their positions growing with their starts, and keep their order),
   * unless its offload is at or after that receive */
  for (int i = 0; i < q; i++) {
    int f = first_recv(str, tmp[i]->rl_pos);
    if (f < tmp[i]->rl_pos && tmp[i]->of < f) tmp[i]->rl_pos = f;
  }
  return worst;
}

/* Drops chosen candidates until the plan hides every copy. */
static void settle(cand *cs, int n, cand **tmp, const double *ts, const sched_stream *str) {
  cand *w;
  while ((w = plan_lanes(cs, n, tmp, ts, str))) w->chosen = 0, w->bad = 1;
}

typedef struct {
  double t, mem;
} mev;

static int by_t(const void *a, const void *b) {
  const mev *x = a, *y = b;
  if (x->t != y->t) return x->t < y->t ? -1 : 1;
  return (x->mem > y->mem) - (x->mem < y->mem);
}

/* The rank's planned memory peak in stages' activations and when it happens: pairs from their
 * first instruction's start to their last's end (the part a pending W keeps, after their last
 * other instruction), chosen ones away from their offload's end to their reload's start. */
static double planned_peak(const sched_program *pr, int r, const sched_costs *c, double *const *ts, double *const *te,
                           const int *first, const int *last, const int *alast, const cand *cs, int n, double *at) {
  int km = pr->v * pr->m;
  mev *ev = core_malloc(sizeof(mev) * (size_t)(3 * km + 2 * n + 1));
  int ne = 0;
  for (int k = 0; k < km; k++) {
    if (first[k] < 0) continue;
    int s = pr->stage_of[r * pr->v + k / pr->m];
    double full = 1.0 / pr->v, ws = c->stage_w_stash ? c->stage_w_stash[s] : sched_w_stash(c);
    ev[ne++] = (mev){ts[r][first[k]], full};
    if (alast[k] == last[k]) {
      ev[ne++] = (mev){te[r][last[k]], -full};
    } else {
      ev[ne++] = (mev){te[r][alast[k]], -full * (1 - ws)};
      ev[ne++] = (mev){te[r][last[k]], -full * ws};
    }
  }
  for (int i = 0; i < n; i++)
    if (cs[i].chosen)
      ev[ne++] = (mev){cs[i].off_end, -cs[i].part / pr->v}, ev[ne++] = (mev){cs[i].rl_hold, cs[i].part / pr->v};
  qsort(ev, (size_t)ne, sizeof *ev, by_t);
  double mem = 0, peak = 0;
  *at = 0;
  for (int i = 0; i < ne;) { /* times within rounding of the first of a group are one time: frees first */
    int j = i;
    double by = ev[i].t + 1e-9 * (1 + fabs(ev[i].t));
    while (j < ne && ev[j].t <= by) j++;
    for (int k = i; k < j; k++)
      if (ev[k].mem < 0) mem += ev[k].mem;
    for (int k = i; k < j; k++)
      if (ev[k].mem >= 0) {
        mem += ev[k].mem;
        if (mem > peak + 1e-12) peak = mem, *at = ev[k].t;
      }
    i = j;
  }
  free(ev);
  return peak;
}

/* Rank r's candidates: pairs with backward work, from their forward work's end to their backward
 * work's start by the simulated times (that work opens with the gradient's arrival: its
 * RECV_GRAD, or the next stage's backward on this rank handing it over, sched_local_grad); and
 * pairs whose backward is split, the part their W keeps, from their last instruction but the W
 * (the I, or the SEND_GRAD after it) to the W. */
static int candidates(const sched_program *pr, int r, const sched_costs *c, double *const *ts, double *const *te,
                      cand *cs) {
  const sched_stream *st = &pr->streams[r];
  int km = pr->v * pr->m, n = 0;
  int *fe = core_malloc(sizeof(int) * (size_t)km), *bf = core_malloc(sizeof(int) * (size_t)km);
  int *slot = core_malloc(sizeof(int) * (size_t)km), *aslot = core_malloc(sizeof(int) * (size_t)km);
  int *al = core_malloc(sizeof(int) * (size_t)km), *wi = core_malloc(sizeof(int) * (size_t)km);
  int *rg = core_malloc(sizeof(int) * (size_t)km), *bc = core_malloc(sizeof(int) * (size_t)km);
  for (int k = 0; k < km; k++) fe[k] = bf[k] = slot[k] = aslot[k] = al[k] = wi[k] = rg[k] = bc[k] = -1;
  for (int i = 0; i < st->len; i++) {
    const sched_instr *in = &st->ins[i];
    if (in->chunk < 0 || in->mb < 0 || in->chunk >= pr->v || in->mb >= pr->m) continue;
    int k = in->chunk * pr->m + in->mb, kp = sched_local_input(pr, r, in), kg = sched_local_grad(pr, r, in);
    if (slot[k] < 0) slot[k] = in->slot, aslot[k] = in->aslot;
    int bwd = in->op == SCHED_RECV_GRAD || in->op == SCHED_BACKWARD || in->op == SCHED_BACKWARD_INPUT ||
              in->op == SCHED_BACKWARD_WEIGHT || in->op == SCHED_SEND_GRAD;
    if (in->op == SCHED_BACKWARD_WEIGHT) wi[k] = i;
    else al[k] = i;
    if (in->op == SCHED_RECV_GRAD) rg[k] = i;
    if ((in->op == SCHED_BACKWARD || in->op == SCHED_BACKWARD_INPUT) && bc[k] < 0) bc[k] = i;
    if (bwd && bf[k] < 0) bf[k] = i;
    else if (!bwd && bf[k] < 0) fe[k] = i;
    if (kp >= 0 && bf[kp] < 0) fe[kp] = i;
    if (kg >= 0 && bf[kg] < 0) bf[kg] = rg[kg] = i; /* its gradient lands here, as from a RECV_GRAD */
  }
  for (int k = 0; k < km; k++) {
    if (fe[k] < 0 || bf[k] < 0 || fe[k] >= bf[k]) continue;
    int s = pr->stage_of[r * pr->v + k / pr->m];
    /* backward work that opens with the gradient's receive needs the pair back only when the
     * gradient has arrived: the receive is posted after the reload, and no later for it */
    double need = st->ins[bf[k]].op == SCHED_RECV_GRAD ? te[r][bf[k]] : ts[r][bf[k]];
    cs[n++] = (cand){.k = k, .s = s, .fe = fe[k], .bf = bf[k], .slot = slot[k], .aslot = aslot[k], .part = 1,
                     .t_off = te[r][fe[k]], .t_need = need, .c = sched_offload_cost(c, s)};
  }
  /* a gradient received long before its backward runs (a rank busy with its other chunk, as
   * interleaved's last rank in the cool-down): the pair, back for the receive, may go again until
   * its backward */
  for (int k = 0; k < km; k++) {
    if (rg[k] < 0 || bc[k] < 0 || rg[k] + 1 >= bc[k] || rg[k] != bf[k]) continue;
    int s = pr->stage_of[r * pr->v + k / pr->m];
    cs[n++] = (cand){.k = k, .s = s, .fe = rg[k], .bf = bc[k], .slot = slot[k], .aslot = aslot[k], .part = 1,
                     .t_off = te[r][rg[k]], .t_need = ts[r][bc[k]], .c = sched_offload_cost(c, s)};
  }
  for (int k = 0; k < km; k++) {
    if (wi[k] < 0 || al[k] < 0 || al[k] >= wi[k]) continue;
    int s = pr->stage_of[r * pr->v + k / pr->m];
    double ws = c->stage_w_stash ? c->stage_w_stash[s] : sched_w_stash(c);
    cs[n++] = (cand){.k = k, .s = s, .fe = al[k], .bf = wi[k], .slot = slot[k], .aslot = -1, .part = ws,
                     .t_off = te[r][al[k]], .t_need = ts[r][wi[k]], .c = sched_offload_cost(c, s) * ws};
  }
  for (int i = 0; i < n; i++) { /* after its forward work; where that ends in a run of transfers after a
                                  * receive of it, after the run (its backward not in the run too) */
    int j = cs[i].fe, e = j, after_recv = first_recv(st, j) < j || is_recv(&st->ins[j]);
    while (e + 1 < st->len && sched_is_p2p((sched_op)st->ins[e].op) && sched_is_p2p((sched_op)st->ins[e + 1].op)) e++;
    cs[i].of = after_recv && e < cs[i].bf ? e : j;
  }
  free(fe), free(bf), free(slot), free(aslot), free(al), free(wi), free(rg), free(bc);
  return n;
}

/* Orders of the chosen candidates for insert(): reloads by position, then planned start (ties:
 * candidate order); offloads as by_issue. */
static const cand *order_base;
static int by_reload(const void *a, const void *b) {
  const cand *x = &order_base[*(const int *)a], *y = &order_base[*(const int *)b];
  if (x->rl_pos != y->rl_pos) return x->rl_pos < y->rl_pos ? -1 : 1;
  if (x->rl_start != y->rl_start) return x->rl_start < y->rl_start ? -1 : 1;
  return *(const int *)a - *(const int *)b;
}
static int by_of(const void *a, const void *b) {
  return issue_order(&order_base[*(const int *)a], &order_base[*(const int *)b]);
}

/* Rank r's stream with the chosen candidates' OFFLOADs and RELOADs in it: before instruction j
 * the reloads planned there, earliest planned start first; after it the offloads placed there
 * (candidates(): at their forward work's end, or the end of its run of transfers), as by_issue. Both lists sorted once and merged in one pass
 * (looking through every candidate at every instruction was quadratic in the micro-batches).
 * q: how many are chosen (at least one). *at and *free_at: the new stream's planned times for
 * sched_assign_slots_at (a RELOAD's, its issue; an OFFLOAD's copy's end). */
static void insert(sched_program *pr, int r, cand *cs, int n, int q, const double *ts, double **at, double **free_at) {
  sched_stream *st = &pr->streams[r];
  int *rl = core_malloc(sizeof(int) * (size_t)q), *of = core_malloc(sizeof(int) * (size_t)q);
  for (int i = 0, k = 0; i < n; i++)
    if (cs[i].chosen) rl[k] = of[k] = i, k++;
  order_base = cs;
  qsort(rl, (size_t)q, sizeof *rl, by_reload);
  qsort(of, (size_t)q, sizeof *of, by_of);
  sched_stream out = {.len = 0, .cap = st->len + 2 * q};
  out.ins = core_malloc(sizeof(sched_instr) * (size_t)out.cap);
  double *ta = core_malloc(sizeof(double) * (size_t)out.cap), *tf = core_malloc(sizeof(double) * (size_t)out.cap);
  int a = 0, b = 0;
  for (int j = 0; j <= st->len; j++) {
    for (; a < q && cs[rl[a]].rl_pos == j; a++) {
      ta[out.len] = cs[rl[a]].rl_hold, tf[out.len] = 0;
      out.ins[out.len++] = (sched_instr){.op = SCHED_RELOAD, .mb = cs[rl[a]].k % pr->m, .chunk = cs[rl[a]].k / pr->m,
                                         .peer = -1, .slot = cs[rl[a]].slot, .aslot = cs[rl[a]].aslot};
    }
    if (j == st->len) break;
    ta[out.len] = ts[j], tf[out.len] = 0;
    out.ins[out.len++] = st->ins[j];
    for (; b < q && cs[of[b]].of == j; b++) {
      ta[out.len] = ts[j], tf[out.len] = cs[of[b]].off_end;
      out.ins[out.len++] = (sched_instr){.op = SCHED_OFFLOAD, .mb = cs[of[b]].k % pr->m, .chunk = cs[of[b]].k / pr->m,
                                         .peer = -1, .slot = cs[of[b]].slot, .aslot = cs[of[b]].aslot};
    }
  }
  *at = ta, *free_at = tf;
  CORE_ASSERT(a == q && b == q);
  free(rl), free(of);
  free(st->ins);
  *st = out;
}

/* Rank r's activation memory allocated with ns slots and na aside parts, in stages'
 * activations: each chunk's slot holds what a pending W keeps (it lives to the pair's last
 * instruction), its aside part the rest (given back after the I). */
static double allocated(const sched_program *pr, int r, const sched_costs *c, int ns, int na) {
  double m = 0;
  for (int k = 0; k < pr->v; k++) {
    int s = pr->stage_of[r * pr->v + k];
    double ws = c->stage_w_stash ? c->stage_w_stash[s] : sched_w_stash(c);
    m += (ns * ws + na * (1 - ws)) / pr->v;
  }
  return m;
}

int sched_place_offload(sched_program *pr, const sched_costs *c, sched_offload_mode mode, double limit, int fewest) {
  if (mode == SCHED_OFFLOAD_NONE) return CORE_OK;
  if (pr->forward_only) return CORE_OK; /* no backward: nothing to bring back */
  for (int s = 0; s < pr->p * pr->v; s++)
    if (!(sched_offload_cost(c, s) >= 0))
      return core_error_set(CORE_EINPUT, "offload: the costs give no copy time for an activation slot: give the time "
                            "of one slot's copy (--cost-offload) or its bytes (--act-bytes) and a bandwidth "
                            "(--offload-gbps)");
  if (mode == SCHED_OFFLOAD_AUTO && !(limit > 0))
    return core_error_set(CORE_EINPUT, "offload auto needs a memory limit per rank in stages' activations (got %g)", limit);
  double **ts = core_malloc(sizeof(double *) * (size_t)pr->p), **te = core_malloc(sizeof(double *) * (size_t)pr->p);
  for (int r = 0; r < pr->p; r++) {
    ts[r] = core_malloc(sizeof(double) * (size_t)(pr->streams[r].len + 1));
    te[r] = core_malloc(sizeof(double) * (size_t)(pr->streams[r].len + 1));
  }
  int rc = sched_sim_times(pr, c, ts, te);
  int km = pr->v * pr->m;
  cand *cs = core_malloc(sizeof(cand) * (size_t)(3 * km + 1)); /* three windows per pair at most */
  cand **tmp = core_malloc(sizeof(cand *) * (size_t)(3 * km + 1));
  int *first = core_malloc(sizeof(int) * (size_t)km), *last = core_malloc(sizeof(int) * (size_t)km);
  int *alast = core_malloc(sizeof(int) * (size_t)km), *picked = core_malloc(sizeof(int) * (size_t)(3 * km + 1));
  core_progress_phase("placing offloads:", pr->p, "ranks");
  for (int r = 0; r < pr->p && !rc; r++) {
    core_progress_at(r);
    int n = candidates(pr, r, c, ts, te, cs);
    if (mode == SCHED_OFFLOAD_FULL) {
      for (int i = 0; i < n; i++) cs[i].chosen = cs[i].t_need - cs[i].t_off >= 2 * cs[i].c;
      settle(cs, n, tmp, ts[r], &pr->streams[r]);
      for (int dropped = 1; dropped;) { /* a pair back on the device as soon as it left frees nothing */
        dropped = 0;
        for (int i = 0; i < n; i++)
          if (cs[i].chosen && !(cs[i].rl_hold > cs[i].off_end + 1e-9 * (1 + fabs(cs[i].off_end))))
            cs[i].chosen = 0, cs[i].bad = 1, dropped = 1;
        if (dropped) settle(cs, n, tmp, ts[r], &pr->streams[r]);
      }
    } else {
      sched_pair_ranges(pr, r, first, last, alast);
      int npicked = 0;
      for (;;) { /* one pair more each time, each time the whole plan again: quadratic in the rank's pairs */
        core_progress_at(r);
        double at, peak = planned_peak(pr, r, c, ts, te, first, last, alast, cs, n, &at);
        if (peak <= limit + 1e-9) break;
        int best = -1; /* on the host at the peak, if offloaded: the longest gap */
        for (int i = 0; i < n; i++) {
          if (cs[i].chosen || cs[i].bad || cs[i].t_off + cs[i].c > at + 1e-9 * (1 + fabs(at)) ||
              cs[i].t_need - cs[i].c <= at)
            continue;
          if (best < 0 || cs[i].t_need - cs[i].t_off > cs[best].t_need - cs[best].t_off) best = i;
        }
        if (best < 0) {
          rc = core_error_set(CORE_EINPUT, "offload auto: rank %d holds %.4g stages' activations at its peak (time %.6g), "
                              "above the limit of %.4g, and none of the pairs it holds then can go to host memory with "
                              "both copies hidden; raise the limit or make the copies faster", r, peak, at, limit);
          break;
        }
        cs[best].chosen = 1;
        cand *w = plan_lanes(cs, n, tmp, ts[r], &pr->streams[r]);
        if (w) cs[best].chosen = 0, cs[best].bad = 1, plan_lanes(cs, n, tmp, ts[r], &pr->streams[r]);
        else picked[npicked++] = best;
      }
      /* the fewest: a pair taken for one peak may not be needed once later ones are away; each,
       * the last taken first, stays on the device where the plan keeps the limit without it */
      for (int t = npicked - 1; fewest && !rc && t >= 0; t--) {
        int i = picked[t];
        double at;
        cs[i].chosen = 0;
        if (!plan_lanes(cs, n, tmp, ts[r], &pr->streams[r]) &&
            planned_peak(pr, r, c, ts, te, first, last, alast, cs, n, &at) <= limit + 1e-9)
          continue;
        cs[i].chosen = 1;
      }
      if (fewest && !rc && npicked) plan_lanes(cs, n, tmp, ts[r], &pr->streams[r]); /* the plan of those kept */
    }
    int q = 0;
    for (int i = 0; i < n; i++) q += cs[i].chosen;
    if (!rc && q) { /* a pair's buffers serve others while it is on the host, once its offload has read them */
      int undo = mode == SCHED_OFFLOAD_FULL, ns = pr->nslots[r], na = pr->naslots[r];
      sched_stream before = pr->streams[r];
      if (undo) { /* the stream without copies, kept in case they save nothing */
        before.cap = before.len ? before.len : 1;
        before.ins = core_malloc(sizeof(sched_instr) * (size_t)before.cap);
        memcpy(before.ins, pr->streams[r].ins, sizeof(sched_instr) * (size_t)before.len);
      }
      double *at, *free_at;
      insert(pr, r, cs, n, q, ts[r], &at, &free_at);
      sched_assign_slots_at(pr, r, at, free_at);
      free(at), free(free_at);
      if (undo && !(allocated(pr, r, c, pr->nslots[r], pr->naslots[r]) < allocated(pr, r, c, ns, na) - 1e-12)) {
        /* copies slower than the forwards that follow: the buffers come free too late for the
         * rank to allocate fewer; the copies would cost and save nothing */
        free(pr->streams[r].ins);
        pr->streams[r] = before, pr->nslots[r] = ns, pr->naslots[r] = na;
      } else if (undo) {
        free(before.ins);
      }
    }
  }
  for (int r = 0; r < pr->p; r++) free(ts[r]), free(te[r]);
  free(ts), free(te), free(cs), free(tmp), free(first), free(last), free(alast), free(picked);
  return rc;
}
