/*
 * llmforge score: metrics over files, no model (as the sacrebleu CLI does).
 *
 *   llmforge score --metric bleu|rouge|accuracy|f1|exact_match|hits
 *       (--predictions FILE --references FILE [--references FILE ...] | --input FILE.jsonl)
 *       [metric options] [--sentence] [--json]
 *
 * Inputs. The file form has one item per line ('\n', a '\r' before it is
 * dropped); every file must have the same number of lines. The JSON Lines
 * form has one object per non-blank line with the fields
 *   prediction   string (for accuracy/f1 also an integer label)
 *   references   string or list of strings   (bleu, rouge, exact_match)
 *   label        string or integer           (accuracy, f1: the gold label)
 *   scores       list of numbers             (hits: one per candidate)
 *   gold         index or list of indices    (hits)
 *   filtered     list of indices, optional   (hits: other true candidates)
 * Every error names the file and line (and field), then exit status 1;
 * usage errors (bad or missing options) exit with 2.
 *
 * Scales: BLEU 0..100 (sacreBLEU); exact_match and its F1 0..100 (the SQuAD
 * script); everything else 0..1.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "llmforge/core.h"
#include "llmforge/eval.h"
#include "commands.h"

#define MAX_INPUT_BYTES ((size_t)1 << 30)
#define MAX_REF_FILES 64

enum metric { M_BLEU, M_ROUGE, M_ACCURACY, M_F1, M_EM, M_HITS, M_COUNT };
static const char *const metric_names[M_COUNT] = {"bleu", "rouge", "accuracy", "f1", "exact_match", "hits"};

/* ---------------------------------------------------------------- options */
typedef struct options {
    int metric;
    const char *predictions, *input;
    const char *references[MAX_REF_FILES];
    int n_references;
    lf_bleu_config bleu;
    lf_rouge_config rouge;
    int rouge_tok_given;
    lf_average average;
    const char *pos_label;
    long hits[LF_RANKING_MAX_K];
    size_t n_hits;
    lf_tie_policy ties;
    int sentence, json;
} options;

enum opt_id {
    O_METRIC,
    O_PRED,
    O_REFS,
    O_INPUT,
    O_TOKENIZE,
    O_SMOOTH,
    O_SMOOTH_VALUE,
    O_LOWERCASE,
    O_SENTENCE,
    O_ROUGE_TYPES,
    O_STEMMER,
    O_ROUGE_TOK,
    O_AVERAGE,
    O_POS_LABEL,
    O_HITS,
    O_TIES,
    O_JSON,
    O_HELP,
};

/* One table drives parsing and --help. */
static const struct opt {
    enum opt_id id;
    const char *name, *arg, *help;
} opts[] = {
    {O_METRIC, "--metric", "M", "bleu | rouge | accuracy | f1 | exact_match | hits (required)"},
    {O_PRED, "--predictions", "FILE", "one prediction per line"},
    {O_REFS, "--references", "FILE", "one reference (gold label) per line; repeat for several references"},
    {O_INPUT, "--input", "FILE.jsonl", "JSON Lines instead of --predictions/--references"},
    {O_TOKENIZE, "--tokenize", "T", "bleu: 13a (default) | zh | char | none"},
    {O_SMOOTH, "--smooth", "S", "bleu: exp (default) | floor | add-k | none"},
    {O_SMOOTH_VALUE, "--smooth-value", "V", "bleu: value for floor (default 0.1) and add-k (default 1)"},
    {O_LOWERCASE, "--lowercase", NULL, "bleu: lower-case hypotheses and references"},
    {O_SENTENCE, "--sentence", NULL, "bleu, rouge: also print the score of every item"},
    {O_ROUGE_TYPES, "--rouge-types", "LIST",
     "rouge: comma list of rouge1..rouge9, rougeL, rougeLsum "
     "(default rouge1,rouge2,rougeL,rougeLsum)"},
    {O_STEMMER, "--stemmer", NULL, "rouge: Porter stemmer (nltk, as rouge-score's use_stemmer)"},
    {O_ROUGE_TOK, "--rouge-tokenizer", "T", "rouge: auto (default: cjk when most characters are CJK) | default | cjk"},
    {O_AVERAGE, "--average", "A", "f1: macro (default) | micro | binary"},
    {O_POS_LABEL, "--pos-label", "L", "f1 with --average binary: the positive label"},
    {O_HITS, "--hits", "LIST", "hits: comma list of cut-offs N for Hits@N (default 1,3,10)"},
    {O_TIES, "--ties", "P", "hits: pessimistic (default) | optimistic | average"},
    {O_JSON, "--json", NULL, "print one JSON object instead of the table"},
    {O_HELP, "--help", NULL, "this help"},
};
#define N_OPTS (sizeof opts / sizeof opts[0])

static void usage(FILE *f) {
    fprintf(f, "usage: llmforge score --metric M (--predictions FILE --references FILE [--references FILE ...]\n"
               "                      | --input FILE.jsonl) [options] [--json]\n"
               "  Scores predictions against references without a model: BLEU as sacreBLEU 2.6.0, ROUGE as\n"
               "  rouge-score 0.1.2, accuracy/F1 as scikit-learn (zero_division=0), exact match and F1 as the\n"
               "  SQuAD v1.1 script, Hits@N/MRR with a stated tie policy. JSON Lines fields: prediction,\n"
               "  references (string or list), label, scores, gold (index or list), filtered. See docs/metrics.md.\n\n"
               "options:\n");
    for (size_t i = 0; i < N_OPTS; i++) {
        char left[64];
        snprintf(left, sizeof left, "%s%s%s", opts[i].name, opts[i].arg ? " " : "", opts[i].arg ? opts[i].arg : "");
        fprintf(f, "  %-24s %s\n", left, opts[i].help);
    }
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "llmforge score: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see --help)\n");
    va_end(ap);
    return 2;
}

