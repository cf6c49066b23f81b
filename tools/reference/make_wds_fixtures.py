#!/usr/bin/env python3
"""WebDataset tar fixtures for llmforge's tar reader (src/data/reader_wds.c).

Runs on the default python3 with the standard library only (tarfile, gzip).
Deterministic: every member has mtime 1700000000, uid/gid 0, empty
uname/gname, mode 0644 (directories 0755); gzip files carry mtime 0 and no
file name; member contents are fixed. Rerunning rewrites the same bytes (for
a given zlib; the committed files are what the tests read).

Writes tests/fixtures/wds/:
  basic.tar        pax format (tarfile's default); pretraining samples:
                     dir/                 a directory member (ignored)
                     dir/000.txt + dir/000.cls           -> "hello world\\n"
                     dir/001.txt (UTF-8) + dir/001.jpg (binary, skipped)
                     dir/002.json {"text": ...}          -> "from json"
                     dir/003.json then dir/003.txt       -> the .txt wins
                     README (no dot), dir/.hidden.txt, __meta__/x.txt
                                          belong to no sample (ignored)
                     dir/004.txt + dir/004.prompt.txt    -> the .txt only
  basic.tar.gz     basic.tar gzip-compressed
  multi.tar.gz     basic.tar cut in two at a member boundary, each half
                   compressed as its own gzip member, concatenated
  sft.tar          fine-tuning samples (.json with prompt/response, one with
                   input_text/target_text, one with an empty prompt, one with
                   a .txt beside the .json)
  names_gnu.tar    GNU format: a member path of 150 bytes (a GNU 'L' long-name
                   header) and a short one
  names_pax.tar    pax format: a path of 300 bytes and a non-ASCII path
                   (pax 'x' headers with "path")
  names_ustar.tar  ustar format: a path of 150 bytes split into the ustar
                   prefix and name fields
  expected.json    the records each fixture must give, mode by mode

Usage (from the repository root):
  python3 tools/reference/make_wds_fixtures.py [--out tests/fixtures/wds]
"""
import argparse
import gzip
import io
import json
import os
import tarfile

MTIME = 1700000000


def info(name, size=0, kind=tarfile.REGTYPE):
    ti = tarfile.TarInfo(name)
    ti.size = size
    ti.type = kind
    ti.mtime = MTIME
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    ti.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
    return ti


def make_tar(members, fmt):
    """members: list of (name, bytes) or (name, None) for a directory."""
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode="w", format=fmt) as tf:
        for name, data in members:
            if data is None:
                tf.addfile(info(name, 0, tarfile.DIRTYPE))
            else:
                tf.addfile(info(name, len(data)), io.BytesIO(data))
    return bio.getvalue()


def gz(data):
    bio = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=bio, mtime=0, compresslevel=9) as g:
        g.write(data)
    return bio.getvalue()


def js(obj):
    return json.dumps(obj, ensure_ascii=False).encode("utf-8")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/fixtures/wds")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    jpg = bytes((i * 37 + 11) % 256 for i in range(1500))  # not UTF-8, never read
    basic = [
        ("dir/", None),
        ("dir/000.txt", b"hello world\n"),
        ("dir/000.cls", b"3"),
        ("dir/001.txt", "café ☕ 😀".encode("utf-8")),
        ("dir/001.jpg", jpg),
        ("README", b"no extension: not a sample member"),
        ("dir/002.json", js({"text": "from json", "other": 1})),
        ("dir/.hidden.txt", b"hidden: not a sample member"),
        ("dir/003.json", js({"text": "json loses"})),
        ("dir/003.txt", b"txt wins"),
        ("__meta__/x.txt", b"webdataset meta file: skipped"),
        ("dir/004.txt", b"four"),
        ("dir/004.prompt.txt", b"extension prompt.txt: not read"),
    ]
    basic_tar = make_tar(basic, tarfile.PAX_FORMAT)
    # the first half: the members up to dir/001.jpg, without end-of-archive blocks
    with tarfile.open(fileobj=io.BytesIO(basic_tar)) as tf:
        m = [m for m in tf.getmembers() if m.name == "dir/001.jpg"][0]
    first = basic_tar[: m.offset_data + (m.size + 511) // 512 * 512]
    assert basic_tar.startswith(first)
    multi = gz(first) + gz(basic_tar[len(first):])

    sft = [
        ("s/0.json", js({"prompt": "2+2=", "response": "4"})),
        ("s/1.json", js({"input_text": "capital of France?", "target_text": "Paris"})),
        ("s/2.json", js({"prompt": "", "response": "empty prompt is fine"})),
        ("s/3.txt", b"ignored in sft mode"),
        ("s/3.json", js({"prompt": "héllo ", "response": "wörld", "text": "t3"})),
    ]
    sft_tar = make_tar(sft, tarfile.PAX_FORMAT)

    long_dir = "d" * 60 + "/" + "e" * 60 + "/"
    gnu_name = long_dir + "sample_" + "x" * 17 + ".txt"
    assert len(gnu_name) == 150
    gnu = [(gnu_name, b"long gnu name"), ("short.txt", b"short")]
    pax_name = ("p" * 99 + "/") * 2 + "q" * 90 + ".json"
    pax_uni = "ünïcode/ключ.txt"
    pax = [(pax_name, js({"text": "long pax name"})), (pax_uni, "non-ASCII name".encode())]
    ustar_name = "u" * 80 + "/" + "v" * 65 + ".txt"
    assert len(ustar_name) == 150
    ustar = [(ustar_name, b"ustar prefix"), ("w.txt", b"w")]

    files = {
        "basic.tar": basic_tar,
        "basic.tar.gz": gz(basic_tar),
        "multi.tar.gz": multi,
        "sft.tar": sft_tar,
        "names_gnu.tar": make_tar(gnu, tarfile.GNU_FORMAT),
        "names_pax.tar": make_tar(pax, tarfile.PAX_FORMAT),
        "names_ustar.tar": make_tar(ustar, tarfile.USTAR_FORMAT),
    }
    assert b"././@LongLink" in files["names_gnu.tar"]
    assert b"path=" in files["names_pax.tar"]

    basic_pre = ["hello world\n", "café ☕ 😀", "from json", "txt wins", "four"]
    expected = {
        "basic.tar": {"pretrain": basic_pre},
        "basic.tar.gz": {"pretrain": basic_pre},
        "multi.tar.gz": {"pretrain": basic_pre},
        "sft.tar": {
            "sft": [["2+2=", "4"], ["capital of France?", "Paris"], ["", "empty prompt is fine"],
                    ["héllo ", "wörld"]],
        },
        "names_gnu.tar": {"pretrain": ["long gnu name", "short"], "keys": [gnu_name[:-4], "short"]},
        "names_pax.tar": {"pretrain": ["long pax name", "non-ASCII name"], "keys": [pax_name[:-5], pax_uni[:-4]]},
        "names_ustar.tar": {"pretrain": ["ustar prefix", "w"], "keys": [ustar_name[:-4], "w"]},
    }
    for name, data in files.items():
        with open(os.path.join(args.out, name), "wb") as f:
            f.write(data)
        # the reference reader agrees with what we expect
        with tarfile.open(os.path.join(args.out, name)) as tf:
            names = [m.name for m in tf.getmembers() if m.isreg()]
        assert names, name
    with open(os.path.join(args.out, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False, indent=1, sort_keys=True)
        f.write("\n")
    for name in sorted(files):
        print(f"{args.out}/{name}: {len(files[name])} bytes")


if __name__ == "__main__":
    main()
