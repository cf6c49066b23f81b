#!/usr/bin/env bash
# Data-parallel scaling on one host: the same training job as 1 rank x 2
# threads and as 2 ranks x 1 thread (mpirun), same global batch, same rows.
#   bench/ddp_scaling.sh [STEPS]
# Model: GPT of ~10.7M parameters (6 layers x 384 channels, 6 heads, block
# 256, character vocabulary of tinyshakespeare); global batch 8 sequences x
# 256 tokens per step: micro-batch 8 on 1 rank (the CPU backend splits it
# over its 2 threads), micro-batch 4 on each of 2 ranks. STEPS (default 20)
# optimizer steps; the figures are medians over steps 4..STEPS (the first
# ones warm caches and the prefetch ring).
# Reported per layout: tokens/s (global), ms/step and its wall-clock
# breakdown (forward, backward, optimizer, and time/comm_ms: the collectives
# of a step — the token-count and loss sums and the bucketed gradient
# all-reduce, 10.7M floats); efficiency = tokens/s(2 x 1) / tokens/s(1 x 2);
# and whether the two runs logged the same losses (they must, within 1e-5).
# Then per-rank peak memory of ZeRO stages 0-3 on 4 ranks (see below).
# The collectives are not overlapped with backward (docs/distributed.md), so
# comm_ms adds to the step.
# LLMFORGE=path picks the binary (default: `make build`, build/llmforge);
# MPIRUN=path the launcher (default mpirun). Run on an idle machine: the
# script prints the load average first; on a shared one the figures are
# noisy, run it more than once.
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-20}
if [ -z "${LLMFORGE:-}" ]; then
  make -s build >/dev/null
  LLMFORGE=build/llmforge
fi
MPIRUN=${MPIRUN:-mpirun}
mpiflags=()
if "$MPIRUN" --version 2>&1 | grep -q -E "Open MPI|OpenRTE"; then
  mpiflags+=(--oversubscribe --bind-to none)
  [ "$(id -u)" -eq 0 ] && mpiflags+=(--allow-run-as-root)
fi
OUT=out/bench/ddp_scaling
rm -rf "$OUT"
mkdir -p "$OUT"
echo "== $(nproc) CPUs, load average: $(cut -d' ' -f1-3 /proc/loadavg); $("$MPIRUN" --version 2>&1 | head -1)"
"$LLMFORGE" prepare --char ../shared/data/tinyshakespeare.txt --out "$OUT/data" >/dev/null

common=(--data.dataset="$OUT/data" --model.n_layer=6 --model.n_head=6 --model.n_embd=384 --model.block_size=256
  --model.dropout=0 --train_batch_size=8 --gradient_accumulation_steps=1 --train_iters="$STEPS"
  --scheduler.warmup_iters=0 --eval.interval=0 --eval.iters=1 --checkpoint.interval=0
  --wall_clock_breakdown=true --steps_per_print=1000)

echo "== 1 rank x 2 threads"
OMP_NUM_THREADS=2 "$LLMFORGE" train "${common[@]}" --threads 2 --train_micro_batch_size_per_gpu=8 \
  --out_dir="$OUT/r1x2" | tail -n 1
echo "== 2 ranks x 1 thread: ${MPIRUN} ${mpiflags[*]} -n 2"
OMP_NUM_THREADS=1 "$MPIRUN" "${mpiflags[@]}" -n 2 "$LLMFORGE" train "${common[@]}" --threads 1 \
  --train_micro_batch_size_per_gpu=4 --out_dir="$OUT/r2x1" | tail -n 1

# median of KEY over the train records of steps >= 4 ("" when absent)
median() {
  grep '"type":"train"' "$1/log.jsonl" | awk -v key="\"$2\":" '
    { s = $0; sub(/.*"step":/, "", s); step = s + 0
      i = index($0, key); if (step < 4 || !i) next
      v = substr($0, i + length(key)); sub(/[,}].*/, "", v); print v + 0 }' |
    sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
