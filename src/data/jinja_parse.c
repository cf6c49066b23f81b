/*
 * Jinja parser (jinja.h): tokens -> tree, by recursive descent with
 * jinja2's precedence (lowest first): x if c else y; or; and; not;
 * comparisons and (not) in; + -; ~; * / // %; **; unary - +; then a
 * primary with its postfixes (.attr, [key], [a:b:c], (args)) and its
 * filters and tests (x|f(args), x is [not] t), so `a + b|trim` is
 * `a + (b|trim)` as in jinja2.
 *
 * Tags: if/elif/else, for (targets in iterable [if filter], else), set
 * (name = x, ns.attr = x, or a block set ... endset), macro, break,
 * continue, generation. Any other tag, and every filter, test, method,
 * global or loop attribute the interpreter does not implement, is refused
 * here with LF_ERR_UNSUPPORTED naming its line: the subset never renders
 * a template differently from jinja2 by skipping what it does not know.
 * Nesting (blocks and expressions together) is capped at
 * LF__JINJA_DEPTH_MAX.
 */
#include <stdio.h>
#include <string.h>

#include "jinja_impl.h"

typedef struct called {
    const char *s;
    size_t n;
    int line;
} called;

typedef struct P {
    const jtok *t;
    int n, i;
    const char *what;
    jpool *pool;
    int depth, loops, has_gen;
    called *calls; /* names called as functions: globals or macros */
    int n_calls, cap_calls;
    jnode **macros;
    int n_macros, cap_macros;
} P;

static const jtok *peek(P *p) { return &p->t[p->i]; }
static int is_op(const jtok *t, const char *op) {
    return t->kind == JT_OP && t->len == strlen(op) && !memcmp(t->s, op, t->len);
}
static int is_name(const jtok *t, const char *nm) {
    return t->kind == JT_NAME && t->len == strlen(nm) && !memcmp(t->s, nm, t->len);
}

static lf_status syntax(P *p, const char *fmt, const char *arg) {
    char msg[256];
    snprintf(msg, sizeof msg, fmt, arg);
    return lf_fail(LF_ERR_FORMAT, "%s:%d: %s", p->what, peek(p)->line, msg);
}

static const char *tok_desc(const jtok *t, char *buf, size_t cap) {
    switch (t->kind) {
    case JT_TEXT: return "template text";
    case JT_VAR_BEGIN: return "'{{'";
    case JT_VAR_END: return "'}}'";
    case JT_BLOCK_BEGIN: return "'{%'";
    case JT_BLOCK_END: return "'%}'";
    case JT_STRING: return "a string";
    case JT_INT:
    case JT_FLOAT: return "a number";
    case JT_EOF: return "the end of the template";
    default: snprintf(buf, cap, "'%.*s'", (int)(t->len < 40 ? t->len : 40), t->s); return buf;
    }
}

static lf_status expect_op(P *p, const char *op) {
    char buf[64], want[16];
    if (is_op(peek(p), op)) {
        p->i++;
        return LF_OK;
    }
    snprintf(want, sizeof want, "'%s'", op);
    return lf_fail(LF_ERR_FORMAT, "%s:%d: expected %s, found %s", p->what, peek(p)->line, want,
                   tok_desc(peek(p), buf, sizeof buf));
}

static lf_status expect_kind(P *p, jtok_kind k, const char *desc) {
    char buf[64];
    if (peek(p)->kind == k) {
        p->i++;
        return LF_OK;
    }
    return lf_fail(LF_ERR_FORMAT, "%s:%d: expected %s, found %s", p->what, peek(p)->line, desc,
                   tok_desc(peek(p), buf, sizeof buf));
}

static jnode *mk(P *p, jnode_kind k, int line) {
    jnode *n = lf__jpool_alloc(p->pool, sizeof *n);
    if (n) {
        n->kind = k;
        n->line = line;
    }
    return n;
}

static lf_status oom(P *p) { return lf_fail(LF_ERR_NOMEM, "%s: out of memory parsing the template", p->what); }

