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
 * values and ranges are collected (keep_error) and reported together; the
 * cross-key rules run once those pass.
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
#include "train_impl.h"

#define CFG_FILE_MAX (16u << 20) /* configuration files larger than this are refused */
#define PATH_BUF 256             /* longest dotted key path handled (longer ones are unknown) */

_Static_assert(LF_SCHED_COSINE == 0 && LF_SCHED_CONSTANT == 1 && LF_SCHED_WARMUP_LR == 2 &&
                   LF_SCHED_WARMUP_DECAY_LR == 3 && LF_SCHED_WARMUP_COSINE_LR == 4 && LF_SCHED_ONE_CYCLE == 5 &&
                   LF_SCHED_LR_RANGE_TEST == 6,
               "sched_choices order");
_Static_assert(LF_SAMPLING_RANDOM == 0 && LF_SAMPLING_SEQUENTIAL == 1 && LF_SAMPLING_RECORDS == 2 &&
                   LF_SAMPLING_PACKED == 3,
               "sampling_choices order");

/* ---------------------------------------------------------------- the table */

typedef enum key_type {
    KT_INT,     /* int field */
    KT_LONG,    /* long field */
    KT_FLOAT,   /* float field */
    KT_BOOL,    /* int field, 0/1, from true/false */
    KT_U64,     /* uint64_t field, from an integer literal only */
    KT_STRING,  /* char[cap] */
    KT_STRLIST, /* char[cap]: strings joined by '\n', from an array of strings (or one string) */
    KT_CHOICE,  /* char[cap]: one of choices (case-insensitive), stored as spelled in the table */
    KT_ENUM,    /* int field: index into choices (case-insensitive) */
    KT_PAIR,    /* two float fields (off, off2) from a 2-element array */
    KT_IGNORED, /* a DeepSpeed key that tunes its own machinery and changes no result: any value, ignored */
} key_type;

enum {
    KF_LO_OPEN = 1,    /* lower bound excluded */
    KF_HI_OPEN = 2,    /* upper bound excluded */
    KF_REQUIRED = 4,   /* string must be non-empty */
    KF_DERIVED = 8,    /* default computed from other keys (def_str says how) */
    KF_FULL_PATH = 16, /* an override names it by its full path only (lora.bias, lora.dropout: not model's) */
};

typedef struct key_def {
    const char *path;
    key_type type;
    size_t off, size; /* field offset and size (size: capacity for strings) */
    size_t off2;      /* KT_PAIR: second field */
    double lo, hi;    /* bounds of numbers (HUGE_VAL: none) */
    unsigned flags;
    double def[2];                          /* default of numbers and bools */
    const char *def_str;                    /* default of strings/choices; rule of derived keys */
    const char *const *choices;             /* NULL-terminated */
    const char *const *(*choices_fn)(void); /* instead of choices: a list owned elsewhere (model.arch's) */
    const char *alias;                      /* nanoGPT name accepted as a bare override */
    const char *help;
} key_def;

#define FLD(f) .off = offsetof(lf_train_config, f), .size = sizeof(((lf_train_config *)0)->f)
#define INF HUGE_VAL

/* A key's choices, and the default of a string or choice key (NULL def_str:
 * the first choice). */
static const char *const *choices_of(const key_def *k) { return k->choices_fn ? k->choices_fn() : k->choices; }
static const char *def_str_of(const key_def *k) { return k->def_str ? k->def_str : choices_of(k)[0]; }

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
static const key_def k_keys[] = {
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
             "llmforge has no windowed attention yet: model.block_size may not exceed it"},
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
#define NKEYS ((int)(sizeof k_keys / sizeof k_keys[0]))

static int is_setting(const key_def *k) { return k->type != KT_IGNORED; }

static const char *leaf_of(const char *path) {
    const char *dot = strrchr(path, '.');
    return dot ? dot + 1 : path;
}

static int find_key(const char *path) {
    for (int i = 0; i < NKEYS; i++)
        if (!strcmp(k_keys[i].path, path)) return i;
    return -1;
}

static int key_index(const char *path) {
    int i = find_key(path);
    return i < 0 ? 0 : i; /* only called with table paths */
}

/* path names a section: some key is "path.<something>" */
static int is_section(const char *path) {
    size_t n = strlen(path);
    for (int i = 0; i < NKEYS; i++)
        if (!strncmp(k_keys[i].path, path, n) && k_keys[i].path[n] == '.') return 1;
    return 0;
}

static int ascii_ieq(const char *a, const char *b) {
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
    for (int i = 0; i < NKEYS; i++) {
        const key_def *k = &k_keys[i];
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

static void *field(lf_train_config *cfg, size_t off) { return (char *)cfg + off; }
static const void *cfield(const lf_train_config *cfg, size_t off) { return (const char *)cfg + off; }

static long long get_integer(const lf_train_config *cfg, const key_def *k) {
    if (k->type == KT_LONG) return *(const long *)cfield(cfg, k->off);
    return *(const int *)cfield(cfg, k->off);
}

static float get_float(const lf_train_config *cfg, size_t off) { return *(const float *)cfield(cfg, off); }

/* Shortest %.Ng (N <= 9) that reads back as v through (float)strtod, with a
 * ".0" on integral values so the dump reads as a float. */
static void fmt_float(char *buf, size_t cap, float v) {
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, cap, "%.*g", p, (double)v);
        if ((float)strtod(buf, NULL) == v) break;
    }
    if (!strpbrk(buf, ".eEni") && strlen(buf) + 3 <= cap) strcat(buf, ".0");
}

/* Integer bounds of a row: the table's, clipped to the C type. */
static void int_bounds(const key_def *k, long long *lo, long long *hi) {
    long long tlo = k->type == KT_LONG ? LONG_MIN : INT_MIN;
    long long thi = k->type == KT_LONG ? LONG_MAX : INT_MAX;
    *lo = k->lo <= (double)tlo ? tlo : (long long)k->lo;
    *hi = k->hi >= (double)thi ? thi : (long long)k->hi;
}

/* "[1, 1024]", "[0, 1)", "(0, inf)" */
static void fmt_range(char *buf, size_t cap, const key_def *k) {
    if (k->type == KT_U64) {
        snprintf(buf, cap, "[0, %" PRIu64 "]", UINT64_MAX);
    } else if (k->type == KT_INT || k->type == KT_LONG) {
        long long lo, hi;
        int_bounds(k, &lo, &hi);
        snprintf(buf, cap, "[%lld, %lld]", lo, hi);
    } else {
        char hs[32];
        if (isinf(k->hi)) snprintf(hs, sizeof hs, "inf)");
        else snprintf(hs, sizeof hs, "%.9g%c", k->hi, (k->flags & KF_HI_OPEN) ? ')' : ']');
        snprintf(buf, cap, "%c%.9g, %s", (k->flags & KF_LO_OPEN) ? '(' : '[', k->lo, hs);
    }
}

static int float_in_range(const key_def *k, double v) {
    if (!(v >= k->lo) || ((k->flags & KF_LO_OPEN) && v == k->lo)) return 0;
    if (!(v <= k->hi) || ((k->flags & KF_HI_OPEN) && v == k->hi)) return 0;
    return 1;
}

/* ---------------------------------------------------------------- parse context */

/* Source text of one JSON number (cJSON keeps only a double). */
typedef struct numraw {
    const cJSON *node;
    const char *s;
    size_t n;
} numraw;

typedef struct parse_ctx {
    lf_train_config cfg;
    unsigned char given[NKEYS]; /* set by the file or an override */
    const char *where[NKEYS];   /* where it was set: "in 'x.json'", "on the command line" */
    const char *cur;            /* where the value being applied comes from */
    int from_cli;               /* the value is an override */
    const char *cli_text;       /* the override's value text, verbatim */
    numraw *nums;               /* number literals of the text being applied */
    size_t n_nums;
    char file_where[LF_PATH_MAX + 32];
    int world;           /* world size of the batch identity */
    char world_note[48]; /* where it came from, for messages: " (openmpi)" or "" */
    /* every problem is collected (config_report), not only the first */
    int n_errors;
    lf_status first_st;
    char errors[8192];
    char notes[8192]; /* the run header's lines (lf_train_config_report.notes) */
    /* DeepSpeed files (config_deepspeed.c) */
    int ds_file;                    /* the file is one: DeepSpeed's and torch's defaults */
    unsigned char is_auto[NKEYS];   /* "auto" given: resolved as HF Trainer does */
    char auto_ignored[8][PATH_BUF]; /* ignored keys given "auto" (their notes need the model) */
    int n_auto_ignored;
} parse_ctx;

