#!/usr/bin/env python3
"""Reference values of TRL's DPO loss for tests/train/test_dpo.c.

Interpreter: ~/.cache/llmforge/bench-venv/bin/python (torch, transformers, trl 1.16):

    ~/.cache/llmforge/bench-venv/bin/python tools/reference/make_dpo_fixture.py tests/fixtures/dpo/dpo.json

Both parts call TRL's own DPOTrainer._compute_loss (loss_type "sigmoid",
f_divergence_type reverse_kl, label_smoothing 0, precompute_ref_log_probs: the
reference log-probs come with the batch), on a stand-in trainer object that
holds only the attributes that method reads:

  "pairs": fixed sequence log-probs. The stand-in model returns per-token
      log-probs whose row sums are the given policy log-probs; autograd gives
      d loss / d logp of every row. Recorded: the loss (mean over pairs), the
      gradients, and TRL's logged metrics rewards/* and logps/*.
  "model": the tiny Llama of tests/fixtures/hf_direct in fp32. The stand-in
      model runs transformers' LlamaForCausalLM and returns, per position, the
      log-prob of the next token where it is a completion token (0 elsewhere),
      as TRL's fused head does. Recorded: the rows, the reference log-probs
      given, the loss and metrics, and per parameter tensor the gradient's
      norm, its dot product with a fixed weight vector, and a few elements.
"""
import json
import sys
import types

import torch
import torch.nn.functional as F
import transformers
import trl
from trl.trainer.dpo_trainer import DPOTrainer

BETA = 0.1


class Acc:
    def gather(self, x):
        return x

    gather_for_metrics = gather
    device = torch.device("cpu")


def stand_in(beta):
    from collections import defaultdict
    s = types.SimpleNamespace()
    s.model = types.SimpleNamespace(training=True)
    s.accelerator = Acc()
    s.ld_alpha = None
    s.precompute_ref_logps = True
    s.aux_loss_enabled = False
    s.f_divergence_type = "reverse_kl"
    s.beta = beta
    s.loss_types = ["sigmoid"]
    s.loss_weights = [1.0]
    s.label_smoothing = 0.0
    s.use_weighting = False
    s._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    s._total_train_tokens = 0
    s._tp_size = 1
    return s


def outputs_from(per_token):
    B, S = per_token.shape
    return types.SimpleNamespace(log_probs=per_token, entropy=torch.zeros(B, S), mean_logits=torch.zeros(B, S),
                                 is_top1=torch.zeros(B, S, dtype=torch.bool), aux_loss=None)


def metrics(s):
    return {k: v[-1] for k, v in s._metrics["train"].items() if k.startswith(("rewards/", "logps/"))}


def pairs_case(beta, pc, pr, rc, rr):
    """Fixed log-probs: each row's log-prob spread over 3 completion tokens."""
    P = len(pc)
    L = 5  # 1 prompt token, 3 completion tokens, then nothing: log_probs (2P, 4)
    logp = torch.tensor(pc + pr, dtype=torch.float64)
    leaf = logp.clone().requires_grad_(True)
    split = torch.tensor([0.5, 0.3, 0.2, 0.0], dtype=torch.float64)
    per_token = leaf[:, None] * split[None, :]
    mask = torch.tensor([[0, 1, 1, 1, 0]] * (2 * P))
    inputs = {"input_ids": torch.zeros(2 * P, L, dtype=torch.long), "attention_mask": torch.ones(2 * P, L, dtype=torch.long),
              "completion_mask": mask, "ref_chosen_logps": torch.tensor(rc, dtype=torch.float64),
              "ref_rejected_logps": torch.tensor(rr, dtype=torch.float64)}
    s = stand_in(beta)
    model = lambda **kw: outputs_from(per_token)
    loss = DPOTrainer._compute_loss(s, model, inputs, False)
    loss.backward()
    return {"beta": beta, "policy_chosen": pc, "policy_rejected": pr, "ref_chosen": rc, "ref_rejected": rr,
            "loss": loss.item(), "dlogp_chosen": leaf.grad[:P].tolist(), "dlogp_rejected": leaf.grad[P:].tolist(),
            "metrics": metrics(s)}