static lf_status add_kid(P *p, jnode *n, jnode *k, int *cap) {
    if (n->n_kids == *cap) {
        int nc = *cap ? 2 * *cap : 4;
        jnode **q = lf__jpool_alloc(p->pool, (size_t)nc * sizeof *q);
        if (!q) return oom(p);
        if (n->n_kids) memcpy(q, n->kids, (size_t)n->n_kids * sizeof *q);
        n->kids = q;
        *cap = nc;
    }
    n->kids[n->n_kids++] = k;
    return LF_OK;
}

static lf_status enter(P *p) {
    if (++p->depth > LF__JINJA_DEPTH_MAX)
        return lf_fail(LF_ERR_RANGE, "%s:%d: the template nests deeper than %d", p->what, peek(p)->line,
                       LF__JINJA_DEPTH_MAX);
    return LF_OK;
}

static lf_status unsupported(P *p, int line, const char *what, const char *s, size_t n) {
    return lf_fail(LF_ERR_UNSUPPORTED,
                   "%s:%d: unsupported %s '%.*s' (llmforge renders a subset of Jinja: docs/data.md)", p->what, line,
                   what, (int)(n < 60 ? n : 60), s);
}

static lf_status parse_expr(P *p, int with_cond, jnode **out);

/* ---------------------------------------------------------------- primaries */
static lf_status parse_args(P *p, jnode *call) {
    int cap = 0;
    lf_status st = expect_op(p, "(");
    if (st != LF_OK) return st;
    while (!is_op(peek(p), ")")) {
        const char *kw = NULL;
        if (peek(p)->kind == JT_NAME && is_op(&p->t[p->i + 1], "=")) {
            char *k = lf__jpool_alloc(p->pool, peek(p)->len + 1);
            if (!k) return oom(p);
            memcpy(k, peek(p)->s, peek(p)->len);
            kw = k;
            p->i += 2;
        } else if (is_op(peek(p), "*") || is_op(peek(p), "**"))
            return unsupported(p, peek(p)->line, "argument unpacking", peek(p)->s, peek(p)->len);
        jnode *a;
        if ((st = parse_expr(p, 1, &a)) != LF_OK) return st;
        a->kw = kw;
        if ((st = add_kid(p, call, a, &cap)) != LF_OK) return st;
        if (!is_op(peek(p), ",")) break;
        p->i++;
    }
    return expect_op(p, ")");
}

