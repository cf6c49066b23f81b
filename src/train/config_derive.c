/*
 * Keys derived from others once the file and the overrides are in (config.c
 * calls these in its order of resolution): scheduler.decay_iters and
 * scheduler.min_lr, DeepSpeed's schedulers (their "auto" by HF Trainer's
 * rules, the parameters DeepSpeed fills from others, the ones it requires),
 * and the run header's notes (a DeepSpeed file's defaults, what each "auto"
 * became).
 *
 * Reference: DeepSpeed's lr_schedules.py (parameters and defaults); HF
 * transformers' integrations/deepspeed.py (trainer_config_process /
 * trainer_config_finalize: what "auto" becomes).
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

/* scheduler.decay_iters and scheduler.min_lr when not given. */
void lf__cfg_derive_schedule(parse_ctx *c) {
    if (!c->given[lf__cfg_key_index("scheduler.decay_iters")]) c->cfg.decay_iters = c->cfg.train_iters;
    if (!c->given[lf__cfg_key_index("scheduler.min_lr")]) c->cfg.min_lr = (float)((double)c->cfg.lr / 10.0);
}

/* DeepSpeed's schedulers: "auto" by HF Trainer's rules, the parameters
 * DeepSpeed fills from others (WarmupLR's warmup_max_lr is the optimizer's
 * lr; the second half of OneCycle copies the first), the ones it requires,
 * and parameters that are not the chosen scheduler's. Problems are kept. */
