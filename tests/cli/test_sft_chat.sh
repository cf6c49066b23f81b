#!/usr/bin/env bash
# Fine-tuning through the chat template, end to end: a model fine-tuned by llmforge on
# prompt/response pairs answers through `llmforge serve`'s chat endpoint as trained.
#  - `llmforge prepare --mode sft --chat-template FILE` renders each pair as the chat endpoint
#    renders a conversation of that one user message (a compact template of our own, not the
#    built-in ChatML, so a checkpoint that lost it would be served through another prompt),
#    writes data/chat_template.json, and prints it in its summary;
#  - `llmforge train` (a tiny GPT-2, character vocabulary) copies it into the checkpoint, byte
#    for byte;
#  - `llmforge serve` on that checkpoint: POST /v1/chat/completions with each training prompt as
#    the user message answers exactly the trained response (greedy; the template's stop string
#    ends it), finish_reason "stop"; the completions endpoint given the rendered prompt text
#    returns the response and the template's suffix (its stop strings are chat's only), then
#    the end of text ends it;
#  - serve says it took the checkpoint's template (not the built-in ChatML it falls back to).
# Toy task: six words, each with its own answer (memorised); 200 steps (the loss is below 0.01 by step 150), ~20 s on 2 threads.
#   bash test_sft_chat.sh LLMFORGE SOURCE_DIR SHARED_DIR
set -u
LF=${1:?usage: test_sft_chat.sh LLMFORGE SOURCE_DIR SHARED_DIR}
SRC=${2:?source dir}
: "${3:?shared dir}"
case "$LF" in /*) ;; *) LF="$PWD/$LF" ;; esac
. "$(dirname "$0")/cli_lib.sh"
command -v curl >/dev/null || { echo "SKIPPED: needs curl (scripts/setup.sh --test)"; exit 0; }
command -v python3 >/dev/null || { echo "SKIPPED: needs python3 (to read the JSON answers)"; exit 0; }
cli_tmpdir sft_chat

PAIRS="sky:blue grass:green snow:white coal:black blood:red sun:yellow"
: >pairs.jsonl
for i in $(seq 1 40); do
    for pr in $PAIRS; do echo "{\"prompt\": \"${pr%%:*}\", \"response\": \"${pr#*:}\"}"; done
done >>pairs.jsonl
cat >tpl.json <<'EOF'
{"format": "llmforge.chat_template.v1",
 "description": "a compact template for the test",
 "roles": {"system": {"prefix": "S: ", "suffix": "\n"}, "user": {"prefix": "Q: ", "suffix": " "},
           "assistant": {"prefix": "A: ", "suffix": ";"}},
 "generation_prompt": "A: ", "stop": [";"]}
EOF
"$LF" prepare --input pairs.jsonl --mode sft --tokenizer char --split none --chat-template tpl.json --out data \
    >prepare.log 2>&1 || fail "prepare: $(cat prepare.log)"
grep -q "chat template tpl.json -> data/chat_template.json" prepare.log || fail "prepare summary: $(cat prepare.log)"
[ -s data/chat_template.json ] || fail "no data/chat_template.json"
grep -q '"chat_template"' data/dataset.json || fail "dataset.json does not name the template"
# 240 records "Q: sky A: blue;\n": the prompt part "Q: sky A: " has no loss, "blue;" + end of text has
grep -qE '^  train +240 records +[0-9]+ tokens \(1600 targets\)' prepare.log || fail "targets: $(cat prepare.log)"
ok
# usage: the template is for sft
"$LF" prepare --input pairs.jsonl --tokenizer char --chat-template tpl.json --out d2 >err.log 2>&1
[ $? -eq 2 ] || fail "--chat-template without --mode sft should be a usage error"
grep -q "needs --mode sft" err.log || fail "message: $(cat err.log)"
"$LF" prepare --input pairs.jsonl --mode sft --tokenizer char --chat-template missing.json --out d2 >err.log 2>&1
[ $? -eq 1 ] || fail "a missing template should fail with status 1"
grep -q "missing.json" err.log || fail "message: $(cat err.log)"
ok

"$LF" train --data.dataset=data --data.sampling=records --model.n_layer=2 --model.n_head=2 --model.n_embd=64 \
    --model.block_size=32 --train_micro_batch_size_per_gpu=32 --train_iters=200 --optimizer.params.lr=3e-3 \
    --eval.interval=0 --checkpoint.interval=0 --out_dir=run --threads=2 --seed=7 >train.log 2>&1 ||
    fail "train: $(tail -5 train.log)"
step=$(ls -d run/ckpt/step_* | tail -1)
cmp -s data/chat_template.json "$step/chat_template.json" || fail "the checkpoint does not carry the dataset's template"
ok

start_server() {
    "$LF" serve --ckpt "$1" --port 0 --max-batch 4 --threads 2 >serve.log 2>&1 &
    SERVER=$!
    PORT=
    for _ in $(seq 1 100); do
        PORT=$(sed -n 's|.*http://127.0.0.1:\([0-9]*\)/v1.*|\1|p' serve.log)
        [ -n "$PORT" ] && break
        kill -0 $SERVER 2>/dev/null || fail "serve exited: $(cat serve.log)"
        sleep 0.1
    done
    [ -n "$PORT" ] || fail "serve did not print its URL: $(cat serve.log)"
    URL=http://127.0.0.1:$PORT
}
stop_server() {
    kill -TERM $SERVER
    wait $SERVER || fail "serve exited $? on SIGTERM"
}
chat() { # WORD -> the answer's content and finish_reason, tab-separated
    curl -s "$URL/v1/chat/completions" -d "{\"messages\": [{\"role\": \"user\", \"content\": \"$1\"}],
        \"max_tokens\": 12, \"temperature\": 0}" |
        python3 -c 'import json, sys; c = json.load(sys.stdin)["choices"][0]; print(c["message"]["content"] + "\t" + c["finish_reason"])'
}

start_server run
trap 'kill $SERVER 2>/dev/null; rm -rf "$tmp"' EXIT
grep -q "chat template: .*$(basename "$step")/chat_template.json" serve.log || fail "serve's template: $(cat serve.log)"
right=0
for pr in $PAIRS; do
    got=$(chat "${pr%%:*}") || fail "chat ${pr%%:*}: no answer"
    [ "$got" = "${pr#*:}	stop" ] || fail "chat '${pr%%:*}': got '$got', trained '${pr#*:}' (finish stop)"
    right=$((right + 1))
done
ok
# the completions endpoint on the rendered text: the response, its suffix, then the end of text
comp=$(curl -s "$URL/v1/completions" -d '{"prompt": "Q: snow A: ", "max_tokens": 12, "temperature": 0}' |
    python3 -c 'import json, sys; c = json.load(sys.stdin)["choices"][0]; print(c["text"] + "\t" + c["finish_reason"])')
[ "$comp" = "white;	stop" ] || fail "completions on the rendered prompt: '$comp'"
ok
stop_server
echo "chat endpoint: $right of 6 trained answers, exactly"

echo "$passed passed, 0 failed"
