#!/bin/sh
# POSIX sh. Pipelines sharing one GPU (backend = "cuda"; transfers through host copies) against
# one process: GPT-2-124M's shape (B=4, T=64, 4 steps on data/kjv.txt, fp32), one process, then
# 2 and 4 pipeline stages; prints the losses side by side and says whether they are equal bit for
# bit (as on the CPU, where a pipeline equals one process bit for bit).
#     sh scripts/gpu_pipeline_check.sh "MPIRUN COMMAND"     (from the repository's root)
MPIRUN=${1:-mpirun}
SETS='--set train.steps=4 --set data.path="data/kjv.txt" --set train.eval_interval=0 --set backend="cuda"'
D=$(mktemp -d)
eval build/brigade train configs/gpt2-124m.cfg $SETS --log-json "$D/p1.jsonl" > "$D/p1.out" 2>&1 || { tail -20 "$D/p1.out"; exit 1; }
for p in 2 4; do
  eval $MPIRUN -np $p build/brigade train configs/gpt2-124m.cfg $SETS --set pipeline.stages=$p --log-json "$D/p$p.jsonl" \
    > "$D/p$p.out" 2>&1 || { tail -20 "$D/p$p.out"; exit 1; }
  grep -h "pipeline transfers" "$D/p$p.out" | head -1
done
for p in 1 2 4; do sed 's/.*"loss":\([^,]*\),.*/\1/' "$D/p$p.jsonl" > "$D/l$p"; done
echo "losses: 1 process | 2 stages | 4 stages"; paste "$D/l1" "$D/l2" "$D/l4"
rc=0
for p in 2 4; do
  if cmp -s "$D/l1" "$D/l$p"; then echo "pipeline: $p stages give one process's losses bit for bit"
  else echo "pipeline: $p stages differ from one process"; rc=1; fi
done
rm -rf "$D"
exit $rc
