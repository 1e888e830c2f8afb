/* pipe/train_cfg.c: the keys of a training config (DeepSpeed's names where a DeepSpeed user
 * would look) and reading them, with errors that name the line. */
#include <limits.h>
#include <math.h>
#include <string.h>
#include <strings.h>

#include "core/error.h"
#include "core/log.h"
#include "pipe/train_internal.h"

static const core_config_key keys[] = {
    {"train_batch_size", CORE_CFG_INT}, {"train_micro_batch_size_per_gpu", CORE_CFG_INT},
    {"gradient_accumulation_steps", CORE_CFG_INT}, {"steps_per_print", CORE_CFG_INT},
    {"gradient_clipping", CORE_CFG_FLOAT}, {"backend", CORE_CFG_STRING}, {"threads", CORE_CFG_INT},
    {"train", CORE_CFG_GROUP}, {"train.steps", CORE_CFG_INT}, {"train.seed", CORE_CFG_INT},
    {"train.eval_interval", CORE_CFG_INT}, {"train.eval_batches", CORE_CFG_INT},
    {"train.timeout", CORE_CFG_FLOAT},
    {"optimizer", CORE_CFG_GROUP}, {"optimizer.type", CORE_CFG_STRING},
    {"optimizer.params", CORE_CFG_GROUP}, {"optimizer.params.lr", CORE_CFG_FLOAT},
    {"optimizer.params.betas", CORE_CFG_LIST}, {"optimizer.params.betas.[]", CORE_CFG_FLOAT},
    {"optimizer.params.eps", CORE_CFG_FLOAT}, {"optimizer.params.weight_decay", CORE_CFG_FLOAT},
    {"optimizer.params.momentum", CORE_CFG_FLOAT}, {"optimizer.post_validation", CORE_CFG_BOOL},
    {"scheduler", CORE_CFG_GROUP}, {"scheduler.type", CORE_CFG_STRING},
    {"scheduler.params", CORE_CFG_GROUP}, {"scheduler.params.warmup_num_steps", CORE_CFG_INT},
    {"scheduler.params.total_num_steps", CORE_CFG_INT}, {"scheduler.params.min_lr", CORE_CFG_FLOAT},
    {"data", CORE_CFG_GROUP}, {"data.path", CORE_CFG_STRING}, {"data.val_path", CORE_CFG_STRING}, {"data.order", CORE_CFG_STRING},
    {"data.val_fraction", CORE_CFG_FLOAT},
    {"tokenizer", CORE_CFG_GROUP}, {"tokenizer.vocab", CORE_CFG_STRING}, {"tokenizer.merges", CORE_CFG_STRING},
    {"tokenizer.file", CORE_CFG_STRING},
    {"model", CORE_CFG_GROUP}, {"model.vocab_size", CORE_CFG_INT}, {"model.seq_len", CORE_CFG_INT},
    {"model.d_model", CORE_CFG_INT}, {"model.n_heads", CORE_CFG_INT}, {"model.layers", CORE_CFG_LIST},
    {"model.layers.[]", CORE_CFG_GROUP}, {"model.layers.[].type", CORE_CFG_STRING},
    {"model.layers.[].name", CORE_CFG_STRING}, {"model.layers.[].tie", CORE_CFG_STRING},
    {"model.layers.[].repeat", CORE_CFG_INT}, {"model.layers.[].out", CORE_CFG_INT},
    {"model.layers.[].mlp_ratio", CORE_CFG_INT}, {"model.layers.[].bias", CORE_CFG_BOOL},
    {"model.layers.[].recompute_gelu", CORE_CFG_BOOL}, {"model.layers.[].recompute_layernorm", CORE_CFG_BOOL},
    {"model.layers.[].eps", CORE_CFG_FLOAT},
    {"pipeline", CORE_CFG_GROUP}, {"pipeline.stages", CORE_CFG_INT}, {"pipeline.schedule", CORE_CFG_STRING},
    {"pipeline.virtual_stages", CORE_CFG_INT}, {"pipeline.partition_method", CORE_CFG_STRING},
    {"pipeline.boundaries", CORE_CFG_LIST}, {"pipeline.boundaries.[]", CORE_CFG_INT},
    {"pipeline.max_pending_w", CORE_CFG_INT}, {"pipeline.mem_limit", CORE_CFG_FLOAT},
    {"pipeline.offload", CORE_CFG_STRING}, {"pipeline.memory_limit", CORE_CFG_FLOAT},
    {"pipeline.offload_gbps", CORE_CFG_FLOAT}, {"pipeline.offload_gflops", CORE_CFG_FLOAT},
    {"checkpoint", CORE_CFG_GROUP}, {"checkpoint.dir", CORE_CFG_STRING}, {"checkpoint.interval", CORE_CFG_INT},
    {"trace", CORE_CFG_GROUP}, {"trace.path", CORE_CFG_STRING}, {"trace.step", CORE_CFG_INT},
    {"zero_optimization", CORE_CFG_GROUP}, {"zero_optimization.stage", CORE_CFG_INT},
    {"zero_optimization.reduce_bucket_size", CORE_CFG_FLOAT}, {"zero_optimization.overlap_comm", CORE_CFG_BOOL},
    {"zero_optimization.reshard_after_forward", CORE_CFG_BOOL}, {"zero_optimization.prefetch", CORE_CFG_INT},
    {"zero_optimization.offload_optimizer", CORE_CFG_GROUP}, {"zero_optimization.offload_optimizer.device", CORE_CFG_STRING},
    {"activation_checkpointing", CORE_CFG_GROUP}, {"activation_checkpointing.enabled", CORE_CFG_BOOL},
    {"bf16", CORE_CFG_GROUP}, {"bf16.enabled", CORE_CFG_BOOL},
    {"fp16", CORE_CFG_GROUP}, {"fp16.enabled", CORE_CFG_BOOL}, {"fp16.loss_scale", CORE_CFG_FLOAT},
    {"fp16.initial_scale_power", CORE_CFG_INT}, {"fp16.loss_scale_window", CORE_CFG_INT},
    {"fp16.hysteresis", CORE_CFG_INT}, {"fp16.min_loss_scale", CORE_CFG_FLOAT},
};

