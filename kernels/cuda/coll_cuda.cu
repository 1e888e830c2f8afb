// kernels/cuda/coll_cuda.cu: the CUDA table's device collectives (kernels/coll.h) over NCCL,
// for one GPU per rank. zero/ decides whether to use them (every rank of a data-parallel group
// on a distinct GPU) and hands the unique id around over MPI; nothing here knows MPI.
//
// Streams: the synchronous entries run on the backend's compute stream (cuda_stream()), so
// they are ordered with the ops around them. reduce_scatterv_async runs on one communication
// stream (created on first use, shared by every communicator of the process): an event recorded
// on the compute stream makes it start after the ops issued before it; a "done" event per slot
// is recorded after it, and wait(slot) makes the compute stream wait for that event
// (cudaStreamWaitEvent: the host never blocks). Point-to-point send / recv go on the same
// communication stream, in issue order, each after an event recorded on the compute stream, and
// record a per-ticket event that wait_p2p makes the compute stream wait for: the pipeline's
// transfers overlap compute, and every NCCL call of a process that runs asynchronously keeps the
// program's order (ZeRO-2's reduce-scatters and the transfers on one stream). The synchronous
// collectives on the compute stream may run beside a transfer of another communicator on the
// communication stream: like every pipeline + data-parallel NCCL user, this relies on the GPU
// running both kernels at once (NCCL's documentation names the hazard).
//
// Errors: every CUDA and NCCL call is checked; a failure returns CORE_ERUNTIME with the entry,
// file:line, the call and the error (ncclGetErrorString / cudaGetErrorString) as the message.
// Unlike the ops, nothing aborts: a communication failure is the caller's to report.
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <chrono>
#include <mutex>
#include <thread>

#include "kernels/cuda/cuda.h"

extern "C" {
#include "kernels/coll.h"
int core_error_set(int code, const char *fmt, ...); // core/error.h is C11, not C++
}

static const int kRuntimeError = 1; // CORE_ERUNTIME

static_assert(KERNELS_COLL_UNIQUE_ID_BYTES == NCCL_UNIQUE_ID_BYTES, "NCCL's unique id size");
static_assert(sizeof(ncclUniqueId) == NCCL_UNIQUE_ID_BYTES, "ncclUniqueId is its bytes");

static int nccl_failed(const char *entry, const char *file, int line, const char *call,
                       ncclResult_t r) {
  return core_error_set(kRuntimeError, "NCCL collectives, %s (%s:%d): %s failed: %s", entry, file,
                        line, call, ncclGetErrorString(r));
}

static int cuda_failed(const char *entry, const char *file, int line, const char *call,
                       cudaError_t e) {
  return core_error_set(kRuntimeError, "NCCL collectives, %s (%s:%d): %s failed: %s", entry, file,
                        line, call, cudaGetErrorString(e));
}

#define NCCL_TRY(call)                                                                             \
  do {                                                                                             \
    ncclResult_t r_ = (call);                                                                      \
    if (r_ != ncclSuccess) return nccl_failed(__func__, __FILE__, __LINE__, #call, r_);            \
  } while (0)

#define CUDA_TRY(call)                                                                             \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) return cuda_failed(__func__, __FILE__, __LINE__, #call, e_);            \
  } while (0)

struct kernels_coll_comm {
  ncclComm_t comm;
  int nranks, rank;
  cudaEvent_t ready;                        // recorded on the compute stream before an async call
  cudaEvent_t done[KERNELS_COLL_SLOTS];     // recorded on the comm stream after it
  int pending[KERNELS_COLL_SLOTS];          // an async call in the slot not yet waited for
  cudaEvent_t tev[KERNELS_COLL_TICKETS];    // recorded on the comm stream after a transfer (lazily made)
  int tpending[KERNELS_COLL_TICKETS];
  int grouped, ngroup;                      // p2p_group: a group is open, and the transfers in it
  int group_t[KERNELS_COLL_TICKETS];        // their tickets (events recorded when the group closes)
  kernels_coll_comm *next;                  // the process's live communicators (sync_comm aborts them all)
};

