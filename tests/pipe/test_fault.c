/* Faults: a rank killed mid-run ends the whole job quickly and non-zero; resuming from the last
 * complete checkpoint reaches the uninterrupted run's losses bit for bit. A run whose loss
 * diverges stops with a message and saves nothing corrupt. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/common/mpirun.h"

/* The integer a test's shell script left in DIR/NAME (an exit status, a count of seconds). */
static int read_int(const char *dir, const char *name) {
  char path[256];
  int x = 0;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "r");
  cr_assert(f && fscanf(f, "%d", &x) == 1, "no number in %s", path);
  fclose(f);
  return x;
}

/* A job some rank of which stopped answering ($D/rc, $D/secs written by the test's script) ended
 * non-zero within max_secs of the stop. */
static void assert_job_ended(const char *dir, const char *what, int max_secs, int timeout) {
  int rc = read_int(dir, "rc"), secs = read_int(dir, "secs");
  cr_assert_neq(rc, 0, "the job with %s exited 0", what);
  cr_assert(secs <= max_secs, "the job took %d s to end with %s (train.timeout = %d)", secs, what, timeout);
}

/* This machine's name as MPI gives it to brigade (Open MPI: the host name). */
static const char *pipe_test_host(void) {
  static char h[256];
  if (!h[0] && gethostname(h, sizeof h - 1) != 0) snprintf(h, sizeof h, "?");
  return h;
}

static void last_loss(const char *log, char *out, size_t n) {
  FILE *f = fopen(log, "r");
  cr_assert(f, "no log %s", log);
  char line[4096], *last = NULL;
  out[0] = 0;
  while (fgets(line, sizeof line, f))
    if ((last = strstr(line, "\"loss\":"))) snprintf(out, n, "%.*s", (int)strcspn(last + 7, ","), last + 7);
  fclose(f);
}

Test(fault, killed_rank_ends_the_job_and_resume_recovers, .timeout = 300) {
  char dir[] = "/tmp/brigade_fault_XXXXXX", cmd[4096], ref[64], got[64];
  cr_assert(mkdtemp(dir));
  const char *b = test_build_dir();
  const char *env = TEST_MPI_ENV " OMPI_MCA_btl_vader_single_copy_mechanism=none";
  const char *sets = "--set pipeline.stages=4 --set train.steps=40 --set train.eval_interval=0 "
                     "--set train_micro_batch_size_per_gpu=32 --set checkpoint.interval=5";
  /* the uninterrupted run */
  snprintf(cmd, sizeof cmd, "%s timeout 120 mpirun -np 4 %s/brigade train configs/tiny.cfg %s --set checkpoint.dir=%s/a "
           "--log-json %s/ref.jsonl >/dev/null 2>&1", env, b, sets, dir, dir);
  cr_assert_eq(test_sh(cmd), 0);
  /* the same run, with rank 2 killed once the first checkpoint is complete */
  snprintf(cmd, sizeof cmd,
           "%s; D=%s; (timeout 120 mpirun -np 4 %s/brigade train configs/tiny.cfg %s --set checkpoint.dir=$D/b "
           ">$D/killed.log 2>&1; echo $? > $D/rc) & "
           "for i in $(seq 1 300); do [ -f $D/b/latest ] && break; sleep 0.05; done; "
           "victim=$(pgrep -f \"^%s/brigade train configs/tiny.cfg.*$D/b\" | sed -n 3p); "
           "[ -n \"$victim\" ] && kill -9 $victim; t0=$(date +%%s); "
           "for i in $(seq 1 400); do [ -f $D/rc ] && break; sleep 0.05; done; "
           "echo $(( $(date +%%s) - t0 )) > $D/secs; [ -f $D/rc ]",
           "export " TEST_MPI_ENV " OMPI_MCA_btl_vader_single_copy_mechanism=none", dir, b, sets, b);
  cr_assert_eq(test_sh(cmd), 0, "the job did not end within 20 s of the kill");
  char path[256];
  snprintf(path, sizeof path, "%s/rc", dir);
  FILE *f = fopen(path, "r");
  int rc = 0, secs = 99;
  cr_assert_eq(fscanf(f, "%d", &rc), 1);
  fclose(f);
  snprintf(path, sizeof path, "%s/secs", dir);
  f = fopen(path, "r");
  cr_assert_eq(fscanf(f, "%d", &secs), 1);
  fclose(f);
  cr_assert_neq(rc, 0, "the job with a killed rank exited 0");
  cr_assert(secs <= 10, "the job took %d s to end after the kill", secs);
  /* resume from whatever was last complete; reach step 40 */
  snprintf(cmd, sizeof cmd, "%s timeout 120 mpirun -np 4 %s/brigade train configs/tiny.cfg %s --set checkpoint.dir=%s/b "
           "--resume %s/b --log-json %s/resumed.jsonl >/dev/null 2>&1", env, b, sets, dir, dir, dir);
  cr_assert_eq(test_sh(cmd), 0);
  snprintf(path, sizeof path, "%s/ref.jsonl", dir);
  last_loss(path, ref, sizeof ref);
  snprintf(path, sizeof path, "%s/resumed.jsonl", dir);
  last_loss(path, got, sizeof got);
  cr_assert(ref[0] && strcmp(ref, got) == 0, "step 40: uninterrupted %s, resumed %s", ref, got);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  test_sh(cmd);
}

