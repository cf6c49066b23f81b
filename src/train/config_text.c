/*
 * The configuration table as text: the dump of a resolved configuration
 * (lf_train_config_to_json: every row but the schedule keys of schedulers
 * not in use, numbers as their exact text, so parse(to_json(cfg)) reproduces
 * cfg) and the --help text (lf_train_config_help: every row, then
 * DeepSpeed's keys without a row).
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

/* The value of row k as a cJSON node (numbers as raw text so they print exactly). */
cJSON *lf__cfg_value_json(const lf_train_config *cfg, const key_def *k) {
    char buf[64];
    switch (k->type) {
    case KT_INT:
    case KT_LONG: snprintf(buf, sizeof buf, "%lld", get_integer(cfg, k)); return cJSON_CreateRaw(buf);
    case KT_FLOAT: lf__cfg_fmt_float(buf, sizeof buf, get_float(cfg, k->off)); return cJSON_CreateRaw(buf);
    case KT_BOOL: return cJSON_CreateBool(*(const int *)cfield(cfg, k->off) != 0);
    case KT_U64:
        snprintf(buf, sizeof buf, "%" PRIu64, *(const uint64_t *)cfield(cfg, k->off));
        return cJSON_CreateRaw(buf);
    case KT_STRLIST: {
        cJSON *arr = cJSON_CreateArray();
        char s[8192];
        size_t n = strnlen((const char *)cfield(cfg, k->off), k->size - 1);
        memcpy(s, cfield(cfg, k->off), n);
        s[n] = 0;
        for (char *p = s, *e; arr && *p; p = e ? e + 1 : p + strlen(p)) {
            e = strchr(p, '\n');
            if (e) *e = 0;
            cJSON_AddItemToArray(arr, cJSON_CreateString(p));
            if (!e) break;
        }
        return arr;
    }
    case KT_STRING:
    case KT_CHOICE: {
        /* bounded copy: a hand-built struct may lack the terminator */
        char s[LF_PATH_MAX];
        size_t cap = k->size < sizeof s ? k->size : sizeof s;
        size_t n = strnlen((const char *)cfield(cfg, k->off), cap - 1);
        memcpy(s, cfield(cfg, k->off), n);
        s[n] = 0;
        return cJSON_CreateString(s);
    }
    case KT_ENUM: {
        int j = *(const int *)cfield(cfg, k->off), n = 0;
        while (choices_of(k)[n]) n++;
        if (j >= 0 && j < n) return cJSON_CreateString(choices_of(k)[j]);
        snprintf(buf, sizeof buf, "%d", j); /* invalid; parse will say so */
        return cJSON_CreateRaw(buf);
    }
    case KT_PAIR: {
        cJSON *a = cJSON_CreateArray();
        for (int j = 0; a && j < 2; j++) {
            lf__cfg_fmt_float(buf, sizeof buf, get_float(cfg, j ? k->off2 : k->off));
            cJSON *e = cJSON_CreateRaw(buf);
            if (!e || !cJSON_AddItemToArray(a, e)) {
                cJSON_Delete(e);
                cJSON_Delete(a);
                return NULL;
            }
        }
        return a;
    }
    default: return NULL;
    }
}

/* The dump holds the schedule keys of the scheduler in use only: cosine's
 * warmup_iters/decay_iters/min_lr, or the DeepSpeed scheduler's own
 * scheduler.params (the parse refuses the others, so the dump reads back). */
static int dumped(const lf_train_config *cfg, const key_def *k) {
    int ds = cfg->sched_type >= LF_SCHED_WARMUP_LR;
    if (!strncmp(k->path, "scheduler.params.", 17)) return ds && lf__ds_sched_param_of(k->path + 17, cfg->sched_type);
    if (!strcmp(k->path, "scheduler.warmup_iters") || !strcmp(k->path, "scheduler.decay_iters") ||
        !strcmp(k->path, "scheduler.min_lr"))
        return !ds;
    return 1;
}

char *lf_train_config_to_json(const lf_train_config *cfg) {
    if (!cfg) {
        lf_fail(LF_ERR_INVALID_ARG, "lf_train_config_to_json: cfg is NULL");
        return NULL;
    }
    char *out = NULL, *printed = NULL;
    cJSON *root = cJSON_CreateObject();
    if (!root) goto fail;
    for (int i = 0; i < lf__cfg_nkeys; i++) {
        const key_def *k = &lf__cfg_keys[i];
        if (!is_setting(k) || !dumped(cfg, k)) continue;
        /* walk/create the sections of the dotted path */
        cJSON *parent = root;
        const char *seg = k->path, *dot;
        while ((dot = strchr(seg, '.')) != NULL) {
            char name[PATH_BUF];
            size_t n = (size_t)(dot - seg);
            memcpy(name, seg, n);
            name[n] = 0;
            cJSON *sec = cJSON_GetObjectItemCaseSensitive(parent, name);
            if (!sec && !(sec = cJSON_AddObjectToObject(parent, name))) goto fail;
            parent = sec;
            seg = dot + 1;
        }
        cJSON *v = lf__cfg_value_json(cfg, k);
        if (!v) goto fail;
        if (!cJSON_AddItemToObject(parent, seg, v)) {
            cJSON_Delete(v);
            goto fail;
        }
    }
    printed = cJSON_Print(root);
    if (!printed) goto fail;
    /* cJSON indents with tabs and writes "key":<tab>value; strings never hold
     * a raw tab (escaped), so a tab after ':' is the separator (one space) and
     * every other tab is indentation (two spaces). */
    size_t len = 0, tabs = 0;
    for (const char *p = printed; *p; p++, len++) tabs += *p == '\t';
    out = lf_alloc(len + tabs + 2);
    if (!out) goto fail;
    size_t at = 0;
    for (const char *p = printed; *p; p++) {
        if (*p != '\t') {
            out[at++] = *p;
        } else if (p > printed && p[-1] == ':') {
            out[at++] = ' ';
        } else {
            out[at++] = ' ';
            out[at++] = ' ';
        }
    }
    out[at++] = '\n';
    out[at] = 0;
    cJSON_free(printed);
    cJSON_Delete(root);
    return out;
fail:
    cJSON_free(printed);
    cJSON_Delete(root);
    lf_fail(LF_ERR_NOMEM, "out of memory writing the resolved configuration");
    return NULL;
}

