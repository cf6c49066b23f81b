#!/usr/bin/env python3
# Interpreter: the default python3 with pyarrow from PyPI (written with
# pyarrow 26.0.1: `pip install pyarrow`). Nothing else is needed.
#
# make_parquet_fixtures.py -- writes the Parquet fixtures the C reader
# (src/data/reader_parquet.c) is tested against (tests/data/test_parquet.c):
#
#   tests/fixtures/parquet/NAME.parquet   written by pyarrow.parquet.write_table
#   tests/fixtures/parquet/NAME.json      what pyarrow reads back, and how the
#                                         test is to open the file:
#     {"file": "NAME.parquet",
#      "mode": "pretrain" | "sft",
#      "text_field" / "prompt_field" / "response_field": optional names,
#      "columns": ["text"] or ["prompt", "response"]  (the selected columns),
#      "rows": [[value, ...], ...]   one list per row, the selected columns'
#                                    values as pyarrow reads them: a string,
#                                    null for a null, {"hex": "..."} for
#                                    bytes that are not text (invalid UTF-8
#                                    or holding a NUL), {"repeat": s,
#                                    "times": n} for s repeated n times (the
#                                    long string, kept small here),
#      "error": null, or {"status": "LF_ERR_UNSUPPORTED", "contains": [..]}
#                                    when opening/reading must fail,
#      "meta": {"codec", "encodings", "data_page_version", "row_groups",
#               "dictionary"}        what pyarrow says it wrote (for people)}
#
# Coverage: every codec the reader supports (UNCOMPRESSED, SNAPPY, GZIP,
# ZSTD, BROTLI, LZ4_RAW) x dictionary on/off x data page v1/v2, each with several row groups,
# several pages per column chunk (tiny data_page_size / write_batch_size),
# nulls, empty strings, CJK, emoji and combining marks; a dictionary that
# overflows dictionary_pagesize_limit (the chunk falls back to PLAIN after
# some dictionary pages); a REQUIRED (non-null) column; page checksums; a long
# string; a binary column (BYTE_ARRAY without a logical type) holding invalid
# UTF-8 and a NUL; SFT tables (prompt/response with a null prompt,
# input_text/target_text, custom field names); an int column beside the
# string column, and nested columns beside it; LZ4_RAW and BROTLI codecs,
# DELTA_BYTE_ARRAY and DELTA_LENGTH_BYTE_ARRAY encodings (several pages, v1
# and v2, nulls, shared prefixes); and the unsupported cases: an int column,
# a list column and a struct column selected, and an empty table.
#
# With `--fuzz-seeds DIR` it writes instead tiny seed files
# (fuzz/corpus/parquet/seed_*.parquet) for fuzz/fuzz_parquet.c.
#
# Deterministic: fixed data, no randomness; rerunning with the same pyarrow
# rewrites the same bytes. Keep the directory small (< 300 KB).
import json
import os
import sys

import pyarrow as pa
import pyarrow.parquet as pq

LONG_UNIT = "the long document continues with ünïcödé and 漢字 🙂.\n"
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
OUT = os.path.join(ROOT, "tests", "fixtures", "parquet")

WORDS = [
    "hello world",
    "the quick brown fox jumps over the lazy dog",
    "你好，世界",          # CJK
    "こんにちは 世界",
    "emoji 🙂🚀 and 👩‍👩‍👧 family",
    "e\u0301 combining acute",
    "tab\tand\nnewline",
    "hello world",         # repeats help the dictionary
    "",                    # empty string (a bad record in pretraining)
    None,                  # null (a bad record)
    "Ω≈ç√∫",
    "a",
]


def base_rows(n=60):
    out = []
    for i in range(n):
        w = WORDS[i % len(WORDS)]
        if w is None or w == "" or i % 5 == 0:
            out.append(w)          # exact repeats
        else:
            out.append(f"{w} #{i % 17}")
    return out


