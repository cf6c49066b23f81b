# Interpreter: the venv /root/.cache/llmforge/bench-venv (PyTorch 2.15, transformers 5.25,
# peft 0.21, safetensors). Nothing is downloaded: every model is built from a config and a seed.
#
# make_peft_fixtures.py -- writes tests/fixtures/peft/: two tiny base models as transformers'
# save_pretrained writes them (float32), and for three LoRA configurations what PEFT computes
# on them (tests/model/test_lora_peft.c compares llmforge's LoRA with it):
#
#   base_llama/  LlamaForCausalLM: vocab 64, hidden 32, intermediate 48, 2 layers, 4 heads, 2 kv
#           heads (head size 8), untied lm_head, max_position_embeddings 64.
#   base_gpt2/   GPT2LMHeadModel: vocab 64, n_embd 32, 2 layers, 4 heads, n_positions 32, every
#           dropout 0.
#   Base weights: transformers' init (seed 7), then every weight 0.1*randn (norm weights
#   1 + 0.1*randn) so that the adapters' gradients are not dominated by one path.
#
#   Cases (lora_dropout 0, bias none):
#     llama_qv   llama, target_modules [q_proj, v_proj], r 4, alpha 8
#     llama_all  llama, "all-linear", r 4, alpha 16, use_rslora (scale 16 / sqrt(4) = 8)
#     gpt2       gpt2, [c_attn, c_proj, c_fc] (both c_proj; fan_in_fan_out), r 4, alpha 8
#
#   Each case directory holds:
#     adapter_config.json, adapter_model.safetensors  PEFT's save_pretrained of the adapter at
#       (base_model_name_or_path set to "../base_<kind>", the fixture's base)
#       PEFT's own init (lora_A kaiming_uniform(a=sqrt(5)), lora_B zero) -- the format
#       reference, and the A the init case starts from;
#     tensors.safetensors  by PEFT's names (base_model.model.<module>.lora_{A,B}.weight) with a
#       prefix: "init.grad." the gradients at PEFT's init (B zero, so dA is exactly zero),
#       "nz." a nonzero state (A as init, B 0.1*randn, seed 9) and "nz.grad." its gradients,
#       "step3." the adapters after 3 torch.optim.AdamW steps from the nonzero state (lr 1e-2,
#       betas (0.9, 0.99), eps 1e-8, weight_decay 0.1 -- llmforge's defaults but lr -- no
#       clipping), "merged." the base weights of the targeted modules after
#       merge_and_unload() of the nonzero state (by their Hugging Face names);
#     expected.json  the batch (inputs and next-token targets, 2 x 16), the mean cross-entropy
#       at init, at the nonzero state and before each of the 3 steps, and the logits of row 0 at
#       the nonzero state (for the PEFT-load check of checkpoints).
#
# Deterministic: torch.set_num_threads(1), fixed seeds.
#
# Usage:  /root/.cache/llmforge/bench-venv/bin/python tools/reference/make_peft_fixtures.py
#         [--out-dir tests/fixtures/peft]

import argparse
import json
import os
import shutil

import torch
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model
from safetensors.torch import save_file
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
B, T, V = 2, 16, 64
LR, BETAS, EPS, WD, STEPS = 1e-2, (0.9, 0.99), 1e-8, 0.1, 3

CASES = {
    "llama_qv": ("llama", dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])),
    "llama_all": ("llama", dict(r=4, lora_alpha=16, target_modules="all-linear", use_rslora=True)),
    "gpt2": ("gpt2", dict(r=4, lora_alpha=8, target_modules=["c_attn", "c_proj", "c_fc"], fan_in_fan_out=True)),
}


def base_model(kind):
    torch.manual_seed(7)
    if kind == "llama":
        cfg = LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                          tie_word_embeddings=False, rms_norm_eps=1e-5)
        m = LlamaForCausalLM(cfg)
    else:
        cfg = GPT2Config(vocab_size=V, n_embd=32, n_layer=2, n_head=4, n_positions=32, resid_pdrop=0.0,
                         embd_pdrop=0.0, attn_pdrop=0.0)
        m = GPT2LMHeadModel(cfg)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "norm" in name or ".ln_" in name:
                p.copy_(1 + 0.1 * torch.randn_like(p)) if name.endswith("weight") else p.copy_(0.1 * torch.randn_like(p))
            else:
                p.copy_(0.1 * torch.randn_like(p))
    return m.float().eval()


