/* tests/common/mpirun.h: run a program under mpirun from a Criterion test (MPI_Init cannot run
 * inside Criterion's forked tests; see ENVIRONMENT.md). */
#ifndef BRIGADE_TESTS_MPIRUN_H
#define BRIGADE_TESTS_MPIRUN_H

/* Directory of the build (BRIGADE_BUILD, set by `make test`; "build" otherwise). */
const char *test_build_dir(void);
/* Runs `mpirun -np NP <build>/<prog> <args>` with settings for small shared machines (root,
 * oversubscription, yielding, shared memory); returns the exit status, -1 if it did not run.
 * The output goes to the test's stderr. */
int test_mpirun(int np, const char *prog, const char *args);
/* Runs a shell command line with stderr joined to stdout; returns its exit status (128 + signal
 * when killed, -1 when it could not start) and the output in *out (caller frees). */
int test_capture(const char *cmd, char **out);
/* Runs a shell command; returns its exit status. */
int test_sh(const char *cmd);

#endif
