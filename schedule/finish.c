/* schedule/finish.c: what makes a sequence of compute ops a full program, shared by lowering
 * (lower.c), the schedule-file import (csv.c) and the offload placement (offload.c): the
 * LOAD_MICROBATCH in front of the forwards that take one, the step's tail, and the activation
 * buffer slots assigned by liveness. */
#include <math.h>
#include <stdlib.h>

#include "core/error.h"
#include "schedule/internal.h"

void sched_push_compute(sched_program *out, int r, sched_instr in) {
  if (sched_takes_load(in.op, sched_stage_at(out, r, &in), out->p * out->v)) {
    sched_instr ld = in;
    ld.op = SCHED_LOAD_MICROBATCH;
    sched_push(out, r, ld);
  }
  sched_push(out, r, in);
}

/* A pool of free buffers, last freed first; with times, each free from a time on. */
typedef struct {
  int *id, n;
  double *from; /* NULL: every one free now */
} pool;

static void give(pool *q, int id, double from) {
  if (q->from) q->from[q->n] = from;
  q->id[q->n++] = id;
}

/* The last freed buffer free by time t, taken out of the pool; else a new one (*count). */
static int take(pool *q, double t, int *count) {
  double by = t + 1e-9 * (1 + fabs(t));
  for (int j = q->n - 1; j >= 0; j--) {
    if (q->from && q->from[j] > by) continue;
    int id = q->id[j];
    for (int k = j + 1; k < q->n; k++) {
      q->id[k - 1] = q->id[k];
      if (q->from) q->from[k - 1] = q->from[k];
    }
    q->n--;
    return id;
  }
  return (*count)++;
}

/* Greedy assignment in stream order of each (chunk, micro-batch)'s slot over its live range and
 * of its other part over its shorter one (sched_pair_ranges): intervals taken by start, so each
 * pool is as large as the most ranges live at once. */
void sched_assign_slots(sched_program *out, int r) { sched_assign_slots_at(out, r, NULL, NULL); }

void sched_assign_slots_at(sched_program *out, int r, const double *at, const double *free_at) {
  sched_stream *st = &out->streams[r];
  size_t keys = (size_t)out->v * (size_t)out->m;
  int *first = core_malloc(sizeof(int) * keys), *last = core_malloc(sizeof(int) * keys);
  int *alast = core_malloc(sizeof(int) * keys), *slot_of = core_malloc(sizeof(int) * keys);
  int *aslot_of = core_malloc(sizeof(int) * keys);
  pool fs = {.id = core_malloc(sizeof(int) * (keys + 1))}, fa = {.id = core_malloc(sizeof(int) * (keys + 1))};
  if (at) fs.from = core_malloc(sizeof(double) * (keys + 1)), fa.from = core_malloc(sizeof(double) * (keys + 1));
  int *lp = core_malloc(sizeof(int) * (size_t)out->v);
  sched_pair_ranges(out, r, first, last, alast);
  sched_local_chunks(out, r, lp);
  int ns = 0, na = 0;
  for (int i = 0; i < st->len; i++) {
    sched_instr *in = &st->ins[i];
    in->slot = in->aslot = -1;
    if (in->chunk < 0 || in->mb < 0) continue;
    int k = in->chunk * out->m + in->mb, kp = sched_local_pair(lp, out->m, in);
    double t = at ? at[i] : 0;
    if (in->op == SCHED_OFFLOAD) { /* away on the host: its buffers are free for others once copied */
      double f = at ? free_at[i] : 0;
      in->slot = slot_of[k], give(&fs, slot_of[k], f);
      if (i < alast[k]) in->aslot = aslot_of[k], give(&fa, aslot_of[k], f);
      continue;
    }
    if (in->op == SCHED_RELOAD) { /* back into whichever buffers are free now */
      in->slot = slot_of[k] = take(&fs, t, &ns);
      if (i < alast[k]) in->aslot = aslot_of[k] = take(&fa, t, &na);
      continue;
    }
    if (first[k] == i) {
      slot_of[k] = take(&fs, t, &ns);
      aslot_of[k] = take(&fa, t, &na);
    }
    in->slot = slot_of[k];
    if (i <= alast[k]) in->aslot = aslot_of[k];
    for (int q = 0; q < 2; q++) { /* the pair named, and the one whose output a local forward takes */
      int x = q ? kp : k;
      if (x < 0 || (q && x == k)) continue;
      if (alast[x] == i) give(&fa, aslot_of[x], -INFINITY);
      if (last[x] == i) give(&fs, slot_of[x], -INFINITY);
    }
  }
  out->nslots[r] = ns, out->naslots[r] = na;
  free(first), free(last), free(alast), free(slot_of), free(aslot_of), free(fs.id), free(fa.id), free(fs.from);
  free(fa.from), free(lp);
}

void sched_append_tail(sched_program *out) {
  int S = out->p * out->v;
  int a = out->rank_of[0], b = out->rank_of[S - 1];
  for (int r = 0; r < out->p; r++) {
    sched_instr t = {.op = SCHED_REDUCE_TIED_GRADS, .mb = -1, .chunk = -1, .peer = -1, .slot = -1, .aslot = -1};
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
