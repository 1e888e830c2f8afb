/* core/config.c: libconfig wrapped with locations, overrides and a schema. */
#include "core/config.h"

#include <ctype.h>
#include <errno.h>
#include <libconfig.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "core/error.h"

enum {
  PATH_MAX_LEN = 400, /* longest key path accepted from --set */
  MAX_DEPTH = 64,     /* nesting beyond this is refused rather than recursed into */
};

struct core_config {
  config_t cfg;
  char name[512];   /* the file, as messages name it */
  char **overrides; /* normalised paths set by --set ("model.layers.[0].out") */
  int noverrides;
};

static char *copy_string(const char *s) {
  size_t n = strlen(s) + 1;
  return memcpy(core_malloc(n), s, n);
}

/* ---- loading ---- */

/* One integer or float literal that libconfig would load as something else. */
typedef struct {
  int line;
  int is_float, wide; /* a float literal; an integer with the L suffix */
  char text[64];
} bad_number;

/* End of the number literal starting at p (sign, digits, hex, point, exponent, L suffix). */
static const char *number_end(const char *p) {
  if (*p == '+' || *p == '-') p++;
  int hex = p[0] == '0' && (p[1] == 'x' || p[1] == 'X');
  if (hex) p += 2;
  while (isalnum((unsigned char)*p) || *p == '.' ||
         ((*p == '+' || *p == '-') && !hex && (p[-1] == 'e' || p[-1] == 'E')))
    p++;
  return p;
}

/* libconfig's float syntax: a point or an exponent, in a literal that is not hex. */
static int is_float_literal(const char *s, const char *e) {
  const char *d = s + (*s == '+' || *s == '-');
  if (d[0] == '0' && (d[1] == 'x' || d[1] == 'X')) return 0;
  for (; d < e; d++)
    if (*d == '.' || *d == 'e' || *d == 'E') return 1;
  return 0;
}

/* Whether the literal [s, e) survives libconfig 1.5 unchanged: an integer fits in 32 bits (64
 * with an L suffix; hex counts as unsigned), a float is finite. */
static int number_fits(const char *s, const char *e) {
  char tok[128];
  size_t n = (size_t)(e - s);
  if (n >= sizeof tok) return 0;
  memcpy(tok, s, n);
  tok[n] = 0;
  if (is_float_literal(tok, tok + n)) return isfinite(strtod(tok, NULL));
  const char *d = tok + (tok[0] == '+' || tok[0] == '-');
  int hex = d[0] == '0' && (d[1] == 'x' || d[1] == 'X');
  int wide = n > 0 && tok[n - 1] == 'L';
  while (n > 0 && tok[n - 1] == 'L')
    tok[--n] = 0;
  errno = 0;
  unsigned long long m = strtoull(hex ? d + 2 : d, NULL, hex ? 16 : 10);
  unsigned long long lim = wide ? (unsigned long long)INT64_MAX : (unsigned long long)INT32_MAX;
  if (tok[0] == '-') lim++; /* -2147483648 fits */
  return errno != ERANGE && m <= lim;
}

/* An @include directive's file, as scan_text finds it. */
typedef struct {
  int line;
  char path[1024];
} include_ref;

/* Scans libconfig text for a number that does not fit (bad, when non-NULL) and for the first
 * @include (inc, when non-NULL), skipping comments, strings and names, whose digits are not
 * numbers; from offset *pos (the scan resumes there after an include, *line its line). Returns
 * 1 when it stops at one of them, 0 at the end. */
static int scan_text(const char *t, size_t *pos, int *line_io, bad_number *bad, include_ref *inc) {
  int line = *line_io;
  for (const char *p = t + *pos; *p;) {
    unsigned char ch = (unsigned char)*p;
    if (ch == '\n') {
      line++, p++;
    } else if (inc && strncmp(p, "@include", 8) == 0) {
      const char *q = p + 8, *e;
      while (*q == ' ' || *q == '\t')
        q++;
      if (*q != '"' || !(e = strchr(q + 1, '"')) || memchr(q + 1, '\n', (size_t)(e - q - 1))) {
        p += 8; /* not a directive libconfig takes: its parser says so */
        continue;
      }
      inc->line = line;
      snprintf(inc->path, sizeof inc->path, "%.*s", (int)(e - q - 1), q + 1);
      *pos = (size_t)(e + 1 - t), *line_io = line;
      return 1;
    } else if (ch == '#' || (p[0] == '/' && p[1] == '/')) {
      while (*p && *p != '\n')
        p++;
    } else if (p[0] == '/' && p[1] == '*') {
      for (p += 2; *p && !(p[0] == '*' && p[1] == '/'); p++)
        line += *p == '\n';
      if (*p) p += 2;
    } else if (ch == '"') {
      for (p++; *p && *p != '"'; p++) {
        if (*p == '\\' && p[1]) p++;
        line += *p == '\n';
      }
      if (*p) p++;
    } else if (isalpha(ch) || ch == '*' || ch == '_') {
      while (isalnum((unsigned char)*p) || *p == '-' || *p == '_' || *p == '*')
        p++;
    } else if (isdigit(ch) ||
               ((ch == '+' || ch == '-' || ch == '.') && isdigit((unsigned char)p[1])) ||
               ((ch == '+' || ch == '-') && p[1] == '.' && isdigit((unsigned char)p[2]))) {
      const char *e = number_end(p);
      if (bad && !number_fits(p, e)) {
        bad->line = line;
        bad->is_float = is_float_literal(p, e);
        bad->wide = e[-1] == 'L';
        snprintf(bad->text, sizeof bad->text, "%.*s%s", (int)(e - p > 40 ? 40 : e - p), p,
                 e - p > 40 ? "..." : "");
        return 1;
      }
      p = e;
    } else {
      p++;
    }
  }
  return 0;
}

