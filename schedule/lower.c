/* schedule/lower.c: compute-only program -> full program.
 *
 * 1. A dataflow simulation of the compute order under the cost model gives every compute op a
 *    start and an end time (and proves the order can run at all).
 * 2. Every dependency between ranks becomes a SEND on the producer and a RECV on the consumer.
 *    Both get the same key: the earlier of the consumer's start and the producer rank's next
 *    compute start. So the send is issued right after its producer (before the producer's next
 *    op) and the receive comes no later than its consumer needs it.
 * 3. Each rank's stream is its compute ops and transfers sorted by key; transfers at one key go
 *    in one global order (key, gradients before activations, stage, micro-batch). Every rank's
 *    transfers are therefore sorted by one global order, which is what makes the program
 *    deadlock-free even with blocking, unbuffered sends: of all blocked transfers, the first in
 *    that order would find its partner waiting for it. (sched_verify checks it anyway.)
 * 4. LOAD_MICROBATCH goes right before the first and last virtual stage's forwards; the step's
 *    tail (REDUCE_TIED_GRADS, REDUCE_GRADS, OPTIMIZER_STEP) at the end.
 * 5. Activation buffer slots by liveness: (chunk, micro-batch) holds a slot from its first
 *    instruction to its last; slots are reused greedily in stream order, which allocates
 *    exactly the peak number live at once. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "schedule/internal.h"

double sched_op_cost(const sched_costs *c, sched_op op, int s) {
  double f = c->stage_f ? c->stage_f[s] : c->f;
  double b = c->stage_b ? c->stage_b[s] : c->b;
  double w = c->stage_w ? c->stage_w[s] : c->w;
  double dp = c->stage_dp_w ? c->stage_dp_w[s] : c->dp_w;
  switch (op) {
  case SCHED_FORWARD: return f;
  case SCHED_BACKWARD: return b + w + dp;
  case SCHED_BACKWARD_INPUT: return b;
  case SCHED_BACKWARD_WEIGHT: return w + dp;
  default: return 0;
  }
}

typedef struct {
  const sched_program *pr;
  sched_costs costs;
  int S, m;
  double *f_end, *b_end, *w_end; /* [S*m], < 0 while not done; b_end: B or I */
  double **start, **end;         /* [rank][compute index] */
  int *pc;
  double *free_at;
  int *queue, qhead, qtail, *queued;
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
    int s = sched_stage_at(pr, r, in);
    double ready = flow_ready(fl, r, in, s);
    if (ready < 0) return;
    double t0 = ready > fl->free_at[r] ? ready : fl->free_at[r];
    double cost = sched_op_cost(&fl->costs, (sched_op)in->op, s);
    if (!(cost > 1e-9)) cost = 1e-9; /* keys need end > start; zero-cost ops still take an instant */
    double t1 = t0 + cost;
    fl->start[r][fl->pc[r]] = t0, fl->end[r][fl->pc[r]] = t1;
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
  fl->end = core_calloc((size_t)pr->p, sizeof(double *));
  for (int r = 0; r < pr->p; r++) {
    fl->start[r] = core_malloc(sizeof(double) * (size_t)(pr->streams[r].len + 1));
    fl->end[r] = core_malloc(sizeof(double) * (size_t)(pr->streams[r].len + 1));
  }
  fl->pc = core_calloc((size_t)pr->p, sizeof(int));
  fl->free_at = core_calloc((size_t)pr->p, sizeof(double));
  fl->queue = core_malloc(sizeof(int) * (size_t)pr->p);
  fl->queued = core_calloc((size_t)pr->p, sizeof(int));
}

static void flow_free(flow *fl) {
  for (int r = 0; r < fl->pr->p; r++) free(fl->start[r]), free(fl->end[r]);
  free(fl->start), free(fl->end), free(fl->f_end), free(fl->b_end), free(fl->w_end);
  free(fl->pc), free(fl->free_at), free(fl->queue), free(fl->queued);
}

