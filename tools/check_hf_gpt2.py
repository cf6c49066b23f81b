#!/usr/bin/env python3
# Interpreter: a Python with PyTorch and Hugging Face `transformers` (and `safetensors`), e.g.
#   /usr/bin/python3 -m venv --system-site-packages /tmp/hf && \
#   /tmp/hf/bin/pip install 'transformers<4.40' safetensors   # Debian's torch 1.13 + transformers
#   /tmp/hf/bin/python tools/check_hf_gpt2.py out/run/ckpt/latest --llmforge build/llmforge
#
# Checks that an llmforge checkpoint loads unchanged into transformers' GPT2LMHeadModel
# (GPT2LMHeadModel.from_pretrained(checkpoint_dir): config.json + model.safetensors, tied
# lm_head, no missing or unexpected weights) and that the loaded model computes what llmforge
# computes: the greedy continuation of a prompt from transformers equals
# `llmforge sample --temperature 0` token for token, and the per-position next-token loss of
# that text is printed. Exit status 0 when everything agrees, 1 otherwise.
import argparse
import json
import os
import subprocess
import sys

import torch
from transformers import GPT2LMHeadModel


def resolve(path):
    if os.path.isfile(path):  # a `latest` file
        with open(path) as f:
            return os.path.join(os.path.dirname(path), f.read().strip())
    if os.path.isfile(os.path.join(path, "trainer_state.json")):
        return path
    for latest in (os.path.join(path, "latest"), os.path.join(path, "ckpt", "latest")):
        if os.path.isfile(latest):
            with open(latest) as f:
                return os.path.join(os.path.dirname(latest), f.read().strip())
    sys.exit(f"no checkpoint at {path}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ckpt")
    ap.add_argument("--llmforge", default="build/llmforge")
    ap.add_argument("--prompt", default="\n")
    ap.add_argument("--tokens", type=int, default=100)
    args = ap.parse_args()
    d = resolve(args.ckpt)
    with open(os.path.join(d, "vocab.json")) as f:
        chars = json.load(f)["chars"]
    stoi = {c: i for i, c in enumerate(chars)}

    model, info = GPT2LMHeadModel.from_pretrained(d, output_loading_info=True)
    model.eval()
    missing = [k for k in info["missing_keys"] if not k.endswith((".attn.bias", ".attn.masked_bias"))]
    missing = [k for k in missing if k != "lm_head.weight"]
    print("transformers loaded", d, "| missing:", missing, "| unexpected:", info["unexpected_keys"])
    ok = not missing and not info["unexpected_keys"]
    ok = ok and torch.equal(model.lm_head.weight, model.transformer.wte.weight)

    ids = torch.tensor([[stoi[c] for c in args.prompt]])
    # transformers' GPT-2 does not crop the context: stay within n_positions
    args.tokens = min(args.tokens, model.config.n_positions - ids.shape[1])
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=args.tokens, do_sample=False,
                             pad_token_id=0, eos_token_id=None)
    hf_text = "".join(chars[i] for i in out[0].tolist())
    lf = subprocess.run([args.llmforge, "sample", "--ckpt", d, "--prompt", args.prompt,
                         "--max-new-tokens", str(args.tokens), "--temperature", "0"],
                        capture_output=True, text=True, check=True).stdout
    lf_text = lf[:-1] if lf.endswith("\n") else lf
    same = hf_text == lf_text
    n_same = next((i for i, (a, b) in enumerate(zip(hf_text, lf_text)) if a != b), min(len(hf_text), len(lf_text)))
    print(f"greedy continuation: transformers == llmforge: {same} ({n_same} of {len(hf_text)} characters agree)")
    with torch.no_grad():
        x = out[:, :-1]
        y = out[:, 1:]
        loss = torch.nn.functional.cross_entropy(model(x).logits[0], y[0])
    print(f"transformers loss of the continuation: {loss.item():.6f}")
    ok = ok and same
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
