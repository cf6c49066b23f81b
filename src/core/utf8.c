/*
 * Strict UTF-8 (RFC 3629, Unicode 15 table 3-7 "well-formed byte sequences"),
 * the one decoder every module uses (API in utf8.h; lf_utf8_validate in
 * llmforge/core.h).
 *
 * Accepted sequences, and nothing else:
 *   U+0000..U+007F     00..7F
 *   U+0080..U+07FF     C2..DF 80..BF
 *   U+0800..U+0FFF     E0 A0..BF 80..BF
 *   U+1000..U+CFFF     E1..EC 80..BF 80..BF
 *   U+D000..U+D7FF     ED 80..9F 80..BF          (no surrogates)
 *   U+E000..U+FFFF     EE..EF 80..BF 80..BF
 *   U+10000..U+3FFFF   F0 90..BF 80..BF 80..BF
 *   U+40000..U+FFFFF   F1..F3 80..BF 80..BF 80..BF
 *   U+100000..U+10FFFF F4 80..8F 80..BF 80..BF
 * so overlong forms (C0, C1, E0 80.., F0 80..), surrogates and code points
 * above U+10FFFF are rejected, as are truncated sequences and stray
 * continuation bytes. Python's str.decode('utf-8') agrees, which is what
 * nanoGPT's prepare.py relies on.
 *
 * Invariant: the bytes of an ill-formed sequence are examined in order, so
 * the first byte that leaves the table above ends the maximal subpart; the
 * replacement policies (U+FFFD per maximal subpart, as Python's
 * errors="replace" and the WHATWG decoder do) follow from lf__utf8_scan's
 * negative return alone.
 */
#include <stdio.h>
#include <string.h>

#include "core/utf8.h"
#include "llmforge/core.h"

int lf__utf8_scan(const unsigned char *s, size_t n, uint32_t *cp, lf__utf8_err *err) {
    lf__utf8_err e;
    unsigned char b0 = s[0];
    if (b0 < 0x80) {
        if (cp) *cp = b0;
        return 1;
    }
    int need;
    uint32_t c;
    unsigned char lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (b0 < 0xC2) {
        e = b0 < 0xC0 ? LF__UTF8_CONTINUATION : LF__UTF8_OVERLONG;
        goto bad1;
    } else if (b0 < 0xE0) {
        need = 1;
        c = b0 & 0x1F;
    } else if (b0 < 0xF0) {
        need = 2;
        c = b0 & 0x0F;
        if (b0 == 0xE0) lo = 0xA0;
        if (b0 == 0xED) hi = 0x9F;
    } else if (b0 < 0xF5) {
        need = 3;
        c = b0 & 0x07;
        if (b0 == 0xF0) lo = 0x90;
        if (b0 == 0xF4) hi = 0x8F;
    } else {
        e = LF__UTF8_NEVER;
        goto bad1;
    }
    for (int k = 1; k <= need; k++) {
        if ((size_t)k >= n) {
            if (err) *err = LF__UTF8_TRUNCATED;
            return -(int)n;
        }
        unsigned char b = s[k];
        unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
        if (b < l || b > h) {
            if (b >= 0x80 && b <= 0xBF) /* a continuation byte, but out of range */
                e = b0 == 0xED ? LF__UTF8_SURROGATE : (b0 == 0xF4 ? LF__UTF8_ABOVE_MAX : LF__UTF8_OVERLONG);
            else e = LF__UTF8_MISSING;
            if (err) *err = e;
            return -k;
        }
        c = (c << 6) | (b & 0x3F);
    }
    if (cp) *cp = c;
    return need + 1;
bad1:
    if (err) *err = e;
    return -1;
}

const char *lf__utf8_why(lf__utf8_err e) {
    switch (e) {
    case LF__UTF8_OK: return "valid";
    case LF__UTF8_CONTINUATION: return "unexpected continuation byte";
    case LF__UTF8_OVERLONG: return "overlong encoding";
    case LF__UTF8_NEVER: return "byte never valid in UTF-8";
    case LF__UTF8_SURROGATE: return "surrogate code point";
    case LF__UTF8_ABOVE_MAX: return "code point above U+10FFFF";
    case LF__UTF8_MISSING: return "incomplete sequence (a continuation byte is missing)";
    case LF__UTF8_TRUNCATED: return "truncated sequence at end of input";
    }
    return "invalid";
}

