/* Simulator semantics: latencies, per-stage costs, split backward, timeline events. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "schedule/internal.h"
#include "schedule/schedule.h"
#include "tests/common/lane_program.h"

Test(sim, comm_latency_adds_to_each_cross_rank_hop) {
  /* p stages, one micro-batch: the critical path is p forwards, p backwards, 2(p-1) hops */
  for (int p = 1; p <= 6; p++) {
    sched_shape sh = {.family = SCHED_1F1B, .p = p, .v = 1, .m = 1};
    sched_costs c = sched_costs_unit();
    c.comm = 0.25;
    sched_program pr;
    cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_OK, "%s", core_error_msg());
    sched_sim_result res;
    cr_assert_eq(sched_simulate(&pr, &c, &res, NULL), CORE_OK);
    cr_assert(fabs(res.makespan - (3.0 * p + 0.5 * (p - 1))) < 1e-9, "p=%d makespan %g", p, res.makespan);
    sched_sim_result_free(&res);
    sched_program_free(&pr);
  }
}

Test(sim, slowest_stage_sets_the_pace) {
  double f[4] = {1, 1, 3, 1}, b[4] = {1, 1, 3, 1}, w[4] = {0, 0, 0, 0};
  sched_costs c = sched_costs_unit();
  c.stage_f = f, c.stage_b = b, c.stage_w = w;
  sched_shape sh = {.family = SCHED_1F1B, .p = 4, .v = 1, .m = 16};
  sched_program pr;
  cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_OK, "%s", core_error_msg());
  sched_sim_result res;
  cr_assert_eq(sched_simulate(&pr, &c, &res, NULL), CORE_OK);
  cr_assert(res.makespan >= 16 * 6.0); /* the slow stage alone is busy 16 * (3 + 3) */
  cr_assert(fabs(res.ranks[2].busy - 96) < 1e-9);
  cr_assert(res.ranks[0].idle > res.ranks[2].idle);
  sched_sim_result_free(&res);
  sched_program_free(&pr);
}

Test(sim, tail_costs_and_events) {
  sched_shape sh = {.family = SCHED_GPIPE, .p = 2, .v = 1, .m = 2, .tied = 1};
  sched_costs c = sched_costs_unit();
  c.tied = 0.5, c.reduce = 2, c.step = 1;
  sched_program pr;
  cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_OK, "%s", core_error_msg());
  sched_timeline tl;
  sched_timeline_init(&tl, "gpipe", "unit", 2, 1, 2);
  sched_sim_result res;
  cr_assert_eq(sched_simulate(&pr, &c, &res, &tl), CORE_OK);
  /* compute ends at (m + p - 1) * 3 = 9 on rank 0; then tied 0.5, reduce 2, step 1 */
  cr_assert(fabs(res.makespan - 12.5) < 1e-9, "makespan %g", res.makespan);
  cr_assert_eq(tl.makespan, res.makespan);
  int compute = 0;
  for (int i = 0; i < tl.n; i++) compute += sched_op_is_compute((sched_op)tl.ev[i].op);
  cr_assert_eq(compute, 2 * 2 * 2);
  sched_timeline_stats(&tl);
  cr_assert(fabs(tl.bubble_rate - res.bubble_rate) < 1e-12);
  /* the tied reduction is a meeting: rank 1 gets there at 7 and waits for rank 0 (at 9), so
   * both leave it at 9.5; every event names its virtual stage (here the rank's) */
  int tied = 0;
  for (int i = 0; i < tl.n; i++) {
    const sched_event *e = &tl.ev[i];
    cr_assert_eq(e->stage, e->chunk < 0 ? -1 : pr.stage_of[e->rank * pr.v + e->chunk], "event %d", i);
    if (e->op != SCHED_REDUCE_TIED_GRADS) continue;
    tied++;
    cr_assert(fabs(e->end - 9.5) < 1e-9, "rank %d leaves the tied reduction at %g", e->rank, e->end);
  }
  cr_assert_eq(tied, 2);
  /* idle over the whole step, tail included: 1 - 12 busy / (2 ranks x 12.5) */
  cr_assert(fabs(res.idle_fraction - 0.52) < 1e-12, "idle fraction %g", res.idle_fraction);
  /* the statistics do not depend on where the clock starts (measured runs start far from 0) */
  double makespan = tl.makespan, bubble = tl.bubble_rate;
  for (int i = 0; i < tl.n; i++) tl.ev[i].start += 1000, tl.ev[i].end += 1000;
  sched_timeline_stats(&tl);
  cr_assert(fabs(tl.makespan - makespan) < 1e-9 && fabs(tl.bubble_rate - bubble) < 1e-12,
            "shifted by 1000: makespan %g bubble %g, was %g %g", tl.makespan, tl.bubble_rate, makespan, bubble);
  /* nor on its scale: the same step on a clock of 1e300 units, starting at 1e301 */
  for (int i = 0; i < tl.n; i++)
    tl.ev[i].start = 1e301 + (tl.ev[i].start - 1000) * 1e300, tl.ev[i].end = 1e301 + (tl.ev[i].end - 1000) * 1e300;
  sched_timeline_stats(&tl);
  cr_assert(fabs(tl.makespan / 1e300 - makespan) < 1e-9 && fabs(tl.bubble_rate - bubble) < 1e-9,
            "on a clock of 1e300 units: makespan %g bubble %g, was %g %g", tl.makespan, tl.bubble_rate, makespan, bubble);
  sched_timeline_free(&tl);
  sched_sim_result_free(&res);
  sched_program_free(&pr);
}

Test(sim, idle_fraction_and_memory_bytes) {
  sched_shape sh = {.family = SCHED_1F1B, .p = 4, .v = 1, .m = 8};
  sched_costs c = sched_costs_unit();
  c.act_bytes = 1 << 20;
  sched_program pr;
  cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_OK);
  sched_sim_result res;
  cr_assert_eq(sched_simulate(&pr, &c, &res, NULL), CORE_OK);
  /* zero-bubble paper, p=4 m=8, F=B=W=1: 1F1B span 33 */
  cr_assert(fabs(res.makespan - 33) < 1e-9);
  cr_assert(fabs(res.idle_fraction - (1 - 4 * 24.0 / (4 * 33))) < 1e-12);
  cr_assert_eq(res.ranks[0].peak_bytes, 4.0 * (1 << 20));
  sched_sim_result_free(&res);
  sched_program_free(&pr);
}

/* The time of one compute op as the cost model documents it: a full backward is b + w plus the
 * data-parallel traffic of its weight gradient, W is w plus that traffic. */
static double op_cost(const sched_costs *c, sched_op op, int s) {
  double f = c->stage_f ? c->stage_f[s] : c->f, b = c->stage_b ? c->stage_b[s] : c->b;
  double w = c->stage_w ? c->stage_w[s] : c->w, dp = c->stage_dp_w ? c->stage_dp_w[s] : c->dp_w;
  switch (op) {
  case SCHED_FORWARD: return f;
  case SCHED_BACKWARD: return b + w + dp;
  case SCHED_BACKWARD_INPUT: return b;
  default: return w + dp;
  }
}

/* The compute ops of each rank in program order, with their ASAP times: each starts as soon as
 * its rank is free and its inputs exist (F after the previous stage's F, B or I after its own F
 * and the next stage's B or I, W after its I; an input from another rank `comm` later), and
 * takes its cost. Computed here from the compute order alone, whatever lowering does. */
#define MAXR 16
#define MAXOPS 200
#define MAXSM 1024 /* stages x micro-batches */
typedef struct {
  int p, v, m, S, n[MAXR];
  sched_instr op[MAXR][MAXOPS];
  double t0[MAXR][MAXOPS], t1[MAXR][MAXOPS];
  int at[MAXSM][2][2]; /* [stage * m + mb][0 F, 1 B or I] -> rank, index */
} asap;

