/*
 * Training configuration: one table of keys (dotted path, type, field,
 * bounds, default, help) drives parsing of the JSON file and of command-line
 * overrides, validation, the --help text and the dump of the resolved
 * configuration.
 *
 * Order of resolution: table defaults -> JSON file -> overrides in order ->
 * derived keys (scheduler.decay_iters = train_iters, scheduler.min_lr =
 * lr / 10, the batch identity) -> validation of the whole result, once.
 * The caller's struct is written only when everything succeeded.
 *
 * Every problem is found in one pass: unknown keys, wrong types, refused
 * values and ranges are collected (lf__cfg_keep_error) and reported
 * together; the cross-key rules run once those pass.
 *
 * Files (config_impl.h holds what they share): this one has the table, the
 * defaults, the order of resolution (build) and the public API;
 * config_parse.c reads the JSON text and the overrides into the fields;
 * config_derive.c the derived keys and the run header's notes;
 * config_check.c the ranges and the rules across keys; config_text.c the
 * dump and the --help text.
 *
 * DeepSpeed files (config_deepspeed.c, docs/deepspeed.md): a file whose
 * top-level keys are all DeepSpeed's gets DeepSpeed's and torch's defaults
 * (constant lr without a scheduler, AdamW betas (0.9, 0.999), weight decay
 * 0.01, no clipping); "auto" takes llmforge's value as HF Trainer takes
 * TrainingArguments'; DeepSpeed keys without a row are ignored with a
 * notice, refused with the reason, or accepted with llmforge's value only.
 *
 * Invariants:
 *  - every settable field of lf_train_config has exactly one table row, and
 *    the dump writes every row but the schedule keys of schedulers not in
 *    use, so parse(to_json(cfg)) reproduces cfg;
 *  - numbers are read from their source text, not from cJSON's double, so a
 *    64-bit seed is exact and an integer written 1e3 or 12.0 is checked for
 *    integrality and overflow;
 *  - floats are written with the shortest %.Ng (N <= 9) that reads back as
 *    the same float: 0.001 stays 0.001 and every value round-trips;
 *  - batch identity (DeepSpeed): train_batch_size = micro x accumulation x
 *    world size; any two given infer the third, all three must agree. The
 *    world size is not a key: it is the launcher's (lf_comm_env_detect on
 *    this process's environment), so every rank of a job resolves the same
 *    batch and fails the same way, or the caller's (..._world).
 *  - DeepSpeed features llmforge lacks are accepted only with values that
 *    mean "off" (config_deepspeed.c's LF__DS_ONLY rows), so a ds_config.json
 *    that leaves them off loads, and one that turns them on is refused by
 *    name.
 *
 * References: DeepSpeed configuration JSON (deepspeed.ai/docs/config-json);
 * nanoGPT train.py and config/train_shakespeare_char.py (names, defaults,
 * min_lr ~= lr/10).
 */
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "llmforge/backend.h"
#include "llmforge/comm.h"
#include "llmforge/data.h"
#include "llmforge/train.h"
#include "config_deepspeed.h"
#include "config_impl.h"
#include "train_impl.h"

#define CFG_FILE_MAX (16u << 20) /* configuration files larger than this are refused */

_Static_assert(LF_SCHED_COSINE == 0 && LF_SCHED_CONSTANT == 1 && LF_SCHED_WARMUP_LR == 2 &&
                   LF_SCHED_WARMUP_DECAY_LR == 3 && LF_SCHED_WARMUP_COSINE_LR == 4 && LF_SCHED_ONE_CYCLE == 5 &&
                   LF_SCHED_LR_RANGE_TEST == 6,
               "sched_choices order");
_Static_assert(LF_SAMPLING_RANDOM == 0 && LF_SAMPLING_SEQUENTIAL == 1 && LF_SAMPLING_RECORDS == 2 &&
                   LF_SAMPLING_PACKED == 3,
               "sampling_choices order");

/* ---------------------------------------------------------------- the table */

#define FLD(f) .off = offsetof(lf_train_config, f), .size = sizeof(((lf_train_config *)0)->f)
#define INF HUGE_VAL

/* DeepSpeed's Adam is AdamW while optimizer.params.adam_w_mode is true (its default) */
static const char *const optim_choices[] = {"AdamW", "Adam", NULL};
static const char *const sched_choices[] = {"cosine",         "constant", "WarmupLR",    "WarmupDecayLR",
                                            "WarmupCosineLR", "OneCycle", "LRRangeTest", NULL}; /* lf_sched_type */
static const char *const warmup_type_choices[] = {"log", "linear", NULL};
static const char *const sampling_choices[] = {"random", "sequential", "records", "packed", NULL}; /* lf_sampling */
static const char *const objective_choices[] = {"lm", "dpo", NULL};                                /* lf_objective */
/* data.packing: 0, then lf_sft_pack_mode's values */
static const char *const packing_choices[] = {"none", "packed", "padded", NULL};
_Static_assert(LF_SFT_PACKED == 1 && LF_SFT_PADDED == 2, "packing_choices order");
/* alert actions, as lf_alert_action values (index = value) */
static const char *const alert_choices[] = {"off", "log", "skip_step", "stop", "exit", "rollback", NULL};
_Static_assert(LF_ALERT_OFF == 0 && LF_ALERT_LOG == 1 && LF_ALERT_SKIP == 2 && LF_ALERT_STOP == 3 &&
                   LF_ALERT_EXIT == 4 && LF_ALERT_ROLLBACK == 5,
               "alert_choices order");
/* checkpoint.on_error, as lf_ckpt_on_error values */
static const char *const on_error_choices[] = {"stop", "continue", NULL};
_Static_assert(LF_CKPT_ON_ERROR_STOP == 0 && LF_CKPT_ON_ERROR_CONTINUE == 1, "on_error_choices order");
/* activation_checkpointing.policy, as lf_recompute values (index = value) */
static const char *const recompute_choices[] = {"none", "selective", "full", NULL};
static const char *const comm_choices[] = {"auto", "single", "mpi", "tcp", "nccl", NULL};
static const char *const offload_choices[] = {"none", "cpu", NULL};
static const char *const comm_dtype_choices[] = {"fp32", "bf16", NULL};
/* the compute backend (lf_backend_select); bf16.enabled picks its bf16 variant */
static const char *const lora_bias_choices[] = {"none", "all", "lora_only", NULL}; /* PEFT's; only none is built */
static const char *const backend_choices[] = {"auto", "cpu", "cuda", "cpu-fenced", NULL};
_Static_assert(LF_RECOMPUTE_NONE == 0 && LF_RECOMPUTE_SELECTIVE == 1 && LF_RECOMPUTE_FULL == 2,
               "recompute_choices order");

