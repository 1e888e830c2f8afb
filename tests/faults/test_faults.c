/* The fault suite (issue #26): what a run does when the world around it goes wrong, each case
 * asserting the exit status, the message, and that the last good checkpoint still loads.
 *   - two runs into one checkpoint.dir: one is refused, naming the holder (many trials);
 *   - a lock left by a killed run is taken over, saying so;
 *   - resuming with another model or optimizer is refused naming the key and both values; a
 *     missing rank file is named with the layout; another layout still resumes;
 *   - SIGTERM / SIGINT during set-up end the process at once; data files must be regular files;
 *   - a save past the file-size limit is an error, leaving no temporary file and the previous
 *     checkpoint;
 *   - contradictory settings and unwritable outputs are refused before the first step; a huge
 *     argument's error keeps its reason.
 * `make test` runs the fast cases and 3 concurrent trials; `make faults` (BRIGADE_FAULTS=all)
 * runs every case and BRIGADE_FAULT_TRIALS (30) trials. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "pipe/ckpt.h"
#include "tests/common/mpirun.h"

#define ENV "export ASAN_OPTIONS=detect_leaks=0; "
#define TINY "configs/tiny.cfg --set train.eval_interval=0 "

static int full(void) {
  const char *f = getenv("BRIGADE_FAULTS");
  return f && strcmp(f, "all") == 0;
}

static void rm_tree(const char *dir) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  test_sh(cmd);
}

/* Reads a small text file (the whole of it) into buf; "" when absent. */
static const char *slurp(const char *path, char *buf, size_t n) {
  FILE *f = fopen(path, "r");
  size_t k = f ? fread(buf, 1, n - 1, f) : 0;
  buf[k] = 0;
  if (f) fclose(f);
  return buf;
}

/* No sanitizer report in a run's output (a sanitizer build exits 1 on one, which a case expecting
 * exit 1 would not tell apart). */
static void sanitizer_clean(const char *out) {
  cr_assert(!strstr(out, "Sanitizer") && !strstr(out, "runtime error:"), "a sanitizer report:\n%s", out);
}

/* Runs a shell command (brigade's sanitizer settings exported) and returns its exit status and
 * output (stdout and stderr; caller frees). */
static int run(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int run(char **out, const char *fmt, ...) {
  char cmd[8192];
  va_list ap;
  va_start(ap, fmt);
  int k = snprintf(cmd, sizeof cmd, "%s{ ", ENV);
  k += vsnprintf(cmd + k, sizeof cmd - (size_t)k, fmt, ap);
  va_end(ap);
  snprintf(cmd + k, sizeof cmd - (size_t)k, "; }"); /* the output of every command of a list */
  int rc = test_capture(cmd, out);
  sanitizer_clean(*out);
  return rc;
}

/* Every rank file of every step directory under dir opens (hash and records whole) and holds its
 * directory's step; no temporary file is left anywhere but those of process `killed` (SIGKILL
 * leaves them: a run removes only its own, and the loader passes them by); a step directory with
 * no rank file (SIGKILL between the save's mkdir and its renames: empty, or only temporaries) is
 * one latest does not name; the checkpoint latest names samples. */
static int stray_tmp(const char *name, int killed) {
  char own[64];
  snprintf(own, sizeof own, ".%d.tmp", killed);
  return strstr(name, ".tmp") && !(killed > 0 && strstr(name, own));
}

static void checkpoints_load(const char *dir, int killed) {
  DIR *d = opendir(dir);
  cr_assert(d, "no checkpoint directory %s", dir);
  struct dirent *e;
  int steps = 0;
  while ((e = readdir(d))) {
    long step;
    if (stray_tmp(e->d_name, killed)) cr_assert_fail("%s/%s: a temporary file was left", dir, e->d_name);
    if (sscanf(e->d_name, "step_%ld", &step) != 1) continue;
    char sub[600];
    snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name);
    DIR *s = opendir(sub);
    cr_assert(s);
    struct dirent *f;
    int files = 0;
    while ((f = readdir(s))) {
      if (f->d_name[0] == '.') continue;
      char path[900];
      snprintf(path, sizeof path, "%s/%s", sub, f->d_name);
      if (strstr(f->d_name, ".tmp")) {
        cr_assert(!stray_tmp(f->d_name, killed), "%s: a temporary file was left", path);
        continue;
      }
      pipe_ckpt_reader r;
      cr_assert_eq(pipe_ckpt_open(&r, path), 0, "%s", core_error_msg());
      int64_t got = -1;
      cr_assert_eq(pipe_ckpt_get(&r, "step", PIPE_CKPT_I64, &got, 1), 0, "%s", core_error_msg());
      pipe_ckpt_close(&r);
      cr_assert_eq(got, step, "%s holds step %lld", path, (long long)got);
      files++;
    }
    closedir(s);
    if (!files) { /* the save the kill cut short (after its mkdir, before or while writing): latest must not name it */
      char latest[700], buf[64];
      snprintf(latest, sizeof latest, "%s/latest", dir);
      cr_assert(strncmp(slurp(latest, buf, sizeof buf), e->d_name, strlen(e->d_name)) != 0, "latest names %s", sub);
      continue;
    }
    steps++;
  }
  closedir(d);
  cr_assert(steps > 0, "%s holds no step directory", dir);
  char *out;
  int rc = run(&out, "%s/brigade sample --checkpoint %s --prompt x --tokens 2", test_build_dir(), dir);
  cr_assert_eq(rc, 0, "the latest checkpoint of %s does not sample: %s", dir, out);
  free(out);
}