/* The first number of the whole text that does not fit; 1 if found. */
static int find_bad_number(const char *t, bad_number *bad) {
  size_t pos = 0;
  int line = 1;
  return scan_text(t, &pos, &line, bad, NULL);
}

static int number_error(const char *where, const bad_number *b) {
  if (b->is_float)
    return core_error_set(CORE_EINPUT, "%s: number %s is out of range", where, b->text);
  if (b->wide)
    return core_error_set(CORE_EINPUT, "%s: integer %s does not fit in 64 bits", where, b->text);
  return core_error_set(CORE_EINPUT,
                        "%s: integer %s does not fit in 32 bits (write %sL for a 64-bit integer)",
                        where, b->text, b->text);
}

/* The numbers of a file's text (named name in the message, with the line). */
static int check_numbers(const char *text, const char *name) {
  bad_number bad;
  if (!find_bad_number(text, &bad)) return CORE_OK;
  char where[1100];
  snprintf(where, sizeof where, "%s:%d", name, bad.line);
  return number_error(where, &bad);
}

/* Reads the whole file: libconfig is then given the same text that was checked for numbers. */
static int read_text(const char *path, char **out) {
  FILE *f = fopen(path, "rb");
  if (!f) return core_error_set(CORE_EINPUT, "cannot open config %s: %s", path, strerror(errno));
  size_t cap = 4096, n = 0;
  char *buf = core_malloc(cap);
  for (;;) {
    n += fread(buf + n, 1, cap - 1 - n, f);
    if (n < cap - 1) break;
    cap *= 2;
    buf = core_realloc(buf, cap);
  }
  int failed = ferror(f), err = errno;
  fclose(f);
  if (failed) { /* a directory, for one */
    free(buf);
    return core_error_set(CORE_EINPUT, "cannot read config %s: %s", path, strerror(err));
  }
  buf[n] = 0;
  *out = buf;
  return CORE_OK;
}

/* The files text (named `from`) @includes, before libconfig reads them: each must be a regular
 * file (libconfig's scanner ends the process on a directory), and its numbers are checked as the
 * top-level file's are (libconfig would load an out-of-range one as something else). Paths are
 * as libconfig 1.5 opens them (no include directory is set): relative to the working directory.
 * libconfig's own limit of 10 nested includes applies. */
static int check_includes(const char *text, const char *from, int depth) {
  size_t pos = 0;
  int line = 1;
  include_ref inc;
  while (scan_text(text, &pos, &line, NULL, &inc)) {
    struct stat sb;
    if (depth >= 10)
      return core_error_set(CORE_EINPUT, "%s:%d: @include \"%s\": includes nested more than 10 deep", from, inc.line,
                            inc.path);
    if (stat(inc.path, &sb) != 0)
      return core_error_set(CORE_EINPUT, "%s:%d: @include \"%s\": %s (a relative path is from the working "
                            "directory)", from, inc.line, inc.path, strerror(errno));
    if (!S_ISREG(sb.st_mode))
      return core_error_set(CORE_EINPUT, "%s:%d: @include \"%s\" is not a regular file", from, inc.line, inc.path);
    char *sub = NULL;
    int rc = read_text(inc.path, &sub);
    if (rc) return core_error_prefix("%s:%d: @include", from, inc.line);
    rc = check_numbers(sub, inc.path);
    if (!rc) rc = check_includes(sub, inc.path, depth + 1);
    free(sub);
    if (rc) return rc;
  }
  return CORE_OK;
}

static int parse_text(core_config *c, const char *text) {
  if (strncmp(text, "\xef\xbb\xbf", 3) == 0) text += 3; /* UTF-8 byte order mark: libconfig refuses it */
  int rc = check_includes(text, c->name, 0);
  if (rc) return rc;
  if (!config_read_string(&c->cfg, text)) {
    const char *file = config_error_file(&c->cfg); /* set inside an @include only */
    return core_error_set(CORE_EINPUT, "%s:%d: %s", file ? file : c->name,
                          config_error_line(&c->cfg), config_error_text(&c->cfg));
  }
  return check_numbers(text, c->name);
}

int core_config_load_string(core_config **out, const char *text, const char *name) {
  core_config *c = core_calloc(1, sizeof *c);
  config_init(&c->cfg);
  snprintf(c->name, sizeof c->name, "%s", name);
  int rc = parse_text(c, text);
  if (rc) {
    core_config_free(c);
    return rc;
  }
  *out = c;
  return CORE_OK;
}

