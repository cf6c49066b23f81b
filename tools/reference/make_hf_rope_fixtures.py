# Interpreter: the venv /root/.cache/llmforge/bench-venv (PyTorch 2.15, transformers 5.25,
# safetensors). Nothing is downloaded: every model is built from a LlamaConfig and a seed.
#
# make_hf_rope_fixtures.py -- writes tests/fixtures/hf_rope/: tiny LlamaForCausalLM directories
# as transformers' save_pretrained writes them, one per RoPE scaling type and one with an
# explicit head_dim != hidden/heads plus attention_bias and mlp_bias, and what transformers
# computes on them (tests/model/test_hf_rope.c compares llmforge with it).
#
# Models (random weights, seed 7: transformers' init, then q/k projections 0.25*randn so that
# attention is sharp and each RoPE table changes the logits by far more than the tolerance,
# the other projections 0.1*randn, RMSNorm weights 1 + 0.1*randn and every bias 0.05*randn so
# the tests see them), saved in bfloat16 (bf16 -> fp32 is exact, so the
# float32 reference below and llmforge read the same numbers):
#   rope base: vocab 128, hidden 64, intermediate 64, 2 layers, 4 heads (head size 16), 2 kv
#     heads, tied embeddings, rope_theta 10000, max_position_embeddings 128 (dynamic: 32).
#     The RoPE variants differ only in config.json, so their weights are bit-identical (checked
#     here): only llama3/ keeps model.safetensors; the others hold config.json and reuse it.
#       llama3  (5.x spelling, rope_parameters) factor 4, low 1, high 4, original max 32
#       yarn    (5.x spelling) factor 4, original max 32 (attention factor from mscale(4))
#       linear  (4.x spelling: rope_theta + rope_scaling {"type": "linear"}) factor 2
#       dynamic (4.x spelling, {"type": "dynamic"}) factor 2, max_position_embeddings 32
#       yarn4x  (4.x spelling, {"rope_type": "yarn"}) factor 3, original max 24, beta_fast 16,
#               beta_slow 2, truncate false, attention_factor 1.2
#     The 4.x spellings are written by editing save_pretrained's config.json (transformers 5.x
#     writes only rope_parameters); the script checks that transformers reads the edited file
#     back to the intended rope_parameters.
#   headdim: vocab 128, hidden 48, 4 heads with head_dim 16 (q is 64 wide), 2 kv heads,
#     intermediate 64, untied, attention_bias and mlp_bias true, rope_theta 10000, max 128.
#
# Each directory's expected.json: the 90-token prompt (the first seed from 11 on whose greedy
# continuations keep every top-1/top-2 gap above 1e-3 in every variant; positions reach past the
# original 32), the float32 logits at a few positions of one forward over it, the 32 greedy
# tokens of model.generate(do_sample=False, use_cache=True) on a freshly loaded model (with a
# KV cache: for dynamic NTK each new token is rotated with the table of its own length), the
# smallest top-1/top-2 logit gap along that continuation, the mean cross-entropy of the prompt's
# next tokens (89 targets), and for every parameter the gradient's weighted sums
# sum(g[i] * ((i % 13) + 1)) and sum(|g[i]| * ((i % 13) + 1)) over the flat index (the error
# bound of a summation in another order).
#
# Deterministic: torch.set_num_threads(1), fixed seeds.
#
# Usage:  /root/.cache/llmforge/bench-venv/bin/python tools/reference/make_hf_rope_fixtures.py
#         [--out-dir tests/fixtures/hf_rope]

import argparse
import json
import os
import shutil
import tempfile

import torch
import torch.nn.functional as F
import transformers
from transformers import LlamaConfig, LlamaForCausalLM

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SEED, PROMPT_SEED = 7, 11
PROMPT_T, NEW_TOKENS = 90, 32
POSITIONS = [0, 23, 31, 32, 33, 63, 64, 89]
GAP_MIN = 1e-3  # smallest top-1/top-2 gap along a greedy continuation (fp32 noise: ~1e-5)
QK_STD, OTHER_STD = 0.25, 0.1  # sharp attention, so that the RoPE tables show in the logits
SUM_WEIGHT_MOD = 13

BASE = dict(vocab_size=128, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
            rms_norm_eps=1e-5, hidden_act="silu", initializer_range=0.02, tie_word_embeddings=True)
HEADDIM = dict(vocab_size=128, hidden_size=48, intermediate_size=64, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=128,
               rms_norm_eps=1e-5, hidden_act="silu", initializer_range=0.02, tie_word_embeddings=False,
               attention_bias=True, mlp_bias=True)

# name -> (config kwargs, rope_parameters for the constructor, 4.x spelling to write or None)
VARIANTS = {
    "llama3": (BASE, {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 4.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 32}, None),
    "yarn": (BASE, {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                    "original_max_position_embeddings": 32}, None),
    "linear": (BASE, {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0},
               {"type": "linear", "factor": 2.0}),
    "dynamic": ({**BASE, "max_position_embeddings": 32}, {"rope_type": "dynamic", "rope_theta": 10000.0,
                                                         "factor": 2.0},
                {"type": "dynamic", "factor": 2.0}),
    "yarn4x": (BASE, {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 3.0,
                      "original_max_position_embeddings": 24, "beta_fast": 16.0, "beta_slow": 2.0,
                      "truncate": False, "attention_factor": 1.2},
               {"rope_type": "yarn", "factor": 3.0, "original_max_position_embeddings": 24, "beta_fast": 16.0,
                "beta_slow": 2.0, "truncate": False, "attention_factor": 1.2}),
    "headdim": (HEADDIM, {"rope_type": "default", "rope_theta": 10000.0}, None),
}
SHARED_WEIGHTS = "llama3"  # the directory whose model.safetensors the other base variants reuse


