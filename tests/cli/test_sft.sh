#!/usr/bin/env bash
# Fine-tuning through the CLI: `llmforge data arithmetic` (format, determinism
# in the seed, --exclude keeps a held-out set out of the training set,
# --unique), `llmforge prepare --mode sft` (summary per split, bad records
# named FILE:LINE, --skip-bad-records, --split none, usage errors), a 30-step
# train on the prepared set, and `llmforge data arithmetic-eval` printing an
# exact-match line.
#   bash test_sft.sh LLMFORGE SOURCE_DIR SHARED_DIR
set -u

LF=${1:?usage: test_sft.sh LLMFORGE SOURCE_DIR SHARED_DIR}
SRC=${2:?source dir}
SHARED=${3:?shared dir}
: "$SHARED"
CFG="$SRC/configs/arithmetic.json"
case "$LF" in /*) ;; *) LF="$PWD/$LF" ;; esac
case "$CFG" in /*) ;; *) CFG="$PWD/$CFG" ;; esac

passed=0
fail() {
    echo "FAIL: $*" >&2
    echo "$passed passed, 1 failed"
    exit 1
}
ok() { passed=$((passed + 1)); }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/lf_sft.XXXXXX") || fail "mktemp"
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || fail "cd $tmp"

# ------------------------------------------------------------ data arithmetic
"$LF" data arithmetic --n 200 --digits 2 --seed 2 --unique --out eval.jsonl >gen.log 2>&1 || fail "arithmetic: $(cat gen.log)"
[ "$(wc -l <eval.jsonl)" -eq 200 ] || fail "eval.jsonl has $(wc -l <eval.jsonl) lines, expected 200"
bad=$(grep -cvE '^\{"prompt": "[0-9]{1,2}\+[0-9]{1,2}=", "response": "[0-9]{1,3}"\}$' eval.jsonl)
[ "$bad" -eq 0 ] || fail "$bad lines of eval.jsonl are not {\"prompt\": \"A+B=\", \"response\": \"C\"}"
ok
# every answer is right
wrong=$(sed 's/.*"prompt": "\([0-9]*\)+\([0-9]*\)=", "response": "\([0-9]*\)".*/\1 \2 \3/' eval.jsonl | awk '$1 + $2 != $3' | wc -l)
[ "$wrong" -eq 0 ] || fail "$wrong wrong sums in eval.jsonl"
ok
# --unique: no prompt twice
dups=$(sed 's/.*"prompt": "\([^"]*\)".*/\1/' eval.jsonl | sort | uniq -d | wc -l)
[ "$dups" -eq 0 ] || fail "--unique wrote $dups repeated prompts"
ok
# determinism in the seed
"$LF" data arithmetic --n 200 --digits 2 --seed 2 --unique --out eval2.jsonl >/dev/null 2>&1 || fail "arithmetic again"
cmp -s eval.jsonl eval2.jsonl || fail "the same seed gave different files"
"$LF" data arithmetic --n 200 --digits 2 --seed 3 --unique --out eval3.jsonl >/dev/null 2>&1 || fail "arithmetic seed 3"
cmp -s eval.jsonl eval3.jsonl && fail "seeds 2 and 3 gave the same file"
ok
# --exclude: the training set holds no held-out problem
"$LF" data arithmetic --n 3000 --digits 2 --seed 1 --exclude eval.jsonl --out train.jsonl >gen.log 2>&1 ||
    fail "arithmetic --exclude: $(cat gen.log)"
[ "$(wc -l <train.jsonl)" -eq 3000 ] || fail "train.jsonl has $(wc -l <train.jsonl) lines"
sed 's/.*"prompt": "\([^"]*\)".*/\1/' eval.jsonl | sort -u >eval.prompts
sed 's/.*"prompt": "\([^"]*\)".*/\1/' train.jsonl | sort -u >train.prompts
common=$(comm -12 eval.prompts train.prompts | wc -l)
[ "$common" -eq 0 ] || fail "--exclude left $common held-out problems in the training set"
grep -q "candidates passed over" gen.log || fail "arithmetic output: $(cat gen.log)"
# without --exclude the same seed does overlap (so the check above means something)
"$LF" data arithmetic --n 3000 --digits 2 --seed 1 --out train_all.jsonl >/dev/null 2>&1 || fail "arithmetic"
sed 's/.*"prompt": "\([^"]*\)".*/\1/' train_all.jsonl | sort -u >all.prompts
[ "$(comm -12 eval.prompts all.prompts | wc -l)" -gt 0 ] || fail "expected overlap without --exclude"
ok
# ops and digits
"$LF" data arithmetic --n 50 --digits 3 --ops +,-,'*' --seed 5 --out ops.jsonl >/dev/null 2>&1 || fail "--ops"
grep -q -- '-' ops.jsonl && grep -q '[*]' ops.jsonl && grep -q '+' ops.jsonl || fail "--ops +,-,* did not use every op"
grep -q '"response": "-' ops.jsonl && fail "subtraction gave a negative result"
ok
# impossible and malformed requests
"$LF" data arithmetic --n 200 --digits 1 --unique --out x.jsonl >err.log 2>&1
[ $? -eq 1 ] || fail "--unique beyond the 100 one-digit sums should fail with status 1"
grep -q "only 100 of 200" err.log || fail "message: $(cat err.log)"
[ ! -e x.jsonl ] || fail "a failed run left x.jsonl"
"$LF" data arithmetic --n 10 --ops '/' --out x.jsonl >/dev/null 2>&1
[ $? -eq 2 ] || fail "--ops / should be a usage error"
"$LF" data arithmetic --out x.jsonl >/dev/null 2>&1
[ $? -eq 2 ] || fail "missing --n should be a usage error"
"$LF" data >/dev/null 2>&1
[ $? -eq 2 ] || fail "'data' alone should be a usage error"
"$LF" data nope >/dev/null 2>&1
[ $? -eq 2 ] || fail "'data nope' should be a usage error"
ok

