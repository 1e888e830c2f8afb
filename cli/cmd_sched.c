/* cli/cmd_sched.c: `brigade compile` and `brigade sim`. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/mem.h"
#include "pipe/plan.h"
#include "schedule/schedule.h"
#include "viz/viz.h"

typedef struct {
  sched_shape shape;
  int have_schedule, have_stages, have_mb, have_virtual, have_wlimit, have_mem, have_prefetch;
  const char *shape_flag, *cost_flag, *config_flag; /* the first given of each kind, for errors */
  const char *schedule_file;
  sched_costs costs;
  const char *format, *out, *trace, *svg;
  int json, ascii;
  const char *config; /* sim CONFIG: a training config */
  const char *sets[64];
  int nsets;
  double gflops, dp_gbps;
  int dp;
  const char *max_memory; /* --max-memory, as given (NULL: $BRIGADE_MAX_MEMORY or the machine's) */
  double max_instructions;
  int steps;     /* consecutive steps to simulate (0: not given) */
  int step_sync; /* -1: not given; else a sched_step_sync */
} sched_opts;

static int fail(void) {
  fprintf(stderr, "brigade: error: %s\n", core_error_msg());
  return core_error_code() == CORE_EINPUT ? 2 : 1;
}

/* The config key that says in a training config what a shape flag says (sim CONFIG's errors). */
static const char *config_key_of(const char *flag) {
  static const char *const map[][2] = {
      {"--schedule", "pipeline.schedule"}, {"--stages", "pipeline.stages"},
      {"--virtual", "pipeline.virtual_stages"}, {"--microbatches", "gradient_accumulation_steps"},
      {"--max-pending-w", "pipeline.max_pending_w"}, {"--mem-limit", "pipeline.mem_limit"},
      {"--tied", "model.layers.[N].tie"}, {"--zero3", "zero_optimization.stage"},
      {"--keep-gathered", "zero_optimization.reshard_after_forward"}, {"--prefetch", "zero_optimization.prefetch"},
      {"--offload", "pipeline.offload"}, {"--post-validation", "optimizer.post_validation"},
  };
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (strcmp(flag, map[i][0]) == 0) return map[i][1];
  return "pipeline.schedule";
}

/* Parses the flags both commands share (the shape, and the costs it is compiled under) and the
 * ones of `sim` only (allow_sim). */