int lf__utf8_decode(const unsigned char *s, size_t len, uint32_t *cp, const char **why) {
    lf__utf8_err e;
    int k = lf__utf8_scan(s, len, cp, &e);
    if (k > 0) return k;
    *why = lf__utf8_why(e);
    return 0;
}

size_t lf__utf8_valid_prefix(const unsigned char *s, size_t len) {
    size_t i = 0;
    while (i < len) {
        /* ASCII runs eight bytes at a time */
        while (i + 8 <= len) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ull) break;
            i += 8;
        }
        while (i < len && s[i] < 0x80) i++;
        if (i >= len) break;
        int k = lf__utf8_scan(s + i, len - i, NULL, NULL);
        if (k < 0) return i;
        i += (size_t)k;
    }
    return len;
}

size_t lf__utf8_check(const unsigned char *s, size_t n, const char **why) {
    size_t at = lf__utf8_valid_prefix(s, n);
    if (at < n) {
        lf__utf8_err e;
        (void)lf__utf8_scan(s + at, n - at, NULL, &e);
        *why = lf__utf8_why(e);
    }
    return at;
}

const char *lf__utf8_why_short(lf__utf8_err e) {
    if (e == LF__UTF8_TRUNCATED) return "truncated sequence";
    if (e == LF__UTF8_MISSING) return "invalid continuation byte";
    return lf__utf8_why(e);
}

/* The public validator keeps the eval metrics' wording (llmforge/eval.h
 * documented it first): "truncated sequence", "invalid continuation byte". */
lf_status lf_utf8_validate(const char *s, size_t len, const char *what, size_t *bad_offset) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = lf__utf8_valid_prefix(u, len);
    if (i == len) return LF_OK;
    lf__utf8_err e;
    (void)lf__utf8_scan(u + i, len - i, NULL, &e);
    if (bad_offset) *bad_offset = i;
    return lf_fail(LF_ERR_FORMAT, "%s: invalid UTF-8 at byte %zu (%s)", what ? what : "text", i, lf__utf8_why_short(e));
}

int lf__utf8_encode(uint32_t cp, unsigned char out[4]) {
    if (cp < 0x80) {
        out[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (unsigned char)(0xC0 | (cp >> 6));
        out[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp >= 0xD800 && cp <= 0xDFFF) return 0;
    if (cp < 0x10000) {
        out[0] = (unsigned char)(0xE0 | (cp >> 12));
        out[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    if (cp <= 0x10FFFF) {
        out[0] = (unsigned char)(0xF0 | (cp >> 18));
        out[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
        out[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        out[3] = (unsigned char)(0x80 | (cp & 0x3F));
        return 4;
    }
    return 0;
}

void lf__utf8_describe(uint32_t cp, char *buf, size_t size) {
    static const struct {
        uint32_t cp;
        const char *esc;
    } escapes[] = {
        {0x00, "\\0"}, {0x07, "\\a"}, {0x08, "\\b"}, {0x09, "\\t"}, {0x0A, "\\n"},
        {0x0B, "\\v"}, {0x0C, "\\f"}, {0x0D, "\\r"}, {0x1B, "\\e"},
    };
    for (size_t i = 0; i < sizeof escapes / sizeof escapes[0]; i++) {
        if (escapes[i].cp == cp) {
            snprintf(buf, size, "U+%04X '%s'", (unsigned)cp, escapes[i].esc);
            return;
        }
    }
    unsigned char u[5] = {0};
    int n = lf__utf8_encode(cp, u);
    /* C0 and C1 controls and DEL have no printable form */
    if (n == 0 || cp < 0x20 || (cp >= 0x7F && cp <= 0x9F)) {
        snprintf(buf, size, "U+%04X", (unsigned)cp);
        return;
    }
    u[n] = 0;
    snprintf(buf, size, "U+%04X '%s'", (unsigned)cp, (const char *)u);
}
