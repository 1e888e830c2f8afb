/* Config loading: locations in errors, --set overrides, schema with unknown keys. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/config.h"
#include "core/error.h"

static const core_config_key schema[] = {
    {"train", CORE_CFG_GROUP},          {"train.steps", CORE_CFG_INT},
    {"train.lr", CORE_CFG_FLOAT},       {"train.name", CORE_CFG_STRING},
    {"train.fast", CORE_CFG_BOOL},      {"model", CORE_CFG_GROUP},
    {"model.layers", CORE_CFG_LIST},    {"model.layers.[]", CORE_CFG_GROUP},
    {"model.layers.[].type", CORE_CFG_STRING}, {"model.layers.[].out", CORE_CFG_INT},
    {"pipeline", CORE_CFG_GROUP},       {"pipeline.boundaries", CORE_CFG_LIST},
    {"pipeline.boundaries.[]", CORE_CFG_INT},
};
#define NS (sizeof schema / sizeof schema[0])

static const char *text =
    "train = {\n"
    "  steps = 20;\n"
    "  lr = 1;\n"
    "  name = \"tiny\";\n"
    "  fast = true;\n"
    "};\n"
    "model = { layers = ( { type = \"linear\"; out = 64; },\n"
    "                     { type = \"gelu\"; } ); };\n"
    "pipeline = { boundaries = [0, 1, 2]; };\n";

static core_config *load(const char *t) {
  core_config *c;
  cr_assert_eq(core_config_load_string(&c, t, "x.cfg"), CORE_OK, "%s", core_error_msg());
  return c;
}

Test(config, getters_and_schema) {
  core_config *c = load(text);
  cr_assert_eq(core_config_check(c, schema, NS), CORE_OK, "%s", core_error_msg());
  int64_t i;
  double d;
  const char *s;
  int b;
  cr_assert_eq(core_config_get_int(c, "train.steps", 5, &i), CORE_OK);
  cr_assert_eq(i, 20);
  cr_assert_eq(core_config_get_int(c, "train.missing", 5, &i), CORE_OK);
  cr_assert_eq(i, 5);
  cr_assert_eq(core_config_get_float(c, "train.lr", 0, &d), CORE_OK);
  cr_assert_eq(d, 1.0);
  cr_assert_eq(core_config_get_string(c, "train.name", "", &s), CORE_OK);
  cr_assert_str_eq(s, "tiny");
  cr_assert_eq(core_config_get_bool(c, "train.fast", 0, &b), CORE_OK);
  cr_assert_eq(b, 1);
  cr_assert_eq(core_config_list_len(c, "model.layers"), 2);
  cr_assert_eq(core_config_elem_int(c, "model.layers", 0, "out", 0, &i), CORE_OK);
  cr_assert_eq(i, 64);
  cr_assert_eq(core_config_elem_string(c, "model.layers", 1, "type", "", &s), CORE_OK);
  cr_assert_str_eq(s, "gelu");
  cr_assert_eq(core_config_array_int(c, "pipeline.boundaries", 2, &i), CORE_OK);
  cr_assert_eq(i, 2);
  /* wrong types name the key and the line */
  cr_assert_eq(core_config_get_int(c, "train.name", 0, &i), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "train.name must be an integer (x.cfg:4)"), "%s", core_error_msg());
  cr_assert_eq(core_config_elem_int(c, "model.layers", 1, "type", 0, &i), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "model.layers.[1].type must be an integer (x.cfg:8)"), "%s", core_error_msg());
  cr_assert_eq(core_config_get_int_range(c, "train.steps", 1, 1, 10, &i), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "train.steps = 20 must be in [1, 10] (x.cfg:2)"), "%s", core_error_msg());
  char where[64];
  core_config_where(c, "model.layers", 1, where, sizeof where);
  cr_assert_str_eq(where, "x.cfg:8");
  core_config_free(c);
}

