/* bench/sched_hash.c: a fingerprint of what the schedule pipeline produces, for changes meant to
 * keep it (speed work above all): every family over a grid of shapes (p 2, 3, 4, 8, 16; m 1, 3,
 * 8, 17, 64; comm 0, 0.5, 1.5; unit costs and per-stage ones) is compiled as `sim` compiles it
 * and simulated for 4 steps, every step run (sched_simulate_steps_all: the simulator's copies of
 * repeating steps equal it within rounding, which tests/schedule/test_sim.c checks); each
 * instruction's fields, the slot counts, the makespan, steady step, bubble rate, idle fraction and
 * every rank's peak memory and bytes, busy time, start, end and span are hashed (FNV-1a over their
 * bits), and for part of the grid every event of a 2-step timeline too, taken in one order (by
 * rank, then time: the order the simulator adds them in is not part of its result). Prints one hash per family and one for
 * all; `-v` also one line per shape. Run it before and after the change, on the same machine and
 * build flags: equal hashes mean the same programs and the same simulated figures, bit for bit. A
 * shape the family refuses (its error) is hashed as that error's text. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "schedule/events.h"
#include "schedule/internal.h"
#include "schedule/schedule.h"

static void mix(uint64_t *h, int64_t x) {
  for (int b = 0; b < 8; b++) *h = (*h ^ (uint64_t)((x >> (8 * b)) & 0xff)) * 0x100000001b3ULL;
}

static void mix_double(uint64_t *h, double d) {
  int64_t x;
  memcpy(&x, &d, sizeof x);
  mix(h, x);
}

static void mix_str(uint64_t *h, const char *s) {
  for (; *s; s++) mix(h, *s);
}

/* Events in one order whatever order the simulator adds them in: by rank, then time. */
static int by_rank_time(const void *a, const void *b) {
  const sched_event *x = a, *y = b;
  if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
  if (x->start != y->start) return x->start < y->start ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  int kx[4] = {x->op, x->mb, x->chunk, x->peer}, ky[4] = {y->op, y->mb, y->chunk, y->peer};
  for (int i = 0; i < 4; i++)
    if (kx[i] != ky[i]) return kx[i] < ky[i] ? -1 : 1;
  return 0;
}

/* One shape: compiled, simulated, hashed into *h. */
static void shape(uint64_t *h, sched_family f, int p, int m, double comm, int per_stage, int events, int verbose) {
  int v = f == SCHED_INTERLEAVED || sched_family_is_v(f) ? 2 : 1;
  sched_step_sync sync = sched_default_step_sync(f);
  sched_shape sh = {.family = f, .p = p, .v = v, .m = m, .post_validation = sync == SCHED_STEP_POST_VALIDATION};
  sched_costs c = sched_costs_unit();
  c.comm = comm;
  double sf[64], sb[64], sw[64];
  if (per_stage) {
    for (int s = 0; s < p * v; s++) sf[s] = 1 + 0.3 * (s % 3), sb[s] = 2 - 0.25 * (s % 2), sw[s] = 0.7 + 0.1 * (s % 4);
    c.stage_f = sf, c.stage_b = sb, c.stage_w = sw;
  }
  uint64_t one = 1469598103934665603ULL;
  sched_program pr;
  sched_sim_result res;
  if (sched_compile(&sh, &c, &pr) != CORE_OK) {
    mix_str(&one, core_error_msg());
  } else {
    for (int r = 0; r < p; r++) {
      mix(&one, pr.streams[r].len), mix(&one, pr.nslots[r]), mix(&one, pr.naslots[r]);
      for (int i = 0; i < pr.streams[r].len; i++) {
        const sched_instr *in = &pr.streams[r].ins[i];
        mix(&one, in->op), mix(&one, in->mb), mix(&one, in->chunk), mix(&one, in->peer), mix(&one, in->slot), mix(&one, in->aslot);
      }
    }
    if (events) {
      sched_timeline tl;
      sched_sim_result r2;
      sched_timeline_init(&tl, sched_family_name(f), "unit", p, v, m);
      if (sched_simulate_steps_all(&pr, &c, 2, sync, &r2, &tl) == CORE_OK) {
        qsort(tl.ev, (size_t)tl.n, sizeof *tl.ev, by_rank_time);
        for (int e = 0; e < tl.n; e++) {
          const sched_event *ev = &tl.ev[e];
          mix(&one, ev->rank), mix(&one, ev->op), mix(&one, ev->mb), mix(&one, ev->chunk), mix(&one, ev->stage), mix(&one, ev->peer);
          mix_double(&one, ev->start), mix_double(&one, ev->end);
        }
        sched_sim_result_free(&r2);
      } else {
        mix_str(&one, core_error_msg());
      }
      sched_timeline_free(&tl);
    }
    if (sched_simulate_steps_all(&pr, &c, 4, sync, &res, NULL) == CORE_OK) {
      mix_double(&one, res.makespan), mix_double(&one, res.steady_step_time), mix_double(&one, res.bubble_rate);
      mix_double(&one, res.idle_fraction);
      for (int r = 0; r < p; r++) {
        const sched_rank_stats *rs = &res.ranks[r];
        mix_double(&one, rs->peak_memory), mix_double(&one, rs->span), mix_double(&one, rs->busy);
        mix_double(&one, rs->start), mix_double(&one, rs->end), mix_double(&one, rs->peak_bytes);
      }
      sched_sim_result_free(&res);
    } else {
      mix_str(&one, core_error_msg());
    }
    sched_program_free(&pr);
  }
  if (verbose) printf("  %s p=%d m=%d comm=%g per-stage=%d: %016llx\n", sched_family_name(f), p, m, comm, per_stage, (unsigned long long)one);
  mix(h, (int64_t)one);
}

int main(int argc, char **argv) {
  int verbose = argc > 1 && !strcmp(argv[1], "-v");
  static const int ps[] = {2, 3, 4, 8, 16}, ms[] = {1, 3, 8, 17, 64};
  static const double comms[] = {0, 0.5, 1.5};
  uint64_t all = 1469598103934665603ULL;
  int shapes = 0;
  for (int fi = 0; fi < SCHED_FAMILY_COUNT; fi++) {
    sched_family f = (sched_family)fi;
    if (f == SCHED_INFERENCE || f == SCHED_CUSTOM) continue; /* no compiler of their own here */
    uint64_t h = 1469598103934665603ULL;
    int n = 0;
    for (int pi = 0; pi < 5; pi++)
      for (int mi = 0; mi < 5; mi++)
        for (int ci = 0; ci < 3; ci++)
          for (int cv = 0; cv < 2; cv++) {
            if (f == SCHED_INTERLEAVED && ms[mi] % ps[pi]) continue; /* its micro-batches in whole rounds */
            shape(&h, f, ps[pi], ms[mi], comms[ci], cv, pi < 3 && ci == 1, verbose);
            n++;
          }
    printf("%-12s %4d shapes  %016llx\n", sched_family_name(f), n, (unsigned long long)h);
    mix(&all, (int64_t)h);
    shapes += n;
  }
  printf("all          %4d shapes  %016llx\n", shapes, (unsigned long long)all);
  return 0;
}
