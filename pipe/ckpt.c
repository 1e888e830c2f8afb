#include "pipe/ckpt.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

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
  snprintf(w->tmp, sizeof w->tmp, "%s.tmp", path);
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

static int bad(pipe_ckpt_reader *r, const char *what) {
  int rc = core_error_set(CORE_EINPUT, "checkpoint %s is damaged: %s", r->path, what);
  pipe_ckpt_close(r);
  return rc;
}

int pipe_ckpt_open(pipe_ckpt_reader *r, const char *path) {
  memset(r, 0, sizeof *r);
  snprintf(r->path, sizeof r->path, "%s", path);
  FILE *f = fopen(path, "rb");
  if (!f) return core_error_set(CORE_EINPUT, "cannot open checkpoint %s: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    fclose(f);
    return core_error_set(CORE_EINPUT, "checkpoint %s is not a regular file", path);
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
