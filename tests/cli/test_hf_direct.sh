#!/usr/bin/env bash
# A Hugging Face model directory used as it is (tests/fixtures/hf_direct, written by
# tools/reference/make_hf_direct_fixture.py with transformers): `sample --model DIR` tokenizes
# with the directory's own tokenizer.json (the prompt's ids equal transformers'), gives the
# last prompt position's logits of transformers within 1e-5 of the largest, decodes greedily
# to transformers' generate() and stops at the two-id eos list of generation_config.json
# (--ignore-eos runs on: the ids of transformers without the list); `serve --model DIR`
# answers the same text with finish_reason "stop" and the model named after the directory;
# `eval --model DIR` scores it; a Jinja chat template in tokenizer_config.json is what serve
# renders chats with (named at start; tests/cli/test_chat_templates.sh checks the rendering). Refused, naming the file: a directory without tokenizer.json
# (for text), a tokenizer bigger than the model's vocabulary, a malformed eos_token_id.
#   bash test_hf_direct.sh LLMFORGE SOURCE_DIR SHARED_DIR
set -u
LF=${1:?usage: test_hf_direct.sh LLMFORGE SOURCE_DIR SHARED_DIR}
SRC=${2:?source dir}
case "$LF" in /*) ;; *) LF="$PWD/$LF" ;; esac
case "$SRC" in /*) ;; *) SRC="$PWD/$SRC" ;; esac
. "$(dirname "$0")/cli_lib.sh"
HF="$SRC/tests/fixtures/hf_direct"
cli_tmpdir hfdirect
exp() { python3 -c "import json, sys; print(json.load(open('$HF/expected.json'))[sys.argv[1]])" "$1"; }
PROMPT=$(exp prompt)

# sample --json: prompt ids, logits, greedy ids with the eos list, and without it
"$LF" sample --model "$HF" --prompt "$PROMPT" --temperature 0 --max-new-tokens 32 --json > s.json 2> s.err ||
    fail "sample --model: $(cat s.err)"
"$LF" sample --model "$HF" --prompt "$PROMPT" --temperature 0 --max-new-tokens 32 --json --ignore-eos > f.json 2> f.err ||
    fail "sample --ignore-eos: $(cat f.err)"
python3 - "$HF/expected.json" s.json f.json <<'PY' || fail "sample --model differs from transformers"
import json, sys
e = json.load(open(sys.argv[1])); s = json.load(open(sys.argv[2])); f = json.load(open(sys.argv[3]))
assert s["prompt"] == e["prompt_ids"], ("prompt ids", s["prompt"], e["prompt_ids"])
big = max(abs(x) for x in e["last_logits"])
err = max(abs(a - b) for a, b in zip(s["last_logits"], e["last_logits"])) / big
# fp32 forward, another summation order than PyTorch's: ~1e-6 of the largest logit; 1e-5 bound
assert len(s["last_logits"]) == len(e["last_logits"]) and err <= 1e-5, ("logits", err)
assert s["generated"] == e["greedy_ids"], ("greedy with the eos list", s["generated"], e["greedy_ids"])
assert f["generated"] == e["greedy_ignore_eos_ids"], ("--ignore-eos", f["generated"], e["greedy_ignore_eos_ids"])
PY
ok
# the text: the prompt, then the generated text without the eos token's
"$LF" sample --model "$HF" --prompt "$PROMPT" --temperature 0 --max-new-tokens 32 > s.txt 2> s.err ||
    fail "sample --model (text): $(cat s.err)"
[ "$(cat s.txt)" = "$PROMPT$(exp greedy_text)" ] || fail "sample text '$(cat s.txt)', transformers '$PROMPT$(exp greedy_text)'"
ok

# serve --model: the same text, finish "stop"; ignore_eos runs to max_tokens
"$LF" serve --model "$HF" --port 0 --max-batch 2 --threads 2 > serve.log 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; rm -rf "$tmp"' EXIT
PORT=
for _ in $(seq 1 100); do
    PORT=$(sed -n 's|.*http://127.0.0.1:\([0-9]*\)/v1.*|\1|p' serve.log)
    [ -n "$PORT" ] && break
    kill -0 $SERVER 2> /dev/null || fail "serve --model exited: $(cat serve.log)"
    sleep 0.1
done
[ -n "$PORT" ] || fail "serve did not print its URL: $(cat serve.log)"
python3 - "$PORT" "$HF/expected.json" <<'PY' || fail "serve --model differs from transformers ($(tail -3 serve.log))"
import json, sys, urllib.request
port, e = sys.argv[1], json.load(open(sys.argv[2]))
def post(body):
    r = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", json.dumps(body).encode(),
                               {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(r, timeout=60))
models = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=60))
assert [m["id"] for m in models["data"]] == ["hf_direct"], models
c = post({"model": "hf_direct", "prompt": e["prompt"], "max_tokens": 32, "temperature": 0})["choices"][0]
assert (c["text"], c["finish_reason"]) == (e["greedy_text"], "stop"), c
c = post({"model": "hf_direct", "prompt": e["prompt"], "max_tokens": 32, "temperature": 0, "ignore_eos": True})["choices"][0]
assert (c["text"], c["finish_reason"]) == (e["greedy_ignore_eos_text"], "length"), c
PY
ok
kill -TERM $SERVER
wait $SERVER || fail "serve exited $? on SIGTERM"
trap 'rm -rf "$tmp"' EXIT

# eval --model: a perplexity over a text file runs on the directory's tokenizer
printf '%s\n' "$PROMPT" "$PROMPT" > text.txt
"$LF" eval --model "$HF" --task text.txt --kind perplexity --json > ev.json 2> ev.err || fail "eval --model: $(cat ev.err)"
python3 -c 'import json, sys; d = json.load(open("ev.json")); s = json.dumps(d); assert "perplexity" in s, s' ||
    fail "eval --model gave no perplexity: $(cat ev.json)"
ok

# train --init-from DIR on data tokenized with its own tokenizer.json: the checkpoint keeps the
# directory's config.json, generation_config.json and tokenizer files, and sampling from it
# stops at the same eos list
for i in $(seq 1 60); do echo "$PROMPT $i"; done > c.txt
"$LF" prepare --input c.txt --format text --tokenizer "hf:$HF/tokenizer.json" --out data > prep.log 2>&1 ||
    fail "prepare with the directory's tokenizer: $(cat prep.log)"
"$LF" train --data.dataset=data --model.block_size=32 --train_micro_batch_size_per_gpu=2 --train_iters=2 \
    --eval.interval=0 --checkpoint.interval=0 --optimizer.params.lr=1e-12 --threads=2 --out_dir=run --init-from "$HF" \
    > train.log 2>&1 || fail "train --init-from: $(tail -5 train.log)"
step=$(ls -d run/ckpt/step_* | tail -1)
for f in config.json generation_config.json tokenizer.json tokenizer_config.json; do
    cmp -s "$HF/$f" "$step/$f" || fail "the checkpoint's $f is not the directory's"
done
"$LF" sample --ckpt run --prompt "$PROMPT" --temperature 0 --max-new-tokens 32 > r.txt 2> r.err || fail "sample: $(cat r.err)"
[ "$(cat r.txt)" = "$PROMPT$(exp greedy_text)" ] || fail "the trained (lr 1e-12) checkpoint samples '$(cat r.txt)'"
# trained at block 32, the model keeps its 128 positions (its config.json): a 46-token prompt is
# not cropped to the last 32 (nanoGPT's crop is only for a model without more positions), so its
# last logits equal the directory's own (lr 1e-12 left the weights as they were)
"$LF" sample --ckpt run --prompt "$PROMPT $PROMPT" --temperature 0 --max-new-tokens 1 --json > rl.json 2> r.err ||
    fail "sample past the training block: $(cat r.err)"
"$LF" sample --model "$HF" --prompt "$PROMPT $PROMPT" --temperature 0 --max-new-tokens 1 --json > hl.json 2> r.err ||
    fail "sample --model (long prompt): $(cat r.err)"
python3 -c 'import json; a = json.load(open("rl.json")); b = json.load(open("hl.json"))
assert len(a["prompt"]) > 32, len(a["prompt"])
big = max(abs(x) for x in b["last_logits"])
err = max(abs(x - y) for x, y in zip(a["last_logits"], b["last_logits"])) / big
assert err <= 1e-5, err' || fail "sampling past the training block size cropped the context"
ok

# --request-timeout-s: a request whose body stalls gets 408 after about that long, not 10 s
"$LF" serve --model "$HF" --port 0 --threads 1 --request-timeout-s 0.5 > rt.log 2>&1 &
RT=$!
for _ in $(seq 1 100); do
    PORT=$(sed -n 's|.*http://127.0.0.1:\([0-9]*\)/v1.*|\1|p' rt.log)
    [ -n "$PORT" ] && break
    sleep 0.1
done
python3 - "$PORT" <<'PY' || fail "--request-timeout-s 0.5 did not cut a stalled request"
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 50\r\n\r\n{")
t0 = time.time(); s.settimeout(8)
got = s.recv(4096)
assert got.startswith(b"HTTP/1.1 408") and time.time() - t0 < 5, (got[:40], time.time() - t0)
PY
kill -TERM $RT; wait $RT
"$LF" serve --model "$HF" --request-timeout-s 0 > rt0.out 2>&1 && fail "--request-timeout-s 0 was accepted"
grep -q -- "--request-timeout-s expects a number in \[0.1, 3600\]" rt0.out || fail "bad timeout not named: $(cat rt0.out)"
ok

# refusals
mkdir notok && cp "$HF"/config.json "$HF"/model.safetensors notok/
"$LF" sample --model notok --prompt "$PROMPT" > nt.out 2>&1 && fail "a prompt without tokenizer.json was accepted"
grep -q "notok' has no tokenizer.json" nt.out || fail "no tokenizer.json is not named: $(cat nt.out)"
ok
"$LF" sample --model notok --ids 1,2,3 --max-new-tokens 2 --temperature 0 --json > ids.out 2>&1 ||
    fail "--ids needs no tokenizer: $(cat ids.out)"
ok
mkdir bigtok && cp "$HF"/config.json "$HF"/model.safetensors bigtok/ && cp "$SRC/tests/fixtures/hf_tok/llama3.json" bigtok/tokenizer.json
"$LF" serve --model bigtok --port 0 > bt.out 2>&1 && fail "a tokenizer bigger than the vocabulary was served"
grep -q "has [0-9]* tokens but the model's vocabulary has 608 rows" bt.out || fail "the sizes are not named: $(cat bt.out)"
ok
mkdir badeos && cp "$HF"/* badeos/ && echo '{"eos_token_id": "two"}' > badeos/generation_config.json
"$LF" sample --model badeos --prompt "$PROMPT" > be.out 2>&1 && fail "eos_token_id \"two\" was accepted"
grep -q "generation_config.json': eos_token_id must be a token id" be.out || fail "the bad eos is not named: $(cat be.out)"
ok
# a Jinja chat template (tokenizer_config.json) renders the chat endpoint: serve names it at start
mkdir jinja && cp "$HF"/* jinja/ &&
    python3 -c 'import json; p = "jinja/tokenizer_config.json"; d = json.load(open(p)); d["chat_template"] = "{{ x }}"; json.dump(d, open(p, "w"))'
timeout 20 "$LF" serve --model jinja --port 0 --threads 1 > jj.out 2>&1 &
for _ in $(seq 1 100); do grep -q "chat template:" jj.out && break; sleep 0.1; done
kill -TERM %% 2> /dev/null
wait
grep -q "chat template: jinja/tokenizer_config.json:chat_template" jj.out ||
    fail "the Jinja template is not named: $(cat jj.out)"
ok
echo "$passed passed"
echo PASS
