/* A receive holds back only its consumer, on the MPI path, proved by order rather than by time:
 * a 2-rank program where rank 0 posts both gradient receives before its two backwards, and
 * rank 1, in its second backward, waits for a token rank 0 sends from its first. Rank 1 sends
 * the second gradient only after that backward, so a rank 0 whose receive held it until the data
 * came (the second gradient before the first backward) would never send the token: the run then
 * ends in the worker's timeout. Posted receives complete before their consumers only, and the
 * step finishes. The token goes over MPI_COMM_WORLD; the workers talk over a duplicate of it.
 *   mpirun -np 2 worker_lane [--steps N] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "pipe/worker.h"
#include "schedule/schedule.h"
#include "tests/common/lane_program.h"

#define NF 4096
enum { TOKEN_TAG = 4242 };

typedef struct {
  int rank;
  float *buf; /* [4 kinds][2 slots][NF] */
  int tokens;
} stub;

static int run(void *ctx, const sched_instr *in) {
  stub *x = ctx;
  if (in->op != SCHED_BACKWARD) return 0;
  int token = in->mb;
  if (x->rank == 0 && in->mb == 0) /* the first backward: tell rank 1 it ran */
    return MPI_Send(&token, 1, MPI_INT, 1, TOKEN_TAG, MPI_COMM_WORLD) == MPI_SUCCESS ? 0 : 1;
  if (x->rank == 1 && in->mb == 1) { /* the second: not before rank 0's first has run */
    MPI_Request req;
    if (MPI_Irecv(&token, 1, MPI_INT, 0, TOKEN_TAG, MPI_COMM_WORLD, &req) != MPI_SUCCESS) return 1;
    double start = MPI_Wtime();
    for (int done = 0; !done;) { /* bounded: a rank 0 stuck in a receive never sends it */
      MPI_Test(&req, &done, MPI_STATUS_IGNORE);
      if (!done && MPI_Wtime() - start > 15) {
        MPI_Cancel(&req);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        return core_error_set(CORE_ERUNTIME, "rank 0's first backward never ran (its receives held it)");
      }
    }
    x->tokens++;
  }
  return 0;
}

static float *buffer(void *ctx, const sched_instr *in, size_t *n) {
  stub *x = ctx;
  *n = NF;
  return x->buf + ((size_t)(in->op - SCHED_SEND_ACT) * 2 + (size_t)(in->slot & 1)) * NF;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size, steps = 3;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
  if (size != 2) {
    if (rank == 0) fprintf(stderr, "worker_lane: run it on 2 ranks\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  sched_program pr; /* sim/a_receive_holds_back_only_its_consumer's program */
  if (lane_program(&pr) || sched_verify(&pr)) {
    fprintf(stderr, "rank %d: %s\n", rank, core_error_msg());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  stub x = {.rank = rank, .buf = calloc((size_t)8 * NF, sizeof(float))};
  pipe_exec ex = {.ctx = &x, .run = run, .buffer = buffer};
  pipe_worker w;
  int rc = pipe_worker_init(&w, &pr, rank, comm, ex);
  w.timeout_s = 10;
  for (int s = 0; s < steps && !rc; s++) rc = pipe_worker_step(&w);
  if (rc) fprintf(stderr, "worker_lane: %s\n", core_error_msg());
  pipe_worker_free(&w);
  int bad = rc || (rank == 1 && x.tokens != steps), any = 0;
  MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) printf("worker_lane: %d steps: %s\n", steps, any ? "FAILED" : "ok");
  free(x.buf);
  MPI_Comm_free(&comm);
  sched_program_free(&pr);
  MPI_Finalize();
  return any ? 1 : 0;
}
