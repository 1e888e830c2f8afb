#include "cli/args.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

int cli_parse_int(const char *flag, const char *text, int lo, int hi, int *out) {
  char *end;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno || end == text || *end || v < lo || v > hi)
    return core_error_set(CORE_EINPUT, "%s: '%s' is not an integer in [%d, %d]", flag, text, lo, hi);
  *out = (int)v;
  return CORE_OK;
}

int cli_parse_double(const char *flag, const char *text, double lo, double *out) {
  char *end;
  errno = 0;
  double v = strtod(text, &end);
  /* ERANGE with a finite result is an underflow (1e-320 reads as itself, subnormal, or 0): a
   * number; an overflow comes back as HUGE_VAL, which isfinite refuses */
  if ((errno && errno != ERANGE) || end == text || *end || !isfinite(v) || v < lo)
    return core_error_set(CORE_EINPUT, "%s: '%s' is not a number >= %g", flag, text, lo);
  *out = v;
  return CORE_OK;
}

int cli_parse_count(const char *flag, const char *text, double *out) {
  char *end;
  errno = 0;
  double v = strtod(text, &end);
  if (errno || end == text || *end || !(v >= 1 && v <= 1e15) || v != floor(v))
    return core_error_set(CORE_EINPUT, "%s: '%s' is not a whole number in [1, 1e15]", flag, text);
  *out = v;
  return CORE_OK;
}

int cli_take(int argc, char **argv, int *i, const char **out) {
  if (*i + 1 >= argc) return core_error_set(CORE_EINPUT, "%s needs a value", argv[*i]);
  *out = argv[++*i];
  return CORE_OK;
}

void cli_arg(int *argc, char **argv, int i) {
  char *eq = strncmp(argv[i], "--", 2) == 0 ? strchr(argv[i], '=') : NULL;
  if (!eq || eq == argv[i] + 2) return; /* "--=x" stays one (unknown) argument */
  memmove(argv + i + 2, argv + i + 1, sizeof(char *) * (size_t)(*argc - i)); /* the NULL after the last too */
  *eq = '\0';
  argv[i + 1] = eq + 1;
  ++*argc;
}