/* One row per key, as the table is read (clang-format would give each field a line). */
// clang-format off
const key_def lf__cfg_keys[] = {
    /* the architectures' names (src/model/), the first the default */
    {.path = "model.arch", .type = KT_CHOICE, FLD(arch), .choices_fn = lf_arch_names,
     .help = "model family (docs/models.md)"},
    {.path = "model.n_layer", .type = KT_INT, FLD(model.n_layer), .lo = 1, .hi = 1024, .def = {4},
     .help = "transformer blocks (L)"},
    {.path = "model.n_head", .type = KT_INT, FLD(model.n_head), .lo = 1, .hi = 1024, .def = {4},
     .help = "attention heads (NH); must divide model.n_embd"},
    {.path = "model.n_kv_head", .type = KT_INT, FLD(model.n_kv_head), .lo = 0, .hi = 1024, .def = {0},
     .help = "key/value heads (grouped-query attention; 1 = multi-query) where the family has them; must divide "
             "model.n_head; 0 = model.n_head"},
    {.path = "model.ffn_hidden", .type = KT_INT, FLD(model.ffn_hidden), .lo = 0, .hi = 1048576, .def = {0},
     .help = "MLP hidden width; 0 = the family's default (docs/models.md)"},
    {.path = "model.rope_theta", .type = KT_FLOAT, FLD(model.rope_theta), .lo = 0, .hi = INF, .def = {0},
     .help = "RoPE base, for a family with rotary positions; 0 = 10000"},
    {.path = "model.norm_eps", .type = KT_FLOAT, FLD(model.norm_eps), .lo = 0, .hi = 1, .def = {0},
     .help = "epsilon of the normalisation layers; 0 = 1e-5"},
    {.path = "model.tie_embeddings", .type = KT_BOOL, FLD(model.tie_embeddings), .def = {1},
     .help = "lm_head shares the token embedding (some families: always; docs/models.md)"},
    {.path = "model.n_embd", .type = KT_INT, FLD(model.n_embd), .lo = 1, .hi = 65536, .def = {128},
     .help = "channels (C)"},
    {.path = "model.block_size", .type = KT_INT, FLD(model.block_size), .lo = 1, .hi = 1048576, .def = {64},
     .help = "context length (T)"},
    {.path = "model.sliding_window", .type = KT_INT, FLD(model.sliding_window), .lo = 0, .hi = 1048576, .def = {0},
     .help = "attention window of the model (Mistral's sliding_window; --init-from fills it); 0 = none. "
             "Query t attends keys t-W+1..t, as transformers does; model.block_size may exceed it"},
    {.path = "model.bias", .type = KT_BOOL, FLD(model.bias), .def = {1},
     .help = "biases, where the family has them (docs/models.md); a family may default it to false"},
    {.path = "model.dropout", .type = KT_FLOAT, FLD(model.dropout), .lo = 0, .hi = 1, .flags = KF_HI_OPEN,
     .def = {0}, .help = "dropout probability (embeddings, attention weights, residual branches)"},
    {.path = "model.vocab_size", .type = KT_INT, FLD(model.vocab_size), .lo = 0, .hi = 16777216, .def = {0},
     .help = "vocabulary rows; 0 = the dataset's vocabulary, larger = padded"},
    {.path = "data.dataset", .type = KT_STRING, FLD(dataset), .flags = KF_REQUIRED, .def_str = "",
     .help = "dataset directory written by `llmforge prepare`, or one holding llm.c .bin files (required)"},
    {.path = "data.sampling", .type = KT_ENUM, FLD(sampling), .def_str = "random", .choices = sampling_choices,
     .help = "training batch positions: random (nanoGPT), sequential, records (windows start at a record), or "
             "packed (epochs of non-overlapping windows, shuffled by seed and epoch)"},
    {.path = "train.objective", .type = KT_ENUM, FLD(objective), .def_str = "lm", .choices = objective_choices,
     .help = "lm (next-token cross-entropy on the unmasked targets) or dpo (TRL's DPOTrainer, loss_type sigmoid, on "
             "a dataset prepared with --mode dpo; a micro-batch of B rows holds B/2 pairs)"},
    {.path = "dpo.beta", .type = KT_FLOAT, FLD(dpo_beta), .lo = 0, .hi = INF, .flags = KF_LO_OPEN, .def = {0.1},
     .help = "DPO's beta: loss = -logsigmoid(beta * (policy - reference log-ratio of chosen over rejected))"},
    {.path = "data.packing", .type = KT_ENUM, FLD(packing), .def_str = "none", .choices = packing_choices,
     .help = "fine-tuning rows of whole examples (records between end-of-text tokens; docs/training.md): none "
             "(windows of the token stream, data.sampling), packed (several examples per row, attention and "
             "positions kept inside each), or padded (one example per row); rows in shuffled epochs"},
    {.path = "data.prefetch", .type = KT_INT, FLD(prefetch), .lo = 0, .hi = 64, .def = {2},
     .help = "steps of batches a background thread prepares ahead (0 = none)"},
    {.path = "data.tokenizer", .type = KT_STRING, FLD(data_tokenizer), .def_str = "",
     .help = "tokenizer spec for a dataset that names none (llm.c files), e.g. gpt2:DIR"},
    {.path = "train_batch_size", .type = KT_LONG, FLD(train_batch_size), .lo = 0, .hi = INF, .flags = KF_DERIVED,
     .def_str = "micro x accumulation x world size",
     .help = "sequences per optimizer step (0 = derive); any two batch keys give the third"},
    {.path = "train_micro_batch_size_per_gpu", .type = KT_INT, FLD(micro_batch), .lo = 1, .hi = 65536, .def = {12},
     .alias = "batch_size", .help = "sequences per forward/backward (B)"},
    {.path = "gradient_accumulation_steps", .type = KT_INT, FLD(grad_accum), .lo = 1, .hi = INF, .def = {1},
     .help = "micro-batches per optimizer step"},
    {.path = "train_iters", .type = KT_LONG, FLD(train_iters), .lo = 1, .hi = INF, .def = {2000},
     .alias = "max_iters", .help = "optimizer steps"},
    {.path = "train.stop_at", .type = KT_LONG, FLD(stop_at), .lo = 0, .hi = INF, .def = {0},
     .help = "end the run after this step (evaluating and saving a checkpoint there) while the learning-rate "
             "schedule stays train_iters': a later --resume continues the same run (sweeps' rungs); 0 = off"},
    /* LoRA (PEFT's LoraConfig; include/llmforge/model.h lf_lora_config) */
    {.path = "lora.r", .type = KT_INT, FLD(lora.r), .lo = 1, .hi = 65536, .flags = KF_FULL_PATH, .def = {8},
     .help = "LoRA rank (PEFT's r)"},
    {.path = "lora.alpha", .type = KT_FLOAT, FLD(lora.alpha), .lo = 0, .hi = INF, .flags = KF_LO_OPEN | KF_FULL_PATH, .def = {8},
     .help = "LoRA alpha (PEFT's lora_alpha): the adapters' product is scaled by alpha / r"},
    {.path = "lora.dropout", .type = KT_FLOAT, FLD(lora.dropout), .lo = 0, .hi = 1, .flags = KF_HI_OPEN | KF_FULL_PATH,
     .def = {0}, .help = "dropout on the adapters' input while training (PEFT's lora_dropout)"},
    {.path = "lora.target_modules", .type = KT_STRLIST, FLD(lora.target_modules), .flags = KF_FULL_PATH, .def_str = "",
     .help = "modules that get adapters, by Hugging Face name (Llama q_proj k_proj v_proj o_proj gate_proj up_proj "
             "down_proj; GPT-2 c_attn c_proj c_fc), or \"all-linear\"; [] = no LoRA (full fine-tuning)"},
    {.path = "lora.bias", .type = KT_CHOICE, FLD(lora.bias), .flags = KF_FULL_PATH, .def_str = "none", .choices = lora_bias_choices,
     .help = "PEFT's bias: none (the base biases stay frozen; all and lora_only are not implemented)"},
    {.path = "lora.use_rslora", .type = KT_BOOL, FLD(lora.use_rslora), .flags = KF_FULL_PATH, .def = {0},
     .help = "rank-stabilised LoRA: scale alpha / sqrt(r) instead of alpha / r"},
    {.path = "optimizer.type", .type = KT_CHOICE, FLD(optimizer_type), .def_str = "AdamW",
     .choices = optim_choices, .help = "optimizer"},
    {.path = "optimizer.params.lr", .type = KT_FLOAT, FLD(lr), .lo = 0, .hi = INF, .flags = KF_LO_OPEN,
     .def = {1e-3}, .alias = "learning_rate", .help = "peak learning rate"},
    {.path = "optimizer.params.betas", .type = KT_PAIR, FLD(beta1), .off2 = offsetof(lf_train_config, beta2),
     .lo = 0, .hi = 1, .flags = KF_HI_OPEN, .def = {0.9, 0.99}, .help = "AdamW [beta1, beta2]"},
    {.path = "optimizer.params.eps", .type = KT_FLOAT, FLD(eps), .lo = 0, .hi = INF, .flags = KF_LO_OPEN,
     .def = {1e-8}, .help = "AdamW epsilon"},
    {.path = "optimizer.params.weight_decay", .type = KT_FLOAT, FLD(weight_decay), .lo = 0, .hi = INF,
     .def = {0.1}, .help = "decoupled weight decay (tensors with >= 2 dims)"},
    {.path = "scheduler.type", .type = KT_ENUM, FLD(sched_type), .def_str = "cosine", .choices = sched_choices,
     .help = "learning-rate schedule: warmup + cosine decay (nanoGPT), or constant"},
    {.path = "scheduler.warmup_iters", .type = KT_LONG, FLD(warmup_iters), .lo = 0, .hi = INF, .def = {100},
     .help = "linear warmup steps"},
    {.path = "scheduler.decay_iters", .type = KT_LONG, FLD(decay_iters), .lo = 0, .hi = INF, .flags = KF_DERIVED,
     .def_str = "train_iters", .alias = "lr_decay_iters", .help = "step at which the cosine reaches min_lr"},
    {.path = "scheduler.min_lr", .type = KT_FLOAT, FLD(min_lr), .lo = 0, .hi = INF, .flags = KF_DERIVED,
     .def_str = "optimizer.params.lr / 10", .help = "learning rate after decay_iters"},
    /* DeepSpeed's schedulers' parameters (runtime/lr_schedules.py; src/train/schedule.c; docs/deepspeed.md) */
#define DSF(f) FLD(ds.f)
    {.path = "scheduler.params.warmup_min_lr", .type = KT_FLOAT, DSF(warmup_min_lr), .lo = 0, .hi = INF, .def = {0},
     .help = "WarmupLR, WarmupDecayLR: lr at the start of the warmup"},
    {.path = "scheduler.params.warmup_max_lr", .type = KT_FLOAT, DSF(warmup_max_lr), .lo = 0, .hi = INF,
     .flags = KF_DERIVED, .def = {0.001}, .def_str = "0.001; WarmupLR: optimizer.params.lr",
     .help = "WarmupLR, WarmupDecayLR: lr at the end of the warmup"},
    {.path = "scheduler.params.warmup_num_steps", .type = KT_LONG, DSF(warmup_num_steps), .lo = 1, .hi = INF,
     .def = {1000}, .help = "WarmupLR, WarmupDecayLR, WarmupCosineLR: warmup steps (DeepSpeed uses at least 2)"},
    {.path = "scheduler.params.warmup_type", .type = KT_ENUM, DSF(warmup_linear), .def_str = "log",
     .choices = warmup_type_choices, .help = "WarmupLR, WarmupDecayLR, WarmupCosineLR: warmup curve, log or linear"},
    {.path = "scheduler.params.total_num_steps", .type = KT_LONG, DSF(total_num_steps), .lo = 0, .hi = INF,
     .def = {0}, .help = "WarmupDecayLR, WarmupCosineLR: step at which the decay ends (required by them)"},
    {.path = "scheduler.params.warmup_min_ratio", .type = KT_FLOAT, DSF(warmup_min_ratio), .lo = 0, .hi = 1,
     .def = {0}, .help = "WarmupCosineLR: lr / optimizer.params.lr at the start of the warmup"},
    {.path = "scheduler.params.cos_min_ratio", .type = KT_FLOAT, DSF(cos_min_ratio), .lo = 0, .hi = 1,
     .def = {0.0001}, .help = "WarmupCosineLR: lr / optimizer.params.lr at the end of the cosine"},
    {.path = "scheduler.params.cycle_min_lr", .type = KT_FLOAT, DSF(cycle_min_lr), .lo = 0, .hi = INF, .def = {0},
     .help = "OneCycle: lr at the bottom of the cycle (required by it)"},
    {.path = "scheduler.params.cycle_max_lr", .type = KT_FLOAT, DSF(cycle_max_lr), .lo = 0, .hi = INF, .def = {0},
     .help = "OneCycle: lr at the top of the cycle (required by it)"},
    {.path = "scheduler.params.decay_lr_rate", .type = KT_FLOAT, DSF(decay_lr_rate), .lo = 0, .hi = INF, .def = {0},
     .help = "OneCycle: after the cycle lr = cycle_min_lr / (1 + rate x steps / decay_step_size)"},
    {.path = "scheduler.params.cycle_first_step_size", .type = KT_LONG, DSF(cycle_first_step_size), .lo = 1,
     .hi = INF, .def = {2000}, .help = "OneCycle: steps of the rising half"},
    {.path = "scheduler.params.cycle_second_step_size", .type = KT_LONG, DSF(cycle_second_step_size), .lo = 0,
     .hi = INF, .flags = KF_DERIVED, .def_str = "cycle_first_step_size", .help = "OneCycle: steps of the falling half"},
    {.path = "scheduler.params.cycle_first_stair_count", .type = KT_INT, DSF(cycle_first_stair_count), .lo = 0,
     .hi = INF, .def = {0}, .help = "OneCycle: stairs of the rising half (0 = a straight line)"},
    {.path = "scheduler.params.cycle_second_stair_count", .type = KT_INT, DSF(cycle_second_stair_count), .lo = 0,
     .hi = INF, .flags = KF_DERIVED, .def_str = "cycle_first_stair_count",
     .help = "OneCycle: stairs of the falling half"},
    {.path = "scheduler.params.decay_step_size", .type = KT_LONG, DSF(decay_step_size), .lo = 0, .hi = INF,
     .def = {0}, .help = "OneCycle: steps per decay interval after the cycle (0 = no decay)"},
    {.path = "scheduler.params.cycle_momentum", .type = KT_BOOL, DSF(cycle_momentum), .def = {1},
     .help = "OneCycle: cycle AdamW's beta1 between cycle_max_mom and cycle_min_mom (beta2 0.99, DeepSpeed's)"},
    {.path = "scheduler.params.cycle_min_mom", .type = KT_FLOAT, DSF(cycle_min_mom), .lo = 0, .hi = 1,
     .flags = KF_HI_OPEN, .def = {0.8}, .help = "OneCycle: beta1 at the top of the lr cycle"},
    {.path = "scheduler.params.cycle_max_mom", .type = KT_FLOAT, DSF(cycle_max_mom), .lo = 0, .hi = 1,
     .flags = KF_HI_OPEN, .def = {0.9}, .help = "OneCycle: beta1 at the bottom of the lr cycle"},
    {.path = "scheduler.params.decay_mom_rate", .type = KT_FLOAT, DSF(decay_mom_rate), .lo = 0, .hi = INF,
     .def = {0}, .help = "OneCycle: after the cycle beta1 = cycle_max_mom x (1 + rate x steps / decay_step_size)"},
    {.path = "scheduler.params.lr_range_test_min_lr", .type = KT_FLOAT, DSF(lr_range_test_min_lr), .lo = 0,
     .hi = INF, .def = {0.001}, .help = "LRRangeTest: starting lr"},
    {.path = "scheduler.params.lr_range_test_step_size", .type = KT_LONG, DSF(lr_range_test_step_size), .lo = 1,
     .hi = INF, .def = {2000}, .help = "LRRangeTest: steps per interval"},
    {.path = "scheduler.params.lr_range_test_step_rate", .type = KT_FLOAT, DSF(lr_range_test_step_rate), .lo = 0,
     .hi = INF, .def = {1.0}, .help = "LRRangeTest: lr = min_lr x (1 + rate x intervals)"},
    {.path = "scheduler.params.lr_range_test_staircase", .type = KT_BOOL, DSF(lr_range_test_staircase), .def = {0},
     .help = "LRRangeTest: whole intervals only"},
#undef DSF
    {.path = "gradient_clipping", .type = KT_FLOAT, FLD(grad_clip), .lo = 0, .hi = INF, .def = {1.0},
     .alias = "grad_clip", .help = "clip the global gradient norm to this; 0 disables"},
    {.path = "eval.interval", .type = KT_LONG, FLD(eval_interval), .lo = 0, .hi = INF, .def = {250},
     .alias = "eval_interval", .help = "steps between evaluations; 0 = only at the end"},
    {.path = "eval.iters", .type = KT_INT, FLD(eval_iters), .lo = 1, .hi = INF, .def = {20}, .alias = "eval_iters",
     .help = "batches per split per evaluation"},
    {.path = "eval.tasks", .type = KT_STRLIST, FLD(eval_tasks), .def_str = "",
     .help = "task files (JSONL, see `llmforge eval`) run at every evaluation; [] = loss only"},
    {.path = "eval.suite", .type = KT_STRING, FLD(eval_suite), .def_str = "",
     .help = "directory of task files (*.jsonl) run on every saved checkpoint, the metrics recorded in the model "
             "registry (empty = none)"},
    {.path = "checkpoint.best_metric", .type = KT_STRING, FLD(best_metric), .def_str = "val_loss",
     .help = "metric that marks the best checkpoint: val_loss or <task>/<metric> of eval.tasks"},
    {.path = "checkpoint.greater_is_better", .type = KT_BOOL, FLD(greater_is_better), .def = {0},
     .help = "larger best_metric is better (false for losses)"},
    {.path = "checkpoint.load_best_model_at_end", .type = KT_BOOL, FLD(load_best_model_at_end), .def = {0},
     .help = "after training, copy the best checkpoint's model to out_dir/final_model"},
    {.path = "checkpoint.interval", .type = KT_LONG, FLD(ckpt_interval), .lo = 0, .hi = INF, .def = {500},
     .help = "steps between checkpoints; 0 = only at the end"},
    {.path = "checkpoint.keep_last", .type = KT_INT, FLD(keep_last), .lo = 1, .hi = INF, .def = {3},
     .help = "newest checkpoints kept on disk (older ones are removed before the next save writes, so a full "
             "disk frees room first; never the latest nor the best)"},
    {.path = "checkpoint.keep_every", .type = KT_LONG, FLD(keep_every), .lo = 0, .hi = INF, .def = {0},
     .help = "also keep, forever, every checkpoint whose step is a multiple of this (0 = none)"},
    {.path = "checkpoint.requeue", .type = KT_BOOL, FLD(ckpt_requeue), .def = {0},
     .help = "under Slurm (SLURM_JOB_ID set), after a preemption's checkpoint run `scontrol requeue "
             "$SLURM_JOB_ID` (the CLI, rank 0), so the job starts again and --resume auto continues it"},
    {.path = "checkpoint.async", .type = KT_BOOL, FLD(ckpt_async), .def = {0},
     .help = "the step that checkpoints only snapshots the state (host copies of parameters, moments, state); a "
             "background thread writes, hashes, fsyncs and renames while training goes on; one write in flight "
             "(the next save waits for it); the files are those a synchronous save writes"},
    {.path = "checkpoint.on_error", .type = KT_ENUM, FLD(ckpt_on_error), .def_str = "stop",
     .choices = on_error_choices,
     .help = "a save that fails (ENOSPC, EIO; found at the next step boundary when async): stop (the run fails "
             "naming the file) or continue (a checkpoint_error record and a warning; the next save tries again); "
             "the previous checkpoint stays latest either way"},
    {.path = "steps_per_print", .type = KT_LONG, FLD(steps_per_print), .lo = 1, .hi = INF, .def = {10},
     .alias = "log_interval", .help = "steps between progress lines"},
    {.path = "seed", .type = KT_U64, FLD(seed), .def = {1337},
     .help = "seed of every random stream (init, data order, dropout)"},
    {.path = "out_dir", .type = KT_STRING, FLD(out_dir), .flags = KF_REQUIRED, .def_str = "out",
     .help = "run directory (checkpoints, logs, resolved config)"},
    {.path = "backend", .type = KT_CHOICE, FLD(backend), .def_str = "auto", .choices = backend_choices,
     .help = "compute backend: auto (the LLMFORGE_BACKEND environment variable when set, else cuda when this "
             "build has it and a GPU answers, else cpu), cpu, cuda (--device N picks the GPU) or cpu-fenced (a "
             "test backend); a name given here wins over LLMFORGE_BACKEND"},
    /* precision (DeepSpeed's bf16 section) */
    {.path = "bf16.enabled", .type = KT_BOOL, FLD(bf16), .def = {0},
     .help = "bf16 matrix products (fp32 accumulation, master weights, optimizer state): the cpu-bf16 backend"},
    {.path = "memory.limit_bytes", .type = KT_LONG, FLD(memory_limit), .lo = 0, .hi = INF, .def = {0},
     .help = "refuse to start when the memory plan exceeds this (0 = the machine's available memory)"},
    /* fp16 with DeepSpeed's loss scaling (include/llmforge/loss_scaler.h) */
    {.path = "fp16.enabled", .type = KT_BOOL, FLD(fp16), .def = {0},
     .help = "fp16 gradients with dynamic loss scaling (on CPU: fp32 compute, gradients rounded to fp16)"},
    {.path = "fp16.loss_scale", .type = KT_FLOAT, FLD(fp16_loss_scale), .lo = 0, .hi = INF, .def = {0},
     .help = "0 = dynamic loss scaling; > 0 = this static scale"},
    {.path = "fp16.initial_scale_power", .type = KT_INT, FLD(fp16_scale_power), .lo = 0, .hi = 60, .def = {16},
     .help = "dynamic scaling starts at 2^this"},
    {.path = "fp16.loss_scale_window", .type = KT_LONG, FLD(fp16_window), .lo = 1, .hi = INF, .def = {1000},
     .help = "clean steps after which the scale doubles"},
    {.path = "fp16.hysteresis", .type = KT_INT, FLD(fp16_hysteresis), .lo = 1, .hi = 1000000, .def = {2},
     .help = "overflows tolerated before the scale halves"},
    {.path = "fp16.consecutive_hysteresis", .type = KT_BOOL, FLD(fp16_consecutive), .def = {0},
     .help = "restore the hysteresis after every clean step (not only when the scale grows)"},
    {.path = "fp16.min_loss_scale", .type = KT_FLOAT, FLD(fp16_min_scale), .lo = 0, .hi = INF, .flags = KF_LO_OPEN,
     .def = {1}, .help = "the scale never goes below this; an overflow at it stops the run"},
    {.path = "zero_optimization.stage", .type = KT_INT, FLD(zero_stage), .lo = 0, .hi = 3, .def = {0},
     .help = "ZeRO: 0 replicated; 1 AdamW moments partitioned over the ranks; 2 gradients too; 3 parameters "
             "too, gathered unit by unit for forward and backward"},
    {.path = "zero_optimization.offload_optimizer.device", .type = KT_ENUM, FLD(offload_optimizer), .def_str = "none",
     .choices = offload_choices,
     .help = "where AdamW's state lives: none or cpu (the same on the CPU backend: host memory)"},
    /* activation recomputation: our policy key; DeepSpeed's own keys of the
     * section tune its multi-GPU partitioning and change no result: they are
     * accepted and ignored with a notice (config_deepspeed.c) */
    {.path = "activation_checkpointing.policy", .type = KT_ENUM, FLD(recompute), .def_str = "none",
     .choices = recompute_choices,
     .help = "activation recomputation: none, selective (recompute layernorm and GELU outputs) or full "
             "(keep block inputs, recompute each block); same results, less memory, more compute"},
    /* monitoring */
    {.path = "wall_clock_breakdown", .type = KT_BOOL, FLD(wall_clock_breakdown), .def = {0},
     .help = "time each phase of a step (data, forward, backward, optimizer, checkpoint)"},
    {.path = "tensorboard.enabled", .type = KT_BOOL, FLD(tb_enabled), .def = {0},
     .help = "write TensorBoard event files"},
    {.path = "tensorboard.output_path", .type = KT_STRING, FLD(tb_output_path), .def_str = "",
     .help = "TensorBoard directory; empty = out_dir/tensorboard"},
    {.path = "tensorboard.job_name", .type = KT_STRING, FLD(tb_job_name), .def_str = "",
     .help = "sub-directory of output_path for this run (DeepSpeed's job_name)"},
    {.path = "monitor.prometheus.port", .type = KT_INT, FLD(prom_port), .lo = 0, .hi = 65535, .def = {0},
     .help = "serve Prometheus /metrics on this port (0 = off; with several ranks rank 0 serves it)"},
    {.path = "monitor.prometheus.host", .type = KT_STRING, FLD(prom_host), .def_str = "127.0.0.1",
     .help = "address /metrics binds to"},
    {.path = "monitor.dashboard.port", .type = KT_INT, FLD(dash_port), .lo = 0, .hi = 65535, .def = {0},
     .help = "serve the live dashboard (GET /, /api/run) on this port, without /metrics (0 = off; the "
             "Prometheus port serves the dashboard too); when the port is taken a free one is chosen and the "
             "URL logged"},
    {.path = "monitor.dashboard.host", .type = KT_STRING, FLD(dash_host), .def_str = "127.0.0.1",
     .help = "address the dashboard binds to (loopback by default: the page shows the whole run)"},
    {.path = "monitor.report", .type = KT_BOOL, FLD(report_enabled), .def = {1},
     .help = "write out_dir/report.html (charts, checkpoints, evaluations, memory plan, hardware) at the end of "
             "the run; a report that cannot be written is a warning"},
    {.path = "monitor.required", .type = KT_BOOL, FLD(monitor_required), .def = {1},
     .help = "stop when a monitoring sink cannot start (false: warn and train on)"},
    {.path = "monitor.peak_gflops", .type = KT_FLOAT, FLD(peak_gflops), .lo = 0, .hi = INF, .def = {0},
     .help = "peak FLOP/s (in GFLOP/s) MFU is reported against; 0 = measure the FMA rate at start"},
    {.path = "monitor.alerts.nan.action", .type = KT_ENUM, FLD(alert_nan_action), .def_str = "stop",
     .choices = alert_choices,
     .help = "non-finite loss or gradient: stop (exit non-zero, no checkpoint), skip_step, or rollback (restore "
             "the last checkpoint, skip the batches since it, go on)"},
    {.path = "monitor.alerts.loss_spike.action", .type = KT_ENUM, FLD(alert_spike_action), .def_str = "log",
     .choices = alert_choices, .help = "loss z-score above the threshold: off, log, skip_step or rollback"},
    {.path = "monitor.alerts.loss_spike.zscore", .type = KT_FLOAT, FLD(alert_spike_zscore), .lo = 0, .hi = INF,
     .flags = KF_LO_OPEN, .def = {6}, .help = "z-score of the loss against the window that counts as a spike"},
    {.path = "monitor.alerts.loss_spike.window", .type = KT_INT, FLD(alert_spike_window), .lo = 2, .hi = 100000,
     .def = {50}, .help = "previous steps the z-score is computed over"},
    {.path = "monitor.alerts.max_rollbacks", .type = KT_INT, FLD(alert_max_rollbacks), .lo = 0, .hi = 1000000,
     .def = {3}, .help = "rollbacks a run may make (action rollback); the alert after the last stops the run with "
                         "the history of rollbacks"},
    {.path = "monitor.alerts.stall.seconds", .type = KT_FLOAT, FLD(alert_stall_seconds), .lo = 0, .hi = INF,
     .def = {0}, .help = "alert when no step finishes for this long (0 = off)"},
    {.path = "monitor.alerts.stall.action", .type = KT_ENUM, FLD(alert_stall_action), .def_str = "log",
     .choices = alert_choices, .help = "stall: log (event + metric) or exit (the process ends non-zero)"},
    /* data parallel: the communicator (include/llmforge/comm.h) */
    {.path = "comm.backend", .type = KT_CHOICE, FLD(comm_backend), .def_str = "auto", .choices = comm_choices,
     .help = "communicator: auto (several ranks: nccl for the cuda backend; else tcp under torchrun's variables, "
             "mpi under mpirun/srun; one rank: single), single, mpi, tcp (torchrun's rendezvous at "
             "MASTER_ADDR:MASTER_PORT, no MPI), nccl"},
    {.path = "comm.timeout_s", .type = KT_FLOAT, FLD(comm_timeout_s), .lo = 0, .hi = 1e6, .flags = KF_LO_OPEN,
     .def = {300}, .help = "bound on every collective: a dead or stuck rank ends the job after this long"},
    {.path = "comm.bucket_elems", .type = KT_LONG, FLD(comm_bucket_elems), .lo = 1, .hi = 1073741824,
     .def = {4194304}, .help = "gradient floats per all-reduce call (and the communicator's scratch bound; "
                               "DeepSpeed's reduce_bucket_size)"},
    {.path = "comm.overlap", .type = KT_BOOL, FLD(comm_overlap), .def = {1},
     .help = "on nccl: each unit's gradient sum started as its backward ends (stages 0-1: on the last "
             "micro-batch; ZeRO-2/3: reduce-scatter while the next unit's backward runs, a second block-unit "
             "gradient buffer; DeepSpeed's overlap_comm); the same sums either way"},
    {.path = "communication_data_type", .type = KT_ENUM, FLD(comm_bf16), .def_str = "fp32",
     .choices = comm_dtype_choices,
     .help = "the gradients' type on the wire (DeepSpeed's key): fp32, or bf16 (each rank's gradient rounded to "
             "bf16, summed in fp32 in rank order and rounded once on mpi/tcp/the NCCL shim, ncclBfloat16 on "
             "NCCL: half the bytes there); fp32 master weights and AdamW either way"},
    /* the model registry (include/llmforge/registry.h) */
    {.path = "registry.enabled", .type = KT_BOOL, FLD(registry_enabled), .def = {1},
     .help = "record the run, its checkpoints, their metrics and lineage in the model registry (rank 0); a "
             "registry that cannot be written is a warning, never a failure"},
    {.path = "registry.path", .type = KT_STRING, FLD(registry_path), .def_str = "",
     .help = "registry database file (empty = $LLMFORGE_REGISTRY, else ~/.local/share/llmforge/registry.db)"},
};
// clang-format on
const int lf__cfg_nkeys = (int)(sizeof lf__cfg_keys / sizeof lf__cfg_keys[0]);
_Static_assert(sizeof lf__cfg_keys / sizeof lf__cfg_keys[0] <= LF__CFG_KEYS_MAX, "raise LF__CFG_KEYS_MAX");

