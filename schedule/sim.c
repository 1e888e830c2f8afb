/* schedule/sim.c: replays a full program under a cost model.
 *
 * Each rank runs its stream in order. A compute op occupies its rank for its cost. Transfers run
 * on the rank's transfer lane beside compute (post_run): a run of consecutive ones is posted
 * once the compute before it is issued and the lane's earlier receives are done; a send's data
 * arrives `comm` after its post, a receive is done when its data has arrived, and only the
 * compute op that takes a received input waits for it (so a cross-rank dependency adds the
 * latency without occupying either device, as in the zero-bubble paper). The step's tail waits
 * for the lane. REDUCE_TIED_GRADS meets its peer; REDUCE_GRADS and OPTIMIZER_STEP take their cost.
 * Several steps run back to back: a rank starts its stream again after its OPTIMIZER_STEP, which
 * either waits for every rank to reach theirs and for the norm's all-reduce (barrier) or not
 * (post-validation). The steps run one at a time, each with its own messages and tied meetings,
 * and those that repeat the one before, shifted, are copied rather than run (see run). */
#include <float.h>
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
  /* [S][m][2], the step's: arrival of the activation (0) and the gradient (1) at the receiving
   * stage, < 0 before the send (the two side by side: a stage's transfers in one stream of lines) */
  double *ready;
  double *t, *tied_at; /* per rank: clock; arrival at the step's tied reduction (< 0: not) */
  double *busy, *lo, *hi;         /* per rank: compute time, first compute start, last end */
  /* ZeRO-3: per rank, when its communication lane is free and the time its gathers take; per
   * (rank, chunk), when the chunk's last gather ends; gathered chunks now and at most */
  double *lane, *gtime, *gready, *gbytes, *pgbytes, *gmoved;
  double *xlane, *xpost; /* per rank: when its transfer lane is free; its current run's post time */
  int *ngath, *pgath;
  int *pc;
  int *queue, *queued, qh, qt;
  /* consecutive steps, run one at a time (see run): the step now; the barrier's arrivals (per
   * step: how many ranks, the latest time); each step's end (its last OPTIMIZER_STEP) */
  int steps, k, *arrived, *counted;
  int repeat, steps_run; /* steps that repeat the one before, shifted, are copied rather than run (run) */
  int *has_validate; /* per rank: its stream has a VALIDATE (post-validation waits there) */
  double *vat;       /* per rank: when it got there in this step (its VALIDATE, or its start) */
  sched_step_sync sync;
  double *barrier_at, *step_end;
  /* activation offload: per rank, when each copy stream (device to host, host to device) is
   * free and the time both copied; per (rank, pair), when its OFFLOAD ends and its RELOAD
   * ends (its backward work waits for that); the memory changes, in time, for the peak */
  int offload;
  double *d2h, *h2d, *ctime, *off_end, *rl_ready;
  /* per (rank, chunk, buffer): when the last OFFLOAD out of it ends; its next user (another pair
   * in that slot or aside part, or a RELOAD into it) waits for that, as the runner does.
   * slot_at[r]: rank r's first entry (chunk c's slots at + c (ns + na), its aside parts after) */
  double *slot_free;
  size_t *slot_at, nslot_free;
  struct memev { double t, mem, bytes; int r; } *mev;
  size_t nmev, cmev;
  /* per-instruction start and end of the first step (sched_sim_times), when not NULL */
  double **ts, **te;
  double last_t0, last_t1;
  int *first, *last, *alast; /* [p][v*m] sched_pair_ranges, offloaded programs only */
  double *cost; /* [S][4]: sched_op_cost of F, B, I, W of each virtual stage */
} simstate;

static void add_event(simstate *sm, int r, const sched_instr *in, double t0, double t1) {
  sched_event e = {.rank = r, .op = in->op, .mb = in->mb, .chunk = in->chunk,
                   .stage = sched_stage_at(sm->pr, r, in), .peer = in->peer, .start = t0, .end = t1};
  sched_timeline_add(sm->tl, e);
}

static inline void emit(simstate *sm, int r, const sched_instr *in, double t0, double t1) {
  sm->last_t0 = t0, sm->last_t1 = t1;
  if (sched_op_is_compute((sched_op)in->op)) {
    sm->busy[r] += t1 - t0;
    if (t0 < sm->lo[r]) sm->lo[r] = t0;
    if (t1 > sm->hi[r]) sm->hi[r] = t1;
  }
  if (sm->tl) add_event(sm, r, in, t0, t1);
}

static inline void wake(simstate *sm, int r) {
  if (r < 0 || sm->queued[r]) return;
  sm->queued[r] = 1;
  sm->queue[sm->qt++ % sm->pr->p] = r;
}

/* Where, in a step's arrival times, the message that transfer instruction `in` of stage s sends
 * or receives has its time: [receiving stage][mb][activation 0, gradient 1]. */
static inline size_t msg_at(const sched_instr *in, int s, size_t m) {
  switch (in->op) {
  case SCHED_SEND_ACT: return 2 * ((size_t)(s + 1) * m + (size_t)in->mb);
  case SCHED_RECV_ACT: return 2 * ((size_t)s * m + (size_t)in->mb);
  case SCHED_SEND_GRAD: return 2 * ((size_t)(s - 1) * m + (size_t)in->mb) + 1;
  default: return 2 * ((size_t)s * m + (size_t)in->mb) + 1;
  }
}

/* Arrival slot of the message a transfer instruction sends or receives. */
static inline double *msg_slot(simstate *sm, int r, const sched_instr *in) {
  return sm->ready + msg_at(in, sched_stage_at(sm->pr, r, in), (size_t)sm->m);
}

