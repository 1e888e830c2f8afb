/* kernels/ops.h: the op table. Every layer calls math through one of these tables, never a
 * backend directly; the CPU table lives in kernels/cpu/, a CUDA one plugs into the same struct.
 * Buffers are fp32, row-major. Arguments follow llm.c: outputs, caches, inputs, weights,
 * dimensions. "+=" in a comment means the op accumulates into its output (weight gradients);
 * everything else overwrites. Every op is deterministic: same inputs, same bits. */
#ifndef BRIGADE_KERNELS_OPS_H
#define BRIGADE_KERNELS_OPS_H

#include <stddef.h>
#include <stdint.h>

typedef struct kernels_ops {
  const char *name;
  /* C[M,N] = alpha * op(A) * op(B) + beta * C; op(A) is [M,K] (A stored [K,M] when transa),
   * op(B) is [K,N] (B stored [N,K] when transb). */
  void (*gemm)(float *c, const float *a, const float *b, int M, int N, int K, int transa,
               int transb, float alpha, float beta);
  void (*bias_add)(float *out, const float *bias, int N, int C);    /* out[n,c] += bias[c] */
  void (*bias_grad)(float *dbias, const float *dout, int N, int C); /* dbias[c] += sum_n dout */
  void (*gelu_forward)(float *out, const float *in, size_t n);      /* tanh approximation */
  void (*gelu_backward)(float *din, const float *in, const float *dout, size_t n);
  void (*relu_forward)(float *out, const float *in, size_t n);
  void (*relu_backward)(float *din, const float *in, const float *dout, size_t n);
  void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *in, const float *w,
                            const float *b, int N, int C, float eps);
  /* din = d(layernorm)/d(in) applied to dout (overwrites) */
  void (*layernorm_backward_input)(float *din, const float *dout, const float *in, const float *w,
                                   const float *mean, const float *rstd, int N, int C);
  /* dw += sum dout * xhat, db += sum dout */
  void (*layernorm_backward_weight)(float *dw, float *db, const float *dout, const float *in,
                                    const float *mean, const float *rstd, int N, int C);
  /* causal self-attention core: qkv [B,T,3C] -> out [B,T,C]; att [B,NH,T,T] softmax cache */
  void (*attention_forward)(float *out, float *att, const float *qkv, int B, int T, int C, int NH);
  /* dqkv (overwritten) from dout; scratch: 2*T floats */
  void (*attention_backward)(float *dqkv, float *scratch, const float *dout, const float *qkv,
                             const float *att, int B, int T, int C, int NH);
  /* out[b,t,:] = wte[tok[b,t],:] + wpe[t,:] */
  void (*embedding_forward)(float *out, const int32_t *tok, const float *wte, const float *wpe,
                            int B, int T, int C);
  /* dwte += scatter of dout by token, dwpe += sum over b (both in a fixed order) */
  void (*embedding_backward)(float *dwte, float *dwpe, const float *dout, const int32_t *tok, int B,
                             int T, int C);
  /* losses[n] = -log softmax(logits[n])[target[n]]; probs cache [N,V] */
  void (*xent_forward)(float *losses, float *probs, const float *logits, const int32_t *targets,
                       int N, int V);
  /* dlogits = (probs - onehot(target)) * scale (overwrites) */
  void (*xent_backward)(float *dlogits, const float *probs, const int32_t *targets, float scale,
                        int N, int V);
  /* AdamW on a flat range; t is the 1-based step for bias correction; g is multiplied by
   * grad_scale first (clipping, loss-scale removal) */
  void (*adamw)(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                float beta2, float eps, float weight_decay, int t, float grad_scale);
  /* SGD with momentum (mom may be NULL when momentum is 0) and decoupled weight decay */
  void (*sgd)(float *p, const float *g, float *mom, size_t n, float lr, float momentum,
              float weight_decay, float grad_scale);
  void (*axpy)(float *y, float a, const float *x, size_t n); /* y += a x */
  void (*scale)(float *x, float a, size_t n);
  void (*fill)(float *x, float v, size_t n);
  void (*copy)(float *dst, const float *src, size_t n);
  double (*sumsq)(const float *x, size_t n);        /* in double, in order */
  size_t (*nonfinite)(const float *x, size_t n);    /* count of NaN and Inf */
  void (*round_bf16)(float *x, size_t n);           /* round to bf16 precision in place */
  void (*round_fp16)(float *x, size_t n);           /* round to fp16 precision (and range) */
} kernels_ops;

/* Sets OpenBLAS's thread count (threads <= 0 leaves its default). */
void kernels_cpu_init(int threads);
/* First thing in main: on a CPU with AVX-512, re-executes the program with
 * OPENBLAS_CORETYPE=SkylakeX so OpenBLAS loads its AVX-512 kernels (it picks them at load). */
void kernels_cpu_reexec(char **argv);
const kernels_ops *kernels_cpu_ops(void);
/* "cpu" or "cuda"; CORE_EINPUT for other names, CORE_ERUNTIME when CUDA is not built or no GPU. */
int kernels_get_ops(const char *backend, const kernels_ops **out);

/* Conversions used by checkpoints and mixed precision (round to nearest even). */
uint16_t kernels_f32_to_bf16(float x);
float kernels_bf16_to_f32(uint16_t h);
uint16_t kernels_f32_to_f16(float x);
float kernels_f16_to_f32(uint16_t h);

#endif
