# A private single-node Slurm cluster on this machine, for the CLI tests
# (sourced, not run): its own munged, slurmctld and slurmd, every file under
# one temporary directory, ports of its own, so it cannot meet a system
# Slurm. Used by test_slurm.sh (srun/salloc/sbatch launches) and
# test_preempt_slurm.sh (preemption and requeue).
#   . "$(dirname "$0")/slurm_cluster.sh"
#   slurm_cluster_start [COMMAND...]   checks root and the Slurm and munge
#       commands (and COMMAND...), or prints "SKIPPED: reason" and exits 0;
#       brings the cluster up (SKIPPED when the daemons cannot start) and
#       sets: dir (the scratch directory, removed on exit), conf
#       (SLURM_CONF, exported), node, cpus, port, over (srun/salloc/sbatch
#       flags to overcommit a 1-CPU machine), ompi_over (mpirun's).
#   timed LIMIT CMD...  runs CMD (output in $dir/out), sets rc and elapsed;
#       reaching LIMIT seconds is a hang (fail).
#   fail MSG            prints MSG, $dir/out and the daemons' log tails; exit 1.
# Every daemon and every process of the cluster's jobs is stopped on exit.

skip() { echo "SKIPPED: $*"; exit 0; }

# a pid of ours still alive?
alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null; }
pid_of() { [ -s "$1" ] && cat "$1" 2>/dev/null; }
stop_pid() { # stop_pid PID: TERM, up to 5 s, then KILL
  local p=$1
  alive "$p" || return 0
  kill "$p" 2>/dev/null
  for _ in $(seq 50); do alive "$p" || return 0; sleep 0.1; done
  kill -9 "$p" 2>/dev/null
}
child=
dir=
cleanup() {
  [ -n "$dir" ] || return 0
  [ -n "$child" ] && kill "$child" 2>/dev/null # an interrupted srun/salloc/sbatch (its job is cancelled below)
  if [ -f "$dir/slurmctld.pid" ] && alive "$(pid_of "$dir/slurmctld.pid")"; then
    squeue -h -o %i 2>/dev/null | xargs -r scancel --quiet --full 2>/dev/null
    for _ in $(seq 50); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.1; done
  fi
  stop_pid "$(pid_of "$dir/slurmd.pid")"
  stop_pid "$(pid_of "$dir/slurmctld.pid")"
  stop_pid "$(pid_of "$dir/munge/munged.pid")"
  # anything left of this cluster: a slurmstepd (the daemons' marker in its environment) or a
  # task of a job (SLURM_JOB_ID and this SLURM_CONF); no other process has either
  local e p env
  for e in /proc/[0-9]*/environ; do
    p=${e#/proc/}
    p=${p%/environ}
    [ "$p" = $$ ] && continue
    env=$({ tr '\0' '\n' <"$e"; } 2>/dev/null) || continue
    if grep -qxF "$marker" <<<"$env" ||
      { grep -qxF "SLURM_CONF=$conf" <<<"$env" && grep -q '^SLURM_JOB_ID=' <<<"$env"; }; then
      kill -9 "$p" 2>/dev/null
    fi
  done
  rm -rf "$dir"
}
fail() {
  echo "FAIL: $*"
  [ -f "$dir/out" ] && { echo "--- output"; cat "$dir/out"; }
  for f in "$dir"/log/*.log; do [ -f "$f" ] && { echo "--- $(basename "$f") (tail)"; tail -n 15 "$f"; }; done
  exit 1
}
# skip_daemon WHAT LOG: the daemons could not be brought up here (say why)
skip_daemon() {
  local why=$1 log=$2
  [ -f "$log" ] && why="$why: $(grep -iE 'error|fatal' "$log" | tail -n 1)"
  skip "$why"
}

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

slurm_cluster_start() {
  [ "$(id -u)" -eq 0 ] || skip "not root (the private Slurm daemons run as root)"
  local c
  for c in munged munge slurmctld slurmd srun sbatch salloc sinfo squeue scancel scontrol "$@"; do
    command -v "$c" >/dev/null 2>&1 || skip "no '$c' (Debian: apt-get install slurm-wlm munge, or scripts/setup.sh --test)"
  done
  # nothing of an enclosing Slurm job or MPI launch may leak into the private cluster
  local v
  while read -r v; do unset "$v"; done < <(compgen -e | grep -E '^(SLURM|SBATCH|SALLOC|SRUN|PMIX|PMI|OMPI)_')
  dir=$(mktemp -d "${TMPDIR:-/tmp}/lf_slurm.XXXXXX")
  chmod 755 "$dir" # munged checks the directories above its socket
  conf=$dir/slurm.conf
  marker=LF_SLURM_TEST_DAEMON=$dir # in the daemons' environment (and their slurmstepd's): how cleanup finds them
  export SLURM_CONF=$conf
  trap cleanup EXIT
  trap 'exit 1' INT TERM
  # --- munge: its own key, socket, pid, log and seed files
  mkdir -p "$dir/munge" "$dir/state" "$dir/spool" "$dir/log"
  chmod 700 "$dir/state" "$dir/spool"
  head -c 1024 /dev/urandom >"$dir/munge/munge.key"
  chmod 400 "$dir/munge/munge.key"
  sock=$dir/munge/munge.socket
  env "$marker" munged --socket="$sock" --key-file="$dir/munge/munge.key" --pid-file="$dir/munge/munged.pid" \
    --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munged.seed" >"$dir/munged.out" 2>&1 ||
    skip "munged does not start: $(tail -n 1 "$dir/munged.out")"
  munge -S "$sock" -n 2>/dev/null | unmunge -S "$sock" >/dev/null 2>&1 || skip_daemon "munged does not answer" "$dir/log/munged.log"

  # --- slurm.conf: one node (this host at 127.0.0.1), one partition, free ports
  node=$(hostname -s 2>/dev/null || hostname)
  cpus=$(nproc)
  port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
  for _ in $(seq 20); do
    port=$((20000 + RANDOM % 20000))
    port_free "$port" && port_free $((port + 1)) && break
  done
  cat >"$conf" <<EOF
ClusterName=lftest$$
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
InactiveLimit=0
KillWait=2
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=100 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  env "$marker" slurmctld -f "$conf" >"$dir/slurmctld.out" 2>&1 ||
    skip_daemon "slurmctld does not start ($(tail -n 1 "$dir/slurmctld.out"))" "$dir/log/slurmctld.log"
  env "$marker" slurmd -f "$conf" -N "$node" >"$dir/slurmd.out" 2>&1 ||
    skip_daemon "slurmd does not start ($(tail -n 1 "$dir/slurmd.out"))" "$dir/log/slurmd.log"
  t0=$(date +%s.%N)
  state=
  for _ in $(seq 300); do # 30 s at most
    state=$(sinfo -h -n "$node" -o %t 2>/dev/null)
    [ "$state" = idle ] && break
    alive "$(pid_of "$dir/slurmd.pid")" || skip_daemon "slurmd exited" "$dir/log/slurmd.log"
    alive "$(pid_of "$dir/slurmctld.pid")" || skip_daemon "slurmctld exited" "$dir/log/slurmctld.log"
    sleep 0.1
  done
  [ "$state" = idle ] || skip_daemon "node $node not idle after 30 s (state '$state')" "$dir/log/slurmd.log"
  echo "private Slurm cluster up: node $node ($cpus CPUs) idle after $(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $t0}") s, slurmctld port $port"
  # more ranks than cores: let Slurm overcommit (and mpirun oversubscribe)
  over=() ompi_over=()
  [ "$cpus" -lt 2 ] && over=(--overcommit) ompi_over=(--oversubscribe)
  return 0
}