Test(config, unknown_keys_and_wrong_types) {
  core_config *c = load("train = { steps = 3; stepz = 4; };\n");
  cr_assert_eq(core_config_check(c, schema, NS), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "unknown key 'train.stepz' (x.cfg:1)"), "%s", core_error_msg());
  core_config_free(c);
  c = load("train = {\n steps = \"many\"; };\n");
  cr_assert_eq(core_config_check(c, schema, NS), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "train.steps must be an integer (x.cfg:2)"), "%s", core_error_msg());
  core_config_free(c);
  c = load("model = { layers = ( { type = \"linear\"; width = 3; } ); };\n");
  cr_assert_eq(core_config_check(c, schema, NS), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "unknown key 'model.layers.[0].width'"), "%s", core_error_msg());
  core_config_free(c);
}

Test(config, parse_errors_name_file_and_line) {
  core_config *c;
  cr_assert_eq(core_config_load_string(&c, "a = 1;\nb = ;\n", "bad.cfg"), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "bad.cfg:2:"), "%s", core_error_msg());
  char path[] = "/tmp/brigade_cfg_XXXXXX";
  FILE *f = fdopen(mkstemp(path), "w");
  fputs("x = 1;\ny = {\n", f);
  fclose(f);
  cr_assert_eq(core_config_load(&c, path), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), path), "%s", core_error_msg());
  unlink(path);
  cr_assert_eq(core_config_load(&c, "/nonexistent.cfg"), CORE_EINPUT);
}

Test(config, overrides) {
  core_config *c = load(text);
  int64_t i;
  double d;
  const char *s;
  int b;
  cr_assert_eq(core_config_set(c, "train.steps=7"), CORE_OK);
  cr_assert_eq(core_config_set(c, "train.lr=0.5"), CORE_OK);
  cr_assert_eq(core_config_set(c, "train.name=\"big\""), CORE_OK);
  cr_assert_eq(core_config_set(c, "train.fast=false"), CORE_OK);
  cr_assert_eq(core_config_set(c, "checkpoint.dir=out/ck"), CORE_OK);
  cr_assert_eq(core_config_set(c, "checkpoint.interval=10"), CORE_OK);
  core_config_get_int(c, "train.steps", 0, &i);
  core_config_get_float(c, "train.lr", 0, &d);
  core_config_get_string(c, "train.name", "", &s);
  core_config_get_bool(c, "train.fast", 1, &b);
  cr_assert(i == 7 && d == 0.5 && !strcmp(s, "big") && b == 0);
  core_config_get_string(c, "checkpoint.dir", "", &s);
  cr_assert_str_eq(s, "out/ck");
  core_config_get_int(c, "checkpoint.interval", 0, &i);
  cr_assert_eq(i, 10);
  char where[64];
  core_config_where(c, "train.steps", -1, where, sizeof where);
  cr_assert_str_eq(where, "--set train.steps");
  cr_assert_eq(core_config_set(c, "train.steps=abc"), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "expected an integer"));
  cr_assert_eq(core_config_set(c, "train.steps=99999999999"), CORE_EINPUT);
  cr_assert_eq(core_config_set(c, "train.fast=maybe"), CORE_EINPUT);
  cr_assert_eq(core_config_set(c, "train.lr=nan"), CORE_EINPUT);
  cr_assert_eq(core_config_set(c, "train=3"), CORE_EINPUT);
  cr_assert_eq(core_config_set(c, "train.steps.x=3"), CORE_EINPUT);
  cr_assert_eq(core_config_set(c, "noequals"), CORE_EINPUT);
  cr_assert_eq(core_config_set(c, "=3"), CORE_EINPUT);
  cr_assert_eq(core_config_set(c, "a..b=3"), CORE_EINPUT);
  /* an override of a bad type is caught by the schema, naming the override */
  cr_assert_eq(core_config_set(c, "train.extra=1"), CORE_OK);
  cr_assert_eq(core_config_check(c, schema, NS), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "unknown key 'train.extra' (--set train.extra)"), "%s", core_error_msg());
  core_config_free(c);
}
