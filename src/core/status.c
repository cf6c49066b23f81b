/*
 * Status codes, per-thread error messages and leveled logging.
 * The message buffer is thread-local so library calls on different threads
 * never see each other's errors; handles copy it when they keep it longer.
 *
 * Every message (lf_fail, lf_error_prefix, lf_log) is made valid, printable
 * UTF-8 on its way in (lf_str_escape): names taken from files (Parquet
 * columns, JSONL keys, tensor names, configuration keys) reach messages
 * through printf formats all over the library, and a corrupt file must not
 * put raw bytes into a terminal, a log.jsonl record or an HTTP response.
 * Doing it here, once, covers every call site, including the ones written
 * later. Invalid bytes and control characters become \xNN (so a byte that
 * was in the file can still be read off the message); valid multi-byte
 * characters pass through unchanged.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "core/utf8.h"
#include "llmforge/core.h"

#define LF_ERRMSG_MAX 1024
static _Thread_local char g_errmsg[LF_ERRMSG_MAX];

const char *lf_status_str(lf_status s) {
    switch (s) {
    case LF_OK: return "LF_OK: success";
    case LF_ERR_INVALID_ARG: return "LF_ERR_INVALID_ARG: invalid argument";
    case LF_ERR_NOMEM: return "LF_ERR_NOMEM: out of memory";
    case LF_ERR_IO: return "LF_ERR_IO: input/output error";
    case LF_ERR_FORMAT: return "LF_ERR_FORMAT: malformed file";
    case LF_ERR_CHECKSUM: return "LF_ERR_CHECKSUM: checksum mismatch";
    case LF_ERR_CONFIG: return "LF_ERR_CONFIG: bad configuration";
    case LF_ERR_MISMATCH: return "LF_ERR_MISMATCH: mismatch";
    case LF_ERR_UNSUPPORTED: return "LF_ERR_UNSUPPORTED: unsupported";
    case LF_ERR_RANGE: return "LF_ERR_RANGE: value out of range";
    case LF_ERR_NOT_FOUND: return "LF_ERR_NOT_FOUND: not found";
    case LF_ERR_NUMERIC: return "LF_ERR_NUMERIC: non-finite value";
    case LF_ERR_INTERNAL: return "LF_ERR_INTERNAL: internal error";
    case LF_ERR_TIMEOUT: return "LF_ERR_TIMEOUT: timed out";
    case LF_ERR_DEVICE: return "LF_ERR_DEVICE: backend operation failed";
    case LF_ERR_BUSY: return "LF_ERR_BUSY: at capacity, retry later";
    case LF_ERR_PREEMPTED: return "LF_ERR_PREEMPTED: stopped on request after saving; resume to continue";
    }
    return "LF_ERR_?: unknown status";
}

const char *lf_last_error(void) { return g_errmsg; }

/* Length of the valid UTF-8 sequence at s, 0 when the bytes there are not one. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
    int k = lf__utf8_scan(s, n, NULL, NULL);
    return k > 0 ? (size_t)k : 0;
}

size_t lf_str_escape_n(char *out, size_t cap, const char *s, size_t len) {
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s;
    size_t at = 0, i = 0;
    if (!out || cap == 0) return 0;
    while (i < len) {
        size_t k = utf8_seq(p + i, len - i);
        /* C0 controls, DEL and C1 controls (U+0080..U+009F) are escaped too */
        int ctl = k == 1 ? (p[i] < 0x20 || p[i] == 0x7f) : (k == 2 && p[i] == 0xc2 && p[i + 1] < 0xa0);
        if (k == 0 || ctl) {
            size_t nb = k ? k : 1; /* an invalid byte alone; a control character whole */
            if (at + 4 * nb >= cap) break;
            for (size_t j = 0; j < nb; j++) {
                out[at++] = '\\';
                out[at++] = 'x';
                out[at++] = hex[p[i + j] >> 4];
                out[at++] = hex[p[i + j] & 15];
            }
            i += nb;
        } else {
            if (at + k >= cap) break;
            for (size_t j = 0; j < k; j++) out[at++] = (char)p[i + j];
            i += k;
        }
    }
    out[at] = 0;
    return at;
}

size_t lf_str_escape(char *out, size_t cap, const char *s) { return lf_str_escape_n(out, cap, s, s ? strlen(s) : 0); }

/* The message in raw (len bytes) made safe into dst (the thread's buffer). */
static void set_message(char *dst, size_t cap, const char *raw, size_t len) { lf_str_escape_n(dst, cap, raw, len); }

lf_status lf_fail(lf_status s, const char *fmt, ...) {
    char raw[LF_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    size_t len = n < 0 ? 0 : (size_t)n < sizeof raw ? (size_t)n : sizeof raw - 1;
    set_message(g_errmsg, sizeof g_errmsg, raw, len);
    return s;
}

void lf_error_prefix(const char *fmt, ...) {
    char prefix[LF_ERRMSG_MAX], raw[LF_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    /* assemble by hand: prefix, ": ", old message (already safe), truncated to the buffer */
    size_t np = strnlen(prefix, sizeof prefix), no = strnlen(g_errmsg, sizeof g_errmsg), at = 0;
    for (size_t i = 0; i < np && at + 1 < sizeof raw; i++) raw[at++] = prefix[i];
    for (size_t i = 0; i < 2 && at + 1 < sizeof raw; i++) raw[at++] = ": "[i];
    for (size_t i = 0; i < no && at + 1 < sizeof raw; i++) raw[at++] = g_errmsg[i];
    raw[at] = 0;
    set_message(g_errmsg, sizeof g_errmsg, raw, at);
}

/* ---------------------------------------------------------------- logging */
static lf_log_fn g_log_fn;
static void *g_log_user;
static lf_log_level g_log_min = LF_LOG_INFO;

void lf_log_set_callback(lf_log_fn fn, void *user) {
    g_log_fn = fn;
    g_log_user = user;
}

void lf_log_set_level(lf_log_level min_level) { g_log_min = min_level; }

void lf_log(lf_log_level level, const char *fmt, ...) {
    if (!g_log_fn || level < g_log_min) return;
    char raw[2048], buf[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    size_t len = n < 0 ? 0 : (size_t)n < sizeof raw ? (size_t)n : sizeof raw - 1;
    lf_str_escape_n(buf, sizeof buf, raw, len);
    g_log_fn(level, buf, g_log_user);
}
