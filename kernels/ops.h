/* kernels/ops.h: the op table. Every layer calls math through a kernels_ops table, never a
 * backend directly: the CPU table lives in kernels/cpu/, a CUDA one plugs into the same struct
 * (ggml style: the backend is a table, not #ifdefs in the layers).
 *
 * Buffers are fp32, row-major, and belong to the table's backend (host memory for "cpu",
 * device memory from the table's alloc for "cuda" and "fakedev"; the scalar results of sumsq
 * and nonfinite come back to the host).
 * Arguments follow llm.c: outputs, caches, inputs, weights, dimensions. In the comments,
 * "+=" means the op accumulates into that output (every weight gradient does, so micro-batches
 * add up); "=" means it overwrites every element of it. Outputs must not alias inputs unless a
 * comment says so. Every op is deterministic: the same inputs give the same bits, whatever ran
 * before (the CPU table: for a fixed OpenBLAS thread count; the CUDA table: on the same GPU
 * model and CUDA version). The CPU table's ops allocate nothing; the one op that needs temporary
 * memory (attention_backward) takes it as an argument. The CUDA table keeps one grow-only
 * device workspace for its reductions (it only grows when an op needs more than ever before).
 * A table is used by one thread at a time. */
#ifndef BRIGADE_KERNELS_OPS_H
#define BRIGADE_KERNELS_OPS_H

#include <stddef.h>
#include <stdint.h>

