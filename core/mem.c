/* core/mem.c: byte counts and the memory limit. */
#include "core/mem.h"

#include <ctype.h>
#include <math.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"

int core_mem_parse(const char *what, const char *text, double *out) {
  char *end;
  double v = strtod(text, &end), mult = 1;
  if (end != text && *end) {
    const char *units = "KMGT", *u = strchr(units, toupper((unsigned char)*end));
    if (u) {
      for (const char *q = units; q <= u; q++) mult *= 1024;
      end++;
      if (*end == 'i' && end[1] == 'B') end += 2;
      else if (*end == 'B') end++;
    } else if (*end == 'B') {
      end++;
    }
  }
  if (end == text || *end || !(v * mult >= 1) || v * mult > 1e18) /* at least a byte: 0.5 is no limit */
    return core_error_set(CORE_EINPUT, "%s: '%s' is not a positive byte count (e.g. 1000000, 512M, 80G)", what, text);
  *out = floor(v * mult); /* whole bytes: 1.5 is 1, 1.3G 1395864371 */
  return CORE_OK;
}

void core_mem_str(double bytes, char *buf, size_t n) {
  static const char *const unit[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (!(bytes >= 1024)) {
    snprintf(buf, n, "%.0f bytes", bytes);
    return;
  }
  int u = 0;
  double v = bytes / 1024;
  while (v >= 1024 && u < 5) v /= 1024, u++;
  snprintf(buf, n, "%.*f %s", v < 10 ? 3 : v < 100 ? 2 : 1, v, unit[u]);
}

double core_mem_physical(void) {
  long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && size > 0 ? (double)pages * (double)size : 0;
}

int core_mem_limit_get(const char *flag_value, core_mem_limit *out) {
  memset(out, 0, sizeof *out);
  const char *env = getenv("BRIGADE_MAX_MEMORY");
  if (flag_value) {
    int rc = core_mem_parse("--max-memory", flag_value, &out->bytes);
    if (!rc) snprintf(out->what, sizeof out->what, "--max-memory %.60s", flag_value);
    return rc;
  }
  if (env && *env) {
    int rc = core_mem_parse("BRIGADE_MAX_MEMORY", env, &out->bytes);
    if (!rc) snprintf(out->what, sizeof out->what, "BRIGADE_MAX_MEMORY=%.60s", env);
    return rc;
  }
  out->bytes = core_mem_physical();
  snprintf(out->what, sizeof out->what, "this machine's memory");
  return CORE_OK;
}

void core_mem_keep_freed(void) {
#ifdef __GLIBC__
  mallopt(M_MMAP_THRESHOLD, 32 << 20); /* the most glibc takes */
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}
