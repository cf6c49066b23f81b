#!/usr/bin/env bash
# `llmforge launch`: the mpirun command it builds, the inputs it refuses, and
# a real 2-rank run through it that logs the losses of one process.
#   test_launch.sh LLMFORGE SOURCE_DIR SHARED_DIR
# Checks:
#  1. bad inputs exit 2 naming the option, the hostfile line or the problem
#     (no mpirun needed: they are refused before it is looked up).
#  2. the command line, through a fake mpirun that prints its arguments: the
#     printed (shell-quoted) line reads back as exactly the argv it ran;
#     -np, the executable, --allow-run-as-root as root, --oversubscribe when
#     G exceeds the cores, -x OMP_NUM_THREADS, hostfile mapping; the exit
#     status is mpirun's.
#  3. with Open MPI's mpirun (else "SKIPPED: no mpirun"): --dry-run, then
#     `launch --nproc-per-node 2 -- train cfg.json` trains 5 steps with the
#     single-process losses (1e-5 relative).
set -u
bin=$1 src=$2 shared=$3
dir=$(mktemp -d "${TMPDIR:-/tmp}/lf_launch.XXXXXX")
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; [ -f "$dir/out" ] && { echo "--- output"; cat "$dir/out"; }; exit 1; }

# expect_error WANT ARGS...: `llmforge launch ARGS` exits 2 and says WANT (fixed string)
expect_error() {
  local want=$1
  shift
  timeout 10 "$bin" launch "$@" >"$dir/out" 2>&1
  local rc=$?
  [ "$rc" -eq 2 ] || fail "launch $* exited $rc, expected 2"
  grep -q -F -- "$want" "$dir/out" || fail "launch $* did not say '$want'"
}

# 1. bad inputs
printf '# two hosts\nnode-a slots=2\n\nnode-b slots=2 max_slots=4  # a comment\n' >"$dir/hosts"
printf 'node-a slots=2\nnode-b slots=two\n' >"$dir/bad_slots"
printf 'node-a slots=2\n\nnode-b\n' >"$dir/no_slots"
printf 'node-a slots=2\nnode-a slots=1\n' >"$dir/dup"
printf 'node-a slots=2 gpus=4\n' >"$dir/field"
printf '# nothing\n\n' >"$dir/empty"
printf 'node-a slots=3\nnode-b slots=1\n' >"$dir/uneven"
expect_error "--nproc-per-node expects an integer" --nproc-per-node 0 -- train c.json
expect_error "--nproc-per-node expects an integer" --nproc-per-node two -- train c.json
expect_error "--nproc_per_node expects an integer" --nproc_per_node 1.5 -- train c.json
expect_error "--num_gpus expects an integer" --num_gpus -1 -- train c.json
expect_error "--nnodes expects an integer" --nnodes 0 -- train c.json
expect_error "--num_nodes expects an integer" --num_nodes 2:4 -- train c.json
expect_error "--node-rank 2 is not below the 2 nodes" --nnodes 2 --node-rank 2 -- train c.json
expect_error "--node_rank expects an integer" --node_rank -1 -- train c.json
expect_error "--master-port expects an integer in [1, 65535], got '0'" --master-port 0 -- train c.json
expect_error "--master_port expects an integer in [1, 65535], got '65536'" --master_port 65536 -- train c.json
expect_error "--master-addr needs a non-empty value" --master-addr= -- train c.json
expect_error "option --nnodes needs a value" --nnodes
expect_error "unknown option '--frobnicate'" --frobnicate -- train c.json
expect_error "missing '--' before the subcommand 'train'" --nproc-per-node 2 train c.json
expect_error "missing '--' and the subcommand" --nproc-per-node 2
expect_error "missing the subcommand after '--'" --nproc-per-node 2 --
expect_error "cannot be 'launch' itself" -- launch -- train c.json
expect_error "hostfile '$dir/nonexistent': cannot open" --hostfile "$dir/nonexistent" -- train c.json
expect_error "hostfile '$dir/bad_slots': line 2: slots expects an integer" --hostfile "$dir/bad_slots" -- train c.json
expect_error "line 3: host 'node-b' has no slots=N" --hostfile "$dir/no_slots" -- train c.json
expect_error "line 2: host 'node-a' is already on line 1" --hostfile "$dir/dup" -- train c.json
expect_error "line 1: unknown field 'gpus=4'" --hostfile "$dir/field" -- train c.json
expect_error "hostfile '$dir/empty': lists no hosts" --hostfile "$dir/empty" -- train c.json
expect_error "2 hosts with 4 slots in all, fewer than the 6 ranks of --nproc-per-node 3 × 2 nodes" \
  --nproc-per-node 3 --hostfile "$dir/hosts" -- train c.json
