/*
 * The task harness: task files (JSON Lines) -> validated tasks; running them
 * on a model (dispatch to task_ll.c and task_gen.c); results as metrics,
 * JSON and a table. The file format and every definition are in eval.h
 * ("tasks") and docs/eval.md.
 *
 * Loading is strict where a mistake would silently change a score: unknown
 * header keys, mistyped fields, out-of-range gold indices, labels outside the
 * label set and invalid UTF-8 are errors naming file:line. Unknown fields on
 * example lines are ignored (datasets carry ids and metadata).
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "core/strbuf.h"
#include "eval/tasks_impl.h"

#define TASK_FILE_MAX_BYTES ((size_t)1 << 30)
#define MAX_TASKS 1024

static const char *const kind_names[] = {"unset",      "perplexity", "multiple_choice", "classification",
                                         "generation", "ranking",    "exact_match"};
/* The field whose absence makes a first line a header. */
static const char *const main_field[] = {NULL, "text", "context", "text", "prompt", "query", "prompt"};
#define N_KINDS 7

const char *lf_eval_kind_name(lf_eval_kind k) { return (unsigned)k < N_KINDS ? kind_names[k] : "unset"; }

lf_status lf_eval_kind_parse(const char *name, lf_eval_kind *out) {
    if (!name || !out) return lf_fail(LF_ERR_INVALID_ARG, "eval: NULL argument");
    for (int k = 1; k < N_KINDS; k++)
        if (!strcmp(name, kind_names[k])) {
            *out = (lf_eval_kind)k;
            return LF_OK;
        }
    return lf_fail(LF_ERR_INVALID_ARG,
                   "unknown task kind '%s' (perplexity, multiple_choice, classification, generation, ranking, "
                   "exact_match)",
                   name);
}

lf_eval_load_opts lf_eval_load_opts_default(void) {
    lf_eval_load_opts o = {LF_EVAL_KIND_UNSET, 0, NULL};
    return o;
}

lf_eval_run_opts lf_eval_run_opts_default(void) {
    lf_eval_run_opts o = {0, 0, 0};
    return o;
}

char *lf__ev_strdup(const char *s) {
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (!d) {
        lf_fail(LF_ERR_NOMEM, "eval: out of memory");
        return NULL;
    }
    memcpy(d, s, n + 1);
    return d;
}

/* ---------------------------------------------------------------- freeing */
static void free_strv(char **v, int n) {
    if (!v) return;
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

static void free_task(ev_task *t) {
    free(t->file);
    free(t->name);
    free(t->delim);
    free_strv(t->labels, t->n_labels);
    free_strv(t->verb_from, t->n_verb);
    free_strv(t->verb_to, t->n_verb);
    free_strv(t->stop, t->n_stop);
    free(t->text);
    free(t->text_path);
    free(t->dataset_dir);
    free(t->split);
    for (size_t i = 0; i < t->n_shards; i++) lf_shard_close(t->shards[i]);
    free(t->shards);
    free(t->shard_start);
    lf_tokenizer_free(t->ds_tok);
    lf_dataset_close(t->ds);
    for (size_t i = 0; i < t->n_ex; i++) {
        ev_example *e = &t->ex[i];
        free(e->text);
        free_strv(e->items, e->n_items);
        free(e->gold);
        free(e->filtered);
    }
    free(t->ex);
}

void lf_eval_tasks_free(lf_eval_tasks *t) {
    if (!t) return;
    for (int i = 0; i < t->n; i++) free_task(&t->task[i]);
    free(t->task);
    free(t);
}

int lf_eval_tasks_count(const lf_eval_tasks *t) { return t ? t->n : 0; }
const char *lf_eval_task_name(const lf_eval_tasks *t, int i) {
    return t && i >= 0 && i < t->n ? t->task[i].name : NULL;
}
const char *lf_eval_task_file(const lf_eval_tasks *t, int i) {
    return t && i >= 0 && i < t->n ? t->task[i].file : NULL;
}
lf_eval_kind lf_eval_task_kind(const lf_eval_tasks *t, int i) {
    return t && i >= 0 && i < t->n ? t->task[i].kind : LF_EVAL_KIND_UNSET;
}
size_t lf_eval_task_size(const lf_eval_tasks *t, int i) { return t && i >= 0 && i < t->n ? t->task[i].n_ex : 0; }

/* ---------------------------------------------------------------- field helpers */
/* "FILE:LINE: message" as LF_ERR_FORMAT. */
static lf_status ferr(const char *file, long line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static lf_status ferr(const char *file, long line, const char *fmt, ...) {
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (line > 0) return lf_fail(LF_ERR_FORMAT, "%s:%ld: %s", file, line, msg);
    return lf_fail(LF_ERR_FORMAT, "%s: %s", file, msg);
}

typedef struct lctx {
    const char *file;
    long line;
} lctx;

static const cJSON *field(const cJSON *o, const char *key) { return cJSON_GetObjectItemCaseSensitive(o, key); }

/* A string field; required: missing is an error; *out NULL when absent. */
static lf_status get_str(const lctx *c, const cJSON *o, const char *key, int required, int allow_empty, char **out) {
    *out = NULL;
    const cJSON *v = field(o, key);
    if (!v) return required ? ferr(c->file, c->line, "field '%s' is missing", key) : LF_OK;
    if (!cJSON_IsString(v)) return ferr(c->file, c->line, "field '%s' must be a string", key);
    if (!allow_empty && !v->valuestring[0]) return ferr(c->file, c->line, "field '%s' is empty", key);
    *out = lf__ev_strdup(v->valuestring);
    return *out ? LF_OK : LF_ERR_NOMEM;
}

/* A list of strings (or, when allow_single, one string). Items may not be
 * empty unless allow_empty_items. */
static lf_status get_strv(const lctx *c, const cJSON *v, const char *key, int allow_single, int allow_empty_items,
                          char ***out, int *n) {
    *out = NULL;
    *n = 0;
    if (allow_single && cJSON_IsString(v)) {
        if (!allow_empty_items && !v->valuestring[0]) return ferr(c->file, c->line, "field '%s' is empty", key);
        char **a = malloc(sizeof *a);
        if (!a || !(a[0] = lf__ev_strdup(v->valuestring))) {
            free(a);
            return lf_fail(LF_ERR_NOMEM, "eval: out of memory");
        }
        *out = a;
        *n = 1;
        return LF_OK;
    }
    if (!cJSON_IsArray(v))
        return ferr(c->file, c->line, "field '%s' must be %s", key,
                    allow_single ? "a string or a list of strings" : "a list of strings");
    int k = cJSON_GetArraySize(v);
    if (k < 1) return ferr(c->file, c->line, "field '%s' is an empty list", key);
    if (k > EV_MAX_ITEMS) return ferr(c->file, c->line, "field '%s' has %d entries, at most %d", key, k, EV_MAX_ITEMS);
    char **a = calloc((size_t)k, sizeof *a);
    if (!a) return lf_fail(LF_ERR_NOMEM, "eval: out of memory");
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, v) {
        if (!cJSON_IsString(e)) {
            free_strv(a, k);
            return ferr(c->file, c->line, "field '%s': entry %d is not a string", key, i);
        }
        if (!allow_empty_items && !e->valuestring[0]) {
            free_strv(a, k);
            return ferr(c->file, c->line, "field '%s': entry %d is empty", key, i);
        }
        if (!(a[i] = lf__ev_strdup(e->valuestring))) {
            free_strv(a, k);
            return LF_ERR_NOMEM;
        }
        i++;
    }
    *out = a;
    *n = k;
    return LF_OK;
}

/* An integral JSON number in [lo, hi]. */
static int as_int(const cJSON *v, double lo, double hi, long *out) {
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d) || d < lo || d > hi) return 0;
    *out = (long)d;
    return 1;
}

