/* pipe/llmc.h: llm.c's GPT-2 checkpoint files (train_gpt2.c's gpt2_124M.bin and friends), read
 * into and written from brigade's layers.
 *
 * The file: 256 int32 of header (magic 20240326; version 3 = fp32 values, 5 = bf16; max_seq_len,
 * vocab_size, num_layers, num_heads, channels, padded_vocab_size), then the tensors in llm.c's
 * order, each layer's tensors stacked over the layers: wte [Vp, C], wpe [maxT, C], ln1w [L, C],
 * ln1b [L, C], qkvw [L, 3C, C], qkvb [L, 3C], attprojw [L, C, C], attprojb [L, C], ln2w [L, C],
 * ln2b [L, C], fcw [L, 4C, C], fcb [L, 4C], fcprojw [L, C, 4C], fcprojb [L, C], lnfw [C],
 * lnfb [C]. The rows of wte past vocab_size are padding: ignored on import, zero on export.
 *
 * The brigade model it maps to is GPT-2's: an embedding (wte, wpe), L transformer blocks (whose
 * parameters are laid out in exactly llm.c's per-layer order, weights [out, in] as llm.c's),
 * a layernorm, an lm_head tied to the embedding and the cross-entropy. */
#ifndef BRIGADE_PIPE_LLMC_H
#define BRIGADE_PIPE_LLMC_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "layers/layers.h"

enum { PIPE_LLMC_MAGIC = 20240326 };

typedef struct {
  FILE *f;
  char path[1024];
  int version; /* 3: fp32, 5: bf16 */
  int maxT, V, L, NH, C, Vp;
  long long off[16]; /* each tensor's first value, in values from the first tensor */
} pipe_llmc;

/* Opens and checks an llm.c checkpoint (header, sizes against the file's length). */
int pipe_llmc_open(pipe_llmc *h, const char *path);
void pipe_llmc_close(pipe_llmc *h);
/* Whether a brigade model is the file's GPT-2: an error names the tensor (or layer) and both
 * shapes, and the config key to change. */
int pipe_llmc_check_model(const pipe_llmc *h, const layers_model *m);
/* Whether a brigade model is GPT-2-shaped, as llm.c's and Hugging Face's files need it: an
 * embedding, transformer blocks with an MLP of 4 x d_model, a layernorm, an lm_head tied to the
 * embedding, the cross-entropy. CORE_EINPUT otherwise, naming `name` (the checkpoint it comes
 * from) and the first layer that differs. */
int pipe_gpt2_check_shape(const layers_model *m, const char *name);
/* Values [lo, hi) of model layer li's flat parameters (as its chunk holds them) into dst[0 ..
 * hi - lo), read from the file (a tied head's are wte's). Only those values are read. */
int pipe_llmc_read_layer(const pipe_llmc *h, const layers_model *m, int li, size_t lo, size_t hi, float *dst);
/* Writes an llm.c version-3 (fp32) checkpoint of a GPT-2-shaped model whose every layer's flat
 * parameters are params[li] (NULL for layers without parameters); the padding rows of wte are
 * zero. The write goes to PATH.tmp, then a rename. */
int pipe_llmc_write(const char *path, const layers_model *m, float *const *params);

#endif
