#!/bin/sh
# Runs each libFuzzer target given for SECONDS seconds on its seed corpus; fails on the first
# crash, leak, timeout or out-of-memory (libFuzzer exits non-zero and leaves the input in
# build-fuzz/artifacts/). Prints the executions of each target.
#   sh scripts/fuzz.sh SECONDS build-fuzz/fuzz_config build-fuzz/fuzz_csv ...
set -e
secs=$1; shift
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p build-fuzz/artifacts
LSAN_OPTIONS="suppressions=$root/tests/fuzz/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export LSAN_OPTIONS
for bin in "$@"; do
  name=$(basename "$bin")
  case $name in
    fuzz_config) seeds="$root/tests/malformed/cfg $root/configs" ;;
    fuzz_csv) seeds="$root/tests/malformed/csv $root/tests/fuzz/seeds/csv" ;;
    fuzz_ckpt) seeds="$root/tests/malformed/ckpt" ;;
    fuzz_weights) seeds="" ;; # its seeds: written into the corpus by the target at start-up
    fuzz_bpe) seeds="$root/configs $root/tests/fuzz/seeds/text" ;; # short texts
    fuzz_trace) seeds="$root/tests/malformed/json" ;; # and the simulator's traces, written into the corpus at start-up
    fuzz_tokfiles) seeds="$root/tests/fuzz/seeds/tokfiles" ;;
    *) seeds="" ;;
  esac
  corpus=build-fuzz/corpus/$name # grows between runs; the seeds stay as committed
  mkdir -p "$corpus"
  log=build-fuzz/$name.log
  echo "== $name: ${secs}s"
  if ! "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
      -print_final_stats=1 -artifact_prefix=build-fuzz/artifacts/"$name"- \
      "$corpus" $seeds >"$log" 2>&1; then
    tail -60 "$log"
    echo "$name: FAILED (input in build-fuzz/artifacts/)"
    exit 1
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
  echo "$name: $execs executions, $cov, corpus $(ls "$corpus" | wc -l) files, no crash"
done
