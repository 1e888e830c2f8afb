/* `brigade train` runs the program `brigade sim CONFIG` prices. Both compile through
 * train_compile: every family under the stages' FLOP model, which orders the zero-bubble
 * families' W passes and, for every family, where lowering puts the transfers (SEND/RECV)
 * between the compute ops. Each test trains one traced step under mpirun, simulates the same
 * config, and compares every rank's whole instruction stream (transfers and their peers,
 * compute, the step's tail) in the order the rank ran it: the worker and the simulator both
 * record a rank's events in stream order.
 *
 * The tiny GPT's stages are unequal (the first holds the embedding, the last the LM head), and
 * for every shape below unit costs give another program (each test checks that it does), so
 * the tests would see a trainer that compiled with unit costs. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "schedule/events.h"
#include "schedule/schedule.h"
#include "tests/common/mpirun.h"
#include "viz/viz.h"

/* rank r's instructions in the order the trace holds them, as "OP:mb:chunk:peer" words. The
 * simulator records no event for LOAD_MICROBATCH (it takes no time there), which lowering puts
 * right before each first- and last-stage forward anyway: loads are left out. */
static void rank_stream(const sched_timeline *tl, int r, char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = 0;
  for (int i = 0; i < tl->n; i++) {
    const sched_event *e = &tl->ev[i];
    if (e->rank != r || e->op == SCHED_LOAD_MICROBATCH) continue;
    cr_assert(len + 64 < cap, "rank %d's stream does not fit the test's buffer", r);
    len += (size_t)snprintf(buf + len, cap - len, "%s:%d:%d:%d ", sched_op_name((sched_op)e->op), e->mb, e->chunk,
                            e->peer);
  }
}

/* The measured trace is on one clock: a forward whose input came from another rank starts after
 * the forward that made it ended (within 0.1 ms, the ranks' clocks being matched by round trips;
 * on raw MPI_Wtime, whose origin is each process's own, stage 2 ran micro-batch 0 0.4 to 0.9 ms
 * before stage 1 had made it, and 20 ms on another machine). */
static void causal(const sched_timeline *tl, const char *shape) {
  int checked = 0;
  for (int i = 0; i < tl->n; i++) {
    const sched_event *e = &tl->ev[i];
    if (e->op != SCHED_FORWARD || e->stage <= 0) continue;
    for (int k = 0; k < tl->n; k++) {
      const sched_event *f = &tl->ev[k];
      if (f->op != SCHED_FORWARD || f->stage != e->stage - 1 || f->mb != e->mb || f->rank == e->rank) continue;
      cr_assert(e->start >= f->end - 1e-4, "%s: stage %d's forward of micro-batch %d starts at %.6f s, before stage %d's "
                "ended at %.6f s", shape, e->stage, e->mb, e->start, f->stage, f->end);
      checked++;
    }
  }
  cr_assert_gt(checked, 0, "%s: no forward took its input from another rank", shape);
}

static void read_trace(const char *path, sched_timeline *tl) {
  cr_assert_eq(viz_read_trace(path, tl), 0, "cannot read %s", path);
}

/* Trains np ranks of tiny.cfg with `shape` for one traced step and simulates the config with
 * `shape` and `sim_flags`; every rank of the pipeline ran what the simulation ran. Unless
 * unit_flags is NULL, `sim` with unit costs and those shape flags gives another program. */
