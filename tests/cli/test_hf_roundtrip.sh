#!/usr/bin/env bash
# Hugging Face round trip: a Llama trained by llmforge (GQA, untied head) is
# loaded by transformers.AutoModelForCausalLM.from_pretrained from its
# checkpoint directory, and then the same with q/k/v biases (model.bias:
# exported as Qwen2ForCausalLM), each
# checkpoint directory with no missing or unexpected weights; its logits of
# the last prompt position agree with llmforge's (tools/check_hf_llama.py:
# |hf - lf| <= 1e-4 + 1e-4 |hf|) and so does a greedy continuation.
#   bash test_hf_roundtrip.sh LLMFORGE SOURCE_DIR SHARED_DIR
# Needs a Python with torch and transformers: $LF_HF_PYTHON, else the bench
# venv ($HOME/.cache/llmforge/bench-venv, bench/venv.sh + pip install
# transformers). Without one the test prints SKIPPED (CTest's skip): the
# wheels are several GB, more than CI installs for a test.
set -u
LF=${1:?usage: test_hf_roundtrip.sh LLMFORGE SOURCE_DIR SHARED_DIR}
SRC=${2:?source dir}
SHARED=${3:?shared dir}
case "$LF" in /*) ;; *) LF="$PWD/$LF" ;; esac
case "$SRC" in /*) ;; *) SRC="$PWD/$SRC" ;; esac
. "$(dirname "$0")/cli_lib.sh"
PYHF=${LF_HF_PYTHON:-$HOME/.cache/llmforge/bench-venv/bin/python}
skip_hf() { echo "SKIPPED: no Python with torch and transformers ($PYHF${1:+: $1}); set LF_HF_PYTHON"; exit 0; }
[ -x "$PYHF" ] || skip_hf
cli_tmpdir hfrt
corpus="$SHARED/data/tinyshakespeare.txt"
if [ -f "$corpus" ]; then head -c 30000 "$corpus" >corpus.txt
else for i in $(seq 1 400); do echo "ROMEO: what light through yonder window breaks?"; done >corpus.txt; fi
"$LF" prepare --char corpus.txt --out data >prepare.log 2>&1 || fail "prepare: $(cat prepare.log)"
ok
IDS=3,17,22,9,40,1,11,29
for bias in false true; do
    "$LF" train --data.dataset=data --model.arch=llama --model.n_layer=2 --model.n_head=4 --model.n_kv_head=2 \
        --model.n_embd=32 --model.ffn_hidden=80 --model.block_size=32 --model.tie_embeddings=false \
        --model.rope_theta=5000 --model.bias=$bias --train_micro_batch_size_per_gpu=8 --train_iters=40 \
        --eval.interval=0 --checkpoint.interval=0 --out_dir=run_$bias --threads=2 >train.log 2>&1 ||
        fail "train (bias $bias): $(cat train.log)"
    ok
    want=llama; [ $bias = true ] && want=qwen2
    grep -q "\"model_type\": \"$want\"" run_$bias/ckpt/step_00000040/config.json || fail "bias $bias: config.json is not $want"
    ok
    "$LF" sample --ckpt run_$bias --ids $IDS --max-new-tokens 12 --temperature 0 --json --threads 2 >lf_$bias.json 2>sample.err ||
        fail "sample --json (bias $bias): $(cat sample.err)"
    ok
done
# tools/check_hf_llama.py on both checkpoints, in one interpreter (cli_lib.sh)
hf_llama_check "$PYHF" "$SRC" "$IDS" 12 false true
rc=$?
[ $rc -eq 3 ] && skip_hf "$(tail -1 check.log)"
[ $rc -eq 0 ] || fail "the check's interpreter exited $rc: $(tail -5 check.log)"
for bias in false true; do
    want=llama; [ $bias = true ] && want=qwen2
    [ "$(cat check_$bias.rc)" = 0 ] ||
        fail "transformers disagrees or cannot load the $want checkpoint: $(tail -5 check_$bias.log)"
    ok
    grep -q '"missing_keys": \[\], "unexpected_keys": \[\]' hf_$bias.json ||
        fail "$want: missing or unexpected weights: $(head -c 400 hf_$bias.json)"
    ok
    grep -q '"logits_agree": true' hf_$bias.json || fail "$want: logits disagree: $(grep -o '"compare": {[^}]*}' hf_$bias.json)"
    ok
    echo "$want: $(grep -o '"compare": {[^}]*}' hf_$bias.json)"
done
echo "$passed passed, 0 failed"
