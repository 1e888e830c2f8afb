/* bench/sched_bench.c: time of compile + lower + verify + simulate (4 steps back to back) for
 * large shapes, instructions per second and nanoseconds per instruction (of the program; the
 * simulation's also per instruction of the steps it ran: once a step starts where the one before
 * started, shifted, the simulator copies the rest, and says how many it ran), and the total with
 * a one-step simulation. Targets: every family at p=64, m=1024 (interleaved v=4, the V families
 * v=2) compiled, verified and simulated (one step) under 0.5 s on one core, and about 100 ns per
 * instruction with 4 steps. The last columns time sched_compile as `sim` and training call it
 * (verified; zb-h1, zb-h2 and zb-auto lower and simulate two orders and keep the faster) and,
 * with the 4-step simulation, the total per instruction that way; the last column the same again,
 * best of 3, as a process that compiles one program after another (tune) sees it. Unit costs
 * (F = B = W = 1, no latency), and for the zero-bubble families again under the zero-bubble
 * paper's measured costs for its 1.5B model (F 18.522, B 18.086, W 9.337, comm 0.601, a step of
 * 2: "paper" on the line), where the orders have bubbles and transfers take time. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "core/mem.h"
#include "schedule/schedule.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

static int run(sched_family f, int p, int v, int m, int paper) {
  sched_step_sync sync = sched_default_step_sync(f);
  sched_shape sh = {.family = f, .p = p, .v = v, .m = m, .post_validation = sync == SCHED_STEP_POST_VALIDATION};
  sched_costs c = sched_costs_unit();
  if (paper) c.f = 18.522, c.b = 18.086, c.w = 9.337, c.comm = 0.601, c.step = 2;
  sched_program compute, pr;
  double t0 = now();
  if (sched_compile_compute(&sh, &c, &compute)) goto fail;
  double t1 = now();
  if (sched_lower(&compute, &c, &pr)) goto fail;
  if (sh.post_validation && sched_place_validate(&pr)) goto fail; /* as sched_compile does */
  double t2 = now();
  if (sched_verify(&pr)) goto fail;
  double t3 = now();
  sched_sim_result res, one;
  if (sched_simulate_steps(&pr, &c, 4, sync, &res, NULL)) goto fail;
  double t4 = now();
  if (sched_simulate(&pr, &c, &one, NULL)) goto fail; /* one step alone: the 0.5 s target's */
  double t5 = now();
  sched_program full; /* as `sim` and training compile it (verified): zb-h1/h2/auto lower two orders, keep the faster */
  if (sched_compile(&sh, &c, &full)) goto fail;
  double t6 = now();
  sched_program_free(&full);
  /* again, as a process that compiles one program after another (tune) does: the best of 3 of
   * sched_compile and the 4-step simulation */
  double warm = INFINITY;
  for (int k = 0; k < 3; k++) {
    sched_sim_result w;
    double a = now();
    if (sched_compile(&sh, &c, &full) || sched_simulate_steps(&full, &c, 4, sync, &w, NULL)) goto fail;
    double d = now() - a;
    warm = d < warm ? d : warm;
    sched_sim_result_free(&w), sched_program_free(&full);
  }
  size_t n = sched_program_count(&pr);
  printf("%-12s %-5s p=%-3d v=%d m=%-5d %9zu instr | compile %6.1f ms  lower %6.1f ms  verify %6.1f ms  "
         "simulate x4 %6.1f ms (%d run, %5.1f ns/instr of them) | total %7.1f ms  %6.1f ns/instr | with one step %7.1f ms | "
         "bubble %.4f | as sim compiles it: compile+verify %6.1f ms, total %7.1f ms %6.1f ns/instr | again, best of 3: %6.1f ns/instr\n",
         sched_family_name(f), paper ? "paper" : "unit", p, v, m, n, 1e3 * (t1 - t0), 1e3 * (t2 - t1), 1e3 * (t3 - t2),
         1e3 * (t4 - t3), res.steps_run, 1e9 * (t4 - t3) / ((double)res.steps_run * n), 1e3 * (t4 - t0), 1e9 * (t4 - t0) / n,
         1e3 * (t3 - t0 + t5 - t4), res.bubble_rate, 1e3 * (t6 - t5), 1e3 * (t6 - t5 + t4 - t3),
         1e9 * (t6 - t5 + t4 - t3) / n, 1e9 * warm / n);
  sched_sim_result_free(&res), sched_sim_result_free(&one);
  sched_program_free(&pr);
  sched_program_free(&compute);
  return 0;
fail:
  fprintf(stderr, "sched_bench: %s\n", core_error_msg());
  return 1;
}

/* `sched_bench FAMILY P V M [paper]` times that one shape alone (for a profiler), under unit costs
 * or the paper's; no arguments: them all. */
int main(int argc, char **argv) {
  int rc = 0;
  core_mem_keep_freed(); /* as `brigade sim`, `compile` and `tune` do */
  if (argc == 5 || (argc == 6 && !strcmp(argv[5], "paper"))) {
    sched_family f;
    if (sched_family_parse(argv[1], &f)) return fprintf(stderr, "sched_bench: %s\n", core_error_msg()), 2;
    return run(f, atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), argc == 6);
  }
  if (argc != 1) return fprintf(stderr, "usage: sched_bench [FAMILY P V M [paper]]\n"), 2;
  rc |= run(SCHED_1F1B, 8, 1, 64, 0);
  rc |= run(SCHED_GPIPE, 64, 1, 1024, 0);
  rc |= run(SCHED_1F1B, 64, 1, 1024, 0);
  rc |= run(SCHED_INTERLEAVED, 64, 4, 1024, 0);
  rc |= run(SCHED_ZB_H1, 64, 1, 1024, 0);
  rc |= run(SCHED_ZB_H2, 64, 1, 1024, 0);
  rc |= run(SCHED_ZB_V, 64, 2, 1024, 0);
  rc |= run(SCHED_ZB_AUTO, 64, 1, 1024, 0);
  rc |= run(SCHED_V_ZB, 64, 2, 1024, 0);
  rc |= run(SCHED_V_HALF, 64, 2, 1024, 0);
  rc |= run(SCHED_V_MIN, 64, 2, 1024, 0);
  rc |= run(SCHED_DUALPIPE_V, 64, 2, 1024, 0);
  rc |= run(SCHED_1F1B, 64, 1, 1024, 1);
  rc |= run(SCHED_ZB_H1, 64, 1, 1024, 1);
  rc |= run(SCHED_ZB_H2, 64, 1, 1024, 1);
  rc |= run(SCHED_ZB_AUTO, 64, 1, 1024, 1);
  rc |= run(SCHED_ZB_V, 64, 2, 1024, 1);
  return rc;
}