static void asap_times(const sched_program *pr, const sched_costs *c, asap *a) {
  memset(a, 0, sizeof *a);
  a->p = pr->p, a->v = pr->v, a->m = pr->m, a->S = pr->p * pr->v;
  cr_assert(a->p <= MAXR && a->S * a->m <= MAXSM);
  for (int r = 0; r < pr->p; r++)
    for (int i = 0; i < pr->streams[r].len; i++)
      if (sched_op_is_compute((sched_op)pr->streams[r].ins[i].op)) {
        const sched_instr *in = &pr->streams[r].ins[i];
        int k = pr->stage_of[r * pr->v + in->chunk] * a->m + in->mb, ib = in->op != SCHED_FORWARD;
        if (in->op != SCHED_BACKWARD_WEIGHT) a->at[k][ib][0] = r, a->at[k][ib][1] = a->n[r];
        cr_assert(a->n[r] < MAXOPS);
        a->op[r][a->n[r]++] = *in;
      }
  double fe[MAXSM], be[MAXSM], free_at[MAXR] = {0};
  int pc[MAXR] = {0};
  for (int k = 0; k < a->S * a->m; k++) fe[k] = be[k] = -1;
  for (int moved = 1; moved;) {
    moved = 0;
    for (int r = 0; r < a->p; r++)
      for (; pc[r] < a->n[r]; pc[r]++) {
        const sched_instr *in = &a->op[r][pc[r]];
        int s = pr->stage_of[r * a->v + in->chunk], j = in->mb;
        double ready = 0;
        if (in->op == SCHED_FORWARD && s > 0) {
          if (fe[(s - 1) * a->m + j] < 0) break; /* waits for another rank */
          ready = fe[(s - 1) * a->m + j] + (pr->rank_of[s - 1] != r ? c->comm : 0);
        } else if (in->op == SCHED_BACKWARD_WEIGHT) {
          if ((ready = be[s * a->m + j]) < 0) break;
        } else if (in->op != SCHED_FORWARD) {
          if ((ready = fe[s * a->m + j]) < 0) break;
          if (s < a->S - 1 && be[(s + 1) * a->m + j] < 0) break;
          if (s < a->S - 1)
            ready = fmax(ready, be[(s + 1) * a->m + j] + (pr->rank_of[s + 1] != r ? c->comm : 0));
        }
        double t = fmax(free_at[r], ready);
        a->t0[r][pc[r]] = t;
        a->t1[r][pc[r]] = free_at[r] = t + op_cost(c, (sched_op)in->op, s);
        if (in->op == SCHED_FORWARD) fe[s * a->m + j] = free_at[r];
        else if (in->op != SCHED_BACKWARD_WEIGHT) be[s * a->m + j] = free_at[r];
        moved = 1;
      }
  }
  for (int r = 0; r < a->p; r++) cr_assert_eq(pc[r], a->n[r], "the compute order does not run");
}

/* A cross-rank input: sent by rank a when op ip ends, needed by op ic of rank b at `due`. */
typedef struct {
  int a, ip, b, ic;
  double due;
} xdep;

static int cross_deps(const sched_program *pr, const asap *a, xdep *d) {
  int n = 0;
  for (int r = 0; r < a->p; r++)
    for (int k = 0; k < a->n[r]; k++) {
      const sched_instr *in = &a->op[r][k];
      int s = pr->stage_of[r * a->v + in->chunk], from = -1, ib = 0;
      if (in->op == SCHED_FORWARD && s > 0) from = s - 1;
      if ((in->op == SCHED_BACKWARD || in->op == SCHED_BACKWARD_INPUT) && s < a->S - 1)
        from = s + 1, ib = 1;
      if (from < 0 || pr->rank_of[from] == r) continue;
      const int *src = a->at[from * a->m + in->mb][ib];
      d[n++] = (xdep){src[0], src[1], r, k, a->t0[r][k]};
    }
  return n;
}

#define EPS 1e-9

/* When rank x.a can send x at the earliest if it receives y first: not before y arrives, nor
 * before the ops of x.a that start before then have ended (the receive waits for the data, so
 * an op after it would start late). sent[]: lower bounds on when each transfer is sent. */
static double send_after_recv(const asap *a, const xdep *x, const double *sent_x, double arr_y) {
  int r = x->a, g = 0;
  while (g < a->n[r] && a->t0[r][g] < arr_y - EPS) g++;
  double t = fmax(arr_y, *sent_x);
  return g > x->ip + 1 ? fmax(t, a->t1[r][g - 1]) : t;
}

/* Orders every on-time program must have, given sent[]: before[i * n + j] = transfer i before j
 * (under blocking send/recv the transfers run in one order, the same on both ranks of each). */
static void must_orders(const asap *a, const xdep *d, int n, const double *sent, double comm,
                        char *before) {
  memset(before, 0, (size_t)n * (size_t)n);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) {
      const xdep *x = &d[i], *y = &d[j];
      if (i == j) continue;
      if (x->a == y->b) { /* the rank sending x receives y */
        if (y->ic <= x->ip) before[j * n + i] = 1; /* y's consumer runs before x's producer */
        else if (send_after_recv(a, x, &sent[i], sent[j] + comm) + comm > x->due + EPS)
          before[i * n + j] = 1; /* receiving y first would make x late */
      }
      if (x->a == y->a && x->ip < y->ip && fmax(sent[i], a->t1[x->a][y->ip]) + comm > x->due + EPS)
        before[i * n + j] = 1; /* sending x after y's producer would make it late */
      if (x->b == y->b && x->ic < y->ic && sent[j] + comm > a->t0[x->b][x->ic] + EPS)
        before[i * n + j] = 1; /* y cannot arrive before x's consumer starts */
    }
  for (int k = 0; k < n; k++) /* what they imply */
    for (int i = 0; i < n; i++)
      if (before[i * n + k])
        for (int j = 0; j < n; j++) before[i * n + j] |= before[k * n + j];
}

/* Whether no program with blocking, unbuffered send/recv can start every op at its ASAP time: a
 * proof from orders any such program must have (must_orders, given when each transfer can be
 * sent at the earliest) that contradict each other, or make some transfer late. The orders
 * raise the earliest sends (receiving first, or sending another first, means sending later),
 * which can force more orders: repeated until nothing changes. */
static int no_program_is_on_time(const asap *a, const xdep *d, int n, double comm) {
  double *sent = malloc(sizeof(double) * (size_t)(n + 1));
  char *before = malloc((size_t)n * (size_t)n + 1);
  for (int i = 0; i < n; i++) sent[i] = a->t1[d[i].a][d[i].ip];
  int proof = 0;
  for (int changed = 1; changed && !proof;) {
    changed = 0;
    for (int i = 0; i < n; i++) proof |= sent[i] + comm > d[i].due + EPS;
    must_orders(a, d, n, sent, comm, before);
    for (int i = 0; i < n; i++) proof |= before[i * n + i];
    for (int i = 0; i < n && !proof; i++)
      for (int j = 0; j < n; j++) {
        if (!before[j * n + i]) continue;
        double t = sent[i];
        if (d[i].a == d[j].b) t = fmax(t, send_after_recv(a, &d[i], &sent[i], sent[j] + comm));
        if (d[i].a == d[j].a && d[j].ip > d[i].ip) t = fmax(t, a->t1[d[i].a][d[j].ip]);
        if (t > sent[i] + EPS) sent[i] = t, changed = 1;
      }
  }
  free(sent), free(before);
  return proof;
}

/* How late the simulated program starts its compute ops (the most, and which op in `what`); each
 * op lasts its cost and none starts before its ASAP time. */
static double lateness(const sched_timeline *tl, const asap *a, const sched_costs *c,
                       const char *shape, char *what, size_t n) {
  int next[MAXR] = {0};
  double late = 0;
  for (int i = 0; i < tl->n; i++) { /* a rank's events come in its stream order */
    const sched_event *e = &tl->ev[i];
    if (!sched_op_is_compute((sched_op)e->op)) continue;
    int r = e->rank;
    double want = a->t0[r][next[r]++], cost = op_cost(c, (sched_op)e->op, e->stage);
    char op = sched_op_letter((sched_op)e->op);
    cr_assert(e->start > want - EPS, "%s: rank %d %c%d starts at %g, before its inputs allow (%g)",
              shape, r, op, e->mb, e->start, want);
    cr_assert(fabs(e->end - e->start - cost) < EPS, "%s: %c%d of stage %d lasts %g, costs %g", shape,
              op, e->mb, e->stage, e->end - e->start, cost);
    if (e->start - want <= late + EPS) continue;
    late = e->start - want;
    snprintf(what, n, "rank %d %c%d of stage %d starts at %g, its inputs allow %g", r, op, e->mb,
             e->stage, e->start, want);
  }
  return late;
}

