/*
 * The training loop: batches from the dataset, forward/backward over the
 * micro-batches of a step, gradient clipping, AdamW, periodic evaluation,
 * log.jsonl, checkpoints and exact resume.
 *
 * Invariants:
 *  - Step s (0-based) reads global rows s*A*B .. (s+1)*A*B-1 of the train
 *    split (A accumulation steps, B micro-batch); micro-batch a takes rows
 *    s*A*B + a*B ... So the data cursor is a function of the step alone and a
 *    resumed run reads exactly the batches the uninterrupted run would.
 *  - The loss of a step is the mean over every non-ignored target of all its
 *    micro-batches: each micro-batch's dlogits are scaled by 1/(targets in the
 *    whole step), so A micro-batches of B equal one batch of A*B.
 *  - Every random stream is counter-based (seed, purpose, index): dropout
 *    keys are (step, micro-batch), evaluation rows are (step, batch). Nothing
 *    random is carried in memory, so resume is bit-exact.
 *  - Gradient clipping as torch.nn.utils.clip_grad_norm_: coef =
 *    min(1, max_norm / (norm + 1e-6)), folded into the AdamW update.
 *  - Data parallel over the communicator (docs/distributed.md), ZeRO stage 0:
 *    every rank holds the whole model and AdamW state; rank r reads rows
 *    ((s*A + a)*W + r)*B + b (src/data/loader.c), so a step's global batch is
 *    the same set of rows for any layout with the same A*W*B. Before the
 *    forward pass the ranks sum their target counts (every rank divides by
 *    the global count); after backward they sum the gradients in buckets of
 *    comm.bucket_elems (not overlapped with backward: the collectives are
 *    blocking). The sums are in rank order and bitwise identical on every
 *    rank, so the norm, clipping, alerts, the fp16 overflow decision and
 *    AdamW give the same bits everywhere and the replicas never drift.
 *    Rank 0 alone writes out_dir and emits records; resume state is read by
 *    rank 0 and broadcast.
 *  - No collective is handed backend memory directly: gradient buckets,
 *    ZeRO units and shards go through dev_all_reduce / dev_reduce_scatter /
 *    dev_all_gather (in place on host memory and with a device communicator,
 *    staged through one host buffer otherwise), and checkpoints through the
 *    host copies (stage_out/in), broadcast as bytes (host memory).
 *  - Everything a person or a tool watches goes out as records on one bus
 *    (obs.h): log.jsonl always, TensorBoard and Prometheus when configured,
 *    and whatever sinks the caller adds (the CLI's console). Emission is
 *    serialised by obs_mu because the stall watchdog emits from its thread.
 *  - Preemption: a stop request (the caller's signal flag, or
 *    lf_trainer_request_stop) is read only at the top of the loop, i.e. at a
 *    step boundary after the previous step's evaluation and checkpoint, and
 *    agreed over the ranks there (an all-reduce of the maximum), so every
 *    rank leaves at the same step, the checkpoint holds exactly that step,
 *    and nobody waits in a collective the others never reach. A signal that
 *    arrives during a save changes nothing but the flag: the save finishes
 *    (temporary directory, fsync, rename), then the run stops.
 *  - Saving is two halves: a snapshot (the state JSON and host copies of
 *    parameters and moments, taken at the step boundary) and the write of
 *    that snapshot (prune what it makes obsolete, write, commit, rotate).
 *    The write reads only the snapshot, never the live model. With
 *    checkpoint.async the snapshot owns buffers of its own (snap_*, three
 *    copies of the parameters, rank 0) and the write runs on a writer
 *    thread while training goes on; at most one is in flight (the next save
 *    joins it first), and the end of the run, a stop, a rollback and
 *    lf_trainer_free join it, so no path returns with a write running. Its
 *    outcome is taken on the training thread (records are emitted there):
 *    at a step boundary when it is done, else when it is joined. The
 *    bytes are those of a synchronous save: the same snapshot, the same
 *    writer code, and trainer_state.json's config leaves out
 *    checkpoint.async.
 *  - A failed save (sync or async) is not an immediate exit: it is kept
 *    and decided at the next step boundary by checkpoint.on_error, after an
 *    all-reduce (the one that agrees on stop requests) says whether any
 *    rank holds one, so every rank stops at the same step or none does.
 *    `latest` is replaced only by a complete save (checkpoint.c), so it
 *    never names the failed one.
 *  - Alerts: a non-finite loss or gradient stops the run (no checkpoint),
 *    skips the step or rolls back; a loss spike (z-score over the previous
 *    accepted steps) is logged, skips the step or rolls back; a stall (no
 *    step for N seconds) is reported by a watchdog thread, which may also
 *    end the process via on_fatal. A skipped step advances the data but not
 *    AdamW's step count (opt_t), as DeepSpeed's skipped steps do; both
 *    counters and the spike window are saved, so resume stays exact.
 *  - Rollback: the alert's update is not applied; the last complete
 *    checkpoint is loaded in process by the resume code (resume_from), and
 *    the data cursor moves past the window: the loader reads data step
 *    step + data_off, and a rollback from step k to checkpoint c adds
 *    k - c to data_off (see rollback()). data_off and the rollback count
 *    are saved in trainer_state.json, so a resume keeps them; a run resumed
 *    from c with opts.skip_batches = k - c is the rolled-back run, bit for
 *    bit (PaLM, Chowdhery et al. 2022, sec. 5.1; OPT's logbook: restart from
 *    a checkpoint before the spike and skip the batches that preceded it).
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "backend/backend_impl.h"
#include "llmforge/checkpoint.h"
#include "llmforge/data.h"
#include "llmforge/eval.h"
#include "llmforge/loss_scaler.h"
#include "llmforge/plan.h"
#include "llmforge/train.h"
#include "llmforge/hf.h"
#include "train_impl.h"
#include "train_report.h"

/* failed saves one step boundary can hold (trainer.ckerr) */
#define CKERR_MAX 4

struct lf_trainer {
    lf_train_config cfg;
    lf_model_config mcfg;       /* the model as built: vocab from the dataset */
    lf_trainer_opts opts;
    lf_backend *be;
    lf_model *model;
    lf_dataset *ds;
    lf_loader *loader;         /* training batches, prefetched; opened at the current step */
    float *m, *v;              /* AdamW moments (backend memory; host memory when offloaded) */
    int offload;               /* offload_optimizer cpu on a device backend: moments and AdamW on the host */
    float *off_g;              /* offload: host copy of the (shard's) gradients, indexed as m */
    int pinned;                /* offload: m, v, off_g and host_params are the backend's pinned host memory */
    size_t pinned_bytes;
    float *host_params;        /* staging for checkpoints (host); on a host-memory backend the */
    float *host_m, *host_v;    /* parameters and moments themselves (no copy) */
    int32_t *inputs, *targets; /* (A, B, T) all micro-batches of a step */
    long step;                 /* optimizer steps completed */
    double best_val;
    double last_val, last_train_eval;
    long last_eval_step;       /* step of last_val */
    double best_score;         /* best value of checkpoint.best_metric so far */
    double last_score;         /* its value at the last evaluation */
    long best_eval_step;       /* step whose evaluation set best_score (-1: none yet) */
    lf_eval_tasks *tasks;      /* eval.tasks (NULL: loss only) */
    lf_eval_results *task_res;
    lf_tokenizer *tok;         /* for the tasks */
    char best_ckpt[64];        /* step directory holding the best val loss so far ("" = none) */
    lf_obs *obs;
    pthread_mutex_t obs_mu;
    /* data parallel */
    lf_comm *comm;             /* own (opened from comm.backend) or opts.comm */
    int own_comm;
    int rank, world;
    /* ZeRO (zero_optimization.stage >= 1): rank r's shard is, for every unit
     * u of the model (lf_model_num_units), the part lf_comm_partition(n_u,
     * W, r) of that unit: flat elements [pc_lo[u], pc_lo[u] + pc_n[u]),
     * held at sh_off[u] of the shard buffers. */
    int zstage;
    int n_units;
    size_t *unit_lo, *unit_n, *pc_lo, *pc_n, *sh_off;
    size_t shard_n;            /* floats in this rank's shard */
    float *gshard;             /* stage >= 2: the shard's gradient, summed over ranks and micro-batches */
    float *pshard;             /* stage 3: the shard's parameters (fp32 master weights) */
    int zbad;                  /* stage >= 2, fp16: first tensor whose local unit gradient overflowed (-1) */
    double hook_comm_ms;       /* collectives made from the model's unit hooks */
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
    uint16_t *pend_bf;         /* overlap, bf16: the in-flight unit's staging (NULL: fp32) */
    float *xfer;               /* host staging of the collectives on backend memory (dev_*; NULL when */
    size_t xfer_n;             /* the backend's memory is the host's, or one rank): its floats */
    long opt_t;                /* AdamW updates applied (skipped steps do not count) */
    long skipped;              /* steps skipped by an alert or an fp16 overflow */
    lf_loss_scaler scaler;     /* fp16 */
    double *spike_win;         /* ring of the last accepted losses */
    int spike_n, spike_pos;
    /* stall watchdog */
    pthread_t wd;
    int wd_running, wd_stop, stall_reported;
    pthread_mutex_t wd_mu;
    pthread_cond_t wd_cv;
    double last_progress;      /* lf_time_now() when the last step (or eval/checkpoint) finished */
    /* throughput accounting */
    double peak_flops, flops_per_token;
    size_t planned_bytes;
    size_t planned_act_bytes;
    /* files every checkpoint carries, so it stands alone: the tokenizer's
     * vocabulary and a Hugging Face config.json */
    lf_ckpt_file extra[3];
    int n_extra;
    char *tok_data, *hf_config, *tpl_data;
    lf_hf_model *hf;           /* --init-from a Hugging Face directory (closed after the weights are read) */
    char tok_spec[LF_PATH_MAX + 32]; /* the spec as stored in checkpoints */
    char ckpt_root[LF_PATH_MAX + 8];
    lf__treg *treg;            /* model registry and eval.suite (train_registry.c) */
    char resumed_dir[LF_PATH_MAX + 64]; /* the checkpoint --resume loaded (rank 0) */
    char rollback_dir[LF_PATH_MAX + 64]; /* the checkpoint the last rollback loaded (rank 0) */
    char *plan_json;           /* the memory plan for the run_info record (train_report.c) */
    volatile sig_atomic_t stop_req; /* lf_trainer_request_stop's reason (0: none) */
    int stop_reason;           /* the reason agreed at the boundary the run stopped at (0: none) */
    long saved_step;           /* step of the last checkpoint saved or resumed from (-1: none) */
    /* checkpoint.async: the background writer, one snapshot in flight
     * (ckpt_async_start / ckpt_reap). The snapshot owns snap_* (host, the
     * whole model) and its state text until the writer is joined. */
    pthread_t ckw;
    int ckw_running;           /* started and not yet joined */
    _Atomic int ckw_done;      /* set by the writer as its last act */
    struct ckpt_job *job;      /* the snapshot in flight and what became of it */
    float *snap_params, *snap_m, *snap_v;
    /* failed saves waiting for the step boundary (checkpoint.on_error), in
     * the order they failed: with async saves two can meet between two
     * boundaries (the write in flight, reaped when the next save starts,
     * and that next save), so each is kept and each is reported */
    int ckerr_pending; /* how many of ckerr[] */
    struct ckpt_failure {
        lf_status st;
        long step;
        char msg[1024];
    } ckerr[CKERR_MAX];
    /* rollback (monitor.alerts.*.action rollback) */
    long data_off;             /* batches skipped: step s reads the rows of data step s + data_off */
    int n_rollbacks;           /* rollbacks made by this run (and the runs it resumed) */
    char rb_hist[1024];        /* "step 9 -> 8 (nan); ..." for the message that stops the run */
    int nan_fired, spike_fired; /* the test hooks fired (they fire once unless opts.inject_repeat) */
    char errmsg[1024];
};

static lf_status open_loader(lf_trainer *t);
static lf_status zero_layout(lf_trainer *t);
static lf_status zero_partition(lf_trainer *t);
static lf_status gbf_alloc(lf_trainer *t);
static lf_status xfer_alloc(lf_trainer *t);
static lf_status zero_save(lf_trainer *t, const char *state, char **saved);
static lf_status zero_resume_read(lf_trainer *t, const char *path, char **dir, char **state);
static size_t moments_n(const lf_trainer *t) { return t->zstage ? t->shard_n : lf_model_num_params(t->model); }

static lf_status tfail(lf_trainer *t, lf_status st) {
    snprintf(t->errmsg, sizeof t->errmsg, "%s", lf_last_error());
    return st;
}

/* The fp32 backend the run selects: the config key `backend` (lf_backend_select:
 * "auto" is LLMFORGE_BACKEND, else cuda when a GPU answers, else cpu);
 * bf16.enabled then takes its bf16 variant (lf_backend_precision_name). */
static lf_status select_backend(const lf_trainer *t, const char **base) {
    lf_status st = lf_backend_select(t->cfg.backend, base);
    if (st != LF_OK) lf_error_prefix("key 'backend' (\"%s\")", t->cfg.backend);
    return st;
}

/* An allocation on a device backend that failed although the plan fit
 * (fragmentation, another process on the GPU since the plan was made):
 * LF_ERR_NOMEM with the plan's advice, whatever the device said. Other
 * statuses, and host-memory backends, pass through. */
static lf_status device_oom(const lf_trainer *t, lf_status st, const lf_mem_plan *plan) {
    if (st != LF_ERR_NOMEM || !plan->on_device) return st;
    char what[768], advice[1536], b1[32], b2[32];
    snprintf(what, sizeof what, "%s", lf_last_error());
    lf_mem_plan_advice(plan, &t->cfg, &t->mcfg, advice, sizeof advice);
    return lf_fail(LF_ERR_NOMEM, "device memory ran out on %s: %s; the plan's %s of device memory fit the %s free "
                   "when it was made, so fragmentation or another process took the rest. %s", plan->device, what,
                   lf_fmt_bytes(plan->device_total, b1, sizeof b1), lf_fmt_bytes(plan->device_free, b2, sizeof b2),
                   advice);
}

/* Staging copies between backend memory and the host buffers; on a
 * host-memory backend the host buffers are the backend's own, and there is
 * nothing to copy (the backend is told when parameters changed under it). */
static void stage_out(const lf_trainer *t, void *host, const void *dev, size_t bytes) {
    if (host != dev) t->be->ops->to_host(t->be, host, dev, bytes);
}
static void stage_in(const lf_trainer *t, void *dev, const void *host, size_t bytes) {
    if (host != dev) t->be->ops->to_device(t->be, dev, host, bytes);
    else if (t->be->ops->params_changed) t->be->ops->params_changed(t->be);
}
/* A copy of the moments into host dst: they are host memory when offloaded. */
static void moments_out(const lf_trainer *t, void *dst, const void *src, size_t bytes) {
    if (t->offload) memcpy(dst, src, bytes);
    else t->be->ops->to_host(t->be, dst, src, bytes);
}

const char *lf_trainer_errmsg(const lf_trainer *t) { return t ? t->errmsg : lf_last_error(); }

void lf_trainer_request_stop(lf_trainer *t, int reason) {
    if (t) t->stop_req = reason ? reason : 1;
}
long lf_trainer_step(const lf_trainer *t) { return t ? t->step : 0; }
int lf_trainer_stop_reason(const lf_trainer *t) { return t ? t->stop_reason : 0; }
lf_model *lf_trainer_model(lf_trainer *t) { return t->model; }

lf_status lf_trainer_copy_params(lf_trainer *t, float *dst) {
    if (!t || !dst) return lf_fail(LF_ERR_INVALID_ARG, "lf_trainer_copy_params: NULL argument");
    const float *p = lf_model_params(t->model);
    if (!p)
        return lf_fail(LF_ERR_UNSUPPORTED, "lf_trainer_copy_params: under ZeRO-3 rank %d holds only its shard of the "
                       "parameters (the checkpoints hold them all)", t->rank);
    t->be->ops->to_host(t->be, dst, p, lf_model_num_params(t->model) * sizeof(float));
    return lf_backend_sync(t->be);
}

lf_comm *lf_trainer_comm(lf_trainer *t) { return t ? t->comm : NULL; }
lf_backend *lf_trainer_backend(lf_trainer *t) { return t ? t->be : NULL; }

/* ZeRO-Offload's host buffers: pinned (the backend's host_alloc) or pageable. */
static void *off_alloc(lf_trainer *t, size_t bytes) {
    if (!t->pinned) return lf_alloc(bytes);
    void *p = t->be->ops->host_alloc(t->be, bytes);
    if (p) t->pinned_bytes += bytes;
    return p;
}
static void off_free(lf_trainer *t, void *p) {
    if (!p) return;
    if (t->pinned) t->be->ops->host_free(t->be, p);
    else lf_free(p);
}

size_t lf_trainer_pinned_bytes(const lf_trainer *t) { return t ? t->pinned_bytes : 0; }

void lf_trainer_state_bytes(const lf_trainer *t, size_t *params, size_t *grads, size_t *optim) {
    lf_model_state_bytes(t->model, params, grads);
    lf_backend *be = t->be;
    *params += be->ops->allocated(be, t->pshard);
    *grads += be->ops->allocated(be, t->gshard);
    *optim = t->offload ? 0 : be->ops->allocated(be, t->m) + be->ops->allocated(be, t->v); /* device bytes */
}

/* Records go out on rank 0 only: every rank computes the same reduced
 * values, one of them reports them. */
static void obs_emit(lf_trainer *t, lf_obs_record *r) {
    if (!t->obs || t->rank != 0) return;
    r->wall_time = lf_obs_wall_time();
    pthread_mutex_lock(&t->obs_mu);
    lf_obs_emit(t->obs, r);
    pthread_mutex_unlock(&t->obs_mu);
}

static void emit_event(lf_trainer *t, const char *name, const char *alert_kind, const char *json) {
    lf_obs_record r = {.kind = LF_OBS_EVENT, .step = t->step, .event = name, .alert_kind = alert_kind, .json = json};
    obs_emit(t, &r);
}

/* JSON string body of s (quotes, backslashes and control characters escaped). */
static void json_escape(char *out, size_t cap, const char *s) {
    size_t at = 0;
    for (; *s && at + 7 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            out[at++] = '\\';
            out[at++] = (char)c;
        } else if (c < 0x20) {
            at += (size_t)snprintf(out + at, cap - at, "\\u%04x", c);
        } else {
            out[at++] = (char)c;
        }
    }
    out[at] = 0;
}

static void raise_alert(lf_trainer *t, const char *kind, const char *action, const char *msg) {
    char esc[1024], json[1400];
    json_escape(esc, sizeof esc, msg);
    snprintf(json, sizeof json, "{\"kind\":\"%s\",\"action\":\"%s\",\"message\":\"%s\"}", kind, action, esc);
    if (t->rank == 0) lf_log(LF_LOG_WARN, "alert %s (%s): %s", kind, action, msg); /* decided alike on every rank */
    emit_event(t, "alert", kind, json);
}

static void mark_progress(lf_trainer *t) {
    pthread_mutex_lock(&t->wd_mu);
    t->last_progress = lf_time_now();
    t->stall_reported = 0;
    pthread_mutex_unlock(&t->wd_mu);
}

/* The stall watchdog: wakes a few times per stall period; reports once per
 * stall (again only after progress resumes). */
static void *watchdog_main(void *arg) {
    lf_trainer *t = arg;
    double limit = t->cfg.alert_stall_seconds;
    double tick = limit / 4 < 1.0 ? limit / 4 : 1.0;
    pthread_mutex_lock(&t->wd_mu);
    while (!t->wd_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double when = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + tick;
        ts.tv_sec = (time_t)when;
        ts.tv_nsec = (long)((when - (double)ts.tv_sec) * 1e9);
        pthread_cond_timedwait(&t->wd_cv, &t->wd_mu, &ts);
        if (t->wd_stop) break;
        double idle = lf_time_now() - t->last_progress;
        if (idle > limit && !t->stall_reported) {
            t->stall_reported = 1;
            long step = t->step;
            pthread_mutex_unlock(&t->wd_mu);
            char msg[256];
            int ex = t->cfg.alert_stall_action == LF_ALERT_EXIT;
            snprintf(msg, sizeof msg, "no training step finished for %.0f s (last finished step %ld; limit %g s)", idle,
                     step, limit);
            raise_alert(t, "stall", ex ? "exit" : "log", msg);
            if (ex && t->opts.on_fatal) {
                pthread_mutex_lock(&t->obs_mu);
                lf_obs_flush(t->obs);
                pthread_mutex_unlock(&t->obs_mu);
                t->opts.on_fatal(msg, t->opts.user);
            }
            pthread_mutex_lock(&t->wd_mu);
        }
    }
    pthread_mutex_unlock(&t->wd_mu);
    return NULL;
}

/* Resident set size from /proc/self/statm (0 where unavailable). */
static double rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    long pages = 0, resident = 0;
    int got = fscanf(f, "%ld %ld", &pages, &resident);
    fclose(f);
    return got == 2 ? (double)resident * (double)sysconf(_SC_PAGESIZE) : 0;
}

/* ---------------------------------------------------------------- setup */

