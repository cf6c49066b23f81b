#!/usr/bin/env bash
# Serving under load: `llmforge serve` beside llama.cpp's OpenAI-compatible server
# (llama-cpp-python[server]) on the same machine in the same run, for GPT-2 124M and the
# SmolLM-135M shape, with 1, 4, 16 and 64 concurrent streaming clients. Prints one JSON line
# per run and a summary with medians over ROUNDS, ratios and the targets.
#   bench/serve.sh [ROUNDS]
# ROUNDS defaults to 3. Environment: BUILD (default build); CLIENTS (default "1 4 16 64");
# MODELS (default "gpt2-124m smollm-135m"); GEN_TOKENS (default 64, tokens generated per
# request); DURATION (default 30, seconds per run); REQUESTS (default 4: requests per client and
# run, at most); SHORT=1 for a quick end-to-end check (CLIENTS "1 4", GEN_TOKENS 16, DURATION 8,
# gpt2-124m only); FRESH=1 makes the checkpoints and GGUF files again.
#
# Targets: llmforge's total generated tokens/s >= llama.cpp's at 16 and 64 clients (where
# continuous batching pays), and >= 0.8x at 1 client (against each of llama.cpp's F32 and BF16).
#
# What runs:
#  - Checkpoints: bench/ckpt.sh (random weights, shared with bench/decode.sh under
#    out/bench/decode/<model>/). llmforge serves the step directory as it is (fp32).
#  - llama.cpp: the same checkpoint converted with the convert_hf_to_gguf.py of llama-cpp-python's
#    source distribution (the version installed) to F32 and to BF16 GGUF, from a copy of the step
#    directory that carries Hugging Face tokenizer files (bench/serve_gguf.py: GPT-2's byte-level
#    BPE, cut to 49152 tokens for the SmolLM shape), served by `python -m llama_cpp.server`.
#  - Prompts: 128 tokens each, a different one for every request (so llama.cpp's reuse of the
#    previous prompt's prefix never applies), pieces of tinyshakespeare that llama.cpp's tokenizer
#    cuts into exactly 128 ids. llmforge gets the ids (a token-id prompt); llama-cpp-python's
#    server takes text prompts only (its `prompt` is a string or a list of strings), so it gets
#    the text, and its usage says 128 prompt tokens (checked before the runs).
#  - The same number of tokens on both sides: max_tokens GEN_TOKENS, greedy (temperature 0), the
#    end of text switched off: llmforge with "ignore_eos": true (vLLM's field), llama.cpp with
#    "logit_bias" {EOS: -100} (llama-cpp-python's server has no ignore_eos) and repeat_penalty
#    1.0 (its default 1.1 would cost it work llmforge does not do). serve_load.py counts requests
#    that ended short anyway ("short").
#  - Threads: 2 for both (llmforge --threads 2; llama.cpp n_threads 2, n_threads_batch 2).
#    Context: 128 + GEN_TOKENS rounded up to a multiple of 64 for both (llmforge --max-context,
#    llama.cpp n_ctx). llmforge --max-batch 64 (every client decodes at once); llama-cpp-python
#    runs one request at a time (its server holds a lock around the model), with
#    interrupt_requests off so that a waiting request does not cut the running one short, and
#    use_mmap off: the weights are read into memory at start, as llmforge reads them.
#  - Load: bench/serve_load.py (asyncio, httpx2/httpx from the bench venv, loopback only): for
#    each client count, that many concurrent streaming clients, each sending requests one after
#    another, at most REQUESTS x clients requests in all and DURATION seconds (then what still
#    streams is closed and its tokens so far count). Reported: total generated tokens/s,
#    p50/p99 time to first token, p50/p99 inter-token latency (see that file). A request still
#    waiting for its first token at the cut gets the time it waited as its TTFT (the summary
#    marks such percentiles ">=").
#  - Each server is started once per round and model, checked with one request (usage: 128
#    prompt tokens, GEN_TOKENS completion tokens), warmed up with 4 more (2 clients; the first
#    runs after a start were seen to be several times slower on llama.cpp's side), then runs
#    the client counts in order. Rounds alternate the implementations' order.
# The load generator runs on the same 2 CPUs as the server it drives, for both.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
BUILD=${BUILD:-build}
if [ "${SHORT:-0}" = 1 ]; then
  CLIENTS=${CLIENTS:-1 4}
  GEN_TOKENS=${GEN_TOKENS:-16}
  DURATION=${DURATION:-8}
  MODELS_RUN=${MODELS:-gpt2-124m}
