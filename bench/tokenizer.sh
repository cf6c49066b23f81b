#!/usr/bin/env bash
# GPT-2 encoding throughput: llmforge with 1 and 2 threads beside tiktoken
# (1 thread, and its own 2 threads) on the same text in the same run.
#   bench/tokenizer.sh [MB] [REPEATS]
# MB (default 50): size of the text, made from ../shared/data/tinyshakespeare.txt
# repeated with seeded variations (bench/tiktoken_bench.py make-text).
# REPEATS (default 5): timed encodings per configuration; medians are reported.
# llmforge: `llmforge tokenize --tokenizer gpt2:DIR --threads T --bench R`
# (stdin read once, encoding timed; --threads splits the text where cutting
# cannot change the ids). tiktoken: encode_ordinary_batch(num_threads=T) over
# ~256 KB documents cut by the same rule, and encode_ordinary on the whole
# text, from the local encoder.json/vocab.bpe (bench/tiktoken_bench.py).
# The token counts of all configurations must agree. MB/s is 10^6 bytes/s.
# LLMFORGE=path picks the binary (default: `make build`, build/llmforge).
# Needs python3 with tiktoken (PyPI). Run on an idle machine: the script
# prints the load average first.
set -euo pipefail
cd "$(dirname "$0")/.."
MB=${1:-50}
REPEATS=${2:-5}
GPT2=../shared/data/gpt2
SRC=../shared/data/tinyshakespeare.txt
if [ -z "${LLMFORGE:-}" ]; then
  make -s build >/dev/null
  LLMFORGE=build/llmforge
fi
echo "== $(nproc) CPUs, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
python3 bench/tiktoken_bench.py make-text --src "$SRC" --mb "$MB" --out "$TMP/text.txt"

lines=()
for t in 1 2; do
  echo "== llmforge, $t thread(s)"
  l=$("$LLMFORGE" tokenize --tokenizer "gpt2:$GPT2" --threads "$t" --bench "$REPEATS" < "$TMP/text.txt")
  echo "$l"
  lines+=("$l")
done
echo "== tiktoken"
while IFS= read -r l; do
  echo "$l"
  lines+=("$l")
done < <(python3 bench/tiktoken_bench.py run --text "$TMP/text.txt" --gpt2-dir "$GPT2" --repeats "$REPEATS" --threads 1,2)
python3 bench/tiktoken_bench.py summary "${lines[@]}"
