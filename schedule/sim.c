/* schedule/sim.c: replays a full program under a cost model.
 *
 * Each rank runs its stream in order. A compute op occupies its rank for its cost. A send does
 * not block and its data arrives `comm` later; a receive waits until its data has arrived (so a
 * cross-rank dependency adds the latency without occupying either device, as in the zero-bubble
 * paper). REDUCE_TIED_GRADS meets its peer; REDUCE_GRADS and OPTIMIZER_STEP take their cost. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/progress.h"
#include "schedule/internal.h"

typedef struct {
  const sched_program *pr;
  const sched_costs *c;
  sched_timeline *tl;
  int S, m;
  double *act_ready, *grad_ready; /* [S*m] arrival at the receiving stage, < 0 before the send */
  double *t, *tied_at;            /* per rank: clock; arrival at the tied reduction (< 0: not) */
  double *busy, *lo, *hi;         /* per rank: compute time, first compute start, last end */
  /* ZeRO-3: per rank, when its communication lane is free and the time its gathers take; per
   * (rank, chunk), when the chunk's last gather ends; gathered chunks now and at most */
  double *lane, *gtime, *gready, *gbytes, *pgbytes, *gmoved;
  int *ngath, *pgath;
  int *pc;
  int *queue, *queued, qh, qt;
} simstate;

static void emit(simstate *sm, int r, const sched_instr *in, double t0, double t1) {
  if (sched_op_is_compute((sched_op)in->op)) {
    sm->busy[r] += t1 - t0;
    if (t0 < sm->lo[r]) sm->lo[r] = t0;
    if (t1 > sm->hi[r]) sm->hi[r] = t1;
  }
  if (!sm->tl) return;
  sched_event e = {.rank = r, .op = in->op, .mb = in->mb, .chunk = in->chunk,
                   .stage = sched_stage_at(sm->pr, r, in), .peer = in->peer, .start = t0, .end = t1};
  sched_timeline_add(sm->tl, e);
}

static void wake(simstate *sm, int r) {
  if (r < 0 || sm->queued[r]) return;
  sm->queued[r] = 1;
  sm->queue[sm->qt++ % sm->pr->p] = r;
}

/* Arrival slot of the message a transfer instruction sends or receives. */
static double *msg_slot(simstate *sm, int r, const sched_instr *in) {
  int s = sched_stage_at(sm->pr, r, in);
  switch (in->op) {
  case SCHED_SEND_ACT: return &sm->act_ready[(size_t)(s + 1) * sm->m + in->mb];
  case SCHED_RECV_ACT: return &sm->act_ready[(size_t)s * sm->m + in->mb];
  case SCHED_SEND_GRAD: return &sm->grad_ready[(size_t)(s - 1) * sm->m + in->mb];
  default: return &sm->grad_ready[(size_t)s * sm->m + in->mb];
  }
}

static double param_bytes(const simstate *sm, int s) {
  return sm->c->stage_param_bytes ? sm->c->stage_param_bytes[s] : 0;
}

