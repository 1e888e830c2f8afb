/* The verifier catches hand-made bad programs, each with a message naming rank and instruction. */
#include <criterion/criterion.h>
#include <string.h>

#include "core/error.h"
#include "schedule/schedule.h"

static sched_program compiled(sched_family f, int p, int v, int m) {
  sched_shape sh = {.family = f, .p = p, .v = v, .m = m};
  sched_costs c = sched_costs_unit();
  sched_program pr;
  cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_OK, "%s", core_error_msg());
  cr_assert_eq(sched_verify(&pr), CORE_OK);
  return pr;
}

static int find(const sched_program *pr, int r, sched_op op, int mb) {
  for (int i = 0; i < pr->streams[r].len; i++)
    if (pr->streams[r].ins[i].op == op && pr->streams[r].ins[i].mb == mb) return i;
  cr_assert_fail("no %s mb=%d on rank %d", sched_op_name(op), mb, r);
  return -1;
}

static void erase(sched_program *pr, int r, int i) {
  sched_stream *st = &pr->streams[r];
  memmove(&st->ins[i], &st->ins[i + 1], sizeof(sched_instr) * (size_t)(st->len - i - 1));
  st->len--;
}

/* Index of the instruction op / micro-batch mb / chunk on rank r. */
static int find_chunk(const sched_program *pr, int r, sched_op op, int mb, int chunk) {
  for (int i = 0; i < pr->streams[r].len; i++) {
    const sched_instr *in = &pr->streams[r].ins[i];
    if (in->op == op && in->mb == mb && in->chunk == chunk) return i;
  }
  cr_assert_fail("no %s mb=%d chunk=%d on rank %d", sched_op_name(op), mb, chunk, r);
  return -1;
}

/* Inserts in before instruction i of rank r. */
static void insert(sched_program *pr, int r, int i, sched_instr in) {
  sched_push(pr, r, in); /* grows the stream */
  sched_stream *st = &pr->streams[r];
  memmove(&st->ins[i + 1], &st->ins[i], sizeof(sched_instr) * (size_t)(st->len - 1 - i));
  st->ins[i] = in;
}

static void swap(sched_program *pr, int r, int i, int j) {
  sched_instr t = pr->streams[r].ins[i];
  pr->streams[r].ins[i] = pr->streams[r].ins[j];
  pr->streams[r].ins[j] = t;
}

static void expect_fail(const sched_program *pr, const char *needle) {
  core_error_clear();
  int rc = sched_verify(pr);
  cr_assert_eq(rc, CORE_EINPUT, "verifier accepted a bad program (wanted '%s')", needle);
  cr_assert(strstr(core_error_msg(), needle), "message '%s' lacks '%s'", core_error_msg(), needle);
}

Test(verify, missing_backward) {
  sched_program pr = compiled(SCHED_1F1B, 2, 1, 3);
  erase(&pr, 1, find(&pr, 1, SCHED_BACKWARD, 2));
  expect_fail(&pr, "has no backward");
  sched_program_free(&pr);
}

Test(verify, send_without_receive) {
  sched_program pr = compiled(SCHED_1F1B, 2, 1, 3);
  erase(&pr, 1, find(&pr, 1, SCHED_RECV_ACT, 1));
  expect_fail(&pr, "no matching partner");
  sched_program_free(&pr);
}

/* Two ranks that each wait to receive first. */
Test(verify, both_receive_first_deadlocks) {
  sched_program pr = compiled(SCHED_1F1B, 2, 1, 1);
  /* rank 1 receives the activation, then sends the gradient; rank 0 sends, then receives.
   * Move rank 0's RECV_GRAD in front of its SEND_ACT (and its F): both now receive first. */
  int s = find(&pr, 0, SCHED_SEND_ACT, 0), rg = find(&pr, 0, SCHED_RECV_GRAD, 0);
  sched_instr recv = pr.streams[0].ins[rg];
  erase(&pr, 0, rg);
  int ld = find(&pr, 0, SCHED_LOAD_MICROBATCH, 0);
  memmove(&pr.streams[0].ins[ld + 1], &pr.streams[0].ins[ld], sizeof(sched_instr) * (size_t)(pr.streams[0].len - ld));
  pr.streams[0].ins[ld] = recv;
  pr.streams[0].len++;
  (void)s;
  expect_fail(&pr, "deadlock");
  cr_assert(strstr(core_error_msg(), "rank 0 waits") && strstr(core_error_msg(), "rank 1 waits"),
            "%s", core_error_msg());
  sched_program_free(&pr);
}

