# bench/serve_gguf.py -- the llama.cpp side's files for bench/serve.sh (run with the bench venv's
# python; the GGUF converter needs torch, numpy, transformers, sentencepiece and the gguf-py that
# ships beside it in llama-cpp-python's source distribution).
#
#   serve_gguf.py hf --step STEP --out DIR --vocab V --gpt2 GPT2_DIR
#       DIR: a copy of the checkpoint STEP (model.safetensors linked, config.json copied with
#       bos_token_id/eos_token_id added) with the
#       Hugging Face tokenizer files convert_hf_to_gguf.py needs: vocab.json, merges.txt,
#       tokenizer_config.json, special_tokens_map.json. The vocabulary is GPT-2's byte-level BPE
#       (GPT2_DIR/encoder.json and vocab.bpe, as tiktoken and HF ship it): for V >= 50257 all of
#       it (the converter pads the rest of the model's V rows with [PAD] tokens, as for
#       GPT-2 124M's 50304), for a smaller V (SmolLM's 49152) the 256 byte tokens, the first
#       V - 257 merges (GPT-2's ids above 255 are its merges in rank order: checked) and
#       <|endoftext|> as id V - 1 -- a BPE of exactly V tokens with GPT-2's pre-tokenizer.
#       No BOS is added to prompts (add_bos_token false) and <|endoftext|> is the end of text.
#       The checkpoint's own tokenizer (a character vocabulary over random weights) does not
#       matter: both servers are given the same token ids (bench/serve.sh).
#   serve_gguf.py prompts --gguf F --text CORPUS --n K --tokens 128 --out prompts.json
#       (run with llama-cpp-python's venv: it imports llama_cpp) K prompts of exactly --tokens
#       tokens, [{"ids": [...], "text": "..."}]: pieces of CORPUS (tinyshakespeare) from spread-out
#       starts, each a text that llama.cpp's own tokenizer of the GGUF (vocab_only, no BOS,
#       as llama-cpp-python's server tokenizes a prompt: special=True, which plain text does
#       not touch) cuts into exactly those ids, checked
#       both ways; distinct prompts, so llama.cpp's reuse of the previous request's prefix never
#       applies and neither server caches anything.
#   serve_gguf.py convert --src DIR --outfile F --outtype f32|bf16 --llamacpp VENDOR_LLAMA_CPP
#       VENDOR_LLAMA_CPP/convert_hf_to_gguf.py on DIR, run in this process. convert_hf_to_gguf.py
#       names a BPE pre-tokenizer by hashing how the tokenizer cuts a test string; the truncated
#       merges of the SmolLM-shaped vocabulary cut it differently from GPT-2's list, so when the
#       hash is unknown this names it "gpt-2" (its regex is GPT-2's) and says so; GPT-2's own
#       vocabulary is recognised as it is.
import argparse
import json
import os
import sys


def cmd_hf(a):
    os.makedirs(a.out, exist_ok=True)
    for f in os.listdir(a.out):
        os.unlink(os.path.join(a.out, f))
    os.symlink(os.path.abspath(os.path.join(a.step, "model.safetensors")), os.path.join(a.out, "model.safetensors"))
    cfg = json.load(open(os.path.join(a.step, "config.json")))
    if cfg.get("vocab_size") != a.vocab:
        sys.exit(f"serve_gguf.py: {a.step}/config.json has vocab_size {cfg.get('vocab_size')}, expected {a.vocab}")
    enc = json.load(open(os.path.join(a.gpt2, "encoder.json"), encoding="utf-8"))
    lines = open(os.path.join(a.gpt2, "vocab.bpe"), encoding="utf-8").read().split("\n")
    head, merges = lines[0], [m for m in lines[1:] if m]
    assert head.startswith("#version"), head
    assert len(enc) == 50257 and enc["<|endoftext|>"] == 50256 and len(merges) == 50000
    for i, m in enumerate(merges):  # GPT-2's ids 256.. are its merges, in rank order
        l, r = m.split(" ")
        if enc[l + r] != 256 + i:
            sys.exit(f"serve_gguf.py: merge {i} '{m}' makes id {enc[l + r]}, not {256 + i}")
    if a.vocab < 50257:
        keep = a.vocab - 257
        merges = merges[:keep]
        enc = {t: i for t, i in enc.items() if i < 256 + keep}
        enc["<|endoftext|>"] = a.vocab - 1
    json.dump(enc, open(os.path.join(a.out, "vocab.json"), "w", encoding="utf-8"), ensure_ascii=False)
    # the special ids as Hugging Face configs carry them (the converter reads them from there
    # when there is no tokenizer.json; else llama.cpp would take id 11 for both)
    cfg["bos_token_id"] = cfg["eos_token_id"] = enc["<|endoftext|>"]
    json.dump(cfg, open(os.path.join(a.out, "config.json"), "w"), indent=1)
    with open(os.path.join(a.out, "merges.txt"), "w", encoding="utf-8") as f:
        f.write(head + "\n" + "\n".join(merges) + "\n")
    eot = "<|endoftext|>"
    json.dump({"tokenizer_class": "GPT2Tokenizer", "bos_token": eot, "eos_token": eot, "unk_token": eot,
               "add_bos_token": False, "add_eos_token": False, "add_prefix_space": False,
               "model_max_length": cfg.get("n_positions", cfg.get("max_position_embeddings", 1024)),
               "added_tokens_decoder": {str(enc[eot]): {"content": eot, "special": True, "lstrip": False,
                                                        "rstrip": False, "normalized": False,
                                                        "single_word": False}}},
              open(os.path.join(a.out, "tokenizer_config.json"), "w"))
    json.dump({"bos_token": eot, "eos_token": eot, "unk_token": eot},
              open(os.path.join(a.out, "special_tokens_map.json"), "w"))
    print(f"{a.out}: tokenizer of {len(enc)} tokens ({len(merges)} merges), end of text {enc[eot]}")