static lf_status write_resolved_config(lf_trainer *t) {
    char *json = lf_train_config_to_json(&t->cfg);
    if (!json) return lf_fail(LF_ERR_NOMEM, "out of memory writing the resolved config");
    char path[LF_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/config.resolved.json", t->cfg.out_dir);
    lf_status st = lf_file_write_all(path, json, strlen(json));
    lf_free(json);
    return st;
}

static lf_status state_to_json(lf_trainer *t, char **out) {
    cJSON *o = cJSON_CreateObject();
    char *cfgjson = lf_train_config_to_json(&t->cfg);
    cJSON *cfg = cfgjson ? cJSON_Parse(cfgjson) : NULL;
    lf_free(cfgjson);
    /* how the files are written is not part of what they hold: without checkpoint.async, a background
     * save is byte for byte the synchronous one (config.resolved.json keeps the key) */
    cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(cfg, "checkpoint"), "async");
    if (!o || !cfg) {
        cJSON_Delete(o);
        cJSON_Delete(cfg);
        return lf_fail(LF_ERR_NOMEM, "out of memory building trainer_state.json");
    }
    long rows_per_step = (long)t->cfg.micro_batch * t->cfg.grad_accum * t->world; /* the global batch */
    cJSON_AddStringToObject(o, "format", "llmforge-trainer-state");
    cJSON_AddNumberToObject(o, "version", 1);
    cJSON_AddNumberToObject(o, "step", (double)t->step);
    cJSON_AddNumberToObject(o, "tokens_seen", (double)t->step * (double)rows_per_step * t->cfg.model.block_size);
    cJSON *cursor = cJSON_AddObjectToObject(o, "data_cursor");
    cJSON_AddStringToObject(cursor, "split", "train");
    cJSON_AddStringToObject(cursor, "sampling", t->cfg.sampling == LF_SAMPLING_SEQUENTIAL ? "sequential"
                                                : t->cfg.sampling == LF_SAMPLING_RECORDS  ? "records"
                                                : t->cfg.sampling == LF_SAMPLING_PACKED   ? "packed"
                                                                                          : "random");
    /* the loader's whole state: rows are a function of the data step (src/data/loader.c), which is the
     * step plus the batches rollbacks (and opts.skip_batches) moved past */
    cJSON_AddNumberToObject(cursor, "next_step", (double)(t->step + t->data_off));
    cJSON_AddNumberToObject(cursor, "next_row", (double)(t->step + t->data_off) * (double)rows_per_step);
    cJSON_AddNumberToObject(cursor, "batch_offset", (double)t->data_off);
    cJSON_AddNumberToObject(cursor, "world_size", t->world);
    if (t->loader) cJSON_AddNumberToObject(cursor, "epoch", lf_loader_epoch(t->loader));
    cJSON *rng = cJSON_AddObjectToObject(o, "rng");
    cJSON_AddStringToObject(rng, "generator", "philox4x32-10");
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)t->cfg.seed);
    cJSON_AddStringToObject(rng, "seed", seed);
    cJSON_AddStringToObject(rng, "streams", "counter-based: (seed, purpose, index); no state beyond the step");
    if (isfinite(t->best_val))
        cJSON_AddNumberToObject(o, "best_val_loss", t->best_val);
    else
        cJSON_AddNullToObject(o, "best_val_loss");
    if (t->cfg.fp16) {
        const lf_loss_scaler *ls = &t->scaler;
        cJSON *sc = cJSON_AddObjectToObject(o, "loss_scaler");
        cJSON_AddStringToObject(sc, "type", ls->dynamic ? "dynamic" : "static");
        cJSON_AddNumberToObject(sc, "scale", ls->scale);
        cJSON_AddNumberToObject(sc, "hysteresis", ls->cur_hysteresis);
        cJSON_AddNumberToObject(sc, "iter", (double)ls->iter);
        cJSON_AddNumberToObject(sc, "last_overflow_iter", (double)ls->last_overflow_iter);
    }
    cJSON *mo = cJSON_AddObjectToObject(o, "model");
    const lf_model_config *mc = &t->mcfg; /* resolved */
    cJSON_AddStringToObject(mo, "arch", lf_arch_name(mc->arch));
    cJSON_AddNumberToObject(mo, "n_layer", mc->n_layer);
    cJSON_AddNumberToObject(mo, "n_head", mc->n_head);
    cJSON_AddNumberToObject(mo, "n_kv_head", mc->n_kv_head);
    cJSON_AddNumberToObject(mo, "n_embd", mc->n_embd);
    cJSON_AddNumberToObject(mo, "ffn_hidden", mc->ffn_hidden);
    cJSON_AddNumberToObject(mo, "block_size", mc->block_size);
    cJSON_AddNumberToObject(mo, "vocab_size", mc->vocab_size);
    cJSON_AddNumberToObject(mo, "padded_vocab_size", mc->padded_vocab_size);
    cJSON_AddNumberToObject(mo, "norm_eps", mc->norm_eps);
    cJSON_AddNumberToObject(mo, "rope_theta", mc->rope_theta);
    cJSON_AddBoolToObject(mo, "tie_embeddings", mc->tie_embeddings != 0);
    cJSON_AddBoolToObject(mo, "bias", mc->bias != 0);
    cJSON_AddNumberToObject(mo, "dropout", mc->dropout);
    cJSON_AddStringToObject(o, "tokenizer", t->tok_spec);
    if (t->best_ckpt[0]) cJSON_AddStringToObject(o, "best_checkpoint", t->best_ckpt);
    cJSON *bm = cJSON_AddObjectToObject(o, "best_metric");
    cJSON_AddStringToObject(bm, "name", t->cfg.best_metric);
    if (isfinite(t->best_score))
        cJSON_AddNumberToObject(bm, "value", t->best_score);
    else
        cJSON_AddNullToObject(bm, "value");
    cJSON_AddNumberToObject(o, "optimizer_steps", (double)t->opt_t);
    cJSON_AddNumberToObject(o, "skipped_steps", (double)t->skipped);
    cJSON *win = cJSON_AddArrayToObject(o, "loss_window");
    for (int i = 0; i < t->spike_n; i++) { /* oldest first */
        int w = t->cfg.alert_spike_window;
        int k = (t->spike_pos - t->spike_n + i + w) % w;
        cJSON_AddItemToArray(win, cJSON_CreateNumber(t->spike_win[k]));
    }
    cJSON *rb = cJSON_AddObjectToObject(o, "rollbacks");
    cJSON_AddNumberToObject(rb, "count", t->n_rollbacks);
    cJSON_AddStringToObject(rb, "history", t->rb_hist);
    cJSON_AddItemToObject(o, "config", cfg);
    *out = lf_json_print(o, 0); /* best_metric and loss_window read back exactly */
    cJSON_Delete(o);
    if (!*out) return lf_fail(LF_ERR_NOMEM, "out of memory printing trainer_state.json");
    return LF_OK;
}

/* What a checkpoint holds, taken at a step boundary: the state JSON and the
 * host copies of parameters and moments, and what the write needs of the
 * trainer's mutable state (the best checkpoint's name). A synchronous save
 * uses t->host_* (on a host-memory backend the live buffers themselves); a
 * background one copies into t->snap_*, which the writer owns until it is
 * joined. */
typedef struct ckpt_snapshot {
    long step;
    char *state;                 /* trainer_state.json's object (malloc) */
    const float *params, *m, *v; /* host, whole model (stage 0) */
    char protect[64];            /* t->best_ckpt at the snapshot ("" = none) */
} ckpt_snapshot;

static lf_status ckpt_snapshot_take(lf_trainer *t, ckpt_snapshot *snap, int own) {
    size_t n = lf_model_num_params(t->model);
    snap->step = t->step;
    snap->state = NULL;
    snap->params = snap->m = snap->v = NULL;
    snprintf(snap->protect, sizeof snap->protect, "%s", t->best_ckpt);
    lf_status st = state_to_json(t, &snap->state);
    if (st != LF_OK || t->zstage) return st; /* ZeRO: each rank writes its shard in zero_save */
    if (own) { /* copies of their own, whatever the backend: training goes on under the writer */
        t->be->ops->to_host(t->be, t->snap_params, lf_model_params(t->model), n * sizeof(float));
        moments_out(t, t->snap_m, t->m, n * sizeof(float));
        moments_out(t, t->snap_v, t->v, n * sizeof(float));
        st = lf_backend_sync(t->be);
        if (st != LF_OK) return st;
        snap->params = t->snap_params;
        snap->m = t->snap_m;
        snap->v = t->snap_v;
        return LF_OK;
    }
    stage_out(t, t->host_params, lf_model_params(t->model), n * sizeof(float));
    stage_out(t, t->host_m, t->m, n * sizeof(float));
    stage_out(t, t->host_v, t->v, n * sizeof(float));
    snap->params = t->host_params;
    snap->m = t->host_m;
    snap->v = t->host_v;
    return LF_OK;
}

/* checkpoint.keep_last / keep_every and the best, for lf_checkpoint_prune. */
static lf_ckpt_retention retention(const lf_trainer *t, const char *protect) {
    lf_ckpt_retention r = {.keep_last = t->cfg.keep_last, .keep_every = t->cfg.keep_every,
                           .protect = protect && protect[0] ? protect : NULL};
    return r;
}

/* Write a snapshot: first remove what it makes obsolete (so a disk that is
 * full of old checkpoints has room), then write and commit it (rank 0 for
 * stage 0; every rank its shard with ZeRO), then the usual rotation. Reads
 * only the snapshot and what never changes after create (the root, the
 * parameter table, the extra files, the retention keys), so it may run on
 * the writer thread. */
static lf_status ckpt_write(lf_trainer *t, const ckpt_snapshot *snap, char **saved) {
    lf_ckpt_retention keep = retention(t, snap->protect);
    if (t->rank == 0) lf_checkpoint_prune(t->ckpt_root, snap->step, &keep);
    lf_status st;
    if (t->zstage) {
        st = zero_save(t, snap->state, saved); /* every rank writes its shard, in parallel */
    } else {
        int count;
        const lf_param_info *table = lf_model_params_table(t->model, &count);
        lf_ckpt_tensors tt = {table, count, lf_model_num_params(t->model)};
        st = lf_checkpoint_save(t->ckpt_root, snap->step, &tt, snap->params, snap->m, snap->v, snap->state, t->extra,
                                t->n_extra, 0, keep.protect, saved);
    }
    if (st == LF_OK && t->rank == 0) lf_checkpoint_prune(t->ckpt_root, snap->step, &keep);
    return st;
}

/* The "checkpoint" record of a save that is complete (rank 0). */
static void ckpt_saved_event(lf_trainer *t, long step, const char *saved, const char *fields) {
    if (t->rank != 0) return;
    char esc[LF_PATH_MAX * 2], json[LF_PATH_MAX * 2 + 256];
    json_escape(esc, sizeof esc, saved ? saved : "");
    snprintf(json, sizeof json, "{\"path\":\"%s\",%s}", esc, fields);
    lf_obs_record r = {.kind = LF_OBS_EVENT, .step = step, .event = "checkpoint", .json = json};
    obs_emit(t, &r);
}

/* A save failed: kept for the next step boundary (checkpoint.on_error,
 * decided alike on every rank there). Every failure since the last boundary
 * is kept; past CKERR_MAX (never reached: at most one write is in flight
 * and one more save can start before a boundary) the last slot is reused. */
static void ckpt_error_note(lf_trainer *t, lf_status st, long step, const char *msg) {
    const int k = t->ckerr_pending < CKERR_MAX ? t->ckerr_pending++ : CKERR_MAX - 1;
    t->ckerr[k].st = st;
    t->ckerr[k].step = step;
    snprintf(t->ckerr[k].msg, sizeof t->ckerr[k].msg, "%s", msg);
}

/* Sleeps s seconds (the test hooks' stalls), through signals. */
static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* The background writer's job: the snapshot, and what became of it. */
typedef struct ckpt_job {
    ckpt_snapshot snap;
    lf_status st;
    char *saved;                     /* the step directory (lf_free) */
    char err[1024];                  /* the writer thread's lf_last_error */
    double write_ms, snapshot_ms, wait_ms;
    int evaluated;                   /* the snapshot's step was evaluated: its losses go to the registry */
    double train_loss, val_loss;
} ckpt_job;

static void *ckpt_writer_main(void *arg) {
    lf_trainer *t = arg;
    ckpt_job *j = t->job;
    if (t->opts.inject_write_delay_seconds > 0) sleep_s(t->opts.inject_write_delay_seconds); /* test hook */
    double t0 = lf_time_now();
    j->st = ckpt_write(t, &j->snap, &j->saved);
    if (j->st != LF_OK) snprintf(j->err, sizeof j->err, "%s", lf_last_error()); /* thread-local */
    j->write_ms = (lf_time_now() - t0) * 1e3;
    atomic_store(&t->ckw_done, 1);
    return NULL;
}

/* Join the writer (waiting for it when it is not done) and report: the
 * checkpoint record and the registry on success, a pending error on
 * failure. Main thread only. */
static void ckpt_reap(lf_trainer *t) {
    if (!t->ckw_running) return;
    pthread_join(t->ckw, NULL);
    t->ckw_running = 0;
    ckpt_job *j = t->job;
    if (j->st == LF_OK) {
        char fields[256], ms[LF_JSON_NUMBER_MAX], sn[LF_JSON_NUMBER_MAX], wt[LF_JSON_NUMBER_MAX];
        lf_json_number(ms, sizeof ms, j->write_ms);
        lf_json_number(sn, sizeof sn, j->snapshot_ms);
        lf_json_number(wt, sizeof wt, j->wait_ms);
        snprintf(fields, sizeof fields, "\"ms\":%s,\"async\":true,\"snapshot_ms\":%s,\"wait_ms\":%s", ms, sn, wt);
        if (j->snap.step > t->saved_step) t->saved_step = j->snap.step;
        ckpt_saved_event(t, j->snap.step, j->saved, fields);
        /* eval.suite is refused with async (train_impl.h): only the record, with the step's own evaluation */
        lf__treg_checkpoint(t->treg, t->model, j->snap.step, j->evaluated, j->train_loss, j->val_loss,
                            j->evaluated && t->last_eval_step == j->snap.step ? t->task_res : NULL, j->snap.protect,
                            NULL);
    } else {
        ckpt_error_note(t, j->st, j->snap.step, j->err);
    }
    free(j->snap.state);
    j->snap.state = NULL;
    lf_free(j->saved);
    j->saved = NULL;
}

/* At a step boundary: the outcome of a write that is done, without waiting. */
static void ckpt_poll(lf_trainer *t) {
    if (t->ckw_running && atomic_load(&t->ckw_done)) ckpt_reap(t);
}

/* Wait for the write in flight (before a save, a rollback, the end, a stop). */
static void ckpt_wait(lf_trainer *t, const char *why) {
    if (!t->ckw_running) return;
    if (!atomic_load(&t->ckw_done))
        lf_log(LF_LOG_INFO, "%s at step %ld waits for the background write of checkpoint step %ld", why, t->step,
               t->job->snap.step);
    ckpt_reap(t);
}

/* checkpoint.async: wait for the previous write (one in flight: memory is
 * bounded by one snapshot), snapshot, start the writer. A writer thread that
 * cannot start makes this save synchronous (a warning). */
static lf_status ckpt_async_start(lf_trainer *t) {
    double w0 = lf_time_now();
    ckpt_wait(t, "checkpoint");
    ckpt_job *j = t->job;
    double s0 = lf_time_now();
    j->wait_ms = (s0 - w0) * 1e3;
    j->st = LF_OK;
    j->saved = NULL;
    j->err[0] = 0;
    lf_status st = ckpt_snapshot_take(t, &j->snap, 1);
    if (st != LF_OK) {
        free(j->snap.state);
        j->snap.state = NULL;
        return st;
    }
    j->snapshot_ms = (lf_time_now() - s0) * 1e3;
    j->evaluated = t->last_eval_step == t->step;
    j->train_loss = t->last_train_eval;
    j->val_loss = t->last_val;
    atomic_store(&t->ckw_done, 0);
    if (pthread_create(&t->ckw, NULL, ckpt_writer_main, t) == 0) {
        t->ckw_running = 1;
        return LF_OK;
    }
    lf_log(LF_LOG_WARN, "cannot start the checkpoint writer thread; step %ld is saved in the training thread",
           t->step);
    ckpt_writer_main(t);
    st = j->st;
    if (st == LF_OK) {
        t->saved_step = j->snap.step;
        ckpt_saved_event(t, j->snap.step, j->saved, "\"async\":false");
    } else {
        st = lf_fail(j->st, "%s", j->err);
    }
    free(j->snap.state);
    j->snap.state = NULL;
    lf_free(j->saved);
    j->saved = NULL;
    return st;
}

/* A checkpoint of the step reached. may_async: with checkpoint.async the
 * write goes to the background (its failure is found by ckpt_poll/wait);
 * otherwise it is complete (or failed) on return. */
static lf_status save_checkpoint(lf_trainer *t, int may_async) {
    /* this checkpoint becomes the best when the evaluation of this very step
     * set a new best; rotation never removes the best */
    if (t->best_eval_step == t->step) snprintf(t->best_ckpt, sizeof t->best_ckpt, "step_%08ld", t->step);
    if (!t->zstage && t->rank != 0) { /* stage 0: the replicas are identical, rank 0 writes */
        t->saved_step = t->step;
        return LF_OK;
    }
    if (may_async && t->cfg.ckpt_async) return ckpt_async_start(t);
    ckpt_wait(t, "checkpoint"); /* a synchronous save after a background one (a stop): in order */
    char *saved = NULL;
    double t0 = lf_time_now();
    ckpt_snapshot snap;
    lf_status st = ckpt_snapshot_take(t, &snap, 0);
    if (st == LF_OK) st = ckpt_write(t, &snap, &saved);
    free(snap.state);
    if (st == LF_OK) {
        t->saved_step = t->step;
        char fields[64], ms[LF_JSON_NUMBER_MAX];
        lf_json_number(ms, sizeof ms, (lf_time_now() - t0) * 1e3);
        snprintf(fields, sizeof fields, "\"ms\":%s", ms);
        ckpt_saved_event(t, t->step, saved, fields);
    }
    lf_free(saved);
    return st;
}

/* "cannot write 'FILE': ERRNO TEXT" and the like: the first quoted name and
 * the text after the last ": " (every I/O message of checkpoint.c and
 * file.c ends with strerror). */
static void ckerr_parts(const char *msg, char *file, size_t fcap, char *err, size_t ecap) {
    file[0] = err[0] = 0;
    const char *q = strchr(msg, '\''), *e = q ? strchr(q + 1, '\'') : NULL;
    if (q && e) snprintf(file, fcap, "%.*s", (int)(e - q - 1), q + 1);
    const char *c = NULL;
    for (const char *p = msg; (p = strstr(p, ": ")); p += 2) c = p;
    if (c) snprintf(err, ecap, "%s", c + 2);
}

/* The failed save every rank agreed was pending (stop_agreed): stop =
 * the error (on the rank that failed, its message; elsewhere, that rank 0
 * failed); continue = a warning and a checkpoint_error record, then on. */
static lf_status ckpt_error_decide(lf_trainer *t) {
    const int mine = t->ckerr_pending;
    t->ckerr_pending = 0;
    if (t->cfg.ckpt_on_error == LF_CKPT_ON_ERROR_STOP) {
        if (mine) /* the first failure is the one that stops the run */
            return lf_fail(t->ckerr[0].st, "the checkpoint of step %ld failed: %s (checkpoint.on_error is stop; "
                           "'latest' names the last complete checkpoint)", t->ckerr[0].step, t->ckerr[0].msg);
        return lf_fail(LF_ERR_IO, "a checkpoint failed on rank 0, which writes them (its log names the file); "
                       "stopping with it (checkpoint.on_error is stop)");
    }
    if (t->rank != 0) return LF_OK;
    for (int k = 0; k < mine; k++) {
        const struct ckpt_failure *f = &t->ckerr[k];
        lf_log(LF_LOG_WARN, "the checkpoint of step %ld failed: %s; training goes on (checkpoint.on_error is "
               "continue: the previous checkpoint stays latest, the next save tries again)", f->step, f->msg);
        char file[LF_PATH_MAX], err[256], ef[LF_PATH_MAX * 2], ee[512], em[2100], json[LF_PATH_MAX * 2 + 3000];
        ckerr_parts(f->msg, file, sizeof file, err, sizeof err);
        json_escape(ef, sizeof ef, file);
        json_escape(ee, sizeof ee, err);
        json_escape(em, sizeof em, f->msg);
        /* the record's own "step" is where the failure was reported; save_step the save's */
        snprintf(json, sizeof json, "{\"save_step\":%ld,\"file\":\"%s\",\"errno\":\"%s\",\"message\":\"%s\"}",
                 f->step, ef, ee, em);
        lf_obs_record r = {.kind = LF_OBS_EVENT, .step = t->step, .event = "checkpoint_error", .json = json};
        obs_emit(t, &r);
    }
    return LF_OK;
}

/* Resuming takes the configuration from the command line (to allow a longer
 * train_iters, say). Settings that change the trajectory are compared with
 * the checkpoint's and every difference is logged as a warning. */
