/* cli/cmd_train.c: `brigade train CONFIG [--set key=value ...] [--log-json FILE] [--resume DIR] [--init-from FILE]`,
 * as one process or under mpirun. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/mem.h"
#include "pipe/train.h"

int cli_train(int argc, char **argv) {
  pipe_train_opts o = {.max_instructions = CLI_MAX_INSTRUCTIONS};
  const char *sets[256];
  int rc = CORE_OK;
  for (int i = 1; i < argc && !rc; i++) {
    cli_arg(&argc, argv, i);
    const char *v;
    if (strcmp(argv[i], "--set") == 0) {
      rc = cli_take(argc, argv, &i, &v);
      if (!rc && o.nsets == 256) rc = core_error_set(CORE_EINPUT, "too many --set options");
      if (!rc) sets[o.nsets++] = v;
    } else if (strcmp(argv[i], "--log-json") == 0) {
      rc = cli_take(argc, argv, &i, &o.log_json);
    } else if (strcmp(argv[i], "--resume") == 0) {
      rc = cli_take(argc, argv, &i, &o.resume);
    } else if (strcmp(argv[i], "--init-from") == 0) {
      rc = cli_take(argc, argv, &i, &o.init_from);
    } else if (strcmp(argv[i], "--allow-nonfinite") == 0) {
      o.allow_nonfinite = 1;
    } else if (strcmp(argv[i], "--max-memory") == 0) {
      double b;
      if (!(rc = cli_take(argc, argv, &i, &v)) && !(rc = core_mem_parse(argv[i - 1], v, &b))) o.max_memory = v;
    } else if (strcmp(argv[i], "--max-instructions") == 0) {
      if (!(rc = cli_take(argc, argv, &i, &v))) rc = cli_parse_count(argv[i - 1], v, &o.max_instructions);
    } else if (argv[i][0] == '-') {
      rc = core_error_set(CORE_EINPUT, "train: unknown option '%s'", argv[i]);
    } else if (o.config) {
      rc = core_error_set(CORE_EINPUT, "train takes one config file (got '%s' and '%s')", o.config, argv[i]);
    } else {
      o.config = argv[i];
    }
  }
  if (!rc && !o.config) rc = core_error_set(CORE_EINPUT, "usage: brigade train CONFIG [--set key=value ...] [--log-json FILE] [--resume DIR] [--init-from FILE] [--max-memory BYTES] [--max-instructions N]");
  if (!rc && o.resume && o.init_from)
    rc = core_error_set(CORE_EINPUT, "--resume continues a run (weights, optimizer state, step); --init-from starts one "
                                     "from a file's weights: give one of them");
  o.sets = sets;
  if (rc) {
    fprintf(stderr, "brigade: error: %s\n", core_error_msg());
    return 2;
  }
  MPI_Init(&argc, &argv);
  int rank, stopped = 0, report = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  o.stopped_by = &stopped, o.report = &report;
  rc = pipe_train(&o);
  if (rc == CORE_EINPUT) { /* every rank failed alike (rank 0 says it), or the ranks it failed on say it */
    if (report == 2 || (report == 1 && rank == 0)) fprintf(stderr, "brigade: error: %s\n", core_error_msg());
    MPI_Finalize();
    return 2;
  }
  if (rc) { /* a runtime failure may leave other ranks waiting: take the job down */
    int world;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (world == 1) { /* no one waits: the one line and exit 1, without Open MPI's abort banner */
      fprintf(stderr, "brigade: error: %s\n", core_error_msg());
      MPI_Finalize();
      return 1;
    }
    if (report) fprintf(stderr, "brigade: error: [rank %d] %s\n", rank, core_error_msg());
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return stopped ? 128 + stopped : 0; /* stopped by a signal, as a shell reports one */
}