typedef struct kernels_ops {
  const char *name; /* "cpu", "cuda", "fakedev" */
  /* 0: the table's buffers are ordinary host memory, which host code may read and write
   * directly ("cpu"). 1: they are device memory that host code must never dereference; it
   * reaches them only through to_device / to_host ("cuda"; "fakedev", the test backend that
   * makes any host dereference fault). */
  int device_memory;
  /* Device collectives (kernels/coll.h) for callers that sum or gather this table's memory
   * across processes without host copies: NCCL for "cuda"; NULL for "cpu" and "fakedev". */
  const struct kernels_coll *coll;

  /* ---- memory: buffers the other ops take belong to the backend (device memory for "cuda");
   * these move data between them and host memory. Ops run in issue order on one queue per
   * process (the CUDA table's stream), so a buffer written by one op can be read by the next
   * without a sync; only the host has to wait, and to_host / sumsq / nonfinite do that. ---- */
  /* A zeroed buffer of `bytes` (all-zero bits), aligned for any element type; NULL when out of
   * memory (the caller reports it). alloc(0) gives a pointer that free() accepts, or NULL. */
  void *(*alloc)(size_t bytes);
  void (*free)(void *p); /* a buffer from alloc; NULL is a no-op */
  /* dst (backend) = src (host), bytes bytes; src may be reused as soon as it returns */
  void (*to_device)(void *dst, const void *src_host, size_t bytes);
  /* dst (host) = src (backend), bytes bytes, waiting for every op issued before it */
  void (*to_host)(void *dst_host, const void *src, size_t bytes);
  void (*sync)(void); /* waits until every op issued so far has finished (CPU: nothing to do) */
  /* Activation offload's copies. On a device table they run on two copy streams beside the ops'
   * queue (device to host, host to device) and never block the host; `ticket` (>= 0, the
   * caller's to keep apart) names a copy; several copies with one ticket are waited for as one
   * (the last). copy_out: dst_host = src, after every op issued so far. copy_in: dst = src_host,
   * after every op issued so far and, when `after` >= 0, after the copies of ticket `after`.
   * copy_wait: ops issued from now on wait for the copies of `ticket` (the host does not).
   * copy_sync: the host waits for the copies of `ticket` (a traced step times them so).
   * host_alloc / host_free: host memory for them (page-locked on a GPU, so that copies overlap
   * compute; zeroed; NULL when out of memory). Host tables copy at once; copy_wait and copy_sync
   * do nothing. */
  void (*copy_out)(void *dst_host, const void *src, size_t bytes, int ticket);
  void (*copy_in)(void *dst, const void *src_host, size_t bytes, int ticket, int after);
  void (*copy_wait)(int ticket);
  void (*copy_sync)(int ticket);
  void *(*host_alloc)(size_t bytes);
  void (*host_free)(void *p);
  /* A traced step's copy times, taken by events on the copy streams (NULL on host tables, whose
   * copies are done when issued and timed on the host), so that a traced step need not wait for
   * each copy and the copies overlap compute as in any other step. copy_clock(1): a traced step
   * begins (every op issued so far done when it returns), copy_clock(0): it has ended (no copy is
   * timed then); copy_group(g): the copies issued from now on are group g's (one OFFLOAD's or
   * RELOAD's); copy_span(g): seconds from copy_clock(1)'s return to the start of group g's first
   * copy and to the end of its last, once they are done (it waits for them); nonzero when group g
   * had no copy since copy_clock(1). */
  void (*copy_clock)(int on);
  void (*copy_group)(int g);
  int (*copy_span)(int g, double *start, double *end);
  /* Where a device table feeds its copies to the copy streams a few pieces at a time (the CUDA
   * table with BRIGADE_COPY_PIECE_MB set), so that a transfer's own copy in the same direction
   * need not wait behind a whole one: issues the next pieces of what is queued, never waiting.
   * Callers call it while the host waits (for MPI, say) and between instructions; correctness
   * does not depend on it (a copy's ticket, when waited for, first issues what is queued up to
   * it). NULL on tables that issue each copy whole. */
  void (*copy_pump)(void);

  /* ---- matrix products ---- */
  /* C[M,N] = alpha * op(A) @ op(B) + beta * C. op(A) is [M,K]: A is stored [M,K], or [K,M]
   * when transa. op(B) is [K,N]: B is stored [K,N], or [N,K] when transb. beta = 1 accumulates
   * (weight gradients); with beta = 0, C is only written, never read. */
  void (*gemm)(float *c, const float *a, const float *b, int M, int N, int K, int transa,
               int transb, float alpha, float beta);
  /* gemm with each operand's leading dimension given (its stored row length; lda >= K, or M
   * when transa; ldb >= N, or K when transb; ldc >= N). Columns past an operand's stored width
   * are padding, which the op may use to run a product padded to friendlier sizes: the padding
   * of A and B must hold zeros, and C's padding may be overwritten with the padded product's
   * values (zeros again where A's and B's padding is zero). The LM head and the loss keep their
   * logits in such rows (a multiple of 64 wide, layers/basic.c). */
  void (*gemm_ld)(float *c, const float *a, const float *b, int M, int N, int K, int transa, int transb, float alpha,
                  float beta, int lda, int ldb, int ldc);
  /* Mixed precision on 16-bit units: with kind = 1 (bf16) or 2 (fp16), gemm and gemm_batched
   * may round A and B to that type and multiply them with fp32 accumulation (the CUDA table:
   * cublasGemmEx on tensor cores); C stays fp32. Results then differ from the fp32 product by
   * A's and B's rounding. 0 (fp32) by default. The CPU tables: bf16 GEMMs where the CPU has
   * AVX512-BF16 (kernels/cpu/bgemm.c; gemm, gemm_ld, gemm_batched and linear_forward), fp32
   * elsewhere and for fp16 (kernels_cpu_matmul_half says which); the rest of their mixed
   * precision is emulated by rounding values as they are stored. */
  void (*matmul_half)(int kind);
  /* The same product for `batch` independent matrices: the i-th uses c + i*stride_c,
   * a + i*stride_a, b + i*stride_b (strides in floats; 0 shares one operand across the batch). */
  void (*gemm_batched)(float *c, const float *a, const float *b, int batch, size_t stride_c,
                       size_t stride_a, size_t stride_b, int M, int N, int K, int transa,
                       int transb, float alpha, float beta);
  /* A linear layer's forward: out[N,OC] = in[N,C] @ w[OC,C]^T + bias[OC] + res[N,OC]; bias
   * NULL: none; res NULL: none (a residual added in the same op; it must not overlap out). The
   * same as gemm, bias_add and axpy one after another (the CPU tables do exactly that); the CUDA
   * table does it in one cuBLASLt product under mixed precision (the sums then in cuBLAS's
   * order: the last bits may differ). */
  void (*linear_forward)(float *out, const float *in, const float *w, const float *bias, const float *res, int N,
                         int C, int OC);
  void (*bias_add)(float *out, const float *bias, int N, int C);    /* out[n,c] += bias[c] */
  void (*bias_grad)(float *dbias, const float *dout, int N, int C); /* dbias[c] += sum_n dout */

  /* ---- element-wise activations: din may alias dout, out may alias in ---- */
  void (*gelu_forward)(float *out, const float *in, size_t n); /* = GPT-2's tanh approximation */
  void (*gelu_backward)(float *din, const float *in, const float *dout, size_t n); /* = */
  void (*relu_forward)(float *out, const float *in, size_t n);                     /* = */
  /* din = dout where in > 0, else 0 (the subgradient at 0 is 0) */
  void (*relu_backward)(float *din, const float *in, const float *dout, size_t n);

  /* ---- layernorm over the last dimension of in[N,C] ---- */
  /* out[N,C] =, mean[N] = and rstd[N] = 1/sqrt(var + eps) (biased variance) are the caches */
  void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *in, const float *w,
                            const float *b, int N, int C, float eps);
  /* Backward split in two, for zero-bubble schedules that run them at different times.
   * din[N,C] = d(loss)/d(in) given dout (overwrites; callers add residual paths with axpy). */
  void (*layernorm_backward_input)(float *din, const float *dout, const float *in, const float *w,
                                   const float *mean, const float *rstd, int N, int C);
  /* dw[C] += sum_n dout * xhat, db[C] += sum_n dout */
  void (*layernorm_backward_weight)(float *dw, float *db, const float *dout, const float *in,
                                    const float *mean, const float *rstd, int N, int C);

  /* out[N,V] = softmax of each row of in (max-subtracted, so large logits do not overflow) */
  void (*softmax_forward)(float *out, const float *in, int N, int V);

  /* ---- causal multi-head self-attention core (no weights: Q/K/V/proj are linear layers) ----
   * qkv[B,T,3C] holds q, k, v side by side in each row; head h uses columns h*hs..(h+1)*hs-1
   * of each, hs = C/NH (C must be a multiple of NH). out[B,T,C] =; att[B,NH,T,T] = the softmax
   * probabilities, the cache backward needs (entries above the diagonal are written as 0).
   * Row t of att reads scores of positions <= t only, on every table. For finite inputs the
   * same holds for out and dqkv; with a NaN or Inf in a later token, the CPU table still keeps
   * earlier rows clean, while the CUDA table (GEMMs over the whole T x T square) lets it spread
   * through the masked zeros (0 * NaN). */
  void (*attention_forward)(float *out, float *att, const float *qkv, int B, int T, int C, int NH);
  /* dqkv[B,T,3C] = from dout[B,T,C]; scratch: kernels_attention_scratch_floats(T) floats,
   * contents not kept (the CUDA table ignores it and uses its own workspace, B*NH*T*T + 7*B*T*C
   * floats) */
  void (*attention_backward)(float *dqkv, float *scratch, const float *dout, const float *qkv,
                             const float *att, int B, int T, int C, int NH);
  /* Floats att must hold for attention_forward / attention_backward of this shape in the table's
   * current mode; NULL: B*NH*T*T (the probabilities). The CUDA table's fused path (flash) keeps
   * only its own cache, kernels_fused_attention_floats; once it has answered that, a call of a
   * shape the fused path takes that would now take the other one (the mode changed after the
   * buffers were sized) stops with a message rather than overrun att. */
  size_t (*attention_cache_floats)(int B, int T, int C, int NH);

  /* ---- token + position embedding: tokens must be in [0, V), checked by the caller ---- */
  /* out[b,t,:] = wte[tok[b,t],:] + wpe[t,:] */
  void (*embedding_forward)(float *out, const int32_t *tok, const float *wte, const float *wpe,
                            int B, int T, int C);
  /* dwte[tok,:] += dout, dwpe[t,:] += sum over b; rows in (b, t) order, so repeated tokens
   * always add up in the same order */
  void (*embedding_backward)(float *dwte, float *dwpe, const float *dout, const int32_t *tok, int B,
                             int T, int C);

  /* ---- fused softmax + cross-entropy; targets must be in [0, V): the caller checks them
   * (a data loader rejects bad ones), the op reads logits[n, targets[n]] unchecked ---- */
  /* Rows of ld >= V floats, of which the first V are the classes (the rest padding, see
   * gemm_ld). losses[N] = -log softmax(logits[n])[targets[n]]; probs[N,ld] = the softmax, the
   * cache, with zeros in the padding (probs may alias logits: the loss layer keeps its cache over
   * its input). round 1 / 2: each logit is taken rounded to bf16 / fp16 (kernels_round), as if
   * it had been stored rounded (mixed precision's rounding on store, done here as read: one pass
   * over N x V saved); 0: as is */
  void (*xent_forward)(float *losses, float *probs, const float *logits, const int32_t *targets,
                       int N, int V, int ld, int round);
  /* dlogits[N,ld] = (probs - onehot(targets)) * scale, e.g. scale = 1/N for a mean loss, zeros
   * in the padding (overwrites; dlogits may alias probs); round 1 / 2: each result rounded to
   * bf16 / fp16 as it is stored */
  void (*xent_backward)(float *dlogits, const float *probs, const int32_t *targets, float scale,
                        int N, int V, int ld, int round);

  /* ---- optimizers on a flat range of n parameters; g is multiplied by grad_scale first
   * (clipping, loss-scale removal), so the caller never rewrites the gradients ---- */
  /* AdamW (Loshchilov & Hutter; PyTorch's AdamW): m, v updated in place; t is the 1-based step
   * used for bias correction; weight decay is decoupled: p -= lr * weight_decay * p */
  void (*adamw)(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                float beta2, float eps, float weight_decay, int t, float grad_scale);
  /* The same update out of place: p, m, v are read, the new values written to p_out, m_out,
   * v_out (seven distinct buffers); the same bits as adamw. Post-validation keeps the old state
   * this way instead of copying it first. */
  void (*adamw_to)(float *p_out, float *m_out, float *v_out, const float *p, const float *g, const float *m,
                   const float *v, size_t n, float lr, float beta1, float beta2, float eps, float weight_decay, int t,
                   float grad_scale);
  /* SGD, PyTorch's form: g' = g*grad_scale + weight_decay*p; with mom (may be NULL when
   * momentum is 0) mom = momentum*mom + g', and the step uses mom; p -= lr * step */
  void (*sgd)(float *p, const float *g, float *mom, size_t n, float lr, float momentum,
              float weight_decay, float grad_scale);

  /* ---- vector utilities ---- */
  void (*axpy)(float *y, float a, const float *x, size_t n); /* y += a * x */
  void (*scale)(float *x, float a, size_t n);                /* x *= a */
  void (*fill)(float *x, float v, size_t n);                 /* x = v */
  void (*zero)(float *x, size_t n);                          /* x = +0.0 */
  void (*copy)(float *dst, const float *src, size_t n);      /* dst = src; may overlap */
  double (*sumsq)(const float *x, size_t n);     /* sum of x^2, in double: in index order within blocks of
                                                  * 65536, then the blocks' sums in order */
  size_t (*nonfinite)(const float *x, size_t n); /* how many elements are NaN or +-Inf */

  /* ---- low precision: round to nearest, ties to even; NaN stays a (quiet) NaN ---- */
  void (*cast_f32_to_bf16)(uint16_t *out, const float *in, size_t n);
  void (*cast_bf16_to_f32)(float *out, const uint16_t *in, size_t n); /* exact */
  /* beyond fp16's range (|x| >= 65520 after rounding) gives +-Inf, as IEEE conversion does */
  void (*cast_f32_to_f16)(uint16_t *out, const float *in, size_t n);
  void (*cast_f16_to_f32)(float *out, const uint16_t *in, size_t n); /* exact */
  /* x = the value x takes in bf16 / fp16 (range included): emulates low precision on fp32 */
  void (*round_bf16)(float *x, size_t n);
  void (*round_fp16)(float *x, size_t n);
} kernels_ops;

