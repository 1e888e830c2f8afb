/* tests/common/lane_program.h: a hand-written 2-rank program (1 chunk, 2 micro-batches) where
 * rank 0 posts both gradient receives before its two backwards:
 *   rank 0: LOAD F SEND_ACT, LOAD F SEND_ACT (mb 0, 1), RECV_GRAD 0, RECV_GRAD 1, B0, B1
 *   rank 1: RECV_ACT LOAD F (mb 0, 1), B0 SEND_GRAD 0, B1 SEND_GRAD 1
 * with its buffer slots assigned. What a receive holding back only its consumer means, for the
 * simulator (tests/schedule/test_sim.c) and the MPI worker (tests/pipe/worker_lane.c). */
#ifndef BRIGADE_TESTS_LANE_PROGRAM_H
#define BRIGADE_TESTS_LANE_PROGRAM_H

#include "schedule/ir.h"

/* CORE_OK, or the error of sched_program_init. */
int lane_program(sched_program *pr);

#endif
