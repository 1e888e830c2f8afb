/* pipe/train.c: set-up and the step loop. */
#include "pipe/train.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/progress.h"
#include "core/watch.h"
#include "pipe/ckpt.h"
#include "pipe/ckpt_model.h"
#include "pipe/hfst.h"
#include "pipe/llmc.h"
#include "pipe/sample.h"
#include "pipe/trainer.h"
#include "zero/devcomm.h"

/* The training program's micro-batch 0 on this replica, as a global micro-batch: data rank r
 * draws micro-batches r*m .. r*m + m - 1 of the step's global batch. */
static long train_mb0(const trainer *tr) { return (long)tr->topo.data * tr->cfg.m; }

static int cut_model(trainer *tr) { return train_cut_model(&tr->cfg, &tr->model, &tr->bounds); }

static float *grad_dest(void *z, size_t off, size_t n) { return zero_grad_dest(z, off, n); }

/* ZeRO-2: the chunk gives up its gradient buffer; weight gradients go to the buckets, or to
 * the kept range of a layer holding a tied weight. */
static int stage2_buffers(pipe_runner *rn, int ch, const train_cfg *c) {
  layers_chunk *k = &rn->chunks[ch];
  zero_buffer *z = &rn->zb[ch];
  size_t largest = 0;
  for (int i = 0; i < k->n; i++)
    if (!zero_kept(z, k->param_off[i], k->param_off[i] + k->layers[i].nparams) && k->layers[i].nparams > largest)
      largest = k->layers[i].nparams;
  int rc = zero_buckets(z, c->bucket_floats, c->overlap_comm, largest);
  if (rc) return rc;
  layers_chunk_external_grads(k, grad_dest, z);
  for (int i = 0; i < k->n; i++)
    if (i != k->tied_head) /* a head sharing wte keeps its own gradient buffer */
      k->layers[i].grads = zero_kept(z, k->param_off[i], k->param_off[i] + k->layers[i].nparams);
  return CORE_OK;
}

/* ZeRO-3: the initial values of this replica's shard of chunk ch, drawn alone (no rank ever
 * holds a chunk's whole parameters outside a gather buffer). */
static int init_shard(pipe_runner *rn, int ch, uint64_t seed) {
  zero_buffer *z = &rn->zb[ch];
  float *host = core_calloc(z->shard, sizeof(float));
  layers_chunk_param_values(&rn->chunks[ch], seed, z->lo, z->hi, host);
  z->ops->to_device(z->pshard, host, sizeof(float) * (z->hi - z->lo));
  free(host);
  rn->param_live += sizeof(float) * (double)z->shard;
  rn->param_peak = rn->param_live;
  return CORE_OK;
}

/* --init-from: every chunk's parameters (its ZeRO-3 shard only) read from an llm.c checkpoint or
 * a Hugging Face GPT-2 model.safetensors (told apart by their first bytes), each rank reading
 * just its own layers' values; the optimizer starts fresh at step 0. */
static int init_from_file(trainer *tr, const char *path) {
  pipe_llmc lh;
  pipe_hfst hh;
  int st = pipe_hfst_sniff(path);
  int rc = st ? pipe_hfst_open(&hh, path) : pipe_llmc_open(&lh, path);
  if (!rc) rc = st ? pipe_hfst_check_model(&hh, &tr->model) : pipe_llmc_check_model(&lh, &tr->model);
  for (int c = 0; c < tr->cfg.v && !rc; c++) {
    layers_chunk *k = &tr->rn.chunks[c];
    zero_buffer *z = &tr->rn.zb[c];
    size_t lo = 0, hi = k->nparams; /* the values this rank holds */
    if (z->stage == 3) lo = z->lo, hi = z->hi;
    float *host = core_calloc(hi - lo + 1, sizeof(float));
    for (int i = 0; i < k->n && !rc; i++) {
      if (i == k->tied_head) continue; /* a view of the embedding's wte */
      size_t a = k->param_off[i], b = a + k->layers[i].nparams;
      if (a < lo) a = lo;
      if (b > hi) b = hi;
      if (b <= a) continue;
      size_t from = a - k->param_off[i], to = b - k->param_off[i];
      rc = st ? pipe_hfst_read_layer(&hh, &tr->model, k->lo + i, from, to, host + (a - lo))
              : pipe_llmc_read_layer(&lh, &tr->model, k->lo + i, from, to, host + (a - lo));
      for (size_t q = a; q < b && !rc && !tr->allow_nonfinite; q++)
        if (!isfinite(host[q - lo]))
          rc = core_error_set(CORE_EINPUT, "%s: layer %d ('%s') holds %g at its value %zu (--allow-nonfinite takes it)",
                              path, k->lo + i, k->layers[i].name, (double)host[q - lo], q - k->param_off[i]);
    }
    if (!rc) z->ops->to_device(z->stage == 3 ? z->pshard : k->params, host, sizeof(float) * (hi - lo));
    free(host);
  }
  if (st) pipe_hfst_close(&hh);
  else pipe_llmc_close(&lh);
  return rc ? core_error_prefix("--init-from") : CORE_OK;
}

static double lr_at(const void *ctx, long updates) { return zero_lr_at(ctx, updates); }

