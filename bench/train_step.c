/* bench/train_step.c: one process, one chunk holding the whole GPT-2-124M-shaped model
 * (configs/gpt2-124m.cfg, B=4, T=64): forward + backward + AdamW per step on random tokens.
 * Prints tokens/s, model FLOP utilisation (6N + 6LCT FLOPs per token, llm.c's count, against a
 * peak), the share of step time spent in GEMMs (the op table's gemm and linear_forward, timed
 * through wrappers that wait for the device around each call on a GPU) and the table's sgemm GFLOP/s measured
 * in the same run on the model's largest matmuls, and the time of every op the model calls in
 * one step (each op waited for; on a GPU that step is an extra one, not in tokens/s).
 *   bench/train_step [CONFIG] [STEPS] [THREADS] [BACKEND] [B] [T] [PRECISION]
 * BACKEND "cuda" runs on the GPU (B and T override the config's micro-batch and sequence
 * length, to fill it); BRIGADE_PEAK_TFLOPS sets the peak the MFU is taken against (default:
 * 989.4, the H100 SXM's dense bf16; on the CPU, 0 leaves MFU out). PRECISION is what training
 * with bf16.enabled / fp16.enabled does: "bf16" (the default on "cuda": matmul_half(1) on the
 * operands' 16-bit copies, the CUDA table's default, activations rounded to bf16 as stored),
 * "fp16" (the same in fp16), "bf16fast" / "fp16fast" (BRIGADE_CUDA_HALF=fast: cuBLAS rounds
 * the fp32 operands itself) or "fp32" (the default elsewhere). On the CPU, "bf16" runs the
 * GEMMs on bf16 operands where the CPU has AVX512-BF16 (kernels/cpu/bgemm.c, on AMX's tiles where
 * the CPU has them; fp32 elsewhere) and
 * prints the fp32 GEMM rate on the same shapes beside the bf16 one. Under bf16 the CUDA table's attention is its fused kernels unless
 * BRIGADE_CUDA_ATTENTION=gemm in the environment selects the per-head GEMMs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/config.h"
#include "core/error.h"
#include "core/rng.h"
#include "kernels/ops.h"
#include "layers/layers.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

static kernels_ops timed;
static const kernels_ops *base;
static double gemm_s, gemm_flops;
static void (*real_gemm)(float *, const float *, const float *, int, int, int, int, int, float, float);

static int timing; /* the wrappers wait and time only in the step that measures the split */

/* The other ops the model calls, each wrapped like gemm: their times in that step, by op. */
enum { OP_MAX = 32 };
static const char *op_name[OP_MAX];
static double op_s[OP_MAX];
static int nops;
#define TIMED(name, params, args)                                                                  \
  static int name##_k;                                                                             \
  static void name##_w params {                                                                    \
    if (!timing) {                                                                                 \
      base->name args;                                                                             \
      return;                                                                                      \
    }                                                                                              \
    base->sync();                                                                                  \
    double t_ = now();                                                                             \
    base->name args;                                                                               \
    base->sync();                                                                                  \
    op_s[name##_k] += now() - t_;                                                                  \
  }
#define WRAP(name) (name##_k = nops, op_name[nops++] = #name, timed.name = name##_w)
TIMED(gemm_batched, (float *c, const float *a, const float *b, int n, size_t sc, size_t sa, size_t sb, int M, int N,
                     int K, int ta, int tb, float al, float be), (c, a, b, n, sc, sa, sb, M, N, K, ta, tb, al, be))
TIMED(bias_add, (float *o, const float *b, int N, int C), (o, b, N, C))
TIMED(bias_grad, (float *d, const float *o, int N, int C), (d, o, N, C))
TIMED(gelu_forward, (float *o, const float *i, size_t n), (o, i, n))
TIMED(gelu_backward, (float *d, const float *i, const float *o, size_t n), (d, i, o, n))
TIMED(layernorm_forward, (float *o, float *m, float *r, const float *i, const float *w, const float *b, int N, int C,
                          float e), (o, m, r, i, w, b, N, C, e))
