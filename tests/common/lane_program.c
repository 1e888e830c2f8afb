#include "tests/common/lane_program.h"

#include "core/error.h"
#include "schedule/internal.h"

static void put(sched_program *pr, int r, sched_op op, int mb, int peer) {
  sched_push(pr, r, (sched_instr){.op = op, .mb = mb, .chunk = 0, .peer = peer, .slot = -1, .aslot = -1});
}

int lane_program(sched_program *pr) {
  int rc = sched_program_init(pr, SCHED_CUSTOM, 2, 1, 2, NULL);
  if (rc) return rc;
  for (int j = 0; j < 2; j++)
    put(pr, 0, SCHED_LOAD_MICROBATCH, j, -1), put(pr, 0, SCHED_FORWARD, j, -1), put(pr, 0, SCHED_SEND_ACT, j, 1);
  put(pr, 0, SCHED_RECV_GRAD, 0, 1), put(pr, 0, SCHED_RECV_GRAD, 1, 1);
  put(pr, 0, SCHED_BACKWARD, 0, -1), put(pr, 0, SCHED_BACKWARD, 1, -1);
  for (int j = 0; j < 2; j++)
    put(pr, 1, SCHED_RECV_ACT, j, 0), put(pr, 1, SCHED_LOAD_MICROBATCH, j, -1), put(pr, 1, SCHED_FORWARD, j, -1);
  for (int j = 0; j < 2; j++) put(pr, 1, SCHED_BACKWARD, j, -1), put(pr, 1, SCHED_SEND_GRAD, j, 0);
  for (int r = 0; r < 2; r++) sched_assign_slots(pr, r);
  return CORE_OK;
}
