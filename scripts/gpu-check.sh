#!/usr/bin/env bash
# The GPU check of the CUDA backend (issue 15): the gpu-labelled tests, the
# measured fp32 GEMM peak, and training-step benchmarks of llmforge's "cuda"
# backend beside PyTorch on the same GPU, in one run of at most ~8 minutes.
#
# Two halves, because the GPU machine of this project (the `device` tool; see
# /work/.library/device/README.md) has no package registry and not the Debian
# libraries llmforge links (OpenBLAS, oneDNN, cJSON, PCRE2, ...):
#   scripts/gpu-check.sh prepare
#       here: builds build-gpu (Release, LF_CUDA=ON, sm_80 + sm_90 + PTX) and
#       packs out/gpu-bundle.tar.xz (< 64 MiB): the CLI, every gpu test binary,
#       bench/cuda_peak, and the shared libraries they need except the C
#       library's and CUDA's own (cudart and cuBLASLt come from the machine's
#       CUDA toolkit).
#   scripts/gpu-check.sh run
#       on the GPU machine (device tool: command "bash scripts/gpu-check.sh
#       run", carry ["out/gpu-bundle.tar.xz"], timeout_s 540): unpacks the
#       bundle, prints nvidia-smi, runs each gpu test binary (a failure is
#       recorded, the run goes on), cuda_peak, then
#         llmforge bench --preset gpt2-124m --micro-batch 8 --seq 1024
#         llmforge bench --preset smollm-135m --micro-batch 8 --seq 1024
#       with LLMFORGE_BACKEND=cuda, and bench/torch_step.py --device cuda at
#       the GPT-2 shape (PyTorch of the machine's image, fp32, TF32 off, as
#       the cuda backend computes), MFU of both against cuda_peak. Everything
#       lands in $OUT/gpu-check/ (summary.md, results.jsonl, one log per
#       part), which the device tool brings back; record summary.md in
#       docs/gpu.md with the date.
# GPU_CHECK_QUICK=1 (run): 3 timed steps instead of 10, for a first look.
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
BUNDLE=out/gpu-bundle.tar.xz

