#!/usr/bin/env bash
# Preemption and requeue on the private Slurm cluster (tests/cli/slurm_cluster.sh),
# with the batch script of docs/checkpoints.md ("Slurm"):
#   #SBATCH --requeue, --open-mode=append; srun llmforge train ... --resume auto
#   --checkpoint.requeue=true in the background; the shell traps SIGUSR1 (what
#   --signal=B:USR1@T sends it before the time limit) and forwards it to srun.
# The test sends that SIGUSR1 itself (scancel --batch --signal=USR1, at a
# seeded random step) instead of waiting for a time limit. Then:
#   - srun forwards it to the task; llmforge finishes the step, saves, runs
#     `scontrol requeue $SLURM_JOB_ID` and exits 75;
#   - Slurm requeues the job; the same script runs again (SLURM_RESTART_COUNT
#     1), `--resume auto` continues from the checkpoint, and the job ends
#     COMPLETED with Restarts=1 (Slurm holds a requeued job back for some
#     minutes, Reason=BeginTime: the test moves its start to now);
#   - the final model.safetensors equals an uninterrupted run's, byte for byte.
#   test_preempt_slurm.sh LLMFORGE SOURCE_DIR SHARED_DIR
# Needs root, Slurm and munge; without them, or when the daemons cannot
# start, it prints "SKIPPED: reason" and exits 0.
set -u
bin=$1 src=$2 shared=$3
skip() { echo "SKIPPED: $*"; exit 0; }
command -v scontrol >/dev/null 2>&1 || skip "no 'scontrol' (Debian: apt-get install slurm-wlm)"
# the cluster (tests/cli/slurm_cluster.sh, shared with test_slurm.sh and test_sweep.sh)
. "$src/tests/cli/slurm_cluster.sh"
fail() {
  echo "FAIL: $*"
  [ -f "$dir/out" ] && { echo "--- output"; cat "$dir/out"; }
  for f in "$dir"/log/*.log; do [ -f "$f" ] && { echo "--- $(basename "$f") (tail)"; tail -n 15 "$f"; }; done
  exit 1
}
over=()
[ "$cpus" -lt 2 ] && over=(--overcommit)
RANDOM=${LF_PREEMPT_SEED:-53}

head -c 20480 "$shared/data/tinyshakespeare.txt" >"$dir/small.txt"
"$bin" prepare --char "$dir/small.txt" --out "$dir/ds" >/dev/null || fail "prepare"
iters=1500
cat >"$dir/cfg.json" <<EOF
{"data": {"dataset": "$dir/ds"},
 "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 32, "dropout": 0.1},
 "train_batch_size": 8, "train_iters": $iters, "scheduler": {"warmup_iters": 2},
 "eval": {"interval": 0, "iters": 1}, "checkpoint": {"interval": 500, "keep_last": 2},
 "steps_per_print": 500, "registry": {"enabled": false}}
EOF
final=$(printf 'step_%08d' "$iters")
"$bin" train "$dir/cfg.json" --threads 1 --out_dir="$dir/ref" >"$dir/ref.out" 2>&1 || fail "uninterrupted run"

# the batch script of docs/checkpoints.md, with the paths of this test
cat >"$dir/job.sh" <<EOF
#!/bin/bash
#SBATCH --job-name=lf-preempt
#SBATCH --ntasks=1
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=$dir/job.out
echo "start \${SLURM_RESTART_COUNT:-0}" >>"$dir/starts"
srun --kill-on-bad-exit=1 $bin train $dir/cfg.json --threads 1 --out_dir=$dir/run --resume auto \\
  --checkpoint.requeue=true &
pid=\$!
trap 'kill -USR1 \$pid 2>/dev/null' USR1   # --signal=B:USR1@T reaches the shell: pass it on to srun
while :; do
  wait \$pid
  rc=\$?
  kill -0 \$pid 2>/dev/null || break     # wait returned for the trap, not for srun: wait again
done
echo "srun exit \$rc" >>"$dir/starts"
exit \$rc
EOF
chmod +x "$dir/job.sh"

job=$(sbatch --parsable "${over[@]}" --chdir="$dir" "$dir/job.sh") || fail "sbatch"
echo "sbatch job $job"
at=$((100 + RANDOM % 800))
steps() {
  local n
  n=$(grep -c '"type":"train"' "$dir/run/log.jsonl" 2>/dev/null)
  echo "${n:-0}"
}
for _ in $(seq 1200); do # 60 s for the job to start and reach step $at
  [ "$(steps)" -ge "$at" ] && break
  sleep 0.05
done
[ "$(steps)" -ge "$at" ] || fail "the job did not reach step $at: $(scontrol show job "$job" | grep -o 'JobState=[A-Z]*')"
scancel --batch --signal=USR1 "$job" || fail "scancel --signal=USR1"
state= hurried=
for _ in $(seq 1200); do # 120 s for the stop, the requeue and the second run
  info=$(scontrol show job "$job" 2>/dev/null)
  state=$(grep -o 'JobState=[A-Z_]*' <<<"$info" | cut -d= -f2)
  # Slurm holds a requeued job back for a while (Reason=BeginTime, some minutes): start it now
  # (once the node has finished tearing down the first run, or slurmd refuses the launch)
  if [ -z "$hurried" ] && [ "$state" = PENDING ] && grep -q 'Reason=BeginTime' <<<"$info" &&
    [ "$(sinfo -h -n "$node" -o %t 2>/dev/null)" = idle ] && ! pgrep -f "$dir/job.sh" >/dev/null; then
    sleep 2
    scontrol update JobId="$job" StartTime=now || fail "scontrol update StartTime=now"
    hurried=1
  fi
  [ "$state" = COMPLETED ] || [ "$state" = FAILED ] || [ "$state" = CANCELLED ] && break
  sleep 0.1
done
cp "$dir/job.out" "$dir/out" 2>/dev/null
scontrol show job "$job" >>"$dir/out" 2>&1
[ "$state" = COMPLETED ] || fail "job $job ended $state, not COMPLETED"
restarts=$(scontrol show job "$job" | grep -o 'Restarts=[0-9]*' | cut -d= -f2)
[ "$restarts" = 1 ] || fail "job $job restarted $restarts times, not once"
[ "$(grep -c '^start' "$dir/starts")" -eq 2 ] && grep -q '^start 1$' "$dir/starts" ||
  fail "the script should have started twice (restart count 0, then 1): $(tr '\n' ' ' <"$dir/starts")"
# the requeue kills the first batch shell before it can say more; srun reports the task's status
grep -q "task 0: Exited with exit code 75" "$dir/job.out" || fail "the first run's task did not exit 75"
grep -q "SIGUSR1: stopped at step" "$dir/job.out" || fail "no stop line in the job's output"
grep -q "requeued Slurm job $job (scontrol requeue)" "$dir/job.out" || fail "llmforge did not requeue job $job"
stop=$(grep '"type":"preempted"' "$dir/run/log.jsonl" | sed 's/.*"step":\([0-9]*\),.*/\1/')
grep -q "resumed from $dir/run/ckpt/$(printf 'step_%08d' "$stop") at step $stop" "$dir/job.out" ||
  fail "the requeued run did not resume from the step-$stop checkpoint"
cmp -s "$dir/ref/ckpt/$final/model.safetensors" "$dir/run/ckpt/$final/model.safetensors" ||
  fail "the requeued run's final model differs from the uninterrupted run's"
echo "job $job: SIGUSR1 to the batch shell after step $at -> srun -> llmforge stopped at step $stop, exit 75," \
  "scontrol requeue; restart 1 resumed at step $stop and COMPLETED; final model = uninterrupted run, byte for byte"
echo PASS