/* An index or a list of indices, each in [0, n). `what` names the range
 * ("choices", "candidates"). */
static lf_status get_indices(const lctx *c, const cJSON *v, const char *key, int n, const char *what, int *required,
                             int **out, int *n_out) {
    *out = NULL;
    *n_out = 0;
    if (!v) return *required ? ferr(c->file, c->line, "field '%s' is missing", key) : LF_OK;
    int k = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 1;
    if (cJSON_IsArray(v) && k < 1 && *required) return ferr(c->file, c->line, "field '%s' is an empty list", key);
    if (k > EV_MAX_ITEMS) return ferr(c->file, c->line, "field '%s' has %d entries, at most %d", key, k, EV_MAX_ITEMS);
    int *a = malloc(sizeof(int) * (size_t)(k ? k : 1));
    if (!a) return lf_fail(LF_ERR_NOMEM, "eval: out of memory");
    int i = 0;
    const cJSON *e = cJSON_IsArray(v) ? v->child : v;
    for (; i < k; i++, e = e->next) {
        long x;
        if (!as_int(e, -1e15, 1e15, &x)) {
            free(a);
            return ferr(c->file, c->line, "field '%s' must be %s", key,
                        cJSON_IsArray(v) ? "a list of integer indices" : "an integer index or a list of them");
        }
        if (x < 0 || x >= n) {
            free(a);
            return ferr(c->file, c->line, "%s %ld is out of range (%d %s)", key, x, n, what);
        }
        a[i] = (int)x;
    }
    *out = a;
    *n_out = k;
    return LF_OK;
}

/* ---------------------------------------------------------------- header */
static int is_ll_kind(lf_eval_kind k) {
    return k == LF_EVAL_MULTIPLE_CHOICE || k == LF_EVAL_CLASSIFICATION || k == LF_EVAL_RANKING;
}
static int is_gen_kind(lf_eval_kind k) { return k == LF_EVAL_GENERATION || k == LF_EVAL_EXACT_MATCH; }

static const char *header_keys(lf_eval_kind k) {
    switch (k) {
    case LF_EVAL_PERPLEXITY: return "task, name, text_file, dataset, split, stride";
    case LF_EVAL_MULTIPLE_CHOICE: return "task, name, target_delimiter";
    case LF_EVAL_CLASSIFICATION: return "task, name, target_delimiter, labels, verbalizers";
    case LF_EVAL_RANKING: return "task, name, target_delimiter, ties, hits";
    case LF_EVAL_GENERATION:
    case LF_EVAL_EXACT_MATCH: return "task, name, stop, max_new_tokens, temperature, top_k, seed";
    default: return "task, name";
    }
}

/* Join dir-of(base_file) and rel, unless rel is absolute. */
static char *resolve_rel(const char *base_file, const char *rel) {
    if (rel[0] == '/') return lf__ev_strdup(rel);
    const char *slash = strrchr(base_file, '/');
    size_t dl = slash ? (size_t)(slash - base_file) + 1 : 0;
    size_t rl = strlen(rel);
    char *p = malloc(dl + rl + 1);
    if (!p) {
        lf_fail(LF_ERR_NOMEM, "eval: out of memory");
        return NULL;
    }
    memcpy(p, base_file, dl);
    memcpy(p + dl, rel, rl + 1);
    return p;
}

