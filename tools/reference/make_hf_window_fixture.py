# Interpreter: the venv /root/.cache/llmforge/bench-venv (PyTorch 2.15, transformers 5.25,
# safetensors). Nothing is downloaded: the model is built from a MistralConfig and a seed.
#
# make_hf_window_fixture.py -- writes tests/fixtures/hf_window/mistral/: a tiny
# MistralForCausalLM with a sliding window (16) far below its 90-token prompt, as
# save_pretrained writes it, and what transformers computes on it (tests/model/test_hf_rope.c
# test_window compares llmforge's windowed attention and its ring-buffer KV cache with it).
#
# transformers' window (masking_utils.sliding_window_overlay): query q sees key k when
# k > q - sliding_window, on top of the causal mask: the keys q-15..q for a window of 16.
# Eager attention honours it in 5.x; the script checks that the window changes the logits
# (the same weights with sliding_window null differ by more than 1e-2 of the largest), so the
# fixture cannot pass with full attention.
#
# Model: vocab 128, hidden 64, intermediate 64, 2 layers, 4 heads (head size 16), 2 kv heads,
# tied embeddings, rope_theta 10000, max_position_embeddings 128, sliding_window 16; weights as
# make_hf_rope_fixtures.py's (seed 7, q/k 0.25*randn, other projections 0.1*randn, norms
# 1 + 0.1*randn), saved in bfloat16. expected.json has make_hf_rope_fixtures.py's fields (the
# same reference(): logits at a few positions, loss, weighted gradient sums, 32 greedy tokens
# of generate with its cache, past the window by far), for the first prompt seed from 11 whose
# greedy continuation keeps every top-1/top-2 gap above 1e-3.
#
# Usage:  /root/.cache/llmforge/bench-venv/bin/python tools/reference/make_hf_window_fixture.py
#         [--out-dir tests/fixtures/hf_window]

import argparse
import json
import os
import shutil
import sys
import tempfile

import torch
import transformers
from transformers import MistralConfig, MistralForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_hf_rope_fixtures as rf  # noqa: E402  (reference(), the weight recipe)

WINDOW = 16
CFG = dict(vocab_size=128, hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
           num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-5, hidden_act="silu",
           initializer_range=0.02, tie_word_embeddings=True, rope_theta=10000.0)
POSITIONS = [0, 14, 15, 16, 17, 31, 32, 63, 89]


def build(window):
    cfg = MistralConfig(**CFG, sliding_window=window, attn_implementation="eager")
    torch.manual_seed(rf.SEED)
    model = MistralForCausalLM(cfg)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith(("q_proj.weight", "k_proj.weight")):
                p.copy_(rf.QK_STD * torch.randn(p.shape))
            elif n.endswith("proj.weight"):
                p.copy_(rf.OTHER_STD * torch.randn(p.shape))
            if n.endswith("layernorm.weight") or n == "model.norm.weight":
                p.copy_(1.0 + 0.1 * torch.randn(p.shape))
    return model


def load(d):
    return MistralForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out-dir", default=os.path.join(rf.REPO, "tests", "fixtures", "hf_window"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    rf.load, rf.POSITIONS = load, POSITIONS
    with tempfile.TemporaryDirectory() as tmp:
        d, full = os.path.join(tmp, "mistral"), os.path.join(tmp, "full")
        build(WINDOW).to(torch.bfloat16).save_pretrained(d, safe_serialization=True)
        build(None).to(torch.bfloat16).save_pretrained(full, safe_serialization=True)
        assert json.load(open(os.path.join(d, "config.json")))["sliding_window"] == WINDOW
        for seed in range(rf.PROMPT_SEED, rf.PROMPT_SEED + 40):
            g = torch.Generator().manual_seed(seed)
            prompt = torch.randint(0, 128, (rf.PROMPT_T,), generator=g).tolist()
            exp = rf.reference(d, prompt)
            print(f"prompt seed {seed}: loss {exp['loss']:.6f}, greedy min gap {exp['greedy_min_gap']:.3g}")
            if exp["greedy_min_gap"] > rf.GAP_MIN:
                break
        assert exp["greedy_min_gap"] > rf.GAP_MIN, "no prompt seed gives well-separated greedy tokens"
        ref_full = rf.reference(full, prompt)
        a, b = torch.tensor(exp["logits"]), torch.tensor(ref_full["logits"])
        diff = float((a - b).abs().max() / a.abs().max())
        print(f"window vs full attention: logits differ by {diff:.3g} of the largest; greedy "
              f"{'differs' if exp['greedy'] != ref_full['greedy'] else 'is the same'}")
        assert diff > 1e-2
        assert float((a[:2] - b[:2]).abs().max()) == 0.0  # positions 0 and 14: inside the window
        exp.update({"name": "mistral", "prompt": prompt, "prompt_seed": seed, "sliding_window": WINDOW,
                    "transformers_version": transformers.__version__, "torch_version": torch.__version__})
        out = os.path.join(args.out_dir, "mistral")
        if os.path.isdir(out):
            shutil.rmtree(out)
        os.makedirs(out)
        for f in ("config.json", "model.safetensors"):
            shutil.copy(os.path.join(d, f), out)
        with open(os.path.join(out, "expected.json"), "w") as f:
            json.dump(exp, f, separators=(",", ":"))
            f.write("\n")
    print("wrote", out)


if __name__ == "__main__":
    main()
