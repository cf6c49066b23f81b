/*
 * Internals of the Jinja interpreter (jinja.h): tokens, the tree, values
 * and the render state, shared by jinja_lex.c, jinja_parse.c,
 * jinja_value.c, jinja_eval.c and jinja_builtins.c only.
 *
 * Memory: the compiled tree lives in the template's pool; every value made
 * during a render lives in the render's pool (freed at once at the end),
 * so values are copied by struct and share their lists and dicts as
 * Python's references do. Both pools count their bytes against a cap.
 */
#ifndef LF_DATA_JINJA_IMPL_H
#define LF_DATA_JINJA_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "jinja.h"

/* ---------------------------------------------------------------- pool */
typedef struct jpool {
    struct jchunk *head;
    size_t used, cap; /* bytes handed out, and the most allowed */
} jpool;
void *lf__jpool_alloc(jpool *p, size_t n); /* zeroed; NULL past cap or out of memory */
void lf__jpool_free(jpool *p);

/* ---------------------------------------------------------------- tokens */
typedef enum jtok_kind {
    JT_TEXT,        /* template data between tags */
    JT_VAR_BEGIN,   /* {{ */
    JT_VAR_END,     /* }} */
    JT_BLOCK_BEGIN, /* {% */
    JT_BLOCK_END,   /* %} */
    JT_NAME,
    JT_STRING, /* s holds the decoded bytes */
    JT_INT,
    JT_FLOAT,
    JT_OP, /* s holds the operator: + - * / // % ** ~ == != < <= > >= = . , : | ( ) [ ] { } */
    JT_EOF,
} jtok_kind;

typedef struct jtok {
    jtok_kind kind;
    int line;
    const char *s; /* in the template's pool */
    size_t len;
    int64_t i;
    double f;
} jtok;

/* Tokens of src (the template's pool holds them). */
lf_status lf__jinja_lex(const char *src, size_t len, const char *what, jpool *pool, jtok **toks, int *n_toks);

/* ---------------------------------------------------------------- values */
typedef enum jv_type {
    JV_UNDEF,
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST,
    JV_DICT,
    JV_NS,
    JV_MACRO
} jv_type;

typedef struct jstr {
    const char *p;
    size_t len;
    /* content ranges (off, len) pairs, sorted, disjoint; n_taint of them */
    const size_t *taint;
    int n_taint;
} jstr;

struct jlist;
struct jdict;
struct jnode;

typedef struct jv {
    jv_type t;
    union {
        int b;
        int64_t i;
        double f;
        const jstr *s;
        struct jlist *l;
        struct jdict *d; /* dicts and namespaces */
        const struct jnode *m;
    } u;
} jv;

typedef struct jlist {
    jv *v;
    size_t n, cap;
    int tuple; /* printed as Python prints a tuple: (a, b) */
} jlist;

typedef struct jdict {
    jv *k, *v;
    size_t n, cap;
} jdict;

/* ---------------------------------------------------------------- tree */
typedef enum jnode_kind {
    /* statements */
    JN_BODY,   /* kids: statements */
    JN_TEXT,   /* s */
    JN_OUTPUT, /* a */
    JN_IF,     /* a cond, b then (body), c else (body or NULL) */
    JN_FOR,    /* kids targets (names), a iterable, b filter or NULL, c body, d else */
    JN_SET,    /* s name, a value; b object for ns.attr (s the attribute) */
    JN_MACRO,  /* s name, kids params (JN_NAME, a default), c body */
    JN_BREAK,
    JN_CONTINUE,
    JN_GENERATION, /* c body */
    /* expressions */
    JN_LIT,    /* lit */
    JN_NAME,   /* s */
    JN_ATTR,   /* a object, s name */
    JN_ITEM,   /* a object, b key */
    JN_SLICE,  /* a object, kids: start, stop, step (NULL when absent) */
    JN_CALL,   /* a callee, kids args (kw set on keyword args) */
    JN_FILTER, /* s name, a operand, kids args */
    JN_TEST,   /* s name, a operand, kids args, op 1 for "is not" */
    JN_BIN,    /* op, a, b */
    JN_NOT,    /* a */
    JN_NEG,    /* a; op '+' for unary plus */
    JN_AND,    /* a, b */
    JN_OR,     /* a, b */
    JN_COND,   /* a value, b condition, c else (NULL: undefined) */
    JN_LIST,   /* kids */
    JN_DICT,   /* kids: key, value, key, value ... */
} jnode_kind;

/* binary operators */
enum {
    JOP_ADD = 1,
    JOP_SUB,
    JOP_MUL,
    JOP_DIV,
    JOP_FLOORDIV,
    JOP_MOD,
    JOP_POW,
    JOP_CONCAT,
    JOP_EQ,
    JOP_NE,
    JOP_LT,
    JOP_LE,
    JOP_GT,
    JOP_GE,
    JOP_IN,
    JOP_NOTIN
};

