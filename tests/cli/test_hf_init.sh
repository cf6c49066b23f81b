#!/usr/bin/env bash
# --init-from a Hugging Face directory through the CLI: the sharded bf16
# Llama of tests/fixtures/hf_llama_bf16 (transformers' save_pretrained)
# initialises training, its config.json filling the model keys the
# configuration leaves out; a key that disagrees, and a broken directory, are
# refused with messages that name the key or the file; block_size left out is
# min(max_position_embeddings, 2048) (cut to fit the data), said in the run
# header; a Mistral's block_size past its sliding_window trains (windowed
# attention), samples past the window, and its export is
# MistralForCausalLM with the window.
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
# block_size left out: min(max_position_embeddings, 2048), said in the run header, never the
# model's whole reach (Llama 3.2's 131072 stopped training: "larger than the data"); on data too
# short for that, cut to fit it
NOBLOCK=(--data.dataset=data --train_micro_batch_size_per_gpu=1 --train_iters=1 --eval.interval=0 --eval.iters=1
         --checkpoint.interval=0 --threads=2)
edit_config() { # DIR KEY=JSON...
    python3 - "$@" <<'PY'
import json, sys
p = sys.argv[1] + "/config.json"
c = json.load(open(p))
for kv in sys.argv[2:]:
    k, v = kv.split("=", 1)
    c[k] = json.loads(v)
json.dump(c, open(p, "w"), indent=2)
PY
}
cp -r "$HF" long && edit_config long max_position_embeddings=131072
"$LF" train "${NOBLOCK[@]}" --out_dir=run_long --init-from long >long.log 2>&1 || fail "max_position_embeddings 131072: $(cat long.log)"
grep -q "block 2048 (min(max_position_embeddings 131072, 2048))" long.log || fail "the default block: $(head -5 long.log)"
ok
head -c 1500 c.txt >short.txt
"$LF" prepare --char short.txt --out short >prepare_short.log 2>&1 || fail "prepare: $(cat prepare_short.log)"
"$LF" train "${NOBLOCK[@]}" --data.dataset=short --out_dir=run_short --init-from long >short.log 2>&1 ||
    fail "a default block on short data: $(cat short.log)"
# the shorter of train and val (the last step evaluates): a window of block_size + 1 tokens, + 1
n=$(python3 -c 'import json; s = json.load(open("short/dataset.json"))["splits"]; print(min(s["train"]["tokens"], s["val"]["tokens"]))')
grep -q "block $((n - 2)) (min(max_position_embeddings 131072, 2048), cut to fit dataset 'short')" short.log ||
    fail "the block cut to the data ($n tokens in its shorter split): $(head -5 short.log)"
ok
# a Mistral with sliding_window 16 under max_position_embeddings 64: --model.block_size=64 (past
# the window) trains with the windowed attention; left out, the block is max_position_embeddings
# (the window no longer bounds it), and the checkpoint's config.json is a MistralForCausalLM
# with the window; sample runs past the window through the ring-buffer KV cache
cp -r "$HF" mistral && edit_config mistral model_type='"mistral"' architectures='["MistralForCausalLM"]' sliding_window=16
"$LF" train "${NOBLOCK[@]}" --out_dir=run_m64 --init-from mistral --model.block_size=64 >m64.log 2>&1 ||
    fail "block_size 64 over a 16-token sliding window: $(cat m64.log)"
grep -q "block 64" m64.log || fail "the block of the windowed run: $(head -5 m64.log)"
ok
"$LF" train "${NOBLOCK[@]}" --out_dir=run_m --init-from mistral --checkpoint.interval=1 >m.log 2>&1 || fail "mistral: $(cat m.log)"
grep -q "block 64 (min(max_position_embeddings 64, 2048))" m.log || fail "mistral's default block: $(head -5 m.log)"
python3 - run_m/ckpt/step_*/config.json <<'PY' || fail "the export of a windowed model: $(cat run_m/ckpt/step_*/config.json)"
import json, sys
c = json.load(open(sys.argv[1]))
assert c["architectures"] == ["MistralForCausalLM"] and c["model_type"] == "mistral", c
assert c["sliding_window"] == 16 and c["max_position_embeddings"] == 64, c
PY
ok
step=$(ls -d run_m/ckpt/step_* | tail -1)
"$LF" sample --ckpt "$step" --prompt "ROMEO" --max-new-tokens 40 --threads 2 >ms.log 2>&1 ||
    fail "sampling 45 positions past a 16-token window: $(cat ms.log)"
ok
grep -qE 'Segmentation|AddressSanitizer|runtime error:' bad.log broken.log long.log short.log m64.log m.log ms.log &&
    fail "crash: $(cat bad.log broken.log)"
ok
echo "$passed passed, 0 failed"