/* Sets up the CPU backend. Call it first thing in main, before any thread starts and before
 * anything calls BLAS. OpenBLAS picks its kernels when the library is loaded, before main; if
 * that pick lacks AVX-512 on a CPU that has it (Haswell kernels: 107 GFLOP/s on one core here,
 * against 202 with SkylakeX's) and OPENBLAS_CORETYPE is not set, it sets
 * OPENBLAS_CORETYPE=SkylakeX (child processes inherit it) and makes OpenBLAS pick again. A
 * user's OPENBLAS_CORETYPE is always kept. threads > 0 sets OpenBLAS's thread count; <= 0
 * keeps its default. kernels_cpu_ops() makes the same kernel choice on its first call, for
 * programs that skip this. */
void kernels_cpu_init(int threads);
/* First thing in main (the CLI, benchmarks): the kernel choice of kernels_cpu_init(), and
 * OpenBLAS's worker threads stopped. A threaded OpenBLAS starts them when it is loaded, and they
 * spin about 0.1 s of a core at every start waiting for work that never comes: brigade runs its
 * GEMMs on its own pool over a single-threaded OpenBLAS (kernels_cpu_init), and processes that
 * compile or simulate schedules call no BLAS at all. OpenBLAS starts them again should a call
 * ever want more than one thread. */
