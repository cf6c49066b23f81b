#!/usr/bin/env bash
# Single-stream greedy decoding, llmforge beside transformers on PyTorch 2.x,
# on the same machine in the same run, alternating ROUNDS times: 256 new
# tokens after a 128-token prompt, for GPT-2 124M and the SmolLM-135M shape
# (Llama). Prints one JSON line per run and a summary with medians, ratios
# and each implementation's fraction of the memory-bandwidth bound.
#   bench/decode.sh [ROUNDS]
# ROUNDS defaults to 3. Environment: BUILD (default build, the CMake build
# directory `make build` fills); NEW_TOKENS (default 256) only to check the
# script quickly; FRESH=1 makes the checkpoints again.
#
# Target: llmforge with its KV cache >= 2x transformers' decode tokens/s.
#
# Checkpoints: bench/ckpt.sh (random weights, made once under
# out/bench/decode/<model>/ and reused; how, there). The step directory
# holds model.safetensors + config.json with Hugging Face names, which
# transformers loads as GPT2LMHeadModel / LlamaForCausalLM.
#
# Each round, for each model: the copy bandwidth (bench/membw.c, compiled
# here: memcpy of 512 MB, 2 threads, best of 5, read + write counted) and
# the read bandwidth (the same threads summing the 512 MB: the ceiling of a
# decoder that reads every weight once, printed beside the copy bound), then
#   llmforge sample --ckpt DIR --ids <prompt> --max-new-tokens 256
#     --temperature 0 --json --threads 2            (KV cache)
#   ... the same with --no-cache                   (a full forward per token)
#   bench/torch_decode.py: AutoModelForCausalLM.from_pretrained(DIR) in
#     float32 (attention "sdpa", transformers' default), generate(...,
#     max_new_tokens=256, min_new_tokens=256, do_sample=False,
#     use_cache=True), torch.set_num_threads(2), eager mode; end of text is
#     switched off there as llmforge never stops early (see that file).
# decode tokens/s excludes the first new token on both sides (it comes with
# the prompt's forward, reported apart as first_token_ms).
# Agreement: how many of the greedy tokens of llmforge (cache) and
# transformers are equal, and the largest difference of the last prompt
# position's logits; random weights give near-ties, so reported, never fatal.
# Bound: decoding reads every weight once per token, so tokens/s <= copy
# bandwidth / weight bytes per token, weight bytes = 4 x parameters, the
# lookup-only tables excluded (the token row and, GPT-2, the position row
# read per token are a few KB) but the lm_head matrix included (the tied
# embedding counts once, as the head). K/V cache reads come on top and are
# printed apart. Neither side gets hand tuning: the script sets no OMP_*/
# MKL_*/OPENBLAS_* variable and prints those the caller set.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
BUILD=${BUILD:-build}
NEW=${NEW_TOKENS:-256}
PROMPT_TOKENS=128
OUT=out/bench/decode
. bench/venv.sh
make -s build BUILD="$BUILD" >/dev/null
mkdir -p "$OUT"
bench_env_report
cc -O3 -march=native -pthread bench/membw.c -o "$OUT/membw"

# MODELS, VOCAB, KEYS and make_ckpt (the checkpoints, under $OUT/<model>/)
CKPT_OUT=$OUT
. bench/ckpt.sh
for m in "${MODELS[@]}"; do
  make_ckpt "$m"
  # the prompt: PROMPT_TOKENS random ids of the vocabulary, the same every run
  "$LF_BENCH_PYTHON" -c "import random, sys; r = random.Random(42); \
print(','.join(str(r.randrange(int(sys.argv[1]))) for _ in range(int(sys.argv[2]))))" \
    "${VOCAB[$m]}" "$PROMPT_TOKENS" >"$OUT/$m/prompt.txt"
done

