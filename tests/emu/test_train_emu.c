/* The CUDA backend trained end to end without a GPU. <build>/emu/brigade is the CLI linked with
 * kernels/cuda compiled for the CUDA emulator (tests/emu, see the Makefile), so backend = "cuda"
 * runs the backend's own code: its memory entries (the pinned upload ring, to_host), the
 * runner's device staging and deferred losses, every op. A GPT smaller than configs/tiny.cfg's
 * (the emulator runs every GPU thread as a fiber: a step of tiny.cfg takes 40 s there) trains
 * 3 steps and must follow the CPU's losses:
 *   - one process;
 *   - a 2-stage pipeline whose ranks share the (one) emulated GPU, so its transfers take the
 *     MPI path through host copies, and rank 0 says so;
 *   - 2 replicas under ZeRO-2 with overlap (collectives through host copies too);
 *   - with a GPU per rank (EMU_GPU_PER_RANK=1): the pipeline's transfers (zb-h2 on 4 stages,
 *     runs of them in groups) and ZeRO-2's and ZeRO-3's collectives over NCCL, as the emulator
 *     gives it (tests/emu/nccl_emu.cpp, over MPI);
 *   - bf16 mixed precision (16-bit GEMM operands, the emulated cuBLAS's GemmEx and cuBLASLt's
 *     fused linear layers), with a vocabulary of 300 (logits in padded rows);
 *   - bf16 with heads of 64 over 128 tokens, where the fused attention (flash_mma.cu) runs
 *     (its diagonal mask turned off fails it).
 * Tolerances, relative per step: fp32 1e-6 (the emulator's arithmetic is the host's, only the
 * order of GEMM and reduction sums differs; measured at most 2e-9 here); bf16 2e-4 (the CPU
 * emulates bf16 by rounding what it stores, the GPU also rounds the operands of attention's
 * products; measured at most 1.9e-5). A to_device that uploads half of a small buffer (the
 * token ids) fails the first one. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "schedule/schedule.h"
#include "tests/common/mpirun.h"
#include "viz/viz.h"

enum { STEPS = 3 };

/* The shape: 2 blocks of width 16 (2 heads), 16 tokens, 2 micro-batches of 2 sequences. */
#define SMALL                                                                                      \
  "train configs/tiny.cfg --set train.steps=3 --set train.eval_interval=0 --set checkpoint.interval=0 " \
  "--set model.seq_len=16 --set model.d_model=16 --set model.n_heads=2 "                           \
  "--set train_micro_batch_size_per_gpu=2 --set gradient_accumulation_steps=2"

/* Runs PROG (brigade or emu/brigade) on NP ranks (0: no mpirun) with the extra settings; the
 * losses of the log into out[STEPS]; the run's output in *text (caller frees). */
static void run(const char *prog, int np, const char *sets, double out[STEPS], char **text) {
  char log[] = "/tmp/brigade_emu_XXXXXX", cmd[4096];
  close(mkstemp(log));
  if (np > 0)
    snprintf(cmd, sizeof cmd, TEST_MPI_ENV " timeout 300 mpirun -np %d %s/%s " SMALL " %s --log-json %s", np,
             test_build_dir(), prog, sets, log);
  else
    snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 timeout 300 %s/%s " SMALL " %s --log-json %s",
             test_build_dir(), prog, sets, log);
  int rc = test_capture(cmd, text);
  cr_assert_eq(rc, 0, "%s exited %d:\n%s", cmd, rc, *text);
  FILE *f = fopen(log, "r");
  cr_assert(f, "no log from %s", cmd);
  char line[1024];
  int n = 0;
  while (n < STEPS && fgets(line, sizeof line, f)) {
    char *s = strstr(line, "\"loss\":");
    cr_assert(s, "no loss in %s", line);
    out[n++] = atof(s + 7);
  }
  fclose(f);
  unlink(log);
  cr_assert_eq(n, STEPS, "%s logged %d steps", cmd, n);
}

/* The emulated NCCL's counts over the run's communicators (EMU_NCCL_STATS=1, one line each). */
static void nccl_counts(const char *text, long *grouped, long *collectives) {
  *grouped = *collectives = 0;
  for (const char *l = strstr(text, "tests/emu (NCCL):"); l; l = strstr(l + 1, "tests/emu (NCCL):")) {
    long snd, rcv, g, c;
    const char *r = strstr(l, "rank ");
    r = r ? strstr(r + 5, ": ") : NULL;
    cr_assert(r && sscanf(r, ": %ld sends, %ld receives (%ld of them in groups), %ld collectives", &snd, &rcv, &g, &c) == 4,
              "an unreadable count line: %.200s", l);
    *grouped += g, *collectives += c;
  }
}

