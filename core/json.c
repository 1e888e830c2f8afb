#include "core/json.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

enum { MAX_DEPTH = 64 };

typedef struct {
  const char *s, *end, *name;
  const char *at;
  /* every node and string is one allocation chained from the root for freeing */
  void **allocs;
  size_t nalloc, capalloc;
} parser;

static void *palloc(parser *p, size_t n) {
  if (p->nalloc == p->capalloc) {
    p->capalloc = p->capalloc ? 2 * p->capalloc : 64;
    p->allocs = core_realloc(p->allocs, sizeof(void *) * p->capalloc);
  }
  void *m = core_calloc(1, n);
  p->allocs[p->nalloc++] = m;
  return m;
}

static int perr(parser *p, const char *what) {
  int line = 1, col = 1;
  for (const char *c = p->s; c < p->at && c < p->end; c++) {
    if (*c == '\n') line++, col = 1;
    else col++;
  }
  return core_error_set(CORE_EINPUT, "%s:%d:%d: %s", p->name, line, col, what);
}

static void skip_ws(parser *p) {
  while (p->at < p->end && (*p->at == ' ' || *p->at == '\t' || *p->at == '\n' || *p->at == '\r')) p->at++;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static size_t put_utf8(char *o, unsigned cp) {
  if (cp < 0x80) { o[0] = (char)cp; return 1; }
  if (cp < 0x800) { o[0] = (char)(0xc0 | cp >> 6); o[1] = (char)(0x80 | (cp & 63)); return 2; }
  if (cp < 0x10000) { o[0] = (char)(0xe0 | cp >> 12); o[1] = (char)(0x80 | ((cp >> 6) & 63)); o[2] = (char)(0x80 | (cp & 63)); return 3; }
  o[0] = (char)(0xf0 | cp >> 18); o[1] = (char)(0x80 | ((cp >> 12) & 63));
  o[2] = (char)(0x80 | ((cp >> 6) & 63)); o[3] = (char)(0x80 | (cp & 63));
  return 4;
}

static int parse_hex4(parser *p, unsigned *cp) {
  if (p->end - p->at < 4) return perr(p, "truncated \\u escape");
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    int h = hexval(p->at[i]);
    if (h < 0) return perr(p, "bad \\u escape");
    v = v * 16 + (unsigned)h;
  }
  p->at += 4;
  *cp = v;
  return CORE_OK;
}

static int parse_string(parser *p, char **out) {
  p->at++; /* opening quote */
  const char *start = p->at;
  size_t cap = 1;
  while (p->at < p->end && *p->at != '"') {
    if (*p->at == '\\') p->at++;
    p->at++, cap++;
  }
  if (p->at >= p->end) return perr(p, "unterminated string");
  char *o = palloc(p, cap * 4 + 1);
  size_t k = 0;
  p->at = start;
  while (*p->at != '"') {
    unsigned char c = (unsigned char)*p->at;
    if (c < 0x20) return perr(p, "control character in string");
    if (c != '\\') {
      o[k++] = (char)c, p->at++;
      continue;
    }
    p->at++;
    char e = *p->at++;
    switch (e) {
    case '"': o[k++] = '"'; break;
    case '\\': o[k++] = '\\'; break;
    case '/': o[k++] = '/'; break;
    case 'b': o[k++] = '\b'; break;
    case 'f': o[k++] = '\f'; break;
    case 'n': o[k++] = '\n'; break;
    case 'r': o[k++] = '\r'; break;
    case 't': o[k++] = '\t'; break;
    case 'u': {
      unsigned cp;
      if (parse_hex4(p, &cp)) return CORE_EINPUT;
      if (cp >= 0xd800 && cp < 0xdc00) { /* surrogate pair */
        unsigned lo;
        if (p->end - p->at < 6 || p->at[0] != '\\' || p->at[1] != 'u') return perr(p, "lone surrogate");
        p->at += 2;
        if (parse_hex4(p, &lo)) return CORE_EINPUT;
        if (lo < 0xdc00 || lo > 0xdfff) return perr(p, "bad surrogate pair");
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
      } else if (cp >= 0xdc00 && cp < 0xe000) {
        return perr(p, "lone surrogate");
      }
      k += put_utf8(o + k, cp);
      break;
    }
    default: p->at--; return perr(p, "bad escape in string");
    }
  }
  p->at++;
  o[k] = 0;
  *out = o;
  return CORE_OK;
}

static int parse_value(parser *p, core_json *v, int depth);

