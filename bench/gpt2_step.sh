#!/usr/bin/env bash
# One GPT-2 124M training step (micro-batch 4, seq 256: forward, backward,
# clip 1.0, AdamW), llmforge beside PyTorch on the same machine in the same
# run, alternating ROUNDS times; prints medians and the ratio.
#   bench/gpt2_step.sh [--bf16] [ROUNDS] [STEPS]
# --bf16 adds llmforge with bf16 matmuls (`llmforge bench --bf16`, the
# cpu-bf16 backend) and PyTorch under torch.autocast("cpu", dtype=bfloat16),
# so four runs per round, and prints the bf16/fp32 speed-ups and the
# llmforge/PyTorch ratio of each precision.
# PyTorch: bench/torch_step.py, 2 threads, OMP_WAIT_POLICY=PASSIVE.
# Needs /usr/bin/python3 with Debian's python3-torch. BUILD (default build)
# is the CMake build directory `make build` fills.
set -euo pipefail
cd "$(dirname "$0")/.."
BF16=0
if [ "${1:-}" = "--bf16" ]; then BF16=1; shift; fi
ROUNDS=${1:-3}
STEPS=${2:-5}
BUILD=${BUILD:-build}
make -s build BUILD="$BUILD" >/dev/null
precisions=(fp32)
[ "$BF16" = 1 ] && precisions+=(bf16)
results=()
for r in $(seq "$ROUNDS"); do
  for p in "${precisions[@]}"; do
    flag=(); [ "$p" = bf16 ] && flag=(--bf16)
    l=$("$BUILD"/llmforge bench --threads 2 --preset gpt2-124m --micro-batch 4 --seq 256 --steps "$STEPS" \
        --warmup 1 --json "${flag[@]}")
    echo "llmforge $p round $r: $l"
    results+=("llmforge $p $l")
    t=$(OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 bench/torch_step.py --micro-batch 4 --seq 256 --steps "$STEPS" \
        --warmup 1 --threads 2 "${flag[@]}" | tail -n 1)
    echo "pytorch  $p round $r: $t"
    results+=("pytorch $p $t")
  done
done
/usr/bin/python3 - "${results[@]}" <<'PY'
import json, statistics, sys
runs = {}
for arg in sys.argv[1:]:
    impl, prec, js = arg.split(" ", 2)
    runs.setdefault((impl, prec), []).append(json.loads(js))
def med(k, key): return statistics.median(r[key] for r in runs[k])
print("\n%-16s %12s %12s %14s %8s" % ("", "ms/step", "tokens/s", "GFLOP/s", "MFU"))
for k in runs:
    mfu = "%7.1f%%" % (100 * med(k, "mfu")) if k[0] == "llmforge" else "%8s" % "-"
    print("%-16s %12.1f %12.1f %14.1f %s" % (" ".join(k), med(k, "ms_per_step"), med(k, "tokens_per_sec"),
          med(k, "model_flops_per_sec") / 1e9, mfu))
tps = {k: med(k, "tokens_per_sec") for k in runs}
if ("llmforge", "bf16") in runs and runs[("llmforge", "bf16")][0].get("bf16_kernel"):
    print("llmforge bf16 kernel: %s" % runs[("llmforge", "bf16")][0]["bf16_kernel"])
for p in ("fp32", "bf16"):
    if ("llmforge", p) in tps:
        print("throughput ratio llmforge/pytorch %s: %.3f" % (p, tps[("llmforge", p)] / tps[("pytorch", p)]))
if ("llmforge", "bf16") in tps:
    print("bf16/fp32 speed-up: llmforge %.3f, pytorch %.3f" % (
        tps[("llmforge", "bf16")] / tps[("llmforge", "fp32")], tps[("pytorch", "bf16")] / tps[("pytorch", "fp32")]))
PY