static int lane_on_time; /* shapes the lane keeps on time where blocking receives must be late */

/* One shape: verified; on time, or late where the test proves no program can be on time. */
static void on_time_unless_impossible(const sched_shape *sh, const sched_costs *c,
                                      const char *how) {
  static asap a;
  static xdep d[2 * MAXSM];
  sched_program pr;
  cr_assert_eq(sched_compile(sh, c, &pr), CORE_OK, "%s", core_error_msg());
  cr_assert_eq(sched_verify(&pr), CORE_OK, "%s", core_error_msg());
  sched_timeline tl;
  sched_timeline_init(&tl, sched_family_name(sh->family), "unit", sh->p, sh->v, sh->m);
  sched_sim_result res;
  cr_assert_eq(sched_simulate(&pr, c, &res, &tl), CORE_OK);
  asap_times(&pr, c, &a);
  char shape[96], what[160] = "";
  snprintf(shape, sizeof shape, "%s p=%d m=%d comm=%g%s", sched_family_name(sh->family), sh->p,
           sh->m, c->comm, how);
  double late = lateness(&tl, &a, c, shape, what, sizeof what);
  if (late > EPS && pr.mem_cap > 0 && !no_program_is_on_time(&a, d, cross_deps(&pr, &a, d), c->comm)) {
    /* a program with a memory promise may be late only where lowering for time alone breaks it */
    sched_program compute, free_pr;
    cr_assert_eq(sched_compile_compute(sh, c, &compute), CORE_OK);
    compute.mem_cap = 0;
    cr_assert_eq(sched_lower(&compute, c, &free_pr), CORE_OK, "%s", core_error_msg());
    sched_sim_result fres;
    cr_assert_eq(sched_simulate(&free_pr, c, &fres, NULL), CORE_OK);
    int over = 0;
    for (int r = 0; r < sh->p; r++) {
      over |= fres.ranks[r].peak_memory > pr.mem_cap + EPS || fres.ranks[r].peak_memory > res.ranks[r].peak_memory + EPS;
      cr_assert(res.ranks[r].peak_memory <= pr.mem_cap + EPS, "%s: rank %d holds %g, cap %g", shape, r,
                res.ranks[r].peak_memory, pr.mem_cap);
    }
    cr_assert(over, "%s: %s, and lowering for time alone keeps the memory cap %g", shape, what, pr.mem_cap);
    sched_sim_result_free(&fres);
    sched_program_free(&free_pr), sched_program_free(&compute);
    sched_timeline_free(&tl);
    sched_sim_result_free(&res);
    sched_program_free(&pr);
    return;
  }
  cr_assert(late <= EPS || c->comm > 0, "%s: %s", shape, what);
  int proof = no_program_is_on_time(&a, d, cross_deps(&pr, &a, d), c->comm);
  cr_assert(late <= EPS || proof, "%s: %s, and no proof that every program must be late", shape,
            what);
  /* the proof is about blocking receives; the simulator's transfer lane (a receive holds back
   * only its consumer, a run of transfers is posted at once) may be on time where they cannot */
  lane_on_time += late <= EPS && proof;
  sched_timeline_free(&tl);
  sched_sim_result_free(&res);
  sched_program_free(&pr);
}

/* The transfers lowering adds hold no compute op back: each starts at its ASAP time (asap_times)
 * and lasts its cost, in every family, with uneven per-stage costs and a data-parallel share in
 * W, and with latency 0, 0.25, 0.5 and 1.5 -- unless no program with blocking receives can, which
 * the test proves (no_program_is_on_time) for every shape where the lowered program is late.
 * The simulator's transfer lane (receives hold back only their consumers, a run of transfers is
 * posted at once) keeps some of those on time after all; the test counts them. Every program
 * passes the verifier's blocking, unbuffered replay. */
Test(sim, lowering_is_on_time_unless_no_program_can) {
  double sf[8], sb[8], sw[8], sdp[8];
  for (int s = 0; s < 8; s++) {
    sf[s] = 1 + 0.5 * (s % 3), sb[s] = 1.25 * sf[s];
    sw[s] = 0.75 + 0.25 * (s % 2), sdp[s] = 0.125 * s;
  }
  const double comms[] = {0, 0.25, 0.5, 1.5};
  for (int ci = 0; ci < 4; ci++)
    for (int f = SCHED_GPIPE; f < SCHED_CUSTOM; f++)
      for (int p = 1; p <= 4; p++)
        for (int m = 1; m <= 10; m++)
          for (int uneven = 0; uneven < 2; uneven++) {
            int v = f == SCHED_INTERLEAVED || sched_family_is_v((sched_family)f) ? 2 : 1;
            if (f == SCHED_DUALPIPE_V && m < 2 * p) continue;
            sched_shape sh = {.family = (sched_family)f, .p = p, .v = v, .m = m};
            sched_costs c = sched_costs_unit();
            if (uneven) c.stage_f = sf, c.stage_b = sb, c.stage_w = sw, c.stage_dp_w = sdp;
            else c.w = 0.5, c.dp_w = 0.25;
            c.comm = comms[ci];
            on_time_unless_impossible(&sh, &c, uneven ? " (per-stage costs)" : "");
          }
  cr_assert(lane_on_time > 0, "no shape where the transfer lane beats blocking receives");
}

/* sched_compile lowers zb-h1/h2/auto's second compute order only when it might win: not when
 * the second, run as early as its dependencies allow (sched_asap_end), ends no sooner and
 * either the first has no bubble or the second's first rank ends no sooner than the first's
 * longest span. That rests on no lowering simulating shorter than those bounds, the whole and
 * each rank's last op, and on the first rank's first op starting at 0 in one-chunk families:
 * checked here for every family and the grid above's shapes and latencies. */
Test(sim, no_lowering_beats_the_compute_orders_asap_end) {
  const double comms[] = {0, 0.25, 1.5};
  int checked = 0;
  for (int ci = 0; ci < 3; ci++)
    for (int f = SCHED_GPIPE; f < SCHED_CUSTOM; f++)
      for (int p = 1; p <= 4; p++)
        for (int m = 1; m <= 8; m++) {
          int v = f == SCHED_INTERLEAVED || sched_family_is_v((sched_family)f) ? 2 : 1;
          if (f == SCHED_DUALPIPE_V && m < 2 * p) continue;
          sched_shape sh = {.family = (sched_family)f, .p = p, .v = v, .m = m};
          sched_costs c = sched_costs_unit();
          c.b = 1.5, c.w = 0.5, c.comm = comms[ci];
          sched_program compute, full;
          if (sched_compile_compute(&sh, &c, &compute) != CORE_OK) continue;
          double end, rank_end[4];
          cr_assert_eq(sched_asap_end(&compute, &c, &end, rank_end), CORE_OK, "%s", core_error_msg());
          cr_assert_eq(sched_lower(&compute, &c, &full), CORE_OK, "%s", core_error_msg());
          sched_sim_result res;
          cr_assert_eq(sched_simulate(&full, &c, &res, NULL), CORE_OK, "%s", core_error_msg());
          cr_assert(res.makespan >= end * (1 - 1e-12), "%s p=%d m=%d comm %g: simulated %.17g, before the bound %.17g",
                    sched_family_name((sched_family)f), p, m, c.comm, res.makespan, end);
          for (int r = 0; r < p; r++)
            cr_assert(res.ranks[r].end >= rank_end[r] * (1 - 1e-12), "%s p=%d m=%d comm %g: rank %d ends at %.17g, before %.17g",
                      sched_family_name((sched_family)f), p, m, c.comm, r, res.ranks[r].end, rank_end[r]);
          if (v == 1) /* the first rank holds stage 0 alone: its first forward waits for nothing */
            cr_assert(res.ranks[full.rank_of[0]].start == 0, "%s p=%d m=%d: the first rank starts at %.17g",
                      sched_family_name((sched_family)f), p, m, res.ranks[full.rank_of[0]].start);
          checked++;
          sched_sim_result_free(&res);
          sched_program_free(&full), sched_program_free(&compute);
        }
  cr_assert(checked > 500, "only %d shapes", checked);
}

