/*
 * The trainer's private state and the internal functions its rooms share.
 *
 * The trainer (include/llmforge/train.h: lf_trainer_create / run / free)
 * runs the training loop: batches from the dataset, forward/backward over
 * the micro-batches of a step, gradient clipping, AdamW, periodic
 * evaluation, log.jsonl, checkpoints and exact resume. It lives in rooms,
 * one responsibility each (each file's top comment states its invariants):
 *
 *   trainer_create.c  create and free, accessors: backend, communicator,
 *                     dataset, model, memory plan, optimizer state
 *   trainer_run.c     the loop (lf_trainer_run) and what a step boundary does
 *   trainer_step.c    one optimizer step: data, forward/backward, fp16,
 *                     alerts on loss and gradient, AdamW
 *   trainer_dp.c      data parallel: the communicator, gradient sums,
 *                     collectives on backend memory, bf16 on the wire
 *   trainer_zero.c    ZeRO stages 1-3 and ZeRO-Offload, sharded checkpoints
 *   trainer_ckpt.c    checkpoint writing: state JSON, sync and async saves,
 *                     checkpoint.on_error
 *   trainer_resume.c  resume (and the load a rollback makes)
 *   trainer_eval.c    eval.tasks, evaluation during training, best model
 *   trainer_emit.c    records: the bus and its sinks, events, alerts
 *   trainer_watch.c   stall watchdog, stop requests (preemption), rollback
 *
 * Internal functions shared between the rooms carry lf__ names and are
 * declared here; everything else is static in its room. Only the training
 * thread touches the struct, except: the stall watchdog (wd_mu guards
 * last_progress and stall_reported; obs_mu serialises emission) and the
 * checkpoint writer (reads only its snapshot and what never changes after
 * create; ckw_done is atomic).
 */
#ifndef LF_TRAINER_IMPL_H
#define LF_TRAINER_IMPL_H
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include "llmforge/backend.h"
#include "llmforge/checkpoint.h"
#include "llmforge/data.h"
#include "llmforge/eval.h"
#include "llmforge/hf.h"
#include "llmforge/loss_scaler.h"
#include "llmforge/obs.h"
#include "llmforge/plan.h"
#include "llmforge/train.h"
#include "train_impl.h"
#include "train_report.h"

#define CKERR_MAX 4