int lf__cfg_find_key(const char *path) {
    for (int i = 0; i < lf__cfg_nkeys; i++)
        if (!strcmp(lf__cfg_keys[i].path, path)) return i;
    return -1;
}

int lf__cfg_key_index(const char *path) {
    int i = lf__cfg_find_key(path);
    return i < 0 ? 0 : i; /* only called with table paths */
}

/* path names a section: some key is "path.<something>" */
int lf__cfg_is_section(const char *path) {
    size_t n = strlen(path);
    for (int i = 0; i < lf__cfg_nkeys; i++)
        if (!strncmp(lf__cfg_keys[i].path, path, n) && lf__cfg_keys[i].path[n] == '.') return 1;
    return 0;
}

int lf__cfg_ascii_ieq(const char *a, const char *b) {
    for (;; a++, b++) {
        int ca = (unsigned char)*a, cb = (unsigned char)*b;
        if (ca >= 'A' && ca <= 'Z') ca += 32;
        if (cb >= 'A' && cb <= 'Z') cb += 32;
        if (ca != cb) return 0;
        if (!ca) return 1;
    }
}

/* Every row's field size matches its type (a wrong FLD in the table is a bug). */
static int table_ok(void) {
    for (int i = 0; i < lf__cfg_nkeys; i++) {
        const key_def *k = &lf__cfg_keys[i];
        size_t want = 0;
        switch (k->type) {
        case KT_INT:
        case KT_BOOL:
        case KT_ENUM: want = sizeof(int); break;
        case KT_LONG: want = sizeof(long); break;
        case KT_FLOAT:
        case KT_PAIR: want = sizeof(float); break;
        case KT_U64: want = sizeof(uint64_t); break;
        default: want = k->size; break; /* strings: any capacity; off keys: no field */
        }
        if (k->size != want) return 0;
    }
    return 1;
}

