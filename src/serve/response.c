/*
 * Response bodies and server-sent events in OpenAI's shapes (API in
 * serve_impl.h): text_completion, chat.completion, their stream chunks, the
 * usage chunk, and the "data: ...\n\n" framing.
 *
 * Why a writer of our own instead of cJSON: the output must be exactly
 * OpenAI's key order and shapes (golden tests compare bytes), numbers must
 * read back as the doubles written (lf_json_number; cJSON keeps 15 digits),
 * and token texts are bytes that may be part of a character or hold U+0000,
 * which a NUL-terminated cJSON string cannot carry. So: a growable buffer,
 * a string writer that escapes per RFC 8259 section 7 and replaces
 * ill-formed UTF-8 with U+FFFD, and one function per object.
 *
 * Invariants: the JSON written holds no raw CR or LF (both are escaped in
 * strings, and nothing else emits them), so one object is always one SSE
 * "data:" line; every string in the output is valid UTF-8.
 *
 * References: OpenAI API reference, "The completion object", "The chat
 * completion object", "The chat completion chunk object", "Streaming";
 * the WHATWG HTML standard 9.2.6 (interpreting an event stream).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/strbuf.h"
#include "core/utf8.h"
#include "serve_impl.h"

/* ---------------------------------------------------------------- a buffer */

static void jb_num(lf__sb *b, double v) {
    char buf[LF_JSON_NUMBER_MAX];
    int n = lf_json_number(buf, sizeof buf, v); /* "null" when not finite */
    lf__sb_put(b, buf, (size_t)n);
}

static void jb_int(lf__sb *b, long long v) {
    char buf[32];
    int n = snprintf(buf, sizeof buf, "%lld", v);
    lf__sb_put(b, buf, (size_t)n);
}

/* A JSON string of the bytes s[0, n): escapes, and U+FFFD for each maximal
 * ill-formed subpart (Unicode 15 section 3.9, U+FFFD substitution). */
static void jb_str(lf__sb *b, const char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    const unsigned char *u = (const unsigned char *)s;
    lf__sb_put(b, "\"", 1);
    size_t i = 0, run = 0; /* run: start of bytes copied as they are */
    while (i < n) {
        unsigned char ch = u[i];
        if (ch >= 0x20 && ch < 0x80 && ch != '"' && ch != '\\') {
            i++;
            continue;
        }
        int k = 0;
        if (ch >= 0x80) {
            k = lf__utf8_scan(u + i, n - i, NULL, NULL);
            if (k > 0) {
                i += (size_t)k;
                continue;
            }
        }
        lf__sb_put(b, s + run, i - run);
        if (ch >= 0x80) { /* ill-formed: skip its maximal subpart (-k bytes) */
            i += (size_t)-k;
            lf__sb_puts(b, "\xef\xbf\xbd");
        } else {
            char esc[7];
            switch (ch) {
            case '"': lf__sb_put(b, "\\\"", 2); break;
            case '\\': lf__sb_put(b, "\\\\", 2); break;
            case '\b': lf__sb_put(b, "\\b", 2); break;
            case '\f': lf__sb_put(b, "\\f", 2); break;
            case '\n': lf__sb_put(b, "\\n", 2); break;
            case '\r': lf__sb_put(b, "\\r", 2); break;
            case '\t': lf__sb_put(b, "\\t", 2); break;
            default:
                esc[0] = '\\', esc[1] = 'u', esc[2] = '0', esc[3] = '0';
                esc[4] = hex[ch >> 4], esc[5] = hex[ch & 15], esc[6] = '\0';
                lf__sb_put(b, esc, 6);
            }
            i++;
        }
        run = i;
    }
    lf__sb_put(b, s + run, n - run);
    lf__sb_put(b, "\"", 1);
}

static void jb_cstr(lf__sb *b, const char *s) { jb_str(b, s ? s : "", s ? strlen(s) : 0); }

