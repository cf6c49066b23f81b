# Interpreter: the venv /root/.cache/llmforge/bench-venv (PyTorch 2.15, transformers 5.25,
# safetensors). Nothing is downloaded and no model is rebuilt: the script reads the committed
# fixture directories.
#
# make_hf_steps_fixtures.py -- adds five training steps of transformers to every committed
# Hugging Face fixture directory (tests/fixtures/hf_rope/*, hf_family/*, hf_direct), as a
# "steps" entry in its expected.json; tests/model/test_hf_steps.c runs the same steps through
# llmforge's model and optimizer and compares. Every other entry of expected.json is left
# byte-for-byte as it was (checked: the file is re-serialised in its own format and must equal
# the committed text before "steps" is added), so the generators that wrote the fixtures
# (make_hf_rope_fixtures.py, make_hf_family_fixtures.py, make_hf_direct_fixture.py) need not be
# run again; after running one of them, run this script again.
#
# The model: from_pretrained(dir, dtype=float32, eager attention) (the weights are bf16, exact in
# fp32), train() mode (every dropout of the fixtures is 0). A variant whose expected.json names
# "weights_from" reads that directory's model.safetensors with its own config.json.
#
# The steps, as llmforge's trainer makes them (src/train/optim.c, src/backend/cpu/cpu_optim.c,
# docs/training.md) with its default optimizer settings and a constant learning rate:
#   zero_grad; loss = F.cross_entropy(logits.view(-1, V), targets.view(-1), ignore_index=-100)
#   (the mean over the valid targets); backward; norm = clip_grad_norm_(params, GRAD_CLIP)
#   (coef min(1, max_norm / (norm + 1e-6)), as llmforge folds into the update);
#   torch.optim.AdamW(lr=LR, betas=BETAS, eps=EPS, foreach=False) with weight_decay WD on the
#   parameters of >= 2 dims and 0 on the rest (llmforge's parameter table: nanoGPT's rule; HF
#   lists a tied embedding once, as llmforge holds it once).
#   lr 1e-3: at 1e-2 two fp32 runs of the same steps part chaotically (loss differences x6 a
#   step), which would test the trajectory's conditioning rather than llmforge.
# Batches: B=2 rows of T=64 tokens per step, a different batch at each step. For the prompt
# fixtures the rows are windows of the fixture's 90-token prompt (inputs prompt[s:s+64],
# targets prompt[s+1:s+65]) at starts 4k and 25-4k for step k, so positions run past the
# scaled-RoPE types' original 32 (and dynamic's max_position_embeddings 32: every forward is
# rotated with the NTK table of length 64); for hf_direct (a 23-token prompt) the rows are
# randint(0, tokenizer_size) under seed STEPS_SEED. Row 1's first IGNORED targets are -100
# (ignored), so the mean runs over 2*64-3 = 125 targets.
# Recorded ("steps"): the settings, each step's inputs and targets, the loss before each update,
# the gradient norm that clipping saw, and per parameter the weighted sums over the flat index of
# the total update u = p_after5 - p_before (fp64 from fp32): [sum(u[i] * ((i % 13) + 1)),
# sum(|u[i]| * ((i % 13) + 1))].
#
# Deterministic: torch.set_num_threads(1), fixed data; transformers' forward on the same weights.
#
# Usage:  /root/.cache/llmforge/bench-venv/bin/python tools/reference/make_hf_steps_fixtures.py
#         [--fixtures tests/fixtures]

import argparse
import json
import os
import shutil
import tempfile

import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DIRS = ["hf_rope/llama3", "hf_rope/yarn", "hf_rope/linear", "hf_rope/dynamic", "hf_rope/yarn4x",
        "hf_rope/headdim", "hf_family/qwen3", "hf_family/phi3", "hf_direct"]
STEPS, B, T, IGNORED = 5, 2, 64, 3
LR, BETAS, EPS, WD, GRAD_CLIP = 1e-3, (0.9, 0.99), 1e-8, 0.1, 1.0
STEPS_SEED = 5
SUM_WEIGHT_MOD = 13


def r9(v):
    return float("%.9g" % float(v))


def batches(exp):
    out = []
    if "prompt_ids" in exp:  # hf_direct: random ids of its tokenizer
        g = torch.Generator().manual_seed(STEPS_SEED)
        for _ in range(STEPS):
            seq = torch.randint(0, exp["tokenizer_size"], (B, T + 1), generator=g).tolist()
            out.append(([r[:T] for r in seq], [r[1:] for r in seq]))
    else:
        p = exp["prompt"]
        assert len(p) >= 25 + T + 1
        for k in range(STEPS):
            rows = [p[s:s + T + 1] for s in (4 * k, 25 - 4 * k)]
            out.append(([r[:T] for r in rows], [r[1:] for r in rows]))
    for _, tg in out:
        tg[1][:IGNORED] = [-100] * IGNORED
    return out


def weighted_sums(u):
    u = u.detach().double().reshape(-1)
    w = (torch.arange(u.numel(), dtype=torch.float64) % SUM_WEIGHT_MOD) + 1
    return [r9((u * w).sum()), r9((u.abs() * w).sum())]


def train(d, data):
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    model.train()
    named = list(model.named_parameters())
    before = {n: p.detach().clone() for n, p in named}
    opt = torch.optim.AdamW([{"params": [p for _, p in named if p.dim() >= 2], "weight_decay": WD},
                             {"params": [p for _, p in named if p.dim() < 2], "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=EPS, foreach=False)
    losses, norms = [], []
    for inp, tg in data:
        opt.zero_grad(set_to_none=True)
        logits = model(input_ids=torch.tensor(inp)).logits
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), torch.tensor(tg).reshape(-1), ignore_index=-100)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_([p for _, p in named], GRAD_CLIP, foreach=False)
        opt.step()
        losses.append(r9(loss.item()))
        norms.append(r9(norm))
    updates = {n: weighted_sums(p.detach() - before[n]) for n, p in named}
    return losses, norms, updates


def model_dir(root, rel, exp, tmp):
    d = os.path.join(root, rel)
    if "weights_from" not in exp:
        return d
    t = os.path.join(tmp, rel.replace("/", "_"))
    os.makedirs(t)
    shutil.copy(os.path.join(d, "config.json"), t)
    shutil.copy(os.path.join(os.path.dirname(d), exp["weights_from"], "model.safetensors"), t)
    return t


def dump(exp, indented):
    if indented:
        return json.dumps(exp, indent=1) + "\n"
    return json.dumps(exp, separators=(",", ":")) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixtures", default=os.path.join(REPO, "tests", "fixtures"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        for rel in DIRS:
            path = os.path.join(args.fixtures, rel, "expected.json")
            with open(path) as f:
                text = f.read()
            exp = json.loads(text)
            exp.pop("steps", None)
            indented = text.startswith("{\n")
            if "steps" not in json.loads(text):  # the other entries must come back byte for byte
                assert dump(exp, indented) == text, f"{path}: re-serialising changes the file"
            data = batches(exp)
            losses, norms, updates = train(model_dir(args.fixtures, rel, exp, tmp), data)
            exp["steps"] = {"lr": LR, "betas": list(BETAS), "eps": EPS, "weight_decay": WD, "grad_clip": GRAD_CLIP,
                            "schedule": "constant", "decay": "tensors with >= 2 dims",
                            "inputs": [b[0] for b in data], "targets": [b[1] for b in data],
                            "losses": losses, "grad_norms": norms, "updates": updates}
            with open(path, "w") as f:
                f.write(dump(exp, indented))
            print(f"{rel}: losses {losses}, grad norms {norms}")


if __name__ == "__main__":
    main()
