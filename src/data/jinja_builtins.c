/*
 * Jinja builtins (jinja.h): the filters, tests, methods and globals the
 * interpreter implements, each as jinja2 / Python defines it. The name
 * tables are what the parser checks at compile time: a name missing here
 * is refused there, naming its line.
 *
 * Text: strip/trim/split use Python's notion of whitespace (the Unicode
 * spaces of str.isspace, not only ASCII). Case mapping (upper, lower,
 * title, capitalize) is Python's for ASCII; on a string holding non-ASCII
 * letters it is refused rather than rendered differently from Python.
 * ImmutableSandboxedEnvironment forbids mutating methods (list.append,
 * dict.update), so they are not here either.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jinja_impl.h"

static int name_in(const char *const *tab, const char *s, size_t n) {
    for (int i = 0; tab[i]; i++)
        if (strlen(tab[i]) == n && !memcmp(tab[i], s, n)) return 1;
    return 0;
}
#define IS(name) (n == strlen(name) && !memcmp(s, name, n))

static const char *const k_filters[] = {"trim",   "length",  "count",      "upper",      "lower",
                                        "tojson", "string",  "default",    "d",          "first",
                                        "last",   "join",    "replace",    "capitalize", "items",
                                        "list",   "int",     "float",      "title",      "safe",
                                        "abs",    "reverse", "selectattr", "rejectattr", NULL};
static const char *const k_tests[] = {"defined",  "undefined", "none",    "string",      "mapping",  "iterable",
                                      "sequence", "number",    "integer", "float",       "boolean",  "true",
                                      "false",    "odd",       "even",    "divisibleby", "eq",       "equalto",
                                      "ne",       "lower",     "upper",   "in",          "callable", NULL};
static const char *const k_methods[] = {"strip", "lstrip", "rstrip",  "startswith", "endswith",   "split",
                                        "upper", "lower",  "replace", "title",      "capitalize", "get",
                                        "items", "keys",   "values",  NULL};
static const char *const k_globals[] = {"raise_exception", "strftime_now", "namespace", "range", "dict", NULL};

int lf__jinja_is_filter(const char *s, size_t n) { return name_in(k_filters, s, n); }
int lf__jinja_is_test(const char *s, size_t n) { return name_in(k_tests, s, n); }
int lf__jinja_is_method(const char *s, size_t n) { return name_in(k_methods, s, n); }
int lf__jinja_is_global(const char *s, size_t n) { return name_in(k_globals, s, n); }

static lf_status mem_err(jctx *c) {
    return lf__jinja_err(c, LF_ERR_RANGE, "the render needs more than %zu bytes of values", c->lim.max_memory);
}

/* ---------------------------------------------------------------- arguments */
/* Argument i (positional index pos, or keyword kw); NULL when absent. */
static const jv *arg(const jargs *a, int pos, const char *kw) {
    int k = 0;
    for (int i = 0; i < a->n; i++) {
        if (a->kw[i]) {
            if (kw && !strcmp(a->kw[i], kw)) return &a->v[i];
        } else if (k++ == pos) return &a->v[i];
    }
    return NULL;
}

static lf_status check_args(jctx *c, const char *what, size_t n, const jargs *a, int max_pos, const char *const *kws) {
    int pos = 0;
    for (int i = 0; i < a->n; i++) {
        if (!a->kw[i]) {
            pos++;
            continue;
        }
        int ok = 0;
        for (int k = 0; kws && kws[k]; k++) ok |= !strcmp(kws[k], a->kw[i]);
        if (!ok)
            return lf__jinja_err(c, LF_ERR_UNSUPPORTED, "'%.*s': unsupported argument '%s'", (int)n, what, a->kw[i]);
    }
    if (pos > max_pos)
        return lf__jinja_err(c, LF_ERR_INVALID_ARG, "'%.*s' takes at most %d arguments, %d given", (int)n, what,
                             max_pos, pos);
    return LF_OK;
}

static lf_status need_str(jctx *c, const char *what, size_t n, jv v) {
    if (v.t == JV_STR) return LF_OK;
    return lf__jinja_err(c, LF_ERR_INVALID_ARG, "'%.*s' needs a string, not %s", (int)n, what, lf__jv_type_name(v));
}

