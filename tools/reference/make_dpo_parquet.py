#!/usr/bin/env python3
"""Parquet inputs of `llmforge prepare --mode dpo` for tests/cli/test_dpo.sh.

Interpreter: any python3 with pyarrow (written with pyarrow 26.0.1):

    python3 tools/reference/make_dpo_parquet.py tests/fixtures/dpo

  pairs.parquet  12 rows in 3 row groups, columns question/good/bad (named with
                 --prompt-field, --chosen-field, --rejected-field) and an
                 unused id column; snappy, dictionary encoding off.
  bad.parquet    4 rows, columns prompt/chosen/rejected: row 3's rejected is
                 null, row 4's chosen is empty.
"""
import os
import sys

import pyarrow as pa
import pyarrow.parquet as pq


def main():
    out = sys.argv[1]
    q = [f"{a}+{a}=" for a in range(12)]
    t = pa.table({"id": list(range(12)), "question": q, "good": ["yes"] * 12, "bad": ["no"] * 12})
    pq.write_table(t, os.path.join(out, "pairs.parquet"), row_group_size=4, compression="snappy",
                   use_dictionary=False)
    b = pa.table({"prompt": ["1+1=", "2+2=", "3+3=", "4+4="], "chosen": ["yes", "yes", "yes", ""],
                  "rejected": ["no", "no", None, "no"]})
    pq.write_table(b, os.path.join(out, "bad.parquet"))


if __name__ == "__main__":
    main()