Test(verify, slot_reused_while_live) {
  sched_program pr = compiled(SCHED_GPIPE, 2, 1, 4);
  /* GPipe keeps all 4 micro-batches live: give micro-batch 1 the slot of micro-batch 0 */
  int slot0 = pr.streams[0].ins[find(&pr, 0, SCHED_FORWARD, 0)].slot;
  for (int i = 0; i < pr.streams[0].len; i++)
    if (pr.streams[0].ins[i].mb == 1) pr.streams[0].ins[i].slot = slot0;
  expect_fail(&pr, "still live");
  sched_program_free(&pr);
}

Test(verify, slot_out_of_range) {
  sched_program pr = compiled(SCHED_1F1B, 2, 1, 4);
  pr.nslots[0] = 1;
  expect_fail(&pr, "outside the rank");
  sched_program_free(&pr);
}

Test(verify, backward_before_forward) {
  sched_program pr = compiled(SCHED_GPIPE, 1, 1, 2);
  int f = find(&pr, 0, SCHED_FORWARD, 1), b = find(&pr, 0, SCHED_BACKWARD, 1);
  sched_instr t = pr.streams[0].ins[f];
  pr.streams[0].ins[f] = pr.streams[0].ins[b];
  pr.streams[0].ins[b] = t;
  expect_fail(&pr, "backward before the forward");
  sched_program_free(&pr);
}

Test(verify, duplicate_forward_and_wrong_peer) {
  sched_program pr = compiled(SCHED_1F1B, 3, 1, 2);
  int f = find(&pr, 1, SCHED_FORWARD, 0);
  sched_push(&pr, 1, pr.streams[1].ins[f]);
  expect_fail(&pr, "duplicate");
  sched_program_free(&pr);
  pr = compiled(SCHED_1F1B, 3, 1, 2);
  pr.streams[0].ins[find(&pr, 0, SCHED_SEND_ACT, 0)].peer = 2;
  expect_fail(&pr, "neighbouring stage is on rank 1");
  sched_program_free(&pr);
}

Test(verify, reduce_grads_before_backward) {
  sched_program pr = compiled(SCHED_1F1B, 1, 1, 2);
  int rg = find(&pr, 0, SCHED_REDUCE_GRADS, -1);
  sched_instr t = pr.streams[0].ins[rg];
  erase(&pr, 0, rg);
  memmove(&pr.streams[0].ins[1], &pr.streams[0].ins[0], sizeof(sched_instr) * (size_t)pr.streams[0].len);
  pr.streams[0].ins[0] = t;
  pr.streams[0].len++;
  expect_fail(&pr, "REDUCE_GRADS before");
  sched_program_free(&pr);
}

Test(verify, garbage_fields_never_crash) {
  sched_program pr = compiled(SCHED_INTERLEAVED, 2, 2, 3);
  unsigned seed = 1;
  for (int trial = 0; trial < 500; trial++) {
    sched_program q = compiled(SCHED_INTERLEAVED, 2, 2, 3);
    int r = trial % 2;
    int i = (int)((seed = seed * 1103515245u + 12345u) >> 8) % q.streams[r].len;
    sched_instr *in = &q.streams[r].ins[i];
    int v = (int)((seed = seed * 1103515245u + 12345u) >> 8) % 9 - 3;
    switch (trial % 5) {
    case 0: in->op = (uint8_t)(v + 6); break;
    case 1: in->mb = v; break;
    case 2: in->chunk = v; break;
    case 3: in->peer = v; break;
    default: in->slot = v; break;
    }
    int rc = sched_verify(&q);
    cr_assert(rc == CORE_OK || rc == CORE_EINPUT);
    sched_program_free(&q);
  }
  sched_program_free(&pr);
}

/* Each input check of the replay, one bad program each: the op runs one instruction before
 * what it needs. */
Test(verify, forward_before_its_load) {
  sched_program pr = compiled(SCHED_1F1B, 2, 1, 2);
  /* rank 0 holds the first stage (inputs), rank 1 the last (labels) */
  swap(&pr, 0, find(&pr, 0, SCHED_LOAD_MICROBATCH, 0), find(&pr, 0, SCHED_FORWARD, 0));
  expect_fail(&pr, "forward of the first stage before its LOAD_MICROBATCH");
  sched_program_free(&pr);
  pr = compiled(SCHED_1F1B, 2, 1, 2);
  swap(&pr, 1, find(&pr, 1, SCHED_LOAD_MICROBATCH, 1), find(&pr, 1, SCHED_FORWARD, 1));
  expect_fail(&pr, "forward of the last stage before its labels were loaded");
  sched_program_free(&pr);
}

