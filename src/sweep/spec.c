/*
 * The sweep file: parsing and checking it (include/llmforge/sweep.h,
 * docs/sweeps.md), the rungs of its early-stopping rule, and the text of a
 * point's override values.
 *
 * Why here and not in the CLI: a bad sweep file must be refused before any
 * trial starts, with a message naming the key, and the checks need the
 * training configuration's own parser (a space key is checked by loading
 * the base configuration with that key set, so every alias, bound and type
 * rule of the config table applies unchanged, and nothing here duplicates
 * the table).
 *
 * Invariants:
 *  - A parsed spec is immutable. Its normalized text (lf_sweep_spec_text)
 *    holds the base configuration inline, so the sweep directory's state
 *    file alone rebuilds the same spec (`sweep status`, Slurm workers), and
 *    a rerun whose sweep file or base configuration changed is detected by
 *    comparing texts.
 *  - Every value a trial can receive was loaded once through the config
 *    parser at parse time: each grid/choice value, and both ends of every
 *    range (a range is convex, and the config's bounds are intervals).
 *  - Rungs are increasing, the last is train_iters, and each earlier one is
 *    a multiple of eval.interval (the trainer evaluates there anyway, and
 *    train.stop_at evaluates and checkpoints the step it stops at).
 */
#define _GNU_SOURCE /* realpath */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "llmforge/eval.h"
#include "llmforge/train.h"
#include "sweep/sweep_impl.h"

#define SWEEP_FILE_MAX (4u << 20)

static const char *const k_dim_types[] = {"grid", "choice", "uniform", "loguniform", "int"};
static const char *const k_methods[] = {"grid", "random", "tpe"};
static const char *const k_stoppers[] = {"none", "asha", "median"};

const char *lf_sweep_dim_type_name(lf_sweep_dim_type t) { return (unsigned)t < 5 ? k_dim_types[t] : "unknown"; }
const char *lf_sweep_method_name(lf_sweep_method m) { return (unsigned)m < 3 ? k_methods[m] : "unknown"; }
const char *lf_sweep_stopper_name(lf_sweep_stopper s) { return (unsigned)s < 3 ? k_stoppers[s] : "unknown"; }

/* ---------------------------------------------------------------- accessors */

int lf_sweep_spec_n_dims(const lf_sweep_spec *s) { return s ? s->n_dims : 0; }
const lf_sweep_dim *lf_sweep_spec_dim(const lf_sweep_spec *s, int i) {
    return s && i >= 0 && i < s->n_dims ? &s->dims[i].pub : NULL;
}
lf_sweep_method lf_sweep_spec_method(const lf_sweep_spec *s) { return s->method; }
lf_sweep_stopper lf_sweep_spec_stopper(const lf_sweep_spec *s) { return s->stopper; }
long lf_sweep_spec_trials(const lf_sweep_spec *s) { return s->trials; }
uint64_t lf_sweep_spec_seed(const lf_sweep_spec *s) { return s->seed; }
const char *lf_sweep_spec_objective(const lf_sweep_spec *s) { return s->objective; }
int lf_sweep_spec_maximize(const lf_sweep_spec *s) { return s->maximize; }
int lf_sweep_spec_rungs(const lf_sweep_spec *s, const long **steps) {
    if (steps) *steps = s->rungs;
    return s->n_rungs;
}
double lf_sweep_spec_eta(const lf_sweep_spec *s) { return s->eta; }
int lf_sweep_spec_min_trials(const lf_sweep_spec *s) { return s->min_trials; }
const char *lf_sweep_spec_base(const lf_sweep_spec *s, const char **inline_json) {
    if (inline_json) *inline_json = s->base_text;
    return s->base_file[0] ? s->base_file : NULL;
}
int lf_sweep_spec_sets(const lf_sweep_spec *s, const char *const **sets) {
    if (sets) *sets = (const char *const *)s->sets;
    return s->n_sets;
}
const char *lf_sweep_spec_out_dir(const lf_sweep_spec *s) { return s->out_dir; }
int lf_sweep_spec_parallel(const lf_sweep_spec *s) { return s->parallel; }
int lf_sweep_spec_threads(const lf_sweep_spec *s) { return s->threads; }
int lf_sweep_spec_slurm_workers(const lf_sweep_spec *s) { return s->slurm_workers; }
int lf_sweep_spec_sbatch(const lf_sweep_spec *s, const char *const **opts) {
    if (opts) *opts = (const char *const *)s->sbatch;
    return s->n_sbatch;
}
const char *lf_sweep_spec_cwd(const lf_sweep_spec *s) { return s->cwd; }
const char *lf_sweep_spec_text(const lf_sweep_spec *s) { return s->text; }
lf_sweep_tpe_opts lf_sweep_spec_tpe(const lf_sweep_spec *s) { return s->tpe; }

lf_sweep_tpe_opts lf_sweep_tpe_opts_default(void) {
    lf_sweep_tpe_opts o = {.startup = 10, .gamma = 0.25, .candidates = 24};
    return o;
}

void lf_sweep_spec_free(lf_sweep_spec *s) {
    if (!s) return;
    for (int i = 0; i < s->n_dims; i++) {
        for (int j = 0; j < s->dims[i].pub.n_values; j++) free(s->dims[i].vals[j]);
        free(s->dims[i].vals);
    }
    for (int i = 0; i < s->n_sets; i++) free(s->sets[i]);
    free(s->sets);
    for (int i = 0; i < s->n_sbatch; i++) free(s->sbatch[i]);
    free(s->sbatch);
    free(s->base_text);
    free(s->text);
    free(s);
}

/* ---------------------------------------------------------------- values */

