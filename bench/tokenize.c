/* bench/tokenize: GPT-2's byte-level BPE (pipe/bpe.c) on a tokenizer of GPT-2's form built here
 * (brigade ships none): every byte's symbol, then merges of letter pairs, of pairs with a third
 * letter and of pairs of pairs, 8,460 in all. Prints the encoding rate on data/kjv.txt (ordinary
 * text) and on single pieces of 5,000 to 80,000 random letters, where a pass over the piece per
 * merge grows with the piece: the time per byte should stay nearly flat as the piece grows
 * (docs/benchmarks.md has the pass-per-merge figures: 13.9 s for the 80,000).
 *   build/bench/tokenize [TEXT] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "pipe/bpe.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* GPT-2's symbol for byte b (bytes_to_unicode) as UTF-8 into f */
static void put_symbol(FILE *f, int b) {
  int n = 0;
  for (int c = 0; c < b; c++) n += !((c >= '!' && c <= '~') || (c >= 0xa1 && c <= 0xac) || (c >= 0xae && c <= 0xff));
  int printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  int cp = printable ? b : 256 + n;
  if (cp == '"' || cp == '\\') fputc('\\', f);
  if (cp < 0x80) fputc(cp, f);
  else fputc(0xc0 | cp >> 6, f), fputc(0x80 | (cp & 0x3f), f);
}

static int build(const char *vocab, const char *merges) {
  FILE *v = fopen(vocab, "w"), *m = fopen(merges, "w");
  if (!v || !m) return 1;
  fputc('{', v);
  for (int b = 0; b < 256; b++) fputs(b ? ",\"" : "\"", v), put_symbol(v, b), fprintf(v, "\":%d", b);
  fputs("#version: 0.2\n", m);
  int id = 256;
  const char *L = "abcdefghijklmnopqrstuvwxyz";
  for (int a = 0; a < 26; a++) /* "a b" -> ab */
    for (int b = 0; b < 26; b++) fprintf(m, "%c %c\n", L[a], L[b]), fprintf(v, ",\"%c%c\":%d", L[a], L[b], id++);
  for (int a = 0; a < 26; a++) /* "ab c" -> abc, c among the first 10 letters */
    for (int b = 0; b < 26; b++)
      for (int c = 0; c < 10; c++) fprintf(m, "%c%c %c\n", L[a], L[b], L[c]), fprintf(v, ",\"%c%c%c\":%d", L[a], L[b], L[c], id++);
  for (int a = 0; a < 64; a++) /* "ab cd" -> abcd over the first 8 and 4 letters */
    for (int c = 0; c < 16; c++) {
      fprintf(m, "%c%c %c%c\n", L[a / 8], L[a % 8], L[c / 4], L[c % 4]);
      fprintf(v, ",\"%c%c%c%c\":%d", L[a / 8], L[a % 8], L[c / 4], L[c % 4], id++);
    }
  fputc('}', v);
  fclose(v), fclose(m);
  return 0;
}

/* Seconds to encode n bytes of text (best of `runs`); its token count into *count. */
static double encode_time(const pipe_bpe *b, const char *text, size_t n, int runs, size_t *count) {
  double best = 1e30;
  for (int r = 0; r < runs; r++) {
    int32_t *ids = NULL;
    double t0 = now();
    if (pipe_bpe_encode(b, text, n, &ids, count)) {
      fprintf(stderr, "tokenize: %s\n", core_error_msg());
      exit(1);
    }
    double t = now() - t0;
    best = t < best ? t : best;
    free(ids);
  }
  return best;
}

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : "data/kjv.txt";
  char vocab[64], merges[64];
  snprintf(vocab, sizeof vocab, "/tmp/brigade_bench_vocab_%d.json", (int)getpid());
  snprintf(merges, sizeof merges, "/tmp/brigade_bench_merges_%d.txt", (int)getpid());
  pipe_bpe *b = NULL;
  if (build(vocab, merges) || pipe_bpe_load(&b, vocab, merges)) {
    fprintf(stderr, "tokenize: cannot build the tokenizer: %s\n", core_error_msg());
    return 1;
  }
  unlink(vocab), unlink(merges);
  FILE *f = fopen(path, "rb");
  if (f) {
    fseek(f, 0, SEEK_END);
    size_t n = (size_t)ftell(f);
    char *text = malloc(n + 1);
    rewind(f);
    n = fread(text, 1, n, f);
    fclose(f);
    size_t count;
    double t = encode_time(b, text, n, 3, &count);
    printf("%-28s %9zu bytes  %8zu tokens  %7.3f s  %6.2f MB/s\n", path, n, count, t, n / t / 1e6);
    free(text);
  } else {
    printf("%s: not found (make data), skipped\n", path);
  }
  double per[4];
  size_t lens[4] = {5000, 10000, 20000, 80000};
  uint64_t s = 1;
  for (int k = 0; k < 4; k++) {
    char *run = malloc(lens[k]);
    for (size_t i = 0; i < lens[k]; i++) s = s * 6364136223846793005ull + 1442695040888963407ull, run[i] = (char)('a' + (s >> 33) % 26);
    size_t count;
    double t = encode_time(b, run, lens[k], 3, &count);
    per[k] = t / (double)lens[k];
    printf("one piece of %6zu letters   %9zu bytes  %8zu tokens  %7.4f s  %6.1f ns a byte\n", lens[k], lens[k], count, t, 1e9 * per[k]);
    free(run);
  }
  printf("time per byte, 80,000 letters against 5,000: %.2fx (flat would be 1x)\n", per[3] / per[0]);
  pipe_bpe_free(b);
  return 0;
}