static int parse_opts(int argc, char **argv, int allow_sim, sched_opts *o) {
  memset(o, 0, sizeof *o);
  o->shape.v = 1;
  o->costs = sched_costs_unit();
  o->format = "actions";
  o->gflops = 50, o->dp = 1, o->dp_gbps = 10, o->step_sync = -1;
  o->max_instructions = CLI_MAX_INSTRUCTIONS;
  for (int i = 1; i < argc; i++) {
    cli_arg(&argc, argv, i);
    const char *a = argv[i], *val = NULL;
    int rc = CORE_OK;
#define VALUE() (rc = cli_take(argc, argv, &i, &val))
    if (strcmp(a, "--schedule") == 0) {
      if (!VALUE()) rc = sched_family_parse(val, &o->shape.family);
      o->have_schedule = 1;
    } else if (strcmp(a, "--stages") == 0) {
      if (!VALUE()) rc = cli_parse_int(a, val, 1, 1 << 16, &o->shape.p);
      o->have_stages = 1;
    } else if (strcmp(a, "--virtual") == 0) {
      if (!VALUE()) rc = cli_parse_int(a, val, 1, 64, &o->shape.v);
      o->have_virtual = 1;
    } else if (strcmp(a, "--microbatches") == 0) {
      if (!VALUE()) rc = cli_parse_int(a, val, 1, 1 << 20, &o->shape.m);
      o->have_mb = 1;
    } else if (strcmp(a, "--max-pending-w") == 0) {
      if (!VALUE()) rc = cli_parse_int(a, val, 1, 1 << 20, &o->shape.max_pending_w);
      o->have_wlimit = 1;
    } else if (strcmp(a, "--mem-limit") == 0) {
      if (!VALUE()) rc = cli_parse_double(a, val, 1, &o->shape.mem_limit);
      o->have_mem = 1;
    } else if (strcmp(a, "--w-stash") == 0) { /* compile too: zb-auto's budget counts it */
      if (!VALUE()) rc = cli_parse_double(a, val, 0, &o->costs.w_stash);
      if (!rc && !(o->costs.w_stash > 0 && o->costs.w_stash <= 1))
        rc = core_error_set(CORE_EINPUT, "--w-stash: '%s' is not a fraction in (0, 1]", val);
    } else if (strcmp(a, "--tied") == 0) {
      o->shape.tied = 1;
    } else if (strcmp(a, "--post-validation") == 0) {
      o->shape.post_validation = 1;
    } else if (strcmp(a, "--zero3") == 0) {
      o->shape.zero3 = 1;
    } else if (strcmp(a, "--keep-gathered") == 0) {
      o->shape.keep_gathered = 1;
    } else if (strcmp(a, "--prefetch") == 0) {
      if (!VALUE()) rc = cli_parse_int(a, val, 0, 64, &o->shape.prefetch);
      o->have_prefetch = 1;
    } else if (strcmp(a, "--max-memory") == 0) {
      double b;
      if (!VALUE() && !(rc = core_mem_parse(a, val, &b))) o->max_memory = val;
    } else if (strcmp(a, "--max-instructions") == 0) {
      if (!VALUE()) rc = cli_parse_count(a, val, &o->max_instructions);
    } else if (strcmp(a, "--format") == 0 && !allow_sim) {
      if (!VALUE()) o->format = val;
    } else if (strcmp(a, "-o") == 0 && !allow_sim) {
      if (!VALUE()) o->out = val;
    } else if (allow_sim && strcmp(a, "--schedule-file") == 0) {
      VALUE(), o->schedule_file = val;
    } else if (strcmp(a, "--offload") == 0) { /* compile too: OFFLOAD / RELOAD are instructions */
      if (!VALUE()) {
        if (strcmp(val, "none") == 0) o->shape.offload = SCHED_OFFLOAD_NONE;
        else if (strcmp(val, "full") == 0) o->shape.offload = SCHED_OFFLOAD_FULL;
        else if (strcmp(val, "auto") == 0) o->shape.offload = SCHED_OFFLOAD_AUTO;
        else rc = core_error_set(CORE_EINPUT, "--offload: '%s' is not none, full or auto", val);
      }
    } else if (strcmp(a, "--cost-offload") == 0) {
      if (!VALUE()) rc = cli_parse_double(a, val, 0, &o->costs.offload);
      if (!rc && !(o->costs.offload > 0)) /* (0 is how the costs say "not given") */
        rc = core_error_set(CORE_EINPUT, "--cost-offload: a copy takes time: give one slot's copy time above 0 (got '%s')", val);
    } else if (strcmp(a, "--offload-gbps") == 0) {
      if (!VALUE()) rc = cli_parse_double(a, val, 1e-9, &o->costs.offload_gbps);
    } else if (strcmp(a, "--cost-f") == 0) { /* compile too: the program depends on them */
      if (!VALUE()) rc = cli_parse_double(a, val, 0, &o->costs.f);
    } else if (strcmp(a, "--cost-b") == 0) {
      if (!VALUE()) rc = cli_parse_double(a, val, 0, &o->costs.b);
    } else if (strcmp(a, "--cost-w") == 0) {
      if (!VALUE()) rc = cli_parse_double(a, val, 0, &o->costs.w);
    } else if (strcmp(a, "--comm") == 0) {
      if (!VALUE()) rc = cli_parse_double(a, val, 0, &o->costs.comm);
    } else if (allow_sim && strcmp(a, "--cost-reduce") == 0) { /* the tail: sim only */
      if (!VALUE()) rc = cli_parse_double(a, val, 0, &o->costs.reduce);
    } else if (allow_sim && strcmp(a, "--cost-step") == 0) {
      if (!VALUE()) rc = cli_parse_double(a, val, 0, &o->costs.step);
    } else if (allow_sim && strcmp(a, "--cost-norm") == 0) {
      if (!VALUE()) rc = cli_parse_double(a, val, 0, &o->costs.norm);
    } else if (allow_sim && strcmp(a, "--steps") == 0) {
      if (!VALUE()) rc = cli_parse_int(a, val, 1, 1000, &o->steps);
    } else if (allow_sim && strcmp(a, "--step-sync") == 0) {
      if (!VALUE()) {
        if (strcmp(val, "barrier") == 0) o->step_sync = SCHED_STEP_BARRIER;
        else if (strcmp(val, "post-validation") == 0) o->step_sync = SCHED_STEP_POST_VALIDATION, o->shape.post_validation = 1;
        else if (strcmp(val, "eager") == 0) o->step_sync = SCHED_STEP_EAGER;
        else rc = core_error_set(CORE_EINPUT, "--step-sync: '%s' is not barrier, post-validation or eager", val);
      }
    } else if (allow_sim && strcmp(a, "--cost-tied") == 0) {
      if (!VALUE()) rc = cli_parse_double(a, val, 0, &o->costs.tied);
    } else if (strcmp(a, "--cost-gather") == 0) { /* compile too: offload is placed by the times it gives ZeRO-3 */
      if (!VALUE()) rc = cli_parse_double(a, val, 0, &o->costs.gather);
    } else if (strcmp(a, "--act-bytes") == 0) { /* compile too: with --offload-gbps, the copies' time */
      if (!VALUE()) rc = cli_parse_double(a, val, 0, &o->costs.act_bytes);
    } else if (allow_sim && strcmp(a, "--json") == 0) {
      o->json = 1;
    } else if (allow_sim && strcmp(a, "--ascii") == 0) {
      o->ascii = 1;
    } else if (allow_sim && strcmp(a, "--trace") == 0) {
      VALUE(), o->trace = val;
    } else if (allow_sim && strcmp(a, "--svg") == 0) {
      VALUE(), o->svg = val;
    } else if (allow_sim && strcmp(a, "--set") == 0) {
      if (!VALUE() && o->nsets == 64) rc = core_error_set(CORE_EINPUT, "too many --set options");
      else if (!rc) o->sets[o->nsets++] = val;
    } else if (allow_sim && strcmp(a, "--gflops") == 0) {
      if (!VALUE()) rc = cli_parse_double(a, val, 1e-6, &o->gflops);
    } else if (allow_sim && strcmp(a, "--dp") == 0) {
      double dp; /* range and integrality first: a double outside int's range must not be converted */
      if (!VALUE() && !(rc = cli_parse_double(a, val, 1, &dp)) && (dp > 1 << 20 || dp != floor(dp)))
        rc = core_error_set(CORE_EINPUT, "--dp: '%s' is not a replica count", val);
      if (!rc) o->dp = (int)dp;
    } else if (allow_sim && strcmp(a, "--dp-gbps") == 0) {
      if (!VALUE()) rc = cli_parse_double(a, val, 1e-9, &o->dp_gbps);
    } else if (allow_sim && a[0] != '-' && !o->config) {
      o->config = a;
    } else {
      rc = core_error_set(CORE_EINPUT, "%s: unknown option '%s' (see 'brigade help')", argv[0], a);
    }
#undef VALUE
    if (rc) return rc;
    /* which way of running sim the flag belongs to: a shape, costs of a shape or file, a config */
    if (!o->shape_flag && (!strcmp(a, "--schedule") || !strcmp(a, "--stages") || !strcmp(a, "--virtual") ||
                           !strcmp(a, "--microbatches") || !strcmp(a, "--max-pending-w") || !strcmp(a, "--tied") ||
                           !strcmp(a, "--mem-limit") || !strcmp(a, "--zero3") || !strcmp(a, "--keep-gathered") ||
                           !strcmp(a, "--prefetch") || !strcmp(a, "--offload") || !strcmp(a, "--post-validation")))
      o->shape_flag = a;
    if (!o->cost_flag && (!strncmp(a, "--cost-", 7) || !strcmp(a, "--comm") || !strcmp(a, "--act-bytes") ||
                           !strcmp(a, "--w-stash") || !strcmp(a, "--offload-gbps")))
      o->cost_flag = a;
    if (!o->config_flag && (!strcmp(a, "--set") || !strcmp(a, "--gflops") || !strcmp(a, "--dp") ||
                            !strcmp(a, "--dp-gbps")))
      o->config_flag = a;
  }
  if (o->config) {
    if (o->shape_flag || o->schedule_file)
      return core_error_set(CORE_EINPUT, "sim CONFIG takes the shape from the config: use --set %s=... instead of %s",
                            o->shape_flag ? config_key_of(o->shape_flag) : "pipeline.schedule",
                            o->shape_flag ? o->shape_flag : "--schedule-file");
    if (o->cost_flag)
      return core_error_set(CORE_EINPUT, "sim CONFIG prices each stage from its FLOPs (--gflops, --dp, "
                                         "--dp-gbps); %s applies to shape flags and schedule files",
                            o->cost_flag);
    return CORE_OK;
  }
  if (o->config_flag)
    return core_error_set(CORE_EINPUT, "%s applies to sim CONFIG (a training config), not to shape flags "
                                       "or a schedule file", o->config_flag);
  /* --mem-limit is what auto offload brings each rank under, of a compiled shape or a file's */
  int auto_limit = o->shape.offload == SCHED_OFFLOAD_AUTO;
  if (o->schedule_file) {
    if (o->have_schedule || o->have_stages || o->have_mb || o->have_wlimit || o->have_virtual || (o->have_mem && !auto_limit))
      return core_error_set(CORE_EINPUT, "give either --schedule-file or the shape flags (--schedule, "
                                         "--stages, --virtual, --microbatches, --max-pending-w, --mem-limit but for "
                                         "--offload auto's), not both");
    if (o->shape.zero3 || o->shape.keep_gathered || o->have_prefetch)
      return core_error_set(CORE_EINPUT, "--zero3, --keep-gathered and --prefetch apply to a compiled shape, not "
                                         "to --schedule-file");
  }
  if (o->shape.zero3 && !o->have_prefetch) o->shape.prefetch = 1; /* ZeRO-3's default: one run ahead */
  if (auto_limit) {
    if (!o->have_mem)
      return core_error_set(CORE_EINPUT, "--offload auto needs --mem-limit X: the memory per rank, in stages' "
                                         "activations, to bring every rank under");
    o->shape.offload_limit = o->shape.mem_limit;
    if (o->shape.family != SCHED_ZB_AUTO) o->shape.mem_limit = 0;
  }
  if (o->schedule_file) return CORE_OK;
  /* a V has two chunks; interleaved needs at least two: default to 2 unless --virtual says */
  if ((sched_family_is_v(o->shape.family) || o->shape.family == SCHED_INTERLEAVED) && !o->have_virtual)
    o->shape.v = 2;
  if (!o->have_schedule || !o->have_stages || !o->have_mb)
    return core_error_set(CORE_EINPUT, "%s needs --schedule, --stages and --microbatches%s", argv[0],
                          allow_sim ? " (or --schedule-file)" : "");
  return CORE_OK;
}

