/* pipe/runner.c: what LOAD, F, B, I, W, REDUCE_TIED_GRADS, the ZeRO-3 gathers and the offload
 * copies do to the chunks of one rank, and the worker's hooks (pipe_runner_exec); REDUCE_GRADS
 * and OPTIMIZER_STEP are pipe/update.c's. */
#include "pipe/runner.h"
#include "pipe/runner_internal.h"

#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/watch.h"

static int stage_at(const pipe_runner *rn, int chunk) {
  return rn->pr->stage_of[rn->topo->stage * rn->pr->v + chunk];
}

void pipe_runner_use(pipe_runner *rn, const sched_program *pr, long mb0) {
  rn->pr = pr;
  rn->m = pr->m;
  rn->mb0 = mb0;
  size_t keys = (size_t)pr->v * (size_t)pr->m;
  if (keys > rn->pcap) {
    rn->pfirst = core_realloc(rn->pfirst, sizeof(int) * keys);
    rn->plast = core_realloc(rn->plast, sizeof(int) * keys);
    rn->palast = core_realloc(rn->palast, sizeof(int) * keys);
    rn->pcap = keys;
  }
  sched_pair_ranges(pr, rn->topo->stage, rn->pfirst, rn->plast, rn->palast);
  if (!rn->act_pr) rn->act_pr = pr;
  rn->act_live = 0;
}

int pipe_host_memory(const kernels_ops *ops) { return !ops || !ops->device_memory; }

static int load(pipe_runner *rn, const sched_instr *in) {
  layers_chunk *ch = &rn->chunks[in->chunk];
  size_t N = (size_t)ch->B * ch->T;
  if (!rn->htok) rn->htok = core_malloc(sizeof(int32_t) * N), rn->htgt = core_malloc(sizeof(int32_t) * N);
  /* micro-batch j of this replica is micro-batch mb0 + j of the step's global batch (training:
   * r*m + j on data rank r), so a run with d replicas draws the same samples as one process with
   * all the global micro-batches */
  pipe_data_batch(rn->data, rn->split, rn->seed, rn->step, 0, rn->mb0 + in->mb, ch->B, ch->T,
                  rn->htok, rn->htgt);
  layers_chunk_set_batch(ch, in->slot, rn->htok, rn->htgt);
  return CORE_OK;
}

/* When the neighbouring stage sits on this rank (several chunks per rank), its output is copied
 * over instead of sent, by the forward that takes it (the producer's I, which gives its aside
 * part back, comes later); an input gradient by the I that makes it, into the slot of the
 * previous stage's pair (live since its forward), since the producer may give its aside part
 * back before the consumer's I runs. */
static void local_handoff(pipe_runner *rn, const sched_instr *in, int forward) {
  const sched_program *pr = rn->pr;
  int s = stage_at(rn, in->chunk), nb = s - 1;
  if (nb < 0 || pr->rank_of[nb] != rn->topo->stage) return;
  int c = pr->chunk_of[nb], other = rn->slot_of[c * rn->m + in->mb];
  layers_chunk *nbc = &rn->chunks[c], *me = &rn->chunks[in->chunk];
  if (forward)
    me->ops->copy(layers_chunk_input(me, in->slot), layers_chunk_output(nbc, other), layers_chunk_io_floats(me));
  else
    me->ops->copy(layers_chunk_grad_output(nbc, other), layers_chunk_grad_input(me, in->slot), layers_chunk_io_floats(me));
}

/* The last stage's per-position losses of a forward. In host memory they are summed at once; in
 * device memory they are copied aside (an op, no wait) and read back once, at
 * pipe_runner_loss_sum, so the host does not wait for the device in the middle of a step. Both
 * sum each micro-batch's losses in order and the micro-batches in forward order: the same bits. */
static int add_losses(pipe_runner *rn, layers_chunk *ch, int slot) {
  if (pipe_host_memory(ch->ops)) {
    rn->loss_sum += layers_chunk_loss_sum(ch, slot);
    return CORE_OK;
  }
  size_t bt = (size_t)ch->B * ch->T;
  if (rn->nloss == rn->loss_cap) { /* grow, keeping the pending ones */
    int cap = rn->loss_cap ? 2 * rn->loss_cap : (rn->m > 0 ? rn->m : 1);
    float *d = ch->ops->alloc(sizeof(float) * bt * (size_t)cap);
    if (!d) return core_error_set(CORE_ERUNTIME, "backend %s: out of memory for %d micro-batches' losses", ch->ops->name, cap);
    if (rn->nloss) ch->ops->copy(d, rn->dloss, bt * (size_t)rn->nloss);
    ch->ops->free(rn->dloss);
    rn->dloss = d, rn->loss_cap = cap;
    rn->hloss = core_realloc(rn->hloss, sizeof(float) * bt * (size_t)cap);
  }
  ch->ops->copy(rn->dloss + bt * (size_t)rn->nloss++, layers_chunk_output(ch, slot), bt);
  rn->loss_ops = ch->ops, rn->loss_bt = bt;
  return CORE_OK;
}

