/*
 * Reading a training configuration into the table's fields (config.c has
 * the table, config_impl.h the parse context): a JSON text walked key by
 * key, command-line overrides ("key=value", a bare nanoGPT leaf or alias),
 * DeepSpeed keys without a row (config_deepspeed.c) and "auto" values.
 *
 * Invariants:
 *  - numbers are read from their source text, not from cJSON's double, so a
 *    64-bit seed is exact and an integer written 1e3 or 12.0 is checked for
 *    integrality and overflow;
 *  - a problem with one key (unknown, wrong type, refused value) is kept
 *    (lf__cfg_keep_error) and reading goes on, so one pass reports them all;
 *    ranges are checked after every value is in (config_check.c).
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

/* ---------------------------------------------------------------- parse context */

/* Append one line to a bounded buffer; a line that does not fit is dropped
 * whole (and "..." ends the buffer). */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
void
lf__cfg_add_line(char *buf, size_t cap, const char *fmt, ...) {
    char line[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    size_t at = strlen(buf), n = strlen(line);
    if (at + n + 2 <= cap) {
        memcpy(buf + at, line, n);
        buf[at + n] = '\n';
        buf[at + n + 1] = 0;
    } else if (at + 5 <= cap && (at < 4 || strcmp(buf + at - 4, "...\n"))) {
        memcpy(buf + at, "...\n", 5);
    }
}

/* Keep the problem just reported (lf_last_error) and go on. Out of memory
 * and internal errors end the load at once (returned). */
lf_status lf__cfg_keep_error(parse_ctx *c, lf_status st) {
    if (st == LF_OK) return LF_OK;
    if (st == LF_ERR_NOMEM || st == LF_ERR_INTERNAL || st == LF_ERR_INVALID_ARG) return st;
    if (!c->n_errors++) c->first_st = st;
    lf__cfg_add_line(c->errors, sizeof c->errors, "%s", lf_last_error());
    return LF_OK;
}

const char *const lf__cfg_cli_where = "on the command line";

/* Number literals outside strings, in document order: the same order a
 * depth-first walk of cJSON's tree meets number nodes. out may be NULL (count). */
static size_t scan_numbers(const char *s, numraw *out) {
    size_t n = 0;
    int in_str = 0;
    for (const char *p = s; *p; p++) {
        if (in_str) {
            if (*p == '\\' && p[1]) p++;
            else if (*p == '"') in_str = 0;
            continue;
        }
        if (*p == '"') {
            in_str = 1;
        } else if (*p == '-' || (*p >= '0' && *p <= '9')) {
            const char *q = p;
            while (*q && strchr("0123456789+-.eE", *q)) q++;
            if (out) {
                out[n].node = NULL;
                out[n].s = p;
                out[n].n = (size_t)(q - p);
            }
            n++;
            p = q - 1;
        }
    }
    return n;
}

static void bind_numbers(const cJSON *v, numraw *nums, size_t n, size_t *next) {
    for (; v; v = v->next) {
        if (cJSON_IsNumber(v)) {
            if (*next < n) nums[*next].node = v;
            (*next)++;
        } else if (v->child) {
            bind_numbers(v->child, nums, n, next);
        }
    }
}

/* Index the number literals of text (parsed into root) for number_text. On a
 * count mismatch (never for text cJSON accepted) the index is dropped and
 * numbers fall back to cJSON's double. */
static lf_status index_numbers(const char *text, const cJSON *root, numraw **out, size_t *n_out) {
    *out = NULL;
    *n_out = 0;
    size_t n = scan_numbers(text, NULL);
    if (n == 0) return LF_OK;
    numraw *nums = lf_alloc(n * sizeof *nums);
    if (!nums) return lf_fail(LF_ERR_NOMEM, "out of memory indexing %zu numbers of a configuration", n);
    scan_numbers(text, nums);
    size_t next = 0;
    bind_numbers(root, nums, n, &next);
    if (next != n) {
        lf_free(nums);
        return LF_OK;
    }
    *out = nums;
    *n_out = n;
    return LF_OK;
}

/* The literal text of number node v into buf; 0 when it does not fit. */
static int number_text(const parse_ctx *c, const cJSON *v, char *buf, size_t cap) {
    for (size_t i = 0; i < c->n_nums; i++) {
        if (c->nums[i].node == v) {
            if (c->nums[i].n + 1 > cap) return 0;
            memcpy(buf, c->nums[i].s, c->nums[i].n);
            buf[c->nums[i].n] = 0;
            return 1;
        }
    }
    snprintf(buf, cap, "%.17g", v->valuedouble);
    return 1;
}

/* Short rendering of a value for messages: "abc" with quotes, numbers as written. */
static const char *describe(const parse_ctx *c, const cJSON *v, char *buf, size_t cap) {
    if (cJSON_IsString(v)) {
        size_t n = strlen(v->valuestring);
        snprintf(buf, cap, "\"%.60s%s\"", v->valuestring, n > 60 ? "..." : "");
    } else if (cJSON_IsNumber(v)) {
        if (!number_text(c, v, buf, cap)) snprintf(buf, cap, "a very long number");
    } else if (cJSON_IsTrue(v)) {
        snprintf(buf, cap, "true");
    } else if (cJSON_IsFalse(v)) {
        snprintf(buf, cap, "false");
    } else if (cJSON_IsNull(v)) {
        snprintf(buf, cap, "null");
    } else {
        char *s = cJSON_PrintUnformatted(v);
        if (s) {
            snprintf(buf, cap, "%.60s%s", s, strlen(s) > 60 ? "..." : "");
            cJSON_free(s);
        } else {
            snprintf(buf, cap, cJSON_IsArray(v) ? "an array" : "an object");
        }
    }
    return buf;
}

static lf_status type_error(const parse_ctx *c, const key_def *k, const cJSON *v, const char *expected) {
    char got[96];
    if (cJSON_IsString(v) && !strcmp(v->valuestring, "auto") && !c->from_cli)
        return lf_fail(LF_ERR_CONFIG,
                       "key '%s' %s: \"auto\" is resolved only for the keys HF Trainer fills (docs/deepspeed.md); "
                       "write %s",
                       k->path, c->cur, expected);
    return lf_fail(LF_ERR_CONFIG, "key '%s' %s: expected %s, got %s", k->path, c->cur, expected,
                   describe(c, v, got, sizeof got));
}

lf_status lf__cfg_range_error_text(const key_def *k, const char *where, const char *value) {
    char range[80];
    lf__cfg_fmt_range(range, sizeof range, k);
    return lf_fail(LF_ERR_CONFIG, "key '%s' %s: %s is out of range %s", k->path, where, value, range);
}

/* ---------------------------------------------------------------- reading values */

static lf_status read_integer(const parse_ctx *c, const key_def *k, const cJSON *v, long long *out) {
    char num[128];
    if (!cJSON_IsNumber(v)) return type_error(c, k, v, "an integer");
    if (!number_text(c, v, num, sizeof num)) return lf__cfg_range_error_text(k, c->cur, "a very long number");
    long long x;
    char *end;
    if (!strpbrk(num, ".eE")) {
        errno = 0;
        x = strtoll(num, &end, 10);
        if (errno == ERANGE || *end) return lf__cfg_range_error_text(k, c->cur, num);
    } else {
        double d = strtod(num, &end);
        if (!isfinite(d)) return lf__cfg_range_error_text(k, c->cur, num);
        if (d != floor(d)) return type_error(c, k, v, "an integer");
        if (d < -9.2e18 || d > 9.2e18) return lf__cfg_range_error_text(k, c->cur, num);
        x = (long long)d;
    }
    long long tlo = k->type == KT_LONG ? LONG_MIN : INT_MIN, thi = k->type == KT_LONG ? LONG_MAX : INT_MAX;
    if (x < tlo || x > thi) return lf__cfg_range_error_text(k, c->cur, num);
    *out = x;
    return LF_OK;
}

static lf_status read_float(const parse_ctx *c, const key_def *k, const cJSON *v, float *out) {
    char num[128];
    if (!cJSON_IsNumber(v)) return type_error(c, k, v, k->type == KT_PAIR ? "an array of 2 numbers" : "a number");
    if (!number_text(c, v, num, sizeof num)) return lf__cfg_range_error_text(k, c->cur, "a very long number");
    double d = strtod(num, NULL);
    if (!isfinite(d) || fabs(d) > FLT_MAX) return lf__cfg_range_error_text(k, c->cur, num);
    *out = (float)d;
    return LF_OK;
}

static lf_status read_u64(const parse_ctx *c, const key_def *k, const cJSON *v, uint64_t *out) {
    char num[128];
    if (!cJSON_IsNumber(v)) return type_error(c, k, v, "an unsigned 64-bit integer");
    if (!number_text(c, v, num, sizeof num)) return lf__cfg_range_error_text(k, c->cur, "a very long number");
    if (num[0] == '-') return lf__cfg_range_error_text(k, c->cur, num);
    if (strpbrk(num, ".eE+"))
        return type_error(c, k, v, "an unsigned 64-bit integer written without a fraction or exponent");
    errno = 0;
    char *end;
    unsigned long long x = strtoull(num, &end, 10);
    if (errno == ERANGE || *end || x > UINT64_MAX) return lf__cfg_range_error_text(k, c->cur, num);
    *out = (uint64_t)x;
    return LF_OK;
}

/* The string value of v; on the command line anything that is not a JSON
 * string is taken verbatim (out_dir=2024 is the directory "2024"). */
static const char *string_value(const parse_ctx *c, const cJSON *v) {
    if (cJSON_IsString(v)) return v->valuestring;
    if (c->from_cli && c->cli_text) return c->cli_text;
    return NULL;
}

static lf_status choice_error(const parse_ctx *c, const key_def *k, const char *s) {
    char list[160] = "";
    size_t at = 0;
    for (int j = 0; choices_of(k)[j]; j++)
        at += (size_t)snprintf(list + at, at < sizeof list ? sizeof list - at : 0, "%s%s", j ? ", " : "",
                               choices_of(k)[j]);
    return lf_fail(LF_ERR_CONFIG, "key '%s' %s: \"%.60s\" is not one of: %s", k->path, c->cur, s, list);
}

/* Apply value v to table row i. */
static lf_status set_key(parse_ctx *c, int i, const cJSON *v) {
    const key_def *k = &lf__cfg_keys[i];
    lf_train_config *cfg = &c->cfg;
    lf_status st = LF_OK;
    switch (k->type) {
    case KT_INT:
    case KT_LONG: {
        long long x = 0;
        if ((st = read_integer(c, k, v, &x)) != LF_OK) return st;
        if (k->type == KT_INT) *(int *)field(cfg, k->off) = (int)x;
        else *(long *)field(cfg, k->off) = (long)x;
        break;
    }
    case KT_FLOAT:
        if ((st = read_float(c, k, v, (float *)field(cfg, k->off))) != LF_OK) return st;
        break;
    case KT_BOOL: {
        int b;
        if (cJSON_IsBool(v)) b = cJSON_IsTrue(v);
        else if (c->from_cli && cJSON_IsString(v) && lf__cfg_ascii_ieq(v->valuestring, "true")) b = 1;
        else if (c->from_cli && cJSON_IsString(v) && lf__cfg_ascii_ieq(v->valuestring, "false")) b = 0;
        else return type_error(c, k, v, "true or false");
        *(int *)field(cfg, k->off) = b;
        break;
    }
    case KT_U64:
        if ((st = read_u64(c, k, v, (uint64_t *)field(cfg, k->off))) != LF_OK) return st;
        break;
    case KT_STRING: {
        const char *s = string_value(c, v);
        if (!s) return type_error(c, k, v, "a string");
        size_t n = strlen(s);
        if (n >= k->size)
            return lf_fail(LF_ERR_CONFIG, "key '%s' %s: a string of %zu bytes is longer than the %zu allowed", k->path,
                           c->cur, n, k->size - 1);
        memcpy(field(cfg, k->off), s, n + 1);
        break;
    }
    case KT_STRLIST: {
        /* an array of strings, or one string; on the command line a
         * comma-separated list */
        char buf[8192];
        size_t at = 0;
        const cJSON *it = cJSON_IsArray(v) ? v->child : v;
        if (!cJSON_IsArray(v) && !string_value(c, v)) return type_error(c, k, v, "an array of strings");
        for (; it; it = cJSON_IsArray(v) ? it->next : NULL) {
            const char *s = cJSON_IsArray(v) ? (cJSON_IsString(it) ? it->valuestring : NULL) : string_value(c, it);
            if (!s) return type_error(c, k, v, "an array of strings");
            for (const char *p = s; *p;) {
                const char *e = (!cJSON_IsArray(v) && c->from_cli) ? strchr(p, ',') : NULL;
                size_t n = e ? (size_t)(e - p) : strlen(p);
                if (n == 0 || memchr(p, '\n', n))
                    return lf_fail(LF_ERR_CONFIG, "key '%s' %s: an element is empty or holds a newline", k->path,
                                   c->cur);
                if (at + n + 2 > sizeof buf || at + n + 1 >= k->size)
                    return lf_fail(LF_ERR_CONFIG, "key '%s' %s: the list is longer than the %zu bytes allowed", k->path,
                                   c->cur, k->size - 1);
                if (at) buf[at++] = '\n';
                memcpy(buf + at, p, n);
                at += n;
                p += n + (e ? 1 : 0);
                if (!e) break;
            }
        }
        buf[at] = 0;
        memcpy(field(cfg, k->off), buf, at + 1);
        break;
    }
    case KT_CHOICE:
    case KT_ENUM: {
        if (!cJSON_IsString(v)) return type_error(c, k, v, "a string");
        int j = 0;
        while (choices_of(k)[j] && !lf__cfg_ascii_ieq(choices_of(k)[j], v->valuestring)) j++;
        if (!choices_of(k)[j]) return choice_error(c, k, v->valuestring);
        if (k->type == KT_ENUM) *(int *)field(cfg, k->off) = j;
        else snprintf((char *)field(cfg, k->off), k->size, "%s", choices_of(k)[j]);
        break;
    }
    case KT_PAIR: {
        if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2) return type_error(c, k, v, "an array of 2 numbers");
        float a, b;
        if ((st = read_float(c, k, v->child, &a)) != LF_OK) return st;
        if ((st = read_float(c, k, v->child->next, &b)) != LF_OK) return st;
        *(float *)field(cfg, k->off) = a;
        *(float *)field(cfg, k->off2) = b;
        break;
    }
    case KT_IGNORED: break;
    }
    c->given[i] = 1;
    c->where[i] = c->cur;
    return LF_OK;
}

