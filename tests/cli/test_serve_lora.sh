#!/usr/bin/env bash
# Several LoRA adapters served on one base (serve --lora NAME=DIR, vLLM's --lora-modules): the tiny
# Llama of tests/fixtures/hf_direct (a byte-level BPE tokenizer) gets two adapters trained here for a
# few steps on a character corpus (q_proj/v_proj r 4; all-linear r 2); then
#   - /v1/models lists the base and both adapters (parent: the base);
#   - concurrent greedy requests to adapter a, adapter b and the base, several of each at once (so
#     the engine batches rows of different adapters in one forward), give each the text of
#     `llmforge sample` on the merged model (`llmforge merge`) or on the base;
#   - an unknown model is 404 model_not_found naming the served names;
#   - an adapter trained on another base, a name given twice, an adapter of a module the base lacks
#     and one whose r disagrees with its tensors are refused at start by name.
#   bash test_serve_lora.sh LLMFORGE SOURCE_DIR SHARED_DIR
set -u
LF=${1:?usage: test_serve_lora.sh LLMFORGE SOURCE_DIR SHARED_DIR}
SRC=${2:?source dir}
case "$LF" in /*) ;; *) LF="$PWD/$LF" ;; esac
case "$SRC" in /*) ;; *) SRC="$PWD/$SRC" ;; esac
. "$(dirname "$0")/cli_lib.sh"
command -v curl >/dev/null || { echo "SKIPPED: needs curl (scripts/setup.sh --test)"; exit 0; }
cli_tmpdir serve_lora
cp -r "$SRC/tests/fixtures/hf_direct" base
for i in $(seq 1 300); do echo "the quick brown fox jumps over the lazy dog; pack my box with five dozen jugs"; done >c.txt
"$LF" prepare --char c.txt --out data >prepare.log 2>&1 || fail "prepare: $(cat prepare.log)"
C=(--data.dataset=data --model.block_size=16 --train_micro_batch_size_per_gpu=4 --eval.interval=0 --checkpoint.interval=0
   --threads=2 --registry.enabled=false --optimizer.params.lr=3e-2 --scheduler.warmup_iters=0 --train_iters=8)
"$LF" train "${C[@]}" --out_dir=la --init-from base '--lora.target_modules=["q_proj","v_proj"]' --lora.r=4 \
    --lora.alpha=8 >la.log 2>&1 || fail "train a: $(cat la.log)"
"$LF" train "${C[@]}" --out_dir=lb --init-from base --lora.target_modules=all-linear --lora.r=2 --lora.alpha=4 \
    --seed=7 >lb.log 2>&1 || fail "train b: $(cat lb.log)"
A=la/ckpt/step_00000008
B=lb/ckpt/step_00000008
"$LF" merge --adapter $A --out ma >merge.log 2>&1 || fail "merge a: $(cat merge.log)"
"$LF" merge --adapter $B --out mb >merge.log 2>&1 || fail "merge b: $(cat merge.log)"
ok
PROMPTS=("the quick" "pack my box" "over the")
N=12
# the references: sample on the merged models and on the base (greedy, batch-invariant products)
for m in base ma mb; do
    for p in 0 1 2; do
        "$LF" sample --ckpt $m --prompt "${PROMPTS[$p]}" --max-new-tokens $N --temperature 0 --threads 2 \
            --batch-invariant >ref_${m}_$p.txt 2>sample.err || fail "sample $m: $(cat sample.err)"
    done
done
ok

start_server() { # ARGS...: serve base with these options; sets SERVER and URL
    : >serve.log
    "$LF" serve --model base --port 0 --max-batch 9 --threads 2 --drain-s 5 "$@" >serve.log 2>&1 &
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
start_server --lora a=$A --lora-modules b=$B
trap 'kill $SERVER 2>/dev/null; rm -rf "$tmp"' EXIT
ok
curl -s "$URL/v1/models" >models.json || fail "GET /v1/models"
python3 - models.json <<'PY' || fail "/v1/models: $(cat models.json)"
import json, sys
d = json.load(open(sys.argv[1]))["data"]
ids = [m["id"] for m in d]
assert ids == ["base", "a", "b"], ids
assert d[0]["parent"] is None and d[1]["parent"] == "base" and d[2]["parent"] == "base", d
PY
ok
# 9 concurrent requests: 3 prompts x (a, b, base)
python3 - "$URL" $N "${PROMPTS[@]}" <<'PY' || fail "concurrent requests to the adapters and the base"
import json, sys, threading, urllib.request
url, n, prompts = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
ref = {"base": "base", "a": "ma", "b": "mb"}
out, errs = {}, []
def one(model, p):
    body = json.dumps({"model": model, "prompt": prompts[p], "max_tokens": n, "temperature": 0}).encode()
    req = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
    try:
        r = json.load(urllib.request.urlopen(req, timeout=60))
        assert r["model"] == model, r
        out[(model, p)] = r["choices"][0]["text"]
    except Exception as e:
        errs.append("%s %d: %s" % (model, p, e))
ts = [threading.Thread(target=one, args=(m, p)) for p in range(len(prompts)) for m in ("a", "b", "base")]
[t.start() for t in ts]
[t.join() for t in ts]
if errs: sys.exit("; ".join(errs))
bad = 0
for (model, p), text in sorted(out.items()):
    want = open("ref_%s_%d.txt" % (ref[model], p)).read()
    assert want.startswith(prompts[p]), want
    want = want[len(prompts[p]):].rstrip("\n")
    print("%-4s %r -> %r (sample on %s: %r)" % (model, prompts[p], text, ref[model], want))
    bad += text != want
# each adapter changes some text (else the test could not tell adapters apart)
moved = [m for m in ("a", "b") if any(out[(m, p)] != out[("base", p)] for p in range(len(prompts)))]
print("adapters whose text differs from the base's:", moved)
sys.exit(1 if bad or len(moved) < 2 else 0)
PY
ok
code=$(curl -s -o nf.json -w '%{http_code}' "$URL/v1/completions" -d '{"model": "c", "prompt": "the", "max_tokens": 2}')
[ "$code" = 404 ] || fail "unknown model: $code $(cat nf.json)"
grep -q '"code":"model_not_found"' nf.json && grep -q "'base', 'a', 'b'" nf.json || fail "404 body: $(cat nf.json)"
ok
kill $SERVER
wait $SERVER 2>/dev/null
# refused at start: a name given twice; an adapter trained on another base (its base_model_name_or_path)
"$LF" serve --model base --port 0 --lora a=$A --lora a=$B >dup.log 2>&1 && fail "a name given twice was accepted"
grep -q "the name 'a' is given twice" dup.log || fail "duplicate name: $(cat dup.log)"
cp -r base other
"$LF" serve --model other --port 0 --lora a=$A >other.log 2>&1 && fail "an adapter of another base was accepted"
grep -q "was trained on base '.*/base'.*not on the served base '.*/other'" other.log || fail "other base: $(cat other.log)"
ok
# adapters the base cannot hold: a module it lacks (lm_head is not adapted), an r its tensors disagree with
cp -r $A nomod && cp -r $A badr
python3 - <<'PY' || fail "editing adapter_config.json"
import json
for d, k, v in (("nomod", "target_modules", ["lm_head"]), ("badr", "r", 8)):
    c = json.load(open(d + "/adapter_config.json")); c[k] = v; json.dump(c, open(d + "/adapter_config.json", "w"))
PY
"$LF" serve --model base --port 0 --lora x=nomod >nomod.log 2>&1 && fail "an adapter of a module the base lacks was accepted"
grep -q "adapter 'x' ('nomod').*\"lm_head\" matches no module" nomod.log || fail "module: $(cat nomod.log)"
"$LF" serve --model base --port 0 --lora x=badr >badr.log 2>&1 && fail "an adapter with the wrong r was accepted"
grep -q "adapter 'x' ('badr').*lora_A.weight has shape \[4, 32\], the model's adapter \[8, 32\]" badr.log ||
    fail "r: $(cat badr.log)"
ok
echo "$passed passed"
