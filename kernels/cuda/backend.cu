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

static void free_(void *p) {
  if (!p) return;
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

static void to_device(void *dst, const void *src_host, size_t bytes) {
  if (!bytes) return;
  if (bytes > kRingMax) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src_host, bytes, cudaMemcpyHostToDevice, st.stream));
    CUDA_CHECK(cudaStreamSynchronize(st.stream));
    return;
  }
  int k = ring.next;
  ring.next = (k + 1) % kRing;
  if (!ring.read[k]) CUDA_CHECK(cudaEventCreateWithFlags(&ring.read[k], cudaEventDisableTiming));
  else CUDA_CHECK(cudaEventSynchronize(ring.read[k])); // its last upload has been read
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
  CUDA_CHECK(cudaStreamSynchronize(st.stream));
}

static void sync_(void) { CUDA_CHECK_OP("sync", cudaStreamSynchronize(st.stream)); }

// ---- activation offload's copies: two copy streams (device to host, host to device) beside the
// compute stream, ordered with it by events only (the host never waits). ticket's event is
// recorded after each copy of that ticket; copy_wait makes the compute stream wait for it. ----
static struct {
  cudaStream_t out, in;     // device to host, host to device (made on first use)
  cudaEvent_t ready;        // recorded on the compute stream before a copy: the data is written
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

static void copy_streams(void) {
  if (cp.out) return;
  CUDA_CHECK(cudaStreamCreateWithFlags(&cp.out, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&cp.in, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreateWithFlags(&cp.ready, cudaEventDisableTiming));
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

// a copy of the current group is about to go on stream s (its waits queued), or has gone
static void copy_timed(cudaStream_t s, int after) {
  if (!tc.on || tc.cur < 0) return;
  if (after) {
    CUDA_CHECK(cudaEventRecord(tc.end[tc.cur], s));
  } else if (!tc.has[tc.cur]) {
    CUDA_CHECK(cudaEventRecord(tc.start[tc.cur], s));
    tc.has[tc.cur] = 1;
  }
}

static int copy_span(int g, double *start, double *end) {
  if (!tc.on || g < 0 || g >= tc.n || !tc.has[g]) return 1;
  float a = 0, b = 0;
  CUDA_CHECK_OP("copy_span", cudaEventSynchronize(tc.end[g]));
  CUDA_CHECK(cudaEventElapsedTime(&a, tc.ref, tc.start[g]));
  CUDA_CHECK(cudaEventElapsedTime(&b, tc.ref, tc.end[g]));
  *start = 1e-3 * a, *end = 1e-3 * b;
  return 0;
}

static void copy_out(void *dst_host, const void *src, size_t bytes, int ticket) {
  copy_streams();
  CUDA_CHECK(cudaEventRecord(cp.ready, st.stream)); // after every op issued so far
  CUDA_CHECK(cudaStreamWaitEvent(cp.out, cp.ready, 0));
  copy_timed(cp.out, 0);
  if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDeviceToHost, cp.out));
  copy_timed(cp.out, 1);
  CUDA_CHECK(cudaEventRecord(ticket_event(ticket), cp.out));
}

static void copy_in(void *dst, const void *src_host, size_t bytes, int ticket, int after) {
  copy_streams();
  CUDA_CHECK(cudaEventRecord(cp.ready, st.stream));
  CUDA_CHECK(cudaStreamWaitEvent(cp.in, cp.ready, 0));
  if (after >= 0) CUDA_CHECK(cudaStreamWaitEvent(cp.in, ticket_event(after), 0)); // its offload has landed
  copy_timed(cp.in, 0);
  if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src_host, bytes, cudaMemcpyHostToDevice, cp.in));
  copy_timed(cp.in, 1);
  CUDA_CHECK(cudaEventRecord(ticket_event(ticket), cp.in));
}

static void copy_wait(int ticket) { CUDA_CHECK(cudaStreamWaitEvent(st.stream, ticket_event(ticket), 0)); }
static void copy_sync(int ticket) { CUDA_CHECK_OP("copy_sync", cudaEventSynchronize(ticket_event(ticket))); }

static void *host_alloc(size_t bytes) {
  void *p = nullptr;
  if (cudaMallocHost(&p, bytes ? bytes : 1) != cudaSuccess) return nullptr;
  memset(p, 0, bytes ? bytes : 1);
  return p;
}

static void host_free(void *p) {
  if (p) CUDA_CHECK(cudaFreeHost(p));
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
