/* cli/cmd_tokenize.c: `brigade tokenize --vocab vocab.json --merges merges.txt TEXT OUT`: a text
 * file as an llm.c token file (GPT-2's byte-level BPE, pipe/bpe.h), which `data.path` reads. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/progress.h"
#include "pipe/bpe.h"

static int fail(void) {
  fprintf(stderr, "brigade: error: %s\n", core_error_msg());
  return core_error_code() == CORE_EINPUT ? 2 : 1;
}

/* The text is encoded a block at a time, so memory stays a few times the block whatever the
 * file's size: each block up to its last place where GPT-2's pattern always cuts
 * (pipe_bpe_last_cut), the rest going on with the next block; the token file is the one encoding
 * the whole text gives. */
enum { BLOCK = 4 << 20 };

int cli_tokenize(int argc, char **argv) {
  const char *vocab = NULL, *merges = NULL, *in = NULL, *out = NULL;
  int rc = CORE_OK;
  for (int i = 1; i < argc && !rc; i++) {
    cli_arg(&argc, argv, i);
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
    core_error_set(CORE_EINPUT, "%s: ids up to %d do not fit an llm.c token file's 16 bits", vocab, pipe_bpe_vocab(b) - 1);
    pipe_bpe_free(b); /* after its vocabulary is read for the message */
    return fail();
  }
  FILE *f = fopen(in, "rb");
  if (!f) {
    pipe_bpe_free(b);
    core_error_set(CORE_EINPUT, "cannot open %s: %s", in, strerror(errno));
    return fail();
  }
  char *tmp = core_str_join(out, ".tmp");
  FILE *o = fopen(tmp, "wb");
  if (!o) rc = core_error_set(CORE_ERUNTIME, "cannot write %s: %s", tmp, strerror(errno));
  int32_t hdr[256] = {20240520, 1, 0}; /* the count filled in at the end */
  if (!rc && fwrite(hdr, sizeof hdr, 1, o) != 1) rc = core_error_set(CORE_ERUNTIME, "writing %s failed", tmp);
  size_t count = 0, done = 0, have = 0, cap = BLOCK;
  char *text = core_malloc(cap);
  long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
  rewind(f);
  core_progress_start("tokenizing %s", in);
  core_progress_phase("", size > 0 ? (double)size : 0, "bytes");
  for (int eof = 0; !rc && (!eof || have > 0);) {
    if (!eof) { /* fill the block, or grow it when it holds no cut yet */
      if (have == cap) text = core_realloc(text, cap *= 2);
      size_t got = fread(text + have, 1, cap - have, f);
      have += got;
      if (got == 0) {
        if (ferror(f)) rc = core_error_set(CORE_EINPUT, "cannot read %s: %s", in, strerror(errno));
        eof = 1;
      }
    }
    size_t cut = eof ? have : pipe_bpe_last_cut(text, have);
    if (rc || cut == 0) continue;
    int32_t *ids = NULL;
    size_t n = 0;
    rc = pipe_bpe_encode(b, text, cut, &ids, &n);
    uint16_t *t16 = rc ? NULL : core_malloc(sizeof(uint16_t) * (n + 1));
    for (size_t i = 0; i < n && !rc; i++) t16[i] = (uint16_t)ids[i];
    if (!rc && n && fwrite(t16, sizeof(uint16_t), n, o) != n) rc = core_error_set(CORE_ERUNTIME, "writing %s failed", tmp);
    free(ids), free(t16);
    count += n;
    if (!rc && count > 2147483647u) rc = core_error_set(CORE_EINPUT, "%s: more than %d tokens, more than a token file holds", in, 2147483647);
    memmove(text, text + cut, have - cut), have -= cut, done += cut;
    core_progress_at((double)done);
  }
  core_progress_stop();
  fclose(f), free(text);
  pipe_bpe_free(b);
  if (o) {
    hdr[2] = (int32_t)count;
    int ok = !rc && fseek(o, 0, SEEK_SET) == 0 && fwrite(hdr, sizeof hdr, 1, o) == 1;
    ok = (fclose(o) == 0) && ok;
    if (!ok || rc || rename(tmp, out) != 0) {
      remove(tmp);
      if (!rc) rc = core_error_set(CORE_ERUNTIME, "writing %s failed", out);
    }
  }
  free(tmp);
  if (!rc) printf("wrote %s: %zu tokens of %s (GPT-2 BPE, vocabulary %s)\n", out, count, in, vocab);
  return rc ? fail() : 0;
}