/* ---------------------------------------------------------------- unknown keys */

static int edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63) return 99;
    int prev[64], cur[64];
    for (size_t j = 0; j <= lb; j++) prev[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int best = prev[j] + 1;
            if (cur[j - 1] + 1 < best) best = cur[j - 1] + 1;
            if (prev[j - 1] + (a[i - 1] != b[j - 1]) < best) best = prev[j - 1] + (a[i - 1] != b[j - 1]);
            cur[j] = best;
        }
        memcpy(prev, cur, (lb + 1) * sizeof(int));
    }
    return prev[lb];
}

/* The known key closest to path: edit distance <= 2 (against the full path,
 * and against leaves and aliases for a bare name), else one sharing the leaf. */
static const char *suggest(const char *path) {
    int best = -1, bestd = 3, bare = strchr(path, '.') == NULL;
    for (int i = 0; i < lf__cfg_nkeys; i++) {
        int d = edit_distance(path, lf__cfg_keys[i].path);
        if (bare) {
            int dl = edit_distance(path, leaf_of(lf__cfg_keys[i].path));
            if (dl < d) d = dl;
            if (lf__cfg_keys[i].alias && (dl = edit_distance(path, lf__cfg_keys[i].alias)) < d) d = dl;
        }
        if (d < bestd) bestd = d, best = i;
    }
    if (best >= 0) return lf__cfg_keys[best].path;
    const char *leaf = leaf_of(path);
    for (int i = 0; i < lf__cfg_nkeys; i++)
        if (!strcmp(leaf, leaf_of(lf__cfg_keys[i].path)) ||
            (lf__cfg_keys[i].alias && !strcmp(leaf, lf__cfg_keys[i].alias)))
            return lf__cfg_keys[i].path;
    return NULL;
}

