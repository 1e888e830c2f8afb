/* bench/train_step.c: one process, one chunk holding the whole GPT-2-124M-shaped model
 * (configs/gpt2-124m.cfg, B=4, T=64): forward + backward + AdamW per step on random tokens.
 * Prints tokens/s, model FLOP utilisation (6N + 6LCT FLOPs per token, llm.c's count, against a
 * peak), the share of step time spent in GEMMs (the op table's gemm, timed through a wrapper
 * that waits for the device around each call on a GPU) and the table's sgemm GFLOP/s measured
 * in the same run on the model's largest matmuls.
 *   bench/train_step [CONFIG] [STEPS] [THREADS] [BACKEND] [B] [T] [PRECISION]
 * BACKEND "cuda" runs on the GPU (B and T override the config's micro-batch and sequence
 * length, to fill it); BRIGADE_PEAK_TFLOPS sets the peak the MFU is taken against (default:
 * 989.4, the H100 SXM's dense bf16; on the CPU, 0 leaves MFU out). PRECISION is what training
 * with bf16.enabled / fp16.enabled does: "bf16" (the default on "cuda": matmul_half(1),
 * activations rounded to bf16 as stored), "fp16" (the same in fp16), "bf16fast" / "fp16fast"
 * (the same with BRIGADE_CUDA_HALF=fast: cuBLAS rounds the fp32 operands itself) or "fp32"
 * (the default elsewhere). BRIGADE_CUDA_ATTENTION=flash in the environment selects the CUDA
 * table's fused attention under bf16. */
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

static int timing; /* the GEMM wrapper waits and times only in the step that measures the split */
static void gemm_timed(float *c, const float *a, const float *b, int M, int N, int K, int ta, int tb, float al, float be) {
  if (!timing) {
    real_gemm(c, a, b, M, N, K, ta, tb, al, be);
    return;
  }
  base->sync();
  double t = now();
  real_gemm(c, a, b, M, N, K, ta, tb, al, be);
  base->sync();
  gemm_s += now() - t;
  gemm_flops += 2.0 * M * N * K;
}

static double sgemm_gflops(int M, int N, int K) {
  float *ha = calloc((size_t)M * K, 4), *hb = calloc((size_t)K * N, 4);
  for (size_t i = 0; i < (size_t)M * K; i++) ha[i] = (float)(i % 7) * 0.1f;
  for (size_t i = 0; i < (size_t)K * N; i++) hb[i] = (float)(i % 5) * 0.1f;
  float *a = base->alloc((size_t)M * K * 4), *b = base->alloc((size_t)K * N * 4), *c = base->alloc((size_t)M * N * 4);
  if (!a || !b || !c) return 0;
  base->to_device(a, ha, (size_t)M * K * 4), base->to_device(b, hb, (size_t)K * N * 4);
  real_gemm(c, a, b, M, N, K, 0, 1, 1, 0); /* warm */
  int reps = 5;
  base->sync();
  double t = now();
  for (int r = 0; r < reps; r++) real_gemm(c, a, b, M, N, K, 0, 1, 1, 0);
  base->sync();
  t = now() - t;
  free(ha), free(hb), base->free(a), base->free(b), base->free(c);
  return 2.0 * M * N * K * reps / t / 1e9;
}