const core_config_key *train_cfg_schema(size_t *n) {
  *n = sizeof keys / sizeof keys[0];
  return keys;
}

static int get_i(const core_config *c, const char *k, int64_t def, int64_t lo, int64_t hi, int *out) {
  int64_t v;
  int rc = core_config_get_int_range(c, k, def, lo, hi, &v);
  *out = (int)v;
  return rc;
}

/* trace.step counts steps as the log does (from 1). 0 or unset: step 2 (the first one warms
 * up), or step 1 of a one-step run (pipe_train moves it past the step a run resumes at); else it
 * must be a step the run takes. */
static int read_trace_step(train_cfg *t) {
  int rc = get_i(t->cfg, "trace.step", 0, 0, 1 << 30, &t->trace_step);
  if (rc) return rc;
  if (!t->trace_step) {
    t->trace_step = t->steps >= 2 ? 2 : 1, t->trace_step_auto = 1;
    return CORE_OK;
  }
  if (t->trace_path && t->trace_step > t->steps) {
    char w[256];
    core_config_where(t->cfg, "trace.step", -1, w, sizeof w);
    return core_error_set(CORE_EINPUT, "trace.step %d is after the run's last step, train.steps = %d (%s)",
                          t->trace_step, t->steps, w);
  }
  return CORE_OK;
}

/* DeepSpeed's keys and defaults: buckets of 5e8 elements, communication not overlapped. */
static int read_zero(train_cfg *t) {
  double b;
  int rc = core_config_get_float(t->cfg, "zero_optimization.reduce_bucket_size", 5e8, &b);
  if (!rc && (b < 1 || b > 2147483647.0 || b != floor(b))) {
    char w[256];
    core_config_where(t->cfg, "zero_optimization.reduce_bucket_size", -1, w, sizeof w);
    return core_error_set(CORE_EINPUT, "zero_optimization.reduce_bucket_size must be a whole number of elements "
                          "in 1..2^31-1, not %g (%s)", b, w);
  }
  if (!rc) t->bucket_floats = (size_t)b;
  if (!rc) rc = core_config_get_bool(t->cfg, "zero_optimization.overlap_comm", 0, &t->overlap_comm);
  /* stage 3 (FSDP's names): parameters given back when another chunk computes, or kept gathered
   * over the step; the next chunk's gathered that many runs of ops ahead */
  int reshard = 1;
  if (!rc) rc = core_config_get_bool(t->cfg, "zero_optimization.reshard_after_forward", 1, &reshard);
  t->keep_gathered = !reshard;
  if (!rc) rc = get_i(t->cfg, "zero_optimization.prefetch", 1, 0, 64, &t->prefetch);
  if (!rc && t->zero_stage != 3)
    for (int k = 0; k < 2 && !rc; k++) {
      const char *key = k ? "zero_optimization.prefetch" : "zero_optimization.reshard_after_forward";
      char w[256];
      if (!core_config_has(t->cfg, key)) continue;
      core_config_where(t->cfg, key, -1, w, sizeof w);
      rc = core_error_set(CORE_EINPUT, "%s applies to zero_optimization.stage = 3 (the stage is %d) (%s)", key,
                            t->zero_stage, w);
    }
  return rc;
}

