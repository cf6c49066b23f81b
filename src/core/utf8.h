/*
 * lf__utf8: the one UTF-8 decoder of llmforge (utf8.c). Internal to
 * llmforge (lf_core), not public API; the public face is lf_utf8_validate
 * (llmforge/core.h).
 *
 * Strict UTF-8 (RFC 3629, Unicode 15 table 3-7): overlong forms, surrogates,
 * code points above U+10FFFF, truncated sequences and stray continuation
 * bytes are ill-formed. Every user decodes through lf__utf8_scan (or a
 * wrapper below) and keeps its own policy for what an ill-formed sequence
 * means there: an error naming its byte offset (tokenizers, readers, eval
 * metrics, safetensors), U+FFFD per maximal subpart (serve, the streaming
 * detokenizer), \xNN escapes (lf_str_escape).
 */
#ifndef LF_CORE_UTF8_H
#define LF_CORE_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Why a sequence is ill-formed. */
typedef enum lf__utf8_err {
    LF__UTF8_OK = 0,
    LF__UTF8_CONTINUATION, /* a continuation byte (80..BF) where a character starts */
    LF__UTF8_OVERLONG,     /* C0, C1, or E0/F0 followed by too small a byte */
    LF__UTF8_NEVER,        /* F5..FF: never in UTF-8 */
    LF__UTF8_SURROGATE,    /* ED A0..BF: U+D800..U+DFFF */
    LF__UTF8_ABOVE_MAX,    /* F4 90..BF: above U+10FFFF */
    LF__UTF8_MISSING,      /* a byte that is no continuation byte where one must be */
    LF__UTF8_TRUNCATED,    /* the input ends inside a well-formed prefix */
} lf__utf8_err;

/* The character at s[0] (n >= 1 bytes there). Returns k in 1..4, a complete
 * well-formed character of k bytes (*cp set); or -m (m >= 1), an ill-formed
 * sequence whose maximal subpart (Unicode 15 section 3.9: the longest prefix
 * of a well-formed sequence, or the first byte) is m bytes, *err saying why;
 * with LF__UTF8_TRUNCATED, m is n (the whole rest of the input is a
 * well-formed prefix). cp and err may be NULL. Never reads past s[n-1]. */
int lf__utf8_scan(const unsigned char *s, size_t n, uint32_t *cp, lf__utf8_err *err);

/* A fixed description of the defect: "unexpected continuation byte",
 * "overlong encoding", "byte never valid in UTF-8", "surrogate code point",
 * "code point above U+10FFFF", "incomplete sequence (a continuation byte is
 * missing)", "truncated sequence at end of input". */
const char *lf__utf8_why(lf__utf8_err e);

/* The same in the eval metrics' shorter wording (lf_utf8_validate's, and
 * their messages'): "truncated sequence" and "invalid continuation byte" for
 * the last two; the others as lf__utf8_why. */
const char *lf__utf8_why_short(lf__utf8_err e);

/* lf__utf8_scan for callers that reject: returns the sequence length 1..4
 * and sets *cp, or returns 0 and sets *why (lf__utf8_why). len >= 1. */
int lf__utf8_decode(const unsigned char *s, size_t len, uint32_t *cp, const char **why);

/* Length of the longest valid UTF-8 prefix of s[0, len) (ASCII runs are
 * checked eight bytes at a time). */
size_t lf__utf8_valid_prefix(const unsigned char *s, size_t len);

/* Byte offset of the first ill-formed sequence in s[0, n), *why saying why;
 * n (why untouched) when s[0, n) is valid. */
size_t lf__utf8_check(const unsigned char *s, size_t n, const char **why);

/* Encode a valid code point; returns its length 1..4 (0 for a surrogate or
 * a code point above U+10FFFF, out untouched). */
int lf__utf8_encode(uint32_t cp, unsigned char out[4]);

/* "U+00E9 'é'", "U+000A '\n'", "U+0085" (controls without a printable form
 * are shown by number only, or as a C escape when they have one). */
void lf__utf8_describe(uint32_t cp, char *buf, size_t size);

/* For text already known to be valid: 1 for a continuation byte; the length
 * of the character a lead byte starts (1..4). */
static inline int lf__utf8_is_cont(unsigned char b) { return (b & 0xC0) == 0x80; }
static inline size_t lf__utf8_lead_len(unsigned char b) { return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4; }

#endif
