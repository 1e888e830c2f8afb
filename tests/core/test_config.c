/* Config loading: locations in errors, --set overrides, the schema of known keys, numbers that
 * libconfig would wrap, and inputs that must fail cleanly. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/config.h"
#include "core/error.h"

static const core_config_key schema[] = {
    {"train", CORE_CFG_GROUP},
    {"train.steps", CORE_CFG_INT},
    {"train.lr", CORE_CFG_FLOAT},
    {"train.name", CORE_CFG_STRING},
    {"train.fast", CORE_CFG_BOOL},
    {"model", CORE_CFG_GROUP},
    {"model.layers", CORE_CFG_LIST},
    {"model.layers.[]", CORE_CFG_GROUP},
    {"model.layers.[].type", CORE_CFG_STRING},
    {"model.layers.[].out", CORE_CFG_INT},
    {"pipeline", CORE_CFG_GROUP},
    {"pipeline.boundaries", CORE_CFG_LIST},
    {"pipeline.boundaries.[]", CORE_CFG_INT},
};
#define NS (sizeof schema / sizeof schema[0])

/* The same keys with the groups left implied by the keys under them. */
static const core_config_key lean[] = {
    {"train.steps", CORE_CFG_INT},
    {"train.lr", CORE_CFG_FLOAT},
    {"train.name", CORE_CFG_STRING},
    {"train.fast", CORE_CFG_BOOL},
    {"model.layers", CORE_CFG_LIST},
    {"model.layers.[].type", CORE_CFG_STRING},
    {"model.layers.[].out", CORE_CFG_INT},
    {"pipeline.boundaries", CORE_CFG_LIST},
    {"pipeline.boundaries.[]", CORE_CFG_INT},
    {"data.path", CORE_CFG_STRING},
};
#define NL (sizeof lean / sizeof lean[0])

static const char *text = "train = {\n"                                              /* 1 */
                          "  steps = 20;\n"                                          /* 2 */
                          "  lr = 1;\n"                                              /* 3 */
                          "  name = \"tiny\";\n"                                     /* 4 */
                          "  fast = true;\n"                                         /* 5 */
                          "};\n"                                                     /* 6 */
                          "model = { layers = ( { type = \"linear\"; out = 64; },\n" /* 7 */
                          "                     { type = \"gelu\"; } ); };\n"        /* 8 */
                          "pipeline = { boundaries = [0, 1, 2]; };\n";               /* 9 */

static core_config *load(const char *t) {
  core_config *c = NULL;
  cr_assert_eq(core_config_load_string(&c, t, "x.cfg"), CORE_OK, "%s", core_error_msg());
  return c;
}

#define assert_msg(needle)                                                                         \
  cr_assert(strstr(core_error_msg(), needle), "message '%s' lacks '%s'", core_error_msg(), needle)

/* Writes text to a fresh temporary file; path must hold 32 bytes. */
static void temp_file(char *path, const char *contents) {
  strcpy(path, "/tmp/brigade_cfg_XXXXXX");
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  FILE *f = fdopen(fd, "w");
  fputs(contents, f);
  fclose(f);
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
  cr_assert_eq(core_config_get_float(c, "train.lr", 0, &d), CORE_OK);
  cr_assert_eq(d, 1.0); /* an integer is a number */
  cr_assert_eq(core_config_get_string(c, "train.name", "", &s), CORE_OK);
  cr_assert_str_eq(s, "tiny");
  cr_assert_eq(core_config_get_bool(c, "train.fast", 0, &b), CORE_OK);
  cr_assert_eq(b, 1);
  cr_assert(core_config_has(c, "train.steps") && !core_config_has(c, "train.nope"));
  cr_assert_eq(core_config_list_len(c, "model.layers"), 2);
  cr_assert_eq(core_config_list_len(c, "pipeline.boundaries"), 3);
  cr_assert_eq(core_config_list_len(c, "train.steps"), 0);
  cr_assert_eq(core_config_list_len(c, "missing"), 0);
  cr_assert_eq(core_config_elem_int(c, "model.layers", 0, "out", 0, &i), CORE_OK);
  cr_assert_eq(i, 64);
  cr_assert_eq(core_config_elem_string(c, "model.layers", 1, "type", "", &s), CORE_OK);
  cr_assert_str_eq(s, "gelu");
  cr_assert_eq(core_config_array_int(c, "pipeline.boundaries", 2, &i), CORE_OK);
  cr_assert_eq(i, 2);
  cr_assert_eq(core_config_array_float(c, "pipeline.boundaries", 1, &d), CORE_OK);
  cr_assert_eq(d, 1.0);
  cr_assert_eq(core_config_get_int_range(c, "train.steps", 1, 1, 100, &i), CORE_OK);
  cr_assert_eq(i, 20);
  core_config_free(c);
}