/* Runs one instruction if it can run now; returns 0 when the rank must wait. */
static int step(simstate *sm, int r, const sched_instr *in) {
  double t = sm->t[r];
  int s = sched_stage_at(sm->pr, r, in);
  switch (in->op) {
  case SCHED_SEND_ACT:
  case SCHED_SEND_GRAD:
    *msg_slot(sm, r, in) = t + sm->c->comm;
    emit(sm, r, in, t, t);
    wake(sm, in->peer);
    return 1;
  case SCHED_RECV_ACT:
  case SCHED_RECV_GRAD: {
    double ready = *msg_slot(sm, r, in);
    if (ready < 0) return 0;
    sm->t[r] = ready > t ? ready : t;
    emit(sm, r, in, t, sm->t[r]);
    return 1;
  }
  case SCHED_REDUCE_TIED_GRADS: {
    if (in->peer < 0) {
      sm->t[r] = t + sm->c->tied;
      emit(sm, r, in, t, sm->t[r]);
      return 1;
    }
    if (sm->tied_at[r] < 0) sm->tied_at[r] = t, wake(sm, in->peer);
    double other = sm->tied_at[in->peer];
    if (other < 0) return 0; /* wait for the peer to arrive */
    sm->t[r] = (t > other ? t : other) + sm->c->tied;
    emit(sm, r, in, t, sm->t[r]);
    return 1;
  }
  case SCHED_REDUCE_GRADS:
  case SCHED_OPTIMIZER_STEP:
    sm->t[r] = t + (in->op == SCHED_REDUCE_GRADS ? sm->c->reduce : sm->c->step);
    emit(sm, r, in, t, sm->t[r]);
    return 1;
  case SCHED_LOAD_MICROBATCH: return 1;
  case SCHED_GATHER_PARAMS: { /* on the lane beside compute, from when it is issued */
    double g = sm->c->stage_gather ? sm->c->stage_gather[s] : sm->c->gather, st = t > sm->lane[r] ? t : sm->lane[r];
    sm->lane[r] = sm->gready[r * sm->pr->v + in->chunk] = st + g, sm->gtime[r] += g;
    if (++sm->ngath[r] > sm->pgath[r]) sm->pgath[r] = sm->ngath[r];
    if ((sm->gbytes[r] += param_bytes(sm, s)) > sm->pgbytes[r]) sm->pgbytes[r] = sm->gbytes[r];
    if (sm->c->stage_gather_bytes) sm->gmoved[r] += sm->c->stage_gather_bytes[s];
    emit(sm, r, in, st, st + g);
    return 1;
  }
  case SCHED_RELEASE_PARAMS:
    sm->ngath[r]--, sm->gbytes[r] -= param_bytes(sm, s);
    emit(sm, r, in, t, t);
    return 1;
  default: {
    double ready = sm->pr->gather_limit ? sm->gready[r * sm->pr->v + in->chunk] : 0; /* its gather */
    if (ready > t) t = ready;
    sm->t[r] = t + sched_op_cost(sm->c, (sched_op)in->op, s);
    emit(sm, r, in, t, sm->t[r]);
    return 1;
  }
  }
}

static int run(simstate *sm) {
  const sched_program *pr = sm->pr;
  unsigned tick = 0;
  double done = 0;
  for (int r = 0; r < pr->p; r++) wake(sm, r);
  while (sm->qh != sm->qt) {
    int r = sm->queue[sm->qh++ % pr->p];
    sm->queued[r] = 0;
    while (sm->pc[r] < pr->streams[r].len) {
      const sched_instr *in = &pr->streams[r].ins[sm->pc[r]];
      if (!step(sm, r, in)) break;
      sm->pc[r]++;
      core_progress_tick(&tick, ++done);
    }
  }
  for (int r = 0; r < pr->p; r++)
    if (sm->pc[r] < pr->streams[r].len)
      return core_error_set(CORE_EINPUT, "simulation stuck: rank %d waits at instruction %d (run "
                                         "the verifier for details)", r, sm->pc[r]);
  return CORE_OK;
}

void sched_stream_memory_of(const sched_program *pr, int r, const double *full, const double *wpart,
                            double *peak_mem, int *peak_slots, double *at_mem, int *at_slots, int *at_last) {
  const sched_stream *st = &pr->streams[r];
  size_t keys = (size_t)pr->v * (size_t)pr->m;
  int slots = 0;
  double mem = 0;
  int *first = core_malloc(sizeof(int) * keys), *last = core_malloc(sizeof(int) * keys);
  int *alast = core_malloc(sizeof(int) * keys);
  sched_pair_ranges(pr, r, first, last, alast);
  *peak_mem = 0, *peak_slots = 0;
  for (int i = 0; i < st->len; i++) {
    const sched_instr *in = &st->ins[i];
    if (in->op > SCHED_RECV_GRAD) continue;
    int k = in->chunk * pr->m + in->mb, kp = sched_local_input(pr, r, in);
    if (first[k] == i) slots++, mem += full[in->chunk];
    if (at_mem) at_mem[i] = mem, at_slots[i] = slots, at_last[i] = last[k];
    if (mem > *peak_mem) *peak_mem = mem;
    if (slots > *peak_slots) *peak_slots = slots;
    for (int q = 0; q < 2; q++) { /* the pair named, and the one whose output a local forward takes */
      int x = q ? kp : k, c = x / pr->m;
      if (x < 0 || (q && x == k)) continue;
      if (last[x] == i) mem -= alast[x] == i ? full[c] : wpart[c], slots--;
      else if (alast[x] == i) mem -= full[c] - wpart[c];
    }
  }
  free(first), free(last), free(alast);
}