/* When the input compute op `in` of stage s on rank r takes from another rank arrived (its
 * receive done), -1 when it takes none; base: the step's arrival times. */
static inline double input_at(const sched_program *pr, const double *base, int r, const sched_instr *in, int s) {
  int S = pr->p * pr->v;
  size_t k = 2 * ((size_t)s * (size_t)pr->m + (size_t)in->mb);
  if (in->op == SCHED_FORWARD) return s > 0 && pr->rank_of[s - 1] != r ? base[k] : -1;
  if (in->op == SCHED_BACKWARD || in->op == SCHED_BACKWARD_INPUT) return s < S - 1 && pr->rank_of[s + 1] != r ? base[k + 1] : -1;
  return -1;
}

static double param_bytes(const simstate *sm, int s) {
  return sm->c->stage_param_bytes ? sm->c->stage_param_bytes[s] : 0;
}

static void mem_event(simstate *sm, int r, double t, double mem, double bytes) {
  if (sm->nmev == sm->cmev) sm->mev = core_realloc(sm->mev, sizeof *sm->mev * (sm->cmev = sm->cmev ? 2 * sm->cmev : 1024));
  sm->mev[sm->nmev++] = (struct memev){t, mem, bytes, r};
}

/* A pair's full weight: stages' activations (1/v) and bytes. */
static void pair_full(const simstate *sm, int s, double *mem, double *bytes) {
  *mem = 1.0 / sm->pr->v;
  *bytes = sm->c->stage_act_bytes ? sm->c->stage_act_bytes[s] : sm->c->act_bytes;
}

/* Where the times of the buffers instruction `in` of rank r names are kept (NULL: none). */
static void buffers_at(simstate *sm, int r, const sched_instr *in, double **fs, double **fa) {
  int ns = sm->pr->nslots[r], na = sm->pr->naslots[r];
  size_t o = sm->slot_at[r] + (size_t)in->chunk * (size_t)(ns + na);
  if (in->slot >= 0 && in->slot < ns) *fs = &sm->slot_free[o + (size_t)in->slot];
  if (in->aslot >= 0 && in->aslot < na) *fa = &sm->slot_free[o + (size_t)ns + (size_t)in->aslot];
}

/* The part of a pair an OFFLOAD or RELOAD at rank r's current instruction moves: all of it
 * before the pair's last instruction that is not its W, the part its W keeps after. */
static double moved_part(const simstate *sm, int r, int s, size_t pk) {
  if (sm->pc[r] < sm->alast[pk]) return 1;
  return sm->c->stage_w_stash ? sm->c->stage_w_stash[s] : sched_w_stash(sm->c);
}

/* Post-validation in step k > 0: whether the norm of step k - 1 is known (every rank has made
 * its update), and from when (*t, raised to that). Under the barrier, or in the first step,
 * there is nothing to wait for. */
static int validated(simstate *sm, double *t) {
  int k = sm->k;
  if (sm->sync != SCHED_STEP_POST_VALIDATION || k == 0) return 1; /* (EAGER: nothing to wait for) */
  if (sm->arrived[k - 1] < sm->pr->p) return 0; /* woken when the last rank arrives */
  double at = sm->barrier_at[k - 1] + sm->c->norm;
  if (at > *t) *t = at;
  return 1;
}

/* Transfers run on the rank's transfer lane beside its compute, a run of consecutive ones
 * (sched_is_p2p) posted together once the compute before it is issued and the lane's earlier
 * receives are done: its sends leave then, its receives complete when their data has arrived,
 * and only the compute op that takes a received input waits for it. */
static inline void post_run(simstate *sm, int r, double t) {
  int i = sm->pc[r];
  if (i > 0 && sched_is_p2p((sched_op)sm->pr->streams[r].ins[i - 1].op)) return; /* inside a run */
  sm->xpost[r] = t > sm->xlane[r] ? t : sm->xlane[r];
}

/* When compute op `in` of stage s may start on rank r: after its received input (if any). */
static inline double input_wait(simstate *sm, int r, const sched_instr *in, int s, double t) {
  double at = input_at(sm->pr, sm->ready, r, in, s);
  return at > t ? at : t;
}

static inline int send(simstate *sm, int r, const sched_instr *in, double t) {
  post_run(sm, r, t);
  *msg_slot(sm, r, in) = sm->xpost[r] + sm->c->comm;
  emit(sm, r, in, sm->xpost[r], sm->xpost[r]);
  wake(sm, in->peer);
  return 1;
}

static inline int recv(simstate *sm, int r, const sched_instr *in, double t) {
  post_run(sm, r, t);
  double *at = msg_slot(sm, r, in), ready = *at;
  if (ready < 0) return 0;
  double done = ready > sm->xpost[r] ? ready : sm->xpost[r];
  if (done > sm->xlane[r]) sm->xlane[r] = done;
  *at = done; /* its consumer waits for it */
  emit(sm, r, in, sm->xpost[r], done);
  return 1;
}

