/* libFuzzer target: bytes as text for `brigade tokenize` (GPT-2's byte-level BPE), with a small
 * tokenizer of GPT-2's form written at start-up: every byte's symbol in the vocabulary and a few
 * merges. Byte-level BPE loses nothing, so decoding the ids must give the text back byte for
 * byte; the pre-split's pieces must tile the text; the text cut where pipe_bpe_last_cut says
 * encodes to the same ids in two halves. Built by `make fuzz` with clang. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "pipe/bpe.h"

static pipe_bpe *tok;

/* GPT-2's symbol for byte c (bytes_to_unicode), as UTF-8 into u; its length */
static int symbol(int c, char *u) {
  int printable = (c >= '!' && c <= '~') || (c >= 0xa1 && c <= 0xac) || (c >= 0xae && c <= 0xff), n = 0;
  for (int k = 0; k < c; k++)
    n += !((k >= '!' && k <= '~') || (k >= 0xa1 && k <= 0xac) || (k >= 0xae && k <= 0xff));
  int cp = printable ? c : 256 + n;
  if (cp < 0x80) return u[0] = (char)cp, 1;
  u[0] = (char)(0xc0 | cp >> 6), u[1] = (char)(0x80 | (cp & 0x3f));
  return 2;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  char vocab[64], merges[64];
  snprintf(vocab, sizeof vocab, "/tmp/brigade_fuzz_bpe_%d.json", (int)getpid());
  snprintf(merges, sizeof merges, "/tmp/brigade_fuzz_bpe_%d.txt", (int)getpid());
  FILE *v = fopen(vocab, "w"), *m = fopen(merges, "w");
  if (!v || !m) abort();
  fprintf(v, "{");
  for (int c = 0; c < 256; c++) {
    char u[4];
    int n = symbol(c, u);
    fprintf(v, "%s\"", c ? "," : "");
    if (c == '"' || c == '\\') fputc('\\', v);
    fprintf(v, "%.*s\": %d", n, u, c);
  }
  /* a few merges (GPT-2's first ones) and their tokens: 'Ġ' is the space's symbol */
  static const char *const pairs[][3] = {{"Ġ", "t", "Ġt"}, {"Ġ", "a", "Ġa"}, {"h", "e", "he"}, {"i", "n", "in"},
                                         {"r", "e", "re"}, {"o", "n", "on"}, {"Ġt", "he", "Ġthe"}, {"e", "r", "er"}};
  fprintf(m, "#version: 0.2\n");
  for (int k = 0; k < 8; k++) {
    fprintf(m, "%s %s\n", pairs[k][0], pairs[k][1]);
    fprintf(v, ",\"%s\": %d", pairs[k][2], 256 + k);
  }
  fprintf(v, "}\n");
  fclose(v), fclose(m);
  if (pipe_bpe_load(&tok, vocab, merges)) {
    fprintf(stderr, "fuzz_bpe: the tokenizer does not load: %s\n", core_error_msg());
    abort();
  }
  unlink(vocab), unlink(merges);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *text = (const char *)data;
  size_t *ends = NULL, npieces = 0;
  if (pipe_bpe_split(text, size, &ends, &npieces)) abort();
  for (size_t i = 0; i < npieces; i++) /* pieces tile the text: each ends after the last */
    if (ends[i] > size || (i ? ends[i] <= ends[i - 1] : ends[i] == 0 && size > 0)) abort();
  if (size && (npieces == 0 || ends[npieces - 1] != size)) abort();
  free(ends);
  int32_t *ids = NULL;
  size_t count = 0;
  if (pipe_bpe_encode(tok, text, size, &ids, &count)) abort(); /* every byte has a token */
  char *back = malloc(size + 1), buf[64];
  size_t k = 0;
  for (size_t i = 0; i < count; i++) {
    int n = pipe_bpe_decode(tok, ids[i], buf, sizeof buf);
    if (n <= 0 || k + (size_t)n > size) abort();
    memcpy(back + k, buf, (size_t)n), k += (size_t)n;
  }
  if (k != size || (size && memcmp(back, text, size))) abort(); /* the text back, byte for byte */
  size_t cut = pipe_bpe_last_cut(text, size); /* a cut keeps the ids: the halves apart give them too */
  if (cut > 0) {
    int32_t *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    if (pipe_bpe_encode(tok, text, cut, &x, &nx) || pipe_bpe_encode(tok, text + cut, size - cut, &y, &ny)) abort();
    if (nx + ny != count || memcmp(x, ids, sizeof(int32_t) * nx) || memcmp(y, ids + nx, sizeof(int32_t) * ny)) abort();
    free(x), free(y);
  }
  free(back), free(ids);
  return 0;
}
