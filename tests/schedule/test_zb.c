/* Zero-bubble families: the paper's numbers (arXiv 2401.10241, Table 2) under its semantics:
 * unit costs F = B = W = 1, comm 0, bubble = max span - m(F+B+W). */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "schedule/schedule.h"

static double span_of(sched_family f, int p, int m, sched_sim_result *res, sched_program *pr) {
  sched_shape sh = {.family = f, .p = p, .v = 1, .m = m};
  sched_costs c = sched_costs_unit();
  cr_assert_eq(sched_compile(&sh, &c, pr), CORE_OK, "%s p=%d m=%d: %s", sched_family_name(f), p,
               m, core_error_msg());
  cr_assert_eq(sched_simulate(pr, &c, res, NULL), CORE_OK);
  double s = 0;
  for (int r = 0; r < p; r++) s = res->ranks[r].span > s ? res->ranks[r].span : s;
  return s;
}

Test(zb, paper_example_p4_m8) {
  sched_sim_result res;
  sched_program pr;
  double want[3] = {33, 27, 24};
  sched_family fam[3] = {SCHED_1F1B, SCHED_ZB_H1, SCHED_ZB_H2};
  for (int k = 0; k < 3; k++) {
    double s = span_of(fam[k], 4, 8, &res, &pr);
    cr_assert_eq(s, want[k], "%s: span %g, paper %g", sched_family_name(fam[k]), s, want[k]);
    sched_sim_result_free(&res);
    sched_program_free(&pr);
  }
}

Test(zb, closed_forms_and_verification) {
  for (int p = 1; p <= 16; p++)
    for (int m = 1; m <= 64; m++)
      for (int f = SCHED_ZB_H1; f <= SCHED_ZB_H2; f++) {
        sched_sim_result res;
        sched_program pr;
        double s = span_of((sched_family)f, p, m, &res, &pr); /* compiles and verifies */
        /* (p-1)(F+B-W) for zb-h1 once m >= p; (p-1)(F+B-2W) = 0 for zb-h2 once m >= 2p-1 */
        if (f == SCHED_ZB_H1 && m >= p)
          cr_assert_eq(s - 3.0 * m, p - 1.0, "zb-h1 p=%d m=%d bubble %g", p, m, s - 3.0 * m);
        if (f == SCHED_ZB_H2 && m >= 2 * p - 1)
          cr_assert_eq(s - 3.0 * m, 0.0, "zb-h2 p=%d m=%d bubble %g", p, m, s - 3.0 * m);
        /* never worse than 1F1B's (p-1)(F+B+W) */
        cr_assert(s - 3.0 * m <= 3.0 * (p - 1) + 1e-9);
        int ws = 0;
        for (int i = 0; i < pr.streams[0].len; i++) ws += pr.streams[0].ins[i].op == SCHED_BACKWARD_WEIGHT;
        cr_assert_eq(ws, m);
        sched_sim_result_free(&res);
        sched_program_free(&pr);
      }
}

Test(zb, w_never_before_its_i_and_costs_steer_placement) {
  sched_shape sh = {.family = SCHED_ZB_H1, .p = 4, .v = 1, .m = 8};
  sched_costs c = sched_costs_unit();
  c.w = 0.5, c.comm = 0.1;
  sched_program pr;
  cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_OK, "%s", core_error_msg());
  for (int r = 0; r < 4; r++) {
    int seen_i[8] = {0};
    for (int i = 0; i < pr.streams[r].len; i++) {
      const sched_instr *in = &pr.streams[r].ins[i];
      if (in->op == SCHED_BACKWARD_INPUT) seen_i[in->mb] = 1;
      if (in->op == SCHED_BACKWARD_WEIGHT) cr_assert(seen_i[in->mb]);
    }
  }
  sched_program_free(&pr);
  sh.v = 2;
  cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_EINPUT);
}

/* zb-v in a V: the placement, p stages' activations per rank counting a pending W as its whole
 * slot (2p chunk slots), and no bubble at all (every rank's span is its 6m units of work, F = B =
 * W = 1 per chunk) once m >= 2p: the old order was bubble-free only by holding up to 6p - 2 chunk
 * slots, and the list scheduler alone, within 2p, left about p/2 units idle. */
