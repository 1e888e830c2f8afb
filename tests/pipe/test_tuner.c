/* The schedule tuner (pipe/tune.c) and the memory model it ranks by (pipe/plan.c). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "core/config.h"
#include "core/error.h"
#include "layers/layers.h"
#include "pipe/tune.h"

static const char *cfg = "configs/tiny.cfg";

/* The config's own schedule run as plain 1F1B: its predicted step time and worst peak. */
static void plain_1f1b(const char **sets, int nsets, double gflops, double *time, double *peak) {
  pipe_plan_shape own;
  int stages, batch;
  cr_assert_eq(pipe_plan_config_shape(cfg, sets, nsets, &own, &stages, &batch), CORE_OK, "%s", core_error_msg());
  pipe_plan_shape sh = {.family = SCHED_1F1B, .v = 1, .m = own.m, .part = own.part};
  pipe_plan plan;
  cr_assert_eq(pipe_plan_build_shape(cfg, sets, nsets, gflops, &sh, &plan), CORE_OK, "%s", core_error_msg());
  sched_sim_result res;
  cr_assert_eq(sched_simulate(&plan.prog, &plan.costs, &res, NULL), CORE_OK);
  *time = res.makespan, *peak = 0;
  for (int r = 0; r < plan.stages; r++) {
    double pk = pipe_plan_rank_peak(&plan, &res, r);
    *peak = pk > *peak ? pk : *peak;
  }
  sched_sim_result_free(&res);
  pipe_plan_free(&plan);
}

/* For 1, 2, 4 and 8 stages, with a generous limit and with plain 1F1B's own peak as the limit:
 * the winner is never slower than plain 1F1B at the config's m, and everything listed fits. */
Test(tune, winner_never_worse_than_plain_1f1b) {
  int stages[] = {1, 2, 4, 8};
  for (int k = 0; k < 4; k++) {
    char set[64];
    snprintf(set, sizeof set, "pipeline.stages=%d", stages[k]);
    const char *sets[] = {set};
    double t1, peak1;
    plain_1f1b(sets, 1, 10, &t1, &peak1);
    double limits[] = {1e12, peak1};
    for (int l = 0; l < 2; l++) {
      pipe_tune_result res;
      cr_assert_eq(pipe_tune(cfg, sets, 1, 10, limits[l], &res), CORE_OK, "%s", core_error_msg());
      cr_assert(res.nfits >= 1 && res.nfits <= res.fitting && res.fitting <= res.tried);
      cr_assert(res.fits[0].time <= t1 * (1 + 1e-9), "p=%d: winner %s %.9g s, 1f1b %.9g s", stages[k],
                sched_family_name(res.fits[0].shape.family), res.fits[0].time, t1);
      for (int i = 0; i < res.nfits; i++) {
        cr_assert(res.fits[i].peak_bytes <= limits[l]);
        /* by time, times equal but for rounding counting as equal, and then by memory */
        cr_assert(i == 0 || res.fits[i - 1].time <= res.fits[i].time * (1 + 1e-9));
        cr_assert(i == 0 || res.fits[i - 1].time != res.fits[i].time || res.fits[i - 1].peak_bytes <= res.fits[i].peak_bytes);
        cr_assert_eq(res.batch % res.fits[i].shape.m, 0);
        cr_assert_eq(res.fits[i].B * res.fits[i].shape.m, res.batch);
        for (int j = 0; j < i; j++) /* equal partitions are listed once */
          cr_assert(!(res.fits[j].shape.family == res.fits[i].shape.family && res.fits[j].shape.v == res.fits[i].shape.v &&
                      res.fits[j].shape.m == res.fits[i].shape.m && res.fits[j].time == res.fits[i].time &&
                      res.fits[j].peak_bytes == res.fits[i].peak_bytes));
      }
      pipe_tune_result_free(&res);
    }
  }
}

/* With backend = "cuda" and bf16 the plan counts the fused attention's cache (what the CUDA
 * table's attention_cache_floats asks for) in place of the T x T probabilities: its slot is the one
 * a chunk sized that way allocates, and smaller than the CPU's; fp32 on cuda counts the
 * probabilities, as the table then does. Heads of 64 and T = 128, the shapes the fused path takes. */
