/* Schedule CSV: export then import gives the same program; malformed files give one clear error. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "schedule/schedule.h"

/* The file a writer (sched_csv_write or sched_csv_write_comm) makes of pr, as a string. */
static char *write_with(int (*writer)(const sched_program *, FILE *), const sched_program *pr) {
  char *buf = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&buf, &n);
  cr_assert_eq(writer(pr, f), CORE_OK);
  fclose(f);
  return buf;
}
static char *to_csv(const sched_program *pr) { return write_with(sched_csv_write, pr); }
static char *to_csv_comm(const sched_program *pr) { return write_with(sched_csv_write_comm, pr); }

Test(csv, round_trip_every_family) {
  sched_costs c = sched_costs_unit();
  sched_shape shapes[] = {{.family = SCHED_GPIPE, .p = 4, .v = 1, .m = 6}, {.family = SCHED_1F1B, .p = 4, .v = 1, .m = 3},
                          {.family = SCHED_1F1B, .p = 8, .v = 1, .m = 17, .tied = 1}, {.family = SCHED_INTERLEAVED, .p = 4, .v = 2, .m = 6},
                          {.family = SCHED_INTERLEAVED, .p = 3, .v = 4, .m = 8, .tied = 1}, {.family = SCHED_1F1B, .p = 1, .v = 1, .m = 2}};
  for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
    sched_program a, compute, b;
    cr_assert_eq(sched_compile(&shapes[k], &c, &a), CORE_OK, "%s", core_error_msg());
    char *text = to_csv(&a);
    cr_assert_eq(sched_csv_parse(text, "test.csv", &compute), CORE_OK, "%s", core_error_msg());
    compute.tied = shapes[k].tied;
    cr_assert_eq(sched_lower(&compute, &c, &b), CORE_OK, "%s", core_error_msg());
    cr_assert_eq(sched_verify(&b), CORE_OK, "%s", core_error_msg());
    b.family = a.family;
    cr_assert(sched_program_equal(&a, &b), "shape %zu differs after a CSV round trip", k);
    char *again = to_csv(&b);
    cr_assert_str_eq(text, again);
    free(text), free(again);
    sched_program_free(&a), sched_program_free(&b), sched_program_free(&compute);
  }
}

Test(csv, v_shaped_placement_read_from_file) {
  /* two ranks, four stages in a V: rank 0 holds stages 0 and 3, rank 1 holds 1 and 2 */
  const char *text = "0F0,3F0,3B0,0B0\n1F0,2F0,2B0,1B0\n";
  sched_program compute, full;
  cr_assert_eq(sched_csv_parse(text, "v.csv", &compute), CORE_OK, "%s", core_error_msg());
  cr_assert_eq(compute.v, 2);
  cr_assert_eq(compute.rank_of[3], 0);
  cr_assert_eq(compute.rank_of[2], 1);
  sched_costs c = sched_costs_unit();
  cr_assert_eq(sched_lower(&compute, &c, &full), CORE_OK, "%s", core_error_msg());
  cr_assert_eq(sched_verify(&full), CORE_OK, "%s", core_error_msg());
  sched_program_free(&compute), sched_program_free(&full);
}

Test(csv, split_backward_actions) {
  const char *text = "0F0,0F1,0I0,0I1,0W0,0W1\n1F0,1I0,1F1,1I1,1W1,1W0\n";
  sched_program compute, full;
  cr_assert_eq(sched_csv_parse(text, "zb.csv", &compute), CORE_OK, "%s", core_error_msg());
  sched_costs c = sched_costs_unit();
  cr_assert_eq(sched_lower(&compute, &c, &full), CORE_OK, "%s", core_error_msg());
  cr_assert_eq(sched_verify(&full), CORE_OK, "%s", core_error_msg());
  sched_sim_result res;
  cr_assert_eq(sched_simulate(&full, &c, &res, NULL), CORE_OK);
  cr_assert_eq(res.ranks[0].busy, 6.0);
  sched_sim_result_free(&res);
  sched_program_free(&compute), sched_program_free(&full);
}

static void bad(const char *text, const char *needle) {
  sched_program pr;
  core_error_clear();
  cr_assert_eq(sched_csv_parse(text, "bad.csv", &pr), CORE_EINPUT, "accepted: %s", text);
  cr_assert(strstr(core_error_msg(), needle), "'%s' lacks '%s'", core_error_msg(), needle);
}

