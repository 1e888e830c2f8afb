#include "core/error.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

static _Thread_local char err_msg[1024];
static _Thread_local int err_code;

/* A string longer than CORE_ERROR_CUT bytes as its first HEAD and last TAIL bytes around "..."
 * (not splitting a UTF-8 character), into buf. */
enum { HEAD = 60, TAIL = 40 };
static const char *cut(const char *s, char *buf) {
  size_t n = strlen(s);
  if (n <= CORE_ERROR_CUT) return s;
  size_t h = HEAD, t = n - TAIL;
  while (h > 0 && ((unsigned char)s[h] & 0xc0) == 0x80) h--; /* s[h] starts a character */
  while (t < n && ((unsigned char)s[t] & 0xc0) == 0x80) t++;
  memcpy(buf, s, h);
  memcpy(buf + h, "...", 3);
  memcpy(buf + h + 3, s + t, n - t + 1);
  return buf;
}

/* vsnprintf, except that a %s argument without a precision longer than CORE_ERROR_CUT bytes is
 * cut (cut above): a message names what was wrong with a value even when the value is 100 KB.
 * Each conversion is handed to snprintf on its own, with the arguments its spec takes. */
static void format(char *out, size_t n, const char *fmt, va_list ap) {
  size_t len = 0;
  out[0] = 0;
  for (const char *p = fmt; *p && len + 1 < n;) {
    if (*p != '%' || p[1] == '%') {
      out[len++] = *p, p += *p == '%' ? 2 : 1;
      continue;
    }
    const char *s = p++;
    int star[2], ns = 0, prec = 0;
    p += strspn(p, "-+ #0'");
    if (*p == '*') star[ns++] = va_arg(ap, int), p++;
    else p += strspn(p, "0123456789");
    if (*p == '.') {
      prec = 1, p++;
      if (*p == '*') star[ns++] = va_arg(ap, int), p++;
      else p += strspn(p, "0123456789");
    }
    int lm = 0; /* h/hh 0, l 1, ll 2, z 3, j 4, t 5, L 6 */
    if (*p == 'h') p += p[1] == 'h' ? 2 : 1;
    else if (*p == 'l') lm = p[1] == 'l' ? 2 : 1, p += lm;
    else if (*p == 'z' || *p == 'j' || *p == 't' || *p == 'L') lm = *p == 'z' ? 3 : *p == 'j' ? 4 : *p == 't' ? 5 : 6, p++;
    char conv = *p ? *p++ : 0, spec[32], tmp[HEAD + TAIL + 8];
    size_t k = (size_t)(p - s);
    if (k >= sizeof spec) k = sizeof spec - 1; /* no spec of ours is that long */
    memcpy(spec, s, k), spec[k] = 0;
    char *d = out + len;
    size_t room = n - len;
    int w = 0;
#define EMIT(x) (ns == 2 ? snprintf(d, room, spec, star[0], star[1], x) : ns ? snprintf(d, room, spec, star[0], x) \
                                                                           : snprintf(d, room, spec, x))
    switch (conv) {
    case 'd': case 'i':
      w = lm == 1 ? EMIT(va_arg(ap, long)) : lm == 2 ? EMIT(va_arg(ap, long long)) : lm == 3 ? EMIT(va_arg(ap, ssize_t))
        : lm == 4 ? EMIT(va_arg(ap, intmax_t)) : lm == 5 ? EMIT(va_arg(ap, ptrdiff_t)) : EMIT(va_arg(ap, int));
      break;
    case 'u': case 'o': case 'x': case 'X':
      w = lm == 1 ? EMIT(va_arg(ap, unsigned long)) : lm == 2 ? EMIT(va_arg(ap, unsigned long long))
        : lm == 3 ? EMIT(va_arg(ap, size_t)) : lm == 4 ? EMIT(va_arg(ap, uintmax_t)) : lm == 5 ? EMIT(va_arg(ap, ptrdiff_t))
        : EMIT(va_arg(ap, unsigned));
      break;
    case 'c': w = EMIT(va_arg(ap, int)); break;
    case 'p': w = EMIT(va_arg(ap, void *)); break;
    case 'e': case 'E': case 'f': case 'F': case 'g': case 'G': case 'a': case 'A':
      w = lm == 6 ? EMIT(va_arg(ap, long double)) : EMIT(va_arg(ap, double));
      break;
    case 's': {
      const char *a = va_arg(ap, const char *);
      w = EMIT(a && !prec ? cut(a, tmp) : a);
      break;
    }
    default: /* not a conversion brigade uses: kept as written */
      w = snprintf(d, room, "%s", spec);
    }
#undef EMIT
    len += w < 0 ? 0 : (size_t)w < room ? (size_t)w : room - 1;
  }
  out[len] = 0;
}

int core_error_set(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  format(err_msg, sizeof err_msg, fmt, ap);
  va_end(ap);
  err_code = code;
  return code;
}

int core_error_prefix(const char *fmt, ...) {
  char prefix[512], old[sizeof err_msg];
  va_list ap;
  va_start(ap, fmt);
  format(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  memcpy(old, err_msg, sizeof old);
  /* prefix, ": ", then as much of the old message as fits */
  size_t k = strlen(prefix);
  if (k > sizeof err_msg - 3) k = sizeof err_msg - 3;
  memcpy(err_msg, prefix, k);
  memcpy(err_msg + k, ": ", 2);
  size_t room = sizeof err_msg - k - 3, ol = strnlen(old, sizeof old - 1);
  if (ol > room) ol = room;
  memcpy(err_msg + k + 2, old, ol);
  err_msg[k + 2 + ol] = 0;
  return err_code;
}

const char *core_error_msg(void) { return err_msg[0] ? err_msg : "unknown error"; }
int core_error_code(void) { return err_code; }

void core_error_clear(void) {
  err_msg[0] = 0;
  err_code = CORE_OK;
}

void core_assert_fail(const char *cond, const char *file, int line) {
  fprintf(stderr, "brigade: internal error: assertion '%s' failed at %s:%d\n", cond, file, line);
  abort();
}

static void *check_alloc(void *p, size_t n) {
  if (!p && n) {
    fprintf(stderr, "brigade: error: out of memory allocating %zu bytes\n", n);
    exit(CORE_ERUNTIME);
  }
  return p;
}

void *core_malloc(size_t n) { return check_alloc(malloc(n ? n : 1), n); }

void *core_calloc(size_t count, size_t size) {
  if (size && count > (size_t)-1 / size) return check_alloc(NULL, (size_t)-1);
  return check_alloc(calloc(count ? count : 1, size ? size : 1), count * size);
}

void *core_realloc(void *p, size_t n) { return check_alloc(realloc(p, n ? n : 1), n); }

char *core_str_join(const char *a, const char *b) {
  size_t na = strlen(a), nb = strlen(b);
  char *s = core_malloc(na + nb + 1);
  memcpy(s, a, na);
  memcpy(s + na, b, nb + 1);
  return s;
}
