# Interpreter: the venv /root/.cache/llmforge/bench-venv (PyTorch 2.x, transformers 5.x,
# tokenizers, safetensors; see bench/venv.sh). Nothing is downloaded: the model is built from a
# LlamaConfig and a seed, the tokenizer is the committed tests/fixtures/hf_tok/smollm.json.
#
# make_hf_direct_fixture.py -- writes tests/fixtures/hf_direct/, a Hugging Face model directory
# as a user has one on disk, for `llmforge sample|eval|serve --model DIR` (no conversion):
#   * a tiny random LlamaForCausalLM (2 layers, hidden 32, 4 heads, 2 KV heads, ffn 64,
#     vocab 608 >= the tokenizer's 600 ids: padded embedding rows as real models have, max
#     positions 128, rope_theta 10000, untied), transformers' own init with a wider embedding and
#     lm_head (clear argmax margins), from the first seed >= SEED whose greedy texts are whole
#     characters (see main), saved in bfloat16 by save_pretrained (one model.safetensors);
#   * the tokenizer (smollm.json's BPE: byte-level, <|endoftext|>, <|im_start|>, <|im_end|>)
#     saved by PreTrainedTokenizerFast.save_pretrained (tokenizer.json, tokenizer_config.json);
#   * generation_config.json with a two-id eos_token_id: <|endoftext|> and the token that
#     greedy decoding of PROMPT produces at generated position EOS_AT (so generation stops
#     there, exercising a list of eos ids as Llama 3 and Qwen ship them).
# expected.json: the prompt's ids (the tokenizer's encode, no special tokens added), the
# logits of the prompt's last position, and transformers' greedy generate() with the saved
# generation_config (stops at the eos list): the generated ids, their text without the final
# eos token (skip_special_tokens=True; the stop token's text is not output, as vLLM and the
# OpenAI API do, and for the special eos tokens real models ship, as transformers' decode), and the smallest top-1/top-2 logit margin met on the way (the
# fixture is only useful if float32 summation order cannot flip an argmax: it must be large
# against the 1e-5 relative logit error of a C forward). Computed on the model loaded back with
# from_pretrained(dtype=float32) (bf16 -> fp32 is exact), eager attention, 1 thread.
#
# Usage: /root/.cache/llmforge/bench-venv/bin/python tools/reference/make_hf_direct_fixture.py
#        [--out-dir tests/fixtures/hf_direct]
import argparse
import json
import os
import shutil

import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SEED = 20261207
PROMPT = "ROMEO: what light through yonder window breaks?"
MAX_NEW = 32
EOS_AT = 6  # the greedy token at this generated position (0-based) becomes an eos id
HERE = os.path.dirname(os.path.abspath(__file__))
TOK = os.path.join(HERE, "..", "..", "tests", "fixtures", "hf_tok", "smollm.json")


def greedy(model, ids, n, eos):
    """Greedy decoding by hand (the reference for generate()), with the smallest margin."""
    seq = list(ids)
    margin = float("inf")
    out = []
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([seq])).logits[0, -1]
            top = torch.topk(logits, 2)
            margin = min(margin, (top.values[0] - top.values[1]).item())
            t = int(top.indices[0])
            out.append(t)
            seq.append(t)
            if t in eos:
                break
    return out, margin


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out-dir", default=os.path.join(HERE, "..", "..", "tests", "fixtures", "hf_direct"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    # the first seed from SEED on whose greedy texts are whole characters (a random model often
    # emits byte tokens that decode to U+FFFD, which says nothing about a detokenizer)
    for seed in range(SEED, SEED + 500):
        e = make(args.out_dir, seed)
        if e and "\ufffd" not in e["greedy_text"] + e["greedy_ignore_eos_text"] and e["min_margin"] > 1e-3:
            break
    else:
        raise SystemExit("no seed in 500 gave a clean fixture")
    with open(os.path.join(args.out_dir, "expected.json"), "w") as f:
        json.dump(e, f, indent=1)
        f.write("\n")
    print(json.dumps({k: e[k] for k in ("seed", "prompt_ids", "greedy_ids", "greedy_text", "min_margin")}))


def make(out_dir, seed):
    tok = PreTrainedTokenizerFast(tokenizer_file=TOK, bos_token=None, eos_token="<|endoftext|>",
                                  unk_token=None, pad_token=None)
    n_tok = len(tok)
    cfg = LlamaConfig(vocab_size=608, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
                      bos_token_id=None, eos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"))
    assert cfg.vocab_size >= n_tok, (cfg.vocab_size, n_tok)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).eval()
    # transformers' init draws the embedding at std 0.02: logits of a random 2-layer model are
    # then nearly flat; a wider embedding and lm_head give clear argmax margins
    with torch.no_grad():
        model.model.embed_tokens.weight.normal_(0, 1.0)
        model.lm_head.weight.normal_(0, 0.5)
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    model.to(torch.bfloat16).save_pretrained(out_dir, safe_serialization=True)
    tok.save_pretrained(out_dir)

    back = LlamaForCausalLM.from_pretrained(out_dir, dtype=torch.float32, attn_implementation="eager").eval()
    ids = tok.encode(PROMPT, add_special_tokens=False)
    first, _ = greedy(back, ids, EOS_AT + 1, set())
    eos = [tok.convert_tokens_to_ids("<|endoftext|>"), first[EOS_AT]]
    if first[EOS_AT] in first[:EOS_AT]:
        return None  # the chosen eos token appears earlier
    gen = back.generation_config
    gen.eos_token_id = eos
    gen.bos_token_id = None
    gen.save_pretrained(out_dir)

    back = LlamaForCausalLM.from_pretrained(out_dir, dtype=torch.float32, attn_implementation="eager").eval()
    with torch.no_grad():
        last = back(torch.tensor([ids])).logits[0, -1].tolist()
        out = back.generate(torch.tensor([ids]), max_new_tokens=MAX_NEW, do_sample=False)[0, len(ids):].tolist()
    mine, margin = greedy(back, ids, MAX_NEW, set(eos))
    assert out == mine, (out, mine)
    assert out[-1] == eos[1] and len(out) == EOS_AT + 1, out
    free, free_margin = greedy(back, ids, MAX_NEW, set())  # without the eos list: --ignore-eos
    expected = {
        "format": "llmforge hf direct-use fixture v1",
        "generator": "tools/reference/make_hf_direct_fixture.py",
        "torch_version": torch.__version__, "transformers_version": transformers.__version__,
        "seed": seed, "prompt": PROMPT, "prompt_ids": ids, "tokenizer_size": n_tok,
        "eos_token_id": eos,
        "last_logits": last,
        "greedy_ids": out, "greedy_text": tok.decode(out[:-1] if out[-1] in eos else out, skip_special_tokens=True),
        "greedy_ignore_eos_ids": free,
        "greedy_ignore_eos_text": tok.decode(free, skip_special_tokens=True),
        "min_margin": min(margin, free_margin),
    }
    return expected


if __name__ == "__main__":
    main()
