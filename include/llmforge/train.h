/*
 * Training: configuration (JSON in DeepSpeed's vocabulary, table-driven),
 * the trainer loop, LR schedules.
 *
 * Configuration keys (dotted paths; defaults in brackets):
 *   model.arch ["gpt2"], model.n_layer [4], model.n_head [4], model.n_embd [128],
 *   model.block_size [64], model.bias [true], model.dropout [0.0],
 *   model.vocab_size [0 = from the dataset]
 *   data.dataset [required], data.sampling ["random"|"sequential"|"records"|"packed"],
 *   data.packing ["none"|"packed"|"padded"]: rows of whole SFT examples (docs/training.md),
 *   data.prefetch [2], data.tokenizer [""]
 *   train_batch_size [derived], train_micro_batch_size_per_gpu [12],
 *   gradient_accumulation_steps [1], train_iters [2000], train.stop_at [0 = off]
 *   optimizer.type ["AdamW"], optimizer.params.{lr [1e-3], betas [[0.9,0.99]],
 *     eps [1e-8], weight_decay [0.1]}
 *   scheduler.type ["cosine"|"constant"|DeepSpeed's "WarmupLR"|"WarmupDecayLR"|
 *     "WarmupCosineLR"|"OneCycle"|"LRRangeTest"], scheduler.{warmup_iters [100],
 *     decay_iters [train_iters], min_lr [lr/10]}, scheduler.params.* (DeepSpeed's)
 *   A DeepSpeed file (docs/deepspeed.md) gets DeepSpeed's and torch's defaults:
 *     constant lr, betas [0.9, 0.999], weight_decay 0.01, gradient_clipping 0.
 *   gradient_clipping [1.0; 0 disables]
 *   bf16.enabled [false]: matrix products with bf16 operands, fp32 accumulation,
 *     fp32 master weights and optimizer state (backend.h: "cpu-bf16")
 *   activation_checkpointing.policy ["none"|"selective"|"full"]
 *   eval.interval [250], eval.iters [20], eval.tasks [[]], eval.suite [""]
 *   checkpoint.interval [500], checkpoint.keep_last [3], checkpoint.keep_every [0],
 *     checkpoint.requeue [false], checkpoint.async [false],
 *     checkpoint.on_error ["stop"|"continue"]
 *   monitor.alerts.{nan,loss_spike}.action [... |"rollback"], monitor.alerts.max_rollbacks [3]
 *   steps_per_print [10], seed [1337], out_dir ["out"]
 *   comm.backend ["auto"|"single"|"mpi"], comm.timeout_s [300],
 *     comm.bucket_elems [4194304]
 *   registry.enabled [true], registry.path ["" = $LLMFORGE_REGISTRY or
 *     ~/.local/share/llmforge/registry.db] (include/llmforge/registry.h)
 * Unknown keys and bad values are errors naming the key path.
 *
 * Data parallel (docs/distributed.md): started as N processes (mpirun, srun),
 * every rank holds the whole model and optimizer state (ZeRO stage 0), reads
 * its own rows of each step, and the gradients are summed across ranks before
 * the (replicated) optimizer step; the global batch is train_batch_size =
 * micro x accumulation x N, and a run gives the losses of one process with
 * the same global batch.
 */
#ifndef LLMFORGE_TRAIN_H
#define LLMFORGE_TRAIN_H

#include <signal.h>
#include "llmforge/checkpoint.h"
#include "llmforge/comm.h"
#include "llmforge/core.h"
#include "llmforge/model.h"
#include "llmforge/obs.h"