/* ZeRO-Offload (DeepSpeed's key): the optimizer state, fp32 master weights and the update on the
 * host, "cpu"; "none" keeps them with the backend. On the CPU backend there is nothing to move. */
static int read_offload(train_cfg *t) {
  const char *dev;
  const char *key = "zero_optimization.offload_optimizer.device";
  int rc = core_config_get_string(t->cfg, key, "none", &dev);
  if (rc) return rc;
  char w[256];
  core_config_where(t->cfg, key, -1, w, sizeof w);
  if (strcmp(dev, "cpu") != 0 && strcmp(dev, "none") != 0)
    return core_error_set(CORE_EINPUT, "%s = \"%s\" is not \"cpu\" or \"none\" (%s)", key, dev, w);
  t->offload = strcmp(dev, "cpu") == 0;
  if (t->offload && strcmp(t->backend, "cpu") == 0)
    return core_error_set(CORE_EINPUT, "%s = \"cpu\" moves the optimizer off a device, but backend = \"cpu\" keeps "
                          "everything in host memory already: nothing to offload (%s)", key, w);
  return CORE_OK;
}

static int read_optimizer(train_cfg *t) {
  const core_config *c = t->cfg;
  const char *type;
  pipe_optim *o = &t->opt;
  int rc = core_config_get_string(c, "optimizer.type", "AdamW", &type);
  if (!rc && strcasecmp(type, "adamw") && strcasecmp(type, "adam") && strcasecmp(type, "sgd")) {
    char w[256];
    core_config_where(c, "optimizer.type", -1, w, sizeof w);
    rc = core_error_set(CORE_EINPUT, "optimizer.type '%s' is not AdamW, Adam or SGD (%s)", type, w);
  }
  if (rc) return rc;
  snprintf(o->type, sizeof o->type, "%s", strcasecmp(type, "sgd") ? "adamw" : "sgd");
  o->beta1 = 0.9, o->beta2 = 0.95;
  rc = core_config_get_float(c, "optimizer.params.lr", 1e-3, &o->lr);
  if (!rc) rc = core_config_get_float(c, "optimizer.params.eps", 1e-8, &o->eps);
  if (!rc) rc = core_config_get_float(c, "optimizer.params.weight_decay", 0.0, &o->weight_decay);
  if (!rc) rc = core_config_get_float(c, "optimizer.params.momentum", 0.0, &o->momentum);
  if (!rc) rc = core_config_get_float(c, "gradient_clipping", 0.0, &o->clip);
  const struct {
    const char *key;
    double v;
    int positive; /* > 0, else >= 0 */
  } chk[] = {{"optimizer.params.lr", o->lr, 1}, {"optimizer.params.eps", o->eps, 1},
             {"optimizer.params.weight_decay", o->weight_decay, 0}, {"gradient_clipping", o->clip, 0}};
  for (size_t i = 0; !rc && i < sizeof chk / sizeof chk[0]; i++) {
    char w[256];
    core_config_where(c, chk[i].key, -1, w, sizeof w);
    if (!(chk[i].positive ? chk[i].v > 0 : chk[i].v >= 0))
      rc = core_error_set(CORE_EINPUT, "%s = %g must be %s (%s)", chk[i].key, chk[i].v, chk[i].positive ? "> 0" : ">= 0", w);
    else if (!isfinite((float)chk[i].v) || (chk[i].positive && (float)chk[i].v == 0)) /* the kernels take floats */
      rc = core_error_set(CORE_EINPUT, "%s = %g is %s a float's range, as the optimizer uses it (%s)", chk[i].key,
                          chk[i].v, (float)chk[i].v == 0 ? "below" : "beyond", w);
  }
  if (!rc && !(o->momentum >= 0 && o->momentum < 1)) { /* 1 or more: the velocity never decays */
    char w[256];
    core_config_where(c, "optimizer.params.momentum", -1, w, sizeof w);
    rc = core_error_set(CORE_EINPUT, "optimizer.params.momentum = %g must be in [0, 1) (%s)", o->momentum, w);
  }
  return rc;
}

