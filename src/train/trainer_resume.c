/*
 * Resuming a run from a checkpoint (--resume, and the rollback that loads
 * the last checkpoint in process): rank 0 reads, every rank receives the
 * same state, and the trainer's counters, loss scaler, spike window, data
 * offset and best-so-far are restored from trainer_state.json.
 *
 * Invariants:
 *  - Only rank 0 writes checkpoints (stage 0), so only rank 0 is sure to see
 *    them: it reads and broadcasts (ZeRO: every rank reads its own shard,
 *    lf__zero_resume_read). A failure on rank 0 fails every rank.
 *  - The state saved is the whole state of the run: a run resumed from step
 *    c produces bit-identical losses to the uninterrupted run (fp32, CPU).
 *  - The configuration comes from the command line; settings that change the
 *    trajectory are compared with the checkpoint's, each difference a
 *    warning.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "llmforge/train.h"
#include "trainer_impl.h"

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
#define DRIFT(key, fmt, a, b) \
    do { \
        if ((a) != (b) && at < sizeof msg) \
            at += (size_t)snprintf(msg + at, sizeof msg - at, "%s" key " (checkpoint " fmt ", now " fmt ")", \
                                   at ? "; " : "", a, b); \
    } while (0)
    DRIFT("optimizer.params.lr", "%g", (double)old.lr, (double)c->lr);
    DRIFT("optimizer.params.betas[0]", "%g", (double)old.beta1, (double)c->beta1);
    DRIFT("optimizer.params.betas[1]", "%g", (double)old.beta2, (double)c->beta2);
    DRIFT("optimizer.params.eps", "%g", (double)old.eps, (double)c->eps);
    DRIFT("optimizer.params.weight_decay", "%g", (double)old.weight_decay, (double)c->weight_decay);
    DRIFT("scheduler.type", "%d", old.sched_type, c->sched_type);
    if (c->sched_type < LF_SCHED_WARMUP_LR) { /* cosine's keys; DeepSpeed's schedulers have their own */
        DRIFT("scheduler.warmup_iters", "%ld", old.warmup_iters, c->warmup_iters);
        DRIFT("scheduler.decay_iters", "%ld", old.decay_iters, c->decay_iters);
        DRIFT("scheduler.min_lr", "%g", (double)old.min_lr, (double)c->min_lr);
    }
    /* DeepSpeed's schedulers (the parameters that set their curves) */
    DRIFT("scheduler.params.warmup_min_lr", "%g", (double)old.ds.warmup_min_lr, (double)c->ds.warmup_min_lr);
    DRIFT("scheduler.params.warmup_max_lr", "%g", (double)old.ds.warmup_max_lr, (double)c->ds.warmup_max_lr);
    DRIFT("scheduler.params.warmup_num_steps", "%ld", old.ds.warmup_num_steps, c->ds.warmup_num_steps);
    DRIFT("scheduler.params.total_num_steps", "%ld", old.ds.total_num_steps, c->ds.total_num_steps);
    DRIFT("scheduler.params.cycle_min_lr", "%g", (double)old.ds.cycle_min_lr, (double)c->ds.cycle_min_lr);
    DRIFT("scheduler.params.cycle_max_lr", "%g", (double)old.ds.cycle_max_lr, (double)c->ds.cycle_max_lr);
    DRIFT("scheduler.params.cycle_first_step_size", "%ld", old.ds.cycle_first_step_size, c->ds.cycle_first_step_size);
    DRIFT("scheduler.params.lr_range_test_min_lr", "%g", (double)old.ds.lr_range_test_min_lr,
          (double)c->ds.lr_range_test_min_lr);
    DRIFT("gradient_clipping", "%g", (double)old.grad_clip, (double)c->grad_clip);
    /* the global batch decides the rows of a step; how it splits into
     * micro-batches, accumulation and ranks does not (src/data/loader.c) */
    DRIFT("train_batch_size", "%ld", old.train_batch_size, c->train_batch_size);
    DRIFT("data.sampling", "%d", old.sampling, c->sampling);
    DRIFT("data.packing", "%d", old.packing, c->packing);
    DRIFT("model.dropout", "%g", (double)old.model.dropout, (double)c->model.dropout);
    DRIFT("seed", "%llu", (unsigned long long)old.seed, (unsigned long long)c->seed);