static lf_status unknown_key(const parse_ctx *c, const char *path) {
    const char *s = suggest(path);
    if (s) return lf_fail(LF_ERR_CONFIG, "unknown key '%s' %s (did you mean '%s'?)", path, c->cur, s);
    return lf_fail(LF_ERR_CONFIG, "unknown key '%s' %s", path, c->cur);
}

/* ---------------------------------------------------------------- walking JSON */

static lf_status apply(parse_ctx *c, const char *path, const cJSON *v);

static lf_status apply_object(parse_ctx *c, const char *prefix, const cJSON *obj) {
    for (const cJSON *m = obj->child; m; m = m->next) {
        char path[PATH_BUF];
        int n = snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", m->string ? m->string : "");
        if (n < 0 || (size_t)n >= sizeof path) return unknown_key(c, path);
        int dup = 0;
        for (const cJSON *p = obj->child; p != m && !dup; p = p->next)
            dup = p->string && m->string && !strcmp(p->string, m->string);
        lf_status st = dup ? lf_fail(LF_ERR_CONFIG, "duplicate key '%s' %s", path, c->cur) : apply(c, path, m);
        if ((st = lf__cfg_keep_error(c, st)) != LF_OK) return st;
    }
    return LF_OK;
}

static int is_auto_value(const cJSON *v) { return cJSON_IsString(v) && !strcmp(v->valuestring, "auto"); }

