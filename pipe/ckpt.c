#include "pipe/ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/file.h"
#include "core/log.h"

static const char MAGIC[8] = "BRIGADE";
enum { VERSION = 1, MAX_NAME = 4096 };

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

static size_t dtype_size(int dtype) { return dtype == PIPE_CKPT_F32 ? 4 : dtype == PIPE_CKPT_I64 ? 8 : 1; }

static void put_bytes(pipe_ckpt_writer *w, const void *p, size_t n) {
  if (w->failed) return;
  if (n && fwrite(p, 1, n, w->f) != n) w->failed = errno ? errno : EIO;
  w->hash = fnv(w->hash, p, n);
}

int pipe_ckpt_create(pipe_ckpt_writer *w, const char *path) {
  memset(w, 0, sizeof *w);
  if (strlen(path) >= sizeof w->path) return core_error_set(CORE_EINPUT, "checkpoint path too long");
  snprintf(w->path, sizeof w->path, "%s", path);
  /* the writer's own name (its pid; the rank is in PATH): a run removes only its own */
  snprintf(w->tmp, sizeof w->tmp, "%s.%ld.tmp", path, (long)getpid());
  w->f = fopen(w->tmp, "wb");
  if (!w->f) return core_error_set(CORE_ERUNTIME, "cannot write %s: %s", w->tmp, strerror(errno));
  w->hash = 0xcbf29ce484222325ull;
  uint32_t v = VERSION;
  put_bytes(w, MAGIC, sizeof MAGIC);
  put_bytes(w, &v, sizeof v);
  return CORE_OK;
}

int pipe_ckpt_put(pipe_ckpt_writer *w, const char *name, int dtype, const void *data, uint64_t count) {
  uint32_t len = (uint32_t)strlen(name), dt = (uint32_t)dtype;
  put_bytes(w, &len, sizeof len);
  put_bytes(w, name, len);
  put_bytes(w, &dt, sizeof dt);
  put_bytes(w, &count, sizeof count);
  put_bytes(w, data, (size_t)count * dtype_size(dtype));
  w->nrec++;
  return w->failed ? core_error_set(CORE_ERUNTIME, "writing %s: %s", w->tmp, strerror(w->failed)) : CORE_OK;
}

int pipe_ckpt_commit(pipe_ckpt_writer *w) {
  uint32_t n = w->nrec;
  put_bytes(w, &n, sizeof n);
  uint64_t h = w->hash;
  if (!w->failed && fwrite(&h, sizeof h, 1, w->f) != 1) w->failed = EIO;
  if (!w->failed && (fflush(w->f) != 0 || fsync(fileno(w->f)) != 0)) w->failed = errno;
  if (fclose(w->f) != 0 && !w->failed) w->failed = errno;
  w->f = NULL;
  if (!w->failed && rename(w->tmp, w->path) != 0) w->failed = errno;
  if (!w->failed && pipe_ckpt_sync_dir(w->path, 1) != 0) w->failed = errno; /* the rename itself */
  if (w->failed) {
    unlink(w->tmp);
    return core_error_set(CORE_ERUNTIME, "saving checkpoint %s: %s", w->path, strerror(w->failed));
  }
  return CORE_OK;
}

void pipe_ckpt_abort(pipe_ckpt_writer *w) {
  if (w->f) fclose(w->f);
  w->f = NULL;
  unlink(w->tmp);
}

int pipe_ckpt_sync_dir(const char *path, int parent) {
  char dir[1100];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (parent && !slash) snprintf(dir, sizeof dir, ".");
  else if (parent) *(slash == dir ? slash + 1 : slash) = 0;
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return -1;
  int rc = fsync(fd) != 0 && errno != EINVAL ? -1 : 0; /* EINVAL: the file system does not sync directories */
  int err = errno;
  close(fd);
  errno = err;
  return rc;
}

int pipe_ckpt_mkdirs(const char *path) {
  char buf[1100];
  if (strlen(path) >= sizeof buf) return errno = ENAMETOOLONG, -1;
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1; *p; p++)
    if (*p == '/') {
      *p = 0;
      if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
      *p = '/';
    }
  if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
  struct stat st;
  if (stat(buf, &st) != 0) return -1;
  return S_ISDIR(st.st_mode) ? 0 : (errno = ENOTDIR, -1);
}