Test(zb, zb_v_in_a_v_within_p_stages) {
  sched_costs c = sched_costs_unit();
  for (int p = 1; p <= 16; p++)
    for (int m = 1; m <= 64; m++) {
      sched_shape sh = {.family = SCHED_ZB_V, .p = p, .v = 2, .m = m};
      sched_program pr;
      cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_OK, "zb-v p=%d m=%d: %s", p, m, core_error_msg());
      sched_sim_result res;
      cr_assert_eq(sched_simulate(&pr, &c, &res, NULL), CORE_OK);
      double s = 0;
      for (int r = 0; r < p; r++) {
        cr_assert_eq(pr.stage_of[2 * r], r);
        cr_assert_eq(pr.stage_of[2 * r + 1], 2 * p - 1 - r);
        cr_assert(res.ranks[r].peak_activations <= 2 * p, "rank %d holds %d slots", r, res.ranks[r].peak_activations);
        s = res.ranks[r].span > s ? res.ranks[r].span : s;
      }
      if (m >= 2 * p) cr_assert(s <= 6.0 * m + 1e-9, "zb-v p=%d m=%d: span %g, busy %g", p, m, s, 6.0 * m);
      sched_sim_result_free(&res);
      sched_program_free(&pr);
    }
}

/* Latencies used to stall the list scheduler of zb-v (every rank at its memory limit, waiting
 * on another's forward); the limits now give way when nothing else can move. Every zero-bubble
 * and V family, under latencies and under per-stage costs that differ from stage to stage
 * (forwards 0.6..1.4, backwards 0.8..1.6, W's 0.3..1.1), compiles and verifies. */
Test(zb, every_family_compiles_with_latency_and_uneven_costs, .timeout = 120) {
  const sched_family fams[] = {SCHED_ZB_H1, SCHED_ZB_H2, SCHED_ZB_AUTO, SCHED_ZB_V, SCHED_V_ZB, SCHED_V_HALF, SCHED_V_MIN};
  double comms[] = {0.1, 0.2, 0.5, 1.5}, sf[24], sb[24], sw[24];
  for (int s = 0; s < 24; s++)
    sf[s] = 0.6 + 0.2 * (s * 7 % 5), sb[s] = 0.8 + 0.2 * (s * 3 % 5), sw[s] = 0.3 + 0.2 * (s * 11 % 5);
  for (int fi = 0; fi < 7; fi++)
    for (int ci = 0; ci < 5; ci++)
      for (int p = 1; p <= 12; p++)
        for (int m = 1; m <= 40; m += 3) {
          sched_family f = fams[fi];
          sched_costs c = sched_costs_unit();
          if (ci < 4) c.comm = comms[ci], c.w = ci == 3 ? 0.5 : 1;
          else c.comm = 0.3, c.stage_f = sf, c.stage_b = sb, c.stage_w = sw; /* uneven stages */
          sched_shape sh = {.family = f, .p = p, .v = sched_family_is_v(f) ? 2 : 1, .m = m,
                            .mem_limit = f == SCHED_ZB_AUTO ? (p + 1) / 2 : 0};
          sched_program pr;
          cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_OK, "%s p=%d m=%d comm=%g%s: %s", sched_family_name(f), p, m,
                       c.comm, c.stage_f ? ", uneven stages" : "", core_error_msg());
          sched_program_free(&pr);
        }
}

static int peak_of(const sched_sim_result *res) {
  int pk = 0;
  for (int r = 0; r < res->p; r++) pk = res->ranks[r].peak_activations > pk ? res->ranks[r].peak_activations : pk;
  return pk;
}

/* --max-pending-w: every zero-bubble family still compiles and verifies for p in 2..16 and m in
 * 1..64 under a user limit on pending W's; the compute order honours the limit; and a smaller
 * limit never raises peak_activations. (It need not lower it: W's and open forwards share one
 * budget, so the room fewer pending W's leave is open to forwards, up to the family's cap.) */