static int setup_runner(trainer *tr) {
  pipe_runner *rn = &tr->rn;
  const train_cfg *c = &tr->cfg;
  const kernels_ops *ops;
  int rc = kernels_get_ops(c->backend, &ops);
  if (rc) { /* the same on every rank: report it as the config's problem, exit 2, no abort */
    char w[256];
    core_config_where(c->cfg, "backend", -1, w, sizeof w);
    core_error_prefix("backend (%s)", w);
    return CORE_EINPUT;
  }
  ops->matmul_half(c->precision); /* mixed precision: GEMMs on 16-bit units where there are any */
  memset(rn, 0, sizeof *rn);
  rn->topo = &tr->topo, rn->v = c->v, rn->data = &tr->data, rn->seed = c->seed, rn->opt = c->opt;
  rn->post_validation = c->post_validation, rn->pv_eager = train_pv_eager(c);
  rn->lr_at = lr_at, rn->lr_ctx = &c->lr;
  rn->timeout_s = c->timeout;
  rn->offload = c->offload, rn->opt_ops = c->offload ? kernels_cpu_ops() : ops; /* ZeRO-Offload: the host's table */
  rn->chunks = core_calloc((size_t)c->v, sizeof(layers_chunk));
  rn->zb = core_calloc((size_t)c->v, sizeof(zero_buffer));
  rn->opt_m = core_calloc((size_t)c->v, sizeof(float *));
  rn->opt_v = core_calloc((size_t)c->v, sizeof(float *));
  rn->decay = core_calloc((size_t)c->v, sizeof(uint8_t *));
  int mmax = c->m > c->eval_batches ? c->m : c->eval_batches, r = tr->topo.stage;
  rn->slot_of = core_calloc((size_t)c->v * (size_t)mmax, sizeof(int));
  rn->tied_emb_chunk = rn->tied_head_chunk = rn->tied_head_layer = -1;
  for (int ch = 0; ch < c->v && !rc; ch++) {
    int s = tr->prog.stage_of[r * c->v + ch];
    int eslots = tr->eval_n ? tr->eval_prog.nslots[r] : 0, easide = tr->eval_n ? tr->eval_prog.naslots[r] : 0;
    int slots = tr->prog.nslots[r] > eslots ? tr->prog.nslots[r] : eslots;
    int aside = tr->prog.naslots[r] > easide ? tr->prog.naslots[r] : easide;
    rc = (c->zero_stage == 3 ? layers_chunk_init_sharded : layers_chunk_init)(
        &rn->chunks[ch], &tr->model, tr->bounds[s], tr->bounds[s + 1], ops, c->B, tr->model.T, slots);
    if (rc) break;
    layers_chunk *k = &rn->chunks[ch];
    rc = layers_chunk_aside_pool(k, aside);
    if (rc) break;
    if (c->ckpt_act) rc = layers_chunk_checkpoint(k);
    else if (!sched_program_splits_backward(&tr->prog)) rc = layers_chunk_share_backward(k);
    k->act_round = c->precision;
    if (!rc) rc = zero_init(&rn->zb[ch], c->zero_stage, tr->topo.dp, k->params, k->grads, k->nparams, ops);
    if (!rc && c->zero_stage == 3) rc = init_shard(rn, ch, c->seed);
    if (rc) break;
    rn->zb[ch].round = c->precision; /* ZeRO-2's buckets are gradient buffers too */
    size_t len = zero_state_len(&rn->zb[ch]);
    if (c->offload) rn->zb[ch].state_ops = rn->opt_ops; /* checkpoints find the state on the host */
    rn->opt_m[ch] = rn->opt_ops->alloc(sizeof(float) * (len ? len : 1));
    rn->opt_v[ch] = rn->opt_ops->alloc(sizeof(float) * (len ? len : 1));
    if (!rn->opt_m[ch] || !rn->opt_v[ch]) {
      rc = core_error_set(CORE_ERUNTIME, "%s: out of memory for the optimizer state (%zu floats)",
                          c->offload ? "host (offload_optimizer)" : ops->name, len);
      break;
    }
    rn->decay[ch] = core_malloc(k->nparams ? k->nparams : 1);
    for (int i = 0; i < k->n; i++) {
      layers_decay_mask(&k->layers[i], rn->decay[ch] + k->param_off[i]);
      if (k->layers[i].tied_to >= 0) {
        rn->head_tied = 1, rn->tied_head_chunk = ch, rn->tied_head_layer = i;
        if (!rc && i != k->tied_head) /* no copy of its own when it shares the embedding's wte */
          rc = zero_keep(&rn->zb[ch], k->param_off[i], k->param_off[i] + k->layers[i].nparams);
        if (!rc && i != k->tied_head) /* its twin: the embedding's wte */
          rc = zero_tie(&rn->zb[ch], k->param_off[i], k->param_off[i] + (size_t)k->layers[i].V * k->layers[i].C);
      }
    }
    if (s == 0) rn->tied_emb_chunk = ch;
  }
  for (int i = 0; i < tr->model.n; i++) rn->head_tied |= tr->model.layers[i].tied_to >= 0;
  if (rn->head_tied && rn->tied_emb_chunk >= 0) { /* the embedding (its wte) holds the other tied copy */
    const layers_chunk *e = &rn->chunks[rn->tied_emb_chunk];
    if (!rc) rc = zero_keep(&rn->zb[rn->tied_emb_chunk], 0, e->layers[0].nparams);
    if (!rc && (rn->tied_head_chunk != rn->tied_emb_chunk || e->tied_head < 0)) /* a twin elsewhere: wte, [V, C] first */
      rc = zero_tie(&rn->zb[rn->tied_emb_chunk], 0, (size_t)e->layers[0].V * e->layers[0].C);
  }
  for (int ch = 0; ch < c->v && !rc && c->zero_stage >= 2; ch++) rc = stage2_buffers(rn, ch, c);
  if (!rc && c->zero_stage == 3) { /* as many gather buffers as either program holds gathered */
    int limit = tr->prog.gather_limit;
    if (tr->eval_n && tr->eval_prog.gather_limit > limit) limit = tr->eval_prog.gather_limit;
    rc = pipe_runner_gather_pool(rn, limit);
  }
  rn->grad_scale_base = rn->grad_scale = 1.0f / (float)((double)c->m * c->B * tr->model.T * c->d);
  rn->precision = c->precision, rn->loss_scale = c->loss_scale, rn->dynamic_scale = c->dynamic_scale;
  rn->scale_window = c->scale_window, rn->hysteresis = rn->hyst_left = c->hysteresis, rn->min_scale = c->min_scale;
  if (!rc && tr->init_from) rc = init_from_file(tr, tr->init_from); /* before the masters copy them */
  if (!rc) rc = pipe_runner_init_master(rn);
  pipe_runner_use(rn, &tr->prog, train_mb0(tr));
  return rc;
}

