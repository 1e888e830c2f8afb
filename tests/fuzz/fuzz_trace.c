/* libFuzzer target: bytes as a Chrome trace for `brigade plot`: read into a timeline
 * (viz_read_trace), then drawn as ASCII and as SVG (to /dev/null), as `plot --ascii -o` does.
 * Seeds: tests/malformed/json and the traces the simulator writes for a few families, written
 * into the corpus at start-up. Built by `make fuzz` with clang. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "schedule/schedule.h"
#include "tests/fuzz/fuzz_files.h"
#include "viz/viz.h"

static FILE *sink;

/* The simulator's traces of three families (one chunk, interleaved, a V), into dir. */
static void write_seeds(const char *dir) {
  static const sched_shape shapes[] = {{.family = SCHED_1F1B, .p = 3, .v = 1, .m = 4},
                                       {.family = SCHED_INTERLEAVED, .p = 2, .v = 2, .m = 4},
                                       {.family = SCHED_ZB_V, .p = 2, .v = 2, .m = 4}};
  for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
    sched_costs c = sched_costs_unit();
    sched_program pr;
    sched_timeline tl;
    sched_sim_result res;
    if (sched_compile(&shapes[k], &c, &pr)) continue;
    sched_timeline_init(&tl, sched_family_name(pr.family), "unit", pr.p, pr.v, pr.m);
    if (!sched_simulate(&pr, &c, &res, &tl)) {
      char out[4096];
      snprintf(out, sizeof out, "%s/seed_%zu.json", dir, k);
      viz_write_trace(&tl, out);
      sched_sim_result_free(&res);
    }
    sched_timeline_free(&tl);
    sched_program_free(&pr);
  }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  sink = fopen("/dev/null", "w");
  if (!sink) abort();
  const char *dir = fuzz_corpus_dir(*argc, *argv);
  if (dir) write_seeds(dir);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_input_file("trace", ".json", data, size);
  sched_timeline tl;
  if (viz_read_trace(path, &tl) == CORE_OK) {
    viz_write_ascii(&tl, sink, 100);
    viz_fwrite_svg(&tl, sink);
    sched_timeline_free(&tl);
  }
  if (strlen(core_error_msg()) >= 1024) abort(); /* messages stay bounded */
  unlink(path);
  return 0;
}
