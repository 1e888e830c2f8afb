#include "zero/devcomm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* Whether the group may take the device path: every rank allows it, knows its GPU, and no two
 * ranks share one. why[] is set when not. */
static int devices_distinct(const kernels_coll *cl, MPI_Comm comm, const char *what, const char *group,
                            char *why, size_t whylen, int *ok) {
  enum { B = KERNELS_COLL_DEVICE_ID_BYTES, E = B + 2 };
  int d;
  MPI_Comm_size(comm, &d);
  const char *env = getenv("BRIGADE_NCCL");
  unsigned char mine[E] = {0};
  mine[B] = !(env && strcmp(env, "0") == 0);               /* this rank allows NCCL */
  mine[B + 1] = mine[B] && cl->device_id(mine) == CORE_OK; /* and knows its GPU */
  unsigned char *all = core_malloc((size_t)d * E);
  if (MPI_Allgather(mine, E, MPI_BYTE, all, E, MPI_BYTE, comm) != MPI_SUCCESS) {
    free(all);
    return core_error_set(CORE_ERUNTIME, "%s: exchanging the ranks' GPU identities failed", what);
  }
  why[0] = 0;
  for (int q = 0; q < d && !why[0]; q++)
    if (!all[(size_t)q * E + B]) snprintf(why, whylen, "BRIGADE_NCCL=0");
  for (int q = 0; q < d && !why[0]; q++)
    if (!all[(size_t)q * E + B + 1]) snprintf(why, whylen, "a rank of the %s could not read its GPU's identity", group);
  for (int q = 0; q < d && !why[0]; q++)
    for (int q2 = q + 1; q2 < d && !why[0]; q2++)
      if (memcmp(all + (size_t)q * E, all + (size_t)q2 * E, B) == 0)
        snprintf(why, whylen, "ranks of a %s share a GPU; NCCL needs one GPU per rank", group);
  free(all);
  *ok = !why[0];
  return CORE_OK;
}

int zero_devcomm_join(const kernels_ops *ops, MPI_Comm comm, const char *what, const char *group,
                      kernels_coll_comm **cc, char *why, size_t whylen) {
  enum { U = KERNELS_COLL_UNIQUE_ID_BYTES };
  *cc = NULL;
  const kernels_coll *cl = ops->coll;
  if (!cl) {
    snprintf(why, whylen, "the backend offers no device collectives");
    return CORE_OK;
  }
  int ok = 0, r;
  MPI_Comm_rank(comm, &r);
  int rc = devices_distinct(cl, comm, what, group, why, whylen, &ok);
  if (rc || !ok) return rc;
  /* rank 0 makes the id (its last byte says whether it could), everyone joins */
  unsigned char id[U + 1] = {0};
  if (r == 0) id[U] = cl->unique_id(id) == CORE_OK;
  if (MPI_Bcast(id, U + 1, MPI_BYTE, 0, comm) != MPI_SUCCESS)
    return core_error_set(CORE_ERUNTIME, "%s: handing the NCCL unique id around failed", what);
  if (!id[U]) {
    if (r == 0) return core_error_prefix("%s over %s (BRIGADE_NCCL=0 uses MPI through host copies instead)", what, cl->name);
    return core_error_set(CORE_ERUNTIME, "%s over %s: rank 0 of the %s could not make a unique id (BRIGADE_NCCL=0 "
                          "uses MPI through host copies instead)", what, cl->name, group);
  }
  int d;
  MPI_Comm_size(comm, &d);
  rc = cl->comm_init(cc, id, d, r);
  int mine = rc == CORE_OK, all_ok = 0;
  if (MPI_Allreduce(&mine, &all_ok, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS) all_ok = 0;
  if (all_ok) return CORE_OK;
  cl->comm_free(*cc), *cc = NULL;
  if (rc) return core_error_prefix("%s over %s (BRIGADE_NCCL=0 uses MPI through host copies instead)", what, cl->name);
  return core_error_set(CORE_ERUNTIME, "%s over %s: another rank of the %s could not join the communicator "
                        "(BRIGADE_NCCL=0 uses MPI through host copies instead)", what, cl->name, group);
}
