#!/usr/bin/env python3
"""Reference ids for llmforge's byte-level BPE tokenizers, from tiktoken.

Runs on the default python3 with tiktoken from PyPI (written against tiktoken
0.14; `pip install tiktoken`). Nothing is downloaded: the GPT-2 encoding is
built from the local encoder.json + vocab.bpe exactly as tiktoken's own
"gpt2" encoding is (tiktoken_ext/openai_public.py: same ranks, same pattern,
<|endoftext|> = 50256), and tiktoken's file cache is switched off
(TIKTOKEN_CACHE_DIR="") so a regenerated local file is never read stale.

Writes (deterministic; seeded generator):
  tests/fixtures/tiktoken_gpt2.jsonl
      {"text": ..., "ids": [...]} per case; "allow_special": true marks cases
      encoded with allowed_special="all" (tiktoken encode), the rest are
      encode_ordinary. A case whose text holds U+0000 carries "hex" (its
      UTF-8 bytes) instead of "text" (cJSON strings stop at NUL).
      The corpus: hand-written cases (prose, code, whitespace runs, all
      contractions in all cases, numbers, CJK, emoji with ZWJ sequences and
      skin tones, combining marks, RTL, mixed scripts, <|endoftext|>, very
      long words), the first 20 KB of tinyshakespeare in ~200 pieces, and 2000
      random strings drawn from a seeded mix of character classes.
  tests/fixtures/tiktoken_unicode_classes.json
      \\p{L}, \\p{N} and \\s as tiktoken's regex engine sees them (ranges of
      code points), probed through tiktoken itself; the C test checks every
      code point through llmforge's pre-tokeniser against it.
  tests/fixtures/tiktoken_bpe_shakespeare.jsonl
      ids of a small BPE trained by llmforge (tests/fixtures/
      tiktoken_bpe_shakespeare.tiktoken: `llmforge tokenizer train --input
      tinyshakespeare.txt --vocab-size 1024`), loaded with tiktoken's
      load_tiktoken_bpe and GPT-2's pattern, <|endoftext|> = largest rank + 1.
      With --llmforge PATH the model file is (re)trained first.
With --check-trainer (and --llmforge) the trainer is first compared with a
plain Python BPE trainer on 200 KB of the corpus (needs the `regex` module).

Usage (from the repository root):
  python3 tools/reference/make_tiktoken_fixture.py [--llmforge build/llmforge [--check-trainer]]
      [--gpt2-dir ../shared/data/gpt2] [--shakespeare ../shared/data/tinyshakespeare.txt]
"""
import argparse
import json
import os
import random
import subprocess
import sys

os.environ["TIKTOKEN_CACHE_DIR"] = ""  # no cache, no downloads
import tiktoken  # noqa: E402
import tiktoken.load  # noqa: E402

# tiktoken_ext/openai_public.py r50k_pat_str (the "gpt2" encoding)
GPT2_PAT = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
EOT = "<|endoftext|>"
SEED = 20240521


def gpt2_encoding(gpt2_dir):
    ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks(
        vocab_bpe_file=os.path.join(gpt2_dir, "vocab.bpe"),
        encoder_json_file=os.path.join(gpt2_dir, "encoder.json"),
    )
    return tiktoken.Encoding(name="gpt2", pat_str=GPT2_PAT, mergeable_ranks=ranks, special_tokens={EOT: 50256})


def rank_file_encoding(path):
    ranks = tiktoken.load.load_tiktoken_bpe(path)
    return tiktoken.Encoding(name="bpe", pat_str=GPT2_PAT, mergeable_ranks=ranks,
                             special_tokens={EOT: max(ranks.values()) + 1})


