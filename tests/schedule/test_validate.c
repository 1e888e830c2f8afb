/* Optimizer post-validation's place in the step (schedule/validate.c): one VALIDATE per rank,
 * after forward work only, every transfer before it matched before the partner's own VALIDATE,
 * so that a step every rank starts again leaves no message behind; the verifier refuses a
 * VALIDATE that breaks any of it; the simulator makes a rank wait there for the previous step's
 * gradient norm. */
#include <criterion/criterion.h>
#include <string.h>

#include "core/error.h"
#include "schedule/schedule.h"

static int chunks_of(sched_family f) { return sched_family_is_v(f) || f == SCHED_INTERLEAVED ? 2 : 1; }

static int validate_at(const sched_program *pr, int r) {
  int at = -1;
  for (int i = 0; i < pr->streams[r].len; i++)
    if (pr->streams[r].ins[i].op == SCHED_VALIDATE) {
      cr_assert_eq(at, -1, "rank %d has two VALIDATEs", r);
      at = i;
    }
  return at;
}

/* The index of the instruction on rank q that matches activation transfer `in` of rank r. */
static int partner(const sched_program *pr, int r, const sched_instr *in) {
  int q = in->peer, want = in->op == SCHED_SEND_ACT ? SCHED_RECV_ACT : SCHED_SEND_ACT;
  int s = pr->stage_of[r * pr->v + in->chunk] + (in->op == SCHED_SEND_ACT ? 1 : -1);
  for (int j = 0; j < pr->streams[q].len; j++) {
    const sched_instr *o = &pr->streams[q].ins[j];
    if (o->op == want && o->mb == in->mb && o->chunk >= 0 && pr->stage_of[q * pr->v + o->chunk] == s) return j;
  }
  return -1;
}

/* Every family and shape: the program verifies, each rank has one VALIDATE with only loads,
 * forwards and activation transfers before it, and each of those transfers' partners comes
 * before the partner rank's VALIDATE (checked here by a search of its own). */
Test(validate, prefixes_are_forward_work_and_closed) {
  int checked = 0;
  const int ms[] = {1, 2, 3, 5, 8, 13};
  for (int f = 0; f < SCHED_CUSTOM; f++) {
    if (f == SCHED_INFERENCE) continue;
    for (int p = 1; p <= 6; p++)
      for (size_t k = 0; k < sizeof ms / sizeof ms[0]; k++)
        for (int cm = 0; cm < 2; cm++) {
          sched_shape sh = {.family = (sched_family)f, .p = p, .v = chunks_of((sched_family)f), .m = ms[k], .post_validation = 1};
          sched_costs c = sched_costs_unit();
          c.comm = cm ? 0.7 : 0, c.b = 1.5;
          sched_program pr;
          if (sched_compile(&sh, &c, &pr) != CORE_OK) continue; /* a shape the family refuses */
          for (int r = 0; r < p; r++) {
            int at = validate_at(&pr, r);
            cr_assert_geq(at, 0, "%s p=%d m=%d: rank %d has no VALIDATE", sched_family_name(sh.family), p, ms[k], r);
            for (int i = 0; i < at; i++) {
              const sched_instr *in = &pr.streams[r].ins[i];
              cr_assert(in->op == SCHED_LOAD_MICROBATCH || in->op == SCHED_FORWARD || in->op == SCHED_SEND_ACT ||
                            in->op == SCHED_RECV_ACT,
                        "%s p=%d m=%d rank %d: %s before VALIDATE", sched_family_name(sh.family), p, ms[k], r,
                        sched_op_name((sched_op)in->op));
              if (in->op != SCHED_SEND_ACT && in->op != SCHED_RECV_ACT) continue;
              int j = partner(&pr, r, in);
              cr_assert(j >= 0 && j < validate_at(&pr, in->peer), "%s p=%d m=%d rank %d #%d: partner #%d on rank %d, "
                        "its VALIDATE at %d", sched_family_name(sh.family), p, ms[k], r, i, j, in->peer,
                        validate_at(&pr, in->peer));
            }
          }
          sched_program_free(&pr);
          checked++;
        }
  }
  cr_assert_gt(checked, 500, "only %d shapes", checked);
}