static void every_checkpoint_loads(const char *dir) { checkpoints_load(dir, 0); }

/* ---- one writer per checkpoint directory ---- */

/* Two runs of different seeds started together into one checkpoint.dir, a checkpoint each step:
 * one trains, the other is refused at start-up (exit 2) naming the holder's pid and host, and
 * every step directory left loads. */
Test(faults, concurrent_runs_into_one_checkpoint_dir, .timeout = 900) {
  const char *t = getenv("BRIGADE_FAULT_TRIALS");
  int trials = t ? atoi(t) : full() ? 30 : 3;
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  for (int k = 0; k < trials; k++) {
    char dir[] = "/tmp/brigade_faults_XXXXXX", path[600];
    static char buf[1 << 16];
    cr_assert(mkdtemp(dir));
    char cmd[2048];
    snprintf(cmd, sizeof cmd, ENV "D=%s; S='--set train.steps=60 --set checkpoint.interval=1 --set checkpoint.dir=%s/ck'; "
             "%s/brigade train " TINY "$S >$D/a.out 2>&1 & a=$!; "
             "%s/brigade train " TINY "$S --set train.seed=7 >$D/b.out 2>&1 & b=$!; "
             "wait $a; echo $a $? > $D/a.rc; wait $b; echo $b $? > $D/b.rc",
             dir, dir, test_build_dir(), test_build_dir());
    test_sh(cmd);
    int pid[2], rc[2];
    for (int i = 0; i < 2; i++) {
      snprintf(path, sizeof path, "%s/%c.rc", dir, "ab"[i]);
      cr_assert_eq(sscanf(slurp(path, buf, sizeof buf), "%d %d", &pid[i], &rc[i]), 2, "trial %d: no status", k);
    }
    cr_assert((rc[0] == 0 && rc[1] == 2) || (rc[0] == 2 && rc[1] == 0), "trial %d: the runs exited %d and %d", k,
              rc[0], rc[1]);
    int loser = rc[0] == 2 ? 0 : 1;
    snprintf(path, sizeof path, "%s/%c.out", dir, "ab"[loser]);
    slurp(path, buf, sizeof buf);
    char want[600];
    snprintf(want, sizeof want, "brigade: error: checkpoint.dir (--set checkpoint.dir): %s/ck is in use by another run: "
             "pid %d on host %s holds %s/ck/.lock", dir, pid[1 - loser], host, dir);
    cr_assert(strstr(buf, want), "trial %d: the refused run said:\n%s\nnot:\n%s", k, buf, want);
    cr_assert(!strstr(buf, "step     1"), "trial %d: the refused run trained", k);
    for (int i = 0; i < 2; i++) {
      snprintf(path, sizeof path, "%s/%c.out", dir, "ab"[i]);
      sanitizer_clean(slurp(path, buf, sizeof buf));
    }
    snprintf(path, sizeof path, "%s/ck", dir);
    every_checkpoint_loads(path);
    snprintf(path, sizeof path, "%s/ck/.lock", dir);
    cr_assert_str_empty(slurp(path, buf, sizeof buf), "trial %d: the lock was not released: %s", k, buf);
    rm_tree(dir);
  }
}

/* A run killed while it holds the directory (SIGKILL: no clean-up) leaves its pid in DIR/.lock;
 * the next run takes the lock over, saying whose it was, and its last checkpoint still loads. */