expect_error "line 2: host 'node-b' has 1 slot, fewer than --num_gpus 2" --num_gpus 2 --hostfile "$dir/uneven" -- train c.json
expect_error "--num_nodes 3, but hostfile '$dir/hosts' lists 2 hosts" --num_nodes 3 --hostfile "$dir/hosts" -- train c.json
# several nodes through mpirun without a hostfile: refused on every node rank, saying what to do
# instead (without --rdzv mpi they are torchrun-style launches: tests/cli/test_launch_tcp.sh)
for r in 0 1; do
  expect_error "--nnodes 2 needs --hostfile" --rdzv mpi --nnodes 2 --node-rank $r --master-addr 10.1.0.1 \
    --master-port 29500 --nproc-per-node 2 -- train c.json
  grep -q -F -- "--rdzv tcp" "$dir/out" || fail "no word on the tcp rendezvous"
  grep -q -F "10.1.0.1 slots=2" "$dir/out" || fail "the hostfile to write was not shown"
  grep -q -F "nothing to start" "$dir/out" || fail "no word on the other node ranks"
  grep -q -F "srun -N 2 --ntasks-per-node 2" "$dir/out" || fail "no word on Slurm"
done
expect_error "--standalone is one node" --standalone --nnodes 2 -- train c.json
mkdir "$dir/emptybin"
timeout 10 env PATH="$dir/emptybin" "$bin" launch --rdzv mpi --nproc-per-node 2 -- train c.json >"$dir/out" 2>&1
rc=$?
[ "$rc" -eq 2 ] || fail "launch without mpirun on PATH exited $rc, expected 2"
grep -q -F "'mpirun' not found on PATH" "$dir/out" || fail "no message about the missing mpirun"
expect_error "--mpirun '$dir/nonexistent': no such file" --mpirun "$dir/nonexistent" -- train c.json
expect_error "--mpirun '$dir/hosts': not an executable file" --mpirun "$dir/hosts" -- train c.json
echo "1. bad inputs: exit 2 with the option, line or problem named"

# 2. the command line, through a fake mpirun: one argument a line, then exit 7
cat >"$dir/fake_mpirun" <<'EOF'
#!/bin/sh
printf '%s\n' "$@" >"$FAKE_OUT"
exit 7
EOF
chmod +x "$dir/fake_mpirun"
exe=$(readlink -f "$bin")
# run_fake ARGS...: launch through the fake; sets $cmd (the printed line, prefix removed)
run_fake() {
  FAKE_OUT="$dir/argv" timeout 10 "$bin" launch --mpirun "$dir/fake_mpirun" "$@" >"$dir/out" 2>&1
  rc=$?
  cmd=$(sed -n 's/^llmforge: launch: //p' "$dir/out")
}
OMP_NUM_THREADS=3 run_fake --nproc-per-node 1 -- train "my cfg.json" "--out_dir=it's here" --x='$HOME'
[ "$rc" -eq 7 ] || fail "the exit status should be mpirun's (7), got $rc"
# the printed line, read back by the shell, is exactly the argv mpirun received
eval "printed=($cmd)"
printf '%s\n' "${printed[@]:1}" | cmp -s - "$dir/argv" || {
  echo "printed: $cmd"
  echo "ran:"
  cat "$dir/argv"
  fail "the printed command does not read back as the argv that ran"
}
[ "${printed[0]}" = "$dir/fake_mpirun" ] || fail "argv[0] should be the --mpirun given"
args=" ${printed[*]:1} "
case "$args" in *" -np 1 "*) ;; *) fail "no -np 1 in: $cmd" ;; esac
case "$args" in *" $exe train my cfg.json --out_dir=it's here --x=\$HOME "*) ;; *) fail "program and arguments wrong: $cmd" ;; esac
case "$args" in *" -x OMP_NUM_THREADS "*) ;; *) fail "OMP_NUM_THREADS not exported: $cmd" ;; esac
case "$args" in *" --bind-to none "*) ;; *) fail "no --bind-to none: $cmd" ;; esac
case "$args" in *" --oversubscribe "*) fail "--oversubscribe for 1 rank: $cmd" ;; esac
if [ "$(id -u)" -eq 0 ]; then
  case "$args" in *" --allow-run-as-root "*) ;; *) fail "root, but no --allow-run-as-root: $cmd" ;; esac
else
  case "$args" in *" --allow-run-as-root "*) fail "--allow-run-as-root for a user: $cmd" ;; esac
fi
(unset OMP_NUM_THREADS; run_fake --num_gpus 4096 --mpi-arg=--bind-to --mpi-arg core -- bench --preset x)
case " $(tr '\n' ' ' <"$dir/argv")" in
  *" -np 4096 "*"--oversubscribe "*"--bind-to core $exe bench --preset x "*) ;;
  *) fail "4096 ranks on this host: $(tr '\n' ' ' <"$dir/argv")" ;;
