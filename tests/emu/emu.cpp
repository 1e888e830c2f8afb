// tests/emu/emu.cpp: the CUDA backend on the CPU, for machines without a GPU (make test-cuda-emu).
//
// kernels/cuda/*.cu are compiled as host C++ (tests/emu/prep.sed
// rewrites the launches) against the headers in tests/emu/include, which declare what this file
// defines: the CUDA runtime calls the backend makes, the device built-ins its kernels use,
// cuBLAS's GEMMs, nvcuda::wmma and CUB's radix sort. The GPU op harness (tests/gpu/test_ops_gpu.c)
// then checks the real backend code against the CPU table: cuBLAS argument logic (transposes,
// m/n/k, leading dimensions, strides), launch shapes, shared-memory layouts, barriers.
//
// How kernels run: blocks one after another (EMU_ORDER=rev: the last block first); in a block,
// each GPU thread is a fiber with its own stack, and the fibers run one at a time, in thread
// order (EMU_ORDER=rev: reverse order, rand: shuffled), each until it reaches a barrier
// (__syncthreads, __syncwarp, a shuffle) or ends. So a missing barrier shows up as a read of data not yet written (or already
// overwritten): run both orders. WMMA: every lane holds the whole 16x16 tile; a load reads all of
// it, a store writes only the elements e with e % 32 == lane (the rest are other lanes' job, as on
// hardware, so a read before __syncwarp sees stale data); alignment (256-bit) and ldm rules
// are checked. Launch limits (grid y/z <= 65535, 1024 threads, dynamic shared memory above
// 48 KiB only after cudaFuncSetAttribute, at most 227 KiB) are checked. Shared memory, dynamic
// and static, starts every block as 0xFF bytes (NaN); the dynamic array ends at an unmapped page.
// Device memory starts as 0xFF bytes (NaN as floats).
// Built with ASan, out-of-bounds global accesses abort.
//
// Streams: work given the legacy default stream (0) aborts: it is not ordered with the
// backend's cudaStreamNonBlocking streams on a GPU (kernels, async copies and memsets, events,
// cuBLAS after cublasSetStream, CUB).
// Not modelled: concurrency between streams (everything runs at once, in issue order), device
// math-library ulps (host expf etc.), FMA contraction, tensor-core summation order. NCCL is
// tests/emu/nccl_emu.cpp, over MPI (EMU_GPU_PER_RANK=1 gives each process a GPU of its own).
// x86-64 only (the fiber switch is a few lines of assembly).
#if !defined(__x86_64__)
#error "tests/emu: x86-64 only"
#endif
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <map>
#include <random>
#include <vector>

#include "cublasLt.h"
#include "cublas_v2.h"
#include "cuda_bf16.h"
#include "cuda_fp16.h"
#include "cuda_runtime.h"

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

[[noreturn]] static void die(const char *what) {
  fprintf(stderr, "tests/emu: %s\n", what);
  fflush(stderr);
  abort();
}

// ---- device memory ----

static void forget_range(const void *p, size_t bytes);
static std::map<uintptr_t, size_t> pinned; // page-locked host memory (cudaMallocHost): start -> bytes
static bool is_pinned(const void *p, size_t bytes) {
  uintptr_t a = (uintptr_t)p;
  auto it = pinned.upper_bound(a);
  if (it == pinned.begin()) return false;
  --it;
  return a + bytes <= it->first + it->second;
}

static std::map<uintptr_t, size_t> allocs; // start -> bytes
static cudaError_t last_err = cudaSuccess;

bool emu_is_device_range(const void *p, size_t bytes) {
  uintptr_t a = (uintptr_t)p;
  auto it = allocs.upper_bound(a);
  if (it == allocs.begin()) return false;
  --it;
  return a + bytes <= it->first + it->second;
}

const char *cudaGetErrorString(cudaError_t e) {
  switch (e) {
  case cudaSuccess: return "no error";
  case cudaErrorInvalidValue: return "invalid argument";
  case cudaErrorMemoryAllocation: return "out of memory";
  case cudaErrorInvalidConfiguration: return "invalid configuration argument";
  case cudaErrorNotReady: return "device not ready";
  default: return "unknown error";
  }
}
cudaError_t cudaGetLastError(void) {
  cudaError_t e = last_err;
  last_err = cudaSuccess;
  return e;
}
cudaError_t cudaMalloc(void **p, size_t bytes) {
  void *q = nullptr;
  if (posix_memalign(&q, 256, bytes ? bytes : 1)) return cudaErrorMemoryAllocation;
  memset(q, 0xFF, bytes); // cudaMalloc's memory holds garbage: NaN, which no tolerance absorbs
  allocs[(uintptr_t)q] = bytes;
  *p = q;
  return cudaSuccess;
}
cudaError_t cudaFree(void *p) {
  if (!p) return cudaSuccess;
  auto it = allocs.find((uintptr_t)p);
  if (it == allocs.end()) die("cudaFree of a pointer cudaMalloc did not return");
  forget_range(p, it->second); // what is kept for it goes with it
  allocs.erase(it);
  free(p);
  return cudaSuccess;
}
static void check_stream(cudaStream_t s, const char *what) {
  if (s) return;
  fprintf(stderr, "tests/emu: %s on the legacy default stream (0), which is not ordered with the "
          "backend's cudaStreamNonBlocking streams\n", what);
  fflush(stderr);
  abort();
}

// ---- streams and events: when an asynchronous call's effects become visible ----
// Work runs when it is issued, but what an asynchronous call writes (an NCCL call's output:
// tests/emu/nccl_emu.cpp; a copy's destination but pageable host memory, which CUDA writes
// before the call returns) is held back, the buffer reading as NaN, until its stream is waited
// for: by work issued later on the same stream, by another stream through an event recorded on
// it after the call (cudaStreamWaitEvent), or by the host (cudaEventSynchronize,
// cudaStreamSynchronize, cudaStreamQuery). And what it reads (an NCCL input; a copy's source but
// pageable host memory, which CUDA stages before returning) is kept and compared when another
// stream or the host waits for it: written meanwhile, it aborts the run. On a GPU a reader that
// skips the wait, or a writer that overwrites an input before it, races with the call; here it
// fails every time. Each stream counts the calls issued on it; an event remembers its stream and
// that count when recorded.
struct CUstream_st {
  long calls;
};
static std::map<cudaEvent_t, std::pair<cudaStream_t, long>> recorded;

