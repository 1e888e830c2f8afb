/* pipe/tune.c: the schedule tuner behind `brigade tune`. Every candidate is built exactly as
 * `brigade sim CONFIG` would build it with that shape (pipe_plan_build_shape), so the tuner's
 * predictions are the simulator's. */
#include "pipe/tune.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/progress.h"

void pipe_shape_name(const pipe_plan_shape *sh, char *buf, size_t n) {
  if (sh->family == SCHED_ZB_AUTO && sh->mem_limit > 0)
    snprintf(buf, n, "zb-auto@%g%s", sh->mem_limit, sh->recompute ? "+rc" : "");
  else snprintf(buf, n, "%s%s", sched_family_name(sh->family), sh->recompute ? "+rc" : "");
}

void pipe_zero_name(const pipe_plan_shape *sh, char *buf, size_t n) {
  if (!sh->set_zero) snprintf(buf, n, "config");
  else if (sh->zero_stage == 3 && sh->keep_gathered) snprintf(buf, n, "3/keep");
  else if (sh->zero_stage == 3) snprintf(buf, n, "3/reshard%s", sh->prefetch ? "" : "/p0");
  else snprintf(buf, n, "%d", sh->zero_stage);
}

const char *pipe_part_name(sched_part_method part) {
  switch (part) {
  case SCHED_PART_UNIFORM: return "uniform";
  case SCHED_PART_PARAMETERS: return "parameters";
  case SCHED_PART_COST: return "cost";
  default: return "explicit";
  }
}

/* A candidate over the memory limit is tried once more with every transformer block recomputing
 * its GELU and LayerNorms (pipe_plan_shape.recompute, "+rc" after the family): the same FLOPs in
 * the cost model (the passes it adds are elementwise), a smaller slot. Within the limit it is not
 * tried: it would tie on time and win on memory, and its extra passes are not free. */

/* Family and chunk counts searched: one chunk for gpipe, 1f1b, zb-h1, zb-h2 and zb-auto, 2..4
 * for interleaved, 2 (the V) for zb-v, v-half, v-min and dualpipev (m >= 2p only: smaller m
 * cannot be built). zb-auto is tried at three memory limits, p, 1.5p and 2p stages'
 * activations per rank (lim, times p), so one family spans 1F1B's memory to twice it and the
 * --memory limit picks; its memory model counts a pending W at the W stash the runtime keeps.
 * v-zb is zb-v's algorithm and is not searched twice. */
static const struct {
  sched_family family;
  int v;
  double lim;
} families[] = {
    {SCHED_GPIPE, 1, 0},       {SCHED_1F1B, 1, 0},  {SCHED_INTERLEAVED, 2, 0}, {SCHED_INTERLEAVED, 3, 0},
    {SCHED_INTERLEAVED, 4, 0}, {SCHED_ZB_H1, 1, 0}, {SCHED_ZB_H2, 1, 0},       {SCHED_ZB_V, 2, 0},
    {SCHED_DUALPIPE_V, 2, 0},  {SCHED_ZB_AUTO, 1, 1}, {SCHED_ZB_AUTO, 1, 1.5},  {SCHED_ZB_AUTO, 1, 2},
    {SCHED_V_HALF, 2, 0},      {SCHED_V_MIN, 2, 0},
};
static const sched_part_method parts[] = {SCHED_PART_PARAMETERS, SCHED_PART_COST, SCHED_PART_UNIFORM};

/* Compiles, simulates and measures one candidate. CORE_EINPUT: this shape cannot be built. */
static int try_one(const char *config, const char **sets, int nsets, const pipe_plan_hw *hw, const pipe_plan_shape *sh,
                   pipe_tune_cand *out) {
  pipe_plan plan;
  int rc = pipe_plan_build_shape_hw(config, sets, nsets, hw, sh, &plan);
  if (rc) return rc;
  sched_sim_result res;
  /* the steady state: 4 steps back to back, meeting at the optimizer as training would (each
   * rank on its own where the program checks the last update in the next step: post-validation,
   * the zero-bubble and V families' default) */
  sched_step_sync sync = plan.step_sync;
  rc = sched_simulate_steps(&plan.prog, &plan.costs, 4, sync, &res, NULL);
  if (!rc) {
    *out = (pipe_tune_cand){.shape = *sh, .B = plan.B, .time = res.steady_step_time, .bubble_rate = res.bubble_rate};
    for (int r = 0; r < plan.stages; r++) {
      double peak = pipe_plan_rank_peak(&plan, &res, r);
      if (peak > out->peak_bytes) out->peak_bytes = peak, out->worst_rank = r;
    }
    sched_sim_result_free(&res);
  }
  pipe_plan_free(&plan);
  return rc;
}

/* A predicted time to 36 bits of mantissa (about 11 significant digits): predictions equal but for
 * rounding (sums of the same costs in another order, a simulation's copied steps) compare equal,
 * so the ranking then goes by memory and the same schedule is recognised as such. */