Test(verify, load_on_a_middle_stage) {
  sched_program pr = compiled(SCHED_1F1B, 3, 1, 2);
  int f = find(&pr, 1, SCHED_FORWARD, 0);
  sched_instr ld = pr.streams[1].ins[f];
  ld.op = SCHED_LOAD_MICROBATCH;
  insert(&pr, 1, f, ld);
  expect_fail(&pr, "load on a stage that is neither first nor last");
  sched_program_free(&pr);
}

Test(verify, forward_before_its_activation_arrives) {
  sched_program pr = compiled(SCHED_1F1B, 2, 1, 2);
  swap(&pr, 1, find(&pr, 1, SCHED_RECV_ACT, 0), find(&pr, 1, SCHED_FORWARD, 0));
  expect_fail(&pr, "forward before its input activation was received");
  sched_program_free(&pr);
}

/* p = 3: the middle stage is the last one that receives a gradient. */
Test(verify, backward_before_its_gradient_arrives) {
  for (int r = 0; r < 2; r++) {
    sched_program pr = compiled(SCHED_1F1B, 3, 1, 2);
    swap(&pr, r, find(&pr, r, SCHED_RECV_GRAD, 1), find(&pr, r, SCHED_BACKWARD, 1));
    expect_fail(&pr, "backward before its output gradient was received");
    cr_assert(strstr(core_error_msg(), r ? "rank 1 instruction" : "rank 0 instruction"), "%s", core_error_msg());
    sched_program_free(&pr);
  }
}

Test(verify, send_before_its_producer_ran) {
  sched_program pr = compiled(SCHED_1F1B, 2, 1, 2);
  swap(&pr, 0, find(&pr, 0, SCHED_FORWARD, 0), find(&pr, 0, SCHED_SEND_ACT, 0));
  expect_fail(&pr, "activation sent before its forward ran");
  sched_program_free(&pr);
  pr = compiled(SCHED_1F1B, 2, 1, 2);
  swap(&pr, 1, find(&pr, 1, SCHED_BACKWARD, 0), find(&pr, 1, SCHED_SEND_GRAD, 0));
  expect_fail(&pr, "gradient sent before its backward ran");
  sched_program_free(&pr);
}

Test(verify, weight_half_before_input_half) {
  sched_program pr = compiled(SCHED_ZB_H1, 2, 1, 2);
  swap(&pr, 1, find(&pr, 1, SCHED_BACKWARD_INPUT, 0), find(&pr, 1, SCHED_BACKWARD_WEIGHT, 0));
  expect_fail(&pr, "weight-gradient backward (W) before its input-gradient backward (I)");
  sched_program_free(&pr);
}

Test(verify, input_half_without_weight_half) {
  sched_program pr = compiled(SCHED_ZB_H1, 2, 1, 2);
  erase(&pr, 0, find(&pr, 0, SCHED_BACKWARD_WEIGHT, 1));
  expect_fail(&pr, "has an input-gradient backward (I) but no weight-gradient one (W)");
  sched_program_free(&pr);
}

/* One backward (a full one, or a weight half) still to come is one too many. */
Test(verify, reduce_grads_before_the_last_backward) {
  sched_family fam[2] = {SCHED_1F1B, SCHED_ZB_H1};
  sched_op last[2] = {SCHED_BACKWARD, SCHED_BACKWARD_WEIGHT};
  for (int k = 0; k < 2; k++) {
    sched_program pr = compiled(fam[k], 1, 1, 3);
    int rg = find(&pr, 0, SCHED_REDUCE_GRADS, -1), b = find(&pr, 0, last[k], 2);
    sched_instr t = pr.streams[0].ins[rg];
    erase(&pr, 0, rg);
    insert(&pr, 0, b, t);
    expect_fail(&pr, "REDUCE_GRADS before every backward of this rank finished");
    sched_program_free(&pr);
  }
}

Test(verify, backward_in_a_forward_only_program) {
  sched_program pr = compiled(SCHED_INFERENCE, 1, 1, 1);
  sched_instr b = pr.streams[0].ins[find(&pr, 0, SCHED_FORWARD, 0)];
  b.op = SCHED_BACKWARD;
  sched_push(&pr, 0, b);
  expect_fail(&pr, "has a backward in a forward-only program");
  sched_program_free(&pr);
}

Test(verify, transfer_past_the_end_of_the_pipeline) {
  sched_program pr = compiled(SCHED_1F1B, 2, 1, 2);
  /* rank 1 holds the last stage: an activation sent on from there goes nowhere */
  int f = find(&pr, 1, SCHED_FORWARD, 0);
  sched_instr snd = pr.streams[1].ins[f];
  snd.op = SCHED_SEND_ACT, snd.peer = 0;
  insert(&pr, 1, f + 1, snd);
  expect_fail(&pr, "transfer past the end of the pipeline");
  sched_program_free(&pr);
}

