/* schedule/lower.c: compute-only program -> full program.
 *
 * 1. A dataflow run of the compute order under the cost model gives every compute op its ASAP
 *    start and end (each rank runs its order; F after the previous stage's F, B or I after its
 *    own F and the next stage's B or I, W after its I; an input from another rank arrives the
 *    latency `comm` after its producer ends), and proves the order can run at all.
 * 2. Every input from another rank becomes a SEND on the producer's rank and a RECV on the
 *    consumer's. Most programs are placed directly (see direct below): each transfer gets one
 *    key from the ASAP times, each rank takes its transfers in key order with the end that memory
 *    fixes where the compute order has it, and the program is kept when a pass over its runs shows
 *    every op on time and no slot held longer than the compute order holds it. On equal keys a
 *    gradient goes before an activation (a rank that ends an I and starts an F at one instant
 *    then frees before it receives); where that leaves a transfer late, a second try puts the
 *    activation first and lets its receiver hold both at once while that stays within its bound
 *    (zb-h2 at the zero-bubble paper's costs needs it). The rest (long
 *    latencies, lanes held by late receives) are built by one sequence of steps, each appending
 *    to the streams:
 *      advance r   append rank r's next compute op (after its load, if it has one); allowed once
 *                  the RECV of its input is in r's stream;
 *      commit x    append x's SEND to the sender's stream and its RECV to the receiver's, both in
 *                  this one step; allowed once x's producer is in the sender's stream (the
 *                  receiver cannot have passed x's consumer: that needs x's RECV).
 *    Deadlock-freedom with blocking, unbuffered send/recv (what sched_verify replays; the
 *    workers' posted receives and grouped runs only relax it): every rank's transfers are in
 *    commit order. Were ranks stuck, each would be at a transfer (nothing else waits: an op's
 *    inputs come earlier in its stream). Take, of the transfers they are stuck at, the one committed first: the other rank
 *    of it is not stuck at an earlier transfer (that one would have been committed first), so
 *    it has done its transfers before this one and is at it too, and the pair completes. The
 *    sends of one rank to another are in the order of the other's receives from it, as NCCL's
 *    matching in order needs. (sched_verify checks all this anyway.)
 * 3. Timing, under sim.c's semantics (transfers on a lane beside compute: a transfer appended
 *    right after another joins its run and is posted with it, otherwise once the compute before
 *    it is issued and the lane's receives are done; a SEND's data arrives comm after its post;
 *    a RECV holds back only its consumer, and the lane until its data is there): the steps keep
 *    every rank's clock and lane as sim.c will (post_time, next_start), and prefer steps that
 *    delay nothing, i.e. make no compute op start after its ASAP time and no data arrive after
 *    its consumer's ASAP start:
 *      commit x    when x's data is there by its consumer's start and by the end of the
 *                  receiver's next compute op (its lane is then free for what that op
 *                  produces), and none of the receiver's unsent outputs would be late for it;
 *      advance r   when r has sent all it produced: sends go right after their producer, and
 *                  only a forced step puts one later.
 *    So a gradient that comes back late is received right after the forward whose activation
 *    must follow it (memory, below), in one run with that send: the send is not held back.
 *    Memory: a RECV of an activation opens its slot on the receiver (a gradient's slot is open
 *    since its forward), and a SEND of a gradient closes one (of an activation too, in a
 *    forward-only program). So an activation's commit also waits until the receiver is at
 *    the consumer and has sent its gradients, unless the two ranks wait for each other (the
 *    sender holds only this activation, the receiver a send to it that cannot go yet): that is
 *    common and settled at once. When no step is free, the step that delays least is taken
 *    (then a commit rather than a send put off, which would use up slack; then the activation
 *    whose slot opens least early), and if it delays, the estimates of what is not built are
 *    redone from what is (lazily, see est_start). If no step is ever forced to delay, every
 *    compute op starts at its ASAP time; the tests find that wherever any program can (4).
 *    At comm = 0 one always can (order the transfers by when their producers end: no RECV
 *    then waits).
 * 4. Sometimes no program with blocking transfers can: take x sent by rank a to b and y sent by
 *    b to a. Blocking semantics runs them in one order on both ranks: x first means b receives x
 *    before it sends y, so y leaves no sooner than x arrives; y first, the other way round (the
 *    lane escapes this when the two go in one run). If x arrives
 *    too late for y's consumer to get y on time that way, and y too late for x's, every
 *    program is late somewhere. E.g. 1F1B p=2 m=3 with the costs of stages 1.0/1.5 (F),
 *    2.0/3.0 (B), comm 1.5: at 11.5 rank 0 sends the activation of micro-batch 2 and rank 1
 *    the gradient of micro-batch 1, each needed at 13. Longer cycles do it too: in interleaved
 *    p=8 v=2 m=24 (unit costs, comm 1.5), between t=61.5 and 65 every rank sends a gradient
 *    needed 1.5 later and receives one that arrives after that send, around the ring that the
 *    step from stage 7 (rank 7) to stage 8 (rank 0) closes; one of the eight ranks must receive
 *    first, so the ASAP 218 is out of reach (this gives 226). tests/schedule/test_sim.c proves
 *    it impossible for every shape of its grid (all families, p <= 4, m <= 10, comm up to 1.5)
 *    where the program here is late, checks every other one is on time, and counts those the
 *    lane keeps on time where blocking transfers could not be.
 * 5. LOAD_MICROBATCH goes right before the first and last virtual stage's forwards; the step's
 *    tail (REDUCE_TIED_GRADS, REDUCE_GRADS, OPTIMIZER_STEP) at the end.
 * 6. Activation buffer slots by liveness: (chunk, micro-batch) holds a slot from its first
 *    instruction to its last; slots are reused greedily in stream order, which allocates
 *    exactly the peak number live at once. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/progress.h"
#include "schedule/internal.h"

typedef struct {
  const sched_program *pr;
  sched_costs costs;
  int S, m;
  double *f_end, *b_end, *w_end; /* [S*m], < 0 while not done; b_end: B or I */
  double **start;                /* [rank][compute index]: the build's estimates of epoch 0 */
  double *cost;                  /* [S][4]: sched_op_cost of F, B, I, W of each virtual stage */
  int *pc;
  double *free_at;
  int *queue, qhead, qtail, *queued;
  double done; /* compute ops timed (progress) */
  unsigned tick;
} flow;

static void flow_push(flow *fl, int r) {
  if (r < 0 || fl->queued[r]) return;
  fl->queued[r] = 1;
  fl->queue[fl->qtail++ % fl->pr->p] = r;
}

/* When the inputs of compute op `in` (stage s, rank r) are ready: its time, or -1 if not yet. */
static double flow_ready(const flow *fl, int r, const sched_instr *in, int s) {
  const sched_program *pr = fl->pr;
  int j = in->mb;
  double t = 0;
  if (in->op == SCHED_FORWARD) {
    if (s > 0) {
      double e = fl->f_end[(s - 1) * fl->m + j];
      if (e < 0) return -1;
      t = e + (pr->rank_of[s - 1] != r ? fl->costs.comm : 0);
    }
  } else if (in->op == SCHED_BACKWARD || in->op == SCHED_BACKWARD_INPUT) {
    if (fl->f_end[s * fl->m + j] < 0) return -1;
    t = fl->f_end[s * fl->m + j];
    if (s < fl->S - 1) {
      double e = fl->b_end[(s + 1) * fl->m + j];
      if (e < 0) return -1;
      e += pr->rank_of[s + 1] != r ? fl->costs.comm : 0;
      if (e > t) t = e;
    }
  } else { /* W */
    t = fl->b_end[s * fl->m + j];
    if (t < 0) return -1;
  }
  return t;
}