Test(config, missing_keys_give_defaults) {
  core_config *c = load(text);
  int64_t i;
  double d;
  const char *s;
  int b;
  cr_assert_eq(core_config_get_int(c, "train.missing", 5, &i), CORE_OK);
  cr_assert_eq(i, 5);
  cr_assert_eq(core_config_get_float(c, "nope.lr", 0.25, &d), CORE_OK);
  cr_assert_eq(d, 0.25);
  cr_assert_eq(core_config_get_string(c, "train.other", "dflt", &s), CORE_OK);
  cr_assert_str_eq(s, "dflt");
  cr_assert_eq(core_config_get_string(c, "train.other", NULL, &s), CORE_OK);
  cr_assert_null(s);
  cr_assert_eq(core_config_get_bool(c, "train.slow", 1, &b), CORE_OK);
  cr_assert_eq(b, 1);
  /* members missing from an element, elements missing from a list, lists missing */
  cr_assert_eq(core_config_elem_int(c, "model.layers", 1, "out", 7, &i), CORE_OK);
  cr_assert_eq(i, 7);
  cr_assert_eq(core_config_elem_float(c, "model.layers", 1, "eps", 1e-5, &d), CORE_OK);
  cr_assert_eq(d, 1e-5);
  cr_assert_eq(core_config_elem_bool(c, "model.layers", 0, "bias", 1, &b), CORE_OK);
  cr_assert_eq(b, 1);
  cr_assert_eq(core_config_elem_int(c, "model.layers", 9, "out", 3, &i), CORE_OK);
  cr_assert_eq(i, 3);
  cr_assert_eq(core_config_elem_int(c, "model.layers", -1, "out", 4, &i), CORE_OK);
  cr_assert_eq(i, 4);
  cr_assert_eq(core_config_elem_string(c, "model.blocks", 0, "type", "x", &s), CORE_OK);
  cr_assert_str_eq(s, "x");
  /* an array element has no default: asking past the end is an error naming the array */
  cr_assert_eq(core_config_array_int(c, "pipeline.boundaries", 3, &i), CORE_EINPUT);
  assert_msg("pipeline.boundaries.[3] is missing (x.cfg:9)");
  cr_assert_eq(core_config_array_int(c, "pipeline.boundaries", -1, &i), CORE_EINPUT);
  cr_assert_eq(core_config_array_int(c, "pipeline.nothing", 0, &i), CORE_EINPUT);
  core_config_free(c);
}

Test(config, getters_of_the_wrong_type_name_key_and_line) {
  core_config *c = load(text);
  int64_t i;
  double d;
  const char *s;
  int b;
  cr_assert_eq(core_config_get_int(c, "train.name", 0, &i), CORE_EINPUT);
  assert_msg("train.name must be an integer (x.cfg:4)");
  cr_assert_eq(core_config_get_int(c, "train.fast", 0, &i), CORE_EINPUT);
  assert_msg("train.fast must be an integer (x.cfg:5)");
  cr_assert_eq(core_config_get_float(c, "train.name", 0, &d), CORE_EINPUT);
  assert_msg("train.name must be a number (x.cfg:4)");
  cr_assert_eq(core_config_get_bool(c, "train.steps", 0, &b), CORE_EINPUT);
  assert_msg("train.steps must be true or false (x.cfg:2)");
  cr_assert_eq(core_config_get_string(c, "train.steps", "", &s), CORE_EINPUT);
  assert_msg("train.steps must be a string (x.cfg:2)");
  cr_assert_eq(core_config_get_int(c, "train", 0, &i), CORE_EINPUT);
  assert_msg("train must be an integer (x.cfg:1)");
  cr_assert_eq(core_config_elem_int(c, "model.layers", 1, "type", 0, &i), CORE_EINPUT);
  assert_msg("model.layers.[1].type must be an integer (x.cfg:8)");
  cr_assert_eq(core_config_get_int_range(c, "train.steps", 1, 1, 10, &i), CORE_EINPUT);
  assert_msg("train.steps = 20 must be in [1, 10] (x.cfg:2)");
  core_config_free(c);
  /* an element that is not a group, for a per-layer getter */
  c = load("model = { layers = ( 5 ); };\n");
  cr_assert_eq(core_config_elem_int(c, "model.layers", 0, "out", 0, &i), CORE_EINPUT);
  assert_msg("model.layers.[0] must be a group");
  cr_assert_eq(core_config_array_int(c, "model.layers", 0, &i), CORE_OK);
  cr_assert_eq(i, 5);
  core_config_free(c);
}

Test(config, where_names_file_line_and_elements) {
  core_config *c = load(text);
  char w[64];
  cr_assert_eq(core_config_where(c, "train.lr", -1, w, sizeof w), CORE_OK);
  cr_assert_str_eq(w, "x.cfg:3");
  cr_assert_eq(core_config_where(c, "model.layers", 1, w, sizeof w), CORE_OK);
  cr_assert_str_eq(w, "x.cfg:8");
  cr_assert_eq(core_config_where(c, "model.layers.[0].out", -1, w, sizeof w), CORE_OK);
  cr_assert_str_eq(w, "x.cfg:7");
  /* missing: the nearest place, and the error message is left alone */
  core_error_set(CORE_EINPUT, "earlier error");
  cr_assert_eq(core_config_where(c, "model.layers", 5, w, sizeof w), CORE_EINPUT);
  cr_assert_str_eq(w, "x.cfg:7");
  cr_assert_eq(core_config_where(c, "no.such.key", -1, w, sizeof w), CORE_EINPUT);
  cr_assert_str_eq(w, "x.cfg");
  cr_assert_str_eq(core_error_msg(), "earlier error");
  char tiny[4];
  core_config_where(c, "train.lr", -1, tiny, sizeof tiny); /* truncated, terminated */
  cr_assert_str_eq(tiny, "x.c");
  core_config_free(c);
}

/* A member of a list element: its own line, its --set when one gave it (the element keeps its
 * file line), the element's place when the member is missing. */
