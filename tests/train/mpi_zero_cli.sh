#!/usr/bin/env bash
# ZeRO from the command line under mpirun: checkpoints in logical coordinates
# resumed on other layouts, bad input on every rank, dead and stalled peers.
#   mpi_zero_cli.sh SHARED_DIR LLMFORGE MPIRUN [MPIRUN FLAGS...]
# Checks:
#  1. resume across layouts (dropout on): 4 ranks with ZeRO-2 save at step 10
#     (the uninterrupted run's checkpoint of step 10);
#     2 ranks with ZeRO-1 resume it, and so does 1 process with ZeRO-0 (and 2
#     ranks with ZeRO-3): steps 11-20 equal the uninterrupted 4-rank run
#     within 1e-5 relative. The checkpoint's files describe whole tensors.
#  2. a checkpoint whose tensor table does not match the model (another
#     n_embd): every rank reports the mismatch, the job ends non-zero.
#  3. zero_optimization.stage outside 0-3: every rank names the key.
#  4. kill -9 of rank 2 of 4 mid-training (ZeRO-3, a checkpoint every step):
#     every process is gone within comm.timeout_s + 10 s, mpirun names rank 2,
#     and `latest` names a complete checkpoint that resumes.
#  5. a rank that stalls (mpi_dp stall, the trainer's sleep hook): the other
#     ranks time out naming rank 2, within comm.timeout_s + 10 s.
set -u
shared=$1 bin=$2
shift 2
mpirun=("$@")
mpi_dp=$(dirname "$bin")/tests/mpi_dp
dir=$(mktemp -d "${TMPDIR:-/tmp}/lf_zero_cli.XXXXXX")
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; [ -f "$dir/out" ] && { echo "--- output"; tail -40 "$dir/out"; }; exit 1; }

. "$(dirname "$0")/mpi_cli_lib.sh"
make_dataset "$shared"
# micro-batch 2 everywhere: dropout masks are keyed by the global micro-batch
# index, so every layout with the same micro-batch draws the same masks
cat >"$dir/cfg.json" <<EOF
{"data": {"dataset": "$dir/ds"},
 "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 32, "dropout": 0.1},
 "train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "train_iters": 20,
 "scheduler": {"warmup_iters": 2, "decay_iters": 20},
 "eval": {"interval": 0}, "checkpoint": {"interval": 10, "keep_last": 5},
 "steps_per_print": 10, "comm": {"timeout_s": 20}}
EOF

# "step loss" lines of a log
steps() { grep '"type":"train"' "$1/log.jsonl" | sed 's/.*"step":\([0-9]*\),.*"loss":\([^,]*\),.*/\1 \2/'; }
# compare FROM TO RUN REF WHAT: steps FROM..TO of RUN equal REF's within 1e-5
compare() {
  awk -v from="$1" -v to="$2" -v what="$5" '
    NR == FNR { ref[$1] = $2; next }
    { got[$1] = $2 }
    END {
      for (s = from; s <= to; s++) {
        if (!(s in got) || !(s in ref)) { printf "%s: step %d missing\n", what, s; exit 1 }
        d = got[s] - ref[s]; if (d < 0) d = -d; r = d / (ref[s] < 0 ? -ref[s] : ref[s]); if (r > w) w = r
      }
      if (w > 1e-5) { printf "%s: losses differ by %.3g relative\n", what, w; exit 1 }
      printf "%s: steps %d-%d within %.2g of the uninterrupted run\n", what, from, to, w
    }' <(steps "$4") <(steps "$3")
}

# 1. resume across layouts
run 120 4 "$bin" train "$dir/cfg.json" --zero_optimization.stage=2 --out_dir="$dir/full"
[ "$rc" -eq 0 ] || fail "uninterrupted 4-rank ZeRO-2 run exited $rc"
# the step-10 checkpoint the uninterrupted run saved (checkpoint.interval 10) is the one resumed:
# a second 4-rank launch to step 10 would save the same bytes (the schedule is fixed by
# decay_iters 20) and costs a 4-rank start-up, ~14 s under ASan
[ -f "$dir/full/ckpt/step_00000010/trainer_state.json" ] || fail "the 4-rank run saved no step-10 checkpoint"
mkdir -p "$dir/r/ckpt" && cp -r "$dir/full/ckpt/step_00000010" "$dir/r/ckpt/" && echo step_00000010 >"$dir/r/ckpt/latest" ||
  fail "copying the step-10 checkpoint"
"$bin" ckpt verify "$dir/r" >"$dir/out" 2>&1 || fail "the step-10 checkpoint does not verify"
grep -q '"exp_avg.h.1.mlp.c_fc.weight":{"dtype":"F32","shape":\[32,128\]' "$dir/r/ckpt/step_00000010/optimizer.safetensors" ||
  fail "the optimizer file does not hold whole tensors"