static int pick(const char *opt, const char *v, const char *const *names, int n, int *out) {
    for (int i = 0; i < n; i++)
        if (!strcmp(v, names[i])) {
            *out = i;
            return 0;
        }
    fprintf(stderr, "llmforge score: %s: unknown value '%s' (choose", opt, v);
    for (int i = 0; i < n; i++) fprintf(stderr, "%s %s", i ? "," : "", names[i]);
    fprintf(stderr, ")\n");
    return 2;
}

/* Comma list of integers >= 1 (Hits@N cut-offs). */
static int parse_hits(const char *v, options *o) {
    o->n_hits = 0;
    const char *p = v;
    while (*p) {
        char *end;
        errno = 0;
        long k = strtol(p, &end, 10);
        if (end == p || errno || k < 1 || k > 1000000000L || (*end && *end != ','))
            return usage_error("--hits expects a comma list of integers >= 1, got '%s'", v);
        if (o->n_hits == LF_RANKING_MAX_K) return usage_error("--hits: at most 16 cut-offs, got '%s'", v);
        o->hits[o->n_hits++] = k;
        p = *end ? end + 1 : end;
        if (*end && !*p) return usage_error("--hits expects a comma list of integers >= 1, got '%s'", v);
    }
    if (!o->n_hits) return usage_error("--hits expects a comma list of integers >= 1, got '%s'", v);
    return 0;
}

static int parse_rouge_types(const char *v, options *o) {
    char buf[256];
    unsigned types = 0;
    const char *p = v;
    while (1) {
        const char *c = strchr(p, ',');
        size_t n = c ? (size_t)(c - p) : strlen(p);
        if (n >= sizeof buf) n = sizeof buf - 1;
        memcpy(buf, p, n);
        buf[n] = 0;
        int t = lf_rouge_type_from_name(buf);
        if (t < 0) return usage_error("unknown ROUGE type '%s' (rouge1..rouge9, rougeL, rougeLsum)", buf);
        types |= LF_ROUGE_BIT(t);
        if (!c) break;
        p = c + 1;
    }
    o->rouge.types = types;
    return 0;
}

/* 0: parsed; 1: --help printed (exit 0); 2: usage error. */
static int parse_options(int argc, char **argv, options *o) {
    memset(o, 0, sizeof *o);
    o->metric = -1;
    o->bleu = lf_bleu_config_default();
    o->rouge = lf_rouge_config_default();
    o->rouge.tokenizer = LF_ROUGE_TOK_AUTO;
    o->average = LF_AVERAGE_MACRO;
    o->ties = LF_TIES_PESSIMISTIC;
    const long def_hits[] = {1, 3, 10};
    memcpy(o->hits, def_hits, sizeof def_hits);
    o->n_hits = 3;
    const char *metric = NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *val = NULL;
        const struct opt *op = NULL;
        if (!strcmp(a, "-h")) a = "--help";
        for (size_t k = 0; k < N_OPTS && !op; k++) {
            size_t n = strlen(opts[k].name);
            if (strncmp(a, opts[k].name, n)) continue;
            if (a[n] == 0) {
                op = &opts[k];
                if (op->arg) {
                    if (i + 1 >= argc) return usage_error("option %s needs a value", op->name);
                    val = argv[++i];
                }
            } else if (a[n] == '=' && opts[k].arg) {
                op = &opts[k];
                val = a + n + 1;
            }
        }
        if (!op) return usage_error("unknown argument '%s'", a);
        int pick_i;
        switch (op->id) {
        case O_METRIC: metric = val; break;
        case O_PRED: o->predictions = val; break;
        case O_REFS:
            if (o->n_references == MAX_REF_FILES) return usage_error("at most 64 --references files");
            o->references[o->n_references++] = val;
            break;
        case O_INPUT: o->input = val; break;
        case O_TOKENIZE: {
            static const char *const n[] = {"13a", "zh", "char", "none"};
            if (pick(op->name, val, n, 4, &pick_i)) return 2;
            o->bleu.tokenize = (lf_bleu_tokenize)pick_i;
            break;
        }
        case O_SMOOTH: {
            static const char *const n[] = {"exp", "floor", "add-k", "none"};
            if (pick(op->name, val, n, 4, &pick_i)) return 2;
            o->bleu.smooth = (lf_bleu_smooth)pick_i;
            break;
        }
        case O_SMOOTH_VALUE: {
            char *end;
            errno = 0;
            double d = strtod(val, &end);
            if (errno || end == val || *end || !(d >= 0) || !isfinite(d))
                return usage_error("--smooth-value expects a finite number >= 0, got '%s'", val);
            o->bleu.smooth_value = d;
            break;
        }
        case O_LOWERCASE: o->bleu.lowercase = 1; break;
        case O_SENTENCE: o->sentence = 1; break;
        case O_ROUGE_TYPES:
            if (parse_rouge_types(val, o)) return 2;
            break;
        case O_STEMMER: o->rouge.use_stemmer = 1; break;
        case O_ROUGE_TOK: {
            static const char *const n[] = {"default", "cjk", "auto"};
            if (pick(op->name, val, n, 3, &pick_i)) return 2;
            o->rouge.tokenizer = (lf_rouge_tokenizer)pick_i;
            o->rouge_tok_given = 1;
            break;
        }
        case O_AVERAGE: {
            static const char *const n[] = {"macro", "micro", "binary"};
            if (pick(op->name, val, n, 3, &pick_i)) return 2;
            o->average = (lf_average)pick_i;
            break;
        }
        case O_POS_LABEL: o->pos_label = val; break;
        case O_HITS:
            if (parse_hits(val, o)) return 2;
            break;
        case O_TIES: {
            static const char *const n[] = {"pessimistic", "optimistic", "average"};
            if (pick(op->name, val, n, 3, &pick_i)) return 2;
            o->ties = (lf_tie_policy)pick_i;
            break;
        }
        case O_JSON: o->json = 1; break;
        case O_HELP: usage(stdout); return 1;
        }
    }
    if (!metric) return usage_error("--metric is required (bleu, rouge, accuracy, f1, exact_match, hits)");
    for (int m = 0; m < M_COUNT; m++)
        if (!strcmp(metric, metric_names[m])) o->metric = m;
    if (o->metric < 0) {
        /* a wrong metric name is a data error, not a usage error (exit 1) */
        fprintf(stderr, "llmforge score: unknown metric '%s' (choose bleu, rouge, accuracy, f1, exact_match, hits)\n",
                metric);
        return 3;
    }
    if (o->input && (o->predictions || o->n_references))
        return usage_error("give --input, or --predictions with --references, not both");
    if (!o->input && (!o->predictions || !o->n_references))
        return usage_error("--predictions FILE and --references FILE (or --input FILE.jsonl) are required");
    if (o->metric == M_HITS && !o->input)
        return usage_error("--metric hits reads --input FILE.jsonl (fields scores, gold, filtered)");
    if ((o->metric == M_ACCURACY || o->metric == M_F1) && o->n_references > 1)
        return usage_error("--metric %s takes one --references file (the gold labels)", metric_names[o->metric]);
    if (o->metric == M_F1 && o->average == LF_AVERAGE_BINARY && !o->pos_label)
        return usage_error("--average binary needs --pos-label LABEL");
    return 0;
}

