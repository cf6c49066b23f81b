# Interpreter: the venv /root/.cache/llmforge/bench-venv (PyTorch 2.15, numpy) with
#   /root/.cache/llmforge/bench-venv/bin/pip install transformers safetensors
# (written with transformers 5.24.0, safetensors 0.8.0). Nothing is downloaded: every model is
# built from a LlamaConfig and a seed.
#
# make_llama_golden.py -- writes the Llama reference fixtures from Hugging Face transformers'
# own LlamaForCausalLM (the model llmforge's "llama" architecture must reproduce):
#
# 1. tests/fixtures/llama_golden.safetensors (grouped-query attention, untied lm_head) and
#    tests/fixtures/llama_golden_tied.safetensors (tie_word_embeddings=True), the Llama
#    counterparts of gpt2_golden.safetensors (same tensor naming scheme):
#      * LlamaConfig(vocab_size=65, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
#        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
#        rope_theta=10000, rms_norm_eps=1e-5, silu, no biases, eager attention), float32;
#      * torch.manual_seed(42), transformers' own init (normal(0, 0.02) for every linear and the
#        embedding), then every RMSNorm weight set to 1 + 0.1*randn (drawn in named_parameters
#        order) so that the tests see the norm weights;
#      * one batch (B=4, T=32) drawn after that: seq = randint(0, 65, (B, T+1)),
#        inputs = seq[:, :T], targets = seq[:, 1:], targets[3, :5] ignored;
#      * loss = mean cross-entropy over the valid targets, computed from the model's logits with
#        F.cross_entropy(ignore_index=-100) (HF's ignore index; the fixture stores -1 there, as
#        gpt2_golden does). HF's `labels=` argument is not used because it shifts the labels
#        itself; targets here are already the next tokens;
#      * the first forward/backward (logits, loss, every gradient), then 10 steps on the same
#        batch from the same initial weights: zero_grad, forward, backward,
#        clip_grad_norm_(1.0), torch.optim.AdamW(lr=1e-3, betas=(0.9, 0.99), eps=1e-8,
#        foreach=False) with weight_decay 0.1 on parameters with dim >= 2 and 0 on the rest.
#    Tensors: param.<HF name>, inputs (I32), targets (I32), logits, loss, grad.<HF name>,
#    losses10, grad_norms10, params_after10.<HF name>; weights in nn.Linear layout (out, in).
#    The tied file has no lm_head.weight (transformers' named_parameters lists a tied weight
#    once, as model.embed_tokens.weight, whose gradient then holds both uses).
#
# 1b. tests/fixtures/llama_golden_qwen2.safetensors: the same recipe on transformers'
#    Qwen2ForCausalLM (Qwen2Config with the GOLDEN sizes, untied, use_sliding_window=False): the
#    Llama block plus q/k/v projection biases, which llmforge's llama has with model.bias. HF
#    initialises those biases to 0; they are set to 0.05*randn after the norm weights (same
#    named_parameters walk) so that the tests see them. Metadata "bias": 1, "reference" names
#    Qwen2ForCausalLM.
#
# 2. tests/fixtures/hf_llama_bf16/: a different tiny Llama (2 layers, hidden 48, 6 heads,
#    2 kv heads, ffn 96, vocab 73, max_position 64, untied, rope_theta 500000) cast to bfloat16
#    and written by save_pretrained(max_shard_size=40000, safe_serialization=True), so it is
#    sharded (model-0000i-of-0000n.safetensors + model.safetensors.index.json), plus
#    expected.json: the config values, every tensor's shape, dtype, shard, exact fp64 sums
#    (math.fsum of the bf16 values, plain and weighted by (i % 13) + 1 over the flat index i,
#    with the matching sums of absolute values for the error bound of a C summation), a few
#    element values; and a batch with transformers' loss and the logits of the last position of
#    row 0, from the model loaded back with from_pretrained(dtype=float32) (bf16 -> fp32 is
#    exact).
#
# Deterministic: torch.set_num_threads(1), fixed seeds; save_pretrained's output depends only on
# the weights and the transformers version (recorded in config.json). The script reads every
# file back and checks it.
#
# Usage:  /root/.cache/llmforge/bench-venv/bin/python tools/reference/make_llama_golden.py
#         [--out-dir tests/fixtures] [--only golden|qwen2|import]

import argparse
import json
import math
import os
import shutil
import sys

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import read_safetensors, write_safetensors  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

SEED = 42
B, T = 4, 32
LR, BETA1, BETA2, EPS, WEIGHT_DECAY, GRAD_CLIP = 1e-3, 0.9, 0.99, 1e-8, 0.1, 1.0
STEPS = 10
NORM_W_STD = 0.1  # RMSNorm weights 1 + 0.1*randn instead of HF's ones
BIAS_STD = 0.05  # Qwen2's q/k/v biases 0.05*randn instead of HF's zeros
IGNORE_HF = -100  # transformers' ignore index
IGNORE_FIXTURE = -1  # what the fixture stores (as gpt2_golden)

