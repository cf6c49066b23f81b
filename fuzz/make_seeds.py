#!/usr/bin/env python3
"""Write the hand-made seed inputs of fuzz/corpus/<name>/ (stdlib only).

Deterministic; run from anywhere: python3 fuzz/make_seeds.py. Files are
named seed_*; inputs found by fuzzing (merged with -merge=1, named by their
SHA-1) live next to them and are not touched. Formats follow
include/llmforge/safetensors.h and include/llmforge/data.h.
"""
import hashlib
import json
import os
import shutil
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CORPUS = os.path.join(HERE, "corpus")


def out(name, fname, data):
    d = os.path.join(CORPUS, name)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(os.path.join(d, "seed_" + fname), "wb") as f:
        f.write(data)


# ------------------------------------------------------------ safetensors
DT = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8, "I32": 4, "I64": 8, "I16": 2, "I8": 1,
      "U8": 1, "U16": 2, "U32": 4, "U64": 8, "BOOL": 1}


def st_file(tensors, meta=None, pad=True, gap=0, header_extra=""):
    """tensors: [(name, dtype, shape)]; data bytes are a counter pattern."""
    hdr = {}
    if meta is not None:
        hdr["__metadata__"] = meta
    data = b""
    for name, dt, shape in tensors:
        n = DT[dt]
        for s in shape:
            n *= s
        begin = len(data)
        data += bytes((begin + i) & 0xFF for i in range(n))
        hdr[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [begin, begin + n]}
        data += b"\0" * gap
    h = json.dumps(hdr, separators=(",", ":")).encode() + header_extra.encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def safetensors_seeds():
    shutil.copy(os.path.join(ROOT, "tests", "fixtures", "st_from_python.safetensors"),
                os.path.join(CORPUS, "safetensors", "seed_st_from_python.safetensors"))
    out("safetensors", "f32_meta.safetensors",
        st_file([("wte.weight", "F32", (4, 3)), ("ln_f.bias", "F32", (3,))], {"format": "pt", "step": "10"}))
    out("safetensors", "all_dtypes.safetensors",
        st_file([("t_" + k.lower(), k, (2, 1)) for k in DT]))
    out("safetensors", "scalar_empty.safetensors",
        st_file([("scalar", "F64", ()), ("empty", "F32", (0,)), ("empty2", "I8", (3, 0, 2))]))
    out("safetensors", "meta_only.safetensors", st_file([], {"a": "b", "config": "{\"n_layer\": 2}"}))
    h = b'{"__metadata__":null,"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}'
    out("safetensors", "meta_null.safetensors", struct.pack("<Q", len(h)) + h + b"\x07")
    out("safetensors", "empty_header.safetensors", struct.pack("<Q", 2) + b"{}")
    out("safetensors", "gaps_unpadded.safetensors",
        st_file([("b", "I16", (3,)), ("a", "U32", (2, 2))], {"x": ""}, pad=False, gap=5))
    out("safetensors", "eight_dims.safetensors", st_file([("d8", "BOOL", (1, 2, 1, 2, 1, 1, 2, 1))]))
    out("safetensors", "unicode_names.safetensors",
        st_file([("h.0.attn.c_attn.weight", "BF16", (2, 6)), ("caf\u00e9 \u2603", "F16", (1,))]))
    # refused inputs, as starting points next to the accepted ones
    out("safetensors", "bad_long_name.safetensors", st_file([("n" * 300, "U8", (1,))]))
    good = st_file([("w", "F32", (2,))])
    out("safetensors", "bad_truncated.safetensors", good[:-1])
    out("safetensors", "bad_overlap.safetensors",
        (lambda h: struct.pack("<Q", len(h)) + h + bytes(8))(
            b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
            b'"b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}}'))


# ------------------------------------------------------------ shards
def shard(tokens, vocab, mask=None, bpt=None):
    if bpt is None:
        bpt = 2 if vocab <= 65536 else 4
    payload = b"".join(struct.pack("<H" if bpt == 2 else "<I", t) for t in tokens)
    if mask is not None:
        payload += bytes(mask)
    crc = zlib.crc32(payload) & 0xFFFFFFFF
    hdr = b"LFSHARD\0" + struct.pack("<IIQIII", 1, bpt, len(tokens), 1 if mask is not None else 0, vocab, crc)
    hdr += bytes(64 - len(hdr))
    return hdr + payload


