#!/usr/bin/env python3
"""Reference ids for llmforge's "hf:" tokenizer kind, from Hugging Face tokenizers.

Runs in a venv with `tokenizers` from PyPI (written against tokenizers 0.23;
/root/.cache/llmforge/bench-venv/bin/pip install tokenizers). Nothing is
downloaded: every tokenizer.json here is TRAINED by tokenizers' own BpeTrainer
on tinyshakespeare plus the unicode test strings below, then shaped like the
family it stands for (pre-tokenizer, specials and their ids, ignore_merges).

Writes tests/fixtures/hf_tok/ (deterministic: one trainer thread, fixed data):
  gpt2.json       ByteLevel pre-tokenizer with its built-in regex, merges in
                  the legacy "A B" string form, <|endoftext|> as the last id,
                  both in model.vocab and added_tokens (as GPT-2's file).
  llama3.json     Split(Llama 3 regex, Isolated) + ByteLevel(use_regex=false),
                  ignore_merges true, whole-word vocabulary entries no merge
                  makes (so ignore_merges changes ids), specials after the
                  vocabulary (<|begin_of_text|>, <|end_of_text|>,
                  <|start_header_id|>, <|end_header_id|>, <|eot_id|>, a
                  reserved one) and Llama 3's TemplateProcessing post-processor.
  qwen2.json      Split(Qwen2 regex) + ByteLevel(use_regex=false), specials
                  <|endoftext|>, <|im_start|>, <|im_end|> after the vocabulary,
                  non-special added tokens <tool_call>, </tool_call>
                  (normalized false) and <think>, </think> (normalized true).
  smollm.json     Digits(individual_digits) + ByteLevel(use_regex=true),
                  specials <|endoftext|>, <|im_start|>, <|im_end|> as ids 0-2.
  oniguruma.json  a Split regex made of what llmforge rewrites for PCRE2
                  (Ruby's (?m), ^/$ at line breaks, \\h) and of empty matches
                  and gaps, + ByteLevel(use_regex=false).
  nfc.json        Qwen2's shape with Qwen2's normalizer {"type": "NFC"},
                  trained on text with decomposed and precomposed accented
                  Latin, Hangul jamo and syllables, combining marks and ASCII;
                  specials <|endoftext|>, <|im_start|>, <|im_end|>; added
                  tokens whose content is precomposed or decomposed Hangul,
                  normalized true and false (tokenizers matches the first
                  kind in the normalized text, against the normalized
                  content, the second in the raw text).
  nfc.jsonl       as NAME.jsonl over the same strings plus NFC_STRINGS, but
                  "decode" (or "decode_hex") is what llmforge's decode must
                  give: the normalized text, each added token as tokenizers'
                  id_to_token (checked here to equal tokenizers' decode).
  nfc_unicode.json  where tokenizers' NFC (its unicode-normalization tables,
                  Unicode 9) and utf8proc's (the system's libutf8proc, Unicode
                  15 in Debian 12's 2.8) differ, derived over every code
                  point: "pass_through", the code points tokenizers treats as
                  plain starters but utf8proc reorders or composes (combining
                  marks assigned after Unicode 9; U+11930, the second half of
                  U+11938; U+11A7, which utf8proc < 2.11 wrongly composes
                  into a preceding Hangul LV syllable); "tokenizers_marks",
                  the combining marks tokenizers knows;
                  "tokenizers_composites", the primary composites it makes.
                  src/data/hf_nfc.c holds "pass_through" as a table
                  (tests/data/test_hf_tokenizer.c checks it against this file,
                  and utf8proc's marks and composites against the other two
                  lists).
  NAME.jsonl      per test string two lines {"text" (or "hex" when it holds
                  U+0000), "ids", "allow_special", "decode"}: allow_special
                  false is encode(text, add_special_tokens=False) with
                  encode_special_tokens = True, true the same with False;
                  "decode" is decode(ids, skip_special_tokens=False), checked
                  here to equal the text.
Checks made here (the script stops when one fails):
  - tokenizers reads every written file back and gives the same ids;
  - decode(encode(x)) == x for every case;
  - ignore_merges changes the ids of the llama3 whole-word entries;
  - \\p{L}, \\p{N} and \\s of tokenizers' regex engine (Oniguruma) equal
    tests/fixtures/tiktoken_unicode_classes.json on every code point (what
    llmforge's rewritten Split patterns use; tests/data/test_hf_tokenizer.c
    checks those on every code point);
  - GPT-2 itself as a tokenizer.json built from ../shared/data/gpt2 (the
    same JSON tests/data/test_hf_tokenizer.c builds) gives tiktoken's ids on
    every case of tests/fixtures/tiktoken_gpt2.jsonl;
  - nfc: the expected decode equals tokenizers' decode and is canonically
    equivalent to the text; the normalizer changes the ids of the decomposed
    strings (the fixture is not vacuous);
  - NFC as llmforge computes it (utf8proc, through ctypes, on the pieces
    between "pass_through" code points, which are kept) equals tokenizers'
    NFC on every code point alone and in eight contexts (after a base, before
    and after marks of other classes, inside Hangul syllables, the
    decompositions of every composite).

Needs libutf8proc.so.2 (Debian libutf8proc2, which the build needs anyway).

Usage (from the repository root):
  /root/.cache/llmforge/bench-venv/bin/python tools/reference/make_hf_tokenizer_fixture.py \\
      [--shared ../shared] [--out tests/fixtures/hf_tok]
"""
import argparse
import ctypes
import json
import os
import random
import sys