double pipe_runner_loss_sum(pipe_runner *rn) {
  if (rn->nloss) {
    rn->loss_ops->to_host(rn->hloss, rn->dloss, sizeof(float) * rn->loss_bt * (size_t)rn->nloss);
    for (int k = 0; k < rn->nloss; k++) {
      const float *l = rn->hloss + rn->loss_bt * (size_t)k;
      double s = 0;
      for (size_t i = 0; i < rn->loss_bt; i++) s += l[i];
      rn->loss_sum += s;
    }
    rn->nloss = 0;
  }
  return rn->loss_sum;
}

static int gathered(pipe_runner *rn, int c);

static int compute(pipe_runner *rn, const sched_instr *in) {
  layers_chunk *ch = &rn->chunks[in->chunk];
  int rc = gathered(rn, in->chunk); /* ZeRO-3: its parameters have landed */
  if (rc) return rc;
  switch (in->op) {
  case SCHED_FORWARD:
    local_handoff(rn, in, 1);
    layers_chunk_forward(ch, in->slot);
    if (ch->last_is_loss) return add_losses(rn, ch, in->slot);
    return CORE_OK;
  case SCHED_BACKWARD:
  case SCHED_BACKWARD_INPUT:
    layers_chunk_backward_input(ch, in->slot, rn->grad_scale);
    local_handoff(rn, in, 0);
    if (in->op == SCHED_BACKWARD) {
      layers_chunk_backward_weight(ch, in->slot);
      return zero_after_backward(&rn->zb[in->chunk]); /* ZeRO-2: this micro-batch's share */
    }
    return CORE_OK;
  default:
    layers_chunk_backward_weight(ch, in->slot);
    return zero_after_backward(&rn->zb[in->chunk]);
  }
}

/* Test hook: BRIGADE_INJECT_STOP=STEP:RANK stops that rank (SIGSTOP: alive, answering nothing)
 * right before its tied-gradient exchange at that step (1-based), so tests can check that its peer
 * ends the job after train.timeout. */
static void inject_stop(const pipe_runner *rn) {
  const char *e = getenv("BRIGADE_INJECT_STOP");
  long step;
  int rank;
  if (e && sscanf(e, "%ld:%d", &step, &rank) == 2 && step == rn->step + 1 && rank == rn->topo->world_rank) raise(SIGSTOP);
}

/* The embedding's wte and the tied head's copy get the same summed gradient. a + b == b + a in
 * IEEE arithmetic, so both copies end bit-identical, on one rank or two. */
static int reduce_tied(pipe_runner *rn, const sched_instr *in) {
  if (!rn->head_tied) return CORE_OK;
  layers_chunk *e = rn->tied_emb_chunk >= 0 ? &rn->chunks[rn->tied_emb_chunk] : NULL;
  layers_chunk *h = rn->tied_head_chunk >= 0 ? &rn->chunks[rn->tied_head_chunk] : NULL;
  layer *hl = h ? &h->layers[rn->tied_head_layer] : NULL;
  size_t n = e ? (size_t)e->layers[0].V * e->layers[0].C : (size_t)hl->V * hl->C;
  float *mine = e ? e->layers[0].grads : hl->grads;
  const kernels_ops *ops = (e ? e : h)->ops;
  if (in->peer < 0 && e == h && h->tied_head >= 0) { /* one copy of wte: its gradient gets the head's */
    layers_chunk_fold_tied(h, mine);
    return CORE_OK;
  }
  if (in->peer < 0) { /* both on this rank: mine + 1 * head is one rounding, as mine + head */
    ops->axpy(mine, 1.0f, hl->grads, n);
    ops->copy(hl->grads, mine, n);
    return CORE_OK;
  }
  if (n > INT_MAX)
    return core_error_set(CORE_ERUNTIME, "the tied weight's %zu gradients are more than an MPI count holds (2^31 - 1)", n);
  float *host = core_malloc(sizeof(float) * n), *other = core_malloc(sizeof(float) * n);
  ops->to_host(host, mine, sizeof(float) * n);
  /* the tag right after the transfers' (pipe_tag of micro-batch m): within the bound the worker
   * checked, and apart from every transfer's */
  int tag = pipe_tag(rn->pr, 0, rn->pr->m, 0);
  inject_stop(rn);
  char what[96]; /* bounded by train.timeout, as the step's other waits: a peer that stops answering hung it */
  snprintf(what, sizeof what, "the tied weight's gradient exchange with pipeline rank %d", in->peer);
  core_watch_begin(what);
  int err = MPI_Sendrecv(host, (int)n, MPI_FLOAT, in->peer, tag, other, (int)n, MPI_FLOAT, in->peer, tag,
                         rn->topo->pipe, MPI_STATUS_IGNORE);
  core_watch_end();
  for (size_t i = 0; i < n; i++) host[i] += other[i];
  ops->to_device(mine, host, sizeof(float) * n);
  free(host), free(other);
  return err == MPI_SUCCESS ? CORE_OK : core_error_set(CORE_ERUNTIME, "tied-gradient exchange failed");
}