/* Runs rank r as far as its dependencies allow; wakes the ranks its results feed. */
static void flow_advance(flow *fl, int r) {
  const sched_program *pr = fl->pr;
  const sched_stream *st = &pr->streams[r];
  while (fl->pc[r] < st->len) {
    const sched_instr *in = &st->ins[fl->pc[r]];
    if (fl->pc[r] + 8 < st->len) { /* the ranks take turns: too many streams for the hardware to follow */
      __builtin_prefetch(in + 8);
      __builtin_prefetch(&fl->start[r][fl->pc[r] + 8], 1);
    }
    int s = sched_stage_at(pr, r, in);
    double ready = flow_ready(fl, r, in, s);
    if (ready < 0) return;
    double t0 = ready > fl->free_at[r] ? ready : fl->free_at[r];
    double t1 = t0 + fl->cost[4 * s + in->op - SCHED_FORWARD];
    fl->start[r][fl->pc[r]] = t0;
    core_progress_tick(&fl->tick, ++fl->done);
    fl->free_at[r] = t1;
    int k = s * fl->m + in->mb;
    if (in->op == SCHED_FORWARD) {
      fl->f_end[k] = t1;
      if (s + 1 < fl->S) flow_push(fl, pr->rank_of[s + 1]);
    } else if (in->op != SCHED_BACKWARD_WEIGHT) {
      fl->b_end[k] = t1;
      if (s > 0) flow_push(fl, pr->rank_of[s - 1]);
    } else {
      fl->w_end[k] = t1;
    }
    fl->pc[r]++;
  }
}

static int flow_deadlock(const flow *fl) {
  const sched_program *pr = fl->pr;
  for (int r = 0; r < pr->p; r++) {
    if (fl->pc[r] >= pr->streams[r].len) continue;
    char act[32], ex[1024];
    sched_action_str(pr, r, &pr->streams[r].ins[fl->pc[r]], act, sizeof act);
    sched_excerpt(pr, r, fl->pc[r], ex, sizeof ex);
    return core_error_set(CORE_EINPUT,
                          "schedule cannot run: rank %d waits forever at action %d (%s), whose "
                          "input is never produced in time\n%s",
                          r, fl->pc[r], act, ex);
  }
  return CORE_OK;
}

static int flow_run(flow *fl) {
  for (int r = 0; r < fl->pr->p; r++) flow_push(fl, r);
  while (fl->qhead != fl->qtail) {
    int r = fl->queue[fl->qhead++ % fl->pr->p];
    fl->queued[r] = 0;
    flow_advance(fl, r);
  }
  return flow_deadlock(fl);
}

static void flow_init(flow *fl, const sched_program *pr, const sched_costs *c) {
  memset(fl, 0, sizeof *fl);
  fl->pr = pr, fl->costs = *c;
  fl->S = pr->p * pr->v, fl->m = pr->m;
  size_t n = (size_t)fl->S * (size_t)fl->m;
  fl->f_end = core_malloc(sizeof(double) * n);
  fl->b_end = core_malloc(sizeof(double) * n);
  fl->w_end = core_malloc(sizeof(double) * n);
  for (size_t i = 0; i < n; i++) fl->f_end[i] = fl->b_end[i] = fl->w_end[i] = -1;
  fl->start = core_calloc((size_t)pr->p, sizeof(double *));
  for (int r = 0; r < pr->p; r++) fl->start[r] = core_malloc(sizeof(double) * (size_t)(pr->streams[r].len + 1));
  fl->cost = sched_cost_table(c, fl->S);
  fl->pc = core_calloc((size_t)pr->p, sizeof(int));
  fl->free_at = core_calloc((size_t)pr->p, sizeof(double));
  fl->queue = core_malloc(sizeof(int) * (size_t)pr->p);
  fl->queued = core_calloc((size_t)pr->p, sizeof(int));
}

/* The times, once the build has taken its copy (build_init): freed before the placement's own
 * tables, which then reuse their memory. */
static void flow_free_times(flow *fl) {
  for (int r = 0; fl->start && r < fl->pr->p; r++) free(fl->start[r]);
  free(fl->start), free(fl->f_end), free(fl->b_end), free(fl->w_end);
  fl->start = NULL, fl->f_end = fl->b_end = fl->w_end = NULL;
}

static void flow_free(flow *fl) {
  flow_free_times(fl);
  free(fl->cost), free(fl->pc), free(fl->free_at), free(fl->queue), free(fl->queued);
}

/* One cross-rank dependency: SEND on rank a after its producer, RECV on rank b before its
 * consumer. */
typedef struct {
  int a, ip;        /* sender rank, the producer's index in its compute order */
  int b, ic;        /* receiver rank, the consumer's index */
  int dst, mb;      /* consuming virtual stage (the producer's is dst - 1 or dst + 1), micro-batch */
  char kind;        /* 0 gradient, 1 activation */
  char done;        /* committed: in both streams */
  char fit;         /* commit_fits' answer while the receiver's mver is xb's fit_ver */
} xfer;

/* A transfer's two ends in time, the ASAP times (beside xfer, read where the placement walks the
 * transfers: no look at the other rank's ops). */
typedef struct {
  double pend;   /* its producer's end */
  double cstart; /* its consumer's start */
} xtime;

/* What the build alone keeps of a transfer (beside xfer, so that the direct placement's table is
 * smaller). */
typedef struct {
  double arr;  /* committed: when the data arrives */
  int fit_ver; /* see xfer.fit */
} xbuild;

/* A rank's stream while it is built: it ends in the gap before compute op g. */
typedef struct {
  int g;
  double clock;          /* when the simulator gets to that end (its compute) */
  double lane, post;     /* its transfer lane: free from (receives done); the open run's post time */
  int in_run;            /* its stream ends in a transfer (a run the next one joins) */
  int *pend, npend, cap; /* produced transfers this rank sends or receives (some done) */
  int held, held_slot;   /* produced, not sent: all, and those whose SEND frees a slot */
  int *early, nearly, capearly; /* consumers (compute indices >= g) of activations received early */
  int hx_ok;             /* hx_mem, hx_slots (held_extra) are up to date: cleared when g moves */
  double hx_mem;         /* or one of its sends is committed */
  int hx_slots;
  int mver;              /* bumped whenever what mem_fits reads of this rank changes */
  int adv_ver, adv_fit;  /* advance_fits' answer while mver is adv_ver */
} lrank;

/* A compute op of the order, as the build sees it: what one look at an op reads, in one place. */
typedef struct {
  /* its start, as built, or for one not built yet its ASAP start from what is built; such an
   * estimate holds while build.stamp[rank][op] == epoch (a delayed step makes a new epoch; steps
   * that delay nothing leave every estimate true). The direct placement reads the ASAP start. */
  double start;
  double cost;    /* sched_op_cost */
  int prod, cons; /* the transfer it produces / consumes, or -1 */
  int local[2];   /* the ops of its own rank it takes input from, -1 when none */
} lop;