/* emu_only: options of the emulated run only (what the CPU backend refuses, as offload); with
 * text, the emulated run's output (caller frees) */
static void follows_the_cpu_run(int np, const char *sets, const char *emu_only, double rtol, const char *must_say,
                                char **out) {
  double cpu[STEPS], emu[STEPS];
  char *text;
  run("brigade", np, sets, cpu, &text);
  free(text);
  char emu_sets[1024];
  snprintf(emu_sets, sizeof emu_sets, "%s --set backend=cuda %s", sets, emu_only);
  run("emu/brigade", np, emu_sets, emu, &text);
  if (must_say) cr_expect(strstr(text, must_say), "the emulated run did not say \"%s\":\n%s", must_say, text);
  if (out) *out = text;
  else free(text);
  for (int i = 0; i < STEPS; i++) {
    double rel = fabs(emu[i] - cpu[i]) / fabs(cpu[i]);
    cr_log_info("np %d %s: step %d cpu %.9g emulated cuda %.9g (relative %.2g)", np, sets, i + 1, cpu[i], emu[i],
                rel);
    cr_expect(rel <= rtol, "np %d %s, step %d: cpu %.9g, emulated cuda %.9g (relative %.2g > %g)", np, sets, i + 1,
              cpu[i], emu[i], rel, rtol);
  }
}

static void follows_the_cpu_with(int np, const char *sets, const char *emu_only, double rtol, const char *must_say) {
  follows_the_cpu_run(np, sets, emu_only, rtol, must_say, NULL);
}

static void follows_the_cpu(int np, const char *sets, double rtol, const char *must_say) {
  follows_the_cpu_with(np, sets, "", rtol, must_say);
}

/* Each rank on an emulated GPU of its own (EMU_GPU_PER_RANK=1): the pipeline's transfers and
 * ZeRO's collectives take kernels/cuda/coll_cuda.cu's NCCL path, on tests/emu/nccl_emu.cpp
 * (over MPI), whose results stay NaN until their stream is waited for and whose inputs must not
 * change before then (checked by mutation: a wait_p2p that does not wait fails the first test,
 * a ZeRO-2 bucket wait that does not wait the second). The counts it prints show that transfers
 * went in groups (runs of consecutive transfers, p2p_group) and how many collectives ran. */
static void follows_the_cpu_on_nccl(int np, const char *sets, const char *must_say, long *grouped,
                                    long *collectives) {
  char *text;
  setenv("EMU_GPU_PER_RANK", "1", 1), setenv("EMU_NCCL_STATS", "1", 1);
  follows_the_cpu_run(np, sets, "", 1e-6, must_say, &text);
  unsetenv("EMU_GPU_PER_RANK"), unsetenv("EMU_NCCL_STATS");
  nccl_counts(text, grouped, collectives);
  cr_log_info("np %d %s: %ld transfers in groups, %ld collectives", np, sets, *grouped, *collectives);
  free(text);
}

Test(train_emu, one_process_follows_the_cpu, .timeout = 300) { follows_the_cpu(0, "", 1e-6, NULL); }

Test(train_emu, pipeline_sharing_the_gpu_follows_the_cpu, .timeout = 300) {
  follows_the_cpu(2, "--set pipeline.stages=2", 1e-6, "pipeline transfers: MPI through host copies");
}

Test(train_emu, zero2_replicas_follow_the_cpu, .timeout = 300) {
  follows_the_cpu(2,
                  "--set zero_optimization.stage=2 --set zero_optimization.overlap_comm=true "
                  "--set zero_optimization.reduce_bucket_size=500",
                  1e-6, "ZeRO collectives: MPI through host copies");
}

/* zb-h2 on 4 stages: its runs of transfers go as NCCL groups (the last stage's first backward
 * receives a gradient and sends an activation in one run, and so on); the tied embedding's
 * gradient exchange too */
Test(train_emu, pipeline_on_a_gpu_each_follows_the_cpu, .timeout = 600) {
  long grouped, coll;
  follows_the_cpu_on_nccl(4, "--set pipeline.stages=4 --set 'pipeline.schedule=\"zb-h2\"' --set gradient_accumulation_steps=4",
                          "pipeline transfers: nccl send/recv", &grouped, &coll);
  cr_expect(grouped > 0, "no transfer went in a group");
}

/* 2 stages x 2 replicas: ZeRO-2's bucketed reduce-scatters (asynchronous, on the communication
 * stream, overlapped) and ZeRO-3's gathers over NCCL, beside the pipeline's transfers */
