/* pipe/plan.h: a training config's program and FLOP-based cost model, without running it. */
#ifndef BRIGADE_PIPE_PLAN_H
#define BRIGADE_PIPE_PLAN_H

#include <stddef.h>

#include "schedule/partition.h"
#include "schedule/schedule.h"

typedef struct {
  sched_program prog;
  sched_costs costs; /* per-virtual-stage times in seconds at the given GFLOP/s; act_bytes set */
  double *f, *b, *w, *dp_w; /* [stages * v]: seconds; dp_w: ZeRO-2's exposed reduce-scatter per W */
  int stages, v, m, B; /* B: sequences per micro-batch */
  sched_family family;
  sched_part_method part;
  int zero_stage; /* the config's zero_optimization.stage (or the shape's) */
  size_t params, params_twice; /* the model's parameters, a tied weight counted once; and twice */
  double act_bytes;    /* bytes of one activation slot of the largest chunk (as layers_chunk_slot_bytes) */
  double *slot_bytes, *w_stash; /* [stages * v]: each chunk's slot bytes, and the part a pending W keeps
                                 * (costs.stage_act_bytes, stage_w_stash: the memory model) */
  double *state_bytes; /* [stages]: parameters (ZeRO-3: the shards), gradients (ZeRO-2 and 3: shard,
                          buckets, kept layers), AdamW's two moments and the fp32 master (sharded by
                          ZeRO 1-3) */
  double *gather, *param_bytes; /* [stages * v]: ZeRO-3's all-gather time of each chunk and its bytes
                                 * gathered (costs.stage_gather, stage_param_bytes); 0 otherwise */
  sched_step_sync step_sync; /* how the run's steps meet at the optimizer (its post-validation) */
  int offload; /* the sched_offload_mode the program was compiled with (none on the CPU backend) */
  /* the rate a copy is priced at (costs.offload_gbps): pipeline.offload_gbps scaled from the
   * compute rate the placement assumed (pipeline.offload_gflops) to the plan's */
  double offload_gbps, offload_gflops;
} pipe_plan;

/* What the tuner varies, instead of the config's pipeline.* and batch keys: the family, chunks
 * per rank, micro-batches per step (m must divide the config's per-replica batch
 * train_micro_batch_size_per_gpu x gradient_accumulation_steps, which stays fixed: the
 * micro-batch size becomes that batch / m) and the partition method. */
typedef struct {
  sched_family family;
  int v, m;
  sched_part_method part;
  double mem_limit; /* zb-auto: its memory limit in stages' activations per rank (0: the config's, or p) */
  /* set_zero: the ZeRO stage (zero_optimization.stage) and, at stage 3, keep_gathered
   * (!zero_optimization.reshard_after_forward) and prefetch instead of the config's */
  int set_zero, zero_stage, keep_gathered, prefetch;
  /* recompute: every transformer_block runs its GELU and LayerNorms again for the weight
   * gradients (recompute_gelu and recompute_layernorm on) rather than keep their outputs */
  int recompute;
} pipe_plan_shape;

/* The machine a plan is priced for: compute speed of a rank, data-parallel replicas of each
 * stage, and gradient bandwidth per rank for the data-parallel collectives (0: free). */
typedef struct {
  double gflops;
  int d;
  double dp_gbps;
  /* what the program may take (sched_size_check; zeroed: no limits), and the steps its
   * simulation will run and whether it records events (they count in the estimate) */
  sched_limits limits;
  int sim_steps, events;
} pipe_plan_hw;

/* Reads the config (with --set overrides) as `brigade train` would, cuts the model, compiles
 * the schedule (train_compile: the program the trainer runs, whatever hw says), and prices each
 * virtual stage's forward at its FLOPs / gflops (backward: I and W each as much again). The
 * config's stage count gives the ranks of one pipeline; hw->d replicas of it add ZeRO's
 * collectives (per the config's zero_optimization) to the prices and shard the memory model. */
int pipe_plan_build(const char *config, const char **sets, int nsets, const pipe_plan_hw *hw, pipe_plan *out);
/* The same with the shape given (shape NULL: the config's own) and d = 1. */
int pipe_plan_build_shape(const char *config, const char **sets, int nsets, double gflops,
                          const pipe_plan_shape *shape, pipe_plan *out);
/* The same with the machine given (hw->d replicas under the shape's or the config's ZeRO stage). */
int pipe_plan_build_shape_hw(const char *config, const char **sets, int nsets, const pipe_plan_hw *hw,
                             const pipe_plan_shape *shape, pipe_plan *out);
/* The config's own shape (its ZeRO stage and policy too, set_zero left 0), stage count and
 * per-replica batch, without building anything. */
int pipe_plan_config_shape(const char *config, const char **sets, int nsets, pipe_plan_shape *shape,
                           int *stages, int *batch);
/* Peak memory of rank r after a simulation: state_bytes[r] + its peak activation bytes (+ the
 * chunks it holds gathered at once, ZeRO-3). */
double pipe_plan_rank_peak(const pipe_plan *p, const sched_sim_result *res, int r);
void pipe_plan_free(pipe_plan *p);

#endif
