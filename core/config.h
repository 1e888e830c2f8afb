/* core/config.h: libconfig files with `--set key=value` overrides, a schema that rejects
 * unknown keys, and errors that name the file and line ("configs/tiny.cfg:12") or the
 * override ("--set train.steps").
 *
 * Paths. Group members are joined with dots and list or array elements are written "[N]":
 * "train.steps", "model.layers.[0].out", "pipeline.boundaries.[2]". Getters, where() and
 * --set all take this form; --set also takes "model.layers[0].out".
 *
 * Schema. Each key has its path and type, with "[]" standing for every element of a list or
 * array:
 *   {"model.layers", CORE_CFG_LIST}, {"model.layers.[].type", CORE_CFG_STRING},
 *   {"model.layers.[].out", CORE_CFG_INT}                 a list of groups ( {...}, {...} )
 *   {"pipeline.boundaries", CORE_CFG_LIST}, {"pipeline.boundaries.[]", CORE_CFG_INT}
 *                                                         an array of scalars [0, 4, 8]
 * A group need not be listed when a key under it is ("train.steps" implies the group "train",
 * "model.layers.[].type" implies that the elements of model.layers are groups).
 *
 * Numbers. libconfig 1.5 silently wraps integers that do not fit (99999999999 would load as
 * 1215752191), so loading rejects an integer outside 32 bits unless it carries libconfig's L
 * suffix (99999999999L), one outside 64 bits, and a float that overflows to infinity. */
#ifndef BRIGADE_CORE_CONFIG_H
#define BRIGADE_CORE_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct core_config core_config;

typedef enum {
  CORE_CFG_INT,   /* int or int64 (L suffix) */
  CORE_CFG_FLOAT, /* float, or an integer (users write 1 for 1.0) */
  CORE_CFG_BOOL,
  CORE_CFG_STRING,
  CORE_CFG_GROUP, /* { ... } */
  CORE_CFG_LIST,  /* a list ( ... ) or an array [ ... ] */
} core_cfg_type;

typedef struct {
  const char *path;
  core_cfg_type type;
} core_config_key;

/* A missing or unreadable file, a syntax error or an out-of-range number is CORE_EINPUT, with
 * "file:line: what" in the message. `name` stands for the file in messages. */
int core_config_load(core_config **out, const char *path);
int core_config_load_string(core_config **out, const char *text, const char *name);
void core_config_free(core_config *c);
const char *core_config_name(const core_config *c);

/* One "--set key=value". An existing scalar keeps its type and the text must convert to it
 * (an integer key must fit in 32 bits unless it was written with L), except that an integer
 * key given a float becomes a float (the file said lr = 1, the user sets lr=0.5; the schema
 * check rejects it where the key must be an integer). A new key gets its missing groups and
 * the type the text suggests: true/false, an integer (int64 when it does not fit in 32 bits),
 * a float, else a string; "quoted" text is always a string, without its quotes. A value that
 * starts with [ ( or { is parsed by libconfig and replaces a list, array or group. Elements of
 * existing lists can be set ("model.layers.[0].out=128") but not added. Errors name the key
 * and say it came from --set; the config is unchanged after an error. */
int core_config_set(core_config *c, const char *assignment);

/* Every setting must be in the schema, with its type; the first violation is CORE_EINPUT:
 * "unknown key 'train.stepz' (x.cfg:7); did you mean 'train.steps'?" or
 * "train.steps must be an integer (--set train.steps)". */
int core_config_check(const core_config *c, const core_config_key *keys, size_t nkeys);

/* Getters: a missing key gives def and CORE_OK; a key of the wrong type (or out of [lo, hi])
 * gives CORE_EINPUT naming the key and where it was set. Strings stay owned by the config. */
int core_config_get_int(const core_config *c, const char *path, int64_t def, int64_t *out);
int core_config_get_int_range(const core_config *c, const char *path, int64_t def, int64_t lo,
                              int64_t hi, int64_t *out);
int core_config_get_float(const core_config *c, const char *path, double def, double *out);
int core_config_get_bool(const core_config *c, const char *path, int def, int *out);
int core_config_get_string(const core_config *c, const char *path, const char *def,
                           const char **out);
int core_config_has(const core_config *c, const char *path);

/* Lists: the length of the list or array at path (0 when missing or not a list), and member
 * `key` of element i (a group) of the list at `list`, with the getters' rules; an element
 * that is not a group is CORE_EINPUT. */
int core_config_list_len(const core_config *c, const char *path);
int core_config_elem_int(const core_config *c, const char *list, int i, const char *key,
                         int64_t def, int64_t *out);
int core_config_elem_float(const core_config *c, const char *list, int i, const char *key,
                           double def, double *out);
int core_config_elem_string(const core_config *c, const char *list, int i, const char *key,
                            const char *def, const char **out);
int core_config_elem_bool(const core_config *c, const char *list, int i, const char *key, int def,
                          int *out);
/* Scalar element i of an array or list: missing or of the wrong type is CORE_EINPUT. */
int core_config_array_int(const core_config *c, const char *path, int i, int64_t *out);
int core_config_array_float(const core_config *c, const char *path, int i, double *out);

/* Where a key (or its element i, when i >= 0) was set, for other modules' messages:
 * "file:line" or "--set key". CORE_OK when it exists; CORE_EINPUT when it does not, with the
 * nearest place found written (the list's line, else the file name). Leaves the error message
 * alone, so it can be called while reporting another error. */
int core_config_where(const core_config *c, const char *path, int i, char *buf, size_t n);
/* Where member `key` of element i of the list at `list` was set, for messages about that member:
 * "--set model.layers.[1].repeat" when an override gave it, else its line; the element's place
 * (core_config_where(c, list, i)) when the member is missing, and then CORE_EINPUT. An error
 * about one member must name the member's place, not the element's: the element keeps its file
 * line when --set changes a member. */
int core_config_elem_where(const core_config *c, const char *list, int i, const char *key,
                           char *buf, size_t n);

/* The effective config (file plus overrides) in libconfig syntax, for checkpoints. */
int core_config_write(const core_config *c, FILE *f);

#endif