/* The training program, the one `brigade sim CONFIG` prices (train_compile: every family under
 * the stages' FLOP model), and the forward-only evaluation program on the same placement (every
 * rank's forwards in micro-batch order; nothing predicts it, and its transfers are placed under
 * unit costs). An evaluation is train.eval_batches global micro-batches, split among the d
 * replicas in contiguous shares, so its loss is the same whatever d is; a replica whose share is
 * empty (fewer batches than replicas) has no evaluation program. At ZeRO-3 the forwards go stage
 * by stage, so each rank gathers each of its chunks once, in stage order, as a replica without a
 * share does too (pipe_runner_join_gathers): the group's all-gathers match. */
static int compile_programs(trainer *tr) {
  const train_cfg *c = &tr->cfg;
  int rc = train_compile(c, &tr->model, tr->bounds, &tr->prog), S = c->stages * c->v;
  for (int i = 0; !rc && i < tr->prog.streams[0].len; i++) tr->pv_program |= tr->prog.streams[0].ins[i].op == SCHED_VALIDATE;
  if (rc) return rc;
  long E = c->eval_batches, r = tr->topo.data, d = c->d;
  tr->eval_lo = (int)(r * E / d), tr->eval_n = (int)((r + 1) * E / d - r * E / d);
  if (!tr->eval_n) return CORE_OK;
  sched_costs unit = sched_costs_unit();
  sched_program ev;
  rc = sched_program_init(&ev, SCHED_INFERENCE, c->stages, c->v, tr->eval_n, tr->prog.stage_of);
  if (rc) return rc;
  ev.forward_only = 1;
  if (c->zero_stage == 3) /* stage by stage: one run of forwards per chunk, so every replica
                           * gathers each chunk once, in stage order, whatever its share */
    for (int s = 0; s < S; s++)
      for (int j = 0; j < tr->eval_n; j++) sched_push_action(&ev, SCHED_FORWARD, s, j);
  else
    for (int j = 0; j < tr->eval_n; j++)
      for (int s = 0; s < S; s++) sched_push_action(&ev, SCHED_FORWARD, s, j);
  rc = sched_lower(&ev, &unit, &tr->eval_prog);
  if (!rc && c->zero_stage == 3) rc = sched_place_gathers(&tr->eval_prog, c->keep_gathered, c->prefetch);
  if (!rc) rc = sched_verify(&tr->eval_prog);
  sched_program_free(&ev);
  return rc;
}

/* On a device backend, the pipeline's transfers go through the table's device communicator
 * (NCCL send/recv) when every rank of the pipeline has a GPU of its own, else over MPI through
 * host copies; zero/devcomm.h decides, the same way on every rank of the pipeline. */
static int setup_transfers(trainer *tr) {
  const kernels_ops *ops = tr->rn.chunks[0].ops;
  if (!ops->device_memory || tr->topo.p < 2) return CORE_OK;
  int rc = zero_devcomm_join(ops, tr->topo.pipe, "pipeline transfers", "pipeline", &tr->pcomm, tr->pipe_why,
                             sizeof tr->pipe_why);
  if (rc || !tr->pcomm) return rc;
  rc = pipe_worker_use_device(&tr->worker, ops->coll, tr->pcomm);
  if (!rc && tr->eval_n) rc = pipe_worker_use_device(&tr->eval_worker, ops->coll, tr->pcomm);
  return rc;
}

/* Before anything large is allocated: what the ranks of this machine will hold (their stages'
 * parameters, gradients, optimizer state, activation slots and the rest, train_rank_memory)
 * against the memory limit. Every rank of a machine adds up the same ranks, so they agree. */
static int check_memory(trainer *tr) {
  int n = 0, *stages = core_malloc(sizeof(int) * (size_t)tr->topo.world_size);
  const char *me = pipe_topo_host(&tr->topo, tr->topo.world_rank);
  for (int r = 0; r < tr->topo.world_size; r++) /* the ranks of this node: every rank's node name is known */
    if (strcmp(pipe_topo_host(&tr->topo, r), me) == 0) stages[n++] = r / tr->topo.d;
  double data = sizeof(uint16_t) * ((double)tr->data.n + (tr->data.val_tok ? (double)tr->data.n_val : 0));
  int rc = train_check_memory(&tr->cfg, &tr->model, tr->bounds, &tr->prog, tr->eval_n ? &tr->eval_prog : NULL, stages,
                              n, data);
  free(stages);
  return rc;
}

/* Set-up's failures may be some ranks' only (a file one machine lacks): before the next
 * collective step every rank learns whether any failed, so none waits in it for one that left.
 * mark: the others' failure is to be reported by the failing ranks themselves (peer_failed tells
 * agree_start); without it (the lock, which only rank 0 takes) rank 0 reports as for the config. */
static int peer_failed; /* set-up stopped here for another rank's failure, not this rank's own */
static int agreed(int rc, int mark) {
  int bad = rc != CORE_OK, any = bad, world;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (world > 1) MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any && !rc) rc = core_error_set(CORE_EINPUT, "another rank failed to start (its error is reported there)"), peer_failed = mark;
  return rc;
}