os.environ["RAYON_NUM_THREADS"] = "1"  # one trainer thread: the same merges every run
os.environ["TOKENIZERS_PARALLELISM"] = "false"
import tokenizers  # noqa: E402
from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers,  # noqa: E402
                        processors, trainers)

# as the Llama 3 and Qwen2 tokenizer.json files spell them
LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
            r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SEED = 20240522

UNICODE = [
    "日本語のテキストです。中文文本，한국어 텍스트.",
    "Ελληνικά κείμενο και Русский текст: Привет, мир!",
    "مرحبا بالعالم و עברית שלום",
    "emoji 😀👍🏽 👨‍👩‍👧 🇫🇷 ❤️ zero\u200dwidth",
    "combining e\u0301 a\u0308 n\u0303 vs é ä ñ",
    "nbsp\u00a0here \u3000ideographic\u2028line sep\u2029para",
    "numbers ٣٤٥ ½ Ⅻ ４５６ ¹²³ 1,234,567.89 3.14159 1e-10",
]

STRINGS = [
    "", " ", "\n", "a", "Hello world", "hello World HELLO",
    "  leading spaces", "trailing spaces   ", "a  b   c    d     e",
    "tabs\tand\t\ttabs", "line\nbreaks\n\n\nmany\n", "crlf\r\nline\r\n\r\n", "  \n  \n\t\n",
    "x \n y", "x.\n\ny", "a.\r\nb", "end.\n",
    "I'm you're he's she'd we've they'll IT'S 'S 're' ''s don't",
    "DON'T WE'LL You'Re O'Neil rock'n'roll",
    "Hello, world!!! ... ---- ==== (parens) [brackets] {braces} <angle> @#$%^&*",
    "int main(void) {\n    return 0;\n}\n", "def f(x):\n    return x**2  # square\n",
    "1234567890", "year 2024: 100% of 12345678 items cost $1,999.99",
    "mvs\u180emongolian vowel separator",
    "new letters \U0001e030\U0001e031 \u1c89 \U000105c0 digits \U0001ccf0\U00011f50",
    "a" * 150, "Supercalifragilistic" * 8, "9" * 100, " " * 70 + "x",
    "a\x00b \x00\x00 c",
    "<|endoftext|>", "one<|endoftext|>two", "<|endoftext|><|endoftext|> x", "<|endoftext| <|endoftext",
    "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n",
    "<tool_call>{\"name\": \"f\"}</tool_call> <think>hmm</think>",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>",
    "<|end_of_text|> <|reserved_special_token_0|>",
    "# title\n## sub\nline ends here\n<b>bold\ntext</b> after <b>x</b>", "deadbeef 0x1234 cafe BABE 12",
    "xxyxxy yes yyy axxb x", "word$ end\nnext",
] + UNICODE