int pipe_runner_init_master(pipe_runner *rn) {
  if (!rn->precision && !rn->offload) return CORE_OK;
  rn->master = core_calloc((size_t)rn->v, sizeof(float *));
  if (rn->offload) rn->hgrad = core_calloc((size_t)rn->v, sizeof(float *));
  for (int c = 0; c < rn->v; c++) {
    const kernels_ops *ops = rn->chunks[c].ops, *mem = rn->offload ? rn->opt_ops : ops;
    size_t lo, hi;
    zero_range(&rn->zb[c], &lo, &hi);
    rn->master[c] = mem->alloc(sizeof(float) * (hi - lo + 1));
    if (rn->offload) rn->hgrad[c] = core_calloc(hi - lo + 1, sizeof(float));
    if (!rn->master[c])
      return core_error_set(CORE_ERUNTIME, "backend %s: out of memory for %zu master weights", mem->name, hi - lo);
    if (rn->offload) ops->to_host(rn->master[c], zero_param_shard(&rn->zb[c]), sizeof(float) * (hi - lo));
    else ops->copy(rn->master[c], zero_param_shard(&rn->zb[c]), hi - lo);
    if (!rn->precision) continue;
    if (rn->zb[c].stage == 3) runner_round_to(rn, ops, zero_param_shard(&rn->zb[c]), hi - lo); /* the only copy */
    else runner_round_to(rn, ops, rn->chunks[c].params, rn->chunks[c].nparams);
  }
  return CORE_OK;
}

void pipe_runner_free(pipe_runner *rn) {
  if (rn->dloss) rn->loss_ops->free(rn->dloss);
  free(rn->hloss);
  rn->dloss = rn->hloss = NULL, rn->nloss = rn->loss_cap = 0;
  for (int k = 0; k < 4 * rn->nstage; k++)
    if (rn->stage_pinned[k]) rn->stage_ops->host_free(rn->stage[k]);
    else free(rn->stage[k]);
  free(rn->stage), free(rn->stage_pinned), free(rn->htok), free(rn->htgt);
  rn->stage = NULL, rn->stage_pinned = NULL, rn->htok = rn->htgt = NULL, rn->nstage = 0;
  free(rn->pfirst), free(rn->plast), free(rn->palast);
  rn->pfirst = rn->plast = rn->palast = NULL, rn->pcap = 0;
  for (size_t k = 0; rn->off_host && k < (size_t)rn->v * rn->m; k++) rn->off_ops->host_free(rn->off_host[k]);
  for (int c = 0; c < rn->v && rn->slot_wait; c++) free(rn->slot_wait[c]), free(rn->aside_wait[c]);
  free(rn->off_host), free(rn->off_aside), free(rn->off_wait), free(rn->slot_wait), free(rn->aside_wait);
  rn->off_host = NULL, rn->off_aside = NULL, rn->off_wait = NULL, rn->slot_wait = rn->aside_wait = NULL;
  for (int c = 0; c < rn->v && rn->pv_save; c++) rn->pv_ops->free(rn->pv_save[c]);
  free(rn->pv_save);
  rn->pv_save = NULL;
  for (int c = 0; c < rn->v && rn->pv_m; c++)
    rn->pv_pops->free(rn->pv_p[c]), rn->pv_ops->free(rn->pv_m[c]), rn->pv_ops->free(rn->pv_v[c]);
  free(rn->pv_p), free(rn->pv_m), free(rn->pv_v);
  rn->pv_p = rn->pv_m = rn->pv_v = NULL;
  for (int c = 0; c < rn->v && rn->hgrad; c++) free(rn->hgrad[c]);
  free(rn->hgrad);
  rn->hgrad = NULL;
  for (int c = 0; c < rn->v && rn->druns; c++) free(rn->druns[c]);
  free(rn->druns), free(rn->ndruns);
  rn->druns = NULL, rn->ndruns = NULL;
  /* a gather still in flight (a step that failed; the job is ending) keeps its buffer: waiting
   * could hang on a replica that is gone, and MPI forbids freeing a collective's request */
  for (int k = 0; k < rn->ngbuf; k++)
    if (rn->gbuf_req[k] == MPI_REQUEST_NULL) rn->gbuf_ops->free(rn->gbuf[k]);
  free(rn->gbuf), free(rn->gbuf_chunk), free(rn->gbuf_of), free(rn->gbuf_req);
  rn->gbuf = NULL, rn->gbuf_chunk = rn->gbuf_of = NULL, rn->ngbuf = 0;
}