/* The limits a command keeps to: --max-instructions, and --max-memory, $BRIGADE_MAX_MEMORY or
 * the machine's memory (mem->what names it). */
static int limits_of(const sched_opts *o, core_mem_limit *mem, sched_limits *lim) {
  int rc = core_mem_limit_get(o->max_memory, mem);
  *lim = (sched_limits){.max_instructions = o->max_instructions, .instr_name = "--max-instructions",
                        .max_bytes = mem->bytes, .mem_what = mem->what};
  return rc;
}

/* What the options add to a file's program (offload, VALIDATE), not yet verified (freed on an
 * error); file_build: the file read first, for sched_offload_within, which asks for auto's limit
 * and whether to take the fewest. */
static int file_add(const sched_opts *o, double limit, int fewest, sched_program *pr) {
  int rc = CORE_OK;
  if (o->shape.offload) rc = sched_place_offload(pr, &o->costs, (sched_offload_mode)o->shape.offload, limit, fewest);
  if (!rc && o->shape.post_validation) rc = sched_place_validate(pr);
  if (rc) sched_program_free(pr);
  return rc;
}
static int file_build(void *ctx, double limit, int fewest, sched_program *pr) {
  const sched_opts *o = ctx;
  int rc = sched_csv_read_program(o->schedule_file, o->shape.tied, &o->costs, pr);
  return rc ? rc : file_add(o, limit, fewest, pr);
}