static lf_status parse_header(ev_task *t, const lctx *c, const cJSON *o) {
    lf_status st = LF_OK;
    const cJSON *verb = NULL;
    for (const cJSON *it = o->child; it && st == LF_OK; it = it->next) {
        const char *k = it->string;
        lf_eval_kind kd = t->kind;
        long x;
        if (!strcmp(k, "task")) {
            continue;
        } else if (!strcmp(k, "name")) {
            if (!cJSON_IsString(it) || !it->valuestring[0] || strchr(it->valuestring, '/'))
                return ferr(c->file, c->line, "header key 'name' must be a non-empty string without '/'");
            free(t->name);
            if (!(t->name = lf__ev_strdup(it->valuestring))) return LF_ERR_NOMEM;
        } else if (!strcmp(k, "target_delimiter") && is_ll_kind(kd)) {
            if (!cJSON_IsString(it)) return ferr(c->file, c->line, "header key 'target_delimiter' must be a string");
            free(t->delim);
            if (!(t->delim = lf__ev_strdup(it->valuestring))) return LF_ERR_NOMEM;
        } else if (!strcmp(k, "labels") && kd == LF_EVAL_CLASSIFICATION) {
            st = get_strv(c, it, "labels", 0, 0, &t->labels, &t->n_labels);
            for (int i = 0; st == LF_OK && i < t->n_labels; i++)
                for (int j = 0; j < i; j++)
                    if (!strcmp(t->labels[i], t->labels[j]))
                        return ferr(c->file, c->line, "header key 'labels': '%s' is listed twice", t->labels[i]);
        } else if (!strcmp(k, "verbalizers") && kd == LF_EVAL_CLASSIFICATION) {
            verb = it;
        } else if (!strcmp(k, "ties") && kd == LF_EVAL_RANKING) {
            const char *v = cJSON_IsString(it) ? it->valuestring : "";
            if (!strcmp(v, "pessimistic")) t->ties = LF_TIES_PESSIMISTIC;
            else if (!strcmp(v, "optimistic")) t->ties = LF_TIES_OPTIMISTIC;
            else if (!strcmp(v, "average")) t->ties = LF_TIES_AVERAGE;
            else
                return ferr(c->file, c->line,
                            "header key 'ties' must be \"pessimistic\", \"optimistic\" or \"average\"");
        } else if (!strcmp(k, "hits") && kd == LF_EVAL_RANKING) {
            int n = cJSON_IsArray(it) ? cJSON_GetArraySize(it) : 0;
            if (n < 1 || n > LF_RANKING_MAX_K)
                return ferr(c->file, c->line, "header key 'hits' must be a list of 1 to %d integers >= 1",
                            LF_RANKING_MAX_K);
            int i = 0;
            const cJSON *e;
            cJSON_ArrayForEach(e, it) {
                if (!as_int(e, 1, 1e9, &x))
                    return ferr(c->file, c->line, "header key 'hits' must be a list of 1 to %d integers >= 1",
                                LF_RANKING_MAX_K);
                t->hits[i++] = x;
            }
            t->n_hits = n;
        } else if (!strcmp(k, "stop") && is_gen_kind(kd)) {
            free_strv(t->stop, t->n_stop);
            t->stop = NULL;
            t->n_stop = 0;
            t->stop_given = 1;
            if (!(cJSON_IsArray(it) && cJSON_GetArraySize(it) == 0)) /* [] = no stop strings */
                st = get_strv(c, it, "stop", 1, 0, &t->stop, &t->n_stop);
        } else if (!strcmp(k, "max_new_tokens") && is_gen_kind(kd)) {
            if (!as_int(it, 0, 1 << 20, &x))
                return ferr(c->file, c->line, "header key 'max_new_tokens' must be an integer in [0, %d]", 1 << 20);
            t->max_new_tokens = (int)x;
        } else if (!strcmp(k, "temperature") && is_gen_kind(kd)) {
            if (!cJSON_IsNumber(it) || !(it->valuedouble >= 0 && it->valuedouble <= 100))
                return ferr(c->file, c->line, "header key 'temperature' must be a number in [0, 100]");
            t->temperature = (float)it->valuedouble;
        } else if (!strcmp(k, "top_k") && is_gen_kind(kd)) {
            if (!as_int(it, 0, 1 << 30, &x))
                return ferr(c->file, c->line, "header key 'top_k' must be an integer >= 0");
            t->top_k = (int)x;
        } else if (!strcmp(k, "seed") && is_gen_kind(kd)) {
            if (!as_int(it, 0, 9007199254740992.0, &x))
                return ferr(c->file, c->line, "header key 'seed' must be an integer in [0, 2^53]");
            t->seed = (uint64_t)x;
        } else if ((!strcmp(k, "text_file") || !strcmp(k, "dataset")) && kd == LF_EVAL_PERPLEXITY) {
            if (!cJSON_IsString(it) || !it->valuestring[0])
                return ferr(c->file, c->line, "header key '%s' must be a path", k);
            if (t->text_path || t->dataset_dir)
                return ferr(c->file, c->line, "give either 'text_file' or 'dataset', not both");
            char *p = resolve_rel(c->file, it->valuestring);
            if (!p) return LF_ERR_NOMEM;
            if (k[0] == 't') t->text_path = p;
            else t->dataset_dir = p;
        } else if (!strcmp(k, "split") && kd == LF_EVAL_PERPLEXITY) {
            if (!cJSON_IsString(it) || !it->valuestring[0])
                return ferr(c->file, c->line, "header key 'split' must be a split name");
            free(t->split);
            if (!(t->split = lf__ev_strdup(it->valuestring))) return LF_ERR_NOMEM;
        } else if (!strcmp(k, "stride") && kd == LF_EVAL_PERPLEXITY) {
            if (!as_int(it, 1, 1 << 24, &x))
                return ferr(c->file, c->line, "header key 'stride' must be an integer >= 1");
            t->stride = x;
        } else {
            return ferr(c->file, c->line,
                        "unknown header key '%s' for a %s task (this line has no '%s' field, so it "
                        "is the header; keys: %s)",
                        k, kind_names[kd], main_field[kd], header_keys(kd));
        }
    }
    if (st != LF_OK || !verb) return st;
    /* verbalizers: {label: text} or a list parallel to labels */
    if (cJSON_IsArray(verb)) {
        if (!t->labels) return ferr(c->file, c->line, "header key 'verbalizers' as a list needs 'labels'");
        char **to;
        int n;
        if ((st = get_strv(c, verb, "verbalizers", 0, 1, &to, &n)) != LF_OK) return st;
        if (n != t->n_labels) {
            free_strv(to, n);
            return ferr(c->file, c->line, "header key 'verbalizers' has %d entries, 'labels' %d", n, t->n_labels);
        }
        t->verb_to = to;
        t->verb_from = calloc((size_t)n, sizeof(char *));
        t->n_verb = n;
        if (!t->verb_from) return lf_fail(LF_ERR_NOMEM, "eval: out of memory");
        for (int i = 0; i < n; i++)
            if (!(t->verb_from[i] = lf__ev_strdup(t->labels[i]))) return LF_ERR_NOMEM;
        return LF_OK;
    }
    if (!cJSON_IsObject(verb))
        return ferr(c->file, c->line, "header key 'verbalizers' must be an object {label: text} or a list of strings");
    int n = cJSON_GetArraySize(verb);
    t->verb_from = calloc((size_t)(n ? n : 1), sizeof(char *));
    t->verb_to = calloc((size_t)(n ? n : 1), sizeof(char *));
    if (!t->verb_from || !t->verb_to) return lf_fail(LF_ERR_NOMEM, "eval: out of memory");
    t->n_verb = n;
    int i = 0;
    for (const cJSON *e = verb->child; e; e = e->next, i++) {
        if (!cJSON_IsString(e))
            return ferr(c->file, c->line, "header key 'verbalizers': '%s' is not a string", e->string);
        if (t->labels) {
            int found = 0;
            for (int j = 0; j < t->n_labels; j++) found |= !strcmp(t->labels[j], e->string);
            if (!found)
                return ferr(c->file, c->line, "header key 'verbalizers': '%s' is not one of the labels", e->string);
        }
        if (!(t->verb_from[i] = lf__ev_strdup(e->string)) || !(t->verb_to[i] = lf__ev_strdup(e->valuestring)))
            return LF_ERR_NOMEM;
    }
    return LF_OK;
}

