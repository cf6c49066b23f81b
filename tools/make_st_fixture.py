#!/usr/bin/env python3
"""Write tests/fixtures/st_from_python.safetensors with the Python `safetensors`
package, so tests/core/test_safetensors.c checks that our reader accepts what
the reference implementation (Rust, through its Python binding) writes.

Needs, for the default `python3`:  pip install safetensors numpy
Run from the repository root:      python3 tools/make_st_fixture.py

The content is fixed (no randomness); test_python_fixture asserts every value:
  f32      F32  (2, 3)  0.5*i - 1 for i = 0..5
  i64      I64  (3,)    -1, 2**40, 3
  f16      F16  (2,)    1.0, -2.5         (bits 0x3C00, 0xC100)
  u8       U8   (3,)    0, 255, 7
  mask     BOOL (3,)    True, False, True
  scalar   F64  ()      3.25              (a 0-dim tensor: shape [])
  h.0.i32  I32  (3, 1)  10, -20, 30
  __metadata__: format=np, source=tools/make_st_fixture.py,
                note='quote " backslash \\ unicode é'
The reference writer orders the data region by dtype alignment, then name,
and pads the header with spaces to a multiple of 8.
"""
import os
import sys

import numpy as np
from safetensors.numpy import load_file, save_file

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "fixtures", "st_from_python.safetensors")


def main() -> int:
    tensors = {
        "f32": (np.arange(6, dtype=np.float32) * 0.5 - 1.0).reshape(2, 3),
        "i64": np.array([-1, 2**40, 3], dtype=np.int64),
        "f16": np.array([1.0, -2.5], dtype=np.float16),
        "u8": np.array([0, 255, 7], dtype=np.uint8),
        "mask": np.array([True, False, True], dtype=np.bool_),
        "scalar": np.array(3.25, dtype=np.float64),
        "h.0.i32": np.array([[10], [-20], [30]], dtype=np.int32),
    }
    meta = {"format": "np", "source": "tools/make_st_fixture.py", "note": 'quote " backslash \\ unicode \u00e9'}
    save_file(tensors, OUT, metadata=meta)
    back = load_file(OUT)
    for k, v in tensors.items():
        assert back[k].dtype == v.dtype and back[k].shape == v.shape and np.array_equal(back[k], v), k
    print(f"wrote {os.path.relpath(OUT)} ({os.path.getsize(OUT)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
