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
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cjson/cJSON.h>
#include "backend/backend_impl.h"
#include "llmforge/checkpoint.h"
#include "llmforge/data.h"
#include "llmforge/train.h"

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
    char best_ckpt[64];        /* step directory holding the best val loss so far ("" = none) */
    FILE *log;
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

static void emit(lf_trainer *t, const lf_train_event *ev) {
    if (t->opts.on_event) t->opts.on_event(ev, t->opts.user);
}

static void log_line(lf_trainer *t, const char *line) {
    if (!t->log) return;
    fputs(line, t->log);
    fputc('\n', t->log);
    fflush(t->log);
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
    cJSON_AddStringToObject(cursor, "sampling", t->cfg.sampling == LF_SAMPLING_SEQUENTIAL ? "sequential" : "random");
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
    char *state = NULL;
    lf_status st = state_to_json(t, &state);
    if (st != LF_OK) return st;
    /* this checkpoint becomes the best when the evaluation of this very step
     * is the best so far; rotation never removes the best */
    if (t->last_eval_step == t->step && isfinite(t->last_val) && t->last_val <= t->best_val)
        snprintf(t->best_ckpt, sizeof t->best_ckpt, "step_%08ld", t->step);
    char *saved = NULL;
    st = lf_checkpoint_save(t->ckpt_root, t->step, &tt, t->host_params, t->host_m, t->host_v, state,
                            t->extra, t->n_extra, t->cfg.keep_last, t->best_ckpt[0] ? t->best_ckpt : NULL, &saved);
    free(state);
    if (st != LF_OK) return st;
    char line[LF_PATH_MAX + 128];
    snprintf(line, sizeof line, "{\"type\":\"checkpoint\",\"step\":%ld,\"path\":\"%s\"}", t->step, saved);
    log_line(t, line);
    lf_train_event ev = {.type = LF_EV_CKPT, .step = t->step, .total = t->cfg.train_iters, .text = saved};
    emit(t, &ev);
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
    cJSON_Delete(o);
    t->be->to_device(lf_model_params(t->model), t->host_params, n * sizeof(float));
    t->be->to_device(t->m, t->host_m, n * sizeof(float));
    t->be->to_device(t->v, t->host_v, n * sizeof(float));
    lf_log(LF_LOG_INFO, "resumed from %s at step %ld", dir, t->step);
    char line[LF_PATH_MAX + 128];
    snprintf(line, sizeof line, "{\"type\":\"resume\",\"step\":%ld,\"path\":\"%s\"}", t->step, dir);
    log_line(t, line);
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

lf_status lf_trainer_create(lf_trainer **out, const lf_train_config *cfg, const lf_trainer_opts *opts) {
    *out = NULL;
    lf_status st;
    lf_trainer *t = calloc(1, sizeof *t);
    if (!t) return lf_fail(LF_ERR_NOMEM, "out of memory creating the trainer");
    t->cfg = *cfg;
    if (opts) t->opts = *opts;
    t->best_val = INFINITY;
    t->last_val = t->last_train_eval = NAN;
    *out = t; /* so the caller can read errmsg even on failure */

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
    st = lf_model_plan(t->model, B, T, NULL);
    if (st != LF_OK) return tfail(t, st);

    size_t n = lf_model_num_params(t->model);
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

    char logpath[LF_PATH_MAX + 32];
    snprintf(logpath, sizeof logpath, "%s/log.jsonl", t->cfg.out_dir);
    t->log = fopen(logpath, t->opts.resume ? "a" : "w");
    if (!t->log) return tfail(t, lf_fail(LF_ERR_IO, "cannot open '%s' for writing: %s", logpath, strerror(errno)));

    if (t->opts.resume) {
        st = resume_from(t, t->ckpt_root);
        if (st != LF_OK) return tfail(t, st);
    }
    return LF_OK;
}

void lf_trainer_free(lf_trainer *t) {
    if (!t) return;
    if (t->log) fclose(t->log);
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
        lf_status st = lf_dataset_get_batch(t->ds, split, LF_SAMPLING_RANDOM, t->cfg.seed,
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
    char line[256];
    if (isfinite(vl))
        snprintf(line, sizeof line, "{\"type\":\"eval\",\"step\":%ld,\"train_loss\":%.9g,\"val_loss\":%.9g}", t->step, tl, vl);
    else
        snprintf(line, sizeof line, "{\"type\":\"eval\",\"step\":%ld,\"train_loss\":%.9g,\"val_loss\":null}", t->step, tl);
    log_line(t, line);
    lf_train_event ev = {.type = LF_EV_EVAL, .step = t->step, .total = t->cfg.train_iters, .train_loss = tl, .val_loss = vl};
    emit(t, &ev);
    return LF_OK;
}

/* ---------------------------------------------------------------- one step */

static lf_status train_step(lf_trainer *t, double *loss_out, double *norm_out, float *lr_out) {
    int B = t->cfg.micro_batch, T = t->cfg.model.block_size, A = t->cfg.grad_accum;
    size_t BT = (size_t)B * T;
    uint64_t first = (uint64_t)t->step * (uint64_t)A * (uint64_t)B;
    long count = 0;
    for (int a = 0; a < A; a++) {
        lf_status st = lf_dataset_get_batch(t->ds, LF_SPLIT_TRAIN, (lf_sampling)t->cfg.sampling, t->cfg.seed,
                                            LF_RNG_DATA, first + (uint64_t)a * B, B, T, t->inputs + a * BT,
                                            t->targets + a * BT);
        if (st != LF_OK) return st;
        for (size_t i = 0; i < BT; i++) count += t->targets[a * BT + i] >= 0;
    }
    if (count == 0)
        return lf_fail(LF_ERR_NUMERIC, "step %ld: every target of the batch is masked out; nothing to learn from", t->step + 1);
    lf_model_zero_grad(t->model);
    double loss_sum = 0;
    for (int a = 0; a < A; a++) {
        lf_forward_opts fo = {.dloss = 1.0f / (float)count, .train = 1, .seed = t->cfg.seed,
                              .key = lf_rng_mix((uint64_t)t->step, (uint64_t)a)};
        double s;
        long c;
        lf_status st = lf_model_forward(t->model, t->inputs + a * BT, t->targets + a * BT, B, T, &fo, &s, &c);
        if (st != LF_OK) return st;
        loss_sum += s;
        st = lf_model_backward(t->model);
        if (st != LF_OK) return st;
    }
    double loss = loss_sum / (double)count;
    float lr = lf_lr_at(&t->cfg, t->step);
    double norm = 0;
    if (!isfinite(loss))
        return lf_fail(LF_ERR_NUMERIC, "step %ld: loss is %g; lower optimizer.params.lr or check the data", t->step + 1, loss);
    lf_status st = lf_adamw_step(t->model, t->be, t->m, t->v, t->step + 1, lr, &t->cfg, &norm);
    if (st != LF_OK) return st;
    *loss_out = loss;
    *norm_out = norm;
    *lr_out = lr;
    return LF_OK;
}

lf_status lf_trainer_run(lf_trainer *t) {
    lf_status st;
    int B = t->cfg.micro_batch, T = t->cfg.model.block_size, A = t->cfg.grad_accum;
    double tokens_per_step = (double)A * B * T;
    if (t->step == 0) {
        char *cfgjson = lf_train_config_to_json(&t->cfg);
        if (cfgjson) {
            cJSON *c = cJSON_Parse(cfgjson);
            char *flat = c ? cJSON_PrintUnformatted(c) : NULL;
            if (flat) {
                char *line = malloc(strlen(flat) + 64);
                if (line) {
                    sprintf(line, "{\"type\":\"start\",\"num_params\":%zu,\"config\":%s}", lf_model_num_params(t->model), flat);
                    log_line(t, line);
                    free(line);
                }
            }
            free(flat);
            cJSON_Delete(c);
            lf_free(cfgjson);
        }
    }
    while (t->step < t->cfg.train_iters) {
        double t0 = lf_time_now();
        double loss = 0, norm = 0;
        float lr = 0;
        st = train_step(t, &loss, &norm, &lr);
        if (st != LF_OK) return tfail(t, st);
        double dt = lf_time_now() - t0;
        t->step++;
        double tps = tokens_per_step / dt;
        char line[320];
        snprintf(line, sizeof line,
                 "{\"type\":\"train\",\"step\":%ld,\"loss\":%.9g,\"lr\":%.9g,\"grad_norm\":%.9g,\"tokens_per_sec\":%.6g,\"ms\":%.4f}",
                 t->step, loss, (double)lr, norm, tps, dt * 1e3);
        log_line(t, line);
        lf_train_event ev = {.type = LF_EV_TRAIN, .step = t->step, .total = t->cfg.train_iters, .loss = loss,
                             .lr = lr, .grad_norm = norm, .tokens_per_sec = tps, .ms = dt * 1e3};
        emit(t, &ev);
        int last = t->step == t->cfg.train_iters;
        if ((t->cfg.eval_interval > 0 && t->step % t->cfg.eval_interval == 0) || last) {
            st = run_eval(t);
            if (st != LF_OK) return tfail(t, st);
        }
        if ((t->cfg.ckpt_interval > 0 && t->step % t->cfg.ckpt_interval == 0) || last) {
            st = save_checkpoint(t);
            if (st != LF_OK) return tfail(t, st);
        }
    }
    return LF_OK;
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
