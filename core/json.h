/* core/json.h: a small strict JSON reader (DOM), for files brigade wrote (traces) and other
 * small inputs. All nodes live in one arena freed by core_json_free. Errors give line:col. */
#ifndef BRIGADE_CORE_JSON_H
#define BRIGADE_CORE_JSON_H

#include <stddef.h>
#include <stdio.h>

typedef enum { CORE_JSON_NULL, CORE_JSON_BOOL, CORE_JSON_NUMBER, CORE_JSON_STRING, CORE_JSON_ARRAY, CORE_JSON_OBJECT } core_json_type;

typedef struct core_json core_json;
struct core_json {
  core_json_type type;
  double num;       /* numbers and bools (0/1) */
  char *str;        /* strings (UTF-8, NUL-terminated); member key for object members */
  char *key;
  core_json *child; /* first element / member */
  core_json *next;  /* next sibling */
  size_t len;       /* elements / members */
};

/* Parses text[0..n); name is used in messages. On success *out is the root. */
int core_json_parse(const char *text, size_t n, const char *name, core_json **out);
void core_json_free(core_json *root);
const core_json *core_json_get(const core_json *obj, const char *key); /* NULL if absent */
const core_json *core_json_at(const core_json *arr, size_t i);
/* Writes s as a JSON string literal (quoted, escaped). */
void core_json_write_string(FILE *f, const char *s);

#endif
