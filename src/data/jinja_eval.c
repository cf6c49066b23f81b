/*
 * Jinja evaluation (jinja.h): statements write the output, expressions
 * make values; compile and render entry points.
 *
 * Scopes follow jinja2: the globals (the render's variables), the
 * template's top frame, a fresh frame for each loop iteration and each
 * macro call; `set` writes the innermost frame, so a name set inside a
 * loop is gone after it (the reason templates use namespace()); `if`
 * opens no scope. A macro sees the globals and the top frame, not its
 * caller's locals. Undefined names are the undefined value (printed as
 * ""); an attribute or item of an undefined value is an error, as in
 * jinja2.
 *
 * Every node evaluated counts one step against lim.max_steps; macro calls
 * nest at most LF__JINJA_DEPTH_MAX deep; the output is capped at
 * lim.max_output bytes and values at lim.max_memory (the render's pool).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jinja_impl.h"

enum { FLOW_NORMAL = 0, FLOW_BREAK = 1, FLOW_CONTINUE = 2 };

static lf_status eval(jctx *c, jframe *f, const jnode *n, jv *out);
static lf_status exec(jctx *c, jframe *f, const jnode *n, int *flow);

static lf_status step(jctx *c, const jnode *n) {
    c->line = n->line;
    if (++c->steps > c->lim.max_steps)
        return lf__jinja_err(c, LF_ERR_RANGE, "the render took more than %ld steps (a runaway loop?)",
                             c->lim.max_steps);
    return LF_OK;
}

/* ---------------------------------------------------------------- output */
static lf_status out_span(jctx *c, size_t off, size_t len, int from_template) {
    jout *o = &c->out;
    if (len == 0) return LF_OK;
    if (o->n_sp && o->sp[o->n_sp - 1].from_template == from_template &&
        o->sp[o->n_sp - 1].off + o->sp[o->n_sp - 1].len == off) {
        o->sp[o->n_sp - 1].len += len;
        return LF_OK;
    }
    if (o->n_sp == o->cap_sp) {
        int nc = o->cap_sp ? 2 * o->cap_sp : 16;
        lf__chat_span *q = realloc(o->sp, (size_t)nc * sizeof *q);
        if (!q) return lf_fail(LF_ERR_NOMEM, "%s: out of memory rendering", c->t->what);
        o->sp = q;
        o->cap_sp = nc;
    }
    o->sp[o->n_sp++] = (lf__chat_span){off, len, from_template};
    return LF_OK;
}

static lf_status out_put(jctx *c, const char *p, size_t len, const size_t *taint, int n_taint) {
    jout *o = &c->out;
    if (len > c->lim.max_output || o->len > c->lim.max_output - len)
        return lf__jinja_err(c, LF_ERR_RANGE, "the rendering is longer than %zu bytes", c->lim.max_output);
    if (o->len + len + 1 > o->cap) {
        size_t nc = o->cap ? o->cap : 256;
        while (nc < o->len + len + 1) nc *= 2;
        char *q = realloc(o->p, nc);
        if (!q) return lf_fail(LF_ERR_NOMEM, "%s: out of memory rendering", c->t->what);
        o->p = q;
        o->cap = nc;
    }
    size_t base = o->len, at = 0;
    memcpy(o->p + base, p, len);
    o->len += len;
    o->p[o->len] = 0;
    lf_status st = LF_OK;
    for (int i = 0; i < n_taint && st == LF_OK; i++) {
        st = out_span(c, base + at, taint[2 * i] - at, 1);
        if (st == LF_OK) st = out_span(c, base + taint[2 * i], taint[2 * i + 1], 0);
        at = taint[2 * i] + taint[2 * i + 1];
    }
    if (st == LF_OK) st = out_span(c, base + at, len - at, 1);
    return st;
}

/* Run body into a string value (macro calls, block set). */
static lf_status capture(jctx *c, jframe *f, const jnode *body, jv *out) {
    jout saved = c->out;
    memset(&c->out, 0, sizeof c->out);
    int flow = 0;
    lf_status st = exec(c, f, body, &flow);
    jout got = c->out;
    c->out = saved;
    if (st == LF_OK) {
        int nt = 0;
        for (int i = 0; i < got.n_sp; i++) nt += !got.sp[i].from_template;
        size_t *t = nt ? lf__jpool_alloc(&c->pool, (size_t)nt * 2 * sizeof *t) : NULL;
        jv s;
        if (nt && !t)
            st = lf__jinja_err(c, LF_ERR_RANGE, "the render needs more than %zu bytes of values", c->lim.max_memory);
        else if ((st = lf__jv_str(c, got.p ? got.p : "", got.len, 0, &s)) == LF_OK) {
            int k = 0;
            for (int i = 0; i < got.n_sp; i++)
                if (!got.sp[i].from_template) {
                    t[2 * k] = got.sp[i].off;
                    t[2 * k + 1] = got.sp[i].len;
                    k++;
                }
            jstr *js = (jstr *)s.u.s;
            js->taint = t;
            js->n_taint = nt;
            *out = s;
        }
    }
    free(got.p);
    free(got.sp);
    return st;
}

