#!/usr/bin/env bash
# llmforge models, end to end on tiny character models in a temporary
# directory with LLMFORGE_REGISTRY pointing into it: a run, its resume, a run
# --init-from its checkpoint with eval.suite, two runs at once with a reader
# listing while they write; then list (filters, --json), show, lineage, diff,
# tag/untag, eval --suite, compare, promote (failing: exit 1, nothing tagged;
# then passing), gc (dry run, then real: tagged and latest kept), relink after
# a move; a corrupt registry warns and training goes on, while `models` fails
# clearly; usage errors exit 2.
#   bash test_models.sh LLMFORGE SOURCE_DIR SHARED_DIR
set -u

LF=${1:?usage: test_models.sh LLMFORGE SOURCE_DIR SHARED_DIR}
SHARED=${3:?shared dir}
case "$LF" in /*) ;; *) LF="$PWD/$LF" ;; esac
case "$SHARED" in /*) ;; *) SHARED="$PWD/$SHARED" ;; esac
. "$(dirname "$0")/cli_lib.sh"
cli_tmpdir models
export LLMFORGE_REGISTRY="$tmp/registry.db"

# run_status WANT NAME NEEDLE... -- COMMAND...: exit status WANT, no crash,
# every NEEDLE (fixed string) on stderr; stdout in out.txt, stderr in err.txt.
run_status() {
    local want=$1 name=$2
    shift 2
    local needles=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do
        needles+=("$1")
        shift
    done
    shift
    "$@" >"$tmp/out.txt" 2>"$tmp/err.txt"
    local rc=$?
    [ "$rc" -eq "$want" ] || fail "$name: exit status $rc, expected $want; stdout: $(cat "$tmp/out.txt"); stderr: $(cat "$tmp/err.txt")"
    ok
    if grep -qE 'Segmentation|AddressSanitizer|LeakSanitizer|runtime error:|core dumped' "$tmp/out.txt" "$tmp/err.txt"; then
        fail "$name: crash or sanitizer report: $(cat "$tmp/err.txt")"
    fi
    local n
    for n in "${needles[@]}"; do
        grep -qF -- "$n" "$tmp/err.txt" || fail "$name: stderr lacks '$n'; stderr: $(cat "$tmp/err.txt")"
        ok
    done
}
expect_out() {
    grep -qF -- "$2" "$tmp/out.txt" || fail "$1: output lacks '$2': $(cat "$tmp/out.txt")"
    ok
}
expect_no_out() {
    ! grep -qF -- "$2" "$tmp/out.txt" || fail "$1: output has '$2': $(cat "$tmp/out.txt")"
    ok
}

# ------------------------------------------------------------ data, suite
corpus="$SHARED/data/tinyshakespeare.txt"
if [ -f "$corpus" ]; then
    head -c 20000 "$corpus" >corpus.txt
else
    for i in $(seq 1 300); do echo "First Citizen: we are accounted poor citizens, the patricians good."; done >corpus.txt
fi
"$LF" prepare --char corpus.txt --out data >prepare.log 2>&1 || fail "prepare: $(cat prepare.log)"
ok
mkdir suite
printf '%s\n' '{"task": "perplexity", "name": "ppl"}' \
    '{"text": "First Citizen: we are accounted poor citizens."}' >suite/ppl.jsonl
printf '%s\n' '{"task": "multiple_choice", "name": "mc"}' \
    '{"context": "First Citizen", "choices": [":", "z"], "gold": 0}' >suite/mc.jsonl
T=(--data.dataset=data --model.n_layer=1 --model.n_head=2 --model.n_embd=16 --model.block_size=16
   --train_micro_batch_size_per_gpu=4 --eval.interval=5 --eval.iters=2 --checkpoint.interval=5
   --checkpoint.keep_last=10 --scheduler.warmup_iters=0 --optimizer.params.lr=0.003 --threads=1)

# ------------------------------------------------------------ training records
run_status 0 "train a" -- "$LF" train "${T[@]}" --train_iters=10 --out_dir=a
run_status 0 "resume a" -- "$LF" train "${T[@]}" --train_iters=20 --out_dir=a --resume
run_status 0 "train b --init-from a" -- "$LF" train "${T[@]}" --train_iters=10 --out_dir=b \
    --init-from a/ckpt/step_00000020 --eval.suite=suite
[ -s "$LLMFORGE_REGISTRY" ] || fail "training wrote no registry at $LLMFORGE_REGISTRY"
ok
grep -q '"type":"eval_suite"' b/log.jsonl || fail "b/log.jsonl has no eval_suite record"
ok

# two runs at once, and a reader while they write
"$LF" train "${T[@]}" --train_iters=30 --out_dir=c >c.log 2>&1 &
pc=$!
"$LF" train "${T[@]}" --train_iters=30 --out_dir=d --seed=7 >d.log 2>&1 &
pd=$!
reads=0
while kill -0 $pc 2>/dev/null || kill -0 $pd 2>/dev/null; do
    "$LF" models list --json >reader.json 2>reader.err || fail "a reader during two runs: $(cat reader.err)"
    reads=$((reads + 1))
done
wait $pc || fail "concurrent run c: $(cat c.log)"
wait $pd || fail "concurrent run d: $(cat d.log)"
ok
[ "$reads" -ge 1 ] || fail "the reader never read"
ok
# (the kernel notice the Prescott suite's environment causes is not the registry's)
grep "warning" c.log d.log | grep -v "warning: fp32 matmul:" | grep -q . &&
    fail "a concurrent run warned: $(grep warning c.log d.log)"
ok

# ------------------------------------------------------------ list
run_status 0 "list" -- "$LF" models list
for d in a/ckpt/step_00000005 a/ckpt/step_00000020 b/ckpt/step_00000010 c/ckpt/step_00000030 d/ckpt/step_00000030; do
    expect_out "list" "$tmp/$d"
done
# a: 5, 10 (r1) and 15, 20 (r2, resumed); b: 5, 10; c and d: 5 ... 30
[ "$(grep -c finished "$tmp/out.txt")" -eq 18 ] || fail "list: expected 18 finished checkpoints: $(cat out.txt)"
ok
run_status 0 "list --json" -- "$LF" models list --json
expect_out "list --json" '"id":"c1","run":"r1","step":5'
expect_out "list --json" '"metrics":{"train_loss":'
run_status 0 "list --where" -- "$LF" models list --where 'val_loss<0'
expect_out "list --where" "(no checkpoint matches)"
run_status 0 "list --where" -- "$LF" models list --where 'val_loss>=0' --where 'mc/acc>=0'
[ "$(grep -c '^c' "$tmp/out.txt")" -eq 2 ] || fail "list --where mc/acc: only b's two checkpoints ran the suite: $(cat out.txt)"
ok

# ------------------------------------------------------------ show, lineage, diff
run_status 0 "show b" -- "$LF" models show b
expect_out "show b" "checkpoint c6: step 10 of run r3"
expect_out "show b" "parent        initialised-from c4"
expect_out "show b" "ppl/perplexity"
expect_out "show b" "(suite)"
expect_out "show b" "run r3: finished"
run_status 0 "show r2" -- "$LF" models show r2
expect_out "show r2" "resumed-from c2"
run_status 0 "lineage" -- "$LF" models lineage b/ckpt/latest
expect_out "lineage" "initialised-from c4"
expect_out "lineage" "resumed-from c2"
expect_out "lineage" "from scratch"
expect_out "lineage" "origin: scratch"
[ "$(grep -c '^c' "$tmp/out.txt")" -eq 3 ] || fail "lineage: expected 3 links: $(cat out.txt)"
ok
run_status 0 "diff" -- "$LF" models diff c4 c6
expect_out "diff" "out_dir"
expect_out "diff" "eval.suite"
expect_out "diff" "train_iters"
expect_out "diff" "parent"
expect_no_out "diff" "model.n_embd" # equal on both sides
run_status 0 "diff seed" -- "$LF" models diff c/ckpt/step_00000030 d
expect_out "diff seed" "seed"
run_status 0 "diff self" -- "$LF" models diff c6 b
expect_out "diff self" "no differences"

# ------------------------------------------------------------ tags, eval, compare, promote
run_status 0 "tag" -- "$LF" models tag c1 keepme
run_status 0 "list --tag" -- "$LF" models list --tag keepme
[ "$(grep -c '^c' "$tmp/out.txt")" -eq 1 ] || fail "list --tag: $(cat out.txt)"
ok
run_status 0 "tag twice" -- "$LF" models tag c2 temp
run_status 0 "untag" -- "$LF" models untag c2 temp
run_status 1 "untag again" "has no tag 'temp'" -- "$LF" models untag c2 temp
run_status 1 "bad tag" "would read as a checkpoint" -- "$LF" models tag c2 c12

run_status 0 "eval" -- "$LF" models eval a --suite suite
expect_out "eval" "checkpoint c4"
expect_out "eval" "metrics recorded"
run_status 0 "show after eval" -- "$LF" models show c4
expect_out "show after eval" "ppl/nll"
run_status 0 "compare" -- "$LF" models compare c4 c6
expect_out "compare" "delta (b - a)"
expect_out "compare" "val_loss"
expect_out "compare" "ppl/perplexity"
run_status 0 "compare --suite" -- "$LF" models compare c2 c4 --suite suite
expect_out "compare --suite" "mc/acc"

run_status 1 "promote failing" "not promoted to 'prod'" "val_loss < 0.001 (it is" "ppl/nope > 1 (ppl/nope is not recorded)" -- \
    "$LF" models promote c6 --tag prod --require 'val_loss<0.001' --require 'ppl/perplexity>0' --require 'ppl/nope>1'
expect_out "promote failing" "FAIL val_loss < 0.001"
expect_out "promote failing" "ok   ppl/perplexity > 0"
run_status 0 "nothing tagged" -- "$LF" models list --tag prod
expect_out "nothing tagged" "(no checkpoint matches)"
run_status 0 "promote" -- "$LF" models promote c6 --tag prod --require 'val_loss<100' --require 'ppl/perplexity>0'
expect_out "promote" "promoted c6 to 'prod'"
run_status 0 "show prod" -- "$LF" models show prod
expect_out "show prod" "checkpoint c6"

# ------------------------------------------------------------ gc
run_status 0 "gc --dry-run" -- "$LF" models gc --keep-best 1 --keep-tagged --dry-run
expect_out "gc --dry-run" "dry run: nothing removed"
[ -d a/ckpt/step_00000015 ] || fail "gc --dry-run removed a directory"
ok
# nothing kept by rank: only what is always kept stays
run_status 0 "gc" -- "$LF" models gc --keep-best 0 --keep-tagged
expect_out "gc" "removed  c3"
expect_out "gc" "removed  c5"
expect_out "gc" "kept     c1     tagged"
expect_out "gc" "kept     c2     the newest checkpoint of its run"
[ ! -e a/ckpt/step_00000015 ] || fail "gc left a/ckpt/step_00000015"
ok
for d in a/ckpt/step_00000005 a/ckpt/step_00000010 a/ckpt/step_00000020 b/ckpt/step_00000010; do
    [ -d "$d" ] || fail "gc removed $d (tagged, a run's newest or latest)"
    ok
done
run_status 0 "list --all" -- "$LF" models list --all
expect_out "list --all" "removed(gc)"

# ------------------------------------------------------------ relink
mkdir moved
mv b moved/
run_status 0 "relink" -- "$LF" models relink moved
expect_out "relink" "relinked c6"
expect_out "relink" "$tmp/moved/b/ckpt/step_00000010"
run_status 0 "show moved" -- "$LF" models show moved/b
expect_out "show moved" "checkpoint c6"
expect_out "show moved" "out_dir       $tmp/moved/b"

# ------------------------------------------------------------ failures
printf 'this is not a database, only bytes %.0s' $(seq 1 200) >junk.db
run_status 0 "train with a corrupt registry" "model registry" "not a database" "training goes on" -- \
    env LLMFORGE_REGISTRY="$tmp/junk.db" "$LF" train "${T[@]}" --train_iters=5 --out_dir=e
[ -d e/ckpt/step_00000005 ] || fail "the run with a corrupt registry did not checkpoint"
ok
run_status 1 "models on a corrupt registry" "not a database" "hint: move the damaged file aside" -- \
    "$LF" models --registry junk.db list
run_status 1 "models on a missing registry" "does not exist" -- "$LF" models --registry nothere.db list
[ ! -e nothere.db ] || fail "models created a registry"
ok
run_status 0 "registry off" -- "$LF" train "${T[@]}" --train_iters=5 --out_dir=f --registry.enabled=false \
    --registry.path="$tmp/off.db"
[ ! -e off.db ] || fail "registry.enabled=false still wrote a registry"
ok
run_status 1 "show unknown" "no checkpoint c999" -- "$LF" models show c999
run_status 1 "eval a removed checkpoint" "removed from disk" -- "$LF" models eval c3 --suite suite
run_status 1 "eval bad suite" "holds no task file" -- "$LF" models eval c4 --suite data
run_status 2 "unknown command" "unknown command 'frobnicate'" -- "$LF" models frobnicate
run_status 2 "promote without requirements" "--require" -- "$LF" models promote c6 --tag prod
run_status 2 "gc without --keep-best" "--keep-best K is required" -- "$LF" models gc
run_status 2 "bad --where" "not a condition" -- "$LF" models list --where 'val_loss'
run_status 2 "show needs an id" "expects ID|PATH" -- "$LF" models show
run_status 2 "unknown option" "unknown option '--frob'" -- "$LF" models list --frob
run_status 0 "help" -- "$LF" models --help
expect_out "help" "promote ID --tag NAME"

echo "$passed passed, 0 failed"
