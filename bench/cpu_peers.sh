#!/bin/sh
# bench/cpu_peers.sh: GPT-2-124M's shape (configs/gpt2-124m.cfg, B=4, T=64) on the CPU: brigade
# fp32 and bf16 (bf16 GEMMs where the CPU has AVX512-BF16, on AMX where it has that too,
# kernels/cpu/bgemm.c) against each
# other and against PyTorch (Debian's python3-torch, eager, fp32 and bf16 autocast), interleaved
# in rounds so that a slow spell of the machine falls on all of them; prints each round and the
# ratios of the medians. THREADS (default 2) is brigade's `threads` and PyTorch's
# OMP_NUM_THREADS. PyTorch's bf16 autocast runs where the CPU has AVX512-BF16 (elsewhere it
# takes about a minute a step; BF16=1 runs it anyway, once). Without PyTorch, brigade's two
# precisions only.
#   sh bench/cpu_peers.sh [ROUNDS] [THREADS]      (make bench runs it)
set -e
ROUNDS=${1:-3}
THREADS=${2:-2}
B=${BUILD:-build}
for n in "$ROUNDS" "$THREADS"; do
  case $n in
    '' | *[!0-9]* | 0*) echo "usage: sh bench/cpu_peers.sh [ROUNDS] [THREADS] (whole numbers >= 1; got '$n')" >&2; exit 2 ;;
  esac
done
torch=1
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "cpu_peers: PyTorch (python3-torch) is not installed: brigade fp32 against bf16 only, no peer"
  torch=0
fi
hwbf16=0
grep -qw avx512_bf16 /proc/cpuinfo 2>/dev/null && hwbf16=1
# a run that fails, or prints no mean, stops the script (in a pipeline its status was sed's)
mean_of() { # what file pattern -> the mean the run printed in file
  v=$(sed -n "$3" "$2")
  [ -n "$v" ] || { echo "cpu_peers: $1 printed no mean s/step:" >&2; cat "$2" >&2; exit 1; }
  echo "$v"
}
out=$(mktemp)
trap 'rm -f "$out" "$out.what"' EXIT
step() { # precision -> mean s/step of brigade's train_step
  "$B/bench/train_step" configs/gpt2-124m.cfg 3 "$THREADS" cpu 4 64 "$1" > "$out" 2>&1 ||
    { echo "cpu_peers: train_step ($1) failed:" >&2; cat "$out" >&2; exit 1; }
  # which GEMMs bf16 ran, as the run itself said (AMX, AVX512-BF16, or fp32 and why)
  [ "$1" = bf16 ] && sed -n 's/^cpu GEMM (fp32) in this run.*; \([^;]*\): [0-9.]*x and .*/\1/p' "$out" > "$out.what"
  mean_of "train_step ($1)" "$out" 's/^mean: \([0-9.]*\) s\/step.*/\1/p'
}
torch_step() { # dtype steps -> mean s/step of PyTorch
  OMP_NUM_THREADS=$THREADS /usr/bin/python3 bench/torch_gpt2.py --device cpu --B 4 --T 64 --steps "$2" --dtype "$1" \
    --attention math > "$out" 2>&1 || { echo "cpu_peers: PyTorch ($1) failed:" >&2; cat "$out" >&2; exit 1; }
  mean_of "PyTorch ($1)" "$out" 's/.*mean \([0-9.]*\) s\/step.*/\1/p'
}
f32="" b16="" tfp="" tbf=""
r=1
while [ "$r" -le "$ROUNDS" ]; do
  s=$(step fp32)
  h=$(step bf16)
  line="round $r: brigade fp32 $s s/step, brigade bf16 $h s/step"
  f32="$f32 $s" b16="$b16 $h"
  if [ $torch = 1 ]; then
    f=$(torch_step fp32 2)
    tfp="$tfp $f" line="$line, PyTorch fp32 $f s/step"
    if [ $hwbf16 = 1 ]; then
      t=$(torch_step bf16 2)
      tbf="$tbf $t" line="$line, PyTorch bf16 autocast $t s/step"
    fi
  fi
  echo "$line"
  r=$((r + 1))
done
if [ $torch = 1 ] && [ $hwbf16 = 0 ] && [ -n "$BF16" ]; then
  tbf=$(torch_step bf16 1)
  echo "PyTorch bf16 autocast (this CPU has no AVX512-BF16): $tbf s/step"
fi
med() { echo "$@" | tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print NR % 2 ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
ratio() { echo "$1 $2" | awk '{printf "%.2f", $1/$2}'; }
mf=$(med $f32) mb=$(med $b16)
what=$(cat "$out.what" 2>/dev/null)
[ -n "$what" ] || what="fp32 GEMMs: this CPU has no AVX512-BF16"
echo "medians: brigade fp32 $mf s/step, brigade bf16 $mb s/step ($what): bf16 $(ratio "$mf" "$mb")x faster than fp32"
if [ $torch = 1 ]; then
  mt=$(med $tfp)
  echo "medians: PyTorch fp32 $mt s/step: brigade fp32 $(ratio "$mt" "$mf")x faster than PyTorch fp32, brigade bf16 $(ratio "$mt" "$mb")x"
  if [ -n "$tbf" ]; then
    mtb=$(med $tbf)
    echo "medians: PyTorch bf16 autocast $mtb s/step: brigade bf16 $(ratio "$mtb" "$mb")x faster"
  fi
fi
