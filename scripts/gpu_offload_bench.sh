#!/bin/sh
# POSIX sh. Activation offload's cost on a GPU (backend = "cuda"), timed: a wide GPT (d_model
# 4096, 64 heads, 8 blocks, T = 1024, micro-batches of 2, byte-level data/kjv.txt) on 4
# pipeline ranks sharing the GPU, 1f1b, 8 micro-batches, bf16, fused attention, 4 steps; first
# with pipeline.offload = "none", then the runs OFFLOAD_BENCH_RUNS names (default "full full+pc auto
# auto+pc": each placement with its copies whole and fed in pieces):
#   full  "full" at a rank's share of the GPU's rate (pipeline.offload_gflops 45000,
#         OFFLOAD_BENCH_GFLOPS) and offload_gbps 40 (OFFLOAD_BENCH_GBPS): the copies those costs
#         hide where a rank then allocates fewer slots (at the defaults rank 0's 8 micro-batches,
#         3 slots instead of 4);
#   all   "full" at costs that call every copy hidden (offload_gflops 1000);
#   auto  "auto" with memory_limit 3 at the same costs as full (rank 0 holds 4 slots without);
#   none  "none" again, for the spread of the runs without offload in one command;
#   NAME+rg  that run with recompute_gelu on the blocks (the same losses, slots N x 4C smaller);
#   NAME+pc  that run with the offload copies fed to the copy engines in pieces
#            (BRIGADE_COPY_PIECE_MB=${OFFLOAD_BENCH_PIECE_MB:-16}: at most 4 pieces queued, so a
#            transfer's staging copy waits for those rather than a whole slot; docs/backends.md);
#   NAME+mps that run under CUDA's multi-process service (nvidia-cuda-mps-control -d, started
#            before the first such run and stopped before a run without; the 4 ranks' kernels and
#            copies then share one device context instead of taking turns); last in a name.
# Each run's losses are compared with the first run's.
# OFFLOAD_BENCH_MODEL="D_MODEL N_HEADS BLOCKS" changes the model (default "4096 64 8");
# OFFLOAD_BENCH_STEPS the steps per run (default 4).
# OFFLOAD_BENCH_TRACE=DIR writes each run's measured timeline of step 2 to DIR/NAME.json (+ .svg); a traced
# step waits for each instruction to end, so it is slower: compare the steps after it (each step's
# time is printed). Its copies overlap compute as in any other step, timed by events on the copy
# streams (before, the traced step waited for each copy too, so its timeline overstated them).
# Prints each run's offload line, activation memory report (measured peak, the simulator's
# prediction, allocated) and the mean step time of steps 2..N, and compares the losses.
#     sh scripts/gpu_offload_bench.sh "MPIRUN COMMAND"     (from the repository's root)
# OFFLOAD_BENCH_SETS: more --set arguments for every run (words without spaces), e.g. a small
# model on the fakedev backend to try the script without a GPU.
MPIRUN=${1:-mpirun}
# a rank's compute rate as the simulator should see it: the GPU's (on this model about 180
# TFLOP/s measured on an H200, 250 on an H100) shared by the 4 ranks
GFLOPS=${OFFLOAD_BENCH_GFLOPS:-45000}
GBPS=${OFFLOAD_BENCH_GBPS:-40}
# the model's width, heads and blocks (OFFLOAD_BENCH_MODEL="D_MODEL N_HEADS BLOCKS", default
# "4096 64 8"; "8192 128 4" has twice the compute per byte of activations and needs about 75 GB)
set -- ${OFFLOAD_BENCH_MODEL:-4096 64 8}
DM=$1 NH=$2 NB=$3
D=$(mktemp -d)
cat > "$D/wide.cfg" <<EOF
backend = "cuda";
train_micro_batch_size_per_gpu = 2;
gradient_accumulation_steps = 8;
train = { steps = ${OFFLOAD_BENCH_STEPS:-4}; eval_interval = 0; };
data = { path = "data/kjv.txt"; };
bf16 = { enabled = true; };
optimizer = { type = "AdamW"; params = { lr = 3e-4; weight_decay = 0.1; }; };
pipeline = { stages = 4; schedule = "1f1b"; };
model = {
  seq_len = 1024; d_model = $DM; n_heads = $NH;
  layers = (
    { type = "embedding"; name = "wte"; },
    { type = "transformer_block"; name = "h"; repeat = $NB; },
    { type = "layernorm"; name = "ln_f"; },
    { type = "lm_head"; name = "lm_head"; tie = "wte"; },
    { type = "cross_entropy"; }
  );
};
EOF
run() { # NAME SETS...
  n=$1; shift
  tr=
  [ -n "${OFFLOAD_BENCH_TRACE:-}" ] && tr="trace.path=\"$OFFLOAD_BENCH_TRACE/$n.json\""
  pc=0 # NAME+pc (before +mps): the copies fed in pieces
  case ${n%+mps} in *+pc) pc=${OFFLOAD_BENCH_PIECE_MB:-16};; esac
  env BRIGADE_COPY_PIECE_MB=$pc $MPIRUN -np 4 build/brigade train "$D/wide.cfg" "$@" ${OFFLOAD_BENCH_SETS:-} ${tr:+--set "$tr"} \
    --log-json "$D/$n.jsonl" > "$D/$n.out" 2>&1 || { echo "---- $n failed:"; tail -20 "$D/$n.out"; return 1; }
  echo "---- $n"
  grep -E "activation offload|activation memory per rank|^brigade: \[rank 0\]   rank|layout:|measured timeline|predicted from" "$D/$n.out"
  awk -F'"step_ms":' 'NF > 1 { split($2, a, ","); n++; all = all sprintf(" %.1f", a[1]); if (n > 1) { s += a[1]; k++ } }
    END { if (k) printf "mean step (steps 2..%d): %.1f ms (each:%s)\n", n, s / k, all }' "$D/$n.jsonl" | sed "s/^/$n: /"
  sed 's/.*"loss":\([^,]*\),.*/\1/' "$D/$n.jsonl" > "$D/$n.loss"
}
rc=0
MPS=0 # whether this script's MPS daemon runs
mps() { # on|off
  if [ "$1" = on ] && [ $MPS = 0 ]; then
    command -v nvidia-cuda-mps-control >/dev/null 2>&1 || { echo "offload-bench: no nvidia-cuda-mps-control here"; return 1; }
    nvidia-cuda-mps-control -d || { echo "offload-bench: nvidia-cuda-mps-control -d failed"; return 1; }
    MPS=1; echo "offload-bench: MPS daemon started"
  elif [ "$1" = off ] && [ $MPS = 1 ]; then
    echo quit | nvidia-cuda-mps-control; MPS=0; sleep 1; echo "offload-bench: MPS daemon stopped"
  fi
}
run none || rc=1
runs=${OFFLOAD_BENCH_RUNS:-full full+pc auto auto+pc} # after "none", always run first
for n in $runs; do
  case $n in *+mps) mps on || { rc=1; continue; };; *) mps off;; esac
  rg= # NAME+rg: that run with recompute_gelu on the blocks (the same losses, smaller slots)
  case ${n%+mps} in *+rg|*+rg+pc) rg="--set model.layers.[1].recompute_gelu=true";; esac
  b=${n%+mps}
  b=${b%+pc}
  case ${b%+rg} in
    full) run $n $rg --set 'pipeline.offload="full"' --set pipeline.offload_gflops=$GFLOPS --set pipeline.offload_gbps=$GBPS || rc=1;;
    all) run $n $rg --set 'pipeline.offload="full"' --set pipeline.offload_gflops=1000 --set pipeline.offload_gbps=$GBPS || rc=1;;
    auto) run $n $rg --set 'pipeline.offload="auto"' --set pipeline.memory_limit=3 --set pipeline.offload_gflops=$GFLOPS \
      --set pipeline.offload_gbps=$GBPS || rc=1;;
    none) [ "$n" = none ] && n=none2 # again: the spread of the runs without offload in one command
      run $n $rg || rc=1;;
    *) echo "offload-bench: no run named $n (full all auto none, each also as NAME+rg, NAME+pc, NAME+mps)"; rc=1;;
  esac
done
mps off
for n in $runs; do
  [ "$n" = none ] && n=none2
  if [ -s "$D/none.loss" ] && cmp -s "$D/none.loss" "$D/$n.loss"; then echo "offload-bench: $n gives none's losses bit for bit"
  else echo "offload-bench: $n's losses differ from none's"; rc=1; fi
done
rm -rf "$D"
exit $rc