static void warn_config_drift(const lf_trainer *t, const cJSON *saved_cfg, int saved_world) {
    char *text = saved_cfg ? cJSON_PrintUnformatted(saved_cfg) : NULL;
    if (!text) return;
    lf_train_config old;
    /* resolved for the world size that saved it (its batch keys satisfy that identity) */
    lf_status st = lf_train_config_parse_world(&old, text, "checkpoint", saved_world, 0, NULL);
    free(text);
    if (st != LF_OK) {
        lf_log(LF_LOG_WARN, "resume: cannot read the checkpoint's configuration (%s)", lf_last_error());
        return;
    }
    const lf_train_config *c = &t->cfg;
    char msg[2048];
    size_t at = 0;
#define DRIFT(key, fmt, a, b)                                                                                   \
    do {                                                                                                        \
        if ((a) != (b) && at < sizeof msg)                                                                      \
            at += (size_t)snprintf(msg + at, sizeof msg - at, "%s" key " (checkpoint " fmt ", now " fmt ")",    \
                                   at ? "; " : "", a, b);                                                       \
    } while (0)
    DRIFT("optimizer.params.lr", "%g", (double)old.lr, (double)c->lr);
    DRIFT("optimizer.params.betas[0]", "%g", (double)old.beta1, (double)c->beta1);
    DRIFT("optimizer.params.betas[1]", "%g", (double)old.beta2, (double)c->beta2);
    DRIFT("optimizer.params.eps", "%g", (double)old.eps, (double)c->eps);
    DRIFT("optimizer.params.weight_decay", "%g", (double)old.weight_decay, (double)c->weight_decay);
    DRIFT("scheduler.type", "%d", old.sched_type, c->sched_type);
    DRIFT("scheduler.warmup_iters", "%ld", old.warmup_iters, c->warmup_iters);
    DRIFT("scheduler.decay_iters", "%ld", old.decay_iters, c->decay_iters);
    DRIFT("scheduler.min_lr", "%g", (double)old.min_lr, (double)c->min_lr);
    DRIFT("gradient_clipping", "%g", (double)old.grad_clip, (double)c->grad_clip);
    /* the global batch decides the rows of a step; how it splits into
     * micro-batches, accumulation and ranks does not (src/data/loader.c) */
    DRIFT("train_batch_size", "%ld", old.train_batch_size, c->train_batch_size);
    DRIFT("data.sampling", "%d", old.sampling, c->sampling);
    DRIFT("model.dropout", "%g", (double)old.model.dropout, (double)c->model.dropout);
    DRIFT("seed", "%llu", (unsigned long long)old.seed, (unsigned long long)c->seed);
#undef DRIFT
    if (strcmp(old.dataset, c->dataset) != 0 && at < sizeof msg)
        at += (size_t)snprintf(msg + at, sizeof msg - at, "%sdata.dataset (checkpoint '%s', now '%s')", at ? "; " : "",
                               old.dataset, c->dataset);
    if (at)
        lf_log(LF_LOG_WARN, "resuming with settings that differ from the checkpoint's: %s; the run will not match "
               "an uninterrupted one (resume with out_dir/config.resolved.json to keep them)", msg);
}

/* Rank 0 reads the checkpoint (only rank 0 writes them, so only rank 0 is
 * sure to see them) into the host staging buffers and *state, then shares
 * both: a length (negative: rank 0 failed, its message follows, and every
 * rank fails with it), the state text, parameters and both moments. */
static lf_status resume_read(lf_trainer *t, const char *path, char **dir, char **state) {
    size_t n = lf_model_num_params(t->model);
    lf_status st = LF_OK;
    int64_t len = 0;
    if (t->rank == 0) {
        st = lf_checkpoint_resolve(path, dir);
        if (st == LF_OK) {
            int count;
            const lf_param_info *table = lf_model_params_table(t->model, &count);
            lf_ckpt_tensors tt = {table, count, n};
            st = lf_checkpoint_load(*dir, &tt, t->host_params, t->host_m, t->host_v, state);
            if (st != LF_OK) lf_error_prefix("resuming from '%s'", *dir);
        }
        len = st == LF_OK ? (int64_t)strlen(*state) + 1 : (int64_t)st; /* statuses are negative */
    }
    if (t->world == 1) return st;
    lf_comm_set_context(t->comm, "resume");
    lf_status cs = lf_comm_broadcast_bytes(t->comm, &len, sizeof len, 0);
    if (cs != LF_OK) return cs;
    if (len < 0) { /* rank 0 failed: every rank reports it */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", t->rank == 0 ? lf_last_error() : "");
        cs = lf_comm_broadcast_bytes(t->comm, msg, sizeof msg, 0);
        if (cs != LF_OK) return cs;
        msg[sizeof msg - 1] = 0;
        return t->rank == 0 ? st : lf_fail((lf_status)len, "rank 0: %s", msg);
    }
    if (t->rank != 0 && !(*state = lf_alloc((size_t)len)))
        return lf_fail(LF_ERR_NOMEM, "out of memory receiving trainer_state.json (%lld bytes)", (long long)len);
    cs = lf_comm_broadcast_bytes(t->comm, *state, (size_t)len, 0);
    /* host copies: bytes, which every kind takes in host memory (nccl's float
     * broadcast would want device memory) */
    if (cs == LF_OK) cs = lf_comm_broadcast_bytes(t->comm, t->host_params, n * sizeof(float), 0);
    if (cs == LF_OK) cs = lf_comm_broadcast_bytes(t->comm, t->host_m, n * sizeof(float), 0);
    if (cs == LF_OK) cs = lf_comm_broadcast_bytes(t->comm, t->host_v, n * sizeof(float), 0);
    if (cs == LF_OK) (*state)[len - 1] = 0;
    return cs;
}

/* Load the checkpoint path resolves to into the model, the moments and the
 * trainer's counters. rollback: the same in process (monitor.alerts.*.action
 * rollback): no resume record, no configuration check (it is this run's),
 * and the caller sets the data cursor and the rollback count. */
static lf_status resume_from(lf_trainer *t, const char *path, int rollback) {
    char *dir = NULL, *state = NULL;
    size_t n = lf_model_num_params(t->model);
    lf_status st = t->zstage ? zero_resume_read(t, path, &dir, &state) : resume_read(t, path, &dir, &state);
    if (st != LF_OK) {
        lf_free(dir);
        lf_free(state);
        return st;
    }
    const char *where = dir ? dir : "rank 0's checkpoint";
    cJSON *o = cJSON_Parse(state);
    lf_free(state);
    cJSON *step = o ? cJSON_GetObjectItemCaseSensitive(o, "step") : NULL;
    if (!cJSON_IsNumber(step) || step->valuedouble < 0) {
        cJSON_Delete(o);
        st = lf_fail(LF_ERR_FORMAT, "checkpoint '%s': trainer_state.json has no valid \"step\"", where);
        lf_free(dir);
        return st;
    }
    t->step = (long)step->valuedouble;
    cJSON *best = cJSON_GetObjectItemCaseSensitive(o, "best_val_loss");
    t->best_val = cJSON_IsNumber(best) ? best->valuedouble : INFINITY;
    cJSON *cur = cJSON_GetObjectItemCaseSensitive(o, "data_cursor");
    cJSON *sw = cJSON_GetObjectItemCaseSensitive(cur, "world_size");
    int saved_world = cJSON_IsNumber(sw) && sw->valuedouble >= 1 && sw->valuedouble <= 1e6 ? (int)sw->valuedouble : 1;
    cJSON *bo = cJSON_GetObjectItemCaseSensitive(cur, "batch_offset"); /* absent before rollbacks existed: 0 */
    t->data_off = cJSON_IsNumber(bo) && bo->valuedouble >= 0 && bo->valuedouble < 9e15 ? (long)bo->valuedouble : 0;
    cJSON *rbs = cJSON_GetObjectItemCaseSensitive(o, "rollbacks");
    cJSON *rbn = cJSON_GetObjectItemCaseSensitive(rbs, "count"), *rbh = cJSON_GetObjectItemCaseSensitive(rbs, "history");
    t->n_rollbacks = cJSON_IsNumber(rbn) && rbn->valuedouble >= 0 && rbn->valuedouble < 1e9 ? (int)rbn->valuedouble : 0;
    snprintf(t->rb_hist, sizeof t->rb_hist, "%s", cJSON_IsString(rbh) ? rbh->valuestring : "");
    if (t->rank == 0 && !rollback) {
        warn_config_drift(t, cJSON_GetObjectItemCaseSensitive(o, "config"), saved_world);
        if (saved_world != t->world)
            lf_log(LF_LOG_INFO, "resuming a checkpoint of %d rank%s with %d rank%s", saved_world,
                   saved_world == 1 ? "" : "s", t->world, t->world == 1 ? "" : "s");
    }
    cJSON *bc = cJSON_GetObjectItemCaseSensitive(o, "best_checkpoint");
    if (cJSON_IsString(bc) && strlen(bc->valuestring) < sizeof t->best_ckpt)
        snprintf(t->best_ckpt, sizeof t->best_ckpt, "%s", bc->valuestring);
    cJSON *bm = cJSON_GetObjectItemCaseSensitive(o, "best_metric");
    cJSON *bmn = cJSON_GetObjectItemCaseSensitive(bm, "name"), *bmv = cJSON_GetObjectItemCaseSensitive(bm, "value");
    if (cJSON_IsString(bmn) && !strcmp(bmn->valuestring, t->cfg.best_metric) && cJSON_IsNumber(bmv))
        t->best_score = bmv->valuedouble;
    else if (!strcmp(t->cfg.best_metric, "val_loss") && isfinite(t->best_val))
        t->best_score = t->best_val;
    cJSON *lsj = cJSON_GetObjectItemCaseSensitive(o, "loss_scaler");
    if (t->cfg.fp16 && t->scaler.dynamic && cJSON_IsObject(lsj)) {
        /* continue the checkpoint's dynamic scaler (a static or absent one starts afresh) */
        cJSON *sc = cJSON_GetObjectItemCaseSensitive(lsj, "scale"), *hy = cJSON_GetObjectItemCaseSensitive(lsj, "hysteresis");
        cJSON *itr = cJSON_GetObjectItemCaseSensitive(lsj, "iter");
        cJSON *lo = cJSON_GetObjectItemCaseSensitive(lsj, "last_overflow_iter");
        cJSON *ty = cJSON_GetObjectItemCaseSensitive(lsj, "type");
        if (cJSON_IsString(ty) && !strcmp(ty->valuestring, "dynamic") && cJSON_IsNumber(sc) && sc->valuedouble > 0 &&
            cJSON_IsNumber(hy) && cJSON_IsNumber(itr) && cJSON_IsNumber(lo)) {
            t->scaler.scale = sc->valuedouble;
            t->scaler.cur_hysteresis = (int)hy->valuedouble;
            t->scaler.iter = (long)itr->valuedouble;
            t->scaler.last_overflow_iter = (long)lo->valuedouble;
        } else {
            if (t->rank == 0)
                lf_log(LF_LOG_WARN, "checkpoint '%s': trainer_state.json's loss_scaler is incomplete; the loss scale "
                       "starts afresh", where);
        }
    }
    cJSON *ot = cJSON_GetObjectItemCaseSensitive(o, "optimizer_steps");
    t->opt_t = cJSON_IsNumber(ot) ? (long)ot->valuedouble : t->step;
    cJSON *sk = cJSON_GetObjectItemCaseSensitive(o, "skipped_steps");
    t->skipped = cJSON_IsNumber(sk) ? (long)sk->valuedouble : 0;
    cJSON *win = cJSON_GetObjectItemCaseSensitive(o, "loss_window");
    const cJSON *it;
    t->spike_n = t->spike_pos = 0;
    cJSON_ArrayForEach(it, win) {
        if (!cJSON_IsNumber(it)) continue;
        t->spike_win[t->spike_pos] = it->valuedouble;
        t->spike_pos = (t->spike_pos + 1) % t->cfg.alert_spike_window;
        if (t->spike_n < t->cfg.alert_spike_window) t->spike_n++;
    }
    cJSON_Delete(o);
    stage_in(t, lf_model_params(t->model), t->host_params, n * sizeof(float));
    stage_in(t, t->m, t->host_m, moments_n(t) * sizeof(float));
    stage_in(t, t->v, t->host_v, moments_n(t) * sizeof(float));
    t->saved_step = t->step;
    if (rollback) {
        if (dir) snprintf(t->rollback_dir, sizeof t->rollback_dir, "%s", dir);
        lf_free(dir);
        return LF_OK;
    }
    if (t->rank == 0) lf_log(LF_LOG_INFO, "resumed from %s at step %ld", where, t->step);
    if (dir) snprintf(t->resumed_dir, sizeof t->resumed_dir, "%s", dir);
    char esc[LF_PATH_MAX * 2], json[LF_PATH_MAX * 2 + 32];
    json_escape(esc, sizeof esc, where);
    snprintf(json, sizeof json, "{\"path\":\"%s\"}", esc);
    emit_event(t, "resume", NULL, json);
    lf_free(dir);
    return LF_OK;
}

/* The files each checkpoint carries besides tensors and state. A char
 * tokenizer's vocab.json is copied (the spec then names it relative to the
 * checkpoint), and so is a Hugging Face tokenizer.json ("hf:tokenizer.json");
 * other tokenizers keep their spec. The dataset's chat_template.json (what
 * `llmforge prepare --chat-template` rendered the pairs with) is copied, so
 * `llmforge serve` renders chats as the model was trained. config.json is Hugging
 * Face's config of this model (lf_model_hf_config_json: GPT2LMHeadModel,
 * LlamaForCausalLM), so transformers loads the checkpoint directory. */
static lf_status make_ckpt_extras(lf_trainer *t) {
    const char *spec = lf_dataset_tokenizer_spec(t->ds);
    snprintf(t->tok_spec, sizeof t->tok_spec, "%s", spec);
    if (strncmp(spec, "char:", 5) == 0) {
        size_t len = 0;
        lf_status st = lf_file_read_all(spec + 5, 64u << 20, &t->tok_data, &len);
        if (st != LF_OK) return st;
        t->extra[t->n_extra++] = (lf_ckpt_file){"vocab.json", t->tok_data, len};
        snprintf(t->tok_spec, sizeof t->tok_spec, "char:vocab.json");
    } else if (strncmp(spec, "hf:", 3) == 0) { /* a Hugging Face tokenizer.json travels with the weights */
        size_t len = 0;
        lf_status st = lf_file_read_all(spec + 3, 256u << 20, &t->tok_data, &len);
        if (st != LF_OK) return st;
        t->extra[t->n_extra++] = (lf_ckpt_file){"tokenizer.json", t->tok_data, len};
        snprintf(t->tok_spec, sizeof t->tok_spec, "hf:tokenizer.json");
    }
    char tpl[LF_PATH_MAX + 32];
    snprintf(tpl, sizeof tpl, "%s/chat_template.json", lf_dataset_dir(t->ds));
    if (access(tpl, F_OK) == 0) {
        size_t len = 0;
        lf_status st = lf_file_read_all(tpl, 1u << 20, &t->tpl_data, &len);
        if (st != LF_OK) return st;
        t->extra[t->n_extra++] = (lf_ckpt_file){"chat_template.json", t->tpl_data, len};
    }
    int n = lf_model_hf_config_json(&t->mcfg, NULL, 0); /* 0: no HF equivalent (GPT-2 without biases) */
    if (n > 0) {
        t->hf_config = lf_alloc((size_t)n + 1);
        if (!t->hf_config) return lf_fail(LF_ERR_NOMEM, "out of memory");
        lf_model_hf_config_json(&t->mcfg, t->hf_config, (size_t)n + 1);
        t->extra[t->n_extra++] = (lf_ckpt_file){"config.json", t->hf_config, (size_t)n};
    }
    return LF_OK;
}

/* Sinks the configuration asks for. log.jsonl is always there; a monitoring
 * sink that cannot start stops the run unless monitor.required is false. */
