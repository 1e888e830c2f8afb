/* pipe/plan.c: what a config would do, without running it: the cut and the compiled program
 * (both shared with `brigade train`) and a cost model from per-layer FLOPs, for `brigade sim
 * CONFIG` and the tuner. */
#include "pipe/plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/mem.h"
#include "pipe/train_internal.h"

int train_cut_model(const train_cfg *t, const layers_model *m, int **bounds_out) {
  int k = t->stages * t->v, n = m->n - 1;
  double *w = core_malloc(sizeof(double) * (size_t)n);
  for (int i = 0; i < n; i++) {
    const layer *l = &m->layers[i];
    w[i] = t->part == SCHED_PART_COST ? l->type->flops_per_token(l) : (double)l->nparams;
    if (i == n - 1 && t->part == SCHED_PART_COST) w[i] += m->layers[n].type->flops_per_token(&m->layers[n]);
  }
  int *given = NULL, rc = CORE_OK;
  if (t->part == SCHED_PART_EXPLICIT) {
    /* the log shows the loss as the last piece's last layer (layers 0..n): the last boundary may
     * count it (n + 1) or not (n, the loss joining the last piece); the same cut either way */
    const char *loss = m->layers[n].name;
    int nb = core_config_list_len(t->cfg, "pipeline.boundaries");
    char where[256];
    core_config_where(t->cfg, "pipeline.boundaries", -1, where, sizeof where);
    if (nb != k + 1)
      rc = core_error_set(CORE_EINPUT, "pipeline.boundaries holds %d entries; %d pieces (pipeline.stages x "
                          "pipeline.virtual_stages) need %d: 0, the cuts, and %d (or %d, counting the loss '%s') (%s)",
                          nb, k, k + 1, n, n + 1, loss, where);
    given = core_malloc(sizeof(int) * (size_t)(k + 1));
    for (int i = 0; i < nb && i <= k && !rc; i++) {
      int64_t b;
      rc = core_config_array_int(t->cfg, "pipeline.boundaries", i, &b);
      core_config_where(t->cfg, "pipeline.boundaries", i, where, sizeof where);
      if (!rc && (b < 0 || b > n + 1)) /* before narrowing to int: 2^32 + 1 must not pass as 1 */
        rc = core_error_set(CORE_EINPUT, "pipeline.boundaries[%d] = %lld is not a layer boundary in [0, %d] (%s)", i,
                            (long long)b, n + 1, where);
      else if (!rc && i > 0 && i < k && b >= n)
        rc = core_error_set(CORE_EINPUT, "pipeline.boundaries[%d] = %lld leaves the pieces after it no layer but the "
                            "loss '%s' (layer %d), which joins the last piece: a cut must be below %d (%s)", i,
                            (long long)b, loss, n, n, where);
      else if (!rc && (i == 0 ? b != 0 : i == k && b < n))
        rc = core_error_set(CORE_EINPUT, "pipeline.boundaries must start at 0 and end at %d (the layers before the "
                            "loss '%s', which joins the last piece) or %d (counting it); [%d] is %lld (%s)", n, loss,
                            n + 1, i, (long long)b, where);
      if (!rc) given[i] = (int)(b > n ? n : b);
    }
  }
  int *bounds = core_malloc(sizeof(int) * (size_t)(k + 1));
  if (!rc) rc = sched_partition(t->part, w, n, k, given, bounds);
  if (!rc) bounds[k] = m->n; /* the loss joins the last piece */
  free(w), free(given);
  if (rc) {
    free(bounds);
    return core_error_prefix("%s: partitioning the model", core_config_name(t->cfg));
  }
  *bounds_out = bounds;
  return CORE_OK;
}

/* Reads the config as `brigade train` would on as many ranks as it has stages. */
static int plan_read(const char *config, const char **sets, int nsets, train_cfg *t, int64_t *vocab) {
  pipe_train_opts o = {.config = config, .sets = sets, .nsets = nsets};
  core_config *probe;
  int64_t stages = 1;
  /* the config's own stage count stands in for the number of ranks */
  int rc = core_config_load(&probe, config);
  if (!rc) {
    for (int i = 0; i < nsets && !rc; i++) rc = core_config_set(probe, sets[i]);
    if (!rc) rc = core_config_get_int_range(probe, "pipeline.stages", 1, 1, 1 << 16, &stages);
    if (!rc) rc = core_config_get_int_range(probe, "model.vocab_size", 256, 1, 1 << 24, vocab);
    core_config_free(probe);
  }
  if (!rc) rc = train_read_config(t, &o, (int)stages);
  else memset(t, 0, sizeof *t);
  return rc;
}