/* Runs one instruction if it can run now; returns 0 when the rank must wait. */
static int step(simstate *sm, int r, const sched_instr *in) {
  double t = sm->t[r];
  if (sm->pc[r] == 0 && !sm->has_validate[r]) { /* a program without VALIDATE checks before any work */
    sm->vat[r] = t;
    if (!validated(sm, &t)) return 0;
    sm->t[r] = t;
  }
  if (in->op >= SCHED_REDUCE_TIED_GRADS && in->op <= SCHED_OPTIMIZER_STEP && sm->xlane[r] > t)
    t = sm->xlane[r]; /* the tail: the step's transfers are done first */
  int s = sched_stage_at(sm->pr, r, in);
  sm->last_t0 = sm->last_t1 = t;
  size_t pk = sm->offload && in->chunk >= 0 && in->mb >= 0 && in->chunk < sm->pr->v && in->mb < sm->pr->m
                  ? ((size_t)r * sm->pr->v + in->chunk) * sm->pr->m + in->mb
                  : (size_t)-1; /* the pair an offloaded program's instruction names */
  /* its activations are coming back, or a receive into them is landing: compute, and an OFFLOAD
   * of them (as the runner: an op on a slot first completes the slot's receives and waits for its
   * reload), waits for that; a transfer does not: posting it needs neither (a receive into the
   * slot lands when it lands, a run of transfers posting together waited for a reload) */
  if (pk != (size_t)-1 && in->op != SCHED_RELOAD && !sched_is_p2p((sched_op)in->op) && sm->rl_ready[pk] > t)
    t = sm->rl_ready[pk];
  int kg = sm->offload ? sched_local_grad(sm->pr, r, in) : -1; /* the pair a local backward hands its gradient */
  if (kg >= 0) { /* it must be back first */
    double back = sm->rl_ready[(size_t)r * sm->pr->v * sm->pr->m + (size_t)kg];
    if (back > t) t = back;
  }
  double *fs = NULL, *fa = NULL; /* the buffers it names, when an offload may still read them */
  if (pk != (size_t)-1) buffers_at(sm, r, in, &fs, &fa);
  if (in->op != SCHED_OFFLOAD) { /* a buffer an offload still reads: its next user waits for it */
    if (fs && *fs > t) t = *fs;
    if (fa && *fa > t) t = *fa;
  }
  switch (in->op) {
  case SCHED_OFFLOAD: { /* on the device-to-host stream, from its issue; the pair freed at its end */
    double f = moved_part(sm, r, s, pk), c = sched_offload_cost(sm->c, s) * f, st = t > sm->d2h[r] ? t : sm->d2h[r], mem, bytes;
    sm->d2h[r] = sm->off_end[pk] = st + c, sm->ctime[r] += c;
    if (fs) *fs = st + c;
    if (fa) *fa = st + c;
    pair_full(sm, s, &mem, &bytes);
    mem_event(sm, r, st + c, -mem * f, -bytes * f);
    emit(sm, r, in, st, st + c);
    sm->last_t0 = sm->last_t1 = t;
    return 1;
  }
  case SCHED_RELOAD: { /* host to device, after its offload; the pair held again from its start */
    double f = moved_part(sm, r, s, pk), c = sched_offload_cost(sm->c, s) * f, st = t > sm->h2d[r] ? t : sm->h2d[r], mem, bytes;
    if (sm->off_end[pk] > st) st = sm->off_end[pk];
    sm->h2d[r] = st + c, sm->ctime[r] += c;
    if (st + c > sm->rl_ready[pk]) sm->rl_ready[pk] = st + c;
    pair_full(sm, s, &mem, &bytes);
    mem_event(sm, r, st, mem * f, bytes * f);
    emit(sm, r, in, st, st + c);
    sm->last_t0 = sm->last_t1 = t;
    return 1;
  }
  case SCHED_SEND_ACT:
  case SCHED_SEND_GRAD: return send(sm, r, in, t);
  case SCHED_RECV_ACT:
  case SCHED_RECV_GRAD: {
    if (!recv(sm, r, in, t)) return 0;
    double done = *msg_slot(sm, r, in); /* the pair's next op (an OFFLOAD too) waits for it to land */
    if (pk != (size_t)-1 && done > sm->rl_ready[pk]) sm->rl_ready[pk] = done;
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
    sm->t[r] = t + sm->c->reduce;
    emit(sm, r, in, t, sm->t[r]);
    return 1;
  case SCHED_OPTIMIZER_STEP: {
    int k = sm->k;
    double start = t;
    if (sm->counted[r] != k + 1) { /* its gradient norm goes into the all-reduce now */
      sm->counted[r] = k + 1;
      if (t > sm->barrier_at[k]) sm->barrier_at[k] = t;
      if (++sm->arrived[k] == sm->pr->p)
        for (int q = 0; q < sm->pr->p; q++) wake(sm, q);
    }
    if (sm->sync == SCHED_STEP_BARRIER) { /* every rank's arrival, then the norm's all-reduce */
      if (sm->arrived[k] < sm->pr->p) return 0;
      start = sm->barrier_at[k] + sm->c->norm;
    }
    sm->t[r] = start + sm->c->step;
    if (sm->t[r] > sm->step_end[k]) sm->step_end[k] = sm->t[r];
    emit(sm, r, in, start, sm->t[r]);
    return 1;
  }
  case SCHED_VALIDATE: { /* post-validation: the previous step's norm, all-reduced since its last update */
    double ready = t;
    sm->vat[r] = t;
    if (!validated(sm, &ready)) return 0;
    sm->t[r] = ready;
    emit(sm, r, in, t, ready);
    return 1;
  }
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
    t = input_wait(sm, r, in, s, t);
    sm->t[r] = t + sm->cost[4 * s + in->op - SCHED_FORWARD];
    emit(sm, r, in, t, sm->t[r]);
    return 1;
  }
  }
}

/* After instruction i of rank r ran (from last_t0 to last_t1): the first step's times, and in an
 * offloaded program the memory its pairs take and give back, as rank_memory counts them. */
