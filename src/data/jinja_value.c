/*
 * Values of the Jinja interpreter (jinja_impl.h): the pool they live in,
 * strings with their content ranges, lists, dicts, Python's truth and
 * equality, str() as Python prints it, and tojson as transformers'
 * (json.dumps with ensure_ascii=False: separators ", " and ": ", or ","
 * and ": " with an indent; floats as Python's repr).
 *
 * Invariants: a string's content ranges are sorted, disjoint, non-empty
 * and inside it; a value made from content (a method or filter result, the
 * str() of a container holding content) is content as a whole, so the
 * tokenizer never reads a special token out of bytes a user wrote.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_impl.h"

typedef struct jchunk {
    struct jchunk *next;
    size_t size, used;
    max_align_t data[];
} jchunk;

#define CHUNK_BYTES ((size_t)64 << 10)

/* Bump allocation in 64 KiB chunks; a request over a quarter chunk gets a
 * chunk of its own (behind the current one, which stays open). */
void *lf__jpool_alloc(jpool *p, size_t n) {
    n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    if (n == 0) n = sizeof(max_align_t);
    jchunk *h = p->head;
    if (h && h->size - h->used >= n) {
        void *r = (char *)h->data + h->used;
        h->used += n;
        memset(r, 0, n);
        return r;
    }
    size_t size = n > CHUNK_BYTES / 4 ? n : CHUNK_BYTES;
    if (size > p->cap || p->used > p->cap - size) return NULL;
    jchunk *c = malloc(sizeof *c + size);
    if (!c) return NULL;
    c->size = size;
    c->used = n;
    p->used += size + sizeof *c;
    if (h && size != CHUNK_BYTES) { /* keep the open chunk at the head */
        c->next = h->next;
        h->next = c;
    } else {
        c->next = h;
        p->head = c;
    }
    memset(c->data, 0, n);
    return c->data;
}

void lf__jpool_free(jpool *p) {
    for (jchunk *c = p->head; c;) {
        jchunk *n = c->next;
        free(c);
        c = n;
    }
    p->head = NULL;
    p->used = 0;
}

lf_status lf__jinja_err(jctx *c, lf_status st, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return lf_fail(st, "%s:%d: %s", c->t->what, c->line, msg);
}

static lf_status nomem(jctx *c) {
    return lf__jinja_err(c, LF_ERR_RANGE, "the render needs more than %zu bytes of values", c->lim.max_memory);
}

jv lf__jv_undef(void) { return (jv){.t = JV_UNDEF}; }
jv lf__jv_none(void) { return (jv){.t = JV_NONE}; }
jv lf__jv_bool(int b) { return (jv){.t = JV_BOOL, .u.b = b != 0}; }
jv lf__jv_int(int64_t i) { return (jv){.t = JV_INT, .u.i = i}; }
jv lf__jv_float(double f) { return (jv){.t = JV_FLOAT, .u.f = f}; }

lf_status lf__jv_str(jctx *c, const char *p, size_t len, int tainted, jv *out) {
    if (len > c->lim.max_memory) return nomem(c);
    jstr *s = lf__jpool_alloc(&c->pool, sizeof *s + len + 1);
    if (!s) return nomem(c);
    char *b = (char *)(s + 1);
    if (len) memcpy(b, p, len);
    b[len] = 0;
    s->p = b;
    s->len = len;
    if (tainted && len) {
        size_t *t = lf__jpool_alloc(&c->pool, 2 * sizeof *t);
        if (!t) return nomem(c);
        t[0] = 0;
        t[1] = len;
        s->taint = t;
        s->n_taint = 1;
    }
    *out = (jv){.t = JV_STR, .u.s = s};
    return LF_OK;
}

lf_status lf__jv_str_concat(jctx *c, const jstr *a, const jstr *b, jv *out) {
    size_t len = a->len + b->len;
    if (len < a->len || len > c->lim.max_memory) return nomem(c);
    int nt = a->n_taint + b->n_taint;
    jstr *s = lf__jpool_alloc(&c->pool, sizeof *s + len + 1);
    size_t *t = nt ? lf__jpool_alloc(&c->pool, (size_t)nt * 2 * sizeof(size_t)) : NULL;
    if (!s || (nt && !t)) return nomem(c);
    char *buf = (char *)(s + 1);
    memcpy(buf, a->p, a->len);
    memcpy(buf + a->len, b->p, b->len);
    buf[len] = 0;
    int k = 0;
    for (int i = 0; i < a->n_taint; i++, k++) {
        t[2 * k] = a->taint[2 * i];
        t[2 * k + 1] = a->taint[2 * i + 1];
    }
    for (int i = 0; i < b->n_taint; i++) {
        size_t off = b->taint[2 * i] + a->len, l = b->taint[2 * i + 1];
        if (k > 0 && t[2 * (k - 1)] + t[2 * (k - 1) + 1] == off) t[2 * (k - 1) + 1] += l; /* merge touching */
        else {
            t[2 * k] = off;
            t[2 * k + 1] = l;
            k++;
        }
    }
    s->p = buf;
    s->len = len;
    s->taint = t;
    s->n_taint = k;
    *out = (jv){.t = JV_STR, .u.s = s};
    return LF_OK;
}