/* Append one line to a bounded buffer; a line that does not fit is dropped
 * whole (and "..." ends the buffer). */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static void
add_line(char *buf, size_t cap, const char *fmt, ...) {
    char line[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    size_t at = strlen(buf), n = strlen(line);
    if (at + n + 2 <= cap) {
        memcpy(buf + at, line, n);
        buf[at + n] = '\n';
        buf[at + n + 1] = 0;
    } else if (at + 5 <= cap && (at < 4 || strcmp(buf + at - 4, "...\n"))) {
        memcpy(buf + at, "...\n", 5);
    }
}

/* Keep the problem just reported (lf_last_error) and go on. Out of memory
 * and internal errors end the load at once (returned). */
static lf_status keep_error(parse_ctx *c, lf_status st) {
    if (st == LF_OK) return LF_OK;
    if (st == LF_ERR_NOMEM || st == LF_ERR_INTERNAL || st == LF_ERR_INVALID_ARG) return st;
    if (!c->n_errors++) c->first_st = st;
    add_line(c->errors, sizeof c->errors, "%s", lf_last_error());
    return LF_OK;
}

static const char *const k_cli = "on the command line";

static cJSON *value_json(const lf_train_config *cfg, const key_def *k);

/* Number literals outside strings, in document order: the same order a
 * depth-first walk of cJSON's tree meets number nodes. out may be NULL (count). */
static size_t scan_numbers(const char *s, numraw *out) {
    size_t n = 0;
    int in_str = 0;
    for (const char *p = s; *p; p++) {
        if (in_str) {
            if (*p == '\\' && p[1]) p++;
            else if (*p == '"') in_str = 0;
            continue;
        }
        if (*p == '"') {
            in_str = 1;
        } else if (*p == '-' || (*p >= '0' && *p <= '9')) {
            const char *q = p;
            while (*q && strchr("0123456789+-.eE", *q)) q++;
            if (out) {
                out[n].node = NULL;
                out[n].s = p;
                out[n].n = (size_t)(q - p);
            }
            n++;
            p = q - 1;
        }
    }
    return n;
}

static void bind_numbers(const cJSON *v, numraw *nums, size_t n, size_t *next) {
    for (; v; v = v->next) {
        if (cJSON_IsNumber(v)) {
            if (*next < n) nums[*next].node = v;
            (*next)++;
        } else if (v->child) {
            bind_numbers(v->child, nums, n, next);
        }
    }
}

/* Index the number literals of text (parsed into root) for number_text. On a
 * count mismatch (never for text cJSON accepted) the index is dropped and
 * numbers fall back to cJSON's double. */
static lf_status index_numbers(const char *text, const cJSON *root, numraw **out, size_t *n_out) {
    *out = NULL;
    *n_out = 0;
    size_t n = scan_numbers(text, NULL);
    if (n == 0) return LF_OK;
    numraw *nums = lf_alloc(n * sizeof *nums);
    if (!nums) return lf_fail(LF_ERR_NOMEM, "out of memory indexing %zu numbers of a configuration", n);
    scan_numbers(text, nums);
    size_t next = 0;
    bind_numbers(root, nums, n, &next);
    if (next != n) {
        lf_free(nums);
        return LF_OK;
    }
    *out = nums;
    *n_out = n;
    return LF_OK;
}

/* The literal text of number node v into buf; 0 when it does not fit. */
static int number_text(const parse_ctx *c, const cJSON *v, char *buf, size_t cap) {
    for (size_t i = 0; i < c->n_nums; i++) {
        if (c->nums[i].node == v) {
            if (c->nums[i].n + 1 > cap) return 0;
            memcpy(buf, c->nums[i].s, c->nums[i].n);
            buf[c->nums[i].n] = 0;
            return 1;
        }
    }
    snprintf(buf, cap, "%.17g", v->valuedouble);
    return 1;
}

/* Short rendering of a value for messages: "abc" with quotes, numbers as written. */
static const char *describe(const parse_ctx *c, const cJSON *v, char *buf, size_t cap) {
    if (cJSON_IsString(v)) {
        size_t n = strlen(v->valuestring);
        snprintf(buf, cap, "\"%.60s%s\"", v->valuestring, n > 60 ? "..." : "");
    } else if (cJSON_IsNumber(v)) {
        if (!number_text(c, v, buf, cap)) snprintf(buf, cap, "a very long number");
    } else if (cJSON_IsTrue(v)) {
        snprintf(buf, cap, "true");
    } else if (cJSON_IsFalse(v)) {
        snprintf(buf, cap, "false");
    } else if (cJSON_IsNull(v)) {
        snprintf(buf, cap, "null");
    } else {
        char *s = cJSON_PrintUnformatted(v);
        if (s) {
            snprintf(buf, cap, "%.60s%s", s, strlen(s) > 60 ? "..." : "");
            cJSON_free(s);
        } else {
            snprintf(buf, cap, cJSON_IsArray(v) ? "an array" : "an object");
        }
    }
    return buf;
}

static lf_status type_error(const parse_ctx *c, const key_def *k, const cJSON *v, const char *expected) {
    char got[96];
    if (cJSON_IsString(v) && !strcmp(v->valuestring, "auto") && !c->from_cli)
        return lf_fail(LF_ERR_CONFIG,
                       "key '%s' %s: \"auto\" is resolved only for the keys HF Trainer fills (docs/deepspeed.md); "
                       "write %s",
                       k->path, c->cur, expected);
    return lf_fail(LF_ERR_CONFIG, "key '%s' %s: expected %s, got %s", k->path, c->cur, expected,
                   describe(c, v, got, sizeof got));
}

static lf_status range_error_text(const key_def *k, const char *where, const char *value) {
    char range[80];
    fmt_range(range, sizeof range, k);
    return lf_fail(LF_ERR_CONFIG, "key '%s' %s: %s is out of range %s", k->path, where, value, range);
}

/* ---------------------------------------------------------------- reading values */

static lf_status read_integer(const parse_ctx *c, const key_def *k, const cJSON *v, long long *out) {
    char num[128];
    if (!cJSON_IsNumber(v)) return type_error(c, k, v, "an integer");
    if (!number_text(c, v, num, sizeof num)) return range_error_text(k, c->cur, "a very long number");
    long long x;
    char *end;
    if (!strpbrk(num, ".eE")) {
        errno = 0;
        x = strtoll(num, &end, 10);
        if (errno == ERANGE || *end) return range_error_text(k, c->cur, num);
    } else {
        double d = strtod(num, &end);
        if (!isfinite(d)) return range_error_text(k, c->cur, num);
        if (d != floor(d)) return type_error(c, k, v, "an integer");
        if (d < -9.2e18 || d > 9.2e18) return range_error_text(k, c->cur, num);
        x = (long long)d;
    }
    long long tlo = k->type == KT_LONG ? LONG_MIN : INT_MIN, thi = k->type == KT_LONG ? LONG_MAX : INT_MAX;
    if (x < tlo || x > thi) return range_error_text(k, c->cur, num);
    *out = x;
    return LF_OK;
}

static lf_status read_float(const parse_ctx *c, const key_def *k, const cJSON *v, float *out) {
    char num[128];
    if (!cJSON_IsNumber(v)) return type_error(c, k, v, k->type == KT_PAIR ? "an array of 2 numbers" : "a number");
    if (!number_text(c, v, num, sizeof num)) return range_error_text(k, c->cur, "a very long number");
    double d = strtod(num, NULL);
    if (!isfinite(d) || fabs(d) > FLT_MAX) return range_error_text(k, c->cur, num);
    *out = (float)d;
    return LF_OK;
}

static lf_status read_u64(const parse_ctx *c, const key_def *k, const cJSON *v, uint64_t *out) {
    char num[128];
    if (!cJSON_IsNumber(v)) return type_error(c, k, v, "an unsigned 64-bit integer");
    if (!number_text(c, v, num, sizeof num)) return range_error_text(k, c->cur, "a very long number");
    if (num[0] == '-') return range_error_text(k, c->cur, num);
    if (strpbrk(num, ".eE+"))
        return type_error(c, k, v, "an unsigned 64-bit integer written without a fraction or exponent");
    errno = 0;
    char *end;
    unsigned long long x = strtoull(num, &end, 10);
    if (errno == ERANGE || *end || x > UINT64_MAX) return range_error_text(k, c->cur, num);
    *out = (uint64_t)x;
    return LF_OK;
}

/* The string value of v; on the command line anything that is not a JSON
 * string is taken verbatim (out_dir=2024 is the directory "2024"). */
static const char *string_value(const parse_ctx *c, const cJSON *v) {
    if (cJSON_IsString(v)) return v->valuestring;
    if (c->from_cli && c->cli_text) return c->cli_text;
    return NULL;
}

static lf_status choice_error(const parse_ctx *c, const key_def *k, const char *s) {
    char list[160] = "";
    size_t at = 0;
    for (int j = 0; choices_of(k)[j]; j++)
        at += (size_t)snprintf(list + at, at < sizeof list ? sizeof list - at : 0, "%s%s", j ? ", " : "",
                               choices_of(k)[j]);
    return lf_fail(LF_ERR_CONFIG, "key '%s' %s: \"%.60s\" is not one of: %s", k->path, c->cur, s, list);
}

/* Apply value v to table row i. */
static lf_status set_key(parse_ctx *c, int i, const cJSON *v) {
    const key_def *k = &k_keys[i];
    lf_train_config *cfg = &c->cfg;
    lf_status st = LF_OK;
    switch (k->type) {
    case KT_INT:
    case KT_LONG: {
        long long x = 0;
        if ((st = read_integer(c, k, v, &x)) != LF_OK) return st;
        if (k->type == KT_INT) *(int *)field(cfg, k->off) = (int)x;
        else *(long *)field(cfg, k->off) = (long)x;
        break;
    }
    case KT_FLOAT:
        if ((st = read_float(c, k, v, (float *)field(cfg, k->off))) != LF_OK) return st;
        break;
    case KT_BOOL: {
        int b;
        if (cJSON_IsBool(v)) b = cJSON_IsTrue(v);
        else if (c->from_cli && cJSON_IsString(v) && ascii_ieq(v->valuestring, "true")) b = 1;
        else if (c->from_cli && cJSON_IsString(v) && ascii_ieq(v->valuestring, "false")) b = 0;
        else return type_error(c, k, v, "true or false");
        *(int *)field(cfg, k->off) = b;
        break;
    }
    case KT_U64:
        if ((st = read_u64(c, k, v, (uint64_t *)field(cfg, k->off))) != LF_OK) return st;
        break;
    case KT_STRING: {
        const char *s = string_value(c, v);
        if (!s) return type_error(c, k, v, "a string");
        size_t n = strlen(s);
        if (n >= k->size)
            return lf_fail(LF_ERR_CONFIG, "key '%s' %s: a string of %zu bytes is longer than the %zu allowed", k->path,
                           c->cur, n, k->size - 1);
        memcpy(field(cfg, k->off), s, n + 1);
        break;
    }
    case KT_STRLIST: {
        /* an array of strings, or one string; on the command line a
         * comma-separated list */
        char buf[8192];
        size_t at = 0;
        const cJSON *it = cJSON_IsArray(v) ? v->child : v;
        if (!cJSON_IsArray(v) && !string_value(c, v)) return type_error(c, k, v, "an array of strings");
        for (; it; it = cJSON_IsArray(v) ? it->next : NULL) {
            const char *s = cJSON_IsArray(v) ? (cJSON_IsString(it) ? it->valuestring : NULL) : string_value(c, it);
            if (!s) return type_error(c, k, v, "an array of strings");
            for (const char *p = s; *p;) {
                const char *e = (!cJSON_IsArray(v) && c->from_cli) ? strchr(p, ',') : NULL;
                size_t n = e ? (size_t)(e - p) : strlen(p);
                if (n == 0 || memchr(p, '\n', n))
                    return lf_fail(LF_ERR_CONFIG, "key '%s' %s: an element is empty or holds a newline", k->path,
                                   c->cur);
                if (at + n + 2 > sizeof buf || at + n + 1 >= k->size)
                    return lf_fail(LF_ERR_CONFIG, "key '%s' %s: the list is longer than the %zu bytes allowed", k->path,
                                   c->cur, k->size - 1);
                if (at) buf[at++] = '\n';
                memcpy(buf + at, p, n);
                at += n;
                p += n + (e ? 1 : 0);
                if (!e) break;
            }
        }
        buf[at] = 0;
        memcpy(field(cfg, k->off), buf, at + 1);
        break;
    }
    case KT_CHOICE:
    case KT_ENUM: {
        if (!cJSON_IsString(v)) return type_error(c, k, v, "a string");
        int j = 0;
        while (choices_of(k)[j] && !ascii_ieq(choices_of(k)[j], v->valuestring)) j++;
        if (!choices_of(k)[j]) return choice_error(c, k, v->valuestring);
        if (k->type == KT_ENUM) *(int *)field(cfg, k->off) = j;
        else snprintf((char *)field(cfg, k->off), k->size, "%s", choices_of(k)[j]);
        break;
    }
    case KT_PAIR: {
        if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2) return type_error(c, k, v, "an array of 2 numbers");
        float a, b;
        if ((st = read_float(c, k, v->child, &a)) != LF_OK) return st;
        if ((st = read_float(c, k, v->child->next, &b)) != LF_OK) return st;
        *(float *)field(cfg, k->off) = a;
        *(float *)field(cfg, k->off2) = b;
        break;
    }
    case KT_IGNORED: break;
    }
    c->given[i] = 1;
    c->where[i] = c->cur;
    return LF_OK;
}