/* ---------------------------------------------------------------- scopes */
static jv *lookup(jframe *f, const char *s, size_t n) {
    for (; f; f = f->up) {
        jv *v = lf__jv_dict_get(&f->vars, s, n);
        if (v) return v;
    }
    return NULL;
}

static lf_status set_var(jctx *c, jframe *f, const char *s, size_t n, jv v) {
    jv k;
    lf_status st = lf__jv_str(c, s, n, 0, &k);
    return st == LF_OK ? lf__jv_dict_set(c, &f->vars, k, v) : st;
}

static jframe *new_frame(jctx *c, jframe *up) {
    jframe *f = lf__jpool_alloc(&c->pool, sizeof *f);
    if (f) f->up = up;
    return f;
}

/* ---------------------------------------------------------------- expressions */
static lf_status eval_args(jctx *c, jframe *f, const jnode *n, jargs *a) {
    a->n = n->n_kids;
    a->v = a->n ? lf__jpool_alloc(&c->pool, (size_t)a->n * sizeof *a->v) : NULL;
    a->kw = a->n ? lf__jpool_alloc(&c->pool, (size_t)a->n * sizeof *a->kw) : NULL;
    if (a->n && (!a->v || !a->kw))
        return lf__jinja_err(c, LF_ERR_RANGE, "the render needs more than %zu bytes of values", c->lim.max_memory);
    for (int i = 0; i < a->n; i++) {
        lf_status st = eval(c, f, n->kids[i], &a->v[i]);
        if (st != LF_OK) return st;
        a->kw[i] = n->kids[i]->kw;
    }
    return LF_OK;
}

static lf_status call_macro(jctx *c, const jnode *m, const jargs *a, jv *out) {
    if (c->depth >= LF__JINJA_DEPTH_MAX)
        return lf__jinja_err(c, LF_ERR_RANGE, "macro calls nest deeper than %d", LF__JINJA_DEPTH_MAX);
    jframe *f = new_frame(c, c->globals);
    if (!f) return lf__jinja_err(c, LF_ERR_RANGE, "the render needs more than %zu bytes of values", c->lim.max_memory);
    int n_pos = 0;
    for (int i = 0; i < a->n; i++) n_pos += a->kw[i] == NULL;
    if (n_pos > m->n_kids)
        return lf__jinja_err(c, LF_ERR_INVALID_ARG, "macro '%.*s' takes %d arguments, %d given", (int)m->slen, m->s,
                             m->n_kids, n_pos);
    lf_status st = LF_OK;
    for (int k = 0; k < m->n_kids && st == LF_OK; k++) {
        const jnode *prm = m->kids[k];
        jv v = lf__jv_undef();
        int got = 0;
        if (k < n_pos) {
            int seen = 0;
            for (int i = 0; i < a->n; i++)
                if (!a->kw[i] && seen++ == k) v = a->v[i], got = 1;
        }
        for (int i = 0; i < a->n; i++)
            if (a->kw[i] && strlen(a->kw[i]) == prm->slen && !memcmp(a->kw[i], prm->s, prm->slen)) v = a->v[i], got = 1;
        if (!got && prm->a) st = eval(c, c->globals, prm->a, &v);
        if (st == LF_OK) st = set_var(c, f, prm->s, prm->slen, v);
    }
    for (int i = 0; i < a->n && st == LF_OK; i++) {
        if (!a->kw[i]) continue;
        int known = 0;
        for (int k = 0; k < m->n_kids; k++)
            known |= strlen(a->kw[i]) == m->kids[k]->slen && !memcmp(a->kw[i], m->kids[k]->s, m->kids[k]->slen);
        if (!known)
            st = lf__jinja_err(c, LF_ERR_INVALID_ARG, "macro '%.*s' has no argument '%s'", (int)m->slen, m->s,
                               a->kw[i]);
    }
    if (st != LF_OK) return st;
    c->depth++;
    st = capture(c, f, m->c, out);
    c->depth--;
    return st;
}

static int64_t pyfloordiv(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
    return q;
}

static int isnum(jv v) { return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL; }
static double fnum(jv v) { return v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : (double)v.u.b; }
static int isint(jv v) { return v.t == JV_INT || v.t == JV_BOOL; }
static int64_t inum(jv v) { return v.t == JV_INT ? v.u.i : v.u.b; }

static lf_status type_err(jctx *c, const char *op, jv a, jv b) {
    if (a.t == JV_UNDEF || b.t == JV_UNDEF)
        return lf__jinja_err(c, LF_ERR_INVALID_ARG, "'%s' on an undefined value", op);
    return lf__jinja_err(c, LF_ERR_INVALID_ARG, "unsupported operand types for %s: %s and %s", op, lf__jv_type_name(a),
                         lf__jv_type_name(b));
}