int pipe_plan_config_shape(const char *config, const char **sets, int nsets, pipe_plan_shape *shape,
                           int *stages, int *batch) {
  train_cfg t;
  int64_t vocab;
  int rc = plan_read(config, sets, nsets, &t, &vocab);
  if (!rc) {
    *shape = (pipe_plan_shape){.family = t.family, .v = t.v, .m = t.m, .part = t.part,
                               .mem_limit = t.family == SCHED_ZB_AUTO ? (t.mem_limit > 0 ? t.mem_limit : t.stages) : 0,
                               .zero_stage = t.zero_stage, .keep_gathered = t.keep_gathered, .prefetch = t.prefetch};
    *stages = t.stages, *batch = t.B * t.m;
  }
  core_config_free(t.cfg);
  return rc;
}

void train_stage_costs(const train_cfg *t, const layers_model *m, const int *bounds, double gflops, double *f,
                       double *b, double *w) {
  double tokens = (double)t->B * m->T;
  for (int s = 0; s < t->stages * t->v; s++) {
    double fl = 0;
    for (int i = bounds[s]; i < bounds[s + 1]; i++) fl += m->layers[i].type->flops_per_token(&m->layers[i]);
    f[s] = fl * tokens / (gflops * 1e9); /* seconds */
    b[s] = w[s] = f[s];                  /* backward = twice the forward, half each */
    if (t->ckpt_act) b[s] += f[s];       /* checkpointing recomputes the forward */
  }
}

/* One slot of virtual stage s as the trainer lays it out: its bytes (both parts) and the
 * fraction a pending W keeps (the home part; checkpointing keeps no W pending: 1). */
static void stage_slot(const train_cfg *t, const layers_model *m, const int *bounds, int s, int shared, double *bytes,
                       double *w_stash) {
  int lo = bounds[s], hi = bounds[s + 1];
  if (t->ckpt_act) {
    double N = (double)t->B * m->T, in = m->layers[lo].type->input != LAYER_IN_TOKENS ? N * m->layers[lo].in_width : 0;
    *bytes = 4 * (2 * in + 2 * N * m->layers[hi - 1].out_width), *w_stash = 1;
    return;
  }
  size_t home, aside;
  layers_slot_parts(m, lo, hi, t->B, shared, &home, &aside, NULL);
  *bytes = 4.0 * (double)(home + aside);
  *w_stash = home + aside ? (double)home / (double)(home + aside) : 1;
}

/* The W stash fraction the compilers budget with: the largest of the stages' (a split backward
 * never shares its buffers). */
static double compile_w_stash(const train_cfg *t, const layers_model *m, const int *bounds) {
  double ws = 0;
  for (int s = 0; s < t->stages * t->v; s++) {
    double bytes, w;
    stage_slot(t, m, bounds, s, 0, &bytes, &w);
    ws = w > ws ? w : ws;
  }
  return ws > 0 ? ws : 1;
}

int train_pv_eager(const train_cfg *t) { return t->post_validation && !(t->opt.clip > 0) && t->precision != 2; }

sched_step_sync train_step_sync(const train_cfg *t, const sched_program *prog) {
  return train_pv_eager(t) ? SCHED_STEP_EAGER : sched_program_step_sync(prog);
}

sched_shape train_shape(const train_cfg *t, const layers_model *m) {
  sched_shape sh = {.family = t->family, .p = t->stages, .v = t->v, .m = t->m, .max_pending_w = t->max_pending_w,
                    .mem_limit = t->mem_limit, .zero3 = t->zero_stage == 3, .keep_gathered = t->keep_gathered,
                    .prefetch = t->zero_stage == 3 ? t->prefetch : 0,
                    /* on the CPU, activations are host memory already: nothing to offload */
                    .offload = t->backend && strcmp(t->backend, "cpu") == 0 ? SCHED_OFFLOAD_NONE : t->act_offload,
                    .offload_limit = t->memory_limit,
                    /* post-validation checks the last update inside the next step (VALIDATE), but
                     * ZeRO-1/2 across replicas all-gather the updated shards only once it is
                     * checked: there the check stays at the step's end */
                    .post_validation = t->post_validation && !train_pv_eager(t) &&
                                       !(t->d > 1 && (t->zero_stage == 1 || t->zero_stage == 2))};
  for (int i = 0; m && i < m->n; i++) sh.tied |= m->layers[i].tied_to >= 0;
  return sh;
}

