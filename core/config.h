/* core/config.h: libconfig files with `--set key=value` overrides, a schema that rejects
 * unknown keys, and errors that name the file and line ("configs/tiny.cfg:12") or the
 * override ("--set train.steps").
 *
 * Schema paths name groups' members with dots and list or array elements with "[]":
 * "model.layers" (a list), "model.layers.[].type" (a string in each element),
 * "pipeline.boundaries.[]" (the integers of an array). */
#ifndef BRIGADE_CORE_CONFIG_H
#define BRIGADE_CORE_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct core_config core_config;

typedef enum {
  CORE_CFG_INT,    /* int or int64 */
  CORE_CFG_FLOAT,  /* float, or an integer (users write 1 for 1.0) */
  CORE_CFG_BOOL,
  CORE_CFG_STRING,
  CORE_CFG_GROUP,
  CORE_CFG_LIST,   /* a list ( ... ) or an array [ ... ] */
} core_cfg_type;

typedef struct {
  const char *path;
  core_cfg_type type;
} core_config_key;

int core_config_load(core_config **out, const char *path);
int core_config_load_string(core_config **out, const char *text, const char *name);
void core_config_free(core_config *c);
const char *core_config_name(const core_config *c);

/* "a.b.c=value": converts value to the existing key's type, or creates the key (and its
 * groups) with the type the text suggests: true/false, integer, float, else string ("quoted"
 * strings lose their quotes). */
int core_config_set(core_config *c, const char *assignment);

/* Every setting must be in the schema, with its type; the first violation is an error. */
int core_config_check(const core_config *c, const core_config_key *keys, size_t nkeys);

/* Getters: a missing key gives def and CORE_OK; a key of the wrong type (or out of [lo, hi])
 * gives CORE_EINPUT naming the key and where it was set. */
int core_config_get_int(const core_config *c, const char *path, int64_t def, int64_t *out);
int core_config_get_int_range(const core_config *c, const char *path, int64_t def, int64_t lo,
                              int64_t hi, int64_t *out);
int core_config_get_float(const core_config *c, const char *path, double def, double *out);
int core_config_get_bool(const core_config *c, const char *path, int def, int *out);
int core_config_get_string(const core_config *c, const char *path, const char *def, const char **out);
int core_config_has(const core_config *c, const char *path);

/* Lists: length (0 when missing), and members of element i (a group) of the list at path. */
int core_config_list_len(const core_config *c, const char *path);
int core_config_elem_int(const core_config *c, const char *list, int i, const char *key, int64_t def, int64_t *out);
int core_config_elem_float(const core_config *c, const char *list, int i, const char *key, double def, double *out);
int core_config_elem_string(const core_config *c, const char *list, int i, const char *key, const char *def, const char **out);
int core_config_elem_bool(const core_config *c, const char *list, int i, const char *key, int def, int *out);
/* Scalar element i of an array or list of integers. */
int core_config_array_int(const core_config *c, const char *path, int i, int64_t *out);

/* Where a key (or list element i, when i >= 0) was set: "file:line" or "--set key". */
void core_config_where(const core_config *c, const char *path, int i, char *buf, size_t n);

int core_config_write(const core_config *c, FILE *f);

#endif
