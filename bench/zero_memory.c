/* bench/zero_memory.c: what each ZeRO stage partitions, moves and keeps, measured on a real run.
 * For stages 0, 1, 2, 3 (resharding), 3 (kept gathered) and 3 (resharding, no prefetch) it runs
 * `MPIRUN -np 4 brigade train CONFIG` at 2 stages x 2 replicas (interleaved, 2 chunks per rank,
 * so that resharding has a chunk to give back) with --log-json, and prints one row per policy
 * from the first step's record (rank 0 of the pipeline: world rank 0): bytes the step moved in
 * the data-parallel group (reduce: all-reduce / reduce-scatters; gather: parameter all-gathers),
 * parameter bytes held at start-up and at the step's peak (measured; ZeRO-3's memory model's
 * figure beside it), gradient bytes, optimizer-state bytes, and the median step time of steps
 * 2..N. The losses of every policy are checked to agree within 1e-5 of stage 0's.
 *
 * Part 2, ZeRO-Offload: the same runs on the fakedev backend (CPU kernels behind device
 * pointers) at stages 1, 2 and 3, with the optimizer kept on the device and offloaded to the
 * host: the device bytes of optimizer state (and bf16's fp32 master) saved, the host bytes
 * taking them, and the step-time ratio offloaded / on the device, medians over the steps.
 *
 *   bench/zero_memory [--brigade PATH] [--mpirun CMD] [--config CFG] [--steps N]
 * MPIRUN defaults to $BRIGADE_MPIRUN, else "mpirun". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/json.h"

enum { MAX_STEPS = 256 };

typedef struct {
  const char *name, *sets;
} policy;

static const policy policies[] = {
    {"0", "--set zero_optimization.stage=0"},
    {"1", "--set zero_optimization.stage=1"},
    {"2", "--set zero_optimization.stage=2"},
    {"3 reshard", "--set zero_optimization.stage=3"},
    {"3 reshard, prefetch 0", "--set zero_optimization.stage=3 --set zero_optimization.prefetch=0"},
    {"3 keep gathered", "--set zero_optimization.stage=3 --set zero_optimization.reshard_after_forward=false"},
};
enum { NPOL = sizeof policies / sizeof policies[0] };

static const char *what[] = {"nothing", "optimizer state", "+ gradients", "+ parameters", "+ parameters",
                             "+ parameters"};

typedef struct {
  double reduce, gather, param_start, param_peak, param_model, grads, state, ms;
  double dev_state, host_state; /* optimizer state + master in the backend's and the host's memory */
  double loss[MAX_STEPS];
  int n, ok;
} row;

