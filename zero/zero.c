#include "zero/zero.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"
#include "core/watch.h"
#include "zero/devcomm.h"

/* ---- the path of the collectives: ops->coll (NCCL) or MPI through host copies ---- */

/* Rank 0 of the group says the path, each path and reason once per process. */
static void say_path(const zero_buffer *z, const char *why) {
  static char said[8][160];
  static int nsaid;
  const char *key = z->nccl ? "NCCL" : why;
  if (z->r != 0) return;
  for (int i = 0; i < nsaid; i++)
    if (strcmp(said[i], key) == 0) return;
  if (nsaid < 8) snprintf(said[nsaid++], sizeof said[0], "%s", key);
  if (z->nccl) core_log(CORE_LOG_INFO, "ZeRO collectives: NCCL (one GPU per rank: device memory, no host copies)");
  else core_log(CORE_LOG_INFO, "ZeRO collectives: MPI through host copies (%s)", why);
}

/* Joins the group's device communicator when the collectives can go through ops->coll
 * (zero/devcomm.h decides, the same way on every rank), and says the path. */
static int coll_setup(zero_buffer *z) {
  char why[160];
  int rc = zero_devcomm_join(z->ops, z->comm, "ZeRO collectives", "data-parallel group", &z->cc, why, sizeof why);
  if (rc) return rc;
  if (!z->cc) {
    say_path(z, why);
    return CORE_OK;
  }
  z->nccl = 1;
  z->ncounts = core_calloc((size_t)z->d, sizeof(size_t));
  say_path(z, NULL);
  return CORE_OK;
}

/* ncounts = every replica's part of [a, b) (consecutive ranges: the shards are) */
static void coll_counts(zero_buffer *z, size_t a, size_t b);

int zero_init(zero_buffer *z, int stage, MPI_Comm comm, float *params, float *grads, size_t n, const kernels_ops *ops) {
  memset(z, 0, sizeof *z);
  z->stage = stage, z->comm = comm, z->params = params, z->grads = grads, z->n = n;
  z->ops = ops ? ops : kernels_cpu_ops();
  MPI_Comm_size(comm, &z->d);
  MPI_Comm_rank(comm, &z->r);
  z->device = z->ops->device_memory;
  z->shard = (n + (size_t)z->d - 1) / (size_t)z->d;
  if (z->shard == 0) z->shard = 1;
  z->lo = (size_t)z->r * z->shard;
  if (z->lo > n) z->lo = n;
  z->hi = z->lo + z->shard > n ? n : z->lo + z->shard;
  if (z->shard * (size_t)z->d > (size_t)INT_MAX) /* MPI counts are ints */
    return core_error_set(CORE_EINPUT, "a chunk of %zu parameters is too large for one MPI collective", n);
  z->req[0] = z->req[1] = MPI_REQUEST_NULL;
  if (z->device && z->d > 1) {
    int rc = coll_setup(z);
    if (rc) return rc;
  }
  if (stage >= 1 && !(z->acc = z->ops->alloc(sizeof(float) * z->shard)))
    return core_error_set(CORE_ERUNTIME, "backend %s: out of memory for a gradient shard of %zu floats", z->ops->name, z->shard);
  if (stage == 1 && !z->nccl) {
    z->send = core_calloc(z->shard * (size_t)z->d, sizeof(float));
    z->recv = core_calloc(z->shard, sizeof(float));
  }
  if (stage >= 2) z->counts = core_calloc((size_t)z->d, sizeof(int));
  if (stage == 3 && !(z->pshard = z->ops->alloc(sizeof(float) * z->shard)))
    return core_error_set(CORE_ERUNTIME, "backend %s: out of memory for a parameter shard of %zu floats", z->ops->name, z->shard);
  return CORE_OK;
}

