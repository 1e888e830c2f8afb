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
  /* where this rank runs: its node's name (MPI_Get_processor_name) and its place among the
   * ranks of that node (MPI_COMM_TYPE_SHARED: whatever launcher started it) */
  int local_rank, local_size;
  char host[MPI_MAX_PROCESSOR_NAME];
  char *hosts; /* [world_size * PIPE_HOST_LEN]: every rank's node name, for messages */
} pipe_topo;

enum { PIPE_HOST_LEN = 64 };
/* The node world rank r runs on ("?" when not known). */
const char *pipe_topo_host(const pipe_topo *t, int r);

/* Splits world into pipelines and data-parallel groups. CORE_EINPUT if the world size is not a
 * multiple of stages. */
int pipe_topo_init(pipe_topo *t, MPI_Comm world, int stages);
void pipe_topo_free(pipe_topo *t);

#endif
