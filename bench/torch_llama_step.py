# Interpreter: the benchmarks' virtual environment, $LF_BENCH_PYTHON from bench/venv.sh (PyPI's
# PyTorch 2.x and transformers); bench/llama_step.sh runs it.
#
# torch_llama_step.py -- transformers side of the Llama training-step throughput benchmark.
# Times full training steps (zero_grad, forward, loss, backward, clip_grad_norm_ 1.0, AdamW step)
# of a transformers LlamaForCausalLM built from a LlamaConfig (random init, HF's own
# _init_weights) on random tokens. Default preset smollm-135m, the shape of
# HuggingFaceTB/SmolLM-135M and of `llmforge bench --preset smollm-135m`: 30 layers, hidden 576,
# 9 heads, 3 KV heads, intermediate 1536 (SwiGLU), vocab 49152, tied embeddings, rope_theta 10000,
# rms_norm_eps 1e-5, no biases.
#
# What a user of transformers would run on a CPU: eager mode (no torch.compile),
# attn_implementation "sdpa" (transformers' default when PyTorch has it; F.scaled_dot_product_attention
# with the causal mask), torch.optim.AdamW with its defaults for the implementation (foreach;
# fused is not the CPU default), lr 6e-4, betas (0.9, 0.95), weight_decay 0.1 on dim >= 2 tensors
# (nanoGPT's grouping), clip 1.0. Threads: torch.set_num_threads(--threads); no environment
# variables set; no anomaly detection, no deterministic mode, no profiler.
# Loss: the logits of all T positions against T next tokens, F.cross_entropy on fp32 logits, the
# same quantity `llmforge bench` trains on (B x T inputs, B x T targets). transformers' own
# labels= path shifts by one inside the model (T-1 targets) and upcasts the logits to fp32 the
# same way; the explicit loss keeps the token count equal on both sides.
# --bf16: forward and loss under torch.autocast("cpu", dtype=torch.bfloat16); weights, grads and
# optimizer state stay fp32 (as llmforge --bf16: bf16 operands, fp32 master weights).
#
# Prints per-step timings, then ONE JSON line:
#   {"impl":"transformers","ms_per_step":median,"tokens_per_sec":...,"model_flops_per_sec":...,
#    "flops_per_token":...,"num_params":...,"torch_version":...,"transformers_version":...,...}
# ms_per_step is the median over the --steps timed steps (after --warmup untimed ones);
# tokens_per_sec = micro_batch*seq / (ms_per_step/1000);
# flops_per_token = 6*N + 12*n_layer*n_head*head_dim*seq (llmforge's lf_model_flops_per_token for
# Llama), N = the parameter count, less the input embedding when it is not tied to the head (a tied
# matrix counts once, as the head's product).
#
# Usage:  $LF_BENCH_PYTHON bench/torch_llama_step.py [--micro-batch 4] [--seq 256] [--steps 10]
#             [--warmup 2] [--threads 2] [--preset smollm-135m] [--bf16] [--attention sdpa|eager]
#             [--lora-r R --lora-alpha A --lora-targets q_proj,k_proj,v_proj,o_proj]
# --lora-r R > 0: the model wrapped by PEFT's get_peft_model with LoraConfig(r, lora_alpha,
# target_modules, lora_dropout 0, bias "none"); AdamW (same groups) on the trainable parameters only
# (bench/lora.sh). The JSON adds "trainable_params", "peft_version" and "peak_rss_kb" (ru_maxrss).

import argparse
import json
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from torch_common import describe, describe_line, env_tuning  # noqa: E402

import transformers  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

PRESETS = {
    "smollm-135m": dict(num_hidden_layers=30, hidden_size=576, num_attention_heads=9, num_key_value_heads=3,
                        intermediate_size=1536, vocab_size=49152, max_position_embeddings=2048,
                        tie_word_embeddings=True),
    # small, for checking that the script works
    "tiny": dict(num_hidden_layers=2, hidden_size=128, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=256, vocab_size=512, max_position_embeddings=256, tie_word_embeddings=True),
}