/* 1F1B: rank r may run min(m, p - r) forwards before it checks (rank 0 its warm-up less the
 * activations rank 1 takes after its own VALIDATE), the work that overlaps the wait. */
Test(validate, one_f_one_b_keeps_its_warm_up) {
  for (int p = 2; p <= 8; p++)
    for (int m = 1; m <= 12; m++) {
      sched_shape sh = {.family = SCHED_1F1B, .p = p, .v = 1, .m = m, .post_validation = 1};
      sched_costs c = sched_costs_unit();
      sched_program pr;
      cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_OK, "%s", core_error_msg());
      for (int r = 0; r < p; r++) {
        int at = validate_at(&pr, r), f = 0;
        for (int i = 0; i < at; i++) f += pr.streams[r].ins[i].op == SCHED_FORWARD;
        int want = m < p - r ? m : p - r;
        cr_assert_eq(f, want, "p=%d m=%d rank %d: %d forwards before VALIDATE, expected %d", p, m, r, f, want);
      }
      sched_program_free(&pr);
    }
}

static void move_validate(sched_program *pr, int r, int to) {
  sched_stream *st = &pr->streams[r];
  int at = validate_at(pr, r);
  sched_instr v = st->ins[at];
  if (to < at) memmove(&st->ins[to + 1], &st->ins[to], sizeof v * (size_t)(at - to));
  else memmove(&st->ins[at], &st->ins[at + 1], sizeof v * (size_t)(to - at));
  st->ins[to] = v;
}

/* A VALIDATE after a backward, one before the receive of an activation its sender sent before
 * its own VALIDATE, and a rank without one: each refused, naming the rank and why. */
Test(validate, the_verifier_refuses_a_misplaced_validate) {
  sched_shape sh = {.family = SCHED_1F1B, .p = 4, .v = 1, .m = 8, .post_validation = 1};
  sched_costs c = sched_costs_unit();
  sched_program pr;
  cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_OK, "%s", core_error_msg());
  cr_assert_eq(sched_verify(&pr), CORE_OK);
  int at = validate_at(&pr, 3); /* the last rank: RECV, LOAD, F, VALIDATE, then its first backward */
  move_validate(&pr, 3, at + 1);
  cr_assert_eq(sched_verify(&pr), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "rank 3") && strstr(core_error_msg(), "only loads, forwards"), "%s", core_error_msg());
  move_validate(&pr, 3, at);
  cr_assert_eq(sched_verify(&pr), CORE_OK, "%s", core_error_msg());
  at = validate_at(&pr, 1); /* rank 1 checks before it takes micro-batch 2, which rank 0 sends before its own */
  int j = at - 1;
  while (pr.streams[1].ins[j].op != SCHED_RECV_ACT) j--;
  move_validate(&pr, 1, j);
  cr_assert_eq(sched_verify(&pr), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "partner comes after the partner's VALIDATE"), "%s", core_error_msg());
  sched_program_free(&pr);
  cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_OK);
  at = validate_at(&pr, 2);
  memmove(&pr.streams[2].ins[at], &pr.streams[2].ins[at + 1], sizeof(sched_instr) * (size_t)(pr.streams[2].len - at - 1));
  pr.streams[2].len--;
  cr_assert_eq(sched_verify(&pr), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "rank 2") && strstr(core_error_msg(), "has no VALIDATE"), "%s", core_error_msg());
  sched_program_free(&pr);
}

/* Instruction `in` put at index i of rank r's stream (the stream grown by one). */
static void insert_at(sched_program *pr, int r, int i, sched_instr in) {
  sched_stream *st = &pr->streams[r];
  st->ins = realloc(st->ins, sizeof(sched_instr) * (size_t)(st->len + 1));
  cr_assert_not_null(st->ins);
  memmove(&st->ins[i + 1], &st->ins[i], sizeof(sched_instr) * (size_t)(st->len - i));
  st->ins[i] = in, st->len++, st->cap = st->len;
}

/* The checks on VALIDATE itself: a second one on a rank, one that names a chunk, micro-batch or
 * peer, one in a forward-only program (nothing is updated there); each refused at its place. */