/* ---------------------------------------------------------------- field access */

/* Shortest %.Ng (N <= 9) that reads back as v through (float)strtod, with a
 * ".0" on integral values so the dump reads as a float. */
void lf__cfg_fmt_float(char *buf, size_t cap, float v) {
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, cap, "%.*g", p, (double)v);
        if ((float)strtod(buf, NULL) == v) break;
    }
    if (!strpbrk(buf, ".eEni") && strlen(buf) + 3 <= cap) strcat(buf, ".0");
}

/* Integer bounds of a row: the table's, clipped to the C type. */
void lf__cfg_int_bounds(const key_def *k, long long *lo, long long *hi) {
    long long tlo = k->type == KT_LONG ? LONG_MIN : INT_MIN;
    long long thi = k->type == KT_LONG ? LONG_MAX : INT_MAX;
    *lo = k->lo <= (double)tlo ? tlo : (long long)k->lo;
    *hi = k->hi >= (double)thi ? thi : (long long)k->hi;
}

/* "[1, 1024]", "[0, 1)", "(0, inf)" */
void lf__cfg_fmt_range(char *buf, size_t cap, const key_def *k) {
    if (k->type == KT_U64) {
        snprintf(buf, cap, "[0, %" PRIu64 "]", UINT64_MAX);
    } else if (k->type == KT_INT || k->type == KT_LONG) {
        long long lo, hi;
        lf__cfg_int_bounds(k, &lo, &hi);
        snprintf(buf, cap, "[%lld, %lld]", lo, hi);
    } else {
        char hs[32];
        if (isinf(k->hi)) snprintf(hs, sizeof hs, "inf)");
        else snprintf(hs, sizeof hs, "%.9g%c", k->hi, (k->flags & KF_HI_OPEN) ? ')' : ']');
        snprintf(buf, cap, "%c%.9g, %s", (k->flags & KF_LO_OPEN) ? '(' : '[', k->lo, hs);
    }
}