row() {
  printf "%-20s %10.0f %9.1f %9.1f %9.1f %9.1f %9.1f %9.0f\n" "$1" "$(median "$2" tokens_per_sec)" \
    "$(median "$2" ms)" "$(median "$2" time/forward_ms)" "$(median "$2" time/backward_ms)" \
    "$(median "$2" time/optimizer_ms)" "${3:-0}" "$(awk -v b="$(median "$2" memory/rss_bytes)" 'BEGIN { print b / 1048576 }')"
}
echo
printf "%-20s %10s %9s %9s %9s %9s %9s %9s\n" layout "tokens/s" "ms/step" forward backward optimizer comm "RSS MiB"
row "1 rank x 2 threads" "$OUT/r1x2"
row "2 ranks x 1 thread" "$OUT/r2x1" "$(median "$OUT/r2x1" time/comm_ms)"
awk -v a="$(median "$OUT/r1x2" tokens_per_sec)" -v b="$(median "$OUT/r2x1" tokens_per_sec)" \
  'BEGIN { printf "efficiency (2 ranks x 1 thread) / (1 rank x 2 threads) = %.3f\n", b / a }'
losses() { grep '"type":"train"' "$1/log.jsonl" | sed 's/.*"loss":\([^,]*\),.*/\1/'; }
paste <(losses "$OUT/r1x2") <(losses "$OUT/r2x1") | awk '
  { d = $1 - $2; if (d < 0) d = -d; r = d / $1; if (r > w) w = r; n++ }
  END { printf "losses of the two layouts over %d steps: worst relative difference %.2g%s\n", n, w,
        w <= 1e-5 ? "" : "  (MORE THAN 1e-5)" }'
echo "(RSS: rank 0's resident set at the last step)"

# Per-rank memory by ZeRO stage: the same model and global batch on 4 ranks x
# 1 thread (micro-batch 2 each), ZERO_STEPS steps per stage; each rank's peak
# resident set (GNU time's maximum RSS) beside the plan's per-rank bytes of
# parameters + gradients + AdamW moments (llmforge plan --world-size 4 --rank r).
ZERO_STEPS=${ZERO_STEPS:-5}
if [ -x /usr/bin/time ]; then
  echo
  echo "== ZeRO stages, 4 ranks x 1 thread, $ZERO_STEPS steps each: ${MPIRUN} ${mpiflags[*]} -n 4"
  printf "%-7s %18s %18s %14s %9s %9s\n" stage "peak RSS/rank MiB" "planned state MiB" "(rank 0 items)" "ms/step" comm
  for z in 0 1 2 3; do
    OMP_NUM_THREADS=1 "$MPIRUN" "${mpiflags[@]}" -n 4 bash -c \
      'r=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}; exec /usr/bin/time -o "$0.rss.$r" -f "%M" "$@"' "$OUT/zero$z" \
      "$LLMFORGE" train "${common[@]}" --threads 1 --train_micro_batch_size_per_gpu=2 --train_iters="$ZERO_STEPS" \
      --zero_optimization.stage=$z --out_dir="$OUT/zero$z" 2>"$OUT/zero$z.err" >/dev/null ||
      { tail -20 "$OUT/zero$z.err"; exit 1; }
    rss=$(for r in 0 1 2 3; do cat "$OUT/zero$z.rss.$r"; done | awk '{ printf "%s%.0f", (NR > 1 ? "/" : ""), $1 / 1024 }')
    planned=$("$LLMFORGE" plan "${common[@]}" --train_micro_batch_size_per_gpu=2 --zero_optimization.stage=$z \
      --world-size 4 --rank 0 --json | sed 's/.*"parameter_bytes":\([0-9]*\),"gradient_bytes":\([0-9]*\),"optimizer_bytes":\([0-9]*\).*/\1 \2 \3/' |
      awk '{ printf "%.1f %.0f+%.0f+%.0f", ($1 + $2 + $3) / 1048576, $1 / 1048576, $2 / 1048576, $3 / 1048576 }')
    printf "ZeRO-%d  %18s %18s %14s %9.1f %9.1f\n" "$z" "$rss" "${planned% *}" "${planned#* }" \
      "$(median "$OUT/zero$z" ms)" "$(median "$OUT/zero$z" time/comm_ms)"
  done
  echo "(peak RSS per rank, ranks 0/1/2/3; planned state = parameters + gradients + moments of one rank)"
fi
