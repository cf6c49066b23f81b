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
 *  - Everything a person or a tool watches goes out as records on one bus
 *    (obs.h): log.jsonl always, TensorBoard and Prometheus when configured,
 *    and whatever sinks the caller adds (the CLI's console). Emission is
 *    serialised by obs_mu because the stall watchdog emits from its thread.
 *  - Alerts: a non-finite loss or gradient stops the run (no checkpoint) or
 *    skips the step; a loss spike (z-score over the previous accepted steps)
 *    is logged or skips the step; a stall (no step for N seconds) is reported
 *    by a watchdog thread, which may also end the process via on_fatal. A
 *    skipped step advances the data but not AdamW's step count (opt_t), as
 *    DeepSpeed's skipped steps do; both counters and the spike window are
 *    saved, so resume stays exact.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
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
#include "llmforge/train.h"
#include "train_impl.h"

struct lf_trainer {
    lf_train_config cfg;
    lf_gpt2_config mcfg;       /* the model as built: vocab from the dataset */
    lf_trainer_opts opts;
    const lf_backend_ops *be;
    lf_model *model;
    lf_dataset *ds;
    float *m, *v;              /* AdamW moments (backend memory) */
    float *host_params;        /* staging for checkpoints (host) */
    float *host_m, *host_v;
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
    long opt_t;                /* AdamW updates applied (skipped steps do not count) */
    long skipped;              /* steps skipped by an alert */
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
    /* files every checkpoint carries, so it stands alone: the tokenizer's
     * vocabulary and a Hugging Face config.json (GPT2LMHeadModel) */
    lf_ckpt_file extra[2];
    int n_extra;
    char *tok_data, *hf_config;
    char tok_spec[LF_PATH_MAX + 32]; /* the spec as stored in checkpoints */
    char ckpt_root[LF_PATH_MAX + 8];
    char errmsg[1024];
};

static lf_status tfail(lf_trainer *t, lf_status st) {
    snprintf(t->errmsg, sizeof t->errmsg, "%s", lf_last_error());
    return st;
}

const char *lf_trainer_errmsg(const lf_trainer *t) { return t ? t->errmsg : lf_last_error(); }
lf_model *lf_trainer_model(lf_trainer *t) { return t->model; }

static void obs_emit(lf_trainer *t, lf_obs_record *r) {
    if (!t->obs) return;
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
    lf_log(LF_LOG_WARN, "alert %s (%s): %s", kind, action, msg);
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
    if (!o || !cfg) {
        cJSON_Delete(o);
        cJSON_Delete(cfg);
        return lf_fail(LF_ERR_NOMEM, "out of memory building trainer_state.json");
    }
    long rows_per_step = (long)t->cfg.micro_batch * t->cfg.grad_accum;
    cJSON_AddStringToObject(o, "format", "llmforge-trainer-state");
    cJSON_AddNumberToObject(o, "version", 1);
    cJSON_AddNumberToObject(o, "step", (double)t->step);
    cJSON_AddNumberToObject(o, "tokens_seen", (double)t->step * (double)rows_per_step * t->cfg.model.block_size);
    cJSON *cursor = cJSON_AddObjectToObject(o, "data_cursor");
    cJSON_AddStringToObject(cursor, "split", "train");
    cJSON_AddStringToObject(cursor, "sampling", t->cfg.sampling == LF_SAMPLING_SEQUENTIAL ? "sequential"
                                                : t->cfg.sampling == LF_SAMPLING_RECORDS  ? "records"
                                                                                          : "random");
    cJSON_AddNumberToObject(cursor, "next_row", (double)t->step * (double)rows_per_step);
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
    cJSON *mo = cJSON_AddObjectToObject(o, "model");
    cJSON_AddStringToObject(mo, "arch", "gpt2");
    cJSON_AddNumberToObject(mo, "n_layer", t->mcfg.n_layer);
    cJSON_AddNumberToObject(mo, "n_head", t->mcfg.n_head);
    cJSON_AddNumberToObject(mo, "n_embd", t->mcfg.n_embd);
    cJSON_AddNumberToObject(mo, "block_size", t->mcfg.block_size);
    cJSON_AddNumberToObject(mo, "vocab_size", t->mcfg.vocab_size);
    cJSON_AddNumberToObject(mo, "padded_vocab_size", t->mcfg.padded_vocab_size);
    cJSON_AddBoolToObject(mo, "bias", t->mcfg.bias != 0);
    cJSON_AddNumberToObject(mo, "dropout", t->mcfg.dropout);
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
    cJSON_AddItemToObject(o, "config", cfg);
    *out = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!*out) return lf_fail(LF_ERR_NOMEM, "out of memory printing trainer_state.json");
    return LF_OK;
}

