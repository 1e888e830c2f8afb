/* tests/common/mpirun.h: run a program under mpirun from a Criterion test (MPI_Init cannot run
 * inside Criterion's forked tests; see ENVIRONMENT.md). */
#ifndef BRIGADE_TESTS_MPIRUN_H
#define BRIGADE_TESTS_MPIRUN_H

/* The environment every mpirun of the tests gets (as a shell prefix): root allowed,
 * oversubscription and yielding for small shared machines, shared memory, and no leak reports
 * (Open MPI's components allocate at MPI_Init and are unloaded unfreed, so leak reports of MPI
 * programs name nothing of ours; leaks are checked in the plain Criterion tests). */
#define TEST_MPI_ENV                                                                               \
  "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 "  \
  "OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_btl=self,vader ASAN_OPTIONS=detect_leaks=0"

/* Directory of the build (BRIGADE_BUILD, set by `make test`; "build" otherwise). */
const char *test_build_dir(void);
/* Runs `mpirun -np NP <build>/<prog> <args>` with settings for small shared machines (root,
 * oversubscription, yielding, shared memory); returns the exit status, -1 if it did not run.
 * The output goes to the test's stderr. */
int test_mpirun(int np, const char *prog, const char *args);
/* Runs a shell command line with stderr joined to stdout; returns its exit status (128 + signal
 * when killed, -1 when it could not start) and the output in *out (caller frees). These three
 * run their commands with BRIGADE_PROGRESS=0 unless the environment or the command sets it. */
int test_capture(const char *cmd, char **out);
/* Runs a shell command; returns its exit status. */
int test_sh(const char *cmd);

#endif
