/*
 * Stop strings over a token stream (API in serve_impl.h).
 *
 * Each stop string s_i has a Knuth-Morris-Pratt automaton whose state q_i is
 * the length of the longest prefix of s_i that is a suffix of all the text
 * seen so far. The text is fed byte by byte, so the result cannot depend on
 * where the pieces (tokens) were cut:
 *   - q_i == |s_i|: s_i ends at this byte. Generation stops at the first
 *     byte where any stop string ends; among those ending there the longest
 *     (the one that starts earliest) is cut, and the text before it is the
 *     last released.
 *   - otherwise the matcher holds back H = max_i q_i bytes (the tail that
 *     could still grow into a stop string) and releases the rest. Since every
 *     partial match lies within the last H bytes, nothing released can ever
 *     belong to a match. H < max |s_i|.
 * A stop string is valid UTF-8 (the parser checks requests), so it starts on
 * a character boundary, and so does the held tail: released text never
 * splits a character of valid input.
 *
 * Cost: O(total stop length) to build; amortised O(number of stop strings)
 * per byte; memory O(total stop length + longest stop string + the piece).
 *
 * Reference: D. E. Knuth, J. H. Morris, V. R. Pratt, "Fast pattern matching
 * in strings", SIAM J. Comput. 6(2), 1977.
 */
#include <stdlib.h>
#include <string.h>

#include "serve_impl.h"

#define STOP_MAX_N 64
#define STOP_MAX_LEN 65536

struct lf__stop_matcher {
    int n;
    char **s;
    size_t *len;
    size_t **fail; /* fail[i][k]: longest proper border of s_i[0, k) */
    size_t *q;     /* automaton states */
    char *held;    /* the held-back tail, then the bytes of the current push */
    size_t n_held, cap_held;
    char *out; /* what the last call released */
    size_t cap_out;
    int stopped;
};

void lf__stop_matcher_free(lf__stop_matcher *m) {
    if (!m) return;
    for (int i = 0; i < m->n; i++) {
        if (m->s) free(m->s[i]);
        if (m->fail) free(m->fail[i]);
    }
    free(m->s);
    free(m->len);
    free(m->fail);
    free(m->q);
    free(m->held);
    free(m->out);
    free(m);
}

lf_status lf__stop_matcher_create(const char *const *stops, const size_t *lens, int n, lf__stop_matcher **out) {
    if (!out) return lf_fail(LF_ERR_INVALID_ARG, "stop matcher: out is NULL");
    *out = NULL;
    if (n < 0 || n > STOP_MAX_N) return lf_fail(LF_ERR_RANGE, "stop matcher: %d stop strings (0..%d)", n, STOP_MAX_N);
    if (n > 0 && (!stops || !lens)) return lf_fail(LF_ERR_INVALID_ARG, "stop matcher: NULL stop strings");
    for (int i = 0; i < n; i++) {
        if (!stops[i]) return lf_fail(LF_ERR_INVALID_ARG, "stop matcher: stop string %d is NULL", i);
        if (lens[i] == 0 || lens[i] > STOP_MAX_LEN)
            return lf_fail(LF_ERR_RANGE, "stop matcher: stop string %d is %zu bytes (1..%d)", i, lens[i], STOP_MAX_LEN);
    }
    lf__stop_matcher *m = calloc(1, sizeof *m);
    if (!m) return lf_fail(LF_ERR_NOMEM, "stop matcher: out of memory");
    m->n = n;
    size_t nn = n > 0 ? (size_t)n : 1;
    m->s = calloc(nn, sizeof *m->s);
    m->len = calloc(nn, sizeof *m->len);
    m->fail = calloc(nn, sizeof *m->fail);
    m->q = calloc(nn, sizeof *m->q);
    if (!m->s || !m->len || !m->fail || !m->q) goto oom;
    for (int i = 0; i < n; i++) {
        size_t L = lens[i];
        m->s[i] = malloc(L);
        m->fail[i] = malloc((L + 1) * sizeof(size_t));
        if (!m->s[i] || !m->fail[i]) goto oom;
        memcpy(m->s[i], stops[i], L);
        m->len[i] = L;
        /* the KMP failure function */
        size_t *f = m->fail[i];
        const char *s = m->s[i];
        f[0] = 0;
        if (L >= 1) f[1] = 0;
        size_t k = 0;
        for (size_t j = 1; j < L; j++) {
            while (k > 0 && s[j] != s[k]) k = f[k];
            if (s[j] == s[k]) k++;
            f[j + 1] = k;
        }
    }
    *out = m;
    return LF_OK;
oom:
    lf__stop_matcher_free(m);
    return lf_fail(LF_ERR_NOMEM, "stop matcher: out of memory");
}