static int read_betas(train_cfg *t) {
  int n = core_config_list_len(t->cfg, "optimizer.params.betas");
  if (n == 0 && !core_config_has(t->cfg, "optimizer.params.betas")) return CORE_OK;
  char w[256];
  core_config_where(t->cfg, "optimizer.params.betas", -1, w, sizeof w);
  if (n != 2) return core_error_set(CORE_EINPUT, "optimizer.params.betas must hold two numbers (%s)", w);
  double b[2];
  for (int i = 0; i < 2; i++) {
    char path[64];
    snprintf(path, sizeof path, "optimizer.params.betas.[%d]", i);
    if (core_config_get_float(t->cfg, path, -1, &b[i])) return core_error_code();
    if (!(b[i] >= 0 && b[i] < 1)) { /* the element's place: it may come from --set */
      core_config_where(t->cfg, "optimizer.params.betas", i, w, sizeof w);
      return core_error_set(CORE_EINPUT, "optimizer.params.betas must be in [0, 1): [%d] is %g (%s)", i, b[i], w);
    }
  }
  t->opt.beta1 = b[0], t->opt.beta2 = b[1];
  return CORE_OK;
}

static int read_schedule(train_cfg *t) {
  const core_config *c = t->cfg;
  const char *type;
  int rc = core_config_get_string(c, "scheduler.type", "constant", &type);
  if (rc) return rc;
  if ((rc = zero_lr_parse_kind(type, &t->lr.kind))) {
    char w[256];
    core_config_where(c, "scheduler.type", -1, w, sizeof w);
    return core_error_prefix("scheduler.type (%s)", w);
  }
  t->lr.lr = t->opt.lr;
  int64_t w = 0, total = 1;
  rc = core_config_get_int_range(c, "scheduler.params.warmup_num_steps", 0, 0, 1L << 40, &w);
  /* default: the run's steps (at least 1: train.steps = 0 is a run that trains nothing) */
  if (!rc) rc = core_config_get_int_range(c, "scheduler.params.total_num_steps", t->steps > 0 ? t->steps : 1, 1, 1L << 40,
                                          &total);
  if (!rc) rc = core_config_get_float(c, "scheduler.params.min_lr", 0.0, &t->lr.min_lr);
  t->lr.warmup = w, t->lr.total = total;
  if (!rc && t->lr.kind != ZERO_LR_CONSTANT && w == 0 && t->lr.kind == ZERO_LR_WARMUP) t->lr.warmup = 1;
  char wm[256], wl[256];
  core_config_where(c, "scheduler.params.min_lr", -1, wm, sizeof wm);
  core_config_where(c, "optimizer.params.lr", -1, wl, sizeof wl);
  if (!rc && !(t->lr.min_lr >= 0))
    rc = core_error_set(CORE_EINPUT, "scheduler.params.min_lr = %g must be >= 0 (%s)", t->lr.min_lr, wm);
  if (!rc && t->lr.min_lr > t->lr.lr) /* the schedule would decay upwards */
    rc = core_error_set(CORE_EINPUT, "scheduler.params.min_lr = %g (%s) is above optimizer.params.lr = %g (%s): the "
                        "minimum must not exceed the peak", t->lr.min_lr, wm, t->lr.lr, wl);
  if (!rc && t->lr.kind == ZERO_LR_WARMUP_COSINE && w >= total && core_config_has(c, "scheduler.params.total_num_steps")) {
    char ww[256]; /* both given: a schedule that never decays is a mistake (unset, the total is the run's steps) */
    core_config_where(c, "scheduler.params.warmup_num_steps", -1, ww, sizeof ww);
    rc = core_error_set(CORE_EINPUT, "scheduler.params.warmup_num_steps = %lld (%s) is not below "
                        "scheduler.params.total_num_steps = %lld: the cosine would never decay", (long long)w, ww,
                        (long long)total);
  }
  return rc;
}