struct lf_trainer {
    lf_train_config cfg;
    lf_model_config mcfg; /* the model as built: vocab from the dataset */
    lf_trainer_opts opts;
    lf_backend *be;
    lf_model *model;
    lf_dataset *ds;
    /* train.objective dpo (trainer_dpo.c); NULL otherwise */
    struct lf__dpo *dpo;
    lf_loader *loader; /* training batches, prefetched; opened at the current step */
    float *m, *v;      /* AdamW moments (backend memory; host memory when offloaded) */
    int offload;       /* offload_optimizer cpu on a device backend: moments and AdamW on the host */
    float *off_g;      /* offload: host copy of the (shard's) gradients, indexed as m */
    int pinned;        /* offload: m, v, off_g and host_params are the backend's pinned host memory */
    size_t pinned_bytes;
    float *host_params;        /* staging for checkpoints (host); on a host-memory backend the */
    float *host_m, *host_v;    /* parameters and moments themselves (no copy) */
    int32_t *inputs, *targets; /* (A, B, T) all micro-batches of a step */
    int32_t *pos;              /* data.packing: (A, B, T) each token's position in its example; else NULL */
    lf_sft_pack *pack[2];      /* data.packing: the rows of the train and val splits (NULL: none) */
    int64_t real_tokens;       /* data.packing: example (non-padding) tokens of the last step, all ranks */
    long step;                 /* optimizer steps completed */
    double best_val;
    double last_val, last_train_eval;
    long last_eval_step;  /* step of last_val */
    double best_score;    /* best value of checkpoint.best_metric so far */
    double last_score;    /* its value at the last evaluation */
    long best_eval_step;  /* step whose evaluation set best_score (-1: none yet) */
    lf_eval_tasks *tasks; /* eval.tasks (NULL: loss only) */
    lf_eval_results *task_res;
    lf_tokenizer *tok;  /* for the tasks */
    char best_ckpt[64]; /* step directory holding the best val loss so far ("" = none) */
    lf_obs *obs;
    pthread_mutex_t obs_mu;
    /* data parallel */
    lf_comm *comm; /* own (opened from comm.backend) or opts.comm */
    int own_comm;
    int rank, world;
    /* ZeRO (zero_optimization.stage >= 1): rank r's shard is, for every unit
     * u of the model (lf_model_num_units), the part lf_comm_partition(n_u,
     * W, r) of that unit: flat elements [pc_lo[u], pc_lo[u] + pc_n[u]),
     * held at sh_off[u] of the shard buffers. */
    int zstage;
    int n_units;
    size_t *unit_lo, *unit_n, *pc_lo, *pc_n, *sh_off;
    size_t shard_n;      /* floats in this rank's shard */
    float *gshard;       /* stage >= 2: the shard's gradient, summed over ranks and micro-batches */
    float *pshard;       /* stage 3: the shard's parameters (fp32 master weights) */
    int zbad;            /* stage >= 2, fp16: first tensor whose local unit gradient overflowed (-1) */
    double hook_comm_ms; /* collectives made from the model's unit hooks */
    /* comm.overlap (ZeRO-2/3 on an asynchronous kind): the unit whose
     * reduce-scatter is in flight, its buffer and ticket (pend_u -1: none) */
    int overlap;
    /* comm.overlap at stages 0-1 on an asynchronous kind: each unit's
     * gradient sum (stage 0 all-reduce, stage 1 reduce-scatter) started as
     * its backward ends on the step's last micro-batch (dp_armed) */
    int overlap01, dp_armed;
    int pend_u;
    float *pend_grad;
    int64_t pend_ticket;
    /* communication_data_type bf16 (several ranks): the gradient sums go
     * through bf16 staging on the backend, gbf_n elements each; two with
     * overlap (the unit in flight and the next), gbf_cur the next to use */
    int grad_bf16;
    uint16_t *gbf[2];
    size_t gbf_n;
    int gbf_cur;
    uint16_t *pend_bf;     /* overlap, bf16: the in-flight unit's staging (NULL: fp32) */
    float *xfer;           /* host staging of the collectives on backend memory (dev_*; NULL when */
    size_t xfer_n;         /* the backend's memory is the host's, or one rank): its floats */
    long opt_t;            /* AdamW updates applied (skipped steps do not count) */
    long skipped;          /* steps skipped by an alert or an fp16 overflow */
    lf_loss_scaler scaler; /* fp16 */
    double *spike_win;     /* ring of the last accepted losses */
    int spike_n, spike_pos;
    /* stall watchdog */
    pthread_t wd;
    int wd_running, wd_stop, stall_reported;
    pthread_mutex_t wd_mu;
    pthread_cond_t wd_cv;
    double last_progress; /* lf_time_now() when the last step (or eval/checkpoint) finished */
    /* throughput accounting */
    double peak_flops, flops_per_token;
    size_t planned_bytes;
    size_t planned_act_bytes;
    /* files every checkpoint carries, so it stands alone: the tokenizer's
     * vocabulary and a Hugging Face config.json */
    lf_ckpt_file extra[8];
    int n_extra;
    /* LoRA (trainer_lora.c): adapter_config.json, and the base's absolute path ("" = seeded init) */
    char *lora_config;
    size_t lora_config_len;
    char lora_base[LF_PATH_MAX];
    char adapter_dir[LF_PATH_MAX];      /* --init-from a PEFT adapter directory ("" = none) */
    char adapter_base[LF_PATH_MAX * 2]; /* ... and its base, which opts.init_from then names */
    char *tok_data, *hf_config, *tpl_data;
    char *hf_kept[4]; /* --init-from an HF directory: its own files, kept (trainer_ckpt.c) */
    lf_hf_model *hf;  /* --init-from a Hugging Face directory (closed after the weights are read) */
    /* --init-from a RoPE model with model.block_size left out: where the
     * default came from (lf_trainer_block_size_origin); "" otherwise */
    char block_origin[160];
    int block_defaulted;
    char tok_spec[LF_PATH_MAX + 32]; /* the spec as stored in checkpoints */
    char ckpt_root[LF_PATH_MAX + 8];
    lf__treg *treg;                      /* model registry and eval.suite (train_registry.c) */
    char resumed_dir[LF_PATH_MAX + 64];  /* the checkpoint --resume loaded (rank 0) */
    char rollback_dir[LF_PATH_MAX + 64]; /* the checkpoint the last rollback loaded (rank 0) */
    char *plan_json;                     /* the memory plan for the run_info record (train_report.c) */
    volatile sig_atomic_t stop_req;      /* lf_trainer_request_stop's reason (0: none) */
    int stop_reason;                     /* the reason agreed at the boundary the run stopped at (0: none) */
    long saved_step;                     /* step of the last checkpoint saved or resumed from (-1: none) */
    /* checkpoint.async: the background writer, one snapshot in flight
     * (ckpt_async_start / ckpt_reap). The snapshot owns snap_* (host, the
     * whole model) and its state text until the writer is joined. */
    pthread_t ckw;
    int ckw_running;      /* started and not yet joined */
    _Atomic int ckw_done; /* set by the writer as its last act */
    struct ckpt_job *job; /* the snapshot in flight and what became of it */
    float *snap_params, *snap_m, *snap_v;
    /* failed saves waiting for the step boundary (checkpoint.on_error), in
     * the order they failed: with async saves two can meet between two
     * boundaries (the write in flight, reaped when the next save starts,
     * and that next save), so each is kept and each is reported */
    int ckerr_pending; /* how many of ckerr[] */
    long ckerr_last;   /* the latest failed save's step on any rank, as lf__trainer_stop_agreed last agreed */
    struct ckpt_failure {
        lf_status st;
        long step;
        char msg[1024];
    } ckerr[CKERR_MAX];
    /* rollback (monitor.alerts.*.action rollback) */
    long data_off;              /* batches skipped: step s reads the rows of data step s + data_off */
    int n_rollbacks;            /* rollbacks made by this run (and the runs it resumed) */
    char rb_hist[1024];         /* "step 9 -> 8 (nan); ..." for the message that stops the run */
    int nan_fired, spike_fired; /* the test hooks fired (they fire once unless opts.inject_repeat) */
    char errmsg[1024];
};

