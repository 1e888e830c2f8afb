/* GPT-2's byte-level BPE (pipe/bpe.c) on small vocab.json / merges.txt files written here, with
 * the ids worked out by hand from GPT-2's rules: the pattern's pieces (contractions, a space
 * joining the word after it, a run of spaces leaving its last to the next word), merges by rank,
 * every occurrence of the best pair at once; decoding gives the text back; `brigade tokenize`
 * writes them as an llm.c token file. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "pipe/bpe.h"
#include "tests/common/mpirun.h"
#include "tests/common/splitmix.h"

static int b2u(int b) { /* GPT-2's bytes_to_unicode */
  int n = 0;
  for (int c = 0; c < 256; c++) {
    int printable = (c >= '!' && c <= '~') || (c >= 0xa1 && c <= 0xac) || (c >= 0xae && c <= 0xff);
    if (c == b) return printable ? c : 256 + n;
    if (!printable) n++;
  }
  return -1;
}

static void put_utf8(FILE *f, int cp) {
  if (cp < 0x80) fputc(cp, f);
  else fputc(0xc0 | cp >> 6, f), fputc(0x80 | (cp & 0x3f), f);
}

/* "{" and every byte's symbol at its byte value: a vocabulary's start, more entries to follow */
static void put_byte_symbols(FILE *f) {
  fputc('{', f);
  for (int b = 0; b < 256; b++) {
    fputs(b ? ",\"" : "\"", f);
    int cp = b2u(b);
    if (cp == '"' || cp == '\\') fputc('\\', f);
    put_utf8(f, cp);
    fprintf(f, "\":%d", b);
  }
}

/* vocab: every byte's symbol at its byte value, then Ġt 256, he 257, Ġthe 258, ll 259 */
static void write_files(const char *vocab, const char *merges) {
  FILE *f = fopen(vocab, "w");
  put_byte_symbols(f);
  fputs(",\"\xc4\xa0t\":256,\"he\":257,\"\xc4\xa0the\":258,\"ll\":259}", f);
  fclose(f);
  f = fopen(merges, "w");
  fputs("#version: 0.2\n\xc4\xa0 t\nh e\n\xc4\xa0t he\nl l\n", f);
  fclose(f);
}

Test(bpe, gpt2_rules_on_a_small_vocabulary) {
  char vocab[] = "/tmp/brigade_vocab_XXXXXX", merges[] = "/tmp/brigade_merges_XXXXXX";
  close(mkstemp(vocab)), close(mkstemp(merges));
  write_files(vocab, merges);
  pipe_bpe *b;
  cr_assert_eq(pipe_bpe_load(&b, vocab, merges), 0, "%s", core_error_msg());
  cr_assert_eq(pipe_bpe_vocab(b), 260);
  const char *text = "hello the world's  test\ncaf\xc3\xa9 1999!";
  const int32_t want[] = {257, 259, 111, 258, 32, 119, 111, 114, 108, 100, 39, 115, 32, 256, 101, 115, 116, 10,
                          99,  97,  102, 195, 169, 32, 49, 57, 57, 57, 33};
  int32_t *ids;
  size_t n;
  cr_assert_eq(pipe_bpe_encode(b, text, strlen(text), &ids, &n), 0, "%s", core_error_msg());
  cr_assert_eq(n, sizeof want / sizeof want[0], "%zu ids", n);
  for (size_t i = 0; i < n; i++) cr_assert_eq(ids[i], want[i], "id %zu: %d, want %d", i, ids[i], want[i]);
  char back[256];
  int k = 0;
  for (size_t i = 0; i < n; i++) k += pipe_bpe_decode(b, ids[i], back + k, (int)sizeof back - k);
  cr_assert(k == (int)strlen(text) && !memcmp(back, text, (size_t)k), "decoded '%.*s'", k, back);
  cr_assert_eq(pipe_bpe_decode(b, 999, back, 8), -1);
  free(ids);
  pipe_bpe_free(b);
  /* the command: an llm.c token file of those ids */
  char in[] = "/tmp/brigade_text_XXXXXX", out[] = "/tmp/brigade_tok_XXXXXX", cmd[1024];
  close(mkstemp(in)), close(mkstemp(out));
  FILE *f = fopen(in, "w");
  fputs(text, f);
  fclose(f);
  snprintf(cmd, sizeof cmd, "%s/brigade tokenize --vocab %s --merges %s %s %s 1>&2", test_build_dir(), vocab, merges, in, out);
  cr_assert_eq(test_sh(cmd), 0);
  f = fopen(out, "rb");
  int32_t hdr[256];
  cr_assert_eq(fread(hdr, sizeof hdr, 1, f), 1);
  cr_assert(hdr[0] == 20240520 && hdr[1] == 1 && hdr[2] == (int32_t)n);
  for (size_t i = 0; i < n; i++) {
    uint16_t t;
    cr_assert_eq(fread(&t, 2, 1, f), 1);
    cr_assert_eq(t, want[i]);
  }
  fclose(f);
  unlink(in), unlink(out), unlink(vocab), unlink(merges);
}