Test(tune, act_bytes_counts_the_fused_attention_cache) {
  const char *cpu[] = {"pipeline.stages=1", "model.d_model=128", "model.n_heads=2", "model.seq_len=256"};
  const char *gpu[] = {"pipeline.stages=1", "model.d_model=128", "model.n_heads=2", "model.seq_len=256",
                       "backend=\"cuda\"", "bf16.enabled=true"};
  const char *gpu32[] = {"pipeline.stages=1", "model.d_model=128", "model.n_heads=2", "model.seq_len=256",
                         "backend=\"cuda\""};
  pipe_plan_shape sh = {.family = SCHED_ZB_H1, .v = 1, .m = 4, .part = SCHED_PART_PARAMETERS};
  pipe_plan pc, pg, p32;
  cr_assert_eq(pipe_plan_build_shape(cfg, cpu, 4, 50, &sh, &pc), CORE_OK, "%s", core_error_msg());
  cr_assert_eq(pipe_plan_build_shape(cfg, gpu, 6, 50, &sh, &pg), CORE_OK, "%s", core_error_msg());
  cr_assert_eq(pipe_plan_build_shape(cfg, gpu32, 5, 50, &sh, &p32), CORE_OK, "%s", core_error_msg());
  core_config *c;
  cr_assert_eq(core_config_load(&c, cfg), CORE_OK);
  for (int k = 1; k < 4; k++) cr_assert_eq(core_config_set(c, cpu[k]), CORE_OK, "%s", core_error_msg());
  layers_model m = {0};
  cr_assert_eq(layers_model_build(&m, c, 256), CORE_OK, "%s", core_error_msg());
  double sizes[2];
  for (int g = 0; g < 2; g++) {
    layers_model_size_attention(&m, g ? "cuda" : "cpu", g, pg.B);
    layers_chunk ch;
    cr_assert_eq(layers_chunk_init(&ch, &m, 0, m.n, NULL, pg.B, m.T, 1), CORE_OK);
    sizes[g] = (double)layers_chunk_slot_bytes(&ch);
    layers_chunk_free(&ch);
  }
  cr_assert_eq(pc.act_bytes, sizes[0], "cpu: plan %g, chunk %g", pc.act_bytes, sizes[0]);
  cr_assert_eq(pg.act_bytes, sizes[1], "cuda bf16: plan %g, chunk %g", pg.act_bytes, sizes[1]);
  cr_assert_lt(pg.act_bytes, pc.act_bytes);
  cr_assert_eq(p32.act_bytes, pc.act_bytes, "cuda fp32 keeps the probabilities");
  layers_model_free(&m);
  core_config_free(c);
  pipe_plan_free(&pc), pipe_plan_free(&pg), pipe_plan_free(&p32);
}

/* Below the smallest peak of every plain candidate, only candidates whose blocks recompute their
 * GELU and LayerNorms fit ("+rc"): each one's peak is within the limit and below the same shape's
 * plain peak; with room for the plain ones, none is tried. */