typedef struct {
  const flow *fl; /* the ASAP times of the compute order */
  sched_program *out;
  xfer *x;
  xtime *xt; /* [transfer] */
  int nx;
  lop **op; /* [rank][compute index] */
  /* the build's own (build_init_build): per transfer, and per rank and compute op the epoch of
   * its start's estimate */
  xbuild *xb;
  int **stamp;
  int epoch;
  int *stack, nstack, capstack;
  lrank *rk;
  int *queue, *queued, qh, qt;
  double tol; /* times closer than this are equal (rounding) */
  /* memory (see mem_fits): [rank][compute index] what the compute order holds at each op, in
   * chunk slots weighted (mem) and counted (slots); [rank][compute index] the index of the last
   * compute op of that op's (chunk, micro-batch) */
  double **amem, ws, meps;
  int **aslot, **lastc;
  int guard;            /* the family promises a memory cap: the bounds below hold */
  size_t built;         /* compute ops appended (progress) */
  unsigned tick;
  double **slack;       /* [rank] a min segment tree (2 len) over compute ops of the room left
                         * under the bounds, in weighted memory or slots, whichever is less */
  double *bmem;         /* [rank] what the full program may hold: the larger of the compute */
  int *bslot;           /* order's peak and the family's cap */
} build;

static void wake(build *bd, int r) {
  if (bd->queued[r]) return;
  bd->queued[r] = 1;
  bd->queue[bd->qt++ % bd->out->p] = r;
}

static void pend_add(lrank *k, int x) {
  if (k->npend == k->cap) {
    k->cap = k->cap ? 2 * k->cap : 16;
    k->pend = core_realloc(k->pend, sizeof(int) * (size_t)k->cap);
  }
  k->pend[k->npend++] = x;
}

static void pend_compact(const build *bd, lrank *k) {
  int n = 0;
  for (int i = 0; i < k->npend; i++)
    if (!bd->x[k->pend[i]].done) k->pend[n++] = k->pend[i];
  k->npend = n;
}

static inline double pos(double v) { return v > 0 ? v : 0; }

static inline int est_known(const build *bd, int r, int i) {
  return i < bd->rk[r].g || bd->stamp[r][i] == bd->epoch;
}

static void est_push(build *bd, int r, int i) {
  if (bd->nstack + 2 > bd->capstack) {
    bd->capstack = bd->capstack ? 2 * bd->capstack : 256;
    bd->stack = core_realloc(bd->stack, sizeof(int) * (size_t)bd->capstack);
  }
  bd->stack[bd->nstack++] = r, bd->stack[bd->nstack++] = i;
}

/* Pushes what the estimate of op i of rank r needs and is not known; returns whether any. */
static int est_push_needs(build *bd, int r, int i) {
  int n = bd->nstack;
  if (i > bd->rk[r].g && !est_known(bd, r, i - 1)) est_push(bd, r, i - 1);
  for (int k = 0; k < 2; k++) {
    int l = bd->op[r][i].local[k];
    if (l >= 0 && !est_known(bd, r, l)) est_push(bd, r, l);
  }
  const xfer *x = bd->op[r][i].cons >= 0 ? &bd->x[bd->op[r][i].cons] : NULL;
  if (x && !x->done && bd->rk[x->a].g <= x->ip && !est_known(bd, x->a, x->ip))
    est_push(bd, x->a, x->ip);
  return bd->nstack > n;
}

static double est_end_known(const build *bd, int r, int i) {
  return bd->op[r][i].start + bd->op[r][i].cost;
}

/* ASAP start of op i of rank r from what it needs (all known): its rank's previous op, its
 * local inputs, and its remote input: arrived, or sent from its sender's clock on, or sent
 * when its producer ends. */
static double est_from_needs(const build *bd, int r, int i) {
  double t = i == bd->rk[r].g ? bd->rk[r].clock : est_end_known(bd, r, i - 1);
  for (int k = 0; k < 2; k++) {
    int l = bd->op[r][i].local[k];
    if (l >= 0 && est_end_known(bd, r, l) > t) t = est_end_known(bd, r, l);
  }
  const xfer *x = bd->op[r][i].cons >= 0 ? &bd->x[bd->op[r][i].cons] : NULL;
  if (x) {
    double comm = bd->fl->costs.comm, arr;
    if (x->done) arr = bd->xb[x - bd->x].arr;
    else if (bd->rk[x->a].g > x->ip) arr = bd->rk[x->a].clock + comm;
    else arr = est_end_known(bd, x->a, x->ip) + comm;
    if (arr > t) t = arr;
  }
  return t;
}

/* Start of op i of rank r, not known: estimated depth first, without recursion (the ops an
 * estimate needs can be many). */
static double est_compute(build *bd, int r, int i) {
  bd->nstack = 0;
  est_push(bd, r, i);
  while (bd->nstack > 0) {
    int q = bd->stack[bd->nstack - 2], k = bd->stack[bd->nstack - 1];
    if (est_known(bd, q, k)) {
      bd->nstack -= 2;
    } else if (!est_push_needs(bd, q, k)) {
      bd->op[q][k].start = est_from_needs(bd, q, k), bd->stamp[q][k] = bd->epoch;
      bd->nstack -= 2;
    }
  }
  return bd->op[r][i].start;
}

/* Start of op i of rank r: as built, or estimated. */
static inline double est_start(build *bd, int r, int i) {
  const lop *o = &bd->op[r][i];
  return i < bd->rk[r].g || bd->stamp[r][i] == bd->epoch ? o->start : est_compute(bd, r, i);
}

/* How much later than its consumer's start z's data arrives if z is sent at `to` rather than
 * at `from`. */
static inline double send_delay(build *bd, const xfer *z, double from, double to) {
  double comm = bd->fl->costs.comm, due = est_start(bd, z->b, z->ic);
  return pos(to + comm - due) - pos(from + comm - due);
}

/* The most that sending rank r's unsent outputs at `to` instead of at its clock delays them. */
static inline double held_delay(build *bd, int r, double to) {
  const lrank *k = &bd->rk[r];
  double h = 0;
  for (int i = 0; i < k->npend; i++) {
    const xfer *z = &bd->x[k->pend[i]];
    if (z->done || z->a != r) continue;
    double d = send_delay(bd, z, k->clock, to);
    if (d > h) h = d;
  }
  return h;
}

/* When a transfer appended to rank r's stream now is posted, as the simulator runs the lane: with
 * the run its last instruction is in, or a new run once its compute so far is issued and its
 * lane's receives are done. */
static inline double post_time(const build *bd, int r) {
  const lrank *k = &bd->rk[r];
  if (k->in_run) return k->post;
  return k->clock > k->lane ? k->clock : k->lane;
}

/* When x, committed now, is done on its receiver (what its consumer waits for): its data there,
 * and the receive posted; *pa, *pb: the posts on the sender and the receiver. */
static inline double xfer_done(const build *bd, const xfer *x, double *pa, double *pb) {
  *pa = post_time(bd, x->a), *pb = post_time(bd, x->b);
  double arr = *pa + bd->fl->costs.comm;
  return arr > *pb ? arr : *pb;
}

/* What committing x now delays: its consumer, if the data is there after the op would start
 * (a receive holds back only its consumer); the receiver's unsent outputs, which may have to
 * leave after it is done (unless they join its run); and what the receiver sends after its next
 * op, since its lane is busy until the receive is done. */
static double commit_delay(build *bd, const xfer *x) {
  const lrank *B = &bd->rk[x->b];
  double pa, pb, done = xfer_done(bd, x, &pa, &pb);
  double h = pos(done - est_start(bd, x->b, x->ic));
  if (B->g < bd->fl->pr->streams[x->b].len) {
    double lane = pos(done - (est_start(bd, x->b, B->g) + bd->op[x->b][B->g].cost));
    if (lane > h) h = lane;
  }
  double d = held_delay(bd, x->b, done);
  return d > h ? d : h;
}

/* Whether rank r can append its next compute op: it has one, and its input is received. */
static inline int can_advance(const build *bd, int r) {
  const lrank *k = &bd->rk[r];
  if (k->g >= bd->fl->pr->streams[r].len) return 0;
  int in = bd->op[r][k->g].cons;
  return in < 0 || bd->x[in].done;
}