static void after_step(simstate *sm, int r, int i, const sched_instr *in) {
  const sched_program *pr = sm->pr;
  if (sm->ts && sm->k == 0) sm->ts[r][i] = sm->last_t0, sm->te[r][i] = sm->last_t1;
  if (!sm->offload || in->chunk < 0 || in->mb < 0 || in->chunk >= pr->v || in->mb >= pr->m) return;
  const int *first = sm->first + (size_t)r * pr->v * pr->m, *last = sm->last + (size_t)r * pr->v * pr->m,
            *alast = sm->alast + (size_t)r * pr->v * pr->m;
  int k = in->chunk * pr->m + in->mb, kp = sched_local_input(pr, r, in);
  double mem, bytes;
  if (first[k] == i) {
    pair_full(sm, sched_stage_at(pr, r, in), &mem, &bytes);
    mem_event(sm, r, sm->last_t0, mem, bytes);
  }
  for (int q = 0; q < 2; q++) {
    int x = q ? kp : k;
    if (x < 0 || (q && x == k)) continue;
    int s = pr->stage_of[r * pr->v + x / pr->m];
    double ws = sm->c->stage_w_stash ? sm->c->stage_w_stash[s] : sched_w_stash(sm->c);
    pair_full(sm, s, &mem, &bytes);
    if (last[x] == i) {
      double f = alast[x] == i ? 1 : ws;
      mem_event(sm, r, sm->last_t1, -mem * f, -bytes * f);
    } else if (alast[x] == i) {
      mem_event(sm, r, sm->last_t1, -mem * (1 - ws), -bytes * (1 - ws));
    }
  }
}

/* Rank r's common instructions (compute, sends, receives) of a program without offload, from
 * its instruction i > 0 on, as far as they go: what step() does for them, one after another, with
 * the rank's clock and lane held in registers. Returns the index it stopped at: a receive whose
 * data is not there yet (*blocked set), another instruction, or the stream's end. */
static int burst(simstate *sm, int r, int i, int *blocked, unsigned *tick, double *done) {
  const sched_program *pr = sm->pr;
  const sched_stream *st = &pr->streams[r];
  const sched_instr *ins = st->ins;
  const int *stage = pr->stage_of + (size_t)r * pr->v;
  const double *cost = sm->cost, *gready = pr->gather_limit ? sm->gready + (size_t)r * pr->v : NULL;
  double *base = sm->ready;
  double t = sm->t[r], xpost = sm->xpost[r], xlane = sm->xlane[r], busy = sm->busy[r], lo = sm->lo[r], hi = sm->hi[r];
  const double comm = sm->c->comm;
  const size_t m = (size_t)sm->m;
  int in_run = sched_is_p2p((sched_op)ins[i - 1].op); /* post_run's test */
  unsigned tk = *tick; /* the progress counters too: through the pointers they would be a chain */
  double dn = *done;   /* of loads and stores from one instruction to the next */
  *blocked = 0;
  for (; i < st->len; i++) {
    const sched_instr *in = &ins[i];
    if (i + 8 < st->len) __builtin_prefetch(in + 8); /* the ranks take turns: too many streams for the hardware to follow */
    int op = in->op;
    if (op < SCHED_FORWARD || op > SCHED_RECV_GRAD) break; /* (the ops up to here name a chunk) */
    int s = stage[in->chunk];
    if (op <= SCHED_BACKWARD_WEIGHT) {
      double t0 = t, at = input_at(pr, base, r, in, s);
      if (gready && gready[in->chunk] > t0) t0 = gready[in->chunk]; /* its gather */
      if (at > t0) t0 = at; /* its received input (input_wait) */
      t = t0 + cost[4 * s + op - SCHED_FORWARD];
      busy += t - t0;
      if (t0 < lo) lo = t0;
      if (t > hi) hi = t;
      if (sm->tl) add_event(sm, r, in, t0, t);
      in_run = 0;
    } else if (op == SCHED_SEND_ACT || op == SCHED_SEND_GRAD) {
      if (!in_run) xpost = t > xlane ? t : xlane;
      base[msg_at(in, s, m)] = xpost + comm;
      if (sm->tl) add_event(sm, r, in, xpost, xpost);
      wake(sm, in->peer);
      __builtin_prefetch(&pr->streams[in->peer].ins[sm->pc[in->peer]]); /* where the peer goes on */
      in_run = 1;
    } else if (op == SCHED_RECV_ACT || op == SCHED_RECV_GRAD) {
      if (!in_run) xpost = t > xlane ? t : xlane;
      double *slot = &base[msg_at(in, s, m)], ready = *slot;
      if (ready < 0) {
        *blocked = 1;
        break;
      }
      double fin = ready > xpost ? ready : xpost;
      if (fin > xlane) xlane = fin;
      *slot = fin; /* its consumer waits for it */
      if (sm->tl) add_event(sm, r, in, xpost, fin);
      in_run = 1;
    }
    core_progress_tick(&tk, ++dn);
  }
  *tick = tk, *done = dn;
  sm->t[r] = t, sm->xpost[r] = xpost, sm->xlane[r] = xlane, sm->busy[r] = busy, sm->lo[r] = lo, sm->hi[r] = hi;
  return i;
}

/* Runs step sm->k: every rank from the start of its stream as far as it goes. A rank that ends its
 * stream waits there for the others (the next step starts when this one is done everywhere). */
static void run_step(simstate *sm, unsigned *tick, double *done) {
  const sched_program *pr = sm->pr;
  int plain = !sm->offload && !sm->ts; /* no per-instruction bookkeeping after each step */
  for (int r = 0; r < pr->p; r++) wake(sm, r);
  while (sm->qh != sm->qt) {
    int r = sm->queue[sm->qh++ % pr->p];
    sm->queued[r] = 0;
    const sched_stream *st = &pr->streams[r];
    for (;;) {
      int i = sm->pc[r];
      if (i == st->len) break;
      if (plain && i > 0) {
        int blocked, j = burst(sm, r, i, &blocked, tick, done);
        sm->pc[r] = j;
        if (blocked) break;
        if (j > i) continue;
      }
      const sched_instr *in = &st->ins[i];
      int ok = step(sm, r, in);
      if (ok && !plain) after_step(sm, r, i, in);
      if (!ok) break;
      sm->pc[r] = i + 1;
      core_progress_tick(tick, ++*done);
    }
  }
}

