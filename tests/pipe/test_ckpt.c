/* Checkpoint files: round trip, and damaged files refused with a message, never a crash. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
  cr_assert(access("/tmp/nonexistent.tmp", F_OK) != 0);
  pipe_ckpt_reader r;
  cr_assert_eq(pipe_ckpt_open(&r, path), CORE_OK, "%s", core_error_msg());
  float a[100];
  cr_assert_eq(pipe_ckpt_get(&r, "layer.0.w", PIPE_CKPT_F32, a, 100), CORE_OK);
  cr_assert_eq(a[99], 49.5f);
  int64_t step;
  cr_assert_eq(pipe_ckpt_get(&r, "step", PIPE_CKPT_I64, &step, 1), CORE_OK);
  cr_assert_eq(step, 42);
  cr_assert_eq(pipe_ckpt_get(&r, "step", PIPE_CKPT_F32, a, 1), CORE_EINPUT);
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
