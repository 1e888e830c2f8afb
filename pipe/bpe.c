/* pipe/bpe.c: GPT-2's byte-level BPE (see bpe.h). */
#include "pipe/bpe.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/json.h"
#include "pipe/unicode_classes.h"

/* ---- a string -> int map (open addressing, FNV-1a) ---- */

typedef struct {
  char **key;
  int *val;
  size_t cap, n;
} smap;

static uint64_t fnv(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
  return h;
}

static void smap_put(smap *m, const char *k, size_t kn, int v);

static void smap_grow(smap *m) {
  smap old = *m;
  m->cap = old.cap ? 2 * old.cap : 1024, m->n = 0;
  m->key = core_calloc(m->cap, sizeof(char *)), m->val = core_calloc(m->cap, sizeof(int));
  for (size_t i = 0; i < old.cap; i++)
    if (old.key[i]) smap_put(m, old.key[i], strlen(old.key[i]), old.val[i]), free(old.key[i]);
  free(old.key), free(old.val);
}

static void smap_put(smap *m, const char *k, size_t kn, int v) {
  if (2 * (m->n + 1) > m->cap) smap_grow(m);
  size_t i = fnv(k, kn) & (m->cap - 1);
  while (m->key[i] && !(strlen(m->key[i]) == kn && !memcmp(m->key[i], k, kn))) i = (i + 1) & (m->cap - 1);
  if (!m->key[i]) {
    m->key[i] = core_malloc(kn + 1), memcpy(m->key[i], k, kn), m->key[i][kn] = 0;
    m->n++;
  }
  m->val[i] = v;
}

static int smap_get(const smap *m, const char *k, size_t kn) {
  if (!m->cap) return -1;
  size_t i = fnv(k, kn) & (m->cap - 1);
  while (m->key[i]) {
    if (strlen(m->key[i]) == kn && !memcmp(m->key[i], k, kn)) return m->val[i];
    i = (i + 1) & (m->cap - 1);
  }
  return -1;
}

static void smap_free(smap *m) {
  for (size_t i = 0; i < m->cap; i++) free(m->key[i]);
  free(m->key), free(m->val);
}

struct pipe_bpe {
  smap vocab, merges;
  char **tok; /* [nvocab] id -> its string (UTF-8 of the mapped bytes) */
  int nvocab;
  int b2u[256];   /* byte -> code point (bytes_to_unicode) */
  int u2b[512];   /* code point -> byte, -1 */
};

static int utf8_put(char *o, int cp) {
  if (cp < 0x80) return o[0] = (char)cp, 1;
  if (cp < 0x800) return o[0] = (char)(0xc0 | cp >> 6), o[1] = (char)(0x80 | (cp & 0x3f)), 2;
  if (cp < 0x10000)
    return o[0] = (char)(0xe0 | cp >> 12), o[1] = (char)(0x80 | (cp >> 6 & 0x3f)), o[2] = (char)(0x80 | (cp & 0x3f)), 3;
  return o[0] = (char)(0xf0 | cp >> 18), o[1] = (char)(0x80 | (cp >> 12 & 0x3f)), o[2] = (char)(0x80 | (cp >> 6 & 0x3f)),
         o[3] = (char)(0x80 | (cp & 0x3f)), 4;
}

/* the code point at s[*i] (malformed bytes: each one a code point of its own value | 0x110000) */
static int utf8_get(const unsigned char *s, size_t n, size_t *i) {
  unsigned c = s[*i];
  int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (!len || *i + (size_t)len > n) return (int)(0x110000 | s[(*i)++]);
  int cp = len == 1 ? (int)c : (int)(c & (0x7f >> len));
  for (int k = 1; k < len; k++) {
    if ((s[*i + (size_t)k] & 0xc0) != 0x80) return (int)(0x110000 | s[(*i)++]);
    cp = cp << 6 | (s[*i + (size_t)k] & 0x3f);
  }
  *i += (size_t)len;
  return cp;
}

static void byte_map(pipe_bpe *b) {
  int n = 0, mapped[256] = {0};
  for (int c = 0; c < 512; c++) b->u2b[c] = -1;
  for (int c = '!'; c <= '~'; c++) mapped[c] = 1;
  for (int c = 0xa1; c <= 0xac; c++) mapped[c] = 1;
  for (int c = 0xae; c <= 0xff; c++) mapped[c] = 1;
  for (int c = 0; c < 256; c++) b->b2u[c] = mapped[c] ? c : 256 + n++;
  for (int c = 0; c < 256; c++) b->u2b[b->b2u[c]] = c;
}