/* ---------------------------------------------------------------- inputs */
typedef struct item {
    const char *pred;
    const char **refs;
    size_t n_refs;
    double *scores;
    size_t n_scores;
    size_t *gold, n_gold, *filtered, n_filtered;
    const char *file;
    size_t line;
} item;

typedef struct dataset {
    item *items;
    size_t n;
    char *bufs[MAX_REF_FILES + 1];
    cJSON **json;
    size_t n_json;
    char **strings; /* integer labels turned into strings */
    size_t n_strings;
} dataset;

static void dataset_free(dataset *d) {
    for (size_t i = 0; i < d->n; i++) {
        free(d->items[i].refs);
        free(d->items[i].scores);
        free(d->items[i].gold);
        free(d->items[i].filtered);
    }
    free(d->items);
    for (size_t i = 0; i < MAX_REF_FILES + 1; i++) lf_free(d->bufs[i]);
    for (size_t i = 0; i < d->n_json; i++) cJSON_Delete(d->json[i]);
    free(d->json);
    for (size_t i = 0; i < d->n_strings; i++) free(d->strings[i]);
    free(d->strings);
}

static int data_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int data_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "llmforge score: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return 1;
}

/* Read a text file and cut it into lines in place (NUL-terminated), each
 * checked for NUL bytes and UTF-8. *lines: malloc'd array of n pointers. */
static int read_lines(const char *path, char **buf, char ***lines, size_t **lens, size_t *n) {
    size_t len;
    *lines = NULL;
    *lens = NULL;
    *n = 0;
    lf_status st = lf_file_read_all(path, MAX_INPUT_BYTES, buf, &len);
    if (st != LF_OK) return data_error("%s", lf_last_error());
    if (len == 0) return data_error("%s: empty file", path);
    size_t cap = 1;
    for (size_t i = 0; i < len; i++) cap += (*buf)[i] == '\n';
    *lines = malloc(cap * sizeof **lines);
    *lens = malloc(cap * sizeof **lens);
    if (!*lines || !*lens) return data_error("out of memory reading '%s'", path);
    char *p = *buf, *end = *buf + len;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *e = nl ? nl : end;
        size_t l = (size_t)(e - p);
        if (l && p[l - 1] == '\r') l--;
        size_t lineno = *n + 1;
        if (memchr(p, 0, l)) return data_error("%s:%zu: contains a NUL byte", path, lineno);
        char what[1100];
        snprintf(what, sizeof what, "%s:%zu", path, lineno);
        if (lf_utf8_validate(p, l, what, NULL) != LF_OK) return data_error("%s", lf_last_error());
        p[l] = 0;
        (*lines)[*n] = p;
        (*lens)[*n] = l;
        (*n)++;
        p = nl ? nl + 1 : end;
    }
    return 0;
}

static int load_files(const options *o, dataset *d) {
    char **lines[MAX_REF_FILES + 1] = {0};
    size_t *lens[MAX_REF_FILES + 1] = {0}, counts[MAX_REF_FILES + 1] = {0};
    const char *paths[MAX_REF_FILES + 1];
    int nf = 1 + o->n_references, rc = 0;
    paths[0] = o->predictions;
    for (int r = 0; r < o->n_references; r++) paths[r + 1] = o->references[r];
    for (int f = 0; f < nf && !rc; f++) rc = read_lines(paths[f], &d->bufs[f], &lines[f], &lens[f], &counts[f]);
    for (int f = 1; f < nf && !rc; f++)
        if (counts[f] != counts[0])
            rc = data_error("%s has %zu lines but %s has %zu; every file needs one line per item", paths[0], counts[0],
                            paths[f], counts[f]);
    if (!rc) {
        d->items = calloc(counts[0], sizeof *d->items);
        if (!d->items) rc = data_error("out of memory");
    }
    for (size_t i = 0; i < counts[0] && !rc; i++) {
        item *it = &d->items[i];
        it->file = paths[0];
        it->line = i + 1;
        it->pred = lines[0][i];
        it->refs = malloc((size_t)o->n_references * sizeof *it->refs);
        if (!it->refs) {
            rc = data_error("out of memory");
            break;
        }
        for (int r = 0; r < o->n_references; r++) it->refs[r] = lines[r + 1][i];
        it->n_refs = (size_t)o->n_references;
        d->n++;
    }
    for (int f = 0; f < nf; f++) {
        free(lines[f]);
        free(lens[f]);
    }
    return rc;
}