static int parse_container(parser *p, core_json *v, int depth, int object) {
  char close = object ? '}' : ']';
  v->type = object ? CORE_JSON_OBJECT : CORE_JSON_ARRAY;
  p->at++;
  skip_ws(p);
  core_json **tail = &v->child;
  if (p->at < p->end && *p->at == close) {
    p->at++;
    return CORE_OK;
  }
  for (;;) {
    core_json *c = palloc(p, sizeof *c);
    skip_ws(p);
    if (object) {
      if (p->at >= p->end || *p->at != '"') return perr(p, "expected a member name");
      if (parse_string(p, &c->key)) return CORE_EINPUT;
      skip_ws(p);
      if (p->at >= p->end || *p->at != ':') return perr(p, "expected ':'");
      p->at++;
    }
    if (parse_value(p, c, depth + 1)) return CORE_EINPUT;
    *tail = c, tail = &c->next, v->len++;
    skip_ws(p);
    if (p->at < p->end && *p->at == ',') {
      p->at++;
      continue;
    }
    if (p->at < p->end && *p->at == close) {
      p->at++;
      return CORE_OK;
    }
    return perr(p, object ? "expected ',' or '}'" : "expected ',' or ']'");
  }
}

static int parse_number(parser *p, core_json *v) {
  const char *s = p->at;
  if (s < p->end && *s == '-') s++;
  if (s >= p->end || !(*s >= '0' && *s <= '9')) return perr(p, "unexpected character");
  while (s < p->end && ((*s >= '0' && *s <= '9') || *s == '.' || *s == 'e' || *s == 'E' || *s == '+' || *s == '-')) s++;
  char buf[64];
  size_t n = (size_t)(s - p->at);
  if (n >= sizeof buf) return perr(p, "number too long");
  memcpy(buf, p->at, n);
  buf[n] = 0;
  char *e;
  errno = 0;
  double d = strtod(buf, &e);
  if (*e || !isfinite(d)) return perr(p, "bad number");
  v->type = CORE_JSON_NUMBER, v->num = d;
  p->at = s;
  return CORE_OK;
}

static int literal(parser *p, const char *word) {
  size_t n = strlen(word);
  if ((size_t)(p->end - p->at) < n || memcmp(p->at, word, n) != 0) return 0;
  p->at += n;
  return 1;
}

static int parse_value(parser *p, core_json *v, int depth) {
  if (depth > MAX_DEPTH) return perr(p, "nesting too deep");
  skip_ws(p);
  if (p->at >= p->end) return perr(p, "unexpected end of input");
  switch (*p->at) {
  case '{': return parse_container(p, v, depth, 1);
  case '[': return parse_container(p, v, depth, 0);
  case '"': v->type = CORE_JSON_STRING; return parse_string(p, &v->str);
  default:
    if (literal(p, "true")) { v->type = CORE_JSON_BOOL, v->num = 1; return CORE_OK; }
    if (literal(p, "false")) { v->type = CORE_JSON_BOOL, v->num = 0; return CORE_OK; }
    if (literal(p, "null")) { v->type = CORE_JSON_NULL; return CORE_OK; }
    return parse_number(p, v);
  }
}

/* The root node holds the arena: its `str` field is unused, allocs hang off a hidden header. */
typedef struct {
  core_json node;
  void **allocs;
  size_t nalloc;
} root_node;

int core_json_parse(const char *text, size_t n, const char *name, core_json **out) {
  parser p = {.s = text, .end = text + n, .name = name, .at = text};
  root_node *root = core_calloc(1, sizeof *root);
  int rc = parse_value(&p, &root->node, 0);
  if (!rc) {
    skip_ws(&p);
    if (p.at != p.end) rc = perr(&p, "trailing characters after the value");
  }
  root->allocs = p.allocs, root->nalloc = p.nalloc;
  if (rc) {
    core_json_free(&root->node);
    return rc;
  }
  *out = &root->node;
  return CORE_OK;
}

void core_json_free(core_json *j) {
  if (!j) return;
  root_node *root = (root_node *)j;
  for (size_t i = 0; i < root->nalloc; i++) free(root->allocs[i]);
  free(root->allocs);
  free(root);
}

const core_json *core_json_get(const core_json *obj, const char *key) {
  if (!obj || obj->type != CORE_JSON_OBJECT) return NULL;
  for (const core_json *c = obj->child; c; c = c->next)
    if (strcmp(c->key, key) == 0) return c;
  return NULL;
}

const core_json *core_json_at(const core_json *arr, size_t i) {
  if (!arr || arr->type != CORE_JSON_ARRAY || i >= arr->len) return NULL;
  const core_json *c = arr->child;
  while (i-- && c) c = c->next;
  return c;
}

void core_json_write_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c == '\n') fputs("\\n", f);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
  fputc('"', f);
}