struct Held { // a call's output, not yet visible
  cudaStream_t stream;
  long call;
  unsigned char *dst;
  std::vector<unsigned char> data;
};
struct Read { // what a call read, as it was
  cudaStream_t stream;
  long call;
  const char *what;
  const unsigned char *src;
  std::vector<unsigned char> bytes;
};
static std::vector<Held> held;
static std::vector<Read> reads;

void emu_call_done(cudaStream_t s, const char *what, const void *in, size_t in_bytes, void *out, size_t out_bytes) {
  long call = ++s->calls;
  const unsigned char *i = (const unsigned char *)in;
  unsigned char *o = (unsigned char *)out;
  if (in_bytes) reads.push_back(Read{s, call, what, i, std::vector<unsigned char>(i, i + in_bytes)});
  if (out_bytes) {
    held.push_back(Held{s, call, o, std::vector<unsigned char>(o, o + out_bytes)});
    memset(o, 0xFF, out_bytes); // NaN
  }
}

// Read records that are settled: each checked unchanged (no one wrote the buffer while the call
// might still read it), then dropped.
static void settle_reads(bool (*which)(const Read &, const void *), const void *arg) {
  std::vector<Read> open;
  for (Read &r : reads)
    if (!which(r, arg)) open.push_back(std::move(r));
    else if (memcmp(r.src, r.bytes.data(), r.bytes.size()) != 0) {
      char msg[300];
      snprintf(msg, sizeof msg, "a buffer %s reads was written before the call's stream was waited for (on a GPU "
               "the call may still be reading it: a write-after-read race; wait for its event first)", r.what);
      die(msg);
    }
  reads.swap(open);
}

struct Upto {
  cudaStream_t s;
  long upto;
};
static bool read_upto(const Read &r, const void *a) {
  const Upto *u = (const Upto *)a;
  return r.stream == u->s && r.call <= u->upto;
}

struct Range {
  cudaStream_t s;
  uintptr_t lo, hi;
};
static bool read_overlaps(const Read &r, const void *a) {
  const Range *g = (const Range *)a;
  uintptr_t lo = (uintptr_t)r.src, hi = lo + r.bytes.size();
  return r.stream == g->s && lo < g->hi && g->lo < hi;
}

// Stream s's calls up to `upto` made visible; with done they are known finished for whoever
// waits (another stream or the host waited for them, or s itself runs work whose writes are not
// known, a kernel: from then on s may write their inputs), their inputs checked unchanged. A
// later NCCL call or copy on s (its writes known: emu_stream_writes) leaves them open.
static void deliver(cudaStream_t s, long upto, bool done) {
  Upto u{s, upto};
  if (done) settle_reads(read_upto, &u);
  std::vector<Held> later;
  for (Held &h : held) // in call order: a later result over the same bytes wins
    if (h.stream == s && h.call <= upto) memcpy(h.dst, h.data.data(), h.data.size());
    else later.push_back(std::move(h));
  held.swap(later);
}

// What is kept for a freed range goes with it.
static void forget_range(const void *p, size_t bytes) {
  uintptr_t a = (uintptr_t)p;
  std::vector<Read> open;
  for (Read &r : reads)
    if ((uintptr_t)r.src < a || (uintptr_t)r.src >= a + bytes) open.push_back(std::move(r));
  reads.swap(open);
  std::vector<Held> keep;
  for (Held &h : held)
    if ((uintptr_t)h.dst < a || (uintptr_t)h.dst >= a + bytes) keep.push_back(std::move(h));
  held.swap(keep);
}

void emu_check_stream(cudaStream_t s, const char *what) { // work issued on s: after s's earlier calls
  check_stream(s, what);
  deliver(s, LONG_MAX, true);
}

void emu_check_stream_call(cudaStream_t s, const char *what) {
  check_stream(s, what);
  deliver(s, LONG_MAX, false);
}

// A write of [p, p + bytes) issued on s over what a call on another stream still writes: on a GPU
// the two race (a write-after-write race), and here the held result would land over it later.
static void check_unheld(cudaStream_t s, const void *p, size_t bytes, const char *what) {
  uintptr_t lo = (uintptr_t)p, hi = lo + bytes;
  for (const Held &h : held)
    if (h.stream != s && (uintptr_t)h.dst < hi && lo < (uintptr_t)h.dst + h.data.size()) {
      char msg[300];
      snprintf(msg, sizeof msg, "%s writes a buffer that a call on another stream is still writing (on a GPU the "
               "two race: a write-after-write race; wait for that call's event first)", what);
      die(msg);
    }
}

