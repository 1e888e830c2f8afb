/* core/config.c: libconfig wrapped with locations, overrides and a schema. */
#include "core/config.h"

#include <ctype.h>
#include <errno.h>
#include <libconfig.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

struct core_config {
  config_t cfg;
  char name[512];
  char **overrides; /* paths set from the command line */
  int noverrides;
};

static int loaded(core_config *c, int ok) {
  if (ok) return CORE_OK;
  const char *file = config_error_file(&c->cfg);
  return core_error_set(CORE_EINPUT, "%s:%d: %s", file ? file : c->name, config_error_line(&c->cfg),
                        config_error_text(&c->cfg));
}

int core_config_load(core_config **out, const char *path) {
  core_config *c = core_calloc(1, sizeof *c);
  config_init(&c->cfg);
  snprintf(c->name, sizeof c->name, "%s", path);
  FILE *f = fopen(path, "r");
  int rc = f ? CORE_OK : core_error_set(CORE_EINPUT, "cannot open config %s: %s", path, strerror(errno));
  if (f) fclose(f);
  if (!rc) rc = loaded(c, config_read_file(&c->cfg, path) == CONFIG_TRUE);
  if (rc) {
    core_config_free(c);
    return rc;
  }
  *out = c;
  return CORE_OK;
}

int core_config_load_string(core_config **out, const char *text, const char *name) {
  core_config *c = core_calloc(1, sizeof *c);
  config_init(&c->cfg);
  snprintf(c->name, sizeof c->name, "%s", name);
  int rc = config_read_string(&c->cfg, text) == CONFIG_TRUE ? CORE_OK : core_error_set(CORE_EINPUT, "%s:%d: %s", name, config_error_line(&c->cfg), config_error_text(&c->cfg));
  if (rc) {
    core_config_free(c);
    return rc;
  }
  *out = c;
  return CORE_OK;
}

void core_config_free(core_config *c) {
  if (!c) return;
  config_destroy(&c->cfg);
  for (int i = 0; i < c->noverrides; i++) free(c->overrides[i]);
  free(c->overrides);
  free(c);
}

const char *core_config_name(const core_config *c) { return c->name; }

static int is_override(const core_config *c, const char *path) {
  for (int i = 0; i < c->noverrides; i++)
    if (strcmp(c->overrides[i], path) == 0) return 1;
  return 0;
}

static void where_setting(const core_config *c, const config_setting_t *s, const char *path, char *buf, size_t n) {
  if (path && is_override(c, path)) {
    snprintf(buf, n, "--set %s", path);
    return;
  }
  const char *file = s ? config_setting_source_file(s) : NULL;
  int line = s ? config_setting_source_line(s) : 0;
  if (line > 0) snprintf(buf, n, "%s:%d", file ? file : c->name, line);
  else snprintf(buf, n, "%s", c->name);
}

void core_config_where(const core_config *c, const char *path, int i, char *buf, size_t n) {
  const config_setting_t *s = config_lookup(&c->cfg, path);
  if (s && i >= 0) s = config_setting_get_elem(s, (unsigned)i);
  where_setting(c, s, path, buf, n);
}

/* ---- overrides ---- */

static int valid_name(const char *s, size_t n) {
  if (n == 0 || !isalpha((unsigned char)s[0])) return 0;
  for (size_t i = 1; i < n; i++)
    if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-') return 0;
  return 1;
}

static int parse_int64(const char *v, long long *out) {
  char *e;
  errno = 0;
  long long x = strtoll(v, &e, 0);
  if (errno || e == v || *e) return 0;
  *out = x;
  return 1;
}

static int parse_double(const char *v, double *out) {
  char *e;
  errno = 0;
  double x = strtod(v, &e);
  if (errno || e == v || *e || !isfinite(x)) return 0;
  *out = x;
  return 1;
}