lf_status lf__jv_str_from(jctx *c, const char *p, size_t len, const jstr *src, jv *out) {
    return lf__jv_str(c, p, len, src && src->n_taint > 0, out);
}

lf_status lf__jv_list_new(jctx *c, size_t cap, jv *out) {
    jlist *l = lf__jpool_alloc(&c->pool, sizeof *l);
    if (!l) return nomem(c);
    if (cap) {
        if (cap > c->lim.max_memory / sizeof(jv)) return nomem(c);
        if (!(l->v = lf__jpool_alloc(&c->pool, cap * sizeof(jv)))) return nomem(c);
        l->cap = cap;
    }
    *out = (jv){.t = JV_LIST, .u.l = l};
    return LF_OK;
}

lf_status lf__jv_list_push(jctx *c, jlist *l, jv v) {
    if (l->n == l->cap) {
        size_t nc = l->cap ? 2 * l->cap : 8;
        if (nc > c->lim.max_memory / sizeof(jv)) return nomem(c);
        jv *q = lf__jpool_alloc(&c->pool, nc * sizeof *q);
        if (!q) return nomem(c);
        if (l->n) memcpy(q, l->v, l->n * sizeof *q);
        l->v = q;
        l->cap = nc;
    }
    l->v[l->n++] = v;
    return LF_OK;
}

lf_status lf__jv_dict_new(jctx *c, jv *out) {
    jdict *d = lf__jpool_alloc(&c->pool, sizeof *d);
    if (!d) return nomem(c);
    *out = (jv){.t = JV_DICT, .u.d = d};
    return LF_OK;
}

jv *lf__jv_dict_find(const jdict *d, jv k) {
    for (size_t i = 0; i < d->n; i++)
        if (lf__jv_equal(d->k[i], k)) return &d->v[i];
    return NULL;
}

jv *lf__jv_dict_get(const jdict *d, const char *s, size_t n) {
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == JV_STR && d->k[i].u.s->len == n && !memcmp(d->k[i].u.s->p, s, n)) return &d->v[i];
    return NULL;
}

lf_status lf__jv_dict_set(jctx *c, jdict *d, jv k, jv v) {
    jv *e = lf__jv_dict_find(d, k);
    if (e) {
        *e = v;
        return LF_OK;
    }
    if (d->n == d->cap) {
        size_t nc = d->cap ? 2 * d->cap : 8;
        if (nc > c->lim.max_memory / sizeof(jv)) return nomem(c);
        jv *nk = lf__jpool_alloc(&c->pool, nc * sizeof *nk), *nv = lf__jpool_alloc(&c->pool, nc * sizeof *nv);
        if (!nk || !nv) return nomem(c);
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof *nk);
            memcpy(nv, d->v, d->n * sizeof *nv);
        }
        d->k = nk;
        d->v = nv;
        d->cap = nc;
    }
    d->k[d->n] = k;
    d->v[d->n++] = v;
    return LF_OK;
}

int lf__jv_truthy(jv v) {
    switch (v.t) {
    case JV_UNDEF:
    case JV_NONE: return 0;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0.0;
    case JV_STR: return v.u.s->len != 0;
    case JV_LIST: return v.u.l->n != 0;
    case JV_DICT: return v.u.d->n != 0;
    default: return 1;
    }
}

static int is_num(jv v) { return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL; }
static double num(jv v) { return v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : (double)v.u.b; }

