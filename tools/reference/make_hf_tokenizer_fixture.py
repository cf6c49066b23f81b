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
    every case of tests/fixtures/tiktoken_gpt2.jsonl.

Usage (from the repository root):
  /root/.cache/llmforge/bench-venv/bin/python tools/reference/make_hf_tokenizer_fixture.py \\
      [--shared ../shared] [--out tests/fixtures/hf_tok]
"""
import argparse
import json
import os
import random
import sys

os.environ["RAYON_NUM_THREADS"] = "1"  # one trainer thread: the same merges every run
os.environ["TOKENIZERS_PARALLELISM"] = "false"
import tokenizers  # noqa: E402
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers  # noqa: E402

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


def train(text, vocab_size, pre, model, special_tokens=()):
    tok = Tokenizer(model)
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                             special_tokens=list(special_tokens),
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    corpus = [text] + UNICODE * 20
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
                       ("smollm", make_smollm), ("oniguruma", make_oniguruma)):
        j = make(text)
        path = os.path.join(a.out, name + ".json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(j, f, ensure_ascii=False, indent=None, separators=(",", ":"))
            f.write("\n")
        with open(path, encoding="utf-8") as f:
            tok = Tokenizer.from_str(f.read())  # what the C test opens
        n = write_cases(tok, texts, os.path.join(a.out, name + ".jsonl"))
        print(f"{name}: {tok.get_vocab_size()} ids, {len(j['model']['merges'])} merges, {n} cases "
              f"({os.path.getsize(path)} bytes)")
        if name == "llama3":
            off = dict(j, model=dict(j["model"], ignore_merges=False))
            t2 = Tokenizer.from_str(json.dumps(off))
            w = " Supercalifragilistic zyzzyva quixotic"
            if encode(t2, w, False) == encode(tok, w, False):
                sys.exit("llama3: ignore_merges does not change the ids of the whole-word entries")
    check_unicode_classes(root)
    check_gpt2(root, a.shared)


if __name__ == "__main__":
    main()
