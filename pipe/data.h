/* pipe/data.h: training data. Two formats, detected from the file:
 *   - llm.c token files: a header of 256 int32 (magic 20240520, version 1, token count), then
 *     exactly that many uint16 tokens (nanoGPT's header-less .bin files read as bytes);
 *   - anything else is byte-level text: each byte is a token (vocabulary 256).
 * The last `val_fraction` of the tokens is the validation split (or a separate file).
 * Batches are a pure function of (seed, step, global micro-batch): any layout of a run draws
 * the same samples. */
#ifndef BRIGADE_PIPE_DATA_H
#define BRIGADE_PIPE_DATA_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  uint16_t *tok; /* all tokens of the file */
  size_t n;      /* token count */
  size_t n_train;
  int vocab;     /* 256 for bytes; max token + 1 for token files */
  int is_tokens; /* 1: llm.c token file */
  uint16_t *val_tok; /* separate validation tokens (NULL: the tail of tok) */
  size_t n_val;
  /* data.order = "sequential" (llm.c's DataLoader): micro-batch k of the run (k = step x per_step
   * + the global micro-batch index) is the B rows of T tokens from token k x B x T, wrapping to
   * the start when the next would run past the end; 0: positions drawn at random */
  int sequential;
  long per_step; /* global micro-batches per step (m x d) */
  /* after a failed pipe_data_open: the config key the failure concerns ("data.path",
   * "data.val_path" or "data.val_fraction"), for the caller's message; NULL after success */
  const char *failed_key;
} pipe_data;

enum { PIPE_TRAIN = 0, PIPE_VAL = 1 };

/* Opens path (and val_path, may be NULL). Errors are CORE_EINPUT with the path in the message
 * (and, for a split too short, which split), and set d->failed_key. */
int pipe_data_open(pipe_data *d, const char *path, const char *val_path, double val_fraction,
                   int seq_len);
void pipe_data_free(pipe_data *d);

/* Fills inputs and targets [B*T] for one micro-batch: sample b starts at a position drawn from
 * (seed, split, step, data_rank, mb, b), or, in sequential order, at token (k x B + b) x T of
 * its split, k = step x per_step + mb (targets: the next token each). */
void pipe_data_batch(const pipe_data *d, int split, uint64_t seed, long step, int data_rank, int mb,
                     int B, int T, int32_t *inputs, int32_t *targets);

#endif
