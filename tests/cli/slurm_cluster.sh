# A private single-node Slurm cluster for the CLI tests, brought up where
# this file is sourced (by test_slurm.sh and test_sweep.sh): its own munged,
# slurmctld and slurmd, every file under one temporary directory $dir,
# ports of its own, so it cannot meet a system Slurm; SLURM_CONF is
# exported. The caller defines skip MSG (which must exit): it is called
# when this is not root, when Slurm or munge is not installed, or when the
# daemons cannot start here (saying why). An EXIT trap (cleanup) cancels
# every job, stops the daemons, kills anything left of this cluster (a
# slurmstepd, a job's task) and removes $dir; the caller may set `child` to
# the pid of an srun/salloc/sbatch it runs in the background (killed first).
# Sets: dir conf marker node cpus port; defines alive, pid_of, stop_pid,
# cleanup, skip_daemon. A caller that waits on jobs with `sbatch --wait` and
# never looks a finished job up may set slurm_min_job_age=4 before sourcing:
# sbatch --wait polls after 2 s, then 8 s more, then 32 (while the poll is under
# MinJobAge / 2); with MinJobAge 4 it polls every 2 s (Slurm's default, 300 s,
# keeps finished jobs for `scontrol show job`, which test_preempt_slurm needs).

[ "$(id -u)" -eq 0 ] || skip "not root (the private Slurm daemons run as root)"
for c in munged munge slurmctld slurmd srun sbatch salloc sinfo squeue scancel; do
  command -v "$c" >/dev/null 2>&1 || skip "no '$c' (Debian: apt-get install slurm-wlm munge, or scripts/setup.sh --test)"
done

# nothing of an enclosing Slurm job or MPI launch may leak into the private cluster
while read -r v; do unset "$v"; done < <(compgen -e | grep -E '^(SLURM|SBATCH|SALLOC|SRUN|PMIX|PMI|OMPI)_')
dir=$(mktemp -d "${TMPDIR:-/tmp}/lf_slurm.XXXXXX")
chmod 755 "$dir" # munged checks the directories above its socket
conf=$dir/slurm.conf
marker=LF_SLURM_TEST_DAEMON=$dir # in the daemons' environment (and their slurmstepd's): how cleanup finds them
export SLURM_CONF=$conf

# a pid of ours still alive?
alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null; }
pid_of() { [ -s "$1" ] && cat "$1" 2>/dev/null; }
stop_pid() { # stop_pid PID...: TERM to each at once, up to 5 s for all, then KILL to those left
  # (slurmd, slurmctld and munged each take a second or two to exit: together, not one after another)
  local p left
  for p in "$@"; do alive "$p" && kill "$p" 2>/dev/null; done
  for _ in $(seq 50); do
    left=
    for p in "$@"; do alive "$p" && left=1; done
    [ -z "$left" ] && return 0
    sleep 0.1
  done
  for p in "$@"; do alive "$p" && kill -9 "$p" 2>/dev/null; done
  return 0
}
child=
cleanup() {
  [ -n "$child" ] && kill "$child" 2>/dev/null # an interrupted srun/salloc/sbatch (its job is cancelled below)
  if [ -f "$dir/slurmctld.pid" ] && alive "$(pid_of "$dir/slurmctld.pid")"; then
    squeue -h -o %i 2>/dev/null | xargs -r scancel --quiet --full 2>/dev/null
    for _ in $(seq 50); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.1; done
  fi
  stop_pid "$(pid_of "$dir/slurmd.pid")" "$(pid_of "$dir/slurmctld.pid")" "$(pid_of "$dir/munge/munged.pid")"
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
trap cleanup EXIT
trap 'exit 1' INT TERM
# skip_daemon WHAT LOG: the daemons could not be brought up here (say why)
skip_daemon() {
  local why=$1 log=$2
  [ -f "$log" ] && why="$why: $(grep -iE 'error|fatal' "$log" | tail -n 1)"
  skip "$why"
}

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
MinJobAge=${slurm_min_job_age:-300}
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
