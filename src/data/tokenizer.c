/*
 * Tokenizer front end: a spec string "KIND:ARG" picks an entry of the table
 * below by its prefix and hands ARG (a path resolved against base_dir) to it.
 * Adding a kind ("gpt2:", "bpe:") is one table entry and one file; callers
 * never change. Optional table slots (encode with options, safe cut points
 * for multi-threaded encoding, special tokens) are NULL for kinds without
 * them, and the wrappers below fall back or answer LF_ERR_UNSUPPORTED /
 * LF_ERR_NOT_FOUND. An unknown prefix is LF_ERR_UNSUPPORTED naming the spec and
 * listing the supported prefixes.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "data_impl.h"

struct lf_tokenizer {
    const lf__tokenizer_ops *ops;
    void *state;
    int vocab_size;
};

static const lf__tokenizer_ops *const g_kinds[] = {
    &lf__tokenizer_char_ops, &lf__tokenizer_gpt2_ops, &lf__tokenizer_tiktoken_ops,
    &lf__tokenizer_bpe_ops,  &lf__tokenizer_hf_ops,
};
#define N_KINDS (sizeof g_kinds / sizeof g_kinds[0])

static const lf__tokenizer_ops *find_kind(const char *spec) {
    for (size_t i = 0; i < N_KINDS; i++) {
        size_t n = strlen(g_kinds[i]->prefix);
        if (strncmp(spec, g_kinds[i]->prefix, n) == 0) return g_kinds[i];
    }
    return NULL;
}

static void supported_list(char *buf, size_t size) {
    size_t at = 0;
    buf[0] = 0;
    for (size_t i = 0; i < N_KINDS && at + 1 < size; i++) {
        const char *p = g_kinds[i]->prefix;
        if (i > 0 && at + 2 < size) {
            buf[at++] = ',';
            buf[at++] = ' ';
        }
        for (; *p && at + 1 < size; p++) buf[at++] = *p;
        buf[at] = 0;
    }
}

lf_status lf__tokenizer_spec_resolve(const char *spec, const char *base_dir, char **out) {
    *out = NULL;
    const lf__tokenizer_ops *k = find_kind(spec);
    size_t np = k ? strlen(k->prefix) : 0;
    const char *arg = spec + np;
    char *joined = NULL;
    if (k && k->arg_is_path && base_dir && *base_dir && arg[0] != '/' && arg[0] != 0) {
        joined = lf__path_join(base_dir, arg);
        if (!joined) return lf_fail(LF_ERR_NOMEM, "out of memory resolving tokenizer spec '%s'", spec);
        arg = joined;
    }
    size_t na = strlen(arg);
    char *r = malloc(np + na + 1);
    if (!r) {
        free(joined);
        return lf_fail(LF_ERR_NOMEM, "out of memory resolving tokenizer spec '%s'", spec);
    }
    memcpy(r, spec, np);
    memcpy(r + np, arg, na + 1);
    free(joined);
    *out = r;
    return LF_OK;
}

const char *lf__tokenizer_spec_file(const char *spec) {
    const lf__tokenizer_ops *k = find_kind(spec);
    if (!k || !k->arg_is_path) return NULL;
    return spec + strlen(k->prefix);
}

lf_status lf_tokenizer_open(lf_tokenizer **out, const char *spec, const char *base_dir) {
    if (!out) return lf_fail(LF_ERR_INVALID_ARG, "lf_tokenizer_open: out is NULL");
    *out = NULL;
    if (!spec) return lf_fail(LF_ERR_INVALID_ARG, "lf_tokenizer_open: spec is NULL");
    const lf__tokenizer_ops *k = find_kind(spec);
    if (!k) {
        char list[256];
        supported_list(list, sizeof list);
        return lf_fail(LF_ERR_UNSUPPORTED, "tokenizer spec '%s': unknown kind (supported: %s)", spec, list);
    }
    if (spec[strlen(k->prefix)] == 0)
        return lf_fail(LF_ERR_INVALID_ARG, "tokenizer spec '%s': nothing after '%s'", spec, k->prefix);
    char *resolved = NULL;
    lf_status st = lf__tokenizer_spec_resolve(spec, base_dir, &resolved);
    if (st != LF_OK) return st;
    lf_tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        free(resolved);
        return lf_fail(LF_ERR_NOMEM, "out of memory opening tokenizer '%s'", spec);
    }
    t->ops = k;
    st = k->open(&t->state, &t->vocab_size, resolved + strlen(k->prefix));
    free(resolved);
    if (st != LF_OK) {
        free(t);
        return st;
    }
    *out = t;
    return LF_OK;
}

void lf_tokenizer_free(lf_tokenizer *t) {
    if (!t) return;
    if (t->ops->free) t->ops->free(t->state);
    free(t);
}

int lf_tokenizer_vocab_size(const lf_tokenizer *t) { return t ? t->vocab_size : 0; }

lf_status lf_tokenizer_encode(const lf_tokenizer *t, const char *text, size_t len, uint32_t **ids, size_t *n) {
    if (ids) *ids = NULL;
    if (n) *n = 0;
    if (!t || !ids || !n || (!text && len > 0))
        return lf_fail(LF_ERR_INVALID_ARG, "lf_tokenizer_encode: NULL argument");
    if (!t->ops->encode)
        return lf_fail(LF_ERR_UNSUPPORTED, "tokenizer '%s': encoding is not supported", t->ops->prefix);
    return t->ops->encode(t->state, text ? text : "", len, ids, n);
}

lf_status lf_tokenizer_decode(const lf_tokenizer *t, const uint32_t *ids, size_t n, char **text, size_t *len) {
    if (text) *text = NULL;
    if (len) *len = 0;
    if (!t || !text || (!ids && n > 0)) return lf_fail(LF_ERR_INVALID_ARG, "lf_tokenizer_decode: NULL argument");
    if (!t->ops->decode)
        return lf_fail(LF_ERR_UNSUPPORTED, "tokenizer '%s': decoding is not supported", t->ops->prefix);
    size_t dummy;
    return t->ops->decode(t->state, ids, n, text, len ? len : &dummy);
}

/* ---------------------------------------------------------------- options, threads, special tokens
 * (the byte-level BPE kinds fill the optional table slots; tokenizer_bpe.c) */