def cmd_convert(a):
    sys.path.insert(0, a.llamacpp)
    sys.argv = ["convert_hf_to_gguf.py", a.src, "--outfile", a.outfile, "--outtype", a.outtype]
    import convert_hf_to_gguf
    from conversion import base

    orig = base.TextModel.get_vocab_base_pre

    def pre(self, tokenizer):
        try:
            return orig(self, tokenizer)
        except NotImplementedError:
            print("serve_gguf.py: the BPE pre-tokenizer hash is not in convert_hf_to_gguf.py's list (a truncated "
                  "GPT-2 merge list); naming it 'gpt-2', whose regex it uses", file=sys.stderr)
            return "gpt-2"

    base.TextModel.get_vocab_base_pre = pre
    convert_hf_to_gguf.main()


def cmd_prompts(a):
    import re
    import llama_cpp

    m = llama_cpp.Llama(model_path=a.gguf, vocab_only=True, verbose=False)
    tok = lambda t: m.tokenize(t.encode("utf-8"), add_bos=False, special=True)  # noqa: E731 -- as the server
    text = open(a.text, encoding="utf-8").read()
    pieces = re.findall(r"\s*\S+", text)
    out, seen, start = [], set(), 0
    step = max(1, len(pieces) // (2 * a.n))
    while len(out) < a.n and start < len(pieces):
        acc, j = "", start
        while j < len(pieces):
            nxt = acc + pieces[j]
            if len(tok(nxt)) > a.tokens:
                break
            acc, j = nxt, j + 1
        start += step
        ids = tok(acc)
        if len(ids) != a.tokens or acc in seen:
            continue
        if m.detokenize(ids).decode("utf-8") != acc:
            continue
        seen.add(acc)
        out.append({"ids": ids, "text": acc})
    if len(out) < a.n:
        sys.exit(f"serve_gguf.py: only {len(out)} prompts of exactly {a.tokens} tokens")
    json.dump(out, open(a.out, "w"))
    print(f"{a.out}: {len(out)} prompts of {a.tokens} tokens (llama.cpp's tokenizer of {a.gguf}), "
          f"end of text {m.token_eos()}")


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("hf")
    h.add_argument("--step", required=True)
    h.add_argument("--out", required=True)
    h.add_argument("--vocab", type=int, required=True)
    h.add_argument("--gpt2", required=True)
    c = sub.add_parser("convert")
    c.add_argument("--src", required=True)
    c.add_argument("--outfile", required=True)
    c.add_argument("--outtype", choices=["f32", "bf16"], required=True)
    c.add_argument("--llamacpp", required=True)
    q = sub.add_parser("prompts")
    q.add_argument("--gguf", required=True)
    q.add_argument("--text", required=True)
    q.add_argument("--n", type=int, required=True)
    q.add_argument("--tokens", type=int, default=128)
    q.add_argument("--out", required=True)
    a = ap.parse_args()
    {"hf": cmd_hf, "convert": cmd_convert, "prompts": cmd_prompts}[a.cmd](a)


if __name__ == "__main__":
    main()
