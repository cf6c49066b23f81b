/*
 * The trainer's side of the model registry (include/llmforge/registry.h)
 * and of eval.suite: what a run records, gathered from the configuration
 * and the trainer's state at four points (run start, every saved
 * checkpoint, run end, free), so that the trainer (trainer_*.c) only calls these hooks.
 *
 * Invariants:
 *  - Rank 0 alone opens the registry and writes; every rank runs eval.suite
 *    (its forwards are collectives under ZeRO-3, as eval.tasks' are), in
 *    the same order, at the same step.
 *  - Nothing here fails a training run because of the registry: a file that
 *    cannot be opened, a damaged database, a full disk or a lock held past
 *    the busy timeout is one warning (lf_log, naming the file and what
 *    failed), after which this run records nothing more. The only error
 *    returned is a bad eval.suite, found before the first step.
 *  - The metrics recorded with a checkpoint are the evaluation of that very
 *    step (train_loss, val_loss, eval.tasks' <task>/<metric>), source
 *    "train", and eval.suite's, source "suite"; a checkpoint saved at a step
 *    that was not evaluated carries only the suite's.
 *  - A run stopped on request (a signal, lf_trainer_request_stop: its
 *    status LF_ERR_PREEMPTED, after its checkpoint) ends "preempted" with
 *    the trainer's message (the step and the signal), not "failed"; one
 *    killed outright stays "running" until a resume marks it (registry.c).
 *  - --init-from is initialised-from, or fine-tuned-from when the dataset
 *    holds prompt/response pairs (its dataset.json says "mode": "sft"). A
 *    resumed run records resumed-from only (its --init-from weights were
 *    replaced by the checkpoint's).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "llmforge/data.h"
#include "llmforge/eval.h"
#include "llmforge/registry.h"
#include "llmforge/train.h"
#include "train_impl.h"

#define TREG_METRICS_MAX 256

struct lf__treg {
    int rank;
    lf_registry *reg;       /* rank 0 with registry.enabled, while usable */
    int64_t run_id;         /* 0: not recorded */
    char file[LF_PATH_MAX]; /* the registry file, for messages */
    char ckpt_root[LF_PATH_MAX + 8];
    char dataset[LF_PATH_MAX];
    lf_eval_tasks *suite; /* eval.suite (every rank) */
    lf_eval_results *suite_res;
    lf_tokenizer *tok;
};

/* A write failed: say so once, and record nothing more for this run. */
static void give_up(lf__treg *r, const char *what) {
    lf_log(LF_LOG_WARN, "model registry: %s: %s; this run is no longer recorded (training goes on)", what,
           lf_last_error());
    lf_registry_close(r->reg);
    r->reg = NULL;
}

lf_status lf__treg_open(lf__treg **out, const lf_train_config *cfg, int rank, const char *tok_spec) {
    *out = NULL;
    lf__treg *r = calloc(1, sizeof *r);
    if (!r) return lf_fail(LF_ERR_NOMEM, "out of memory");
    r->rank = rank;
    snprintf(r->ckpt_root, sizeof r->ckpt_root, "%s/ckpt", cfg->out_dir);
    snprintf(r->dataset, sizeof r->dataset, "%s", cfg->dataset);
    lf_status st = LF_OK;
    if (cfg->eval_suite[0]) {
        st = lf_eval_suite_load(&r->suite, cfg->eval_suite, NULL);
        if (st == LF_OK) st = lf_eval_results_create(&r->suite_res);
        if (st == LF_OK) st = lf_tokenizer_open(&r->tok, tok_spec, NULL);
        if (st != LF_OK) {
            lf_error_prefix("key 'eval.suite'");
            lf__treg_close(r);
            return st;
        }
    }
    if (rank == 0 && cfg->registry_enabled) {
        if (lf_registry_path_resolve(cfg->registry_path, r->file, sizeof r->file) != LF_OK ||
            lf_registry_open(&r->reg, r->file, LF_REGISTRY_CREATE) != LF_OK) {
            lf_log(LF_LOG_WARN,
                   "model registry: %s; this run is not recorded (training goes on; registry.enabled "
                   "false turns the registry off)",
                   lf_last_error());
            r->reg = NULL;
        }
    }
    *out = r;
    return LF_OK;
}

/* 1 when the dataset's manifest says it holds prompt/response pairs. */
static int dataset_is_sft(const char *dir) {
    char path[LF_PATH_MAX + 32], *text = NULL;
    snprintf(path, sizeof path, "%s/dataset.json", dir);
    if (lf_file_read_all(path, 64u << 20, &text, NULL) != LF_OK) return 0;
    cJSON *o = cJSON_Parse(text);
    lf_free(text);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "mode");
    int sft = cJSON_IsString(m) && !strcmp(m->valuestring, "sft");
    cJSON_Delete(o);
    return sft;
}

