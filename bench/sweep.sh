#!/usr/bin/env bash
# Hyperparameter sweeps on nanoGPT's shakespeare_char CPU experiment
# (configs/shakespeare_char_cpu.json, ITERS iterations, the schedule
# stretched to ITERS): 16 configurations, learning rate {5e-4, 1e-3, 2e-3,
# 4e-3} x warmup {0, 5%, 10%, 20% of ITERS}, swept three ways, one trial at a
# time on --threads 2:
#   grid      every configuration to ITERS (eval.interval ITERS/4, as the
#             config's 250 of 1000);
#   asha      the same 16 points, ASHA with eta 3 and min_resource ITERS/10
#             (rungs ITERS/9, ITERS/3, ITERS, rounded to eval.interval
#             ITERS/20: 100, 350, 1000 for 1000 iterations);
#   tpe+asha  16 trials drawn by TPE (6 random first) among the same values,
#             under the same ASHA.
# Evaluation never changes training (its batches are keyed by step), so a
# configuration's validation loss at ITERS is the same number under every
# method. Prints per method: total training steps (every trial's, summed),
# the best validation loss and its configuration, wall time; then the
# targets: ASHA within 40% of the grid's steps and within 1% of its best
# validation loss.
#   bench/sweep.sh [ITERS] [DATA.txt]
# ITERS defaults to 1000 (the grid is about 16 minutes on 2 idle cores, the
# whole script about half an hour); DATA to ../shared/data/tinyshakespeare.txt.
# BUILD (default build) is the CMake build directory `make build` fills. No
# Python: the figures come from `llmforge sweep status`.
set -euo pipefail
cd "$(dirname "$0")/.."
ITERS=${1:-1000}
DATA=${2:-../shared/data/tinyshakespeare.txt}
BUILD=${BUILD:-build}
OUT=out/bench/sweep
[ "$ITERS" -ge 40 ] && [ $((ITERS % 20)) -eq 0 ] || { echo "ITERS must be a multiple of 20, at least 40" >&2; exit 2; }
make -s build BUILD="$BUILD" > /dev/null
LF=$BUILD/llmforge
rm -rf "$OUT"
mkdir -p "$OUT"
export LLMFORGE_REGISTRY=$PWD/$OUT/registry.db # the trials' runs, not the developer's registry
"$LF" prepare --char "$DATA" --out "$OUT/data" > /dev/null

w1=$((ITERS / 20)) w2=$((ITERS / 10)) w3=$((ITERS / 5))
E=$((ITERS / 20)) GE=$((ITERS / 4))
space='"optimizer.params.lr": {"type": "TYPE", "values": [0.0005, 0.001, 0.002, 0.004]},
           "scheduler.warmup_iters": {"type": "TYPE", "values": [0, '$w1', '$w2', '$w3']}'
common='"base": "../../../configs/shakespeare_char_cpu.json",
 "set": {"data.dataset": "'$PWD/$OUT/data'", "train_iters": '$ITERS', "scheduler.decay_iters": '$ITERS',
         "checkpoint.interval": 0, "steps_per_print": '$ITERS', "eval.interval": EVAL},
 "objective": {"metric": "val_loss", "mode": "minimize"}'
asha='"early_stopping": {"type": "asha", "eta": 3, "min_resource": '$((ITERS / 10))'}'
cat > "$OUT/grid.json" <<EOF
{${common/EVAL/$GE}, "method": "grid",
 "space": {${space//TYPE/grid}}}
EOF
cat > "$OUT/asha.json" <<EOF
{${common/EVAL/$E}, "method": "grid", $asha,
 "space": {${space//TYPE/grid}}}
EOF
cat > "$OUT/tpe_asha.json" <<EOF
{${common/EVAL/$E}, "method": "tpe", "trials": 16, "seed": 1, "tpe": {"startup": 6}, $asha,
 "space": {${space//TYPE/choice}}}
EOF

results=()
for m in grid asha tpe_asha; do
  echo "== $m"
  "$LF" sweep "$OUT/$m.json" --dir "$OUT/$m" --dry-run | head -1
  t0=$(date +%s.%N)
  "$LF" sweep "$OUT/$m.json" --dir "$OUT/$m" --threads 2 > "$OUT/$m.txt" 2>&1 || { tail -n 30 "$OUT/$m.txt"; exit 1; }
  t1=$(date +%s.%N)
  "$LF" sweep status "$OUT/$m" | tail -n +2 | tee "$OUT/$m.status"
  steps=$(sed -n 's/^steps used: \([0-9]*\) .*/\1/p' "$OUT/$m.status")
  best=$(sed -n 's/^best: \(t[0-9]*\), val_loss \([^ ]*\) at step \([0-9]*\)$/\2 \1 \3/p' "$OUT/$m.status")
  cfg=$(awk -v t="$(echo "$best" | cut -d' ' -f2)" '$1 == t {print $6, $7}' "$OUT/$m.status")
  results+=("$m $steps $(awk "BEGIN{printf \"%.1f\", $t1 - $t0}") $best $cfg")
done

echo
printf '%-10s %12s %10s %15s %8s  %s\n' method "total steps" "wall (s)" "best val loss" "at step" "best configuration"
for r in "${results[@]}"; do
  read -r m steps wall val trial step lr wu <<< "$r"
  printf '%-10s %12s %10s %15s %8s  %s %s (%s)\n' "$m" "$steps" "$wall" "$val" "$step" "$lr" "$wu" "$trial"
done
read -r _ gsteps gwall gval _ <<< "${results[0]}"
for r in "${results[@]:1}"; do
  read -r m steps wall val _ step _ <<< "$r"
  awk -v m="$m" -v s="$steps" -v gs="$gsteps" -v v="$val" -v gv="$gval" -v w="$wall" -v gw="$gwall" -v st="$step" -v it="$ITERS" 'BEGIN {
    frac = s / gs; rel = (v - gv) / gv
    printf "%s: %.1f%% of the grid'"'"'s steps (target <= 40%%: %s), best val loss %+.2f%% from the grid'"'"'s (target within 1%%: %s)%s, %.1f%% of its wall time\n",
      m, 100 * frac, frac <= 0.40 ? "met" : "NOT met", 100 * rel, (rel <= 0.01 && st == it) ? "met" : "NOT met",
      st == it ? "" : " (its best is at step " st ", not a full run)", 100 * w / gw }'
done
