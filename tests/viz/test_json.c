/* core/json: the strict reader on good and bad input (errors carry name:line:col, nothing
 * crashes on truncated, mutated or deeply nested input), typed accessors, and the writers. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/json.h"

static core_json *parse_ok(const char *text) {
  core_json *j = NULL;
  core_error_clear();
  int rc = core_json_parse(text, strlen(text), "x.json", &j);
  cr_assert_eq(rc, CORE_OK, "rejected %s: %s", text, core_error_msg());
  cr_assert_not_null(j);
  return j;
}

/* Parses text[0..n) from an exact-size heap copy (so reading past the end trips the sanitizer)
 * and expects CORE_EINPUT with a message containing `needle`. */
static void bad_n(const char *text, size_t n, const char *needle) {
  char *copy = malloc(n ? n : 1);
  memcpy(copy, text, n);
  core_json *j = (core_json *)1;
  core_error_clear();
  int rc = core_json_parse(copy, n, "x.json", &j);
  free(copy);
  cr_assert_eq(rc, CORE_EINPUT, "accepted '%.*s'", (int)n, text);
  cr_assert_null(j, "*out not cleared on failure");
  cr_assert(strstr(core_error_msg(), needle), "'%.*s': message '%s' lacks '%s'", (int)n, text,
            core_error_msg(), needle);
}

static void bad(const char *text, const char *needle) { bad_n(text, strlen(text), needle); }

