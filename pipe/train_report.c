/* pipe/train_report.c: what a training run tells (pipe/trainer.h): its start-up lines, each
 * step's log line and --log-json record, the memory it measured beside the simulator's
 * prediction, and a traced step's measured timeline with the prediction from its op times. */
#include "pipe/trainer.h"

#include <mpi.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"
#include "viz/viz.h"

/* A number in a --log-json record: JSON has no inf or NaN, so those are null. */
static void json_num(FILE *f, const char *key, double v) {
  if (isfinite(v)) fprintf(f, ",\"%s\":%.9g", key, v);
  else fprintf(f, ",\"%s\":null", key);
}

void train_log_step(trainer *tr, const step_record *sr) {
  long step = sr->step;
  double loss = sr->loss, ms = sr->ms, val = sr->val, lr = sr->lr;
  int has_val = sr->has_val;
  if (tr->topo.world_rank != 0) return;
  double toks = (double)tr->cfg.B * tr->cfg.m * tr->cfg.d * tr->model.T / (ms / 1e3);
  if (step % tr->cfg.print_every == 0 || step == tr->cfg.steps || has_val) {
    char vs[64] = "";
    if (has_val) snprintf(vs, sizeof vs, " | val loss %.6f", val);
    char ns[32]; /* a skipped step's gradients overflowed: no norm */
    if (isfinite(sr->norm)) snprintf(ns, sizeof ns, "%.4f", sr->norm);
    else snprintf(ns, sizeof ns, "%s", sr->skipped ? "overflow (skipped)" : "not finite");
    core_log(CORE_LOG_INFO, "step %5ld | loss %.9g | lr %.3e | grad norm %s | %.1f ms | %.0f tok/s%s",
             step, loss, lr, ns, ms, toks, vs);
  }
  if (tr->log_json) {
    fprintf(tr->log_json, "{\"step\":%ld", step);
    json_num(tr->log_json, "loss", loss), json_num(tr->log_json, "lr", lr), json_num(tr->log_json, "grad_norm", sr->norm);
    fprintf(tr->log_json, ",\"step_ms\":%.3f,\"tokens_per_s\":%.1f", ms, toks);
    if (has_val) json_num(tr->log_json, "val_loss", val);
    if (tr->act_report) { /* once: the memory of every rank (report_memory) */
      static const char *const keys[NREPORT] = {"activation_peak_bytes", "activation_predicted_bytes",
                                                "activation_allocated_bytes", "param_startup_bytes", "param_peak_bytes",
                                                "param_predicted_bytes", "param_allocated_bytes",
                                                "param_gather_bytes", "param_gather_predicted_bytes"};
      for (int k = 0; k < NREPORT; k++) {
        fprintf(tr->log_json, ",\"%s\":[", keys[k]);
        for (int q = 0; q < tr->topo.p; q++) fprintf(tr->log_json, "%s%.0f", q ? "," : "", tr->act_report[NREPORT * q + k]);
        fprintf(tr->log_json, "]");
      }
      free(tr->act_report);
      tr->act_report = NULL;
    }
    if (tr->cfg.precision == 2) fprintf(tr->log_json, ",\"loss_scale\":%.17g,\"skipped\":%d", sr->scale, sr->skipped);
    if (tr->rn.post_validation) fprintf(tr->log_json, ",\"rollbacks\":%ld", tr->rn.rollbacks);
    if (tr->pv_program) fprintf(tr->log_json, ",\"restarts\":%ld", tr->rn.restarts);
    /* rank 0's ZeRO accounting: bytes this step moved, bytes it keeps */
    double red = sr->dp_reduce, gat = sr->dp_gather, state = 0, master = 0, grads = 0;
    for (int c = 0; c < tr->cfg.v; c++) {
      zero_buffer *z = &tr->rn.zb[c];
      state += 2.0 * sizeof(float) * zero_state_len(z);
      master += tr->rn.master ? sizeof(float) * zero_state_len(z) : 0;
      grads += zero_grad_bytes(z);
    }
    /* the backend's memory (opt_state_bytes, master_bytes) and the host's (ZeRO-Offload) */
    int off = tr->rn.offload;
    fprintf(tr->log_json, ",\"dp_reduce_bytes\":%.0f,\"dp_gather_bytes\":%.0f,\"opt_state_bytes\":%.0f,\"master_bytes\":%.0f,\"grad_bytes\":%.0f,"
            "\"opt_state_host_bytes\":%.0f,\"master_host_bytes\":%.0f",
            red, gat, off ? 0 : state, off ? 0 : master, grads, off ? state : 0, off ? master : 0);
    fprintf(tr->log_json, "}\n");
    fflush(tr->log_json);
  }
}