Test(tune, recompute_when_nothing_else_fits) {
  const char *sets[] = {"pipeline.stages=2"};
  pipe_tune_result all, tight;
  cr_assert_eq(pipe_tune(cfg, sets, 1, 50, 1e12, &all), CORE_OK, "%s", core_error_msg());
  cr_assert_eq(all.recomputed, 0);
  for (int i = 0; i < all.nfits; i++) cr_assert(!all.fits[i].shape.recompute);
  double least = all.smallest.peak_bytes;
  cr_assert_eq(pipe_tune(cfg, sets, 1, 50, least - 1, &tight), CORE_OK, "%s", core_error_msg());
  cr_assert(tight.recomputed > 0 && tight.nfits > 0, "%d recomputed, %d fit", tight.recomputed, tight.nfits);
  for (int i = 0; i < tight.nfits; i++) {
    const pipe_tune_cand *c = &tight.fits[i];
    cr_assert(c->shape.recompute && c->peak_bytes <= least - 1, "%s m=%d: recompute %d, peak %g",
              sched_family_name(c->shape.family), c->shape.m, c->shape.recompute, c->peak_bytes);
    pipe_plan_shape plain = c->shape;
    plain.recompute = 0;
    pipe_plan pl;
    cr_assert_eq(pipe_plan_build_shape(cfg, sets, 1, 50, &plain, &pl), CORE_OK, "%s", core_error_msg());
    pipe_plan pr;
    cr_assert_eq(pipe_plan_build_shape(cfg, sets, 1, 50, &c->shape, &pr), CORE_OK, "%s", core_error_msg());
    double a = 0, b = 0; /* every chunk's slot no larger (a chunk of the head and loss alone: the same), the sum smaller */
    for (int s = 0; s < pl.stages * pl.v; s++) {
      cr_assert_leq(pr.slot_bytes[s], pl.slot_bytes[s]);
      a += pr.slot_bytes[s], b += pl.slot_bytes[s];
    }
    cr_assert_lt(a, b);
    pipe_plan_free(&pl), pipe_plan_free(&pr);
  }
  char fam[48];
  pipe_shape_name(&tight.fits[0].shape, fam, sizeof fam);
  cr_assert(strstr(fam, "+rc"), "%s", fam);
  pipe_tune_result_free(&all), pipe_tune_result_free(&tight);
}

Test(tune, nothing_fits_names_the_smallest_peak) {
  const char *sets[] = {"pipeline.stages=4"};
  pipe_tune_result res;
  cr_assert_eq(pipe_tune(cfg, sets, 1, 50, 1000, &res), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "no candidate fits in --memory 1000 bytes: the smallest peak found is "),
            "%s", core_error_msg());
}

/* The plan's slot size (computed without allocating) is the one a real chunk allocates: with
 * the backward buffers shared by the slots (1f1b: no split backward), counted once in the
 * rank's state, and without (zb-h1 splits its backwards). */
Test(tune, act_bytes_is_the_chunk_slot_size) {
  const char *sets[] = {"pipeline.stages=1"};
  struct { sched_family f; int m, shared; } cases[] = {
      {SCHED_1F1B, 1, 1}, {SCHED_1F1B, 4, 1}, {SCHED_1F1B, 16, 1}, {SCHED_ZB_H1, 4, 0}};
  for (int k = 0; k < 4; k++) {
    pipe_plan_shape sh = {.family = cases[k].f, .v = 1, .m = cases[k].m, .part = SCHED_PART_PARAMETERS};
    pipe_plan plan;
    cr_assert_eq(pipe_plan_build_shape(cfg, sets, 1, 50, &sh, &plan), CORE_OK, "%s", core_error_msg());
    cr_assert_eq(sched_program_splits_backward(&plan.prog), !cases[k].shared);
    core_config *c;
    cr_assert_eq(core_config_load(&c, cfg), CORE_OK);
    layers_model m = {0};
    cr_assert_eq(layers_model_build(&m, c, 256), CORE_OK, "%s", core_error_msg());
    layers_chunk ch;
    cr_assert_eq(layers_chunk_init(&ch, &m, 0, m.n, NULL, plan.B, m.T, 1), CORE_OK);
    size_t plain = layers_chunk_slot_bytes(&ch);
    if (cases[k].shared) cr_assert_eq(layers_chunk_share_backward(&ch), CORE_OK);
    cr_assert_eq(plan.act_bytes, (double)layers_chunk_slot_bytes(&ch), "case %d: plan %g, chunk %zu", k,
                 plan.act_bytes, layers_chunk_slot_bytes(&ch));
    cr_assert_eq(plan.state_bytes[0], 16.0 * (double)ch.nparams + 4.0 * (double)ch.bwd_floats);
    if (cases[k].shared) /* a slot no longer holds the W stashes and inner gradients */
      cr_assert_lt(layers_chunk_slot_bytes(&ch), plain);
    layers_chunk_free(&ch);
    layers_model_free(&m);
    core_config_free(c);
    pipe_plan_free(&plan);
  }
}

