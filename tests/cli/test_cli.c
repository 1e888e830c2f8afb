/* The brigade program as a user runs it: subcommands, outputs, and clear errors (exit 2). */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/json.h"
#include "tests/common/mpirun.h"

/* Runs build/brigade ARGS; returns the exit status, stdout+stderr in *out (caller frees). */
static int brigade_env(const char *env, const char *args, char **out) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "%s %s/brigade %s", env, test_build_dir(), args);
  int rc = test_capture(cmd, out);
  cr_assert(rc >= 0, "could not run %s", cmd);
  return rc;
}

static int brigade(const char *args, char **out) { return brigade_env("", args, out); }

Test(cli, sim_json_has_the_documented_keys) {
  char *out;
  cr_assert_eq(brigade("sim --schedule 1f1b --stages 4 --microbatches 8 --json", &out), 0, "%s", out);
  core_json *j;
  cr_assert_eq(core_json_parse(out, strlen(out), "stdout", &j), 0, "%s", out);
  const char *keys[] = {"schedule", "stages", "virtual", "microbatches", "makespan", "bubble_rate", "idle_fraction", "ranks"};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) cr_assert_not_null(core_json_get(j, keys[i]), "no %s", keys[i]);
  cr_assert_eq(core_json_get(j, "makespan")->num, 33);
  const core_json *r0 = core_json_at(core_json_get(j, "ranks"), 0);
  const char *rk[] = {"rank", "busy", "span", "idle", "peak_activations"};
  for (size_t i = 0; i < 5; i++) cr_assert_not_null(core_json_get(r0, rk[i]));
  cr_assert_eq(core_json_get(r0, "peak_activations")->num, 4);
  core_json_free(j);
  free(out);
}

/* pipeline.offload = "full" weighs each copy against compute at pipeline.offload_gflops, whose
 * default follows the backend: a GPU's rate on "cuda" (the tiny GPT's copies do not hide: none
 * offloaded), a CPU's (50) when set so (on 4 stages all 8 of rank 0's micro-batches offloaded:
 * it allocates 3 slots instead of 4). */
static double rank0_offloaded(const char *extra) {
  char args[512], *out;
  snprintf(args, sizeof args, "sim configs/tiny.cfg --set backend=cuda --set 'pipeline.offload=\"full\"' "
           "--set pipeline.stages=4 --set gradient_accumulation_steps=8 %s --json", extra);
  cr_assert_eq(brigade(args, &out), 0, "%s", out);
  core_json *j;
  cr_assert_eq(core_json_parse(out, strlen(out), "stdout", &j), 0, "%s", out);
  const core_json *o = core_json_get(core_json_at(core_json_get(j, "ranks"), 0), "offloaded");
  double n = o ? o->num : 0; /* no key: no copies placed */
  core_json_free(j);
  free(out);
  return n;
}
/* Copies too slow to free any buffer in time (1F1B p = 4, a copy three forwards long): full
 * offloads nothing, and sim says so rather than printing no offload at all. */
Test(cli, sim_says_when_full_offload_places_nothing) {
  char *out;
  cr_assert_eq(brigade("sim --schedule 1f1b --stages 4 --microbatches 8 --cost-offload 3 --offload full", &out), 0,
               "%s", out);
  cr_assert(strstr(out, "activation offload: no pair offloaded: on no rank do copies that hide free a buffer in time"),
            "%s", out);
  free(out);
  cr_assert_eq(brigade("sim --schedule 1f1b --stages 4 --microbatches 8 --cost-offload 0.5 --offload full", &out), 0,
               "%s", out);
  cr_assert(!strstr(out, "no pair offloaded") && strstr(out, "offl = pairs offloaded"), "%s", out);
  free(out);
}

Test(cli, offload_costs_default_to_the_backends_rate) {
  cr_assert_eq(rank0_offloaded(""), 0);
  cr_assert_eq(rank0_offloaded("--set pipeline.offload_gflops=50"), 8);
}

/* sim CONFIG prices a copy as the placement weighed it: pipeline.offload_gbps beside compute at
 * pipeline.offload_gflops, scaled to --gflops. It priced copies at offload_gbps whatever --gflops
 * was, so a config placed for a GPU (offload_gflops 100000) and simulated at the default 50 drew
 * its copies 2000 times shorter, relative to compute, than they were placed: here every figure
 * of a run at 10 times the compute rate is a tenth (copies, makespan), and at --gflops equal to
 * offload_gflops a rank's copy time is its copies' bytes over offload_gbps. */
static void offload_run(double gflops, double *makespan, double *copy) {
  char args[512], *out;
  snprintf(args, sizeof args, "sim configs/tiny.cfg --set backend=cuda --set 'pipeline.offload=\"full\"' "
           "--set pipeline.stages=4 --set gradient_accumulation_steps=8 --set pipeline.offload_gflops=50 "
           "--set pipeline.offload_gbps=100 --gflops %g --json", gflops);
  cr_assert_eq(brigade(args, &out), 0, "%s", out);
  core_json *j;
  cr_assert_eq(core_json_parse(out, strlen(out), "stdout", &j), 0, "%s", out);
  *makespan = core_json_get(j, "makespan")->num;
  for (int r = 0; r < 4; r++) {
    const core_json *c = core_json_get(core_json_at(core_json_get(j, "ranks"), r), "copy_time");
    copy[r] = c ? c->num : 0;
  }
  core_json_free(j);
  free(out);
}
Test(cli, sim_config_prices_copies_as_they_were_placed) {
  double m50, m500, c50[4], c500[4];
  offload_run(50, &m50, c50);
  offload_run(500, &m500, c500);
  cr_assert(c50[0] > 0 && c50[1] > 0, "rank 0 and 1 offload (copy times %g, %g)", c50[0], c50[1]);
  cr_assert(fabs(m500 * 10 - m50) <= 1e-9 * m50, "makespan %.17g at 50 GFLOP/s, %.17g at 500", m50, m500);
  for (int r = 0; r < 4; r++)
    cr_assert(fabs(c500[r] * 10 - c50[r]) <= 1e-9 * c50[r], "rank %d: copies %.17g s at 50 GFLOP/s, %.17g at 500", r,
              c50[r], c500[r]);
  char *out;
  cr_assert_eq(brigade("sim configs/tiny.cfg --set backend=cuda --set 'pipeline.offload=\"full\"' --set pipeline.stages=4 "
                       "--set gradient_accumulation_steps=8 --set pipeline.offload_gflops=50 --set pipeline.offload_gbps=100 "
                       "--gflops 500", &out), 0, "%s", out);
  cr_assert(strstr(out, "activation copies at 1000 GB/s: pipeline.offload_gbps as the placement weighed it against "
                        "compute at pipeline.offload_gflops (50), scaled to --gflops"), "%s", out);
  free(out);
}

/* Two sim --json outputs describe the same run: the same figures from "makespan" to the rank
 * list and the same rank list (a compiled family also states its memory_cap; a file does not). */
static int same_run(const char *a, const char *b) {
  const char *ma = strstr(a, "\"makespan\":"), *mb = strstr(b, "\"makespan\":");
  const char *ea = strstr(a, "\"idle_fraction\":"), *eb = strstr(b, "\"idle_fraction\":");
  const char *ra = strstr(a, "\"ranks\":"), *rb = strstr(b, "\"ranks\":");
  if (!ma || !mb || !ea || !eb || !ra || !rb || ea - ma != eb - mb) return 0;
  return strncmp(ma, mb, (size_t)(ea - ma)) == 0 && strcmp(ra, rb) == 0;
}

