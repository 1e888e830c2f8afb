/* cli/cmd_convert.c: `brigade convert CHECKPOINT_DIR OUT --to llmc|safetensors`: a brigade
 * checkpoint of any layout (stages, replicas, ZeRO stage) as llm.c's GPT-2 checkpoint (fp32,
 * version 3), which llm.c's train_gpt2 loads, or as Hugging Face's GPT-2 model.safetensors (F32);
 * brigade reads either back with `train --init-from`. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

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

/* Nothing the user has is written over: an output checkpoint directory must not exist or be
 * empty, an output file must not exist or be empty (an empty placeholder holds nothing). */
static int refuse_existing(const char *out, int want_dir) {
  struct stat sb;
  if (stat(out, &sb) != 0) return CORE_OK;
  if (want_dir && !S_ISDIR(sb.st_mode))
    return core_error_set(CORE_EINPUT, "convert: %s exists and is not a directory; a weights file converts into a new "
                          "checkpoint directory (remove it or pick another path)", out);
  if (!want_dir && S_ISDIR(sb.st_mode))
    return core_error_set(CORE_EINPUT, "convert: %s is a directory; give the path of the file to write", out);
  if (!want_dir && sb.st_size > 0)
    return core_error_set(CORE_EINPUT, "convert: %s exists (%lld bytes) and would be written over; remove it or pick "
                          "another path", out, (long long)sb.st_size);
  if (want_dir) {
    DIR *d = opendir(out);
    if (!d) return CORE_OK; /* unreadable: writing into it reports why */
    struct dirent *e;
    int used = 0;
    while (!used && (e = readdir(d))) /* a lock a failed run left is no content */
      used = strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 && strcmp(e->d_name, ".lock") != 0;
    closedir(d);
    if (used)
      return core_error_set(CORE_EINPUT, "convert: %s is not empty, and converting into it would write over what it "
                            "holds; remove it or pick another path", out);
  }
  return CORE_OK;
}

/* llm.c's file or Hugging Face's safetensors into a brigade checkpoint directory: GPT-2's model
 * described by the file's sizes (heads: from llm.c's header, or --heads for safetensors). */
static int import(const char *in, const char *out, int heads) {
  pipe_llmc lh;
  pipe_hfst hh;
  int st = pipe_hfst_sniff(in);
  int rc = st ? pipe_hfst_open(&hh, in) : pipe_llmc_open(&lh, in);
  if (rc) return rc;
  int V = st ? hh.V : lh.V, T = st ? hh.maxT : lh.maxT, C = st ? hh.C : lh.C, L = st ? hh.L : lh.L;
  int NH = st ? heads : lh.NH;
  if (st && heads < 1) rc = core_error_set(CORE_EINPUT, "convert: a safetensors file does not say GPT-2's head count: give --heads");
  else if (st && C % heads)
    rc = core_error_set(CORE_EINPUT, "convert: --heads %d does not divide %s's width %d", heads, in, C);
  else if (!st && heads && heads != lh.NH) /* the header says; a different --heads would be ignored */
    rc = core_error_set(CORE_EINPUT, "convert: --heads %d, but %s's header says %d heads (leave --heads out for an "
                        "llm.c file)", heads, in, lh.NH);
  char text[1024];
  snprintf(text, sizeof text,
           "model = { vocab_size = %d; seq_len = %d; d_model = %d; n_heads = %d;\n  layers = (\n"
           "    { type = \"embedding\"; name = \"wte\"; },\n    { type = \"transformer_block\"; name = \"h\"; repeat = %d; },\n"
           "    { type = \"layernorm\"; name = \"ln_f\"; },\n    { type = \"lm_head\"; name = \"lm_head\"; tie = \"wte\"; },\n"
           "    { type = \"cross_entropy\"; name = \"loss\"; } ); };\n",
           V, T, C, NH, L);
  core_config *cfg = NULL;
  layers_model m = {0};
  if (!rc) rc = core_config_load_string(&cfg, text, in);
  if (!rc) rc = layers_model_build(&m, cfg, V);
  if (!rc) rc = st ? pipe_hfst_check_model(&hh, &m) : pipe_llmc_check_model(&lh, &m);
  float **params = core_calloc(m.built ? (size_t)m.n : 1, sizeof(float *));
  for (int i = 0; m.built && i < m.n && !rc; i++) {
    size_t n = m.layers[i].nparams;
    if (!n) continue;
    params[i] = core_malloc(sizeof(float) * n);
    rc = st ? pipe_hfst_read_layer(&hh, &m, i, 0, n, params[i]) : pipe_llmc_read_layer(&lh, &m, i, 0, n, params[i]);
  }
  if (!rc) rc = pipe_ckpt_model_write_weights(out, &m, text, params);
  if (!rc) printf("wrote %s: a step-0 checkpoint of %s's weights (%d blocks, vocabulary %d, %d positions, %d heads)\n", out,
                  in, L, V, T, NH);
  for (int i = 0; m.built && i < m.n; i++) free(params[i]);
  free(params);
  if (m.built) layers_model_free(&m);
  if (cfg) core_config_free(cfg);
  if (st) pipe_hfst_close(&hh);
  else pipe_llmc_close(&lh);
  return rc;
}