// Every communicator made and not yet freed. They share the communication stream (and the
// compute stream waits for it), so a stuck operation of one blocks the others' queued work: a
// sync that gives up must abort all of them, or the kernel it waited behind stays stuck and the
// teardown's stream waits (comm_free, the table's free) hang instead of the error being reported.
static kernels_coll_comm *live;

static void abort_all(void) {
  for (kernels_coll_comm *c = live; c; c = c->next)
    if (c->comm) {
      ncclCommAbort(c->comm);
      c->comm = nullptr;
    }
}

// ---- the communication stream (one per process, created once) ----

static struct {
  std::once_flag once;
  cudaError_t err;
  cudaStream_t stream;
} cs;

static void comm_stream_create(void) {
  cs.err = cudaStreamCreateWithFlags(&cs.stream, cudaStreamNonBlocking);
}

static int comm_stream(cudaStream_t *out) {
  std::call_once(cs.once, comm_stream_create);
  if (cs.err != cudaSuccess)
    return cuda_failed("comm_stream", __FILE__, __LINE__,
                       "cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)", cs.err);
  *out = cs.stream;
  return 0;
}

// ---- identity, set-up ----

static int device_id(unsigned char id[KERNELS_COLL_DEVICE_ID_BYTES]) {
  int dev = 0;
  cudaDeviceProp prop;
  CUDA_TRY(cudaGetDevice(&dev));
  CUDA_TRY(cudaGetDeviceProperties(&prop, dev));
  static_assert(sizeof prop.uuid.bytes == KERNELS_COLL_DEVICE_ID_BYTES, "a GPU's UUID is 16 bytes");
  memcpy(id, prop.uuid.bytes, KERNELS_COLL_DEVICE_ID_BYTES);
  return 0;
}

static int unique_id(unsigned char id[KERNELS_COLL_UNIQUE_ID_BYTES]) {
  ncclUniqueId u;
  NCCL_TRY(ncclGetUniqueId(&u));
  memcpy(id, u.internal, NCCL_UNIQUE_ID_BYTES);
  return 0;
}

static void comm_free(kernels_coll_comm *c);

static int comm_setup(kernels_coll_comm *c, const unsigned char *id, int nranks, int rank) {
  ncclUniqueId u;
  memcpy(u.internal, id, NCCL_UNIQUE_ID_BYTES);
  cudaStream_t s;
  int rc = comm_stream(&s); // created before the first async call needs it
  if (rc) return rc;
  CUDA_TRY(cudaEventCreateWithFlags(&c->ready, cudaEventDisableTiming));
  for (int k = 0; k < KERNELS_COLL_SLOTS; k++)
    CUDA_TRY(cudaEventCreateWithFlags(&c->done[k], cudaEventDisableTiming));
  ncclComm_t comm = nullptr; // c->comm only ever holds a communicator that was made
  NCCL_TRY(ncclCommInitRank(&comm, nranks, u, rank));
  c->comm = comm;
  return 0;
}

static int comm_init(kernels_coll_comm **out, const unsigned char id[KERNELS_COLL_UNIQUE_ID_BYTES],
                     int nranks, int rank) {
  *out = nullptr;
  kernels_coll_comm *c = (kernels_coll_comm *)calloc(1, sizeof *c);
  if (!c) return core_error_set(kRuntimeError, "NCCL collectives: out of host memory");
  c->nranks = nranks, c->rank = rank;
  int rc = comm_setup(c, id, nranks, rank);
  if (rc) {
    comm_free(c);
    return rc;
  }
  c->next = live, live = c;
  *out = c;
  return 0;
}

