#!/usr/bin/env bash
# Memory and precision through the CLI: `llmforge plan` (the table, exit 0
# when it fits, 1 with advice when memory.limit_bytes is too small, 2 on bad
# arguments); `llmforge train` over the limit stops before training with the
# same advice and writes no checkpoint; an fp16 run logs train/loss_scale and
# its checkpoint carries the scaler; fp16 with bf16 is refused.
#   bash test_memory.sh LLMFORGE SOURCE_DIR SHARED_DIR
set -u

LF=${1:?usage: test_memory.sh LLMFORGE SOURCE_DIR SHARED_DIR}
SRC=${2:?source dir}
SHARED=${3:?shared dir}
: "$SRC"
case "$LF" in /*) ;; *) LF="$PWD/$LF" ;; esac
case "$SHARED" in /*) ;; *) SHARED="$PWD/$SHARED" ;; esac

passed=0
fail() {
    echo "FAIL: $*" >&2
    echo "$passed passed, 1 failed"
    exit 1
}
ok() { passed=$((passed + 1)); }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/lf_memory.XXXXXX") || fail "mktemp"
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || fail "cd $tmp"

head -c 40000 "$SHARED/data/tinyshakespeare.txt" >small.txt
"$LF" prepare --char small.txt --out data >prep.log 2>&1 || fail "prepare: $(cat prep.log)"
ARGS=(--data.dataset=data --model.n_layer=2 --model.n_head=2 --model.n_embd=32 --model.block_size=32
      --train_micro_batch_size_per_gpu=8 --eval.interval=0 --eval.iters=1 --steps_per_print=1 --threads=2)

# ------------------------------------------------------------ plan
"$LF" plan "${ARGS[@]}" >plan.txt 2>plan.err || fail "plan: $(cat plan.err)"
for w in "parameters (fp32 master weights)" "AdamW moments" "activations (recompute none)" total "(fits)" \
         selective full; do
    grep -qF "$w" plan.txt || fail "plan output lacks '$w': $(cat plan.txt)"
done
ok
total=$(sed -n 's/^  total  *\([0-9.]*\) \(.iB\|KiB\|B\)$/\1 \2/p' plan.txt)
[ -n "$total" ] || fail "no total line: $(cat plan.txt)"
ok
"$LF" plan "${ARGS[@]}" --memory.limit_bytes=300000 >plan2.txt 2>&1
[ $? -eq 1 ] || fail "plan over the limit did not exit 1: $(cat plan2.txt)"
grep -q "DOES NOT FIT" plan2.txt || fail "no DOES NOT FIT: $(cat plan2.txt)"
grep -q "memory.limit_bytes" plan2.txt || fail "the advice does not name memory.limit_bytes"
ok
"$LF" plan "${ARGS[@]}" --threads x >bad.txt 2>&1
[ $? -eq 2 ] || fail "plan --threads x did not exit 2"
"$LF" plan "${ARGS[@]}" --model.n_layer=0 >bad2.txt 2>&1
[ $? -eq 2 ] || fail "plan with a bad config did not exit 2"
grep -q "model.n_layer" bad2.txt || fail "the config error does not name the key: $(cat bad2.txt)"
ok

# per rank for another world size, as JSON: the batch identity and the all-reduce bucket follow W
j=$("$LF" plan --model.vocab_size=65 --data.dataset=none --model.n_layer=2 --model.n_head=2 --model.n_embd=32 \
      --train_batch_size=16 --gradient_accumulation_steps=1 --world-size 4 --json 2>pj.err) || fail "plan --json: $(cat pj.err)"
[ "$(printf '%s\n' "$j" | wc -l)" -eq 1 ] || fail "plan --json printed more than one line"
for w in '"world_size":4' '"micro_batch":4' '"name":"communication scratch' '"fits":true' '"total_bytes":'; do
    case "$j" in *"$w"*) ;; *) fail "plan --json lacks $w: $j" ;; esac
done
ok
"$LF" plan "${ARGS[@]}" --world-size 0 >bad3.txt 2>&1
[ $? -eq 2 ] || fail "plan --world-size 0 did not exit 2"
"$LF" plan --model.vocab_size=65 --data.dataset=none --train_batch_size=10 --train_micro_batch_size_per_gpu=4 \
    --world-size 2 >bad4.txt 2>&1
[ $? -eq 2 ] || fail "plan with inconsistent batch arithmetic did not exit 2"
grep -q "world size 2" bad4.txt || fail "the batch error does not show the world size: $(cat bad4.txt)"
ok

# ------------------------------------------------------------ train over the limit
"$LF" train "${ARGS[@]}" --memory.limit_bytes=300000 --out_dir=oom --train_iters=5 >oom.log 2>&1 &&
    fail "train over memory.limit_bytes succeeded"
for w in "memory.limit_bytes" "largest" "train_micro_batch_size_per_gpu" "activation_checkpointing.policy"; do
    grep -q "$w" oom.log || fail "the out-of-memory message lacks '$w': $(cat oom.log)"
done
[ ! -d oom/ckpt ] || fail "a run that did not fit left checkpoints"
grep -q '"type":"train"' oom/log.jsonl 2>/dev/null && fail "a run that did not fit trained"
ok

# ------------------------------------------------------------ fp16
"$LF" train "${ARGS[@]}" --fp16.enabled=true --fp16.initial_scale_power=30 --fp16.hysteresis=1 --out_dir=fp16 \
    --train_iters=20 --checkpoint.interval=20 >fp16.log 2>&1 || fail "fp16 train: $(cat fp16.log)"
grep -q '"train/loss_scale"' fp16/log.jsonl || fail "fp16 log has no train/loss_scale"
ok
grep -q '"reason":"fp16_overflow"' fp16/log.jsonl || fail "2^30 did not overflow fp16 once"
ok
grep -q '"loss_scaler"' fp16/ckpt/step_00000020/trainer_state.json || fail "the checkpoint has no loss_scaler"
ok
"$LF" train "${ARGS[@]}" --fp16.enabled=true --bf16.enabled=true --out_dir=both --train_iters=2 >both.log 2>&1 &&
    fail "fp16 with bf16 accepted"
grep -q "choose one" both.log || fail "fp16+bf16 message: $(cat both.log)"
ok

echo "$passed passed, 0 failed"