void emu_stream_writes(cudaStream_t s, const void *p, size_t bytes) {
  Range g{s, (uintptr_t)p, (uintptr_t)p + bytes};
  if (!bytes) return;
  settle_reads(read_overlaps, &g);
  check_unheld(s, p, bytes, "an asynchronous call");
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t bytes, cudaStream_t s) {
  emu_check_stream(s, "cudaMemsetAsync");
  if (!emu_is_device_range(p, bytes)) die("cudaMemsetAsync past a device allocation");
  if (bytes) check_unheld(s, p, bytes, "cudaMemsetAsync");
  memset(p, v, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind k,
                            cudaStream_t stream) {
  emu_check_stream_call(stream, "cudaMemcpyAsync");
  bool dd = emu_is_device_range(dst, bytes), sd = emu_is_device_range(src, bytes);
  if (dd != (k == cudaMemcpyHostToDevice || k == cudaMemcpyDeviceToDevice) ||
      sd != (k == cudaMemcpyDeviceToHost || k == cudaMemcpyDeviceToDevice))
    die("cudaMemcpyAsync: a pointer is not of the kind's side, or the range passes its allocation");
  uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
  if (bytes && d < s + bytes && s < d + bytes) die("cudaMemcpyAsync: overlapping ranges");
  emu_stream_writes(stream, dst, bytes);
  memcpy(dst, src, bytes);
  // asynchronous but for pageable host memory: CUDA stages a pageable source and fills a
  // pageable destination before returning
  bool reads_later = sd || is_pinned(src, bytes), writes_later = dd || is_pinned(dst, bytes);
  if (bytes)
    emu_call_done(stream, "cudaMemcpyAsync", reads_later ? src : nullptr, reads_later ? bytes : 0,
                  writes_later ? dst : nullptr, writes_later ? bytes : 0);
  if (k == cudaMemcpyDeviceToHost && !writes_later) deliver(stream, LONG_MAX, true); // it returned when its stream got there
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  check_stream(s, "cudaStreamSynchronize");
  deliver(s, LONG_MAX, true);
  return cudaSuccess;
}
// Every other query says the stream is still running (and delivers nothing): a caller that takes
// one poll for a synchronisation, or never polls again, shows.
cudaError_t cudaStreamQuery(cudaStream_t s) {
  check_stream(s, "cudaStreamQuery");
  static std::map<cudaStream_t, unsigned long> polls; // each stream's queries alternate
  if (++polls[s] % 2) return cudaErrorNotReady;
  deliver(s, LONG_MAX, true);
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void **p, size_t bytes) {
  *p = malloc(bytes ? bytes : 1); // host memory: cudaMemcpyAsync checks it is not a device range
  if (!*p) return cudaErrorMemoryAllocation;
  pinned[(uintptr_t)*p] = bytes;
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void *p) {
  auto it = pinned.find((uintptr_t)p);
  if (p && it == pinned.end()) die("cudaFreeHost of a pointer cudaMallocHost did not return");
  if (p) forget_range(p, it->second), pinned.erase(it);
  free(p);
  return cudaSuccess;
}
static int emu_events;
static std::map<cudaEvent_t, unsigned> event_flags;
static std::map<cudaEvent_t, double> event_time; // the host's clock at the last record, seconds
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
  *e = (cudaEvent_t)(uintptr_t)++emu_events;
  event_flags[*e] = flags;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  check_stream(s, "cudaEventRecord");
  if (!e) return cudaErrorInvalidValue;
  recorded[e] = {s, s->calls};
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  event_time[e] = ts.tv_sec + 1e-9 * ts.tv_nsec;
  return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
  auto ta = event_time.find(a), tb = event_time.find(b);
  if (!ms || ta == event_time.end() || tb == event_time.end()) die("cudaEventElapsedTime of an event not recorded");
  if ((event_flags[a] | event_flags[b]) & cudaEventDisableTiming)
    die("cudaEventElapsedTime of an event made with cudaEventDisableTiming");
  *ms = (float)(1e3 * (tb->second - ta->second));
  return cudaSuccess;
}
// what waiting for event e (by stream `by`, or the host: NULL) makes visible: its stream's NCCL
// results up to its record, finished for any waiter but its own stream
static void reached(cudaEvent_t e, cudaStream_t by) {
  auto it = recorded.find(e);
  if (it != recorded.end()) deliver(it->second.first, it->second.second, it->second.first != by);
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  if (!e) return cudaErrorInvalidValue;
  reached(e, nullptr);
  return cudaSuccess;
}
// As cudaStreamQuery: every other query of an event says its work still runs (and delivers
// nothing), so a caller that polls must come back; with EMU_EVENT_POLLS=n (read at the first
// query), only every n-th: a caller that feeds work as earlier work is reported done then feeds
// little, and what it must issue without being told (a wait for the work's end) shows.
cudaError_t cudaEventQuery(cudaEvent_t e) {
  if (!e) return cudaErrorInvalidValue;
  static std::map<cudaEvent_t, unsigned long> polls;
  static unsigned long every = 0;
  if (!every) {
    const char *v = getenv("EMU_EVENT_POLLS");
    every = v && atol(v) > 0 ? (unsigned long)atol(v) : 2;
  }
  if (++polls[e] % every) return cudaErrorNotReady;
  reached(e, nullptr);
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  if (!e) return cudaErrorInvalidValue;
  recorded.erase(e), event_flags.erase(e), event_time.erase(e);
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
  check_stream(s, "cudaStreamWaitEvent");
  if (!e) return cudaErrorInvalidValue;
  reached(e, s);
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) {
  *s = new CUstream_st{0}; // each its own (never destroyed: the backend keeps its streams)
  return cudaSuccess;
}
cudaError_t cudaGetDeviceCount(int *n) {
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : cudaErrorInvalidValue; }
cudaError_t cudaGetDevice(int *d) {
  *d = 0;
  return cudaSuccess;
}
// The emulated GPU's identity: one GPU that every process of the machine shares (so ranks take
// the MPI path through host copies), or with EMU_GPU_PER_RANK=1 one GPU per process (its pid in
// the UUID), so that ranks take the NCCL path (tests/emu/nccl_emu.cpp).
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int d) {
  if (d != 0) return cudaErrorInvalidValue;
  memset(prop, 0, sizeof *prop);
  snprintf(prop->name, sizeof prop->name, "CUDA emulator (tests/emu)");
  const char *own = getenv("EMU_GPU_PER_RANK");
  if (own && strcmp(own, "1") == 0) {
    long pid = (long)getpid();
    memcpy(prop->uuid.bytes, "emuGPU", 6);
    memcpy(prop->uuid.bytes + 8, &pid, sizeof pid);
  }
  return cudaSuccess;
}
cudaError_t cudaDeviceGetPCIBusId(char *bus, int len, int d) {
  if (d != 0 || len < 1) return cudaErrorInvalidValue;
  snprintf(bus, (size_t)len, "emulated");
  return cudaSuccess;
}

static const int SMEM_OPTIN_MAX = 232448; // sm_90: 227 KiB of dynamic shared memory per block
static std::map<const void *, int> smem_optin;
cudaError_t emu_func_set_attr(const void *k, int attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 || value > SMEM_OPTIN_MAX)
    return cudaErrorInvalidValue;
  smem_optin[k] = value;
  return cudaSuccess;
}
float __fmul_rn(float a, float b) {
  volatile float r = a * b;
  return r;
}

// ---- fibers: one per GPU thread of the running block ----

// switches stacks: saves the callee-saved registers and the FP control words on the current
// stack, stores its pointer in *save_sp, and resumes the stack at to_sp
extern "C" void emu_switch(void **save_sp, void *to_sp);
asm(R"(
.text
.globl emu_switch
.type emu_switch,@function
emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
)");