# ---------------------------------------------------------------- hand-written cases
def handwritten():
    c = []
    # prose
    c += [
        "Hello, world!",
        "The quick brown fox jumps over the lazy dog.",
        "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
        "foolishness, it was the epoch of belief, it was the epoch of incredulity.",
        "Mr. O'Neil's \"quoted\" text -- with dashes — and ellipses... (parentheses) [brackets] {braces}!?",
        "e-mail: someone@example.com, https://example.org/path?q=1&r=two#frag",
        "",
        " ",
        "a",
        "A",
    ]
    # code
    c += [
        "def f(x):\n    return x ** 2  # square\n\n\nclass A(object):\n\tpass\n",
        "for (int i = 0; i < n; i++) {\n    sum += a[i] * b[i];\n}\n",
        "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); return 0; }\n",
        '{"key": [1, 2.5, -3e10, true, null], "nested": {"a": "b"}}',
        "SELECT * FROM users WHERE id = 7 AND name LIKE '%bob%';",
        "    if x:\n        y()\n    else:\n        z()\n",
        "x=>x*2;a&&b||!c;i++;--j;a<<=2;b>>>=1;",
        "<div class=\"a\"><p>hi</p></div>",
    ]
    # whitespace runs
    c += [
        "a  b   c    d     e",
        "trailing spaces   ",
        "   leading spaces",
        "\t\ttabs\tand\t \tspaces",
        "line1\nline2\n\nline4\n\n\n",
        "\n",
        "\n\n\n\n",
        "    ",
        "windows\r\nline\r\nendings\r\n",
        "\r\n\r\n",
        "mixed \t\n \r\n\t end",
        "word \n\n next",
        " \u00a0\u2003\u3000 unicode spaces\u2028\u2029\u0085x",
        "\u180e mongolian vowel separator \u200b zero width space",
        "\x0b\x0c vertical tab form feed",
        "x" + " " * 100 + "y",
        " " * 300,
        "\n" * 200 + "z",
    ]
    # contractions in all cases
    for w in ["s", "t", "re", "ve", "m", "ll", "d"]:
        for form in dict.fromkeys([w, w.upper(), w.capitalize()]):  # ordered: deterministic output
            c.append(f"it'{form} they'{form} '{form} x'{form}y '{form}'{form}")
    c += ["don't won't I'm you're we've they'll she'd it's", "DON'T WON'T I'M YOU'RE WE'VE THEY'LL SHE'D IT'S",
          "'''quoted'''", "rock 'n' roll", "'", "''", "' s", "'S'LL'Ll"]
    # numbers
    c += [
        "12345678901234567890123456789012345678901234567890",
        "3.14159265358979323846 2.718281828459045 -0.000001 1e-10 6.022E23",
        "1,000,000 and 1.000.000 and 1 000 000",
        "Phone: +1 (555) 123-4567, ZIP 90210-1234",
        "2024-05-21T12:34:56Z 0x1F 0b1010 0o777",
        "٠١٢٣٤٥٦٧٨٩ ०१२३४५६७८९ ０１２３ ²³¹ ½ ¾ ⅓ Ⅻ ⅻ ①②③",
        "9" * 500,
    ]
    # CJK, emoji, combining marks, RTL, mixed scripts
    c += [
        "中文文本测试，包括标点符号。日本語のテキスト、ひらがなとカタカナ。한국어 텍스트입니다.",
        "東京都渋谷区 2024年5月21日",
        "😀 😃 😄 😁 😆 😅 😂 🤣 🥲 ☺️",
        "👨‍👩‍👧‍👦 family, 👩🏽‍💻 technologist, 🏳️‍🌈 flag, 👍🏻👍🏼👍🏽👍🏾👍🏿",
        "🇺🇸🇯🇵🇫🇷 flags and keycaps 1️⃣ #️⃣",
        "e\u0301 a\u0308 n\u0303 Z\u0351\u0352\u0353\u0354\u0355 café naïve",
        "Z̤͔ͧ̑̓ä͖̭̈̇lͮ̒ͫǧ̗͚̚o̙̔ͮ̇͐̇",
        "مرحبا بالعالم! هذا نص عربي.",
        "שלום עולם, זה טקסט בעברית.",
        "English العربية עברית 中文 русский ελληνικά हिन्दी ไทย",
        "Привет, мир! Ελληνικά γράμματα. Ünïcödé ñ ß ø å æ œ",
        "ᚠᛇᚻ᛫ᛒᛦᚦ ⠊⠀⠉⠁⠝ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕌𝕟𝕚𝕔𝕠𝕕𝕖",
        "\ufeffBOM at start",
        "\ud7ff\ue000\uffff\U0010ffff\U0001f600 edges",
        # Unicode 15/16 letters and digits (missing from older PCRE2 tables)
        "\U00031350\U00031351 \U0001e4d0\U0001e4d1 \U00011f04\U00011f05 \U0001e5d0 \U0001e4f0\U0001e4f1 \U00016d70",
        "a\U00031350b 1\U0001e4f02 \U000105c0x",
    ]
    # <|endoftext|> as ordinary text
    c += [EOT, f"Hello{EOT}World", f"a {EOT} b", f"{EOT}{EOT}", f"text\n\n{EOT}\n\nmore", "<|endof<|endoftext|>text|>",
          "<|endoftext", "endoftext|>", "<||>"]
    # very long words
    c += [
        "a" * 3000,
        "ab" * 1000,
        "Pneumonoultramicroscopicsilicovolcanoconiosis " * 10,
        "supercalifragilisticexpialidocious" * 30,
        "x" * 64 + " " + "y" * 65 + " " + "z" * 63,
        "!" * 400 + "?" * 100,
        "é" * 700,
        "中" * 500,
        "😀" * 200,
        "abc" * 10 + "123" * 10 + "!@#" * 10,
    ]
    return c