esac
grep -q -x -e "-x" "$dir/argv" && fail "-x without OMP_NUM_THREADS set"
grep -c -x -e "--bind-to" "$dir/argv" | grep -q -x 1 || fail "--bind-to twice"
run_fake --nproc-per-node 2 --hostfile "$dir/hosts" -- train c.json
grep -q -x -e "-np" "$dir/argv" && [ "$(tr '\n' ' ' <"$dir/argv" | grep -o -e "-np 4 .*--hostfile $dir/hosts --map-by ppr:2:node")" ] ||
  fail "2 hosts × 2: $cmd"
run_fake --nproc_per_node 2 --nnodes 1 --hostfile "$dir/hosts" -- train c.json
tr '\n' ' ' <"$dir/argv" | grep -q -e "-np 2 .*--host node-a:2 --map-by ppr:2:node" || fail "the first host of 2: $cmd"
run_fake --hostfile "$dir/uneven" -- train c.json
tr '\n' ' ' <"$dir/argv" | grep -q -e "-np 4 .*--hostfile $dir/uneven --bind-to" || fail "every slot of the hostfile: $cmd"
# node rank 1 of a hostfile launch: nothing to start, and nothing started
rm -f "$dir/argv"
run_fake --nproc-per-node 2 --nnodes 2 --node-rank 1 --master-addr node-a --hostfile "$dir/hosts" -- train c.json
[ "$rc" -eq 0 ] && [ ! -e "$dir/argv" ] || fail "node rank 1 should start nothing and exit 0 (exit $rc)"
grep -q "nothing to start here" "$dir/out" || fail "node rank 1 did not say why"
run_fake --nproc-per-node 2 --dry-run -- train c.json
[ "$rc" -eq 0 ] && [ ! -e "$dir/argv" ] || fail "--dry-run should print, run nothing and exit 0 (exit $rc)"
echo "2. command lines: quoted so they read back exactly; -np, hosts, mapping and flags as expected; mpirun's exit status"

# 3. Open MPI's mpirun
command -v mpirun >/dev/null 2>&1 || { echo "SKIPPED: no mpirun"; exit 0; }
mpirun --version 2>/dev/null | grep -q "Open MPI" || { echo "SKIPPED: mpirun is not Open MPI's"; exit 0; }
"$bin" launch --nproc-per-node 2 --dry-run -- train cfg.json >"$dir/out" 2>&1 || fail "--dry-run exited $?"
grep -q -e "^llmforge: launch: mpirun -np 2 .*$exe train cfg.json\$" "$dir/out" || fail "--dry-run printed no mpirun -np 2 command"

. "$src/tests/train/mpi_cli_lib.sh"
tiny_job "$shared"
export OMP_NUM_THREADS=1
# a sanitizer build: Open MPI's own allocations are not ours (tests/comm/lsan_mpi.supp); the
# ranks inherit this from mpirun
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$src/tests/comm/lsan_mpi.supp:print_suppressions=0:fast_unwind_on_malloc=0}
"$bin" train "$dir/cfg.json" --out_dir="$dir/one" >"$dir/out" 2>&1 || fail "1-process run"
t0=$(date +%s.%N)
timeout -k 5 60 "$bin" launch --nproc-per-node 2 -- train "$dir/cfg.json" --out_dir="$dir/two" >"$dir/out" 2>&1
rc=$?
t1=$(date +%s.%N)
[ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "launch --nproc-per-node 2 hung"
[ "$rc" -eq 0 ] || fail "launch --nproc-per-node 2 -- train exited $rc"
grep -q "^llmforge: launch: mpirun -np 2 .* -x OMP_NUM_THREADS $exe train " "$dir/out" || fail "the command was not printed first"
grep -q "data parallel: 2 ranks (mpi" "$dir/out" || fail "no data-parallel line: the ranks did not join one job"
[ "$(grep -c '"type":"train"' "$dir/two/log.jsonl")" -eq 5 ] || fail "log.jsonl should hold 5 train records"
paste <(losses "$dir/one") <(losses "$dir/two") | awk -v t="$(awk "BEGIN{printf \"%.1f\", $t1 - $t0}")" '
  { d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > w) w = r; n++ }
  END { if (n != 5 || w > 1e-5) { printf "losses differ: %d steps, worst relative %.3g\n", n, w; exit 1 }
        printf "3. launch --nproc-per-node 2 = 1 process over %d steps (worst relative difference %.2g; %s s)\n", n, w, t }' ||
  fail "the 2-rank losses differ from one process's"
# mpirun's exit status comes back: a bad config fails on both ranks
timeout -k 5 60 "$bin" launch --nproc-per-node 2 -- train "$dir/cfg.json" --out_dir="$dir/bad" --model.n_layer=0 \
  >"$dir/out" 2>&1
rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "a failing job should exit non-zero, promptly (exit $rc)"
grep -q "model.n_layer" "$dir/out" || fail "the ranks' error did not come through"
echo "PASS"
