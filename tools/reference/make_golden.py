# Interpreter: /usr/bin/python3 with Debian's python3-torch (PyTorch 1.13) and python3-numpy.
#
# make_golden.py -- writes the golden-test fixture tests/fixtures/gpt2_golden.safetensors from
# the PyTorch reference model in gpt2_reference.py:
#   * a tiny GPT-2 (n_layer=2, n_head=4, n_embd=64, vocab=65, block=32, bias, dropout 0, fp32)
#     initialised with torch.manual_seed(42) and the GPT-2 init (std 0.02, c_proj weights
#     0.02/sqrt(2*n_layer), zero biases, layernorm weight 1);
#   * one batch (B=4, T=32): a random (B, T+1) token sequence drawn right after the init,
#     inputs = seq[:, :T], targets = seq[:, 1:], with targets[3, :5] = -1 (ignored);
#   * the first forward/backward: logits, loss, and every parameter gradient;
#   * 10 training steps on that same batch from the same initial weights, each:
#     zero_grad, forward, backward, clip_grad_norm_(1.0), AdamW(lr=1e-3, betas=(0.9, 0.99),
#     eps=1e-8, weight_decay=0.1 on tensors with dim >= 2 only).step().
#
# Tensors (all F32 except inputs/targets, which are I32):
#   param.<name>            initial weights, names as in gpt2_reference.py
#   inputs, targets         (B, T)
#   logits                  (B, T, V)
#   loss                    [1]
#   grad.<name>             gradients of the first forward/backward
#   losses10                [10]  loss of step i, computed before that step's update
#   grad_norms10            [10]  pre-clip global gradient norm of step i
#   params_after10.<name>   weights after the 10th update
#
# The safetensors file is written by hand (no safetensors package needed): u64 little-endian
# header length N, N bytes of JSON header padded with spaces to a multiple of 8, then the raw
# little-endian tensor data in header order.
#
# Usage:  /usr/bin/python3 tools/reference/make_golden.py [--out PATH]

import argparse
import json
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_reference import GPT, GPTConfig  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

SEED = 42
INIT_STD = 0.02  # standard GPT-2 init; clipping triggers at every one of the 10 steps with it
B, T = 4, 32
LR, BETA1, BETA2, EPS, WEIGHT_DECAY, GRAD_CLIP = 1e-3, 0.9, 0.99, 1e-8, 0.1, 1.0
STEPS = 10


