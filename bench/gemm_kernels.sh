#!/usr/bin/env bash
# fp32 GEMM throughput of oneDNN's dnnl_sgemm (llmforge's default fp32
# kernel) and OpenBLAS's cblas_sgemm, one thread, on GPT-2 124M's products;
# once with OpenBLAS as it picks its kernel here and once with
# OPENBLAS_CORETYPE=Prescott (its generic kernel, what Debian's 0.3.21 runs on
# CPUs missing from its table). oneDNN must give the same figures in both.
#   bench/gemm_kernels.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(mktemp -d)/gemm_kernels
trap 'rm -rf "$(dirname "$bin")"' EXIT
cc -O2 -fopenmp bench/gemm_kernels.c -o "$bin" -I/usr/include/x86_64-linux-gnu/openblas-openmp \
  -L/usr/lib/x86_64-linux-gnu/openblas-openmp -Wl,-rpath,/usr/lib/x86_64-linux-gnu/openblas-openmp -lopenblas -ldnnl
echo "== OpenBLAS as it picks its kernel (OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset})"
"$bin"
echo "== OPENBLAS_CORETYPE=Prescott"
OPENBLAS_CORETYPE=Prescott "$bin"