int lf__jv_equal(jv a, jv b) {
    if (is_num(a) && is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT)
            return (a.t == JV_INT ? a.u.i : a.u.b) == (b.t == JV_INT ? b.u.i : b.u.b);
        return num(a) == num(b);
    }
    if (a.t != b.t) return 0;
    switch (a.t) {
    case JV_UNDEF:
    case JV_NONE: return 1;
    case JV_STR: return a.u.s->len == b.u.s->len && !memcmp(a.u.s->p, b.u.s->p, a.u.s->len);
    case JV_LIST:
        if (a.u.l->n != b.u.l->n) return 0;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!lf__jv_equal(a.u.l->v[i], b.u.l->v[i])) return 0;
        return 1;
    case JV_DICT:
        if (a.u.d->n != b.u.d->n) return 0;
        for (size_t i = 0; i < a.u.d->n; i++) {
            jv *o = lf__jv_dict_find(b.u.d, a.u.d->k[i]);
            if (!o || !lf__jv_equal(a.u.d->v[i], *o)) return 0;
        }
        return 1;
    case JV_NS: return a.u.d == b.u.d;
    case JV_MACRO: return a.u.m == b.u.m;
    default: return 0;
    }
}

const char *lf__jv_type_name(jv v) {
    static const char *const names[] = {"undefined", "none", "bool", "int",       "float",
                                        "string",    "list", "dict", "namespace", "macro"};
    return names[v.t];
}

size_t lf__utf8_count(const char *p, size_t len) {
    size_t k = 0;
    for (size_t i = 0; i < len; i++) k += ((unsigned char)p[i] & 0xC0) != 0x80;
    return k;
}

size_t lf__utf8_offset(const char *p, size_t len, size_t k) {
    size_t i = 0;
    while (i < len && k > 0) {
        i++;
        while (i < len && ((unsigned char)p[i] & 0xC0) == 0x80) i++;
        k--;
    }
    return i;
}

/* ---------------------------------------------------------------- printing */
typedef struct sbuf {
    jctx *c;
    char *p;
    size_t len, cap;
    int tainted;
    lf_status st;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->st != LF_OK) return;
    if (b->len + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 64;
        while (nc < b->len + n + 1) nc *= 2;
        if (nc > b->c->lim.max_memory) {
            b->st = nomem(b->c);
            return;
        }
        char *q = lf__jpool_alloc(&b->c->pool, nc);
        if (!q) {
            b->st = nomem(b->c);
            return;
        }
        if (b->len) memcpy(q, b->p, b->len);
        b->p = q;
        b->cap = nc;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}
static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

/* Python's repr of a float (the shortest text that reads back the same). */
static void put_float(sbuf *b, double f, int json) {
    char buf[64];
    if (isnan(f)) return sb_str(b, json ? "NaN" : "nan");
    if (isinf(f)) return sb_str(b, f > 0 ? (json ? "Infinity" : "inf") : (json ? "-Infinity" : "-inf"));
    int p = 1;
    for (; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, f);
        if (strtod(buf, NULL) == f) break;
    }
    /* buf: d.ddde[+-]XX with p digits */
    char digits[32];
    int nd = 0, neg = buf[0] == '-';
    const char *q = buf + neg;
    for (; *q && *q != 'e'; q++)
        if (*q != '.') digits[nd++] = *q;
    int exp = atoi(q + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    char out[64];
    int k = 0;
    if (neg) out[k++] = '-';
    if (exp < -4 || exp >= 16) {
        out[k++] = digits[0];
        if (nd > 1) {
            out[k++] = '.';
            for (int i = 1; i < nd; i++) out[k++] = digits[i];
        }
        k += snprintf(out + k, sizeof out - (size_t)k, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    } else if (exp < 0) {
        out[k++] = '0';
        out[k++] = '.';
        for (int i = 0; i < -exp - 1; i++) out[k++] = '0';
        for (int i = 0; i < nd; i++) out[k++] = digits[i];
    } else {
        for (int i = 0; i <= exp; i++) out[k++] = i < nd ? digits[i] : '0';
        out[k++] = '.';
        if (nd > exp + 1)
            for (int i = exp + 1; i < nd; i++) out[k++] = digits[i];
        else out[k++] = '0';
    }
    sb_put(b, out, (size_t)k);
}

static void put_repr_str(sbuf *b, const jstr *s) {
    int has_sq = memchr(s->p, '\'', s->len) != NULL, has_dq = memchr(s->p, '"', s->len) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    sb_put(b, &q, 1);
    for (size_t i = 0; i < s->len; i++) {
        unsigned char ch = (unsigned char)s->p[i];
        char e[8];
        if (ch == (unsigned char)q || ch == '\\') {
            e[0] = '\\';
            e[1] = (char)ch;
            sb_put(b, e, 2);
        } else if (ch == '\n') sb_str(b, "\\n");
        else if (ch == '\r') sb_str(b, "\\r");
        else if (ch == '\t') sb_str(b, "\\t");
        else if (ch < 0x20 || ch == 0x7f) {
            snprintf(e, sizeof e, "\\x%02x", ch);
            sb_str(b, e);
        } else sb_put(b, (const char *)&ch, 1);
    }
    sb_put(b, &q, 1);
}

static void put_str(sbuf *b, jv v, int top, int depth) {
    if (depth > LF__JINJA_DEPTH_MAX) {
        b->st = lf__jinja_err(b->c, LF_ERR_RANGE, "a value nests deeper than %d", LF__JINJA_DEPTH_MAX);
        return;
    }
    char buf[32];
    switch (v.t) {
    case JV_UNDEF: break;
    case JV_NONE: sb_str(b, "None"); break;
    case JV_BOOL: sb_str(b, v.u.b ? "True" : "False"); break;
    case JV_INT: snprintf(buf, sizeof buf, "%lld", (long long)v.u.i), sb_str(b, buf); break;
    case JV_FLOAT: put_float(b, v.u.f, 0); break;
    case JV_STR:
        b->tainted |= v.u.s->n_taint > 0;
        if (top) sb_put(b, v.u.s->p, v.u.s->len);
        else put_repr_str(b, v.u.s);
        break;
    case JV_LIST:
        sb_str(b, v.u.l->tuple ? "(" : "[");
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) sb_str(b, ", ");
            put_str(b, v.u.l->v[i], 0, depth + 1);
        }
        if (v.u.l->tuple && v.u.l->n == 1) sb_str(b, ",");
        sb_str(b, v.u.l->tuple ? ")" : "]");
        break;
    case JV_DICT:
        sb_str(b, "{");
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i) sb_str(b, ", ");
            put_str(b, v.u.d->k[i], 0, depth + 1);
            sb_str(b, ": ");
            put_str(b, v.u.d->v[i], 0, depth + 1);
        }
        sb_str(b, "}");
        break;
    case JV_NS: sb_str(b, "<Namespace>"); break;
    case JV_MACRO: sb_str(b, "<Macro>"); break;
    }
}