/* ---------------------------------------------------------------- examples */
static lf_status parse_example(ev_task *t, const lctx *c, const cJSON *o) {
    if (t->n_ex == t->cap_ex) {
        size_t nc = t->cap_ex ? 2 * t->cap_ex : 64;
        ev_example *ne = realloc(t->ex, nc * sizeof *ne);
        if (!ne) return lf_fail(LF_ERR_NOMEM, "eval: out of memory");
        t->ex = ne;
        t->cap_ex = nc;
    }
    ev_example *e = &t->ex[t->n_ex];
    memset(e, 0, sizeof *e);
    t->n_ex++; /* counted now so free_task releases a half-built example */
    e->line = c->line;
    /* a header key on an example line would be ignored silently: say so */
    static const char *const header_only[] = {"target_delimiter", "verbalizers", "ties",  "hits", "stop",
                                              "max_new_tokens",   "temperature", "top_k", "seed", "text_file",
                                              "dataset",          "split",       "stride"};
    for (size_t i = 0; i < sizeof header_only / sizeof header_only[0]; i++)
        if (field(o, header_only[i]) && strstr(header_keys(t->kind), header_only[i]))
            return ferr(c->file, c->line, "'%s' is a header key: put it on a first line without a '%s' field",
                        header_only[i], main_field[t->kind]);
    lf_status st;
    int req = 1, opt = 0;
    switch (t->kind) {
    case LF_EVAL_PERPLEXITY: return get_str(c, o, "text", 1, 0, &e->text);
    case LF_EVAL_MULTIPLE_CHOICE: {
        if ((st = get_str(c, o, "context", 1, 1, &e->text)) != LF_OK) return st;
        const cJSON *v = field(o, "choices");
        if (!v) return ferr(c->file, c->line, "field 'choices' is missing");
        if ((st = get_strv(c, v, "choices", 0, 0, &e->items, &e->n_items)) != LF_OK) return st;
        return get_indices(c, field(o, "gold"), "gold", e->n_items, "choices", &req, &e->gold, &e->n_gold);
    }
    case LF_EVAL_RANKING: {
        if ((st = get_str(c, o, "query", 1, 1, &e->text)) != LF_OK) return st;
        const cJSON *v = field(o, "candidates");
        if (!v) return ferr(c->file, c->line, "field 'candidates' is missing");
        if ((st = get_strv(c, v, "candidates", 0, 0, &e->items, &e->n_items)) != LF_OK) return st;
        if ((st = get_indices(c, field(o, "gold"), "gold", e->n_items, "candidates", &req, &e->gold, &e->n_gold)) !=
            LF_OK)
            return st;
        return get_indices(c, field(o, "filtered"), "filtered", e->n_items, "candidates", &opt, &e->filtered,
                           &e->n_filtered);
    }
    case LF_EVAL_CLASSIFICATION: {
        if ((st = get_str(c, o, "text", 1, 1, &e->text)) != LF_OK) return st;
        const cJSON *v = field(o, "labels");
        if (v) {
            if ((st = get_strv(c, v, "labels", 0, 0, &e->items, &e->n_items)) != LF_OK) return st;
            for (int i = 0; i < e->n_items; i++)
                for (int j = 0; j < i; j++)
                    if (!strcmp(e->items[i], e->items[j]))
                        return ferr(c->file, c->line, "field 'labels': '%s' is listed twice", e->items[i]);
        }
        char **set = v ? e->items : t->labels;
        int n = v ? e->n_items : t->n_labels;
        if (!set) return ferr(c->file, c->line, "no label set: give 'labels' in the header or on the line");
        const cJSON *g = field(o, "label");
        if (!g) return ferr(c->file, c->line, "field 'label' is missing");
        e->gold = malloc(sizeof(int));
        if (!e->gold) return lf_fail(LF_ERR_NOMEM, "eval: out of memory");
        e->n_gold = 1;
        long x;
        if (cJSON_IsString(g)) {
            for (int i = 0; i < n; i++)
                if (!strcmp(set[i], g->valuestring)) {
                    e->gold[0] = i;
                    return LF_OK;
                }
            char list[512] = "";
            for (int i = 0; i < n && strlen(list) < 400; i++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s'%s'", i ? ", " : "", set[i]);
            return ferr(c->file, c->line, "label '%s' is not in the label set (%s)", g->valuestring, list);
        }
        if (!as_int(g, -1e15, 1e15, &x)) return ferr(c->file, c->line, "field 'label' must be a string or an index");
        if (x < 0 || x >= n) return ferr(c->file, c->line, "label %ld is out of range (%d labels)", x, n);
        e->gold[0] = (int)x;
        return LF_OK;
    }
    case LF_EVAL_GENERATION: {
        if ((st = get_str(c, o, "prompt", 1, 1, &e->text)) != LF_OK) return st;
        const cJSON *v = field(o, "references"), *r = field(o, "response");
        if (v && r) return ferr(c->file, c->line, "give 'references' or 'response', not both");
        if (!v && !r) return ferr(c->file, c->line, "field 'references' (or 'response') is missing");
        return get_strv(c, v ? v : r, v ? "references" : "response", 1, 1, &e->items, &e->n_items);
    }
    case LF_EVAL_EXACT_MATCH: {
        if ((st = get_str(c, o, "prompt", 1, 1, &e->text)) != LF_OK) return st;
        /* "response": the prompt/response pairs of fine-tuning sets (llmforge data arithmetic) */
        static const char *const keys[] = {"answers", "answer", "response"};
        const cJSON *a = NULL;
        const char *ak = NULL;
        for (int i = 0; i < 3; i++) {
            const cJSON *v = field(o, keys[i]);
            if (v && a) return ferr(c->file, c->line, "give one of 'answer', 'answers', 'response', not several");
            if (v) {
                a = v;
                ak = keys[i];
            }
        }
        if (!a) return ferr(c->file, c->line, "field 'answer' (or 'answers', 'response') is missing");
        return get_strv(c, a, ak, 1, 1, &e->items, &e->n_items);
    }
    default: return lf_fail(LF_ERR_INTERNAL, "eval: task kind %d", (int)t->kind);
    }
}

/* ---------------------------------------------------------------- files */
static int ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && !strcmp(s + n - k, suf);
}

