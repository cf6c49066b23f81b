#!/usr/bin/env bash
# Scaled RoPE, head_dim and biases through the CLI: `train --init-from` two of
# the transformers-saved directories of tests/fixtures/hf_rope (llama3 RoPE
# scaling; head_dim 16 != 48/4 with attention_bias and mlp_bias), a short
# training, then `sample` from the llmforge checkpoint (its trainer_state.json
# carries the fields no model.* key sets) and the exported config.json, which
# must carry the RoPE scaling, head_dim and biases. With a Python that has
# torch and transformers ($LF_HF_PYTHON, else the bench venv), the exported
# checkpoint is loaded by transformers (tools/check_hf_llama.py) and its
# logits of a 40-token prompt (past the original 32 positions) and a greedy
# continuation must agree with llmforge's; without one that part is skipped.
#   bash test_hf_rope.sh LLMFORGE SOURCE_DIR SHARED_DIR
set -u
LF=${1:?usage: test_hf_rope.sh LLMFORGE SOURCE_DIR SHARED_DIR}
SRC=${2:?source dir}
case "$LF" in /*) ;; *) LF="$PWD/$LF" ;; esac
case "$SRC" in /*) ;; *) SRC="$PWD/$SRC" ;; esac
. "$(dirname "$0")/cli_lib.sh"
PYHF=${LF_HF_PYTHON:-$HOME/.cache/llmforge/bench-venv/bin/python}
cli_tmpdir hfrope
# a corpus of exactly 128 distinct characters (printable ASCII, newline, U+00C0..U+00DF): the
# character vocabulary is then the models' own 128 ids, so llmforge samples over the same vocabulary
line=""
for i in $(seq 32 126); do line+=$(printf "\\x$(printf %x "$i")"); done
for i in $(seq 192 223); do line+=$(printf "\\u$(printf %04x "$i")"); done
for i in $(seq 1 200); do echo "$line"; done >c.txt
"$LF" prepare --char c.txt --out data >prepare.log 2>&1 || fail "prepare: $(cat prepare.log)"
grep -q "vocabulary 128" prepare.log || fail "the corpus does not have 128 characters: $(cat prepare.log)"
ok
# 40 ids: positions past the original 32
IDS=$(for i in $(seq 0 39); do printf '%d,' $(((i * 37 + 3) % 128)); done)
IDS=${IDS%,}
for fx in llama3 headdim; do
    "$LF" train --data.dataset=data --model.block_size=48 --train_micro_batch_size_per_gpu=2 --train_iters=2 \
        --eval.interval=0 --checkpoint.interval=0 --threads=2 --out_dir=run_$fx \
        --init-from "$SRC/tests/fixtures/hf_rope/$fx" >train_$fx.log 2>&1 || fail "train --init-from $fx: $(cat train_$fx.log)"
    ok
    cfg=$(ls -d run_$fx/ckpt/step_*)/config.json
    [ -f "$cfg" ] || fail "$fx: no config.json in the checkpoint"
    # a run --init-from an HF directory exports that directory's own config.json (its RoPE
    # scaling, head_dim and biases as written); llmforge's own export of these fields is
    # model.test_hf_rope's
    cmp -s "$SRC/tests/fixtures/hf_rope/$fx/config.json" "$cfg" ||
        fail "$fx: the export is not the directory's config.json: $(cat "$cfg")"
    ok
    grep -q '"extras"' run_$fx/ckpt/step_*/trainer_state.json || fail "$fx: trainer_state.json has no model.extras"
    ok
    "$LF" sample --ckpt run_$fx --ids "$IDS" --max-new-tokens 8 --temperature 0 --json --threads 2 >lf_$fx.json 2>sample.err ||
        fail "sample ($fx): $(cat sample.err)"
    ok
done
# --resume without --init-from: the model.* keys give the same tensors, but not the RoPE scaling
"$LF" train --data.dataset=data --model.arch=llama --model.n_layer=2 --model.n_head=4 --model.n_kv_head=2 \
    --model.n_embd=64 --model.ffn_hidden=64 --model.vocab_size=128 --model.block_size=48 --model.norm_eps=1e-5 \
    --model.tie_embeddings=true --train_micro_batch_size_per_gpu=2 --train_iters=4 --eval.interval=0 \
    --checkpoint.interval=0 --threads=2 --out_dir=run_llama3 --resume >resume.log 2>&1 &&
    fail "a resume without the checkpoint's RoPE scaling was accepted: $(cat resume.log)"
grep -q 'holds a model with .*"rope_type": "llama3"' resume.log || fail "the refusal does not name the scaling: $(cat resume.log)"
ok
[ -x "$PYHF" ] || { echo "SKIPPED: no Python with torch and transformers ($PYHF); set LF_HF_PYTHON"; exit 0; }
hf_llama_check "$PYHF" "$SRC" "$IDS" 8 llama3 headdim
rc=$?
[ $rc -eq 3 ] && { echo "SKIPPED: $(tail -1 check.log)"; exit 0; }
[ $rc -eq 0 ] || fail "the check's interpreter exited $rc: $(tail -5 check.log)"
for fx in llama3 headdim; do
    [ "$(cat check_$fx.rc)" = 0 ] || fail "transformers disagrees or cannot load the $fx export: $(grep -v "Loading weights" check_$fx.log | tail -5)"
    ok
    grep -q '"missing_keys": \[\], "unexpected_keys": \[\]' hf_$fx.json ||
        fail "$fx: missing or unexpected weights: $(head -c 400 hf_$fx.json)"
    ok
    grep -q '"logits_agree": true' hf_$fx.json || fail "$fx: logits disagree: $(grep -o '"compare": {[^}]*}' hf_$fx.json)"
    ok
    echo "$fx: $(grep -o '"compare": {[^}]*}' hf_$fx.json)"
done
echo "$passed passed, 0 failed"
