#!/usr/bin/env bash
# Preemption of one process from the command line (docs/checkpoints.md,
# "Stopping on a signal"):
#   1. SIGTERM and SIGUSR1 at seeded random steps: exit 75, the checkpoint is
#      the step of the last train record (the step reached), `latest` names it
#      and verifies, log.jsonl has the "preempted" event, the registry says
#      "preempted"; `--resume auto` then ends with the uninterrupted run's
#      model.safetensors, byte for byte.
#   2. A burst of further signals right after the first (many land in the
#      save): the save completes, exit 75, same bytes after resume; and every
#      thread of a run (OpenMP's too) blocks the three signals, which one
#      thread takes with sigwait (why: tools/llmforge/main.c, oneDNN #4845).
#   3. SIGINT (job control on, as at a terminal): exit 75.
#   4. --resume auto on an empty out_dir trains from scratch (the same bytes);
#      plain --resume there fails and suggests --resume auto.
#   5. checkpoint.requeue outside Slurm: a warning, still exit 75.
#   6. llmforge ckpt verify: 0 for a good checkpoint; 1 naming the file for a
#      damaged one and for a missing latest; --all lists every step; 2 usage.
#   bash test_preempt.sh LLMFORGE SOURCE_DIR SHARED_DIR
set -u
LF=$1 SHARED=$3
case "$LF" in /*) ;; *) LF="$PWD/$LF" ;; esac
. "$(dirname "$0")/cli_lib.sh"
cli_tmpdir preempt
export LLMFORGE_REGISTRY=$tmp/registry.db
RANDOM=${LF_PREEMPT_SEED:-29}

head -c 20480 "$SHARED/data/tinyshakespeare.txt" >small.txt
"$LF" prepare --char small.txt --out ds >/dev/null || fail "prepare"
iters=600
cat >cfg.json <<EOF
{"data": {"dataset": "$tmp/ds"},
 "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 32, "dropout": 0.1},
 "train_batch_size": 8, "train_iters": $iters, "scheduler": {"warmup_iters": 2},
 "eval": {"interval": 0, "iters": 1}, "checkpoint": {"interval": 200, "keep_last": 2},
 "steps_per_print": 100}
EOF
final=$(printf 'step_%08d' "$iters")
train() { "$LF" train cfg.json --threads 1 "$@"; }

train --out_dir=ref >ref.out 2>&1 || fail "uninterrupted run: $(tail -3 ref.out)"
ok

train_steps() {
    local n
    n=$(grep -c '"type":"train"' "$1/log.jsonl" 2>/dev/null)
    echo "${n:-0}"
}
# run_until OUT STEP [ARGS...]: train in the background until log.jsonl shows STEP steps; $pid
run_until() {
    local out=$1 at=$2
    shift 2
    "$LF" train cfg.json --threads 1 --out_dir="$out" "$@" >"$out.out" 2>&1 & # not through train(): $! is the process
    pid=$!
    for _ in $(seq 1200); do
        [ "$(train_steps "$out")" -ge "$at" ] && return 0
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.05
    done
}
# stopped OUT WHAT: the run exited 75 ($rc) at the step of its last train record
stopped() {
    local out=$1 what=$2 last ev
    [ "$rc" -eq 75 ] || fail "$what: exit $rc, not 75: $(tail -3 "$out.out")"
    last=$(grep '"type":"train"' "$out/log.jsonl" | tail -1 | sed 's/.*"step":\([0-9]*\),.*/\1/')
    [ "$last" -lt "$iters" ] || fail "$what: the run finished before the signal"
    ev=$(grep '"type":"preempted"' "$out/log.jsonl" | sed 's/.*"step":\([0-9]*\),.*/\1/')
    [ "$ev" = "$last" ] || fail "$what: preempted event at '$ev', last train step $last"
    [ "$(cat "$out/ckpt/latest")" = "$(printf 'step_%08d' "$last")" ] || fail "$what: latest is not step $last"
    grep -q '"type":"end".*"status":"preempted"' "$out/log.jsonl" || fail "$what: no end record with status preempted"
    grep -q "stopped at step $last with its checkpoint saved; exit 75" "$out.out" || fail "$what: no stop line"
    "$LF" ckpt verify "$out" >/dev/null 2>&1 || fail "$what: the checkpoint does not verify"
    stop_step=$last
    ok
}
# resumed_equal OUT WHAT: --resume auto to the end gives the reference's bytes
resumed_equal() {
    train --out_dir="$1" --resume auto >"$1.resume" 2>&1 || fail "$2: the resume failed: $(tail -3 "$1.resume")"
    grep -q "resumed from $1/ckpt/step_" "$1.resume" || grep -q "resumed from $tmp/$1/ckpt/step_" "$1.resume" ||
        fail "$2: the resume did not say where from: $(grep resum "$1.resume")"
    cmp -s "ref/ckpt/$final/model.safetensors" "$1/ckpt/$final/model.safetensors" ||
        fail "$2: resumed final model differs from the uninterrupted run's"
    ok
}