Test(tune, a_shape_m_must_divide_the_batch) {
  pipe_plan_shape sh = {.family = SCHED_1F1B, .v = 1, .m = 3, .part = SCHED_PART_PARAMETERS};
  pipe_plan plan;
  cr_assert_eq(pipe_plan_build_shape(cfg, NULL, 0, 50, &sh, &plan), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "3 micro-batches do not divide the per-replica batch of 16"), "%s", core_error_msg());
}

/* `brigade sim CONFIG --dp D` prices ZeRO: stage 2 without overlap pays one reduce-scatter of
 * each stage's untied gradients per micro-batch on its W (so its step is longer than stage 1's,
 * which pays once per step), and holds less gradient memory once its buckets are smaller than
 * the stage. The expected seconds are counted here from the model's layers. */
static double plan_time(pipe_plan *plan) {
  sched_sim_result res;
  cr_assert_eq(sched_simulate(&plan->prog, &plan->costs, &res, NULL), CORE_OK);
  double t = res.makespan;
  sched_sim_result_free(&res);
  return t;
}

Test(tune, zero_costs_in_the_simulator) {
  const char *s1[] = {"pipeline.stages=2", "zero_optimization.stage=1"};
  const char *s2[] = {"pipeline.stages=2", "zero_optimization.stage=2", "zero_optimization.reduce_bucket_size=1000"};
  pipe_plan_hw hw = {.gflops = 50, .d = 4, .dp_gbps = 1};
  pipe_plan p1, p2;
  cr_assert_eq(pipe_plan_build(cfg, s1, 2, &hw, &p1), CORE_OK, "%s", core_error_msg());
  cr_assert_eq(pipe_plan_build(cfg, s2, 3, &hw, &p2), CORE_OK, "%s", core_error_msg());
  core_config *c;
  cr_assert_eq(core_config_load(&c, cfg), CORE_OK);
  layers_model m = {0};
  cr_assert_eq(layers_model_build(&m, c, 256), CORE_OK);
  /* wherever the cut falls, the two stages together reduce-scatter every gradient except the
   * kept embedding (layer 0) and tied head: 4 bytes x 3/4 of them, at 1 GB/s */
  double untied = 0;
  for (int i = 1; i < m.n; i++)
    if (m.layers[i].tied_to < 0) untied += (double)m.layers[i].nparams;
  for (int s = 0; s < 2; s++) cr_assert_gt(p2.dp_w[s], 0, "stage %d has no reduce-scatter cost", s);
  double want = 4 * untied * 3.0 / 4 / 1e9;
  cr_assert_float_eq(p2.dp_w[0] + p2.dp_w[1], want, 1e-12 * want + 1e-15, "%g vs %g", p2.dp_w[0] + p2.dp_w[1], want);
  cr_assert_eq(p1.dp_w[0] + p1.dp_w[1], 0);
  cr_assert_gt(plan_time(&p2), plan_time(&p1), "ZeRO-2's per-micro-batch reduce-scatters cost nothing");
  for (int r = 0; r < 2; r++)
    cr_assert_lt(p2.state_bytes[r], p1.state_bytes[r], "rank %d: ZeRO-2 %g bytes, ZeRO-1 %g", r, p2.state_bytes[r],
                 p1.state_bytes[r]);
  layers_model_free(&m);
  core_config_free(c);
  pipe_plan_free(&p1);
  pipe_plan_free(&p2);
}

/* What the machine costs never changes the program, only its price: the trainer knows neither
 * the GFLOP/s nor the bandwidth of the data-parallel collectives, so the simulator must compile
 * what the trainer compiles. ZeRO-2's reduce-scatters run inside each W in training (the bucket
 * flushes during and at the end of the weight gradient); sim charges them there, to a W of the
 * trainer's program, not to one placed as if the W were longer (zb-v, 2 stages, m=6: pricing
 * them into the compile gives another program). */