static lf_status save_checkpoint(lf_trainer *t) {
    size_t n = lf_model_num_params(t->model);
    int count;
    const lf_param_info *table = lf_model_params_table(t->model, &count);
    lf_ckpt_tensors tt = {table, count, n};
    t->be->to_host(t->host_params, lf_model_params(t->model), n * sizeof(float));
    t->be->to_host(t->host_m, t->m, n * sizeof(float));
    t->be->to_host(t->host_v, t->v, n * sizeof(float));
    /* this checkpoint becomes the best when the evaluation of this very step
     * set a new best; rotation never removes the best */
    if (t->best_eval_step == t->step) snprintf(t->best_ckpt, sizeof t->best_ckpt, "step_%08ld", t->step);
    char *state = NULL;
    lf_status st = state_to_json(t, &state);
    if (st != LF_OK) return st;
    char *saved = NULL;
    double t0 = lf_time_now();
    st = lf_checkpoint_save(t->ckpt_root, t->step, &tt, t->host_params, t->host_m, t->host_v, state,
                            t->extra, t->n_extra, t->cfg.keep_last, t->best_ckpt[0] ? t->best_ckpt : NULL, &saved);
    free(state);
    if (st != LF_OK) return st;
    char esc[LF_PATH_MAX * 2], json[LF_PATH_MAX * 2 + 64];
    json_escape(esc, sizeof esc, saved);
    snprintf(json, sizeof json, "{\"path\":\"%s\",\"ms\":%.3f}", esc, (lf_time_now() - t0) * 1e3);
    emit_event(t, "checkpoint", NULL, json);
    lf_free(saved);
    return LF_OK;
}

/* Resuming takes the configuration from the command line (to allow a longer
 * train_iters, say). Settings that change the trajectory are compared with
 * the checkpoint's and every difference is logged as a warning. */
