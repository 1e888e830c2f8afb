#!/bin/sh
# POSIX sh. Activation offload's cost on a GPU (backend = "cuda"), timed: a wide GPT (d_model
# 4096, 64 heads, 4 blocks, T = 1024, micro-batches of 2, byte-level data/kjv.txt) on 2
# pipeline ranks sharing the GPU, 1f1b, 8 micro-batches, bf16, fused attention, 5 steps; the
# same run three times: pipeline.offload = "none", "full" at costs near the GPU's
# (pipeline.offload_gflops 150000, offload_gbps 40: only the copies those costs hide), and
# "full" at costs that call every copy hidden (offload_gflops 1000: every slot offloaded).
# Prints each run's offload line, activation memory report (measured peak, the simulator's
# prediction, allocated) and the mean step time of steps 2..4, and compares the losses.
#     sh scripts/gpu_offload_bench.sh "MPIRUN COMMAND"     (from the repository's root)
# OFFLOAD_BENCH_SETS: more --set arguments for every run (words without spaces), e.g. a small
# model on the fakedev backend to try the script without a GPU.
MPIRUN=${1:-mpirun}
D=$(mktemp -d)
cat > "$D/wide.cfg" <<'EOF'
backend = "cuda";
train_micro_batch_size_per_gpu = 2;
gradient_accumulation_steps = 8;
train = { steps = 4; eval_interval = 0; };
data = { path = "data/kjv.txt"; };
bf16 = { enabled = true; };
optimizer = { type = "AdamW"; params = { lr = 3e-4; weight_decay = 0.1; }; };
pipeline = { stages = 4; schedule = "1f1b"; };
model = {
  seq_len = 1024; d_model = 4096; n_heads = 64;
  layers = (
    { type = "embedding"; name = "wte"; },
    { type = "transformer_block"; name = "h"; repeat = 8; },
    { type = "layernorm"; name = "ln_f"; },
    { type = "lm_head"; name = "lm_head"; tie = "wte"; },
    { type = "cross_entropy"; }
  );
};
EOF
run() { # NAME SETS...
  n=$1; shift
  $MPIRUN -np 4 build/brigade train "$D/wide.cfg" "$@" ${OFFLOAD_BENCH_SETS:-} \
    --log-json "$D/$n.jsonl" > "$D/$n.out" 2>&1 || { echo "---- $n failed:"; tail -20 "$D/$n.out"; return 1; }
  echo "---- $n"
  grep -E "activation offload|activation memory per rank|^brigade: \[rank 0\]   rank|layout:" "$D/$n.out"
  awk -F'"step_ms":' 'NF > 1 { split($2, a, ","); n++; if (n > 1) { s += a[1]; k++ } }
    END { if (k) printf "mean step (steps 2..%d): %.1f ms\n", n, s / k }' "$D/$n.jsonl" | sed "s/^/$n: /"
  sed 's/.*"loss":\([^,]*\),.*/\1/' "$D/$n.jsonl" > "$D/$n.loss"
}
rc=0
run none || rc=1
run full --set 'pipeline.offload="full"' --set pipeline.offload_gflops=150000 --set pipeline.offload_gbps=40 || rc=1
run all --set 'pipeline.offload="full"' --set pipeline.offload_gflops=1000 --set pipeline.offload_gbps=40 || rc=1
for n in full all; do
  if [ -s "$D/none.loss" ] && cmp -s "$D/none.loss" "$D/$n.loss"; then echo "offload-bench: $n gives none's losses bit for bit"
  else echo "offload-bench: $n's losses differ from none's"; rc=1; fi
done
rm -rf "$D"
exit $rc
