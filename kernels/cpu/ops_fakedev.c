/* kernels/cpu/ops_fakedev.c: the "fakedev" table, a test backend whose memory the host cannot
 * touch. It runs the CPU table's kernels (so its results are the CPU's, bit for bit), but its
 * alloc returns the calloc'd address with bit 62 set (KERNELS_FAKEDEV_TAG): on x86-64 that is a
 * non-canonical address, so any host code that dereferences a fakedev buffer faults at once,
 * instead of reading memory that on a GPU would be device memory. Code that is correct for
 * "cuda" (host touches backend buffers only through to_device / to_host) runs on it; code that
 * is not crashes on the first wrong access, on a machine without a GPU.
 *
 * Every op's wrapper checks that each pointer argument carries the tag and aborts with a message
 * naming the op and the argument when a host pointer reaches it; then it clears the tags and
 * calls the CPU op. NULL passes through untouched everywhere: alloc(0) may give NULL on any
 * backend, so NULL is a device pointer to nothing (sgd's mom, empty buffers); a NULL an op
 * does read faults inside the CPU op as it would on the CPU table. to_device / to_host check
 * that exactly the device side carries the tag. Pointer arithmetic on tagged pointers (a
 * buffer's rows, a sub-range of a flat parameter buffer) keeps the tag, as offsets into device
 * memory do on a GPU.
 *
 * Sanitizers: the tagged values are only passed around and compared, never dereferenced; the
 * CPU kernels see the real calloc'd addresses, so ASan still checks their bounds. LeakSanitizer
 * cannot see through the tag: a fakedev buffer still allocated at exit is reported as a leak
 * even while a (tagged) pointer to it is held, so free every buffer (the tests do). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops.h"

#define TAG KERNELS_FAKEDEV_TAG

/* the CPU table (kernels_cpu_ops() also makes its one-time OpenBLAS kernel choice) */
#define CPU (kernels_cpu_ops())

static _Noreturn void misuse(const char *op, const char *arg, const void *p, const char *what) {
  fprintf(stderr, "brigade: fakedev: %s: argument %s (%p) %s\n", op, arg, p, what);
  fflush(stderr);
  abort();
}

/* a device pointer argument: the real address, or an abort when it is a host pointer */
static void *dev_arg(const char *op, const char *arg, const void *p) {
  uintptr_t u = (uintptr_t)p;
  if (!p) return NULL;
  if (!(u & TAG))
    misuse(op, arg, p,
           "is a host pointer, not fakedev memory: host memory reached a device op (buffers an op "
           "takes must come from the table's alloc)");
  return (void *)(u & ~TAG);
}

/* D(x): x's real address, of x's type; the op is the enclosing function's name, which is the
 * table entry's name for every op below */
#define D(x) ((__typeof__(x))dev_arg(__func__, #x, (x)))

/* ---- memory ---- */

static void *mem_alloc(size_t bytes) {
  void *p = calloc(1, bytes);
  if (!p) return NULL;
  if ((uintptr_t)p & TAG) { /* never on x86-64 user space: bit 62 is not a user address */
    fprintf(stderr, "brigade: fakedev: alloc: calloc gave %p, which already has bit 62 set\n", p);
    abort();
  }
  return (void *)((uintptr_t)p | TAG);
}

static void mem_free(void *p) {
  if (!p) return;
  if (!((uintptr_t)p & TAG))
    misuse("free", "p", p, "is a host pointer, not a buffer from fakedev's alloc");
  free((void *)((uintptr_t)p & ~TAG));
}

static void mem_to_device(void *dst, const void *src_host, size_t bytes) {
  if (src_host && ((uintptr_t)src_host & TAG))
    misuse("to_device", "src_host", src_host, "is fakedev memory, not a host pointer");
  void *d = dev_arg("to_device", "dst", dst);
  if (bytes) memcpy(d, src_host, bytes);
}

static void mem_to_host(void *dst_host, const void *src, size_t bytes) {
  if (dst_host && ((uintptr_t)dst_host & TAG))
    misuse("to_host", "dst_host", dst_host, "is fakedev memory, not a host pointer");
  const void *s = dev_arg("to_host", "src", src);
  if (bytes) memcpy(dst_host, s, bytes);
}

static void mem_sync(void) {} /* every op has finished when it returns */

