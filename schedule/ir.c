#include "schedule/ir.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

static const char *const op_names[SCHED_OP_COUNT] = {
    "LOAD_MICROBATCH", "FORWARD",  "BACKWARD",  "BACKWARD_INPUT",    "BACKWARD_WEIGHT",
    "SEND_ACT",        "RECV_ACT", "SEND_GRAD", "RECV_GRAD",         "REDUCE_TIED_GRADS",
    "REDUCE_GRADS",    "OPTIMIZER_STEP", "GATHER_PARAMS", "RELEASE_PARAMS", "OFFLOAD", "RELOAD",
    "VALIDATE",
};

static const char *const family_names[SCHED_FAMILY_COUNT] = {"gpipe", "1f1b", "interleaved",
                                                             "zb-h1", "zb-h2", "zb-v", "dualpipev", "zb-auto", "v-min", "v-half", "v-zb",
                                                             "inference", "custom"};

const char *sched_op_name(sched_op op) { return op < SCHED_OP_COUNT ? op_names[op] : "?"; }

char sched_op_letter(sched_op op) {
  switch (op) {
  case SCHED_FORWARD: return 'F';
  case SCHED_BACKWARD: return 'B';
  case SCHED_BACKWARD_INPUT: return 'I';
  case SCHED_BACKWARD_WEIGHT: return 'W';
  default: return 0;
  }
}

const char *sched_family_name(sched_family f) {
  return f < SCHED_FAMILY_COUNT ? family_names[f] : "?";
}

int sched_family_is_v(sched_family f) {
  return f == SCHED_ZB_V || f == SCHED_DUALPIPE_V || f == SCHED_V_MIN || f == SCHED_V_HALF || f == SCHED_V_ZB;
}

int sched_family_is_zb(sched_family f) {
  return f == SCHED_ZB_H1 || f == SCHED_ZB_H2 || f == SCHED_ZB_AUTO || f == SCHED_ZB_V || f == SCHED_V_MIN ||
         f == SCHED_V_HALF || f == SCHED_V_ZB;
}

int sched_family_parse(const char *name, sched_family *out) {
  for (int f = 0; f < SCHED_CUSTOM; f++)
    if (strcmp(name, family_names[f]) == 0) {
      *out = (sched_family)f;
      return CORE_OK;
    }
  return core_error_set(CORE_EINPUT, "unknown schedule '%s' (expected gpipe, 1f1b, interleaved, zb-h1, zb-h2, zb-auto, zb-v, v-zb, "
                        "v-half, v-min, dualpipev or inference)",
                        name);
}

int sched_program_init(sched_program *pr, sched_family f, int p, int v, int m, const int *stage_of) {
  memset(pr, 0, sizeof *pr);
  if (p < 1) return core_error_set(CORE_EINPUT, "pipeline stages must be >= 1 (got %d)", p);
  if (v < 1) return core_error_set(CORE_EINPUT, "virtual stages must be >= 1 (got %d)", v);
  if (m < 1) return core_error_set(CORE_EINPUT, "micro-batches must be >= 1 (got %d)", m);
  if ((long long)p * v > 1 << 20 || m > 1 << 24)
    return core_error_set(CORE_EINPUT, "pipeline shape too large (p*v=%lld, m=%d)",
                          (long long)p * v, m);
  int S = p * v;
  pr->family = f;
  pr->p = p, pr->v = v, pr->m = m;
  pr->stage_of = core_malloc(sizeof(int) * S);
  pr->rank_of = core_malloc(sizeof(int) * S);
  pr->chunk_of = core_malloc(sizeof(int) * S);
  pr->nslots = core_calloc(p, sizeof(int));
  pr->naslots = core_calloc(p, sizeof(int));
  pr->streams = core_calloc(p, sizeof(sched_stream));
  for (int s = 0; s < S; s++) pr->rank_of[s] = -1;
  for (int r = 0; r < p; r++)
    for (int c = 0; c < v; c++) {
      int s = stage_of ? stage_of[r * v + c] : c * p + r;
      if (s < 0 || s >= S || pr->rank_of[s] != -1) {
        sched_program_free(pr);
        return core_error_set(CORE_EINPUT, "invalid placement: virtual stage %d of rank %d chunk %d",
                              s, r, c);
      }
      pr->stage_of[r * v + c] = s;
      pr->rank_of[s] = r;
      pr->chunk_of[s] = c;
    }
  return CORE_OK;
}

void sched_program_free(sched_program *pr) {
  if (pr->streams)
    for (int r = 0; r < pr->p; r++) free(pr->streams[r].ins);
  free(pr->streams);
  free(pr->stage_of);
  free(pr->rank_of);
  free(pr->chunk_of);
  free(pr->nslots);
  free(pr->naslots);
  memset(pr, 0, sizeof *pr);
}

void sched_reserve(sched_program *pr, int rank, size_t n) {
  CORE_ASSERT(rank >= 0 && rank < pr->p && n <= INT_MAX);
  sched_stream *st = &pr->streams[rank];
  if ((size_t)st->cap >= n) return;
  st->ins = core_realloc(st->ins, sizeof(sched_instr) * n);
  st->cap = (int)n;
}

