#!/usr/bin/env bash
# DeepSpeed configuration files as they are (docs/deepspeed.md), through the CLI:
# --deepspeed / --deepspeed_config / the positional CONFIG, two files refused;
# HF Trainer's zero2 "auto" file and the ZeRO-3 + offload tutorial file train
# unmodified (the header says what each auto became and which keys are
# ignored, and log.jsonl's lr follows DeepSpeed's WarmupLR formula); OneCycle
# with momentum trains; a file with many bad keys is refused with every
# problem named in one run; --print-config resolves without training.
#   bash test_deepspeed.sh LLMFORGE SOURCE_DIR SHARED_DIR
set -u

LF=${1:?usage: test_deepspeed.sh LLMFORGE SOURCE_DIR SHARED_DIR}
SRC=${2:?source dir}
case "$LF" in /*) ;; *) LF="$PWD/$LF" ;; esac
FX="$SRC/tests/fixtures/deepspeed/configs"

. "$(dirname "$0")/cli_lib.sh"

cli_tmpdir deepspeed

TINY=(--model.n_layer=1 --model.n_head=2 --model.n_embd=16 --model.block_size=16 --eval.iters=1
      --steps_per_print=1 --train_micro_batch_size_per_gpu=2 --registry.enabled=false --monitor.report=false
      --threads=1)

for i in $(seq 1 300); do
    echo "Line $i: the quick brown fox jumps over the lazy dog; FIRST CITIZEN, speak!"
done >corpus.txt
"$LF" prepare --char corpus.txt --out ds >prep.log 2>&1 || fail "prepare: $(cat prep.log)"
ok

# HF Trainer's zero2 file with "auto" everywhere, as --deepspeed FILE
"$LF" train --deepspeed "$FX/hf_zero2_auto.json" --data.dataset=ds --out_dir=run_hf --train_iters=6 \
    --scheduler.warmup_iters=3 "${TINY[@]}" >hf.out 2>hf.err || fail "hf_zero2_auto: $(cat hf.err)"
ok
for want in "config: auto: train_micro_batch_size_per_gpu -> 2 (on the command line)" \
    "config: auto: scheduler.params.warmup_num_steps -> 3 (from max(1, scheduler.warmup_iters when given, else 0))" \
    "config: auto: train_batch_size -> 2 (micro x accumulation x world size)" \
    "config: ignored: zero_optimization.allgather_bucket_size (" \
    "config: ignored: zero_optimization.offload_optimizer.pin_memory ("; do
    grep -qF -- "$want" hf.out || fail "hf_zero2_auto: the header lacks '$want': $(cat hf.out)"
    ok
done
# WarmupLR (log) from 0 to 5e-5 (HF TrainingArguments.learning_rate, lr "auto") over W = 3 steps: step it runs at b = it - 1
lrs=$(grep '"type":"train"' run_hf/log.jsonl | sed 's/.*"lr":\([^,]*\),.*/\1/' | tr '\n' ' ')
[ "$lrs" = "0 0 3.1546486e-05 5e-05 5e-05 5e-05 " ] || fail "hf_zero2_auto: lr per step '$lrs'"
ok

# The ZeRO-3 + offload + fp16 tutorial file (WarmupDecayLR, wandb/csv_monitor/flops_profiler
# sections), as --deepspeed_config FILE
"$LF" train --deepspeed_config "$FX/tutorial_zero3_offload_fp16.json" --data.dataset=ds --out_dir=run_z3 \
    --train_iters=3 "${TINY[@]}" >z3.out 2>z3.err || fail "tutorial_zero3_offload_fp16: $(cat z3.err)"
ok
for want in "config: ignored: wandb (" "config: ignored: csv_monitor (" "config: ignored: flops_profiler (" \
    "config: ignored: zero_optimization.sub_group_size (" "config: ignored: zero_optimization.offload_param.device ("; do
    grep -qF -- "$want" z3.out || fail "tutorial_zero3_offload_fp16: the header lacks '$want'"
    ok
