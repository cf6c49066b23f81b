#!/usr/bin/env bash
# `llmforge train` under mpirun: data parallel from the command line, and the
# ways a job must fail — loudly, on the right ranks, and without hanging.
#   mpi_dp_cli.sh SHARED_DIR LLMFORGE MPIRUN [MPIRUN FLAGS...]
# Checks:
#  1. 2 ranks train 6 steps: the losses equal one process's with the same
#     global batch (1e-5 relative); the header is printed once; log.jsonl
#     holds one record per step (rank 0 alone writes); time/comm_ms is logged.
#  2. inconsistent batch sizes for 2 ranks: both ranks print the arithmetic.
#  3. a dataset missing on rank 1 only (a relative path, another working
#     directory): rank 1 names it, the job ends non-zero, nothing hangs.
#  4. a bad configuration on rank 1 only (fails before MPI starts): the job ends.
#  5. ranks started with different configurations: refused on every rank.
#  6. comm.backend single under a 2-process launch: refused with the reason.
#  7. --resume without a checkpoint: every rank reports rank 0's error.
set -u
shared=$1 bin=$2
shift 2
mpirun=("$@")
dir=$(mktemp -d "${TMPDIR:-/tmp}/lf_dp_cli.XXXXXX")
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; [ -f "$dir/out" ] && { echo "--- output"; cat "$dir/out"; }; exit 1; }

. "$(dirname "$0")/mpi_cli_lib.sh"
make_dataset "$shared"
cat >"$dir/cfg.json" <<EOF
{"data": {"dataset": "$dir/ds"},
 "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 32},
 "train_batch_size": 8, "gradient_accumulation_steps": 2, "train_iters": 6,
 "eval": {"interval": 0}, "checkpoint": {"interval": 0}, "scheduler": {"warmup_iters": 2},
 "steps_per_print": 1, "wall_clock_breakdown": true, "comm": {"timeout_s": 20}}
EOF


# 1. two ranks against one process
"$bin" train "$dir/cfg.json" --out_dir="$dir/one" >"$dir/one.out" 2>&1 || { cat "$dir/one.out"; fail "1-process run"; }
run 60 2 "$bin" train "$dir/cfg.json" --out_dir="$dir/two"
[ "$rc" -eq 0 ] || fail "2-rank run exited $rc"
[ "$(grep -c '^llmforge train:' "$dir/out")" -eq 1 ] || fail "the header should be printed once (rank 0)"
grep -q "data parallel: 2 ranks (mpi" "$dir/out" || fail "no data-parallel line"
[ "$(grep -c '"type":"train"' "$dir/two/log.jsonl")" -eq 6 ] || fail "log.jsonl should hold 6 train records"
grep -q '"time/comm_ms"' "$dir/two/log.jsonl" || fail "no time/comm_ms in the wall-clock breakdown"
paste <(losses "$dir/one") <(losses "$dir/two") | awk '
  { d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > w) w = r; n++ }
  END { if (n != 6 || w > 1e-5) { printf "losses differ: %d steps, worst relative %.3g\n", n, w; exit 1 }
        printf "1. 2 ranks = 1 process over %d steps (worst relative difference %.2g)\n", n, w }' ||
  fail "2-rank losses differ from one process's"

# 2. batch arithmetic, reported by both ranks
run 60 2 "$bin" train "$dir/cfg.json" --out_dir="$dir/bad" --train_micro_batch_size_per_gpu=4
[ "$rc" -ne 0 ] || fail "inconsistent batch sizes were accepted"
want='train_batch_size 8 != train_micro_batch_size_per_gpu 4 × gradient_accumulation_steps 2 × world size 2 (from openmpi) = 16'
n=$(grep -c -F "$want" "$dir/out")
[ "$n" -eq 2 ] || fail "expected the batch arithmetic from both ranks, got $n"
echo "2. batch arithmetic reported by both ranks in $elapsed s"

# 3. the dataset exists only where rank 0 runs (a relative path, another working directory per rank)
mkdir -p "$dir/w0" "$dir/w1"
ln -s "$dir/ds" "$dir/w0/ds"
run 60 2 bash -c "$per_rank"'; cd "$1/w$r" && shift && exec "$@"' _ "$dir" "$bin" train "$dir/cfg.json" \
  --data.dataset=ds --out_dir="$dir/missing"
[ "$rc" -ne 0 ] || fail "a dataset missing on rank 1 went unnoticed"
grep -q "rank 1 of 2: .*'ds'" "$dir/out" || fail "rank 1 did not name the missing dataset"
awk "BEGIN{exit !($elapsed < 40)}" || fail "took $elapsed s to end"
echo "3. dataset missing on rank 1: job ended (exit $rc) in $elapsed s"

# 4. a bad configuration on rank 1 only: it exits before MPI starts
run 60 2 bash -c "$per_rank"'; [ "$r" = 1 ] && set -- "$@" --model.n_layer=0; exec "$@"' _ "$bin" train \
  "$dir/cfg.json" --out_dir="$dir/badcfg"
[ "$rc" -ne 0 ] || fail "a bad configuration on rank 1 went unnoticed"
grep -q "model.n_layer" "$dir/out" || fail "rank 1 did not name the bad key"
awk "BEGIN{exit !($elapsed < 40)}" || fail "took $elapsed s to end"
echo "4. bad configuration on rank 1: job ended (exit $rc) in $elapsed s"

# 5. different configurations on the ranks
run 60 2 bash -c "$per_rank"'; [ "$r" = 1 ] && set -- "$@" --seed=7; exec "$@"' _ "$bin" train "$dir/cfg.json" \
  --out_dir="$dir/differ"
[ "$rc" -ne 0 ] || fail "ranks with different configurations trained"
grep -q "the ranks run different configurations" "$dir/out" || fail "no message about different configurations"
echo "5. different configurations refused in $elapsed s"

# 6. comm.backend single under 2 processes
run 60 2 "$bin" train "$dir/cfg.json" --out_dir="$dir/single" --comm.backend=single
[ "$rc" -ne 0 ] || fail "comm.backend single under 2 processes trained"
grep -q "communicator 'single' has 1 rank" "$dir/out" || fail "no message about the single communicator"
echo "6. comm.backend single under mpirun -n 2 refused"

# 7. --resume without a checkpoint
run 60 2 "$bin" train "$dir/cfg.json" --out_dir="$dir/nockpt" --resume
[ "$rc" -ne 0 ] || fail "--resume without a checkpoint succeeded"
grep -q "rank 1 of 2: rank 0: " "$dir/out" || fail "rank 1 did not report rank 0's error"
echo "7. --resume without a checkpoint: rank 0's error on rank 1 too"
echo "PASS"
