#!/usr/bin/env bash
# DPO through the CLI (docs/training.md "DPO"): `llmforge prepare --mode dpo`
# on JSON Lines and Parquet (field names, the summary, dataset.json's mode,
# a chat template), bad rows refused naming FILE:LINE (Parquet: the row) and
# the field, --skip-bad-records; `llmforge train` with train.objective dpo on
# a trivially separable set (chosen "yes", rejected "no"): step 1's loss is
# log 2 (the policy is the reference), the loss falls below 0.3, the train
# and eval records carry rewards/* and logps/*, accuracies reach 1; a resumed
# run continues bit for bit; cpu-fenced gives the same losses; two ranks of B/2 rows equal one process of B;
# mismatched objective and data are refused.
#   bash test_dpo.sh LLMFORGE SOURCE_DIR SHARED_DIR
set -u

LF=${1:?usage: test_dpo.sh LLMFORGE SOURCE_DIR SHARED_DIR}
SRC=${2:?source dir}
case "$LF" in /*) ;; *) LF="$PWD/$LF" ;; esac
case "$SRC" in /*) ;; *) SRC="$PWD/$SRC" ;; esac
FX="$SRC/tests/fixtures/dpo"

passed=0
fail() {
    echo "FAIL: $*" >&2
    echo "$passed passed, 1 failed"
    exit 1
}
ok() { passed=$((passed + 1)); }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/lf_dpo.XXXXXX") || fail "mktemp"
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || fail "cd $tmp"

# ------------------------------------------------------------ prepare
for i in $(seq 0 47); do
    printf '{"prompt": "%d+%d=", "chosen": "yes", "rejected": "no"}\n' $((i % 7)) $((i / 7))
done >pairs.jsonl
"$LF" prepare --input pairs.jsonl --mode dpo --tokenizer char --split 0.8,0.2 --out data >prep.log 2>&1 ||
    fail "prepare: $(cat prep.log)"
grep -q "(dpo, tokenizer char" prep.log || fail "summary: $(cat prep.log)"
grep -q '"mode":[[:space:]]*"dpo"' data/dataset.json || fail "dataset.json has no mode dpo"
ntr=$(sed -n 's/^  train *\([0-9]*\) records.*/\1/p' prep.log)
nva=$(sed -n 's/^  val *\([0-9]*\) records.*/\1/p' prep.log)
[ $((ntr + nva)) -eq 48 ] && [ "$nva" -gt 0 ] || fail "records: $(cat prep.log)"
ok
# Parquet with named columns (an extra column is ignored)
"$LF" prepare --input "$FX/pairs.parquet" --mode dpo --prompt-field question --chosen-field good \
    --rejected-field bad --tokenizer char --split none --out pq >pq.log 2>&1 || fail "parquet: $(cat pq.log)"
grep -qE '^  train +12 records' pq.log || fail "parquet summary: $(cat pq.log)"
ok
# a chat template renders the prompt as the user's turn, each response as the assistant's
"$LF" prepare --input pairs.jsonl --mode dpo --chat-template chatml --tokenizer char --split none --out tpl \
    >tpl.log 2>&1 || fail "chat template: $(cat tpl.log)"
[ -f tpl/chat_template.json ] || fail "no tpl/chat_template.json"
ok

# ------------------------------------------------------------ bad rows
{
    echo '{"prompt": "1+1=", "chosen": "yes", "rejected": "no"}'
    echo '{"prompt": "1+2=", "rejected": "no"}'
    echo '{"prompt": "1+3=", "chosen": "yes", "rejected": 7}'
    echo '{"chosen": "yes", "rejected": "no"}'
    echo '{"prompt": "", "chosen": "yes", "rejected": "no"}'
    echo '{"prompt": "1+4=", "chosen": "yes", "rejected": "no"}'
} >bad.jsonl
"$LF" prepare --input bad.jsonl --mode dpo --tokenizer char --out bad >bad.log 2>&1
[ $? -eq 1 ] || fail "a row without 'chosen' should fail with status 1: $(cat bad.log)"
grep -q "bad.jsonl:2: field 'chosen' is missing" bad.log || fail "message: $(cat bad.log)"
[ ! -e bad/dataset.json ] || fail "a failed prepare left dataset.json"
ok
"$LF" prepare --input bad.jsonl --mode dpo --tokenizer char --skip-bad-records --split none --out bad >bad.log 2>&1 ||
    fail "--skip-bad-records: $(cat bad.log)"