static lf_status parse_primary(P *p, jnode **out) {
    const jtok *t = peek(p);
    lf_status st;
    jnode *n;
    if (t->kind == JT_STRING) {
        size_t len = 0;
        int j = p->i;
        while (p->t[j].kind == JT_STRING) len += p->t[j++].len; /* "a" "b" is "ab" */
        jstr *s = lf__jpool_alloc(p->pool, sizeof *s + len + 1);
        if (!s || !(n = mk(p, JN_LIT, t->line))) return oom(p);
        char *b = (char *)(s + 1);
        size_t k = 0;
        for (; p->i < j; p->i++) {
            memcpy(b + k, p->t[p->i].s, p->t[p->i].len);
            k += p->t[p->i].len;
        }
        s->p = b;
        s->len = len;
        n->lit = (jv){.t = JV_STR, .u.s = s};
        *out = n;
        return LF_OK;
    }
    if (t->kind == JT_INT || t->kind == JT_FLOAT) {
        if (!(n = mk(p, JN_LIT, t->line))) return oom(p);
        n->lit = t->kind == JT_INT ? lf__jv_int(t->i) : lf__jv_float(t->f);
        p->i++;
        *out = n;
        return LF_OK;
    }
    if (t->kind == JT_NAME) {
        p->i++;
        if (!(n = mk(p, JN_LIT, t->line))) return oom(p);
        if (is_name(t, "true") || is_name(t, "True")) n->lit = lf__jv_bool(1);
        else if (is_name(t, "false") || is_name(t, "False")) n->lit = lf__jv_bool(0);
        else if (is_name(t, "none") || is_name(t, "None")) n->lit = lf__jv_none();
        else {
            n->kind = JN_NAME;
            n->s = t->s;
            n->slen = t->len;
        }
        *out = n;
        return LF_OK;
    }
    if (is_op(t, "(")) {
        p->i++;
        if ((st = parse_expr(p, 1, out)) != LF_OK) return st;
        if (is_op(peek(p), ",")) { /* a tuple: a list here */
            int cap = 0;
            if (!(n = mk(p, JN_LIST, t->line))) return oom(p);
            n->op = 1; /* a tuple */
            if ((st = add_kid(p, n, *out, &cap)) != LF_OK) return st;
            while (is_op(peek(p), ",")) {
                p->i++;
                if (is_op(peek(p), ")")) break;
                jnode *e;
                if ((st = parse_expr(p, 1, &e)) != LF_OK || (st = add_kid(p, n, e, &cap)) != LF_OK) return st;
            }
            *out = n;
        }
        return expect_op(p, ")");
    }
    if (is_op(t, "[") || is_op(t, "{")) {
        int dict = is_op(t, "{"), cap = 0;
        const char *close = dict ? "}" : "]";
        p->i++;
        if (!(n = mk(p, dict ? JN_DICT : JN_LIST, t->line))) return oom(p);
        while (!is_op(peek(p), close)) {
            jnode *e;
            if ((st = parse_expr(p, 1, &e)) != LF_OK || (st = add_kid(p, n, e, &cap)) != LF_OK) return st;
            if (dict) {
                if ((st = expect_op(p, ":")) != LF_OK) return st;
                if ((st = parse_expr(p, 1, &e)) != LF_OK || (st = add_kid(p, n, e, &cap)) != LF_OK) return st;
            }
            if (!is_op(peek(p), ",")) break;
            p->i++;
        }
        if ((st = expect_op(p, close)) != LF_OK) return st;
        *out = n;
        return LF_OK;
    }
    char buf[64];
    return lf_fail(LF_ERR_FORMAT, "%s:%d: expected an expression, found %s", p->what, t->line,
                   tok_desc(t, buf, sizeof buf));
}

static const char *const k_loop_attrs[] = {"index", "index0", "revindex", "revindex0", "first",
                                           "last",  "length", "previtem", "nextitem",  NULL};

static lf_status note_call(P *p, const jnode *callee) {
    if (callee->kind == JN_ATTR) {
        if (!lf__jinja_is_method(callee->s, callee->slen))
            return unsupported(p, callee->line, "method", callee->s, callee->slen);
        return LF_OK;
    }
    if (callee->kind != JN_NAME)
        return lf_fail(LF_ERR_UNSUPPORTED,
                       "%s:%d: unsupported call of an expression (only globals, macros and "
                       "methods are called)",
                       p->what, callee->line);
    if (p->n_calls == p->cap_calls) {
        int nc = p->cap_calls ? 2 * p->cap_calls : 16;
        called *q = lf__jpool_alloc(p->pool, (size_t)nc * sizeof *q);
        if (!q) return oom(p);
        if (p->n_calls) memcpy(q, p->calls, (size_t)p->n_calls * sizeof *q);
        p->calls = q;
        p->cap_calls = nc;
    }
    p->calls[p->n_calls++] = (called){callee->s, callee->slen, callee->line};
    return LF_OK;
}