void sched_stream_memory(const sched_program *pr, int r, double w_stash, double unit, double *peak_mem,
                         int *peak_slots, double *at_mem, int *at_slots, int *at_last) {
  double *full = core_malloc(sizeof(double) * (size_t)pr->v), *wpart = core_malloc(sizeof(double) * (size_t)pr->v);
  for (int c = 0; c < pr->v; c++) full[c] = unit, wpart[c] = unit * w_stash;
  sched_stream_memory_of(pr, r, full, wpart, peak_mem, peak_slots, at_mem, at_slots, at_last);
  free(full), free(wpart);
}

/* Rank r's peak memory in stages' activations and in bytes, in one pass: a pair counts a whole
 * slot over its aslot range, its W stash from there to its last instruction (the rule of
 * sched_stream_memory_of), weighted 1/v per chunk for the first and by the costs' slot bytes
 * (act_bytes, or stage_act_bytes) for the second; the stash fraction is stage_w_stash's or
 * w_stash. Also the peak count of live pairs. */
static void rank_memory(const sched_program *pr, const sched_costs *c, int r, sched_rank_stats *rs) {
  const sched_stream *st = &pr->streams[r];
  size_t keys = (size_t)pr->v * (size_t)pr->m;
  int *first = core_malloc(sizeof(int) * keys), *last = core_malloc(sizeof(int) * keys);
  int *alast = core_malloc(sizeof(int) * keys);
  double full[2][pr->v], wpart[2][pr->v], mem[2] = {0, 0};
  for (int k = 0; k < pr->v; k++) {
    int s = pr->stage_of[r * pr->v + k];
    double ws = c->stage_w_stash ? c->stage_w_stash[s] : sched_w_stash(c);
    full[0][k] = 1.0 / pr->v, full[1][k] = c->stage_act_bytes ? c->stage_act_bytes[s] : c->act_bytes;
    wpart[0][k] = full[0][k] * ws, wpart[1][k] = full[1][k] * ws;
  }
  sched_pair_ranges(pr, r, first, last, alast);
  int slots = 0;
  rs->peak_memory = rs->peak_bytes = 0, rs->peak_activations = 0;
  for (int i = 0; i < st->len; i++) {
    const sched_instr *in = &st->ins[i];
    if (in->op > SCHED_RECV_GRAD) continue;
    int k = in->chunk * pr->m + in->mb, kp = sched_local_input(pr, r, in);
    if (first[k] == i) slots++, mem[0] += full[0][in->chunk], mem[1] += full[1][in->chunk];
    if (mem[0] > rs->peak_memory) rs->peak_memory = mem[0];
    if (mem[1] > rs->peak_bytes) rs->peak_bytes = mem[1];
    if (slots > rs->peak_activations) rs->peak_activations = slots;
    for (int q = 0; q < 2; q++) { /* the pair named, and the one whose output a local forward takes */
      int x = q ? kp : k, ch = x / pr->m;
      if (x < 0 || (q && x == k)) continue;
      for (int u = 0; u < 2; u++) {
        if (last[x] == i) mem[u] -= alast[x] == i ? full[u][ch] : wpart[u][ch];
        else if (alast[x] == i) mem[u] -= full[u][ch] - wpart[u][ch];
      }
      slots -= last[x] == i;
    }
  }
  free(first), free(last), free(alast);
}

static void compute_stats(simstate *sm, sched_sim_result *res) {
  const sched_program *pr = sm->pr;
  double sumbusy = 0, maxspan = 0;
  res->p = pr->p;
  res->ranks = core_calloc((size_t)pr->p, sizeof(sched_rank_stats));
  for (int r = 0; r < pr->p; r++) {
    sched_rank_stats *rs = &res->ranks[r];
    rs->busy = sm->busy[r];
    rs->start = sm->lo[r] <= sm->hi[r] ? sm->lo[r] : 0;
    rs->end = sm->lo[r] <= sm->hi[r] ? sm->hi[r] : 0;
    rs->span = rs->end - rs->start;
    rs->idle = rs->span - rs->busy;
    rank_memory(pr, sm->c, r, rs);
    rs->peak_gathered = sm->pgath[r], rs->peak_gather_bytes = sm->pgbytes[r], rs->gather_time = sm->gtime[r];
    rs->gather_bytes = sm->gmoved[r];
    sumbusy += rs->busy;
    if (rs->span > maxspan) maxspan = rs->span;
    if (sm->t[r] > res->makespan) res->makespan = sm->t[r];
  }
  res->bubble_rate = maxspan > 0 ? 1.0 - (sumbusy / pr->p) / maxspan : 0;
  res->idle_fraction = res->makespan > 0 ? 1.0 - sumbusy / (pr->p * res->makespan) : 0;
}

