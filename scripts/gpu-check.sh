#!/usr/bin/env bash
# The GPU check of the CUDA backend (issue 15; docs/gpu.md): the gpu-labelled
# tests, the measured fp32 and bf16 GEMM peaks, and training-step benchmarks of
# llmforge's "cuda" backend beside PyTorch on the same GPU, in one run of at
# most GPU_CHECK_BUDGET_S seconds (default 420: the GPU machine is lent for 15
# minutes in all, its start and the transfers included, so build + tests +
# bench get at most 8).
#
# Two halves, because the GPU machine of this project (the `device` tool; see
# /work/.library/device/README.md) has CUDA 13, CMake and ninja but no
# package registry, and not the Debian libraries llmforge links (OpenBLAS,
# oneDNN, cJSON, PCRE2, ...), so the build happens here:
#   scripts/gpu-check.sh prepare
#       here: configures and builds GPU_CHECK_BUILD_DIR (default build-gpu;
#       Release, LF_CUDA=ON: sm_80 + sm_90 SASS + compute_90 PTX, -Werror)
#       and packs out/gpu-bundle.tar.gz (< 60 MiB): the CLI, every gpu test
#       binary (`ctest -N -L gpu`), bench/cuda_peak, the shared libraries they
#       load except the C library's, the loader's, the driver's, CUDA's own
#       (cudart and cuBLASLt come from the machine's toolkit) and NCCL's (the
#       image's pip wheel nvidia-nccl-cu13; run puts its lib/ on the path), and COMMIT.
#       Needs the build dependencies installed (scripts/setup.sh --test).
#   scripts/gpu-check.sh run
#       on the GPU machine, through the device tool:
#         run(command="bash scripts/gpu-check.sh run",
#             carry=["out/gpu-bundle.tar.gz"], timeout_s=540)
#       unpacks the bundle into /tmp, checks that every binary finds its
#       libraries (ldd), prints nvidia-smi, runs each gpu test binary (a
#       failure is recorded, the run goes on), cuda_peak, then
#         llmforge --backend cuda bench --preset gpt2-124m --micro-batch 16 --seq 1024 --bf16
#         llmforge --backend cuda bench --preset gpt2-124m --micro-batch 8 --seq 1024
#         llmforge --backend cuda bench --preset smollm-135m --micro-batch 8 --seq 1024 --bf16
#       and bench/torch_step.py --device cuda at the GPT-2 fp32 shape (PyTorch
#       of the machine's image, fp32, TF32 off, as the cuda backend computes),
#       MFU of each against cuda_peak's measured rate of its precision (fp32
#       or bf16 cuBLASLt GEMMs). Every part has a
#       timeout inside what is left of the budget; a part that no longer fits
#       is recorded as skipped. Everything lands in $OUT/gpu-check/:
#       summary.md (printed at the end too), results.json (one object: the
#       machine, every part's verdict and figures), results.jsonl (the same,
#       a line a part) and logs.tar.gz (one log per part: the device tool
#       brings back 8 files at most). Record summary.md in docs/gpu.md with
#       the date.
# GPU_CHECK_QUICK=1 (run): 3 timed steps instead of 10, for a first look.
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
BUNDLE=out/gpu-bundle.tar.gz

