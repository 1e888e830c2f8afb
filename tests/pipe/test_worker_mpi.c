/* Every schedule family runs over real MPI with synchronous sends and 64 KiB messages: the
 * synthetic model of worker_sched.c checks every value each rank receives. */
#include <criterion/criterion.h>
#include <stdio.h>

#include "tests/common/mpirun.h"

static void run_steps(const char *fam, int p, int v, int m, int steps) {
  char args[256];
  snprintf(args, sizeof args, "--schedule %s --stages %d --virtual %d --microbatches %d --sync --tied --steps %d",
           fam, p, v, m, steps);
  int rc = test_mpirun(p, "tests/pipe/worker_sched", args);
  cr_assert_eq(rc, 0, "worker_sched %s failed (exit %d)", args, rc);
}

static void run(const char *fam, int p, int v, int m) { run_steps(fam, p, v, m, 3); }

/* 200 steps of every family with synchronous sends: no deadlock, every value checked. */
Test(worker_mpi, two_hundred_steps_every_family, .timeout = 300) {
  run_steps("gpipe", 4, 1, 8, 200);
  run_steps("1f1b", 4, 1, 8, 200);
  run_steps("interleaved", 4, 2, 6, 200);
  run_steps("zb-h1", 4, 1, 8, 200);
  run_steps("zb-h2", 4, 1, 8, 200);
  run_steps("zb-v", 4, 2, 8, 200);
}

/* While a rank waits on MPI for a slower one, the worker calls the executor's idle hook (where a
 * device table feeds its queued copies: kernels/ops.h, copy_pump). */
Test(worker_mpi, waits_call_the_idle_hook, .timeout = 120) {
  int rc = test_mpirun(3, "tests/pipe/worker_sched", "--schedule 1f1b --stages 3 --microbatches 6 --idle");
  cr_assert_eq(rc, 0, "worker_sched --idle failed (exit %d): no idle call while waiting, or a wrong value", rc);
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
  run("zb-auto", 4, 1, 8);
  run("v-zb", 4, 2, 8);
  run("v-half", 4, 2, 8);
  run("v-min", 4, 2, 8);
  run("v-min", 3, 2, 2);
}

/* On the MPI path a receive holds back only its consumer (tests/pipe/worker_lane.c): rank 1 sends
 * its second gradient only after rank 0's first backward has run, which rank 0 reaches with that
 * gradient's receive posted before it. A worker whose receive waited for its data would time
 * out instead. */
Test(worker_mpi, a_receive_holds_back_only_its_consumer, .timeout = 120) {
  int rc = test_mpirun(2, "tests/pipe/worker_lane", "--steps 3");
  cr_assert_eq(rc, 0, "worker_lane failed (exit %d)", rc);
}