/* A JSON number that is a non-negative integer index. */
static int json_index(const cJSON *v, size_t *out) {
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!(d >= 0) || d > 9007199254740992.0 || d != floor(d)) return 0;
    *out = (size_t)d;
    return 1;
}

/* A label: string, or integer number written in decimal. */
static const char *json_label(dataset *d, const cJSON *v) {
    if (cJSON_IsString(v)) return v->valuestring;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || fabs(v->valuedouble) > 9007199254740992.0)
        return NULL;
    char buf[32];
    snprintf(buf, sizeof buf, "%.0f", v->valuedouble);
    char **s = realloc(d->strings, (d->n_strings + 1) * sizeof *s);
    if (!s) return NULL;
    d->strings = s;
    if (!(s[d->n_strings] = strdup(buf))) return NULL;
    return s[d->n_strings++];
}

static int index_list(const cJSON *v, const char *path, size_t line, const char *field, int allow_scalar, size_t **out,
                      size_t *n) {
    *out = NULL;
    *n = 0;
    size_t idx;
    if (allow_scalar && json_index(v, &idx)) {
        *out = malloc(sizeof **out);
        if (!*out) return data_error("out of memory");
        (*out)[0] = idx;
        *n = 1;
        return 0;
    }
    if (!cJSON_IsArray(v))
        return data_error("%s:%zu: field '%s' must be %sa list of non-negative integers", path, line, field,
                          allow_scalar ? "an index or " : "");
    int k = cJSON_GetArraySize(v);
    if (k == 0 && allow_scalar) return data_error("%s:%zu: field '%s' is an empty list", path, line, field);
    *out = malloc(((size_t)k + 1) * sizeof **out);
    if (!*out) return data_error("out of memory");
    const cJSON *e;
    cJSON_ArrayForEach(e, v) {
        if (!json_index(e, &idx))
            return data_error("%s:%zu: field '%s': element %zu is not a non-negative integer", path, line, field,
                              *n + 1);
        (*out)[(*n)++] = idx;
    }
    return 0;
}