else
  CLIENTS=${CLIENTS:-1 4 16 64}
  GEN_TOKENS=${GEN_TOKENS:-64}
  DURATION=${DURATION:-30}
  MODELS_RUN=${MODELS:-gpt2-124m smollm-135m}
fi
REQUESTS=${REQUESTS:-4}
PROMPT_TOKENS=128
CTX=$(( (PROMPT_TOKENS + GEN_TOKENS + 63) / 64 * 64 ))
OUT=out/bench/serve
SHARED=${LF_SHARED:-../shared}
LLAMACPP_VENV=${LF_LLAMACPP_VENV:-$HOME/.cache/llmforge/llamacpp-venv}
LLAMACPP_VERSION=0.3.36
LLAMACPP_SRC=${LF_LLAMACPP_SRC:-$HOME/.cache/llmforge/llamacpp-src/llama_cpp_python-$LLAMACPP_VERSION}
. bench/venv.sh
make -s build BUILD="$BUILD" >/dev/null
mkdir -p "$OUT"
bench_env_report
for f in "$SHARED/data/gpt2/encoder.json" "$SHARED/data/gpt2/vocab.bpe" "$SHARED/data/tinyshakespeare.txt"; do
  [ -f "$f" ] || { echo "serve.sh: $f is missing (LF_SHARED names the shared directory)" >&2; exit 1; }
done

# ---- llama-cpp-python[server] (it builds llama.cpp from source) and its source distribution
if ! "$LLAMACPP_VENV/bin/python" -c "import llama_cpp.server" 2>/dev/null; then
  echo "serve.sh: pip install 'llama-cpp-python[server]==$LLAMACPP_VERSION' into $LLAMACPP_VENV (builds llama.cpp; minutes)"
  python3 -m venv "$LLAMACPP_VENV"
  "$LLAMACPP_VENV/bin/pip" install --quiet "llama-cpp-python[server]==$LLAMACPP_VERSION"
fi
if [ ! -f "$LLAMACPP_SRC/vendor/llama.cpp/convert_hf_to_gguf.py" ]; then
  echo "serve.sh: fetching llama-cpp-python's source distribution (for convert_hf_to_gguf.py)"
  mkdir -p "$(dirname "$LLAMACPP_SRC")"
  "$LLAMACPP_VENV/bin/pip" download --quiet --no-deps --no-binary :all: "llama-cpp-python==$LLAMACPP_VERSION" \
    -d "$(dirname "$LLAMACPP_SRC")"
  tar -xzf "$(dirname "$LLAMACPP_SRC")/llama_cpp_python-$LLAMACPP_VERSION.tar.gz" -C "$(dirname "$LLAMACPP_SRC")"
fi
CONVERTER=$LLAMACPP_SRC/vendor/llama.cpp
"$LF_BENCH_PYTHON" -c "import sentencepiece, yaml, tqdm" 2>/dev/null ||
  "$LF_BENCH_PYTHON" -m pip install --quiet sentencepiece pyyaml tqdm # what the converter imports besides torch
LLAMACPP_PY=$LLAMACPP_VENV/bin/python
echo "llama-cpp-python $("$LLAMACPP_PY" -c 'import llama_cpp; print(llama_cpp.__version__)'), converter $CONVERTER"