/* The program the options describe: compiled from the shape, or read from a CSV (lowered by
 * brigade, or in the file's own order where it has transfers). Either way it is verified before
 * anything uses it. A shape is first sized (sched_size_estimate): one over the limits is refused
 * before anything is built. steps, events: what the simulation will run and record (compile: 0). */
static int build_program(const sched_opts *o, int steps, int events, sched_program *pr) {
  if (!o->schedule_file) {
    static const char *const names[3] = {"--stages", "--virtual", "--microbatches"};
    core_mem_limit mem;
    sched_limits lim;
    sched_size sz;
    int rc = limits_of(o, &mem, &lim);
    sched_size_estimate(&o->shape, steps, events, &sz);
    if (!rc) rc = sched_size_check(&o->shape, &sz, &lim, names);
    return rc ? rc : sched_compile(&o->shape, &o->costs, pr);
  }
  int rc = sched_csv_read_program(o->schedule_file, o->shape.tied, &o->costs, pr);
  if (!rc && events && (rc = sched_events_check((double)sched_program_count(pr), steps, o->schedule_file))) {
    sched_program_free(pr); /* as sched_size_check refuses a shape's */
    return rc;
  }
  if (rc || !(o->shape.offload || o->shape.post_validation)) return rc;
  if (o->shape.offload == SCHED_OFFLOAD_AUTO) { /* a file's program as a compiled one: auto checked by simulation */
    sched_program_free(pr);
    rc = sched_offload_within(o->shape.offload_limit, &o->costs, pr, file_build, (void *)o);
  } else {
    rc = file_add(o, o->shape.offload_limit, 0, pr);
  }
  if (!rc && (rc = sched_verify(pr))) sched_program_free(pr);
  return rc;
}