Test(zb, max_pending_w_compiles_verifies_and_never_raises_peak) {
  sched_costs c = sched_costs_unit();
  for (int f = SCHED_ZB_H1; f <= SCHED_ZB_V; f++)
    for (int p = 2; p <= 16; p++)
      for (int m = 1; m <= 64; m++) {
        int peak[3], lims[3] = {0, 2, 1}; /* the default, then smaller user limits */
        for (int k = 0; k < 3; k++) {
          sched_shape sh = {.family = (sched_family)f, .p = p, .v = f == SCHED_ZB_V ? 2 : 1, .m = m,
                            .max_pending_w = lims[k]};
          sched_program pr;
          cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_OK, "%s p=%d m=%d max_pending_w=%d: %s",
                       sched_family_name((sched_family)f), p, m, lims[k], core_error_msg());
          for (int r = 0; r < p && lims[k]; r++) {
            int pending = 0;
            for (int i = 0; i < pr.streams[r].len; i++) {
              pending += pr.streams[r].ins[i].op == SCHED_BACKWARD_INPUT;
              pending -= pr.streams[r].ins[i].op == SCHED_BACKWARD_WEIGHT;
              cr_assert(pending <= lims[k], "%s p=%d m=%d rank %d: %d W's pending, limit %d",
                        sched_family_name((sched_family)f), p, m, r, pending, lims[k]);
            }
          }
          sched_sim_result res;
          cr_assert_eq(sched_simulate(&pr, &c, &res, NULL), CORE_OK);
          peak[k] = peak_of(&res);
          sched_sim_result_free(&res);
          sched_program_free(&pr);
        }
        cr_assert(peak[2] <= peak[1] && peak[1] <= peak[0], "%s p=%d m=%d: peaks %d (default), %d (2), %d (1)",
                  sched_family_name((sched_family)f), p, m, peak[0], peak[1], peak[2]);
      }
}

Test(zb, max_pending_w_is_refused_where_it_means_nothing) {
  sched_costs c = sched_costs_unit();
  sched_program pr;
  sched_shape sh = {.family = SCHED_1F1B, .p = 4, .v = 1, .m = 8, .max_pending_w = 2};
  cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "--max-pending-w applies to zb-h1, zb-h2, zb-auto, zb-v"), "%s", core_error_msg());
  sh.family = SCHED_ZB_H1, sh.max_pending_w = -1;
  cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_EINPUT);
}

/* One memory budget per rank, read off the compute order (unit costs, with and without latency):
 * open forwards plus pending W's (each a whole slot) never above the family's cap in chunk slots
 * (zb-h1 p, zb-h2 2p - 1, zb-v 2p), and zb-h1 and zb-h2 open no more forwards than 1F1B's p - r
 * and 2(p - r) - 1 on rank r. */
Test(zb, one_memory_budget_per_rank_in_the_compute_order) {
  const double comms[] = {0, 0.25, 0.5, 1.5};
  for (int ci = 0; ci < 4; ci++)
    for (int f = SCHED_ZB_H1; f <= SCHED_ZB_V; f++)
      for (int p = 1; p <= 16; p++)
        for (int m = 1; m <= 48; m++) {
          sched_costs c = sched_costs_unit();
          c.comm = comms[ci];
          int v = f == SCHED_ZB_V ? 2 : 1;
          sched_shape sh = {.family = (sched_family)f, .p = p, .v = v, .m = m};
          sched_program pr;
          cr_assert_eq(sched_compile_compute(&sh, &c, &pr), CORE_OK, "%s", core_error_msg());
          for (int r = 0; r < p; r++) {
            int cap = f == SCHED_ZB_H1 ? p : f == SCHED_ZB_H2 ? 2 * p - 1 : 2 * p;
            int fcap = f == SCHED_ZB_H1 ? p - r : f == SCHED_ZB_H2 ? 2 * (p - r) - 1 : 2 * p;
            int open = 0, pending = 0;
            for (int i = 0; i < pr.streams[r].len; i++) {
              sched_op op = (sched_op)pr.streams[r].ins[i].op;
              if (op == SCHED_FORWARD) open++;
              if (op == SCHED_BACKWARD_INPUT) open--, pending++;
              if (op == SCHED_BACKWARD_WEIGHT) pending--;
              cr_assert(open <= fcap && open + pending <= cap,
                        "%s p=%d m=%d comm=%g rank %d #%d: %d forwards open (at most %d), %d W's pending, "
                        "budget %d", sched_family_name((sched_family)f), p, m, c.comm, r, i, open, fcap,
                        pending, cap);
            }
          }
          sched_program_free(&pr);
        }
}

/* On one rank there is no transfer, so a latency cannot change anything: every family compiles
 * to the same program with comm 0 and comm 0.7 (zb-v's turn from chunk 0 to chunk 1 and the
 * loss at the last stage stay on the rank). */