int pipe_runner_gather_pool(pipe_runner *rn, int limit) {
  const kernels_ops *ops = rn->gbuf_ops = rn->chunks[0].ops;
  rn->gbuf_floats = 1;
  for (int c = 0; c < rn->v; c++)
    if (rn->chunks[c].nparams > rn->gbuf_floats) rn->gbuf_floats = rn->chunks[c].nparams;
  rn->ngbuf = limit;
  rn->gbuf = core_calloc((size_t)limit, sizeof(float *));
  rn->gbuf_chunk = core_malloc(sizeof(int) * (size_t)limit);
  rn->gbuf_req = core_malloc(sizeof(MPI_Request) * (size_t)limit);
  rn->gbuf_of = core_malloc(sizeof(int) * (size_t)rn->v);
  for (int c = 0; c < rn->v; c++) rn->gbuf_of[c] = -1;
  for (int k = 0; k < limit; k++) {
    rn->gbuf_chunk[k] = -1, rn->gbuf_req[k] = MPI_REQUEST_NULL;
    if (!(rn->gbuf[k] = ops->alloc(sizeof(float) * rn->gbuf_floats)))
      return core_error_set(CORE_ERUNTIME, "backend %s: out of memory for %d gather buffers of %zu parameters",
                            ops->name, limit, rn->gbuf_floats);
  }
  return CORE_OK;
}

/* GATHER_PARAMS: a free gather buffer, the chunk's parameters all-gathered into it (on host
 * memory left in flight, as the simulator's communication lane runs it beside compute: the
 * chunk's next op waits for it, gathered()), the layers bound to it; RELEASE_PARAMS gives it
 * back. */
static int gathered(pipe_runner *rn, int c) {
  int k = rn->ngbuf ? rn->gbuf_of[c] : -1;
  if (k < 0 || rn->gbuf_req[k] == MPI_REQUEST_NULL) return CORE_OK;
  core_watch_begin("the parameters' all-gather (ZeRO-3)");
  int ok = MPI_Wait(&rn->gbuf_req[k], MPI_STATUS_IGNORE) == MPI_SUCCESS;
  core_watch_end();
  return ok ? CORE_OK : core_error_set(CORE_ERUNTIME, "parameter all-gather (ZeRO-3) of chunk %d failed", c);
}

static int gather(pipe_runner *rn, const sched_instr *in) {
  int c = in->chunk, k = 0;
  if (!rn->ngbuf) return core_error_set(CORE_ERUNTIME, "a parameter gather, but the run is not ZeRO-3");
  if (rn->gbuf_of[c] >= 0) return core_error_set(CORE_ERUNTIME, "chunk %d is gathered already", c);
  while (k < rn->ngbuf && rn->gbuf_chunk[k] >= 0) k++;
  if (k == rn->ngbuf) return core_error_set(CORE_ERUNTIME, "all %d gather buffers are in use", rn->ngbuf);
  int rc = zero_gather_params(&rn->zb[c], rn->gbuf[k], &rn->gbuf_req[k]);
  if (rc) return rc;
  rn->gbuf_chunk[k] = c, rn->gbuf_of[c] = k;
  layers_chunk_bind_params(&rn->chunks[c], rn->gbuf[k]);
  rn->param_live += sizeof(float) * (double)rn->chunks[c].nparams;
  if (rn->param_live > rn->param_peak) rn->param_peak = rn->param_live;
  return CORE_OK;
}

