#!/bin/sh
# bench/cpu_peers.sh: GPT-2-124M's shape (configs/gpt2-124m.cfg, B=4, T=64) on the CPU, brigade
# against PyTorch (Debian's python3-torch, eager, fp32 and bf16 autocast), interleaved in rounds
# so that a slow spell of the machine falls on both; prints each round and the ratios of the
# medians. THREADS (default 2) is brigade's `threads` and PyTorch's OMP_NUM_THREADS.
#   sh bench/cpu_peers.sh [ROUNDS] [THREADS]      (make bench runs it when PyTorch is there)
set -e
ROUNDS=${1:-3}
THREADS=${2:-2}
B=${BUILD:-build}
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "cpu_peers: PyTorch (python3-torch) is not installed: no peer to compare with (skipped)"
  exit 0
fi
bri="" tfp="" tbf=""
r=1
while [ "$r" -le "$ROUNDS" ]; do
  s=$("$B/bench/train_step" configs/gpt2-124m.cfg 3 "$THREADS" | sed -n 's/^mean: \([0-9.]*\) s\/step.*/\1/p')
  f=$(OMP_NUM_THREADS=$THREADS /usr/bin/python3 bench/torch_gpt2.py --device cpu --B 4 --T 64 --steps 2 --dtype fp32 \
      --attention math | sed -n 's/.*mean \([0-9.]*\) s\/step.*/\1/p')
  echo "round $r: brigade fp32 $s s/step, PyTorch fp32 $f s/step"
  bri="$bri $s" tfp="$tfp $f"
  r=$((r + 1))
done
if [ -n "$BF16" ]; then
  tbf=$(OMP_NUM_THREADS=$THREADS /usr/bin/python3 bench/torch_gpt2.py --device cpu --B 4 --T 64 --steps 1 --dtype bf16 \
        --attention math | sed -n 's/.*mean \([0-9.]*\) s\/step.*/\1/p')
  echo "PyTorch bf16 autocast: $tbf s/step"
fi
med() { echo "$@" | tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mb=$(med $bri) mf=$(med $tfp)
echo "medians: brigade $mb s/step, PyTorch fp32 $mf s/step: brigade $(echo "$mf $mb" | awk '{printf "%.2f", $1/$2}')x faster"