lf_status lf__jv_to_str(jctx *c, jv v, jv *out) {
    if (v.t == JV_STR) {
        *out = v;
        return LF_OK;
    }
    sbuf b = {c, NULL, 0, 0, 0, LF_OK};
    put_str(&b, v, 1, 0);
    if (b.st != LF_OK) return b.st;
    return lf__jv_str(c, b.p ? b.p : "", b.len, b.tainted, out);
}

/* ---------------------------------------------------------------- tojson */
static void json_str(sbuf *b, const char *p, size_t n) {
    sb_str(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        char e[8];
        switch (ch) {
        case '"': sb_str(b, "\\\""); break;
        case '\\': sb_str(b, "\\\\"); break;
        case '\n': sb_str(b, "\\n"); break;
        case '\r': sb_str(b, "\\r"); break;
        case '\t': sb_str(b, "\\t"); break;
        case '\b': sb_str(b, "\\b"); break;
        case '\f': sb_str(b, "\\f"); break;
        default:
            if (ch < 0x20) {
                snprintf(e, sizeof e, "\\u%04x", ch);
                sb_str(b, e);
            } else sb_put(b, (const char *)&ch, 1);
        }
    }
    sb_str(b, "\"");
}

static void json_indent(sbuf *b, int indent, int level) {
    sb_str(b, "\n");
    for (int i = 0; i < indent * level && b->st == LF_OK; i++) sb_str(b, " ");
}

static int key_cmp(const void *x, const void *y, const jdict *d) {
    const jstr *a = d->k[*(const size_t *)x].u.s, *bb = d->k[*(const size_t *)y].u.s;
    size_t n = a->len < bb->len ? a->len : bb->len;
    int r = memcmp(a->p, bb->p, n);
    return r ? r : (a->len > bb->len) - (a->len < bb->len);
}