static lf_status parse_postfix(P *p, jnode **node) {
    lf_status st;
    for (;;) {
        const jtok *t = peek(p);
        jnode *n;
        if (is_op(t, ".")) {
            p->i++;
            const jtok *a = peek(p);
            if (a->kind == JT_INT) { /* x.0 is x[0] */
                if (!(n = mk(p, JN_ITEM, t->line)) || !(n->b = mk(p, JN_LIT, t->line))) return oom(p);
                n->b->lit = lf__jv_int(a->i);
            } else {
                if (a->kind != JT_NAME) return syntax(p, "expected an attribute name after '%s'", ".");
                if (!(n = mk(p, JN_ATTR, t->line))) return oom(p);
                n->s = a->s;
                n->slen = a->len;
                if ((*node)->kind == JN_NAME && (*node)->slen == 4 && !memcmp((*node)->s, "loop", 4) && p->loops) {
                    int ok = 0;
                    for (int k = 0; k_loop_attrs[k]; k++)
                        ok |= a->len == strlen(k_loop_attrs[k]) && !memcmp(a->s, k_loop_attrs[k], a->len);
                    if (!ok) return unsupported(p, a->line, "loop attribute", a->s, a->len);
                }
            }
            p->i++;
            n->a = *node;
            *node = n;
        } else if (is_op(t, "[")) {
            p->i++;
            jnode *parts[3] = {NULL, NULL, NULL};
            int k = 0, slice = 0;
            for (;;) {
                if (!is_op(peek(p), ":") && !is_op(peek(p), "]"))
                    if ((st = parse_expr(p, 1, &parts[k])) != LF_OK) return st;
                if (!is_op(peek(p), ":")) break;
                slice = 1;
                if (++k > 2) return syntax(p, "a slice has at most three parts%s", "");
                p->i++;
            }
            if ((st = expect_op(p, "]")) != LF_OK) return st;
            if (slice) {
                int cap = 0;
                if (!(n = mk(p, JN_SLICE, t->line))) return oom(p);
                for (int j = 0; j < 3; j++)
                    if ((st = add_kid(p, n, parts[j], &cap)) != LF_OK) return st;
            } else {
                if (!parts[0]) return syntax(p, "expected a subscript%s", "");
                if (!(n = mk(p, JN_ITEM, t->line))) return oom(p);
                n->b = parts[0];
            }
            n->a = *node;
            *node = n;
        } else if (is_op(t, "(")) {
            if ((st = note_call(p, *node)) != LF_OK) return st;
            if (!(n = mk(p, JN_CALL, t->line))) return oom(p);
            n->a = *node;
            if ((st = parse_args(p, n)) != LF_OK) return st;
            *node = n;
        } else return LF_OK;
    }
}

static lf_status parse_filters(P *p, jnode **node) {
    lf_status st;
    for (;;) {
        const jtok *t = peek(p);
        int test = is_name(t, "is");
        if (!is_op(t, "|") && !test) return LF_OK;
        p->i++;
        jnode *n = mk(p, test ? JN_TEST : JN_FILTER, t->line);
        if (!n) return oom(p);
        if (test && is_name(peek(p), "not")) {
            n->op = 1;
            p->i++;
        }
        const jtok *nm = peek(p);
        if (nm->kind != JT_NAME && !(test && nm->kind == JT_NAME)) {
            /* "is none", "is true" lex as names too */
            return syntax(p, "expected a %s name", test ? "test" : "filter");
        }
        p->i++;
        if (is_op(peek(p), ".")) return unsupported(p, nm->line, test ? "test" : "filter", nm->s, nm->len + 2);
        if (test ? !lf__jinja_is_test(nm->s, nm->len) : !lf__jinja_is_filter(nm->s, nm->len))
            return unsupported(p, nm->line, test ? "test" : "filter", nm->s, nm->len);
        n->s = nm->s;
        n->slen = nm->len;
        n->a = *node;
        if (is_op(peek(p), "(")) {
            if ((st = parse_args(p, n)) != LF_OK) return st;
        } else if (test && (peek(p)->kind == JT_STRING || peek(p)->kind == JT_INT || peek(p)->kind == JT_FLOAT)) {
            jnode *arg; /* "x is divisibleby 3": one literal argument */
            int cap = 0;
            if ((st = parse_primary(p, &arg)) != LF_OK || (st = add_kid(p, n, arg, &cap)) != LF_OK) return st;
        }
        *node = n;
    }
}

static lf_status parse_unary(P *p, int with_filter, jnode **out) {
    const jtok *t = peek(p);
    lf_status st;
    if ((st = enter(p)) != LF_OK) return st;
    if (is_op(t, "-") || is_op(t, "+")) {
        p->i++;
        jnode *n = mk(p, JN_NEG, t->line);
        if (!n) return oom(p);
        n->op = t->s[0];
        if ((st = parse_unary(p, 0, &n->a)) != LF_OK) return st;
        *out = n;
    } else if ((st = parse_primary(p, out)) != LF_OK) return st;
    if ((st = parse_postfix(p, out)) != LF_OK) return st;
    if (with_filter && (st = parse_filters(p, out)) != LF_OK) return st;
    p->depth--;
    return LF_OK;
}