Test(tune, machine_costs_price_the_trainers_program) {
  const char *sets[] = {"pipeline.stages=2", "pipeline.schedule=zb-v", "gradient_accumulation_steps=6",
                        "zero_optimization.stage=2"};
  pipe_plan_hw one = {.gflops = 1, .d = 1}, fast = {.gflops = 50, .d = 1}, dp = {.gflops = 50, .d = 2, .dp_gbps = 10};
  pipe_plan a, b, c;
  cr_assert_eq(pipe_plan_build(cfg, sets, 4, &one, &a), CORE_OK, "%s", core_error_msg());
  cr_assert_eq(pipe_plan_build(cfg, sets, 4, &fast, &b), CORE_OK, "%s", core_error_msg());
  cr_assert_eq(pipe_plan_build(cfg, sets, 4, &dp, &c), CORE_OK, "%s", core_error_msg());
  cr_assert(sched_program_equal(&a.prog, &b.prog), "--gflops changed the program");
  /* ZeRO-2 across replicas checks post-validation at the step's end, so two replicas run the
   * one-replica program less its VALIDATEs */
  cr_assert(sched_program_step_sync(&b.prog) == SCHED_STEP_POST_VALIDATION &&
            sched_program_step_sync(&c.prog) == SCHED_STEP_BARRIER, "where the runs check post-validation");
  for (int r = 0; r < b.prog.p; r++) {
    sched_stream *st = &b.prog.streams[r];
    int k = 0;
    for (int i = 0; i < st->len; i++)
      if (st->ins[i].op != SCHED_VALIDATE) st->ins[k++] = st->ins[i];
    st->len = k;
  }
  cr_assert(sched_program_equal(&b.prog, &c.prog), "--dp 2 with ZeRO-2 changed the program");
  for (int s = 0; s < 4; s++) cr_assert_gt(c.dp_w[s], 0, "virtual stage %d: no reduce-scatter on its W", s);
  cr_assert_gt(plan_time(&c), plan_time(&b), "ZeRO-2's reduce-scatters cost nothing");
  pipe_plan_free(&a);
  pipe_plan_free(&b);
  pipe_plan_free(&c);
}

/* Under activation checkpointing the plan's slot is the checkpointed chunk's (input, output and
 * their gradients), and each chunk's full-layout workspace counts in the rank's state. */
Test(tune, act_bytes_under_activation_checkpointing) {
  const char *sets[] = {"pipeline.stages=2", "activation_checkpointing.enabled=true"};
  pipe_plan_hw hw = {.gflops = 50, .d = 1};
  pipe_plan plan, plain;
  cr_assert_eq(pipe_plan_build(cfg, sets, 2, &hw, &plan), CORE_OK, "%s", core_error_msg());
  cr_assert_eq(pipe_plan_build(cfg, sets, 1, &hw, &plain), CORE_OK, "%s", core_error_msg());
  core_config *c;
  cr_assert_eq(core_config_load(&c, cfg), CORE_OK);
  layers_model m = {0};
  cr_assert_eq(layers_model_build(&m, c, 256), CORE_OK);
  /* the last stage has the largest checkpointed slot: its output is the loss layer's, so compare
   * the maximum over both stages with real chunks cut where the plan cut */
  double best = 0, extra = 0;
  int lo = 0;
  for (int s = 0; s < 2; s++) {
    /* recover the cut from the plan's per-stage forward cost order: stage s of the program */
    int hi = lo;
    double f = 0;
    while (hi < m.n && f < plan.f[s] * 0.999999) f += m.layers[hi].type->flops_per_token(&m.layers[hi]) * plan.B * m.T / 50e9, hi++;
    if (s == 1) hi = m.n;
    layers_chunk ch;
    cr_assert_eq(layers_chunk_init(&ch, &m, lo, hi, NULL, plan.B, m.T, 1), CORE_OK);
    extra += (double)layers_chunk_slot_bytes(&ch); /* the workspace: one full-layout slot */
    size_t bwd; /* what `plain` (1f1b, no split backward) shares instead */
    layers_slot_floats(&m, lo, hi, plan.B, 1, &bwd);
    extra -= 4.0 * (double)bwd;
    cr_assert_eq(layers_chunk_checkpoint(&ch), CORE_OK);
    double sb = (double)layers_chunk_slot_bytes(&ch);
    best = sb > best ? sb : best;
    layers_chunk_free(&ch);
    lo = hi;
  }
  cr_assert_eq(plan.act_bytes, best, "plan %g, chunks %g", plan.act_bytes, best);
  cr_assert_lt(plan.act_bytes, plain.act_bytes);
  cr_assert_eq(plan.state_bytes[0] + plan.state_bytes[1], plain.state_bytes[0] + plain.state_bytes[1] + extra);
  layers_model_free(&m);
  core_config_free(c);
  pipe_plan_free(&plan);
  pipe_plan_free(&plain);
}

