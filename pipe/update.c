/* pipe/update.c: what REDUCE_GRADS and OPTIMIZER_STEP do on one rank: the gradients reduced over
 * the data-parallel group, the global norm and the overflow check, AdamW (or SGD) over the owned
 * shard, mixed precision's loss scale, and optimizer post-validation (an update made before the
 * global norm is known, checked by VALIDATE and redone when clipping or a skip should have
 * changed it). Split from pipe/runner.c, which runs the other instructions. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"
#include "core/watch.h"
#include "pipe/runner.h"
#include "pipe/runner_internal.h"

void runner_round_to(const pipe_runner *rn, const kernels_ops *ops, float *x, size_t n) {
  if (rn->precision == 1) ops->round_bf16(x, n);
  else if (rn->precision == 2) ops->round_fp16(x, n);
}

/* Each chunk's gradients summed over the data-parallel group: all of them (ZeRO-0) or the
 * owned shard (ZeRO-1/2; the scale already averages). Mixed precision keeps its gradient
 * buffers in bf16/fp16: rounded here (ZeRO-2 rounds each bucket before its reduce-scatter and
 * the kept ranges before their all-reduce, in zero/zero.c). */
int runner_reduce_grads(pipe_runner *rn) {
  for (int c = 0; c < rn->v; c++) {
    if (rn->precision && rn->zb[c].stage < 2) runner_round_to(rn, rn->chunks[c].ops, rn->chunks[c].grads, rn->chunks[c].nparams);
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
  if (rn->precision) runner_round_to(rn, rn->chunks[c].ops, zero_param_shard(&rn->zb[c]), end - base);
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

int runner_optimizer_step(pipe_runner *rn) {
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