/* A DeepSpeed key without a table row: ignored with a notice, refused, or
 * accepted only with llmforge's value. */
static lf_status apply_ds(parse_ctx *c, const char *path, const lf__ds_key *d, const cJSON *v) {
    char got[96];
    const char *bad = lf__ds_value_refused(d->path, v);
    if (bad) return lf_fail(LF_ERR_CONFIG, "key '%s' %s: %s: %s", path, c->cur, describe(c, v, got, sizeof got), bad);
    switch (d->state) {
    case LF__DS_REFUSED: return lf_fail(LF_ERR_CONFIG, "key '%s' %s is refused: %s", path, c->cur, d->why);
    case LF__DS_ONLY:
        if (!lf__ds_value_is(v, d->ok))
            return lf_fail(LF_ERR_CONFIG, "key '%s' %s: %s: %s (only %s is accepted)", path, c->cur,
                           describe(c, v, got, sizeof got), d->why, d->ok);
        return LF_OK;
    default:
        if (is_auto_value(v) && lf__ds_auto_rule(path) && c->n_auto_ignored < 8) {
            snprintf(c->auto_ignored[c->n_auto_ignored++], PATH_BUF, "%s", path);
            return LF_OK; /* its note, with the value, comes once the model is known */
        }
        lf__cfg_add_line(c->notes, sizeof c->notes, "ignored: %s (%s)", path, d->why);
        return LF_OK;
    }
}