/* One instruction of a rank's stream before sorting. */
typedef struct {
  double key;
  int cls;   /* 0 transfer, 1 load or compute */
  int kind;  /* transfers: 0 gradient, 1 activation */
  int stage; /* transfers: producing stage */
  int mb;
  int seq; /* loads and compute: 2 * compute index (+1 for the op, loads go first) */
  sched_instr in;
} item;

typedef struct {
  item *it;
  int n, cap;
} items;

static void items_push(items *a, item x) {
  if (a->n == a->cap) {
    a->cap = a->cap ? 2 * a->cap : 64;
    a->it = core_realloc(a->it, sizeof(item) * (size_t)a->cap);
  }
  a->it[a->n++] = x;
}

static int item_cmp(const void *pa, const void *pb) {
  const item *a = pa, *b = pb;
  if (a->key != b->key) return a->key < b->key ? -1 : 1;
  if (a->cls != b->cls) return a->cls - b->cls;
  if (a->cls == 1) return a->seq - b->seq;
  if (a->kind != b->kind) return a->kind - b->kind;
  if (a->stage != b->stage) return a->stage - b->stage;
  return a->mb - b->mb;
}

/* Start of the compute op after index i on rank r, or +inf. */
static double next_start(const flow *fl, int r, int i) {
  return i + 1 < fl->pr->streams[r].len ? fl->start[r][i + 1] : INFINITY;
}

static void add_transfer(items *per_rank, const flow *fl, int kind, int src_stage, int dst_stage,
                         int mb, int prod_idx, double cons_start) {
  const sched_program *pr = fl->pr;
  int a = pr->rank_of[src_stage], b = pr->rank_of[dst_stage];
  double ns = next_start(fl, a, prod_idx);
  double key = cons_start < ns ? cons_start : ns;
  item x = {.key = key, .cls = 0, .kind = kind, .stage = src_stage, .mb = mb};
  x.in = (sched_instr){.op = (uint8_t)(kind ? SCHED_SEND_ACT : SCHED_SEND_GRAD), .mb = mb,
                       .chunk = pr->chunk_of[src_stage], .peer = b, .slot = -1};
  items_push(&per_rank[a], x);
  x.in = (sched_instr){.op = (uint8_t)(kind ? SCHED_RECV_ACT : SCHED_RECV_GRAD), .mb = mb,
                       .chunk = pr->chunk_of[dst_stage], .peer = a, .slot = -1};
  items_push(&per_rank[b], x);
}

/* Index of each stage's F and backward (B or I) per micro-batch: [S*m] -> (rank, index). */
static void build_items(const flow *fl, items *per_rank, int *f_idx, int *b_idx) {
  const sched_program *pr = fl->pr;
  int S = fl->S, m = fl->m;
  for (int r = 0; r < pr->p; r++)
    for (int i = 0; i < pr->streams[r].len; i++) {
      const sched_instr *in = &pr->streams[r].ins[i];
      int s = sched_stage_at(pr, r, in);
      if (in->op == SCHED_FORWARD) f_idx[s * m + in->mb] = i;
      if (in->op == SCHED_BACKWARD || in->op == SCHED_BACKWARD_INPUT) b_idx[s * m + in->mb] = i;
    }
  for (int r = 0; r < pr->p; r++)
    for (int i = 0; i < pr->streams[r].len; i++) {
      const sched_instr *in = &pr->streams[r].ins[i];
      int s = sched_stage_at(pr, r, in), j = in->mb;
      item x = {.key = fl->start[r][i], .cls = 1, .seq = 2 * i + 1, .in = *in};
      x.in.peer = -1, x.in.slot = -1;
      if (in->op == SCHED_FORWARD && (s == 0 || s == S - 1)) {
        item ld = x;
        ld.seq = 2 * i;
        ld.in.op = SCHED_LOAD_MICROBATCH;
        items_push(&per_rank[r], ld);
      }
      items_push(&per_rank[r], x);
      if (in->op == SCHED_FORWARD && s > 0 && pr->rank_of[s - 1] != r)
        add_transfer(per_rank, fl, 1, s - 1, s, j, f_idx[(s - 1) * m + j], fl->start[r][i]);
      if ((in->op == SCHED_BACKWARD || in->op == SCHED_BACKWARD_INPUT) && s < S - 1 &&
          pr->rank_of[s + 1] != r)
        add_transfer(per_rank, fl, 0, s + 1, s, j, b_idx[(s + 1) * m + j], fl->start[r][i]);
    }
}

