/* pipe/worker.h: the stage worker executes one rank's instruction stream.
 *
 * One table maps each opcode to a function; nothing in the worker knows which schedule family
 * produced the stream. Transfers are the worker's own: non-blocking MPI sends whose buffers are
 * not reused before the request completes, receives that wait with a timeout, tags derived from
 * (micro-batch, virtual stage, direction). Everything else (loads, compute, reductions, the
 * optimizer step) goes to the executor, which owns the model and its buffers. */
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
} pipe_exec;

typedef struct {
  const sched_program *pr;
  int rank;         /* this rank's index in the pipeline (its stream) */
  MPI_Comm comm;    /* the pipeline communicator */
  pipe_exec ex;
  int synchronous;  /* 1: MPI_Issend, so a send completes only when matched (tests) */
  double timeout_s; /* a wait longer than this fails the run, naming the instruction */
  sched_timeline *tl; /* when not NULL, one event per instruction (seconds from t0) */
  double t0;
  /* internal */
  MPI_Request *slot_req; /* [nslots * 2] outstanding sends per slot (activation, gradient) */
  int tag_ub;
} pipe_worker;

int pipe_worker_init(pipe_worker *w, const sched_program *pr, int rank, MPI_Comm comm, pipe_exec ex);
void pipe_worker_free(pipe_worker *w);
/* Executes the whole stream once (one training step). CORE_ERUNTIME with the rank, the
 * instruction index and the instruction on any failure or timeout. */
int pipe_worker_step(pipe_worker *w);
/* Tag of the message that goes into virtual stage `dst_stage` for micro-batch mb. */
int pipe_tag(const sched_program *pr, int dst_stage, int mb, int is_grad);

#endif