TIMED(layernorm_backward_input, (float *d, const float *o, const float *i, const float *w, const float *m,
                                 const float *r, int N, int C), (d, o, i, w, m, r, N, C))
TIMED(layernorm_backward_weight, (float *dw, float *db, const float *o, const float *i, const float *m,
                                  const float *r, int N, int C), (dw, db, o, i, m, r, N, C))
TIMED(attention_forward, (float *o, float *a, const float *q, int B, int T, int C, int H), (o, a, q, B, T, C, H))
TIMED(attention_backward, (float *d, float *s, const float *o, const float *q, const float *a, int B, int T, int C,
                           int H), (d, s, o, q, a, B, T, C, H))
TIMED(embedding_forward, (float *o, const int32_t *t, const float *e, const float *p, int B, int T, int C),
      (o, t, e, p, B, T, C))
TIMED(embedding_backward, (float *de, float *dp, const float *o, const int32_t *t, int B, int T, int C),
      (de, dp, o, t, B, T, C))
TIMED(xent_forward, (float *l, float *p, const float *g, const int32_t *t, int N, int V, int ld, int r),
      (l, p, g, t, N, V, ld, r))
TIMED(xent_backward, (float *d, const float *p, const int32_t *t, float s, int N, int V, int ld, int r),
      (d, p, t, s, N, V, ld, r))
TIMED(adamw, (float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2, float e, float wd,
              int t, float gs), (p, g, m, v, n, lr, b1, b2, e, wd, t, gs))
TIMED(axpy, (float *y, float a, const float *x, size_t n), (y, a, x, n))
TIMED(copy, (float *d, const float *s, size_t n), (d, s, n))
TIMED(zero, (float *x, size_t n), (x, n))
TIMED(round_bf16, (float *x, size_t n), (x, n))
TIMED(round_fp16, (float *x, size_t n), (x, n))

static void wrap_ops(void) {
  WRAP(gemm_batched), WRAP(bias_add), WRAP(bias_grad), WRAP(gelu_forward), WRAP(gelu_backward);
  WRAP(layernorm_forward), WRAP(layernorm_backward_input), WRAP(layernorm_backward_weight);
  WRAP(attention_forward), WRAP(attention_backward), WRAP(embedding_forward), WRAP(embedding_backward);
  WRAP(xent_forward), WRAP(xent_backward), WRAP(adamw), WRAP(axpy), WRAP(copy), WRAP(zero);
  WRAP(round_bf16), WRAP(round_fp16);
}

/* The split step's ops by time, largest first (GEMMs as one line), with their share of it. */
static void print_ops(double step_s, double gemm) {
  int order[OP_MAX], n = 0;
  for (int i = 0; i < nops; i++)
    if (op_s[i] > 0) order[n++] = i;
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && op_s[order[j]] > op_s[order[j - 1]]; j--) {
      int t = order[j];
      order[j] = order[j - 1], order[j - 1] = t;
    }
  printf("ops of the split step (each waited for; %.1f ms in all):\n  %-26s %9.2f ms %5.1f%%\n", 1e3 * step_s, "gemm",
         1e3 * gemm, 100 * gemm / step_s);
  double sum = gemm;
  for (int i = 0; i < n; i++) {
    printf("  %-26s %9.2f ms %5.1f%%\n", op_name[order[i]], 1e3 * op_s[order[i]], 100 * op_s[order[i]] / step_s);
    sum += op_s[order[i]];
  }
  /* what the step spent outside its ops (copies, allocation, the layers' own loops, waits) */
  printf("  %-26s %9.2f ms %5.1f%% (the step measured, less the sum of its ops: %.2f ms)\n", "outside the ops",
         1e3 * (step_s - sum), 100 * (step_s - sum) / step_s, 1e3 * sum);
}
/* the split step's GEMMs by shape (kind: 'g' gemm, 'l' gemm_ld, 'f' a linear layer's forward,
 * its bias and residual included): calls and time of each, in the last step */