/* The simulator's prediction for this program from the op times measured in the step: mean F,
 * B (or I and W) time per virtual stage (and ZeRO-3's GATHER_PARAMS, as long as the rank spent
 * in it: on host memory only its start, the all-gather running on while the rank computes), the
 * mean copy of activation offload (OFFLOAD and RELOAD alike), the step's tail as measured on the
 * slowest rank. */
static void predict(const trainer *tr, const sched_timeline *meas) {
  int S = tr->cfg.stages * tr->cfg.v;
  double *sum = core_calloc((size_t)S * 4, sizeof(double)), tail[3] = {0, 0, 0}; /* tied, reduce, step */
  int *cnt = core_calloc((size_t)S * 4, sizeof(int)), ncopy = 0;
  double copy = 0; /* activation offload: the copies' time, each way */
  for (int i = 0; i < meas->n; i++) {
    const sched_event *e = &meas->ev[i];
    int k = e->op == SCHED_FORWARD ? 0 : (e->op == SCHED_BACKWARD || e->op == SCHED_BACKWARD_INPUT) ? 1
            : e->op == SCHED_BACKWARD_WEIGHT ? 2 : e->op == SCHED_GATHER_PARAMS ? 3 : -1;
    int q = e->op == SCHED_REDUCE_TIED_GRADS ? 0 : e->op == SCHED_REDUCE_GRADS ? 1 : e->op == SCHED_OPTIMIZER_STEP ? 2 : -1;
    if (q >= 0 && e->end - e->start > tail[q]) tail[q] = e->end - e->start; /* the slowest rank's */
    if (e->op == SCHED_OFFLOAD || e->op == SCHED_RELOAD) copy += e->end - e->start, ncopy++;
    if (k < 0 || e->stage < 0 || e->stage >= S) continue;
    sum[4 * e->stage + k] += e->end - e->start, cnt[4 * e->stage + k]++;
  }
  double *f = core_calloc((size_t)S, sizeof(double)), *b = core_calloc((size_t)S, sizeof(double)),
         *w = core_calloc((size_t)S, sizeof(double)), *g = core_calloc((size_t)S, sizeof(double));
  for (int s = 0; s < S; s++) {
    f[s] = cnt[4 * s] ? sum[4 * s] / cnt[4 * s] : 0;
    b[s] = cnt[4 * s + 1] ? sum[4 * s + 1] / cnt[4 * s + 1] : 0;
    w[s] = cnt[4 * s + 2] ? sum[4 * s + 2] / cnt[4 * s + 2] : 0;
    g[s] = cnt[4 * s + 3] ? sum[4 * s + 3] / cnt[4 * s + 3] : 0;
  }
  sched_costs c = {.stage_f = f, .stage_b = b, .stage_w = w, .stage_gather = g, .tied = tail[0], .reduce = tail[1],
                   .step = tail[2], .offload = ncopy ? fmax(copy / ncopy, 1e-12) : 0};
  sched_sim_result res;
  if (sched_simulate(&tr->prog, &c, &res, NULL) == CORE_OK) {
    core_log(CORE_LOG_INFO, "predicted from the measured op times: step %.2f ms, bubble rate %.1f%% "
             "(measured: %.2f ms, %.1f%%; ranks sharing cores, communication and waiting are not in the model)",
             res.makespan * 1e3, 100 * res.bubble_rate, meas->makespan * 1e3, 100 * meas->bubble_rate);
    sched_sim_result_free(&res);
  }
  free(sum), free(cnt), free(f), free(b), free(w), free(g);
}

