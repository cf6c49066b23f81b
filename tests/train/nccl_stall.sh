#!/usr/bin/env bash
# A stalled rank in training on the cuda backend with the nccl communicator
# (through the CUDA and NCCL shims): nccl_dp stall on 4 ranks, ZeRO-3,
# comm.timeout_s 3, rank 2 sleeping 60 s at step 3 (the trainer's stall
# hook). The other ranks' next collective must time out naming rank 2 and
# the job must end (lf_comm_abort) well before rank 2 would wake up.
# (Stalls inside a device collective are nccl.timeout's: NCCL aborted.)
#   nccl_stall.sh NCCL_DP MPIRUN [MPIRUN FLAGS...]
# The bound on the collective itself (timeout + grace) is nccl.timeout's;
# here the whole job, start-up and 3 shim steps included, must end within
# 60 s, i.e. before the stalled rank's sleep is over.
set -u
bin=$1
shift
mpirun=("$@")
dir=$(mktemp -d "${TMPDIR:-/tmp}/lf_nccl_stall.XXXXXX")
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; echo "--- output"; tail -40 "$dir/out"; exit 1; }
t0=$(date +%s.%N)
timeout -k 5 120 "${mpirun[@]}" -n 4 "$bin" stall >"$dir/out" 2>&1
rc=$?
t1=$(date +%s.%N)
elapsed=$(awk "BEGIN{printf \"%.1f\", $t1 - $t0}")
grep -q "^SKIPPED" "$dir/out" && { cat "$dir/out"; exit 0; }
[ "$rc" -ne 0 ] || fail "a stalled rank went unnoticed (mpirun exited 0)"
awk "BEGIN{exit !($elapsed < 60)}" || fail "the job took $elapsed s to end (the stalled rank sleeps 60 s)"
# the survivors' next collective is the stop check after step 3 (host values:
# the nccl handle's control path, numbered as the nccl handle's collective)
n=$(grep -c "timed out on rank .*rank that did not arrive: 2;" "$dir/out")
[ "$n" -ge 1 ] || fail "no rank named the stalled rank 2"
grep -m1 "timed out on rank" "$dir/out"
echo "stalled rank 2: $n rank(s) named it, job ended in $elapsed s (mpirun exit $rc)"
echo "PASS"