# Training text for nfc.json: accented Latin precomposed and decomposed, Hangul as syllables and as conjoining
# jamo, combining marks in and out of canonical order, ASCII. (The trainer normalizes it first.)
NFC_CORPUS = [
    "caf\u00e9 cafe\u0301 r\u00e9sum\u00e9 re\u0301sume\u0301 na\u00efve nai\u0308ve "
    "\u00c5ngstr\u00f6m A\u030angstro\u0308m",
    "cr\u00e8me br\u00fbl\u00e9e cre\u0300me bru\u0302le\u0301e S\u00e3o Sa\u0303o Zo\u00eb Zoe\u0308 "
    "pi\u00f1ata pin\u0303ata",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8 \u1112\u1161\u11ab\u1100\u116e\u11a8\u110b\u1165 "
    "\u1110\u1166\u11a8\u1109\u1173\u1110\u1173 \uac01 \u1100\u1161\u11a8 \uac00\ub098\ub2e4\ub77c",
    "marks a\u0301\u0316 a\u0316\u0301 q\u0307\u0323 \u1e0b\u0323 \u0958 \u2126 \u212b e\u0301\u0301",
    "Ti\u00ea\u0301ng Vi\u1ec7t Vie\u0323\u0302t Vie\u0302\u0323t \u1ea0\u0300",
    "plain ASCII text, numbers 123 and punctuation!",
]

# Test strings of nfc.json beyond STRINGS (which are mostly NFC already).
NFC_STRINGS = [
    "e\u0301", "\u00e9", "e\u0301 \u00e9 e\u0301\u0301 E\u0301", "\u1100\u1161", "A\u030a",
    "\u1100\u1161\u11a8 \uac00\u11a8 \uac01 \uac00",
    "A\u030a \u212b \u00c5 \u00c5ngstr\u00f6m A\u030angstro\u0308m",
    "cafe\u0301 caf\u00e9 re\u0301sume\u0301 nai\u0308ve pin\u0303ata Sa\u0303o Vie\u0323\u0302t",
    # specials cut the text before it is normalized: a mark after one stays apart from the letter before it
    "cafe\u0301<|endoftext|>e\u0301", "e<|endoftext|>\u0301", "\u0301<|im_end|>\u0301x", "<|endoftext|>\u0301",
    "<|im_start|>user\nre\u0301sume\u0301 \u1112\u1161\u11ab\u1100\u116e\u11a8\u110b\u1165<|im_end|>\n",
    # added tokens: \uac00\ub098 (normalized, precomposed), \u1103\u1161 (normalized, decomposed: matched as \ub2e4),
    # \u1105\u1161 (not normalized, decomposed: matched only as written)
    "\u1100\u1161\u1102\u1161 \uac00\ub098 <\uac00\ub098>", "\u1103\u1161 \ub2e4 \u1105\u1161 \ub77c",
    "x\u1105\u1161\u11a8 \u1103\u1161\u11a8", "<tool_call>e\u0301</tool_call>",
    # canonical order, singletons, composition exclusions
    "a\u0301\u0316 a\u0316\u0301 q\u0307\u0323 \u1e0b\u0323 \u1e0d\u0307",
    "\u2126 \u212b \u0958 \u0344 \u0340 \u0341 \u1f71 \u0387 \u037e \uf900 \U0002f800",
    # marks tokenizers' tables (Unicode 9) do not have: plain starters there
    "a\u1dfa\u0301 x\u0301\u1dfa \u0915\u093c\u0d3b e\u0898\u0301 \U00011935\U00011930 \U00011938",
    "e\u0301" * 200 + "x", "Ange\u0301lique " * 30, "e\u0301\x00e\u0301 \x00\u0301",
]


def read_shakespeare(shared):
    with open(os.path.join(shared, "data", "tinyshakespeare.txt"), encoding="utf-8") as f:
        return f.read()


def shakespeare_cases(text, rng, n):
    """n pieces of the corpus (varied lengths, some held out near the end) and one long chunk."""
    out = []
    for i in range(n):
        at = rng.randrange(0, len(text) - 400)
        out.append(text[at:at + rng.choice([20, 60, 150, 300])])
    out.append(text[-3000:])
    return out


def train(text, vocab_size, pre, model, special_tokens=(), normalizer=None, extra=()):
    tok = Tokenizer(model)
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                             special_tokens=list(special_tokens),
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    corpus = [text] + UNICODE * 20 + list(extra) * 20
    tok.train_from_iterator(corpus, tr)
    return tok


def byte_level(s):
    """s in the byte alphabet (how model.vocab spells a token)."""
    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False).pre_tokenize_str(s)[0][0]


