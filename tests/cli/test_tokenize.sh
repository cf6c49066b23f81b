#!/usr/bin/env bash
# CLI: llmforge tokenize / detokenize / tokenizer train|info (drafted for tests/cli/).
#   test_tokenize_cli.sh LLMFORGE SOURCE_DIR SHARED_DIR
set -euo pipefail
L=$1; SRC=$2; SHARED=$3
G="gpt2:$SHARED/data/gpt2"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# ids as tiktoken gives them, round trip, threads
[ "$("$L" tokenize --tokenizer "$G" <<< "Hello world")" = "15496 995 198" ] || fail "Hello world ids"
"$L" tokenize --tokenizer "$G" < "$SHARED/data/tinyshakespeare.txt" > "$T/ids1"
"$L" tokenize --tokenizer "$G" --threads 3 < "$SHARED/data/tinyshakespeare.txt" > "$T/ids3"
cmp -s "$T/ids1" "$T/ids3" || fail "threads change the ids"
"$L" detokenize --tokenizer "$G" < "$T/ids1" | cmp -s - "$SHARED/data/tinyshakespeare.txt" || fail "round trip"
# special tokens
[ "$(printf 'a<|endoftext|>b' | "$L" tokenize --tokenizer "$G" --allow-special)" = "64 50256 65" ] || fail "allow-special"
[ "$(printf 'a<|endoftext|>b' | "$L" tokenize --tokenizer "$G" | wc -w)" -gt 3 ] || fail "special as text"
# JSON Lines both ways
printf '{"text":"hi there"}\n{"text":"a\\nb \\u00e9 \\ud83d\\ude00"}\n' > "$T/in.jsonl"
"$L" tokenize --tokenizer "$G" --jsonl < "$T/in.jsonl" > "$T/ids.jsonl"
[ "$(head -1 "$T/ids.jsonl")" = '{"ids":[5303,612]}' ] || fail "jsonl ids"
"$L" detokenize --tokenizer "$G" --jsonl < "$T/ids.jsonl" | "$L" tokenize --tokenizer "$G" --jsonl | cmp -s - "$T/ids.jsonl" || fail "jsonl round trip"
# invalid UTF-8: an error naming the offset, or bytes
printf 'ab\xffcd' | "$L" tokenize --tokenizer "$G" 2> "$T/err" && fail "invalid UTF-8 accepted"
grep -q "byte offset 2" "$T/err" || fail "offset not named"
[ "$(printf 'ab\xffcd' | "$L" tokenize --tokenizer "$G" --invalid-utf8 bytes | "$L" detokenize --tokenizer "$G" | od -An -tx1 | tr -d ' \n')" = "6162ff6364" ] || fail "bytes policy"
# bad lines are named
printf '{"text":"ok"}\nnot json\n' | "$L" tokenize --tokenizer "$G" --jsonl > /dev/null 2> "$T/err" && fail "bad JSON accepted"
grep -q "line 2" "$T/err" || fail "bad JSON line not named"
printf '{"text":"ok"}\n{"txt":1}\n' | "$L" tokenize --tokenizer "$G" --jsonl > /dev/null 2> "$T/err" && fail "missing field accepted"
grep -q 'line 2: field "text" is missing' "$T/err" || fail "missing field"
printf '1 2\n3 x\n' | "$L" detokenize --tokenizer "$G" > "$T/out" 2> "$T/err" && fail "bad id accepted"
grep -q "line 2" "$T/err" || fail "bad id line"; [ ! -s "$T/out" ] || fail "partial output"
printf '{"ids":[1]}\n{"ids":[50257]}\n' | "$L" detokenize --tokenizer "$G" --jsonl > /dev/null 2> "$T/err" && fail "id out of range accepted"
grep -q "line 2" "$T/err" || fail "out-of-range line"
# train -> bpe:FILE, usable through the same commands
"$L" tokenizer train --input "$SHARED/data/tinyshakespeare.txt" --vocab-size 1024 --out "$T/m.tiktoken" > /dev/null
cmp -s "$T/m.tiktoken" "$SRC/tests/fixtures/tiktoken_bpe_shakespeare.tiktoken" || fail "trained model differs from the fixture"
"$L" tokenizer info --tokenizer "bpe:$T/m.tiktoken" | grep -q '"vocab_size":1024,"endoftext":1023' || fail "info"
"$L" tokenize --tokenizer "bpe:$T/m.tiktoken" < "$SHARED/data/tinyshakespeare.txt" | "$L" detokenize --tokenizer "bpe:$T/m.tiktoken" | cmp -s - "$SHARED/data/tinyshakespeare.txt" || fail "bpe round trip"
"$L" tokenizer train --input /nonexistent --vocab-size 300 --out "$T/x" 2> "$T/err" && fail "missing input accepted"
grep -q "/nonexistent" "$T/err" || fail "missing input not named"
# char: through the same interface
printf '{"type":"char","chars":["\\n"," ","a","b"]}' > "$T/vocab.json"
[ "$(printf 'ab a' | "$L" tokenize --tokenizer "char:$T/vocab.json")" = "2 3 1 2" ] || fail "char"
[ "$(echo "2 3 1 2" | "$L" detokenize --tokenizer "char:$T/vocab.json")" = "ab a" ] || fail "char decode"
echo "ok"