/* checkpoint.dir has one writer: world rank 0 takes DIR/.lock before anything else is set up,
 * and every rank learns at once whether it did (a refused run trains nothing, and its other ranks
 * go no further either). */
static int take_lock(trainer *tr) {
  int rc = CORE_OK;
  if (tr->cfg.ckpt_dir && tr->topo.world_rank == 0) {
    char note[1400];
    rc = pipe_ckpt_lock_take(&tr->lock, tr->cfg.ckpt_dir, note, sizeof note);
    if (!rc && note[0]) core_log(CORE_LOG_WARN, "checkpoint.dir: %s", note);
    if (rc) { /* the config line that set the directory */
      char w[256];
      core_config_where(tr->cfg.cfg, "checkpoint.dir", -1, w, sizeof w);
      core_error_prefix("checkpoint.dir (%s)", w);
    }
  }
  return agreed(rc, 0);
}

/* Whether path can be written, before the first step rather than after the last: opened for
 * writing (created, and removed again, if it was not there). */
static int writable(const char *path, const char *key, const core_config *cfg) {
  int existed = access(path, F_OK) == 0;
  int fd = open(path, O_WRONLY | O_CREAT | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd >= 0) {
    close(fd);
    if (!existed) unlink(path);
    return CORE_OK;
  }
  char w[256];
  core_config_where(cfg, key, -1, w, sizeof w);
  return core_error_set(CORE_EINPUT, "%s: cannot write %s: %s (%s)", key, path, strerror(errno), w);
}

/* The files the run writes, checked at start-up: trace.path (and its .svg) on world rank 0,
 * which writes them; checkpoint.dir on the other ranks that write rank files (rank 0 made it,
 * taking its lock). */
static int check_outputs(trainer *tr) {
  const train_cfg *c = &tr->cfg;
  int rc = CORE_OK;
  /* the longest path a save writes (pipe_ckpt_writer's 1024 bytes, its temporary name's 1040):
   * refused now, not at the first save after hours of training */
  size_t most = c->ckpt_dir ? strlen(c->ckpt_dir) + sizeof "/step_0000000000.saving/rank_00000.ckpt.2147483647.tmp" : 0;
  if (most > 1040) {
    char w[256];
    core_config_where(c->cfg, "checkpoint.dir", -1, w, sizeof w);
    return core_error_set(CORE_EINPUT, "checkpoint.dir is %zu characters; a save's file names need at most %zu (%s)",
                          strlen(c->ckpt_dir), 1040 - (most - strlen(c->ckpt_dir)), w);
  }
  if (c->trace_path && tr->topo.world_rank == 0) {
    char *svg = core_str_join(c->trace_path, ".svg");
    rc = writable(c->trace_path, "trace.path", c->cfg);
    if (!rc) rc = writable(svg, "trace.path", c->cfg);
    free(svg);
  }
  if (rc || !c->ckpt_dir || tr->topo.world_rank == 0 || tr->topo.data != 0) return rc;
  struct stat st;
  const char *why = stat(c->ckpt_dir, &st) != 0           ? strerror(errno)
                    : !S_ISDIR(st.st_mode)                 ? "not a directory"
                    : access(c->ckpt_dir, W_OK | X_OK) != 0 ? strerror(errno)
                                                           : NULL;
  if (!why) return CORE_OK;
  char w[256];
  core_config_where(c->cfg, "checkpoint.dir", -1, w, sizeof w);
  return core_error_set(CORE_EINPUT, "checkpoint.dir %s cannot be written from rank %d: %s (%s)", c->ckpt_dir,
                        tr->topo.world_rank, why, w);
}

