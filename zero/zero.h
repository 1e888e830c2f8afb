/* zero/zero.h: ZeRO inside a data-parallel group, for one flat parameter buffer (a chunk's).
 * The buffer of n floats is split into d contiguous shards of `shard` floats (the last padded);
 * replica r owns [r*shard, min((r+1)*shard, n)).
 *
 *   stage 0: gradients all-reduced, optimizer state for the whole buffer.
 *   stage 1: gradients accumulate over the step's micro-batches, then one reduce-scatter
 *            (MPI_Reduce_scatter_block) leaves each replica the sum for its shard; optimizer
 *            state and the update cover the shard only; an all-gather restores the parameters.
 *   stage 2: no full-size gradient buffer. Weight gradients land in a bucket of
 *            reduce_bucket_size floats (zero_grad_dest, asked per layer during backward); a full
 *            bucket, and the last one of each micro-batch's backward, is reduce-scattered
 *            (MPI_Reduce_scatter: each replica receives the part of the bucket inside its shard)
 *            and added into the shard's accumulator: at least one reduce-scatter per
 *            micro-batch, as the simulator charges. With overlap_comm the reduce-scatter is
 *            non-blocking (MPI_Ireduce_scatter) into a second bucket's worth of memory, and the
 *            backward goes on filling the other bucket.
 *            Kept ranges (zero_keep: the layers holding a tied weight, whose gradient is summed
 *            across pipeline ranks first) accumulate in full over the step and are all-reduced at
 *            its end.
 *   stage 3: stage 2, and the parameters too: each replica keeps only its shard (pshard, no full
 *            buffer); zero_gather_params all-gathers them into a gather buffer the caller
 *            owns, before the chunk computes (the schedule's GATHER_PARAMS); the update writes
 *            the shard and nothing is gathered at the end of the step.
 * The communicator comes from the caller; zero/ knows nothing of pipelines or layers.
 *
 * Which path the collectives take (decided once in zero_init, the same on every rank):
 *   - host memory ("cpu"): MPI on the buffers themselves.
 *   - device memory whose table offers device collectives (ops->coll: NCCL for "cuda"), with
 *     every rank of the group on its own GPU (the ranks' 16-byte GPU identities, exchanged over
 *     MPI, are distinct) and BRIGADE_NCCL not "0": rank 0 makes a unique id, MPI_Bcast hands it
 *     around, every rank joins one communicator (zero/devcomm.h); the collectives above then run through
 *     ops->coll on device memory, ordered with the ops on the compute stream, with no host
 *     copies (overlap_comm's reduce-scatter: on the backend's communication stream, the compute
 *     stream waiting for it by event). z->nccl says so. Rank 0 of the group logs
 *     "ZeRO collectives: NCCL".
 *   - any other device memory (ranks share a GPU, no coll, BRIGADE_NCCL=0): MPI on host copies;
 *     rank 0 logs "ZeRO collectives: MPI through host copies (<why>)".
 * The byte accounting (bytes_reduce, bytes_gather, reduce_scatters) is the same on every path.
 * Each zero_buffer (one per chunk) has a communicator of its own. Pipeline transfers are not
 * zero/'s (pipe/worker.c; they join their own communicator through zero/devcomm.h). */
#ifndef BRIGADE_ZERO_ZERO_H
#define BRIGADE_ZERO_ZERO_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/coll.h"
#include "kernels/ops.h"

