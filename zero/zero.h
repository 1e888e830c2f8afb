/* zero/zero.h: ZeRO inside a data-parallel group, for one flat parameter buffer (a chunk's).
 * The buffer of n floats is split into d contiguous shards of `shard` floats (the last padded);
 * replica r owns [r*shard, min((r+1)*shard, n)).
 *
 *   stage 0: gradients all-reduced, optimizer state for the whole buffer.
 *   stage 1: gradients accumulate over the step's micro-batches, then one reduce-scatter
 *            (MPI_Reduce_scatter_block) leaves each replica the sum for its shard; optimizer
 *            state and the update cover the shard only; an all-gather restores the parameters.
 *   stage 2: as stage 1, but the reduce-scatter runs after each micro-batch's backward and adds
 *            into the shard's accumulator (one reduce-scatter per micro-batch, as the simulator
 *            charges). The full-size buffer then holds one micro-batch's gradients at a time.
 *            Up to two ranges can be excluded (tied weights, summed across pipeline ranks first):
 *            they accumulate in full and are all-reduced at the end of the step.
 * The communicator comes from the caller; zero/ knows nothing of pipelines. */
#ifndef BRIGADE_ZERO_ZERO_H
#define BRIGADE_ZERO_ZERO_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
  int stage, d, r;
  MPI_Comm comm;
  size_t n, shard, lo, hi; /* my shard is [lo, hi) */
  float *params, *grads;   /* the caller's full buffers */
  float *acc;              /* [shard] reduced gradients of my shard (stages 1, 2) */
  float *send, *recv;      /* [shard * d], [shard] staging for the collectives */
  size_t ex_lo[2], ex_hi[2]; /* excluded ranges (stage 2): a tied embedding and head may share a buffer */
  int nex;
  /* bytes moved per step by this rank, for the accounting line */
  double bytes_reduce, bytes_gather;
} zero_buffer;

int zero_init(zero_buffer *z, int stage, MPI_Comm comm, float *params, float *grads, size_t n);
void zero_free(zero_buffer *z);
int zero_exclude(zero_buffer *z, size_t lo, size_t hi);
/* Stage 2: after a micro-batch's backward, move its gradients into the shard accumulator. */
int zero_after_backward(zero_buffer *z);
/* End of the step's backward: stage 0 all-reduce; stage 1 reduce-scatter; stage 2 the excluded
 * range's all-reduce. Afterwards zero_grad() is the gradient of the parameters zero_range()
 * names, summed over the replicas. */
int zero_reduce(zero_buffer *z);
const float *zero_grad(const zero_buffer *z); /* gradient of [lo, hi) (stage 0: of [0, n)) */
void zero_range(const zero_buffer *z, size_t *lo, size_t *hi);
/* After the update of the owned range: all-gather the parameters (stages 1, 2), clear grads. */
int zero_finish(zero_buffer *z);



/* Optimizer state of the shard <-> the whole buffer (checkpoints store whole tensors). */
int zero_gather_state(const zero_buffer *z, const float *shard_state, float *full);
void zero_take_shard(const zero_buffer *z, const float *full, float *shard_state);
/* Floats of optimizer state this rank keeps per state tensor (n for stage 0, the shard else). */
size_t zero_state_len(const zero_buffer *z);
#endif
