/* libFuzzer target: a schedule CSV through the importer, and, when it parses, lowering and the
 * verifier (what `brigade sim --schedule-file` does). Built by `make fuzz` with clang. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "schedule/schedule.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (memchr(data, 0, size)) return 0; /* sched_csv_read refuses NUL bytes before parsing */
  char *text = malloc(size + 1);
  memcpy(text, data, size);
  text[size] = 0;
  sched_program compute;
  if (sched_csv_parse(text, "fuzz.csv", &compute) == CORE_OK) {
    sched_costs costs = sched_costs_unit();
    sched_program full;
    if (sched_lower(&compute, &costs, &full) == CORE_OK) {
      sched_verify(&full);
      sched_program_free(&full);
    }
    sched_program_free(&compute);
  }
  free(text);
  return 0;
}
