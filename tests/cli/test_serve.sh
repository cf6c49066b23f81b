#!/usr/bin/env bash
# `llmforge serve` end to end, on a tiny GPT-2 (character vocabulary) trained here:
#  - the real `openai` client (tools/check_openai_client.py): models, greedy completion equal
#    to `llmforge sample --temperature 0`, streaming with usage, n > 1 with a seed, stop,
#    logprobs, chat (a chat_template.json in the checkpoint), 16 concurrent streams equal to
#    their solo text, a wrong key. The client comes from PyPI into a venv
#    ($HOME/.cache/llmforge/openai-venv, or $LF_OPENAI_PYTHON); without network or python3-venv
#    this part prints why and the rest still runs;
#  - a bad-request corpus with curl, each answered with its status while a correct request
#    keeps being answered between them (counted): malformed JSON, wrong types, negative and huge
#    numbers, an unknown model and path, a prompt over the context, a 10 MB body, invalid UTF-8,
#    a truncated chunked body, slow-loris clients, no key; a prompt list over --max-prompts;
#  - the end-of-text token's logprob record (lm-evaluation-harness reads it): completions with
#    echo, streamed or not, and chat;
#  - /metrics passes `promtool check metrics` (when promtool is installed);
#  - SIGTERM during a stream: the stream ends with [DONE], the process exits 0 within --drain-s;
#  - RFC 9112 framing (two Content-Length, Transfer-Encoding with Content-Length, obs-fold, a
#    bare CR, whitespace before the colon): 400 and the connection closed; "gzip, chunked"
#    (a transfer coding the server does not decode): 501 and the connection closed;
#  - drain: a body still arriving at SIGTERM is finished (200), a request after SIGTERM gets 503;
#    with --drain-s 0 under load every request gets a complete answer or an explicit error.
#   bash test_serve.sh LLMFORGE SOURCE_DIR SHARED_DIR
set -u
LF=${1:?usage: test_serve.sh LLMFORGE SOURCE_DIR SHARED_DIR}
SRC=${2:?source dir}
SHARED=${3:?shared dir}
case "$LF" in /*) ;; *) LF="$PWD/$LF" ;; esac
case "$SRC" in /*) ;; *) SRC="$PWD/$SRC" ;; esac
. "$(dirname "$0")/cli_lib.sh"
command -v curl >/dev/null || { echo "SKIPPED: needs curl (scripts/setup.sh --test)"; exit 0; }
cli_tmpdir serve
corpus="$SHARED/data/tinyshakespeare.txt"
if [ -f "$corpus" ]; then head -c 60000 "$corpus" >corpus.txt
else for i in $(seq 1 800); do echo "ROMEO: what light through yonder window breaks? Who is there?"; done >corpus.txt; fi
"$LF" prepare --char corpus.txt --out data >prepare.log 2>&1 || fail "prepare: $(cat prepare.log)"
# 100 steps: past the uniform model (its greedy text has new characters to stop at; seeded
# completions reach the end of text), as 300 were; the test is of the server, not the model
"$LF" train --data.dataset=data --model.n_layer=2 --model.n_head=2 --model.n_embd=48 --model.block_size=128 \
    --train_micro_batch_size_per_gpu=8 --train_iters=100 --optimizer.params.lr=3e-3 --eval.interval=0 --checkpoint.interval=0 --out_dir=run \
    --threads=2 >train.log 2>&1 || fail "train: $(cat train.log)"
ok
step=$(ls -d run/ckpt/step_* | tail -1)
cat >"$step/chat_template.json" <<'EOF'
{"format": "llmforge.chat_template.v1",
 "roles": {"system": {"prefix": "", "suffix": "\n"}, "user": {"prefix": "First Citizen:\n", "suffix": "\n\n"},
           "assistant": {"prefix": "Second Citizen:\n", "suffix": "\n\n"}},
 "generation_prompt": "Second Citizen:\n", "stop": ["\n\n"]}
EOF
echo "sekrit-key-123" >key.txt
PROMPT=$'ROMEO:\n' # the character vocabulary's end of text is "\n": a prompt the model continues past
"$LF" sample --ckpt run --prompt "$PROMPT" --max-new-tokens 24 --temperature 0 --threads 2 --batch-invariant >sample.txt 2>sample.err ||
    fail "sample: $(cat sample.err)"
greedy=$(python3 -c 'import sys; t=open("sample.txt").read(); p=sys.argv[1]; assert t.startswith(p); print(t[len(p):-1], end="")' "$PROMPT") ||
    fail "sample output does not start with the prompt: $(head -c 200 sample.txt)"

start_server() {
    : >serve.log # empty before the server starts: the last server's URL must not be read as this one's
    "$LF" serve --ckpt run --port 0 --api-key-file key.txt --max-batch 4 --max-queue 32 --threads 2 --drain-s "$1" \
        >serve.log 2>&1 &
    SERVER=$!
    for _ in $(seq 1 100); do
        PORT=$(sed -n 's|.*http://127.0.0.1:\([0-9]*\)/v1.*|\1|p' serve.log)
        [ -n "$PORT" ] && break
        kill -0 $SERVER 2>/dev/null || fail "serve exited: $(cat serve.log)"
        sleep 0.1
    done
    [ -n "$PORT" ] || fail "serve did not print its URL: $(cat serve.log)"
    URL=http://127.0.0.1:$PORT
}
start_server 20
trap 'kill $SERVER 2>/dev/null; rm -rf "$tmp"' EXIT
AUTH="Authorization: Bearer sekrit-key-123"
ok

# ---- the openai client
PYO=${LF_OPENAI_PYTHON:-$HOME/.cache/llmforge/openai-venv/bin/python}
have_openai() { [ -x "$PYO" ] && "$PYO" -c "import openai" 2>/dev/null; } # ~2 s: asked once when it answers
if have_openai; then
    have=1
else
    venv=$HOME/.cache/llmforge/openai-venv
    { python3 -m venv "$venv" && "$venv/bin/pip" install -q "openai>=1.0,<4"; } >venv.log 2>&1
    PYO=$venv/bin/python
    have=$(have_openai && echo 1)
fi
if [ -n "$have" ]; then
    "$PYO" "$SRC/tools/check_openai_client.py" --base-url "$URL/v1" --key sekrit-key-123 --model run \
        --prompt "$PROMPT" --greedy-text "$greedy" --greedy-tokens 24 >client.log 2>&1 ||
        fail "openai client: $(tail -5 client.log)"
    cat client.log
    ok
else
    echo "note: no openai client (python3 -m venv + pip install openai failed: $(tail -1 venv.log)); client checks not run"
fi

# ---- a bad-request corpus; a good request between each
good='{"model":"run","prompt":"ROMEO:\n","max_tokens":3,"temperature":0}'
served=0
good_one() {
    code=$(curl -s -o good.json -w '%{http_code}' -H "$AUTH" "$URL/v1/completions" -d "$good")
    [ "$code" = 200 ] || fail "a correct request got $code after '$1': $(cat good.json)"
    served=$((served + 1))
}
expect() { # STATUS NAME CURL-ARGS...
    want=$1 name=$2
    shift 2
    code=$(curl -s -o bad.json -w '%{http_code}' --max-time 30 "$@")
    [ "$code" = "$want" ] || fail "$name: status $code, want $want: $(head -c 300 bad.json)"
    good_one "$name"
    ok
}
C=(-H "$AUTH" -H "Content-Type: application/json")
# a truncated chunked body: the deadline (10 s) answers 408 (or closes); the server goes on. It
# waits in the background while the rest of the corpus is answered beside it; checked below
python3 - "$PORT" >trunc.log 2>&1 <<'EOF' &
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n{\"prompt\":")
s.settimeout(20)
data = b""
try:
    while True:
        b = s.recv(4096)
        if not b: break
        data += b
except socket.timeout:
    sys.exit("no answer within 20 s")
assert data == b"" or data.startswith(b"HTTP/1.1 408") or data.startswith(b"HTTP/1.1 400"), data[:200]
EOF
TRUNC=$!
expect 400 "malformed JSON" "${C[@]}" "$URL/v1/completions" -d '{"prompt": "x",'
expect 400 "wrong type" "${C[@]}" "$URL/v1/completions" -d '{"prompt": 5}'
expect 400 "negative max_tokens" "${C[@]}" "$URL/v1/completions" -d '{"prompt": "x", "max_tokens": -3}'
expect 400 "huge max_tokens" "${C[@]}" "$URL/v1/completions" -d '{"prompt": "x", "max_tokens": 1e300}'
expect 400 "temperature out of range" "${C[@]}" "$URL/v1/completions" -d '{"prompt": "x", "temperature": 9}'
expect 400 "n = 0" "${C[@]}" "$URL/v1/completions" -d '{"prompt": "x", "n": 0}'
expect 404 "unknown model" "${C[@]}" "$URL/v1/completions" -d '{"model": "gpt-9", "prompt": "x"}'
grep -q model_not_found bad.json || fail "unknown model: $(cat bad.json)"
expect 404 "unknown path" "${C[@]}" "$URL/v1/nothing" -d '{}'
expect 405 "GET on completions" -H "$AUTH" "$URL/v1/completions"
long=$(python3 -c 'print("ROMEO: " * 40)')
expect 400 "prompt over the context" "${C[@]}" "$URL/v1/completions" -d "{\"prompt\": \"$long\", \"max_tokens\": 4}"
grep -q context_length_exceeded bad.json || fail "over the context: $(cat bad.json)"
head -c 10000000 /dev/zero | tr '\0' 'a' >big.txt
expect 413 "10 MB body" "${C[@]}" "$URL/v1/completions" --data-binary @big.txt
printf '{"prompt": "\xc3\x28 bad utf-8"}' >badutf8.json
expect 400 "invalid UTF-8" "${C[@]}" "$URL/v1/completions" --data-binary @badutf8.json
expect 401 "no key" -H "Content-Type: application/json" "$URL/v1/completions" -d "$good"
expect 401 "wrong key" -H "Authorization: Bearer nope" "$URL/v1/completions" -d "$good"
expect 400 "chat without messages" "${C[@]}" "$URL/v1/chat/completions" -d '{"messages": []}'
# more sequences than 4 slots + 32 queued can ever hold: a 400 saying why, not a 429 forever
many='{"prompt":["a","b","c","d","e","f","g","h","i","j"],"n":4,"max_tokens":2}'
expect 400 "more sequences than the server holds" "${C[@]}" "$URL/v1/completions" -d "$many"
grep -q '"param":"n"' bad.json && grep -q '40 sequences' bad.json || fail "too many sequences: $(cat bad.json)"
# the prompt cap (--max-prompts; its default here is 4 slots + 32 queued = 36, below 64): a
# list one over it is a 400 naming the option, a list at it runs
list_of() { python3 -c 'import json,sys; print(json.dumps({"prompt": ["ROMEO:"] * int(sys.argv[1]), "max_tokens": 1, "temperature": 0}))' "$1"; }
expect 400 "37 prompts over the default cap of 36" "${C[@]}" "$URL/v1/completions" -d "$(list_of 37)"
grep -q '"param":"prompt"' bad.json && grep -q 'at most 36 in one request' bad.json && grep -q -- '--max-prompts' bad.json ||
    fail "prompt cap: $(cat bad.json)"
code=$(curl -s -o cap.json -w '%{http_code}' "${C[@]}" "$URL/v1/completions" -d "$(list_of 36)")
[ "$code" = 200 ] || fail "36 prompts: $code $(head -c 300 cap.json)"
ok
# the end-of-text record (lm-evaluation-harness: max_tokens 1, echo, logprobs 1, then it drops
# each answer's last record): after a speaker's name the model's greedy token is "\n", the
# character vocabulary's end of text. Each choice ends "stop" with the prompt's records and that
# token's, whose log-probability is the one the prompt + "\n" scores it with, and no "\n" in the
# text; the same in a stream; and a chat answer's logprobs end with it too
python3 - "$URL" >eos_record.log 2>&1 <<'EOF2' || fail "end-of-text record: $(cat eos_record.log)"
import json, sys, urllib.request
url = sys.argv[1]
def post(path, body, stream=False):
    r = urllib.request.Request(url + path, json.dumps(body).encode(),
                               {"Authorization": "Bearer sekrit-key-123", "Content-Type": "application/json"})
    try:
        data = urllib.request.urlopen(r, timeout=60).read().decode()
    except urllib.error.HTTPError as e:
        sys.exit("%s %s: %d %s" % (path, json.dumps(body)[:200], e.code, e.read()[:300]))
    if not stream: return json.loads(data)
    return [json.loads(l[6:]) for l in data.split("\n") if l.startswith("data: {")]
prompts = ["ROMEO:", "First Citizen:", "MENENIUS:", "All:"]
b = post("/v1/completions", {"prompt": prompts, "max_tokens": 1, "echo": True, "logprobs": 1, "temperature": 0})
ref = post("/v1/completions", {"prompt": [p + "\n" for p in prompts], "max_tokens": 0, "echo": True, "logprobs": 1})
stops = 0
for c in b["choices"]:
    p, lp = prompts[c["index"]], c["logprobs"]
    if c["finish_reason"] != "stop": continue  # the model's greedy token was not "\n" here
    stops += 1
    assert c["text"] == p, c  # the end of text adds no text
    assert len(lp["tokens"]) == len(p) + 1 and lp["tokens"][-1] == "\n", lp
    assert len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(lp["text_offset"]) == len(p) + 1, lp
    assert lp["text_offset"][-1] == len(p), lp
    r = [x for x in ref["choices"] if x["index"] == c["index"]][0]["logprobs"]["token_logprobs"][-1]
    assert abs(lp["token_logprobs"][-1] - r) <= 1e-5 * max(1.0, abs(r)), (lp["token_logprobs"][-1], r)
    assert lp["top_logprobs"][-1] == {"\n": lp["token_logprobs"][-1]}, lp  # greedy: it is the top one
assert stops >= 2, b  # at least two prompts end at the end of text
assert b["usage"]["completion_tokens"] == len(prompts), b["usage"]  # the end-of-text token counts
ev = post("/v1/completions", {"prompt": "ROMEO:", "max_tokens": 1, "echo": True, "logprobs": 1, "temperature": 0,
                              "stream": True}, stream=True)
toks = [t for e in ev for ch in e["choices"] if ch.get("logprobs") for t in ch["logprobs"]["tokens"]]
text = "".join(ch["text"] for e in ev for ch in e["choices"])
assert ev[-1]["choices"][0]["finish_reason"] == "stop" and toks == list("ROMEO:") + ["\n"] and text == "ROMEO:", ev
# chat: greedy text loops without a newline, so 4 seeded choices (temperature 1) that end lines
chat_stops = 0
for ch in post("/v1/chat/completions", {"messages": [{"role": "user", "content": "ROMEO"}], "max_tokens": 80, "n": 4,
                                        "seed": 7, "logprobs": True, "top_logprobs": 1})["choices"]:
    content = ch["logprobs"]["content"]
    if ch["finish_reason"] != "stop": continue
    chat_stops += 1
    assert content[-1]["token"] == "\n" and content[-1]["bytes"] == [10], ch
    assert "".join(t["token"] for t in content[:-1]) == ch["message"]["content"], ch
assert chat_stops >= 1
print("end-of-text record: %d of %d prompts ended at the end of text with their record; a stream; %d of 4 chat choices" %
      (stops, len(prompts), chat_stops))
EOF2
cat eos_record.log
good_one "end-of-text record"
ok
# a character outside the vocabulary: the client learns which, not where the server keeps its files
expect 400 "character outside the vocabulary" "${C[@]}" "$URL/v1/completions" -d '{"prompt":"ROMEO \u00e9\u00e9"}'
grep -q 'not in the vocabulary' bad.json || fail "outside the vocabulary: $(cat bad.json)"
! grep -q "/step_\|$tmp" bad.json || fail "the error names a server path: $(cat bad.json)"
grep -q "step_.*vocab.json" serve.log || fail "the server log lacks the refused request's path: $(tail -3 serve.log)"
# a top_p that a float rounds to 0 keeps the most likely token only (it once switched the filter
# off): at temperature 1.5 every seed gives the greedy text
for seed in 1 2; do
    curl -s -H "$AUTH" "$URL/v1/completions" -o topp.json \
        -d "{\"prompt\":\"ROMEO:\\n\",\"max_tokens\":24,\"temperature\":1.5,\"top_p\":1e-50,\"seed\":$seed}"
    python3 - "$greedy" <<'PY' || fail "top_p 1e-50, seed $seed: $(cat topp.json)"
import json, sys
t = json.load(open("topp.json"))["choices"][0]["text"]
assert t == sys.argv[1], (t, sys.argv[1])
PY
done
# RFC 9112 framing that a proxy could read differently (request smuggling): each gets 400 (501
# for a transfer coding the server does not decode) in OpenAI's error shape and the connection
# closed, nothing after it read as another request
python3 - "$PORT" >framing.log 2>&1 <<'EOF2' || fail "RFC 9112 framing: $(cat framing.log)"
import socket, sys
port = int(sys.argv[1])
B = b'{"model":"run","prompt":"ROMEO:\\n","max_tokens":2,"temperature":0}'
L = str(len(B)).encode()
def req(h, body=B):
    return (b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer sekrit-key-123\r\n" + h +
            b"\r\n" + body)
chunked = hex(len(B))[2:].encode() + b"\r\n" + B + b"\r\n0\r\n\r\n"
cases = {  # name: (raw bytes, status)
    "two different Content-Length": (req(b"Content-Length: " + L + b"\r\nContent-Length: 2\r\n"), 400),
    "two equal Content-Length": (req(b"Content-Length: " + L + b"\r\nContent-Length: " + L + b"\r\n"), 400),
    "Transfer-Encoding and Content-Length":
        (req(b"Transfer-Encoding: chunked\r\nContent-Length: " + L + b"\r\n", chunked), 400),
    "Transfer-Encoding gzip (chunked not last)": (req(b"Transfer-Encoding: gzip\r\n"), 400),
    "Transfer-Encoding gzip, chunked (a coding not decoded)": (req(b"Transfer-Encoding: gzip, chunked\r\n", chunked), 501),
    "obs-fold": (req(b"X-A: a\r\n b c\r\nContent-Length: " + L + b"\r\n"), 400),
    "obs-fold of Content-Length": (req(b"Content-Length: " + L[:1] + b"\r\n " + L[1:] + b"\r\n"), 400),
    "bare CR": (req(b"X-A: a\rb\r\nContent-Length: " + L + b"\r\n"), 400),
    "space before the colon": (req(b"Content-Length : 2\r\nContent-Length: " + L + b"\r\n"), 400),
}
for name, (raw, status) in cases.items():
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(10)
    s.sendall(raw)
    data = b""
    while True:
        b = s.recv(65536)
        if not b: break  # the server closed the connection
        data += b
    s.close()
    assert data.startswith(b"HTTP/1.1 %d" % status), (name, data[:200])
    assert b"Connection: close" in data.split(b"\r\n\r\n")[0], (name, data[:300])
    assert b'"error"' in data and b"framing" in data, (name, data[:400])
    assert data.count(b"HTTP/1.1 ") == 1, (name, data[:600])
print("framing: %d cases refused with 400 or 501 and a close" % len(cases))
EOF2
good_one "RFC 9112 framing"
ok
# slow-loris clients hold connections; correct requests are still answered at once
python3 - "$PORT" <<'EOF' &
import socket, sys, time
socks = []
for i in range(40):
    try:
        s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
        socks.append(s)
    except OSError:
        pass
for _ in range(12):
    for s in socks:
        try: s.sendall(b"X")
        except OSError: pass
    time.sleep(0.5)
EOF
LORIS=$!
sleep 1
t0=$(date +%s%N)
for i in 1 2 3; do good_one "slow-loris clients"; done
t1=$(date +%s%N)
[ $(( (t1 - t0) / 1000000 )) -lt 15000 ] || fail "3 requests took $(( (t1 - t0) / 1000000 )) ms beside slow clients"
kill $LORIS 2>/dev/null
wait $LORIS 2>/dev/null
ok
wait $TRUNC || fail "truncated chunked body: $(cat trunc.log)"
good_one "truncated chunked body"
ok
echo "bad-request corpus: every bad request got its status; $served correct requests answered between them"

# ---- metrics
curl -s "$URL/metrics" >metrics.txt
grep -q 'llmforge_serve_requests_total{endpoint="/v1/completions",status="200"}' metrics.txt ||
    fail "metrics: $(head -20 metrics.txt)"
grep -q 'llmforge_serve_time_to_first_token_seconds_count' metrics.txt || fail "metrics: no TTFT histogram"
ok
if command -v promtool >/dev/null; then
    promtool check metrics <metrics.txt >promtool.log 2>&1 || fail "promtool: $(cat promtool.log)"
    ok
fi

# ---- SIGTERM while a stream runs
kill -TERM $SERVER
wait $SERVER
rc=$?
[ $rc -eq 0 ] || fail "serve exited $rc on SIGTERM: $(tail -3 serve.log)"
start_server 5
( curl -s -N -H "$AUTH" "$URL/v1/completions" \
    -d '{"prompt":"ROMEO:\n","max_tokens":60,"temperature":0,"stream":true}' >stream.txt ) &
CURL=$!
for _ in $(seq 1 100); do grep -q '^data: {' stream.txt 2>/dev/null && break; sleep 0.05; done
t0=$(date +%s)
kill -TERM $SERVER
wait $SERVER
rc=$?
t1=$(date +%s)
wait $CURL
[ $rc -eq 0 ] || fail "serve exited $rc on SIGTERM during a stream"
[ $((t1 - t0)) -le 7 ] || fail "SIGTERM took $((t1 - t0)) s with --drain-s 5"
tail -c 20 stream.txt | grep -q 'data: \[DONE\]' || fail "the stream did not end with [DONE]: $(tail -c 300 stream.txt)"
grep -q '"finish_reason":"length"' stream.txt || fail "the stream has no finish_reason: $(tail -c 300 stream.txt)"
ok

# ---- drain: a request whose body is still arriving at SIGTERM is finished (200); a request
# that arrives after SIGTERM gets 503; then the server exits 0
start_server 20
python3 - "$PORT" "$SERVER" >drain_partial.log 2>&1 <<'EOF2' || fail "drain, partial body: $(cat drain_partial.log)"
import json, os, signal, socket, sys, time
port, pid = int(sys.argv[1]), int(sys.argv[2])
B = b'{"model":"run","prompt":"ROMEO:\\n","max_tokens":5,"temperature":0}'
s = socket.create_connection(("127.0.0.1", port))
s.settimeout(20)
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer sekrit-key-123\r\n"
          b"Content-Length: %d\r\n\r\n" % len(B) + B[:10])
time.sleep(0.2)  # the headers and 10 body bytes are in
os.kill(pid, signal.SIGTERM)
for _ in range(1000):  # under load the main thread may take a while to see the signal
    if b"stopping (draining" in open("serve.log", "rb").read(): break  # printed just before the drain
    time.sleep(0.01)
time.sleep(0.05)
late = socket.create_connection(("127.0.0.1", port))  # the drain still listens: 503
late.settimeout(20)
late.sendall(b"GET /v1/models HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer sekrit-key-123\r\n\r\n")
s.sendall(B[10:])
def read_all(c):
    d = b""
    while True:
        b = c.recv(65536)
        if not b: return d
        d += b
        if b"\r\n\r\n" in d:
            head, body = d.split(b"\r\n\r\n", 1)
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:") and len(body) >= int(line.split(b":")[1]):
                    return d
r = read_all(s)
assert r.startswith(b"HTTP/1.1 200"), r[:300]
body = json.loads(r.split(b"\r\n\r\n", 1)[1])
assert body["choices"][0]["finish_reason"] in ("length", "stop"), body
assert body["usage"]["completion_tokens"] >= 1, body
r = read_all(late)
assert r.startswith(b"HTTP/1.1 503"), r[:300]
print("partial body at SIGTERM: 200; request after SIGTERM: 503")
EOF2
wait $SERVER
rc=$?
[ $rc -eq 0 ] || fail "serve exited $rc after the partial-body drain"
ok

# ---- drain cut at once (--drain-s 0) under load: 64 concurrent 80-token requests, half of them
# streams, SIGTERM as soon as the first token of a stream arrived (so that most are queued or
# decoding: the cut is certain, not a matter of timing). Each gets a complete answer (80 tokens or a stop) or an explicit
# error (429/503 in OpenAI's shape; a stream: an error event and no [DONE]), never a cut text
# labelled "length"
start_server 0
python3 - "$PORT" "$SERVER" >drain_cut.log 2>&1 <<'EOF2' || fail "drain cut: $(cat drain_cut.log)"
import json, os, signal, socket, sys, threading, time
port, pid = int(sys.argv[1]), int(sys.argv[2])
res = [None] * 64
first = threading.Event()
def one(i):
    stream = i % 2 == 1
    body = json.dumps({"model": "run", "prompt": "ROMEO:\n", "max_tokens": 80, "temperature": 1.0, "seed": i,
                       "ignore_eos": True, "stream": stream}).encode()
    try:
        s = socket.create_connection(("127.0.0.1", port))
        s.settimeout(30)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer sekrit-key-123\r\n"
                  b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        d = b""
        while True:
            b = s.recv(65536)
            if not b: break
            d += b
            if stream and b"data: {" in d: first.set()
        res[i] = (stream, d)
    except OSError as e:
        res[i] = (stream, b"", str(e))
th = [threading.Thread(target=one, args=(i,)) for i in range(64)]
for t in th: t.start()
first.wait(30)
os.kill(pid, signal.SIGTERM)
for t in th: t.join()
count = {}
for i, r in enumerate(res):
    stream, d = r[0], r[1]
    if not d:  # refused before it was accepted (the listener closed): no request was lost
        assert len(r) == 3, (i, r)
        count["refused"] = count.get("refused", 0) + 1
        continue
    head, _, body = d.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    if status in (429, 503):
        assert b'"error"' in body, (i, d[:300])
        count[status] = count.get(status, 0) + 1
        continue
    assert status == 200, (i, d[:300])
    if not stream:
        j = json.loads(body)
        assert j["usage"]["completion_tokens"] == 80 or j["choices"][0]["finish_reason"] == "stop", (i, j)
        count["complete"] = count.get("complete", 0) + 1
        continue
    raw, body, ended = body, b"", False
    while raw:  # de-chunk
        size_line, _, rest = raw.partition(b"\r\n")
        n = int(size_line.split(b";")[0], 16)
        if n == 0:
            ended = True
            break
        body += rest[:n]
        raw = rest[n + 2:]
    events = [l[6:] for l in body.split(b"\n") if l.startswith(b"data: ")]
    if b"[DONE]" in events:
        assert not any(e.startswith(b'{"error"') for e in events), (i, body[-300:])
        fin = [json.loads(e)["choices"][0]["finish_reason"] for e in events if e != b"[DONE]"]
        assert fin[-1] in ("length", "stop"), (i, fin[-3:])
        count["complete"] = count.get("complete", 0) + 1
    else:
        assert events and events[-1].startswith(b'{"error"'), (i, body[-300:])
        assert not any(b'"finish_reason":"length"' in e for e in events), (i, body[-300:])
        assert ended, (i, body[-100:])  # the chunked stream ends cleanly
        count["stream error"] = count.get("stream error", 0) + 1
print("drain cut:", count)
assert count.get(503, 0) + count.get("stream error", 0) > 0, count  # the cut did happen
EOF2
wait $SERVER
rc=$?
[ $rc -eq 0 ] || fail "serve exited $rc after the cut drain"
cat drain_cut.log
ok

# ---- --max-prompts: above what the server ever holds it is refused at start, naming the sizes;
# raised (with the queue) a 40-prompt list runs, as lm-evaluation-harness's batch_size=40 sends it
"$LF" serve --ckpt run --port 0 --max-batch 4 --max-queue 32 --max-prompts 100 --threads 2 >cap_bad.log 2>&1 &&
    fail "--max-prompts 100 over 36 sequences started: $(cat cap_bad.log)"
grep -q -- '--max-prompts 100 is more than the server ever holds (--max-batch 4 + --max-queue 32 = 36' cap_bad.log ||
    fail "--max-prompts refusal: $(cat cap_bad.log)"
"$LF" serve --ckpt run --port 0 --api-key-file key.txt --max-batch 4 --max-queue 64 --max-prompts 40 --threads 2 \
    --drain-s 5 >cap_serve.log 2>&1 &
SERVER=$!
PORT=
for _ in $(seq 1 100); do
    PORT=$(sed -n 's|.*http://127.0.0.1:\([0-9]*\)/v1.*|\1|p' cap_serve.log)
    [ -n "$PORT" ] && break
    sleep 0.1
done
[ -n "$PORT" ] || fail "serve --max-prompts 40 did not start: $(cat cap_serve.log)"
URL=http://127.0.0.1:$PORT
code=$(curl -s -o cap.json -w '%{http_code}' "${C[@]}" "$URL/v1/completions" -d "$(list_of 40)")
[ "$code" = 200 ] && [ "$(python3 -c 'import json; print(len(json.load(open("cap.json"))["choices"]))')" = 40 ] ||
    fail "40 prompts under --max-prompts 40: $code $(head -c 300 cap.json)"
code=$(curl -s -o cap.json -w '%{http_code}' "${C[@]}" "$URL/v1/completions" -d "$(list_of 41)")
[ "$code" = 400 ] && grep -q 'at most 40 in one request' cap.json || fail "41 prompts: $code $(cat cap.json)"
kill -TERM $SERVER
wait $SERVER || fail "serve --max-prompts 40 did not exit 0"
ok
echo "$passed passed, 0 failed"