Test(bpe, bad_files_name_the_line) {
  char vocab[] = "/tmp/brigade_vocab_XXXXXX", merges[] = "/tmp/brigade_merges_XXXXXX";
  close(mkstemp(vocab)), close(mkstemp(merges));
  write_files(vocab, merges);
  FILE *f = fopen(merges, "a");
  fputs("a b c\n", f);
  fclose(f);
  pipe_bpe *b;
  cr_assert_eq(pipe_bpe_load(&b, vocab, merges), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), ":6: a merge is two tokens and one space"), "%s", core_error_msg());
  f = fopen(vocab, "w");
  fputs("{\"a\": \"one\"}", f);
  fclose(f);
  cr_assert_eq(pipe_bpe_load(&b, vocab, merges), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "the id of 'a' is not an integer"), "%s", core_error_msg());
  f = fopen(vocab, "w"); /* a bad id after a good one (the loader crashed freeing its half-built tables) */
  fputs("{\"a\": 1, \"b\": \"two\"}", f);
  fclose(f);
  cr_assert_eq(pipe_bpe_load(&b, vocab, merges), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "the id of 'b' is not an integer"), "%s", core_error_msg());
  unlink(vocab), unlink(merges);
}

/* An llm.c tokenizer file: 256 uint32 (magic, version, n tokens, version 2's end-of-text id),
 * then n tokens (256 bytes, then "xxx"s), each a length byte and its bytes. */
static void write_tokbin(const char *path, uint32_t version, uint32_t n, uint32_t eot) {
  FILE *tf = fopen(path, "wb");
  cr_assert(tf);
  uint32_t th[256] = {20240328, version, n, eot};
  fwrite(th, sizeof th, 1, tf);
  for (uint32_t t = 0; t < n; t++) {
    unsigned char l = t < 256 ? 1 : 3, c = t < 256 ? (unsigned char)t : 'x';
    fwrite(&l, 1, 1, tf);
    for (int k = 0; k < l; k++) fwrite(&c, 1, 1, tf);
  }
  fclose(tf);
}

/* `sample` with GPT-2's tokenizer files: the prompt encoded, the continuation decoded; with
 * llm.c's gpt2_tokenizer.bin, decoding from the end-of-text token, which must be one of the
 * file's tokens (it is the first input); a tokenizer larger than the model is refused. */
