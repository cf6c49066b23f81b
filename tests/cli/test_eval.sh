#!/usr/bin/env bash
# llmforge eval from the command line: train a tiny character model for 10
# steps (no check depends on how well it has learnt), then score it with every task kind (perplexity over text lines, a
# text file and a dataset split; multiple_choice; classification;
# generation; ranking; exact_match); check the table, the JSON keys and
# ranges, --out, --limit, determinism, batch invariance; and that bad input
# ends with a message naming file:line (exit 1) and bad options with exit 2,
# without crashing.
#   bash test_eval.sh LLMFORGE SOURCE_DIR SHARED_DIR
set -u

LF=${1:?usage: test_eval.sh LLMFORGE SOURCE_DIR SHARED_DIR}
SHARED=${3:?shared dir}
case "$LF" in /*) ;; *) LF="$PWD/$LF" ;; esac
case "$SHARED" in /*) ;; *) SHARED="$PWD/$SHARED" ;; esac

passed=0
fail() {
    echo "FAIL: $*" >&2
    echo "$passed passed, 1 failed"
    exit 1
}
ok() { passed=$((passed + 1)); }
PY=$(command -v python3 || true)
[ -n "$PY" ] || echo "note: python3 not found; JSON is checked with grep only"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/lf_eval.XXXXXX") || fail "mktemp"
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || fail "cd $tmp"

# run_status WANT NAME NEEDLE... -- COMMAND...: exit status WANT, no crash,
# every NEEDLE (fixed string) on stderr; stdout in out.txt.
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
    [ "$rc" -eq "$want" ] || fail "$name: exit status $rc, expected $want; stderr: $(cat "$tmp/err.txt")"
    ok
    if grep -qE 'Segmentation|AddressSanitizer|LeakSanitizer|runtime error:|core dumped' "$tmp/out.txt" "$tmp/err.txt"; then
        fail "$name: crash or sanitizer report: $(cat "$tmp/err.txt")"
    fi
    ok
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

# ------------------------------------------------------------ a tiny model
corpus="$SHARED/data/tinyshakespeare.txt"
if [ -f "$corpus" ]; then
    head -c 20000 "$corpus" >corpus.txt
else
    for i in $(seq 1 300); do echo "ROMEO: what light through yonder window breaks? It is the east."; done >corpus.txt
fi
# every character the task files use is in the vocabulary
echo "the quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG! ?,;:'-" >>corpus.txt
"$LF" prepare --char corpus.txt --out data >prepare.log 2>&1 || fail "prepare: $(cat prepare.log)"
ok
# LF_TEST_ARCH=llama: the same tasks on a Llama (multi-query attention)
ARCH_ARGS=()
[ "${LF_TEST_ARCH:-gpt2}" = llama ] && ARCH_ARGS=(--model.arch=llama --model.n_kv_head=1 --model.ffn_hidden=64)
"$LF" train --data.dataset=data --model.n_layer=2 --model.n_head=2 --model.n_embd=32 --model.block_size=32 \
    --train_micro_batch_size_per_gpu=8 --eval.interval=0 --eval.iters=1 --checkpoint.interval=0 \
    --train_iters=10 --out_dir=run --threads=2 "${ARCH_ARGS[@]}" >train.log 2>&1 || fail "train: $(cat train.log)"
ok
[ -s run/ckpt/latest ] || fail "train wrote no checkpoint"
ok

# ------------------------------------------------------------ task files
cat >mc.jsonl <<'EOF'
{"task": "multiple_choice", "name": "mc"}
{"context": "First Citizen:\nBefore we proceed any further, hear me", "choices": ["speak.", "jump.", "the fox"], "gold": 0}
{"context": "All:\nSpeak,", "choices": ["speak.", "dog", "lazy fox"], "gold": [0, 1]}
{"context": "You are all resolved rather to die than to", "choices": ["famish?", "quick", "brown"], "gold": 0}
EOF
cat >cls.jsonl <<'EOF'
{"task": "classification", "labels": ["yes", "no"], "verbalizers": {"yes": "Ay", "no": "Nay"}}
{"text": "You are all resolved rather to die than to famish?", "label": "yes"}
{"text": "We know't, we know't.", "label": "no"}
{"text": "Let us kill him, and we'll have corn at our own price.", "label": 0}
EOF
cat >rank.jsonl <<'EOF'
{"task": "ranking", "query": "First Citizen:\nBefore we proceed any further, hear me", "candidates": ["speak.", "jump.", "fox", "dog", "the"], "gold": 0}
{"task": "ranking", "query": "Let us kill him, and we'll have corn at our own", "candidates": ["price.", "fox"], "gold": 1, "filtered": [0]}
EOF
cat >gen.jsonl <<'EOF'
{"task": "generation", "stop": ["\n"], "max_new_tokens": 24}
{"prompt": "First Citizen:\n", "references": ["Before we proceed any further, hear me speak."]}
{"prompt": "All:\n", "references": ["Speak, speak.", "Speak."]}
EOF
cat >em.jsonl <<'EOF'
{"task": "exact_match", "prompt": "First Citizen:\nYou are all resolved rather to die than to ", "answer": "famish?"}
{"task": "exact_match", "prompt": "All:\n", "answers": ["Resolved. resolved.", "Resolved."]}
EOF
cat >ppl.jsonl <<'EOF'
{"task": "perplexity", "stride": 16}
{"text": "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n"}
{"text": "the quick brown fox jumps over the lazy dog."}
EOF
head -c 2000 corpus.txt >text.txt

# ------------------------------------------------------------ every kind, table and JSON
ALL=(--task mc.jsonl --task cls.jsonl --task rank.jsonl --task gen.jsonl --task em.jsonl --task ppl.jsonl)
run_status 0 "table" -- "$LF" eval --ckpt run "${ALL[@]}" --threads 2
for s in "checkpoint " "multiple_choice" "acc_norm" "classification" "macro_f1" "confusion matrix (rows gold" \
    "hits@10" "mrr" "bleu" "rougeLsum" "exact_match" "perplexity" "bits_per_byte"; do
    expect_out "table" "$s"
done

run_status 0 "json" -- "$LF" eval --ckpt run "${ALL[@]}" --json --out res.json --threads 2
cp out.txt stdout.json
[ -s res.json ] || fail "--out wrote nothing"
ok
cmp -s res.json stdout.json || fail "--out and --json differ"
ok
for k in '"checkpoint":' '"tasks":' '"metrics":' '"mc/acc":' '"mc/acc_norm":' '"cls/accuracy":' '"cls/macro_f1":' \
    '"confusion":' '"rank/hits@1":' '"rank/hits@3":' '"rank/hits@10":' '"rank/mrr":' '"gen/bleu":' '"gen/rouge1":' \
    '"gen/rouge2":' '"gen/rougeL":' '"gen/rougeLsum":' '"em/exact_match":' '"em/f1":' '"ppl/nll":' \
    '"ppl/perplexity":' '"ppl/bits_per_byte":' '"bleu_signature":' '"rouge_tokenizer":'; do
    grep -qF -- "$k" res.json || fail "JSON lacks $k: $(cat res.json)"
    ok
done
if [ -n "$PY" ]; then
    "$PY" - res.json <<'EOF' || fail "JSON checks failed"
import json, math, sys
r = json.load(open(sys.argv[1]))
t, m = r["tasks"], r["metrics"]
assert set(t) == {"mc", "cls", "rank", "gen", "em", "ppl"}, t.keys()
kinds = {"mc": "multiple_choice", "cls": "classification", "rank": "ranking", "gen": "generation",
         "em": "exact_match", "ppl": "perplexity"}
for name, kind in kinds.items():
    assert t[name]["kind"] == kind, (name, t[name]["kind"])
    for k, v in t[name]["metrics"].items():
        assert m[name + "/" + k] == v, (name, k)
assert t["mc"]["examples"] == 3 and t["cls"]["examples"] == 3 and t["rank"]["examples"] == 2
for k in ("mc/acc", "mc/acc_norm", "cls/accuracy", "cls/macro_f1", "rank/hits@1", "rank/mrr", "gen/rouge1",
          "em/exact_match", "em/f1"):
    assert 0 <= m[k] <= 1, (k, m[k])
assert 0 <= m["gen/bleu"] <= 100
# the second ranking query has its only competitor filtered: rank 1
assert m["rank/hits@10"] == 1.0
assert m["rank/hits@1"] in (0.5, 1.0)
ppl = t["ppl"]
assert ppl["stride"] == 16 and ppl["block_size"] == 32 and ppl["documents"] == 2
assert abs(math.exp(m["ppl/nll"]) - m["ppl/perplexity"]) < 1e-9 * m["ppl/perplexity"]
assert m["ppl/perplexity"] > 1
# each text is prefixed with the end-of-text ("\n" for a char vocabulary): every character is scored
texts = ["First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n",
         "the quick brown fox jumps over the lazy dog."]
assert ppl["tokens"] == sum(len(x) for x in texts), ppl["tokens"]
assert ppl["bytes"] == sum(len(x.encode()) for x in texts), ppl["bytes"]
assert abs(m["ppl/bits_per_byte"] - m["ppl/nll"] * ppl["tokens"] / (math.log(2) * ppl["bytes"])) < 1e-9
c = t["cls"]["confusion"]
assert sum(map(sum, c)) == 3 and len(c) == len(t["cls"]["labels"])
assert t["rank"]["ties"] == "pessimistic"
EOF
    ok
fi

# deterministic: the same command gives the same metrics
run_status 0 "json again" -- "$LF" eval --ckpt run "${ALL[@]}" --json --threads 2
sed 's/"seconds":[0-9.e+-]*//g' stdout.json >a.json
sed 's/"seconds":[0-9.e+-]*//g' out.txt >b.json
cmp -s a.json b.json || fail "two runs differ: $(diff a.json b.json | head -5)"
ok

