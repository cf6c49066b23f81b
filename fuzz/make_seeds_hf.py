#!/usr/bin/env python3
"""Write the hand-made seeds of fuzz/corpus/hf/ and fuzz/dict/hf.dict (stdlib only).

Deterministic; run from anywhere: python3 fuzz/make_seeds_hf.py. The input
format is fuzz/fuzz_hf.c's: config.json text, then optionally a NUL and the
text of model.safetensors.index.json. The harness's scratch directory holds
model-00001-of-00002.safetensors (tensors a, b), model-00002-of-00002.safetensors
(c, d) and model.safetensors (a, c). The config seeds are the shapes
transformers 5.x and 4.x write (tests/fixtures/hf_llama_bf16/config.json is
the first); the rest are one refusal each. Files are named seed_*; inputs
merged from fuzzing runs (named by their SHA-1) are not touched.
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus", "hf")
DICT = os.path.join(HERE, "dict", "hf.dict")
FIXTURE_CONFIG = os.path.join(HERE, "..", "tests", "fixtures", "hf_llama_bf16", "config.json")

S1, S2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
GOOD_INDEX = {"metadata": {"total_size": 52}, "weight_map": {"a": S1, "b": S1, "c": S2, "d": S2}}

LLAMA4 = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
          "intermediate_size": 160, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 2, "max_position_embeddings": 32, "rms_norm_eps": 1e-05,
          "rope_theta": 10000.0, "rope_scaling": None, "hidden_act": "silu", "attention_bias": False,
          "mlp_bias": False, "tie_word_embeddings": True, "vocab_size": 65, "head_dim": 16,
          "torch_dtype": "float32", "transformers_version": "4.46.0"}
GPT2 = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 65, "n_positions": 32,
        "n_ctx": 32, "n_embd": 64, "n_layer": 2, "n_head": 4, "n_inner": None,
        "activation_function": "gelu_new", "layer_norm_epsilon": 1e-05, "tie_word_embeddings": True}


def out(name, config, index=None):
    data = config if isinstance(config, bytes) else json.dumps(config, indent=2).encode()
    if index is not None:
        data += b"\0" + (index if isinstance(index, bytes) else json.dumps(index, indent=2).encode())
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "seed_" + name), "wb") as f:
        f.write(data)


def with_(base, **kw):
    d = dict(base)
    for k, v in kw.items():
        if v is KeyError:
            d.pop(k, None)
        else:
            d[k] = v
    return d


def main():
    with open(FIXTURE_CONFIG, "rb") as f:
        llama5 = f.read()
    l5 = json.loads(llama5)
    out("llama5_single", llama5)
    out("llama5_sharded", llama5, GOOD_INDEX)
    out("llama4_sharded", LLAMA4, GOOD_INDEX)
    out("llama4_defaults", with_(LLAMA4, num_key_value_heads=None, rms_norm_eps=KeyError, rope_theta=KeyError,
                                 tie_word_embeddings=KeyError, head_dim=KeyError, hidden_act=KeyError))
    out("mistral_window", with_(LLAMA4, model_type="mistral", sliding_window=4096, max_position_embeddings=32768))
    out("mistral_short_window", with_(LLAMA4, model_type="mistral", sliding_window=16))
    out("gpt2", GPT2)
    out("gpt2_relu", with_(GPT2, activation_function="relu"), GOOD_INDEX)
    out("bert", with_(l5, model_type="bert"))
    out("rope_scaling", with_(LLAMA4, rope_scaling={"rope_type": "llama3", "factor": 8.0}))
    out("rope_parameters_linear", with_(l5, rope_parameters={"rope_type": "linear", "factor": 2.0}))
    out("rope_theta_disagree", with_(l5, rope_theta=10000.0))
    out("gqa_indivisible", with_(l5, num_key_value_heads=4))
    out("head_dim", with_(l5, head_dim=16))
    out("biases", with_(l5, attention_bias=True), GOOD_INDEX)
    out("size_float", with_(l5, hidden_size=48.5))
    out("no_model_type", with_(l5, model_type=KeyError))
    out("index_missing_shard", llama5, {"weight_map": {"a": S1, "z": "model-00003-of-00003.safetensors"}})
    out("index_absent_tensor", llama5, {"weight_map": {"a": S1, "zz": S1}})
    out("index_wrong_shard", llama5, {"weight_map": {"a": S2, "c": S2}})
    out("index_escape", llama5, {"weight_map": {"a": "../" + S1}})
    out("index_two_shards", llama5, {"weight_map": {"a": S1, "c": "model.safetensors"}})
    out("index_partial", llama5, {"weight_map": {"a": S1}})
    out("index_empty", llama5, {"weight_map": {}})
    out("index_not_object", llama5, b"[1, 2]")
    out("config_bad_json", b"{\"model_type\": \"llama\",")

    keys = sorted(set(LLAMA4) | set(l5) | set(GPT2) | {
        "sliding_window", "rope_parameters", "rope_type", "weight_map", "metadata", "total_size",
        "scale_attn_weights", "scale_attn_by_inverse_layer_idx", "partial_rotary_factor", "factor"})
    values = ["llama", "mistral", "gpt2", "silu", "gelu_new", "gelu_pytorch_tanh", "default", S1, S2,
              "model.safetensors", "null", "true", "false"]
    os.makedirs(os.path.dirname(DICT), exist_ok=True)
    with open(DICT, "w") as f:
        f.write("# fuzz/fuzz_hf.c: config.json and index keys and values (written by fuzz/make_seeds_hf.py)\n")
        for k in keys:
            f.write(f"\"\\\"{k}\\\"\"\n")
        for v in values:
            f.write(f"\"{v}\"\n")
        f.write("\"\\x00\"\n")


if __name__ == "__main__":
    main()