struct Bar { // a barrier: `arrived` of the live participants; gen counts releases
  int arrived = 0;
  unsigned gen = 0;
};
struct CpCopy { // one cp.async of 16 bytes, performed at the wait that covers its group
  void *dst;
  const void *src;
};
static std::vector<CpCopy> cp_landed; // waited for by their threads, landing at the next block barrier
// the copies waited for since the last block barrier land as it completes
static void cp_land(void) {
  for (const CpCopy &c : cp_landed) memcpy(c.dst, c.src, 16);
  cp_landed.clear();
}
struct Fiber {
  void *sp = nullptr;
  char *stack = nullptr;
  bool done = false;
  Bar *wait = nullptr; // runnable again once wait->gen != wait_gen
  unsigned wait_gen = 0;
  std::vector<std::vector<CpCopy>> cp_groups; // committed, oldest first
  std::vector<CpCopy> cp_open;                // issued since the last commit
};
static const size_t STACK_BYTES = 256 * 1024;
static std::vector<Fiber> fibers;
static int cur = -1, nthreads = 0, block_live = 0;
static void *sched_sp;
static const void *sched_stack_bottom;
static size_t sched_stack_size;
static Bar block_bar;
static std::vector<Bar> warp_bars;
static std::vector<int> warp_live;
static std::vector<unsigned char> shfl_slots; // [thread][8 bytes]
static const std::function<void()> *kernel_body;
static unsigned char *dyn_smem;
static size_t dyn_smem_bytes;
static bool in_kernel = false;

static void to_fiber(int t) {
#ifdef __SANITIZE_ADDRESS__
  void *fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, fibers[t].stack, STACK_BYTES);
  emu_switch(&sched_sp, fibers[t].sp);
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
  emu_switch(&sched_sp, fibers[t].sp);
#endif
}
static void to_scheduler(bool exiting) {
#ifdef __SANITIZE_ADDRESS__
  void *fake = nullptr;
  __sanitizer_start_switch_fiber(exiting ? nullptr : &fake, sched_stack_bottom, sched_stack_size);
  emu_switch(&fibers[cur].sp, sched_sp);
  __sanitizer_finish_switch_fiber(fake, &sched_stack_bottom, &sched_stack_size);
#else
  (void)exiting;
  emu_switch(&fibers[cur].sp, sched_sp);
#endif
}

static void arrive(Bar &b, int live) {
  unsigned g = b.gen;
  if (++b.arrived >= live) {
    b.arrived = 0, b.gen++;
    return;
  }
  Fiber &f = fibers[cur];
  f.wait = &b, f.wait_gen = g;
  to_scheduler(false);
}
static int lanes_of(int w) { return std::min(32, nthreads - 32 * w); }

void __syncthreads(void) {
  if (!in_kernel) die("__syncthreads outside a kernel");
  if (block_live != nthreads) die("__syncthreads after some threads of the block returned");
  if (block_bar.arrived + 1 >= block_live) cp_land(); // every thread is here: the barrier completes
  arrive(block_bar, block_live);
}
void __syncwarp(unsigned mask) {
  int w = cur / 32;
  if (mask != 0xffffffffu) die("__syncwarp with a partial mask (not emulated)");
  if (warp_live[w] != lanes_of(w)) die("__syncwarp(full mask) after some lanes returned");
  arrive(warp_bars[w], warp_live[w]);
}
void emu_shfl_begin(unsigned mask) {
  if (mask != 0xffffffffu) die("shuffle with a partial mask (not emulated)");
  if (warp_live[cur / 32] != 32) die("shuffle with a full mask but fewer than 32 live lanes");
}
void emu_shfl_slot_write(const void *v, size_t bytes) {
  memcpy(&shfl_slots[(size_t)cur * 8], v, bytes);
}
void emu_shfl_slot_read(void *v, size_t bytes, int src_lane) {
  memcpy(v, &shfl_slots[((size_t)(cur / 32) * 32 + src_lane) * 8], bytes);
}
void emu_warp_barrier(void) { arrive(warp_bars[cur / 32], warp_live[cur / 32]); }
unsigned char *emu_dyn_smem(void) { return dyn_smem; }

// PTX mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (kernels/cuda/ptx.cuh), d += a b, one
// warp together: each lane's 4 A and 2 B registers go round the warp through the shuffle slots
// (8 bytes a round), then each lane sums its own 4 elements of D in fp32, k in order. Layout (g =
// lane / 4, q = lane % 4): A(r, c) in lane (r % 8) * 4 + (c % 8) / 2, register r / 8 + 2 (c / 8);
// B(k, n) in lane 4 n + (k % 8) / 2, register k / 8; the lower column (A) or row (B) of a pair in
// the low half; D(g + 8 (i / 2), 2q + i % 2) in d[i].
// each lane's 8 bytes at mine, the whole warp's into all[lane] (a warp-collective step)
static void warp_gather8(const void *mine, void *all, size_t stride) {
  emu_shfl_slot_write(mine, 8);
  emu_warp_barrier();
  for (int l = 0; l < 32; l++) emu_shfl_slot_read((char *)all + (size_t)l * stride, 8, l);
  emu_warp_barrier();
}

void emu_mma_bf16_16816(float *d, const uint32_t *a, const uint32_t *b) {
  emu_shfl_begin(0xffffffffu);
  uint32_t got[32][6];
  const uint32_t *mine[3] = {a, a + 2, b};
  for (int round = 0; round < 3; round++) warp_gather8(mine[round], &got[0][2 * round], sizeof got[0]);
  auto bf = [](uint32_t word, int high) {
    uint32_t u = (high ? word >> 16 : word & 0xffffu) << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
  };
  int lane = cur % 32, g = lane / 4, q = lane % 4;
  for (int i = 0; i < 4; i++) {
    int r = g + 8 * (i / 2), n = 2 * q + i % 2;
    float s = d[i];
    for (int k = 0; k < 16; k++) {
      float x = bf(got[(r % 8) * 4 + (k % 8) / 2][r / 8 + 2 * (k / 8)], k % 2);
      float y = bf(got[4 * n + (k % 8) / 2][4 + k / 8], k % 2);
      s += x * y;
    }
    d[i] = s;
  }
}

// ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16 (kernels/cuda/ptx.cuh): the warp's 32 row
// addresses go round through the shuffle slots; lane l's r[i] is matrix i's (l / 4, 2(l % 4)..+1),
// or transposed (2(l % 4)..+1, l / 4), the first of the pair in the low half. Each row must be
// 16 bytes of this block's shared memory, 16-byte aligned.
void emu_ldmatrix_x4(uint32_t *r, const void *p, int trans) {
  emu_shfl_begin(0xffffffffu);
  const uint16_t *rows[32];
  static_assert(sizeof p == 8, "a pointer in one shuffle slot");
  warp_gather8(&p, rows, sizeof rows[0]);
  for (int l = 0; l < 32; l++) {
    const unsigned char *a = (const unsigned char *)rows[l];
    if ((uintptr_t)a % 16 || a < dyn_smem || a + 16 > dyn_smem + dyn_smem_bytes)
      die("ldmatrix: a row address that is not 16 aligned bytes of the block's shared memory");
  }
  int lane = cur % 32;
  for (int i = 0; i < 4; i++) {
    uint16_t lo, hi;
    if (!trans)
      lo = rows[8 * i + lane / 4][2 * (lane % 4)], hi = rows[8 * i + lane / 4][2 * (lane % 4) + 1];
    else
      lo = rows[8 * i + 2 * (lane % 4)][lane / 4], hi = rows[8 * i + 2 * (lane % 4) + 1][lane / 4];
    r[i] = (uint32_t)lo | (uint32_t)hi << 16;
  }
}

// cp.async.cg.shared.global of 16 bytes, commit_group, wait_group n (kernels/cuda/ptx.cuh): on a
// GPU the bytes land any time between the call and the wait that covers them, and other threads
// may read them only after a barrier that follows the wait, so the emulator takes the extremes:
// the destination turns to 0xFF bytes (NaN as bf16 or fp32) at the call, and the copy is
// performed when the first block barrier after its wait completes (a wait leaving at most n of
// the thread's committed groups pending). A read before the wait or without the barrier after
// it, or a copy into a buffer other threads still read (no barrier between), shows as NaN.
// Stricter than PTX in one case: the issuing thread itself may read its bytes right after its
// wait on a GPU, here only after the barrier. A thread that ends with copies not waited for
// aborts.
void emu_cp_async16(void *smem, const void *gmem) {
  unsigned char *d = (unsigned char *)smem;
  if ((uintptr_t)d % 16 || (uintptr_t)gmem % 16 || d < dyn_smem || d + 16 > dyn_smem + dyn_smem_bytes)
    die("cp.async: a destination outside the block's shared memory, or an address not 16-byte aligned");
  memset(d, 0xFF, 16);
  fibers[cur].cp_open.push_back(CpCopy{smem, gmem});
}
void emu_cp_async_commit(void) {
  Fiber &f = fibers[cur];
  f.cp_groups.push_back(std::move(f.cp_open));
  f.cp_open.clear();
}
void emu_cp_async_wait(int n) {
  Fiber &f = fibers[cur];
  while ((int)f.cp_groups.size() > n) {
    for (const CpCopy &c : f.cp_groups.front()) cp_landed.push_back(c);
    f.cp_groups.erase(f.cp_groups.begin());
  }
}


static void fiber_main(void) {
#ifdef __SANITIZE_ADDRESS__
  __sanitizer_finish_switch_fiber(nullptr, &sched_stack_bottom, &sched_stack_size);
#endif
  (*kernel_body)();
  if (!fibers[cur].cp_groups.empty() || !fibers[cur].cp_open.empty())
    die("a thread ended with cp.async copies it never waited for");
  fibers[cur].done = true;
  int w = cur / 32;
  warp_live[w]--, block_live--;
  // a warp barrier others wait on counts live lanes only
  if (warp_bars[w].arrived > 0 && warp_bars[w].arrived >= warp_live[w])
    warp_bars[w].arrived = 0, warp_bars[w].gen++;
  to_scheduler(true);
  die("a finished thread was resumed");
}

static int order_mode(void) { // 0 thread order, 1 reverse, 2 shuffled
  static int m = -1;
  if (m < 0) {
    const char *e = getenv("EMU_ORDER");
    m = e && !strcmp(e, "rev") ? 1 : e && !strcmp(e, "rand") ? 2 : 0;
  }
  return m;
}

// `bytes` of dynamic shared memory whose end touches a PROT_NONE page (128-byte aligned start)
static unsigned char *smem_region(size_t bytes) {
  static unsigned char *base = nullptr;
  const size_t span = 512 * 1024;
  if (!base) {
    base = (unsigned char *)mmap(nullptr, span + 4096, PROT_READ | PROT_WRITE,
                                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED || mprotect(base + span, 4096, PROT_NONE)) die("mmap");
  }
  return base + span - ((bytes + 127) & ~(size_t)127);
}

// Static __shared__ arrays are C++ statics here: one copy, kept from block to block and launch to
// launch, where a GPU block starts with whatever its SM's shared memory held. prep.sed follows
// each declaration with emu_static_smem(name, sizeof name): the first thread of a block to reach
// it fills the array with 0xFF bytes (NaN), as dynamic shared memory starts, so a read before
// the block's own write shows instead of finding the last block's values.
static unsigned long block_serial;
void emu_static_smem(void *p, size_t bytes) {
  static std::map<void *, unsigned long> filled; // array -> the block that last filled it
  unsigned long &b = filled[p];
  if (b == block_serial) return;
  b = block_serial;
  memset(p, 0xFF, bytes);
}

