/* tests/fuzz/fuzz_files.h: what the fuzz targets whose readers take a path share. */
#ifndef BRIGADE_TESTS_FUZZ_FILES_H
#define BRIGADE_TESTS_FUZZ_FILES_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* n bytes of data as the file at path (abort when it cannot be written: the harness is broken). */
static inline void fuzz_write(const char *path, const uint8_t *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) abort();
  if (n && fwrite(data, 1, n, f) != n) abort();
  fclose(f);
}

/* The input as a file of this process, /tmp/brigade_fuzz_<name>_<pid><ext>; its path. */
static inline const char *fuzz_input_file(const char *name, const char *ext, const uint8_t *data, size_t n) {
  static char path[128];
  if (!path[0]) snprintf(path, sizeof path, "/tmp/brigade_fuzz_%s_%d%s", name, (int)getpid(), ext);
  fuzz_write(path, data, n);
  return path;
}

/* The corpus directory libFuzzer was given (its first argument naming a directory; a file given
 * is one input replayed), or NULL: where a target writes seeds of its own at start-up. */
static inline const char *fuzz_corpus_dir(int argc, char **argv) {
  struct stat sb;
  for (int i = 1; i < argc; i++)
    if (argv[i][0] != '-' && stat(argv[i], &sb) == 0 && S_ISDIR(sb.st_mode)) return argv[i];
  return NULL;
}

#endif