/* ---------------------------------------------------------------- one step */

/* What one step did (lf__trainer_step), for its record and the loop. */
typedef struct step_result {
    double loss; /* as observed (a test hook may inflate it) */
    double norm; /* global gradient norm before clipping */
    float lr;
    int skipped;       /* an alert or an fp16 overflow skipped the update */
    int overflow;      /* fp16: the gradients overflowed */
    double loss_scale; /* fp16: the scale this step used */
    double data_ms, forward_ms, backward_ms, optimizer_ms;
    double comm_ms;        /* waited for collectives (token count, loss, gradients): exposed; not in the
                             other phases */
    double comm_hidden_ms; /* collectives' time behind computation (comm.overlap on nccl: lf_comm_times) */
    const char *rollback;  /* an alert asked for a rollback: its kind ("nan", "loss_spike"); NULL: none */
    lf_dpo_stats dpo;      /* train.objective dpo: the step's sums over pairs, all ranks */
    int has_dpo;
    char alert_msg[256];
} step_result;

static inline size_t moments_n(const lf_trainer *t) { return t->zstage ? t->shard_n : lf_model_num_params(t->model); }

/* Staging copies between backend memory and the host buffers; on a
 * host-memory backend the host buffers are the backend's own, and there is
 * nothing to copy (the backend is told when parameters changed under it). */
static inline void stage_out(const lf_trainer *t, void *host, const void *dev, size_t bytes) {
    if (host != dev) lf_backend_to_host(t->be, host, dev, bytes);
}
static inline void stage_in(const lf_trainer *t, void *dev, const void *host, size_t bytes) {
    if (host != dev) lf_backend_to_device(t->be, dev, host, bytes);
    else lf_backend_params_changed(t->be);
}
/* A copy of the moments into host dst: they are host memory when offloaded. */
static inline void moments_out(const lf_trainer *t, void *dst, const void *src, size_t bytes) {
    if (t->offload) memcpy(dst, src, bytes);
    else lf_backend_to_host(t->be, dst, src, bytes);
}

