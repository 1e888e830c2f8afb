/* A zero-bubble schedule places its W passes by list scheduling under a cost model, so the
 * program depends on the costs. The trainer compiles it with the stages' FLOP model, the one
 * `brigade sim CONFIG` prices: a traced training step runs, on every rank, the compute ops in
 * the order of the simulation of the same config. The tiny GPT's stages are unequal (the first
 * holds the embedding, the last the LM head), and unit costs give another order here, so the
 * test would see a trainer that compiled with unit costs. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "schedule/events.h"
#include "schedule/schedule.h"
#include "tests/common/mpirun.h"
#include "viz/viz.h"

#define SHAPE "--set pipeline.stages=4 --set pipeline.schedule=zb-h1 --set gradient_accumulation_steps=8"

static int is_compute(int op) {
  return op == SCHED_FORWARD || op == SCHED_BACKWARD || op == SCHED_BACKWARD_INPUT || op == SCHED_BACKWARD_WEIGHT;
}

/* rank r's compute ops in start order, as "op:mb:chunk" words into buf */
static void rank_order(const sched_timeline *tl, int r, char *buf, size_t cap) {
  int n = 0;
  const sched_event *ev[4096];
  for (int i = 0; i < tl->n && n < 4096; i++)
    if (tl->ev[i].rank == r && is_compute(tl->ev[i].op)) ev[n++] = &tl->ev[i];
  for (int i = 1; i < n; i++) /* insertion sort by start: the streams are short */
    for (int j = i; j > 0 && ev[j]->start < ev[j - 1]->start; j--) {
      const sched_event *t = ev[j];
      ev[j] = ev[j - 1], ev[j - 1] = t;
    }
  size_t len = 0;
  buf[0] = 0;
  for (int i = 0; i < n && len + 32 < cap; i++)
    len += (size_t)snprintf(buf + len, cap - len, "%d:%d:%d ", ev[i]->op, ev[i]->mb, ev[i]->chunk);
}

static void read_trace(const char *path, sched_timeline *tl) {
  cr_assert_eq(viz_read_trace(path, tl), 0, "cannot read %s", path);
}

Test(zb_costs, the_trainer_runs_the_program_sim_prices, .timeout = 300) {
  char dir[] = "/tmp/brigade_zbc_XXXXXX";
  cr_assert(mkdtemp(dir));
  char cmd[2048], args[1024], ran[256], sim[256], unit[256];
  snprintf(ran, sizeof ran, "%s/train.json", dir);
  snprintf(sim, sizeof sim, "%s/sim.json", dir);
  snprintf(unit, sizeof unit, "%s/unit.json", dir);
  snprintf(args, sizeof args, "train configs/tiny.cfg " SHAPE " --set train.steps=2 --set train.eval_interval=0 "
           "--set trace.path=%s --set trace.step=2", ran);
  cr_assert_eq(test_mpirun(4, "brigade", args), 0, "brigade %s failed", args);
  snprintf(cmd, sizeof cmd, "%s/brigade sim configs/tiny.cfg " SHAPE " --trace %s >/dev/null", test_build_dir(), sim);
  cr_assert_eq(test_sh(cmd), 0, "%s failed", cmd);
  snprintf(cmd, sizeof cmd, "%s/brigade sim --schedule zb-h1 --stages 4 --microbatches 8 --tied --trace %s >/dev/null",
           test_build_dir(), unit);
  cr_assert_eq(test_sh(cmd), 0, "%s failed", cmd);

  sched_timeline t_ran, t_sim, t_unit;
  read_trace(ran, &t_ran), read_trace(sim, &t_sim), read_trace(unit, &t_unit);
  cr_assert_eq(t_ran.p, 4);
  static char a[65536], b[65536], u[65536];
  int differs_from_unit = 0;
  for (int r = 0; r < 4; r++) {
    rank_order(&t_ran, r, a, sizeof a);
    rank_order(&t_sim, r, b, sizeof b);
    rank_order(&t_unit, r, u, sizeof u);
    cr_assert(strlen(a) > 0, "rank %d ran no compute op", r);
    cr_assert_str_eq(a, b, "rank %d: the trainer ran\n  %s\nthe simulation of the config\n  %s", r, a, b);
    differs_from_unit |= strcmp(a, u) != 0;
  }
  cr_assert(differs_from_unit, "unit costs give the same program here: this shape cannot tell the cost models apart");
  sched_timeline_free(&t_ran), sched_timeline_free(&t_sim), sched_timeline_free(&t_unit);
  unlink(ran), unlink(sim), unlink(unit), rmdir(dir);
}
