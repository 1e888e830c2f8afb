#include "pipe/topo.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

int pipe_topo_init(pipe_topo *t, MPI_Comm world, int stages) {
  memset(t, 0, sizeof *t);
  MPI_Comm_rank(world, &t->world_rank);
  MPI_Comm_size(world, &t->world_size);
  if (stages < 1 || t->world_size % stages != 0)
    return core_error_set(CORE_EINPUT, "pipeline.stages = %d does not divide the %d ranks", stages,
                          t->world_size);
  t->p = stages;
  t->d = t->world_size / stages;
  t->stage = t->world_rank / t->d;
  t->data = t->world_rank % t->d;
  /* one pipeline per data index (colour data, ordered by stage); one group per stage */
  if (MPI_Comm_split(world, t->data, t->stage, &t->pipe) != MPI_SUCCESS ||
      MPI_Comm_split(world, t->stage, t->data, &t->dp) != MPI_SUCCESS)
    return core_error_set(CORE_ERUNTIME, "MPI_Comm_split failed");
  /* the ranks sharing this machine's memory, for the memory check before anything is allocated */
  MPI_Comm node;
  if (MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, t->world_rank, MPI_INFO_NULL, &node) != MPI_SUCCESS)
    return core_error_set(CORE_ERUNTIME, "MPI_Comm_split_type failed");
  MPI_Comm_size(node, &t->nlocal);
  t->local = core_malloc(sizeof(int) * (size_t)t->nlocal);
  MPI_Allgather(&t->world_rank, 1, MPI_INT, t->local, 1, MPI_INT, node);
  MPI_Comm_free(&node);
  return CORE_OK;
}

void pipe_topo_free(pipe_topo *t) {
  free(t->local);
  t->local = NULL;
  if (t->pipe != MPI_COMM_NULL && t->pipe) MPI_Comm_free(&t->pipe);
  if (t->dp != MPI_COMM_NULL && t->dp) MPI_Comm_free(&t->dp);
}