static lf_status open_sinks(lf_trainer *t) {
    char path[LF_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/log.jsonl", t->cfg.out_dir);
    lf_obs_sink *sink = NULL;
    lf_status st = lf__jsonl_sink_open(&sink, path, t->opts.resume);
    if (st == LF_OK) st = lf_obs_add_sink(t->obs, sink);
    if (st != LF_OK) return st;
    if (t->cfg.tb_enabled) {
        const char *dir = t->cfg.tb_output_path;
        if (!dir[0]) {
            snprintf(path, sizeof path, "%s/tensorboard", t->cfg.out_dir);
            dir = path;
        }
        st = lf_obs_tensorboard_open(&sink, dir, t->cfg.tb_job_name[0] ? t->cfg.tb_job_name : NULL, 5.0);
        if (st == LF_OK) st = lf_obs_add_sink(t->obs, sink);
        if (st != LF_OK) {
            lf_error_prefix("tensorboard");
            if (t->cfg.monitor_required) return st;
            lf_log(LF_LOG_WARN, "%s; training goes on without it (monitor.required is false)", lf_last_error());
        }
    }
    lf__trep_dash dash; /* the live dashboard: on the Prometheus port, and on its own (train_report.c) */
    lf__trep_dash_opts(&dash, &t->cfg, lf_model_num_params(t->model), t->world);
    if (t->cfg.prom_port > 0) {
        lf_prom_opts po = {.host = t->cfg.prom_host, .port = t->cfg.prom_port, .rank = 0, .job = NULL,
                           .dashboard = &dash.opts};
        st = lf_obs_prometheus_open(&sink, &po);
        if (st == LF_OK) st = lf_obs_add_sink(t->obs, sink);
        if (st != LF_OK) {
            lf_error_prefix("monitor.prometheus");
            if (t->cfg.monitor_required) return st;
            lf_log(LF_LOG_WARN, "%s; training goes on without it (monitor.required is false)", lf_last_error());
        } else {
            lf_log(LF_LOG_INFO, "serving metrics on http://%s:%d/metrics (the dashboard on /)", t->cfg.prom_host,
                   t->cfg.prom_port);
        }
    }
    st = lf__trep_dashboard(t->obs, &t->cfg, &dash);
    if (st != LF_OK) return st;
    /* MFU needs a peak: the configured one, or the FMA rate measured once when
     * a monitoring sink will show it */
    if (t->cfg.peak_gflops > 0)
        t->peak_flops = t->cfg.peak_gflops * 1e9;
    else if (t->cfg.tb_enabled || t->cfg.prom_port > 0 || t->cfg.dash_port > 0)
        t->peak_flops = lf_probe_peak_flops(0.25);
    return LF_OK;
}

/* eval.tasks: one path per line, optionally "PATH#KIND" for files that do
 * not name their kind (e.g. `llmforge data arithmetic` output, #exact_match). */
static lf_status load_tasks(lf_trainer *t) {
    if (!t->cfg.eval_tasks[0]) {
        if (strcmp(t->cfg.best_metric, "val_loss") != 0)
            return lf_fail(LF_ERR_CONFIG, "key 'checkpoint.best_metric' is '%s' but eval.tasks is empty (only val_loss "
                           "is available)", t->cfg.best_metric);
        return LF_OK;
    }
    char buf[sizeof t->cfg.eval_tasks];
    memcpy(buf, t->cfg.eval_tasks, sizeof buf);
    const char *paths[64];
    lf_eval_kind kinds[64];
    int n = 0;
    for (char *p = buf, *e; *p && n < 64; p = e ? e + 1 : p + strlen(p)) {
        e = strchr(p, '\n');
        if (e) *e = 0;
        kinds[n] = LF_EVAL_KIND_UNSET;
        char *hash = strrchr(p, '#');
        if (hash) {
            *hash = 0;
            if (lf_eval_kind_parse(hash + 1, &kinds[n]) != LF_OK)
                return lf_fail(LF_ERR_CONFIG, "key 'eval.tasks': '%s' after '#' in '%s' is not a task kind", hash + 1, p);
        }
        paths[n++] = p;
        if (!e) break;
    }
    lf_eval_load_opts lo = lf_eval_load_opts_default();
    lo.kinds = kinds;
    lf_status st = lf_eval_tasks_load(&t->tasks, paths, n, &lo);
    if (st != LF_OK) {
        lf_error_prefix("eval.tasks");
        return st;
    }
    st = lf_eval_results_create(&t->task_res);
    if (st != LF_OK) return st;
    st = lf_tokenizer_open(&t->tok, lf_dataset_tokenizer_spec(t->ds), NULL);
    if (st != LF_OK) return st;
    if (strcmp(t->cfg.best_metric, "val_loss") != 0) {
        /* the metric must be one the tasks produce: check its task name now */
        int found = 0;
        for (int i = 0; i < lf_eval_tasks_count(t->tasks); i++) {
            const char *nm = lf_eval_task_name(t->tasks, i);
            size_t ln = strlen(nm);
            found |= strncmp(t->cfg.best_metric, nm, ln) == 0 && t->cfg.best_metric[ln] == '/';
        }
        if (!found)
            return lf_fail(LF_ERR_CONFIG, "key 'checkpoint.best_metric': '%s' names no task of eval.tasks (metrics are "
                           "<task>/<metric>)", t->cfg.best_metric);
    }
    return LF_OK;
}

static void stop_watchdog(lf_trainer *t) {
    if (!t->wd_running) return;
    pthread_mutex_lock(&t->wd_mu);
    t->wd_stop = 1;
    pthread_cond_signal(&t->wd_cv);
    pthread_mutex_unlock(&t->wd_mu);
    pthread_join(t->wd, NULL);
    t->wd_running = 0;
}

/* The communicator: the caller's, or comm.backend opened here. Its size must
 * be the world size the configuration's batch was resolved for, and every
 * rank must run the same configuration (the hash of the resolved JSON). */
static lf_status open_comm(lf_trainer *t) {
    const lf_train_config *c = &t->cfg;
    lf_status st;
    if (t->opts.comm) {
        t->comm = t->opts.comm;
    } else {
        lf_comm_options co = lf_comm_options_default();
        co.timeout_s = c->comm_timeout_s;
        co.segment_elems = (size_t)c->comm_bucket_elems; /* scratch of one bucket (the memory plan's figure) */
        co.device_tensors = !t->be->ops->host_memory; /* "auto": nccl for a GPU backend, where registered */
        st = lf_comm_open(&t->comm, c->comm_backend, &co);
        if (st != LF_OK) {
            lf_error_prefix("key 'comm.backend' is '%s'", c->comm_backend);
            return st;
        }
        t->own_comm = 1;
    }
    t->rank = lf_comm_rank(t->comm);
    t->world = lf_comm_size(t->comm);
    if (lf_comm_device_buffers(t->comm)) { /* nccl: the backend's buffers as they are, ordered on its stream */
        if (t->be->ops->host_memory || !t->be->ops->native_stream)
            return lf_fail(LF_ERR_CONFIG, "communicator '%s' moves device memory, but backend '%s' holds host memory: "
                           "use comm.backend 'mpi' (or 'auto'), or LLMFORGE_BACKEND=cuda", lf_comm_name(t->comm),
                           t->be->ops->name);
        st = lf_comm_set_stream(t->comm, t->be->ops->native_stream(t->be));
        if (st != LF_OK) return st;
    }
    if (c->world_size != t->world) {
        const lf_comm_env *env = lf_comm_launch_env(t->comm);
        return lf_fail(LF_ERR_CONFIG, "the configuration's batch was resolved for world size %d (train_batch_size %ld = "
                       "train_micro_batch_size_per_gpu %d × gradient_accumulation_steps %d × %d) but communicator '%s' "
                       "has %d rank%s (launcher: %s, %d process%s)%s", c->world_size, c->train_batch_size,
                       c->micro_batch, c->grad_accum, c->world_size, lf_comm_name(t->comm), t->world,
                       t->world == 1 ? "" : "s", lf_comm_launcher_name(env->launcher), env->size,
                       env->size == 1 ? "" : "es",
                       t->world == 1 && env->size > 1 ? "; comm.backend 'single' under a launcher of several processes "
                                                        "would train the same rows in each: use 'auto' or 'mpi'" : "");
    }
    long long G = (long long)c->micro_batch * c->grad_accum * t->world;
    if (c->train_batch_size != G)
        return lf_fail(LF_ERR_CONFIG, "train_batch_size %ld != train_micro_batch_size_per_gpu %d × "
                       "gradient_accumulation_steps %d × world size %d = %lld", c->train_batch_size, c->micro_batch,
                       c->grad_accum, t->world, G);
    if (t->world == 1) return LF_OK;
    /* the same configuration everywhere: max of (h, -h) over ranks is (h, -h) only when all agree */
    char *json = lf_train_config_to_json(c);
    if (!json) return lf_fail(LF_ERR_NOMEM, "out of memory hashing the configuration");
    char hex[65];
    lf_sha256_hex(json, strlen(json), hex);
    lf_free(json);
    hex[15] = 0; /* 60 bits: positive, and so is its negation */
    int64_t h = (int64_t)strtoll(hex, NULL, 16), v[2] = {h, -h};
    lf_comm_set_context(t->comm, "startup");
    st = lf_comm_all_reduce_i64(t->comm, v, 2, LF_COMM_MAX);
    if (st != LF_OK) return st;
    if (v[0] != -v[1])
        return lf_fail(LF_ERR_CONFIG, "the ranks run different configurations (the resolved configuration of rank %d "
                       "hashes to %015llx, another rank's differs): start every rank with the same file and overrides",
                       t->rank, (unsigned long long)h);
    return LF_OK;
}

/* ---------------------------------------------------------------- --init-from a Hugging Face directory */

/* A directory holding config.json: a Hugging Face model (save_pretrained). */
static int is_hf_dir(const char *path) {
    char cfg[LF_PATH_MAX + 16];
    snprintf(cfg, sizeof cfg, "%s/config.json", path);
    struct stat sd, sc;
    return stat(path, &sd) == 0 && S_ISDIR(sd.st_mode) && stat(cfg, &sc) == 0 && S_ISREG(sc.st_mode);
}

/* The model section from the HF config.json: keys the configuration leaves
 * out are taken from it; keys it sets must agree (all disagreements listed
 * by name). A Llama's block_size may be anything (RoPE has no position
 * table); GPT-2's must be n_positions. model.vocab_size (embedding rows)
 * becomes the HF vocab_size. */
static lf_status hf_merge_config(lf_trainer *t, const lf_hf_model *hf) {
    lf_model_config h;
    lf_status st = lf_hf_model_config(hf, &h);
    if (st != LF_OK) return st;
    lf_model_config *m = &t->cfg.model;
    const unsigned g = t->cfg.model_given;
    char bad[2048] = "";
    size_t len = 0;
#define HF_KEY(bit, field, key, fmt, cast)                                                                        \
    do {                                                                                                        \
        if (!(g & (bit))) m->field = h.field;                                                                   \
        else if (m->field != h.field && len < sizeof bad)                                                       \
            len += (size_t)snprintf(bad + len, sizeof bad - len, "%s%s " fmt " (config.json " fmt ")", len ? "; " : "", \
                                    key, (cast)m->field, (cast)h.field);                                        \
    } while (0)
    if (!(g & LF_MODEL_GIVEN_ARCH)) {
        m->arch = h.arch;
        snprintf(t->cfg.arch, sizeof t->cfg.arch, "%s", lf_arch_name(h.arch));
    } else if (m->arch != h.arch) {
        len += (size_t)snprintf(bad + len, sizeof bad - len, "model.arch %s (config.json %s)", lf_arch_name(m->arch),
                                lf_arch_name(h.arch));
    }
    HF_KEY(LF_MODEL_GIVEN_N_LAYER, n_layer, "model.n_layer", "%d", int);
    HF_KEY(LF_MODEL_GIVEN_N_HEAD, n_head, "model.n_head", "%d", int);
    HF_KEY(LF_MODEL_GIVEN_N_KV_HEAD, n_kv_head, "model.n_kv_head", "%d", int);
    HF_KEY(LF_MODEL_GIVEN_N_EMBD, n_embd, "model.n_embd", "%d", int);
    HF_KEY(LF_MODEL_GIVEN_FFN_HIDDEN, ffn_hidden, "model.ffn_hidden", "%d", int);
    HF_KEY(LF_MODEL_GIVEN_NORM_EPS, norm_eps, "model.norm_eps", "%g", double);
    HF_KEY(LF_MODEL_GIVEN_ROPE_THETA, rope_theta, "model.rope_theta", "%g", double);
    HF_KEY(LF_MODEL_GIVEN_TIE, tie_embeddings, "model.tie_embeddings", "%d", int);
    HF_KEY(LF_MODEL_GIVEN_BIAS, bias, "model.bias", "%d", int);
    HF_KEY(LF_MODEL_GIVEN_VOCAB_SIZE, vocab_size, "model.vocab_size", "%d", int);
    if (h.arch == LF_ARCH_LLAMA) {
        if (!(g & LF_MODEL_GIVEN_BLOCK_SIZE)) m->block_size = h.block_size;
    } else {
        HF_KEY(LF_MODEL_GIVEN_BLOCK_SIZE, block_size, "model.block_size", "%d", int);
    }
#undef HF_KEY
    if (len)
        return lf_fail(LF_ERR_MISMATCH, "--init-from '%s': the configuration disagrees with its config.json: %s",
                       lf_hf_dir(hf), bad);
    m->padded_vocab_size = 0;
    return LF_OK;
}

lf_status lf_trainer_create(lf_trainer **out, const lf_train_config *cfg, const lf_trainer_opts *opts) {
    *out = NULL;
    lf_status st;
    lf_trainer *t = calloc(1, sizeof *t);
    if (!t) return lf_fail(LF_ERR_NOMEM, "out of memory creating the trainer");
    t->cfg = *cfg;
    if (opts) t->opts = *opts;
    t->best_val = INFINITY;
    lf_loss_scaler_init(&t->scaler, t->cfg.fp16_loss_scale, t->cfg.fp16_scale_power, t->cfg.fp16_window,
                        t->cfg.fp16_hysteresis, t->cfg.fp16_consecutive, t->cfg.fp16_min_scale);
    t->last_val = t->last_train_eval = NAN;
    t->best_score = t->cfg.greater_is_better ? -INFINITY : INFINITY;
    t->last_score = NAN;
    t->best_eval_step = -1;
    t->saved_step = -1;
    pthread_mutex_init(&t->obs_mu, NULL);
    pthread_mutex_init(&t->wd_mu, NULL);
    pthread_cond_init(&t->wd_cv, NULL);
    *out = t; /* so the caller can read errmsg even on failure */
    /* the bus first: it owns the caller's sinks from here on, whatever fails */
    st = lf_obs_create(&t->obs);
    for (int i = 0; i < t->opts.n_sinks && i < 4; i++) {
        if (st == LF_OK) st = lf_obs_add_sink(t->obs, t->opts.sinks[i]);
        else if (t->opts.sinks[i] && t->opts.sinks[i]->close) t->opts.sinks[i]->close(t->opts.sinks[i]);
    }
    if (st != LF_OK) return tfail(t, st);
    /* the trainer's own backend instance (its context and sticky status;
     * LLMFORGE_BACKEND: cpu-fenced, cuda), before the communicator: a device
     * communicator works on the instance's device and stream */
    /* the backend: the config key `backend` ("auto": LLMFORGE_BACKEND, else cuda with a GPU, else cpu) */
    const char *base = NULL;
    st = select_backend(t, &base);
    if (st != LF_OK) return tfail(t, st);
    st = lf_backend_open(lf_backend_precision_name(base, t->cfg.bf16), &t->be);
    if (st != LF_OK) return tfail(t, st);
    /* then the communicator: from here on a failure on one rank is reported
     * by that rank, which ends the job (lf_comm_abort, the caller's part) */
    st = open_comm(t);
    if (st != LF_OK) return tfail(t, st);

    st = lf__train_config_check_ckpt(&t->cfg); /* a struct filled by hand is checked as a parsed one is */
    if (st != LF_OK) return tfail(t, st);
    if (t->opts.skip_batches < 0)
        return tfail(t, lf_fail(LF_ERR_INVALID_ARG, "lf_trainer_opts.skip_batches is %ld (batches to skip: >= 0)",
                                t->opts.skip_batches));
    if (!t->cfg.dataset[0]) return tfail(t, lf_fail(LF_ERR_CONFIG, "key 'data.dataset' is required (a directory written by `llmforge prepare`)"));
    st = lf_dataset_open(&t->ds, t->cfg.dataset);
    if (st != LF_OK) return tfail(t, st);
    if (t->cfg.data_tokenizer[0]) {
        st = lf_dataset_set_tokenizer(t->ds, t->cfg.data_tokenizer);
        if (st != LF_OK) {
            lf_error_prefix("key 'data.tokenizer'");
            return tfail(t, st);
        }
    }
    if (!lf_dataset_tokenizer_spec(t->ds))
        return tfail(t, lf_fail(LF_ERR_CONFIG, "dataset '%s' holds llm.c token files, which name no tokenizer: set key "
                                "'data.tokenizer' (e.g. gpt2:DIR with encoder.json and vocab.bpe)", t->cfg.dataset));
    int V = lf_dataset_vocab_size(t->ds);
    if (t->opts.init_from && t->opts.init_from[0] && is_hf_dir(t->opts.init_from)) {
        st = lf_hf_open(&t->hf, t->opts.init_from);
        if (st == LF_OK) st = hf_merge_config(t, t->hf);
        if (st != LF_OK) return tfail(t, st);
        if (t->cfg.model.vocab_size < V)
            return tfail(t, lf_fail(LF_ERR_CONFIG, "--init-from '%s' has %d embedding rows but dataset '%s' has %d "
                                    "tokens: prepare the data with the model's tokenizer (hf:%s/tokenizer.json)",
                                    t->opts.init_from, t->cfg.model.vocab_size, t->cfg.dataset, V,
                                    t->opts.init_from));
    }
    t->mcfg = t->cfg.model;
    if (t->cfg.model.vocab_size == 0 || t->cfg.model.vocab_size == V) {
        t->mcfg.vocab_size = V;
        t->mcfg.padded_vocab_size = 0;
        t->cfg.model.vocab_size = V; /* resolved: every default filled in */
    } else if (t->cfg.model.vocab_size > V) {
        t->mcfg.padded_vocab_size = t->cfg.model.vocab_size; /* padded rows, never targets */
        t->mcfg.vocab_size = V;
    } else {
        return tfail(t, lf_fail(LF_ERR_CONFIG, "key 'model.vocab_size' is %d but dataset '%s' has %d tokens",
                                t->cfg.model.vocab_size, t->cfg.dataset, V));
    }
    if ((st = lf_model_config_resolve(&t->mcfg)) != LF_OK) return tfail(t, st);
    int T = t->cfg.model.block_size, B = t->cfg.micro_batch, A = t->cfg.grad_accum;
    size_t ntrain = lf_dataset_num_tokens(t->ds, LF_SPLIT_TRAIN), nval = lf_dataset_num_tokens(t->ds, LF_SPLIT_VAL);
    if (ntrain < (size_t)T + 2)
        return tfail(t, lf_fail(LF_ERR_CONFIG, "model.block_size %d is larger than the data: dataset '%s' split 'train' has %zu tokens (needs at least %d)",
                                T, t->cfg.dataset, ntrain, T + 2));
    if (t->cfg.eval_interval > 0 && nval > 0 && nval < (size_t)T + 2)
        return tfail(t, lf_fail(LF_ERR_CONFIG, "model.block_size %d is larger than the data: dataset '%s' split 'val' has %zu tokens (needs at least %d)",
                                T, t->cfg.dataset, nval, T + 2));

    if (t->cfg.sampling == LF_SAMPLING_RECORDS) {
        st = lf_dataset_index_records(t->ds, LF_SPLIT_TRAIN, T);
        if (st == LF_OK && nval >= (size_t)T + 2) st = lf_dataset_index_records(t->ds, LF_SPLIT_VAL, T);
        if (st != LF_OK) {
            lf_error_prefix("data.sampling records");
            return tfail(t, st);
        }
    }
    snprintf(t->ckpt_root, sizeof t->ckpt_root, "%s/ckpt", t->cfg.out_dir);
    if (t->rank == 0) { /* out_dir is rank 0's: the other ranks may not even see it (another host) */
        st = lf_mkdirs(t->cfg.out_dir);
        if (st != LF_OK) {
            lf_error_prefix("out_dir '%s' is not usable", t->cfg.out_dir);
            return tfail(t, st);
        }
        if (t->opts.resume == LF_RESUME_AUTO) {
            /* continue what out_dir holds; start fresh only when it holds no checkpoint at all
             * (a broken one is an error: starting over would bury it) */
            char *old = NULL;
            st = lf_checkpoint_resolve(t->ckpt_root, &old);
            if (st != LF_OK && st != LF_ERR_NOT_FOUND) {
                lf_error_prefix("--resume auto");
                return tfail(t, st);
            }
            t->opts.resume = st == LF_OK ? LF_RESUME_YES : LF_RESUME_NO;
            lf_log(LF_LOG_INFO, "--resume auto: %s%s%s", old ? "resuming from " : "no checkpoint in ",
                   old ? old : t->ckpt_root, old ? "" : "; starting a fresh run");
            lf_free(old);
        } else if (!t->opts.resume) {
            /* a fresh run must not mix its checkpoints with an earlier run's */
            char *old = NULL;
            if (lf_checkpoint_resolve(t->ckpt_root, &old) == LF_OK) {
                st = lf_fail(LF_ERR_CONFIG, "out_dir '%s' already holds a run (checkpoint '%s'); continue it with "
                             "--resume, or choose another out_dir", t->cfg.out_dir, old);
                lf_free(old);
                return tfail(t, st);
            }
        }
        st = write_resolved_config(t);
        if (st != LF_OK) return tfail(t, st);
    }
    if (opts && opts->resume == LF_RESUME_AUTO && t->world > 1) {
        /* rank 0 decided (it alone sees out_dir): every rank does the same */
        int64_t v = t->rank == 0 ? t->opts.resume : 0;
        lf_comm_set_context(t->comm, "startup");
        st = lf_comm_broadcast_bytes(t->comm, &v, sizeof v, 0);
        if (st != LF_OK) return tfail(t, st);
        t->opts.resume = (int)v;
    }

    /* every byte of the step, known before any large allocation: refuse now what cannot fit */
    lf_mem_plan plan;
    st = lf_mem_plan_make_backend(&plan, &t->cfg, &t->mcfg, t->be, t->rank);
    if (st == LF_OK) st = lf_mem_plan_check(&plan, &t->cfg, &t->mcfg);
    if (st != LF_OK) return tfail(t, st);
    if (plan.on_device && t->rank == 0) {
        char b1[32], b2[32];
        lf_log(LF_LOG_INFO, "backend %s: the plan needs %s of device memory, %s free", plan.device,
               lf_fmt_bytes(plan.device_total, b1, sizeof b1), lf_fmt_bytes(plan.device_free, b2, sizeof b2));
    }
    st = lf_model_create(&t->model, &t->mcfg, t->be);
    if (st != LF_OK) return tfail(t, device_oom(t, st, &plan));
    st = make_ckpt_extras(t);
    if (st != LF_OK) return tfail(t, st);
    st = lf_model_init_weights(t->model, t->cfg.seed);
    if (st != LF_OK) return tfail(t, st);
    size_t act_bytes = 0;
    st = lf_model_set_recompute(t->model, (lf_recompute)t->cfg.recompute);
    if (st == LF_OK) st = lf_model_plan(t->model, B, T, &act_bytes);
    if (st != LF_OK) return tfail(t, device_oom(t, st, &plan));

    size_t n = lf_model_num_params(t->model);
    /* weights, gradients, two moments, three host staging copies, batches, activations */
    t->planned_bytes = plan.total;
    t->plan_json = lf__trep_plan_json(&plan);
    t->planned_act_bytes = plan.act.total;
    if (act_bytes != plan.act.total) /* the model's own count must be the plan's */
        return tfail(t, lf_fail(LF_ERR_INTERNAL, "activation plan mismatch: the model allocated %zu bytes, the memory "
                                "plan says %zu", act_bytes, plan.act.total));
    t->flops_per_token = lf_model_flops_per_token(&t->mcfg, T);
    t->spike_win = calloc((size_t)t->cfg.alert_spike_window, sizeof(double));
    if (!t->spike_win) return tfail(t, lf_fail(LF_ERR_NOMEM, "out of memory"));
    st = zero_layout(t); /* ZeRO: this rank's shard of every unit */
    if (st != LF_OK) return tfail(t, device_oom(t, st, &plan));
    size_t nm = moments_n(t); /* AdamW moments: the whole model, or this rank's shard */
    /* ZeRO-Offload (offload_optimizer.device cpu on a device backend): the
     * moments in host memory, updated there (offload_adamw); on a CPU
     * backend the moments are host memory anyway */
    t->offload = t->cfg.offload_optimizer == 1 && !t->be->ops->host_memory;
    if (t->offload) {
        /* pinned where the backend offers it (cuda): every step moves the
         * gradients down and the parameters up through these */
        t->pinned = t->be->ops->host_alloc && t->be->ops->host_free;
        t->m = off_alloc(t, nm * sizeof(float));
        t->v = off_alloc(t, nm * sizeof(float));
        t->off_g = off_alloc(t, nm * sizeof(float));
        if (!t->m || !t->v || !t->off_g)
            return tfail(t, lf_fail(LF_ERR_NOMEM, "out of host memory allocating the offloaded AdamW moments (%zu "
                                    "floats each)", nm));
        memset(t->m, 0, nm * sizeof(float));
        memset(t->v, 0, nm * sizeof(float));
    } else {
        t->m = t->be->ops->alloc(t->be, nm * sizeof(float));
        t->v = t->be->ops->alloc(t->be, nm * sizeof(float));
        if (!t->m || !t->v)
            return tfail(t, device_oom(t, lf_fail(LF_ERR_NOMEM, "out of memory allocating the AdamW moments (%zu "
                                                  "floats each)", nm), &plan));
        t->be->ops->zero(t->be, t->m, nm);
        t->be->ops->zero(t->be, t->v, nm);
    }
    if (t->be->ops->host_memory) { /* checkpoints read and write the tensors in place */
        t->host_params = lf_model_params(t->model);
        t->host_m = t->m;
        t->host_v = t->v;
    } else {
        t->host_params = t->offload ? off_alloc(t, n * sizeof(float)) : lf_alloc(n * sizeof(float));
        t->host_m = t->offload ? t->m : lf_alloc(nm * sizeof(float));
        t->host_v = t->offload ? t->v : lf_alloc(nm * sizeof(float));
    }
    t->inputs = lf_alloc(sizeof(int32_t) * (size_t)A * B * T);
    t->targets = lf_alloc(sizeof(int32_t) * (size_t)A * B * T);
    if (!t->m || !t->v || !t->host_params || !t->host_m || !t->host_v || !t->inputs || !t->targets)
        return tfail(t, lf_fail(LF_ERR_NOMEM, "out of memory allocating optimizer state for %zu parameters", n));
    st = xfer_alloc(t); /* collectives on backend memory that is not the host's: staged through it */
    if (st != LF_OK) return tfail(t, st);

    if (t->opts.init_from && t->opts.init_from[0] && t->rank == 0) { /* broadcast below */
        int count;
        const lf_param_info *table = lf_model_params_table(t->model, &count);
        lf_ckpt_tensors tt = {table, count, n};
        st = t->hf ? lf_hf_load_params(t->hf, table, count, t->mcfg.tie_embeddings, t->host_params)
                   : lf_weights_load(t->opts.init_from, &tt, t->host_params);
        if (st != LF_OK) return tfail(t, st);
        if (t->hf) lf_log(LF_LOG_INFO, "initialised from Hugging Face model %s (%s)", t->opts.init_from,
                          lf_hf_model_type(t->hf));
        lf_hf_close(t->hf);
        t->hf = NULL;
        stage_in(t, lf_model_params(t->model), t->host_params, n * sizeof(float));
    }

    if (t->rank == 0) {
        st = open_sinks(t);
        if (st != LF_OK) return tfail(t, st);
    }
    st = load_tasks(t);
    if (st != LF_OK) return tfail(t, st);
    st = lf__treg_open(&t->treg, &t->cfg, t->rank, lf_dataset_tokenizer_spec(t->ds));
    if (st != LF_OK) return tfail(t, st);

    if (t->opts.resume) {
        st = resume_from(t, t->ckpt_root, 0); /* rank 0 reads, every rank gets the same state */
        if (st != LF_OK) return tfail(t, st);
    } else if (t->world > 1) {
        /* one set of weights everywhere: rank 0's (its --init-from file, or
         * the seeded initialisation every rank made alike anyway) */
        lf_comm_set_context(t->comm, "startup");
        if (t->rank == 0) stage_out(t, t->host_params, lf_model_params(t->model), n * sizeof(float));
        st = lf_comm_broadcast_bytes(t->comm, t->host_params, n * sizeof(float), 0); /* host memory */
        if (st != LF_OK) return tfail(t, st);
        stage_in(t, lf_model_params(t->model), t->host_params, n * sizeof(float));
    }
    if (t->opts.skip_batches > 0) { /* after the resume: on top of the checkpoint's own offset */
        t->data_off += t->opts.skip_batches;
        if (t->rank == 0)
            lf_log(LF_LOG_INFO, "skipping %ld steps' batches: step %ld reads the rows of data step %ld", t->opts.skip_batches,
                   t->step + 1, t->step + t->data_off + 1);
    }
    if (t->cfg.ckpt_async && t->rank == 0) { /* the snapshot the writer owns (ZeRO is refused with async) */
        t->job = calloc(1, sizeof *t->job);
        t->snap_params = lf_alloc(n * sizeof(float));
        t->snap_m = lf_alloc(n * sizeof(float));
        t->snap_v = lf_alloc(n * sizeof(float));
        if (!t->job || !t->snap_params || !t->snap_m || !t->snap_v)
            return tfail(t, lf_fail(LF_ERR_NOMEM, "out of memory allocating the checkpoint snapshot (checkpoint.async: "
                                    "3 x %zu floats)", n));
    }
    st = zero_partition(t); /* ZeRO-2/3: the model gives up its whole gradient (and parameter) buffers */
    if (st != LF_OK) return tfail(t, st);
    st = gbf_alloc(t); /* communication_data_type bf16: the gradients' staging (after zero_partition: overlap) */
    if (st != LF_OK) return tfail(t, device_oom(t, st, &plan));
    st = open_loader(t); /* its ring is step memory too: allocated before the first step */
    if (st != LF_OK) return tfail(t, st);
    return LF_OK;
}

void lf_trainer_free(lf_trainer *t) {
    if (!t) return;
    stop_watchdog(t);
    if (t->ckw_running) { /* lf_trainer_run waits for the writer; this is for a caller that did not run */
        pthread_join(t->ckw, NULL);
        t->ckw_running = 0;
        free(t->job->snap.state);
        lf_free(t->job->saved);
    }
    free(t->job);
    lf_free(t->snap_params);
    lf_free(t->snap_m);
    lf_free(t->snap_v);
    lf_hf_close(t->hf);
    lf_obs_free(t->obs);
    lf_eval_tasks_free(t->tasks);
    lf_eval_results_free(t->task_res);
    lf__treg_close(t->treg);
    lf_tokenizer_free(t->tok);
    free(t->spike_win);
    free(t->plan_json);
    pthread_mutex_destroy(&t->obs_mu);
    pthread_mutex_destroy(&t->wd_mu);
    pthread_cond_destroy(&t->wd_cv);
    if (t->offload) {
        off_free(t, t->m);
        off_free(t, t->v);
        off_free(t, t->off_g);
        off_free(t, t->host_params);
        t->host_params = NULL;
    } else if (t->be) {
        if (t->m) t->be->ops->free(t->be, t->m);
        if (t->v) t->be->ops->free(t->be, t->v);
    }
    lf_free(t->tok_data);
    lf_free(t->tpl_data);
    lf_free(t->hf_config);
    if (t->be && !t->be->ops->host_memory) {
        if (!t->offload) {
            lf_free(t->host_params);
            lf_free(t->host_m);
            lf_free(t->host_v);
        }
    }
    lf_free(t->xfer);
    lf_free(t->inputs);
    lf_free(t->targets);
    if (t->be && t->gshard) t->be->ops->free(t->be, t->gshard);
    for (int i = 0; i < 2; i++)
        if (t->be && t->gbf[i]) t->be->ops->free(t->be, t->gbf[i]);
    if (t->be && t->pshard) t->be->ops->free(t->be, t->pshard);
    free(t->unit_lo);
    lf_model_free(t->model);
    lf_backend_close(t->be); /* after everything allocated on it */
    lf_loader_close(t->loader);
    lf_dataset_close(t->ds);
    if (t->own_comm) lf_comm_close(t->comm); /* last: it may finalise MPI */
    free(t);
}

/* ---------------------------------------------------------------- evaluation */

/* Mean over eval_iters random batches of the batch-mean loss (nanoGPT's
 * estimate_loss). Rows are keyed by (step, batch) so evaluation never
 * disturbs the training streams. With W ranks batch k is the global
 * micro-batch of W*B rows, rank r evaluating rows r*B .. r*B+B-1 of it; the
 * ranks sum each batch's (loss sum, target count) and every rank divides, so
 * the figures are those of one process with micro-batch W*B. */
#define EVAL_CHUNK 2048 /* batches per reduction: 2 values each, within LF_COMM_SCALARS_MAX */
static lf_status estimate_loss(lf_trainer *t, lf_split split, double *out) {
    int B = t->cfg.micro_batch, T = t->cfg.model.block_size, iters = t->cfg.eval_iters;
    double total = 0, part[EVAL_CHUNK][2];
    lf_forward_opts fo = {0};
    for (int k0 = 0; k0 < iters; k0 += EVAL_CHUNK) {
        int nk = iters - k0 < EVAL_CHUNK ? iters - k0 : EVAL_CHUNK;
        for (int j = 0; j < nk; j++) {
            uint64_t batch = (uint64_t)t->step * (uint64_t)iters + (uint64_t)(k0 + j);
            uint64_t first = (batch * (uint64_t)t->world + (uint64_t)t->rank) * (uint64_t)B;
            /* random windows, or record-aligned ones when training samples records */
            lf_sampling smp = t->cfg.sampling == LF_SAMPLING_RECORDS ? LF_SAMPLING_RECORDS : LF_SAMPLING_RANDOM;
            lf_status st = lf_dataset_get_batch(t->ds, split, smp, t->cfg.seed,
                                                split == LF_SPLIT_TRAIN ? LF_RNG_EVAL : LF_RNG_EVAL + 16, first, B, T,
                                                t->inputs, t->targets);
            if (st != LF_OK) return st;
            double sum;
            long cnt;
            st = lf_model_forward(t->model, t->inputs, t->targets, B, T, &fo, &sum, &cnt);
            if (st != LF_OK) return st;
            part[j][0] = sum;
            part[j][1] = (double)cnt;
        }
        if (t->world > 1) {
            lf_status st = lf_comm_all_reduce_f64(t->comm, &part[0][0], 2 * (size_t)nk, LF_COMM_SUM);
            if (st != LF_OK) return st;
        }
        for (int j = 0; j < nk; j++) total += part[j][1] > 0 ? part[j][0] / part[j][1] : 0.0;
    }
    *out = total / iters;
    return LF_OK;
}

static lf_status run_eval(lf_trainer *t) {
    double t0 = lf_time_now();
    lf_comm_set_context(t->comm, "evaluation at step %ld", t->step);
    double tl = NAN, vl = NAN;
    lf_status st = estimate_loss(t, LF_SPLIT_TRAIN, &tl);
    if (st != LF_OK) return st;
    if (lf_dataset_num_tokens(t->ds, LF_SPLIT_VAL) > 0) {
        st = estimate_loss(t, LF_SPLIT_VAL, &vl);
        if (st != LF_OK) return st;
        if (vl < t->best_val) t->best_val = vl;
    }
    t->last_val = vl;
    t->last_train_eval = tl;
    t->last_eval_step = t->step;
    lf_obs_scalar sc[64];
    char names[64][160];
    int n = 0;
    sc[n++] = (lf_obs_scalar){"eval/train_loss", tl};
    sc[n++] = (lf_obs_scalar){"eval/val_loss", vl};
    double score = vl;
    if (t->tasks) {
        /* the tasks run on sessions of their own shapes: training keeps its plan */
        st = lf_eval_tasks_run(t->tasks, t->model, t->tok, NULL, t->task_res);
        if (st != LF_OK) return st;
        size_t nm = 0;
        const lf_eval_metric *m = lf_eval_results_metrics(t->task_res, &nm);
        for (size_t i = 0; i < nm && n < 63; i++) {
            snprintf(names[n], sizeof names[n], "eval/%s", m[i].name);
            sc[n] = (lf_obs_scalar){names[n], m[i].value};
            n++;
        }
        if (strcmp(t->cfg.best_metric, "val_loss") != 0 &&
            lf_eval_results_get(t->task_res, t->cfg.best_metric, &score) != LF_OK)
            score = NAN;
    }
    t->last_score = score;
    if (isfinite(score) && (t->cfg.greater_is_better ? score > t->best_score : score < t->best_score)) {
        t->best_score = score; /* strictly better: a tie keeps the earlier checkpoint */
        t->best_eval_step = t->step;
    }
    sc[n++] = (lf_obs_scalar){"time/eval_ms", (lf_time_now() - t0) * 1e3};
    lf_obs_record r = {.kind = LF_OBS_EVAL, .step = t->step, .scalars = sc, .n_scalars = n};
    obs_emit(t, &r);
    return LF_OK;
}

/* checkpoint.load_best_model_at_end: the best checkpoint's model files are
 * copied to out_dir/final_model (what transformers' from_pretrained and
 * llmforge sample read). */
static lf_status export_best_model(lf_trainer *t) {
    if (!t->best_ckpt[0]) return LF_OK;
    char dst[LF_PATH_MAX + 32];
    snprintf(dst, sizeof dst, "%s/final_model", t->cfg.out_dir);
    lf_status st = lf_mkdirs(dst);
    if (st != LF_OK) return st;
    static const char *files[] = {"model.safetensors", "config.json", "vocab.json", "tokenizer.json",
                                  "chat_template.json", "trainer_state.json"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char src[LF_PATH_MAX + 200], out[LF_PATH_MAX + 64];
        snprintf(src, sizeof src, "%s/%s/%s", t->ckpt_root, t->best_ckpt, files[i]);
        snprintf(out, sizeof out, "%s/%s", dst, files[i]);
        if (access(src, F_OK) != 0) continue;
        char *data = NULL;
        size_t len = 0;
        st = lf_file_read_all(src, 0, &data, &len);
        if (st == LF_OK) st = lf_file_write_all(out, data, len);
        lf_free(data);
        if (st != LF_OK) return st;
    }
    char esc[LF_PATH_MAX * 2], json[LF_PATH_MAX * 2 + 128], score[LF_JSON_NUMBER_MAX];
    json_escape(esc, sizeof esc, dst);
    lf_json_number(score, sizeof score, t->best_score);
    snprintf(json, sizeof json, "{\"path\":\"%s\",\"from\":\"%s\",\"%s\":%s}", esc, t->best_ckpt,
             t->cfg.best_metric, score);
    emit_event(t, "final_model", NULL, json);
    return LF_OK;
}

/* ---------------------------------------------------------------- one step */

typedef struct step_result {
    double loss;          /* as observed (a test hook may inflate it) */
    double norm;          /* global gradient norm before clipping */
    float lr;
    int skipped;          /* an alert or an fp16 overflow skipped the update */
    int overflow;         /* fp16: the gradients overflowed */
    double loss_scale;    /* fp16: the scale this step used */
    double data_ms, forward_ms, backward_ms, optimizer_ms;
    double comm_ms;       /* waited for collectives (token count, loss, gradients): exposed; not in the
                             other phases */
    double comm_hidden_ms; /* collectives' time behind computation (comm.overlap on nccl: lf_comm_times) */
    const char *rollback; /* an alert asked for a rollback: its kind ("nan", "loss_spike"); NULL: none */
    char alert_msg[256];
} step_result;

/* An alert whose action is rollback: allowed while the run has rolled back
 * fewer than monitor.alerts.max_rollbacks times (then lf_trainer_run does
 * it, before the step counts); past that, the run stops with the history.
 * Decided from reduced values: alike on every rank. */
static lf_status rollback_request(lf_trainer *t, step_result *o, const char *kind, const char *msg) {
    if (t->n_rollbacks >= t->cfg.alert_max_rollbacks) {
        raise_alert(t, kind, "stop", msg);
        return lf_fail(LF_ERR_NUMERIC, "%s; stopped without a checkpoint: monitor.alerts.max_rollbacks is %d and the "
                       "run has rolled back %d time%s (%s)", msg, t->cfg.alert_max_rollbacks, t->n_rollbacks,
                       t->n_rollbacks == 1 ? "" : "s", t->n_rollbacks ? t->rb_hist : "no history");
    }
    raise_alert(t, kind, "rollback", msg);
    o->rollback = kind;
    snprintf(o->alert_msg, sizeof o->alert_msg, "%s", msg);
    return LF_OK;
}

/* fp16 on the CPU: the (scaled) gradients are rounded to fp16, as an fp16
 * gradient buffer would hold them; a value beyond fp16's range becomes inf.
 * buf holds flat elements [lo, lo+n). Returns the index (in the parameter
 * table) of the first tensor holding a non-finite gradient, -1 when all are
 * finite. The buffer is backend memory (the backend's fp16_round). */
static int fp16_round_range(lf_trainer *t, float *buf, size_t lo, size_t n) {
    int count = 0;
    const lf_param_info *table = lf_model_params_table(t->model, &count);
    int bad = -1;
    for (int k = 0; k < count; k++) {
        size_t a = table[k].offset, b = a + table[k].numel;
        if (a < lo) a = lo;
        if (b > lo + n) b = lo + n;
        if (a >= b) continue;
        if (t->be->ops->fp16_round(t->be, buf + (a - lo), b - a) && bad < 0) bad = k; /* backend memory */
    }
    return bad;
}

static int fp16_round_grads(lf_trainer *t) {
    return fp16_round_range(t, lf_model_grads(t->model), 0, lf_model_num_params(t->model));
}

static void scale_grads(lf_trainer *t, float f) {
    t->be->ops->scale(t->be, lf_model_grads(t->model), lf_model_num_params(t->model), f);
}

/* z-score of x against the window of accepted losses (0 while the window
 * is not yet full or has no spread). */
static double spike_z(const lf_trainer *t, double x) {
    int n = t->spike_n;
    if (n < t->cfg.alert_spike_window) return 0;
    double mean = 0, var = 0;
    for (int i = 0; i < n; i++) mean += t->spike_win[i];
    mean /= n;
    for (int i = 0; i < n; i++) var += (t->spike_win[i] - mean) * (t->spike_win[i] - mean);
    double sd = sqrt(var / (n - 1));
    return sd > 0 ? (x - mean) / sd : 0;
}

static void spike_push(lf_trainer *t, double x) {
    t->spike_win[t->spike_pos] = x;
    t->spike_pos = (t->spike_pos + 1) % t->cfg.alert_spike_window;
    if (t->spike_n < t->cfg.alert_spike_window) t->spike_n++;
}

/* The training loader at the current step (a resume opens it at the checkpoint's step: O(1)). */
static lf_status open_loader(lf_trainer *t) {
    lf_loader_close(t->loader);
    t->loader = NULL;
    lf_loader_opts lo = lf_loader_opts_default();
    lo.sampling = (lf_sampling)t->cfg.sampling;
    lo.seed = t->cfg.seed;
    lo.micro_batch = t->cfg.micro_batch;
    lo.block_size = t->cfg.model.block_size;
    lo.accum = t->cfg.grad_accum;
    lo.rank = t->rank; /* this rank's rows of each step's global batch */
    lo.world = t->world;
    lo.prefetch = t->cfg.prefetch;
    return lf_loader_open(&t->loader, t->ds, &lo, (uint64_t)(t->step + t->data_off));
}

/* Collectives of a step, timed into o->comm_ms. */
static lf_status step_sum_i64(lf_trainer *t, step_result *o, int64_t *v, size_t n) {
    double t0 = lf_time_now();
    lf_status st = lf_comm_all_reduce_i64(t->comm, v, n, LF_COMM_SUM);
    o->comm_ms += (lf_time_now() - t0) * 1e3;
    return st;
}

static lf_status step_sum_f64(lf_trainer *t, step_result *o, double *v, size_t n) {
    double t0 = lf_time_now();
    lf_status st = lf_comm_all_reduce_f64(t->comm, v, n, LF_COMM_SUM);
    o->comm_ms += (lf_time_now() - t0) * 1e3;
    return st;
}

/* ---------------------------------------------------------------- collectives on backend memory
 *
 * Every collective whose buffers are backend memory (gradient buckets, ZeRO
 * units, shards) goes through dev_all_reduce / dev_reduce_scatter /
 * dev_all_gather, never straight to lf_comm_*. Why: the communicator reads
 * and writes its buffers as host memory. That is true of backend memory on
 * the CPU backends (host_memory 1), and there the helpers make the very call
 * the trainer made before, in place: no copy, the same speed and bits. It is
 * not true of a device (or of cpu-fenced, whose memory faults outside a
 * backend call): MPI needs host buffers unless it is CUDA-aware, so there the
 * floats go to_host into t->xfer, the collective runs on host memory, and the
 * part it wrote comes back with to_device. The nccl communicator takes
 * device buffers directly (lf_comm_device_buffers): with it the helpers take
 * the in-place branch, ordered on the backend's stream (lf_comm_set_stream,
 * set by open_comm), and no staging is allocated.
 *
 * One rank (the "single" communicator, ZeRO on one process) needs no host:
 * its collectives are identities, made as a backend copy where the buffers
 * differ.
 *
 * Invariants: t->xfer is allocated once at setup (xfer_alloc), xfer_n floats:
 * the largest buffer any of these moves (a gradient bucket at stage 0, the
 * largest unit with ZeRO), counted by the memory plan with the checkpoint
 * staging (lf_mem_plan_make_rank's host_staging). Partitions are
 * lf_comm_partition's, as the communicator's, so this rank's part of n sits
 * at the same offset in xfer as in the device buffer. The copies are timed
 * with the collective (comm_ms): they are the price of the transport. */

/* Floats of the host staging buffer: 0 in place (host memory, a device
 * communicator, or one rank). */
/* Elements of the largest collective on backend memory: a gradient bucket
 * at stage 0 (all_reduce_grads), the largest unit with ZeRO (reduce-scatters
 * and all-gathers of whole units). Sizes the host staging and the bf16
 * gradient staging. */
static size_t largest_collective(const lf_trainer *t) {
    if (!t->zstage) {
        const size_t n = lf_model_num_params(t->model), bucket = (size_t)t->cfg.comm_bucket_elems;
        return bucket < n ? bucket : n;
    }
    size_t most = 0;
    for (int u = 0; u < t->n_units; u++)
        if (t->unit_n[u] > most) most = t->unit_n[u];
    return most;
}

static size_t xfer_floats(const lf_trainer *t) {
    if (t->be->ops->host_memory || lf_comm_device_buffers(t->comm) || t->world < 2) return 0;
    return largest_collective(t);
}

static lf_status xfer_alloc(lf_trainer *t) {
    t->xfer_n = xfer_floats(t);
    if (!t->xfer_n) return LF_OK;
    t->xfer = lf_alloc(t->xfer_n * sizeof(float));
    if (!t->xfer)
        return lf_fail(LF_ERR_NOMEM, "out of memory allocating the host staging of collectives (%zu floats)",
                       t->xfer_n);
    return LF_OK;
}

static lf_status xfer_fits(const lf_trainer *t, const char *what, size_t n) {
    if (n <= t->xfer_n) return LF_OK;
    return lf_fail(LF_ERR_INTERNAL, "%s of %zu floats on backend memory: the host staging holds %zu", what, n,
                   t->xfer_n);
}

/* The communicator reads backend memory as it is: host memory, or a device
 * communicator (nccl) on a device backend. */
static int in_place(const lf_trainer *t) { return t->be->ops->host_memory || lf_comm_device_buffers(t->comm); }

/* buf (n, backend memory) := the sum over ranks, in place. */
static lf_status dev_all_reduce(lf_trainer *t, float *buf, size_t n) {
    if (in_place(t)) return lf_comm_all_reduce(t->comm, buf, n, LF_COMM_SUM);
    if (t->world == 1) return LF_OK; /* the sum over one rank */
    lf_status st = xfer_fits(t, "all_reduce", n);
    if (st != LF_OK) return st;
    t->be->ops->to_host(t->be, t->xfer, buf, n * sizeof(float));
    st = lf_comm_all_reduce(t->comm, t->xfer, n, LF_COMM_SUM);
    if (st == LF_OK) t->be->ops->to_device(t->be, buf, t->xfer, n * sizeof(float));
    return st;
}

/* recv (this rank's part of n) := that part of the sum over ranks of send
 * (n); both backend memory, recv == send + offset(rank) allowed (in place). */
static lf_status dev_reduce_scatter(lf_trainer *t, const float *send, float *recv, size_t n) {
    if (in_place(t)) return lf_comm_reduce_scatter(t->comm, send, recv, n, LF_COMM_SUM);
    if (t->world == 1) { /* one rank's part is the whole: a copy on the backend */
        if (recv != send && n) t->be->ops->copy(t->be, recv, send, n * sizeof(float));
        return LF_OK;
    }
    lf_status st = xfer_fits(t, "reduce_scatter", n);
    if (st != LF_OK) return st;
    size_t po = 0, pc = 0;
    lf_comm_partition(n, t->world, t->rank, &po, &pc);
    t->be->ops->to_host(t->be, t->xfer, send, n * sizeof(float));
    st = lf_comm_reduce_scatter(t->comm, t->xfer, t->xfer + po, n, LF_COMM_SUM);
    if (st == LF_OK && pc) t->be->ops->to_device(t->be, recv, t->xfer + po, pc * sizeof(float));
    return st;
}

/* recv (n) := every rank's part, part p from rank p's send; both backend
 * memory, send == recv + offset(rank) allowed (in place). */
static lf_status dev_all_gather(lf_trainer *t, const float *send, float *recv, size_t n) {
    if (in_place(t)) return lf_comm_all_gather(t->comm, send, recv, n);
    if (t->world == 1) {
        if (recv != send && n) t->be->ops->copy(t->be, recv, send, n * sizeof(float));
        return LF_OK;
    }
    lf_status st = xfer_fits(t, "all_gather", n);
    if (st != LF_OK) return st;
    size_t po = 0, pc = 0;
    lf_comm_partition(n, t->world, t->rank, &po, &pc);
    if (pc) t->be->ops->to_host(t->be, t->xfer + po, send, pc * sizeof(float));
    st = lf_comm_all_gather(t->comm, t->xfer + po, t->xfer, n);
    if (st == LF_OK) t->be->ops->to_device(t->be, recv, t->xfer, n * sizeof(float));
    return st;
}

/* ---------------------------------------------------------------- gradients on the wire in bf16
 * communication_data_type: bf16 (DeepSpeed's key), several ranks: each
 * gradient sum (stage 0's buckets, ZeRO's unit reduce-scatters) rounds this
 * rank's fp32 gradient to bf16 into t->gbf on the backend (grad_to_bf16),
 * runs the bf16 collective (comm.h "bf16": on mpi, tcp and the NCCL shim the
 * bf16 of the fp32 rank-order fold, on NCCL ncclBfloat16) and widens the
 * result back into the fp32 buffer (grad_from_bf16, exact); master weights,
 * moments and AdamW stay fp32. One rank communicates nothing, so nothing is
 * rounded. Stage 0, 1 and 2 give the same bits on the kinds that fold in
 * rank order (every element is bf16(fold of the ranks' bf16 gradients)),
 * with grad_accum_steps 1: ZeRO-2 sums each micro-batch's gradient. The
 * staging is counted by the memory plan. */

static lf_status gbf_alloc(lf_trainer *t) {
    t->grad_bf16 = t->cfg.comm_bf16 && t->world > 1;
    if (!t->grad_bf16) return LF_OK;
    if (!t->be->ops->grad_to_bf16 || !t->be->ops->grad_from_bf16)
        return lf_fail(LF_ERR_UNSUPPORTED, "communication_data_type: bf16: the '%s' backend cannot convert gradients "
                       "to bf16 (use fp32)", t->be->ops->name);
    t->gbf_n = largest_collective(t);
    for (int i = 0; i < (t->overlap ? 2 : 1); i++) {
        t->gbf[i] = t->be->ops->alloc(t->be, (t->gbf_n ? t->gbf_n : 1) * sizeof(uint16_t));
        if (!t->gbf[i])
            return lf_fail(LF_ERR_NOMEM, "out of memory allocating the bf16 gradient staging "
                           "(communication_data_type: bf16, %zu values)", t->gbf_n);
    }
    return LF_OK;
}

/* bf16 collectives on backend memory: in place where the communicator reads
 * it, else through the host staging (t->xfer, bytes), as dev_* do. */
static lf_status dev_all_reduce_bf16(lf_trainer *t, uint16_t *buf, size_t n) {
    if (in_place(t)) return lf_comm_all_reduce_bf16(t->comm, buf, n, LF_COMM_SUM);
    lf_status st = xfer_fits(t, "bf16 all_reduce", (n + 1) / 2);
    if (st != LF_OK) return st;
    uint16_t *x = (uint16_t *)t->xfer;
    t->be->ops->to_host(t->be, x, buf, n * sizeof(uint16_t));
    st = lf_comm_all_reduce_bf16(t->comm, x, n, LF_COMM_SUM);
    if (st == LF_OK) t->be->ops->to_device(t->be, buf, x, n * sizeof(uint16_t));
    return st;
}

static lf_status dev_reduce_scatter_bf16(lf_trainer *t, const uint16_t *send, uint16_t *recv, size_t n) {
    if (in_place(t)) return lf_comm_reduce_scatter_bf16(t->comm, send, recv, n, LF_COMM_SUM);
    lf_status st = xfer_fits(t, "bf16 reduce_scatter", (n + 1) / 2);
    if (st != LF_OK) return st;
    size_t po = 0, pc = 0;
    lf_comm_partition(n, t->world, t->rank, &po, &pc);
    uint16_t *x = (uint16_t *)t->xfer;
    t->be->ops->to_host(t->be, x, send, n * sizeof(uint16_t));
    st = lf_comm_reduce_scatter_bf16(t->comm, x, x + po, n, LF_COMM_SUM);
    if (st == LF_OK && pc) t->be->ops->to_device(t->be, recv, x + po, pc * sizeof(uint16_t));
    return st;
}

static lf_status gbf_fits(const lf_trainer *t, const char *what, size_t n) {
    if (n <= t->gbf_n) return LF_OK;
    return lf_fail(LF_ERR_INTERNAL, "%s of %zu gradients: the bf16 staging holds %zu", what, n, t->gbf_n);
}

/* A gradient bucket (n, backend memory) := its sum over ranks, in place. */
static lf_status grad_all_reduce(lf_trainer *t, float *buf, size_t n) {
    if (!t->grad_bf16) return dev_all_reduce(t, buf, n);
    lf_status st = gbf_fits(t, "all_reduce", n);
    if (st != LF_OK) return st;
    uint16_t *b = t->gbf[0];
    t->be->ops->grad_to_bf16(t->be, b, buf, n);
    st = dev_all_reduce_bf16(t, b, n);
    if (st == LF_OK) t->be->ops->grad_from_bf16(t->be, buf, b, n);
    return st;
}

/* recv (this rank's part of n) := that part of the sum over ranks of the
 * gradient send (n), recv == send + offset allowed (dev_reduce_scatter). */
static lf_status grad_reduce_scatter(lf_trainer *t, const float *send, float *recv, size_t n) {
    if (!t->grad_bf16) return dev_reduce_scatter(t, send, recv, n);
    lf_status st = gbf_fits(t, "reduce_scatter", n);
    if (st != LF_OK) return st;
    size_t po = 0, pc = 0;
    lf_comm_partition(n, t->world, t->rank, &po, &pc);
    uint16_t *b = t->gbf[0];
    t->be->ops->grad_to_bf16(t->be, b, send, n);
    st = dev_reduce_scatter_bf16(t, b, b + po, n);
    if (st == LF_OK && pc) t->be->ops->grad_from_bf16(t->be, recv, b + po, pc);
    return st;
}

/* The gradients summed over ranks, in place, comm.bucket_elems floats per
 * call (DeepSpeed's reduce buckets; each call bounds the communicator's
 * scratch, and the host staging where backend memory is not the host's).
 * SUM, not AVG: every rank's dloss already divides by the global count of
 * targets. */
static lf_status all_reduce_grads(lf_trainer *t, step_result *o) {
    double t0 = lf_time_now();
    float *g = lf_model_grads(t->model);
    const size_t n = lf_model_num_params(t->model), bucket = (size_t)t->cfg.comm_bucket_elems;
    lf_status st = LF_OK;
    for (size_t a = 0; a < n && st == LF_OK; a += bucket)
        st = grad_all_reduce(t, g + a, n - a < bucket ? n - a : bucket);
    o->comm_ms += (lf_time_now() - t0) * 1e3;
    return st;
}

/* ---------------------------------------------------------------- ZeRO */

static lf_status zero_layout(lf_trainer *t) {
    t->zstage = t->cfg.zero_stage;
    t->zbad = -1;
    if (!t->zstage) return LF_OK;
    int U = lf_model_num_units(t->model);
    t->n_units = U;
    t->unit_lo = calloc(5 * (size_t)U, sizeof(size_t));
    if (!t->unit_lo) return lf_fail(LF_ERR_NOMEM, "out of memory");
    t->unit_n = t->unit_lo + U;
    t->pc_lo = t->unit_lo + 2 * U;
    t->pc_n = t->unit_lo + 3 * U;
    t->sh_off = t->unit_lo + 4 * U;
    size_t at = 0;
    for (int u = 0; u < U; u++) {
        size_t po = 0, pc = 0;
        lf_model_unit_range(t->model, u, &t->unit_lo[u], &t->unit_n[u]);
        lf_comm_partition(t->unit_n[u], t->world, t->rank, &po, &pc);
        t->pc_lo[u] = t->unit_lo[u] + po;
        t->pc_n[u] = pc;
        t->sh_off[u] = at;
        at += pc;
    }
    t->shard_n = at;
    return LF_OK;
}

/* This rank's piece of unit u: parameters, gradients (NULL before the sum on
 * stage 1), moments. */
static float *zp_params(lf_trainer *t, int u) {
    return t->pshard ? t->pshard + t->sh_off[u] : lf_model_params(t->model) + t->pc_lo[u];
}
static float *zp_grads(lf_trainer *t, int u) {
    return t->gshard ? t->gshard + t->sh_off[u] : lf_model_grads(t->model) + t->pc_lo[u];
}

/* The model's hooks (src/model/gpt2.c): gather unit u for use, and sum a
 * unit's gradient of one backward over the ranks into this rank's shard. */
static lf_status zero_gather(void *user, int u, float *dst) {
    lf_trainer *t = user;
    double t0 = lf_time_now();
    lf_status st = dev_all_gather(t, t->pshard + t->sh_off[u], dst, t->unit_n[u]);
    t->hook_comm_ms += (lf_time_now() - t0) * 1e3;
    return st;
}

/* ZeRO-3 prefetch (comm.overlap): the next unit's all-gather, started on
 * the communicator's stream, and the wait that orders the compute stream
 * after it when the unit is used. */
static lf_status zero_gather_start(void *user, int u, float *dst, int64_t *ticket) {
    lf_trainer *t = user;
    double t0 = lf_time_now();
    lf_status st = lf_comm_all_gather_start(t->comm, t->pshard + t->sh_off[u], dst, t->unit_n[u], ticket);
    t->hook_comm_ms += (lf_time_now() - t0) * 1e3;
    return st;
}
static lf_status zero_gather_wait(void *user, int64_t ticket) {
    lf_trainer *t = user;
    return lf_comm_wait(t->comm, ticket);
}

/* Overlap: the unit in flight is summed; its part is added into the shard
 * (on the compute stream, after the reduce-scatter), and its buffer is free
 * for the unit after next. */
static lf_status zero_retire(lf_trainer *t) {
    if (t->pend_u < 0) return LF_OK;
    const int u = t->pend_u;
    t->pend_u = -1;
    double t0 = lf_time_now();
    lf_status st = lf_comm_wait(t->comm, t->pend_ticket);
    t->hook_comm_ms += (lf_time_now() - t0) * 1e3;
    if (st != LF_OK) return st;
    const size_t po = t->pc_lo[u] - t->unit_lo[u];
    if (t->pend_bf) /* bf16: the summed part back to fp32, into its place in the unit's gradient */
        t->be->ops->grad_from_bf16(t->be, t->pend_grad + po, t->pend_bf + po, t->pc_n[u]);
    t->be->ops->add_inplace(t->be, t->gshard + t->sh_off[u], t->pend_grad + po, t->pc_n[u]);
    return LF_OK;
}

static lf_status zero_reduce(void *user, int u, float *grad) {
    lf_trainer *t = user;
    size_t n = t->unit_n[u], po = t->pc_lo[u] - t->unit_lo[u], pc = t->pc_n[u];
    if (t->cfg.fp16) { /* this rank's fp16 gradient, before the sum */
        int k = fp16_round_range(t, grad, t->unit_lo[u], n);
        if (k >= 0 && t->zbad < 0) t->zbad = k;
    }
    double t0 = lf_time_now();
    lf_status st;
    if (t->overlap) {
        /* start this unit's sum, then retire the previous one: the compute
         * stream waits for that one only now, so this unit's reduce-scatter
         * runs beside the next unit's backward; unit 0 is a backward's last */
        int64_t ticket = 0;
        uint16_t *b = NULL; /* bf16: this unit's staging, the other one than the unit in flight */
        if (t->grad_bf16) {
            if ((st = gbf_fits(t, "reduce_scatter", n)) != LF_OK) return st;
            b = t->gbf[t->gbf_cur];
            t->gbf_cur ^= 1;
            t->be->ops->grad_to_bf16(t->be, b, grad, n);
            st = lf_comm_reduce_scatter_start_bf16(t->comm, b, b + po, n, LF_COMM_SUM, &ticket);
        } else {
            st = lf_comm_reduce_scatter_start(t->comm, grad, grad + po, n, LF_COMM_SUM, &ticket);
        }
        t->hook_comm_ms += (lf_time_now() - t0) * 1e3;
        if (st == LF_OK) st = zero_retire(t);
        if (st != LF_OK) return st;
        t->pend_u = u;
        t->pend_grad = grad;
        t->pend_bf = b;
        t->pend_ticket = ticket;
        return u == 0 ? zero_retire(t) : LF_OK;
    }
    st = grad_reduce_scatter(t, grad, grad + po, n);
    t->hook_comm_ms += (lf_time_now() - t0) * 1e3;
    if (st != LF_OK) return st;
    t->be->ops->add_inplace(t->be, t->gshard + t->sh_off[u], grad + po, pc); /* micro-batches add up */
    return LF_OK;
}

/* Stage 2: the model keeps no whole gradient buffer; stage 3 no whole
 * parameter buffer either (the shard takes this rank's pieces first). */
static lf_status dp_grads_ready(void *user, int u, float *grad) {
    lf_trainer *t = user;
    if (!t->dp_armed) return LF_OK; /* an earlier micro-batch: the sum waits for the last one */
    size_t lo = 0, n = 0, po = 0, pc = 0;
    lf_model_unit_range(t->model, u, &lo, &n);
    double t0 = lf_time_now();
    int64_t ticket = 0;
    lf_status st;
    if (t->zstage == 0) {
        st = lf_comm_all_reduce_start(t->comm, grad, n, LF_COMM_SUM, &ticket);
    } else { /* stage 1: this rank's part lands where it lies, as zero_reduce_scatter_all puts it */
        lf_comm_partition(n, t->world, t->rank, &po, &pc);
        st = lf_comm_reduce_scatter_start(t->comm, grad, grad + po, n, LF_COMM_SUM, &ticket);
    }
    t->hook_comm_ms += (lf_time_now() - t0) * 1e3;
    return st;
}

/* Stages 0-1 with comm.overlap on an asynchronous kind (nccl): the model
 * hands each unit's gradient range when its backward ends (grads_ready);
 * on the step's last micro-batch the unit's sum starts there, on the
 * communicator's stream, while the backward of the units before it runs,
 * and the step waits for them all (lf_comm_wait_all) where it made the
 * blocking sums before. The same collectives per element (one per unit
 * instead of per bucket), so the same sums. Not with fp16 (its gradients
 * are rounded before the sum), bf16 communication (its staging holds one
 * bucket), or the test hooks that poison a gradient before the sum. */
static lf_status dp_overlap_setup(lf_trainer *t) {
    t->overlap01 = t->cfg.comm_overlap && t->world > 1 && lf_comm_async(t->comm) && !t->cfg.fp16 &&
                   !t->cfg.comm_bf16 && t->opts.inject_nan_step <= 0 && t->opts.n_inject_overflow <= 0;
    if (!t->overlap01) return LF_OK;
    lf_model_zero z = {.grads_ready = dp_grads_ready, .user = t};
    lf_status st = lf_model_set_zero(t->model, &z);
    if (st != LF_OK) return st;
    size_t act = 0; /* set_zero dropped the activation plan: the same plan again */
    st = lf_model_plan(t->model, t->cfg.micro_batch, t->cfg.model.block_size, &act);
    if (st == LF_OK && act != t->planned_act_bytes) st = lf_fail(LF_ERR_INTERNAL, "activation plan changed");
    return st;
}

static lf_status zero_partition(lf_trainer *t) {
    if (t->zstage < 2) return dp_overlap_setup(t);
    int B = t->cfg.micro_batch, T = t->cfg.model.block_size;
    t->gshard = t->be->ops->alloc(t->be, (t->shard_n ? t->shard_n : 1) * sizeof(float));
    if (!t->gshard) return lf_fail(LF_ERR_NOMEM, "out of memory allocating the ZeRO gradient shard");
    t->be->ops->zero(t->be, t->gshard, t->shard_n);
    if (t->zstage == 3) {
        t->pshard = t->be->ops->alloc(t->be, (t->shard_n ? t->shard_n : 1) * sizeof(float));
        if (!t->pshard) return lf_fail(LF_ERR_NOMEM, "out of memory allocating the ZeRO parameter shard");
        const float *p = lf_model_params(t->model);
        for (int u = 0; u < t->n_units; u++)
            t->be->ops->copy(t->be, t->pshard + t->sh_off[u], p + t->pc_lo[u], t->pc_n[u] * sizeof(float));
    }
    /* overlap: a started reduce-scatter keeps its unit's buffer until the
     * next unit's hook, so the block units alternate between two */
    t->overlap = t->cfg.comm_overlap && t->world > 1 && lf_comm_async(t->comm);
    t->pend_u = -1;
    lf_model_zero z = {.partition_grads = 1, .partition_params = t->zstage == 3, .gather_params = zero_gather,
                       .reduce_grads = zero_reduce, .user = t, .double_buffer_grads = t->overlap,
                       .prefetch_params = t->overlap && t->zstage == 3, .gather_start = zero_gather_start,
                       .gather_wait = zero_gather_wait};
    lf_status st = lf_model_set_zero(t->model, &z);
    if (st != LF_OK) return st;
    /* host memory: host_params was the model's whole buffer, now freed; a
     * separate host copy stays (checkpoint staging of the shard, counted by the plan) */
    if (t->zstage == 3 && t->be->ops->host_memory) t->host_params = NULL;
    size_t act = 0; /* set_zero dropped the activation plan: the same plan again */
    st = lf_model_plan(t->model, B, T, &act);
    if (st == LF_OK && act != t->planned_act_bytes) st = lf_fail(LF_ERR_INTERNAL, "activation plan changed");
    return st;
}

/* Stage 1: this rank's gradient summed over the ranks, unit by unit (in
 * place: the piece lands where it lies in the whole buffer). */
static lf_status zero_reduce_scatter_all(lf_trainer *t, step_result *o) {
    double t0 = lf_time_now();
    float *g = lf_model_grads(t->model);
    lf_status st = LF_OK;
    for (int u = 0; u < t->n_units && st == LF_OK; u++)
        st = grad_reduce_scatter(t, g + t->unit_lo[u], g + t->pc_lo[u], t->unit_n[u]);
    o->comm_ms += (lf_time_now() - t0) * 1e3;
    return st;
}

/* Squared norm of the whole gradient: this rank's shard, summed over ranks
 * (folded in rank order: the same bits everywhere). */
static lf_status zero_grad_norm(lf_trainer *t, step_result *o, double *norm) {
    double ss = 0;
    for (int u = 0; u < t->n_units; u++) ss += t->be->ops->sum_squares(t->be, zp_grads(t, u), t->pc_n[u]);
    if (t->world > 1) {
        lf_status st = step_sum_f64(t, o, &ss, 1);
        if (st != LF_OK) return st;
    }
    *norm = sqrt(ss);
    return LF_OK;
}

static void zero_scale_grads(lf_trainer *t, float f) {
    for (int u = 0; u < t->n_units; u++)
        if (t->pc_n[u]) t->be->ops->scale(t->be, zp_grads(t, u), t->pc_n[u], f); /* backend memory */
}

/* fp16, after the sum: the shard rounded to fp16 again; the first
 * overflowing tensor of any rank (the same answer everywhere), -1 if none. */
static lf_status zero_fp16_sum_check(lf_trainer *t, step_result *o, int *bad) {
    int k = -1;
    for (int u = 0; u < t->n_units && k < 0; u++) k = fp16_round_range(t, zp_grads(t, u), t->pc_lo[u], t->pc_n[u]);
    int64_t code = k >= 0 ? (int64_t)1 << 32 | (int64_t)k : 0;
    if (t->world > 1) {
        double t0 = lf_time_now();
        lf_status st = lf_comm_all_reduce_i64(t->comm, &code, 1, LF_COMM_MAX);
        o->comm_ms += (lf_time_now() - t0) * 1e3;
        if (st != LF_OK) return st;
    }
    *bad = code ? (int)(code & 0xffffffff) : -1;
    return LF_OK;
}

/* ZeRO-Offload's update of the parameters [lo, lo + cnt) of the flat
 * vector, at p (device) with gradients g (device) and moments m, v + sh
 * (host): the gradients and the parameters come to the host (the
 * parameters into their checkpoint staging copy, host_params + lo), the CPU
 * backend's AdamW (the same expression as the CUDA kernel's, which differs
 * by FMA contractions only) updates them with the host moments, tensor by
 * tensor for the weight decay, and the parameters go back. The host
 * buffers are pinned where the backend offers it (cuda: DMA copies); the
 * transfers are waited for: the update is not overlapped with the next
 * step's compute. */
static lf_status offload_adamw(lf_trainer *t, float *p, const float *g, size_t lo, size_t cnt, size_t sh, float lr,
                               float scale) {
    if (cnt == 0) return LF_OK;
    lf_backend *cpu = lf_backend_get("cpu");
    if (!cpu) return lf_fail(LF_ERR_NOT_FOUND, "offload_optimizer: the cpu backend is not available");
    const lf_train_config *c = &t->cfg;
    float *hp = t->host_params + lo, *hg = t->off_g + sh;
    t->be->ops->to_host(t->be, hp, p, cnt * sizeof(float));
    t->be->ops->to_host(t->be, hg, g, cnt * sizeof(float));
    lf_status st = lf_backend_sync(t->be);
    if (st != LF_OK) return st;
    int count = 0;
    const lf_param_info *table = lf_model_params_table(t->model, &count);
    const size_t hi = lo + cnt;
    for (int k = 0; k < count; k++) {
        size_t a = table[k].offset, b = a + table[k].numel;
        if (a < lo) a = lo;
        if (b > hi) b = hi;
        if (a >= b) continue;
        const size_t at = a - lo;
        cpu->ops->adamw_update(cpu, hp + at, hg + at, t->m + sh + at, t->v + sh + at, b - a, lr, c->beta1, c->beta2,
                               c->eps, table[k].decay ? c->weight_decay : 0.0f, scale, (int)t->opt_t);
    }
    t->be->ops->to_device(t->be, p, hp, cnt * sizeof(float));
    return lf_backend_sync(t->be);
}

/* Stage 0 with offload: the whole model is one range; the device's derived
 * weight copies (cuda-bf16's bf16 weights) are renewed after. */
static lf_status offload_adamw_all(lf_trainer *t, float lr, double norm) {
    lf_status st = lf_backend_sync(t->be);
    if (st != LF_OK) return st;
    if (!isfinite(norm))
        return lf_fail(LF_ERR_NUMERIC, "step %ld: gradient norm is %g; lower optimizer.params.lr or check the data",
                       t->opt_t, norm);
    float scale = 1.0f;
    if (t->cfg.grad_clip > 0) {
        double coef = (double)t->cfg.grad_clip / (norm + 1e-6);
        if (coef < 1.0) scale = (float)coef;
    }
    st = offload_adamw(t, lf_model_params(t->model), lf_model_grads(t->model), 0, lf_model_num_params(t->model), 0,
                       lr, scale);
    if (st == LF_OK && t->be->ops->params_changed) t->be->ops->params_changed(t->be);
    return st;
}

/* AdamW on this rank's shard (weight decay by tensor, as lf_adamw_apply),
 * then the new parameters everywhere: stages 1-2 all-gather every unit into
 * the whole buffer; stage 3 keeps the shard and the model gathers on use. */
static lf_status zero_adamw(lf_trainer *t, step_result *o, float lr, double norm) {
    if (!isfinite(norm))
        return lf_fail(LF_ERR_NUMERIC, "step %ld: gradient norm is %g; lower optimizer.params.lr or check the data",
                       t->opt_t, norm);
    const lf_train_config *c = &t->cfg;
    float scale = 1.0f;
    if (c->grad_clip > 0) {
        double coef = (double)c->grad_clip / (norm + 1e-6);
        if (coef < 1.0) scale = (float)coef;
    }
    int count = 0;
    const lf_param_info *table = lf_model_params_table(t->model, &count);
    for (int u = 0; u < t->n_units; u++) {
        size_t lo = t->pc_lo[u], hi = lo + t->pc_n[u], sh = t->sh_off[u];
        float *p = zp_params(t, u), *g = zp_grads(t, u);
        if (t->offload) {
            lf_status ost = offload_adamw(t, p, g, lo, t->pc_n[u], sh, lr, scale);
            if (ost != LF_OK) return ost;
            continue;
        }
        for (int k = 0; k < count; k++) {
            size_t a = table[k].offset, b = a + table[k].numel;
            if (a < lo) a = lo;
            if (b > hi) b = hi;
            if (a >= b) continue;
            size_t at = a - lo;
            t->be->ops->adamw_update(t->be, p + at, g + at, t->m + sh + at, t->v + sh + at, b - a, lr, c->beta1, c->beta2, c->eps,
                                table[k].decay ? c->weight_decay : 0.0f, scale, (int)t->opt_t);
        }
    }
    if (t->zstage == 3) {
        lf_model_params_changed(t->model);
        return LF_OK;
    }
    double t0 = lf_time_now();
    float *all = lf_model_params(t->model);
    lf_status st = LF_OK;
    for (int u = 0; u < t->n_units && st == LF_OK; u++)
        st = dev_all_gather(t, all + t->pc_lo[u], all + t->unit_lo[u], t->unit_n[u]);
    o->comm_ms += (lf_time_now() - t0) * 1e3;
    if (t->be->ops->params_changed) t->be->ops->params_changed(t->be);
    return st;
}

/* The status every rank agrees on: each rank's own (0 or a negative
 * lf_status), the lowest rank's failure wins; a rank that did not fail
 * reports that rank's failure. */
static lf_status zero_agree(lf_trainer *t, lf_status mine, const char *what) {
    if (t->world == 1) return mine;
    int64_t code = mine != LF_OK ? (int64_t)(t->world - t->rank) << 32 | (int64_t)(uint32_t)(-(int)mine) : 0;
    lf_status st = lf_comm_all_reduce_i64(t->comm, &code, 1, LF_COMM_MAX);
    if (st != LF_OK) return st;
    if (!code) return LF_OK;
    int who = t->world - (int)(code >> 32);
    lf_status s = (lf_status)(-(int)(code & 0xffffffff));
    char msg[1024]; /* that rank's message, for every rank to report */
    snprintf(msg, sizeof msg, "%s", t->rank == who ? lf_last_error() : "");
    st = lf_comm_broadcast_bytes(t->comm, msg, sizeof msg, who);
    if (st != LF_OK) return st;
    msg[sizeof msg - 1] = 0;
    if (mine != LF_OK) return mine;
    return lf_fail(s, "%s failed on rank %d: %s", what, who, msg);
}

/* Every rank writes its shard into the files rank 0 created; rank 0
 * commits only when all have written. */
static lf_status zero_save(lf_trainer *t, const char *state, char **saved) {
    *saved = NULL;
    int count;
    const lf_param_info *table = lf_model_params_table(t->model, &count);
    lf_ckpt_tensors tt = {table, count, lf_model_num_params(t->model)};
    lf_comm_set_context(t->comm, "checkpoint at step %ld", t->step);
    char *tmp = NULL;
    char path[LF_PATH_MAX + 64] = "";
    lf_status st = LF_OK;
    if (t->rank == 0) {
        st = lf_checkpoint_begin(t->ckpt_root, t->step, &tt, 1, &tmp);
        if (st == LF_OK) snprintf(path, sizeof path, "%s", tmp);
    }
    st = zero_agree(t, st, "starting the checkpoint");
    if (st == LF_OK && t->world > 1) st = lf_comm_broadcast_bytes(t->comm, path, sizeof path, 0);
    if (st != LF_OK) {
        lf_free(tmp);
        return st;
    }
    /* the shard as host floats: in place on host memory, else staged (the
     * moments are one shard buffer each; the parameters land at their flat
     * offset of host_params) */
    const int host = t->be->ops->host_memory;
    stage_out(t, t->host_m, t->m, t->shard_n * sizeof(float));
    stage_out(t, t->host_v, t->v, t->shard_n * sizeof(float));
    lf_status mine = LF_OK;
    for (int u = 0; u < t->n_units && mine == LF_OK; u++) {
        const float *p = zp_params(t, u);
        if (!host) {
            t->be->ops->to_host(t->be, t->host_params + t->pc_lo[u], p, t->pc_n[u] * sizeof(float));
            p = t->host_params + t->pc_lo[u];
        }
        mine = lf_checkpoint_write_slice(path, &tt, t->pc_lo[u], t->pc_n[u], p, t->host_m + t->sh_off[u],
                                         t->host_v + t->sh_off[u]);
    }
    if (mine != LF_OK)
        lf_error_prefix("rank %d writing its shard (ZeRO checkpoints are written by every rank: out_dir must be on a "
                        "filesystem all ranks share)", t->rank);
    st = zero_agree(t, mine, "writing the checkpoint's shards");
    if (t->rank == 0) {
        if (st == LF_OK)
            st = lf_checkpoint_commit(t->ckpt_root, t->step, tmp, state, t->extra, t->n_extra, 0,
                                      t->best_ckpt[0] ? t->best_ckpt : NULL, saved); /* rotation: ckpt_write */
        else
            lf_checkpoint_discard(tmp); /* nothing half-written stays */
    }
    lf_free(tmp);
    lf_status was = st;
    st = zero_agree(t, t->rank == 0 ? st : LF_OK, "committing the checkpoint");
    return was != LF_OK ? was : st;
}

/* Rank 0 resolves and verifies the checkpoint and reads its state; every
 * rank then reads the parameters (all of them: the model starts whole) and
 * its shard of the moments from the shared files. */
static lf_status zero_resume_read(lf_trainer *t, const char *path, char **dir, char **state) {
    int count;
    const lf_param_info *table = lf_model_params_table(t->model, &count);
    size_t n = lf_model_num_params(t->model);
    lf_ckpt_tensors tt = {table, count, n};
    lf_comm_set_context(t->comm, "resume");
    /* into the host buffers (the backend's own on the CPU backends);
     * resume_from stages them in. Resume runs before zero_partition: the
     * model is still whole. */
    float *params = t->host_params;
    lf_status st = LF_OK;
    if (t->rank == 0) {
        st = lf_checkpoint_resolve(path, dir);
        if (st == LF_OK) st = lf_checkpoint_load_slice(*dir, &tt, 1, 0, n, params, NULL, NULL, state);
        if (st != LF_OK) lf_error_prefix("resuming from '%s'", *dir ? *dir : path);
    }
    st = zero_agree(t, st, "reading the checkpoint");
    int64_t len = t->rank == 0 && st == LF_OK ? (int64_t)strlen(*state) + 1 : 0;
    char where[LF_PATH_MAX + 64] = "";
    if (t->rank == 0 && *dir) snprintf(where, sizeof where, "%s", *dir);
    if (st == LF_OK && t->world > 1) {
        st = lf_comm_broadcast_bytes(t->comm, &len, sizeof len, 0);
        if (st == LF_OK) st = lf_comm_broadcast_bytes(t->comm, where, sizeof where, 0);
        if (st == LF_OK && t->rank != 0 && !(*state = lf_alloc((size_t)len)))
            st = lf_fail(LF_ERR_NOMEM, "out of memory receiving trainer_state.json");
        if (st == LF_OK) st = lf_comm_broadcast_bytes(t->comm, *state, (size_t)len, 0);
        if (st == LF_OK) (*state)[len - 1] = 0;
    }
    if (st != LF_OK) return st;
    lf_status mine = LF_OK;
    if (t->rank != 0) mine = lf_checkpoint_load_slice(where, &tt, 0, 0, n, params, NULL, NULL, NULL);
    for (int u = 0; u < t->n_units && mine == LF_OK; u++)
        if (t->pc_n[u])
            mine = lf_checkpoint_load_slice(where, &tt, 0, t->pc_lo[u], t->pc_n[u], NULL, t->host_m + t->sh_off[u],
                                            t->host_v + t->sh_off[u], NULL);
    if (mine != LF_OK)
        lf_error_prefix("rank %d reading its shard of '%s' (ZeRO checkpoints are read by every rank: out_dir must be "
                        "on a filesystem all ranks share)", t->rank, where);
    return zero_agree(t, mine, "reading the checkpoint's shards");
}

/* fp16: the step's gradients overflowed (on rank `rank`, in tensor k; rank
 * -1: in the sum over ranks). Skips the step on every rank alike (the
 * decision comes from reduced values); fails at the minimum scale. */
static lf_status fp16_skip(lf_trainer *t, step_result *o, long step1, double scale, int rank, int k) {
    int count = 0;
    const lf_param_info *table = lf_model_params_table(t->model, &count);
    char which[LF_PARAM_NAME_MAX + 64];
    if (rank < 0)
        snprintf(which, sizeof which, "%s' (the sum over ranks", k >= 0 && k < count ? table[k].name : "?");
    else if (t->world > 1)
        snprintf(which, sizeof which, "%s' (on rank %d", k >= 0 && k < count ? table[k].name : "?", rank);
    else
        snprintf(which, sizeof which, "%s", k >= 0 && k < count ? table[k].name : "?");
    int paren = rank < 0 || t->world > 1;
    lf_status st = lf_loss_scaler_update(&t->scaler, 1);
    if (st != LF_OK)
        return lf_fail(LF_ERR_NUMERIC, "step %ld: fp16 gradient overflow in '%s%s with the loss scale already at "
                       "its minimum %g (fp16.min_loss_scale); stopped without a checkpoint. The gradients "
                       "exceed fp16's range even unscaled: use bf16 (\"bf16\": {\"enabled\": true}), which "
                       "has fp32's range, or lower optimizer.params.lr", step1, which, paren ? ")" : "'", scale);
    o->overflow = o->skipped = 1;
    o->norm = NAN;
    o->lr = lf_lr_at(&t->cfg, t->step);
    t->skipped++;
    char json[512], rank_json[32] = "";
    if (t->world > 1) snprintf(rank_json, sizeof rank_json, ",\"rank\":%d", rank);
    snprintf(json, sizeof json, "{\"reason\":\"fp16_overflow\",\"tensor\":\"%s\"%s,\"loss_scale\":%.17g,"
             "\"next_loss_scale\":%.17g}", k >= 0 && k < count ? table[k].name : "?", rank_json, scale,
             t->scaler.scale);
    emit_event(t, "skipped_step", NULL, json);
    return LF_OK;
}

static lf_status train_step(lf_trainer *t, step_result *o) {
    int B = t->cfg.micro_batch, T = t->cfg.model.block_size, A = t->cfg.grad_accum;
    size_t BT = (size_t)B * T;
    long step1 = t->step + 1;
    int64_t count = 0;
    lf_status st;
    lf_comm_set_context(t->comm, "step %ld", step1); /* named by any collective that fails */
    if (t->loader && lf_loader_step(t->loader) != (uint64_t)(t->step + t->data_off)) {
        lf_loader_close(t->loader); /* the data step moved (a resume, a rollback): reopen there, O(1) */
        t->loader = NULL;
    }
    if (!t->loader) {
        st = open_loader(t);
        if (st != LF_OK) return st;
    }
    double wait = 0;
    st = lf_loader_next(t->loader, t->inputs, t->targets, &wait);
    if (st != LF_OK) return st;
    for (size_t i = 0; i < (size_t)A * BT; i++) count += t->targets[i] >= 0;
    o->data_ms = wait * 1e3; /* time the step waited for data (the copy out of the prefetch ring included) */
    /* every rank divides by the global count: the sum over ranks is then the
     * mean over the global batch, whatever each rank's share of targets */
    if (t->world > 1 && (st = step_sum_i64(t, o, &count, 1)) != LF_OK) return st;
    if (count == 0)
        return lf_fail(LF_ERR_NUMERIC, "step %ld: every target of the batch is masked out; nothing to learn from", step1);
    lf_model_zero_grad(t->model);
    if (t->gshard) t->be->ops->zero(t->be, t->gshard, t->shard_n);
    t->zbad = -1;
    double loss_sum = 0;
    const double scale = t->cfg.fp16 ? t->scaler.scale : 1.0;
    o->loss_scale = scale;
    for (int a = 0; a < A; a++) {
        /* dropout keyed by the global micro-batch index of the step (a*W + r) */
        lf_forward_opts fo = {.dloss = (float)(scale / (double)count), .train = 1, .seed = t->cfg.seed,
                              .key = lf_rng_mix((uint64_t)t->step, (uint64_t)a * (uint64_t)t->world + (uint64_t)t->rank)};
        double s, ta = lf_time_now();
        long c;
        t->hook_comm_ms = 0; /* ZeRO-2/3: collectives inside forward and backward */
        st = lf_model_forward(t->model, t->inputs + a * BT, t->targets + a * BT, B, T, &fo, &s, &c);
        if (st != LF_OK) return st;
        double tb = lf_time_now(), fwd_comm = t->hook_comm_ms;
        loss_sum += s;
        t->dp_armed = t->overlap01 && a == A - 1; /* stages 0-1 overlapped: the sums start in this backward */
        st = lf_model_backward(t->model);
        t->dp_armed = 0;
        if (st != LF_OK) return st;
        o->forward_ms += (tb - ta) * 1e3 - fwd_comm;
        o->backward_ms += (lf_time_now() - tb) * 1e3 - (t->hook_comm_ms - fwd_comm);
        o->comm_ms += t->hook_comm_ms;
    }
    double t2 = lf_time_now(), comm_before = o->comm_ms;
    /* test hooks act on this rank's share, before the sums: an injection on
     * one rank reaches every rank through the reductions */
    if (t->opts.inject_nan_step == step1 && (t->opts.inject_repeat || !t->nan_fired)) {
        /* a poisoned gradient (ZeRO-2/3: in this rank's summed shard) */
        t->nan_fired = 1;
        float nan = NAN, *g = t->gshard ? t->gshard : lf_model_grads(t->model);
        if (!t->gshard || t->shard_n) t->be->ops->to_device(t->be, g, &nan, sizeof nan);
    }
    if (t->opts.inject_spike_step == step1 && (t->opts.inject_repeat || !t->spike_fired)) {
        t->spike_fired = 1;
        loss_sum *= 100.0; /* an inflated loss */
    }
    int bad = -1; /* fp16: first tensor whose rounded gradients are not finite on this rank */
    if (t->cfg.fp16) {
        for (int i = 0; i < t->opts.n_inject_overflow && i < 16; i++) {
            if (t->opts.inject_overflow_steps[i] != step1) continue; /* test hook: an overflowing gradient */
            const lf_param_info *pi = lf_model_find_param(t->model, "h.0.mlp.c_fc.weight");
            const lf_param_info *table = lf_model_params_table(t->model, NULL);
            if (pi && lf_model_grads(t->model)) {
                const float inf = INFINITY;
                t->be->ops->to_device(t->be, lf_model_grads(t->model) + pi->offset, &inf, sizeof inf);
            }
            else if (pi && t->zbad < 0) t->zbad = (int)(pi - table); /* ZeRO-2/3: the local gradient is gone */
        }
        bad = t->zstage >= 2 ? t->zbad : fp16_round_grads(t);
    }
    /* one small reduction: the loss sum, and how many ranks overflowed */
    double red[2] = {loss_sum, bad >= 0 ? 1.0 : 0.0};
    if (t->world > 1 && (st = step_sum_f64(t, o, red, 2)) != LF_OK) return st;
    o->loss = red[0] / (double)count;
    if (red[1] > 0) { /* some rank overflowed: every rank skips. Which one (the lowest) and where: */
        int64_t code = bad >= 0 ? (int64_t)(t->world - t->rank) << 32 | (int64_t)bad : 0;
        if (t->world > 1) {
            double tc = lf_time_now();
            st = lf_comm_all_reduce_i64(t->comm, &code, 1, LF_COMM_MAX); /* max: the lowest rank that overflowed */
            o->comm_ms += (lf_time_now() - tc) * 1e3;
            if (st != LF_OK) return st;
        }
        st = fp16_skip(t, o, step1, scale, t->world - (int)(code >> 32), (int)(code & 0xffffffff));
        o->optimizer_ms = (lf_time_now() - t2) * 1e3 - (o->comm_ms - comm_before);
        return st;
    }
    if (t->overlap01) { /* stages 0-1: every unit's started sum complete, under the watchdog */
        double tw = lf_time_now();
        st = lf_comm_wait_all(t->comm);
        o->comm_ms += (lf_time_now() - tw) * 1e3;
        if (st != LF_OK) return st;
    } else if (t->zstage == 0 && t->world > 1) {
        st = all_reduce_grads(t, o);
        if (st != LF_OK) return st;
        /* an fp16 all-reduce leaves fp16 sums, which may overflow themselves;
         * the sums are the same bits on every rank, and so is the decision */
        if (t->cfg.fp16 && (bad = fp16_round_grads(t)) >= 0) {
            st = fp16_skip(t, o, step1, scale, -1, bad);
            o->optimizer_ms = (lf_time_now() - t2) * 1e3 - (o->comm_ms - comm_before);
            return st;
        }
    }
    if (t->zstage) {
        if (t->overlap) { /* every started reduce-scatter complete, under the watchdog */
            double tw = lf_time_now();
            st = lf_comm_wait_all(t->comm);
            o->comm_ms += (lf_time_now() - tw) * 1e3;
            if (st != LF_OK) return st;
        }
        /* stage 1 sums now (reduce-scatter); stages 2-3 summed unit by unit in backward */
        if (t->zstage == 1 && !t->overlap01 && (st = zero_reduce_scatter_all(t, o)) != LF_OK) return st;
        if (t->cfg.fp16) {
            if ((st = zero_fp16_sum_check(t, o, &bad)) != LF_OK) return st;
            if (bad >= 0) {
                st = fp16_skip(t, o, step1, scale, -1, bad);
                o->optimizer_ms = (lf_time_now() - t2) * 1e3 - (o->comm_ms - comm_before);
                return st;
            }
            if (scale != 1.0) zero_scale_grads(t, (float)(1.0 / scale));
        }
        if ((st = zero_grad_norm(t, o, &o->norm)) != LF_OK) return st;
    } else {
        if (t->cfg.fp16 && scale != 1.0) scale_grads(t, (float)(1.0 / scale));
        o->norm = lf_grad_norm(t->model, t->be); /* of the summed gradients: the same on every rank */
    }
    o->lr = lf_lr_at(&t->cfg, t->step);

    if (!isfinite(o->loss) || !isfinite(o->norm)) {
        char msg[256];
        snprintf(msg, sizeof msg, "step %ld: non-finite %s (loss %g, gradient norm %g)", step1,
                 !isfinite(o->loss) ? "loss" : "gradient", o->loss, o->norm);
        if (t->cfg.alert_nan_action == LF_ALERT_STOP) {
            raise_alert(t, "nan", "stop", msg);
            return lf_fail(LF_ERR_NUMERIC, "%s; stopped without a checkpoint (monitor.alerts.nan.action = stop); "
                           "lower optimizer.params.lr, check the data, or resume from the last checkpoint", msg);
        }
        if (t->cfg.alert_nan_action == LF_ALERT_ROLLBACK) {
            st = rollback_request(t, o, "nan", msg);
            o->optimizer_ms = (lf_time_now() - t2) * 1e3 - (o->comm_ms - comm_before);
            return st;
        }
        raise_alert(t, "nan", "skip_step", msg);
        o->skipped = 1;
    } else if (t->cfg.alert_spike_action != LF_ALERT_OFF) {
        double z = spike_z(t, o->loss);
        if (z > t->cfg.alert_spike_zscore) {
            char msg[256];
            int skip = t->cfg.alert_spike_action == LF_ALERT_SKIP;
            snprintf(msg, sizeof msg, "step %ld: loss %.6g is %.1f standard deviations above the last %d steps", step1,
                     o->loss, z, t->spike_n);
            if (t->cfg.alert_spike_action == LF_ALERT_ROLLBACK) {
                st = rollback_request(t, o, "loss_spike", msg);
                o->optimizer_ms = (lf_time_now() - t2) * 1e3 - (o->comm_ms - comm_before);
                return st;
            }
            raise_alert(t, "loss_spike", skip ? "skip_step" : "log", msg);
            o->skipped = skip;
        }
        if (!o->skipped) spike_push(t, o->loss);
    }
    if (t->cfg.fp16) (void)lf_loss_scaler_update(&t->scaler, 0); /* a clean step (cannot fail) */
    if (o->skipped) {
        t->skipped++;
        emit_event(t, "skipped_step", NULL, "{\"reason\":\"alert\"}");
    } else {
        t->opt_t++;
        st = t->zstage    ? zero_adamw(t, o, o->lr, o->norm)
             : t->offload ? offload_adamw_all(t, o->lr, o->norm)
                          : lf_adamw_apply(t->model, t->be, t->m, t->v, t->opt_t, o->lr, &t->cfg, o->norm);
        if (st != LF_OK) return st;
    }
    if (t->opts.inject_stall_step == step1 && t->opts.inject_stall_seconds > 0) { /* test hook */
        sleep_s(t->opts.inject_stall_seconds);
    }
    o->optimizer_ms = (lf_time_now() - t2) * 1e3 - (o->comm_ms - comm_before);
    return LF_OK;
}

/* The stop request agreed at this step boundary: this rank's (the caller's
 * flag, lf_trainer_request_stop's), the largest over the ranks; and whether
 * any rank holds a failed save (checkpoint.on_error is then decided alike
 * everywhere, at this boundary). One all-reduce of two values. */
static lf_status stop_agreed(lf_trainer *t, int *reason, int *ckerr) {
    int64_t v[2] = {t->stop_req, t->ckerr_pending};
    if (t->opts.stop_flag) {
        int64_t f = *t->opts.stop_flag;
        if (f > v[0]) v[0] = f;
    }
    if (t->world > 1) {
        lf_comm_set_context(t->comm, "stop check after step %ld", t->step);
        lf_status st = lf_comm_all_reduce_i64(t->comm, v, 2, LF_COMM_MAX);
        if (st != LF_OK) return st;
    }
    *reason = (int)v[0];
    *ckerr = v[1] != 0;
    return LF_OK;
}

/* Rollback (monitor.alerts.*.action rollback) after the alert at step
 * bad_step (1-based; its update was not applied): the last complete
 * checkpoint is loaded in process through the resume path (weights,
 * moments, loss scaler, counters, spike window: lf_checkpoint_resolve, so a
 * failed save is passed over), and the data cursor moves past the window
 * that led to the alert. With c the checkpoint's step and off the offset
 * before, steps c+1 .. bad_step read data steps c+off .. bad_step-1+off
 * (0-based); the offset becomes off + (bad_step - c), so step c+1 now reads
 * data step bad_step+off, the batch that would have followed the offending
 * one, and the rows of the window, [(c+off)*G, (bad_step+off)*G) with G the
 * global batch, are never read again. Everything random is keyed by the
 * step (dropout) or by the row (the sampler), so the run after a rollback
 * is the run resumed from c with opts.skip_batches = bad_step - c, bit for
 * bit. */
static lf_status rollback(lf_trainer *t, long bad_step, const char *kind, const char *alert_msg) {
    ckpt_wait(t, "the rollback");
    const long off = t->data_off;
    const int n_rb = t->n_rollbacks;
    char hist[sizeof t->rb_hist];
    memcpy(hist, t->rb_hist, sizeof hist);
    lf_status st = resume_from(t, t->ckpt_root, 1);
    if (st != LF_OK) {
        if (st == LF_ERR_NOT_FOUND)
            return lf_fail(LF_ERR_NUMERIC, "%s; monitor.alerts.%s.action is rollback but '%s' holds no checkpoint to "
                           "roll back to (none saved yet; checkpoint.interval is %ld); stopped", alert_msg,
                           !strcmp(kind, "nan") ? "nan" : "loss_spike", t->ckpt_root, t->cfg.ckpt_interval);
        lf_error_prefix("%s; rolling back to the last checkpoint failed", alert_msg);
        return st;
    }
    const long to = t->step, rows = (long)t->cfg.micro_batch * t->cfg.grad_accum * t->world;
    /* evaluations after the checkpoint are undone with it: none may mark a replayed step's save the best */
    if (t->best_eval_step > to) t->best_eval_step = -1;
    if (t->last_eval_step > to) t->last_eval_step = -1;
    const long first = to + off, last = bad_step - 1 + off; /* data steps skipped, inclusive */
    t->data_off = off + (bad_step - to);
    t->n_rollbacks = n_rb + 1;
    size_t hl = strlen(hist);
    snprintf(hist + hl, sizeof hist - hl, "%sstep %ld -> %ld (%s; batches %ld-%ld skipped)", hl ? "; " : "", bad_step,
             to, kind, first, last);
    memcpy(t->rb_hist, hist, sizeof hist);
    if (t->rank == 0) {
        lf_log(LF_LOG_WARN, "rollback %d of at most %d: step %ld -> checkpoint step %ld ('%s'); the batches of data "
               "steps %ld-%ld (rows %ld-%ld) are skipped: step %ld reads data step %ld", t->n_rollbacks,
               t->cfg.alert_max_rollbacks, bad_step, to, t->rollback_dir, first, last, first * rows,
               (last + 1) * rows - 1, to + 1, to + t->data_off);
        char esc[LF_PATH_MAX * 2], json[LF_PATH_MAX * 2 + 512];
        json_escape(esc, sizeof esc, t->rollback_dir);
        snprintf(json, sizeof json, "{\"from_step\":%ld,\"to_step\":%ld,\"reason\":\"%s\",\"checkpoint\":\"%s\","
                 "\"skipped_batches\":[%ld,%ld],\"skipped_rows\":[%ld,%ld],\"batch_offset\":%ld,\"rollbacks\":%d}",
                 bad_step, to, kind, esc, first, last, first * rows, (last + 1) * rows - 1, t->data_off, t->n_rollbacks);
        lf_obs_record r = {.kind = LF_OBS_EVENT, .step = to, .event = "rollback", .json = json};
        obs_emit(t, &r);
    }
    return LF_OK;
}

/* Stop at this boundary: a checkpoint of the step reached (unless it was
 * just saved or resumed from), then LF_ERR_PREEMPTED. */
static lf_status preempt(lf_trainer *t, int reason) {
    t->stop_reason = reason;
    ckpt_wait(t, "the stop"); /* async: the write in flight completes before anything else */
    if (t->ckerr_pending) { /* it failed: this step is saved again below, synchronously */
        for (int k = 0; k < t->ckerr_pending && t->rank == 0; k++)
            lf_log(LF_LOG_WARN, "the checkpoint of step %ld failed: %s", t->ckerr[k].step, t->ckerr[k].msg);
        t->ckerr_pending = 0;
    }
    if (t->saved_step != t->step) {
        lf_status st = save_checkpoint(t, 0);
        if (st != LF_OK) {
            lf_error_prefix("stopping at step %ld on request (%d): the checkpoint failed", t->step, reason);
            return st;
        }
        lf__treg_checkpoint(t->treg, t->model, t->step, t->last_eval_step == t->step, t->last_train_eval, t->last_val,
                            t->task_res, t->best_ckpt, NULL);
    }
    char json[LF_PATH_MAX + 160], esc[LF_PATH_MAX * 2] = "";
    char where[LF_PATH_MAX + 40];
    snprintf(where, sizeof where, "%s/step_%08ld", t->ckpt_root, t->step);
    json_escape(esc, sizeof esc, where);
    snprintf(json, sizeof json, "{\"reason\":%d,\"path\":\"%s\"}", reason, esc);
    emit_event(t, "preempted", NULL, json);
    if (t->rank == 0)
        lf_log(LF_LOG_INFO, "stop requested (%d): stopped at step %ld of %ld with checkpoint '%s'", reason, t->step,
               t->cfg.train_iters, where);
    return lf_fail(LF_ERR_PREEMPTED, "stopped at step %ld of %ld on request (%d); checkpoint '%s' holds that step: "
                   "resume to continue", t->step, t->cfg.train_iters, reason, where);
}

lf_status lf_trainer_run(lf_trainer *t) {
    lf_status st;
    int B = t->cfg.micro_batch, T = t->cfg.model.block_size, A = t->cfg.grad_accum;
    double tokens_per_step = (double)A * B * T * t->world; /* the global batch: throughput of the whole job */
    if (t->step == 0) {
        char *cfgjson = lf_train_config_to_json(&t->cfg);
        cJSON *c = cfgjson ? cJSON_Parse(cfgjson) : NULL;
        char *flat = c ? cJSON_PrintUnformatted(c) : NULL;
        char *json = flat ? malloc(strlen(flat) + 96) : NULL;
        if (json) {
            sprintf(json, "{\"num_params\":%zu,\"config\":%s}", lf_model_num_params(t->model), flat);
            emit_event(t, "start", NULL, json);
        }
        free(json);
        free(flat);
        cJSON_Delete(c);
        lf_free(cfgjson);
    }
    if (t->rank == 0) { /* hardware, kernels, memory plan: what the report shows of this process */
        char *info = lf__trep_run_info(t->plan_json, &t->cfg, t->world, t->peak_flops, t->be);
        if (info) emit_event(t, "run_info", NULL, info);
        free(info);
    }
    lf__treg_run_begin(t->treg, &t->cfg, t->world, t->resumed_dir, t->opts.init_from, lf_dataset_tokenizer_spec(t->ds));
    mark_progress(t);
    if (t->cfg.alert_stall_seconds > 0 && !t->wd_running) {
        t->wd_stop = 0;
        if (pthread_create(&t->wd, NULL, watchdog_main, t) == 0)
            t->wd_running = 1;
        else
            lf_log(LF_LOG_WARN, "could not start the stall watchdog thread; stall alerts are off");
    }
    st = LF_OK;
    /* train.stop_at ends the run early (evaluated and checkpointed like the
     * last step) without touching the schedule, which follows train_iters */
    const long stop = t->cfg.stop_at > 0 && t->cfg.stop_at < t->cfg.train_iters ? t->cfg.stop_at : t->cfg.train_iters;
    while (t->step < stop) {
        int req = 0, ckerr = 0; /* a step boundary: the only place a stop request or a failed save is read */
        ckpt_poll(t);           /* a background write that is done: its outcome */
        if ((st = stop_agreed(t, &req, &ckerr)) != LF_OK) break;
        if (ckerr && (st = ckpt_error_decide(t)) != LF_OK) break;
        if (req) {
            st = preempt(t, req);
            break;
        }
        double t0 = lf_time_now();
        step_result sr = {0};
        double busy0 = 0, exposed0 = 0, busy1 = 0, exposed1 = 0;
        lf_comm_times(t->comm, &busy0, &exposed0);
        st = train_step(t, &sr);
        if (st != LF_OK) break;
        /* what ran in the background beyond the waits for it (comm.h lf_comm_times) */
        lf_comm_times(t->comm, &busy1, &exposed1);
        sr.comm_hidden_ms = fmax(0.0, (busy1 - busy0) - (exposed1 - exposed0));
        if (sr.rollback) { /* the step does not count: back to the checkpoint, past the window */
            st = rollback(t, t->step + 1, sr.rollback, sr.alert_msg);
            if (st != LF_OK) break;
            mark_progress(t);
            continue;
        }
        double dt = lf_time_now() - t0;
        t->step++;
        mark_progress(t);
        double tps = tokens_per_step / dt;
        lf_obs_scalar sc[20];
        int n = 0;
        sc[n++] = (lf_obs_scalar){"train/loss", sr.loss};
        sc[n++] = (lf_obs_scalar){"train/lr", sr.lr};
        sc[n++] = (lf_obs_scalar){"train/grad_norm", sr.norm};
        sc[n++] = (lf_obs_scalar){"train/tokens_per_sec", tps};
        sc[n++] = (lf_obs_scalar){"time/step_ms", dt * 1e3};
        sc[n++] = (lf_obs_scalar){"train/samples_per_sec", (double)A * B * t->world / dt};
        sc[n++] = (lf_obs_scalar){"train/tokens", tokens_per_step};
        sc[n++] = (lf_obs_scalar){"train/epoch", lf_loader_epoch(t->loader)};
        if (t->peak_flops > 0) /* against every rank's peak (rank 0's measurement, times the ranks) */
            sc[n++] = (lf_obs_scalar){"train/mfu", t->flops_per_token * tps / (t->peak_flops * t->world)};
        if (sr.skipped) sc[n++] = (lf_obs_scalar){"train/skipped", 1};
        if (t->cfg.fp16) sc[n++] = (lf_obs_scalar){"train/loss_scale", sr.loss_scale};
        sc[n++] = (lf_obs_scalar){"memory/rss_bytes", rss_bytes()};
        sc[n++] = (lf_obs_scalar){"memory/planned_bytes", (double)t->planned_bytes};
        if (t->cfg.wall_clock_breakdown) {
            sc[n++] = (lf_obs_scalar){"time/data_ms", sr.data_ms};
            sc[n++] = (lf_obs_scalar){"time/forward_ms", sr.forward_ms};
            sc[n++] = (lf_obs_scalar){"time/backward_ms", sr.backward_ms};
            sc[n++] = (lf_obs_scalar){"time/optimizer_ms", sr.optimizer_ms};
            if (t->world > 1) { /* issued: exposed + hidden; exposed: the step waited for it */
                sc[n++] = (lf_obs_scalar){"time/comm_ms", sr.comm_ms + sr.comm_hidden_ms};
                sc[n++] = (lf_obs_scalar){"time/comm_exposed_ms", sr.comm_ms};
            }
        }
        lf_obs_record r = {.kind = LF_OBS_TRAIN, .step = t->step, .scalars = sc, .n_scalars = n};
        obs_emit(t, &r);
        int last = t->step == stop;
        if ((t->cfg.eval_interval > 0 && t->step % t->cfg.eval_interval == 0) || last) {
            st = run_eval(t);
            if (st != LF_OK) break;
            mark_progress(t);
        }
        if ((t->cfg.ckpt_interval > 0 && t->step % t->cfg.ckpt_interval == 0) || last) {
            st = save_checkpoint(t, 1);
            if (st != LF_OK) { /* checkpoint.on_error decides at the next boundary, alike on every rank */
                ckpt_error_note(t, st, t->step, lf_last_error());
                st = LF_OK;
            } else if (!t->cfg.ckpt_async) { /* async: the writer's reap records it */
                char *suite_json = NULL; /* the registry's record, and eval.suite on the checkpoint */
                lf__treg_checkpoint(t->treg, t->model, t->step, t->last_eval_step == t->step, t->last_train_eval,
                                    t->last_val, t->task_res, t->best_ckpt, &suite_json);
                if (suite_json) emit_event(t, "eval_suite", NULL, suite_json);
                free(suite_json);
            }
            mark_progress(t);
        }
    }
    /* every way out waits for the writer: the run never returns with a write in flight */
    ckpt_wait(t, "the end of the run");
    if (st == LF_OK) { /* the last save's outcome (or a background one found only now), agreed */
        int req = 0, ckerr = 0;
        st = stop_agreed(t, &req, &ckerr);
        if (st == LF_OK && ckerr) st = ckpt_error_decide(t);
    } else if (t->rank == 0) {
        for (int k = 0; k < t->ckerr_pending; k++)
            lf_log(LF_LOG_WARN, "the checkpoint of step %ld failed too: %s", t->ckerr[k].step, t->ckerr[k].msg);
    }
    stop_watchdog(t);
    if (st == LF_OK && t->cfg.load_best_model_at_end && t->rank == 0) st = export_best_model(t);
    if (st != LF_OK) {
        tfail(t, st);
        char esc[1100], json[1200];
        json_escape(esc, sizeof esc, t->errmsg);
        snprintf(json, sizeof json, "{\"status\":\"%s\",\"message\":\"%s\"}",
                 st == LF_ERR_PREEMPTED ? "preempted" : "error", esc);
        emit_event(t, "end", NULL, json);
    } else {
        emit_event(t, "end", NULL, "{\"status\":\"ok\"}");
    }
    lf__treg_run_end(t->treg, st, t->errmsg);
    pthread_mutex_lock(&t->obs_mu);
    lf_obs_flush(t->obs);
    pthread_mutex_unlock(&t->obs_mu);
    if (t->rank == 0) lf__trep_report(&t->cfg); /* monitor.report: a failure is a warning */
    return st;
}

/* ---------------------------------------------------------------- reading a checkpoint's model */

lf_status lf_checkpoint_read_model(const char *dir, lf_model_config *cfg, char *tokenizer, size_t cap) {
    char path[LF_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/trainer_state.json", dir);
    char *text = NULL;
    lf_status st = lf_file_read_all(path, 64u << 20, &text, NULL);
    if (st != LF_OK) return st;
    cJSON *o = cJSON_Parse(text);
    lf_free(text);
    cJSON *mo = o ? cJSON_GetObjectItemCaseSensitive(o, "model") : NULL;
    if (!cJSON_IsObject(mo)) {
        cJSON_Delete(o);
        return lf_fail(LF_ERR_FORMAT, "'%s': not JSON or no \"model\" object", path);
    }
    /* required, then optional (0 = the architecture's default: checkpoints
     * written before Llama carry only GPT-2's keys) */
    static const char *keys[] = {"n_layer", "n_head", "n_embd", "block_size", "vocab_size", "padded_vocab_size",
                                 "n_kv_head", "ffn_hidden"};
    int vals[8] = {0};
    for (int i = 0; i < 8; i++) {
        cJSON *it = cJSON_GetObjectItemCaseSensitive(mo, keys[i]);
        if (!it && i >= 6) continue;
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble > 1e9) {
            cJSON_Delete(o);
            return lf_fail(LF_ERR_FORMAT, "'%s': model.%s is missing or not a valid number", path, keys[i]);
        }
        vals[i] = (int)it->valuedouble;
    }
    memset(cfg, 0, sizeof *cfg);
    cJSON *ar = cJSON_GetObjectItemCaseSensitive(mo, "arch");
    if (ar && (!cJSON_IsString(ar) || lf_arch_parse(ar->valuestring, &cfg->arch) != LF_OK)) {
        cJSON_Delete(o);
        return lf_fail(LF_ERR_FORMAT, "'%s': model.arch is not one of gpt2, llama", path);
    }
    cfg->n_layer = vals[0];
    cfg->n_head = vals[1];
    cfg->n_embd = vals[2];
    cfg->block_size = vals[3];
    cfg->vocab_size = vals[4];
    cfg->padded_vocab_size = vals[5];
    cfg->n_kv_head = vals[6];
    cfg->ffn_hidden = vals[7];
    cfg->bias = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(mo, "bias"));
    cJSON *te = cJSON_GetObjectItemCaseSensitive(mo, "tie_embeddings");
    cfg->tie_embeddings = te ? cJSON_IsTrue(te) : 1;
    cJSON *dr = cJSON_GetObjectItemCaseSensitive(mo, "dropout");
    cfg->dropout = cJSON_IsNumber(dr) ? (float)dr->valuedouble : 0.0f;
    cJSON *ne = cJSON_GetObjectItemCaseSensitive(mo, "norm_eps");
    cfg->norm_eps = cJSON_IsNumber(ne) ? (float)ne->valuedouble : 0.0f;
    cJSON *rt = cJSON_GetObjectItemCaseSensitive(mo, "rope_theta");
    cfg->rope_theta = cJSON_IsNumber(rt) ? (float)rt->valuedouble : 0.0f;
    cJSON *tk = cJSON_GetObjectItemCaseSensitive(o, "tokenizer");
    if (tokenizer && cap) {
        tokenizer[0] = 0;
        if (cJSON_IsString(tk)) snprintf(tokenizer, cap, "%s", tk->valuestring);
    }
    cJSON_Delete(o);
    st = lf_model_config_validate(cfg);
    if (st != LF_OK) lf_error_prefix("'%s'", path);
    return st;
}

