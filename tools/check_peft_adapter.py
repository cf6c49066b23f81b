#!/usr/bin/env python3
# Interpreter: a Python with PyTorch, transformers, peft and safetensors, e.g. the venv
# /root/.cache/llmforge/bench-venv (written against torch 2.15, transformers 5.25, peft 0.21).
#
# check_peft_adapter.py -- has PEFT load a LoRA adapter llmforge wrote (a LoRA run's checkpoint
# step directory: adapter_config.json + adapter_model.safetensors) onto its base, the way users
# do: peft.PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(BASE), ADAPTER), and
# checks, printing one JSON object:
#   - every tensor of adapter_model.safetensors is a lora_A / lora_B parameter of the loaded
#     model, and every lora parameter of the model came from the file, bit for bit;
#   - the adapter is trained (some lora_B not zero) and changes the logits;
#   - with --merged DIR (llmforge merge's output): transformers loads it and its logits equal
#     the PEFT model's (|a - b| <= 1e-4 * max |b|: fp32 forwards in another order);
#   - with --compare FILE (llmforge's `sample --json` of the merged directory on the same
#     --ids): llmforge's last-position logits equal the PEFT model's, within the same bound.
# Exit status 0 when every check passes, 1 otherwise.
#
# Usage: check_peft_adapter.py --base DIR --adapter DIR --ids 1,2,3 [--merged DIR]
#        [--compare FILE]

import argparse
import json
import sys

import torch
from peft import PeftModel
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

TOL = 1e-4


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--adapter", required=True)
    ap.add_argument("--ids", required=True)
    ap.add_argument("--merged")
    ap.add_argument("--compare")
    a = ap.parse_args()
    torch.set_num_threads(1)
    ids = torch.tensor([[int(x) for x in a.ids.replace(",", " ").split()]])
    out = {"errors": [], "checks": 0}

    def check(ok, msg):
        out["checks"] += 1
        if not ok:
            out["errors"].append(msg)

    base = AutoModelForCausalLM.from_pretrained(a.base, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        base_logits = base(input_ids=ids).logits[0].clone()
    model = PeftModel.from_pretrained(base, a.adapter).eval()
    file = load_file(a.adapter + "/adapter_model.safetensors")
    params = {n.replace(".default", ""): p for n, p in model.named_parameters() if "lora_" in n}
    check(set(file) == set(params), "tensors: file-only %s, model-only %s" % (
        sorted(set(file) - set(params))[:4], sorted(set(params) - set(file))[:4]))
    same = all(torch.equal(file[n], params[n].detach()) for n in file if n in params)
    check(same, "a loaded lora tensor differs from the file")
    check(any(p.abs().max().item() > 0 for n, p in params.items() if "lora_B" in n), "every lora_B is zero")
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0]
    scale = logits.abs().max().item()
    out["adapter_effect"] = (logits - base_logits).abs().max().item() / scale
    check(out["adapter_effect"] > 1e-6, "the adapter does not change the logits")
    if a.merged:
        merged = AutoModelForCausalLM.from_pretrained(a.merged, torch_dtype=torch.float32).eval()
        with torch.no_grad():
            ml = merged(input_ids=ids).logits[0]
        out["merged_error"] = (ml - logits).abs().max().item() / scale
        check(out["merged_error"] <= TOL, "merged logits %.3g from PEFT's" % out["merged_error"])
    if a.compare:
        lf = json.load(open(a.compare))
        last = torch.tensor(lf["last_logits"][: logits.shape[-1]])
        out["llmforge_error"] = (last - logits[-1]).abs().max().item() / scale
        check(out["llmforge_error"] <= TOL, "llmforge's logits %.3g from PEFT's" % out["llmforge_error"])
    out["ok"] = not out["errors"]
    print(json.dumps(out))
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