Test(csv, malformed_files) {
  bad("", "no rows");
  bad("0F0,0X0\n", "bad.csv:1:5: bad action '0X0'");
  bad("0F0,0B0\nF1\n", "bad.csv:2:1");
  bad("0F0,0B0,0SEND_F0\n", "no stage to transfer to or from here");
  bad("0F0,0SEND_F0,0B0\n1F0,1B0,1SEND_B0\n", "1RECV_F0 missing on rank 1 before this action");
  bad("0F0,0B0,0SEND_F0,0RECV_B0\n1RECV_F0,1F0,1B0,1SEND_B0\n", "0RECV_B0 must come before 0B0");
  bad("0F0,(0F1;0X1)OVERLAP_F_B\n", "bad action '0X1'");
  bad("0F0,(0F1;0SEND_F1)OVERLAP_F_B\n", "compute actions only");
  bad("0F0,(0F1;0B0)OVERLAP\n", "bad action");
  bad("0F0,0B0\n0F1,0B1\n", "appears on rank 0 and on rank 1");
  bad("0F0,0B0\n2F0,2B0\n", "stage 1 has no actions");
  bad("0F0,2F0,2B0,0B0\n1F0,1B0\n", "cannot be split evenly");
  bad("0F0\n1F0,1B0\n", "has no backward");
  bad("0F0,0F0,0B0\n", "duplicate");
  bad("0F99999999999999,0B0\n", "bad action");
  bad("0F0,0B0,0W0\n", "both a full backward and a split one");
  /* a stage index past every other one: the message points at that cell, not at the first */
  bad("0F0,0B0\n1F0,1B0\n5F0\n", "bad.csv:3:1: stage 5 needs forwards");
  bad("0F0,1F0,0B0,0F16777215\n", "bad.csv:1:13: micro-batch 16777215 needs forwards");
}

Test(csv, deadlocking_file_is_reported_not_hung) {
  /* rank 0 runs its backward before its forward's gradient can exist: B needs stage 1's B,
   * which needs stage 1's F, which needs stage 0's F, which rank 0 runs only after its B */
  const char *text = "0B0,0F0\n1F0,1B0\n";
  sched_program compute, full;
  cr_assert_eq(sched_csv_parse(text, "dl.csv", &compute), CORE_OK, "%s", core_error_msg());
  sched_costs c = sched_costs_unit();
  core_error_clear();
  cr_assert_eq(sched_lower(&compute, &c, &full), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "rank 0 waits forever at action 0 (0B0)"), "%s", core_error_msg());
  sched_program_free(&compute);
}

/* What a spreadsheet saves on Windows: a UTF-8 byte order mark, CRLF line ends, a blank line.
 * Read as the plain file is, and columns in messages count from after the mark. */
Test(csv, byte_order_mark_and_crlf) {
  sched_program plain, marked;
  cr_assert_eq(sched_csv_parse("0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n", "plain.csv", &plain), CORE_OK, "%s",
               core_error_msg());
  cr_assert_eq(sched_csv_parse("\xef\xbb\xbf" "0F0,0F1,0B0,0B1\r\n\r\n1F0,1B0,1F1,1B1\r\n", "bom.csv", &marked),
               CORE_OK, "%s", core_error_msg());
  cr_assert(sched_program_equal(&plain, &marked));
  sched_program_free(&plain), sched_program_free(&marked);
  bad("\xef\xbb\xbf" "0F0,0X0\r\n", "bad.csv:1:5: bad action '0X0'");
}

/* PyTorch's lowered format: compile --format csv-comm writes a program's transfers beside its
 * compute actions; reading it back checks them against the compute order and gives that same
 * compute order, which lowers to a program that verifies and writes the same file again. */
Test(csv, communication_actions_round_trip) {
  sched_costs c = sched_costs_unit();
  c.comm = 0.25;
  sched_shape shapes[] = {{.family = SCHED_1F1B, .p = 4, .v = 1, .m = 6}, {.family = SCHED_ZB_H1, .p = 3, .v = 1, .m = 5},
                          {.family = SCHED_ZB_V, .p = 3, .v = 2, .m = 6}, {.family = SCHED_INTERLEAVED, .p = 2, .v = 2, .m = 4},
                          {.family = SCHED_DUALPIPE_V, .p = 2, .v = 2, .m = 4}, {.family = SCHED_V_HALF, .p = 4, .v = 2, .m = 8}};
  for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
    sched_program a, want, got, b;
    cr_assert_eq(sched_compile(&shapes[k], &c, &a), CORE_OK, "%s", core_error_msg());
    cr_assert_eq(sched_compile_compute(&shapes[k], &c, &want), CORE_OK, "%s", core_error_msg());
    char *text = to_csv_comm(&a);
    cr_assert(strstr(text, "SEND_F") && strstr(text, "RECV_B"), "%s", text);
    cr_assert_eq(sched_csv_parse(text, "comm.csv", &got), CORE_OK, "%s", core_error_msg());
    got.family = want.family, got.mem_cap = want.mem_cap;
    cr_assert(sched_program_equal(&want, &got), "%s: the compute order differs after a round trip",
              sched_family_name(shapes[k].family));
    cr_assert_eq(sched_lower(&got, &c, &b), CORE_OK, "%s", core_error_msg());
    cr_assert_eq(sched_verify(&b), CORE_OK, "%s", core_error_msg());
    char *again = to_csv_comm(&b);
    cr_assert_str_eq(text, again, "%s", sched_family_name(shapes[k].family));
    free(text), free(again);
    sched_program_free(&a), sched_program_free(&b), sched_program_free(&want), sched_program_free(&got);
  }
}