Test(cli, compile_formats_and_schedule_file_round_trip) {
  char *out;
  cr_assert_eq(brigade("compile --schedule interleaved --stages 2 --virtual 2 --microbatches 3", &out), 0, "%s", out);
  cr_assert(strstr(out, "rank 0: 0F0"), "%s", out);
  free(out);
  cr_assert_eq(brigade("compile --schedule 1f1b --stages 2 --microbatches 2 --format instructions", &out), 0);
  cr_assert(strstr(out, "SEND_ACT mb=0 chunk=0 peer=1 slot=0"), "%s", out);
  free(out);
  char csv[] = "/tmp/brigade_cli_XXXXXX";
  close(mkstemp(csv));
  char args[256];
  snprintf(args, sizeof args, "compile --schedule zb-h1 --stages 3 --microbatches 5 --format csv -o %s", csv);
  cr_assert_eq(brigade(args, &out), 0, "%s", out);
  free(out);
  snprintf(args, sizeof args, "sim --schedule-file %s --json", csv);
  char *a, *b;
  cr_assert_eq(brigade(args, &a), 0, "%s", a);
  cr_assert_eq(brigade("sim --schedule zb-h1 --stages 3 --microbatches 5 --json", &b), 0);
  cr_assert(same_run(a, b), "file: %s\ncompiled: %s", a, b);
  free(a), free(b);
  /* --offload auto on a file: --mem-limit is its limit, as on a compiled shape (a file refused
   * --mem-limit, and auto without it, so it could not run at all) */
  snprintf(args, sizeof args, "compile --schedule 1f1b --stages 4 --microbatches 8 --format csv -o %s", csv);
  cr_assert_eq(brigade(args, &out), 0, "%s", out);
  free(out);
  snprintf(args, sizeof args, "sim --schedule-file %s --offload auto --mem-limit 3 --cost-offload 0.5 --json", csv);
  cr_assert_eq(brigade(args, &a), 0, "%s", a);
  cr_assert_eq(brigade("sim --schedule 1f1b --stages 4 --microbatches 8 --offload auto --mem-limit 3 --cost-offload 0.5 --json", &b), 0, "%s", b);
  cr_assert(same_run(a, b) && strstr(a, "\"offloaded\":3"), "file: %s\ncompiled: %s", a, b); /* (the fewest: 4 taken) */
  free(a), free(b);
  /* where the fewest pairs leave a rank over the limit as simulated, a file's program is placed
   * again with every pair the greedy took, as a compiled one is (sched_offload_within) */
  snprintf(args, sizeof args, "compile --schedule zb-h2 --stages 6 --microbatches 24 --comm 0.1 --w-stash 0.4 --format csv -o %s",
           csv);
  cr_assert_eq(brigade(args, &out), 0, "%s", out);
  free(out);
  snprintf(args, sizeof args, "sim --schedule-file %s --comm 0.1 --w-stash 0.4 --offload auto --mem-limit 4 --cost-offload 0.5 --json",
           csv);
  cr_assert_eq(brigade(args, &a), 0, "%s", a);
  cr_assert_eq(brigade("sim --schedule zb-h2 --stages 6 --microbatches 24 --comm 0.1 --w-stash 0.4 --offload auto "
                       "--mem-limit 4 --cost-offload 0.5 --json", &b), 0, "%s", b);
  cr_assert(same_run(a, b), "file: %s\ncompiled: %s", a, b);
  free(a), free(b);
  remove(csv);
}

/* compile takes the cost flags, as docs/reference.md says: the program it writes is the one sim
 * compiles under the same costs (zb-h1 places W by them, lowering the transfers). */
Test(cli, compile_under_the_cost_flags) {
  char csv[] = "/tmp/brigade_cli_XXXXXX";
  close(mkstemp(csv));
  char args[256], *out, *a, *b;
  snprintf(args, sizeof args, "compile --schedule zb-h1 --stages 4 --microbatches 8 --comm 0.5 --cost-w 2 --format csv -o %s",
           csv);
  cr_assert_eq(brigade(args, &out), 0, "%s", out);
  free(out);
  snprintf(args, sizeof args, "sim --schedule-file %s --comm 0.5 --cost-w 2 --json", csv);
  cr_assert_eq(brigade(args, &a), 0, "%s", a);
  cr_assert_eq(brigade("sim --schedule zb-h1 --stages 4 --microbatches 8 --comm 0.5 --cost-w 2 --json", &b), 0, "%s", b);
  cr_assert(same_run(a, b), "file: %s\ncompiled: %s", a, b);
  free(a), free(b);
  remove(csv);
}

/* compile --offload full prices a slot's copy as its help says, by --act-bytes over
 * --offload-gbps (it refused --act-bytes as sim's alone): a copy that hides offloads, one 100
 * times slower does not. */
Test(cli, compile_offload_by_bytes_and_bandwidth) {
  char args[512], path[] = "/tmp/brigade_cli_XXXXXX", *out;
  close(mkstemp(path));
  int n[2];
  for (int k = 0; k < 2; k++) {
    snprintf(args, sizeof args, "compile --schedule 1f1b --stages 4 --microbatches 8 --offload full --act-bytes %s "
             "--offload-gbps 10 --format instructions -o %s", k ? "1e11" : "1e9", path);
    cr_assert_eq(brigade(args, &out), 0, "%s", out);
    free(out);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "grep -c OFFLOAD %s", path);
    test_capture(cmd, &out);
    n[k] = atoi(out);
    free(out);
  }
  cr_assert(n[0] > 0 && n[1] == 0, "offloads: %d with copies of 0.1, %d with copies of 10", n[0], n[1]);
  remove(path);
}

/* A bad --format is refused before -o opens the file: an existing file is left as it was. */
Test(cli, compile_bad_format_keeps_the_output_file) {
  char path[] = "/tmp/brigade_cli_XXXXXX";
  FILE *f = fdopen(mkstemp(path), "w");
  fputs("0F0,0B0\n", f);
  fclose(f);
  char args[256], *out;
  snprintf(args, sizeof args, "compile --schedule 1f1b --stages 2 --microbatches 2 --format xml -o %s", path);
  cr_assert_eq(brigade(args, &out), 2, "%s", out);
  cr_assert(strstr(out, "--format: 'xml'"), "%s", out);
  free(out);
  char buf[64] = "";
  f = fopen(path, "r");
  cr_assert(f && fgets(buf, sizeof buf, f));
  fclose(f);
  cr_assert_str_eq(buf, "0F0,0B0\n", "the bad --format emptied %s", path);
  remove(path);
}

Test(cli, trace_svg_and_plot) {
  char *out;
  cr_assert_eq(brigade("sim --schedule gpipe --stages 2 --microbatches 3 --trace /tmp/brigade_cli_t.json "
                       "--svg /tmp/brigade_cli_t.svg --ascii", &out), 0, "%s", out);
  cr_assert(strstr(out, "rank  1 |"), "%s", out);
  free(out);
  cr_assert_eq(brigade("plot /tmp/brigade_cli_t.json -o /tmp/brigade_cli_t2.svg", &out), 0, "%s", out);
  free(out);
  cr_assert_eq(test_sh("cmp -s /tmp/brigade_cli_t.svg /tmp/brigade_cli_t2.svg"), 0, "plot of the trace differs from sim's SVG");
  remove("/tmp/brigade_cli_t.json"), remove("/tmp/brigade_cli_t.svg"), remove("/tmp/brigade_cli_t2.svg");
}

/* A trace of 1 KB that claims a million ranks, two of which have events (0 and 999999): plot
 * draws those two rows and one for the ranks between, not a row per claimed rank (the SVG was
 * 236 MB, the terminal chart 21 MB). */
Test(cli, plot_of_a_trace_claiming_huge_rank_count_stays_small) {
  const char *trace =
      "{\"otherData\":{\"generator\":\"brigade\",\"version\":1,\"schedule\":\"1f1b\",\"unit\":\"unit\","
      "\"us_per_unit\":1000,\"p\":1000000,\"v\":1,\"m\":1,\"makespan\":6,\"bubble_rate\":0.5},\"traceEvents\":["
      "{\"name\":\"F0\",\"cat\":\"FORWARD\",\"ph\":\"X\",\"ts\":0,\"dur\":1000,\"pid\":1,\"tid\":1,"
      "\"args\":{\"mb\":0,\"chunk\":0,\"stage\":0,\"peer\":-1,\"start\":0,\"end\":1}},"
      "{\"name\":\"F0\",\"cat\":\"FORWARD\",\"ph\":\"X\",\"ts\":1000,\"dur\":1000,\"pid\":1,\"tid\":1000000,"
      "\"args\":{\"mb\":0,\"chunk\":0,\"stage\":1,\"peer\":-1,\"start\":1,\"end\":2}},"
      "{\"name\":\"B0\",\"cat\":\"BACKWARD\",\"ph\":\"X\",\"ts\":2000,\"dur\":2000,\"pid\":1,\"tid\":1000000,"
      "\"args\":{\"mb\":0,\"chunk\":0,\"stage\":1,\"peer\":-1,\"start\":2,\"end\":4}},"
      "{\"name\":\"B0\",\"cat\":\"BACKWARD\",\"ph\":\"X\",\"ts\":4000,\"dur\":2000,\"pid\":1,\"tid\":1,"
      "\"args\":{\"mb\":0,\"chunk\":0,\"stage\":0,\"peer\":-1,\"start\":4,\"end\":6}}]}\n";
  char json[] = "/tmp/brigade_cli_huge_XXXXXX", svg[64], args[256], *out;
  FILE *f = fdopen(mkstemp(json), "w");
  fputs(trace, f);
  fclose(f);
  snprintf(svg, sizeof svg, "%s.svg", json);
  snprintf(args, sizeof args, "plot %s -o %s --ascii", json, svg);
  int rc = brigade(args, &out);
  long size = -1;
  FILE *s = fopen(svg, "r");
  if (s) fseek(s, 0, SEEK_END), size = ftell(s), fclose(s);
  remove(json), remove(svg); /* before any assertion: the old SVG took 236 MB */
  cr_assert_eq(rc, 0, "%.2000s", out);
  cr_assert(strlen(out) < 4096, "the terminal chart of 4 events is %zu bytes", strlen(out));
  cr_assert(strstr(out, "rank      0 |F...BB|\nranks 1-999998: no events\nrank 999999 |.FBB..|\n"), "%s", out);
  free(out);
  cr_assert(size > 0 && size < 16384, "the SVG of 4 events is %ld bytes", size);
}

