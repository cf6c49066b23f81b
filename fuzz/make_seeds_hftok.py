#!/usr/bin/env python3
"""Write the hand-made seeds of fuzz/corpus/hftok/ (stdlib only).

Deterministic; run from anywhere: python3 fuzz/make_seeds_hftok.py. The input
format is fuzz/fuzz_hftok.c's: a selector byte, then the payload.
  sel & 1 == 0: "tokenizer.json NUL text" (the JSON is opened as hf:)
  sel & 1 == 1: text for fixture (sel >> 1) % 6 of tests/fixtures/hf_tok
                (0 gpt2, 1 llama3, 2 qwen2, 3 smollm, 4 oniguruma, 5 nfc)
The files are seed_*; inputs merged from fuzzing runs are not touched.
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus", "hftok")
FIXTURES = os.path.join(os.path.dirname(HERE), "tests", "fixtures", "hf_tok")
NAMES = ["gpt2", "llama3", "qwen2", "smollm", "oniguruma", "nfc"]

TEXT = ("First Citizen:\nBefore we proceed, hear me speak.\r\n  x.\n\ny 12345 ½ 日本語 😀👍🏽 I'm DON'T\t"
        "<|endoftext|><|im_start|>user<|im_end|><tool_call>x</tool_call><think>t</think>"
        "<|begin_of_text|> <b>bold\ntext</b> # h\ndeadbeef xxyx").encode()
# decomposed text for the NFC normalizer (nfc.json and the mini_nfc files): marks after letters, out of canonical
# order, after a special token; Hangul jamo; marks tokenizers' Unicode 9 tables lack (U+1DFA), U+11A7 after a
# syllable, U+11935 U+11930 (composed by Unicode 13, not by tokenizers); the added tokens of nfc.json
DECOMPOSED = ("cafe\u0301 A\u030a \u212b q\u0307\u0323 a\u0301\u0316 e<|endoftext|>\u0301 <|im_end|>\u0301x "
              "\u1100\u1161\u11a8 \u1100\u1161\u1102\u1161 \u1103\u1161 x\u1105\u1161\u11a8 a\u1dfa\u0301 "
              "\uac00\u11a7 \U00011935\U00011930 \u0958 e\u0301\u0301\u0301").encode()


def out(fname, sel, payload):
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "seed_" + fname), "wb") as f:
        f.write(bytes([sel]) + payload)


def alphabet():
    bs = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


A = alphabet()


def mini(**kw):
    """A small tokenizer.json: the 256 byte tokens, a few merges; kw replaces parts."""
    vocab = {A[b]: b for b in range(256)}
    vocab.update({"th": 256, "he": 257, "the": 258, "Ġt": 259, "Ġthe": 260, "in": 261, "ing": 262, "ĠĠ": 263})
    j = {"version": "1.0", "truncation": None, "padding": None,
         "added_tokens": [{"id": 264, "content": "<|endoftext|>", "special": True, "normalized": False}],
         "normalizer": None,
         "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
         "post_processor": None, "decoder": {"type": "ByteLevel"},
         "model": {"type": "BPE", "ignore_merges": False, "vocab": vocab,
                   "merges": ["t h", "h e", "th e", "Ġ t", "Ġt he", "i n", "in g", "Ġ Ġ"]}}
    model = kw.pop("model", {})
    j.update(kw)
    j["model"].update(model)
    return json.dumps(j, ensure_ascii=False).encode()


def split(pattern, behavior="Isolated", key="Regex", bytelevel_regex=False):
    return {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {key: pattern}, "behavior": behavior, "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "use_regex": bytelevel_regex}]}


def main():
    for i, name in enumerate(NAMES):
        with open(os.path.join(FIXTURES, name + ".json"), "rb") as f:
            body = f.read()
        out(f"{name}.json", 0, body + b"\x00" + TEXT + DECOMPOSED + b" \xff\xc3")
        out(f"text_{name}.txt", 1 | (i << 1), TEXT)
        out(f"text_{name}_decomposed.txt", 1 | (i << 1), DECOMPOSED + b" \xcc\x81\xff" + DECOMPOSED[:30] + b"\xe1\x84")
        out(f"text_{name}_invalid.txt", 1 | (i << 1), b"ok \x80 \xed\xa0\x80 \xf4\x90\x80\x80" + TEXT[:40])
        out(f"ids_{name}.bin", 1 | (i << 1), bytes(range(256)) * 2)
    out("mini.json", 0, mini() + b"\x00the thing  in   <|endoftext|>")
    out("mini_ignore_merges.json", 0, mini(model={"ignore_merges": True}) + b"\x00 the ing")
    out("mini_pairs.json", 0, mini(model={"merges": [["t", "h"], ["th", "e"]]}) + b"\x00the")
    out("mini_digits.json", 0, mini(pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": False},
        {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}]}) + b"\x00ab 12345 c3")
    out("mini_split_string.json", 0, mini(pre_tokenizer=split("the", key="String")) + b"\x00xthey the")
    out("mini_split_empty.json", 0, mini(pre_tokenizer=split(r"x*|(?=y)|(?m:a.b)|^#|\h{2,}|\p{L}+$")) +
        b"\x00axxyb a\nb\n# ff00\nend")
    out("mini_split_twice.json", 0, mini(pre_tokenizer=split(r"\s+|\S+", bytelevel_regex=True)) + b"\x00a  b c")
    out("mini_added.json", 0, mini(added_tokens=[
        {"id": 264, "content": "<|endoftext|>", "special": True, "normalized": False},
        {"id": 265, "content": "<x>", "special": False, "normalized": True},
        {"id": 266, "content": "<x>y", "special": True, "normalized": False}]) + b"\x00<x>y <x> <|endoftext|>")
    out("mini_holes.json", 0, mini(added_tokens=[{"id": 9000, "content": "</s>", "special": True}]) +
        b"\x00\x28\x23\x27\x23\x00\x00")
    out("mini_raw_vocab.json", 0, mini(added_tokens=[], model={"vocab": dict({A[b]: b for b in range(256)}, **{"a b": 300}), "merges": []}) +
        b"\x00a b")
    # refused
    out("bad_wordpiece.json", 0, mini(model={"type": "WordPiece"}))
    out("bad_merge_token.json", 0, mini(model={"merges": ["t zz"]}))
    out("bad_merge_result.json", 0, mini(model={"merges": ["z z"]}))
    nfc = {"type": "NFC"}
    out("mini_nfc.json", 0, mini(normalizer=nfc) + b"\x00" + DECOMPOSED + b" the\xcc\x81 \x80e\xcc\x81")
    out("mini_nfc_sequence.json", 0, mini(normalizer={"type": "Sequence", "normalizers": [
        {"type": "Sequence", "normalizers": []}, nfc, {"type": "Sequence", "normalizers": [nfc]}]}) +
        b"\x00" + DECOMPOSED)
    out("mini_nfc_added.json", 0, mini(normalizer=nfc, added_tokens=[
        {"id": 264, "content": "<|endoftext|>", "special": True, "normalized": False},
        {"id": 265, "content": "e\u0301x", "special": False, "normalized": True},
        {"id": 266, "content": "o\u0301", "special": False, "normalized": False},
        {"id": 267, "content": "<e", "special": True, "normalized": False}]) +
        "\x00\u00e9x e\u0301x o\u0301 \u00f3 <e\u0301 <|endoftext|>\u0301".encode())
    out("bad_normalizer.json", 0, mini(normalizer={"type": "NFKC"}))
    out("bad_normalizer_member.json", 0,
        mini(normalizer={"type": "Sequence", "normalizers": [nfc, {"type": "Lowercase"}]}))
    out("bad_normalizer_null_member.json", 0, mini(normalizer={"type": "Sequence", "normalizers": [None]}))
    out("bad_nfc_same_text.json", 0, mini(normalizer=nfc, added_tokens=[
        {"id": 265, "content": "\u00e9", "normalized": True}, {"id": 266, "content": "e\u0301", "normalized": True}]))
    out("bad_regex.json", 0, mini(pre_tokenizer=split("(a")))
    out("bad_set_op.json", 0, mini(pre_tokenizer=split("[a-z&&[^b]]")))
    out("bad_behavior.json", 0, mini(pre_tokenizer=split("a", behavior="Removed")))
    out("bad_prefix_space.json", 0, mini(pre_tokenizer={"type": "ByteLevel", "add_prefix_space": True}))
    out("bad_lstrip.json", 0, mini(added_tokens=[{"id": 264, "content": "<s>", "lstrip": True}]))
    out("bad_big_id.json", 0, mini(added_tokens=[{"id": 16777216, "content": "<s>"}]))
    out("huge_id.json", 0, mini(added_tokens=[{"id": 16777215, "content": "<s>"}]) + b"\x00x")
    out("bad_truncated.json", 0, mini()[:3000])
    out("bad_not_object.json", 0, b"[1, 2, 3]")
    out("empty.json", 0, b"")


if __name__ == "__main__":
    main()