int lf__cfg_float_in_range(const key_def *k, double v) {
    if (!(v >= k->lo) || ((k->flags & KF_LO_OPEN) && v == k->lo)) return 0;
    if (!(v <= k->hi) || ((k->flags & KF_HI_OPEN) && v == k->hi)) return 0;
    return 1;
}

/* ---------------------------------------------------------------- defaults, derivation, validation */

static void apply_defaults(parse_ctx *c) {
    memset(c, 0, sizeof *c);
    c->world = 1;
    lf_train_config *cfg = &c->cfg;
    cfg->world_size = 1;
    for (int i = 0; i < lf__cfg_nkeys; i++) {
        const key_def *k = &lf__cfg_keys[i];
        switch (k->type) {
        case KT_INT:
        case KT_BOOL: *(int *)field(cfg, k->off) = (int)k->def[0]; break;
        case KT_LONG: *(long *)field(cfg, k->off) = (long)k->def[0]; break;
        case KT_FLOAT: *(float *)field(cfg, k->off) = (float)k->def[0]; break;
        case KT_U64: *(uint64_t *)field(cfg, k->off) = (uint64_t)k->def[0]; break;
        case KT_STRING:
        case KT_STRLIST:
        case KT_CHOICE: snprintf((char *)field(cfg, k->off), k->size, "%s", def_str_of(k)); break;
        case KT_ENUM: {
            int j = 0;
            while (choices_of(k)[j] && strcmp(choices_of(k)[j], def_str_of(k))) j++;
            *(int *)field(cfg, k->off) = choices_of(k)[j] ? j : 0;
            break;
        }
        case KT_PAIR:
            *(float *)field(cfg, k->off) = (float)k->def[0];
            *(float *)field(cfg, k->off2) = (float)k->def[1];
            break;
        default: break;
        }
    }
}