/* Each bad invocation: exit 2 and exactly one line "brigade: error: ...". */
Test(cli, bad_input_is_one_line_and_exit_2) {
  const char *bad[] = {
      "sim --schedule 1f1b --stages 0 --microbatches 4",
      "sim --schedule 1f1b --stages 4 --microbatches 0",
      "sim --schedule interleaved --stages 4 --virtual 1 --microbatches 4",
      "sim --schedule warp --stages 4 --microbatches 4",
      "sim --schedule 1f1b --stages four --microbatches 4",
      "sim --schedule 1f1b --stages 4",
      "sim --schedule 1f1b --stages 4 --microbatches 4 --cost-f -1",
      "sim --schedule 1f1b --stages 4 --microbatches 4 --bogus",
      "sim --schedule-file /nonexistent.csv",
      "compile --schedule 1f1b --stages 2 --microbatches 2 --format xml",
      "compile --schedule 1f1b --stages 2 --microbatches 2 --max-pending-w 1",
      "sim --schedule zb-h1 --stages 2 --microbatches 2 --max-pending-w 0",
      "sim configs/tiny.cfg --max-pending-w 2",
      "sim --schedule 1f1b --stages 2 --microbatches 2 --cost-f 1e308 --json", /* inf is not JSON */
      "sim --schedule 1f1b --stages 2 --microbatches 2 --act-bytes 1e308 --json",
      "sim --schedule zb-h1 --stages 2 --microbatches 4 --cost-f 1e308", /* zb.c's scheduler aborted */
      "compile --schedule zb-v --stages 2 --microbatches 4 --cost-w 1e308",
      "plot /nonexistent.json -o /tmp/x.svg",
      "frobnicate",
      /* 2.2e6 instructions x 1000 steps of timeline events: more than an int counts (it aborted) */
      "sim --schedule 1f1b --stages 4 --microbatches 100000 --steps 1000 --ascii --max-memory 1T",
      /* forward only: no optimizer step for steps to meet at (it printed a NaN, or stuck) */
      "sim --schedule inference --stages 2 --microbatches 2 --steps 2",
      "sim --schedule inference --stages 2 --microbatches 2 --steps 2 --step-sync post-validation",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char *out;
    int rc = brigade(bad[i], &out);
    cr_assert_eq(rc, 2, "'%s' exited %d: %s", bad[i], rc, out);
    cr_assert(strncmp(out, "brigade: error: ", 16) == 0, "'%s': %s", bad[i], out);
    cr_assert(strchr(out, '\n') == out + strlen(out) - 1, "'%s' printed more than one line: %s", bad[i], out);
    free(out);
  }
  char csv[] = "/tmp/brigade_bad_XXXXXX";
  FILE *f = fdopen(mkstemp(csv), "w");
  fputs("0F0,0B0\n1F0,1Q0\n", f);
  fclose(f);
  char args[128], *out;
  snprintf(args, sizeof args, "sim --schedule-file %s", csv);
  cr_assert_eq(brigade(args, &out), 2);
  cr_assert(strstr(out, ":2:5: bad action '1Q0'"), "%s", out);
  free(out);
  remove(csv);
}

/* Numbers at the ends of their range: an underflowing value (1e-320) is a number, as strtod
 * reads it, not an error; a byte limit below one byte is refused as one, not rounded to 0. */
Test(cli, numbers_at_the_ends_of_their_range) {
  char *out;
  int rc = brigade("sim --schedule 1f1b --stages 2 --microbatches 2 --comm 1e-320", &out);
  cr_assert_eq(rc, 0, "--comm 1e-320 exited %d: %s", rc, out);
  free(out);
  rc = brigade("sim --schedule 1f1b --stages 2 --microbatches 2 --comm 1e999", &out);
  cr_assert_eq(rc, 2, "--comm 1e999 (inf) exited %d: %s", rc, out);
  free(out);
  rc = brigade("tune configs/tiny.cfg --memory 0.5", &out);
  cr_assert_eq(rc, 2);
  cr_assert(strstr(out, "--memory: '0.5' is not a positive byte count"), "%s", out);
  free(out);
  rc = brigade("tune configs/tiny.cfg --memory 0.5K --top 1", &out); /* 512 bytes: a limit */
  cr_assert_eq(rc, 2);
  cr_assert(strstr(out, "no candidate fits in --memory 512 bytes"), "%s", out);
  free(out);
}

/* `train` takes at most 256 --set options, in either spelling: the 257th --set=key=value is an
 * error, not a write past the end of the list. */
Test(cli, train_too_many_set_equals_options) {
  size_t cap = 8192, n = 0;
  char *cmd = malloc(cap), *out;
  n += (size_t)snprintf(cmd, cap, "%s/brigade train configs/tiny.cfg", test_build_dir());
  for (int i = 0; i < 300; i++) n += (size_t)snprintf(cmd + n, cap - n, " --set=train.steps=1");
  cr_assert(n < cap);
  int rc = test_capture(cmd, &out);
  cr_assert_eq(rc, 2, "exited %d: %.300s", rc, out);
  cr_assert(strcmp(out, "brigade: error: too many --set options\n") == 0, "%s", out);
  free(out), free(cmd);
}

/* Every command's options take --name=value as well as --name value: the same run either way,
 * and an unknown one named without its value. */
Test(cli, options_take_name_equals_value) {
  char *a, *b;
  cr_assert_eq(brigade("sim configs/tiny.cfg --set pipeline.stages=2 --steps 2 --gflops 20 --json", &a), 0, "%s", a);
  cr_assert_eq(brigade("sim configs/tiny.cfg --set=pipeline.stages=2 --steps=2 --gflops=20 --json", &b), 0, "%s", b);
  cr_assert(same_run(a, b) && strstr(b, "\"stages\":2,"), "%s\n%s", a, b);
  free(a), free(b);
  cr_assert_eq(brigade("compile --schedule zb-h2 --stages 4 --microbatches 8 --format csv", &a), 0, "%s", a);
  cr_assert_eq(brigade("compile --schedule=zb-h2 --stages=4 --microbatches=8 --format=csv", &b), 0, "%s", b);
  cr_assert_str_eq(a, b);
  free(a), free(b);
  cr_assert_eq(brigade("sim --schedule=1f1b --stages=2 --microbatches=4 --bogus=3", &a), 2);
  cr_assert(strstr(a, "unknown option '--bogus'"), "%s", a);
  free(a);
  /* only an option is split: a value a flag takes stays whole, however it looks (sample's
   * --prompt "--x=1" was read as an option '1') */
  cr_assert_eq(brigade("sim configs/tiny.cfg --set --x=1", &a), 2);
  cr_assert(strstr(a, "--set --x: '--x' is not a valid key name"), "%s", a);
  free(a);
}

/* tune prices each candidate as `sim CONFIG` predicts that shape: its step sync too (the
 * zero-bubble and V families post-validate by default; tune took the config's family's, 1f1b's
 * barrier, for all of them). Every listed candidate of the tiny GPT on 4 stages, against sim with
 * the same keys, to the printed digits. */
Test(cli, tune_prices_as_sim_config_does, .timeout = 120) {
  char *out;
  cr_assert_eq(brigade("tune configs/tiny.cfg --set pipeline.stages=4 --memory 1G --gflops 10 --top 5 --svg /dev/null", &out),
               0, "%s", out);
  char *row = strstr(out, "\n  1  ");
  cr_assert(row, "%s", out);
  int checked = 0, zb = 0;
  for (int k = 0; k < 5 && row; k++, row = strchr(row + 1, '\n')) {
    int idx, v, m, B;
    char fam[32], part[32];
    double ms;
    if (sscanf(row, " %d %31s %d %d %d %31s %lf", &idx, fam, &v, &m, &B, part, &ms) != 7) break;
    if (strstr(fam, "+rc")) continue; /* (the recompute keys: another config) */
    char lim[64] = "", *at = strchr(fam, '@');
    if (at) *at = 0, snprintf(lim, sizeof lim, "--set pipeline.mem_limit=%s", at + 1);
    char args[512], *sim;
    snprintf(args, sizeof args, "sim configs/tiny.cfg --set pipeline.stages=4 --set 'pipeline.schedule=\"%s\"' "
             "--set pipeline.virtual_stages=%d --set gradient_accumulation_steps=%d --set train_micro_batch_size_per_gpu=%d "
             "--set 'pipeline.partition_method=\"%s\"' %s --gflops 10", fam, v, m, B, part, lim);
    cr_assert_eq(brigade(args, &sim), 0, "%s", sim);
    const char *st = strstr(sim, "steady step time ");
    cr_assert(st, "%s", sim);
    char want[32], got[32];
    snprintf(want, sizeof want, "%.6g", ms), snprintf(got, sizeof got, "%.6g", 1e3 * atof(st + 17));
    cr_assert_str_eq(got, want, "%s: sim %s ms, tune %s ms", fam, got, want);
    zb += strncmp(fam, "zb-", 3) == 0 || strncmp(fam, "v-", 2) == 0;
    free(sim);
    checked++;
  }
  cr_assert(checked >= 3 && zb >= 1, "%d candidates checked (%d zero-bubble):\n%s", checked, zb, out);
  free(out);
}