grep -q "bad.jsonl:3: field 'rejected' is a number, expected a string" bad.log || fail "non-string: $(cat bad.log)"
grep -q "bad.jsonl:4: field 'prompt' is missing" bad.log || fail "no prompt: $(cat bad.log)"
grep -q "bad.jsonl:5: field 'prompt' is empty" bad.log || fail "empty prompt: $(cat bad.log)"
grep -qE '^  train +2 records' bad.log && grep -q "skipped 4 bad records" bad.log || fail "counts: $(cat bad.log)"
ok
"$LF" prepare --input "$FX/bad.parquet" --mode dpo --tokenizer char --out badpq >bad.log 2>&1
[ $? -eq 1 ] || fail "a null rejected should fail"
grep -q "bad.parquet:3: row 3 (row group 0): column 'rejected' is null" bad.log || fail "parquet: $(cat bad.log)"
ok
printf 'prompt,chosen,rejected\na,b,c\n' >x.csv
"$LF" prepare --input x.csv --mode dpo --tokenizer char --out c >bad.log 2>&1
[ $? -eq 1 ] && grep -q "JSON Lines, a JSON array or Parquet" bad.log || fail "csv: $(cat bad.log)"
"$LF" prepare --input pairs.jsonl --mode dpo --response-field x --tokenizer char --out c >bad.log 2>&1
[ $? -eq 2 ] && grep -q "chosen-field" bad.log || fail "--response-field with dpo: $(cat bad.log)"
ok

# ------------------------------------------------------------ train
cat >cfg.json <<'JSON'
{"model": {"arch": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 12, "dropout": 0.0},
 "data": {"dataset": "data"}, "train": {"objective": "dpo"}, "dpo": {"beta": 0.5},
 "train_micro_batch_size_per_gpu": 8, "train_iters": 30,
 "optimizer": {"params": {"lr": 3e-3, "weight_decay": 0.0}}, "scheduler": {"type": "constant", "warmup_iters": 0},
 "eval": {"interval": 15, "iters": 2}, "checkpoint": {"interval": 15}, "steps_per_print": 5, "out_dir": "run"}
JSON
"$LF" train cfg.json >train.log 2>&1 || fail "train: $(tail -5 train.log)"
[ -s run/dpo_ref_logps.bin ] || fail "no run/dpo_ref_logps.bin"
loss_at() { grep "\"type\":\"train\",\"step\":$2," "$1" | sed 's/.*"loss":\([^,]*\),.*/\1/'; }
l1=$(loss_at run/log.jsonl 1)
l30=$(loss_at run/log.jsonl 30)
awk -v l="$l1" 'BEGIN { exit !(l - log(2) < 1e-6 && log(2) - l < 1e-6) }' || fail "step 1 loss $l1 is not log 2"
awk -v l="$l30" 'BEGIN { exit !(l < 0.3) }' || fail "step 30 loss $l30 is not below 0.3 (step 1: $l1)"
ok
for k in rewards/chosen rewards/rejected rewards/accuracies rewards/margins logps/chosen logps/rejected; do
    grep '"type":"train","step":30,' run/log.jsonl | grep -q "\"train/$k\":" || fail "no train/$k in step 30"
    grep '"type":"eval","step":30,' run/log.jsonl | grep -q "\"eval/$k\":" || fail "no eval/$k at step 30"
done
grep '"type":"train","step":30,' run/log.jsonl | grep -q '"train/rewards/accuracies":1[,}]' ||
    fail "accuracies at step 30: $(grep '"type":"train","step":30,' run/log.jsonl)"
ok
# resume: 15 steps, then on to 30, equal to the straight run
sed 's/"out_dir": "run"/"out_dir": "run2"/' cfg.json >cfg2.json
"$LF" train cfg2.json --train_iters=30 --train.stop_at=15 >r1.log 2>&1 || fail "first half: $(tail -3 r1.log)"
"$LF" train cfg2.json --resume auto >r2.log 2>&1 || fail "resume: $(tail -3 r2.log)"
[ "$(loss_at run2/log.jsonl 30)" = "$l30" ] || fail "resumed step 30 loss $(loss_at run2/log.jsonl 30) != $l30"
ok
# on cpu-fenced (a host access to backend memory faults): the same numbers
LLMFORGE_BACKEND=cpu-fenced "$LF" train cfg.json --out_dir=fenced --train_iters=10 --eval.interval=10 \
    >fen.log 2>&1 || fail "cpu-fenced: $(tail -3 fen.log)"