int core_config_load(core_config **out, const char *path) {
  char *text = NULL;
  int rc = read_text(path, &text);
  if (rc) return rc;
  rc = core_config_load_string(out, text, path);
  free(text);
  return rc;
}

void core_config_free(core_config *c) {
  if (!c) return;
  config_destroy(&c->cfg);
  for (int i = 0; i < c->noverrides; i++)
    free(c->overrides[i]);
  free(c->overrides);
  free(c);
}

const char *core_config_name(const core_config *c) { return c->name; }

/* ---- where a setting came from ---- */

/* path is top itself or lies inside it ("a.b.[0]" inside "a.b", not inside "a.bc"). */
static int is_within(const char *path, const char *top) {
  size_t n = strlen(top);
  return strncmp(path, top, n) == 0 && (path[n] == 0 || path[n] == '.');
}

/* An override of path or of a group or list holding it: the value came from the command line. */
static const char *override_of(const core_config *c, const char *path) {
  for (int i = c->noverrides - 1; i >= 0; i--)
    if (is_within(path, c->overrides[i])) return c->overrides[i];
  return NULL;
}

/* An override inside path: path is a group that --set created to hold it. */
static const char *override_inside(const core_config *c, const char *path) {
  for (int i = c->noverrides - 1; i >= 0; i--)
    if (is_within(c->overrides[i], path)) return c->overrides[i];
  return NULL;
}

/* An override is asked first because --set changes a value in place and keeps the file's line;
 * a setting with no line was created by --set. */
static void where_setting(const core_config *c, const config_setting_t *s, const char *path,
                          char *buf, size_t n) {
  const char *o = override_of(c, path);
  int line = s ? config_setting_source_line(s) : 0;
  if (!o && line == 0) o = override_inside(c, path);
  if (o) {
    snprintf(buf, n, "--set %s", o);
  } else if (line > 0) {
    const char *file = config_setting_source_file(s); /* set inside an @include only */
    snprintf(buf, n, "%s:%d", file ? file : c->name, line);
  } else {
    snprintf(buf, n, "%s", c->name);
  }
}

int core_config_where(const core_config *c, const char *path, int i, char *buf, size_t n) {
  char p[PATH_MAX_LEN + 32];
  const config_setting_t *s = config_lookup(&c->cfg, path), *e = NULL;
  if (i >= 0) {
    snprintf(p, sizeof p, "%s.[%d]", path, i);
    e = s ? config_setting_get_elem(s, (unsigned)i) : NULL;
  } else {
    snprintf(p, sizeof p, "%s", path);
    e = s;
  }
  where_setting(c, e ? e : s, e ? p : path, buf, n);
  return e ? CORE_OK : CORE_EINPUT;
}

int core_config_elem_where(const core_config *c, const char *list, int i, const char *key,
                           char *buf, size_t n) {
  char p[PATH_MAX_LEN + 160];
  snprintf(p, sizeof p, "%s.[%d].%s", list, i, key);
  const config_setting_t *s = i >= 0 ? config_lookup(&c->cfg, p) : NULL;
  if (!s) {
    core_config_where(c, list, i, buf, n);
    return CORE_EINPUT;
  }
  where_setting(c, s, p, buf, n);
  return CORE_OK;
}

/* ---- --set ---- */

/* A parsed key path: names, or list indices (name[0] == 0). */
typedef struct {
  char name[128];
  int index;
} path_seg;

enum { MAX_SEGS = 32 };

static int is_name_char(char ch) {
  return isalnum((unsigned char)ch) || ch == '_' || ch == '-' || ch == '*';
}

/* "a.b[0].c" or "a.b.[0].c" into segments, and the normalised path "a.b.[0].c". */
static int parse_path(const char *key, path_seg *segs, int *nseg, char *norm, size_t nn) {
  const char *p = key;
  size_t len = 0;
  int n = 0;
  norm[0] = 0;
  for (;;) {
    if (n == MAX_SEGS)
      return core_error_set(CORE_EINPUT, "--set %s: the key is nested too deep", key);
    path_seg *s = &segs[n];
    s->name[0] = 0, s->index = -1;
    if (*p == '[') {
      char *end;
      errno = 0;
      long v = isdigit((unsigned char)p[1]) ? strtol(p + 1, &end, 10) : -1;
      if (v < 0 || errno || v > INT_MAX || *end != ']')
        return core_error_set(CORE_EINPUT, "--set %s: bad list index", key);
      s->index = (int)v;
      p = end + 1;
    } else {
      size_t k = 0;
      while (is_name_char(p[k]))
        k++;
      if (k == 0 || k >= sizeof s->name || !(isalpha((unsigned char)p[0]) || p[0] == '*'))
        return core_error_set(CORE_EINPUT, "--set %s: '%.*s' is not a valid key name", key,
                              (int)strcspn(p, ".["), p);
      memcpy(s->name, p, k);
      s->name[k] = 0;
      p += k;
    }
    if (s->index >= 0)
      len += (size_t)snprintf(norm + len, nn - len, "%s[%d]", n ? "." : "", s->index);
    else
      len += (size_t)snprintf(norm + len, nn - len, "%s%s", n ? "." : "", s->name);
    n++;
    if (*p == 0) break;
    if (*p == '.')
      p++;
    else if (*p != '[')
      return core_error_set(CORE_EINPUT, "--set %s: unexpected '%c' in the key", key, *p);
  }
  *nseg = n;
  return CORE_OK;
}