int train_check_size(const train_cfg *t, const sched_shape *sh) {
  static const char *const names[3] = {"pipeline.stages", "pipeline.virtual_stages", "gradient_accumulation_steps"};
  sched_size sz;
  sched_size_estimate(sh, t->sim_steps, t->events, &sz);
  int ranks = t->ranks > 1 ? t->ranks : 1;
  sz.bytes *= ranks; /* every rank of this machine compiles the whole program */
  int rc = sched_size_check(sh, &sz, &t->lim, names);
  if (rc && ranks > 1)
    core_error_prefix("%s: %d ranks of this machine each compile the program", core_config_name(t->cfg), ranks);
  else if (rc)
    core_error_prefix("%s", core_config_name(t->cfg));
  return rc;
}

/* The copy rate a plan priced at `gflops` gives an offload copy: the ratio of copy to compute
 * the placement assumed (pipeline.offload_gbps beside compute at pipeline.offload_gflops, in
 * train_compile), kept at the plan's own compute rate, so that the copies hide in the simulation
 * as they did where they were placed. At gflops = offload_gflops it is offload_gbps itself. */
static double plan_copy_gbps(const train_cfg *t, double gflops) {
  return t->offload_gbps * gflops / t->offload_gflops;
}

int train_compile(const train_cfg *t, const layers_model *m, const int *bounds, sched_program *out) {
  sched_shape sh = train_shape(t, m);
  int rc = train_check_size(t, &sh);
  if (rc) return rc;
  int S = t->stages * t->v;
  double *fbw = core_calloc(3 * (size_t)S, sizeof(double));
  train_stage_costs(t, m, bounds, 1.0, fbw, fbw + S, fbw + 2 * S);
  sched_costs costs = {.stage_f = fbw, .stage_b = fbw + S, .stage_w = fbw + 2 * S,
                       .w_stash = compile_w_stash(t, m, bounds)};
  double *slot = NULL;
  if (t->act_offload) { /* copies of each stage's slot, in the costs' unit (compute at 1 GFLOP/s) */
    slot = core_calloc((size_t)S, sizeof(double));
    for (int s = 0; s < S; s++) {
      double ws;
      stage_slot(t, m, bounds, s, 0, &slot[s], &ws);
    }
    costs.stage_act_bytes = slot, costs.offload_gbps = plan_copy_gbps(t, 1.0);
  }
  rc = sched_compile(&sh, &costs, out);
  free(fbw), free(slot);
  return rc ? core_error_prefix("%s: pipeline", core_config_name(t->cfg)) : CORE_OK;
}

/* Floats of one activation slot of the chunk [lo, hi): the layout layers_chunk_init allocates
 * (shared: after layers_chunk_share_backward), computed without allocating it. */
static double slot_floats(const layers_model *m, int lo, int hi, int B, int shared) {
  return (double)layers_slot_floats(m, lo, hi, B, shared, NULL);
}

/* Whether the trainer shares the chunks' backward buffers (as pipe/train.c decides): when no
 * backward of the program is split and there is no checkpointing. */
static int shares_backward(const train_cfg *t, const sched_program *prog) {
  return !t->ckpt_act && !sched_program_splits_backward(prog);
}

/* Parameters of virtual stage s, and those of its layers that hold a tied weight (ZeRO-2 keeps
 * their gradients whole: the embedding when the model ties, and the tied head). */
static void stage_params(const layers_model *m, const int *bounds, int s, int tied, double *n, double *kept) {
  *n = *kept = 0;
  for (int i = bounds[s]; i < bounds[s + 1]; i++) {
    if (m->layers[i].tied_to >= bounds[s]) continue; /* a head sharing its stage's wte holds no copy */
    double np = (double)m->layers[i].nparams;
    *n += np;
    if (tied && (i == 0 || m->layers[i].tied_to >= 0)) *kept += np;
  }
}