static double num(const core_json *j, const char *key, int k) {
  const core_json *v = core_json_get(j, key);
  if (!v) return NAN;
  if (core_json_len(v) > 0) return (size_t)k < core_json_len(v) ? core_json_at(v, (size_t)k)->num : NAN;
  return v->num;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static int run(const char *mpirun, const char *brigade, const char *config, int steps, const policy *p, row *out) {
  char log[] = "/tmp/brigade_zero_XXXXXX", cmd[2048];
  int fd = mkstemp(log);
  if (fd < 0) return -1;
  close(fd);
  snprintf(cmd, sizeof cmd,
           "%s -np 4 %s train %s --set pipeline.stages=2 --set pipeline.schedule=interleaved "
           "--set pipeline.virtual_stages=2 --set gradient_accumulation_steps=4 --set train.steps=%d "
           "--set train.eval_interval=0 %s --log-json %s > /dev/null 2>&1",
           mpirun, brigade, config, steps, p->sets, log);
  memset(out, 0, sizeof *out);
  if (system(cmd) != 0) {
    fprintf(stderr, "zero_memory: failed: %s\n", cmd);
    unlink(log);
    return -1;
  }
  FILE *f = fopen(log, "r");
  static char line[1 << 15];
  double ms[MAX_STEPS];
  while (f && fgets(line, sizeof line, f) && out->n < MAX_STEPS) {
    if (strncmp(line, "{\"step\":0,", 10) == 0) continue; /* the val loss before the first update */
    core_json *j;
    if (core_json_parse(line, strlen(line), log, &j)) break;
    if (out->n == 0) {
      out->reduce = num(j, "dp_reduce_bytes", 0), out->gather = num(j, "dp_gather_bytes", 0);
      out->param_start = num(j, "param_startup_bytes", 0), out->param_peak = num(j, "param_peak_bytes", 0);
      out->param_model = num(j, "param_predicted_bytes", 0);
      out->grads = num(j, "grad_bytes", 0), out->state = num(j, "opt_state_bytes", 0);
      out->dev_state = num(j, "opt_state_bytes", 0) + num(j, "master_bytes", 0);
      out->host_state = num(j, "opt_state_host_bytes", 0) + num(j, "master_host_bytes", 0);
    }
    out->loss[out->n] = num(j, "loss", 0);
    ms[out->n++] = num(j, "step_ms", 0);
    core_json_free(j);
  }
  if (f) fclose(f);
  unlink(log);
  if (out->n < 2) return -1;
  int k = out->n - 1; /* steps 2..n, in ms[1..k]: their median, the mean of the middle two when k is even */
  qsort(ms + 1, (size_t)k, sizeof(double), cmp);
  out->ms = k % 2 ? ms[1 + k / 2] : (ms[k / 2] + ms[1 + k / 2]) / 2;
  out->ok = 1;
  return 0;
}

int main(int argc, char **argv) {
  const char *brigade = "build/brigade", *config = "configs/tiny.cfg";
  const char *mpirun = getenv("BRIGADE_MPIRUN") ? getenv("BRIGADE_MPIRUN") : "mpirun";
  int steps = 12;
  for (int i = 1; i < argc; i += 2) { /* every flag takes a value: one without, or an unknown one, is the usage */
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    char *end = NULL;
    long n = v ? strtol(v, &end, 10) : 0;
    if (v && !strcmp(a, "--brigade")) brigade = v;
    else if (v && !strcmp(a, "--mpirun")) mpirun = v;
    else if (v && !strcmp(a, "--config")) config = v;
    else if (v && !strcmp(a, "--steps") && *end == 0 && n >= 2 && n <= MAX_STEPS) steps = (int)n;
    else {
      fprintf(stderr, "usage: %s [--brigade PATH] [--mpirun CMD] [--config CFG] [--steps N, 2 to %d]\n", argv[0], MAX_STEPS);
      return 2;
    }
  }
  row rows[NPOL];
  printf("ZeRO inside the data-parallel group: %s, 2 stages x 2 replicas, interleaved (2 chunks per rank), "
         "4 micro-batches per replica; world rank 0's first step, bytes\n", config);
  printf("%-22s %-16s %12s %12s %12s %12s %12s %12s %12s %9s\n", "stage", "partitioned", "dp reduce", "dp gather",
         "params start", "params peak", "(model)", "gradients", "optimizer", "step ms");
  int bad = 0;
  for (int k = 0; k < NPOL; k++) {
    if (run(mpirun, brigade, config, steps, &policies[k], &rows[k])) {
      bad = 1;
      continue;
    }
    const row *r = &rows[k];
    double worst = 0;
    for (int s = 0; s < r->n && rows[0].ok && s < rows[0].n; s++)
      worst = fmax(worst, fabs(r->loss[s] - rows[0].loss[s]) / fabs(rows[0].loss[s]));
    printf("%-22s %-16s %12.0f %12.0f %12.0f %12.0f %12.0f %12.0f %12.0f %9.2f%s\n", policies[k].name, what[k],
           r->reduce, r->gather, r->param_start, r->param_peak, r->param_model, r->grads, r->state, r->ms,
           worst > 1e-5 ? "  LOSSES DIFFER" : "");
    bad |= worst > 1e-5;
  }
  printf("(losses of every policy within 1e-5 of stage 0's: %s)\n", bad ? "NO" : "yes");

  printf("\nZeRO-Offload on fakedev (device pointers, CPU kernels), bf16, same layout: optimizer state and fp32 master "
         "on the device or on the host\n");
  printf("%-6s %16s %16s %16s %12s %12s %9s\n", "stage", "device: on-dev", "device: offload", "host: offload",
         "step on-dev", "step offload", "ratio");
  for (int z = 1; z <= 3; z++) {
    char a[256], b[400];
    snprintf(a, sizeof a, "--set zero_optimization.stage=%d --set backend=fakedev --set bf16.enabled=true", z);
    snprintf(b, sizeof b, "%s --set zero_optimization.offload_optimizer.device=cpu", a);
    policy pa = {"on device", a}, pb = {"offloaded", b};
    row ra, rb;
    if (run(mpirun, brigade, config, steps, &pa, &ra) || run(mpirun, brigade, config, steps, &pb, &rb)) {
      bad = 1;
      continue;
    }
    double worst = 0;
    for (int s2 = 0; s2 < ra.n && s2 < rb.n; s2++) worst = fmax(worst, fabs(ra.loss[s2] - rb.loss[s2]) / fabs(ra.loss[s2]));
    printf("%-6d %16.0f %16.0f %16.0f %12.2f %12.2f %9.3f%s\n", z, ra.dev_state, rb.dev_state, rb.host_state, ra.ms, rb.ms,
           rb.ms / ra.ms, worst > 1e-5 ? "  LOSSES DIFFER" : "");
    bad |= worst > 1e-5;
  }
  return bad;
}