enum { SHAPE_MAX = 32 };
typedef struct {
  int M, N, K, ta, tb, kind, calls;
  double s;
} gemm_shape;
static gemm_shape shape_s[SHAPE_MAX];
static int nshapes;
static void shape_add(int kind, int M, int N, int K, int ta, int tb, double s) {
  int i = 0;
  while (i < nshapes && !(shape_s[i].M == M && shape_s[i].N == N && shape_s[i].K == K && shape_s[i].ta == ta &&
                          shape_s[i].tb == tb && shape_s[i].kind == kind))
    i++;
  if (i == SHAPE_MAX) return;
  if (i == nshapes) shape_s[nshapes++] = (gemm_shape){M, N, K, ta, tb, kind, 0, 0};
  shape_s[i].calls++, shape_s[i].s += s;
}

static void print_shapes(void) {
  printf("the split step's GEMMs by shape (M N K, transposes; g gemm, l gemm_ld, f a linear forward, its bias and "
         "residual included):\n");
  for (int i = 0; i < nshapes; i++) {
    const gemm_shape *g = &shape_s[i];
    printf("  %c %6d %6d %6d %c%c  %3d calls %9.2f ms  %6.1f GFLOP/s\n", g->kind, g->M, g->N, g->K, g->ta ? 'T' : 'N',
           g->tb ? 'T' : 'N', g->calls, 1e3 * g->s, 2.0 * g->M * g->N * g->K * g->calls / g->s / 1e9);
  }
}

static void gemm_timed(float *c, const float *a, const float *b, int M, int N, int K, int ta, int tb, float al, float be) {
  if (!timing) {
    real_gemm(c, a, b, M, N, K, ta, tb, al, be);
    return;
  }
  base->sync();
  double t = now();
  real_gemm(c, a, b, M, N, K, ta, tb, al, be);
  base->sync();
  t = now() - t;
  gemm_s += t;
  gemm_flops += 2.0 * M * N * K;
  shape_add('g', M, N, K, ta, tb, t);
}

/* the LM head's products, on logits rows padded to 64 (gemm_ld): GEMMs */
static void gemm_ld_timed(float *c, const float *a, const float *b, int M, int N, int K, int ta, int tb, float al,
                          float be, int lda, int ldb, int ldc) {
  if (!timing) {
    base->gemm_ld(c, a, b, M, N, K, ta, tb, al, be, lda, ldb, ldc);
    return;
  }
  base->sync();
  double t = now();
  base->gemm_ld(c, a, b, M, N, K, ta, tb, al, be, lda, ldb, ldc);
  base->sync();
  t = now() - t;
  gemm_s += t;
  gemm_flops += 2.0 * M * N * K;
  shape_add('l', M, N, K, ta, tb, t);
}

/* a linear layer's forward (the product with its bias and residual, one op on the GPU): a GEMM */
static void linear_timed(float *o, const float *i, const float *w, const float *b, const float *r, int N, int C, int OC) {
  if (!timing) {
    base->linear_forward(o, i, w, b, r, N, C, OC);
    return;
  }
  base->sync();
  double t = now();
  base->linear_forward(o, i, w, b, r, N, C, OC);
  base->sync();
  t = now() - t;
  gemm_s += t;
  gemm_flops += 2.0 * N * C * OC;
  shape_add('f', N, OC, C, 0, 1, t);
}

/* the median of the last sgemm_gflops's 5 calls: the rate a step's calls meet, more often than the best */
static double last_median;