/* sched_order_bound is a floor no order of one-chunk programs keeping the family's budget goes
 * under, per rank and in all: every such family, both of zb-h1/h2/auto's constructors
 * (sched_compile keeps either), over shapes, latencies, tails, per-stage costs, W stash fractions
 * and zb-auto's limits. It is reached too (zb-h2, and zb-h1 and zb-auto with their warm-up's idle time, at unit
 * costs), where sched_compile then builds no second order. */
static void check_floor(const sched_shape *sh, const sched_costs *c, sched_program *pr, int var, int *reached) {
  sched_sim_result res;
  cr_assert_eq(sched_simulate(pr, c, &res, NULL), CORE_OK, "%s", core_error_msg());
  double fl[8], lb = sched_order_bound(sh, pr, c, fl);
  cr_assert(res.makespan >= lb * (1 - 1e-12), "%s p=%d m=%d var %d: simulated %.17g under the bound %.17g",
            sched_family_name(sh->family), sh->p, sh->m, var, res.makespan, lb);
  for (int r = 0; r < sh->p; r++)
    cr_assert(res.ranks[r].end >= fl[r] * (1 - 1e-12), "%s p=%d m=%d var %d: rank %d ends at %.17g, under its floor %.17g",
              sched_family_name(sh->family), sh->p, sh->m, var, r, res.ranks[r].end, fl[r]);
  *reached += res.makespan <= lb * (1 + 1e-12);
  sched_sim_result_free(&res);
}

Test(sim, no_order_beats_the_order_bound) {
  const sched_family fams[] = {SCHED_GPIPE, SCHED_1F1B, SCHED_ZB_H1, SCHED_ZB_H2, SCHED_ZB_AUTO};
  double sf[8], sb[8], sw[8];
  for (int s = 0; s < 8; s++) sf[s] = 1 + 0.3 * (s % 3), sb[s] = 2 - 0.25 * (s % 2), sw[s] = 0.7 + 0.1 * (s % 4);
  int checked = 0, reached = 0, reached_h1 = 0;
  for (size_t f = 0; f < sizeof fams / sizeof fams[0]; f++)
    for (int p = 1; p <= 8; p *= 2)
      for (int m = 1; m <= 24; m += 7)
        for (int var = 0; var < 16; var++) {
          sched_shape sh = {.family = fams[f], .p = p, .v = 1, .m = m, .mem_limit = var & 4 ? (p + 1) / 2 : 0};
          if ((var & 4) && fams[f] != SCHED_ZB_AUTO) continue;
          sched_costs c = sched_costs_unit();
          c.comm = var & 1 ? 0.5 : 0, c.reduce = 0.2, c.norm = 0.3, c.step = 0.4;
          c.w_stash = var & 8 ? 0.4 : 0; /* a pending W holding less than a slot: more of them kept */
          if (var & 2) c.stage_f = sf, c.stage_b = sb, c.stage_w = sw;
          sched_program pr, compute, rounds;
          if (sched_compile(&sh, &c, &pr) != CORE_OK) continue;
          int was = reached;
          check_floor(&sh, &c, &pr, var, &reached);
          reached_h1 += fams[f] == SCHED_ZB_H1 && p > 1 && reached > was;
          checked++;
          sched_program_free(&pr);
          if (fams[f] < SCHED_ZB_H1 || sched_compile_compute_rounds(&sh, &c, &compute, NULL) != CORE_OK) continue;
          cr_assert_eq(sched_lower(&compute, &c, &rounds), CORE_OK, "%s", core_error_msg());
          check_floor(&sh, &c, &rounds, var, &reached); /* the second order too */
          checked++;
          sched_program_free(&rounds), sched_program_free(&compute);
        }
  cr_log_info("%d programs, %d at the bound (zb-h1 %d)\n", checked, reached, reached_h1);
  cr_assert(checked > 600 && reached > 0 && reached_h1 > 0, "%d programs, %d at the bound (zb-h1 %d)", checked, reached,
            reached_h1);
}

/* The cool-down's bound on the work a rank keeps at its last forward is the most over whole counts
 * of open forwards and pending W's the budget allows (what any order can keep), found here by
 * trying every pair. */
Test(sim, the_work_kept_at_the_last_forward_is_bounded) {
  const double stash[] = {0, 0.25, 0.4, 0.7, 1};
  int checked = 0, interior = 0;
  for (int cap = 1; cap <= 20; cap++)
    for (int m = 1; m <= 40; m += 3)
      for (int k = 0; k < 5; k++)
        for (int omax = 1; omax <= cap && omax <= m; omax += 2) {
          double ws = stash[k], i = 1.3, w = 0.9, most = 0;
          int at = 1;
          for (int o = 1; o <= omax; o++)
            for (int q = 0; o + q <= m && o + ws * q <= cap + 1e-9 * (1 + cap); q++) {
              double work = (o - 1) * (i + w) + q * w;
              if (work > most) most = work, at = o;
            }
          double b = sched_left_at_last_forward(cap, ws, omax, m, i, w);
          cr_assert(fabs(b - most) <= 1e-9,
                    "cap %d ws %g omax %d m %d: bound %.6f, most over whole counts %.6f", cap, ws, omax, m, b, most);
          checked++, interior += at > 1 && at < omax;
        }
  cr_assert(checked > 1000 && interior > 0, "%d cases, %d with the most inside", checked, interior);
}

/* The second order that sched_compile skips by sched_order_bound would not have been kept: with
 * the skip and without it, the same programs, over the families that have one and shapes and
 * costs where it fires (unit costs) and where it does not. */
Test(sim, skipping_the_second_order_changes_nothing) {
  const sched_family fams[] = {SCHED_ZB_H1, SCHED_ZB_H2, SCHED_ZB_AUTO};
  double sf[8], sb[8], sw[8];
  for (int s = 0; s < 8; s++) sf[s] = 1 + 0.3 * (s % 3), sb[s] = 2 - 0.25 * (s % 2), sw[s] = 0.7 + 0.1 * (s % 4);
  int checked = 0;
  for (size_t f = 0; f < sizeof fams / sizeof fams[0]; f++)
    for (int p = 1; p <= 8; p *= 2)
      for (int m = 1; m <= 40; m += 13)
        for (int var = 0; var < 8; var++) {
          sched_shape sh = {.family = fams[f], .p = p, .v = 1, .m = m, .mem_limit = var & 4 ? p + 1 : 0};
          sched_costs c = sched_costs_unit();
          c.comm = var & 1 ? 0.25 : 0, c.step = 0.5;
          if (var & 2) c.stage_f = sf, c.stage_b = sb, c.stage_w = sw;
          sched_program a, b;
          int ra = sched_compile(&sh, &c, &a);
          sched_skip_second_order = 0;
          int rb = sched_compile(&sh, &c, &b);
          sched_skip_second_order = 1;
          cr_assert_eq(ra, rb, "%s p=%d m=%d var %d", sched_family_name(fams[f]), p, m, var);
          if (ra) continue;
          cr_assert(sched_program_equal(&a, &b), "%s p=%d m=%d var %d: the skip changed the program",
                    sched_family_name(fams[f]), p, m, var);
          sched_program_free(&a), sched_program_free(&b);
          checked++;
        }
  cr_assert(checked > 200, "only %d shapes", checked);
}

/* At the zero-bubble paper's costs, zb-h2's last rank ends an I and starts the next F at one
 * instant: the gradient it sends and the activation it receives have one key. Gradient first (the
 * first attempt) holds no more memory on that rank, but its sender then receives the gradient
 * before it sends the activation, which arrives late; so direct placement tries again with
 * activations first on such ties, letting the receiver hold both at once while that stays within
 * its bound. Every one of these is placed directly, on time to the bit, and keeps zb-h2's promise
 * of 2p - 1 activations. */