Test(cli, sim_a_training_config) {
  char *out;
  cr_assert_eq(brigade("sim configs/tiny.cfg --set pipeline.stages=4 --set pipeline.schedule=zb-h1 --gflops 10 --json", &out), 0, "%s", out);
  core_json *j;
  cr_assert_eq(core_json_parse(out, strlen(out), "stdout", &j), 0, "%s", out);
  cr_assert_str_eq(core_json_get(j, "schedule")->str, "zb-h1");
  cr_assert_eq(core_json_get(j, "stages")->num, 4);
  cr_assert(core_json_get(j, "makespan")->num > 0);
  core_json_free(j);
  free(out);
  cr_assert_eq(brigade("sim configs/tiny.cfg --set pipeline.stages=16", &out), 2);
  cr_assert(strstr(out, "fewer than the 16 pieces"), "%s", out);
  free(out);
}

/* Flags of one way of running sim given to the other were ignored without a word: the cost
 * model of shape flags with a config (its costs are FLOPs), the config's pricing without one,
 * --virtual with a schedule file (whose placement sets v); --offload, --offload-gbps and
 * --post-validation with a config (its pipeline.offload* and optimizer.post_validation say). */
Test(cli, sim_flags_that_would_be_ignored_are_errors) {
  const char *bad[][2] = {
      {"sim configs/tiny.cfg --comm 1", "--comm"},
      {"sim configs/tiny.cfg --cost-f 5", "--cost-f"},
      {"sim configs/tiny.cfg --act-bytes 1000", "--act-bytes"},
      {"sim configs/tiny.cfg --virtual 2", "--virtual"},
      {"sim configs/tiny.cfg --tied", "--tied"},
      {"sim configs/tiny.cfg --offload full", "use --set pipeline.offload=... instead of --offload"},
      {"sim configs/tiny.cfg --post-validation", "optimizer.post_validation"},
      {"sim configs/tiny.cfg --offload-gbps 5", "--offload-gbps"},
      {"sim configs/tiny.cfg --zero3", "use --set zero_optimization.stage=... instead of --zero3"},
      {"sim --schedule 1f1b --stages 2 --microbatches 2 --gflops 10", "--gflops"},
      {"sim --schedule 1f1b --stages 2 --microbatches 2 --dp 2", "--dp"},
      {"sim --schedule 1f1b --stages 2 --microbatches 2 --set pipeline.stages=2", "--set"},
      {"sim --schedule-file /nonexistent.csv --virtual 2", "--virtual"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char *out;
    int rc = brigade(bad[i][0], &out);
    cr_assert_eq(rc, 2, "'%s' exited %d: %s", bad[i][0], rc, out);
    cr_assert(strncmp(out, "brigade: error: ", 16) == 0 && strstr(out, bad[i][1]), "'%s': %s", bad[i][0], out);
    cr_assert(strchr(out, '\n') == out + strlen(out) - 1, "'%s' printed more than one line: %s", bad[i][0], out);
    free(out);
  }
}

/* --dp is read as a double: one outside int's range (or not whole) is refused before it is
 * converted to int, which would be undefined behaviour (the sanitizer build stops on it). */
Test(cli, sim_dp_out_of_range_is_refused_before_conversion) {
  const char *vals[] = {"1e30", "-1e30", "3e9", "1e300", "2147483648", "1048577", "2.5"};
  for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
    char args[128], *out;
    snprintf(args, sizeof args, "sim configs/tiny.cfg --dp %s", vals[i]);
    int rc = brigade(args, &out);
    cr_assert_eq(rc, 2, "'%s' exited %d: %s", args, rc, out);
    cr_assert(strncmp(out, "brigade: error: --dp: '", 23) == 0, "'%s': %s", args, out);
    cr_assert(strchr(out, '\n') == out + strlen(out) - 1, "'%s' printed more than one line: %s", args, out);
    free(out);
  }
  char *out;
  cr_assert_eq(brigade("sim configs/tiny.cfg --dp 1048576 --json", &out), 0, "%s", out);
  free(out);
}

/* A bad value given by --set is reported at the --set, not at the config line of the list
 * element or key it changed (which keeps its file line): members of model.layers elements, an
 * element of optimizer.params.betas, the keys d_model and n_heads that a layer checks. */
Test(cli, errors_about_a_set_override_name_the_set) {
  const char *cases[][2] = {
      {"--set 'model.layers.[1].repeat=0'", "model.layers.[1].repeat must be in [1, 4096] (--set model.layers.[1].repeat)"},
      {"--set 'model.layers[1].repeat=5000'", "model.layers.[1].repeat must be in [1, 4096] (--set model.layers.[1].repeat)"},
      {"--set 'model.layers.[1].mlp_ratio=100'", "model.layers.[1].mlp_ratio must be in [1, 64] (--set model.layers.[1].mlp_ratio)"},
      {"--set 'model.layers.[2].eps=2'", "model.layers.[2].eps must be in (0, 1) (--set model.layers.[2].eps)"},
      {"--set 'model.layers.[3].tie=nope'", "layer 'head' (--set model.layers.[3].tie): tie = \"nope\" names no embedding layer"},
      {"--set 'model.layers.[2].tie=wte'", "layer 'ln_f' (--set model.layers.[2].tie): only an lm_head can be tied"},
      {"--set model.n_heads=5", "d_model 32 must be a multiple of n_heads 5 (model.d_model: configs/tiny.cfg:15; model.n_heads: --set model.n_heads)"},
      {"--set 'optimizer.params.betas.[1]=1.5'", "optimizer.params.betas must be in [0, 1): [1] is 1.5 (--set optimizer.params.betas.[1])"},
      /* not overridden: still the file's line */
      {"--set 'model.layers.[2].eps=1e-5' --set 'model.layers.[1].repeat=4' --set model.d_model=30",
       "d_model 30 must be a multiple of n_heads 4 (model.d_model: --set model.d_model; model.n_heads: configs/tiny.cfg:15)"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char args[512], *out;
    snprintf(args, sizeof args, "train configs/tiny.cfg --set train.steps=1 %s", cases[i][0]);
    int rc = brigade_env("ASAN_OPTIONS=detect_leaks=0", args, &out); /* train initialises MPI */
    cr_assert_eq(rc, 2, "'%s' exited %d: %s", args, rc, out);
    cr_assert(strncmp(out, "brigade: error: ", 16) == 0 && strstr(out, cases[i][1]), "'%s': wanted '%s', got %s", args,
              cases[i][1], out);
    cr_assert(strchr(out, '\n') == out + strlen(out) - 1, "'%s' printed more than one line: %s", args, out);
    free(out);
  }
}

/* backend = "cuda" without a usable GPU (or in a build without CUDA): one clear line, exit 2. */
Test(cli, cuda_backend_without_a_gpu_is_one_clear_error) {
  char *out;
  /* train initialises MPI, whose leaks are Open MPI's own */
  int rc = brigade_env("ASAN_OPTIONS=detect_leaks=0", "train configs/tiny.cfg --set backend=cuda --set train.steps=1", &out);
  cr_assert_eq(rc, 2, "exit %d: %s", rc, out);
  cr_assert(strncmp(out, "brigade: error: backend", 23) == 0 && strstr(out, "use backend \"cpu\""), "%s", out);
  cr_assert(strchr(out, '\n') == out + strlen(out) - 1, "more than one line: %s", out);
  free(out);
}

/* Every command answers --help (anywhere among its arguments) and `brigade help COMMAND` with
 * its own usage on stdout, exit 0; the overview lists every command. */
Test(cli, every_command_has_help) {
  const char *cmds[] = {"train", "sim", "compile", "tune", "plot", "sample", "tokenize", "convert"};
  char *out, args[128], want[64];
  cr_assert_eq(brigade("help", &out), 0, "%s", out);
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
    snprintf(want, sizeof want, "\n  %s ", cmds[i]);
    cr_assert(strstr(out, want), "overview lacks %s: %s", cmds[i], out);
  }
  free(out);
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
    snprintf(want, sizeof want, "usage: brigade %s ", cmds[i]);
    const char *forms[] = {"%s --help", "%s -h", "help %s", "%s some.cfg --set a=1 --help"};
    for (size_t f = 0; f < 4; f++) {
      snprintf(args, sizeof args, forms[f], cmds[i]);
      cr_assert_eq(brigade(args, &out), 0, "brigade %s: %s", args, out);
      cr_assert(strncmp(out, want, strlen(want)) == 0, "brigade %s printed: %s", args, out);
      free(out);
    }
  }
  cr_assert_eq(brigade("help nosuch", &out), 2, "%s", out);
  cr_assert(strstr(out, "unknown command 'nosuch'"), "%s", out);
  free(out);
}