# (its matrix products sum in another order: fp32 rounding over 10 steps, well within 1e-4 relative)
awk -v a="$(loss_at fenced/log.jsonl 10)" -v b="$(loss_at run/log.jsonl 10)" \
    'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-4 * b) }' ||
    fail "cpu-fenced step 10 loss $(loss_at fenced/log.jsonl 10), cpu $(loss_at run/log.jsonl 10)"
ok
# two ranks of 4 rows = one process of 8: the same pairs, the loss a mean over the global batch
timeout 120 "$LF" launch --standalone --nproc-per-node 2 -- train cfg.json --out_dir=np2 \
    --train_micro_batch_size_per_gpu=4 >np2.log 2>&1 || fail "2 ranks: $(tail -3 np2.log)"
l30b=$(loss_at np2/log.jsonl 30)
awk -v a="$l30" -v b="$l30b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-5 * a) }' ||
    fail "2 ranks: step 30 loss $l30b, one process $l30"
ok
# the reference file belongs to its data: a resume on other pairs is refused
head -n 40 pairs.jsonl >fewer.jsonl
"$LF" prepare --input fewer.jsonl --mode dpo --tokenizer char:data/vocab.json --split 0.8,0.2 --out fewer \
    >/dev/null 2>&1 || fail "prepare fewer"
"$LF" train cfg2.json --resume auto --train_iters=40 --data.dataset=fewer >r3.log 2>&1
[ $? -ne 0 ] && grep -q "dpo_ref_logps.bin' holds reference log-probs of $ntr train and $nva val pairs" r3.log ||
    fail "resume on other data: $(tail -3 r3.log)"
ok
rm run2/dpo_ref_logps.bin
"$LF" train cfg2.json --resume auto --train_iters=40 >r3.log 2>&1
[ $? -ne 0 ] && grep -q "dpo_ref_logps.bin" r3.log || fail "resume without the reference file: $(tail -3 r3.log)"
ok
# objective and data must agree
"$LF" train cfg.json --train.objective=lm --out_dir=lm >m.log 2>&1
[ $? -ne 0 ] && grep -q "train it with train.objective dpo" m.log || fail "lm on dpo data: $(tail -3 m.log)"
printf '{"prompt": "a", "response": "b"}\n%.0s' $(seq 1 40) >sft.jsonl
"$LF" prepare --input sft.jsonl --mode sft --tokenizer char --split none --out sft >/dev/null 2>&1 || fail "sft prepare"
"$LF" train cfg.json --data.dataset=sft --out_dir=s >m.log 2>&1
[ $? -ne 0 ] && grep -q "prepared in mode 'sft', not 'dpo'" m.log || fail "dpo on sft data: $(tail -3 m.log)"
"$LF" train cfg.json --train_micro_batch_size_per_gpu=7 --out_dir=o >m.log 2>&1
[ $? -ne 0 ] && grep -q "is odd" m.log || fail "odd micro-batch: $(tail -3 m.log)"
ok
# the sampling key does not apply; any block size fits padded rows
"$LF" train cfg.json --data.sampling=records --out_dir=o >m.log 2>&1
[ $? -ne 0 ] && grep -q "key 'data.sampling'.*does not apply to train.objective dpo" m.log ||
    fail "data.sampling with dpo: $(tail -3 m.log)"
"$LF" train cfg.json --model.block_size=400 --train_iters=2 --eval.interval=2 --out_dir=big >m.log 2>&1 ||
    fail "a block larger than the splits: $(tail -3 m.log)"
"$LF" train cfg.json --model.block_size=4 --train_iters=2 --eval.interval=2 --out_dir=small >m.log 2>&1 ||
    fail "a small block: $(tail -3 m.log)"
grep -q "dpo: [0-9]* of the $((2 * ntr)) train rows are longer than model.block_size + 1 = 5 tokens" m.log ||
    fail "no warning about cut rows: $(grep dpo m.log)"
ok
echo "$passed passed"