static double rounded(double t) {
  int e;
  double f = frexp(t, &e);
  return ldexp(nearbyint(ldexp(f, 36)), e - 36);
}

/* Two partition methods often cut the model the same way, and zb-auto's limits may give the same
 * schedule: list such a shape once (the first of parameters, cost, uniform; the smallest limit),
 * recognised by equal predictions for the same family, v and m. */
static int same_as_before(const pipe_tune_result *res, const pipe_tune_cand *c) {
  for (int i = res->nfits - 1; i >= 0; i--) {
    const pipe_tune_cand *o = &res->fits[i];
    if (o->shape.m != c->shape.m) return 0; /* candidates come grouped by m */
    if (o->shape.family == c->shape.family && o->shape.v == c->shape.v && rounded(o->time) == rounded(c->time) &&
        o->peak_bytes == c->peak_bytes && o->shape.zero_stage == c->shape.zero_stage &&
        o->shape.keep_gathered == c->shape.keep_gathered && o->shape.prefetch == c->shape.prefetch &&
        o->shape.recompute == c->shape.recompute)
      return 1;
  }
  return 0;
}

static int by_time(const void *a, const void *b) {
  const pipe_tune_cand *x = a, *y = b;
  double tx = rounded(x->time), ty = rounded(y->time);
  if (tx != ty) return tx < ty ? -1 : 1;
  if (x->peak_bytes != y->peak_bytes) return x->peak_bytes < y->peak_bytes ? -1 : 1;
  return 0;
}

/* The ZeRO policies tried with d > 1 replicas: stages 0 to 3, stage 3 resharding with the next
 * chunk prefetched or not, and kept gathered (one chunk per rank: the same program each way,
 * tried once). With one replica the config's own. */
static const struct {
  int stage, keep, prefetch;
} zeros[] = {{0, 0, 0}, {1, 0, 0}, {2, 0, 0}, {3, 0, 1}, {3, 0, 0}, {3, 1, 1}};

int pipe_tune(const char *config, const char **sets, int nsets, double gflops, double memory,
              pipe_tune_result *res) {
  pipe_plan_hw hw = {.gflops = gflops, .d = 1};
  return pipe_tune_hw(config, sets, nsets, &hw, memory, res);
}

/* The divisors of n in increasing order (*count of them; caller frees): O(sqrt n), not O(n). */
static int *divisors(int n, int *count) {
  int k = 0, cap = 64, *d = core_malloc(sizeof(int) * (size_t)cap), *hi = core_malloc(sizeof(int) * (size_t)cap), nhi = 0;
  for (int a = 1; (long)a * a <= n; a++) {
    if (n % a) continue;
    if (k == cap || nhi == cap) {
      cap *= 2;
      d = core_realloc(d, sizeof(int) * (size_t)cap), hi = core_realloc(hi, sizeof(int) * (size_t)cap);
    }
    d[k++] = a;
    if (a != n / a) hi[nhi++] = n / a;
  }
  d = core_realloc(d, sizeof(int) * (size_t)(k + nhi));
  while (nhi > 0) d[k++] = hi[--nhi];
  free(hi);
  *count = k;
  return d;
}

/* Whether a candidate's program is within the limits, from its shape alone (sched_size_check:
 * a candidate over them is skipped, not built). */
static int fits_limits(const pipe_tune_result *res, const pipe_plan_hw *hw, const pipe_plan_shape *sh, double *instr) {
  const pipe_plan_shape *own = &res->own;
  int zs = sh->set_zero ? sh->zero_stage : own->zero_stage;
  sched_shape s = {.family = sh->family, .p = res->stages, .v = sh->v, .m = sh->m, .tied = 1, .zero3 = zs == 3,
                   .keep_gathered = sh->set_zero ? sh->keep_gathered : own->keep_gathered};
  sched_size sz;
  sched_size_estimate(&s, 1, 0, &sz);
  *instr = sz.instructions;
  const sched_limits *l = &hw->limits;
  return !(l->max_instructions > 0 && sz.instructions > l->max_instructions) && !(l->max_bytes > 0 && sz.bytes > l->max_bytes);
}