prepare() {
  set -e
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DLF_WERROR=ON -DLF_TESTS=ON -DLF_CUDA=ON >/dev/null
  cmake --build build-gpu -j"$(nproc)" --target llmforge_cli cuda_peak $(
    cd build-gpu && make help 2>/dev/null | sed -n 's/^\.\.\. \(test_[a-z0-9_]*_gpu\)$/\1/p' | tr '\n' ' ')
  local stage=out/gpu-bundle
  rm -rf "$stage" && mkdir -p "$stage/bin" "$stage/tests" "$stage/lib"
  cp build-gpu/llmforge build-gpu/cuda_peak "$stage/bin/"
  cp build-gpu/tests/*_gpu "$stage/tests/"
  # the shared libraries of every binary, but libc's, the loader's and CUDA's
  for f in "$stage"/bin/* "$stage"/tests/*; do ldd "$f"; done | awk '$3 ~ /^\// {print $3}' | sort -u |
    grep -Ev '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so|/libcuda|/libcudart|/libcublas|/libnvidia' |
    while read -r lib; do cp -L "$lib" "$stage/lib/"; done
  tar -C out -cJf "$BUNDLE" gpu-bundle
  local mb=$(( $(stat -c %s "$BUNDLE") / 1048576 ))
  echo "gpu-check: $BUNDLE: $mb MiB ($(ls "$stage/tests" | wc -l) test binaries, $(ls "$stage/lib" | wc -l) libraries)"
  if [ "$mb" -ge 60 ]; then echo "gpu-check: the bundle is over the device tool's 64 MiB carry" >&2; exit 1; fi
}

run() {
  local out=${OUT:-out/gpu-check-local}/gpu-check
  mkdir -p "$out"
  local res=$out/results.jsonl sum=$out/summary.md
  : >"$res"
  [ -f "$BUNDLE" ] || { echo "gpu-check: $BUNDLE missing: run 'scripts/gpu-check.sh prepare' here and carry it" | tee "$sum"; exit 1; }
  local dir=/tmp/lf-gpu-check
  rm -rf "$dir" && mkdir -p "$dir" && tar -C "$dir" -xJf "$BUNDLE"
  local b=$dir/gpu-bundle
  export LD_LIBRARY_PATH="$b/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}"
  {
    echo "# GPU check, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    echo
    echo '```'
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1 | head -5
    echo '```'
  } >"$sum"
  nvidia-smi >"$out/nvidia-smi.txt" 2>&1
  echo -e "\n## Tests\n\n| test | result | seconds |\n|---|---|---|" >>"$sum"
  for t in "$b"/tests/*_gpu; do
    local name=$(basename "$t") t0=$SECONDS rc
    CMOCKA_MESSAGE_OUTPUT=stdout timeout 150 "$t" >"$out/$name.log" 2>&1
    rc=$?
    local verdict=passed
    if [ $rc -ne 0 ]; then verdict="FAILED (rc $rc)"; elif grep -q "SKIPPED" "$out/$name.log"; then verdict=skipped; fi
    echo "| $name | $verdict | $((SECONDS - t0)) |" >>"$sum"
    echo "{\"test\": \"$name\", \"rc\": $rc, \"verdict\": \"$verdict\", \"seconds\": $((SECONDS - t0))}" >>"$res"
  done
  local peak_json peak
  peak_json=$(timeout 60 "$b/bin/cuda_peak" 2>"$out/cuda_peak.err")
  echo "$peak_json" >>"$res"
  peak=$(echo "$peak_json" | python3 -c 'import json,sys; print(json.load(sys.stdin)["fp32_gemm_gflops"])' 2>/dev/null || echo 0)
  echo -e "\n## Benchmarks (fp32; MFU against the measured fp32 GEMM rate, $peak GFLOP/s)\n" >>"$sum"
  local steps=10
  [ "${GPU_CHECK_QUICK:-0}" = 1 ] && steps=3
  echo "| run | tokens/s | ms/step | MFU |" >>"$sum"
  echo "|---|---|---|---|" >>"$sum"
  for preset in gpt2-124m smollm-135m; do
    local j
    j=$(LLMFORGE_BACKEND=cuda timeout 150 "$b/bin/llmforge" bench --preset "$preset" --micro-batch 8 --seq 1024 \
        --steps "$steps" --warmup 2 ${peak:+--peak-gflops "$peak"} --json 2>"$out/bench_$preset.err" | tail -1)
    echo "$j" >>"$res"
    echo "$j" | python3 -c '
import json, sys
try:
    d = json.load(sys.stdin)
    print("| llmforge cuda %s B8 T1024 | %.0f | %.1f | %.1f%% |" % (sys.argv[1], d["tokens_per_sec"], d["ms_per_step"], 100 * d.get("mfu", 0)))
except Exception:
    print("| llmforge cuda %s | failed: see bench_%s.err | | |" % (sys.argv[1], sys.argv[1]))' "$preset" >>"$sum"
  done
  local pj
  pj=$(timeout 150 python3 bench/torch_step.py --device cuda --preset gpt2-124m --micro-batch 8 --seq 1024 \
       --steps "$steps" --warmup 2 2>"$out/torch_step.err" | tail -1)
  echo "$pj" >>"$res"
  echo "$pj" | python3 -c '
import json, sys
peak = float(sys.argv[1] or 0)
try:
    d = json.load(sys.stdin)
    mfu = d["model_flops_per_sec"] / (peak * 1e9) if peak else 0
    print("| PyTorch %s cuda gpt2-124m B8 T1024 | %.0f | %.1f | %.1f%% |" % (d["torch_version"], d["tokens_per_sec"], d["ms_per_step"], 100 * mfu))
except Exception:
    print("| PyTorch cuda gpt2-124m | failed: see torch_step.err | | |")' "$peak" >>"$sum"
  cat "$sum"
}

case "$mode" in
  prepare) prepare ;;
  run) run ;;
  *) echo "usage: scripts/gpu-check.sh prepare|run (see the header)" >&2; exit 2 ;;
esac