// Nothing to return to: problems are printed (the communicator is gone either way).
static void comm_free(kernels_coll_comm *c) {
  if (!c) return;
  for (kernels_coll_comm **p = &live; *p; p = &(*p)->next)
    if (*p == c) {
      *p = c->next;
      break;
    }
  cudaError_t e = cudaSuccess;
  if (cs.stream) e = cudaStreamSynchronize(cs.stream); // async calls still in flight
  if (e == cudaSuccess) e = cudaStreamSynchronize(cuda_stream());
  if (e != cudaSuccess)
    fprintf(stderr, "brigade: NCCL collectives, comm_free: waiting for the streams failed: %s\n",
            cudaGetErrorString(e));
  if (c->comm) {
    ncclResult_t r = ncclCommDestroy(c->comm);
    if (r != ncclSuccess)
      fprintf(stderr, "brigade: NCCL collectives, comm_free: ncclCommDestroy failed: %s\n",
              ncclGetErrorString(r));
  }
  if (c->ready) cudaEventDestroy(c->ready);
  for (int k = 0; k < KERNELS_COLL_SLOTS; k++)
    if (c->done[k]) cudaEventDestroy(c->done[k]);
  for (int k = 0; k < KERNELS_COLL_TICKETS; k++)
    if (c->tev[k]) cudaEventDestroy(c->tev[k]);
  free(c);
}

// ---- collectives on a given stream ----

static int all_reduce(kernels_coll_comm *c, float *x, size_t n) {
  if (!n) return 0;
  NCCL_TRY(ncclAllReduce(x, x, n, ncclFloat, ncclSum, c->comm, cuda_stream()));
  return 0;
}

static int reduce_scatter(kernels_coll_comm *c, const float *send, float *recv, size_t count) {
  if (!count) return 0;
  NCCL_TRY(ncclReduceScatter(send, recv, count, ncclFloat, ncclSum, c->comm, cuda_stream()));
  return 0;
}

// One ncclReduce per root with a non-empty range, grouped so NCCL runs them as one operation.
static int reduce_scatterv_on(const char *entry, kernels_coll_comm *c, const float *send,
                              float *recv, const size_t *counts, cudaStream_t s) {
  NCCL_TRY(ncclGroupStart());
  ncclResult_t r = ncclSuccess;
  size_t off = 0;
  for (int q = 0; q < c->nranks && r == ncclSuccess; off += counts[q], q++)
    if (counts[q]) r = ncclReduce(send + off, recv, counts[q], ncclFloat, ncclSum, q, c->comm, s);
  ncclResult_t end = ncclGroupEnd(); // always closes the group, even after a failed call
  if (r != ncclSuccess)
    return nccl_failed(entry, __FILE__, __LINE__, "ncclReduce(send + off, recv, counts[q], ...)", r);
  if (end != ncclSuccess) return nccl_failed(entry, __FILE__, __LINE__, "ncclGroupEnd()", end);
  return 0;
}

static int reduce_scatterv(kernels_coll_comm *c, const float *send, float *recv,
                           const size_t *counts) {
  return reduce_scatterv_on(__func__, c, send, recv, counts, cuda_stream());
}

static int all_gather(kernels_coll_comm *c, const float *send, float *recv, size_t count) {
  if (!count) return 0;
  NCCL_TRY(ncclAllGather(send, recv, count, ncclFloat, c->comm, cuda_stream()));
  return 0;
}

// One in-place ncclBroadcast per root with a non-empty range, grouped.
static int all_gatherv(kernels_coll_comm *c, float *buf, const size_t *counts) {
  NCCL_TRY(ncclGroupStart());
  ncclResult_t r = ncclSuccess;
  size_t off = 0;
  for (int q = 0; q < c->nranks && r == ncclSuccess; off += counts[q], q++)
    if (counts[q])
      r = ncclBroadcast(buf + off, buf + off, counts[q], ncclFloat, q, c->comm, cuda_stream());
  ncclResult_t end = ncclGroupEnd();
  if (r != ncclSuccess)
    return nccl_failed(__func__, __FILE__, __LINE__, "ncclBroadcast(buf + off, buf + off, ...)", r);
  if (end != ncclSuccess) return nccl_failed(__func__, __FILE__, __LINE__, "ncclGroupEnd()", end);
  return 0;
}

// ---- the asynchronous reduce-scatter and its wait ----

