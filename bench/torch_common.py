# Interpreter: the benchmarks' virtual environment (bench/venv.sh: PyPI's PyTorch 2.x, numpy).
#
# torch_common.py -- what the PyTorch side of the benchmarks shares:
#   describe()        the PyTorch build in one dict (version, BLAS, oneDNN, CPU capability,
#                     threads) and, run as a script, in one line of text;
#   use_sdpa(model)   nanoGPT's attention on PyTorch >= 2.0.
#
# Attention. The reference GPT (tools/reference/gpt2_reference.py, the model the golden
# fixtures come from) writes attention out: q k^T, masked_fill, softmax, @ v. That is what
# nanoGPT does only on PyTorch < 2.0; on 2.x it calls
#   F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=..., is_causal=True)
# (its "flash" path, a fused kernel on CPU too). A benchmark of "nanoGPT on PyTorch 2.x" must
# run that, so use_sdpa() swaps the forward of every CausalSelfAttention of a reference model
# for nanoGPT's, leaving the reference file (and its numerics) alone. Same parameters, same
# mathematics; results differ only by rounding.

import json
import os
import re
import sys
import types

import torch
import torch.nn.functional as F


def describe():
    cfg = torch.__config__.show()

    def find(pattern):
        m = re.search(pattern, cfg)
        return m.group(1) if m else None

    return {
        "torch_version": torch.__version__,
        "python": sys.executable,
        "blas": find(r"BLAS_INFO=([^,\s]+)"),
        "mkl_available": torch.backends.mkl.is_available(),
        "mkl_version": find(r"Math Kernel Library Version ([0-9.]+)"),
        "mkldnn_enabled": torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled,
        "onednn_version": find(r"(?:MKL-DNN|oneDNN) (v[0-9.]+)"),
        "cpu_capability": find(r"CPU capability usage: (\S+)"),
        "threads": torch.get_num_threads(),
        "sdpa": hasattr(F, "scaled_dot_product_attention"),
    }


def describe_line(d=None):
    d = d or describe()
    return ("pytorch: torch %s (%s); BLAS %s, torch.backends.mkl.is_available() %s%s; oneDNN %s%s; "
            "CPU capability %s" % (
                d["torch_version"], d["python"], d["blas"], d["mkl_available"],
                " (MKL %s)" % d["mkl_version"] if d["mkl_version"] else "",
                d["onednn_version"] or "?", "" if d["mkldnn_enabled"] else " (disabled)",
                d["cpu_capability"]))


def _sdpa_forward(self, x):
    # nanoGPT model.py CausalSelfAttention.forward, flash branch
    B, T, C = x.shape
    H = self.n_head
    q, k, v = self.c_attn(x).split(C, dim=2)
    q = q.view(B, T, H, C // H).transpose(1, 2)
    k = k.view(B, T, H, C // H).transpose(1, 2)
    v = v.view(B, T, H, C // H).transpose(1, 2)
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=None,
                                       dropout_p=self.attn_dropout.p if self.training else 0,
                                       is_causal=True)
    y = y.transpose(1, 2).contiguous().view(B, T, C)
    return self.resid_dropout(self.c_proj(y))


def use_sdpa(model):
    """Give every attention module of a reference GPT nanoGPT's PyTorch 2.x forward."""
    if not hasattr(F, "scaled_dot_product_attention"):
        raise SystemExit(f"torch {torch.__version__} has no scaled_dot_product_attention "
                         "(PyTorch >= 2.0); use --attention manual")
    n = 0
    for m in model.modules():
        if type(m).__name__ == "CausalSelfAttention":
            m.forward = types.MethodType(_sdpa_forward, m)
            n += 1
    if n == 0:
        raise SystemExit("use_sdpa: the model has no CausalSelfAttention module")


def env_tuning():
    """Threading and kernel variables set in the environment (the benchmarks set none)."""
    prefixes = ("OMP_", "KMP_", "GOMP_", "MKL_", "OPENBLAS_", "DNNL_", "ONEDNN_")
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(prefixes)}


if __name__ == "__main__":
    if sys.argv[1:] == ["--json"]:
        print(json.dumps(describe()))
    else:
        print(describe_line())
