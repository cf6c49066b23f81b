#!/usr/bin/env bash
# LoRA through the CLI: `train --init-from` the tiny Llama of tests/fixtures/peft/base_llama with
# lora.target_modules q_proj/v_proj, a few steps with a checkpoint every 2:
#   - every step directory holds PEFT's adapter_config.json and adapter_model.safetensors (the
#     adapter only: no config.json, no base tensors);
#   - `llmforge plan` counts gradients and AdamW moments of the adapters only;
#   - full recomputation with asynchronous checkpoints gives the same adapter bit for bit (with
#     lora.dropout too: the same masks), and two
#     data-parallel ranks (tcp) end with the adapters of one process on the same batch;
#   - a resumed run ends with the adapter of the uninterrupted one, bit for bit; a resume without
#     the base it was trained on, a target that matches no module, lora.r 0 and LoRA with ZeRO
#     are refused naming the key;
#   - `train --init-from STEP_DIR` (a PEFT adapter directory) trains on from its adapters on its base
#     (the first loss below the fresh run's); lora keys that disagree with the adapter are refused;
#   - `llmforge bench` with lora.* runs the LoRA step (trainable_params: the adapters only);
#   - `llmforge merge` writes a Hugging Face directory that `llmforge sample` runs, and `sample` of
#     the step directory itself (base + adapter, unmerged) gives the same logits;
#   - with a Python that has torch, transformers and peft ($LF_HF_PYTHON, else the bench venv):
#     tools/check_peft_adapter.py has peft.PeftModel.from_pretrained load the adapter on its base
#     (every tensor, bit for bit), and its logits equal transformers' on the merged directory and
#     llmforge's `sample --json` of it (1e-4 of the largest); without one that part is skipped.
#   bash test_lora.sh LLMFORGE SOURCE_DIR SHARED_DIR
set -u
LF=${1:?usage: test_lora.sh LLMFORGE SOURCE_DIR SHARED_DIR}
SRC=${2:?source dir}
case "$LF" in /*) ;; *) LF="$PWD/$LF" ;; esac
case "$SRC" in /*) ;; *) SRC="$PWD/$SRC" ;; esac
. "$(dirname "$0")/cli_lib.sh"
PYHF=${LF_HF_PYTHON:-$HOME/.cache/llmforge/bench-venv/bin/python}
BASE="$SRC/tests/fixtures/peft/base_llama"
cli_tmpdir lora
for i in $(seq 1 300); do echo "the quick brown fox jumps over the lazy dog; pack my box with five dozen jugs"; done >c.txt
"$LF" prepare --char c.txt --out data >prepare.log 2>&1 || fail "prepare: $(cat prepare.log)"
ok
COMMON=(--data.dataset=data --model.block_size=16 --train_micro_batch_size_per_gpu=4 --eval.interval=0
        --eval.iters=2 --checkpoint.interval=2 --threads=2 --registry.enabled=false --optimizer.params.lr=1e-2
        --scheduler.warmup_iters=0 '--lora.target_modules=["q_proj","v_proj"]' --lora.r=4 --lora.alpha=8)
"$LF" train "${COMMON[@]}" --train_iters=6 --out_dir=full --init-from "$BASE" >full.log 2>&1 || fail "train: $(cat full.log)"
ok
step=full/ckpt/step_00000006
for f in adapter_config.json adapter_model.safetensors; do [ -f "$step/$f" ] || fail "no $f in $step: $(ls "$step")"; done
[ ! -e "$step/config.json" ] || fail "a LoRA checkpoint carries the base's config.json"
ok
grep -q '"peft_type":[[:space:]]*"LORA"' "$step/adapter_config.json" || fail "adapter_config.json: $(cat "$step/adapter_config.json")"
grep -q '"target_modules":[[:space:]]*\["q_proj", "v_proj"\]' "$step/adapter_config.json" || fail "target_modules: $(cat "$step/adapter_config.json")"
grep -q "\"base_model_name_or_path\":[[:space:]]*\"$BASE\"" "$step/adapter_config.json" || fail "base: $(cat "$step/adapter_config.json")"
ok
# 2 layers x (q, v) x (A, B), by PEFT's names, and nothing else
python3 - "$step/adapter_model.safetensors" <<'PY' || fail "adapter_model.safetensors names"
import json, struct, sys
b = open(sys.argv[1], "rb").read()
h = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
names = sorted(k for k in h if k != "__metadata__")
want = sorted(f"base_model.model.model.layers.{l}.self_attn.{m}.lora_{ab}.weight"
              for l in range(2) for m in ("q_proj", "v_proj") for ab in "AB")
sys.exit(0 if names == want else print(names) or 1)
PY
ok
# the memory plan: gradients and moments of the adapters only: per layer q A (4,32) B (32,4) and
# v A (4,32) B (16,4) (2 KV heads of 8), 448 floats, 896 in all: 3.5 KiB
SHAPE=(--model.arch=llama --model.n_layer=2 --model.n_head=4 --model.n_kv_head=2 --model.n_embd=32 --model.ffn_hidden=48
       --model.vocab_size=64)
"$LF" plan "${COMMON[@]}" "${SHAPE[@]}" >plan.log 2>&1 || fail "plan: $(cat plan.log)"
grep -q "gradients (fp32, LoRA adapters only) *3.5 KiB" plan.log || fail "plan gradients: $(cat plan.log)"
grep -q "AdamW moments (fp32, LoRA adapters) *7.0 KiB" plan.log || fail "plan moments: $(cat plan.log)"
ok
# resume: 4 steps, then on to 6, equals the 6-step run bit for bit
"$LF" train "${COMMON[@]}" --train_iters=6 --train.stop_at=4 --out_dir=part --init-from "$BASE" >part.log 2>&1 ||
    fail "train to 4: $(cat part.log)"
"$LF" train "${COMMON[@]}" --train_iters=6 --out_dir=part --init-from "$BASE" --resume >resume.log 2>&1 ||
    fail "resume: $(cat resume.log)"
cmp -s part/ckpt/step_00000006/adapter_model.safetensors "$step/adapter_model.safetensors" ||
    fail "the resumed run's adapter differs from the uninterrupted run's"
ok
# a resume without the base is refused, naming it
# (the model keys given, so that the model is the same shape: only the base differs)
"$LF" train "${COMMON[@]}" "${SHAPE[@]}" --train_iters=8 --out_dir=part --resume >nobase.log 2>&1 &&
    fail "a resume without its base was accepted"
grep -q "holds LoRA adapters of the base '$BASE'" nobase.log || fail "the refusal does not name the base: $(cat nobase.log)"
ok
# full recomputation (the adapted matmuls recomputed in backward) with asynchronous checkpoints:
# the same adapter bit for bit
"$LF" train "${COMMON[@]}" --train_iters=6 --out_dir=rcfull --init-from "$BASE" --activation_checkpointing.policy=full \
    --checkpoint.async=true >rcfull.log 2>&1 || fail "recompute full + async: $(cat rcfull.log)"
cmp -s rcfull/ckpt/step_00000006/adapter_model.safetensors "$step/adapter_model.safetensors" ||
    fail "full recomputation / async checkpoints changed the adapter"
ok
# lora.dropout: the masks act (another adapter) and are redrawn alike by full recomputation
for pol in none full; do
    "$LF" train "${COMMON[@]}" --train_iters=4 --checkpoint.interval=0 --out_dir=drop_$pol --init-from "$BASE" \
        --lora.dropout=0.1 --activation_checkpointing.policy=$pol >drop_$pol.log 2>&1 || fail "dropout $pol: $(cat drop_$pol.log)"
done
cmp -s drop_none/ckpt/step_00000004/adapter_model.safetensors drop_full/ckpt/step_00000004/adapter_model.safetensors ||
    fail "lora.dropout: full recomputation drew other masks"
! cmp -s drop_none/ckpt/step_00000004/adapter_model.safetensors full/ckpt/step_00000004/adapter_model.safetensors ||
    fail "lora.dropout 0.1 changed nothing"
ok
# data parallel: two ranks (launch --standalone, the tcp communicator) sum the adapters' gradients;
# the adapters after 3 steps equal those of one process accumulating the same two micro-batches,
# up to the order of the sums (bound 1e-5 absolute; measured: identical)
DPC=("${COMMON[@]}" --train_iters=3 --train_batch_size=8 --train_micro_batch_size_per_gpu=4 --checkpoint.interval=0
     --monitor.report=false)
timeout -k 5 120 "$LF" launch --standalone --nproc-per-node 2 -- train "${DPC[@]}" --out_dir=dp2 --init-from "$BASE" \
    --threads 1 >dp2.log 2>&1 || fail "2 ranks: $(tail -5 dp2.log)"
"$LF" train "${DPC[@]}" --gradient_accumulation_steps=2 --out_dir=dp1 --init-from "$BASE" >dp1.log 2>&1 ||
    fail "1 rank: $(cat dp1.log)"
python3 - dp1/ckpt/step_00000003/adapter_model.safetensors dp2/ckpt/step_00000003/adapter_model.safetensors <<'PY' ||
import json, struct, sys
def load(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h, d = json.loads(b[8:8 + n]), b[8 + n:]
    return {k: struct.unpack("<%df" % ((v["data_offsets"][1] - v["data_offsets"][0]) // 4),
                             d[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in h.items() if k != "__metadata__"}
a, b = load(sys.argv[1]), load(sys.argv[2])
err = max(abs(x - y) for k in a for x, y in zip(a[k], b[k]))
print("data parallel: adapters within %.3g of one process's" % err)
sys.exit(0 if a.keys() == b.keys() and err <= 1e-5 else 1)
PY
    fail "2 ranks and 1 disagree"
ok
# refusals by key
"$LF" train "${COMMON[@]}" --train_iters=2 --out_dir=bad1 --init-from "$BASE" '--lora.target_modules=["qproj"]' >bad1.log 2>&1 &&
    fail "a target matching no module was accepted"
grep -q "key 'lora.target_modules': \"qproj\" matches no module of this llama model (its modules: q_proj k_proj v_proj o_proj gate_proj up_proj down_proj" bad1.log ||
    fail "bad target: $(cat bad1.log)"
ok
"$LF" train "${COMMON[@]}" --train_iters=2 --out_dir=bad2 --init-from "$BASE" --lora.r=0 >bad2.log 2>&1 && fail "lora.r 0 was accepted"
grep -q "lora.r" bad2.log || fail "lora.r 0: $(cat bad2.log)"
ok
"$LF" train "${COMMON[@]}" --train_iters=2 --out_dir=bad3 --init-from "$BASE" --zero_optimization.stage=1 >bad3.log 2>&1 &&
    fail "LoRA with ZeRO was accepted"
grep -q "key 'zero_optimization.stage' .*not implemented with LoRA" bad3.log || fail "ZeRO: $(cat bad3.log)"
ok
# --init-from the adapter: its base (base_model_name_or_path) and its adapters, trained on; the
# first step's loss is then below the fresh run's; lora keys that disagree are refused
NOLORA=("${COMMON[@]:0:${#COMMON[@]}-3}")
"$LF" train "${NOLORA[@]}" --train_iters=2 --out_dir=cont --init-from "$step" >cont.log 2>&1 || fail "--init-from adapter: $(cat cont.log)"
grep -q "init-from PEFT adapter $step: base $BASE, r 4, alpha 8" cont.log || fail "no adapter line: $(cat cont.log)"
ok
l_fresh=$(grep -o "step 1/6 | loss [0-9.]*" full.log | awk '{print $NF}')
l_cont=$(grep -o "step 1/2 | loss [0-9.]*" cont.log | awk '{print $NF}')
awk -v a="$l_cont" -v b="$l_fresh" 'BEGIN { exit !(a + 0 < b - 0.01) }' || fail "continued loss $l_cont, fresh $l_fresh"
ok
"$LF" train "${NOLORA[@]}" --train_iters=2 --out_dir=cont2 --init-from "$step" '--lora.target_modules=["q_proj","v_proj"]' --lora.r=8 >cont2.log 2>&1 &&
    fail "lora.r disagreeing with the adapter was accepted"
grep -q "keys 'lora.\*' differ from the adapter's" cont2.log || fail "disagreeing lora.r: $(cat cont2.log)"
ok
# merge, and llmforge runs the merged directory
"$LF" merge --adapter "$step" --out merged >merge.log 2>&1 || fail "merge: $(cat merge.log)"
[ -f merged/config.json ] && [ -f merged/model.safetensors ] || fail "merged: $(ls merged)"
ok
IDS=3,1,4,1,5,9,2,6,5,3,5,8
"$LF" sample --ckpt merged --ids "$IDS" --max-new-tokens 1 --temperature 0 --json --threads 2 >lf.json 2>sample.err ||
    fail "sample merged: $(cat sample.err)"
ok
# the step directory runs as it is (its base, then the adapter: sample, eval and serve load it so),
# with the merged directory's logits (fp32 products in another order: 1e-5 of the largest)
"$LF" sample --ckpt "$step" --ids "$IDS" --max-new-tokens 1 --temperature 0 --json --threads 2 >lf_step.json 2>sample2.err ||
    fail "sample the LoRA step directory: $(cat sample2.err)"
python3 - lf_step.json lf.json <<'PY' || fail "the step directory's logits differ from the merged model's"
import json, sys
a, b = (json.load(open(p))["last_logits"] for p in sys.argv[1:3])
err, mx = max(abs(x - y) for x, y in zip(a, b)), max(abs(y) for y in b)
print("step directory vs merged: %.3g of the largest logit" % (err / mx))
sys.exit(0 if len(a) == len(b) and err <= 1e-5 * mx else 1)
PY
ok
# `llmforge bench` with lora.* in the configuration runs a LoRA step: AdamW on the adapters only
# (q_proj r*(64+64) + v_proj r*(64+32) per layer, r 4, 2 layers: 1792), the base's count unchanged
cat > bench.json <<'EOF'
{"model": {"arch": "llama", "n_layer": 2, "n_head": 4, "n_kv_head": 2, "n_embd": 64, "ffn_hidden": 128,
           "block_size": 32, "vocab_size": 97, "tie_embeddings": true, "dropout": 0.0}}
EOF
BENCH=(bench --config bench.json --micro-batch 2 --steps 1 --warmup 0 --threads 2 --peak-gflops 100 --json)
json_int() { printf '%s\n' "$1" | sed -n "s/.*\"$2\":\([0-9][0-9]*\).*/\1/p"; }
full=$("$LF" "${BENCH[@]}" 2>err.txt) || fail "bench full: $(cat err.txt)"
lora=$("$LF" "${BENCH[@]}" '--lora.target_modules=["q_proj","v_proj"]' --lora.r=4 2>err.txt) ||
    fail "bench lora: $(cat err.txt)"
[ "$(json_int "$full" trainable_params)" = "$(json_int "$full" num_params)" ] || fail "bench full trains $full"
[ "$(json_int "$lora" trainable_params)" = 1792 ] || fail "bench LoRA trains not the 1792 adapter floats: $lora"
[ "$(json_int "$lora" num_params)" = "$(json_int "$full" num_params)" ] || fail "bench LoRA base differs: $lora"
ok
[ -x "$PYHF" ] || { echo "SKIPPED: no Python with torch, transformers and peft ($PYHF); set LF_HF_PYTHON"; exit 0; }
"$PYHF" -c "import torch, transformers, peft" >imp.log 2>&1 || { echo "SKIPPED: $(tail -1 imp.log)"; exit 0; }
"$PYHF" "$SRC/tools/check_peft_adapter.py" --base "$BASE" --adapter "$step" --ids "$IDS" --merged merged \
    --compare lf.json >check.json 2>check.log || fail "PEFT: $(cat check.json) $(grep -v 'Loading weights' check.log | tail -5)"
ok
echo "PEFT: $(cat check.json)"
echo "$passed passed, 0 failed"
