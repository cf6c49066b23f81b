#!/usr/bin/env bash
# Bad input to the CLI: every case must end with a non-zero exit status, must
# not crash (status < 128, no sanitizer report, no segfault) and must say on
# stderr which file or key is at fault.
#   bash test_cli_errors.sh LLMFORGE SOURCE_DIR SHARED_DIR
set -u

LF=${1:?usage: test_cli_errors.sh LLMFORGE SOURCE_DIR SHARED_DIR}
SRC=${2:?source dir}
CFG="$SRC/configs/shakespeare_char_cpu.json"
case "$LF" in /*) ;; *) LF="$PWD/$LF" ;; esac

. "$(dirname "$0")/cli_lib.sh"

cli_tmpdir errors

# A tiny model and run that finish in milliseconds.
TINY=(--model.n_layer=1 --model.n_head=2 --model.n_embd=16 --model.block_size=16
      --train_iters=1 --eval.iters=1 --steps_per_print=1)

# expect_error NAME NEEDLE [NEEDLE...] -- COMMAND...
# Runs COMMAND; checks exit status != 0 and < 128, no crash report, and that
# stderr contains every NEEDLE (fixed strings).
expect_error() {
    local name=$1
    shift
    local needles=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do
        needles+=("$1")
        shift
    done
    shift
    "$@" >"$tmp/out.txt" 2>"$tmp/err.txt"
    local rc=$?
    [ "$rc" -ne 0 ] || fail "$name: exit status 0, expected an error; command: $*"
    ok
    [ "$rc" -lt 128 ] || fail "$name: exit status $rc (killed by a signal); command: $*; stderr: $(cat "$tmp/err.txt")"
    if grep -qE 'Segmentation|AddressSanitizer|LeakSanitizer|runtime error:|core dumped' "$tmp/out.txt" "$tmp/err.txt"; then
        fail "$name: crash or sanitizer report; command: $*; stderr: $(cat "$tmp/err.txt")"
    fi
    ok
    local n
    for n in "${needles[@]}"; do
        grep -qF -- "$n" "$tmp/err.txt" ||
            fail "$name: stderr does not mention '$n'; command: $*; stderr: $(cat "$tmp/err.txt")"
        ok
    done
}

# ------------------------------------------------------------ fixtures
# A small corpus (ASCII text of a few kinds of lines) and its dataset.
for i in $(seq 1 400); do
    echo "Line $i: the quick brown fox jumps over the lazy dog; FIRST CITIZEN, speak!"
done >corpus.txt
"$LF" prepare --char corpus.txt --out ds >prep.log 2>&1 || fail "prepare of the fixture corpus: $(cat prep.log)"
[ -f ds/train.bin ] && [ -f ds/val.bin ] && [ -f ds/dataset.json ] || fail "prepare wrote no shards"
ok

# ------------------------------------------------------------ configuration
expect_error "unknown config key" "optimizer.params.lrr" "optimizer.params.lr'" -- \
    "$LF" train "$CFG" --data.dataset=ds --out_dir=run --optimizer.params.lrr=1
expect_error "non-numeric value" "train_iters" "abc" -- \
    "$LF" train "$CFG" --data.dataset=ds --out_dir=run --train_iters=abc
expect_error "out-of-range value" "model.dropout" "1.5" -- \
    "$LF" train "$CFG" --data.dataset=ds --out_dir=run --model.dropout=1.5
printf '{\n  "model": {"n_layer": 2,}\n' >bad.json
expect_error "malformed JSON config" "bad.json" "line 2" -- \
    "$LF" train bad.json --data.dataset=ds --out_dir=run
expect_error "missing config file" "no_such_config.json" -- \
    "$LF" train no_such_config.json --data.dataset=ds --out_dir=run
expect_error "threads -1" "--threads" "-1" -- \
    "$LF" train "$CFG" --data.dataset=ds --out_dir=run --threads=-1

# ------------------------------------------------------------ datasets
expect_error "dataset dir missing" "no_such_dataset" -- \
    "$LF" train "$CFG" --data.dataset=no_such_dataset --out_dir=run "${TINY[@]}"

cp -r ds ds_trunc_val
truncate -s 100 ds_trunc_val/val.bin
expect_error "truncated val.bin" "val.bin" -- \
    "$LF" train "$CFG" --data.dataset=ds_trunc_val --out_dir=run "${TINY[@]}"

cp -r ds ds_trunc_train
truncate -s 30 ds_trunc_train/train.bin
expect_error "train.bin shorter than its header" "train.bin" -- \
    "$LF" train "$CFG" --data.dataset=ds_trunc_train --out_dir=run "${TINY[@]}"

cp -r ds ds_flip
# Byte 1000 is in the token payload (header is 64 bytes); tokens of a char
# vocabulary are < 256, so 0xff always changes it.
printf '\377' | dd of=ds_flip/train.bin bs=1 seek=1000 conv=notrunc 2>/dev/null || fail "dd"
expect_error "corrupt shard payload" "train.bin" "checksum" -- \
    "$LF" train "$CFG" --data.dataset=ds_flip --out_dir=run "${TINY[@]}"

expect_error "block size larger than the data" "model.block_size" "100000" -- \
    "$LF" train "$CFG" --data.dataset=ds --out_dir=run "${TINY[@]}" --model.block_size=100000

# ------------------------------------------------------------ run directory
: >file
expect_error "unwritable out_dir" "file/out" -- \
    "$LF" train "$CFG" --data.dataset=ds --out_dir="$tmp/file/out" "${TINY[@]}"

# ------------------------------------------------------------ weights and checkpoints
head -c 4096 /dev/urandom >random.safetensors
expect_error "--init-from random bytes" "random.safetensors" -- \
    "$LF" train "$CFG" --data.dataset=ds --out_dir=run_init "${TINY[@]}" --init-from random.safetensors

printf '\020\000\000\000\000\000\000\000garbage, not {}' >garbage.safetensors
expect_error "--init-from bad JSON header" "garbage.safetensors" -- \
    "$LF" train "$CFG" --data.dataset=ds --out_dir=run_init "${TINY[@]}" --init-from garbage.safetensors

"$LF" train "$CFG" --data.dataset=ds --out_dir=run32 "${TINY[@]}" --model.n_embd=32 >train32.log 2>&1 ||
    fail "training the n_embd=32 model: $(cat train32.log)"
w32=run32/ckpt/step_00000001/model.safetensors
[ -f "$w32" ] || fail "no $w32 after training"
ok
expect_error "--init-from another n_embd" "model.safetensors" "wte.weight" -- \
    "$LF" train "$CFG" --data.dataset=ds --out_dir=run16 "${TINY[@]}" --model.n_embd=16 --init-from "$w32"

expect_error "--resume without a checkpoint" "run_fresh/ckpt" -- \
    "$LF" train "$CFG" --data.dataset=ds --out_dir=run_fresh "${TINY[@]}" --resume

expect_error "sample on a missing dir" "no_such_ckpt" -- \
    "$LF" sample --ckpt no_such_ckpt --prompt "x" --max-new-tokens 5

# ------------------------------------------------------------ prepare
expect_error "prepare a missing file" "no_such_input.txt" -- \
    "$LF" prepare --char no_such_input.txt --out ds_missing
: >empty.txt
expect_error "prepare an empty file" "empty.txt" -- \
    "$LF" prepare --char empty.txt --out ds_empty

# ------------------------------------------------------------ bench and dispatch
expect_error "bench unknown preset" "nope" -- \
    "$LF" bench --preset nope
expect_error "unknown subcommand" "frobnicate" -- \
    "$LF" frobnicate

echo "$passed passed, 0 failed"