# ------------------------------------------------------------ prepare --mode sft
"$LF" prepare --input train.jsonl --mode sft --tokenizer char --out data >prep.log 2>&1 || fail "prepare: $(cat prep.log)"
grep -q "prepared 3000 records from 1 file" prep.log || fail "prepare summary: $(cat prep.log)"
grep -qE '^  train +[0-9]+ records +[0-9]+ tokens \([0-9]+ targets\)' prep.log || fail "no train line: $(cat prep.log)"
grep -qE '^  val +[0-9]+ records' prep.log || fail "no val line: $(cat prep.log)"
grep -q "skipped 0 bad records" prep.log || fail "no skipped line: $(cat prep.log)"
for f in dataset.json vocab.json train_000.bin val_000.bin; do
    [ -s "data/$f" ] || fail "prepare did not write data/$f"
done
grep -q '"mode":[[:space:]]*"sft"' data/dataset.json || fail "dataset.json does not say sft"
ok
ntr=$(sed -n 's/^  train *\([0-9]*\) records.*/\1/p' prep.log)
nva=$(sed -n 's/^  val *\([0-9]*\) records.*/\1/p' prep.log)
[ $((ntr + nva)) -eq 3000 ] || fail "train $ntr + val $nva records != 3000"
[ "$nva" -gt 150 ] && [ "$nva" -lt 450 ] || fail "val holds $nva of 3000 records, expected about 10%"
ok
# --split none
"$LF" prepare --input train.jsonl --mode sft --tokenizer char --split none --out data_none >prep2.log 2>&1 ||
    fail "prepare --split none: $(cat prep2.log)"
grep -qE '^  train +3000 records' prep2.log || fail "--split none: $(cat prep2.log)"
[ ! -e data_none/val_000.bin ] || fail "--split none wrote a val shard"
ok
# bad records: FILE:LINE and the field, or skipped and counted
{ head -3 train.jsonl; echo '{"prompt": "1+1=", "answer": "2"}'; echo 'not json'; tail -2 train.jsonl; } >bad.jsonl
"$LF" prepare --input bad.jsonl --mode sft --tokenizer char --out data_bad >bad.log 2>&1
[ $? -eq 1 ] || fail "a bad record should fail prepare with status 1"
grep -q "bad.jsonl:4: field 'response' is missing" bad.log || fail "bad record message: $(cat bad.log)"
grep -q -- "--skip-bad-records" bad.log || fail "no hint: $(cat bad.log)"
"$LF" prepare --input bad.jsonl --mode sft --tokenizer char --split none --skip-bad-records --out data_bad >bad2.log 2>&1 ||
    fail "--skip-bad-records: $(cat bad2.log)"
grep -q "skipped 2 bad records; first: bad.jsonl:4: field 'response' is missing" bad2.log || fail "skip summary: $(cat bad2.log)"
grep -q "skipped record: bad.jsonl:5: not valid JSON" bad2.log || fail "skip warning: $(cat bad2.log)"
grep -qE '^  train +5 records' bad2.log || fail "after skipping: $(cat bad2.log)"
ok
# usage errors
"$LF" prepare --input train.jsonl --tokenizer char --split 0.9,x --out d >/dev/null 2>&1
[ $? -eq 2 ] || fail "--split 0.9,x should be a usage error"
"$LF" prepare --input train.jsonl --tokenizer char --mode nope --out d >/dev/null 2>&1
[ $? -eq 2 ] || fail "--mode nope should be a usage error"
"$LF" prepare --input train.jsonl --out d >/dev/null 2>&1
[ $? -eq 2 ] || fail "missing --tokenizer should be a usage error"
"$LF" prepare --char train.jsonl --input train.jsonl --out d >/dev/null 2>&1
[ $? -eq 2 ] || fail "--char with --input should be a usage error"
ok

# ------------------------------------------------------------ train 30 steps, evaluate
# the shipped configuration (records sampling, its schedule) on a 2 x 32 model and micro-batch 8:
# its own 4 x 128 at batch 64 made these 30 steps 14 s of the test, and nothing here asks how
# well the model does (the exact-match line's form is checked, not its value)
"$LF" train "$CFG" --data.dataset=data --out_dir=run --train_iters=30 --eval.interval=30 --eval.iters=2 \
    --model.n_layer=2 --model.n_head=2 --model.n_embd=32 --train_micro_batch_size_per_gpu=8 \
    --checkpoint.interval=30 --steps_per_print=10 --threads=2 >train.log 2>&1 || fail "train: $(cat train.log)"
grep -q "step 30/30" train.log || fail "no 'step 30/30': $(cat train.log)"
[ -d run/ckpt/latest ] || [ -L run/ckpt/latest ] || [ -f run/ckpt/latest ] || fail "no checkpoint: $(ls -R run)"
ok
"$LF" data arithmetic-eval --ckpt run --input eval.jsonl --limit 20 --show 2 --threads 2 >eval.log 2>&1 ||
    fail "arithmetic-eval: $(cat eval.log)"
grep -qE '^exact match: [0-9]+ / 20 = [0-9]+\.[0-9]{2}%' eval.log || fail "no exact-match line: $(cat eval.log)"
ok
"$LF" data arithmetic-eval --ckpt run --input missing.jsonl >err.log 2>&1
[ $? -eq 1 ] || fail "a missing --input should fail with status 1"
grep -q "missing.jsonl" err.log || fail "message: $(cat err.log)"
ok

echo "$passed passed, 0 failed"
