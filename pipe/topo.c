#include "pipe/topo.h"

#include <stdio.h>
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
  MPI_Comm node;
  int len = 0;
  if (MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, t->world_rank, MPI_INFO_NULL, &node) != MPI_SUCCESS)
    return core_error_set(CORE_ERUNTIME, "MPI_Comm_split_type (the ranks of each node) failed");
  MPI_Comm_rank(node, &t->local_rank);
  MPI_Comm_size(node, &t->local_size);
  MPI_Comm_free(&node);
  if (MPI_Get_processor_name(t->host, &len) != MPI_SUCCESS) snprintf(t->host, sizeof t->host, "?");
  char mine[PIPE_HOST_LEN];
  snprintf(mine, sizeof mine, "%.*s", PIPE_HOST_LEN - 1, t->host);
  t->hosts = core_malloc((size_t)t->world_size * PIPE_HOST_LEN);
  if (MPI_Allgather(mine, PIPE_HOST_LEN, MPI_CHAR, t->hosts, PIPE_HOST_LEN, MPI_CHAR, world) != MPI_SUCCESS)
    return core_error_set(CORE_ERUNTIME, "MPI_Allgather (the ranks' node names) failed");
  return CORE_OK;
}

const char *pipe_topo_host(const pipe_topo *t, int r) {
  return t->hosts && r >= 0 && r < t->world_size ? t->hosts + (size_t)r * PIPE_HOST_LEN : "?";
}

void pipe_topo_free(pipe_topo *t) {
  free(t->hosts);
  t->hosts = NULL;
  if (t->pipe != MPI_COMM_NULL && t->pipe) MPI_Comm_free(&t->pipe);
  if (t->dp != MPI_COMM_NULL && t->dp) MPI_Comm_free(&t->dp);
}