/* Offload's copies: at once, as to_host / to_device (the same pointer checks). */
static void copy_out(void *dst_host, const void *src, size_t bytes, int ticket) {
  (void)ticket;
  mem_to_host(dst_host, src, bytes);
}
static void copy_in(void *dst, const void *src_host, size_t bytes, int ticket, int after) {
  (void)ticket, (void)after;
  mem_to_device(dst, src_host, bytes);
}
static void copy_wait(int ticket) { (void)ticket; }
static void copy_sync(int ticket) { (void)ticket; }
static void *host_alloc(size_t bytes) { return calloc(1, bytes ? bytes : 1); }
static void host_free(void *p) {
  if (p && ((uintptr_t)p & TAG)) misuse("host_free", "p", p, "is fakedev memory, not host memory from host_alloc");
  free(p);
}

/* ---- the ops: check and untag every pointer, then the CPU op ---- */

static void gemm(float *c, const float *a, const float *b, int M, int N, int K, int transa,
                 int transb, float alpha, float beta) {
  CPU->gemm(D(c), D(a), D(b), M, N, K, transa, transb, alpha, beta);
}

static void matmul_half(int kind) { CPU->matmul_half(kind); }

static void linear_forward(float *out, const float *in, const float *w, const float *bias, const float *res, int N,
                           int C, int OC) {
  CPU->linear_forward(D(out), D(in), D(w), D(bias), D(res), N, C, OC);
}

static void gemm_ld(float *c, const float *a, const float *b, int M, int N, int K, int transa, int transb,
                    float alpha, float beta, int lda, int ldb, int ldc) {
  CPU->gemm_ld(D(c), D(a), D(b), M, N, K, transa, transb, alpha, beta, lda, ldb, ldc);
}

static void gemm_batched(float *c, const float *a, const float *b, int batch, size_t stride_c,
                         size_t stride_a, size_t stride_b, int M, int N, int K, int transa,
                         int transb, float alpha, float beta) {
  CPU->gemm_batched(D(c), D(a), D(b), batch, stride_c, stride_a, stride_b, M, N, K, transa, transb,
                    alpha, beta);
}

static void bias_add(float *out, const float *bias, int N, int C) {
  CPU->bias_add(D(out), D(bias), N, C);
}

static void bias_grad(float *dbias, const float *dout, int N, int C) {
  CPU->bias_grad(D(dbias), D(dout), N, C);
}

static void gelu_forward(float *out, const float *in, size_t n) {
  CPU->gelu_forward(D(out), D(in), n);
}

static void gelu_backward(float *din, const float *in, const float *dout, size_t n) {
  CPU->gelu_backward(D(din), D(in), D(dout), n);
}

static void relu_forward(float *out, const float *in, size_t n) {
  CPU->relu_forward(D(out), D(in), n);
}

static void relu_backward(float *din, const float *in, const float *dout, size_t n) {
  CPU->relu_backward(D(din), D(in), D(dout), n);
}

static void layernorm_forward(float *out, float *mean, float *rstd, const float *in, const float *w,
                              const float *b, int N, int C, float eps) {
  CPU->layernorm_forward(D(out), D(mean), D(rstd), D(in), D(w), D(b), N, C, eps);
}

static void layernorm_backward_input(float *din, const float *dout, const float *in, const float *w,
                                     const float *mean, const float *rstd, int N, int C) {
  CPU->layernorm_backward_input(D(din), D(dout), D(in), D(w), D(mean), D(rstd), N, C);
}

static void layernorm_backward_weight(float *dw, float *db, const float *dout, const float *in,
                                      const float *mean, const float *rstd, int N, int C) {
  CPU->layernorm_backward_weight(D(dw), D(db), D(dout), D(in), D(mean), D(rstd), N, C);
}

static void softmax_forward(float *out, const float *in, int N, int V) {
  CPU->softmax_forward(D(out), D(in), N, V);
}

static void attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                              int NH) {
  CPU->attention_forward(D(out), D(att), D(qkv), B, T, C, NH);
}

static void attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                               const float *att, int B, int T, int C, int NH) {
  CPU->attention_backward(D(dqkv), D(scratch), D(dout), D(qkv), D(att), B, T, C, NH);
}

static void embedding_forward(float *out, const int32_t *tok, const float *wte, const float *wpe,
                              int B, int T, int C) {
  CPU->embedding_forward(D(out), D(tok), D(wte), D(wpe), B, T, C);
}

static void embedding_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tok,
                               int B, int T, int C) {
  CPU->embedding_backward(D(dwte), D(dwpe), D(dout), D(tok), B, T, C);
}

static void xent_forward(float *losses, float *probs, const float *logits, const int32_t *targets,
                         int N, int V, int ld, int round) {
  CPU->xent_forward(D(losses), D(probs), D(logits), D(targets), N, V, ld, round);
}

static void xent_backward(float *dlogits, const float *probs, const int32_t *targets, float scale,
                          int N, int V, int ld, int round) {
  CPU->xent_backward(D(dlogits), D(probs), D(targets), scale, N, V, ld, round);
}