static lf_status repeat(jctx *c, jv seq, int64_t k, jv *out) {
    if (k < 0) k = 0;
    lf_status st;
    if (seq.t == JV_STR) {
        size_t len = seq.u.s->len;
        if (len && (uint64_t)k > c->lim.max_memory / len)
            return lf__jinja_err(c, LF_ERR_RANGE, "a repeated string over %zu bytes", c->lim.max_memory);
        char *b = lf__jpool_alloc(&c->pool, len * (size_t)k + 1);
        if (!b) return lf__jinja_err(c, LF_ERR_RANGE, "a repeated string over %zu bytes", c->lim.max_memory);
        for (int64_t i = 0; i < k; i++) memcpy(b + (size_t)i * len, seq.u.s->p, len);
        return lf__jv_str_from(c, b, len * (size_t)k, seq.u.s, out);
    }
    size_t n = seq.u.l->n;
    if (n && (uint64_t)k > c->lim.max_memory / sizeof(jv) / n)
        return lf__jinja_err(c, LF_ERR_RANGE, "a repeated list over %zu bytes", c->lim.max_memory);
    if ((st = lf__jv_list_new(c, n * (size_t)k, out)) != LF_OK) return st;
    for (int64_t i = 0; i < k; i++)
        for (size_t j = 0; j < n; j++) out->u.l->v[out->u.l->n++] = seq.u.l->v[j];
    return LF_OK;
}

static int cmp_vals(jv a, jv b, int *r) {
    if (isnum(a) && isnum(b)) {
        double x = fnum(a), y = fnum(b);
        if (isint(a) && isint(b)) *r = (inum(a) > inum(b)) - (inum(a) < inum(b));
        else *r = (x > y) - (x < y);
        return 1;
    }
    if (a.t == JV_STR && b.t == JV_STR) {
        size_t n = a.u.s->len < b.u.s->len ? a.u.s->len : b.u.s->len;
        int m = memcmp(a.u.s->p, b.u.s->p, n);
        *r = m ? (m > 0) - (m < 0) : (a.u.s->len > b.u.s->len) - (a.u.s->len < b.u.s->len);
        return 1;
    }
    return 0;
}

static lf_status contains(jctx *c, jv item, jv cont, int *r) {
    *r = 0;
    if (cont.t == JV_STR) {
        if (item.t != JV_STR) return type_err(c, "in", item, cont);
        const jstr *h = cont.u.s, *nd = item.u.s;
        if (nd->len == 0) *r = 1;
        for (size_t i = 0; !*r && nd->len <= h->len && i <= h->len - nd->len; i++)
            *r = !memcmp(h->p + i, nd->p, nd->len);
    } else if (cont.t == JV_LIST) {
        for (size_t i = 0; i < cont.u.l->n && !*r; i++) *r = lf__jv_equal(cont.u.l->v[i], item);
    } else if (cont.t == JV_DICT || cont.t == JV_NS) *r = lf__jv_dict_find(cont.u.d, item) != NULL;
    else if (cont.t != JV_UNDEF) return type_err(c, "in", item, cont);
    return LF_OK;
}

