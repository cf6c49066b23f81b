#!/usr/bin/env bash
# `llmforge prepare` end to end on a >= 100 MB JSON Lines file: throughput
# (MB/s of input, median of REPEATS runs) and peak memory (GNU time's
# "Maximum resident set size", the largest of the runs) for
#   --tokenizer gpt2:../shared/data/gpt2   with --threads 1 and 2
#   --tokenizer char                      with --threads 1 and 2 (two passes over the input)
# and a check that --threads 1 and 2 wrote the same files.
#   bench/prepare.sh [MB] [REPEATS]
# MB (default 100): size of the input, made here with awk from
# ../shared/data/tinyshakespeare.txt: its paragraphs (blank-line separated)
# as {"text": ...} records, in a different deterministic order in each
# round, each round's records tagged with the round number so that no two
# are equal; no Python needed. REPEATS (default 3).
# Timing is wall clock of the whole command (reading, tokenizing, writing
# and fsyncing the shards, dataset.json); MB/s is 10^6 input bytes / s. The
# CPU time (user + system, median) is printed too: on a busy machine it says
# what the work costs when the wall clock cannot.
# LLMFORGE=path picks the binary (default: `make build`, build/llmforge).
# Needs GNU time at /usr/bin/time (scripts/setup.sh --test installs it).
# Run on an idle machine: the script prints the load average first.
set -euo pipefail
cd "$(dirname "$0")/.."
MB=${1:-100}
REPEATS=${2:-3}
GPT2=../shared/data/gpt2
SRC=../shared/data/tinyshakespeare.txt
if [ -z "${LLMFORGE:-}" ]; then
  make -s build >/dev/null
  LLMFORGE=build/llmforge
fi
[ -x /usr/bin/time ] || { echo "bench/prepare.sh: needs GNU time (/usr/bin/time); run scripts/setup.sh --test" >&2; exit 1; }
echo "== $(nproc) CPUs, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# ---------------------------------------------------------------- input
awk -v want=$((MB * 1000000)) '
  BEGIN { RS = "" }
  { gsub(/\\/, "\\\\"); gsub(/"/, "\\\""); gsub(/\n/, "\\n"); p[n++] = $0 }
  END {
    bytes = 0
    for (k = 0; bytes < want; k++)
      for (j = 0; j < n && bytes < want; j++) {
        i = (j * 7919 + k * 104729) % n   # 7919 is prime to the paragraph count: a permutation
        line = sprintf("{\"text\": \"%s\\n(round %d)\"}", p[i], k)
        print line
        bytes += length(line) + 1
      }
  }' "$SRC" >"$TMP/in.jsonl"
IN_BYTES=$(stat -c %s "$TMP/in.jsonl")
echo "== input: $(wc -l <"$TMP/in.jsonl") records, $IN_BYTES bytes ($TMP/in.jsonl)"

# ---------------------------------------------------------------- runs
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

run_config() { # run_config NAME TOKENIZER THREADS
  local name=$1 tok=$2 t=$3 secs=() cpus=() rss=0 r out
  for r in $(seq 1 "$REPEATS"); do
    out="$TMP/out_${name}_$t"
    rm -rf "$out"
    local t0 t1 m
    t0=$(date +%s.%N)
    /usr/bin/time -v -o "$TMP/time.txt" "$LLMFORGE" prepare --input "$TMP/in.jsonl" --format jsonl --tokenizer "$tok" \
      --threads "$t" --out "$out" >"$TMP/prep.log" 2>&1 || { cat "$TMP/prep.log" "$TMP/time.txt" >&2; exit 1; }
    t1=$(date +%s.%N)
    secs+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')")
    cpus+=("$(awk -F': ' '/User time|System time/ { c += $2 } END { printf "%.2f", c }' "$TMP/time.txt")")
    m=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$TMP/time.txt")
    [ "$m" -gt "$rss" ] && rss=$m
  done
  local med cpu
  med=$(printf '%s\n' "${secs[@]}" | median)
  cpu=$(printf '%s\n' "${cpus[@]}" | median)
  printf '%-6s threads %d: %7.1f MB/s  (median %.2f s of %s; cpu %.2f s)  peak RSS %6.1f MB  %s\n' "$name" "$t" \
    "$(awk -v b="$IN_BYTES" -v s="$med" 'BEGIN { print b / s / 1e6 }')" "$med" "$(printf '%.2f ' "${secs[@]}")" "$cpu" \
    "$(awk -v k="$rss" 'BEGIN { print k / 1024 }')" \
    "$(sed -n 's/^  train *\([0-9]* records *[0-9]* tokens\).*/train \1/p' "$TMP/prep.log")"
}

same_output() { # same_output DIR1 DIR2
  local f
  for f in "$1"/*; do cmp -s "$f" "$2/$(basename "$f")" || { echo "!! $(basename "$f") differs between $1 and $2" >&2; exit 1; }; done
  echo "       threads 1 and 2 wrote identical files ($(ls "$1" | wc -l) files)"
}

if [ -r "$GPT2/encoder.json" ]; then
  for t in 1 2; do run_config gpt2 "gpt2:$GPT2" "$t"; done
  same_output "$TMP/out_gpt2_1" "$TMP/out_gpt2_2"
else
  echo "== no GPT-2 files in $GPT2: gpt2 skipped"
fi
for t in 1 2; do run_config char char "$t"; done
same_output "$TMP/out_char_1" "$TMP/out_char_2"