Test(train_emu, zero_over_nccl_follows_the_cpu, .timeout = 600) {
  long grouped, coll;
  follows_the_cpu_on_nccl(4,
                          "--set pipeline.stages=2 --set 'pipeline.schedule=\"zb-h1\"' --set zero_optimization.stage=2 "
                          "--set zero_optimization.overlap_comm=true --set zero_optimization.reduce_bucket_size=500",
                          "ZeRO collectives: NCCL", &grouped, &coll);
  cr_expect(coll > 0, "no collective ran on NCCL");
  follows_the_cpu_on_nccl(4, "--set pipeline.stages=2 --set zero_optimization.stage=3", "ZeRO collectives: NCCL", &grouped,
                          &coll);
  cr_expect(coll > 0, "no collective ran on NCCL");
}

/* ZeRO-1 with 3 replicas of 2 stages, each rank on a GPU of its own: the optimizer's shards
 * all-gathered over NCCL and the tied embedding's copies on stages 0 and 1 stay together (a
 * suspicion of drift at 3 or more replicas, checked: 20 steps within 4.3e-9 of the CPU) */
Test(train_emu, zero1_three_replicas_over_nccl_follow_the_cpu, .timeout = 600) {
  long grouped, coll;
  follows_the_cpu_on_nccl(6, "--set pipeline.stages=2 --set zero_optimization.stage=1", "ZeRO collectives: NCCL", &grouped,
                          &coll);
  cr_expect(coll > 0, "no collective ran on NCCL");
}

/* a vocabulary of 300: the logits in rows of 320 (gemm_ld, the loss's padded rows) */
Test(train_emu, bf16_follows_the_cpu, .timeout = 300) {
  follows_the_cpu(0, "--set bf16.enabled=true --set model.vocab_size=300", 2e-4, NULL);
}

/* Heads of 64 over 128 tokens under bf16: the fused attention (kernels/cuda/flash_mma.cu) in
 * training, its cache in the layers' activation slots (measured: relative 6e-6 to 5e-5) */
Test(train_emu, fused_attention_follows_the_cpu, .timeout = 300) {
  follows_the_cpu(0, "--set bf16.enabled=true --set model.seq_len=128 --set model.d_model=128 --set model.n_heads=2 "
                  "--set gradient_accumulation_steps=1", 2e-4, NULL);
}

/* ZeRO-Offload on the emulated GPU: optimizer state and update on the host, ZeRO-3 replicas
 * sharing the GPU (gathers through host copies). */
Test(train_emu, offload_zero3_follows_the_cpu, .timeout = 300) {
  follows_the_cpu_with(2, "--set zero_optimization.stage=3", "--set zero_optimization.offload_optimizer.device=cpu", 1e-6,
                       "ZeRO collectives: MPI through host copies");
}

/* A traced step of an offloaded run (path: its trace): the copy instructions' times come from
 * events on the copy streams, read on the host's clock, and the step no longer waits for each
 * copy. The emulator runs a copy when it is issued, so each OFFLOAD starts once the compute op
 * of its pair before it has ended, and each RELOAD ends before the compute op of its pair after
 * it starts (a wrong clock shifts them off their instructions). */
static void copies_in_their_place(const char *path) {
  sched_timeline tl;
  cr_assert_eq(viz_read_trace(path, &tl), 0, "%s", core_error_msg());
  int n = 0;
  const double tol = 1e-6;
  for (int i = 0; i < tl.n; i++) {
    const sched_event *c = &tl.ev[i];
    if (c->op != SCHED_OFFLOAD && c->op != SCHED_RELOAD) continue;
    n++;
    cr_assert(c->end >= c->start && c->start >= 0, "rank %d %s mb %d: %g to %g", c->rank, sched_op_name((sched_op)c->op),
              c->mb, c->start, c->end);
    const sched_event *before = NULL, *after = NULL; /* the pair's compute ops either side of the copy */
    for (int j = 0; j < tl.n; j++) {
      const sched_event *o = &tl.ev[j];
      if (o->rank != c->rank || o->mb != c->mb || o->chunk != c->chunk || o->op < SCHED_FORWARD ||
          o->op > SCHED_BACKWARD_WEIGHT)
        continue;
      if (o->start <= c->start && (!before || o->start > before->start)) before = o;
      if (o->start >= c->start && (!after || o->start < after->start)) after = o;
    }
    if (c->op == SCHED_OFFLOAD)
      cr_assert(before && c->start >= before->end - tol, "rank %d OFFLOAD mb %d chunk %d at %.6f, its %s ended %.6f",
                c->rank, c->mb, c->chunk, c->start, before ? sched_op_name((sched_op)before->op) : "forward",
                before ? before->end : -1.0);
    else
      cr_assert(after && c->end <= after->start + tol, "rank %d RELOAD mb %d chunk %d ends %.6f, its %s starts %.6f",
                c->rank, c->mb, c->chunk, c->end, after ? sched_op_name((sched_op)after->op) : "backward",
                after ? after->start : -1.0);
  }
  cr_assert(n > 0, "no copy in the trace %s", path);
  sched_timeline_free(&tl);
}

