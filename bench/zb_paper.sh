#!/bin/sh
# bench/zb_paper.sh: brigade's simulated bubble rates beside the zero-bubble paper's (Qi et al.,
# arXiv 2401.10241, the ICLR version's table of its 12 measured set-ups: GPT models of 1.5B, 6.2B,
# 14.6B and 28.3B parameters on 8, 16 and 32 stages, three micro-batch counts each). Each set-up
# is the paper's profiled per-op times (F, B, W and the transfer, in milliseconds) and its model
# (hidden size h, heads a, sequence 1024), from which the paper's memory model gives a pending
# W's share of a slot: M_W / M_B = 32h / (34h + 5as). Prints, per set-up, brigade's bubble rate
# and worst rank's peak memory (in stages' activations) for 1f1b, zb-h1, zb-h2, zb-auto at
# --mem-limit p and 2p, and zb-v, then the paper's 1F1B, ZB-H1, ZB-H2 and ZB-2p.
# (The paper's rates are per-rank spans, as brigade's bubble_rate.) Prints figures; exits 0.
#   sh bench/zb_paper.sh            (after make; BUILD=dir for another build directory)
B=${BUILD:-build}/brigade
[ -x "$B" ] || { echo "zb_paper: $B not built (run make)"; exit 1; }
field() { sed -n "s/.*\"$1\": *\\([-0-9.e+]*\\).*/\\1/p" | head -1; }
worst_peak() { tr ',' '\n' | sed -n 's/.*"peak_memory": *\([0-9.e+]*\).*/\1/p' | sort -g | tail -1; }
printf '%-10s %-18s %-16s %-16s %-16s %-16s %-16s | %s\n' "set-up" "1f1b" "zb-h1" "zb-h2" "zb-auto p" "zb-auto 2p" \
  "zb-v" "paper: 1F1B ZB-H1 ZB-H2 ZB-2p"
# p m F B W comm h a   paper: 1F1B ZB-H1 ZB-H2 ZB-2p
while read p m f b w c h a q1 qh1 qh2 q2p; do
  ws=$(awk -v h="$h" -v a="$a" 'BEGIN { printf "%.6f", 32 * h / (34 * h + 5 * a * 1024) }')
  line=$(printf '%-10s' "p=$p m=$m")
  for fam in "1f1b" "zb-h1" "zb-h2" "zb-auto --mem-limit $p" "zb-auto --mem-limit $((2 * p))" "zb-v"; do
    # shellcheck disable=SC2086
    out=$("$B" sim --schedule $fam --stages "$p" --microbatches "$m" --cost-f "$f" --cost-b "$b" --cost-w "$w" \
      --comm "$c" --w-stash "$ws" --json 2>&1)
    br=$(echo "$out" | field bubble_rate)
    pk=$(echo "$out" | worst_peak)
    line="$line $(printf '%-16s' "$(awk -v x="$br" -v y="$pk" 'BEGIN { printf "%.4f at %.2f", x, y }')")"
  done
  echo "$line | $q1 $qh1 $qh2 $q2p"
done <<'EOF'
8 24 18.522 18.086 9.337 0.601 2304 24 0.2431 0.1585 0.1083 0.0433
8 32 18.513 18.086 9.331 0.626 2304 24 0.1985 0.1242 0.0837 0.0039
8 64 18.546 18.097 9.321 0.762 2304 24 0.1240 0.0674 0.0444 0.0026
8 24 29.718 29.444 19.927 0.527 4096 32 0.2347 0.1323 0.0698 0.0029
8 32 29.802 29.428 19.530 0.577 4096 32 0.1898 0.1045 0.0559 0.0022
8 64 29.935 29.621 19.388 0.535 4096 32 0.1091 0.0554 0.0294 0.0010
16 48 11.347 11.248 8.132 0.377 5120 40 0.2552 0.1397 0.0672 0.0066
16 64 11.307 11.254 8.101 0.379 5120 40 0.2082 0.1088 0.0516 0.0054
16 128 11.325 11.308 8.109 0.378 5120 40 0.1251 0.0576 0.0266 0.0028
32 96 10.419 10.207 7.715 0.408 6144 48 0.2646 0.1421 0.0641 0.0038
32 128 10.408 10.204 7.703 0.408 6144 48 0.2168 0.1106 0.0490 0.0029
32 256 10.402 10.248 7.698 0.460 6144 48 0.1352 0.0594 0.0257 0.0018
EOF