static int is_compound(int t) {
  return t == CONFIG_TYPE_GROUP || t == CONFIG_TYPE_LIST || t == CONFIG_TYPE_ARRAY;
}

/* Integers as libconfig writes them: decimal, or hex with 0x (no octal: 010 is ten). */
/* Integer syntax, whether or not the value fits. */
static int looks_integer(const char *v) {
  const char *d = v + (*v == '-' || *v == '+');
  int hex = d[0] == '0' && (d[1] == 'x' || d[1] == 'X');
  if (hex) d += 2;
  if (!*d) return 0;
  for (; *d; d++)
    if (hex ? !isxdigit((unsigned char)*d) : !isdigit((unsigned char)*d)) return 0;
  return 1;
}

static int parse_int64(const char *v, long long *out) {
  const char *d = v + (*v == '-' || *v == '+');
  int hex = d[0] == '0' && (d[1] == 'x' || d[1] == 'X');
  if (!isdigit((unsigned char)*d) || (hex && *v == '-')) return 0;
  char *e;
  errno = 0;
  long long x = hex ? (long long)strtoull(d + 2, &e, 16) : strtoll(v, &e, 10);
  if (errno || *e || (hex && (e == d + 2 || x < 0))) return 0;
  *out = x;
  return 1;
}

/* Finite numbers only: nan and inf are words, and 1e999 is an error, not infinity. */
static int parse_double(const char *v, double *out) {
  if (!*v || isspace((unsigned char)*v)) return 0;
  char *e;
  errno = 0;
  double x = strtod(v, &e);
  if (*e || !isfinite(x) || (errno == ERANGE && fabs(x) > 1)) return 0;
  *out = x;
  return 1;
}

static int parse_bool(const char *v, int *out) {
  if (strcasecmp(v, "true") == 0) return *out = 1, 1;
  if (strcasecmp(v, "false") == 0) return *out = 0, 1;
  return 0;
}

static int is_quoted(const char *v) {
  size_t n = strlen(v);
  return n >= 2 && v[0] == '"' && v[n - 1] == '"';
}

static int infer_type(const char *v) {
  long long i;
  double d;
  int b;
  if (is_quoted(v)) return CONFIG_TYPE_STRING;
  if (parse_bool(v, &b)) return CONFIG_TYPE_BOOL;
  if (parse_int64(v, &i)) return i >= INT_MIN && i <= INT_MAX ? CONFIG_TYPE_INT : CONFIG_TYPE_INT64;
  if (parse_double(v, &d)) return CONFIG_TYPE_FLOAT;
  return CONFIG_TYPE_STRING;
}

static int set_string(config_setting_t *s, const char *v) {
  if (!is_quoted(v)) return config_setting_set_string(s, v);
  size_t n = strlen(v);
  char *u = core_malloc(n - 1);
  memcpy(u, v + 1, n - 2);
  u[n - 2] = 0;
  int ok = config_setting_set_string(s, u);
  free(u);
  return ok;
}

/* Sets scalar s from text, keeping its type. */
static int set_typed(config_setting_t *s, const char *key, const char *v) {
  long long i = 0;
  double d = 0;
  int b = 0, ok;
  switch (config_setting_type(s)) {
  case CONFIG_TYPE_INT:
    if (!parse_int64(v, &i))
      ok = -1;
    else if (i < INT_MIN || i > INT_MAX)
      return core_error_set(CORE_EINPUT, "--set %s=%s: the integer does not fit in 32 bits", key,
                            v);
    else
      ok = config_setting_set_int(s, (int)i);
    break;
  case CONFIG_TYPE_INT64: ok = parse_int64(v, &i) ? config_setting_set_int64(s, i) : -1; break;
  case CONFIG_TYPE_FLOAT: ok = parse_double(v, &d) ? config_setting_set_float(s, d) : -1; break;
  case CONFIG_TYPE_BOOL: ok = parse_bool(v, &b) ? config_setting_set_bool(s, b) : -1; break;
  case CONFIG_TYPE_STRING: ok = set_string(s, v); break;
  default: ok = -1;
  }
  static const char *want[] = {"",         "a group",       "an integer", "an integer", "a number",
                               "a string", "true or false", "an array",   "a list"};
  int t = config_setting_type(s);
  if (ok == -1) return core_error_set(CORE_EINPUT, "--set %s=%s: expected %s", key, v, want[t]);
  if (!ok) return core_error_set(CORE_EINPUT, "--set %s=%s: libconfig refused the value", key, v);
  return CORE_OK;
}