Test(fault, diverging_loss_stops_with_a_message, .timeout = 60) {
  char dir[] = "/tmp/brigade_div_XXXXXX", cmd[1024];
  cr_assert(mkdtemp(dir));
  snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 %s/brigade train configs/tiny.cfg --set optimizer.params.lr=1e30 "
           "--set gradient_clipping=0.0 --set train.steps=20 --set checkpoint.dir=%s --set checkpoint.interval=1 > %s/out 2>&1",
           test_build_dir(), dir, dir);
  int rc = test_sh(cmd);
  cr_assert_neq(rc, 0);
  /* step 1's gradient is finite (the first weights), its update with lr 1e30 is not: step 2 stops */
  snprintf(cmd, sizeof cmd, "grep -q 'step 2: the gradient norm is not finite' %s/out", dir);
  cr_assert_eq(test_sh(cmd), 0, "no message about step 2's non-finite gradient");
  /* step 1's checkpoint was written, and is what latest names */
  snprintf(cmd, sizeof cmd, "grep -qx step_00000001 %s/latest && [ -f %s/step_00000001/rank_00000.ckpt ]", dir, dir);
  cr_assert_eq(test_sh(cmd), 0, "step 1's checkpoint is missing, or latest does not name it");
  /* what was saved is complete and loads: sampling from it either works or, its weights having
   * diverged (lr 1e30), stops on the NaN logits of the loaded model, saying so */
  snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 %s/brigade sample --checkpoint %s --prompt x --tokens 3 > %s/sample 2>&1 || "
           "grep -q 'weights have diverged' %s/sample", test_build_dir(), dir, dir, dir);
  cr_assert_eq(test_sh(cmd), 0, "sampling from step 1's checkpoint failed without the divergence message");
  /* the same with an eager update (zb-h1, no clipping: the norm's check comes after the update)
   * and the last step evaluated: the failed check stops the run, the evaluation does not hide it
   * (it did: exit 0, a NaN checkpoint of step 2) */
  snprintf(cmd, sizeof cmd, "rm -rf %s/e && ASAN_OPTIONS=detect_leaks=0 %s/brigade train configs/tiny.cfg --set "
           "pipeline.schedule=zb-h1 --set optimizer.params.lr=1e30 --set gradient_clipping=0.0 --set train.steps=2 "
           "--set train.eval_interval=100 --set 'checkpoint.dir=\"%s/e\"' > %s/out 2>&1", dir, test_build_dir(), dir, dir);
  cr_assert_neq(test_sh(cmd), 0, "a diverged eager update exited 0");
  snprintf(cmd, sizeof cmd, "grep -q 'step 2: the gradient norm is not finite' %s/out && [ ! -e %s/e/step_00000002 ]", dir, dir);
  cr_assert_eq(test_sh(cmd), 0, "no message about step 2, or its checkpoint was written");
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  test_sh(cmd);
}

/* A damaged newest checkpoint is refused with a message naming it; the step before it still
 * resumes (--resume DIR/step_N) and continues the run bit for bit. */
