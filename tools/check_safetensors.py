#!/usr/bin/env python3
"""Check that safetensors files written by llmforge load in the Python ecosystem.

What: loads each file with the real `safetensors` package -- always with
safetensors.numpy.load_file, and with safetensors.torch.load_file when PyTorch
is importable (the values must agree exactly) -- and prints every tensor's
name, dtype and shape plus the __metadata__. Exits non-zero if anything fails.

Arguments may be safetensors files or checkpoint locations, resolved as
lf_checkpoint_resolve does: a step directory (holds trainer_state.json), a
checkpoint root (holds `latest`), a run directory (holds ckpt/latest), or a
`latest` file. For a checkpoint, every file listed in trainer_state.json
"files" is checked against its recorded SHA-256 and size, and then
model.safetensors (expected metadata format=pt, which transformers requires)
and optimizer.safetensors (when present) are loaded.

Requirements (for the default `python3`; the package is not part of the build):
    pip install safetensors numpy
PyTorch is optional. Debian's /usr/bin/python3 has python3-torch but no
safetensors; to run the torch path there without touching the system:
    pip install --target /tmp/st safetensors --no-deps
    PYTHONPATH=/tmp/st /usr/bin/python3 tools/check_safetensors.py ...

Usage:
    python3 tools/check_safetensors.py [--require-torch] [--quiet] PATH...
Format reference: https://huggingface.co/docs/safetensors
"""
import argparse
import hashlib
import json
import os
import sys


def resolve(path):
    """Return (step_dir or None, [files to load])."""
    if os.path.isfile(path):
        if os.path.basename(path) == "latest":
            with open(path) as f:
                name = f.read().strip()
            return resolve_step(os.path.join(os.path.dirname(path) or ".", name))
        return None, [path]
    if os.path.isfile(os.path.join(path, "trainer_state.json")):
        return resolve_step(path)
    for latest in (os.path.join(path, "latest"), os.path.join(path, "ckpt", "latest")):
        if os.path.isfile(latest):
            return resolve(latest)
    raise FileNotFoundError(f"'{path}': not a safetensors file or a checkpoint")


def resolve_step(step_dir):
    files = [os.path.join(step_dir, "model.safetensors")]
    opt = os.path.join(step_dir, "optimizer.safetensors")
    if os.path.exists(opt):
        files.append(opt)
    return step_dir, files


def verify_state(step_dir):
    with open(os.path.join(step_dir, "trainer_state.json")) as f:
        state = json.load(f)
    files = state.get("files")
    if not isinstance(files, dict) or "model.safetensors" not in files:
        raise ValueError(f"'{step_dir}': trainer_state.json has no files/model.safetensors entry")
    for name, rec in files.items():
        p = os.path.join(step_dir, name)
        data = open(p, "rb").read()
        if len(data) != rec["bytes"]:
            raise ValueError(f"'{p}': {len(data)} bytes, trainer_state.json says {rec['bytes']}")
        digest = hashlib.sha256(data).hexdigest()
        if digest != rec["sha256"]:
            raise ValueError(f"'{p}': SHA-256 {digest} != recorded {rec['sha256']}")
        print(f"  {name}: sha256 and size ({len(data)} bytes) match trainer_state.json")


def check_file(path, require_torch, quiet):
    import numpy as np
    from safetensors import safe_open
    from safetensors.numpy import load_file as np_load

    with safe_open(path, framework="np") as f:
        meta = f.metadata() or {}
        order = list(f.keys())
        dtypes = {name: f.get_slice(name).get_dtype() for name in order}
    # numpy has no bfloat16: load_file refuses such files, so BF16 tensors are
    # left to the torch path and the rest are read one by one.
    bf16 = [n for n in order if dtypes[n] == "BF16"]
    if not bf16:
        arrays = np_load(path)
    else:
        arrays = {}
        with safe_open(path, framework="np") as f:
            for name in order:
                if name not in bf16:
                    arrays[name] = f.get_tensor(name)
        print(f"  numpy: {len(bf16)} BF16 tensor(s) skipped (numpy has no bfloat16): {', '.join(bf16)}")
    print(f"{path}: {len(order)} tensors, metadata {json.dumps(meta, ensure_ascii=False)}")
    if os.path.basename(path) == "model.safetensors" and meta.get("format") != "pt":
        raise ValueError(f"'{path}': metadata format is {meta.get('format')!r}, transformers expects 'pt'")
    if not quiet:
        for name in order:
            a = arrays.get(name)
            shape = list(a.shape) if a is not None else "(BF16: see torch)"
            print(f"  {name:40s} {dtypes[name]:5s} {shape}")
    for name, a in arrays.items():
        if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
            print(f"  note: '{name}' holds non-finite values")

    try:
        import torch
        from safetensors.torch import load_file as torch_load
    except ImportError as e:
        if require_torch:
            raise RuntimeError(f"torch path required but unavailable: {e}")
        print("  torch: not importable here, skipped")
        return
    tensors = torch_load(path)
    if set(tensors) != set(order):
        raise ValueError(f"'{path}': torch and the header list different tensor names")
    for name, t in tensors.items():
        a = arrays.get(name)
        if a is None:  # BF16: nothing to compare against
            continue
        if list(t.shape) != list(a.shape):
            raise ValueError(f"'{path}': '{name}' torch shape {list(t.shape)} != numpy {list(a.shape)}")
        same = np.array_equal(t.numpy(), a, equal_nan=a.dtype.kind == "f")
        if not same:
            raise ValueError(f"'{path}': '{name}' differs between torch and numpy")
    print(f"  torch {torch.__version__}: {len(tensors)} tensors load and match numpy")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--require-torch", action="store_true", help="fail when PyTorch is not importable")
    ap.add_argument("--quiet", action="store_true", help="do not list every tensor")
    args = ap.parse_args()
    try:
        import safetensors
    except ImportError:
        print("error: the 'safetensors' package is missing: pip install safetensors numpy", file=sys.stderr)
        return 2
    print(f"safetensors {safetensors.__version__}")
    failed = 0
    for p in args.paths:
        try:
            step_dir, files = resolve(p)
            if step_dir:
                print(f"checkpoint {step_dir}")
                verify_state(step_dir)
            for f in files:
                check_file(f, args.require_torch, args.quiet)
        except Exception as e:  # report and go on with the next path
            print(f"FAIL {p}: {type(e).__name__}: {e}", file=sys.stderr)
            failed += 1
    print("OK" if not failed else f"{failed} of {len(args.paths)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