/* When rank r's next compute op would start if appended now: at its clock, or when its received
 * input is there. */
static inline double next_start(const build *bd, int r) {
  const lrank *k = &bd->rk[r];
  int x = bd->op[r][k->g].cons;
  return x >= 0 && bd->x[x].done && bd->xb[x].arr > k->clock ? bd->xb[x].arr : k->clock;
}

/* What appending rank r's next compute op delays: the outputs r has not sent go after it. */
static double advance_delay(build *bd, int r) {
  return held_delay(bd, r, next_start(bd, r) + bd->op[r][bd->rk[r].g].cost);
}

/* Whether the SEND of x frees its slot on the sender: a gradient's does (the slot is live
 * from the forward to it); an activation's only in a forward-only program (in training the
 * slot lives on until the backward). */
static inline int frees_slot(const build *bd, const xfer *x) {
  return x->kind == 0 || bd->fl->pr->forward_only;
}

/* A RECV of an activation makes its slot live from there on: it waits for its consumer's gap
 * and for the receiver to send the outputs that free a slot, unless a forced step says
 * otherwise. (A gradient's slot is live anyway, since its forward.) */
static inline int early_activation(const build *bd, const xfer *x) {
  return x->kind == 1 && (bd->rk[x->b].held_slot > 0 || bd->rk[x->b].g < x->ic);
}

/* ---- memory: lowering never raises a rank's peak above its compute order's ----
 * The compute order holds, at each of its ops, the (chunk, micro-batch) pairs from their F to
 * their last backward op (weighted 1 until I, w_stash after, by sched_stream_memory's rule). The
 * full program holds more in three ways only: an activation received before its consumer's gap
 * (live from its RECV on); a pair whose last compute op has run but whose SEND (a gradient, or an
 * activation in a forward-only program) has not (the whole pair: its slot lives to its last
 * instruction); and a pair whose I has run but whose gradient SEND has not, while its W is still
 * to come (the slot's other part, 1 - w_stash, lives to that SEND). An activation's commit and a
 * compute op's append are allowed only while what the rank then holds stays within its compute
 * order's peak, in weighted memory and in slots. Neither guard can stop the build: a held send
 * can always be committed (its receiver cannot have passed its consumer) and then an activation
 * received at its consumer's gap holds exactly what the compute order holds at that F. */

/* What rank r holds beyond the compute order at its gap: sends of pairs it has finished, or
 * whose W is all that is left. */
static void held_extra(const build *bd, int r, double *mem, int *slots) {
  lrank *k = &bd->rk[r];
  if (k->hx_ok) {
    *mem = k->hx_mem, *slots = k->hx_slots;
    return;
  }
  *mem = 0, *slots = 0;
  for (int i = 0; i < k->npend; i++) {
    const xfer *z = &bd->x[k->pend[i]];
    if (z->done || z->a != r) continue;
    int last = bd->lastc[r][z->ip];
    if (last < k->g) *mem += 1, *slots += 1;   /* nothing of the pair left in the compute order */
    else if (z->kind == 0) *mem += 1 - bd->ws; /* its W to come: the compute order counts w_stash */
  }
  k->hx_ok = 1, k->hx_mem = *mem, k->hx_slots = *slots;
}

/* Whether rank r, holding `add` more pairs from its gap up to compute op `upto` (inclusive; the
 * pairs' consumers come later), stays within its peak at each op from its gap to `upto`. */
static int mem_fits(const build *bd, int r, int upto, int add) {
  const lrank *k = &bd->rk[r];
  double hm;
  int hs;
  held_extra(bd, r, &hm, &hs);
  /* at once when the least room over the range takes every early activation, the held sends
   * and add in memory and in slots alike */
  size_t n = (size_t)bd->fl->pr->streams[r].len, lo = (size_t)k->g + n, hi = (size_t)upto + n + 1;
  double room = INFINITY;
  for (const double *t = bd->slack[r]; lo < hi; lo >>= 1, hi >>= 1) {
    if (lo & 1) room = t[lo] < room ? t[lo] : room, lo++;
    if (hi & 1) hi--, room = t[hi] < room ? t[hi] : room;
  }
  if (room >= k->nearly + (hm > hs ? hm : hs) + add) return 1;
  for (int i = k->g; i <= upto; i++) {
    int e = 0;
    for (int q = 0; q < k->nearly; q++) e += k->early[q] > i;
    if (i > k->g) hm = 0, hs = 0; /* held sends go before the rank gets there, or advance waits */
    double m = bd->amem[r][i] + e + hm + (i < upto ? add : 0);
    int sl = bd->aslot[r][i] + e + hs + (i < upto ? add : 0);
    if (m > bd->bmem[r] + bd->meps || sl > bd->bslot[r]) return 0;
  }
  return 1;
}

/* Whether committing x keeps its receiver within its peak (a gradient's slot is live anyway). */
static inline int commit_fits(const build *bd, const xfer *x) {
  if (x->kind == 0 || !bd->guard) return 1;
  xfer *w = (xfer *)x; /* the cached answer only */
  int ver = bd->rk[x->b].mver + 1; /* + 1: a zeroed xbuild has no answer */
  xbuild *xb = &bd->xb[x - bd->x];
  if (xb->fit_ver != ver) xb->fit_ver = ver, w->fit = mem_fits(bd, x->b, x->ic, 1);
  return w->fit;
}

static inline int advance_fits(const build *bd, int r) {
  if (!bd->guard) return 1;
  lrank *k = (lrank *)&bd->rk[r]; /* the cached answer only */
  if (k->adv_ver != k->mver + 1) k->adv_ver = k->mver + 1, k->adv_fit = mem_fits(bd, r, k->g, 0);
  return k->adv_fit;
}

/* The SEND (on x's sender) or the RECV (on its receiver) of transfer x. */
static sched_instr xfer_instr(const build *bd, const xfer *x, int send) {
  const sched_program *pr = bd->fl->pr;
  if (send)
    return (sched_instr){.op = (uint8_t)(x->kind ? SCHED_SEND_ACT : SCHED_SEND_GRAD), .mb = x->mb,
                         .chunk = pr->chunk_of[x->kind ? x->dst - 1 : x->dst + 1], .peer = x->b, .slot = -1, .aslot = -1};
  return (sched_instr){.op = (uint8_t)(x->kind ? SCHED_RECV_ACT : SCHED_RECV_GRAD), .mb = x->mb,
                       .chunk = pr->chunk_of[x->dst], .peer = x->a, .slot = -1, .aslot = -1};
}

static void commit(build *bd, xfer *x) {
  lrank *B = &bd->rk[x->b];
  double pa, pb;
  double arr = bd->xb[x - bd->x].arr = xfer_done(bd, x, &pa, &pb); /* before the pushes: the posts depend on the streams' ends */
  sched_push(bd->out, x->a, xfer_instr(bd, x, 1));
  sched_push(bd->out, x->b, xfer_instr(bd, x, 0));
  bd->rk[x->a].post = pa, B->post = pb;
  bd->rk[x->a].in_run = B->in_run = 1;
  if (arr > B->lane) B->lane = arr;
  x->done = 1;
  if (x->kind == 1 && x->ic > B->g) {
    if (B->nearly == B->capearly) {
      B->capearly = B->capearly ? 2 * B->capearly : 8;
      B->early = core_realloc(B->early, sizeof(int) * (size_t)B->capearly);
    }
    B->early[B->nearly++] = x->ic;
  }
  bd->rk[x->a].held--, bd->rk[x->a].held_slot -= frees_slot(bd, x);
  bd->rk[x->a].hx_ok = 0, bd->rk[x->a].mver++, B->mver++;
  wake(bd, x->a), wake(bd, x->b);
}