static void adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                  float beta2, float eps, float weight_decay, int t, float grad_scale) {
  CPU->adamw(D(p), D(g), D(m), D(v), n, lr, beta1, beta2, eps, weight_decay, t, grad_scale);
}

static void adamw_to(float *po, float *mo, float *vo, const float *p, const float *g, const float *m, const float *v,
                     size_t n, float lr, float beta1, float beta2, float eps, float weight_decay, int t, float grad_scale) {
  CPU->adamw_to(D(po), D(mo), D(vo), D(p), D(g), D(m), D(v), n, lr, beta1, beta2, eps, weight_decay, t, grad_scale);
}

static void sgd(float *p, const float *g, float *mom, size_t n, float lr, float momentum,
                float weight_decay, float grad_scale) {
  CPU->sgd(D(p), D(g), D(mom), n, lr, momentum, weight_decay, grad_scale);
}

static void axpy(float *y, float a, const float *x, size_t n) { CPU->axpy(D(y), a, D(x), n); }
static void scale(float *x, float a, size_t n) { CPU->scale(D(x), a, n); }
static void fill(float *x, float v, size_t n) { CPU->fill(D(x), v, n); }
static void zero(float *x, size_t n) { CPU->zero(D(x), n); }
static void copy(float *dst, const float *src, size_t n) { CPU->copy(D(dst), D(src), n); }
static double sumsq(const float *x, size_t n) { return CPU->sumsq(D(x), n); }
static size_t nonfinite(const float *x, size_t n) { return CPU->nonfinite(D(x), n); }

static void cast_f32_to_bf16(uint16_t *out, const float *in, size_t n) {
  CPU->cast_f32_to_bf16(D(out), D(in), n);
}
static void cast_bf16_to_f32(float *out, const uint16_t *in, size_t n) {
  CPU->cast_bf16_to_f32(D(out), D(in), n);
}
static void cast_f32_to_f16(uint16_t *out, const float *in, size_t n) {
  CPU->cast_f32_to_f16(D(out), D(in), n);
}
static void cast_f16_to_f32(float *out, const uint16_t *in, size_t n) {
  CPU->cast_f16_to_f32(D(out), D(in), n);
}
static void round_bf16(float *x, size_t n) { CPU->round_bf16(D(x), n); }
static void round_fp16(float *x, size_t n) { CPU->round_fp16(D(x), n); }

static kernels_ops fakedev_ops = { /* not const: tests may give it a coll table */
    .name = "fakedev",
    .device_memory = 1,
    .alloc = mem_alloc,
    .free = mem_free,
    .to_device = mem_to_device,
    .to_host = mem_to_host,
    .sync = mem_sync,
    .copy_out = copy_out,
    .copy_in = copy_in,
    .copy_wait = copy_wait,
    .copy_sync = copy_sync,
    .host_alloc = host_alloc,
    .host_free = host_free,
    .gemm = gemm,
    .gemm_batched = gemm_batched,
    .gemm_ld = gemm_ld,
    .linear_forward = linear_forward,
    .matmul_half = matmul_half,
    .bias_add = bias_add,
    .bias_grad = bias_grad,
    .gelu_forward = gelu_forward,
    .gelu_backward = gelu_backward,
    .relu_forward = relu_forward,
    .relu_backward = relu_backward,
    .layernorm_forward = layernorm_forward,
    .layernorm_backward_input = layernorm_backward_input,
    .layernorm_backward_weight = layernorm_backward_weight,
    .softmax_forward = softmax_forward,
    .attention_forward = attention_forward,
    .attention_backward = attention_backward,
    .embedding_forward = embedding_forward,
    .embedding_backward = embedding_backward,
    .xent_forward = xent_forward,
    .xent_backward = xent_backward,
    .adamw = adamw,
    .adamw_to = adamw_to,
    .sgd = sgd,
    .axpy = axpy,
    .scale = scale,
    .fill = fill,
    .zero = zero,
    .copy = copy,
    .sumsq = sumsq,
    .nonfinite = nonfinite,
    .cast_f32_to_bf16 = cast_f32_to_bf16,
    .cast_bf16_to_f32 = cast_bf16_to_f32,
    .cast_f32_to_f16 = cast_f32_to_f16,
    .cast_f16_to_f32 = cast_f16_to_f32,
    .round_bf16 = round_bf16,
    .round_fp16 = round_fp16,
};

void kernels_fakedev_set_coll(const struct kernels_coll *coll) { fakedev_ops.coll = coll; }

const kernels_ops *kernels_fakedev_ops(void) {
  kernels_cpu_ops(); /* the kernel choice, as the CPU table makes it */
  return &fakedev_ops;
}