# batch size changes no log-likelihood beyond rounding
run_status 0 "batch 1" -- "$LF" eval --ckpt run --task ppl.jsonl --task mc.jsonl --batch 1 --json --threads 2
if [ -n "$PY" ]; then
    "$PY" - stdout.json out.txt <<'EOF' || fail "batch 1 and the default batch disagree"
import json, sys
a = json.load(open(sys.argv[1]))["metrics"]
b = json.load(open(sys.argv[2]))["metrics"]
assert abs(a["ppl/nll"] - b["ppl/nll"]) < 1e-5, (a["ppl/nll"], b["ppl/nll"])
assert a["mc/acc"] == b["mc/acc"] and a["mc/acc_norm"] == b["mc/acc_norm"]
EOF
    ok
fi

# --limit, --max-new-tokens, --samples
run_status 0 "limit" -- "$LF" eval --ckpt run --task mc.jsonl --task gen.jsonl --limit 1 --max-new-tokens 3 --samples --json
expect_out "limit" '"examples":1'
if [ -n "$PY" ]; then
    "$PY" - out.txt <<'EOF' || fail "--limit/--max-new-tokens/--samples"
import json, sys
t = json.load(open(sys.argv[1]))["tasks"]
assert t["mc"]["examples"] == 1 and t["gen"]["examples"] == 1
assert t["gen"]["max_new_tokens"] == 3
s = t["gen"]["samples"]
assert len(s) == 1 and s[0]["line"] == 2 and len(s[0]["prediction"]) <= 3
assert len(t["mc"]["samples"][0]["lls"]) == 3
EOF
    ok
