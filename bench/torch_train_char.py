# Interpreter: the benchmarks' virtual environment, $LF_BENCH_PYTHON from bench/venv.sh (PyPI's
# PyTorch 2.x, MKL, and numpy); bench/shakespeare_char.sh runs it.
#
# torch_train_char.py -- PyTorch side of the character-level training benchmark.
# Trains the reference GPT-2 (tools/reference/gpt2_reference.py) with nanoGPT's training loop
# and its CPU "train_shakespeare_char" settings on the SAME prepared data llmforge trains on:
# DATA_DIR/train.bin and DATA_DIR/val.bin in llmforge's token-shard format (64-byte header,
# see include/llmforge/data.h; tokens from byte 64).
#
#   n_layer 4, n_head 4, n_embd 128, block_size 64, batch_size 12, dropout 0, bias True,
#   AdamW lr 1e-3, betas (0.9, 0.99), weight_decay 0.1 (dim >= 2 tensors), grad_clip 1.0,
#   warmup 100, cosine decay to min_lr 1e-4 at lr_decay_iters (default: = --iters, like the
#   config's 2000 = max_iters), eval every 250 iterations (and at 0) on 20 batches per split.
#
# That is nanoGPT's README recipe for a CPU (`python train.py config/train_shakespeare_char.py
# --device=cpu --compile=False --eval_iters=20 --log_interval=1 --block_size=64 --batch_size=12
# --n_layer=4 --n_head=4 --n_embd=128 --max_iters=2000 --lr_decay_iters=2000 --dropout=0.0`):
# eager mode (nanoGPT compiles by default only where its GPU recipe runs; on CPU it says
# --compile=False), fp32 (nanoGPT's autocast context is a nullcontext on CPU), torch.optim.AdamW
# with its defaults (fused=True is CUDA-only in nanoGPT). Attention: --attention sdpa (default)
# is nanoGPT's on PyTorch 2.x, F.scaled_dot_product_attention(is_causal=True)
# (bench/torch_common.py); --attention manual keeps the reference's written-out softmax(q k^T) v.
# The model is the reference GPT (Conv1D weight layout (in, out) where nanoGPT has nn.Linear's
# (out, in): the same products; GELU tanh approximation where nanoGPT's nn.GELU is exact).
#
# Iterations are 0 .. N-1 (N optimizer steps). After the last one the losses are estimated
# again, then ONE JSON line is printed:
#   {"impl":"pytorch","median_ms_per_iter":...,"final_val_loss":...,"final_train_loss":...,
#    "iters":N, ...}
# median_ms_per_iter excludes the first 10 iterations and the iterations that ran an eval;
# final_*_loss come from estimate_loss() after the last iteration.
#
# Threads: torch.set_num_threads(--threads); nothing is set in the environment (what the caller
# set is printed). No anomaly detection, no deterministic mode, no profiler.
#
# Usage:  $LF_BENCH_PYTHON bench/torch_train_char.py DATA_DIR [--iters 2000] [--threads 2]
#             [--attention sdpa|manual]

import argparse
import json
import math
import os
import statistics
import struct
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools", "reference"))
from gpt2_reference import GPT, GPTConfig, model_flops_per_token  # noqa: E402
from torch_common import describe, describe_line, env_tuning, use_sdpa  # noqa: E402

SHARD_MAGIC = b"LFSHARD\0"
SHARD_HEADER = 64


def open_shard(path):
    """Memory-map the tokens of an llmforge shard; returns (tokens, vocab_size)."""
    with open(path, "rb") as f:
        head = f.read(SHARD_HEADER)
    if len(head) < SHARD_HEADER or head[:8] != SHARD_MAGIC:
        raise SystemExit(f"{path}: not an llmforge token shard (bad magic)")
    version, bytes_per_token, n_tokens, flags, vocab_size = struct.unpack_from("<IIQII", head, 8)
    if version != 1:
        raise SystemExit(f"{path}: unsupported shard version {version}")
    dtype = {2: np.uint16, 4: np.uint32}.get(bytes_per_token)
    if dtype is None:
        raise SystemExit(f"{path}: bad bytes_per_token {bytes_per_token}")
    need = SHARD_HEADER + n_tokens * bytes_per_token + (n_tokens if flags & 1 else 0)
    if os.path.getsize(path) != need:
        raise SystemExit(f"{path}: size {os.path.getsize(path)} != {need} from the header")
    data = np.memmap(path, dtype=dtype, mode="r", offset=SHARD_HEADER, shape=(n_tokens,))
    return data, vocab_size