void train_cfg_warn(const train_cfg *t) {
  const zero_lr *s = &t->lr;
  long steps = t->steps;
  if (s->kind != ZERO_LR_CONSTANT && steps > 0 && s->warmup > steps)
    core_log(CORE_LOG_WARN, "scheduler.params.warmup_num_steps = %ld is longer than the run (train.steps = %ld): the "
             "learning rate never reaches optimizer.params.lr = %g", s->warmup, steps, s->lr);
  else if (s->kind == ZERO_LR_WARMUP_COSINE && s->total < steps && s->total > s->warmup)
    core_log(CORE_LOG_WARN, "scheduler.params.total_num_steps = %ld is shorter than the run (train.steps = %ld): the "
             "last %ld steps run at scheduler.params.min_lr = %g", s->total, steps, steps - s->total, s->min_lr);
  else if (s->kind == ZERO_LR_WARMUP_COSINE && steps > 0 && s->warmup > 0 && s->warmup >= s->total)
    core_log(CORE_LOG_WARN, "scheduler.params.warmup_num_steps = %ld is the whole run (train.steps = %ld): the "
             "cosine never decays to scheduler.params.min_lr", s->warmup, steps);
  if (s->kind == ZERO_LR_CONSTANT && core_config_has(t->cfg, "scheduler.params.warmup_num_steps"))
    core_log(CORE_LOG_WARN, "scheduler.params.warmup_num_steps is set, but scheduler.type is constant: there is no "
             "warm-up (WarmupLR or WarmupCosineLR have one)");
  for (int k = 0; k < 2; k++) { /* the decay's keys, under a schedule without a decay */
    const char *key = k ? "scheduler.params.total_num_steps" : "scheduler.params.min_lr";
    if (s->kind != ZERO_LR_WARMUP_COSINE && core_config_has(t->cfg, key))
      core_log(CORE_LOG_WARN, "%s is set, but scheduler.type %s has no decay: it has no effect (WarmupCosineLR "
               "decays)", key, s->kind == ZERO_LR_CONSTANT ? "constant" : "WarmupLR");
  }
  /* the other optimizer's keys */
  int sgd = strcmp(t->opt.type, "sgd") == 0;
  const char *other[] = {"optimizer.params.momentum", "optimizer.params.betas", "optimizer.params.eps"};
  for (int k = 0; k < 3; k++)
    if ((k == 0) != sgd && core_config_has(t->cfg, other[k]))
      core_log(CORE_LOG_WARN, "%s is set, but optimizer.type is %s: it has no effect", other[k], sgd ? "SGD" : "AdamW");
  if (!t->trace_path && core_config_has(t->cfg, "trace.step")) { /* as checkpoint.interval without checkpoint.dir */
    char w[256];
    core_config_where(t->cfg, "trace.step", -1, w, sizeof w);
    core_log(CORE_LOG_WARN, "trace.step is set (%s), but trace.path is not: no trace will be written", w);
  }
}

/* bf16.enabled, fp16.* with DeepSpeed's meaning (loss_scale 0 = dynamic). */
static int read_precision(train_cfg *t) {
  const core_config *c = t->cfg;
  int bf = 0, fp = 0, power = 16;
  int rc = core_config_get_bool(c, "bf16.enabled", 0, &bf);
  if (!rc) rc = core_config_get_bool(c, "fp16.enabled", 0, &fp);
  if (!rc && bf && fp) rc = core_error_set(CORE_EINPUT, "%s: bf16.enabled and fp16.enabled are both true; pick one", core_config_name(c));
  t->precision = bf ? 1 : fp ? 2 : 0;
  if (!rc) rc = core_config_get_float(c, "fp16.loss_scale", 0, &t->loss_scale);
  if (!rc) rc = get_i(c, "fp16.initial_scale_power", 16, 0, 120, &power);
  if (!rc) rc = get_i(c, "fp16.loss_scale_window", 1000, 1, 1 << 30, &t->scale_window);
  if (!rc) rc = get_i(c, "fp16.hysteresis", 2, 1, PIPE_MAX_HYSTERESIS, &t->hysteresis);
  if (!rc) rc = core_config_get_float(c, "fp16.min_loss_scale", 1, &t->min_scale);
  /* a static scale whose inverse a float holds (2^-24: gradients that underflow to 0 otherwise
   * become 0 x inf) and that fp16's range leaves a use for */
  const double lo = 0x1p-24, hi = 0x1p64;
  for (int k = 0; k < 2 && !rc; k++) {
    const char *key = k ? "fp16.min_loss_scale" : "fp16.loss_scale";
    double v = k ? t->min_scale : t->loss_scale;
    if (k ? v >= lo && v <= hi : v == 0 || (v >= lo && v <= hi)) continue;
    char w[256];
    core_config_where(c, key, -1, w, sizeof w);
    rc = core_error_set(CORE_EINPUT, "%s = %g must be %sin [2^-24, 2^64] (%s)", key, v, k ? "" : "0 (dynamic) or ", w);
  }
  t->dynamic_scale = t->loss_scale == 0;
  if (t->dynamic_scale) t->loss_scale = (double)(1ull << (power > 62 ? 62 : power)) * (power > 62 ? (double)(1ull << (power - 62)) : 1.0);
  if (!rc && t->precision == 2 && t->dynamic_scale && t->min_scale > t->loss_scale) {
    char w[256];
    core_config_where(c, "fp16.min_loss_scale", -1, w, sizeof w);
    rc = core_error_set(CORE_EINPUT, "fp16.min_loss_scale = %g (%s) is above the initial scale 2^%d (fp16.initial_scale_power)",
                        t->min_scale, w, power);
  }
  if (t->precision != 2) t->loss_scale = 1, t->dynamic_scale = 0;
  return rc;
}