Test(zb, latency_means_nothing_on_one_rank) {
  for (int f = SCHED_GPIPE; f < SCHED_CUSTOM; f++)
    for (int m = 1; m <= 16; m++)
      for (int k = 0; k < 2; k++) {
        int v = f == SCHED_INTERLEAVED || sched_family_is_v((sched_family)f) ? 2 : 1;
        if (f == SCHED_DUALPIPE_V && m < 2) continue;
        sched_shape sh = {.family = (sched_family)f, .p = 1, .v = v, .m = m};
        sched_costs c0 = sched_costs_unit(), c1;
        c0.w = k ? 0.5 : 1;
        c1 = c0, c1.comm = 0.7;
        sched_program a, b;
        cr_assert_eq(sched_compile(&sh, &c0, &a), CORE_OK, "%s", core_error_msg());
        cr_assert_eq(sched_compile(&sh, &c1, &b), CORE_OK, "%s", core_error_msg());
        cr_assert(sched_program_equal(&a, &b), "%s p=1 m=%d w=%g: comm 0.7 changed the program",
                  sched_family_name((sched_family)f), m, c0.w);
        sched_program_free(&a), sched_program_free(&b);
      }
}

/* zb-v's point: cutting each rank's layers into two chunks in a V is never slower than running
 * them as one chunk (costs doubled) under zb-h1 or 1F1B, whatever m (no latency, unit costs). */
Test(zb, zb_v_never_slower_than_one_chunk_per_rank) {
  for (int p = 1; p <= 12; p++)
    for (int m = 1; m <= 30; m++) {
      double span[3];
      sched_family fam[3] = {SCHED_ZB_V, SCHED_ZB_H1, SCHED_1F1B};
      for (int k = 0; k < 3; k++) {
        sched_shape sh = {.family = fam[k], .p = p, .v = k ? 1 : 2, .m = m};
        sched_costs c = sched_costs_unit();
        if (k) c.f = c.b = c.w = 2;
        sched_program pr;
        cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_OK, "%s", core_error_msg());
        sched_sim_result res;
        cr_assert_eq(sched_simulate(&pr, &c, &res, NULL), CORE_OK);
        span[k] = res.makespan;
        sched_sim_result_free(&res);
        sched_program_free(&pr);
      }
      cr_assert(span[0] <= span[1] + 1e-9 && span[0] <= span[2] + 1e-9, "p=%d m=%d: zb-v %g, zb-h1 %g, 1f1b %g", p, m,
                span[0], span[1], span[2]);
    }
}

/* The simulated step of zb-v (compiled, lowered, unit costs) and the most chunk stashes any rank
 * holds between F and I. */
static double zb_v_step(int p, int m, double comm, int *open_peak) {
  sched_shape sh = {.family = SCHED_ZB_V, .p = p, .v = 2, .m = m};
  sched_costs c = sched_costs_unit();
  c.comm = comm;
  sched_program pr;
  cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_OK, "zb-v p=%d m=%d comm=%g: %s", p, m, comm,
               core_error_msg());
  *open_peak = 0;
  for (int r = 0; r < p; r++)
    for (int i = 0, open = 0; i < pr.streams[r].len; i++) {
      open += pr.streams[r].ins[i].op == SCHED_FORWARD;
      open -= pr.streams[r].ins[i].op == SCHED_BACKWARD_INPUT;
      *open_peak = open > *open_peak ? open : *open_peak;
    }
  sched_sim_result res;
  cr_assert_eq(sched_simulate(&pr, &c, &res, NULL), CORE_OK);
  double step = res.makespan;
  sched_sim_result_free(&res);
  sched_program_free(&pr);
  return step;
}

/* A latency lengthens zb-v's step by a small multiple of it per pipeline hop, within the memory
 * limit. A micro-batch's forward crosses 2(p-1) rank boundaries down and back up the V, and its
 * input gradient as many: 4(p-1) hops, each adding comm once to its dependency chain. The bound
 * allows two per hop (the warm-up's chain and the drain's are different micro-batches'), measured
 * up to 1.93 (comm 0.25) and 1.3 (comm 0.5) here. The old list scheduler let chunk 0's forwards
 * fill every rank until the memory limit had to give way: up to 35 per hop (p=16 m=64: 399 at
 * comm 0, 931.5 at comm 0.25) and up to 32 stashes over the limit of 2p. Above comm 0.5 lowering
 * adds its own delays (ARCHITECTURE.md), so the bound is checked where it adds none. */
