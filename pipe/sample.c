/* pipe/sample.c: load the latest checkpoint into one chunk holding the whole model and
 * generate: the window is the last T tokens, padded at the end (causal attention keeps the
 * padding out of the positions that matter), and the next token comes from the head's logits at
 * the last real position. */
#include "pipe/sample.h"

#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "core/error.h"
#include "core/rng.h"
#include "pipe/bpe.h"
#include "pipe/ckpt_model.h"

static int pick(const float *logits, int V, double temp, core_rng *r) {
  int best = 0;
  for (int i = 1; i < V; i++) best = logits[i] > logits[best] ? i : best;
  if (temp <= 0) return best;
  double sum = 0, u = core_rng_uniform(r);
  double *p = core_malloc(sizeof(double) * (size_t)V);
  for (int i = 0; i < V; i++) sum += (p[i] = exp((logits[i] - logits[best]) / temp));
  int k = V - 1;
  for (int i = 0; i < V; i++) {
    u -= p[i] / sum;
    if (u < 0) {
      k = i;
      break;
    }
  }
  free(p);
  return k;
}

/* llm.c's tokenizer file: a header of 256 uint32 (magic 20240328, version 1 or 2, vocabulary,
 * version 2: the end-of-text id), then each token as a length byte and its bytes */
typedef struct {
  char **tok;
  unsigned char *len;
  int n, eot;
} llmc_tok;

static int llmc_tok_load(llmc_tok *t, const char *path) {
  memset(t, 0, sizeof *t);
  FILE *f = fopen(path, "rb");
  if (!f) return core_error_set(CORE_EINPUT, "cannot open tokenizer %s", path);
  uint32_t h[256];
  int rc = CORE_OK;
  if (fread(h, sizeof h, 1, f) != 1 || h[0] != 20240328 || (h[1] != 1 && h[1] != 2) || h[2] < 1 || h[2] > (1u << 24))
    rc = core_error_set(CORE_EINPUT, "%s: not an llm.c tokenizer file (magic 20240328, version 1 or 2)", path);
  if (!rc && (h[1] == 2 ? h[3] >= h[2] : h[2] <= 50256)) /* sampling starts from it: one of the tokens */
    rc = core_error_set(CORE_EINPUT, "%s: its end-of-text id %u is not one of its %u tokens", path, h[1] == 2 ? h[3] : 50256u,
                        h[2]);
  if (!rc) {
    t->n = (int)h[2], t->eot = h[1] == 2 ? (int)h[3] : 50256;
    t->tok = core_calloc((size_t)t->n, sizeof(char *)), t->len = core_calloc((size_t)t->n, 1);
    for (int i = 0; i < t->n && !rc; i++) {
      unsigned char l;
      if (fread(&l, 1, 1, f) != 1 || !l) {
        rc = core_error_set(CORE_EINPUT, "%s: token %d of %d is cut short or empty", path, i, t->n);
        break;
      }
      t->tok[i] = core_malloc(l), t->len[i] = l;
      if (fread(t->tok[i], 1, l, f) != l) rc = core_error_set(CORE_EINPUT, "%s: token %d of %d is cut short", path, i, t->n);
    }
  }
  fclose(f);
  return rc;
}

static void llmc_tok_free(llmc_tok *t) {
  for (int i = 0; i < t->n && t->tok; i++) free(t->tok[i]);
  free(t->tok), free(t->len);
}

/* one token's text: its byte, or its BPE bytes, or llm.c's tokenizer's */
static void emit_token(const pipe_bpe *bpe, const llmc_tok *lt, int32_t id, FILE *out) {
  if (lt && lt->tok) {
    if (id >= 0 && id < lt->n && id != lt->eot) fwrite(lt->tok[id], 1, lt->len[id], out);
    return;
  }
  if (!bpe) {
    fputc(id, out);
    return;
  }
  char buf[256];
  int k = pipe_bpe_decode(bpe, id, buf, (int)sizeof buf);
  if (k > 0) fwrite(buf, 1, (size_t)k, out);
}