/* The measured timeline of one step: every rank's events, gathered on rank 0 and written as
 * the simulator's files are. */
int train_write_trace(trainer *tr, sched_timeline *tl) {
  int p = tr->topo.p, n = tl->n, me = tr->topo.stage;
  if (tr->topo.data != 0) return CORE_OK;
  int *counts = core_calloc((size_t)p, sizeof(int)), *displ = core_calloc((size_t)p, sizeof(int));
  MPI_Gather(&n, 1, MPI_INT, counts, 1, MPI_INT, 0, tr->topo.pipe);
  int total = 0;
  for (int r = 0; r < p; r++) displ[r] = total * (int)sizeof(sched_event), total += counts[r], counts[r] *= (int)sizeof(sched_event);
  sched_event *all = core_malloc(sizeof(sched_event) * (size_t)(total ? total : 1));
  MPI_Gatherv(tl->ev, n * (int)sizeof(sched_event), MPI_BYTE, all, counts, displ, MPI_BYTE, 0, tr->topo.pipe);
  int rc = CORE_OK;
  if (me == 0) {
    sched_timeline out;
    sched_timeline_init(&out, sched_family_name(tr->prog.family), "s", p, tr->cfg.v, tr->cfg.m);
    double t0 = 1e300;
    for (int i = 0; i < total; i++) t0 = all[i].start < t0 ? all[i].start : t0;
    for (int i = 0; i < total; i++) all[i].start -= t0, all[i].end -= t0, sched_timeline_add(&out, all[i]);
    sched_timeline_stats(&out);
    char *svg = core_str_join(tr->cfg.trace_path, ".svg");
    rc = viz_write_trace(&out, tr->cfg.trace_path);
    if (!rc) rc = viz_write_svg(&out, svg);
    if (!rc) core_log(CORE_LOG_INFO, "measured timeline: %s and %s (step time %.2f ms, bubble rate %.1f%%)",
                      tr->cfg.trace_path, svg, out.makespan * 1e3, 100 * out.bubble_rate);
    free(svg);
    if (!rc) predict(tr, &out);
    sched_timeline_free(&out);
  }
  free(counts), free(displ), free(all);
  return rc;
}

/* Activation memory per rank after the first step this run takes: the peak the runner measured
 * (the slots of live pairs, less the aside parts given back), the simulator's peak_bytes for the
 * same program from this rank's own slot sizes, and what the slot pools hold. */
/* After the first step: each rank's activation memory (measured peak in use, the simulator's
 * prediction for the same program, allocated) and its parameter memory (at start-up, measured
 * peak during the step, the memory model's figure: ZeRO-3's shards plus the simulator's peak of
 * gathered chunks, allocated with the gather buffers), printed by world rank 0 for its pipeline
 * and kept for the first --log-json record. */
