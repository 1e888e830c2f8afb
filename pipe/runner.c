/* pipe/runner.c: what LOAD, F, B, I, W, REDUCE_TIED_GRADS, REDUCE_GRADS and OPTIMIZER_STEP
 * do to the chunks of one rank. */
#include "pipe/runner.h"

#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"
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

static void round_to(const pipe_runner *rn, const kernels_ops *ops, float *x, size_t n) {
  if (rn->precision == 1) ops->round_bf16(x, n);
  else if (rn->precision == 2) ops->round_fp16(x, n);
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
    if (rn->zb[c].stage == 3) round_to(rn, ops, zero_param_shard(&rn->zb[c]), hi - lo); /* the only copy */
    else round_to(rn, ops, rn->chunks[c].params, rn->chunks[c].nparams);
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

/* Each chunk's gradients summed over the data-parallel group: all of them (ZeRO-0) or the
 * owned shard (ZeRO-1/2; the scale already averages). Mixed precision keeps its gradient
 * buffers in bf16/fp16: rounded here (ZeRO-2 rounds each bucket before its reduce-scatter and
 * the kept ranges before their all-reduce, in zero/zero.c). */
static int reduce_grads(pipe_runner *rn) {
  for (int c = 0; c < rn->v; c++) {
    if (rn->precision && rn->zb[c].stage < 2) round_to(rn, rn->chunks[c].ops, rn->chunks[c].grads, rn->chunks[c].nparams);
    int rc = zero_reduce(&rn->zb[c]);
    if (rc) return rc;
  }
  for (int c = 0; c < rn->v; c++) { /* the device path: a replica that never comes is an error here */
    int rc = zero_wait(&rn->zb[c], rn->timeout_s);
    if (rc) return rc;
  }
  return CORE_OK;
}

/* Parameter range [lo, hi) of chunk c that the gradient norm skips: the tied head's copy (it
 * equals the embedding's after REDUCE_TIED_GRADS, so the weight counts once). */
static void skipped(const pipe_runner *rn, int c, size_t *lo, size_t *hi) {
  *lo = *hi = 0;
  if (!rn->head_tied || c != rn->tied_head_chunk || rn->chunks[c].tied_head >= 0) return; /* no copy: nothing twice */
  const layers_chunk *ch = &rn->chunks[c];
  *lo = ch->param_off[rn->tied_head_layer];
  *hi = *lo + ch->layers[rn->tied_head_layer].nparams;
}

/* Squared norm of the gradients this rank owns: [lo, hi) less the skipped range. */
static double local_sumsq(const pipe_runner *rn) {
  double s = 0;
  for (int c = 0; c < rn->v; c++) {
    const zero_buffer *z = &rn->zb[c];
    const kernels_ops *ops = rn->chunks[c].ops;
    const float *g = zero_grad(z);
    size_t lo, hi, sk_lo, sk_hi;
    zero_range(z, &lo, &hi);
    skipped(rn, c, &sk_lo, &sk_hi);
    if (sk_hi <= lo || sk_lo >= hi) sk_lo = sk_hi = hi; /* nothing of it here */
    if (sk_lo < lo) sk_lo = lo;
    if (sk_hi > hi) sk_hi = hi;
    s += ops->sumsq(g, sk_lo - lo);
    s += ops->sumsq(g + (sk_hi - lo), hi - sk_hi);
  }
  return s;
}

/* Post-validation's second set of arrays: whether AdamW writes the update there (else the
 * arrays are copied before it), and chunk c's arrays swapped with the live ones. */
static int pv_swaps(const pipe_runner *rn) {
  const zero_buffer *z = &rn->zb[0];
  return strcmp(rn->opt.type, "sgd") != 0 && !(z->d > 1 && (z->stage == 1 || z->stage == 2));
}

static void swap_ptr(float **a, float **b) {
  float *t = *a;
  *a = *b, *b = t;
}

static void pv_swap(pipe_runner *rn, int c) {
  swap_ptr(&rn->opt_m[c], &rn->pv_m[c]), swap_ptr(&rn->opt_v[c], &rn->pv_v[c]);
  if (rn->master) {
    swap_ptr(&rn->master[c], &rn->pv_p[c]);
  } else if (rn->zb[c].stage == 3) {
    rn->pv_p[c] = zero_replace_params(&rn->zb[c], rn->pv_p[c]);
  } else { /* the chunk's whole buffer: the layers' views move with it */
    float *old = zero_replace_params(&rn->zb[c], rn->pv_p[c]);
    layers_chunk_bind_params(&rn->chunks[c], rn->pv_p[c]);
    rn->pv_p[c] = old;
  }
}

static int pv_alloc(pipe_runner *rn) {
  if (rn->pv_m) return CORE_OK;
  rn->pv_p = core_calloc((size_t)rn->v, sizeof(float *));
  rn->pv_m = core_calloc((size_t)rn->v, sizeof(float *)), rn->pv_v = core_calloc((size_t)rn->v, sizeof(float *));
  for (int c = 0; c < rn->v; c++) {
    size_t base, end;
    zero_range(&rn->zb[c], &base, &end);
    size_t n = end - base + 1;
    const kernels_ops *ops = rn->offload ? rn->opt_ops : rn->chunks[c].ops;
    rn->pv_ops = ops, rn->pv_pops = rn->master ? ops : rn->zb[c].stage == 3 ? rn->zb[c].ops : rn->chunks[c].ops;
    if (!rn->master && rn->zb[c].stage != 3) n = rn->chunks[c].nparams + 1; /* the chunk's whole buffer */
    rn->pv_p[c] = rn->pv_pops->alloc(sizeof(float) * n);
    rn->pv_m[c] = ops->alloc(sizeof(float) * (end - base + 1)), rn->pv_v[c] = ops->alloc(sizeof(float) * (end - base + 1));
    if (!rn->pv_p[c] || !rn->pv_m[c] || !rn->pv_v[c])
      return core_error_set(CORE_ERUNTIME, "backend %s: out of memory for post-validation's second copy of %zu "
                            "parameters' update state (optimizer.post_validation = false does without)", ops->name,
                            end - base);
  }
  return CORE_OK;
}

static void update_range(pipe_runner *rn, int c, size_t lo, size_t hi, size_t base, float wd, float gscale, int to) {
  layers_chunk *ch = &rn->chunks[c];
  /* offloaded: the host's table on the host copies of the gradients, state and master */
  const kernels_ops *ops = rn->offload ? rn->opt_ops : ch->ops;
  const float *g = (rn->offload ? rn->hgrad[c] : zero_grad(&rn->zb[c])) + (lo - base);
  float *m = rn->opt_m[c] + (lo - base), *v = rn->opt_v[c] + (lo - base);
  /* mixed precision: the optimizer steps the fp32 master; the working copy is its rounding */
  float *p = rn->master ? rn->master[c] + (lo - base) : zero_param_shard(&rn->zb[c]) + (lo - base);
  if (strcmp(rn->opt.type, "sgd") == 0)
    ops->sgd(p, g, rn->opt.momentum > 0 ? m : NULL, hi - lo, (float)rn->lr, (float)rn->opt.momentum, wd, gscale);
  else if (to) /* into the second set (post-validation), swapped in after */
    ops->adamw_to(rn->pv_p[c] + (lo - base), rn->pv_m[c] + (lo - base), rn->pv_v[c] + (lo - base), p, g, m, v, hi - lo,
                  (float)rn->lr, (float)rn->opt.beta1, (float)rn->opt.beta2, (float)rn->opt.eps, wd, (int)rn->opt_t,
                  gscale);
  else
    ops->adamw(p, g, m, v, hi - lo, (float)rn->lr, (float)rn->opt.beta1, (float)rn->opt.beta2, (float)rn->opt.eps, wd,
               (int)rn->opt_t, gscale);
}

/* Mixed precision: did any gradient overflow on any rank? Then every rank skips the step and
 * the fp16 scale backs off (DeepSpeed's dynamic scaler: the first `hysteresis` - 1 overflows
 * leave the scale, each later one halves it, until the scale doubles after `loss_scale_window`
 * clean steps and the count starts again). */
static int overflowed(pipe_runner *rn, int *any) {
  int mine = 0;
  for (int c = 0; c < rn->v && !mine; c++) {
    size_t lo, hi;
    zero_range(&rn->zb[c], &lo, &hi);
    mine = rn->chunks[c].ops->nonfinite(zero_grad(&rn->zb[c]), hi - lo) > 0;
  }
  core_watch_begin("the overflow check's all-reduce (fp16)");
  int err = MPI_Allreduce(&mine, any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD) != MPI_SUCCESS;
  core_watch_end();
  if (err) return core_error_set(CORE_ERUNTIME, "overflow check failed");
  return CORE_OK;
}

static void adjust_scale(pipe_runner *rn, int overflow) {
  if (rn->precision != 2 || !rn->dynamic_scale) return;
  if (overflow) {
    rn->good_steps = 0;
    if (rn->hyst_left <= 1) /* as DeepSpeed's (consecutive_hysteresis false): no new count here */
      rn->loss_scale = rn->loss_scale / 2 > rn->min_scale ? rn->loss_scale / 2 : rn->min_scale;
    else
      rn->hyst_left--;
  } else if (++rn->good_steps % rn->scale_window == 0) {
    rn->loss_scale *= 2;
    rn->hyst_left = rn->hysteresis;
  }
}

static int skip_step(pipe_runner *rn) {
  double was = rn->loss_scale;
  /* the scale would back off again but is at its minimum: the loss diverged (DeepSpeed's
   * scaler raises here too); every rank decides alike, the overflow being agreed */
  if (rn->dynamic_scale && rn->hyst_left <= 1 && was <= rn->min_scale)
    return core_error_set(CORE_ERUNTIME, "step %ld: the gradients overflow at the minimum loss scale "
                          "(fp16.min_loss_scale = %g): the loss diverged; nothing was updated", rn->step + 1, rn->min_scale);
  rn->skipped = 1;
  rn->grad_norm = INFINITY; /* the step's gradients overflowed: no norm to report */
  adjust_scale(rn, 1);
  if (rn->topo->world_rank == 0)
    core_log(CORE_LOG_WARN, "step %ld: gradient overflow at loss scale %g; the step is skipped on every rank, "
             "scale now %g", rn->step + 1, was, rn->loss_scale);
  for (int c = 0; c < rn->v; c++) {
    int rc = zero_finish(&rn->zb[c]);
    if (rc) return rc;
  }
  return CORE_OK;
}

/* Test hook: BRIGADE_INJECT_INF=STEP:RANK puts an inf into that rank's gradient at that step
 * (1-based), so tests can check that one rank's overflow skips the step everywhere. */
static void inject_inf(pipe_runner *rn) {
  const char *e = getenv("BRIGADE_INJECT_INF");
  long step;
  int rank;
  if (!e || sscanf(e, "%ld:%d", &step, &rank) != 2 || step != rn->step + 1 || rank != rn->topo->world_rank) return;
  size_t lo, hi;
  zero_range(&rn->zb[0], &lo, &hi);
  if (hi > lo) rn->chunks[0].ops->fill((float *)zero_grad(&rn->zb[0]), INFINITY, 1);
}

/* The working copy of chunk c's owned range from its master (mixed precision, offload). */
static void refresh_working(pipe_runner *rn, int c) {
  size_t base, end;
  zero_range(&rn->zb[c], &base, &end);
  if (rn->offload) /* the updated parameters back to the device */
    rn->chunks[c].ops->to_device(zero_param_shard(&rn->zb[c]), rn->master[c], sizeof(float) * (end - base));
  else if (rn->precision) /* the new working copy of the owned range */
    rn->chunks[c].ops->copy(zero_param_shard(&rn->zb[c]), rn->master[c], end - base);
  if (rn->precision) round_to(rn, rn->chunks[c].ops, zero_param_shard(&rn->zb[c]), end - base);
}

/* The update of every chunk's owned range with gradient scale gscale (opt_t already advanced),
 * and the working copy made from it; zero_finish (the gradients cleared, the shards gathered)
 * comes after. to: into post-validation's second set of arrays, then swapped in. */
static void update_all(pipe_runner *rn, float gscale, int to) {
  for (int c = 0; c < rn->v; c++) {
    const uint8_t *mask = rn->decay[c];
    size_t base, end;
    zero_range(&rn->zb[c], &base, &end);
    if (rn->offload) /* the reduced gradients of the owned range to the host */
      rn->chunks[c].ops->to_host(rn->hgrad[c], zero_grad(&rn->zb[c]), sizeof(float) * (end - base));
    if (!rn->druns) rn->druns = core_calloc((size_t)rn->v, sizeof(size_t *)), rn->ndruns = core_calloc((size_t)rn->v, sizeof(int));
    if (!rn->druns[c]) { /* runs of equal decay within the owned range: the mask is scanned once */
      int n = 0, cap = 16;
      size_t *r = core_malloc(sizeof(size_t) * (size_t)cap);
      for (size_t lo = base; lo < end;) {
        size_t hi = lo;
        while (hi < end && mask[hi] == mask[lo]) hi++;
        if (n + 2 > cap) r = core_realloc(r, sizeof(size_t) * (size_t)(cap *= 2));
        r[n++] = lo, lo = hi;
      }
      r[n] = end;
      rn->druns[c] = r, rn->ndruns[c] = n;
    }
    for (int k = 0; k < rn->ndruns[c]; k++) {
      size_t lo = rn->druns[c][k], hi = rn->druns[c][k + 1];
      update_range(rn, c, lo, hi, base, mask[lo] ? (float)rn->opt.weight_decay : 0.0f, gscale, to);
    }
    if (to) pv_swap(rn, c);
    refresh_working(rn, c);
  }
}

/* Post-validation's copies: the arrays an update writes (the parameters it steps: the master or
 * the shard; m; v), saved before it (save = 1) or put back (save = 0). In the memory of the
 * table that updates them. */
static int pv_copy(pipe_runner *rn, int save) {
  for (int c = 0; c < rn->v; c++) {
    size_t base, end;
    zero_range(&rn->zb[c], &base, &end);
    size_t n = end - base;
    const kernels_ops *ops = rn->offload ? rn->opt_ops : rn->chunks[c].ops;
    float *p = rn->master ? rn->master[c] : zero_param_shard(&rn->zb[c]);
    float *arr[3] = {p, rn->opt_m[c], rn->opt_v[c]};
    if (!rn->pv_save) rn->pv_save = core_calloc((size_t)rn->v, sizeof(float *)), rn->pv_ops = ops;
    if (!rn->pv_save[c] && !(rn->pv_save[c] = ops->alloc(sizeof(float) * (3 * n + 1))))
      return core_error_set(CORE_ERUNTIME, "backend %s: out of memory for post-validation's copy of %zu parameters' "
                            "update state (optimizer.post_validation = false does without)", ops->name, n);
    for (int k = 0; k < 3; k++) {
      if (!arr[k]) continue;
      if (save) ops->copy(rn->pv_save[c] + k * n, arr[k], n);
      else ops->copy(arr[k], rn->pv_save[c] + k * n, n);
    }
  }
  return CORE_OK;
}

/* OPTIMIZER_STEP under post-validation: the norm and the overflow flag reduced without
 * blocking; the update made at once as if neither clipping nor a skip applies. */
static int validate(pipe_runner *rn, int *changed);

static int eager_step(pipe_runner *rn) {
  if (rn->pv_pending) { /* eager: the last step's reduction, before this one's reuses its buffers */
    int changed, rc = validate(rn, &changed);
    if (rc) return rc;
  }
  inject_inf(rn); /* (skipped: known at the check) */
  int mine = 0;
  for (int c = 0; c < rn->v && !mine && rn->precision; c++) {
    size_t lo, hi;
    zero_range(&rn->zb[c], &lo, &hi);
    mine = rn->chunks[c].ops->nonfinite(zero_grad(&rn->zb[c]), hi - lo) > 0;
  }
  MPI_Comm all = rn->zb[0].stage == 0 ? rn->topo->pipe : MPI_COMM_WORLD;
  rn->pv_sum[0] = local_sumsq(rn), rn->pv_sum[1] = mine;
  rn->pv_req[0] = rn->pv_req[1] = MPI_REQUEST_NULL;
  if (MPI_Iallreduce(MPI_IN_PLACE, &rn->pv_sum[0], 1, MPI_DOUBLE, MPI_SUM, all, &rn->pv_req[0]) != MPI_SUCCESS ||
      (rn->precision &&
       MPI_Iallreduce(MPI_IN_PLACE, &rn->pv_sum[1], 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, &rn->pv_req[1]) != MPI_SUCCESS))
    return core_error_set(CORE_ERUNTIME, "gradient-norm all-reduce (post-validation) failed");
  rn->pv_pending = 1, rn->pv_lr = rn->lr, rn->pv_step = rn->step;
  if (rn->pv_eager) { /* nothing could be redone: update in place, clear the gradients now */
    rn->opt_t++;
    update_all(rn, (float)(1.0f / rn->loss_scale), 0);
    for (int c = 0; c < rn->v; c++) {
      int rc = zero_finish(&rn->zb[c]);
      if (rc) return rc;
    }
    rn->pv_zeroed = 1;
    return CORE_OK;
  }
  int to = pv_swaps(rn), rc = to ? pv_alloc(rn) : pv_copy(rn, 1);
  if (rc) return rc;
  rn->opt_t++;
  update_all(rn, (float)(1.0f / rn->loss_scale), to);
  return CORE_OK;
}

/* The eager update undone: the arrays it read live again. */
static int pv_restore(pipe_runner *rn) {
  if (!pv_swaps(rn)) return pv_copy(rn, 0);
  for (int c = 0; c < rn->v; c++) pv_swap(rn, c);
  return CORE_OK;
}

/* Completes the pending update's check (the step it belongs to: pv_step, its rate pv_lr, whatever
 * step is running now); *changed = 1 when the update was undone or redone. */
static int validate(pipe_runner *rn, int *changed) {
  *changed = 0;
  if (!rn->pv_pending) return CORE_OK;
  rn->pv_pending = 0, rn->skipped = 0;
  core_watch_begin("the gradient norm's all-reduce (post-validation)");
  int err = MPI_Waitall(2, rn->pv_req, MPI_STATUSES_IGNORE) != MPI_SUCCESS;
  core_watch_end();
  if (err) return core_error_set(CORE_ERUNTIME, "gradient-norm all-reduce (post-validation) failed");
  if (rn->pv_zeroed) { /* eager: the norm for the log; a diverged loss is still an error */
    rn->pv_zeroed = 0;
    rn->grad_norm = rn->pv_norm = sqrt(rn->pv_sum[0]) / rn->loss_scale;
    rn->pv_skipped = 0, rn->pv_scale = rn->loss_scale;
    return isfinite(rn->grad_norm) ? CORE_OK
                                   : core_error_set(CORE_ERUNTIME, "step %ld: the gradient norm is not finite (loss "
                                                    "diverged); the update was made before the norm was known "
                                                    "(optimizer.post_validation)", rn->pv_step + 1);
  }
  long running = rn->step;
  double lr = rn->lr;
  rn->step = rn->pv_step, rn->lr = rn->pv_lr; /* the update's own step: its messages, its rate */
  int any = rn->pv_sum[1] > 0, rc = CORE_OK;
  if (any && rn->precision == 2) { /* the synchronous step would have skipped: undo, then skip */
    rc = pv_restore(rn);
    if (!rc) {
      rn->opt_t--;
      for (int c = 0; c < rn->v; c++) refresh_working(rn, c);
      rn->rollbacks++, *changed = 1, rn->pv_sync_left = PIPE_PV_BACKOFF;
      rc = skip_step(rn);
    }
  } else {
    rn->grad_norm = sqrt(rn->pv_sum[0]) / rn->loss_scale;
    if (!isfinite(rn->grad_norm))
      rc = core_error_set(CORE_ERUNTIME, "step %ld: the gradient norm is not finite (loss diverged); "
                          "the step's update was made before the norm was known (optimizer.post_validation)", rn->step + 1);
    double scale = rn->loss_scale; /* the update's: the gradients were scaled by it (the step's own
                                     * adjust_scale may grow it for the next step, as below) */
    if (!rc) adjust_scale(rn, 0);
    if (!rc && rn->opt.clip > 0 && rn->grad_norm > rn->opt.clip) { /* clipping should have applied: redo with it */
      rc = pv_restore(rn);
      if (!rc) {
        float gscale = (float)(rn->opt.clip / rn->grad_norm);
        update_all(rn, (float)(gscale / scale), pv_swaps(rn));
        rn->rollbacks++, *changed = 1, rn->pv_sync_left = PIPE_PV_BACKOFF;
      }
    }
    for (int c = 0; c < rn->v && !rc; c++) rc = zero_finish(&rn->zb[c]);
  }
  rn->step = running, rn->lr = lr;
  rn->pv_norm = rn->grad_norm, rn->pv_skipped = rn->skipped, rn->pv_scale = rn->loss_scale;
  return rc;
}

int pipe_runner_validate(pipe_runner *rn) {
  int changed;
  return validate(rn, &changed);
}

int pipe_runner_validate_at(pipe_runner *rn, int *again) {
  int rc = validate(rn, again);
  if (rc) return rc;
  /* the running step was set up before the check: its rate follows the updates made (a skip
   * took one back), its loss layer the fp16 scale (which the check may have moved) */
  if (rn->lr_at) rn->lr = rn->lr_at(rn->lr_ctx, rn->opt_t);
  rn->grad_scale = (float)(rn->grad_scale_base * rn->loss_scale);
  return CORE_OK;
}

static int optimizer_step(pipe_runner *rn) {
  if (rn->post_validation && (rn->pv_eager || rn->pv_sync_left == 0)) return eager_step(rn);
  if (rn->pv_sync_left > 0) rn->pv_sync_left--; /* every rank alike: the rollback that set it was global */
  rn->skipped = 0;
  inject_inf(rn);
  if (rn->precision) {
    int any = 0, rc = overflowed(rn, &any);
    if (rc) return rc;
    if (any && rn->precision == 2) return skip_step(rn);
  }
  /* ZeRO-0: replicas hold the same gradients, so the norm spans the pipeline; with shards it
   * spans every rank */
  MPI_Comm all = rn->zb[0].stage == 0 ? rn->topo->pipe : MPI_COMM_WORLD;
  double s = local_sumsq(rn), total = 0;
  core_watch_begin("the gradient norm's all-reduce");
  int err = MPI_Allreduce(&s, &total, 1, MPI_DOUBLE, MPI_SUM, all) != MPI_SUCCESS;
  core_watch_end();
  if (err) return core_error_set(CORE_ERUNTIME, "gradient-norm all-reduce failed");
  rn->grad_norm = sqrt(total) / rn->loss_scale; /* of the unscaled gradients */
  if (!isfinite(rn->grad_norm))
    return core_error_set(CORE_ERUNTIME, "step %ld: the gradient norm is not finite (loss diverged); "
                          "nothing was updated", rn->step + 1);
  float gscale = rn->opt.clip > 0 && rn->grad_norm > rn->opt.clip ? (float)(rn->opt.clip / rn->grad_norm) : 1.0f;
  gscale = (float)(gscale / rn->loss_scale);
  adjust_scale(rn, 0);
  rn->opt_t++;
  update_all(rn, gscale, 0);
  for (int c = 0; c < rn->v; c++) {
    int rc = zero_finish(&rn->zb[c]);
    if (rc) return rc;
  }
  return CORE_OK;
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

static int run(void *ctx, const sched_instr *in) {
  pipe_runner *rn = ctx;
  pair_at(rn, in);
  switch (in->op) {
  case SCHED_LOAD_MICROBATCH: return load(rn, in);
  case SCHED_FORWARD:
  case SCHED_BACKWARD:
  case SCHED_BACKWARD_INPUT:
  case SCHED_BACKWARD_WEIGHT: return compute(rn, in);
  case SCHED_REDUCE_TIED_GRADS: return reduce_tied(rn, in);
  case SCHED_REDUCE_GRADS: return reduce_grads(rn);
  case SCHED_OPTIMIZER_STEP: return optimizer_step(rn);
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
 * table's host_alloc (page-locked on a GPU: a transfer's copy is then one DMA that does not wait
 * behind an activation offload's copy in driver-sized pieces; malloc when that fails). */
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
  rn->loss_sum = 0, rn->nloss = 0, rn->act_live = rn->act_step0;
  rn->restarts++;
}

pipe_exec pipe_runner_exec(pipe_runner *rn) {
  pipe_exec ex = {.ctx = rn, .run = run, .buffer = buffer, .received = received, .device_buffer = device_buffer,
                  .sync = sync_device, .retired = retired, .begin = step_begins, .validate = validate_hook,
                  .again = step_again, .trace = trace_hook, .copy_span = copy_span_hook};
  return ex;
}
