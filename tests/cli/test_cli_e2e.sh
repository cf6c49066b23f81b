#!/usr/bin/env bash
# End to end through the CLI on a small corpus: prepare --char, train a tiny
# model with evaluation and checkpoint rotation, check the run directory
# (log.jsonl, config.resolved.json, ckpt/latest, model.safetensors,
# trainer_state.json), sample (prompt echo, determinism in the seed), resume
# to a higher train_iters (and compare with an uninterrupted run), bench --json.
#   bash test_cli_e2e.sh LLMFORGE SOURCE_DIR SHARED_DIR
# JSON is checked with python3 when it is installed; without it the same
# facts are checked with grep/awk on the compact one-line records.
set -u

LF=${1:?usage: test_cli_e2e.sh LLMFORGE SOURCE_DIR SHARED_DIR}
SRC=${2:?source dir}
SHARED=${3:?shared dir}
CFG="$SRC/configs/shakespeare_char_cpu.json"
case "$LF" in /*) ;; *) LF="$PWD/$LF" ;; esac
case "$CFG" in /*) ;; *) CFG="$PWD/$CFG" ;; esac
case "$SHARED" in /*) ;; *) SHARED="$PWD/$SHARED" ;; esac

. "$(dirname "$0")/cli_lib.sh"
PY=$(command -v python3 || true)
[ -n "$PY" ] || echo "note: python3 not found; JSON is checked with grep/awk only"

cli_tmpdir e2e

# ------------------------------------------------------------ prepare
corpus="$SHARED/data/tinyshakespeare.txt"
if [ -f "$corpus" ]; then
    head -c 50000 "$corpus" >corpus.txt
else
    # Fallback corpus so the test does not depend on the shared data.
    for i in $(seq 1 700); do
        echo "ROMEO: line $i, what light through yonder window breaks? It is the east."
    done >corpus.txt
fi
"$LF" prepare --char corpus.txt --out data >prepare.log 2>&1 || fail "prepare: $(cat prepare.log)"
ok
for f in dataset.json vocab.json train.bin val.bin; do
    [ -s "data/$f" ] || fail "prepare did not write data/$f"
done
ok
V=$(sed -n 's/.*vocabulary \([0-9][0-9]*\).*/\1/p' prepare.log)
[ -n "$V" ] || fail "prepare output names no vocabulary size: $(cat prepare.log)"
if [ -n "$PY" ]; then
    V2=$("$PY" -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["chars"]))' data/vocab.json) ||
        fail "vocab.json is not valid JSON"
    [ "$V" = "$V2" ] || fail "prepare says vocabulary $V, vocab.json holds $V2 characters"
    ok
fi

# ------------------------------------------------------------ train N1 steps
# LF_TEST_ARCH=llama runs the same script on a Llama (multi-query attention: 2 heads, 1 KV head).
# 20 steps (an evaluation and a checkpoint every 10), then resumed to 30: two evaluations, a
# rotation, a resume that crosses an interval. Each step costs syscalls on cpu-fenced (the
# cli.*_fenced variants), so the steps are few; warmup 4 (the config's is 100) lets the loss fall
# well within them.
ARCH=${LF_TEST_ARCH:-gpt2}
N1=20 N2=30 EV=10
ARGS=(--data.dataset=data --model.n_layer=2 --model.n_head=2 --model.n_embd=32 --model.block_size=32
      --train_micro_batch_size_per_gpu=8 --eval.interval=$EV --eval.iters=2 --checkpoint.interval=$EV
      --checkpoint.keep_last=1 --steps_per_print=10 --scheduler.warmup_iters=4 --threads=2)
[ "$ARCH" = llama ] && ARGS+=(--model.arch=llama --model.bias=false --model.n_kv_head=1 --model.ffn_hidden=64)
"$LF" train "$CFG" "${ARGS[@]}" --out_dir=run --train_iters=$N1 >train.log 2>&1 || fail "train: $(cat train.log)"
ok
grep -q "step $N1/$N1" train.log || fail "train output has no 'step $N1/$N1' line: $(cat train.log)"
ok
log=run/log.jsonl
[ -s "$log" ] || fail "no $log"