def make_gpt2(text):
    tok = train(text, 1000, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True), models.BPE())
    j = json.loads(tok.to_str())
    vocab = j["model"]["vocab"]
    eot = len(vocab)
    vocab["<|endoftext|>"] = eot  # in model.vocab and added_tokens, as GPT-2's file
    j["added_tokens"] = [dict(id=eot, content="<|endoftext|>", single_word=False, lstrip=False, rstrip=False,
                              normalized=False, special=True)]
    j["model"]["merges"] = [a + " " + b for a, b in j["model"]["merges"]]  # the legacy form
    return j


def make_llama3(text):
    pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3_RE), behavior="isolated", invert=False),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True,
                                                            use_regex=False)])
    tok = train(text, 1500, pre, models.BPE(ignore_merges=True))
    j = json.loads(tok.to_str())
    j["model"]["ignore_merges"] = True
    vocab = j["model"]["vocab"]
    # whole words no merge makes: with ignore_merges each is one id
    for w in map(byte_level, [" Supercalifragilistic", " zyzzyva", " quixotic", " уу"]):
        if w not in vocab:
            vocab[w] = len(vocab)
    tok = Tokenizer.from_str(json.dumps(j))
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|start_header_id|>",
                "<|end_header_id|>", "<|eot_id|>"]
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                                       pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                                       special_tokens=[("<|begin_of_text|>", bos)])
    return json.loads(tok.to_str())


def make_qwen2(text):
    pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2_RE), behavior="isolated", invert=False),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False,
                                                            use_regex=False)])
    tok = train(text, 800, pre, models.BPE())
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False)
                            for s in ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]])
    tok.add_tokens([AddedToken("<tool_call>", special=False, normalized=False),
                    AddedToken("</tool_call>", special=False, normalized=False),
                    AddedToken("<think>", special=False, normalized=True),
                    AddedToken("</think>", special=False, normalized=True)])
    return json.loads(tok.to_str())


def make_smollm(text):
    pre = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True,
                                                            use_regex=True)])
    tok = train(text, 600, pre, models.BPE(), special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    return json.loads(tok.to_str())


def make_oniguruma(text):
    """A Split regex using what llmforge rewrites for PCRE2: Ruby's (?m) (dot matches newline), ^ and $ at line
    breaks, \\h (hex digit), \\s and \\p{L}; empty matches (x*, a lookahead) and gaps between matches."""
    pat = r"(?m:<b>.*?</b>)|^#+|\h{3,}|\p{L}+$|x*|(?=y)|\s+"
    pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(pat), behavior="isolated", invert=False),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok = train(text[:200000], 400, pre, models.BPE())
    tok.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)])
    return json.loads(tok.to_str())


def make_nfc(text):
    """Qwen2's shape and normalizer, trained on NFC_CORPUS too."""
    pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2_RE), behavior="isolated", invert=False),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False,
                                                            use_regex=False)])
    tok = train(text[:300000], 900, pre, models.BPE(), normalizer=normalizers.NFC(), extra=NFC_CORPUS)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False)
                            for s in ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]])
    tok.add_tokens([AddedToken("<tool_call>", special=False, normalized=False),
                    AddedToken("</tool_call>", special=False, normalized=False),
                    AddedToken("\uac00\ub098", special=False, normalized=True),
                    AddedToken("\u1103\u1161", special=False, normalized=True),
                    AddedToken("\u1105\u1161", special=False, normalized=False)])
    j = json.loads(tok.to_str())
    if j["normalizer"] != {"type": "NFC"}:
        sys.exit(f"nfc: the normalizer is written as {j['normalizer']}, not as Qwen2's {{'type': 'NFC'}}")
    return j


def encode(tok, text, allow_special):
    tok.encode_special_tokens = not allow_special
    ids = tok.encode(text, add_special_tokens=False).ids
    tok.encode_special_tokens = False
    return ids


def write_cases(tok, texts, path):
    lines = []
    for text in texts:
        for allow in (False, True):
            ids = encode(tok, text, allow)
            dec = tok.decode(ids, skip_special_tokens=False)
            if dec != text:
                sys.exit(f"{path}: decode(encode({text[:40]!r})) = {dec[:40]!r}, not the text")
            case = {"hex": text.encode().hex()} if "\x00" in text else {"text": text}
            case.update(ids=ids, allow_special=allow, decode=dec if "\x00" not in text else None)
            lines.append(json.dumps(case, ensure_ascii=False))
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return len(lines)


