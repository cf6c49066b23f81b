#!/usr/bin/env bash
# LoRA fine-tuning of the SmolLM-135M shape (issue 33): tokens/s and peak
# memory of llmforge full fine-tuning, llmforge LoRA, and transformers +
# PEFT LoRA on the same config, in the same run, alternating ROUNDS times;
# prints medians and ratios.
#   bench/lora.sh [ROUNDS] [STEPS]
# ROUNDS (default 3) rounds of STEPS (default 3) timed steps (+1 warmup) per
# implementation. B and T: $LF_LORA_B x $LF_LORA_T (default 4 x 256).
#
# Model: the smollm-135m shape (30 layers, hidden 576, 9 heads / 3 KV heads,
# SwiGLU 1536, vocab 49152, tied, rope_theta 10000, rms_norm_eps 1e-5) from
# random init, on random tokens. llmforge: `llmforge bench --config
# configs/llama_shakespeare_char.json` with --model.* overrides to that shape
# (the same model as --preset smollm-135m; --config so that the lora.* keys
# apply), and for LoRA --lora.target_modules=q_proj,k_proj,v_proj,o_proj
# --lora.r=16 --lora.alpha=32 --lora.dropout=0 (configs/lora_sft.json's
# adapters). transformers: bench/torch_llama_step.py --lora-r 16
# --lora-alpha 32 (LlamaForCausalLM wrapped by PEFT's get_peft_model with the
# same LoraConfig, AdamW on the trainable parameters). All on 2 threads
# (--threads 2, torch.set_num_threads(2)); no OMP_*/MKL_* variable is set.
# Step: zero_grad, forward, backward, clip 1.0, AdamW (on the adapters with
# LoRA). Peak memory: the maximum resident set size of each process
# (/usr/bin/time -v), which for Python includes the interpreter and the
# torch/transformers/peft imports (~0.5 GB before any model).
# BUILD (default build) is the CMake build directory; NO_BUILD=1 skips `make
# build` (use an existing $BUILD/llmforge).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
STEPS=${2:-3}
B=${LF_LORA_B:-4}
T=${LF_LORA_T:-256}
BUILD=${BUILD:-build}
. bench/venv.sh
[ "${NO_BUILD:-0}" = 1 ] || make -s build BUILD="$BUILD" >/dev/null
bench_env_report
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
echo "load before: $(uptime)"
SHAPE=(--config configs/llama_shakespeare_char.json --model.n_layer=30 --model.n_head=9 --model.n_kv_head=3
  --model.n_embd=576 --model.ffn_hidden=1536 --model.vocab_size=49152 --model.block_size="$T"
  --model.rope_theta=10000 --model.norm_eps=1e-5 --model.tie_embeddings=true --model.dropout=0)
LORA=(--lora.target_modules=q_proj,k_proj,v_proj,o_proj --lora.r=16 --lora.alpha=32 --lora.dropout=0)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# run NAME CMD...: the command's last stdout line (its JSON) with "peak_rss_kb" from /usr/bin/time -v added
run() {
  local name=$1; shift
  /usr/bin/time -v -o "$tmp/time" "$@" >"$tmp/out"
  local rss
  rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$tmp/time")
  tail -n 1 "$tmp/out" | "$LF_BENCH_PYTHON" -c 'import json,sys; d=json.loads(sys.stdin.read()); d["peak_rss_kb"]=int(sys.argv[1]); print(json.dumps(d))' "$rss"
}
results=()
for r in $(seq "$ROUNDS"); do
  l=$(run full "$BUILD"/llmforge bench "${SHAPE[@]}" --threads 2 --micro-batch "$B" --seq "$T" --steps "$STEPS" --warmup 1 --json)
  echo "llmforge-full round $r: $l"; results+=("llmforge-full $r $l")
  l=$(run lora "$BUILD"/llmforge bench "${SHAPE[@]}" "${LORA[@]}" --threads 2 --micro-batch "$B" --seq "$T" \
    --steps "$STEPS" --warmup 1 --json)
  echo "llmforge-lora round $r: $l"; results+=("llmforge-lora $r $l")
  t=$(run peft "$LF_BENCH_PYTHON" bench/torch_llama_step.py --preset smollm-135m --micro-batch "$B" --seq "$T" \
    --steps "$STEPS" --warmup 1 --threads 2 --lora-r 16 --lora-alpha 32 --lora-targets q_proj,k_proj,v_proj,o_proj)
  echo "peft-lora     round $r: $t"; results+=("peft-lora $r $t")
done
echo "load after: $(uptime)"
"$LF_BENCH_PYTHON" - "$B" "$T" "${results[@]}" <<'PY'
import json, statistics, sys
B, T = sys.argv[1], sys.argv[2]
runs = {}
for arg in sys.argv[3:]:
    impl, rnd, js = arg.split(" ", 2)
    runs.setdefault(impl, []).append(json.loads(js))
def med(k, key): return statistics.median(r[key] for r in runs[k])
n = len(runs["llmforge-full"])
print("\nmedians of %d round%s (smollm-135m shape, B %s x T %s, 2 threads):" % (n, "" if n == 1 else "s", B, T))
print("%-15s %14s %10s %10s %12s" % ("", "trainable", "ms/step", "tokens/s", "peak RSS MiB"))
for k in ("llmforge-full", "llmforge-lora", "peft-lora"):
    print("%-15s %14d %10.1f %10.1f %12.0f" % (k, runs[k][0]["trainable_params"], med(k, "ms_per_step"),
          med(k, "tokens_per_sec"), med(k, "peak_rss_kb") / 1024))
tps = {k: med(k, "tokens_per_sec") for k in runs}
rss = {k: med(k, "peak_rss_kb") for k in runs}
print("tokens/s  llmforge LoRA / llmforge full: %.3f" % (tps["llmforge-lora"] / tps["llmforge-full"]))
print("tokens/s  llmforge LoRA / PEFT LoRA:     %.3f" % (tps["llmforge-lora"] / tps["peft-lora"]))
print("peak RSS  llmforge LoRA / llmforge full: %.3f" % (rss["llmforge-lora"] / rss["llmforge-full"]))
print("peak RSS  llmforge LoRA / PEFT LoRA:     %.3f" % (rss["llmforge-lora"] / rss["peft-lora"]))
lo, pe = runs["llmforge-lora"][0], runs["peft-lora"][0]
if lo["trainable_params"] != pe["trainable_params"]:
    print("!! trainable parameters differ: llmforge %d, PEFT %d" % (lo["trainable_params"], pe["trainable_params"]))
print("PEFT %s, transformers %s, torch %s (BLAS %s); llmforge fp32 kernel %s" % (
    pe.get("peft_version"), pe.get("transformers_version"), pe.get("torch_version"), pe.get("blas"),
    lo.get("fp32_kernel")))
PY
