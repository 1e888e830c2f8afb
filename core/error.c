#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char err_msg[1024];
static _Thread_local int err_code;

int core_error_set(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err_msg, sizeof err_msg, fmt, ap);
  va_end(ap);
  err_code = code;
  return code;
}

int core_error_prefix(const char *fmt, ...) {
  char prefix[512], old[sizeof err_msg];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
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
