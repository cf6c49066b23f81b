#!/usr/bin/env bash
# bf16 against fp32 on nanoGPT's shakespeare_char CPU run: the same config
# (configs/shakespeare_char_cpu.json, 2 threads, same seed and data) trained
# ITERS steps with bf16.enabled false and true; prints each run's final
# validation loss and median ms/iteration, and fails (exit 1) when the bf16
# validation loss is more than 2 % from fp32's.
#   bench/bf16_shakespeare.sh [DATA.txt] [ITERS]
# DATA defaults to ../shared/data/tinyshakespeare.txt, ITERS to 200 (the
# learning-rate schedule is stretched to ITERS). BUILD (default build) is the
# CMake build directory `make build` fills.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${1:-../shared/data/tinyshakespeare.txt}
ITERS=${2:-200}
BUILD=${BUILD:-build}
OUT=out/bench/bf16_shakespeare
make -s build BUILD="$BUILD" >/dev/null
rm -rf "$OUT"
mkdir -p "$OUT"
"$BUILD"/llmforge prepare --char "$DATA" --out "$OUT/data" >/dev/null
for bf in false true; do
  echo "== bf16.enabled=$bf ($ITERS iterations)"
  "$BUILD"/llmforge train configs/shakespeare_char_cpu.json --threads 2 --bf16.enabled=$bf \
    --data.dataset="$OUT/data" --out_dir="$OUT/bf16_$bf" --train_iters="$ITERS" \
    --scheduler.decay_iters="$ITERS" --eval.interval="$ITERS" --checkpoint.interval=0 \
    --steps_per_print="$ITERS" | grep -E "^(bf16 matmul|threads):|val loss"
done
/usr/bin/python3 - "$OUT/bf16_false/log.jsonl" "$OUT/bf16_true/log.jsonl" <<'PY'
import json, statistics, sys
def summary(path):
    ms, val = [], None
    for line in open(path):
        r = json.loads(line)
        if r["type"] == "train" and r["step"] > 10:
            ms.append(r["ms"])
        elif r["type"] == "eval":
            val = r["val_loss"]
    return statistics.median(ms), val
(m32, v32), (m16, v16) = summary(sys.argv[1]), summary(sys.argv[2])
rel = abs(v16 - v32) / v32
print("\n%-6s %14s %15s" % ("", "ms/iter (med)", "final val loss"))
print("%-6s %14.2f %15.4f" % ("fp32", m32, v32))
print("%-6s %14.2f %15.4f" % ("bf16", m16, v16))
print("val loss bf16 vs fp32: %+.3f %% (limit 2 %%); speed-up %.2fx" % (100 * (v16 - v32) / v32, m32 / m16))
sys.exit(0 if rel <= 0.02 else 1)
PY
