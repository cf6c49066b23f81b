#!/usr/bin/env bash
# Time to first token of `llmforge serve --model DIR` on a Hugging Face directory as a user has
# one on disk: a Llama-3.2-1B-shaped model (16 layers, hidden 2048, 32/8 heads, ffn 8192,
# 128256 vocabulary, tied, rope_theta 500000 with Llama 3's `llama3` RoPE scaling) with random
# weights in bfloat16 (2.5 GB of safetensors), made once by transformers under
# out/bench/ttft/llama-3.2-1b (FRESH=1 makes it again) with a byte-level BPE tokenizer.json
# (tests/fixtures/hf_tok/llama3.json; smaller than the vocabulary, as padding is).
# Each of ROUNDS rounds: the page cache dropped when we may (root: /proc/sys/vm/drop_caches,
# "cold"), then `serve --model DIR --port 0 --max-batch 1 --max-context 2048` started, its URL
# awaited, and one completion (a 64-token prompt, max_tokens 1) sent; TTFT = from the process
# start to the answer, split into start (to the URL) and the first answer. Peak RSS: the
# server's VmHWM. Beside it, transformers on PyTorch 2.x (the bench venv): from_pretrained(DIR,
# dtype=float32) and one generated token, timed the same way from the interpreter's start (its
# import time counted). Medians of the rounds.
#   bench/serve_ttft.sh [ROUNDS]      (default 3; BUILD: the CMake build directory, default build)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
BUILD=${BUILD:-build}
LF=$BUILD/llmforge
[ -x "$LF" ] || { echo "bench: $LF is missing (make build)" >&2; exit 1; }
. bench/venv.sh
bench_env_report
DIR=out/bench/ttft/llama-3.2-1b
if [ "${FRESH:-0}" = 1 ] || [ ! -f "$DIR/expected_ok" ]; then
  rm -rf "$DIR" && mkdir -p "$DIR"
  "$LF_BENCH_PYTHON" - "$DIR" <<'PY'
import os, shutil, sys, torch
from transformers import LlamaConfig, LlamaForCausalLM
out = sys.argv[1]
cfg = LlamaConfig(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                  num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072,
                  rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=128000,
                  eos_token_id=[128001, 128008, 128009],
                  rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                                   "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                   "original_max_position_embeddings": 8192})
torch.manual_seed(0)
torch.set_default_dtype(torch.bfloat16)
LlamaForCausalLM(cfg).save_pretrained(out, safe_serialization=True)
shutil.copy(os.path.join("tests", "fixtures", "hf_tok", "llama3.json"), os.path.join(out, "tokenizer.json"))
open(os.path.join(out, "expected_ok"), "w").write("made by bench/serve_ttft.sh\n")
PY
fi
du -sh "$DIR" | sed 's/^/model directory: /'
PROMPT=$(python3 -c 'print(" ".join(["the quick brown fox jumps over the lazy dog"] * 7))')
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
drop() { sync; [ -w /proc/sys/vm/drop_caches ] && echo 3 > /proc/sys/vm/drop_caches && echo cold || echo warm; }
lf_round() {
  local cache t0 url port t1 t2 hwm
  cache=$(drop)
  t0=$(date +%s.%N)
  "$LF" serve --model "$DIR" --port 0 --max-batch 1 --max-context 2048 --threads "$(nproc)" > "$tmp/ttft.log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 6000); do
    port=$(sed -n 's|.*http://127.0.0.1:\([0-9]*\)/v1.*|\1|p' "$tmp/ttft.log")
    [ -n "$port" ] && break
    kill -0 $pid 2> /dev/null || { cat "$tmp/ttft.log"; exit 1; }
    sleep 0.05
  done
  t1=$(date +%s.%N)
  curl -sf "http://127.0.0.1:$port/v1/completions" -d "{\"prompt\": \"$PROMPT\", \"max_tokens\": 1, \"temperature\": 0}" > /dev/null
  t2=$(date +%s.%N)
  hwm=$(sed -n 's/^VmHWM:\s*\([0-9]*\) kB/\1/p' /proc/$pid/status)
  kill -TERM $pid && wait $pid
  echo "{\"impl\": \"llmforge\", \"cache\": \"$cache\", \"start_s\": $(echo "$t1 - $t0" | bc), \"first_answer_s\": $(echo "$t2 - $t1" | bc), \"ttft_s\": $(echo "$t2 - $t0" | bc), \"peak_rss_gb\": $(echo "scale=2; $hwm / 1048576" | bc)}"
}
torch_round() {
  local cache
  cache=$(drop)
  "$LF_BENCH_PYTHON" - "$DIR" "$PROMPT" "$cache" <<'PY'
import time; t0 = time.time()
import json, resource, sys, torch
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast
torch.set_num_threads(__import__("os").cpu_count())
d, prompt, cache = sys.argv[1], sys.argv[2], sys.argv[3]
tok = PreTrainedTokenizerFast(tokenizer_file=d + "/tokenizer.json")
m = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
t1 = time.time()
with torch.no_grad():
    m.generate(torch.tensor([tok.encode(prompt)]), max_new_tokens=1, do_sample=False)
t2 = time.time()
print(json.dumps({"impl": "transformers", "cache": cache, "start_s": t1 - t0, "first_answer_s": t2 - t1,
                  "ttft_s": t2 - t0, "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1048576, 2)}))
PY
}
for r in $(seq 1 "$ROUNDS"); do
  lf_round | tee -a "$tmp/all.jsonl"
  torch_round | tee -a "$tmp/all.jsonl"
done
python3 - "$tmp/all.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = {}
for impl in ("llmforge", "transformers"):
    r = [x for x in rows if x["impl"] == impl]
    med[impl] = {k: statistics.median(x[k] for x in r) for k in ("start_s", "first_answer_s", "ttft_s", "peak_rss_gb")}
    print(f"{impl:12s} median of {len(r)}: ttft {med[impl]['ttft_s']:.2f} s (start {med[impl]['start_s']:.2f} s, "
          f"first answer {med[impl]['first_answer_s']:.2f} s), peak RSS {med[impl]['peak_rss_gb']:.2f} GB")
print(f"ttft ratio transformers / llmforge: {med['transformers']['ttft_s'] / med['llmforge']['ttft_s']:.2f}")
PY