static int release(pipe_runner *rn, const sched_instr *in) {
  int c = in->chunk, k = rn->ngbuf ? rn->gbuf_of[c] : -1;
  if (k < 0) return core_error_set(CORE_ERUNTIME, "chunk %d is released but not gathered", c);
  int rc = gathered(rn, c); /* never give a buffer back with a gather still landing in it */
  if (rc) return rc;
  rn->gbuf_chunk[k] = -1, rn->gbuf_of[c] = -1;
  layers_chunk_bind_params(&rn->chunks[c], NULL);
  rn->param_live -= sizeof(float) * (double)rn->chunks[c].nparams;
  return CORE_OK;
}

int pipe_runner_join_gathers(pipe_runner *rn) {
  int done[rn->v];
  memset(done, 0, sizeof done);
  for (int k = 0; k < rn->v; k++) {
    int c = -1;
    for (int q = 0; q < rn->v; q++)
      if (!done[q] && (c < 0 || stage_at(rn, q) < stage_at(rn, c))) c = q;
    done[c] = 1;
    sched_instr in = {.op = SCHED_GATHER_PARAMS, .mb = -1, .chunk = c, .peer = -1, .slot = -1, .aslot = -1};
    int rc = gather(rn, &in);
    if (!rc) rc = release(rn, &in);
    if (rc) return rc;
  }
  return CORE_OK;
}

/* OFFLOAD / RELOAD: a pair's home part, its aside part while it has one, its token ids and
 * targets go to a host buffer of its own (the table's host_alloc: page-locked on a GPU) on the
 * table's device-to-host copy stream (ticket 2k), and come back on the host-to-device stream
 * (ticket 2k + 1) into the buffers the RELOAD names, which lowering may have given to other
 * micro-batches in between. Nothing waits on the host: the first later use of a buffer a copy
 * reads from waits for that copy on the ops' queue (copy_wait, from pair_at), and the pair's own
 * next instruction waits for its reload. With offload_poison (fakedev, or BRIGADE_OFFLOAD_POISON=1)
 * the parts are filled with NaN once their copy is out, so a use while away shows in the
 * results. act_live counts the pair out of device memory in between. (The trainer compiles no
 * copies for the CPU backend, where they would only move host memory.) */