static void run_block(void) {
  block_serial++;
  nthreads = (int)(blockDim.x * blockDim.y * blockDim.z);
  if ((int)fibers.size() < nthreads) fibers.resize(nthreads);
  int nw = (nthreads + 31) / 32;
  warp_bars.assign(nw, Bar());
  warp_live.assign(nw, 0);
  for (int w = 0; w < nw; w++)
    warp_live[w] = lanes_of(w);
  block_bar = Bar();
  block_live = nthreads;
  shfl_slots.assign((size_t)nw * 32 * 8, 0);
  if (dyn_smem_bytes) memset(dyn_smem, 0xFF, dyn_smem_bytes);
  for (int t = 0; t < nthreads; t++) {
    Fiber &f = fibers[t];
    if (!f.stack) {
      f.stack = (char *)mmap(nullptr, STACK_BYTES, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (f.stack == (char *)MAP_FAILED) die("mmap");
    }
#ifdef __SANITIZE_ADDRESS__
    __asan_unpoison_memory_region(f.stack, STACK_BYTES); // frames of the last block never returned
#endif
    f.done = false, f.wait = nullptr;
    f.cp_groups.clear(), f.cp_open.clear();
    void **sp = (void **)(((uintptr_t)f.stack + STACK_BYTES) & ~(uintptr_t)15);
    *--sp = nullptr;            // fiber_main's return address (it never returns)
    *--sp = (void *)fiber_main; // where emu_switch's ret goes
    for (int i = 0; i < 6; i++)
      *--sp = nullptr; // rbp rbx r12 r13 r14 r15
    --sp;              // MXCSR and x87 control word: the defaults
    unsigned mxcsr = 0x1f80;
    unsigned short fpcw = 0x037f;
    memcpy(sp, &mxcsr, 4), memcpy((char *)sp + 4, &fpcw, 2);
    f.sp = sp;
  }
  std::vector<int> order(nthreads);
  for (int t = 0; t < nthreads; t++)
    order[t] = order_mode() == 1 ? nthreads - 1 - t : t;
  static std::mt19937 rng(12345);
  for (int left = nthreads; left;) {
    if (order_mode() == 2) std::shuffle(order.begin(), order.end(), rng);
    bool ran = false;
    for (int t : order) {
      Fiber &f = fibers[t];
      if (f.done || (f.wait && f.wait->gen == f.wait_gen)) continue;
      f.wait = nullptr;
      cur = t;
      threadIdx.x = (unsigned)t % blockDim.x;
      threadIdx.y = (unsigned)t / blockDim.x % blockDim.y;
      threadIdx.z = (unsigned)t / (blockDim.x * blockDim.y);
      to_fiber(t);
      ran = true;
      if (f.done) left--;
    }
    if (!ran) die("deadlock: every live thread of the block waits at a barrier");
  }
  cp_landed.clear(); // waited for but never read behind a barrier: the block's memory goes
  cur = -1;
}

void emu_run_grid(const void *k, dim3 grid, dim3 block, size_t smem,
                  const std::function<void()> &body) {
  size_t threads = (size_t)block.x * block.y * block.z;
  if (!grid.x || !grid.y || !grid.z || !threads || threads > 1024 || block.z > 64 ||
      grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535) {
    fprintf(stderr, "tests/emu: bad launch: grid (%u, %u, %u), block (%u, %u, %u)\n", grid.x,
            grid.y, grid.z, block.x, block.y, block.z);
    last_err = cudaErrorInvalidConfiguration;
    return;
  }
  if (smem > 48 * 1024) {
    auto it = smem_optin.find(k);
    if (it == smem_optin.end() || (size_t)it->second < smem) {
      fprintf(stderr, "tests/emu: %zu bytes of dynamic shared memory without the kernel's opt-in\n",
              smem);
      last_err = cudaErrorInvalidValue;
      return;
    }
  }
  if (in_kernel) die("a launch inside a kernel");
  in_kernel = true;
  gridDim = grid, blockDim = block;
  dyn_smem_bytes = smem;
  dyn_smem = smem ? smem_region(smem) : nullptr;
  kernel_body = &body;
  // Blocks run one after another: with EMU_ORDER=rev the last one first. A GPU promises no order
  // between the blocks of a launch, so a kernel whose blocks read what other blocks of the same
  // launch write (an in-place update across block boundaries, say) is wrong in one of the orders.
  size_t nblocks = (size_t)grid.x * grid.y * grid.z;
  for (size_t n = 0; n < nblocks; n++) {
    size_t b = order_mode() == 1 ? nblocks - 1 - n : n;
    blockIdx.x = (unsigned)(b % grid.x);
    blockIdx.y = (unsigned)(b / grid.x % grid.y);
    blockIdx.z = (unsigned)(b / ((size_t)grid.x * grid.y));
    run_block();
  }
  in_kernel = false;
}

void emu_wmma_check(const void *p, unsigned ldm, size_t elem, bool rowmajor, const char *what) {
  char msg[160];
  const char *bad = (uintptr_t)p % 32   ? "pointer not 256-bit aligned"
                    : (ldm * elem) % 16 ? "ldm not a multiple of 16 bytes"
                    : ldm < 16          ? "ldm smaller than the tile"
                                        : nullptr;
  const unsigned char *b = (const unsigned char *)p;
  if (!bad && dyn_smem && b >= dyn_smem && b < dyn_smem + dyn_smem_bytes &&
      b + (15 * (size_t)ldm + 16) * elem > dyn_smem + dyn_smem_bytes)
    bad = "tile past the dynamic shared memory";
  (void)rowmajor;
  if (bad) {
    snprintf(msg, sizeof msg, "wmma %s: %s", what, bad);
    die(msg);
  }
}

// ---- cuBLAS: column-major, as its documentation defines the GEMMs ----

const char *cublasGetStatusString(cublasStatus_t s) {
  switch (s) {
  case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
  case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
  case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  default: return "CUBLAS_STATUS_(unknown)";
  }
}
cublasStatus_t cublasCreate(cublasHandle_t *h) {
  static int handle;
  *h = (cublasHandle_t)&handle;
  return CUBLAS_STATUS_SUCCESS;
}
static cudaStream_t blas_stream; // cuBLAS's, as cublasSetStream left it (0: the legacy stream)
cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t s) {
  blas_stream = s;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }

static size_t type_bytes(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }
// element i of an operand, as the compute type sees it
static float operand(const void *p, cudaDataType t, size_t i, cublasComputeType_t ct) {
  float v;
  if (t == CUDA_R_32F) {
    v = ((const float *)p)[i];
  } else if (t == CUDA_R_16BF) {
    __nv_bfloat16 h;
    h.x = ((const uint16_t *)p)[i];
    v = __bfloat162float(h);
  } else {
    __half h;
    h.x = ((const uint16_t *)p)[i];
    v = __half2float(h);
  }
  if (ct == CUBLAS_COMPUTE_32F_FAST_16BF) v = __bfloat162float(__float2bfloat16_rn(v));
  if (ct == CUBLAS_COMPUTE_32F_FAST_16F) v = __half2float(__float2half_rn(v));
  return v;
}