void train_report_memory(trainer *tr) {
  int S = tr->cfg.stages * tr->cfg.v, r = tr->topo.stage, p = tr->topo.p;
  double *bytes = core_calloc((size_t)S, sizeof(double)), *ws = core_malloc(sizeof(double) * (size_t)S);
  double *pbytes = core_calloc((size_t)S, sizeof(double)), *gbytes = core_calloc((size_t)S, sizeof(double));
  const pipe_runner *rn = &tr->rn;
  double mine[NREPORT] = {rn->act_peak, 0, 0, 0, 0, 0, 0, 0, 0}, shards = 0, whole = 0;
  for (int s = 0; s < S; s++) ws[s] = 1;
  for (int c = 0; c < tr->cfg.v; c++) {
    const layers_chunk *ck = &rn->chunks[c];
    double slot = (double)layers_chunk_slot_bytes(ck), aside = (double)layers_chunk_aside_bytes(ck);
    int s = tr->prog.stage_of[r * tr->cfg.v + c];
    bytes[s] = slot, ws[s] = slot > 0 ? (slot - aside) / slot : 1;
    pbytes[s] = 4.0 * (double)ck->nparams;
    gbytes[s] = 4.0 * (double)(ck->nparams - (rn->zb[c].hi - rn->zb[c].lo)); /* the other replicas' shards */
    mine[7] += rn->zb[c].bytes_param_gather; /* the first step's, measured */
    mine[2] += (slot - aside) * ck->nslots + aside * ck->naside + 4.0 * (double)ck->bwd_floats;
    shards += 4.0 * (double)rn->zb[c].shard, whole += 4.0 * (double)ck->nparams;
  }
  sched_costs c = sched_costs_unit();
  c.offload = 1e-9; /* offloaded programs need a copy time to simulate; the figure read is in instruction order */
  c.stage_act_bytes = bytes, c.stage_w_stash = ws, c.stage_param_bytes = pbytes, c.stage_gather_bytes = gbytes;
  sched_sim_result res;
  int z3 = tr->cfg.zero_stage == 3;
  if (sched_simulate(&tr->prog, &c, &res, NULL) == CORE_OK) {
    mine[1] = res.ranks[r].order_peak_bytes; /* the runner counts what it holds after each instruction */
    mine[5] = z3 ? shards + res.ranks[r].peak_gather_bytes : whole;
    mine[8] = tr->cfg.d > 1 ? res.ranks[r].gather_bytes : 0;
    sched_sim_result_free(&res);
  }
  mine[3] = z3 ? shards : whole;
  mine[4] = z3 ? rn->param_peak : whole;
  mine[6] = z3 ? shards + 4.0 * (double)rn->ngbuf * (double)rn->gbuf_floats : whole;
  /* every rank's figures to rank 0 (world rank = stage x d + replica); printed and logged per
   * stage as its replica 0 has them, every replica of a stage running the same program, and any
   * other replica whose measured peak is not its prediction printed too */
  int d = tr->topo.d, world = p * d;
  double *allw = core_malloc(sizeof(double) * NREPORT * (size_t)world), *all = core_malloc(sizeof(double) * NREPORT * (size_t)p);
  MPI_Gather(mine, NREPORT, MPI_DOUBLE, allw, NREPORT, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  if (tr->topo.world_rank == 0) {
    for (int q = 0; q < p; q++) memcpy(all + NREPORT * q, allw + NREPORT * (size_t)q * d, sizeof(double) * NREPORT);
    core_log(CORE_LOG_INFO, "activation memory per %s: peak in use (measured) | the simulator's prediction for "
             "this program | allocated in slots", d > 1 ? "stage (its replicas alike unless listed)" : "rank");
    for (int q = 0; q < p; q++)
      core_log(CORE_LOG_INFO, "  %s %d: %.0f bytes | %.0f bytes | %.0f bytes", d > 1 ? "stage" : "rank", q, all[NREPORT * q],
               all[NREPORT * q + 1], all[NREPORT * q + 2]);
    for (int w = 0; w < world; w++) {
      const double *f = allw + NREPORT * (size_t)w, *s0 = all + NREPORT * (size_t)(w / d);
      if (w % d && (f[0] != f[1] || f[0] != s0[0] || f[2] != s0[2]))
        core_log(CORE_LOG_WARN, "  rank %d (stage %d, replica %d): %.0f bytes | %.0f bytes | %.0f bytes", w, w / d, w % d,
                 f[0], f[1], f[2]);
    }
    if (z3) {
      core_log(CORE_LOG_INFO, "parameter memory per %s (ZeRO-3): at start-up (the shards) | peak in the step "
               "(measured: shards + chunks gathered) | the memory model's | allocated (shards + %d gather buffers)",
               d > 1 ? "stage (replica 0's shards; the others' alike)" : "rank", rn->ngbuf);
      for (int q = 0; q < p; q++)
        core_log(CORE_LOG_INFO, "  %s %d: %.0f | %.0f | %.0f | %.0f bytes; its all-gathers brought in %.0f bytes "
                 "(the simulator: %.0f)", d > 1 ? "stage" : "rank", q, all[NREPORT * q + 3], all[NREPORT * q + 4], all[NREPORT * q + 5],
                 all[NREPORT * q + 6], all[NREPORT * q + 7], all[NREPORT * q + 8]);
    }
    free(tr->act_report);
    tr->act_report = all, all = NULL;
  }
  free(bytes), free(ws), free(pbytes), free(gbytes), free(all), free(allw);
}

/* Every rank's place, gathered to rank 0 and printed there: host, local rank and device, so
 * a multi-node run shows which GPU each rank took (collective: every rank calls it). */
static void announce_ranks(trainer *tr) {
  enum { D = 160 }; /* the hosts are pipe_topo's already */
  struct where {
    char dev[D];
    int local_rank, local_size;
  } me, *all = NULL;
  memset(&me, 0, sizeof me);
  kernels_describe_device(tr->rn.chunks[0].ops, me.dev, D);
  me.local_rank = tr->topo.local_rank, me.local_size = tr->topo.local_size;
  int n = tr->topo.world_size;
  if (tr->topo.world_rank == 0) all = core_malloc((size_t)n * sizeof *all);
  MPI_Gather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, 0, MPI_COMM_WORLD);
  if (tr->topo.world_rank != 0) return;
  for (int r = 0; r < n; r++) {
    if (r == 32 && n > 40) { /* a long list: the first 32 and the last 8 */
      core_log(CORE_LOG_INFO, "  ... ranks 32..%d ...", n - 9);
      r = n - 8;
    }
    core_log(CORE_LOG_INFO, "rank %d (stage %d, replica %d): host %s, local rank %d of %d, %s", r, r / tr->topo.d,
             r % tr->topo.d, pipe_topo_host(&tr->topo, r), all[r].local_rank, all[r].local_size, all[r].dev);
  }
  free(all);
}