Test(fault, damaged_checkpoint_refused_previous_still_loads, .timeout = 120) {
  char dir[] = "/tmp/brigade_dmg_XXXXXX", cmd[2048], ref[64], got[64];
  cr_assert(mkdtemp(dir));
  const char *b = test_build_dir(), *env = "ASAN_OPTIONS=detect_leaks=0";
  snprintf(cmd, sizeof cmd, "%s %s/brigade train configs/tiny.cfg --set train.eval_interval=0 --set checkpoint.dir=%s "
           "--set checkpoint.interval=5 --set train.steps=10 --log-json %s/ref.jsonl >/dev/null 2>&1", env, b, dir, dir);
  cr_assert_eq(test_sh(cmd), 0);
  /* flip one byte in the middle of the newest checkpoint */
  snprintf(cmd, sizeof cmd, "f=%s/step_00000010/rank_00000.ckpt; n=$(stat -c %%s $f); "
           "printf '\\377' | dd of=$f bs=1 seek=$((n / 2)) conv=notrunc 2>/dev/null", dir);
  cr_assert_eq(test_sh(cmd), 0);
  snprintf(cmd, sizeof cmd, "%s %s/brigade train configs/tiny.cfg --set train.eval_interval=0 --set train.steps=10 "
           "--resume %s > %s/out 2>&1", env, b, dir, dir);
  cr_assert_eq(test_sh(cmd), 2);
  snprintf(cmd, sizeof cmd, "grep -q 'step_00000010/rank_00000.ckpt is damaged' %s/out", dir);
  cr_assert_eq(test_sh(cmd), 0, "the message does not name the damaged file");
  snprintf(cmd, sizeof cmd, "%s %s/brigade train configs/tiny.cfg --set train.eval_interval=0 --set train.steps=10 "
           "--resume %s/step_00000005 --log-json %s/rest.jsonl >/dev/null 2>&1", env, b, dir, dir);
  cr_assert_eq(test_sh(cmd), 0);
  char path[256];
  snprintf(path, sizeof path, "%s/ref.jsonl", dir);
  last_loss(path, ref, sizeof ref);
  snprintf(path, sizeof path, "%s/rest.jsonl", dir);
  last_loss(path, got, sizeof got);
  cr_assert(ref[0] && strcmp(ref, got) == 0, "step 10: %s vs resumed from step 5: %s", ref, got);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  test_sh(cmd);
}

/* SIGUSR1 to mpirun (which passes it on to every rank) stops a 2-stage run at the end of the step
 * in progress: every rank stops at the same step, the checkpoint of that step is written, the job
 * exits 128 + 10 with a message saying where to resume, and resuming reaches the uninterrupted
 * run's loss bit for bit. */
Test(fault, sigusr1_stops_at_a_step_with_its_checkpoint, .timeout = 180) {
  char dir[] = "/tmp/brigade_stop_XXXXXX", cmd[4096], ref[64], got[64];
  cr_assert(mkdtemp(dir));
  const char *b = test_build_dir();
  const char *env = "export " TEST_MPI_ENV " OMPI_MCA_btl_vader_single_copy_mechanism=none";
  const char *sets = "--set pipeline.stages=2 --set train.steps=150 --set train.eval_interval=0 --set checkpoint.interval=1000";
  snprintf(cmd, sizeof cmd, "%s; timeout 120 mpirun -np 2 %s/brigade train configs/tiny.cfg %s --log-json %s/ref.jsonl "
           ">/dev/null 2>&1", env, b, sets, dir);
  cr_assert_eq(test_sh(cmd), 0);
  /* signal once the first step is logged (mpirun itself: `timeout` in front would take the signal) */
  snprintf(cmd, sizeof cmd,
           "%s; D=%s; mpirun -np 2 %s/brigade train configs/tiny.cfg %s --set checkpoint.dir=$D/ck "
           "--log-json $D/stopped.jsonl >$D/out 2>&1 & pid=$!; "
           "for i in $(seq 1 600); do [ -s $D/stopped.jsonl ] && break; sleep 0.02; done; "
           "kill -USR1 $pid; wait $pid; echo $? > $D/rc", env, dir, b, sets);
  test_sh(cmd);
  char path[256];
  snprintf(path, sizeof path, "%s/rc", dir);
  FILE *f = fopen(path, "r");
  int rc = -1;
  cr_assert(f && fscanf(f, "%d", &rc) == 1);
  fclose(f);
  cr_assert_eq(rc, 128 + 10, "the stopped job exited %d", rc);
  snprintf(path, sizeof path, "%s/ck/latest", dir);
  f = fopen(path, "r");
  long step = 0;
  cr_assert(f && fscanf(f, "step_%ld", &step) == 1, "no checkpoint after the stop");
  fclose(f);
  cr_assert(step >= 1 && step < 150, "checkpoint of step %ld", step);
  snprintf(cmd, sizeof cmd, "grep -q 'stopped by SIGUSR1 after step %ld of 150; checkpoint written to %s/ck' %s/out",
           step, dir, dir);
  cr_assert_eq(test_sh(cmd), 0, "no message naming the step and the checkpoint");
  snprintf(cmd, sizeof cmd, "n=$(wc -l < %s/stopped.jsonl); [ $n -eq %ld ]", dir, step);
  cr_assert_eq(test_sh(cmd), 0, "the log does not end at step %ld", step);
  snprintf(cmd, sizeof cmd, "%s; timeout 120 mpirun -np 2 %s/brigade train configs/tiny.cfg %s --resume %s/ck "
           "--log-json %s/rest.jsonl >/dev/null 2>&1", env, b, sets, dir, dir);
  cr_assert_eq(test_sh(cmd), 0);
  snprintf(path, sizeof path, "%s/ref.jsonl", dir);
  last_loss(path, ref, sizeof ref);
  snprintf(path, sizeof path, "%s/rest.jsonl", dir);
  last_loss(path, got, sizeof got);
  cr_assert(ref[0] && strcmp(ref, got) == 0, "step 150: uninterrupted %s, stopped at %ld and resumed %s", ref, step, got);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  test_sh(cmd);
}