// C = alpha op(A) op(B) + beta C for each of `batch` products; op(A) m x k, op(B) k x n, C m x n,
// all column-major. Checks the leading dimensions and types as cuBLAS does, that every element
// read or written lies in one device allocation, and that the products' C do not overlap.
static cublasStatus_t gemm(const char *fn, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                           int k, float alpha, const void *A, cudaDataType At, int lda,
                           long long sA, const void *B, cudaDataType Bt, int ldb, long long sB,
                           float beta, float *C, int ldc, long long sC, int batch,
                           cublasComputeType_t ct) {
  emu_check_stream(blas_stream, fn);
  if (ta > CUBLAS_OP_T || tb > CUBLAS_OP_T || m < 0 || n < 0 || k < 0 || batch < 0)
    return CUBLAS_STATUS_INVALID_VALUE;
  int arows = ta == CUBLAS_OP_N ? m : k, acols = ta == CUBLAS_OP_N ? k : m;
  int brows = tb == CUBLAS_OP_N ? k : n, bcols = tb == CUBLAS_OP_N ? n : k;
  if (lda < std::max(1, arows) || ldb < std::max(1, brows) || ldc < std::max(1, m)) {
    fprintf(
        stderr,
        "tests/emu: %s: m %d n %d k %d, lda %d ldb %d ldc %d: a leading dimension is too small\n",
        fn, m, n, k, lda, ldb, ldc);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (At != Bt || (At != CUDA_R_32F && ct != CUBLAS_COMPUTE_32F))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (!m || !n || !batch) return CUBLAS_STATUS_SUCCESS;
  char msg[160];
  for (int i = 0; i < batch; i++) {
    const char *a = (const char *)A + i * sA * (long long)type_bytes(At),
               *b = (const char *)B + i * sB * (long long)type_bytes(Bt);
    const char *bad =
        k && !emu_is_device_range(a, ((size_t)(acols - 1) * lda + arows) * type_bytes(At))   ? "A"
        : k && !emu_is_device_range(b, ((size_t)(bcols - 1) * ldb + brows) * type_bytes(Bt)) ? "B"
        : !emu_is_device_range(C + i * sC, ((size_t)(n - 1) * ldc + m) * 4)                  ? "C"
                                                                            : nullptr;
    if (bad) {
      snprintf(msg, sizeof msg, "%s: product %d: %s passes the end of its device allocation", fn, i,
               bad);
      die(msg);
    }
  }
  if (batch > 1 && (size_t)std::llabs(sC) < (size_t)(n - 1) * ldc + m) {
    snprintf(msg, sizeof msg, "%s: the products' C overlap (stride %lld)", fn, sC);
    die(msg);
  }
  std::vector<float> opa((size_t)m * k), opb((size_t)n * k), out((size_t)m * n);
  for (int bi = 0; bi < batch; bi++) {
    const char *a = (const char *)A + bi * sA * (long long)type_bytes(At),
               *b = (const char *)B + bi * sB * (long long)type_bytes(Bt);
    float *c = C + bi * sC;
    for (int i = 0; i < m; i++) // row i of op(A)
      for (int l = 0; l < k; l++)
        opa[(size_t)i * k + l] =
            operand(a, At, ta == CUBLAS_OP_N ? i + (size_t)l * lda : l + (size_t)i * lda, ct);
    for (int j = 0; j < n; j++) // column j of op(B)
      for (int l = 0; l < k; l++)
        opb[(size_t)j * k + l] =
            operand(b, Bt, tb == CUBLAS_OP_N ? l + (size_t)j * ldb : j + (size_t)l * ldb, ct);
    for (int j = 0; j < n; j++)
      for (int i = 0; i < m; i++) {
        double s = 0;
        for (int l = 0; l < k; l++)
          s += (double)opa[(size_t)i * k + l] * opb[(size_t)j * k + l];
        float r = (float)(alpha * s);
        out[(size_t)j * m + i] =
            beta == 0.0f ? r : r + beta * c[(size_t)j * ldc + i]; // beta 0: C not read
      }
    for (int j = 0; j < n; j++)
      for (int i = 0; i < m; i++)
        c[(size_t)j * ldc + i] = out[(size_t)j * m + i];
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemm(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                           int k, const float *alpha, const float *A, int lda, const float *B,
                           int ldb, const float *beta, float *C, int ldc) {
  return gemm("cublasSgemm", ta, tb, m, n, k, *alpha, A, CUDA_R_32F, lda, 0, B, CUDA_R_32F, ldb, 0,
              *beta, C, ldc, 0, 1, CUBLAS_COMPUTE_32F);
}
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb,
                                         int m, int n, int k, const float *alpha, const float *A,
                                         int lda, long long sA, const float *B, int ldb,
                                         long long sB, const float *beta, float *C, int ldc,
                                         long long sC, int batch) {
  return gemm("cublasSgemmStridedBatched", ta, tb, m, n, k, *alpha, A, CUDA_R_32F, lda, sA, B,
              CUDA_R_32F, ldb, sB, *beta, C, ldc, sC, batch, CUBLAS_COMPUTE_32F);
}
cublasStatus_t cublasGemmEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void *alpha, const void *A, cudaDataType At,
                            int lda, const void *B, cudaDataType Bt, int ldb, const void *beta,
                            void *C, cudaDataType Ct, int ldc, cublasComputeType_t ct,
                            cublasGemmAlgo_t) {
  if (Ct != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED; // the only C type the backend uses
  return gemm("cublasGemmEx", ta, tb, m, n, k, *(const float *)alpha, A, At, lda, 0, B, Bt, ldb, 0,
              *(const float *)beta, (float *)C, ldc, 0, 1, ct);
}
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t, cublasOperation_t ta,
                                          cublasOperation_t tb, int m, int n, int k,
                                          const void *alpha, const void *A, cudaDataType At,
                                          int lda, long long sA, const void *B, cudaDataType Bt,
                                          int ldb, long long sB, const void *beta, void *C,
                                          cudaDataType Ct, int ldc, long long sC, int batch,
                                          cublasComputeType_t ct, cublasGemmAlgo_t) {
  if (Ct != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  return gemm("cublasGemmStridedBatchedEx", ta, tb, m, n, k, *(const float *)alpha, A, At, lda, sA,
              B, Bt, ldb, sB, *(const float *)beta, (float *)C, ldc, sC, batch, ct);
}

// ---- cuBLASLt: descriptors kept as given; the product through gemm() above, then the epilogue ----

struct emu_lt_desc {
  cublasComputeType_t ct;
  cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  const float *bias = nullptr;
};
struct emu_lt_layout {
  cudaDataType t;
  uint64_t rows, cols;
  int64_t ld;
};
struct emu_lt_pref {
  uint64_t ws = 0;
  uint32_t align[4] = {256, 256, 256, 256}; // cuBLASLt assumes 256-byte alignment unless told
};
cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
  static int handle;
  *h = (cublasLtHandle_t)&handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t ct, cudaDataType_t scale) {
  if (scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED; // the backend's only scale type
  *d = new emu_lt_desc{ct};
  return CUBLAS_STATUS_SUCCESS;
}
template <typename T> static cublasStatus_t take(T *dst, const void *buf, size_t n) {
  if (n != sizeof *dst) return CUBLAS_STATUS_INVALID_VALUE;
  memcpy(dst, buf, n);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a,
                                              const void *buf, size_t n) {
  switch (a) {
  case CUBLASLT_MATMUL_DESC_TRANSA: return take(&d->ta, buf, n);
  case CUBLASLT_MATMUL_DESC_TRANSB: return take(&d->tb, buf, n);
  case CUBLASLT_MATMUL_DESC_EPILOGUE: return take(&d->epi, buf, n);
  case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return take(&d->bias, buf, n);
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType t, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
  if (ld < (int64_t)std::max<uint64_t>(1, rows)) return CUBLAS_STATUS_INVALID_VALUE;
  *l = new emu_lt_layout{t, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
  *p = new emu_lt_pref;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t a, const void *buf,
                                                    size_t n) {
  if (a == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) return take(&p->ws, buf, n);
  if (a >= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES && a <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES)
    return take(&p->align[a - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], buf, n);
  return CUBLAS_STATUS_INVALID_VALUE;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}

// The product's shape from the layouts: op(A) m x k, op(B) k x n, C and D m x n; false when
// they do not fit together
static bool lt_shape(const emu_lt_desc *d, const emu_lt_layout *a, const emu_lt_layout *b, const emu_lt_layout *c,
                     const emu_lt_layout *dd, int *m, int *n, int *k) {
  *m = (int)(d->ta == CUBLAS_OP_N ? a->rows : a->cols), *k = (int)(d->ta == CUBLAS_OP_N ? a->cols : a->rows);
  int kb = (int)(d->tb == CUBLAS_OP_N ? b->rows : b->cols);
  *n = (int)(d->tb == CUBLAS_OP_N ? b->cols : b->rows);
  return kb == *k && c->rows == (uint64_t)*m && c->cols == (uint64_t)*n && dd->rows == c->rows &&
         dd->cols == c->cols && dd->ld == c->ld && c->t == CUDA_R_32F && dd->t == CUDA_R_32F && a->t == b->t;
}

// one "algorithm": it records the alignments it was chosen for, which cublasLtMatmul checks
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t dd, cublasLtMatmulPreference_t p, int requested,
                                              cublasLtMatmulHeuristicResult_t *results, int *returned) {
  int m, n, k;
  *returned = 0;
  if (requested < 1 || !lt_shape(d, a, b, c, dd, &m, &n, &k)) return CUBLAS_STATUS_INVALID_VALUE;
  if (a->t != CUDA_R_32F && d->ct != CUBLAS_COMPUTE_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  results[0] = {};
  for (int i = 0; i < 4; i++)
    results[0].algo.data[i] = p->align[i];
  results[0].algo.data[4] = p->ws;
  results[0].state = CUBLAS_STATUS_SUCCESS;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t d, const void *alpha, const void *A,
                              cublasLtMatrixLayout_t Ad, const void *B, cublasLtMatrixLayout_t Bd, const void *beta,
                              const void *C, cublasLtMatrixLayout_t Cd, void *D, cublasLtMatrixLayout_t Dd,
                              const cublasLtMatmulAlgo_t *algo, void *ws, size_t ws_bytes, cudaStream_t s) {
  emu_check_stream(s, "cublasLtMatmul");
  int m, n, k;
  if (!lt_shape(d, Ad, Bd, Cd, Dd, &m, &n, &k)) return CUBLAS_STATUS_INVALID_VALUE;
  const void *ptr[4] = {A, B, C, D};
  for (int i = 0; i < 4; i++)
    if ((uintptr_t)ptr[i] % algo->data[i]) die("cublasLtMatmul: an operand is less aligned than its algorithm was chosen for");
  if (ws_bytes < algo->data[4] && ws_bytes) die("cublasLtMatmul: a smaller workspace than the heuristic was given");
  if (ws_bytes && !emu_is_device_range(ws, ws_bytes)) die("cublasLtMatmul: the workspace passes its device allocation");
  float a = *(const float *)alpha, bt = *(const float *)beta;
  float *dd = (float *)D;
  const float *c = (const float *)C;
  if (bt != 0.0f && c != dd) { // D = alpha op(A) op(B) + beta C: C's values into D first
    size_t span = ((size_t)(n - 1) * Cd->ld + m) * 4; // C's and D's (the same layout)
    if (!emu_is_device_range(c, span) || !emu_is_device_range(dd, span))
      die("cublasLtMatmul: C or D passes its device allocation");
    if ((size_t)std::abs((const char *)c - (const char *)dd) < span)
      die("cublasLtMatmul: C and D overlap without being the same matrix");
    for (int j = 0; j < n; j++)
      for (int i = 0; i < m; i++)
        dd[(size_t)j * Dd->ld + i] = c[(size_t)j * Cd->ld + i];
  }
  cublasStatus_t r = gemm("cublasLtMatmul", d->ta, d->tb, m, n, k, a, A, Ad->t, (int)Ad->ld, 0, B, Bd->t,
                          (int)Bd->ld, 0, bt, dd, (int)Dd->ld, 0, 1, d->ct);
  if (r != CUBLAS_STATUS_SUCCESS || d->epi == CUBLASLT_EPILOGUE_DEFAULT) return r;
  if (d->epi != CUBLASLT_EPILOGUE_BIAS) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (!emu_is_device_range(d->bias, (size_t)m * 4)) die("cublasLtMatmul: the bias passes its device allocation");
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++)
      dd[(size_t)j * Dd->ld + i] += d->bias[i];
  return CUBLAS_STATUS_SUCCESS;
}

