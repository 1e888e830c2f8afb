/* cli/cmd_convert.c: `brigade convert CHECKPOINT_DIR OUT --to llmc|safetensors`: a brigade
 * checkpoint of any layout (stages, replicas, ZeRO stage) as llm.c's GPT-2 checkpoint (fp32,
 * version 3), which llm.c's train_gpt2 loads, or as Hugging Face's GPT-2 model.safetensors (F32);
 * brigade reads either back with `train --init-from`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/config.h"
#include "core/error.h"
#include "layers/layers.h"
#include "pipe/ckpt_model.h"
#include "pipe/hfst.h"
#include "pipe/llmc.h"

static int fail(void) {
  fprintf(stderr, "brigade: error: %s\n", core_error_msg());
  return core_error_code() == CORE_EINPUT ? 2 : 1;
}

int cli_convert(int argc, char **argv) {
  const char *in = NULL, *out = NULL, *to = NULL;
  int rc = CORE_OK;
  for (int i = 1; i < argc && !rc; i++) {
    if (strcmp(argv[i], "--to") == 0) rc = cli_take(argc, argv, &i, &to);
    else if (argv[i][0] != '-' && !in) in = argv[i];
    else if (argv[i][0] != '-' && !out) out = argv[i];
    else rc = core_error_set(CORE_EINPUT, "convert: unknown option '%s' (see 'brigade help')", argv[i]);
  }
  if (!rc && (!in || !out || !to))
    rc = core_error_set(CORE_EINPUT, "usage: brigade convert CHECKPOINT_DIR OUT --to llmc|safetensors");
  if (!rc && strcmp(to, "llmc") != 0 && strcmp(to, "safetensors") != 0)
    rc = core_error_set(CORE_EINPUT, "convert --to: '%s' is not a format brigade writes (llmc, safetensors)", to);
  if (rc) return fail();
  char *text = NULL;
  int64_t vocab = 0;
  core_config *cfg = NULL;
  layers_model m = {0};
  rc = pipe_ckpt_model_config(in, &text, &vocab);
  if (!rc) rc = core_config_load_string(&cfg, text, in);
  if (!rc) rc = layers_model_build(&m, cfg, (int)vocab);
  float **params = core_calloc(m.built ? (size_t)m.n : 1, sizeof(float *));
  if (!rc) rc = pipe_ckpt_model_params(in, &m, params);
  int st = to && !strcmp(to, "safetensors");
  if (!rc) rc = st ? pipe_hfst_write(out, &m, params) : pipe_llmc_write(out, &m, params);
  if (!rc) printf("wrote %s: %s (fp32), %d layers, vocabulary %d, %d positions\n", out,
                  st ? "GPT-2 model.safetensors" : "llm.c GPT-2 checkpoint", m.n - 4, m.layers[0].V, m.layers[0].T);
  for (int i = 0; m.built && i < m.n; i++) free(params[i]);
  free(params), free(text);
  if (m.built) layers_model_free(&m);
  if (cfg) core_config_free(cfg);
  return rc ? fail() : 0;
}
