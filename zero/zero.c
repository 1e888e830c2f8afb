#include "zero/zero.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

int zero_init(zero_buffer *z, int stage, MPI_Comm comm, float *params, float *grads, size_t n, const kernels_ops *ops) {
  memset(z, 0, sizeof *z);
  z->stage = stage, z->comm = comm, z->params = params, z->grads = grads, z->n = n;
  z->ops = ops ? ops : kernels_cpu_ops();
  MPI_Comm_size(comm, &z->d);
  MPI_Comm_rank(comm, &z->r);
  if (strcmp(z->ops->name, "cpu") != 0 && (stage != 0 || z->d != 1))
    return core_error_set(CORE_EINPUT, "backend %s: ZeRO stage %d over %d replica(s) is not supported yet (its "
                          "collectives need NCCL); run zero_optimization.stage = 0 with one replica per stage",
                          z->ops->name, stage, z->d);
  z->shard = (n + (size_t)z->d - 1) / (size_t)z->d;
  if (z->shard == 0) z->shard = 1;
  z->lo = (size_t)z->r * z->shard;
  if (z->lo > n) z->lo = n;
  z->hi = z->lo + z->shard > n ? n : z->lo + z->shard;
  if (z->shard * (size_t)z->d > (size_t)1 << 31)
    return core_error_set(CORE_EINPUT, "a chunk of %zu parameters is too large for one MPI collective", n);
  z->req[0] = z->req[1] = MPI_REQUEST_NULL;
  if (stage >= 1) z->acc = core_calloc(z->shard, sizeof(float));
  if (stage == 1) {
    z->send = core_calloc(z->shard * (size_t)z->d, sizeof(float));
    z->recv = core_calloc(z->shard, sizeof(float));
  }
  if (stage == 2) z->counts = core_calloc((size_t)z->d, sizeof(int));
  return CORE_OK;
}

void zero_free(zero_buffer *z) {
  for (int k = 0; k < 2; k++) {
    if (z->req[k] != MPI_REQUEST_NULL && z->req[k] != 0) MPI_Wait(&z->req[k], MPI_STATUS_IGNORE);
    free(z->bucket[k]), free(z->kept[k]);
  }
  free(z->acc), free(z->send), free(z->recv), free(z->counts);
  memset(z, 0, sizeof *z);
}

int zero_keep(zero_buffer *z, size_t lo, size_t hi) {
  if (z->nkept == 2 || lo > hi || hi > z->n) return core_error_set(CORE_ERUNTIME, "bad ZeRO kept range [%zu, %zu)", lo, hi);
  if (z->stage != 2) return CORE_OK;
  z->kp_lo[z->nkept] = lo, z->kp_hi[z->nkept] = hi;
  z->kept[z->nkept] = core_calloc(hi > lo ? hi - lo : 1, sizeof(float));
  z->nkept++;
  return CORE_OK;
}

int zero_buckets(zero_buffer *z, size_t bucket_floats, int overlap, size_t largest) {
  if (z->stage != 2) return CORE_OK;
  size_t outside = z->n;
  for (int k = 0; k < z->nkept; k++) outside -= z->kp_hi[k] - z->kp_lo[k];
  size_t cap = bucket_floats < largest ? largest : bucket_floats;
  if (cap > outside) cap = outside;
  if (cap == 0) cap = 1;
  if (cap > (size_t)1 << 31) return core_error_set(CORE_EINPUT, "a gradient bucket of %zu floats is too large for one MPI collective", cap);
  z->cap = cap, z->overlap = overlap != 0, z->nb = overlap ? 2 : 1, z->cur = 0;
  for (int k = 0; k < z->nb; k++) {
    z->bucket[k] = core_calloc(cap, sizeof(float));
    z->req[k] = MPI_REQUEST_NULL;
  }
  z->grads = NULL;
  return CORE_OK;
}

float *zero_kept(const zero_buffer *z, size_t lo, size_t hi) {
  for (int k = 0; k < z->nkept; k++)
    if (lo >= z->kp_lo[k] && hi <= z->kp_hi[k]) return z->kept[k] + (lo - z->kp_lo[k]);
  return NULL;
}