def shard_seeds():
    out("shard", "u16.bin", shard([i % 65 for i in range(40)], 65))
    out("shard", "u16_mask.bin", shard([i % 7 for i in range(17)], 7, [i % 2 for i in range(17)]))
    out("shard", "u32.bin", shard([i * 4099 % 70000 for i in range(9)], 70000))
    out("shard", "u32_mask_small_vocab.bin", shard([1, 2, 3], 4, [1, 0, 1], bpt=4))
    out("shard", "empty.bin", shard([], 1))
    out("shard", "one_token.bin", shard([65535], 65536))
    bad = bytearray(shard([1, 2, 3, 4], 5))
    bad[32] ^= 0xFF
    out("shard", "bad_crc.bin", bytes(bad))


# ------------------------------------------------------------ training config
def config_seeds():
    for f in sorted(os.listdir(os.path.join(ROOT, "configs"))):
        if f.endswith(".json"):
            shutil.copy(os.path.join(ROOT, "configs", f), os.path.join(CORPUS, "train_config", "seed_" + f))
    out("train_config", "minimal.json", '{"data": {"dataset": "d"}}')
    out("train_config", "deepspeed.json", json.dumps({
        "train_batch_size": 32, "train_micro_batch_size_per_gpu": 8,
        "gradient_accumulation_steps": 4,
        "fp16": {"enabled": False, "loss_scale": 0, "initial_scale_power": 16},
        "bf16": {"enabled": False}, "zero_optimization": {"stage": 0},
        "wall_clock_breakdown": False, "tensorboard": {"enabled": False, "output_path": "tb", "job_name": "x"},
        "data": {"dataset": "out/data", "sampling": "sequential"}}, indent=2))
    out("train_config", "numbers.json",
        '{"data":{"dataset":"d"},"seed":18446744073709551615,"train_iters":1e3,"model":{"n_layer":12.0,'
        '"n_embd":768,"n_head":12,"block_size":1024,"vocab_size":50304,"dropout":0.999999},'
        '"optimizer":{"params":{"lr":6e-4,"betas":[0,0.95],"eps":1e-45,"weight_decay":0}},'
        '"scheduler":{"type":"CONSTANT","warmup_iters":0,"min_lr":0},"gradient_clipping":0}')
    out("train_config", "overrides.txt",
        '{"data":{"dataset":"d"}}\0n_layer=6\0--model.n_head=3\0model.n_embd=96\0batch_size=4\0'
        'optimizer.params.betas=[0.8,0.9]\0out_dir=runs/a b\0seed=7\0data={"sampling":"sequential"}')
    out("train_config", "monitor.json", json.dumps({
        "data": {"dataset": "d"}, "wall_clock_breakdown": True,
        "tensorboard": {"enabled": True, "output_path": "tb", "job_name": "run 1"},
        "monitor": {"prometheus": {"port": 9100, "host": "0.0.0.0"}, "required": False, "peak_gflops": 312.5,
                    "alerts": {"nan": {"action": "stop"}, "loss_spike": {"action": "skip_step", "zscore": 4.5,
                                                                               "window": 50},
                               "stall": {"seconds": 600, "action": "exit"}}}}, indent=2))
    out("train_config", "bad_unknown_key.json", '{"data":{"dataset":"d"},"modle":{"n_layer":2}}')
    out("train_config", "bad_batch.json",
        '{"data":{"dataset":"d"},"train_batch_size":10,"train_micro_batch_size_per_gpu":3}')


# ------------------------------------------------------------ char tokenizer
def vocab(chars):
    return json.dumps({"type": "char", "chars": chars}, ensure_ascii=False)


def tokenizer_seeds():
    shakes = os.path.join(ROOT, "..", "shared", "data", "tinyshakespeare.txt")
    text = open(shakes, encoding="utf-8").read()[:600] if os.path.exists(shakes) else "First Citizen:\nHello.\n"
    out("tokenizer", "shakespeare.txt", vocab(sorted(set(text))) + "\0" + text)
    uni = "h\u00e9llo w\u00f6rld \u2603 \u20ac \U0001F600 \U0010FFFF \u0080 \u07ff \u0800 \uffff"
    out("tokenizer", "unicode.txt", vocab(sorted(set(uni))) + "\0" + uni)
    out("tokenizer", "ascii_escapes.txt",
        '{"type":"char","chars":["\\n","\\t","\\"","\\\\","\\u00e9","\\ud83d\\ude00","a"]}\0a\t"\\\n\u00e9\U0001F600')
    out("tokenizer", "vocab_only.txt", vocab(list("abc")))
    out("tokenizer", "empty_text.txt", vocab(list("abc")) + "\0")
    out("tokenizer", "ids.txt", vocab(list("0123456789")) + "\0" + "\x01\x00\x00\x00\x09\x00\x00\x00\x0b\x00\x00\x00")
    out("tokenizer", "bad_oov.txt", vocab(list("ab")) + "\0abc")
    out("tokenizer", "bad_utf8.txt", vocab(list("ab")).encode() + b"\0a\xc3(b\xed\xa0\x80\xf4\x90\x80\x80")
    out("tokenizer", "bad_repeat.txt", vocab(list("aba")) + "\0a")