/* sim --steps: consecutive steps, meeting at the optimizer under a barrier or not; the JSON says
 * how many (and how many were run rather than copied), which way, and the steady step time (zb-h2 p=4 m=8: 27.5 vs 24.5; with a norm of 10,
 * post-validation's check waits for it and eager's does not). */
/* zb-h2 p=4 m=8, a step of 0.5, 4 steps, with FLAGS: sim --json's output (caller frees) */
static char *zb_h2_steps(const char *flags) {
  char args[256], *out;
  snprintf(args, sizeof args, "sim --schedule zb-h2 --stages 4 --microbatches 8 --cost-step 0.5 --steps 4 --json %s",
           flags);
  cr_assert_eq(brigade(args, &out), 0, "%s", out);
  return out;
}
Test(cli, sim_steps_and_step_sync) {
  char *out = zb_h2_steps("--step-sync post-validation");
  /* steps_run: the steps simulated one by one, the rest copied (the third starts as the second, shifted) */
  cr_assert(strstr(out, "\"steps\":4,\"steps_run\":2,\"step_sync\":\"post-validation\",\"steady_step_time\":24.5,"), "%s", out);
  free(out);
  out = zb_h2_steps("--step-sync barrier --cost-norm 0.25");
  cr_assert(strstr(out, "\"step_sync\":\"barrier\",\"steady_step_time\":27.75,"), "%s", out);
  free(out);
  out = zb_h2_steps("--step-sync eager --cost-norm 10");
  cr_assert(strstr(out, "\"step_sync\":\"eager\",\"steady_step_time\":24.5,"), "%s", out);
  free(out);
  out = zb_h2_steps("--step-sync post-validation --cost-norm 10");
  const char *t = strstr(out, "\"steady_step_time\":");
  cr_assert(t && atof(t + 19) > 24.5 + 1, "%s", out);
  free(out);
  cr_assert_eq(brigade("sim --schedule 1f1b --stages 2 --microbatches 2 --step-sync sometimes", &out), 2);
  cr_assert(strstr(out, "--step-sync: 'sometimes' is not barrier, post-validation or eager"), "%s", out);
  free(out);
}

/* A step-0 checkpoint of configs/tiny.cfg in dir/ck and its llm.c export dir/w.bin (and, with
 * st, its safetensors export dir/w.st); `then`: more shell commands to run after them ("" none). */
static void exported_checkpoint(const char *dir, int st, const char *then) {
  char cmd[2048];
  const char *b = test_build_dir();
  int k = snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 %s/brigade train configs/tiny.cfg --set train.steps=0 "
                   "--set checkpoint.dir=%s/ck 1>&2 && %s/brigade convert %s/ck %s/w.bin --to llmc 1>&2", b, dir, b, dir, dir);
  if (st) k += snprintf(cmd + k, sizeof cmd - (size_t)k, " && %s/brigade convert %s/ck %s/w.st --to safetensors 1>&2", b, dir, dir);
  if (*then) snprintf(cmd + k, sizeof cmd - (size_t)k, " && %s", then);
  cr_assert_eq(test_sh(cmd), 0, "%s", cmd);
}

/* `brigade ARGS` is refused: exit 2, one line "brigade: error: " + prefix ... holding want. */
static void refused(const char *args, const char *prefix, const char *want) {
  char *out;
  int rc = brigade_env("ASAN_OPTIONS=detect_leaks=0", args, &out);
  cr_assert_eq(rc, 2, "'%s' exited %d: %s", args, rc, out);
  size_t n = strlen("brigade: error: ");
  cr_assert(strncmp(out, "brigade: error: ", n) == 0 && strncmp(out + n, prefix, strlen(prefix)) == 0 && strstr(out, want),
            "'%s': wanted '%s', got %s", args, want, out);
  cr_assert(strchr(out, '\n') == out + strlen(out) - 1, "'%s' printed more than one line: %s", args, out);
  free(out);
}

/* convert's --heads where it would be ignored or cannot hold (an llm.c file's header says the
 * heads, a checkpoint's config does, a count that does not divide the width was reported at
 * made-up lines of the file), --init-from a directory (was "shorter than llm.c's header") and
 * convert of a path that does not exist (was "is a weights file"): each one clear line, exit 2. */