int pipe_tune_hw(const char *config, const char **sets, int nsets, const pipe_plan_hw *hw, double memory,
                 pipe_tune_result *res) {
  memset(res, 0, sizeof *res);
  int rc = pipe_plan_config_shape(config, sets, nsets, &res->own, &res->stages, &res->batch);
  if (rc) return rc;
  int cap = 0, nz = hw->d > 1 ? (int)(sizeof zeros / sizeof zeros[0]) : 1, ndiv;
  int *ms = divisors(res->batch, &ndiv);
  int nf = (int)(sizeof families / sizeof families[0]), np = (int)(sizeof parts / sizeof parts[0]);
  char first_err[512] = "";
  core_progress_start("tune %s", config);
  core_progress_phase("", (double)ndiv * nf * np * nz, "shapes looked at");
  double seen = 0;
  for (int di = 0; di < ndiv; di++) {
    int m = ms[di];
    for (int f = 0; f < nf; f++)
      for (int k = 0; k < np; k++)
        for (int z = 0; z < nz; z++) {
          core_progress_at(seen++);
          pipe_plan_shape sh = {.family = families[f].family, .v = families[f].v, .m = m, .part = parts[k],
                                .mem_limit = families[f].lim * res->stages};
          if (hw->d > 1) {
            if (zeros[z].stage == 3 && sh.v == 1 && (zeros[z].keep || !zeros[z].prefetch)) continue;
            sh.set_zero = 1, sh.zero_stage = zeros[z].stage, sh.keep_gathered = zeros[z].keep;
            sh.prefetch = zeros[z].prefetch;
          }
          double instr;
          if (!fits_limits(res, hw, &sh, &instr)) {
            if (!res->too_large++ || instr < res->least_skipped) res->least_skipped = instr;
            if (!res->skipped_m || m < res->skipped_m) res->skipped_m = m;
            continue;
          }
          pipe_tune_cand c;
          rc = try_one(config, sets, nsets, hw, &sh, &c);
          if (rc == CORE_EINPUT) { /* e.g. more pieces than layers: not a candidate */
            if (!first_err[0]) snprintf(first_err, sizeof first_err, "%s", core_error_msg());
            res->uncut++;
            continue;
          }
          if (rc) {
            core_progress_stop();
            free(ms);
            pipe_tune_result_free(res);
            return rc;
          }
          if (!res->tried++ || c.peak_bytes < res->smallest.peak_bytes) res->smallest = c;
          if (c.peak_bytes > memory) { /* over the limit: again with the blocks recomputing, where that is less */
            pipe_tune_cand rc_c;
            sh.recompute = 1;
            rc = try_one(config, sets, nsets, hw, &sh, &rc_c);
            if (rc && rc != CORE_EINPUT) {
              core_progress_stop();
              free(ms);
              pipe_tune_result_free(res);
              return rc;
            }
            if (rc || !(rc_c.peak_bytes < c.peak_bytes)) continue; /* no block, or nothing saved */
            res->tried++, res->recomputed++;
            if (rc_c.peak_bytes < res->smallest.peak_bytes) res->smallest = rc_c;
            if (rc_c.peak_bytes > memory) continue;
            c = rc_c;
          }
          res->fitting++;
          if (same_as_before(res, &c)) continue;
          if (res->nfits == cap) res->fits = core_realloc(res->fits, sizeof(pipe_tune_cand) * (size_t)(cap = cap ? 2 * cap : 64));
          res->fits[res->nfits++] = c;
        }
  }
  core_progress_stop();
  free(ms);
  rc = CORE_OK;
  if (!res->tried && res->too_large)
    rc = core_error_set(CORE_EINPUT, "%s: every shape for %d stages and a batch of %d is too large to simulate: the "
                        "smallest program is about %.3g instructions, more than %s %.0f, or more than the memory limit "
                        "(%s)%s%.511s", config, res->stages, res->batch, res->least_skipped, hw->limits.instr_name,
                        hw->limits.max_instructions, hw->limits.mem_what, first_err[0] ? "; others: " : "", first_err);
  else if (!res->tried)
    rc = core_error_set(CORE_EINPUT, "%s: no schedule could be built for %d stages: %.511s", config, res->stages, first_err);
  else if (!res->nfits) {
    const pipe_tune_cand *s = &res->smallest;
    char fam[48];
    pipe_shape_name(&s->shape, fam, sizeof fam);
    rc = core_error_set(CORE_EINPUT,
                        "no candidate fits in --memory %.0f bytes: the smallest peak found is %.0f bytes "
                        "(%s v=%d m=%d B=%d %s, rank %d) of %d tried%s",
                        memory, s->peak_bytes, fam, s->shape.v, s->shape.m, s->B, pipe_part_name(s->shape.part),
                        s->worst_rank, res->tried,
                        s->shape.recompute ? " (+rc: its blocks recomputing their GELU and LayerNorms)" : "");
  }
  if (rc) {
    pipe_tune_result_free(res);
    return rc;
  }
  /* fastest first, then least memory; a stable insertion sort keeps full ties in search order
   * (so the output does not depend on qsort's implementation); n is a few hundred */
  for (int i = 1; i < res->nfits; i++) {
    pipe_tune_cand c = res->fits[i];
    int j = i;
    for (; j > 0 && by_time(&res->fits[j - 1], &c) > 0; j--) res->fits[j] = res->fits[j - 1];
    res->fits[j] = c;
  }
  return CORE_OK;
}

void pipe_tune_result_free(pipe_tune_result *res) {
  free(res->fits);
  res->fits = NULL, res->nfits = 0;
}