def enc_value(v):
    if v is None:
        return None
    if isinstance(v, str) and len(v) > 4096 and v == LONG_UNIT * (len(v) // len(LONG_UNIT)):
        return {"repeat": LONG_UNIT, "times": len(v) // len(LONG_UNIT)}  # keeps the JSON small
    raw = v if isinstance(v, bytes) else v.encode("utf-8", "surrogatepass")
    try:
        s = raw.decode("utf-8")
    except UnicodeDecodeError:
        s = None
    if s is None or "\x00" in s:
        return {"hex": raw.hex()}  # not text: invalid UTF-8 or a NUL (always a bad record)
    return s


def meta_of(path, col):
    md = pq.ParquetFile(path).metadata
    encs, codecs = set(), set()
    idx = md.schema.names.index(col) if col in md.schema.names else 0
    for g in range(md.num_row_groups):
        c = md.row_group(g).column(idx)
        encs.update(c.encodings)
        codecs.add(c.compression)
    return {"codec": sorted(codecs), "encodings": sorted(encs), "row_groups": md.num_row_groups}


def write(name, table, cols, mode="pretrain", fields=None, error=None, file=None, **kw):
    """Write NAME.parquet (or reuse FILE.parquet, already written) and NAME.json."""
    path = os.path.join(OUT, (file or name) + ".parquet")
    if file is None:
        pq.write_table(table, path, **kw)
    back = pq.read_table(path)
    rows = []
    if error is None:
        data = [back.column(c).to_pylist() for c in cols]
        rows = [[enc_value(data[j][i]) for j in range(len(cols))] for i in range(back.num_rows)]
    meta = meta_of(path, cols[0])
    meta["data_page_version"] = kw.get("data_page_version", "1.0")
    meta["dictionary"] = kw.get("use_dictionary", True)
    desc = {"file": (file or name) + ".parquet", "mode": mode, "columns": cols, "rows": rows, "error": error,
            "meta": meta}
    for k, v in (fields or {}).items():
        desc[k] = v
    with open(os.path.join(OUT, name + ".json"), "w", encoding="utf-8") as f:
        json.dump(desc, f, ensure_ascii=False, indent=1)
        f.write("\n")


def main():
    os.makedirs(OUT, exist_ok=True)
    for fn in os.listdir(OUT):
        if fn.endswith(".parquet") or fn.endswith(".json"):
            os.remove(os.path.join(OUT, fn))

    small = dict(row_group_size=25, data_page_size=128, write_batch_size=4)
    t = pa.table({"text": pa.array(base_rows(), pa.string())})

    # codec x dictionary x page version
    for codec in ["none", "snappy", "gzip", "zstd"]:
        for dic in [True, False]:
            for ver in ["1.0", "2.0"]:
                name = f"matrix_{codec}_{'dict' if dic else 'plain'}_v{ver[0]}"
                write(name, t, ["text"], compression=codec, use_dictionary=dic, data_page_version=ver, **small)

    # dictionary overflow: dictionary pages, then a fallback to PLAIN inside one chunk
    many = pa.table({"text": pa.array([f"distinct value {i} 🙂" for i in range(160)], pa.string())})
    write("dict_fallback", many, ["text"], compression="snappy", use_dictionary=True,
          dictionary_pagesize_limit=512, data_page_size=256, write_batch_size=8, row_group_size=100)
    write("dict_fallback_v2", many, ["text"], compression="zstd", use_dictionary=True, data_page_version="2.0",
          dictionary_pagesize_limit=512, data_page_size=256, write_batch_size=8, row_group_size=100)

    # REQUIRED column (no definition levels), page checksums
    req = pa.table(pa.Table.from_pydict({"text": [f"row {i}: 世界 {i * i}" for i in range(40)]},
                                        schema=pa.schema([pa.field("text", pa.string(), nullable=False)])))
    write("required_v1", req, ["text"], compression="snappy", write_page_checksum=True, **small)
    write("required_v2", req, ["text"], compression="gzip", data_page_version="2.0", use_dictionary=False,
          write_page_checksum=True, **small)

    # one long string among short ones (a page larger than the default buffers)
    long_s = LONG_UNIT * 2500
    write("long_string", pa.table({"text": [ "short", long_s, "after" ]}), ["text"], compression="zstd")

    # all nulls in a row group; the whole column null in one row group
    write("nulls", pa.table({"text": pa.array([None] * 10 + ["x", None, "y"] + [None] * 7, pa.string())}),
          ["text"], compression="none", row_group_size=10)

    # BYTE_ARRAY without a logical type (pa.binary): invalid UTF-8 and a NUL are bad records
    write("binary", pa.table({"text": pa.array([b"plain bytes", b"\xff\xfe bad", b"nul\x00inside", "ok 🙂".encode()],
                                              pa.binary())}), ["text"], compression="none")

    # a custom pretraining column among others: an int column, a list column, a struct column
    mixed = pa.table({
        "id": pa.array(range(30), pa.int64()),
        "tags": pa.array([[f"t{i}", "u"] if i % 3 else [] for i in range(30)], pa.list_(pa.string())),
        "meta": pa.array([{"a": i, "b": f"s{i}"} for i in range(30)],
                         pa.struct([("a", pa.int32()), ("b", pa.string())])),
        "body": pa.array([f"body {i} ✓" for i in range(30)], pa.string()),
        "score": pa.array([i * 0.5 for i in range(30)], pa.float64()),
    })
    write("mixed_body", mixed, ["body"], fields={"text_field": "body"}, compression="snappy", row_group_size=12)
    # the same file, other columns selected
    for name, col, status, words in [
        ("mixed_int", "id", "LF_ERR_UNSUPPORTED", ["'id'", "INT64"]),
        ("mixed_list", "tags", "LF_ERR_UNSUPPORTED", ["'tags'", "nested"]),
        ("mixed_struct", "meta", "LF_ERR_UNSUPPORTED", ["'meta'", "nested"]),
        ("mixed_missing", "nope", "LF_ERR_FORMAT", ["'nope'", "body"]),
    ]:
        write(name, None, ["body"], fields={"text_field": col}, file="mixed_body",
              error={"status": status, "contains": words})

    # fine-tuning pairs
    prompts = [f"Q{i}: what is {i} + {i}?" for i in range(20)]
    resps = [f"{2 * i}" for i in range(20)]
    prompts[3] = None            # a null prompt: a bad record
    prompts[4] = ""              # an empty prompt is allowed
    resps[7] = ""                # an empty response: a bad record
    resps[9] = None              # a null response: a bad record
    sft = pa.table({"prompt": pa.array(prompts, pa.string()), "response": pa.array(resps, pa.string()),
                    "n": pa.array(range(20), pa.int32())})
    write("sft_prompt_response", sft, ["prompt", "response"], mode="sft", compression="zstd", row_group_size=8,
          data_page_size=64, write_batch_size=2)
    it = pa.table({"id": pa.array(range(12), pa.int32()),
                   "input_text": pa.array([f"translate: chat {i}" for i in range(12)], pa.string()),
                   "target_text": pa.array([f"猫 {i}" for i in range(12)], pa.string())})
    write("sft_input_target", it, ["input_text", "target_text"], mode="sft", compression="gzip",
          data_page_version="2.0", row_group_size=5)
    qa = pa.table({"question": pa.array(["2+2?", "capital of France?", "🙂?"], pa.string()),
                   "answer": pa.array(["4", "Paris", "smile"], pa.string())})
    write("sft_custom", qa, ["question", "answer"], mode="sft",
          fields={"prompt_field": "question", "response_field": "answer"}, compression="snappy",
          use_dictionary=False)

    # BROTLI and LZ4_RAW codecs (pyarrow's "lz4" writes LZ4_RAW), DELTA_BYTE_ARRAY and
    # DELTA_LENGTH_BYTE_ARRAY encodings (values sharing prefixes, nulls, empty strings, CJK),
    # data pages v1 and v2, several pages and row groups
    small_t = pa.table({"text": pa.array([f"value {i}" for i in range(10)], pa.string())})
    shared = pa.table({"text": pa.array(
        [None if i % 7 == 3 else "" if i % 11 == 5 else f"https://example.org/页面/{i // 4}/item-{i}" * (1 + i % 3)
         for i in range(90)], pa.string())})
    write("codec_lz4", small_t, ["text"], compression="lz4")
    write("codec_brotli", small_t, ["text"], compression="brotli")
    write("codec_lz4_pages", shared, ["text"], compression="lz4", data_page_version="2.0", **small)
    write("codec_brotli_pages", shared, ["text"], compression="brotli", use_dictionary=False, **small)
    write("enc_delta_byte_array", small_t, ["text"], compression="none", use_dictionary=False,
          column_encoding={"text": "DELTA_BYTE_ARRAY"})
    write("enc_delta_length", small_t, ["text"], compression="snappy", use_dictionary=False,
          data_page_version="2.0", column_encoding={"text": "DELTA_LENGTH_BYTE_ARRAY"})
    write("enc_delta_byte_array_pages", shared, ["text"], compression="zstd", use_dictionary=False,
          column_encoding={"text": "DELTA_BYTE_ARRAY"}, **small)
    write("enc_delta_length_pages", shared, ["text"], compression="brotli", use_dictionary=False,
          data_page_version="2.0", column_encoding={"text": "DELTA_LENGTH_BYTE_ARRAY"}, **small)
    write("enc_delta_sft", pa.table({"prompt": pa.array([f"question {i} 问" for i in range(40)], pa.string()),
                                     "response": pa.array([f"answer {i % 5}" for i in range(40)], pa.string())}),
          ["prompt", "response"], mode="sft", compression="lz4", use_dictionary=False,
          column_encoding={"prompt": "DELTA_BYTE_ARRAY", "response": "DELTA_LENGTH_BYTE_ARRAY"}, **small)

    # no rows at all
    write("empty", pa.table({"text": pa.array([], pa.string())}), ["text"],
          error={"status": "LF_ERR_FORMAT", "contains": ["no rows"]})

    total = sum(os.path.getsize(os.path.join(OUT, f)) for f in os.listdir(OUT))
    print(f"wrote {len(os.listdir(OUT))} files, {total} bytes, to {os.path.relpath(OUT, ROOT)}", file=sys.stderr)


def fuzz_seeds(out):
    """Tiny files (a few hundred bytes) for fuzz/corpus/parquet: mutations of
    small seeds stay small, so the merged corpus stays small."""
    os.makedirs(out, exist_ok=True)
    vals = ["hi", None, "世界🙂", "", "hi", "x" * 20]
    t = pa.table({"text": pa.array(vals, pa.string())})
    tiny = dict(row_group_size=4, data_page_size=16, write_batch_size=2, store_schema=False, write_statistics=False)
    for codec in ["none", "snappy", "gzip", "zstd"]:
        for dic in [True, False]:
            for ver in ["1.0", "2.0"]:
                pq.write_table(t, os.path.join(out, f"seed_{codec}_{'dict' if dic else 'plain'}_v{ver[0]}.parquet"),
                               compression=codec, use_dictionary=dic, data_page_version=ver, **tiny)
    req = pa.Table.from_pydict({"text": ["a", "bb", "ccc"]}, schema=pa.schema([pa.field("text", pa.string(), False)]))
    pq.write_table(req, os.path.join(out, "seed_required_crc.parquet"), compression="none",
                   write_page_checksum=True, **tiny)
    sft = pa.table({"prompt": pa.array(["q1", None, "q3"], pa.string()), "response": ["a1", "a2", ""]})
    pq.write_table(sft, os.path.join(out, "seed_sft.parquet"), compression="none", **tiny)
    it = pa.table({"n": pa.array([1, 2], pa.int8()), "input_text": ["i1", "i2"], "target_text": ["t1", "t2"]})
    pq.write_table(it, os.path.join(out, "seed_input_target_v2.parquet"), compression="snappy",
                   data_page_version="2.0", **tiny)
    pq.write_table(pa.table({"text": pa.array([b"ok", b"\xff"], pa.binary())}),
                   os.path.join(out, "seed_binary.parquet"), compression="none", **tiny)
    pq.write_table(pa.table({"text": [f"v{i}" for i in range(3)]}), os.path.join(out, "seed_delta.parquet"),
                   compression="none", use_dictionary=False, column_encoding={"text": "DELTA_BYTE_ARRAY"}, **tiny)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--fuzz-seeds":
        fuzz_seeds(sys.argv[2])
    else:
        main()