int cli_compile(int argc, char **argv) {
  sched_opts o;
  sched_program pr;
  core_mem_keep_freed();
  if (parse_opts(argc, argv, 0, &o)) return fail();
  if (strcmp(o.format, "actions") && strcmp(o.format, "instructions") && strcmp(o.format, "csv") &&
      strcmp(o.format, "csv-comm")) {
    core_error_set(CORE_EINPUT, "--format: '%s' is not one of actions, instructions, csv, csv-comm", o.format);
    return fail(); /* before -o truncates anything */
  }
  if (build_program(&o, 0, 0, &pr)) return fail();
  FILE *f = stdout;
  if (o.out && !(f = fopen(o.out, "w"))) {
    sched_program_free(&pr);
    core_error_set(CORE_ERUNTIME, "cannot write %s: %s", o.out, strerror(errno));
    return fail();
  }
  int rc = CORE_OK;
  if (!strncmp(o.format, "csv", 3)) { /* PyTorch's format has no copies, gathers or checks: said, not dropped silently */
    int off = 0, gat = 0, val = 0;
    for (int r = 0; r < pr.p; r++)
      for (int i = 0; i < pr.streams[r].len; i++) {
        int op = pr.streams[r].ins[i].op;
        off |= op == SCHED_OFFLOAD || op == SCHED_RELOAD, gat |= op == SCHED_GATHER_PARAMS, val |= op == SCHED_VALIDATE;
      }
    if (off || gat || val)
      fprintf(stderr, "brigade: warning: the CSV leaves out the program's%s%s%s (PyTorch's format has no such actions)%s\n",
              off ? " OFFLOAD/RELOAD" : "", gat ? " GATHER/RELEASE_PARAMS" : "", val ? " VALIDATE" : "",
              off || val ? "; sim --schedule-file places them again with --offload, --post-validation" : "");
  }
  if (strcmp(o.format, "actions") == 0) sched_write_actions(&pr, f);
  else if (strcmp(o.format, "instructions") == 0) sched_write_listing(&pr, f);
  else if (strcmp(o.format, "csv") == 0) rc = sched_csv_write(&pr, f);
  else rc = sched_csv_write_comm(&pr, f);
  if (f != stdout && fclose(f) != 0 && !rc) rc = core_error_set(CORE_ERUNTIME, "writing %s failed", o.out);
  sched_program_free(&pr);
  return rc ? fail() : 0;
}

