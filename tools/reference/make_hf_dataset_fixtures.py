#!/usr/bin/env python3
# Interpreter: ~/.cache/llmforge/bench-venv/bin/python (written with pyarrow
# 26.0.1 and datasets 5.2.0 from PyPI: `pip install pyarrow datasets`).
#
# make_hf_dataset_fixtures.py -- writes the Hugging Face dataset layouts that
# `llmforge prepare` reads as they are (src/data/dataset_dir.c,
# hub_configs.c, reader_json_doc.c, reader_jsonl.c), tested by
# tests/data/test_hf_datasets.c, and what `datasets` reads from each:
#
#   tests/fixtures/hf_datasets/
#     hub/            a hub repository: README.md with a configs: header
#                     (config "default": train = data/train-*, validation,
#                     test; config "alt": alt/*.parquet, all train),
#                     .gitattributes, data/train-0000{0,1}-of-00002.parquet,
#                     data/validation-00000-of-00001.parquet,
#                     data/test-00000-of-00001.parquet, alt/part-0.parquet
#     hub_plain/      README.md (a YAML header without configs) + LICENSE +
#                     data/train-00000-of-00001.parquet and
#                     data/test-00000-of-00001.parquet: splits from the names
#     hub_dirs/       README.md (no header) + data/train/part-0.jsonl and
#                     data/validation/part-0.jsonl: splits from directories
#     hub_missing/    a configs: header naming data/test-* that matches nothing
#     hub_empty/      README.md + data/notes.bin: nothing readable
#     json_field.json pretty-printed {"version": ..., "data": [records]}
#     alpaca.json     pretty-printed Alpaca records (instruction/input/output)
#     alpaca.csv      the same as CSV
#     save_ds/        Dataset.save_to_disk (Arrow IPC stream + state.json)
#     save_dict/      DatasetDict.save_to_disk (train/, test/, dataset_dict.json)
#     alpaca_parquet/ Alpaca records in data/train-00000-of-00001.parquet, one
#                     with a null input
#     save_alpaca/    Alpaca records through save_to_disk
#     misc_file.arrow an Arrow IPC file (not stream), two record batches: a
#                     list<string> and a struct column before a large_string
#                     "text" column with a null, then an int64 column
#     expected.json   per case, the records as `datasets` reads them:
#                     {"CASE": {"SPLIT": [text, ...]}} (pretraining, field
#                     "text"), and for alpaca the (prompt, response) pairs by
#                     the joining rule of docs/readers.md
#
# The directories are rewritten from scratch; run from the repository root.
import csv
import json
import os
import shutil

import datasets
import pyarrow as pa
import pyarrow.parquet as pq

OUT = "tests/fixtures/hf_datasets"

TEXTS = {
    "train": ["First train document.\nIt has two lines.", "第二个训练文档：中文。", "third train text",
              "fourth: emoji 🙂 and combining e\u0301"],
    "validation": ["a validation text", "another validation text"],
    "test": ["the test text"],
}


def write_parquet(path, texts, **kw):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(pa.table({"id": list(range(len(texts))), "text": texts}), path, **kw)