/* Default task name: the file name without directories and extension. */
static char *default_name(const char *path) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--; /* "data/ds/" */
    const char *b = path;
    for (size_t i = 0; i < n; i++)
        if (path[i] == '/' && i + 1 < n) b = path + i + 1;
    size_t bl = (size_t)(path + n - b);
    const char *dot = NULL;
    for (size_t i = 1; i < bl; i++)
        if (b[i] == '.') dot = b + i;
    if (dot) bl = (size_t)(dot - b);
    char *s = malloc(bl + 1);
    if (!s) {
        lf_fail(LF_ERR_NOMEM, "eval: out of memory");
        return NULL;
    }
    memcpy(s, b, bl);
    s[bl] = 0;
    return s;
}

/* Line number (1-based) of byte offset off in buf. */
static long line_of(const char *buf, size_t off) {
    long line = 1;
    for (size_t i = 0; i < off; i++) line += buf[i] == '\n';
    return line;
}

/* Read a whole UTF-8 text file (errors name it and the line). */
static lf_status read_text(const char *path, const char *what_file, long what_line, char **out, size_t *len) {
    lf_status st = lf_file_read_all(path, TASK_FILE_MAX_BYTES, out, len);
    if (st != LF_OK) {
        if (what_file) lf_error_prefix("%s:%ld", what_file, what_line);
        return st;
    }
    size_t bad;
    if (lf_utf8_validate(*out, *len, "text", &bad) != LF_OK) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s", lf_last_error());
        long ln = line_of(*out, bad);
        lf_free(*out);
        *out = NULL;
        return lf_fail(LF_ERR_FORMAT, "%s:%ld: %s", path, ln, msg);
    }
    if (memchr(*out, 0, *len)) {
        long ln = line_of(*out, (size_t)((char *)memchr(*out, 0, *len) - *out));
        lf_free(*out);
        *out = NULL;
        return lf_fail(LF_ERR_FORMAT, "%s:%ld: the text holds a NUL byte", path, ln);
    }
    return LF_OK;
}

/* Open a dataset split for perplexity: lf_dataset_open validates the
 * manifest and shards; the split's shard list is read from dataset.json
 * (any split name, including ones lf_dataset does not sample from). */
static lf_status open_dataset(ev_task *t, const char *where, long line) {
    lf_status st = lf_dataset_open(&t->ds, t->dataset_dir);
    if (st != LF_OK) {
        lf_error_prefix("%s:%ld: dataset", where, line);
        return st;
    }
    if (!t->split && !(t->split = lf__ev_strdup("val"))) return LF_ERR_NOMEM;
    st = lf_tokenizer_open(&t->ds_tok, lf_dataset_tokenizer_spec(t->ds), NULL);
    if (st != LF_OK) {
        lf_error_prefix("%s:%ld: dataset '%s'", where, line, t->dataset_dir);
        return st;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/dataset.json", lf_dataset_dir(t->ds));
    char *buf = NULL;
    size_t len;
    if ((st = lf_file_read_all(path, 64u << 20, &buf, &len)) != LF_OK) return st;
    cJSON *root = cJSON_Parse(buf);
    lf_free(buf);
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "splits"), t->split);
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(sp, "shards");
    int n = cJSON_IsArray(sh) ? cJSON_GetArraySize(sh) : 0;
    if (n < 1) {
        cJSON_Delete(root);
        return ferr(where, line, "dataset '%s' has no split '%s'", t->dataset_dir, t->split);
    }
    t->shards = calloc((size_t)n, sizeof *t->shards);
    t->shard_start = calloc((size_t)n + 1, sizeof *t->shard_start);
    if (!t->shards || !t->shard_start) {
        cJSON_Delete(root);
        return lf_fail(LF_ERR_NOMEM, "eval: out of memory");
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, sh) {
        if (!cJSON_IsString(e)) {
            st = ferr(where, line, "dataset '%s': splits.%s.shards holds a non-string", t->dataset_dir, t->split);
            break;
        }
        snprintf(path, sizeof path, "%s/%s", lf_dataset_dir(t->ds), e->valuestring);
        if ((st = lf_shard_open(&t->shards[t->n_shards], path, 1)) != LF_OK) break;
        t->shard_start[t->n_shards + 1] = t->shard_start[t->n_shards] + lf_shard_num_tokens(t->shards[t->n_shards]);
        t->n_shards++;
    }
    cJSON_Delete(root);
    if (st == LF_OK && t->shard_start[t->n_shards] < 2)
        st = ferr(where, line, "dataset '%s': split '%s' holds fewer than 2 tokens", t->dataset_dir, t->split);
    return st;
}