Test(config, elem_where_names_the_member_or_its_override) {
  core_config *c = load(text);
  char w[64];
  cr_assert_eq(core_config_elem_where(c, "model.layers", 0, "out", w, sizeof w), CORE_OK);
  cr_assert_str_eq(w, "x.cfg:7");
  cr_assert_eq(core_config_set(c, "model.layers[1].out=8"), CORE_OK, "%s", core_error_msg());
  cr_assert_eq(core_config_set(c, "model.layers.[0].out=16"), CORE_OK, "%s", core_error_msg());
  cr_assert_eq(core_config_elem_where(c, "model.layers", 1, "out", w, sizeof w), CORE_OK);
  cr_assert_str_eq(w, "--set model.layers.[1].out");
  cr_assert_eq(core_config_elem_where(c, "model.layers", 0, "out", w, sizeof w), CORE_OK);
  cr_assert_str_eq(w, "--set model.layers.[0].out");
  core_config_where(c, "model.layers", 1, w, sizeof w); /* what the layers used to ask */
  cr_assert_str_eq(w, "x.cfg:8");
  cr_assert_eq(core_config_elem_where(c, "model.layers", 1, "type", w, sizeof w), CORE_OK);
  cr_assert_str_eq(w, "x.cfg:8");
  cr_assert_eq(core_config_elem_where(c, "model.layers", 1, "eps", w, sizeof w), CORE_EINPUT);
  cr_assert_str_eq(w, "x.cfg:8");
  cr_assert_eq(core_config_elem_where(c, "model.layers", 7, "out", w, sizeof w), CORE_EINPUT);
  cr_assert_str_eq(w, "x.cfg:7");
  core_config_free(c);
}

Test(config, unknown_keys_and_wrong_types) {
  core_config *c = load("train = {\n  steps = 3;\n  stepz = 4;\n};\n");
  cr_assert_eq(core_config_check(c, schema, NS), CORE_EINPUT);
  assert_msg("unknown key 'train.stepz' (x.cfg:3); did you mean 'train.steps'?");
  core_config_free(c);
  c = load("zzzz = 1;\n");
  cr_assert_eq(core_config_check(c, schema, NS), CORE_EINPUT);
  cr_assert_str_eq(core_error_msg(), "unknown key 'zzzz' (x.cfg:1)");
  core_config_free(c);
  c = load("train = {\n steps = \"many\"; };\n");
  cr_assert_eq(core_config_check(c, schema, NS), CORE_EINPUT);
  assert_msg("train.steps must be an integer (x.cfg:2)");
  core_config_free(c);
  c = load("train = { steps = 2.5; };\n");
  cr_assert_eq(core_config_check(c, schema, NS), CORE_EINPUT);
  assert_msg("train.steps must be an integer (x.cfg:1)");
  core_config_free(c);
  c = load("train = 3;\n");
  cr_assert_eq(core_config_check(c, schema, NS), CORE_EINPUT);
  assert_msg("train must be a group");
  core_config_free(c);
  c = load("pipeline = { boundaries = 3; };\n");
  cr_assert_eq(core_config_check(c, schema, NS), CORE_EINPUT);
  assert_msg("pipeline.boundaries must be a list");
  core_config_free(c);
  /* the float key takes an integer; an int64 is an integer */
  c = load("train = { lr = 2; steps = 5000000000L; };\n");
  cr_assert_eq(core_config_check(c, schema, NS), CORE_OK, "%s", core_error_msg());
  core_config_free(c);
}

Test(config, lists_of_groups_and_arrays_in_the_schema) {
  core_config *c = load("model = {\n layers = (\n  { type = \"linear\"; out = 3; },\n  { type = "
                        "\"gelu\"; width = 3; } ); };\n");
  cr_assert_eq(core_config_check(c, schema, NS), CORE_EINPUT);
  assert_msg("unknown key 'model.layers.[1].width' (x.cfg:4)");
  core_config_free(c);
  c = load("model = { layers = ( { type = 1; } ); };\n");
  cr_assert_eq(core_config_check(c, schema, NS), CORE_EINPUT);
  assert_msg("model.layers.[0].type must be a string (x.cfg:1)");
  core_config_free(c);
  c = load("model = { layers = ( \"linear\" ); };\n");
  cr_assert_eq(core_config_check(c, schema, NS), CORE_EINPUT);
  assert_msg("model.layers.[0] must be a group");
  core_config_free(c);
  c = load("pipeline = { boundaries = [0.5, 1.5]; };\n");
  cr_assert_eq(core_config_check(c, schema, NS), CORE_EINPUT);
  assert_msg("pipeline.boundaries.[0] must be an integer");
  core_config_free(c);
  c = load("pipeline = { boundaries = ( 1, \"two\" ); };\n");
  cr_assert_eq(core_config_check(c, schema, NS), CORE_EINPUT);
  assert_msg("pipeline.boundaries.[1] must be an integer");
  core_config_free(c);
  /* empty lists are fine; so are groups that the schema only implies */
  c = load("model = { layers = (); };\npipeline = { boundaries = []; };\n");
  cr_assert_eq(core_config_check(c, schema, NS), CORE_OK, "%s", core_error_msg());
  core_config_free(c);
  c = load(text);
  cr_assert_eq(core_config_check(c, lean, NL), CORE_OK, "%s", core_error_msg());
  core_config_free(c);
  c = load("model = { layers = ( 1 ); };\n");
  cr_assert_eq(core_config_check(c, lean, NL), CORE_EINPUT);
  assert_msg("model.layers.[0] must be a group");
  core_config_free(c);
}

Test(config, parse_errors_name_file_and_line) {
  core_config *c = NULL;
  cr_assert_eq(core_config_load_string(&c, "a = 1;\nb = ;\n", "bad.cfg"), CORE_EINPUT);
  assert_msg("bad.cfg:2: syntax error");
  cr_assert_null(c);
  cr_assert_eq(core_config_load_string(&c, "a = 1;\na = 2;\n", "dup.cfg"), CORE_EINPUT);
  assert_msg("dup.cfg:2:");
  /* a file with its error on line 12 */
  char path[32], want[64];
  char body[256] = "";
  for (int l = 1; l < 12; l++)
    snprintf(body + strlen(body), sizeof body - strlen(body), "k%d = %d;\n", l, l);
  strcat(body, "broken = { ;\n");
  temp_file(path, body);
  cr_assert_eq(core_config_load(&c, path), CORE_EINPUT);
  snprintf(want, sizeof want, "%s:12: ", path);
  assert_msg(want);
  unlink(path);
  cr_assert_eq(core_config_load(&c, "/nonexistent/x.cfg"), CORE_EINPUT);
  assert_msg("/nonexistent/x.cfg");
  cr_assert_eq(core_config_load(&c, "/tmp"), CORE_EINPUT); /* a directory */
  assert_msg("/tmp");
  cr_assert_null(c);
}