def main():
    ap = argparse.ArgumentParser(description="nanoGPT shakespeare_char training in PyTorch")
    ap.add_argument("data_dir")
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lr-decay-iters", type=int, default=None,
                    help="cosine decay length (default: --iters)")
    ap.add_argument("--eval-interval", type=int, default=250)
    ap.add_argument("--eval-iters", type=int, default=20)
    ap.add_argument("--log-interval", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--attention", choices=("sdpa", "manual"), default="sdpa")
    args = ap.parse_args()

    # nanoGPT config/train_shakespeare_char.py with its CPU adjustments from the README
    n_layer, n_head, n_embd, block_size, batch_size = 4, 4, 128, 64, 12
    dropout, bias = 0.0, True
    learning_rate, min_lr, warmup_iters = 1e-3, 1e-4, 100
    beta1, beta2, weight_decay, grad_clip = 0.9, 0.99, 0.1, 1.0
    max_iters = args.iters
    lr_decay_iters = args.lr_decay_iters if args.lr_decay_iters is not None else max_iters

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    train_data, vocab_train = open_shard(os.path.join(args.data_dir, "train.bin"))
    val_data, vocab_val = open_shard(os.path.join(args.data_dir, "val.bin"))
    if vocab_train != vocab_val:
        raise SystemExit(f"vocab_size differs: train {vocab_train}, val {vocab_val}")
    vocab_size = vocab_train
    for name, d in (("train", train_data), ("val", val_data)):
        if len(d) <= block_size + 1:
            raise SystemExit(f"{name}.bin has only {len(d)} tokens (need > {block_size + 1})")
    print(f"data: train {len(train_data)} tokens, val {len(val_data)} tokens, "
          f"vocab_size {vocab_size}; threads {torch.get_num_threads()}, attention {args.attention}; "
          f"environment: {env_tuning() or 'no tuning variables'}", flush=True)
    info = describe()
    print(describe_line(info), flush=True)

    def get_batch(split):
        data = train_data if split == "train" else val_data
        ix = torch.randint(len(data) - block_size, (batch_size,))
        x = torch.stack([torch.from_numpy(data[i:i + block_size].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + block_size].astype(np.int64))
                         for i in ix])
        return x, y

    cfg = GPTConfig(block_size=block_size, vocab_size=vocab_size, n_layer=n_layer,
                    n_head=n_head, n_embd=n_embd, dropout=dropout, bias=bias)
    model = GPT(cfg)
    if args.attention == "sdpa":
        use_sdpa(model)
    print(f"parameters: {model.num_params() / 1e6:.2f}M (excluding wpe)", flush=True)
    optimizer = model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2))

    @torch.no_grad()
    def estimate_loss():
        out = {}
        model.eval()
        for split in ("train", "val"):
            losses = torch.zeros(args.eval_iters)
            for k in range(args.eval_iters):
                X, Y = get_batch(split)
                _, loss = model(X, Y)
                losses[k] = loss.item()
            out[split] = losses.mean().item()
        model.train()
        return out

    def get_lr(it):
        if it < warmup_iters:  # linear warmup
            return learning_rate * (it + 1) / (warmup_iters + 1)
        if it > lr_decay_iters:
            return min_lr
        ratio = (it - warmup_iters) / max(1, lr_decay_iters - warmup_iters)
        coeff = 0.5 * (1.0 + math.cos(math.pi * ratio))  # 1 -> 0
        return min_lr + coeff * (learning_rate - min_lr)

    step_ms = []      # (iter, ms) of the training work of each iteration
    eval_iters_set = set()
    last_loss = float("nan")
    model.train()
    for it in range(max_iters):
        lr = get_lr(it)
        for group in optimizer.param_groups:
            group["lr"] = lr
        if it % args.eval_interval == 0:
            te = time.perf_counter()
            losses = estimate_loss()
            eval_iters_set.add(it)
            print(f"step {it}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}"
                  f" (eval {1000 * (time.perf_counter() - te):.0f}ms)", flush=True)
        t0 = time.perf_counter()
        X, Y = get_batch("train")
        _, loss = model(X, Y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if grad_clip != 0.0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        last_loss = loss.item()
        dt = time.perf_counter() - t0
        step_ms.append((it, dt * 1000.0))
        if it % args.log_interval == 0:
            print(f"iter {it}: loss {last_loss:.4f}, time {dt * 1000:.2f}ms, lr {lr:.2e}",
                  flush=True)

    final = estimate_loss()
    print(f"step {max_iters}: train loss {final['train']:.4f}, val loss {final['val']:.4f}",
          flush=True)
    timed = [ms for it, ms in step_ms if it >= 10 and it not in eval_iters_set]
    if not timed:  # fewer than 11 iterations: fall back to whatever there is
        timed = [ms for _, ms in step_ms]
    result = {
        "impl": "pytorch",
        "median_ms_per_iter": round(statistics.median(timed), 4) if timed else None,
        "final_val_loss": round(final["val"], 6),
        "final_train_loss": round(final["train"], 6),
        "iters": max_iters,
        "last_iter_loss": round(last_loss, 6),
        "threads": torch.get_num_threads(),
        "flops_per_token": model_flops_per_token(model, block_size),
        "attention": args.attention,
        "torch_version": info["torch_version"],
        "blas": info["blas"],
        "mkl_available": info["mkl_available"],
        "onednn_version": info["onednn_version"],
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
