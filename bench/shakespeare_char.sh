#!/usr/bin/env bash
# nanoGPT's shakespeare_char CPU experiment, llmforge beside nanoGPT's loop on
# PyTorch 2.x, on the same machine in the same run, alternating ROUNDS times.
#   bench/shakespeare_char.sh [DATA.txt] [ITERS] [ROUNDS]
# DATA defaults to ../shared/data/tinyshakespeare.txt, ITERS to 2000 (the
# learning-rate schedule is stretched to ITERS), ROUNDS to 3 (each round
# trains both from scratch; about 3 minutes a round on 2 idle cores).
#
# Targets (at 2000 iterations): llmforge >= 2x faster per iteration than
# nanoGPT on PyTorch 2.x, with final validation loss <= 1.90.
#
# llmforge: configs/shakespeare_char_cpu.json, --threads 2.
# PyTorch: bench/torch_train_char.py (the reference GPT of tools/reference
# with nanoGPT's attention on 2.x, F.scaled_dot_product_attention, and
# nanoGPT's loop and CPU recipe) run by the PyPI PyTorch 2.x of
# bench/venv.sh (made on first use, see there), torch.set_num_threads(2),
# eager mode: nanoGPT's CPU recipe says --compile=False (torch.compile is its
# default only where its GPU recipes run). It reads the very shards llmforge
# prepared. Neither side gets hand tuning: the script sets no OMP_*/MKL_*/
# OPENBLAS_* variable (no OPENBLAS_CORETYPE either) and prints those the
# caller set.
# Prints per round and as medians over rounds: median ms/iter (the first 10
# iterations and evaluation excluded, as nanoGPT's loop times them apart),
# final val loss, MFU of both against llmforge's measured fp32 FMA peak
# (`llmforge bench --preset shakespeare-char-cpu --json` in the same round,
# which also gives FLOPs per token), the speed-up; and the PyTorch build
# (version, BLAS) and llmforge's fp32 kernel (`fp32 matmul:` of its train
# header, fp32_kernel of its bench JSON, when this llmforge reports them).
# BUILD (default build) is the CMake build directory `make build` fills.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${1:-../shared/data/tinyshakespeare.txt}
ITERS=${2:-2000}
ROUNDS=${3:-3}
BUILD=${BUILD:-build}
OUT=out/bench/shakespeare_char
. bench/venv.sh
make -s build BUILD="$BUILD" >/dev/null
rm -rf "$OUT"
mkdir -p "$OUT"
bench_env_report
"$BUILD"/llmforge prepare --char "$DATA" --out "$OUT/data" >/dev/null

results=()
for r in $(seq "$ROUNDS"); do
  echo "== round $r: llmforge ($ITERS iterations)"
  b=$("$BUILD"/llmforge bench --threads 2 --preset shakespeare-char-cpu --micro-batch 12 --seq 64 --steps 20 \
      --warmup 2 --json)
  "$BUILD"/llmforge train configs/shakespeare_char_cpu.json --threads 2 \
    --data.dataset="$OUT/data" --out_dir="$OUT/llmforge_$r" --train_iters="$ITERS" \
    --scheduler.decay_iters="$ITERS" --checkpoint.interval=0 --steps_per_print=250 >"$OUT/llmforge_$r.txt"
  grep -E "^(llmforge train:|cpu isa:|fp32 matmul:|bf16:)" "$OUT/llmforge_$r.txt" || true
  tail -n 2 "$OUT/llmforge_$r.txt"
  l=$("$LF_BENCH_PYTHON" - "$OUT/llmforge_$r/log.jsonl" "$OUT/llmforge_$r.txt" <<'PY'
import json, statistics, sys
steps, val = [], None
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["type"] == "train" and r["step"] > 10:
        steps.append(r["ms"])
    elif r["type"] == "eval":
        val = r["val_loss"]
kernel = None
for line in open(sys.argv[2]):
    if line.startswith("fp32 matmul:"):
        kernel = line.split(":", 1)[1].strip()
print(json.dumps({"impl": "llmforge", "median_ms_per_iter": statistics.median(steps), "final_val_loss": val,
                  "fp32_matmul": kernel}))
PY
)
  echo "llmforge round $r: $l"
  echo "llmforge bench round $r: $b"
  results+=("llmforge $r $l" "bench $r $b")

  echo "== round $r: PyTorch ($ITERS iterations)"
  t=$("$LF_BENCH_PYTHON" bench/torch_train_char.py "$OUT/data" --iters "$ITERS" --threads 2 --log-interval 250 |
      tee "$OUT/pytorch_$r.txt" | tail -n 1)
  grep -E "^(data:|pytorch:)" "$OUT/pytorch_$r.txt"
  tail -n 2 "$OUT/pytorch_$r.txt" | head -n 1
  echo "pytorch round $r: $t"
  results+=("pytorch $r $t")
