// kernels/cuda/backend.cu: finding a usable GPU for backend = "cuda", the process's stream,
// cuBLAS handle and workspace, the memory entries of the table, and the table itself.
//
// kernels_cuda_get_ops() fails with one clear message when there is no usable GPU (no driver,
// no device: CI and the build machine have none); otherwise it picks the process's GPU
// (pick_device: the local rank modulo the GPU count), creates the stream and the cuBLAS handle
// on it and returns the table. cuBLAS runs in CUBLAS_DEFAULT_MATH: fp32 GEMMs in full fp32, no TF32, so
// results match the CPU table's to fp32 rounding; BRIGADE_CUDA_TF32=1 in the environment
// allows TF32 tensor cores instead (about 10 bits of mantissa in the products).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mutex>

#include "kernels/cuda/cuda.h"

extern "C" {
int core_error_set(int code, const char *fmt, ...); // core/error.h is C11, not C++
int kernels_cuda_get_ops(const kernels_ops **out);
void kernels_cuda_describe(char *buf, size_t n);
int kernels_local_rank(void);
}

static const int kRuntimeError = 1; // CORE_ERUNTIME

void cuda_fail(const char *op, const char *file, int line, const char *call, const char *err) {
  fprintf(stderr, "brigade: CUDA backend, op %s (%s:%d): %s failed: %s\n", op, file, line, call,
          err);
  fflush(stderr);
  abort();
}

// ---- process state ----

static struct {
  std::once_flag once;
  int init_rc; // 0, or a CUDA / cuBLAS failure recorded in init_msg
  char init_msg[256];
  cudaStream_t stream;
  cublasHandle_t blas;
  void *ws;
  size_t ws_bytes;
} st;

// The GPU of this process: with several on the node, local rank r takes device r mod count
// (BRIGADE_CUDA_DEVICE if set, else the local rank MPI gave (kernels_set_local_rank: the rank
// among the node's ranks, whatever launcher started them), else the launcher's own variable:
// Open MPI's OMPI_COMM_WORLD_LOCAL_RANK, MPICH / Intel MPI's MPI_LOCALRANKID, Slurm srun's
// SLURM_LOCALID, torchrun-style LOCAL_RANK; without any, device 0); ranks that
// outnumber the GPUs share them (pipeline transfers and ZeRO's collectives then take their MPI
// path through host copies: zero/devcomm.c sees the equal GPU identities).
// A failed cudaSetDevice is an error, not a silent fall-back to device 0: that would put this
// rank on another rank's GPU (its transfers then through host copies) or, on a GPU in
// exclusive-process mode, fail later with a message about something else.
static int pick_device(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2) return 0;
  static const char *const vars[] = {"BRIGADE_CUDA_DEVICE", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                      "SLURM_LOCALID", "LOCAL_RANK"};
  const char *e = getenv(vars[0]);
  int local = -1;
  if (e && *e) local = atoi(e);
  else if (kernels_local_rank() >= 0) local = kernels_local_rank();
  for (size_t i = 1; i < sizeof vars / sizeof vars[0] && local < 0; i++)
    if ((e = getenv(vars[i])) && *e) local = atoi(e);
  if (local < 0) return 0;
  int d = local % n;
  if (d < 0) d += n;
  cudaError_t r = cudaSetDevice(d);
  if (r == cudaSuccess) return 0;
  snprintf(st.init_msg, sizeof st.init_msg, "cudaSetDevice(%d) failed: %s", d, cudaGetErrorString(r));
  return 1;
}

static void init_once(void) {
  if ((st.init_rc = pick_device())) return;
  cudaError_t e = cudaStreamCreateWithFlags(&st.stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    snprintf(st.init_msg, sizeof st.init_msg, "cudaStreamCreate failed: %s", cudaGetErrorString(e));
    st.init_rc = 1;
    return;
  }
  cublasStatus_t s = cublasCreate(&st.blas);
  if (s == CUBLAS_STATUS_SUCCESS) s = cublasSetStream(st.blas, st.stream);
  const char *tf32 = getenv("BRIGADE_CUDA_TF32");
  cublasMath_t mode = tf32 && !strcmp(tf32, "1") ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
  if (s == CUBLAS_STATUS_SUCCESS) s = cublasSetMathMode(st.blas, mode);
  if (s != CUBLAS_STATUS_SUCCESS) {
    snprintf(st.init_msg, sizeof st.init_msg, "cuBLAS set-up failed: %s", cublasGetStatusString(s));
    st.init_rc = 1;
  }
}