typedef struct {
  int stage, d, r;
  MPI_Comm comm;
  const kernels_ops *ops;  /* the table whose memory params, grads and the buffers below live in */
  int device;              /* that memory is not the host's */
  /* device memory: 1 when the collectives go through ops->coll on device memory (one GPU per
   * rank: NCCL), 0 when MPI goes through host copies */
  int nccl;
  kernels_coll_comm *cc;   /* ops->coll's communicator over the group (nccl) */
  size_t *ncounts;         /* [d] counts for ops->coll's variable-count entries (nccl) */
  int inflight[2];         /* nccl, overlap_comm: bucket k's async reduce-scatter not waited for */
  size_t n, shard, lo, hi; /* my shard is [lo, hi) */
  float *params, *grads;   /* the caller's full buffers (grads: NULL in stage 2; both NULL in stage 3) */
  float *pshard;           /* stage 3: [shard] the parameters of my shard, the only copy this rank keeps */
  double param_gathers;    /* stage 3: all-gathers of the parameters (zero_gather_params) so far */
  double bytes_param_gather; /* stage 3: bytes those all-gathers brought in (also in bytes_gather) */
  int *gcounts, *gdispls;  /* stage 3: [d] every replica's part of a gather buffer */
  const kernels_ops *state_ops; /* the table whose memory the optimizer state lives in, for
                                 * zero_gather_state / zero_take_shard: NULL is ops; the CPU's
                                 * when it is offloaded to the host */
  float *acc;              /* [shard] reduced gradients of my shard (stages 1, 2) */
  float *send, *recv;      /* stage 1 over MPI: [shard * d], [shard] host staging for the collectives */
  float *host;             /* device memory over MPI: host copies (nhost floats) */
  size_t nhost;
  /* kept ranges (stage 2): full gradients of their own, all-reduced at the end of the step */
  size_t kp_lo[2], kp_hi[2];
  float *kept[2];
  int nkept;
  /* a tied weight's gradient, [tie_lo, tie_hi) (empty: none), all-reduced on its own (zero_tie) */
  size_t tie_lo, tie_hi;
  /* stage 2 buckets: nb (1, or 2 with overlap) buffers of cap floats; bucket k holds the
   * gradients of [blo[k], bhi[k]) in its last bhi - blo floats (layers arrive last first) */
  size_t cap;
  int nb, cur, overlap;
  float *bucket[2];
  size_t blo[2], bhi[2];
  float *hbucket[2];       /* device memory over MPI: [cap + shard] host copy of a bucket and my part of its sum */
  float *pend_dst[2];      /* ... and where that part goes once the reduce-scatter has landed */
  size_t pend_n[2];
  MPI_Request req[2];
  int *counts;            /* [d] */
  int err;                /* first error inside zero_grad_dest */
  int round;              /* mixed precision (set by the caller): 1 bf16, 2 fp16 gradient buffers; stage 2
                           * rounds each bucket before its reduce-scatter and the kept ranges before
                           * their all-reduce, as stages 0 and 1 round the full buffer */
  double reduce_scatters; /* reduce-scatters issued this step (stage 2: one per bucket) */
  /* bytes moved per step by this rank, for the accounting line */
  double bytes_reduce, bytes_gather;
} zero_buffer;

/* ops: the table params and grads belong to; the shard accumulator, buckets and kept
 * gradients come from it too. With device memory (any table but "cpu") the collectives go
 * through ops->coll (NCCL) when every rank of comm has its own GPU, else through host copies
 * over MPI (see the top of this file). Collective over comm. */
int zero_init(zero_buffer *z, int stage, MPI_Comm comm, float *params, float *grads, size_t n, const kernels_ops *ops);
void zero_free(zero_buffer *z);
/* Stage 2: [lo, hi) (whole layers) keeps a full gradient over the step (at most two ranges);
 * ignored by stages 0 and 1, whose gradient buffer is full-size anyway. */
int zero_keep(zero_buffer *z, size_t lo, size_t hi);
/* [lo, hi) holds a tied weight's gradient whose twin (the other copy, on another pipeline rank or
 * in another chunk) holds the same values once the pipeline's tied exchange has summed them.
 * Stages 0, 2 and 3 all-reduce it on its own, the same count on both twins, so that both sum it
 * in the same order and the two copies stay equal to the bit: an all-reduce of the whole buffer
 * adds an element in an order that depends on the buffer's size and the element's place in it
 * (Open MPI: 188 of 8192 elements differed between two buffers over 3 ranks). Stage 1's
 * reduce-scatter sums each element in rank order under Open MPI and is left whole. */
