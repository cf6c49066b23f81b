#!/usr/bin/env python3
"""Learning rates (and OneCycle's beta1) of DeepSpeed's schedulers at chosen
optimizer steps, for tests/train/test_ds_config.c.

    python3 tools/reference/make_ds_sched_fixture.py > tests/fixtures/deepspeed/sched_lr.txt
    python3 tools/reference/make_ds_sched_fixture.py --check   # against DeepSpeed itself, where importable

DeepSpeed builds a scheduler with last_batch_iteration = -1 and calls step()
after every applied optimizer step, so optimizer step `it` (0-based) runs at
the lr the scheduler holds after `it` step() calls: the constructor's value
for it = 0, get_lr() at last_batch_iteration = it - 1 after that.

The formulas below are transcribed from deepspeed/runtime/lr_schedules.py
(github.com/deepspeedai/DeepSpeed at edaa7221267243c7be7fb49c5d5f5c4fb97b4641),
class by class, so this script needs nothing but Python. With --check it
also runs DeepSpeed's own classes on a stand-in optimizer (the package
installed with `pip install --no-deps --target ~/.cache/llmforge/ds-venv
deepspeed` and torch on the path) and fails on any difference.

Output: one line per (case, step): `case it lr beta1`, with the case's
scheduler configuration in the header lines (`# case NAME JSON`); beta1 is
- where the scheduler does not move it. The optimizer's own lr and betas of
every case are OPT_LR and OPT_BETAS.
"""
import json
import math
import sys

OPT_LR = 0.002
OPT_BETAS = (0.9, 0.999)
STEPS = [0, 1, 2, 3, 5, 9, 10, 11, 17, 25, 49, 50, 51, 99, 100, 101, 150, 199, 200, 201, 250, 399]

CASES = [
    ("warmup_log", "WarmupLR", {"warmup_min_lr": 1e-5, "warmup_max_lr": 1e-3, "warmup_num_steps": 50}),
    ("warmup_linear", "WarmupLR", {"warmup_min_lr": 0.0, "warmup_max_lr": 1e-3, "warmup_num_steps": 50,
                                   "warmup_type": "linear"}),
    ("warmup_default_max", "WarmupLR", {"warmup_num_steps": 10}),
    ("warmup_one_step", "WarmupLR", {"warmup_min_lr": 1e-4, "warmup_max_lr": 1e-3, "warmup_num_steps": 1}),
    ("decay_log", "WarmupDecayLR", {"warmup_min_lr": 0.0, "warmup_max_lr": 3e-4, "warmup_num_steps": 20,
                                    "total_num_steps": 200}),
    ("decay_linear", "WarmupDecayLR", {"warmup_min_lr": 1e-5, "warmup_num_steps": 50, "total_num_steps": 150,
                                       "warmup_type": "linear"}),
    ("cosine_log", "WarmupCosineLR", {"total_num_steps": 200, "warmup_num_steps": 20}),
    ("cosine_linear", "WarmupCosineLR", {"total_num_steps": 250, "warmup_num_steps": 50, "warmup_min_ratio": 0.1,
                                         "cos_min_ratio": 0.05, "warmup_type": "linear"}),
    ("onecycle", "OneCycle", {"cycle_min_lr": 1e-4, "cycle_max_lr": 1e-3, "cycle_first_step_size": 50,
                              "cycle_second_step_size": 100, "decay_lr_rate": 0.5, "decay_step_size": 25,
                              "cycle_min_mom": 0.85, "cycle_max_mom": 0.95, "decay_mom_rate": 0.01}),
    ("onecycle_stairs", "OneCycle", {"cycle_min_lr": 1e-4, "cycle_max_lr": 5e-4, "cycle_first_step_size": 40,
                                     "cycle_first_stair_count": 4, "cycle_second_stair_count": 2,
                                     "cycle_momentum": False}),
    ("onecycle_defaults", "OneCycle", {"cycle_min_lr": 1e-5, "cycle_max_lr": 1e-4, "cycle_first_step_size": 30}),
    ("range_test", "LRRangeTest", {"lr_range_test_min_lr": 1e-5, "lr_range_test_step_size": 10,
                                   "lr_range_test_step_rate": 0.5}),
    ("range_test_stairs", "LRRangeTest", {"lr_range_test_min_lr": 1e-4, "lr_range_test_step_size": 25,
                                          "lr_range_test_step_rate": 2.0, "lr_range_test_staircase": True}),
]


def warmup_gamma(b, W, kind):
    if kind == "log":
        return 1.0 / math.log(W) * math.log(b + 1)
    return b / W


def warmup_lr(p, b, decay):
    lo = p.get("warmup_min_lr", 0.0)
    hi = p.get("warmup_max_lr", OPT_LR if not decay else 0.001)  # WarmupLR: None -> optimizer lr
    W = max(2, p.get("warmup_num_steps", 1000))
    kind = p.get("warmup_type", "log")
    if b < 0:
        return lo
    if b < W:
        g = warmup_gamma(b, W, kind)
    elif not decay:
        g = 1.0
    else:
        T = p["total_num_steps"]
        g = max(0.0, float(T - b) / float(max(1.0, T - W)))
    return lo + (hi - lo) * g