/* Appends rank r's next compute op (after its load, if it has one), records when it runs and
 * offers what it produces. */
static void advance(build *bd, int r) {
  const flow *fl = bd->fl;
  const sched_program *pr = fl->pr;
  lrank *k = &bd->rk[r];
  sched_instr in = pr->streams[r].ins[k->g];
  in.peer = -1, in.slot = -1, in.aslot = -1;
  sched_push_compute(bd->out, r, in);
  k->in_run = 0;
  for (int q = 0; q < k->nearly; q++)
    if (k->early[q] <= k->g) k->early[q--] = k->early[--k->nearly];
  k->clock = next_start(bd, r); /* its received input, if any: the op waits for it */
  bd->op[r][k->g].start = k->clock;
  k->clock += bd->op[r][k->g].cost;
  int x = bd->op[r][k->g++].prod;
  core_progress_tick(&bd->tick, (double)++bd->built);
  /* Each rank's arrays are read in order, but the ranks take turns, too many streams for the
   * hardware to see: ask for what this rank's next ops will read, which comes long before
   * its turn does. */
  int ahead = k->g + 4;
  if (ahead < pr->streams[r].len) {
    __builtin_prefetch(&bd->op[r][ahead]);
    __builtin_prefetch(&pr->streams[r].ins[ahead]);
    const lop *o = &bd->op[r][k->g + 1]; /* the op after next: its transfers */
    if (o->prod >= 0) __builtin_prefetch(&bd->x[o->prod]);
    if (o->cons >= 0) __builtin_prefetch(&bd->x[o->cons]);
  }
  const sched_stream *os = &bd->out->streams[r];
  if (os->len + 8 < os->cap) __builtin_prefetch(&os->ins[os->len + 8], 1);
  k->hx_ok = 0, k->mver++;
  if (x >= 0) {
    pend_add(k, x), pend_add(&bd->rk[bd->x[x].b], x), wake(bd, bd->x[x].b);
    k->held++, k->held_slot += frees_slot(bd, &bd->x[x]);
  }
  wake(bd, r);
}

/* Whether x, an activation held back by early_activation, is all its sender holds while its
 * receiver holds a send to that sender that cannot go yet: each waits for the other, so x goes
 * now (the most common wait; longer ones are left to force). */
static int mutual_wait(build *bd, const xfer *x) {
  const lrank *A = &bd->rk[x->a], *B = &bd->rk[x->b];
  if (A->held != 1) return 0;
  for (int i = 0; i < B->npend; i++) {
    const xfer *z = &bd->x[B->pend[i]];
    if (z->done || z->a != x->b || z->b != x->a) continue;
    if (early_activation(bd, z) || commit_delay(bd, z) > bd->tol) return 1;
  }
  return 0;
}

/* Whether every output rank r holds unsent is an activation its receiver has no room for yet:
 * then r may go on (the send waits for the receiver anyway), if that delays nothing. Without it
 * such a rank moves only by force, one global search per op (zb-v at p=64: 120 thousand). */
static int held_blocked(build *bd, int r) {
  const lrank *k = &bd->rk[r];
  for (int i = 0; i < k->npend; i++) {
    const xfer *x = &bd->x[k->pend[i]];
    if (!x->done && x->a == r && (x->kind == 0 || commit_fits(bd, x))) return 0;
  }
  return advance_delay(bd, r) <= bd->tol;
}

/* Every step of rank r that delays nothing and keeps no slot live longer: commits of its
 * transfers, then its next compute op once it holds no unsent output (sends go right after
 * their producer) but those held back by their receivers' memory. */
static void settle(build *bd, int r) {
  lrank *k = &bd->rk[r];
  for (int moved = 1; moved;) {
    moved = 0;
    for (int i = 0; i < k->npend; i++) {
      xfer *x = &bd->x[k->pend[i]];
      if (x->done || (early_activation(bd, x) && !mutual_wait(bd, x)) || !commit_fits(bd, x)) continue;
      if (commit_delay(bd, x) <= bd->tol) commit(bd, x), moved = 1;
    }
    pend_compact(bd, k);
    if (can_advance(bd, r) && advance_fits(bd, r) && (!k->held || held_blocked(bd, r))) advance(bd, r), moved = 1;
  }
}

/* No step is free: takes the one that delays least, then a commit rather than sending later
 * (a send put off uses up slack that later steps may need), then the commit whose slot opens
 * fewest ops early, then the first found. Returns its delay, or -1 when there is none left,
 * which is when everything is built: while a produced transfer is not committed it can be (its
 * receiver has not passed its consumer), and while none is, some rank can advance (else the
 * dataflow run could not have finished). */
static double force(build *bd) {
  const sched_program *pr = bd->fl->pr;
  double best = INFINITY, h;
  int bx = -1, br = -1, bext = 0;
  for (int r = 0; r < pr->p; r++)
    for (int i = 0; i < bd->rk[r].npend; i++) {
      const xfer *x = &bd->x[bd->rk[r].pend[i]];
      if (x->done || x->a != r || !commit_fits(bd, x)) continue;
      h = commit_delay(bd, x);
      int ext = early_activation(bd, x) ? x->ic - bd->rk[x->b].g + 1 : 0; /* ops its slot gets */
      if (h < best - bd->tol || (h < best + bd->tol && ext < bext))
        best = h, bx = bd->rk[r].pend[i], bext = ext;
    }
  for (int r = 0; r < pr->p; r++)
    if (can_advance(bd, r) && advance_fits(bd, r) && (h = advance_delay(bd, r)) < best - bd->tol)
      best = h, br = r, bx = -1;
  if (bx >= 0) commit(bd, &bd->x[bx]);
  else if (br >= 0) advance(bd, br);
  return bx >= 0 || br >= 0 ? best : -1;
}

/* Free steps while there are any, else the least delaying one; CORE_ERUNTIME if the steps stop
 * before everything is built (cannot happen, see force). */
static int build_run(build *bd) {
  const sched_program *pr = bd->fl->pr;
  for (int r = 0; r < pr->p; r++) wake(bd, r);
  for (double h = 0; h >= 0; h = force(bd)) {
    if (h > bd->tol) bd->epoch++; /* something was delayed: estimates are out of date */
    while (bd->qh != bd->qt) {
      int r = bd->queue[bd->qh++ % pr->p];
      bd->queued[r] = 0;
      settle(bd, r);
    }
  }
  for (int r = 0; r < pr->p; r++)
    if (bd->rk[r].g < pr->streams[r].len)
      return core_error_set(CORE_ERUNTIME, "lowering stopped at rank %d compute op %d (a bug)", r,
                            bd->rk[r].g);
  return CORE_OK;
}

