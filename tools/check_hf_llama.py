#!/usr/bin/env python3
# Interpreter: a Python with PyTorch and Hugging Face `transformers` (+ `safetensors`), e.g. the
# venv /root/.cache/llmforge/bench-venv after
#   /root/.cache/llmforge/bench-venv/bin/pip install transformers safetensors
# (written against transformers 5.24.0; 4.x works as long as it knows the model type).
#
# check_hf_llama.py -- loads an llmforge-written checkpoint directory (config.json +
# model.safetensors, or a sharded directory with model.safetensors.index.json) with
# transformers.AutoModelForCausalLM.from_pretrained(DIR) in float32, runs it on a prompt given as
# token ids, and prints one JSON object on stdout:
#   {"dir", "model_type", "architectures", "transformers_version", "torch_version",
#    "prompt": [ids], "last_logits": [V floats: logits of the last prompt position],
#    "greedy": [N ids: argmax continuation, recomputed over the whole context each step; with
#     dynamic-NTK RoPE that rotates every position with the current length's table, so compare it
#     with `llmforge sample --no-cache`, not the KV-cache path (docs/models.md)],
#    "missing_keys", "unexpected_keys", "ok": true|false, "errors": [...],
#    "compare": {...} (with --compare)}
# so that a test can compare transformers' numbers with llmforge's.
#
# The prompt: --ids 1,2,3 (or "1 2 3"), or --ids-file FILE holding a JSON list of ids, a JSON
# object with "prompt" or "ids", or whitespace/comma separated integers (what the C side
# writes). --tokens N greedy tokens (default 16), cut so that prompt + continuation stay within
# max_position_embeddings (llmforge's block_size); "n_new" says how many were made.
# --compare FILE reads a JSON object written by llmforge with "last_logits" and/or "greedy" and
# checks |hf - lf| <= atol + rtol*|hf| elementwise for the logits (--atol, --rtol, default 1e-4
# each: fp32 forward passes of a small model computed in different orders) and exact equality
# for the greedy ids (compared up to the first position where transformers' top two logits are
# closer than 2*atol, where either choice is right).
#
# Exit status 0 when the model loaded with no missing or unexpected weights, the logits are
# finite and every comparison asked for agrees; 1 otherwise, with the reasons on stderr
# (and in "errors"). 1 also when torch or transformers cannot be imported.
#
# Usage: python tools/check_hf_llama.py DIR --ids 1,2,3 [--tokens 16] [--compare lf.json]
#        [--out result.json]

import argparse
import json
import math
import os
import sys


def fail(msg):
    print(f"check_hf_llama: {msg}", file=sys.stderr)
    sys.exit(1)


def resolve(path):
    """A checkpoint directory, or a `latest` file naming one (as llmforge writes it)."""
    if os.path.isfile(path):
        with open(path) as f:
            path = os.path.join(os.path.dirname(path), f.read().strip())
    elif not os.path.isfile(os.path.join(path, "config.json")):
        latest = os.path.join(path, "latest")
        if os.path.isfile(latest):
            with open(latest) as f:
                path = os.path.join(path, f.read().strip())
    if not os.path.isdir(path):
        fail(f"{path}: not a directory")
    if not os.path.isfile(os.path.join(path, "config.json")):
        fail(f"{path}: no config.json")
    if not (os.path.isfile(os.path.join(path, "model.safetensors"))
            or os.path.isfile(os.path.join(path, "model.safetensors.index.json"))):
        fail(f"{path}: neither model.safetensors nor model.safetensors.index.json")
    return path


def parse_ids(text, where):
    text = text.strip()
    ids = None
    if text.startswith("[") or text.startswith("{"):
        try:
            j = json.loads(text)
        except json.JSONDecodeError as e:
            fail(f"{where}: not valid JSON ({e})")
        if isinstance(j, dict):
            j = j.get("prompt", j.get("ids"))
        ids = j
    else:
        try:
            ids = [int(x) for x in text.replace(",", " ").split()]
        except ValueError:
            fail(f"{where}: token ids must be integers")
    if not isinstance(ids, list) or not ids or not all(isinstance(x, int) and not isinstance(x, bool) for x in ids):
        fail(f"{where}: expected a non-empty list of integer token ids")
    return ids