void sched_push_grow(sched_program *pr, int rank) {
  CORE_ASSERT(rank >= 0 && rank < pr->p);
  sched_stream *st = &pr->streams[rank];
  if (st->len < st->cap) return;
  CORE_ASSERT(st->cap <= INT_MAX / 2); /* sched_size_check keeps programs far below */
  st->cap = st->cap ? 2 * st->cap : 64;
  st->ins = core_realloc(st->ins, sizeof(sched_instr) * (size_t)st->cap);
}

void sched_push_action(sched_program *pr, sched_op op, int s, int mb) {
  CORE_ASSERT(s >= 0 && s < pr->p * pr->v);
  sched_instr in = {.op = (uint8_t)op, .mb = mb, .chunk = pr->chunk_of[s], .peer = -1, .slot = -1, .aslot = -1};
  sched_push(pr, pr->rank_of[s], in);
}

int sched_program_equal(const sched_program *a, const sched_program *b) {
  if (a->p != b->p || a->v != b->v || a->m != b->m || a->tied != b->tied ||
      a->forward_only != b->forward_only || a->gather_limit != b->gather_limit)
    return 0;
  if (memcmp(a->stage_of, b->stage_of, sizeof(int) * (size_t)(a->p * a->v)) != 0) return 0;
  for (int r = 0; r < a->p; r++) {
    const sched_stream *x = &a->streams[r], *y = &b->streams[r];
    if (x->len != y->len || a->nslots[r] != b->nslots[r] || a->naslots[r] != b->naslots[r]) return 0;
    for (int i = 0; i < x->len; i++) {
      const sched_instr *u = &x->ins[i], *w = &y->ins[i];
      if (u->op != w->op || u->mb != w->mb || u->chunk != w->chunk || u->peer != w->peer ||
          u->slot != w->slot || u->aslot != w->aslot)
        return 0;
    }
  }
  return 1;
}

size_t sched_program_count(const sched_program *pr) {
  size_t n = 0;
  for (int r = 0; r < pr->p; r++) n += (size_t)pr->streams[r].len;
  return n;
}

int sched_program_splits_backward(const sched_program *pr) {
  for (int r = 0; r < pr->p; r++)
    for (int i = 0; i < pr->streams[r].len; i++)
      if (pr->streams[r].ins[i].op == SCHED_BACKWARD_WEIGHT) return 1;
  return 0;
}

int sched_nstages(const sched_program *pr) { return pr->p * pr->v; }

void sched_local_chunks(const sched_program *pr, int r, int *lp) {
  for (int c = 0; c < pr->v; c++) {
    int s = pr->stage_of[r * pr->v + c];
    lp[c] = s > 0 && pr->rank_of[s - 1] == r ? pr->chunk_of[s - 1] : -1;
  }
}

void sched_pair_ranges(const sched_program *pr, int r, int *first, int *last, int *alast) {
  const sched_stream *st = &pr->streams[r];
  const unsigned v = (unsigned)pr->v, m = (unsigned)pr->m;
  int *lp = core_malloc(sizeof(int) * v); /* sched_local_input's pair, by chunk */
  sched_local_chunks(pr, r, lp);
  for (size_t k = 0; k < (size_t)v * m; k++) first[k] = last[k] = alast[k] = -1;
  for (int i = 0; i < st->len; i++) {
    const sched_instr *in = &st->ins[i];
    unsigned c = (unsigned)in->chunk, mb = (unsigned)in->mb; /* a negative one is out of range too */
    if (c >= v || mb >= m) continue;
    int k = (int)(c * m + mb), op = in->op, kp = sched_local_pair(lp, (int)m, in);
    if (first[k] < 0) first[k] = i;
    last[k] = i;
    if (op != SCHED_BACKWARD_WEIGHT && op != SCHED_OFFLOAD && op != SCHED_RELOAD) alast[k] = i;
    if (kp >= 0 && first[kp] >= 0) last[kp] = alast[kp] = i; /* a later op of the pair raises them again */
  }
  free(lp);
}

void sched_action_str(const sched_program *pr, int rank, const sched_instr *in, char *buf,
                      size_t n) {
  char l = sched_op_letter((sched_op)in->op);
  if (l && in->chunk >= 0 && in->chunk < pr->v)
    snprintf(buf, n, "%d%c%d", pr->stage_of[rank * pr->v + in->chunk], l, in->mb);
  else
    sched_instr_str(in, buf, n);
}

void sched_instr_str(const sched_instr *in, char *buf, size_t n) {
  int k = snprintf(buf, n, "%s", sched_op_name((sched_op)in->op));
  if (in->mb >= 0 && k >= 0 && (size_t)k < n) k += snprintf(buf + k, n - (size_t)k, " mb=%d", in->mb);
  if (in->chunk >= 0 && k >= 0 && (size_t)k < n)
    k += snprintf(buf + k, n - (size_t)k, " chunk=%d", in->chunk);
  if (in->peer >= 0 && k >= 0 && (size_t)k < n)
    k += snprintf(buf + k, n - (size_t)k, " peer=%d", in->peer);
  if (in->slot >= 0 && k >= 0 && (size_t)k < n)
    k += snprintf(buf + k, n - (size_t)k, " slot=%d", in->slot);
  if (in->aslot >= 0 && k >= 0 && (size_t)k < n)
    snprintf(buf + k, n - (size_t)k, " aslot=%d", in->aslot);
}
