# shellcheck shell=bash
# bench/ckpt.sh -- sourced (`. bench/ckpt.sh`, from the repository root, after
# bench/venv.sh) by the benchmarks that need the random-weight GPT-2 124M and
# SmolLM-135M-shaped checkpoints (bench/decode.sh, bench/serve.sh). Defines
# MODELS, VOCAB[name], KEYS[name] and make_ckpt NAME, which makes (or reuses)
# the checkpoint of NAME under $CKPT_OUT/NAME (default out/bench/decode, so
# every benchmark shares the same two) and writes its step directory's path
# to $CKPT_OUT/NAME/stepdir.
#
# How (random weights; made once and reused while the model keys they were
# made with are the same; FRESH=1 makes them again): a text holding V
# distinct characters (V = the model's vocabulary, 50304 for GPT-2 as llm.c
# pads it, 49152 for SmolLM) goes through `llmforge prepare --char`, so the
# dataset's vocabulary is the model's, no row is padding and every side
# takes the argmax over the same V logits; then `llmforge train` one step,
# micro-batch 1 at the model's own block_size (1024, 2048), with the keys of
# the presets (gpt2-124m, smollm-135m; `llmforge bench --help`), full
# activation recomputation to keep that step within 1 GB of activations
# (same weights), one evaluation batch. The learning rate of step 1 is
# warm-up's lr/100, so the weights are the initialisation to within ~1e-5.
# The step directory holds model.safetensors + config.json with Hugging
# Face names, which transformers loads as GPT2LMHeadModel / LlamaForCausalLM.
# Needs BUILD (the CMake build directory) and LF_BENCH_PYTHON (bench/venv.sh).

CKPT_OUT=${CKPT_OUT:-out/bench/decode}

# name, vocabulary, then the model keys of `llmforge train`
MODELS=(gpt2-124m smollm-135m)
declare -A VOCAB KEYS
VOCAB[gpt2-124m]=50304
KEYS[gpt2-124m]="--model.arch=gpt2 --model.n_layer=12 --model.n_head=12 --model.n_embd=768 --model.block_size=1024
  --model.vocab_size=50304 --model.bias=true"
VOCAB[smollm-135m]=49152
KEYS[smollm-135m]="--model.arch=llama --model.n_layer=30 --model.n_head=9 --model.n_kv_head=3 --model.n_embd=576
  --model.ffn_hidden=1536 --model.block_size=2048 --model.vocab_size=49152 --model.tie_embeddings=true
  --model.bias=false --model.rope_theta=10000 --model.norm_eps=1e-5"

# make_ckpt NAME: the checkpoint of NAME under $CKPT_OUT/NAME (its step directory in $CKPT_OUT/NAME/stepdir)
make_ckpt() {
  local name=$1 dir=$CKPT_OUT/$1 v=${VOCAB[$1]}
  local keys=${KEYS[$1]//$'\n'/ }
  if [ "${FRESH:-0}" != 1 ] && [ -f "$dir/stepdir" ] && [ "$(cat "$dir/keys" 2>/dev/null)" = "$keys" ] &&
     [ -f "$(cat "$dir/stepdir")/model.safetensors" ]; then
    echo "checkpoint $name: reusing $(cat "$dir/stepdir")"
    return
  fi
  rm -rf "$dir"
  mkdir -p "$dir"
  # every one of the V characters once (so the vocabulary is exactly V), then random ones: 60000 in all, so the
  # last 10% (validation) still holds more than a 2048-token block
  "$LF_BENCH_PYTHON" - "$v" "$dir/text.txt" <<'PY'
import random, sys
V, path = int(sys.argv[1]), sys.argv[2]
# "\n" (end of text) and V-1 code points from U+0100 up, below the surrogates U+D800
chars = ["\n"] + [chr(0x100 + i) for i in range(V - 1)]
assert 0x100 + V - 2 < 0xD800
r = random.Random(1234)
text = chars[:]
r.shuffle(text)
text += [r.choice(chars) for _ in range(60000 - V)]
open(path, "w", encoding="utf-8").write("".join(text))
PY
  "$BUILD"/llmforge prepare --char "$dir/text.txt" --out "$dir/data" | sed "s/^/$name: /"
  echo "checkpoint $name: llmforge train, 1 step (micro-batch 1 x block_size; this takes a minute or two)"
  # shellcheck disable=SC2086
  "$BUILD"/llmforge train --threads 2 --data.dataset="$dir/data" --out_dir="$dir/run" $keys \
    --train_micro_batch_size_per_gpu=1 --train_iters=1 --eval.iters=1 --eval.interval=0 --checkpoint.interval=0 \
    --activation_checkpointing.policy=full --steps_per_print=1 >"$dir/train.txt"
  grep -E "^(llmforge train:|step 1/)" "$dir/train.txt" | sed "s/^/$name: /"
  local step; step=$(find "$dir/run/ckpt" -maxdepth 1 -name 'step_*' | sort | tail -n 1)
  if [ ! -f "$step/model.safetensors" ] || [ ! -f "$step/config.json" ]; then
    echo "ckpt.sh: no step directory with model.safetensors and config.json under $dir/run/ckpt" >&2
    exit 1
  fi
  echo "$step" >"$dir/stepdir"
  echo "$keys" >"$dir/keys"
}