Test(bpe, sample_speaks_bpe, .timeout = 60) {
  char vocab[] = "/tmp/brigade_vocab_XXXXXX", merges[] = "/tmp/brigade_merges_XXXXXX", dir[] = "/tmp/brigade_bpe_XXXXXX";
  close(mkstemp(vocab)), close(mkstemp(merges));
  cr_assert(mkdtemp(dir));
  write_files(vocab, merges);
  char cmd[2048], *out = NULL;
  snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 %s/brigade train configs/tiny.cfg --set train.steps=1 "
           "--set model.vocab_size=260 --set checkpoint.dir=%s 1>&2", test_build_dir(), dir);
  cr_assert_eq(test_sh(cmd), 0);
  snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 %s/brigade sample --checkpoint %s --prompt 'hello the' --tokens 8 "
           "--temperature 0 --vocab %s --merges %s", test_build_dir(), dir, vocab, merges);
  int rc = test_capture(cmd, &out);
  cr_assert(rc == 0 && !strncmp(out, "hello the", 9) && strlen(out) > 10, "exit %d: %s", rc, out);
  free(out);
  /* llm.c's gpt2_tokenizer.bin (version 2): decoding only, from the end-of-text token */
  char tokp[] = "/tmp/brigade_tokbin_XXXXXX";
  close(mkstemp(tokp));
  write_tokbin(tokp, 2, 260, 259);
  snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 %s/brigade sample --checkpoint %s --tokens 6 --temperature 0 "
           "--tokenizer %s", test_build_dir(), dir, tokp);
  rc = test_capture(cmd, &out); /* the tokens may be any bytes, NUL too: the exit status says it ran */
  cr_assert(rc == 0, "exit %d: %s", rc, out);
  free(out);
  snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 %s/brigade sample --checkpoint %s --prompt hi --tokenizer %s 2>&1",
           test_build_dir(), dir, tokp);
  rc = test_capture(cmd, &out);
  cr_assert(rc == 2 && strstr(out, "llm.c's tokenizer file only decodes"), "exit %d: %s", rc, out);
  free(out);
  const uint32_t bad[2][2] = {{2, 0x7fffffffu}, {1, 0}}; /* version 2's id past the tokens; version 1's 50256 of 260 */
  const char *want[2] = {"its end-of-text id 2147483647 is not one of its 260 tokens",
                         "its end-of-text id 50256 is not one of its 260 tokens"};
  for (int k = 0; k < 2; k++) {
    write_tokbin(tokp, bad[k][0], 260, bad[k][1]);
    snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 %s/brigade sample --checkpoint %s --tokens 2 --tokenizer %s 2>&1",
             test_build_dir(), dir, tokp);
    rc = test_capture(cmd, &out);
    cr_assert(rc == 2 && strstr(out, want[k]), "exit %d: %s", rc, out);
    free(out);
  }
  unlink(tokp);
  snprintf(cmd, sizeof cmd, "rm -rf %s && ASAN_OPTIONS=detect_leaks=0 %s/brigade train configs/tiny.cfg --set train.steps=1 "
           "--set checkpoint.dir=%s 1>&2", dir, test_build_dir(), dir);
  cr_assert_eq(test_sh(cmd), 0);
  snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 %s/brigade sample --checkpoint %s --prompt 'hello' --tokens 2 "
           "--vocab %s --merges %s 2>&1", test_build_dir(), dir, vocab, merges);
  rc = test_capture(cmd, &out);
  cr_assert(rc == 2 && strstr(out, "the tokenizer's vocabulary (260) is larger than the model's (256)"), "exit %d: %s", rc, out);
  free(out);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  test_sh(cmd);
  unlink(vocab), unlink(merges);
}

/* The tokenizer as config keys: a run with tokenizer.vocab / tokenizer.merges checks the files
 * at start-up (a missing one: exit 2 naming the key, before any step), and `sample` on its
 * checkpoint uses them with no tokenizer flags, printing what the flags would print. */
