/*
 * Writing checkpoints from the trainer: trainer_state.json, the files every
 * checkpoint carries, the synchronous save and the background writer of
 * checkpoint.async, and the decision about a failed save at the next step
 * boundary (checkpoint.on_error). The directory format and its crash-safe
 * commit are src/checkpoint/checkpoint.c's (include/llmforge/checkpoint.h).
 *
 * Invariants:
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
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "llmforge/train.h"
#include "trainer_impl.h"

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
    cJSON_AddStringToObject(cursor, "sampling",
                            t->cfg.sampling == LF_SAMPLING_SEQUENTIAL ? "sequential"
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
    if (isfinite(t->best_val)) cJSON_AddNumberToObject(o, "best_val_loss", t->best_val);
    else cJSON_AddNullToObject(o, "best_val_loss");
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
    if (mc->sliding_window > 0) cJSON_AddNumberToObject(mo, "sliding_window", mc->sliding_window);
    if (!lf_model_config_extras_default(mc)) { /* head_dim, biases, RoPE scaling from an HF config.json */
        char extras[1024];
        lf_model_config_extras_json(mc, extras, sizeof extras);
        cJSON_AddItemToObject(mo, "extras", cJSON_Parse(extras));
    }
    cJSON_AddStringToObject(o, "tokenizer", t->tok_spec);
    if (t->best_ckpt[0]) cJSON_AddStringToObject(o, "best_checkpoint", t->best_ckpt);
    cJSON *bm = cJSON_AddObjectToObject(o, "best_metric");
    cJSON_AddStringToObject(bm, "name", t->cfg.best_metric);
    if (isfinite(t->best_score)) cJSON_AddNumberToObject(bm, "value", t->best_score);
    else cJSON_AddNullToObject(bm, "value");
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
    lf__lora_state_json(t, o);
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
    size_t n = lf_model_train_num_params(t->model);
    snap->step = t->step;
    snap->state = NULL;
    snap->params = snap->m = snap->v = NULL;
    snprintf(snap->protect, sizeof snap->protect, "%s", t->best_ckpt);
    lf_status st = state_to_json(t, &snap->state);
    if (st != LF_OK || t->zstage) return st; /* ZeRO: each rank writes its shard in lf__zero_save */
    if (own) { /* copies of their own, whatever the backend: training goes on under the writer */
        lf_backend_to_host(t->be, t->snap_params, lf_model_train_params(t->model), n * sizeof(float));
        moments_out(t, t->snap_m, t->m, n * sizeof(float));
        moments_out(t, t->snap_v, t->v, n * sizeof(float));
        st = lf_backend_sync(t->be);
        if (st != LF_OK) return st;
        snap->params = t->snap_params;
        snap->m = t->snap_m;
        snap->v = t->snap_v;
        return LF_OK;
    }
    stage_out(t, t->host_params, lf_model_train_params(t->model), n * sizeof(float));
    stage_out(t, t->host_m, t->m, n * sizeof(float));
    stage_out(t, t->host_v, t->v, n * sizeof(float));
    snap->params = t->host_params;
    snap->m = t->host_m;
    snap->v = t->host_v;
    return LF_OK;
}

/* checkpoint.keep_last / keep_every and the best, for lf_checkpoint_prune. */
static lf_ckpt_retention retention(const lf_trainer *t, const char *protect) {
    lf_ckpt_retention r = {.keep_last = t->cfg.keep_last,
                           .keep_every = t->cfg.keep_every,
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
        st = lf__zero_save(t, snap->state, saved); /* every rank writes its shard, in parallel */
    } else {
        int count, n_extra = t->n_extra;
        const lf_param_info *table = lf_model_train_table(t->model, &count);
        lf_ckpt_tensors tt = {table, count, lf_model_train_num_params(t->model)};
        lf_ckpt_file extra[10]; /* t->extra and LoRA's two PEFT files */
        char *owned = NULL;
        memcpy(extra, t->extra, sizeof t->extra);
        st = lf__lora_ckpt_extras(t, snap->params, extra, &n_extra, &owned);
        if (st == LF_OK)
            st = lf_checkpoint_save(t->ckpt_root, snap->step, &tt, snap->params, snap->m, snap->v, snap->state, extra,
                                    n_extra, 0, keep.protect, saved);
        lf_free(owned);
    }
    if (st == LF_OK && t->rank == 0) lf_checkpoint_prune(t->ckpt_root, snap->step, &keep);
    return st;
}