GOLDEN = dict(vocab_size=65, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
              rope_theta=10000.0, rms_norm_eps=1e-5, hidden_act="silu", attention_bias=False,
              mlp_bias=False, initializer_range=0.02)

IMPORT = dict(vocab_size=73, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=64,
              rope_theta=500000.0, rms_norm_eps=1e-5, hidden_act="silu", attention_bias=False,
              mlp_bias=False, initializer_range=0.02, tie_word_embeddings=False)
IMPORT_SEED = 1234
IMPORT_B, IMPORT_T = 2, 24
IMPORT_SHARD_BYTES = 40000  # ~94 KB of bf16 weights -> 3 shards
SUM_WEIGHT_MOD = 13


def build(cfg_kwargs, seed, tied, qwen2=False):
    """A float32 LlamaForCausalLM (or Qwen2ForCausalLM) with HF's init, then RMSNorm weights
    1 + 0.1*randn (and Qwen2's q/k/v biases 0.05*randn)."""
    if qwen2:
        kw = {k: v for k, v in cfg_kwargs.items() if k not in ("attention_bias", "mlp_bias")}
        cfg = Qwen2Config(**{**kw, "tie_word_embeddings": tied, "use_sliding_window": False},
                          attn_implementation="eager")
    else:
        cfg = LlamaConfig(**{**cfg_kwargs, "tie_word_embeddings": tied}, attn_implementation="eager")
    torch.manual_seed(seed)
    model = (Qwen2ForCausalLM if qwen2 else LlamaForCausalLM)(cfg)
    assert model.dtype == torch.float32 and model.config._attn_implementation == "eager"
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("layernorm.weight") or n == "model.norm.weight":
                p.copy_(1.0 + NORM_W_STD * torch.randn(p.shape))
            elif n.endswith(".bias"):
                assert qwen2 and n.endswith(("q_proj.bias", "k_proj.bias", "v_proj.bias")), n
                p.copy_(BIAS_STD * torch.randn(p.shape))
    assert (model.lm_head.weight is model.model.embed_tokens.weight) == bool(cfg.tie_word_embeddings)
    return cfg, model


def draw_batch(vocab, b, t, n_ignored_row, n_ignored):
    seq = torch.randint(0, vocab, (b, t + 1), dtype=torch.long)
    inputs = seq[:, :t].contiguous()
    targets = seq[:, 1:].clone()
    targets[n_ignored_row, :n_ignored] = IGNORE_HF
    return inputs, targets


def lm_loss(model, inputs, targets):
    logits = model(input_ids=inputs).logits
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1),
                           ignore_index=IGNORE_HF)
    return logits, loss


def adamw(model):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=LR, betas=(BETA1, BETA2), eps=EPS, foreach=False)