Test(bpe, tokenizer_from_config_keys, .timeout = 60) {
  char vocab[] = "/tmp/brigade_vocab_XXXXXX", merges[] = "/tmp/brigade_merges_XXXXXX", dir[] = "/tmp/brigade_bpe_XXXXXX";
  close(mkstemp(vocab)), close(mkstemp(merges));
  cr_assert(mkdtemp(dir));
  write_files(vocab, merges);
  char cmd[2048], *out = NULL, *flags = NULL;
  snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 %s/brigade train configs/tiny.cfg --set train.steps=1 "
           "--set model.vocab_size=260 --set checkpoint.dir=%s --set 'tokenizer.vocab=\"%s\"' "
           "--set 'tokenizer.merges=\"/nonexistent/merges.txt\"' 2>&1", test_build_dir(), dir, vocab);
  int rc = test_capture(cmd, &out);
  cr_assert(rc == 2 && strstr(out, "tokenizer.vocab / tokenizer.merges (") && strstr(out, "/nonexistent/merges.txt") &&
            !strstr(out, "step     1"), "exit %d: %s", rc, out);
  free(out);
  snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 %s/brigade train configs/tiny.cfg --set train.steps=1 "
           "--set model.vocab_size=260 --set checkpoint.dir=%s --set 'tokenizer.vocab=\"%s\"' 2>&1", test_build_dir(), dir, vocab);
  rc = test_capture(cmd, &out);
  cr_assert(rc == 2 && strstr(out, "tokenizer.vocab and tokenizer.merges go together"), "exit %d: %s", rc, out);
  free(out);
  snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 %s/brigade train configs/tiny.cfg --set train.steps=1 "
           "--set model.vocab_size=260 --set checkpoint.dir=%s --set 'tokenizer.vocab=\"%s\"' "
           "--set 'tokenizer.merges=\"%s\"' 1>&2", test_build_dir(), dir, vocab, merges);
  cr_assert_eq(test_sh(cmd), 0);
  snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 %s/brigade sample --checkpoint %s --prompt 'hello the' --tokens 8 "
           "--temperature 0", test_build_dir(), dir);
  rc = test_capture(cmd, &out);
  cr_assert(rc == 0, "exit %d: %s", rc, out);
  snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 %s/brigade sample --checkpoint %s --prompt 'hello the' --tokens 8 "
           "--temperature 0 --vocab %s --merges %s", test_build_dir(), dir, vocab, merges);
  cr_assert_eq(test_capture(cmd, &flags), 0, "%s", flags);
  cr_assert_str_eq(out, flags, "sample from the config's keys printed '%s', with the flags '%s'", out, flags);
  free(out), free(flags);
  unlink(vocab); /* the file the checkpoint's config names is gone: sample says which key */
  snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 %s/brigade sample --checkpoint %s --prompt 'hello' --tokens 2 2>&1",
           test_build_dir(), dir);
  rc = test_capture(cmd, &out);
  cr_assert(rc == 2 && strstr(out, vocab), "exit %d: %s", rc, out);
  free(out);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  test_sh(cmd);
  unlink(merges);
}

/* GPT-2's pre-split beyond ASCII: Unicode's letters and numbers (\p{L}, \p{N}) by category, so
 * scripts' own digits, superscripts and fractions are numbers and their punctuation and currency
 * signs are neither; each piece as the reference pattern cuts it. */
Test(bpe, presplit_uses_unicode_classes) {
  /* x ² ½ ٣٤ 日本語 naïve 。€5 «ok» Ⅻ */
  const char *text = "x\xc2\xb2 \xc2\xbd \xd9\xa3\xd9\xa4 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e na\xc3\xafve"
                     "\xe3\x80\x82\xe2\x82\xac" "5 \xc2\xabok\xc2\xbb \xe2\x85\xab";
  const char *want[] = {"x", "\xc2\xb2", " \xc2\xbd", " \xd9\xa3\xd9\xa4", " \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e",
                        " na\xc3\xafve", "\xe3\x80\x82\xe2\x82\xac", "5", " \xc2\xab", "ok", "\xc2\xbb", " \xe2\x85\xab"};
  size_t *ends, n;
  cr_assert_eq(pipe_bpe_split(text, strlen(text), &ends, &n), 0);
  cr_assert_eq(n, sizeof want / sizeof want[0], "%zu pieces", n);
  size_t from = 0;
  for (size_t i = 0; i < n; i++) {
    cr_assert(ends[i] - from == strlen(want[i]) && !memcmp(text + from, want[i], strlen(want[i])),
              "piece %zu is '%.*s', want '%s'", i, (int)(ends[i] - from), text + from, want[i]);
    from = ends[i];
  }
  free(ends);
}

/* ---- the merge rule, directly (the reference for the encoder's heap) ---- */

enum { NTOK = 96, NMERGE = 72 };
static char toks[NTOK][64]; /* a..e, then each merge's result */
static int ntok, mleft[NMERGE], mright[NMERGE]; /* merge k (rank k): toks[mleft] + toks[mright] */