Test(validate, the_verifier_refuses_a_malformed_validate) {
  sched_shape sh = {.family = SCHED_1F1B, .p = 4, .v = 1, .m = 8, .post_validation = 1};
  sched_costs c = sched_costs_unit();
  sched_program pr;
  const sched_instr v = {.op = SCHED_VALIDATE, .mb = -1, .chunk = -1, .peer = -1, .slot = -1, .aslot = -1};
  cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_OK, "%s", core_error_msg());
  int at = validate_at(&pr, 1);
  insert_at(&pr, 1, at + 1, v);
  cr_assert_eq(sched_verify(&pr), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "rank 1") && strstr(core_error_msg(), "a second VALIDATE in one step"), "%s",
            core_error_msg());
  sched_program_free(&pr);
  for (int f = 0; f < 3; f++) {
    cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_OK, "%s", core_error_msg());
    sched_instr *in = &pr.streams[2].ins[validate_at(&pr, 2)];
    if (f == 0) in->chunk = 0;
    if (f == 1) in->mb = 0;
    if (f == 2) in->peer = 1;
    cr_assert_eq(sched_verify(&pr), CORE_EINPUT, "field %d", f);
    cr_assert(strstr(core_error_msg(), "rank 2") && strstr(core_error_msg(), "VALIDATE names a chunk, micro-batch or peer"),
              "%s", core_error_msg());
    sched_program_free(&pr);
  }
  sched_shape inf = {.family = SCHED_INFERENCE, .p = 2, .v = 1, .m = 2};
  cr_assert_eq(sched_compile(&inf, &c, &pr), CORE_OK, "%s", core_error_msg());
  cr_assert_eq(sched_verify(&pr), CORE_OK, "%s", core_error_msg());
  for (int r = 0; r < 2; r++) insert_at(&pr, r, 0, v);
  cr_assert_eq(sched_verify(&pr), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "rank 0") && strstr(core_error_msg(), "forward-only program"), "%s", core_error_msg());
  sched_program_free(&pr);
}

/* In the simulator a rank waits at VALIDATE for the previous step's norm: every rank's arrival at
 * its update plus the all-reduce. zb-h2 p=4 m=8, unit costs, a step of 0.5: 24.5 per step with a
 * free norm; a norm of 10 makes the check wait (longer, still no longer than the barrier's step);
 * the same program without VALIDATEs checks before any work of the next step, never sooner. */
Test(validate, the_simulator_waits_there_for_the_norm) {
  sched_costs c = sched_costs_unit();
  c.step = 0.5;
  double steady[2][2]; /* [VALIDATE placed][norm 0, 10] */
  for (int pv = 0; pv < 2; pv++) {
    sched_shape sh = {.family = SCHED_ZB_H2, .p = 4, .v = 1, .m = 8, .post_validation = pv};
    sched_program pr;
    cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_OK, "%s", core_error_msg());
    for (int n = 0; n < 2; n++) {
      c.norm = n ? 10 : 0;
      sched_sim_result res, bar;
      cr_assert_eq(sched_simulate_steps(&pr, &c, 4, SCHED_STEP_POST_VALIDATION, &res, NULL), CORE_OK);
      cr_assert_eq(sched_simulate_steps(&pr, &c, 4, SCHED_STEP_BARRIER, &bar, NULL), CORE_OK);
      steady[pv][n] = res.steady_step_time;
      cr_assert(res.steady_step_time <= bar.steady_step_time + 1e-9, "pv=%d norm %g: %.17g > barrier %.17g", pv, c.norm,
                res.steady_step_time, bar.steady_step_time);
      sched_sim_result_free(&res), sched_sim_result_free(&bar);
    }
    sched_program_free(&pr);
  }
  cr_assert(steady[1][0] <= 24.5 + 1e-9, "%.17g", steady[1][0]);
  cr_assert(steady[1][1] > steady[1][0] + 1, "the norm's wait: %.17g vs %.17g", steady[1][1], steady[1][0]);
  cr_assert(steady[0][0] >= steady[1][0] - 1e-9 && steady[0][1] >= steady[1][1] - 1e-9, "without VALIDATE %.17g %.17g, "
            "with %.17g %.17g", steady[0][0], steady[0][1], steady[1][0], steady[1][1]);
}