static int read_pipeline(train_cfg *t, int world) {
  const core_config *c = t->cfg;
  const char *name, *part;
  int rc = get_i(c, "pipeline.stages", world, 1, 1 << 16, &t->stages);
  if (rc) return rc;
  rc = core_config_get_string(c, "pipeline.schedule", "1f1b", &name);
  if (!rc) rc = sched_family_parse(name, &t->family);
  if (rc) {
    char w[256];
    core_config_where(c, "pipeline.schedule", -1, w, sizeof w);
    return core_error_prefix("pipeline.schedule (%s)", w);
  }
  int defv = t->family == SCHED_INTERLEAVED || sched_family_is_v(t->family) ? 2 : 1;
  rc = get_i(c, "pipeline.virtual_stages", defv, 1, 64, &t->v);
  if (!rc && core_config_has(c, "pipeline.virtual_stages")) { /* named as the config gave it, not as compile's --virtual */
    char w[256];
    core_config_where(c, "pipeline.virtual_stages", -1, w, sizeof w);
    rc = sched_check_virtual(t->family, t->v, "pipeline.virtual_stages", w);
  }
  if (!rc) rc = core_config_get_string(c, "pipeline.partition_method", "parameters", &part);
  if (!rc && (rc = sched_part_parse(part, &t->part))) {
    char w[256];
    core_config_where(c, "pipeline.partition_method", -1, w, sizeof w);
    return core_error_prefix("pipeline.partition_method (%s)", w);
  }
  if (!rc && t->part != SCHED_PART_EXPLICIT && core_config_list_len(c, "pipeline.boundaries") > 0) {
    char w[256]; /* boundaries would be ignored: the cut would not be the one written */
    core_config_where(c, "pipeline.boundaries", -1, w, sizeof w);
    rc = core_error_set(CORE_EINPUT, "pipeline.boundaries are given, but pipeline.partition_method is '%s'; "
                        "set it to \"explicit\" to cut there (%s)", part, w);
  }
  if (!rc) rc = get_i(c, "pipeline.max_pending_w", 0, 0, 1 << 20, &t->max_pending_w);
  if (!rc && t->max_pending_w && !sched_family_is_zb(t->family)) {
    char w[256];
    core_config_where(c, "pipeline.max_pending_w", -1, w, sizeof w);
    rc = core_error_set(CORE_EINPUT, "pipeline.max_pending_w limits the pending weight gradients of the zb-* "
                        "families; schedule %s has none (%s)", sched_family_name(t->family), w);
  }
  /* optimizer post-validation: on by default where a synchronized step boundary costs the most
   * (the zero-bubble and V families, whose ranks end their steps staggered) */
  if (!rc) rc = core_config_get_bool(c, "optimizer.post_validation",
                                     sched_default_step_sync(t->family) == SCHED_STEP_POST_VALIDATION,
                                     &t->post_validation);
  const char *off = NULL; /* activation offload */
  if (!rc) rc = core_config_get_string(c, "pipeline.offload", "none", &off);
  if (!rc) {
    char w[256];
    core_config_where(c, "pipeline.offload", -1, w, sizeof w);
    if (strcmp(off, "none") == 0) t->act_offload = SCHED_OFFLOAD_NONE;
    else if (strcmp(off, "full") == 0) t->act_offload = SCHED_OFFLOAD_FULL;
    else if (strcmp(off, "auto") == 0) t->act_offload = SCHED_OFFLOAD_AUTO;
    else rc = core_error_set(CORE_EINPUT, "pipeline.offload = \"%s\" is not \"none\", \"full\" or \"auto\" (%s)", off, w);
  }
  if (!rc) rc = core_config_get_float(c, "pipeline.memory_limit", 0.0, &t->memory_limit);
  if (!rc) rc = core_config_get_float(c, "pipeline.offload_gbps", 25.0, &t->offload_gbps);
  /* the compute rate the copies are weighed against: a GPU's by default on "cuda" (an H200 ran
   * GPT-2-124M's bf16 step at 110 TFLOP/s of model FLOPs), a CPU's elsewhere; at the CPU's rate a
   * GPU's copies would all look hidden and "full" would offload what slows the step (measured:
   * +29% on a wide GPT across 4 ranks of one H200) */
  double gflops = strcmp(t->backend ? t->backend : "cpu", "cuda") == 0 ? 100000.0 : 50.0;
  if (!rc) rc = core_config_get_float(c, "pipeline.offload_gflops", gflops, &t->offload_gflops);
  if (!rc && (t->act_offload == SCHED_OFFLOAD_AUTO) != (t->memory_limit > 0)) {
    char w[256];
    core_config_where(c, t->act_offload == SCHED_OFFLOAD_AUTO ? "pipeline.offload" : "pipeline.memory_limit", -1, w, sizeof w);
    rc = core_error_set(CORE_EINPUT, t->act_offload == SCHED_OFFLOAD_AUTO
                                         ? "pipeline.offload = \"auto\" needs pipeline.memory_limit: the activation memory per "
                                           "rank, in stages' activations, to bring every rank under (%s)"
                                         : "pipeline.memory_limit is the limit of pipeline.offload = \"auto\" (%s)", w);
  }
  for (int k = 0; k < 2 && !rc; k++) {
    const char *key = k ? "pipeline.offload_gflops" : "pipeline.offload_gbps";
    double v = k ? t->offload_gflops : t->offload_gbps;
    if (v > 0) continue;
    char w[256];
    core_config_where(c, key, -1, w, sizeof w);
    rc = core_error_set(CORE_EINPUT, "%s = %g must be > 0 (%s)", key, v, w);
  }
  if (!rc) rc = core_config_get_float(c, "pipeline.mem_limit", 0.0, &t->mem_limit);
  if (!rc && (t->mem_limit != 0 && (t->family != SCHED_ZB_AUTO || !(t->mem_limit >= 1)))) {
    char w[256];
    core_config_where(c, "pipeline.mem_limit", -1, w, sizeof w);
    if (t->family != SCHED_ZB_AUTO)
      rc = core_error_set(CORE_EINPUT, "pipeline.mem_limit is zb-auto's memory limit; schedule %s has its own (%s)",
                          sched_family_name(t->family), w);
    else
      rc = core_error_set(CORE_EINPUT, "pipeline.mem_limit = %g: give at least 1 stage's activations per rank, or 0 "
                          "for p (%s)", t->mem_limit, w);
  }
  if (!rc && world % t->stages != 0) {
    char w[256];
    core_config_where(c, "pipeline.stages", -1, w, sizeof w);
    rc = core_error_set(CORE_EINPUT, "pipeline.stages = %d does not divide the %d ranks (%s)", t->stages, world, w);
  }
  return rc;
}