def make_golden(path, tied, qwen2=False):
    cfg, model = build(GOLDEN, SEED, tied, qwen2)
    inputs, targets = draw_batch(cfg.vocab_size, B, T, 3, 5)
    names = [n for n, _ in model.named_parameters()]
    assert ("lm_head.weight" in names) == (not tied)
    params0 = {n: p.detach().clone() for n, p in model.named_parameters()}

    logits, loss = lm_loss(model, inputs, targets)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    logits = logits.detach().clone()
    loss0 = loss.item()
    n_valid = int((targets != IGNORE_HF).sum())
    # the same mean computed by hand, in float64, from the logits
    lp = torch.log_softmax(logits.double(), dim=-1)
    mask = targets != IGNORE_HF
    by_hand = -(lp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)[mask]).mean().item()
    assert abs(by_hand - loss0) < 1e-5 * abs(loss0), (by_hand, loss0)

    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(params0[n])
    model.zero_grad(set_to_none=True)
    opt = adamw(model)
    losses, norms = [], []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        _, l = lm_loss(model, inputs, targets)
        l.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        opt.step()
        losses.append(l.item())
        norms.append(norm.item())
    assert losses[0] == loss0, (losses[0], loss0)
    clipped = [i for i, g in enumerate(norms) if g > GRAD_CLIP]

    f32 = lambda t: t.detach().cpu().numpy().astype(np.float32)  # noqa: E731
    tgt_fixture = targets.clone()
    tgt_fixture[tgt_fixture == IGNORE_HF] = IGNORE_FIXTURE
    tensors = [("param." + n, f32(params0[n])) for n in names]
    tensors += [("inputs", inputs.numpy().astype(np.int32)),
                ("targets", tgt_fixture.numpy().astype(np.int32)),
                ("logits", f32(logits)),
                ("loss", np.array([loss0], dtype=np.float32))]
    tensors += [("grad." + n, f32(grads[n])) for n in names]
    tensors += [("losses10", np.array(losses, dtype=np.float32)),
                ("grad_norms10", np.array(norms, dtype=np.float32))]
    tensors += [("params_after10." + n, f32(p)) for n, p in model.named_parameters()]

    metadata = {
        "format": "llmforge llama golden v1",
        "generator": "tools/reference/make_llama_golden.py",
        "reference": "transformers %s (eager attention), float32"
                     % ("Qwen2ForCausalLM" if qwen2 else "LlamaForCausalLM"),
        "arch": "llama",
        "n_layer": cfg.num_hidden_layers, "n_head": cfg.num_attention_heads,
        "n_kv_head": cfg.num_key_value_heads, "n_embd": cfg.hidden_size,
        "ffn_hidden": cfg.intermediate_size, "vocab_size": cfg.vocab_size,
        "block_size": cfg.max_position_embeddings, "norm": "rmsnorm",
        "norm_eps": repr(GOLDEN["rms_norm_eps"]), "rope_theta": repr(GOLDEN["rope_theta"]),
        "tie_embeddings": int(bool(tied)), "bias": int(bool(qwen2)), "dropout": 0.0, "hidden_act": "silu",
        "hf_config": cfg.to_json_string(use_diff=False),
        "B": B, "T": T, "seed": SEED, "init": "transformers _init_weights: normal(0, 0.02) for "
        "linears and the embedding; RMSNorm weights then 1 + 0.1*randn in named_parameters order",
        "lr": LR, "beta1": BETA1, "beta2": BETA2, "eps": EPS,
        "weight_decay": WEIGHT_DECAY, "weight_decay_applies_to": "tensors with dim>=2",
        "grad_clip": GRAD_CLIP, "steps": STEPS,
        "clipped_steps": ",".join(str(i) for i in clipped),
        "ignore_index": IGNORE_FIXTURE, "n_valid_targets": n_valid,
        "loss": "mean cross-entropy over targets != -1",
        "adamw": "torch.optim.AdamW(foreach=False): p*=1-lr*wd; m,v updated; "
                 "p-=lr*(m/(1-b1^t))/(sqrt(v)/sqrt(1-b2^t)+eps)",
        "torch_version": torch.__version__, "transformers_version": transformers.__version__,
    }
    write_safetensors(path, tensors, metadata)

    back, meta = read_safetensors(path)
    assert list(back.keys()) == [n for n, _ in tensors]
    for n, a in tensors:
        assert np.array_equal(back[n], a), n
    assert meta["transformers_version"] == transformers.__version__
    assert json.loads(meta["hf_config"])["tie_word_embeddings"] == bool(tied)

    print(f"wrote {path}: {len(tensors)} tensors, {os.path.getsize(path)} bytes")
    print(f"  loss {loss0:.6f} over {n_valid} targets")
    print("  losses10     " + " ".join(f"{x:.4f}" for x in losses))
    print("  grad_norms10 " + " ".join(f"{x:.4f}" for x in norms))
    print(f"  clipping triggered at steps: {clipped}")