# Train records: exactly steps 1..N1, each with all keys.
n_train=$(grep -c '"type":"train"' "$log")
[ "$n_train" -eq $N1 ] || fail "log.jsonl has $n_train train records, expected $N1"
ok
steps=$(grep '"type":"train"' "$log" | sed 's/.*"step":\([0-9]*\).*/\1/' | tr '\n' ' ')
[ "$steps" = "$(seq -s ' ' 1 $N1) " ] || fail "train steps in log.jsonl are not 1..$N1: $steps"
ok
for k in type step loss lr grad_norm tokens_per_sec ms; do
    n=$(grep '"type":"train"' "$log" | grep -c "\"$k\":")
    [ "$n" -eq $N1 ] || fail "only $n of $N1 train records have key '$k'"
done
ok
evals=$(grep '"type":"eval"' "$log" | grep '"train_loss":' | grep '"val_loss":' | sed 's/.*"step":\([0-9]*\).*/\1/' | tr '\n' ' ')
[ "$evals" = "$EV $N1 " ] || fail "eval records (with train_loss and val_loss) at steps '$evals', expected '$EV $N1 '"
ok
loss_of() { grep '"type":"train"' "$log" | grep "\"step\":$1," | sed 's/.*"loss":\([-0-9.eE+]*\).*/\1/'; }
first=$(loss_of 1)
last=$(loss_of $N1)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' || fail "loss did not go down: step 1 $first, step $N1 $last"
ok

if [ -n "$PY" ]; then
    "$PY" - "$log" "$N1" <<'PY' || fail "log.jsonl records are not valid JSON with the documented keys"
import json, math, sys
train_keys = {"type", "step", "loss", "lr", "grad_norm", "tokens_per_sec", "ms"}
n = 0
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["type"] == "train":
        assert train_keys <= set(r), r
        assert all(math.isfinite(r[k]) for k in train_keys - {"type"}), r
        n += 1
    elif r["type"] == "eval":
        assert math.isfinite(r["train_loss"]) and math.isfinite(r["val_loss"]), r
assert n == int(sys.argv[2]), n
PY
    ok
    "$PY" -c 'import json,sys; c=json.load(open(sys.argv[1])); assert c["train_iters"]==int(sys.argv[2]) and c["model"]["n_embd"]==32, c' \
        run/config.resolved.json $N1 || fail "config.resolved.json is not valid JSON with train_iters $N1, model.n_embd 32"
    ok
else
    [ -s run/config.resolved.json ] && grep -q "\"train_iters\": *$N1" run/config.resolved.json ||
        fail "config.resolved.json missing or without train_iters $N1"
    ok
fi

# ------------------------------------------------------------ checkpoint directory
ck1=$(printf 'step_%08d' $N1)
[ "$(cat run/ckpt/latest)" = "$ck1" ] || fail "ckpt/latest holds '$(cat run/ckpt/latest)', expected $ck1"
ok
kept=$(cd run/ckpt && ls -d step_* | tr '\n' ' ')
[ "$kept" = "$ck1 " ] || fail "keep_last 1 left '$kept' in run/ckpt"
ok
ck=run/ckpt/$ck1
for f in model.safetensors optimizer.safetensors trainer_state.json; do
    [ -s "$ck/$f" ] || fail "no $ck/$f"
done
ok
# Every file's SHA-256 as recorded in trainer_state.json.
for f in model.safetensors optimizer.safetensors; do
    sum=$(sha256sum "$ck/$f" | cut -d' ' -f1)
    grep -q "$sum" "$ck/trainer_state.json" || fail "trainer_state.json does not record the SHA-256 of $f ($sum)"
done
ok

if [ -n "$PY" ] && [ "$ARCH" = llama ]; then
    "$PY" - "$ck" "$V" <<'PY' || fail "llama model.safetensors / config.json / trainer_state.json are not as expected"