static int load_jsonl(const options *o, dataset *d) {
    char **lines = NULL;
    size_t *lens = NULL, n = 0;
    const char *path = o->input;
    int rc = read_lines(path, &d->bufs[0], &lines, &lens, &n);
    if (!rc) {
        d->items = calloc(n ? n : 1, sizeof *d->items);
        d->json = calloc(n ? n : 1, sizeof *d->json);
        if (!d->items || !d->json) rc = data_error("out of memory");
    }
    for (size_t i = 0; i < n && !rc; i++) {
        size_t line = i + 1, l = lens[i];
        const char *s = lines[i];
        size_t k = 0;
        while (k < l && (s[k] == ' ' || s[k] == '\t' || s[k] == '\r')) k++;
        if (k == l) continue; /* blank line */
        cJSON *j = cJSON_ParseWithLength(s, l);
        if (!j) {
            const char *ep = cJSON_GetErrorPtr();
            size_t at = ep && ep >= s && ep <= s + l ? (size_t)(ep - s) : 0;
            rc = data_error("%s:%zu: not valid JSON (at byte %zu)", path, line, at);
            break;
        }
        d->json[d->n_json++] = j;
        if (!cJSON_IsObject(j)) {
            rc = data_error("%s:%zu: expected a JSON object", path, line);
            break;
        }
        item *it = &d->items[d->n];
        it->file = path;
        it->line = line;
        const cJSON *f;
        switch (o->metric) {
        case M_BLEU:
        case M_ROUGE:
        case M_EM:
            f = cJSON_GetObjectItemCaseSensitive(j, "prediction");
            if (!f) rc = data_error("%s:%zu: field 'prediction' is missing", path, line);
            else if (!cJSON_IsString(f)) rc = data_error("%s:%zu: field 'prediction' must be a string", path, line);
            if (rc) break;
            it->pred = f->valuestring;
            f = cJSON_GetObjectItemCaseSensitive(j, "references");
            if (!f) {
                rc = data_error("%s:%zu: field 'references' is missing", path, line);
            } else if (cJSON_IsString(f)) {
                it->refs = malloc(sizeof *it->refs);
                if (!it->refs) rc = data_error("out of memory");
                else it->refs[it->n_refs++] = f->valuestring;
            } else if (cJSON_IsArray(f) && cJSON_GetArraySize(f) > 0) {
                it->refs = malloc((size_t)cJSON_GetArraySize(f) * sizeof *it->refs);
                if (!it->refs) {
                    rc = data_error("out of memory");
                    break;
                }
                const cJSON *e;
                cJSON_ArrayForEach(e, f) {
                    if (!cJSON_IsString(e)) {
                        rc = data_error("%s:%zu: field 'references': element %zu is not a string", path, line,
                                        it->n_refs + 1);
                        break;
                    }
                    it->refs[it->n_refs++] = e->valuestring;
                }
            } else {
                rc = data_error("%s:%zu: field 'references' must be a string or a non-empty list of strings", path,
                                line);
            }
            break;
        case M_ACCURACY:
        case M_F1:
            f = cJSON_GetObjectItemCaseSensitive(j, "prediction");
            if (!f) {
                rc = data_error("%s:%zu: field 'prediction' is missing", path, line);
                break;
            }
            if (!(it->pred = json_label(d, f))) {
                rc = data_error("%s:%zu: field 'prediction' must be a string or an integer label", path, line);
                break;
            }
            f = cJSON_GetObjectItemCaseSensitive(j, "label");
            if (!f) {
                rc = data_error("%s:%zu: field 'label' is missing", path, line);
                break;
            }
            it->refs = malloc(sizeof *it->refs);
            if (!it->refs) {
                rc = data_error("out of memory");
                break;
            }
            if (!(it->refs[0] = json_label(d, f))) {
                rc = data_error("%s:%zu: field 'label' must be a string or an integer label", path, line);
                break;
            }
            it->n_refs = 1;
            break;
        case M_HITS: {
            f = cJSON_GetObjectItemCaseSensitive(j, "scores");
            if (!f) {
                rc = data_error("%s:%zu: field 'scores' is missing", path, line);
                break;
            }
            if (!cJSON_IsArray(f) || cJSON_GetArraySize(f) == 0) {
                rc = data_error("%s:%zu: field 'scores' must be a non-empty list of numbers", path, line);
                break;
            }
            it->scores = malloc((size_t)cJSON_GetArraySize(f) * sizeof *it->scores);
            if (!it->scores) {
                rc = data_error("out of memory");
                break;
            }
            const cJSON *e;
            cJSON_ArrayForEach(e, f) {
                if (!cJSON_IsNumber(e)) {
                    rc = data_error("%s:%zu: field 'scores': element %zu is not a number", path, line,
                                    it->n_scores + 1);
                    break;
                }
                it->scores[it->n_scores++] = e->valuedouble;
            }
            if (rc) break;
            f = cJSON_GetObjectItemCaseSensitive(j, "gold");
            if (!f) {
                rc = data_error("%s:%zu: field 'gold' is missing", path, line);
                break;
            }
            if ((rc = index_list(f, path, line, "gold", 1, &it->gold, &it->n_gold))) break;
            f = cJSON_GetObjectItemCaseSensitive(j, "filtered");
            if (f && !cJSON_IsNull(f) &&
                (rc = index_list(f, path, line, "filtered", 0, &it->filtered, &it->n_filtered)))
                break;
            for (size_t g = 0; g < it->n_gold && !rc; g++)
                if (it->gold[g] >= it->n_scores)
                    rc = data_error("%s:%zu: field 'gold': index %zu is out of range for %zu scores", path, line,
                                    it->gold[g], it->n_scores);
            for (size_t g = 0; g < it->n_filtered && !rc; g++)
                if (it->filtered[g] >= it->n_scores)
                    rc = data_error("%s:%zu: field 'filtered': index %zu is out of range for %zu scores", path, line,
                                    it->filtered[g], it->n_scores);
            break;
        }
        }
        d->n++; /* counted even on error, so dataset_free releases it */
    }
    if (!rc && d->n == 0) rc = data_error("%s: no JSON objects (only blank lines)", path);
    free(lines);
    free(lens);
    return rc;
}

/* ---------------------------------------------------------------- output helpers */
static void print_json(cJSON *j) {
    char *s = lf_json_print(j, 0); /* scores that read back exactly */
    if (s) {
        printf("%s\n", s);
        cJSON_free(s);
    }
    cJSON_Delete(j);
}

static cJSON *num_array(const double *v, size_t n) {
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    return a;
}

static int lib_error(const item *it) { return data_error("%s:%zu: %s", it->file, it->line, lf_last_error()); }

/* ---------------------------------------------------------------- metrics */
/* Add the fields of a BLEU score to o (created when NULL). */
static cJSON *bleu_json(cJSON *o, const lf_bleu_score *s) {
    if (!o) o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "score", s->score);
    cJSON_AddStringToObject(o, "signature", s->signature);
    cJSON_AddItemToObject(o, "counts", num_array(s->counts, LF_BLEU_MAX_ORDER));
    cJSON_AddItemToObject(o, "totals", num_array(s->totals, LF_BLEU_MAX_ORDER));
    cJSON_AddItemToObject(o, "precisions", num_array(s->precisions, LF_BLEU_MAX_ORDER));
    cJSON_AddNumberToObject(o, "bp", s->bp);
    cJSON_AddNumberToObject(o, "ratio", s->ratio);
    cJSON_AddNumberToObject(o, "sys_len", (double)s->sys_len);
    cJSON_AddNumberToObject(o, "ref_len", (double)s->ref_len);
    return o;
}

/* sacreBLEU's BLEUScore.format() line. */
static void bleu_line(const char *prefix, const lf_bleu_score *s) {
    printf("%sBLEU|%s = %.2f %.1f/%.1f/%.1f/%.1f (BP = %.3f ratio = %.3f hyp_len = %lld ref_len = %lld)\n", prefix,
           s->signature, s->score, s->precisions[0], s->precisions[1], s->precisions[2], s->precisions[3], s->bp,
           s->ratio, (long long)s->sys_len, (long long)s->ref_len);
}

