/* pipe/topo.h: ranks as a p x d grid (pipe x data). rank = stage * d + data, DeepSpeed's layout:
 * the data-parallel peers of a stage are adjacent ranks. */
#ifndef BRIGADE_PIPE_TOPO_H
#define BRIGADE_PIPE_TOPO_H

#include <mpi.h>

typedef struct {
  int world_rank, world_size;
  int p, d;          /* pipeline stages, data-parallel replicas */
  int stage, data;   /* this rank's coordinates */
  MPI_Comm pipe;     /* the p ranks of this rank's pipeline; rank in it = stage */
  MPI_Comm dp;       /* the d replicas of this rank's stage; rank in it = data */
  int nlocal;        /* ranks on this machine (sharing its memory), this one included */
  int *local;        /* [nlocal] their world ranks */
} pipe_topo;

/* Splits world into pipelines and data-parallel groups. CORE_EINPUT if the world size is not a
 * multiple of stages. */
int pipe_topo_init(pipe_topo *t, MPI_Comm world, int stages);
void pipe_topo_free(pipe_topo *t);

#endif
