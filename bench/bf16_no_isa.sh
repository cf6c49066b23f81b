#!/usr/bin/env bash
# bf16.enabled against fp32 with and without bf16 instructions: `llmforge
# bench` of one preset, fp32 and --bf16, at this CPU's own oneDNN ISA and
# with ONEDNN_MAX_CPU_ISA=AVX2 (oneDNN capped below bf16: cpu-bf16 takes the
# path of CPUs without bf16 instructions, and the fp32 products run oneDNN's
# avx2 sgemm). Capping the ISA on a CPU that has AVX-512 is not a real AVX2
# CPU (same caches, memory and clocks; other code, e.g. our own kernels'
# compiler auto-vectorization, is unchanged), so it shows the ratio of the
# two paths, not an AVX2 machine's speed.
#   bench/bf16_no_isa.sh [PRESET] [ROUNDS] [BENCH ARGS...]
# PRESET defaults to gpt2-124m with --micro-batch 4 --seq 256 --steps 5
# --warmup 1 (other presets: the BENCH ARGS given, else bench's defaults),
# ROUNDS to 3. Variants run interleaved, round by round, so a load that
# comes and goes spreads over all; prints each run and the medians over
# rounds of ms/step and tokens/s, and bf16 / fp32 per ISA. OTHER=PATH adds
# the same --bf16 runs of another llmforge binary (e.g. an older build) under
# the capped ISA. BUILD (default build) is the CMake build directory.
set -euo pipefail
cd "$(dirname "$0")/.."
PRESET=${1:-gpt2-124m}
ROUNDS=${2:-3}
shift $(($# > 2 ? 2 : $#))
ARGS=("$@")
if [ ${#ARGS[@]} -eq 0 ] && [ "$PRESET" = gpt2-124m ]; then
  ARGS=(--micro-batch 4 --seq 256 --steps 5 --warmup 1)
fi
BUILD=${BUILD:-build}
LF="$BUILD/llmforge"
OUT=$(mktemp -d "${TMPDIR:-/tmp}/bf16_no_isa.XXXXXX")
trap 'rm -rf "$OUT"' EXIT
echo "preset $PRESET, ${ARGS[*]:-(bench defaults)}; $ROUNDS rounds; $(nproc) CPUs; load: $(cut -d' ' -f1-3 /proc/loadavg)"
# name|ONEDNN_MAX_CPU_ISA|binary|--bf16
variants=("fp32|||" "bf16|||--bf16" "fp32 avx2|AVX2||" "bf16 avx2|AVX2||--bf16")
[ -n "${OTHER:-}" ] && variants+=("bf16 avx2 OTHER|AVX2|$OTHER|--bf16")
for r in $(seq "$ROUNDS"); do
  for v in "${variants[@]}"; do
    IFS='|' read -r name isa bin bf <<<"$v"
    env ${isa:+ONEDNN_MAX_CPU_ISA=$isa} "${bin:-$LF}" bench --preset "$PRESET" "${ARGS[@]}" $bf --json \
      >"$OUT/run.json"
    /usr/bin/python3 - "$OUT/run.json" "$name" "$r" "$(cut -d' ' -f1 /proc/loadavg)" >>"$OUT/all.txt" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
k = r["bf16_kernel"] if r["bf16"] else r["fp32_kernel"]
print("%s\t%s\t%.2f\t%.1f\t%s\t%s" % (sys.argv[2], sys.argv[3], r["ms_per_step"], r["tokens_per_sec"], sys.argv[4], k))
PY
    tail -n 1 "$OUT/all.txt"
  done
done
/usr/bin/python3 - "$OUT/all.txt" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    name, _, ms, tps, _, kernel = line.rstrip("\n").split("\t")
    runs.setdefault(name, []).append((float(ms), float(tps), kernel))
print("\n%-18s %12s %10s  %s" % ("", "ms/step med", "tok/s med", "kernel"))
med = {}
for name, rs in runs.items():
    med[name] = statistics.median(r[0] for r in rs)
    print("%-18s %12.2f %10.1f  %s" % (name, med[name], statistics.median(r[1] for r in rs), rs[-1][2]))
for fp, bf in (("fp32", "bf16"), ("fp32 avx2", "bf16 avx2"), ("fp32 avx2", "bf16 avx2 OTHER")):
    if fp in med and bf in med:
        print("%s / %s: %.2fx the speed" % (bf, fp, med[fp] / med[bf]))
PY