static lf_status binop(jctx *c, int op, jv a, jv b, jv *out) {
    int r;
    switch (op) {
    case JOP_EQ: *out = lf__jv_bool(lf__jv_equal(a, b)); return LF_OK;
    case JOP_NE: *out = lf__jv_bool(!lf__jv_equal(a, b)); return LF_OK;
    case JOP_LT:
    case JOP_LE:
    case JOP_GT:
    case JOP_GE:
        if (!cmp_vals(a, b, &r)) return type_err(c, "comparison", a, b);
        *out = lf__jv_bool(op == JOP_LT ? r < 0 : op == JOP_LE ? r <= 0 : op == JOP_GT ? r > 0 : r >= 0);
        return LF_OK;
    case JOP_IN:
    case JOP_NOTIN: {
        lf_status st = contains(c, a, b, &r);
        *out = lf__jv_bool(op == JOP_IN ? r : !r);
        return st;
    }
    case JOP_CONCAT: {
        jv x, y;
        lf_status st = lf__jv_to_str(c, a, &x);
        if (st == LF_OK) st = lf__jv_to_str(c, b, &y);
        return st == LF_OK ? lf__jv_str_concat(c, x.u.s, y.u.s, out) : st;
    }
    default: break;
    }
    if (op == JOP_ADD && a.t == JV_STR && b.t == JV_STR) return lf__jv_str_concat(c, a.u.s, b.u.s, out);
    if (op == JOP_ADD && a.t == JV_LIST && b.t == JV_LIST) {
        lf_status st = lf__jv_list_new(c, a.u.l->n + b.u.l->n, out);
        for (size_t i = 0; st == LF_OK && i < a.u.l->n; i++) st = lf__jv_list_push(c, out->u.l, a.u.l->v[i]);
        for (size_t i = 0; st == LF_OK && i < b.u.l->n; i++) st = lf__jv_list_push(c, out->u.l, b.u.l->v[i]);
        return st;
    }
    if (op == JOP_MUL && (a.t == JV_STR || a.t == JV_LIST) && isint(b)) return repeat(c, a, inum(b), out);
    if (op == JOP_MUL && (b.t == JV_STR || b.t == JV_LIST) && isint(a)) return repeat(c, b, inum(a), out);
    static const char *const names[] = {"", "+", "-", "*", "/", "//", "%", "**"};
    if (!isnum(a) || !isnum(b)) return type_err(c, names[op], a, b);
    if (isint(a) && isint(b) && op != JOP_DIV) {
        int64_t x = inum(a), y = inum(b), z = 0;
        int ovf = 0;
        switch (op) {
        case JOP_ADD: ovf = __builtin_add_overflow(x, y, &z); break;
        case JOP_SUB: ovf = __builtin_sub_overflow(x, y, &z); break;
        case JOP_MUL: ovf = __builtin_mul_overflow(x, y, &z); break;
        case JOP_FLOORDIV:
        case JOP_MOD:
            if (y == 0) return lf__jinja_err(c, LF_ERR_INVALID_ARG, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) ovf = 1;
            else {
                z = pyfloordiv(x, y);
                if (op == JOP_MOD) z = x - z * y;
            }
            break;
        case JOP_POW:
            if (y < 0) {
                *out = lf__jv_float(pow((double)x, (double)y));
                return LF_OK;
            }
            z = 1;
            for (int64_t i = 0; i < y && !ovf; i++) {
                ovf = __builtin_mul_overflow(z, x, &z);
                if (z == 0 || z == 1) break;
            }
            if (x == -1) z = (y % 2) ? -1 : 1;
            break;
        }
        if (ovf) return lf__jinja_err(c, LF_ERR_RANGE, "integer overflow in '%s'", names[op]);
        *out = lf__jv_int(z);
        return LF_OK;
    }
    double x = fnum(a), y = fnum(b), z = 0;
    switch (op) {
    case JOP_ADD: z = x + y; break;
    case JOP_SUB: z = x - y; break;
    case JOP_MUL: z = x * y; break;
    case JOP_DIV:
    case JOP_FLOORDIV:
    case JOP_MOD:
        if (y == 0) return lf__jinja_err(c, LF_ERR_INVALID_ARG, "division by zero");
        z = op == JOP_DIV ? x / y : op == JOP_FLOORDIV ? floor(x / y) : x - floor(x / y) * y;
        break;
    case JOP_POW: z = pow(x, y); break;
    }
    *out = lf__jv_float(z);
    return LF_OK;
}

static lf_status get_attr(jctx *c, jv obj, const char *s, size_t n, jv *out) {
    if (obj.t == JV_UNDEF) return lf__jinja_err(c, LF_ERR_INVALID_ARG, "'.%.*s' of an undefined value", (int)n, s);
    *out = lf__jv_undef();
    if (obj.t == JV_DICT || obj.t == JV_NS) {
        jv *v = lf__jv_dict_get(obj.u.d, s, n);
        if (v) *out = *v;
    }
    return LF_OK;
}

/* Python's index for i in a sequence of n, or -1 when outside. */
static int64_t seq_index(int64_t i, size_t n) {
    if (i < 0) i += (int64_t)n;
    return i < 0 || (uint64_t)i >= n ? -1 : i;
}

static lf_status get_item(jctx *c, jv obj, jv key, jv *out) {
    *out = lf__jv_undef();
    if (obj.t == JV_UNDEF) return lf__jinja_err(c, LF_ERR_INVALID_ARG, "a subscript of an undefined value");
    if (obj.t == JV_DICT || obj.t == JV_NS) {
        jv *v = lf__jv_dict_find(obj.u.d, key);
        if (v) *out = *v;
    } else if ((obj.t == JV_LIST || obj.t == JV_STR) && isint(key)) {
        if (obj.t == JV_LIST) {
            int64_t i = seq_index(inum(key), obj.u.l->n);
            if (i >= 0) *out = obj.u.l->v[i];
        } else {
            const jstr *s = obj.u.s;
            int64_t i = seq_index(inum(key), lf__utf8_count(s->p, s->len));
            if (i >= 0) {
                size_t a = lf__utf8_offset(s->p, s->len, (size_t)i);
                size_t b = lf__utf8_offset(s->p, s->len, (size_t)i + 1);
                return lf__jv_str_from(c, s->p + a, b - a, s, out);
            }
        }
    } else if (obj.t == JV_STR || obj.t == JV_LIST) {
        return lf__jinja_err(c, LF_ERR_INVALID_ARG, "%s indices must be integers, not %s", lf__jv_type_name(obj),
                             lf__jv_type_name(key));
    }
    return LF_OK;
}