lf_encode_opts lf_encode_opts_default(void) {
    lf_encode_opts o;
    memset(&o, 0, sizeof o);
    o.allow_special = 0;
    o.invalid_utf8 = LF_UTF8_STRICT;
    return o;
}

static lf_status check_encode_args(const lf_tokenizer *t, const char *text, size_t len, const lf_encode_opts *o,
                                   uint32_t **ids, size_t *n) {
    if (ids) *ids = NULL;
    if (n) *n = 0;
    if (!t || !ids || !n || (!text && len > 0))
        return lf_fail(LF_ERR_INVALID_ARG, "lf_tokenizer_encode: NULL argument");
    if (o->invalid_utf8 != LF_UTF8_STRICT && o->invalid_utf8 != LF_UTF8_BYTES)
        return lf_fail(LF_ERR_INVALID_ARG, "lf_tokenizer_encode: unknown invalid_utf8 policy %d", (int)o->invalid_utf8);
    if (!t->ops->encode)
        return lf_fail(LF_ERR_UNSUPPORTED, "tokenizer '%s': encoding is not supported", t->ops->prefix);
    if (!t->ops->encode_ex && o->invalid_utf8 != LF_UTF8_STRICT)
        return lf_fail(LF_ERR_UNSUPPORTED, "tokenizer '%s': invalid UTF-8 can only be an error (LF_UTF8_STRICT)",
                       t->ops->prefix);
    return LF_OK;
}

lf_status lf_tokenizer_encode_opts(const lf_tokenizer *t, const char *text, size_t len, const lf_encode_opts *opts,
                                   uint32_t **ids, size_t *n) {
    lf_encode_opts d = lf_encode_opts_default();
    const lf_encode_opts *o = opts ? opts : &d;
    lf_status st = check_encode_args(t, text, len, o, ids, n);
    if (st != LF_OK) return st;
    if (t->ops->encode_ex) return t->ops->encode_ex(t->state, text ? text : "", len, o, 0, ids, n);
    return t->ops->encode(t->state, text ? text : "", len, ids, n); /* a kind without special tokens */
}

lf_status lf_tokenizer_encode_parallel(const lf_tokenizer *t, const char *text, size_t len, const lf_encode_opts *opts,
                                       int n_threads, uint32_t **ids, size_t *n) {
    lf_encode_opts d = lf_encode_opts_default();
    const lf_encode_opts *o = opts ? opts : &d;
    lf_status st = check_encode_args(t, text, len, o, ids, n);
    if (st != LF_OK) return st;
    return lf__tokenizer_encode_parallel(t->ops, t->state, text ? text : "", len, o, n_threads, ids, n);
}

lf_status lf_tokenizer_special_id(const lf_tokenizer *t, const char *name, uint32_t *id) {
    if (!t || !name || !id) return lf_fail(LF_ERR_INVALID_ARG, "lf_tokenizer_special_id: NULL argument");
    if (!t->ops->special_id)
        return lf_fail(LF_ERR_NOT_FOUND, "tokenizer '%s' has no special tokens ('%s' asked)", t->ops->prefix, name);
    return t->ops->special_id(t->state, name, id);
}

/* The strong definition (prepare.c holds a weak stand-in from before this
 * wrapper existed): the kind's own rule where it has one (char: "\n"; hf: the
 * rule in tokenizer_hf.c), else the kinds with special tokens answer
 * <|endoftext|>. Records no error. */
int lf_tokenizer_eot(const lf_tokenizer *t) {
    if (!t) return -1;
    if (t->ops->eot) return t->ops->eot(t->state);
    if (!t->ops->special_id) return -1;
    char saved[1024]; /* a failed look-up records a message; this function records none */
    snprintf(saved, sizeof saved, "%s", lf_last_error());
    uint32_t id = 0;
    int eot = t->ops->special_id(t->state, "<|endoftext|>", &id) == LF_OK && id <= INT_MAX ? (int)id : -1;
    lf_fail(LF_OK, "%s", saved);
    return eot;
}