def model_case(hf_dir):
    torch.manual_seed(0)
    m = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
    m.train()
    V = m.config.vocab_size
    P, T = 2, 12
    L = T + 1
    g = torch.Generator().manual_seed(7)
    prompt_len = [3, 5, 4, 2]  # per row: chosen 0, chosen 1, rejected 0, rejected 1 (TRL's order)
    ids = torch.randint(1, V, (2 * P, L), generator=g)
    for i in range(P):  # a pair shares its prompt
        ids[P + i, :prompt_len[i]] = ids[i, :prompt_len[i]]
    prompt_len = prompt_len[:P] + prompt_len[:P]
    mask = torch.zeros(2 * P, L, dtype=torch.long)
    for r in range(2 * P):
        mask[r, prompt_len[r]:] = 1

    def model(input_ids, attention_mask, labels, **kw):
        logits = m(input_ids=input_ids, attention_mask=attention_mask).logits.float()
        lp = F.log_softmax(logits[:, :-1], dim=-1)
        tgt = labels[:, 1:]
        tok = lp.gather(-1, tgt.clamp_min(0).unsqueeze(-1)).squeeze(-1)
        return outputs_from(torch.where(tgt >= 0, tok, torch.zeros_like(tok)))

    with torch.no_grad():
        lab = ids.masked_fill(mask == 0, -100)
        base = model(ids, torch.ones_like(ids), lab).log_probs.sum(1).double()
    # reference log-probs away from the policy's, so that sigmoid(-z) is not 1/2
    ref = base + torch.tensor([-0.9, 0.6, 0.5, -0.3], dtype=torch.float64)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "completion_mask": mask,
              "ref_chosen_logps": ref[:P], "ref_rejected_logps": ref[P:]}
    s = stand_in(BETA)
    m.zero_grad()
    loss = DPOTrainer._compute_loss(s, model, inputs, False)
    loss.backward()
    grads = {}
    for name, p in m.named_parameters():
        gr = p.grad.detach().double().flatten()
        n = gr.numel()
        w = torch.tensor([((j * 7919) % 13 - 6) / 6.0 for j in range(n)], dtype=torch.float64)
        at = sorted({0, n - 1, n // 3, (2 * n) // 3, int(gr.abs().argmax())})
        grads[name] = {"numel": n, "norm": gr.norm().item(), "wdot": (gr * w).sum().item(),
                       "wabs": (gr.abs() * w.abs()).sum().item(), "max_abs": gr.abs().max().item(),
                       "elements": [[j, gr[j].item()] for j in at]}
    # llmforge's rows: pair i is rows 2i (chosen) and 2i+1 (rejected)
    rows, order = [], []
    for i in range(P):
        order += [i, P + i]
    for r in order:
        inp = ids[r, :T].tolist()
        tg = [ids[r, t + 1].item() if mask[r, t + 1] else -1 for t in range(T)]
        rows.append({"inputs": inp, "targets": tg})
    return {"dir": "tests/fixtures/hf_direct", "beta": BETA, "pairs": P, "block": T, "rows": rows,
            "ref": [ref[r].item() for r in order], "policy": [base[r].item() for r in order],
            "loss": loss.item(), "metrics": metrics(s), "grads": grads}


def main():
    out = sys.argv[1]
    cases = [
        pairs_case(0.1, [-12.5, -3.0, -40.0], [-14.0, -2.5, -39.0], [-13.0, -3.1, -41.0], [-13.5, -2.0, -39.5]),
        pairs_case(0.5, [-1.0, -7.25], [-1.0, -6.0], [-1.0, -7.0], [-1.0, -6.5]),
        pairs_case(2.0, [-100.0, -5.0], [-20.0, -80.0], [-30.0, -6.0], [-25.0, -70.0]),  # |z| large: saturation
    ]
    doc = {"generator": "tools/reference/make_dpo_fixture.py", "trl": trl.__version__, "torch": torch.__version__,
           "transformers": transformers.__version__, "pairs": cases, "model": model_case("tests/fixtures/hf_direct")}
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