/* ---------------------------------------------------------------- binary levels */
typedef struct binop {
    const char *tok;
    int op;
} binop;

static lf_status parse_level(P *p, int level, jnode **out);

static const binop k_levels[][4] = {
    {{"+", JOP_ADD}, {"-", JOP_SUB}, {NULL, 0}},
    {{"~", JOP_CONCAT}, {NULL, 0}},
    {{"*", JOP_MUL}, {"/", JOP_DIV}, {"//", JOP_FLOORDIV}, {"%", JOP_MOD}},
    {{"**", JOP_POW}, {NULL, 0}},
};

/* level 0: + -, 1: ~, 2: * / // %, 3: **, 4: unary */
static lf_status parse_level(P *p, int level, jnode **out) {
    if (level == 4) return parse_unary(p, 1, out);
    lf_status st = parse_level(p, level + 1, out);
    for (; st == LF_OK;) {
        const jtok *t = peek(p);
        int op = 0;
        for (int k = 0; k < 4 && k_levels[level][k].tok; k++)
            if (is_op(t, k_levels[level][k].tok)) op = k_levels[level][k].op;
        if (!op) break;
        p->i++;
        jnode *n = mk(p, JN_BIN, t->line);
        if (!n) return oom(p);
        n->op = op;
        n->a = *out;
        st = parse_level(p, level + 1, &n->b);
        *out = n;
    }
    return st;
}

static lf_status parse_compare(P *p, jnode **out) {
    lf_status st = parse_level(p, 0, out);
    if (st != LF_OK) return st;
    static const binop cmps[] = {{"==", JOP_EQ}, {"!=", JOP_NE}, {"<=", JOP_LE}, {">=", JOP_GE},
                                 {"<", JOP_LT},  {">", JOP_GT},  {NULL, 0}};
    int n_cmp = 0;
    for (;;) {
        const jtok *t = peek(p);
        int op = 0;
        for (int k = 0; cmps[k].tok; k++)
            if (is_op(t, cmps[k].tok)) op = cmps[k].op;
        if (is_name(t, "in")) op = JOP_IN;
        if (is_name(t, "not") && is_name(&p->t[p->i + 1], "in")) {
            op = JOP_NOTIN;
            p->i++;
        }
        if (!op) return LF_OK;
        if (++n_cmp > 1) return unsupported(p, t->line, "chained comparison", t->s, t->len);
        p->i++;
        jnode *n = mk(p, JN_BIN, t->line);
        if (!n) return oom(p);
        n->op = op;
        n->a = *out;
        if ((st = parse_level(p, 0, &n->b)) != LF_OK) return st;
        *out = n;
    }
}

static lf_status parse_not(P *p, jnode **out) {
    const jtok *t = peek(p);
    if (!is_name(t, "not")) return parse_compare(p, out);
    p->i++;
    lf_status st = enter(p);
    jnode *n = mk(p, JN_NOT, t->line);
    if (st != LF_OK) return st;
    if (!n) return oom(p);
    if ((st = parse_not(p, &n->a)) != LF_OK) return st;
    p->depth--;
    *out = n;
    return LF_OK;
}

static lf_status parse_andor(P *p, int is_or, jnode **out) {
    lf_status st = is_or ? parse_andor(p, 0, out) : parse_not(p, out);
    while (st == LF_OK && is_name(peek(p), is_or ? "or" : "and")) {
        jnode *n = mk(p, is_or ? JN_OR : JN_AND, peek(p)->line);
        if (!n) return oom(p);
        p->i++;
        n->a = *out;
        st = is_or ? parse_andor(p, 0, &n->b) : parse_not(p, &n->b);
        *out = n;
    }
    return st;
}