done

# resuming the same file for more steps: no drift reported (cosine's derived keys play no part)
"$LF" train --deepspeed_config "$FX/tutorial_zero3_offload_fp16.json" --data.dataset=ds --out_dir=run_z3 \
    --train_iters=5 --resume "${TINY[@]}" >z3r.out 2>z3r.err || fail "tutorial_zero3_offload_fp16 --resume: $(cat z3r.err)"
ok
! grep -q "differ from the checkpoint" z3r.out z3r.err || fail "resume reports drift: $(cat z3r.out z3r.err)"
ok
# WarmupDecayLR (log, W 1000, max 1e-3): step 5 (it 4, b 3) at 1e-3 x log 4 / log 1000
grep -qF '"step":5,' run_z3/log.jsonl && grep '"type":"train","step":5,' run_z3/log.jsonl | grep -qF '"lr":0.00020068667' ||
    fail "resume: step 5's lr: $(grep '"type":"train","step":5,' run_z3/log.jsonl)"
ok

# OneCycle with momentum cycling, the positional CONFIG and --deepspeed naming the same file
"$LF" train "$FX/sched_onecycle.json" --deepspeed "$FX/sched_onecycle.json" --data.dataset=ds --out_dir=run_oc \
    --train_iters=3 "${TINY[@]}" >oc.out 2>oc.err || fail "sched_onecycle: $(cat oc.err)"
ok

# two different files: refused naming both, usage status 2
"$LF" train "$FX/sched_onecycle.json" --deepspeed_config "$FX/hf_zero2_auto.json" >two.out 2>two.err
[ $? -eq 2 ] || fail "two configuration files: status not 2"
grep -qF "two configuration files: CONFIG '$FX/sched_onecycle.json' and --deepspeed_config '$FX/hf_zero2_auto.json'" \
    two.err || fail "two configuration files: $(cat two.err)"
ok

# every problem of a bad file in one run, exit 1, nothing started
"$LF" train --deepspeed_config "$FX/bad_keys.json" --data.dataset=ds --out_dir=run_bad >bad.out 2>bad.err
rc=$?
[ $rc -eq 1 ] || fail "bad_keys: status $rc, expected 1"
ok
[ ! -e run_bad ] || fail "bad_keys: out_dir was created"
ok
grep -qF "llmforge: config: 15 problems (all of them above); nothing was started" bad.err ||
    fail "bad_keys: $(cat bad.err)"
ok
[ "$(grep -c "^llmforge: config: key\|^llmforge: config: unknown key" bad.err)" -eq 15 ] ||
    fail "bad_keys: not one line per problem: $(cat bad.err)"
ok
for want in "'optimizer.type' in '$FX/bad_keys.json': \"OneBitAdam\"" "'zero_optimization.offload_param.device'" \
    "unknown key 'fp16.loss_scale_windo'" "'zero_optimization.stage' in '$FX/bad_keys.json': 4 is out of range"; do
    grep -qF -- "$want" bad.err || fail "bad_keys: stderr lacks '$want'"
    ok
done

# --print-config: the header's notes and the resolved JSON, no training, no out_dir
"$LF" train --deepspeed "$FX/optim_adamw_defaults.json" --data.dataset=nowhere --out_dir=run_pc --print-config \
    >pc.out 2>pc.err || fail "--print-config: $(cat pc.err)"
ok
grep -qF "config: DeepSpeed file: DeepSpeed's and torch's defaults: betas [0.9, 0.999], eps 1e-8, weight_decay 0.01, no scheduler: a constant lr, gradient_clipping 0 (off)" \
    pc.out || fail "--print-config: $(cat pc.out)"
ok
grep -qF '"type": "constant"' pc.out && [ ! -e run_pc ] || fail "--print-config: $(cat pc.out)"
ok

echo "$passed passed, 0 failed"