SPECIAL_CASES = [EOT, f"Hello{EOT}World", f"a {EOT} b", f"{EOT}{EOT}", f"text\n\n{EOT}\n\nmore",
                 "<|endof<|endoftext|>text|>", f"  {EOT}  ", f"{EOT}\n", f"x{EOT}", "no special here",
                 f"end with spaces   {EOT}"]

NUL_CASES = ["a\x00b", "\x00", "x \x00\x00 y\n\x00"]


# ---------------------------------------------------------------- random strings
def char_classes():
    def rng(a, b):
        return lambda r: chr(r.randint(a, b))

    def pick(s):
        return lambda r: r.choice(s)

    ascii_letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

    def any_cp(r):
        while True:
            cp = r.randint(1, 0x10FFFF)
            if not 0xD800 <= cp <= 0xDFFF:
                return chr(cp)

    return [
        (30, pick(ascii_letters)),
        (8, pick("0123456789")),
        (8, pick(" ")),
        (4, pick("\t\n\r")),
        (6, pick("!\"#$%&()*+,-./:;<=>?@[\\]^_`{|}~")),
        (5, pick(["'s", "'S", "'t", "'T", "'re", "'RE", "'ve", "'VE", "'m", "'M", "'ll", "'LL", "'Ll", "'d", "'D",
                  "'"])),
        (4, rng(0xC0, 0x17F)),    # Latin-1 supplement, Latin Extended-A
        (3, rng(0x300, 0x36F)),   # combining marks
        (4, rng(0x4E00, 0x9FFF)),  # CJK
        (2, rng(0x3040, 0x30FF)),  # kana
        (2, rng(0xAC00, 0xD7A3)),  # Hangul
        (3, rng(0x1F300, 0x1FAFF)),  # emoji
        (2, pick(["\u200d", "\ufe0f", "\U0001f3fb", "\U0001f3fc", "\U0001f3fd", "\U0001f3fe", "\U0001f3ff"])),
        (2, rng(0x0600, 0x06FF)),  # Arabic
        (2, rng(0x0590, 0x05FF)),  # Hebrew
        (2, rng(0x0400, 0x04FF)),  # Cyrillic
        (2, pick(["\u00a0", "\u2000", "\u2009", "\u200a", "\u3000", "\u0085", "\u2028", "\u2029", "\u180e",
                  "\u200b", "\x0b", "\x0c", "\u202f", "\u205f", "\u1680"])),
        (2, pick(["\u0660", "\u0967", "\uff11", "\u00b2", "\u00bd", "\u2166", "\u2460", "\U0001d7d9"])),
        (1, pick(["\U00031350", "\U0001e4d0", "\U00011f04", "\U0001e5d0", "\U0001e4f0", "\U00016d70",
                  "\U0001ccf0", "\U000105c0", "\ua7cb", "\u1c89"])),
        (2, pick(["<|", "|>", "endoftext", EOT])),
        (2, any_cp),
    ]


