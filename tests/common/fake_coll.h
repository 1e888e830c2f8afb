/* tests/common/fake_coll.h: a fake device-collectives table (kernels/coll.h) over MPI, for
 * testing the device path of ZeRO (tests/zero/worker_coll.c) and of the pipeline's transfers
 * (tests/pipe/worker_fakenccl.c) without a GPU. MPI programs only.
 *
 * It takes fakedev memory (clearing KERNELS_FAKEDEV_TAG to reach the host address) and aborts
 * when handed a host pointer, as a device collective would fail on one. device_id reports the
 * world rank's bytes (distinct GPUs), or with fake_shared the same bytes on every rank (ranks
 * sharing a GPU). A communicator is MPI_Comm_split of MPI_COMM_WORLD by the unique id, so every
 * rank of the world must make its communicators in the same order (brigade's set-up does).
 *
 * Asynchronous entries act as late as a communication queue may, so a caller that touches a
 * buffer before waiting gets wrong results or a counted error:
 *   - reduce_scatterv_async does nothing when issued and the whole collective at wait(slot);
 *   - send is MPI_Ssend at issue (blocking until the peer receives, matched in order with one
 *     tag, as NCCL's are), and wait_p2p checks that the buffer still holds what was sent;
 *   - recv is MPI_Recv at issue into a private buffer, copied into the caller's at wait_p2p;
 *     a count other than the sender's is an error;
 *   - inside a group the transfers wait for its end, then run posted together (MPI_Issend,
 *     MPI_Irecv, one MPI_Waitall), so a group completes whatever order its peers issue theirs in.
 * Checks that fail inside the fake (a buffer changed under a send, a communicator freed with a
 * transfer not waited for) print a line and count in fake_coll_errors. */
#ifndef BRIGADE_TESTS_FAKE_COLL_H
#define BRIGADE_TESTS_FAKE_COLL_H

#include "kernels/coll.h"

typedef struct {
  int device_id, unique_id, comm_init, comm_free, all_reduce, reduce_scatter, reduce_scatterv, all_gather,
      all_gatherv, async, wait, send, recv, wait_p2p, sync, group;
} fake_coll_calls;

extern fake_coll_calls fake_calls; /* entries called on this rank */
extern int fake_shared;            /* 1: every rank reports the same device identity */
extern int fake_fail;              /* 1: all_reduce fails (on every rank, without communicating) */
extern int fake_coll_errors;       /* checks failed inside the fake on this rank */

const kernels_coll *fake_coll(void);

#endif
