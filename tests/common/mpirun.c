#include "tests/common/mpirun.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

const char *test_build_dir(void) {
  const char *b = getenv("BRIGADE_BUILD");
  return b && *b ? b : "build";
}

/* Progress lines (core/progress.h) go to stderr after 2 s: a slow run (a sanitizer build, a busy
 * machine) must not put them into output a test reads. A test that wants them sets
 * BRIGADE_PROGRESS in its command, which wins over this. */
static void quiet_progress(void) { setenv("BRIGADE_PROGRESS", "0", 0); }

int test_sh(const char *cmd) {
  quiet_progress();
  int st = system(cmd);
  if (st == -1 || !WIFEXITED(st)) return -1;
  return WEXITSTATUS(st);
}

int test_mpirun(int np, const char *prog, const char *args) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd,
           /* the shared-memory single-copy mechanism comes from the environment: `make test`
            * sets what scripts/mpi_single_copy.sh found (Open MPI's own default otherwise) */
           TEST_MPI_ENV " "
           "timeout 120 mpirun -np %d %s/%s %s 1>&2",
           np, test_build_dir(), prog, args);
  return test_sh(cmd);
}

int test_capture(const char *cmd, char **out) {
  quiet_progress();
  size_t len = strlen(cmd) + 8, cap = 1 << 16, n = 0, k;
  char *full = malloc(len);
  snprintf(full, len, "%s 2>&1", cmd);
  FILE *p = popen(full, "r");
  free(full);
  char *buf = malloc(cap);
  buf[0] = 0;
  *out = buf;
  if (!p) return -1;
  while ((k = fread(buf + n, 1, cap - n - 1, p)) > 0) {
    n += k;
    if (n + 1 == cap) buf = realloc(buf, cap *= 2);
  }
  buf[n] = 0;
  *out = buf;
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
