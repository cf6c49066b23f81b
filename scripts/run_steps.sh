#!/usr/bin/env bash
# How many training steps `make run` takes on this machine: the
# configuration's train_iters, or fewer where this machine is slower, so that
# the first run ends in about SECONDS of training on any CPU (a 2-core AVX2
# machine takes 3-4x longer a step than an AVX-512 + AMX one).
#   scripts/run_steps.sh LLMFORGE CONFIG DATASET_DIR SECONDS
# Times a few steps of CONFIG's own step (its model with the dataset's
# vocabulary, its micro-batch and block size: `llmforge bench --config`) and
# prints min(train_iters, 0.9 * SECONDS / step time), at least 200, on
# stdout; what it measured and chose goes to stderr. The 10% covers the
# evaluations and checkpoints the trainer adds to the steps.
set -euo pipefail
lf=${1:?usage: run_steps.sh LLMFORGE CONFIG DATASET_DIR SECONDS}
config=${2:?CONFIG missing}
data=${3:?DATASET_DIR missing}
seconds=${4:?SECONDS missing}
case $seconds in '' | *[!0-9]*) echo "run_steps: SECONDS must be a whole number, not '$seconds'" >&2; exit 2 ;; esac
vocab=$(sed -n 's/^[[:space:]]*"vocab_size":[[:space:]]*\([0-9][0-9]*\).*/\1/p' "$data/dataset.json" | head -1)
[ -n "$vocab" ] || { echo "run_steps: no vocab_size in $data/dataset.json" >&2; exit 1; }
iters=$(sed -n 's/^[[:space:]]*"train_iters":[[:space:]]*\([0-9][0-9]*\).*/\1/p' "$config" | head -1)
[ -n "$iters" ] || { echo "run_steps: no train_iters in $config" >&2; exit 1; }
json=$("$lf" bench --config "$config" --model.vocab_size="$vocab" --steps 10 --warmup 3 --json) ||
  { echo "run_steps: llmforge bench --config $config failed" >&2; exit 1; }
ms=$(printf '%s\n' "$json" | sed -n 's/.*"ms_per_step":\([0-9.eE+-]*\).*/\1/p')
[ -n "$ms" ] || { echo "run_steps: llmforge bench printed no ms_per_step: $json" >&2; exit 1; }
steps=$(awk -v s="$seconds" -v ms="$ms" -v max="$iters" 'BEGIN {
  n = int(0.9 * s * 1000 / ms); if (n > max) n = max; if (n < 200) n = 200; print n }')
awk -v ms="$ms" -v n="$steps" -v max="$iters" -v s="$seconds" 'BEGIN {
  printf "make run: %.1f ms a step on this machine (llmforge bench), so %d of the configuration'"'"'s %d steps", ms, n, max
  printf " (about %.1f minutes; budget %d s; ITERS=N chooses)\n", n * ms / 60000, s }' >&2
echo "$steps"
