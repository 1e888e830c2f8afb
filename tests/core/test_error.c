/* Error messages: a long echoed value is cut, never the reason after it; every other conversion
 * formats as printf does. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

Test(error, long_string_arguments_are_cut_not_the_reason) {
  char *v = malloc(100001);
  memset(v, 'x', 100000), v[100000] = 0;
  memcpy(v, "HEAD", 4), memcpy(v + 100000 - 4, "TAIL", 4);
  cr_assert_eq(core_error_set(CORE_EINPUT, "--set key=%s: expected an integer", v), CORE_EINPUT);
  const char *m = core_error_msg();
  cr_assert(strncmp(m, "--set key=HEAD", 14) == 0, "%s", m);
  cr_assert(strstr(m, "...") && strstr(m, "TAIL: expected an integer"), "%s", m);
  cr_assert_eq(strlen(m), strlen("--set key=: expected an integer") + 60 + 3 + 40, "%zu: %s", strlen(m), m);
  /* at the limit: whole */
  v[CORE_ERROR_CUT] = 0;
  core_error_set(CORE_EINPUT, "'%s'", v);
  cr_assert_eq(strlen(core_error_msg()), CORE_ERROR_CUT + 2);
  /* a precision keeps what the caller chose (another message passed on whole) */
  v[CORE_ERROR_CUT] = 'x', v[300] = 0;
  core_error_set(CORE_EINPUT, "%.500s!", v);
  cr_assert_eq(strlen(core_error_msg()), 301);
  core_error_set(CORE_EINPUT, "%.*s!", 200, v);
  cr_assert_eq(strlen(core_error_msg()), 201);
  /* the prefix's arguments too; the message it goes in front of is kept */
  v[300] = 'x', v[5000] = 0;
  core_error_set(CORE_EINPUT, "the reason");
  core_error_prefix("data (%s)", v);
  cr_assert(strstr(core_error_msg(), "...") && strstr(core_error_msg(), "): the reason"), "%s", core_error_msg());
  free(v);
}

Test(error, a_cut_does_not_split_a_utf8_character) {
  char v[400] = "";
  for (int i = 0; i < 150; i++) strcat(v, "\xc3\xa9"); /* é, two bytes each */
  core_error_set(CORE_EINPUT, "%s", v);
  const char *m = core_error_msg();
  const char *dots = strstr(m, "...");
  cr_assert(dots);
  cr_assert_eq((dots - m) % 2, 0, "the head ends inside a character: %s", m);
  cr_assert_eq(strlen(dots + 3) % 2, 0, "the tail starts inside a character: %s", m);
}

Test(error, other_conversions_format_as_printf) {
  char want[1024];
  long long big = -1234567890123LL;
  size_t z = 42;
  void *p = &z;
  snprintf(want, sizeof want, "%d %5d|%-4d|%03u %lld %zu %x %#o %c %g %.3f %8.2e %p %% %s %-6s| %ld %jd %hhd",
           -7, 12, 3, 9u, big, z, 255u, 8u, 'q', 0.1, 3.14159, 12345.678, p, "ok", "ab", 5L, (intmax_t)-3, 65);
  core_error_set(CORE_EINPUT, "%d %5d|%-4d|%03u %lld %zu %x %#o %c %g %.3f %8.2e %p %% %s %-6s| %ld %jd %hhd",
                 -7, 12, 3, 9u, big, z, 255u, 8u, 'q', 0.1, 3.14159, 12345.678, p, "ok", "ab", 5L, (intmax_t)-3, 65);
  cr_assert_str_eq(core_error_msg(), want);
  snprintf(want, sizeof want, "%*d|%-*.*f|", 6, 42, 9, 2, 2.5);
  core_error_set(CORE_EINPUT, "%*d|%-*.*f|", 6, 42, 9, 2, 2.5);
  cr_assert_str_eq(core_error_msg(), want);
}