/* ---- the direct placement, tried before the build ----
 * A transfer has one end whose place memory fixes and one that may move: an activation is
 * received right before its consumer (earlier would hold its slot longer) and its SEND may go
 * later than its producer (the slot lives to the backward anyway); a gradient is sent right after
 * its producer (the send frees its slot) and its RECV may go earlier than its consumer (the slot
 * is live since the forward). In a forward-only program an activation's SEND frees its slot too:
 * both ends are fixed, and keyed by micro-batch + stage (the diagonal a forward pipeline runs
 * along; on ties the later stage first, so a rank sends what frees a slot before it receives what
 * takes one). Every other transfer gets a key, the ASAP time of its fixed end (the consumer's
 * start, the producer's end; ties: gradients first, then by index, the same on both ranks), and
 * each rank's transfers go into its stream in key order: the fixed ends where they belong, a SEND
 * that may move as early as the order allows (but not into a run that a receive before it would
 * hold up), a RECV that may move as late. Every rank's transfers are then in one global order,
 * which is all that the deadlock-freedom argument of 2. asks. The program is taken only when no
 * build could do better:
 *  - on time: every op runs at its ASAP time. Walking each rank's runs with every SEND assumed
 *    posted when the op before it ends, the posts, lanes and receives that follow must agree (no
 *    run waits for its lane) and every receive be done by its consumer's ASAP start; then these
 *    times solve the simulator's equations, which have one solution;
 *  - no memory beyond the compute order's: the fixed ends where the compute order has the slots
 *    live, a gradient received after its pair's forward, and in the consumer's gap the sends that
 *    free a slot ahead of an activation's receive (their keys are no later).
 * When that fails, a second try breaks the ties the other way, activations first: in the
 * consumer's gap an activation's receive may then come before sends that free, as long as what
 * the rank holds between them stays within its bound (the build allows the same). E.g. zb-h2 at
 * the zero-bubble paper's costs: the last rank ends micro-batch 0's I at the instant its F of
 * micro-batch 1 starts; gradient first, the rank before it receives that gradient before it sends
 * micro-batch 1's activation, which then arrives late.
 * Otherwise (latencies longer than the ops around them, receives that hold a lane too long, key
 * orders no placement meets) the build places the transfers. */

/* Rank r's compute order's memory at each of its ops and its bounds: the larger of its peak and
 * the family's promise (direct's second try and the build's mem_fits). */
typedef struct {
  double *at, bound;
  int *slots, *last, sbound;
} rmem;

static rmem *rank_memory_of(const build *bd, int r, rmem *m) {
  const sched_program *pr = bd->fl->pr;
  size_t n = (size_t)pr->streams[r].len;
  double cap = pr->mem_cap * pr->v, peak;
  int pslot;
  m->at = core_malloc(sizeof(double) * (n + 1));
  m->slots = core_malloc(sizeof(int) * (n + 1)), m->last = core_malloc(sizeof(int) * (n + 1));
  sched_stream_memory(pr, r, bd->ws, 1, &peak, &pslot, m->at, m->slots, m->last);
  m->bound = peak > cap ? peak : cap;
  m->sbound = pslot > (int)(cap + 1e-9) ? pslot : (int)(cap + 1e-9);
  return m;
}

static inline int xless(const double *key, const xfer *x, int i, int j, int fo, int act_first) {
  if (key[i] != key[j]) return key[i] < key[j];
  if (x[i].kind != x[j].kind) return (x[i].kind < x[j].kind) != act_first;
  if (fo && x[i].dst != x[j].dst) return x[i].dst > x[j].dst;
  return i < j;
}

/* The direct placement (above). act_first: the second try, the bound the larger of the compute
 * order's peak and the family's promise, as the build's mem_fits has it. *exact: every on-time
 * check held with no tolerance. Returns 1 when it placed the program, 0 when it leaves it to the
 * build (nothing pushed). */
static int direct(build *bd, int act_first, int *exact) {
  const sched_program *pr = bd->fl->pr;
  const xfer *X = bd->x;
  double comm = bd->fl->costs.comm, tol = bd->tol;
  int fo = pr->forward_only;
  size_t nx = (size_t)bd->nx;
  double *key = core_malloc(sizeof(double) * (nx + 1)), *arr = core_malloc(sizeof(double) * (nx + 1));
  for (size_t i = 0; i < nx; i++) {
    const xfer *x = &X[i];
    key[i] = fo ? x->mb + x->dst : x->kind == 1 ? bd->xt[i].cstart : bd->xt[i].pend;
  }
  size_t *off = core_malloc(sizeof(size_t) * ((size_t)pr->p + 1));
  int *list = core_malloc(sizeof(int) * (2 * nx + 1)), *gap = core_malloc(sizeof(int) * (2 * nx + 1));
  int ok = 1;
  off[0] = 0;
  /* each rank's transfers in key order, and their gaps (before compute op g) */
  for (int r = 0; ok && r < pr->p; r++) {
    const lop *op = bd->op[r];
    int len = pr->streams[r].len, *L = list + off[r], *G = gap + off[r], n = 0;
    rmem rm, *mem = NULL; /* the rank's compute-order memory, once a gap needs it */
    for (int i = 0; i < len; i++) {
      if (op[i].cons >= 0) L[n++] = op[i].cons;
      if (op[i].prod >= 0) L[n++] = op[i].prod;
    }
    off[r + 1] = off[r] + (size_t)n;
    /* nearly in key order already (a moving end passes a few fixed ones): by insertion, given up
     * when it is not */
    size_t moves = 0, most = 64 * (size_t)n + 1024;
    for (int k = 1; k < n && ok; k++) {
      int v = L[k], j = k;
      for (; j > 0 && xless(key, X, v, L[j - 1], fo, act_first); j--) L[j] = L[j - 1];
      L[j] = v;
      moves += (size_t)(k - j);
      ok = moves <= most;
    }
    /* gaps: the latest each may take (a fixed end its own, a RECV that moves its consumer's);
     * then forward, the fixed ends where they are and a SEND that moves as early as it may (after
     * its producer and what comes before it); then back, a RECV that moves as late as it may */
    int hi = len;
    for (int k = n - 1; ok && k >= 0; k--) {
      const xfer *x = &X[L[k]];
      int send = x->a == r, fixed = (x->kind == 1 && !fo) != send, own = send ? x->ip + 1 : x->ic;
      if (own < hi && (fixed || !send)) hi = own;
      if (fixed && own > hi) ok = 0;
      G[k] = hi;
    }
    for (int k = 0, lo = 0, h = 0, want = 0; ok && k < n; k++) {
      const xfer *x = &X[L[k]];
      int send = x->a == r, fixed = (x->kind == 1 && !fo) != send;
      if (!send && !fixed) {
        /* a RECV that moves holds its lane until its data is there: runs after its gap wait
         * unless the op in its gap ends by then, so a SEND that moves goes no earlier than that
         * op's gap (its SEND is fixed: the data arrives comm after its producer ends) */
        for (double a = bd->xt[L[k]].pend + comm; h < len && op[h].start + op[h].cost < a - tol;) h++;
        int w = h < x->ic ? h : x->ic;
        if (w > want) want = w;
        continue;
      }
      int g = fixed ? G[k] : (x->ip + 1 > lo ? x->ip + 1 : lo);
      if (!fixed && want > g && want <= G[k]) g = want;
      if (g < lo || g > G[k]) ok = 0;
      G[k] = lo = g;
    }
    for (int k = n - 1, next = len; ok && k >= 0; k--) {
      const xfer *x = &X[L[k]];
      if (x->b == r && (x->kind == 0 || fo)) {
        G[k] = x->ic < next ? x->ic : next;
        for (int q = 0; q < 2; q++) ok &= op[x->ic].local[q] < G[k]; /* a gradient: after its pair's forward */
        if (fo && x->kind == 1 && G[k] < x->ic) ok = 0; /* an activation: no earlier than its gap */
      }
      if (k + 1 < n && G[k] > G[k + 1]) ok = 0;
      next = G[k];
    }
    /* a RECV of an activation and a send that frees a slot after it in the same gap: refused, or
     * (act_first) allowed while what the rank then holds stays within its bound */
    double xm = 0;
    int xs = 0;
    for (int k = n - 1, cur = -1; ok && k >= 0; k--) {
      const xfer *x = &X[L[k]];
      if (G[k] != cur) cur = G[k], xm = 0, xs = 0;
      if (x->a == r && frees_slot(bd, x)) {
        if (act_first && !mem && bd->guard && !fo) mem = rank_memory_of(bd, r, &rm);
        if (!mem) xm = INFINITY;
        else if (mem->last[x->ip] < G[k]) xm += 1, xs += 1; /* nothing of the pair left in the compute order */
        else xm += 1 - bd->ws;                                /* its W to come: the compute order counts w_stash */
      }
      if (x->b == r && x->kind == 1 && xm > 0) {
        if (!mem || mem->at[G[k]] + xm > mem->bound + bd->meps || mem->slots[G[k]] + xs > mem->sbound) ok = 0;
      }
    }
    if (mem) free(rm.at), free(rm.slots), free(rm.last), mem = NULL;
    for (int k = 0; ok && k < n; k++) /* every SEND posted when the op before it ends */
      if (X[L[k]].a == r) arr[L[k]] = op[G[k] - 1].start + op[G[k] - 1].cost + comm;
  }
  /* on time: the runs as the simulator posts them (exact: with no tolerance) */
  *exact = ok;
  for (int r = 0; ok && r < pr->p; r++) {
    const lop *op = bd->op[r];
    const int *L = list + off[r], *G = gap + off[r];
    int n = (int)(off[r + 1] - off[r]);
    double lane = 0, post = 0, t = 0;
    for (int k = 0; ok && k < n; k++) {
      const xfer *x = &X[L[k]];
      if (k == 0 || G[k - 1] != G[k]) {
        t = G[k] > 0 ? op[G[k] - 1].start + op[G[k] - 1].cost : 0;
        post = t > lane ? t : lane;
      }
      if (x->a == r) {
        ok = post <= t + tol && arr[L[k]] <= bd->xt[L[k]].cstart + tol;
        *exact &= post <= t && arr[L[k]] <= bd->xt[L[k]].cstart;
      } else {
        double fin = arr[L[k]] > post ? arr[L[k]] : post;
        ok = fin <= op[x->ic].start + tol;
        *exact &= fin <= op[x->ic].start;
        if (fin > lane) lane = fin;
      }
    }
  }
  /* the streams, written in place (a record passed by value to each push stalled on its copy) */
  for (int r = 0; ok && r < pr->p; r++) {
    const int *L = list + off[r], *G = gap + off[r];
    const sched_instr *in = pr->streams[r].ins;
    const int *stage = pr->stage_of + (size_t)r * pr->v;
    int len = pr->streams[r].len, n = (int)(off[r + 1] - off[r]), k = 0, S = pr->p * pr->v;
    sched_stream *os = &bd->out->streams[r]; /* build_init reserved it exactly: ops, loads, transfers, tail */
    sched_instr *w = os->ins + os->len;
    for (int g = 0; g <= len; g++) {
      for (; k < n && G[k] == g; k++) *w++ = xfer_instr(bd, &X[L[k]], X[L[k]].a == r);
      if (g == len) break;
      int s = stage[in[g].chunk];
      if (sched_takes_load(in[g].op, s, S)) { /* as sched_push_compute */
        *w = in[g];
        w->op = SCHED_LOAD_MICROBATCH, w->peer = -1, w->slot = -1, w->aslot = -1;
        w++;
      }
      *w = in[g];
      w->peer = -1, w->slot = -1, w->aslot = -1;
      w++;
      core_progress_tick(&bd->tick, (double)++bd->built);
    }
    os->len = (int)(w - os->ins);
    CORE_ASSERT(os->len <= os->cap);
  }
  free(key), free(arr), free(off), free(list), free(gap);
  *exact &= ok;
  return ok;
}