/* Copies src (from a parsed --set value) under parent, as member `name` for a group. */
static int copy_setting(config_setting_t *parent, const char *name, const config_setting_t *src,
                        int depth) {
  int t = config_setting_type(src);
  config_setting_t *d = depth < MAX_DEPTH ? config_setting_add(parent, name, t) : NULL;
  if (!d) return 0;
  switch (t) {
  case CONFIG_TYPE_INT: return config_setting_set_int(d, config_setting_get_int(src));
  case CONFIG_TYPE_INT64: return config_setting_set_int64(d, config_setting_get_int64(src));
  case CONFIG_TYPE_FLOAT: return config_setting_set_float(d, config_setting_get_float(src));
  case CONFIG_TYPE_BOOL: return config_setting_set_bool(d, config_setting_get_bool(src));
  case CONFIG_TYPE_STRING: return config_setting_set_string(d, config_setting_get_string(src));
  default:
    for (int i = 0; i < config_setting_length(src); i++) {
      const config_setting_t *e = config_setting_get_elem(src, (unsigned)i);
      if (!copy_setting(d, config_setting_name(e), e, depth + 1)) return 0;
    }
    return 1;
  }
}

/* A value starting with [ ( or { is parsed by libconfig, as "v = <value>;" in tmp. */
static int parse_compound(config_t *tmp, const char *key, const char *val,
                          const config_setting_t **out) {
  size_t n = strlen(val) + 8;
  char *text = core_malloc(n);
  snprintf(text, n, "v = %s;", val);
  bad_number bad;
  char where[600];
  snprintf(where, sizeof where, "--set %s", key);
  int rc = check_includes(text, where, 0);
  if (!rc && !config_read_string(tmp, text))
    rc = core_error_set(CORE_EINPUT, "--set %s: %s in the value", key, config_error_text(tmp));
  else if (!rc && find_bad_number(text, &bad))
    rc = number_error(where, &bad);
  free(text);
  *out = rc ? NULL : config_lookup(tmp, "v");
  return rc;
}

/* Where the key leads: its parent (created as groups where missing) and the setting itself,
 * NULL when it does not exist yet. Nothing is created unless the rest of the path can be. */
static int walk_path(core_config *c, const char *key, const path_seg *segs, int n,
                     config_setting_t **parent, config_setting_t **leaf) {
  config_setting_t *s = config_root_setting(&c->cfg);
  for (int k = 0; k < n; k++) {
    int t = config_setting_type(s);
    config_setting_t *child;
    if (segs[k].index >= 0) {
      if (t != CONFIG_TYPE_LIST && t != CONFIG_TYPE_ARRAY)
        return core_error_set(CORE_EINPUT, "--set %s: [%d] indexes something that is not a list",
                              key, segs[k].index);
      child = config_setting_get_elem(s, (unsigned)segs[k].index);
      if (!child)
        return core_error_set(CORE_EINPUT, "--set %s: the list has no element [%d]", key,
                              segs[k].index);
    } else {
      if (t != CONFIG_TYPE_GROUP)
        return core_error_set(CORE_EINPUT, "--set %s: '%s' is inside something that is not a group",
                              key, segs[k].name);
      child = config_setting_get_member(s, segs[k].name);
    }
    if (k == n - 1) {
      *parent = s, *leaf = child;
      return CORE_OK;
    }
    if (!child) {
      for (int j = k + 1; j < n; j++)
        if (segs[j].index >= 0)
          return core_error_set(CORE_EINPUT,
                                "--set %s: '%s' does not exist (--set creates groups, not lists)",
                                key, segs[k].name);
      child = config_setting_add(s, segs[k].name, CONFIG_TYPE_GROUP);
      if (!child)
        return core_error_set(CORE_EINPUT, "--set %s: cannot create '%s'", key, segs[k].name);
    }
    s = child;
  }
  return core_error_set(CORE_EINPUT, "--set %s: empty key", key);
}

/* Puts a parsed compound value at the leaf, replacing what was there. */
static int assign_compound(config_setting_t *parent, config_setting_t *leaf, const path_seg *last,
                           const char *key, const config_setting_t *v) {
  if (last->index >= 0)
    return core_error_set(
        CORE_EINPUT, "--set %s: a whole list element cannot be replaced; set its members", key);
  if (leaf && !is_compound(config_setting_type(leaf)))
    return core_error_set(CORE_EINPUT, "--set %s: expected a single value, not a list or group",
                          key);
  if (leaf) config_setting_remove(parent, last->name);
  if (copy_setting(parent, last->name, v, 0)) return CORE_OK;
  config_setting_remove(parent, last->name);
  return core_error_set(CORE_EINPUT, "--set %s: libconfig refused the value", key);
}