static lf_status parse_expr(P *p, int with_cond, jnode **out) {
    lf_status st = enter(p);
    if (st != LF_OK) return st;
    if ((st = parse_andor(p, 1, out)) != LF_OK) return st;
    while (with_cond && is_name(peek(p), "if")) {
        jnode *n = mk(p, JN_COND, peek(p)->line);
        if (!n) return oom(p);
        p->i++;
        n->a = *out;
        if ((st = parse_andor(p, 1, &n->b)) != LF_OK) return st;
        if (is_name(peek(p), "else")) {
            p->i++;
            if ((st = parse_expr(p, 1, &n->c)) != LF_OK) return st;
        }
        *out = n;
    }
    p->depth--;
    return LF_OK;
}

/* ---------------------------------------------------------------- statements */
/* Parse statements into a JN_BODY until a tag named in ends (NULL-ended);
 * *which: its index (the parser stands after the tag's name), or -1 at
 * the end of the template (an error when ends is not empty). */
static lf_status parse_body(P *p, const char *const *ends, jnode **out, int *which, int open_line, const char *open);

static lf_status end_tag(P *p) { return expect_kind(p, JT_BLOCK_END, "'%}'"); }

static lf_status parse_name_tok(P *p, const jtok **nm) {
    if (peek(p)->kind != JT_NAME) return syntax(p, "expected a name%s", "");
    *nm = peek(p);
    p->i++;
    return LF_OK;
}

static lf_status parse_if(P *p, int line, jnode **out) {
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    jnode *n = mk(p, JN_IF, line);
    int which;
    lf_status st;
    if (!n) return oom(p);
    if ((st = parse_expr(p, 1, &n->a)) != LF_OK || (st = end_tag(p)) != LF_OK) return st;
    if ((st = parse_body(p, ends, &n->b, &which, line, "if")) != LF_OK) return st;
    if (which == 0) {
        jnode *inner, *body = mk(p, JN_BODY, peek(p)->line);
        int cap = 0;
        if (!body) return oom(p);
        if ((st = parse_if(p, peek(p)->line, &inner)) != LF_OK || (st = add_kid(p, body, inner, &cap)) != LF_OK)
            return st;
        n->c = body;
    } else {
        if ((st = end_tag(p)) != LF_OK) return st;
        if (which == 1) {
            static const char *const e2[] = {"endif", NULL};
            if ((st = parse_body(p, e2, &n->c, &which, line, "if")) != LF_OK || (st = end_tag(p)) != LF_OK) return st;
        }
    }
    *out = n;
    return LF_OK;
}

static lf_status parse_for(P *p, int line, jnode **out) {
    static const char *const ends[] = {"else", "endfor", NULL};
    jnode *n = mk(p, JN_FOR, line);
    int which, cap = 0;
    lf_status st;
    if (!n) return oom(p);
    int paren = is_op(peek(p), "(");
    if (paren) p->i++;
    for (;;) {
        const jtok *nm = NULL;
        if ((st = parse_name_tok(p, &nm)) != LF_OK) return st;
        jnode *tg = mk(p, JN_NAME, nm->line);
        if (!tg) return oom(p);
        tg->s = nm->s;
        tg->slen = nm->len;
        if ((st = add_kid(p, n, tg, &cap)) != LF_OK) return st;
        if (!is_op(peek(p), ",")) break;
        p->i++;
    }
    if (paren && (st = expect_op(p, ")")) != LF_OK) return st;
    if (!is_name(peek(p), "in")) return syntax(p, "expected 'in' in a for tag%s", "");
    p->i++;
    if ((st = parse_expr(p, 0, &n->a)) != LF_OK) return st;
    if (is_name(peek(p), "if")) {
        p->i++;
        if ((st = parse_expr(p, 0, &n->b)) != LF_OK) return st;
    }
    if (is_name(peek(p), "recursive")) return unsupported(p, peek(p)->line, "loop option", "recursive", 9);
    if ((st = end_tag(p)) != LF_OK) return st;
    p->loops++;
    st = parse_body(p, ends, &n->c, &which, line, "for");
    p->loops--;
    if (st != LF_OK || (st = end_tag(p)) != LF_OK) return st;
    if (which == 0) {
        static const char *const e2[] = {"endfor", NULL};
        if ((st = parse_body(p, e2, &n->d, &which, line, "for")) != LF_OK || (st = end_tag(p)) != LF_OK) return st;
    }
    *out = n;
    return LF_OK;
}

