/* Data files: both formats, splits, deterministic batches, malformed files. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "pipe/data.h"

static char *write_tmp(const void *data, size_t n) {
  char *path = strdup("/tmp/brigade_data_XXXXXX");
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  cr_assert_eq(write(fd, data, n), (ssize_t)n);
  close(fd);
  return path;
}

Test(data, bytes_split_and_batches) {
  char text[1000];
  for (int i = 0; i < 1000; i++) text[i] = (char)('a' + i % 26);
  char *path = write_tmp(text, sizeof text);
  pipe_data d;
  cr_assert_eq(pipe_data_open(&d, path, NULL, 0.1, 16), CORE_OK, "%s", core_error_msg());
  cr_assert_eq(d.vocab, 256);
  cr_assert_eq(d.n_train, 900);
  cr_assert_eq(d.n_val, 100);
  int32_t in[4 * 16], tg[4 * 16], in2[4 * 16], tg2[4 * 16];
  pipe_data_batch(&d, PIPE_TRAIN, 7, 3, 0, 1, 4, 16, in, tg);
  pipe_data_batch(&d, PIPE_TRAIN, 7, 3, 0, 1, 4, 16, in2, tg2);
  cr_assert(memcmp(in, in2, sizeof in) == 0 && memcmp(tg, tg2, sizeof tg) == 0);
  for (int i = 0; i < 4 * 16; i++) {
    cr_assert_eq(tg[i], 'a' + (in[i] - 'a' + 1) % 26); /* target is the next byte */
  }
  pipe_data_batch(&d, PIPE_TRAIN, 7, 3, 1, 1, 4, 16, in2, tg2); /* other data rank: other samples */
  cr_assert(memcmp(in, in2, sizeof in) != 0);
  pipe_data_free(&d);
  unlink(path), free(path);
}

Test(data, token_file) {
  size_t ntok = 300;
  size_t bytes = 256 * 4 + ntok * 2;
  unsigned char *buf = calloc(1, bytes);
  int32_t hdr[3] = {20240520, 1, (int32_t)ntok};
  memcpy(buf, hdr, sizeof hdr);
  uint16_t *t = (uint16_t *)(buf + 1024);
  for (size_t i = 0; i < ntok; i++) t[i] = (uint16_t)(i * 97 % 50257);
  char *path = write_tmp(buf, bytes);
  pipe_data d;
  cr_assert_eq(pipe_data_open(&d, path, NULL, 0.2, 8), CORE_OK, "%s", core_error_msg());
  cr_assert(d.is_tokens);
  cr_assert_eq(d.n, ntok);
  int32_t in[8], tg[8];
  pipe_data_batch(&d, PIPE_VAL, 1, 0, 0, 0, 1, 8, in, tg);
  /* token i of the file is 97 i: the batch is 8 consecutive tokens of the validation split (the
   * last fifth, tokens 240..299), each target the token after its input */
  int o = in[0] / 97;
  cr_assert(in[0] % 97 == 0 && o >= 240 && o + 8 < 300, "the first input %d is not a validation token", in[0]);
  for (int i = 0; i < 8; i++)
    cr_assert(in[i] == 97 * (o + i) && tg[i] == 97 * (o + i + 1), "position %d: input %d target %d, from token %d",
              i, in[i], tg[i], o);
  pipe_data_free(&d);
  unlink(path), free(path);
  /* truncated: header claims more tokens than present */
  hdr[2] = 100000;
  memcpy(buf, hdr, sizeof hdr);
  path = write_tmp(buf, bytes);
  core_error_clear();
  cr_assert_eq(pipe_data_open(&d, path, NULL, 0.1, 8), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "header says 100000 tokens"), "%s", core_error_msg());
  unlink(path), free(path);
  /* wrong version */
  hdr[1] = 7, hdr[2] = (int32_t)ntok;
  memcpy(buf, hdr, sizeof hdr);
  path = write_tmp(buf, bytes);
  cr_assert_eq(pipe_data_open(&d, path, NULL, 0.1, 8), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "version 7"));
  unlink(path), free(path);
  path = write_tmp(buf, 100); /* magic but truncated header */
  cr_assert_eq(pipe_data_open(&d, path, NULL, 0.1, 8), CORE_EINPUT);
  unlink(path), free(path);
  free(buf);
}

