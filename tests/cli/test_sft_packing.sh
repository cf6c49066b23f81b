#!/usr/bin/env bash
# Packed SFT through the CLI (data.packing; docs/training.md "Packing"): a
# few steps of GPT-2 and Llama on `prepare --mode sft` data with packed and
# padded rows, the fenced backend included (no host access to backend
# memory from the positions' path); the log's train/real_tokens_per_sec
# (example tokens only) below tokens_per_sec with padding and a larger share
# of it packed; evaluation runs on packed rows; data.packing with
# data.sampling records and a dataset without end-of-text are refused naming
# the key.
#   bash test_sft_packing.sh LLMFORGE SOURCE_DIR SHARED_DIR
set -u

LF=${1:?usage: test_sft_packing.sh LLMFORGE SOURCE_DIR SHARED_DIR}
SRC=${2:?source dir}
case "$LF" in /*) ;; *) LF="$PWD/$LF" ;; esac
CFG="$SRC/configs/arithmetic.json"
case "$CFG" in /*) ;; *) CFG="$PWD/$CFG" ;; esac

passed=0
fail() {
    echo "FAIL: $*" >&2
    echo "$passed passed, 1 failed"
    exit 1
}
ok() { passed=$((passed + 1)); }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/lf_pack.XXXXXX") || fail "mktemp"
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || fail "cd $tmp"

"$LF" data arithmetic --n 600 --digits 3 --seed 1 --out train.jsonl >/dev/null 2>&1 || fail "data arithmetic"
"$LF" prepare --input train.jsonl --mode sft --tokenizer char --out data >prep.log 2>&1 || fail "prepare: $(cat prep.log)"

# share of example tokens in a run's last train record
real_share() {
    python3 - "$1" <<'PY'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
t = [x for x in r if x["type"] == "train"][-1]
print("%.4f" % (t["train/real_tokens_per_sec"] / t["tokens_per_sec"]))
PY
}

run() { # NAME EXTRA...
    local name=$1
    shift
    "$LF" train "$CFG" --threads 2 --data.dataset=data --out_dir="run_$name" --train_iters=4 --scheduler.warmup_iters=1 \
        --scheduler.decay_iters=4 --checkpoint.interval=0 --eval.interval=4 --eval.iters=2 \
        --train_micro_batch_size_per_gpu=4 --data.sampling=random "$@" >"$name.log" 2>&1 ||
        fail "train $name: $(tail -5 "$name.log")"
    grep -q '"type":"train"' "run_$name/log.jsonl" || fail "$name: no train records"
    grep -q '"val_loss":[0-9]' "run_$name/log.jsonl" || fail "$name: no evaluation"
}

run packed --data.packing=packed
run padded --data.packing=padded
sp=$(real_share run_packed/log.jsonl)
sd=$(real_share run_padded/log.jsonl)
python3 -c "import sys; p, d = float('$sp'), float('$sd'); sys.exit(0 if 0 < d < p <= 1 and d < 0.9 else 1)" ||
    fail "example-token share packed $sp, padded $sd (expected padded < packed <= 1, padded < 0.9)"
ok
run llama --data.packing=packed --model.arch=llama --model.n_kv_head=2 --model.bias=false
LLMFORGE_BACKEND=cpu-fenced run fenced --data.packing=packed
LLMFORGE_BACKEND=cpu-fenced run fenced_llama --data.packing=packed --model.arch=llama --model.n_kv_head=2 \
    --model.bias=false
ok

# refusals
"$LF" train "$CFG" --threads 2 --data.dataset=data --out_dir=run_bad --train_iters=2 --data.packing=packed \
    --data.sampling=records >bad.log 2>&1 && fail "data.packing with data.sampling records was accepted"
grep -q "data.packing" bad.log || fail "refusal does not name data.packing: $(cat bad.log)"
"$LF" train "$CFG" --threads 2 --data.dataset=data --out_dir=run_bad2 --train_iters=2 --data.packing=sideways \
    >bad2.log 2>&1 && fail "data.packing sideways was accepted"
grep -q "data.packing" bad2.log || fail "bad value message: $(cat bad2.log)"
ok
echo "$passed passed, 0 failed"