/* @include: the included file's numbers are checked as the top-level file's are (libconfig
 * would wrap 4294967297 to 1 without a word), a directory or a missing file is an error naming the
 * directive's line (libconfig's scanner ended the process on a directory, printing only "input in
 * flex scanner failed"), and one in a comment or a string is not a directive. */
Test(config, includes_are_checked_as_the_file_is) {
  char inc[32], body[256], want[128];
  core_config *c = NULL;
  temp_file(inc, "n = 4294967297;\n");
  snprintf(body, sizeof body, "a = 1;\n@include \"%s\"\n", inc);
  cr_assert_eq(core_config_load_string(&c, body, "top.cfg"), CORE_EINPUT);
  snprintf(want, sizeof want, "%s:1: integer 4294967297 does not fit in 32 bits", inc);
  assert_msg(want);
  cr_assert_eq(core_config_load_string(&c, "a = 1;\n\n@include \"/tmp\"\n", "top.cfg"), CORE_EINPUT);
  assert_msg("top.cfg:3: @include \"/tmp\" is not a regular file");
  cr_assert_eq(core_config_load_string(&c, "@include \"/nonexistent/x.cfg\"\n", "top.cfg"), CORE_EINPUT);
  assert_msg("top.cfg:1: @include \"/nonexistent/x.cfg\": No such file or directory");
  cr_assert_null(c);
  FILE *f = fopen(inc, "w");
  fputs("n = 7;\n", f);
  fclose(f);
  snprintf(body, sizeof body, "# @include \"/tmp\"\ns = \"@include \\\"/tmp\\\"\"; /* @include \"/tmp\" */\n@include \"%s\"\n", inc);
  cr_assert_eq(core_config_load_string(&c, body, "top.cfg"), CORE_OK, "%s", core_error_msg());
  int64_t n = 0;
  cr_assert_eq(core_config_get_int(c, "n", 0, &n), CORE_OK);
  cr_assert_eq(n, 7);
  core_config_free(c);
  unlink(inc);
}

Test(config, load_from_a_file) {
  char path[32], want[64];
  temp_file(path, "# a comment\ntrain = {\n  steps = 12;\n};\n");
  core_config *c = NULL;
  cr_assert_eq(core_config_load(&c, path), CORE_OK, "%s", core_error_msg());
  int64_t i;
  cr_assert_eq(core_config_get_int(c, "train.steps", 0, &i), CORE_OK);
  cr_assert_eq(i, 12);
  cr_assert_str_eq(core_config_name(c), path);
  char w[64];
  core_config_where(c, "train.steps", -1, w, sizeof w);
  snprintf(want, sizeof want, "%s:3", path);
  cr_assert_str_eq(w, want);
  cr_assert_eq(core_config_get_string(c, "train.steps", "", NULL), CORE_EINPUT);
  assert_msg(want);
  core_config_free(c);
  unlink(path);
}

/* A UTF-8 byte order mark, as some Windows editors save: skipped, lines counted as without it
 * (libconfig alone reports "syntax error" on line 1). */
Test(config, byte_order_mark_is_skipped) {
  core_config *c = NULL;
  cr_assert_eq(core_config_load_string(&c, "\xef\xbb\xbftrain = {\n  steps = 12;\n};\n", "bom.cfg"), CORE_OK, "%s",
               core_error_msg());
  int64_t i;
  cr_assert_eq(core_config_get_int(c, "train.steps", 0, &i), CORE_OK);
  cr_assert_eq(i, 12);
  char w[64];
  core_config_where(c, "train.steps", -1, w, sizeof w);
  cr_assert_str_eq(w, "bom.cfg:2");
  core_config_free(c);
  c = NULL;
  cr_assert_eq(core_config_load_string(&c, "\xef\xbb\xbf" "a = 1;\nb = 99999999999;\n", "bom.cfg"), CORE_EINPUT);
  assert_msg("bom.cfg:2:");
  cr_assert_null(c);
}

