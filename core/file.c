#include "core/file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

int core_file_open_regular(const char *path, const char *what, FILE **f) {
  *f = NULL;
  /* O_NONBLOCK: opening a FIFO for reading returns at once instead of waiting for a writer */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return core_error_set(CORE_EINPUT, "cannot open %s %s: %s", what, path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return core_error_set(CORE_EINPUT, "%s %s is not a regular file", what, path);
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0 || !(*f = fdopen(fd, "rb"))) {
    int err = errno;
    close(fd);
    return core_error_set(CORE_ERUNTIME, "cannot open %s %s: %s", what, path, strerror(err));
  }
  return CORE_OK;
}