/* call fails with CORE_EINPUT and a message containing needle */
#define FAILS(call, needle)                                                                        \
  do {                                                                                             \
    core_error_clear();                                                                            \
    int rc_ = (call);                                                                              \
    cr_assert_eq(rc_, CORE_EINPUT, "%s returned %d", #call, rc_);                                  \
    cr_assert(strstr(core_error_msg(), (needle)), "%s: '%s' lacks '%s'", #call, core_error_msg(),  \
              (needle));                                                                           \
  } while (0)

/* name:line:col: at the front of the current message */
static void assert_located(const char *what) {
  int line = 0, col = 0, k = 0;
  const char *m = core_error_msg();
  cr_assert(strncmp(m, "x.json:", 7) == 0, "%s: '%s' does not start with the name", what, m);
  cr_assert(sscanf(m + 7, "%d:%d: %n", &line, &col, &k) == 2 && k > 0 && line >= 1 && col >= 1,
            "%s: '%s' has no line:col", what, m);
}

Test(json, values_of_every_type) {
  const char *t = "{\"n\": null, \"t\": true, \"f\": false, \"i\": -12, \"x\": 2.5e3, \"z\": -0,\n"
                  " \"s\": \"q\\\"b\\\\s\\/\\b\\f\\n\\r\\t\\u00e9\\u20ac\\ud83d\\ude00\",\n"
                  " \"a\": [1, [2, []], {}], \"o\": {\"k\": \"v\"}, \"\": 0, \"tiny\": 1e-400, "
                  "\"big\": 1.7976931348623157e308}";
  core_json *j = parse_ok(t);
  cr_assert_eq(j->type, CORE_JSON_OBJECT);
  cr_assert_eq(core_json_len(j), 12);
  cr_assert(core_json_is(core_json_get(j, "n"), CORE_JSON_NULL));
  cr_assert_eq(core_json_get(j, "t")->num, 1);
  cr_assert_eq(core_json_get(j, "f")->type, CORE_JSON_BOOL);
  cr_assert_eq(core_json_get(j, "i")->num, -12);
  cr_assert_eq(core_json_get(j, "x")->num, 2500);
  cr_assert(signbit(core_json_get(j, "z")->num));
  const core_json *s = core_json_get(j, "s");
  cr_assert_str_eq(s->str, "q\"b\\s/\b\f\n\r\t\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
  cr_assert_eq(s->len, strlen(s->str));
  const core_json *a = core_json_get(j, "a");
  cr_assert_eq(core_json_len(a), 3);
  cr_assert_eq(core_json_at(a, 0)->num, 1);
  cr_assert_eq(core_json_len(core_json_at(a, 1)), 2);
  cr_assert_eq(core_json_len(core_json_at(core_json_at(a, 1), 1)), 0);
  cr_assert(core_json_is(core_json_at(a, 2), CORE_JSON_OBJECT));
  cr_assert_null(core_json_at(a, 3));
  cr_assert_null(core_json_at(core_json_get(j, "i"), 0));
  cr_assert_str_eq(core_json_get(core_json_get(j, "o"), "k")->str, "v");
  cr_assert_str_eq(core_json_at(j, 0)->key, "n"); /* members keep document order */
  cr_assert_eq(core_json_get(j, "")->num, 0);
  cr_assert_eq(core_json_get(j, "tiny")->num, 0);
  cr_assert_eq(core_json_get(j, "big")->num, 1.7976931348623157e308);
  cr_assert_null(core_json_get(j, "missing"));
  cr_assert_null(core_json_get(a, "n"));
  cr_assert_null(core_json_get(NULL, "n"));
  cr_assert_eq(core_json_len(NULL), 0);
  core_json_free(j);
  core_json_free(NULL);

  j = parse_ok(
      "\xef\xbb\xbf  [ \"\xe2\x82\xac\" ] \n"); /* byte order mark, raw UTF-8, whitespace */
  cr_assert_str_eq(core_json_at(j, 0)->str, "\xe2\x82\xac");
  core_json_free(j);
  const char *scalars[] = {"0", "-1.5E-3", "\"\"", "true", "null", " 7 "};
  for (size_t i = 0; i < sizeof scalars / sizeof scalars[0]; i++)
    core_json_free(parse_ok(scalars[i]));
}

Test(json, nodes_know_where_they_are) {
  core_json *j = parse_ok("{\n  \"a\": [1,\n    true],\n\t\"b\": \"s\"\n}");
  const core_json *a = core_json_get(j, "a");
  cr_assert_eq(j->line, 1);
  cr_assert_eq(j->col, 1);
  cr_assert_eq(a->line, 2);
  cr_assert_eq(a->col, 8);
  cr_assert_eq(core_json_at(a, 1)->line, 3);
  cr_assert_eq(core_json_at(a, 1)->col, 5);
  cr_assert_eq(core_json_get(j, "b")->line, 4);
  cr_assert_eq(core_json_get(j, "b")->col, 7);
  cr_assert_str_eq(a->src, "x.json");
  core_json_free(j);
}

Test(json, syntax_errors_say_where_and_what) {
  bad("", "x.json:1:1: unexpected end of input");
  bad("  \n   ", "x.json:2:4: unexpected end of input");
  bad("{\"a\": 1", "x.json:1:8: expected ',' or '}' after an object member, found end of input");
  bad("[1, 2", "x.json:1:6: expected ',' or ']'");
  bad("{\"a\": 1,\n \"b\" 2}", "x.json:2:6: expected ':' after the member name, found '2'");
  bad("[1, 2,]", "x.json:1:7: trailing comma before ']'");
  bad("{\"a\":1,}", "x.json:1:8: trailing comma before '}'");
  bad("[1 2]", "x.json:1:4: expected ',' or ']' after an array element, found '2'");
  bad("{1: 2}", "x.json:1:2: expected a member name (a string), found '1'");
  bad("{\"a\"}", "x.json:1:5: expected ':'");
  bad("[1] 2", "x.json:1:5: trailing characters after the JSON value, found '2'");
  bad("// comment\n1", "x.json:1:1: expected a value, found '/'");
  bad("'a'", "x.json:1:1: expected a value, found '''");
  bad("[.5]", "x.json:1:2: expected a value, found '.'");
  bad("+1", "expected a value, found '+'");
  bad("NaN", "expected a value, found 'N'");
  bad("-Infinity", "x.json:1:2: expected a digit after '-'");
  bad("tru", "x.json:1:4: unexpected end of input (in 'true')");
  bad("[nul", "unexpected end of input (in 'null')");
  bad("trux", "x.json:1:1: invalid literal");
  bad("[truefalse]", "x.json:1:6: expected ',' or ']'");
  bad_n("[1]\0", 4, "x.json:1:4: trailing characters after the JSON value, found byte 0x00");
  bad_n("[\0]", 3, "x.json:1:2: expected a value, found byte 0x00");
  bad("{\"a\": 1, \"b\": 2, \"a\": 3}", "x.json:1:23: duplicate member name 'a'");
}

Test(json, strings_are_checked) {
  bad("\"abc", "x.json:1:1: unterminated string");
  bad("[\"abc\\\"]", "x.json:1:2: unterminated string");
  bad("\"\\q\"", "x.json:1:2: bad escape in string: backslash followed by 'q'");
  bad("\"\\x41\"", "bad escape");
  bad("\"\\u12\"", "x.json:1:2: bad \\u escape (expected four hex digits)");
  bad("\"ab\\u12G4\"", "x.json:1:4: bad \\u escape");
  bad("\"\\ud800\"", "x.json:1:2: unpaired UTF-16 surrogate \\ud800");
  bad("\"\\udc00\"", "unpaired UTF-16 surrogate \\udc00");
  bad("\"\\ud800\\u0041\"", "unpaired UTF-16 surrogate");
  bad("\"\\ud800\\n\"", "unpaired UTF-16 surrogate");
  bad("\"\\u0000\"", "\\u0000 is not supported");
  bad("\"a\tb\"", "x.json:1:3: control character 0x09 in string");
  bad("\"a\nb\"", "x.json:1:3: control character 0x0a");
  bad("\"\xff\"", "x.json:1:2: invalid UTF-8 in string (byte 0xff)");
  bad("\"\xc0\xaf\"", "invalid UTF-8");         /* overlong '/' */
  bad("\"\xed\xa0\x80\"", "invalid UTF-8");     /* a surrogate written as UTF-8 */
  bad("\"\xf4\x90\x80\x80\"", "invalid UTF-8"); /* above U+10FFFF */
  bad("\"\xe2\x82\"", "invalid UTF-8");         /* cut short */
  bad("{\"k\\u0000\": 1}", "\\u0000 is not supported");
}

Test(json, numbers_are_strict_and_huge_ones_refused) {
  bad("01", "x.json:1:1: numbers cannot have leading zeros");
  bad("-012", "leading zeros");
  bad("1.", "x.json:1:3: expected a digit after the decimal point");
  bad("1.e5", "expected a digit after the decimal point");
  bad("1e", "x.json:1:3: expected a digit in the exponent");
  bad("[1e+]", "x.json:1:5: expected a digit in the exponent");
  bad("0x10", "x.json:1:2: trailing characters");
  bad("1e999", "x.json:1:1: number 1e999 is too large for a double");
  bad("[0, -1e400]", "x.json:1:5: number -1e400 is too large");
  char digits[420] = "[";
  memset(digits + 1, '9', 400);
  strcpy(digits + 401, "]");
  bad(digits, "x.json:1:2: number 99999999999999999999");
  core_json *j = parse_ok(
      "[1e308, -1e-320, 123456789012345678901234567890, 0.1000000000000000055511151231257827]");
  cr_assert_eq(core_json_at(j, 0)->num, 1e308);
  cr_assert_eq(core_json_at(j, 1)->num, -1e-320);
  cr_assert_eq(core_json_at(j, 2)->num, 1.2345678901234568e29);
  cr_assert_eq(core_json_at(j, 3)->num, 0.1);
  core_json_free(j);
  /* a number that ends the buffer: no terminator after it (bad_n copies to an exact size) */
  core_json *k;
  char *exact = malloc(3);
  memcpy(exact, "123", 3);
  cr_assert_eq(core_json_parse(exact, 3, "x.json", &k), CORE_OK);
  cr_assert_eq(k->num, 123);
  core_json_free(k);
  free(exact);
}

Test(json, nesting_is_limited_without_recursion_blowups) {
  size_t n = CORE_JSON_MAX_DEPTH;
  char *t = malloc(2 * n + 2);
  memset(t, '[', n);
  memset(t + n, ']', n);
  core_json *j;
  cr_assert_eq(core_json_parse(t, 2 * n, "x.json", &j), CORE_OK, "%s",
               core_error_msg()); /* at the limit */
  core_json_free(j);
  free(t);

  char msg[64];
  snprintf(msg, sizeof msg, "x.json:1:%zu: nesting deeper than %d levels", n + 1,
           CORE_JSON_MAX_DEPTH);
  size_t big = 1000000; /* a million open brackets, and the same with objects */
  t = malloc(big);
  memset(t, '[', big);
  bad_n(t, big, msg);
  for (size_t i = 0; i < big; i += 6)
    memcpy(t + i, i + 6 <= big ? "{\"a\":[" : "[[[[[[", i + 6 <= big ? 6 : big - i);
  bad_n(t, big, "nesting deeper than");
  free(t);
}

Test(json, wide_objects_and_duplicates_among_many_members) {
  size_t n = 5000, cap = n * 24 + 64, k = 0;
  char *t = malloc(cap);
  t[k++] = '{';
  for (size_t i = 0; i < n; i++)
    k += (size_t)snprintf(t + k, cap - k, "%s\"key%zu\": %zu", i ? ", " : "", i, i);
  t[k++] = '}';
  t[k] = 0;
  core_json *j = parse_ok(t);
  cr_assert_eq(core_json_len(j), n);
  cr_assert_eq(core_json_get(j, "key4321")->num, 4321);
  cr_assert_str_eq(core_json_at(j, 4999)->key, "key4999");
  core_json_free(j);
  char *dup = strstr(t, "\"key3000\"");
  memcpy(dup, "\"key4999\"", 9); /* key4999 twice: the later one is reported */
  bad(t, "duplicate member name 'key4999'");
  memcpy(dup, "\"key12\"  ", 9); /* key12 twice, and it comes first in the document */
  bad(t, "duplicate member name 'key12'");
  free(t);
}

static const char *SAMPLE =
    "{\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"schedule\":\"1f1b\",\"p\":4,\"m\":8,\"r\":0."
    "2727},\n"
    "\"traceEvents\":[\n{\"name\":\"F0\",\"ph\":\"X\",\"ts\":0,\"dur\":1000,\"args\":{\"mb\":0,"
    "\"s\":\"\\u00e9\\n\"}},\n"
    "{\"name\":\"B0 "
    "c1\",\"ph\":\"X\",\"ts\":1.5e3,\"dur\":2000,\"ok\":true,\"no\":null,\"l\":[1,-2,[]]}\n]}\n";

Test(json, every_truncation_fails_cleanly) {
  size_t n = strlen(SAMPLE);
  core_json *j = parse_ok(SAMPLE);
  core_json_free(j);
  for (size_t k = 0; k < n - 2; k++) { /* the last two bytes are "}\n": only "\n" may go */
    char what[32];
    snprintf(what, sizeof what, "prefix of %zu bytes", k);
    char *copy = malloc(k ? k : 1);
    memcpy(copy, SAMPLE, k);
    core_json *out = NULL;
    int rc = core_json_parse(copy, k, "x.json", &out);
    free(copy);
    cr_assert_eq(rc, CORE_EINPUT, "%s accepted", what);
    assert_located(what);
  }
}

Test(json, mutated_input_never_crashes) {
  size_t n = strlen(SAMPLE);
  char *buf = malloc(n);
  unsigned long long s = 0x9e3779b97f4a7c15ull;
  const char pool[] = "{}[]\":,\\u0123456789eE+-.tfn \n\t\xff\xc3\x80";
  int ok = 0, bad_input = 0;
  for (int it = 0; it < 20000; it++) {
    memcpy(buf, SAMPLE, n);
    int edits = 1 + it % 4;
    for (int e = 0; e < edits; e++) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      size_t at = (size_t)(s >> 33) % n;
      buf[at] = (s >> 20) & 1 ? pool[(s >> 8) % (sizeof pool - 1)] : (char)(s >> 12);
    }
    size_t len = it % 7 == 0 ? (size_t)(s >> 40) % n : n; /* and cut some short */
    core_json *j = NULL;
    int rc = core_json_parse(buf, len, "x.json", &j);
    if (rc == CORE_OK) {
      ok++;
      cr_assert_not_null(j);
      core_json_free(j);
    } else {
      bad_input++;
      cr_assert_eq(rc, CORE_EINPUT);
      assert_located("mutated input");
    }
  }
  free(buf);
  cr_assert(ok > 0 && bad_input > 0, "ok %d, bad %d", ok, bad_input);
}

Test(json, typed_accessors) {
  core_json *j = parse_ok("{\"i\": 7, \"h\": 2.5, \"s\": \"str\", \"b\": false, \"a\": [1], \"o\": "
                          "{},\n \"big\": 1e12}");
  double d;
  int i, b;
  const char *s;
  const core_json *a, *o;
  cr_assert_eq(core_json_get_int(j, "i", 0, 10, &i), CORE_OK);
  cr_assert_eq(i, 7);
  cr_assert_eq(core_json_get_number(j, "h", &d), CORE_OK);
  cr_assert_eq(d, 2.5);
  cr_assert_eq(core_json_get_string(j, "s", &s), CORE_OK);
  cr_assert_str_eq(s, "str");
  cr_assert_eq(core_json_get_bool(j, "b", &b), CORE_OK);
  cr_assert_eq(b, 0);
  cr_assert_eq(core_json_get_array(j, "a", &a), CORE_OK);
  cr_assert_eq(core_json_get_object(j, "o", &o), CORE_OK);
  cr_assert_eq(core_json_as_int(core_json_at(a, 0), 1, 1, &i), CORE_OK);
  cr_assert_eq(core_json_as_number(core_json_get(j, "big"), &d), CORE_OK);
  cr_assert_eq(core_json_as_string(core_json_get(j, "s"), &s), CORE_OK);
  cr_assert_eq(core_json_as_bool(core_json_get(j, "b"), &b), CORE_OK);

  i = 7;
  FAILS(core_json_get_int(j, "s", 0, 10, &i),
        "x.json:1:25: 's' must be an integer in [0, 10], found a string");
  FAILS(core_json_get_int(j, "h", 0, 10, &i),
        "x.json:1:15: 'h' must be an integer in [0, 10], found 2.5");
  FAILS(core_json_get_int(j, "i", 8, 10, &i),
        "x.json:1:7: 'i' must be an integer in [8, 10], found 7");
  FAILS(core_json_get_int(j, "big", 0, 2147483647, &i),
        "x.json:2:9: 'big' must be an integer in [0, 2147483647], found 1000000000000");
  FAILS(core_json_get_number(j, "s", &d), "'s' must be a number, found a string");
  FAILS(core_json_get_string(j, "i", &s), "'i' must be a string, found a number");
  FAILS(core_json_get_bool(j, "a", &b), "'a' must be a boolean, found an array");
  FAILS(core_json_get_array(j, "o", &a), "'o' must be an array, found an object");
  FAILS(core_json_get_object(j, "b", &o), "'b' must be an object, found a boolean");
  FAILS(core_json_get_number(j, "nope", &d), "x.json:1:1: missing member 'nope'");
  FAILS(core_json_get_number(core_json_get(j, "a"), "x", &d),
        "x.json:1:49: expected an object, found an array");
  FAILS(core_json_get_number(NULL, "x", &d), "expected an object, found nothing");
  FAILS(core_json_as_number(core_json_get(j, "s"), &d),
        "x.json:1:25: expected a number, found a string");
  FAILS(core_json_as_int(core_json_get(j, "h"), 0, 9, &i),
        "expected an integer in [0, 9], found 2.5");
  FAILS(core_json_as_bool(core_json_get(j, "i"), &b), "expected a boolean, found a number");
  FAILS(core_json_as_string(NULL, &s), "expected a string, found nothing");
  cr_assert_eq(i, 7, "a failed accessor must leave *out alone");
  core_json_free(j);
}

Test(json, write_string_reads_back) {
  const char *in[] = {"plain",
                      "",
                      "quote \" back \\ slash / ok",
                      "ctl \x01\x1f\x7f \b\f\n\r\t end",
                      "utf-8 \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
                      "bad \xff\xc3( \xed\xa0\x80 x"};
  const char *want_last = "bad \xef\xbf\xbd\xef\xbf\xbd( \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd x";
  for (size_t k = 0; k < sizeof in / sizeof in[0]; k++) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    core_json_write_string(f, in[k]);
    fclose(f);
    for (size_t c = 0; c < len; c++)
      cr_assert((unsigned char)buf[c] >= 0x20, "raw control byte in %s", buf);
    core_json *j;
    cr_assert_eq(core_json_parse(buf, len, "w.json", &j), CORE_OK, "%s: %s", buf, core_error_msg());
    cr_assert_str_eq(j->str, k + 1 < sizeof in / sizeof in[0] ? in[k] : want_last);
    core_json_free(j);
    free(buf);
  }
}