static int copy_pair(pipe_runner *rn, const sched_instr *in) {
  layers_chunk *ch = &rn->chunks[in->chunk];
  const kernels_ops *ops = ch->ops;
  int k = in->chunk * rn->m + in->mb;
  if (!rn->off_host) {
    size_t km = (size_t)rn->v * rn->m;
    rn->off_host = core_calloc(km, sizeof(float *));
    rn->off_aside = core_calloc(km, 1);
    rn->off_wait = core_malloc(sizeof(int) * km);
    for (size_t q = 0; q < km; q++) rn->off_wait[q] = -1;
    rn->off_ops = ops;
    rn->last_copy = -1;
    const char *e = getenv("BRIGADE_OFFLOAD_POISON");
    rn->offload_poison = strcmp(ops->name, "fakedev") == 0 || (e && strcmp(e, "1") == 0);
    rn->slot_wait = core_calloc((size_t)rn->v, sizeof(int *));
    rn->aside_wait = core_calloc((size_t)rn->v, sizeof(int *));
    for (int c = 0; c < rn->v; c++) {
      int ns = rn->chunks[c].nslots, na = rn->chunks[c].naside;
      rn->slot_wait[c] = core_malloc(sizeof(int) * (size_t)(ns > 0 ? ns : 1));
      rn->aside_wait[c] = core_malloc(sizeof(int) * (size_t)(na > 0 ? na : 1));
      for (int q = 0; q < ns; q++) rn->slot_wait[c][q] = -1;
      for (int q = 0; q < na; q++) rn->aside_wait[c][q] = -1;
    }
  }
  if (rn->copy_clocked) ops->copy_group(rn->ncopy++); /* a traced step: this instruction's copies, timed */
  float *home = ch->slots + (size_t)in->slot * ch->home_floats;
  size_t bt = (size_t)ch->B * ch->T, ids = ch->home_floats + ch->aside_floats; /* ids after the parts */
  int32_t *tok = ch->tokens + (size_t)in->slot * bt, *tgt = ch->targets + (size_t)in->slot * bt;
  double sb = (double)layers_chunk_slot_bytes(ch), ab = (double)layers_chunk_aside_bytes(ch);
  if (in->op == SCHED_OFFLOAD) {
    int b = ch->bound[in->slot], t = 2 * k;
    float *aside = b >= 0 ? ch->aside + (size_t)b * ch->aside_floats : NULL;
    if (!rn->off_host[k] && !(rn->off_host[k] = ops->host_alloc(sizeof(float) * (ids + 2 * bt + 1))))
      return core_error_set(CORE_ERUNTIME, "backend %s: out of host memory for an offloaded micro-batch (%zu bytes)",
                            ops->name, sizeof(float) * (ids + 2 * bt + 1));
    float *h = rn->off_host[k];
    ops->copy_out(h + ids, tok, sizeof(int32_t) * bt, t); /* the slot may serve another micro-batch */
    ops->copy_out(h + ids + bt, tgt, sizeof(int32_t) * bt, t);
    ops->copy_out(h, home, sizeof(float) * ch->home_floats, t);
    if (aside) ops->copy_out(h + ch->home_floats, aside, sizeof(float) * ch->aside_floats, t);
    rn->off_aside[k] = aside != NULL;
    rn->slot_wait[in->chunk][in->slot] = t; /* the next user of these buffers waits for the copy */
    rn->last_copy = t;
    if (aside) rn->aside_wait[in->chunk][b] = t;
    if (rn->offload_poison) {
      ops->copy_wait(t);
      ops->fill(home, NAN, ch->home_floats);
      if (aside) ops->fill(aside, NAN, ch->aside_floats);
    }
    rn->act_live -= aside ? sb : sb - ab; /* as the pair was counted in (retired) */
    return CORE_OK;
  }
  if (!rn->off_host[k])
    return core_error_set(CORE_ERUNTIME, "RELOAD of chunk %d micro-batch %d, which was never offloaded", in->chunk, in->mb);
  int b = ch->bound[in->slot], t = 2 * k + 1;
  if (rn->off_aside[k] && b < 0)
    return core_error_set(CORE_ERUNTIME, "RELOAD of chunk %d micro-batch %d: its slot has no aside part to fill",
                          in->chunk, in->mb);
  float *h = rn->off_host[k];
  ops->copy_in(home, h, sizeof(float) * ch->home_floats, t, 2 * k);
  ops->copy_in(tok, h + ids, sizeof(int32_t) * bt, t, 2 * k);
  ops->copy_in(tgt, h + ids + bt, sizeof(int32_t) * bt, t, 2 * k);
  if (rn->off_aside[k]) ops->copy_in(ch->aside + (size_t)b * ch->aside_floats, h + ch->home_floats,
                                     sizeof(float) * ch->aside_floats, t, 2 * k);
  rn->off_wait[k] = t; /* the pair's next instruction waits for it */
  rn->last_copy = t;
  rn->act_live += rn->off_aside[k] ? sb : sb - ab;
  if (rn->pr == rn->act_pr && rn->act_live > rn->act_peak) rn->act_peak = rn->act_live;
  return CORE_OK;
}

/* The pair an instruction names: its slot, and the aside part the slot uses while it has one. */
static void pair_at(pipe_runner *rn, const sched_instr *in) {
  if (in->chunk < 0 || in->mb < 0) return;
  int k = in->chunk * rn->m + in->mb;
  rn->slot_of[k] = in->slot;
  if (in->aslot >= 0) layers_chunk_bind(&rn->chunks[in->chunk], in->slot, in->aslot);
  if (!rn->off_host) return;
  /* activation offload: buffers a copy still reads, and a pair on its way back, are waited for
   * on the ops' queue before anything else touches them (an offload's own buffers: its copy
   * waits for the ops before it) */
  const kernels_ops *ops = rn->off_ops;
  int *sw = &rn->slot_wait[in->chunk][in->slot];
  if (*sw >= 0 && in->op != SCHED_OFFLOAD) ops->copy_wait(*sw), *sw = -1;
  int b = rn->chunks[in->chunk].bound[in->slot];
  if (b >= 0 && rn->aside_wait[in->chunk][b] >= 0 && in->op != SCHED_OFFLOAD)
    ops->copy_wait(rn->aside_wait[in->chunk][b]), rn->aside_wait[in->chunk][b] = -1;
  /* a pair on its way back: the training program's alone (off_wait is indexed by its micro-batches;
   * an evaluation has no copies, and every reload of a step is waited for within it) */
  if (rn->pr == rn->act_pr && rn->off_wait[k] >= 0 && in->op != SCHED_RELOAD)
    ops->copy_wait(rn->off_wait[k]), rn->off_wait[k] = -1;
  /* and the pair a local backward hands its gradient to (local_handoff writes into its buffers) */
  int kg = rn->pr == rn->act_pr ? sched_local_grad(rn->pr, rn->topo->stage, in) : -1;
  if (kg >= 0 && rn->off_wait[kg] >= 0) ops->copy_wait(rn->off_wait[kg]), rn->off_wait[kg] = -1;
}