lf_status lf_checkpoint_load_model(const char *ckpt, lf_backend *be, lf_model **model, char *tokenizer,
                                   size_t cap, char **dir_out) {
    *model = NULL;
    if (dir_out) *dir_out = NULL;
    if (!be) be = lf_backend_default();
    if (!be) return LF_ERR_NOT_FOUND;
    char *dir = NULL;
    float *host = NULL;
    lf_model *m = NULL;
    lf_status st = lf_checkpoint_resolve(ckpt, &dir);
    if (st != LF_OK) return st;
    lf_model_config mc;
    char spec[LF_PATH_MAX + 32];
    if ((st = lf_checkpoint_read_model(dir, &mc, spec, sizeof spec)) != LF_OK) goto fail;
    if (tokenizer && cap) snprintf(tokenizer, cap, "%s", spec);
    if ((st = lf_model_create(&m, &mc, be)) != LF_OK) goto fail;
    int count;
    const lf_param_info *table = lf_model_params_table(m, &count);
    lf_ckpt_tensors tt = {table, count, lf_model_num_params(m)};
    if (!(host = lf_alloc(tt.total * sizeof(float)))) {
        st = lf_fail(LF_ERR_NOMEM, "out of memory reading checkpoint '%s'", dir);
        goto fail;
    }
    if ((st = lf_checkpoint_load(dir, &tt, host, NULL, NULL, NULL)) != LF_OK) goto fail;
    be->ops->to_device(be, lf_model_params(m), host, tt.total * sizeof(float));
    lf_model_params_changed(m);
    if (be->ops->params_changed) be->ops->params_changed(be);
    lf_free(host);
    *model = m;
    if (dir_out) *dir_out = dir;
    else lf_free(dir);
    return LF_OK;
fail:
    lf_free(host);
    lf_free(dir);
    lf_model_free(m);
    return st;
}
