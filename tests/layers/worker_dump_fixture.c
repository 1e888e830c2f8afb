/* Writes the PyTorch cross-check's inputs (tests/fixtures/make_torch_fixture.py reads them):
 * int32 header {nparams, B, T, V, C, NH, blocks}, int32 tokens[B*T], int32 targets[B*T],
 * float32 params[nparams] in brigade's flat layout. Usage: worker_dump_fixture OUT.bin */
#include <stdio.h>

#include "tests/common/fixture_model.h"

int main(int argc, char **argv) {
  layers_model m;
  layers_chunk ch;
  if (argc != 2 || fixture_build(&m, &ch)) {
    fprintf(stderr, "usage: worker_dump_fixture OUT.bin (run from the repository root)\n");
    return 2;
  }
  FILE *f = fopen(argv[1], "wb");
  if (!f) return 1;
  int hdr[7] = {(int)ch.nparams, FIX_B, m.T, m.V, m.C, m.NH, m.n - 4};
  fwrite(hdr, sizeof hdr, 1, f);
  fwrite(layers_chunk_tokens(&ch, 0), sizeof(int), (size_t)(FIX_B * m.T), f);
  fwrite(layers_chunk_targets(&ch, 0), sizeof(int), (size_t)(FIX_B * m.T), f);
  fwrite(ch.params, sizeof(float), ch.nparams, f);
  int bad = ferror(f);
  fclose(f);
  printf("loss (brigade, fp32): %.9g\n", fixture_loss_and_grads(&ch));
  layers_chunk_free(&ch);
  layers_model_free(&m);
  return bad;
}