void zero_free(zero_buffer *z) {
  for (int k = 0; k < 2; k++) {
    if (z->req[k] != MPI_REQUEST_NULL && z->req[k] != 0) MPI_Wait(&z->req[k], MPI_STATUS_IGNORE);
    if (z->inflight[k] && z->cc) z->ops->coll->wait(z->cc, k); /* before its buffers go */
    if (z->ops) z->ops->free(z->bucket[k]), z->ops->free(z->kept[k]);
    free(z->hbucket[k]);
  }
  if (z->ops) z->ops->free(z->acc), z->ops->free(z->pshard);
  free(z->send), free(z->recv), free(z->counts), free(z->host), free(z->ncounts), free(z->gcounts), free(z->gdispls);
  if (z->cc) z->ops->coll->comm_free(z->cc);
  memset(z, 0, sizeof *z);
}

int zero_tie(zero_buffer *z, size_t lo, size_t hi) {
  if (lo > hi || hi > z->n) return core_error_set(CORE_ERUNTIME, "bad ZeRO tied range [%zu, %zu)", lo, hi);
  z->tie_lo = lo, z->tie_hi = hi;
  return CORE_OK;
}

int zero_keep(zero_buffer *z, size_t lo, size_t hi) {
  if (z->nkept == 2 || lo > hi || hi > z->n) return core_error_set(CORE_ERUNTIME, "bad ZeRO kept range [%zu, %zu)", lo, hi);
  if (z->stage < 2) return CORE_OK;
  z->kp_lo[z->nkept] = lo, z->kp_hi[z->nkept] = hi;
  z->kept[z->nkept] = z->ops->alloc(sizeof(float) * (hi > lo ? hi - lo : 1));
  if (!z->kept[z->nkept]) return core_error_set(CORE_ERUNTIME, "backend %s: out of memory for kept gradients", z->ops->name);
  z->nkept++;
  return CORE_OK;
}

