/* tests/common/ops_table.c: every entry of the op table, in ops.h's order. */
#include "tests/common/ops_table.h"

#include <stddef.h>

const char *test_ops_missing(const kernels_ops *t) {
#define HAS(f)                                                                                     \
  if (!t->f) return #f;
  HAS(alloc);
  HAS(free);
  HAS(to_device);
  HAS(to_host);
  HAS(sync);
  HAS(copy_out);
  HAS(copy_in);
  HAS(copy_wait);
  HAS(copy_sync);
  HAS(host_alloc);
  HAS(host_free);
  HAS(gemm);
  HAS(matmul_half);
  HAS(gemm_batched);
  HAS(gemm_ld);
  HAS(linear_forward);
  HAS(bias_add);
  HAS(bias_grad);
  HAS(gelu_forward);
  HAS(gelu_backward);
  HAS(relu_forward);
  HAS(relu_backward);
  HAS(layernorm_forward);
  HAS(layernorm_backward_input);
  HAS(layernorm_backward_weight);
  HAS(softmax_forward);
  HAS(attention_forward);
  HAS(attention_backward);
  HAS(embedding_forward);
  HAS(embedding_backward);
  HAS(xent_forward);
  HAS(xent_backward);
  HAS(adamw);
  HAS(sgd);
  HAS(axpy);
  HAS(scale);
  HAS(fill);
  HAS(zero);
  HAS(copy);
  HAS(sumsq);
  HAS(nonfinite);
  HAS(cast_f32_to_bf16);
  HAS(cast_bf16_to_f32);
  HAS(cast_f32_to_f16);
  HAS(cast_f16_to_f32);
  HAS(round_bf16);
  HAS(round_fp16);
#undef HAS
  return NULL;
}