/* Origin note for messages about a key other than the one reported. */
const char *lf__cfg_note_of(const parse_ctx *c, int i) { return c->where[i] ? c->where[i] : "by default"; }

/* The world size of the batch identity: given (>= 1), or the launcher's. */
static lf_status set_world(parse_ctx *c, int world) {
    if (world > 0) {
        c->world = world;
        return LF_OK;
    }
    if (world < 0) return lf_fail(LF_ERR_INVALID_ARG, "lf_train_config: world size %d is negative", world);
    lf_comm_env env;
    lf_status st = lf_comm_env_detect(&env, NULL, NULL);
    if (st != LF_OK) {
        lf_error_prefix("world size for the batch identity");
        return st;
    }
    c->world = env.size;
    if (env.launcher != LF_COMM_LAUNCHER_NONE)
        snprintf(c->world_note, sizeof c->world_note, " (from %s)", lf_comm_launcher_name(env.launcher));
    return LF_OK;
}

/* The report's copy of the problems and notes, and the status's message:
 * the one problem, or all of them in one line (as far as it holds). */
static lf_status finish_report(parse_ctx *c, lf_status st, lf_train_config_report *rep) {
    if (rep) {
        rep->n_errors = c->n_errors;
        rep->deepspeed_file = c->ds_file;
        snprintf(rep->errors, sizeof rep->errors, "%s", c->errors);
        snprintf(rep->notes, sizeof rep->notes, "%s", c->notes);
    }
    if (st == LF_OK || c->n_errors == 0) return st;
    if (c->n_errors == 1) { /* the one problem, as reported (later calls may have left other messages) */
        const char *e = strchr(c->errors, '\n');
        return lf_fail(c->first_st, "%.*s", e ? (int)(e - c->errors) : (int)strlen(c->errors), c->errors);
    }
    char msg[1024];
    size_t at = (size_t)snprintf(msg, sizeof msg, "%d problems in the configuration:", c->n_errors);
    int k = 1;
    for (const char *p = c->errors; *p && at < sizeof msg; k++) {
        const char *e = strchr(p, '\n');
        int n = e ? (int)(e - p) : (int)strlen(p);
        at += (size_t)snprintf(msg + at, sizeof msg - at, "%s (%d) %.*s", k > 1 ? ";" : "", k, n, p);
        p = e ? e + 1 : p + n;
    }
    return lf_fail(c->first_st ? c->first_st : st, "%s", msg);
}