done

"$LF_BENCH_PYTHON" - "$ITERS" "${results[@]}" <<'PY'
import json, statistics, sys
iters = int(sys.argv[1])
runs = {}   # impl -> {round: result}
for arg in sys.argv[2:]:
    impl, rnd, js = arg.split(" ", 2)
    runs.setdefault(impl, {})[rnd] = json.loads(js)
TOKENS_PER_ITER = 12 * 64   # batch 12 x block 64, both sides
for impl in ("llmforge", "pytorch"):
    for rnd, r in runs[impl].items():
        b = runs["bench"][rnd]
        r["mfu"] = TOKENS_PER_ITER * b["flops_per_token"] / (r["median_ms_per_iter"] / 1000) / b["peak_flops"]
def med(impl, key): return statistics.median(r[key] for r in runs[impl].values())
n = len(runs["llmforge"])
print("\nper round: ms/iter llmforge / pytorch")
for rnd in runs["llmforge"]:
    print("  round %s: %.2f / %.2f" % (rnd, runs["llmforge"][rnd]["median_ms_per_iter"],
                                      runs["pytorch"][rnd]["median_ms_per_iter"]))
print("\nmedians of %d round%s (%d iterations each):" % (n, "" if n == 1 else "s", iters))
print("%-10s %14s %15s %8s" % ("", "ms/iter (med)", "final val loss", "MFU"))
for impl in ("llmforge", "pytorch"):
    print("%-10s %14.2f %15.4f %7.1f%%" % (impl, med(impl, "median_ms_per_iter"), med(impl, "final_val_loss"),
                                        100 * med(impl, "mfu")))
b0 = next(iter(runs["bench"].values()))
pt0 = next(iter(runs["pytorch"].values()))
lf0 = next(iter(runs["llmforge"].values()))
print("MFU against llmforge's measured fp32 FMA peak of the same round: %s GFLOP/s; %.4g FLOPs/token" % (
    ", ".join("%.1f" % (r["peak_flops"] / 1e9) for r in runs["bench"].values()), b0["flops_per_token"]))
if abs(b0["flops_per_token"] - pt0["flops_per_token"]) > 1e-5 * pt0["flops_per_token"]:
    print("!! flops_per_token differs: llmforge %s, pytorch %s" % (b0["flops_per_token"], pt0["flops_per_token"]))
print("llmforge fp32 kernel: %s" % (lf0.get("fp32_matmul") or b0.get("fp32_kernel") or "(not reported by this llmforge)"))
print("pytorch: torch %s, BLAS %s, MKL available %s, oneDNN %s, attention %s" % (
    pt0.get("torch_version"), pt0.get("blas"), pt0.get("mkl_available"), pt0.get("onednn_version"),
    pt0.get("attention")))
lf_ms, pt_ms = med("llmforge", "median_ms_per_iter"), med("pytorch", "median_ms_per_iter")
speedup, val = pt_ms / lf_ms, med("llmforge", "final_val_loss")
print("ratio llmforge/pytorch ms/iter: %.3f  (speed-up %.2fx)" % (lf_ms / pt_ms, speedup))
print("targets%s: speed-up >= 2x: %s; llmforge val loss <= 1.90: %s" % (
    "" if iters == 2000 else " (set for 2000 iterations; this run had %d)" % iters,
    "met" if speedup >= 2 else "NOT met", "met" if val <= 1.90 else "NOT met"))
PY
