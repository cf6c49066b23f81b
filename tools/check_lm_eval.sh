#!/usr/bin/env bash
# lm-evaluation-harness's `local-completions` against `llmforge serve`, compared per item with
# `llmforge eval` on the same checkpoint (issue 32, item 5):
#  - a tiny GPT-2-vocabulary model is trained here on tinyshakespeare (prepare --tokenizer gpt2:DIR);
#  - lm_eval runs two local tasks (tests/fixtures/lm_eval: a multiple-choice task, mc.jsonl, and
#    loglikelihood_rolling over the documents of docs.jsonl) with --log_samples, through
#    `llmforge serve` at /v1/completions, batch_size 32 (one request per 32 (context,
#    continuation) pairs, within serve's default --max-prompts of 64);
#  - `llmforge eval` scores the same items: mc.jsonl as its multiple_choice kind (--samples: the
#    log-likelihood of every choice) and each document as a perplexity task (its nll x tokens is
#    the rolling log-likelihood: both prefix the end of text and score every token);
#  - every log-likelihood must agree within 1e-5 per scored token on the log-probability scale,
#    1e-5 x max(tokens, |LL|) (float32 logits from two forwards of different shapes, the server's
#    batched prefill against eval's padded batches: serve.test_engine bounds a prompt row's
#    log-probability by 2e-5 of the row's largest logit; a choice's continuation is at most 8
#    tokens here), and the accuracy too.
# The tokenizer lm_eval needs (it encodes locally to find each continuation's length) is GPT-2's
# as Hugging Face loads it: encoder.json and vocab.bpe copied as vocab.json and merges.txt, with a
# tokenizer_config.json naming GPT2Tokenizer; the requests carry token ids (tokenized_requests,
# lm_eval's default), which `llmforge serve` takes as prompts. max_length is block_size - 1: lm_eval
# asks for max_tokens 1 beside each prompt, and prompt + 1 must fit the context.
#
#   bash tools/check_lm_eval.sh LLMFORGE SHARED_DIR [WORKDIR]
# lm_eval comes from PyPI into $LF_LMEVAL_VENV (default ~/.cache/llmforge/lmeval-venv): lm_eval[api]
# 0.4.13 and transformers (its tokenizer; no torch needed). A WORKDIR that already holds the
# trained run/ is reused (the model is trained once). Prints the figures; exit 0 when all agree.
set -u
LF=${1:?usage: check_lm_eval.sh LLMFORGE SHARED_DIR [WORKDIR]}
SHARED=${2:?shared dir (data/tinyshakespeare.txt, data/gpt2/)}
case "$LF" in /*) ;; *) LF="$PWD/$LF" ;; esac
case "$SHARED" in /*) ;; *) SHARED="$PWD/$SHARED" ;; esac
SRC=$(cd "$(dirname "$0")/.." && pwd)
FIX="$SRC/tests/fixtures/lm_eval"
WORK=${3:-$(mktemp -d /tmp/lf_lmeval.XXXXXX)}
mkdir -p "$WORK" && cd "$WORK" || exit 1
die() { echo "check_lm_eval: $*" >&2; exit 1; }
VENV=${LF_LMEVAL_VENV:-$HOME/.cache/llmforge/lmeval-venv}
if ! "$VENV/bin/python" -c "import lm_eval, transformers, tenacity" 2>/dev/null; then
    { python3 -m venv "$VENV" && "$VENV/bin/pip" install -q "lm_eval[api]==0.4.13" transformers; } >venv.log 2>&1 ||
        die "could not install lm_eval into $VENV: $(tail -3 venv.log)"
fi
PY="$VENV/bin/python"
echo "lm_eval $("$PY" -c 'import lm_eval; print(lm_eval.__version__)'), transformers $("$PY" -c 'import transformers; print(transformers.__version__)'); work dir $WORK"

# ---- a tiny GPT-2-vocabulary model
BLOCK=128
# each speech a document (JSON Lines records end with the end of text), so the model learns to end
# one with <|endoftext|>: items whose greedy next token is it exercise the end-of-text record
head -c 300000 "$SHARED/data/tinyshakespeare.txt" | python3 -c '
import json, sys
for speech in sys.stdin.read().split("\n\n"):
    if speech.strip(): print(json.dumps({"text": speech.strip()}))' >corpus.jsonl || die "no $SHARED/data/tinyshakespeare.txt"
[ -d run/ckpt ] || "$LF" prepare --input corpus.jsonl --tokenizer "gpt2:$SHARED/data/gpt2" --out data >prepare.log 2>&1 ||
    die "prepare: $(tail -3 prepare.log)"
[ -d run/ckpt ] || "$LF" train --data.dataset=data --model.n_layer=2 --model.n_head=4 --model.n_embd=64 --model.block_size=$BLOCK \
    --train_micro_batch_size_per_gpu=8 --train_iters=150 --optimizer.params.lr=3e-3 --eval.interval=0 \
    --eval.iters=2 --checkpoint.interval=0 --out_dir=run --threads=2 >train.log 2>&1 || die "train: $(tail -3 train.log)"
grep -m1 "llmforge train:" train.log
rm -rf lmeval_out

# ---- the tokenizer lm_eval loads: GPT-2's files under Hugging Face's names
mkdir -p tok
cp "$SHARED/data/gpt2/encoder.json" tok/vocab.json && cp "$SHARED/data/gpt2/vocab.bpe" tok/merges.txt
cat >tok/tokenizer_config.json <<EOF
{"tokenizer_class": "GPT2Tokenizer", "model_max_length": $BLOCK, "bos_token": "<|endoftext|>",
 "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>", "add_prefix_space": false}
EOF

# ---- lm_eval's tasks over the fixtures
mkdir -p tasks
cat >tasks/lf_mc.yaml <<EOF
task: lf_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: $FIX/mc.jsonl
test_split: test
output_type: multiple_choice
doc_to_text: "{{context}}"
doc_to_choice: "{{choices}}"
doc_to_target: "{{gold}}"
target_delimiter: " "
metric_list:
  - metric: acc
  - metric: acc_norm
EOF
cat >tasks/lf_rolling.yaml <<EOF
task: lf_rolling
dataset_path: json
dataset_kwargs:
  data_files:
    test: $FIX/docs.jsonl
test_split: test
output_type: loglikelihood_rolling
doc_to_text: ""
doc_to_target: "{{text}}"
metric_list:
  - metric: word_perplexity
  - metric: byte_perplexity
  - metric: bits_per_byte
EOF

# ---- llmforge eval on the same items
{ echo '{"task": "multiple_choice", "name": "mc", "target_delimiter": " "}'; cat "$FIX/mc.jsonl"; } >mc.jsonl
n_docs=$(grep -c . "$FIX/docs.jsonl")
args=(--task mc.jsonl)
for i in $(seq 1 "$n_docs"); do
    { echo "{\"task\": \"perplexity\", \"name\": \"doc$i\"}"; sed -n "${i}p" "$FIX/docs.jsonl"; } >"doc$i.jsonl"
    args+=(--task "doc$i.jsonl")
done
"$LF" eval --ckpt run "${args[@]}" --samples --json --threads 2 >eval.json 2>eval.log || die "eval: $(tail -3 eval.log)"

# ---- llmforge serve, lm_eval through it
"$LF" serve --ckpt run --port 0 --max-batch 8 --max-queue 64 --threads 2 >serve.log 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null' EXIT
PORT=
for _ in $(seq 1 100); do
    PORT=$(sed -n 's|.*http://127.0.0.1:\([0-9]*\)/v1.*|\1|p' serve.log)
    [ -n "$PORT" ] && break
    kill -0 $SERVER 2>/dev/null || die "serve exited: $(cat serve.log)"
    sleep 0.1
done
[ -n "$PORT" ] || die "serve did not print its URL: $(cat serve.log)"
# how many of the scored sequences end where the model's greedy next token is the end of text
# (lm_eval's request: max_tokens 1, echo, logprobs 1): each needs that token's record
python3 - "$PORT" "$FIX" >eos_items.log 2>&1 <<'PY' || die "probe: $(cat eos_items.log)"
import json, sys, urllib.request
port, fix = sys.argv[1], sys.argv[2]
texts = [json.loads(l)["context"] + " " + c for l in open(fix + "/mc.jsonl") for c in json.loads(l)["choices"]]
texts += [json.loads(l)["text"] for l in open(fix + "/docs.jsonl")]
body = {"prompt": texts, "max_tokens": 1, "echo": True, "logprobs": 1, "temperature": 0}
r = json.load(urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions",
                                                            json.dumps(body).encode()), timeout=120))
stops = sum(c["finish_reason"] == "stop" for c in r["choices"])
print(f"{stops} of {len(texts)} sequences: the greedy next token is <|endoftext|> (finish_reason stop)")
PY
cat eos_items.log
t0=$(date +%s)
"$PY" -m lm_eval --model local-completions --tasks lf_mc,lf_rolling --include_path tasks \
    --model_args "model=run,base_url=http://127.0.0.1:$PORT/v1/completions,tokenizer_backend=huggingface,tokenizer=$WORK/tok,max_length=$((BLOCK - 1)),num_concurrent=1,max_retries=1" \
    --batch_size 32 --log_samples --output_path lmeval_out >lm_eval.log 2>&1 || die "lm_eval: $(tail -20 lm_eval.log)"
t1=$(date +%s)
kill -TERM $SERVER
wait $SERVER 2>/dev/null
trap - EXIT
echo "lm_eval against llmforge serve: $((t1 - t0)) s"

# ---- per item: lm_eval's log-likelihoods against llmforge eval's
"$PY" - "$FIX" lmeval_out eval.json <<'PY'
import glob, json, math, sys
fix, out, ev = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3]))
def samples(task):
    files = glob.glob(f"{out}/**/samples_{task}_*.jsonl", recursive=True)
    assert len(files) == 1, (task, files)
    return sorted((json.loads(l) for l in open(files[0])), key=lambda s: s["doc_id"])