static lf_status load_file(ev_task *t, const char *path, const lf_eval_load_opts *o, lf_eval_kind kind) {
    lf_status st;
    t->kind = kind;
    t->ties = LF_TIES_PESSIMISTIC;
    t->hits[0] = 1;
    t->hits[1] = 3;
    t->hits[2] = 10;
    t->n_hits = 3;
    t->max_new_tokens = -1;
    t->seed = 1337;
    if (!(t->file = lf__ev_strdup(path)) || !(t->delim = lf__ev_strdup(" "))) return LF_ERR_NOMEM;

    if (kind == LF_EVAL_PERPLEXITY && !ends_with(path, ".jsonl") && !ends_with(path, ".json")) {
        /* a plain text file or a dataset directory */
        struct stat sb;
        if (stat(path, &sb) != 0)
            return lf_fail(errno == ENOENT ? LF_ERR_NOT_FOUND : LF_ERR_IO, "%s: %s", path, strerror(errno));
        if (!(t->name = default_name(path))) return LF_ERR_NOMEM;
        t->limit_windows = o->limit;
        if (S_ISDIR(sb.st_mode)) {
            if (!(t->dataset_dir = lf__ev_strdup(path))) return LF_ERR_NOMEM;
            return open_dataset(t, path, 0);
        }
        if (!(t->text_path = lf__ev_strdup(path))) return LF_ERR_NOMEM;
        if ((st = read_text(path, NULL, 0, &t->text, &t->text_len)) != LF_OK) return st;
        if (!t->text_len) return ferr(path, 0, "the text is empty");
        return LF_OK;
    }

    char *buf = NULL;
    size_t len = 0;
    if ((st = lf_file_read_all(path, TASK_FILE_MAX_BYTES, &buf, &len)) != LF_OK) return st;
    size_t bad;
    if (lf_utf8_validate(buf, len, "text", &bad) != LF_OK) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s", lf_last_error());
        st = ferr(path, line_of(buf, bad), "%s", msg);
        lf_free(buf);
        return st;
    }
    lctx c = {path, 0};
    long header_line = 0;
    int seen = 0;
    char *p = buf, *end = buf + len;
    while (p < end && st == LF_OK) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *le = nl ? nl : end;
        c.line++;
        char *line = p;
        p = nl ? nl + 1 : end;
        if (le > line && le[-1] == '\r') le--;
        *le = 0; /* buf has a NUL at end, and '\n' / '\r' are overwritten */
        const char *q = line;
        while (*q == ' ' || *q == '\t' || *q == '\r') q++;
        if (!*q) continue;
        if (memchr(line, 0, (size_t)(le - line))) {
            st = ferr(path, c.line, "the line holds a NUL byte");
            break;
        }
        const char *perr = NULL;
        cJSON *obj = cJSON_ParseWithOpts(line, &perr, 1);
        if (!obj || !cJSON_IsObject(obj)) {
            if (!obj) {
                const char *at = cJSON_GetErrorPtr();
                long col = at && at >= line && at <= le ? (long)(at - line) + 1 : 1;
                st = ferr(path, c.line, "invalid JSON (near column %ld)", col);
            } else {
                st = ferr(path, c.line, "expected a JSON object, one per line");
            }
            cJSON_Delete(obj);
            break;
        }
        const cJSON *tk = field(obj, "task");
        lf_eval_kind lk = LF_EVAL_KIND_UNSET;
        if (tk) {
            if (!cJSON_IsString(tk)) st = ferr(path, c.line, "field 'task' must be a string");
            else if (lf_eval_kind_parse(tk->valuestring, &lk) != LF_OK) {
                char msg[300];
                snprintf(msg, sizeof msg, "%s", lf_last_error());
                st = ferr(path, c.line, "%s", msg);
            }
        }
        if (st == LF_OK && !seen) {
            if (lk != LF_EVAL_KIND_UNSET) t->kind = lk; /* the file's own kind wins over the default */
            else if (t->kind == LF_EVAL_KIND_UNSET)
                st = ferr(path, c.line,
                          "no task kind: add \"task\": \"multiple_choice\" (or perplexity, classification, generation, "
                          "ranking, exact_match) to the first line, or give the kind (--kind)");
            if (st == LF_OK && !field(obj, main_field[t->kind])) {
                header_line = c.line;
                st = parse_header(t, &c, obj);
                seen = 1;
                cJSON_Delete(obj);
                continue;
            }
        } else if (st == LF_OK && lk != LF_EVAL_KIND_UNSET && lk != t->kind) {
            st = ferr(path, c.line, "task '%s' differs from the file's '%s' (one file holds one task)", kind_names[lk],
                      kind_names[t->kind]);
        }
        seen = 1;
        if (st == LF_OK && (o->limit <= 0 || t->n_ex < (size_t)o->limit)) st = parse_example(t, &c, obj);
        cJSON_Delete(obj);
    }
    lf_free(buf);
    if (st != LF_OK) return st;
    if (!seen) return ferr(path, 0, "no examples (the file is empty)");
    if (!t->name && !(t->name = default_name(path))) return LF_ERR_NOMEM;
    if (t->kind == LF_EVAL_PERPLEXITY && (t->text_path || t->dataset_dir)) {
        if (t->n_ex)
            return ferr(path, t->ex[0].line, "a perplexity task reads 'text' lines or the header's %s, not both",
                        t->text_path ? "text_file" : "dataset");
        t->limit_windows = o->limit; /* --limit counts windows of a text file or dataset */
        if (t->dataset_dir) return open_dataset(t, path, header_line);
        if ((st = read_text(t->text_path, path, header_line, &t->text, &t->text_len)) != LF_OK) return st;
        if (!t->text_len) return ferr(t->text_path, 0, "the text is empty");
        return LF_OK;
    }
    if (!t->n_ex) return ferr(path, 0, "no examples after the header line");
    if (t->kind == LF_EVAL_EXACT_MATCH && !t->stop_given) {
        /* short answers end at the end of the line, unless the header says otherwise ("stop": []) */
        if (!(t->stop = malloc(sizeof(char *))) || !(t->stop[0] = lf__ev_strdup("\n"))) {
            free(t->stop);
            t->stop = NULL;
            return lf_fail(LF_ERR_NOMEM, "eval: out of memory");
        }
        t->n_stop = 1;
    }
    return LF_OK;
}

lf_status lf_eval_tasks_split(char *text, int cap, const char **paths, lf_eval_kind *kinds, int *n,
                              const char **bad_kind) {
    *n = 0;
    for (char *p = text, *e; *p && *n < cap; p = e ? e + 1 : p + strlen(p)) {
        e = strchr(p, '\n');
        if (e) *e = 0;
        kinds[*n] = LF_EVAL_KIND_UNSET;
        char *hash = strrchr(p, '#');
        if (hash) {
            *hash = 0;
            paths[*n] = p;
            if (lf_eval_kind_parse(hash + 1, &kinds[*n]) != LF_OK) {
                if (bad_kind) *bad_kind = hash + 1;
                return LF_ERR_INVALID_ARG;
            }
        }
        paths[(*n)++] = p;
        if (!e) break;
    }
    return LF_OK;
}

lf_status lf_eval_tasks_load(lf_eval_tasks **out, const char *const *paths, int n_paths,
                             const lf_eval_load_opts *opts) {
    if (!out) return lf_fail(LF_ERR_INVALID_ARG, "eval: NULL argument");
    *out = NULL;
    if (!paths || n_paths < 1) return lf_fail(LF_ERR_INVALID_ARG, "eval: no task files");
    if (n_paths > MAX_TASKS) return lf_fail(LF_ERR_INVALID_ARG, "eval: %d task files, at most %d", n_paths, MAX_TASKS);
    lf_eval_load_opts def = lf_eval_load_opts_default();
    if (!opts) opts = &def;
    if ((unsigned)opts->kind >= N_KINDS) return lf_fail(LF_ERR_INVALID_ARG, "eval: unknown kind %d", (int)opts->kind);
    lf_eval_tasks *ts = calloc(1, sizeof *ts);
    if (!ts || !(ts->task = calloc((size_t)n_paths, sizeof *ts->task))) {
        free(ts);
        return lf_fail(LF_ERR_NOMEM, "eval: out of memory");
    }
    lf_status st = LF_OK;
    for (int i = 0; i < n_paths && st == LF_OK; i++) {
        if (!paths[i]) {
            st = lf_fail(LF_ERR_INVALID_ARG, "eval: task path %d is NULL", i);
            break;
        }
        lf_eval_kind kind = opts->kinds && opts->kinds[i] != LF_EVAL_KIND_UNSET ? opts->kinds[i] : opts->kind;
        if ((unsigned)kind >= N_KINDS) {
            st = lf_fail(LF_ERR_INVALID_ARG, "eval: unknown kind %d for %s", (int)kind, paths[i]);
            break;
        }
        ts->n = i + 1;
        st = load_file(&ts->task[i], paths[i], opts, kind);
        for (int j = 0; st == LF_OK && j < i; j++)
            if (!strcmp(ts->task[i].name, ts->task[j].name))
                st = lf_fail(LF_ERR_FORMAT,
                             "%s: task name '%s' is also the name of %s (give one a \"name\" in its header)", paths[i],
                             ts->task[i].name, paths[j]);
    }
    if (st != LF_OK) {
        lf_eval_tasks_free(ts);
        return st;
    }
    /* kind defaults */
    for (int i = 0; i < ts->n; i++) {
        ev_task *t = &ts->task[i];
        if (t->max_new_tokens < 0) t->max_new_tokens = t->kind == LF_EVAL_EXACT_MATCH ? 16 : 64;
    }
    *out = ts;
    return LF_OK;
}