/* Activation copies in the program: how many pairs go to host memory, over all ranks. */
static int offloads(const sched_sim_result *res) {
  int n = 0;
  for (int r = 0; r < res->p; r++) n += res->ranks[r].offloaded;
  return n;
}

static const char *sync_name(int sync) {
  return sync == SCHED_STEP_POST_VALIDATION ? "post-validation" : sync == SCHED_STEP_EAGER ? "eager" : "barrier";
}

static void print_json(const sched_program *pr, const sched_sim_result *res, double cap, int sync) {
  printf("{\"schedule\":\"%s\",\"stages\":%d,\"virtual\":%d,\"microbatches\":%d,", 
         sched_family_name(pr->family), pr->p, pr->v, pr->m);
  printf("\"steps\":%d,\"steps_run\":%d,\"step_sync\":\"%s\",\"steady_step_time\":%.17g,", res->steps, res->steps_run,
         sync_name(sync), res->steady_step_time);
  printf("\"instructions\":%zu,\"makespan\":%.17g,\"bubble_rate\":%.17g,\"idle_fraction\":%.17g,",
         sched_program_count(pr), res->makespan, res->bubble_rate, res->idle_fraction);
  if (cap >= 0) printf("\"memory_cap\":%.17g,", cap);
  if (pr->gather_limit) printf("\"gather_limit\":%d,", pr->gather_limit);
  printf("\"ranks\":[");
  for (int r = 0; r < res->p; r++) {
    const sched_rank_stats *s = &res->ranks[r];
    printf("%s{\"rank\":%d,\"busy\":%.17g,\"span\":%.17g,\"idle\":%.17g,\"peak_activations\":%d,"
           "\"peak_memory\":%.17g,\"peak_activation_bytes\":%.17g,\"slots\":%d,\"aside_parts\":%d",
           r ? "," : "", r, s->busy, s->span, s->idle, s->peak_activations, s->peak_memory, s->peak_bytes,
           pr->nslots[r], pr->naslots[r]);
    if (pr->gather_limit)
      printf(",\"peak_gathered\":%d,\"peak_gather_bytes\":%.17g,\"gather_time\":%.17g", s->peak_gathered,
             s->peak_gather_bytes, s->gather_time);
    if (offloads(res))
      printf(",\"offloaded\":%d,\"kept\":%d,\"copy_time\":%.17g,\"order_peak_activation_bytes\":%.17g", s->offloaded,
             s->kept, s->copy_time, s->order_peak_bytes);
    printf("}");
  }
  printf("]}\n");
}