int zero_buckets(zero_buffer *z, size_t bucket_floats, int overlap, size_t largest) {
  if (z->stage < 2) return CORE_OK;
  size_t outside = z->n;
  for (int k = 0; k < z->nkept; k++) outside -= z->kp_hi[k] - z->kp_lo[k];
  size_t cap = bucket_floats < largest ? largest : bucket_floats;
  if (cap > outside) cap = outside;
  if (cap == 0) cap = 1;
  if (cap > (size_t)1 << 31) return core_error_set(CORE_EINPUT, "a gradient bucket of %zu floats is too large for one MPI collective", cap);
  z->cap = cap, z->overlap = overlap != 0, z->nb = overlap ? 2 : 1, z->cur = 0;
  for (int k = 0; k < z->nb; k++) {
    z->bucket[k] = z->ops->alloc(sizeof(float) * cap);
    if (!z->bucket[k]) return core_error_set(CORE_ERUNTIME, "backend %s: out of memory for a gradient bucket", z->ops->name);
    if (z->device && !z->nccl) z->hbucket[k] = core_calloc(cap + z->shard, sizeof(float)); /* bucket, then my part of the sum */
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
  if (z->nccl) { /* straight from the gradients into the accumulator */
    z->bytes_reduce += (double)sizeof(float) * (double)z->shard * (z->d - 1);
    z->reduce_scatters++;
    int rc;
    if (z->shard * (size_t)z->d == z->n) rc = z->ops->coll->reduce_scatter(z->cc, z->grads, z->acc, z->shard);
    else coll_counts(z, 0, z->n), rc = z->ops->coll->reduce_scatterv(z->cc, z->grads, z->acc, z->ncounts);
    return rc ? core_error_prefix("gradient reduce-scatter") : CORE_OK;
  }
  z->ops->to_host(z->send, z->grads, sizeof(float) * z->n);
  memset(z->send + z->n, 0, sizeof(float) * (z->shard * (size_t)z->d - z->n));
  z->bytes_reduce += (double)sizeof(float) * (double)z->shard * (z->d - 1);
  z->reduce_scatters++;
  core_watch_begin("the gradients' reduce-scatter (ZeRO)");
  int err = MPI_Reduce_scatter_block(z->send, z->recv, (int)z->shard, MPI_FLOAT, MPI_SUM, z->comm) != MPI_SUCCESS;
  core_watch_end();
  return err ? core_error_set(CORE_ERUNTIME, "gradient reduce-scatter failed") : CORE_OK;
}

/* [a, b) intersected with replica r's shard */
static size_t overlap_of(const zero_buffer *z, int r, size_t a, size_t b, size_t *from) {
  size_t lo = (size_t)r * z->shard, hi = lo + z->shard;
  if (lo < a) lo = a;
  if (hi > b) hi = b;
  if (from) *from = lo;
  return hi > lo ? hi - lo : 0;
}

static void coll_counts(zero_buffer *z, size_t a, size_t b) {
  for (int r = 0; r < z->d; r++) z->ncounts[r] = overlap_of(z, r, a, b, NULL);
}

/* Device memory: the reduce-scatter ran on host copies; its result goes to the accumulator. */
static void bucket_landed(zero_buffer *z, int k) {
  if (z->device && z->pend_n[k]) z->ops->to_device(z->pend_dst[k], z->hbucket[k] + z->cap, sizeof(float) * z->pend_n[k]);
  z->pend_n[k] = 0;
}

static int bucket_wait(zero_buffer *z, int k) {
  if (z->inflight[k]) { /* ops from here on wait for it; the host does not */
    z->inflight[k] = 0;
    int rc = z->ops->coll->wait(z->cc, k);
    if (rc) return core_error_prefix("gradient reduce-scatter (bucket)");
  }
  if (z->req[k] == MPI_REQUEST_NULL) return CORE_OK;
  core_watch_begin("a gradient bucket's reduce-scatter (ZeRO-2/3)");
  int err = MPI_Wait(&z->req[k], MPI_STATUS_IGNORE) != MPI_SUCCESS;
  core_watch_end();
  if (err) return core_error_set(CORE_ERUNTIME, "gradient reduce-scatter (bucket) failed");
  bucket_landed(z, k);
  return CORE_OK;
}

/* Mixed precision: a gradient buffer holds bf16/fp16 values (an fp16 overflow becomes inf). */
static void round_grads(const zero_buffer *z, float *x, size_t n) {
  if (z->round == 1) z->ops->round_bf16(x, n);
  else if (z->round == 2) z->ops->round_fp16(x, n);
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
  round_grads(z, data, b - a); /* this micro-batch's gradients as a 16-bit buffer holds them */
  if (mine) z->ops->axpy(data + (from - a), 1.0f, acc, mine); /* data + acc, one rounding */
  z->bytes_reduce += (double)sizeof(float) * (double)((b - a) - mine);
  z->reduce_scatters++;
  z->blo[k] = z->bhi[k] = 0;
  if (z->nccl) { /* on device memory: the bucket straight into the accumulator */
    coll_counts(z, a, b);
    if (!z->overlap) {
      rc = z->ops->coll->reduce_scatterv(z->cc, data, acc, z->ncounts);
      return rc ? core_error_prefix("gradient reduce-scatter (bucket)") : CORE_OK;
    }
    rc = z->ops->coll->reduce_scatterv_async(z->cc, k, data, acc, z->ncounts);
    if (rc) return core_error_prefix("gradient reduce-scatter (bucket) failed to start");
    z->inflight[k] = 1;
    z->cur = k ^ 1;
    return CORE_OK;
  }
  const float *send = data;
  float *recv = acc;
  if (z->device) { /* MPI works on host copies: the bucket, and my part of the sum after it */
    z->ops->to_host(z->hbucket[k], data, sizeof(float) * (b - a));
    send = z->hbucket[k], recv = z->hbucket[k] + z->cap;
    z->pend_dst[k] = acc, z->pend_n[k] = mine;
  }
  if (!z->overlap) {
    core_watch_begin("a gradient bucket's reduce-scatter (ZeRO-2/3)");
    int err = MPI_Reduce_scatter(send, recv, z->counts, MPI_FLOAT, MPI_SUM, z->comm) != MPI_SUCCESS;
    core_watch_end();
    if (err) return core_error_set(CORE_ERUNTIME, "gradient reduce-scatter (bucket) failed");
    bucket_landed(z, k);
    return CORE_OK;
  }
  if (MPI_Ireduce_scatter(send, recv, z->counts, MPI_FLOAT, MPI_SUM, z->comm, &z->req[k]) != MPI_SUCCESS)
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
  z->ops->zero(p, n);
  return p;
}

int zero_after_backward(zero_buffer *z) {
  if (z->stage < 2) return CORE_OK;
  int rc = z->err;
  z->err = 0;
  if (!rc) rc = bucket_flush(z);
  return rc;
}

/* Host memory for device buffers on their way through MPI (n floats at least). */
static float *host_buf(zero_buffer *z, size_t n) {
  if (n > z->nhost) {
    free(z->host);
    z->host = core_malloc(sizeof(float) * n), z->nhost = n;
  }
  return z->host;
}

/* In-place sum over the group of n floats of backend memory; non-zero on an MPI error (on a
 * coll error, whose message is set). */
static int allreduce(zero_buffer *z, float *x, size_t n) {
  if (z->nccl) return z->ops->coll->all_reduce(z->cc, x, n) != CORE_OK;
  float *h = z->device ? host_buf(z, n) : x;
  if (z->device) z->ops->to_host(h, x, sizeof(float) * n);
  core_watch_begin("the gradients' all-reduce (data parallel)");
  int err = MPI_Allreduce(MPI_IN_PLACE, h, (int)n, MPI_FLOAT, MPI_SUM, z->comm) != MPI_SUCCESS;
  core_watch_end();
  if (!z->device) return err;
  if (!err) z->ops->to_device(x, h, sizeof(float) * n);
  return err;
}

/* allreduce of x, the gradients of [off, off + n): the part inside the tied range on its own
 * (zero_tie), the parts before and after it each in one piece. */
static int allreduce_parts(zero_buffer *z, float *x, size_t off, size_t n) {
  size_t end = off + n, cut[4] = {off, off, end, end};
  if (z->tie_hi > z->tie_lo && z->tie_lo < end && z->tie_hi > off) {
    cut[1] = z->tie_lo > off ? z->tie_lo : off;
    cut[2] = z->tie_hi < end ? z->tie_hi : end;
  }
  for (int k = 0; k < 3; k++)
    if (cut[k + 1] > cut[k] && allreduce(z, x + (cut[k] - off), cut[k + 1] - cut[k])) return 1;
  return 0;
}

int zero_reduce(zero_buffer *z) {
  if (z->stage == 0) {
    if (z->d == 1) return CORE_OK;
    z->bytes_reduce += 2.0 * sizeof(float) * (double)z->n * (z->d - 1) / z->d;
    if (!allreduce_parts(z, z->grads, 0, z->n)) return CORE_OK;
    return z->nccl ? core_error_prefix("gradient all-reduce") : core_error_set(CORE_ERUNTIME, "gradient all-reduce failed");
  }
  if (z->stage == 1) {
    int rc = scatter(z);
    if (!rc && !z->nccl) z->ops->to_device(z->acc, z->recv, sizeof(float) * z->shard);
    return rc;
  }
  /* stages 2 and 3: the buckets still in flight, then the kept ranges */
  if (!z->nb) return core_error_set(CORE_ERUNTIME, "ZeRO-2/3 without gradient buckets (zero_buckets was not called)");
  for (int k = 0; k < z->nb; k++) {
    int rc = bucket_wait(z, k);
    if (rc) return rc;
  }
  for (int k = 0; k < z->nkept; k++) {
    size_t lo = z->kp_lo[k], hi = z->kp_hi[k];
    round_grads(z, z->kept[k], hi - lo);
    if (z->d > 1 && hi > lo && allreduce_parts(z, z->kept[k], lo, hi - lo))
      return z->nccl ? core_error_prefix("tied-gradient all-reduce") : core_error_set(CORE_ERUNTIME, "tied-gradient all-reduce failed");
    z->bytes_reduce += 2.0 * sizeof(float) * (double)(hi - lo) * (z->d - 1) / z->d;
    size_t a = lo > z->lo ? lo : z->lo, b = hi < z->hi ? hi : z->hi;
    if (b > a) z->ops->axpy(z->acc + (a - z->lo), 1.0f, z->kept[k] + (a - lo), b - a);
  }
  return CORE_OK;
}

int zero_wait(zero_buffer *z, double timeout_s) {
  if (!z->nccl) return CORE_OK;
  return z->ops->coll->sync(z->cc, timeout_s) ? core_error_prefix("ZeRO collectives, waiting for the step's reductions")
                                              : CORE_OK;
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
  if (z->nccl) {
    free(displs);
    coll_counts(z, 0, z->n);
    int rc = z->ops->coll->all_gatherv(z->cc, z->params, z->ncounts);
    return rc ? core_error_prefix("parameter all-gather") : CORE_OK;
  }
  float *p = z->params;
  if (z->device) { /* through a host copy of the whole buffer, my shard in place */
    p = host_buf(z, z->n);
    z->ops->to_host(p + z->lo, z->params + z->lo, sizeof(float) * (z->hi - z->lo));
  }
  core_watch_begin("the parameters' all-gather (ZeRO)");
  int ok = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, p, z->counts, displs, MPI_FLOAT, z->comm) == MPI_SUCCESS;
  core_watch_end();
  if (ok && z->device) z->ops->to_device(z->params, p, sizeof(float) * z->n);
  free(displs);
  return ok ? CORE_OK : core_error_set(CORE_ERUNTIME, "parameter all-gather failed");
}