# ---- checkpoints, GGUF files, prompts
. bench/ckpt.sh
N_PROMPTS=0
for c in $CLIENTS; do [ $((REQUESTS * c + 1)) -gt $N_PROMPTS ] && N_PROMPTS=$((REQUESTS * c + 1)); done
declare -A EOS
for m in $MODELS_RUN; do
  make_ckpt "$m"
  step=$(cat "$CKPT_OUT/$m/stepdir")
  d=$OUT/$m
  mkdir -p "$d"
  # made again when the checkpoint is newer than them, or FRESH=1
  if [ "${FRESH:-0}" = 1 ] || [ ! -f "$d/bf16.gguf" ] || [ "$step/model.safetensors" -nt "$d/bf16.gguf" ]; then
    "$LF_BENCH_PYTHON" bench/serve_gguf.py hf --step "$step" --out "$d/hf" --vocab "${VOCAB[$m]}" \
      --gpt2 "$SHARED/data/gpt2" | sed "s/^/$m: /"
    for t in f32 bf16; do
      PYTHONPATH=$CONVERTER/gguf-py "$LF_BENCH_PYTHON" bench/serve_gguf.py convert --src "$d/hf" \
        --outfile "$d/$t.gguf.tmp" --outtype "$t" --llamacpp "$CONVERTER" >"$d/convert_$t.log" 2>&1 ||
        { tail -20 "$d/convert_$t.log" >&2; exit 1; }
      grep -h "serve_gguf.py" "$d/convert_$t.log" | sed "s/^/$m $t: /" || true
      mv "$d/$t.gguf.tmp" "$d/$t.gguf"
      echo "$m: $d/$t.gguf ($(du -h "$d/$t.gguf" | cut -f1)) by convert_hf_to_gguf.py --outtype $t"
    done
    rm -f "$d/prompts.json"
  fi
  if [ ! -f "$d/prompts.json" ] || [ "$(cat "$d/prompts.n" 2>/dev/null)" != "$N_PROMPTS" ]; then
    "$LLAMACPP_PY" bench/serve_gguf.py prompts --gguf "$d/f32.gguf" --text "$SHARED/data/tinyshakespeare.txt" \
      --n "$N_PROMPTS" --tokens "$PROMPT_TOKENS" --out "$d/prompts.json" 2>/dev/null | sed "s/^/$m: /"
    echo "$N_PROMPTS" >"$d/prompts.n"
  fi
  EOS[$m]=$("$LLAMACPP_PY" -c "import llama_cpp, sys; print(llama_cpp.Llama(model_path=sys.argv[1], vocab_only=True, \
verbose=False).token_eos())" "$d/f32.gguf" 2>/dev/null)
  echo "$m: llama.cpp end of text id ${EOS[$m]} (biased by -100)"
done

# ---- servers
SERVER=
PORT=
stop_server() {
  if [ -n "$SERVER" ]; then
    kill -TERM "$SERVER" 2>/dev/null || true
    wait "$SERVER" 2>/dev/null || true
    SERVER=
  fi
}
trap stop_server EXIT
free_port() { "$LF_BENCH_PYTHON" -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"; }

# start_server MODEL IMPL LOG: IMPL is llmforge, llamacpp-f32 or llamacpp-bf16
start_server() {
  local m=$1 impl=$2 log=$3 step
  step=$(cat "$CKPT_OUT/$m/stepdir")
  PORT=$(free_port)
  case $impl in
    llmforge)
      "$BUILD"/llmforge serve --ckpt "$step" --host 127.0.0.1 --port "$PORT" --model-name "$m" --threads 2 \
        --max-batch 64 --max-context "$CTX" --max-queue 1024 >"$log" 2>&1 &
      ;;
    llamacpp-*)
      "$LLAMACPP_PY" -m llama_cpp.server --model "$OUT/$m/${impl#llamacpp-}.gguf" --model_alias "$m" \
        --host 127.0.0.1 --port "$PORT" --n_threads 2 --n_threads_batch 2 --n_ctx "$CTX" \
        --interrupt_requests False --use_mmap False >"$log" 2>&1 &
      ;;
  esac
  SERVER=$!
  for _ in $(seq 1 600); do
    curl -s -o /dev/null "http://127.0.0.1:$PORT/v1/models" && return 0
    kill -0 "$SERVER" 2>/dev/null || { echo "serve.sh: $impl exited: $(tail -5 "$log")" >&2; exit 1; }
    sleep 0.2
  done
  echo "serve.sh: $impl did not answer within 120 s: $(tail -5 "$log")" >&2
  exit 1
}