/* ZeRO-2 and 3 with d replicas: each micro-batch's weight gradient waits for its reduce-scatter
 * (only for what the W itself does not hide, with overlap_comm), at hw->dp_gbps GB/s per rank.
 * ZeRO-3 also: each chunk's parameter all-gather (its GATHER_PARAMS, on the rank's
 * communication lane), and the bytes of one gathered chunk for the memory model. */
static void plan_dp_w(const train_cfg *t, const layers_model *m, const int *bounds, int tied,
                      const pipe_plan_hw *hw, pipe_plan *out) {
  int S = t->stages * t->v, d = hw->d > 1 ? hw->d : 1;
  double bw = hw->dp_gbps > 0 ? hw->dp_gbps * 1e9 : 0;
  out->dp_w = core_calloc((size_t)S, sizeof(double));
  for (int s = 0; s < S && t->zero_stage >= 2 && bw > 0 && d > 1; s++) {
    double n, kept;
    stage_params(m, bounds, s, tied, &n, &kept);
    double rs = 4 * (n - kept) * (d - 1) / d / bw;
    out->dp_w[s] = t->overlap_comm ? (rs > out->w[s] ? rs - out->w[s] : 0) : rs;
  }
  out->gather = core_calloc((size_t)S, sizeof(double));
  out->param_bytes = core_calloc((size_t)S, sizeof(double));
  for (int s = 0; s < S && t->zero_stage == 3; s++) {
    double n, kept;
    stage_params(m, bounds, s, tied, &n, &kept);
    out->param_bytes[s] = 4 * n;
    out->gather[s] = bw > 0 && d > 1 ? 4 * n * (d - 1) / d / bw : 0;
  }
}

/* The per-rank memory model and the step's data-parallel tail for d replicas under ZeRO stage
 * t->zero_stage: stage 0's all-reduce or stage 1's reduce-scatter (ZeRO-2 and 3: the kept
 * layers' all-reduce) at REDUCE_GRADS, the parameter all-gather (stages 1, 2) at
 * OPTIMIZER_STEP. */
/* Virtual stage s's chunk with d replicas under ZeRO stage t->zero_stage: its parameters n (and
 * those of layers holding a tied weight, kept) and the gradient floats it holds, as
 * zero_grad_bytes counts them: the full buffer (ZeRO-1: with the shard's accumulator and the
 * reduce-scatter's padded staging), or ZeRO-2's accumulator, buckets and kept layers. */
static void chunk_grads(const train_cfg *t, const layers_model *m, const int *bounds, int s, int tied, int d, double *n,
                        double *kept, double *grads) {
  double largest = 0;
  int zs = t->zero_stage;
  stage_params(m, bounds, s, tied, n, kept);
  for (int i = bounds[s]; i < bounds[s + 1]; i++)
    if (!(tied && (i == 0 || m->layers[i].tied_to >= 0)) && (double)m->layers[i].nparams > largest)
      largest = (double)m->layers[i].nparams;
  double cap = (double)t->bucket_floats > largest ? (double)t->bucket_floats : largest;
  if (cap > *n - *kept) cap = *n - *kept;
  *grads = zs == 0 ? *n : zs == 1 ? *n + ceil(*n / d) * (d + 2) : ceil(*n / d) + (t->overlap_comm ? 2 : 1) * cap + *kept;
}

