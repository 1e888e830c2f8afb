/* The tiny GPT against an independent reference: PyTorch's loss and gradients (float64) for the
 * same weights and batch, committed as tests/fixtures/tiny_gpt_torch.bin by
 * tests/fixtures/make_torch_fixture.py. Loss within 1e-5 relative; each layer's gradient within
 * 1e-5 in relative norm (||g - g_ref|| / ||g_ref||; brigade computes in fp32). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "tests/common/fixture_model.h"

Test(torch_fixture, loss_and_gradients_match_pytorch) {
  layers_model m;
  layers_chunk ch;
  cr_assert_eq(fixture_build(&m, &ch), 0);
  double loss = fixture_loss_and_grads(&ch);
  FILE *f = fopen("tests/fixtures/tiny_gpt_torch.bin", "rb");
  cr_assert(f, "missing tests/fixtures/tiny_gpt_torch.bin");
  /* the fixture lists every layer's gradient in model order, the tied head's too (PyTorch's
   * shared wte gradient, which brigade's head, sharing wte, is compared with after the fold) */
  size_t total = 0;
  for (int i = 0; i < ch.n; i++) total += ch.layers[i].nparams;
  double *ref = malloc(sizeof(double) * (total + 2));
  size_t n = fread(ref, sizeof(double), total + 2, f);
  fclose(f);
  cr_assert_eq(n, total + 1, "fixture holds %zu values, the model's layers %zu + 1", n, total);
  cr_assert(fabs(loss - ref[0]) <= 1e-5 * fabs(ref[0]), "loss %.9g, PyTorch %.9g", loss, ref[0]);
  for (int i = 0, off = 0; i < ch.n; off += (int)ch.layers[i].nparams, i++) {
    const layer *l = &ch.layers[i];
    double d = 0, r = 0;
    for (size_t k = 0; k < l->nparams; k++) {
      double g = l->grads[k], want = ref[1 + off + k];
      d += (g - want) * (g - want), r += want * want;
    }
    if (l->nparams == 0) continue;
    cr_assert(r > 0, "layer %s: PyTorch gradient is zero", l->name);
    cr_assert(sqrt(d / r) <= 1e-5, "layer %s (%s): relative gradient error %.3g", l->name, l->type->name, sqrt(d / r));
  }
  free(ref);
  layers_chunk_free(&ch);
  layers_model_free(&m);
}