/* The holder the lock file names ("pid P host H"), or pid 0. */
static void read_holder(int fd, long *pid, char host[256]) {
  char text[400];
  ssize_t k = pread(fd, text, sizeof text - 1, 0);
  text[k > 0 ? k : 0] = 0;
  *pid = 0, host[0] = 0;
  if (sscanf(text, "pid %ld host %255s", pid, host) != 2 || *pid <= 0) *pid = 0, host[0] = 0;
}

/* Whether process pid runs on this machine (one we may not signal runs too). */
static int alive(long pid) { return pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM); }

int pipe_ckpt_lock_take(pipe_ckpt_lock *lk, const char *dir, char *note, size_t nn) {
  memset(lk, 0, sizeof *lk);
  note[0] = 0;
  if (strlen(dir) + 8 > sizeof lk->path)
    return core_error_set(CORE_EINPUT, "%s: the path is too long", dir);
  if (pipe_ckpt_mkdirs(dir) != 0)
    return core_error_set(CORE_EINPUT, "cannot create %s: %s", dir, strerror(errno));
  snprintf(lk->path, sizeof lk->path, "%s/.lock", dir);
  int fd = open(lk->path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    return core_error_set(CORE_EINPUT, "%s is not writable: cannot create %s: %s", dir, lk->path, strerror(errno));
  char me[256] = "", host[256];
  gethostname(me, sizeof me - 1);
  long pid;
  int locked = flock(fd, LOCK_EX | LOCK_NB) == 0, err = locked ? 0 : errno;
  read_holder(fd, &pid, host);
  for (int i = 0; i < 50 && err == EWOULDBLOCK && !pid; i++) { /* the holder writes its name just after locking */
    usleep(10000);
    read_holder(fd, &pid, host);
  }
  int here = pid > 0 && strcmp(host, me) == 0;
  if (err == EWOULDBLOCK) {
    close(fd);
    if (pid)
      return core_error_set(CORE_EINPUT, "%s is in use by another run: pid %ld on host %s holds %s (one run writes a "
                            "checkpoint directory; give this one another, or wait for that run to end)", dir, pid, host,
                            lk->path);
    return core_error_set(CORE_EINPUT, "%s is in use by another run, which holds %s but has not written its pid and host "
                          "there", dir, lk->path);
  }
  int mine = here && pid == (long)getpid();
  if (!locked && !mine && (here ? alive(pid) : pid > 0)) {
    /* no locks on this file system (NFS without a lock service, say): the holder written in the
     * file decides; one on another host cannot be checked from here */
    close(fd);
    return core_error_set(CORE_EINPUT, "%s is in use by pid %ld on host %s, as %s says (this file system does not lock "
                          "files: %s; if that run has ended, remove %s)", dir, pid, host, lk->path, strerror(err),
                          lk->path);
  }
  if (pid && !mine)
    snprintf(note, nn, "taking over %s from pid %ld on host %s, %s", lk->path, pid, host,
             here && !alive(pid) ? "which is no longer running" : "which no longer holds it");
  char text[320];
  int k = snprintf(text, sizeof text, "pid %ld host %s\n", (long)getpid(), me[0] ? me : "unknown");
  if (ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)k, 0) != k || fsync(fd) != 0) {
    int e = errno;
    close(fd);
    return core_error_set(CORE_EINPUT, "%s is not writable: %s: %s", dir, lk->path, strerror(e));
  }
  lk->fd = fd, lk->held = 1;
  return CORE_OK;
}

void pipe_ckpt_lock_release(pipe_ckpt_lock *lk) {
  if (!lk->held) return;
  /* emptied first: a file naming no holder is a released lock (a run that dies leaves its pid,
   * which the next run reports as it takes the lock over) */
  if (ftruncate(lk->fd, 0) != 0) core_log(CORE_LOG_WARN, "cannot empty %s (%s): the next run will report it as left over", lk->path, strerror(errno));
  close(lk->fd);
  lk->held = 0;
}

static int bad(pipe_ckpt_reader *r, const char *what) {
  int rc = core_error_set(CORE_EINPUT, "checkpoint %s is damaged: %s", r->path, what);
  pipe_ckpt_close(r);
  return rc;
}