typedef struct jnode {
    jnode_kind kind;
    int line;
    int op;
    const char *s;
    size_t slen;
    const char *kw; /* an argument's keyword, NUL-terminated, or NULL */
    jv lit;
    struct jnode *a, *b, *c, *d;
    struct jnode **kids;
    int n_kids;
} jnode;

struct lf__jinja {
    jpool pool;
    jnode *root;
    char *what;
    int has_generation;
};

/* Tokens -> tree. Every name of a filter, test, method and global is
 * checked against the builtins' tables here. */
lf_status lf__jinja_parse(const jtok *toks, int n_toks, const char *what, jpool *pool, jnode **root,
                          int *has_generation);

/* ---------------------------------------------------------------- render state */
typedef struct jframe {
    struct jframe *up; /* enclosing scope; NULL at the globals */
    jdict vars;
} jframe;

typedef struct jout {
    char *p;
    size_t len, cap;
    lf__chat_span *sp;
    int n_sp, cap_sp;
} jout;

typedef struct jctx {
    const lf__jinja *t;
    jpool pool;
    jframe *globals;
    jout out;
    lf__jinja_limits lim;
    long steps;
    int depth;
    const char *today;
    int line; /* of the node being evaluated, for messages */
} jctx;

/* Values (jinja_value.c). */
jv lf__jv_undef(void);
jv lf__jv_none(void);
jv lf__jv_bool(int b);
jv lf__jv_int(int64_t i);
jv lf__jv_float(double f);
/* A string of p[0, len) copied into the pool; tainted: all content (1) or none (0). */
lf_status lf__jv_str(jctx *c, const char *p, size_t len, int tainted, jv *out);
/* The string a + b, taints kept where they were. */
lf_status lf__jv_str_concat(jctx *c, const jstr *a, const jstr *b, jv *out);
/* A string derived from src's bytes (a method, a filter): content when any of src was. */
lf_status lf__jv_str_from(jctx *c, const char *p, size_t len, const jstr *src, jv *out);
lf_status lf__jv_list_new(jctx *c, size_t cap, jv *out);
lf_status lf__jv_list_push(jctx *c, jlist *l, jv v);
lf_status lf__jv_dict_new(jctx *c, jv *out);
/* Set k -> v (replacing an equal key). */
lf_status lf__jv_dict_set(jctx *c, jdict *d, jv k, jv v);
/* The value for the string key s[0, n), or NULL. */
jv *lf__jv_dict_get(const jdict *d, const char *s, size_t n);
jv *lf__jv_dict_find(const jdict *d, jv k);
int lf__jv_truthy(jv v);
int lf__jv_equal(jv a, jv b);
const char *lf__jv_type_name(jv v);
/* str(v) as Python prints it (None, True, 1.5, ['a'], {'k': 1}) */
lf_status lf__jv_to_str(jctx *c, jv v, jv *out);
/* json.dumps(v, ensure_ascii=False, indent=indent (<0: None), sort_keys) */
lf_status lf__jv_tojson(jctx *c, jv v, int indent, int sort_keys, jv *out);
/* A cJSON value as a value; strings content when tainted. */
lf_status lf__jv_from_json(jctx *c, const cJSON *j, int tainted, int depth, jv *out);
/* Code points of a UTF-8 string, and the byte offset of code point k. */
size_t lf__utf8_count(const char *p, size_t len);
size_t lf__utf8_offset(const char *p, size_t len, size_t k);

/* Fail with a message naming the template and the current line. */
lf_status lf__jinja_err(jctx *c, lf_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Builtins (jinja_builtins.c): names known at compile time, then the calls. */
int lf__jinja_is_filter(const char *name, size_t n);
int lf__jinja_is_test(const char *name, size_t n);
int lf__jinja_is_method(const char *name, size_t n);
int lf__jinja_is_global(const char *name, size_t n);
/* Evaluated arguments of a call: positional then keyword (kw[i] NULL for positional). */
typedef struct jargs {
    jv *v;
    const char **kw;
    int n;
} jargs;
lf_status lf__jinja_filter(jctx *c, const char *name, size_t n, jv x, const jargs *a, jv *out);
lf_status lf__jinja_test(jctx *c, const char *name, size_t n, jv x, const jargs *a, int *out);
lf_status lf__jinja_method(jctx *c, jv obj, const char *name, size_t n, const jargs *a, jv *out);
lf_status lf__jinja_global(jctx *c, const char *name, size_t n, const jargs *a, jv *out);

#endif