/* libconfig 1.5 wraps these silently (99999999999 would load as 1215752191) */
Test(config, numbers_that_do_not_fit_are_errors) {
  static const struct {
    const char *text, *msg;
  } bad[] = {
      {"a = 1;\nx = 99999999999;\n",
       "x.cfg:2: integer 99999999999 does not fit in 32 bits (write 99999999999L"},
      {"x = 2147483648;", "x.cfg:1: integer 2147483648 does not fit in 32 bits"},
      {"x = -2147483649;", "integer -2147483649 does not fit in 32 bits"},
      {"x = 0x80000000;", "integer 0x80000000 does not fit"},
      {"x = 99999999999999999999L;", "integer 99999999999999999999L does not fit in 64 bits"},
      {"x = 0xFFFFFFFFFFFFFFFFL;", "does not fit in 64 bits"},
      {"x = 1e999;", "x.cfg:1: number 1e999 is out of range"},
      {"x = -1e999;", "number -1e999 is out of range"},
      {"x = [1, 2, 3000000000];", "integer 3000000000"},
      {"l = ( { out = 1; }, {\n out = 4294967296; } );", "x.cfg:2: integer 4294967296"},
      {"x = 1234567890123456789012345678901234567890123456789012345678901234567890;",
       "does not fit in 32 bits"},
  };
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    core_config *c = NULL;
    cr_assert_eq(core_config_load_string(&c, bad[k].text, "x.cfg"), CORE_EINPUT, "%s loaded",
                 bad[k].text);
    cr_assert_null(c);
    assert_msg(bad[k].msg);
  }
  /* the limits themselves, 64-bit values with L, and digits in strings, names and comments */
  core_config *c = load("a = 2147483647; b = -2147483648; c = 0x7FFFFFFF; d = 99999999999L;\n"
                        "e = -9223372036854775808L; f = 1e-400; g = 1.5e300; h = .5;\n"
                        "s = \"99999999999 \\\" 99999999999\"; n-99999999999 = 1; # 99999999999\n"
                        "/* 99999999999\n 99999999999 */ // 99999999999\nlast = 3;\n");
  int64_t i;
  double d;
  cr_assert_eq(core_config_get_int(c, "a", 0, &i), CORE_OK);
  cr_assert_eq(i, 2147483647);
  cr_assert_eq(core_config_get_int(c, "b", 0, &i), CORE_OK);
  cr_assert_eq(i, INT32_MIN);
  cr_assert_eq(core_config_get_int(c, "d", 0, &i), CORE_OK);
  cr_assert_eq(i, 99999999999LL);
  cr_assert_eq(core_config_get_int(c, "e", 0, &i), CORE_OK);
  cr_assert_eq(i, INT64_MIN);
  cr_assert_eq(core_config_get_float(c, "g", 0, &d), CORE_OK);
  cr_assert_eq(d, 1.5e300);
  char w[32];
  core_config_where(c, "last", -1, w, sizeof w);
  cr_assert_str_eq(w, "x.cfg:6"); /* lines counted through strings and comments */
  core_config_free(c);
}

Test(config, overrides_of_existing_keys) {
  core_config *c = load(text);
  int64_t i;
  double d;
  const char *s;
  int b;
  cr_assert_eq(core_config_set(c, "train.steps=7"), CORE_OK, "%s", core_error_msg());
  cr_assert_eq(core_config_set(c, "train.lr=0.5"), CORE_OK, "%s",
               core_error_msg()); /* lr = 1 was an int */
  cr_assert_eq(core_config_set(c, "train.name=\"big\""), CORE_OK);
  cr_assert_eq(core_config_set(c, "train.fast=false"), CORE_OK);
  core_config_get_int(c, "train.steps", 0, &i);
  core_config_get_float(c, "train.lr", 0, &d);
  core_config_get_string(c, "train.name", "", &s);
  core_config_get_bool(c, "train.fast", 1, &b);
  cr_assert(i == 7 && d == 0.5 && !strcmp(s, "big") && b == 0);
  cr_assert_eq(core_config_set(c, "train.name=42"), CORE_OK); /* a string key keeps its type */
  core_config_get_string(c, "train.name", "", &s);
  cr_assert_str_eq(s, "42");
  cr_assert_eq(core_config_set(c, "train.steps=010"), CORE_OK); /* decimal, not octal */
  core_config_get_int(c, "train.steps", 0, &i);
  cr_assert_eq(i, 10);
  cr_assert_eq(core_config_set(c, "train.steps=-3"),
               CORE_OK); /* negative: for the getters' ranges */
  cr_assert_eq(core_config_get_int_range(c, "train.steps", 1, 1, 100, &i), CORE_EINPUT);
  assert_msg("train.steps = -3 must be in [1, 100] (--set train.steps)");
  cr_assert_eq(core_config_set(c, "train.fast=TRUE"), CORE_OK);
  cr_assert_eq(core_config_check(c, schema, NS), CORE_OK, "%s", core_error_msg());
  /* where: the override, not the file line the value still sits on */
  char w[64];
  core_config_where(c, "train.steps", -1, w, sizeof w);
  cr_assert_str_eq(w, "--set train.steps");
  core_config_where(c, "train.lr", -1, w, sizeof w);
  cr_assert_str_eq(w, "--set train.lr");
  core_config_where(c, "train", -1, w, sizeof w);
  cr_assert_str_eq(w, "x.cfg:1");
  cr_assert_eq(core_config_get_string(c, "train.steps", "", &s), CORE_EINPUT);
  assert_msg("train.steps must be a string (--set train.steps)");
  core_config_free(c);
}