int zero_tie(zero_buffer *z, size_t lo, size_t hi);
/* Stage 2, after the zero_keep calls: buckets of bucket_floats (at least `largest`, the biggest
 * layer outside the kept ranges; at most what lies outside them), overlapped or not. Takes the
 * full gradient buffer away: from here on gradients go where zero_grad_dest says. */
int zero_buckets(zero_buffer *z, size_t bucket_floats, int overlap, size_t largest);
/* Stage 2: where the gradient of parameters [off, off+n) goes in the coming backward: zeroed
 * memory in the current bucket (reduce-scattering the bucket first when it is full or not
 * adjacent), or the kept range's own accumulator. Errors surface at zero_after_backward. */
float *zero_grad_dest(zero_buffer *z, size_t off, size_t n);
/* The kept gradient of [lo, ...) when [lo, hi) lies in a kept range, else NULL. */
float *zero_kept(const zero_buffer *z, size_t lo, size_t hi);
/* Stage 2: after a micro-batch's backward, reduce-scatter what is left in the bucket. */
int zero_after_backward(zero_buffer *z);
/* End of the step's backward: stage 0 all-reduce; stage 1 reduce-scatter; stage 2 the excluded
 * range's all-reduce. Afterwards zero_grad() is the gradient of the parameters zero_range()
 * names, summed over the replicas. */
int zero_reduce(zero_buffer *z);
/* The device path: waits on the host, at most timeout_s seconds, for the collectives issued so
 * far (ops->coll's sync), so a replica that never joins is an error naming the wait, not a hang
 * in the next synchronising copy. CORE_OK at once on the MPI paths (their calls wait already). */
int zero_wait(zero_buffer *z, double timeout_s);
const float *zero_grad(const zero_buffer *z); /* gradient of [lo, hi) (stage 0: of [0, n)) */
void zero_range(const zero_buffer *z, size_t *lo, size_t *hi);
/* After the update of the owned range: all-gather the parameters (stages 1, 2), clear grads. */
int zero_finish(zero_buffer *z);

/* The parameters this rank updates (zero_range's): the shard's own buffer at stage 3, else the
 * caller's buffer at lo. */
float *zero_param_shard(const zero_buffer *z);
/* The parameter buffer the replica updates (stage 3: its shard; else the caller's full buffer,
 * which must be as long) replaced by p; returns the one it held. Post-validation keeps two and
 * swaps them. */
float *zero_replace_params(zero_buffer *z, float *p);
/* Stage 3: every replica's shard of the parameters into dst (n floats of the table's memory, a
 * gather buffer): my shard copied in, then an all-gather in place. Collective over the group;
 * counted in bytes_gather. With req, on host memory over MPI, it is left in flight
 * (MPI_Iallgatherv: dst is not to be read before MPI_Wait on *req); otherwise it is done on
 * return (or ordered before the table's next ops, NCCL) and *req is MPI_REQUEST_NULL. */
int zero_gather_params(zero_buffer *z, float *dst, MPI_Request *req);

/* Optimizer state of the shard (state_ops' memory: the backend's, or the host's when offloaded)
 * <-> the whole buffer (host memory; checkpoints store whole tensors). */
int zero_gather_state(const zero_buffer *z, const float *shard_state, float *full);
void zero_take_shard(const zero_buffer *z, const float *full, float *shard_state);
/* Bytes this rank holds for gradients: the gradient buffer or buckets, the shard's
 * accumulator, kept ranges and stage 1's host staging for MPI (none on the NCCL path). */
double zero_grad_bytes(const zero_buffer *z);
/* Floats of optimizer state this rank keeps per state tensor (n for stage 0, the shard else). */
size_t zero_state_len(const zero_buffer *z);
#endif