static double sgemm_gflops(int M, int N, int K) {
  last_median = 0; /* also when the buffers cannot be had */
  float *ha = calloc((size_t)M * K, 4), *hb = calloc((size_t)K * N, 4);
  for (size_t i = 0; i < (size_t)M * K; i++) ha[i] = (float)(i % 7) * 0.1f;
  for (size_t i = 0; i < (size_t)K * N; i++) hb[i] = (float)(i % 5) * 0.1f;
  float *a = base->alloc((size_t)M * K * 4), *b = base->alloc((size_t)K * N * 4), *c = base->alloc((size_t)M * N * 4);
  if (!a || !b || !c) return 0;
  base->to_device(a, ha, (size_t)M * K * 4), base->to_device(b, hb, (size_t)K * N * 4);
  real_gemm(c, a, b, M, N, K, 0, 1, 1, 0); /* warm */
  double best = 0, rates[5]; /* the best of 5: the machine's rate, not a neighbour's spell */
  for (int r = 0; r < 5; r++) {
    base->sync();
    double t = now();
    real_gemm(c, a, b, M, N, K, 0, 1, 1, 0);
    base->sync();
    t = now() - t;
    rates[r] = 2.0 * M * N * K / t / 1e9;
    if (rates[r] > best) best = rates[r];
  }
  for (int i = 1; i < 5; i++) /* sorted, for the median */
    for (int j = i; j > 0 && rates[j] < rates[j - 1]; j--) {
      double x = rates[j];
      rates[j] = rates[j - 1], rates[j - 1] = x;
    }
  last_median = rates[2];
  free(ha), free(hb), base->free(a), base->free(b), base->free(c);
  return best;
}

/* An argument that must be a whole number in [lo, hi]; else the usage error, exit 2 (0 steps or a
 * batch of 0 printed NaN rates). */
static int arg_int(const char *name, const char *text, int lo, int hi) {
  char *end;
  long v = strtol(text, &end, 10);
  if (end == text || *end || v < lo || v > hi) {
    fprintf(stderr, "train_step: %s '%s' is not a whole number in [%d, %d]\n", name, text, lo, hi);
    exit(2);
  }
  return (int)v;
}

