#!/usr/bin/env bash
# One GPT-2 124M training step (micro-batch 4, seq 256: forward, backward,
# clip 1.0, AdamW), llmforge beside PyTorch 2.x on the same machine in the
# same run, alternating ROUNDS times; prints medians and the ratio.
#   bench/gpt2_step.sh [--bf16] [ROUNDS] [STEPS]
# ROUNDS (default 3) rounds of STEPS (default 5) timed steps (+1 warmup) per
# implementation and precision. --bf16 adds llmforge with bf16 matmuls
# (`llmforge bench --bf16`, the cpu-bf16 backend) and PyTorch under
# torch.autocast("cpu", dtype=bfloat16), so four runs per round, and prints
# the bf16/fp32 speed-ups and the llmforge/PyTorch ratio of each precision.
#
# Targets: fp32 tokens/s >= 1.2x PyTorch 2.x's; bf16 tokens/s >= 1.5x
# PyTorch 2.x's under bf16 autocast (both on 2 threads).
#
# PyTorch: bench/torch_step.py (the reference GPT of tools/reference with
# nanoGPT's attention on 2.x, F.scaled_dot_product_attention) run by the
# PyPI PyTorch 2.x of bench/venv.sh (made on first use, see there), eager
# mode as nanoGPT's CPU recipe (--compile=False), torch.set_num_threads(2).
# Neither side gets hand tuning: the script sets no OMP_*/MKL_*/OPENBLAS_*
# variable (no OPENBLAS_CORETYPE either) and prints those the caller set.
# MFU: both against llmforge's measured fp32 FMA peak (`peak_flops` of its
# JSON in the same round and precision). Printed too: the PyTorch build
# (version, BLAS) and the kernels llmforge names (fp32_kernel when this
# llmforge reports it, bf16_kernel).
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
    l=$("$BUILD"/llmforge bench --threads 2 --preset gpt2-124m --micro-batch 4 --seq 256 --steps "$STEPS" \
        --warmup 1 --json "${flag[@]}")
    echo "llmforge $p round $r: $l"
    results+=("llmforge $p $r $l")
    t=$("$LF_BENCH_PYTHON" bench/torch_step.py --micro-batch 4 --seq 256 --steps "$STEPS" \
        --warmup 1 --threads 2 "${flag[@]}" | tail -n 1)
    echo "pytorch  $p round $r: $t"
    results+=("pytorch $p $r $t")
  done
done
"$LF_BENCH_PYTHON" - "${results[@]}" <<'PY'
import json, statistics, sys
runs = {}   # (impl, precision) -> {round: result}
for arg in sys.argv[1:]:
    impl, prec, rnd, js = arg.split(" ", 3)
    runs.setdefault((impl, prec), {})[rnd] = json.loads(js)
def med(k, key): return statistics.median(r[key] for r in runs[k].values())
# PyTorch's MFU in a round: its model FLOP/s over the peak llmforge measured in that round
for (impl, prec), rs in runs.items():
    if impl == "pytorch":
        for rnd, r in rs.items():
            r["peak_flops"] = runs[("llmforge", prec)][rnd]["peak_flops"]
            r["mfu"] = r["model_flops_per_sec"] / r["peak_flops"]
n_rounds = len(runs[("llmforge", "fp32")])
print("\nmedians of %d round%s:" % (n_rounds, "" if n_rounds == 1 else "s"))
print("%-16s %12s %12s %14s %8s" % ("", "ms/step", "tokens/s", "GFLOP/s", "MFU"))
for k in runs:
    print("%-16s %12.1f %12.1f %14.1f %7.1f%%" % (" ".join(k), med(k, "ms_per_step"), med(k, "tokens_per_sec"),
          med(k, "model_flops_per_sec") / 1e9, 100 * med(k, "mfu")))
for p in ("fp32", "bf16"):
    if ("llmforge", p) in runs:
        print("MFU of both %s rows against llmforge's measured fp32 FMA peak of the same round: %s GFLOP/s" % (
            p, ", ".join("%.1f" % (r["peak_flops"] / 1e9) for r in runs[("llmforge", p)].values())))
lf32 = next(iter(runs[("llmforge", "fp32")].values()))
pt = next(iter(runs[("pytorch", "fp32")].values()))
print("llmforge fp32 kernel: %s" % (lf32.get("fp32_kernel") or "(not reported by this llmforge)"))
if ("llmforge", "bf16") in runs:
    print("llmforge bf16 kernel: %s" % (next(iter(runs[("llmforge", "bf16")].values())).get("bf16_kernel") or "?"))
print("pytorch: torch %s, BLAS %s, MKL available %s, oneDNN %s, attention %s" % (
    pt.get("torch_version"), pt.get("blas"), pt.get("mkl_available"), pt.get("onednn_version"), pt.get("attention")))
if abs(lf32["flops_per_token"] - pt["flops_per_token"]) > 1e-5 * pt["flops_per_token"]:
    print("!! flops_per_token differs: llmforge %s, pytorch %s" % (lf32.get("flops_per_token"), pt.get("flops_per_token")))
tps = {k: med(k, "tokens_per_sec") for k in runs}
targets = {"fp32": 1.2, "bf16": 1.5}
for p in ("fp32", "bf16"):
    if ("llmforge", p) in tps:
        ratio = tps[("llmforge", p)] / tps[("pytorch", p)]
        print("throughput ratio llmforge/pytorch %s: %.3f  (target >= %.1f: %s)" % (
            p, ratio, targets[p], "met" if ratio >= targets[p] else "NOT met"))
if ("llmforge", "bf16") in tps:
    print("bf16/fp32 speed-up: llmforge %.3f, pytorch %.3f" % (
        tps[("llmforge", "bf16")] / tps[("llmforge", "fp32")], tps[("pytorch", "bf16")] / tps[("pytorch", "fp32")]))
PY