/* ---------------------------------------------------------------- text */
/* Length of the Python whitespace character at p (0: none). */
static size_t ws_len(const unsigned char *p, size_t left) {
    if (left >= 1 && ((p[0] >= 0x09 && p[0] <= 0x0d) || (p[0] >= 0x1c && p[0] <= 0x20))) return 1;
    if (left >= 2 && p[0] == 0xC2 && (p[1] == 0x85 || p[1] == 0xA0)) return 2;
    if (left >= 3) {
        uint32_t cp = ((uint32_t)(p[0] & 0x0F) << 12) | ((uint32_t)(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
        if ((p[0] & 0xF0) == 0xE0 && (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
                                      cp == 0x202F || cp == 0x205F || cp == 0x3000))
            return 3;
    }
    return 0;
}

/* Is p[i] the last byte of a whitespace character? returns its length. */
static size_t ws_len_back(const char *p, size_t i) {
    for (size_t l = 1; l <= 3 && l <= i; l++)
        if (ws_len((const unsigned char *)p + i - l, l) == l) return l;
    return 0;
}

/* s[a, b) with the content ranges that fall inside it. */
static lf_status substr(jctx *c, const jstr *s, size_t a, size_t b, jv *out) {
    lf_status st = lf__jv_str(c, s->p + a, b - a, 0, out);
    if (st != LF_OK || !s->n_taint || a == b) return st;
    size_t *t = lf__jpool_alloc(&c->pool, (size_t)s->n_taint * 2 * sizeof *t);
    if (!t) return mem_err(c);
    int k = 0;
    for (int i = 0; i < s->n_taint; i++) {
        size_t lo = s->taint[2 * i], hi = lo + s->taint[2 * i + 1];
        if (lo < a) lo = a;
        if (hi > b) hi = b;
        if (lo < hi) {
            t[2 * k] = lo - a;
            t[2 * k + 1] = hi - lo;
            k++;
        }
    }
    jstr *js = (jstr *)out->u.s;
    js->taint = t;
    js->n_taint = k;
    return LF_OK;
}

static int in_chars(const jstr *chars, const char *p, size_t l) {
    for (size_t i = 0; i < chars->len;) {
        size_t e = i + 1;
        while (e < chars->len && ((unsigned char)chars->p[e] & 0xC0) == 0x80) e++;
        if (e - i == l && !memcmp(chars->p + i, p, l)) return 1;
        i = e;
    }
    return 0;
}

static size_t char_len(const char *p, size_t i, size_t n) {
    size_t e = i + 1;
    while (e < n && ((unsigned char)p[e] & 0xC0) == 0x80) e++;
    return e - i;
}

static size_t char_len_back(const char *p, size_t i) {
    size_t s = i - 1;
    while (s > 0 && ((unsigned char)p[s] & 0xC0) == 0x80) s--;
    return i - s;
}

/* strip: which 1 left, 2 right, 3 both; chars NULL for whitespace. */
static lf_status strip(jctx *c, const jstr *s, int which, const jstr *chars, jv *out) {
    size_t a = 0, b = s->len;
    while ((which & 1) && a < b) {
        size_t l = chars ? char_len(s->p, a, b) : ws_len((const unsigned char *)s->p + a, b - a);
        if (!l || (chars && !in_chars(chars, s->p + a, l))) break;
        a += l;
    }
    while ((which & 2) && b > a) {
        size_t l = chars ? char_len_back(s->p, b) : ws_len_back(s->p, b);
        if (!l || b - l < a || (chars && !in_chars(chars, s->p + b - l, l))) break;
        b -= l;
    }
    return substr(c, s, a, b, out);
}

/* mode: 'u' upper, 'l' lower, 't' title, 'c' capitalize */
static lf_status recase(jctx *c, const jstr *s, int mode, jv *out) {
    for (size_t i = 0; i < s->len; i++)
        if ((unsigned char)s->p[i] >= 0x80)
            return lf__jinja_err(c, LF_ERR_UNSUPPORTED,
                                 "case mapping of non-ASCII text is not supported (Python's Unicode tables)");
    char *b = lf__jpool_alloc(&c->pool, s->len + 1);
    if (!b) return mem_err(c);
    int prev_alpha = 0;
    for (size_t i = 0; i < s->len; i++) {
        char ch = s->p[i];
        int up = mode == 'u' || (mode == 't' && !prev_alpha) || (mode == 'c' && i == 0);
        if (up && ch >= 'a' && ch <= 'z') ch = (char)(ch - 32);
        if (!up && ch >= 'A' && ch <= 'Z') ch = (char)(ch + 32);
        int alpha = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
        prev_alpha = alpha;
        b[i] = ch;
    }
    return lf__jv_str_from(c, b, s->len, s, out);
}

static lf_status replace(jctx *c, const jstr *s, const jstr *old, const jstr *nw, int64_t count, jv *out) {
    size_t cap = s->len + 1, k = 0;
    char *b = NULL;
    for (int pass = 0; pass < 2; pass++) {
        int64_t done = 0;
        size_t i = 0;
        k = 0;
        while (i <= s->len) {
            int hit = (count < 0 || done < count) && i + old->len <= s->len && !memcmp(s->p + i, old->p, old->len);
            if (hit) {
                if (pass) memcpy(b + k, nw->p, nw->len);
                k += nw->len;
                done++;
                if (old->len == 0) { /* Python inserts between every character */
                    if (i == s->len) break;
                    size_t l = char_len(s->p, i, s->len);
                    if (pass) memcpy(b + k, s->p + i, l);
                    k += l;
                    i += l;
                } else i += old->len;
            } else {
                if (i == s->len) break;
                if (pass) b[k] = s->p[i];
                k++;
                i++;
            }
            if (k > c->lim.max_memory) return mem_err(c);
        }
        if (!pass) {
            cap = k + 1;
            if (!(b = lf__jpool_alloc(&c->pool, cap))) return mem_err(c);
        }
    }
    int tainted = s->n_taint || nw->n_taint;
    return lf__jv_str(c, b, k, tainted, out);
}

static lf_status split(jctx *c, const jstr *s, const jv *sep, int64_t maxsplit, jv *out) {
    lf_status st = lf__jv_list_new(c, 0, out);
    int64_t done = 0;
    if (st != LF_OK) return st;
    if (!sep || sep->t == JV_NONE) { /* runs of whitespace; no empty strings */
        size_t i = 0;
        for (;;) {
            size_t l;
            while (i < s->len && (l = ws_len((const unsigned char *)s->p + i, s->len - i))) i += l;
            if (i >= s->len) break;
            size_t j = i;
            if (maxsplit >= 0 && done >= maxsplit) j = s->len;
            else
                while (j < s->len && !ws_len((const unsigned char *)s->p + j, s->len - j)) j++;
            jv part;
            if (maxsplit >= 0 && done >= maxsplit) { /* the rest, right-stripped as Python does not: keep */
                j = s->len;
            }
            if ((st = substr(c, s, i, j, &part)) != LF_OK || (st = lf__jv_list_push(c, out->u.l, part)) != LF_OK)
                return st;
            done++;
            i = j;
        }
        return LF_OK;
    }
    if (sep->t != JV_STR) return lf__jinja_err(c, LF_ERR_INVALID_ARG, "split: the separator must be a string");
    const jstr *d = sep->u.s;
    if (d->len == 0) return lf__jinja_err(c, LF_ERR_INVALID_ARG, "split: empty separator");
    size_t i = 0, from = 0;
    while (i + d->len <= s->len && (maxsplit < 0 || done < maxsplit)) {
        if (!memcmp(s->p + i, d->p, d->len)) {
            jv part;
            if ((st = substr(c, s, from, i, &part)) != LF_OK || (st = lf__jv_list_push(c, out->u.l, part)) != LF_OK)
                return st;
            done++;
            i += d->len;
            from = i;
        } else i++;
    }
    jv part;
    if ((st = substr(c, s, from, s->len, &part)) != LF_OK) return st;
    return lf__jv_list_push(c, out->u.l, part);
}

static int starts_ends(const jstr *s, const jstr *x, int end) {
    if (x->len > s->len) return 0;
    return !memcmp(s->p + (end ? s->len - x->len : 0), x->p, x->len);
}

/* ---------------------------------------------------------------- filters */
static lf_status items_of(jctx *c, jv d, jv *out) {
    lf_status st = lf__jv_list_new(c, d.u.d->n, out);
    for (size_t i = 0; i < d.u.d->n && st == LF_OK; i++) {
        jv pair;
        if ((st = lf__jv_list_new(c, 2, &pair)) != LF_OK) return st;
        pair.u.l->v[0] = d.u.d->k[i];
        pair.u.l->v[1] = d.u.d->v[i];
        pair.u.l->n = 2;
        pair.u.l->tuple = 1;
        out->u.l->v[out->u.l->n++] = pair;
    }
    return st;
}

static lf_status to_int(jctx *c, jv x, const jv *def, jv *out) {
    *out = def ? *def : lf__jv_int(0);
    if (x.t == JV_INT || x.t == JV_BOOL) *out = lf__jv_int(x.t == JV_INT ? x.u.i : x.u.b);
    else if (x.t == JV_FLOAT && isfinite(x.u.f) && fabs(x.u.f) < 9.2e18) *out = lf__jv_int((int64_t)x.u.f);
    else if (x.t == JV_STR) {
        char buf[64];
        size_t n = x.u.s->len < sizeof buf - 1 ? x.u.s->len : sizeof buf - 1;
        memcpy(buf, x.u.s->p, n);
        buf[n] = 0;
        char *end;
        errno = 0;
        long long v = strtoll(buf, &end, 10);
        while (*end == ' ') end++;
        if (!errno && end != buf && !*end) *out = lf__jv_int(v);
        else {
            double d = strtod(buf, &end);
            if (end != buf && !*end && isfinite(d) && fabs(d) < 9.2e18) *out = lf__jv_int((int64_t)d);
        }
    }
    (void)c;
    return LF_OK;
}

static lf_status seq_end(jctx *c, jv x, int last, jv *out) {
    *out = lf__jv_undef();
    if (x.t == JV_LIST) {
        if (x.u.l->n) *out = x.u.l->v[last ? x.u.l->n - 1 : 0];
    } else if (x.t == JV_STR) {
        const jstr *s = x.u.s;
        if (!s->len) return LF_OK;
        size_t a = last ? s->len - char_len_back(s->p, s->len) : 0;
        size_t b = last ? s->len : char_len(s->p, 0, s->len);
        return substr(c, s, a, b, out);
    } else return lf__jinja_err(c, LF_ERR_INVALID_ARG, "'%s' of a %s", last ? "last" : "first", lf__jv_type_name(x));
    return LF_OK;
}

/* seq|selectattr("attr"[, "test"[, arg]]) and rejectattr */
static lf_status select_attr(jctx *c, const char *s, size_t n, jv x, const jargs *a, jv *out) {
    lf_status st;
    if ((st = check_args(c, s, n, a, 3, NULL)) != LF_OK) return st;
    const jv *at = arg(a, 0, NULL), *tn = arg(a, 1, NULL), *ta = arg(a, 2, NULL);
    if (!at || at->t != JV_STR || (tn && tn->t != JV_STR))
        return lf__jinja_err(c, LF_ERR_INVALID_ARG, "'%.*s' needs an attribute name and a test name", (int)n, s);
    if (tn && !lf__jinja_is_test(tn->u.s->p, tn->u.s->len))
        return lf__jinja_err(c, LF_ERR_UNSUPPORTED, "unsupported test '%.*s'", (int)tn->u.s->len, tn->u.s->p);
    jv seq = x;
    if (x.t == JV_UNDEF) return lf__jv_list_new(c, 0, out);
    if (x.t != JV_LIST) return lf__jinja_err(c, LF_ERR_INVALID_ARG, "'%.*s' of a %s", (int)n, s, lf__jv_type_name(x));
    if ((st = lf__jv_list_new(c, 0, out)) != LF_OK) return st;
    jargs targs = {(jv *)ta, (const char *[]){NULL}, ta ? 1 : 0};
    for (size_t i = 0; i < seq.u.l->n; i++) {
        jv e = seq.u.l->v[i], v = lf__jv_undef();
        if (e.t == JV_DICT || e.t == JV_NS) {
            jv *p = lf__jv_dict_get(e.u.d, at->u.s->p, at->u.s->len);
            if (p) v = *p;
        }
        int r = lf__jv_truthy(v);
        if (tn && (st = lf__jinja_test(c, tn->u.s->p, tn->u.s->len, v, &targs, &r)) != LF_OK) return st;
        if (r == (int)IS("selectattr") && (st = lf__jv_list_push(c, out->u.l, e)) != LF_OK) return st;
    }
    return LF_OK;
}

/* x|list, x|reverse */
static lf_status to_list(jctx *c, const char *s, size_t n, jv x, jv *out) {
    lf_status st;
    jv l;
    if (x.t == JV_LIST) {
        if ((st = lf__jv_list_new(c, x.u.l->n, &l)) != LF_OK) return st;
        if (x.u.l->n) memcpy(l.u.l->v, x.u.l->v, x.u.l->n * sizeof(jv));
        l.u.l->n = x.u.l->n;
    } else if (x.t == JV_DICT) {
        if ((st = lf__jv_list_new(c, x.u.d->n, &l)) != LF_OK) return st;
        if (x.u.d->n) memcpy(l.u.l->v, x.u.d->k, x.u.d->n * sizeof(jv));
        l.u.l->n = x.u.d->n;
    } else if (x.t == JV_STR) {
        if ((st = lf__jv_list_new(c, 0, &l)) != LF_OK) return st;
        for (size_t i = 0; i < x.u.s->len && st == LF_OK;) {
            size_t e = i + char_len(x.u.s->p, i, x.u.s->len);
            jv ch;
            if ((st = substr(c, x.u.s, i, e, &ch)) == LF_OK) st = lf__jv_list_push(c, l.u.l, ch);
            i = e;
        }
        if (st != LF_OK) return st;
    } else return lf__jinja_err(c, LF_ERR_INVALID_ARG, "'%.*s' of a %s", (int)n, s, lf__jv_type_name(x));
    if (IS("reverse"))
        for (size_t i = 0; i < l.u.l->n / 2; i++) {
            jv t = l.u.l->v[i];
            l.u.l->v[i] = l.u.l->v[l.u.l->n - 1 - i];
            l.u.l->v[l.u.l->n - 1 - i] = t;
        }
    if (IS("reverse") && x.t == JV_STR) { /* a reversed string stays a string */
        jv acc;
        if ((st = lf__jv_str(c, "", 0, 0, &acc)) != LF_OK) return st;
        for (size_t i = 0; i < l.u.l->n && st == LF_OK; i++) st = lf__jv_str_concat(c, acc.u.s, l.u.l->v[i].u.s, &acc);
        *out = acc;
        return st;
    }
    *out = l;
    return LF_OK;
}

lf_status lf__jinja_filter(jctx *c, const char *s, size_t n, jv x, const jargs *a, jv *out) {
    lf_status st;
    if (IS("default") || IS("d")) {
        static const char *const kws[] = {"default_value", "boolean", NULL};
        if ((st = check_args(c, s, n, a, 2, kws)) != LF_OK) return st;
        const jv *dv = arg(a, 0, "default_value"), *bo = arg(a, 1, "boolean");
        int use = x.t == JV_UNDEF || (bo && lf__jv_truthy(*bo) && !lf__jv_truthy(x));
        if (!use) *out = x;
        else if (dv) *out = *dv;
        else return lf__jv_str(c, "", 0, 0, out);
        return LF_OK;
    }
    if (IS("tojson")) {
        static const char *const kws[] = {"indent", "ensure_ascii", "sort_keys", NULL};
        if ((st = check_args(c, s, n, a, 1, kws)) != LF_OK) return st;
        const jv *ind = arg(a, 0, "indent"), *sk = arg(a, 99, "sort_keys"), *ea = arg(a, 99, "ensure_ascii");
        if (ea && lf__jv_truthy(*ea)) return lf__jinja_err(c, LF_ERR_UNSUPPORTED, "tojson(ensure_ascii=true)");
        int indent = -1;
        if (ind && ind->t != JV_NONE) {
            if (ind->t != JV_INT || ind->u.i < 0 || ind->u.i > 16)
                return lf__jinja_err(c, LF_ERR_UNSUPPORTED, "tojson: indent must be an integer in [0, 16]");
            indent = (int)ind->u.i;
        }
        return lf__jv_tojson(c, x, indent, sk && lf__jv_truthy(*sk), out);
    }
    if (IS("string")) return lf__jv_to_str(c, x, out);
    if (IS("safe")) {
        *out = x;
        return LF_OK;
    }
    if (IS("length") || IS("count")) {
        if (x.t == JV_STR) *out = lf__jv_int((int64_t)lf__utf8_count(x.u.s->p, x.u.s->len));
        else if (x.t == JV_LIST) *out = lf__jv_int((int64_t)x.u.l->n);
        else if (x.t == JV_DICT || x.t == JV_NS) *out = lf__jv_int((int64_t)x.u.d->n);
        else if (x.t == JV_UNDEF) *out = lf__jv_int(0);
        else return lf__jinja_err(c, LF_ERR_INVALID_ARG, "length of a %s", lf__jv_type_name(x));
        return LF_OK;
    }
    if (IS("first") || IS("last")) return seq_end(c, x, IS("last"), out);
    if (IS("int")) {
        static const char *const kws[] = {"default", NULL};
        if ((st = check_args(c, s, n, a, 1, kws)) != LF_OK) return st;
        return to_int(c, x, arg(a, 0, "default"), out);
    }
    if (IS("float")) {
        *out = lf__jv_float(0.0);
        if (x.t == JV_INT || x.t == JV_BOOL) *out = lf__jv_float(x.t == JV_INT ? (double)x.u.i : x.u.b);
        else if (x.t == JV_FLOAT) *out = x;
        else if (x.t == JV_STR) {
            char *end;
            double d = strtod(x.u.s->p, &end);
            if (end != x.u.s->p && !*end) *out = lf__jv_float(d);
        }
        return LF_OK;
    }
    if (IS("abs")) {
        if (x.t == JV_FLOAT) *out = lf__jv_float(fabs(x.u.f));
        else if ((x.t == JV_INT || x.t == JV_BOOL) && !(x.t == JV_INT && x.u.i == INT64_MIN))
            *out = lf__jv_int(x.t == JV_INT ? (x.u.i < 0 ? -x.u.i : x.u.i) : x.u.b);
        else return lf__jinja_err(c, LF_ERR_INVALID_ARG, "abs of a %s", lf__jv_type_name(x));
        return LF_OK;
    }
    if (IS("items")) {
        if (x.t == JV_UNDEF) return lf__jv_list_new(c, 0, out);
        if (x.t != JV_DICT) return lf__jinja_err(c, LF_ERR_INVALID_ARG, "items of a %s", lf__jv_type_name(x));
        return items_of(c, x, out);
    }
    if (IS("list") || IS("reverse")) return to_list(c, s, n, x, out);
    if (IS("selectattr") || IS("rejectattr")) return select_attr(c, s, n, x, a, out);
    if (IS("join")) {
        static const char *const kws[] = {"d", NULL};
        if ((st = check_args(c, s, n, a, 1, kws)) != LF_OK) return st;
        const jv *sep = arg(a, 0, "d");
        jv acc, seq = x;
        if (sep && sep->t != JV_STR) return need_str(c, "join", 4, *sep);
        if (x.t != JV_LIST && (st = lf__jinja_filter(c, "list", 4, x, &(jargs){NULL, NULL, 0}, &seq)) != LF_OK)
            return st;
        if ((st = lf__jv_str(c, "", 0, 0, &acc)) != LF_OK) return st;
        for (size_t i = 0; i < seq.u.l->n; i++) {
            jv e;
            if (i && sep && (st = lf__jv_str_concat(c, acc.u.s, sep->u.s, &acc)) != LF_OK) return st;
            if ((st = lf__jv_to_str(c, seq.u.l->v[i], &e)) != LF_OK ||
                (st = lf__jv_str_concat(c, acc.u.s, e.u.s, &acc)) != LF_OK)
                return st;
        }
        *out = acc;
        return LF_OK;
    }
    /* the rest take a string */
    if (x.t != JV_STR) {
        if (IS("trim") || IS("upper") || IS("lower") || IS("title") || IS("capitalize") || IS("replace")) {
            if ((st = lf__jv_to_str(c, x, &x)) != LF_OK) return st; /* jinja2 applies them to str(x) */
        }
    }
    if (IS("trim")) {
        static const char *const kws[] = {"chars", NULL};
        if ((st = check_args(c, s, n, a, 1, kws)) != LF_OK) return st;
        const jv *ch = arg(a, 0, "chars");
        if (ch && ch->t != JV_NONE && ch->t != JV_STR) return need_str(c, "trim", 4, *ch);
        return strip(c, x.u.s, 3, ch && ch->t == JV_STR ? ch->u.s : NULL, out);
    }
    if (IS("upper")) return recase(c, x.u.s, 'u', out);
    if (IS("lower")) return recase(c, x.u.s, 'l', out);
    if (IS("title")) return recase(c, x.u.s, 't', out);
    if (IS("capitalize")) return recase(c, x.u.s, 'c', out);
    if (IS("replace")) {
        static const char *const kws[] = {"old", "new", "count", NULL};
        if ((st = check_args(c, s, n, a, 3, kws)) != LF_OK) return st;
        const jv *o = arg(a, 0, "old"), *w = arg(a, 1, "new"), *k = arg(a, 2, "count");
        if (!o || !w) return lf__jinja_err(c, LF_ERR_INVALID_ARG, "replace needs old and new");
        jv os = *o, ws = *w;
        if ((st = lf__jv_to_str(c, os, &os)) != LF_OK || (st = lf__jv_to_str(c, ws, &ws)) != LF_OK) return st;
        return replace(c, x.u.s, os.u.s, ws.u.s, k && k->t == JV_INT ? k->u.i : -1, out);
    }
    return lf__jinja_err(c, LF_ERR_INTERNAL, "filter '%.*s' has no implementation", (int)n, s);
}

/* ---------------------------------------------------------------- tests */
lf_status lf__jinja_test(jctx *c, const char *s, size_t n, jv x, const jargs *a, int *r) {
    const jv *y = arg(a, 0, NULL);
    if (IS("defined")) *r = x.t != JV_UNDEF;
    else if (IS("undefined")) *r = x.t == JV_UNDEF;
    else if (IS("none")) *r = x.t == JV_NONE;
    else if (IS("string")) *r = x.t == JV_STR;
    else if (IS("mapping")) *r = x.t == JV_DICT;
    else if (IS("iterable")) *r = x.t == JV_STR || x.t == JV_LIST || x.t == JV_DICT || x.t == JV_UNDEF;
    else if (IS("sequence")) *r = x.t == JV_STR || x.t == JV_LIST || x.t == JV_DICT;
    else if (IS("number")) *r = x.t == JV_INT || x.t == JV_FLOAT || x.t == JV_BOOL;
    else if (IS("integer")) *r = x.t == JV_INT;
    else if (IS("float")) *r = x.t == JV_FLOAT;
    else if (IS("boolean")) *r = x.t == JV_BOOL;
    else if (IS("true")) *r = x.t == JV_BOOL && x.u.b;
    else if (IS("false")) *r = x.t == JV_BOOL && !x.u.b;
    else if (IS("callable")) *r = x.t == JV_MACRO;
    else if (IS("odd") || IS("even") || IS("divisibleby")) {
        int64_t d = IS("divisibleby") ? (y && y->t == JV_INT ? y->u.i : 0) : 2;
        if (x.t != JV_INT || d == 0)
            return lf__jinja_err(c, LF_ERR_INVALID_ARG, "test '%.*s' needs integers", (int)n, s);
        int64_t m = x.u.i % d;
        *r = IS("odd") ? m != 0 : m == 0;
    } else if (IS("eq") || IS("equalto") || IS("ne")) {
        if (!y) return lf__jinja_err(c, LF_ERR_INVALID_ARG, "test '%.*s' needs a value", (int)n, s);
        *r = lf__jv_equal(x, *y) == !IS("ne");
    } else if (IS("lower") || IS("upper")) {
        if (x.t != JV_STR) {
            *r = 0;
            return LF_OK;
        }
        int has_cased = 0, ok = 1;
        for (size_t i = 0; i < x.u.s->len; i++) {
            char ch = x.u.s->p[i];
            if ((unsigned char)ch >= 0x80)
                return lf__jinja_err(c, LF_ERR_UNSUPPORTED, "case test of non-ASCII text is not supported");
            if (ch >= 'a' && ch <= 'z') has_cased = 1, ok &= IS("lower");
            if (ch >= 'A' && ch <= 'Z') has_cased = 1, ok &= IS("upper");
        }
        *r = has_cased && ok;
    } else if (IS("in")) {
        if (!y) return lf__jinja_err(c, LF_ERR_INVALID_ARG, "test 'in' needs a container");
        jv b;
        jargs none = {NULL, NULL, 0};
        (void)none;
        if (y->t == JV_STR && x.t == JV_STR) {
            *r = 0;
            const jstr *h = y->u.s, *nd = x.u.s;
            for (size_t i = 0; !*r && nd->len <= h->len && i <= h->len - nd->len; i++)
                *r = !memcmp(h->p + i, nd->p, nd->len);
        } else if (y->t == JV_LIST) {
            *r = 0;
            for (size_t i = 0; i < y->u.l->n && !*r; i++) *r = lf__jv_equal(y->u.l->v[i], x);
        } else if (y->t == JV_DICT) {
            *r = lf__jv_dict_find(y->u.d, x) != NULL;
        } else return lf__jinja_err(c, LF_ERR_INVALID_ARG, "test 'in' on a %s", lf__jv_type_name(*y));
        (void)b;
    } else return lf__jinja_err(c, LF_ERR_INTERNAL, "test '%.*s' has no implementation", (int)n, s);
    return LF_OK;
}

/* ---------------------------------------------------------------- methods */
static lf_status str_method(jctx *c, const jstr *x, const char *s, size_t n, const jargs *a, jv *out) {
    lf_status st;
    const jv *a0 = arg(a, 0, NULL), *a1 = arg(a, 1, NULL);
    if (IS("strip") || IS("lstrip") || IS("rstrip")) {
        if ((st = check_args(c, s, n, a, 1, NULL)) != LF_OK) return st;
        if (a0 && a0->t != JV_NONE && a0->t != JV_STR) return need_str(c, s, n, *a0);
        return strip(c, x, IS("strip") ? 3 : IS("lstrip") ? 1 : 2, a0 && a0->t == JV_STR ? a0->u.s : NULL, out);
    }
    if (IS("startswith") || IS("endswith")) {
        if (!a0) return lf__jinja_err(c, LF_ERR_INVALID_ARG, "'%.*s' needs an argument", (int)n, s);
        int end = IS("endswith"), r = 0;
        if (a0->t == JV_STR) r = starts_ends(x, a0->u.s, end);
        else if (a0->t == JV_LIST) {
            for (size_t i = 0; i < a0->u.l->n && !r; i++) {
                if (a0->u.l->v[i].t != JV_STR) return need_str(c, s, n, a0->u.l->v[i]);
                r = starts_ends(x, a0->u.l->v[i].u.s, end);
            }
        } else return need_str(c, s, n, *a0);
        *out = lf__jv_bool(r);
        return LF_OK;
    }
    if (IS("split")) {
        static const char *const kws[] = {"sep", "maxsplit", NULL};
        if ((st = check_args(c, s, n, a, 2, kws)) != LF_OK) return st;
        const jv *sep = arg(a, 0, "sep"), *mx = arg(a, 1, "maxsplit");
        return split(c, x, sep, mx && mx->t == JV_INT ? mx->u.i : -1, out);
    }
    if (IS("upper")) return recase(c, x, 'u', out);
    if (IS("lower")) return recase(c, x, 'l', out);
    if (IS("title")) return recase(c, x, 't', out);
    if (IS("capitalize")) return recase(c, x, 'c', out);
    if (IS("replace")) {
        if (!a0 || !a1 || a0->t != JV_STR || a1->t != JV_STR)
            return lf__jinja_err(c, LF_ERR_INVALID_ARG, "replace needs two strings");
        const jv *k = arg(a, 2, NULL);
        return replace(c, x, a0->u.s, a1->u.s, k && k->t == JV_INT ? k->u.i : -1, out);
    }
    return lf__jinja_err(c, LF_ERR_INVALID_ARG, "a string has no method '%.*s'", (int)n, s);
}

lf_status lf__jinja_method(jctx *c, jv obj, const char *s, size_t n, const jargs *a, jv *out) {
    if (obj.t == JV_STR) return str_method(c, obj.u.s, s, n, a, out);
    if (obj.t == JV_DICT) {
        lf_status st;
        if (IS("get")) {
            const jv *k = arg(a, 0, NULL), *d = arg(a, 1, NULL);
            if (!k) return lf__jinja_err(c, LF_ERR_INVALID_ARG, "get needs a key");
            jv *v = lf__jv_dict_find(obj.u.d, *k);
            *out = v ? *v : d ? *d : lf__jv_none();
            return LF_OK;
        }
        if (IS("items")) return items_of(c, obj, out);
        if (IS("keys") || IS("values")) {
            if ((st = lf__jv_list_new(c, obj.u.d->n, out)) != LF_OK) return st;
            if (obj.u.d->n) memcpy(out->u.l->v, IS("keys") ? obj.u.d->k : obj.u.d->v, obj.u.d->n * sizeof(jv));
            out->u.l->n = obj.u.d->n;
            return LF_OK;
        }
    }
    return lf__jinja_err(c, LF_ERR_INVALID_ARG, "a %s has no method '%.*s'", lf__jv_type_name(obj), (int)n, s);
}

/* ---------------------------------------------------------------- globals */
static lf_status strftime_now(jctx *c, const jargs *a, jv *out) {
    const jv *f = arg(a, 0, NULL);
    if (!f || f->t != JV_STR) return lf__jinja_err(c, LF_ERR_INVALID_ARG, "strftime_now needs a format string");
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    if (sscanf(c->today, "%d-%d-%d %d:%d:%d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
               &tm.tm_sec) != 6)
        return lf__jinja_err(c, LF_ERR_INVALID_ARG, "the date '%s' is not YYYY-MM-DD HH:MM:SS", c->today);
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    time_t t = timegm(&tm);
    gmtime_r(&t, &tm);
    char buf[512];
    size_t k = f->u.s->len ? strftime(buf, sizeof buf, f->u.s->p, &tm) : 0;
    if (f->u.s->len && k == 0) return lf__jinja_err(c, LF_ERR_RANGE, "strftime_now: the date is over 511 bytes");
    return lf__jv_str(c, buf, k, 0, out);
}

static lf_status kw_dict(jctx *c, const jargs *a, jv *out, int ns) {
    lf_status st = lf__jv_dict_new(c, out);
    for (int i = 0; i < a->n && st == LF_OK; i++) {
        if (!a->kw[i]) {
            if (a->v[i].t != JV_DICT)
                return lf__jinja_err(c, LF_ERR_INVALID_ARG, "%s takes keyword arguments or a dict",
                                     ns ? "namespace" : "dict");
            for (size_t k = 0; k < a->v[i].u.d->n && st == LF_OK; k++)
                st = lf__jv_dict_set(c, out->u.d, a->v[i].u.d->k[k], a->v[i].u.d->v[k]);
            continue;
        }
        jv k;
        if ((st = lf__jv_str(c, a->kw[i], strlen(a->kw[i]), 0, &k)) == LF_OK)
            st = lf__jv_dict_set(c, out->u.d, k, a->v[i]);
    }
    if (ns) out->t = JV_NS;
    return st;
}

lf_status lf__jinja_global(jctx *c, const char *s, size_t n, const jargs *a, jv *out) {
    if (IS("raise_exception")) {
        const jv *m = arg(a, 0, NULL);
        jv t;
        if (!m) return lf__jinja_err(c, LF_ERR_INVALID_ARG, "raise_exception()");
        lf_status st = lf__jv_to_str(c, *m, &t);
        if (st != LF_OK) return st;
        return lf__jinja_err(c, LF_ERR_INVALID_ARG, "the template refused the conversation: %.*s",
                             (int)(t.u.s->len < 600 ? t.u.s->len : 600), t.u.s->p);
    }
    if (IS("strftime_now")) return strftime_now(c, a, out);
    if (IS("namespace")) return kw_dict(c, a, out, 1);
    if (IS("dict")) return kw_dict(c, a, out, 0);
    if (IS("range")) {
        int64_t v[3] = {0, 0, 1};
        int np = 0;
        for (int i = 0; i < a->n; i++) {
            if (a->kw[i] || a->v[i].t != JV_INT || np == 3)
                return lf__jinja_err(c, LF_ERR_INVALID_ARG, "range takes one to three integers");
            v[np++] = a->v[i].u.i;
        }
        if (np == 0) return lf__jinja_err(c, LF_ERR_INVALID_ARG, "range takes one to three integers");
        int64_t start = np == 1 ? 0 : v[0], stop = np == 1 ? v[0] : v[1], stp = np == 3 ? v[2] : 1;
        if (stp == 0) return lf__jinja_err(c, LF_ERR_INVALID_ARG, "range: step is zero");
        /* jinja2's sandbox caps range at 100000 items (MAX_RANGE) */
        double count = ceil(((double)stop - (double)start) / (double)stp);
        if (count > 100000) return lf__jinja_err(c, LF_ERR_RANGE, "range of more than 100000 items");
        lf_status st = lf__jv_list_new(c, count > 0 ? (size_t)count : 0, out);
        for (int64_t i = start; st == LF_OK && (stp > 0 ? i < stop : i > stop); i += stp)
            st = lf__jv_list_push(c, out->u.l, lf__jv_int(i));
        return st;
    }
    return lf__jinja_err(c, LF_ERR_INTERNAL, "global '%.*s' has no implementation", (int)n, s);
}
