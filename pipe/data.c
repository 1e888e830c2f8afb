#include "pipe/data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "core/file.h"
#include "core/rng.h"

#define TOKEN_MAGIC 20240520
#define TOKEN_HEADER_INTS 256

/* Decodes a file into tokens: an llm.c token file when its header says so, bytes otherwise. The
 * file is read straight into the token array, so memory peaks at the tokens themselves: a token
 * file's 2 bytes a token, a text's 2 bytes a byte (read into the array's upper half, then widened
 * from the front: the byte at i is read before token i, which starts at byte 2i <= i + n, is
 * written). */
static int load_tokens(const char *path, uint16_t **tok, size_t *ntok, int *is_tokens, int *vocab) {
  FILE *f;
  int rc = core_file_open_regular(path, "data file", &f); /* a FIFO is refused, not waited on */
  if (rc) return rc;
  struct stat st;
  if (fstat(fileno(f), &st) != 0) {
    fclose(f);
    return core_error_set(CORE_EINPUT, "cannot read data file %s: %s", path, strerror(errno));
  }
  size_t n = (size_t)st.st_size, hbytes = TOKEN_HEADER_INTS * sizeof(int32_t);
  int32_t hdr[3] = {0, 0, 0};
  if (n >= sizeof hdr && fread(hdr, sizeof hdr, 1, f) != 1) hdr[0] = 0;
  if (hdr[0] == TOKEN_MAGIC) {
    if (n < hbytes) rc = core_error_set(CORE_EINPUT, "token file %s: truncated header", path);
    else if (hdr[1] != 1) rc = core_error_set(CORE_EINPUT, "token file %s: unsupported version %d (expected 1)", path, hdr[1]);
    else if (hdr[2] < 0 || (size_t)hdr[2] != (n - hbytes) / 2 || (n - hbytes) % 2) /* as llm.c's loader: exactly */
      rc = core_error_set(CORE_EINPUT, "token file %s: header says %d tokens but the file holds %zu%s (files joined "
                          "together keep only the first header: give each its own)", path, hdr[2], (n - hbytes) / 2,
                          (n - hbytes) % 2 ? " and an odd byte" : "");
    *ntok = rc ? 0 : (size_t)hdr[2];
    *tok = rc ? NULL : core_malloc(sizeof(uint16_t) * (*ntok + 1));
    if (!rc && (fseek(f, (long)hbytes, SEEK_SET) != 0 || fread(*tok, sizeof(uint16_t), *ntok, f) != *ntok)) {
      free(*tok), *tok = NULL;
      rc = core_error_set(CORE_EINPUT, "cannot read data file %s", path);
    }
    int mx = 0;
    for (size_t i = 0; !rc && i < *ntok; i++) mx = (*tok)[i] > mx ? (*tok)[i] : mx;
    *is_tokens = 1, *vocab = mx + 1;
  } else {
    *ntok = n;
    *tok = core_malloc(sizeof(uint16_t) * (n + 1));
    unsigned char *bytes = (unsigned char *)*tok + n; /* the upper half */
    if (fseek(f, 0, SEEK_SET) != 0 || fread(bytes, 1, n, f) != n || ferror(f)) {
      free(*tok), *tok = NULL;
      rc = core_error_set(CORE_EINPUT, "cannot read data file %s", path);
    }
    for (size_t i = 0; !rc && i < n; i++) (*tok)[i] = bytes[i];
    *is_tokens = 0, *vocab = 256;
  }
  fclose(f);
  return rc;
}