/* Defaults, optional text, overrides, derivation, validation; *out written on success. */
static lf_status build(lf_train_config *out, const char *text, const char *name, int world, int n_overrides,
                       const char *const *overrides, lf_train_config_report *rep) {
    if (rep) memset(rep, 0, sizeof *rep);
    if (!out) return lf_fail(LF_ERR_INVALID_ARG, "lf_train_config: cfg is NULL");
    if (n_overrides < 0 || (n_overrides > 0 && !overrides))
        return lf_fail(LF_ERR_INVALID_ARG, "lf_train_config: %d overrides but no array", n_overrides);
    if (!table_ok()) return lf_fail(LF_ERR_INTERNAL, "configuration table: a field size does not match its type");
    parse_ctx *c = lf_alloc(sizeof *c); /* large: the errors and notes are kept whole */
    if (!c) return lf_fail(LF_ERR_NOMEM, "out of memory reading a configuration");
    apply_defaults(c);
    lf_status st = set_world(c, world);
    if (st == LF_OK && text) {
        snprintf(c->file_where, sizeof c->file_where, "in '%s'", name);
        c->cur = c->file_where;
        st = lf__cfg_apply_text(c, text, name);
    }
    for (int i = 0; st == LF_OK && i < n_overrides; i++)
        st = lf__cfg_keep_error(c, lf__cfg_apply_override(c, overrides[i]));
    if (st == LF_OK) {
        lf__cfg_derive_schedule(c);
        st = lf__cfg_derive_deepspeed(c);
    }
    if (st == LF_OK) st = lf__cfg_check_ranges(c);
    if (st == LF_OK && c->n_errors) st = c->first_st;
    if (st == LF_OK) st = lf__cfg_check_keys(c);
    if (st == LF_OK) lf__cfg_make_notes(c);
    if (st != LF_OK && !c->n_errors) lf__cfg_keep_error(c, st);
    st = finish_report(c, st, rep);
    if (st == LF_OK) *out = c->cfg;
    lf_free(c);
    return st;
}