static lf_status parse_set(P *p, int line, jnode **out) {
    jnode *n = mk(p, JN_SET, line);
    const jtok *nm = NULL;
    lf_status st;
    if (!n) return oom(p);
    if ((st = parse_name_tok(p, &nm)) != LF_OK) return st;
    n->s = nm->s;
    n->slen = nm->len;
    if (is_op(peek(p), ".")) { /* ns.attr = value */
        p->i++;
        const jtok *at = NULL;
        if ((st = parse_name_tok(p, &at)) != LF_OK) return st;
        if (!(n->b = mk(p, JN_NAME, nm->line))) return oom(p);
        n->b->s = nm->s;
        n->b->slen = nm->len;
        n->s = at->s;
        n->slen = at->len;
    }
    if (is_op(peek(p), ",")) return unsupported(p, line, "assignment to several names in", "set", 3);
    if (peek(p)->kind == JT_BLOCK_END && !n->b) { /* {% set x %}...{% endset %} */
        static const char *const ends[] = {"endset", NULL};
        int which;
        p->i++;
        if ((st = parse_body(p, ends, &n->c, &which, line, "set")) != LF_OK) return st;
    } else {
        if ((st = expect_op(p, "=")) != LF_OK || (st = parse_expr(p, 1, &n->a)) != LF_OK) return st;
    }
    if ((st = end_tag(p)) != LF_OK) return st;
    *out = n;
    return LF_OK;
}

static lf_status parse_macro(P *p, int line, jnode **out) {
    static const char *const ends[] = {"endmacro", NULL};
    jnode *n = mk(p, JN_MACRO, line);
    const jtok *nm = NULL;
    int cap = 0, which;
    lf_status st;
    if (!n) return oom(p);
    if ((st = parse_name_tok(p, &nm)) != LF_OK || (st = expect_op(p, "(")) != LF_OK) return st;
    n->s = nm->s;
    n->slen = nm->len;
    while (!is_op(peek(p), ")")) {
        const jtok *pn = NULL;
        if ((st = parse_name_tok(p, &pn)) != LF_OK) return st;
        jnode *prm = mk(p, JN_NAME, pn->line);
        if (!prm) return oom(p);
        prm->s = pn->s;
        prm->slen = pn->len;
        if (is_op(peek(p), "=")) {
            p->i++;
            if ((st = parse_expr(p, 1, &prm->a)) != LF_OK) return st;
        }
        if ((st = add_kid(p, n, prm, &cap)) != LF_OK) return st;
        if (!is_op(peek(p), ",")) break;
        p->i++;
    }
    if ((st = expect_op(p, ")")) != LF_OK || (st = end_tag(p)) != LF_OK) return st;
    int loops = p->loops;
    p->loops = 0; /* break/continue do not cross a macro */
    st = parse_body(p, ends, &n->c, &which, line, "macro");
    p->loops = loops;
    if (st != LF_OK || (st = end_tag(p)) != LF_OK) return st;
    if (p->n_macros == p->cap_macros) {
        int nc = p->cap_macros ? 2 * p->cap_macros : 8;
        jnode **q = lf__jpool_alloc(p->pool, (size_t)nc * sizeof *q);
        if (!q) return oom(p);
        if (p->n_macros) memcpy(q, p->macros, (size_t)p->n_macros * sizeof *q);
        p->macros = q;
        p->cap_macros = nc;
    }
    p->macros[p->n_macros++] = n;
    *out = n;
    return LF_OK;
}