static void same_program(int np, int p, const char *shape, const char *sim_flags, const char *unit_flags) {
  char dir[] = "/tmp/brigade_prog_XXXXXX";
  cr_assert(mkdtemp(dir));
  char cmd[2048], args[1024], ran[256], sim[256], unit[256];
  snprintf(ran, sizeof ran, "%s/train.json", dir);
  snprintf(sim, sizeof sim, "%s/sim.json", dir);
  snprintf(unit, sizeof unit, "%s/unit.json", dir);
  snprintf(args, sizeof args, "train configs/tiny.cfg %s --set train.steps=1 --set train.eval_interval=0 "
           "--set trace.path=%s --set trace.step=1", shape, ran);
  cr_assert_eq(test_mpirun(np, "brigade", args), 0, "brigade %s failed", args);
  snprintf(cmd, sizeof cmd, "%s/brigade sim configs/tiny.cfg --steps 1 %s %s --trace %s >/dev/null", test_build_dir(), shape,
           sim_flags, sim);
  cr_assert_eq(test_sh(cmd), 0, "%s failed", cmd);
  sched_timeline t_ran, t_sim, t_unit;
  read_trace(ran, &t_ran), read_trace(sim, &t_sim);
  if (unit_flags) {
    snprintf(cmd, sizeof cmd, "%s/brigade sim %s --tied --trace %s >/dev/null", test_build_dir(), unit_flags, unit);
    cr_assert_eq(test_sh(cmd), 0, "%s failed", cmd);
    read_trace(unit, &t_unit);
  }
  cr_assert_eq(t_ran.p, p);
  cr_assert_eq(t_sim.p, p);
  causal(&t_ran, shape);
  static char a[1 << 16], b[1 << 16], u[1 << 16];
  int differs_from_unit = 0;
  for (int r = 0; r < p; r++) {
    rank_stream(&t_ran, r, a, sizeof a);
    rank_stream(&t_sim, r, b, sizeof b);
    cr_assert(strstr(a, "FORWARD"), "rank %d ran no forward", r);
    cr_assert_str_eq(a, b, "%s: rank %d ran\n  %s\nthe simulation of the config ran\n  %s", shape, r, a, b);
    if (unit_flags) {
      rank_stream(&t_unit, r, u, sizeof u);
      differs_from_unit |= strcmp(a, u) != 0;
    }
  }
  if (unit_flags) {
    cr_assert(differs_from_unit, "%s: unit costs give the same program: this shape cannot tell the cost models apart",
              shape);
    sched_timeline_free(&t_unit);
    unlink(unit);
  }
  sched_timeline_free(&t_ran), sched_timeline_free(&t_sim);
  char svg[300];
  snprintf(svg, sizeof svg, "%s.svg", ran);
  unlink(ran), unlink(svg), unlink(sim), rmdir(dir);
}

#define P3 "--set pipeline.stages=3 --set gradient_accumulation_steps=6"

Test(train_program, gpipe, .timeout = 300) {
  same_program(3, 3, P3 " --set pipeline.schedule=gpipe", "", "--schedule gpipe --stages 3 --microbatches 6");
}

Test(train_program, one_f_one_b, .timeout = 300) {
  same_program(3, 3, P3 " --set pipeline.schedule=1f1b", "", "--schedule 1f1b --stages 3 --microbatches 6");
}

Test(train_program, interleaved, .timeout = 300) {
  same_program(3, 3, P3 " --set pipeline.schedule=interleaved --set pipeline.virtual_stages=2", "",
               "--schedule interleaved --stages 3 --virtual 2 --microbatches 6");
}

Test(train_program, dualpipev, .timeout = 300) {
  same_program(3, 3, P3 " --set pipeline.schedule=dualpipev", "", "--schedule dualpipev --stages 3 --microbatches 6");
}

Test(train_program, zb_h1, .timeout = 300) {
  same_program(4, 4, "--set pipeline.stages=4 --set pipeline.schedule=zb-h1 --set gradient_accumulation_steps=8", "",
               "--schedule zb-h1 --stages 4 --microbatches 8");
}

Test(train_program, zb_h2, .timeout = 300) {
  same_program(3, 3, P3 " --set pipeline.schedule=zb-h2", "", "--schedule zb-h2 --stages 3 --microbatches 6");
}

Test(train_program, zb_v, .timeout = 300) {
  same_program(3, 3, P3 " --set pipeline.schedule=zb-v", "", "--schedule zb-v --stages 3 --microbatches 6");
}

/* With --dp and ZeRO-2, sim charges each micro-batch's gradient reduce-scatter to the W that
 * runs it in training (the bucket flushes inside the W), but the program stays the trainer's:
 * 2 stages x 2 replicas. Pricing the reduce-scatter into the compile (as sim once did) gives
 * zb-v another program here at the default 10 GB/s. */
Test(train_program, zero2_data_parallel, .timeout = 300) {
  same_program(4, 2, "--set pipeline.stages=2 --set pipeline.schedule=zb-v --set gradient_accumulation_steps=6 "
               "--set zero_optimization.stage=2", "--dp 2", NULL);
}