static int rank_of(const char *x, const char *y) {
  for (int k = 0; k < NMERGE; k++)
    if (!strcmp(toks[mleft[k]], x) && !strcmp(toks[mright[k]], y)) return k;
  return -1;
}

/* GPT-2's rule on one piece of letters: the adjacent pair of lowest rank, every occurrence of it
 * merged left to right, again until none has a rank; the tokens' indices into toks out */
static int direct(const char *text, int *out) {
  char sym[400][64];
  int n = (int)strlen(text);
  for (int i = 0; i < n; i++) sym[i][0] = text[i], sym[i][1] = 0;
  for (;;) {
    int best = -1;
    for (int i = 0; i + 1 < n; i++) {
      int r = rank_of(sym[i], sym[i + 1]);
      if (r >= 0 && (best < 0 || r < best)) best = r;
    }
    if (best < 0) break;
    const char *x = toks[mleft[best]], *y = toks[mright[best]];
    int w = 0;
    for (int i = 0; i < n;) {
      if (i + 1 < n && !strcmp(sym[i], x) && !strcmp(sym[i + 1], y)) snprintf(sym[w++], 64, "%s%s", x, y), i += 2;
      else memmove(sym[w++], sym[i++], 64);
    }
    n = w;
  }
  for (int i = 0; i < n; i++)
    for (int t = 0; t < ntok; t++)
      if (!strcmp(toks[t], sym[i])) out[i] = t;
  return n;
}

/* The encoder gives the direct rule's tokens, on random runs of letters (one piece each, up to 300
 * long) under random merge lists: merges of tokens formed by later merges among them, so a merge
 * forms pairs that rank before it (which GPT-2's own list never does), and pairs overlapping
 * ("a a a"). */
Test(bpe, heap_merges_as_the_direct_rule) {
  rng g = {20261126};
  char vocab[] = "/tmp/brigade_vocab_XXXXXX", merges[] = "/tmp/brigade_merges_XXXXXX";
  close(mkstemp(vocab)), close(mkstemp(merges));
  for (int list = 0; list < 6; list++) {
    ntok = 5;
    for (int t = 0; t < 5; t++) toks[t][0] = (char)('a' + t), toks[t][1] = 0;
    int order[NMERGE]; /* the merges in the order they are made, then ranked in a shuffled order */
    for (int k = 0; k < NMERGE; k++) {
      int x, y;
      do x = (int)(next_u64(&g) % (uint64_t)ntok), y = (int)(next_u64(&g) % (uint64_t)ntok);
      while (strlen(toks[x]) + strlen(toks[y]) >= 40);
      int dup = 0;
      for (int t = 0; t < ntok; t++) {
        char xy[128];
        snprintf(xy, sizeof xy, "%s%s", toks[x], toks[y]);
        dup |= !strcmp(toks[t], xy);
      }
      for (int j = 0; j < k; j++) dup |= mleft[j] == x && mright[j] == y;
      if (dup) { /* a pair or token made already: try again */
        k--;
        continue;
      }
      mleft[k] = x, mright[k] = y, order[k] = k;
      char xy[128];
      snprintf(xy, sizeof xy, "%s%s", toks[x], toks[y]);
      memcpy(toks[ntok++], xy, strlen(xy) + 1);
    }
    for (int k = NMERGE - 1; k > 0 && list > 0; k--) { /* list 0 in the order made, as GPT-2's */
      int j = (int)(next_u64(&g) % (uint64_t)(k + 1)), t = order[k];
      order[k] = order[j], order[j] = t;
    }
    int l2[NMERGE], r2[NMERGE];
    for (int k = 0; k < NMERGE; k++) l2[k] = mleft[order[k]], r2[k] = mright[order[k]];
    memcpy(mleft, l2, sizeof l2), memcpy(mright, r2, sizeof r2);
    FILE *f = fopen(vocab, "w");
    put_byte_symbols(f);
    for (int t = 5; t < ntok; t++) fprintf(f, ",\"%s\":%d", toks[t], 256 + t);
    fputs("}", f);
    fclose(f);
    f = fopen(merges, "w");
    fputs("#version: 0.2\n", f);
    for (int k = 0; k < NMERGE; k++) fprintf(f, "%s %s\n", toks[mleft[k]], toks[mright[k]]);
    fclose(f);
    pipe_bpe *b;
    cr_assert_eq(pipe_bpe_load(&b, vocab, merges), 0, "%s", core_error_msg());
    for (int c = 0; c < 120; c++) {
      char text[320];
      int n = 1 + (int)(next_u64(&g) % 300), skew = (int)(next_u64(&g) % 3); /* skew: fewer letters, more repeats */
      for (int i = 0; i < n; i++) text[i] = (char)('a' + (int)(next_u64(&g) % (uint64_t)(5 - skew)));
      text[n] = 0;
      int want[400], got_n;
      int nwant = direct(text, want);
      int32_t *ids;
      size_t nid;
      cr_assert_eq(pipe_bpe_encode(b, text, (size_t)n, &ids, &nid), 0, "%s", core_error_msg());
      got_n = (int)nid;
      cr_assert_eq(got_n, nwant, "list %d text %d '%s': %d tokens, the direct rule %d", list, c, text, got_n, nwant);
      for (int i = 0; i < nwant; i++) {
        int t = want[i] < 5 ? 'a' + want[i] : 256 + want[i];
        cr_assert_eq(ids[i], t, "list %d text %d '%s': token %d is %d, the direct rule's %d", list, c, text, i, ids[i], t);
      }
      free(ids);
    }
    pipe_bpe_free(b);
  }
  unlink(vocab), unlink(merges);
}