/* A rank that stops answering during an evaluation (SIGSTOP: a hung process) ends the job within
 * train.timeout plus a few seconds, non-zero, with the error naming the rank waited for, as a
 * stuck rank does during a training step. The evaluation (1000 micro-batches) takes nearly all of
 * each step's time, so the stop lands in one. */
Test(fault, rank_stuck_in_evaluation_ends_the_job, .timeout = 120) {
  char dir[] = "/tmp/brigade_stuck_XXXXXX", cmd[4096];
  cr_assert(mkdtemp(dir));
  const char *b = test_build_dir();
  const char *sets = "--set pipeline.stages=2 --set gradient_accumulation_steps=1 --set train.steps=100000 "
                     "--set train.eval_interval=1 --set train.eval_batches=1000 --set train.timeout=2";
  snprintf(cmd, sizeof cmd,
           "export " TEST_MPI_ENV "; D=%s; mpirun -np 2 %s/brigade train configs/tiny.cfg %s --log-json $D/log "
           ">$D/out 2>&1 & pid=$!; "
           "for i in $(seq 1 1000); do [ -s $D/log ] && break; sleep 0.02; done; sleep 0.3; "
           "victim=$(pgrep -f \"^%s/brigade train configs/tiny.cfg.*$D/log\" | sed -n 2p); "
           "[ -n \"$victim\" ] && kill -STOP $victim; t0=$(date +%%s); "
           "for i in $(seq 1 600); do kill -0 $pid 2>/dev/null || break; sleep 0.05; done; "
           "echo $(( $(date +%%s) - t0 )) > $D/secs; kill -CONT $victim; wait $pid; echo $? > $D/rc",
           dir, b, sets, b);
  test_sh(cmd);
  assert_job_ended(dir, "a stuck rank", 12, 2);
  snprintf(cmd, sizeof cmd, "grep -q 'timed out after 2 s waiting for rank [01] (stage [01]) on %s' %s/out && "
           "! grep -q 'rank -1' %s/out", pipe_test_host(), dir, dir);
  cr_assert_eq(test_sh(cmd), 0, "no error naming the rank waited for");
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  test_sh(cmd);
}

/* Several machines: a rank killed outright (its node lost, say) in a hostfile run over Open MPI's
 * TCP transport ends the job on every other rank within seconds, non-zero, the message naming the
 * rank and its host; the last checkpoint stays loadable. */
