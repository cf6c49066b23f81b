#!/usr/bin/env bash
# The step-time cost of a checkpoint, synchronous against asynchronous
# (checkpoint.async, issue 17): the same run twice on a model whose save is a
# large share of a step (GPT-2 shape, 4 layers x 384 wide on the characters
# of Tiny Shakespeare: 7.1 M parameters, 85 MB of model + optimizer files
# per save), checkpointing every INTERVAL steps, then from log.jsonl
# (time/step_ms of each train record, and the checkpoint records' ms,
# snapshot_ms and wait_ms) the medians of: a step with a save (its compute
# plus what the save held the training thread: synchronous, the whole write
# with its hashes and fsyncs; async, the snapshot and any wait for the
# previous write), that blocking part alone, the step right after a save
# (async: it runs beside the writer, which takes a core and memory
# bandwidth), and the other steps; and each run's wall time. The final
# models of the two runs must be identical.
#   bench/ckpt_async.sh [STEPS] [INTERVAL] [THREADS]    (defaults 40 5 1)
# THREADS: the training threads (--threads); the writer is one more thread.
# LLMFORGE=path picks the binary (default: `make build`, build/llmforge);
# TMPDIR the filesystem the runs write to (the default /tmp: a real disk,
# whose fsyncs are part of a save's cost).
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-40}
INTERVAL=${2:-5}
THREADS=${3:-1}
if [ -z "${LLMFORGE:-}" ]; then
  make -s build >/dev/null
  LLMFORGE=build/llmforge
fi
case "$LLMFORGE" in /*) ;; *) LLMFORGE="$PWD/$LLMFORGE" ;; esac
SHARED=${SHARED:-../shared}
work=$(mktemp -d "${TMPDIR:-/tmp}/lf_ckpt_async.XXXXXX")
trap 'rm -rf "$work"' EXIT
export LLMFORGE_REGISTRY=$work/registry.db
"$LLMFORGE" prepare --char "$SHARED/data/tinyshakespeare.txt" --out "$work/ds" >/dev/null

keys=(--model.n_layer=4 --model.n_head=6 --model.n_embd=384 --model.block_size=64
      --train_micro_batch_size_per_gpu=8 --train_iters="$STEPS" --scheduler.warmup_iters=2
      --eval.interval=0 --eval.iters=1 --checkpoint.interval="$INTERVAL" --checkpoint.keep_last=2
      --steps_per_print=1000 --monitor.report=false --registry.enabled=false)

# From a log.jsonl: the medians (ms) of the steps with a save (the step's own time/step_ms plus
# the time the save held the training thread: the whole save when synchronous, the snapshot and
# any wait for the previous write when async), of the steps right after a save (async: they run
# beside the writer), of the other steps, and of the blocking part of the saves. Step 1
# (start-up) is left out. Prints: WITH N_WITH AFTER N_AFTER WITHOUT N_WITHOUT BLOCK
medians() {
  awk -v I="$INTERVAL" '
    function num(key,   r) {
      if (!match($0, "\"" key "\":[0-9.e+-]+")) return -1
      r = substr($0, RSTART + length(key) + 3, RLENGTH - length(key) - 3)
      return r + 0
    }
    /"type":"train"/ { ms[num("step")] = num("ms") }
    /"type":"checkpoint"/ {
      s = num("step"); sn = num("snapshot_ms")
      block[s] = sn >= 0 ? sn + num("wait_ms") : num("ms")
    }
    function med(a, n,   i, j, t) {
      if (n == 0) return 0
      for (i = 1; i < n; i++) for (j = i; j > 0 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
      return n % 2 ? a[int(n / 2)] : (a[n / 2 - 1] + a[n / 2]) / 2
    }
    END {
      for (s in ms) {
        s += 0
        if (s < 2) continue
        if (s in block) { w[nw++] = ms[s] + block[s]; b[nb++] = block[s] }
        else if ((s - 1) in block) a[na++] = ms[s]
        else o[no++] = ms[s]
      }
      printf "%.1f %d %.1f %d %.1f %d %.1f\n", med(w, nw), nw, med(a, na), na, med(o, no), no, med(b, nb)
    }' "$1"
}

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores; $STEPS steps, a save every $INTERVAL, --threads $THREADS"
declare -A R T
for mode in sync async; do
  async=false
  [ "$mode" = async ] && async=true
  t0=$(date +%s.%N)
  "$LLMFORGE" train --data.dataset="$work/ds" --out_dir="$work/$mode" "${keys[@]}" --checkpoint.async=$async \
    --threads "$THREADS" >"$work/$mode.out" 2>&1 || { tail -5 "$work/$mode.out"; exit 1; }
  T[$mode]=$(echo "$(date +%s.%N) - $t0" | bc)
  R[$mode]=$(medians "$work/$mode/log.jsonl")
done
cmp -s "$work/sync/ckpt/step_$(printf %08d "$STEPS")/model.safetensors" \
       "$work/async/ckpt/step_$(printf %08d "$STEPS")/model.safetensors" || { echo "the final models differ"; exit 1; }
bytes=$(du -cb "$work/sync/ckpt/step_$(printf %08d "$STEPS")"/*.safetensors | tail -1 | cut -f1)
echo "checkpoint: $((bytes / 1000000)) MB of safetensors per save; the final models of both runs are identical"
printf '| mode | step with a save (ms) | of which the save blocks (ms) | step after a save (ms) | other steps (ms) | steps (with / after / other) | run, start-up included (s) |\n'
printf '|---|---|---|---|---|---|---|\n'
for mode in sync async; do
  read -r w nw a na o no b <<<"${R[$mode]}"
  printf '| %s | %s | %s | %s | %s | %s / %s / %s | %.1f |\n' "$mode" "$w" "$b" "$a" "$o" "$nw" "$na" "$no" "${T[$mode]}"
done