static void plan_ranks(const train_cfg *t, const layers_model *m, const int *bounds, int tied,
                       const pipe_plan_hw *hw, pipe_plan *out) {
  int d = hw->d > 1 ? hw->d : 1, zs = t->zero_stage;
  double frac = (double)(d - 1) / d, bw = hw->dp_gbps > 0 ? hw->dp_gbps * 1e9 : 0;
  out->state_bytes = core_calloc((size_t)t->stages, sizeof(double));
  for (int r = 0; r < t->stages; r++) {
    double N = 0, K = 0, grads = 0, ws = 0, pshards = 0;
    for (int c = 0; c < t->v; c++) {
      int s = out->prog.stage_of[r * t->v + c];
      double n, kept, g;
      size_t bwd = 0;
      if (t->ckpt_act) ws += 4 * slot_floats(m, bounds[s], bounds[s + 1], t->B, 0); /* the workspace */
      else if (shares_backward(t, &out->prog)) layers_slot_floats(m, bounds[s], bounds[s + 1], t->B, 1, &bwd);
      ws += 4.0 * (double)bwd; /* the shared backward buffers */
      chunk_grads(t, m, bounds, s, tied, d, &n, &kept, &g);
      N += n, K += kept, grads += g;
      pshards += ceil(n / d);
    }
    double shard = zs >= 1 ? ceil(N / d) : N;
    /* parameters (ZeRO-3: the shards; the gather buffers are the simulator's peak_gather_bytes),
     * gradients, AdamW's two moments (and the fp32 master under bf16/fp16), and under activation
     * checkpointing each chunk's workspace */
    out->state_bytes[r] = 4 * ((zs == 3 ? pshards : N) + grads + 2 * shard + (t->precision ? shard : 0)) + ws;
    if (bw > 0 && d > 1) {
      double reduce = zs == 0 ? 2 * 4 * N * frac / bw : zs == 1 ? 4 * N * frac / bw : 2 * 4 * K * frac / bw;
      double gather = zs == 1 || zs == 2 ? 4 * N * frac / bw : 0; /* ZeRO-3 gathers in the step */
      if (reduce > out->costs.reduce) out->costs.reduce = reduce;
      if (gather > out->costs.step) out->costs.step = gather;
    }
  }
}

static int plan_build(const char *config, const char **sets, int nsets, const pipe_plan_hw *hw,
                      const pipe_plan_shape *shape, pipe_plan *out) {
  double gflops = hw->gflops;
  memset(out, 0, sizeof *out);
  train_cfg t;
  int64_t vocab = 256;
  int rc = plan_read(config, sets, nsets, &t, &vocab);
  t.lim = hw->limits, t.sim_steps = hw->sim_steps, t.events = hw->events, t.ranks = 1;
  if (!rc && shape) {
    int batch = t.B * t.m;
    if (shape->m < 1 || batch % shape->m != 0)
      rc = core_error_set(CORE_EINPUT, "%d micro-batches do not divide the per-replica batch of %d sequences",
                          shape->m, batch);
    t.family = shape->family, t.v = shape->v, t.part = shape->part;
    /* the family's own post-validation default, unless the config sets it (train_cfg took the
     * config's family's) */
    if (!core_config_has(t.cfg, "optimizer.post_validation"))
      t.post_validation = sched_default_step_sync(t.family) == SCHED_STEP_POST_VALIDATION;
    if (!sched_family_is_zb(t.family)) t.max_pending_w = 0;
    if (t.family != SCHED_ZB_AUTO) t.mem_limit = 0;
    else if (shape->mem_limit > 0) t.mem_limit = shape->mem_limit;
    if (!rc) t.m = shape->m, t.B = batch / shape->m;
    if (shape->set_zero)
      t.zero_stage = shape->zero_stage, t.keep_gathered = shape->zero_stage == 3 && shape->keep_gathered,
      t.prefetch = shape->prefetch;
  }
  if (rc) {
    core_config_free(t.cfg);
    return rc;
  }
  layers_model m = {0};
  int *bounds = NULL;
  rc = layers_model_build(&m, t.cfg, (int)vocab);
  const layer_type *block = layers_find_type("transformer_block");
  for (int i = 0; !rc && shape && shape->recompute && i < m.n; i++)
    if (m.layers[i].type == block) m.layers[i].recompute_gelu = m.layers[i].recompute_layernorm = 1;
  if (!rc) layers_model_size_attention(&m, t.backend, t.precision, t.B); /* slots as the trainer's */
  if (!rc) rc = train_cut_model(&t, &m, &bounds);
  int S = t.stages * t.v, tied = 0;
  for (int i = 0; i < m.n; i++) tied |= m.layers[i].tied_to >= 0;
  if (!rc) { /* the program the trainer runs; the prices below are this machine's */
    out->f = core_calloc((size_t)S, sizeof(double));
    out->b = core_calloc((size_t)S, sizeof(double));
    out->w = core_calloc((size_t)S, sizeof(double));
    train_stage_costs(&t, &m, bounds, gflops, out->f, out->b, out->w);
    t.d = hw && hw->d > 1 ? hw->d : 1; /* the replicas the run would have (where post-validation checks) */
    rc = train_compile(&t, &m, bounds, &out->prog);
    if (!rc) out->step_sync = train_step_sync(&t, &out->prog), out->offload = train_shape(&t, &m).offload;
  }
  if (!rc) {
    int shared = shares_backward(&t, &out->prog);
    out->slot_bytes = core_calloc((size_t)S, sizeof(double));
    out->w_stash = core_calloc((size_t)S, sizeof(double));
    for (int s = 0; s < S; s++) {
      stage_slot(&t, &m, bounds, s, shared, &out->slot_bytes[s], &out->w_stash[s]);
      out->act_bytes = out->slot_bytes[s] > out->act_bytes ? out->slot_bytes[s] : out->act_bytes;
    }
    plan_dp_w(&t, &m, bounds, tied, hw, out);
    out->costs = (sched_costs){.stage_f = out->f, .stage_b = out->b, .stage_w = out->w, .stage_dp_w = out->dp_w,
                               .act_bytes = out->act_bytes, .w_stash = compile_w_stash(&t, &m, bounds),
                               .stage_act_bytes = out->slot_bytes, .stage_w_stash = out->w_stash,
                               .stage_gather = out->gather, .stage_param_bytes = out->param_bytes,
                               .offload_gbps = plan_copy_gbps(&t, gflops)};
    out->offload_gbps = out->costs.offload_gbps, out->offload_gflops = t.offload_gflops;
  }
  if (!rc) {
    out->stages = t.stages, out->v = t.v, out->m = t.m, out->B = t.B;
    out->family = t.family, out->part = t.part, out->zero_stage = t.zero_stage;
    out->params = out->params_twice = layers_model_params(&m);
    for (int i = 0; i < m.n; i++) /* a tied head's weight is its embedding's (held twice only across ranks) */
      if (m.layers[i].tied_to >= 0) out->params -= m.layers[i].nparams;
    plan_ranks(&t, &m, bounds, tied, hw, out);
  }
  free(bounds);
  if (m.built) layers_model_free(&m);
  core_config_free(t.cfg);
  if (rc) { /* the program is not ours to free: sched_compile cleans up after itself */
    free(out->f), free(out->b), free(out->w), free(out->dp_w), free(out->slot_bytes), free(out->w_stash);
    free(out->gather), free(out->param_bytes);
    memset(out, 0, sizeof *out);
  }
  return rc;
}

