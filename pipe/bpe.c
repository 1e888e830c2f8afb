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
  char *line = NULL; /* any length: a merge of two long tokens is one line still */
  size_t capline = 0;
  int rank = 0, ln = 0;
  while (!rc && getline(&line, &capline, f) >= 0) {
    ln++;
    size_t len = strcspn(line, "\r\n");
    line[len] = 0;
    if (len == 0 || (ln == 1 && !strncmp(line, "#version", 8))) continue;
    char *sp = strchr(line, ' ');
    if (!sp || sp == line || !sp[1] || strchr(sp + 1, ' '))
      rc = core_error_set(CORE_EINPUT, "%s:%d: a merge is two tokens and one space, not '%.200s'", merges_path, ln, line);
    else if (smap_get(&b->merges, line, len) < 0) smap_put(&b->merges, line, len, rank++);
  }
  free(line);
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
  for (int i = 0; b->tok && i < b->nvocab; i++) free(b->tok[i]); /* no table when the vocabulary failed part way */
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

/* ---- merging one piece ----
 * GPT-2's rule: take the adjacent pair of lowest merge rank, merge every occurrence of it left to
 * right, and again until no adjacent pair has a rank. Done directly that is a pass over the piece
 * per merge, quadratic in its length (a run of 80,000 letters took 13 s). Here the adjacent pairs
 * wait in a heap by (rank, position): the lowest comes out first, its occurrences in order, each
 * merged where both symbols are still as they were pushed. The pairs a merge forms wait aside
 * until that rank's occurrences are all merged, as the direct rule has them (with a merges list
 * learned in order they rank after it anyway). */

typedef struct {
  int rank, pos;   /* the pair's rank; its left symbol, by position in the piece */
  int right;       /* its right symbol */
  unsigned vl, vr; /* the two symbols' versions when pushed: the pair stands while both hold */
} bpe_pair;

typedef struct {
  const pipe_bpe *b;
  char **sym;      /* [n] each position's symbol (UTF-8), NULL once merged into its left */
  size_t *len;
  int *next, *prev; /* neighbours, -1 at the ends */
  unsigned *ver;
  bpe_pair *heap;
  size_t nheap, capheap;
  bpe_pair *aside; /* formed during the current rank's merges */
  size_t naside, capaside;
  char *buf;       /* "left right", for the lookup */
  size_t capbuf;
} bpe_work;

static int pair_before(const bpe_pair *x, const bpe_pair *y) {
  return x->rank < y->rank || (x->rank == y->rank && x->pos < y->pos);
}

static void heap_push(bpe_work *w, bpe_pair e) {
  if (w->nheap == w->capheap) w->heap = core_realloc(w->heap, sizeof(bpe_pair) * (w->capheap = w->capheap ? 2 * w->capheap : 64));
  size_t i = w->nheap++;
  while (i > 0 && pair_before(&e, &w->heap[(i - 1) / 2])) w->heap[i] = w->heap[(i - 1) / 2], i = (i - 1) / 2;
  w->heap[i] = e;
}

static bpe_pair heap_pop(bpe_work *w) {
  bpe_pair top = w->heap[0], last = w->heap[--w->nheap];
  size_t i = 0, n = w->nheap;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && pair_before(&w->heap[c + 1], &w->heap[c])) c++;
    if (!pair_before(&w->heap[c], &last)) break;
    w->heap[i] = w->heap[c], i = c;
  }
  if (n) w->heap[i] = last;
  return top;
}