def write_safetensors(path, tensors, metadata):
    """tensors: list of (name, np.ndarray float32/int32), written in this order."""
    header = {}
    blobs = []
    offset = 0
    for name, arr in tensors:
        if arr.dtype == np.float32:
            dtype = "F32"
        elif arr.dtype == np.int32:
            dtype = "I32"
        else:
            raise TypeError(f"{name}: unsupported dtype {arr.dtype}")
        data = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * ((-len(hjson)) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def read_safetensors(path):
    """Minimal reader used to check the file just written."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    assert n % 8 == 0
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    base = 8 + n
    out = {}
    expect = 0
    for name, h in header.items():
        b, e = h["data_offsets"]
        assert b == expect, f"{name}: data not contiguous in header order"
        expect = e
        dt = {"F32": "<f4", "I32": "<i4"}[h["dtype"]]
        out[name] = np.frombuffer(raw[base + b:base + e], dtype=dt).reshape(h["shape"])
    assert base + expect == len(raw), "trailing bytes after the data region"
    return out, meta


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "fixtures",
                                                  "gpt2_golden.safetensors"))
    args = ap.parse_args()

    torch.set_num_threads(1)  # keeps the reduction order, hence the fixture, reproducible
    cfg = GPTConfig(block_size=32, vocab_size=65, n_layer=2, n_head=4, n_embd=64,
                    dropout=0.0, bias=True)
    torch.manual_seed(SEED)
    model = GPT(cfg, init_std=INIT_STD)
    seq = torch.randint(0, cfg.vocab_size, (B, T + 1), dtype=torch.long)
    inputs = seq[:, :T].contiguous()
    targets = seq[:, 1:].clone()
    targets[3, :5] = -1

    names = [n for n, _ in model.named_parameters()]
    params0 = {n: p.detach().clone() for n, p in model.named_parameters()}

    # first forward/backward
    logits, loss = model(inputs, targets)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    logits = logits.detach().clone()
    loss0 = loss.detach().clone()

    # 10 training steps from the same initial weights on the same batch
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(params0[n])
    model.zero_grad(set_to_none=True)
    opt = model.configure_optimizers(WEIGHT_DECAY, LR, (BETA1, BETA2), eps=EPS)
    losses, norms = [], []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        _, l = model(inputs, targets)
        l.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        opt.step()
        losses.append(l.item())
        norms.append(norm.item())
    assert abs(losses[0] - loss0.item()) == 0.0 or abs(losses[0] - loss0.item()) < 1e-6
    clipped = [i for i, g in enumerate(norms) if g > GRAD_CLIP]
    if 0 not in clipped:
        raise SystemExit("gradient clipping does not trigger at step 0; raise INIT_STD")

    f32 = lambda t: t.detach().cpu().numpy().astype(np.float32)  # noqa: E731
    tensors = [("param." + n, f32(params0[n])) for n in names]
    tensors += [("inputs", inputs.numpy().astype(np.int32)),
                ("targets", targets.numpy().astype(np.int32)),
                ("logits", f32(logits)),
                ("loss", np.array([loss0.item()], dtype=np.float32))]
    tensors += [("grad." + n, f32(grads[n])) for n in names]
    tensors += [("losses10", np.array(losses, dtype=np.float32)),
                ("grad_norms10", np.array(norms, dtype=np.float32))]
    tensors += [("params_after10." + n, f32(p)) for n, p in model.named_parameters()]

    metadata = {
        "format": "llmforge gpt2 golden v1",
        "generator": "tools/reference/make_golden.py",
        "n_layer": cfg.n_layer, "n_head": cfg.n_head, "n_embd": cfg.n_embd,
        "vocab_size": cfg.vocab_size, "block_size": cfg.block_size,
        "bias": str(cfg.bias).lower(), "dropout": cfg.dropout, "layernorm_eps": 1e-5,
        "B": B, "T": T, "seed": SEED, "init_std": INIT_STD,
        "lr": LR, "beta1": BETA1, "beta2": BETA2, "eps": EPS,
        "weight_decay": WEIGHT_DECAY, "weight_decay_applies_to": "tensors with dim>=2",
        "grad_clip": GRAD_CLIP, "steps": STEPS,
        "clipped_steps": ",".join(str(i) for i in clipped),
        "ignore_index": -1, "loss": "mean cross-entropy over targets != -1",
        "adamw": "torch.optim.AdamW: p*=1-lr*wd; m,v updated; "
                 "p-=lr*(m/(1-b1^t))/(sqrt(v)/sqrt(1-b2^t)+eps)",
        "torch_version": torch.__version__,
    }

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write_safetensors(args.out, tensors, metadata)

    # read back and compare
    back, meta = read_safetensors(args.out)
    assert list(back.keys()) == [n for n, _ in tensors]
    for n, a in tensors:
        assert np.array_equal(back[n], a), n
    assert meta["torch_version"] == torch.__version__

    size = os.path.getsize(args.out)
    print(f"wrote {args.out}: {len(tensors)} tensors, {size} bytes")
    print(f"loss {loss0.item():.6f}")
    print("losses10     " + " ".join(f"{x:.4f}" for x in losses))
    print("grad_norms10 " + " ".join(f"{x:.4f}" for x in norms))
    print(f"clipping triggered at steps: {clipped}")


if __name__ == "__main__":
    main()
