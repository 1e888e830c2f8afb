/* pipe/train_internal.h: what the files of the training loop share. */
#ifndef BRIGADE_PIPE_TRAIN_INTERNAL_H
#define BRIGADE_PIPE_TRAIN_INTERNAL_H

#include "core/config.h"
#include "pipe/runner.h"
#include "pipe/train.h"
#include "schedule/partition.h"
#include "schedule/schedule.h"
#include "zero/lr.h"

typedef struct {
  core_config *cfg;
  int B, m, d, steps, print_every, eval_interval, eval_batches, threads;
  int T; /* model.seq_len, read here once: B*T is bounded with the batch keys */
  uint64_t seed;
  const char *data_path, *val_path, *backend;
  double val_fraction;
  double timeout; /* seconds a rank waits for a peer before failing the run */
  sched_family family;
  int stages, v;
  sched_part_method part;
  const char *ckpt_dir;
  int ckpt_interval;
  const char *trace_path;
  int trace_step;
  int trace_step_auto; /* trace.step unset: the run's second step (moved past a resumed step) */
  int zero_stage;
  int post_validation;  /* optimizer.post_validation: eager updates, rolled back where clipping/a skip applies */
  int max_pending_w;    /* pipeline.max_pending_w (zb-* families; 0 = the family's default) */
  double mem_limit;     /* pipeline.mem_limit (zb-auto; stages' activations per rank, 0 = p) */
  /* activation offload: pipeline.offload (a sched_offload_mode), pipeline.memory_limit (auto's
   * per-rank limit in stages' activations), and the copy bandwidth (GB/s) and compute rate
   * (GFLOP/s) the placement assumes (pipeline.offload_gbps, pipeline.offload_gflops) */
  int act_offload;
  double memory_limit, offload_gbps, offload_gflops;
  size_t bucket_floats; /* zero_optimization.reduce_bucket_size (elements) */
  int overlap_comm;     /* zero_optimization.overlap_comm */
  int keep_gathered;    /* stage 3: !zero_optimization.reshard_after_forward */
  int prefetch;         /* stage 3: zero_optimization.prefetch (runs of ops ahead) */
  int offload;          /* zero_optimization.offload_optimizer.device = "cpu" */
  int sequential;       /* data.order = "sequential" */
  int ckpt_act; /* activation checkpointing */
  int precision; /* 0 fp32, 1 bf16, 2 fp16 */
  double loss_scale, min_scale;
  int dynamic_scale, scale_window, hysteresis;
  pipe_optim opt;
  zero_lr lr;
  /* what the training program may take (train_compile refuses a shape over it; zeroed: no
   * limits), counted for `ranks` processes of this machine building it at once, and whether its
   * simulation records events */
  sched_limits lim;
  int ranks, sim_steps, events; /* the steps a simulation of it runs, and whether it records events */
} train_cfg;

int train_read_config(train_cfg *t, const pipe_train_opts *o, int world);
/* Settings a user may mean but likely does not (a warm-up longer than the run, a cosine that ends
 * before it, a warm-up the schedule has none of), logged as warnings; world rank 0 calls it once. */
void train_cfg_warn(const train_cfg *t);
/* The schema of a training config (for core_config_check; the fuzz target uses it too). */
const core_config_key *train_cfg_schema(size_t *n);
/* Cuts the model into stages x virtual stages pieces (*bounds: [p*v + 1], caller frees); the
 * loss layer rides with the layer before it. */
int train_cut_model(const train_cfg *t, const layers_model *m, int **bounds);
/* The FLOP cost model of each virtual stage ([p*v] each), in seconds at gflops GFLOP/s: F = the
 * FLOPs per token of its layers x the tokens of a micro-batch; the backward's input and weight
 * halves as much again each; activation checkpointing adds a forward to the input half. */
void train_stage_costs(const train_cfg *t, const layers_model *m, const int *bounds, double gflops, double *f,
                       double *b, double *w);
/* The training program of the config (compiled, lowered, verified): the one `brigade train`
 * runs and `brigade sim CONFIG` and the tuner price. Every family compiles under the stages'
 * FLOP model (train_stage_costs) at a fixed 1 GFLOP/s: the zero-bubble families place their
 * W's by it and lowering times every family's transfers by it. The machine (--gflops, --dp,
 * ZeRO's collectives) changes what the simulator charges for the ops, never the program. */
int train_compile(const train_cfg *t, const layers_model *m, const int *bounds, sched_program *out);
/* The training program's shape (train_compile's), and the check of its size against t->lim
 * (sched_size_check, naming pipeline.stages, pipeline.virtual_stages and
 * gradient_accumulation_steps), before anything is built. */
sched_shape train_shape(const train_cfg *t, const layers_model *m);
/* Post-validation with nothing for the norm to decide (no clipping, no fp16 loss scaling): each
 * rank updates and goes on, never waiting for the norm, and no update is ever redone. */
int train_pv_eager(const train_cfg *t);
/* How the run's steps meet at the optimizer: eager, post-validation (the program checks in the
 * next step), or a barrier. */
sched_step_sync train_step_sync(const train_cfg *t, const sched_program *prog);
int train_check_size(const train_cfg *t, const sched_shape *sh);

/* What stage r's rank allocates for training (one of t->d replicas), from the config, the model,
 * the cut and the compiled programs (their slot counts; eval may be NULL), before anything is
 * allocated: the layout layers_chunk_init, zero_init and the runner will make. */
typedef struct {
  double params;  /* the chunks' parameters (ZeRO-3: the shards and the gather buffers) */
  double grads;   /* gradient buffers as zero_grad_bytes counts them, and a tied head's own */
  double optim;   /* the optimizer's two moments (SGD's too) and the fp32 master (mixed precision, offload) */
  double acts;    /* activation slots and aside parts, shared backward buffers or the checkpointing
                   * workspace, token ids and targets */
  double other;   /* scratch, the programs, the start-up copy of a chunk's initial parameters, the data */
  double program; /* of other: the programs' instructions */
  double startup; /* of other: the start-up copy */
  double data;    /* of other: the tokens loaded (train_check_memory's `data`) */
  double total;
  double host;    /* of total, in host memory: all of it but on backend "cuda" */
} train_mem;
void train_rank_memory(const train_cfg *t, const layers_model *m, const int *bounds, const sched_program *prog,
                       const sched_program *eval, int r, train_mem *out);
/* CORE_EINPUT when the ranks of this machine (their stages: stages_here[0..n-1]) need more host
 * memory than t->lim.max_bytes, each also holding `data` bytes (the tokens it has loaded; counted
 * in other); the message gives the estimate by part and names the keys that drive the largest. */
int train_check_memory(const train_cfg *t, const layers_model *m, const int *bounds, const sched_program *prog,
                       const sched_program *eval, const int *stages_here, int n, double data);

#endif