def tensor_summary(name, t, shard):
    """Exact fp64 sums of a bf16 tensor and a few of its elements (values exact in fp64)."""
    v = t.detach().to(torch.float64).reshape(-1).tolist()
    n = len(v)
    w = [(i % SUM_WEIGHT_MOD) + 1 for i in range(n)]
    picks = sorted({0, 1, n // 3, n // 2, (2 * n) // 3, n - 1})
    return {
        "shape": list(t.shape), "dtype": "BF16", "file": shard, "numel": n,
        "sum": math.fsum(v), "sum_abs": math.fsum(abs(x) for x in v),
        "wsum": math.fsum(x * k for x, k in zip(v, w)),
        "wsum_abs": math.fsum(abs(x) * k for x, k in zip(v, w)),
        "elements": [[i, v[i]] for i in picks],
    }


def make_import(out_dir):
    cfg, model = build(IMPORT, IMPORT_SEED, False)
    inputs, targets = draw_batch(cfg.vocab_size, IMPORT_B, IMPORT_T, 1, 3)
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    model = model.to(torch.bfloat16)
    model.save_pretrained(out_dir, max_shard_size=IMPORT_SHARD_BYTES, safe_serialization=True)

    with open(os.path.join(out_dir, "model.safetensors.index.json")) as f:
        index = json.load(f)
    weight_map = index["weight_map"]
    shards = sorted(set(weight_map.values()))
    assert len(shards) >= 2, f"not sharded: {shards}"
    assert not os.path.exists(os.path.join(out_dir, "model.safetensors"))
    with open(os.path.join(out_dir, "config.json")) as f:
        saved_cfg = json.load(f)

    # every tensor as the shards hold it (read with the safetensors package, not transformers)
    from safetensors import safe_open
    stored = {}
    for s in shards:
        with safe_open(os.path.join(out_dir, s), framework="pt") as f:
            for k in f.keys():
                assert k not in stored, f"{k} in two shards"
                stored[k] = (f.get_tensor(k), s)
    assert sorted(stored) == sorted(weight_map), "index and shards disagree"
    for k, (t, s) in stored.items():
        assert weight_map[k] == s and t.dtype == torch.bfloat16, k
    own = dict(model.named_parameters())
    assert sorted(own) == sorted(stored), (sorted(own), sorted(stored))
    for k, p in own.items():
        assert torch.equal(p.detach(), stored[k][0]), k

    # transformers' view: loaded back in float32
    torch.set_num_threads(1)
    back = LlamaForCausalLM.from_pretrained(out_dir, dtype=torch.float32, attn_implementation="eager")
    back.eval()
    for k, p in back.named_parameters():
        assert torch.equal(p.detach(), stored[k][0].float()), f"{k}: bf16 -> fp32 not exact"
    with torch.no_grad():
        logits, loss = lm_loss(back, inputs, targets)
        # transformers' own loss function with already-shifted labels must agree
        hf_loss = back.loss_function(logits=logits, labels=None, vocab_size=cfg.vocab_size,
                                     shift_labels=targets)
    assert abs(hf_loss.item() - loss.item()) <= 1e-6 * abs(loss.item()), (hf_loss.item(), loss.item())

    tgt = targets.clone()
    tgt[tgt == IGNORE_HF] = IGNORE_FIXTURE
    expected = {
        "format": "llmforge hf llama import fixture v1",
        "generator": "tools/reference/make_llama_golden.py",
        "torch_version": torch.__version__, "transformers_version": transformers.__version__,
        "seed": IMPORT_SEED,
        "config": {"arch": "llama", "n_layer": cfg.num_hidden_layers, "n_head": cfg.num_attention_heads,
                   "n_kv_head": cfg.num_key_value_heads, "n_embd": cfg.hidden_size,
                   "ffn_hidden": cfg.intermediate_size, "vocab_size": cfg.vocab_size,
                   "block_size": cfg.max_position_embeddings, "norm_eps": IMPORT["rms_norm_eps"],
                   "rope_theta": IMPORT["rope_theta"], "tie_embeddings": 0, "bias": 0},
        "shards": shards,
        "num_tensors": len(stored),
        "sum_weights": f"(i % {SUM_WEIGHT_MOD}) + 1 for flat index i",
        "tensors": {k: tensor_summary(k, stored[k][0], stored[k][1]) for k in sorted(stored)},
        "batch": {"B": IMPORT_B, "T": IMPORT_T, "ignore_index": IGNORE_FIXTURE,
                  "inputs": inputs.tolist(), "targets": tgt.tolist()},
        "loss": loss.item(),
        "loss_definition": "mean cross-entropy over targets != -1 of the float32 model "
                           "(from_pretrained(dtype=float32), eager attention)",
        "last_logits_row0": [float(x) for x in logits[0, -1].tolist()],
    }
    with open(os.path.join(out_dir, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")

    with open(os.path.join(out_dir, "expected.json")) as f:
        again = json.load(f)
    assert again["loss"] == loss.item() and len(again["last_logits_row0"]) == cfg.vocab_size
    total = sum(os.path.getsize(os.path.join(out_dir, n)) for n in os.listdir(out_dir))
    print(f"wrote {out_dir}: {len(shards)} shards ({', '.join(shards)}), {len(stored)} tensors, "
          f"{total} bytes in all; config.json keys: {sorted(saved_cfg)}")
    print(f"  loss {loss.item():.6f}; last logits row 0 [:4] {expected['last_logits_row0'][:4]}")


def main():
    ap = argparse.ArgumentParser(description="Llama fixtures from transformers")
    ap.add_argument("--out-dir", default=os.path.join(REPO, "tests", "fixtures"))
    ap.add_argument("--only", choices=["golden", "qwen2", "import"])
    args = ap.parse_args()
    torch.set_num_threads(1)  # keeps the reduction order, hence the fixtures, reproducible
    torch.use_deterministic_algorithms(True)
    os.makedirs(args.out_dir, exist_ok=True)
    if args.only in (None, "golden"):
        make_golden(os.path.join(args.out_dir, "llama_golden.safetensors"), tied=False)
        make_golden(os.path.join(args.out_dir, "llama_golden_tied.safetensors"), tied=True)
    if args.only in (None, "qwen2"):
        make_golden(os.path.join(args.out_dir, "llama_golden_qwen2.safetensors"), tied=False, qwen2=True)
    if args.only in (None, "import"):
        make_import(os.path.join(args.out_dir, "hf_llama_bf16"))


if __name__ == "__main__":
    main()