Test(cli, convert_heads_and_init_from_a_directory, .timeout = 120) {
  char dir[] = "/tmp/brigade_cli_XXXXXX", cmd[2048], *out;
  cr_assert(mkdtemp(dir));
  exported_checkpoint(dir, 1, "");
  const char *bad[][2] = {
      {"convert %s/w.bin %s/a --heads 8", "--heads 8, but "},
      {"convert %s/w.st %s/b --heads 5", "--heads 5 does not divide "},
      {"convert %s/ck %s/c.bin --to llmc --heads 4", "--heads applies to a model.safetensors file"},
      {"train configs/tiny.cfg --set train.steps=1 --init-from %s/ck%s", "Is a directory"},
      {"convert %s/none %s/e.bin --to llmc", "convert: cannot open "}, /* was "is a weights file" */
      {"convert %s/ck/latest %s/f.bin --to llmc", "/ck/latest is not a checkpoint directory"}, /* (called a weights file) */
      /* safetensors against another model: the key named, the tensor and both shapes */
      {"train configs/tiny.cfg --set train.steps=1 --init-from %s/w.st --set model.layers.[1].repeat=4",
       "the file holds 6 blocks (h.0 .. h.5), the model 4 (model.layers)"},
      {"train configs/tiny.cfg --set train.steps=1 --init-from %s/w.st --set model.layers.[1].mlp_ratio=2",
       "h.0.mlp.c_fc.weight: the file holds [32, 128], the model [32, 64] (layer 1 'block.0': mlp_ratio must be 4)"},
      {"train configs/tiny.cfg --set train.steps=1 --init-from %s/w.st --set 'model.layers=({type=\"embedding\"; "
       "name=\"wte\";}, {type=\"transformer_block\"; name=\"h\"; repeat=6;}, {type=\"linear\"; name=\"proj\"; out=32;}, "
       "{type=\"layernorm\"; name=\"ln_f\";}, {type=\"lm_head\"; name=\"head\"; tie=\"wte\";}, {type=\"cross_entropy\"; "
       "name=\"loss\";})'", "layer 7 ('proj') is a linear, GPT-2 has a transformer_block there (model.layers)"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char args[1024];
    snprintf(args, sizeof args, bad[i][0], dir, i == 3 ? "" : dir);
    refused(args, "", bad[i][1]);
  }
  snprintf(cmd, sizeof cmd, "convert %s/w.bin %s/d --heads 4", dir, dir); /* the header's own count: fine */
  cr_assert_eq(brigade(cmd, &out), 0, "%s", out);
  free(out);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  cr_assert_eq(test_sh(cmd), 0);
}

/* `brigade train configs/tiny.cfg --set train.steps=1 ARGS` must end with exit 2 and one line
 * "brigade: error: ..." holding each of want[] (NULL-terminated). */
static void train_refuses(const char *args, const char *const *want) {
  char cmd[1024], *out;
  snprintf(cmd, sizeof cmd, "train configs/tiny.cfg --set train.steps=1 %s", args);
  int rc = brigade_env("ASAN_OPTIONS=detect_leaks=0", cmd, &out); /* train initialises MPI */
  cr_assert_eq(rc, 2, "'%s' exited %d: %s", cmd, rc, out);
  cr_assert(strncmp(out, "brigade: error: ", 16) == 0, "'%s': %s", cmd, out);
  for (int i = 0; want[i]; i++) cr_assert(strstr(out, want[i]), "'%s': wanted '%s', got %s", cmd, want[i], out);
  cr_assert(strchr(out, '\n') == out + strlen(out) - 1, "'%s' printed more than one line: %s", cmd, out);
  free(out);
}

/* SGD's momentum of 1 or more was accepted (a velocity that never decays); it must be in [0, 1). */
Test(cli, sgd_momentum_must_be_below_one) {
  const char *const w2[] = {"optimizer.params.momentum = 2 must be in [0, 1) (--set optimizer.params.momentum)", NULL};
  train_refuses("--set optimizer.type=SGD --set optimizer.params.momentum=2", w2);
  const char *const w1[] = {"optimizer.params.momentum = 1 must be in [0, 1)", NULL};
  train_refuses("--set optimizer.type=SGD --set optimizer.params.momentum=1.0", w1);
  const char *const wn[] = {"optimizer.params.momentum = -0.5 must be in [0, 1)", NULL};
  train_refuses("--set optimizer.type=SGD --set optimizer.params.momentum=-0.5", wn);
}

/* Range errors that named no place (pipeline.offload_gbps / offload_gflops "must be > 0 (got 0
 * and 50)", "train.timeout must be > 0 seconds", fp16's scales with the file only, an unknown
 * scheduler.type with nothing): each now names its key and the --set (or line) that gave it. */
Test(cli, range_errors_name_the_key_and_its_place) {
  const char *cases[][2] = {
      {"--set pipeline.offload_gbps=0", "pipeline.offload_gbps = 0 must be > 0 (--set pipeline.offload_gbps)"},
      {"--set pipeline.offload_gflops=-3", "pipeline.offload_gflops = -3 must be > 0 (--set pipeline.offload_gflops)"},
      {"--set train.timeout=0", "train.timeout = 0 must be > 0 seconds (--set train.timeout)"},
      {"--set train.timeout=-1.5", "train.timeout = -1.5 must be > 0 seconds (--set train.timeout)"},
      {"--set fp16.loss_scale=-1", "fp16.loss_scale = -1 must be 0 (dynamic) or in [2^-24, 2^64] (--set fp16.loss_scale)"},
      {"--set fp16.min_loss_scale=0", "fp16.min_loss_scale = 0 must be in [2^-24, 2^64] (--set fp16.min_loss_scale)"},
      /* values a double holds and the float kernels do not: the weights went NaN with exit 0
       * (a static scale of 1e-39: 0 x inf), or AdamW stopped updating (eps 1e300: inf) */
      {"--set fp16.enabled=true --set fp16.loss_scale=1e-39",
       "fp16.loss_scale = 1e-39 must be 0 (dynamic) or in [2^-24, 2^64] (--set fp16.loss_scale)"},
      {"--set fp16.enabled=true --set fp16.loss_scale=1e39",
       "fp16.loss_scale = 1e+39 must be 0 (dynamic) or in [2^-24, 2^64] (--set fp16.loss_scale)"},
      {"--set optimizer.params.eps=1e300",
       "optimizer.params.eps = 1e+300 is beyond a float's range, as the optimizer uses it (--set optimizer.params.eps)"},
      {"--set optimizer.params.lr=1e39",
       "optimizer.params.lr = 1e+39 is beyond a float's range, as the optimizer uses it (--set optimizer.params.lr)"},
      {"--set optimizer.params.eps=1e-50",
       "optimizer.params.eps = 1e-50 is below a float's range, as the optimizer uses it (--set optimizer.params.eps)"},
      /* a minimum above the start: the run stopped at step 2 "at the minimum loss scale (4.19e6)" at 1.05e6 */
      {"--set fp16.enabled=true --set fp16.initial_scale_power=20 --set fp16.min_loss_scale=4194304",
       "fp16.min_loss_scale = 4.1943e+06 (--set fp16.min_loss_scale) is above the initial scale 2^20 "
       "(fp16.initial_scale_power)"},
      {"--set optimizer.params.betas=[]", "optimizer.params.betas must hold two numbers (--set optimizer.params.betas)"},
      /* the layer list's errors named the config file when a --set made them */
      {"--set 'model.layers=()'", "model.layers is missing or empty (--set model.layers)"},
      {"--set 'model.layers.[4].type=\"relu\"'", "layer 'loss' (--set model.layers.[4].type) follows the lm_head 'head'"},
      {"--set scheduler.type=foo", "scheduler.type (--set scheduler.type): unknown scheduler.type 'foo'"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *const w[] = {cases[i][1], NULL};
    train_refuses(cases[i][0], w);
  }
}

/* Keys that change nothing under the config's choices were taken without a word: the decay's
 * keys under WarmupLR or constant, the other optimizer's (momentum with AdamW, betas and eps
 * with SGD), and a cosine whose warm-up is the whole run (total_num_steps left to default). Each
 * is now a warning at start-up, and the run goes on; tiny.cfg's own keys give none. */
Test(cli, keys_without_effect_warn, .timeout = 60) {
  const char *cases[][2] = {
      {"--set scheduler.type=WarmupLR --set scheduler.params.total_num_steps=9",
       "brigade: warning: scheduler.params.total_num_steps is set, but scheduler.type WarmupLR has no decay: it has no "
       "effect (WarmupCosineLR decays)"},
      {"--set optimizer.params.momentum=0.9",
       "brigade: warning: optimizer.params.momentum is set, but optimizer.type is AdamW: it has no effect"},
      {"--set optimizer.type=SGD", "brigade: warning: optimizer.params.betas is set, but optimizer.type is SGD: it has no effect"},
      {"--set train.steps=5",
       "brigade: warning: scheduler.params.warmup_num_steps = 5 is the whole run (train.steps = 5): the cosine never "
       "decays to scheduler.params.min_lr"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char cmd[512], *out;
    snprintf(cmd, sizeof cmd, "train configs/tiny.cfg --set train.steps=1 --set train.eval_interval=0 %s", cases[i][0]);
    int rc = brigade_env("ASAN_OPTIONS=detect_leaks=0", cmd, &out);
    cr_assert_eq(rc, 0, "'%s' exited %d: %s", cmd, rc, out);
    cr_assert(strstr(out, cases[i][1]), "'%s': wanted '%s', got %s", cmd, cases[i][1], out);
    free(out);
  }
  char *out;
  int rc = brigade_env("ASAN_OPTIONS=detect_leaks=0", "train configs/tiny.cfg --set train.steps=6 --set train.eval_interval=0", &out);
  cr_assert_eq(rc, 0, "%s", out);
  cr_assert(!strstr(out, "warning"), "tiny.cfg warns: %s", out);
  free(out);
}

/* data.order = "sequential" on a split shorter than one micro-batch plus its target (B x T + 1
 * tokens) was accepted, each batch wrapping around the file's end inside itself (a target pair
 * end -> start the data never holds, and overlapping rows); it is refused naming the split. */
Test(cli, sequential_order_needs_a_micro_batch_of_tokens, .timeout = 60) {
  char path[] = "/tmp/brigade_seq_XXXXXX", cmd[512], *out;
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  char text[200];
  memset(text, 'a', 128);
  cr_assert_eq(write(fd, text, 128), 128); /* tiny.cfg: 4 x 32 = 128 tokens a micro-batch, 129 needed */
  close(fd);
  snprintf(cmd, sizeof cmd, "train configs/tiny.cfg --set train.steps=1 --set data.order=\"sequential\" "
           "--set data.path=\"%s\" --set data.val_fraction=0 --set train.eval_interval=0", path);
  int rc = brigade_env("ASAN_OPTIONS=detect_leaks=0", cmd, &out);
  cr_assert(rc == 2 && strstr(out, "data.order = \"sequential\" (--set data.order) reads each micro-batch as 128 tokens "
                              "in a row (train_micro_batch_size_per_gpu 4 x model.seq_len 32), but the training split") &&
            strstr(out, "holds 128, fewer than that plus the last target"), "exit %d: %s", rc, out);
  free(out);
  fd = open(path, O_WRONLY | O_APPEND);
  cr_assert_eq(write(fd, "a", 1), 1); /* 129: one micro-batch and its target */
  close(fd);
  rc = brigade_env("ASAN_OPTIONS=detect_leaks=0", cmd, &out);
  cr_assert_eq(rc, 0, "exit %d: %s", rc, out);
  free(out);
  unlink(path);
}

/* sim and tune read no data, so a config without data.path is theirs to price (it was refused:
 * "data.path is missing"); train still needs it. sim counts a tied head's weight once, as train
 * does (GPT-2-124M's shape: 123.703 M, where it printed 162.300 M). */
Test(cli, sim_needs_no_data_and_counts_a_tie_once, .timeout = 60) {
  char path[] = "/tmp/brigade_nodata_XXXXXX", cmd[256], *out;
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  const char *text = "model = { layers = ( { type = \"embedding\"; }, { type = \"lm_head\"; },\n"
                     "  { type = \"cross_entropy\"; } ); };\n";
  cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  snprintf(cmd, sizeof cmd, "sim %s", path);
  int rc = brigade_env("ASAN_OPTIONS=detect_leaks=0", cmd, &out);
  cr_assert(rc == 0 && strstr(out, ": 0.037 M parameters; stage costs"), "exit %d: %s", rc, out);
  free(out);
  snprintf(cmd, sizeof cmd, "train %s", path);
  rc = brigade_env("ASAN_OPTIONS=detect_leaks=0", cmd, &out);
  cr_assert(rc == 2 && strstr(out, "data.path is missing"), "exit %d: %s", rc, out);
  free(out);
  unlink(path);
  rc = brigade_env("ASAN_OPTIONS=detect_leaks=0", "sim configs/gpt2-124m.cfg", &out);
  cr_assert(rc == 0 && strstr(out, "123.703 M parameters (a tied weight counted once; 162.300 M counting it twice)"),
            "exit %d: %s", rc, out);
  free(out);
}

/* trace.step without trace.path was ignored without a word; now a warning at start-up, as
 * checkpoint.interval without checkpoint.dir gets (the path may come from a --set of another
 * run), and the run goes on. */
Test(cli, trace_step_without_a_path_is_a_warning, .timeout = 60) {
  char *out;
  int rc = brigade_env("ASAN_OPTIONS=detect_leaks=0", "train configs/tiny.cfg --set train.steps=1 --set trace.step=1", &out);
  cr_assert_eq(rc, 0, "exited %d: %s", rc, out);
  cr_assert(strstr(out, "brigade: warning: trace.step is set (--set trace.step), but trace.path is not: no trace will "
                        "be written"), "%s", out);
  free(out);
  rc = brigade_env("ASAN_OPTIONS=detect_leaks=0", "train configs/tiny.cfg --set train.steps=1", &out);
  cr_assert_eq(rc, 0, "exited %d: %s", rc, out);
  cr_assert(!strstr(out, "trace.step"), "%s", out);
  free(out);
}

/* A virtual stage count the schedule cannot run was reported as "(got --virtual 2)", compile's
 * flag, by train, sim CONFIG and tune too; they now name pipeline.virtual_stages and where it was
 * set, while compile and sim with shape flags keep --virtual. */
Test(cli, virtual_stage_errors_name_the_key_or_the_flag, .timeout = 60) {
  const char *cases[][2] = {
      {"train configs/tiny.cfg --set train.steps=1 --set pipeline.virtual_stages=2",
       "schedule 1f1b runs one chunk per rank (got pipeline.virtual_stages = 2); use interleaved for virtual stages "
       "(--set pipeline.virtual_stages)"},
      {"sim configs/tiny.cfg --set pipeline.schedule=zb-v --set pipeline.virtual_stages=3",
       "schedule zb-v runs two chunks per rank in a V (give pipeline.virtual_stages = 2, got 3) (--set "
       "pipeline.virtual_stages)"},
      {"tune configs/tiny.cfg --memory 1G --set pipeline.schedule=interleaved --set pipeline.virtual_stages=1",
       "schedule interleaved needs pipeline.virtual_stages >= 2 chunks per rank (got 1) (--set pipeline.virtual_stages)"},
      {"compile --schedule 1f1b --stages 2 --microbatches 2 --virtual 2",
       "schedule 1f1b runs one chunk per rank (got --virtual 2); use interleaved for virtual stages"},
      {"sim --schedule dualpipev --stages 2 --microbatches 4 --virtual 3",
       "schedule dualpipev runs two chunks per rank in a V (give --virtual 2, got 3)"},
      {"sim --schedule interleaved --stages 2 --microbatches 4 --virtual 1",
       "schedule interleaved needs --virtual >= 2 chunks per rank (got 1)"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *out;
    int rc = brigade_env("ASAN_OPTIONS=detect_leaks=0", cases[i][0], &out);
    cr_assert_eq(rc, 2, "'%s' exited %d: %s", cases[i][0], rc, out);
    cr_assert(strncmp(out, "brigade: error: ", 16) == 0 && strstr(out, cases[i][1]), "'%s': wanted '%s', got %s",
              cases[i][0], cases[i][1], out);
    cr_assert(strchr(out, '\n') == out + strlen(out) - 1, "'%s' printed more than one line: %s", cases[i][0], out);
    free(out);
  }
}

/* Explicit boundaries: the start-up log shows the last piece as layers 5..9 (.. loss), but a last
 * boundary of 10, counting the loss layer, was refused ("not a layer boundary in [0, 9]"). Both
 * 9 (the loss joining the last piece) and 10 now give the same cut; a wrong end says both. */
Test(cli, explicit_boundaries_may_count_the_loss_layer) {
  const char *base = "sim configs/tiny.cfg --set pipeline.stages=2 --set pipeline.partition_method=explicit --json";
  char args[512], *with, *without;
  snprintf(args, sizeof args, "%s --set 'pipeline.boundaries=[0, 4, 10]'", base);
  cr_assert_eq(brigade(args, &with), 0, "%s", with);
  snprintf(args, sizeof args, "%s --set 'pipeline.boundaries=[0, 4, 9]'", base);
  cr_assert_eq(brigade(args, &without), 0, "%s", without);
  cr_assert(same_run(with, without), "[0, 4, 10] and [0, 4, 9] differ:\n%s\n%s", with, without);
  free(with), free(without);
  const char *bad[][2] = {
      {"[0, 4, 8]", "pipeline.boundaries must start at 0 and end at 9 (the layers before the loss 'loss', which joins "
                    "the last piece) or 10 (counting it); [2] is 8 (--set pipeline.boundaries)"},
      {"[0, 4, 11]", "pipeline.boundaries[2] = 11 is not a layer boundary in [0, 10] (--set pipeline.boundaries)"},
      {"[0, 9, 10]", "pipeline.boundaries[1] = 9 leaves the pieces after it no layer but the loss 'loss' (layer 9)"},
      {"[0, 10]", "pipeline.boundaries holds 2 entries; 2 pieces (pipeline.stages x pipeline.virtual_stages) need 3: 0, "
                  "the cuts, and 9 (or 10, counting the loss 'loss') (--set pipeline.boundaries)"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char *out;
    snprintf(args, sizeof args, "%s --set 'pipeline.boundaries=%s'", base, bad[i][0]);
    int rc = brigade(args, &out);
    cr_assert_eq(rc, 2, "'%s' exited %d: %s", args, rc, out);
    cr_assert(strncmp(out, "brigade: error: ", 16) == 0 && strstr(out, bad[i][1]), "'%s': wanted '%s', got %s", args,
              bad[i][1], out);
    free(out);
  }
}

/* Data errors named the data group's line ("data (configs/tiny.cfg:9)") whichever --set gave the
 * file or fraction, and "a split holds N tokens" did not say which split: now the key and its
 * --set, and "the training split" or "the validation split". */
Test(cli, data_errors_name_the_key_and_the_split, .timeout = 60) {
  char shortf[] = "/tmp/brigade_short_XXXXXX";
  int fd = mkstemp(shortf);
  cr_assert(fd >= 0 && write(fd, "abcdefgh", 8) == 8);
  close(fd);
  char a[5][512];
  snprintf(a[0], sizeof a[0], "--set data.path=%s", shortf);
  snprintf(a[1], sizeof a[1], "--set data.val_path=%s", shortf);
  const char *cases[][2] = {
      {"--set data.val_fraction=1.5", "data.val_fraction = 1.5 must be in [0, 1) (--set data.val_fraction)"},
      {"--set data.path=/nonexistent/corpus.txt", "data.path (--set data.path): cannot open data file /nonexistent/corpus.txt"},
      {"--set data.val_path=/nonexistent/val.txt", "data.val_path (--set data.val_path): cannot open data file /nonexistent/val.txt"},
      {"--set data.val_fraction=0.000001", "data.val_fraction (--set data.val_fraction): data file data/kjv.txt: the "
                                           "validation split holds 4 tokens, fewer than one sequence of 32 plus its target"},
      {a[0], "data.path (--set data.path): data file "},
      {a[1], "data.val_path (--set data.val_path): data file "},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *const w[] = {cases[i][1], i == 4 ? "the training split holds 8 tokens" : i == 5 ? "the validation split "
                             "holds 8 tokens" : NULL, NULL};
    train_refuses(cases[i][0], w);
  }
  /* the fraction set nowhere: its default is named, not a config line that does not hold it */
  char cfg[] = "/tmp/brigade_cfg_XXXXXX", cmd[1024], *out;
  close(mkstemp(cfg));
  snprintf(cmd, sizeof cmd, "sed 's/ val_fraction = 0.05;//' configs/tiny.cfg > %s && grep -qv val_fraction %s && "
           "head -c 300 data/kjv.txt > %s", cfg, cfg, shortf);
  cr_assert_eq(test_sh(cmd), 0, "%s", cmd);
  snprintf(cmd, sizeof cmd, "train %s --set train.steps=1 --set data.path=%s", cfg, shortf);
  cr_assert_eq(brigade_env("ASAN_OPTIONS=detect_leaks=0", cmd, &out), 2, "%s", out);
  cr_assert(strstr(out, "data.val_fraction (not set: its default, 0.1): data file ") &&
            strstr(out, "the validation split holds 30 tokens"), "%s", out);
  free(out);
  unlink(cfg);
  unlink(shortf);
}

/* convert wrote over an existing output file or into a checkpoint directory that held files,
 * without a word; now it refuses (exit 2, one line saying to remove it or pick another path)
 * and leaves them as they were. An empty file or directory holds nothing and is written. */
Test(cli, convert_never_writes_over_the_users_files, .timeout = 120) {
  char dir[] = "/tmp/brigade_cli_XXXXXX", cmd[2048], *out;
  cr_assert(mkdtemp(dir));
  snprintf(cmd, sizeof cmd, "echo keep > %s/mine.bin && mkdir %s/full && echo keep > %s/full/notes.txt && : > %s/empty.bin "
           "&& mkdir %s/emptydir", dir, dir, dir, dir, dir);
  exported_checkpoint(dir, 0, cmd);
  const char *bad[][2] = {
      {"convert %s/ck %s/mine.bin --to llmc", "mine.bin exists (5 bytes) and would be written over; remove it or pick another path"},
      {"convert %s/ck %s/mine.bin --to safetensors", "mine.bin exists (5 bytes) and would be written over"},
      {"convert %s/ck %s/full --to llmc", "full is a directory; give the path of the file to write"},
      {"convert %s/w.bin %s/full", "full is not empty, and converting into it would write over what it holds; remove it or "
                                   "pick another path"},
      {"convert %s/w.bin %s/mine.bin", "mine.bin exists and is not a directory"},
      {"convert %s/w.bin %s/ck", "ck is not empty"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char args[1024];
    snprintf(args, sizeof args, bad[i][0], dir, dir);
    refused(args, "convert: ", bad[i][1]);
  }
  snprintf(cmd, sizeof cmd, "grep -qx keep %s/mine.bin && grep -qx keep %s/full/notes.txt && [ \"$(ls %s/full)\" = notes.txt ]",
           dir, dir, dir);
  cr_assert_eq(test_sh(cmd), 0, "a refused convert changed the user's files");
  snprintf(cmd, sizeof cmd, "convert %s/ck %s/empty.bin --to llmc", dir, dir);
  cr_assert_eq(brigade(cmd, &out), 0, "%s", out);
  free(out);
  snprintf(cmd, sizeof cmd, "convert %s/w.bin %s/emptydir", dir, dir);
  cr_assert_eq(brigade(cmd, &out), 0, "%s", out);
  free(out);
  snprintf(cmd, sizeof cmd, "cmp %s/w.bin %s/empty.bin && rm -rf %s", dir, dir, dir);
  cr_assert_eq(test_sh(cmd), 0);
}

/* convert --to llmc / safetensors of a checkpoint whose model is not GPT-2's blamed the output
 * path ("out.bin: llm.c's GPT-2 needs model.layers = ..."); now it names the checkpoint and what
 * differs: the layer, or the untied head. */
Test(cli, convert_of_a_model_not_gpt2_names_the_checkpoint, .timeout = 120) {
  char dir[] = "/tmp/brigade_cli_XXXXXX", cmd[4096], *out;
  cr_assert(mkdtemp(dir));
  const char *b = test_build_dir();
  snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 %s/brigade train configs/tiny.cfg --set train.steps=0 "
           "--set checkpoint.dir=%s/lin --set 'model.layers=({type=\"embedding\"; name=\"wte\";}, {type=\"transformer_block\"; "
           "name=\"h\"; repeat=2;}, {type=\"linear\"; name=\"proj\"; out=32;}, {type=\"layernorm\"; name=\"ln_f\";}, "
           "{type=\"lm_head\"; name=\"head\"; tie=\"wte\";}, {type=\"cross_entropy\"; name=\"loss\";})' 1>&2 && "
           "ASAN_OPTIONS=detect_leaks=0 %s/brigade train configs/tiny.cfg --set train.steps=0 --set checkpoint.dir=%s/untied "
           "--set 'model.layers=({type=\"embedding\"; name=\"wte\";}, {type=\"transformer_block\"; name=\"h\"; repeat=2;}, "
           "{type=\"layernorm\"; name=\"ln_f\";}, {type=\"lm_head\"; name=\"head\";}, {type=\"cross_entropy\"; "
           "name=\"loss\";})' 1>&2 && "
           "ASAN_OPTIONS=detect_leaks=0 %s/brigade train configs/tiny.cfg --set train.steps=0 --set checkpoint.dir=%s/eps "
           "--set 'model.layers=({type=\"embedding\"; name=\"wte\";}, {type=\"transformer_block\"; name=\"h\"; repeat=2;}, "
           "{type=\"layernorm\"; name=\"ln_f\"; eps=0.01;}, {type=\"lm_head\"; name=\"head\"; tie=\"wte\";}, "
           "{type=\"cross_entropy\"; name=\"loss\";})' 1>&2", b, dir, b, dir, b, dir);
  cr_assert_eq(test_sh(cmd), 0, "%s", cmd);
  const char *cases[][2] = {
      {"convert %s/lin %s/out.bin --to llmc", "lin: the model is not GPT-2-shaped (embedding, transformer_block x L, "
       "layernorm, lm_head tied to the embedding, cross_entropy): layer 3 ('proj') is a linear, GPT-2 has a transformer_block there"},
      {"convert %s/lin %s/out.st --to safetensors", "lin: the model is not GPT-2-shaped"},
      {"convert %s/untied %s/out.bin --to llmc", "untied: the model is not GPT-2-shaped (embedding, transformer_block x L, "
       "layernorm, lm_head tied to the embedding, cross_entropy): its lm_head 'head' is not tied to the embedding 'wte'"},
      /* an eps neither format records: it converted silently, and came back as 1e-5 */
      {"convert %s/eps %s/out.bin --to llmc", "its final layernorm 'ln_f' has eps 0.01, GPT-2's is 1e-5"},
      {"convert %s/eps %s/out.st --to safetensors", "its final layernorm 'ln_f' has eps 0.01, GPT-2's is 1e-5"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char args[1024];
    snprintf(args, sizeof args, cases[i][0], dir, dir);
    int rc = brigade(args, &out);
    cr_assert_eq(rc, 2, "'%s' exited %d: %s", args, rc, out);
    cr_assert(strncmp(out, "brigade: error: ", 16) == 0 && strstr(out, cases[i][1]) && !strstr(out, "out."),
              "'%s': wanted '%s' and no output path, got %s", args, cases[i][1], out);
    free(out);
  }
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  cr_assert_eq(test_sh(cmd), 0);
}

/* Offload on the command line: compile takes --cost-gather as sim does (with --zero3 the copies
 * are placed by the times the gathers give: compile built 776 instructions where sim built 778);
 * a CSV says which of the program's actions PyTorch's format leaves out (the copies went without
 * a word); a copy time of 0 is refused as what it is (it read as "no copy time given"). */
Test(cli, offload_flags_and_what_a_csv_leaves_out) {
  const char *shape = "--schedule zb-v --stages 4 --microbatches 8 --zero3 --prefetch 0 --cost-offload 0.5 --offload full "
                      "--cost-gather 0.5";
  char cmd[1024], *a, *b;
  snprintf(cmd, sizeof cmd, "%s/brigade compile %s --format instructions | grep -c '^ *[0-9]'", test_build_dir(), shape);
  cr_assert_eq(test_capture(cmd, &a), 0, "%s", a);
  snprintf(cmd, sizeof cmd, "sim %s --json", shape);
  cr_assert_eq(brigade(cmd, &b), 0, "%s", b);
  const char *n = strstr(b, "\"instructions\":");
  cr_assert(n && atoi(a) == atoi(n + 15), "compile: %d instructions, sim: %s", atoi(a), b);
  free(a), free(b);
  cr_assert_eq(brigade("compile --schedule 1f1b --stages 4 --microbatches 8 --cost-offload 0.5 --offload full --format csv-comm", &a), 0);
  cr_assert(strstr(a, "warning: the CSV leaves out the program's OFFLOAD/RELOAD"), "%s", a);
  free(a);
  cr_assert_eq(brigade("sim --schedule 1f1b --stages 2 --microbatches 4 --cost-offload 0 --offload full", &a), 2);
  cr_assert(strstr(a, "--cost-offload: a copy takes time"), "%s", a);
  free(a);
}