def flops_per_token(cfg, model, T):
    n = sum(p.numel() for p in model.parameters())   # parameters() yields a tied matrix once
    if not cfg.tie_word_embeddings:
        n -= model.get_input_embeddings().weight.numel()
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    return 6 * n + 12 * cfg.num_hidden_layers * cfg.num_attention_heads * head_dim * T, n


def main():
    ap = argparse.ArgumentParser(description="time Llama training steps in transformers")
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="smollm-135m")
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--attention", choices=("sdpa", "eager"), default="sdpa")
    ap.add_argument("--lora-r", type=int, default=0)
    ap.add_argument("--lora-alpha", type=float, default=8.0)
    ap.add_argument("--lora-targets", default="q_proj,k_proj,v_proj,o_proj")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    cfg = LlamaConfig(**PRESETS[args.preset], rope_theta=10000.0, rms_norm_eps=1e-5, hidden_act="silu",
                      attention_bias=False, mlp_bias=False, initializer_range=0.02, use_cache=False,
                      attn_implementation=args.attention)
    if args.seq > cfg.max_position_embeddings:
        raise SystemExit(f"--seq {args.seq} > max_position_embeddings {cfg.max_position_embeddings}")
    B, T = args.micro_batch, args.seq

    model = LlamaForCausalLM(cfg)
    if model.dtype != torch.float32:
        raise SystemExit(f"model dtype {model.dtype}, expected float32")
    attention = model.config._attn_implementation
    fpt, n_params = flops_per_token(cfg, model, T)   # the base model's, before any adapter
    peft_version = None
    if args.lora_r > 0:
        import peft
        from peft import LoraConfig, get_peft_model
        peft_version = peft.__version__
        model = get_peft_model(model, LoraConfig(r=args.lora_r, lora_alpha=args.lora_alpha,
                                                 target_modules=args.lora_targets.split(","),
                                                 lora_dropout=0.0, bias="none"))
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in trainable if p.dim() >= 2]
    no_decay = [p for p in trainable if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=6e-4, betas=(0.9, 0.95))
    params = trainable
    print(f"preset {args.preset}: {n_params / 1e6:.2f}M parameters, B={B} T={T} bf16={args.bf16} "
          f"attention={attention} threads={torch.get_num_threads()}; "
          f"environment: {env_tuning() or 'no tuning variables'}", flush=True)
    info = describe()
    print(describe_line(info) + f"; transformers {transformers.__version__}", flush=True)

    def step():
        x = torch.randint(cfg.vocab_size, (B, T))
        y = torch.randint(cfg.vocab_size, (B, T))
        optimizer.zero_grad(set_to_none=True)
        if args.bf16:
            with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
                logits = model(input_ids=x).logits
                loss = F.cross_entropy(logits.float().view(-1, cfg.vocab_size), y.view(-1))
        else:
            logits = model(input_ids=x).logits
            loss = F.cross_entropy(logits.view(-1, cfg.vocab_size), y.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        return loss.item()

    times = []
    for i in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        loss = step()
        ms = (time.perf_counter() - t0) * 1000.0
        timed = i >= args.warmup
        if timed:
            times.append(ms)
        print(f"step {i}{'' if timed else ' (warmup)'}: loss {loss:.4f}, time {ms:.1f}ms", flush=True)

    if not times:
        raise SystemExit("no timed steps (--steps 0)")
    ms_per_step = statistics.median(times)
    tokens_per_sec = B * T / (ms_per_step / 1000.0)
    result = {
        "impl": "transformers",
        "ms_per_step": round(ms_per_step, 3),
        "tokens_per_sec": round(tokens_per_sec, 2),
        "model_flops_per_sec": round(tokens_per_sec * fpt, 1),
        "flops_per_token": fpt,
        "num_params": n_params,
        "trainable_params": sum(p.numel() for p in trainable),
        "peft_version": peft_version,
        "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "preset": args.preset,
        "micro_batch": B,
        "seq": T,
        "steps": len(times),
        "ms_min": round(min(times), 3),
        "ms_max": round(max(times), 3),
        "bf16": args.bf16,
        "threads": torch.get_num_threads(),
        "attention": attention,
        "torch_version": info["torch_version"],
        "transformers_version": transformers.__version__,
        "blas": info["blas"],
        "mkl_available": info["mkl_available"],
        "onednn_version": info["onednn_version"],
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