/* Costs are finite one by one, but their sums may not be: no inf or nan in the results. */
static int check_finite(const sched_sim_result *res) {
  int finite = isfinite(res->makespan) && isfinite(res->bubble_rate) && isfinite(res->idle_fraction);
  int bytes = 1;
  for (int r = 0; r < res->p; r++) {
    const sched_rank_stats *s = &res->ranks[r];
    finite &= isfinite(s->busy) && isfinite(s->span) && isfinite(s->idle);
    bytes &= isfinite(s->peak_bytes);
  }
  if (!finite)
    return core_error_set(CORE_EINPUT, "simulated times overflow: the costs are too large (makespan %g)",
                          res->makespan);
  if (!bytes)
    return core_error_set(CORE_EINPUT, "peak activation bytes overflow: the activation size is too large");
  return CORE_OK;
}

int sched_simulate(const sched_program *pr, const sched_costs *c, sched_sim_result *res,
                   sched_timeline *tl) {
  memset(res, 0, sizeof *res);
  simstate sm = {.pr = pr, .c = c, .tl = tl, .S = pr->p * pr->v, .m = pr->m};
  size_t n = (size_t)sm.S * (size_t)sm.m, p = (size_t)pr->p;
  sm.act_ready = core_malloc(sizeof(double) * n);
  sm.grad_ready = core_malloc(sizeof(double) * n);
  for (size_t i = 0; i < n; i++) sm.act_ready[i] = sm.grad_ready[i] = -1;
  sm.t = core_calloc(p, sizeof(double));
  sm.busy = core_calloc(p, sizeof(double));
  sm.lo = core_malloc(sizeof(double) * p);
  sm.hi = core_malloc(sizeof(double) * p);
  sm.tied_at = core_malloc(sizeof(double) * p);
  for (size_t r = 0; r < p; r++) sm.tied_at[r] = -1, sm.lo[r] = INFINITY, sm.hi[r] = -INFINITY;
  sm.pc = core_calloc(p, sizeof(int));
  sm.queue = core_malloc(sizeof(int) * p);
  sm.queued = core_calloc(p, sizeof(int));
  sm.lane = core_calloc(p, sizeof(double));
  sm.gtime = core_calloc(p, sizeof(double));
  sm.gbytes = core_calloc(p, sizeof(double));
  sm.pgbytes = core_calloc(p, sizeof(double));
  sm.gmoved = core_calloc(p, sizeof(double));
  sm.gready = core_calloc(p * (size_t)pr->v, sizeof(double));
  sm.ngath = core_calloc(p, sizeof(int));
  sm.pgath = core_calloc(p, sizeof(int));
  if (tl) sched_timeline_reserve(tl, (size_t)tl->n + sched_program_count(pr)); /* one event per instruction */
  core_progress_start("simulating %s p=%d v=%d m=%d", sched_family_name(pr->family), pr->p, pr->v, pr->m);
  core_progress_phase("", (double)sched_program_count(pr), "instructions run");
  int rc = run(&sm);
  core_progress_stop();
  if (!rc) {
    compute_stats(&sm, res);
    if ((rc = check_finite(res))) sched_sim_result_free(res);
    else if (tl) tl->makespan = res->makespan, tl->bubble_rate = res->bubble_rate;
  }
  free(sm.act_ready), free(sm.grad_ready), free(sm.t), free(sm.tied_at), free(sm.pc);
  free(sm.busy), free(sm.lo), free(sm.hi), free(sm.queue), free(sm.queued);
  free(sm.lane), free(sm.gtime), free(sm.gbytes), free(sm.pgbytes), free(sm.gmoved), free(sm.gready), free(sm.ngath), free(sm.pgath);
  return rc;
}

void sched_sim_result_free(sched_sim_result *res) {
  free(res->ranks);
  memset(res, 0, sizeof *res);
}
