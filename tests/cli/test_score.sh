#!/usr/bin/env bash
# llmforge score from the command line: bad input ends with a clear message
# naming the file (and line, and field) and exit status 1, usage errors with
# exit status 2, nothing crashes; and the --json output of each metric holds
# the values the reference tools give (computed with sacrebleu 2.6.0 and
# rouge-score 0.1.2 for the inline data below, or by hand).
#   bash test_score.sh LLMFORGE SOURCE_DIR SHARED_DIR
set -u

LF=${1:?usage: test_score.sh LLMFORGE SOURCE_DIR SHARED_DIR}
case "$LF" in /*) ;; *) LF="$PWD/$LF" ;; esac

passed=0
fail() {
    echo "FAIL: $*" >&2
    echo "$passed passed, 1 failed"
    exit 1
}
ok() { passed=$((passed + 1)); }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/lf_score.XXXXXX") || fail "mktemp"
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || fail "cd $tmp"

# run_status WANT NAME NEEDLE... -- COMMAND...: exit status WANT, no crash,
# every NEEDLE (fixed string) on stderr.
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
data_error() { run_status 1 "$@"; }
usage_error() { run_status 2 "$@"; }

# json_num KEY: the first number after "KEY": in out.txt
json_num() { grep -o "\"$1\":-\{0,1\}[0-9][0-9.eE+-]*" "$tmp/out.txt" | head -n 1 | cut -d: -f2; }
# expect_num NAME KEY WANT: |value - WANT| <= 1e-9
expect_num() {
    local got
    got=$(json_num "$2")
    [ -n "$got" ] || fail "$1: no \"$2\" in $(cat "$tmp/out.txt")"
    awk -v a="$got" -v b="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-9) }' ||
        fail "$1: $2 = $got, expected $3"
    ok
}
expect_text() {
    grep -qF -- "$2" "$tmp/out.txt" || fail "$1: output lacks '$2': $(cat "$tmp/out.txt")"
    ok
}

# ------------------------------------------------------------ data
printf 'The cat sat on the mat.\nShares fell 5%% after the results.\nIt rained all day in the north.\n' >hyp.txt
printf 'The cat was sitting on the mat.\nThe shares dropped 5%% after results were published.\nIn the north it rained the whole day.\n' >ref1.txt
printf 'A cat sat on a mat.\nShares fell by 5%% after the results.\nRain fell all day in the north.\n' >ref2.txt
printf 'a\nb\n' >two.txt
: >empty.txt
printf 'ok\nbad \303( here\n' >bad_utf8.txt
printf 'ok\nnul \000 here\n' >nul.txt

# ------------------------------------------------------------ usage errors (exit 2)
usage_error "no metric" "--metric is required" -- "$LF" score --predictions hyp.txt --references ref1.txt
usage_error "unknown option" "unknown argument '--bogus'" -- "$LF" score --metric bleu --bogus
usage_error "option without value" "option --input needs a value" -- "$LF" score --metric bleu --input
usage_error "no inputs" "--predictions FILE and --references FILE" -- "$LF" score --metric bleu --predictions hyp.txt
usage_error "both input forms" "not both" -- "$LF" score --metric bleu --input x.jsonl --predictions hyp.txt
usage_error "bad tokenizer" "--tokenize: unknown value '14a'" -- \
    "$LF" score --metric bleu --tokenize 14a --predictions hyp.txt --references ref1.txt
usage_error "bad rouge type" "unknown ROUGE type 'rougeX'" -- \
    "$LF" score --metric rouge --rouge-types rouge1,rougeX --predictions hyp.txt --references ref1.txt
usage_error "bad hits list" "--hits expects a comma list" -- "$LF" score --metric hits --hits 1,0 --input x.jsonl
usage_error "hits from text files" "--metric hits reads --input" -- \
    "$LF" score --metric hits --predictions hyp.txt --references ref1.txt
usage_error "binary without label" "--average binary needs --pos-label" -- \
    "$LF" score --metric f1 --average binary --predictions two.txt --references two.txt

# ------------------------------------------------------------ data errors (exit 1)
data_error "unknown metric" "unknown metric 'blue'" -- "$LF" score --metric blue --predictions hyp.txt --references ref1.txt
data_error "line counts differ" "hyp.txt has 3 lines but two.txt has 2" -- \
    "$LF" score --metric bleu --predictions hyp.txt --references ref1.txt --references two.txt
data_error "empty file" "empty.txt: empty file" -- "$LF" score --metric bleu --predictions empty.txt --references ref1.txt
data_error "missing file" "no_such.txt" -- "$LF" score --metric rouge --predictions no_such.txt --references ref1.txt
data_error "invalid UTF-8" "bad_utf8.txt:2: invalid UTF-8 at byte 4" -- \
    "$LF" score --metric bleu --predictions two.txt --references bad_utf8.txt
data_error "NUL byte" "nul.txt:2: contains a NUL byte" -- "$LF" score --metric rouge --predictions nul.txt --references two.txt

printf '{"prediction":"ok","references":"ok"}\n{"prediction":"x"}\n' >miss.jsonl
data_error "missing references" "miss.jsonl:2: field 'references' is missing" -- "$LF" score --metric bleu --input miss.jsonl
printf '{"prediction":"ok","references":["a",2]}\n' >elem.jsonl
data_error "reference not a string" "elem.jsonl:1: field 'references': element 2 is not a string" -- \
    "$LF" score --metric rouge --input elem.jsonl
printf '{"prediction":"a","label":"a"}\n\n{"prediction":"b"}\n' >label.jsonl
data_error "missing label (blank line counted)" "label.jsonl:3: field 'label' is missing" -- \
    "$LF" score --metric accuracy --input label.jsonl
printf '{"prediction": "x", \n' >broken.jsonl
data_error "broken JSON" "broken.jsonl:1: not valid JSON" -- "$LF" score --metric exact_match --input broken.jsonl
printf '[1, 2]\n' >array.jsonl
data_error "not an object" "array.jsonl:1: expected a JSON object" -- "$LF" score --metric bleu --input array.jsonl
printf '\n  \n' >blank.jsonl
data_error "only blank lines" "blank.jsonl: no JSON objects" -- "$LF" score --metric bleu --input blank.jsonl
printf '{"prediction":"\303(","references":"x"}\n' >bad.jsonl
data_error "invalid UTF-8 in JSONL" "bad.jsonl:1: invalid UTF-8 at byte 15" -- "$LF" score --metric bleu --input bad.jsonl
printf '{"scores":[0.1,0.2],"gold":2}\n' >gold.jsonl
data_error "gold out of range" "gold.jsonl:1: field 'gold': index 2 is out of range for 2 scores" -- \
    "$LF" score --metric hits --input gold.jsonl
printf '{"scores":[0.1,"x"],"gold":0}\n' >scores.jsonl
data_error "score not a number" "scores.jsonl:1: field 'scores': element 2 is not a number" -- \
    "$LF" score --metric hits --input scores.jsonl
printf '{"scores":[0.1,0.2]}\n' >nogold.jsonl
data_error "missing gold" "nogold.jsonl:1: field 'gold' is missing" -- "$LF" score --metric hits --input nogold.jsonl
printf 'a\nb\nc\n' >p3.txt
data_error "binary with three labels" "at most 2 labels, found 3" -- \
    "$LF" score --metric f1 --average binary --pos-label a --predictions p3.txt --references p3.txt

# ------------------------------------------------------------ JSON outputs
# sacrebleu 2.6.0: BLEU().corpus_score(hyp, [ref1, ref2]) = 68.568478986889, counts 22/17/11/7, totals 23/20/17/14
run_status 0 "bleu json" -- "$LF" score --metric bleu --predictions hyp.txt --references ref1.txt --references ref2.txt --json
expect_num "bleu json" score 68.568478986889
expect_text "bleu json" '"signature":"nrefs:2|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"'
expect_text "bleu json" '"counts":[22,17,11,7],"totals":[23,20,17,14]'
# sacrebleu: BLEU(smooth_method='floor', lowercase=True, tokenize='char') vs ref1 = 47.26359073422374
run_status 0 "bleu char" -- "$LF" score --metric bleu --smooth floor --lowercase --tokenize char \
    --predictions hyp.txt --references ref1.txt --json
expect_num "bleu char" score 47.26359073422374
expect_text "bleu char" '"signature":"nrefs:1|case:lc|eff:no|tok:char|smooth:floor[0.10]|version:2.6.0"'
run_status 0 "bleu table" -- "$LF" score --metric bleu --predictions hyp.txt --references ref1.txt --references ref2.txt
expect_text "bleu table" "BLEU|nrefs:2|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0 = 68.57 95.7/85.0/64.7/50.0 (BP = 0.957 ratio = 0.958 hyp_len = 23 ref_len = 24)"

# rouge-score 0.1.2: RougeScorer(['rouge1','rougeL'], use_stemmer=True).score_multi, mean F = 0.8498168498168498
run_status 0 "rouge json" -- "$LF" score --metric rouge --rouge-types rouge1,rougeL --stemmer \
    --predictions hyp.txt --references ref1.txt --references ref2.txt --json
expect_num "rouge json" fmeasure 0.8498168498168498
expect_text "rouge json" '"tokenizer":"default","tokenizer_choice":"auto","stemmer":true,"n":3'

# Chinese: auto picks the CJK tokenizer and says so
printf '{"prediction":"今天天气很好","references":["今天天气不错"]}\n' >zh.jsonl
run_status 0 "rouge cjk" -- "$LF" score --metric rouge --rouge-types rouge1 --input zh.jsonl --json
expect_text "rouge cjk" '"tokenizer":"cjk","tokenizer_choice":"auto"'
expect_num "rouge cjk" precision 0.66666666666666663
run_status 0 "rouge cjk table" -- "$LF" score --metric rouge --input zh.jsonl
expect_text "rouge cjk table" "tokenizer cjk (chosen: most characters are CJK)"

# Hits@N / MRR, hand-computed: pessimistic ranks 3, 2, 3, 5
cat >rank.jsonl <<'EOF'
{"scores": [0.9, 0.5, 0.9, 0.9, 0.1], "gold": 0}
{"scores": [0.9, 0.5, 0.9, 0.9, 0.1], "gold": 0, "filtered": [2]}
{"scores": [0.9, 0.5, 0.9, 0.9, 0.1], "gold": [1, 3]}
{"scores": [0.9, 0.5, 0.9, 0.9, 0.1], "gold": 4}
EOF
run_status 0 "hits json" -- "$LF" score --metric hits --input rank.jsonl --hits 1,3 --json
expect_text "hits json" '"ties":"pessimistic","filtered":true,"n":4,"hits":{"1":0,"3":0.75}'
expect_num "hits json" mean_rank 3.25
run_status 0 "hits optimistic" -- "$LF" score --metric hits --input rank.jsonl --ties optimistic --json
expect_num "hits optimistic" mrr 0.8
# macro F1 by hand (see tests/eval/test_classify.c): 59/90
printf '{"prediction":"c","label":"c"}\n{"prediction":"a","label":"a"}\n{"prediction":"b","label":"a"}\n{"prediction":"b","label":"b"}\n{"prediction":"b","label":"b"}\n{"prediction":"a","label":"c"}\n' >cls.jsonl
run_status 0 "f1 json" -- "$LF" score --metric f1 --input cls.jsonl --json
expect_num "f1 json" f1 0.65555555555555556
expect_text "f1 json" '"confusion_matrix":[[1,1,0],[0,2,0],[1,0,1]]'
# SQuAD EM / F1 in percent: items (0, 0.8) and (1, 1)
printf 'the cat sat\nParis\n' >qa_pred.txt
printf 'A cat sat down\nparis!\n' >qa_ref.txt
run_status 0 "exact_match json" -- "$LF" score --metric exact_match --predictions qa_pred.txt --references qa_ref.txt --json
expect_num "exact_match json" exact_match 50
expect_num "exact_match json" f1 90

echo "$passed passed, 0 failed"
