#!/usr/bin/env bash
# One Llama training step of the SmolLM-135M shape (micro-batch 4, seq 256:
# forward, backward, clip 1.0, AdamW), llmforge beside transformers'
# LlamaForCausalLM on PyTorch 2.x on the same machine in the same run,
# alternating ROUNDS times; prints medians and the ratio.
#   bench/llama_step.sh [--bf16] [ROUNDS] [STEPS]
# ROUNDS (default 3) rounds of STEPS (default 5) timed steps (+1 warmup) per
# implementation and precision. --bf16 adds llmforge with bf16 matmuls
# (`llmforge bench --bf16`, the cpu-bf16 backend) and transformers under
# torch.autocast("cpu", dtype=bfloat16), so four runs per round, and prints
# the bf16/fp32 speed-ups and the llmforge/transformers ratio of each
# precision.
#
# Targets: fp32 tokens/s >= 1.2x transformers'; bf16 tokens/s >= 1.5x
# transformers' under bf16 autocast (both on 2 threads).
#
# Model: `llmforge bench --preset smollm-135m` (30 layers, hidden 576, 9
# heads / 3 KV heads, SwiGLU 1536, vocab 49152, tied, rope_theta 10000,
# rms_norm_eps 1e-5) and, on the other side, bench/torch_llama_step.py: a
# transformers LlamaForCausalLM of the same LlamaConfig from random init, run
# by the PyPI PyTorch 2.x + transformers of bench/venv.sh (made on first use,
# see there): eager mode, attn_implementation "sdpa" (transformers' default),
# torch.set_num_threads(2). Both train on random tokens, B x T inputs against
# B x T targets.
# Neither side gets hand tuning: the script sets no OMP_*/MKL_*/OPENBLAS_*
# variable (no OPENBLAS_CORETYPE either) and prints those the caller set.
# MFU: both against llmforge's measured fp32 FMA peak (`peak_flops` of its
# JSON in the same round and precision), FLOPs per token 6N + 12*L*C*T (C =
# heads x head size), llmforge's flops_per_token; the script checks that the
# two sides count the same N. Printed too: the PyTorch and transformers
# versions and BLAS, and the kernels llmforge names (fp32_kernel,
# bf16_kernel).
# BUILD (default build) is the CMake build directory `make build` fills.
set -euo pipefail
cd "$(dirname "$0")/.."
BF16=0
if [ "${1:-}" = "--bf16" ]; then BF16=1; shift; fi
ROUNDS=${1:-3}
STEPS=${2:-5}
BUILD=${BUILD:-build}
. bench/venv.sh
make -s build BUILD="$BUILD" >/dev/null
bench_env_report
precisions=(fp32)
[ "$BF16" = 1 ] && precisions+=(bf16)
results=()
for r in $(seq "$ROUNDS"); do
  for p in "${precisions[@]}"; do
    flag=(); [ "$p" = bf16 ] && flag=(--bf16)
    l=$("$BUILD"/llmforge bench --threads 2 --preset smollm-135m --micro-batch 4 --seq 256 --steps "$STEPS" \
        --warmup 1 --json "${flag[@]}")
    echo "llmforge     $p round $r: $l"
    results+=("llmforge $p $r $l")
    t=$("$LF_BENCH_PYTHON" bench/torch_llama_step.py --preset smollm-135m --micro-batch 4 --seq 256 \
        --steps "$STEPS" --warmup 1 --threads 2 "${flag[@]}" | tail -n 1)
    echo "transformers $p round $r: $t"
    results+=("transformers $p $r $t")
  done
done
"$LF_BENCH_PYTHON" - "${results[@]}" <<'PY'
import json, statistics, sys
runs = {}   # (impl, precision) -> {round: result}
for arg in sys.argv[1:]:
    impl, prec, rnd, js = arg.split(" ", 3)
    runs.setdefault((impl, prec), {})[rnd] = json.loads(js)
def med(k, key): return statistics.median(r[key] for r in runs[k].values())
# transformers' MFU in a round: its model FLOP/s over the peak llmforge measured in that round
for (impl, prec), rs in runs.items():
    if impl == "transformers":
        for rnd, r in rs.items():
            r["peak_flops"] = runs[("llmforge", prec)][rnd]["peak_flops"]
            r["mfu"] = r["model_flops_per_sec"] / r["peak_flops"]
n_rounds = len(runs[("llmforge", "fp32")])
print("\nmedians of %d round%s (smollm-135m shape, B 4 x T 256, 2 threads):" % (n_rounds, "" if n_rounds == 1 else "s"))
print("%-18s %12s %12s %14s %8s" % ("", "ms/step", "tokens/s", "GFLOP/s", "MFU"))
for k in runs:
    print("%-18s %12.1f %12.1f %14.1f %7.1f%%" % (" ".join(k), med(k, "ms_per_step"), med(k, "tokens_per_sec"),
          med(k, "model_flops_per_sec") / 1e9, 100 * med(k, "mfu")))
for p in ("fp32", "bf16"):
    if ("llmforge", p) in runs:
        print("MFU of both %s rows against llmforge's measured fp32 FMA peak of the same round: %s GFLOP/s" % (
            p, ", ".join("%.1f" % (r["peak_flops"] / 1e9) for r in runs[("llmforge", p)].values())))
lf32 = next(iter(runs[("llmforge", "fp32")].values()))
hf = next(iter(runs[("transformers", "fp32")].values()))
print("llmforge fp32 kernel: %s" % (lf32.get("fp32_kernel") or "(not reported by this llmforge)"))
if ("llmforge", "bf16") in runs:
    print("llmforge bf16 kernel: %s" % (next(iter(runs[("llmforge", "bf16")].values())).get("bf16_kernel") or "?"))
print("transformers %s on torch %s, BLAS %s, MKL available %s, oneDNN %s, attention %s" % (
    hf.get("transformers_version"), hf.get("torch_version"), hf.get("blas"), hf.get("mkl_available"),
    hf.get("onednn_version"), hf.get("attention")))
print("parameters: llmforge %s, transformers %s; FLOPs/token %.6g" % (
    lf32.get("num_params"), hf.get("num_params"), lf32["flops_per_token"]))
if abs(lf32["flops_per_token"] - hf["flops_per_token"]) > 1e-5 * hf["flops_per_token"]:
    print("!! flops_per_token differs: llmforge %s, transformers %s" % (lf32["flops_per_token"], hf["flops_per_token"]))
tps = {k: med(k, "tokens_per_sec") for k in runs}
targets = {"fp32": 1.2, "bf16": 1.5}
for p in ("fp32", "bf16"):
    if ("llmforge", p) in tps:
        ratio = tps[("llmforge", p)] / tps[("transformers", p)]
        print("throughput ratio llmforge/transformers %s: %.3f  (target >= %.1f: %s)" % (
            p, ratio, targets[p], "met" if ratio >= targets[p] else "NOT met"))
if ("llmforge", "bf16") in tps:
    print("bf16/fp32 speed-up: llmforge %.3f, transformers %.3f" % (
        tps[("llmforge", "bf16")] / tps[("llmforge", "fp32")],
        tps[("transformers", "bf16")] / tps[("transformers", "fp32")]))
PY
