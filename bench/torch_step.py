# Interpreter: the benchmarks' virtual environment, $LF_BENCH_PYTHON from bench/venv.sh (PyPI's
# PyTorch 2.x, MKL); bench/gpt2_step.sh runs it.
#
# torch_step.py -- PyTorch side of the training-step throughput benchmark.
# Times full training steps (zero_grad, forward, backward, clip_grad_norm_ 1.0, AdamW step) of
# the reference GPT-2 (tools/reference/gpt2_reference.py) on random tokens, default preset
# GPT-2 124M (12 layers, 12 heads, n_embd 768, vocab 50304, block 1024, bias, dropout 0),
# AdamW lr 6e-4, betas (0.9, 0.95), weight_decay 0.1 on dim >= 2 tensors (torch.optim.AdamW with
# its defaults, as nanoGPT on CPU: fused=True is CUDA-only there).
# Attention: --attention sdpa (default) is nanoGPT's on PyTorch 2.x,
# F.scaled_dot_product_attention(is_causal=True) (bench/torch_common.py); --attention manual keeps
# the reference's written-out softmax(q k^T) v, nanoGPT's path on PyTorch < 2.0.
# Eager mode: nanoGPT compiles (torch.compile) by default on GPU, but its CPU recipe runs
# --compile=False, and that is what is timed here. Threads: torch.set_num_threads(--threads), no
# environment variables set; no anomaly detection, no deterministic mode, no profiler.
#
# Prints per-step timings, then ONE JSON line:
#   {"impl":"pytorch","ms_per_step":median,"tokens_per_sec":...,"model_flops_per_sec":...,
#    "torch_version":...,"blas":...,"mkl_available":...,...}
# ms_per_step is the median over the --steps timed steps (after --warmup untimed ones);
# tokens_per_sec = micro_batch*seq / (ms_per_step/1000);
# model_flops_per_sec = tokens_per_sec * (6*N + 12*n_layer*n_embd*seq), N = parameter count
# without wpe.
# --bf16 runs forward+loss under torch.autocast('cpu', dtype=torch.bfloat16) (weights, grads
# and optimizer stay fp32).
#
# Usage:  $LF_BENCH_PYTHON bench/torch_step.py [--micro-batch 4] [--seq 256] [--steps 10]
#             [--warmup 2] [--threads 2] [--preset gpt2-124m] [--bf16] [--attention sdpa|manual]

import argparse
import json
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools", "reference"))
from gpt2_reference import GPT, GPTConfig, model_flops_per_token  # noqa: E402
from torch_common import describe, describe_line, env_tuning, use_sdpa  # noqa: E402

PRESETS = {
    "gpt2-124m": dict(n_layer=12, n_head=12, n_embd=768, vocab_size=50304, block_size=1024),
    "gpt2-350m": dict(n_layer=24, n_head=16, n_embd=1024, vocab_size=50304, block_size=1024),
    # small, for checking that the script works
    "tiny": dict(n_layer=2, n_head=4, n_embd=128, vocab_size=512, block_size=256),
}


def main():
    ap = argparse.ArgumentParser(description="time GPT-2 training steps in PyTorch")
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="gpt2-124m")
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--attention", choices=("sdpa", "manual"), default="sdpa")
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda: the GPU peer of scripts/gpu-check.sh "
                    "(fp32 matmuls without TF32, as llmforge's cuda backend computes them)")
    args = ap.parse_args()
    dev = torch.device(args.device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    cfg = GPTConfig(dropout=0.0, bias=True, **PRESETS[args.preset])
    if args.seq > cfg.block_size:
        raise SystemExit(f"--seq {args.seq} > block_size {cfg.block_size}")
    B, T = args.micro_batch, args.seq

    model = GPT(cfg).to(dev)
    if args.attention == "sdpa":
        use_sdpa(model)
    model.train()
    optimizer = model.configure_optimizers(0.1, 6e-4, (0.9, 0.95))
    params = list(model.parameters())
    flops_per_token = model_flops_per_token(model, T)
    print(f"preset {args.preset}: {model.num_params() / 1e6:.2f}M parameters (excluding wpe), "
          f"B={B} T={T} bf16={args.bf16} attention={args.attention} "
          f"threads={torch.get_num_threads()}; environment: {env_tuning() or 'no tuning variables'}",
          flush=True)
    info = describe()
    print(describe_line(info), flush=True)

    def step():
        seq = torch.randint(cfg.vocab_size, (B, T + 1), device=dev)
        x, y = seq[:, :T].contiguous(), seq[:, 1:].contiguous()
        optimizer.zero_grad(set_to_none=True)
        if args.bf16:
            with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
                _, loss = model(x, y)
        else:
            _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        return loss.item()  # a host sync: the step's GPU work is finished when it returns

    times = []
    for i in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        loss = step()
        ms = (time.perf_counter() - t0) * 1000.0
        timed = i >= args.warmup
        if timed:
            times.append(ms)
        print(f"step {i}{'' if timed else ' (warmup)'}: loss {loss:.4f}, time {ms:.1f}ms",
              flush=True)

    if not times:
        raise SystemExit("no timed steps (--steps 0)")
    ms_per_step = statistics.median(times)
    tokens_per_sec = B * T / (ms_per_step / 1000.0)
    result = {
        "impl": "pytorch",
        "ms_per_step": round(ms_per_step, 3),
        "tokens_per_sec": round(tokens_per_sec, 2),
        "model_flops_per_sec": round(tokens_per_sec * flops_per_token, 1),
        "flops_per_token": flops_per_token,
        "preset": args.preset,
        "micro_batch": B,
        "seq": T,
        "steps": len(times),
        "bf16": args.bf16,
        "threads": torch.get_num_threads(),
        "attention": args.attention,
        "device": str(dev) if dev.type == "cpu" else torch.cuda.get_device_name(dev),
        "torch_version": info["torch_version"],
        "blas": info["blas"],
        "mkl_available": info["mkl_available"],
        "onednn_version": info["onednn_version"],
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