/* A merge line of any length is one merge: tokens of 2, 4, ... 4096 letters, the last merge a
 * line of 4097 characters (read in a fixed buffer before, which cut it into pieces and refused
 * the second). */
Test(bpe, long_merge_lines) {
  char vocab[] = "/tmp/brigade_vocab_XXXXXX", merges[] = "/tmp/brigade_merges_XXXXXX";
  close(mkstemp(vocab)), close(mkstemp(merges));
  enum { LONG = 4096 };
  char *x = malloc(LONG + 1);
  memset(x, 'a', LONG), x[LONG] = 0;
  FILE *v = fopen(vocab, "w"), *m = fopen(merges, "w");
  put_byte_symbols(v);
  fputs("#version: 0.2\n", m);
  int id = 256;
  for (int k = 1; 2 * k <= LONG; k *= 2, id++) { /* "a a" -> aa (256), "aa aa" -> aaaa (257), ... */
    fprintf(m, "%.*s %.*s\n", k, x, k, x);
    fprintf(v, ",\"%.*s\":%d", 2 * k, x, id);
  }
  fputs("}", v);
  fclose(v), fclose(m);
  pipe_bpe *b;
  cr_assert_eq(pipe_bpe_load(&b, vocab, merges), 0, "%s", core_error_msg());
  int32_t *ids;
  size_t n;
  cr_assert_eq(pipe_bpe_encode(b, x, LONG, &ids, &n), 0, "%s", core_error_msg());
  cr_assert(n == 1 && ids[0] == id - 1, "%zu ids, the first %d (want one, %d)", n, n ? ids[0] : -1, id - 1);
  free(ids), free(x);
  pipe_bpe_free(b);
  unlink(vocab), unlink(merges);
}

/* `brigade tokenize` encodes a file a block (4 MB) at a time, each cut where GPT-2's pattern always
 * cuts: its token file is the one encoding the whole text gives. 10 MB of words, spaces, newlines,
 * contractions and non-ASCII text, with a 5 MB stretch holding no place to cut (the block grows)
 * and cut candidates next to non-ASCII spaces (not cuts). */