int pipe_bpe_load(pipe_bpe **out, const char *vocab_path, const char *merges_path) {
  *out = NULL;
  core_json *v;
  int rc = core_json_parse_file(vocab_path, &v);
  if (rc) return core_error_prefix("tokenizer vocabulary %s", vocab_path);
  if (!core_json_is(v, CORE_JSON_OBJECT) || core_json_len(v) == 0) {
    core_json_free(v);
    return core_error_set(CORE_EINPUT, "%s: a vocabulary is a JSON object of token -> id", vocab_path);
  }
  pipe_bpe *b = core_calloc(1, sizeof *b);
  byte_map(b);
  for (size_t i = 0; i < core_json_len(v) && !rc; i++) {
    const core_json *e = core_json_at(v, i);
    int id;
    if (core_json_as_int(e, 0, 1 << 24, &id))
      rc = core_error_set(CORE_EINPUT, "%s:%d: the id of '%s' is not an integer in [0, 2^24]", vocab_path, e->line, e->key);
    else smap_put(&b->vocab, e->key, strlen(e->key), id), b->nvocab = id + 1 > b->nvocab ? id + 1 : b->nvocab;
  }
  if (!rc) {
    b->tok = core_calloc((size_t)b->nvocab, sizeof(char *));
    for (size_t i = 0; i < core_json_len(v); i++) {
      const core_json *e = core_json_at(v, i);
      int id = (int)e->num;
      free(b->tok[id]);
      b->tok[id] = strdup(e->key);
    }
  }
  core_json_free(v);
  FILE *f = rc ? NULL : fopen(merges_path, "r");
  if (!rc && !f) rc = core_error_set(CORE_EINPUT, "cannot open merges %s: %s", merges_path, strerror(errno));
  char line[1024];
  int rank = 0, ln = 0;
  while (!rc && fgets(line, sizeof line, f)) {
    ln++;
    size_t len = strcspn(line, "\r\n");
    line[len] = 0;
    if (len == 0 || (ln == 1 && !strncmp(line, "#version", 8))) continue;
    char *sp = strchr(line, ' ');
    if (!sp || sp == line || !sp[1] || strchr(sp + 1, ' '))
      rc = core_error_set(CORE_EINPUT, "%s:%d: a merge is two tokens and one space, not '%s'", merges_path, ln, line);
    else if (smap_get(&b->merges, line, len) < 0) smap_put(&b->merges, line, len, rank++);
  }
  if (f) fclose(f);
  if (rc) {
    pipe_bpe_free(b);
    return rc;
  }
  *out = b;
  return CORE_OK;
}

void pipe_bpe_free(pipe_bpe *b) {
  if (!b) return;
  smap_free(&b->vocab), smap_free(&b->merges);
  for (int i = 0; i < b->nvocab; i++) free(b->tok[i]);
  free(b->tok), free(b);
}

int pipe_bpe_vocab(const pipe_bpe *b) { return b->nvocab; }

/* ---- the pre-split: GPT-2's pattern over code points ---- */

static int is_space(int c) {
  return c == ' ' || (c >= 9 && c <= 13) || c == 0x85 || c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) ||
         c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}
/* whether c lies in one of n sorted, disjoint ranges */
static int in_ranges(const int32_t (*r)[2], size_t n, int c) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (c < r[mid][0]) hi = mid;
    else if (c > r[mid][1]) lo = mid + 1;
    else return 1;
  }
  return 0;
}
/* \p{N} and \p{L}: Unicode's numbers and letters (pipe/unicode_classes.h); a malformed byte
 * (utf8_get gives it past U+10FFFF) is neither */
static int is_number(int c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  return c < 0x110000 && in_ranges(unicode_numbers, sizeof unicode_numbers / sizeof unicode_numbers[0], c);
}
static int is_letter(int c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  return c < 0x110000 && in_ranges(unicode_letters, sizeof unicode_letters / sizeof unicode_letters[0], c);
}
static int is_other(int c) { return !is_space(c) && !is_letter(c) && !is_number(c); }

/* the end (in code points) of the piece starting at i */
static size_t piece_end(const int *cp, size_t n, size_t i) {
  if (cp[i] == '\'' && i + 1 < n) {
    static const char *const tails[] = {"s", "t", "re", "ve", "m", "ll", "d"};
    for (int k = 0; k < 7; k++) {
      size_t L = strlen(tails[k]), j = 0;
      while (j < L && i + 1 + j < n && cp[i + 1 + j] == tails[k][j]) j++;
      if (j == L) return i + 1 + L;
    }
  }
  int (*cls[3])(int) = {is_letter, is_number, is_other};
  for (int k = 0; k < 3; k++) {
    size_t j = i;
    if (cp[j] == ' ' && j + 1 < n && cls[k](cp[j + 1])) j++;
    if (!cls[k](cp[j])) continue;
    while (j < n && cls[k](cp[j])) j++;
    return j;
  }
  size_t j = i; /* whitespace: a run followed by a non-space leaves its last character to that */
  while (j < n && is_space(cp[j])) j++;
  if (j < n && j - i >= 2) return j - 1;
  return j > i ? j : i + 1;
}

