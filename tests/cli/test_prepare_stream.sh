#!/usr/bin/env bash
# `llmforge prepare` streaming options through the CLI: --threads 1 and 2
# write identical datasets (char and, when its files are in the shared
# directory, GPT-2), --shard-tokens rolls shards over and the trainer-facing
# reader accepts them, bad --shard-tokens/--threads values are refused naming
# the option (exit 2), an output directory that cannot be written fails
# (exit 1) without a dataset.json, and the progress bar is drawn on a
# terminal only (checked with script(1) when it is installed).
#   bash test_prepare_stream.sh LLMFORGE SOURCE_DIR SHARED_DIR
set -u

LF=${1:?usage: test_prepare_stream.sh LLMFORGE SOURCE_DIR SHARED_DIR}
SRC=${2:?source dir}
SHARED=${3:?shared dir}
case "$LF" in /*) ;; *) LF="$PWD/$LF" ;; esac
case "$SRC" in /*) ;; *) SRC="$PWD/$SRC" ;; esac
case "$SHARED" in /*) ;; *) SHARED="$PWD/$SHARED" ;; esac

passed=0
fail() {
    echo "FAIL: $*" >&2
    echo "$passed passed, 1 failed"
    exit 1
}
ok() { passed=$((passed + 1)); }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/lf_prep_stream.XXXXXX") || fail "mktemp"
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || fail "cd $tmp"

# ------------------------------------------------------------ input
# JSON Lines of text paragraphs: Tiny Shakespeare when it is here, else a
# generated corpus; a few bad lines for --skip-bad-records.
if [ -r "$SHARED/data/tinyshakespeare.txt" ]; then
    awk 'BEGIN { RS = "" } { gsub(/\\/, "\\\\"); gsub(/"/, "\\\""); gsub(/\n/, "\\n"); printf "{\"text\": \"%s\"}\n", $0 }' \
        "$SHARED/data/tinyshakespeare.txt" >base.jsonl
else
    for i in $(seq 1 3000); do
        echo "{\"text\": \"line $i: to be or not to be, that is question $((i * 7 % 13))\\nand more $i\"}"
    done >base.jsonl
fi
{ head -n 2000 base.jsonl; echo '{not json'; sed -n '2001,4000p' base.jsonl; echo '{"text": 5}'; tail -n +4001 base.jsonl; } >in.jsonl
[ "$(wc -l <in.jsonl)" -gt 1000 ] || fail "input has $(wc -l <in.jsonl) lines"
ok

same_dir() { # same_dir A B: the same files with the same bytes
    [ "$(cd "$1" && ls)" = "$(cd "$2" && ls)" ] || fail "$1 and $2 hold different files: $(ls "$1") / $(ls "$2")"
    local f
    for f in "$1"/*; do
        cmp -s "$f" "$2/$(basename "$f")" || fail "$(basename "$f") differs between $1 and $2"
    done
    ok
}

# ------------------------------------------------------------ threads 1 vs 2, rollover
for t in 1 2; do
    "$LF" prepare --input in.jsonl --tokenizer char --split 0.8,0.1,0.1 --skip-bad-records --shard-tokens 100000 \
        --threads "$t" --out "c$t" >"c$t.log" 2>"c$t.err" || fail "prepare --threads $t: $(cat "c$t.err")"
    ok
done
same_dir c1 c2
[ "$(tail -n +2 c1.log)" = "$(tail -n +2 c2.log)" ] || fail "summaries differ: $(cat c1.log c2.log)"
ok
grep -q "skipped 2 bad records" c1.log || fail "summary should count 2 skipped records: $(cat c1.log)"
ok
n_train=$(ls c1/train_*.bin | wc -l)
[ "$n_train" -ge 2 ] || fail "--shard-tokens 100000 gave $n_train train shard(s)"
ok
# the counts add up: the summary's train tokens = the sum over the shards (64-byte header, u16 tokens)
want=$(sed -n 's/^  train *[0-9]* records *\([0-9]*\) tokens.*/\1/p' c1.log)
got=0
for f in c1/train_*.bin; do got=$((got + ($(wc -c <"$f") - 64) / 2)); done
[ "$want" = "$got" ] || fail "summary says $want train tokens, shards hold $got"
ok
for f in c1/train_*.bin; do
    [ $((($(wc -c <"$f") - 64) / 2)) -le 100000 ] || fail "$f holds more than --shard-tokens tokens"
done
ok
# the trainer's reader takes the dataset (one tiny step)
"$LF" train "$SRC/configs/shakespeare_char_cpu.json" --data.dataset=c1 --model.n_layer=1 --model.n_head=2 --model.n_embd=16 --model.block_size=16 \
    --train_iters=1 --eval.iters=1 --steps_per_print=1 --out_dir=run >train.log 2>&1 ||
    fail "train on the rolled-over dataset: $(tail -5 train.log)"