static int assign_scalar(config_setting_t *parent, config_setting_t *leaf, const path_seg *last,
                         const char *key, const char *val) {
  int t = leaf ? config_setting_type(leaf) : CONFIG_TYPE_NONE;
  if (is_compound(t) && last->index >= 0)
    return core_error_set(
        CORE_EINPUT, "--set %s: a whole list element cannot be replaced; set its members", key);
  if (is_compound(t))
    return core_error_set(CORE_EINPUT, "--set %s: this key is a %s; give it as %s", key,
                          t == CONFIG_TYPE_GROUP ? "group" : "list",
                          t == CONFIG_TYPE_GROUP ? "{ ... }" : "[ ... ]");
  long long ignored;
  if (looks_integer(val) && !parse_int64(val, &ignored) && t != CONFIG_TYPE_FLOAT &&
      t != CONFIG_TYPE_STRING)
    return core_error_set(CORE_EINPUT, "--set %s=%s: the integer does not fit in 64 bits", key,
                          val);
  int want = infer_type(val);
  /* the file said lr = 1 and the user sets lr=0.5: the key is a number, so it becomes a float */
  int widen = (t == CONFIG_TYPE_INT || t == CONFIG_TYPE_INT64) && want == CONFIG_TYPE_FLOAT &&
              last->index < 0;
  if ((t == CONFIG_TYPE_INT || t == CONFIG_TYPE_INT64) && want == CONFIG_TYPE_FLOAT && last->index >= 0)
    return core_error_set(CORE_EINPUT, "--set %s=%s: the list holds integers, and a libconfig list holds one type: "
                          "give the whole list (--set KEY=[...]) to make it numbers", key, val);
  if (leaf && !widen) return set_typed(leaf, key, val);
  if (widen) config_setting_remove(parent, last->name);
  config_setting_t *s = config_setting_add(parent, last->name, want);
  if (!s) return core_error_set(CORE_EINPUT, "--set %s: cannot create the key", key);
  int rc = set_typed(s, key, val);
  if (rc) config_setting_remove(parent, last->name);
  return rc;
}

static void remember_override(core_config *c, const char *path) {
  for (int i = 0; i < c->noverrides; i++)
    if (strcmp(c->overrides[i], path) == 0) return;
  c->overrides = core_realloc(c->overrides, sizeof(char *) * (size_t)(c->noverrides + 1));
  c->overrides[c->noverrides++] = copy_string(path);
}

int core_config_set(core_config *c, const char *assignment) {
  const char *eq = strchr(assignment, '=');
  if (!eq) return core_error_set(CORE_EINPUT, "--set '%s': expected key=value", assignment);
  size_t klen = (size_t)(eq - assignment);
  if (klen == 0 || klen > PATH_MAX_LEN)
    return core_error_set(CORE_EINPUT, "--set '%.*s': bad key", (int)(klen > 60 ? 60 : klen),
                          assignment);
  char key[PATH_MAX_LEN + 1], norm[PATH_MAX_LEN + 64];
  memcpy(key, assignment, klen);
  key[klen] = 0;
  const char *val = eq + 1;
  path_seg segs[MAX_SEGS];
  int nseg = 0;
  int rc = parse_path(key, segs, &nseg, norm, sizeof norm);
  /* a compound value is parsed before the path is walked, so a bad one changes nothing */
  config_t tmp;
  config_init(&tmp);
  const config_setting_t *v = NULL;
  if (!rc && val[0] && strchr("[({", val[0])) rc = parse_compound(&tmp, norm, val, &v);
  config_setting_t *parent = NULL, *leaf = NULL;
  if (!rc) rc = walk_path(c, norm, segs, nseg, &parent, &leaf);
  if (!rc)
    rc = v ? assign_compound(parent, leaf, &segs[nseg - 1], norm, v)
           : assign_scalar(parent, leaf, &segs[nseg - 1], norm, val);
  config_destroy(&tmp);
  if (!rc) remember_override(c, norm);
  return rc;
}

/* ---- schema ---- */

/* The schema's type for spath: its entry, or a group when only keys under it are listed
 * ("train.steps" implies the group "train"). Returns 0 when the path is unknown. */
static int schema_type(const core_config_key *keys, size_t n, const char *spath, core_cfg_type *t) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(keys[i].path, spath) == 0) return *t = keys[i].type, 1;
  size_t len = strlen(spath);
  for (size_t i = 0; i < n; i++)
    if (strncmp(keys[i].path, spath, len) == 0 && keys[i].path[len] == '.')
      return *t = CORE_CFG_GROUP, 1;
  return 0;
}

static int type_ok(core_cfg_type want, int have) {
  switch (want) {
  case CORE_CFG_INT: return have == CONFIG_TYPE_INT || have == CONFIG_TYPE_INT64;
  case CORE_CFG_FLOAT:
    return have == CONFIG_TYPE_FLOAT || have == CONFIG_TYPE_INT || have == CONFIG_TYPE_INT64;
  case CORE_CFG_BOOL: return have == CONFIG_TYPE_BOOL;
  case CORE_CFG_STRING: return have == CONFIG_TYPE_STRING;
  case CORE_CFG_GROUP: return have == CONFIG_TYPE_GROUP;
  case CORE_CFG_LIST: return have == CONFIG_TYPE_LIST || have == CONFIG_TYPE_ARRAY;
  }
  return 0;
}

static const char *type_name(core_cfg_type t) {
  static const char *names[] = {"an integer", "a number",        "true or false",
                                "a string",   "a group { ... }", "a list [ ... ] or ( ... )"};
  return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "of an unknown type";
}

/* Edit distance of two short strings, to suggest the key a typo meant; big when too long. */
static size_t edit_distance(const char *a, const char *b) {
  size_t na = strlen(a), nb = strlen(b), row[128];
  if (na >= 128 || nb >= 128) return (size_t)-1;
  for (size_t j = 0; j <= nb; j++)
    row[j] = j;
  for (size_t i = 1; i <= na; i++) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= nb; j++) {
      size_t up = row[j], best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      diag = up, row[j] = best;
    }
  }
  return row[nb];
}

