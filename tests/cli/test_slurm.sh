#!/usr/bin/env bash
# Slurm, no ssh: a private single-node Slurm cluster on this machine (its own
# munged, slurmctld and slurmd, every file under one temporary directory,
# ports of its own, so it cannot meet a system Slurm), then
#   srun -n 2 --kill-on-bad-exit=1 --mpi=pmix llmforge train cfg.json
# must log the same per-step losses as one process with the same global batch
# (1e-5 relative), with ZeRO stage 0 and stage 3; `mpirun` inside an
# allocation (salloc) must too, with Open MPI's Slurm launcher (plm slurm:
# daemons through srun, never ssh); and a batch script that runs llmforge
# without srun (SLURM_NTASKS=2, one process) must be refused, exit non-zero.
#   test_slurm.sh LLMFORGE SOURCE_DIR SHARED_DIR
# Needs root, Slurm (slurmctld, slurmd, srun, sbatch, salloc, sinfo) and munge
# (scripts/setup.sh --test installs slurm-wlm and munge) and Open MPI's
# mpirun; without them, or when the daemons cannot start, it prints
# "SKIPPED: reason" and exits 0. Every daemon is stopped on exit.
set -u
bin=$1 src=$2 shared=$3
skip() { echo "SKIPPED: $*"; exit 0; }

command -v mpirun >/dev/null 2>&1 || skip "no mpirun"
mpirun --version 2>/dev/null | grep -q "Open MPI" || skip "mpirun is not Open MPI's (the test uses srun --mpi=pmix and plm slurm)"