Test(fault, killed_rank_in_a_hostfile_run_ends_the_job, .timeout = 120) {
  char dir[] = "/tmp/brigade_killed_XXXXXX", cmd[4096];
  cr_assert(mkdtemp(dir));
  const char *b = test_build_dir();
  const char *sets = "--set pipeline.stages=2 --set gradient_accumulation_steps=2 --set train.steps=100000 "
                     "--set train.eval_interval=0 --set train.timeout=5 --set checkpoint.interval=2";
  snprintf(cmd, sizeof cmd,
           "export " TEST_MPI_ENV "; D=%s; echo 'localhost slots=2' > $D/hosts; "
           "mpirun --hostfile $D/hosts --mca btl tcp,self -np 2 %s/brigade train configs/tiny.cfg %s "
           "--set checkpoint.dir=$D/ck --log-json $D/log >$D/out 2>&1 & pid=$!; "
           "for i in $(seq 1 1000); do [ -s $D/ck/latest ] && break; sleep 0.02; done; sleep 0.2; "
           "victim=$(pgrep -f \"^%s/brigade train configs/tiny.cfg.*$D/log\" | sed -n 2p); "
           "[ -n \"$victim\" ] && kill -KILL $victim; t0=$(date +%%s); "
           "for i in $(seq 1 600); do kill -0 $pid 2>/dev/null || break; sleep 0.05; done; "
           "echo $(( $(date +%%s) - t0 )) > $D/secs; wait $pid; echo $? > $D/rc",
           dir, b, sets, b);
  test_sh(cmd);
  assert_job_ended(dir, "a killed rank", 15, 5);
  /* Open MPI's launcher names the dead process (its rank and node), or brigade's timeout does */
  snprintf(cmd, sizeof cmd, "grep -Eq 'rank 1 .*on node %s|rank 1 \\(stage 1\\) on %s' %s/out", pipe_test_host(),
           pipe_test_host(), dir);
  cr_assert_eq(test_sh(cmd), 0, "no message naming the killed rank and its host (%s/out)", dir);
  snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 %s/brigade sample --checkpoint %s/ck --prompt x --tokens 4 >/dev/null",
           b, dir);
  cr_assert_eq(test_sh(cmd), 0, "the last checkpoint does not load");
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  test_sh(cmd);
}

/* A data-parallel replica that stops answering (SIGSTOP: alive, so mpirun sees nothing) left the
 * other waiting in the gradients' all-reduce for ever: train.timeout bounded the pipeline's
 * messages only. A watchdog now ends a collective that waits past it: the job ends within
 * seconds, non-zero, naming the wait. */
Test(fault, stopped_replica_ends_the_job, .timeout = 120) {
  char dir[] = "/tmp/brigade_stopped_XXXXXX", cmd[4096];
  cr_assert(mkdtemp(dir));
  const char *b = test_build_dir();
  snprintf(cmd, sizeof cmd,
           "export " TEST_MPI_ENV "; D=%s; "
           "mpirun -np 2 %s/brigade train configs/tiny.cfg --set train.steps=100000 --set train.eval_interval=0 "
           "--set train.timeout=3 --log-json $D/log >$D/out 2>&1 & pid=$!; "
           "for i in $(seq 1 1000); do [ -s $D/log ] && break; sleep 0.02; done; "
           "victim=$(pgrep -f \"^%s/brigade train configs/tiny.cfg.*$D/log\" | sed -n 2p); "
           "[ -n \"$victim\" ] && kill -STOP $victim; t0=$(date +%%s); "
           "for i in $(seq 1 600); do kill -0 $pid 2>/dev/null || break; sleep 0.05; done; "
           "echo $(( $(date +%%s) - t0 )) > $D/secs; [ -n \"$victim\" ] && kill -KILL $victim 2>/dev/null; "
           "wait $pid; echo $? > $D/rc",
           dir, b, b);
  test_sh(cmd);
  assert_job_ended(dir, "a stopped rank", 20, 3);
  snprintf(cmd, sizeof cmd, "grep -q 'timed out after 3 s in the .* (train.timeout): a rank it waits for stopped answering' %s/out",
           dir);
  cr_assert_eq(test_sh(cmd), 0, "no message naming the wait (%s/out)", dir);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  test_sh(cmd);
}

/* The tied weight's gradient exchange between the embedding's rank and the head's waited
 * without a bound: a peer that stopped just before it (BRIGADE_INJECT_STOP) left the other rank
 * there for ever, 2 stages having no other wait to time out. It is watched now: the job ends after
 * train.timeout, naming the exchange and the peer. */
