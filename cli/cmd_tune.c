/* cli/cmd_tune.c: `brigade tune CONFIG --memory BYTES`: the fastest predicted schedules that
 * fit a per-rank memory limit, and the winner's simulated timeline. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/mem.h"
#include "pipe/tune.h"
#include "viz/viz.h"

static int fail(void) {
  fprintf(stderr, "brigade: error: %s\n", core_error_msg());
  return core_error_code() == CORE_EINPUT ? 2 : 1;
}

static const char *zero_of(const pipe_plan_shape *sh) {
  static char buf[16];
  pipe_zero_name(sh, buf, sizeof buf);
  return buf;
}

static void print_mib(double bytes, char *buf, size_t n) { snprintf(buf, n, "%.3f MiB", bytes / (1024.0 * 1024.0)); }

int cli_tune(int argc, char **argv) {
  const char *config = NULL, *svg = "tune.svg", *sets[64];
  const char *max_memory = NULL;
  int nsets = 0, top = 5, have_memory = 0, rc = CORE_OK;
  double memory = 0, gflops = 50, max_instructions = CLI_TUNE_MAX_INSTRUCTIONS;
  pipe_plan_hw hw = {.d = 1, .dp_gbps = 10};
  core_mem_keep_freed(); /* one schedule compiled and simulated after another */
  for (int i = 1; i < argc && !rc; i++) {
    cli_arg(&argc, argv, i);
    const char *a = argv[i], *val = NULL;
    if (strcmp(a, "--memory") == 0) {
      if (!(rc = cli_take(argc, argv, &i, &val))) rc = core_mem_parse(a, val, &memory);
      have_memory = 1;
    } else if (strcmp(a, "--max-memory") == 0) {
      double b;
      if (!(rc = cli_take(argc, argv, &i, &val)) && !(rc = core_mem_parse(a, val, &b))) max_memory = val;
    } else if (strcmp(a, "--max-instructions") == 0) {
      if (!(rc = cli_take(argc, argv, &i, &val))) rc = cli_parse_count(a, val, &max_instructions);
    } else if (strcmp(a, "--gflops") == 0) {
      if (!(rc = cli_take(argc, argv, &i, &val))) rc = cli_parse_double(a, val, 1e-6, &gflops);
    } else if (strcmp(a, "--dp") == 0) {
      if (!(rc = cli_take(argc, argv, &i, &val))) rc = cli_parse_int(a, val, 1, 1 << 20, &hw.d);
    } else if (strcmp(a, "--dp-gbps") == 0) {
      if (!(rc = cli_take(argc, argv, &i, &val))) rc = cli_parse_double(a, val, 1e-9, &hw.dp_gbps);
    } else if (strcmp(a, "--top") == 0) {
      if (!(rc = cli_take(argc, argv, &i, &val))) rc = cli_parse_int(a, val, 1, 1 << 20, &top);
    } else if (strcmp(a, "--svg") == 0) {
      rc = cli_take(argc, argv, &i, &svg);
    } else if (strcmp(a, "--set") == 0) {
      if (!(rc = cli_take(argc, argv, &i, &val))) {
        if (nsets == 64) rc = core_error_set(CORE_EINPUT, "too many --set options");
        else sets[nsets++] = val;
      }
    } else if (a[0] != '-' && !config) {
      config = a;
    } else {
      rc = core_error_set(CORE_EINPUT, "tune: unknown option '%s' (see 'brigade help')", a);
    }
  }
  if (!rc && (!config || !have_memory))
    rc = core_error_set(CORE_EINPUT, "usage: brigade tune CONFIG --memory BYTES [--set key=value ...] "
                                     "[--gflops G] [--dp D] [--dp-gbps G] [--top K] [--svg FILE] [--max-instructions N] "
                                     "[--max-memory BYTES]");
  core_mem_limit mlim;
  if (!rc) rc = core_mem_limit_get(max_memory, &mlim);
  if (rc) return fail();
  hw.gflops = gflops;
  hw.limits = (sched_limits){.max_instructions = max_instructions, .instr_name = "--max-instructions",
                             .max_bytes = mlim.bytes, .mem_what = mlim.what};

  pipe_tune_result res;
  if (pipe_tune_hw(config, sets, nsets, &hw, memory, &res)) return fail();
  char mem[64], peak[64];
  print_mib(memory, mem, sizeof mem);
  printf("%s: %d stages, per-replica batch %d sequences (config: %s v=%d m=%d %s); stage costs from "
         "FLOPs at %.4g GFLOP/s\n",
         config, res.stages, res.batch, sched_family_name(res.own.family), res.own.v, res.own.m,
         pipe_part_name(res.own.part), gflops);
  printf("%d candidates simulated (%d shapes could not be cut), %d fit in %s per rank, %d distinct; "
         "the best %d:\n",
         res.tried, res.uncut, res.fitting, mem, res.nfits, top < res.nfits ? top : res.nfits);
  if (res.too_large)
    printf("%d shapes not simulated, from m = %d on: their programs are over --max-instructions %.0f (or %s, the memory "
           "limit); raise it to try them\n", res.too_large, res.skipped_m, max_instructions, mlim.what);
  if (res.recomputed)
    printf("%d candidates over the limit tried again with every transformer_block recomputing (+rc: "
           "recompute_gelu = true; recompute_layernorm = true;, whose extra GELU and LayerNorm passes the "
           "predicted times leave out)\n", res.recomputed);
  if (hw.d > 1)
    printf("%d replicas of every stage, ZeRO's collectives at %.4g GB/s per rank (--dp, --dp-gbps): each candidate "
           "at ZeRO stages 0 to 3 (3: resharding, prefetching the next chunk or not, or kept gathered)\n", hw.d, hw.dp_gbps);
  int zc = hw.d > 1; /* the ZeRO column, when the tuner chose it */
  printf("%3s  %-12s %2s %5s %5s  %-10s %-*s%14s %8s  %s\n", "#", "family", "v", "m", "B", "partition", zc ? 13 : 0,
         zc ? "zero" : "", "step (ms)", "bubble", "peak memory (worst rank)");
  for (int i = 0; i < res.nfits && i < top; i++) {
    const pipe_tune_cand *c = &res.fits[i];
    char fam[32], zero[16];
    pipe_shape_name(&c->shape, fam, sizeof fam);
    pipe_zero_name(&c->shape, zero, sizeof zero);
    print_mib(c->peak_bytes, peak, sizeof peak);
    printf("%3d  %-12s %2d %5d %5d  %-10s %-*s%14.6g %7.2f%%  %s (rank %d)\n", i + 1, fam, c->shape.v, c->shape.m, c->B,
           pipe_part_name(c->shape.part), zc ? 13 : 0, zc ? zero : "", 1e3 * c->time, 100 * c->bubble_rate, peak,
           c->worst_rank);
  }
  /* the winner's timeline: rebuilt and simulated once more, with events this time */
  pipe_tune_cand win = res.fits[0];
  pipe_tune_result_free(&res);
  pipe_plan plan;
  if (pipe_plan_build_shape_hw(config, sets, nsets, &hw, &win.shape, &plan)) return fail();
  sched_timeline tl;
  sched_timeline_init(&tl, sched_family_name(plan.prog.family), "s, predicted", plan.prog.p, plan.prog.v, plan.prog.m);
  sched_sim_result sim;
  rc = sched_simulate(&plan.prog, &plan.costs, &sim, &tl);
  if (!rc) {
    sched_sim_result_free(&sim);
    rc = viz_write_svg(&tl, svg);
  }
  if (!rc)
    printf("wrote %s (%s%s v=%d m=%d B=%d %s%s%s)\n", svg, sched_family_name(win.shape.family),
           win.shape.recompute ? "+rc" : "", win.shape.v, win.shape.m, win.B, pipe_part_name(win.shape.part),
           hw.d > 1 ? ", ZeRO " : "", hw.d > 1 ? zero_of(&win.shape) : "");
  sched_timeline_free(&tl);
  pipe_plan_free(&plan);
  return rc ? fail() : 0;
}
