/*
 * Validation of a training configuration once every key is read (config.c
 * calls these in its order of resolution): each key against its row's range,
 * then the rules across keys: DeepSpeed's batch identity (train_batch_size =
 * micro x accumulation x world size; any two infer the third), the model
 * architecture's rules, alert actions, checkpoint.async and rollback,
 * precision, DPO, the backend and LoRA.
 *
 * Invariant: messages name the key and where its value came from
 * (lf__cfg_note_of: "in 'x.json'", "on the command line", "by default").
 */
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "llmforge/backend.h"
#include "llmforge/comm.h"
#include "llmforge/data.h"
#include "llmforge/train.h"
#include "config_impl.h"
#include "train_impl.h"

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
        if (c->given[lf__cfg_key_index(given[i].key)]) c->cfg.model_given |= given[i].bit;
    lf_status st = lf_arch_parse(c->cfg.arch, &m->arch);
    if (st != LF_OK) return st;
    const char *key = NULL, *why = lf_model_config_given(m, c->cfg.model_given, &key);
    if (why) return lf_fail(LF_ERR_CONFIG, "key '%s' %s: %s", key, lf__cfg_note_of(c, lf__cfg_key_index(key)), why);
    lf_model_config v = *m;
    if (v.vocab_size == 0) v.vocab_size = 1;
    return lf_model_config_validate(&v);
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
                           lf__cfg_note_of(c, lf__cfg_key_index(rules[i].key)),
                           choices_of(&lf__cfg_keys[lf__cfg_key_index(rules[i].key)])[v], rules[i].list);
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
lf_status lf__cfg_derive_batch(parse_ctx *c) {
    static const char *const derived = "(derived from train_batch_size)";
    lf_train_config *cfg = &c->cfg;
    int iT = lf__cfg_key_index("train_batch_size"), iM = lf__cfg_key_index("train_micro_batch_size_per_gpu"),
        iA = lf__cfg_key_index("gradient_accumulation_steps");
    long long T = cfg->train_batch_size, M = cfg->micro_batch, A = cfg->grad_accum, W = c->world;
    int hasT = c->given[iT] && T > 0, hasM = c->given[iM], hasA = c->given[iA];
    const char *wT = lf__cfg_note_of(c, iT);
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
        const key_def *km = &lf__cfg_keys[iM];
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
    const key_def *k = &lf__cfg_keys[i];
    const char *where = lf__cfg_note_of(c, i);
    switch (k->type) {
    case KT_INT:
    case KT_LONG: {
        long long v = get_integer(cfg, k), lo, hi;
        lf__cfg_int_bounds(k, &lo, &hi);
        if (v < lo || v > hi) {
            snprintf(val, sizeof val, "%lld", v);
            return lf__cfg_range_error_text(k, where, val);
        }
        break;
    }
    case KT_FLOAT: {
        float v = get_float(cfg, k->off);
        if (!lf__cfg_float_in_range(k, v)) {
            lf__cfg_fmt_float(val, sizeof val, v);
            return lf__cfg_range_error_text(k, where, val);
        }
        break;
    }
    case KT_PAIR:
        for (int j = 0; j < 2; j++) {
            float v = get_float(cfg, j ? k->off2 : k->off);
            if (!lf__cfg_float_in_range(k, v)) {
                char range[80];
                lf__cfg_fmt_float(val, sizeof val, v);
                lf__cfg_fmt_range(range, sizeof range, k);
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
lf_status lf__cfg_check_ranges(parse_ctx *c) {
    lf_status st = LF_OK;
    for (int i = 0; st == LF_OK && i < lf__cfg_nkeys; i++) st = lf__cfg_keep_error(c, check_range(c, i));
    return st;
}

/* backend: a name other than auto must be one this program has ("cuda"
 * only where the CUDA backend was built and registered). */
static lf_status check_backend(const parse_ctx *c) {
    const char *name = c->cfg.backend, *sel = NULL;
    if (lf__cfg_ascii_ieq(name, "auto") || lf_backend_select(name, &sel) == LF_OK) return LF_OK;
    return lf_fail(LF_ERR_CONFIG, "key 'backend' %s: \"%s\": %s", lf__cfg_note_of(c, lf__cfg_key_index("backend")),
                   name, lf_last_error());
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
                       lf__cfg_note_of(c, lf__cfg_key_index(what)));
    return LF_OK;
}

/* The rules across keys, once every key is in range: the batch identity,
 * the model, alerts, checkpoints, precision, DPO, backend and LoRA; the
 * first problem is returned. */
lf_status lf__cfg_check_keys(parse_ctx *c) {
    lf_status st = lf__cfg_derive_batch(c);
    if (st == LF_OK && c->cfg.model.n_embd % c->cfg.model.n_head) {
        int ie = lf__cfg_key_index("model.n_embd"), ih = lf__cfg_key_index("model.n_head");
        st = lf_fail(LF_ERR_CONFIG, "key 'model.n_embd' %s: %d is not divisible by model.n_head %d (set %s)",
                     lf__cfg_note_of(c, ie), c->cfg.model.n_embd, c->cfg.model.n_head, lf__cfg_note_of(c, ih));
    }
    if (st == LF_OK) st = resolve_model(c);
    if (st == LF_OK) st = check_alert_actions(c);
    if (st == LF_OK) st = lf__train_config_check_ckpt(&c->cfg);
    if (st == LF_OK && c->cfg.fp16 && c->cfg.bf16)
        st = lf_fail(LF_ERR_CONFIG, "keys 'fp16.enabled' (%s) and 'bf16.enabled' (%s) are both true; choose one",
                     lf__cfg_note_of(c, lf__cfg_key_index("fp16.enabled")),
                     lf__cfg_note_of(c, lf__cfg_key_index("bf16.enabled")));
    if (st == LF_OK && c->cfg.objective == LF_OBJECTIVE_DPO && c->cfg.micro_batch % 2)
        st = lf_fail(LF_ERR_CONFIG,
                     "key 'train_micro_batch_size_per_gpu' %s: %d is odd, but train.objective dpo (%s) runs a pair "
                     "of rows (chosen, rejected) per example; give an even number of rows",
                     lf__cfg_note_of(c, lf__cfg_key_index("train_micro_batch_size_per_gpu")), c->cfg.micro_batch,
                     lf__cfg_note_of(c, lf__cfg_key_index("train.objective")));
    if (st == LF_OK && c->cfg.objective == LF_OBJECTIVE_DPO && c->cfg.packing)
        st = lf_fail(LF_ERR_CONFIG,
                     "key 'data.packing' %s: %s does not apply to train.objective dpo (%s), whose rows are whole "
                     "(chosen, rejected) pairs padded to model.block_size; leave data.packing out",
                     lf__cfg_note_of(c, lf__cfg_key_index("data.packing")),
                     choices_of(&lf__cfg_keys[lf__cfg_key_index("data.packing")])[c->cfg.packing],
                     lf__cfg_note_of(c, lf__cfg_key_index("train.objective")));
    if (st == LF_OK && c->cfg.objective == LF_OBJECTIVE_DPO && c->cfg.sampling != LF_SAMPLING_RANDOM)
        st = lf_fail(LF_ERR_CONFIG,
                     "key 'data.sampling' %s: %s does not apply to train.objective dpo (%s), which draws whole "
                     "pairs in a seeded epoch permutation; leave data.sampling out",
                     lf__cfg_note_of(c, lf__cfg_key_index("data.sampling")),
                     choices_of(&lf__cfg_keys[lf__cfg_key_index("data.sampling")])[c->cfg.sampling],
                     lf__cfg_note_of(c, lf__cfg_key_index("train.objective")));
    if (st == LF_OK) st = check_backend(c);
    if (st == LF_OK) st = check_lora(c);
    return st;
}
