#!/usr/bin/env bash
# Packed against padded SFT batches (data.packing; docs/training.md
# "Packing"): the share of each batch that is padding, and the throughput of
# real (example, non-padding) tokens, on a synthetic prompt/response corpus
# with a realistic length spread.
#   bench/sft_packing.sh [ROUNDS] [STEPS]
# ROUNDS (default 3) rounds; in each, `llmforge train` runs STEPS (default
# 20) steps with data.packing padded (one example per row, padded to
# model.block_size: what users compare against) and then packed (several
# whole examples per row, first-fit; positions restart at each example and
# attention stays inside it). Per run: the median over the steps after the
# first 3 of tokens_per_sec (every position of the batch) and
# train/real_tokens_per_sec (example tokens only) from its log.jsonl; the
# script prints each round and the medians over rounds, the padding share of
# each mode and the real-token speed-up packed/padded.
#
# Corpus (made here, seed fixed): 4000 pairs, prompt and response lengths
# (characters) lognormal, medians 60 and 160, sigma 0.8 and 0.9 (a long
# right tail, as instruction data has: a few examples exceed the block and
# are truncated), words from a fixed list, `prepare --mode sft --tokenizer
# char`. Model: GPT-2 (ARCH=llama: Llama with 2 key/value heads) of 4 layers,
# 4 heads, 256 channels, model.block_size 512, micro-batch 8, 2 threads,
# fp32 cpu backend, dropout 0. Both modes run the same shapes (B x T per
# step), so tokens/s agree and the gain is the padding not computed on.
# BUILD (default build) is the CMake build directory `make build` fills.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
STEPS=${2:-20}
BUILD=${BUILD:-build}
ARCH=${ARCH:-gpt2}
make -s build BUILD="$BUILD" >/dev/null
OUT=$(mktemp -d "${TMPDIR:-/tmp}/lf_sft_packing.XXXXXX")
trap 'rm -rf "$OUT"' EXIT
echo "machine: $(nproc) CPUs ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)), load average $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$OUT/sft.jsonl" <<'PY'
import json, math, random, sys
rng = random.Random(1234)
words = ("the of and to in is it that was for on are as with his they at be this have from or one had by word "
         "but not what all were we when your can said there use an each which she do how their if will up other "
         "about out many then them these so some her would make like him into time has look two more write go see").split()
def text(n):
    s = ""
    while len(s) < n:
        s += rng.choice(words) + " "
    return s[:n].strip() or "a"
with open(sys.argv[1], "w") as f:
    for _ in range(4000):
        lp = max(1, int(rng.lognormvariate(math.log(60), 0.8)))
        lr = max(1, int(rng.lognormvariate(math.log(160), 0.9)))
        f.write(json.dumps({"prompt": text(lp) + " => ", "response": text(lr)}) + "\n")
PY
"$BUILD"/llmforge prepare --input "$OUT/sft.jsonl" --mode sft --tokenizer char --split none --out "$OUT/data" |
    grep -E "^  train"
model=(--model.arch="$ARCH" --model.n_layer=4 --model.n_head=4 --model.n_embd=256 --model.block_size=512)
[ "$ARCH" = llama ] && model+=(--model.n_kv_head=2 --model.bias=false)
results=()
for r in $(seq "$ROUNDS"); do
  for mode in padded packed; do
    "$BUILD"/llmforge train configs/shakespeare_char_cpu.json --threads 2 --data.dataset="$OUT/data" \
      --data.packing="$mode" "${model[@]}" --train_micro_batch_size_per_gpu=8 --train_iters="$STEPS" \
      --scheduler.warmup_iters=2 --scheduler.decay_iters="$STEPS" --checkpoint.interval=0 --eval.interval=0 \
      --steps_per_print=1000 --out_dir="$OUT/run_${mode}_$r" >"$OUT/run_${mode}_$r.txt"
    l=$(python3 - "$OUT/run_${mode}_$r/log.jsonl" <<'PY'
import json, statistics, sys
rs = [json.loads(l) for l in open(sys.argv[1])]
tr = [x for x in rs if x["type"] == "train" and x["step"] > 3]
print(json.dumps({"tokens_per_sec": statistics.median(x["tokens_per_sec"] for x in tr),
                  "real_tokens_per_sec": statistics.median(x["train/real_tokens_per_sec"] for x in tr),
                  "real_share": statistics.median(x["train/real_tokens_per_sec"] / x["tokens_per_sec"] for x in tr)}))
PY
)
    echo "round $r $mode: $l"
    results+=("$mode $l")
  done
done
python3 - "${results[@]}" <<'PY'
import json, statistics, sys
runs = {"padded": [], "packed": []}
for a in sys.argv[1:]:
    mode, js = a.split(" ", 1)
    runs[mode].append(json.loads(js))
med = {m: {k: statistics.median(r[k] for r in v) for k in v[0]} for m, v in runs.items()}
for m in ("padded", "packed"):
    x = med[m]
    print("%s: %.0f tokens/s, %.0f real tokens/s, padding %.1f%% of the batch" %
          (m, x["tokens_per_sec"], x["real_tokens_per_sec"], 100 * (1 - x["real_share"])))
print("real tokens/s packed / padded: %.2fx (padding %.1f%% -> %.1f%%)" %
      (med["packed"]["real_tokens_per_sec"] / med["padded"]["real_tokens_per_sec"],
       100 * (1 - med["padded"]["real_share"]), 100 * (1 - med["packed"]["real_share"])))
PY
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