# the cluster (tests/cli/slurm_cluster.sh, shared with test_sweep.sh)
. "$src/tests/cli/slurm_cluster.sh"
fail() {
  echo "FAIL: $*"
  [ -f "$dir/out" ] && { echo "--- output"; cat "$dir/out"; }
  for f in "$dir"/log/*.log; do [ -f "$f" ] && { echo "--- $(basename "$f") (tail)"; tail -n 15 "$f"; }; done
  exit 1
}

# Open MPI 4.1 starts under srun through PMIx only (no PMI-1/PMI-2 support)
srun --mpi=list >"$dir/mpilist" 2>&1 || fail "srun --mpi=list: $(cat "$dir/mpilist")"
grep -qw pmix "$dir/mpilist" || skip "Slurm has no PMIx plugin (srun --mpi=list: $(tr -s '\n\t ' ' ' <"$dir/mpilist")); Open MPI needs srun --mpi=pmix"
# more ranks than cores: let Slurm overcommit (and mpirun oversubscribe)
over=() ompi_over=()
[ "$cpus" -lt 2 ] && over=(--overcommit) ompi_over=(--oversubscribe)

. "$src/tests/train/mpi_cli_lib.sh"
tiny_job "$shared"
# a sanitizer build: LeakSanitizer skips Open MPI's own allocations, as in the MPI tests
[ -z "${LSAN_OPTIONS:-}" ] && [ -f "$src/tests/comm/lsan_mpi.supp" ] &&
  export LSAN_OPTIONS="suppressions=$src/tests/comm/lsan_mpi.supp:print_suppressions=0:fast_unwind_on_malloc=0"

"$bin" train "$dir/cfg.json" --threads 1 --out_dir="$dir/one" >"$dir/one.out" 2>&1 ||
  { cat "$dir/one.out"; fail "1-process run"; }

# timed LIMIT CMD...: output in $dir/out, sets rc and elapsed; reaching the bound is a hang
timed() {
  local limit=$1 t0 t1
  shift
  t0=$(date +%s.%N)
  # in the background, so that a TERM reaches the trap (and the teardown) at once
  timeout -k 5 "$limit" "$@" >"$dir/out" 2>&1 &
  child=$!
  wait "$child"
  rc=$?
  child=
  t1=$(date +%s.%N)
  elapsed=$(awk "BEGIN{printf \"%.1f\", $t1 - $t0}")
  [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "$* hung (stopped after $elapsed s)"
}
# same_losses WHAT RUN_DIR: 5 steps, each within 1e-5 relative of the single process's
same_losses() {
  [ "$(grep -c '"type":"train"' "$2/log.jsonl")" -eq 5 ] || fail "$1: log.jsonl should hold 5 train records"
  paste <(losses "$dir/one") <(losses "$2") | awk -v what="$1" -v t="$elapsed" '
    { d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > w) w = r; n++ }
    END { if (n != 5 || w > 1e-5) { printf "%s: losses differ: %d steps, worst relative %.3g\n", what, n, w; exit 1 }
          printf "%s = 1 process over %d steps (worst relative difference %.2g; %s s)\n", what, n, w, t }' ||
    fail "$1: losses differ from one process's"
}

# --- srun starts both ranks; MPI wires them up through Slurm's PMIx server
srun=(srun -n 2 "${over[@]}" --kill-on-bad-exit=1 --mpi=pmix)
echo "${srun[*]} $bin train cfg.json"
timed 60 "${srun[@]}" "$bin" train "$dir/cfg.json" --threads 1 --out_dir="$dir/two"
[ "$rc" -eq 0 ] || fail "srun -n 2 exited $rc"
grep -q "data parallel: 2 ranks (mpi, launched by slurm)" "$dir/out" || fail "no 'data parallel: 2 ranks (mpi, launched by slurm)' line"
[ "$(grep -c '^llmforge train:' "$dir/out")" -eq 1 ] || fail "the header should be printed once (rank 0)"
same_losses "srun -n 2 --mpi=pmix" "$dir/two"

timed 60 "${srun[@]}" "$bin" train "$dir/cfg.json" --threads 1 --zero_optimization.stage=3 --out_dir="$dir/zero3"
[ "$rc" -eq 0 ] || fail "srun -n 2 with ZeRO-3 exited $rc"
grep -q "data parallel: 2 ranks (mpi, launched by slurm)" "$dir/out" || fail "ZeRO-3: no data-parallel line"
same_losses "srun -n 2 --mpi=pmix, ZeRO-3" "$dir/zero3"

# --- mpirun inside an allocation: Open MPI takes the nodes from Slurm (ras slurm) and would
# start its daemons on other nodes with srun (plm slurm; rsh, i.e. ssh, is not even loaded)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
timed 60 salloc -n 2 "${over[@]}" mpirun "${ompi_over[@]}" --mca plm slurm --mca plm_base_verbose 10 -n 2 \
  "$bin" train "$dir/cfg.json" --threads 1 --out_dir="$dir/mpirun"
[ "$rc" -eq 0 ] || fail "salloc -n 2 mpirun -n 2 exited $rc"
grep -q "(  plm) Selected component \[slurm\]" "$dir/out" || fail "mpirun did not select its Slurm launcher"
! grep -q "found loaded component rsh" "$dir/out" || fail "mpirun loaded its rsh/ssh launcher"
grep -q "data parallel: 2 ranks (mpi, launched by openmpi)" "$dir/out" || fail "mpirun: no data-parallel line"
same_losses "salloc -n 2 mpirun -n 2 (plm slurm)" "$dir/mpirun"
unset OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM

# --- a batch script that runs llmforge itself: SLURM_PROCID=0 of SLURM_NTASKS=2, but MPI sees one
timed 60 sbatch -W -n 2 "${over[@]}" --chdir="$dir" -o "$dir/batch.out" \
  --wrap "exec $bin train $dir/cfg.json --threads 1 --out_dir=$dir/batch"
cat "$dir/batch.out" >>"$dir/out" 2>/dev/null
[ "$rc" -ne 0 ] || fail "a batch script running llmforge without srun succeeded"
grep -q "the launcher says SLURM_PROCID=0 of SLURM_NTASKS=2, but MPI_COMM_WORLD has rank 0 of 1 processes" "$dir/batch.out" ||
  fail "the batch job without srun: no launcher/MPI mismatch message"
grep -q "must start the ranks with srun" "$dir/batch.out" || fail "the mismatch message does not say to use srun"
[ ! -e "$dir/batch/log.jsonl" ] || fail "the refused batch job trained"
echo "sbatch -n 2 --wrap 'llmforge train …' (no srun) refused, job exit $rc: $(grep -o 'mpi communicator: .*' "$dir/batch.out" | head -1)"
# salloc runs its command outside any step: SLURM_NTASKS without SLURM_PROCID
timed 60 salloc -n 2 "${over[@]}" "$bin" train "$dir/cfg.json" --threads 1 --out_dir="$dir/salloc"
[ "$rc" -ne 0 ] || fail "salloc -n 2 llmforge train (no srun) succeeded"
grep -q "SLURM_NTASKS=2 is set but SLURM_PROCID is not" "$dir/out" || fail "salloc without srun: no SLURM_PROCID message"
echo "salloc -n 2 llmforge train (no srun) refused, exit $rc: $(grep -o 'Slurm launch: .*' "$dir/out" | head -1)"
echo "PASS"
