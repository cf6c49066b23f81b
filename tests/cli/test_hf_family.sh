#!/usr/bin/env bash
# Qwen3 and Phi-3 through the CLI: `train --init-from` the transformers-saved
# directories of tests/fixtures/hf_family (Qwen3: per-head q/k RMSNorm, head_dim
# 16 != 48/4, tied; Phi-3: fused qkv_proj and gate_up_proj, sliding_window 124),
# two training steps, `sample` from the checkpoint (trainer_state.json carries
# the q/k-norm and fused-name flags) and from the directory as it is
# (`sample --model DIR`); the checkpoint exports the directory's own config.json
# (Qwen3ForCausalLM, Phi3ForCausalLM). With a Python that has torch and
# transformers ($LF_HF_PYTHON, else the bench venv), transformers loads each
# export as its class, with no missing or unexpected weights, and its logits
# of a 40-token prompt and a greedy continuation agree with llmforge's; without
# one that part is skipped.
#   bash test_hf_family.sh LLMFORGE SOURCE_DIR SHARED_DIR
set -u
LF=${1:?usage: test_hf_family.sh LLMFORGE SOURCE_DIR SHARED_DIR}
SRC=${2:?source dir}
case "$LF" in /*) ;; *) LF="$PWD/$LF" ;; esac
case "$SRC" in /*) ;; *) SRC="$PWD/$SRC" ;; esac
. "$(dirname "$0")/cli_lib.sh"
PYHF=${LF_HF_PYTHON:-$HOME/.cache/llmforge/bench-venv/bin/python}
cli_tmpdir hffamily
# a corpus of exactly 128 distinct characters: the models' own 128 ids (as test_hf_rope.sh)
line=""
for i in $(seq 32 126); do line+=$(printf "\\x$(printf %x "$i")"); done
for i in $(seq 192 223); do line+=$(printf "\\u$(printf %04x "$i")"); done
for i in $(seq 1 200); do echo "$line"; done >c.txt
"$LF" prepare --char c.txt --out data >prepare.log 2>&1 || fail "prepare: $(cat prepare.log)"
grep -q "vocabulary 128" prepare.log || fail "the corpus does not have 128 characters: $(cat prepare.log)"
ok
IDS=$(for i in $(seq 0 39); do printf '%d,' $(((i * 37 + 3) % 128)); done)
IDS=${IDS%,}
for fx in qwen3 phi3; do
    dir="$SRC/tests/fixtures/hf_family/$fx"
    "$LF" sample --model "$dir" --ids "$IDS" --max-new-tokens 4 --temperature 0 --json --threads 2 >direct_$fx.json \
        2>direct.err || fail "sample --model $fx: $(cat direct.err)"
    ok
    "$LF" train --data.dataset=data --model.block_size=48 --train_micro_batch_size_per_gpu=2 --train_iters=2 \
        --eval.interval=0 --checkpoint.interval=0 --threads=2 --out_dir=run_$fx \
        --init-from "$dir" >train_$fx.log 2>&1 || fail "train --init-from $fx: $(cat train_$fx.log)"
    ok
    cfg=$(ls -d run_$fx/ckpt/step_*)/config.json
    cmp -s "$dir/config.json" "$cfg" || fail "$fx: the export is not the directory's config.json: $(cat "$cfg")"
    ok
    grep -q '"extras"' run_$fx/ckpt/step_*/trainer_state.json || fail "$fx: trainer_state.json has no model.extras"
    ok
    "$LF" sample --ckpt run_$fx --ids "$IDS" --max-new-tokens 8 --temperature 0 --json --threads 2 >lf_$fx.json \
        2>sample.err || fail "sample ($fx): $(cat sample.err)"
    ok
done
grep -q '"qk_norm":[[:space:]]*true' run_qwen3/ckpt/step_*/trainer_state.json || fail "qwen3: model.extras lacks qk_norm"
grep -q '"fused_proj":[[:space:]]*true' run_phi3/ckpt/step_*/trainer_state.json || fail "phi3: model.extras lacks fused_proj"
ok
[ -x "$PYHF" ] || { echo "SKIPPED: no Python with torch and transformers ($PYHF); set LF_HF_PYTHON"; exit 0; }
hf_llama_check "$PYHF" "$SRC" "$IDS" 8 qwen3 phi3
rc=$?
[ $rc -eq 3 ] && { echo "SKIPPED: $(tail -1 check.log)"; exit 0; }
[ $rc -eq 0 ] || fail "the check's interpreter exited $rc: $(tail -5 check.log)"
for fx in qwen3 phi3; do
    [ "$(cat check_$fx.rc)" = 0 ] || fail "transformers disagrees or cannot load the $fx export: $(grep -v "Loading weights" check_$fx.log | tail -5)"
    ok
    cls=Qwen3ForCausalLM
    [ $fx = phi3 ] && cls=Phi3ForCausalLM
    grep -q "\"architectures\": \[\"$cls\"\]" hf_$fx.json || fail "$fx: transformers did not load a $cls: $(head -c 300 hf_$fx.json)"
    ok
    grep -q '"missing_keys": \[\], "unexpected_keys": \[\]' hf_$fx.json ||
        fail "$fx: missing or unexpected weights: $(head -c 400 hf_$fx.json)"
    ok
    grep -q '"logits_agree": true' hf_$fx.json || fail "$fx: logits disagree: $(grep -o '"compare": {[^}]*}' hf_$fx.json)"
    ok
    echo "$fx: $(grep -o '"compare": {[^}]*}' hf_$fx.json)"
done
echo "$passed passed, 0 failed"