Test(sim, ties_go_activation_first_when_gradient_first_is_late) {
  const int ps[] = {4, 8, 16}, ms[] = {8, 24, 64};
  sched_costs c = sched_costs_unit();
  c.f = 18.522, c.b = 18.086, c.w = 9.337, c.comm = 0.601;
  for (int k = 0; k < 3; k++) {
    sched_shape sh = {.family = SCHED_ZB_H2, .p = ps[k], .v = 1, .m = ms[k]};
    sched_program compute, low;
    double first[16], last[16];
    sched_lower_info info = {.first = first, .last = last};
    cr_assert_eq(sched_compile_compute(&sh, &c, &compute), CORE_OK, "%s", core_error_msg());
    cr_assert_eq(sched_lower_how(&compute, &c, &low, SCHED_LOWER_DIRECT_FIRST, &info), CORE_OK, "%s", core_error_msg());
    cr_assert(info.placed_directly && info.exact, "p=%d m=%d: placed directly %d, exact %d", ps[k], ms[k],
              info.placed_directly, info.exact);
    cr_assert_eq(sched_verify(&low), CORE_OK, "p=%d m=%d: %s", ps[k], ms[k], core_error_msg());
    sched_sim_result res;
    cr_assert_eq(sched_simulate(&low, &c, &res, NULL), CORE_OK);
    static asap a; /* the compute order's ASAP times, computed here */
    asap_times(&low, &c, &a);
    for (int r = 0; r < ps[k]; r++) {
      double want = a.t1[r][a.n[r] - 1];
      cr_assert(res.ranks[r].end == want && last[r] == want, "p=%d m=%d rank %d ends at %.17g (lowering: %.17g), ASAP %.17g",
                ps[k], ms[k], r, res.ranks[r].end, last[r], want);
      cr_assert(res.ranks[r].peak_memory <= 2 * ps[k] - 1 + 1e-9 && low.nslots[r] <= 2 * ps[k] - 1,
                "p=%d m=%d rank %d holds %g (%d slots)", ps[k], ms[k], r, res.ranks[r].peak_memory, low.nslots[r]);
    }
    sched_sim_result_free(&res);
    sched_program_free(&compute), sched_program_free(&low);
  }
}

/* Where the first program reaches the floor, the skip fires: at the zero-bubble paper's costs (its
 * 1.5B model, step 2), zb-h1 and zb-auto reach it at p=8 m=24 and p=16 m=64, so sched_compile
 * builds no second order there. (It did build one when the kept-work bound took the budget's
 * tolerance on real counts of pending W's: that floor sat a hair under the reachable one.) */
Test(sim, the_floor_skips_the_second_order_at_the_papers_costs) {
  const sched_family fams[] = {SCHED_ZB_H1, SCHED_ZB_AUTO};
  const int ps[] = {8, 16}, ms[] = {24, 64};
  sched_costs c = sched_costs_unit();
  c.f = 18.522, c.b = 18.086, c.w = 9.337, c.comm = 0.601, c.step = 2;
  for (int f = 0; f < 2; f++)
    for (int k = 0; k < 2; k++) {
      sched_shape sh = {.family = fams[f], .p = ps[k], .v = 1, .m = ms[k]};
      sched_program pr;
      long before = sched_second_orders_built;
      cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_OK, "%s", core_error_msg());
      cr_assert_eq(sched_second_orders_built, before, "%s p=%d m=%d built its second order",
                   sched_family_name(fams[f]), ps[k], ms[k]);
      sched_program_free(&pr);
    }
}

/* The reproduction that started this: 1F1B, 2 stages, 2 micro-batches, latency 0.5. Rank 0 sends
 * micro-batch 1's activation (ready at 2) before it waits for micro-batch 0's gradient (there
 * at 5), so rank 1 runs F1 at 4.5, not at 5.5: the step takes 10, the dataflow bound. */
Test(sim, send_goes_before_a_receive_that_waits) {
  sched_shape sh = {.family = SCHED_1F1B, .p = 2, .v = 1, .m = 2};
  sched_costs c = sched_costs_unit();
  c.comm = 0.5;
  sched_program pr;
  cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_OK, "%s", core_error_msg());
  sched_sim_result res;
  cr_assert_eq(sched_simulate(&pr, &c, &res, NULL), CORE_OK);
  cr_assert(fabs(res.makespan - 10) < EPS, "makespan %g", res.makespan);
  sched_sim_result_free(&res);
  sched_program_free(&pr);
}

static void put(sched_program *pr, int r, sched_op op, int mb, int peer) {
  sched_push(pr, r, (sched_instr){.op = op, .mb = mb, .chunk = 0, .peer = peer, .slot = -1, .aslot = -1});
}

/* Transfers run on a lane beside compute: rank 0 posts both gradient receives before its two
 * backwards, and B0 waits only for its own gradient (there at 5), not for micro-batch 1's (at 6).
 * F = B = 1, latency 0.5. (A receive that held the rank until its data came would end at 8.) */
Test(sim, a_receive_holds_back_only_its_consumer) {
  sched_program pr;
  cr_assert_eq(lane_program(&pr), CORE_OK); /* tests/common/lane_program.h */
  cr_assert_eq(sched_verify(&pr), CORE_OK, "%s", core_error_msg());
  sched_costs c = sched_costs_unit();
  c.w = 0, c.comm = 0.5;
  sched_timeline tl;
  sched_timeline_init(&tl, "custom", "unit", 2, 1, 2);
  sched_sim_result res;
  cr_assert_eq(sched_simulate(&pr, &c, &res, &tl), CORE_OK, "%s", core_error_msg());
  /* rank 1: F0 1.5-2.5, F1 2.5-3.5, B0 3.5-4.5 (sent: there at 5), B1 4.5-5.5 (there at 6) */
  int seen = 0;
  for (int i = 0; i < tl.n; i++) {
    const sched_event *e = &tl.ev[i];
    if (e->rank != 0 || e->op != SCHED_BACKWARD) continue;
    double want = e->mb == 0 ? 5 : 6;
    cr_assert(fabs(e->start - want) < EPS, "rank 0 B%d starts at %g, want %g", e->mb, e->start, want);
    seen++;
  }
  cr_assert_eq(seen, 2);
  cr_assert(fabs(res.makespan - 7) < EPS, "makespan %g", res.makespan);
  sched_timeline_free(&tl);
  sched_sim_result_free(&res);
  sched_program_free(&pr);
}

/* A run of consecutive transfers is posted at once: rank 0's SEND_ACT 1 right after its RECV_GRAD
 * 0 leaves when rank 0 reaches the pair (2), not when gradient 0 arrives (4), so rank 1 runs F1 at
 * 3.5 and the step ends at 7. Posted one after the other it would end at 8. */
Test(sim, a_run_of_transfers_is_posted_together) {
  sched_program pr;
  cr_assert_eq(sched_program_init(&pr, SCHED_CUSTOM, 2, 1, 2, NULL), CORE_OK);
  put(&pr, 0, SCHED_LOAD_MICROBATCH, 0, -1), put(&pr, 0, SCHED_FORWARD, 0, -1), put(&pr, 0, SCHED_SEND_ACT, 0, 1);
  put(&pr, 0, SCHED_LOAD_MICROBATCH, 1, -1), put(&pr, 0, SCHED_FORWARD, 1, -1);
  put(&pr, 0, SCHED_RECV_GRAD, 0, 1), put(&pr, 0, SCHED_SEND_ACT, 1, 1);
  put(&pr, 0, SCHED_BACKWARD, 0, -1), put(&pr, 0, SCHED_RECV_GRAD, 1, 1), put(&pr, 0, SCHED_BACKWARD, 1, -1);
  put(&pr, 1, SCHED_RECV_ACT, 0, 0), put(&pr, 1, SCHED_LOAD_MICROBATCH, 0, -1), put(&pr, 1, SCHED_FORWARD, 0, -1);
  put(&pr, 1, SCHED_BACKWARD, 0, -1), put(&pr, 1, SCHED_SEND_GRAD, 0, 0), put(&pr, 1, SCHED_RECV_ACT, 1, 0);
  put(&pr, 1, SCHED_LOAD_MICROBATCH, 1, -1), put(&pr, 1, SCHED_FORWARD, 1, -1);
  put(&pr, 1, SCHED_BACKWARD, 1, -1), put(&pr, 1, SCHED_SEND_GRAD, 1, 0);
  for (int r = 0; r < 2; r++) sched_assign_slots(&pr, r);
  cr_assert_eq(sched_verify(&pr), CORE_OK, "%s", core_error_msg());
  sched_costs c = sched_costs_unit();
  c.w = 0, c.comm = 0.5;
  sched_sim_result res;
  cr_assert_eq(sched_simulate(&pr, &c, &res, NULL), CORE_OK, "%s", core_error_msg());
  cr_assert(fabs(res.makespan - 7) < EPS, "makespan %g", res.makespan);
  sched_sim_result_free(&res);
  sched_program_free(&pr);
}