def build(kwargs, rope):
    cfg = LlamaConfig(**kwargs, rope_parameters=dict(rope), attn_implementation="eager")
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith(("q_proj.weight", "k_proj.weight")):
                p.copy_(QK_STD * torch.randn(p.shape))
            elif n.endswith("proj.weight"):
                p.copy_(OTHER_STD * torch.randn(p.shape))
            if n.endswith("layernorm.weight") or n == "model.norm.weight":
                p.copy_(1.0 + 0.1 * torch.randn(p.shape))
            elif n.endswith(".bias"):
                p.copy_(0.05 * torch.randn(p.shape))
    return model


def load(d):
    return LlamaForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")


def r9(v):
    return float("%.9g" % float(v))


def weighted_sums(g):
    g = g.detach().double().reshape(-1)
    w = (torch.arange(g.numel(), dtype=torch.float64) % SUM_WEIGHT_MOD) + 1
    return [r9((g * w).sum()), r9((g.abs() * w).sum())]


def reference(d, prompt):
    model = load(d)
    ids = torch.tensor([prompt])
    logits = model(input_ids=ids).logits[0]
    assert logits.shape == (PROMPT_T, model.config.vocab_size)
    out = {"positions": POSITIONS,
           "logits": [[r9(v) for v in logits[p]] for p in POSITIONS]}
    # loss and gradients on a fresh model (dynamic NTK keeps state between forwards)
    model = load(d)
    logits = model(input_ids=ids).logits[0]
    loss = F.cross_entropy(logits[:-1], ids[0, 1:])
    loss.backward()
    out["loss"] = r9(loss)
    out["grads"] = {n: weighted_sums(p.grad) for n, p in model.named_parameters()}
    model = load(d)
    # an explicit all-ones mask: generate would otherwise infer one from a pad id and mask every
    # prompt token that equals it
    gen = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS, do_sample=False,
                         use_cache=True, output_logits=True, return_dict_in_generate=True, pad_token_id=None,
                         eos_token_id=None, min_new_tokens=NEW_TOKENS)
    toks = gen.sequences[0, PROMPT_T:].tolist()
    assert len(toks) == NEW_TOKENS
    gap = min(float(torch.topk(lg[0], 2).values[0] - torch.topk(lg[0], 2).values[1]) for lg in gen.logits)
    out["greedy"] = toks
    out["greedy_min_gap"] = gap
    return out


def write_4x(d, spelling):
    p = os.path.join(d, "config.json")
    with open(p) as f:
        cfg = json.load(f)
    rp = cfg.pop("rope_parameters")
    cfg["rope_theta"] = rp["rope_theta"]
    cfg["rope_scaling"] = spelling
    with open(p, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    return rp


def attempt(tmp, prompt):
    """Every variant's directory and expected.json for one prompt; None when a greedy
    continuation comes closer than GAP_MIN to a tie somewhere."""
    results, first = [], None
    for name, (kw, rope, spelling) in VARIANTS.items():
        d = os.path.join(tmp, name)
        if not os.path.isdir(d):
            build(kw, rope).to(torch.bfloat16).save_pretrained(d, safe_serialization=True)
            if spelling is not None:
                written = write_4x(d, spelling)
                back = LlamaConfig.from_pretrained(d).rope_parameters
                for k, v in rope.items():
                    assert back.get(k) == v, (name, k, back.get(k), v)
                assert written.get("rope_type") == rope["rope_type"]
        exp = reference(d, prompt)
        print(f"  {name}: loss {exp['loss']:.6f}, greedy min gap {exp['greedy_min_gap']:.3g}")
        if exp["greedy_min_gap"] <= GAP_MIN:
            return None
        lg = torch.tensor(exp["logits"])
        if kw is not HEADDIM:
            if first is None:
                first = (name, lg)
            else:  # the RoPE type shows: far above the tests' tolerance
                diff = float((lg - first[1]).abs().max() / first[1].abs().max())
                print(f"    vs {first[0]}: logits differ by {diff:.3g} of the largest")
                assert diff > 1e-2, name
        exp.update({"name": name, "prompt": prompt, "transformers_version": transformers.__version__,
                    "torch_version": torch.__version__})
        results.append((name, kw, d, exp))
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out-dir", default=os.path.join(REPO, "tests", "fixtures", "hf_rope"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(PROMPT_SEED, PROMPT_SEED + 40):
            g = torch.Generator().manual_seed(seed)
            prompt = torch.randint(0, 128, (PROMPT_T,), generator=g).tolist()
            print(f"prompt seed {seed}")
            results = attempt(tmp, prompt)
            if results:
                break
        assert results, "no prompt seed gives well-separated greedy tokens"
        if os.path.isdir(args.out_dir):
            shutil.rmtree(args.out_dir)
        os.makedirs(args.out_dir)
        shared = None
        for name, kw, d, exp in results:
            exp["prompt_seed"] = seed
            out = os.path.join(args.out_dir, name)
            os.makedirs(out)
            shutil.copy(os.path.join(d, "config.json"), out)
            with open(os.path.join(d, "model.safetensors"), "rb") as f:
                weights = f.read()
            if kw is not HEADDIM:
                shared = shared or weights
                assert weights == shared, f"{name}: weights differ from {SHARED_WEIGHTS}'s"
            if name in (SHARED_WEIGHTS, "headdim"):
                shutil.copy(os.path.join(d, "model.safetensors"), out)
            else:
                exp["weights_from"] = SHARED_WEIGHTS
            with open(os.path.join(out, "expected.json"), "w") as f:
                json.dump(exp, f, separators=(",", ":"))
                f.write("\n")
    print("wrote", args.out_dir)


if __name__ == "__main__":
    main()