/* ---------------------------------------------------------------- unknown keys */

static int edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63) return 99;
    int prev[64], cur[64];
    for (size_t j = 0; j <= lb; j++) prev[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int best = prev[j] + 1;
            if (cur[j - 1] + 1 < best) best = cur[j - 1] + 1;
            if (prev[j - 1] + (a[i - 1] != b[j - 1]) < best) best = prev[j - 1] + (a[i - 1] != b[j - 1]);
            cur[j] = best;
        }
        memcpy(prev, cur, (lb + 1) * sizeof(int));
    }
    return prev[lb];
}

/* The known key closest to path: edit distance <= 2 (against the full path,
 * and against leaves and aliases for a bare name), else one sharing the leaf. */
static const char *suggest(const char *path) {
    int best = -1, bestd = 3, bare = strchr(path, '.') == NULL;
    for (int i = 0; i < NKEYS; i++) {
        int d = edit_distance(path, k_keys[i].path);
        if (bare) {
            int dl = edit_distance(path, leaf_of(k_keys[i].path));
            if (dl < d) d = dl;
            if (k_keys[i].alias && (dl = edit_distance(path, k_keys[i].alias)) < d) d = dl;
        }
        if (d < bestd) bestd = d, best = i;
    }
    if (best >= 0) return k_keys[best].path;
    const char *leaf = leaf_of(path);
    for (int i = 0; i < NKEYS; i++)
        if (!strcmp(leaf, leaf_of(k_keys[i].path)) || (k_keys[i].alias && !strcmp(leaf, k_keys[i].alias)))
            return k_keys[i].path;
    return NULL;
}

static lf_status unknown_key(const parse_ctx *c, const char *path) {
    const char *s = suggest(path);
    if (s) return lf_fail(LF_ERR_CONFIG, "unknown key '%s' %s (did you mean '%s'?)", path, c->cur, s);
    return lf_fail(LF_ERR_CONFIG, "unknown key '%s' %s", path, c->cur);
}

/* ---------------------------------------------------------------- walking JSON */

static lf_status apply(parse_ctx *c, const char *path, const cJSON *v);

static lf_status apply_object(parse_ctx *c, const char *prefix, const cJSON *obj) {
    for (const cJSON *m = obj->child; m; m = m->next) {
        char path[PATH_BUF];
        int n = snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", m->string ? m->string : "");
        if (n < 0 || (size_t)n >= sizeof path) return unknown_key(c, path);
        int dup = 0;
        for (const cJSON *p = obj->child; p != m && !dup; p = p->next)
            dup = p->string && m->string && !strcmp(p->string, m->string);
        lf_status st = dup ? lf_fail(LF_ERR_CONFIG, "duplicate key '%s' %s", path, c->cur) : apply(c, path, m);
        if ((st = keep_error(c, st)) != LF_OK) return st;
    }
    return LF_OK;
}