def random_strings(n, seed):
    r = random.Random(seed)
    classes = char_classes()
    weights = [w for w, _ in classes]
    out = []
    for _ in range(n):
        parts = []
        for _ in range(r.randint(1, 12)):
            _, gen = r.choices(classes, weights=weights)[0]
            parts.append("".join(gen(r) for _ in range(r.randint(1, 6))))
        out.append("".join(parts))
    return out


def shakespeare_pieces(path, n_bytes=20000, n_pieces=200, seed=SEED):
    with open(path, "rb") as f:
        data = f.read(n_bytes).decode("utf-8")
    r = random.Random(seed + 1)
    cuts = sorted(r.sample(range(1, len(data)), n_pieces - 1))
    bounds = [0] + cuts + [len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:])]


# ---------------------------------------------------------------- Unicode classes
def unicode_classes():
    """\\p{L}, \\p{N}, \\s as tiktoken's regex engine matches them, as [first, last] ranges."""
    byte_ranks = {bytes([i]): i for i in range(256)}
    allc = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    out = {"tiktoken": tiktoken.__version__}
    for name, pat in [("L", r"\p{L}"), ("N", r"\p{N}"), ("S", r"\s")]:
        enc = tiktoken.Encoding(name="probe" + name, pat_str=pat, mergeable_ranks=byte_ranks, special_tokens={})
        chars = enc.decode_bytes(enc.encode_ordinary(allc)).decode("utf-8")
        ranges = []
        for cp in map(ord, chars):
            if ranges and ranges[-1][1] == cp - 1:
                ranges[-1][1] = cp
            else:
                ranges.append([cp, cp])
        out[name] = ranges
    return out


def check_trainer(llmforge, shakespeare, n_bytes=200000, vocab_size=600):
    """llmforge's trainer against a plain Python BPE trainer (full recount per
    merge, same tie-break: count, then left bytes, then right bytes) on the
    first n_bytes of the corpus. Needs the `regex` module (PyPI) for the
    pattern's possessive quantifiers and Unicode classes."""
    import base64
    import collections
    import tempfile
    import regex
    with open(shakespeare, encoding="utf-8") as f:
        text = f.read()[:n_bytes]
    words = [[[bytes([b]) for b in p], c]
             for p, c in collections.Counter(m.encode() for m in regex.findall(GPT2_PAT, text)).items()]
    vocab, order = {bytes([i]) for i in range(256)}, [bytes([i]) for i in range(256)]
    while len(order) < vocab_size - 1:
        cnt = collections.Counter()
        for w, c in words:
            for pair in zip(w, w[1:]):
                cnt[pair] += c
        if not cnt:
            break
        (a, b), c = min(cnt.items(), key=lambda kv: (-kv[1], kv[0][0], kv[0][1]))
        if c < 2:
            break
        if a + b not in vocab:
            vocab.add(a + b)
            order.append(a + b)
        for wc in words:
            w, out, i = wc[0], [], 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            wc[0] = out
    want = "".join(f"{base64.b64encode(t).decode()} {i}\n" for i, t in enumerate(order))
    with tempfile.TemporaryDirectory() as d:
        inp, out = os.path.join(d, "corpus.txt"), os.path.join(d, "m.tiktoken")
        with open(inp, "w", encoding="utf-8") as f:
            f.write(text)
        subprocess.run([llmforge, "tokenizer", "train", "--input", inp, "--vocab-size", str(vocab_size),
                        "--out", out], check=True, stdout=subprocess.DEVNULL)
        with open(out) as f:
            got = f.read()
    if got != want:
        sys.exit("llmforge tokenizer train differs from the Python reference trainer")
    print(f"trainer check: llmforge's {len(order) - 256} merges equal the Python reference trainer's")