/* BPE on one piece (its mapped symbols), the ids appended to *ids */
static int bpe_piece(const pipe_bpe *b, const unsigned char *bytes, size_t n, int32_t **ids, size_t *count, size_t *cap) {
  char **sym = core_malloc(sizeof(char *) * n);
  size_t ns = n;
  for (size_t i = 0; i < n; i++) {
    char u[8];
    int l = utf8_put(u, b->b2u[bytes[i]]);
    sym[i] = core_malloc((size_t)l + 1), memcpy(sym[i], u, (size_t)l), sym[i][l] = 0;
  }
  char pair[2048];
  for (;;) {
    int best = -1;
    size_t at = 0;
    for (size_t i = 0; i + 1 < ns; i++) {
      int l = snprintf(pair, sizeof pair, "%s %s", sym[i], sym[i + 1]);
      int r = l < (int)sizeof pair ? smap_get(&b->merges, pair, (size_t)l) : -1;
      if (r >= 0 && (best < 0 || r < best)) best = r, at = i;
    }
    if (best < 0) break;
    char first[1024], second[1024]; /* merge every occurrence of that pair, left to right */
    snprintf(first, sizeof first, "%s", sym[at]), snprintf(second, sizeof second, "%s", sym[at + 1]);
    size_t w = 0;
    for (size_t i = 0; i < ns;) {
      if (i + 1 < ns && !strcmp(sym[i], first) && !strcmp(sym[i + 1], second)) {
        size_t l1 = strlen(sym[i]), l2 = strlen(sym[i + 1]);
        char *m = core_malloc(l1 + l2 + 1);
        memcpy(m, sym[i], l1), memcpy(m + l1, sym[i + 1], l2 + 1);
        free(sym[i]), free(sym[i + 1]);
        sym[w++] = m, i += 2;
      } else {
        sym[w++] = sym[i++];
      }
    }
    ns = w;
  }
  int rc = CORE_OK;
  for (size_t i = 0; i < ns; i++) {
    int id = rc ? -1 : smap_get(&b->vocab, sym[i], strlen(sym[i]));
    if (!rc && id < 0) rc = core_error_set(CORE_EINPUT, "the vocabulary has no token '%s' (a piece of the text)", sym[i]);
    if (!rc) {
      if (*count == *cap) *ids = core_realloc(*ids, sizeof(int32_t) * (*cap = *cap ? 2 * *cap : 1024));
      (*ids)[(*count)++] = id;
    }
    free(sym[i]);
  }
  free(sym);
  return rc;
}

int pipe_bpe_encode(const pipe_bpe *b, const char *text, size_t n, int32_t **ids, size_t *count) {
  *ids = NULL, *count = 0;
  size_t cap = 0, ncp = 0;
  int *cp = core_malloc(sizeof(int) * (n + 1));
  size_t *at = core_malloc(sizeof(size_t) * (n + 1)); /* byte offset of each code point */
  for (size_t i = 0; i < n;) at[ncp] = i, cp[ncp++] = utf8_get((const unsigned char *)text, n, &i);
  at[ncp] = n;
  int rc = CORE_OK;
  for (size_t i = 0; i < ncp && !rc;) {
    size_t j = piece_end(cp, ncp, i);
    rc = bpe_piece(b, (const unsigned char *)text + at[i], at[j] - at[i], ids, count, &cap);
    i = j;
  }
  free(cp), free(at);
  if (rc) free(*ids), *ids = NULL, *count = 0;
  return rc;
}

int pipe_bpe_split(const char *text, size_t n, size_t **ends, size_t *count) {
  size_t ncp = 0;
  int *cp = core_malloc(sizeof(int) * (n + 1));
  size_t *at = core_malloc(sizeof(size_t) * (n + 1));
  for (size_t i = 0; i < n;) at[ncp] = i, cp[ncp++] = utf8_get((const unsigned char *)text, n, &i);
  at[ncp] = n;
  *ends = core_malloc(sizeof(size_t) * (ncp + 1)), *count = 0;
  for (size_t i = 0; i < ncp;) {
    size_t j = piece_end(cp, ncp, i);
    (*ends)[(*count)++] = at[j];
    i = j;
  }
  free(cp), free(at);
  return CORE_OK;
}

int pipe_bpe_decode(const pipe_bpe *b, int32_t id, char *buf, int cap) {
  if (id < 0 || id >= b->nvocab || !b->tok[id]) return -1;
  const unsigned char *s = (const unsigned char *)b->tok[id];
  size_t n = strlen(b->tok[id]), i = 0;
  int k = 0;
  while (i < n && k < cap) {
    int c = utf8_get(s, n, &i);
    buf[k++] = (char)(c < 512 && b->u2b[c] >= 0 ? b->u2b[c] : '?');
  }
  return k;
}