import json, os, struct, sys
ck, V = sys.argv[1], int(sys.argv[2])
with open(os.path.join(ck, "model.safetensors"), "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    h = json.loads(f.read(n))
h.pop("__metadata__", None)
# Hugging Face LlamaForCausalLM names, nn.Linear layout (out, in); tied: no lm_head.weight
assert h["model.embed_tokens.weight"]["shape"] == [V, 32], h["model.embed_tokens.weight"]
assert h["model.layers.1.self_attn.q_proj.weight"]["shape"] == [32, 32]
assert h["model.layers.1.self_attn.k_proj.weight"]["shape"] == [16, 32], "1 KV head of 16"
assert h["model.layers.1.self_attn.v_proj.weight"]["shape"] == [16, 32]
assert h["model.layers.1.mlp.gate_proj.weight"]["shape"] == [64, 32]
assert h["model.layers.1.mlp.down_proj.weight"]["shape"] == [32, 64]
assert h["model.layers.0.input_layernorm.weight"]["shape"] == [32]
assert "model.norm.weight" in h and "lm_head.weight" not in h and "model.layers.2.input_layernorm.weight" not in h
assert not any(k.endswith(".bias") for k in h), "llama has no biases"
c = json.load(open(os.path.join(ck, "config.json")))
assert c["architectures"] == ["LlamaForCausalLM"] and c["model_type"] == "llama", c
assert (c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["intermediate_size"],
        c["num_hidden_layers"], c["vocab_size"], c["tie_word_embeddings"]) == (32, 2, 1, 64, 2, V, True), c
s = json.load(open(os.path.join(ck, "trainer_state.json")))
assert s["model"]["arch"] == "llama" and s["model"]["n_kv_head"] == 1 and s["model"]["ffn_hidden"] == 64, s["model"]
PY
    ok
elif [ -n "$PY" ]; then
    "$PY" - "$ck" "$V" "$N1" <<'PY' || fail "model.safetensors / trainer_state.json do not have the expected content"
import json, os, struct, sys
ck, V = sys.argv[1], int(sys.argv[2])
path = os.path.join(ck, "model.safetensors")
with open(path, "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    h = json.loads(f.read(n))
meta = h.pop("__metadata__", {})
assert meta.get("format") == "pt", meta
assert "lm_head.weight" not in h, "lm_head.weight is stored (it is tied to wte)"
assert h["wte.weight"]["shape"] == [V, 32], h["wte.weight"]
assert h["wpe.weight"]["shape"] == [32, 32], h["wpe.weight"]
assert h["h.1.attn.c_attn.weight"]["shape"] == [32, 96], "Conv1D layout (in, out)"
assert h["h.1.mlp.c_proj.weight"]["shape"] == [128, 32], "Conv1D layout (in, out)"
assert "ln_f.weight" in h and "h.2.ln_1.weight" not in h
assert all(t["dtype"] == "F32" for t in h.values())
end = max(t["data_offsets"][1] for t in h.values())
assert os.path.getsize(path) == 8 + n + end, "data region size"
s = json.load(open(os.path.join(ck, "trainer_state.json")))
assert s["step"] == int(sys.argv[3]), s["step"]
assert s["model"]["n_embd"] == 32 and s["model"]["vocab_size"] == V, s["model"]
assert s["config"]["train_iters"] == int(sys.argv[3])
for name in ("model.safetensors", "optimizer.safetensors"):
    assert s["files"][name]["bytes"] == os.path.getsize(os.path.join(ck, name)), name
PY
    ok
elif [ "$ARCH" = gpt2 ]; then
    hdr=$(head -c 4096 "$ck/model.safetensors" | tr -d '\0')
    case "$hdr" in *"\"wte.weight\":{\"dtype\":\"F32\",\"shape\":[$V,32]"*) ;; *) fail "wte.weight is not F32 [$V,32]" ;; esac
    case "$hdr" in *lm_head.weight*) fail "lm_head.weight is stored" ;; esac
    grep -q "\"step\":[[:space:]]*$N1," "$ck/trainer_state.json" || fail "trainer_state.json step is not $N1"
    ok
fi

