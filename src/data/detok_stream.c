/*
 * Streaming detokenizer: turns generated tokens, one at a time, into text
 * that never ends inside a UTF-8 character.
 *
 * Why: byte-level BPE (GPT-2, tiktoken, Llama 3) splits a character that
 * takes several bytes (CJK, emoji, most accented letters of rare words)
 * across tokens, so printing each token's bytes as they arrive shows broken
 * characters on a terminal and sends invalid UTF-8 to an HTTP client. The
 * stream holds back the bytes of an unfinished character until the token
 * that completes it arrives.
 *
 * Rules (Unicode 15 section 3.9, "U+FFFD Substitution of Maximal Subparts",
 * which Python's bytes.decode('utf-8', 'replace') and WHATWG's decoder
 * follow, and so do tiktoken's and Hugging Face's decode):
 *  - a complete well-formed sequence (core/utf8.c's table) is emitted as is;
 *  - a sequence that cannot be completed is replaced by one U+FFFD per
 *    maximal subpart: the longest prefix of a well-formed sequence (at least
 *    one byte) starting there; scanning resumes at the byte that broke it;
 *  - a well-formed prefix that runs to the end of the bytes so far (at most
 *    3 bytes) waits for the next push; flush replaces it by one U+FFFD.
 * So for ids whose bytes are valid UTF-8 (the ids of any text), the pushes
 * and the flush concatenate to exactly lf_tokenizer_decode of all the ids;
 * for arbitrary ids, to that decode's bytes with the substitution above.
 *
 * Invariants: between calls the stream holds 0..3 pending bytes, always a
 * proper prefix of a well-formed sequence; every output is well-formed
 * UTF-8 (possibly empty); a failed call leaves the stream as it was.
 */
#include <string.h>
#include "data_impl.h"

#define PEND_MAX 3

struct lf_detok_stream {
    const lf_tokenizer *t;
    unsigned char pend[PEND_MAX];
    int npend;
};

/* The bytes from s[0] (n >= 1 of them): k > 0, a complete well-formed
 * character of k bytes; k < 0, an ill-formed sequence whose maximal subpart
 * is -k bytes; 0, a well-formed prefix that reaches the end. */
static int utf8_step(const unsigned char *s, size_t n) {
    lf__utf8_err e;
    const int k = lf__utf8_scan(s, n, NULL, &e);
    return k < 0 && e == LF__UTF8_TRUNCATED ? 0 : k;
}

static const unsigned char REPL[3] = {0xEF, 0xBF, 0xBD}; /* U+FFFD */

/* Convert in[0..n) into out (room for 3n bytes + NUL), holding back an
 * unfinished tail unless `final`. Returns the bytes written; *tail = the
 * offset where the held-back bytes start (n when none). */
static size_t convert(const unsigned char *in, size_t n, int final, char *out, size_t *tail) {
    size_t i = 0, o = 0;
    while (i < n) {
        const int k = utf8_step(in + i, n - i);
        if (k > 0) {
            memcpy(out + o, in + i, (size_t)k);
            o += (size_t)k;
            i += (size_t)k;
        } else if (k < 0 || final) {
            memcpy(out + o, REPL, 3);
            o += 3;
            i += k < 0 ? (size_t)-k : n - i; /* at the end, the unfinished prefix is one subpart */
        } else {
            break;
        }
    }
    *tail = i;
    out[o] = 0;
    return o;
}

lf_status lf_detok_stream_create(lf_detok_stream **out, const lf_tokenizer *t) {
    if (!out) return lf_fail(LF_ERR_INVALID_ARG, "lf_detok_stream_create: out is NULL");
    *out = NULL;
    if (!t) return lf_fail(LF_ERR_INVALID_ARG, "lf_detok_stream_create: tokenizer is NULL");
    lf_detok_stream *s = lf_alloc(sizeof *s);
    if (!s) return lf_fail(LF_ERR_NOMEM, "out of memory creating a streaming detokenizer");
    s->t = t;
    s->npend = 0;
    *out = s;
    return LF_OK;
}

/* Pending bytes + `bytes`, converted; on success the stream keeps the new tail. */
static lf_status emit(lf_detok_stream *s, const char *bytes, size_t nb, int final, char **out, size_t *len) {
    const size_t n = (size_t)s->npend + nb;
    unsigned char *in = lf_alloc(n + 1);
    char *text = lf_alloc(3 * n + 1);
    if (!in || !text) {
        lf_free(in);
        lf_free(text);
        return lf_fail(LF_ERR_NOMEM, "streaming detokenizer: out of memory for %zu bytes", n);
    }
    memcpy(in, s->pend, (size_t)s->npend);
    if (nb) memcpy(in + s->npend, bytes, nb);
    size_t tail;
    *len = convert(in, n, final, text, &tail);
    s->npend = (int)(n - tail); /* <= PEND_MAX: a held-back prefix is shorter than a character */
    memcpy(s->pend, in + tail, (size_t)s->npend);
    lf_free(in);
    *out = text;
    return LF_OK;
}

lf_status lf_detok_stream_push(lf_detok_stream *s, uint32_t token, char **out, size_t *len) {
    if (out) *out = NULL;
    if (len) *len = 0;
    if (!s || !out || !len) return lf_fail(LF_ERR_INVALID_ARG, "lf_detok_stream_push: NULL argument");
    char *bytes = NULL;
    size_t nb = 0;
    lf_status st = lf_tokenizer_decode(s->t, &token, 1, &bytes, &nb);
    if (st != LF_OK) return st;
    st = emit(s, bytes, nb, 0, out, len);
    lf_free(bytes);
    return st;
}

lf_status lf_detok_stream_flush(lf_detok_stream *s, char **out, size_t *len) {
    if (out) *out = NULL;
    if (len) *len = 0;
    if (!s || !out || !len) return lf_fail(LF_ERR_INVALID_ARG, "lf_detok_stream_flush: NULL argument");
    return emit(s, NULL, 0, 1, out, len);
}

void lf_detok_stream_free(lf_detok_stream *s) { lf_free(s); }