int cli_convert(int argc, char **argv) {
  const char *in = NULL, *out = NULL, *to = NULL, *hv = NULL;
  int rc = CORE_OK, heads = 0;
  for (int i = 1; i < argc && !rc; i++) {
    cli_arg(&argc, argv, i);
    if (strcmp(argv[i], "--to") == 0) rc = cli_take(argc, argv, &i, &to);
    else if (strcmp(argv[i], "--heads") == 0) {
      if (!(rc = cli_take(argc, argv, &i, &hv))) rc = cli_parse_int("--heads", hv, 1, 4096, &heads);
    } else if (argv[i][0] != '-' && !in) in = argv[i];
    else if (argv[i][0] != '-' && !out) out = argv[i];
    else rc = core_error_set(CORE_EINPUT, "convert: unknown option '%s' (see 'brigade help')", argv[i]);
  }
  if (!rc && (!in || !out))
    rc = core_error_set(CORE_EINPUT, "usage: brigade convert CHECKPOINT_DIR OUT --to llmc|safetensors, or "
                                     "brigade convert GPT2_FILE CHECKPOINT_DIR [--heads N]");
  struct stat sb;
  if (!rc && stat(in, &sb) != 0) rc = core_error_set(CORE_EINPUT, "convert: cannot open %s: %s", in, strerror(errno));
  int from_dir = !rc && S_ISDIR(sb.st_mode);
  if (!rc && !from_dir) { /* a weights file into a checkpoint directory */
    if (to && strcmp(to, "brigade") != 0)
      rc = core_error_set(CORE_EINPUT, "convert: %s is not a checkpoint directory: --to converts a checkpoint directory "
                          "(a weights file converts into one, with no --to)", in);
    if (!rc) rc = refuse_existing(out, 1);
    if (!rc) rc = import(in, out, heads);
    return rc ? fail() : 0;
  }
  if (!rc && !to) rc = core_error_set(CORE_EINPUT, "convert: from a checkpoint directory give --to llmc or --to safetensors");
  if (!rc && hv) /* the checkpoint's config says the heads */
    rc = core_error_set(CORE_EINPUT, "convert: --heads applies to a model.safetensors file read into a checkpoint, not "
                        "to a checkpoint directory (%s)", in);
  if (!rc && strcmp(to, "llmc") != 0 && strcmp(to, "safetensors") != 0)
    rc = core_error_set(CORE_EINPUT, "convert --to: '%s' is not a format brigade writes (llmc, safetensors)", to);
  if (!rc) rc = refuse_existing(out, 0);
  if (rc) return fail();
  char *text = NULL;
  int64_t vocab = 0;
  core_config *cfg = NULL;
  layers_model m = {0};
  rc = pipe_ckpt_model_config(in, &text, &vocab);
  if (!rc) rc = core_config_load_string(&cfg, text, in);
  if (!rc) rc = layers_model_build(&m, cfg, (int)vocab);
  if (!rc) rc = pipe_gpt2_check_shape(&m, in); /* the checkpoint's model, not the output, is at fault */
  float **params = core_calloc(m.built ? (size_t)m.n : 1, sizeof(float *));
  if (!rc) rc = pipe_ckpt_model_params(in, &m, params);
  int st = !strcmp(to, "safetensors");
  if (!rc) rc = st ? pipe_hfst_write(out, &m, params) : pipe_llmc_write(out, &m, params);
  if (!rc) printf("wrote %s: %s (fp32), %d layers, vocabulary %d, %d positions\n", out,
                  st ? "GPT-2 model.safetensors" : "llm.c GPT-2 checkpoint", m.n - 4, m.layers[0].V, m.layers[0].T);
  for (int i = 0; m.built && i < m.n; i++) free(params[i]);
  free(params), free(text);
  if (m.built) layers_model_free(&m);
  if (cfg) core_config_free(cfg);
  return rc ? fail() : 0;
}