int pipe_plan_build_shape(const char *config, const char **sets, int nsets, double gflops,
                          const pipe_plan_shape *shape, pipe_plan *out) {
  pipe_plan_hw hw = {.gflops = gflops, .d = 1};
  return plan_build(config, sets, nsets, &hw, shape, out);
}

int pipe_plan_build_shape_hw(const char *config, const char **sets, int nsets, const pipe_plan_hw *hw,
                             const pipe_plan_shape *shape, pipe_plan *out) {
  return plan_build(config, sets, nsets, hw, shape, out);
}

int pipe_plan_build(const char *config, const char **sets, int nsets, const pipe_plan_hw *hw, pipe_plan *out) {
  return plan_build(config, sets, nsets, hw, NULL, out);
}

double pipe_plan_rank_peak(const pipe_plan *p, const sched_sim_result *res, int r) {
  return p->state_bytes[r] + res->ranks[r].peak_bytes + res->ranks[r].peak_gather_bytes;
}

void pipe_plan_free(pipe_plan *p) {
  sched_program_free(&p->prog);
  free(p->f), free(p->b), free(p->w), free(p->dp_w), free(p->state_bytes), free(p->slot_bytes), free(p->w_stash);
  free(p->gather), free(p->param_bytes);
  memset(p, 0, sizeof *p);
}

/* ---- what training allocates, before it allocates it ---- */

