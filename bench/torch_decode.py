# Interpreter: the benchmarks' virtual environment, $LF_BENCH_PYTHON from bench/venv.sh (PyPI's
# PyTorch 2.x and transformers); bench/decode.sh runs it.
#
# torch_decode.py -- transformers side of the single-stream decoding benchmark.
# Loads a checkpoint directory llmforge wrote (model.safetensors + config.json, Hugging Face names
# and layout; GPT2LMHeadModel or LlamaForCausalLM) with AutoModelForCausalLM.from_pretrained(DIR)
# in float32 and the attention transformers picks by default ("sdpa" on PyTorch 2.x), then
# greedy-decodes --max-new-tokens tokens after the given prompt ids:
#   model.generate(input_ids, max_new_tokens=N, min_new_tokens=N, do_sample=False, use_cache=True)
# What a user would run on a CPU: eager mode, torch.set_num_threads(--threads), no environment
# variables set.
# End of text: llmforge's generation never stops early, so neither may this side. The configs
# llmforge writes name no eos_token_id, and transformers then falls back to its config class's
# defaults (GPT-2 50256, Llama 2): with min_new_tokens those ids would be masked to -inf for all
# N steps and the greedy tokens could differ from llmforge's for no reason of arithmetic. The
# generation config's eos_token_id is therefore set to None (pad_token_id to 0, only to silence
# the warning; one sequence, no padding), so min_new_tokens has nothing to mask and both sides
# take the plain argmax over the whole vocabulary.
# Timing: a streamer records when each token arrives. generate() hands it the prompt first, then
# every new token; first_token_ms is the time from the call to the first new token (the prompt's
# forward, prefill, and its argmax), decode_tokens_per_sec = (N - 1) / (time of the last token -
# time of the first), the same definitions as `llmforge sample --json`. One untimed warm-up
# generate of --warmup-tokens tokens first (lazy initialisation inside PyTorch and transformers;
# llmforge has none to pay).
#
# --compare FILE (the `llmforge sample --json` output for the same prompt) adds "agreement": how
# many of the greedy tokens are equal (all of them, and the length of the equal prefix), how many
# distinct tokens transformers generated, and the logits of the last prompt position of both sides
# (transformers from one forward of the prompt, llmforge's last_logits): their largest absolute
# difference, the largest logit, whether the argmax is the same, and the gap between the top two.
# Greedy paths of random weights sit near ties, so the benchmark reports these and does not fail.
#
# Prints ONE JSON line:
#   {"impl":"transformers","first_token_ms":...,"decode_tokens_per_sec":...,"total_ms":...,
#    "generated":[ids],"num_params":...,"attention":"sdpa","torch_version":...,...}
#
# Usage:  $LF_BENCH_PYTHON bench/torch_decode.py --ckpt DIR --ids 1,2,3 [--max-new-tokens 256]
#             [--threads 2] [--warmup-tokens 8]

import argparse
import copy
import json
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from torch_common import describe, env_tuning  # noqa: E402

import transformers  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402
from transformers.generation.streamers import BaseStreamer  # noqa: E402


class Clock(BaseStreamer):
    """Arrival time of every new token (generate() puts the prompt first, then one token a step)."""

    def __init__(self):
        self.prompt_seen = False
        self.times = []

    def put(self, value):
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        self.times.append(time.perf_counter())

    def end(self):
        pass


def main():
    ap = argparse.ArgumentParser(description="time greedy decoding in transformers")
    ap.add_argument("--ckpt", required=True, help="directory with model.safetensors and config.json")
    ap.add_argument("--ids", required=True, help="prompt token ids, comma-separated")
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup-tokens", type=int, default=8)
    ap.add_argument("--compare", metavar="FILE",
                    help="`llmforge sample --json` output for the same prompt: report agreement with it")
    args = ap.parse_args()
    if args.max_new_tokens < 2:
        raise SystemExit("--max-new-tokens must be >= 2 (the decode rate needs two tokens)")

    torch.set_num_threads(args.threads)
    try:
        prompt = [int(t) for t in args.ids.replace(" ", ",").split(",") if t]
    except ValueError:
        raise SystemExit(f"--ids: '{args.ids}' is not a list of token ids")
    model = AutoModelForCausalLM.from_pretrained(args.ckpt, dtype=torch.float32)
    model.eval()
    if model.dtype != torch.float32:
        raise SystemExit(f"model dtype {model.dtype}, expected float32")
    vocab = model.get_output_embeddings().weight.shape[0]
    if max(prompt) >= vocab:
        raise SystemExit(f"--ids: token {max(prompt)} is outside the model's vocabulary of {vocab}")
    x = torch.tensor([prompt], dtype=torch.long)
    n = args.max_new_tokens

    def generate(new, streamer=None):
        gc = copy.deepcopy(model.generation_config)
        gc.update(max_new_tokens=new, min_new_tokens=new, do_sample=False, use_cache=True, eos_token_id=None,
                  pad_token_id=0)
        with torch.inference_mode():
            return model.generate(x, attention_mask=torch.ones_like(x), generation_config=gc, streamer=streamer)

    if args.warmup_tokens > 0:
        generate(args.warmup_tokens)
    clock = Clock()
    t0 = time.perf_counter()
    out = generate(n, clock)
    t_end = time.perf_counter()
    generated = out[0, len(prompt):].tolist()
    if len(generated) != n or len(clock.times) != n:
        raise SystemExit(f"generate returned {len(generated)} tokens ({len(clock.times)} streamed), expected {n}")
    info = describe()
    agreement = None
    if args.compare:
        with open(args.compare) as f:
            lf = json.load(f)
        if lf.get("prompt") != prompt:
            raise SystemExit(f"--compare {args.compare}: its prompt is not this one")
        with torch.inference_mode():
            logits = model(x).logits[0, -1].double()
        ref = torch.tensor(lf["last_logits"], dtype=torch.float64)
        if ref.numel() != logits.numel():
            raise SystemExit(f"--compare {args.compare}: {ref.numel()} logits, the model has {logits.numel()}")
        lg = lf["generated"]
        prefix = next((i for i, (a, b) in enumerate(zip(lg, generated)) if a != b), min(len(lg), len(generated)))
        agreement = {
            "tokens_compared": min(len(lg), len(generated)),
            "agree_prefix": prefix,
            "agree_count": sum(a == b for a, b in zip(lg, generated)),
            "distinct_tokens": len(set(generated)),
            "last_logits_max_abs_diff": float((logits - ref).abs().max()),
            "last_logits_max_abs": float(logits.abs().max()),
            "last_logits_argmax_equal": int(logits.argmax()) == int(ref.argmax()),
            # gap between the two largest logits (of transformers): greedy can part at a near-tie
            "last_logits_top2_gap": float(logits.topk(2).values.diff().abs()[0]),
        }
    result = {
        "impl": "transformers",
        "first_token_ms": round((clock.times[0] - t0) * 1e3, 3),
        "decode_tokens_per_sec": round((n - 1) / (clock.times[-1] - clock.times[0]), 3),
        "total_ms": round((t_end - t0) * 1e3, 3),
        "prompt_tokens": len(prompt),
        "new_tokens": n,
        "generated": generated,
        "agreement": agreement,
        "num_params": sum(p.numel() for p in model.parameters()),
        "model_class": type(model).__name__,
        "attention": model.config._attn_implementation,
        "threads": torch.get_num_threads(),
        "environment": env_tuning(),
        "torch_version": info["torch_version"],
        "transformers_version": transformers.__version__,
        "blas": info["blas"],
        "onednn_version": info["onednn_version"],
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