/* Sets an existing scalar from text, keeping its type. */
static int set_typed(config_setting_t *s, const char *key, const char *v) {
  long long i;
  double d;
  switch (config_setting_type(s)) {
  case CONFIG_TYPE_INT:
    if (parse_int64(v, &i) && i >= INT_MIN && i <= INT_MAX) return config_setting_set_int(s, (int)i) ? CORE_OK : CORE_ERUNTIME;
    return core_error_set(CORE_EINPUT, "--set %s=%s: expected an integer", key, v);
  case CONFIG_TYPE_INT64:
    if (parse_int64(v, &i)) return config_setting_set_int64(s, i) ? CORE_OK : CORE_ERUNTIME;
    return core_error_set(CORE_EINPUT, "--set %s=%s: expected an integer", key, v);
  case CONFIG_TYPE_FLOAT:
    if (parse_double(v, &d)) return config_setting_set_float(s, d) ? CORE_OK : CORE_ERUNTIME;
    return core_error_set(CORE_EINPUT, "--set %s=%s: expected a number", key, v);
  case CONFIG_TYPE_BOOL:
    if (!strcmp(v, "true") || !strcmp(v, "false")) return config_setting_set_bool(s, v[0] == 't') ? CORE_OK : CORE_ERUNTIME;
    return core_error_set(CORE_EINPUT, "--set %s=%s: expected true or false", key, v);
  case CONFIG_TYPE_STRING: {
    size_t n = strlen(v);
    if (n >= 2 && v[0] == '"' && v[n - 1] == '"') {
      char *u = core_malloc(n - 1);
      memcpy(u, v + 1, n - 2);
      u[n - 2] = 0;
      int ok = config_setting_set_string(s, u);
      free(u);
      return ok ? CORE_OK : CORE_ERUNTIME;
    }
    return config_setting_set_string(s, v) ? CORE_OK : CORE_ERUNTIME;
  }
  default: return core_error_set(CORE_EINPUT, "--set %s: cannot set a group or list from the command line", key);
  }
}

static int infer_type(const char *v) {
  long long i;
  double d;
  if (!strcmp(v, "true") || !strcmp(v, "false")) return CONFIG_TYPE_BOOL;
  if (parse_int64(v, &i)) return i >= INT_MIN && i <= INT_MAX ? CONFIG_TYPE_INT : CONFIG_TYPE_INT64;
  if (parse_double(v, &d)) return CONFIG_TYPE_FLOAT;
  return CONFIG_TYPE_STRING;
}

int core_config_set(core_config *c, const char *assignment) {
  const char *eq = strchr(assignment, '=');
  if (!eq) return core_error_set(CORE_EINPUT, "--set '%s': expected key=value", assignment);
  size_t klen = (size_t)(eq - assignment);
  if (klen == 0 || klen > 400) return core_error_set(CORE_EINPUT, "--set '%s': bad key", assignment);
  char key[512];
  memcpy(key, assignment, klen);
  key[klen] = 0;
  const char *val = eq + 1;
  /* walk the path, creating groups as needed */
  config_setting_t *s = config_root_setting(&c->cfg);
  char *seg = key;
  for (;;) {
    char *dot = strchr(seg, '.');
    size_t n = dot ? (size_t)(dot - seg) : strlen(seg);
    if (!valid_name(seg, n)) return core_error_set(CORE_EINPUT, "--set %s: '%.*s' is not a valid key name", key, (int)n, seg);
    char name[512];
    memcpy(name, seg, n);
    name[n] = 0;
    config_setting_t *child = config_setting_get_member(s, name);
    if (dot) {
      if (!child) child = config_setting_add(s, name, CONFIG_TYPE_GROUP);
      else if (config_setting_type(child) != CONFIG_TYPE_GROUP)
        return core_error_set(CORE_EINPUT, "--set %s: '%s' is not a group", key, name);
      s = child, seg = dot + 1;
      continue;
    }
    if (child && infer_type(val) == CONFIG_TYPE_FLOAT &&
        (config_setting_type(child) == CONFIG_TYPE_INT || config_setting_type(child) == CONFIG_TYPE_INT64)) {
      /* "lr = 1" in the file, --set lr=0.5: the key is a number, so it becomes a float */
      config_setting_remove(s, name);
      child = NULL;
    }
    if (!child) child = config_setting_add(s, name, infer_type(val));
    if (!child) return core_error_set(CORE_EINPUT, "--set %s: cannot create the key", key);
    int rc = set_typed(child, key, val);
    if (rc) return rc;
    break;
  }
  c->overrides = core_realloc(c->overrides, sizeof(char *) * (size_t)(c->noverrides + 1));
  c->overrides[c->noverrides++] = strdup(key);
  return CORE_OK;
}

