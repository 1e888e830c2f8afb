/* tests/pipe/worker_fakenccl.c: `brigade train` with the "fakedev" backend given a fake device
 * communicator over MPI (tests/common/fake_coll.h), so that a whole training run takes the
 * device path: the pipeline's transfers through send/recv tickets on the table's memory, ZeRO's
 * collectives through the coll table, no host copies for either. Run under mpirun:
 *   worker_fakenccl train CONFIG [--set key=value]... [--log-json FILE]
 * Environment: FAKE_COLL_SHARED=1 makes every rank report the same GPU (the device path must
 * not be taken); FAKE_COLL_EXPECT=p2p / none: every rank must (not) have sent or received
 * through the fake. Exit 0 when the run and every check passed, 1 otherwise. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/ops.h"
#include "pipe/train.h"
#include "tests/common/fake_coll.h"

enum { MAXSETS = 64 };

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const char *sets[MAXSETS];
  pipe_train_opts o = {.sets = sets};
  int bad = argc < 3 || strcmp(argv[1], "train") != 0;
  if (!bad) o.config = argv[2];
  for (int i = 3; i + 1 < argc && !bad; i += 2) {
    if (strcmp(argv[i], "--set") == 0 && o.nsets < MAXSETS) sets[o.nsets++] = argv[i + 1];
    else if (strcmp(argv[i], "--log-json") == 0) o.log_json = argv[i + 1];
    else bad = 1;
  }
  if (bad || (argc - 3) % 2) {
    fprintf(stderr, "usage: worker_fakenccl train CONFIG [--set key=value]... [--log-json FILE]\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const char *shared = getenv("FAKE_COLL_SHARED"), *expect = getenv("FAKE_COLL_EXPECT");
  fake_shared = shared && strcmp(shared, "1") == 0;
  kernels_fakedev_set_coll(fake_coll());
  int rc = pipe_train(&o), fails = rc != CORE_OK;
  if (rc) fprintf(stderr, "worker_fakenccl: rank %d: %s\n", rank, core_error_msg());
  int p2p = fake_calls.send + fake_calls.recv;
  if (expect && strcmp(expect, "p2p") == 0 && (p2p == 0 || fake_calls.sync == 0)) {
    fprintf(stderr, "worker_fakenccl: rank %d: no transfer through the device communicator (%d sync)\n", rank,
            fake_calls.sync);
    fails++;
  }
  if (expect && strcmp(expect, "none") == 0 && p2p + fake_calls.comm_init > 0) {
    fprintf(stderr, "worker_fakenccl: rank %d: %d transfers and %d communicators on the fallback path\n", rank, p2p,
            fake_calls.comm_init);
    fails++;
  }
  if (fake_calls.comm_init != fake_calls.comm_free) {
    fprintf(stderr, "worker_fakenccl: rank %d: %d communicators made, %d freed\n", rank, fake_calls.comm_init,
            fake_calls.comm_free);
    fails++;
  }
  fails += fake_coll_errors;
  int groups = 0; /* runs of transfers posted as one group, on some rank */
  MPI_Allreduce(&fake_calls.group, &groups, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (expect && strcmp(expect, "p2p") == 0 && groups == 0) {
    if (rank == 0) fprintf(stderr, "worker_fakenccl: no run of transfers went as one group\n");
    fails++;
  }
  int all = 0;
  MPI_Allreduce(&fails, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Finalize();
  return all ? 1 : 0;
}
