/* ZeRO's device-collectives path (ops->coll: NCCL on a GPU) without a GPU: worker_coll.c runs
 * stages 0, 1, 2 (overlap on and off) on cpu memory, on fakedev memory through host copies, and
 * on fakedev memory through a fake coll table over MPI, and checks that every path gives the
 * same bits, the exact sums, the same byte accounting, no host copies on the device path, and
 * the MPI fallback for ranks that share a GPU or set BRIGADE_NCCL=0. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/common/mpirun.h"

Test(zero_coll, two_replicas_every_stage_and_path, .timeout = 180) {
  int rc = test_mpirun(2, "tests/zero/worker_coll", "");
  cr_assert_eq(rc, 0, "worker_coll on 2 ranks failed (exit %d)", rc);
}

Test(zero_coll, three_replicas_every_stage_and_path, .timeout = 180) {
  int rc = test_mpirun(3, "tests/zero/worker_coll", "");
  cr_assert_eq(rc, 0, "worker_coll on 3 ranks failed (exit %d)", rc);
}

/* Rank 0 says which path the collectives take, each once. */
Test(zero_coll, says_the_path, .timeout = 180) {
  char cmd[1024], *out = NULL;
  snprintf(cmd, sizeof cmd,
           TEST_MPI_ENV " "
           "timeout 120 mpirun -np 2 %s/tests/zero/worker_coll",
           test_build_dir());
  int rc = test_capture(cmd, &out);
  cr_assert_eq(rc, 0, "worker_coll failed (exit %d):\n%s", rc, out);
  const char *lines[] = {
      "ZeRO collectives: NCCL (",
      "ZeRO collectives: MPI through host copies (ranks of a data-parallel group share a GPU; NCCL needs "
      "one GPU per rank)",
      "ZeRO collectives: MPI through host copies (BRIGADE_NCCL=0)",
      "ZeRO collectives: MPI through host copies (the backend offers no device collectives)",
  };
  for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
    const char *at = strstr(out, lines[i]);
    cr_expect(at != NULL, "no line \"%s\" in:\n%s", lines[i], out);
    if (at) cr_expect(strstr(at + 1, lines[i]) == NULL, "\"%s\" said more than once:\n%s", lines[i], out);
  }
  free(out);
}