/* pipeline.max_pending_w reaches the compiled program: zb-h2 with at most one pending W per
 * rank holds fewer activation slots than zb-h2 unlimited; other families refuse the key. */
Test(tune, max_pending_w_from_the_config) {
  const char *lim[] = {"pipeline.stages=4", "pipeline.schedule=zb-h2", "gradient_accumulation_steps=8", "pipeline.max_pending_w=1"};
  pipe_plan_hw hw = {.gflops = 50, .d = 1};
  pipe_plan a, b;
  cr_assert_eq(pipe_plan_build(cfg, lim, 4, &hw, &a), CORE_OK, "%s", core_error_msg());
  cr_assert_eq(pipe_plan_build(cfg, lim, 3, &hw, &b), CORE_OK, "%s", core_error_msg());
  int sa = 0, sb = 0;
  for (int r = 0; r < 4; r++) sa += a.prog.nslots[r], sb += b.prog.nslots[r];
  cr_assert_lt(sa, sb, "slots with max_pending_w=1: %d, without: %d", sa, sb);
  pipe_plan_free(&a);
  pipe_plan_free(&b);
  const char *bad[] = {"pipeline.stages=4", "pipeline.max_pending_w=1"};
  cr_assert_eq(pipe_plan_build(cfg, bad, 2, &hw, &a), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "pipeline.max_pending_w"), "%s", core_error_msg());
}

/* pipeline.mem_limit reaches zb-auto's program (its cap, and what the simulator counts, within
 * it); other families and limits below one stage's activations are refused by name. */
Test(tune, mem_limit_from_the_config) {
  pipe_plan_hw hw = {.gflops = 50, .d = 1};
  for (int lim = 4; lim <= 7; lim += 3) {
    char l[64];
    snprintf(l, sizeof l, "pipeline.mem_limit=%d", lim);
    const char *sets[] = {"pipeline.stages=4", "pipeline.schedule=zb-auto", "gradient_accumulation_steps=8", l};
    pipe_plan a;
    cr_assert_eq(pipe_plan_build(cfg, sets, 4, &hw, &a), CORE_OK, "%s", core_error_msg());
    cr_assert_eq(a.prog.mem_cap, lim);
    sched_sim_result res;
    cr_assert_eq(sched_simulate(&a.prog, &a.costs, &res, NULL), CORE_OK);
    for (int r = 0; r < 4; r++) cr_assert_leq(res.ranks[r].peak_memory, lim + 1e-9);
    sched_sim_result_free(&res);
    pipe_plan_free(&a);
  }
  const char *other[] = {"pipeline.stages=4", "pipeline.schedule=zb-h1", "pipeline.mem_limit=6"};
  pipe_plan a;
  cr_assert_eq(pipe_plan_build(cfg, other, 3, &hw, &a), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "pipeline.mem_limit is zb-auto's"), "%s", core_error_msg());
  const char *low[] = {"pipeline.stages=4", "pipeline.schedule=zb-auto", "pipeline.mem_limit=0.5"};
  cr_assert_eq(pipe_plan_build(cfg, low, 3, &hw, &a), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "pipeline.mem_limit = 0.5"), "%s", core_error_msg());
}