# 1. SIGTERM and SIGUSR1 at random steps
for sig in TERM USR1; do
    at=$((20 + RANDOM % (iters - 100)))
    run_until "p_$sig" "$at"
    kill -"$sig" "$pid"
    wait "$pid"
    rc=$?
    stopped "p_$sig" "SIG$sig"
    echo "SIG$sig after step $at: stopped at step $stop_step, exit 75"
    resumed_equal "p_$sig" "SIG$sig"
done
"$LF" models list --all --json >models.json 2>models.err || fail "models list: $(cat models.err)"
n=$(grep -o '"run_status":"preempted"' models.json | wc -l)
[ "$n" -ge 2 ] || fail "the registry does not record the two preempted runs as preempted: $(head -c 600 models.json)"
ok

# 2. a burst of signals: the first stops the run, the others arrive during the save
at=$((20 + RANDOM % (iters - 100)))
run_until burst "$at"
kill -TERM "$pid"
for _ in $(seq 30); do kill -USR1 "$pid" 2>/dev/null || break; sleep 0.002; done
wait "$pid"
rc=$?
stopped burst "a burst of signals"
grep -q "stop already requested" burst.out || fail "no signal of the burst arrived before the exit (nothing tested)"
resumed_equal burst "a burst of signals"
echo "a burst of 31 signals: stopped at step $stop_step, the save completed, resume = uninterrupted"