/* ---- schema ---- */

static const core_config_key *schema_find(const core_config_key *keys, size_t n, const char *path) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(keys[i].path, path) == 0) return &keys[i];
  return NULL;
}

static int type_ok(core_cfg_type want, int have) {
  switch (want) {
  case CORE_CFG_INT: return have == CONFIG_TYPE_INT || have == CONFIG_TYPE_INT64;
  case CORE_CFG_FLOAT: return have == CONFIG_TYPE_FLOAT || have == CONFIG_TYPE_INT || have == CONFIG_TYPE_INT64;
  case CORE_CFG_BOOL: return have == CONFIG_TYPE_BOOL;
  case CORE_CFG_STRING: return have == CONFIG_TYPE_STRING;
  case CORE_CFG_GROUP: return have == CONFIG_TYPE_GROUP;
  default: return have == CONFIG_TYPE_LIST || have == CONFIG_TYPE_ARRAY;
  }
}

static const char *type_name(core_cfg_type t) {
  static const char *names[] = {"an integer", "a number", "true or false", "a string", "a group { ... }", "a list"};
  return names[t];
}

/* Checks setting s whose schema path is spath (and real path rpath for --set lookups). */
static int check_setting(const core_config *c, const config_setting_t *s, const char *spath,
                         const char *rpath, const core_config_key *keys, size_t nkeys, int depth) {
  char where[600];
  if (depth > 32) return core_error_set(CORE_EINPUT, "%s: nesting too deep", c->name);
  if (spath[0]) {
    const core_config_key *k = schema_find(keys, nkeys, spath);
    where_setting(c, s, rpath, where, sizeof where);
    if (!k) return core_error_set(CORE_EINPUT, "unknown key '%s' (%s)", rpath, where);
    if (!type_ok(k->type, config_setting_type(s)))
      return core_error_set(CORE_EINPUT, "%s must be %s (%s)", rpath, type_name(k->type), where);
  }
  int t = config_setting_type(s);
  if (t != CONFIG_TYPE_GROUP && t != CONFIG_TYPE_LIST && t != CONFIG_TYPE_ARRAY) return CORE_OK;
  int n = config_setting_length(s);
  for (int i = 0; i < n; i++) {
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
    int rc = check_setting(c, e, sp, rp, keys, nkeys, depth + 1);
    if (rc) return rc;
  }
  return CORE_OK;
}

int core_config_check(const core_config *c, const core_config_key *keys, size_t nkeys) {
  return check_setting(c, config_root_setting(&c->cfg), "", "", keys, nkeys, 0);
}

/* ---- getters ---- */

static int wrong(const core_config *c, const config_setting_t *s, const char *path, const char *want) {
  char where[600];
  where_setting(c, s, path, where, sizeof where);
  return core_error_set(CORE_EINPUT, "%s must be %s (%s)", path, want, where);
}

static int get_int(const core_config *c, const config_setting_t *s, const char *path, int64_t def, int64_t *out) {
  if (!s) {
    *out = def;
    return CORE_OK;
  }
  int t = config_setting_type(s);
  if (t == CONFIG_TYPE_INT) *out = config_setting_get_int(s);
  else if (t == CONFIG_TYPE_INT64) *out = config_setting_get_int64(s);
  else return wrong(c, s, path, "an integer");
  return CORE_OK;
}

static int get_float(const core_config *c, const config_setting_t *s, const char *path, double def, double *out) {
  if (!s) {
    *out = def;
    return CORE_OK;
  }
  int t = config_setting_type(s);
  if (t == CONFIG_TYPE_FLOAT) *out = config_setting_get_float(s);
  else if (t == CONFIG_TYPE_INT) *out = config_setting_get_int(s);
  else if (t == CONFIG_TYPE_INT64) *out = (double)config_setting_get_int64(s);
  else return wrong(c, s, path, "a number");
  return CORE_OK;
}

static int get_bool(const core_config *c, const config_setting_t *s, const char *path, int def, int *out) {
  if (!s) {
    *out = def;
    return CORE_OK;
  }
  if (config_setting_type(s) != CONFIG_TYPE_BOOL) return wrong(c, s, path, "true or false");
  *out = config_setting_get_bool(s);
  return CORE_OK;
}