Test(config, overrides_with_bad_values_are_errors) {
  core_config *c = load(text);
  cr_assert_eq(core_config_set(c, "train.lr=0.5"), CORE_OK); /* now a float key */
  static const struct {
    const char *set, *msg;
  } bad[] = {
      {"train.steps=abc", "--set train.steps=abc: expected an integer"},
      {"train.steps=", "expected an integer"},
      {"train.steps=1.5x", "expected an integer"},
      {"train.steps=99999999999",
       "--set train.steps=99999999999: the integer does not fit in 32 bits"},
      {"train.steps=99999999999999999999999", "the integer does not fit in 64 bits"},
      {"train.new=99999999999999999999999",
       "--set train.new=99999999999999999999999: the integer does not fit in 64 bits"},
      {"train.fast=0x", "expected true or false"},
      {"train.steps= 5", "expected an integer"},
      {"train.fast=maybe", "--set train.fast=maybe: expected true or false"},
      {"train.fast=1", "expected true or false"},
      {"train.lr=nan", "--set train.lr=nan: expected a number"},
      {"train.lr=inf", "expected a number"},
      {"train.lr=1e999", "expected a number"},
      {"train.lr=abc", "expected a number"},
      {"train=3", "--set train: this key is a group; give it as { ... }"},
      {"model.layers=3", "this key is a list"},
      {"train.steps.x=3", "'x' is inside something that is not a group"},
      {"noequals", "expected key=value"},
      {"=3", "bad key"},
      {"a..b=3", "is not a valid key name"},
      {"a.=3", "is not a valid key name"},
      {"1a=3", "'1a' is not a valid key name"},
      {"a b=3", "unexpected ' '"},
      {"model.layers.[9].out=3", "the list has no element [9]"},
      {"model.layers.[x].out=3", "bad list index"},
      {"model.layers.[-1].out=3", "bad list index"},
      {"model.layers.[99999999999].out=3", "bad list index"},
      {"model.layers.[0=3", "bad list index"},
      {"train.[0]=3", "[0] indexes something that is not a list"},
      {"model.layers.[0]=3", "a whole list element cannot be replaced; set its members"},
      {"model.layers.[0]={ out = 3; }", "a whole list element cannot be replaced"},
      {"pipeline.boundaries.[0]=0.5", "the list holds integers"},
      {"train.steps=[1, 2]", "expected a single value, not a list or group"},
      {"pipeline.boundaries=[1, 2", "--set pipeline.boundaries: syntax error in the value"},
      {"pipeline.boundaries=[1, 99999999999]",
       "--set pipeline.boundaries: integer 99999999999 does not fit"},
  };
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    cr_assert_eq(core_config_set(c, bad[k].set), CORE_EINPUT, "--set %s succeeded", bad[k].set);
    assert_msg(bad[k].msg);
  }
  /* nothing changed, nothing half-created, nothing recorded as an override */
  int64_t i;
  core_config_get_int(c, "train.steps", 0, &i);
  cr_assert_eq(i, 20);
  cr_assert_eq(core_config_set(c, "fresh.list.[0]=3"), CORE_EINPUT);
  assert_msg("--set fresh.list.[0]: 'fresh' does not exist (--set creates groups, not lists)");
  cr_assert_eq(core_config_set(c, "fresh.ok.9x=3"), CORE_EINPUT);
  cr_assert(!core_config_has(c, "fresh"));
  cr_assert_eq(core_config_check(c, schema, NS), CORE_OK, "%s", core_error_msg());
  char w[64];
  core_config_where(c, "train.steps", -1, w, sizeof w);
  cr_assert_str_eq(w, "x.cfg:2");
  char longkey[600];
  memset(longkey, 'a', sizeof longkey - 3);
  strcpy(longkey + sizeof longkey - 3, "=1");
  cr_assert_eq(core_config_set(c, longkey), CORE_EINPUT);
  core_config_free(c);
}

Test(config, overrides_create_keys_with_inferred_types) {
  core_config *c = load(text);
  int64_t i;
  double d;
  const char *s;
  int b;
  cr_assert_eq(core_config_set(c, "checkpoint.dir=out/ck"), CORE_OK, "%s", core_error_msg());
  cr_assert_eq(core_config_set(c, "checkpoint.every.steps=10"), CORE_OK);
  cr_assert_eq(core_config_set(c, "checkpoint.big=99999999999"), CORE_OK);
  cr_assert_eq(core_config_set(c, "checkpoint.frac=2.5e-3"), CORE_OK);
  cr_assert_eq(core_config_set(c, "checkpoint.on=true"), CORE_OK);
  cr_assert_eq(core_config_set(c, "checkpoint.tag=\"123\""), CORE_OK);
  cr_assert_eq(core_config_set(c, "checkpoint.word=nan"), CORE_OK);
  cr_assert_eq(core_config_get_string(c, "checkpoint.dir", "", &s), CORE_OK);
  cr_assert_str_eq(s, "out/ck");
  cr_assert_eq(core_config_get_int(c, "checkpoint.every.steps", 0, &i), CORE_OK);
  cr_assert_eq(i, 10);
  cr_assert_eq(core_config_get_int(c, "checkpoint.big", 0, &i), CORE_OK);
  cr_assert_eq(i, 99999999999LL);
  cr_assert_eq(core_config_get_float(c, "checkpoint.frac", 0, &d), CORE_OK);
  cr_assert_eq(d, 2.5e-3);
  cr_assert_eq(core_config_get_bool(c, "checkpoint.on", 0, &b), CORE_OK);
  cr_assert_eq(b, 1);
  cr_assert_eq(core_config_get_string(c, "checkpoint.tag", "", &s), CORE_OK);
  cr_assert_str_eq(s, "123");
  cr_assert_eq(core_config_get_string(c, "checkpoint.word", "", &s), CORE_OK);
  cr_assert_str_eq(s, "nan");
  char w[64];
  core_config_where(c, "checkpoint.every.steps", -1, w, sizeof w);
  cr_assert_str_eq(w, "--set checkpoint.every.steps");
  core_config_where(c, "checkpoint.every", -1, w, sizeof w); /* a group --set created */
  cr_assert_str_eq(w, "--set checkpoint.every.steps");
  /* the schema names the override that brought an unknown key */
  cr_assert_eq(core_config_check(c, schema, NS), CORE_EINPUT);
  assert_msg("unknown key 'checkpoint' (--set checkpoint.");
  core_config_free(c);
  c = load(text);
  cr_assert_eq(core_config_set(c, "train.extra=-5"), CORE_OK);
  cr_assert_eq(core_config_get_int(c, "train.extra", 0, &i), CORE_OK);
  cr_assert_eq(i, -5);
  cr_assert_eq(core_config_check(c, schema, NS), CORE_EINPUT);
  assert_msg("unknown key 'train.extra' (--set train.extra)");
  core_config_free(c);
  /* a string key given digits, created by --set: the check says how to quote it */
  c = load(text);
  cr_assert_eq(core_config_set(c, "data.path=123"), CORE_OK);
  cr_assert_eq(core_config_check(c, lean, NL), CORE_EINPUT);
  assert_msg("data.path must be a string (--set data.path); quote it");
  core_config_free(c);
  c = load(text);
  cr_assert_eq(core_config_set(c, "data.path=\"123\""), CORE_OK);
  cr_assert_eq(core_config_check(c, lean, NL), CORE_OK, "%s", core_error_msg());
  core_config_free(c);
}