Test(zb, zb_v_latency_adds_a_small_multiple_per_hop) {
  const double comms[] = {0.25, 0.5}, k = 3;
  for (int p = 2; p <= 16; p++)
    for (int m = 1; m <= 64; m += 3) {
      int open0, open;
      double step0 = zb_v_step(p, m, 0, &open0);
      for (int ci = 0; ci < 2; ci++) {
        double step = zb_v_step(p, m, comms[ci], &open);
        double bound = step0 + k * comms[ci] * 4 * (p - 1);
        cr_assert(step <= bound + 1e-9, "zb-v p=%d m=%d comm=%g: step %g, comm 0 %g, bound %g", p,
                  m, comms[ci], step, step0, bound);
        int lim = 2 * p < 2 * m ? 2 * p : 2 * m;
        cr_assert(open <= lim, "zb-v p=%d m=%d comm=%g: %d stashes between F and I, limit %d", p,
                  m, comms[ci], open, lim);
      }
    }
}

/* v-half and v-min from their building block (arXiv 2405.15362): the bubbles of the block,
 * squeezed as the paper's greedy reordering does, were computed independently from the block's
 * offsets (a separate implementation of the same construction) for these shapes, with unit
 * costs and with the zero-bubble paper's measured ones. Each holds its memory cap, and with
 * unit costs and m >= 2p both beat 1F1B's bubble at a third (v-min) or half (v-half) of its
 * memory. */
Test(zb, v_half_and_v_min_from_their_building_block) {
  struct {
    sched_family f;
    int p, m;
    double unit, paper;
  } want[] = {
      {SCHED_V_HALF, 4, 8, 0.0943, 0.1707},  {SCHED_V_HALF, 8, 24, 0.1056, 0.1610},
      {SCHED_V_HALF, 8, 16, 0.1504, 0.2236}, {SCHED_V_HALF, 16, 64, 0.0965, 0.1423},
      {SCHED_V_MIN, 4, 8, 0.1864, 0.3319},   {SCHED_V_MIN, 8, 24, 0.1579, 0.3175},
      {SCHED_V_MIN, 8, 16, 0.2195, 0.3657},  {SCHED_V_MIN, 16, 64, 0.1332, 0.3011},
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    for (int paper = 0; paper < 2; paper++) {
      sched_costs c = sched_costs_unit();
      if (paper) c.f = 18.522, c.b = 18.086, c.w = 9.337, c.comm = 0.601;
      sched_shape sh = {.family = want[i].f, .p = want[i].p, .v = 2, .m = want[i].m};
      sched_program pr;
      sched_sim_result res;
      cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_OK, "%s", core_error_msg());
      cr_assert_eq(sched_simulate(&pr, &c, &res, NULL), CORE_OK);
      double w = paper ? want[i].paper : want[i].unit;
      cr_assert(fabs(res.bubble_rate - w) < 5e-5, "%s p=%d m=%d %s costs: bubble %.4f, the block gives %.4f",
                sched_family_name(want[i].f), want[i].p, want[i].m, paper ? "paper" : "unit", res.bubble_rate, w);
      for (int r = 0; r < want[i].p; r++)
        cr_assert_leq(res.ranks[r].peak_memory, sched_memory_cap(&sh) + 1e-9);
      sched_sim_result_free(&res);
      sched_program_free(&pr);
    }
  for (int p = 2; p <= 12; p++) {
    int m = 3 * p;
    sched_costs c = sched_costs_unit();
    double b[3];
    sched_family fam[3] = {SCHED_1F1B, SCHED_V_HALF, SCHED_V_MIN};
    for (int k = 0; k < 3; k++) {
      sched_shape sh = {.family = fam[k], .p = p, .v = k ? 2 : 1, .m = m};
      sched_program pr;
      sched_sim_result res;
      cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_OK, "%s", core_error_msg());
      cr_assert_eq(sched_simulate(&pr, &c, &res, NULL), CORE_OK);
      b[k] = res.bubble_rate;
      sched_sim_result_free(&res);
      sched_program_free(&pr);
    }
    cr_assert(b[1] < b[0] && b[2] < b[0], "p=%d m=%d: 1f1b %.4f, v-half %.4f, v-min %.4f", p, m, b[0], b[1], b[2]);
  }
}

static double paper_bubble(sched_family f, double mem_limit, double w_stash, double *peak) {
  sched_costs c = sched_costs_unit();
  c.f = 18.522, c.b = 18.086, c.w = 9.337, c.comm = 0.601, c.w_stash = w_stash;
  sched_shape sh = {.family = f, .p = 8, .v = sched_family_is_v(f) ? 2 : 1, .m = 24, .mem_limit = mem_limit};
  sched_program pr;
  sched_sim_result res;
  cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_OK, "%s", core_error_msg());
  cr_assert_eq(sched_simulate(&pr, &c, &res, NULL), CORE_OK);
  *peak = 0;
  for (int r = 0; r < 8; r++) *peak = res.ranks[r].peak_memory > *peak ? res.ranks[r].peak_memory : *peak;
  double b = res.bubble_rate;
  sched_sim_result_free(&res);
  sched_program_free(&pr);
  return b;
}