static int get_string(const core_config *c, const config_setting_t *s, const char *path, const char *def, const char **out) {
  if (!s) {
    *out = def;
    return CORE_OK;
  }
  if (config_setting_type(s) != CONFIG_TYPE_STRING) return wrong(c, s, path, "a string");
  *out = config_setting_get_string(s);
  return CORE_OK;
}

int core_config_get_int(const core_config *c, const char *path, int64_t def, int64_t *out) {
  return get_int(c, config_lookup(&c->cfg, path), path, def, out);
}

int core_config_get_int_range(const core_config *c, const char *path, int64_t def, int64_t lo, int64_t hi, int64_t *out) {
  const config_setting_t *s = config_lookup(&c->cfg, path);
  int rc = get_int(c, s, path, def, out);
  if (rc || (*out >= lo && *out <= hi)) return rc;
  char where[600], want[128];
  where_setting(c, s, path, where, sizeof where);
  snprintf(want, sizeof want, "in [%lld, %lld]", (long long)lo, (long long)hi);
  return core_error_set(CORE_EINPUT, "%s = %lld must be %s (%s)", path, (long long)*out, want, where);
}

int core_config_get_float(const core_config *c, const char *path, double def, double *out) {
  return get_float(c, config_lookup(&c->cfg, path), path, def, out);
}

int core_config_get_bool(const core_config *c, const char *path, int def, int *out) {
  return get_bool(c, config_lookup(&c->cfg, path), path, def, out);
}

int core_config_get_string(const core_config *c, const char *path, const char *def, const char **out) {
  return get_string(c, config_lookup(&c->cfg, path), path, def, out);
}

int core_config_has(const core_config *c, const char *path) { return config_lookup(&c->cfg, path) != NULL; }

int core_config_list_len(const core_config *c, const char *path) {
  const config_setting_t *s = config_lookup(&c->cfg, path);
  if (!s) return 0;
  int t = config_setting_type(s);
  return t == CONFIG_TYPE_LIST || t == CONFIG_TYPE_ARRAY ? config_setting_length(s) : 0;
}

/* Member `key` of element i of the list at `list`, and its printable path. */
static const config_setting_t *elem_member(const core_config *c, const char *list, int i, const char *key, char *path, size_t n) {
  snprintf(path, n, "%s.[%d].%s", list, i, key);
  const config_setting_t *l = config_lookup(&c->cfg, list);
  const config_setting_t *e = l ? config_setting_get_elem(l, (unsigned)i) : NULL;
  return e && config_setting_type(e) == CONFIG_TYPE_GROUP ? config_setting_get_member(e, key) : NULL;
}

int core_config_elem_int(const core_config *c, const char *list, int i, const char *key, int64_t def, int64_t *out) {
  char p[600];
  const config_setting_t *s = elem_member(c, list, i, key, p, sizeof p);
  return get_int(c, s, p, def, out);
}

int core_config_elem_float(const core_config *c, const char *list, int i, const char *key, double def, double *out) {
  char p[600];
  const config_setting_t *s = elem_member(c, list, i, key, p, sizeof p);
  return get_float(c, s, p, def, out);
}

int core_config_elem_string(const core_config *c, const char *list, int i, const char *key, const char *def, const char **out) {
  char p[600];
  const config_setting_t *s = elem_member(c, list, i, key, p, sizeof p);
  return get_string(c, s, p, def, out);
}

int core_config_elem_bool(const core_config *c, const char *list, int i, const char *key, int def, int *out) {
  char p[600];
  const config_setting_t *s = elem_member(c, list, i, key, p, sizeof p);
  return get_bool(c, s, p, def, out);
}

int core_config_array_int(const core_config *c, const char *path, int i, int64_t *out) {
  const config_setting_t *l = config_lookup(&c->cfg, path);
  const config_setting_t *e = l ? config_setting_get_elem(l, (unsigned)i) : NULL;
  char p[600];
  snprintf(p, sizeof p, "%s.[%d]", path, i);
  if (!e) return core_error_set(CORE_EINPUT, "%s is missing", p);
  return get_int(c, e, p, 0, out);
}

int core_config_write(const core_config *c, FILE *f) {
  config_write(&c->cfg, f);
  return ferror(f) ? core_error_set(CORE_ERUNTIME, "writing the config failed") : CORE_OK;
}