Test(config, overrides_of_list_elements_and_whole_lists) {
  core_config *c = load(text);
  int64_t i;
  const char *s;
  cr_assert_eq(core_config_set(c, "model.layers.[0].out=128"), CORE_OK, "%s", core_error_msg());
  cr_assert_eq(core_config_set(c, "model.layers[1].type=relu"), CORE_OK, "%s", core_error_msg());
  cr_assert_eq(core_config_set(c, "model.layers[1].out=32"), CORE_OK, "%s", core_error_msg());
  cr_assert_eq(core_config_set(c, "pipeline.boundaries.[1]=5"), CORE_OK, "%s", core_error_msg());
  core_config_elem_int(c, "model.layers", 0, "out", 0, &i);
  cr_assert_eq(i, 128);
  core_config_elem_string(c, "model.layers", 1, "type", "", &s);
  cr_assert_str_eq(s, "relu");
  core_config_elem_int(c, "model.layers", 1, "out", 0, &i);
  cr_assert_eq(i, 32);
  core_config_array_int(c, "pipeline.boundaries", 1, &i);
  cr_assert_eq(i, 5);
  /* a number into a list of integers: libconfig's lists hold one type (it said "expected an
   * integer", as if the key took integers only) */
  cr_assert_eq(core_config_set(c, "pipeline.boundaries.[1]=0.5"), CORE_EINPUT);
  assert_msg("--set pipeline.boundaries.[1]=0.5: the list holds integers, and a libconfig list holds one type: give "
             "the whole list (--set KEY=[...]) to make it numbers");
  cr_assert_eq(core_config_check(c, schema, NS), CORE_OK, "%s", core_error_msg());
  char w[64];
  core_config_where(c, "model.layers.[1].type", -1, w, sizeof w);
  cr_assert_str_eq(w, "--set model.layers.[1].type");
  core_config_where(c, "model.layers", 0, w, sizeof w);
  cr_assert_str_eq(w, "x.cfg:7");
  cr_assert_eq(core_config_elem_string(c, "model.layers", 0, "out", "", &s), CORE_EINPUT);
  assert_msg("model.layers.[0].out must be a string (--set model.layers.[0].out)");
  /* a whole list, array or group from the command line */
  cr_assert_eq(core_config_set(c, "pipeline.boundaries=[0, 4, 8, 12]"), CORE_OK, "%s",
               core_error_msg());
  cr_assert_eq(core_config_list_len(c, "pipeline.boundaries"), 4);
  core_config_array_int(c, "pipeline.boundaries", 3, &i);
  cr_assert_eq(i, 12);
  cr_assert_eq(core_config_set(c, "model.layers=({ type = \"linear\"; out = 8; })"), CORE_OK, "%s",
               core_error_msg());
  cr_assert_eq(core_config_list_len(c, "model.layers"), 1);
  core_config_elem_int(c, "model.layers", 0, "out", 0, &i);
  cr_assert_eq(i, 8);
  cr_assert_eq(core_config_set(c, "zero={ stage = 2; }"), CORE_OK, "%s", core_error_msg());
  core_config_get_int(c, "zero.stage", 0, &i);
  cr_assert_eq(i, 2);
  core_config_where(c, "model.layers.[0].out", -1, w, sizeof w);
  cr_assert_str_eq(w, "--set model.layers");
  core_config_where(c, "pipeline.boundaries", 2, w, sizeof w);
  cr_assert_str_eq(w, "--set pipeline.boundaries");
  cr_assert_eq(core_config_check(c, schema, NS), CORE_EINPUT);
  assert_msg("unknown key 'zero' (--set zero)");
  core_config_free(c);
}

Test(config, write_keeps_the_effective_config) {
  core_config *c = load(text);
  cr_assert_eq(core_config_set(c, "train.steps=99"), CORE_OK);
  cr_assert_eq(core_config_set(c, "train.big=99999999999"), CORE_OK);
  cr_assert_eq(core_config_set(c, "checkpoint.dir=\"a b\""), CORE_OK);
  char path[32];
  temp_file(path, "");
  FILE *f = fopen(path, "w");
  cr_assert_eq(core_config_write(c, f), CORE_OK);
  fclose(f);
  core_config_free(c);
  cr_assert_eq(core_config_load(&c, path), CORE_OK, "%s", core_error_msg());
  int64_t i;
  const char *s;
  core_config_get_int(c, "train.steps", 0, &i);
  cr_assert_eq(i, 99);
  core_config_get_int(c, "train.big", 0, &i); /* written with L, so it reloads */
  cr_assert_eq(i, 99999999999LL);
  core_config_get_string(c, "checkpoint.dir", "", &s);
  cr_assert_str_eq(s, "a b");
  cr_assert_eq(core_config_elem_int(c, "model.layers", 0, "out", 0, &i), CORE_OK);
  cr_assert_eq(i, 64);
  core_config_free(c);
  unlink(path);
}