/* Where the inputs of op i of rank r come from: at[2k], at[2k+1] = rank and index of the F
 * (f_at) or backward (b_at) of stage k / m, micro-batch k % m. An input from another rank becomes
 * a transfer; one from the same rank is a local input. */
static void link_inputs(build *bd, const int *f_at, const int *b_at, int r, int i) {
  const sched_program *pr = bd->fl->pr;
  const sched_instr *in = &pr->streams[r].ins[i];
  int s = sched_stage_at(pr, r, in), j = in->mb, m = bd->fl->m, S = bd->fl->S, nl = 0;
  const int *from[2] = {NULL, NULL};
  int kind = 1; /* of the input from the neighbouring stage: 1 activation, 0 gradient */
  if (in->op == SCHED_FORWARD && s > 0) from[0] = &f_at[2 * ((size_t)(s - 1) * m + j)];
  if (in->op == SCHED_BACKWARD || in->op == SCHED_BACKWARD_INPUT) {
    from[1] = &f_at[2 * ((size_t)s * m + j)];
    if (s < S - 1) from[0] = &b_at[2 * ((size_t)(s + 1) * m + j)], kind = 0;
  }
  if (in->op == SCHED_BACKWARD_WEIGHT) from[1] = &b_at[2 * ((size_t)s * m + j)];
  for (int k = 0; k < 2; k++) {
    if (!from[k]) continue;
    if (from[k][0] == r) {
      bd->op[r][i].local[nl++] = from[k][1];
      continue;
    }
    xfer x = {.a = from[k][0], .ip = from[k][1], .b = r, .ic = i, .kind = (char)kind, .dst = s, .mb = j};
    lop *src = &bd->op[x.a][x.ip];
    src->prod = bd->op[r][i].cons = bd->nx;
    bd->xt[bd->nx] = (xtime){src->start + src->cost, bd->op[r][i].start};
    bd->x[bd->nx++] = x;
  }
}

/* Every op's inputs: the transfers between ranks and the inputs from the op's own rank. */
static void collect(build *bd) {
  const sched_program *pr = bd->fl->pr;
  size_t n = (size_t)bd->fl->S * (size_t)bd->fl->m;
  int *f_at = core_malloc(sizeof(int) * 2 * n), *b_at = core_malloc(sizeof(int) * 2 * n);
  for (int r = 0; r < pr->p; r++)
    for (int i = 0; i < pr->streams[r].len; i++) {
      const sched_instr *in = &pr->streams[r].ins[i];
      size_t k = (size_t)sched_stage_at(pr, r, in) * (size_t)bd->fl->m + (size_t)in->mb;
      if (in->op == SCHED_FORWARD) f_at[2 * k] = r, f_at[2 * k + 1] = i;
      if (in->op == SCHED_BACKWARD || in->op == SCHED_BACKWARD_INPUT)
        b_at[2 * k] = r, b_at[2 * k + 1] = i;
    }
  bd->x = core_malloc(sizeof(xfer) * 2 * (n + 1));
  bd->xt = core_malloc(sizeof(xtime) * 2 * (n + 1));
  for (int r = 0; r < pr->p; r++) {
    for (int i = 0; i < pr->streams[r].len; i++) link_inputs(bd, f_at, b_at, r, i);
    core_progress_at(r + 1.0);
  }
  free(f_at), free(b_at);
}

