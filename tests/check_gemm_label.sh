#!/usr/bin/env bash
# Keeps the CTest label `gemm` honest (docs/testing.md).
#   tests/check_gemm_label.sh reset TRACE_DIR
#   tests/check_gemm_label.sh check TRACE_DIR BUILD_DIR
# Every test runs with LF_GEMM_TRACE=TRACE_DIR/<test name>; a process that
# computes an fp32 matrix product (lf__cpu_sgemm, the CUDA shim's cuBLASLt
# matmul: src/core/gemm_trace.h) creates that file. `check` runs after the
# tests (a CTest fixture cleanup) and fails, naming them, when a test that
# left a file is not labelled `gemm`: the CI pass on OpenBLAS's generic
# kernel runs `ctest -L gemm` alone, so such a test would escape it.
set -euo pipefail
mode=${1:?usage: check_gemm_label.sh reset|check TRACE_DIR [BUILD_DIR]}
dir=${2:?TRACE_DIR missing}
case $mode in
reset)
  rm -rf "$dir"
  mkdir -p "$dir"
  ;;
check)
  build=${3:?BUILD_DIR missing}
  [ -d "$dir" ] || { echo "check_gemm_label: no trace directory '$dir'"; exit 1; }
  labelled=$(cd "$build" && ctest -N -L '^gemm$' | sed -n 's/^ *Test *#[0-9]*: *//p')
  traced=0 missing=()
  for f in "$dir"/*; do
    [ -e "$f" ] || continue
    traced=$((traced + 1))
    name=$(basename "$f")
    grep -qxF "$name" <<<"$labelled" || missing+=("$name")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "check_gemm_label: these tests computed an fp32 GEMM but lack the label 'gemm' (tests/CMakeLists.txt,"
    echo "lf_gemm_tests), so the OpenBLAS generic-kernel pass of .ci/run would not run them:"
    printf '  %s\n' "${missing[@]}"
    exit 1
  fi
  echo "check_gemm_label: $traced tests of this run computed an fp32 GEMM; all are labelled gemm"
  ;;
*)
  echo "check_gemm_label: unknown mode '$mode'"
  exit 2
  ;;
esac