static lf_status get_slice(jctx *c, jframe *f, const jnode *n, jv obj, jv *out) {
    int64_t part[3] = {0, 0, 1};
    int has[3] = {0, 0, 0};
    for (int k = 0; k < 3; k++) {
        if (!n->kids[k]) continue;
        jv v;
        lf_status st = eval(c, f, n->kids[k], &v);
        if (st != LF_OK) return st;
        if (v.t == JV_NONE) continue;
        if (!isint(v)) return lf__jinja_err(c, LF_ERR_INVALID_ARG, "slice indices must be integers");
        part[k] = inum(v);
        has[k] = 1;
    }
    if (obj.t != JV_LIST && obj.t != JV_STR)
        return lf__jinja_err(c, LF_ERR_INVALID_ARG, "a slice of a %s", lf__jv_type_name(obj));
    int64_t len = obj.t == JV_LIST ? (int64_t)obj.u.l->n : (int64_t)lf__utf8_count(obj.u.s->p, obj.u.s->len);
    int64_t stp = part[2];
    if (stp == 0) return lf__jinja_err(c, LF_ERR_INVALID_ARG, "slice step cannot be zero");
    int64_t lo = stp > 0 ? 0 : -1, hi = stp > 0 ? len : len - 1;
    int64_t start = stp > 0 ? lo : hi, stop = stp > 0 ? hi : lo;
    for (int k = 0; k < 2; k++) {
        if (!has[k]) continue;
        int64_t v = part[k];
        if (v < 0) {
            v += len;
            if (v < lo) v = lo;
        } else if (v > hi) v = hi;
        if (k == 0) start = v;
        else stop = v;
    }
    lf_status st = lf__jv_list_new(c, 0, out);
    if (st != LF_OK) return st;
    if (obj.t == JV_LIST) {
        for (int64_t i = start; st == LF_OK && (stp > 0 ? i < stop : i > stop); i += stp)
            st = lf__jv_list_push(c, out->u.l, obj.u.l->v[i]);
        return st;
    }
    const jstr *s = obj.u.s;
    char *b = lf__jpool_alloc(&c->pool, s->len + 1);
    if (!b) return lf__jinja_err(c, LF_ERR_RANGE, "the render needs more than %zu bytes of values", c->lim.max_memory);
    size_t k = 0;
    for (int64_t i = start; stp > 0 ? i < stop : i > stop; i += stp) {
        size_t a = lf__utf8_offset(s->p, s->len, (size_t)i), e = lf__utf8_offset(s->p, s->len, (size_t)i + 1);
        memcpy(b + k, s->p + a, e - a);
        k += e - a;
    }
    return lf__jv_str_from(c, b, k, s, out);
}

static lf_status eval_call(jctx *c, jframe *f, const jnode *n, jv *out) {
    jargs a;
    const jnode *callee = n->a;
    lf_status st;
    if (callee->kind == JN_ATTR) {
        jv obj;
        if ((st = eval(c, f, callee->a, &obj)) != LF_OK) return st;
        if (obj.t == JV_UNDEF)
            return lf__jinja_err(c, LF_ERR_INVALID_ARG, "'.%.*s()' of an undefined value", (int)callee->slen,
                                 callee->s);
        if ((st = eval_args(c, f, n, &a)) != LF_OK) return st;
        c->line = n->line;
        return lf__jinja_method(c, obj, callee->s, callee->slen, &a, out);
    }
    if ((st = eval_args(c, f, n, &a)) != LF_OK) return st;
    c->line = n->line;
    jv *v = lookup(f, callee->s, callee->slen);
    if (v && v->t == JV_MACRO && v->u.m) return call_macro(c, v->u.m, &a, out);
    if (lf__jinja_is_global(callee->s, callee->slen)) return lf__jinja_global(c, callee->s, callee->slen, &a, out);
    return lf__jinja_err(c, LF_ERR_INVALID_ARG, "'%.*s' is not callable here", (int)callee->slen, callee->s);
}