static int setup(trainer *tr, const pipe_train_opts *o) {
  int world;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int rc = train_read_config(&tr->cfg, o, world);
  if (!rc && !tr->cfg.data_path) /* training's own: sim and tune read no data */
    rc = core_error_set(CORE_EINPUT, "%s: data.path is missing (a text or token file)", core_config_name(tr->cfg.cfg));
  rc = agreed(rc, 1); /* pipe_topo_init is collective */
  if (!rc) rc = pipe_topo_init(&tr->topo, MPI_COMM_WORLD, tr->cfg.stages);
  if (!rc) rc = core_mem_limit_get(o->max_memory, &tr->mem);
  if (rc) return rc;
  tr->cfg.lim = (sched_limits){.max_instructions = o->max_instructions, .instr_name = "--max-instructions",
                               .max_bytes = tr->mem.bytes, .mem_what = tr->mem.what};
  tr->cfg.ranks = tr->topo.local_size, tr->cfg.sim_steps = 1; /* report_memory simulates one step */
  kernels_set_local_rank(tr->topo.local_rank); /* before the backend picks its GPU */
  core_log_set_rank(world > 1 ? tr->topo.world_rank : -1);
  rc = take_lock(tr); /* collective: every rank learns whether rank 0 got the lock */
  if (rc) return rc;
  /* from here to agreed() below, this rank's own work: no early return, so that every rank
   * reaches the agreement whatever failed where */
  rc = check_outputs(tr);
  if (!rc) kernels_cpu_init(tr->cfg.threads);
  /* The model's own mistakes (an unknown layer type, a width heads do not divide) come before
   * the data's: the layer list is checked once with the smallest vocabulary the data could
   * have, then built for real once the data says its vocabulary. */
  layers_model probe = {0};
  if (!rc) rc = layers_model_build(&probe, tr->cfg.cfg, 1);
  layers_model_free(&probe);
  if (!rc && (rc = pipe_data_open(&tr->data, tr->cfg.data_path, tr->cfg.val_path, tr->cfg.val_fraction, tr->cfg.T))) {
    const char *key = tr->data.failed_key ? tr->data.failed_key : "data"; /* the key whose file or value failed */
    char w[256];
    if (core_config_where(tr->cfg.cfg, key, -1, w, sizeof w) != CORE_OK && strcmp(key, "data.val_fraction") == 0)
      snprintf(w, sizeof w, "not set: its default, %g", tr->cfg.val_fraction); /* no line of the config says it */
    core_error_prefix("%s (%s)", key, w);
  }
  if (!rc) tr->data.sequential = tr->cfg.sequential, tr->data.per_step = (long)tr->cfg.m * tr->cfg.d;
  for (int sp = 0; !rc && tr->cfg.sequential && sp < 2; sp++) { /* in order, a micro-batch is B x T tokens in a row */
    size_t n = sp ? tr->data.n_val : tr->data.n_train, bt = (size_t)tr->cfg.B * (size_t)tr->cfg.T;
    char w[256];
    core_config_where(tr->cfg.cfg, "data.order", -1, w, sizeof w);
    if ((sp == 0 || (n > 0 && tr->cfg.eval_interval > 0)) && n < bt + 1)
      rc = core_error_set(CORE_EINPUT, "data.order = \"sequential\" (%s) reads each micro-batch as %zu tokens in a row "
                          "(train_micro_batch_size_per_gpu %d x model.seq_len %d), but the %s split of %s holds %zu, "
                          "fewer than that plus the last target (a batch would wrap around the file's end inside itself)",
                          w, bt, tr->cfg.B, tr->cfg.T, sp ? "validation" : "training",
                          sp && tr->cfg.val_path && *tr->cfg.val_path ? tr->cfg.val_path : tr->cfg.data_path, n);
  }
  if (!rc && tr->cfg.eval_interval > 0 && tr->data.n_val == 0)
    rc = core_error_set(CORE_EINPUT, "train.eval_interval is set but the data has no validation split (data.val_fraction "
                        "= %g leaves it no token of the %zu, and there is no data.val_path)", tr->cfg.val_fraction, tr->data.n);
  if (!rc) rc = layers_model_build(&tr->model, tr->cfg.cfg, tr->data.vocab);
  if (!rc) layers_model_size_attention(&tr->model, tr->cfg.backend, tr->cfg.precision, tr->cfg.B);
  if (!rc) rc = pipe_tokenizer_check(tr->cfg.cfg, tr->model.V); /* `sample` will use them: found now, not after training */
  if (!rc) tr->desc = pipe_ckpt_model_describe(tr->cfg.cfg, &tr->model);
  if (!rc) rc = cut_model(tr);
  if (!rc) rc = compile_programs(tr);
  if (!rc) rc = check_memory(tr);
  rc = agreed(rc, 1); /* the data, the model and the program were this rank's own; what follows is not */
  if (!rc) rc = setup_runner(tr);
  if (!rc) rc = pipe_worker_init(&tr->worker, &tr->prog, tr->topo.stage, tr->topo.pipe, pipe_runner_exec(&tr->rn));
  if (!rc && tr->eval_n) rc = pipe_worker_init(&tr->eval_worker, &tr->eval_prog, tr->topo.stage, tr->topo.pipe, pipe_runner_exec(&tr->rn));
  if (!rc) rc = setup_transfers(tr);
  tr->worker.timeout_s = tr->eval_worker.timeout_s = tr->cfg.timeout;
  tr->worker.progress = tr->eval_worker.progress = tr->topo.world_rank == 0;
  if (!rc) { /* a peer that stops answering is named with its node: on several machines, which one went */
    tr->peer_names = core_malloc((size_t)tr->topo.p * sizeof *tr->peer_names);
    for (int q = 0; q < tr->topo.p; q++) {
      int r = q * tr->topo.d + tr->topo.data;
      tr->peer_names[q] = core_malloc(PIPE_HOST_LEN + 48);
      snprintf(tr->peer_names[q], PIPE_HOST_LEN + 48, "rank %d (stage %d) on %s", r, q, pipe_topo_host(&tr->topo, r));
    }
    tr->worker.peer_names = tr->eval_worker.peer_names = (const char *const *)tr->peer_names;
  }
  if (!rc && o->log_json && tr->topo.world_rank == 0 && !(tr->log_json = fopen(o->log_json, "w")))
    rc = core_error_set(CORE_EINPUT, "cannot write --log-json %s: %s", o->log_json, strerror(errno));
  return rc;
}

/* Mean loss per position over the global micro-batches of a step (training: m of every
 * replica; evaluation: eval_batches in all), known on every rank. */
