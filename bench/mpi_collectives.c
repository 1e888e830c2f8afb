/* bench/mpi_collectives.c: the collectives ZeRO uses, nccl-tests style, under mpirun:
 * time, algorithm bandwidth (bytes / time) and bus bandwidth (algbw x (d-1)/d for
 * reduce-scatter and all-gather, x 2(d-1)/d for all-reduce) of MPI_Reduce_scatter_block and
 * MPI_Allgather on the buffer sizes of a stage's gradients, beside MPI_Allreduce on the same
 * buffer (what ZeRO-0 does, and what an all-reduce-then-slice would cost). Below each MPI
 * row, brigade's own path through zero/ on the same buffer: ZeRO-1's reduce (staging copy +
 * reduce-scatter) and all-gather (zero_finish), and ZeRO-2's bucketed reduce-scatter of one
 * micro-batch's gradients as 16 layers of equal size in buckets of 4 layers, blocking and
 * overlapped (overlap has nothing to hide behind here: the gradients are all ready).
 *   mpirun -np D bench/mpi_collectives */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zero/zero.h"

/* One collective of brigade's ZeRO path: 0 = ZeRO-1 reduce, 1 = ZeRO-1 all-gather,
 * 2 / 3 = ZeRO-2 bucketed reduce-scatter of a micro-batch (blocking / overlap_comm). */
static double timed_zero(int which, float *params, float *grads, int count, MPI_Comm comm) {
  zero_buffer z;
  int reps = 5, layers = 16;
  size_t per = (size_t)count / layers;
  zero_init(&z, which < 2 ? 1 : 2, comm, params, grads, (size_t)count, NULL);
  if (which >= 2) zero_buckets(&z, 4 * per, which == 3, per);
  double total = 0;
  for (int r = 0; r <= reps; r++) { /* the first is a warm-up */
    MPI_Barrier(comm);
    double t0 = MPI_Wtime();
    if (which == 0) {
      zero_reduce(&z);
    } else if (which == 1) {
      zero_finish(&z);
    } else {
      for (int l = layers - 1; l >= 0; l--) {
        float *g = zero_grad_dest(&z, (size_t)l * per, per);
        memcpy(g, grads + (size_t)l * per, sizeof(float) * per); /* what the backward writes */
      }
      zero_after_backward(&z);
      zero_reduce(&z); /* waits for an overlapped bucket still in flight */
    }
    if (r) total += MPI_Wtime() - t0;
  }
  zero_free(&z);
  double t = total / reps, worst;
  MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, comm);
  return worst;
}

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
    float *params = malloc(sizeof(float) * (size_t)count);
    memcpy(params, send, sizeof(float) * (size_t)count);
    const char *mine[2][2] = {{"zero1_reduce", NULL}, {"zero1_gather", NULL}};
    for (int which = 0; which < 3; which++) {
      timed(which, send, recv, count, d, MPI_COMM_WORLD); /* warm: first touch of the pages */
      double t = timed(which, send, recv, count, d, MPI_COMM_WORLD);
      double bytes = (double)count * sizeof(float), alg = bytes / t / 1e9;
      double bus = alg * (which == 2 ? 2.0 * (d - 1) / d : (double)(d - 1) / d);
      if (rank == 0) printf("%9s %-14s %12.0f %10.3f %10.2f %10.2f\n", "", names[which], bytes, t * 1e3, alg, bus);
      /* brigade's path on the same buffer: ZeRO-1 under the MPI row it uses, ZeRO-2 under the reduce-scatter */
      for (int z = which == 0 ? 0 : which == 1 ? 1 : -1; z >= 0; z = -1) {
        int ops[3] = {z, z == 0 ? 2 : -1, z == 0 ? 3 : -1};
        const char *nm[4] = {mine[0][0], mine[1][0], "zero2_buckets", "zero2_overlap"};
        for (int k = 0; k < 3 && ops[k] >= 0; k++) {
          double tz = timed_zero(ops[k], params, send, count, MPI_COMM_WORLD);
          double az = bytes / tz / 1e9;
          if (rank == 0) printf("%9s %-14s %12.0f %10.3f %10.2f %10.2f\n", "", nm[ops[k]], bytes, tz * 1e3, az, az * (d - 1) / d);
        }
      }
    }
    free(params);
    free(send), free(recv);
  }
  MPI_Finalize();
  return 0;
}