/* PyTorch's DualPipeV files overlap one micro-batch's forward with another's backward in one
 * cell; brigade runs the pair's two actions one after the other, in the order written. */
Test(csv, overlapped_pairs_run_in_order) {
  const char *pair = "0F0,0F1,(0F2;0I0)OVERLAP_F_B,0W0,(0I1;0W1),0I2,0W2\n1F0,1I0,1F1,1I1,1F2,1I2,1W0,1W1,1W2\n";
  sched_program pr;
  cr_assert_eq(sched_csv_parse(pair, "pair.csv", &pr), CORE_EINPUT); /* a pair needs OVERLAP_F_B */
  const char *text = "0F0,0F1,(0F2;0I0)OVERLAP_F_B,0W0,0I1,0W1,0I2,0W2\n1F0,1I0,1F1,1I1,1F2,1I2,1W0,1W1,1W2\n";
  const char *flat = "0F0,0F1,0F2,0I0,0W0,0I1,0W1,0I2,0W2\n1F0,1I0,1F1,1I1,1F2,1I2,1W0,1W1,1W2\n";
  sched_program a, b;
  cr_assert_eq(sched_csv_parse(text, "pair.csv", &a), CORE_OK, "%s", core_error_msg());
  cr_assert_eq(sched_csv_parse(flat, "flat.csv", &b), CORE_OK, "%s", core_error_msg());
  cr_assert(sched_program_equal(&a, &b));
  sched_program_free(&a), sched_program_free(&b);
}

/* A file with transfers is the program, instruction for instruction: what compile --format
 * csv-comm writes reads back (sched_csv_parse_program) as the very program it was written from,
 * whatever family and latency placed its transfers; a file whose transfers are in another valid
 * order keeps that order, and one whose order deadlocks under blocking send/recv is refused by
 * the verifier. */
Test(csv, communication_actions_are_the_program) {
  sched_costs c = sched_costs_unit();
  sched_shape shapes[] = {{.family = SCHED_1F1B, .p = 4, .v = 1, .m = 6}, {.family = SCHED_ZB_H2, .p = 3, .v = 1, .m = 7},
                          {.family = SCHED_ZB_V, .p = 3, .v = 2, .m = 6}, {.family = SCHED_INTERLEAVED, .p = 3, .v = 2, .m = 5},
                          {.family = SCHED_DUALPIPE_V, .p = 2, .v = 2, .m = 4}, {.family = SCHED_V_MIN, .p = 4, .v = 2, .m = 8},
                          {.family = SCHED_1F1B, .p = 3, .v = 1, .m = 4, .tied = 1}};
  const double comms[] = {0, 0.4, 1.5};
  for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
    for (int ci = 0; ci < 3; ci++) {
      c.comm = comms[ci];
      sched_program a, got;
      cr_assert_eq(sched_compile(&shapes[k], &c, &a), CORE_OK, "%s", core_error_msg());
      char *text = to_csv_comm(&a);
      cr_assert_eq(sched_csv_parse_program(text, "comm.csv", shapes[k].tied, &c, &got), CORE_OK, "%s", core_error_msg());
      got.family = a.family, got.mem_cap = a.mem_cap;
      cr_assert(sched_program_equal(&a, &got), "%s comm %g: the program differs after a round trip",
                sched_family_name(shapes[k].family), c.comm);
      free(text);
      sched_program_free(&a), sched_program_free(&got);
    }
  /* GPipe on 2 ranks, rank 0 sending both activations before receiving any gradient: brigade's
   * own lowering would interleave differently at comm 0; the file's order is what runs */
  const char *mine = "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
                     "1RECV_F0,1F0,1RECV_F1,1F1,1B0,1SEND_B0,1B1,1SEND_B1\n";
  sched_program pr;
  cr_assert_eq(sched_csv_parse_program(mine, "mine.csv", 0, &c, &pr), CORE_OK, "%s", core_error_msg());
  const sched_op want1[] = {SCHED_RECV_ACT, SCHED_FORWARD, SCHED_RECV_ACT, SCHED_FORWARD, SCHED_BACKWARD,
                            SCHED_SEND_GRAD, SCHED_BACKWARD, SCHED_SEND_GRAD, SCHED_REDUCE_GRADS, SCHED_OPTIMIZER_STEP};
  cr_assert_eq(pr.streams[1].len, 12, "rank 1 holds %d instructions", pr.streams[1].len); /* + 2 loads */
  for (int i = 0, j = 0; i < pr.streams[1].len; i++) {
    if (pr.streams[1].ins[i].op == SCHED_LOAD_MICROBATCH) continue;
    cr_assert_eq(pr.streams[1].ins[i].op, want1[j], "rank 1 #%d", i);
    j++;
  }
  sched_program_free(&pr);
  /* both ranks receive before they send: each waits for the other */
  const char *stuck = "0F0,0RECV_B0,0SEND_F0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n";
  core_error_clear();
  cr_assert_eq(sched_csv_parse_program(stuck, "stuck.csv", 0, &c, &pr), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "stuck.csv"), "%s", core_error_msg());
}
