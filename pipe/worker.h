/* pipe/worker.h: the stage worker executes one rank's instruction stream.
 *
 * One table maps each opcode to a function; nothing in the worker knows which schedule family
 * produced the stream. Transfers are the worker's own: non-blocking MPI sends whose buffers are
 * not reused before the request completes, receives posted at their RECV and completed (with a
 * timeout) before the next op on their slot, their consumer, tags derived from (micro-batch,
 * virtual stage, direction). Everything else (loads, compute, reductions, the
 * optimizer step) goes to the executor, which owns the model and its buffers.
 *
 * The device path (pipe_worker_use_device): transfers go through a device communicator
 * (kernels/coll.h: NCCL send/recv) on the executor's own buffers in the backend's memory, with
 * no host copies. They run on the backend's communication queue in program order, a run of
 * consecutive transfers as one group (kernels_coll.group) when the table offers it; the worker
 * names each in-flight transfer by a ticket, aslot * 4 + (op - SCHED_SEND_ACT), and makes the
 * compute queue wait for a slot's transfers before the next op on that slot (a receive's
 * consumer, or whoever writes a sent buffer next), and waits on the host, with the timeout, for
 * all of them before the step's tail (REDUCE_*, OPTIMIZER_STEP) or at its end. The
 * program's verification (blocking, unbuffered send/recv: sched_verify) is what makes both paths
 * deadlock-free: each only relaxes those semantics, so every wait here is one the program's own
 * order already implies. */
#ifndef BRIGADE_PIPE_WORKER_H
#define BRIGADE_PIPE_WORKER_H

#include <mpi.h>

#include "schedule/events.h"
#include "schedule/ir.h"

typedef struct {
  void *ctx;
  /* Runs a non-transfer instruction (LOAD, F, B, I, W, REDUCE_*, OPTIMIZER_STEP). */
  int (*run)(void *ctx, const sched_instr *in);
  /* The host buffer a transfer reads (SEND_*) or fills (RECV_*), and its length in floats. It
   * stays untouched until the transfer completes (the worker drains a slot's sends before the
   * slot is written again). */
  float *(*buffer)(void *ctx, const sched_instr *in, size_t *nfloats);
  /* After a RECV_* completes (may be NULL): an executor whose buffers live in device memory
   * copies the received host buffer over. */
  void (*received)(void *ctx, const sched_instr *in);
  /* The device path: the executor's own buffer for a transfer, in the backend's memory. */
  float *(*device_buffer)(void *ctx, const sched_instr *in, size_t *nfloats);
  /* Waits on the host until the backend has finished every op issued so far (may be NULL: host
   * memory, where ops are done when they return). Only a traced step calls it, around each
   * instruction, so that the timeline holds the device's times and not the host's issue times. */
  void (*sync)(void *ctx);
  /* After instruction i of the stream has been issued (may be NULL): where an executor gives
   * back what the instruction was the last to use (a pair's aside part, its slot). */
  void (*retired)(void *ctx, int i, const sched_instr *in);
  /* Optimizer post-validation (each may be NULL): the step begins; a VALIDATE (*again = 1: the
   * previous update changed, so the step starts again from its first instruction); the step
   * starts again (what its instructions so far left is thrown away). */
  void (*begin)(void *ctx);
  int (*validate)(void *ctx, int *again);
  void (*again)(void *ctx);
  /* A traced step (each may be NULL): trace(1) once it begins with the device idle, trace(0) at
   * its end; copy_span: the start and end (MPI_Wtime's clock) of the n-th copy instruction
   * (OFFLOAD or RELOAD) the step has run, timed on the device, whose events the worker then
   * takes; nonzero where the executor has none (its copies are timed as any instruction). */
  void (*trace)(void *ctx, int on);
  int (*copy_span)(void *ctx, int n, double *start, double *end);
  /* While the worker waits on the host for a transfer (may be NULL): the executor moves its
   * background work on (a device table's copies fed in pieces: kernels/ops.h, copy_pump). */
  void (*idle)(void *ctx);
} pipe_exec;

struct kernels_coll;
struct kernels_coll_comm;

typedef struct {
  const sched_program *pr;
  int rank;         /* this rank's index in the pipeline (its stream) */
  MPI_Comm comm;    /* the pipeline communicator */
  pipe_exec ex;
  int synchronous;  /* 1: MPI_Issend, so a send completes only when matched (tests) */
  double timeout_s; /* a wait longer than this fails the run, naming the instruction */
  /* optional: how messages name pipeline rank q (e.g. "rank 5 (stage 2) on node2"); NULL:
   * "rank q" */
  const char *const *peer_names;
  sched_timeline *tl; /* when not NULL, one event per instruction (seconds from t0) */
  double t0;
  /* internal */
  MPI_Request *slot_req; /* [naslots * 2] outstanding sends per aslot (activation, gradient) */
  int *slot_peer;        /* [naslots * 2] the rank each of them goes to */
  MPI_Request *recv_req; /* [naslots * 2] posted receives per aslot, completed by their consumer */
  int *recv_at;          /* [naslots * 2] the stream index of the RECV that posted each */
  size_t *recv_n;        /* [naslots * 2] and the floats it expects */
  int *recv_ev;          /* [naslots * 2] a traced step: its event in tl (its end set when it lands), or -1 */
  int tag_ub;
  const struct kernels_coll *dc; /* the device path (NULL: MPI) */
  struct kernels_coll_comm *dcomm;
  unsigned char *tpend;          /* [naslots * 4] device path: ticket in flight */
  int dsynced;                   /* device path: this step's transfers are done (the tail began) */
  int progress;                  /* 1: each instruction reports its micro-batch (core_progress_at) */
  int again;                     /* a VALIDATE asked for the step to start again */
  int clock_on;                  /* the executor's copy clock runs (a traced step; until its end) */
} pipe_worker;

int pipe_worker_init(pipe_worker *w, const sched_program *pr, int rank, MPI_Comm comm, pipe_exec ex);
/* Waits at most timeout_s for sends still in flight (a step that failed may leave some that no
 * peer will take), then frees the worker. */
void pipe_worker_free(pipe_worker *w);
/* Sends and receives through dc on comm (which must number the ranks as the program does) from
 * now on; the executor must offer device_buffer. CORE_EINPUT when the rank's slots need more
 * tickets than the table has. The worker does not own comm. */
int pipe_worker_use_device(pipe_worker *w, const struct kernels_coll *dc, struct kernels_coll_comm *comm);
/* Executes the whole stream once (one training step). CORE_ERUNTIME with the rank, the
 * instruction index and the instruction on any failure or timeout. */
int pipe_worker_step(pipe_worker *w);
/* Tag of the message that goes into virtual stage `dst_stage` for micro-batch mb. */
int pipe_tag(const sched_program *pr, int dst_stage, int mb, int is_grad);

#endif
