/* tests/common/fixture_model.h: the model and batch of the PyTorch cross-check, shared by the
 * program that dumps them for PyTorch and the test that compares against PyTorch's answer. */
#ifndef BRIGADE_TESTS_FIXTURE_MODEL_H
#define BRIGADE_TESTS_FIXTURE_MODEL_H

#include "layers/layers.h"

enum { FIX_B = 2 };

/* Builds tests/fixtures/tiny_gpt.cfg into m and one chunk holding it all, with weights widened
 * 5x from init (so every path carries signal) and a fixed batch in slot 0. 0 on success. */
int fixture_build(layers_model *m, layers_chunk *ch);
/* Forward and full backward of slot 0 with the mean loss, then the tied sum (as
 * REDUCE_TIED_GRADS does); returns the mean loss. */
double fixture_loss_and_grads(layers_chunk *ch);

#endif
