/* Checkpoint files: round trip, and damaged files refused with a message, never a crash. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/error.h"
#include "pipe/ckpt.h"

static void write_sample(const char *path) {
  pipe_ckpt_writer w;
  cr_assert_eq(pipe_ckpt_create(&w, path), CORE_OK, "%s", core_error_msg());
  float a[100];
  for (int i = 0; i < 100; i++) a[i] = i * 0.5f;
  int64_t step = 42;
  cr_assert_eq(pipe_ckpt_put(&w, "layer.0.w", PIPE_CKPT_F32, a, 100), CORE_OK);
  cr_assert_eq(pipe_ckpt_put(&w, "step", PIPE_CKPT_I64, &step, 1), CORE_OK);
  cr_assert_eq(pipe_ckpt_put(&w, "config", PIPE_CKPT_BYTES, "x = 1;", 6), CORE_OK);
  cr_assert_eq(pipe_ckpt_commit(&w), CORE_OK, "%s", core_error_msg());
}

static size_t file_size(const char *path) {
  FILE *f = fopen(path, "rb");
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fclose(f);
  return (size_t)n;
}

Test(ckpt, round_trip) {
  char path[] = "/tmp/brigade_ckpt_XXXXXX";
  close(mkstemp(path));
  write_sample(path);
  char tmp[64]; /* the writer's temporary file, PATH.<pid>.tmp */
  snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
  cr_assert(access(tmp, F_OK) != 0, "%s is left behind after the commit", tmp);
  pipe_ckpt_reader r;
  cr_assert_eq(pipe_ckpt_open(&r, path), CORE_OK, "%s", core_error_msg());
  float a[100];
  cr_assert_eq(pipe_ckpt_get(&r, "layer.0.w", PIPE_CKPT_F32, a, 100), CORE_OK);
  for (int i = 0; i < 100; i++) cr_assert_eq(a[i], i * 0.5f, "layer.0.w[%d] = %g", i, a[i]);
  int64_t step;
  cr_assert_eq(pipe_ckpt_get(&r, "step", PIPE_CKPT_I64, &step, 1), CORE_OK);
  cr_assert_eq(step, 42);
  char cfg[7] = {0};
  cr_assert_eq(pipe_ckpt_get(&r, "config", PIPE_CKPT_BYTES, cfg, 6), CORE_OK, "%s", core_error_msg());
  cr_assert_str_eq(cfg, "x = 1;");
  cr_assert_eq(pipe_ckpt_get(&r, "step", PIPE_CKPT_F32, a, 1), CORE_EINPUT);
  /* a record of another size is refused, not copied short or long (a model with other shapes) */
  core_error_clear();
  cr_assert_eq(pipe_ckpt_get(&r, "layer.0.w", PIPE_CKPT_F32, a, 99), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "record 'layer.0.w' holds 100 values of type 0, expected 99 of type 0"), "%s",
            core_error_msg());
  cr_assert_eq(pipe_ckpt_get(&r, "missing", PIPE_CKPT_F32, a, 1), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "no record 'missing'"));
  pipe_ckpt_close(&r);
  unlink(path);
}

Test(ckpt, every_truncation_and_bit_flip_is_refused) {
  char path[] = "/tmp/brigade_ckpt_XXXXXX", bad[64];
  close(mkstemp(path));
  write_sample(path);
  size_t n = file_size(path);
  unsigned char *buf = malloc(n);
  FILE *f = fopen(path, "rb");
  cr_assert_eq(fread(buf, 1, n, f), n);
  fclose(f);
  snprintf(bad, sizeof bad, "%s.bad", path);
  for (size_t cut = 0; cut < n; cut += 7) { /* truncated */
    f = fopen(bad, "wb");
    fwrite(buf, 1, cut, f);
    fclose(f);
    pipe_ckpt_reader r;
    cr_assert_eq(pipe_ckpt_open(&r, bad), CORE_EINPUT, "truncated at %zu accepted", cut);
  }
  for (size_t at = 0; at < n; at += 5) { /* one bit flipped */
    buf[at] ^= 0x10;
    f = fopen(bad, "wb");
    fwrite(buf, 1, n, f);
    fclose(f);
    buf[at] ^= 0x10;
    pipe_ckpt_reader r;
    cr_assert_eq(pipe_ckpt_open(&r, bad), CORE_EINPUT, "bit flip at %zu accepted", at);
    cr_assert(strstr(core_error_msg(), "damaged") || strstr(core_error_msg(), "magic"), "%s", core_error_msg());
  }
  pipe_ckpt_reader r; /* the good one still loads */
  cr_assert_eq(pipe_ckpt_open(&r, path), CORE_OK);
  pipe_ckpt_close(&r);
  free(buf);
  unlink(bad), unlink(path);
}