Test(bpe, tokenize_in_blocks_as_whole, .timeout = 120) {
  char vocab[] = "/tmp/brigade_vocab_XXXXXX", merges[] = "/tmp/brigade_merges_XXXXXX";
  char in[] = "/tmp/brigade_text_XXXXXX", out[] = "/tmp/brigade_tok_XXXXXX", cmd[1024];
  close(mkstemp(vocab)), close(mkstemp(merges)), close(mkstemp(in)), close(mkstemp(out));
  write_files(vocab, merges);
  size_t n = 10u << 20, k = 0;
  char *text = malloc(n + 64);
  rng g = {7};
  static const char *const words[] = {"the", "hello", "world's", "caf\xc3\xa9", "\xc2\xa0", "\n", "\n\n", "1999", "!",
                                      "  ", "\xe6\x97\xa5\xe6\x9c\xac", "ll", "they'll"};
  while (k < n) {
    if (k >= (3u << 20) && k < (8u << 20)) { /* no cut here: letters, digits and newlines only */
      text[k++] = (char)("abc\n9"[next_u64(&g) % 5]);
      continue;
    }
    const char *w = words[next_u64(&g) % (sizeof words / sizeof words[0])];
    size_t l = strlen(w);
    memcpy(text + k, w, l), k += l, text[k++] = ' ';
  }
  FILE *f = fopen(in, "wb");
  fwrite(text, 1, k, f), fclose(f);
  pipe_bpe *b;
  cr_assert_eq(pipe_bpe_load(&b, vocab, merges), 0, "%s", core_error_msg());
  int32_t *ids;
  size_t nid;
  cr_assert_eq(pipe_bpe_encode(b, text, k, &ids, &nid), 0, "%s", core_error_msg());
  snprintf(cmd, sizeof cmd, "%s/brigade tokenize --vocab %s --merges %s %s %s 1>&2", test_build_dir(), vocab, merges, in, out);
  cr_assert_eq(test_sh(cmd), 0);
  f = fopen(out, "rb");
  int32_t hdr[256];
  cr_assert_eq(fread(hdr, sizeof hdr, 1, f), 1);
  cr_assert(hdr[0] == 20240520 && hdr[1] == 1 && hdr[2] == (int32_t)nid, "%d tokens in the file, %zu encoding the whole", hdr[2], nid);
  uint16_t *t = malloc(sizeof(uint16_t) * nid);
  cr_assert_eq(fread(t, sizeof(uint16_t), nid, f), nid);
  fclose(f);
  for (size_t i = 0; i < nid; i++) cr_assert_eq(t[i], ids[i], "token %zu: %d in the file, %d encoding the whole", i, t[i], ids[i]);
  free(t), free(ids), free(text);
  pipe_bpe_free(b);
  unlink(vocab), unlink(merges), unlink(in), unlink(out);
}

/* Every place pipe_bpe_last_cut may give is a cut: the text before it and after it, pre-split and
 * encoded apart, give the whole text's pieces and ids, on random texts of words, runs of spaces,
 * tabs, newlines, no-break spaces (U+00A0, U+3000), contractions, digits and non-ASCII letters.
 * (A space after a space or a no-break space is not such a place: "x \u00a0  word" cut there
 * pieces differently.) */
