/* pipe/runner_internal.h: what pipe/runner.c and pipe/update.c share (not for other callers). */
#ifndef BRIGADE_PIPE_RUNNER_INTERNAL_H
#define BRIGADE_PIPE_RUNNER_INTERNAL_H

#include <stddef.h>

#include "kernels/ops.h"
#include "pipe/runner.h"

/* x rounded in place to the run's 16-bit precision (bf16 or fp16; nothing in fp32) */
void runner_round_to(const pipe_runner *rn, const kernels_ops *ops, float *x, size_t n);
/* REDUCE_GRADS: each chunk's gradients over the data-parallel group (ZeRO's reduce) */
int runner_reduce_grads(pipe_runner *rn);
/* OPTIMIZER_STEP: the norm, the overflow check and the update (or, with post-validation, the
 * update before the norm is known) */
int runner_optimizer_step(pipe_runner *rn);

#endif