/* The zero-bubble paper's 1.5B model (p=8, m=24, its measured F, B, W and comm), against the
 * bubbles it reports to four digits: zb-h1 0.1585 within 1F1B's 8 M_B, zb-h2 0.1083 within 15,
 * its automatic ZB-2p 0.0433 at 16 M_B with a pending W holding M_W / M_B = 0.366 of a slot;
 * zb-auto at 8 M_B no worse than zb-h1, zb-v within 8 no worse than zb-h2. */
Test(zb, the_zero_bubble_papers_bubbles_at_its_measured_costs) {
  double pk, h1 = paper_bubble(SCHED_ZB_H1, 0, 0, &pk);
  cr_assert(h1 < 0.15855 && pk <= 8 + 1e-9, "zb-h1 %.5f at %g", h1, pk);
  double h2 = paper_bubble(SCHED_ZB_H2, 0, 0, &pk);
  cr_assert(h2 < 0.10835 && pk <= 15 + 1e-9, "zb-h2 %.5f at %g", h2, pk);
  double a16 = paper_bubble(SCHED_ZB_AUTO, 16, 0.366, &pk);
  cr_assert(a16 < 0.04335 && pk <= 16 + 1e-9, "zb-auto 16 %.5f at %g", a16, pk);
  double a8 = paper_bubble(SCHED_ZB_AUTO, 8, 0, &pk);
  cr_assert(a8 <= h1 + 1e-12 && pk <= 8 + 1e-9, "zb-auto 8 %.5f at %g, zb-h1 %.5f", a8, pk, h1);
  double zv = paper_bubble(SCHED_ZB_V, 0, 0, &pk);
  cr_assert(zv <= h2 && pk <= 8 + 1e-9, "zb-v %.5f at %g, zb-h2 %.5f", zv, pk, h2);
}

/* The paper's 12 measured set-ups (its code's table: p, m, F, B, W, comm in ms, hidden size, heads;
 * bench/zb_paper.sh prints the same comparison), each with the paper's memory model for a pending
 * W (M_W / M_B = 32h / (34h + 5 a s), s = 1024). Its 1F1B to four digits; zb-h1 and zb-h2 no worse
 * than its ZB-H1 and ZB-H2 within their caps; zb-auto at p no worse than zb-h1; zb-auto at 2p
 * within 2p, no worse than zb-h2, and at most the paper's ZB-2p (to its four digits); zb-v within
 * p and no worse than the paper's ZB-H2, which takes 2p - 1. */
static double setup_bubble(const double *s, sched_family f, double limit, double *peak) {
  int p = (int)s[0], m = (int)s[1];
  sched_costs c = sched_costs_unit();
  c.f = s[2], c.b = s[3], c.w = s[4], c.comm = s[5], c.w_stash = 32 * s[6] / (34 * s[6] + 5 * s[7] * 1024);
  sched_shape sh = {.family = f, .p = p, .v = sched_family_is_v(f) ? 2 : 1, .m = m, .mem_limit = limit};
  sched_program pr;
  sched_sim_result res;
  cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_OK, "%s", core_error_msg());
  cr_assert_eq(sched_simulate(&pr, &c, &res, NULL), CORE_OK);
  *peak = 0;
  for (int r = 0; r < p; r++) *peak = res.ranks[r].peak_memory > *peak ? res.ranks[r].peak_memory : *peak;
  double b = res.bubble_rate;
  sched_sim_result_free(&res);
  sched_program_free(&pr);
  return b;
}

