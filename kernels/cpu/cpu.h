/* kernels/cpu/cpu.h: the CPU backend's functions shared between its files (not public: layers
 * reach them through kernels_cpu_ops()). */
#ifndef BRIGADE_KERNELS_CPU_CPU_H
#define BRIGADE_KERNELS_CPU_CPU_H

#include <stddef.h>

/* blas_cpu.c */
void kernels_cpu_select_core(void); /* once per process; see kernels_cpu_init() in ops.h */
void kernels_cpu_gemm(float *c, const float *a, const float *b, int M, int N, int K, int transa,
                      int transb, float alpha, float beta);
void kernels_cpu_gemm_ld(float *c, const float *a, const float *b, int M, int N, int K, int transa, int transb,
                         float alpha, float beta, int lda, int ldb, int ldc);
void kernels_cpu_gemm_batched(float *c, const float *a, const float *b, int batch, size_t stride_c,
                              size_t stride_a, size_t stride_b, int M, int N, int K, int transa,
                              int transb, float alpha, float beta);

/* bgemm.c: the bf16 GEMM (A and B rounded to bf16, fp32 sums), single-threaded, arguments as
 * kernels_cpu_gemm_ld's; only where kernels_cpu_bgemm_supported() (AVX512-BF16) */
int kernels_cpu_bgemm_supported(void);
/* AMX's tiles (Intel Sapphire Rapids and later) where the CPU has AMX-BF16 and the kernel grants
 * the process its tile state; kernels_cpu_bgemm takes them unless BRIGADE_CPU_BGEMM=avx512 or
 * kernels_cpu_bgemm_use_amx(0) (tests) */
int kernels_cpu_bgemm_amx_supported(void);
void kernels_cpu_bgemm_use_amx(int on);
int kernels_cpu_bgemm_uses_amx(void);
void kernels_cpu_bgemm(float *c, const float *a, const float *b, int M, int N, int K, int transa, int transb,
                       float alpha, float beta, int lda, int ldb, int ldc);

/* ops_cpu.c: out[i] = exp(x[i] - shift) by the CPU table's vectorised exp (about 1 ulp; the
 * same bits for a value wherever it sits); out may be x */
void kernels_cpu_exp_shifted(float *out, const float *x, float shift, size_t n);

/* The vector loops (vec_body.h), one table per instruction set; every table gives the same bits.
 * kernels_cpu_vec_get() is the one in use: AVX2's where the CPU has it, else SSE's;
 * BRIGADE_CPU_VEC=sse in the environment keeps SSE's, BRIGADE_CPU_VEC=avx512 takes AVX-512's
 * where the CPU has it (not the default: see select_vec_once in ops_cpu.c); chosen once. */
typedef struct {
  const char *name; /* "sse", "avx2", "avx512" */
  int width;        /* floats per vector */
  void (*exp_shifted)(float *out, const float *x, float shift, size_t n);
  /* out = softmax of x's n > 0 values (out may be x); returns sum exp(x - max) (in double, 8
   * partial sums i % 8 added in order) and the max in *max_out */
  double (*softmax)(float *out, const float *x, size_t n, float *max_out);
  void (*gelu_forward)(float *out, const float *in, size_t n);
  void (*gelu_backward)(float *din, const float *in, const float *dout, size_t n);
  void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *in, const float *w, const float *b,
                            int N, int C, float eps);
  void (*layernorm_backward_input)(float *din, const float *dout, const float *in, const float *w, const float *mean,
                                   const float *rstd, int N, int C);
  void (*layernorm_backward_weight)(float *dw, float *db, const float *dout, const float *in, const float *mean,
                                    const float *rstd, int N, int C);
  /* c1, c2: the bias corrections 1 - beta^t */
  void (*adamw)(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1, float beta2, float eps,
                float weight_decay, float c1, float c2, float grad_scale);
  void (*adamw_to)(float *po, float *mo, float *vo, const float *p, const float *g, const float *m, const float *v,
                   size_t n, float lr, float beta1, float beta2, float eps, float weight_decay, float c1, float c2,
                   float grad_scale);
  void (*round_bf16)(float *out, const float *in, size_t n); /* kernels_f32_to_bf16's rounding; out may be in */
} kernels_cpu_vec;
extern const kernels_cpu_vec kernels_cpu_vec_sse, kernels_cpu_vec_avx2, kernels_cpu_vec_avx512;
const kernels_cpu_vec *kernels_cpu_vec_get(void);

/* pool.c: the workers the non-GEMM ops share (see the file). fn(ctx, lo, hi) runs on parts of
 * [0, n) of at least `grain` items (fewer parts when n is small; none when n is 0), each part
 * starting on a multiple of `align`; returns when all are done. */
typedef void (*kernels_cpu_task)(void *ctx, size_t lo, size_t hi);
void kernels_cpu_pool_init(int threads); /* kernels_cpu_init: threads - 1 workers, once */
int kernels_cpu_pool_threads(void);
void kernels_cpu_pool_use(int threads); /* at most that many of the started threads (tests) */
void kernels_cpu_parallel(size_t n, size_t grain, size_t align, kernels_cpu_task fn, void *ctx);

/* attention_cpu.c */
void kernels_cpu_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                                   int NH);
void kernels_cpu_attention_backward(float *dqkv, float *scratch, const float *dout,
                                    const float *qkv, const float *att, int B, int T, int C,
                                    int NH);

#endif