static void warn_config_drift(const lf_trainer *t, const cJSON *saved_cfg) {
    char *text = saved_cfg ? cJSON_PrintUnformatted(saved_cfg) : NULL;
    if (!text) return;
    lf_train_config old;
    lf_status st = lf_train_config_parse(&old, text, "checkpoint", 0, NULL);
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
    DRIFT("train_micro_batch_size_per_gpu", "%d", old.micro_batch, c->micro_batch);
    DRIFT("gradient_accumulation_steps", "%d", old.grad_accum, c->grad_accum);
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

static lf_status resume_from(lf_trainer *t, const char *path) {
    char *dir = NULL;
    lf_status st = lf_checkpoint_resolve(path, &dir);
    if (st != LF_OK) return st;
    size_t n = lf_model_num_params(t->model);
    int count;
    const lf_param_info *table = lf_model_params_table(t->model, &count);
    lf_ckpt_tensors tt = {table, count, n};
    char *state = NULL;
    st = lf_checkpoint_load(dir, &tt, t->host_params, t->host_m, t->host_v, &state);
    if (st != LF_OK) {
        lf_error_prefix("resuming from '%s'", dir);
        lf_free(dir);
        return st;
    }
    cJSON *o = cJSON_Parse(state);
    lf_free(state);
    cJSON *step = o ? cJSON_GetObjectItemCaseSensitive(o, "step") : NULL;
    if (!cJSON_IsNumber(step) || step->valuedouble < 0) {
        cJSON_Delete(o);
        st = lf_fail(LF_ERR_FORMAT, "checkpoint '%s': trainer_state.json has no valid \"step\"", dir);
        lf_free(dir);
        return st;
    }
    t->step = (long)step->valuedouble;
    cJSON *best = cJSON_GetObjectItemCaseSensitive(o, "best_val_loss");
    t->best_val = cJSON_IsNumber(best) ? best->valuedouble : INFINITY;
    warn_config_drift(t, cJSON_GetObjectItemCaseSensitive(o, "config"));
    cJSON *bc = cJSON_GetObjectItemCaseSensitive(o, "best_checkpoint");
    if (cJSON_IsString(bc) && strlen(bc->valuestring) < sizeof t->best_ckpt)
        snprintf(t->best_ckpt, sizeof t->best_ckpt, "%s", bc->valuestring);
    cJSON *bm = cJSON_GetObjectItemCaseSensitive(o, "best_metric");
    cJSON *bmn = cJSON_GetObjectItemCaseSensitive(bm, "name"), *bmv = cJSON_GetObjectItemCaseSensitive(bm, "value");
    if (cJSON_IsString(bmn) && !strcmp(bmn->valuestring, t->cfg.best_metric) && cJSON_IsNumber(bmv))
        t->best_score = bmv->valuedouble;
    else if (!strcmp(t->cfg.best_metric, "val_loss") && isfinite(t->best_val))
        t->best_score = t->best_val;
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
    t->be->to_device(lf_model_params(t->model), t->host_params, n * sizeof(float));
    t->be->to_device(t->m, t->host_m, n * sizeof(float));
    t->be->to_device(t->v, t->host_v, n * sizeof(float));
    lf_log(LF_LOG_INFO, "resumed from %s at step %ld", dir, t->step);
    char esc[LF_PATH_MAX * 2], json[LF_PATH_MAX * 2 + 32];
    json_escape(esc, sizeof esc, dir);
    snprintf(json, sizeof json, "{\"path\":\"%s\"}", esc);
    emit_event(t, "resume", NULL, json);
    lf_free(dir);
    return LF_OK;
}

/* The files each checkpoint carries besides tensors and state. A char
 * tokenizer's vocab.json is copied (the spec then names it relative to the
 * checkpoint); other tokenizers keep their spec. config.json is Hugging
 * Face's GPT2Config for this model (GPT-2 always has biases, so only then). */
static lf_status make_ckpt_extras(lf_trainer *t) {
    const char *spec = lf_dataset_tokenizer_spec(t->ds);
    snprintf(t->tok_spec, sizeof t->tok_spec, "%s", spec);
    if (strncmp(spec, "char:", 5) == 0) {
        size_t len = 0;
        lf_status st = lf_file_read_all(spec + 5, 64u << 20, &t->tok_data, &len);
        if (st != LF_OK) return st;
        t->extra[t->n_extra++] = (lf_ckpt_file){"vocab.json", t->tok_data, len};
        snprintf(t->tok_spec, sizeof t->tok_spec, "char:vocab.json");
    }
    if (t->mcfg.bias) {
        const lf_gpt2_config *c = &t->mcfg;
        int Vp = c->padded_vocab_size > 0 ? c->padded_vocab_size : c->vocab_size;
        char buf[1024];
        int n = snprintf(buf, sizeof buf,
                         "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
                         "  \"vocab_size\": %d,\n  \"n_positions\": %d,\n  \"n_ctx\": %d,\n  \"n_embd\": %d,\n"
                         "  \"n_layer\": %d,\n  \"n_head\": %d,\n  \"n_inner\": null,\n"
                         "  \"activation_function\": \"gelu_new\",\n  \"resid_pdrop\": %.9g,\n"
                         "  \"embd_pdrop\": %.9g,\n  \"attn_pdrop\": %.9g,\n  \"layer_norm_epsilon\": 1e-05,\n"
                         "  \"initializer_range\": 0.02,\n  \"tie_word_embeddings\": true,\n"
                         "  \"torch_dtype\": \"float32\"\n}\n",
                         Vp, c->block_size, c->block_size, c->n_embd, c->n_layer, c->n_head, (double)c->dropout,
                         (double)c->dropout, (double)c->dropout);
        t->hf_config = lf_alloc((size_t)n + 1);
        if (!t->hf_config) return LF_ERR_NOMEM;
        memcpy(t->hf_config, buf, (size_t)n + 1);
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
    if (t->cfg.prom_port > 0) {
        lf_prom_opts po = {.host = t->cfg.prom_host, .port = t->cfg.prom_port, .rank = 0, .job = NULL};
        st = lf_obs_prometheus_open(&sink, &po);
        if (st == LF_OK) st = lf_obs_add_sink(t->obs, sink);
        if (st != LF_OK) {
            lf_error_prefix("monitor.prometheus");
            if (t->cfg.monitor_required) return st;
            lf_log(LF_LOG_WARN, "%s; training goes on without it (monitor.required is false)", lf_last_error());
        } else {
            lf_log(LF_LOG_INFO, "serving metrics on http://%s:%d/metrics", t->cfg.prom_host, t->cfg.prom_port);
        }
    }
    /* MFU needs a peak: the configured one, or the FMA rate measured once when
     * a monitoring sink will show it */
    if (t->cfg.peak_gflops > 0)
        t->peak_flops = t->cfg.peak_gflops * 1e9;
    else if (t->cfg.tb_enabled || t->cfg.prom_port > 0)
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

lf_status lf_trainer_create(lf_trainer **out, const lf_train_config *cfg, const lf_trainer_opts *opts) {
    *out = NULL;
    lf_status st;
    lf_trainer *t = calloc(1, sizeof *t);
    if (!t) return lf_fail(LF_ERR_NOMEM, "out of memory creating the trainer");
    t->cfg = *cfg;
    if (opts) t->opts = *opts;
    t->best_val = INFINITY;
    t->last_val = t->last_train_eval = NAN;
    t->best_score = t->cfg.greater_is_better ? -INFINITY : INFINITY;
    t->last_score = NAN;
    t->best_eval_step = -1;
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

    if (!t->cfg.dataset[0]) return tfail(t, lf_fail(LF_ERR_CONFIG, "key 'data.dataset' is required (a directory written by `llmforge prepare`)"));
    st = lf_dataset_open(&t->ds, t->cfg.dataset);
    if (st != LF_OK) return tfail(t, st);
    int V = lf_dataset_vocab_size(t->ds);
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
    st = lf_mkdirs(t->cfg.out_dir);
    if (st != LF_OK) {
        lf_error_prefix("out_dir '%s' is not usable", t->cfg.out_dir);
        return tfail(t, st);
    }
    snprintf(t->ckpt_root, sizeof t->ckpt_root, "%s/ckpt", t->cfg.out_dir);
    if (!t->opts.resume) {
        /* a fresh run must not mix its checkpoints with an earlier run's */
        char *old = NULL;
        if (lf_checkpoint_resolve(t->ckpt_root, &old) == LF_OK) {
            st = lf_fail(LF_ERR_CONFIG, "out_dir '%s' already holds a run (checkpoint '%s'); continue it with --resume, "
                         "or choose another out_dir", t->cfg.out_dir, old);
            lf_free(old);
            return tfail(t, st);
        }
    }
    st = write_resolved_config(t);
    if (st != LF_OK) return tfail(t, st);

    t->be = lf_backend_get("cpu");
    st = lf_model_create(&t->model, &t->mcfg, t->be);
    if (st != LF_OK) return tfail(t, st);
    st = make_ckpt_extras(t);
    if (st != LF_OK) return tfail(t, st);
    st = lf_model_init_weights(t->model, t->cfg.seed);
    if (st != LF_OK) return tfail(t, st);
    size_t act_bytes = 0;
    st = lf_model_plan(t->model, B, T, &act_bytes);
    if (st != LF_OK) return tfail(t, st);

    size_t n = lf_model_num_params(t->model);
    /* weights, gradients, two moments, three host staging copies, batches, activations */
    t->planned_bytes = 7 * n * sizeof(float) + 2 * sizeof(int32_t) * (size_t)A * B * T + act_bytes;
    t->flops_per_token = lf_gpt2_flops_per_token(&t->mcfg, T);
    t->spike_win = calloc((size_t)t->cfg.alert_spike_window, sizeof(double));
    if (!t->spike_win) return tfail(t, lf_fail(LF_ERR_NOMEM, "out of memory"));
    t->m = t->be->alloc(n * sizeof(float));
    t->v = t->be->alloc(n * sizeof(float));
    t->host_params = lf_alloc(n * sizeof(float));
    t->host_m = lf_alloc(n * sizeof(float));
    t->host_v = lf_alloc(n * sizeof(float));
    t->inputs = lf_alloc(sizeof(int32_t) * (size_t)A * B * T);
    t->targets = lf_alloc(sizeof(int32_t) * (size_t)A * B * T);
    if (!t->m || !t->v || !t->host_params || !t->host_m || !t->host_v || !t->inputs || !t->targets)
        return tfail(t, lf_fail(LF_ERR_NOMEM, "out of memory allocating optimizer state for %zu parameters", n));
    t->be->zero(t->m, n);
    t->be->zero(t->v, n);

    if (t->opts.init_from && t->opts.init_from[0]) {
        int count;
        const lf_param_info *table = lf_model_params_table(t->model, &count);
        lf_ckpt_tensors tt = {table, count, n};
        st = lf_weights_load(t->opts.init_from, &tt, t->host_params);
        if (st != LF_OK) return tfail(t, st);
        t->be->to_device(lf_model_params(t->model), t->host_params, n * sizeof(float));
    }

    st = open_sinks(t);
    if (st != LF_OK) return tfail(t, st);
    st = load_tasks(t);
    if (st != LF_OK) return tfail(t, st);

    if (t->opts.resume) {
        st = resume_from(t, t->ckpt_root);
        if (st != LF_OK) return tfail(t, st);
    }
    return LF_OK;
}

void lf_trainer_free(lf_trainer *t) {
    if (!t) return;
    stop_watchdog(t);
    lf_obs_free(t->obs);
    lf_eval_tasks_free(t->tasks);
    lf_eval_results_free(t->task_res);
    lf_tokenizer_free(t->tok);
    free(t->spike_win);
    pthread_mutex_destroy(&t->obs_mu);
    pthread_mutex_destroy(&t->wd_mu);
    pthread_cond_destroy(&t->wd_cv);
    if (t->be) {
        if (t->m) t->be->free(t->m);
        if (t->v) t->be->free(t->v);
    }
    lf_free(t->tok_data);
    lf_free(t->hf_config);
    lf_free(t->host_params);
    lf_free(t->host_m);
    lf_free(t->host_v);
    lf_free(t->inputs);
    lf_free(t->targets);
    lf_model_free(t->model);
    lf_dataset_close(t->ds);
    free(t);
}

/* ---------------------------------------------------------------- evaluation */

/* Mean over eval_iters random batches of the batch-mean loss (nanoGPT's
 * estimate_loss). Rows are keyed by (step, batch) so evaluation never
 * disturbs the training streams. */
static lf_status estimate_loss(lf_trainer *t, lf_split split, double *out) {
    int B = t->cfg.micro_batch, T = t->cfg.model.block_size;
    double total = 0;
    lf_forward_opts fo = {0};
    for (int k = 0; k < t->cfg.eval_iters; k++) {
        uint64_t first = ((uint64_t)t->step * (uint64_t)t->cfg.eval_iters + (uint64_t)k) * (uint64_t)B;
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
        total += cnt > 0 ? sum / (double)cnt : 0.0;
    }
    *out = total / t->cfg.eval_iters;
    return LF_OK;
}

static lf_status run_eval(lf_trainer *t) {
    double t0 = lf_time_now();
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
        st = lf_eval_tasks_run(t->tasks, t->model, t->tok, NULL, t->task_res);
        /* the tasks plan their own batch shapes: give training its plan back,
         * so the replica split (and so every sum) is the one training uses */
        lf_status st2 = lf_model_plan(t->model, t->cfg.micro_batch, t->cfg.model.block_size, NULL);
        if (st != LF_OK) return st;
        if (st2 != LF_OK) return st2;
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
    static const char *files[] = {"model.safetensors", "config.json", "vocab.json", "trainer_state.json"};
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
    char esc[LF_PATH_MAX * 2], json[LF_PATH_MAX * 2 + 128];
    json_escape(esc, sizeof esc, dst);
    snprintf(json, sizeof json, "{\"path\":\"%s\",\"from\":\"%s\",\"%s\":%.9g}", esc, t->best_ckpt,
             t->cfg.best_metric, t->best_score);
    emit_event(t, "final_model", NULL, json);
    return LF_OK;
}

/* ---------------------------------------------------------------- one step */

typedef struct step_result {
    double loss;          /* as observed (a test hook may inflate it) */
    double norm;          /* global gradient norm before clipping */
    float lr;
    int skipped;          /* an alert skipped the update */
    double data_ms, forward_ms, backward_ms, optimizer_ms;
} step_result;

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

static lf_status train_step(lf_trainer *t, step_result *o) {
    int B = t->cfg.micro_batch, T = t->cfg.model.block_size, A = t->cfg.grad_accum;
    size_t BT = (size_t)B * T;
    long step1 = t->step + 1;
    uint64_t first = (uint64_t)t->step * (uint64_t)A * (uint64_t)B;
    long count = 0;
    double t0 = lf_time_now();
    for (int a = 0; a < A; a++) {
        lf_status st = lf_dataset_get_batch(t->ds, LF_SPLIT_TRAIN, (lf_sampling)t->cfg.sampling, t->cfg.seed,
                                            LF_RNG_DATA, first + (uint64_t)a * B, B, T, t->inputs + a * BT,
                                            t->targets + a * BT);
        if (st != LF_OK) return st;
        for (size_t i = 0; i < BT; i++) count += t->targets[a * BT + i] >= 0;
    }
    if (count == 0)
        return lf_fail(LF_ERR_NUMERIC, "step %ld: every target of the batch is masked out; nothing to learn from", step1);
    double t1 = lf_time_now();
    o->data_ms = (t1 - t0) * 1e3;
    lf_model_zero_grad(t->model);
    double loss_sum = 0;
    for (int a = 0; a < A; a++) {
        lf_forward_opts fo = {.dloss = 1.0f / (float)count, .train = 1, .seed = t->cfg.seed,
                              .key = lf_rng_mix((uint64_t)t->step, (uint64_t)a)};
        double s, ta = lf_time_now();
        long c;
        lf_status st = lf_model_forward(t->model, t->inputs + a * BT, t->targets + a * BT, B, T, &fo, &s, &c);
        if (st != LF_OK) return st;
        double tb = lf_time_now();
        loss_sum += s;
        st = lf_model_backward(t->model);
        if (st != LF_OK) return st;
        o->forward_ms += (tb - ta) * 1e3;
        o->backward_ms += (lf_time_now() - tb) * 1e3;
    }
    double t2 = lf_time_now();
    if (t->opts.inject_nan_step == step1) { /* test hook: a poisoned gradient */
        float nan = NAN;
        t->be->to_device(lf_model_grads(t->model), &nan, sizeof nan);
    }
    o->loss = loss_sum / (double)count;
    if (t->opts.inject_spike_step == step1) o->loss *= 100.0; /* test hook */
    o->norm = lf_grad_norm(t->model, t->be);
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
        raise_alert(t, "nan", "skip_step", msg);
        o->skipped = 1;
    } else if (t->cfg.alert_spike_action != LF_ALERT_OFF) {
        double z = spike_z(t, o->loss);
        if (z > t->cfg.alert_spike_zscore) {
            char msg[256];
            int skip = t->cfg.alert_spike_action == LF_ALERT_SKIP;
            snprintf(msg, sizeof msg, "step %ld: loss %.6g is %.1f standard deviations above the last %d steps", step1,
                     o->loss, z, t->spike_n);
            raise_alert(t, "loss_spike", skip ? "skip_step" : "log", msg);
            o->skipped = skip;
        }
        if (!o->skipped) spike_push(t, o->loss);
    }
    if (o->skipped) {
        t->skipped++;
        emit_event(t, "skipped_step", NULL, "{\"reason\":\"alert\"}");
    } else {
        t->opt_t++;
        lf_status st = lf_adamw_apply(t->model, t->be, t->m, t->v, t->opt_t, o->lr, &t->cfg, o->norm);
        if (st != LF_OK) return st;
    }
    if (t->opts.inject_stall_step == step1 && t->opts.inject_stall_seconds > 0) { /* test hook */
        struct timespec ts = {(time_t)t->opts.inject_stall_seconds,
                              (long)((t->opts.inject_stall_seconds - (double)(time_t)t->opts.inject_stall_seconds) * 1e9)};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
    o->optimizer_ms = (lf_time_now() - t2) * 1e3;
    return LF_OK;
}

lf_status lf_trainer_run(lf_trainer *t) {
    lf_status st;
    int B = t->cfg.micro_batch, T = t->cfg.model.block_size, A = t->cfg.grad_accum;
    double tokens_per_step = (double)A * B * T;
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
    mark_progress(t);
    if (t->cfg.alert_stall_seconds > 0 && !t->wd_running) {
        t->wd_stop = 0;
        if (pthread_create(&t->wd, NULL, watchdog_main, t) == 0)
            t->wd_running = 1;
        else
            lf_log(LF_LOG_WARN, "could not start the stall watchdog thread; stall alerts are off");
    }
    st = LF_OK;
    while (t->step < t->cfg.train_iters) {
        double t0 = lf_time_now();
        step_result sr = {0};
        st = train_step(t, &sr);
        if (st != LF_OK) break;
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
        sc[n++] = (lf_obs_scalar){"train/samples_per_sec", (double)A * B / dt};
        sc[n++] = (lf_obs_scalar){"train/tokens", tokens_per_step};
        if (t->peak_flops > 0) sc[n++] = (lf_obs_scalar){"train/mfu", t->flops_per_token * tps / t->peak_flops};
        if (sr.skipped) sc[n++] = (lf_obs_scalar){"train/skipped", 1};
        sc[n++] = (lf_obs_scalar){"memory/rss_bytes", rss_bytes()};
        sc[n++] = (lf_obs_scalar){"memory/planned_bytes", (double)t->planned_bytes};
        if (t->cfg.wall_clock_breakdown) {
            sc[n++] = (lf_obs_scalar){"time/data_ms", sr.data_ms};
            sc[n++] = (lf_obs_scalar){"time/forward_ms", sr.forward_ms};
            sc[n++] = (lf_obs_scalar){"time/backward_ms", sr.backward_ms};
            sc[n++] = (lf_obs_scalar){"time/optimizer_ms", sr.optimizer_ms};
        }
        lf_obs_record r = {.kind = LF_OBS_TRAIN, .step = t->step, .scalars = sc, .n_scalars = n};
        obs_emit(t, &r);
        int last = t->step == t->cfg.train_iters;
        if ((t->cfg.eval_interval > 0 && t->step % t->cfg.eval_interval == 0) || last) {
            st = run_eval(t);
            if (st != LF_OK) break;
            mark_progress(t);
        }
        if ((t->cfg.ckpt_interval > 0 && t->step % t->cfg.ckpt_interval == 0) || last) {
            st = save_checkpoint(t);
            if (st != LF_OK) break;
            mark_progress(t);
        }
    }
    stop_watchdog(t);
    if (st == LF_OK && t->cfg.load_best_model_at_end) st = export_best_model(t);
    if (st != LF_OK) {
        tfail(t, st);
        char esc[1100], json[1200];
        json_escape(esc, sizeof esc, t->errmsg);
        snprintf(json, sizeof json, "{\"status\":\"error\",\"message\":\"%s\"}", esc);
        emit_event(t, "end", NULL, json);
    } else {
        emit_event(t, "end", NULL, "{\"status\":\"ok\"}");
    }
    pthread_mutex_lock(&t->obs_mu);
    lf_obs_flush(t->obs);
    pthread_mutex_unlock(&t->obs_mu);
    return st;
}

/* ---------------------------------------------------------------- reading a checkpoint's model */

lf_status lf_checkpoint_read_model(const char *dir, lf_gpt2_config *cfg, char *tokenizer, size_t cap) {
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
    static const char *keys[] = {"n_layer", "n_head", "n_embd", "block_size", "vocab_size", "padded_vocab_size"};
    int vals[6];
    for (int i = 0; i < 6; i++) {
        cJSON *it = cJSON_GetObjectItemCaseSensitive(mo, keys[i]);
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble > 1e9) {
            cJSON_Delete(o);
            return lf_fail(LF_ERR_FORMAT, "'%s': model.%s is missing or not a valid number", path, keys[i]);
        }
        vals[i] = (int)it->valuedouble;
    }
    memset(cfg, 0, sizeof *cfg);
    cfg->n_layer = vals[0];
    cfg->n_head = vals[1];
    cfg->n_embd = vals[2];
    cfg->block_size = vals[3];
    cfg->vocab_size = vals[4];
    cfg->padded_vocab_size = vals[5];
    cfg->bias = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(mo, "bias"));
    cJSON *dr = cJSON_GetObjectItemCaseSensitive(mo, "dropout");
    cfg->dropout = cJSON_IsNumber(dr) ? (float)dr->valuedouble : 0.0f;
    cJSON *tk = cJSON_GetObjectItemCaseSensitive(o, "tokenizer");
    if (tokenizer && cap) {
        tokenizer[0] = 0;
        if (cJSON_IsString(tk)) snprintf(tokenizer, cap, "%s", tk->valuestring);
    }
    cJSON_Delete(o);
    st = lf_gpt2_config_validate(cfg);
    if (st != LF_OK) lf_error_prefix("'%s'", path);
    return st;
}