# line FILE MODEL IMPL ROUND: the per-run JSON line (timings, no token lists)
line() {
  "$LF_BENCH_PYTHON" - "$@" <<'PY'
import json, sys
path, model, impl, rnd = sys.argv[1:]
d = json.load(open(path))
keep = {k: d[k] for k in ("first_token_ms", "decode_tokens_per_sec", "total_ms") if k in d}
if d.get("agreement"):
    a = d["agreement"]
    keep["agree"] = "%d/%d" % (a["agree_count"], a["tokens_compared"])
print(json.dumps({"model": model, "impl": impl, "round": int(rnd), **keep}))
PY
}

for r in $(seq "$ROUNDS"); do
  "$OUT/membw" >"$OUT/membw_$r.json"
  echo "membw round $r: $(cat "$OUT/membw_$r.json")"
  for m in "${MODELS[@]}"; do
    step=$(cat "$OUT/$m/stepdir")
    ids=$(cat "$OUT/$m/prompt.txt")
    "$BUILD"/llmforge sample --ckpt "$step" --ids "$ids" --max-new-tokens "$NEW" --temperature 0 --json \
      --threads 2 >"$OUT/$m/llmforge_$r.json"
    line "$OUT/$m/llmforge_$r.json" "$m" llmforge "$r"
    "$BUILD"/llmforge sample --ckpt "$step" --ids "$ids" --max-new-tokens "$NEW" --temperature 0 --json \
      --threads 2 --no-cache >"$OUT/$m/llmforge_nocache_$r.json"
    line "$OUT/$m/llmforge_nocache_$r.json" "$m" llmforge-no-cache "$r"
    "$LF_BENCH_PYTHON" bench/torch_decode.py --ckpt "$step" --ids "$ids" --max-new-tokens "$NEW" --threads 2 \
      --compare "$OUT/$m/llmforge_$r.json" >"$OUT/$m/transformers_$r.json" 2>"$OUT/$m/transformers_$r.err" ||
      { cat "$OUT/$m/transformers_$r.err" >&2; exit 1; }
    line "$OUT/$m/transformers_$r.json" "$m" transformers "$r"
  done
done

"$LF_BENCH_PYTHON" - "$OUT" "$ROUNDS" "$NEW" "$PROMPT_TOKENS" "${MODELS[@]}" <<'PY'
import json, os, statistics, struct, sys
out, rounds, new, prompt_tokens, models = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:]
R = range(1, rounds + 1)
med = statistics.median

def load(path):
    with open(path) as f:
        return json.load(f)

