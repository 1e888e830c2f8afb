/* pipe/sample.h: text generation from a checkpoint (byte-level models, or GPT-2's BPE with its
 * vocab.json and merges.txt), in one process. */
#ifndef BRIGADE_PIPE_SAMPLE_H
#define BRIGADE_PIPE_SAMPLE_H

#include <stdint.h>
#include <stdio.h>

typedef struct {
  const char *checkpoint; /* directory with `latest` */
  const char *prompt;
  int tokens;             /* how many to generate */
  double temperature;     /* 0: greedy */
  uint64_t seed;
  const char *vocab, *merges; /* GPT-2's tokenizer files (both, or neither: byte-level) */
  const char *tokenizer;      /* llm.c's gpt2_tokenizer.bin: decoding only (an empty prompt starts at
                               * its end-of-text token, as llm.c samples) */
} pipe_sample_opts;

/* Writes the prompt and its continuation to out. Without --vocab/--merges/--tokenizer in o,
 * the checkpoint's saved config's tokenizer keys (pipe_tokenizer_check) are used. */
int pipe_sample(const pipe_sample_opts *o, FILE *out);

struct core_config;
/* The config's tokenizer keys, which point to files brigade does not ship: tokenizer.vocab and
 * tokenizer.merges (GPT-2's vocab.json and merges.txt, together), or tokenizer.file (llm.c's
 * gpt2_tokenizer.bin). Each file is read and checked against a model of vocabulary V; an error
 * names the key and its line. No keys: nothing to check. */
int pipe_tokenizer_check(const struct core_config *c, int V);

#endif