static int reduce_scatterv_async(kernels_coll_comm *c, int slot, const float *send, float *recv,
                                 const size_t *counts) {
  if (slot < 0 || slot >= KERNELS_COLL_SLOTS)
    return core_error_set(kRuntimeError, "NCCL collectives, %s: no slot %d", __func__, slot);
  if (c->pending[slot])
    return core_error_set(kRuntimeError,
                          "NCCL collectives, %s: slot %d still has a collective in flight", __func__,
                          slot);
  cudaStream_t s;
  int rc = comm_stream(&s);
  if (rc) return rc;
  CUDA_TRY(cudaEventRecord(c->ready, cuda_stream())); // the bucket's gradients are written
  CUDA_TRY(cudaStreamWaitEvent(s, c->ready, 0));
  rc = reduce_scatterv_on(__func__, c, send, recv, counts, s);
  if (rc) return rc;
  CUDA_TRY(cudaEventRecord(c->done[slot], s));
  c->pending[slot] = 1;
  return 0;
}

// Later ops on the compute stream wait for event k of n, recorded by an async call still
// pending (what: "slot" or "ticket", for the message); a no-op when none is.
static int compute_waits(const char *entry, const char *what, int k, int n, int *pending, cudaEvent_t *ev) {
  if (k < 0 || k >= n) return core_error_set(kRuntimeError, "NCCL collectives, %s: no %s %d", entry, what, k);
  if (!pending[k]) return 0;
  pending[k] = 0;
  cudaError_t e = cudaStreamWaitEvent(cuda_stream(), ev[k], 0);
  return e == cudaSuccess ? 0 : cuda_failed(entry, __FILE__, __LINE__, "cudaStreamWaitEvent(compute, event, 0)", e);
}

static int wait_slot(kernels_coll_comm *c, int slot) {
  return compute_waits("wait", "slot", slot, KERNELS_COLL_SLOTS, c->pending, c->done);
}

// ---- point-to-point on the communication stream ----

static int ticket_ok(const char *entry, kernels_coll_comm *c, int t) {
  if (t < 0 || t >= KERNELS_COLL_TICKETS)
    return core_error_set(kRuntimeError, "NCCL collectives, %s: no ticket %d", entry, t);
  if (c->tpending[t])
    return core_error_set(kRuntimeError, "NCCL collectives, %s: ticket %d still has a transfer in flight",
                          entry, t);
  return 0;
}

// Issues one transfer under ticket t: the comm stream waits for the compute stream's ops so
// far, runs the transfer, and records the ticket's event.
static int p2p(const char *entry, kernels_coll_comm *c, int t, float *buf, size_t n, int peer, int is_send) {
  int rc = ticket_ok(entry, c, t);
  if (rc) return rc;
  cudaStream_t s;
  if ((rc = comm_stream(&s))) return rc;
  if (!c->tev[t]) CUDA_TRY(cudaEventCreateWithFlags(&c->tev[t], cudaEventDisableTiming));
  for (int k = 0; c->grouped && k < c->ngroup; k++)
    if (c->group_t[k] == t)
      return core_error_set(kRuntimeError, "NCCL collectives, %s: ticket %d twice in one group", entry, t);
  // the compute stream's ops so far (in a group too: the caller may have queued waits, such as a
  // reloaded buffer's copy, since the group began; the wait goes on the comm stream now, ahead
  // of the group's work, which NCCL enqueues when the group closes)
  CUDA_TRY(cudaEventRecord(c->ready, cuda_stream()));
  CUDA_TRY(cudaStreamWaitEvent(s, c->ready, 0));
  if (n) {
    if (is_send) NCCL_TRY(ncclSend(buf, n, ncclFloat, peer, c->comm, s));
    else NCCL_TRY(ncclRecv(buf, n, ncclFloat, peer, c->comm, s));
  }
  if (c->grouped) { // its event once the group is enqueued (p2p_group)
    c->group_t[c->ngroup++] = t;
    return 0;
  }
  CUDA_TRY(cudaEventRecord(c->tev[t], s));
  c->tpending[t] = 1;
  return 0;
}

