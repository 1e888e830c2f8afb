#include "tests/common/fixture_model.h"

#include <string.h>

#include "core/config.h"
#include "core/rng.h"

int fixture_build(layers_model *m, layers_chunk *ch) {
  core_config *c;
  if (core_config_load(&c, "tests/fixtures/tiny_gpt.cfg")) return -1;
  memset(m, 0, sizeof *m);
  int rc = layers_model_build(m, c, 32);
  core_config_free(c);
  if (rc) return rc;
  kernels_cpu_init(1);
  rc = layers_chunk_init(ch, m, 0, m->n, kernels_cpu_ops(), FIX_B, m->T, 1);
  if (rc) return rc;
  for (size_t i = 0; i < ch->nparams; i++) ch->params[i] *= 5.0f;
  int head = m->n - 2; /* the tied head starts equal to the embedding's wte (or shares it) */
  if (ch->layers[head].params != ch->layers[0].params)
    memcpy(ch->layers[head].params, ch->layers[0].params, sizeof(float) * (size_t)m->V * m->C);
  core_rng r = core_rng_keyed(11, 22, 33, 44);
  for (int i = 0; i < FIX_B * m->T; i++) {
    layers_chunk_tokens(ch, 0)[i] = (int32_t)core_rng_below(&r, (uint64_t)m->V);
    layers_chunk_targets(ch, 0)[i] = (int32_t)core_rng_below(&r, (uint64_t)m->V);
  }
  return 0;
}

double fixture_loss_and_grads(layers_chunk *ch) {
  int N = FIX_B * ch->T;
  layers_chunk_forward(ch, 0);
  double loss = layers_chunk_loss_sum(ch, 0) / N;
  memset(ch->grads, 0, sizeof(float) * ch->nparams);
  layers_chunk_backward_input(ch, 0, 1.0f / (float)N);
  layers_chunk_backward_weight(ch, 0);
  layer *e = &ch->layers[0], *h = &ch->layers[ch->n - 2];
  size_t n = (size_t)e->V * e->C;
  for (size_t i = 0; i < n; i++) e->grads[i] += h->grads[i]; /* the whole wte gradient, in both views */
  memcpy(h->grads, e->grads, sizeof(float) * n);
  return loss;
}