def lf_decode(tok, ids):
    """What llmforge's decode gives: vocabulary ids through the ByteLevel decoder, an added token as its
    id_to_token (for a normalized one, tokenizers' normalized content)."""
    added = {a.content: i for i, a in tok.get_added_tokens_decoder().items()}
    added_ids = set(added.values())
    out, run = [], []
    for i in ids:
        if i in added_ids:
            out.append(tok.decode(run, skip_special_tokens=False) if run else "")
            out.append(tok.id_to_token(i))
            run = []
        else:
            run.append(i)
    out.append(tok.decode(run, skip_special_tokens=False) if run else "")
    return "".join(out)


def write_cases_nfc(tok, texts, path):
    """Like write_cases, with "decode" the normalized text llmforge's decode gives (checked against tokenizers)."""
    nfc = normalizers.NFC()
    lines = []
    for text in texts:
        for allow in (False, True):
            ids = encode(tok, text, allow)
            dec = lf_decode(tok, ids)
            if dec != tok.decode(ids, skip_special_tokens=False):
                sys.exit(f"{path}: {text[:40]!r}: the decode expected of llmforge differs from tokenizers' own")
            if nfc.normalize_str(dec) != nfc.normalize_str(text):
                sys.exit(f"{path}: decode(encode({text[:40]!r})) = {dec[:40]!r} is not canonically equivalent")
            case = {"hex": text.encode().hex()} if "\x00" in text else {"text": text}
            case.update(ids=ids, allow_special=allow)
            case.update({"decode_hex": dec.encode().hex()} if "\x00" in dec else {"decode": dec})
            lines.append(json.dumps(case, ensure_ascii=False))
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return len(lines)


