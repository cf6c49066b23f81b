/*
 * Strict UTF-8 (RFC 3629, Unicode 15 table 3-7 "well-formed byte sequences").
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
 */
#include <stdio.h>
#include "data_impl.h"

int lf__utf8_decode(const unsigned char *s, size_t len, uint32_t *cp, const char **why) {
    unsigned char b0 = s[0];
    if (b0 < 0x80) {
        *cp = b0;
        return 1;
    }
    int need;
    uint32_t c;
    unsigned char lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (b0 < 0xC2) {
        *why = b0 < 0xC0 ? "unexpected continuation byte" : "overlong encoding";
        return 0;
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
        *why = "byte never valid in UTF-8";
        return 0;
    }
    for (int k = 1; k <= need; k++) {
        if ((size_t)k >= len) {
            *why = "truncated sequence at end of input";
            return 0;
        }
        unsigned char b = s[k];
        unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
        if (b < l || b > h) {
            if (b >= 0x80 && b <= 0xBF) /* a continuation byte, but out of range */
                *why = b0 == 0xED ? "surrogate code point" : (b0 == 0xF4 ? "code point above U+10FFFF" : "overlong encoding");
            else
                *why = "incomplete sequence (a continuation byte is missing)";
            return 0;
        }
        c = (c << 6) | (b & 0x3F);
    }
    *cp = c;
    return need + 1;
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
    static const struct { uint32_t cp; const char *esc; } escapes[] = {
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
