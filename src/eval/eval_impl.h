/*
 * Internals shared by the metrics: strict UTF-8, CPython-compatible
 * character classes and lower-casing, growable code-point buffers, token
 * lists, an interning table (token -> id) and an n-gram counter (id
 * sequence -> count).
 *
 * Invariants: every lf__cps / lf__toks / lf__strtab / lf__ngrams starts
 * zeroed ({0}) and is released with its _free, which accepts a zeroed or
 * half-built object. Buffers grow by doubling and report LF_ERR_NOMEM.
 */
#ifndef LF_EVAL_IMPL_H
#define LF_EVAL_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include "llmforge/eval.h"

typedef struct lf__u_range {
    uint32_t lo, hi;
} lf__u_range;

/* ---------------------------------------------------------------- code points */
typedef struct lf__cps {
    uint32_t *v;
    size_t n, cap;
} lf__cps;

lf_status lf__cps_reserve(lf__cps *b, size_t extra);
static inline lf_status lf__cps_push(lf__cps *b, uint32_t c) {
    if (b->n == b->cap) {
        lf_status st = lf__cps_reserve(b, 1);
        if (st != LF_OK) return st;
    }
    b->v[b->n++] = c;
    return LF_OK;
}
lf_status lf__cps_append(lf__cps *b, const uint32_t *c, size_t n);
void lf__cps_free(lf__cps *b);

/* Python str.isspace() / re \w (str.isalnum() or '_'). */
int lf__u_isspace(uint32_t c);
int lf__u_isword(uint32_t c);

/* Decode strict UTF-8 s[0..len) and append the code points to out. On bad
 * input: LF_ERR_FORMAT "WHAT: invalid UTF-8 at byte N (why)". */
lf_status lf__u_decode(const char *s, size_t len, const char *what, lf__cps *out);
/* Same for a NUL-terminated string (LF_ERR_INVALID_ARG for NULL,
 * LF_ERR_RANGE past LF_EVAL_MAX_TEXT). out is reset first. */
lf_status lf__u_decode_str(const char *s, const char *what, lf__cps *out);
/* Append str.lower() of in[0..n) to out (final sigma decided on in). */
lf_status lf__u_lower(const uint32_t *in, size_t n, lf__cps *out);
/* UTF-8 of cp[0..n) as a NUL-terminated lf_alloc'd string. */
lf_status lf__u_encode(const uint32_t *cp, size_t n, char **out, size_t *len);

/* ---------------------------------------------------------------- tokens */
/* Tokens back to back in `text`; token i is text.v[off[i] .. off[i+1]). */
typedef struct lf__toks {
    lf__cps text;
    size_t *off; /* n + 1 entries once any token exists */
    size_t n, cap;
} lf__toks;

lf_status lf__toks_add(lf__toks *t, const uint32_t *c, size_t n);
lf_status lf__toks_add_ascii(lf__toks *t, const char *s, size_t n);
void lf__toks_reset(lf__toks *t);
void lf__toks_free(lf__toks *t);
/* Append the tokens of in[0..n) split on Python whitespace (str.split()). */
lf_status lf__toks_split(lf__toks *t, const uint32_t *in, size_t n);
/* Tokens joined by single spaces, UTF-8, lf_alloc'd. */
lf_status lf__toks_join(const lf__toks *t, char **out);

/* ---------------------------------------------------------------- interning */
typedef struct lf__strtab {
    lf__cps pool; /* keys back to back */
    size_t *off;  /* key i = pool.v[off[i] .. off[i+1]) */
    size_t n, cap;
    uint32_t *slot; /* open addressing: id + 1, 0 = empty */
    size_t nslot;   /* power of two */
} lf__strtab;

lf_status lf__strtab_intern(lf__strtab *t, const uint32_t *s, size_t n, uint32_t *id);
void lf__strtab_free(lf__strtab *t);
/* Intern every token of toks, appending ids to ids[] (lf_alloc'd, resized). */
lf_status lf__strtab_ids(lf__strtab *t, const lf__toks *toks, uint32_t **ids);

/* ---------------------------------------------------------------- n-gram counts */
typedef struct lf__ngram_slot {
    const uint32_t *key; /* points into the caller's id array; NULL = empty */
    uint32_t n;
    uint64_t hash;
    int64_t count;
} lf__ngram_slot;

typedef struct lf__ngrams {
    lf__ngram_slot *slot;
    size_t nslot, used;
} lf__ngrams;

/* count[key] += delta (mode 0) or count[key] = max(count[key], delta) (mode 1).
 * The key memory must outlive the map. */
lf_status lf__ngrams_put(lf__ngrams *m, const uint32_t *key, uint32_t n, int64_t delta, int mode);
int64_t lf__ngrams_get(const lf__ngrams *m, const uint32_t *key, uint32_t n);
/* Add all n-grams of ids[0..len) for orders lo..hi. */
lf_status lf__ngrams_count(lf__ngrams *m, const uint32_t *ids, size_t len, int lo, int hi);
void lf__ngrams_reset(lf__ngrams *m);
void lf__ngrams_free(lf__ngrams *m);

/* ---------------------------------------------------------------- misc */
/* Porter stemmer on an ASCII lower-case word of n chars; result into
 * out (capacity >= n + 2), returns its length. */
size_t lf__porter_stem(const char *w, size_t n, char *out);

#endif