int lf_sweep_value_text(const lf_sweep_spec *s, int d, double v, char *buf, size_t cap) {
    if (!s || d < 0 || d >= s->n_dims) return snprintf(buf, cap, "null");
    const lf_sweep_dim *dim = &s->dims[d].pub;
    switch (dim->type) {
    case LF_SWEEP_DIM_GRID:
    case LF_SWEEP_DIM_CHOICE: {
        long i = (long)v;
        if (!(v >= 0) || i >= dim->n_values) return snprintf(buf, cap, "null");
        return snprintf(buf, cap, "%s", dim->values[i]);
    }
    case LF_SWEEP_DIM_INT: return snprintf(buf, cap, "%lld", (long long)llround(v));
    default: {
        char num[LF_JSON_NUMBER_MAX];
        lf_json_number(num, sizeof num, v);
        return snprintf(buf, cap, "%s", num);
    }
    }
}

/* ---------------------------------------------------------------- parsing helpers */

typedef struct pctx {
    lf_sweep_spec *s;
    const char *origin;
    lf_train_config base; /* base + set, resolved */
} pctx;

#define BAD(c, ...) lf__sweep_bad((c)->origin, __VA_ARGS__)

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
lf_status
lf__sweep_bad(const char *origin, const char *fmt, ...) {
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return lf_fail(LF_ERR_CONFIG, "sweep '%s': %s", origin, msg);
}

/* An integer-valued JSON number in [lo, hi] into *out. */
static lf_status get_int(pctx *c, const cJSON *o, const char *key, long long lo, long long hi, long long *out) {
    if (!cJSON_IsNumber(o) || !isfinite(o->valuedouble) || o->valuedouble != floor(o->valuedouble) ||
        o->valuedouble < (double)lo || o->valuedouble > (double)hi)
        return BAD(c, "'%s' must be an integer in [%lld, %lld]", key, lo, hi);
    *out = (long long)o->valuedouble;
    return LF_OK;
}

static lf_status get_num(pctx *c, const cJSON *o, const char *key, double *out) {
    if (!cJSON_IsNumber(o) || !isfinite(o->valuedouble)) return BAD(c, "'%s' must be a finite number", key);
    *out = o->valuedouble;
    return LF_OK;
}

/* Every member of object o is one of keys (NULL-terminated), else the error names it. */
static lf_status only_keys(pctx *c, const cJSON *o, const char *where, const char *const *keys) {
    for (const cJSON *m = o->child; m; m = m->next) {
        int ok = 0;
        for (int i = 0; keys[i] && !ok; i++) ok = !strcmp(m->string, keys[i]);
        if (!ok) {
            char list[512];
            size_t at = 0;
            list[0] = 0;
            for (int i = 0; keys[i] && at < sizeof list; i++)
                at += (size_t)snprintf(list + at, sizeof list - at, "%s%s", i ? ", " : "", keys[i]);
            return BAD(c, "unknown key '%s%s%s' (known: %s)", where, *where ? "." : "", m->string, list);
        }
    }
    return LF_OK;
}

/* Load the base configuration with the `set` overrides and `extra` more
 * (a dimension's value); world size 1: the sweep decides its trials' layout,
 * not the environment it happens to run in. */
static lf_status load_cfg(const lf_sweep_spec *s, const char *const *extra, int n_extra, lf_train_config *cfg) {
    const char *ov[LF_SWEEP_MAX_DIMS + 256];
    int n = 0;
    for (int i = 0; i < s->n_sets && n < 256; i++) ov[n++] = s->sets[i];
    for (int i = 0; i < n_extra && n < (int)(sizeof ov / sizeof ov[0]); i++) ov[n++] = extra[i];
    return lf_train_config_parse_world(cfg, s->base_text, s->base_origin, 1, n, ov);
}

/* ---------------------------------------------------------------- the base */

static lf_status parse_base(pctx *c, const cJSON *b, const char *dir) {
    lf_sweep_spec *s = c->s;
    if (cJSON_IsString(b)) {
        char path[LF_PATH_MAX * 2];
        if (b->valuestring[0] == '/' || !dir) snprintf(path, sizeof path, "%s", b->valuestring);
        else snprintf(path, sizeof path, "%s/%s", dir, b->valuestring);
        char *text = NULL;
        lf_status st = lf_file_read_all(path, SWEEP_FILE_MAX, &text, NULL);
        if (st != LF_OK) return BAD(c, "'base': %s", lf_last_error());
        char *rp = realpath(path, NULL);
        snprintf(s->base_file, sizeof s->base_file, "%s", rp ? rp : path);
        free(rp);
        s->base_text = strdup(text);
        lf_free(text);
        snprintf(s->base_origin, sizeof s->base_origin, "%s", s->base_file);
    } else if (cJSON_IsObject(b)) {
        char *p = lf_json_print(b, 0);
        if (p) {
            s->base_text = strdup(p);
            cJSON_free(p);
        }
        snprintf(s->base_origin, sizeof s->base_origin, "%s: base", c->origin);
    } else {
        return BAD(c, "'base' must be a configuration file name or an inline configuration object");
    }
    if (!s->base_text) return lf_fail(LF_ERR_NOMEM, "sweep '%s': out of memory", c->origin);
    return LF_OK;
}

static lf_status parse_set(pctx *c, const cJSON *set) {
    lf_sweep_spec *s = c->s;
    if (!set) return LF_OK;
    if (!cJSON_IsObject(set)) return BAD(c, "'set' must be an object of configuration key -> value");
    int n = cJSON_GetArraySize(set);
    if (n > 256) return BAD(c, "'set' has %d keys; at most 256", n);
    s->sets = calloc((size_t)n + 1, sizeof *s->sets);
    if (!s->sets) return lf_fail(LF_ERR_NOMEM, "sweep '%s': out of memory", c->origin);
    for (const cJSON *m = set->child; m; m = m->next) {
        char *v = lf_json_print(m, 0);
        if (!v) return lf_fail(LF_ERR_NOMEM, "sweep '%s': out of memory", c->origin);
        size_t len = strlen(m->string) + strlen(v) + 2;
        char *ov = malloc(len);
        if (ov) snprintf(ov, len, "%s=%s", m->string, v);
        cJSON_free(v);
        if (!ov) return lf_fail(LF_ERR_NOMEM, "sweep '%s': out of memory", c->origin);
        s->sets[s->n_sets++] = ov;
    }
    return LF_OK;
}

