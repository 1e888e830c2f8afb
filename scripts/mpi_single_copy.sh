#!/bin/sh
# Prints the single-copy mechanism Open MPI's shared-memory transport (vader) should use on
# this machine: "cma" when two ranks can move 4 MiB through cross-memory attach
# (process_vm_readv), else "none" (containers often forbid it; the copy then goes through
# shared-memory fragments that only move while the sender is inside MPI, which stalls a
# pipeline whose sender is computing). The answer is cached in BUILD/mpi_single_copy.
#   usage: scripts/mpi_single_copy.sh BUILD_DIR
build=${1:-build}
cache="$build/mpi_single_copy"
if [ -s "$cache" ]; then cat "$cache"; exit 0; fi
mkdir -p "$build"
dir=$(mktemp -d)
cat > "$dir/probe.c" <<'C'
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int r, n = 1 << 20, ok = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  float *b = malloc(sizeof(float) * (size_t)n);
  for (int i = 0; i < n; i++) b[i] = r == 0 ? (float)i : 0;
  if (r == 0) MPI_Send(b, n, MPI_FLOAT, 1, 0, MPI_COMM_WORLD);
  if (r == 1) {
    MPI_Recv(b, n, MPI_FLOAT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    for (int i = 0; i < n; i++) ok &= b[i] == (float)i;
    if (ok) printf("ok\n");
  }
  MPI_Finalize();
  return ok ? 0 : 1;
}
C
mech=none
if mpicc -O1 -o "$dir/probe" "$dir/probe.c" 2>/dev/null &&
   OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
   OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=cma \
   timeout 60 mpirun -np 2 "$dir/probe" 2>/dev/null | grep -q '^ok$'; then
  mech=cma
fi
rm -rf "$dir"
echo "$mech" > "$cache"
echo "$mech"