prepare() {
  set -e
  local bd=${GPU_CHECK_BUILD_DIR:-build-gpu}
  cmake -S . -B "$bd" -DCMAKE_BUILD_TYPE=Release -DLF_WERROR=ON -DLF_TESTS=ON -DLF_CUDA=ON >/dev/null
  # the gpu test programs: gpu.test_x runs test_x_gpu
  local tests
  tests=$(ctest --test-dir "$bd" -N -L gpu | sed -n 's/.* gpu\.\(test_[a-z0-9_]*\)$/\1_gpu/p' | sort -u | tr '\n' ' ')
  [ -n "$tests" ] || { echo "gpu-check: no gpu-labelled tests in $bd (is LF_CUDA on?)" >&2; exit 1; }
  cmake --build "$bd" -j"$(nproc)" --target llmforge_cli cuda_peak $tests
  local stage=out/gpu-bundle
  rm -rf "$stage" && mkdir -p "$stage/bin" "$stage/tests" "$stage/lib"
  cp "$bd/llmforge" "$bd/cuda_peak" "$stage/bin/"
  for t in $tests; do cp "$bd/tests/$t" "$stage/tests/"; done
  # the shared libraries of every binary, but libc's, the loader's, the driver's, CUDA's and
  # NCCL's (218 MiB here; the GPU machine's image has it: pip's nvidia-nccl-cu13, found by run)
  for f in "$stage"/bin/* "$stage"/tests/*; do ldd "$f"; done | awk '$3 ~ /^\// {print $3}' | sort -u |
    grep -Ev '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so|/libcuda\.|/libcudart|/libcublas|/libnvidia|/libnccl' |
    while read -r lib; do cp -L "$lib" "$stage/lib/"; done
  git rev-parse --short HEAD >"$stage/COMMIT" 2>/dev/null || echo '?' >"$stage/COMMIT"
  tar -C out -czf "$BUNDLE" gpu-bundle
  local bytes mb
  bytes=$(stat -c %s "$BUNDLE")
  mb=$(( (bytes + 1048575) / 1048576 ))
  echo "gpu-check: $BUNDLE: $bytes bytes (~$mb MiB): $(ls "$stage/tests" | wc -l) test binaries ($tests), $(ls "$stage/lib" | wc -l) libraries"
  if [ "$bytes" -ge $((60 * 1048576)) ]; then echo "gpu-check: the bundle is over 60 MiB (the device tool carries 64 MiB with the tree)" >&2; exit 1; fi
}

# ---------------------------------------------------------------- run (the GPU machine)

T0=$SECONDS
left() { echo $(( ${GPU_CHECK_BUDGET_S:-420} - (SECONDS - T0) )); }
# cap N: a part's timeout, N seconds at most, within what is left (0: skip it)
cap() { local l; l=$(( $(left) - 10 )); [ "$l" -lt "$1" ] && echo $(( l > 0 ? l : 0 )) || echo "$1"; }

# record PART RC SECONDS LOG [EXTRA_JSON]: a line of results.jsonl and a row of summary.md
record() {
  local part=$1 rc=$2 secs=$3 log=$4 extra=${5:-} verdict=passed
  if [ "$rc" = skip ]; then verdict="skipped (out of time)"
  elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then verdict="TIMED OUT"
  elif [ "$rc" -ne 0 ]; then verdict="FAILED (rc $rc)"
  elif grep -q "SKIPPED" "$log" 2>/dev/null; then verdict=skipped
  fi
  echo "| $part | $verdict | $secs |" >>"$sum"
  printf '{"part":"%s","rc":"%s","verdict":"%s","seconds":%s%s}\n' "$part" "$rc" "$verdict" "$secs" "${extra:+,$extra}" >>"$res"
}

run() {
  local out=${OUT:-out/gpu-check-local}/gpu-check
  mkdir -p "$out/logs"
  res=$out/results.jsonl sum=$out/summary.md
  : >"$res"
  if [ ! -f "$BUNDLE" ]; then
    echo "gpu-check: $BUNDLE missing: run 'scripts/gpu-check.sh prepare' here and carry it" | tee "$sum"
    exit 1
  fi
  local dir=/tmp/lf-gpu-check
  rm -rf "$dir" && mkdir -p "$dir" && tar -C "$dir" -xzf "$BUNDLE"
  local b=$dir/gpu-bundle cuda_lib
  cuda_lib=$(dirname "$(readlink -f "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")")/../lib64
  # NCCL (and CUDA's libraries, where the toolkit lacks them) from the image's pip wheels (nvidia-*)
  local pip_libs
  pip_libs=$(python3 -c 'import glob, sysconfig
d = sysconfig.get_paths()["purelib"]
print(":".join(sorted(glob.glob(d + "/nvidia/*/lib") + glob.glob(d + "/nvidia/*/*/lib"))))' 2>/dev/null)
  export LD_LIBRARY_PATH="$b/lib:$cuda_lib:/usr/local/cuda/lib64${pip_libs:+:$pip_libs}:${LD_LIBRARY_PATH:-}"
  {
    echo "# GPU check, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(cat "$b/COMMIT")"
    echo
    echo '```'
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1 | head -5
    echo "nvcc: $(nvcc --version 2>/dev/null | tail -1)"
    echo '```'
  } >"$sum"
  nvidia-smi >"$out/logs/nvidia-smi.txt" 2>&1
  # every binary must find its libraries before anything runs
  local missing
  missing=$(for f in "$b"/bin/* "$b"/tests/*; do ldd "$f" | sed -n "s|^\s*\(.*not found\)|$(basename "$f"): \1|p"; done)
  if [ -n "$missing" ]; then
    printf '\n## Libraries missing on this machine\n\n```\n%s\n```\n' "$missing" >>"$sum"
    printf '{"part":"ldd","verdict":"FAILED","missing":"%s"}\n' "$(echo "$missing" | tr '\n"' '; ')" >>"$res"
  fi
  echo -e "\n## Parts (tests, then the peak and the benchmarks)\n\n| part | result | seconds |\n|---|---|---|" >>"$sum"
  local t name t0 rc to
  for t in "$b"/tests/*_gpu; do
    name=$(basename "$t") t0=$SECONDS to=$(cap 90)
    if [ "$to" -le 0 ]; then record "$name" skip 0 /dev/null; continue; fi
    CMOCKA_MESSAGE_OUTPUT=stdout timeout "$to" "$t" >"$out/logs/$name.log" 2>&1
    rc=$?
    record "$name" "$rc" $((SECONDS - t0)) "$out/logs/$name.log"
  done
  local peak_json peak=0 peak16=0
  t0=$SECONDS to=$(cap 60)
  if [ "$to" -gt 0 ]; then
    peak_json=$(timeout "$to" "$b/bin/cuda_peak" 2>"$out/logs/cuda_peak.err")
    rc=$?
    peak=$(echo "$peak_json" | python3 -c 'import json,sys; print(json.load(sys.stdin)["fp32_gemm_gflops"])' 2>/dev/null || echo 0)
    peak16=$(echo "$peak_json" | python3 -c 'import json,sys; print(json.load(sys.stdin)["bf16_gemm_gflops"])' 2>/dev/null || echo 0)
    [ -n "$peak" ] || peak=0
    [ -n "$peak16" ] || peak16=0
    record cuda_peak "$rc" $((SECONDS - t0)) /dev/null "\"fp32_gemm_gflops\":$peak,\"bf16_gemm_gflops\":$peak16"
  else
    record cuda_peak skip 0 /dev/null
  fi
  local steps=10
  [ "${GPU_CHECK_QUICK:-0}" = 1 ] && steps=3
  # preset, micro-batch, precision: issue 15's GPT-2 figure is bf16 at B16 x T1024;
  # MFU of each against the measured GEMM rate of its precision (none measured: no MFU)
  local rows="" spec preset mb prec pk j
  for spec in "gpt2-124m 16 bf16" "gpt2-124m 8 fp32" "smollm-135m 8 bf16"; do
    read -r preset mb prec <<<"$spec"
    pk=$peak
    [ "$prec" = bf16 ] && pk=$peak16
    [ "$pk" = 0 ] && pk=
    t0=$SECONDS to=$(cap 120)
    if [ "$to" -le 0 ]; then record "bench $preset B$mb $prec" skip 0 /dev/null; continue; fi
    j=$(timeout "$to" "$b/bin/llmforge" --backend cuda bench --preset "$preset" --micro-batch "$mb" --seq 1024 \
        $([ "$prec" = bf16 ] && echo --bf16) --steps "$steps" --warmup 2 ${pk:+--peak-gflops "$pk"} --json \
        2>"$out/logs/bench_${preset}_$prec.err" | tail -1)
    rc=$?
    record "bench $preset B$mb $prec" "$rc" $((SECONDS - t0)) /dev/null "\"result\":${j:-null}"
    rows+=$(echo "$j" | python3 -c '
import json, sys
name = "llmforge cuda %s B%s T1024 %s" % tuple(sys.argv[1:4])
try:
    d = json.load(sys.stdin)
    mfu = "%.1f%%" % (100 * d["mfu"]) if d.get("mfu") else "(no peak)"
    print("| %s | %.0f | %.1f | %s |" % (name, d["tokens_per_sec"], d["ms_per_step"], mfu))
except Exception:
    print("| %s | failed: see logs/bench_%s_%s.err | | |" % (name, sys.argv[1], sys.argv[3]))' "$preset" "$mb" "$prec")$'\n'
  done
  t0=$SECONDS to=$(cap 120)
  if [ "$to" -gt 0 ]; then
    j=$(timeout "$to" python3 bench/torch_step.py --device cuda --preset gpt2-124m --micro-batch 8 --seq 1024 \
        --steps "$steps" --warmup 2 2>"$out/logs/torch_step.err" | tail -1)
    rc=$?
    record "torch_step gpt2-124m" "$rc" $((SECONDS - t0)) /dev/null "\"result\":${j:-null}"
    rows+=$(echo "$j" | python3 -c '
import json, sys
peak = float(sys.argv[1] or 0)
try:
    d = json.load(sys.stdin)
    mfu = d["model_flops_per_sec"] / (peak * 1e9) if peak else 0
    print("| PyTorch %s cuda gpt2-124m B8 T1024 | %.0f | %.1f | %.1f%% |" % (d["torch_version"], d["tokens_per_sec"], d["ms_per_step"], 100 * mfu))
except Exception:
    print("| PyTorch cuda gpt2-124m | failed: see logs/torch_step.err | | |")' "$peak")$'\n'
  else
    record "torch_step gpt2-124m" skip 0 /dev/null
  fi
  {
    echo -e "\n## Benchmarks (MFU against the measured cuBLASLt GEMM rate of the run's precision: fp32 $peak, bf16 $peak16 GFLOP/s)\n"
    echo "| run | tokens/s | ms/step | MFU |"
    echo "|---|---|---|---|"
    printf '%s' "$rows"
    echo -e "\n$((SECONDS - T0)) s of the ${GPU_CHECK_BUDGET_S:-420} s budget used."
  } >>"$sum"
  # one object with every part, for scripts; a bad line (a part that printed no JSON) stays a string
  python3 - "$res" "$out/results.json" "$(cat "$b/COMMIT")" <<'EOF'
import json, subprocess, sys
parts = []
for line in open(sys.argv[1]):
    line = line.strip()
    if not line:
        continue
    try:
        parts.append(json.loads(line))
    except ValueError:
        parts.append({"unparsed": line})
try:
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
except OSError as e:
    gpu = "nvidia-smi: %s" % e
json.dump({"commit": sys.argv[3], "gpu": gpu, "parts": parts}, open(sys.argv[2], "w"), indent=1)
EOF
  tar -C "$out" -czf "$out/logs.tar.gz" logs && rm -rf "$out/logs"
  cat "$sum"
}

case "$mode" in
  prepare) prepare ;;
  run) run ;;
  *) echo "usage: scripts/gpu-check.sh prepare|run (see the header)" >&2; exit 2 ;;
esac
