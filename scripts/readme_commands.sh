#!/bin/sh
# Runs the commands of README.md's ```sh blocks, so that every command the README shows works as
# written. `make test` runs it (through scripts/run_tests.sh); alone, after `make`:
#     sh scripts/readme_commands.sh [FILE.md ...]   (default README.md; paths from the repository root)
#
# What is a command: every line of a ```sh fence that is not blank and not a comment (a line whose
# first character other than a space is #); a line ending in \ continues on the next. Each runs
# with `sh -c`, in the order of the file, in one scratch directory that holds links to the
# repository's folders (build/ links to $BRIGADE_BUILD; out/ is left out), so what the commands
# write in it (out/, tune.svg) stays there and a later command sees what an earlier one wrote; the
# directory is removed at the end.
# Nothing is shortened: the README's commands are kept small enough to run as written (the whole
# check takes seconds).
#
# What is not run:
#   - a command ending in `# needs: WHAT`, WHAT one of
#       mpi          MPI ranks on several machines (a hostfile of real hosts)
#       gpu          a machine with a GPU
#       gpt2-files   GPT-2's weights or tokenizer files, which the user supplies
#     (another WHAT is an error, so a typo cannot hide a command);
#   - `make ...`: `make test` runs this script, `make run` takes a minute and CI runs `make test`.
# A command starting with `mpirun` runs on this machine, with `mpirun` replaced by $BRIGADE_MPIRUN
# (`make test` passes the Makefile's MPIRUN: root allowed, oversubscription, shared memory).
#
# Output: one line per command (ok / skip / FAIL); a failing command is printed with its exit
# status and its whole output. The last line is Criterion's synthesis format, which
# scripts/run_tests.sh counts. Exit status 1 when any command failed or none was found.
# Environment: BRIGADE_BUILD (default ./build), BRIGADE_MPIRUN, README_TIMEOUT (seconds per
# command, default 120). Under `make SANITIZE=1 test` leak reports are off here, as in the tests
# that start `brigade train`: train and sample initialise MPI, whose leaks name nothing of ours.
ROOT=$(cd "$(dirname "$0")/.." && pwd) || exit 1
cd "$ROOT" || exit 1
while [ $# -gt 0 ]; do
  case $1 in
    --jobs) shift 2 ;; # scripts/run_tests.sh passes --jobs N to every suite
    --jobs=*) shift ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || set -- README.md
BUILD=${BRIGADE_BUILD:-$ROOT/build}
MPIRUN=${BRIGADE_MPIRUN:-env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1 mpirun}
LIMIT=${README_TIMEOUT:-120}

synthesis() { echo "[====] Synthesis: Tested: $1 | Passing: $2 | Failing: $3 | Crashing: 0"; }
if [ ! -x "$BUILD/brigade" ]; then
  echo "readme_commands: no $BUILD/brigade: build it first (make)"
  synthesis 1 0 1
  exit 1
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/brigade_readme_XXXXXX") || exit 1
trap 'rm -rf "$WORK"' EXIT INT TERM
for e in "$ROOT"/*/; do # the repository's folders (configs/, data/, ...), not its outputs;
  n=$(basename "$e")    # no files, so that a command writing tune.svg cannot overwrite one
  case $n in out | build | build-*) continue ;; esac
  ln -s "$ROOT/$n" "$WORK/$n"
done
ln -s "$BUILD" "$WORK/build"

# FILE:LINE<TAB>COMMAND per command (continuations joined; LINE is the command's first line)
list="$WORK/.commands"
for f in "$@"; do
  awk -v file="$f" '
    /^[ \t]*```/ {
      if (!infence) { infence = 1; issh = ($0 ~ /^[ \t]*```sh[ \t]*$/) } else { infence = 0; issh = 0 }
      next
    }
    !issh { next }
    {
      line = $0
      if (cont == "") start = NR
      if (line ~ /\\[ \t]*$/) { sub(/\\[ \t]*$/, "", line); cont = cont line " "; next }
      line = cont line; cont = ""
      if (line ~ /^[ \t]*$/ || line ~ /^[ \t]*#/) next
      sub(/^[ \t]+/, "", line)
      printf "%s:%d\t%s\n", file, start, line
    }' "$f"
done > "$list"

total=0; pass=0; fail=0; skipped=0; bad=0
out="$WORK/.output"
while IFS='	' read -r where cmd; do
  case $cmd in
    *'# needs:'*)
      need=$(printf '%s\n' "$cmd" | sed -n 's/.*# needs: *\([a-z0-9-]*\)[ \t]*$/\1/p')
      case $need in
        mpi | gpu | gpt2-files) echo "skip $where (needs $need): $cmd"; skipped=$((skipped + 1)); continue ;;
        *) echo "FAIL $where: unknown or misplaced '# needs:' (expected mpi, gpu or gpt2-files at the end): $cmd"
           bad=$((bad + 1)); continue ;;
      esac ;;
    make | make\ *) echo "skip $where (a make target): $cmd"; skipped=$((skipped + 1)); continue ;;
  esac
  run=$cmd
  case $cmd in
    mpirun\ *) run="$MPIRUN ${cmd#mpirun }" ;;
  esac
  total=$((total + 1))
  t0=$(date +%s)
  (cd "$WORK" && ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" timeout "$LIMIT" sh -c "$run") \
    > "$out" 2>&1 < /dev/null
  rc=$?
  secs=$(($(date +%s) - t0))
  if [ "$rc" -eq 0 ]; then
    echo "ok   $where (${secs} s): $cmd"; pass=$((pass + 1))
  else
    [ "$rc" -eq 124 ] && why="timed out after $LIMIT s" || why="exit status $rc"
    echo "FAIL $where ($why): $cmd"
    echo "---- its output:"
    cat "$out"
    echo "----"
    fail=$((fail + 1))
  fi
done < "$list"

if [ "$total" -eq 0 ]; then
  echo "readme_commands: no command found in $* (is there a \`\`\`sh block?)"
  bad=$((bad + 1))
fi
echo "readme_commands: $pass of $total commands passed, $fail failed; $skipped not run (see the header for why)"
synthesis $((total + bad)) "$pass" $((fail + bad))
[ "$fail" -eq 0 ] && [ "$bad" -eq 0 ]