/* Reduce-scatter of the full gradient buffer into recv (stage 1). */
static int scatter(zero_buffer *z) {
  memcpy(z->send, z->grads, sizeof(float) * z->n);
  memset(z->send + z->n, 0, sizeof(float) * (z->shard * (size_t)z->d - z->n));
  z->bytes_reduce += (double)sizeof(float) * (double)z->shard * (z->d - 1);
  z->reduce_scatters++;
  if (MPI_Reduce_scatter_block(z->send, z->recv, (int)z->shard, MPI_FLOAT, MPI_SUM, z->comm) != MPI_SUCCESS)
    return core_error_set(CORE_ERUNTIME, "gradient reduce-scatter failed");
  return CORE_OK;
}

/* [a, b) intersected with replica r's shard */
static size_t overlap_of(const zero_buffer *z, int r, size_t a, size_t b, size_t *from) {
  size_t lo = (size_t)r * z->shard, hi = lo + z->shard;
  if (lo < a) lo = a;
  if (hi > b) hi = b;
  if (from) *from = lo;
  return hi > lo ? hi - lo : 0;
}

static int bucket_wait(zero_buffer *z, int k) {
  if (z->req[k] == MPI_REQUEST_NULL) return CORE_OK;
  return MPI_Wait(&z->req[k], MPI_STATUS_IGNORE) == MPI_SUCCESS
             ? CORE_OK : core_error_set(CORE_ERUNTIME, "gradient reduce-scatter (bucket) failed");
}

/* Reduce-scatters the current bucket straight into the accumulator: this replica first adds
 * its accumulated part into its own bucket, so the sum that comes back is the new value (no
 * receive buffer). With overlap the reduce-scatter stays in flight while the backward fills the
 * other bucket; only one is ever in flight, since the next one may cover the same part of the
 * accumulator. */
static int bucket_flush(zero_buffer *z) {
  int k = z->cur;
  size_t a = z->blo[k], b = z->bhi[k], from;
  if (b == a) return CORE_OK;
  int rc = bucket_wait(z, k ^ 1);
  if (rc) return rc;
  float *data = z->bucket[k] + z->cap - (b - a);
  for (int r = 0; r < z->d; r++) z->counts[r] = (int)overlap_of(z, r, a, b, NULL);
  size_t mine = overlap_of(z, z->r, a, b, &from);
  float *acc = z->acc + (mine ? from - z->lo : 0);
  for (size_t i = 0; i < mine; i++) data[from - a + i] += acc[i];
  z->bytes_reduce += (double)sizeof(float) * (double)((b - a) - mine);
  z->reduce_scatters++;
  z->blo[k] = z->bhi[k] = 0;
  if (!z->overlap)
    return MPI_Reduce_scatter(data, acc, z->counts, MPI_FLOAT, MPI_SUM, z->comm) == MPI_SUCCESS
               ? CORE_OK : core_error_set(CORE_ERUNTIME, "gradient reduce-scatter (bucket) failed");
  if (MPI_Ireduce_scatter(data, acc, z->counts, MPI_FLOAT, MPI_SUM, z->comm, &z->req[k]) != MPI_SUCCESS)
    return core_error_set(CORE_ERUNTIME, "gradient reduce-scatter (bucket) failed to start");
  z->cur = k ^ 1;
  return CORE_OK;
}

float *zero_grad_dest(zero_buffer *z, size_t off, size_t n) {
  float *kept = zero_kept(z, off, off + n);
  if (kept) return kept;
  int k = z->cur;
  /* the bucket grows downwards: the next layer must end where the bucket begins and fit */
  if (z->bhi[k] > z->blo[k] && (off + n != z->blo[k] || z->bhi[k] - off > z->cap)) {
    int rc = bucket_flush(z);
    if (rc && !z->err) z->err = rc;
    k = z->cur;
  }
  if (z->bhi[k] == z->blo[k]) z->bhi[k] = z->blo[k] = off + n;
  z->blo[k] = off;
  float *p = z->bucket[k] + z->cap - (z->bhi[k] - off);
  memset(p, 0, sizeof(float) * n);
  return p;
}