/* ---------------------------------------------------------------- the space */

/* A value the dimension may give, through the config parser; keys the sweep
 * owns must not move. */
static lf_status check_value(pctx *c, sweep_dim *d, const char *text) {
    size_t len = strlen(d->pub.key) + strlen(text) + 2;
    char *ov = malloc(len);
    if (!ov) return lf_fail(LF_ERR_NOMEM, "sweep '%s': out of memory", c->origin);
    snprintf(ov, len, "%s=%s", d->pub.key, text);
    lf_train_config cfg;
    const char *one[1] = {ov};
    lf_status st = load_cfg(c->s, one, 1, &cfg);
    free(ov);
    if (st != LF_OK) return BAD(c, "space key '%s' = %s: %s", d->pub.key, text, lf_last_error());
    static const char *const owned = "the sweep sets it for every trial";
    if (strcmp(cfg.out_dir, c->base.out_dir) != 0) return BAD(c, "space key '%s' sets out_dir: %s", d->pub.key, owned);
    if (cfg.stop_at != c->base.stop_at) return BAD(c, "space key '%s' sets train.stop_at: %s", d->pub.key, owned);
    if (c->s->stopper != LF_SWEEP_STOP_NONE &&
        (cfg.train_iters != c->base.train_iters || cfg.eval_interval != c->base.eval_interval))
        return BAD(c,
                   "space key '%s' changes %s, on which the rungs of early stopping are placed; it cannot vary "
                   "with early_stopping '%s'",
                   d->pub.key, cfg.train_iters != c->base.train_iters ? "train_iters" : "eval.interval",
                   lf_sweep_stopper_name(c->s->stopper));
    return LF_OK;
}

static lf_status parse_dim(pctx *c, const cJSON *m, sweep_dim *d) {
    lf_sweep_spec *s = c->s;
    if (!m->string[0]) return BAD(c, "'space' has an empty key");
    if (strlen(m->string) >= sizeof d->key) return BAD(c, "space key '%.64s...' is too long", m->string);
    snprintf(d->key, sizeof d->key, "%s", m->string);
    d->pub.key = d->key;
    const cJSON *vals = NULL;
    if (cJSON_IsArray(m)) { /* shorthand: a list is a grid axis */
        d->pub.type = LF_SWEEP_DIM_GRID;
        vals = m;
    } else if (cJSON_IsObject(m)) {
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(m, "type");
        if (!cJSON_IsString(ty))
            return BAD(c, "space key '%s': 'type' is missing (one of grid, choice, uniform, loguniform, int)", d->key);
        int t = -1;
        for (int i = 0; i < 5; i++)
            if (!strcmp(ty->valuestring, k_dim_types[i])) t = i;
        if (t < 0)
            return BAD(c, "space key '%s': type '%s' is not one of grid, choice, uniform, loguniform, int", d->key,
                       ty->valuestring);
        d->pub.type = (lf_sweep_dim_type)t;
        char where[160];
        snprintf(where, sizeof where, "space.%s", d->key);
        static const char *const cat_keys[] = {"type", "values", NULL};
        static const char *const num_keys[] = {"type", "low", "high", NULL};
        lf_status st = only_keys(c, m, where, t <= LF_SWEEP_DIM_CHOICE ? cat_keys : num_keys);
        if (st != LF_OK) return st;
        if (t <= LF_SWEEP_DIM_CHOICE) {
            vals = cJSON_GetObjectItemCaseSensitive(m, "values");
            if (!cJSON_IsArray(vals))
                return BAD(c, "space key '%s': %s needs 'values', a list", d->key, ty->valuestring);
        }
    } else {
        return BAD(c, "space key '%s' must be a list of values or an object with a 'type'", d->key);
    }
    if (vals) {
        int n = cJSON_GetArraySize(vals);
        if (n == 0) return BAD(c, "space key '%s': 'values' is empty", d->key);
        if (n > LF_SWEEP_MAX_VALUES)
            return BAD(c, "space key '%s': %d values; at most %d", d->key, n, LF_SWEEP_MAX_VALUES);
        d->vals = calloc((size_t)n, sizeof *d->vals);
        if (!d->vals) return lf_fail(LF_ERR_NOMEM, "sweep '%s': out of memory", c->origin);
        for (const cJSON *v = vals->child; v; v = v->next) {
            if (cJSON_IsObject(v) || cJSON_IsNull(v))
                return BAD(c, "space key '%s': value %d is %s; values are numbers, strings, booleans or lists", d->key,
                           d->pub.n_values, cJSON_IsNull(v) ? "null" : "an object");
            char *p = lf_json_print(v, 0);
            if (!p || !(d->vals[d->pub.n_values] = strdup(p))) {
                cJSON_free(p);
                return lf_fail(LF_ERR_NOMEM, "sweep '%s': out of memory", c->origin);
            }
            cJSON_free(p);
            for (int j = 0; j < d->pub.n_values; j++)
                if (!strcmp(d->vals[j], d->vals[d->pub.n_values]))
                    return BAD(c, "space key '%s': value %s is listed twice", d->key, d->vals[j]);
            d->pub.n_values++;
        }
        d->pub.values = (const char *const *)d->vals;
        for (int j = 0; j < d->pub.n_values; j++) {
            lf_status st = check_value(c, d, d->vals[j]);
            if (st != LF_OK) return st;
        }
        return LF_OK;
    }
    lf_status st;
    const cJSON *lo = cJSON_GetObjectItemCaseSensitive(m, "low"), *hi = cJSON_GetObjectItemCaseSensitive(m, "high");
    char lk[160], hk[160];
    snprintf(lk, sizeof lk, "space.%s.low", d->key);
    snprintf(hk, sizeof hk, "space.%s.high", d->key);
    if (!lo || !hi) return BAD(c, "space key '%s': %s needs 'low' and 'high'", d->key, k_dim_types[d->pub.type]);
    if ((st = get_num(c, lo, lk, &d->pub.low)) != LF_OK || (st = get_num(c, hi, hk, &d->pub.high)) != LF_OK) return st;
    if (!(d->pub.low < d->pub.high))
        return BAD(c, "space key '%s': low %g must be below high %g", d->key, d->pub.low, d->pub.high);
    if (d->pub.type == LF_SWEEP_DIM_LOGUNIFORM && !(d->pub.low > 0))
        return BAD(c, "space key '%s': loguniform needs 0 < low (low is %g)", d->key, d->pub.low);
    if (d->pub.type == LF_SWEEP_DIM_INT) {
        if (d->pub.low != floor(d->pub.low) || d->pub.high != floor(d->pub.high) || fabs(d->pub.low) > 1e15 ||
            fabs(d->pub.high) > 1e15)
            return BAD(c, "space key '%s': int bounds must be integers (low %g, high %g)", d->key, d->pub.low,
                       d->pub.high);
    }
    char text[64];
    for (int e = 0; e < 2; e++) {
        lf_sweep_value_text(s, (int)(d - s->dims), e ? d->pub.high : d->pub.low, text, sizeof text);
        if ((st = check_value(c, d, text)) != LF_OK) return st;
    }
    return LF_OK;
}