/* Until the commit, PATH keeps the previous checkpoint (the new one grows in PATH.<pid>.tmp, the
 * writer's own name); an abort removes that file and leaves PATH as it was. */
Test(ckpt, path_is_untouched_until_commit) {
  char path[] = "/tmp/brigade_ckpt_XXXXXX", tmp[64];
  close(mkstemp(path));
  snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
  write_sample(path);
  for (int abort_it = 0; abort_it < 2; abort_it++) {
    pipe_ckpt_writer w;
    cr_assert_eq(pipe_ckpt_create(&w, path), CORE_OK, "%s", core_error_msg());
    cr_assert_str_eq(w.tmp, tmp);
    int64_t step = 43 + abort_it;
    cr_assert_eq(pipe_ckpt_put(&w, "step", PIPE_CKPT_I64, &step, 1), CORE_OK);
    cr_assert_eq(fflush(w.f), 0);
    cr_assert(access(tmp, F_OK) == 0, "the new checkpoint is not written to %s", tmp);
    pipe_ckpt_reader r; /* the old one is still there, whole */
    cr_assert_eq(pipe_ckpt_open(&r, path), CORE_OK, "%s", core_error_msg());
    int64_t got;
    cr_assert_eq(pipe_ckpt_get(&r, "step", PIPE_CKPT_I64, &got, 1), CORE_OK);
    cr_assert_eq(got, 42);
    pipe_ckpt_close(&r);
    if (abort_it) {
      pipe_ckpt_abort(&w);
      cr_assert(access(tmp, F_OK) != 0, "abort left %s", tmp);
      cr_assert_eq(pipe_ckpt_open(&r, path), CORE_OK);
      cr_assert_eq(pipe_ckpt_get(&r, "step", PIPE_CKPT_I64, &got, 1), CORE_OK);
      cr_assert_eq(got, 42);
    } else {
      cr_assert_eq(pipe_ckpt_commit(&w), CORE_OK);
      cr_assert_eq(pipe_ckpt_open(&r, path), CORE_OK);
      cr_assert_eq(pipe_ckpt_get(&r, "step", PIPE_CKPT_I64, &got, 1), CORE_OK);
      cr_assert_eq(got, 43);
      cr_assert_null(pipe_ckpt_find(&r, "layer.0.w"));
      pipe_ckpt_close(&r);
      write_sample(path);
      continue;
    }
    pipe_ckpt_close(&r);
  }
  unlink(path);
}

/* A write that fails (here: the file size limit) is an error of the commit, and leaves neither
 * PATH nor its temporary file. */
Test(ckpt, failed_write_leaves_nothing) {
  char path[] = "/tmp/brigade_ckpt_XXXXXX", tmp[64];
  close(mkstemp(path));
  unlink(path);
  snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
  signal(SIGXFSZ, SIG_IGN); /* writes past the limit fail with EFBIG instead */
  struct rlimit lim = {.rlim_cur = 1000, .rlim_max = RLIM_INFINITY};
  cr_assert_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
  pipe_ckpt_writer w;
  cr_assert_eq(pipe_ckpt_create(&w, path), CORE_OK, "%s", core_error_msg());
  static float big[20000];
  core_error_clear();
  cr_assert_eq(pipe_ckpt_put(&w, "big", PIPE_CKPT_F32, big, 20000), CORE_ERUNTIME, "a write past the limit succeeded");
  cr_assert(strstr(core_error_msg(), tmp), "%s", core_error_msg());
  cr_assert_eq(pipe_ckpt_commit(&w), CORE_ERUNTIME, "a checkpoint whose write failed was committed");
  cr_assert(strstr(core_error_msg(), "saving checkpoint"), "%s", core_error_msg());
  cr_assert(access(path, F_OK) != 0 && access(tmp, F_OK) != 0, "a failed save left a file");
}