static void print_table(const sched_program *pr, const sched_sim_result *res, double cap, int sync, int offload) {
  printf("%s  p=%d v=%d m=%d  makespan %.6g  bubble rate %.2f%%  idle fraction %.2f%%\n",
         sched_family_name(pr->family), pr->p, pr->v, pr->m, res->makespan,
         100 * res->bubble_rate, 100 * res->idle_fraction);
  if (res->steps > 1)
    printf("%d steps back to back (%s at the optimizer): steady step time %.6g (steps 2..%d)\n", res->steps,
           sync_name(sync), res->steady_step_time, res->steps);
  if (cap >= 0) printf("memory cap %.4g stage activations per rank (peak_mem below is in the same unit)\n", cap);
  int g = pr->gather_limit > 0;
  if (g) printf("ZeRO-3: at most %d chunks gathered at once per rank (gathered = the most a rank held; "
                "gather = time on its communication lane)\n", pr->gather_limit);
  int off = offloads(res) > 0;
  if (off) printf("activation offload: peak_mem counts a pair from its RELOAD's start, not from its OFFLOAD's end; "
                  "offl = pairs offloaded, kept = pairs kept on the device, copy = time on the copy streams\n");
  else if (offload) printf("activation offload: no pair offloaded: on no rank do copies that hide free a buffer in "
                           "time to allocate fewer (make the copies faster)\n");
  printf("%6s %12s %12s %12s %8s %9s", "rank", "busy", "span", "idle", "peak_act", "peak_mem");
  if (g) printf(" %9s %12s", "gathered", "gather");
  if (off) printf(" %6s %6s %10s", "offl", "kept", "copy");
  printf("\n");
  for (int r = 0; r < res->p; r++) {
    const sched_rank_stats *s = &res->ranks[r];
    printf("%6d %12.6g %12.6g %12.6g %8d %9.4g", r, s->busy, s->span, s->idle, s->peak_activations,
           s->peak_memory);
    if (g) printf(" %9d %12.6g", s->peak_gathered, s->gather_time);
    if (off) printf(" %6d %6d %10.6g", s->offloaded, s->kept, s->copy_time);
    printf("\n");
  }
}

int cli_sim(int argc, char **argv) {
  sched_opts o;
  sched_program pr;
  pipe_plan plan = {0};
  core_mem_keep_freed(); /* compiling, verifying and simulating: one large table after another */
  if (parse_opts(argc, argv, 1, &o)) return fail();
  int events = o.ascii || o.trace || o.svg; /* a timeline only for what draws it */
  /* a config's step is predicted in its steady state: 4 steps, meeting at the optimizer as the
   * run would (post-validation where its program has VALIDATEs: optimizer.post_validation, the
   * zero-bubble and V families' default) */
  int steps = o.steps ? o.steps : o.config ? 4 : 1;
  if (o.config) { /* predict a training config: FLOP-priced stages, times in seconds */
    pipe_plan_hw hw = {.gflops = o.gflops, .d = o.dp, .dp_gbps = o.dp_gbps};
    core_mem_limit mem;
    if (limits_of(&o, &mem, &hw.limits)) return fail();
    hw.sim_steps = steps, hw.events = events;
    if (pipe_plan_build(o.config, o.sets, o.nsets, &hw, &plan)) return fail();
    pr = plan.prog;
    o.costs = plan.costs;
    if (!o.json) {
      char twice[96] = "";
      if (plan.params_twice != plan.params)
        snprintf(twice, sizeof twice, " (a tied weight counted once; %.3f M counting it twice)", plan.params_twice / 1e6);
      printf("%s: %.3f M parameters%s; stage costs from FLOPs at %.4g GFLOP/s (--gflops)%s\n", o.config,
             plan.params / 1e6, twice, o.gflops, o.dp > 1 ? "" : "; one replica (--dp)");
    }
    if (!o.json && plan.offload)
      printf("activation copies at %.4g GB/s: pipeline.offload_gbps as the placement weighed it against compute "
             "at pipeline.offload_gflops (%.4g), scaled to --gflops\n", plan.offload_gbps, plan.offload_gflops);
    if (!o.json && o.dp > 1) {
      double peak = 0;
      for (int r = 0; r < plan.stages; r++) peak = plan.state_bytes[r] > peak ? plan.state_bytes[r] : peak;
      if (plan.zero_stage == 3)
        printf("%d replicas per stage, ZeRO-3 collectives at %.4g GB/s (--dp-gbps): gradient reduce %.4g s per "
               "step, each chunk's parameter all-gather %.4g s (stage 0; its GATHER_PARAMS, beside compute), "
               "exposed per-micro-batch reduce-scatter %.4g s (stage 0); largest rank state %.2f MB without "
               "its gather buffers\n", o.dp, o.dp_gbps, plan.costs.reduce, plan.gather ? plan.gather[0] : 0.0,
               plan.dp_w ? plan.dp_w[0] : 0.0, peak / 1e6);
      else
        printf("%d replicas per stage, ZeRO collectives at %.4g GB/s (--dp-gbps): gradient reduce %.4g s, "
               "parameter gather %.4g s per step, exposed per-micro-batch reduce-scatter %.4g s (stage 0); "
               "largest rank state %.2f MB\n", o.dp, o.dp_gbps, plan.costs.reduce, plan.costs.step,
               plan.dp_w ? plan.dp_w[0] : 0.0, peak / 1e6);
    }
  } else if (build_program(&o, steps, events, &pr)) {
    return fail();
  }
  sched_timeline tl;
  sched_timeline_init(&tl, sched_family_name(pr.family), o.config ? "s, predicted" : "unit", pr.p, pr.v, pr.m);
  sched_sim_result res;
  int sync = o.step_sync >= 0 ? o.step_sync : o.config ? (int)plan.step_sync : (int)SCHED_STEP_BARRIER;
  int rc = sched_simulate_steps(&pr, &o.costs, steps, (sched_step_sync)sync, &res, events ? &tl : NULL);
  if (!rc) {
    double cap = o.config || pr.mem_cap <= 0 ? -1 : pr.mem_cap; /* the compiler's promise; none for files */
    if (o.json) print_json(&pr, &res, cap, sync);
    else print_table(&pr, &res, cap, sync, o.config ? plan.offload : o.shape.offload);
    if (o.ascii) viz_write_ascii(&tl, o.json ? stderr : stdout, 100);
    if (o.trace) rc = viz_write_trace(&tl, o.trace);
    if (!rc && o.svg) rc = viz_write_svg(&tl, o.svg);
    if (!rc && !o.json && (o.trace || o.svg))
      printf("wrote%s%s%s%s\n", o.trace ? " " : "", o.trace ? o.trace : "", o.svg ? " " : "",
             o.svg ? o.svg : "");
    sched_sim_result_free(&res);
  }
  sched_timeline_free(&tl);
  if (o.config) pipe_plan_free(&plan);
  else sched_program_free(&pr);
  return rc ? fail() : 0;
}