int zero_after_backward(zero_buffer *z) {
  if (z->stage != 2) return CORE_OK;
  int rc = z->err;
  z->err = 0;
  if (!rc) rc = bucket_flush(z);
  return rc;
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
  /* stage 2: the buckets still in flight, then the kept ranges */
  if (!z->nb) return core_error_set(CORE_ERUNTIME, "ZeRO-2 without gradient buckets (zero_buckets was not called)");
  for (int k = 0; k < z->nb; k++) {
    int rc = bucket_wait(z, k);
    if (rc) return rc;
  }
  for (int k = 0; k < z->nkept; k++) {
    size_t lo = z->kp_lo[k], hi = z->kp_hi[k];
    if (z->d > 1 && hi > lo &&
        MPI_Allreduce(MPI_IN_PLACE, z->kept[k], (int)(hi - lo), MPI_FLOAT, MPI_SUM, z->comm) != MPI_SUCCESS)
      return core_error_set(CORE_ERUNTIME, "tied-gradient all-reduce failed");
    z->bytes_reduce += 2.0 * sizeof(float) * (double)(hi - lo) * (z->d - 1) / z->d;
    size_t a = lo > z->lo ? lo : z->lo, b = hi < z->hi ? hi : z->hi;
    for (size_t i = a; i < b; i++) z->acc[i - z->lo] += z->kept[k][i - lo];
  }
  return CORE_OK;
}

const float *zero_grad(const zero_buffer *z) { return z->stage == 0 ? z->grads : z->acc; }

void zero_range(const zero_buffer *z, size_t *lo, size_t *hi) {
  *lo = z->stage == 0 ? 0 : z->lo;
  *hi = z->stage == 0 ? z->n : z->hi;
}

/* Stage 2: every replica's shard straight into the parameter buffer, no staging copy. */
static int gather_in_place(zero_buffer *z) {
  int *displs = core_malloc(sizeof(int) * (size_t)z->d);
  for (int r = 0; r < z->d; r++) {
    size_t from;
    z->counts[r] = (int)overlap_of(z, r, 0, z->n, &from);
    displs[r] = z->counts[r] ? (int)from : 0;
  }
  z->bytes_gather += (double)sizeof(float) * (double)(z->n - (z->hi - z->lo));
  int ok = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, z->params, z->counts, displs, MPI_FLOAT, z->comm) == MPI_SUCCESS;
  free(displs);
  return ok ? CORE_OK : core_error_set(CORE_ERUNTIME, "parameter all-gather failed");
}

int zero_finish(zero_buffer *z) {
  if (z->grads) z->ops->zero(z->grads, z->n);
  for (int k = 0; k < z->nkept; k++) memset(z->kept[k], 0, sizeof(float) * (z->kp_hi[k] - z->kp_lo[k]));
  z->reduce_scatters = 0;
  if (z->stage == 0) return CORE_OK;
  memset(z->acc, 0, sizeof(float) * z->shard);
  if (z->d == 1) return CORE_OK;
  if (z->stage == 2) return gather_in_place(z);
  /* everyone's shard (padded) into send, then back into the full parameter buffer */
  memset(z->recv, 0, sizeof(float) * z->shard);
  memcpy(z->recv, z->params + z->lo, sizeof(float) * (z->hi - z->lo));
  z->bytes_gather += (double)sizeof(float) * (double)z->shard * (z->d - 1);
  if (MPI_Allgather(z->recv, (int)z->shard, MPI_FLOAT, z->send, (int)z->shard, MPI_FLOAT, z->comm) != MPI_SUCCESS)
    return core_error_set(CORE_ERUNTIME, "parameter all-gather failed");
  memcpy(z->params, z->send, sizeof(float) * z->n);
  return CORE_OK;
}

double zero_grad_bytes(const zero_buffer *z) {
  double f = 0;
  if (z->stage < 2) f = (double)z->n;                                     /* the full buffer */
  if (z->stage == 1) f += (double)z->shard * (z->d + 2);                  /* acc, send, recv */
  if (z->stage == 2) {
    f += (double)z->shard + (double)z->nb * (double)z->cap; /* acc, buckets */
    for (int k = 0; k < z->nkept; k++) f += (double)(z->kp_hi[k] - z->kp_lo[k]);
  }
  return f * sizeof(float);
}

size_t zero_state_len(const zero_buffer *z) { return z->stage == 0 ? z->n : z->hi - z->lo; }

int zero_gather_state(const zero_buffer *z, const float *shard_state, float *full) {
  if (z->stage == 0 || z->d == 1) {
    z->ops->to_host(full, shard_state, sizeof(float) * z->n);
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
  z->ops->to_device(shard_state, full + lo, sizeof(float) * (hi - lo));
}
