/* libFuzzer target: a training config as text through the loader and the training schema
 * (what `brigade train CONFIG` does before touching MPI). Built by `make fuzz` with clang. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "core/error.h"
#include "pipe/train_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  memcpy(text, data, size);
  text[size] = 0;
  size_t nkeys;
  const core_config_key *keys = train_cfg_schema(&nkeys);
  core_config *c = NULL;
  if (core_config_load_string(&c, text, "fuzz.cfg") == CORE_OK) {
    if (core_config_check(c, keys, nkeys) == CORE_OK) {
      /* the getters the trainer calls on a checked config */
      int64_t i;
      double d;
      const char *s;
      core_config_get_int_range(c, "train.steps", 100, 0, 1 << 30, &i);
      core_config_get_float(c, "optimizer.params.lr", 1e-3, &d);
      core_config_get_string(c, "pipeline.schedule", "1f1b", &s);
      int n = core_config_list_len(c, "model.layers");
      for (int k = 0; k < n && k < 64; k++) {
        core_config_elem_string(c, "model.layers", k, "type", NULL, &s);
        core_config_elem_int(c, "model.layers", k, "repeat", 1, &i);
      }
      char w[256];
      core_config_where(c, "model.layers", 0, w, sizeof w);
    }
    core_config_free(c);
  }
  if (strlen(core_error_msg()) >= 1024) abort(); /* messages stay bounded */
  free(text);
  return 0;
}