Test(bpe, cuts_keep_the_encoding) {
  char vocab[] = "/tmp/brigade_vocab_XXXXXX", merges[] = "/tmp/brigade_merges_XXXXXX";
  close(mkstemp(vocab)), close(mkstemp(merges));
  write_files(vocab, merges);
  pipe_bpe *b;
  cr_assert_eq(pipe_bpe_load(&b, vocab, merges), 0, "%s", core_error_msg());
  static const char *const words[] = {"the", "hello", "world's", "caf\xc3\xa9", "\xc2\xa0", "\xe3\x80\x80", "\n", "\t",
                                      " ", "  ", "1999", "!", "?!", "they'll", "\xe6\x97\xa5", "x"};
  rng g = {11};
  int cuts = 0;
  for (int c = 0; c < 200; c++) {
    char text[600];
    size_t n = 0;
    while (n < 500) {
      const char *w = words[next_u64(&g) % (sizeof words / sizeof words[0])];
      memcpy(text + n, w, strlen(w)), n += strlen(w);
      if (next_u64(&g) % 2) text[n++] = ' ';
    }
    int32_t *whole;
    size_t nw;
    cr_assert_eq(pipe_bpe_encode(b, text, n, &whole, &nw), 0);
    for (size_t end = n; (end = pipe_bpe_last_cut(text, end)) > 0; cuts++) { /* every cut, right to left */
      int32_t *x, *y;
      size_t nx, ny;
      cr_assert_eq(pipe_bpe_encode(b, text, end, &x, &nx), 0);
      cr_assert_eq(pipe_bpe_encode(b, text + end, n - end, &y, &ny), 0);
      int same = nx + ny == nw && !memcmp(x, whole, sizeof(int32_t) * nx) && !memcmp(y, whole + nx, sizeof(int32_t) * ny);
      cr_assert(same, "text %d cut at %zu of %zu ('%.*s|%.*s'): the halves' ids are not the whole's", c, end, n, 8,
                text + (end > 8 ? end - 8 : 0), 8, text + end);
      free(x), free(y);
      /* and the pieces themselves (a small vocabulary may give the same ids for other pieces) */
      size_t *pw, *px, *py, kw, kx, ky;
      pipe_bpe_split(text, n, &pw, &kw), pipe_bpe_split(text, end, &px, &kx), pipe_bpe_split(text + end, n - end, &py, &ky);
      same = kx + ky == kw;
      for (size_t i = 0; i < kx && same; i++) same = px[i] == pw[i];
      for (size_t i = 0; i < ky && same; i++) same = py[i] + end == pw[kx + i];
      cr_assert(same, "text %d cut at %zu ('%.*s|%.*s'): the halves' pieces are not the whole's", c, end, 8,
                text + (end > 8 ? end - 8 : 0), 8, text + end);
      free(pw), free(px), free(py);
    }
    free(whole);
  }
  cr_assert_gt(cuts, 5000, "%d cuts tried", cuts);
  pipe_bpe_free(b);
  unlink(vocab), unlink(merges);
}

/* An output path of any length: tokenize's temporary name is OUT.tmp whole. It was cut to 1099
 * bytes, so with a long OUT it named another file, which the run overwrote and renamed away. */
Test(bpe, tokenize_long_output_path_spares_other_files, .timeout = 60) {
  char vocab[] = "/tmp/brigade_vocab_XXXXXX", merges[] = "/tmp/brigade_merges_XXXXXX", in[] = "/tmp/brigade_text_XXXXXX";
  char root[] = "/tmp/brigade_long_XXXXXX";
  close(mkstemp(vocab)), close(mkstemp(merges)), close(mkstemp(in));
  write_files(vocab, merges);
  FILE *f = fopen(in, "w");
  fputs("hello the world", f);
  fclose(f);
  cr_assert(mkdtemp(root));
  char dir[1200], out[1400], victim[1400], cmd[4096];
  snprintf(dir, sizeof dir, "%s", root);
  for (int k = 0; k < 5; k++) { /* five levels of 200 characters: past 1000 */
    size_t n = strlen(dir);
    dir[n] = '/';
    memset(dir + n + 1, 'd', 200);
    dir[n + 201] = 0;
    cr_assert_eq(mkdir(dir, 0755), 0, "%s", strerror(errno));
  }
  snprintf(out, sizeof out, "%s/%0120d_tokens.bin", dir, 0);
  cr_assert(strlen(out) > 1100);
  snprintf(victim, sizeof victim, "%.1099s", out); /* what the cut temporary name was */
  f = fopen(victim, "w");
  cr_assert(f, "%s", strerror(errno));
  fputs("precious", f);
  fclose(f);
  snprintf(cmd, sizeof cmd, "%s/brigade tokenize --vocab %s --merges %s %s %s >/dev/null", test_build_dir(), vocab, merges, in, out);
  cr_assert_eq(test_sh(cmd), 0);
  char got[16] = "";
  f = fopen(victim, "r");
  cr_assert(f, "the other file is gone: %s", strerror(errno));
  cr_assert(fgets(got, sizeof got, f) && strcmp(got, "precious") == 0, "'%s'", got);
  fclose(f);
  cr_assert_eq(access(out, R_OK), 0);
  snprintf(cmd, sizeof cmd, "rm -rf %s", root);
  test_sh(cmd);
  unlink(in), unlink(vocab), unlink(merges);
}
