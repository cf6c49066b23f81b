#!/usr/bin/env bash
# torchrun-style launches without MPI: `llmforge launch --standalone` (the
# ranks started by the launcher itself, the tcp communicator), one launch per
# node, and a fake torchrun (only its environment variables).
#   test_launch_tcp.sh LLMFORGE SOURCE_DIR SHARED_DIR
# Checks:
#  1. bad inputs exit 2 naming the problem (--rdzv, tcp with --hostfile,
#     several nodes without --master-addr); --dry-run prints every rank's
#     variables and starts nothing.
#  2. `launch --standalone --nproc-per-node 2 -- train cfg.json` trains 5
#     steps of the tiny job with one process's losses (1e-5 relative, the
#     tolerance of the mpi DP tests: the gradient sums are a different but
#     exact-order fold of the same per-row terms, so only rounding of the
#     final division differs) and with the "tcp, launched by torchrun" line.
#  3. the same job as two launches of one rank each (--nnodes 2
#     --node-rank 0/1 --master-addr 127.0.0.1 --master-port P), as two
#     processes given torchrun's variables by hand (a fake torchrun; no MPI
#     anywhere, no mpirun on PATH), and — when Open MPI's mpirun is
#     installed — as `launch --rdzv mpi`: every final model.safetensors equals
#     the standalone run's byte for byte (the tcp and mpi kinds fold the
#     gradients in the same rank order, so the bits must agree exactly).
#  4. SIGUSR1 to the launcher reaches both ranks: they save the same step
#     and exit 75, and so does the launcher.
#  5. kill -9 of one rank mid-run: the other rank fails at once naming it,
#     the launcher exits 137 (the dead rank's status), no rank is left.
set -u
bin=$1 src=$2 shared=$3
case "$bin" in /*) ;; *) bin="$PWD/$bin" ;; esac
dir=$(mktemp -d "${TMPDIR:-/tmp}/lf_launch_tcp.XXXXXX")
job=
trap '[ -n "$job" ] && kill -9 $job 2>/dev/null; rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; [ -f "$dir/out" ] && { echo "--- output"; tail -n 40 "$dir/out"; }; exit 1; }

expect_error() {
  local want=$1
  shift
  timeout 10 "$bin" launch "$@" >"$dir/out" 2>&1
  local rc=$?
  [ "$rc" -eq 2 ] || fail "launch $* exited $rc, expected 2"
  grep -q -F -- "$want" "$dir/out" || fail "launch $* did not say '$want'"
}

# 1. bad inputs, --dry-run
expect_error "--rdzv expects tcp or mpi, got 'c10d'" --rdzv c10d -- train c.json
printf 'node-a slots=2\n' >"$dir/hosts"
expect_error "--rdzv tcp starts the ranks itself; --hostfile is for --rdzv mpi" --rdzv tcp --hostfile "$dir/hosts" -- train c.json
expect_error "--nnodes 2 with the tcp rendezvous needs --master-addr" --nnodes 2 --node-rank 1 -- train c.json
expect_error "--standalone is one node" --standalone --nnodes 2 -- train c.json
expect_error "--node-rank 2 is not below the 2 nodes" --rdzv tcp --nnodes 2 --node-rank 2 --master-addr h -- train c.json
timeout 10 "$bin" launch --nnodes 2 --node-rank 1 --master-addr node-a --nproc-per-node 2 --dry-run -- train c.json \
  >"$dir/out" 2>&1 || fail "--dry-run exited $?"
grep -q "node 1 of 2: ranks 2-3 of 4, tcp rendezvous at node-a:29500: .*llmforge.* train c.json" "$dir/out" ||
  fail "--dry-run: no plan line"
grep -q "RANK=3 WORLD_SIZE=4 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 GROUP_RANK=1 MASTER_ADDR=node-a MASTER_PORT=29500" \
  "$dir/out" || fail "--dry-run: rank 3's variables"
echo "1. bad inputs exit 2 with the problem named; --dry-run shows every rank's variables"

# the tiny job (tests/train/mpi_cli_lib.sh), saving its last step
. "$src/tests/train/mpi_cli_lib.sh"
tiny_job "$shared"
export OMP_NUM_THREADS=1
save=(--checkpoint.interval=5)
weights() { echo "$1/ckpt/step_00000005/model.safetensors"; }
"$bin" train "$dir/cfg.json" --out_dir="$dir/one" "${save[@]}" >"$dir/out" 2>&1 || fail "1-process run"

# run_launch LIMIT ARGS...: llmforge launch ARGS under a bound; sets rc
run_launch() {
  local limit=$1
  shift
  timeout -k 5 "$limit" "$bin" launch "$@" >"$dir/out" 2>&1
  rc=$?
  [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "launch $* hung"
}

# 2. standalone, 2 ranks, against one process
run_launch 120 --standalone --nproc-per-node 2 -- train "$dir/cfg.json" --out_dir="$dir/two" "${save[@]}"
[ "$rc" -eq 0 ] || fail "launch --standalone --nproc-per-node 2 -- train exited $rc"
grep -q "^llmforge: launch: node 0 of 1: ranks 0-1 of 2, tcp rendezvous at 127.0.0.1:[0-9]*: " "$dir/out" ||
  fail "the plan was not printed first"
grep -q "data parallel: 2 ranks (tcp, launched by torchrun)" "$dir/out" || fail "no data-parallel line over tcp"
[ "$(grep -c '"type":"train"' "$dir/two/log.jsonl")" -eq 5 ] || fail "log.jsonl should hold 5 train records"
paste <(losses "$dir/one") <(losses "$dir/two") | awk '
  { d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > w) w = r; n++ }
  END { if (n != 5 || w > 1e-5) { printf "losses differ: %d steps, worst relative %.3g\n", n, w; exit 1 }
        printf "2. launch --standalone --nproc-per-node 2 = 1 process over %d steps (worst relative %.2g)\n", n, w }' ||
  fail "the 2-rank losses differ from one process's"
[ -f "$(weights "$dir/two")" ] || fail "no final checkpoint in $dir/two"

# 3a. one launch per node (two "nodes" on this host)
port=$(( 20000 + RANDOM % 20000 ))
for r in 0 1; do
  timeout -k 5 120 "$bin" launch --nnodes 2 --node-rank $r --master-addr 127.0.0.1 --master-port $port \
    -- train "$dir/cfg.json" --out_dir="$dir/nodes" "${save[@]}" >"$dir/node$r.out" 2>&1 &
  eval "pid$r=$!"
done
wait "$pid0"; rc0=$?
wait "$pid1"; rc1=$?
cat "$dir/node0.out" "$dir/node1.out" >"$dir/out"
[ "$rc0" -eq 0 ] && [ "$rc1" -eq 0 ] || fail "two launches of one node each exited $rc0 and $rc1"
cmp -s "$(weights "$dir/two")" "$(weights "$dir/nodes")" || fail "--nnodes 2 weights differ from --standalone's"

# 3b. a fake torchrun: the variables by hand, no mpirun on PATH
mkdir -p "$dir/nompi"
port=$(( 20000 + RANDOM % 20000 ))
for r in 0 1; do
  timeout -k 5 120 env PATH="$dir/nompi" RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=localhost \
    MASTER_PORT=$port "$bin" train "$dir/cfg.json" --out_dir="$dir/fake" "${save[@]}" >"$dir/fake$r.out" 2>&1 &
  eval "pid$r=$!"
done
wait "$pid0"; rc0=$?
wait "$pid1"; rc1=$?
cat "$dir/fake0.out" "$dir/fake1.out" >"$dir/out"
[ "$rc0" -eq 0 ] && [ "$rc1" -eq 0 ] || fail "the fake torchrun's ranks exited $rc0 and $rc1"
grep -q "data parallel: 2 ranks (tcp, launched by torchrun)" "$dir/fake0.out" || fail "no tcp data-parallel line"
cmp -s "$(weights "$dir/two")" "$(weights "$dir/fake")" || fail "fake torchrun weights differ from --standalone's"

# 3c. the mpi kind, when Open MPI is here
if command -v mpirun >/dev/null 2>&1 && mpirun --version 2>/dev/null | grep -q "Open MPI"; then
  export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$src/tests/comm/lsan_mpi.supp:print_suppressions=0:fast_unwind_on_malloc=0}
  run_launch 120 --rdzv mpi --nproc-per-node 2 -- train "$dir/cfg.json" --out_dir="$dir/mpi" "${save[@]}"
  [ "$rc" -eq 0 ] || fail "launch --rdzv mpi exited $rc"
  grep -q "data parallel: 2 ranks (mpi" "$dir/out" || fail "no mpi data-parallel line"
  cmp -s "$(weights "$dir/two")" "$(weights "$dir/mpi")" || fail "the mpi kind's weights differ from the tcp kind's"
  echo "3. --nnodes 2 launches, a fake torchrun and mpirun: the same final weights as --standalone, byte for byte"
else
  echo "3. --nnodes 2 launches and a fake torchrun: the same final weights as --standalone, byte for byte (no Open MPI: mpi not compared)"
fi

# a long job for the signal tests: the step loop is still running when the signal comes
long=(--train_iters=100000 --checkpoint.interval=0 --steps_per_print=1)
wait_steps() { # wait_steps OUT_DIR: until log.jsonl has 3 train records (at most 60 s)
  for _ in $(seq 600); do
    [ -f "$1/log.jsonl" ] && [ "$(grep -c '"type":"train"' "$1/log.jsonl")" -ge 3 ] && return 0
    kill -0 "$job" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# 4. SIGUSR1 to the launcher: both ranks save the same step and exit 75
"$bin" launch --standalone --nproc-per-node 2 -- train "$dir/cfg.json" --out_dir="$dir/usr1" "${long[@]}" \
  >"$dir/out" 2>&1 &
job=$!
wait_steps "$dir/usr1" || fail "the long job did not start training"
kill -USR1 "$job"
timeout 60 tail --pid="$job" -f /dev/null
wait "$job"; rc=$?
job=
[ "$rc" -eq 75 ] || fail "SIGUSR1 to the launcher: exit $rc, expected 75"
[ "$(grep -c 'stopped at step' "$dir/out")" -ge 1 ] || fail "no 'stopped at step' message"
grep -q '"type":"preempted"' "$dir/usr1/log.jsonl" || fail "no preempted event in log.jsonl"
ls "$dir/usr1/ckpt" | grep -q '^step_' || fail "no checkpoint saved on SIGUSR1"
echo "4. SIGUSR1 to the launcher: both ranks checkpointed and exited 75, and so did the launcher"

# 5. kill -9 of rank 1: rank 0 fails at once naming it, the launcher exits 137
"$bin" launch --standalone --nproc-per-node 2 -- train "$dir/cfg.json" --out_dir="$dir/kill" "${long[@]}" \
  --comm.timeout_s=60 >"$dir/out" 2>&1 &
job=$!
wait_steps "$dir/kill" || fail "the long job did not start training"
ranks=$(pgrep -P "$job")
[ "$(echo "$ranks" | wc -w)" -eq 2 ] || fail "expected 2 ranks under the launcher, found: $ranks"
victim=$(for p in $ranks; do tr '\0' '\n' <"/proc/$p/environ" | grep -q '^RANK=1$' && echo "$p"; done)
[ -n "$victim" ] || fail "no rank 1 among $ranks"
t0=$(date +%s.%N)
kill -9 "$victim"
timeout 60 tail --pid="$job" -f /dev/null
wait "$job"; rc=$?
job=
t1=$(date +%s.%N)
[ "$rc" -eq 137 ] || fail "the launcher exited $rc, expected 137 (rank 1's SIGKILL)"
grep -q "rank 1 (pid $victim) was killed by signal 9" "$dir/out" || fail "the launcher did not name rank 1"
grep -q "rank 1 closed its connection" "$dir/out" || fail "rank 0 did not name rank 1"
for p in $ranks; do kill -0 "$p" 2>/dev/null && fail "rank pid $p is still running"; done
awk "BEGIN{exit !($t1 - $t0 < 20)}" || fail "the job took $(awk "BEGIN{print $t1 - $t0}") s to end after the kill"
echo "5. kill -9 of rank 1: rank 0 named it, the launcher exited 137 in $(awk "BEGIN{printf \"%.1f\", $t1 - $t0}") s"
echo "PASS"
