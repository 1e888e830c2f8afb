/* core/json.c: strict JSON reader (recursive descent with a depth limit) and writing helpers.
 *
 * Memory: a document is a json_doc (the root node first, so the root pointer is the document)
 * plus a chain of arena blocks holding every other node, string and item array. Children of
 * the containers being parsed wait on one shared stack and are copied into an exact-size item
 * array when their container closes. Nothing here aborts: out of memory is CORE_ERUNTIME. */
#include "core/json.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* ---- arena ---- */

typedef struct block {
  struct block *next;
  size_t used, cap;
  max_align_t data[];
} block;

typedef struct {
  core_json root; /* first: core_json_free turns the root back into its document */
  block *blocks;
} json_doc;

enum { BLOCK_MIN = 16 << 10, BLOCK_MAX = 8 << 20 };

static void *arena_alloc(json_doc *d, size_t n) {
  const size_t a = sizeof(max_align_t);
  if (n > SIZE_MAX / 2) return NULL;
  n = (n + a - 1) / a * a;
  block *b = d->blocks;
  if (!b || b->cap - b->used < n) {
    size_t cap = b ? b->cap * 2 : BLOCK_MIN;
    if (cap > BLOCK_MAX) cap = BLOCK_MAX;
    if (cap < n) cap = n;
    block *nb = malloc(sizeof *nb + cap);
    if (!nb) return NULL;
    nb->used = 0, nb->cap = cap;
    if (b && n > BLOCK_MIN / 4 && b->cap - b->used >= BLOCK_MIN / 4) {
      /* a big one-off (a long string, a big item array) gets its own block behind the current
       * one, which keeps serving the small allocations */
      nb->next = b->next, b->next = nb;
    } else {
      nb->next = b, d->blocks = nb;
    }
    b = nb;
  }
  void *m = (char *)b->data + b->used;
  b->used += n;
  return m;
}

/* ---- UTF-8 ---- */

/* Length of the valid UTF-8 sequence starting at s (at most `avail` bytes readable), 0 if
 * invalid: overlong forms, surrogates and code points above U+10FFFF are refused. */
static int utf8_len(const unsigned char *s, size_t avail) {
  unsigned char c = s[0];
  int n;
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf)
    n = 2;
  else if (c >= 0xe0 && c <= 0xef)
    n = 3;
  else if (c >= 0xf0 && c <= 0xf4)
    n = 4;
  else
    return 0;
  if (avail < (size_t)n) return 0;
  for (int i = 1; i < n; i++)
    if ((s[i] & 0xc0) != 0x80) return 0;
  if ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] > 0x9f) || (c == 0xf0 && s[1] < 0x90) ||
      (c == 0xf4 && s[1] > 0x8f))
    return 0;
  return n;
}

