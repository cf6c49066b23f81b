#!/usr/bin/env bash
# --init-from a Hugging Face directory through the CLI: the sharded bf16
# Llama of tests/fixtures/hf_llama_bf16 (transformers' save_pretrained)
# initialises training, its config.json filling the model keys the
# configuration leaves out; a key that disagrees, and a broken directory, are
# refused with messages that name the key or the file.
#   bash test_hf_init.sh LLMFORGE SOURCE_DIR SHARED_DIR
set -u
LF=${1:?usage: test_hf_init.sh LLMFORGE SOURCE_DIR SHARED_DIR}
SRC=${2:?source dir}
case "$LF" in /*) ;; *) LF="$PWD/$LF" ;; esac
case "$SRC" in /*) ;; *) SRC="$PWD/$SRC" ;; esac
. "$(dirname "$0")/cli_lib.sh"
HF="$SRC/tests/fixtures/hf_llama_bf16"
cli_tmpdir hfinit
for i in $(seq 1 300); do echo "ROMEO: what light through yonder window breaks? It is the east, and Juliet"; done >c.txt
"$LF" prepare --char c.txt --out data >prepare.log 2>&1 || fail "prepare: $(cat prepare.log)"
ok
COMMON=(--data.dataset=data --model.block_size=32 --train_micro_batch_size_per_gpu=4 --train_iters=3
        --eval.interval=0 --checkpoint.interval=0 --threads=2)
"$LF" train "${COMMON[@]}" --out_dir=run --init-from "$HF" >train.log 2>&1 || fail "train --init-from: $(cat train.log)"
ok
grep -q "llmforge train: llama, .* 2 layers, 6 heads (2 KV), 48 channels" train.log ||
    fail "the model is not the directory's (llama, 2 layers, 6/2 heads, 48): $(head -3 train.log)"
ok
grep -q "initialised from Hugging Face model" train.log || fail "no initialisation message: $(cat train.log)"
ok
grep -q '"config.json"' run/ckpt/*/trainer_state.json || fail "the checkpoint lacks its config.json"
ok
# the directory's own config.json and generation_config.json travel with the checkpoint (the
# original architectures, model_type and eos ids); its tokenizer files do not: the data was
# tokenized with another tokenizer
step=$(ls -d run/ckpt/step_* | tail -1)
cmp -s "$HF/config.json" "$step/config.json" || fail "the checkpoint's config.json is not the directory's"
cmp -s "$HF/generation_config.json" "$step/generation_config.json" || fail "generation_config.json was not kept"
[ ! -e "$step/tokenizer_config.json" ] || fail "tokenizer_config.json kept for data of another tokenizer"
ok
# a key that disagrees with config.json
"$LF" train "${COMMON[@]}" --out_dir=run2 --init-from "$HF" --model.n_layer=3 >bad.log 2>&1 &&
    fail "a disagreeing model.n_layer was accepted"
ok
grep -q "model.n_layer 3 (config.json 2)" bad.log || fail "the mismatch is not named: $(cat bad.log)"
ok
# a directory with a shard missing
cp -r "$HF" broken && rm broken/model-00002-of-00003.safetensors
"$LF" train "${COMMON[@]}" --out_dir=run3 --init-from broken >broken.log 2>&1 && fail "a missing shard was accepted"
ok
grep -q "model-00002-of-00003.safetensors" broken.log || fail "the missing shard is not named: $(cat broken.log)"
ok
grep -qE 'Segmentation|AddressSanitizer|runtime error:' bad.log broken.log && fail "crash: $(cat bad.log broken.log)"
ok
echo "$passed passed, 0 failed"