static int is_auto_value(const cJSON *v) { return cJSON_IsString(v) && !strcmp(v->valuestring, "auto"); }

/* A DeepSpeed key without a table row: ignored with a notice, refused, or
 * accepted only with llmforge's value. */
static lf_status apply_ds(parse_ctx *c, const char *path, const lf__ds_key *d, const cJSON *v) {
    char got[96];
    const char *bad = lf__ds_value_refused(d->path, v);
    if (bad) return lf_fail(LF_ERR_CONFIG, "key '%s' %s: %s: %s", path, c->cur, describe(c, v, got, sizeof got), bad);
    switch (d->state) {
    case LF__DS_REFUSED: return lf_fail(LF_ERR_CONFIG, "key '%s' %s is refused: %s", path, c->cur, d->why);
    case LF__DS_ONLY:
        if (!lf__ds_value_is(v, d->ok))
            return lf_fail(LF_ERR_CONFIG, "key '%s' %s: %s: %s (only %s is accepted)", path, c->cur,
                           describe(c, v, got, sizeof got), d->why, d->ok);
        return LF_OK;
    default:
        if (is_auto_value(v) && lf__ds_auto_rule(path) && c->n_auto_ignored < 8) {
            snprintf(c->auto_ignored[c->n_auto_ignored++], PATH_BUF, "%s", path);
            return LF_OK; /* its note, with the value, comes once the model is known */
        }
        add_line(c->notes, sizeof c->notes, "ignored: %s (%s)", path, d->why);
        return LF_OK;
    }
}

/* "auto" on a table key: HF Trainer's keys take llmforge's value (the
 * override, else the default); any other key refuses it. */
static lf_status apply_auto(parse_ctx *c, int i) {
    c->is_auto[i] = 1;
    return LF_OK;
}

static lf_status apply(parse_ctx *c, const char *path, const cJSON *v) {
    int i = find_key(path);
    if (i >= 0) {
        const char *bad = lf__ds_value_refused(path, v);
        char got[96];
        if (bad)
            return lf_fail(LF_ERR_CONFIG, "key '%s' %s: %s: %s", path, c->cur, describe(c, v, got, sizeof got), bad);
        if (is_auto_value(v) && !c->from_cli && lf__ds_auto_rule(path)) return apply_auto(c, i);
        return set_key(c, i, v);
    }
    const lf__ds_key *d = lf__ds_key_find(path);
    if (d && !is_section(path)) return apply_ds(c, path, d, v);
    if (is_section(path) || lf__ds_is_section(path)) {
        if (!cJSON_IsObject(v)) {
            char got[96];
            return lf_fail(LF_ERR_CONFIG, "key '%s' %s: expected an object (a section), got %s", path, c->cur,
                           describe(c, v, got, sizeof got));
        }
        return apply_object(c, path, v);
    }
    return unknown_key(c, path);
}

/* Resolve an override's key: a table path or section, else a bare leaf or a
 * nanoGPT alias naming exactly one key. */
static lf_status resolve_override_key(const parse_ctx *c, const char *key, const char **path) {
    *path = key;
    if (find_key(key) >= 0 || is_section(key) || strchr(key, '.')) return LF_OK;
    int found = -1, count = 0;
    char list[512] = "";
    size_t at = 0;
    for (int i = 0; i < NKEYS; i++) {
        if (k_keys[i].flags & KF_FULL_PATH) continue;
        if (strcmp(leaf_of(k_keys[i].path), key) && !(k_keys[i].alias && !strcmp(k_keys[i].alias, key))) continue;
        found = i;
        count++;
        at += (size_t)snprintf(list + at, at < sizeof list ? sizeof list - at : 0, "%s%s", count > 1 ? ", " : "",
                               k_keys[i].path);
    }
    if (count == 1) {
        *path = k_keys[found].path;
        return LF_OK;
    }
    if (count > 1)
        return lf_fail(LF_ERR_CONFIG, "ambiguous key '%s' %s: it names %s; write the full path", key, c->cur, list);
    return LF_OK; /* unknown: apply() reports it with a suggestion */
}

static lf_status apply_override(parse_ctx *c, const char *ov) {
    if (!ov) return lf_fail(LF_ERR_INVALID_ARG, "override is NULL");
    if (ov[0] == '-' && ov[1] == '-') ov += 2;
    const char *eq = strchr(ov, '=');
    if (!eq || eq == ov) return lf_fail(LF_ERR_CONFIG, "override '%.200s' %s: expected key=value", ov, k_cli);
    char key[PATH_BUF];
    size_t kn = (size_t)(eq - ov);
    if (kn >= sizeof key) kn = sizeof key - 1;
    memcpy(key, ov, kn);
    key[kn] = 0;
    c->cur = k_cli;
    const char *path;
    lf_status st = resolve_override_key(c, key, &path);
    if (st != LF_OK) return st;

    const char *val = eq + 1, *end = NULL;
    cJSON *v = cJSON_ParseWithOpts(val, &end, 1);
    numraw *nums = NULL;
    size_t n_nums = 0;
    if (v) {
        st = index_numbers(val, v, &nums, &n_nums);
    } else {
        v = cJSON_CreateString(val); /* not JSON: the text itself */
        if (!v) st = lf_fail(LF_ERR_NOMEM, "out of memory reading override '%s'", key);
    }
    if (st == LF_OK) {
        c->nums = nums;
        c->n_nums = n_nums;
        c->from_cli = 1;
        c->cli_text = val;
        st = apply(c, path, v);
        c->nums = NULL;
        c->n_nums = 0;
        c->from_cli = 0;
        c->cli_text = NULL;
    }
    lf_free(nums);
    cJSON_Delete(v);
    return st;
}

/* Parse a configuration text (cJSON) and apply it; malformed JSON names the
 * origin with line and column. */
static lf_status apply_text(parse_ctx *c, const char *text, const char *name) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    if (!root) {
        long line = 1, col = 1;
        if (end) {
            for (const char *p = text; p < end && *p; p++) {
                if (*p == '\n') line++, col = 1;
                else col++;
            }
        }
        return lf_fail(LF_ERR_FORMAT, "config '%s': invalid JSON near line %ld, column %ld", name, line, col);
    }
    lf_status st;
    if (!cJSON_IsObject(root)) {
        st = lf_fail(LF_ERR_CONFIG, "config '%s': expected a JSON object at the top level", name);
        cJSON_Delete(root);
        return st;
    }
    if (lf__ds_is_deepspeed_file(root)) {
        /* DeepSpeed's and torch's defaults where the file leaves a key out
         * (the ones llmforge's own defaults differ from) */
        c->ds_file = 1;
        c->cfg.beta1 = 0.9f;
        c->cfg.beta2 = 0.999f;
        c->cfg.eps = 1e-8f;
        c->cfg.weight_decay = 0.01f;
        c->cfg.sched_type = LF_SCHED_CONSTANT;
        c->cfg.grad_clip = 0.0f;
    }
    st = index_numbers(text, root, &c->nums, &c->n_nums);
    if (st == LF_OK) st = apply_object(c, "", root);
    lf_free(c->nums);
    c->nums = NULL;
    c->n_nums = 0;
    cJSON_Delete(root);
    return st;
}

/* ---------------------------------------------------------------- defaults, derivation, validation */

