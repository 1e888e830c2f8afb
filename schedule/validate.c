/* schedule/validate.c: where optimizer post-validation checks the previous step's update.
 *
 * Under post-validation a rank updates its parameters as soon as its own part of the step is
 * done, before the global gradient norm and overflow flag are known; the next step's VALIDATE
 * waits for them and, in the rare step where clipping or an overflow skip should have applied,
 * the update is redone and the step starts again from its first instruction. So what runs
 * before VALIDATE must be work a rank can throw away and do again: loads, forwards and the
 * activations they send and receive (nothing a backward or the step's tail has touched), and
 * every transfer in it must have its partner before the partner's VALIDATE too, so that when
 * all ranks start again no message of the first try is left in flight or missing.
 *
 * The prefix of rank r starts as its longest run of LOAD_MICROBATCH, FORWARD, SEND_ACT and
 * RECV_ACT from the stream's start; then, while some prefix holds a transfer whose partner lies
 * beyond the partner's prefix, that prefix is cut right before the transfer. Prefixes only
 * shrink, so this ends, and the result is the largest closed set of such starts. Rank 0 of
 * 1F1B keeps its warm-up forwards (up to the first activation the next rank takes after its own
 * VALIDATE): the work that overlaps the wait for the norm. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "schedule/internal.h"

static int prefix_op(int op) {
  return op == SCHED_LOAD_MICROBATCH || op == SCHED_FORWARD || op == SCHED_SEND_ACT || op == SCHED_RECV_ACT;
}

/* Key of an activation transfer: the stage that receives it and the micro-batch. */
static size_t act_key(const sched_program *pr, int r, const sched_instr *in) {
  int s = sched_stage_at(pr, r, in) + (in->op == SCHED_SEND_ACT);
  return (size_t)s * (size_t)pr->m + (size_t)in->mb;
}

/* Positions of the activation SENDs and RECVs among each rank r's first lim[r] instructions, by
 * key (-1: none there). Only prefixes are asked about: a partner past its prefix is open either way. */
static void act_positions(const sched_program *pr, const int *lim, int *send_at, int *recv_at) {
  size_t n = (size_t)pr->p * pr->v * pr->m;
  for (size_t k = 0; k < n; k++) send_at[k] = recv_at[k] = -1;
  for (int r = 0; r < pr->p; r++)
    for (int i = 0; i < lim[r]; i++) {
      const sched_instr *in = &pr->streams[r].ins[i];
      if (in->op == SCHED_SEND_ACT) send_at[act_key(pr, r, in)] = i;
      else if (in->op == SCHED_RECV_ACT) recv_at[act_key(pr, r, in)] = i;
    }
}

/* The first transfer in rank r's first len[r] instructions whose partner is not within its
 * rank's len, or -1. */
static int open_transfer(const sched_program *pr, int r, const int *len, const int *send_at, const int *recv_at) {
  for (int i = 0; i < len[r]; i++) {
    const sched_instr *in = &pr->streams[r].ins[i];
    if (in->op != SCHED_SEND_ACT && in->op != SCHED_RECV_ACT) continue;
    size_t k = act_key(pr, r, in);
    int j = in->op == SCHED_SEND_ACT ? recv_at[k] : send_at[k];
    if (in->peer < 0 || in->peer >= pr->p || j < 0 || j >= len[in->peer]) return i;
  }
  return -1;
}

/* Each rank's validation prefix, len[r] instructions (the rule above). */
static void prefixes(const sched_program *pr, int *len) {
  size_t n = (size_t)pr->p * pr->v * pr->m;
  int *send_at = core_malloc(sizeof(int) * (n ? n : 1)), *recv_at = core_malloc(sizeof(int) * (n ? n : 1));
  for (int r = 0; r < pr->p; r++) {
    len[r] = 0;
    while (len[r] < pr->streams[r].len && prefix_op(pr->streams[r].ins[len[r]].op)) len[r]++;
  }
  act_positions(pr, len, send_at, recv_at); /* (prefixes only shrink from here) */
  for (int changed = 1; changed;) {
    changed = 0;
    for (int r = 0; r < pr->p; r++) {
      int i = open_transfer(pr, r, len, send_at, recv_at);
      if (i >= 0) len[r] = i, changed = 1;
    }
  }
  free(send_at), free(recv_at);
}

int sched_place_validate(sched_program *pr) {
  if (pr->forward_only) return CORE_OK;
  int *len = core_malloc(sizeof(int) * (size_t)pr->p);
  prefixes(pr, len);
  for (int r = 0; r < pr->p; r++) {
    sched_stream *st = &pr->streams[r];
    sched_instr v = {.op = SCHED_VALIDATE, .mb = -1, .chunk = -1, .peer = -1, .slot = -1, .aslot = -1};
    sched_push(pr, r, v); /* room for one more, then moved into place */
    memmove(&st->ins[len[r] + 1], &st->ins[len[r]], sizeof(sched_instr) * (size_t)(st->len - 1 - len[r]));
    st->ins[len[r]] = v;
  }
  free(len);
  return CORE_OK;
}

int sched_check_validate(const sched_program *pr, const int *at) {
  int rc = CORE_OK, any = 0;
  for (int r = 0; r < pr->p; r++) any |= at[r] >= 0;
  for (int r = 0; r < pr->p && !rc && any; r++) {
    if (at[r] < 0) {
      rc = sched_fail_at(pr, r, 0, "other ranks validate the previous update, this one has no VALIDATE");
      break;
    }
    for (int i = 0; i < at[r] && !rc; i++)
      if (!prefix_op(pr->streams[r].ins[i].op))
        rc = sched_fail_at(pr, r, i, "only loads, forwards and activation transfers may come before VALIDATE "
                                     "(the step may start again from its first instruction)");
  }
  if (!rc && any) {
    size_t n = (size_t)pr->p * pr->v * pr->m;
    int *send_at = core_malloc(sizeof(int) * (n ? n : 1)), *recv_at = core_malloc(sizeof(int) * (n ? n : 1));
    act_positions(pr, at, send_at, recv_at);
    for (int r = 0; r < pr->p && !rc; r++) {
      int i = open_transfer(pr, r, at, send_at, recv_at);
      if (i >= 0)
        rc = sched_fail_at(pr, r, i, "a transfer before VALIDATE whose partner comes after the partner's VALIDATE "
                                     "(a step that starts again would leave it in flight or missing)");
    }
    free(send_at), free(recv_at);
  }
  return rc;
}
