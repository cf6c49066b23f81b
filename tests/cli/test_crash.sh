#!/usr/bin/env bash
# Crash consistency in CI: 8 trials of tests/cli/crash_trials.sh (SIGKILL at
# seeded random times during a tiny run with a checkpoint every 2 steps,
# `--resume auto` after each kill; every `latest` verified, no temporaries
# piling up, the final model byte-identical to an uninterrupted run's).
# Each trial checks every promise; more trials only draw more kill times:
# LF_CRASH_TRIALS=N runs N here, bench/kill_trials.sh N (default 100) the
# same driver at scale.
#   test_crash.sh LLMFORGE SOURCE_DIR SHARED_DIR
set -u
bin=$1 src=$2 shared=$3
exec bash "$src/tests/cli/crash_trials.sh" "$bin" "$shared" "${LF_CRASH_TRIALS:-8}" "${LF_CRASH_SEED:-17}" single