static char *jb_finish(lf__sb *b, size_t *len) {
    if (b->failed || !b->p) {
        free(b->p);
        if (len) *len = 0;
        lf_fail(LF_ERR_NOMEM, "serve: out of memory writing a response");
        return NULL;
    }
    if (len) *len = b->len;
    return b->p;
}

char *lf__serve_utf8_sanitize(const char *text, size_t len, size_t *out_len) {
    lf__sb b = {0};
    /* reuse the string writer's substitution without the escapes: write the
     * pieces between ill-formed subparts */
    const unsigned char *u = (const unsigned char *)text;
    size_t i = 0, run = 0;
    lf__sb_put(&b, "", 0);
    while (i < len) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        int k = lf__utf8_scan(u + i, len - i, NULL, NULL);
        if (k > 0) {
            i += (size_t)k;
            continue;
        }
        lf__sb_put(&b, text + run, i - run);
        i += (size_t)-k; /* the maximal subpart */
        lf__sb_puts(&b, "\xef\xbf\xbd");
        run = i;
    }
    lf__sb_put(&b, text + run, len - run);
    return jb_finish(&b, out_len);
}

/* ---------------------------------------------------------------- pieces */

static const char *finish_name(lf__serve_finish f) {
    switch (f) {
    case LF__FINISH_STOP: return "\"stop\"";
    case LF__FINISH_LENGTH: return "\"length\"";
    default: return "null";
    }
}

static void put_head(lf__sb *b, const lf__serve_meta *m, const char *object) {
    lf__sb_puts(b, "{\"id\":");
    jb_cstr(b, m->id);
    lf__sb_puts(b, ",\"object\":\"");
    lf__sb_puts(b, object);
    lf__sb_puts(b, "\",\"created\":");
    jb_int(b, (long long)m->created);
    lf__sb_puts(b, ",\"model\":");
    jb_cstr(b, m->model);
}

static void put_usage(lf__sb *b, const lf__serve_usage *u) {
    lf__sb_puts(b, "{\"prompt_tokens\":");
    jb_int(b, u->prompt_tokens);
    lf__sb_puts(b, ",\"completion_tokens\":");
    jb_int(b, u->completion_tokens);
    lf__sb_puts(b, ",\"total_tokens\":");
    jb_int(b, (long long)u->prompt_tokens + u->completion_tokens);
    lf__sb_puts(b, "}");
}

/* Completions: {"tokens":[..],"token_logprobs":[..],"top_logprobs":[{..}|null],"text_offset":[..]}.
 * A token without a log-probability (NaN) has null for both; a token text
 * that repeats inside one top dict keeps its first (most likely) entry. */
static void put_lp_completions(lf__sb *b, const lf__serve_token_lp *lp, int n) {
    lf__sb_puts(b, "{\"tokens\":[");
    for (int i = 0; i < n; i++) {
        if (i) lf__sb_puts(b, ",");
        jb_str(b, lp[i].token, lp[i].len);
    }
    lf__sb_puts(b, "],\"token_logprobs\":[");
    for (int i = 0; i < n; i++) {
        if (i) lf__sb_puts(b, ",");
        jb_num(b, lp[i].logprob);
    }
    lf__sb_puts(b, "],\"top_logprobs\":[");
    for (int i = 0; i < n; i++) {
        if (i) lf__sb_puts(b, ",");
        if (isnan(lp[i].logprob)) {
            lf__sb_puts(b, "null");
            continue;
        }
        lf__sb_puts(b, "{");
        int written = 0;
        for (int k = 0; k < lp[i].n_top; k++) {
            const lf__serve_top *t = &lp[i].top[k];
            int dup = 0;
            for (int j = 0; j < k && !dup; j++)
                dup = lp[i].top[j].len == t->len && memcmp(lp[i].top[j].token, t->token, t->len) == 0;
            if (dup) continue;
            if (written++) lf__sb_puts(b, ",");
            jb_str(b, t->token, t->len);
            lf__sb_puts(b, ":");
            jb_num(b, t->logprob);
        }
        lf__sb_puts(b, "}");
    }
    lf__sb_puts(b, "],\"text_offset\":[");
    for (int i = 0; i < n; i++) {
        if (i) lf__sb_puts(b, ",");
        jb_int(b, lp[i].text_offset);
    }
    lf__sb_puts(b, "]}");
}