static lf_status eval(jctx *c, jframe *f, const jnode *n, jv *out) {
    lf_status st = step(c, n);
    if (st != LF_OK) return st;
    jv a, b;
    switch (n->kind) {
    case JN_LIT: *out = n->lit; return LF_OK;
    case JN_NAME: {
        jv *v = lookup(f, n->s, n->slen);
        *out = v ? *v : lf__jv_undef();
        /* a builtin global named, not called ("strftime_now is defined"): a macro without a body */
        if (!v && lf__jinja_is_global(n->s, n->slen)) *out = (jv){.t = JV_MACRO, .u.m = NULL};
        return LF_OK;
    }
    case JN_ATTR:
        if ((st = eval(c, f, n->a, &a)) != LF_OK) return st;
        c->line = n->line;
        return get_attr(c, a, n->s, n->slen, out);
    case JN_ITEM:
        if ((st = eval(c, f, n->a, &a)) != LF_OK || (st = eval(c, f, n->b, &b)) != LF_OK) return st;
        c->line = n->line;
        return get_item(c, a, b, out);
    case JN_SLICE:
        if ((st = eval(c, f, n->a, &a)) != LF_OK) return st;
        return get_slice(c, f, n, a, out);
    case JN_CALL: return eval_call(c, f, n, out);
    case JN_FILTER:
    case JN_TEST: {
        jargs args;
        if ((st = eval(c, f, n->a, &a)) != LF_OK || (st = eval_args(c, f, n, &args)) != LF_OK) return st;
        c->line = n->line;
        if (n->kind == JN_FILTER) return lf__jinja_filter(c, n->s, n->slen, a, &args, out);
        int r = 0;
        if ((st = lf__jinja_test(c, n->s, n->slen, a, &args, &r)) != LF_OK) return st;
        *out = lf__jv_bool(n->op ? !r : r);
        return LF_OK;
    }
    case JN_BIN:
        if ((st = eval(c, f, n->a, &a)) != LF_OK || (st = eval(c, f, n->b, &b)) != LF_OK) return st;
        c->line = n->line;
        return binop(c, n->op, a, b, out);
    case JN_NOT:
        if ((st = eval(c, f, n->a, &a)) != LF_OK) return st;
        *out = lf__jv_bool(!lf__jv_truthy(a));
        return LF_OK;
    case JN_NEG:
        if ((st = eval(c, f, n->a, &a)) != LF_OK) return st;
        if (!isnum(a)) return type_err(c, "unary -", a, a);
        if (n->op == '+') *out = a.t == JV_BOOL ? lf__jv_int(a.u.b) : a;
        else if (a.t == JV_FLOAT) *out = lf__jv_float(-a.u.f);
        else if (inum(a) == INT64_MIN) return lf__jinja_err(c, LF_ERR_RANGE, "integer overflow in unary -");
        else *out = lf__jv_int(-inum(a));
        return LF_OK;
    case JN_AND:
    case JN_OR:
        if ((st = eval(c, f, n->a, &a)) != LF_OK) return st;
        if (lf__jv_truthy(a) == (n->kind == JN_OR)) {
            *out = a;
            return LF_OK;
        }
        return eval(c, f, n->b, out);
    case JN_COND:
        if ((st = eval(c, f, n->b, &b)) != LF_OK) return st;
        if (lf__jv_truthy(b)) return eval(c, f, n->a, out);
        if (n->c) return eval(c, f, n->c, out);
        *out = lf__jv_undef();
        return LF_OK;
    case JN_LIST:
        if ((st = lf__jv_list_new(c, (size_t)n->n_kids, out)) != LF_OK) return st;
        out->u.l->tuple = n->op;
        for (int i = 0; i < n->n_kids; i++) {
            if ((st = eval(c, f, n->kids[i], &a)) != LF_OK) return st;
            out->u.l->v[out->u.l->n++] = a;
        }
        return LF_OK;
    case JN_DICT:
        if ((st = lf__jv_dict_new(c, out)) != LF_OK) return st;
        for (int i = 0; i + 1 < n->n_kids; i += 2) {
            if ((st = eval(c, f, n->kids[i], &a)) != LF_OK || (st = eval(c, f, n->kids[i + 1], &b)) != LF_OK ||
                (st = lf__jv_dict_set(c, out->u.d, a, b)) != LF_OK)
                return st;
        }
        return LF_OK;
    default: return lf__jinja_err(c, LF_ERR_INTERNAL, "statement node %d evaluated as an expression", (int)n->kind);
    }
}

/* ---------------------------------------------------------------- statements */
static lf_status loop_items(jctx *c, jv it, jv *list) {
    lf_status st;
    if (it.t == JV_LIST) {
        *list = it;
        return LF_OK;
    }
    if ((st = lf__jv_list_new(c, 0, list)) != LF_OK) return st;
    if (it.t == JV_UNDEF) return LF_OK;
    if (it.t == JV_DICT) {
        for (size_t i = 0; i < it.u.d->n && st == LF_OK; i++) st = lf__jv_list_push(c, list->u.l, it.u.d->k[i]);
        return st;
    }
    if (it.t == JV_STR) {
        const jstr *s = it.u.s;
        for (size_t i = 0; i < s->len && st == LF_OK;) {
            size_t e = i + 1;
            while (e < s->len && ((unsigned char)s->p[e] & 0xC0) == 0x80) e++;
            jv ch;
            if ((st = lf__jv_str_from(c, s->p + i, e - i, s, &ch)) == LF_OK) st = lf__jv_list_push(c, list->u.l, ch);
            i = e;
        }
        return st;
    }
    return lf__jinja_err(c, LF_ERR_INVALID_ARG, "a %s is not iterable", lf__jv_type_name(it));
}