/* The pair of symbols at l and r as it stands, if it has a rank: into the heap, or aside. */
static void offer(bpe_work *w, int l, int r, int aside) {
  if (l < 0 || r < 0) return;
  size_t n = w->len[l] + 1 + w->len[r];
  if (n + 1 > w->capbuf) w->buf = core_realloc(w->buf, w->capbuf = 2 * (n + 1));
  memcpy(w->buf, w->sym[l], w->len[l]), w->buf[w->len[l]] = ' ', memcpy(w->buf + w->len[l] + 1, w->sym[r], w->len[r]);
  int rank = smap_get(&w->b->merges, w->buf, n);
  if (rank < 0) return;
  bpe_pair e = {rank, l, r, w->ver[l], w->ver[r]};
  if (!aside) {
    heap_push(w, e);
    return;
  }
  if (w->naside == w->capaside) w->aside = core_realloc(w->aside, sizeof(bpe_pair) * (w->capaside = w->capaside ? 2 * w->capaside : 16));
  w->aside[w->naside++] = e;
}

/* BPE on one piece (its mapped symbols), the ids appended to *ids */
static int bpe_piece(const pipe_bpe *b, const unsigned char *bytes, size_t n, int32_t **ids, size_t *count, size_t *cap) {
  bpe_work w = {.b = b};
  w.sym = core_malloc(sizeof(char *) * n), w.len = core_malloc(sizeof(size_t) * n);
  w.next = core_malloc(sizeof(int) * n), w.prev = core_malloc(sizeof(int) * n), w.ver = core_calloc(n, sizeof(unsigned));
  for (size_t i = 0; i < n; i++) {
    char u[8];
    int l = utf8_put(u, b->b2u[bytes[i]]);
    w.sym[i] = core_malloc((size_t)l + 1), memcpy(w.sym[i], u, (size_t)l), w.sym[i][l] = 0, w.len[i] = (size_t)l;
    w.prev[i] = (int)i - 1, w.next[i] = i + 1 < n ? (int)i + 1 : -1;
  }
  for (size_t i = 0; i + 1 < n; i++) offer(&w, (int)i, (int)i + 1, 0);
  int rank = -1; /* the rank whose occurrences are being merged, -1 between ranks */
  while (w.nheap > 0 || w.naside > 0) {
    if (w.naside > 0 && (w.nheap == 0 || w.heap[0].rank != rank)) { /* that rank is done */
      for (size_t i = 0; i < w.naside; i++) heap_push(&w, w.aside[i]);
      w.naside = 0, rank = -1;
      continue;
    }
    bpe_pair e = heap_pop(&w);
    int l = e.pos, r = e.right;
    if (!w.sym[l] || !w.sym[r] || w.next[l] != r || w.ver[l] != e.vl || w.ver[r] != e.vr) continue; /* gone */
    rank = e.rank;
    char *m = core_malloc(w.len[l] + w.len[r] + 1);
    memcpy(m, w.sym[l], w.len[l]), memcpy(m + w.len[l], w.sym[r], w.len[r] + 1);
    free(w.sym[l]), free(w.sym[r]);
    w.sym[l] = m, w.len[l] += w.len[r], w.sym[r] = NULL, w.ver[l]++;
    w.next[l] = w.next[r];
    if (w.next[l] >= 0) w.prev[w.next[l]] = l;
    offer(&w, w.prev[l], l, 1), offer(&w, l, w.next[l], 1);
  }
  int rc = CORE_OK;
  for (int i = n ? 0 : -1; i >= 0; i = w.next[i]) {
    int id = rc ? -1 : smap_get(&b->vocab, w.sym[i], w.len[i]);
    if (!rc && id < 0) rc = core_error_set(CORE_EINPUT, "the vocabulary has no token '%s' (a piece of the text)", w.sym[i]);
    if (!rc) {
      if (*count == *cap) *ids = core_realloc(*ids, sizeof(int32_t) * (*cap = *cap ? 2 * *cap : 1024));
      (*ids)[(*count)++] = id;
    }
  }
  for (size_t i = 0; i < n; i++) free(w.sym[i]);
  free(w.sym), free(w.len), free(w.next), free(w.prev), free(w.ver), free(w.heap), free(w.aside), free(w.buf);
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

size_t pipe_bpe_last_cut(const char *text, size_t n) {
  for (size_t i = n; i-- > 1;)
    if (text[i] == ' ' && text[i - 1] > ' ' && text[i - 1] < 0x7f) return i;
  return 0;
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