Test(faults, lock_of_a_killed_run_is_taken_over, .timeout = 120) {
  char dir[] = "/tmp/brigade_faults_XXXXXX", path[600], buf[4096], *out;
  cr_assert(mkdtemp(dir));
  int rc = run(&out, "D=%s; %s/brigade train " TINY "--set train.steps=100000 --set checkpoint.interval=1 "
               "--set checkpoint.dir=$D/ck >$D/a.out 2>&1 & a=$!; "
               "for i in $(seq 1 400); do [ -f $D/ck/latest ] && break; sleep 0.05; done; "
               "kill -9 $a; wait $a; echo RESULT $a", dir, test_build_dir());
  int victim = strstr(out, "RESULT ") ? atoi(strstr(out, "RESULT ") + 7) : -1;
  free(out);
  cr_assert(rc == 0 && victim > 0);
  snprintf(path, sizeof path, "%s/ck/.lock", dir);
  char host[256] = "", want[700];
  gethostname(host, sizeof host - 1);
  snprintf(want, sizeof want, "pid %d host %s\n", victim, host);
  cr_assert_str_eq(slurp(path, buf, sizeof buf), want);
  snprintf(path, sizeof path, "%s/ck", dir);
  checkpoints_load(path, victim);
  rc = run(&out, "%s/brigade train " TINY "--set train.steps=1 --set checkpoint.dir=%s/ck", test_build_dir(), dir);
  snprintf(want, sizeof want, "warning: checkpoint.dir: taking over %s/ck/.lock from pid %d on host %s, which is no "
           "longer running", dir, victim, host);
  cr_assert(rc == 0 && strstr(out, want), "exit %d:\n%s", rc, out);
  free(out);
  snprintf(path, sizeof path, "%s/ck/.lock", dir);
  cr_assert_str_empty(slurp(path, buf, sizeof buf), "the lock was not released: %s", buf);
  rm_tree(dir);
}

/* Under mpirun only rank 0 locks: a 2-rank run into a held directory ends at once, every rank,
 * exit 2 and one error line naming the holder (the other rank does not wait in a collective). */
Test(faults, refused_multi_rank_run_ends_every_rank, .timeout = 120) {
  if (!full()) cr_skip_test("make faults runs it (BRIGADE_FAULTS=all)");
  char dir[] = "/tmp/brigade_faults_XXXXXX", *out;
  cr_assert(mkdtemp(dir));
  int rc = run(&out, "D=%s; %s/brigade train " TINY "--set train.steps=100000 --set checkpoint.interval=1000 "
               "--set checkpoint.dir=$D/ck >/dev/null 2>&1 & a=$!; "
               "for i in $(seq 1 400); do [ -s $D/ck/.lock ] && break; sleep 0.05; done; "
               TEST_MPI_ENV " timeout 60 mpirun -np 2 %s/brigade train " TINY "--set pipeline.stages=2 "
               "--set train.steps=2 --set checkpoint.dir=$D/ck; rc=$?; kill $a; wait $a; exit $rc",
               dir, test_build_dir(), test_build_dir());
  const char *at = strstr(out, "is in use by another run: pid ");
  cr_assert(rc == 2 && at && !strstr(at + 1, "is in use by another run") && !strstr(out, "timed out") &&
                !strstr(out, "step     1"), "exit %d:\n%s", rc, out);
  free(out);
  rm_tree(dir);
}

/* ---- resuming checks the model ---- */

/* A checkpoint resumed with another n_heads, d_model, block count, optimizer type, precision or
 * sequence length: exit 2 before any tensor is read, naming the key and both values. The
 * checkpoint then still resumes, under another layout too (2 stages), saying where from. */