static lf_status bind_targets(jctx *c, jframe *f, const jnode *n, jv item) {
    if (n->n_kids == 1) return set_var(c, f, n->kids[0]->s, n->kids[0]->slen, item);
    if (item.t != JV_LIST || item.u.l->n != (size_t)n->n_kids)
        return lf__jinja_err(c, LF_ERR_INVALID_ARG, "cannot unpack a %s into %d names", lf__jv_type_name(item),
                             n->n_kids);
    for (int k = 0; k < n->n_kids; k++) {
        lf_status st = set_var(c, f, n->kids[k]->s, n->kids[k]->slen, item.u.l->v[k]);
        if (st != LF_OK) return st;
    }
    return LF_OK;
}

static lf_status loop_var(jctx *c, jframe *f, const jlist *items, size_t i) {
    jv d;
    lf_status st = lf__jv_dict_new(c, &d);
    size_t n = items->n;
    const struct {
        const char *k;
        jv v;
    } kv[] = {
        {"index", lf__jv_int((int64_t)i + 1)},
        {"index0", lf__jv_int((int64_t)i)},
        {"revindex", lf__jv_int((int64_t)(n - i))},
        {"revindex0", lf__jv_int((int64_t)(n - i - 1))},
        {"first", lf__jv_bool(i == 0)},
        {"last", lf__jv_bool(i + 1 == n)},
        {"length", lf__jv_int((int64_t)n)},
        {"previtem", i > 0 ? items->v[i - 1] : lf__jv_undef()},
        {"nextitem", i + 1 < n ? items->v[i + 1] : lf__jv_undef()},
    };
    for (size_t k = 0; k < sizeof kv / sizeof *kv && st == LF_OK; k++) {
        jv key;
        if ((st = lf__jv_str(c, kv[k].k, strlen(kv[k].k), 0, &key)) == LF_OK)
            st = lf__jv_dict_set(c, d.u.d, key, kv[k].v);
    }
    return st == LF_OK ? set_var(c, f, "loop", 4, d) : st;
}

static lf_status exec_for(jctx *c, jframe *f, const jnode *n) {
    jv it, all, items;
    lf_status st = eval(c, f, n->a, &it);
    if (st != LF_OK || (st = loop_items(c, it, &all)) != LF_OK) return st;
    items = all;
    if (n->b) { /* the loop filter runs first: loop.length counts what passes */
        if ((st = lf__jv_list_new(c, 0, &items)) != LF_OK) return st;
        for (size_t i = 0; i < all.u.l->n; i++) {
            jframe *g = new_frame(c, f);
            jv keep;
            if (!g) return lf__jinja_err(c, LF_ERR_RANGE, "out of value memory");
            if ((st = bind_targets(c, g, n, all.u.l->v[i])) != LF_OK || (st = eval(c, g, n->b, &keep)) != LF_OK)
                return st;
            if (lf__jv_truthy(keep) && (st = lf__jv_list_push(c, items.u.l, all.u.l->v[i])) != LF_OK) return st;
        }
    }
    if (items.u.l->n == 0) {
        int flow = 0;
        return n->d ? exec(c, f, n->d, &flow) : LF_OK;
    }
    const jlist *l = items.u.l;
    size_t count = l->n; /* the body may append to the list it walks: walk what was there */
    for (size_t i = 0; i < count; i++) {
        jframe *g = new_frame(c, f);
        if (!g) return lf__jinja_err(c, LF_ERR_RANGE, "out of value memory");
        if ((st = bind_targets(c, g, n, l->v[i])) != LF_OK || (st = loop_var(c, g, l, i)) != LF_OK) return st;
        int flow = 0;
        if ((st = exec(c, g, n->c, &flow)) != LF_OK) return st;
        if (flow == FLOW_BREAK) break;
    }
    return LF_OK;
}

static lf_status exec_set(jctx *c, jframe *f, const jnode *n) {
    jv v;
    lf_status st = n->c ? capture(c, f, n->c, &v) : eval(c, f, n->a, &v);
    if (st != LF_OK) return st;
    if (!n->b) return set_var(c, f, n->s, n->slen, v);
    jv *ns = lookup(f, n->b->s, n->b->slen);
    c->line = n->line;
    if (!ns || ns->t != JV_NS)
        return lf__jinja_err(c, LF_ERR_INVALID_ARG, "'%.*s' is not a namespace: cannot set '.%.*s'", (int)n->b->slen,
                             n->b->s, (int)n->slen, n->s);
    jv k;
    if ((st = lf__jv_str(c, n->s, n->slen, 0, &k)) != LF_OK) return st;
    return lf__jv_dict_set(c, ns->u.d, k, v);
}

