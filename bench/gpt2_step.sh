#!/usr/bin/env bash
# One GPT-2 124M training step (micro-batch 4, seq 256: forward, backward,
# clip 1.0, AdamW), llmforge beside PyTorch on the same machine in the same
# run, alternating ROUNDS times; prints medians and the ratio.
#   bench/gpt2_step.sh [ROUNDS] [STEPS]
# PyTorch: bench/torch_step.py, 2 threads, OMP_WAIT_POLICY=PASSIVE.
# Needs /usr/bin/python3 with Debian's python3-torch.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
STEPS=${2:-5}
make -s build >/dev/null
lf=(); pt=()
for r in $(seq "$ROUNDS"); do
  l=$(build/llmforge bench --threads 2 --preset gpt2-124m --micro-batch 4 --seq 256 --steps "$STEPS" --warmup 1 --json)
  echo "llmforge round $r: $l"
  lf+=("$l")
  p=$(OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 bench/torch_step.py --micro-batch 4 --seq 256 --steps "$STEPS" \
      --warmup 1 --threads 2 | tail -n 1)
  echo "pytorch  round $r: $p"
  pt+=("$p")
done
/usr/bin/python3 - "${#lf[@]}" "${lf[@]}" "${pt[@]}" <<'PY'
import json, statistics, sys
n = int(sys.argv[1])
lf = [json.loads(x) for x in sys.argv[2:2 + n]]
pt = [json.loads(x) for x in sys.argv[2 + n:]]
def med(rs, k): return statistics.median(r[k] for r in rs)
print("\n%-10s %12s %12s %14s %8s" % ("", "ms/step", "tokens/s", "GFLOP/s", "MFU"))
l_tps, p_tps = med(lf, "tokens_per_sec"), med(pt, "tokens_per_sec")
print("%-10s %12.1f %12.1f %14.1f %7.1f%%" % ("llmforge", med(lf, "ms_per_step"), l_tps,
      med(lf, "model_flops_per_sec") / 1e9, 100 * med(lf, "mfu")))
print("%-10s %12.1f %12.1f %14.1f %8s" % ("pytorch", med(pt, "ms_per_step"), p_tps,
      med(pt, "model_flops_per_sec") / 1e9, "-"))
print("throughput ratio llmforge/pytorch: %.3f" % (l_tps / p_tps))
PY