/* The schema key nearest to spath: at most two edits, and few for a short key ("fp16" is not a
 * typo of "bf16"). */
static const char *closest_key(const core_config_key *keys, size_t n, const char *spath) {
  const char *best = NULL;
  size_t bd = 3, len = strlen(spath);
  for (size_t i = 0; i < n; i++) {
    size_t d = edit_distance(keys[i].path, spath);
    if (d < bd && d * 4 <= len) bd = d, best = keys[i].path;
  }
  return best;
}

typedef struct {
  const core_config *c;
  const core_config_key *keys;
  size_t nkeys;
} schema_walk;

static int check_one(const schema_walk *w, const config_setting_t *s, const char *spath,
                     const char *rpath) {
  char where[600];
  core_cfg_type want;
  where_setting(w->c, s, rpath, where, sizeof where);
  if (!schema_type(w->keys, w->nkeys, spath, &want)) {
    const char *near = closest_key(w->keys, w->nkeys, spath);
    return core_error_set(CORE_EINPUT, "unknown key '%s' (%s)%s%s%s", rpath, where,
                          near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "");
  }
  int have = config_setting_type(s);
  if (type_ok(want, have)) return CORE_OK;
  /* --set guessed a number or a bool for text that was meant as a string */
  const char *hint =
      want == CORE_CFG_STRING && override_of(w->c, rpath) ? "; quote it: --set key='\"text\"'" : "";
  return core_error_set(CORE_EINPUT, "%s must be %s (%s)%s", rpath, type_name(want), where, hint);
}

/* Checks s (schema path spath, real path rpath as printed) and everything inside it. */
static int check_tree(const schema_walk *w, const config_setting_t *s, const char *spath,
                      const char *rpath, int depth) {
  if (depth > MAX_DEPTH)
    return core_error_set(CORE_EINPUT, "%s: %s is nested too deep", w->c->name, rpath);
  if (spath[0]) {
    int rc = check_one(w, s, spath, rpath);
    if (rc) return rc;
  }
  int t = config_setting_type(s);
  if (!is_compound(t)) return CORE_OK;
  for (int i = 0; i < config_setting_length(s); i++) {
    const config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
    char sp[512], rp[512];
    if (t == CONFIG_TYPE_GROUP) {
      const char *name = config_setting_name(e);
      snprintf(sp, sizeof sp, "%s%s%s", spath, spath[0] ? "." : "", name);
      snprintf(rp, sizeof rp, "%s%s%s", rpath, rpath[0] ? "." : "", name);
    } else {
      snprintf(sp, sizeof sp, "%s.[]", spath);
      snprintf(rp, sizeof rp, "%s.[%d]", rpath, i);
    }
    int rc = check_tree(w, e, sp, rp, depth + 1);
    if (rc) return rc;
  }
  return CORE_OK;
}

int core_config_check(const core_config *c, const core_config_key *keys, size_t nkeys) {
  schema_walk w = {c, keys, nkeys};
  return check_tree(&w, config_root_setting(&c->cfg), "", "", 0);
}

/* ---- getters: s may be NULL (missing: def); path is what messages print ---- */

static int wrong(const core_config *c, const config_setting_t *s, const char *path,
                 const char *want) {
  char where[600];
  where_setting(c, s, path, where, sizeof where);
  return core_error_set(CORE_EINPUT, "%s must be %s (%s)", path, want, where);
}

static int get_int(const core_config *c, const config_setting_t *s, const char *path, int64_t def,
                   int64_t *out) {
  int t = s ? config_setting_type(s) : CONFIG_TYPE_NONE;
  if (!s)
    *out = def;
  else if (t == CONFIG_TYPE_INT)
    *out = config_setting_get_int(s);
  else if (t == CONFIG_TYPE_INT64)
    *out = config_setting_get_int64(s);
  else
    return wrong(c, s, path, "an integer");
  return CORE_OK;
}

static int get_float(const core_config *c, const config_setting_t *s, const char *path, double def,
                     double *out) {
  int t = s ? config_setting_type(s) : CONFIG_TYPE_NONE;
  if (!s)
    *out = def;
  else if (t == CONFIG_TYPE_FLOAT)
    *out = config_setting_get_float(s);
  else if (t == CONFIG_TYPE_INT)
    *out = config_setting_get_int(s);
  else if (t == CONFIG_TYPE_INT64)
    *out = (double)config_setting_get_int64(s);
  else
    return wrong(c, s, path, "a number");
  return CORE_OK;
}

static int get_bool(const core_config *c, const config_setting_t *s, const char *path, int def,
                    int *out) {
  if (!s)
    *out = def;
  else if (config_setting_type(s) == CONFIG_TYPE_BOOL)
    *out = config_setting_get_bool(s);
  else
    return wrong(c, s, path, "true or false");
  return CORE_OK;
}

static int get_string(const core_config *c, const config_setting_t *s, const char *path,
                      const char *def, const char **out) {
  if (!s)
    *out = def;
  else if (config_setting_type(s) == CONFIG_TYPE_STRING)
    *out = config_setting_get_string(s);
  else
    return wrong(c, s, path, "a string");
  return CORE_OK;
}

