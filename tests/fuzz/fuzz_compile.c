/* libFuzzer target: the schedule compiler on shapes and costs drawn from the input (what
 * `brigade sim --schedule F --stages P ... --cost-*` accepts), small enough to run thousands a
 * second: every family, p <= 12, m <= 40, per-op and per-stage costs from tiny to large, latencies
 * from none to many ops long, a W stash, zb-auto's memory limit, post-validation, ZeRO-3 gathers
 * and activation offload. A shape or cost the compiler refuses must come back as an error; one it
 * compiles must simulate for two steps, and (no offload) hold its family's memory promise on every
 * rank. Anything else aborts, which libFuzzer reports. Built by `make fuzz` with clang. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "schedule/schedule.h"

typedef struct {
  const uint8_t *d;
  size_t n, at;
} bytes;

static unsigned next(bytes *b) { return b->at < b->n ? b->d[b->at++] : 0; }

/* A cost: mostly around 1, sometimes tiny, large or zero where zero is allowed. */
static double cost(bytes *b, int zero_ok) {
  unsigned k = next(b);
  if (k < 8) return zero_ok ? 0 : 1e-6;
  if (k < 16) return 1e3 * (1 + k);
  return 0.05 + (k - 16) / 48.0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  bytes b = {data, size, 0};
  static const sched_family fams[] = {SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED, SCHED_ZB_H1, SCHED_ZB_H2,
                                      SCHED_ZB_V, SCHED_DUALPIPE_V, SCHED_ZB_AUTO, SCHED_V_MIN, SCHED_V_HALF,
                                      SCHED_V_ZB};
  sched_family f = fams[next(&b) % (sizeof fams / sizeof fams[0])];
  sched_shape sh = {.family = f, .p = 1 + (int)(next(&b) % 12), .m = 1 + (int)(next(&b) % 40)};
  sh.v = f == SCHED_INTERLEAVED ? 2 + (int)(next(&b) % 3) : sched_family_is_v(f) || f == SCHED_DUALPIPE_V ? 2 : 1;
  unsigned flags = next(&b);
  if (f == SCHED_ZB_AUTO && (flags & 1)) sh.mem_limit = 0.5 * (1 + next(&b) % 64);
  sh.post_validation = (flags >> 1) & 1;
  sh.zero3 = (flags >> 2) & 1;
  sh.offload = (flags >> 3) % 3; /* none, full, auto */
  if (sh.offload == 2) sh.offload_limit = 0.5 * (1 + next(&b) % 32);
  sched_costs c = sched_costs_unit();
  c.f = cost(&b, 0), c.b = cost(&b, 0), c.w = cost(&b, 1);
  c.comm = cost(&b, 1), c.step = cost(&b, 1), c.norm = cost(&b, 1), c.reduce = cost(&b, 1);
  if (flags & 32) c.w_stash = (1 + next(&b) % 20) / 20.0;
  if (sh.offload) c.offload = cost(&b, 1);
  double sf[48], sbk[48], sw[48];
  int S = sh.p * sh.v;
  if ((flags & 64) && S <= 48) {
    for (int s = 0; s < S; s++) sf[s] = cost(&b, 0), sbk[s] = cost(&b, 0), sw[s] = cost(&b, 1);
    c.stage_f = sf, c.stage_b = sbk, c.stage_w = sw;
  }
  sched_program pr;
  if (sched_compile(&sh, &c, &pr) != CORE_OK) {
    if (!core_error_msg()[0]) abort(); /* refused: with a reason */
    return 0;
  }
  sched_sim_result res;
  sched_step_sync sync = sh.post_validation ? SCHED_STEP_POST_VALIDATION : SCHED_STEP_BARRIER;
  if (sched_simulate_steps(&pr, &c, 2, sync, &res, NULL) != CORE_OK) {
    fprintf(stderr, "%s p=%d v=%d m=%d compiled but did not simulate: %s\n", sched_family_name(f), sh.p, sh.v, sh.m,
            core_error_msg());
    abort();
  }
  double cap = sched_memory_cap(&sh);
  for (int r = 0; r < sh.p && !sh.offload && isfinite(cap); r++)
    if (!(res.ranks[r].peak_memory <= cap + 1e-9)) {
      fprintf(stderr, "%s p=%d v=%d m=%d: rank %d peaks at %g stage activations, over the cap %g\n",
              sched_family_name(f), sh.p, sh.v, sh.m, r, res.ranks[r].peak_memory, cap);
      abort();
    }
  sched_sim_result_free(&res);
  sched_program_free(&pr);
  return 0;
}