static size_t put_utf8(char *o, unsigned cp) {
  if (cp < 0x80) {
    o[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (char)(0xc0 | cp >> 6), o[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (char)(0xe0 | cp >> 12), o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[2] = (char)(0x80 | (cp & 0x3f));
    return 3;
  }
  o[0] = (char)(0xf0 | cp >> 18), o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
  o[2] = (char)(0x80 | ((cp >> 6) & 0x3f)), o[3] = (char)(0x80 | (cp & 0x3f));
  return 4;
}

/* ---- parser ---- */

typedef struct {
  const char *at, *end;
  const char *line_start; /* first byte of the current line: columns count from there */
  int line;
  const char *name;
  json_doc *doc;
  core_json **stack; /* children of the open containers */
  size_t sn, scap;
} parser;

static int col_of(const parser *p, const char *at) {
  ptrdiff_t c = at - p->line_start + 1;
  return c > INT_MAX ? INT_MAX : (int)c;
}

static int fail_at(const parser *p, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail_at(const parser *p, int line, int col, const char *fmt, ...) {
  char what[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return core_error_set(CORE_EINPUT, "%s:%d:%d: %s", p->name, line, col, what);
}

#define FAIL(p, at, ...) fail_at((p), (p)->line, col_of((p), (at)), __VA_ARGS__)

static int oom(const parser *p) {
  return core_error_set(CORE_ERUNTIME, "%s: out of memory while reading JSON", p->name);
}

/* "'x'", "end of input" or "byte 0x01": what the parser found at `at`. */
static const char *found(const parser *p, const char *at, char buf[16]) {
  if (at >= p->end) return "end of input";
  unsigned char c = (unsigned char)*at;
  if (c > 0x20 && c < 0x7f)
    snprintf(buf, 16, "'%c'", c);
  else
    snprintf(buf, 16, "byte 0x%02x", c);
  return buf;
}

#define FAIL_FOUND(p, expected)                                                                    \
  do {                                                                                             \
    char fb_[16];                                                                                  \
    return FAIL((p), (p)->at, "%s, found %s", (expected), found((p), (p)->at, fb_));               \
  } while (0)

static void skip_ws(parser *p) {
  while (p->at < p->end) {
    char c = *p->at;
    if (c == '\n') {
      p->line += p->line < INT_MAX;
      p->line_start = p->at + 1;
    } else if (c != ' ' && c != '\t' && c != '\r') {
      return;
    }
    p->at++;
  }
}

static core_json *new_node(parser *p) {
  core_json *n = arena_alloc(p->doc, sizeof *n);
  if (n) memset(n, 0, sizeof *n);
  return n;
}

static int push(parser *p, core_json *c) {
  if (p->sn == p->scap) {
    size_t cap = p->scap ? 2 * p->scap : 64;
    core_json **s = realloc(p->stack, cap * sizeof *s);
    if (!s) return oom(p);
    p->stack = s, p->scap = cap;
  }
  p->stack[p->sn++] = c;
  return CORE_OK;
}

static int hex4(const char *s, const char *end, unsigned *out) {
  if (end - s < 4) return -1;
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    char c = s[i];
    unsigned h;
    if (c >= '0' && c <= '9')
      h = (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f')
      h = (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F')
      h = (unsigned)(c - 'A' + 10);
    else
      return -1;
    v = v * 16 + h;
  }
  *out = v;
  return 0;
}

/* One \u escape (or surrogate pair) at s (the backslash); appends UTF-8 to o. */
static int parse_u_escape(parser *p, const char **sp, const char *e, char *o, size_t *k) {
  const char *s = *sp;
  unsigned cp, lo;
  if (hex4(s + 2, e, &cp)) return FAIL(p, s, "bad \\u escape (expected four hex digits)");
  s += 6;
  if (cp >= 0xd800 && cp <= 0xdbff) {
    if (e - s < 6 || s[0] != '\\' || s[1] != 'u' || hex4(s + 2, e, &lo) || lo < 0xdc00 ||
        lo > 0xdfff)
      return FAIL(p, *sp, "unpaired UTF-16 surrogate \\u%04x", cp);
    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
    s += 6;
  } else if (cp >= 0xdc00 && cp <= 0xdfff) {
    return FAIL(p, *sp, "unpaired UTF-16 surrogate \\u%04x", cp);
  } else if (cp == 0) {
    return FAIL(p, *sp, "\\u0000 is not supported (strings are C strings)");
  }
  *k += put_utf8(o + *k, cp);
  *sp = s;
  return CORE_OK;
}

/* A string at p->at (the opening quote). Decoding never grows it, so the raw length bounds the
 * decoded one. Strings cannot hold raw newlines, so the whole string lies on the current line. */
static int parse_string(parser *p, const char **out, size_t *outlen) {
  const char *q = p->at + 1, *e = q;
  while (e < p->end && *e != '"')
    e += (*e == '\\' && e + 1 < p->end) ? 2 : 1;
  if (e >= p->end) return FAIL(p, p->at, "unterminated string");
  char *o = arena_alloc(p->doc, (size_t)(e - q) + 1);
  if (!o) return oom(p);
  size_t k = 0;
  const char *s = q;
  while (s < e) {
    unsigned char c = (unsigned char)*s;
    if (c == '\\') {
      char x = s[1]; /* s + 1 < e: the scan above never stops right after a backslash */
      const char *simple = strchr("\"\\/bfnrt", x);
      if (x && simple) {
        o[k++] = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
        s += 2;
      } else if (x == 'u') {
        int rc = parse_u_escape(p, &s, e, o, &k);
        if (rc) return rc;
      } else {
        char fb[16];
        return FAIL(p, s, "bad escape in string: backslash followed by %s", found(p, s + 1, fb));
      }
    } else if (c < 0x20) {
      return FAIL(p, s, "control character 0x%02x in string (write it as an escape)", c);
    } else {
      int n = utf8_len((const unsigned char *)s, (size_t)(e - s));
      if (n == 0) return FAIL(p, s, "invalid UTF-8 in string (byte 0x%02x)", c);
      memcpy(o + k, s, (size_t)n);
      k += (size_t)n, s += n;
    }
  }
  o[k] = 0;
  *out = o, *outlen = k;
  p->at = e + 1;
  return CORE_OK;
}

static int is_digit(const char *s, const char *end) { return s < end && *s >= '0' && *s <= '9'; }

static int parse_number(parser *p, core_json *v) {
  const char *s = p->at, *q = s, *end = p->end;
  if (*q == '-') q++;
  if (!is_digit(q, end)) return FAIL(p, q, "expected a digit after '-'");
  if (*q == '0') {
    q++;
    if (is_digit(q, end)) return FAIL(p, s, "numbers cannot have leading zeros");
  } else {
    while (is_digit(q, end))
      q++;
  }
  if (q < end && *q == '.') {
    q++;
    if (!is_digit(q, end)) return FAIL(p, q, "expected a digit after the decimal point");
    while (is_digit(q, end))
      q++;
  }
  if (q < end && (*q == 'e' || *q == 'E')) {
    q++;
    if (q < end && (*q == '+' || *q == '-')) q++;
    if (!is_digit(q, end)) return FAIL(p, q, "expected a digit in the exponent");
    while (is_digit(q, end))
      q++;
  }
  /* strtod needs a terminated copy: the text need not be terminated after the number */
  size_t n = (size_t)(q - s);
  char small[64], *buf = n < sizeof small ? small : malloc(n + 1);
  if (!buf) return oom(p);
  memcpy(buf, s, n);
  buf[n] = 0;
  double d = strtod(buf, NULL);
  if (buf != small) free(buf);
  if (!isfinite(d))
    return FAIL(p, s, "number %.*s%s is too large for a double", n > 24 ? 24 : (int)n, s,
                n > 24 ? "..." : "");
  v->type = CORE_JSON_NUMBER, v->num = d;
  p->at = q;
  return CORE_OK;
}

static int parse_literal(parser *p, core_json *v) {
  static const struct {
    const char *word;
    core_json_type type;
    double num;
  } lits[] = {
      {"true", CORE_JSON_BOOL, 1}, {"false", CORE_JSON_BOOL, 0}, {"null", CORE_JSON_NULL, 0}};
  size_t avail = (size_t)(p->end - p->at);
  for (size_t i = 0; i < 3; i++) {
    size_t n = strlen(lits[i].word);
    if (avail >= n && memcmp(p->at, lits[i].word, n) == 0) {
      v->type = lits[i].type, v->num = lits[i].num;
      p->at += n;
      return CORE_OK;
    }
    if (avail < n && memcmp(p->at, lits[i].word, avail) == 0)
      return FAIL(p, p->end, "unexpected end of input (in '%s')", lits[i].word);
  }
  return FAIL(p, p->at, "invalid literal (expected true, false or null)");
}

typedef struct {
  const char *key;
  size_t idx;
} keyed;

static int cmp_keyed(const void *a, const void *b) {
  const keyed *x = a, *y = b;
  int c = strcmp(x->key, y->key);
  return c ? c : (x->idx > y->idx) - (x->idx < y->idx);
}

/* The first member (in document order) whose name appeared before, or NULL. Small objects are
 * checked pair by pair; big ones are sorted, so no object makes this quadratic. */
static int check_duplicates(parser *p, const core_json *obj) {
  const core_json *dup = NULL;
  size_t n = obj->len;
  if (n <= 16) {
    for (size_t j = 1; j < n && !dup; j++)
      for (size_t i = 0; i < j; i++)
        if (strcmp(obj->items[i]->key, obj->items[j]->key) == 0) {
          dup = obj->items[j];
          break;
        }
  } else {
    keyed *k = malloc(n * sizeof *k);
    if (!k) return oom(p);
    for (size_t i = 0; i < n; i++)
      k[i] = (keyed){obj->items[i]->key, i};
    qsort(k, n, sizeof *k, cmp_keyed);
    size_t first = SIZE_MAX;
    for (size_t i = 1; i < n; i++)
      if (strcmp(k[i - 1].key, k[i].key) == 0 && k[i].idx < first) first = k[i].idx;
    free(k);
    if (first != SIZE_MAX) dup = obj->items[first];
  }
  if (dup) return fail_at(p, dup->line, dup->col, "duplicate member name '%.64s'", dup->key);
  return CORE_OK;
}

static int parse_value(parser *p, core_json *v, int depth);

static int parse_container(parser *p, core_json *v, int depth, int object) {
  const char close = object ? '}' : ']';
  v->type = object ? CORE_JSON_OBJECT : CORE_JSON_ARRAY;
  p->at++;
  size_t base = p->sn;
  skip_ws(p);
  if (p->at < p->end && *p->at == close) {
    p->at++;
    return CORE_OK;
  }
  for (;;) {
    core_json *c = new_node(p);
    if (!c) return oom(p);
    int rc;
    if (object) {
      size_t klen;
      skip_ws(p);
      if (p->at >= p->end || *p->at != '"') FAIL_FOUND(p, "expected a member name (a string)");
      if ((rc = parse_string(p, &c->key, &klen))) return rc;
      skip_ws(p);
      if (p->at >= p->end || *p->at != ':') FAIL_FOUND(p, "expected ':' after the member name");
      p->at++;
    }
    if ((rc = parse_value(p, c, depth)) || (rc = push(p, c))) return rc;
    skip_ws(p);
    if (p->at < p->end && *p->at == ',') {
      p->at++;
      skip_ws(p);
      if (p->at < p->end && *p->at == close)
        return FAIL(p, p->at, "trailing comma before '%c'", close);
      continue;
    }
    if (p->at < p->end && *p->at == close) {
      p->at++;
      break;
    }
    FAIL_FOUND(p, object ? "expected ',' or '}' after an object member"
                         : "expected ',' or ']' after an array element");
  }
  size_t n = p->sn - base;
  v->items = arena_alloc(p->doc, n * sizeof *v->items);
  if (!v->items) return oom(p);
  memcpy(v->items, p->stack + base, n * sizeof *v->items);
  v->len = n;
  p->sn = base;
  return object ? check_duplicates(p, v) : CORE_OK;
}

static int parse_value(parser *p, core_json *v, int depth) {
  skip_ws(p);
  v->line = p->line, v->col = col_of(p, p->at), v->src = p->name;
  if (p->at >= p->end) return FAIL(p, p->at, "unexpected end of input, expected a value");
  switch (*p->at) {
  case '{':
  case '[':
    if (depth >= CORE_JSON_MAX_DEPTH)
      return FAIL(p, p->at, "nesting deeper than %d levels", CORE_JSON_MAX_DEPTH);
    return parse_container(p, v, depth + 1, *p->at == '{');
  case '"': v->type = CORE_JSON_STRING; return parse_string(p, &v->str, &v->len);
  case 't':
  case 'f':
  case 'n': return parse_literal(p, v);
  default:
    if (*p->at == '-' || (*p->at >= '0' && *p->at <= '9')) return parse_number(p, v);
    FAIL_FOUND(p, "expected a value");
  }
}

int core_json_parse(const char *text, size_t n, const char *name, core_json **out) {
  *out = NULL;
  if (!name) name = "<json>";
  json_doc *d = calloc(1, sizeof *d);
  if (!d) return core_error_set(CORE_ERUNTIME, "%s: out of memory while reading JSON", name);
  char *nm = arena_alloc(d, strlen(name) + 1);
  if (!nm) {
    free(d);
    return core_error_set(CORE_ERUNTIME, "%s: out of memory while reading JSON", name);
  }
  strcpy(nm, name);
  if (!text) n = 0;
  parser p = {.at = text, .end = text + n, .line_start = text, .line = 1, .name = nm, .doc = d};
  if (n >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0) p.at += 3, p.line_start = p.at; /* BOM */
  int rc = parse_value(&p, &d->root, 0);
  if (!rc) {
    skip_ws(&p);
    if (p.at < p.end) {
      char fb[16];
      rc =
          FAIL(&p, p.at, "trailing characters after the JSON value, found %s", found(&p, p.at, fb));
    }
  }
  free(p.stack);
  if (rc) {
    core_json_free(&d->root);
    return rc;
  }
  *out = &d->root;
  return CORE_OK;
}

int core_json_parse_file(const char *path, core_json **out) {
  *out = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return core_error_set(CORE_EINPUT, "cannot open %s: %s", path, strerror(errno));
  size_t cap = 1 << 16, n = 0, k;
  char *buf = malloc(cap);
  while (buf && (k = fread(buf + n, 1, cap - n, f)) > 0) {
    n += k;
    if (n == cap) {
      char *b = cap < SIZE_MAX / 2 ? realloc(buf, cap * 2) : NULL;
      if (!b) free(buf);
      buf = b, cap *= 2;
    }
  }
  int err = ferror(f) ? errno : 0;
  fclose(f);
  if (!buf) return core_error_set(CORE_ERUNTIME, "%s: out of memory while reading it", path);
  if (err) {
    free(buf);
    return core_error_set(CORE_EINPUT, "cannot read %s: %s", path, strerror(err));
  }
  int rc = core_json_parse(buf, n, path, out);
  free(buf);
  return rc;
}

void core_json_free(core_json *root) {
  if (!root) return;
  json_doc *d = (json_doc *)root;
  for (block *b = d->blocks, *nx; b; b = nx) {
    nx = b->next;
    free(b);
  }
  free(d);
}

/* ---- lookups and typed accessors ---- */

const char *core_json_type_name(core_json_type t) {
  switch (t) {
  case CORE_JSON_NULL: return "null";
  case CORE_JSON_BOOL: return "a boolean";
  case CORE_JSON_NUMBER: return "a number";
  case CORE_JSON_STRING: return "a string";
  case CORE_JSON_ARRAY: return "an array";
  case CORE_JSON_OBJECT: return "an object";
  }
  return "?";
}

int core_json_is(const core_json *j, core_json_type t) { return j && j->type == t; }

const core_json *core_json_get(const core_json *obj, const char *key) {
  if (!core_json_is(obj, CORE_JSON_OBJECT) || !key) return NULL;
  for (size_t i = 0; i < obj->len; i++)
    if (strcmp(obj->items[i]->key, key) == 0) return obj->items[i];
  return NULL;
}

size_t core_json_len(const core_json *j) {
  return j && (j->type == CORE_JSON_ARRAY || j->type == CORE_JSON_OBJECT) ? j->len : 0;
}

const core_json *core_json_at(const core_json *arr, size_t i) {
  return i < core_json_len(arr) ? arr->items[i] : NULL;
}

/* "<src>:<line>:<col>: 'key' must be <want>, found <got>" (or "expected <want>" without key). */
static int wrong(const core_json *j, const char *key, const char *want, const char *got) {
  if (!j) return core_error_set(CORE_EINPUT, "expected %s, found nothing", want);
  if (key)
    return core_error_set(CORE_EINPUT, "%s:%d:%d: '%.64s' must be %s, found %s", j->src, j->line,
                          j->col, key, want, got);
  return core_error_set(CORE_EINPUT, "%s:%d:%d: expected %s, found %s", j->src, j->line, j->col,
                        want, got);
}

static int as_type(const core_json *j, const char *key, core_json_type t) {
  if (j && j->type == t) return CORE_OK;
  return wrong(j, key, core_json_type_name(t), j ? core_json_type_name(j->type) : "nothing");
}

static int as_int(const core_json *j, const char *key, int lo, int hi, int *out) {
  char want[96], got[48];
  snprintf(want, sizeof want, "an integer in [%d, %d]", lo, hi);
  if (!j || j->type != CORE_JSON_NUMBER)
    return wrong(j, key, want, j ? core_json_type_name(j->type) : "nothing");
  if (j->num != floor(j->num) || j->num < lo || j->num > hi) {
    snprintf(got, sizeof got, "%.17g", j->num);
    return wrong(j, key, want, got);
  }
  *out = (int)j->num;
  return CORE_OK;
}

int core_json_as_number(const core_json *j, double *out) {
  int rc = as_type(j, NULL, CORE_JSON_NUMBER);
  if (!rc) *out = j->num;
  return rc;
}

int core_json_as_int(const core_json *j, int lo, int hi, int *out) {
  return as_int(j, NULL, lo, hi, out);
}

int core_json_as_bool(const core_json *j, int *out) {
  int rc = as_type(j, NULL, CORE_JSON_BOOL);
  if (!rc) *out = j->num != 0;
  return rc;
}

int core_json_as_string(const core_json *j, const char **out) {
  int rc = as_type(j, NULL, CORE_JSON_STRING);
  if (!rc) *out = j->str;
  return rc;
}

static int member(const core_json *obj, const char *key, const core_json **m) {
  int rc = as_type(obj, NULL, CORE_JSON_OBJECT);
  if (rc) return rc;
  *m = core_json_get(obj, key);
  if (!*m)
    return core_error_set(CORE_EINPUT, "%s:%d:%d: missing member '%.64s'", obj->src, obj->line,
                          obj->col, key);
  return CORE_OK;
}

int core_json_get_number(const core_json *obj, const char *key, double *out) {
  const core_json *m;
  int rc = member(obj, key, &m);
  if (!rc && !(rc = as_type(m, key, CORE_JSON_NUMBER))) *out = m->num;
  return rc;
}

int core_json_get_int(const core_json *obj, const char *key, int lo, int hi, int *out) {
  const core_json *m;
  int rc = member(obj, key, &m);
  return rc ? rc : as_int(m, key, lo, hi, out);
}

int core_json_get_bool(const core_json *obj, const char *key, int *out) {
  const core_json *m;
  int rc = member(obj, key, &m);
  if (!rc && !(rc = as_type(m, key, CORE_JSON_BOOL))) *out = m->num != 0;
  return rc;
}

int core_json_get_string(const core_json *obj, const char *key, const char **out) {
  const core_json *m;
  int rc = member(obj, key, &m);
  if (!rc && !(rc = as_type(m, key, CORE_JSON_STRING))) *out = m->str;
  return rc;
}

int core_json_get_array(const core_json *obj, const char *key, const core_json **out) {
  const core_json *m;
  int rc = member(obj, key, &m);
  if (!rc && !(rc = as_type(m, key, CORE_JSON_ARRAY))) *out = m;
  return rc;
}

int core_json_get_object(const core_json *obj, const char *key, const core_json **out) {
  const core_json *m;
  int rc = member(obj, key, &m);
  if (!rc && !(rc = as_type(m, key, CORE_JSON_OBJECT))) *out = m;
  return rc;
}

/* ---- writing ---- */

void core_json_write_string(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *c = (const unsigned char *)(s ? s : ""); *c;) {
    switch (*c) {
    case '"': fputs("\\\"", f); break;
    case '\\': fputs("\\\\", f); break;
    case '\n': fputs("\\n", f); break;
    case '\r': fputs("\\r", f); break;
    case '\t': fputs("\\t", f); break;
    case '\b': fputs("\\b", f); break;
    case '\f': fputs("\\f", f); break;
    default:
      if (*c < 0x20 || *c == 0x7f) {
        fprintf(f, "\\u%04x", *c);
      } else {
        int n = utf8_len(c, strnlen((const char *)c, 4));
        if (n == 0) {
          fputs("\\ufffd", f);
          n = 1;
        } else {
          fwrite(c, 1, (size_t)n, f);
        }
        c += n;
        continue;
      }
    }
    c++;
  }
  fputc('"', f);
}

void core_json_write_number(FILE *f, double x) {
  if (!isfinite(x)) {
    fputs("null", f);
    return;
  }
  char buf[40];
  for (int prec = 15; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, x);
    if (strtod(buf, NULL) == x) break;
  }
  fputs(buf, f);
}
