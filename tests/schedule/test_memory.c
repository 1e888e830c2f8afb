/* Memory promises under real costs: for every family, random shapes (p in 2..32, m in 1..128) and
 * random per-op costs (F, B, W in [0.5, 2], comm in [0, 0.5], a W stash in (0, 1]), the compiled
 * program verifies and the simulator's peak_memory on every rank stays within the family's promise
 * (written out below, and sched_memory_cap must agree), with lowering's transfers and early
 * receives counted. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "core/error.h"
#include "schedule/schedule.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double urand(void) { /* xorshift64*, uniform in [0, 1) */
  rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
  return (double)((rng_state * 0x2545f4914f6cdd1dull) >> 11) / 9007199254740992.0;
}
static int irand(int lo, int hi) { return lo + (int)(urand() * (hi - lo + 1)); }

/* Each family's promise in stage activations, written out from the papers (not read from the
 * compiler, so that a wrong cap there fails here): GPipe m, 1F1B and zb-h1 min(p, m), zb-h2
 * min(2p - 1, m), zb-v and v-zb p, v-half floor((p + 2) / 2), v-min floor((p + 4) / 3), zb-auto
 * the user's limit; interleaved and dualpipev none. */
static double promised(sched_family f, int p, int m, double mem_limit) {
  switch (f) {
  case SCHED_GPIPE: return m;
  case SCHED_1F1B:
  case SCHED_ZB_H1: return p < m ? p : m;
  case SCHED_ZB_H2: return 2 * p - 1 < m ? 2 * p - 1 : m;
  case SCHED_ZB_V:
  case SCHED_V_ZB: return p;
  case SCHED_V_HALF: return (p + 2) / 2;
  case SCHED_V_MIN: return (p + 4) / 3;
  case SCHED_ZB_AUTO: return mem_limit;
  default: return INFINITY; /* interleaved, dualpipev: no promise */
  }
}

static void check_one(sched_family f, int p, int m, const sched_costs *c, double mem_limit) {
  int v = sched_family_is_v(f) ? 2 : f == SCHED_INTERLEAVED ? 2 : 1;
  if (f == SCHED_INTERLEAVED && m % p) m += p - m % p; /* interleaved wants m a multiple of p */
  sched_shape sh = {.family = f, .p = p, .v = v, .m = m, .mem_limit = mem_limit};
  char what[160];
  snprintf(what, sizeof what, "%s p=%d m=%d F=%.3f B=%.3f W=%.3f comm=%.3f w_stash=%.3f mem_limit=%g",
           sched_family_name(f), p, m, c->f, c->b, c->w, c->comm, c->w_stash, mem_limit);
  sched_program pr;
  cr_assert_eq(sched_compile(&sh, c, &pr), CORE_OK, "%s: %s", what, core_error_msg());
  cr_assert_eq(sched_verify(&pr), CORE_OK, "%s: %s", what, core_error_msg());
  sched_sim_result res;
  cr_assert_eq(sched_simulate(&pr, c, &res, NULL), CORE_OK, "%s: %s", what, core_error_msg());
  double cap = promised(f, p, m, mem_limit);
  cr_assert(sched_memory_cap(&sh) == cap || fabs(sched_memory_cap(&sh) - cap) < 1e-12, "%s: the compiler's cap %g, the promise %g", what,
            sched_memory_cap(&sh), cap);
  for (int r = 0; r < p; r++)
    cr_assert(res.ranks[r].peak_memory <= cap + 1e-9, "%s: rank %d peaks at %g stage activations, cap %g", what, r,
              res.ranks[r].peak_memory, cap);
  sched_sim_result_free(&res);
  sched_program_free(&pr);
}

static sched_costs random_costs(int split) {
  sched_costs c = sched_costs_unit();
  c.f = 0.5 + 1.5 * urand(), c.b = 0.5 + 1.5 * urand(), c.w = 0.5 + 1.5 * urand();
  c.comm = 0.5 * urand();
  c.w_stash = split ? 0.05 + 0.95 * urand() : 0;
  return c;
}

/* The families with a memory promise, each on 40 random shapes and costs; the small shapes are
 * drawn more often, where warm-up and cool-down are most of the program. */
static void run_family(sched_family f, int draws) {
  for (int k = 0; k < draws; k++) {
    int p = k % 4 == 0 ? irand(17, 32) : irand(2, 16);
    int m = k % 3 == 0 ? irand(1, 128) : irand(1, 4 * p);
    int split = sched_family_is_zb(f);
    sched_costs c = random_costs(split);
    double lim = 0;
    if (f == SCHED_ZB_AUTO) lim = k % 5 == 0 ? 1 + irand(0, 3 * p) : irand(1, 2 * p); /* also fractional limits below */
    if (f == SCHED_ZB_AUTO && k % 7 == 3) lim += 0.5;
    check_one(f, p, m > 128 ? 128 : m, &c, lim);
  }
}

Test(memory, gpipe_and_1f1b_hold_their_caps) {
  run_family(SCHED_GPIPE, 24);
  run_family(SCHED_1F1B, 40);
}
Test(memory, zb_h1_holds_1f1b_memory) { run_family(SCHED_ZB_H1, 40); }
Test(memory, zb_h2_holds_2p_minus_1) { run_family(SCHED_ZB_H2, 40); }
Test(memory, zb_auto_holds_its_limit) { run_family(SCHED_ZB_AUTO, 60); }
Test(memory, zb_v_and_v_zb_hold_p) {
  run_family(SCHED_ZB_V, 30);
  run_family(SCHED_V_ZB, 30);
}
Test(memory, v_half_holds_half) { run_family(SCHED_V_HALF, 40); }
Test(memory, v_min_holds_a_third) { run_family(SCHED_V_MIN, 40); }

/* The families with no cap still compile and verify under the same random costs. */
Test(memory, uncapped_families_verify) {
  sched_family fs[] = {SCHED_INTERLEAVED, SCHED_DUALPIPE_V};
  for (int i = 0; i < 2; i++)
    for (int k = 0; k < 20; k++) {
      sched_costs c = random_costs(fs[i] == SCHED_DUALPIPE_V);
      int p = irand(2, 16);
      check_one(fs[i], p, fs[i] == SCHED_DUALPIPE_V ? irand(2 * p, 64) : irand(1, 64), &c, 0); /* dualpipev: m >= 2p */
    }
}