void lf__treg_run_begin(lf__treg *r, const lf_train_config *cfg, int world, const char *resumed_dir,
                        const char *init_from, const char *tok_spec) {
    if (!r || !r->reg) return;
    char dhash[65] = "", thash[65] = "";
    if (lf_registry_hash_dataset(cfg->dataset, dhash) != LF_OK) dhash[0] = 0;
    if (tok_spec && lf_registry_hash_tokenizer(tok_spec, thash) != LF_OK) thash[0] = 0;
    char *cfg_json = lf_train_config_to_json(cfg);
    if (!cfg_json) {
        lf_fail(LF_ERR_NOMEM, "out of memory");
        give_up(r, "recording the run");
        return;
    }
    int resumed = resumed_dir && *resumed_dir;
    lf_registry_run_info info = {
        .out_dir = cfg->out_dir,
        .config_json = cfg_json,
        .dataset = cfg->dataset,
        .dataset_hash = dhash,
        .tokenizer = tok_spec,
        .tokenizer_hash = thash,
        .world_size = world,
        .resumed_from = resumed ? resumed_dir : NULL,
        .init_from = !resumed && init_from && *init_from ? init_from : NULL,
        .fine_tune = !resumed && init_from && *init_from && dataset_is_sft(cfg->dataset),
    };
    if (lf_registry_run_begin(r->reg, &info, &r->run_id) != LF_OK) {
        r->run_id = 0;
        give_up(r, "recording the run");
    } else {
        lf_log(LF_LOG_INFO, "model registry: run r%lld in %s", (long long)r->run_id, r->file);
    }
    lf_free(cfg_json);
}

static int add_metric(lf_registry_metric *m, int n, const char *name, double v) {
    if (n >= TREG_METRICS_MAX) return n;
    m[n].name = name;
    m[n].value = v;
    return n + 1;
}

void lf__treg_checkpoint(lf__treg *r, lf_model *model, long step, int evaluated, double train_loss, double val_loss,
                         const lf_eval_results *tasks, const char *best_name, char **event_json) {
    if (event_json) *event_json = NULL;
    if (!r) return;
    char dir[LF_PATH_MAX + 40];
    snprintf(dir, sizeof dir, "%s/step_%08ld", r->ckpt_root, step);
    int suite_ok = 0;
    if (r->suite) { /* every rank, in step */
        lf_status st = lf_eval_tasks_run(r->suite, model, r->tok, NULL, r->suite_res);
        suite_ok = st == LF_OK;
        if (!suite_ok && r->rank == 0)
            lf_log(LF_LOG_WARN, "eval.suite on checkpoint '%s': %s (training goes on)", dir, lf_last_error());
    }
    if (r->rank != 0) return;
    size_t n_suite = 0;
    const lf_eval_metric *sm = suite_ok ? lf_eval_results_metrics(r->suite_res, &n_suite) : NULL;
    if (suite_ok && event_json) { /* for log.jsonl: {"path":..., "metrics":{...}} */
        cJSON *o = cJSON_CreateObject(), *mo = cJSON_AddObjectToObject(o, "metrics");
        cJSON_AddStringToObject(o, "path", dir);
        for (size_t i = 0; i < n_suite; i++) cJSON_AddNumberToObject(mo, sm[i].name, sm[i].value);
        char *txt = lf_json_print(o, 0);
        if (txt) {
            size_t len = strlen(txt) + 1;
            if ((*event_json = malloc(len))) memcpy(*event_json, txt, len);
            cJSON_free(txt);
        }
        cJSON_Delete(o);
    }
    if (!r->reg || !r->run_id) return;
    lf_registry_metric m[TREG_METRICS_MAX];
    int n = 0;
    if (evaluated) {
        n = add_metric(m, n, "train_loss", train_loss);
        if (!isnan(val_loss)) n = add_metric(m, n, "val_loss", val_loss);
        size_t nt = 0;
        const lf_eval_metric *tm = tasks ? lf_eval_results_metrics(tasks, &nt) : NULL;
        for (size_t i = 0; i < nt; i++) n = add_metric(m, n, tm[i].name, tm[i].value);
    }
    char best[LF_PATH_MAX + 80] = "";
    if (best_name && *best_name) snprintf(best, sizeof best, "%s/%s", r->ckpt_root, best_name);
    lf_registry_ckpt_info ci = {.run_id = r->run_id,
                                .step = step,
                                .path = dir,
                                .best_path = best[0] ? best : NULL,
                                .metrics = m,
                                .n_metrics = n};
    int64_t id = 0;
    if (lf_registry_checkpoint_add(r->reg, &ci, &id) != LF_OK) {
        give_up(r, "recording a checkpoint");
        return;
    }
    n = 0;
    for (size_t i = 0; i < n_suite; i++) n = add_metric(m, n, sm[i].name, sm[i].value);
    if (n && lf_registry_metrics_put(r->reg, id, m, n, "suite") != LF_OK) give_up(r, "recording eval.suite's metrics");
}

void lf__treg_run_end(lf__treg *r, lf_status st, const char *message) {
    if (!r || !r->reg || !r->run_id) return;
    lf_run_status rs = st == LF_OK ? LF_RUN_FINISHED : st == LF_ERR_PREEMPTED ? LF_RUN_PREEMPTED : LF_RUN_FAILED;
    if (lf_registry_run_end(r->reg, r->run_id, rs, st == LF_OK ? NULL : message) != LF_OK)
        give_up(r, "recording the end of the run");
    r->run_id = 0;
}

void lf__treg_close(lf__treg *r) {
    if (!r) return;
    lf_registry_close(r->reg);
    lf_eval_tasks_free(r->suite);
    lf_eval_results_free(r->suite_res);
    lf_tokenizer_free(r->tok);
    free(r);
}