void train_rank_memory(const train_cfg *t, const layers_model *m, const int *bounds, const sched_program *prog,
                       const sched_program *eval, int r, train_mem *out) {
  memset(out, 0, sizeof *out);
  int tied = 0, d = t->d > 1 ? t->d : 1, zs = t->zero_stage, shared = shares_backward(t, prog);
  for (int i = 0; i < m->n; i++) tied |= m->layers[i].tied_to >= 0;
  int nslots = prog->nslots[r], naside = prog->naslots[r];
  if (eval && eval->p == prog->p && eval->nslots[r] > nslots) nslots = eval->nslots[r];
  if (eval && eval->p == prog->p && eval->naslots[r] > naside) naside = eval->naslots[r];
  nslots = nslots > 0 ? nslots : 1, naside = naside > 0 ? naside : 1;
  double N = (double)t->B * m->T, largest = 0, startup = 0;
  for (int c = 0; c < t->v; c++) {
    int s = prog->stage_of[r * t->v + c], lo = bounds[s], hi = bounds[s + 1];
    double n, kept, grads;
    chunk_grads(t, m, bounds, s, tied, d, &n, &kept, &grads);
    double shard = zs >= 1 ? ceil(n / d) : n;
    out->params += 4 * (zs == 3 ? shard : n);
    largest = n > largest ? n : largest;
    startup = 4 * (zs == 3 ? shard : n) > startup ? 4 * (zs == 3 ? shard : n) : startup;
    for (int i = lo; i < hi; i++) /* a tied head beside its embedding: its own gradient buffer */
      if (m->layers[i].tied_to >= lo) out->grads += 4.0 * (double)m->layers[i].nparams;
    out->grads += 4 * grads;
    out->optim += 4 * shard * (2 + (t->precision || t->offload ? 1 : 0)); /* two moments, the fp32 master */
    size_t home, aside, bwd = 0;
    double scratch = 0;
    if (t->ckpt_act) { /* a slot: the input and the output's gradient, its aside part their mirror; one workspace */
      const layer *f = &m->layers[lo], *l = &m->layers[hi - 1];
      double io = (f->type->input != LAYER_IN_TOKENS ? N * f->in_width : 0) + N * l->out_width;
      out->acts += 4 * (io * nslots + io * naside + (double)layers_slot_floats(m, lo, hi, t->B, 0, NULL));
    } else {
      layers_slot_parts(m, lo, hi, t->B, shared, &home, &aside, shared ? &bwd : NULL);
      out->acts += 4 * ((double)home * nslots + (double)aside * naside + (double)bwd);
    }
    out->acts += 2 * 4 * N * nslots; /* token ids and targets */
    for (int i = lo; i < hi; i++) {
      double sc = (double)m->layers[i].type->scratch_floats(&m->layers[i], t->B, m->T);
      scratch = sc > scratch ? sc : scratch;
    }
    out->other += 4 * scratch + 4 * N + n; /* scratch, the losses read back, the decay mask */
  }
  if (zs == 3) out->params += 4 * largest * (prog->gather_limit > 0 ? prog->gather_limit : 1); /* gather buffers */
  double instr = (double)sched_program_count(prog) + (eval && eval->p == prog->p ? (double)sched_program_count(eval) : 0);
  out->program = sizeof(sched_instr) * instr, out->startup = startup;
  out->other += out->program + startup; /* and the start-up copy of a chunk's initial parameters */
  out->total = out->params + out->grads + out->optim + out->acts + out->other;
  /* on a GPU (backend "cuda") the buffers are device memory: the host keeps the programs, the
   * start-up copy and, offloaded, the optimizer state */
  int device = strcmp(t->backend ? t->backend : "cpu", "cuda") == 0;
  out->host = device ? out->other + (t->offload ? out->optim : 0) : out->total;
}

/* "model.d_model = 65536 (configs/x.cfg:15)", or "(the default)" */
static void key_str(const core_config *c, const char *key, double value, char *buf, size_t n) {
  char w[256];
  if (core_config_where(c, key, -1, w, sizeof w)) snprintf(w, sizeof w, "the default");
  snprintf(buf, n, "%s = %.0f (%s)", key, value, w);
}