/* ---------------------------------------------------------------- help */

typedef struct sbuf {
    char *buf;
    size_t cap, len;
} sbuf;

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void
sb_printf(sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->len < b->cap ? b->buf + b->len : NULL, b->len < b->cap ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (n > 0) b->len += (size_t)n;
}

static void fmt_default(char *buf, size_t cap, const key_def *k) {
    char a[32], b[32];
    if (k->flags & KF_DERIVED) {
        snprintf(buf, cap, "%s", k->def_str);
        return;
    }
    switch (k->type) {
    case KT_INT:
    case KT_LONG: snprintf(buf, cap, "%lld", (long long)k->def[0]); break;
    case KT_FLOAT: lf__cfg_fmt_float(buf, cap, (float)k->def[0]); break;
    case KT_BOOL: snprintf(buf, cap, "%s", k->def[0] != 0 ? "true" : "false"); break;
    case KT_U64: snprintf(buf, cap, "%llu", (unsigned long long)k->def[0]); break;
    case KT_PAIR:
        lf__cfg_fmt_float(a, sizeof a, (float)k->def[0]);
        lf__cfg_fmt_float(b, sizeof b, (float)k->def[1]);
        snprintf(buf, cap, "[%s, %s]", a, b);
        break;
    default:
        if (k->flags & KF_REQUIRED && !*def_str_of(k)) snprintf(buf, cap, "none, required");
        else snprintf(buf, cap, "\"%s\"", def_str_of(k));
        break;
    }
}

static void fmt_type(char *buf, size_t cap, const key_def *k) {
    char range[80];
    switch (k->type) {
    case KT_INT:
    case KT_LONG:
    case KT_FLOAT:
    case KT_U64:
        if (k->type != KT_U64 && isinf(k->hi)) {
            snprintf(buf, cap, "%s %s %.9g", k->type == KT_FLOAT ? "number" : "integer",
                     (k->flags & KF_LO_OPEN) ? ">" : ">=", k->lo);
        } else {
            lf__cfg_fmt_range(range, sizeof range, k);
            snprintf(buf, cap, "%s in %s", k->type == KT_FLOAT ? "number" : "integer", range);
        }
        break;
    case KT_PAIR:
        lf__cfg_fmt_range(range, sizeof range, k);
        snprintf(buf, cap, "2 numbers in %s", range);
        break;
    case KT_BOOL: snprintf(buf, cap, "true or false"); break;
    case KT_STRING: snprintf(buf, cap, "string"); break;
    case KT_STRLIST: snprintf(buf, cap, "array of strings"); break;
    default: {
        size_t at = (size_t)snprintf(buf, cap, "one of:");
        for (int j = 0; choices_of(k)[j] && at < cap; j++)
            at += (size_t)snprintf(buf + at, cap - at, " %s", choices_of(k)[j]);
        break;
    }
    }
}

size_t lf_train_config_help(char *buf, size_t cap) {
    sbuf b = {buf, buf ? cap : 0, 0};
    if (b.cap) buf[0] = 0;
    sb_printf(&b, "In a file, sections nest: {\"model\": {\"n_layer\": 6}}. On the command line, --key.path=value\n"
                  "(the value is JSON when it parses, else text) or --leaf=value when the leaf names one key.\n\n");
    for (int i = 0; i < lf__cfg_nkeys; i++) {
        const key_def *k = &lf__cfg_keys[i];
        if (!is_setting(k)) continue;
        char type[96], def[64];
        fmt_type(type, sizeof type, k);
        fmt_default(def, sizeof def, k);
        sb_printf(&b, "  %-31s %s; default %s\n      %s", k->path, type, def, k->help);
        if (k->alias) sb_printf(&b, " (also --%s)", k->alias);
        sb_printf(&b, "\n");
    }
    sb_printf(&b, "\nDeepSpeed keys accepted and ignored, with a notice (docs/deepspeed.md says why; others are "
                  "refused with the reason):\n ");
    int nds;
    const lf__ds_key *ds = lf__ds_keys(&nds);
    for (int i = 0, col = 1; i < lf__cfg_nkeys + nds; i++) {
        const char *path = i < lf__cfg_nkeys ? lf__cfg_keys[i].path : ds[i - lf__cfg_nkeys].path;
        if (i < lf__cfg_nkeys ? lf__cfg_keys[i].type != KT_IGNORED : ds[i - lf__cfg_nkeys].state != LF__DS_IGNORED)
            continue;
        size_t len = strlen(path) + 1;
        if (col + len > 96) {
            sb_printf(&b, "\n ");
            col = 1;
        }
        sb_printf(&b, " %s", path);
        col += (int)len;
    }
    sb_printf(&b, "\n");
    if (b.cap && b.len >= b.cap) buf[b.cap - 1] = 0; /* truncated, still terminated */
    return b.len;
}