/* Each cost is finite, but the step they add up to may not be: an error, never inf or nan in the
 * results (sim --json would print them, which is not JSON). */
Test(sim, costs_whose_sums_overflow_are_an_error) {
  sched_shape sh = {.family = SCHED_1F1B, .p = 2, .v = 1, .m = 2};
  sched_costs big = sched_costs_unit(), bytes = sched_costs_unit();
  big.f = 1e308;
  bytes.act_bytes = 1e308; /* 2 slots on rank 0 */
  const sched_costs *cases[] = {&big, &bytes};
  const char *want[] = {"simulated times overflow", "peak activation bytes overflow"};
  for (int i = 0; i < 2; i++) { /* compiled under unit costs: compiling refuses the big ones */
    sched_program pr;
    sched_costs unit = sched_costs_unit();
    cr_assert_eq(sched_compile(&sh, &unit, &pr), CORE_OK, "%s", core_error_msg());
    sched_sim_result res;
    cr_assert_eq(sched_simulate(&pr, cases[i], &res, NULL), CORE_EINPUT, "case %d: no error (makespan %g)", i,
                 res.makespan);
    cr_assert(strstr(core_error_msg(), want[i]), "case %d: %s", i, core_error_msg());
    sched_program_free(&pr);
  }
}

/* The zero-bubble families place W by list scheduling under the costs: costs whose step
 * overflows left every candidate at an infinite time and the scheduler aborted. An error
 * instead, for every family and for a schedule file's lowering. */
Test(sim, compiling_under_costs_that_overflow_is_an_error) {
  sched_family fam[] = {SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED, SCHED_ZB_H1, SCHED_ZB_H2, SCHED_ZB_V, SCHED_DUALPIPE_V};
  for (size_t k = 0; k < sizeof fam / sizeof fam[0]; k++)
    for (int which = 0; which < 3; which++) {
      int v = fam[k] == SCHED_INTERLEAVED || fam[k] == SCHED_ZB_V || fam[k] == SCHED_DUALPIPE_V ? 2 : 1;
      sched_shape sh = {.family = fam[k], .p = 2, .v = v, .m = 4};
      sched_costs c = sched_costs_unit();
      if (which == 0) c.f = 1e308;
      else if (which == 1) c.w = 1e308;
      else c.comm = 1e308;
      sched_program pr;
      core_error_clear();
      cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_EINPUT, "%s, case %d: compiled", sched_family_name(fam[k]), which);
      cr_assert(strstr(core_error_msg(), "costs too large"), "%s", core_error_msg());
    }
  sched_program compute, full;
  cr_assert_eq(sched_csv_parse("0F0,0I0,0W0\n1F0,1I0,1W0\n", "f.csv", &compute), CORE_OK, "%s", core_error_msg());
  sched_costs c = sched_costs_unit();
  c.b = 1e308;
  cr_assert_eq(sched_lower(&compute, &c, &full), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "costs too large"), "%s", core_error_msg());
  sched_program_free(&compute);
}

/* An op far below the step it runs in (F = 1 beside a hop of 1e300) would be lost to rounding
 * (sim showed rank 1 busy 0): an error naming the op, for a compiled shape and a schedule file. */
Test(sim, costs_too_far_apart_are_an_error) {
  sched_shape sh = {.family = SCHED_1F1B, .p = 4, .v = 1, .m = 8};
  sched_costs c = sched_costs_unit();
  c.comm = 1e300;
  sched_program pr;
  core_error_clear();
  cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_EINPUT, "compiled");
  cr_assert(strstr(core_error_msg(), "costs too far apart") && strstr(core_error_msg(), "FORWARD of virtual stage 0"),
            "%s", core_error_msg());
  c.comm = 1e3; /* 1e-12 of the step's bound is far below F: fine */
  cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_OK, "%s", core_error_msg());
  sched_program_free(&pr);
}

/* A rank whose first op starts late on a huge clock (costs of 1e300): its span runs from that
 * start, not from a sentinel the clock has passed. */
Test(sim, span_starts_at_the_first_op_on_a_huge_clock) {
  sched_shape sh = {.family = SCHED_GPIPE, .p = 2, .v = 1, .m = 1};
  sched_costs c = sched_costs_unit();
  c.f = 2e300, c.b = 0, c.w = 0;
  sched_program pr;
  cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_OK, "%s", core_error_msg());
  sched_sim_result res;
  cr_assert_eq(sched_simulate(&pr, &c, &res, NULL), CORE_OK, "%s", core_error_msg());
  /* rank 1: F from 2e300 to 4e300, then a B of no length */
  cr_assert_eq(res.ranks[1].start, 2e300);
  cr_assert_eq(res.ranks[1].span, 2e300, "span %g", res.ranks[1].span);
  cr_assert_eq(res.ranks[1].idle, 0, "idle %g", res.ranks[1].idle);
  sched_sim_result_free(&res);
  sched_program_free(&pr);
}

/* Steps back to back. zb-h2 (p=4, m=8, unit costs, a step of 0.5): each rank's own span has no
 * bubble, so when every rank steps on its own (post-validation) the next step's warm-up
 * overlaps the last one's tail and a step takes 24 + 0.5; a barrier at the optimizer makes every
 * step one whole makespan, 27.5. At the zero-bubble paper's 1.5B costs (p=8, m=24, step 2, the
 * norm's all-reduce 1.5), for every family: post-validation's steady step is never above the
 * barrier's, and the barrier's is one step's makespan plus the norm. */