def write_jsonl(path, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def read_dict(dd):
    return {s: list(dd[s]["text"]) for s in dd}


def main():
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    expected = {}

    # hub repository with a configs: header
    hub = os.path.join(OUT, "hub")
    tr = TEXTS["train"]
    write_parquet(f"{hub}/data/train-00000-of-00002.parquet", tr[:2])
    write_parquet(f"{hub}/data/train-00001-of-00002.parquet", tr[2:], compression="zstd")
    write_parquet(f"{hub}/data/validation-00000-of-00001.parquet", TEXTS["validation"])
    write_parquet(f"{hub}/data/test-00000-of-00001.parquet", TEXTS["test"])
    write_parquet(f"{hub}/alt/part-0.parquet", ["alt one", "alt two"])
    with open(f"{hub}/.gitattributes", "w") as f:
        f.write("*.parquet binary\n")
    with open(f"{hub}/README.md", "w") as f:
        f.write("""---
license: mit
language:
- en
- zh
configs:
- config_name: default
  default: true
  data_files:
  - split: train
    path: data/train-*
  - split: validation
    path: "data/validation-*"
  - split: test
    path: ['data/test-00000-of-00001.parquet']
- config_name: alt
  data_files: alt/*.parquet
dataset_info:
  features:
  - name: id
    dtype: int64
  - name: text
    dtype: string
---

# A tiny dataset

Written by tools/reference/make_hf_dataset_fixtures.py.
""")
    expected["hub"] = read_dict(datasets.load_dataset(hub))
    expected["hub_alt"] = read_dict(datasets.load_dataset(hub, "alt"))

    # hub repository without configs: splits from the file names
    hp = os.path.join(OUT, "hub_plain")
    write_parquet(f"{hp}/data/train-00000-of-00001.parquet", tr)
    write_parquet(f"{hp}/data/test-00000-of-00001.parquet", TEXTS["test"])
    with open(f"{hp}/README.md", "w") as f:
        f.write("---\nlicense: mit\ntask_categories:\n- text-generation\n---\n\n# Plain\n")
    with open(f"{hp}/LICENSE", "w") as f:
        f.write("MIT License\n")
    expected["hub_plain"] = read_dict(datasets.load_dataset(hp))

    # splits from directory names
    hd = os.path.join(OUT, "hub_dirs")
    write_jsonl(f"{hd}/data/train/part-0.jsonl", [{"text": t} for t in tr])
    write_jsonl(f"{hd}/data/validation/part-0.jsonl", [{"text": t} for t in TEXTS["validation"]])
    with open(f"{hd}/README.md", "w") as f:
        f.write("# Splits in directories\n")
    expected["hub_dirs"] = read_dict(datasets.load_dataset(hd))

    # bad: a configs: header naming a file that is not there
    hm = os.path.join(OUT, "hub_missing")
    write_parquet(f"{hm}/data/train-00000-of-00001.parquet", tr)
    with open(f"{hm}/README.md", "w") as f:
        f.write("---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n    path: data/train-*\n"
                "  - split: test\n    path: data/test-*\n---\n")
    # bad: nothing readable under data/
    he = os.path.join(OUT, "hub_empty")
    os.makedirs(f"{he}/data")
    with open(f"{he}/data/notes.bin", "wb") as f:
        f.write(b"\x00\x01\x02")
    with open(f"{he}/README.md", "w") as f:
        f.write("# Nothing here\n")

    # a JSON object holding the records under a key
    jf = os.path.join(OUT, "json_field.json")
    with open(jf, "w", encoding="utf-8") as f:
        json.dump({"version": "1.0", "data": [{"text": t} for t in tr]}, f, ensure_ascii=False, indent=2)
    expected["json_field"] = {"train": list(datasets.load_dataset("json", data_files=jf, field="data")["train"]["text"])}

    # Alpaca
    al = os.path.join(OUT, "alpaca.json")
    rows = [
        {"instruction": "Give three tips for staying healthy.", "input": "", "output": "Eat well, sleep, move."},
        {"instruction": "Translate to French.", "input": "Good morning", "output": "Bonjour"},
        {"instruction": "把这句话翻译成英文。", "input": "你好，世界", "output": "Hello, world"},
    ]
    with open(al, "w", encoding="utf-8") as f:
        json.dump(rows, f, ensure_ascii=False, indent=4)
    got = datasets.load_dataset("json", data_files=al)["train"]
    expected["alpaca"] = {"train": [
        [r["instruction"] + ("\n\n" + r["input"] if r["input"] else ""), r["output"]] for r in got]}

    # save_to_disk
    sd = os.path.join(OUT, "save_ds")
    datasets.Dataset.from_dict({"id": list(range(len(tr))), "text": tr}, split="train").save_to_disk(sd)
    expected["save_ds"] = {"train": list(datasets.load_from_disk(sd)["text"])}
    sdd = os.path.join(OUT, "save_dict")
    datasets.DatasetDict({
        "train": datasets.Dataset.from_dict({"text": tr}),
        "test": datasets.Dataset.from_dict({"text": TEXTS["test"]}),
    }).save_to_disk(sdd)
    expected["save_dict"] = read_dict(datasets.load_from_disk(sdd))

    # Alpaca as CSV (an empty input is no input; datasets reads it as None)
    ac = os.path.join(OUT, "alpaca.csv")
    with open(ac, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["instruction", "input", "output"])
        for r in rows:
            w.writerow([r["instruction"], r["input"], r["output"]])
    got = datasets.load_dataset("csv", data_files=ac)["train"]
    expected["alpaca_csv"] = {"train": [
        [r["instruction"] + ("\n\n" + r["input"] if r["input"] else ""), r["output"]] for r in got]}

    # Alpaca as a hub repository's Parquet (a null input reads as no input)
    ap = os.path.join(OUT, "alpaca_parquet", "data", "train-00000-of-00001.parquet")
    os.makedirs(os.path.dirname(ap))
    prow = rows + [{"instruction": "Say hi.", "input": None, "output": "hi"}]
    pq.write_table(pa.Table.from_pylist(prow), ap)
    got = datasets.load_dataset(os.path.join(OUT, "alpaca_parquet"))["train"]
    expected["alpaca_parquet"] = {"train": [
        [r["instruction"] + ("\n\n" + r["input"] if r["input"] else ""), r["output"]] for r in got]}

    # Alpaca saved by datasets (Arrow); an Arrow IPC *file* with a list and a
    # struct column before a large_string text column holding a null
    sa = os.path.join(OUT, "save_alpaca")
    datasets.Dataset.from_list(rows).save_to_disk(sa)
    got = datasets.load_from_disk(sa)
    expected["save_alpaca"] = {"train": [
        [r["instruction"] + ("\n\n" + r["input"] if r["input"] else ""), r["output"]] for r in got]}
    tbl = pa.table({
        "tags": pa.array([["a", "b"], [], None, ["c"]], pa.list_(pa.string())),
        "meta": pa.array([{"n": 1, "s": "x"}, {"n": 2, "s": None}, None, {"n": 4, "s": "w"}],
                         pa.struct([("n", pa.int64()), ("s", pa.string())])),
        "text": pa.array(["large one", None, "large three", "large four 四"], pa.large_string()),
        "id": pa.array([1, 2, 3, 4], pa.int64()),
    })
    with pa.ipc.new_file(os.path.join(OUT, "misc_file.arrow"), tbl.schema) as w:
        w.write_table(tbl, max_chunksize=2)
    back = pa.ipc.open_file(os.path.join(OUT, "misc_file.arrow")).read_all()
    expected["misc_file"] = {"train": [t for t in back.column("text").to_pylist() if t is not None]}

    with open(os.path.join(OUT, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