ok

GPT2="$SHARED/data/gpt2"
if [ -r "$GPT2/encoder.json" ]; then
    head -n 1500 base.jsonl >g.jsonl
    for t in 1 2; do
        "$LF" prepare --input g.jsonl --tokenizer "gpt2:$GPT2" --shard-tokens 50000 --threads "$t" --out "g$t" \
            >"g$t.log" 2>&1 || fail "prepare gpt2 --threads $t: $(cat "g$t.log")"
    done
    same_dir g1 g2
    [ "$(ls g1/train_*.bin | wc -l)" -ge 2 ] || fail "gpt2: expected several train shards"
    ok
else
    echo "note: no GPT-2 files in $GPT2; the gpt2 part is skipped"
fi

# ------------------------------------------------------------ bad option values
expect_usage() { # expect_usage NEEDLE ARGS...: exit 2 and NEEDLE on stderr
    local needle=$1
    shift
    "$LF" prepare "$@" >out.txt 2>err.txt
    local rc=$?
    cat err.txt >>usage.err
    [ $rc -eq 2 ] || fail "prepare $*: exit $rc, expected 2; stderr: $(cat err.txt)"
    grep -qF -- "$needle" err.txt || fail "prepare $*: stderr does not name $needle: $(cat err.txt)"
    ok
}
for v in 0 -5 abc 12x 99999999999999; do
    expect_usage --shard-tokens --input in.jsonl --tokenizer char --out bad --shard-tokens "$v"
done
for v in -1 1025 two 1.5 ""; do
    expect_usage --threads --input in.jsonl --tokenizer char --out bad --threads "$v"
done
expect_usage --threads --char in.jsonl --out bad --threads 2
expect_usage --shard-tokens --char in.jsonl --out bad --shard-tokens 10
[ ! -e bad ] || fail "a refused command created its output directory"
ok

# ------------------------------------------------------------ an output directory that cannot be written
echo x >plain
"$LF" prepare --input in.jsonl --tokenizer char --out plain/out >out.txt 2>unwritable.err
rc=$?
cp unwritable.err err.txt
[ $rc -eq 1 ] || fail "unwritable output: exit $rc, expected 1; stderr: $(cat err.txt)"
grep -qF "plain/out" err.txt || fail "unwritable output: stderr does not name it: $(cat err.txt)"
ok
# a shard that cannot be created half-way: no dataset.json, no shard of the run
mkdir -p half/train_001.bin.tmp
"$LF" prepare --input in.jsonl --tokenizer char --skip-bad-records --shard-tokens 100000 --out half >out.txt 2>half.err
rc=$?
cp half.err err.txt
[ $rc -eq 1 ] || fail "half-way failure: exit $rc, expected 1; stderr: $(cat err.txt)"
grep -qF "train_001.bin" err.txt || fail "half-way failure: stderr does not name the shard: $(cat err.txt)"
[ ! -e half/dataset.json ] || fail "a failed prepare left half/dataset.json"
[ -z "$(ls half | grep '\.bin$')" ] || fail "a failed prepare left shards: $(ls half)"
ok

# ------------------------------------------------------------ progress: a bar on a terminal only
grep -q $'\r' c1.err && fail "stderr is not a terminal, yet it holds a carriage return: $(od -c c1.err | head)"
grep -q "MB/s" c1.err && fail "stderr is not a terminal, yet a progress bar was drawn"
ok
if command -v script >/dev/null 2>&1 && script -qec true /dev/null >/dev/null 2>&1; then
    script -qec "'$LF' prepare --input in.jsonl --tokenizer char --skip-bad-records --threads 2 --out tty" /dev/null \
        >tty.txt 2>&1 || fail "prepare under script(1): $(cat tty.txt)"
    grep -q "MB/s" tty.txt || fail "no progress bar on a terminal: $(od -c tty.txt | head -20)"
    grep -q "records" tty.txt && grep -q "tokens" tty.txt && grep -q "100.0%" tty.txt ||
        fail "the progress bar lacks records/tokens/100%: $(od -c tty.txt | head -20)"
    grep -q "prepared .* records" tty.txt || fail "no summary after the bar: $(cat tty.txt)"
    ok
else
    echo "note: script(1) is not available; the terminal part is skipped"
fi

# no run crashed or tripped a sanitizer (an ASan report also exits 1)
if grep -lE 'AddressSanitizer|LeakSanitizer|runtime error:|Segmentation' ./*.err ./*.log ./*.txt 2>/dev/null; then
    fail "a sanitizer report or crash in the files above"
fi
ok

echo "$passed passed, 0 failed"