static void put_bytes(lf__sb *b, const char *s, size_t n) {
    lf__sb_puts(b, "[");
    for (size_t i = 0; i < n; i++) {
        if (i) lf__sb_puts(b, ",");
        jb_int(b, (unsigned char)s[i]);
    }
    lf__sb_puts(b, "]");
}

/* Chat: {"content":[{"token","logprob","bytes","top_logprobs":[{"token","logprob","bytes"}]}]}. */
static void put_lp_chat(lf__sb *b, const lf__serve_token_lp *lp, int n) {
    lf__sb_puts(b, "{\"content\":[");
    for (int i = 0; i < n; i++) {
        if (i) lf__sb_puts(b, ",");
        lf__sb_puts(b, "{\"token\":");
        jb_str(b, lp[i].token, lp[i].len);
        lf__sb_puts(b, ",\"logprob\":");
        jb_num(b, lp[i].logprob);
        lf__sb_puts(b, ",\"bytes\":");
        put_bytes(b, lp[i].token, lp[i].len);
        lf__sb_puts(b, ",\"top_logprobs\":[");
        for (int k = 0; k < lp[i].n_top; k++) {
            const lf__serve_top *t = &lp[i].top[k];
            if (k) lf__sb_puts(b, ",");
            lf__sb_puts(b, "{\"token\":");
            jb_str(b, t->token, t->len);
            lf__sb_puts(b, ",\"logprob\":");
            jb_num(b, t->logprob);
            lf__sb_puts(b, ",\"bytes\":");
            put_bytes(b, t->token, t->len);
            lf__sb_puts(b, "}");
        }
        lf__sb_puts(b, "]}");
    }
    lf__sb_puts(b, "]}");
}

static void put_logprobs(lf__sb *b, lf__serve_api api, const lf__serve_choice *c) {
    if (!c->lp) lf__sb_puts(b, "null");
    else if (api == LF__SERVE_CHAT) put_lp_chat(b, c->lp, c->n_lp);
    else put_lp_completions(b, c->lp, c->n_lp);
}

static int args_ok(lf__serve_api api, const lf__serve_meta *m, const lf__serve_choice *c, int n) {
    if ((api != LF__SERVE_COMPLETIONS && api != LF__SERVE_CHAT) || !m || n < 0 || (n > 0 && !c)) return 0;
    for (int i = 0; i < n; i++)
        if ((c[i].len > 0 && !c[i].text) || c[i].n_lp < 0 || (c[i].n_lp > 0 && !c[i].lp)) return 0;
    return 1;
}

/* ---------------------------------------------------------------- whole answers */

char *lf__serve_response_json(lf__serve_api api, const lf__serve_meta *m, const lf__serve_choice *c, int n,
                              const lf__serve_usage *u, size_t *len) {
    if (len) *len = 0;
    if (!args_ok(api, m, c, n) || !u) {
        lf_fail(LF_ERR_INVALID_ARG, "serve: bad arguments to lf__serve_response_json");
        return NULL;
    }
    const int chat = api == LF__SERVE_CHAT;
    lf__sb b = {0};
    put_head(&b, m, chat ? "chat.completion" : "text_completion");
    lf__sb_puts(&b, ",\"choices\":[");
    for (int i = 0; i < n; i++) {
        if (i) lf__sb_puts(&b, ",");
        if (chat) {
            lf__sb_puts(&b, "{\"index\":");
            jb_int(&b, c[i].index);
            lf__sb_puts(&b, ",\"message\":{\"role\":\"assistant\",\"content\":");
            jb_str(&b, c[i].text ? c[i].text : "", c[i].len);
            lf__sb_puts(&b, "},\"logprobs\":");
            put_logprobs(&b, api, &c[i]);
        } else {
            lf__sb_puts(&b, "{\"text\":");
            jb_str(&b, c[i].text ? c[i].text : "", c[i].len);
            lf__sb_puts(&b, ",\"index\":");
            jb_int(&b, c[i].index);
            lf__sb_puts(&b, ",\"logprobs\":");
            put_logprobs(&b, api, &c[i]);
        }
        lf__sb_puts(&b, ",\"finish_reason\":");
        lf__sb_puts(&b, finish_name(c[i].finish));
        lf__sb_puts(&b, "}");
    }
    lf__sb_puts(&b, "],\"usage\":");
    put_usage(&b, u);
    lf__sb_puts(&b, "}");
    return jb_finish(&b, len);
}