/* ---------------------------------------------------------------- results */
lf_status lf_eval_results_create(lf_eval_results **out) {
    if (!out) return lf_fail(LF_ERR_INVALID_ARG, "eval: NULL argument");
    *out = calloc(1, sizeof **out);
    return *out ? LF_OK : lf_fail(LF_ERR_NOMEM, "eval: out of memory");
}

static void results_clear(lf_eval_results *r) {
    for (size_t i = 0; i < r->n_m; i++) {
        free((char *)r->m[i].name);
        free(r->short_name[i]);
    }
    r->n_m = 0;
    for (size_t i = 0; i < r->n_t; i++) {
        free(r->t[i].name);
        free(r->t[i].file);
        cJSON_Delete(r->t[i].detail);
        free(r->t[i].table_extra);
    }
    r->n_t = 0;
}

void lf_eval_results_free(lf_eval_results *r) {
    if (!r) return;
    results_clear(r);
    free(r->m);
    free(r->short_name);
    free(r->t);
    free(r);
}

static lf_status res_begin(lf_eval_results *r, const ev_task *t) {
    if (r->n_t == r->cap_t) {
        size_t nc = r->cap_t ? 2 * r->cap_t : 8;
        ev_res_task *nt = realloc(r->t, nc * sizeof *nt);
        if (!nt) return lf_fail(LF_ERR_NOMEM, "eval: out of memory");
        r->t = nt;
        r->cap_t = nc;
    }
    ev_res_task *rt = &r->t[r->n_t];
    memset(rt, 0, sizeof *rt);
    rt->kind = t->kind;
    rt->examples = t->n_ex;
    rt->m0 = rt->m1 = r->n_m;
    if (!(rt->name = lf__ev_strdup(t->name)) || !(rt->file = lf__ev_strdup(t->file))) {
        free(rt->name);
        free(rt->file);
        return LF_ERR_NOMEM;
    }
    r->n_t++;
    return LF_OK;
}

lf_status lf__ev_metric(lf_eval_results *r, const char *metric, double value, int higher_is_better) {
    ev_res_task *rt = &r->t[r->n_t - 1];
    if (r->n_m == r->cap_m) {
        size_t nc = r->cap_m ? 2 * r->cap_m : 16;
        lf_eval_metric *nm = realloc(r->m, nc * sizeof *nm);
        if (!nm) return lf_fail(LF_ERR_NOMEM, "eval: out of memory");
        r->m = nm;
        char **ns = realloc(r->short_name, nc * sizeof *ns);
        if (!ns) return lf_fail(LF_ERR_NOMEM, "eval: out of memory");
        r->short_name = ns;
        r->cap_m = nc;
    }
    size_t n = strlen(rt->name) + 1 + strlen(metric) + 1;
    char *full = malloc(n), *sh = lf__ev_strdup(metric);
    if (!full || !sh) {
        free(full);
        free(sh);
        return lf_fail(LF_ERR_NOMEM, "eval: out of memory");
    }
    snprintf(full, n, "%s/%s", rt->name, metric);
    r->m[r->n_m].name = full;
    r->m[r->n_m].value = value;
    r->m[r->n_m].higher_is_better = higher_is_better;
    r->short_name[r->n_m] = sh;
    r->n_m++;
    rt->m1 = r->n_m;
    return LF_OK;
}

cJSON *lf__ev_detail(lf_eval_results *r) {
    ev_res_task *rt = &r->t[r->n_t - 1];
    if (!rt->detail) rt->detail = cJSON_CreateObject();
    if (!rt->detail) lf_fail(LF_ERR_NOMEM, "eval: out of memory");
    return rt->detail;
}

void lf__ev_table_extra(lf_eval_results *r, char *text) {
    ev_res_task *rt = &r->t[r->n_t - 1];
    free(rt->table_extra);
    rt->table_extra = text;
}

const lf_eval_metric *lf_eval_results_metrics(const lf_eval_results *r, size_t *n) {
    if (n) *n = r ? r->n_m : 0;
    return r ? r->m : NULL;
}

lf_status lf_eval_results_get(const lf_eval_results *r, const char *name, double *value) {
    if (!r || !name || !value) return lf_fail(LF_ERR_INVALID_ARG, "eval: NULL argument");
    for (size_t i = 0; i < r->n_m; i++)
        if (!strcmp(r->m[i].name, name)) {
            *value = r->m[i].value;
            return LF_OK;
        }
    return lf_fail(LF_ERR_NOT_FOUND, "eval: no metric '%s'", name);
}

static lf_status dup_out(char *s, char **out) {
    if (!s) return lf_fail(LF_ERR_NOMEM, "eval: out of memory");
    size_t n = strlen(s);
    *out = lf_alloc(n + 1);
    if (!*out) {
        free(s);
        return LF_ERR_NOMEM;
    }
    memcpy(*out, s, n + 1);
    free(s);
    return LF_OK;
}

