/* tests/pipe/train_run.h: running `brigade train` from a Criterion test and reading its
 * --log-json back, shared by the end-to-end training tests (test_train.c) and the checkpoint
 * tests (test_resume.c). Header-only: it asserts with Criterion, and tests/common is linked into
 * the plain (non-Criterion) worker programs too. */
#ifndef BRIGADE_TESTS_PIPE_TRAIN_RUN_H
#define BRIGADE_TESTS_PIPE_TRAIN_RUN_H

#include <criterion/criterion.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/json.h"
#include "tests/common/mpirun.h"

typedef struct {
  int n;
  double val0; /* the step-0 record's validation loss (before any update); -1 without one */
  double loss[64], val[64], norm[64], lr[64]; /* norm, lr: -1 where a record has none */
  char text[64][32]; /* losses as printed (%.9g): compared as text, i.e. bit for bit */
} run_log;

static inline void read_log(const char *path, run_log *lg) {
  FILE *f = fopen(path, "r");
  cr_assert(f, "no log %s", path);
  static char line[1 << 14]; /* the first record also carries every rank's activation memory */
  lg->n = 0, lg->val0 = -1;
  while (fgets(line, sizeof line, f) && lg->n < 64) {
    core_json *j;
    cr_assert_eq(core_json_parse(line, strlen(line), path, &j), 0, "bad log line %s", line);
    if (core_json_get(j, "step")->num == 0) { /* evaluation before the first update */
      lg->val0 = core_json_get(j, "val_loss")->num;
      core_json_free(j);
      continue;
    }
    lg->loss[lg->n] = core_json_get(j, "loss")->num;
    const core_json *v = core_json_get(j, "val_loss");
    lg->val[lg->n] = v ? v->num : -1;
    const core_json *g = core_json_get(j, "grad_norm"), *r = core_json_get(j, "lr");
    lg->norm[lg->n] = g ? g->num : -1, lg->lr[lg->n] = r ? r->num : -1;
    char *s = strstr(line, "\"loss\":");
    snprintf(lg->text[lg->n], sizeof lg->text[0], "%.*s", (int)strcspn(s + 7, ","), s + 7);
    lg->n++;
    core_json_free(j);
  }
  fclose(f);
}

/* Runs brigade train on np ranks (np = 0: plain process) with extra --set options. Open MPI
 * leaks at MPI_Init even in one process, so sanitizer builds run it without leak checks. */
static inline int train_prog(const char *prog, int np, const char *sets, const char *log) {
  char args[2048];
  snprintf(args, sizeof args, "train configs/tiny.cfg --set train.steps=20 --set train.eval_interval=10 %s --log-json %s", sets, log);
  if (np > 0) return test_mpirun(np, prog, args);
  char cmd[2300];
  snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 %s/brigade %s 1>&2", test_build_dir(), args);
  return test_sh(cmd);
}

static inline int train(int np, const char *sets, const char *log) { return train_prog("brigade", np, sets, log); }

/* Removes a test's temporary directory and everything in it. */
static inline void remove_tree(const char *dir) {
  char cmd[1100];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  test_sh(cmd);
}

/* Runs `brigade train configs/tiny.cfg` in one process with the arguments from a format; returns
 * the exit status, the output (stdout and stderr) in *out (caller frees). */
static inline int train_capture(char **out, const char *fmt, ...) {
  char args[1500], cmd[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 %s/brigade train configs/tiny.cfg %s", test_build_dir(), args);
  return test_capture(cmd, out);
}

/* train() with --set options from a format, which must succeed; its log into *out. */
static inline void train_read(int np, const char *log, run_log *out, const char *fmt, ...) {
  char sets[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(sets, sizeof sets, fmt, ap);
  va_end(ap);
  cr_assert_eq(train(np, sets, log), 0, "train %s failed", sets);
  read_log(log, out);
}

/* The first step's line of a --log-json file, parsed (the caller frees it); a step-0 record
 * (the validation loss before any update) comes before it. */
static inline core_json *first_step(const char *log) {
  FILE *f = fopen(log, "r");
  static char line[1 << 14]; /* it carries every rank's memory figures too */
  cr_assert(f && fgets(line, sizeof line, f), "no step in %s", log);
  if (strncmp(line, "{\"step\":0,", 10) == 0) cr_assert(fgets(line, sizeof line, f), "no step after step 0 in %s", log);
  fclose(f);
  core_json *j;
  cr_assert_eq(core_json_parse(line, strlen(line), log, &j), 0);
  return j;
}

/* Both logs hold the same steps (at least one: two empty logs prove nothing), bit for bit. */
static inline void same_bits(const run_log *a, const run_log *b, const char *what) {
  cr_assert_gt(a->n, 0, "%s: no step in the log", what);
  cr_assert_eq(a->n, b->n, "%s: %d steps vs %d", what, a->n, b->n);
  cr_assert(a->val0 == b->val0, "%s: step 0 val loss %.9g vs %.9g", what, a->val0, b->val0);
  for (int i = 0; i < a->n; i++) {
    cr_assert_str_eq(a->text[i], b->text[i], "%s: step %d loss %s vs %s", what, i + 1, a->text[i], b->text[i]);
    cr_assert(a->val[i] == b->val[i], "%s: step %d val loss %.9g vs %.9g", what, i + 1, a->val[i], b->val[i]);
  }
}

/* Losses within 1e-5 relative of ref's from step from + 1 on, and the validation losses too: an
 * evaluation is the same eval_batches global micro-batches whatever the layout. got holds ref's
 * steps after the first `from`, at least one. */
static inline void close_to(const run_log *ref, const run_log *got, int from, const char *what) {
  cr_assert_gt(got->n, 0, "%s: no step in the log", what);
  cr_assert_eq(from + got->n, ref->n, "%s: %d steps after step %d, the reference ran %d", what, got->n, from, ref->n);
  if (from == 0 && ref->val0 >= 0 && got->val0 >= 0)
    cr_assert(fabs(got->val0 - ref->val0) <= 1e-5 * ref->val0, "%s: step 0 val loss %.9g vs %.9g", what, got->val0, ref->val0);
  for (int i = 0; i < got->n; i++) {
    double want = ref->loss[from + i], val = ref->val[from + i];
    cr_assert(fabs(got->loss[i] - want) <= 1e-5 * fabs(want), "%s: step %d loss %.9g vs %.9g", what,
              from + i + 1, got->loss[i], want);
    cr_assert((val < 0) == (got->val[i] < 0), "%s: step %d evaluated in one run only", what, from + i + 1);
    cr_assert(fabs(got->val[i] - val) <= 1e-5 * fabs(val), "%s: step %d val loss %.9g vs %.9g", what,
              from + i + 1, got->val[i], val);
  }
}

#endif