Test(data, missing_or_short_files) {
  pipe_data d;
  cr_assert_eq(pipe_data_open(&d, "/nonexistent/file.txt", NULL, 0.1, 8), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "/nonexistent/file.txt"));
  char *path = write_tmp("short", 5);
  cr_assert_eq(pipe_data_open(&d, path, NULL, 0.1, 64), CORE_EINPUT);
  cr_assert_eq(pipe_data_open(&d, path, NULL, 1.5, 2), CORE_EINPUT);
  unlink(path), free(path);
  cr_assert_eq(pipe_data_open(&d, "/tmp", NULL, 0.1, 8), CORE_EINPUT);
}

/* A separate validation file: one too short for a sequence (or empty) is an error naming that
 * file, not the training file, and is never silently dropped; and it must have the training
 * file's format (bytes vs llm.c tokens), or the two splits would be tokenized differently. */
Test(data, validation_file) {
  char text[200];
  for (int i = 0; i < 200; i++) text[i] = (char)('a' + i % 26);
  char *train = write_tmp(text, sizeof text), *shortv = write_tmp("abcde", 5), *empty = write_tmp("", 0);
  pipe_data d;
  core_error_clear();
  cr_assert_eq(pipe_data_open(&d, train, shortv, 0.1, 8), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), shortv) && strstr(core_error_msg(), "holds 5 tokens"), "%s", core_error_msg());
  core_error_clear();
  cr_assert_eq(pipe_data_open(&d, train, empty, 0.1, 8), CORE_EINPUT, "an empty validation file was accepted");
  cr_assert(strstr(core_error_msg(), empty) && strstr(core_error_msg(), "holds 0 tokens"), "%s", core_error_msg());
  unsigned char buf[1024 + 2 * 50] = {0};
  int32_t hdr[3] = {20240520, 1, 50};
  memcpy(buf, hdr, sizeof hdr);
  char *tokens = write_tmp(buf, sizeof buf);
  core_error_clear();
  cr_assert_eq(pipe_data_open(&d, train, tokens, 0.1, 8), CORE_EINPUT, "text + token file accepted");
  cr_assert(strstr(core_error_msg(), tokens) && strstr(core_error_msg(), "same format"), "%s", core_error_msg());
  cr_assert_eq(pipe_data_open(&d, tokens, train, 0.1, 8), CORE_EINPUT, "token + text file accepted");
  cr_assert_eq(pipe_data_open(&d, train, train, 0.1, 8), CORE_OK, "%s", core_error_msg()); /* still fine */
  cr_assert_eq(d.n_val, 200);
  pipe_data_free(&d);
  unlink(train), unlink(shortv), unlink(empty), unlink(tokens);
  free(train), free(shortv), free(empty), free(tokens);
}

/* data.order = "sequential": micro-batch k = step x per_step + mb is the B rows of T tokens from
 * token k x B x T (llm.c's DataLoader), targets the next tokens, wrapping to the start when the
 * next batch and its last target would not fit; validation the same way from its own start. */
Test(data, sequential_order_reads_the_file_in_order) {
  char raw[1000]; /* bytes: token i is byte i */
  for (int i = 0; i < 1000; i++) raw[i] = (char)(i * 7 % 251);
  char *path = write_tmp(raw, sizeof raw);
  pipe_data d;
  cr_assert_eq(pipe_data_open(&d, path, NULL, 0.1, 8), CORE_OK, "%s", core_error_msg());
  d.sequential = 1, d.per_step = 3;
  int32_t in[2 * 8], tg[2 * 8];
  size_t fit = (d.n_train - 1) / 16; /* whole batches of 2 x 8 in the 900 training tokens */
  for (long step = 0; step < 30; step++)
    for (int mb = 0; mb < 3; mb++) {
      pipe_data_batch(&d, PIPE_TRAIN, 7, step, 0, mb, 2, 8, in, tg);
      size_t start = ((size_t)(step * 3 + mb) % fit) * 16;
      for (int i = 0; i < 16; i++) {
        cr_assert_eq(in[i], (uint8_t)raw[start + i], "step %ld mb %d position %d", step, mb, i);
        cr_assert_eq(tg[i], (uint8_t)raw[start + i + 1]);
      }
    }
  pipe_data_batch(&d, PIPE_VAL, 7, 0, 0, 1, 2, 8, in, tg); /* validation batch 1: from token 16 of its split */
  for (int i = 0; i < 16; i++) cr_assert_eq(in[i], (uint8_t)raw[900 + 16 + i]);
  pipe_data_free(&d);
  unlink(path), free(path);
}
