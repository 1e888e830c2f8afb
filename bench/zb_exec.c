/* bench/zb_exec.c: the zero-bubble schedules executed for real, beside 1F1B, in one run.
 * For each schedule it runs `MPIRUN -np RANKS brigade train CONFIG` (configs/zb_bench.cfg,
 * 8 micro-batches) with --log-json and a measured trace of one step, and prints a table:
 * measured step time (median over the steps after the warm-up, all rounds), the measured
 * bubble rate of the traced step (median over rounds), the simulator's bubble rate with unit
 * costs (F = B-input = B-weight = 1) and with the op times measured in that step, the CPU the
 * ranks got, and the zb-h1 / 1f1b step time ratio. Rounds run the schedules in rotated order,
 * so that a slow spell of the machine does not fall on one schedule only.
 *
 * Part 1 is the 4-stage pipeline on 4 ranks (1f1b, zb-h1, zb-h2, and zb-v and dualpipev with 8
 * virtual stages).
 * When the machine has fewer cores than that, the ranks share cores: a rank's bubble is then
 * filled by another rank's work, so the step time follows total work / cores and not the
 * bubble, and the table says so. Part 2 (only then) runs as many ranks as there are cores
 * (2 on 2 cores): 1f1b against zb-h1 on 2 stages, and interleaved 1F1B against zb-v on 4
 * virtual stages (2 ranks x 2 chunks), where every rank has a core of its own.
 *
 *   bench/zb_exec [--brigade PATH] [--mpirun CMD] [--config CFG] [--m M] [--steps N]
 *                 [--warmup K] [--rounds R] [--part1-only]
 * MPIRUN defaults to $BRIGADE_MPIRUN, else "mpirun" (`make bench` passes the Makefile's). */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/config.h"
#include "core/error.h"
#include "layers/layers.h"
#include "schedule/schedule.h"

enum { MAX_RUNS = 8, MAX_ROUNDS = 16, MAX_STEPS = 4096 };

typedef struct {
  const char *sched;
  int ranks, p, v;
  /* per round */
  double bubble[MAX_ROUNDS], trace_ms[MAX_ROUNDS], pred_ms[MAX_ROUNDS], pred_bubble[MAX_ROUNDS];
  double cpu_s[MAX_ROUNDS], wall_s[MAX_ROUNDS];
  int nrounds;
  double *steps; /* step times of every timed step, all rounds */
  int *step_round; /* the round of each */
  int nsteps;
  double sim_unit_bubble, sim_unit_span;
  int failed;
} run_t;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(const double *x, int n) {
  if (n <= 0) return 0;
  double *s = malloc(sizeof(double) * (size_t)n);
  memcpy(s, x, sizeof(double) * (size_t)n);
  qsort(s, (size_t)n, sizeof(double), cmp_double);
  double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  free(s);
  return m;
}

static double child_cpu_s(void) {
  struct rusage u;
  getrusage(RUSAGE_CHILDREN, &u);
  return u.ru_utime.tv_sec + 1e-6 * u.ru_utime.tv_usec + u.ru_stime.tv_sec + 1e-6 * u.ru_stime.tv_usec;
}