Test(faults, resume_with_another_model_is_refused, .timeout = 180) {
  char dir[] = "/tmp/brigade_faults_XXXXXX", *out;
  cr_assert(mkdtemp(dir));
  const char *b = test_build_dir();
  int rc = run(&out, "%s/brigade train " TINY "--set train.steps=2 --set checkpoint.dir=%s", b, dir);
  cr_assert_eq(rc, 0, "%s", out);
  free(out);
  const struct {
    const char *set, *want;
  } cases[] = {
      {"model.n_heads=8", "was written with model.n_heads = 4; this run has model.n_heads = 8"},
      {"model.d_model=64", "was written with model.d_model = 32; this run has model.d_model = 64"},
      {"model.layers.[1].repeat=4", "was written with model.layers = 10 layers: embedding, transformer_block x6, "
                                    "layernorm, lm_head (tied to layer 0), cross_entropy; this run has model.layers = "
                                    "8 layers: embedding, transformer_block x4,"},
      {"optimizer.type=SGD", "was written with optimizer.type = AdamW; this run has optimizer.type = SGD"},
      {"bf16.enabled=true", "was written with precision = fp32; this run has precision = bf16"},
      {"model.seq_len=16", "was written with model.seq_len = 32; this run has model.seq_len = 16"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    rc = run(&out, "%s/brigade train " TINY "--set train.steps=4 --set checkpoint.dir=%s --resume %s --set %s", b, dir,
             dir, cases[i].set);
    cr_assert(rc == 2 && strstr(out, "brigade: error: checkpoint ") && strstr(out, "step_00000002") &&
                  strstr(out, cases[i].want) && !strstr(out, "step     3"),
              "--set %s: exit %d:\n%s", cases[i].set, rc, out);
    free(out);
  }
  char cmd[2048];
  snprintf(cmd, sizeof cmd, ENV TEST_MPI_ENV " timeout 120 mpirun -np 2 %s/brigade train " TINY "--set train.steps=4 "
           "--set pipeline.stages=2 --set checkpoint.dir=%s --resume %s", b, dir, dir);
  rc = test_capture(cmd, &out);
  sanitizer_clean(out);
  char want[600];
  snprintf(want, sizeof want, "brigade: [rank 0] resumed from %s/step_00000002, step 2 (layout: 1 stage(s) x 1 "
           "replica(s), 1 chunk(s) per rank, ZeRO stage 0)", dir);
  const char *first = strstr(out, "brigade: [rank 0] ");
  cr_assert(rc == 0 && first && strncmp(first, want, strlen(want)) == 0 && strstr(out, "step     4"),
            "exit %d:\n%s", rc, out);
  free(out);
  every_checkpoint_loads(dir);
  rm_tree(dir);
}

/* A 2-stage checkpoint without its stage-1 rank file: exit 2 naming the file and the layout it
 * was written with; the step before it still resumes; with no rank file left, the message says
 * that. */
Test(faults, missing_rank_file_names_the_layout, .timeout = 120) {
  char dir[] = "/tmp/brigade_faults_XXXXXX", cmd[2048], *out;
  cr_assert(mkdtemp(dir));
  const char *b = test_build_dir();
  snprintf(cmd, sizeof cmd, ENV TEST_MPI_ENV " timeout 120 mpirun -np 2 %s/brigade train " TINY "--set train.steps=4 "
           "--set checkpoint.interval=2 --set pipeline.stages=2 --set checkpoint.dir=%s", b, dir);
  int rc = test_capture(cmd, &out);
  sanitizer_clean(out);
  cr_assert_eq(rc, 0, "%s", out);
  free(out);
  snprintf(cmd, sizeof cmd, "rm %s/step_00000004/rank_00001.ckpt", dir);
  cr_assert_eq(test_sh(cmd), 0);
  rc = run(&out, "%s/brigade train " TINY "--set train.steps=6 --resume %s", b, dir);
  char want[700];
  snprintf(want, sizeof want, "brigade: error: checkpoint %s/step_00000004 lacks rank_00001.ckpt: it was written by 2 "
           "stage(s) x 1 replica(s) (1 chunk(s) per rank, ZeRO stage 0), one rank file per stage, rank_00000.ckpt .. "
           "rank_00001.ckpt", dir);
  cr_assert(rc == 2 && strstr(out, want), "exit %d:\n%s", rc, out);
  free(out);
  rc = run(&out, "%s/brigade train " TINY "--set train.steps=6 --resume %s/step_00000002", b, dir);
  cr_assert(rc == 0 && strstr(out, "step     6"), "exit %d:\n%s", rc, out);
  free(out);
  /* no rank file left at all: said so, not "lacks 10 of this rank's 10 layers (a different model?)" */
  snprintf(cmd, sizeof cmd, "rm %s/step_00000004/rank_00000.ckpt", dir);
  cr_assert_eq(test_sh(cmd), 0);
  rc = run(&out, "%s/brigade train " TINY "--set train.steps=6 --resume %s", b, dir);
  snprintf(want, sizeof want, "brigade: error: checkpoint %s/step_00000004 holds no rank file (rank_00000.ckpt, ...)", dir);
  cr_assert(rc == 2 && strstr(out, want), "exit %d:\n%s", rc, out);
  free(out);
  rm_tree(dir);
}

/* ---- signals and files during set-up ---- */

/* A stop signal while set-up blocks ends the process within 2 s with 128 + the signal: here a
 * config read from a FIFO nobody writes to, and an --init-from FIFO after the run has taken its
 * checkpoint directory (whose last checkpoint still loads, and whose lock the next run takes
 * over). */
static void signal_in_setup(const char *dir, const char *args, const char *sig, int want) {
  char *out;
  /* wait until the open blocks on the FIFO (wchan), at most 5 s; then the signal */
  int rc = run(&out, "D=%s; %s/brigade train %s >$D/s.out 2>&1 & a=$!; "
               "for i in $(seq 1 100); do grep -qE 'fifo|wait_for_partner' /proc/$a/wchan 2>/dev/null && break; "
               "sleep 0.05; done; t0=$(date +%%s%%N); kill -%s $a; wait $a; rc=$?; t1=$(date +%%s%%N); "
               "echo RESULT $rc $(( (t1 - t0) / 1000000 ))", dir, test_build_dir(), args, sig);
  int got = -1, ms = -1;
  const char *res = strstr(out, "RESULT ");
  cr_assert(rc == 0 && res && sscanf(res, "RESULT %d %d", &got, &ms) == 2, "%s", out);
  free(out);
  cr_assert_eq(got, want, "SIGTERM/SIGINT in set-up (%s): exit %d, not %d", args, got, want);
  cr_assert(ms <= 2000, "%s: %d ms to end after %s", args, ms, sig);
}

Test(faults, stop_signal_during_setup_ends_the_run, .timeout = 120) {
  char dir[] = "/tmp/brigade_faults_XXXXXX", args[1500], path[600], buf[256], *out;
  cr_assert(mkdtemp(dir));
  snprintf(args, sizeof args, "mkfifo %s/fifo.cfg %s/fifo.bin", dir, dir);
  cr_assert_eq(test_sh(args), 0);
  snprintf(args, sizeof args, "%s/fifo.cfg", dir);
  signal_in_setup(dir, args, "TERM", 128 + 15);
  signal_in_setup(dir, args, "INT", 128 + 2);
  int rc = run(&out, "%s/brigade train " TINY "--set train.steps=2 --set checkpoint.dir=%s/ck", test_build_dir(), dir);
  cr_assert_eq(rc, 0, "%s", out);
  free(out);
  snprintf(args, sizeof args, TINY "--set train.steps=4 --set checkpoint.dir=%s/ck --init-from %s/fifo.bin", dir, dir);
  signal_in_setup(dir, args, "TERM", 128 + 15);
  snprintf(path, sizeof path, "%s/ck/.lock", dir);
  cr_assert(strncmp(slurp(path, buf, sizeof buf), "pid ", 4) == 0, "the killed run did not hold the lock: '%s'", buf);
  snprintf(path, sizeof path, "%s/ck", dir);
  every_checkpoint_loads(path);
  rc = run(&out, "%s/brigade train " TINY "--set train.steps=4 --set checkpoint.dir=%s/ck --resume %s/ck",
           test_build_dir(), dir, dir);
  cr_assert(rc == 0 && strstr(out, "taking over") && strstr(out, "step     4"), "exit %d:\n%s", rc, out);
  free(out);
  rm_tree(dir);
}

/* data.path and data.val_path must be regular files: a FIFO is refused at once (not waited on),
 * a directory too, exit 2; the run's checkpoint directory is left as it was (and unlocked). */
Test(faults, data_files_must_be_regular_files, .timeout = 60) {
  char dir[] = "/tmp/brigade_faults_XXXXXX", cmd[700], path[600], buf[256], *out;
  cr_assert(mkdtemp(dir));
  snprintf(cmd, sizeof cmd, "mkfifo %s/fifo", dir);
  cr_assert_eq(test_sh(cmd), 0);
  const char *b = test_build_dir();
  int rc = run(&out, "%s/brigade train " TINY "--set train.steps=2 --set checkpoint.dir=%s/ck", b, dir);
  cr_assert_eq(rc, 0, "%s", out);
  free(out);
  const char *keys[] = {"data.path", "data.val_path", "data.path"};
  for (int i = 0; i < 3; i++) {
    char file[600];
    snprintf(file, sizeof file, "%s%s", dir, i < 2 ? "/fifo" : "");
    rc = run(&out, "timeout 10 %s/brigade train " TINY "--set train.steps=4 --set checkpoint.dir=%s/ck --resume %s/ck "
             "--set %s=\\\"%s\\\"", b, dir, dir, keys[i], file);
    char want[700];
    snprintf(want, sizeof want, "data file %s is not a regular file", file);
    cr_assert(rc == 2 && strstr(out, want), "%s = %s: exit %d:\n%s", keys[i], file, rc, out);
    free(out);
  }
  snprintf(path, sizeof path, "%s/ck/.lock", dir);
  cr_assert_str_empty(slurp(path, buf, sizeof buf), "the refused run kept the lock: %s", buf);
  snprintf(path, sizeof path, "%s/ck", dir);
  every_checkpoint_loads(path);
  rm_tree(dir);
}

/* ---- a full disk ---- */

/* A save past the file-size limit (ulimit -f: 5 MB under dash's 512-byte blocks, 10 MB under
 * bash's; MPI's own files need about 4.5 MB; the checkpoint of d_model 128 is 15 MB): exit 1 with
 * the error naming the file, SIGXFSZ ignored; no temporary file, no step directory of the failed
 * save; latest still names the previous checkpoint, which resumes. */
Test(faults, save_past_the_file_size_limit, .timeout = 120) {
  char dir[] = "/tmp/brigade_faults_XXXXXX", path[600], buf[256], *out;
  cr_assert(mkdtemp(dir));
  const char *b = test_build_dir();
  const char *big = "--set model.d_model=128";
  int rc = run(&out, "%s/brigade train " TINY "%s --set train.steps=2 --set checkpoint.dir=%s", b, big, dir);
  cr_assert_eq(rc, 0, "%s", out);
  free(out);
  rc = run(&out, "ulimit -f 10000; %s/brigade train " TINY "%s --set train.steps=3 --set checkpoint.dir=%s --resume %s",
           b, big, dir, dir);
  char want[700];
  snprintf(want, sizeof want, "brigade: error: saving the checkpoint of step 3: writing %s/step_00000003.saving/rank_00000.ckpt.",
           dir);
  cr_assert(rc == 1 && strstr(out, want) && strstr(out, ".tmp: File too large"), "exit %d:\n%s", rc, out);
  free(out);
  snprintf(path, sizeof path, "%s/step_00000003", dir);
  cr_assert(access(path, F_OK) != 0, "the failed save left %s", path);
  snprintf(path, sizeof path, "%s/latest", dir);
  cr_assert_str_eq(slurp(path, buf, sizeof buf), "step_00000002\n");
  every_checkpoint_loads(dir);
  rc = run(&out, "%s/brigade train " TINY "%s --set train.steps=3 --set checkpoint.dir=%s --resume %s", b, big, dir, dir);
  cr_assert(rc == 0 && strstr(out, "step     3"), "exit %d:\n%s", rc, out);
  free(out);
  rm_tree(dir);
}

/* A run saving a step that the directory already holds (the same command run twice, or a resume
 * from an earlier step into the same directory), its save failing on one rank only (rank 0 past
 * its file-size limit): the step directory latest names keeps both of the first run's rank files
 * unchanged and resumes. Before, rank 1 renamed its new file over the first run's and then removed
 * it when rank 0 failed: "lacks rank_00001.ckpt". A save that succeeds replaces the step whole,
 * leaving no staging directory. (TCP between the ranks: the limit would stop shared memory.) */
Test(faults, failed_save_of_an_existing_step_keeps_it, .timeout = 180) {
  char dir[] = "/tmp/brigade_faults_XXXXXX", path[600], buf[256], *out;
  cr_assert(mkdtemp(dir));
  const char *b = test_build_dir();
  const char *mpi = "export " TEST_MPI_ENV "; mpirun --mca btl tcp,self -np 2";
  const char *sets = "--set pipeline.stages=2 --set train.steps=2";
  int rc = run(&out, "%s %s/brigade train " TINY "%s --set checkpoint.dir=%s", mpi, b, sets, dir);
  cr_assert_eq(rc, 0, "%s", out);
  free(out);
  rc = run(&out, "cd %s && md5sum step_00000002/rank_0000?.ckpt > %s.md5", dir, dir);
  free(out);
  rc = run(&out, "%s sh -c 'if [ \"$OMPI_COMM_WORLD_RANK\" = 0 ]; then ulimit -f 100; fi; exec %s/brigade train " TINY
           "%s --set checkpoint.dir=%s'", mpi, b, sets, dir);
  cr_assert(rc != 0 && strstr(out, "File too large"), "exit %d:\n%s", rc, out);
  free(out);
  rc = run(&out, "cd %s && md5sum -c --quiet %s.md5 && ls", dir, dir);
  cr_assert(rc == 0 && !strstr(out, ".saving"), "the first run's checkpoint changed, or a staging directory stayed:\n%s", out);
  free(out);
  snprintf(path, sizeof path, "%s/latest", dir);
  cr_assert_str_eq(slurp(path, buf, sizeof buf), "step_00000002\n");
  every_checkpoint_loads(dir);
  rc = run(&out, "%s %s/brigade train " TINY "%s --set checkpoint.dir=%s --set train.seed=7", mpi, b, sets, dir);
  cr_assert_eq(rc, 0, "%s", out);
  free(out);
  rc = run(&out, "cd %s && ls && md5sum -c --quiet %s.md5", dir, dir);
  cr_assert(rc != 0 && !strstr(out, ".saving") && !strstr(out, ".old"), "the second save did not replace the step "
            "whole:\n%s", out);
  free(out);
  every_checkpoint_loads(dir);
  snprintf(path, sizeof path, "%s.md5", dir);
  unlink(path);
  rm_tree(dir);
}

/* What a save stopped between its two renames leaves where the file system cannot exchange
 * directories (NFS): latest names step_N, which is missing, and the complete old one is
 * step_N.old; resuming, sampling and converting take step_N.old, saying so (they failed: "cannot
 * open checkpoint"). convert of a step directory holding one layer in two rank files (two runs'
 * files) is refused, as resuming refuses it (it took whichever file came first); a directory
 * holding only the .lock a failed run left is empty to convert; a checkpoint.dir too long for
 * the save's file names is refused at start-up (it failed at the first save). */
Test(faults, save_leftovers_and_path_limits, .timeout = 120) {
  char dir[] = "/tmp/brigade_faults_XXXXXX", *out;
  cr_assert(mkdtemp(dir));
  const char *b = test_build_dir();
  int rc = run(&out, "%s/brigade train " TINY "--set train.steps=2 --set checkpoint.dir=%s/ck", b, dir);
  cr_assert_eq(rc, 0, "%s", out);
  free(out);
  /* said once, by rank 0 (every rank said it, up to three times each) */
  rc = run(&out, "mv %s/ck/step_00000002 %s/ck/step_00000002.old && export " TEST_MPI_ENV "; mpirun -np 2 %s/brigade train "
           TINY "--set pipeline.stages=2 --set train.steps=3 --resume %s/ck", dir, dir, b, dir);
  const char *said = strstr(out, "which is missing (a save stopped while replacing it): using");
  cr_assert(rc == 0 && said && !strstr(said + 1, "which is missing") && strstr(out, "step     3"), "exit %d:\n%s", rc, out);
  free(out);
  rc = run(&out, "%s/brigade train " TINY "--set train.steps=3 --resume %s/ck", b, dir);
  cr_assert(rc == 0 && strstr(out, "which is missing (a save stopped while replacing it): using") && strstr(out, "step     3"),
            "exit %d:\n%s", rc, out);
  free(out);
  rc = run(&out, "%s/brigade convert %s/ck %s/w.bin --to llmc", b, dir, dir);
  cr_assert_eq(rc, 0, "%s", out);
  free(out);
  /* one layer in two rank files: a 2-stage run's rank_00000 beside a one-process run's */
  rc = run(&out, "export " TEST_MPI_ENV "; mpirun -np 2 %s/brigade train " TINY "--set pipeline.stages=2 --set train.steps=1 "
           "--set checkpoint.dir=%s/two && cp %s/two/step_00000001/rank_00000.ckpt %s/ck/step_00000002.old/rank_00001.ckpt && "
           "%s/brigade convert %s/ck %s/mixed.bin --to llmc", b, dir, dir, dir, b, dir, dir);
  cr_assert(rc == 2 && strstr(out, "in more than one rank file"), "exit %d:\n%s", rc, out);
  free(out);
  rc = run(&out, "mkdir %s/locked && touch %s/locked/.lock && %s/brigade convert %s/w.bin %s/locked", dir, dir, b, dir, dir);
  cr_assert_eq(rc, 0, "a directory holding only .lock: %s", out);
  free(out);
  char longdir[1200];
  int k = snprintf(longdir, sizeof longdir, "%s", dir);
  while (k < 1000) k += snprintf(longdir + k, sizeof longdir - (size_t)k, "/%0100d", 0);
  rc = run(&out, "mkdir -p %s && %s/brigade train " TINY "--set train.steps=1 --set checkpoint.dir=%s/ck", longdir, b, longdir);
  cr_assert(rc == 2 && strstr(out, "a save's file names need at most"), "exit %d:\n%s", rc, out);
  free(out);
  rm_tree(dir);
}

/* ---- settings ---- */

/* Checked at start-up, before a step (exit 2, naming the keys): min_lr above lr, a warm-up not
 * shorter than an explicit cosine length, a trace path or checkpoint.dir that cannot be written.
 * A warm-up longer than the run is what a user may mean: warned, once. The checkpoint already in
 * the directory loads after all of them. */
Test(faults, settings_checked_at_start_up, .timeout = 120) {
  char dir[] = "/tmp/brigade_faults_XXXXXX", *out;
  cr_assert(mkdtemp(dir));
  const char *b = test_build_dir();
  int rc = run(&out, "%s/brigade train " TINY "--set train.steps=2 --set checkpoint.dir=%s/ck && touch %s/file", b, dir,
               dir);
  cr_assert_eq(rc, 0, "%s", out);
  free(out);
  char sets[4][700];
  snprintf(sets[0], sizeof sets[0], "--set scheduler.params.min_lr=0.01");
  snprintf(sets[1], sizeof sets[1], "--set scheduler.params.total_num_steps=5 --set scheduler.params.warmup_num_steps=5");
  snprintf(sets[2], sizeof sets[2], "--set trace.path=\\\"%s/no/such/dir/trace.json\\\"", dir);
  snprintf(sets[3], sizeof sets[3], "--set checkpoint.dir=\\\"%s/file/ck\\\"", dir);
  const char *want[4][2] = {
      {"scheduler.params.min_lr = 0.01 (--set scheduler.params.min_lr) is above optimizer.params.lr = 0.003 "
       "(configs/tiny.cfg:11)", "the minimum must not exceed the peak"},
      {"scheduler.params.warmup_num_steps = 5 (--set scheduler.params.warmup_num_steps) is not below "
       "scheduler.params.total_num_steps = 5", "never decay"},
      {"trace.path: cannot write ", "no/such/dir/trace.json: No such file or directory (--set trace.path)"},
      {"checkpoint.dir (--set checkpoint.dir): cannot create ", "/file/ck: Not a directory"},
  };
  for (int i = 0; i < 4; i++) {
    rc = run(&out, "%s/brigade train " TINY "--set train.steps=4 %s --resume %s/ck", b, sets[i], dir);
    cr_assert(rc == 2 && strstr(out, want[i][0]) && strstr(out, want[i][1]) && !strstr(out, "step     3"),
              "%s: exit %d:\n%s", sets[i], rc, out);
    free(out);
  }
  rc = run(&out, "%s/brigade train " TINY "--set train.steps=3 --set checkpoint.dir=%s/ck2", b, dir);
  const char *w = "warning: scheduler.params.warmup_num_steps = 5 is longer than the run (train.steps = 3)";
  const char *at = strstr(out, w);
  cr_assert(rc == 0 && at && !strstr(at + 1, w), "exit %d:\n%s", rc, out);
  free(out);
  char path[600];
  snprintf(path, sizeof path, "%s/ck", dir);
  every_checkpoint_loads(path);
  rm_tree(dir);
}

/* A 100 KB argument's error shows the reason: the value is cut (its ends around "..."), not the
 * message. */
Test(faults, long_values_are_cut_not_the_reason, .timeout = 60) {
  const struct {
    const char *fmt, *want;
  } cases[] = {
      {"--set model.n_heads=%s", ": expected an integer"},
      {"--set optimizer.type=%s", "' is not AdamW, Adam or SGD (--set optimizer.type)"},
      {"--set data.path=%s", ": File name too long"},
      {"--bogus%s", "train: unknown option '--bogus"},
  };
  char *v = malloc(100001), *out;
  memset(v, 'x', 100000), v[100000] = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *args = malloc(100100), *cmd = malloc(100400);
    snprintf(args, 100100, cases[i].fmt, v);
    snprintf(cmd, 100400, ENV "%s/brigade train configs/tiny.cfg %s", test_build_dir(), args);
    int rc = test_capture(cmd, &out);
    sanitizer_clean(out);
    const char *line = strstr(out, "brigade: error: ");
    cr_assert(rc == 2 && line && strstr(line, cases[i].want) && strstr(line, "...") && strlen(line) < 600,
              "%s: exit %d: %.600s", cases[i].fmt, rc, out);
    free(out), free(args), free(cmd);
  }
  free(v);
}