/* The "checkpoint" record of a save that is complete (rank 0). */
static void ckpt_saved_event(lf_trainer *t, long step, const char *saved, const char *fields) {
    if (t->rank != 0) return;
    char esc[LF_PATH_MAX * 2], json[LF_PATH_MAX * 2 + 256];
    lf__trainer_json_escape(esc, sizeof esc, saved ? saved : "");
    snprintf(json, sizeof json, "{\"path\":\"%s\",%s}", esc, fields);
    lf_obs_record r = {.kind = LF_OBS_EVENT, .step = step, .event = "checkpoint", .json = json};
    lf__trainer_emit(t, &r);
}

/* A save failed: kept for the next step boundary (checkpoint.on_error,
 * decided alike on every rank there). Every failure since the last boundary
 * is kept; past CKERR_MAX (never reached: at most one write is in flight
 * and one more save can start before a boundary) the last slot is reused. */
void lf__ckpt_error_note(lf_trainer *t, lf_status st, long step, const char *msg) {
    const int k = t->ckerr_pending < CKERR_MAX ? t->ckerr_pending++ : CKERR_MAX - 1;
    t->ckerr[k].st = st;
    t->ckerr[k].step = step;
    snprintf(t->ckerr[k].msg, sizeof t->ckerr[k].msg, "%s", msg);
}

/* The background writer's job: the snapshot, and what became of it. */
typedef struct ckpt_job {
    ckpt_snapshot snap;
    lf_status st;
    char *saved;    /* the step directory (lf_free) */
    char err[1024]; /* the writer thread's lf_last_error */
    double write_ms, snapshot_ms, wait_ms;
    int evaluated; /* the snapshot's step was evaluated: its losses go to the registry */
    double train_loss, val_loss;
} ckpt_job;

static void *ckpt_writer_main(void *arg) {
    lf_trainer *t = arg;
    ckpt_job *j = t->job;
    if (t->opts.inject_write_delay_seconds > 0) lf__trainer_sleep(t->opts.inject_write_delay_seconds); /* test hook */
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
        lf__ckpt_error_note(t, j->st, j->snap.step, j->err);
    }
    free(j->snap.state);
    j->snap.state = NULL;
    lf_free(j->saved);
    j->saved = NULL;
}

/* At a step boundary: the outcome of a write that is done, without waiting. */
void lf__ckpt_poll(lf_trainer *t) {
    if (t->ckw_running && atomic_load(&t->ckw_done)) ckpt_reap(t);
}

/* Wait for the write in flight (before a save, a rollback, the end, a stop). */
void lf__ckpt_wait(lf_trainer *t, const char *why) {
    if (!t->ckw_running) return;
    if (!atomic_load(&t->ckw_done))
        lf_log(LF_LOG_INFO, "%s at step %ld waits for the background write of checkpoint step %ld", why, t->step,
               t->job->snap.step);
    ckpt_reap(t);
}

/* checkpoint.async (rank 0): the job and the snapshot the writer owns, 3 x n
 * floats (ZeRO is refused with async). */
lf_status lf__ckpt_async_alloc(lf_trainer *t, size_t n) {
    t->job = calloc(1, sizeof *t->job);
    t->snap_params = lf_alloc(n * sizeof(float));
    t->snap_m = lf_alloc(n * sizeof(float));
    t->snap_v = lf_alloc(n * sizeof(float));
    if (!t->job || !t->snap_params || !t->snap_m || !t->snap_v)
        return lf_fail(LF_ERR_NOMEM,
                       "out of memory allocating the checkpoint snapshot (checkpoint.async: "
                       "3 x %zu floats)",
                       n);
    return LF_OK;
}

/* Joins a writer still running (lf_trainer_run waits for it; this is for a
 * caller that did not run) and frees the job and the snapshot. */
void lf__ckpt_async_free(lf_trainer *t) {
    if (t->ckw_running) {
        pthread_join(t->ckw, NULL);
        t->ckw_running = 0;
        free(t->job->snap.state);
        lf_free(t->job->saved);
    }
    free(t->job);
    t->job = NULL;
    lf_free(t->snap_params);
    lf_free(t->snap_m);
    lf_free(t->snap_v);
    t->snap_params = t->snap_m = t->snap_v = NULL;
}

