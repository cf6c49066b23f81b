#!/usr/bin/env bash
# Crash consistency with ZeRO-2 on 2 MPI ranks: tests/cli/crash_trials.sh in
# its zero2 mode (one rank, chosen at random, SIGKILLed at a seeded random
# time; mpirun must end the other; `--resume auto` on 2 ranks again; the final
# model byte-identical to an uninterrupted 2-rank ZeRO-2 run's). 3 trials
# here (each checks every promise; more only draw more kill times):
# LF_CRASH_TRIALS=N for N, bench/kill_trials.sh N zero2 for many more.
#   mpi_crash_cli.sh SHARED_DIR LLMFORGE MPIRUN [MPIRUN FLAGS...]
set -u
shared=$1 bin=$2
shift 2
exec bash "$(dirname "$0")/../cli/crash_trials.sh" "$bin" "$shared" "${LF_CRASH_TRIALS:-3}" "${LF_CRASH_SEED:-23}" zero2 "$@"