static int run_bleu(const options *o, const dataset *d) {
    lf_bleu *b;
    lf_status st = lf_bleu_create(&b, &o->bleu);
    if (st != LF_OK) return data_error("%s", lf_last_error());
    lf_bleu_score *sent = o->sentence ? calloc(d->n, sizeof *sent) : NULL;
    int rc = 0;
    if (o->sentence && !sent) rc = data_error("out of memory");
    for (size_t i = 0; i < d->n && !rc; i++)
        if (lf_bleu_add(b, d->items[i].pred, d->items[i].refs, d->items[i].n_refs, sent ? &sent[i] : NULL) != LF_OK)
            rc = lib_error(&d->items[i]);
    lf_bleu_score s;
    if (!rc && lf_bleu_corpus(b, &s) != LF_OK) rc = data_error("%s", lf_last_error());
    if (!rc) {
        if (o->json) {
            cJSON *j = cJSON_CreateObject();
            cJSON_AddStringToObject(j, "metric", "bleu");
            cJSON_AddNumberToObject(j, "n", (double)d->n);
            bleu_json(j, &s);
            if (sent) {
                cJSON *a = cJSON_AddArrayToObject(j, "sentences");
                for (size_t i = 0; i < d->n; i++) cJSON_AddItemToArray(a, bleu_json(NULL, &sent[i]));
            }
            print_json(j);
        } else {
            for (size_t i = 0; sent && i < d->n; i++) {
                char pre[1200];
                snprintf(pre, sizeof pre, "%s:%zu\t", d->items[i].file, d->items[i].line);
                bleu_line(pre, &sent[i]);
            }
            bleu_line("", &s);
            printf("\n%-6s %12s %12s %10s\n", "order", "matches", "total", "precision");
            for (int n = 0; n < LF_BLEU_MAX_ORDER; n++)
                printf("%-6d %12.10g %12.10g %10.4f\n", n + 1, s.counts[n], s.totals[n], s.precisions[n]);
            printf("%zu segments; brevity penalty %.6f; hypothesis %lld tokens, reference %lld tokens\n", d->n, s.bp,
                   (long long)s.sys_len, (long long)s.ref_len);
        }
    }
    free(sent);
    lf_bleu_free(b);
    return rc;
}

static cJSON *rouge_json(const lf_rouge_score *s, unsigned types) {
    cJSON *o = cJSON_CreateObject();
    for (int t = 0; t < LF_ROUGE_NUM_TYPES; t++) {
        if (!(types & LF_ROUGE_BIT(t))) continue;
        cJSON *x = cJSON_AddObjectToObject(o, lf_rouge_type_name(t));
        cJSON_AddNumberToObject(x, "precision", s->type[t].precision);
        cJSON_AddNumberToObject(x, "recall", s->type[t].recall);
        cJSON_AddNumberToObject(x, "fmeasure", s->type[t].fmeasure);
    }
    return o;
}

static int run_rouge(const options *o, const dataset *d) {
    lf_rouge_config cfg = o->rouge;
    int rc = 0;
    const char *choice = o->rouge_tok_given && cfg.tokenizer != LF_ROUGE_TOK_AUTO ? "given" : "auto";
    if (cfg.tokenizer == LF_ROUGE_TOK_AUTO) { /* one decision for the whole input */
        size_t nt = 0;
        for (size_t i = 0; i < d->n; i++) nt += 1 + d->items[i].n_refs;
        const char **texts = malloc((nt + 1) * sizeof *texts);
        if (!texts) return data_error("out of memory");
        nt = 0;
        for (size_t i = 0; i < d->n; i++) {
            texts[nt++] = d->items[i].pred;
            for (size_t r = 0; r < d->items[i].n_refs; r++) texts[nt++] = d->items[i].refs[r];
        }
        lf_status st = lf_rouge_detect_tokenizer(texts, nt, &cfg.tokenizer);
        free(texts);
        if (st != LF_OK) return data_error("%s", lf_last_error());
    }
    lf_rouge_score *sc = calloc(d->n, sizeof *sc);
    if (!sc) return data_error("out of memory");
    for (size_t i = 0; i < d->n && !rc; i++)
        if (lf_rouge_score_text(&cfg, d->items[i].refs, d->items[i].n_refs, d->items[i].pred, &sc[i]) != LF_OK)
            rc = lib_error(&d->items[i]);
    lf_rouge_score mean;
    if (!rc && lf_rouge_mean(sc, d->n, &mean) != LF_OK) rc = data_error("%s", lf_last_error());
    if (!rc) {
        const char *tok = lf_rouge_tokenizer_name(cfg.tokenizer);
        if (o->json) {
            cJSON *j = cJSON_CreateObject();
            cJSON_AddStringToObject(j, "metric", "rouge");
            cJSON_AddStringToObject(j, "tokenizer", tok);
            cJSON_AddStringToObject(j, "tokenizer_choice", choice);
            cJSON_AddBoolToObject(j, "stemmer", cfg.use_stemmer);
            cJSON_AddNumberToObject(j, "n", (double)d->n);
            cJSON_AddItemToObject(j, "scores", rouge_json(&mean, cfg.types));
            if (o->sentence) {
                cJSON *a = cJSON_AddArrayToObject(j, "items");
                for (size_t i = 0; i < d->n; i++) cJSON_AddItemToArray(a, rouge_json(&sc[i], cfg.types));
            }
            print_json(j);
        } else {
            printf("ROUGE as rouge-score 0.1.2: tokenizer %s (%s), stemmer %s; mean over %zu items\n", tok,
                   !strcmp(choice, "auto") ? (cfg.tokenizer == LF_ROUGE_TOK_CJK ? "chosen: most characters are CJK"
                                                                                : "chosen: the text is not mostly CJK")
                                           : "as given",
                   cfg.use_stemmer ? "on" : "off", d->n);
            for (size_t i = 0; o->sentence && i < d->n; i++) {
                printf("%s:%zu", d->items[i].file, d->items[i].line);
                for (int t = 0; t < LF_ROUGE_NUM_TYPES; t++)
                    if (cfg.types & LF_ROUGE_BIT(t))
                        printf("\t%s P %.4f R %.4f F %.4f", lf_rouge_type_name(t), sc[i].type[t].precision,
                               sc[i].type[t].recall, sc[i].type[t].fmeasure);
                printf("\n");
            }
            printf("%-10s %10s %10s %10s\n", "type", "precision", "recall", "fmeasure");
            for (int t = 0; t < LF_ROUGE_NUM_TYPES; t++)
                if (cfg.types & LF_ROUGE_BIT(t))
                    printf("%-10s %10.6f %10.6f %10.6f\n", lf_rouge_type_name(t), mean.type[t].precision,
                           mean.type[t].recall, mean.type[t].fmeasure);
        }
    }
    free(sc);
    return rc;
}

