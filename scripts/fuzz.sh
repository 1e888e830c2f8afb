#!/bin/sh
# Runs each libFuzzer target given for SECONDS seconds on its seed corpus, as many at once as
# the machine has cores (FUZZ_JOBS overrides: each target still gets its SECONDS of a core);
# fails when any found a crash, leak, timeout or out-of-memory (libFuzzer exits non-zero and
# leaves the input in build-fuzz/artifacts/), printing its log's end. Prints the executions of
# each target, in the order given.
#   sh scripts/fuzz.sh SECONDS build-fuzz/fuzz_config build-fuzz/fuzz_csv ...
set -e
secs=$1; shift
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p build-fuzz/artifacts
LSAN_OPTIONS="suppressions=$root/tests/fuzz/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export LSAN_OPTIONS
jobs=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}
[ "$jobs" -ge 1 ] 2>/dev/null || jobs=1

seeds_of() {
  case $1 in
    fuzz_config) echo "$root/tests/malformed/cfg $root/configs" ;;
    fuzz_csv) echo "$root/tests/malformed/csv $root/tests/fuzz/seeds/csv" ;;
    fuzz_ckpt) echo "$root/tests/malformed/ckpt" ;;
    fuzz_weights) echo "" ;; # its seeds: written into the corpus by the target at start-up
    fuzz_bpe) echo "$root/configs $root/tests/fuzz/seeds/text" ;; # short texts
    fuzz_trace) echo "$root/tests/malformed/json" ;; # and the simulator's traces, written into the corpus at start-up
    fuzz_tokfiles) echo "$root/tests/fuzz/seeds/tokfiles" ;;
    *) echo "" ;;
  esac
}

# one target: its log in build-fuzz/NAME.log, its exit status in build-fuzz/NAME.rc
run_one() {
  name=$(basename "$1")
  corpus=build-fuzz/corpus/$name # grows between runs; the seeds stay as committed
  mkdir -p "$corpus"
  rc=0
  "$1" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1 -artifact_prefix=build-fuzz/artifacts/"$name"- \
    "$corpus" $(seeds_of "$name") >build-fuzz/"$name".log 2>&1 || rc=$?
  echo $rc >build-fuzz/"$name".rc
}

pids="" running=0
for bin in "$@"; do
  echo "== $(basename "$bin"): ${secs}s"
  rm -f build-fuzz/"$(basename "$bin")".rc
  run_one "$bin" &
  pids="$pids $!" running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    for p in $pids; do wait "$p" || true; done
    pids="" running=0
  fi
done
for p in $pids; do wait "$p" || true; done

failed=0
for bin in "$@"; do
  name=$(basename "$bin")
  log=build-fuzz/$name.log
  if [ "$(cat build-fuzz/"$name".rc 2>/dev/null)" != 0 ]; then
    tail -60 "$log"
    echo "$name: FAILED (input in build-fuzz/artifacts/)"
    failed=1
    continue
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
  echo "$name: $execs executions, $cov, corpus $(ls build-fuzz/corpus/"$name" | wc -l) files, no crash"
done
exit $failed
