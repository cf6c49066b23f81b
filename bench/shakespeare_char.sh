#!/usr/bin/env bash
# nanoGPT's shakespeare_char CPU experiment, llmforge beside PyTorch on the
# same machine in the same run.
#   bench/shakespeare_char.sh [DATA.txt] [ITERS]
# DATA defaults to ../shared/data/tinyshakespeare.txt, ITERS to 2000.
# llmforge: configs/shakespeare_char_cpu.json, 2 threads.
# PyTorch: bench/torch_train_char.py (the reference GPT of tools/reference with
# nanoGPT's loop and config), 2 threads, OPENBLAS_NUM_THREADS=1 (its fastest
# setting here), reading the very shards llmforge prepared.
# Prints median ms/iter (eval iterations excluded) and final val loss of each,
# and the ratio. Needs /usr/bin/python3 with Debian's python3-torch.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${1:-../shared/data/tinyshakespeare.txt}
ITERS=${2:-2000}
OUT=out/bench/shakespeare_char
make -s build >/dev/null
rm -rf "$OUT"
mkdir -p "$OUT"
build/llmforge prepare --char "$DATA" --out "$OUT/data"

echo "== llmforge ($ITERS iterations)"
build/llmforge train configs/shakespeare_char_cpu.json --threads 2 \
  --data.dataset="$OUT/data" --out_dir="$OUT/llmforge" --train_iters="$ITERS" \
  --scheduler.decay_iters="$ITERS" --checkpoint.interval=0 --steps_per_print=250 | tail -n 3
lf_json=$(/usr/bin/python3 - "$OUT/llmforge/log.jsonl" <<'PY'
import json, statistics, sys
steps, val = [], None
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["type"] == "train" and r["step"] > 10:
        steps.append(r["ms"])
    elif r["type"] == "eval":
        val = r["val_loss"]
print(json.dumps({"impl": "llmforge", "median_ms_per_iter": statistics.median(steps), "final_val_loss": val}))
PY
)
echo "$lf_json"

echo "== PyTorch ($ITERS iterations)"
pt_json=$(OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/torch_train_char.py "$OUT/data" --iters "$ITERS" \
  --threads 2 --log-interval 250 | tail -n 1)
echo "$pt_json"

/usr/bin/python3 - "$lf_json" "$pt_json" <<'PY'
import json, sys
lf, pt = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print("\n%-10s %14s %15s" % ("", "ms/iter (med)", "final val loss"))
print("%-10s %14.2f %15.4f" % ("llmforge", lf["median_ms_per_iter"], lf["final_val_loss"]))
print("%-10s %14.2f %15.4f" % ("pytorch", pt["median_ms_per_iter"], pt["final_val_loss"]))
print("ratio llmforge/pytorch ms/iter: %.3f  (speed-up %.2fx)" % (
    lf["median_ms_per_iter"] / pt["median_ms_per_iter"], pt["median_ms_per_iter"] / lf["median_ms_per_iter"]))
PY