lf_status lf__cfg_derive_deepspeed(parse_ctx *c) {
    lf_train_config *cfg = &c->cfg;
    lf_ds_sched *d = &cfg->ds;
    const int t = cfg->sched_type, ds = t >= LF_SCHED_WARMUP_LR;
    const char *name = lf__ds_sched_name(t);
    lf_status st = LF_OK;
#define GIVEN(p) (c->given[lf__cfg_key_index(p)])
#define AUTO(p) (c->is_auto[lf__cfg_key_index(p)] && !GIVEN(p))
    if (AUTO("scheduler.params.warmup_min_lr")) d->warmup_min_lr = 0.0f;
    if (AUTO("scheduler.params.warmup_max_lr")) d->warmup_max_lr = cfg->lr;
    if (AUTO("scheduler.params.warmup_num_steps")) {
        long w = GIVEN("scheduler.warmup_iters") ? cfg->warmup_iters : 0;
        d->warmup_num_steps = w > 1 ? w : 1;
    }
    if (AUTO("scheduler.params.total_num_steps")) d->total_num_steps = cfg->train_iters;
    if (t == LF_SCHED_WARMUP_LR && !GIVEN("scheduler.params.warmup_max_lr") &&
        !c->is_auto[lf__cfg_key_index("scheduler.params.warmup_max_lr")])
        d->warmup_max_lr = cfg->lr;
    if (!GIVEN("scheduler.params.cycle_second_step_size")) d->cycle_second_step_size = d->cycle_first_step_size;
    if (!GIVEN("scheduler.params.cycle_second_stair_count")) d->cycle_second_stair_count = d->cycle_first_stair_count;
    static const char *const required[][2] = {{"scheduler.params.total_num_steps", "WarmupDecayLR WarmupCosineLR"},
                                              {"scheduler.params.cycle_min_lr", "OneCycle"},
                                              {"scheduler.params.cycle_max_lr", "OneCycle"}};
    for (size_t r = 0; ds && st == LF_OK && r < sizeof required / sizeof required[0]; r++) {
        int i = lf__cfg_key_index(required[r][0]);
        if (strstr(required[r][1], name) && !c->given[i] && !c->is_auto[i])
            st = lf__cfg_keep_error(c, lf_fail(LF_ERR_CONFIG,
                                               "key '%s' is required by scheduler.type %s (DeepSpeed has no default)",
                                               required[r][0], name));
    }
    for (int i = 0; st == LF_OK && i < lf__cfg_nkeys; i++) {
        const char *path = lf__cfg_keys[i].path;
        if (!(c->given[i] || c->is_auto[i])) continue;
        const char *where = c->where[i] ? c->where[i] : (c->file_where[0] ? c->file_where : lf__cfg_cli_where);
        if (!strncmp(path, "scheduler.params.", 17) && !ds)
            st = lf__cfg_keep_error(
                c, lf_fail(LF_ERR_CONFIG,
                           "key '%s' %s: scheduler.params are for DeepSpeed's schedulers; scheduler.type %s "
                           "takes scheduler.warmup_iters, decay_iters and min_lr",
                           path, where, name));
        else if (!strncmp(path, "scheduler.params.", 17) && !lf__ds_sched_param_of(path + 17, t))
            st = lf__cfg_keep_error(c, lf_fail(LF_ERR_CONFIG, "key '%s' %s: not a parameter of DeepSpeed's %s", path,
                                               where, name));
        else if (ds && (!strcmp(path, "scheduler.decay_iters") || !strcmp(path, "scheduler.min_lr") ||
                        (!strcmp(path, "scheduler.warmup_iters") &&
                         !c->is_auto[lf__cfg_key_index("scheduler.params.warmup_num_steps")])))
            st = lf__cfg_keep_error(c, lf_fail(LF_ERR_CONFIG,
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
void lf__cfg_make_notes(parse_ctx *c) {
    const lf_train_config *cfg = &c->cfg;
    if (c->ds_file) {
        static const char *const keys[][2] = {{"optimizer.params.betas", "betas [0.9, 0.999]"},
                                              {"optimizer.params.eps", "eps 1e-8"},
                                              {"optimizer.params.weight_decay", "weight_decay 0.01"},
                                              {"scheduler.type", "no scheduler: a constant lr"},
                                              {"gradient_clipping", "gradient_clipping 0 (off)"}};
        char list[400] = "";
        for (size_t j = 0; j < sizeof keys / sizeof keys[0]; j++) {
            int i = lf__cfg_key_index(keys[j][0]);
            if (c->given[i] || c->is_auto[i]) continue;
            size_t at = strlen(list);
            snprintf(list + at, sizeof list - at, "%s%s", at ? ", " : "", keys[j][1]);
        }
        if (list[0])
            lf__cfg_add_line(c->notes, sizeof c->notes, "DeepSpeed file: DeepSpeed's and torch's defaults: %s", list);
    }
    for (int i = 0; i < lf__cfg_nkeys; i++) {
        if (!c->is_auto[i]) continue;
        const key_def *k = &lf__cfg_keys[i];
        const char *rule = lf__ds_auto_rule(k->path);
        cJSON *v = lf__cfg_value_json(cfg, k);
        char *txt = v ? cJSON_PrintUnformatted(v) : NULL, origin[300];
        if (c->given[i]) snprintf(origin, sizeof origin, "%s", c->where[i]);
        else if (c->where[i]) snprintf(origin, sizeof origin, "%s", c->where[i]);
        else if (!strncmp(k->path, "scheduler.params.", 17)) snprintf(origin, sizeof origin, "from %s", rule);
        else if (!strcmp(k->path, "train_batch_size")) snprintf(origin, sizeof origin, "%s", rule);
        else
            snprintf(origin, sizeof origin, "llmforge's default%s; HF Trainer's %s",
                     c->ds_file ? " for a DeepSpeed file" : "", rule);
        lf__cfg_add_line(c->notes, sizeof c->notes, "auto: %s -> %s (%s)", k->path, txt ? txt : "?", origin);
        cJSON_free(txt);
        cJSON_Delete(v);
    }
    for (int j = 0; j < c->n_auto_ignored; j++) {
        const char *p = c->auto_ignored[j];
        long long v = lf__ds_auto_from_hidden(p, cfg->model.n_embd);
        const lf__ds_key *d = lf__ds_key_find(p);
        lf__cfg_add_line(c->notes, sizeof c->notes, "auto: %s -> %lld (%s; ignored: %s)", p, v, lf__ds_auto_rule(p),
                         d ? d->why : "");
    }
}