static int cuda_init(void) {
  std::call_once(st.once, init_once);
  return st.init_rc;
}

cudaStream_t cuda_stream(void) { return st.stream; }
cublasHandle_t cuda_blas(void) { return st.blas; }

void *cuda_workspace(size_t bytes) {
  if (bytes <= st.ws_bytes) return st.ws;
  size_t grow = st.ws_bytes + st.ws_bytes / 2; // grow by half at least: fewer reallocations
  if (grow > bytes) bytes = grow;
  bytes = (bytes + 255) & ~(size_t)255;
  if (st.ws) { // no kernel queued before may still use it
    CUDA_CHECK(cudaStreamSynchronize(st.stream));
    CUDA_CHECK(cudaFree(st.ws));
  }
  st.ws = nullptr;
  st.ws_bytes = 0;
  CUDA_CHECK(cudaMalloc(&st.ws, bytes));
  st.ws_bytes = bytes;
  return st.ws;
}

// ---- memory entries ----

static void *alloc(size_t bytes) {
  void *p = nullptr;
  if (bytes == 0) return nullptr; // free(NULL) is a no-op
  cudaError_t e = cudaMalloc(&p, bytes);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError(); // not sticky: clear it, the caller reports the NULL
    return nullptr;
  }
  CUDA_CHECK(e);
  CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, st.stream)); // ordered before every later op
  return p;
}

static void flush_ticket(int ticket);
static void free_(void *p) {
  if (!p) return;
  flush_ticket(-1); // a queued copy may read or fill it: issued, so that the syncs below cover it
  CUDA_CHECK_OP("free", cudaStreamSynchronize(st.stream)); // ops queued on it finish first
  CUDA_CHECK_OP("free", cudaFree(p));
}

// Small uploads (a micro-batch's token ids and targets) go through a ring of pinned host
// buffers, so the host does not wait for the device in the middle of a step: the bytes are
// copied into the ring's next buffer (after that buffer's previous upload has been read: its
// event), and cudaMemcpyAsync from pinned memory runs in stream order. Larger uploads
// (parameters at set-up, checkpoints) and every download wait for the stream: the host buffer
// may be reused (to_device) or read (to_host) as soon as they return.
enum { kRing = 64, kRingMax = 1 << 20 };
static struct {
  void *buf[kRing];
  size_t cap[kRing];
  cudaEvent_t read[kRing];
  int next;
} ring;

static void host_wait(const char *op, cudaStream_t s, cudaEvent_t e);
static void to_device(void *dst, const void *src_host, size_t bytes) {
  if (!bytes) return;
  if (bytes > kRingMax) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src_host, bytes, cudaMemcpyHostToDevice, st.stream));
    host_wait("to_device", st.stream, nullptr);
    return;
  }
  int k = ring.next;
  ring.next = (k + 1) % kRing;
  if (!ring.read[k]) CUDA_CHECK(cudaEventCreateWithFlags(&ring.read[k], cudaEventDisableTiming));
  else host_wait("to_device", nullptr, ring.read[k]); // its last upload has been read
  if (ring.cap[k] < bytes) {
    if (ring.buf[k]) CUDA_CHECK(cudaFreeHost(ring.buf[k]));
    ring.buf[k] = nullptr, ring.cap[k] = 0;
    size_t cap = bytes < 65536 ? 65536 : bytes;
    CUDA_CHECK(cudaMallocHost(&ring.buf[k], cap));
    ring.cap[k] = cap;
  }
  memcpy(ring.buf[k], src_host, bytes);
  CUDA_CHECK(cudaMemcpyAsync(dst, ring.buf[k], bytes, cudaMemcpyHostToDevice, st.stream));
  CUDA_CHECK(cudaEventRecord(ring.read[k], st.stream));
}