Test(json, write_number_is_shortest_and_exact) {
  double xs[] = {0,
                 -0.0,
                 1,
                 -2.5,
                 0.1,
                 1.0 / 3,
                 2.0 / 3,
                 1e300,
                 -4.9e-324,
                 2.2250738585072014e-308,
                 123456789012345678.0,
                 33,
                 0.2727272727272727,
                 1e21,
                 5e-7};
  for (size_t k = 0; k < sizeof xs / sizeof xs[0]; k++) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    core_json_write_number(f, xs[k]);
    fclose(f);
    core_json *j;
    cr_assert_eq(core_json_parse(buf, len, "n.json", &j), CORE_OK, "%s: %s", buf, core_error_msg());
    cr_assert(memcmp(&j->num, &xs[k], sizeof(double)) == 0, "%.17g came back as %.17g (%s)", xs[k],
              j->num, buf);
    core_json_free(j);
    free(buf);
  }
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  core_json_write_number(f, 0.1);
  fputc(' ', f);
  core_json_write_number(f, INFINITY);
  fputc(' ', f);
  core_json_write_number(f, NAN);
  fclose(f);
  cr_assert_str_eq(buf, "0.1 null null");
  free(buf);
}

Test(json, parse_file) {
  char path[] = "/tmp/brigade_json_XXXXXX";
  int fd = mkstemp(path);
  const char *t = "{\"a\": [1, 2]}\n";
  cr_assert_eq(write(fd, t, strlen(t)), (ssize_t)strlen(t));
  close(fd);
  core_json *j;
  cr_assert_eq(core_json_parse_file(path, &j), CORE_OK);
  cr_assert_eq(core_json_len(core_json_get(j, "a")), 2);
  cr_assert_str_eq(j->src, path);
  core_json_free(j);
  fd = open(path, O_WRONLY | O_TRUNC);
  const char *cut = "{\n\"a\": tru";
  cr_assert_eq(write(fd, cut, strlen(cut)), (ssize_t)strlen(cut));
  close(fd);
  FAILS(core_json_parse_file(path, &j), ":2:9: unexpected end of input");
  cr_assert(strncmp(core_error_msg(), path, strlen(path)) == 0, "%s", core_error_msg());
  cr_assert_null(j);
  unlink(path);
  FAILS(core_json_parse_file("/nonexistent/brigade.json", &j),
        "cannot open /nonexistent/brigade.json");
  FAILS(core_json_parse_file("/tmp", &j), "cannot read /tmp");
}