def weights(step):
    """(parameters, parameters read per token, K/V floats per cached position) from the checkpoint."""
    with open(os.path.join(step, "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    sizes = {}
    for name, t in header.items():
        if name != "__metadata__":
            k = 1
            for d in t["shape"]:
                k *= d
            sizes[name] = k
    cfg = load(os.path.join(step, "config.json"))
    total = sum(sizes.values())
    lookup = 0
    for name, k in sizes.items():
        if name.endswith("wpe.weight"):  # GPT-2 positions: one row per token
            lookup += k
        elif name.endswith(("wte.weight", "embed_tokens.weight")) and any(s.endswith("lm_head.weight") for s in sizes):
            lookup += k  # an untied input embedding: one row per token (the head is lm_head.weight)
    if cfg.get("model_type") == "llama":
        kv = 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * cfg["head_dim"]
    else:
        kv = 2 * cfg["n_layer"] * cfg["n_embd"]
    return total, total - lookup, kv

bw = [load(os.path.join(out, "membw_%d.json" % r)) for r in R]
copy_gbps = med(b["copy_gbps"] for b in bw)
read_gbps = med(b["read_gbps"] for b in bw) if all("read_gbps" in b for b in bw) else None
print("\nmedians of %d round%s; %d new tokens after a %d-token prompt, greedy, 2 threads, float32" % (
    rounds, "" if rounds == 1 else "s", new, prompt_tokens))
print("copy bandwidth (membw, 2 threads, read + write): %s GB/s per round, median %.2f" % (
    ", ".join("%.2f" % b["copy_gbps"] for b in bw), copy_gbps))
if read_gbps:
    print("read bandwidth (membw, 2 threads, a sum of the bytes): %s GB/s per round, median %.2f" % (
        ", ".join("%.2f" % b["read_gbps"] for b in bw), read_gbps))
impls = (("llmforge", "llmforge"), ("llmforge-no-cache", "llmforge_nocache"), ("transformers", "transformers"))
verdicts = []
for m in models:
    step = open(os.path.join(out, m, "stepdir")).read().strip()
    total, read, kv = weights(step)
    bytes_tok = 4 * read
    bound = copy_gbps * 1e9 / bytes_tok
    kv_mid = 4 * kv * (prompt_tokens + new / 2)  # K/V bytes read per token at the middle of the run
    runs = {label: [load(os.path.join(out, m, "%s_%d.json" % (f, r))) for r in R] for label, f in impls}
    print("\n%s: %.2fM parameters, %.1f MB of weights read per token; bound %.1f tokens/s "
          "(K/V cache reads add %.1f MB a token at position %d, not in the bound)" % (
              m, total / 1e6, bytes_tok / 1e6, bound, kv_mid / 1e6, prompt_tokens + new // 2))
    print("  %-18s %14s %16s %12s %10s" % ("", "decode tok/s", "first token ms", "total ms", "of bound"))
    tps = {}
    for label, _ in impls:
        rs = runs[label]
        tps[label] = med(x["decode_tokens_per_sec"] for x in rs)
        print("  %-18s %14.2f %16.1f %12.1f %9.1f%%" % (
            label, tps[label], med(x["first_token_ms"] for x in rs), med(x["total_ms"] for x in rs),
            100 * tps[label] / bound))
    hf = runs["transformers"][0]
    a = hf["agreement"]
    same_rounds = all(x["generated"] == hf["generated"] for x in runs["transformers"]) and all(
        x["generated"] == runs["llmforge"][0]["generated"] for x in runs["llmforge"])
    cache_eq = sum(x == y for x, y in zip(runs["llmforge"][0]["generated"], runs["llmforge-no-cache"][0]["generated"]))
    print("  transformers: %s, attention %s, %d parameters; torch %s, transformers %s" % (
        hf["model_class"], hf["attention"], hf["num_params"], hf["torch_version"], hf["transformers_version"]))
    print("  greedy tokens equal, llmforge vs transformers: %d of %d (equal prefix %d; transformers generated %d "
          "distinct tokens)%s" % (a["agree_count"], a["tokens_compared"], a["agree_prefix"], a["distinct_tokens"],
                                   "" if same_rounds else "; !! the tokens changed between rounds"))
    print("  last prompt position's logits: max |difference| %.3g of max |logit| %.3g; argmax %s; top-2 gap %.3g" % (
        a["last_logits_max_abs_diff"], a["last_logits_max_abs"],
        "equal" if a["last_logits_argmax_equal"] else "DIFFERENT", a["last_logits_top2_gap"]))
    print("  llmforge cache vs --no-cache: %d of %d tokens equal" % (cache_eq, len(runs["llmforge"][0]["generated"])))
    if read_gbps:
        ceiling = read_gbps * 1e9 / bytes_tok
        print("  read ceiling (read bandwidth / weight bytes): %.1f tokens/s = %.2fx transformers; llmforge at %.1f%% "
              "of it" % (ceiling, ceiling / tps["transformers"], 100 * tps["llmforge"] / ceiling))
    ratio = tps["llmforge"] / tps["transformers"]
    print("  decode ratio llmforge/transformers: %.3f  (target >= 2: %s); llmforge cache/no-cache: %.2f" % (
        ratio, "met" if ratio >= 2 else "NOT met", tps["llmforge"] / tps["llmforge-no-cache"]))
    verdicts.append("%s %.2fx" % (m, ratio))
print("\nllmforge (KV cache) / transformers decode tokens/s: %s (target >= 2x)" % ", ".join(verdicts))
PY