static double mean_loss(trainer *tr, long global_mb) {
  double s = pipe_runner_loss_sum(&tr->rn), total = 0;
  core_watch_begin("the loss's all-reduce");
  MPI_Allreduce(&s, &total, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  core_watch_end();
  return total / ((double)global_mb * tr->cfg.B * tr->model.T);
}

static int evaluate(trainer *tr, double *val) {
  tr->rn.split = PIPE_VAL, tr->rn.step = 0, tr->rn.loss_sum = 0;
  int rc = CORE_OK;
  if (tr->eval_n) { /* a replica with no share adds nothing to the sum */
    pipe_runner_use(&tr->rn, &tr->eval_prog, tr->eval_lo);
    if (tr->topo.world_rank == 0) {
      core_progress_start("evaluation");
      core_progress_phase("rank 0 at micro-batch", tr->eval_n, "");
    }
    rc = pipe_worker_step(&tr->eval_worker);
    if (tr->topo.world_rank == 0) core_progress_stop();
  } else if (tr->cfg.zero_stage == 3) { /* ... but joins its group's parameter gathers */
    rc = pipe_runner_join_gathers(&tr->rn);
  }
  if (!rc) *val = mean_loss(tr, tr->cfg.eval_batches); /* collective: not after a failed step */
  tr->rn.split = PIPE_TRAIN;
  pipe_runner_use(&tr->rn, &tr->prog, train_mb0(tr));
  return rc;
}

/* The traced step's origin in this rank's MPI_Wtime: stage 0's clock when the pipeline leaves a
 * barrier, carried over by the offset between stage 0's clock and this rank's. MPI_Wtime counts
 * from each process's own origin (Open MPI's differ by tens of ms), so raw times put the ranks'
 * events out of order. The offset: of 8 round trips to stage 0, the shortest's midpoint against
 * the time stage 0 sent (Cristian's method: off by at most half that trip, microseconds on one
 * machine). On a communicator of its own, so that nothing the worker posts can match. */
static double trace_origin(const trainer *tr) {
  MPI_Comm c;
  core_watch_begin("the traced step's clock synchronisation"); /* bounded by train.timeout, as a step's waits */
  MPI_Comm_dup(tr->topo.pipe, &c);
  int me = tr->topo.stage;
  double offset = 0; /* stage 0's clock minus this rank's */
  for (int q = 1; q < tr->topo.p; q++) {
    char ping = 0;
    double theirs = 0, best = 1e300;
    for (int k = 0; k < 8; k++) {
      if (me == 0) {
        MPI_Recv(&ping, 1, MPI_CHAR, q, k, c, MPI_STATUS_IGNORE);
        double now = MPI_Wtime();
        MPI_Send(&now, 1, MPI_DOUBLE, q, k, c);
      } else if (me == q) {
        double t1 = MPI_Wtime();
        MPI_Send(&ping, 1, MPI_CHAR, 0, k, c);
        MPI_Recv(&theirs, 1, MPI_DOUBLE, 0, k, c, MPI_STATUS_IGNORE);
        double t2 = MPI_Wtime();
        if (t2 - t1 < best) best = t2 - t1, offset = theirs - (t1 + t2) / 2;
      }
    }
  }
  MPI_Barrier(c);
  double base = MPI_Wtime(); /* stage 0's is the one kept */
  MPI_Bcast(&base, 1, MPI_DOUBLE, 0, c);
  MPI_Comm_free(&c);
  core_watch_end();
  return base - offset;
}

static int train_step(trainer *tr, long step, double *loss, double *ms) {
  pipe_runner *rn = &tr->rn;
  /* the schedule follows the updates made, as DeepSpeed's: a step skipped for an fp16 overflow
   * does not advance it */
  rn->step = step, rn->loss_sum = 0, rn->lr = zero_lr_at(&tr->cfg.lr, rn->opt_t);
  rn->grad_scale = (float)(rn->grad_scale_base * rn->loss_scale); /* fp16 scales the loss */
  sched_timeline tl;
  int tracing = tr->cfg.trace_path && step + 1 == tr->cfg.trace_step; /* 1-based, as logged */
  if (tracing) {
    sched_timeline_init(&tl, "", "s", tr->topo.p, tr->cfg.v, tr->cfg.m);
    tr->worker.tl = &tl;
    tr->worker.t0 = trace_origin(tr); /* one clock for the pipeline's ranks */
    core_watch_begin("the traced step's start (a barrier of every rank)");
    MPI_Barrier(MPI_COMM_WORLD);
    core_watch_end();
  }
  /* a long step says how far it is: rank 0's micro-batch, every few seconds (core/progress.h) */
  if (tr->topo.world_rank == 0) {
    core_progress_start("step %ld", step + 1);
    core_progress_phase("rank 0 at micro-batch", tr->cfg.m, "");
  }
  double t0 = MPI_Wtime();
  int rc = pipe_worker_step(&tr->worker);
  /* post-validation: the norm known, the update confirmed or redone; where the program checks it
   * in the next step (VALIDATE) the loop does so only before what needs it */
  if (!rc && !tr->pv_program && !rn->pv_eager) rc = pipe_runner_validate(rn);
  *ms = (MPI_Wtime() - t0) * 1e3;
  if (tr->topo.world_rank == 0) core_progress_stop();
  tr->worker.tl = NULL;
  if (!rc) *loss = mean_loss(tr, (long)tr->cfg.m * tr->cfg.d);
  if (tracing) {
    if (!rc) rc = train_write_trace(tr, &tl);
    sched_timeline_free(&tl);
  }
  return rc;
}

static void teardown(trainer *tr) {
  free(tr->act_report);
  tr->act_report = NULL;
  pipe_worker_free(&tr->worker);
  pipe_worker_free(&tr->eval_worker);
  /* the table the buffers came from (none allocated yet when the first chunk failed) */
  const kernels_ops *ops = tr->rn.chunks && tr->rn.chunks[0].ops ? tr->rn.chunks[0].ops : kernels_cpu_ops();
  if (tr->pcomm) ops->coll->comm_free(tr->pcomm);
  const kernels_ops *sops = tr->rn.opt_ops ? tr->rn.opt_ops : ops; /* the optimizer's: the host's when offloaded */
  for (int c = 0; c < tr->cfg.v && tr->rn.master; c++) sops->free(tr->rn.master[c]);
  for (int c = 0; c < tr->cfg.v && tr->rn.chunks; c++) {
    layers_chunk_free(&tr->rn.chunks[c]);
    zero_free(&tr->rn.zb[c]);
    sops->free(tr->rn.opt_m[c]), sops->free(tr->rn.opt_v[c]), free(tr->rn.decay[c]);
  }
  pipe_runner_free(&tr->rn);
  free(tr->rn.master);
  free(tr->rn.chunks), free(tr->rn.zb), free(tr->rn.opt_m), free(tr->rn.opt_v), free(tr->rn.decay), free(tr->rn.slot_of);
  sched_program_free(&tr->prog);
  sched_program_free(&tr->eval_prog);
  layers_model_free(&tr->model);
  pipe_data_free(&tr->data);
  free(tr->bounds);
  if (tr->log_json) fclose(tr->log_json);
  for (int q = 0; q < tr->topo.p && tr->peer_names; q++) free(tr->peer_names[q]);
  free(tr->peer_names);
  free(tr->desc);
  pipe_ckpt_lock_release(&tr->lock); /* after the last checkpoint */
  pipe_topo_free(&tr->topo);
  core_config_free(tr->cfg.cfg);
}

/* ---- stopping on a signal: the handler only notes it; the loop acts at a step's end ---- */

static volatile sig_atomic_t stop_signal;
static const int stop_signals[] = {SIGTERM, SIGINT, SIGUSR1};
enum { NSTOP = sizeof stop_signals / sizeof stop_signals[0] };

static void on_stop(int sig) {
  if (stop_signal) { /* the second one: no more waiting */
    signal(sig, SIG_DFL);
    raise(sig);
  }
  stop_signal = sig;
}

/* Until training starts the stop signals have their default action: set-up (a config read from
 * a FIFO, a checkpoint on a slow disk) ends at once with 128 + the signal rather than carrying on
 * to a step boundary, which a blocking open restarted after the handler (SA_RESTART) would never
 * reach. */
static void default_stops(struct sigaction *old) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = SIG_DFL;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < NSTOP; i++) sigaction(stop_signals[i], &sa, &old[i]);
}