def batch():
    g = torch.Generator().manual_seed(11)
    seq = torch.randint(0, V, (B, T + 1), generator=g)
    return seq[:, :T].contiguous(), seq[:, 1:].contiguous()


def loss_of(model, inputs, targets):
    logits = model(input_ids=inputs).logits
    return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1)), logits


def lora_params(model):
    # PEFT's state-dict names, as save_pretrained writes them (no adapter name)
    return {n.replace(".default", ""): p for n, p in model.named_parameters() if "lora_" in n}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out-dir", default=os.path.join(REPO, "tests", "fixtures", "peft"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    out = args.out_dir
    os.makedirs(out, exist_ok=True)
    inputs, targets = batch()
    for kind in ("llama", "gpt2"):
        d = os.path.join(out, "base_" + kind)
        shutil.rmtree(d, ignore_errors=True)
        base_model(kind).save_pretrained(d, safe_serialization=True)
    for case, (kind, kw) in CASES.items():
        base = base_model(kind)
        torch.manual_seed(8)  # PEFT's init of lora_A
        model = get_peft_model(base, LoraConfig(lora_dropout=0.0, bias="none", task_type="CAUSAL_LM", **kw))
        model.eval()  # no dropout anywhere (all 0 anyway)
        d = os.path.join(out, case)
        shutil.rmtree(d, ignore_errors=True)
        model.save_pretrained(d)
        os.remove(os.path.join(d, "README.md"))  # PEFT's model card: nothing the tests read
        # the base the adapter names: the fixture's base directory, relative to the adapter's
        acfg = json.load(open(os.path.join(d, "adapter_config.json")))
        acfg["base_model_name_or_path"] = "../base_" + kind
        json.dump(acfg, open(os.path.join(d, "adapter_config.json"), "w"), indent=2, sort_keys=True)
        tensors, exp = {}, {"inputs": inputs.tolist(), "targets": targets.tolist(), "lr": LR,
                            "betas": list(BETAS), "eps": EPS, "weight_decay": WD}
        params = lora_params(model)

        def grads(prefix):
            model.zero_grad(set_to_none=True)
            loss, logits = loss_of(model, inputs, targets)
            loss.backward()
            for n, p in params.items():
                tensors[prefix + n] = p.grad.detach().clone().contiguous()
            return loss.item(), logits

        exp["loss_init"], _ = grads("init.grad.")
        g = torch.Generator().manual_seed(9)
        with torch.no_grad():
            for n, p in params.items():
                if "lora_B" in n:
                    p.copy_(0.1 * torch.randn(p.shape, generator=g))
        for n, p in params.items():
            tensors["nz." + n] = p.detach().clone().contiguous()
        exp["loss_nz"], logits = grads("nz.grad.")
        exp["logits_nz_row0"] = logits[0].detach().tolist()
        # merged weights of the nonzero state (merge_and_unload on a copy)
        merged_src = get_peft_model(base_model(kind), LoraConfig(lora_dropout=0.0, bias="none",
                                                                  task_type="CAUSAL_LM", **kw))
        with torch.no_grad():
            mp = lora_params(merged_src)
            for n, p in mp.items():
                p.copy_(tensors["nz." + n])
        merged = merged_src.merge_and_unload()
        targeted = {n.replace("base_model.model.", "").rsplit(".lora_", 1)[0] + ".weight" for n in params}
        for n, p in merged.state_dict().items():
            if n in targeted:
                tensors["merged." + n] = p.detach().clone().contiguous()
        opt = torch.optim.AdamW(list(params.values()), lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)
        exp["losses_steps"] = []
        for _ in range(STEPS):
            opt.zero_grad(set_to_none=True)
            loss, _ = loss_of(model, inputs, targets)
            loss.backward()
            opt.step()
            exp["losses_steps"].append(loss.item())
        for n, p in params.items():
            tensors["step3." + n] = p.detach().clone().contiguous()
        save_file(tensors, os.path.join(d, "tensors.safetensors"))
        json.dump(exp, open(os.path.join(d, "expected.json"), "w"))
        print(case, "loss init %.6f nz %.6f steps %s" % (exp["loss_init"], exp["loss_nz"], exp["losses_steps"]),
              "adapters", len(params))


if __name__ == "__main__":
    main()
