/* zero/devcomm.h: joining a device communicator (a table's kernels_coll: NCCL for "cuda") over
 * an MPI group, for ZeRO's collectives (zero.c, per data-parallel group) and the pipeline's
 * transfers (pipe/train.c, per pipeline). One decision, made the same way on every rank of the
 * group: the device path needs the table to offer device collectives, every rank to allow them
 * (BRIGADE_NCCL not "0") and every rank on a GPU of its own (NCCL puts one rank of a
 * communicator on one GPU; the ranks' 16-byte GPU identities go around over MPI). Then rank 0
 * makes a unique id, MPI_Bcast hands it around, and every rank joins. */
#ifndef BRIGADE_ZERO_DEVCOMM_H
#define BRIGADE_ZERO_DEVCOMM_H

#include <mpi.h>
#include <stddef.h>

#include "kernels/coll.h"
#include "kernels/ops.h"

/* Collective over comm. CORE_OK with *cc the communicator (the device path), or *cc NULL and
 * why[] saying why the group stays on MPI through host copies; an error status (message set,
 * naming `what`, e.g. "ZeRO collectives") when the device path was chosen but could not be set
 * up on some rank. `group` names the group in the reasons ("data-parallel group", "pipeline"). */
int zero_devcomm_join(const kernels_ops *ops, MPI_Comm comm, const char *what, const char *group,
                      kernels_coll_comm **cc, char *why, size_t whylen);

#endif