/* checkpoint.async: wait for the previous write (one in flight: memory is
 * bounded by one snapshot), snapshot, start the writer. A writer thread that
 * cannot start makes this save synchronous (a warning). */
static lf_status ckpt_async_start(lf_trainer *t) {
    double w0 = lf_time_now();
    lf__ckpt_wait(t, "checkpoint");
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
    lf_log(LF_LOG_WARN, "cannot start the checkpoint writer thread; step %ld is saved in the training thread", t->step);
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
 * write goes to the background (its failure is found by lf__ckpt_poll/wait);
 * otherwise it is complete (or failed) on return. */
lf_status lf__trainer_save(lf_trainer *t, int may_async) {
    /* this checkpoint becomes the best when the evaluation of this very step
     * set a new best; rotation never removes the best */
    if (t->best_eval_step == t->step) snprintf(t->best_ckpt, sizeof t->best_ckpt, "step_%08ld", t->step);
    if (!t->zstage && t->rank != 0) { /* stage 0: the replicas are identical, rank 0 writes */
        t->saved_step = t->step;
        return LF_OK;
    }
    if (may_async && t->cfg.ckpt_async) return ckpt_async_start(t);
    lf__ckpt_wait(t, "checkpoint"); /* a synchronous save after a background one (a stop): in order */
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

/* The checkpoint_error record of failure f (rank 0). */
static void emit_ckerr(lf_trainer *t, const struct ckpt_failure *f) {
    char file[LF_PATH_MAX], err[256], ef[LF_PATH_MAX * 2], ee[512], em[2100], json[LF_PATH_MAX * 2 + 3000];
    ckerr_parts(f->msg, file, sizeof file, err, sizeof err);
    lf__trainer_json_escape(ef, sizeof ef, file);
    lf__trainer_json_escape(ee, sizeof ee, err);
    lf__trainer_json_escape(em, sizeof em, f->msg);
    /* the record's own "step" is where the failure was reported; save_step the save's */
    snprintf(json, sizeof json, "{\"save_step\":%ld,\"file\":\"%s\",\"errno\":\"%s\",\"message\":\"%s\"}", f->step, ef,
             ee, em);
    lf_obs_record r = {.kind = LF_OBS_EVENT, .step = t->step, .event = "checkpoint_error", .json = json};
    lf__trainer_emit(t, &r);
}

/* The failed save every rank agreed was pending (lf__trainer_stop_agreed): stop =
 * the error (on the rank that failed, its message; elsewhere, that rank 0
 * failed); continue = a warning and a checkpoint_error record, then on.
 * At the end of the run (at_end) no later save can try again: when the
 * failed save is the final one (the agreed latest failure is this step's),
 * continue too ends the run with the error, on every rank alike, so a run
 * whose last save failed never ends "ok" with an older 'latest'. */
lf_status lf__ckpt_error_decide(lf_trainer *t, int at_end) {
    const int mine = t->ckerr_pending;
    t->ckerr_pending = 0;
    if (t->cfg.ckpt_on_error == LF_CKPT_ON_ERROR_STOP) {
        if (mine) /* the first failure is the one that stops the run */
            return lf_fail(t->ckerr[0].st,
                           "the checkpoint of step %ld failed: %s (checkpoint.on_error is stop; "
                           "'latest' names the last complete checkpoint)",
                           t->ckerr[0].step, t->ckerr[0].msg);
        return lf_fail(LF_ERR_IO, "a checkpoint failed on rank 0, which writes them (its log names the file); "
                                  "stopping with it (checkpoint.on_error is stop)");
    }
    if (at_end && t->ckerr_last == t->step) { /* continue, but the final save failed: nothing can try again */
        for (int k = 0; k < mine; k++) {
            if (t->ckerr[k].step != t->step)
                lf_log(LF_LOG_WARN, "the checkpoint of step %ld failed too: %s", t->ckerr[k].step, t->ckerr[k].msg);
            if (t->rank == 0) emit_ckerr(t, &t->ckerr[k]);
        }
        if (mine && t->ckerr[mine - 1].step == t->step)
            return lf_fail(t->ckerr[mine - 1].st,
                           "the final checkpoint (step %ld) failed: %s; checkpoint.on_error is "
                           "continue, but no later save can try again, so the run does not end ok ('latest' names "
                           "the last complete checkpoint)",
                           t->step, t->ckerr[mine - 1].msg);
        return lf_fail(LF_ERR_IO,
                       "the final checkpoint (step %ld) failed on rank 0, which writes them (its log names "
                       "the file); the run does not end ok",
                       t->step);
    }
    if (t->rank != 0) return LF_OK;
    for (int k = 0; k < mine; k++) {
        const struct ckpt_failure *f = &t->ckerr[k];
        lf_log(LF_LOG_WARN,
               "the checkpoint of step %ld failed: %s; training goes on (checkpoint.on_error is "
               "continue: the previous checkpoint stays latest, the next save tries again)",
               f->step, f->msg);
        emit_ckerr(t, f);
    }
    return LF_OK;
}

/* The files each checkpoint carries besides tensors and state. A char
 * tokenizer's vocab.json is copied (the spec then names it relative to the
 * checkpoint), and so is a Hugging Face tokenizer.json ("hf:tokenizer.json");
 * other tokenizers keep their spec. The dataset's chat_template.json (what
 * `llmforge prepare --chat-template` rendered the pairs with) is copied, so
 * `llmforge serve` renders chats as the model was trained. config.json is Hugging
 * Face's config of this model (lf_model_hf_config_json: GPT2LMHeadModel,
 * LlamaForCausalLM), so transformers loads the checkpoint directory; for a run
 * --init-from an HF directory, that directory's own files instead
 * (keep_hf_files). */
/* --init-from a Hugging Face directory: its own config.json (the original
 * architectures and model_type: a Mistral or Qwen2 stays one; the keys the
 * run may set agree with it, hf_merge_config) and generation_config.json
 * (eos ids, default sampling) travel with every checkpoint, and so do
 * tokenizer_config.json and special_tokens_map.json when the data was
 * tokenized with the directory's own tokenizer.json (byte for byte), so
 * transformers loads the same model and tokenizer back. */
static lf_status keep_hf_files(lf_trainer *t, int *have_config) {
    static const char *const names[4] = {"config.json", "generation_config.json", "tokenizer_config.json",
                                         "special_tokens_map.json"};
    const char *dir = t->opts.init_from;
    *have_config = 0;
    if (!dir || !lf_checkpoint_is_hf_dir(dir)) return LF_OK;
    int same_tokenizer = 0;
    if (t->tok_data && !strcmp(t->tok_spec, "hf:tokenizer.json")) {
        char path[LF_PATH_MAX + 32], *own = NULL;
        size_t len = 0, mine = strlen(t->tok_data);
        snprintf(path, sizeof path, "%s/tokenizer.json", dir);
        if (lf_file_read_all(path, 256u << 20, &own, &len) == LF_OK)
            same_tokenizer = len == mine && !memcmp(own, t->tok_data, len);
        lf_free(own);
    }
    for (int i = 0; i < 4; i++) {
        if (i >= 2 && !same_tokenizer) break;
        char path[LF_PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (access(path, F_OK) != 0) continue;
        size_t len = 0;
        lf_status st = lf_file_read_all(path, 16u << 20, &t->hf_kept[i], &len);
        if (st != LF_OK) return st;
        t->extra[t->n_extra++] = (lf_ckpt_file){names[i], t->hf_kept[i], len};
        if (i == 0) *have_config = 1;
    }
    return LF_OK;
}

lf_status lf__ckpt_extras(lf_trainer *t) {
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
    if (lf_lora_enabled(&t->cfg.lora)) return LF_OK; /* the adapter alone: no base config.json (trainer_lora.c) */
    int have_config = 0;
    lf_status kst = keep_hf_files(t, &have_config);
    if (kst != LF_OK) return kst;
    int n = have_config ? 0 : lf_model_hf_config_json(&t->mcfg, NULL, 0); /* 0: none (GPT-2 without biases) */
    if (n > 0) {
        t->hf_config = lf_alloc((size_t)n + 1);
        if (!t->hf_config) return lf_fail(LF_ERR_NOMEM, "out of memory");
        lf_model_hf_config_json(&t->mcfg, t->hf_config, (size_t)n + 1);
        t->extra[t->n_extra++] = (lf_ckpt_file){"config.json", t->hf_config, (size_t)n};
    }
    return LF_OK;
}
