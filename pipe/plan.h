/* pipe/plan.h: a training config's program and FLOP-based cost model, without running it. */
#ifndef BRIGADE_PIPE_PLAN_H
#define BRIGADE_PIPE_PLAN_H

#include <stddef.h>

#include "schedule/schedule.h"

typedef struct {
  sched_program prog;
  sched_costs costs; /* per-virtual-stage times in seconds at the given GFLOP/s */
  double *f, *b, *w;
  int stages, v, m;
  size_t params;
} pipe_plan;

/* Reads the config (with --set overrides) as `brigade train` would, cuts the model, compiles
 * the schedule, and prices each virtual stage's forward at its FLOPs / gflops (backward: I and
 * W each as much again). */
int pipe_plan_build(const char *config, const char **sets, int nsets, double gflops, pipe_plan *out);
void pipe_plan_free(pipe_plan *p);

#endif
