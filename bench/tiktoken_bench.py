#!/usr/bin/env python3
"""tiktoken's side of bench/tokenizer.sh (default python3, tiktoken from PyPI).

  tiktoken_bench.py make-text --src FILE --mb N --out FILE
      Writes >= N MB of text: copies of FILE, each with seeded variations (its
      paragraphs shuffled, some lines upper-cased, numbers and accented words
      inserted) so no two copies are alike.
  tiktoken_bench.py run --text FILE --gpt2-dir DIR [--repeats R] [--threads 1,2]
      Encodes FILE with tiktoken's GPT-2 encoding, built from the local
      encoder.json + vocab.bpe (nothing downloaded, TIKTOKEN_CACHE_DIR=""):
      encode_ordinary_batch over documents (the text cut where llmforge may
      cut it, before an ASCII space/newline that follows a non-space ASCII
      character, about 256 KB each, so the ids are the whole text's) with
      num_threads=T for each T, and encode_ordinary on the whole text once per
      repeat. One JSON line per configuration: median seconds, MB/s (10^6
      bytes), token count.
  tiktoken_bench.py summary LINE...
      The table bench/tokenizer.sh prints (JSON lines from llmforge and run).
"""
import argparse
import json
import os
import random
import statistics
import sys
import time


def make_text(src, mb, out):
    with open(src, encoding="utf-8") as f:
        base = f.read()
    paras = base.split("\n\n")
    words = ["café", "naïve", "Zürich", "señor", "déjà", "Ærø", "Łódź"]
    target = mb * 1_000_000
    size, k = 0, 0
    with open(out, "w", encoding="utf-8") as f:
        while size < target:
            r = random.Random(1000 + k)
            ps = paras[:]
            r.shuffle(ps)
            outp = []
            for p in ps:
                lines = p.split("\n")
                for i, line in enumerate(lines):
                    x = r.random()
                    if x < 0.05:
                        lines[i] = line.upper()
                    elif x < 0.10:
                        lines[i] = f"{line} {r.randint(0, 10**r.randint(1, 9))}"
                    elif x < 0.13:
                        lines[i] = f"{r.choice(words)} {line}"
                outp.append("\n".join(lines))
            chunk = "\n\n".join(outp) + "\n\n"
            f.write(chunk)
            size += len(chunk.encode("utf-8"))
            k += 1
    print(json.dumps({"text": out, "bytes": size, "copies": k}))


def safe_cut(s, frm):
    """First p >= frm with s[p-1] printable non-space ASCII and s[p] an ASCII space/newline (llmforge's rule)."""
    n = len(s)
    p = max(frm, 1)
    while p < n:
        c, d = s[p], s[p - 1]
        if c in " \t\n\r\x0b\x0c" and "!" <= d <= "~":
            return p
        p += 1
    return n


def documents(text, size=256_000):
    docs, at = [], 0
    while at < len(text):
        c = safe_cut(text, at + size)
        docs.append(text[at:c])
        at = c
    return docs


def gpt2_encoding(gpt2_dir):
    os.environ["TIKTOKEN_CACHE_DIR"] = ""
    import tiktoken
    import tiktoken.load
    ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks(
        vocab_bpe_file=os.path.join(gpt2_dir, "vocab.bpe"),
        encoder_json_file=os.path.join(gpt2_dir, "encoder.json"))
    pat = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
    return tiktoken, tiktoken.Encoding(name="gpt2", pat_str=pat, mergeable_ranks=ranks,
                                       special_tokens={"<|endoftext|>": 50256})


def run(text_path, gpt2_dir, repeats, threads):
    tiktoken, enc = gpt2_encoding(gpt2_dir)
    with open(text_path, encoding="utf-8") as f:
        text = f.read()
    nbytes = len(text.encode("utf-8"))
    docs = documents(text)
    configs = [("encode_ordinary_batch", t) for t in threads] + [("encode_ordinary", 1)]
    for mode, t in configs:
        secs, tokens = [], None
        for _ in range(repeats):
            t0 = time.perf_counter()
            if mode == "encode_ordinary":
                n = len(enc.encode_ordinary(text))
            else:
                n = sum(len(x) for x in enc.encode_ordinary_batch(docs, num_threads=t))
            secs.append(time.perf_counter() - t0)
            tokens = n
        med = statistics.median(secs)
        print(json.dumps({"impl": "tiktoken " + tiktoken.__version__, "mode": mode, "threads": t,
                          "documents": len(docs) if mode != "encode_ordinary" else 1, "bytes": nbytes,
                          "tokens": tokens, "seconds": [round(s, 6) for s in secs],
                          "median_seconds": round(med, 6), "mb_per_s": round(nbytes / med / 1e6, 3)}), flush=True)


def summary(lines):
    rows = [json.loads(x) for x in lines]
    lf = {r["threads"]: r for r in rows if "impl" not in r}
    tk = {(r["mode"], r["threads"]): r for r in rows if "impl" in r}
    base = tk[("encode_ordinary_batch", 1)]
    toks = {r["tokens"] for r in rows}
    print("\n%-44s %8s %10s %10s" % ("", "threads", "MB/s (med)", "x tiktoken-1"))
    for t, r in sorted(lf.items()):
        print("%-44s %8d %10.2f %10.2f" % ("llmforge tokenize --bench", t, r["mb_per_s"], r["mb_per_s"] / base["mb_per_s"]))
    for (mode, t), r in sorted(tk.items()):
        print("%-44s %8d %10.2f %10.2f" % (r["impl"] + " " + mode, t, r["mb_per_s"], r["mb_per_s"] / base["mb_per_s"]))
    if 1 in lf and 2 in lf:
        print("llmforge scaling 1 -> 2 threads: %.2fx" % (lf[2]["mb_per_s"] / lf[1]["mb_per_s"]))
    if ("encode_ordinary_batch", 2) in tk:
        print("tiktoken scaling 1 -> 2 threads: %.2fx" % (tk[("encode_ordinary_batch", 2)]["mb_per_s"] / base["mb_per_s"]))
    print("bytes: %d; token counts %s" % (base["bytes"], "all equal (%d)" % toks.pop() if len(toks) == 1 else "DIFFER: %s" % sorted(toks)))
    return 0 if len({r["tokens"] for r in rows}) == 1 else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make-text")
    m.add_argument("--src", required=True)
    m.add_argument("--mb", type=int, default=50)
    m.add_argument("--out", required=True)
    r = sub.add_parser("run")
    r.add_argument("--text", required=True)
    r.add_argument("--gpt2-dir", required=True)
    r.add_argument("--repeats", type=int, default=5)
    r.add_argument("--threads", default="1,2")
    s = sub.add_parser("summary")
    s.add_argument("lines", nargs="+")
    a = ap.parse_args()
    if a.cmd == "make-text":
        make_text(a.src, a.mb, a.out)
    elif a.cmd == "run":
        run(a.text, a.gpt2_dir, a.repeats, [int(x) for x in a.threads.split(",")])
    else:
        sys.exit(summary(a.lines))


if __name__ == "__main__":
    main()
