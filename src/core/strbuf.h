/*
 * lf__sb: a growable, NUL-terminated text buffer with a sticky failure flag
 * (strbuf.c). Internal to llmforge (lf_core), not public API.
 * Zero-initialise it (`lf__sb b = {0};`), append, check `failed` once, then
 * take `p` (caller frees, or lf__sb_free).
 */
#ifndef LF_CORE_STRBUF_H
#define LF_CORE_STRBUF_H

#include <stddef.h>
#include "llmforge/core.h"

/* A growable text buffer (strbuf.c).
 * Appends after a failure (allocation, or the cap) are ignored and `failed`
 * stays set; p is NUL-terminated whenever it is not NULL. */
typedef struct lf__sb {
    char *p;
    size_t len, cap;
    size_t limit; /* 0: 1 GiB */
    int failed;
} lf__sb;

void lf__sb_put(lf__sb *b, const void *s, size_t n);
void lf__sb_puts(lf__sb *b, const char *s);
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
void lf__sb_printf(lf__sb *b, const char *fmt, ...);
/* s as the body of a JSON string (quotes, backslashes, control bytes escaped). */
void lf__sb_json_str(lf__sb *b, const char *s);
/* s with & < > " ' as HTML entities (for text and attribute values). */
void lf__sb_html(lf__sb *b, const char *s);
/* A number as JSON (lf_json_number: null when not finite). */
void lf__sb_json_num(lf__sb *b, double v);
void lf__sb_free(lf__sb *b);

#endif