static int cores(void) {
  cpu_set_t s;
  if (sched_getaffinity(0, sizeof s, &s) == 0) return CPU_COUNT(&s);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

/* The simulator with unit costs (F = I = W = 1) on the shape compiled under them: the family's
 * bubble on equal stages. `brigade train` compiles under the config's FLOP model instead, which
 * the prediction from the measured op times uses. */
static int simulate_unit(run_t *r, int m, int tied) {
  sched_shape sh = {.p = r->p, .v = r->v, .m = m, .tied = tied};
  if (sched_family_parse(r->sched, &sh.family)) return 1;
  sched_costs c = sched_costs_unit();
  sched_program pr;
  if (sched_compile(&sh, &c, &pr)) return 1;
  sched_sim_result res;
  int rc = sched_simulate(&pr, &c, &res, NULL);
  if (!rc) r->sim_unit_bubble = res.bubble_rate, r->sim_unit_span = res.makespan, sched_sim_result_free(&res);
  sched_program_free(&pr);
  return rc;
}

typedef struct {
  const char *brigade, *mpirun, *config, *dir;
  int m, steps, warmup;
} opts_t;

/* One `brigade train` run: appends its timed steps, records the traced step's figures. */
static int run_once(const opts_t *o, run_t *r, int round) {
  char base[1200], cmd[4096], line[2048];
  snprintf(base, sizeof base, "%s/%s_p%d_v%d_r%d", o->dir, r->sched, r->p, r->v, round);
  int trace_step = o->warmup + 1;
  snprintf(cmd, sizeof cmd,
           "%s -np %d %s train %s --set pipeline.stages=%d --set pipeline.virtual_stages=%d "
           "--set 'pipeline.schedule=\"%s\"' --set gradient_accumulation_steps=%d --set train.steps=%d "
           "--set 'trace.path=\"%s.json\"' --set trace.step=%d --log-json %s.jsonl 2>&1",
           o->mpirun, r->ranks, o->brigade, o->config, r->p, r->v, r->sched, o->m, o->steps, base,
           trace_step, base);
  double cpu0 = child_cpu_s(), t0 = now();
  FILE *f = popen(cmd, "r");
  if (!f) return 1;
  double bub = -1, tms = 0, pms = 0, pbub = -1;
  char last_err[2048] = "";
  while (fgets(line, sizeof line, f)) {
    char *s;
    if ((s = strstr(line, "measured timeline:")) && (s = strstr(s, "(step time ")))
      sscanf(s, "(step time %lf ms, bubble rate %lf%%", &tms, &bub);
    if ((s = strstr(line, "predicted from the measured op times: ")))
      sscanf(s, "predicted from the measured op times: step %lf ms, bubble rate %lf%%", &pms, &pbub);
    if (strstr(line, "error") || strstr(line, "rror:")) snprintf(last_err, sizeof last_err, "%s", line);
  }
  int st = pclose(f);
  double wall = now() - t0, cpu = child_cpu_s() - cpu0;
  if (st != 0 || bub < 0) {
    fprintf(stderr, "zb_exec: %s failed (status %d): %s\n  command: %s\n", r->sched, st,
            last_err[0] ? last_err : "(no trace line in its output)", cmd);
    return 1;
  }
  int k = r->nrounds++;
  r->bubble[k] = bub / 100, r->trace_ms[k] = tms, r->pred_ms[k] = pms, r->pred_bubble[k] = pbub / 100;
  r->cpu_s[k] = cpu, r->wall_s[k] = wall;
  snprintf(line, sizeof line, "%s.jsonl", base);
  FILE *j = fopen(line, "r");
  if (!j) return fprintf(stderr, "zb_exec: no %s\n", line), 1;
  while (fgets(line, sizeof line, j)) {
    long step = -1;
    double ms = -1;
    char *a = strstr(line, "\"step\":"), *b = strstr(line, "\"step_ms\":");
    if (a) step = strtol(a + 7, NULL, 10);
    if (b) ms = strtod(b + 10, NULL);
    /* the first steps warm up (allocations, caches); the traced step waits at a barrier */
    if (step > o->warmup && step != trace_step && ms > 0 && r->nsteps < MAX_STEPS)
      r->step_round[r->nsteps] = round, r->steps[r->nsteps++] = ms;
  }
  fclose(j);
  return 0;
}

static double step_median(const run_t *r) { return median(r->steps, r->nsteps); }

/* The median step time of one round (0 when the round has none). */
static double round_median(const run_t *r, int round) {
  double *x = malloc(sizeof(double) * (size_t)(r->nsteps ? r->nsteps : 1));
  int n = 0;
  for (int k = 0; k < r->nsteps; k++)
    if (r->step_round[k] == round) x[n++] = r->steps[k];
  double m = median(x, n);
  free(x);
  return m;
}

static void print_table(run_t *runs, int n, int ncores) {
  printf("%-12s %5s %7s %6s %11s %9s %9s | %9s %9s %9s | %9s\n", "schedule", "ranks", "stages", "steps",
         "step ms", "(min)", "bubble", "sim unit", "sim meas", "sim ms", "cpu util");
  printf("%-12s %5s %7s %6s %11s %9s %9s | %9s %9s %9s | %9s\n", "", "", "p x v", "timed",
         "median", "", "measured", "bubble", "bubble", "meas.cost", "of cores");
  for (int i = 0; i < n; i++) {
    run_t *r = &runs[i];
    char shape[32];
    snprintf(shape, sizeof shape, "%dx%d", r->p, r->v);
    if (r->failed || r->nrounds == 0) {
      printf("%-12s %5d %7s   (failed)\n", r->sched, r->ranks, shape);
      continue;
    }
    double mn = r->steps[0];
    for (int k = 1; k < r->nsteps; k++) mn = r->steps[k] < mn ? r->steps[k] : mn;
    double cpu = 0, wall = 0;
    for (int k = 0; k < r->nrounds; k++) cpu += r->cpu_s[k], wall += r->wall_s[k];
    printf("%-12s %5d %7s %6d %11.1f %9.1f %8.1f%% | %8.1f%% %8.1f%% %9.1f | %8.0f%%\n", r->sched, r->ranks,
           shape, r->nsteps, step_median(r), mn, 100 * median(r->bubble, r->nrounds),
           100 * r->sim_unit_bubble, 100 * median(r->pred_bubble, r->nrounds), median(r->pred_ms, r->nrounds),
           100 * cpu / (wall * (ncores < r->ranks ? ncores : r->ranks)));
  }
}

static void ratio(run_t *runs, int n, const char *a, const char *b, int ranks, int rounds) {
  run_t *x = NULL, *y = NULL;
  for (int i = 0; i < n; i++) {
    if (runs[i].failed || !runs[i].nsteps) continue;
    if (!strcmp(runs[i].sched, a)) x = &runs[i];
    if (!strcmp(runs[i].sched, b)) y = &runs[i];
  }
  if (!x || !y) return;
  double q = step_median(x) / step_median(y);
  printf("%s / %s step time (medians %.1f / %.1f ms, %d ranks): %.3f; per round:", a, b, step_median(x),
         step_median(y), ranks, q);
  /* the same ratio round by round (the machine's load drifts between rounds) */
  int below = q < 1, above = q > 1;
  for (int rd = 0; rd < rounds; rd++) {
    double mx = round_median(x, rd), my = round_median(y, rd);
    if (mx <= 0 || my <= 0) continue;
    printf(" %.3f", mx / my);
    below |= mx < my, above |= mx > my;
  }
  if (below && above)
    printf(" -> inconclusive: the rounds and the pooled medians disagree (within this machine's noise)\n");
  else
    printf(" -> %s is %s than %s in this run, in every round\n", a, below ? "faster" : above ? "slower" : "as fast as", b);
}

/* Runs the given schedules for all rounds, in rotated order; prints their table. */
static int part(const opts_t *o, run_t *runs, int n, int rounds, int ncores, int tied) {
  for (int i = 0; i < n; i++) {
    runs[i].steps = calloc(MAX_STEPS, sizeof(double));
    runs[i].step_round = calloc(MAX_STEPS, sizeof(int));
    if (simulate_unit(&runs[i], o->m, tied)) {
      fprintf(stderr, "zb_exec: simulating %s: %s\n", runs[i].sched, core_error_msg());
      return 1;
    }
  }
  for (int rd = 0; rd < rounds; rd++)
    for (int k = 0; k < n; k++) {
      run_t *r = &runs[(rd + k) % n];
      if (r->failed) continue;
      fprintf(stderr, "  round %d/%d: %s (%d ranks, p=%d v=%d)\n", rd + 1, rounds, r->sched, r->ranks, r->p, r->v);
      if (run_once(o, r, rd)) r->failed = 1;
    }
  print_table(runs, n, ncores);
  double cpu = 0, cap = 0;
  for (int i = 0; i < n; i++)
    for (int k = 0; k < runs[i].nrounds; k++)
      cpu += runs[i].cpu_s[k], cap += runs[i].wall_s[k] * (ncores < runs[i].ranks ? ncores : runs[i].ranks);
  if (cap > 0 && cpu < 0.7 * cap)
    printf("NOTE: the ranks got %.0f%% of the cores they could use: other processes were running, or the ranks "
           "waited (startup and the waits of the schedule count as wall time too).\n", 100 * cpu / cap);
  int bad = 0;
  for (int i = 0; i < n; i++) bad |= runs[i].failed;
  return bad;
}

int main(int argc, char **argv) {
  opts_t o = {.brigade = "build/brigade", .config = "configs/zb_bench.cfg", .m = 8, .steps = 10, .warmup = 2};
  o.mpirun = getenv("BRIGADE_MPIRUN") ? getenv("BRIGADE_MPIRUN") : "mpirun";
  int rounds = 2, part1_only = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--part1-only")) { part1_only = 1; continue; }
    if (!v) return fprintf(stderr, "zb_exec: %s needs a value\n", a), 2;
    if (!strcmp(a, "--brigade")) o.brigade = v;
    else if (!strcmp(a, "--mpirun")) o.mpirun = v;
    else if (!strcmp(a, "--config")) o.config = v;
    else if (!strcmp(a, "--m")) o.m = atoi(v);
    else if (!strcmp(a, "--steps")) o.steps = atoi(v);
    else if (!strcmp(a, "--warmup")) o.warmup = atoi(v);
    else if (!strcmp(a, "--rounds")) rounds = atoi(v);
    else return fprintf(stderr, "zb_exec: unknown option %s\n", a), 2;
    i++;
  }
  if (o.m < 1 || o.warmup < 0 || o.steps < o.warmup + 3 || rounds < 1 || rounds > MAX_ROUNDS)
    return fprintf(stderr, "zb_exec: need m >= 1, steps >= warmup + 3, 1 <= rounds <= %d\n", MAX_ROUNDS), 2;

  /* the tied-embedding flag of the config's model, as `brigade train` compiles it */
  core_config *c;
  layers_model model = {0};
  if (core_config_load(&c, o.config) || layers_model_build(&model, c, 256 /* byte-level; only tying is read */)) {
    fprintf(stderr, "zb_exec: %s\n", core_error_msg());
    return 1;
  }
  int tied = 0;
  for (int i = 0; i < model.n; i++) tied |= model.layers[i].tied_to >= 0;
  layers_model_free(&model);
  core_config_free(c);

  setvbuf(stdout, NULL, _IOLBF, 0); /* the progress lines on stderr interleave in order */
  char dir[] = "/tmp/brigade_zb_exec_XXXXXX";
  if (!mkdtemp(dir)) return perror("zb_exec: mkdtemp"), 1;
  o.dir = dir;

  int nc = cores();
  double load[3] = {0};
  getloadavg(load, 3);
  double t0 = now();
  printf("zb_exec: %s, m=%d micro-batches, %d steps per run (first %d and the traced step %d not timed), "
         "%d round(s)\n", o.config, o.m, o.steps, o.warmup, o.warmup + 1, rounds);
  printf("machine: %d core(s) for this process; load average before: %.2f (1 min)\n", nc, load[0]);
  printf("columns: step ms = median wall time of a training step (rank 0) | bubble measured = the traced "
         "step's 1 - mean(busy)/max(span) from wall-clock op times | sim unit = simulator, F=I=W=1 | "
         "sim meas = simulator on that step's mean op times per stage | cpu util = CPU time of the run / "
         "(wall x min(ranks, cores))\n\n");

  run_t p1[5] = {{.sched = "1f1b", .ranks = 4, .p = 4, .v = 1},     {.sched = "zb-h1", .ranks = 4, .p = 4, .v = 1},
                 {.sched = "zb-h2", .ranks = 4, .p = 4, .v = 1},    {.sched = "zb-v", .ranks = 4, .p = 4, .v = 2},
                 {.sched = "dualpipev", .ranks = 4, .p = 4, .v = 2}};
  printf("Part 1: 4 pipeline stages on 4 ranks (zb-v, dualpipev: 4 ranks x 2 chunks)\n");
  int rc = part(&o, p1, 5, rounds, nc, tied);
  ratio(p1, 5, "zb-h1", "1f1b", 4, rounds);
  ratio(p1, 5, "dualpipev", "zb-v", 4, rounds);
  if (nc < 4) {
    printf("WARNING: 4 ranks share %d core(s). A rank that waits yields its core (the worker polls with "
           "MPI_Test and, after 1000 tries, sleeps 20 us between polls; MPI's own waits yield with "
           "OMPI_MCA_mpi_yield_when_idle=1, which the Makefile's MPIRUN sets), so another rank's work "
           "fills its bubble: the measured step time then reflects total work / cores, not the pipeline "
           "bubble, and a zero-bubble schedule cannot shorten it (its deferred W ops compete with the "
           "critical path for the cores). The measured bubble rates are wall-clock idle per rank, which "
           "time-sharing inflates. Whether zb-h1 beats 1f1b needs >= 4 free cores.\n", nc);
  }

  if (nc < 4 && nc >= 2 && !part1_only) {
    run_t p2[4] = {{.sched = "1f1b", .ranks = 2, .p = 2, .v = 1}, {.sched = "zb-h1", .ranks = 2, .p = 2, .v = 1},
                   {.sched = "interleaved", .ranks = 2, .p = 2, .v = 2}, {.sched = "zb-v", .ranks = 2, .p = 2, .v = 2}};
    printf("\nPart 2: one rank per core (2 ranks): 1f1b vs zb-h1 on 2 stages; interleaved 1F1B vs zb-v on 4 "
           "virtual stages (2 ranks x 2 chunks)\n");
    rc |= part(&o, p2, 4, rounds, nc, tied);
    ratio(p2, 4, "zb-h1", "1f1b", 2, rounds);
    ratio(p2, 4, "zb-v", "interleaved", 2, rounds);
    for (int i = 0; i < 4; i++) free(p2[i].steps), free(p2[i].step_round);
  }
  getloadavg(load, 3);
  printf("\nload average after: %.2f (1 min); a load well above the ranks' own means other processes took "
         "cores during the run (see cpu util). Total %.0f s. Traces in %s\n", load[0], now() - t0, dir);
  for (int i = 0; i < 5; i++) free(p1[i].steps), free(p1[i].step_round);
  return rc;
}
