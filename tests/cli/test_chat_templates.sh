#!/usr/bin/env bash
# Chat templates from the command line and the server:
#  - `llmforge chat-template` renders a Hugging Face model directory's template (tokenizer_config.json
#    with a Llama 3.2 template, strftime_now pinned by --date) byte for byte as transformers did
#    (tests/fixtures/chat_templates/expected.json), --mask gives the assistant turns, an
#    unsupported filter is refused naming FILE:LINE, raise_exception's message is the error
#    (exit 1), a missing option is a usage error (exit 2);
#  - a character-level model trained on text without '|' and no chat template: serve announces
#    it, /v1/chat/completions answers 400 saying the model has no chat template and how to give
#    it one (not an error about ChatML's '|'), /v1/completions still answers 200;
#  - the same checkpoint with a chat_template.jinja: serve names it, chat answers 200, and a
#    conversation the template refuses (raise_exception) is a 400 carrying its message;
#    `sample --chat` renders the same prompt (and says the model has no template before it had one).
# ~10 s on 2 threads (a 2-layer model trained 20 steps: the test is of the plumbing, not the model).
#   bash test_chat_templates.sh LLMFORGE SOURCE_DIR SHARED_DIR
set -u
LF=${1:?usage: test_chat_templates.sh LLMFORGE SOURCE_DIR SHARED_DIR}
SRC=${2:?source dir}
: "${3:?shared dir}"
case "$LF" in /*) ;; *) LF="$PWD/$LF" ;; esac
case "$SRC" in /*) ;; *) SRC="$PWD/$SRC" ;; esac
. "$(dirname "$0")/cli_lib.sh"
command -v python3 >/dev/null || { echo "SKIPPED: needs python3 (to read the JSON)"; exit 0; }
command -v curl >/dev/null || { echo "SKIPPED: needs curl (scripts/setup.sh --test)"; exit 0; }
cli_tmpdir chat_templates
FX="$SRC/tests/fixtures/chat_templates"

# ---- llmforge chat-template on an HF directory, against transformers' rendering
mkdir llama
python3 - "$FX" <<'PY' || fail "fixture setup"
import json, sys
fx = sys.argv[1]
d = json.load(open(f"{fx}/expected.json"))
fam = next(f for f in d["families"] if f["name"] == "llama3")
cfg = {"chat_template": open(f"{fx}/llama3.jinja").read(), "model_max_length": 131072,
       "bos_token": fam["vars"]["bos_token"], "eos_token": {"content": fam["vars"]["eos_token"], "special": True}}
json.dump(cfg, open("llama/tokenizer_config.json", "w"))
json.dump(d["conversations"]["system_multi"], open("conv.json", "w"))
case = next(c for c in fam["cases"] if c["conversation"] == "system_multi" and c["add_generation_prompt"])
open("want.txt", "w", encoding="utf-8").write(case["expected"])
mask = next(m for m in fam["masks"] if m["conversation"] == "system_multi")
json.dump(mask["spans"], open("want_mask.json", "w"))
PY
"$LF" chat-template --model llama --messages conv.json --add-generation-prompt --date "2026-12-07 12:00:00" >got.txt 2>err.txt ||
    fail "chat-template: $(cat err.txt)"
cmp -s got.txt want.txt || fail "chat-template differs from transformers: $(diff got.txt want.txt | head -5)"
ok
"$LF" chat-template --model llama/tokenizer_config.json --messages conv.json --mask --date "2026-12-07 12:00:00" >mask.json ||
    fail "chat-template --mask"
python3 -c 'import json; a = json.load(open("mask.json"))["assistant_turns"]; b = json.load(open("want_mask.json")); assert a == b, (a, b)' ||
    fail "assistant turns differ: $(cat mask.json | head -c 300)"
ok
printf 'ok\n{{ messages | wordwrap }}\n' >bad.jinja
"$LF" chat-template --model bad.jinja --messages conv.json >/dev/null 2>err.txt
[ $? = 1 ] && grep -q "bad.jinja:2: unsupported filter 'wordwrap'" err.txt || fail "unsupported filter: $(cat err.txt)"
ok
printf "{{ raise_exception('System role not supported') if messages[0].role == 'system' }}" >strict.jinja
"$LF" chat-template --model strict.jinja --messages conv.json >/dev/null 2>err.txt
[ $? = 1 ] && grep -q "System role not supported" err.txt || fail "raise_exception: $(cat err.txt)"
ok
"$LF" chat-template --model llama >/dev/null 2>&1
[ $? = 2 ] || fail "a missing --messages is not a usage error"
ok

# ---- a char model without a chat template, served
for i in $(seq 1 300); do echo "the quick brown fox jumps over the lazy dog: what light through yonder window breaks?"; done >corpus.txt
"$LF" prepare --char corpus.txt --out data >prepare.log 2>&1 || fail "prepare: $(cat prepare.log)"
"$LF" train --data.dataset=data --model.n_layer=2 --model.n_head=2 --model.n_embd=32 --model.block_size=64 \
    --train_micro_batch_size_per_gpu=4 --train_iters=20 --eval.interval=0 --checkpoint.interval=0 --out_dir=run \
    --threads=2 >train.log 2>&1 || fail "train: $(cat train.log)"
ok
start_server() {
    : >serve.log
    "$LF" serve --ckpt run --port 0 --threads 2 --drain-s 1 >serve.log 2>&1 &
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
stop_server() { kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null; }
trap 'kill $SERVER 2>/dev/null; rm -rf "$tmp"' EXIT
chat() { # BODY -> status in code.txt, body in resp.json
    curl -s -o resp.json -w '%{http_code}' -H 'Content-Type: application/json' -d "$1" "$URL/v1/chat/completions" >code.txt
}
start_server
grep -q "chat template: none (the checkpoint has no chat template" serve.log || fail "no announcement: $(cat serve.log)"
chat '{"model": "run", "messages": [{"role": "user", "content": "the fox"}], "max_tokens": 4}'
[ "$(cat code.txt)" = 400 ] || fail "chat without a template: $(cat code.txt) $(cat resp.json)"
grep -q "this model has no chat template" resp.json && grep -q "chat_template.json" resp.json ||
    fail "the 400 does not say what is missing: $(cat resp.json)"
grep -q "U+007C" resp.json && ! grep -q "has no chat template" resp.json && fail "the old message"
ok
code=$(curl -s -o comp.json -w '%{http_code}' -H 'Content-Type: application/json' \
    -d '{"model": "run", "prompt": "the fox", "max_tokens": 4}' "$URL/v1/completions")
[ "$code" = 200 ] || fail "completions: $code $(cat comp.json)"
ok
# the openai client sees the same 400 (when it is installed)
PYO=${LF_OPENAI_PYTHON:-$HOME/.cache/llmforge/openai-venv/bin/python}
if [ -x "$PYO" ] && "$PYO" -c "import openai" 2>/dev/null; then
    "$PYO" - "$URL" >client.txt 2>&1 <<'PY' || fail "openai client: $(cat client.txt)"
import sys, openai
c = openai.OpenAI(base_url=sys.argv[1] + "/v1", api_key="none")
try:
    c.chat.completions.create(model="run", messages=[{"role": "user", "content": "the fox"}], max_tokens=4)
    sys.exit("no error")
except openai.BadRequestError as e:
    assert "has no chat template" in str(e), str(e)
    print("400:", str(e)[:120])
PY
    ok
else
    echo "note: the openai client is not installed; curl checked the 400"
fi
stop_server
echo '[{"role": "user", "content": " the fox "}]' >fox.json
"$LF" sample --ckpt run --chat fox.json --max-new-tokens 4 --temperature 0 --threads 2 >s.out 2>s.err &&
    fail "sample --chat without a template succeeded: $(cat s.out)"
grep -q "has no chat template" s.err || fail "sample --chat without a template: $(cat s.err)"
ok

# ---- the same checkpoint with a Jinja template beside it
step=$(ls -d run/ckpt/step_* | tail -1)
cat >"$step/chat_template.jinja" <<'EOF'
{%- if messages[0].role == 'system' %}{{ raise_exception('the system role is not supported') }}{% endif %}
{%- for m in messages %}{{ m.role }}: {{ m.content | trim }}
{% endfor %}
{%- if add_generation_prompt %}assistant: {% endif %}
EOF
start_server
grep -q "chat template: .*chat_template.jinja" serve.log || fail "the template is not named: $(cat serve.log)"
chat '{"model": "run", "messages": [{"role": "user", "content": " the fox "}], "max_tokens": 4}'
[ "$(cat code.txt)" = 200 ] || fail "chat with a template: $(cat code.txt) $(cat resp.json)"
ok
chat '{"model": "run", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "the fox"}], "max_tokens": 4}'
[ "$(cat code.txt)" = 400 ] && grep -q "the system role is not supported" resp.json ||
    fail "raise_exception through the server: $(cat code.txt) $(cat resp.json)"
ok
stop_server
"$LF" sample --ckpt run --chat fox.json --max-new-tokens 4 --temperature 0 --threads 2 >s.out 2>s.err ||
    fail "sample --chat: $(cat s.err)"
python3 -c 'import sys; t = open("s.out").read(); assert t.startswith("user: the fox\nassistant: "), repr(t)' ||
    fail "sample --chat did not render the template: $(head -c 200 s.out)"
grep -q "chat template: .*chat_template.jinja" s.err || fail "sample --chat does not name the template: $(cat s.err)"
ok
echo "$passed passed"
