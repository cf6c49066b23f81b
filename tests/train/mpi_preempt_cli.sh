#!/usr/bin/env bash
# Preemption under mpirun: a signal that reaches any rank makes every rank
# finish its step, save one checkpoint together, and exit 75; nobody hangs.
#   mpi_preempt_cli.sh SHARED_DIR LLMFORGE MPIRUN [MPIRUN FLAGS...]
# For 2 and 4 ranks (ZeRO 0 and 2), at a seeded random step:
#   - SIGTERM to one rank's process only (chosen at random): the stop is
#     agreed over the communicator, so the other ranks stop at the same step;
#   - SIGUSR1 to mpirun, which forwards it to every rank (Open MPI does, as
#     srun does; Slurm's --signal=USR1@T sends it to every task itself).
# Each time: mpirun exits 75 within the bound; `latest` names the step of the
# last train record and of the "preempted" event (the step reached), and
# verifies; `--resume auto` on the same ranks gives an uninterrupted run's
# final model.safetensors byte for byte.
set -u
shared=$1 bin=$2
shift 2
mpirun=("$@")
dir=$(mktemp -d "${TMPDIR:-/tmp}/lf_preempt_mpi.XXXXXX")
job=
trap '[ -n "$job" ] && kill -9 "$job" 2>/dev/null; rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; [ -f "$dir/out" ] && { echo "--- output"; tail -30 "$dir/out"; }; exit 1; }

. "$(dirname "$0")/mpi_cli_lib.sh"
make_dataset "$shared"
# 150 steps (checkpoints every 60): the signal comes after a step in 20..69, so at least 80 steps
# are left when it is sent (twice the least of before, 300 steps and 20..259; the stop came 1-8
# steps after the signal on a loaded 2-core machine), and the runs are half as long
iters=150
cat >"$dir/cfg.json" <<EOF
{"data": {"dataset": "$dir/ds"},
 "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 32, "dropout": 0.1},
 "train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "train_iters": $iters,
 "scheduler": {"warmup_iters": 2}, "eval": {"interval": 0, "iters": 1},
 "checkpoint": {"interval": 60, "keep_last": 2}, "steps_per_print": 100,
 "registry": {"enabled": false}, "comm": {"timeout_s": 20}}
EOF
final=$(printf 'step_%08d' "$iters")
RANDOM=${LF_PREEMPT_SEED:-41}

# launch NP OUT [ARGS...]: mpirun in the background, each rank's pid in $dir/pid.R
launch() {
  local np=$1 out=$2
  shift 2
  rm -f "$dir"/pid.*
  "${mpirun[@]}" -n "$np" bash -c 'echo $$ >"$0/pid.${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}"; exec "$@"' "$dir" \
    "$bin" train "$dir/cfg.json" --threads 1 --out_dir="$out" "$@" >"$dir/out" 2>&1 &
  job=$!
}
# finish LIMIT: wait for the job; a job alive after LIMIT s is a hang
finish() {
  local t=0
  while kill -0 "$job" 2>/dev/null; do
    sleep 0.05
    t=$((t + 1))
    [ "$t" -gt $(($1 * 20)) ] && { kill -9 "$job"; job=; fail "mpirun still running after $1 s"; }
  done
  wait "$job"
  rc=$?
  job=
}
train_steps() {
  local n
  n=$(grep -c '"type":"train"' "$1/log.jsonl" 2>/dev/null)
  echo "${n:-0}"
}

for np in 2 4; do
  stage=$([ "$np" = 4 ] && echo 2 || echo 0)
  launch "$np" "$dir/ref$np" --zero_optimization.stage=$stage
  finish 240
  [ "$rc" -eq 0 ] || fail "uninterrupted $np-rank run exited $rc"
  for how in term-one-rank usr1-mpirun; do
    out="$dir/p${np}_$how"
    at=$((20 + RANDOM % 50)) # the step after which the signal is sent
    launch "$np" "$out" --zero_optimization.stage=$stage
    for _ in $(seq 2400); do # up to 120 s for the run to reach step $at
      [ "$(train_steps "$out")" -ge "$at" ] && break
      kill -0 "$job" 2>/dev/null || break
      sleep 0.05
    done
    if [ "$how" = term-one-rank ]; then
      victim=$((RANDOM % np))
      kill -TERM "$(cat "$dir/pid.$victim")" || fail "no pid for rank $victim"
      what="SIGTERM to rank $victim of $np"
    else
      kill -USR1 "$job"
      what="SIGUSR1 to mpirun -n $np"
    fi
    finish 60
    [ "$rc" -eq 75 ] || fail "$what: mpirun exited $rc, not 75"
    last=$(grep '"type":"train"' "$out/log.jsonl" | tail -1 | sed 's/.*"step":\([0-9]*\),.*/\1/')
    ev=$(grep '"type":"preempted"' "$out/log.jsonl" | sed 's/.*"step":\([0-9]*\),.*/\1/')
    [ -n "$ev" ] && [ "$ev" = "$last" ] || fail "$what: preempted event at step '$ev', last train step $last"
    [ "$last" -lt "$iters" ] || fail "$what: the run finished before the signal (step $last)"
    [ "$(cat "$out/ckpt/latest")" = "$(printf 'step_%08d' "$last")" ] ||
      fail "$what: latest is $(cat "$out/ckpt/latest"), the step reached was $last"
    "$bin" ckpt verify "$out" >/dev/null || fail "$what: the checkpoint does not verify"
    grep -q "stopped at step $last with its checkpoint saved; exit 75" "$dir/out" || fail "$what: no stop line"
    launch "$np" "$out" --zero_optimization.stage=$stage --resume auto
    finish 240
    [ "$rc" -eq 0 ] || fail "$what: the resumed run exited $rc"
    cmp -s "$dir/ref$np/ckpt/$final/model.safetensors" "$out/ckpt/$final/model.safetensors" ||
      fail "$what: the resumed run's final model differs from the uninterrupted run's"
    echo "$what after step $at: all ranks stopped at step $last, exit 75, checkpoint verified; resumed = uninterrupted, byte for byte"
  done
done
echo PASS