int pipe_data_open(pipe_data *d, const char *path, const char *val_path, double val_fraction,
                   int seq_len) {
  memset(d, 0, sizeof *d);
  d->failed_key = "data.val_fraction";
  if (!(val_fraction >= 0 && val_fraction < 1))
    return core_error_set(CORE_EINPUT, "data.val_fraction must be in [0, 1) (got %g)", val_fraction);
  d->failed_key = "data.path";
  int rc = load_tokens(path, &d->tok, &d->n, &d->is_tokens, &d->vocab);
  if (rc) return rc;
  d->n_train = d->n;
  int val_file = val_path && *val_path; /* a separate validation file, else a fraction of path's */
  if (val_file) {
    int vt, vv;
    rc = load_tokens(val_path, &d->val_tok, &d->n_val, &vt, &vv);
    if (rc) {
      pipe_data_free(d);
      d->failed_key = "data.val_path";
      return rc;
    }
    if (vt != d->is_tokens) { /* one tokenization for both splits */
      rc = core_error_set(CORE_EINPUT, "data.val_path %s is %s but data.path %s is %s: both must be the same "
                          "format", val_path, vt ? "an llm.c token file" : "text (bytes)", path,
                          d->is_tokens ? "an llm.c token file" : "text (bytes)");
      pipe_data_free(d);
      d->failed_key = "data.val_path";
      return rc;
    }
    if (vv > d->vocab) d->vocab = vv;
  } else {
    d->n_val = (size_t)(d->n * val_fraction);
    d->n_train = d->n - d->n_val;
    d->val_tok = d->tok + d->n_train;
  }
  size_t need = (size_t)seq_len + 1;
  /* a separate validation file must hold a sequence too (an empty one is no split at all) */
  int val_short = val_file ? d->n_val < need : d->n_val > 0 && d->n_val < need;
  if (d->n_train < need || val_short) {
    int train_short = d->n_train < need;
    size_t got = train_short ? d->n_train : d->n_val;
    const char *which = !train_short && val_file ? val_path : path;
    pipe_data_free(d);
    /* the validation split of path is the fraction's: too small a fraction for a sequence */
    d->failed_key = train_short ? "data.path" : val_file ? "data.val_path" : "data.val_fraction";
    rc = core_error_set(CORE_EINPUT, "data file %s: the %s split holds %zu tokens, fewer than one sequence of %d plus its "
                        "target", which, train_short ? "training" : "validation", got, seq_len);
    return rc;
  }
  d->failed_key = NULL;
  return CORE_OK;
}

void pipe_data_free(pipe_data *d) {
  if (d->val_tok && (d->val_tok < d->tok || d->val_tok > d->tok + d->n)) free(d->val_tok);
  free(d->tok);
  memset(d, 0, sizeof *d);
}

void pipe_data_batch(const pipe_data *d, int split, uint64_t seed, long step, int data_rank, int mb,
                     int B, int T, int32_t *inputs, int32_t *targets) {
  const uint16_t *tok = split == PIPE_VAL && d->n_val ? d->val_tok : d->tok;
  size_t n = split == PIPE_VAL && d->n_val ? d->n_val : d->n_train;
  if (d->sequential) { /* batch k from token k*B*T; as many whole batches (and a target) as fit, then again */
    size_t bt = (size_t)B * (size_t)T, fit = n > bt ? (n - 1) / bt : 1;
    size_t k = (size_t)(step * (d->per_step > 0 ? d->per_step : 1) + mb); /* mb: the global micro-batch */
    size_t start = (k % (fit ? fit : 1)) * bt;
    for (size_t i = 0; i < bt; i++) {
      inputs[i] = tok[(start + i) % n];
      targets[i] = tok[(start + i + 1) % n];
    }
    return;
  }
  for (int b = 0; b < B; b++) {
    core_rng r = core_rng_keyed(seed, core_hash64((uint64_t)split, (uint64_t)step),
                                ((uint64_t)data_rank << 32) | (uint32_t)mb, (uint64_t)b);
    size_t start = (size_t)core_rng_below(&r, n - (size_t)T);
    for (int t = 0; t < T; t++) {
      inputs[b * T + t] = tok[start + t];
      targets[b * T + t] = tok[start + t + 1];
    }
  }
}
