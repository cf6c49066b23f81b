#!/usr/bin/env bash
# bf16 through the CLI: `train` with --bf16.enabled=true names its kernel,
# records bf16.enabled in config.resolved.json, and lands within 2 % of the
# fp32 run's validation loss on the same data, seed and steps (a short run
# of a small model; bench/bf16_shakespeare.sh is the 200-step measurement);
# `bench --bf16 --json` reports bf16 and its kernel; the bf16 key rejects
# a non-boolean with the key's name.
#   bash test_bf16.sh LLMFORGE SOURCE_DIR SHARED_DIR
set -u

LF=${1:?usage: test_bf16.sh LLMFORGE SOURCE_DIR SHARED_DIR}
SRC=${2:?source dir}
SHARED=${3:?shared dir}
CFG="$SRC/configs/shakespeare_char_cpu.json"
case "$LF" in /*) ;; *) LF="$PWD/$LF" ;; esac
case "$CFG" in /*) ;; *) CFG="$PWD/$CFG" ;; esac
case "$SHARED" in /*) ;; *) SHARED="$PWD/$SHARED" ;; esac

. "$(dirname "$0")/cli_lib.sh"

cli_tmpdir bf16

corpus="$SHARED/data/tinyshakespeare.txt"
if [ -f "$corpus" ]; then
    head -c 200000 "$corpus" >corpus.txt
else
    for i in $(seq 1 3000); do
        echo "ROMEO: line $i, what light through yonder window breaks? It is the east."
    done >corpus.txt
fi
"$LF" prepare --char corpus.txt --out data >prepare.log 2>&1 || fail "prepare: $(cat prepare.log)"

ARGS=(--data.dataset=data --model.n_layer=2 --model.n_head=4 --model.n_embd=64 --model.block_size=32
      --train_micro_batch_size_per_gpu=8 --train_iters=60 --scheduler.warmup_iters=10
      --scheduler.decay_iters=60 --eval.interval=60 --eval.iters=10 --checkpoint.interval=0
      --steps_per_print=60)
"$LF" train "$CFG" "${ARGS[@]}" --out_dir=fp32 >fp32.log 2>&1 || fail "fp32 train: $(cat fp32.log)"
"$LF" train "$CFG" "${ARGS[@]}" --out_dir=bf16 --bf16.enabled=true >bf16.log 2>&1 ||
    fail "bf16 train: $(cat bf16.log)"
ok
grep -qE '^bf16 matmul: (oneDNN |fp32 products on bf16-stored activations \()' bf16.log || fail "bf16 run does not name its kernel: $(cat bf16.log)"
grep -q '^bf16:' fp32.log && fail "fp32 run prints a bf16 line"
ok
grep -q '"bf16"' bf16/config.resolved.json || fail "config.resolved.json lacks the bf16 section"
tr -d ' \n' <bf16/config.resolved.json | grep -q '"bf16":{"enabled":true}' ||
    fail "config.resolved.json does not record bf16.enabled true"
tr -d ' \n' <fp32/config.resolved.json | grep -q '"bf16":{"enabled":false}' ||
    fail "fp32 config.resolved.json does not record bf16.enabled false"
ok

val() { sed -n 's/.*val loss \([0-9.]*\).*/\1/p' "$1" | tail -n 1; }
v32=$(val fp32.log)
v16=$(val bf16.log)
[ -n "$v32" ] && [ -n "$v16" ] || fail "no val loss in the logs: $(cat fp32.log bf16.log)"
awk -v a="$v32" -v b="$v16" 'BEGIN { d = (b - a) / a; if (d < 0) d = -d; exit !(d <= 0.02) }' ||
    fail "val loss bf16 $v16 vs fp32 $v32: more than 2 % apart"
echo "val loss fp32 $v32, bf16 $v16"
ok

"$LF" bench --preset shakespeare-char-cpu --micro-batch 2 --steps 2 --warmup 1 --peak-gflops 100 --bf16 --json \
    >bench.json 2>&1 || fail "bench --bf16: $(cat bench.json)"
grep -q '"bf16":true' bench.json || fail "bench --bf16 --json lacks \"bf16\":true: $(cat bench.json)"
grep -qE '"bf16_kernel":"(oneDNN |fp32 products on bf16-stored activations \()' bench.json || fail "bench --json lacks the kernel: $(cat bench.json)"
"$LF" bench --preset shakespeare-char-cpu --micro-batch 2 --steps 1 --warmup 0 --peak-gflops 100 --json \
    >bench32.json 2>&1 || fail "bench: $(cat bench32.json)"
grep -q '"bf16":false' bench32.json || fail "bench --json lacks \"bf16\":false: $(cat bench32.json)"
ok

"$LF" train "$CFG" "${ARGS[@]}" --out_dir=bad --bf16.enabled=1 >bad.log 2>&1 && fail "bf16.enabled=1 accepted"
grep -q 'bf16.enabled' bad.log || fail "error does not name bf16.enabled: $(cat bad.log)"
ok

echo "$passed passed"