static lf_status parse_space(pctx *c, const cJSON *space) {
    lf_sweep_spec *s = c->s;
    if (!space) return BAD(c, "'space' is missing: give at least one configuration key to vary");
    if (!cJSON_IsObject(space)) return BAD(c, "'space' must be an object of configuration key -> dimension");
    int n = cJSON_GetArraySize(space);
    if (n == 0) return BAD(c, "'space' is empty: give at least one configuration key to vary");
    if (n > LF_SWEEP_MAX_DIMS) return BAD(c, "'space' has %d keys; at most %d", n, LF_SWEEP_MAX_DIMS);
    for (const cJSON *m = space->child; m; m = m->next) {
        sweep_dim *d = &s->dims[s->n_dims++];
        lf_status st = parse_dim(c, m, d);
        if (st != LF_OK) return st;
        for (int j = 0; j < s->n_dims - 1; j++)
            if (!strcmp(s->dims[j].key, d->key)) return BAD(c, "space key '%s' is given twice", d->key);
    }
    return LF_OK;
}

/* ---------------------------------------------------------------- the objective */

/* The metrics each task kind logs (include/llmforge/eval.h, "Metrics"). */
static int kind_logs(lf_eval_kind k, const char *metric) {
    static const char *const perplexity[] = {"nll", "perplexity", "bits_per_byte", NULL};
    static const char *const mc[] = {"acc", "acc_norm", NULL};
    static const char *const cls[] = {"accuracy", "macro_f1", "macro_precision", "macro_recall", NULL};
    static const char *const gen[] = {"bleu", "rouge1", "rouge2", "rougeL", "rougeLsum", NULL};
    static const char *const rank[] = {"mrr", "mean_rank", NULL};
    static const char *const em[] = {"exact_match", "f1", NULL};
    const char *const *list = NULL;
    switch (k) {
    case LF_EVAL_PERPLEXITY: list = perplexity; break;
    case LF_EVAL_MULTIPLE_CHOICE: list = mc; break;
    case LF_EVAL_CLASSIFICATION: list = cls; break;
    case LF_EVAL_GENERATION: list = gen; break;
    case LF_EVAL_RANKING:
        if (!strncmp(metric, "hits@", 5) && metric[5]) {
            char *end;
            long v = strtol(metric + 5, &end, 10);
            if (!*end && v > 0) return 1;
        }
        list = rank;
        break;
    case LF_EVAL_EXACT_MATCH: list = em; break;
    default: return 0;
    }
    for (int i = 0; list[i]; i++)
        if (!strcmp(list[i], metric)) return 1;
    return 0;
}

static lf_status check_objective(pctx *c) {
    lf_sweep_spec *s = c->s;
    const char *m = s->objective;
    if (!strcmp(m, "val_loss") || !strcmp(m, "train_loss")) return LF_OK;
    const char *slash = strchr(m, '/');
    const char *tasks = c->base.eval_tasks;
    if (!slash)
        return BAD(c,
                   "objective '%s' is not logged: evaluations log train_loss, val_loss and <task>/<metric> of "
                   "eval.tasks",
                   m);
    if (!tasks[0])
        return BAD(c,
                   "objective '%s' is not logged: the base configuration's eval.tasks is empty (logged: "
                   "train_loss, val_loss)",
                   m);
    /* the tasks as the trainer reads them: one path per line, "PATH#KIND" */
    char buf[sizeof c->base.eval_tasks];
    memcpy(buf, tasks, sizeof buf);
    const char *paths[64];
    lf_eval_kind kinds[64];
    int n = 0;
    if (lf_eval_tasks_split(buf, 64, paths, kinds, &n, NULL) != LF_OK)
        return BAD(c, "objective '%s': eval.tasks entry '%s' has an unknown kind after '#'", m, paths[n]);
    lf_eval_load_opts lo = lf_eval_load_opts_default();
    lo.kinds = kinds;
    lo.limit = 1; /* names and kinds are all we need */
    /* task paths are relative to where trials run */
    char(*abs)[LF_PATH_MAX + 8] = calloc(64, sizeof *abs);
    if (!abs) return lf_fail(LF_ERR_NOMEM, "sweep '%s': out of memory", c->origin);
    for (int i = 0; i < n; i++) {
        if (paths[i][0] != '/' && s->cwd[0]) {
            snprintf(abs[i], sizeof abs[i], "%s/%s", s->cwd, paths[i]);
            paths[i] = abs[i];
        }
    }
    lf_eval_tasks *t = NULL;
    lf_status st = lf_eval_tasks_load(&t, paths, n, &lo);
    free(abs);
    if (st != LF_OK) return BAD(c, "objective '%s': cannot read eval.tasks: %s", m, lf_last_error());
    int found_task = 0, found = 0;
    char names[512];
    size_t at = 0;
    names[0] = 0;
    for (int i = 0; i < lf_eval_tasks_count(t); i++) {
        const char *nm = lf_eval_task_name(t, i);
        size_t ln = strlen(nm);
        if (at < sizeof names) at += (size_t)snprintf(names + at, sizeof names - at, "%s%s", i ? ", " : "", nm);
        if ((size_t)(slash - m) == ln && !strncmp(m, nm, ln)) {
            found_task = 1;
            found = kind_logs(lf_eval_task_kind(t, i), slash + 1);
            if (!found) {
                lf_eval_kind k = lf_eval_task_kind(t, i);
                lf_eval_tasks_free(t);
                return BAD(c, "objective '%s' is not logged: task '%.*s' is a %s task, which logs no '%s'", m, (int)ln,
                           m, lf_eval_kind_name(k), slash + 1);
            }
        }
    }
    lf_eval_tasks_free(t);
    if (!found_task)
        return BAD(c, "objective '%s' is not logged: no task '%.*s' in eval.tasks (tasks: %s)", m, (int)(slash - m), m,
                   names);
    return found ? LF_OK : BAD(c, "objective '%s' is not logged", m);
}