def ll_of(resp):  # lm_eval logs (ll, is_greedy) or ll as a string or a number
    while isinstance(resp, list): resp = resp[0]
    return float(resp)
tol = lambda a, n=8: 1e-5 * max(n, abs(a))
worst, n, bad = 0.0, 0, []
mc = samples("lf_mc")
ours = ev["tasks"]["mc"]["samples"]
assert len(mc) == len(ours), (len(mc), len(ours))
for s, o in zip(mc, ours):
    theirs = [ll_of(r) for r in s["resps"]]
    assert len(theirs) == len(o["lls"]), (s["doc_id"], theirs, o)
    for c, (a, b) in enumerate(zip(theirs, o["lls"])):
        n += 1
        worst = max(worst, abs(a - b) / tol(b))
        if abs(a - b) > tol(b): bad.append(f"mc item {s['doc_id']} choice {c}: lm_eval {a:.6f}, llmforge eval {b:.6f}")
acc_theirs = sum(s["acc"] for s in mc) / len(mc)
acc_ours = ev["tasks"]["mc"]["metrics"]["acc"]
print(f"multiple choice: {len(mc)} items, {n} choices; acc lm_eval {acc_theirs:.4f}, llmforge eval {acc_ours:.4f}")
if abs(acc_theirs - acc_ours) > 1e-9: bad.append(f"acc: lm_eval {acc_theirs}, llmforge eval {acc_ours}")
roll = samples("lf_rolling")
tot_t = tot_o = 0.0
for s in roll:
    a = ll_of(s["resps"])
    t = ev["tasks"][f"doc{s['doc_id'] + 1}"]
    b = -t["metrics"]["nll"] * t["tokens"]
    tot_t += a; tot_o += b; n += 1
    worst = max(worst, abs(a - b) / tol(b, t["tokens"]))
    print(f"  rolling doc {s['doc_id']}: {t['tokens']:3d} tokens, lm_eval {a:11.5f}, llmforge eval {b:11.5f}, diff {a - b:+.2e}")
    if abs(a - b) > tol(b, t["tokens"]): bad.append(f"rolling doc {s['doc_id']}: lm_eval {a:.6f}, llmforge eval {b:.6f}")
print(f"loglikelihood_rolling: {len(roll)} documents, total LL lm_eval {tot_t:.5f}, llmforge eval {tot_o:.5f}")
print(f"{n} log-likelihoods compared; worst |diff| / (1e-5 max(tokens, |LL|)) = {worst:.3g}")
if bad:
    print("DISAGREE:\n  " + "\n  ".join(bad))
    sys.exit(1)
print("lm_eval local-completions through llmforge serve equals llmforge eval")
PY
