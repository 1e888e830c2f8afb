/* core/json.h: a small, strict JSON reader (DOM) and two writing helpers.
 *
 * Made for reading back brigade's own files (Chrome traces) and other small inputs. Strict means
 * RFC 8259 and nothing more: no comments, no trailing commas, no NaN/Infinity, no leading zeros,
 * no duplicate member names, strings must be valid UTF-8 without raw control characters (a
 * leading UTF-8 byte order mark is skipped). Numbers are doubles; a number too large for a double
 * is an error, one too small becomes 0 or a subnormal. "\u0000" is refused, so every string is a
 * plain NUL-terminated C string.
 *
 * Every node and string of a document lives in one arena (a chain of large blocks) owned by the
 * root; core_json_free(root) releases it all. Nesting is limited to CORE_JSON_MAX_DEPTH, so no
 * input can exhaust the stack. Errors are CORE_EINPUT with "<name>:<line>:<col>: <what>" (columns
 * count bytes from 1); running out of memory is CORE_ERUNTIME, never an abort. */
#ifndef BRIGADE_CORE_JSON_H
#define BRIGADE_CORE_JSON_H

#include <stddef.h>
#include <stdio.h>

enum { CORE_JSON_MAX_DEPTH = 256 };

typedef enum {
  CORE_JSON_NULL,
  CORE_JSON_BOOL,
  CORE_JSON_NUMBER,
  CORE_JSON_STRING,
  CORE_JSON_ARRAY,
  CORE_JSON_OBJECT,
} core_json_type;

typedef struct core_json core_json;
struct core_json {
  core_json_type type;
  int line, col;     /* where the value starts in the text (1-based) */
  double num;        /* NUMBER: the value; BOOL: 0 or 1 */
  const char *str;   /* STRING: the decoded value (UTF-8, NUL-terminated) */
  const char *key;   /* member name when this node is a member of an object, else NULL */
  size_t len;        /* STRING: bytes; ARRAY: elements; OBJECT: members */
  core_json **items; /* ARRAY / OBJECT: the len elements or members, in document order */
  const char *src;   /* the name given to the parser, for messages */
};

/* Parses text[0..n) (need not be NUL-terminated); name is used in messages. On success *out is
 * the root, to be released with core_json_free; on failure *out is NULL. */
int core_json_parse(const char *text, size_t n, const char *name, core_json **out);
/* Reads and parses a whole file (CORE_EINPUT when it cannot be opened). */
int core_json_parse_file(const char *path, core_json **out);
/* Releases a document; takes the root only. NULL is fine. */
void core_json_free(core_json *root);

const char *core_json_type_name(core_json_type t);      /* "null", "a boolean", "a number", ... */
int core_json_is(const core_json *j, core_json_type t); /* j is not NULL and of type t */

/* Lookups that never fail loudly: NULL / 0 when absent or of another type. */
const core_json *core_json_get(const core_json *obj, const char *key); /* first member named key */
size_t core_json_len(const core_json *j);                      /* elements or members, else 0 */
const core_json *core_json_at(const core_json *arr, size_t i); /* element (or member) i */

/* Typed accessors: CORE_OK and *out set, or CORE_EINPUT with "<name>:<line>:<col>: ..." saying
 * what was expected and what was found (out is left alone). An int must be integral and within
 * [lo, hi]. The get_ forms look up member key of obj first (missing: an error at obj). */
int core_json_as_number(const core_json *j, double *out);
int core_json_as_int(const core_json *j, int lo, int hi, int *out);
int core_json_as_bool(const core_json *j, int *out);
int core_json_as_string(const core_json *j, const char **out);
int core_json_get_number(const core_json *obj, const char *key, double *out);
int core_json_get_int(const core_json *obj, const char *key, int lo, int hi, int *out);
int core_json_get_bool(const core_json *obj, const char *key, int *out);
int core_json_get_string(const core_json *obj, const char *key, const char **out);
int core_json_get_array(const core_json *obj, const char *key, const core_json **out);
int core_json_get_object(const core_json *obj, const char *key, const core_json **out);

/* Writes s as a JSON string literal: quoted; '"', '\\' and control characters escaped; other
 * UTF-8 written as is (so Chrome's and Perfetto's simple readers take it); bytes that are not
 * valid UTF-8 become \ufffd. */
void core_json_write_string(FILE *f, const char *s);
/* Writes x in the shortest form that reads back to the same double; null when not finite. */
void core_json_write_number(FILE *f, double x);

#endif
