/* tests/core/test_mem.c: byte counts as users write them (core_mem_parse, core_mem_str). */
#include <criterion/criterion.h>
#include <string.h>

#include "core/error.h"
#include "core/mem.h"

/* Units are powers of 1024; a count is rounded down to whole bytes (1.5 was kept as 1.5 and
 * printed as "2 bytes"); below one byte, or past 1e18, is refused naming the flag. */
Test(mem, parse_byte_counts) {
  const struct {
    const char *text;
    double bytes;
  } ok[] = {{"1000000", 1e6}, {"512M", 512.0 * 1024 * 1024}, {"80G", 80.0 * 1024 * 1024 * 1024},
            {"80GiB", 80.0 * 1024 * 1024 * 1024}, {"2KB", 2048}, {"1.5", 1}, {"1.3G", 1395864371}, {"1.5e9", 1.5e9}};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    double v = -1;
    cr_assert_eq(core_mem_parse("--max-memory", ok[i].text, &v), CORE_OK, "%s: %s", ok[i].text, core_error_msg());
    cr_assert_eq(v, ok[i].bytes, "%s: %.17g", ok[i].text, v);
  }
  const char *bad[] = {"0.5", "0", "-1", "", "12X", "1e19", "nan", "inf", "G"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    double v = -1;
    cr_assert_eq(core_mem_parse("--max-memory", bad[i], &v), CORE_EINPUT, "'%s' taken as %g", bad[i], v);
    cr_assert(strstr(core_error_msg(), "--max-memory"), "%s", core_error_msg());
  }
  char buf[64];
  core_mem_str(2, buf, sizeof buf);
  cr_assert_str_eq(buf, "2 bytes");
}
