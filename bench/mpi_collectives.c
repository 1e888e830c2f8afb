/* bench/mpi_collectives.c: the collectives ZeRO uses, nccl-tests style, under mpirun:
 * time, algorithm bandwidth (bytes / time) and bus bandwidth (algbw x (d-1)/d for
 * reduce-scatter and all-gather, x 2(d-1)/d for all-reduce) of MPI_Reduce_scatter_block and
 * MPI_Allgather on the buffer sizes of a stage's gradients, beside MPI_Allreduce on the same
 * buffer (what ZeRO-0 does, and what an all-reduce-then-slice would cost).
 *   mpirun -np D bench/mpi_collectives */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static double timed(int which, float *send, float *recv, int count, int d, MPI_Comm comm) {
  int reps = 5;
  MPI_Barrier(comm);
  double t0 = MPI_Wtime();
  for (int r = 0; r < reps; r++) {
    if (which == 0) MPI_Reduce_scatter_block(send, recv, count / d, MPI_FLOAT, MPI_SUM, comm);
    else if (which == 1) MPI_Allgather(send, count / d, MPI_FLOAT, recv, count / d, MPI_FLOAT, comm);
    else MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, comm);
  }
  double t = (MPI_Wtime() - t0) / reps, worst;
  MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, comm);
  return worst;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, d;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &d);
  const char *names[3] = {"reduce_scatter", "all_gather", "all_reduce"};
  if (rank == 0) printf("%d ranks; %-14s %12s %10s %10s %10s\n", d, "collective", "bytes", "time_ms", "algbw_GB/s", "busbw_GB/s");
  for (int mb = 1; mb <= 64; mb *= 4) {
    int count = (int)((size_t)mb * (1 << 20) / sizeof(float));
    count -= count % d;
    float *send = malloc(sizeof(float) * (size_t)count), *recv = malloc(sizeof(float) * (size_t)count);
    for (int i = 0; i < count; i++) send[i] = (float)(i % 13);
    for (int which = 0; which < 3; which++) {
      timed(which, send, recv, count, d, MPI_COMM_WORLD); /* warm: first touch of the pages */
      double t = timed(which, send, recv, count, d, MPI_COMM_WORLD);
      double bytes = (double)count * sizeof(float), alg = bytes / t / 1e9;
      double bus = alg * (which == 2 ? 2.0 * (d - 1) / d : (double)(d - 1) / d);
      if (rank == 0) printf("%9s %-14s %12.0f %10.3f %10.2f %10.2f\n", "", names[which], bytes, t * 1e3, alg, bus);
    }
    free(send), free(recv);
  }
  MPI_Finalize();
  return 0;
}