fi

# --limit on "text" lines counts documents, each scored whole
run_status 0 "limit documents" -- "$LF" eval --ckpt run --task ppl.jsonl --limit 1 --json
expect_out "limit documents" '"documents":1'
expect_out "limit documents" '"tokens":81'

# perplexity over a plain text file and over the dataset's val split (--kind)
run_status 0 "kind perplexity" -- "$LF" eval --ckpt run --task text.txt --task data --kind perplexity --limit 4 --json
expect_out "kind perplexity" '"text/perplexity":'
expect_out "kind perplexity" '"data/perplexity":'
expect_out "kind perplexity" '"split":"val"'
expect_out "kind perplexity" '"windows":4'
echo '{"task": "perplexity", "dataset": "data", "split": "train", "stride": 32}' >train_ppl.jsonl
run_status 0 "dataset split" -- "$LF" eval --ckpt run --task train_ppl.jsonl --limit 2 --json
expect_out "dataset split" '"split":"train"'
expect_out "dataset split" '"tokens":64'

# prompt/response pairs (a fine-tuning set such as `llmforge data arithmetic` writes) as exact_match
printf '{"prompt": "All:\\n", "response": "Speak."}\n{"prompt": "First Citizen:\\n", "response": "Speak."}\n' >pairs.jsonl
run_status 0 "prompt/response pairs" -- "$LF" eval --ckpt run --task pairs.jsonl --kind exact_match --json
expect_out "prompt/response pairs" '"pairs/exact_match":'
expect_out "prompt/response pairs" '"examples":2'