Test(fault, stopped_peer_of_the_tied_exchange_ends_the_job, .timeout = 120) {
  char dir[] = "/tmp/brigade_tiedstop_XXXXXX", cmd[4096];
  cr_assert(mkdtemp(dir));
  const char *b = test_build_dir();
  snprintf(cmd, sizeof cmd,
           "export " TEST_MPI_ENV "; D=%s; "
           "BRIGADE_INJECT_STOP=3:0 mpirun -np 2 -x BRIGADE_INJECT_STOP %s/brigade train configs/tiny.cfg "
           "--set pipeline.stages=2 --set train.steps=100 --set train.eval_interval=0 --set train.timeout=3 "
           "--log-json $D/log >$D/out 2>&1 & pid=$!; t0=$(date +%%s); "
           "for i in $(seq 1 1200); do kill -0 $pid 2>/dev/null || break; sleep 0.05; done; "
           "echo $(( $(date +%%s) - t0 )) > $D/secs; "
           "pkill -KILL -f \"^%s/brigade train configs/tiny.cfg.*$D/log\" 2>/dev/null; "
           "wait $pid; echo $? > $D/rc",
           dir, b, b);
  test_sh(cmd);
  assert_job_ended(dir, "a stopped rank", 40, 3);
  snprintf(cmd, sizeof cmd,
           "grep -q 'timed out after 3 s in the tied weight.s gradient exchange with pipeline rank 0 (train.timeout)' %s/out",
           dir);
  cr_assert_eq(test_sh(cmd), 0, "no message naming the exchange (%s/out)", dir);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  test_sh(cmd);
}

/* Under fp16 a diverged loss overflows every step: the dynamic scale backs off to
 * fp16.min_loss_scale, and an overflow there stops the run with a message (as DeepSpeed's
 * scaler does), rather than skipping every remaining step and exiting 0. A one-process run
 * ends as a runtime failure: one error line, exit 1. */
Test(fault, fp16_diverging_loss_stops_at_the_minimum_scale, .timeout = 60) {
  char dir[] = "/tmp/brigade_div_XXXXXX", cmd[1024];
  cr_assert(mkdtemp(dir));
  snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 %s/brigade train configs/tiny.cfg --set optimizer.params.lr=1e30 "
           "--set gradient_clipping=0.0 --set train.steps=40 --set train.eval_interval=0 --set fp16.enabled=true "
           "--set fp16.initial_scale_power=4 --set fp16.hysteresis=1 --log-json %s/log > %s/out 2>&1",
           test_build_dir(), dir, dir);
  int rc = test_sh(cmd);
  cr_assert_eq(rc, 1, "a run whose loss diverged under fp16 exited %d, not 1 (a runtime failure)", rc);
  snprintf(cmd, sizeof cmd, "grep -q 'overflow at the minimum loss scale' %s/out", dir);
  cr_assert_eq(test_sh(cmd), 0, "no message about the overflow at the minimum scale");
  /* one process: the error is one line, not followed by Open MPI's MPI_ABORT banner */
  snprintf(cmd, sizeof cmd, "[ $(grep -c '^brigade: error: ' %s/out) -eq 1 ] && ! grep -q MPI_ABORT %s/out", dir, dir);
  cr_assert_eq(test_sh(cmd), 0, "not one error line alone");
  snprintf(cmd, sizeof cmd, "n=$(wc -l < %s/log); [ $n -lt 10 ]", dir);
  cr_assert_eq(test_sh(cmd), 0, "the run went on after the scale reached its minimum");
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  test_sh(cmd);
}

/* A set-up failure on some ranks only (a data file one machine lacks, a config that differs):
 * the job ends at once, every rank exiting non-zero, with the failing rank's own error printed,
 * instead of the others waiting in set-up's next collective step. */
Test(fault, setup_failing_on_one_rank_ends_the_job, .timeout = 120) {
  const char *b = test_build_dir();
  const char *bad[] = {"--set 'data.path=\"/nonexistent/kjv.txt\"'", "--set train.nosuchkey=1"};
  const char *want[] = {"cannot open data file /nonexistent/kjv.txt", "unknown key 'train.nosuchkey'"};
  for (int k = 0; k < 2; k++) {
    char cmd[2048], *out = NULL;
    snprintf(cmd, sizeof cmd, TEST_MPI_ENV " timeout 60 mpirun -np 1 %s/brigade train configs/tiny.cfg --set pipeline.stages=2 "
             ": -np 1 %s/brigade train configs/tiny.cfg --set pipeline.stages=2 %s 2>&1", b, b, bad[k]);
    int rc = test_capture(cmd, &out);
    cr_assert(rc != 0 && rc != 124 && strstr(out, want[k]) && strstr(out, "another rank failed to start"),
              "exit %d (124: it hung): %s", rc, out);
    free(out);
  }
}