char *lf__serve_chunk_json(lf__serve_api api, const lf__serve_meta *m, const lf__serve_choice *c, int n,
                           int include_usage, const lf__serve_usage *u, size_t *len) {
    if (len) *len = 0;
    if (!args_ok(api, m, c, n) || (u && n > 0)) {
        lf_fail(LF_ERR_INVALID_ARG, "serve: bad arguments to lf__serve_chunk_json (a usage chunk has no choices)");
        return NULL;
    }
    const int chat = api == LF__SERVE_CHAT;
    lf__sb b = {0};
    put_head(&b, m, chat ? "chat.completion.chunk" : "text_completion");
    lf__sb_puts(&b, ",\"choices\":[");
    for (int i = 0; i < n; i++) {
        if (i) lf__sb_puts(&b, ",");
        if (chat) {
            lf__sb_puts(&b, "{\"index\":");
            jb_int(&b, c[i].index);
            lf__sb_puts(&b, ",\"delta\":");
            if (c[i].first) {
                lf__sb_puts(&b, "{\"role\":\"assistant\",\"content\":");
                jb_str(&b, c[i].text ? c[i].text : "", c[i].len);
                lf__sb_puts(&b, "}");
            } else if (c[i].len > 0 || c[i].finish == LF__FINISH_NONE) {
                lf__sb_puts(&b, "{\"content\":");
                jb_str(&b, c[i].text ? c[i].text : "", c[i].len);
                lf__sb_puts(&b, "}");
            } else {
                lf__sb_puts(&b, "{}");
            }
            lf__sb_puts(&b, ",\"logprobs\":");
            put_logprobs(&b, api, &c[i]);
        } else {
            lf__sb_puts(&b, "{\"text\":");
            jb_str(&b, c[i].text ? c[i].text : "", c[i].len);
            lf__sb_puts(&b, ",\"index\":");
            jb_int(&b, c[i].index);
            lf__sb_puts(&b, ",\"logprobs\":");
            put_logprobs(&b, api, &c[i]);
        }
        lf__sb_puts(&b, ",\"finish_reason\":");
        lf__sb_puts(&b, finish_name(c[i].finish));
        lf__sb_puts(&b, "}");
    }
    lf__sb_puts(&b, "]");
    if (u) {
        lf__sb_puts(&b, ",\"usage\":");
        put_usage(&b, u);
    } else if (include_usage) {
        lf__sb_puts(&b, ",\"usage\":null");
    }
    lf__sb_puts(&b, "}");
    return jb_finish(&b, len);
}

char *lf__serve_sse_event(const char *json, size_t json_len, size_t *len) {
    if (len) *len = 0;
    if (!json || memchr(json, '\n', json_len) || memchr(json, '\r', json_len)) {
        lf_fail(LF_ERR_INVALID_ARG, "serve: an SSE data line cannot hold CR or LF");
        return NULL;
    }
    lf__sb b = {0};
    lf__sb_put(&b, "data: ", 6);
    lf__sb_put(&b, json, json_len);
    lf__sb_put(&b, "\n\n", 2);
    return jb_finish(&b, len);
}
