#!/usr/bin/env bash
# Training from llm.c's token files and with packed epochs, through the CLI:
# a directory of llm.c .bin files (written here with perl from GPT-2 ids that
# `llmforge tokenize` gives) trains once data.tokenizer names GPT-2, and is
# refused with a message naming the key without it; `data.sampling: packed`
# logs train/epoch; a packed run resumed at step 4 equals the uninterrupted
# one bit for bit, with the prefetch thread on and off; a truncated llm.c
# file is refused naming the file.
#   bash test_loader.sh LLMFORGE SOURCE_DIR SHARED_DIR
set -u

LF=${1:?usage: test_loader.sh LLMFORGE SOURCE_DIR SHARED_DIR}
SRC=${2:?source dir}
SHARED=${3:?shared dir}
: "$SRC"
case "$LF" in /*) ;; *) LF="$PWD/$LF" ;; esac
case "$SHARED" in /*) ;; *) SHARED="$PWD/$SHARED" ;; esac
GPT2="$SHARED/data/gpt2"

passed=0
fail() {
    echo "FAIL: $*" >&2
    echo "$passed passed, 1 failed"
    exit 1
}
ok() { passed=$((passed + 1)); }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/lf_loader.XXXXXX") || fail "mktemp"
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || fail "cd $tmp"

# ------------------------------------------------------------ llm.c files
head -c 60000 "$SHARED/data/tinyshakespeare.txt" >text.txt
"$LF" tokenize --tokenizer "gpt2:$GPT2" <text.txt >ids.txt 2>tok.err || fail "tokenize: $(cat tok.err)"
n=$(wc -w <ids.txt)
[ "$n" -gt 10000 ] || fail "only $n ids"
mkdir llmc
# llm.c's write_datafile: 256 int32 (magic 20240520, version 1, count), then u16 tokens
perl -e '
    my @ids = split " ", do { local $/; open my $f, "<", $ARGV[0] or die; <$f> };
    my $nv = int(@ids / 10);
    sub put { my ($path, @t) = @_; open my $o, ">:raw", $path or die;
              print $o pack("l<256", 20240520, 1, scalar(@t), (0) x 253), pack("S<*", @t); close $o; }
    put("llmc/tiny_val_000000.bin", @ids[0 .. $nv - 1]);
    put("llmc/tiny_train_000001.bin", @ids[$nv .. $#ids]);
' ids.txt || fail "perl could not write the llm.c files"
ok

# GPT-2's vocabulary makes the head the cost of a step (50257 x 32 per token): 16 tokens x 2
# sequences x 2 micro-batches per step and 8 steps (resumed at 4), a sixth of what 32 x 4 x 2 and
# 12 steps cost; accumulation, packing, resume and prefetch are the same code at any size
ARGS=(--model.n_layer=2 --model.n_head=2 --model.n_embd=32 --model.block_size=16
      --train_micro_batch_size_per_gpu=2 --gradient_accumulation_steps=2 --eval.interval=0 --eval.iters=2
      --checkpoint.interval=4 --steps_per_print=1 --threads=2 --optimizer.params.lr=1e-3)
"$LF" train "${ARGS[@]}" --data.dataset=llmc --out_dir=r0 --train_iters=2 >r0.log 2>&1 &&
    fail "training on llm.c files without data.tokenizer succeeded"
grep -q "data.tokenizer" r0.log || fail "no mention of data.tokenizer: $(cat r0.log)"
ok
"$LF" train "${ARGS[@]}" --data.dataset=llmc --data.tokenizer=char:/nonexistent --out_dir=r0b --train_iters=2 \
    >r0b.log 2>&1 && fail "a missing tokenizer file was accepted"
grep -q "data.tokenizer" r0b.log || fail "the tokenizer error does not name data.tokenizer: $(cat r0b.log)"
ok

# ------------------------------------------------------------ packed epochs, straight and resumed
P=(--data.dataset=llmc "--data.tokenizer=gpt2:$GPT2" --data.sampling=packed)
"$LF" train "${ARGS[@]}" "${P[@]}" --out_dir=straight --train_iters=8 >straight.log 2>&1 ||
    fail "packed train: $(cat straight.log)"
grep -q '"train/epoch"\|"epoch"' straight/log.jsonl || fail "log.jsonl has no epoch"
ok
grep -Eq '"sampling":[[:space:]]*"packed"' "straight/ckpt/$(cat straight/ckpt/latest)/trainer_state.json" ||
    fail "trainer_state.json does not record packed sampling"
ok
"$LF" train "${ARGS[@]}" "${P[@]}" --out_dir=resumed --train_iters=4 >a.log 2>&1 || fail "first half: $(cat a.log)"
"$LF" train "${ARGS[@]}" "${P[@]}" --out_dir=resumed --train_iters=8 --resume >b.log 2>&1 ||
    fail "resume: $(cat b.log)"
"$LF" train "${ARGS[@]}" "${P[@]}" --data.prefetch=0 --out_dir=noprefetch --train_iters=8 >c.log 2>&1 ||
    fail "prefetch 0: $(cat c.log)"
losses() { grep '"type":"train"' "$1" | sed 's/.*"step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/'; }
losses straight/log.jsonl >straight.txt
losses resumed/log.jsonl >resumed.txt
losses noprefetch/log.jsonl >noprefetch.txt
[ "$(wc -l <straight.txt)" -eq 8 ] || fail "straight run logged $(wc -l <straight.txt) train steps"
diff straight.txt resumed.txt >d1 || fail "resumed packed run differs: $(head -4 d1)"
ok
diff straight.txt noprefetch.txt >d2 || fail "prefetch 0 differs from prefetch 2: $(head -4 d2)"
ok
# packed differs from random (the mode is really used)
"$LF" train "${ARGS[@]}" --data.dataset=llmc "--data.tokenizer=gpt2:$GPT2" --out_dir=random --train_iters=8 \
    >d.log 2>&1 || fail "random: $(cat d.log)"
losses random/log.jsonl >random.txt
cmp -s straight.txt random.txt && fail "packed and random sampling gave the same losses"
ok
# the run samples text with the GPT-2 tokenizer it was given
out=$("$LF" sample --ckpt straight --prompt "ROMEO:" --max-new-tokens 8 --temperature 0 2>s.err) ||
    fail "sample: $(cat s.err)"
case "$out" in ROMEO:*) ;; *) fail "sample does not echo the prompt: $out" ;; esac
ok

# ------------------------------------------------------------ bad llm.c files
cp -r llmc bad
head -c 3000 llmc/tiny_train_000001.bin >bad/tiny_train_000001.bin
"$LF" train "${ARGS[@]}" --data.dataset=bad "--data.tokenizer=gpt2:$GPT2" --out_dir=rb --train_iters=2 >rb.log 2>&1 &&
    fail "a truncated llm.c file was accepted"
grep -q "tiny_train_000001.bin" rb.log || fail "the error does not name the file: $(cat rb.log)"
ok
"$LF" train "${ARGS[@]}" --data.dataset=llmc "--data.tokenizer=gpt2:$GPT2" --data.prefetch=65 --out_dir=rp \
    --train_iters=2 >rp.log 2>&1 && fail "data.prefetch 65 accepted"
grep -q "data.prefetch" rp.log || fail "the error does not name data.prefetch: $(cat rp.log)"
ok

echo "$passed passed, 0 failed"