for d in r1 r2 r3; do cp -r "$dir/r" "$dir/$d"; done
run 120 2 "$bin" train "$dir/cfg.json" --zero_optimization.stage=1 --resume --out_dir="$dir/r"
[ "$rc" -eq 0 ] || fail "2-rank ZeRO-1 resume exited $rc"
compare 11 20 "$dir/r" "$dir/full" "4 ranks ZeRO-2 -> 2 ranks ZeRO-1" || fail "resume on 2 ranks"
"$bin" train "$dir/cfg.json" --resume --out_dir="$dir/r1" >"$dir/out" 2>&1 || fail "1-process ZeRO-0 resume"
compare 11 20 "$dir/r1" "$dir/full" "4 ranks ZeRO-2 -> 1 process ZeRO-0" || fail "resume on 1 process"
run 120 2 "$bin" train "$dir/cfg.json" --zero_optimization.stage=3 --resume --out_dir="$dir/r3"
[ "$rc" -eq 0 ] || fail "2-rank ZeRO-3 resume exited $rc"
compare 11 20 "$dir/r3" "$dir/full" "4 ranks ZeRO-2 -> 2 ranks ZeRO-3" || fail "resume on 2 ranks ZeRO-3"
echo "1. resume across layouts: done"

# 2. a checkpoint that does not match the model, reported on every rank
run 60 2 "$bin" train "$dir/cfg.json" --zero_optimization.stage=1 --resume --model.n_embd=64 --out_dir="$dir/r2"
[ "$rc" -ne 0 ] || fail "a mismatched checkpoint was accepted"
n=$(grep -c "does not match the model" "$dir/out")
[ "$n" -ge 2 ] || fail "expected the mismatch from both ranks, got $n"
grep -q "wrong shape: .*wte.weight" "$dir/out" || fail "the mismatch does not name the tensor"
echo "2. mismatched checkpoint: both ranks report it (exit $rc) in $elapsed s"

# 3. a stage outside 0-3
run 60 2 "$bin" train "$dir/cfg.json" --zero_optimization.stage=4 --out_dir="$dir/bad"
[ "$rc" -ne 0 ] || fail "stage 4 was accepted"
n=$(grep -c "key 'zero_optimization.stage' .*4 is out of range \[0, 3\]" "$dir/out")
[ "$n" -eq 2 ] || fail "expected the stage error from both ranks, got $n"
echo "3. zero_optimization.stage 4: both ranks name the key"

# 4. kill -9 of rank 2 of 4 mid-training; checkpoints every step
# rank 2 dies once training is under way: after the first checkpoint, half a second later
kill2='if [ "$r" = 2 ]; then "$@" & p=$!; for i in $(seq 900); do [ -e "'"$dir"'/kill/ckpt/latest" ] && break;
  sleep 0.1; done; sleep 0.5; kill -9 $p; wait $p; exit $?; fi; exec "$@"'
run 120 4 bash -c "$per_rank; $kill2" \
  _ "$bin" train "$dir/cfg.json" --zero_optimization.stage=3 --train_iters=100000 --checkpoint.interval=1 \
  --comm.timeout_s=5 --out_dir="$dir/kill"
[ "$rc" -ne 0 ] || fail "the job survived a dead rank"
awk "BEGIN{exit !($elapsed < 15)}" || fail "took $elapsed s to end (timeout 5 s + 10)"
grep -Eq "rank 2.*(signal 9|status 137|exited)|(signal 9|exit code 137).*rank 2|Process name: \[\[[0-9]+,1\],2\]" "$dir/out" ||
  fail "nothing names rank 2"
sleep 1
left=$(pgrep -f "$dir/kill" | wc -l)
[ "$left" -eq 0 ] || fail "$left processes of the killed job are still running"
ck=$(cat "$dir/kill/ckpt/latest" 2>/dev/null) || fail "no checkpoint before the kill"
step=${ck#step_}
step=$((10#$step))
"$bin" train "$dir/cfg.json" --resume --train_iters=$((step + 1)) --out_dir="$dir/kill" >"$dir/out" 2>&1 ||
  fail "the latest checkpoint ($ck) does not resume"
echo "4. kill -9 of rank 2: job gone in $elapsed s, rank 2 named; $ck is complete and resumes"

# 5. a stalled rank
if [ -x "$mpi_dp" ]; then
  run 60 4 "$mpi_dp" stall
  [ "$rc" -ne 0 ] || fail "a stalled rank went unnoticed"
  awk "BEGIN{exit !($elapsed < 13)}" || fail "took $elapsed s to end (timeout 3 s + 10)"
  n=$(grep -c "timed out .*rank that did not arrive: 2;" "$dir/out")
  [ "$n" -ge 1 ] || fail "no rank named the stalled rank 2"
  echo "5. stalled rank 2: $n rank(s) named it, job ended in $elapsed s"
fi
echo "PASS"
