/* kernels/coll.h: device collectives a backend may offer (kernels_ops.coll), for callers that
 * sum or gather buffers of the table's device memory across processes without host copies.
 * The "cuda" table offers NCCL's (kernels/cuda/coll_cuda.cu); "cpu" and "fakedev" offer none
 * (coll = NULL). kernels/ knows nothing of MPI: the caller (zero/) learns the identity of every
 * rank's device, decides whether to use these entries, and hands the unique id around itself.
 *
 * Every buffer is the table's device memory; every reduction is a sum of floats. An entry
 * returns CORE_OK (0), or CORE_ERUNTIME (1) with a message set by core_error_set naming the
 * failed call; a communication error never aborts. A collective must be called by every rank of
 * the communicator, in the same order on every rank.
 *
 * Ordering: the synchronous entries are issued on the table's compute queue (the CUDA table's
 * stream), so they are ordered with the ops before and after them; nothing waits on the host.
 * reduce_scatterv_async runs on a separate communication queue: it starts once the ops issued
 * before it are done and leaves the compute queue free; wait(slot) makes later ops wait for it
 * (still without blocking the host). There are two slots, one per bucket of ZeRO-2's
 * overlap_comm; a slot holds at most one collective in flight.
 *
 * Point-to-point (the pipeline's activations and gradients): send and recv also run on the
 * communication queue, in the order they are issued (one queue for everything asynchronous, so
 * transfers and ZeRO-2's reduce-scatters keep the program's order on every rank), each starting
 * once the ops issued before it on the compute queue are done. The compute queue goes on at
 * once: wait_p2p(ticket) makes later ops wait for that transfer (a receive's consumer; whoever
 * next writes a sent buffer). A send is matched with the peer's receives from this rank in
 * order (no tags, as in NCCL), and blocks the communication queue until the peer's receive runs;
 * both sides must give the same count. A ticket is the caller's name for one transfer in flight
 * (0 <= ticket < KERNELS_COLL_TICKETS): it may be used again once waited for. sync waits (on the
 * host) for everything issued so far and turns a peer that never comes into an error. */
#ifndef BRIGADE_KERNELS_COLL_H
#define BRIGADE_KERNELS_COLL_H

#include <stddef.h>

enum {
  KERNELS_COLL_DEVICE_ID_BYTES = 16,  /* a GPU's UUID */
  KERNELS_COLL_UNIQUE_ID_BYTES = 128, /* NCCL_UNIQUE_ID_BYTES */
  KERNELS_COLL_SLOTS = 2,
  KERNELS_COLL_TICKETS = 4096
};

/* One communicator over nranks processes (opaque; the backend defines it). */
typedef struct kernels_coll_comm kernels_coll_comm;

typedef struct kernels_coll {
  const char *name; /* "nccl" */
  /* The identity of this process's device (a GPU's UUID): two ranks with equal identities share
   * a device, which NCCL does not allow within one communicator. */
  int (*device_id)(unsigned char id[KERNELS_COLL_DEVICE_ID_BYTES]);
  /* A fresh id for a new communicator (one rank makes it, the caller hands it to the others). */
  int (*unique_id)(unsigned char id[KERNELS_COLL_UNIQUE_ID_BYTES]);
  /* Joins communicator `id` as `rank` of `nranks` (collective: blocks until every rank has
   * joined). *out is NULL on failure. */
  int (*comm_init)(kernels_coll_comm **out, const unsigned char id[KERNELS_COLL_UNIQUE_ID_BYTES],
                   int nranks, int rank);
  /* Waits for everything issued on the communicator, then frees it; NULL is a no-op. */
  void (*comm_free)(kernels_coll_comm *c);

  /* x[n] = its sum over the ranks (in place). */
  int (*all_reduce)(kernels_coll_comm *c, float *x, size_t n);
  /* recv[count] = the sum over the ranks of send[rank*count, (rank+1)*count); send holds
   * nranks*count floats. */
  int (*reduce_scatter)(kernels_coll_comm *c, const float *send, float *recv, size_t count);
  /* Variable counts: send holds counts[0] + ... + counts[nranks-1] floats, rank q's range
   * starting at counts[0] + ... + counts[q-1]; recv[counts[rank]] = the sum of this rank's range
   * over the ranks (recv is not touched when counts[rank] is 0). recv must not overlap send. */
  int (*reduce_scatterv)(kernels_coll_comm *c, const float *send, float *recv,
                         const size_t *counts);
  /* recv[nranks*count]: rank q's send[count] at q*count. In place when send == recv + rank*count. */
  int (*all_gather)(kernels_coll_comm *c, const float *send, float *recv, size_t count);
  /* In place: buf holds the ranges of counts (laid out as in reduce_scatterv); every rank's
   * range is copied from that rank to all the others. */
  int (*all_gatherv)(kernels_coll_comm *c, float *buf, const size_t *counts);

  /* reduce_scatterv on the communication queue, in slot 0 or 1 (which must have no collective
   * in flight: call wait(slot) first). send and recv must not be touched until wait(slot); counts
   * is read before it returns. */
  int (*reduce_scatterv_async)(kernels_coll_comm *c, int slot, const float *send, float *recv,
                               const size_t *counts);
  /* Ops issued from now on wait for slot's collective (a no-op when none is in flight). */
  int (*wait)(kernels_coll_comm *c, int slot);

  /* buf[n] to rank `peer` / from rank `peer` into buf[n], on the communication queue under
   * `ticket` (which must have no transfer in flight). buf must not be touched until
   * wait_p2p(ticket). n = 0 sends nothing (the peer must receive 0). */
  int (*send)(kernels_coll_comm *c, int ticket, const float *buf, size_t n, int peer);
  int (*recv)(kernels_coll_comm *c, int ticket, float *buf, size_t n, int peer);
  /* Ops issued from now on wait for the ticket's transfer (a no-op when none is in flight). */
  int (*wait_p2p)(kernels_coll_comm *c, int ticket);
  /* begin = 1 opens a group of sends and receives, begin = 0 closes it (may be NULL: no groups).
   * The transfers issued in between start together once the ops issued before the group are
   * done and complete as one operation, in whatever order their peers issue theirs; no other
   * entry may be called while a group is open, and a ticket appears in it at most once. */
  int (*group)(kernels_coll_comm *c, int begin);
  /* Waits on the host, at most timeout_s seconds, until everything issued on both queues is
   * done; CORE_ERUNTIME on a communication error or a timeout, and then every communicator of the
   * process is unusable (aborted: they share the queues, so what is stuck may be another's). */
  int (*sync)(kernels_coll_comm *c, double timeout_s);
} kernels_coll;

#endif
