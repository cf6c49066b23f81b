# Interpreter: /usr/bin/python3 with Debian's python3-torch (PyTorch 1.13) and python3-numpy for
# the fixture generators; the benchmarks (bench/) import it under PyPI's PyTorch 2.x
# (bench/venv.sh), where it runs unchanged.
#
# gpt2_reference.py -- a compact GPT-2 in PyTorch, written for llmforge as the numerical
# reference for the C implementation (golden test, benchmarks).
#
# Architecture (nanoGPT-equivalent):
#   x = drop(wte[idx] + wpe[pos])
#   for each block:  x = x + drop(attn(ln_1(x)));  x = x + mlp(ln_2(x))
#     attn: c_attn -> q | k | v (split in that order along channels; head h uses channels
#           h*HS .. h*HS+HS-1 of each), causal softmax(q k^T / sqrt(HS)), dropout on the
#           probabilities, weighted sum of v, heads concatenated, c_proj, resid dropout
#     mlp:  c_fc (C -> 4C), GELU (tanh approximation), c_proj (4C -> C), dropout
#   x = ln_f(x); logits = x @ wte^T   (lm_head tied to wte)
#   layernorm eps = 1e-5, biases optional (bias=True/False)
#
# Linear weights are stored in Hugging Face GPT-2 "Conv1D" layout (in, out): y = x @ W + b.
# Parameter names (model.named_parameters(), in this order) match HF GPT-2 without the
# "transformer." prefix:
#   wte.weight (V,C), wpe.weight (block,C),
#   h.{i}.ln_1.weight, h.{i}.ln_1.bias, h.{i}.attn.c_attn.weight (C,3C), h.{i}.attn.c_attn.bias,
#   h.{i}.attn.c_proj.weight (C,C), h.{i}.attn.c_proj.bias, h.{i}.ln_2.weight, h.{i}.ln_2.bias,
#   h.{i}.mlp.c_fc.weight (C,4C), h.{i}.mlp.c_fc.bias, h.{i}.mlp.c_proj.weight (4C,C),
#   h.{i}.mlp.c_proj.bias, ln_f.weight, ln_f.bias
#
# Loss: F.cross_entropy(logits.view(-1, V), targets.reshape(-1), ignore_index=-1), i.e. the mean
# over non-ignored targets.

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = 50304
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True


class Conv1D(nn.Module):
    """Affine map with the weight stored as (in, out): y = x @ weight + bias."""

    def __init__(self, n_in, n_out, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out))
        self.bias = nn.Parameter(torch.zeros(n_out)) if bias else None

    def forward(self, x):
        if self.bias is None:
            return x @ self.weight
        # addmm on the flattened input is the same product as x @ W + b
        shape = x.shape[:-1] + (self.weight.shape[1],)
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).view(shape)


class LayerNorm(nn.Module):
    def __init__(self, n, bias, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.bias = nn.Parameter(torch.zeros(n)) if bias else None
        self.eps = eps

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)