def case_line(text, ids, allow_special=False):
    d = {}
    if "\x00" in text:
        d["hex"] = text.encode("utf-8").hex()
    else:
        d["text"] = text
    if allow_special:
        d["allow_special"] = True
    d["ids"] = ids
    return json.dumps(d, ensure_ascii=False)


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpt2-dir", default=os.path.join(root, "..", "shared", "data", "gpt2"))
    ap.add_argument("--shakespeare", default=os.path.join(root, "..", "shared", "data", "tinyshakespeare.txt"))
    ap.add_argument("--llmforge", help="llmforge binary: retrain the small BPE model fixture first")
    ap.add_argument("--out-dir", default=os.path.join(root, "tests", "fixtures"))
    ap.add_argument("--check-trainer", action="store_true",
                    help="also compare llmforge's trainer with a Python reference trainer (needs --llmforge, regex)")
    args = ap.parse_args()
    if args.check_trainer:
        if not args.llmforge:
            sys.exit("--check-trainer needs --llmforge PATH")
        check_trainer(args.llmforge, args.shakespeare)

    enc = gpt2_encoding(args.gpt2_dir)
    texts = handwritten() + shakespeare_pieces(args.shakespeare) + random_strings(2000, SEED)
    path = os.path.join(args.out_dir, "tiktoken_gpt2.jsonl")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        n = 0
        for t in texts + NUL_CASES:
            f.write(case_line(t, enc.encode_ordinary(t)) + "\n")
            n += 1
        for t in SPECIAL_CASES:
            f.write(case_line(t, enc.encode(t, allowed_special="all"), allow_special=True) + "\n")
            n += 1
    print(f"{path}: {n} cases, {os.path.getsize(path)} bytes (tiktoken {tiktoken.__version__})")

    path = os.path.join(args.out_dir, "tiktoken_unicode_classes.json")
    with open(path, "w") as f:
        json.dump(unicode_classes(), f, separators=(",", ":"))
        f.write("\n")
    print(f"{path}: {os.path.getsize(path)} bytes")

    model = os.path.join(args.out_dir, "tiktoken_bpe_shakespeare.tiktoken")
    if args.llmforge:
        subprocess.run([args.llmforge, "tokenizer", "train", "--input", args.shakespeare, "--vocab-size", "1024",
                        "--out", model], check=True)
    if not os.path.exists(model):
        sys.exit(f"{model} is missing: pass --llmforge PATH to train it")
    benc = rank_file_encoding(model)
    r = random.Random(SEED + 2)
    with open(args.shakespeare, encoding="utf-8") as f:
        tail = f.read()[-20000:]  # text the model was trained on, plus unseen kinds of text below
    btexts = handwritten() + [tail[i:i + 400] for i in range(0, len(tail), 400)] + random_strings(300, SEED + 3)
    r.shuffle(btexts)
    path = os.path.join(args.out_dir, "tiktoken_bpe_shakespeare.jsonl")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for t in btexts:
            f.write(case_line(t, benc.encode_ordinary(t)) + "\n")
        for t in SPECIAL_CASES:
            f.write(case_line(t, benc.encode(t, allowed_special="all"), allow_special=True) + "\n")
    print(f"{path}: {len(btexts) + len(SPECIAL_CASES)} cases, {os.path.getsize(path)} bytes "
          f"(model {model}: {benc.n_vocab} ids, {EOT} = {benc.eot_token})")


if __name__ == "__main__":
    main()
