/* libFuzzer target: bytes as a GPT-2 weights file for --init-from and `convert`: a Hugging Face
 * model.safetensors or an llm.c checkpoint (told apart by their first bytes, as the trainer does),
 * opened, checked against a small GPT-2 model and every layer read. Built by `make fuzz` with
 * clang. The seeds are that model's own weights in both formats, written by brigade's writers
 * into the corpus directory at start-up (so they always match what the readers expect). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/config.h"
#include "core/error.h"
#include "layers/layers.h"
#include "pipe/hfst.h"
#include "pipe/llmc.h"
#include "tests/fuzz/fuzz_files.h"

static const char model_cfg[] =
    "model = { vocab_size = 16; seq_len = 4; d_model = 8; n_heads = 2;\n"
    "  layers = ( { type = \"embedding\"; name = \"wte\"; },\n"
    "             { type = \"transformer_block\"; name = \"block\"; repeat = 2; },\n"
    "             { type = \"layernorm\"; name = \"ln_f\"; },\n"
    "             { type = \"lm_head\"; name = \"head\"; tie = \"wte\"; },\n"
    "             { type = \"cross_entropy\"; name = \"loss\"; } ); };\n";

static layers_model model;

static void build_model(void) {
  core_config *c = NULL;
  if (core_config_load_string(&c, model_cfg, "fuzz_weights.cfg") || layers_model_build(&model, c, 16)) {
    fprintf(stderr, "fuzz_weights: the model does not build: %s\n", core_error_msg());
    abort();
  }
  core_config_free(c);
}

/* The model's weights (small values, any will do) in both formats, into dir. */
static void write_seeds(const char *dir) {
  float *params[16] = {0};
  for (int i = 0; i < model.n && i < 16; i++) {
    params[i] = malloc(sizeof(float) * (model.layers[i].nparams + 1));
    for (size_t k = 0; k < model.layers[i].nparams; k++) params[i][k] = (float)((int)(k % 13) - 6) / 8;
  }
  char out[4096];
  snprintf(out, sizeof out, "%s/seed.safetensors", dir);
  if (pipe_hfst_write(out, &model, params)) fprintf(stderr, "fuzz_weights: %s\n", core_error_msg());
  snprintf(out, sizeof out, "%s/seed_llmc.bin", dir);
  if (pipe_llmc_write(out, &model, params)) fprintf(stderr, "fuzz_weights: %s\n", core_error_msg());
  for (int i = 0; i < 16; i++) free(params[i]);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  build_model();
  const char *dir = fuzz_corpus_dir(*argc, *argv);
  if (dir) write_seeds(dir);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_input_file("weights", ".bin", data, size);
  pipe_hfst hh;
  pipe_llmc lh;
  int st = pipe_hfst_sniff(path);
  int rc = st ? pipe_hfst_open(&hh, path) : pipe_llmc_open(&lh, path);
  if (rc == CORE_OK) {
    rc = st ? pipe_hfst_check_model(&hh, &model) : pipe_llmc_check_model(&lh, &model);
    for (int i = 0; i < model.n && rc == CORE_OK; i++) {
      if (model.layers[i].tied_to >= 0) continue; /* the head: a view of the embedding's wte */
      size_t n = model.layers[i].nparams;
      float *dst = malloc(sizeof(float) * (n + 1));
      /* the whole layer, then a window of it (a ZeRO-3 shard) */
      rc = st ? pipe_hfst_read_layer(&hh, &model, i, 0, n, dst) : pipe_llmc_read_layer(&lh, &model, i, 0, n, dst);
      if (rc == CORE_OK && n > 2)
        rc = st ? pipe_hfst_read_layer(&hh, &model, i, 1, n - 1, dst) : pipe_llmc_read_layer(&lh, &model, i, 1, n - 1, dst);
      free(dst);
    }
    if (st) pipe_hfst_close(&hh);
    else pipe_llmc_close(&lh);
  }
  if (strlen(core_error_msg()) >= 1024) abort(); /* messages stay bounded */
  unlink(path);
  return 0;
}