#undef DRIFT
    if (strcmp(old.dataset, c->dataset) != 0 && at < sizeof msg)
        at += (size_t)snprintf(msg + at, sizeof msg - at, "%sdata.dataset (checkpoint '%s', now '%s')", at ? "; " : "",
                               old.dataset, c->dataset);
    if (at)
        lf_log(LF_LOG_WARN,
               "resuming with settings that differ from the checkpoint's: %s; the run will not match "
               "an uninterrupted one (resume with out_dir/config.resolved.json to keep them)",
               msg);
}

/* Rank 0 reads the checkpoint (only rank 0 writes them, so only rank 0 is
 * sure to see them) into the host staging buffers and *state, then shares
 * both: a length (negative: rank 0 failed, its message follows, and every
 * rank fails with it), the state text, parameters and both moments. */
static lf_status resume_read(lf_trainer *t, const char *path, char **dir, char **state) {
    size_t n = lf_model_train_num_params(t->model);
    lf_status st = LF_OK;
    int64_t len = 0;
    if (t->rank == 0) {
        st = lf_checkpoint_resolve(path, dir);
        if (st == LF_OK) {
            int count;
            const lf_param_info *table = lf_model_train_table(t->model, &count);
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
/* The fields of the model that only a config.json sets (head_dim, biases,
 * RoPE scaling: trainer_state.json's model.extras, absent when default)
 * must be this run's: the weights would load (RoPE has no tensors) into a
 * different model. */
static lf_status check_model_extras(const lf_trainer *t, const cJSON *o, const char *where) {
    const cJSON *mo = cJSON_GetObjectItemCaseSensitive(o, "model");
    const cJSON *ex = cJSON_IsObject(mo) ? cJSON_GetObjectItemCaseSensitive(mo, "extras") : NULL;
    lf_model_config saved = t->mcfg;
    saved.head_dim = saved.out_bias = saved.mlp_bias = saved.qk_norm = saved.fused_proj = 0;
    memset(&saved.rope, 0, sizeof saved.rope);
    if (ex) {
        char *text = cJSON_PrintUnformatted(ex);
        char msg[LF_PATH_MAX + 64];
        snprintf(msg, sizeof msg, "checkpoint '%s': model.extras", where);
        lf_status st = text ? lf_model_config_extras_parse(text, msg, &saved)
                            : lf_fail(LF_ERR_NOMEM, "out of memory reading checkpoint '%s'", where);
        cJSON_free(text);
        if (st != LF_OK) return st;
    }
    char a[1024], b[1024];
    lf_model_config_extras_json(&saved, a, sizeof a);
    lf_model_config_extras_json(&t->mcfg, b, sizeof b);
    if (strcmp(a, b) != 0)
        return lf_fail(LF_ERR_MISMATCH,
                       "checkpoint '%s' holds a model with %s; this run's model has %s (resume with the same "
                       "--init-from)",
                       where, a, b);
    return LF_OK;
}

lf_status lf__trainer_resume(lf_trainer *t, const char *path, int rollback) {
    char *dir = NULL, *state = NULL;
    size_t n = lf_model_train_num_params(t->model);
    lf_status st = t->zstage ? lf__zero_resume_read(t, path, &dir, &state) : resume_read(t, path, &dir, &state);
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
    if ((st = check_model_extras(t, o, where)) != LF_OK || (st = lf__lora_check_resume(t, where, o)) != LF_OK) {
        cJSON_Delete(o);
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
    cJSON *rbn = cJSON_GetObjectItemCaseSensitive(rbs, "count"),
          *rbh = cJSON_GetObjectItemCaseSensitive(rbs, "history");
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
    else if (!strcmp(t->cfg.best_metric, "val_loss") && isfinite(t->best_val)) t->best_score = t->best_val;
    cJSON *lsj = cJSON_GetObjectItemCaseSensitive(o, "loss_scaler");
    if (t->cfg.fp16 && t->scaler.dynamic && cJSON_IsObject(lsj)) {
        /* continue the checkpoint's dynamic scaler (a static or absent one starts afresh) */
        cJSON *sc = cJSON_GetObjectItemCaseSensitive(lsj, "scale"),
              *hy = cJSON_GetObjectItemCaseSensitive(lsj, "hysteresis");
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
                lf_log(LF_LOG_WARN,
                       "checkpoint '%s': trainer_state.json's loss_scaler is incomplete; the loss scale "
                       "starts afresh",
                       where);
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
    stage_in(t, lf_model_train_params(t->model), t->host_params, n * sizeof(float));
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
    lf__trainer_json_escape(esc, sizeof esc, where);
    snprintf(json, sizeof json, "{\"path\":\"%s\"}", esc);
    lf__trainer_event(t, "resume", NULL, json);
    lf_free(dir);
    return LF_OK;
}
