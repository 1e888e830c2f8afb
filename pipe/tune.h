/* pipe/tune.h: a memory-aware schedule tuner. For a training config it tries every schedule
 * family, chunk count, micro-batch count (within the config's per-replica batch), partition
 * method and, with data-parallel replicas, ZeRO stage and reshard policy, predicts each one's step time and per-rank peak memory with pipe_plan and
 * the simulator, and ranks those that fit a memory limit. */
#ifndef BRIGADE_PIPE_TUNE_H
#define BRIGADE_PIPE_TUNE_H

#include <stddef.h>

#include "pipe/plan.h"

typedef struct {
  pipe_plan_shape shape;
  int B;              /* sequences per micro-batch: the per-replica batch / m */
  double time;        /* predicted step time in seconds (the steady state of 4 simulated steps) */
  double bubble_rate;
  double peak_bytes;  /* peak memory of the worst rank */
  int worst_rank;
} pipe_tune_cand;

typedef struct {
  int stages, batch;    /* the config's stage count and per-replica batch (fixed) */
  pipe_plan_shape own;  /* the config's own shape */
  int tried;            /* candidates compiled and simulated */
  int uncut;            /* shapes the model cannot be cut into (more pieces than layers) */
  int too_large;        /* shapes skipped as over the limits (hw->limits), estimated before building */
  int skipped_m;        /* the least micro-batch count among them (0: none skipped) */
  double least_skipped; /* the fewest instructions among them */
  int recomputed;       /* candidates over the limit tried again with the blocks recomputing (in tried) */
  int fitting;          /* candidates within the limit, before merging equal partitions */
  pipe_tune_cand *fits; /* those within the limit, fastest first (then least memory); a
                           partition giving the same predictions as an earlier one is left out */
  int nfits;
  pipe_tune_cand smallest; /* the smallest peak over everything tried */
} pipe_tune_result;

/* memory: bytes per rank. CORE_EINPUT when nothing fits (the message names the smallest peak
 * found) or nothing can be built (the message says why). */
int pipe_tune(const char *config, const char **sets, int nsets, double gflops, double memory,
              pipe_tune_result *res);
/* The same for hw->d replicas of every stage, ZeRO's collectives at hw->dp_gbps: with d > 1
 * every candidate is also tried at ZeRO stages 0 to 3, stage 3 resharding (prefetch 1 or 0) or
 * kept gathered. */
int pipe_tune_hw(const char *config, const char **sets, int nsets, const pipe_plan_hw *hw, double memory,
                 pipe_tune_result *res);
void pipe_tune_result_free(pipe_tune_result *res);
/* The ZeRO policy a candidate was tried at: "0".."2", "3/reshard" (prefetching the next chunk),
 * "3/reshard/p0" (not), "3/keep" ("config": the config's). */
void pipe_zero_name(const pipe_plan_shape *sh, char *buf, size_t n);
const char *pipe_part_name(sched_part_method part);
/* The family as tune prints it: zb-auto with its memory limit ("zb-auto@12"). */
void pipe_shape_name(const pipe_plan_shape *sh, char *buf, size_t n);

#endif
