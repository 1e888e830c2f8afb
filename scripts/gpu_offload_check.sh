#!/bin/sh
# POSIX sh. Activation offload on a GPU (backend = "cuda"): the tiny GPT on 4 pipeline ranks
# sharing the GPU, 8 micro-batches, 6 steps, without and with pipeline.offload = "full" at a
# CPU's compute rate (offload_gflops 50, so that the tiny GPT's copies count as hidden) (the
# copies on the CUDA table's two copy streams; BRIGADE_OFFLOAD_POISON=1 fills an offloaded
# micro-batch's device buffers with NaN until its reload). Prints both runs' activation memory
# report and compares their losses bit for bit; exit 0 when they are equal and rank 0 offloaded
# (4 ranks: ranks 0 and 1 offload and allocate 2 slots rather than 4 and 3; on 2, none would).
#     sh scripts/gpu_offload_check.sh "MPIRUN COMMAND"     (from the repository's root)
# OFFLOAD_CHECK_BACKEND=fakedev runs it without a GPU (the CPU's kernels behind device pointers).
# OFFLOAD_CHECK_SETS: more --set arguments for both runs (words without spaces), e.g.
# '--set pipeline.schedule="dualpipev"' (a backward handing its input gradient to its own rank).
MPIRUN=${1:-mpirun}
SETS="--set backend=${OFFLOAD_CHECK_BACKEND:-cuda} --set pipeline.stages=4 --set gradient_accumulation_steps=8 --set train.steps=6 --set train.eval_interval=0 ${OFFLOAD_CHECK_SETS:-}"
D=$(mktemp -d)
$MPIRUN -np 4 build/brigade train configs/tiny.cfg $SETS --log-json "$D/plain.jsonl" > "$D/plain.out" 2>&1 || { cat "$D/plain.out"; exit 1; }
BRIGADE_OFFLOAD_POISON=1 $MPIRUN -x BRIGADE_OFFLOAD_POISON -np 4 build/brigade train configs/tiny.cfg $SETS \
  --set 'pipeline.offload="full"' --set pipeline.offload_gflops=50 --log-json "$D/off.jsonl" > "$D/off.out" 2>&1 || { cat "$D/off.out"; exit 1; }
for r in plain off; do
  echo "---- $r"; grep -E "activation offload|activation memory per rank|^brigade: \[rank 0\]   rank|step     6" "$D/$r.out"
done
sed 's/.*"loss":\([^,]*\),.*/\1/' "$D/plain.jsonl" > "$D/a"; sed 's/.*"loss":\([^,]*\),.*/\1/' "$D/off.jsonl" > "$D/b"
echo "losses without / with offload:"; paste "$D/a" "$D/b"
if cmp -s "$D/a" "$D/b"; then echo "offload: the same losses bit for bit"; rc=0; else echo "offload: the losses differ"; rc=1; fi
if grep -q "rank 0 offloads [1-9]" "$D/off.out"; then :; else echo "offload: rank 0 offloaded nothing"; rc=1; fi
rm -rf "$D"
exit $rc