static lf_status parse_objective(pctx *c, const cJSON *o) {
    lf_sweep_spec *s = c->s;
    const char *metric = "val_loss", *mode = "minimize";
    if (cJSON_IsString(o)) {
        metric = o->valuestring;
    } else if (cJSON_IsObject(o)) {
        static const char *const keys[] = {"metric", "mode", NULL};
        lf_status st = only_keys(c, o, "objective", keys);
        if (st != LF_OK) return st;
        const cJSON *me = cJSON_GetObjectItemCaseSensitive(o, "metric"),
                    *mo = cJSON_GetObjectItemCaseSensitive(o, "mode");
        if (me && !cJSON_IsString(me)) return BAD(c, "'objective.metric' must be a string");
        if (mo && !cJSON_IsString(mo)) return BAD(c, "'objective.mode' must be \"minimize\" or \"maximize\"");
        if (me) metric = me->valuestring;
        if (mo) mode = mo->valuestring;
    } else if (o) {
        return BAD(c, "'objective' must be a metric name or {\"metric\": ..., \"mode\": ...}");
    }
    if (!strcmp(mode, "minimize") || !strcmp(mode, "min")) s->maximize = 0;
    else if (!strcmp(mode, "maximize") || !strcmp(mode, "max")) s->maximize = 1;
    else return BAD(c, "'objective.mode' is '%s'; it must be minimize or maximize", mode);
    if (!*metric || strlen(metric) >= sizeof s->objective) return BAD(c, "'objective.metric' is empty or too long");
    snprintf(s->objective, sizeof s->objective, "%s", metric);
    return check_objective(c);
}

/* ---------------------------------------------------------------- early stopping and rungs */

static lf_status parse_stopping(pctx *c, const cJSON *e, long long *min_res, long long *interval) {
    lf_sweep_spec *s = c->s;
    *min_res = *interval = 0;
    s->eta = 3;
    s->min_trials = 3;
    if (!e) return LF_OK;
    const cJSON *ty = cJSON_IsString(e) ? e : cJSON_IsObject(e) ? cJSON_GetObjectItemCaseSensitive(e, "type") : NULL;
    if (!cJSON_IsString(ty))
        return BAD(c, "'early_stopping' must be \"none\", \"asha\", \"median\" or an object with a 'type'");
    int t = -1;
    for (int i = 0; i < 3; i++)
        if (!strcmp(ty->valuestring, k_stoppers[i])) t = i;
    if (t < 0) return BAD(c, "'early_stopping.type' is '%s'; it must be none, asha or median", ty->valuestring);
    s->stopper = (lf_sweep_stopper)t;
    if (!cJSON_IsObject(e)) return LF_OK;
    static const char *const none_keys[] = {"type", NULL};
    static const char *const asha_keys[] = {"type", "eta", "min_resource", NULL};
    static const char *const median_keys[] = {"type", "min_resource", "interval", "min_trials", NULL};
    const char *const *keys = t == 0 ? none_keys : t == 1 ? asha_keys : median_keys;
    lf_status st = only_keys(c, e, "early_stopping", keys);
    if (st != LF_OK) return st;
    const cJSON *v;
    if ((v = cJSON_GetObjectItemCaseSensitive(e, "eta"))) {
        if ((st = get_num(c, v, "early_stopping.eta", &s->eta)) != LF_OK) return st;
        if (!(s->eta >= 1.5 && s->eta <= 1000))
            return BAD(c, "'early_stopping.eta' is %g; it must be in [1.5, 1000]", s->eta);
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(e, "min_resource")) &&
        (st = get_int(c, v, "early_stopping.min_resource", 1, LONG_MAX / 2, min_res)) != LF_OK)
        return st;
    if ((v = cJSON_GetObjectItemCaseSensitive(e, "interval")) &&
        (st = get_int(c, v, "early_stopping.interval", 1, LONG_MAX / 2, interval)) != LF_OK)
        return st;
    long long mt = 0;
    if ((v = cJSON_GetObjectItemCaseSensitive(e, "min_trials"))) {
        if ((st = get_int(c, v, "early_stopping.min_trials", 1, 100000, &mt)) != LF_OK) return st;
        s->min_trials = (int)mt;
    }
    return LF_OK;
}

static long round_to(double v, long q) {
    long k = (long)floor(v / (double)q + 0.5);
    return k * q;
}