extra_of() { # MODEL IMPL: the request fields that keep both sides generating max_tokens
  case $2 in
    llmforge) echo '{"ignore_eos": true, "stream_options": {"include_usage": true}}' ;;
    *) echo "{\"logit_bias\": {\"${EOS[$1]}\": -100}, \"repeat_penalty\": 1.0}" ;;
  esac
}

# check_prompt MODEL IMPL: one non-streamed request, the prompt as that side gets it: 128 prompt
# tokens and GEN_TOKENS completion tokens in its usage
check_prompt() {
  local m=$1 impl=$2 body
  body=$("$LF_BENCH_PYTHON" - "$OUT/$m/prompts.json" "$impl" "$m" "$GEN_TOKENS" "$(extra_of "$m" "$impl")" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))[-1]
b = {"model": sys.argv[3], "prompt": p["ids"] if sys.argv[2] == "llmforge" else p["text"],
     "max_tokens": int(sys.argv[4]), "temperature": 0, **json.loads(sys.argv[5])}
b.pop("stream_options", None)
print(json.dumps(b))
PY
)
  curl -s "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' -d "$body" |
    "$LF_BENCH_PYTHON" -c "
import json, sys
r = json.load(sys.stdin)
u = r.get('usage') or {}
if u.get('prompt_tokens') != $PROMPT_TOKENS or u.get('completion_tokens') != $GEN_TOKENS:
    sys.exit('serve.sh: $m $impl: usage %s, expected $PROMPT_TOKENS prompt and $GEN_TOKENS completion tokens: %s' % (u, str(r)[:300]))
print('$m $impl: warm-up request: usage %s' % u)"
}

IMPLS=(llmforge llamacpp-f32 llamacpp-bf16)
for r in $(seq "$ROUNDS"); do
  : >"$OUT/runs_$r.jsonl"
  for m in $MODELS_RUN; do
    order=("${IMPLS[@]}")
    if [ $((r % 2)) = 0 ]; then order=(llamacpp-bf16 llamacpp-f32 llmforge); fi
    for impl in "${order[@]}"; do
      start_server "$m" "$impl" "$OUT/$m/server_${impl}_$r.log"
      check_prompt "$m" "$impl"
      # warm-up, not recorded: the first requests after a start run slower (caches, the allocator)
      "$LF_BENCH_PYTHON" bench/serve_load.py --url "http://127.0.0.1:$PORT/v1" --model "$m" \
        --prompts "$OUT/$m/prompts.json" --as "$([ "$impl" = llmforge ] && echo ids || echo text)" \
        --clients 2 --requests 4 --duration "$DURATION" --max-tokens "$GEN_TOKENS" \
        --extra "$(extra_of "$m" "$impl")" --label warm-up >/dev/null
      for c in $CLIENTS; do
        "$LF_BENCH_PYTHON" bench/serve_load.py --url "http://127.0.0.1:$PORT/v1" --model "$m" \
          --prompts "$OUT/$m/prompts.json" --as "$([ "$impl" = llmforge ] && echo ids || echo text)" \
          --clients "$c" --requests $((REQUESTS * c)) --duration "$DURATION" --max-tokens "$GEN_TOKENS" \
          --extra "$(extra_of "$m" "$impl")" --label "$m $impl round $r" |
          "$LF_BENCH_PYTHON" -c "import json, sys; d = json.loads(sys.stdin.read()); \
d.update(model='$m', impl='$impl', round=$r); print(json.dumps(d))" | tee -a "$OUT/runs_$r.jsonl"
      done
      stop_server
    done
  done