/* Greedy slot assignment over each (chunk, micro-batch)'s live range in stream order. */
static void assign_slots(sched_program *out, int r) {
  sched_stream *st = &out->streams[r];
  int keys = out->v * out->m;
  int *last = core_malloc(sizeof(int) * (size_t)keys), *slot_of = core_malloc(sizeof(int) * (size_t)keys);
  int *free_stack = core_malloc(sizeof(int) * (size_t)(keys + 1));
  for (int k = 0; k < keys; k++) last[k] = -1, slot_of[k] = -1;
  for (int i = 0; i < st->len; i++)
    if (st->ins[i].chunk >= 0 && st->ins[i].mb >= 0) last[st->ins[i].chunk * out->m + st->ins[i].mb] = i;
  int nfree = 0, nslots = 0;
  for (int i = 0; i < st->len; i++) {
    sched_instr *in = &st->ins[i];
    if (in->chunk < 0 || in->mb < 0) continue;
    int k = in->chunk * out->m + in->mb;
    if (slot_of[k] < 0) slot_of[k] = nfree ? free_stack[--nfree] : nslots++;
    in->slot = slot_of[k];
    if (last[k] == i) free_stack[nfree++] = slot_of[k];
  }
  out->nslots[r] = nslots;
  free(last), free(slot_of), free(free_stack);
}

static void append_tail(sched_program *out) {
  int S = out->p * out->v;
  int a = out->rank_of[0], b = out->rank_of[S - 1];
  for (int r = 0; r < out->p; r++) {
    sched_instr t = {.op = SCHED_REDUCE_TIED_GRADS, .mb = -1, .chunk = -1, .peer = -1, .slot = -1};
    if (out->tied && (r == a || r == b)) {
      t.peer = a == b ? -1 : (r == a ? b : a);
      sched_push(out, r, t);
    }
    t.op = SCHED_REDUCE_GRADS, t.peer = -1;
    sched_push(out, r, t);
    t.op = SCHED_OPTIMIZER_STEP;
    sched_push(out, r, t);
  }
}

int sched_lower(const sched_program *compute, const sched_costs *costs, sched_program *out) {
  int rc = sched_check_compute(compute);
  if (rc) return rc;
  for (int r = 0; r < compute->p; r++)
    for (int i = 0; i < compute->streams[r].len; i++)
      if (!sched_op_is_compute((sched_op)compute->streams[r].ins[i].op))
        return core_error_set(CORE_EINPUT, "lowering takes compute actions only (rank %d #%d)", r, i);
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
  size_t n = (size_t)fl.S * (size_t)fl.m;
  int *f_idx = core_malloc(sizeof(int) * n), *b_idx = core_malloc(sizeof(int) * n);
  items *per_rank = core_calloc((size_t)compute->p, sizeof(items));
  build_items(&fl, per_rank, f_idx, b_idx);
  for (int r = 0; r < compute->p; r++) {
    qsort(per_rank[r].it, (size_t)per_rank[r].n, sizeof(item), item_cmp);
    out->streams[r].cap = per_rank[r].n + 3;
    out->streams[r].ins = core_malloc(sizeof(sched_instr) * (size_t)out->streams[r].cap);
    for (int i = 0; i < per_rank[r].n; i++) out->streams[r].ins[i] = per_rank[r].it[i].in;
    out->streams[r].len = per_rank[r].n;
    free(per_rank[r].it);
  }
  if (!out->forward_only) append_tail(out);
  for (int r = 0; r < out->p; r++) assign_slots(out, r);
  free(per_rank), free(f_idx), free(b_idx);
  flow_free(&fl);
  return CORE_OK;
}