/* One shape's worst-rank peak and predicted step with d replicas at a given ZeRO policy. */
static void zero_plan(int stage, int keep, const pipe_plan_hw *hw, double *time, double *peak) {
  const char *sets[] = {"pipeline.stages=2"};
  pipe_plan_shape sh = {.family = SCHED_INTERLEAVED, .v = 4, .m = 4, .part = SCHED_PART_PARAMETERS,
                        .set_zero = 1, .zero_stage = stage, .keep_gathered = keep, .prefetch = 1};
  pipe_plan plan;
  cr_assert_eq(pipe_plan_build_shape_hw(cfg, sets, 1, hw, &sh, &plan), CORE_OK, "%s", core_error_msg());
  cr_assert_eq(plan.prog.gather_limit, stage == 3 ? (keep ? 4 : 2) : 0); /* v = 4: kept, or one prefetched */
  sched_sim_result res;
  cr_assert_eq(sched_simulate(&plan.prog, &plan.costs, &res, NULL), CORE_OK);
  *time = res.makespan, *peak = 0;
  for (int r = 0; r < plan.stages; r++) {
    double pk = pipe_plan_rank_peak(&plan, &res, r);
    *peak = pk > *peak ? pk : *peak;
    if (stage == 3) cr_assert_gt(res.ranks[r].peak_gather_bytes, 0);
  }
  sched_sim_result_free(&res);
  pipe_plan_free(&plan);
}

/* With replicas the tuner also chooses the ZeRO stage and the reshard policy: ZeRO-3 needs
 * less memory than ZeRO-2, which needs less than ZeRO-0; with no limit the winner is never slower than any
 * policy's interleaved (v = 4, m = 4); under a limit just below that shape's ZeRO-2 peak, the
 * shape is listed at ZeRO-3 only (as it is; recomputing, at whatever stage fits). (One chunk per rank gains nothing from ZeRO-3: the chunk is
 * gathered the whole step, beside its shard.) */
Test(tune, chooses_the_zero_stage_within_the_limit) {
  pipe_plan_hw hw = {.gflops = 10, .d = 4, .dp_gbps = 1};
  double t[5], peak[5];
  for (int z = 0; z <= 3; z++) zero_plan(z, 0, &hw, &t[z], &peak[z]);
  zero_plan(3, 1, &hw, &t[4], &peak[4]);
  /* ZeRO-1 stages its reduce-scatter through host buffers over MPI (d + 2 shards): no saving at d = 4 */
  cr_assert_lt(peak[2], peak[0], "ZeRO-2 %g, ZeRO-0 %g", peak[2], peak[0]);
  cr_assert_lt(peak[3], peak[2], "ZeRO-3 %g, ZeRO-2 %g", peak[3], peak[2]);
  cr_assert_geq(peak[4], peak[3], "kept gathered %g, resharding %g", peak[4], peak[3]);
  const char *sets[] = {"pipeline.stages=2"};
  pipe_tune_result res;
  cr_assert_eq(pipe_tune_hw(cfg, sets, 1, &hw, 1e12, &res), CORE_OK, "%s", core_error_msg());
  for (int z = 0; z < 5; z++) cr_assert_leq(res.fits[0].time, t[z]);
  pipe_tune_result_free(&res);
  /* under ZeRO-2's peak for this shape, the shape is listed at ZeRO-3 only */
  cr_assert_eq(pipe_tune_hw(cfg, sets, 1, &hw, peak[2] - 1, &res), CORE_OK, "%s", core_error_msg());
  int found3 = 0;
  for (int i = 0; i < res.nfits; i++) {
    const pipe_plan_shape *sh = &res.fits[i].shape;
    cr_assert(res.fits[i].peak_bytes < peak[2]);
    /* (with its blocks recomputing, "+rc", a lower ZeRO stage may fit too: another way under the limit) */
    if (sh->family == SCHED_INTERLEAVED && sh->v == 4 && sh->m == 4 && sh->part == SCHED_PART_PARAMETERS &&
        !sh->recompute) {
      cr_assert(sh->set_zero && sh->zero_stage == 3, "interleaved v=4 m=4 listed at ZeRO-%d", sh->zero_stage);
      found3 += !sh->keep_gathered && sh->prefetch == 1;
    }
  }
  cr_assert_eq(found3, 1, "interleaved v=4 m=4 at ZeRO-3 (resharding, prefetch 1) is not listed");
  char name[16];
  pipe_zero_name(&res.fits[0].shape, name, sizeof name);
  cr_assert(strlen(name) > 0);
  pipe_tune_result_free(&res);
}