Test(verify, tied_reduction_with_itself) {
  sched_shape sh = {.family = SCHED_1F1B, .p = 2, .v = 1, .m = 2, .tied = 1};
  sched_costs c = sched_costs_unit();
  sched_program pr;
  cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_OK, "%s", core_error_msg());
  pr.streams[0].ins[find(&pr, 0, SCHED_REDUCE_TIED_GRADS, -1)].peer = 0;
  expect_fail(&pr, "tied-gradient reduction names an invalid peer rank");
  sched_program_free(&pr);
}

/* Messages are matched by (direction, receiving stage, micro-batch), as MPI tags are: rank 1
 * receiving micro-batch 0 of chunk 1 first, while rank 0 sends that of chunk 0 first, deadlocks
 * even though peer, direction and micro-batch agree. */
Test(verify, receives_of_two_chunks_swapped_deadlock) {
  sched_program pr = compiled(SCHED_INTERLEAVED, 2, 2, 2);
  int a = find_chunk(&pr, 1, SCHED_RECV_ACT, 0, 0), b = find_chunk(&pr, 1, SCHED_RECV_ACT, 0, 1);
  pr.streams[1].ins[a].chunk = 1, pr.streams[1].ins[b].chunk = 0;
  int sa = pr.streams[1].ins[a].slot;
  pr.streams[1].ins[a].slot = pr.streams[1].ins[b].slot, pr.streams[1].ins[b].slot = sa;
  expect_fail(&pr, "deadlock");
  sched_program_free(&pr);
}

/* A slot's aside part is named only over its pair's range (first instruction to the last that is
 * not its W), never shared by two pairs whose ranges overlap, and kept for the whole range. */
Test(verify, aside_part_misuse) {
  sched_shape sh = {.family = SCHED_ZB_H1, .p = 4, .v = 1, .m = 8};
  sched_costs c = sched_costs_unit();
  sched_program pr;
  cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_OK);
  cr_assert_eq(sched_verify(&pr), CORE_OK);
  sched_stream *st = &pr.streams[0];
  int w = -1, f0 = -1, f1 = -1;
  for (int i = 0; i < st->len; i++) {
    if (st->ins[i].op == SCHED_BACKWARD_WEIGHT && w < 0) w = i;
    if (st->ins[i].op == SCHED_FORWARD && st->ins[i].mb == 0) f0 = i;
    if (st->ins[i].op == SCHED_FORWARD && st->ins[i].mb == 1) f1 = i;
  }
  cr_assert(w >= 0 && f0 >= 0 && f1 >= 0);
  /* a W that still names the aside part */
  cr_assert_eq(st->ins[w].aslot, -1);
  st->ins[w].aslot = 0;
  cr_assert_eq(sched_verify(&pr), CORE_EINPUT);
  cr_expect(strstr(core_error_msg(), "after the pair's last use"), "%s", core_error_msg());
  st->ins[w].aslot = -1;
  /* two pairs open at once on one aside part (micro-batches 0 and 1 are both forwarded before
   * either's I on rank 0) */
  int keep = st->ins[f1].aslot;
  st->ins[f1].aslot = st->ins[f0].aslot;
  cr_assert_eq(sched_verify(&pr), CORE_EINPUT);
  st->ins[f1].aslot = keep;
  cr_assert_eq(sched_verify(&pr), CORE_OK);
  sched_program_free(&pr);
}

/* zb-h1 at the zero-bubble paper's costs keeps W's pending beside its open forwards: it holds
 * more slots than 1F1B does on some rank, but no more aside parts (held only from F to I, the
 * forwards 1F1B keeps open) than 1F1B holds slots, on any rank. */
Test(verify, aside_parts_follow_the_open_forwards) {
  sched_costs c = {.f = 18.522, .b = 18.086, .w = 9.337, .comm = 0.601};
  sched_shape zb = {.family = SCHED_ZB_H1, .p = 8, .v = 1, .m = 24}, ob = zb;
  ob.family = SCHED_1F1B;
  sched_program z, o;
  cr_assert_eq(sched_compile(&zb, &c, &z), CORE_OK);
  cr_assert_eq(sched_compile(&ob, &c, &o), CORE_OK);
  int more = 0;
  for (int r = 0; r < 8; r++) {
    cr_assert_leq(z.naslots[r], o.nslots[r], "rank %d: zb-h1 keeps %d aside parts, 1f1b %d slots", r, z.naslots[r],
                  o.nslots[r]);
    cr_assert_leq(z.naslots[r], z.nslots[r]);
    more |= z.nslots[r] > o.nslots[r];
  }
  cr_assert(more, "zb-h1 holds no more slots than 1f1b anywhere: the test shows nothing");
  sched_program_free(&z), sched_program_free(&o);
}