# ------------------------------------------------------------ dataset.json
# The harness writes vocab.json with exactly this content (fuzz_dataset.c).
HARNESS_VOCAB = '{"type":"char","chars":["\\n"," ","a","b","c","d","e","f"]}\n'


def manifest(**kw):
    m = {"format": "llmforge-dataset", "version": 1,
         "tokenizer": {"spec": "char:vocab.json", "sha256": hashlib.sha256(HARNESS_VOCAB.encode()).hexdigest()},
         "vocab_size": 8,
         "splits": {"train": {"shards": ["train.bin"], "tokens": 64}, "val": {"shards": ["val.bin"], "tokens": 16}},
         "sources": [{"path": "input.txt", "sha256": "0" * 64, "bytes": 80}]}
    m.update(kw)
    return json.dumps(m, indent="\t")


def dataset_seeds():
    out("dataset", "prepared.json", manifest())
    out("dataset", "no_sha_no_val.json",
        json.dumps({"format": "llmforge-dataset", "version": 1, "tokenizer": {"spec": "char:vocab.json"},
                    "vocab_size": 8, "splits": {"train": {"shards": ["train.bin"], "tokens": 64}}}))
    out("dataset", "multi_shard.json", manifest(splits={
        "train": {"shards": ["empty.bin", "train.bin", "val.bin", "empty.bin", "train.bin"], "tokens": 144},
        "val": {"shards": ["val.bin", "val.bin"], "tokens": 32}, "test": {"shards": ["x.bin"], "tokens": 1}}))
    out("dataset", "wide.json", manifest(vocab_size=70000, splits={
        "train": {"shards": ["wide.bin", "wide.bin"], "tokens": 40}, "val": {"shards": ["wide.bin"], "tokens": 20}}))
    out("dataset", "abs_spec.json", manifest(tokenizer={"spec": "char:/nonexistent/vocab.json"}))
    out("dataset", "bad_sha.json", manifest(tokenizer={"spec": "char:vocab.json", "sha256": "00"}))
    out("dataset", "bad_tokens.json", manifest(splits={"train": {"shards": ["train.bin"], "tokens": 65}}))
    out("dataset", "bad_vocab.json", manifest(vocab_size=9))


def config_dict():
    """fuzz/dict/train_config.dict from the key table of src/train/config.c."""
    import re
    src = open(os.path.join(ROOT, "src", "train", "config.c"), encoding="utf-8").read()
    paths = re.findall(r'\.path = "([^"]+)"', src)
    aliases = re.findall(r'\.alias = "([^"]+)"', src)
    choices = re.findall(r'_choices\[\] = \{([^}]*)\}', src)
    words = set(aliases)
    for p in paths:
        words.add(p)
        words.update(p.split("."))
    for c in choices:
        words.update(re.findall(r'"([^"]+)"', c))
    lines = ["# libFuzzer dictionary: training configuration keys and choices (fuzz/make_seeds.py",
             "# writes it from the key table of src/train/config.c)"]
    lines += ['"\\"%s\\""' % w for w in sorted(words)]
    lines += ['"%s="' % w for w in sorted(set(paths) | set(aliases))]
    lines += ['"%s"' % v for v in ("true", "false", "null", "1e3", "12.0", "-0", "1e-45", "3.4028235e38",
                                   "18446744073709551616", "9223372036854775807", "[0.9,0.99]", "\\x00", "--")]
    os.makedirs(os.path.join(HERE, "dict"), exist_ok=True)
    with open(os.path.join(HERE, "dict", "train_config.dict"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    for n in ("safetensors", "shard", "train_config", "tokenizer", "dataset"):
        os.makedirs(os.path.join(CORPUS, n), exist_ok=True)
    safetensors_seeds()
    shard_seeds()
    config_seeds()
    tokenizer_seeds()
    dataset_seeds()
    config_dict()