void lf__stop_matcher_reset(lf__stop_matcher *m) {
    if (!m) return;
    for (int i = 0; i < m->n; i++) m->q[i] = 0;
    m->n_held = 0;
    m->stopped = 0;
}

static int reserve(char **p, size_t *cap, size_t need) {
    if (need <= *cap) return 1;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    char *q = realloc(*p, c);
    if (!q) return 0;
    *p = q;
    *cap = c;
    return 1;
}

/* Release held[0, k) into the out buffer and keep held[k, n_held). */
static lf_status release(lf__stop_matcher *m, size_t k, size_t keep_from, const char **out, size_t *out_len) {
    if (!reserve(&m->out, &m->cap_out, k + 1)) return lf_fail(LF_ERR_NOMEM, "stop matcher: out of memory");
    if (k > 0) memcpy(m->out, m->held, k);
    m->out[k] = '\0';
    if (m->n_held > keep_from) memmove(m->held, m->held + keep_from, m->n_held - keep_from);
    m->n_held -= keep_from;
    *out = m->out;
    *out_len = k;
    return LF_OK;
}

lf_status lf__stop_matcher_push(lf__stop_matcher *m, const char *text, size_t len, const char **out, size_t *out_len,
                                int *stopped) {
    if (!m || !out || !out_len || !stopped || (len > 0 && !text))
        return lf_fail(LF_ERR_INVALID_ARG, "stop matcher: bad arguments to push");
    *out = "";
    *out_len = 0;
    *stopped = m->stopped;
    if (m->stopped || len == 0) return LF_OK;
    if (!reserve(&m->held, &m->cap_held, m->n_held + len + 1))
        return lf_fail(LF_ERR_NOMEM, "stop matcher: out of memory");
    for (size_t j = 0; j < len; j++) {
        const char c = text[j];
        m->held[m->n_held++] = c;
        size_t cut = 0; /* the longest stop string ending at this byte */
        for (int i = 0; i < m->n; i++) {
            size_t q = m->q[i];
            const char *s = m->s[i];
            while (q > 0 && s[q] != c) q = m->fail[i][q];
            if (s[q] == c) q++;
            m->q[i] = q;
            if (q == m->len[i] && q > cut) cut = q;
        }
        if (cut > 0) {
            m->stopped = 1;
            *stopped = 1;
            /* the released text ends where the stop string starts; the rest goes */
            lf_status st = release(m, m->n_held - cut, m->n_held, out, out_len);
            m->n_held = 0;
            return st;
        }
    }
    size_t hold = 0;
    for (int i = 0; i < m->n; i++)
        if (m->q[i] > hold) hold = m->q[i];
    return release(m, m->n_held - hold, m->n_held - hold, out, out_len);
}

lf_status lf__stop_matcher_flush(lf__stop_matcher *m, const char **out, size_t *out_len) {
    if (!m || !out || !out_len) return lf_fail(LF_ERR_INVALID_ARG, "stop matcher: bad arguments to flush");
    *out = "";
    *out_len = 0;
    if (m->stopped) return LF_OK;
    lf_status st = release(m, m->n_held, m->n_held, out, out_len);
    for (int i = 0; i < m->n; i++) m->q[i] = 0;
    return st;
}