def main():
    ap = argparse.ArgumentParser(description="Run an llmforge checkpoint in transformers and print "
                                             "its last logits and greedy continuation as JSON.")
    ap.add_argument("dir", help="checkpoint directory (config.json + model.safetensors), or a latest file")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--ids", help="prompt token ids, e.g. 1,2,3")
    src.add_argument("--ids-file", help="file with the prompt token ids (JSON list/object or integers)")
    ap.add_argument("--tokens", type=int, default=16, help="greedy tokens to generate (default 16)")
    ap.add_argument("--compare", help="JSON from llmforge with last_logits and/or greedy to check")
    ap.add_argument("--atol", type=float, default=1e-4)
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--out", help="also write the JSON result here")
    args = ap.parse_args()
    if args.tokens < 0:
        fail("--tokens must be >= 0")

    d = resolve(args.dir)
    if args.ids is not None:
        prompt = parse_ids(args.ids, "--ids")
    else:
        try:
            with open(args.ids_file) as f:
                prompt = parse_ids(f.read(), args.ids_file)
        except OSError as e:
            fail(f"{args.ids_file}: {e.strerror}")
    lf = None
    if args.compare:
        try:
            with open(args.compare) as f:
                lf = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            fail(f"{args.compare}: {e}")
        if not isinstance(lf, dict) or not ("last_logits" in lf or "greedy" in lf):
            fail(f"{args.compare}: expected a JSON object with last_logits and/or greedy")

    try:
        import torch
        import transformers
        from transformers import AutoModelForCausalLM
    except ImportError as e:
        fail(f"cannot import torch/transformers ({e}); see the interpreter note at the top of this script")

    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    errors = []
    # transformers 5 names the argument dtype, 4.x torch_dtype
    dtype_arg = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
    try:
        model, info = AutoModelForCausalLM.from_pretrained(d, output_loading_info=True, attn_implementation="eager",
                                                           **{dtype_arg: torch.float32})
    except Exception as e:  # noqa: BLE001 -- whatever transformers raises is the finding
        fail(f"transformers cannot load {d}: {type(e).__name__}: {e}")
    model.eval()
    cfg = model.config
    missing = sorted(info.get("missing_keys", []))
    unexpected = sorted(info.get("unexpected_keys", []))
    if missing:
        errors.append(f"weights transformers expected but {d} lacks: {missing}")
    if unexpected:
        errors.append(f"weights in {d} transformers does not use: {unexpected}")
    if info.get("mismatched_keys"):
        errors.append(f"weights with the wrong shape: {info['mismatched_keys']}")
    if getattr(cfg, "tie_word_embeddings", False):
        out_w, in_w = model.get_output_embeddings(), model.get_input_embeddings()
        if out_w is not None and out_w.weight.data_ptr() != in_w.weight.data_ptr():
            errors.append("config says tie_word_embeddings but lm_head is not the embedding")

    vocab = cfg.vocab_size
    max_pos = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)
    bad = [t for t in prompt if not 0 <= t < vocab]
    if bad:
        fail(f"prompt ids outside [0, {vocab}): {bad[:8]}")
    if max_pos and len(prompt) > max_pos:
        fail(f"prompt of {len(prompt)} tokens is longer than max_position_embeddings {max_pos}")
    n_new = args.tokens if not max_pos else min(args.tokens, max_pos - len(prompt))

    with torch.no_grad():
        ids = torch.tensor([prompt], dtype=torch.long)
        logits = model(input_ids=ids, use_cache=False).logits[0, -1].float()
        last = [float(x) for x in logits.tolist()]
        greedy, margins = [], []
        ctx = ids
        step_logits = logits
        for _ in range(n_new):
            top2 = torch.topk(step_logits, 2).values if step_logits.numel() > 1 else step_logits
            margins.append(float(top2[0] - top2[-1]))
            nxt = int(torch.argmax(step_logits))
            greedy.append(nxt)
            ctx = torch.cat([ctx, torch.tensor([[nxt]], dtype=torch.long)], dim=1)
            step_logits = model(input_ids=ctx, use_cache=False).logits[0, -1].float()
    if not all(math.isfinite(x) for x in last):
        errors.append("non-finite logits")

    result = {
        "dir": d, "model_type": getattr(cfg, "model_type", None),
        "architectures": getattr(cfg, "architectures", None),
        "transformers_version": transformers.__version__, "torch_version": torch.__version__,
        "prompt": prompt, "last_logits": last, "greedy": greedy, "n_new": n_new,
        "missing_keys": missing, "unexpected_keys": unexpected,
    }

    if lf is not None:
        cmp = {}
        if "last_logits" in lf:
            other = lf["last_logits"]
            if not isinstance(other, list) or len(other) != len(last):
                errors.append(f"--compare last_logits: {len(other) if isinstance(other, list) else '?'} values, "
                              f"transformers has {len(last)}")
            else:
                worst, at = 0.0, -1
                for i, (a, b) in enumerate(zip(last, other)):
                    excess = abs(a - float(b)) - (args.atol + args.rtol * abs(a))
                    if not math.isfinite(float(b)) or excess > worst:
                        worst, at = (math.inf if not math.isfinite(float(b)) else excess), i
                cmp["max_abs_diff"] = max(abs(a - float(b)) for a, b in zip(last, other))
                cmp["logits_agree"] = at < 0
                if at >= 0:
                    errors.append(f"last_logits[{at}]: transformers {last[at]!r}, llmforge {other[at]!r} "
                                  f"(atol {args.atol}, rtol {args.rtol})")
        if "greedy" in lf:
            other = lf["greedy"]
            n = min(len(other), len(greedy)) if isinstance(other, list) else 0
            first_diff = next((i for i in range(n) if other[i] != greedy[i]), None)
            # after a near tie either token is right, and the continuations may part there
            tie = next((i for i in range(n) if margins[i] < 2 * args.atol), None)
            cmp["greedy_same_prefix"] = first_diff if first_diff is not None else n
            cmp["greedy_near_tie_at"] = tie
            if not isinstance(other, list) or (first_diff is not None and (tie is None or first_diff < tie)):
                errors.append(f"greedy continuations differ at position {first_diff}: transformers {greedy}, "
                              f"llmforge {other}")
            elif len(other) != len(greedy) and tie is None:
                errors.append(f"greedy: llmforge gave {len(other)} tokens, transformers {len(greedy)}")
        result["compare"] = cmp

    result["errors"] = errors
    result["ok"] = not errors
    text = json.dumps(result)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    for e in errors:
        print(f"check_hf_llama: {e}", file=sys.stderr)
    print("check_hf_llama: " + ("OK" if not errors else "MISMATCH"), file=sys.stderr)
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main())