/* ---- files with a valid hash whose structure is wrong: each check of the reader ---- */

typedef struct {
  unsigned char b[512];
  size_t n;
} bytes;

static void put(bytes *x, const void *p, size_t n) {
  cr_assert(x->n + n <= sizeof x->b);
  memcpy(x->b + x->n, p, n), x->n += n;
}

static void put_record(bytes *x, const char *name, uint32_t dtype, uint64_t count, size_t data_bytes) {
  uint32_t len = (uint32_t)strlen(name);
  put(x, &len, 4), put(x, name, len), put(x, &dtype, 4), put(x, &count, 8);
  unsigned char zero[64] = {0};
  cr_assert(data_bytes <= sizeof zero);
  put(x, zero, data_bytes);
}

/* Header, the records already in x->b after it, the trailer with record count nrec and the
 * FNV-1a hash; written to path. */
static void finish(bytes *x, uint32_t nrec, const char *path) {
  put(x, &nrec, 4);
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < x->n; i++) h = (h ^ x->b[i]) * 0x100000001b3ull;
  put(x, &h, 8);
  FILE *f = fopen(path, "wb");
  cr_assert(f);
  cr_assert_eq(fwrite(x->b, 1, x->n, f), x->n);
  fclose(f);
}

static bytes header(uint32_t version) {
  bytes x = {.n = 0};
  put(&x, "BRIGADE", 8);
  put(&x, &version, 4);
  return x;
}

static void refused(const char *path, const char *why) {
  pipe_ckpt_reader r;
  core_error_clear();
  cr_assert_eq(pipe_ckpt_open(&r, path), CORE_EINPUT, "accepted (wanted '%s')", why);
  cr_assert(strstr(core_error_msg(), why), "'%s' lacks '%s'", core_error_msg(), why);
}

Test(ckpt, each_structural_check_with_a_valid_hash) {
  char path[] = "/tmp/brigade_ckpt_XXXXXX";
  close(mkstemp(path));
  bytes x = header(1);
  put_record(&x, "step", PIPE_CKPT_I64, 1, 8);
  finish(&x, 1, path);
  pipe_ckpt_reader r; /* the well-formed base */
  cr_assert_eq(pipe_ckpt_open(&r, path), CORE_OK, "%s", core_error_msg());
  pipe_ckpt_close(&r);

  x = header(2), put_record(&x, "step", PIPE_CKPT_I64, 1, 8), finish(&x, 1, path);
  refused(path, "unsupported version");
  x = header(1), put_record(&x, "step", PIPE_CKPT_I64, 1, 8), finish(&x, 3, path);
  refused(path, "record count larger than the file");
  x = header(1), put_record(&x, "a", PIPE_CKPT_BYTES, 20, 20), finish(&x, 2, path);
  refused(path, "record header past the end");
  x = header(1), put_record(&x, "step", PIPE_CKPT_I64, 1, 8), x.b[12] = 40, finish(&x, 1, path);
  refused(path, "record name past the end");
  /* a name that fits, but leaves no room for the type and count after it */
  x = header(1), put_record(&x, "step", PIPE_CKPT_I64, 1, 8), x.b[12] = 20, finish(&x, 1, path);
  refused(path, "record name past the end");
  x = header(1), put_record(&x, "step", 3, 1, 8), finish(&x, 1, path);
  refused(path, "unknown record type");
  x = header(1), put_record(&x, "step", PIPE_CKPT_I64, 2, 8), finish(&x, 1, path);
  refused(path, "record data past the end");
  x = header(1), put_record(&x, "step", PIPE_CKPT_I64, 1, 9), finish(&x, 1, path);
  refused(path, "trailing bytes after the last record");
  unlink(path);
}