# ------------------------------------------------------------ sample
sample() { "$LF" sample --ckpt "$1" --prompt "ROMEO:" --max-new-tokens 50 --seed "$2" --threads 2; }
s1=$(sample run/ckpt/latest 1 2>sample.err) || fail "sample: $(cat sample.err)"
ok
case "$s1" in "ROMEO:"*) ;; *) fail "sample output does not start with the prompt: '$s1'" ;; esac
ok
[ "${#s1}" -ge 40 ] || fail "sample printed only ${#s1} characters: '$s1'"
ok
s1b=$(sample run/ckpt/latest 1 2>sample.err) || fail "sample (again): $(cat sample.err)"
[ "$s1" = "$s1b" ] || fail "same seed, different output: '$s1' vs '$s1b'"
ok
s2=$(sample run/ckpt/latest 2 2>sample.err) || fail "sample --seed 2: $(cat sample.err)"
[ "$s1" != "$s2" ] || fail "seeds 1 and 2 gave the same output: '$s1'"
ok
s1c=$(sample run 1 2>sample.err) || fail "sample --ckpt on the run dir: $(cat sample.err)"
[ "$s1" = "$s1c" ] || fail "--ckpt run and --ckpt run/ckpt/latest differ"
ok
# a checkpoint stands alone: it carries its vocabulary (and a transformers config.json)
mv data data.away
s1d=$(sample run 1 2>sample.err) || fail "sample with the dataset moved away: $(cat sample.err)"
[ "$s1" = "$s1d" ] || fail "sample changed when the dataset moved away"
mv data.away data
ok
latest_dir="run/ckpt/$(cat run/ckpt/latest)"
grep -q "\"model_type\": \"$ARCH\"" "$latest_dir/config.json" || fail "checkpoint has no transformers config.json of model_type $ARCH"
grep -q '"vocab.json"' "$latest_dir/trainer_state.json" || fail "trainer_state.json does not list vocab.json"
ok

# ------------------------------------------------------------ resume to N2
"$LF" train "$CFG" "${ARGS[@]}" --out_dir=run --train_iters=$N2 --resume >resume.log 2>&1 ||
    fail "train --resume: $(cat resume.log)"
ok
grep -q "\"type\":\"resume\",\"step\":$N1," "$log" || fail "log.jsonl has no resume record at step $N1"
ok
steps=$(grep '"type":"train"' "$log" | sed 's/.*"step":\([0-9]*\).*/\1/' | tr '\n' ' ')
[ "$steps" = "$(seq -s ' ' 1 $N2) " ] || fail "after resume, train steps are not 1..$N2: $steps"
ok
ck2=$(printf 'step_%08d' $N2)
[ "$(cat run/ckpt/latest)" = "$ck2" ] || fail "after resume ckpt/latest is '$(cat run/ckpt/latest)'"
kept=$(cd run/ckpt && ls -d step_* | tr '\n' ' ')
[ "$kept" = "$ck2 " ] || fail "after resume keep_last 1 left '$kept'"
ok

# The resumed run matches an uninterrupted one bit for bit (fp32, CPU, same threads).
"$LF" train "$CFG" "${ARGS[@]}" --out_dir=straight --train_iters=$N2 >straight.log 2>&1 ||
    fail "uninterrupted train: $(cat straight.log)"
losses() { grep '"type":"train"' "$1" | sed 's/.*"step":\([0-9]*\),"loss":\([^,]*\),"lr":\([^,]*\),"grad_norm":\([^,]*\),.*/\1 \2 \3 \4/'; }
losses "$log" >resumed.txt
losses straight/log.jsonl >straight.txt
diff resumed.txt straight.txt >loss.diff || fail "resumed run differs from the uninterrupted run: $(head -5 loss.diff)"
ok

# ------------------------------------------------------------ bench
# one step of micro-batch 2 x 16 tokens: the output's form is the point (on cpu-fenced a step of
# the preset's own 12 x 64 costs seconds)
b=$("$LF" bench --preset shakespeare-char-cpu --micro-batch 2 --seq 16 --steps 1 --warmup 0 --threads 2 --json 2>bench.err) ||
    fail "bench: $(cat bench.err)"
ok
[ "$(printf '%s\n' "$b" | wc -l)" -eq 1 ] || fail "bench --json printed more than one line: $b"
for k in ms_per_step tokens_per_sec model_flops_per_sec mfu; do
    case "$b" in *"\"$k\":"*) ;; *) fail "bench --json has no key '$k': $b" ;; esac
done
ok
if [ -n "$PY" ]; then
    "$PY" -c '
import json, sys
r = json.loads(sys.argv[1])
assert isinstance(r, dict)
for k in ("ms_per_step", "tokens_per_sec", "model_flops_per_sec", "mfu"):
    assert r[k] > 0, k
' "$b" || fail "bench --json is not one JSON object with positive figures: $b"
    ok
fi

echo "$passed passed, 0 failed"