float *zero_replace_params(zero_buffer *z, float *p) {
  float **at = z->stage == 3 ? &z->pshard : &z->params, *old = *at;
  *at = p;
  return old;
}

float *zero_param_shard(const zero_buffer *z) {
  if (z->stage == 3) return z->pshard;
  return z->stage == 0 ? z->params : z->params + z->lo;
}

int zero_gather_params(zero_buffer *z, float *dst, MPI_Request *req) {
  size_t mine = z->hi - z->lo;
  if (req) *req = MPI_REQUEST_NULL;
  z->ops->copy(dst + z->lo, z->pshard, mine);
  if (z->d == 1) return CORE_OK;
  if (!z->gcounts) { /* every replica's part of the buffer: fixed, and alive while a gather is in flight */
    z->gcounts = core_malloc(sizeof(int) * (size_t)z->d), z->gdispls = core_malloc(sizeof(int) * (size_t)z->d);
    for (int r = 0; r < z->d; r++) {
      size_t from;
      z->gcounts[r] = (int)overlap_of(z, r, 0, z->n, &from);
      z->gdispls[r] = z->gcounts[r] ? (int)from : 0;
    }
  }
  z->bytes_gather += (double)sizeof(float) * (double)(z->n - mine);
  z->bytes_param_gather += (double)sizeof(float) * (double)(z->n - mine);
  z->param_gathers++;
  if (z->nccl) {
    coll_counts(z, 0, z->n);
    int rc = z->ops->coll->all_gatherv(z->cc, dst, z->ncounts);
    return rc ? core_error_prefix("parameter all-gather (ZeRO-3)") : CORE_OK;
  }
  if (!z->device && req) /* host memory: in flight while the rank computes; the chunk's next op waits */
    return MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, dst, z->gcounts, z->gdispls, MPI_FLOAT, z->comm, req) == MPI_SUCCESS
               ? CORE_OK
               : core_error_set(CORE_ERUNTIME, "parameter all-gather (ZeRO-3) failed to start");
  float *p = dst;
  if (z->device) { /* through a host buffer as large as the chunk's parameters, my shard in place */
    p = host_buf(z, z->n);
    z->ops->to_host(p + z->lo, z->pshard, sizeof(float) * mine);
  }
  core_watch_begin("the parameters' all-gather (ZeRO-3)");
  int ok = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, p, z->gcounts, z->gdispls, MPI_FLOAT, z->comm) == MPI_SUCCESS;
  core_watch_end();
  if (ok && z->device) z->ops->to_device(dst, p, sizeof(float) * z->n);
  return ok ? CORE_OK : core_error_set(CORE_ERUNTIME, "parameter all-gather (ZeRO-3) failed");
}