/* What a step starts from, as far as its times go: per rank, its clock and each "free from" time
 * it is later maxed with (transfer lane, gather lane, each chunk's gather, the copy streams, each
 * pair's copies), raised to the clock (below it, one is as good as the clock); last, under
 * post-validation, when the previous step's norm is known. Each time of
 * a step is a max of these and of sums of costs, so an entry the previous one's shifted by a
 * constant makes the step the previous one's shifted by it. Also what is not a time and must be
 * equal: each rank's gathered chunks and bytes (the last 2p). Returns the number of values, at
 * most entry_size's; *norm_at: where the norm's time is (post-validation), else (size_t)-1. */
static size_t entry_size(const simstate *sm) {
  size_t per = 5 + (size_t)sm->pr->v + (sm->offload ? 2 + 2 * (size_t)sm->pr->v * (size_t)sm->pr->m : 0);
  return (size_t)sm->pr->p * per + 1 + sm->nslot_free;
}

static size_t entry(const simstate *sm, double *e, size_t *norm_at) {
  const sched_program *pr = sm->pr;
  size_t n = 0, vm = (size_t)pr->v * (size_t)pr->m;
  for (int r = 0; r < pr->p; r++) {
    double t = sm->t[r];
    e[n++] = t;
    e[n++] = sm->xlane[r] > t ? sm->xlane[r] : t;
    e[n++] = sm->lane[r] > t ? sm->lane[r] : t;
    for (int c = 0; c < pr->v; c++) e[n++] = sm->gready[r * pr->v + c] > t ? sm->gready[r * pr->v + c] : t;
    if (sm->offload) {
      e[n++] = sm->d2h[r] > t ? sm->d2h[r] : t;
      e[n++] = sm->h2d[r] > t ? sm->h2d[r] : t;
      for (size_t i = (size_t)r * vm; i < (size_t)(r + 1) * vm; i++) {
        e[n++] = sm->off_end[i] > t ? sm->off_end[i] : t;
        e[n++] = sm->rl_ready[i] > t ? sm->rl_ready[i] : t;
      }
      size_t end = r + 1 < pr->p ? sm->slot_at[r + 1] : sm->nslot_free;
      for (size_t i = sm->slot_at[r]; i < end; i++) e[n++] = sm->slot_free[i] > t ? sm->slot_free[i] : t;
    }
  }
  *norm_at = (size_t)-1;
  if (sm->sync == SCHED_STEP_POST_VALIDATION) /* the first step waits for no norm (run sees to it) */
    *norm_at = n, e[n++] = sm->k > 0 ? sm->barrier_at[sm->k - 1] + sm->c->norm : 0;
  for (int r = 0; r < pr->p; r++) e[n++] = sm->ngath[r], e[n++] = sm->gbytes[r];
  return n;
}

/* Times closer than this (64 ulps of the larger, big) count as equal when steps are compared. */
static inline double shift_tol(double big) { return 64 * DBL_EPSILON * fabs(big); }

/* Whether entry b is entry a shifted by one delta (within shift_tol of the latest time), the last
 * 2p values (counts) equal; *delta set. */
static int shifted(const simstate *sm, const double *a, const double *b, size_t n, double *delta) {
  size_t nt = n - 2 * (size_t)sm->pr->p;
  double d = b[0] - a[0], big = 0;
  for (size_t i = 0; i < nt; i++) big = fabs(b[i]) > big ? fabs(b[i]) : big;
  double tol = shift_tol(big);
  for (size_t i = 0; i < nt; i++)
    if (!(fabs(b[i] - a[i] - d) <= tol)) return 0;
  for (size_t i = nt; i < n; i++)
    if (a[i] != b[i]) return 0;
  *delta = d;
  return 1;
}

/* Sums over the steps so far, per rank, when a step starts: what repeat() adds again. */
typedef struct {
  double *busy, *gtime, *gmoved, *ctime;
  int ev, mev;
} marks;

static void mark(const simstate *sm, marks *mk) {
  size_t p = (size_t)sm->pr->p;
  memcpy(mk->busy, sm->busy, sizeof(double) * p), memcpy(mk->gtime, sm->gtime, sizeof(double) * p);
  memcpy(mk->gmoved, sm->gmoved, sizeof(double) * p);
  if (sm->ctime) memcpy(mk->ctime, sm->ctime, sizeof(double) * p);
  mk->ev = sm->tl ? sm->tl->n : 0, mk->mev = (int)sm->nmev;
}

/* Steps k+1 .. steps-1 as step k (just run, begun at marks mk) shifted by delta each: their
 * ends, the ranks' sums, clocks and last ends, their timeline and memory events. */