static lf_status make_rungs(pctx *c, long long min_res, long long interval) {
    lf_sweep_spec *s = c->s;
    const long R = c->base.train_iters, E = c->base.eval_interval;
    if (s->stopper == LF_SWEEP_STOP_NONE) {
        s->rungs[0] = R;
        s->n_rungs = 1;
        return LF_OK;
    }
    const char *name = lf_sweep_stopper_name(s->stopper);
    if (E <= 0)
        return BAD(c,
                   "early_stopping '%s' places its rungs on evaluations, but the base configuration's eval.interval "
                   "is 0 (only the last step is evaluated)",
                   name);
    if (min_res == 0) min_res = E;
    if (min_res % E)
        return BAD(c, "'early_stopping.min_resource' %lld is not a multiple of eval.interval %ld", min_res, E);
    if (min_res >= R)
        return BAD(c, "'early_stopping.min_resource' %lld leaves no rung below train_iters %ld", min_res, R);
    long tmp[LF_SWEEP_MAX_RUNGS];
    int n = 0;
    if (s->stopper == LF_SWEEP_STOP_ASHA) {
        /* R / eta^k for k = 1, 2, ... while at least min_resource, rounded to eval.interval */
        double v = (double)R / s->eta;
        if (v + 1e-9 < (double)min_res)
            return BAD(c,
                       "'early_stopping.min_resource' %lld is above train_iters / eta = %g: no rung below "
                       "train_iters",
                       min_res, v);
        for (; v + 1e-9 >= (double)min_res && n < LF_SWEEP_MAX_RUNGS - 1; v /= s->eta) {
            long r = round_to(v, E);
            if (r < min_res) r = (long)min_res;
            if (r >= R || (n > 0 && r >= tmp[n - 1])) continue; /* rounding merged two rungs */
            tmp[n++] = r;
        }
        /* tmp is decreasing: reverse */
        for (int i = 0; i < n; i++) s->rungs[i] = tmp[n - 1 - i];
    } else {
        if (interval == 0) interval = E;
        if (interval % E)
            return BAD(c, "'early_stopping.interval' %lld is not a multiple of eval.interval %ld", interval, E);
        for (long r = (long)min_res; r < R; r += (long)interval) {
            if (n >= LF_SWEEP_MAX_RUNGS - 1)
                return BAD(c,
                           "median stopping from %lld every %lld steps to %ld makes more than %d rungs; raise "
                           "'early_stopping.interval'",
                           min_res, interval, R, LF_SWEEP_MAX_RUNGS);
            s->rungs[n++] = r;
        }
    }
    s->rungs[n++] = R;
    s->n_rungs = n;
    if (s->stopper == LF_SWEEP_STOP_ASHA) {
        /* successive halving keeps floor(n_k / eta) of each rung: with too few
         * trials for the rungs, no trial would ever train to train_iters */
        long left = s->trials;
        for (int k = 1; k < n; k++) left = (long)floor((double)left / s->eta + 1e-9);
        if (left < 1)
            return BAD(c,
                       "ASHA with eta %g keeps 1/eta of the trials at each of its %d rungs (steps %ld .. %ld): %ld "
                       "trials are too few for any to reach train_iters; raise 'trials' or "
                       "'early_stopping.min_resource', or lower 'early_stopping.eta'",
                       s->eta, n, s->rungs[0], R, s->trials);
    }
    return LF_OK;
}

/* ---------------------------------------------------------------- the rest */

static lf_status parse_method(pctx *c, const cJSON *root) {
    lf_sweep_spec *s = c->s;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "method");
    lf_status st;
    s->method = LF_SWEEP_GRID;
    if (m) {
        if (!cJSON_IsString(m)) return BAD(c, "'method' must be \"grid\", \"random\" or \"tpe\"");
        int t = -1;
        for (int i = 0; i < 3; i++)
            if (!strcmp(m->valuestring, k_methods[i])) t = i;
        if (t < 0) return BAD(c, "'method' is '%s'; it must be grid, random or tpe", m->valuestring);
        s->method = (lf_sweep_method)t;
    }
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(root, "trials");
    long long n = 0;
    if (tr && (st = get_int(c, tr, "trials", 1, LF_SWEEP_MAX_TRIALS, &n)) != LF_OK) return st;
    if (s->method == LF_SWEEP_GRID) {
        double size = 1;
        for (int i = 0; i < s->n_dims; i++) {
            const lf_sweep_dim *d = &s->dims[i].pub;
            if (d->type == LF_SWEEP_DIM_UNIFORM || d->type == LF_SWEEP_DIM_LOGUNIFORM)
                return BAD(c,
                           "method grid needs every dimension to list its values, but space key '%s' is %s (use "
                           "method random or tpe, or give 'values')",
                           d->key, k_dim_types[d->type]);
            size *= d->type == LF_SWEEP_DIM_INT ? d->high - d->low + 1 : d->n_values;
        }
        if (size > LF_SWEEP_MAX_TRIALS)
            return BAD(c, "the grid has %.0f points; at most %d", size, LF_SWEEP_MAX_TRIALS);
        s->trials = (long)size;
        if (tr && n != s->trials)
            return BAD(c,
                       "'trials' is %lld but the grid has %ld points (a grid runs each point once; leave 'trials' "
                       "out)",
                       n, s->trials);
    } else {
        if (!tr) return BAD(c, "method %s needs 'trials', the number of trials to run", k_methods[s->method]);
        s->trials = (long)n;
    }
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(root, "seed");
    long long sv = 0;
    if (seed && (st = get_int(c, seed, "seed", 0, 9007199254740992LL, &sv)) != LF_OK) return st;
    s->seed = (uint64_t)sv;
    s->tpe = lf_sweep_tpe_opts_default();
    const cJSON *tpe = cJSON_GetObjectItemCaseSensitive(root, "tpe");
    if (tpe) {
        if (s->method != LF_SWEEP_TPE)
            return BAD(c, "'tpe' options are given but the method is %s", k_methods[s->method]);
        if (!cJSON_IsObject(tpe)) return BAD(c, "'tpe' must be an object");
        static const char *const keys[] = {"startup", "gamma", "candidates", NULL};
        if ((st = only_keys(c, tpe, "tpe", keys)) != LF_OK) return st;
        const cJSON *v;
        long long iv = 0;
        if ((v = cJSON_GetObjectItemCaseSensitive(tpe, "startup"))) {
            if ((st = get_int(c, v, "tpe.startup", 0, LF_SWEEP_MAX_TRIALS, &iv)) != LF_OK) return st;
            s->tpe.startup = (int)iv;
        }
        if ((v = cJSON_GetObjectItemCaseSensitive(tpe, "candidates"))) {
            if ((st = get_int(c, v, "tpe.candidates", 1, 100000, &iv)) != LF_OK) return st;
            s->tpe.candidates = (int)iv;
        }
        if ((v = cJSON_GetObjectItemCaseSensitive(tpe, "gamma"))) {
            if ((st = get_num(c, v, "tpe.gamma", &s->tpe.gamma)) != LF_OK) return st;
            if (!(s->tpe.gamma > 0 && s->tpe.gamma < 1))
                return BAD(c, "'tpe.gamma' is %g; it must be in (0, 1)", s->tpe.gamma);
        }
    }
    return LF_OK;
}