int train_check_memory(const train_cfg *t, const layers_model *m, const int *bounds, const sched_program *prog,
                       const sched_program *eval, const int *stages_here, int n, double data) {
  if (!(t->lim.max_bytes > 0)) return CORE_OK;
  double sum = 0, worst = -1;
  train_mem w = {0}, e;
  int wr = 0;
  for (int i = 0; i < n; i++) {
    train_rank_memory(t, m, bounds, prog, eval, stages_here[i], &e);
    e.data = data, e.other += data, e.total += data, e.host += data;
    sum += e.host;
    if (e.host > worst) worst = e.host, w = e, wr = stages_here[i];
  }
  if (sum <= t->lim.max_bytes) return CORE_OK;
  char all[32], lim[32], one[32], pa[32], gr[32], op[32], ac[32], ot[32], k1[400], k2[400], k3[400], why[1400];
  core_mem_str(sum, all, sizeof all), core_mem_str(t->lim.max_bytes, lim, sizeof lim);
  core_mem_str(w.host, one, sizeof one), core_mem_str(w.params, pa, sizeof pa), core_mem_str(w.grads, gr, sizeof gr);
  core_mem_str(w.optim, op, sizeof op), core_mem_str(w.acts, ac, sizeof ac), core_mem_str(w.other, ot, sizeof ot);
  /* the keys that drive the largest part */
  double state = w.params + w.grads + w.optim + w.startup, params = 0;
  for (int c = 0; c < t->v; c++) {
    int s = prog->stage_of[wr * t->v + c];
    for (int i = bounds[s]; i < bounds[s + 1]; i++) params += (double)m->layers[i].nparams;
  }
  if (w.data > state && w.data > w.acts && w.data > w.program) {
    char where[256];
    if (core_config_where(t->cfg, "data.path", -1, where, sizeof where)) snprintf(where, sizeof where, "the default");
    snprintf(why, sizeof why, "the tokens of data.path = \"%s\" (%s), which every rank loads whole, are the largest part",
             t->data_path, where);
  } else if (state >= w.acts && state >= w.program) {
    key_str(t->cfg, "model.d_model", m->C, k1, sizeof k1);
    key_str(t->cfg, "model.vocab_size", m->V, k2, sizeof k2);
    snprintf(why, sizeof why, "the parameters and their gradients and optimizer state (%.4g %s parameters on stage %d, "
             "of the model's %d layers) grow with %s (a transformer block holds about 12 d_model^2), the layers of "
             "model.layers and %s; more pipeline.stages, zero_optimization.stage or a smaller model lower them",
             params >= 1e9 ? params / 1e9 : params / 1e6, params >= 1e9 ? "G" : "M", wr, m->n, k1, k2);
  } else if (w.acts >= w.program) {
    key_str(t->cfg, "train_micro_batch_size_per_gpu", t->B, k1, sizeof k1);
    key_str(t->cfg, "model.seq_len", m->T, k2, sizeof k2);
    key_str(t->cfg, "model.d_model", m->C, k3, sizeof k3);
    snprintf(why, sizeof why, "the activations (%d slot%s on stage %d, as pipeline.schedule \"%s\" keeps them) grow with "
             "%s, %s (attention keeps seq_len^2 per head) and %s; a smaller micro-batch or activation_checkpointing "
             "lower them", prog->nslots[wr], prog->nslots[wr] == 1 ? "" : "s", wr, sched_family_name(t->family), k1, k2,
             k3);
  } else {
    key_str(t->cfg, "pipeline.stages", t->stages, k1, sizeof k1);
    key_str(t->cfg, "gradient_accumulation_steps", t->m, k2, sizeof k2);
    snprintf(why, sizeof why, "the schedule's program (%.4g instructions) grows with %s x %s",
             (double)sched_program_count(prog), k1, k2);
  }
  int machine = strncmp(t->lim.mem_what, "this machine", 12) == 0;
  /* the parts are this message's own: kept whole (a %s without precision is cut, core/error.h) */
  return core_error_set(CORE_EINPUT, "%s: training needs about %.40s on this machine (%d rank%s), more than the memory "
                        "limit, %.40s (%.100s%s), estimated before allocating: stage %d alone needs %.40s (parameters "
                        "%.40s, gradients %.40s, optimizer state %.40s, activations %.40s, other %.40s); %.700s",
                        core_config_name(t->cfg), all, n, n == 1 ? "" : "s", lim, t->lim.mem_what,
                        machine ? "; --max-memory or BRIGADE_MAX_MEMORY sets a lower one" : "", wr, one, pa, gr, op, ac,
                        ot, why);
}