/* ---- trainer_create.c */
/* st, with lf_last_error() kept as the trainer's errmsg. */
lf_status lf__trainer_fail(lf_trainer *t, lf_status st);

/* ---- trainer_step.c */
/* One optimizer step from t->step: fills *o; an alert asking for a rollback
 * returns LF_OK with o->rollback set (the update not applied). */
lf_status lf__trainer_step(lf_trainer *t, step_result *o);
/* The training loader at the current data step (step + data_off). */
lf_status lf__trainer_open_loader(lf_trainer *t);
/* Round buf (backend memory, flat elements [lo, lo+n)) to fp16; the index
 * of the first tensor holding a non-finite value, -1 if none. */
int lf__fp16_round_range(lf_trainer *t, float *buf, size_t lo, size_t n);
/* v summed over the ranks, the wait timed into o->comm_ms. */
lf_status lf__step_sum_f64(lf_trainer *t, step_result *o, double *v, size_t n);

/* ---- trainer_dpo.c (train.objective dpo) */
typedef struct lf__dpo lf__dpo;
/* The pairs and the reference log-probs (computed from the initial model,
 * or read back when resumed); a dpo dataset without the objective is
 * refused. Nothing (t->dpo NULL) for the lm objective. */
lf_status lf__dpo_open(lf_trainer *t);
void lf__dpo_free(lf__dpo *d);
/* The step's pairs into t->inputs/targets; *count: pairs in the global batch. */
lf_status lf__dpo_step_load(lf_trainer *t, int64_t *count);
/* Micro-batch a: forward, DPO weights, backward; *loss_sum: its pair losses. */
lf_status lf__dpo_micro(lf_trainer *t, int a, const lf_forward_opts *fo, double *loss_sum);
/* The step's metric sums into o (reduced over the ranks). */
lf_status lf__dpo_step_stats(lf_trainer *t, step_result *o);
double lf__dpo_epoch(const lf_trainer *t);
/* eval.iters batches of pairs of a split: mean pair loss and sums (NAN, 0 without pairs). */
lf_status lf__dpo_estimate(lf_trainer *t, lf_split split, double *loss, lf_dpo_stats *out);
/* TRL's six metrics "<prefix>/rewards/..." and "<prefix>/logps/..." as means; returns how many (0 or 6). */
int lf__dpo_metrics(const lf_dpo_stats *s, const char *prefix, lf_obs_scalar *sc, char (*names)[160], int n_max);

/* ---- trainer_dp.c */
/* The communicator (the caller's or comm.backend's), checked against the
 * configuration's world size and the other ranks' configuration. */
lf_status lf__dp_open_comm(lf_trainer *t);
/* The host staging of collectives on backend memory (none when in place). */
lf_status lf__dp_xfer_alloc(lf_trainer *t);
/* recv (n) := every rank's part; both backend memory, in place allowed. */
lf_status lf__dp_all_gather(lf_trainer *t, const float *send, float *recv, size_t n);
/* communication_data_type bf16: the gradients' staging on the backend. */
lf_status lf__dp_gbf_alloc(lf_trainer *t);
lf_status lf__dp_gbf_fits(const lf_trainer *t, const char *what, size_t n);
/* recv := this rank's part of the sum of the gradient send (n) over ranks. */
lf_status lf__dp_grad_reduce_scatter(lf_trainer *t, const float *send, float *recv, size_t n);
/* Stage 0: the whole gradient summed over ranks, in buckets. */
lf_status lf__dp_all_reduce_grads(lf_trainer *t, step_result *o);
/* Stages 0-1 with comm.overlap: the per-unit sums started in backward. */
lf_status lf__dp_overlap_setup(lf_trainer *t);

/* ---- trainer_zero.c */
lf_status lf__zero_layout(lf_trainer *t);
lf_status lf__zero_partition(lf_trainer *t);
lf_status lf__zero_reduce_scatter_all(lf_trainer *t, step_result *o);
lf_status lf__zero_grad_norm(lf_trainer *t, step_result *o, double *norm);
void lf__zero_scale_grads(lf_trainer *t, float f);
lf_status lf__zero_fp16_sum_check(lf_trainer *t, step_result *o, int *bad);
lf_status lf__zero_adamw(lf_trainer *t, step_result *o, float lr, double norm);
lf_status lf__offload_adamw_all(lf_trainer *t, float lr, double norm);
lf_status lf__zero_save(lf_trainer *t, const char *state, char **saved);
lf_status lf__zero_resume_read(lf_trainer *t, const char *path, char **dir, char **state);