static lf_status parse_tag(P *p, const jtok *nm, jnode **out) {
    int line = nm->line;
    lf_status st;
    if (is_name(nm, "if")) return parse_if(p, line, out);
    if (is_name(nm, "for")) return parse_for(p, line, out);
    if (is_name(nm, "set")) return parse_set(p, line, out);
    if (is_name(nm, "macro")) return parse_macro(p, line, out);
    if (is_name(nm, "break") || is_name(nm, "continue")) {
        if (!p->loops) return syntax(p, "'%s' outside a for loop", is_name(nm, "break") ? "break" : "continue");
        if (!(*out = mk(p, is_name(nm, "break") ? JN_BREAK : JN_CONTINUE, line))) return oom(p);
        return end_tag(p);
    }
    if (is_name(nm, "generation")) {
        static const char *const ends[] = {"endgeneration", NULL};
        int which;
        jnode *n = mk(p, JN_GENERATION, line);
        if (!n) return oom(p);
        if ((st = end_tag(p)) != LF_OK) return st;
        if ((st = parse_body(p, ends, &n->c, &which, line, "generation")) != LF_OK || (st = end_tag(p)) != LF_OK)
            return st;
        p->has_gen = 1;
        *out = n;
        return LF_OK;
    }
    return unsupported(p, line, "tag", nm->s, nm->len);
}

static lf_status parse_body(P *p, const char *const *ends, jnode **out, int *which, int open_line, const char *open) {
    jnode *body = mk(p, JN_BODY, peek(p)->line);
    int cap = 0;
    lf_status st;
    if (!body) return oom(p);
    if ((st = enter(p)) != LF_OK) return st;
    for (;;) {
        const jtok *t = peek(p);
        jnode *n = NULL;
        if (t->kind == JT_EOF) {
            if (ends[0])
                return lf_fail(LF_ERR_FORMAT, "%s:%d: the '%s' tag opened here is never closed (expected '%s')",
                               p->what, open_line, open, ends[0][0] == 'e' ? ends[0] : "end");
            *which = -1;
            break;
        }
        if (t->kind == JT_TEXT) {
            if (!(n = mk(p, JN_TEXT, t->line))) return oom(p);
            n->s = t->s;
            n->slen = t->len;
            p->i++;
        } else if (t->kind == JT_VAR_BEGIN) {
            p->i++;
            if (!(n = mk(p, JN_OUTPUT, t->line))) return oom(p);
            if ((st = parse_expr(p, 1, &n->a)) != LF_OK) return st;
            if ((st = expect_kind(p, JT_VAR_END, "'}}'")) != LF_OK) return st;
        } else if (t->kind == JT_BLOCK_BEGIN) {
            p->i++;
            const jtok *nm = peek(p);
            if (nm->kind != JT_NAME) return syntax(p, "expected a tag name after '%s'", "{%");
            int k = 0;
            for (; ends[k]; k++)
                if (is_name(nm, ends[k])) break;
            if (ends[k]) {
                p->i++;
                *which = k;
                break;
            }
            static const char *const stray[] = {"endif",  "endfor",   "elif",          "else",
                                                "endset", "endmacro", "endgeneration", NULL};
            for (int s = 0; stray[s]; s++)
                if (is_name(nm, stray[s])) return syntax(p, "unexpected '%s' tag", stray[s]);
            p->i++;
            if ((st = parse_tag(p, nm, &n)) != LF_OK) return st;
        } else {
            char buf[64];
            return lf_fail(LF_ERR_FORMAT, "%s:%d: unexpected %s", p->what, t->line, tok_desc(t, buf, sizeof buf));
        }
        if ((st = add_kid(p, body, n, &cap)) != LF_OK) return st;
    }
    p->depth--;
    *out = body;
    return LF_OK;
}

lf_status lf__jinja_parse(const jtok *toks, int n_toks, const char *what, jpool *pool, jnode **root,
                          int *has_generation) {
    P p = {toks, n_toks, 0, what, pool, 0, 0, 0, NULL, 0, 0, NULL, 0, 0};
    static const char *const none[] = {NULL};
    int which;
    lf_status st = parse_body(&p, none, root, &which, 1, "");
    if (st != LF_OK) return st;
    for (int i = 0; i < p.n_calls; i++) {
        const called *c = &p.calls[i];
        int ok = lf__jinja_is_global(c->s, c->n);
        for (int m = 0; m < p.n_macros && !ok; m++)
            ok = p.macros[m]->slen == c->n && !memcmp(p.macros[m]->s, c->s, c->n);
        if (!ok) return unsupported(&p, c->line, "function", c->s, c->n);
    }
    *has_generation = p.has_gen;
    return LF_OK;
}