Test(zb, the_papers_twelve_set_ups, .timeout = 120) {
  static const double set[12][12] = {
      /* p, m, F, B, W, comm, h, a; the paper's 1F1B, ZB-H1, ZB-H2, ZB-2p */
      {8, 24, 18.522, 18.086, 9.337, 0.601, 2304, 24, 0.2431, 0.1585, 0.1083, 0.0433},
      {8, 32, 18.513, 18.086, 9.331, 0.626, 2304, 24, 0.1985, 0.1242, 0.0837, 0.0039},
      {8, 64, 18.546, 18.097, 9.321, 0.762, 2304, 24, 0.1240, 0.0674, 0.0444, 0.0026},
      {8, 24, 29.718, 29.444, 19.927, 0.527, 4096, 32, 0.2347, 0.1323, 0.0698, 0.0029},
      {8, 32, 29.802, 29.428, 19.530, 0.577, 4096, 32, 0.1898, 0.1045, 0.0559, 0.0022},
      {8, 64, 29.935, 29.621, 19.388, 0.535, 4096, 32, 0.1091, 0.0554, 0.0294, 0.0010},
      {16, 48, 11.347, 11.248, 8.132, 0.377, 5120, 40, 0.2552, 0.1397, 0.0672, 0.0066},
      {16, 64, 11.307, 11.254, 8.101, 0.379, 5120, 40, 0.2082, 0.1088, 0.0516, 0.0054},
      {16, 128, 11.325, 11.308, 8.109, 0.378, 5120, 40, 0.1251, 0.0576, 0.0266, 0.0028},
      {32, 96, 10.419, 10.207, 7.715, 0.408, 6144, 48, 0.2646, 0.1421, 0.0641, 0.0038},
      {32, 128, 10.408, 10.204, 7.703, 0.408, 6144, 48, 0.2168, 0.1106, 0.0490, 0.0029},
      {32, 256, 10.402, 10.248, 7.698, 0.460, 6144, 48, 0.1352, 0.0594, 0.0257, 0.0018},
  };
  for (int i = 0; i < 12; i++) {
    const double *s = set[i];
    double p = s[0], pk, e = 5e-5; /* the paper's four digits */
    double b1 = setup_bubble(s, SCHED_1F1B, 0, &pk);
    cr_assert(fabs(b1 - s[8]) <= e && pk <= p + 1e-9, "set-up %d: 1f1b %.5f at %g, paper %.4f", i, b1, pk, s[8]);
    double h1 = setup_bubble(s, SCHED_ZB_H1, 0, &pk);
    cr_assert(h1 <= s[9] + e && pk <= p + 1e-9, "set-up %d: zb-h1 %.5f at %g, paper %.4f", i, h1, pk, s[9]);
    double h2 = setup_bubble(s, SCHED_ZB_H2, 0, &pk);
    cr_assert(h2 <= s[10] + e && pk <= 2 * p - 1 + 1e-9, "set-up %d: zb-h2 %.5f at %g, paper %.4f", i, h2, pk, s[10]);
    double a1 = setup_bubble(s, SCHED_ZB_AUTO, p, &pk);
    cr_assert(a1 <= h1 + 1e-12 && pk <= p + 1e-9, "set-up %d: zb-auto p %.5f at %g, zb-h1 %.5f", i, a1, pk, h1);
    double a2 = setup_bubble(s, SCHED_ZB_AUTO, 2 * p, &pk);
    cr_assert(a2 <= h2 + 1e-12 && a2 <= s[11] + e && pk <= 2 * p + 1e-9,
              "set-up %d: zb-auto 2p %.5f at %g, zb-h2 %.5f, paper %.4f", i, a2, pk, h2, s[11]);
    double zv = setup_bubble(s, SCHED_ZB_V, 0, &pk);
    cr_assert(zv <= s[10] + e && pk <= p + 1e-9, "set-up %d: zb-v %.5f at %g, paper's ZB-H2 %.4f", i, zv, pk, s[10]);
  }
}

/* The list scheduler, the micro-batch rounds and the V in rounds skip a variant once a run shows
 * every decision would come out the same under it (zb.c's agree masks): the skip must change
 * nothing. Every
 * family they serve, memory limits, costs that make W's fill gaps or not, and a shape large
 * enough for the probe on a prefix of the micro-batches; compiled with and without the skip,
 * the programs must be equal. */
#include "schedule/internal.h"

