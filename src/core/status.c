/*
 * Status codes, per-thread error messages and leveled logging.
 * The message buffer is thread-local so library calls on different threads
 * never see each other's errors; handles copy it when they keep it longer.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
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
    }
    return "LF_ERR_?: unknown status";
}

const char *lf_last_error(void) { return g_errmsg; }

lf_status lf_fail(lf_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_errmsg, sizeof g_errmsg, fmt, ap);
    va_end(ap);
    return s;
}

void lf_error_prefix(const char *fmt, ...) {
    char prefix[LF_ERRMSG_MAX], old[LF_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, g_errmsg, sizeof old);
    /* assemble by hand: prefix, ": ", old message, truncated to the buffer */
    size_t np = strnlen(prefix, sizeof prefix), no = strnlen(old, sizeof old), at = 0;
    for (size_t i = 0; i < np && at + 1 < sizeof g_errmsg; i++) g_errmsg[at++] = prefix[i];
    for (size_t i = 0; i < 2 && at + 1 < sizeof g_errmsg; i++) g_errmsg[at++] = ": "[i];
    for (size_t i = 0; i < no && at + 1 < sizeof g_errmsg; i++) g_errmsg[at++] = old[i];
    g_errmsg[at] = 0;
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
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    g_log_fn(level, buf, g_log_user);
}