static lf_status exec(jctx *c, jframe *f, const jnode *n, int *flow) {
    lf_status st = step(c, n);
    if (st != LF_OK) return st;
    jv v;
    switch (n->kind) {
    case JN_BODY:
        for (int i = 0; i < n->n_kids; i++) {
            if ((st = exec(c, f, n->kids[i], flow)) != LF_OK) return st;
            if (*flow) return LF_OK;
        }
        return LF_OK;
    case JN_TEXT: return out_put(c, n->s, n->slen, NULL, 0);
    case JN_OUTPUT:
        if ((st = eval(c, f, n->a, &v)) != LF_OK || (st = lf__jv_to_str(c, v, &v)) != LF_OK) return st;
        return out_put(c, v.u.s->p, v.u.s->len, v.u.s->taint, v.u.s->n_taint);
    case JN_IF:
        if ((st = eval(c, f, n->a, &v)) != LF_OK) return st;
        if (lf__jv_truthy(v)) return exec(c, f, n->b, flow);
        return n->c ? exec(c, f, n->c, flow) : LF_OK;
    case JN_FOR: return exec_for(c, f, n);
    case JN_SET: return exec_set(c, f, n);
    case JN_MACRO: return set_var(c, f, n->s, n->slen, (jv){.t = JV_MACRO, .u.m = n});
    case JN_BREAK: *flow = FLOW_BREAK; return LF_OK;
    case JN_CONTINUE: *flow = FLOW_CONTINUE; return LF_OK;
    case JN_GENERATION: return exec(c, f, n->c, flow);
    default: return lf__jinja_err(c, LF_ERR_INTERNAL, "expression node %d executed as a statement", (int)n->kind);
    }
}

/* ---------------------------------------------------------------- entry points */
lf__jinja_limits lf__jinja_limits_default(void) {
    return (lf__jinja_limits){(size_t)16 << 20, (size_t)256 << 20, 10000000};
}

lf_status lf__jinja_compile(const char *src, size_t len, const char *what, lf__jinja **out) {
    if (!src || !out) return lf_fail(LF_ERR_INVALID_ARG, "jinja: NULL argument");
    *out = NULL;
    lf__jinja *t = calloc(1, sizeof *t);
    if (!t) return lf_fail(LF_ERR_NOMEM, "jinja: out of memory");
    t->pool.cap = (size_t)256 << 20;
    t->what = strdup(what ? what : "chat template");
    jtok *toks = NULL;
    int n_toks = 0;
    lf_status st = t->what ? LF_OK : lf_fail(LF_ERR_NOMEM, "jinja: out of memory");
    if (st == LF_OK) st = lf__jinja_lex(src, len, t->what, &t->pool, &toks, &n_toks);
    if (st == LF_OK) st = lf__jinja_parse(toks, n_toks, t->what, &t->pool, &t->root, &t->has_generation);
    if (st != LF_OK) {
        lf__jinja_free(t);
        return st;
    }
    *out = t;
    return LF_OK;
}

void lf__jinja_free(lf__jinja *t) {
    if (!t) return;
    lf__jpool_free(&t->pool);
    free(t->what);
    free(t);
}

int lf__jinja_has_generation(const lf__jinja *t) { return t ? t->has_generation : 0; }

lf_status lf__jinja_render(const lf__jinja *t, const cJSON *vars, const char *today, const lf__jinja_limits *lim,
                           char **out, size_t *len, lf__chat_span **spans, int *n_spans) {
    if (!t || !out || !len) return lf_fail(LF_ERR_INVALID_ARG, "jinja: NULL argument");
    jctx c;
    memset(&c, 0, sizeof c);
    c.t = t;
    c.lim = lim ? *lim : lf__jinja_limits_default();
    c.pool.cap = c.lim.max_memory;
    c.today = today;
    char now[32];
    if (!today) {
        time_t tt = time(NULL);
        struct tm tm;
        gmtime_r(&tt, &tm);
        strftime(now, sizeof now, "%Y-%m-%d %H:%M:%S", &tm);
        c.today = now;
    }
    lf_status st = LF_OK;
    jframe *g = new_frame(&c, NULL), *top = NULL;
    if (!g) st = lf_fail(LF_ERR_NOMEM, "%s: out of memory rendering", t->what);
    c.globals = g;
    for (const cJSON *e = vars ? vars->child : NULL; e && st == LF_OK; e = e->next) {
        int content = !strcmp(e->string, "messages") || !strcmp(e->string, "tools") || !strcmp(e->string, "documents");
        jv v;
        if ((st = lf__jv_from_json(&c, e, content, 0, &v)) == LF_OK)
            st = set_var(&c, g, e->string, strlen(e->string), v);
    }
    if (st == LF_OK && !(top = new_frame(&c, g))) st = lf_fail(LF_ERR_NOMEM, "%s: out of memory rendering", t->what);
    c.globals = top; /* macros see the variables and the template's top frame */
    int flow = 0;
    if (st == LF_OK) st = exec(&c, top, t->root, &flow);
    lf__jpool_free(&c.pool);
    if (st != LF_OK) {
        free(c.out.p);
        free(c.out.sp);
        return st;
    }
    if (!c.out.p && !(c.out.p = calloc(1, 1))) {
        free(c.out.sp);
        return lf_fail(LF_ERR_NOMEM, "%s: out of memory rendering", t->what);
    }
    *out = c.out.p;
    *len = c.out.len;
    if (spans) {
        *spans = c.out.sp;
        *n_spans = c.out.n_sp;
    } else free(c.out.sp);
    return LF_OK;
}
