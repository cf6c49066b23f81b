#!/usr/bin/env bash
# Fault tests of the mpi communicator: nothing may hang.
#   mpi_faults.sh timeout T  MPI_COMM MPIRUN [MPIRUN FLAGS...]
#   (timeout-started T: the same with a reduce-scatter started
#   asynchronously, for nccl_comm)
#       3 ranks; rank 1 stalls before an all_reduce. Ranks 0 and 2 must
#       return LF_ERR_TIMEOUT after T s (+ at most 5 s of diagnosis) with a
#       message naming the collective, the step and rank 1, then end the job
#       with lf_comm_abort.
#   mpi_faults.sh mismatch T  MPI_COMM MPIRUN [MPIRUN FLAGS...]
#       3 ranks; rank 1 calls all_reduce with one element more. MPI notices
#       on some ranks (a receive larger than the message is legal, so not on
#       all); those report the error and abort; the job ends within T + 10 s.
#   mpi_faults.sh kill T  MPI_COMM MPIRUN [MPIRUN FLAGS...]
#       4 ranks looping over all_reduce; rank 2 raises SIGKILL at step 20.
#       Every process must be gone, none with success, within T + 10 s of
#       the kill. mpirun tears the job down itself here (Open MPI's and
#       MPICH's default).
#   mpi_faults.sh kill-survivors T  MPI_COMM MPIRUN [MPIRUN FLAGS...]
#       The same with mpirun told to keep the job running after a rank dies
#       (Open MPI 4: --mca orte_enable_recovery 1; MPICH: -disable-auto-cleanup):
#       now the 3 survivors must time out themselves, report rank 2 and end
#       the job with lf_comm_abort, within T + 10 s of the kill. Skipped for
#       other launchers.
set -u
mode=$1 T=$2 bin=$3
shift 3
mpirun=("$@")
dir=$(mktemp -d "${TMPDIR:-/tmp}/lf_mpi_faults.XXXXXX")
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; echo "--- output"; cat "$dir/out"; exit 1; }

case $mode in
timeout) np=3; args=(timeout "$T") ;;
timeout-started) np=3; args=(timeout-started "$T") ;;  # nccl_comm: a started (asynchronous) collective
mismatch) np=3; args=(mismatch "$T") ;;
kill) np=4; args=(kill "$T" "$dir") ;;
kill-survivors)
  np=4; args=(kill "$T" "$dir")
  version=$("${mpirun[0]}" --version 2>&1)
  if echo "$version" | grep -q -E "(Open MPI|OpenRTE)\)? 4\."; then
    mpirun+=(--mca orte_enable_recovery 1)
  elif echo "$version" | grep -q "HYDRA"; then
    mpirun+=(-disable-auto-cleanup)
  else
    echo "SKIPPED: no known way to keep this mpirun from tearing the job down: $(echo "$version" | head -1)"
    exit 0
  fi
  ;;
*) echo "usage: $0 timeout|timeout-started|mismatch|kill|kill-survivors T MPI_COMM MPIRUN [FLAGS...]"; exit 2 ;;
esac

echo "+ ${mpirun[*]} -n $np $bin ${args[*]}"
t0=$(date +%s.%N)
# the outer bound only catches a hang of the test itself
bound=$(awk "BEGIN{print int($T + 60)}")
timeout -k 5 "$bound" "${mpirun[@]}" -n "$np" "$bin" "${args[@]}" >"$dir/out" 2>&1
rc=$?
t1=$(date +%s.%N)
elapsed=$(awk "BEGIN{printf \"%.2f\", $t1 - $t0}")
# 124: timeout stopped it; 137 is also mpirun's own code for a rank killed by signal 9
if [ "$rc" -eq 124 ] || awk "BEGIN{exit !($elapsed >= $bound)}"; then
  fail "mpirun hung (stopped after $elapsed s)"
fi
# (Open MPI with recovery enabled exits 0 even after MPI_Abort: the ranks' reports count there)
[ "$rc" -ne 0 ] || [ "$mode" = kill-survivors ] || fail "mpirun exited 0; the job should have been aborted"
grep -q "FAIL" "$dir/out" && fail "a rank reported a failure"

case $mode in
timeout|timeout-started)
  n=$(grep -c "PASS timeout" "$dir/out")
  [ "$n" -eq 2 ] || fail "expected ranks 0 and 2 to report the timeout, got $n report(s)"
  # start-up of 3 ranks + T + diagnosis + 2 s pause before the abort
  limit=$(awk "BEGIN{print $T + 5 + 2 + 15}")
  awk "BEGIN{exit !($elapsed <= $limit)}" || fail "took $elapsed s (limit $limit s)"
  grep "PASS timeout" "$dir/out"
  echo "timeout test: mpirun exit $rc after $elapsed s (comm.timeout_s = $T)"
  ;;
mismatch)
  grep -q "PASS mismatch" "$dir/out" || fail "no rank reported the mismatch"
  limit=$(awk "BEGIN{print $T + 10 + 15}")
  awk "BEGIN{exit !($elapsed <= $limit)}" || fail "took $elapsed s (limit $limit s)"
  grep "^rank" "$dir/out"
  echo "mismatch test: mpirun exit $rc after $elapsed s"
  ;;
kill | kill-survivors)
  [ -s "$dir/killed_at" ] || fail "rank 2 did not reach its kill"
  after=$(awk "BEGIN{printf \"%.2f\", $t1 - $(cat "$dir/killed_at")}")
  limit=$(awk "BEGIN{print $T + 10}")
  awk "BEGIN{exit !($after <= $limit)}" || fail "the job ended $after s after the kill (limit $limit s)"
  npid=0
  for f in "$dir"/pid.*; do
    [ -e "$f" ] || continue
    npid=$((npid + 1))
    pid=$(cat "$f")
    # gone, or a zombie waiting to be reaped (it has exited) — give it 3 s
    for _ in $(seq 30); do
      st=$(ps -o stat= -p "$pid" 2>/dev/null) || break
      case $st in Z*) break ;; esac
      sleep 0.1
    done
    st=$(ps -o stat= -p "$pid" 2>/dev/null) && case $st in Z*) ;; *) fail "rank ${f##*.} (pid $pid) is still running" ;; esac
  done
  [ "$npid" -eq 4 ] || fail "only $npid of 4 ranks started"
  if [ "$mode" = kill-survivors ]; then
    for r in 0 1 3; do
      grep -q "rank $r: ERROR .*did not arrive: 2[;,]" "$dir/out" || fail "rank $r did not report that rank 2 is missing"
    done
    grep "rank [0-9]: ERROR" "$dir/out"
  fi
  if grep -q "rank [0-9]*: ERROR" "$dir/out"; then
    how="the survivors reported: $(grep -m1 "rank [0-9]*: ERROR" "$dir/out")"
  else
    how="mpirun tore the job down: $(grep -m1 -i -E "noticed|signal|killed" "$dir/out")"
  fi
  echo "kill test: every rank gone $after s after the kill (limit $limit s), mpirun exit $rc; $how"
  ;;
esac
echo "PASS"