int core_config_get_int(const core_config *c, const char *path, int64_t def, int64_t *out) {
  return get_int(c, config_lookup(&c->cfg, path), path, def, out);
}

int core_config_get_int_range(const core_config *c, const char *path, int64_t def, int64_t lo,
                              int64_t hi, int64_t *out) {
  const config_setting_t *s = config_lookup(&c->cfg, path);
  int rc = get_int(c, s, path, def, out);
  if (rc || (*out >= lo && *out <= hi)) return rc;
  char where[600];
  where_setting(c, s, path, where, sizeof where);
  return core_error_set(CORE_EINPUT, "%s = %lld must be in [%lld, %lld] (%s)", path,
                        (long long)*out, (long long)lo, (long long)hi, where);
}

int core_config_get_float(const core_config *c, const char *path, double def, double *out) {
  return get_float(c, config_lookup(&c->cfg, path), path, def, out);
}

int core_config_get_bool(const core_config *c, const char *path, int def, int *out) {
  return get_bool(c, config_lookup(&c->cfg, path), path, def, out);
}

int core_config_get_string(const core_config *c, const char *path, const char *def,
                           const char **out) {
  return get_string(c, config_lookup(&c->cfg, path), path, def, out);
}

int core_config_has(const core_config *c, const char *path) {
  return config_lookup(&c->cfg, path) != NULL;
}

int core_config_list_len(const core_config *c, const char *path) {
  const config_setting_t *s = config_lookup(&c->cfg, path);
  int t = s ? config_setting_type(s) : CONFIG_TYPE_NONE;
  return t == CONFIG_TYPE_LIST || t == CONFIG_TYPE_ARRAY ? config_setting_length(s) : 0;
}

/* Member `key` of element i of the list at `list` (NULL when missing), and its printed path. */
static int elem_member(const core_config *c, const char *list, int i, const char *key, char *path,
                       size_t n, const config_setting_t **out) {
  const config_setting_t *l = config_lookup(&c->cfg, list);
  const config_setting_t *e = l && i >= 0 ? config_setting_get_elem(l, (unsigned)i) : NULL;
  snprintf(path, n, "%s.[%d]", list, i);
  if (e && config_setting_type(e) != CONFIG_TYPE_GROUP) return wrong(c, e, path, "a group { ... }");
  snprintf(path, n, "%s.[%d].%s", list, i, key);
  *out = e ? config_setting_get_member(e, key) : NULL;
  return CORE_OK;
}

int core_config_elem_int(const core_config *c, const char *list, int i, const char *key,
                         int64_t def, int64_t *out) {
  char p[600];
  const config_setting_t *s;
  int rc = elem_member(c, list, i, key, p, sizeof p, &s);
  return rc ? rc : get_int(c, s, p, def, out);
}

int core_config_elem_float(const core_config *c, const char *list, int i, const char *key,
                           double def, double *out) {
  char p[600];
  const config_setting_t *s;
  int rc = elem_member(c, list, i, key, p, sizeof p, &s);
  return rc ? rc : get_float(c, s, p, def, out);
}

int core_config_elem_string(const core_config *c, const char *list, int i, const char *key,
                            const char *def, const char **out) {
  char p[600];
  const config_setting_t *s;
  int rc = elem_member(c, list, i, key, p, sizeof p, &s);
  return rc ? rc : get_string(c, s, p, def, out);
}

int core_config_elem_bool(const core_config *c, const char *list, int i, const char *key, int def,
                          int *out) {
  char p[600];
  const config_setting_t *s;
  int rc = elem_member(c, list, i, key, p, sizeof p, &s);
  return rc ? rc : get_bool(c, s, p, def, out);
}

/* Scalar element i of the list or array at path; missing is an error (there is no default). */
static int array_elem(const core_config *c, const char *path, int i, char *p, size_t n,
                      const config_setting_t **out) {
  const config_setting_t *l = config_lookup(&c->cfg, path);
  int t = l ? config_setting_type(l) : CONFIG_TYPE_NONE;
  *out = (t == CONFIG_TYPE_LIST || t == CONFIG_TYPE_ARRAY) && i >= 0
             ? config_setting_get_elem(l, (unsigned)i)
             : NULL;
  snprintf(p, n, "%s.[%d]", path, i);
  if (*out) return CORE_OK;
  char where[600];
  where_setting(c, l, path, where, sizeof where);
  return core_error_set(CORE_EINPUT, "%s is missing (%s)", p, where);
}

int core_config_array_int(const core_config *c, const char *path, int i, int64_t *out) {
  char p[600];
  const config_setting_t *s;
  int rc = array_elem(c, path, i, p, sizeof p, &s);
  return rc ? rc : get_int(c, s, p, 0, out);
}

int core_config_array_float(const core_config *c, const char *path, int i, double *out) {
  char p[600];
  const config_setting_t *s;
  int rc = array_elem(c, path, i, p, sizeof p, &s);
  return rc ? rc : get_float(c, s, p, 0, out);
}

int core_config_write(const core_config *c, FILE *f) {
  config_write(&c->cfg, f);
  return ferror(f) ? core_error_set(CORE_ERUNTIME, "writing the config failed") : CORE_OK;
}