# 2b. no thread of the run can take the signals asynchronously: all block them (a signal thread takes
# them with sigwait). oneDNN's JIT sgemm points rsp into the heap, so a signal frame pushed on a thread
# running it corrupts the heap (oneDNN #4845); every thread, OpenMP's included, must have them blocked.
"$LF" train cfg.json --threads 2 --out_dir=masks --train_iters=100000 >masks.out 2>&1 &
pid=$!
for _ in $(seq 200); do [ "$(train_steps masks)" -ge 5 ] && break; sleep 0.05; done
n=0 bad=0 waiting=0
case "$(uname -m)" in aarch64) sigwait_nr=137 ;; *) sigwait_nr=128 ;; esac
for task in /proc/"$pid"/task/*; do
    blk=$(awk '/^SigBlk:/ { print $2 }' "$task/status")
    n=$((n + 1))
    # SIGINT (2), SIGUSR1 (10), SIGTERM (15): bits 1, 9, 14 = 0x4202. The one thread inside
    # sigwait shows them unblocked while it waits (rt_sigtimedwait: 128 on x86-64, 137 on arm64)
    if [ $((0x$blk & 0x4202)) -ne $((0x4202)) ]; then
        if [ "$(cut -d' ' -f1 "$task/syscall" 2>/dev/null)" = "$sigwait_nr" ]; then waiting=$((waiting + 1)); else bad=$((bad + 1)); fi
    fi
done
kill -TERM "$pid"
wait "$pid"
rc=$?
[ "$n" -ge 4 ] || fail "expected several threads (main, OpenMP, loader, signal), saw $n"
[ "$bad" -eq 0 ] || fail "$bad of $n threads take SIGTERM/SIGINT/SIGUSR1 asynchronously"
[ "$waiting" -le 1 ] || fail "$waiting threads wait for the signals"
[ "$rc" -eq 75 ] || fail "the --threads 2 run exited $rc"
ok
echo "$((n - waiting)) of the $n threads of a --threads 2 run block SIGTERM, SIGINT and SIGUSR1; $waiting waits for them (sigwait)"

# 3. SIGINT, as a terminal sends it (job control on: a background job does not ignore it)
set -m
run_until int 50
kill -INT "$pid"
wait "$pid"
rc=$?
set +m
stopped int SIGINT

# 4. --resume auto on an empty out_dir; plain --resume there
train --out_dir=auto_fresh --resume auto >auto.out 2>&1 || fail "--resume auto on an empty out_dir: $(tail -3 auto.out)"
grep -q "starting a fresh run" auto.out || fail "--resume auto did not say it started fresh"
cmp -s "ref/ckpt/$final/model.safetensors" "auto_fresh/ckpt/$final/model.safetensors" || fail "fresh --resume auto differs"
ok
train --out_dir=nothing --resume >plain.out 2>&1 && fail "plain --resume without a checkpoint succeeded"
grep -q -- "--resume auto" plain.out || fail "the --resume error does not suggest --resume auto: $(cat plain.out)"
ok

# 5. checkpoint.requeue outside Slurm
unset SLURM_JOB_ID
run_until rq 30 --checkpoint.requeue=true
kill -TERM "$pid"
wait "$pid"
rc=$?
stopped rq "requeue outside Slurm"
grep -q "SLURM_JOB_ID is not" rq.out || fail "no warning that requeue needs Slurm"

# 6. ckpt verify
"$LF" ckpt verify p_TERM >v.out 2>&1 || fail "verify of a good run: $(cat v.out)"
grep -q "is complete: 4 files" v.out || fail "verify output: $(cat v.out)"
"$LF" ckpt verify p_TERM --all >v.out 2>&1 || fail "verify --all: $(cat v.out)"
[ "$(grep -c "step directory .* is complete" v.out)" -eq 2 ] || fail "verify --all should list 2 step directories: $(cat v.out)"
ok
last=$(cat p_TERM/ckpt/latest)
printf 'x' | dd of="p_TERM/ckpt/$last/optimizer.safetensors" bs=1 seek=200 conv=notrunc 2>/dev/null
"$LF" ckpt verify p_TERM >v.out 2>&1
[ $? -eq 1 ] || fail "verify of a damaged checkpoint should exit 1"
grep -q "file 'optimizer.safetensors' has SHA-256" v.out || fail "verify does not name the damaged file: $(cat v.out)"
ok
rm p_TERM/ckpt/latest
"$LF" ckpt verify p_TERM >v.out 2>&1
[ $? -eq 1 ] || fail "verify without latest should exit 1"
grep -q "latest' is missing" v.out || fail "verify does not say latest is missing: $(cat v.out)"
"$LF" ckpt verify p_TERM/ckpt/step_00000400 >/dev/null 2>&1 || fail "verify of a good step directory given directly"
"$LF" ckpt verify "p_TERM/ckpt/$last" >/dev/null 2>&1 && fail "verify of the damaged step directory given directly passed"
"$LF" ckpt verify >/dev/null 2>&1
[ $? -eq 2 ] || fail "ckpt verify without DIR should exit 2"
"$LF" ckpt frobnicate x >/dev/null 2>&1
[ $? -eq 2 ] || fail "an unknown ckpt subcommand should exit 2"
ok
echo "$passed passed"