// Opens (begin = 1) or closes a group of transfers: NCCL runs the sends and receives issued in
// between as one operation, so none waits for another (ncclGroupStart / ncclGroupEnd). Each
// ticket's event is recorded after the group, which is when NCCL enqueues its work.
static int p2p_group(kernels_coll_comm *c, int begin) {
  cudaStream_t s;
  int rc = comm_stream(&s);
  if (rc) return rc;
  if (begin) {
    if (c->grouped) return core_error_set(kRuntimeError, "NCCL collectives, p2p_group: a group is open already");
    NCCL_TRY(ncclGroupStart());
    c->grouped = 1, c->ngroup = 0;
    return 0;
  }
  if (!c->grouped) return core_error_set(kRuntimeError, "NCCL collectives, p2p_group: no group is open");
  c->grouped = 0;
  ncclResult_t end = ncclGroupEnd(); // always closes the group, even after a failed call in it
  if (end != ncclSuccess) return nccl_failed(__func__, __FILE__, __LINE__, "ncclGroupEnd()", end);
  for (int k = 0; k < c->ngroup; k++) {
    CUDA_TRY(cudaEventRecord(c->tev[c->group_t[k]], s));
    c->tpending[c->group_t[k]] = 1;
  }
  c->ngroup = 0;
  return 0;
}

static int p2p_send(kernels_coll_comm *c, int t, const float *buf, size_t n, int peer) {
  return p2p(__func__, c, t, (float *)buf, n, peer, 1);
}

static int p2p_recv(kernels_coll_comm *c, int t, float *buf, size_t n, int peer) {
  return p2p(__func__, c, t, buf, n, peer, 0);
}

static int wait_p2p(kernels_coll_comm *c, int t) {
  return compute_waits("wait_p2p", "ticket", t, KERNELS_COLL_TICKETS, c->tpending, c->tev);
}

// Polls both streams and the communicator's asynchronous error: a stuck peer would otherwise
// hang the next synchronising call forever. On a timeout or an error every communicator of the
// process is aborted (their kernels return; what blocks the streams may be another
// communicator's operation: ZeRO-2's bucket reduce-scatter ahead of the pipeline's transfers on
// the communication stream, or another chunk's group), so the process can report and exit.
static int sync_comm(kernels_coll_comm *c, double timeout_s) {
  cudaStream_t s;
  int rc = comm_stream(&s);
  if (rc) return rc;
  auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    cudaError_t a = cudaStreamQuery(s), b = cudaStreamQuery(cuda_stream());
    if (a != cudaSuccess && a != cudaErrorNotReady) return cuda_failed(__func__, __FILE__, __LINE__, "cudaStreamQuery(comm)", a);
    if (b != cudaSuccess && b != cudaErrorNotReady) return cuda_failed(__func__, __FILE__, __LINE__, "cudaStreamQuery(compute)", b);
    if (a == cudaSuccess && b == cudaSuccess) return 0;
    ncclResult_t ae = ncclSuccess;
    NCCL_TRY(ncclCommGetAsyncError(c->comm, &ae));
    if (ae != ncclSuccess && ae != ncclInProgress) {
      abort_all();
      return nccl_failed(__func__, __FILE__, __LINE__, "ncclCommGetAsyncError (the communicators are aborted)", ae);
    }
    double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (waited > timeout_s) {
      abort_all();
      return core_error_set(kRuntimeError, "NCCL collectives, sync: nothing finished for %.0f s (a peer that never "
                            "sends or receives?); the communicators are aborted", timeout_s);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// Filled field by field (C++17 has no designated initializers): the order of coll.h's fields
// cannot silently put an entry in the wrong slot.
static kernels_coll make_table(void) {
  kernels_coll t;
  memset(&t, 0, sizeof t);
  t.name = "nccl";
  t.device_id = device_id;
  t.unique_id = unique_id;
  t.comm_init = comm_init;
  t.comm_free = comm_free;
  t.all_reduce = all_reduce;
  t.reduce_scatter = reduce_scatter;
  t.reduce_scatterv = reduce_scatterv;
  t.all_gather = all_gather;
  t.all_gatherv = all_gatherv;
  t.reduce_scatterv_async = reduce_scatterv_async;
  t.wait = wait_slot;
  t.send = p2p_send;
  t.recv = p2p_recv;
  t.wait_p2p = wait_p2p;
  t.group = p2p_group;
  t.sync = sync_comm;
  return t;
}

static const kernels_coll nccl_coll = make_table();

const kernels_coll *cuda_coll(void) { return &nccl_coll; }