# ------------------------------------------------------------ usage errors (exit 2)
run_status 0 "help" -- "$LF" eval --help
expect_out "help" "--max-new-tokens"
run_status 2 "no ckpt" "--ckpt DIR is required" -- "$LF" eval --task mc.jsonl
run_status 2 "no task" "--task FILE is required" -- "$LF" eval --ckpt run
run_status 2 "unknown kind" "unknown task kind 'essay'" -- "$LF" eval --ckpt run --task mc.jsonl --kind essay
run_status 2 "bad batch" "--batch expects an integer" -- "$LF" eval --ckpt run --task mc.jsonl --batch 0
run_status 2 "unknown option" "unknown argument '--bogus'" -- "$LF" eval --ckpt run --task mc.jsonl --bogus
run_status 2 "missing value" "option --task needs a value" -- "$LF" eval --ckpt run --task

# ------------------------------------------------------------ data errors (exit 1)
printf '{"task": "multiple_choice"}\n{"context": "a", "gold": 0}\n' >bad1.jsonl
run_status 1 "missing field" "bad1.jsonl:2: field 'choices' is missing" -- "$LF" eval --ckpt run --task bad1.jsonl
printf '{"task": "multiple_choice"}\n{"context": "a", "choices": ["b", "c"], "gold": 1}\n\n{"context": "a", "choices": ["b", "c"], "gold": 5}\n' >bad2.jsonl
run_status 1 "gold out of range" "bad2.jsonl:4: gold 5 is out of range (2 choices)" -- "$LF" eval --ckpt run --task bad2.jsonl
printf '{"task": "essay", "text": "a"}\n' >bad3.jsonl
run_status 1 "unknown kind in file" "bad3.jsonl:1: unknown task kind 'essay'" -- "$LF" eval --ckpt run --task bad3.jsonl
: >empty.jsonl
run_status 1 "empty file" "empty.jsonl: no examples (the file is empty)" -- "$LF" eval --ckpt run --task empty.jsonl
printf '{"context": "a", "choices": ["b"], "gold": 0}\n' >nokind.jsonl
run_status 1 "no kind" "nokind.jsonl:1: no task kind" -- "$LF" eval --ckpt run --task nokind.jsonl
printf '{"task": "ranking", "query": "a", "candidates": ["b"], "gold": 0}\n{"query": "a", "candidates": ["b"] "gold": 0}\n' >json.jsonl
run_status 1 "invalid JSON" "json.jsonl:2: invalid JSON" -- "$LF" eval --ckpt run --task json.jsonl
printf '{"task": "classification", "labels": ["yes", "no"]}\n{"text": "a", "label": "maybe"}\n' >label.jsonl
run_status 1 "label outside the set" "label.jsonl:2: label 'maybe' is not in the label set" -- \
    "$LF" eval --ckpt run --task label.jsonl
printf '{"task": "multiple_choice", "bogus": 1}\n{"context": "a", "choices": ["b"], "gold": 0}\n' >hdr.jsonl
run_status 1 "unknown header key" "hdr.jsonl:1: unknown header key 'bogus'" -- "$LF" eval --ckpt run --task hdr.jsonl
printf '{"task": "multiple_choice"}\n{"context": "the fox", "choices": ["dog"], "gold": 0}\n{"context": "a # b", "choices": ["dog"], "gold": 0}\n' >oov.jsonl
run_status 1 "character outside the vocabulary" "oov.jsonl:3: context" "'#'" -- "$LF" eval --ckpt run --task oov.jsonl
printf '{"task": "multiple_choice", "context": "the", "choices": ["quick brown fox jumps over the lazy dog"], "gold": 0}\n' >long.jsonl
run_status 1 "continuation above block_size" "long.jsonl:1: the continuation is 40 tokens, more than the model's block_size 32" -- \
    "$LF" eval --ckpt run --task long.jsonl
run_status 1 "same name twice" "task name 'mc'" -- "$LF" eval --ckpt run --task mc.jsonl --task mc.jsonl
run_status 1 "missing task file" "nope.jsonl" -- "$LF" eval --ckpt run --task nope.jsonl
run_status 1 "missing checkpoint" "no_run" -- "$LF" eval --ckpt no_run --task mc.jsonl
printf '{"task": "perplexity", "stride": 33}\n{"text": "the fox"}\n' >stride.jsonl
run_status 1 "stride above block_size" "stride 33 is more than the model's block_size 32" -- \
    "$LF" eval --ckpt run --task stride.jsonl

echo "$passed passed, 0 failed"