def cosine_lr(p, b):
    if b < 0:
        return 0.0
    W = max(2, p.get("warmup_num_steps", 1000))
    kind = p.get("warmup_type", "log")
    wmr = p.get("warmup_min_ratio", 0.0)
    cmr = p.get("cos_min_ratio", 0.0001)
    T = p["total_num_steps"]
    if b < W:
        r = warmup_gamma(b, W, kind)
        r = wmr + r * (1.0 - wmr)
    else:
        real_last = b - W + 1
        real_total = max(1, T - W)
        prog = min(1.0, real_last / real_total)
        r = (1 + math.cos(math.pi * prog)) / 2
        r = max(0.0, cmr + (1.0 - cmr) * r)
    return OPT_LR * r


def one_cycle_scale(p, b):
    first = float(p.get("cycle_first_step_size", 2000))
    second = float(p["cycle_second_step_size"]) if p.get("cycle_second_step_size") is not None else first
    total = first + second
    ratio = first / total
    fsc = p.get("cycle_first_stair_count", 0)
    ssc = p.get("cycle_second_stair_count")
    ssc = fsc if ssc is None else ssc
    n = b + 1
    cycle = math.floor(1 + n / total)
    x = 1.0 + n / total - cycle
    if x <= ratio:
        s, stairs = x / ratio, fsc
    else:
        s, stairs = (x - 1) / (ratio - 1), ssc
    if stairs > 0:
        ci = n % total
        pos = ci * stairs / first if ci <= first else (total - ci) * stairs / second
        s = math.floor(pos) / stairs
    return s, total


def one_cycle(p, b):
    lo, hi = p["cycle_min_lr"], p["cycle_max_lr"]
    dss = p.get("decay_step_size", 0)
    dlr = p.get("decay_lr_rate", 0.0)
    mom = p.get("cycle_momentum", True)
    mlo, mhi, dmr = p.get("cycle_min_mom", 0.8), p.get("cycle_max_mom", 0.9), p.get("decay_mom_rate", 0.0)
    if b < 0:  # the constructor's values
        return lo, (mlo if mom else None)
    s, total = one_cycle_scale(p, b)
    if b < total:
        lr = lo + (hi - lo) * s
        m = mhi - (mhi - mlo) * s
    else:
        k = b - total + 1
        lr = lo if (math.isclose(dss, 0) or math.isclose(dlr, 0)) else lo / (1 + dlr * k / dss)
        m = mhi if (math.isclose(dss, 0) or math.isclose(dmr, 0)) else mhi * (1 + dmr * k / dss)
    return lr, (m if mom else None)


def range_test(p, b):
    lo = p.get("lr_range_test_min_lr", 1e-3)
    size = p.get("lr_range_test_step_size", 2000)
    rate = p.get("lr_range_test_step_rate", 1.0)
    i = float(b + 1) / size
    if p.get("lr_range_test_staircase", False):
        i = math.floor(i)
    return lo * (1 + rate * i)


def transcribed(kind, p, it):
    b = it - 1
    if kind in ("WarmupLR", "WarmupDecayLR"):
        return warmup_lr(p, b, kind == "WarmupDecayLR"), None
    if kind == "WarmupCosineLR":
        return cosine_lr(p, b), None
    if kind == "OneCycle":
        return one_cycle(p, b)
    return range_test(p, b), None


def deepspeed_values(kind, p, steps):
    """(lr, beta1) at each step from DeepSpeed's own class."""
    import torch
    from deepspeed.runtime import lr_schedules as ls
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=OPT_LR, betas=OPT_BETAS)
    sched = getattr(ls, kind)(opt, **p)
    out, it = {}, 0
    for target in range(max(steps) + 1):
        if target in steps:
            g = opt.param_groups[0]
            mom = g["betas"][0] if kind == "OneCycle" and p.get("cycle_momentum", True) else None
            out[target] = (float(g["lr"]), mom)
        sched.step()
        it += 1
    return out


def main():
    check = "--check" in sys.argv
    print("# DeepSpeed scheduler lr (and OneCycle beta1) at optimizer step it: tools/reference/make_ds_sched_fixture.py")
    print(f"# optimizer lr {OPT_LR!r}, betas {list(OPT_BETAS)!r}")
    bad = 0
    for name, kind, p in CASES:
        print(f"# case {name} " + json.dumps({"type": kind, "params": p}, sort_keys=True))
        ref = deepspeed_values(kind, p, STEPS) if check else None
        for it in STEPS:
            lr, m = transcribed(kind, p, it)
            if ref is not None:
                rlr, rm = ref[it]
                if not math.isclose(lr, rlr, rel_tol=1e-12, abs_tol=1e-18) or (m is None) != (rm is None) or (
                        m is not None and not math.isclose(m, rm, rel_tol=1e-12)):
                    print(f"MISMATCH {name} it {it}: transcribed {lr!r} {m!r}, DeepSpeed {rlr!r} {rm!r}",
                          file=sys.stderr)
                    bad += 1
            print(f"{name} {it} {lr!r} {'-' if m is None else repr(m)}")
    if check:
        print(f"checked against DeepSpeed: {bad} differences", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