static void apply_defaults(parse_ctx *c) {
    memset(c, 0, sizeof *c);
    c->world = 1;
    lf_train_config *cfg = &c->cfg;
    cfg->world_size = 1;
    for (int i = 0; i < NKEYS; i++) {
        const key_def *k = &k_keys[i];
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
static const char *note_of(const parse_ctx *c, int i) { return c->where[i] ? c->where[i] : "by default"; }

/* model.arch into the model config, the architecture's rules on the keys
 * set by hand (lf_model_config_given: defaults of keys left out, values it
 * refuses), then its own checks (lf_model_config_validate, with the
 * vocabulary still unknown: checked with a placeholder of 1 when 0). */
static lf_status resolve_model(parse_ctx *c) {
    lf_model_config *m = &c->cfg.model;
    static const struct {
        const char *key;
        unsigned bit;
    } given[] = {{"model.arch", LF_MODEL_GIVEN_ARCH},
                 {"model.n_layer", LF_MODEL_GIVEN_N_LAYER},
                 {"model.n_head", LF_MODEL_GIVEN_N_HEAD},
                 {"model.n_kv_head", LF_MODEL_GIVEN_N_KV_HEAD},
                 {"model.n_embd", LF_MODEL_GIVEN_N_EMBD},
                 {"model.ffn_hidden", LF_MODEL_GIVEN_FFN_HIDDEN},
                 {"model.block_size", LF_MODEL_GIVEN_BLOCK_SIZE},
                 {"model.vocab_size", LF_MODEL_GIVEN_VOCAB_SIZE},
                 {"model.norm_eps", LF_MODEL_GIVEN_NORM_EPS},
                 {"model.rope_theta", LF_MODEL_GIVEN_ROPE_THETA},
                 {"model.tie_embeddings", LF_MODEL_GIVEN_TIE},
                 {"model.bias", LF_MODEL_GIVEN_BIAS},
                 {"model.sliding_window", LF_MODEL_GIVEN_SLIDING_WINDOW}};
    c->cfg.model_given = 0;
    for (size_t i = 0; i < sizeof given / sizeof given[0]; i++)
        if (c->given[key_index(given[i].key)]) c->cfg.model_given |= given[i].bit;
    lf_status st = lf_arch_parse(c->cfg.arch, &m->arch);
    if (st != LF_OK) return st;
    const char *key = NULL, *why = lf_model_config_given(m, c->cfg.model_given, &key);
    if (why) return lf_fail(LF_ERR_CONFIG, "key '%s' %s: %s", key, note_of(c, key_index(key)), why);
    lf_model_config v = *m;
    if (v.vocab_size == 0) v.vocab_size = 1;
    return lf_model_config_validate(&v);
}

/* scheduler.decay_iters and scheduler.min_lr when not given. */
static void derive_schedule(parse_ctx *c) {
    if (!c->given[key_index("scheduler.decay_iters")]) c->cfg.decay_iters = c->cfg.train_iters;
    if (!c->given[key_index("scheduler.min_lr")]) c->cfg.min_lr = (float)((double)c->cfg.lr / 10.0);
}

/* DeepSpeed's schedulers: "auto" by HF Trainer's rules, the parameters
 * DeepSpeed fills from others (WarmupLR's warmup_max_lr is the optimizer's
 * lr; the second half of OneCycle copies the first), the ones it requires,
 * and parameters that are not the chosen scheduler's. Problems are kept. */
static lf_status derive_deepspeed(parse_ctx *c) {
    lf_train_config *cfg = &c->cfg;
    lf_ds_sched *d = &cfg->ds;
    const int t = cfg->sched_type, ds = t >= LF_SCHED_WARMUP_LR;
    const char *name = lf__ds_sched_name(t);
    lf_status st = LF_OK;
#define GIVEN(p) (c->given[key_index(p)])
#define AUTO(p) (c->is_auto[key_index(p)] && !GIVEN(p))
    if (AUTO("scheduler.params.warmup_min_lr")) d->warmup_min_lr = 0.0f;
    if (AUTO("scheduler.params.warmup_max_lr")) d->warmup_max_lr = cfg->lr;
    if (AUTO("scheduler.params.warmup_num_steps")) {
        long w = GIVEN("scheduler.warmup_iters") ? cfg->warmup_iters : 0;
        d->warmup_num_steps = w > 1 ? w : 1;
    }
    if (AUTO("scheduler.params.total_num_steps")) d->total_num_steps = cfg->train_iters;
    if (t == LF_SCHED_WARMUP_LR && !GIVEN("scheduler.params.warmup_max_lr") &&
        !c->is_auto[key_index("scheduler.params.warmup_max_lr")])
        d->warmup_max_lr = cfg->lr;
    if (!GIVEN("scheduler.params.cycle_second_step_size")) d->cycle_second_step_size = d->cycle_first_step_size;
    if (!GIVEN("scheduler.params.cycle_second_stair_count")) d->cycle_second_stair_count = d->cycle_first_stair_count;
    static const char *const required[][2] = {{"scheduler.params.total_num_steps", "WarmupDecayLR WarmupCosineLR"},
                                              {"scheduler.params.cycle_min_lr", "OneCycle"},
                                              {"scheduler.params.cycle_max_lr", "OneCycle"}};
    for (size_t r = 0; ds && st == LF_OK && r < sizeof required / sizeof required[0]; r++) {
        int i = key_index(required[r][0]);
        if (strstr(required[r][1], name) && !c->given[i] && !c->is_auto[i])
            st = keep_error(c, lf_fail(LF_ERR_CONFIG,
                                       "key '%s' is required by scheduler.type %s (DeepSpeed has no default)",
                                       required[r][0], name));
    }
    for (int i = 0; st == LF_OK && i < NKEYS; i++) {
        const char *path = k_keys[i].path;
        if (!(c->given[i] || c->is_auto[i])) continue;
        const char *where = c->where[i] ? c->where[i] : (c->file_where[0] ? c->file_where : k_cli);
        if (!strncmp(path, "scheduler.params.", 17) && !ds)
            st = keep_error(c,
                            lf_fail(LF_ERR_CONFIG,
                                    "key '%s' %s: scheduler.params are for DeepSpeed's schedulers; scheduler.type %s "
                                    "takes scheduler.warmup_iters, decay_iters and min_lr",
                                    path, where, name));
        else if (!strncmp(path, "scheduler.params.", 17) && !lf__ds_sched_param_of(path + 17, t))
            st = keep_error(c, lf_fail(LF_ERR_CONFIG, "key '%s' %s: not a parameter of DeepSpeed's %s", path, where,
                                       name));
        else if (ds && (!strcmp(path, "scheduler.decay_iters") || !strcmp(path, "scheduler.min_lr") ||
                        (!strcmp(path, "scheduler.warmup_iters") &&
                         !c->is_auto[key_index("scheduler.params.warmup_num_steps")])))
            st = keep_error(c, lf_fail(LF_ERR_CONFIG,
                                       "key '%s' %s: for scheduler.type cosine; %s takes scheduler.params "
                                       "(docs/deepspeed.md)",
                                       path, where, name));
    }
#undef GIVEN
#undef AUTO
    return st;
}

/* The run header's lines: a DeepSpeed file's defaults, then what each
 * "auto" became (ignored keys' notes were added as they were read). */
static void make_notes(parse_ctx *c) {
    const lf_train_config *cfg = &c->cfg;
    if (c->ds_file) {
        static const char *const keys[][2] = {{"optimizer.params.betas", "betas [0.9, 0.999]"},
                                              {"optimizer.params.eps", "eps 1e-8"},
                                              {"optimizer.params.weight_decay", "weight_decay 0.01"},
                                              {"scheduler.type", "no scheduler: a constant lr"},
                                              {"gradient_clipping", "gradient_clipping 0 (off)"}};
        char list[400] = "";
        for (size_t j = 0; j < sizeof keys / sizeof keys[0]; j++) {
            int i = key_index(keys[j][0]);
            if (c->given[i] || c->is_auto[i]) continue;
            size_t at = strlen(list);
            snprintf(list + at, sizeof list - at, "%s%s", at ? ", " : "", keys[j][1]);
        }
        if (list[0]) add_line(c->notes, sizeof c->notes, "DeepSpeed file: DeepSpeed's and torch's defaults: %s", list);
    }
    for (int i = 0; i < NKEYS; i++) {
        if (!c->is_auto[i]) continue;
        const key_def *k = &k_keys[i];
        const char *rule = lf__ds_auto_rule(k->path);
        cJSON *v = value_json(cfg, k);
        char *txt = v ? cJSON_PrintUnformatted(v) : NULL, origin[300];
        if (c->given[i]) snprintf(origin, sizeof origin, "%s", c->where[i]);
        else if (c->where[i]) snprintf(origin, sizeof origin, "%s", c->where[i]);
        else if (!strncmp(k->path, "scheduler.params.", 17)) snprintf(origin, sizeof origin, "from %s", rule);
        else if (!strcmp(k->path, "train_batch_size")) snprintf(origin, sizeof origin, "%s", rule);
        else
            snprintf(origin, sizeof origin, "llmforge's default%s; HF Trainer's %s",
                     c->ds_file ? " for a DeepSpeed file" : "", rule);
        add_line(c->notes, sizeof c->notes, "auto: %s -> %s (%s)", k->path, txt ? txt : "?", origin);
        cJSON_free(txt);
        cJSON_Delete(v);
    }
    for (int j = 0; j < c->n_auto_ignored; j++) {
        const char *p = c->auto_ignored[j];
        long long v = lf__ds_auto_from_hidden(p, cfg->model.n_embd);
        const lf__ds_key *d = lf__ds_key_find(p);
        add_line(c->notes, sizeof c->notes, "auto: %s -> %lld (%s; ignored: %s)", p, v, lf__ds_auto_rule(p),
                 d ? d->why : "");
    }
}

/* Each alert takes only the actions that make sense for it. */
static lf_status check_alert_actions(parse_ctx *c) {
    static const struct {
        const char *key;
        size_t off;
        unsigned allowed; /* bit per lf_alert_action */
        const char *list;
    } rules[] = {
        {"monitor.alerts.nan.action", offsetof(lf_train_config, alert_nan_action),
         1u << LF_ALERT_STOP | 1u << LF_ALERT_SKIP | 1u << LF_ALERT_ROLLBACK, "stop, skip_step, rollback"},
        {"monitor.alerts.loss_spike.action", offsetof(lf_train_config, alert_spike_action),
         1u << LF_ALERT_OFF | 1u << LF_ALERT_LOG | 1u << LF_ALERT_SKIP | 1u << LF_ALERT_ROLLBACK,
         "off, log, skip_step, rollback"},
        {"monitor.alerts.stall.action", offsetof(lf_train_config, alert_stall_action),
         1u << LF_ALERT_LOG | 1u << LF_ALERT_EXIT, "log, exit"},
    };
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
        int v = *(const int *)((const char *)&c->cfg + rules[i].off);
        if (!(rules[i].allowed & (1u << v)))
            return lf_fail(LF_ERR_CONFIG, "key '%s' %s: '%s' is not an action of this alert (one of: %s)", rules[i].key,
                           note_of(c, key_index(rules[i].key)), alert_choices[v], rules[i].list);
    }
    return LF_OK;
}

/* Settings of checkpoint.async and the rollback action that the trainer
 * cannot honour, refused rather than ignored (train_impl.h). */
lf_status lf__train_config_check_ckpt(const lf_train_config *c) {
    if (c->ckpt_async && c->zero_stage > 0)
        return lf_fail(LF_ERR_CONFIG,
                       "key 'checkpoint.async' is true but zero_optimization.stage is %d: a ZeRO "
                       "checkpoint is written by every rank with collectives of its own, which cannot run beside "
                       "the training step's; set checkpoint.async false (or stage 0)",
                       c->zero_stage);
    if (c->ckpt_async && c->eval_suite[0])
        return lf_fail(LF_ERR_CONFIG,
                       "key 'checkpoint.async' is true but eval.suite is set ('%s'): the suite runs "
                       "on the model of the checkpoint's step, which a background write has moved past; set "
                       "checkpoint.async false or eval.suite \"\"",
                       c->eval_suite);
    int rb_nan = c->alert_nan_action == LF_ALERT_ROLLBACK, rb_spike = c->alert_spike_action == LF_ALERT_ROLLBACK;
    if ((rb_nan || rb_spike) && c->zero_stage == 3)
        return lf_fail(LF_ERR_CONFIG,
                       "key 'monitor.alerts.%s.action' is rollback but zero_optimization.stage is 3: "
                       "a rollback reloads the whole parameters in process, which no ZeRO-3 rank holds; use stage "
                       "0-2, or resume from the checkpoint instead",
                       rb_nan ? "nan" : "loss_spike");
    return LF_OK;
}

/* DeepSpeed's batch identity; micro and accumulation are range-checked before. */
static lf_status derive_batch(parse_ctx *c) {
    static const char *const derived = "(derived from train_batch_size)";
    lf_train_config *cfg = &c->cfg;
    int iT = key_index("train_batch_size"), iM = key_index("train_micro_batch_size_per_gpu"),
        iA = key_index("gradient_accumulation_steps");
    long long T = cfg->train_batch_size, M = cfg->micro_batch, A = cfg->grad_accum, W = c->world;
    int hasT = c->given[iT] && T > 0, hasM = c->given[iM], hasA = c->given[iA];
    const char *wT = note_of(c, iT);
    if (!hasT) {
        T = M * A * W;
    } else if (hasM && hasA) {
        if (T != M * A * W)
            return lf_fail(LF_ERR_CONFIG,
                           "key 'train_batch_size' %s: train_batch_size %lld != train_micro_batch_size_per_gpu %lld × "
                           "gradient_accumulation_steps %lld × world size %lld%s = %lld",
                           wT, T, M, A, W, c->world_note, M * A * W);
    } else if (hasM) {
        if (T % (M * W))
            return lf_fail(LF_ERR_CONFIG,
                           "key 'train_batch_size' %s: train_batch_size %lld is not divisible by "
                           "train_micro_batch_size_per_gpu %lld × world size %lld%s",
                           wT, T, M, W, c->world_note);
        A = T / (M * W);
        if (A > INT_MAX)
            return lf_fail(LF_ERR_CONFIG, "key 'gradient_accumulation_steps' %s: %lld is out of range [1, %d]", derived,
                           A, INT_MAX);
        c->where[iA] = derived;
    } else {
        const key_def *km = &k_keys[iM];
        if (T % (A * W))
            return lf_fail(LF_ERR_CONFIG,
                           "key 'train_batch_size' %s: train_batch_size %lld is not divisible by "
                           "gradient_accumulation_steps %lld × world size %lld%s",
                           wT, T, A, W, c->world_note);
        M = T / (A * W);
        if (M < (long long)km->lo || M > (long long)km->hi)
            return lf_fail(LF_ERR_CONFIG,
                           "key 'train_batch_size' %s: train_batch_size %lld / (gradient_accumulation_steps %lld × "
                           "world size %lld%s) gives train_micro_batch_size_per_gpu %lld, out of range [%lld, %lld]",
                           wT, T, A, W, c->world_note, M, (long long)km->lo, (long long)km->hi);
        c->where[iM] = derived;
    }
    if (T > LONG_MAX) return lf_fail(LF_ERR_CONFIG, "key 'train_batch_size': %lld does not fit a long", T);
    cfg->train_batch_size = (long)T;
    cfg->micro_batch = (int)M;
    cfg->grad_accum = (int)A;
    cfg->world_size = (int)W;
    return LF_OK;
}

/* Key i against its range (and a required string against empty). */
static lf_status check_range(const parse_ctx *c, int i) {
    const lf_train_config *cfg = &c->cfg;
    char val[64];
    const key_def *k = &k_keys[i];
    const char *where = note_of(c, i);
    switch (k->type) {
    case KT_INT:
    case KT_LONG: {
        long long v = get_integer(cfg, k), lo, hi;
        int_bounds(k, &lo, &hi);
        if (v < lo || v > hi) {
            snprintf(val, sizeof val, "%lld", v);
            return range_error_text(k, where, val);
        }
        break;
    }
    case KT_FLOAT: {
        float v = get_float(cfg, k->off);
        if (!float_in_range(k, v)) {
            fmt_float(val, sizeof val, v);
            return range_error_text(k, where, val);
        }
        break;
    }
    case KT_PAIR:
        for (int j = 0; j < 2; j++) {
            float v = get_float(cfg, j ? k->off2 : k->off);
            if (!float_in_range(k, v)) {
                char range[80];
                fmt_float(val, sizeof val, v);
                fmt_range(range, sizeof range, k);
                return lf_fail(LF_ERR_CONFIG, "key '%s' %s: element %d (%s) is out of range %s", k->path, where, j, val,
                               range);
            }
        }
        break;
    case KT_STRING:
        if ((k->flags & KF_REQUIRED) && !*(const char *)cfield(cfg, k->off)) {
            if (!c->given[i]) return lf_fail(LF_ERR_CONFIG, "key '%s' is required and was not set", k->path);
            return lf_fail(LF_ERR_CONFIG, "key '%s' %s: must not be empty", k->path, where);
        }
        break;
    default: break;
    }
    return LF_OK;
}

/* Every key against its range, every problem kept. */
static lf_status check_ranges(parse_ctx *c) {
    lf_status st = LF_OK;
    for (int i = 0; st == LF_OK && i < NKEYS; i++) st = keep_error(c, check_range(c, i));
    return st;
}

/* backend: a name other than auto must be one this program has ("cuda"
 * only where the CUDA backend was built and registered). */
static lf_status check_backend(const parse_ctx *c) {
    const char *name = c->cfg.backend, *sel = NULL;
    if (ascii_ieq(name, "auto") || lf_backend_select(name, &sel) == LF_OK) return LF_OK;
    return lf_fail(LF_ERR_CONFIG, "key 'backend' %s: \"%s\": %s", note_of(c, key_index("backend")), name,
                   lf_last_error());
}

/* LoRA: its values (the targets are checked against the model when the
 * trainer builds it: an --init-from directory may set the family), and
 * what it does not combine with yet. */
static lf_status check_lora(const parse_ctx *c) {
    const lf_train_config *cfg = &c->cfg;
    if (!lf_lora_enabled(&cfg->lora)) return LF_OK;
    lf_status st = lf_lora_config_check(&cfg->lora, NULL);
    if (st != LF_OK) return st;
    const char *what = cfg->zero_stage > 0 ? "zero_optimization.stage"
                       : cfg->bf16         ? "bf16.enabled"
                       : cfg->fp16         ? "fp16.enabled"
                                           : NULL;
    if (what)
        return lf_fail(LF_ERR_UNSUPPORTED, "key '%s' %s: not implemented with LoRA (lora.target_modules is set)", what,
                       note_of(c, key_index(what)));
    return LF_OK;
}

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
        st = apply_text(c, text, name);
    }
    for (int i = 0; st == LF_OK && i < n_overrides; i++) st = keep_error(c, apply_override(c, overrides[i]));
    if (st == LF_OK) {
        derive_schedule(c);
        st = derive_deepspeed(c);
    }
    if (st == LF_OK) st = check_ranges(c);
    if (st == LF_OK && c->n_errors) st = c->first_st;
    if (st == LF_OK) st = derive_batch(c);
    if (st == LF_OK && c->cfg.model.n_embd % c->cfg.model.n_head) {
        int ie = key_index("model.n_embd"), ih = key_index("model.n_head");
        st = lf_fail(LF_ERR_CONFIG, "key 'model.n_embd' %s: %d is not divisible by model.n_head %d (set %s)",
                     note_of(c, ie), c->cfg.model.n_embd, c->cfg.model.n_head, note_of(c, ih));
    }
    if (st == LF_OK) st = resolve_model(c);
    if (st == LF_OK) st = check_alert_actions(c);
    if (st == LF_OK) st = lf__train_config_check_ckpt(&c->cfg);
    if (st == LF_OK && c->cfg.fp16 && c->cfg.bf16)
        st = lf_fail(LF_ERR_CONFIG, "keys 'fp16.enabled' (%s) and 'bf16.enabled' (%s) are both true; choose one",
                     note_of(c, key_index("fp16.enabled")), note_of(c, key_index("bf16.enabled")));
    if (st == LF_OK && c->cfg.objective == LF_OBJECTIVE_DPO && c->cfg.micro_batch % 2)
        st = lf_fail(LF_ERR_CONFIG,
                     "key 'train_micro_batch_size_per_gpu' %s: %d is odd, but train.objective dpo (%s) runs a pair "
                     "of rows (chosen, rejected) per example; give an even number of rows",
                     note_of(c, key_index("train_micro_batch_size_per_gpu")), c->cfg.micro_batch,
                     note_of(c, key_index("train.objective")));
    if (st == LF_OK && c->cfg.objective == LF_OBJECTIVE_DPO && c->cfg.packing)
        st = lf_fail(LF_ERR_CONFIG,
                     "key 'data.packing' %s: %s does not apply to train.objective dpo (%s), whose rows are whole "
                     "(chosen, rejected) pairs padded to model.block_size; leave data.packing out",
                     note_of(c, key_index("data.packing")), packing_choices[c->cfg.packing],
                     note_of(c, key_index("train.objective")));
    if (st == LF_OK && c->cfg.objective == LF_OBJECTIVE_DPO && c->cfg.sampling != LF_SAMPLING_RANDOM)
        st = lf_fail(LF_ERR_CONFIG,
                     "key 'data.sampling' %s: %s does not apply to train.objective dpo (%s), which draws whole "
                     "pairs in a seeded epoch permutation; leave data.sampling out",
                     note_of(c, key_index("data.sampling")), sampling_choices[c->cfg.sampling],
                     note_of(c, key_index("train.objective")));
    if (st == LF_OK) st = check_backend(c);
    if (st == LF_OK) st = check_lora(c);
    if (st == LF_OK) make_notes(c);
    if (st != LF_OK && !c->n_errors) keep_error(c, st);
    st = finish_report(c, st, rep);
    if (st == LF_OK) *out = c->cfg;
    lf_free(c);
    return st;
}