int cli_plot(int argc, char **argv) {
  const char *in = NULL, *out = NULL;
  int ascii = 0, rc = CORE_OK;
  for (int i = 1; i < argc && !rc; i++) {
    cli_arg(&argc, argv, i);
    if (strcmp(argv[i], "-o") == 0) rc = cli_take(argc, argv, &i, &out);
    else if (strcmp(argv[i], "--ascii") == 0) ascii = 1;
    else if (argv[i][0] == '-' && argv[i][1]) rc = core_error_set(CORE_EINPUT, "plot: unknown option '%s'", argv[i]);
    else if (in) rc = core_error_set(CORE_EINPUT, "plot takes one trace file (got '%s' and '%s')", in, argv[i]);
    else in = argv[i];
  }
  if (!rc && !in) rc = core_error_set(CORE_EINPUT, "usage: brigade plot TRACE.json [-o FILE.svg] [--ascii]");
  if (!rc && !out && !ascii) rc = core_error_set(CORE_EINPUT, "plot: give -o FILE.svg and/or --ascii");
  if (rc) return fail();
  sched_timeline tl;
  rc = viz_read_trace(in, &tl);
  if (rc) return fail();
  if (ascii) viz_write_ascii(&tl, stdout, 100);
  if (out) rc = viz_write_svg(&tl, out);
  if (!rc && out) printf("wrote %s (%s, p=%d v=%d m=%d, bubble rate %.2f%%)\n", out, tl.schedule, tl.p, tl.v, tl.m, 100 * tl.bubble_rate);
  sched_timeline_free(&tl);
  return rc ? fail() : 0;
}