/* A checkpoint from before the "model" and "layout" records (written here by dropping them from a
 * new one) still resumes, saying its layout is not recorded; its model is checked against the
 * config record of its rank_00000. */
Test(faults, checkpoint_without_model_record_is_checked_by_its_config, .timeout = 120) {
  char dir[] = "/tmp/brigade_faults_XXXXXX", path[700], *out;
  cr_assert(mkdtemp(dir));
  const char *b = test_build_dir();
  int rc = run(&out, "%s/brigade train " TINY "--set train.steps=2 --set checkpoint.dir=%s", b, dir);
  cr_assert_eq(rc, 0, "%s", out);
  free(out);
  snprintf(path, sizeof path, "%s/step_00000002/rank_00000.ckpt", dir);
  pipe_ckpt_reader r;
  cr_assert_eq(pipe_ckpt_open(&r, path), 0, "%s", core_error_msg());
  pipe_ckpt_writer w;
  cr_assert_eq(pipe_ckpt_create(&w, path), 0);
  int dropped = 0;
  for (uint32_t i = 0; i < r.nrec; i++) {
    if (strcmp(r.rec[i].name, "model") == 0 || strcmp(r.rec[i].name, "layout") == 0) {
      dropped++;
      continue;
    }
    cr_assert_eq(pipe_ckpt_put(&w, r.rec[i].name, r.rec[i].dtype, r.rec[i].data, r.rec[i].count), 0);
  }
  cr_assert_eq(pipe_ckpt_commit(&w), 0, "%s", core_error_msg());
  pipe_ckpt_close(&r);
  cr_assert_eq(dropped, 2);
  rc = run(&out, "%s/brigade train " TINY "--set train.steps=4 --resume %s --set model.n_heads=8", b, dir);
  cr_assert(rc == 2 && strstr(out, "was written with model.n_heads = 4; this run has model.n_heads = 8"), "exit %d:\n%s",
            rc, out);
  free(out);
  rc = run(&out, "%s/brigade train " TINY "--set train.steps=4 --resume %s", b, dir);
  cr_assert(rc == 0 && strstr(out, "step_00000002, step 2 (layout not recorded") && strstr(out, "step     4"),
            "exit %d:\n%s", rc, out);
  free(out);
  every_checkpoint_loads(dir);
  rm_tree(dir);
}