static void repeat(simstate *sm, const marks *mk, double delta) {
  const sched_program *pr = sm->pr;
  int k = sm->k, n = sm->steps - 1 - k;
  for (int j = 1; j <= n; j++) {
    sm->step_end[k + j] = sm->step_end[k] + j * delta, sm->barrier_at[k + j] = sm->barrier_at[k] + j * delta;
    sm->arrived[k + j] = pr->p;
  }
  for (int r = 0; r < pr->p; r++) {
    sm->busy[r] += n * (sm->busy[r] - mk->busy[r]), sm->gtime[r] += n * (sm->gtime[r] - mk->gtime[r]);
    sm->gmoved[r] += n * (sm->gmoved[r] - mk->gmoved[r]);
    if (sm->ctime) sm->ctime[r] += n * (sm->ctime[r] - mk->ctime[r]);
    sm->t[r] += n * delta;
    if (sm->hi[r] > -INFINITY) sm->hi[r] += n * delta; /* step k's last end is the latest */
  }
  if (sm->tl) {
    int e0 = mk->ev, e1 = sm->tl->n;
    sched_timeline_reserve(sm->tl, (size_t)e1 + (size_t)n * (size_t)(e1 - e0));
    for (int j = 1; j <= n; j++)
      for (int e = e0; e < e1; e++) {
        sched_event ev = sm->tl->ev[e];
        ev.start += j * delta, ev.end += j * delta;
        sched_timeline_add(sm->tl, ev);
      }
  }
  for (int j = 1, m1 = (int)sm->nmev; j <= n; j++)
    for (int e = mk->mev; e < m1; e++) {
      struct memev ev = sm->mev[e];
      ev.t += j * delta;
      mem_event(sm, ev.r, ev.t, ev.mem, ev.bytes);
    }
}

/* The steps one after another. Nothing of a step waits for a later one, so running them one at a
 * time gives what running them together would; and once a step starts from the previous one's
 * start shifted (entry), every later step is that step shifted again: they are copied (repeat).
 * At unit costs that is from the second step on, under the barrier and, where the norm is known
 * before any rank gets to wait for it, under post-validation. */
static int run(simstate *sm) {
  const sched_program *pr = sm->pr;
  unsigned tick = 0;
  double done = 0;
  size_t nready = 2 * (size_t)sm->S * (size_t)sm->m, p = (size_t)pr->p;
  double *prev = NULL, *cur = NULL;
  size_t ib; /* where an entry has the norm's time (post-validation) */
  marks mk = {0};
  if (sm->repeat) {
    prev = core_malloc(sizeof(double) * entry_size(sm)), cur = core_malloc(sizeof(double) * entry_size(sm));
    mk.busy = core_malloc(sizeof(double) * 4 * p), mk.gtime = mk.busy + p, mk.gmoved = mk.busy + 2 * p, mk.ctime = mk.busy + 3 * p;
    entry(sm, prev, &ib);
  }
  int rc = CORE_OK;
  sm->steps_run = sm->steps;
  for (sm->k = 0; sm->k < sm->steps && !rc; sm->k++) {
    if (sm->k > 0) { /* the next step's messages and meetings, from nothing */
      for (size_t i = 0; i < nready; i++) sm->ready[i] = -1;
      for (int r = 0; r < pr->p; r++) sm->tied_at[r] = -1, sm->pc[r] = 0;
    }
    if (sm->repeat) mark(sm, &mk);
    run_step(sm, &tick, &done);
    for (int r = 0; r < pr->p && !rc; r++)
      if (sm->pc[r] < pr->streams[r].len)
        rc = core_error_set(CORE_EINPUT, "simulation stuck: rank %d waits at instruction %d of step %d (run "
                                         "the verifier for details)", r, sm->pc[r], sm->k + 1);
    if (rc || !sm->repeat || sm->k + 1 == sm->steps) continue;
    sm->k++; /* the entry of the next step (its norm wait reads the step before) */
    size_t n = entry(sm, cur, &ib);
    sm->k--;
    int post = ib < n;
    double known = post ? cur[ib] : 0;
    if (post && sm->k == 0) {
      /* The first step waited for no norm. The second is the first shifted by d if it starts so
       * and its norm wait holds back no rank: the norm is known by the time each rank gets to
       * it, the first step's time there shifted; then every later one is too. */
      double d = cur[0] - prev[0], tol = shift_tol(known);
      int binds = 0;
      for (int r = 0; r < pr->p; r++) binds |= !(known <= sm->vat[r] + d + tol);
      cur[ib] = binds ? NAN : prev[ib] + d; /* for the comparison only */
    }
    double delta;
    int same = shifted(sm, prev, cur, n, &delta);
    if (post) cur[ib] = known;
    if (same) {
      repeat(sm, &mk, delta);
      sm->steps_run = sm->k + 1;
      break;
    }
    double *sw = prev;
    prev = cur, cur = sw;
  }
  free(prev), free(cur), free(mk.busy);
  return rc;
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
    if (in->op == SCHED_OFFLOAD || in->op == SCHED_RELOAD) { /* away: all of it, or the W's part after its I */
      int k = in->chunk * pr->m + in->mb, sign = in->op == SCHED_OFFLOAD ? -1 : 1;
      for (int u = 0; u < 2; u++) mem[u] += sign * (i < alast[k] ? full[u][in->chunk] : wpart[u][in->chunk]);
      if (mem[0] > rs->peak_memory) rs->peak_memory = mem[0];
      if (mem[1] > rs->peak_bytes) rs->peak_bytes = mem[1];
      continue;
    }
    if (in->op > SCHED_RECV_GRAD) continue;
    int k = in->chunk * pr->m + in->mb, kp = sched_local_input(pr, r, in);
    if (kp < 0 && first[k] != i && last[k] != i && alast[k] != i) continue; /* nothing starts or ends here */
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
  rs->order_peak_bytes = rs->peak_bytes;
}

static int by_time(const void *a, const void *b) {
  const struct memev *x = a, *y = b;
  if (x->r != y->r) return x->r < y->r ? -1 : 1;
  if (x->t != y->t) return x->t < y->t ? -1 : 1;
  return (x->mem > y->mem) - (x->mem < y->mem); /* at one time, what is freed goes first */
}

/* An offloaded program's memory in time: each rank's peak of the events after_step and the
 * copies recorded; and its offloaded and kept pairs. */
