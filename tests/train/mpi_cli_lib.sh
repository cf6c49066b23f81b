# Helpers of the CLI tests under mpirun (sourced by mpi_dp_cli.sh and
# mpi_zero_cli.sh). The sourcing script sets `dir` (its scratch directory),
# `mpirun` (an array: the launcher and its flags) and defines fail().

# run LIMIT_S NP ARGS...: mpirun -n NP ARGS under an outer bound, output in
# $dir/out; sets rc and elapsed. mpirun passes on a rank's own exit status
# (137 for a rank killed by signal 9), so only reaching the bound means a hang.
run() {
  local limit=$1 np=$2
  shift 2
  local t0 t1
  t0=$(date +%s.%N)
  timeout -k 5 "$limit" "${mpirun[@]}" -n "$np" "$@" >"$dir/out" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  elapsed=$(awk "BEGIN{printf \"%.1f\", $t1 - $t0}")
  awk "BEGIN{exit !($elapsed < $limit)}" || fail "mpirun -n $np $* hung (stopped after $elapsed s)"
}

# every rank runs `bash -c "$per_rank; SCRIPT" _ ARGS`: SCRIPT sees its rank in $r
per_rank='r=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}'

# a small character dataset in $dir/ds: the first 64 KB of Tiny Shakespeare
make_dataset() {
  head -c 65536 "$1/data/tinyshakespeare.txt" >"$dir/small.txt"
  "$bin" prepare --char "$dir/small.txt" --out "$dir/ds" >/dev/null || fail "prepare"
}

# tiny_job SHARED: the 5-step job of the launch and two-hosts tests: a
# character dataset of the first 20 KB of Tiny Shakespeare in $dir/ds, its
# configuration in $dir/cfg.json (2 layers x 32 channels, global batch 8)
tiny_job() {
  head -c 20480 "$1/data/tinyshakespeare.txt" >"$dir/small.txt"
  "$bin" prepare --char "$dir/small.txt" --out "$dir/ds" >/dev/null || fail "prepare"
  cat >"$dir/cfg.json" <<JSON
{"data": {"dataset": "$dir/ds"},
 "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 32},
 "train_batch_size": 8, "gradient_accumulation_steps": 2, "train_iters": 5,
 "eval": {"interval": 0}, "checkpoint": {"interval": 0}, "scheduler": {"warmup_iters": 2},
 "steps_per_print": 1, "comm": {"timeout_s": 20}}
JSON
}

# the per-step losses of a run directory's log.jsonl, one per line
losses() { grep '"type":"train"' "$1/log.jsonl" | sed 's/.*"loss":\([^,]*\),.*/\1/'; }
