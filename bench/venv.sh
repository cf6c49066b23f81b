# shellcheck shell=bash
# bench/venv.sh -- sourced (`. bench/venv.sh`, from the repository root) by
# the benchmarks that run PyTorch. Makes sure a virtual environment with
# PyPI's PyTorch 2.x, numpy and transformers exists and exports
# LF_BENCH_PYTHON, the interpreter to run the PyTorch side with.
#
# Where: LF_BENCH_VENV, default $HOME/.cache/llmforge/bench-venv. When its
# python cannot `import torch, numpy, transformers`, it is made with
# `python3 -m venv` (Debian: python3-venv) and filled with `pip install torch
# numpy transformers` (transformers: the Llama and decoding peers): PyPI's
# default torch wheel, the build a user gets from `pip install torch` (MKL
# and oneDNN on x86-64; on Linux it also brings the CUDA libraries, some GB
# on disk, so it is made only here, for the benchmarks, never by the build or
# the tests). A venv made another way (e.g. from PyTorch's own CPU-only
# index) is used as it is when LF_BENCH_VENV points to it.
# Two scripts starting at once do not install twice: the check and the
# install run under flock on $LF_BENCH_VENV.lock.
#
# Debian's python3-torch (PyTorch 1.13 at /usr/bin/python3) stays what the
# fixture generators under tools/ are written for; the benchmarks do not use it.
#
# Also defines bench_env_report: one line per fact about the environment a
# benchmark ran in (CPUs, load, OPENBLAS_CORETYPE and the other threading and
# kernel variables that are set, the PyTorch build); the scripts print it.

LF_BENCH_VENV=${LF_BENCH_VENV:-$HOME/.cache/llmforge/bench-venv}

bench_venv_ok() {
  [ -x "$LF_BENCH_VENV/bin/python" ] && "$LF_BENCH_VENV/bin/python" -c "import torch, numpy, transformers" 2>/dev/null
}

if ! bench_venv_ok; then
  mkdir -p "$(dirname "$LF_BENCH_VENV")"
  exec 9>"$LF_BENCH_VENV.lock"
  if ! flock -n 9; then
    echo "bench: another process is setting up $LF_BENCH_VENV; waiting for it" >&2
    flock 9
  fi
  if ! bench_venv_ok; then
    if [ ! -x "$LF_BENCH_VENV/bin/python" ]; then
      echo "bench: making the virtual environment $LF_BENCH_VENV (python3 -m venv)" >&2
      python3 -m venv "$LF_BENCH_VENV" ||
        { echo "bench: python3 -m venv failed; on Debian: apt-get install python3-venv" >&2; exec 9>&-; return 1; }
    fi
    echo "bench: pip install torch numpy transformers into $LF_BENCH_VENV (PyPI's default wheel, a few GB; once)" >&2
    "$LF_BENCH_VENV/bin/python" -m pip install --quiet torch numpy transformers >&2 ||
      { echo "bench: pip install torch numpy transformers failed (see above)" >&2; exec 9>&-; return 1; }
    bench_venv_ok ||
      { echo "bench: $LF_BENCH_VENV/bin/python still cannot import torch, numpy, transformers" >&2; exec 9>&-; return 1; }
  fi
  exec 9>&-
fi
export LF_BENCH_VENV
export LF_BENCH_PYTHON="$LF_BENCH_VENV/bin/python"

bench_env_report() {
  echo "machine: $(nproc) CPUs ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)), load average $(cut -d' ' -f1-3 /proc/loadavg)"
  if awk -v l="$(cut -d' ' -f1 /proc/loadavg)" -v n="$(nproc)" 'BEGIN { exit !(l > n / 2) }'; then
    echo "!! the machine is busy (load average above half its CPUs): the figures and ratios will be noisy and"
    echo "!! need not hold on an idle machine (2 threads that wait for each other suffer from other processes)"
  fi
  # The scripts set none of these; whatever is shown came from the caller.
  if [ -n "${OPENBLAS_CORETYPE+x}" ]; then
    echo "OPENBLAS_CORETYPE: set in the environment to '$OPENBLAS_CORETYPE' (inherited; the benchmarks never set it)"
  else
    echo "OPENBLAS_CORETYPE: not set"
  fi
  local tuning
  tuning=$(env | grep -E '^(OMP|KMP|GOMP|MKL|OPENBLAS|DNNL|ONEDNN|TORCH|ATEN|PYTORCH)_' | grep -v '^OPENBLAS_CORETYPE=' |
    sort | tr '\n' ' ' || true)
  echo "other threading/kernel variables in the environment: ${tuning:-none}"
  "$LF_BENCH_PYTHON" "$(dirname "${BASH_SOURCE[0]}")/torch_common.py"
}