Test(sim, steps_back_to_back_under_barrier_and_post_validation) {
  sched_shape sh = {.family = SCHED_ZB_H2, .p = 4, .v = 1, .m = 8, .post_validation = 1};
  sched_costs c = sched_costs_unit();
  c.step = 0.5;
  sched_program pr;
  cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_OK, "%s", core_error_msg());
  sched_sim_result res;
  cr_assert_eq(sched_simulate_steps(&pr, &c, 4, SCHED_STEP_POST_VALIDATION, &res, NULL), CORE_OK);
  cr_assert(res.steps == 4 && res.steady_step_time <= 24.5 + 1e-9, "post-validation: %.17g", res.steady_step_time);
  sched_sim_result_free(&res);
  cr_assert_eq(sched_simulate_steps(&pr, &c, 4, SCHED_STEP_BARRIER, &res, NULL), CORE_OK);
  cr_assert(res.steady_step_time >= 27.5 - 1e-9, "barrier: %.17g", res.steady_step_time);
  sched_sim_result_free(&res);
  sched_program_free(&pr);
  const sched_family fams[] = {SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED, SCHED_ZB_H1, SCHED_ZB_H2, SCHED_ZB_AUTO,
                               SCHED_ZB_V, SCHED_V_ZB, SCHED_V_HALF, SCHED_V_MIN, SCHED_DUALPIPE_V};
  sched_costs pc = {.f = 18.522, .b = 18.086, .w = 9.337, .comm = 0.601, .step = 2, .norm = 1.5};
  for (size_t k = 0; k < sizeof fams / sizeof fams[0]; k++) {
    sched_shape s8 = {.family = fams[k], .p = 8, .v = 1, .m = 24, .post_validation = 1};
    if (fams[k] == SCHED_INTERLEAVED || sched_family_is_v(fams[k])) s8.v = 2;
    if (fams[k] == SCHED_ZB_AUTO) s8.mem_limit = 16;
    cr_assert_eq(sched_compile(&s8, &pc, &pr), CORE_OK, "%s: %s", sched_family_name(fams[k]), core_error_msg());
    sched_sim_result one, bar, post;
    cr_assert_eq(sched_simulate(&pr, &pc, &one, NULL), CORE_OK);
    cr_assert_eq(sched_simulate_steps(&pr, &pc, 4, SCHED_STEP_BARRIER, &bar, NULL), CORE_OK);
    cr_assert_eq(sched_simulate_steps(&pr, &pc, 4, SCHED_STEP_POST_VALIDATION, &post, NULL), CORE_OK);
    cr_assert(post.steady_step_time <= bar.steady_step_time + 1e-6, "%s: post-validation %.17g > barrier %.17g",
              sched_family_name(fams[k]), post.steady_step_time, bar.steady_step_time);
    cr_assert(fabs(bar.steady_step_time - one.makespan) < 1e-6 * one.makespan, "%s: barrier step %.17g, one makespan %.17g",
              sched_family_name(fams[k]), bar.steady_step_time, one.makespan);
    sched_sim_result_free(&one), sched_sim_result_free(&bar), sched_sim_result_free(&post);
    sched_program_free(&pr);
  }
}

/* Events in one order whatever order a simulation adds them in: by rank and what they are, then
 * time (the same instruction's events are a step apart, far more than rounding). */
static int by_what_then_time(const void *a, const void *b) {
  const sched_event *x = a, *y = b;
  int kx[6] = {x->rank, x->op, x->mb, x->chunk, x->stage, x->peer}, ky[6] = {y->rank, y->op, y->mb, y->chunk, y->stage, y->peer};
  for (int i = 0; i < 6; i++)
    if (kx[i] != ky[i]) return kx[i] < ky[i] ? -1 : 1;
  return (x->start > y->start) - (x->start < y->start);
}

static void near(double a, double b, double tol, const char *what, const char *shape) {
  cr_assert(fabs(a - b) <= tol, "%s: %s %.17g copied, %.17g run", shape, what, a, b);
}

/* One program, `steps` steps: the simulator's copies of repeating steps against every step run;
 * returns the steps it ran. */
static int copies_match(const sched_program *pr, const sched_costs *c, int steps, sched_step_sync sync, const char *shape) {
  sched_timeline ta, tb;
  sched_timeline_init(&ta, sched_family_name(pr->family), "unit", pr->p, pr->v, pr->m);
  sched_timeline_init(&tb, sched_family_name(pr->family), "unit", pr->p, pr->v, pr->m);
  sched_sim_result a, b;
  cr_assert_eq(sched_simulate_steps(pr, c, steps, sync, &a, &ta), CORE_OK, "%s: %s", shape, core_error_msg());
  cr_assert_eq(sched_simulate_steps_all(pr, c, steps, sync, &b, &tb), CORE_OK, "%s: %s", shape, core_error_msg());
  cr_assert(b.steps_run == steps && a.steps_run >= 1 && a.steps_run <= steps, "%s: ran %d and %d of %d", shape,
            a.steps_run, b.steps_run, steps);
  double tol = 1e-12 * (1 + b.makespan);
  near(a.makespan, b.makespan, tol, "makespan", shape);
  near(a.steady_step_time, b.steady_step_time, tol, "steady step", shape);
  near(a.bubble_rate, b.bubble_rate, 1e-12, "bubble rate", shape);
  near(a.idle_fraction, b.idle_fraction, 1e-12, "idle fraction", shape);
  for (int r = 0; r < pr->p; r++) {
    const sched_rank_stats *x = &a.ranks[r], *y = &b.ranks[r];
    near(x->busy, y->busy, tol, "busy", shape), near(x->start, y->start, tol, "start", shape);
    near(x->end, y->end, tol, "end", shape), near(x->span, y->span, tol, "span", shape);
    near(x->peak_memory, y->peak_memory, 1e-12, "peak memory", shape);
    near(x->peak_bytes, y->peak_bytes, 1e-12 * (1 + y->peak_bytes), "peak bytes", shape);
    near(x->gather_time, y->gather_time, tol, "gather time", shape), near(x->copy_time, y->copy_time, tol, "copy time", shape);
    cr_assert(x->peak_activations == y->peak_activations && x->peak_gathered == y->peak_gathered &&
              x->offloaded == y->offloaded && x->kept == y->kept, "%s: rank %d's counts", shape, r);
  }
  cr_assert_eq(ta.n, tb.n, "%s: %d events copied, %d run", shape, ta.n, tb.n);
  qsort(ta.ev, (size_t)ta.n, sizeof *ta.ev, by_what_then_time), qsort(tb.ev, (size_t)tb.n, sizeof *tb.ev, by_what_then_time);
  for (int e = 0; e < ta.n; e++) {
    const sched_event *x = &ta.ev[e], *y = &tb.ev[e];
    cr_assert(x->rank == y->rank && x->op == y->op && x->mb == y->mb && x->chunk == y->chunk && x->stage == y->stage &&
              x->peer == y->peer, "%s: event %d differs", shape, e);
    near(x->start, y->start, tol, "event start", shape), near(x->end, y->end, tol, "event end", shape);
  }
  int ran = a.steps_run;
  sched_sim_result_free(&a), sched_sim_result_free(&b);
  sched_timeline_free(&ta), sched_timeline_free(&tb);
  return ran;
}

/* Steps that start where the one before started, shifted, are copied from it rather than run
 * (sim.c's repeat): every figure and every event equals a run of every step, within rounding,
 * for every family, under a barrier and under post-validation, with costs per stage that do not
 * add up exactly, comm latency, ZeRO-3 gathers, offloaded activations and a tied weight. And the
 * copies happen: at unit costs a barrier's steps are copied from the second on. */
Test(sim, repeating_steps_are_copied_as_run) {
  const sched_family fams[] = {SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED, SCHED_ZB_H1, SCHED_ZB_H2, SCHED_ZB_AUTO,
                               SCHED_ZB_V, SCHED_V_ZB, SCHED_V_HALF, SCHED_V_MIN, SCHED_DUALPIPE_V};
  double sf[16], sb[16], sw[16];
  for (int s = 0; s < 16; s++) sf[s] = 1 + 0.3 * (s % 3), sb[s] = 2 - 0.25 * (s % 2), sw[s] = 0.7 + 0.1 * (s % 4);
  int copied = 0, shapes = 0;
  for (size_t f = 0; f < sizeof fams / sizeof fams[0]; f++)
    for (int p = 2; p <= 4; p++)
      for (int variant = 0; variant < 4; variant++) {
        int v = fams[f] == SCHED_INTERLEAVED || sched_family_is_v(fams[f]) ? 2 : 1;
        sched_shape sh = {.family = fams[f], .p = p, .v = v, .m = 2 * p, .tied = variant == 1,
                          .zero3 = variant == 2, .offload = variant == 3 ? SCHED_OFFLOAD_FULL : SCHED_OFFLOAD_NONE,
                          .post_validation = sched_default_step_sync(fams[f]) == SCHED_STEP_POST_VALIDATION};
        sched_costs c = sched_costs_unit();
        c.comm = variant ? 0.5 : 0, c.step = 0.5, c.norm = 0.25, c.tied = 0.3, c.gather = 0.4, c.offload = 0.35;
        if (variant != 1) c.stage_f = sf, c.stage_b = sb, c.stage_w = sw;
        sched_program pr;
        char shape[96];
        snprintf(shape, sizeof shape, "%s p=%d variant %d", sched_family_name(fams[f]), p, variant);
        cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_OK, "%s: %s", shape, core_error_msg());
        for (int sync = 0; sync < 2; sync++) {
          int ran = copies_match(&pr, &c, 6, sync ? SCHED_STEP_POST_VALIDATION : SCHED_STEP_BARRIER, shape);
          copied += ran < 6, shapes++;
          if (variant == 1) cr_assert(ran <= 1 + sync, "%s: sync %d at unit costs ran %d steps", shape, sync, ran);
        }
        sched_program_free(&pr);
      }
  cr_log_info("%d of %d simulations copied repeating steps\n", copied, shapes);
  cr_assert(copied > shapes / 2, "only %d of %d simulations copied repeating steps", copied, shapes);
}