static void put_json(sbuf *b, jv v, int indent, int sort, int level) {
    if (b->st != LF_OK) return;
    if (level > LF__JINJA_DEPTH_MAX) {
        b->st = lf__jinja_err(b->c, LF_ERR_RANGE, "tojson: a value nests deeper than %d", LF__JINJA_DEPTH_MAX);
        return;
    }
    char buf[32];
    switch (v.t) {
    case JV_NONE: sb_str(b, "null"); break;
    case JV_BOOL: sb_str(b, v.u.b ? "true" : "false"); break;
    case JV_INT: snprintf(buf, sizeof buf, "%lld", (long long)v.u.i), sb_str(b, buf); break;
    case JV_FLOAT: put_float(b, v.u.f, 1); break;
    case JV_STR:
        b->tainted |= v.u.s->n_taint > 0;
        json_str(b, v.u.s->p, v.u.s->len);
        break;
    case JV_LIST:
        if (!v.u.l->n) {
            sb_str(b, "[]");
            break;
        }
        sb_str(b, "[");
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) sb_str(b, indent >= 0 ? "," : ", ");
            if (indent >= 0) json_indent(b, indent, level + 1);
            put_json(b, v.u.l->v[i], indent, sort, level + 1);
        }
        if (indent >= 0) json_indent(b, indent, level);
        sb_str(b, "]");
        break;
    case JV_DICT: {
        const jdict *d = v.u.d;
        if (!d->n) {
            sb_str(b, "{}");
            break;
        }
        size_t *ord = lf__jpool_alloc(&b->c->pool, d->n * sizeof *ord);
        if (!ord) {
            b->st = nomem(b->c);
            return;
        }
        for (size_t i = 0; i < d->n; i++) {
            ord[i] = i;
            if (d->k[i].t != JV_STR) {
                b->st = lf__jinja_err(b->c, LF_ERR_UNSUPPORTED, "tojson: a dict key of type %s",
                                      lf__jv_type_name(d->k[i]));
                return;
            }
        }
        if (sort) /* insertion sort: dicts in templates are small */
            for (size_t i = 1; i < d->n; i++)
                for (size_t j = i; j > 0 && key_cmp(&ord[j - 1], &ord[j], d) > 0; j--) {
                    size_t t = ord[j];
                    ord[j] = ord[j - 1];
                    ord[j - 1] = t;
                }
        sb_str(b, "{");
        for (size_t i = 0; i < d->n; i++) {
            if (i) sb_str(b, indent >= 0 ? "," : ", ");
            if (indent >= 0) json_indent(b, indent, level + 1);
            b->tainted |= d->k[ord[i]].u.s->n_taint > 0;
            json_str(b, d->k[ord[i]].u.s->p, d->k[ord[i]].u.s->len);
            sb_str(b, ": ");
            put_json(b, d->v[ord[i]], indent, sort, level + 1);
        }
        if (indent >= 0) json_indent(b, indent, level);
        sb_str(b, "}");
        break;
    }
    default:
        b->st = lf__jinja_err(b->c, LF_ERR_INVALID_ARG, "tojson: a value of type %s is not JSON serializable",
                              lf__jv_type_name(v));
    }
}

lf_status lf__jv_tojson(jctx *c, jv v, int indent, int sort_keys, jv *out) {
    sbuf b = {c, NULL, 0, 0, 0, LF_OK};
    put_json(&b, v, indent, sort_keys, 0);
    if (b.st != LF_OK) return b.st;
    return lf__jv_str(c, b.p ? b.p : "", b.len, b.tainted, out);
}

lf_status lf__jv_from_json(jctx *c, const cJSON *j, int tainted, int depth, jv *out) {
    if (depth > LF__JINJA_DEPTH_MAX)
        return lf_fail(LF_ERR_RANGE, "%s: a template variable nests deeper than %d", c->t->what, LF__JINJA_DEPTH_MAX);
    lf_status st = LF_OK;
    if (cJSON_IsNull(j)) *out = lf__jv_none();
    else if (cJSON_IsBool(j)) *out = lf__jv_bool(cJSON_IsTrue(j));
    else if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        if (d == floor(d) && fabs(d) < 9.0e15) *out = lf__jv_int((int64_t)d);
        else *out = lf__jv_float(d);
    } else if (cJSON_IsString(j)) st = lf__jv_str(c, j->valuestring, strlen(j->valuestring), tainted, out);
    else if (cJSON_IsArray(j)) {
        if ((st = lf__jv_list_new(c, 0, out)) != LF_OK) return st;
        for (const cJSON *e = j->child; e && st == LF_OK; e = e->next) {
            jv v;
            if ((st = lf__jv_from_json(c, e, tainted, depth + 1, &v)) == LF_OK) st = lf__jv_list_push(c, out->u.l, v);
        }
    } else if (cJSON_IsObject(j)) {
        if ((st = lf__jv_dict_new(c, out)) != LF_OK) return st;
        for (const cJSON *e = j->child; e && st == LF_OK; e = e->next) {
            jv k, v;
            if ((st = lf__jv_str(c, e->string, strlen(e->string), tainted, &k)) != LF_OK) break;
            if ((st = lf__jv_from_json(c, e, tainted, depth + 1, &v)) == LF_OK) st = lf__jv_dict_set(c, out->u.d, k, v);
        }
    } else *out = lf__jv_none();
    return st;
}