/* Garbage from the command line or a file: errors, never crashes (run under ASan/UBSan too). */
Test(config, garbage_never_crashes) {
  static const char *files[] = {"",
                                "=",
                                ";;;",
                                "a = ",
                                "a = \"unterminated",
                                "a = (((((",
                                "a = [1, \"x\"];",
                                "a = { b = { c = { d = 1; }; }; }; a = 2;",
                                "\x01\x02\xff",
                                "a = 1e",
                                "a = 0x;",
                                "@include \"/nonexistent/file.cfg\"\n",
                                "a = -;",
                                "/* open comment"};
  for (size_t k = 0; k < sizeof files / sizeof files[0]; k++) {
    core_config *c = NULL;
    if (core_config_load_string(&c, files[k], "g.cfg") == CORE_OK) {
      core_config_check(c, schema, NS);
      core_config_free(c);
    } else {
      cr_assert(strlen(core_error_msg()) > 0);
    }
  }
  core_config *c = load(text);
  static const char *sets[] = {"=",
                               "==",
                               "a=b=c",
                               ".=1",
                               "[=1",
                               "[]=1",
                               "a[=1",
                               "a]=1",
                               "a.[0]=1",
                               "train.steps=--1",
                               "train.steps=+",
                               "train.steps=0x",
                               "train.steps=-0x5",
                               "train.lr=-",
                               "train.lr=.",
                               "train.lr=e5",
                               "x=[",
                               "x=(",
                               "x={",
                               "x={ a = ; }",
                               "x=[1,[2]]",
                               "x=\"",
                               "x=\"\"",
                               "*=1",
                               "a-b=1",
                               "model.layers.[0].[0]=1"};
  for (size_t k = 0; k < sizeof sets / sizeof sets[0]; k++)
    core_config_set(c, sets[k]);
  core_config_check(c, schema, NS);
  char w[16];
  core_config_where(c, "", -1, w, sizeof w);
  core_config_where(c, "model.layers", 1 << 30, w, sizeof w);
  core_config_free(c);
  core_config_free(NULL);
}

/* A range includes both ends. */
Test(config, int_range_includes_both_ends) {
  core_config *c = load(text); /* train.steps = 20 */
  int64_t i;
  cr_assert_eq(core_config_get_int_range(c, "train.steps", 1, 20, 30, &i), CORE_OK, "%s", core_error_msg());
  cr_assert_eq(core_config_get_int_range(c, "train.steps", 1, 10, 20, &i), CORE_OK, "%s", core_error_msg());
  cr_assert_eq(i, 20);
  cr_assert_eq(core_config_get_int_range(c, "train.steps", 1, 21, 30, &i), CORE_EINPUT);
  assert_msg("train.steps = 20 must be in [21, 30] (x.cfg:2)");
  cr_assert_eq(core_config_get_int_range(c, "train.steps", 1, 10, 19, &i), CORE_EINPUT);
  core_config_free(c);
}

/* A number key takes a 64-bit integer literal, in the schema and in the getter. */
Test(config, float_keys_take_64_bit_integers) {
  core_config *c = load("train = { lr = 5000000000L; };\n");
  cr_assert_eq(core_config_check(c, lean, NL), CORE_OK, "%s", core_error_msg());
  double d;
  cr_assert_eq(core_config_get_float(c, "train.lr", 0, &d), CORE_OK, "%s", core_error_msg());
  cr_assert_eq(d, 5e9);
  core_config_free(c);
}

/* The "quote it" hint is for values --set guessed a type for; a file's value gets none. A key
 * whose name starts another key's ("train.step" of "train.steps") is unknown, not a group. */
Test(config, hints_only_where_they_apply) {
  core_config *c = load("data = { path = 123; };\n");
  cr_assert_eq(core_config_check(c, lean, NL), CORE_EINPUT);
  cr_assert_str_eq(core_error_msg(), "data.path must be a string (x.cfg:1)");
  core_config_free(c);
  c = load("train = { step = 3; };\n");
  cr_assert_eq(core_config_check(c, schema, NS), CORE_EINPUT);
  assert_msg("unknown key 'train.step' (x.cfg:1); did you mean 'train.steps'?");
  core_config_free(c);
  /* one edit in a four-letter key is not a typo: fp16 is not bf16 */
  const core_config_key mixed[] = {{"bf16", CORE_CFG_GROUP}, {"bf16.enabled", CORE_CFG_BOOL}};
  c = load("fp16 = { enabled = true; };\n");
  cr_assert_eq(core_config_check(c, mixed, 2), CORE_EINPUT);
  cr_assert_str_eq(core_error_msg(), "unknown key 'fp16' (x.cfg:1)");
  core_config_free(c);
}

/* A schema that allows lists in lists to any depth still stops the walk at MAX_DEPTH (64). */
Test(config, schema_walk_depth_is_limited) {
  enum { LEVELS = 70 };
  static char paths[LEVELS + 1][4 * LEVELS + 8];
  core_config_key keys[LEVELS + 1];
  snprintf(paths[0], sizeof paths[0], "x");
  keys[0] = (core_config_key){paths[0], CORE_CFG_LIST};
  for (int k = 1; k <= LEVELS; k++) {
    size_t len = strlen(paths[k - 1]); /* paths[k - 1] + ".[]" (4 chars a level: it fits) */
    memcpy(paths[k], paths[k - 1], len);
    memcpy(paths[k] + len, ".[]", 4);
    keys[k] = (core_config_key){paths[k], k == LEVELS ? CORE_CFG_INT : CORE_CFG_LIST};
  }
  char cfg[4 * LEVELS + 16];
  size_t n = (size_t)snprintf(cfg, sizeof cfg, "x = ");
  for (int k = 0; k < LEVELS; k++) cfg[n++] = '(';
  cfg[n++] = '1';
  for (int k = 0; k < LEVELS; k++) cfg[n++] = ')';
  snprintf(cfg + n, sizeof cfg - n, ";\n");
  core_config *c = load(cfg);
  cr_assert_eq(core_config_check(c, keys, LEVELS + 1), CORE_EINPUT, "a config nested %d deep passed the check", LEVELS);
  assert_msg("is nested too deep");
  core_config_free(c);
}