static int generate(const pipe_sample_opts *o, layers_chunk *ch, const pipe_bpe *bpe, const llmc_tok *lt, FILE *out) {
  int T = ch->T, V = ch->layers[0].V, n = (int)strlen(o->prompt);
  size_t ld = (size_t)ch->layers[ch->n - 1].out_width; /* the logits' row length (padded past V) */
  if (lt->tok && lt->n > V)
    return core_error_set(CORE_EINPUT, "the tokenizer's vocabulary (%d) is larger than the model's (%d)", lt->n, V);
  if (lt->tok && n && !bpe)
    return core_error_set(CORE_EINPUT, "llm.c's tokenizer file only decodes: a --prompt needs --vocab and --merges to be "
                          "encoded (or leave it out to start from the end-of-text token)");
  int start_eot = lt->tok && n == 0;
  if (!bpe && !lt->tok && V != 256)
    return core_error_set(CORE_EINPUT, "sampling a model of vocabulary %d needs its tokenizer (--vocab and --merges); "
                          "without them the model must be byte-level (vocabulary 256)", V);
  if (bpe && pipe_bpe_vocab(bpe) > V)
    return core_error_set(CORE_EINPUT, "the tokenizer's vocabulary (%d) is larger than the model's (%d)", pipe_bpe_vocab(bpe), V);
  if (n == 0 && !start_eot) return core_error_set(CORE_EINPUT, "--prompt is empty");
  int32_t *pids = NULL;
  size_t np = (size_t)n;
  if (bpe) {
    int rc = pipe_bpe_encode(bpe, o->prompt, (size_t)n, &pids, &np);
    if (rc) return core_error_prefix("--prompt");
    n = (int)np;
  }
  if (start_eot) n = 1;
  int total = n + o->tokens;
  int32_t *seq = core_malloc(sizeof(int32_t) * (size_t)total);
  for (int i = 0; i < n; i++) seq[i] = start_eot ? lt->eot : bpe ? pids[i] : (unsigned char)o->prompt[i];
  free(pids);
  fputs(o->prompt, out);
  core_rng r = core_rng_keyed(o->seed, 0x5a3, 0, 0);
  int32_t *tok = core_malloc(sizeof(int32_t) * (size_t)T);
  float *logits = core_malloc(sizeof(float) * (size_t)V);
  for (int len = n; len < total; len++) {
    int start = len > T ? len - T : 0, w = len - start;
    memset(tok, 0, sizeof(int32_t) * (size_t)T);
    memcpy(tok, seq + start, sizeof(int32_t) * (size_t)w);
    layers_chunk_set_batch(ch, 0, tok, NULL);
    layers_chunk_forward(ch, 0);
    ch->ops->to_host(logits, layers_chunk_output(ch, 0) + (size_t)(w - 1) * ld, sizeof(float) * (size_t)V);
    int bad = 0;
    while (bad < V && isfinite(logits[bad])) bad++;
    if (bad < V) { /* NaN or inf: neither the argmax nor the softmax would mean anything */
      core_error_set(CORE_ERUNTIME, "checkpoint %s: the model's logit of token %d is %g after %d bytes (its "
                     "weights have diverged); nothing to sample from", o->checkpoint, bad, (double)logits[bad], len);
      fputc('\n', out);
      free(seq), free(tok), free(logits);
      return CORE_ERUNTIME;
    }
    seq[len] = pick(logits, V, o->temperature, &r);
    emit_token(bpe, lt, seq[len], out);
  }
  fputc('\n', out);
  free(seq), free(tok), free(logits);
  return CORE_OK;
}

/* The tokenizer keys of a config (NULL where unset); an error when only one of GPT-2's two files
 * is named, or both forms are. */
static int tokenizer_keys(const core_config *c, const char **vocab, const char **merges, const char **file) {
  *vocab = *merges = *file = NULL;
  int rc = core_config_get_string(c, "tokenizer.vocab", NULL, vocab);
  if (!rc) rc = core_config_get_string(c, "tokenizer.merges", NULL, merges);
  if (!rc) rc = core_config_get_string(c, "tokenizer.file", NULL, file);
  char w[256];
  if (!rc && (!*vocab != !*merges)) {
    core_config_where(c, *vocab ? "tokenizer.vocab" : "tokenizer.merges", -1, w, sizeof w);
    rc = core_error_set(CORE_EINPUT, "tokenizer.vocab and tokenizer.merges go together (GPT-2's vocab.json and "
                        "merges.txt), but only %s is set (%s)", *vocab ? "tokenizer.vocab" : "tokenizer.merges", w);
  }
  if (!rc && *vocab && *file) {
    core_config_where(c, "tokenizer.file", -1, w, sizeof w);
    rc = core_error_set(CORE_EINPUT, "tokenizer.file and tokenizer.vocab/merges name two tokenizers; keep one (%s)", w);
  }
  return rc;
}