/* ---------------------------------------------------------------- public API */

lf_train_config lf_train_config_default(void) {
    parse_ctx c;
    apply_defaults(&c);
    derive_schedule(&c);
    (void)derive_batch(&c); /* nothing given: T = micro x accum x world, cannot fail */
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

/* The value of row k as a cJSON node (numbers as raw text so they print exactly). */
static cJSON *value_json(const lf_train_config *cfg, const key_def *k) {
    char buf[64];
    switch (k->type) {
    case KT_INT:
    case KT_LONG: snprintf(buf, sizeof buf, "%lld", get_integer(cfg, k)); return cJSON_CreateRaw(buf);
    case KT_FLOAT: fmt_float(buf, sizeof buf, get_float(cfg, k->off)); return cJSON_CreateRaw(buf);
    case KT_BOOL: return cJSON_CreateBool(*(const int *)cfield(cfg, k->off) != 0);
    case KT_U64:
        snprintf(buf, sizeof buf, "%" PRIu64, *(const uint64_t *)cfield(cfg, k->off));
        return cJSON_CreateRaw(buf);
    case KT_STRLIST: {
        cJSON *arr = cJSON_CreateArray();
        char s[8192];
        size_t n = strnlen((const char *)cfield(cfg, k->off), k->size - 1);
        memcpy(s, cfield(cfg, k->off), n);
        s[n] = 0;
        for (char *p = s, *e; arr && *p; p = e ? e + 1 : p + strlen(p)) {
            e = strchr(p, '\n');
            if (e) *e = 0;
            cJSON_AddItemToArray(arr, cJSON_CreateString(p));
            if (!e) break;
        }
        return arr;
    }
    case KT_STRING:
    case KT_CHOICE: {
        /* bounded copy: a hand-built struct may lack the terminator */
        char s[LF_PATH_MAX];
        size_t cap = k->size < sizeof s ? k->size : sizeof s;
        size_t n = strnlen((const char *)cfield(cfg, k->off), cap - 1);
        memcpy(s, cfield(cfg, k->off), n);
        s[n] = 0;
        return cJSON_CreateString(s);
    }
    case KT_ENUM: {
        int j = *(const int *)cfield(cfg, k->off), n = 0;
        while (choices_of(k)[n]) n++;
        if (j >= 0 && j < n) return cJSON_CreateString(choices_of(k)[j]);
        snprintf(buf, sizeof buf, "%d", j); /* invalid; parse will say so */
        return cJSON_CreateRaw(buf);
    }
    case KT_PAIR: {
        cJSON *a = cJSON_CreateArray();
        for (int j = 0; a && j < 2; j++) {
            fmt_float(buf, sizeof buf, get_float(cfg, j ? k->off2 : k->off));
            cJSON *e = cJSON_CreateRaw(buf);
            if (!e || !cJSON_AddItemToArray(a, e)) {
                cJSON_Delete(e);
                cJSON_Delete(a);
                return NULL;
            }
        }
        return a;
    }
    default: return NULL;
    }
}

/* The dump holds the schedule keys of the scheduler in use only: cosine's
 * warmup_iters/decay_iters/min_lr, or the DeepSpeed scheduler's own
 * scheduler.params (the parse refuses the others, so the dump reads back). */
static int dumped(const lf_train_config *cfg, const key_def *k) {
    int ds = cfg->sched_type >= LF_SCHED_WARMUP_LR;
    if (!strncmp(k->path, "scheduler.params.", 17)) return ds && lf__ds_sched_param_of(k->path + 17, cfg->sched_type);
    if (!strcmp(k->path, "scheduler.warmup_iters") || !strcmp(k->path, "scheduler.decay_iters") ||
        !strcmp(k->path, "scheduler.min_lr"))
        return !ds;
    return 1;
}

char *lf_train_config_to_json(const lf_train_config *cfg) {
    if (!cfg) {
        lf_fail(LF_ERR_INVALID_ARG, "lf_train_config_to_json: cfg is NULL");
        return NULL;
    }
    char *out = NULL, *printed = NULL;
    cJSON *root = cJSON_CreateObject();
    if (!root) goto fail;
    for (int i = 0; i < NKEYS; i++) {
        const key_def *k = &k_keys[i];
        if (!is_setting(k) || !dumped(cfg, k)) continue;
        /* walk/create the sections of the dotted path */
        cJSON *parent = root;
        const char *seg = k->path, *dot;
        while ((dot = strchr(seg, '.')) != NULL) {
            char name[PATH_BUF];
            size_t n = (size_t)(dot - seg);
            memcpy(name, seg, n);
            name[n] = 0;
            cJSON *sec = cJSON_GetObjectItemCaseSensitive(parent, name);
            if (!sec && !(sec = cJSON_AddObjectToObject(parent, name))) goto fail;
            parent = sec;
            seg = dot + 1;
        }
        cJSON *v = value_json(cfg, k);
        if (!v) goto fail;
        if (!cJSON_AddItemToObject(parent, seg, v)) {
            cJSON_Delete(v);
            goto fail;
        }
    }
    printed = cJSON_Print(root);
    if (!printed) goto fail;
    /* cJSON indents with tabs and writes "key":<tab>value; strings never hold
     * a raw tab (escaped), so a tab after ':' is the separator (one space) and
     * every other tab is indentation (two spaces). */
    size_t len = 0, tabs = 0;
    for (const char *p = printed; *p; p++, len++) tabs += *p == '\t';
    out = lf_alloc(len + tabs + 2);
    if (!out) goto fail;
    size_t at = 0;
    for (const char *p = printed; *p; p++) {
        if (*p != '\t') {
            out[at++] = *p;
        } else if (p > printed && p[-1] == ':') {
            out[at++] = ' ';
        } else {
            out[at++] = ' ';
            out[at++] = ' ';
        }
    }
    out[at++] = '\n';
    out[at] = 0;
    cJSON_free(printed);
    cJSON_Delete(root);
    return out;
fail:
    cJSON_free(printed);
    cJSON_Delete(root);
    lf_fail(LF_ERR_NOMEM, "out of memory writing the resolved configuration");
    return NULL;
}

/* ---------------------------------------------------------------- help */

typedef struct sbuf {
    char *buf;
    size_t cap, len;
} sbuf;

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void
sb_printf(sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->len < b->cap ? b->buf + b->len : NULL, b->len < b->cap ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (n > 0) b->len += (size_t)n;
}

static void fmt_default(char *buf, size_t cap, const key_def *k) {
    char a[32], b[32];
    if (k->flags & KF_DERIVED) {
        snprintf(buf, cap, "%s", k->def_str);
        return;
    }
    switch (k->type) {
    case KT_INT:
    case KT_LONG: snprintf(buf, cap, "%lld", (long long)k->def[0]); break;
    case KT_FLOAT: fmt_float(buf, cap, (float)k->def[0]); break;
    case KT_BOOL: snprintf(buf, cap, "%s", k->def[0] != 0 ? "true" : "false"); break;
    case KT_U64: snprintf(buf, cap, "%llu", (unsigned long long)k->def[0]); break;
    case KT_PAIR:
        fmt_float(a, sizeof a, (float)k->def[0]);
        fmt_float(b, sizeof b, (float)k->def[1]);
        snprintf(buf, cap, "[%s, %s]", a, b);
        break;
    default:
        if (k->flags & KF_REQUIRED && !*def_str_of(k)) snprintf(buf, cap, "none, required");
        else snprintf(buf, cap, "\"%s\"", def_str_of(k));
        break;
    }
}

static void fmt_type(char *buf, size_t cap, const key_def *k) {
    char range[80];
    switch (k->type) {
    case KT_INT:
    case KT_LONG:
    case KT_FLOAT:
    case KT_U64:
        if (k->type != KT_U64 && isinf(k->hi)) {
            snprintf(buf, cap, "%s %s %.9g", k->type == KT_FLOAT ? "number" : "integer",
                     (k->flags & KF_LO_OPEN) ? ">" : ">=", k->lo);
        } else {
            fmt_range(range, sizeof range, k);
            snprintf(buf, cap, "%s in %s", k->type == KT_FLOAT ? "number" : "integer", range);
        }
        break;
    case KT_PAIR:
        fmt_range(range, sizeof range, k);
        snprintf(buf, cap, "2 numbers in %s", range);
        break;
    case KT_BOOL: snprintf(buf, cap, "true or false"); break;
    case KT_STRING: snprintf(buf, cap, "string"); break;
    case KT_STRLIST: snprintf(buf, cap, "array of strings"); break;
    default: {
        size_t at = (size_t)snprintf(buf, cap, "one of:");
        for (int j = 0; choices_of(k)[j] && at < cap; j++)
            at += (size_t)snprintf(buf + at, cap - at, " %s", choices_of(k)[j]);
        break;
    }
    }
}

size_t lf_train_config_help(char *buf, size_t cap) {
    sbuf b = {buf, buf ? cap : 0, 0};
    if (b.cap) buf[0] = 0;
    sb_printf(&b, "In a file, sections nest: {\"model\": {\"n_layer\": 6}}. On the command line, --key.path=value\n"
                  "(the value is JSON when it parses, else text) or --leaf=value when the leaf names one key.\n\n");
    for (int i = 0; i < NKEYS; i++) {
        const key_def *k = &k_keys[i];
        if (!is_setting(k)) continue;
        char type[96], def[64];
        fmt_type(type, sizeof type, k);
        fmt_default(def, sizeof def, k);
        sb_printf(&b, "  %-31s %s; default %s\n      %s", k->path, type, def, k->help);
        if (k->alias) sb_printf(&b, " (also --%s)", k->alias);
        sb_printf(&b, "\n");
    }
    sb_printf(&b, "\nDeepSpeed keys accepted and ignored, with a notice (docs/deepspeed.md says why; others are "
                  "refused with the reason):\n ");
    int nds;
    const lf__ds_key *ds = lf__ds_keys(&nds);
    for (int i = 0, col = 1; i < NKEYS + nds; i++) {
        const char *path = i < NKEYS ? k_keys[i].path : ds[i - NKEYS].path;
        if (i < NKEYS ? k_keys[i].type != KT_IGNORED : ds[i - NKEYS].state != LF__DS_IGNORED) continue;
        size_t len = strlen(path) + 1;
        if (col + len > 96) {
            sb_printf(&b, "\n ");
            col = 1;
        }
        sb_printf(&b, " %s", path);
        col += (int)len;
    }
    sb_printf(&b, "\n");
    if (b.cap && b.len >= b.cap) buf[b.cap - 1] = 0; /* truncated, still terminated */
    return b.len;
}

/* ---------------------------------------------------------------- key states */

lf_config_key_state lf_train_config_key_state(const char *path, const char **why) {
    const char *dummy;
    if (!why) why = &dummy;
    *why = NULL;
    if (!path) return LF_CONFIG_KEY_UNKNOWN;
    size_t n = strlen(path);
    int i = find_key(path);
    if (i >= 0) {
        *why = k_keys[i].help;
        return k_keys[i].type == KT_IGNORED ? LF_CONFIG_KEY_IGNORED : LF_CONFIG_KEY_HONOURED;
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
        if (is_section(sec)) return LF_CONFIG_KEY_HONOURED;
    }
    return LF_CONFIG_KEY_UNKNOWN;
}