/* "auto" on a table key: HF Trainer's keys take the command line's override,
 * else TrainingArguments' default (lf__ds_auto_hf_default), else are derived
 * (config_derive.c); any other key refuses it. The default is set as the
 * key's value (an override later replaces it) without counting as given. */
static lf_status apply_auto(parse_ctx *c, int i) {
    c->is_auto[i] = 1;
    const char *note = NULL, *hf = lf__ds_auto_hf_default(lf__cfg_keys[i].path, &note);
    if (!hf) return LF_OK;
    cJSON *v = cJSON_Parse(hf);
    if (!v) return lf_fail(LF_ERR_NOMEM, "out of memory reading \"auto\"");
    lf_status st = set_key(c, i, v);
    cJSON_Delete(v);
    c->given[i] = 0;
    c->where[i] = note;
    return st;
}

static lf_status apply(parse_ctx *c, const char *path, const cJSON *v) {
    int i = lf__cfg_find_key(path);
    if (i >= 0) {
        const char *bad = lf__ds_value_refused(path, v);
        char got[96];
        if (bad)
            return lf_fail(LF_ERR_CONFIG, "key '%s' %s: %s: %s", path, c->cur, describe(c, v, got, sizeof got), bad);
        if (is_auto_value(v) && !c->from_cli && lf__ds_auto_rule(path)) return apply_auto(c, i);
        return set_key(c, i, v);
    }
    const lf__ds_key *d = lf__ds_key_find(path);
    if (d && !lf__cfg_is_section(path)) return apply_ds(c, path, d, v);
    if (lf__cfg_is_section(path) || lf__ds_is_section(path)) {
        if (!cJSON_IsObject(v)) {
            char got[96];
            return lf_fail(LF_ERR_CONFIG, "key '%s' %s: expected an object (a section), got %s", path, c->cur,
                           describe(c, v, got, sizeof got));
        }
        return apply_object(c, path, v);
    }
    return unknown_key(c, path);
}

/* Resolve an override's key: a table path or section, else a bare leaf or a
 * nanoGPT alias naming exactly one key. */
