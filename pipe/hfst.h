/* pipe/hfst.h: Hugging Face GPT-2 weights (`model.safetensors`) read into brigade's layers.
 *
 * The file: a little-endian u64 N, N bytes of JSON naming each tensor's dtype, shape and byte
 * range, then the data. GPT-2's names, with or without a `transformer.` prefix: wte.weight
 * [V, C], wpe.weight [maxT, C], h.{i}.ln_1.{weight,bias}, h.{i}.attn.c_attn.{weight [C, 3C], bias},
 * h.{i}.attn.c_proj.{weight [C, C], bias}, h.{i}.ln_2.{weight,bias}, h.{i}.mlp.c_fc.{weight
 * [C, 4C], bias}, h.{i}.mlp.c_proj.{weight [4C, C], bias}, ln_f.{weight,bias}; the head is tied
 * to wte. Conv1D weights are stored [in, out], brigade's [out, in]: they are transposed as read.
 * F32, F16 and BF16 values are read (as fp32). */
#ifndef BRIGADE_PIPE_HFST_H
#define BRIGADE_PIPE_HFST_H

#include <stddef.h>
#include <stdio.h>

#include "core/json.h"
#include "layers/layers.h"

typedef struct {
  FILE *f;
  char path[1024];
  long long data; /* where the data starts in the file */
  long long size; /* the file's bytes */
  core_json *hdr;
  char prefix[16]; /* "" or "transformer." */
  int V, maxT, L, C;
} pipe_hfst;

/* Whether the first bytes of a file look like safetensors (a header length, then '{'). */
int pipe_hfst_sniff(const char *path);
int pipe_hfst_open(pipe_hfst *h, const char *path);
void pipe_hfst_close(pipe_hfst *h);
/* As pipe_llmc_check_model: the model must be the file's GPT-2; errors name tensor and shapes. */
int pipe_hfst_check_model(const pipe_hfst *h, const layers_model *m);
/* Values [lo, hi) of model layer li's flat parameters into dst[0 .. hi - lo). */
int pipe_hfst_read_layer(const pipe_hfst *h, const layers_model *m, int li, size_t lo, size_t hi, float *dst);

/* Writes the model's weights (params[li]: each layer's flat parameters, NULL for those without)
 * as a GPT-2 model.safetensors (F32, no prefix, Conv1D weights [in, out]), to PATH.tmp then a
 * rename; the model must be GPT-2-shaped (as pipe_hfst_check_model). */
int pipe_hfst_write(const char *path, const layers_model *m, float *const *params);

#endif