int zero_finish(zero_buffer *z) {
  if (z->grads) z->ops->zero(z->grads, z->n);
  for (int k = 0; k < z->nkept; k++) z->ops->zero(z->kept[k], z->kp_hi[k] - z->kp_lo[k]);
  z->reduce_scatters = 0;
  if (z->stage == 0) return CORE_OK;
  z->ops->zero(z->acc, z->shard);
  if (z->d == 1 || z->stage == 3) return CORE_OK; /* stage 3: the shard is the parameters */
  if (z->stage == 2) return gather_in_place(z);
  if (z->nccl) { /* in place in the parameter buffer: every replica's shard from its owner */
    z->bytes_gather += (double)sizeof(float) * (double)z->shard * (z->d - 1);
    int rc;
    if (z->shard * (size_t)z->d == z->n) rc = z->ops->coll->all_gather(z->cc, z->params + z->lo, z->params, z->shard);
    else coll_counts(z, 0, z->n), rc = z->ops->coll->all_gatherv(z->cc, z->params, z->ncounts);
    return rc ? core_error_prefix("parameter all-gather") : CORE_OK;
  }
  /* everyone's shard (padded) into send, then back into the full parameter buffer */
  memset(z->recv, 0, sizeof(float) * z->shard);
  z->ops->to_host(z->recv, z->params + z->lo, sizeof(float) * (z->hi - z->lo));
  z->bytes_gather += (double)sizeof(float) * (double)z->shard * (z->d - 1);
  core_watch_begin("the parameters' all-gather (ZeRO)");
  int err = MPI_Allgather(z->recv, (int)z->shard, MPI_FLOAT, z->send, (int)z->shard, MPI_FLOAT, z->comm) != MPI_SUCCESS;
  core_watch_end();
  if (err) return core_error_set(CORE_ERUNTIME, "parameter all-gather failed");
  z->ops->to_device(z->params, z->send, sizeof(float) * z->n);
  return CORE_OK;
}