/* Activation offload on the emulated GPU, 4 ranks, 8 micro-batches: the program's OFFLOADs copy
 * activations to page-locked host buffers on the copy streams (events, no host waits), poisoned
 * with NaN on the device until their RELOAD, and their buffers serve other micro-batches
 * meanwhile: the losses equal the emulated run without offload bit for bit (which the tests
 * above hold to the CPU's). Also dualpipev on 2 ranks, where rank 1's backward of stage 2 hands
 * its gradient to stage 1's pair, which must be back (its reload landed) first. */
Test(train_emu, activation_offload_follows_the_cpu, .timeout = 900) {
  const char *layouts[] = {"--set pipeline.stages=4 --set gradient_accumulation_steps=8", /* ranks 0, 1: 2 slots, not 4, 3 */
                           "--set pipeline.stages=2 --set pipeline.schedule=dualpipev --set gradient_accumulation_steps=4"};
  const int np[] = {4, 2};
  for (int k = 0; k < 2; k++) {
    double plain[STEPS], off[STEPS];
    char *text, with[512];
    snprintf(with, sizeof with, "%s --set backend=cuda", layouts[k]);
    run("emu/brigade", np[k], with, plain, &text);
    free(text);
    /* offload_gflops 50: the CPU's rate, at which the tiny GPT's copies hide (at the default on
     * "cuda", a GPU's rate, none would) */
    snprintf(with, sizeof with, "%s --set backend=cuda --set 'pipeline.offload=\"full\"' --set pipeline.offload_gflops=50",
             layouts[k]);
    /* with the poison (offloaded activations read as NaN until reloaded), and, on 4 ranks, without
     * it: the poison makes the compute queue wait for each offload's copy at once, which hides a
     * reload that does not wait for its offload; and on 4 ranks once more with the copies fed in pieces of 2 KB (BRIGADE_COPY_PIECE_MB), the
     * emulator reporting a piece done at every 50th query only, so that most of each copy is issued
     * by whoever waits for it rather than by the feeding */
    for (int kind = 0; kind < (k == 0 ? 3 : 1); kind++) {
      int poison = kind == 0, pieces = kind == 2;
      char traced[768], trace[] = "/tmp/brigade_emu_trace_XXXXXX";
      close(mkstemp(trace));
      /* the runs without the poison trace their second step (the poison's waits would order the copies) */
      snprintf(traced, sizeof traced, "%s --set 'trace.path=\"%s\"'", with, trace);
      setenv("BRIGADE_OFFLOAD_POISON", poison ? "1" : "0", 1);
      if (pieces) setenv("BRIGADE_COPY_PIECE_MB", "0.002", 1), setenv("EMU_EVENT_POLLS", "50", 1);
      run("emu/brigade", np[k], poison ? with : traced, off, &text);
      unsetenv("BRIGADE_COPY_PIECE_MB"), unsetenv("EMU_EVENT_POLLS");
      if (!poison) copies_in_their_place(trace);
      unlink(trace);
      char svg[800];
      snprintf(svg, sizeof svg, "%s.svg", trace);
      unlink(svg);
      unsetenv("BRIGADE_OFFLOAD_POISON");
      const char *say = strstr(text, "rank 0 offloads ");
      cr_assert(say && atoi(say + 16) > 0, "%s: the offloaded run did not offload:\n%s", layouts[k], text);
      /* the ranks share the emulated GPU: transfers through host copies, which the log says meet the copies */
      cr_assert(strstr(text, "a transfer's copy waits for an offload's copy") && !strstr(text, "host memory already"),
                "%s: no word of the transfers' copies, or a word of host memory:\n%s", layouts[k], text);
      free(text);
      for (int i = 0; i < STEPS; i++)
        cr_assert(off[i] == plain[i], "%s%s step %d: %.9g with offload, %.9g without", layouts[k],
                  poison ? "" : pieces ? " (no poison, copies in pieces)" : " (no poison)", i + 1, off[i], plain[i]);
    }
  }
}