static int run_classify(const options *o, const dataset *d) {
    lf_confusion *c;
    if (lf_confusion_create(&c) != LF_OK) return data_error("%s", lf_last_error());
    int rc = 0;
    for (size_t i = 0; i < d->n && !rc; i++)
        if (lf_confusion_add(c, d->items[i].refs[0], d->items[i].pred) != LF_OK) rc = lib_error(&d->items[i]);
    double acc = 0;
    lf_prf avg = {0}, macro = {0}, micro = {0};
    if (!rc && lf_confusion_accuracy(c, &acc) != LF_OK) rc = data_error("%s", lf_last_error());
    if (!rc && o->metric == M_F1) {
        if (lf_confusion_average(c, o->average, o->pos_label, &avg) != LF_OK ||
            lf_confusion_average(c, LF_AVERAGE_MACRO, NULL, &macro) != LF_OK ||
            lf_confusion_average(c, LF_AVERAGE_MICRO, NULL, &micro) != LF_OK)
            rc = data_error("%s", lf_last_error());
    }
    if (rc) {
        lf_confusion_free(c);
        return rc;
    }
    size_t L = lf_confusion_num_labels(c);
    uint64_t total = lf_confusion_total(c), correct = 0;
    for (size_t i = 0; i < L; i++) correct += lf_confusion_count(c, i, i);
    static const char *const avg_names[] = {"macro", "micro", "binary"};
    if (o->json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "metric", metric_names[o->metric]);
        cJSON_AddNumberToObject(j, "accuracy", acc);
        cJSON_AddNumberToObject(j, "correct", (double)correct);
        cJSON_AddNumberToObject(j, "n", (double)total);
        if (o->metric == M_F1) {
            cJSON_AddStringToObject(j, "average", avg_names[o->average]);
            if (o->average == LF_AVERAGE_BINARY) cJSON_AddStringToObject(j, "pos_label", o->pos_label);
            cJSON_AddNumberToObject(j, "precision", avg.precision);
            cJSON_AddNumberToObject(j, "recall", avg.recall);
            cJSON_AddNumberToObject(j, "f1", avg.f1);
            cJSON *pc = cJSON_AddArrayToObject(j, "per_class");
            for (size_t i = 0; i < L; i++) {
                lf_prf p;
                lf_confusion_class(c, i, &p);
                cJSON *x = cJSON_CreateObject();
                cJSON_AddStringToObject(x, "label", lf_confusion_label(c, i));
                cJSON_AddNumberToObject(x, "precision", p.precision);
                cJSON_AddNumberToObject(x, "recall", p.recall);
                cJSON_AddNumberToObject(x, "f1", p.f1);
                cJSON_AddNumberToObject(x, "support", (double)p.support);
                cJSON_AddItemToArray(pc, x);
            }
            cJSON *mo = cJSON_AddObjectToObject(j, "macro");
            cJSON_AddNumberToObject(mo, "precision", macro.precision);
            cJSON_AddNumberToObject(mo, "recall", macro.recall);
            cJSON_AddNumberToObject(mo, "f1", macro.f1);
            cJSON *mi = cJSON_AddObjectToObject(j, "micro");
            cJSON_AddNumberToObject(mi, "precision", micro.precision);
            cJSON_AddNumberToObject(mi, "recall", micro.recall);
            cJSON_AddNumberToObject(mi, "f1", micro.f1);
            if (L <= 1000) {
                cJSON *labels = cJSON_AddArrayToObject(j, "labels");
                cJSON *cm = cJSON_AddArrayToObject(j, "confusion_matrix");
                for (size_t i = 0; i < L; i++) {
                    cJSON_AddItemToArray(labels, cJSON_CreateString(lf_confusion_label(c, i)));
                    cJSON *row = cJSON_CreateArray();
                    for (size_t k = 0; k < L; k++)
                        cJSON_AddItemToArray(row, cJSON_CreateNumber((double)lf_confusion_count(c, i, k)));
                    cJSON_AddItemToArray(cm, row);
                }
            }
        }
        print_json(j);
    } else if (o->metric == M_ACCURACY) {
        printf("accuracy = %.4f (%llu of %llu correct, %zu labels)\n", acc, (unsigned long long)correct,
               (unsigned long long)total, L);
    } else {
        printf("f1 (average %s%s%s) = %.4f  precision %.4f  recall %.4f  (%llu items, %zu labels, accuracy %.4f)\n\n",
               avg_names[o->average], o->average == LF_AVERAGE_BINARY ? ", positive label " : "",
               o->average == LF_AVERAGE_BINARY ? o->pos_label : "", avg.f1, avg.precision, avg.recall,
               (unsigned long long)total, L, acc);
        int w = 12;
        for (size_t i = 0; i < L && i < 200; i++) {
            int n = (int)strlen(lf_confusion_label(c, i));
            if (n > w) w = n < 40 ? n : 40;
        }
        printf("%-*s %10s %10s %10s %10s\n", w, "label", "precision", "recall", "f1", "support");
        for (size_t i = 0; i < L; i++) {
            lf_prf p;
            lf_confusion_class(c, i, &p);
            printf("%-*s %10.4f %10.4f %10.4f %10llu\n", w, lf_confusion_label(c, i), p.precision, p.recall, p.f1,
                   (unsigned long long)p.support);
        }
        printf("%-*s %10.4f %10.4f %10.4f %10llu\n", w, "macro avg", macro.precision, macro.recall, macro.f1,
               (unsigned long long)total);
        printf("%-*s %10.4f %10.4f %10.4f %10llu\n", w, "micro avg", micro.precision, micro.recall, micro.f1,
               (unsigned long long)total);
        if (L <= 30) {
            printf("\nconfusion matrix (rows: gold, columns: predicted)\n%-*s", w, "");
            for (size_t k = 0; k < L; k++) printf(" %8.8s", lf_confusion_label(c, k));
            printf("\n");
            for (size_t i = 0; i < L; i++) {
                printf("%-*s", w, lf_confusion_label(c, i));
                for (size_t k = 0; k < L; k++) printf(" %8llu", (unsigned long long)lf_confusion_count(c, i, k));
                printf("\n");
            }
        } else {
            printf("\n(confusion matrix of %zu labels: see --json)\n", L);
        }
    }
    lf_confusion_free(c);
    return 0;
}