static void to_host(void *dst_host, const void *src, size_t bytes) {
  if (!bytes) return;
  CUDA_CHECK(cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDeviceToHost, st.stream));
  host_wait("to_host", st.stream, nullptr);
}

static void sync_(void) { host_wait("sync", st.stream, nullptr); }

// ---- activation offload's copies: two copy streams (device to host, host to device) beside the
// compute stream, ordered with it by events only (the host never waits). ticket's event is
// recorded after each copy of that ticket; copy_wait makes the compute stream wait for it. ----
static struct {
  cudaStream_t out, in;     // device to host, host to device (made on first use)
  cudaEvent_t *tev;         // [ntev] per ticket, made on first use
  int ntev;
} cp;

static cudaEvent_t ticket_event(int t) {
  if (t >= cp.ntev) {
    int n = cp.ntev ? cp.ntev : 64;
    while (n <= t) n *= 2;
    cudaEvent_t *e = (cudaEvent_t *)realloc(cp.tev, sizeof(cudaEvent_t) * (size_t)n);
    if (!e) {
      fprintf(stderr, "brigade: CUDA backend: out of host memory for %d copy events\n", n);
      abort();
    }
    for (int k = cp.ntev; k < n; k++) e[k] = nullptr;
    cp.tev = e, cp.ntev = n;
  }
  if (!cp.tev[t]) CUDA_CHECK(cudaEventCreateWithFlags(&cp.tev[t], cudaEventDisableTiming));
  return cp.tev[t];
}

static void read_piece_size(void);
static void copy_streams(void) {
  if (cp.out) return;
  read_piece_size();
  CUDA_CHECK(cudaStreamCreateWithFlags(&cp.out, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&cp.in, cudaStreamNonBlocking));
}

// A traced step's copy times: timing events around each group's copies (recorded only while the
// clock runs), read against `ref`, recorded on the idle compute stream when the clock started.
static struct {
  int on, cur, n;           // the clock runs; the current group (-1: none); groups with room
  cudaEvent_t ref;
  cudaEvent_t *start, *end; // [n], made on first use (with timing)
  unsigned char *has;       // [n] the group has a copy since the clock started
} tc;

static void copy_clock(int on) {
  tc.on = 0, tc.cur = -1;
  if (!on) return;
  if (!tc.ref) CUDA_CHECK(cudaEventCreateWithFlags(&tc.ref, cudaEventDefault));
  CUDA_CHECK(cudaEventRecord(tc.ref, st.stream));
  CUDA_CHECK_OP("copy_clock", cudaEventSynchronize(tc.ref));
  if (tc.n) memset(tc.has, 0, (size_t)tc.n);
  tc.on = 1;
}

static void copy_group(int g) {
  if (!tc.on || g < 0) return;
  if (g >= tc.n) { // (out of host memory aborts: nothing to keep)
    int n = tc.n ? tc.n : 64;
    while (n <= g) n *= 2;
    tc.start = (cudaEvent_t *)realloc(tc.start, sizeof(cudaEvent_t) * (size_t)n);
    tc.end = (cudaEvent_t *)realloc(tc.end, sizeof(cudaEvent_t) * (size_t)n);
    tc.has = (unsigned char *)realloc(tc.has, (size_t)n);
    if (!tc.start || !tc.end || !tc.has) {
      fprintf(stderr, "brigade: CUDA backend: out of host memory for %d copy timing events\n", n);
      abort();
    }
    for (int k = tc.n; k < n; k++) tc.start[k] = tc.end[k] = nullptr, tc.has[k] = 0;
    tc.n = n;
  }
  if (!tc.start[g]) CUDA_CHECK(cudaEventCreateWithFlags(&tc.start[g], cudaEventDefault));
  if (!tc.end[g]) CUDA_CHECK(cudaEventCreateWithFlags(&tc.end[g], cudaEventDefault));
  tc.has[g] = 0, tc.cur = g;
}