/* After instruction i: the pair's memory comes into use at its first instruction; its aside part
 * goes back after its last instruction but a W, its slot after its last. */
static void retired(void *ctx, int i, const sched_instr *in) {
  pipe_runner *rn = ctx;
  if (in->chunk < 0 || in->mb < 0) return;
  int k = in->chunk * rn->m + in->mb, kp = sched_local_input(rn->pr, rn->topo->stage, in);
  if (rn->pfirst[k] == i) rn->act_live += (double)layers_chunk_slot_bytes(&rn->chunks[in->chunk]);
  if (rn->pr == rn->act_pr && rn->act_live > rn->act_peak) rn->act_peak = rn->act_live;
  for (int q = 0; q < 2; q++) { /* the pair named, and the one whose output a local forward took */
    int x = q ? kp : k, c = x / rn->m;
    if (x < 0 || (q && x == k)) continue;
    layers_chunk *ch = &rn->chunks[c];
    double aside = (double)layers_chunk_aside_bytes(ch), home = (double)layers_chunk_slot_bytes(ch) - aside;
    if (rn->palast[x] == i) rn->act_live -= aside, layers_chunk_bind(ch, rn->slot_of[x], -1);
    if (rn->plast[x] == i) rn->act_live -= home;
  }
}

/* The offload copies a device table feeds in pieces move on (between instructions, and while the
 * worker waits for a transfer). */
static void idle(void *ctx) {
  pipe_runner *rn = ctx;
  if (rn->off_ops && rn->off_ops->copy_pump) rn->off_ops->copy_pump();
}

static int run(void *ctx, const sched_instr *in) {
  pipe_runner *rn = ctx;
  idle(rn);
  pair_at(rn, in);
  switch (in->op) {
  case SCHED_LOAD_MICROBATCH: return load(rn, in);
  case SCHED_FORWARD:
  case SCHED_BACKWARD:
  case SCHED_BACKWARD_INPUT:
  case SCHED_BACKWARD_WEIGHT: return compute(rn, in);
  case SCHED_REDUCE_TIED_GRADS: return reduce_tied(rn, in);
  case SCHED_REDUCE_GRADS: return runner_reduce_grads(rn);
  case SCHED_OPTIMIZER_STEP: return runner_optimizer_step(rn);
  case SCHED_GATHER_PARAMS: return gather(rn, in);
  case SCHED_RELEASE_PARAMS: return release(rn, in);
  case SCHED_OFFLOAD:
  case SCHED_RELOAD: return copy_pair(rn, in);
  default: return core_error_set(CORE_ERUNTIME, "the runner cannot execute %s", sched_op_name((sched_op)in->op));
  }
}

/* The chunk's buffer a transfer reads or fills, and its length. */
static float *chunk_buffer(pipe_runner *rn, const sched_instr *in, size_t *n) {
  layers_chunk *ch = &rn->chunks[in->chunk];
  switch (in->op) {
  case SCHED_SEND_ACT: *n = layers_chunk_out_floats(ch); return layers_chunk_output(ch, in->slot);
  case SCHED_RECV_ACT: *n = layers_chunk_io_floats(ch); return layers_chunk_input(ch, in->slot);
  case SCHED_SEND_GRAD: *n = layers_chunk_io_floats(ch); return layers_chunk_grad_input(ch, in->slot);
  default: *n = layers_chunk_out_floats(ch); return layers_chunk_grad_output(ch, in->slot);
  }
}

/* Device backends: a host buffer per (slot, transfer kind), as large as any chunk's, from the
 * table's host_alloc (page-locked on a GPU: a transfer's copy is then one DMA, not the driver's
 * pieces through its own buffers; malloc when that fails). It still shares the copy engine with
 * an activation offload's copy in the same direction, and waits for it (docs/benchmarks.md). */
static float *staging(pipe_runner *rn, const sched_instr *in) {
  if (!rn->stage) {
    for (int c = 0; c < rn->v; c++) {
      size_t a = layers_chunk_io_floats(&rn->chunks[c]), b = layers_chunk_out_floats(&rn->chunks[c]);
      if (a > rn->stage_floats) rn->stage_floats = a;
      if (b > rn->stage_floats) rn->stage_floats = b;
      if (rn->chunks[c].naside > rn->nstage) rn->nstage = rn->chunks[c].naside;
    }
    rn->stage = core_calloc((size_t)rn->nstage * 4, sizeof(float *));
    rn->stage_pinned = core_calloc((size_t)rn->nstage * 4, 1);
    rn->stage_ops = rn->chunks[in->chunk].ops;
  }
  size_t k = (size_t)in->aslot * 4 + (size_t)(in->op - SCHED_SEND_ACT);
  if (!rn->stage[k]) {
    size_t bytes = sizeof(float) * (rn->stage_floats ? rn->stage_floats : 1);
    rn->stage[k] = rn->stage_ops->host_alloc(bytes);
    if (rn->stage[k]) rn->stage_pinned[k] = 1;
    else rn->stage[k] = core_malloc(bytes);
  }
  return rn->stage[k];
}

