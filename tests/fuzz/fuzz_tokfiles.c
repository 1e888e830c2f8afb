/* libFuzzer target: bytes as GPT-2's two tokenizer files for `tokenize`, `sample` and the
 * tokenizer.* config keys: a vocab.json and a merges.txt, the input's first line break that
 * follows a '}' (or its end) between them. Loaded (pipe_bpe_load); when they load, a fixed text
 * is encoded and every id decoded. Built by `make fuzz` with clang. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "pipe/bpe.h"
#include "tests/fuzz/fuzz_files.h"

static char vocab[64], merges[64];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!vocab[0]) {
    snprintf(vocab, sizeof vocab, "/tmp/brigade_fuzz_vocab_%d.json", (int)getpid());
    snprintf(merges, sizeof merges, "/tmp/brigade_fuzz_merges_%d.txt", (int)getpid());
  }
  size_t cut = size;
  for (size_t i = 1; i < size; i++)
    if (data[i] == '\n' && data[i - 1] == '}') {
      cut = i + 1;
      break;
    }
  fuzz_write(vocab, data, cut), fuzz_write(merges, data + cut, size - cut);
  pipe_bpe *b = NULL;
  if (pipe_bpe_load(&b, vocab, merges) == CORE_OK) {
    static const char text[] = "Hello the world's  test\ncaf\xc3\xa9 1999! \xe6\x97\xa5\xe6\x9c\xac";
    int32_t *ids = NULL;
    size_t n = 0;
    if (pipe_bpe_encode(b, text, sizeof text - 1, &ids, &n) == CORE_OK)
      for (size_t i = 0; i < n; i++) {
        char buf[256];
        if (pipe_bpe_decode(b, ids[i], buf, sizeof buf) < 0) abort(); /* an id it gave decodes */
      }
    free(ids);
    for (int id = -1; id <= pipe_bpe_vocab(b) && id < 70000; id++) {
      char buf[64];
      pipe_bpe_decode(b, id, buf, sizeof buf);
    }
    pipe_bpe_free(b);
  }
  if (strlen(core_error_msg()) >= 1024) abort(); /* messages stay bounded */
  unlink(vocab), unlink(merges);
  return 0;
}