static int copy_span(int g, double *start, double *end) {
  flush_ticket(-1); // every queued copy's events recorded
  if (!tc.on || g < 0 || g >= tc.n || !tc.has[g]) return 1;
  float a = 0, b = 0;
  CUDA_CHECK_OP("copy_span", cudaEventSynchronize(tc.end[g]));
  CUDA_CHECK(cudaEventElapsedTime(&a, tc.ref, tc.start[g]));
  CUDA_CHECK(cudaEventElapsedTime(&b, tc.ref, tc.end[g]));
  *start = 1e-3 * a, *end = 1e-3 * b;
  return 0;
}

// Every copy_out and copy_in goes through one queue per direction: whole and at once when
// BRIGADE_COPY_PIECE_MB is 0 or unset (nothing stays queued), else fed in pieces of n MB.
// A copy engine runs the copies queued on it in turn, whichever stream they came from: a slot
// offloaded whole (1.3 GB on a wide model, 26 ms) held back a pipeline transfer's staging copy in
// the same direction, and the rank waiting for it, until the whole slot had moved (measured on an
// H100: a 32 MB send took 21 ms beside an offload, 1 ms without), and cutting the copy into pieces
// issued all at once changed nothing. So each direction keeps a queue of copies and issues their
// pieces kFeedDepth at a time: copy_pump (called while the host waits, and by every entry here
// that waits) issues the next ones as earlier pieces finish, and a staging copy waits for at most
// kFeedDepth pieces. Nothing depends on the pump for correctness: whoever needs a copy's ticket
// (copy_wait, copy_sync, a copy_in after it, copy_span) first issues what is queued up to it.
enum { kFeedDepth = 4 };
struct copy_job {
  char *dst;
  const char *src;
  size_t bytes, at; // bytes issued so far
  int ticket, after, group; // after: a ticket to wait for first (-1 none); group: timing (-1 none)
  cudaEvent_t ready;        // recorded on the compute stream when the copy was asked for
};
struct feeder {
  cudaStream_t *s;
  cudaMemcpyKind kind;
  copy_job *q; // a ring of cap: jobs head .. head + n - 1
  int head, n, cap;
  cudaEvent_t piece[kFeedDepth]; // the pieces on the stream, oldest at ph
  int ph, pn;
};
static feeder fout = {&cp.out, cudaMemcpyDeviceToHost, nullptr, 0, 0, 0, {}, 0, 0};
static feeder fin = {&cp.in, cudaMemcpyHostToDevice, nullptr, 0, 0, 0, {}, 0, 0};
static size_t piece_bytes;        // 0: whole copies
static cudaEvent_t *spare_ev;     // ready events not in use
static int nspare, capspare;

static void read_piece_size(void) {
  const char *e = getenv("BRIGADE_COPY_PIECE_MB");
  if (!e || !*e) return;
  char *end = nullptr;
  double mb = strtod(e, &end);
  if (end == e || *end || !(mb >= 0) || mb > 65536) {
    fprintf(stderr, "brigade: BRIGADE_COPY_PIECE_MB=%s is not a size in MB from 0 to 65536: copies go whole\n", e);
    return;
  }
  piece_bytes = (size_t)(mb * (1 << 20));
}

static cudaEvent_t ready_event(void) {
  if (nspare) return spare_ev[--nspare];
  cudaEvent_t e;
  CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}
static void spare(cudaEvent_t e) {
  if (nspare == capspare) {
    capspare = capspare ? 2 * capspare : 16;
    spare_ev = (cudaEvent_t *)realloc(spare_ev, sizeof(cudaEvent_t) * (size_t)capspare);
    if (!spare_ev) {
      fprintf(stderr, "brigade: CUDA backend: out of host memory for %d copy events\n", capspare);
      abort();
    }
  }
  spare_ev[nspare++] = e;
}