int main(int argc, char **argv) {
  kernels_cpu_reexec(argv);
  const char *path = argc > 1 ? argv[1] : "configs/gpt2-124m.cfg";
  int steps = argc > 2 ? atoi(argv[2]) : 3, threads = argc > 3 ? atoi(argv[3]) : 1;
  const char *backend = argc > 4 ? argv[4] : "cpu";
  kernels_cpu_init(threads);
  core_config *c;
  layers_model m = {0};
  int64_t B = 4;
  char tset[64];
  snprintf(tset, sizeof tset, "model.seq_len=%s", argc > 6 ? argv[6] : "0");
  if (core_config_load(&c, path) || (argc > 6 && core_config_set(c, tset)) ||
      core_config_get_int(c, "train_micro_batch_size_per_gpu", 4, &B) || layers_model_build(&m, c, 0) ||
      kernels_get_ops(backend, &base)) {
    fprintf(stderr, "train_step: %s\n", core_error_msg());
    return 1;
  }
  if (argc > 5) B = atoi(argv[5]);
  const char *prec = argc > 7 ? argv[7] : strcmp(base->name, "cuda") == 0 ? "bf16" : "fp32";
  /* the precision code of pipe/train.c: 0 fp32, 1 bf16, 2 fp16 */
  int kind = !strncmp(prec, "bf16", 4) ? 1 : !strncmp(prec, "fp16", 4) ? 2 : 0;
  if (strcmp(prec, "fp32") && (!kind || (prec[4] && strcmp(prec + 4, "fast")))) {
    fprintf(stderr, "train_step: precision \"%s\": expected fp32, bf16, fp16, bf16fast or fp16fast\n", prec);
    return 2;
  }
  if (kind && prec[4]) setenv("BRIGADE_CUDA_HALF", "fast", 1);
  base->matmul_half(kind); /* as pipe/train.c does for bf16.enabled / fp16.enabled */
  timed = *base;
  real_gemm = timed.gemm;
  timed.gemm = gemm_timed;
  layers_chunk ch;
  double t0 = now();
  if (layers_chunk_init(&ch, &m, 0, m.n, &timed, (int)B, m.T, 1)) {
    fprintf(stderr, "train_step: %s\n", core_error_msg());
    return 1;
  }
  ch.act_round = kind; /* activations rounded as they are stored, as training does */
  const char *att = getenv("BRIGADE_CUDA_ATTENTION");
  printf("model %s: %.1f M parameters (the tied head is a second copy), B=%d T=%d, backend %s, %s, attention %s, "
         "%d OpenBLAS thread(s), OPENBLAS_CORETYPE=%s; init %.1f s\n", path, layers_model_params(&m) / 1e6, (int)B,
         m.T, base->name, prec, att && *att ? att : "(default)", threads, getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "(default)", now() - t0);
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
  double total = 0, split_t = 0, split_gemm = 0, split_flops = 0;
  for (int s = 0; s <= steps + split_apart; s++) { /* step 0 warms up and is not counted */
    for (int i = 0; i < N; i++) {
      tok[i] = (int32_t)core_rng_below(&r, (uint64_t)m.V);
      tgt[i] = (int32_t)core_rng_below(&r, (uint64_t)m.V);
    }
    layers_chunk_set_batch(&ch, 0, tok, tgt);
    timing = !split_apart || s > steps;
    gemm_s = gemm_flops = 0;
    base->sync();
    double t = now();
    layers_chunk_forward(&ch, 0);
    layers_chunk_backward_input(&ch, 0, 1.0f / N);
    layers_chunk_backward_weight(&ch, 0);
    timed.adamw(ch.params, ch.grads, mv, vv, ch.nparams, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, s + 1, 1.0f);
    timed.zero(ch.grads, ch.nparams);
    base->sync();
    t = now() - t;
    if (s == 0) continue;
    if (timing) split_t += t, split_gemm += gemm_s, split_flops += gemm_flops;
    if (s > steps) continue;
    total += t;
    if (split_apart)
      printf("  step %d: %.3f s, %.0f tokens/s\n", s, t, N / t);
    else
      printf("  step %d: %.3f s, %.0f tokens/s, GEMM %.1f%% of the step\n", s, t, N / t, 100 * gemm_s / t);
  }
  double tps = N * steps / total, per_token = 6.0 * P + 6.0 * L * m.C * m.T;
  const char *pk = getenv("BRIGADE_PEAK_TFLOPS");
  double peak = pk ? atof(pk) : strcmp(base->name, "cuda") == 0 ? 989.4 : 0;
  printf("mean: %.3f s/step, %.0f tokens/s; GEMMs %.1f%% of step time at %.1f GFLOP/s; other kernels %.1f%%%s\n",
         total / steps, tps, 100 * split_gemm / split_t, split_flops / split_gemm / 1e9, 100 * (1 - split_gemm / split_t),
         split_apart ? " (split from one more step, waiting for the device around each GEMM)" : "");
  printf("model FLOPs: %.3g per token (6N + 6LCT, L=%d), %.2f TFLOP/s achieved", per_token, L, per_token * tps / 1e12);
  if (peak > 0) printf(", MFU %.1f%% of %.1f TFLOP/s", 100 * per_token * tps / (peak * 1e12), peak);
  printf("\n");
  printf("%s GEMM (%s) in this run, M=%d N=%d K=%d (the LM head): %.1f GFLOP/s; M=%d N=%d K=%d (MLP): %.1f GFLOP/s\n",
         base->name, prec, N, m.V, m.C, sgemm_gflops(N, m.V, m.C), N, 4 * m.C, m.C, sgemm_gflops(N, 4 * m.C, m.C));
  base->free(mv), base->free(vv), free(tok), free(tgt);
  layers_chunk_free(&ch);
  layers_model_free(&m);
  core_config_free(c);
  return 0;
}