Test(zb, skipping_repeated_variants_changes_no_program) {
  static const sched_family fams[] = {SCHED_ZB_H1, SCHED_ZB_H2, SCHED_ZB_AUTO, SCHED_ZB_V, SCHED_V_HALF, SCHED_V_MIN};
  static const int ps[] = {2, 3, 5, 8}, ms[] = {1, 4, 9, 24};
  int shapes = 0;
  for (int fi = 0; fi < 6; fi++)
    for (int pi = 0; pi < 4; pi++)
      for (int mi = 0; mi < 4; mi++)
        for (int ci = 0; ci < 4; ci++)
          for (int li = 0; li < (fams[fi] == SCHED_ZB_AUTO ? 3 : 1); li++) {
            sched_family f = fams[fi];
            int p = ps[pi], v = sched_family_is_v(f) ? 2 : 1;
            sched_shape sh = {.family = f, .p = p, .v = v, .m = ms[mi]};
            if (li) sh.mem_limit = li == 1 ? (p + 1) / 2 : 1.5 * p;
            sched_costs c = sched_costs_unit();
            double sf[16], sb[16], sw[16];
            if (ci == 1) c.w = 0.4, c.b = 1.3, c.comm = 0.2;
            if (ci == 2) c.w = 2.5, c.comm = 0.7;
            if (ci == 3) {
              for (int s = 0; s < p * v; s++) sf[s] = 1 + 0.3 * (s % 3), sb[s] = 2 - 0.25 * (s % 2), sw[s] = 0.7 + 0.45 * (s % 4);
              c.stage_f = sf, c.stage_b = sb, c.stage_w = sw, c.comm = 0.5;
            }
            for (int rounds = 0; rounds < (v == 1 ? 2 : 1); rounds++) { /* the list scheduler; the rounds */
              sched_program a, b;
              double ends[8], asap_ends[8], asap;
              sched_zb_skip_repeats = 1;
              int ra = rounds ? sched_compile_compute_rounds(&sh, &c, &a, ends) : sched_compile_compute(&sh, &c, &a);
              sched_zb_skip_repeats = 0;
              int rb = rounds ? sched_compile_compute_rounds(&sh, &c, &b, NULL) : sched_compile_compute(&sh, &c, &b);
              sched_zb_skip_repeats = 1;
              cr_assert_eq(ra, rb, "%s p=%d m=%d costs %d limit %g rounds %d", sched_family_name(f), p, sh.m, ci,
                           sh.mem_limit, rounds);
              if (ra) continue;
              cr_assert(sched_program_equal(&a, &b), "%s p=%d m=%d costs %d limit %g rounds %d: skipping variants "
                        "changed the order", sched_family_name(f), p, sh.m, ci, sh.mem_limit, rounds);
              /* the rounds' own times are the order run as early as it can: sched_compile uses them
               * for sched_asap_end's figures */
              if (rounds) {
                cr_assert_eq(sched_asap_end(&a, &c, &asap, asap_ends), CORE_OK, "%s", core_error_msg());
                for (int r = 0; r < p; r++)
                  cr_assert_eq(ends[r], asap_ends[r], "%s p=%d m=%d costs %d: rank %d ends at %.17g in the rounds, "
                               "%.17g as early as its order allows", sched_family_name(f), p, sh.m, ci, r, ends[r], asap_ends[r]);
              }
              sched_program_free(&a), sched_program_free(&b);
              shapes++;
            }
          }
  cr_assert_gt(shapes, 300);
  /* the probe: 16 stages x 4096 micro-batches, variants compared on the first 32 */
  for (int k = 0; k < 2; k++) {
    sched_shape sh = {.family = k ? SCHED_ZB_AUTO : SCHED_ZB_H1, .p = 16, .v = 1, .m = 4096, .mem_limit = k ? 12 : 0};
    sched_costs c = sched_costs_unit();
    c.w = 0.6, c.comm = 0.3;
    for (int rounds = 0; rounds < 2; rounds++) {
      sched_program a, b;
      double ends[16], asap_ends[16], asap;
      sched_zb_skip_repeats = 1;
      int ra = rounds ? sched_compile_compute_rounds(&sh, &c, &a, ends) : sched_compile_compute(&sh, &c, &a);
      cr_assert_eq(ra, CORE_OK, "%s", core_error_msg());
      if (rounds) {
        cr_assert_eq(sched_asap_end(&a, &c, &asap, asap_ends), CORE_OK, "%s", core_error_msg());
        cr_assert_arr_eq(ends, asap_ends, sizeof ends, "p=16 m=4096: the rounds' ends are not their order's earliest");
      }
      sched_zb_skip_repeats = 0;
      int rb = rounds ? sched_compile_compute_rounds(&sh, &c, &b, NULL) : sched_compile_compute(&sh, &c, &b);
      cr_assert_eq(rb, CORE_OK, "%s", core_error_msg());
      sched_zb_skip_repeats = 1;
      cr_assert(sched_program_equal(&a, &b), "%s p=16 m=4096 rounds %d: skipping variants changed the order",
                sched_family_name(sh.family), rounds);
      sched_program_free(&a), sched_program_free(&b);
    }
  }
}