// Issues the next piece of f's oldest job (all of what is left when whole): its waits before its
// first piece, its ticket's event (and its timing group's end) after its last.
static void issue(feeder *f, int whole) {
  copy_job *j = &f->q[f->head];
  cudaStream_t s = *f->s;
  if (j->at == 0) {
    CUDA_CHECK(cudaStreamWaitEvent(s, j->ready, 0));
    spare(j->ready);
    if (j->after >= 0) CUDA_CHECK(cudaStreamWaitEvent(s, ticket_event(j->after), 0)); // its offload has landed
    if (j->group >= 0 && tc.on && j->group < tc.n && !tc.has[j->group]) {
      CUDA_CHECK(cudaEventRecord(tc.start[j->group], s));
      tc.has[j->group] = 1;
    }
  }
  size_t n = j->bytes - j->at;
  if (!whole && n > piece_bytes) n = piece_bytes;
  if (n) CUDA_CHECK(cudaMemcpyAsync(j->dst + j->at, j->src + j->at, n, f->kind, s));
  j->at += n;
  if (!whole && n) { // a piece the pump counts
    int k = (f->ph + f->pn++) % kFeedDepth;
    if (!f->piece[k]) CUDA_CHECK(cudaEventCreateWithFlags(&f->piece[k], cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(f->piece[k], s));
  }
  if (j->at == j->bytes) {
    if (j->group >= 0 && tc.on && j->group < tc.n) CUDA_CHECK(cudaEventRecord(tc.end[j->group], s));
    CUDA_CHECK(cudaEventRecord(ticket_event(j->ticket), s));
    f->head = (f->head + 1) % f->cap, f->n--;
  }
}

// The pieces done are let go; the next ones issued while fewer than kFeedDepth are queued.
static void pump(feeder *f) {
  while (f->n) {
    while (f->pn) {
      cudaError_t e = cudaEventQuery(f->piece[f->ph]);
      if (e == cudaErrorNotReady) break;
      CUDA_CHECK_OP("copy_pump", e);
      f->ph = (f->ph + 1) % kFeedDepth, f->pn--;
    }
    if (f->pn == kFeedDepth) return;
    issue(f, 0);
  }
}
static void copy_pump(void) {
  if (fout.n) pump(&fout);
  if (fin.n) pump(&fin);
}

// Everything f holds up to its last job of `ticket` (all of it: ticket < 0) is issued now.
static void flush(feeder *f, int ticket) {
  int last = -1;
  for (int k = 0; k < f->n; k++)
    if (ticket < 0 || f->q[(f->head + k) % f->cap].ticket == ticket) last = k;
  for (int k = 0; k <= last; k++) issue(f, 1);
}
static void flush_ticket(int ticket) {
  flush(&fout, ticket);
  flush(&fin, ticket);
}

static void enqueue(feeder *f, void *dst, const void *src, size_t bytes, int ticket, int after) {
  if (f->n == f->cap) { // the ring doubles, its jobs in order from 0
    int cap = f->cap ? 2 * f->cap : 64;
    copy_job *q = (copy_job *)malloc(sizeof(copy_job) * (size_t)cap);
    if (!q) {
      fprintf(stderr, "brigade: CUDA backend: out of host memory for %d queued copies\n", cap);
      abort();
    }
    for (int k = 0; k < f->n; k++) q[k] = f->q[(f->head + k) % f->cap];
    free(f->q);
    f->q = q, f->head = 0, f->cap = cap;
  }
  copy_job *j = &f->q[(f->head + f->n++) % f->cap];
  *j = copy_job{(char *)dst, (const char *)src, bytes, 0, ticket, after, tc.on ? tc.cur : -1, ready_event()};
  CUDA_CHECK(cudaEventRecord(j->ready, st.stream)); // after every op issued so far
  if (piece_bytes) pump(f);
  else issue(f, 1); // whole, at once: nothing stays queued
}

// Whether the host should feed the copies while it waits (something is queued).
static bool feeding(void) { return fout.n || fin.n; }

// The host waits for stream s (or event e) and, while copies are queued, feeds them meanwhile.
static void host_wait(const char *op, cudaStream_t s, cudaEvent_t e) {
  while (feeding()) {
    cudaError_t r = e ? cudaEventQuery(e) : cudaStreamQuery(s);
    if (r != cudaErrorNotReady) {
      CUDA_CHECK_OP(op, r);
      return;
    }
    copy_pump();
  }
  CUDA_CHECK_OP(op, e ? cudaEventSynchronize(e) : cudaStreamSynchronize(s));
}

static void copy_out(void *dst_host, const void *src, size_t bytes, int ticket) {
  copy_streams();
  enqueue(&fout, dst_host, src, bytes, ticket, -1);
}

static void copy_in(void *dst, const void *src_host, size_t bytes, int ticket, int after) {
  copy_streams();
  if (after >= 0) flush(&fout, after); // its offload's event recorded before this copy waits for it
  enqueue(&fin, dst, src_host, bytes, ticket, after);
}

static void copy_wait(int ticket) {
  flush_ticket(ticket);
  CUDA_CHECK(cudaStreamWaitEvent(st.stream, ticket_event(ticket), 0));
}
static void copy_sync(int ticket) {
  flush_ticket(ticket);
  CUDA_CHECK_OP("copy_sync", cudaEventSynchronize(ticket_event(ticket)));
}

static void *host_alloc(size_t bytes) {
  void *p = nullptr;
  if (cudaMallocHost(&p, bytes ? bytes : 1) != cudaSuccess) return nullptr;
  memset(p, 0, bytes ? bytes : 1);
  return p;
}

static void host_free(void *p) {
  if (!p) return;
  flush_ticket(-1); // a queued copy may read or fill it (cudaFreeHost waits for the device)
  CUDA_CHECK(cudaFreeHost(p));
}

// ---- the table ----

static kernels_ops table;

static void fill_table(void) {
  cuda_fill_table(&table); // every element-wise, reduction and optimizer op
  table.name = "cuda";
  table.device_memory = 1;
  table.alloc = alloc;
  table.free = free_;
  table.to_device = to_device;
  table.to_host = to_host;
  table.sync = sync_;
  table.copy_out = copy_out;
  table.copy_in = copy_in;
  table.copy_wait = copy_wait;
  table.copy_sync = copy_sync;
  table.host_alloc = host_alloc;
  table.host_free = host_free;
  table.copy_clock = copy_clock;
  table.copy_pump = copy_pump;
  table.copy_group = copy_group;
  table.copy_span = copy_span;
  table.gemm = cuda_gemm;
  table.gemm_ld = cuda_gemm_ld;
  table.matmul_half = cuda_matmul_half;
  table.gemm_batched = cuda_gemm_batched;
  table.attention_forward = cuda_attention_forward;
  table.attention_backward = cuda_attention_backward;
  table.attention_cache_floats = cuda_attention_cache_floats;
  table.coll = cuda_coll(); // NCCL; zero/ uses it when every rank of a group has its own GPU
}

// "GPU d of n (name, PCI bus id)" for the start-up log's rank map.
extern "C" void kernels_cuda_describe(char *buf, size_t n) {
  int d = 0, count = 0;
  cudaDeviceProp prop;
  if (cudaGetDevice(&d) != cudaSuccess || cudaGetDeviceCount(&count) != cudaSuccess ||
      cudaGetDeviceProperties(&prop, d) != cudaSuccess) {
    snprintf(buf, n, "GPU (unknown)");
    return;
  }
  char bus[32] = "?";
  cudaDeviceGetPCIBusId(bus, (int)sizeof bus, d);
  snprintf(buf, n, "GPU %d of %d (%s, PCI %s)", d, count, prop.name, bus);
}

extern "C" int kernels_cuda_get_ops(const kernels_ops **out) {
  *out = nullptr;
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess)
    return core_error_set(kRuntimeError,
                          "backend \"cuda\": no usable GPU (%s); use backend \"cpu\"",
                          cudaGetErrorString(e));
  if (n == 0)
    return core_error_set(kRuntimeError, "backend \"cuda\": no GPU found; use backend \"cpu\"");
  if (cuda_init() != 0)
    return core_error_set(kRuntimeError, "backend \"cuda\": %.255s; use backend \"cpu\"", st.init_msg);
  static std::once_flag filled;
  std::call_once(filled, fill_table);
  *out = &table;
  return 0;
}
