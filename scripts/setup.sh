#!/usr/bin/env bash
# Installs the Debian packages llmforge needs to build, test and run, when
# they are missing. As root it runs apt-get; otherwise it prints the command.
#   scripts/setup.sh          build + run dependencies
#   scripts/setup.sh --test   also what the tests need
set -euo pipefail
pkgs=(build-essential cmake pkg-config libopenblas-openmp-dev libdnnl-dev libcjson-dev libssl-dev zlib1g-dev
      libpcre2-dev libutf8proc-dev libmicrohttpd-dev libsnappy-dev libzstd-dev libyaml-dev libbrotli-dev liblz4-dev libsqlite3-dev libopenmpi-dev openmpi-bin
      fortunes fortunes-min)
if [ "${1:-}" = "--test" ]; then
  # promtool and a real Prometheus server check the /metrics endpoint;
  # GNU time measures peak memory in bench/prepare.sh;
  # iproute2 (ip netns, veth) makes two hosts on one machine for tests/cli/test_two_hosts.sh;
  # slurm-wlm and munge bring up a private one-node Slurm cluster for tests/cli/test_slurm.sh
  # python3-venv: a venv for the PyPI openai client that tests/cli/test_serve.sh drives the server with
  # chromium: the headless browser tests/cli/test_dashboard_browser.sh opens the dashboard and the report in
  # clang-format: tests' docs.clang_format checks the code against .clang-format
  pkgs+=(libcmocka-dev prometheus curl time iproute2 slurm-wlm munge python3-venv chromium clang-format)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "setup: installing missing packages: ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "setup: not root; run: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null
apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