/* Lowering places most programs directly (lower.c, direct) and builds the rest step by step. The
 * direct placement is kept only when it is as good as any program can be, so it never loses to
 * the build: over every family, shapes, latencies and per-stage costs, each program it places
 * passes the verifier, simulates no longer than the build's (one step, and four under the
 * family's step boundary and under a barrier), and holds no more on any rank (peak memory, live
 * slots, slot pools). At latency 0 it places every program of the grid. */
Test(sim, direct_placement_is_no_worse_than_the_build) {
  const int ps[] = {1, 2, 3, 4, 8}, ms[] = {1, 2, 3, 5, 8, 17};
  const double comms[] = {0, 0.5, 1.5};
  int direct = 0, exact = 0, shapes = 0;
  for (int f = SCHED_GPIPE; f < SCHED_CUSTOM; f++)
    for (int pi = 0; pi < 5; pi++)
      for (int mi = 0; mi < 6; mi++)
        for (int ci = 0; ci < 3; ci++)
          for (int uneven = 0; uneven < 2; uneven++) {
            int p = ps[pi], m = ms[mi], v = f == SCHED_INTERLEAVED || sched_family_is_v((sched_family)f) ? 2 : 1;
            sched_shape sh = {.family = (sched_family)f, .p = p, .v = v, .m = m};
            sched_costs c = sched_costs_unit();
            double sf[16], sb[16], sw[16];
            if (uneven) {
              for (int s = 0; s < p * v; s++) sf[s] = 1 + 0.3 * (s % 3), sb[s] = 2 - 0.25 * (s % 2), sw[s] = 0.7 + 0.1 * (s % 4);
              c.stage_f = sf, c.stage_b = sb, c.stage_w = sw;
            }
            c.comm = comms[ci];
            if (uneven) c.reduce = 0.1, c.norm = 0.2, c.step = 0.3; /* a tail (placement ignores it) */
            sched_program compute, built, placed;
            if (sched_compile_compute(&sh, &c, &compute) != CORE_OK) continue; /* a shape the family refuses */
            char shape[96];
            snprintf(shape, sizeof shape, "%s p=%d m=%d comm=%g%s", sched_family_name((sched_family)f), p, m, c.comm,
                     uneven ? " (per-stage costs)" : "");
            double first[8], last[8];
            sched_lower_info info = {.first = first, .last = last};
            cr_assert_eq(sched_lower_how(&compute, &c, &built, SCHED_LOWER_BUILD, &info), CORE_OK, "%s", core_error_msg());
            cr_assert(!info.placed_directly && !info.exact, "%s: placed directly when told to build", shape);
            cr_assert_eq(sched_lower_how(&compute, &c, &placed, SCHED_LOWER_DIRECT_FIRST, &info), CORE_OK, "%s", core_error_msg());
            int d = info.placed_directly;
            shapes++;
            cr_assert(d || c.comm > 0, "%s: not placed directly at latency 0", shape);
            if (d) {
              direct++;
              cr_assert_eq(sched_verify(&placed), CORE_OK, "%s: %s", shape, core_error_msg());
              sched_sim_result a, b;
              sched_timeline tl;
              sched_timeline_init(&tl, shape, "unit", p, v, m);
              cr_assert_eq(sched_simulate(&built, &c, &a, NULL), CORE_OK);
              cr_assert_eq(sched_simulate(&placed, &c, &b, &tl), CORE_OK);
              cr_assert(b.makespan <= a.makespan + 1e-9, "%s: placed %.17g, built %.17g", shape, b.makespan, a.makespan);
              /* on time to the bit (sched_compile's keep_faster then decides without simulating):
               * each rank's first start and last end the ASAP ones, and the step ends at the
               * latest end plus the tail */
              if (info.exact) {
                double span = 0, at_span, at_end;
                for (int r = 0; r < p; r++) {
                  cr_assert(b.ranks[r].start == first[r] && b.ranks[r].end == last[r],
                            "%s rank %d: simulated %.17g .. %.17g, ASAP %.17g .. %.17g", shape, r, b.ranks[r].start,
                            b.ranks[r].end, first[r], last[r]);
                  span = b.ranks[r].span > span ? b.ranks[r].span : span;
                }
                if (!placed.tied && !placed.forward_only) { /* what keep_faster reads instead of simulating */
                  sched_exact_times(&placed, &c, &info, &at_end, &at_span);
                  cr_assert(b.makespan == at_end && span == at_span, "%s: the step ends at %.17g (longest span %.17g), not %.17g (%.17g)",
                            shape, b.makespan, span, at_end, at_span);
                }
                exact++;
              }
              /* on time: every op at its ASAP time (each rank's last one, and where the test's
               * tables hold the shape, every one) */
              double end, rank_end[8];
              cr_assert_eq(sched_asap_end(&compute, &c, &end, rank_end), CORE_OK);
              for (int r = 0; r < p; r++)
                cr_assert(fabs(b.ranks[r].end - rank_end[r]) <= 1e-9 * (1 + end), "%s: rank %d ends at %.17g, ASAP %.17g",
                          shape, r, b.ranks[r].end, rank_end[r]);
              if (p <= 4 && p * v * m <= 80 && 3 * v * m < 96) { /* small: the check is quadratic */
                static asap at;
                char what[160] = "";
                asap_times(&placed, &c, &at);
                cr_assert(lateness(&tl, &at, &c, shape, what, sizeof what) <= EPS, "%s: %s", shape, what);
              }
              sched_timeline_free(&tl);
              for (int r = 0; r < p; r++) {
                cr_assert(b.ranks[r].peak_memory <= a.ranks[r].peak_memory + 1e-9 &&
                              b.ranks[r].peak_activations <= a.ranks[r].peak_activations &&
                              placed.nslots[r] <= built.nslots[r] && placed.naslots[r] <= built.naslots[r],
                          "%s rank %d: placed holds %g (%d live, %d+%d slots), built %g (%d, %d+%d)", shape, r,
                          b.ranks[r].peak_memory, b.ranks[r].peak_activations, placed.nslots[r], placed.naslots[r],
                          a.ranks[r].peak_memory, a.ranks[r].peak_activations, built.nslots[r], built.naslots[r]);
              }
              sched_sim_result_free(&a), sched_sim_result_free(&b);
              const sched_step_sync syncs[2] = {sched_default_step_sync((sched_family)f), SCHED_STEP_BARRIER};
              for (int k = 0; k < 2 && !placed.forward_only; k++) { /* (a forward-only program has no step) */
                cr_assert_eq(sched_simulate_steps(&built, &c, 4, syncs[k], &a, NULL), CORE_OK);
                cr_assert_eq(sched_simulate_steps(&placed, &c, 4, syncs[k], &b, NULL), CORE_OK);
                cr_assert(b.steady_step_time <= a.steady_step_time + 1e-9 && b.makespan <= a.makespan + 1e-9,
                          "%s, 4 steps: placed %.17g (steady %.17g), built %.17g (%.17g)", shape, b.makespan,
                          b.steady_step_time, a.makespan, a.steady_step_time);
                sched_sim_result_free(&a), sched_sim_result_free(&b);
              }
            }
            sched_program_free(&compute), sched_program_free(&built), sched_program_free(&placed);
          }
  cr_log_info("%d of %d shapes placed directly, %d of them on time to the bit\n", direct, shapes, exact);
  cr_assert(direct > shapes / 2, "only %d of %d shapes placed directly", direct, shapes);
  cr_assert(exact > direct / 2, "only %d of %d placed directly on time to the bit", exact, direct);
}