int train_read_config(train_cfg *t, const pipe_train_opts *o, int world) {
  memset(t, 0, sizeof *t);
  int rc = core_config_load(&t->cfg, o->config);
  for (int i = 0; i < o->nsets && !rc; i++) rc = core_config_set(t->cfg, o->sets[i]);
  if (!rc) rc = core_config_check(t->cfg, keys, sizeof keys / sizeof keys[0]);
  const core_config *c = t->cfg;
  int64_t seed = 0;
  if (!rc) rc = get_i(c, "train_micro_batch_size_per_gpu", 4, 1, 1 << 20, &t->B);
  if (!rc) rc = get_i(c, "gradient_accumulation_steps", 1, 1, 1 << 20, &t->m);
  if (!rc && (int64_t)t->B * t->m > INT_MAX) { /* the per-replica batch is an int everywhere */
    char w[256];
    core_config_where(c, "gradient_accumulation_steps", -1, w, sizeof w);
    rc = core_error_set(CORE_EINPUT, "train_micro_batch_size_per_gpu %d x gradient_accumulation_steps %d = %lld "
                        "sequences per replica, more than %d (%s)", t->B, t->m, (long long)t->B * t->m, INT_MAX, w);
  }
  if (!rc) rc = get_i(c, "model.seq_len", 64, 1, 1 << 16, &t->T);
  if (!rc && (int64_t)t->B * t->T > INT_MAX) { /* a micro-batch's positions N = B*T are an int in every layer */
    char w[256];
    core_config_where(c, "train_micro_batch_size_per_gpu", -1, w, sizeof w);
    rc = core_error_set(CORE_EINPUT, "train_micro_batch_size_per_gpu %d x model.seq_len %d = %lld positions per "
                        "micro-batch, more than %d (%s)", t->B, t->T, (long long)t->B * t->T, INT_MAX, w);
  }
  if (!rc) rc = get_i(c, "train.steps", 100, 0, PIPE_MAX_STEPS, &t->steps);
  if (!rc) rc = get_i(c, "steps_per_print", 10, 1, 1 << 30, &t->print_every);
  if (!rc) rc = get_i(c, "train.eval_interval", 0, 0, 1 << 30, &t->eval_interval);
  if (!rc) rc = get_i(c, "train.eval_batches", 4, 1, 1 << 16, &t->eval_batches);
  if (!rc) rc = get_i(c, "threads", 1, 0, 1024, &t->threads);
  if (!rc) rc = core_config_get_float(c, "train.timeout", 60.0, &t->timeout);
  if (!rc && !(t->timeout > 0)) {
    char w[256];
    core_config_where(c, "train.timeout", -1, w, sizeof w);
    rc = core_error_set(CORE_EINPUT, "train.timeout = %g must be > 0 seconds (%s)", t->timeout, w);
  }
  if (!rc) rc = core_config_get_int(c, "train.seed", 1337, &seed);
  if (!rc) rc = core_config_get_string(c, "data.path", NULL, &t->data_path);
  if (!rc) rc = core_config_get_string(c, "data.val_path", NULL, &t->val_path);
  const char *order = NULL;
  if (!rc) rc = core_config_get_string(c, "data.order", "random", &order);
  if (!rc && strcmp(order, "random") != 0 && strcmp(order, "sequential") != 0) {
    char w[256];
    core_config_where(c, "data.order", -1, w, sizeof w);
    rc = core_error_set(CORE_EINPUT, "data.order = \"%s\" is not \"random\" or \"sequential\" (%s)", order, w);
  }
  if (!rc) t->sequential = strcmp(order, "sequential") == 0;
  if (!rc) rc = core_config_get_float(c, "data.val_fraction", 0.1, &t->val_fraction);
  if (!rc && !(t->val_fraction >= 0 && t->val_fraction < 1)) {
    char w[256];
    core_config_where(c, "data.val_fraction", -1, w, sizeof w);
    rc = core_error_set(CORE_EINPUT, "data.val_fraction = %g must be in [0, 1) (%s)", t->val_fraction, w);
  }
  if (!rc) rc = core_config_get_string(c, "backend", "cpu", &t->backend);
  if (!rc) rc = read_offload(t);
  if (!rc) rc = core_config_get_string(c, "checkpoint.dir", NULL, &t->ckpt_dir);
  if (!rc) rc = get_i(c, "checkpoint.interval", 0, 0, 1 << 30, &t->ckpt_interval);
  if (!rc) rc = core_config_get_string(c, "trace.path", NULL, &t->trace_path);
  if (!rc) rc = read_trace_step(t);
  if (!rc) rc = get_i(c, "zero_optimization.stage", 0, 0, 3, &t->zero_stage);
  if (!rc) rc = read_zero(t);
  if (!rc) rc = read_optimizer(t);
  if (!rc) rc = read_betas(t);
  if (!rc) rc = read_schedule(t);
  if (!rc) rc = read_pipeline(t, world);
  if (!rc) rc = core_config_get_bool(c, "activation_checkpointing.enabled", 0, &t->ckpt_act);
  if (!rc) rc = read_precision(t);
  if (!rc && t->ckpt_act &&
      (sched_family_is_zb(t->family) || t->family == SCHED_DUALPIPE_V)) {
    char w[256];
    core_config_where(c, "activation_checkpointing.enabled", -1, w, sizeof w);
    rc = core_error_set(CORE_EINPUT, "activation checkpointing recomputes a chunk inside its full backward; "
                        "schedule %s splits the backward (%s)", sched_family_name(t->family), w);
  }
  t->seed = (uint64_t)seed;
  if (!rc) {
    t->d = world / t->stages;
    int64_t tbs;
    rc = core_config_get_int(c, "train_batch_size", (int64_t)t->B * t->m * t->d, &tbs);
    if (!rc && tbs != (int64_t)t->B * t->m * t->d) {
      char w[256];
      core_config_where(c, "train_batch_size", -1, w, sizeof w);
      rc = core_error_set(CORE_EINPUT, "train_batch_size = %lld, but micro-batch %d x accumulation %d x "
                          "%d replicas = %lld (%s)", (long long)tbs, t->B, t->m, t->d, (long long)t->B * t->m * t->d, w);
    }
  }
  return rc;
}