static float *buffer(void *ctx, const sched_instr *in, size_t *n) {
  pipe_runner *rn = ctx;
  pair_at(rn, in);
  const kernels_ops *ops = rn->chunks[in->chunk].ops;
  float *b = chunk_buffer(rn, in, n);
  if (pipe_host_memory(ops)) return b;
  float *h = staging(rn, in);
  if (in->op == SCHED_SEND_ACT || in->op == SCHED_SEND_GRAD) ops->to_host(h, b, sizeof(float) * *n);
  return h;
}

static float *device_buffer(void *ctx, const sched_instr *in, size_t *n) {
  pipe_runner *rn = ctx;
  pair_at(rn, in);
  return chunk_buffer(rn, in, n);
}

static void received(void *ctx, const sched_instr *in) {
  pipe_runner *rn = ctx;
  const kernels_ops *ops = rn->chunks[in->chunk].ops;
  if (pipe_host_memory(ops)) return;
  size_t n;
  float *b = chunk_buffer(rn, in, &n);
  ops->to_device(b, staging(rn, in), sizeof(float) * n);
}

/* A traced step's wait for the device (the compute queue: on the device path the worker first
 * makes it wait for the instruction's transfer), and for an OFFLOAD's or RELOAD's copy, so that
 * its event spans the copy rather than its issue; unless the table times its copies with events
 * (copy_clock, below): then they overlap compute as in any other step, and the worker takes their
 * times from copy_span at the step's end. */
static void sync_device(void *ctx) {
  pipe_runner *rn = ctx;
  if (rn->chunks && !pipe_host_memory(rn->chunks[0].ops)) rn->chunks[0].ops->sync();
  if (rn->off_ops && rn->last_copy >= 0 && !rn->copy_clocked) rn->off_ops->copy_sync(rn->last_copy);
  rn->last_copy = -1;
}

/* A traced step begins (the device idle) or ends: the table's copy clock, where it has one. */
static void trace_hook(void *ctx, int on) {
  pipe_runner *rn = ctx;
  const kernels_ops *ops = rn->chunks ? rn->chunks[0].ops : NULL;
  if (!ops || !ops->copy_clock) return;
  ops->copy_clock(on);
  rn->copy_clocked = on, rn->ncopy = 0;
  rn->copy_t0 = on ? MPI_Wtime() : 0;
}

/* The n-th copy instruction of a traced step: when its copies started and ended, on the
 * device's clock moved to MPI_Wtime's. */
static int copy_span_hook(void *ctx, int n, double *start, double *end) {
  pipe_runner *rn = ctx;
  const kernels_ops *ops = rn->chunks ? rn->chunks[0].ops : NULL;
  if (!rn->copy_clocked || !ops->copy_span || ops->copy_span(n, start, end)) return 1;
  *start += rn->copy_t0, *end += rn->copy_t0;
  return 0;
}

/* The worker's hooks for post-validation: a step begins (what a start again returns to); a
 * VALIDATE; the step starts again (its forwards so far thrown away: their losses, their memory). */
static void step_begins(void *ctx) {
  pipe_runner *rn = ctx;
  rn->act_step0 = rn->act_live;
}
static int validate_hook(void *ctx, int *again) { return pipe_runner_validate_at(ctx, again); }
static void step_again(void *ctx) {
  pipe_runner *rn = ctx;
  if (rn->copy_clocked) trace_hook(rn, 1); /* a traced step's copies counted from the new start */
  rn->loss_sum = 0, rn->nloss = 0, rn->act_live = rn->act_step0;
  rn->restarts++;
}

pipe_exec pipe_runner_exec(pipe_runner *rn) {
  pipe_exec ex = {.ctx = rn, .run = run, .buffer = buffer, .received = received, .device_buffer = device_buffer,
                  .sync = sync_device, .retired = retired, .begin = step_begins, .validate = validate_hook,
                  .again = step_again, .trace = trace_hook, .copy_span = copy_span_hook, .idle = idle};
  return ex;
}