static void offload_stats(simstate *sm, sched_sim_result *res) {
  const sched_program *pr = sm->pr;
  qsort(sm->mev, sm->nmev, sizeof *sm->mev, by_time);
  for (int r = 0; r < pr->p; r++) res->ranks[r].peak_memory = res->ranks[r].peak_bytes = 0;
  double mem = 0, bytes = 0;
  for (size_t i = 0; i < sm->nmev; i++) {
    const struct memev *e = &sm->mev[i];
    if (i == 0 || e->r != sm->mev[i - 1].r) mem = bytes = 0;
    mem += e->mem, bytes += e->bytes;
    sched_rank_stats *rs = &res->ranks[e->r];
    if (mem > rs->peak_memory + 1e-12) rs->peak_memory = mem;
    if (bytes > rs->peak_bytes) rs->peak_bytes = bytes;
  }
  for (int r = 0; r < pr->p; r++) {
    sched_rank_stats *rs = &res->ranks[r];
    int with_bwd = 0, km = pr->v * pr->m;
    unsigned char *off = core_calloc((size_t)km, 1); /* pairs with an OFFLOAD (one window or two) */
    for (int i = 0; i < pr->streams[r].len; i++) {
      const sched_instr *in = &pr->streams[r].ins[i];
      if (in->op == SCHED_OFFLOAD && !off[in->chunk * pr->m + in->mb]) off[in->chunk * pr->m + in->mb] = 1, rs->offloaded++;
      with_bwd += in->op == SCHED_BACKWARD || in->op == SCHED_BACKWARD_INPUT;
    }
    free(off);
    rs->kept = with_bwd - rs->offloaded;
    rs->copy_time = sm->ctime[r];
  }
}

static void compute_stats(simstate *sm, sched_sim_result *res, int memory) {
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
    if (rs->idle < 0 && rs->idle > -1e-12 * rs->span) rs->idle = 0; /* rounding of the sums: no idle */
    if (memory) rank_memory(pr, sm->c, r, rs);
    rs->peak_gathered = sm->pgath[r], rs->peak_gather_bytes = sm->pgbytes[r], rs->gather_time = sm->gtime[r];
    rs->gather_bytes = sm->gmoved[r];
    sumbusy += rs->busy;
    if (rs->span > maxspan) maxspan = rs->span;
    if (sm->t[r] > res->makespan) res->makespan = sm->t[r];
  }
  if (sm->offload) offload_stats(sm, res);
  res->steps = sm->steps, res->steps_run = sm->steps_run;
  res->steady_step_time = sm->steps > 1 ? (sm->step_end[sm->steps - 1] - sm->step_end[0]) / (sm->steps - 1) : res->makespan;
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

sched_step_sync sched_default_step_sync(sched_family f) {
  return sched_family_is_zb(f) || sched_family_is_v(f) ? SCHED_STEP_POST_VALIDATION : SCHED_STEP_BARRIER;
}

sched_step_sync sched_program_step_sync(const sched_program *pr) {
  for (int i = 0; pr->p > 0 && i < pr->streams[0].len; i++)
    if (pr->streams[0].ins[i].op == SCHED_VALIDATE) return SCHED_STEP_POST_VALIDATION;
  return SCHED_STEP_BARRIER;
}

int sched_simulate(const sched_program *pr, const sched_costs *c, sched_sim_result *res,
                   sched_timeline *tl) {
  return sched_simulate_steps(pr, c, 1, SCHED_STEP_BARRIER, res, tl);
}

