/*
 * A growable text buffer (strbuf.h): the one every text and JSON writer of
 * llmforge appends to (the dashboard, the report, the Prometheus page, the
 * server's responses, safetensors headers, task prompts, pattern
 * translation). Why ourselves: C has no such type, and each of those had
 * grown its own copy, some of which cut a long formatted piece at a fixed
 * stack buffer.
 *
 * Invariants: p is NUL-terminated whenever it is not NULL; after the first
 * failure (allocation, or the byte limit) every append is ignored and
 * `failed` stays set, so a writer checks once, at the end.
 */
#include "core/strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static void sb_reserve(lf__sb *b, size_t extra) {
    if (b->failed) return;
    size_t limit = b->limit ? b->limit : (size_t)1 << 30;
    if (b->len + extra + 1 <= b->cap) return;
    size_t need = b->len + extra + 1;
    if (need > limit || need < b->len) {
        b->failed = 1;
        return;
    }
    size_t ncap = b->cap ? b->cap : 4096;
    while (ncap < need) ncap *= 2;
    if (ncap > limit) ncap = limit;
    char *np = realloc(b->p, ncap);
    if (!np) {
        b->failed = 1;
        return;
    }
    b->p = np;
    b->cap = ncap;
}

void lf__sb_put(lf__sb *b, const void *s, size_t n) {
    sb_reserve(b, n);
    if (b->failed) return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void lf__sb_puts(lf__sb *b, const char *s) { lf__sb_put(b, s, strlen(s)); }

void lf__sb_printf(lf__sb *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = 1;
        return;
    }
    if ((size_t)n < sizeof tmp) {
        lf__sb_put(b, tmp, (size_t)n);
        return;
    }
    sb_reserve(b, (size_t)n);
    if (b->failed) return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void lf__sb_json_str(lf__sb *b, const char *s) {
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') {
            char e[2] = {'\\', (char)*c};
            lf__sb_put(b, e, 2);
        } else if (*c < 0x20) {
            lf__sb_printf(b, "\\u%04x", *c);
        } else {
            lf__sb_put(b, c, 1);
        }
    }
}

void lf__sb_html(lf__sb *b, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '&': lf__sb_puts(b, "&amp;"); break;
        case '<': lf__sb_puts(b, "&lt;"); break;
        case '>': lf__sb_puts(b, "&gt;"); break;
        case '"': lf__sb_puts(b, "&quot;"); break;
        case '\'': lf__sb_puts(b, "&#39;"); break;
        default: lf__sb_put(b, s, 1); break;
        }
    }
}

void lf__sb_json_num(lf__sb *b, double v) {
    char buf[LF_JSON_NUMBER_MAX];
    lf_json_number(buf, sizeof buf, v);
    lf__sb_puts(b, buf);
}

void lf__sb_free(lf__sb *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}