int main(int argc, char **argv) {
  kernels_cpu_setup();
  const char *path = argc > 1 ? argv[1] : "configs/gpt2-124m.cfg";
  int steps = argc > 2 ? arg_int("STEPS", argv[2], 1, 1000000) : 3, threads = argc > 3 ? arg_int("THREADS", argv[3], 1, 4096) : 1;
  const char *backend = argc > 4 ? argv[4] : "cpu";
  kernels_cpu_init(threads);
  core_config *c;
  layers_model m = {0};
  int64_t B = 4;
  char tset[64];
  snprintf(tset, sizeof tset, "model.seq_len=%s", argc > 6 ? argv[6] : "0");
  if (core_config_load(&c, path) || (argc > 6 && core_config_set(c, tset)) ||
      core_config_get_int(c, "train_micro_batch_size_per_gpu", 4, &B) || layers_model_build(&m, c, 256 /* byte-level data, as data/kjv.txt gives, when the config names no vocabulary */) ||
      kernels_get_ops(backend, &base)) {
    fprintf(stderr, "train_step: %s\n", core_error_msg());
    return 1;
  }
  if (argc > 5) B = arg_int("B", argv[5], 1, 1 << 20);
  const char *prec = argc > 7 ? argv[7] : strcmp(base->name, "cuda") == 0 ? "bf16" : "fp32";
  /* the precision code of pipe/train.c: 0 fp32, 1 bf16, 2 fp16 */
  int kind = !strncmp(prec, "bf16", 4) ? 1 : !strncmp(prec, "fp16", 4) ? 2 : 0;
  if (strcmp(prec, "fp32") && (!kind || (prec[4] && strcmp(prec + 4, "fast")))) {
    fprintf(stderr, "train_step: precision \"%s\": expected fp32, bf16, fp16, bf16fast or fp16fast\n", prec);
    return 2;
  }
  if (kind) setenv("BRIGADE_CUDA_HALF", prec[4] ? "fast" : "copy", 1); /* "bf16": the operand copies */
  base->matmul_half(kind); /* as pipe/train.c does for bf16.enabled / fp16.enabled */
  timed = *base;
  real_gemm = timed.gemm;
  timed.gemm = gemm_timed;
  timed.linear_forward = linear_timed;
  timed.gemm_ld = gemm_ld_timed;
  wrap_ops();
  layers_chunk ch;
  double t0 = now();
  if (layers_chunk_init(&ch, &m, 0, m.n, &timed, (int)B, m.T, 1)) {
    fprintf(stderr, "train_step: %s\n", core_error_msg());
    return 1;
  }
  ch.act_round = kind; /* activations rounded as they are stored, as training does */
  const char *att = getenv("BRIGADE_CUDA_ATTENTION");
  printf("model %s: %.1f M parameters held (%.1f M counting a tied head's wte twice), B=%d T=%d, backend %s, %s, attention %s, "
         "%d thread(s), OPENBLAS_CORETYPE=%s, CPU vector loops %s; init %.1f s\n", path, (double)ch.nparams / 1e6,
         layers_model_params(&m) / 1e6, (int)B,
         m.T, base->name, prec, att && *att ? att : "(default)", threads, getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "(default)", kernels_cpu_vec_name(),
         now() - t0);
  printf("memory: parameters, gradients and AdamW's moments %.3f GiB; activations (one slot) %.3f GiB\n",
         16.0 * (double)ch.nparams / (1 << 30), (double)layers_chunk_slot_bytes(&ch) / (1 << 30));
  float *mv = base->alloc(ch.nparams * 4), *vv = base->alloc(ch.nparams * 4);
  core_rng r = core_rng_keyed(1, 2, 3, 4);
  int N = (int)B * m.T, L = 0;
  double P = (double)layers_model_params(&m); /* the tied head's copy counts once, as in llm.c */
  for (int i = 0; i < m.n; i++) {
    L += strcmp(m.layers[i].type->name, "transformer_block") == 0;
    if (m.layers[i].tied_to >= 0) P -= (double)m.layers[i].nparams;
  }
  int32_t *tok = malloc(sizeof(int32_t) * (size_t)N), *tgt = malloc(sizeof(int32_t) * (size_t)N);
  /* Steps 1..STEPS give tokens/s. The split between GEMMs and the rest needs a wait around each
   * GEMM, which on a GPU would slow the step it measures: there it comes from one more step,
   * timed op by op; on the CPU (waits cost nothing) from the same steps. */
  int split_apart = base->device_memory;
  double total = 0, split_t = 0, split_gemm = 0, split_flops = 0, last_t = 0, last_gemm = 0, fastest = 0;
  for (int s = 0; s <= steps + split_apart; s++) { /* step 0 warms up and is not counted */
    for (int i = 0; i < N; i++) {
      tok[i] = (int32_t)core_rng_below(&r, (uint64_t)m.V);
      tgt[i] = (int32_t)core_rng_below(&r, (uint64_t)m.V);
    }
    layers_chunk_set_batch(&ch, 0, tok, tgt);
    timing = !split_apart || s > steps;
    gemm_s = gemm_flops = 0;
    for (int i = 0; i < nops; i++) op_s[i] = 0;
    nshapes = 0;
    base->sync();
    double t = now();
    layers_chunk_forward(&ch, 0);
    layers_chunk_backward_input(&ch, 0, 1.0f / N);
    layers_chunk_backward_weight(&ch, 0);
    layers_chunk_fold_tied(&ch, ch.grads); /* REDUCE_TIED_GRADS: the head's gradient into wte's (at 0) */
    timed.adamw(ch.params, ch.grads, mv, vv, ch.nparams, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, s + 1, 1.0f);
    timed.zero(ch.grads, ch.nparams);
    base->sync();
    t = now() - t;
    if (s == 0) continue;
    if (timing) split_t += t, split_gemm += gemm_s, split_flops += gemm_flops;
    if (s == steps + split_apart) last_t = t, last_gemm = gemm_s; /* op_s keeps this step's */
    if (s > steps) continue;
    total += t;
    if (fastest == 0 || t < fastest) fastest = t;
    if (split_apart)
      printf("  step %d: %.3f s, %.0f tokens/s\n", s, t, N / t);
    else
      printf("  step %d: %.3f s, %.0f tokens/s, GEMM %.1f%% of the step\n", s, t, N / t, 100 * gemm_s / t);
  }
  print_ops(last_t, last_gemm);
  print_shapes();
  double tps = N * steps / total, per_token = 6.0 * P + 6.0 * L * m.C * m.T;
  const char *pk = getenv("BRIGADE_PEAK_TFLOPS");
  double peak = pk ? atof(pk) : strcmp(base->name, "cuda") == 0 ? 989.4 : 0;
  printf("mean: %.3f s/step, %.0f tokens/s; GEMMs %.1f%% of step time at %.1f GFLOP/s; other kernels %.1f%%%s\n",
         total / steps, tps, 100 * split_gemm / split_t, split_flops / split_gemm / 1e9, 100 * (1 - split_gemm / split_t),
         split_apart ? " (split from one more step, waiting for the device around each GEMM)" : "");
  printf("model FLOPs: %.3g per token (6N + 6LCT, L=%d), %.2f TFLOP/s achieved", per_token, L, per_token * tps / 1e12);
  if (peak > 0) printf(", MFU %.1f%% of %.1f TFLOP/s", 100 * per_token * tps / (peak * 1e12), peak);
  printf("\n");
  double head_rate = sgemm_gflops(N, m.V, m.C), head_median = last_median;
  double mlp_rate = sgemm_gflops(N, 4 * m.C, m.C), mlp_median = last_median;
  printf("%s GEMM (%s) in this run, M=%d N=%d K=%d (the LM head): %.1f GFLOP/s; M=%d N=%d K=%d (MLP): %.1f GFLOP/s\n",
         base->name, prec, N, m.V, m.C, head_rate, N, 4 * m.C, m.C, mlp_rate);
  if (kind && !base->device_memory) { /* on the CPU also the fp32 rate, and which GEMM bf16 ran */
    base->matmul_half(0);
    double h32 = sgemm_gflops(N, m.V, m.C), m32 = sgemm_gflops(N, 4 * m.C, m.C);
    printf("cpu GEMM (fp32) in this run, the same shapes: %.1f and %.1f GFLOP/s; %s: %.2fx and %.2fx fp32's\n", h32,
           m32, kernels_cpu_matmul_half(kind), head_rate / h32, mlp_rate / m32);
  }
  /* the GEMM floor: the step's model FLOPs at the best of those rates */
  double rate = head_rate > mlp_rate ? head_rate : mlp_rate, floor_s = per_token * N / (rate * 1e9);
  printf("GEMM floor: %.3g GFLOP per step at %.1f GFLOP/s = %.3f s; the step is %.2fx the floor (%.0f%% of the GEMM "
         "rate over the whole step)\n", per_token * N / 1e9, rate, floor_s, total / steps / floor_s,
         100 * floor_s / (total / steps));
  /* the floor's rate is the best of 5 (the machine's, not a neighbour's spell): on a shared machine
   * the fastest step is the figure measured the same way */
  printf("fastest step: %.3f s, %.2fx the floor\n", fastest, fastest / floor_s);
  /* on a machine whose speed swings, the best of 5 short calls may catch a spell the step's
   * 1-2 s never sees: the same floor at the calls' median, for judging the ratio */
  double med = head_median > mlp_median ? head_median : mlp_median, med_s = per_token * N / (med * 1e9);
  printf("the floor at the median of the 5 calls: %.1f GFLOP/s = %.3f s; the mean step %.2fx it, the fastest %.2fx\n",
         med, med_s, total / steps / med_s, fastest / med_s);
  base->free(mv), base->free(vv), free(tok), free(tgt);
  layers_chunk_free(&ch);
  layers_model_free(&m);
  core_config_free(c);
  return 0;
}