static int simulate(const sched_program *pr, const sched_costs *c, int steps, sched_step_sync sync, int repeat,
                    int memory, sched_sim_result *res, sched_timeline *tl, double **ts, double **te) {
  memset(res, 0, sizeof *res);
  if (steps < 1) return core_error_set(CORE_EINPUT, "steps to simulate must be at least 1 (got %d)", steps);
  if (steps > 1 && pr->forward_only) /* no OPTIMIZER_STEP: nothing for the steps to meet at */
    return core_error_set(CORE_EINPUT, "a forward-only program has no optimizer step for consecutive steps to meet at: "
                          "simulate one step (--steps 1)");
  simstate sm = {.pr = pr, .c = c, .tl = tl, .S = pr->p * pr->v, .m = pr->m, .steps = steps, .sync = sync, .repeat = repeat && steps > 1,
                 .ts = ts, .te = te};
  size_t p = (size_t)pr->p;
  sm.has_validate = core_calloc(p, sizeof(int)), sm.vat = core_calloc(p, sizeof(double));
  for (int r = 0; r < pr->p; r++) /* one look at every instruction: VALIDATEs per rank, OFFLOADs anywhere */
    for (int i = 0; i < pr->streams[r].len; i++) {
      int op = pr->streams[r].ins[i].op;
      sm.has_validate[r] |= op == SCHED_VALIDATE, sm.offload |= op == SCHED_OFFLOAD;
    }
  if (sm.offload) {
    size_t pairs = (size_t)pr->p * pr->v * pr->m;
    for (int s = 0; s < sm.S; s++)
      if (!(sched_offload_cost(c, s) >= 0)) {
        free(sm.has_validate), free(sm.vat);
        return core_error_set(CORE_EINPUT, "the program offloads activations, but the costs give no copy time: set "
                              "the time of one slot's copy (--cost-offload), or its bytes (--act-bytes) and a "
                              "bandwidth (--offload-gbps)");
      }
    sm.d2h = core_calloc((size_t)pr->p, sizeof(double)), sm.h2d = core_calloc((size_t)pr->p, sizeof(double));
    sm.ctime = core_calloc((size_t)pr->p, sizeof(double));
    sm.off_end = core_calloc(pairs, sizeof(double)), sm.rl_ready = core_calloc(pairs, sizeof(double));
    sm.first = core_malloc(sizeof(int) * pairs), sm.last = core_malloc(sizeof(int) * pairs);
    sm.alast = core_malloc(sizeof(int) * pairs);
    sm.slot_at = core_malloc(sizeof(size_t) * p);
    for (int r = 0; r < pr->p; r++)
      sm.slot_at[r] = sm.nslot_free, sm.nslot_free += (size_t)pr->v * (size_t)(pr->nslots[r] + pr->naslots[r]);
    sm.slot_free = core_calloc(sm.nslot_free ? sm.nslot_free : 1, sizeof(double));
    for (int r = 0; r < pr->p; r++) {
      size_t o = (size_t)r * pr->v * pr->m;
      sched_pair_ranges(pr, r, sm.first + o, sm.last + o, sm.alast + o);
    }
  }
  size_t n = (size_t)sm.S * (size_t)sm.m;
  sm.counted = core_calloc(p, sizeof(int));
  sm.arrived = core_calloc((size_t)steps, sizeof(int));
  sm.barrier_at = core_malloc(sizeof(double) * (size_t)steps), sm.step_end = core_malloc(sizeof(double) * (size_t)steps);
  for (int k = 0; k < steps; k++) sm.barrier_at[k] = sm.step_end[k] = -INFINITY;
  sm.ready = core_malloc(sizeof(double) * 2 * n);
  for (size_t i = 0; i < 2 * n; i++) sm.ready[i] = -1;
  sm.t = core_calloc(p, sizeof(double));
  sm.busy = core_calloc(p, sizeof(double));
  sm.lo = core_malloc(sizeof(double) * p);
  sm.hi = core_malloc(sizeof(double) * p);
  sm.tied_at = core_malloc(sizeof(double) * p);
  for (size_t r = 0; r < p; r++) sm.tied_at[r] = -1;
  for (size_t r = 0; r < p; r++) sm.lo[r] = INFINITY, sm.hi[r] = -INFINITY;
  sm.pc = core_calloc(p, sizeof(int));
  sm.queue = core_malloc(sizeof(int) * p);
  sm.queued = core_calloc(p, sizeof(int));
  sm.lane = core_calloc(p, sizeof(double));
  sm.xlane = core_calloc(p, sizeof(double)), sm.xpost = core_calloc(p, sizeof(double));
  sm.gtime = core_calloc(p, sizeof(double));
  sm.gbytes = core_calloc(p, sizeof(double));
  sm.pgbytes = core_calloc(p, sizeof(double));
  sm.gmoved = core_calloc(p, sizeof(double));
  sm.gready = core_calloc(p * (size_t)pr->v, sizeof(double));
  sm.ngath = core_calloc(p, sizeof(int));
  sm.pgath = core_calloc(p, sizeof(int));
  sm.cost = sched_cost_table(c, sm.S);
  if (tl) sched_timeline_reserve(tl, (size_t)tl->n + (size_t)steps * sched_program_count(pr)); /* an event per instruction */
  core_progress_start("simulating %s p=%d v=%d m=%d", sched_family_name(pr->family), pr->p, pr->v, pr->m);
  core_progress_phase("", (double)sched_program_count(pr), "instructions run");
  int rc = run(&sm);
  core_progress_stop();
  if (!rc) {
    compute_stats(&sm, res, memory);
    if ((rc = check_finite(res))) sched_sim_result_free(res);
    else if (tl) tl->makespan = res->makespan, tl->bubble_rate = res->bubble_rate;
  }
  free(sm.ready), free(sm.t), free(sm.tied_at), free(sm.pc), free(sm.has_validate), free(sm.vat);
  free(sm.busy), free(sm.lo), free(sm.hi), free(sm.queue), free(sm.queued);
  free(sm.xlane), free(sm.xpost);
  free(sm.lane), free(sm.gtime), free(sm.gbytes), free(sm.pgbytes), free(sm.gmoved), free(sm.gready), free(sm.ngath), free(sm.pgath);
  free(sm.counted), free(sm.arrived), free(sm.barrier_at), free(sm.step_end);
  free(sm.d2h), free(sm.h2d), free(sm.ctime), free(sm.off_end), free(sm.rl_ready), free(sm.mev);
  free(sm.slot_free), free(sm.slot_at);
  free(sm.first), free(sm.last), free(sm.alast), free(sm.cost);
  return rc;
}

int sched_simulate_steps(const sched_program *pr, const sched_costs *c, int steps, sched_step_sync sync,
                         sched_sim_result *res, sched_timeline *tl) {
  return simulate(pr, c, steps, sync, 1, 1, res, tl, NULL, NULL);
}

int sched_simulate_steps_all(const sched_program *pr, const sched_costs *c, int steps, sched_step_sync sync,
                             sched_sim_result *res, sched_timeline *tl) {
  return simulate(pr, c, steps, sync, 0, 1, res, tl, NULL, NULL);
}

int sched_simulate_time(const sched_program *pr, const sched_costs *c, sched_sim_result *res) {
  return simulate(pr, c, 1, SCHED_STEP_BARRIER, 1, 0, res, NULL, NULL, NULL);
}

int sched_sim_times(const sched_program *pr, const sched_costs *c, double **ts, double **te) {
  sched_sim_result res;
  int rc = simulate(pr, c, 1, SCHED_STEP_BARRIER, 1, 0, &res, NULL, ts, te);
  if (!rc) sched_sim_result_free(&res);
  return rc;
}

void sched_sim_result_free(sched_sim_result *res) {
  free(res->ranks);
  memset(res, 0, sizeof *res);
}