static lf_status resolve_override_key(const parse_ctx *c, const char *key, const char **path) {
    *path = key;
    if (lf__cfg_find_key(key) >= 0 || lf__cfg_is_section(key) || strchr(key, '.')) return LF_OK;
    int found = -1, count = 0;
    char list[512] = "";
    size_t at = 0;
    for (int i = 0; i < lf__cfg_nkeys; i++) {
        if (lf__cfg_keys[i].flags & KF_FULL_PATH) continue;
        if (strcmp(leaf_of(lf__cfg_keys[i].path), key) &&
            !(lf__cfg_keys[i].alias && !strcmp(lf__cfg_keys[i].alias, key)))
            continue;
        found = i;
        count++;
        at += (size_t)snprintf(list + at, at < sizeof list ? sizeof list - at : 0, "%s%s", count > 1 ? ", " : "",
                               lf__cfg_keys[i].path);
    }
    if (count == 1) {
        *path = lf__cfg_keys[found].path;
        return LF_OK;
    }
    if (count > 1)
        return lf_fail(LF_ERR_CONFIG, "ambiguous key '%s' %s: it names %s; write the full path", key, c->cur, list);
    return LF_OK; /* unknown: apply() reports it with a suggestion */
}

lf_status lf__cfg_apply_override(parse_ctx *c, const char *ov) {
    if (!ov) return lf_fail(LF_ERR_INVALID_ARG, "override is NULL");
    if (ov[0] == '-' && ov[1] == '-') ov += 2;
    const char *eq = strchr(ov, '=');
    if (!eq || eq == ov)
        return lf_fail(LF_ERR_CONFIG, "override '%.200s' %s: expected key=value", ov, lf__cfg_cli_where);
    char key[PATH_BUF];
    size_t kn = (size_t)(eq - ov);
    if (kn >= sizeof key) kn = sizeof key - 1;
    memcpy(key, ov, kn);
    key[kn] = 0;
    c->cur = lf__cfg_cli_where;
    const char *path;
    lf_status st = resolve_override_key(c, key, &path);
    if (st != LF_OK) return st;

    const char *val = eq + 1, *end = NULL;
    cJSON *v = cJSON_ParseWithOpts(val, &end, 1);
    numraw *nums = NULL;
    size_t n_nums = 0;
    if (v) {
        st = index_numbers(val, v, &nums, &n_nums);
    } else {
        v = cJSON_CreateString(val); /* not JSON: the text itself */
        if (!v) st = lf_fail(LF_ERR_NOMEM, "out of memory reading override '%s'", key);
    }
    if (st == LF_OK) {
        c->nums = nums;
        c->n_nums = n_nums;
        c->from_cli = 1;
        c->cli_text = val;
        st = apply(c, path, v);
        c->nums = NULL;
        c->n_nums = 0;
        c->from_cli = 0;
        c->cli_text = NULL;
    }
    lf_free(nums);
    cJSON_Delete(v);
    return st;
}

/* Parse a configuration text (cJSON) and apply it; malformed JSON names the
 * origin with line and column. */
lf_status lf__cfg_apply_text(parse_ctx *c, const char *text, const char *name) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    if (!root) {
        long line = 1, col = 1;
        if (end) {
            for (const char *p = text; p < end && *p; p++) {
                if (*p == '\n') line++, col = 1;
                else col++;
            }
        }
        return lf_fail(LF_ERR_FORMAT, "config '%s': invalid JSON near line %ld, column %ld", name, line, col);
    }
    lf_status st;
    if (!cJSON_IsObject(root)) {
        st = lf_fail(LF_ERR_CONFIG, "config '%s': expected a JSON object at the top level", name);
        cJSON_Delete(root);
        return st;
    }
    if (lf__ds_is_deepspeed_file(root)) {
        /* DeepSpeed's and torch's defaults where the file leaves a key out
         * (the ones llmforge's own defaults differ from) */
        c->ds_file = 1;
        c->cfg.beta1 = 0.9f;
        c->cfg.beta2 = 0.999f;
        c->cfg.eps = 1e-8f;
        c->cfg.weight_decay = 0.01f;
        c->cfg.sched_type = LF_SCHED_CONSTANT;
        c->cfg.grad_clip = 0.0f;
    }
    st = index_numbers(text, root, &c->nums, &c->n_nums);
    if (st == LF_OK) st = apply_object(c, "", root);
    lf_free(c->nums);
    c->nums = NULL;
    c->n_nums = 0;
    cJSON_Delete(root);
    return st;
}
