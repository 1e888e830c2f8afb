/* libFuzzer target: bytes as a checkpoint file through pipe_ckpt_open, then every record read
 * back (what --resume and `brigade sample` do). Built by `make fuzz` with clang. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "pipe/ckpt.h"
#include "tests/fuzz/fuzz_files.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_input_file("ckpt", ".ckpt", data, size);
  pipe_ckpt_reader r;
  if (pipe_ckpt_open(&r, path) == CORE_OK) {
    for (uint32_t i = 0; i < r.nrec; i++) {
      const pipe_ckpt_record *rec = &r.rec[i];
      size_t esize = rec->dtype == PIPE_CKPT_F32 ? 4 : rec->dtype == PIPE_CKPT_I64 ? 8 : 1;
      void *out = malloc(rec->count * esize + 1);
      if (pipe_ckpt_get(&r, rec->name, rec->dtype, out, rec->count) != CORE_OK) abort();
      free(out);
    }
    int64_t step;
    pipe_ckpt_get(&r, "step", PIPE_CKPT_I64, &step, 1);
    pipe_ckpt_close(&r);
  }
  unlink(path);
  return 0;
}