static int run_em(const options *o, const dataset *d) {
    double em_sum = 0, f1_sum = 0;
    for (size_t i = 0; i < d->n; i++) {
        double em, f1;
        if (lf_squad_score(d->items[i].pred, d->items[i].refs, d->items[i].n_refs, &em, &f1) != LF_OK)
            return lib_error(&d->items[i]);
        em_sum += em;
        f1_sum += f1;
    }
    /* evaluate-v1.1.py: 100.0 * sum / total */
    double em = 100.0 * em_sum / (double)d->n, f1 = 100.0 * f1_sum / (double)d->n;
    if (o->json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "metric", "exact_match");
        cJSON_AddNumberToObject(j, "exact_match", em);
        cJSON_AddNumberToObject(j, "f1", f1);
        cJSON_AddNumberToObject(j, "n", (double)d->n);
        print_json(j);
    } else {
        printf("exact_match = %.4f  f1 = %.4f  (%zu items; SQuAD v1.1 normalisation, percent)\n", em, f1, d->n);
    }
    return 0;
}

static int run_hits(const options *o, const dataset *d) {
    lf_ranking r;
    if (lf_ranking_init(&r, o->hits, o->n_hits) != LF_OK) return data_error("%s", lf_last_error());
    for (size_t i = 0; i < d->n; i++) {
        const item *it = &d->items[i];
        double rank;
        if (lf_rank_query(it->scores, it->n_scores, it->gold, it->n_gold, it->filtered, it->n_filtered, o->ties,
                          &rank) != LF_OK ||
            lf_ranking_add(&r, rank) != LF_OK)
            return lib_error(it);
    }
    double hits[LF_RANKING_MAX_K], mrr, mr;
    if (lf_ranking_result(&r, hits, &mrr, &mr) != LF_OK) return data_error("%s", lf_last_error());
    static const char *const ties[] = {"pessimistic", "optimistic", "average"};
    int filtered = 0;
    for (size_t i = 0; i < d->n; i++) filtered |= d->items[i].n_filtered > 0;
    if (o->json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "metric", "hits");
        cJSON_AddStringToObject(j, "ties", ties[o->ties]);
        cJSON_AddBoolToObject(j, "filtered", filtered);
        cJSON_AddNumberToObject(j, "n", (double)d->n);
        cJSON *h = cJSON_AddObjectToObject(j, "hits");
        for (size_t k = 0; k < r.n_k; k++) {
            char key[32];
            snprintf(key, sizeof key, "%ld", r.k[k]);
            cJSON_AddNumberToObject(h, key, hits[k]);
        }
        cJSON_AddNumberToObject(j, "mrr", mrr);
        cJSON_AddNumberToObject(j, "mean_rank", mr);
        print_json(j);
    } else {
        printf("ranking: %zu queries, ties %s, %s setting\n", d->n, ties[o->ties], filtered ? "filtered" : "raw");
        for (size_t k = 0; k < r.n_k; k++) {
            char key[40];
            snprintf(key, sizeof key, "Hits@%ld", r.k[k]);
            printf("%-10s %.4f\n", key, hits[k]);
        }
        printf("%-10s %.4f\n%-10s %.4f\n", "MRR", mrr, "mean rank", mr);
    }
    return 0;
}

int cmd_score(int argc, char **argv) {
    options o;
    int prc = parse_options(argc, argv, &o);
    if (prc == 1) return 0;
    if (prc == 3) return 1;
    if (prc) return 2;
    dataset d;
    memset(&d, 0, sizeof d);
    int rc = o.input ? load_jsonl(&o, &d) : load_files(&o, &d);
    if (!rc) {
        switch (o.metric) {
        case M_BLEU: rc = run_bleu(&o, &d); break;
        case M_ROUGE: rc = run_rouge(&o, &d); break;
        case M_ACCURACY:
        case M_F1: rc = run_classify(&o, &d); break;
        case M_EM: rc = run_em(&o, &d); break;
        case M_HITS: rc = run_hits(&o, &d); break;
        }
    }
    dataset_free(&d);
    return rc ? 1 : 0;
}