void kernels_cpu_setup(void);
/* The OpenBLAS kernel set in use ("SkylakeX", "Haswell", ...), for logs and benchmarks. */
const char *kernels_cpu_blas_core(void);
/* The CPU table's vector loops (GELU, exp, softmax, LayerNorm, AdamW) in use: "avx2" where the
 * CPU has it, else "sse"; BRIGADE_CPU_VEC=sse forces the latter, =avx512 takes "avx512" where
 * the CPU has AVX-512F (all give the same bits). */
const char *kernels_cpu_vec_name(void);
/* The CPU tables' matmul_half: sets their GEMMs' precision for kind 0 / 1 / 2 and says what they
 * run ("bf16 GEMMs on AMX tiles (fp32 sums)", "... on AVX512-BF16 ...", or fp32 and why).
 * BRIGADE_CPU_BGEMM=0 in the environment keeps fp32 GEMMs under bf16, =avx512 AVX512-BF16's
 * GEMM where AMX runs (for comparisons). */
const char *kernels_cpu_matmul_half(int kind);
int kernels_cpu_gemm_bf16(void); /* 1 while the CPU tables' GEMMs run on bf16 operands */
const kernels_ops *kernels_cpu_ops(void);
/* "fakedev" (kernels/cpu/ops_fakedev.c): a test backend for code written for device memory, on
 * machines without a GPU. Its kernels are the CPU table's (the same bits), but its alloc returns
 * the real address with KERNELS_FAKEDEV_TAG set, a non-canonical x86-64 address: any host
 * dereference of a fakedev buffer faults at once. Each op checks that every pointer it is given
 * carries the tag (NULL passes) and aborts, naming the op and the argument, when a host pointer
 * reaches it; to_device / to_host check that exactly their device side carries it. */