static lf_status parse_run_opts(pctx *c, const cJSON *root) {
    lf_sweep_spec *s = c->s;
    lf_status st;
    long long v = 0;
    const cJSON *o;
    if ((o = cJSON_GetObjectItemCaseSensitive(root, "out_dir"))) {
        if (!cJSON_IsString(o) || !o->valuestring[0] || strlen(o->valuestring) >= sizeof s->out_dir)
            return BAD(c, "'out_dir' must be a non-empty directory name");
        snprintf(s->out_dir, sizeof s->out_dir, "%s", o->valuestring);
    }
    if ((o = cJSON_GetObjectItemCaseSensitive(root, "parallel"))) {
        if ((st = get_int(c, o, "parallel", 1, 1024, &v)) != LF_OK) return st;
        s->parallel = (int)v;
    }
    if ((o = cJSON_GetObjectItemCaseSensitive(root, "threads"))) {
        if ((st = get_int(c, o, "threads", 0, 4096, &v)) != LF_OK) return st;
        s->threads = (int)v;
    }
    const cJSON *sl = cJSON_GetObjectItemCaseSensitive(root, "slurm");
    if (sl) {
        if (!cJSON_IsObject(sl)) return BAD(c, "'slurm' must be an object: {\"workers\": N, \"sbatch\": [options]}");
        static const char *const keys[] = {"workers", "sbatch", NULL};
        if ((st = only_keys(c, sl, "slurm", keys)) != LF_OK) return st;
        if ((o = cJSON_GetObjectItemCaseSensitive(sl, "workers"))) {
            if ((st = get_int(c, o, "slurm.workers", 1, 10000, &v)) != LF_OK) return st;
            s->slurm_workers = (int)v;
        }
        if ((o = cJSON_GetObjectItemCaseSensitive(sl, "sbatch"))) {
            if (!cJSON_IsArray(o)) return BAD(c, "'slurm.sbatch' must be a list of sbatch options");
            int n = cJSON_GetArraySize(o);
            if (n > 256) return BAD(c, "'slurm.sbatch' has %d options; at most 256", n);
            s->sbatch = calloc((size_t)n + 1, sizeof *s->sbatch);
            if (!s->sbatch) return lf_fail(LF_ERR_NOMEM, "sweep '%s': out of memory", c->origin);
            for (const cJSON *e = o->child; e; e = e->next) {
                if (!cJSON_IsString(e) || e->valuestring[0] != '-' || strpbrk(e->valuestring, "\n\r"))
                    return BAD(c, "'slurm.sbatch' entry %d must be an option string starting with '-' (one line)",
                               s->n_sbatch);
                if (!strncmp(e->valuestring, "--array", 7) || !strncmp(e->valuestring, "--wrap", 6) ||
                    !strcmp(e->valuestring, "-a"))
                    return BAD(c, "'slurm.sbatch' entry '%s': the sweep sets --array and --wrap itself",
                               e->valuestring);
                if (!(s->sbatch[s->n_sbatch] = strdup(e->valuestring)))
                    return lf_fail(LF_ERR_NOMEM, "sweep '%s': out of memory", c->origin);
                s->n_sbatch++;
            }
        }
    }
    return LF_OK;
}

/* The normalized text: the file's object with the base inline (and where it was read from). */
static lf_status normalize(pctx *c, const cJSON *root) {
    lf_sweep_spec *s = c->s;
    cJSON *n = cJSON_Duplicate(root, 1);
    cJSON *b = c->s->base_text ? cJSON_Parse(s->base_text) : NULL;
    if (!n || !b) {
        cJSON_Delete(n);
        cJSON_Delete(b);
        return BAD(c, "'base' is not a JSON object: %s", s->base_origin);
    }
    cJSON_ReplaceItemInObjectCaseSensitive(n, "base", b);
    if (s->base_file[0]) {
        cJSON_DeleteItemFromObjectCaseSensitive(n, "base_file");
        cJSON_AddStringToObject(n, "base_file", s->base_file);
    }
    char *p = lf_json_print(n, 0);
    cJSON_Delete(n);
    if (p) {
        s->text = strdup(p);
        cJSON_free(p);
    }
    return s->text ? LF_OK : lf_fail(LF_ERR_NOMEM, "sweep '%s': out of memory", c->origin);
}

