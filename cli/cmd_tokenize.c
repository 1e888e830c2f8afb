/* cli/cmd_tokenize.c: `brigade tokenize --vocab vocab.json --merges merges.txt TEXT OUT`: a text
 * file as an llm.c token file (GPT-2's byte-level BPE, pipe/bpe.h), which `data.path` reads. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "pipe/bpe.h"

static int fail(void) {
  fprintf(stderr, "brigade: error: %s\n", core_error_msg());
  return core_error_code() == CORE_EINPUT ? 2 : 1;
}

int cli_tokenize(int argc, char **argv) {
  const char *vocab = NULL, *merges = NULL, *in = NULL, *out = NULL;
  int rc = CORE_OK;
  for (int i = 1; i < argc && !rc; i++) {
    if (strcmp(argv[i], "--vocab") == 0) rc = cli_take(argc, argv, &i, &vocab);
    else if (strcmp(argv[i], "--merges") == 0) rc = cli_take(argc, argv, &i, &merges);
    else if (argv[i][0] != '-' && !in) in = argv[i];
    else if (argv[i][0] != '-' && !out) out = argv[i];
    else rc = core_error_set(CORE_EINPUT, "tokenize: unknown option '%s' (see 'brigade help')", argv[i]);
  }
  if (!rc && (!vocab || !merges || !in || !out))
    rc = core_error_set(CORE_EINPUT, "usage: brigade tokenize --vocab vocab.json --merges merges.txt TEXT OUT");
  if (rc) return fail();
  pipe_bpe *b = NULL;
  if (pipe_bpe_load(&b, vocab, merges)) return fail();
  if (pipe_bpe_vocab(b) > 65536) {
    pipe_bpe_free(b);
    core_error_set(CORE_EINPUT, "%s: ids up to %d do not fit an llm.c token file's 16 bits", vocab, pipe_bpe_vocab(b) - 1);
    return fail();
  }
  FILE *f = fopen(in, "rb");
  if (!f) {
    pipe_bpe_free(b);
    core_error_set(CORE_EINPUT, "cannot open %s: %s", in, strerror(errno));
    return fail();
  }
  char *text = NULL;
  size_t n = 0, cap = 0, got;
  do {
    if (n == cap) text = core_realloc(text, cap = cap ? 2 * cap : 1 << 16);
    got = fread(text + n, 1, cap - n, f);
    n += got;
  } while (got > 0);
  fclose(f);
  int32_t *ids = NULL;
  size_t count = 0;
  rc = pipe_bpe_encode(b, text, n, &ids, &count);
  free(text);
  pipe_bpe_free(b);
  if (rc) return fail();
  if (count > 2147483647u) rc = core_error_set(CORE_EINPUT, "%s: %zu tokens, more than a token file holds", in, count);
  char tmp[1100];
  snprintf(tmp, sizeof tmp, "%s.tmp", out);
  FILE *o = rc ? NULL : fopen(tmp, "wb");
  if (!rc && !o) rc = core_error_set(CORE_ERUNTIME, "cannot write %s: %s", tmp, strerror(errno));
  if (!rc) {
    int32_t hdr[256] = {20240520, 1, (int32_t)count};
    int ok = fwrite(hdr, sizeof hdr, 1, o) == 1;
    for (size_t i = 0; i < count && ok; i++) {
      uint16_t t = (uint16_t)ids[i];
      ok = fwrite(&t, 2, 1, o) == 1;
    }
    ok = (fclose(o) == 0) && ok;
    if (!ok || rename(tmp, out) != 0) remove(tmp), rc = core_error_set(CORE_ERUNTIME, "writing %s failed", out);
  }
  free(ids);
  if (!rc) printf("wrote %s: %zu tokens of %s (GPT-2 BPE, vocabulary %s)\n", out, count, in, vocab);
  return rc ? fail() : 0;
}