lf_status lf_eval_results_json(const lf_eval_results *r, char **out) {
    if (!r || !out) return lf_fail(LF_ERR_INVALID_ARG, "eval: NULL argument");
    *out = NULL;
    cJSON *root = cJSON_CreateObject(), *tasks = cJSON_AddObjectToObject(root, "tasks");
    cJSON *all = cJSON_AddObjectToObject(root, "metrics");
    int ok = root && tasks && all;
    for (size_t i = 0; ok && i < r->n_t; i++) {
        const ev_res_task *rt = &r->t[i];
        cJSON *o = cJSON_AddObjectToObject(tasks, rt->name);
        ok = o && cJSON_AddStringToObject(o, "kind", lf_eval_kind_name(rt->kind)) &&
             cJSON_AddStringToObject(o, "file", rt->file) &&
             cJSON_AddNumberToObject(o, "examples", (double)rt->examples) &&
             cJSON_AddNumberToObject(o, "seconds", rt->seconds);
        cJSON *mo = ok ? cJSON_AddObjectToObject(o, "metrics") : NULL;
        ok = ok && mo;
        for (size_t k = rt->m0; ok && k < rt->m1; k++)
            ok = cJSON_AddNumberToObject(mo, r->short_name[k], r->m[k].value) != NULL;
        for (const cJSON *d = rt->detail ? rt->detail->child : NULL; ok && d; d = d->next) {
            cJSON *dup = cJSON_Duplicate(d, 1);
            ok = dup && cJSON_AddItemToObject(o, d->string, dup);
        }
    }
    for (size_t k = 0; ok && k < r->n_m; k++) ok = cJSON_AddNumberToObject(all, r->m[k].name, r->m[k].value) != NULL;
    char *s = ok ? lf_json_print(root, 0) : NULL; /* numbers that read back exactly */
    cJSON_Delete(root);
    return dup_out(s, out);
}

static void fmt_value(double v, char *buf, size_t cap) {
    if (!isfinite(v)) snprintf(buf, cap, "%g", v);
    else if (v != 0 && (fabs(v) >= 1e6 || fabs(v) < 1e-4)) snprintf(buf, cap, "%.6g", v);
    else snprintf(buf, cap, "%.4f", v);
}

lf_status lf_eval_results_table(const lf_eval_results *r, char **out) {
    if (!r || !out) return lf_fail(LF_ERR_INVALID_ARG, "eval: NULL argument");
    *out = NULL;
    int wn = 4, wm = 6;
    for (size_t i = 0; i < r->n_t; i++)
        if ((int)strlen(r->t[i].name) > wn) wn = (int)strlen(r->t[i].name);
    for (size_t k = 0; k < r->n_m; k++)
        if ((int)strlen(r->short_name[k]) > wm) wm = (int)strlen(r->short_name[k]);
    lf__sb b = {0};
    lf__sb_printf(&b, "%-*s  %-15s  %8s  %-*s  %12s\n", wn, "task", "kind", "examples", wm, "metric", "value");
    for (size_t i = 0; i < r->n_t; i++) {
        const ev_res_task *rt = &r->t[i];
        char ex[32];
        if (rt->examples || rt->kind != LF_EVAL_PERPLEXITY) snprintf(ex, sizeof ex, "%zu", rt->examples);
        else snprintf(ex, sizeof ex, "-");
        if (rt->m0 == rt->m1) lf__sb_printf(&b, "%-*s  %-15s  %8s\n", wn, rt->name, lf_eval_kind_name(rt->kind), ex);
        for (size_t k = rt->m0; k < rt->m1; k++) {
            char v[64];
            fmt_value(r->m[k].value, v, sizeof v);
            if (k == rt->m0)
                lf__sb_printf(&b, "%-*s  %-15s  %8s  %-*s  %12s\n", wn, rt->name, lf_eval_kind_name(rt->kind), ex, wm,
                              r->short_name[k], v);
            else lf__sb_printf(&b, "%-*s  %-15s  %8s  %-*s  %12s\n", wn, "", "", "", wm, r->short_name[k], v);
        }
    }
    for (size_t i = 0; i < r->n_t; i++)
        if (r->t[i].table_extra) lf__sb_printf(&b, "\n%s", r->t[i].table_extra);
    if (b.failed || !b.p) {
        free(b.p);
        return lf_fail(LF_ERR_NOMEM, "eval: out of memory");
    }
    return dup_out(b.p, out);
}

/* ---------------------------------------------------------------- running */
lf_status lf_eval_tasks_run(const lf_eval_tasks *t, lf_model *m, const lf_tokenizer *tok, const lf_eval_run_opts *opts,
                            lf_eval_results *res) {
    if (!t || !m || !tok || !res) return lf_fail(LF_ERR_INVALID_ARG, "eval: NULL argument");
    lf_eval_run_opts def = lf_eval_run_opts_default();
    if (!opts) opts = &def;
    if (opts->batch < 0) return lf_fail(LF_ERR_INVALID_ARG, "eval: batch %d is negative", opts->batch);
    results_clear(res);
    const lf_model_config *mc = lf_model_get_config(m);
    ev_ctx c = {.m = m, .tok = tok, .opts = opts, .res = res, .V = mc->vocab_size, .L = mc->block_size};
    int tv = lf_tokenizer_vocab_size(tok);
    if (tv > c.V)
        return lf_fail(LF_ERR_MISMATCH, "eval: the tokenizer has %d ids, the model's vocabulary only %d", tv, c.V);
    int eot = lf_tokenizer_eot(tok); /* <|endoftext|>, or "\n" for a character vocabulary */
    if (eot >= 0 && eot < c.V) {
        c.have_eot = 1;
        c.eot = (uint32_t)eot;
    }
    lf_status st = LF_OK;
    for (int i = 0; i < t->n && st == LF_OK; i++) {
        const ev_task *tk = &t->task[i];
        if ((st = res_begin(res, tk)) != LF_OK) break;
        double t0 = lf_time_now();
        switch (tk->kind) {
        case LF_EVAL_PERPLEXITY: st = lf__ev_run_perplexity(&c, tk); break;
        case LF_EVAL_MULTIPLE_CHOICE:
        case LF_EVAL_CLASSIFICATION:
        case LF_EVAL_RANKING: st = lf__ev_run_choice(&c, tk); break;
        case LF_EVAL_GENERATION:
        case LF_EVAL_EXACT_MATCH: st = lf__ev_run_generate(&c, tk); break;
        default: st = lf_fail(LF_ERR_INTERNAL, "eval: task kind %d", (int)tk->kind);
        }
        res->t[res->n_t - 1].seconds = lf_time_now() - t0;
        if (st != LF_OK) { /* drop the unfinished task */
            ev_res_task *rt = &res->t[res->n_t - 1];
            for (size_t k = rt->m0; k < res->n_m; k++) {
                free((char *)res->m[k].name);
                free(res->short_name[k]);
            }
            res->n_m = rt->m0;
            free(rt->name);
            free(rt->file);
            cJSON_Delete(rt->detail);
            free(rt->table_extra);
            res->n_t--;
        }
    }
    return st;
}
