#!/usr/bin/env bash
# `llmforge prepare` on Hugging Face dataset layouts through the CLI
# (tests/fixtures/hf_datasets): a hub repository with a configs: header
# prepares its own splits with --keep-splits and names each file it leaves
# out once; a save_to_disk DatasetDict likewise; --split 7:2:1 is a
# spelling of 7,2,1; --split with --keep-splits is refused (exit 2); a
# repository with nothing readable and a configs: path matching nothing fail
# (exit 1) naming the file, with no dataset.json; the summary states the
# split used and that the default is the default.
#   bash test_prepare_hf.sh LLMFORGE SOURCE_DIR SHARED_DIR
set -u

LF=${1:?usage: test_prepare_hf.sh LLMFORGE SOURCE_DIR SHARED_DIR}
SRC=${2:?source dir}
case "$LF" in /*) ;; *) LF="$PWD/$LF" ;; esac
case "$SRC" in /*) ;; *) SRC="$PWD/$SRC" ;; esac
FIX="$SRC/tests/fixtures/hf_datasets"

passed=0
fail() {
    echo "FAIL: $*" >&2
    echo "$passed passed, 1 failed"
    exit 1
}
ok() { passed=$((passed + 1)); }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/lf_prep_hf.XXXXXX") || fail "mktemp"
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || fail "cd $tmp"

# a hub repository, its own splits
"$LF" prepare --input "$FIX/hub" --tokenizer char --out hub --keep-splits >hub.out 2>hub.err || fail "hub: $(cat hub.err)"
grep -qE '^  train +4 records' hub.out && grep -qE '^  val +2 records' hub.out && grep -qE '^  test +1 records' hub.out ||
    fail "hub splits: $(cat hub.out)"
grep -q "split: the dataset's own files (--keep-splits)" hub.out || fail "hub split line: $(cat hub.out)"
for f in .gitattributes README.md alt/part-0.parquet; do
    [ "$(grep -c "skipping '$FIX/hub/$f'" hub.err)" = 1 ] || fail "hub: '$f' not named once as left out: $(cat hub.err)"
done
grep -q "config 'default' of its README.md" hub.err || fail "hub config: $(cat hub.err)"
[ -f hub/dataset.json ] || fail "hub: no dataset.json"
ok

# its other config
"$LF" prepare --input "$FIX/hub" --subset alt --tokenizer char --out alt --split none >alt.out 2>&1 || fail "alt: $(cat alt.out)"
grep -qE '^  train +2 records' alt.out || fail "alt: $(cat alt.out)"
ok

# save_to_disk DatasetDict, Alpaca through save_to_disk
"$LF" prepare --input "$FIX/save_dict" --tokenizer char --out sd --keep-splits >sd.out 2>&1 || fail "save_dict: $(cat sd.out)"
grep -qE '^  train +4 records' sd.out && grep -qE '^  test +1 records' sd.out || fail "save_dict: $(cat sd.out)"
"$LF" prepare --input "$FIX/save_alpaca" --mode sft --tokenizer char --out sa --split none >sa.out 2>&1 ||
    fail "save_alpaca: $(cat sa.out)"
grep -qE '^  train +3 records' sa.out || fail "save_alpaca: $(cat sa.out)"
ok

# --split 7:2:1 equals 7,2,1; the default is said to be the default
"$LF" prepare --input "$FIX/hub_dirs" --tokenizer char --out s1 --split 7:2:1 >s1.out 2>&1 || fail "7:2:1: $(cat s1.out)"
"$LF" prepare --input "$FIX/hub_dirs" --tokenizer char --out s2 --split 7,2,1 >s2.out 2>&1 || fail "7,2,1: $(cat s2.out)"
cmp -s s1/dataset.json s2/dataset.json || fail "7:2:1 and 7,2,1 differ"
grep -q "split: content hash, train/val/test 7/2/1$" s1.out || fail "7:2:1 summary: $(cat s1.out)"
"$LF" prepare --input "$FIX/json_field.json" --tokenizer char --out d >d.out 2>&1 || fail "default: $(cat d.out)"
grep -q "0.9/0.1/0 (the default" d.out || fail "default split line: $(cat d.out)"
"$LF" prepare --input "$FIX/hub" --tokenizer char --out x --keep-splits --split 7:2:1 >x.out 2>&1
[ $? = 2 ] || fail "--keep-splits with --split: not a usage error"
grep -q "give one of them" x.out || fail "--keep-splits with --split: $(cat x.out)"
"$LF" prepare --input "$FIX/hub" --tokenizer char --out x --split 7:2 >x.out 2>&1 || fail "7:2 refused: $(cat x.out)"
"$LF" prepare --input "$FIX/hub" --tokenizer char --out x --split 7:2,1 >x.out 2>&1
[ $? = 2 ] && grep -q "TRAIN:VAL\[:TEST\]" x.out || fail "mixed separators: $(cat x.out)"
ok

# bad layouts: exit 1, the file named, nothing written
"$LF" prepare --input "$FIX/hub_empty" --tokenizer char --out e >e.out 2>&1
[ $? = 1 ] || fail "hub_empty: not exit 1: $(cat e.out)"
grep -q "hub_empty' holds no input files; left out: README.md (the dataset card of the directory), data/notes.bin" e.out ||
    fail "hub_empty: $(cat e.out)"
[ ! -e e/dataset.json ] || fail "hub_empty wrote a dataset.json"
"$LF" prepare --input "$FIX/hub_missing" --tokenizer char --out m >m.out 2>&1
[ $? = 1 ] || fail "hub_missing: not exit 1"
grep -q "hub_missing/README.md: config 'default', split 'test': data_files path 'data/test-\*' matches no file" m.out ||
    fail "hub_missing: $(cat m.out)"
[ ! -e m/dataset.json ] || fail "hub_missing wrote a dataset.json"
head -c 600 "$FIX/save_ds/data-00000-of-00001.arrow" >cut.arrow
"$LF" prepare --input cut.arrow --tokenizer char --out c >c.out 2>&1
[ $? = 1 ] && grep -q "cut.arrow: Arrow IPC stream: .*cut short?" c.out || fail "cut arrow: $(cat c.out)"
[ ! -e c/dataset.json ] && [ ! -e c/train_000.bin ] || fail "cut arrow left files"
ok

echo "$passed passed, 0 failed"