class Embedding(nn.Module):
    def __init__(self, n, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n, dim))

    def forward(self, idx):
        return F.embedding(idx, self.weight)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        assert cfg.n_embd % cfg.n_head == 0
        self.n_head = cfg.n_head
        self.n_embd = cfg.n_embd
        self.c_attn = Conv1D(cfg.n_embd, 3 * cfg.n_embd, cfg.bias)
        self.c_proj = Conv1D(cfg.n_embd, cfg.n_embd, cfg.bias)
        self.attn_dropout = nn.Dropout(cfg.dropout)
        self.resid_dropout = nn.Dropout(cfg.dropout)
        mask = torch.tril(torch.ones(cfg.block_size, cfg.block_size, dtype=torch.bool))
        self.register_buffer("causal_mask", mask.view(1, 1, cfg.block_size, cfg.block_size),
                             persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        H = self.n_head
        HS = C // H
        q, k, v = self.c_attn(x).split(C, dim=2)
        # (B, T, C) -> (B, H, T, HS); head h owns channels h*HS .. h*HS+HS-1
        q = q.view(B, T, H, HS).transpose(1, 2)
        k = k.view(B, T, H, HS).transpose(1, 2)
        v = v.view(B, T, H, HS).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(HS))
        scores = scores.masked_fill(~self.causal_mask[:, :, :T, :T], float("-inf"))
        probs = F.softmax(scores, dim=-1)
        probs = self.attn_dropout(probs)
        y = probs @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.c_fc = Conv1D(cfg.n_embd, 4 * cfg.n_embd, cfg.bias)
        self.c_proj = Conv1D(4 * cfg.n_embd, cfg.n_embd, cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x), approximate="tanh")))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = LayerNorm(cfg.n_embd, cfg.bias)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = LayerNorm(cfg.n_embd, cfg.bias)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, cfg, init_std=0.02):
        super().__init__()
        self.config = cfg
        # registration order fixes named_parameters() order: wte, wpe, h.0.., ln_f
        self.wte = Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = Embedding(cfg.block_size, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.h = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)])
        self.ln_f = LayerNorm(cfg.n_embd, cfg.bias)
        self.init_weights(init_std)

    @torch.no_grad()
    def init_weights(self, std=0.02):
        """GPT-2 init: N(0, std) for embeddings and linear weights, std/sqrt(2*n_layer) for the
        c_proj weights (attention and MLP), zero biases, layernorm weight 1 / bias 0.
        Parameters are initialised in named_parameters() order, so a seed fixes them all."""
        proj_std = std / math.sqrt(2 * self.config.n_layer)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                p.normal_(0.0, proj_std)
            elif name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
                p.fill_(1.0)
            elif name.endswith(".bias"):
                p.zero_()
            else:  # wte, wpe, c_attn.weight, c_fc.weight
                p.normal_(0.0, std)

    def num_params(self, non_embedding=True):
        """Parameter count; with non_embedding=True the position embedding is excluded
        (wte stays in, since it is also the output projection)."""
        n = sum(p.numel() for p in self.parameters())
        if non_embedding:
            n -= self.wpe.weight.numel()
        return n

    def forward(self, idx, targets=None):
        B, T = idx.shape
        assert T <= self.config.block_size, f"sequence length {T} > block_size"
        pos = torch.arange(T, dtype=torch.long, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        logits = x @ self.wte.weight.t()
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1),
                                   ignore_index=-1)
        return logits, loss

    def optimizer_groups(self, weight_decay):
        """nanoGPT grouping: tensors with dim >= 2 (matmul weights, embeddings) decay,
        the rest (biases, layernorm weights) do not."""
        decay = [p for p in self.parameters() if p.requires_grad and p.dim() >= 2]
        no_decay = [p for p in self.parameters() if p.requires_grad and p.dim() < 2]
        return [{"params": decay, "weight_decay": weight_decay},
                {"params": no_decay, "weight_decay": 0.0}]

    def configure_optimizers(self, weight_decay, learning_rate, betas, eps=1e-8):
        return torch.optim.AdamW(self.optimizer_groups(weight_decay), lr=learning_rate,
                                 betas=betas, eps=eps)


def model_flops_per_token(model, seq_len):
    """Training FLOPs per token: 6*N (N excluding wpe) + 12*L*C*T for attention."""
    cfg = model.config
    return 6 * model.num_params(non_embedding=True) + 12 * cfg.n_layer * cfg.n_embd * seq_len


if __name__ == "__main__":
    cfg = GPTConfig(block_size=32, vocab_size=65, n_layer=2, n_head=4, n_embd=64)
    torch.manual_seed(0)
    m = GPT(cfg)
    for n, p in m.named_parameters():
        print(f"{n:28s} {tuple(p.shape)}")
    x = torch.randint(0, cfg.vocab_size, (2, 16))
    _, loss = m(x, x)
    print("loss", loss.item(), "expected ~", math.log(cfg.vocab_size))