lf_status lf_sweep_spec_parse(lf_sweep_spec **out, const char *json, const char *origin, const char *dir,
                              const char *cwd) {
    if (!out || !json) return lf_fail(LF_ERR_INVALID_ARG, "lf_sweep_spec_parse: NULL argument");
    *out = NULL;
    if (!origin) origin = "<text>";
    lf_sweep_spec *s = calloc(1, sizeof *s);
    if (!s) return lf_fail(LF_ERR_NOMEM, "sweep '%s': out of memory", origin);
    pctx ctx = {.s = s, .origin = origin}, *c = &ctx;
    lf_status st = LF_OK;
    if (cwd && *cwd) {
        char *rp = realpath(cwd, NULL);
        snprintf(s->cwd, sizeof s->cwd, "%s", rp ? rp : cwd);
        free(rp);
    } else if (!getcwd(s->cwd, sizeof s->cwd)) {
        s->cwd[0] = 0;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(json, &end, 1);
    if (!root) {
        long line = 1, col = 1;
        for (const char *p = json; end && p < end; p++) {
            if (*p == '\n') {
                line++;
                col = 1;
            } else {
                col++;
            }
        }
        st = lf_fail(LF_ERR_FORMAT, "sweep '%s': not valid JSON (line %ld, column %ld)", origin, line, col);
        goto fail;
    }
    if (!cJSON_IsObject(root)) {
        st = BAD(c, "the sweep file must hold one JSON object");
        goto fail;
    }
    static const char *const keys[] = {"name",  "base",      "base_file",      "set", "space",   "method",   "trials",
                                       "seed",  "objective", "early_stopping", "tpe", "out_dir", "parallel", "threads",
                                       "slurm", NULL};
    if ((st = only_keys(c, root, "", keys)) != LF_OK) goto fail;
    const cJSON *base = cJSON_GetObjectItemCaseSensitive(root, "base");
    if (!base) {
        st = BAD(c, "'base' is missing: the training configuration (a file name or an object) every trial starts from");
        goto fail;
    }
    if ((st = parse_base(c, base, dir)) != LF_OK) goto fail;
    if ((st = parse_set(c, cJSON_GetObjectItemCaseSensitive(root, "set"))) != LF_OK) goto fail;
    if ((st = load_cfg(s, NULL, 0, &c->base)) != LF_OK) {
        st = BAD(c, "the base configuration with 'set': %s", lf_last_error());
        goto fail;
    }
    long long min_res = 0, interval = 0;
    if ((st = parse_stopping(c, cJSON_GetObjectItemCaseSensitive(root, "early_stopping"), &min_res, &interval)) !=
        LF_OK)
        goto fail;
    if ((st = parse_space(c, cJSON_GetObjectItemCaseSensitive(root, "space"))) != LF_OK) goto fail;
    if ((st = parse_method(c, root)) != LF_OK) goto fail;
    if ((st = parse_objective(c, cJSON_GetObjectItemCaseSensitive(root, "objective"))) != LF_OK) goto fail;
    if ((st = make_rungs(c, min_res, interval)) != LF_OK) goto fail;
    if ((st = parse_run_opts(c, root)) != LF_OK) goto fail;
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(root, "name");
    if (nm && !cJSON_IsString(nm)) {
        st = BAD(c, "'name' must be a string");
        goto fail;
    }
    const cJSON *bf = cJSON_GetObjectItemCaseSensitive(root, "base_file");
    if (bf && !cJSON_IsString(bf)) {
        st = BAD(c, "'base_file' must be a string");
        goto fail;
    }
    if ((st = normalize(c, root)) != LF_OK) goto fail;
    cJSON_Delete(root);
    *out = s;
    return LF_OK;
fail:
    cJSON_Delete(root);
    lf_sweep_spec_free(s);
    return st;
}

lf_status lf_sweep_spec_load(lf_sweep_spec **out, const char *path, const char *cwd) {
    if (!out || !path) return lf_fail(LF_ERR_INVALID_ARG, "lf_sweep_spec_load: NULL argument");
    *out = NULL;
    char *text = NULL;
    lf_status st = lf_file_read_all(path, SWEEP_FILE_MAX, &text, NULL);
    if (st != LF_OK) return st;
    char dir[LF_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    st = lf_sweep_spec_parse(out, text, path, slash ? (dir[0] ? dir : "/") : NULL, cwd);
    lf_free(text);
    return st;
}

/* ---------------------------------------------------------------- a trial's configuration */

/* "key=value" of every dimension at point x into ov (each lf_alloc'd by the caller's buffer). */
lf_status lf__sweep_point_overrides(const lf_sweep_spec *s, const double *x, char ov[][LF_SWEEP_OV_MAX]) {
    for (int d = 0; d < s->n_dims; d++) {
        char v[LF_SWEEP_OV_MAX];
        lf_sweep_value_text(s, d, x[d], v, sizeof v);
        int n = snprintf(ov[d], LF_SWEEP_OV_MAX, "%s=%s", s->dims[d].key, v);
        if (n < 0 || n >= LF_SWEEP_OV_MAX)
            return lf_fail(LF_ERR_INVALID_ARG, "sweep: the value of '%s' is too long for an override", s->dims[d].key);
    }
    return LF_OK;
}

lf_status lf_sweep_trial_config_json(const lf_sweep_spec *s, const lf_sweep_trial *t, const char *out_dir,
                                     char **json) {
    if (!s || !t || !json) return lf_fail(LF_ERR_INVALID_ARG, "lf_sweep_trial_config_json: NULL argument");
    *json = NULL;
    char(*buf)[LF_SWEEP_OV_MAX] = calloc(LF_SWEEP_MAX_DIMS + 1, LF_SWEEP_OV_MAX);
    if (!buf) return lf_fail(LF_ERR_NOMEM, "out of memory");
    lf_status st = lf__sweep_point_overrides(s, t->x, buf);
    const char *p[LF_SWEEP_MAX_DIMS + 1];
    int n = 0;
    for (int d = 0; d < s->n_dims; d++) p[n++] = buf[d];
    if (st == LF_OK && out_dir) {
        st = lf__sweep_string_override("out_dir", out_dir, buf[n], LF_SWEEP_OV_MAX);
        p[n] = buf[n];
        n++;
    }
    lf_train_config cfg;
    if (st == LF_OK) st = load_cfg(s, p, n, &cfg);
    free(buf);
    if (st != LF_OK) return st;
    *json = lf_train_config_to_json(&cfg);
    return *json ? LF_OK : LF_ERR_NOMEM;
}
