#include "zero/zero.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

int zero_init(zero_buffer *z, int stage, MPI_Comm comm, float *params, float *grads, size_t n) {
  memset(z, 0, sizeof *z);
  z->stage = stage, z->comm = comm, z->params = params, z->grads = grads, z->n = n;
  MPI_Comm_size(comm, &z->d);
  MPI_Comm_rank(comm, &z->r);
  z->shard = (n + (size_t)z->d - 1) / (size_t)z->d;
  if (z->shard == 0) z->shard = 1;
  z->lo = (size_t)z->r * z->shard;
  if (z->lo > n) z->lo = n;
  z->hi = z->lo + z->shard > n ? n : z->lo + z->shard;
  if (z->shard * (size_t)z->d > (size_t)1 << 31)
    return core_error_set(CORE_EINPUT, "a chunk of %zu parameters is too large for one MPI collective", n);
  if (stage >= 1) {
    z->acc = core_calloc(z->shard, sizeof(float));
    z->send = core_calloc(z->shard * (size_t)z->d, sizeof(float));
    z->recv = core_calloc(z->shard, sizeof(float));
  }
  return CORE_OK;
}

void zero_free(zero_buffer *z) {
  free(z->acc), free(z->send), free(z->recv);
  memset(z, 0, sizeof *z);
}

int zero_exclude(zero_buffer *z, size_t lo, size_t hi) {
  if (z->nex == 2 || lo > hi || hi > z->n) return core_error_set(CORE_ERUNTIME, "bad ZeRO exclusion [%zu, %zu)", lo, hi);
  z->ex_lo[z->nex] = lo, z->ex_hi[z->nex] = hi, z->nex++;
  return CORE_OK;
}

static int excluded(const zero_buffer *z, size_t i) {
  for (int k = 0; k < z->nex; k++)
    if (i >= z->ex_lo[k] && i < z->ex_hi[k]) return 1;
  return 0;
}

/* Reduce-scatter of the full gradient buffer (excluded range as zeros) into recv. */
static int scatter(zero_buffer *z) {
  memcpy(z->send, z->grads, sizeof(float) * z->n);
  memset(z->send + z->n, 0, sizeof(float) * (z->shard * (size_t)z->d - z->n));
  for (int k = 0; z->stage == 2 && k < z->nex; k++)
    memset(z->send + z->ex_lo[k], 0, sizeof(float) * (z->ex_hi[k] - z->ex_lo[k]));
  z->bytes_reduce += (double)sizeof(float) * (double)z->shard * (z->d - 1);
  if (MPI_Reduce_scatter_block(z->send, z->recv, (int)z->shard, MPI_FLOAT, MPI_SUM, z->comm) != MPI_SUCCESS)
    return core_error_set(CORE_ERUNTIME, "gradient reduce-scatter failed");
  return CORE_OK;
}

int zero_after_backward(zero_buffer *z) {
  if (z->stage != 2) return CORE_OK;
  int rc = scatter(z);
  if (rc) return rc;
  for (size_t i = 0; i < z->shard; i++) z->acc[i] += z->recv[i];
  /* the excluded ranges keep accumulating in full; the rest starts the next micro-batch at 0 */
  for (size_t i = 0; i < z->n; i++)
    if (!excluded(z, i)) z->grads[i] = 0;
  return CORE_OK;
}

int zero_reduce(zero_buffer *z) {
  if (z->stage == 0) {
    if (z->d == 1) return CORE_OK;
    z->bytes_reduce += 2.0 * sizeof(float) * (double)z->n * (z->d - 1) / z->d;
    return MPI_Allreduce(MPI_IN_PLACE, z->grads, (int)z->n, MPI_FLOAT, MPI_SUM, z->comm) == MPI_SUCCESS
               ? CORE_OK : core_error_set(CORE_ERUNTIME, "gradient all-reduce failed");
  }
  if (z->stage == 1) {
    int rc = scatter(z);
    if (!rc) memcpy(z->acc, z->recv, sizeof(float) * z->shard);
    return rc;
  }
  /* stage 2: the excluded ranges were left out of the per-micro-batch scatters */
  for (int k = 0; k < z->nex; k++) {
    size_t lo = z->ex_lo[k], hi = z->ex_hi[k];
    if (z->d > 1 && hi > lo &&
        MPI_Allreduce(MPI_IN_PLACE, z->grads + lo, (int)(hi - lo), MPI_FLOAT, MPI_SUM, z->comm) != MPI_SUCCESS)
      return core_error_set(CORE_ERUNTIME, "tied-gradient all-reduce failed");
    z->bytes_reduce += 2.0 * sizeof(float) * (double)(hi - lo) * (z->d - 1) / z->d;
    size_t a = lo > z->lo ? lo : z->lo, b = hi < z->hi ? hi : z->hi;
    for (size_t i = a; i < b; i++) z->acc[i - z->lo] += z->grads[i];
  }
  return CORE_OK;
}

const float *zero_grad(const zero_buffer *z) { return z->stage == 0 ? z->grads : z->acc; }

void zero_range(const zero_buffer *z, size_t *lo, size_t *hi) {
  *lo = z->stage == 0 ? 0 : z->lo;
  *hi = z->stage == 0 ? z->n : z->hi;
}

int zero_finish(zero_buffer *z) {
  memset(z->grads, 0, sizeof(float) * z->n);
  if (z->stage == 0) return CORE_OK;
  memset(z->acc, 0, sizeof(float) * z->shard);
  if (z->d == 1) return CORE_OK;
  /* everyone's shard (padded) into send, then back into the full parameter buffer */
  memset(z->recv, 0, sizeof(float) * z->shard);
  memcpy(z->recv, z->params + z->lo, sizeof(float) * (z->hi - z->lo));
  z->bytes_gather += (double)sizeof(float) * (double)z->shard * (z->d - 1);
  if (MPI_Allgather(z->recv, (int)z->shard, MPI_FLOAT, z->send, (int)z->shard, MPI_FLOAT, z->comm) != MPI_SUCCESS)
    return core_error_set(CORE_ERUNTIME, "parameter all-gather failed");
  memcpy(z->params, z->send, sizeof(float) * z->n);
  return CORE_OK;
}

size_t zero_state_len(const zero_buffer *z) { return z->stage == 0 ? z->n : z->hi - z->lo; }

int zero_gather_state(const zero_buffer *z, const float *shard_state, float *full) {
  if (z->stage == 0 || z->d == 1) {
    memcpy(full, shard_state, sizeof(float) * z->n);
    return CORE_OK;
  }
  float *mine = core_calloc(z->shard, sizeof(float)), *all = core_malloc(sizeof(float) * z->shard * (size_t)z->d);
  memcpy(mine, shard_state, sizeof(float) * (z->hi - z->lo));
  int ok = MPI_Allgather(mine, (int)z->shard, MPI_FLOAT, all, (int)z->shard, MPI_FLOAT, z->comm) == MPI_SUCCESS;
  if (ok) memcpy(full, all, sizeof(float) * z->n);
  free(mine), free(all);
  return ok ? CORE_OK : core_error_set(CORE_ERUNTIME, "optimizer-state all-gather failed");
}

void zero_take_shard(const zero_buffer *z, const float *full, float *shard_state) {
  size_t lo = z->stage == 0 ? 0 : z->lo, hi = z->stage == 0 ? z->n : z->hi;
  memcpy(shard_state, full + lo, sizeof(float) * (hi - lo));
}
