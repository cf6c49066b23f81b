#!/usr/bin/env bash
# A real full disk (issue 17): out_dir/ckpt is a small tmpfs filled to an
# exact number of free pages (tmpfs charges each file ceil(size / 4096)
# pages; directories cost none), so ENOSPC comes exactly where wanted.
#   A. Room for one checkpoint and not one page more: the first save's
#      step directory is complete but latest.tmp cannot be written. The run
#      fails naming latest.tmp and the errno; no latest.tmp is left; `ckpt
#      verify` (strict) fails on the missing latest while the step directory
#      verifies; --resume falls back to that step directory and says so, and
#      (the tmpfs grown) ends with the uninterrupted run's bytes.
#      (Before issue 17: a 0-byte latest.tmp was left and --resume said "no
#      checkpoint".)
#   B. keep_last 2 and room for exactly two checkpoints, latest and latest.tmp: the
#      third save must first remove what it makes obsolete; the run
#      completes, and equals the uninterrupted run. (Before: ENOSPC at the
#      third save, since pruning came after the write.)
#   C. Room for one checkpoint and a half: the second save fails in the
#      middle, naming the file and the errno; the first checkpoint stays
#      latest, verifies, and nothing temporary is left; resumed on a grown
#      tmpfs the run ends with the uninterrupted run's bytes.
#   test_full_disk.sh LLMFORGE SOURCE_DIR SHARED_DIR
# Needs root and mount -t tmpfs; without, it prints "SKIPPED: reason".
set -u
LF=$1 SHARED=$3
case "$LF" in /*) ;; *) LF="$PWD/$LF" ;; esac
. "$(dirname "$0")/cli_lib.sh"
. "$(dirname "$0")/full_disk_lib.sh"
full_disk_setup full_disk
cat >cfg.json <<EOF
{"data": {"dataset": "$tmp/ds"},
 "model": {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 16},
 "train_batch_size": 4, "train_iters": 12, "scheduler": {"warmup_iters": 2},
 "eval": {"interval": 0, "iters": 1}, "steps_per_print": 100}
EOF
train() { "$LF" train cfg.json --threads 1 "$@"; }
train --out_dir=ref --checkpoint.interval=4 >ref.out 2>&1 || fail "uninterrupted run: $(tail -3 ref.out)"
final=ref/ckpt/step_00000012/model.safetensors
# pages one checkpoint takes on tmpfs
ckpt_pages=$(ckpt_pages ref/ckpt/step_00000004)
[ "$ckpt_pages" -ge 2 ] || fail "cannot size a checkpoint ($ckpt_pages pages)"
echo "one checkpoint takes $ckpt_pages pages of tmpfs"

# A. ENOSPC exactly at latest.tmp
disk a "$ckpt_pages"
train --out_dir=a --checkpoint.interval=5 >a.out 2>&1 && fail "A: the run succeeded on a full disk"
grep -q "latest.tmp' failed: No space left on device" a.out || fail "A: the error does not name latest.tmp and ENOSPC: $(tail -3 a.out)"
[ -d a/ckpt/step_00000005 ] && [ ! -e a/ckpt/latest ] || fail "A: expected step_00000005 installed and no latest: $(ls -a a/ckpt | tr '\n' ' ')"
no_temporaries a "A"
"$LF" ckpt verify a/ckpt/step_00000005 >/dev/null 2>&1 || fail "A: the orphaned step directory does not verify"
"$LF" ckpt verify a >v.out 2>&1 && fail "A: ckpt verify passed without latest"
grep -q "latest' is missing" v.out || fail "A: ckpt verify does not say latest is missing: $(cat v.out)"
ok
mount -o remount,size=1m a/ckpt || fail "A: cannot grow the tmpfs"
train --out_dir=a --checkpoint.interval=5 --resume >a2.out 2>&1 || fail "A: --resume failed: $(tail -3 a2.out)"
grep -q "is missing; using '$tmp/a/ckpt/step_00000005'" a2.out || grep -q "is missing; using 'a/ckpt/step_00000005'" a2.out ||
    fail "A: --resume does not say it fell back to step_00000005: $(grep -i warn a2.out)"
grep -q "resumed from .*step_00000005 at step 5" a2.out || fail "A: did not resume at step 5"
cmp -s "$final" a/ckpt/step_00000012/model.safetensors || fail "A: the resumed run differs from the uninterrupted one"
ok
echo "A. ENOSPC at latest.tmp: error names the file, step_00000005 kept, --resume fell back to it; same bytes"

# B. room for two checkpoints and latest: the third save needs the pruning first
# latest.tmp beside latest: 2 pages; and 2 of slack: ckpt_pages is step 4's, and a later save can
# take a page more (trainer_state.json grows with the step and holds the resolved configuration:
# 4003 bytes at step 4, 4079 at step 8, 4227 at step 12 once the config gained train.objective
# and dpo.beta, so step 12's crossed a page and the run then filled the disk exactly, which failed
# at latest.tmp; one slack page stood for that growth, the second is margin for the next keys)
# while two pages are still far less than the 18-page checkpoint the pruning must free first
disk b $((2 * ckpt_pages + 4))
train --out_dir=b --checkpoint.interval=4 --checkpoint.keep_last=2 >b.out 2>&1 ||
    fail "B: a run that keeps 2 checkpoints on a disk holding 2 failed: $(tail -3 b.out)"
[ "$(ls b/ckpt | grep -c '^step_')" -eq 2 ] || fail "B: expected 2 step directories: $(ls b/ckpt | tr '\n' ' ')"
cmp -s "$final" b/ckpt/step_00000012/model.safetensors || fail "B: the run differs from the uninterrupted one"
no_temporaries b "B"
ok
echo "B. keep_last 2 on a disk holding 2 checkpoints: the obsolete one went before the third save; same bytes"

# C. room for one checkpoint and a half: ENOSPC in the middle of the second save
disk c $((ckpt_pages + ckpt_pages / 2 + 1))
train --out_dir=c --checkpoint.interval=4 >c.out 2>&1 && fail "C: the run succeeded on a full disk"
grep -qE "'$tmp/c/ckpt/\.tmp_step_00000008/[a-z_.]+'.*No space left on device|No space left on device" c.out ||
    fail "C: no ENOSPC message: $(tail -3 c.out)"
grep -q ".tmp_step_00000008/" c.out || fail "C: the error does not name the file being written: $(tail -2 c.out)"
[ "$(cat c/ckpt/latest)" = step_00000004 ] || fail "C: latest moved: $(cat c/ckpt/latest 2>&1)"
"$LF" ckpt verify c >/dev/null 2>&1 || fail "C: latest does not verify after the failed save"
no_temporaries c "C"
ok
mount -o remount,size=1m c/ckpt || fail "C: cannot grow the tmpfs"
train --out_dir=c --checkpoint.interval=4 --resume auto >c2.out 2>&1 || fail "C: the resume failed: $(tail -3 c2.out)"
cmp -s "$final" c/ckpt/step_00000012/model.safetensors || fail "C: the resumed run differs from the uninterrupted one"
ok
echo "C. ENOSPC in the middle of a save: $(grep -o "[^ ]*: No space left on device" c.out | head -1 | sed "s|$tmp/||"); step 4 stays latest; same bytes after resume"
echo "$passed passed"