#define KERNELS_FAKEDEV_TAG ((uintptr_t)1 << 62)
const kernels_ops *kernels_fakedev_ops(void);
/* Tests only: "fakedev" offers `coll` as its device collectives from now on (NULL: none, the
 * default), e.g. a fake over MPI (tests/common/fake_coll.h), so that a whole training run takes
 * the device path of ZeRO's collectives and the pipeline's transfers. */
void kernels_fakedev_set_coll(const struct kernels_coll *coll);

/* Whether the CUDA table's fused attention takes this shape (under bf16): heads of 64, T > 64. */
static inline int kernels_fused_attention_shape(int T, int C, int NH) {
  return NH > 0 && C % NH == 0 && C / NH == 64 && T > 64;
}
/* The CUDA table's fused attention cache for B x NH heads of size hs over T tokens: the row
 * log-sum-exps and the output (fp32), 32 floats of slack to a 128-byte boundary, then q, k, v in
 * bf16 with T rounded up to 64 (kernels/cuda/flash_mma.cu). */
static inline size_t kernels_fused_attention_floats(int B, int T, int NH, int hs) {
  size_t BH = (size_t)B * (size_t)NH, Tp = ((size_t)T + 63) / 64 * 64;
  return BH * (size_t)T * (1 + (size_t)hs) + 32 + 3 * BH * Tp * (size_t)hs / 2;
}
/* The floats a backend's table will ask for an attention cache (its attention_cache_floats),
 * known without the table, for planning on a machine without the backend: on "cuda" under bf16
 * mixed precision (precision 1) the fused path's for head size 64 and T > 64 unless
 * BRIGADE_CUDA_ATTENTION=gemm, else B*NH*T*T. A test holds the CUDA table to it. */
size_t kernels_attention_cache_floats(const char *backend, int precision, int B, int T, int C, int NH);

/* Floats of attention_backward's scratch: one head's T x T matrix of score gradients (CPU). */
static inline size_t kernels_attention_scratch_floats(int T) { return (size_t)T * (size_t)T; }

/* The table for a backend by name: "cpu", "cuda" or "fakedev". CORE_EINPUT for any other name;
 * CORE_ERUNTIME when this build has no CUDA backend, or it finds no usable GPU. */
int kernels_get_ops(const char *backend, const kernels_ops **out);

/* One value at a time, for checkpoints and tests (same rounding as the casts above). */
uint16_t kernels_f32_to_bf16(float x);
float kernels_bf16_to_f32(uint16_t h);
uint16_t kernels_f32_to_f16(float x);
float kernels_f16_to_f32(uint16_t h);
/* x rounded to bf16 (kind 1) or fp16 (kind 2) and back; any other kind: x */
float kernels_round(float x, int kind);

/* The process's place among the ranks of its node, as MPI found it (pipe/topo), given before
 * the first kernels_get_ops("cuda"): on a node with several GPUs the CUDA table takes GPU
 * local_rank mod count (BRIGADE_CUDA_DEVICE overrides; without either, the launcher's
 * OMPI_COMM_WORLD_LOCAL_RANK and the like). -1 (the default): not known. */
void kernels_set_local_rank(int local_rank);
int kernels_local_rank(void);
/* One line naming what `ops` computes on, for the start-up log: "GPU 1 of 8 (NVIDIA H100 ...,
 * PCI 0000:1b:00.0)" for "cuda", "CPU" for "cpu", the test double for "fakedev". */
void kernels_describe_device(const kernels_ops *ops, char *buf, size_t n);

#endif
