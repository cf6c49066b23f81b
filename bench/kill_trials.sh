#!/usr/bin/env bash
# Crash consistency at scale: N trials (default 100) of
# tests/cli/crash_trials.sh — SIGKILL at seeded random times during a tiny
# run that checkpoints every 2 steps, `--resume auto` after each kill, up to
# 3 kills per trial — and the counts it prints: trials, kills (how many
# landed inside a save, how many before the first checkpoint), resumes,
# finals byte-identical to the uninterrupted run's, corrupt `latest` (must
# be 0). The first broken promise stops it with what broke.
#   bench/kill_trials.sh [N] [single|zero2] [SEED]
# zero2: ZeRO stage 2 on 2 ranks under mpirun, one rank killed each time.
# LLMFORGE=path picks the binary (default: `make build`, build/llmforge);
# TMPDIR picks the filesystem the runs write to (the default /tmp: a real
# disk, whose fsyncs make saves long enough for many kills to land in them).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-100}
MODE=${2:-single}
SEED=${3:-$RANDOM}
if [ -z "${LLMFORGE:-}" ]; then
  make -s build >/dev/null
  LLMFORGE=build/llmforge
fi
MPI=()
if [ "$MODE" = zero2 ]; then
  MPI=(mpirun)
  mpirun --version 2>/dev/null | grep -q "Open MPI" && MPI+=(--oversubscribe)
  [ "$(id -u)" -eq 0 ] && MPI+=(--allow-run-as-root)
fi
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); $N trials, mode $MODE, seed $SEED"
start=$(date +%s)
bash tests/cli/crash_trials.sh "$LLMFORGE" ../shared "$N" "$SEED" "$MODE" "${MPI[@]}"
echo "took $(($(date +%s) - start)) s"
