/* core/error.h: status codes and a thread-local error message with context.
 *
 * A function that can fail returns an int status (CORE_OK on success) and, on failure, fills the
 * message with core_error_set(). The caller may add context in front with core_error_prefix().
 * The CLI prints "brigade: error: <message>" and exits with the status: 2 for bad input, 1 for
 * runtime failures. Internal invariants use CORE_ASSERT, which names the place. */
#ifndef BRIGADE_CORE_ERROR_H
#define BRIGADE_CORE_ERROR_H

#include <stddef.h>

enum {
  CORE_OK = 0,
  CORE_ERUNTIME = 1, /* the program or the machine failed: I/O, MPI, memory */
  CORE_EINPUT = 2,   /* the user's input is wrong: config, flags, schedule file, data */
};

/* A string argument (%s, no precision) longer than CORE_ERROR_CUT bytes goes into a message as its
 * first 60 and last 40 bytes around "...", so an echoed value (a 100 KB --set, a long path) never
 * pushes the reason out of the message; give a precision (%.500s) to keep a longer string whole
 * (another message, say). */
enum { CORE_ERROR_CUT = 120 };

/* Sets the message (printf-style) and returns code, so callers can `return core_error_set(...)`. */
int core_error_set(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Puts "<prefix>: " in front of the current message; returns the current code. */
int core_error_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *core_error_msg(void);
int core_error_code(void);
void core_error_clear(void);

/* Aborts with the file, line and condition; for bugs in brigade, never for user input. */
#define CORE_ASSERT(cond)                                                                          \
  do {                                                                                             \
    if (!(cond)) core_assert_fail(#cond, __FILE__, __LINE__);                                      \
  } while (0)
_Noreturn void core_assert_fail(const char *cond, const char *file, int line);

/* malloc/calloc/realloc that abort with a message on out-of-memory (sizes are checked). */
void *core_malloc(size_t n);
void *core_calloc(size_t count, size_t size);
void *core_realloc(void *p, size_t n);
/* a followed by b in a new string (core_malloc'd): a file name built from a user's path whole,
 * however long (a fixed buffer cut short could name another file) */
char *core_str_join(const char *a, const char *b);

#endif