int pipe_ckpt_open(pipe_ckpt_reader *r, const char *path) {
  memset(r, 0, sizeof *r);
  snprintf(r->path, sizeof r->path, "%s", path);
  FILE *f;
  int rc = core_file_open_regular(path, "checkpoint", &f); /* a FIFO is refused, not waited on */
  if (rc) return rc;
  struct stat st;
  if (fstat(fileno(f), &st) != 0) {
    fclose(f);
    return core_error_set(CORE_EINPUT, "cannot read checkpoint %s: %s", path, strerror(errno));
  }
  r->size = (size_t)st.st_size;
  r->buf = core_malloc(r->size + 1);
  size_t got = fread(r->buf, 1, r->size, f);
  fclose(f);
  if (got != r->size) return bad(r, "short read");
  size_t head = sizeof MAGIC + 4, tail = 4 + 8;
  if (r->size < head + tail || memcmp(r->buf, MAGIC, sizeof MAGIC) != 0) return bad(r, "not a brigade checkpoint (bad magic or too short)");
  uint32_t version;
  memcpy(&version, r->buf + sizeof MAGIC, 4);
  if (version != VERSION) return bad(r, "unsupported version");
  uint64_t h;
  memcpy(&h, r->buf + r->size - 8, 8);
  if (fnv(0xcbf29ce484222325ull, r->buf, r->size - 8) != h) return bad(r, "checksum mismatch (truncated or corrupted)");
  memcpy(&r->nrec, r->buf + r->size - tail, 4);
  size_t end = r->size - tail, at = head;
  if (r->nrec > end / 17) return bad(r, "record count larger than the file");
  r->rec = core_calloc(r->nrec ? r->nrec : 1, sizeof(pipe_ckpt_record));
  for (uint32_t i = 0; i < r->nrec; i++) {
    uint32_t len, dt;
    uint64_t count;
    if (end - at < 4) return bad(r, "record header past the end");
    memcpy(&len, r->buf + at, 4), at += 4;
    if (len > MAX_NAME || end - at < (size_t)len + 12) return bad(r, "record name past the end");
    char *name = (char *)r->buf + at; /* names are stored unterminated: copy into place below */
    at += len;
    memcpy(&dt, r->buf + at, 4), at += 4;
    memcpy(&count, r->buf + at, 8), at += 8;
    if (dt > PIPE_CKPT_BYTES) return bad(r, "unknown record type");
    if (count > (end - at) / dtype_size((int)dt)) return bad(r, "record data past the end");
    r->rec[i] = (pipe_ckpt_record){.name = NULL, .dtype = (int)dt, .count = count, .data = r->buf + at};
    at += (size_t)count * dtype_size((int)dt);
    char *copy = core_malloc(len + 1);
    memcpy(copy, name, len);
    copy[len] = 0;
    r->rec[i].name = copy;
  }
  if (at != end) return bad(r, "trailing bytes after the last record");
  return CORE_OK;
}

void pipe_ckpt_close(pipe_ckpt_reader *r) {
  if (r->rec)
    for (uint32_t i = 0; i < r->nrec; i++) free((char *)r->rec[i].name);
  free(r->rec);
  free(r->buf);
  r->rec = NULL, r->buf = NULL, r->nrec = 0;
}

const pipe_ckpt_record *pipe_ckpt_find(const pipe_ckpt_reader *r, const char *name) {
  for (uint32_t i = 0; i < r->nrec; i++)
    if (r->rec[i].name && strcmp(r->rec[i].name, name) == 0) return &r->rec[i];
  return NULL;
}

int pipe_ckpt_get(const pipe_ckpt_reader *r, const char *name, int dtype, void *out, uint64_t count) {
  return pipe_ckpt_get_part(r, name, dtype, count, 0, count, out);
}

int pipe_ckpt_get_part(const pipe_ckpt_reader *r, const char *name, int dtype, uint64_t count, uint64_t from,
                       uint64_t n, void *out) {
  const pipe_ckpt_record *rec = pipe_ckpt_find(r, name);
  if (!rec) return core_error_set(CORE_EINPUT, "checkpoint %s has no record '%s'", r->path, name);
  if (rec->dtype != dtype || rec->count != count)
    return core_error_set(CORE_EINPUT, "checkpoint %s: record '%s' holds %llu values of type %d, "
                          "expected %llu of type %d", r->path, name, (unsigned long long)rec->count,
                          rec->dtype, (unsigned long long)count, dtype);
  if (from > count || n > count - from)
    return core_error_set(CORE_ERUNTIME, "checkpoint %s: values [%llu, %llu) of record '%s' asked, it holds %llu", r->path,
                          (unsigned long long)from, (unsigned long long)(from + n), name, (unsigned long long)count);
  memcpy(out, rec->data + (size_t)from * dtype_size(dtype), (size_t)n * dtype_size(dtype));
  return CORE_OK;
}