void train_announce(trainer *tr, const char *resume) {
  const pipe_ckpt_info *ri = &tr->resumed; /* the first line: where a resumed run comes from */
  if (tr->topo.world_rank == 0 && resume && ri->has_layout)
    core_log(CORE_LOG_INFO, "resumed from %s, step %ld (layout: %lld stage(s) x %lld replica(s), %lld chunk(s) per "
             "rank, ZeRO stage %lld)", ri->sub, ri->step, (long long)ri->layout[0], (long long)ri->layout[1],
             (long long)ri->layout[2], (long long)ri->layout[3]);
  else if (tr->topo.world_rank == 0 && resume)
    core_log(CORE_LOG_INFO, "resumed from %s, step %ld (layout not recorded: a checkpoint from before brigade recorded it)",
             ri->sub, ri->step);
  announce_ranks(tr); /* collective */
  if (tr->topo.world_rank != 0) return;
  const layers_chunk *k0 = &tr->rn.chunks[0];
  if (tr->pcomm) /* ZeRO's collectives: zero_init says which path */
    core_log(CORE_LOG_INFO, "pipeline transfers: %s send/recv (one GPU per rank: device memory, no host copies)",
             k0->ops->coll->name);
  else if (k0->ops && k0->ops->device_memory && tr->topo.p > 1)
    core_log(CORE_LOG_INFO, "pipeline transfers: MPI through host copies (%s)", tr->pipe_why);
  if (tr->cfg.precision && !(k0->ops && k0->ops->device_memory)) { /* what 16-bit means on the CPU */
    const char *p16 = tr->cfg.precision == 1 ? "bf16" : "fp16";
    core_log(CORE_LOG_INFO, "%s on the CPU: %s, every stored activation and gradient rounded to %s, fp32 master "
             "weights and optimizer", p16, kernels_cpu_matmul_half(tr->cfg.precision), p16);
  }
  size_t tied = 0; /* a tied head's wte, held once when its embedding shares its chunk */
  for (int i = 0; i < tr->model.n; i++)
    if (tr->model.layers[i].tied_to >= 0) tied = tr->model.layers[i].nparams;
  core_log(CORE_LOG_INFO, "model: %d layers, %.3f M parameters (a tied weight counted once; %.3f M counting it twice), vocabulary %d, "
           "T=%d, d_model=%d", tr->model.n, (layers_model_params(&tr->model) - tied) / 1e6,
           layers_model_params(&tr->model) / 1e6, tr->model.V, tr->model.T, tr->model.C);
  int rg = 0, rl = 0; /* blocks that run their GELU / LayerNorms again rather than keep the outputs */
  for (int i = 0; i < tr->model.n; i++) rg += tr->model.layers[i].recompute_gelu, rl += tr->model.layers[i].recompute_layernorm;
  if (rg || rl)
    core_log(CORE_LOG_INFO, "recompute: %d block(s) run the MLP's GELU again and %d block(s) their LayerNorms again for the "
             "weight gradients, rather than keep the outputs (the same results, smaller activation slots)", rg, rl);
  if (tr->rn.pv_eager) {
    core_log(CORE_LOG_INFO, "optimizer post-validation, eager: no gradient clipping and no fp16 loss scaling, so the "
             "global norm decides nothing; each rank updates as soon as its step's gradients are done and never waits "
             "for it (no copies kept)");
  } else if (tr->rn.post_validation) {
    double pv = 0;
    for (int c = 0; c < tr->cfg.v; c++) pv += 3.0 * 4.0 * (double)zero_state_len(&tr->rn.zb[c]);
    core_log(CORE_LOG_INFO, "optimizer post-validation: each rank updates as soon as its step's gradients are done; the "
             "global norm and overflow check follow, and an update that clipping or a skip should have changed is redone "
             "(rank 0 keeps a copy of its parameters and optimizer state for it: %.2f MB)", pv / 1e6);
  }
  if (tr->cfg.act_offload) {
    int n = 0;
    for (int i = 0; i < tr->prog.streams[0].len; i++) n += tr->prog.streams[0].ins[i].op == SCHED_OFFLOAD;
    if (k0->ops && k0->ops->device_memory) {
      core_log(CORE_LOG_INFO, "activation offload (pipeline.offload): rank 0 offloads %d time(s) per step, on the "
               "%s backend's two copy streams into %shost buffers, ordered by events%s", n, k0->ops->name,
               strcmp(k0->ops->name, "cuda") ? "" : "page-locked ",
               n ? "" : " (none: no copy that hides frees its buffers in time for the rank to allocate fewer at "
                        "pipeline.offload_gbps against pipeline.offload_gflops)");
      if (n && strcmp(k0->ops->name, "cuda") == 0 && tr->topo.p > 1 && !tr->pcomm)
        core_log(CORE_LOG_INFO, "activation offload: the pipeline's transfers go through host copies here, on the "
                 "same copy engines, and a transfer's copy waits for an offload's copy in the same direction, which "
                 "the placement does not see (on one GPU shared by 4 ranks, a 32 MB send waited 21 ms for a 1.3 GB "
                 "copy; BRIGADE_COPY_PIECE_MB=16 in the environment feeds the copies in pieces, so that it waits for "
                 "a few)");
    } else {
      core_log(CORE_LOG_INFO, "activation offload (pipeline.offload): on the %s backend activations are host memory "
               "already, so the program has no copies", k0->ops ? k0->ops->name : "cpu");
    }
  }
  core_log(CORE_LOG_INFO, "layout: %d stage(s) x %d replica(s), schedule %s, %d chunk(s) per rank, %d "
           "micro-batches of %d, %zu instructions per step",
           tr->cfg.stages, tr->cfg.d, sched_family_name(tr->prog.family), tr->cfg.v, tr->cfg.m, tr->cfg.B,
           sched_program_count(&tr->prog));
  /* memory and traffic of rank 0 (the first stage's first replica) */
  double params = 0, grads = 0, state = 0, per_step = 0, acts = 0;
  int d = tr->cfg.d, zs = tr->cfg.zero_stage;
  for (int c = 0; c < tr->cfg.v; c++) {
    double n = (double)tr->rn.chunks[c].nparams;
    const zero_buffer *z = &tr->rn.zb[c];
    params += zs == 3 ? 4.0 * (double)z->shard : 4 * n, state += 2 * 4.0 * zero_state_len(z), grads += zero_grad_bytes(z);
    const layers_chunk *ck = &tr->rn.chunks[c];
    acts += (double)(layers_chunk_slot_bytes(ck) - layers_chunk_aside_bytes(ck)) * ck->nslots +
            (double)layers_chunk_aside_bytes(ck) * ck->naside +
            4.0 * (double)ck->bwd_floats; /* the slots' shared backward buffers */
    double shard = 4.0 * tr->rn.zb[c].shard * (d - 1);
    double kept = 0;
    for (int k = 0; k < z->nkept; k++) kept += (double)(z->kp_hi[k] - z->kp_lo[k]);
    int gathers = 0; /* ZeRO-3: the program's all-gathers of this chunk */
    for (int i = 0; i < tr->prog.streams[0].len; i++)
      gathers += tr->prog.streams[0].ins[i].op == SCHED_GATHER_PARAMS && tr->prog.streams[0].ins[i].chunk == c;
    per_step += d == 1 ? 0 : zs == 0 ? 2 * 4 * n * (d - 1) / d : zs == 1 ? 2 * shard
              : tr->cfg.m * 4 * (n - kept) * (d - 1) / d + 2 * 4 * kept * (d - 1) / d +
                    (zs == 2 ? shard : gathers * 4.0 * (n - (double)(z->hi - z->lo)));
  }
  if (zs == 3) params += 4.0 * (double)tr->rn.ngbuf * (double)tr->rn.gbuf_floats;
  core_log(CORE_LOG_INFO, "ZeRO stage %d over %d replica(s), rank 0: parameters %.2f MB, gradients %.2f MB, "
           "optimizer state %.2f MB, activation slots %.2f MB%s; data-parallel traffic %.2f MB per step (%s)", zs, d,
           params / 1e6, grads / 1e6, state / 1e6, acts / 1e6, tr->cfg.ckpt_act ? " (checkpointed, plus one workspace per chunk)" : "",
           per_step / 1e6,
           zs == 0   ? "all-reduce"
           : zs == 1 ? "one reduce-scatter + one all-gather"
           : zs == 2 ? "reduce-scatters of gradient buckets in each micro-batch's backward + one all-gather"
                     : "reduce-scatters of gradient buckets in each micro-batch's backward + the schedule's parameter "
                       "all-gathers");
  for (int s = 0; s < tr->cfg.stages * tr->cfg.v; s++)
    core_log(CORE_LOG_INFO, "  virtual stage %d (pipeline rank %d): layers %d..%d (%s .. %s)", s, tr->prog.rank_of[s],
             tr->bounds[s], tr->bounds[s + 1] - 1, tr->model.layers[tr->bounds[s]].name,
             tr->model.layers[tr->bounds[s + 1] - 1].name);
}