done

"$LF_BENCH_PYTHON" - "$OUT" "$ROUNDS" "$GEN_TOKENS" "$PROMPT_TOKENS" "$DURATION" "$MODELS_RUN" "$CLIENTS" <<'PY'
import json, os, statistics, sys
out, rounds, gen, prompt, duration = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
models, clients = sys.argv[6].split(), [int(c) for c in sys.argv[7].split()]
runs = [json.loads(l) for r in range(1, rounds + 1) for l in open(os.path.join(out, "runs_%d.jsonl" % r)) if l.strip()]
impls = ["llmforge", "llamacpp-f32", "llamacpp-bf16"]
med = lambda xs: statistics.median(xs) if xs else None  # noqa: E731


def cell(m, i, c):
    return [x for x in runs if x["model"] == m and x["impl"] == i and x["clients"] == c]


def fmt(v, lower=False):
    return "-" if v is None else ("%s%.0f" % (">=" if lower else "", v))


print("\nmedians of %d round%s; %d-token prompts, %d generated tokens per request (greedy, end of text off), "
      "runs of at most %s s; 2 threads each; llmforge fp32, llama.cpp F32 and BF16 GGUF" % (
          rounds, "" if rounds == 1 else "s", prompt, gen, duration))
verdicts = []
for m in models:
    print("\n%s" % m)
    print("  %-14s %7s %11s %10s %10s %9s %9s %6s %6s %5s" % ("", "clients", "tokens/s", "TTFT p50", "TTFT p99",
                                                             "ITL p50", "ITL p99", "done", "cut", "short"))
    tps = {}
    for i in impls:
        for c in clients:
            xs = cell(m, i, c)
            if not xs:
                continue
            tps[(i, c)] = med([x["tokens_per_s"] or 0 for x in xs])
            cens = any(x.get("ttft_censored") for x in xs)
            print("  %-14s %7d %11.2f %10s %10s %9s %9s %6d %6d %5d" % (
                i, c, tps[(i, c)], fmt(med([x["ttft_p50_ms"] for x in xs if x["ttft_p50_ms"] is not None]),
                                       cens and any(x.get("ttft_p50_censored") for x in xs)),
                fmt(med([x["ttft_p99_ms"] for x in xs if x["ttft_p99_ms"] is not None]),
                    cens and any(x.get("ttft_p99_censored") for x in xs)),
                fmt(med([x["itl_p50_ms"] for x in xs if x["itl_p50_ms"] is not None])),
                fmt(med([x["itl_p99_ms"] for x in xs if x["itl_p99_ms"] is not None])),
                sum(x["done"] for x in xs), sum(x["cut"] + x["waiting"] for x in xs), sum(x.get("short", 0) for x in xs)))
    print("  (ms; TTFT/ITL of requests that streamed; cut: closed at the time limit, its tokens counted; short: "
          "finished with fewer than %d tokens)" % gen)
    for peer in ("llamacpp-f32", "llamacpp-bf16"):
        parts = []
        for c in clients:
            if (peer, c) in tps and ("llmforge", c) in tps and tps[(peer, c)]:
                ratio = tps[("llmforge", c)] / tps[(peer, c)]
                target = 0.8 if c == 1 else 1.0 if c >= 16 else None
                ok = "" if target is None else (" (>= %.1f: %s)" % (target, "met" if ratio >= target else "NOT met"))
                parts.append("%d clients %.2fx%s" % (c, ratio, ok))
                if target is not None:
                    verdicts.append("%s vs %s at %d: %.2fx %s" % (m, peer, c, ratio, "met" if ratio >= target else
                                                                   "NOT met"))
        print("  llmforge / %s tokens/s: %s" % (peer, "; ".join(parts)))
print("\ntargets: llmforge total tokens/s >= llama.cpp's at 16 and 64 clients, >= 0.8x at 1 client")
for v in verdicts:
    print("  " + v)
PY
