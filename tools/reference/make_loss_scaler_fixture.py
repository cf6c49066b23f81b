#!/usr/bin/env python3
"""Reference sequences of DeepSpeed's DynamicLossScaler for tests/train/test_loss_scaler.c.

Interpreter: Debian's /usr/bin/python3 (it has torch 1.13) in a venv that sees the
system packages and has DeepSpeed installed:

    /usr/bin/python3 -m venv --system-site-packages /tmp/dsenv
    /tmp/dsenv/bin/pip install deepspeed==0.12.6
    /tmp/dsenv/bin/python tools/reference/make_loss_scaler_fixture.py tests/fixtures/loss_scaler.json

Each case builds DeepSpeed's own scaler with the arguments DeepSpeed's engine
derives from an "fp16" config section (init_scale = 2**initial_scale_power,
scale_window = loss_scale_window, delayed_shift = hysteresis, ...), feeds it an
overflow pattern, and records after every step a row [overflow, raised, scale,
hysteresis counter, last_overflow_iter, cur_iter] ("raised": update_scale threw,
DeepSpeed's stop at the minimum scale).
"""
import json
import logging
import random
import sys

import deepspeed
from deepspeed.runtime.fp16 import loss_scaler as ls

ls.dist.get_rank = lambda: 0  # the scaler logs with the rank; no process group here
ls.logger.setLevel(logging.WARNING)  # one INFO line per overflow otherwise


def run(name, power, window, hysteresis, consecutive, min_scale, overflows, steps):
    s = ls.DynamicLossScaler(init_scale=2 ** power, scale_factor=2.0, scale_window=window,
                             min_scale=min_scale, delayed_shift=hysteresis,
                             consecutive_hysteresis=consecutive, raise_error_at_min_scale=True)
    out = []
    for i in range(steps):
        ov = i in overflows
        rec = {"overflow": ov, "scale_before": s.cur_scale}
        try:
            s.update_scale(ov)
            rec["raised"] = False
        except Exception as e:  # DeepSpeed stops the run here
            rec["raised"] = True
            rec["message"] = str(e)
        out.append([int(ov), int(rec["raised"]), s.cur_scale, s.cur_hysteresis, s.last_overflow_iter, s.cur_iter])
        if rec["raised"]:
            break
    return {"name": name, "initial_scale_power": power, "loss_scale_window": window,
            "hysteresis": hysteresis, "consecutive_hysteresis": consecutive,
            "min_loss_scale": min_scale,
            "columns": ["overflow", "raised", "scale", "hysteresis", "last_overflow_iter", "cur_iter"],
            "steps": out}


def main():
    rnd = random.Random(20261130)
    cases = [
        run("hysteresis2_window4", 16, 4, 2, False, 1, {0, 1, 2, 7, 8, 20, 21, 22, 23}, 40),
        run("hysteresis1_window3", 10, 3, 1, False, 1, {1, 5, 6, 13}, 30),
        run("consecutive_hysteresis3", 12, 5, 3, True, 1, {0, 2, 3, 4, 10, 11, 12, 30}, 45),
        run("not_consecutive_hysteresis3", 12, 5, 3, False, 1, {0, 2, 3, 4, 10, 11, 12, 30}, 45),
        run("reaches_min_and_stops", 3, 1000, 1, False, 2, set(range(0, 50)), 50),
        run("reaches_min_hysteresis2", 4, 1000, 2, False, 4, set(range(0, 50)), 50),
        run("deepspeed_defaults_window", 16, 1000, 2, False, 1, {5, 6, 1500}, 2600),
        run("random_p02", 20, 7, 2, False, 1, {i for i in range(300) if rnd.random() < 0.2}, 300),
        run("random_p02_consecutive", 20, 7, 2, True, 1, {i for i in range(300) if rnd.random() < 0.2}, 300),
        run("random_p05_min16", 8, 3, 2, False, 16, {i for i in range(300) if rnd.random() < 0.5}, 300),
    ]
    doc = {"generator": "DeepSpeed %s DynamicLossScaler" % deepspeed.__version__, "cases": cases}
    with open(sys.argv[1], "w") as f:
        json.dump(doc, f, indent=None, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