class Utf8proc:
    """The system's libutf8proc (what llmforge links), through ctypes."""
    STABLE, COMPOSE, DECOMPOSE = 1 << 1, 1 << 3, 1 << 4

    class Prop(ctypes.Structure):  # the first two fields of utf8proc_property_t
        _fields_ = [("category", ctypes.c_int16), ("combining_class", ctypes.c_int16)]

    def __init__(self):
        u = self.lib = ctypes.CDLL("libutf8proc.so.2")
        u.utf8proc_map.restype = ctypes.c_ssize_t
        u.utf8proc_map.argtypes = [ctypes.c_char_p, ctypes.c_ssize_t, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
        u.utf8proc_get_property.restype = ctypes.POINTER(self.Prop)
        u.utf8proc_get_property.argtypes = [ctypes.c_int32]
        u.utf8proc_decompose_char.restype = ctypes.c_ssize_t
        u.utf8proc_decompose_char.argtypes = [ctypes.c_int32, ctypes.POINTER(ctypes.c_int32), ctypes.c_ssize_t,
                                              ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
        u.utf8proc_unicode_version.restype = ctypes.c_char_p
        self.libc = ctypes.CDLL(None)
        self.libc.free.argtypes = [ctypes.c_void_p]
        self.version = u.utf8proc_unicode_version().decode()

    def nfc(self, s):
        b = s.encode()
        p = ctypes.c_void_p()
        n = self.lib.utf8proc_map(b, len(b), ctypes.byref(p), self.STABLE | self.COMPOSE)
        if n < 0:
            sys.exit(f"utf8proc_map failed ({n})")
        r = ctypes.string_at(p, n).decode()
        self.libc.free(p)
        return r

    def ccc(self, c):
        return self.lib.utf8proc_get_property(c).contents.combining_class

    def decomposition(self, c):
        buf = (ctypes.c_int32 * 8)()
        last = ctypes.c_int(0)
        n = self.lib.utf8proc_decompose_char(c, buf, 8, self.DECOMPOSE, ctypes.byref(last))
        return [buf[k] for k in range(n)]


def ranges(cps):
    out = []
    for c in sorted(cps):
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def check_nfc_tables(out_dir):
    """Derive where tokenizers' NFC and utf8proc's differ, check that passing those code points through (cutting
    the text around them) makes utf8proc give tokenizers' NFC everywhere, write nfc_unicode.json."""
    up = Utf8proc()
    hf = normalizers.NFC().normalize_str
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF and c != 0x0A]  # \n separates the batches

    def each(fn, make):
        res = {}
        for i in range(0, len(cps), 8192):
            chunk = cps[i:i + 8192]
            got = fn("\n".join(make(c) for c in chunk)).split("\n")
            assert len(got) == len(chunk)
            res.update(zip(chunk, got))
        return res

    # contexts: a base that composes with nothing ("#"), marks of class 1 (U+0334), 220 (U+0316), 230 (U+0301)
    contexts = [lambda c: chr(c), lambda c: "#" + chr(c) + "\u0334", lambda c: "#\u0301" + chr(c),
                lambda c: "a" + chr(c) + "\u0301", lambda c: "a\u0301" + chr(c) + "\u0316",
                lambda c: chr(c) + "\u0316\u0301", lambda c: "\u1100\u1161" + chr(c) + "\u11a8",
                lambda c: "\u1100" + chr(c) + "\u1161"]
    unknown = set()  # the pass-through code points
    for make in contexts:
        a, b = each(hf, make), each(up.nfc, make)
        unknown.update(c for c in cps if a[c] != b[c])
    composites, hf_composites = [], []
    for c in cps:
        d = up.decomposition(c)
        if len(d) == 2 and not 0xAC00 <= c <= 0xD7A3 and up.nfc(chr(d[0]) + chr(d[1])) == chr(c):
            composites.append((c, d))
            if hf(chr(d[0]) + chr(d[1])) == chr(c):
                hf_composites.append(c)
            else:
                unknown.add(d[1])  # tokenizers does not compose it: its second half passes through
    marks = {c for c in cps if up.ccc(c) > 0}

    def lf_nfc(s):
        out, piece = [], []
        for ch in s:
            if ord(ch) in unknown:
                out += [up.nfc("".join(piece)), ch]
                piece = []
            else:
                piece.append(ch)
        return "".join(out) + up.nfc("".join(piece))

    bad = set()
    for make in contexts:
        a, b = each(hf, make), each(lf_nfc, make)
        bad.update(c for c in cps if a[c] != b[c])
    for c, d in composites:
        s = chr(d[0]) + chr(d[1]) + "\u0316"
        if hf(s) != lf_nfc(s):
            bad.add(c)
    if bad:
        sys.exit(f"NFC: utf8proc with the {len(unknown)} code points passed through still differs from "
                 f"tokenizers on {len(bad)} code points, e.g. " + ", ".join(f"U+{c:04X}" for c in sorted(bad)[:10]))
    # what else may differ: U+11A7 (Hangul TBase, not a trailing consonant), which utf8proc before 2.11 wrongly
    # composes into a preceding LV syllable, deleting it (JuliaStrings/utf8proc#317); tokenizers does not
    odd = sorted(unknown - marks - {d[1] for _, d in composites} - {0x11A7})
    if odd:
        sys.exit("NFC: code points where tokenizers and utf8proc differ that are neither marks, nor the second half "
                 "of a composite, nor U+11A7: " + ", ".join(f"U+{c:04X}" for c in odd[:20]))
    j = {"utf8proc_unicode": up.version, "tokenizers": tokenizers.__version__,
         "pass_through": ranges(unknown), "tokenizers_marks": ranges(marks - unknown),
         "tokenizers_composites": sorted(hf_composites)}
    with open(os.path.join(out_dir, "nfc_unicode.json"), "w") as f:
        json.dump(j, f, separators=(",", ":"))
        f.write("\n")
    print(f"NFC: tokenizers = utf8proc {up.version} with {len(unknown)} code points passed through "
          f"({len(j['pass_through'])} ranges), on all {len(cps) + 1} code points in {len(contexts)} contexts and "
          f"{len(composites)} decompositions; tokenizers knows {len(marks - unknown)} marks and "
          f"{len(hf_composites)} composites")
    print("  the table of src/data/hf_nfc.c:")
    for a, b in j["pass_through"]:
        print(f"    {{0x{a:04X}, 0x{b:04X}}},")


def check_unicode_classes(root):
    """tokenizers' \\p{L}, \\p{N}, \\s (Oniguruma) against tiktoken's, on every code point."""
    with open(os.path.join(root, "tests", "fixtures", "tiktoken_unicode_classes.json")) as f:
        want = json.load(f)
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    s = "".join(map(chr, cps))
    for name, pat in (("L", r"\p{L}"), ("N", r"\p{N}"), ("S", r"\s")):
        members = set(cps)
        for _, (a, b) in pre_tokenizers.Split(Regex(pat), behavior="removed").pre_tokenize_str(s):
            members.difference_update(cps[a:b])  # what is left after removing the matches is not in the class
        have = set()
        for a, b in want[name]:
            have.update(range(a, b + 1))
        if members != have:
            diff = sorted(members ^ have)
            sys.exit(f"class {name}: tokenizers and tiktoken differ on {len(diff)} code points, e.g. "
                     + ", ".join(f"U+{c:04X}" for c in diff[:10]))
        print(f"class {name}: tokenizers = tiktoken on all {len(cps)} code points ({len(members)} members)")


def gpt2_json(shared):
    """GPT-2 as a tokenizer.json, from encoder.json + vocab.bpe: what test_hf_tokenizer.c builds."""
    d = os.path.join(shared, "data", "gpt2")
    with open(os.path.join(d, "encoder.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    with open(os.path.join(d, "vocab.bpe"), encoding="utf-8") as f:
        merges = [ln.rstrip("\n") for ln in f.read().split("\n")[1:] if ln.strip()]
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [dict(id=50256, content="<|endoftext|>", single_word=False, lstrip=False, rstrip=False,
                              normalized=False, special=True)],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }


def check_gpt2(root, shared):
    tok = Tokenizer.from_str(json.dumps(gpt2_json(shared)))
    n = bad = 0
    with open(os.path.join(root, "tests", "fixtures", "tiktoken_gpt2.jsonl"), encoding="utf-8") as f:
        for line in f:
            c = json.loads(line)
            text = c["text"] if "text" in c else bytes.fromhex(c["hex"]).decode("utf-8", "surrogatepass")
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                continue  # not text tokenizers can take
            n += 1
            if encode(tok, text, c.get("allow_special", False)) != c["ids"]:
                bad += 1
                if bad <= 5:
                    print(f"GPT-2: tokenizers differs from tiktoken on {text[:60]!r}")
    if bad:
        sys.exit(f"GPT-2: tokenizers differs from tiktoken on {bad} of {n} cases")
    print(f"GPT-2 as tokenizer.json: tokenizers = tiktoken on all {n} cases of tiktoken_gpt2.jsonl")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shared", default=os.path.join(root, "..", "shared"))
    ap.add_argument("--out", default=os.path.join(root, "tests", "fixtures", "hf_tok"))
    a = ap.parse_args()
    print(f"tokenizers {tokenizers.__version__}")
    text = read_shakespeare(a.shared)
    rng = random.Random(SEED)
    texts = STRINGS + shakespeare_cases(text, rng, 12) + [
        " Supercalifragilistic zyzzyva quixotic уу Supercalifragilisticexpialidocious"]
    os.makedirs(a.out, exist_ok=True)
    for name, make in (("gpt2", make_gpt2), ("llama3", make_llama3), ("qwen2", make_qwen2),
                       ("smollm", make_smollm), ("oniguruma", make_oniguruma), ("nfc", make_nfc)):
        j = make(text)
        path = os.path.join(a.out, name + ".json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(j, f, ensure_ascii=False, indent=None, separators=(",", ":"))
            f.write("\n")
        with open(path, encoding="utf-8") as f:
            tok = Tokenizer.from_str(f.read())  # what the C test opens
        if name == "nfc":
            n = write_cases_nfc(tok, texts + NFC_STRINGS, os.path.join(a.out, name + ".jsonl"))
            plain = Tokenizer.from_str(json.dumps(dict(j, normalizer=None)))
            changed = sum(encode(plain, x, False) != encode(tok, x, False) for x in NFC_STRINGS)
            if changed < len(NFC_STRINGS) // 2:
                sys.exit(f"nfc: the normalizer changes the ids of only {changed} of {len(NFC_STRINGS)} strings")
        else:
            n = write_cases(tok, texts, os.path.join(a.out, name + ".jsonl"))
        print(f"{name}: {tok.get_vocab_size()} ids, {len(j['model']['merges'])} merges, {n} cases "
              f"({os.path.getsize(path)} bytes)")
        if name == "llama3":
            off = dict(j, model=dict(j["model"], ignore_merges=False))
            t2 = Tokenizer.from_str(json.dumps(off))
            w = " Supercalifragilistic zyzzyva quixotic"
            if encode(t2, w, False) == encode(tok, w, False):
                sys.exit("llama3: ignore_merges does not change the ids of the whole-word entries")
    check_nfc_tables(a.out)
    check_unicode_classes(root)
    check_gpt2(root, a.shared)


if __name__ == "__main__":
    main()