static void build_init(build *bd, const flow *fl, sched_program *out) {
  const sched_program *pr = fl->pr;
  memset(bd, 0, sizeof *bd);
  bd->fl = fl, bd->out = out;
  size_t p = (size_t)pr->p;
  bd->op = core_calloc(p, sizeof(lop *));
  double span = 0;
  for (int r = 0; r < pr->p; r++) {
    const sched_stream *st = &pr->streams[r];
    lop *o = bd->op[r] = core_malloc(sizeof(lop) * ((size_t)st->len + 1));
    for (int i = 0; i < st->len; i++) {
      int s = pr->stage_of[r * pr->v + st->ins[i].chunk];
      o[i] = (lop){.start = fl->start[r][i], /* the ASAP times: estimates of epoch 0 */
                   .cost = fl->cost[4 * s + st->ins[i].op - SCHED_FORWARD],
                   .prod = -1, .cons = -1, .local = {-1, -1}};
    }
    if (fl->free_at[r] > span) span = fl->free_at[r]; /* the end of its last op */
  }
  bd->tol = 1e-12 * (1 + span);
  bd->ws = sched_w_stash(&fl->costs);
  bd->meps = 1e-9 * (1 + pr->v * (double)pr->m);
  /* The bound: a program with a memory promise (mem_cap, set by the compiler) holds it; where
   * the compute order stays below the promise (1f1b's ranks after the first, zb-v's), an
   * activation may be received early up to it, which hides the latency. Programs without one
   * (interleaved, dualpipev, inference, imported orders) are lowered for time alone, and need
   * none of the arrays below. */
  bd->guard = pr->mem_cap > 0;
  bd->amem = core_calloc(p, sizeof(double *)), bd->aslot = core_calloc(p, sizeof(int *));
  bd->lastc = core_calloc(p, sizeof(int *)), bd->slack = core_calloc(p, sizeof(double *));
  bd->bmem = core_calloc(p, sizeof(double)), bd->bslot = core_calloc(p, sizeof(int));
  bd->rk = core_calloc(p, sizeof(lrank));
  bd->queue = core_malloc(sizeof(int) * p);
  bd->queued = core_calloc(p, sizeof(int));
  collect(bd);
  for (int r = 0; r < pr->p; r++) { /* each stream's length, exactly: compute ops, loads, transfers, the tail */
    const sched_stream *st = &pr->streams[r];
    size_t n = (size_t)st->len + 3;
    for (int i = 0; i < st->len; i++) {
      int s = sched_stage_at(pr, r, &st->ins[i]);
      n += (bd->op[r][i].prod >= 0) + (bd->op[r][i].cons >= 0) + sched_takes_load(st->ins[i].op, s, fl->S);
    }
    sched_reserve(out, r, n);
  }
}

/* What the step-by-step build alone reads: its per-transfer and per-op tables, and the memory
 * bounds mem_fits reads (guarded programs only): what the compute order holds at each op, its
 * peaks, and the room under the bounds. */
static void build_init_build(build *bd) {
  const sched_program *pr = bd->fl->pr;
  bd->xb = core_calloc((size_t)bd->nx + 1, sizeof(xbuild)); /* fit_ver 0: no answer yet */
  bd->stamp = core_calloc((size_t)pr->p, sizeof(int *));
  for (int r = 0; r < pr->p; r++) bd->stamp[r] = core_calloc((size_t)pr->streams[r].len + 1, sizeof(int)); /* epoch 0: the ASAP times */
  for (int r = 0; bd->guard && r < pr->p; r++) { /* in chunk slots, at each compute op */
    size_t n = (size_t)pr->streams[r].len;
    rmem rm;
    rank_memory_of(bd, r, &rm);
    bd->amem[r] = rm.at, bd->aslot[r] = rm.slots, bd->lastc[r] = rm.last;
    bd->bmem[r] = rm.bound, bd->bslot[r] = rm.sbound;
    double *t = bd->slack[r] = core_malloc(sizeof(double) * (2 * n + 1));
    for (size_t i = 0; i < n; i++) {
      double a = bd->bmem[r] + bd->meps - bd->amem[r][i], b = bd->bslot[r] - bd->aslot[r][i];
      t[n + i] = a < b ? a : b;
    }
    for (size_t i = n - 1; i >= 1 && i < n; i--) t[i] = t[2 * i] < t[2 * i + 1] ? t[2 * i] : t[2 * i + 1];
  }
}

static void build_free(build *bd) {
  for (int r = 0; r < bd->out->p; r++) {
    if (bd->stamp) free(bd->stamp[r]);
    free(bd->op[r]), free(bd->rk[r].pend), free(bd->rk[r].early);
    free(bd->amem[r]), free(bd->aslot[r]), free(bd->lastc[r]), free(bd->slack[r]);
  }
  free(bd->slack), free(bd->stamp), free(bd->xb);
  free(bd->amem), free(bd->aslot), free(bd->lastc), free(bd->bmem), free(bd->bslot);
  free(bd->op), free(bd->rk);
  free(bd->x), free(bd->xt), free(bd->stack), free(bd->queue), free(bd->queued);
}

int sched_asap_end(const sched_program *compute, const sched_costs *costs, double *end, double *rank_end) {
  int rc = sched_check_compute(compute);
  if (!rc) rc = sched_costs_check(costs, compute->p * compute->v, compute->m);
  if (rc) return rc;
  flow fl;
  flow_init(&fl, compute, costs);
  rc = flow_run(&fl);
  *end = 0;
  for (int r = 0; !rc && r < compute->p; r++) {
    int n = compute->streams[r].len;
    if (n > 0 && fl.free_at[r] > *end) *end = fl.free_at[r]; /* the end of its last op */
    if (rank_end) rank_end[r] = fl.free_at[r];
  }
  flow_free(&fl);
  return rc;
}

int sched_lower(const sched_program *compute, const sched_costs *costs, sched_program *out) {
  return sched_lower_how(compute, costs, out, SCHED_LOWER_DIRECT_FIRST, NULL);
}

int sched_lower_how(const sched_program *compute, const sched_costs *costs, sched_program *out, sched_lower_mode how,
                    sched_lower_info *info) {
  int rc = sched_check_compute(compute);
  if (!rc) rc = sched_costs_check(costs, compute->p * compute->v, compute->m);
  if (rc) return rc;
  for (int r = 0; r < compute->p; r++)
    for (int i = 0; i < compute->streams[r].len; i++)
      if (!sched_op_is_compute((sched_op)compute->streams[r].ins[i].op))
        return core_error_set(CORE_EINPUT, "lowering takes compute actions only (rank %d #%d)", r, i);
  double nc = (double)sched_program_count(compute);
  core_progress_phase("lowering, timing the compute order:", nc, "compute ops");
  flow fl;
  flow_init(&fl, compute, costs);
  rc = flow_run(&fl);
  if (rc) {
    flow_free(&fl);
    return rc;
  }
  rc = sched_program_init(out, compute->family, compute->p, compute->v, compute->m,
                          compute->stage_of);
  if (rc) {
    flow_free(&fl);
    return rc;
  }
  out->tied = compute->tied;
  out->forward_only = compute->forward_only;
  out->mem_cap = compute->mem_cap;
  for (int r = 0; info && info->first && r < compute->p; r++) /* (ranks with no compute op: 0, 0) */
    info->first[r] = compute->streams[r].len ? fl.start[r][0] : 0, info->last[r] = fl.free_at[r];
  build bd;
  core_progress_phase("lowering, preparing:", compute->p, "ranks");
  build_init(&bd, &fl, out);
  flow_free_times(&fl);
  core_progress_phase("lowering, placing transfers:", nc, "compute ops");
  int exact = 0, placed = how != SCHED_LOWER_BUILD && (direct(&bd, 0, &exact) || direct(&bd, 1, &exact));
  if (!placed) build_init_build(&bd), rc = build_run(&bd);
  if (info) info->placed_directly = placed, info->exact = placed && exact;
  build_free(&bd);
  if (rc) {
    flow_free(&fl);
    sched_program_free(out);
    return rc;
  }
  if (!out->forward_only) sched_append_tail(out);
  for (int r = 0; r < out->p; r++) sched_assign_slots(out, r);
  flow_free(&fl);
  return CORE_OK;
}