/* ---------------------------------------------------------------- public API */

lf_train_config lf_train_config_default(void) {
    parse_ctx c;
    apply_defaults(&c);
    lf__cfg_derive_schedule(&c);
    (void)lf__cfg_derive_batch(&c); /* nothing given: T = micro x accum x world, cannot fail */
    return c.cfg;
}

lf_status lf_train_config_load_world(lf_train_config *cfg, const char *path, int world_size, int n_overrides,
                                     const char *const *overrides) {
    char *text = NULL;
    if (path) {
        lf_status st = lf_file_read_all(path, CFG_FILE_MAX, &text, NULL);
        if (st != LF_OK) return st;
    }
    lf_status st = build(cfg, text, path, world_size, n_overrides, overrides, NULL);
    lf_free(text);
    return st;
}

lf_status lf_train_config_load_report(lf_train_config *cfg, const char *path, int world_size, int n_overrides,
                                      const char *const *overrides, lf_train_config_report *rep) {
    char *text = NULL;
    if (rep) memset(rep, 0, sizeof *rep);
    if (path) {
        lf_status st = lf_file_read_all(path, CFG_FILE_MAX, &text, NULL);
        if (st != LF_OK) {
            if (rep) {
                rep->n_errors = 1;
                snprintf(rep->errors, sizeof rep->errors, "%s\n", lf_last_error());
            }
            return st;
        }
    }
    lf_status st = build(cfg, text, path, world_size, n_overrides, overrides, rep);
    lf_free(text);
    return st;
}

lf_status lf_train_config_parse_world(lf_train_config *cfg, const char *json_text, const char *origin, int world_size,
                                      int n_overrides, const char *const *overrides) {
    return build(cfg, json_text, origin ? origin : "<text>", world_size, n_overrides, overrides, NULL);
}

lf_status lf_train_config_load(lf_train_config *cfg, const char *path, int n_overrides, const char *const *overrides) {
    return lf_train_config_load_world(cfg, path, 0, n_overrides, overrides);
}

lf_status lf_train_config_parse(lf_train_config *cfg, const char *json_text, const char *origin, int n_overrides,
                                const char *const *overrides) {
    return lf_train_config_parse_world(cfg, json_text, origin, 0, n_overrides, overrides);
}
/* ---------------------------------------------------------------- key states */

lf_config_key_state lf_train_config_key_state(const char *path, const char **why) {
    const char *dummy;
    if (!why) why = &dummy;
    *why = NULL;
    if (!path) return LF_CONFIG_KEY_UNKNOWN;
    size_t n = strlen(path);
    int i = lf__cfg_find_key(path);
    if (i >= 0) {
        *why = lf__cfg_keys[i].help;
        return lf__cfg_keys[i].type == KT_IGNORED ? LF_CONFIG_KEY_IGNORED : LF_CONFIG_KEY_HONOURED;
    }
    const lf__ds_key *d = lf__ds_key_find(path);
    if (d) {
        *why = d->why;
        return d->state == LF__DS_IGNORED   ? LF_CONFIG_KEY_IGNORED
               : d->state == LF__DS_REFUSED ? LF_CONFIG_KEY_REFUSED
                                            : LF_CONFIG_KEY_ONLY;
    }
    if (n > 2 && !strcmp(path + n - 2, ".*")) { /* a section of table keys */
        char sec[PATH_BUF];
        snprintf(sec, sizeof sec, "%.*s", (int)(n - 2), path);
        if (lf__cfg_is_section(sec)) return LF_CONFIG_KEY_HONOURED;
    }
    return LF_CONFIG_KEY_UNKNOWN;
}
