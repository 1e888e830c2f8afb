/* schedule/gather.c: ZeRO-3's parameter gathers as instructions of the program.
 *
 * With parameters sharded over a data-parallel group, a chunk's compute ops need its parameters
 * gathered first. The compute ops of rank r, in stream order, fall into runs: with
 * keep_gathered, one run per chunk from its first compute op of the step to its last (the runs
 * of different chunks overlap); otherwise a run is a maximal sequence of consecutive compute ops
 * on one chunk (reshard_after_forward: a chunk is released as soon as another chunk computes,
 * so an interleaved rank gathers it for its forwards and again for its backward ops; releasing
 * between two ops of the same chunk would only repeat the gather, never lower the peak). Each
 * run gets a GATHER_PARAMS and, right after its last op, a RELEASE_PARAMS. The gather of run j
 * (runs in the order they start) is issued before the first compute op of run j - prefetch, so
 * it runs beside that compute, but never before the previous run of the same chunk has been
 * released. At most prefetch + 1 chunks are then gathered at once (keep_gathered: at most v).
 * Every replica of a stage runs the same stream, so the gathers, collectives of the
 * data-parallel group, match in order. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "schedule/internal.h"

/* Whether the next run of run j's chunk keeps it gathered from j. */
static int next_kept(const unsigned char *kept, const int *prev, const int *rchunk, int nruns, int j) {
  for (int q = j + 1; q < nruns; q++)
    if (rchunk[q] == rchunk[j]) return kept[q] && prev[q] == j;
  return 0;
}

/* Rebuilds rank r's stream with the gathers and releases. */
static void place_rank(sched_program *pr, int r, int keep, int prefetch) {
  sched_stream *st = &pr->streams[r];
  int n = st->len, v = pr->v;
  /* run of each compute instruction, and per run: chunk, first and last instruction */
  int *run_of = core_malloc(sizeof(int) * (size_t)(n ? n : 1));
  int *rfirst = core_malloc(sizeof(int) * (size_t)(n ? n : 1)), *rlast = core_malloc(sizeof(int) * (size_t)(n ? n : 1));
  int *rchunk = core_malloc(sizeof(int) * (size_t)(n ? n : 1)), *open = core_malloc(sizeof(int) * (size_t)v);
  int nruns = 0, cur = -1;
  for (int c = 0; c < v; c++) open[c] = -1;
  for (int i = 0; i < n; i++) {
    const sched_instr *in = &st->ins[i];
    run_of[i] = -1;
    if (!sched_op_is_compute((sched_op)in->op)) continue;
    int c = in->chunk, j = keep ? open[c] : cur;
    if (j < 0 || rchunk[j] != c) { /* a new run */
      j = nruns++;
      rfirst[j] = i, rchunk[j] = c, open[c] = j;
    }
    rlast[j] = i, run_of[i] = j, cur = j;
  }
  /* runs start in order of rfirst (they were numbered as they started); gather of run j goes
   * before the first op of run max(j - prefetch, previous run of its chunk + 1) */
  int *prev = core_malloc(sizeof(int) * (size_t)(nruns ? nruns : 1)), *at = core_malloc(sizeof(int) * (size_t)v);
  for (int c = 0; c < v; c++) at[c] = -1;
  for (int j = 0; j < nruns; j++) prev[j] = at[rchunk[j]], at[rchunk[j]] = j;
  /* gwhere[j]: the run k whose issue point takes run j's gather */
  int *gwhere = core_malloc(sizeof(int) * (size_t)(nruns ? nruns : 1));
  for (int j = 0; j < nruns; j++) {
    int k = j - prefetch;
    if (k < prev[j] + 1) k = prev[j] + 1;
    if (k < 0) k = 0;
    gwhere[j] = k;
  }
  /* kept[j]: run j's chunk stays gathered from run prev[j], because run j's gather would be
   * issued right where prev[j] releases it (a release and gather of the same chunk back to back;
   * the count of gathered chunks is the same either way) */
  unsigned char *kept = core_calloc((size_t)(nruns ? nruns : 1), 1);
  for (int j = 0; j < nruns; j++) kept[j] = prev[j] >= 0 && gwhere[j] == prev[j] + 1;
  int *issue = core_malloc(sizeof(int) * (size_t)(nruns ? nruns : 1));
  sched_stream out = {0};
  out.cap = n + 2 * nruns + 1;
  out.ins = core_malloc(sizeof(sched_instr) * (size_t)out.cap);
  /* run k's gathers are issued right after the compute op before its first op (and that op's
   * release), ahead of the sends, receives and loads in between, so they overlap the wait too;
   * the first run's at the head of the stream */
  for (int k = 0; k < nruns; k++) {
    int i = rfirst[k] - 1;
    while (i >= 0 && run_of[i] < 0) i--;
    issue[k] = i; /* after instruction i; -1: at the head */
  }
  int k = 0;
  for (int i = -1; i < n; i++) {
    if (i >= 0) {
      int j = run_of[i];
      out.ins[out.len++] = st->ins[i];
      if (j >= 0 && rlast[j] == i && !(j + 1 < nruns && next_kept(kept, prev, rchunk, nruns, j)))
        out.ins[out.len++] = (sched_instr){.op = SCHED_RELEASE_PARAMS, .mb = -1, .chunk = rchunk[j], .peer = -1,
                                           .slot = -1, .aslot = -1};
    }
    for (; k < nruns && issue[k] == i; k++) /* the gathers issued for run k, in run order */
      for (int q = k; q < nruns && q <= k + prefetch; q++) /* gwhere[q] >= q - prefetch */
        if (gwhere[q] == k && !kept[q])
          out.ins[out.len++] = (sched_instr){.op = SCHED_GATHER_PARAMS, .mb = -1, .chunk = rchunk[q], .peer = -1,
                                             .slot = -1, .aslot = -1};
  }
  free(st->ins);
  *st = out;
  free(run_of), free(rfirst), free(rlast), free(rchunk), free(open), free(prev), free(at);
  free(gwhere), free(issue), free(kept);
}

int sched_place_gathers(sched_program *pr, int keep_gathered, int prefetch) {
  if (prefetch < 0 || prefetch > 64)
    return core_error_set(CORE_EINPUT, "prefetch must be in [0, 64] runs (got %d)", prefetch);
  if (pr->gather_limit) return core_error_set(CORE_EINPUT, "the program has its gathers already");
  for (int r = 0; r < pr->p; r++) place_rank(pr, r, keep_gathered, prefetch);
  pr->gather_limit = keep_gathered ? pr->v : (prefetch + 1 < pr->v ? prefetch + 1 : pr->v);
  return CORE_OK;
}