double zero_grad_bytes(const zero_buffer *z) {
  double f = 0;
  if (z->stage < 2) f = (double)z->n;                                     /* the full buffer */
  if (z->stage == 1) f += (double)z->shard * (z->nccl ? 1 : z->d + 2);    /* acc (+ send, recv for MPI) */
  if (z->stage >= 2) {
    f += (double)z->shard + (double)z->nb * (double)z->cap; /* acc, buckets */
    for (int k = 0; k < z->nkept; k++) f += (double)(z->kp_hi[k] - z->kp_lo[k]);
  }
  return f * sizeof(float);
}

size_t zero_state_len(const zero_buffer *z) { return z->stage == 0 ? z->n : z->hi - z->lo; }

int zero_gather_state(const zero_buffer *z, const float *shard_state, float *full) {
  const kernels_ops *mem = z->state_ops ? z->state_ops : z->ops;
  if (z->stage == 0 || z->d == 1) {
    mem->to_host(full, shard_state, sizeof(float) * z->n);
    return CORE_OK;
  }
  float *mine = core_calloc(z->shard, sizeof(float)), *all = core_malloc(sizeof(float) * z->shard * (size_t)z->d);
  mem->to_host(mine, shard_state, sizeof(float) * (z->hi - z->lo));
  int ok = MPI_Allgather(mine, (int)z->shard, MPI_FLOAT, all, (int)z->shard, MPI_FLOAT, z->comm) == MPI_SUCCESS;
  if (ok) memcpy(full, all, sizeof(float) * z->n);
  free(mine), free(all);
  return ok ? CORE_OK : core_error_set(CORE_ERUNTIME, "optimizer-state all-gather failed");
}

void zero_take_shard(const zero_buffer *z, const float *full, float *shard_state) {
  size_t lo = z->stage == 0 ? 0 : z->lo, hi = z->stage == 0 ? z->n : z->hi;
  (z->state_ops ? z->state_ops : z->ops)->to_device(shard_state, full + lo, sizeof(float) * (hi - lo));
}