/* From the first step on, a stop signal only notes itself (the loop stops at a step's end); the
 * step's waits restart after the handler. */
static void catch_stops(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  stop_signal = 0;
  for (int i = 0; i < NSTOP; i++) sigaction(stop_signals[i], &sa, NULL);
}

static void restore_stops(const struct sigaction *old) {
  for (int i = 0; i < NSTOP; i++) sigaction(stop_signals[i], &old[i], NULL);
}

static const char *stop_name(int sig) {
  return sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : sig == SIGUSR1 ? "SIGUSR1" : "a signal";
}

/* The signal any rank has received (the largest number), agreed by all at a step's end. */
static int agreed_stop(void) {
  int mine = stop_signal, any = 0;
  core_watch_begin("the step's end (every rank's stop signal, all-reduced)");
  MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  core_watch_end();
  return any;
}

/* Start-up failed on some ranks only (a --log-json only rank 0 opens, a checkpoint lacking the
 * layers of one stage): the others must not go on into the first step and wait there for ever
 * (in a collective) or until train.timeout. Every rank returns the worst status; those whose
 * own start-up succeeded do not report (*report = 0). */
static int agree_start(int rc, int *report) {
  /* the worst status; whether any rank got through set-up on its own (then the failing ranks'
   * errors are their own to print) */
  int mine[2] = {rc, rc == CORE_OK || peer_failed}, all[2];
  MPI_Allreduce(mine, all, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (report) *report = rc && all[1] ? 2 : 1;
  if (!all[0] || rc) return rc; /* no failure, or this rank's own */
  if (report) *report = 0;
  return core_error_set(all[0], "another rank failed to start (its error is reported there)");
}

/* Whether a --resume path (the directory, or one step directory in it) lies in dir. */
static int same_dir(const char *resume, const char *dir) {
  char a[PATH_MAX], b[PATH_MAX];
  if (!realpath(dir, b)) return 0; /* not there yet: not the one resumed from */
  if (!realpath(resume, a)) return 0;
  size_t n = strlen(b);
  return strncmp(a, b, n) == 0 && (a[n] == 0 || a[n] == '/');
}

int pipe_train(const pipe_train_opts *o) {
  trainer tr;
  memset(&tr, 0, sizeof tr);
  tr.init_from = o->init_from, tr.allow_nonfinite = o->allow_nonfinite;
  struct sigaction old[NSTOP];
  default_stops(old);
  int rc = setup(&tr, o), stopped = 0;
  long start = 0;
  if (!rc && o->resume) rc = pipe_ckpt_model_load(o->resume, &tr.rn, tr.desc, &tr.resumed);
  if (!rc && o->resume) start = tr.resumed.step;
  if (!rc && tr.cfg.trace_step_auto && start > 0) /* the second step this run takes, as a fresh run's */
    tr.cfg.trace_step = (int)(start + (tr.cfg.steps - start >= 2 ? 2 : 1));
  else if (!rc && tr.cfg.trace_path && tr.cfg.trace_step <= start) {
    char w[256];
    core_config_where(tr.cfg.cfg, "trace.step", -1, w, sizeof w);
    rc = core_error_set(CORE_EINPUT, "trace.step %d is not a step of this run, which resumes after step %ld (%s)",
                        tr.cfg.trace_step, start, w);
  }
  rc = agree_start(rc, o->report);
  if (!rc) train_announce(&tr, o->resume);
  if (!rc && tr.topo.world_rank == 0) train_cfg_warn(&tr.cfg);
  if (!rc) catch_stops(); /* set-up is over */
  /* from here a collective that waits past train.timeout for a rank that stopped answering ends
   * the job (the pipeline's messages poll against the same limit) */
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (!rc && world > 1 && core_watch_start(tr.cfg.timeout, tr.topo.world_rank) != 0 && tr.topo.world_rank == 0)
    core_log(CORE_LOG_WARN, "could not start the watchdog thread: a collective waiting on a stopped rank will not time out");
  /* No step to take: with a checkpoint.dir, the state as loaded is written in this run's layout
   * (the initial or imported weights at step 0; a resumed checkpoint reshaped to these stages,
   * replicas and ZeRO stage) unless it would be the very checkpoint it came from. */
  int reshape = !rc && start >= tr.cfg.steps && tr.cfg.ckpt_dir && !(o->resume && same_dir(o->resume, tr.cfg.ckpt_dir));
  if (!rc && tr.topo.world_rank == 0 && start >= tr.cfg.steps && o->resume && !reshape)
    core_log(CORE_LOG_WARN, "nothing to train: the checkpoint is at step %ld and train.steps is %d (raise train.steps "
             "to continue)", start, tr.cfg.steps);
  if (reshape) {
    rc = pipe_ckpt_model_save(tr.cfg.ckpt_dir, &tr.rn, &tr.topo, start, tr.cfg.cfg, tr.desc);
    if (!rc && tr.topo.world_rank == 0)
      core_log(CORE_LOG_INFO, "no step to take (train.steps = %d): wrote the %s state at step %ld to %s in this layout "
               "(%d stage(s) x %d replica(s), ZeRO stage %d)", tr.cfg.steps, o->resume ? "resumed" : "initial", start,
               tr.cfg.ckpt_dir, tr.cfg.stages, tr.cfg.d, tr.cfg.zero_stage);
  }
  if (!rc && tr.topo.world_rank == 0 && tr.cfg.ckpt_interval > 0 && !tr.cfg.ckpt_dir)
    core_log(CORE_LOG_WARN, "checkpoint.interval is %d but checkpoint.dir is not set: no checkpoint will be written",
             tr.cfg.ckpt_interval);
  if (!rc && start == 0 && tr.cfg.eval_interval > 0 && tr.cfg.steps > 0) { /* the weights before any update */
    double val = 0;
    rc = evaluate(&tr, &val);
    for (int c = 0; c < tr.cfg.v && !rc; c++) /* the first step's figures count from the first step */
      tr.rn.zb[c].bytes_param_gather = tr.rn.zb[c].bytes_gather = tr.rn.zb[c].bytes_reduce = 0;
    tr.rn.param_peak = tr.rn.param_live;
    if (!rc && tr.topo.world_rank == 0) {
      core_log(CORE_LOG_INFO, "step     0 | val loss %.6f (before the first update)", val);
      if (tr.log_json) { /* JSON has no NaN: a model that starts there logs null */
        if (isfinite(val)) fprintf(tr.log_json, "{\"step\":0,\"val_loss\":%.9g}\n", val);
        else fprintf(tr.log_json, "{\"step\":0,\"val_loss\":null}\n");
        fflush(tr.log_json);
      }
    }
  }
  step_record held = {0};
  for (long step = start; step < tr.cfg.steps && !rc && !stopped; step++) {
    double loss = 0, ms = 0, val = 0;
    rc = train_step(&tr, step, &loss, &ms);
    if (!rc && held.held) { /* checked in this step (its VALIDATE, or its update) */
      held.norm = tr.rn.pv_norm, held.skipped = tr.rn.pv_skipped, held.scale = tr.rn.pv_scale;
      train_log_step(&tr, &held), held.held = 0;
    }
    if (!rc && step == start) train_report_memory(&tr);
    int ev = !rc && tr.cfg.eval_interval > 0 && ((step + 1) % tr.cfg.eval_interval == 0 || step + 1 == tr.cfg.steps);
    if (!rc && step + 1 < tr.cfg.steps) stopped = agreed_stop();
    int save = tr.cfg.ckpt_dir && ((tr.cfg.ckpt_interval > 0 && (step + 1) % tr.cfg.ckpt_interval == 0) ||
                                   step + 1 == tr.cfg.steps || stopped);
    /* what reads the parameters, and the last step, need the update checked now */
    int later = tr.rn.pv_pending; /* an eager update whose check (or norm) comes in the next step */
    int check = later && (ev || save || stopped || step + 1 == tr.cfg.steps);
    if (!rc && check) rc = pipe_runner_validate(&tr.rn);
    if (!rc && ev) rc = evaluate(&tr, &val); /* (never over a failed check: its error stands) */
    step_record sr = {.step = step + 1, .loss = loss, .lr = tr.rn.lr, .ms = ms, .val = val, .has_val = ev,
                      .norm = tr.rn.grad_norm, .scale = tr.rn.loss_scale, .skipped = tr.rn.skipped};
    for (int c = 0; c < tr.cfg.v; c++) { /* the step's traffic now: a held record is printed after the next step's */
      zero_buffer *z = &tr.rn.zb[c];
      sr.dp_reduce += z->bytes_reduce, sr.dp_gather += z->bytes_gather, z->bytes_reduce = z->bytes_gather = 0;
    }
    if (!rc && later && !check) held = sr, held.held = 1;
    else if (!rc) train_log_step(&tr, &sr);
    if (!rc && save) rc = pipe_ckpt_model_save(tr.cfg.ckpt_dir, &tr.rn, &tr.topo, step + 1, tr.cfg.cfg, tr.desc);
    if (!rc && stopped && tr.topo.world_rank == 0 && tr.cfg.ckpt_dir)
      core_log(CORE_LOG_WARN, "stopped by %s after step %ld of %d; checkpoint written to %s (continue with --resume %s)",
               stop_name(stopped), step + 1, tr.cfg.steps, tr.cfg.ckpt_dir, tr.cfg.ckpt_dir);
    else if (!rc && stopped && tr.topo.world_rank == 0)
      core_log(CORE_LOG_WARN, "stopped by %s after step %ld of %d; no checkpoint.dir, so nothing was saved",
               stop_name(stopped), step + 1, tr.cfg.steps);
  }
  if (!rc && tr.rn.post_validation && tr.topo.world_rank == 0 && tr.rn.rollbacks > 0)
    core_log(CORE_LOG_INFO, "post-validation: %ld update(s) redone after the global norm or overflow check (clipping "
             "fired or a step was skipped)", tr.rn.rollbacks);
  core_watch_stop();
  teardown(&tr);
  restore_stops(old);
  if (o->stopped_by) *o->stopped_by = stopped;
  return rc;
}
