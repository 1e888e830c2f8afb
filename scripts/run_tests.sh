#!/bin/sh
# Runs each Criterion test binary given, then prints one closing line over all of them:
#   tests: N passed, N failed
# Exits non-zero when any binary fails or a binary ran no test.
pass=0; fail=0; bad=0
# sanitizer builds: ignore leaks inside Criterion's own runner
LSAN_OPTIONS="suppressions=$(cd "$(dirname "$0")/.." && pwd)/tests/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export LSAN_OPTIONS
for t in "$@"; do
  log=$(mktemp)
  "$t" --jobs 2 >"$log" 2>&1
  rc=$?
  syn=$(grep 'Synthesis:' "$log" | tail -1)
  if [ "$rc" -ne 0 ] || [ -z "$syn" ]; then
    cat "$log"; bad=$((bad + 1))
  else
    grep -E '^\[----\]|Warning|warning' "$log" | head -20
  fi
  echo "$(basename "$t"): $syn"
  p=$(echo "$syn" | sed -n 's/.*Passing: \([0-9]*\).*/\1/p')
  f=$(echo "$syn" | sed -n 's/.*Failing: \([0-9]*\) | Crashing: \([0-9]*\).*/\1 \2/p')
  pass=$((pass + ${p:-0}))
  for x in $f; do fail=$((fail + x)); done
  [ -z "$p" ] && fail=$((fail + 1))
  rm -f "$log"
done
[ "$bad" -gt 0 ] && fail=$((fail > bad ? fail : bad))
echo "tests: $pass passed, $fail failed"
[ "$fail" -eq 0 ] && [ "$bad" -eq 0 ]