int pipe_tokenizer_check(const core_config *c, int V) {
  const char *vocab, *merges, *file;
  int rc = tokenizer_keys(c, &vocab, &merges, &file);
  char w[256];
  if (!rc && vocab) {
    pipe_bpe *bpe = NULL;
    rc = pipe_bpe_load(&bpe, vocab, merges);
    if (!rc && pipe_bpe_vocab(bpe) > V)
      rc = core_error_set(CORE_EINPUT, "the tokenizer's vocabulary (%d) is larger than the model's (%d)",
                          pipe_bpe_vocab(bpe), V);
    pipe_bpe_free(bpe);
    if (rc) {
      core_config_where(c, "tokenizer.vocab", -1, w, sizeof w);
      rc = core_error_prefix("tokenizer.vocab / tokenizer.merges (%s)", w);
    }
  }
  if (!rc && file) {
    llmc_tok lt = {0};
    rc = llmc_tok_load(&lt, file);
    if (!rc && lt.n > V) rc = core_error_set(CORE_EINPUT, "the tokenizer's vocabulary (%d) is larger than the model's (%d)", lt.n, V);
    llmc_tok_free(&lt);
    if (rc) {
      core_config_where(c, "tokenizer.file", -1, w, sizeof w);
      rc = core_error_prefix("tokenizer.file (%s)", w);
    }
  }
  return rc;
}

int pipe_sample(const pipe_sample_opts *o, FILE *out) {
  char *text = NULL;
  int64_t vocab = 0;
  int rc = pipe_ckpt_model_config(o->checkpoint, &text, &vocab);
  core_config *cfg = NULL;
  char name[1100];
  snprintf(name, sizeof name, "%s (saved config)", o->checkpoint);
  if (!rc) rc = core_config_load_string(&cfg, text, name);
  free(text);
  layers_model m = {0};
  if (!rc) rc = layers_model_build(&m, cfg, (int)vocab);
  layers_chunk ch = {0};
  /* every layer but the loss: the chunk's output is the logits (the loss would turn them into
   * probabilities in place) */
  if (!rc) rc = layers_chunk_init(&ch, &m, 0, m.n - 1, kernels_cpu_ops(), 1, m.T, 1);
  if (!rc && m.layers[m.n - 2].out_width < m.V)
    rc = core_error_set(CORE_EINPUT, "the model's second-to-last layer does not give logits");
  if (!rc) {
    /* the checkpoint loader fills parameters (and optimizer state, unused here) by layer */
    float *om = core_calloc(ch.nparams, sizeof(float)), *ov = core_calloc(ch.nparams, sizeof(float));
    pipe_topo topo = {0};
    pipe_runner rn = {.v = 1, .chunks = &ch, .opt_m = &om, .opt_v = &ov, .topo = &topo};
    pipe_ckpt_info info;
    rc = pipe_ckpt_model_load(o->checkpoint, &rn, NULL, &info); /* its own model: nothing to compare */
    free(om), free(ov);
  }
  pipe_sample_opts keyed = *o; /* no tokenizer flags: the ones the run was configured with */
  if (!rc && !o->vocab && !o->merges && !o->tokenizer) {
    rc = tokenizer_keys(cfg, &keyed.vocab, &keyed.merges, &keyed.tokenizer);
    if (rc) rc = core_error_prefix("%s", name);
  }
  o = &keyed;
  pipe_bpe *bpe = NULL;
  if (!rc && (o->vocab || o->merges)) {
    if (!o->vocab || !o->merges) rc = core_error_set(CORE_EINPUT, "--vocab and --merges go together (GPT-2's two files)");
    else rc = pipe_bpe_load(&bpe, o->vocab, o->merges);
  }
  llmc_tok lt = {0};
  if (!rc && o->tokenizer) rc = llmc_tok_load(&lt, o->tokenizer);
  if (!rc) rc = generate(o, &ch, bpe, &lt, out);
  llmc_tok_free(&lt);
  pipe_bpe_free(bpe);
  if (ch.layers) layers_chunk_free(&ch);
  if (m.built) layers_model_free(&m);
  core_config_free(cfg);
  return rc;
}
