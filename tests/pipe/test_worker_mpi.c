/* Every schedule family runs over real MPI with synchronous sends and 64 KiB messages: the
 * synthetic model of worker_sched.c checks every value each rank receives. */
#include <criterion/criterion.h>
#include <stdio.h>

#include "tests/common/mpirun.h"

static void run(const char *fam, int p, int v, int m) {
  char args[256];
  snprintf(args, sizeof args, "--schedule %s --stages %d --virtual %d --microbatches %d --sync --tied --steps 3",
           fam, p, v, m);
  int rc = test_mpirun(p, "tests/pipe/worker_sched", args);
  cr_assert_eq(rc, 0, "worker_sched %s failed (exit %d)", args, rc);
}

Test(worker_mpi, gpipe_and_1f1b, .timeout = 240) {
  run("gpipe", 4, 1, 6);
  run("gpipe", 3, 1, 2); /* m < p */
  run("1f1b", 4, 1, 8);
  run("1f1b", 4, 1, 3); /* m < p */
  run("1f1b", 2, 1, 1);
  run("1f1b", 1, 1, 4);
}

Test(worker_mpi, interleaved, .timeout = 240) {
  run("interleaved", 4, 2, 8);
  run("interleaved", 4, 2, 6); /* m % p != 0 */
  run("interleaved", 3, 3, 2); /* m < p */
  run("interleaved", 2, 4, 5);
}

Test(worker_mpi, zero_bubble, .timeout = 240) {
  run("zb-h1", 4, 1, 8);
  run("zb-h2", 4, 1, 7);
  run("zb-v", 4, 2, 8); /* the V turn hands activations over inside a rank */
  run("zb-v", 3, 2, 2);
}
