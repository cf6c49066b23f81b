#!/usr/bin/env bash
# Crash consistency by fault injection: SIGKILL at seeded random times during
# a tiny training run that saves a checkpoint every 2 steps (so many kills
# land inside a save), then `--resume auto` until the run finishes; repeated
# for N trials. Sourced by nothing: run it (tests/cli/test_crash.sh runs 8
# trials in CI, tests/train/mpi_crash_cli.sh 3 with zero2, LF_CRASH_TRIALS=N
# more; bench/kill_trials.sh runs 100+ and prints the same counts).
#   crash_trials.sh LLMFORGE SHARED_DIR N [SEED] [single|zero2 MPIRUN [FLAGS...]]
# single: one process, killed. zero2: ZeRO stage 2 on 2 ranks under MPIRUN;
# one rank (chosen at random) is killed once every rank is past MPI_Init
# (see ready()), and mpirun must end the other.
# After every kill:
#   - `llmforge ckpt verify OUT` passes whenever `latest` exists (it always
#     names a complete checkpoint; a kill before the first save leaves none);
#   - at most one temporary directory (.tmp_step_*) is there (the save the
#     kill interrupted): none pile up;
#   - with zero2, no process of the job outlives the kill by more than
#     comm.timeout_s + 10 s (nobody hangs).
# At the end of every trial: the final model.safetensors is byte-identical
# to an uninterrupted run's, and no temporary of any kind is left.
# Kill times: for each start, u x (15% of the uninterrupted run's duration,
# its start-up, + the share of its steps still to do), u uniform in [0, 1)
# from awk's srand(SEED), so a sequence of kills reproduces on one machine.
# Prints: trials, kills, kills that landed inside a save (a temporary was
# left), resumes that ran, finals identical, corrupt latest = 0; exits 1 on
# the first broken promise (with what broke).
set -u
bin=$1 shared=$2 trials=$3 seed=${4:-17} mode=${5:-single}
shift $(($# < 5 ? $# : 5))
mpirun=("$@")
kills_per_trial=3
dir=$(mktemp -d "${TMPDIR:-/tmp}/lf_crash.XXXXXX")
jobs_alive=()
cleanup() {
  for p in "${jobs_alive[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; [ -f "$dir/out" ] && { echo "--- last output"; tail -20 "$dir/out"; }; exit 1; }

head -c 20480 "$shared/data/tinyshakespeare.txt" >"$dir/small.txt"
"$bin" prepare --char "$dir/small.txt" --out "$dir/ds" >/dev/null || fail "prepare"
iters=16
cat >"$dir/cfg.json" <<JSON
{"data": {"dataset": "$dir/ds", "prefetch": 1},
 "model": {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 16, "dropout": 0.1},
 "train_batch_size": 4, "train_micro_batch_size_per_gpu": $([ "$mode" = zero2 ] && echo 2 || echo 4),
 "train_iters": $iters, "scheduler": {"warmup_iters": 2},
 "eval": {"interval": 0, "iters": 1}, "checkpoint": {"interval": 2, "keep_last": 2},
 "steps_per_print": 100, "registry": {"enabled": false}, "comm": {"timeout_s": 20}}
JSON
final=$(printf 'step_%08d' "$iters")

# start OUT [--resume auto]: the run in the background; its pids (every rank) in $dir/pids
start() {
  local out=$1
  shift
  rm -f "$dir"/pid.*
  if [ "$mode" = zero2 ]; then
    "${mpirun[@]}" -n 2 bash -c 'echo $$ >"$0/pid.${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}"; exec "$@"' "$dir" \
      "$bin" train "$dir/cfg.json" --threads 1 --zero_optimization.stage=2 --out_dir="$out" "$@" >"$dir/out" 2>&1 &
  else
    "$bin" train "$dir/cfg.json" --threads 1 --out_dir="$out" "$@" >"$dir/out" 2>&1 &
  fi
  job=$!
  jobs_alive=("$job")
}

# wait_job LIMIT: wait for $job (at most LIMIT s); sets rc; a job still there after LIMIT is a hang
wait_job() {
  local limit=$1 t=0
  while kill -0 "$job" 2>/dev/null; do
    sleep 0.05
    t=$((t + 1))
    [ "$t" -gt $((limit * 20)) ] && { kill -9 "$job" 2>/dev/null; fail "the job outlived a kill by more than $limit s"; }
  done
  wait "$job"
  rc=$?
  jobs_alive=()
} 2>/dev/null # bash's "Killed" notice of the job: expected here

# temporaries OUT: how many .tmp_step_* directories / any temporary (.tmp_, .del_, .old_, latest.tmp)
tmp_dirs() { find "$1/ckpt" -maxdepth 1 -name '.tmp_step_*' 2>/dev/null | wc -l; }
any_tmp() { find "$1/ckpt" -maxdepth 1 \( -name '.tmp_*' -o -name '.del_*' -o -name '.old_*' -o -name latest.tmp \) 2>/dev/null | wc -l; }

# the uninterrupted run, and how long it takes (the range of the kill times)
# ready OUT: with zero2, wait until every rank is past MPI_Init (rank 0 writes
# config.resolved.json after the start-up all-reduce): Open MPI 4.1 can hang in its
# PMIx start-up fence when a process dies inside MPI_Init, which no timeout of
# llmforge's covers, so the kills come after it. A no-op for one process.
ready() {
  [ "$mode" = zero2 ] || return 0
  local t=0
  while [ ! -e "$1/config.resolved.json" ] && kill -0 "$job" 2>/dev/null && [ "$t" -lt 1200 ]; do
    sleep 0.05
    t=$((t + 1))
  done
}
t0=$(date +%s%N)
start "$dir/ref"
ready "$dir/ref"
t_ready=$(date +%s%N)
wait_job 120
[ "$rc" -eq 0 ] || fail "the uninterrupted run exited $rc"
t1=$(date +%s%N)
ref_ms=$(((t1 - t_ready) / 1000000)) # from the kills' time origin (the start, or MPI_Init's end) to the end
[ "$mode" = zero2 ] && echo "zero2: MPI start-up $(((t_ready - t0) / 1000000)) ms, then $ref_ms ms of run"
ref="$dir/ref/ckpt/$final/model.safetensors"
[ -f "$ref" ] || fail "the uninterrupted run has no $final"

# seeded uniform numbers u (the kill time, as a fraction of what is left of the run) and which rank
draws=$(awk -v s="$seed" -v n=$((trials * kills_per_trial)) \
  'BEGIN { srand(s); for (i = 0; i < n; i++) printf "%.6f %d\n", rand(), rand() < 0.5 }')
# kill_ms U OUT: u x the expected duration of a run resumed from OUT's latest (start-up, about
# 15% of the uninterrupted run, plus the share of the steps still to do)
kill_ms() {
  local done_steps=0 l
  l=$(cat "$2/ckpt/latest" 2>/dev/null) && done_steps=$((10#${l#step_}))
  awk -v u="$1" -v T="$ref_ms" -v d="$done_steps" -v n="$iters" 'BEGIN { printf "%d", u * T * (0.15 + 0.85 * (n - d) / n) }'
}
kills=0 in_save=0 resumes=0 identical=0 corrupt=0 before_first=0 late=0
k=0
for trial in $(seq "$trials"); do
  out="$dir/t$trial"
  for kill_no in $(seq "$kills_per_trial"); do
    k=$((k + 1))
    read -r u victim <<<"$(sed -n "${k}p" <<<"$draws")"
    ms=$(kill_ms "$u" "$out")
    rm -f "$out/config.resolved.json"
    start "$out" --resume auto
    ready "$out"
    sleep "$(awk -v m="$ms" 'BEGIN { printf "%.3f", m / 1000 }')"
    if [ "$mode" = zero2 ]; then
      pid=$(cat "$dir/pid.$victim" 2>/dev/null)
      [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
      wait_job 30
      for f in "$dir"/pid.*; do # mpirun is gone: so must every rank be (within 10 s; a zombie counts as gone)
        [ -f "$f" ] || continue
        p=$(cat "$f")
        for _ in $(seq 100); do
          { kill -0 "$p" 2>/dev/null && [ "$(awk '{ print $3 }' "/proc/$p/stat" 2>/dev/null)" != Z ]; } || break
          sleep 0.1
        done
        kill -0 "$p" 2>/dev/null && [ "$(awk '{ print $3 }' "/proc/$p/stat" 2>/dev/null)" != Z ] &&
          fail "rank $(basename "$f") outlived mpirun by 10 s after the kill"
      done
    else
      kill -9 "$job" 2>/dev/null
      wait_job 30
    fi
    grep -q "resumed from" "$dir/out" && resumes=$((resumes + 1))
    if [ "$rc" -eq 0 ]; then # finished before the kill came: nothing more to kill in this trial
      late=$((late + 1))
      break
    fi
    kills=$((kills + 1))
    n_tmp=$(tmp_dirs "$out")
    [ "$n_tmp" -le 1 ] || fail "trial $trial, kill $kill_no: $n_tmp temporary directories in $out/ckpt"
    if [ "$n_tmp" -eq 1 ] || [ -e "$out/ckpt/latest.tmp" ]; then in_save=$((in_save + 1)); fi
    if [ -e "$out/ckpt/latest" ]; then
      "$bin" ckpt verify "$out" >"$dir/verify" 2>&1 || {
        corrupt=$((corrupt + 1))
        cat "$dir/verify"
        fail "trial $trial, kill $kill_no (at $ms ms): latest does not name a complete checkpoint"
      }
    else
      before_first=$((before_first + 1))
    fi
  done
  # run to the end (resuming when a checkpoint survived)
  start "$out" --resume auto
  wait_job 120
  [ "$rc" -eq 0 ] || fail "trial $trial: the run after the kills exited $rc"
  grep -q "resumed from" "$dir/out" && resumes=$((resumes + 1))
  cmp -s "$ref" "$out/ckpt/$final/model.safetensors" ||
    fail "trial $trial: the final model.safetensors differs from the uninterrupted run's"
  identical=$((identical + 1))
  [ "$(any_tmp "$out")" -eq 0 ] || fail "trial $trial: temporaries left: $(ls -a "$out/ckpt" | tr '\n' ' ')"
  "$bin" ckpt verify "$out" >/dev/null 2>&1 || fail "trial $trial: the final checkpoint does not verify"
  rm -rf "$out"
done
echo "crash trials ($mode, seed $seed, uninterrupted run $ref_ms ms): trials $trials, kills $kills (inside a save" \
  "$in_save, before the first checkpoint $before_first; $late more came after the run had finished), resumes" \
  "$resumes, identical finals $identical/$trials, corrupt latest $corrupt"