/* ---- trainer_ckpt.c */
/* The files every checkpoint carries (tokenizer, chat template, config.json). */
lf_status lf__ckpt_extras(lf_trainer *t);
/* LoRA's checkpoint files (trainer_lora.c): adapter_config.json built once
 * the model has its adapters; trainer_state.json's "lora" object; the check
 * that a resume keeps the checkpoint's base; the two PEFT files of a save
 * appended to extra (*owned: the safetensors bytes, lf_free after the save). */
struct cJSON;
lf_status lf__lora_setup(lf_trainer *t);
/* --init-from a PEFT adapter directory: its lora config into cfg.lora (keys
 * that disagree refused), opts.init_from pointed at its base; then, once the
 * base is loaded, its adapters into the model (rank 0; not on --resume). */
lf_status lf__lora_init_from_adapter(lf_trainer *t);
lf_status lf__lora_load_adapter(lf_trainer *t);
void lf__lora_state_json(const lf_trainer *t, struct cJSON *state);
lf_status lf__lora_check_resume(const lf_trainer *t, const char *dir, const struct cJSON *state);
lf_status lf__lora_ckpt_extras(const lf_trainer *t, const float *params, lf_ckpt_file *extra, int *n, char **owned);
/* checkpoint.async: the writer's job and snapshot buffers (rank 0); and
 * their release, joining a writer still running (lf_trainer_free). */
lf_status lf__ckpt_async_alloc(lf_trainer *t, size_t n);
void lf__ckpt_async_free(lf_trainer *t);
/* A checkpoint of the step reached; may_async: with checkpoint.async in the
 * background. */
lf_status lf__trainer_save(lf_trainer *t, int may_async);
void lf__ckpt_poll(lf_trainer *t);
void lf__ckpt_wait(lf_trainer *t, const char *why);
void lf__ckpt_error_note(lf_trainer *t, lf_status st, long step, const char *msg);
lf_status lf__ckpt_error_decide(lf_trainer *t, int at_end);

/* ---- trainer_resume.c */
/* Load the checkpoint path resolves to; rollback: in process, no record. */
lf_status lf__trainer_resume(lf_trainer *t, const char *path, int rollback);

/* ---- trainer_eval.c */
lf_status lf__trainer_load_tasks(lf_trainer *t);
lf_status lf__trainer_eval(lf_trainer *t);
lf_status lf__trainer_export_best(lf_trainer *t);

/* ---- trainer_emit.c */
void lf__trainer_emit(lf_trainer *t, lf_obs_record *r);
void lf__trainer_event(lf_trainer *t, const char *name, const char *alert_kind, const char *json);
void lf__trainer_json_escape(char *out, size_t cap, const char *s);
void lf__trainer_alert(lf_trainer *t, const char *kind, const char *action, const char *msg);
lf_status lf__trainer_open_sinks(lf_trainer *t);
/* The "start" and "run_info" events of lf_trainer_run. */
void lf__trainer_emit_start(lf_trainer *t);
/* The train record of the step just done (dt seconds). */
void lf__trainer_emit_step(lf_trainer *t, const step_result *sr, double dt);
/* The "end" event of the run (st: its status). */
void lf__trainer_emit_end(lf_trainer *t, lf_status st);

/* ---- trainer_watch.c */
/* Sleeps s seconds through signals (the test hooks' stalls and delays). */
void lf__trainer_sleep(double s);
void lf__trainer_progress(lf_trainer *t);
void lf__trainer_watchdog_start(lf_trainer *t);
void lf__trainer_watchdog_stop(lf_trainer *t);
lf_status lf__trainer_stop_agreed(lf_trainer *t, int *reason, int *ckerr);
lf_status lf__trainer_rollback(lf_trainer *t, long bad_step, const char *kind, const char *alert_msg);
lf_status lf__trainer_preempt(lf_trainer *t, int reason);

#endif
