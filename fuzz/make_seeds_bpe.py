#!/usr/bin/env python3
"""Write the hand-made seeds of fuzz/corpus/bpe/ (stdlib only).

Deterministic; run from anywhere: python3 fuzz/make_seeds_bpe.py. The input
format is fuzz/fuzz_bpe.c's: a selector byte, then the payload.
  sel & 3: 0 GPT-2, 2 the trained BPE fixture, 3 "rank file NUL text"
           (opened as tiktoken:, as bpe: when sel & 4)
  sel & 8: the payload is read as u16 ids (else u32) by the decode check
Files are named seed_*; inputs merged from fuzzing runs (named by their
SHA-1) are not touched.
"""
import base64
import os

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus", "bpe")

GPT2, TRAINED, RANKS = 0, 2, 3
BPE_KIND, U16 = 4, 8


def out(fname, sel, payload):
    if isinstance(payload, str):
        payload = payload.encode("utf-8")
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "seed_" + fname), "wb") as f:
        f.write(bytes([sel]) + payload)


def rank_file(tokens, sep=b" ", eol=b"\n"):
    """tokens: list of (bytes, rank)."""
    return b"".join(base64.b64encode(t) + sep + str(r).encode() + eol for t, r in tokens)


BYTES = [(bytes([b]), b) for b in range(256)]
MERGES = [b"th", b"he", b"the", b" t", b" the", b"in", b"ing", b"er", b"an", b"nd", b"and", b" and",
          b"<|", b"|>", b"\xe4\xb8", b"\xf0\x9f", b"  ", b"    ", b"\n\n"]


def ranks(extra):
    return BYTES + [(t, 256 + i) for i, t in enumerate(extra)]


PROSE = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n"
         "You are all resolved rather to die than to famish? They've said we'll, I'd, it's.\n")
CODE = ("int main(int argc, char **argv) {\n    for (int i = 0; i < argc; i++)\n"
        "        printf(\"%s\\n\", argv[i]);\n    return 0x7f;  // done\n}\n")
CJK = "日本語のテキストです。中文文本，한국어 텍스트. 123４５６ ½ Ⅻ"
EMOJI = "emoji 😀👍🏽 👨‍👩‍👧 🇫🇷 ❤️ zero\u200dwidth nbsp\u00a0here \u3000ideographic"
EOT = "one document<|endoftext|>two<|endoftext|><|endoftext|> <|endoftext| <|endoftext|>"


def main():
    out("prose.txt", GPT2, PROSE)
    out("code.txt", GPT2, CODE)
    out("cjk.txt", GPT2, CJK)
    out("emoji.txt", GPT2, EMOJI)
    out("eot.txt", GPT2, EOT)
    out("eot_u16.txt", GPT2 | U16, EOT)
    out("empty.txt", GPT2, b"")
    out("nul.txt", GPT2, b"a\x00b \x00\x00 c")
    # invalid UTF-8: stray continuation, overlong, surrogate, above U+10FFFF,
    # truncated at the end, 0xFF, lead byte followed by ASCII
    out("invalid_utf8.txt", GPT2,
        b"ok \x80 bad \xc0\xaf over \xed\xa0\x80 sur \xf4\x90\x80\x80 big \xff\xfe x\xe2\x82 y\xe2\x82")
    out("invalid_mixed.txt", GPT2 | U16, "caf\u00e9 ".encode() + b"\xe9t\xe9 <|endoftext|>\xc3")
    # long pieces take the heap merge (over 64 bytes)
    out("long_word.txt", GPT2, "a" * 150 + " " + "Supercalifragilistic" * 8 + " " + "9" * 100)
    out("long_space.txt", GPT2, "x" + " " * 120 + "y\n\n\n\t \r\n" + "\u3000" * 30 + "z   ")
    out("long_punct.txt", GPT2, "!?" * 60 + " ----==== ...." + "…" * 40)
    out("contractions.txt", GPT2, "I'm you're he's she'd we've they'll IT'S 'S 're' ''s don't")
    out("ids_u32.bin", GPT2, bytes(range(256)))
    out("ids_u16.bin", GPT2 | U16, bytes(range(255, -1, -1)))

    out("trained_prose.txt", TRAINED, PROSE)
    out("trained_code_u16.txt", TRAINED | U16, CODE)
    out("trained_invalid.txt", TRAINED, b"the \xff king\xc3 <|endoftext|>")

    good = rank_file(ranks(MERGES))
    out("ranks_tiny.tiktoken", RANKS, good + b"\x00" + (PROSE + CODE + "a   b  c").encode())
    out("ranks_tiny.bpe", RANKS | BPE_KIND, good + b"\x00" + "the and <|endoftext|> 中".encode() + b"\xff")
    # ranks out of order, a hole (rank 300 unused), CRLF, tab separator
    shuffled = list(reversed(ranks([b"ab", b"abc"]))) + [(b"zz", 301)]
    out("ranks_holes_crlf.tiktoken", RANKS | U16, rank_file(shuffled, b"\t", b"\r\n") + b"\x00abcabc zz ab")
    # refused: a missing byte, a duplicate rank, duplicate bytes, bad base64,
    # rank too large, no rank, empty file
    out("ranks_missing_byte.tiktoken", RANKS, rank_file(BYTES[1:]) + b"\x00x")
    out("ranks_dup_rank.tiktoken", RANKS, rank_file(BYTES + [(b"ab", 255)]))
    out("ranks_dup_bytes.tiktoken", RANKS, rank_file(BYTES + [(b"a", 256)]))
    out("ranks_bad_base64.tiktoken", RANKS, rank_file(BYTES) + b"YW=j 256\nYWJj= 257\n")
    out("ranks_big_rank.tiktoken", RANKS, rank_file(BYTES) + b"YWI= 16777216\n")
    out("ranks_no_rank.tiktoken", RANKS, b"YWI=\n")
    out("ranks_empty.tiktoken", RANKS, b"\n\n\x00text")


if __name__ == "__main__":
    main()