#ifdef __cplusplus
extern "C" {
#endif

/* train.objective: next-token cross-entropy, or DPO (TRL's DPOTrainer, loss_type "sigmoid") on a
 * dataset prepared with --mode dpo. */
typedef enum lf_objective { LF_OBJECTIVE_LM = 0, LF_OBJECTIVE_DPO = 1 } lf_objective;
/* scheduler.type: llmforge's cosine (nanoGPT) and constant, then DeepSpeed's
 * schedulers with its formulas (src/train/schedule.c, docs/deepspeed.md). */
typedef enum lf_sched_type {
    LF_SCHED_COSINE = 0,
    LF_SCHED_CONSTANT = 1,
    LF_SCHED_WARMUP_LR = 2,
    LF_SCHED_WARMUP_DECAY_LR = 3,
    LF_SCHED_WARMUP_COSINE_LR = 4,
    LF_SCHED_ONE_CYCLE = 5,
    LF_SCHED_LR_RANGE_TEST = 6
} lf_sched_type;

/* scheduler.params.* of DeepSpeed's schedulers (runtime/lr_schedules.py), as
 * resolved: the values DeepSpeed leaves to other keys are filled in by the
 * configuration (warmup_max_lr of WarmupLR = optimizer.params.lr, ...). */
typedef struct lf_ds_sched {
    float warmup_min_lr, warmup_max_lr;    /* WarmupLR, WarmupDecayLR */
    long warmup_num_steps;                 /* WarmupLR, WarmupDecayLR, WarmupCosineLR (DeepSpeed uses max(2, it)) */
    int warmup_linear;                     /* warmup_type: 0 "log", 1 "linear" */
    long total_num_steps;                  /* WarmupDecayLR, WarmupCosineLR */
    float warmup_min_ratio, cos_min_ratio; /* WarmupCosineLR */
    float cycle_min_lr, cycle_max_lr, decay_lr_rate; /* OneCycle */
    long cycle_first_step_size, cycle_second_step_size, decay_step_size;
    int cycle_first_stair_count, cycle_second_stair_count;
    int cycle_momentum; /* OneCycle cycles AdamW's beta1 (beta2 = 0.99) */
    float cycle_min_mom, cycle_max_mom, decay_mom_rate;
    float lr_range_test_min_lr, lr_range_test_step_rate; /* LRRangeTest */
    long lr_range_test_step_size;
    int lr_range_test_staircase;
} lf_ds_sched;

/* lf_train_config.model_given: the LF_MODEL_GIVEN_* bits of llmforge/model.h. */

typedef struct lf_train_config {
    /* model */
    char arch[16];
    lf_model_config model; /* model.vocab_size 0 = take it from the dataset */
    unsigned model_given;  /* LF_MODEL_GIVEN_* bits: model keys the file or an override set
                                        (the others may come from an --init-from HF config.json) */
    lf_lora_config lora;   /* lora.*: LoRA adapters (target_modules "" = full fine-tuning) */
    /* data */
    char dataset[LF_PATH_MAX];
    int sampling;      /* lf_sampling */
    int packing;       /* data.packing: 0 none (windows of the token stream), else lf_sft_pack_mode */
    int prefetch;      /* steps of batches made ahead by the loader thread */
    long memory_limit; /* memory.limit_bytes: 0 = MemAvailable */
    /* objective (train.objective; docs/training.md "DPO") */
    int objective;  /* lf_objective */
    float dpo_beta; /* dpo.beta: TRL's beta, the weight of the log-ratio against the reference */
    /* fp16 (DeepSpeed's section) */
    int fp16;
    float fp16_loss_scale; /* 0 = dynamic */
    int fp16_scale_power;
    long fp16_window;
    int fp16_hysteresis;
    int fp16_consecutive;
    float fp16_min_scale;
    char data_tokenizer[LF_PATH_MAX]; /* tokenizer for datasets naming none (llm.c files) */
    /* batch */
    long train_batch_size; /* = micro * accum * world (0 in the file = derive) */
    int micro_batch;       /* train_micro_batch_size_per_gpu */
    int grad_accum;        /* gradient_accumulation_steps */
    int world_size;        /* data-parallel ranks the batch identity was resolved for: not a
                                       key (the launcher's, see lf_train_config_load) */
    long train_iters;
    long stop_at;  /* train.stop_at: end after this step (0 = off), schedule unchanged */
    int recompute; /* lf_recompute: activation_checkpointing.policy */
    /* optimizer */
    char optimizer_type[16]; /* "AdamW" or "Adam" (DeepSpeed's; adam_w_mode true: the same AdamW) */
    float lr, beta1, beta2, eps, weight_decay;
    /* scheduler */
    int sched_type;                 /* lf_sched_type */
    long warmup_iters, decay_iters; /* decay_iters -1 in the table = train_iters */
    float min_lr;
    lf_ds_sched ds; /* scheduler.params.*: DeepSpeed's schedulers */
    float grad_clip;
    int bf16;         /* bf16.enabled: matmuls in bf16 (backend "cpu-bf16") */
    char backend[16]; /* backend: "auto" (LLMFORGE_BACKEND, else cuda with a GPU, else cpu),
                                       "cpu", "cuda" or "cpu-fenced" (lf_backend_select) */
    /* eval / checkpoint / logging */
    long eval_interval; /* 0 = never (except none) */
    int eval_iters;
    char eval_tasks[4096];        /* eval.tasks: task files, one per line ("" = none) */
    char eval_suite[LF_PATH_MAX]; /* eval.suite: a directory of task files run on every saved checkpoint */
    char best_metric[128];        /* checkpoint.best_metric: "val_loss" or "<task>/<metric>" */
    int greater_is_better;        /* checkpoint.greater_is_better */
    int load_best_model_at_end;   /* copy the best checkpoint's model to out_dir/final_model */
    long ckpt_interval;           /* 0 = only at the end */
    int keep_last;
    long keep_every;   /* checkpoint.keep_every: multiples of this step are kept forever (0: none) */
    int ckpt_requeue;  /* checkpoint.requeue: `scontrol requeue` after a preemption (the CLI's part) */
    int ckpt_async;    /* checkpoint.async: snapshot at the step, write on a background thread */
    int ckpt_on_error; /* checkpoint.on_error: lf_ckpt_on_error (a failed save stops, or warns) */
    long steps_per_print;
    uint64_t seed;
    char out_dir[LF_PATH_MAX];
    /* monitoring (DeepSpeed's tensorboard and wall_clock_breakdown keys; our monitor section) */
    int wall_clock_breakdown;         /* emit time/<phase>_ms for every step */
    int tb_enabled;                   /* tensorboard.enabled */
    char tb_output_path[LF_PATH_MAX]; /* "" = out_dir/tensorboard */
    char tb_job_name[128];
    int prom_port;           /* monitor.prometheus.port; 0 = off */
    char prom_host[256];     /* monitor.prometheus.host */
    int dash_port;           /* monitor.dashboard.port: the live dashboard alone; 0 = off (the
                                     * Prometheus port serves it too) */
    char dash_host[256];     /* monitor.dashboard.host */
    int report_enabled;      /* monitor.report: write out_dir/report.html at the end */
    int monitor_required;    /* a sink that cannot start stops the run */
    float peak_gflops;       /* monitor.peak_gflops: MFU reference; 0 = measure */
    int alert_nan_action;    /* lf_alert_action: STOP, SKIP or ROLLBACK */
    int alert_spike_action;  /* OFF, LOG, SKIP or ROLLBACK */
    int alert_max_rollbacks; /* monitor.alerts.max_rollbacks: rollbacks a run may make; one alert more stops it */
    float alert_spike_zscore;
    int alert_spike_window;
    float alert_stall_seconds; /* 0 = off */
    int alert_stall_action;    /* LOG or EXIT */
    /* communicator (include/llmforge/comm.h; docs/distributed.md) */
    char comm_backend[16];  /* comm.backend: "auto", "single", "mpi", "tcp" or "nccl" */
    float comm_timeout_s;   /* comm.timeout_s: bound on every collective */
    long comm_bucket_elems; /* comm.bucket_elems: gradient floats per all-reduce call */
    int comm_overlap;       /* comm.overlap: gradient sums overlapped with backward (nccl; stages 0-3) */
    int comm_bf16;          /* communication_data_type: 0 fp32, 1 bf16 (gradient collectives) */
    /* ZeRO (docs/distributed.md): 0 replicated, 1 AdamW moments partitioned over the ranks,
     * 2 gradients too, 3 parameters too (gathered unit by unit for forward and backward) */
    int zero_stage;        /* zero_optimization.stage */
    int offload_optimizer; /* zero_optimization.offload_optimizer.device: 0 none, 1 cpu */
    /* model registry (include/llmforge/registry.h): rank 0 records the run and its checkpoints */
    int registry_enabled; /* registry.enabled */
    char registry_path
        [LF_PATH_MAX]; /* registry.path: "" = $LLMFORGE_REGISTRY, else ~/.local/share/llmforge/registry.db */
} lf_train_config;

/* ROLLBACK: restore the last complete checkpoint in process and move the
 * data cursor past the batches since it (lf_trainer_run). */
typedef enum lf_alert_action {
    LF_ALERT_OFF = 0,
    LF_ALERT_LOG = 1,
    LF_ALERT_SKIP = 2,
    LF_ALERT_STOP = 3,
    LF_ALERT_EXIT = 4,
    LF_ALERT_ROLLBACK = 5
} lf_alert_action;

/* checkpoint.on_error: what a failed save (synchronous or background) does. */
typedef enum lf_ckpt_on_error { LF_CKPT_ON_ERROR_STOP = 0, LF_CKPT_ON_ERROR_CONTINUE = 1 } lf_ckpt_on_error;

/* Defaults for every key (dataset empty). */
lf_train_config lf_train_config_default(void);

/* Build a config: defaults, then the JSON file (path may be NULL), then
 * overrides "key.path=value" in order (value parsed as JSON when it is valid
 * JSON, otherwise taken as a string; a bare leaf name such as "n_layer=6" is
 * accepted when it names exactly one key). Validates ranges and cross-field
 * rules (n_embd % n_head, batch identity). Errors name the key path and the
 * file.
 * The world size of the batch identity is the launcher's: lf_comm_env_detect()
 * on this process's environment (1 for a plain process; N under mpirun -np N,
 * srun -n N, torchrun), so every rank of a job resolves the same numbers and
 * reports an inconsistency the same way. It lands in cfg->world_size. */
lf_status lf_train_config_load(lf_train_config *cfg, const char *path, int n_overrides, const char *const *overrides);
/* Same, from JSON text (used when resuming from trainer_state.json). */
lf_status lf_train_config_parse(lf_train_config *cfg, const char *json_text, const char *origin, int n_overrides,
                                const char *const *overrides);
/* The same two with the world size given (>= 1) instead of discovered:
 * tests, planning for another world size, reading a configuration saved by a
 * run with another world size. world_size 0 = discover, as above. */
lf_status lf_train_config_load_world(lf_train_config *cfg, const char *path, int world_size, int n_overrides,
                                     const char *const *overrides);
lf_status lf_train_config_parse_world(lf_train_config *cfg, const char *json_text, const char *origin, int world_size,
                                      int n_overrides, const char *const *overrides);
/* The resolved config as pretty JSON (every key, defaults filled in). lf_free. */
char *lf_train_config_to_json(const lf_train_config *cfg);
/* Returns of load/parse: LF_OK; LF_ERR_NOT_FOUND / LF_ERR_IO (file); LF_ERR_FORMAT
 * (malformed JSON, message has the line and column cJSON stopped at);
 * LF_ERR_CONFIG (unknown key, wrong type, out of range, inconsistent batch
 * sizes, missing data.dataset); LF_ERR_UNSUPPORTED (a DeepSpeed feature turned
 * on that this build lacks, e.g. fp16.enabled: true); LF_ERR_INVALID_ARG (NULL
 * cfg or override); LF_ERR_NOMEM. *cfg is written only on LF_OK. */

/* What a load found besides the configuration itself. Caller-owned, plain. */
typedef struct lf_train_config_report {
    int n_errors;       /* problems found (the load failed when > 0) */
    char errors[8192];  /* each problem on a line of its own, with its key path and origin */
    int deepspeed_file; /* the file was recognised as a DeepSpeed file (docs/deepspeed.md) */
    char notes[8192];   /* lines for the run header: the defaults a DeepSpeed file gets, what
                           each "auto" became and from where, DeepSpeed keys accepted and ignored
                           (with why); "" when none; truncated at a line boundary when long */
} lf_train_config_report;

/* lf_train_config_load_world that finds every problem in one pass (unknown
 * keys, wrong types, refused values, ranges; cross-key rules once those
 * pass) rather than stopping at the first, and fills *rep (may be NULL).
 * lf_last_error() holds the only problem, or "N problems in the
 * configuration: (1) ...; (2) ..." (cut at its capacity; rep->errors has
 * them all). */
lf_status lf_train_config_load_report(lf_train_config *cfg, const char *path, int world_size, int n_overrides,
                                      const char *const *overrides, lf_train_config_report *rep);

/* The state of a configuration key (DeepSpeed's or llmforge's) in llmforge. */
typedef enum lf_config_key_state {
    LF_CONFIG_KEY_UNKNOWN = 0,  /* not a key: refused as unknown */
    LF_CONFIG_KEY_HONOURED = 1, /* a key of llmforge's table: read and used */
    LF_CONFIG_KEY_IGNORED = 2,  /* accepted and ignored, with a notice saying why */
    LF_CONFIG_KEY_REFUSED = 3,  /* refused with the reason */
    LF_CONFIG_KEY_ONLY = 4      /* accepted with the value llmforge does, refused with any other */
} lf_config_key_state;
/* path: a dotted key path or "section.*". *why (may be NULL): the reason
 * (ignored, refused, only) or the help (honoured); static storage. */
lf_config_key_state lf_train_config_key_state(const char *path, const char **why);

/* Help text for every key (path, type and range, default, meaning), generated
 * from the same table as parsing. Writes at most cap bytes, always
 * NUL-terminated when cap > 0; returns the full length (snprintf-style), so
 * lf_train_config_help(NULL, 0) + 1 is the size that fits. */
size_t lf_train_config_help(char *buf, size_t cap);

/* The learning rate of optimizer step it (0-based). cosine: nanoGPT get_lr,
 * linear warmup to lr over warmup_iters (lr*(it+1)/(warmup+1)), cosine to
 * min_lr at decay_iters, min_lr after; constant: lr. DeepSpeed's schedulers:
 * their formulas at last_batch_iteration = it - 1 (DeepSpeed steps the
 * scheduler after each optimizer step, so step 0 runs at its initial lr). */
float lf_lr_at(const lf_train_config *cfg, long it);
/* AdamW's (beta1, beta2) at optimizer step it: the configured betas, except
 * under OneCycle with cycle_momentum, whose beta1 cycles between
 * cycle_max_mom and cycle_min_mom with beta2 0.99 (DeepSpeed's). */
void lf_betas_at(const lf_train_config *cfg, long it, float *beta1, float *beta2);

/* ---------------------------------------------------------------- trainer */
typedef struct lf_trainer lf_trainer;

/* lf_trainer_opts.resume */
enum {
    LF_RESUME_NO = 0,   /* a fresh run; out_dir must not hold one already */
    LF_RESUME_YES = 1,  /* continue from out_dir's checkpoint (lf_checkpoint_resolve); none is an error */
    LF_RESUME_AUTO = 2, /* continue when out_dir holds a checkpoint, start fresh when it holds none
                           (a requeued batch job runs the same command every time) */
};

typedef struct lf_trainer_opts {
    int resume; /* LF_RESUME_*: continue from out_dir/ckpt/latest */
    /* Preemption (docs/checkpoints.md, "Long runs and preemption"). The run polls
     * *stop_flag (when given) and lf_trainer_request_stop's flag at every
     * step boundary; non-zero on any rank (agreed by an all-reduce of the
     * maximum, so every rank stops at the same step) ends the run there:
     * the step in progress finishes, a checkpoint of the step reached is
     * saved (unless that step was just saved), and lf_trainer_run returns
     * LF_ERR_PREEMPTED. The library installs no signal handler: a caller's
     * handler stores the signal number into the flag (async-signal-safe). */
    volatile sig_atomic_t *stop_flag;
    /* The communicator to train on, borrowed (it must outlive the trainer);
     * NULL: the trainer opens comm.backend with comm.timeout_s itself and
     * closes it in lf_trainer_free. Its size must be cfg->world_size. */
    lf_comm *comm;
    const char *init_from; /* safetensors weights to start from, or NULL; or a PEFT LoRA adapter
                            * directory (adapter_config.json): its base, then its adapters */
    const char *base;      /* with an adapter init_from: the base model directory (NULL: the
                            * adapter's base_model_name_or_path when that is a local directory) */
    /* Sinks the caller adds to the trainer's bus besides those the config
     * asks for (log.jsonl always; TensorBoard, Prometheus when enabled):
     * e.g. the CLI's console. Ownership passes to the trainer. */
    lf_obs_sink *sinks[4];
    int n_sinks;
    /* Called from the stall watchdog thread when monitor.alerts.stall.action
     * is "exit": it must end the process (library code never exits). */
    void (*on_fatal)(const char *msg, void *user);
    void *user;
    /* Test hooks (0 = off): at that step (1-based) make the gradient NaN,
     * multiply the observed loss by 100, or sleep inject_stall_seconds.
     * The NaN and spike hooks fire once per process (a rollback re-runs
     * step numbers: the replayed step is clean). */
    long inject_nan_step, inject_spike_step, inject_stall_step;
    int inject_repeat; /* the NaN and spike hooks fire every time their step is run */
    /* Move the data cursor forward by this many steps' batches once the run
     * is created (after --resume): step s then reads the rows data step
     * s + offset would, offset = the checkpoint's data_cursor.batch_offset +
     * skip_batches. It is saved with every checkpoint (not applied again by
     * a later resume). What a rollback does to the cursor, as an explicit
     * knob: a run resumed from checkpoint c with skip_batches k - c never
     * sees the rows of steps c+1..k. >= 0. */
    long skip_batches;
    /* fp16: steps (1-based, up to 16) whose gradients are made to overflow (an inf put in h.0's c_fc weight gradient) */
    long inject_overflow_steps[16];
    int n_inject_overflow;
    double inject_stall_seconds;
    /* checkpoint.async: the background writer sleeps this long before its
     * first file operation, so a write is still in flight when the next
     * save starts (two failures then meet at one step boundary). */
    double inject_write_delay_seconds;
} lf_trainer_opts;

/* With several ranks every rank calls create, run and free, with the same
 * configuration (checked: the hash of the resolved configuration must agree).
 * Rank 0 alone writes out_dir (config.resolved.json, log.jsonl, TensorBoard,
 * checkpoints), serves Prometheus and feeds the caller's sinks; the other
 * ranks write nothing there and emit nothing, but return the same errors.
 * Resuming and --init-from read the files on rank 0 and broadcast them, so
 * only rank 0 needs out_dir; every rank reads the dataset.
 * A failure on one rank only (a file, memory, a collective that timed out)
 * leaves the others waiting in their next collective until comm.timeout_s:
 * after any failed call with lf_comm_size(lf_trainer_comm(t)) > 1, the caller
 * ends the job with lf_comm_abort(). Failures decided from reduced values (a
 * non-finite loss or gradient with nan.action stop, fp16 overflow at the
 * minimum scale, an empty batch) happen on every rank at the same step. */
lf_status lf_trainer_create(lf_trainer **out, const lf_train_config *cfg, const lf_trainer_opts *opts);
/* Run until train_iters (or train.stop_at when it is smaller). LF_OK when it got there; LF_ERR_PREEMPTED when a
 * stop was requested (opts.stop_flag, lf_trainer_request_stop) and the run
 * stopped at a step boundary after saving a checkpoint of that step (the
 * run is recorded "preempted"; resuming it continues bit for bit as if it
 * had not stopped); any other status is a failure.
 * Checkpoints: with checkpoint.async the save of a step is written by a
 * background thread while the next steps run (one in flight; every return
 * from this function, a stop included, comes after it is complete). A save
 * that fails, synchronous or not, is decided at the next step boundary by
 * checkpoint.on_error: stop returns its error (LF_ERR_IO, the message naming
 * the file and the errno), continue logs it (a checkpoint_error record) and
 * trains on; the decision is agreed over the ranks.
 * Alerts with action rollback reload the last complete checkpoint in
 * process and skip the batches since it (a rollback record); the one after
 * monitor.alerts.max_rollbacks, or one with no checkpoint to go back to,
 * returns LF_ERR_NUMERIC with the history. */
lf_status lf_trainer_run(lf_trainer *t);
/* Ask a run to stop at the next step boundary (checkpoint, then
 * LF_ERR_PREEMPTED); reason: non-zero, e.g. the signal number (reported).
 * Async-signal-safe and thread-safe (one store); harmless on NULL. */
void lf_trainer_request_stop(lf_trainer *t, int reason);
/* Optimizer steps completed so far (the step of the last checkpoint after a
 * preemption); the reason a stop was agreed on (0: none). */
long lf_trainer_step(const lf_trainer *t);
int lf_trainer_stop_reason(const lf_trainer *t);
void lf_trainer_free(lf_trainer *t);
const char *lf_trainer_errmsg(const lf_trainer *t);
lf_model *lf_trainer_model(lf_trainer *t);
/* Where model.block_size came from when the configuration left it out and
 * --init-from named a Hugging Face RoPE model: e.g. "min(max_position_embeddings
 * 131072, 2048)", with ", cut to fit dataset 'D'" when the data is shorter;
 * "" when the configuration set it (or for any other run). Valid while t lives. */
const char *lf_trainer_block_size_origin(const lf_trainer *t);
/* This rank's copy of the whole parameters (lf_model_num_params floats, the
 * parameter table's flat layout) into host dst, on any backend
 * (lf_model_params is backend memory, readable in place only where
 * lf_backend_host_memory). Not a collective. LF_OK; LF_ERR_INVALID_ARG for
 * NULL; LF_ERR_UNSUPPORTED under ZeRO-3 (no rank holds them all; a
 * checkpoint does); a failure of the backend (lf_backend_sync). */
lf_status lf_trainer_copy_params(lf_trainer *t, float *dst);
/* The communicator the trainer runs on (its own or opts.comm), for
 * lf_comm_rank/size and lf_comm_abort; NULL when create failed before it
 * was opened. */
/* What this rank holds, by the backend's own count of its allocations
 * (the CPU: lf_alloc_usable; cpu-fenced: its mapped regions):
 * parameters (the model's buffers, plus the ZeRO-3 shard), gradients (the
 * model's, plus the ZeRO-2/3 shard) and AdamW moments. Compare with
 * lf_mem_plan's params_bytes, grads_bytes, optim_bytes. */
void lf_trainer_state_bytes(const lf_trainer *t, size_t *params, size_t *grads, size_t *optim);
/* Bytes of pinned (page-locked) host memory the trainer holds: ZeRO-Offload's
 * moments, gradient copy and parameter staging on a backend that pins (cuda);
 * 0 otherwise. */
size_t lf_trainer_pinned_bytes(const lf_trainer *t);
lf_comm *lf_trainer_comm(lf_trainer *t);
/* The trainer's backend instance (owned by the trainer). */
lf_backend *lf_trainer_backend(lf_trainer *t);

/* Loading a model from a checkpoint (lf_checkpoint_read_model,
 * lf_checkpoint_load_model) is checkpoint.h's, included above. */

/* ---------------------------------------------------------------- optimizer */
/* One optimizer step on m's gradients: global norm (returned in *norm), clip
 * to cfg->grad_clip (torch's clip_grad_norm_), AdamW with step count t >= 1
 * and learning rate lr; weight decay only on tensors whose table entry says
 * decay. Non-finite norm: LF_ERR_NUMERIC, parameters untouched. */
lf_status lf_adamw_step(lf_model *m, lf_backend *be, float *mom1, float *mom2, long t, float lr,
                        const lf_train_config *cfg, double *norm);
/* The two halves of lf_adamw_step: the global gradient norm, and the clipped
 * AdamW update given that norm (LF_ERR_NUMERIC for a non-finite norm). */
double lf_grad_norm(lf_model *m, lf_backend *be);
lf_status lf_adamw_apply(lf_model *m, lf_backend *be, float *mom1, float *mom2, long t, float lr,
                         const lf_train_config *cfg, double norm);

/* ---------------------------------------------------------------- benchmark */
/* ---- DPO (src/train/dpo.c; docs/training.md "DPO") -------------------------
 * TRL's DPOTrainer with loss_type "sigmoid", f_divergence reverse KL,
 * label_smoothing 0. A sequence's log-prob is the sum of log p(token) over
 * its completion tokens (the targets that are not -1). Per pair, with
 * policy log-probs pc, pr and reference log-probs rc, rr of the chosen and
 * rejected completions:
 *   z = beta * ((pc - rc) - (pr - rr)),  loss = -logsigmoid(z),
 *   d loss / d pc = -beta * sigmoid(-z) = -d loss / d pr,
 *   rewards: chosen beta * (pc - rc), rejected beta * (pr - rr). */
typedef struct lf_dpo_pair_result {
    double loss;
    double dlogp_chosen, dlogp_rejected; /* d loss / d pc, d loss / d pr */
    double reward_chosen, reward_rejected;
} lf_dpo_pair_result;
void lf_dpo_pair(double beta, double pc, double pr, double rc, double rr, lf_dpo_pair_result *out);

/* Sums over pairs (divide by pairs for TRL's means). */
typedef struct lf_dpo_stats {
    double pairs, loss, reward_chosen, reward_rejected, accuracy, margin, logp_chosen, logp_rejected;
} lf_dpo_stats;
#define LF_DPO_STATS_N 8 /* doubles in lf_dpo_stats, for reductions */

/* Sequence log-probs of P pairs: inputs/targets (2P,T), rows 2i chosen and
 * 2i+1 rejected; logps (2P) in the same order. A forward without gradients. */
lf_status lf_dpo_logps(lf_model *m, const int32_t *inputs, const int32_t *targets, int P, int T, double *logps);

/* One micro-batch of P pairs (rows as lf_dpo_logps) against ref (2P
 * reference log-probs, same order). With fo->dloss > 0 the gradient of
 * fo->dloss * sum over pairs of the pair loss is ADDED to the model's
 * gradients (a forward, the per-row weights d loss / d logp on the dlogits,
 * a backward); with dloss 0 only the forward. The pairs' figures are added
 * to *acc. */
lf_status lf_dpo_forward_backward(lf_model *m, const int32_t *inputs, const int32_t *targets, int P, int T,
                                  const double *ref, double beta, const lf_forward_opts *fo, lf_dpo_stats *acc);

typedef struct lf_bench_result {
    int steps;
    double ms_per_step; /* median */
    double ms_min, ms_max;
    double tokens_per_sec;  /* B*T / median step time */
    double flops_per_token; /* 6N + 12*L*C*T */
    double model_flops_per_sec;
    double peak_flops; /* what MFU is measured against */
    double mfu;
    size_t num_params;
    size_t trainable_params; /* what AdamW updates: num_params, or with LoRA the adapters' */
    size_t activation_bytes; /* what lf_model_plan allocated for B x T and the policy */
} lf_bench_result;

/* Train `steps` timed steps (after `warmup` untimed ones) of the model cfg on
 * random tokens from random weights: forward, backward, clip 1.0, AdamW,
 * with activations planned for B x T under the recompute policy; bf16: on
 * the bf16 backend of the default one (lf_backend_precision_name: "cpu-bf16",
 * "cuda-bf16"). On a device backend the step's memory plan is checked
 * against the device's free memory first (LF_ERR_NOMEM with the plan's
 * advice). peak_flops <= 0: measured with lf_probe_peak_flops on the CPU
 * backends; on a device none is known (peak_flops and mfu stay 0). */
lf_status lf_bench_train(const lf_model_config *cfg, int B, int T, lf_recompute recompute, int bf16, int steps,
                         int warmup, double peak_flops, lf_bench_result *out);
/* lf_bench_train with LoRA adapters (lora enabled; NULL or no targets: full
 * fine-tuning) attached to the random base as the trainer attaches them
 * (lf_model_lora_attach): the base frozen, AdamW on the adapters; FLOPs are
 * still counted as the model's 6N + 12*L*C*T. */
lf_status lf_bench_train_lora(const lf_model_config *cfg, const lf_lora_config *lora, int B, int T,
                              lf_recompute recompute, int bf16, int steps, int warmup, double peak_flops,
                              lf_bench_result *out);

/* Measured fp32 FMA rate of this machine with all backend threads (FLOP/s):
 * lf_backend_cpu_peak_flops (independent FMA chains in registers with the
 * kernel of the backend's ISA level, the best round of about `seconds`). */
double lf_probe_peak_flops(double seconds);

#ifdef __cplusplus
}
#endif
#endif
