/*
 * Immediate replies of the HTTP layer (API in http.h; the records in
 * http_impl.h): lf__http_reply from a handler, the layer's own error
 * responses (through the user's error_body hook), and the helpers the other
 * files share (owned header copies, reason phrases).
 *
 * Invariant: a request is marked answered only once MHD took the response;
 * after a failed reply it is still unanswered (the access handler then
 * answers 500, see server.c).
 */
#include "http/http_impl.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- small helpers */

char *lf__http_dup_str(const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s);
    char *p = malloc(n + 1);
    if (p) memcpy(p, s, n + 1);
    return p;
}

const char *lf__http_reason(int status) {
    switch (status) {
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    default: return "";
    }
}

char *lf__http_error_body(lf__http_server *srv, int status, const char *msg, const char **ctype, size_t *len) {
    char *b = NULL;
    *ctype = "text/plain; charset=utf-8";
    if (srv->o.error_body) b = srv->o.error_body(status, msg, ctype, srv->o.user);
    if (!b) {
        *ctype = "text/plain; charset=utf-8";
        size_t n = strlen(msg);
        b = malloc(n + 2);
        if (!b) return NULL;
        memcpy(b, msg, n);
        b[n] = '\n';
        b[n + 1] = '\0';
    }
    *len = strlen(b);
    return b;
}

void lf__http_free_headers(owned_header *h, int n) {
    for (int i = 0; i < n; i++) {
        free(h[i].name);
        free(h[i].value);
    }
    free(h);
}

lf_status lf__http_copy_headers(const lf__http_header *h, int n, owned_header **out) {
    *out = NULL;
    if (n < 0 || (n > 0 && !h)) return lf_fail(LF_ERR_INVALID_ARG, "http: %d headers given with a NULL array", n);
    if (n == 0) return LF_OK;
    owned_header *o = calloc((size_t)n, sizeof *o);
    if (!o) return lf_fail(LF_ERR_NOMEM, "http: out of memory copying %d headers", n);
    for (int i = 0; i < n; i++) {
        if (!h[i].name || !h[i].value) {
            lf__http_free_headers(o, n);
            return lf_fail(LF_ERR_INVALID_ARG, "http: header %d has a NULL name or value", i);
        }
        o[i].name = lf__http_dup_str(h[i].name);
        o[i].value = lf__http_dup_str(h[i].value);
        if (!o[i].name || !o[i].value) {
            lf__http_free_headers(o, n);
            return lf_fail(LF_ERR_NOMEM, "http: out of memory copying header '%s'", h[i].name);
        }
    }
    *out = o;
    return LF_OK;
}

int lf__http_valid_status(int status) { return status >= 100 && status <= 599; }

int lf__http_add_headers(struct MHD_Response *resp, const char *ctype, const owned_header *oh, int n_oh,
                         const lf__http_header *h, int n_h) {
    if (ctype && MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype) != MHD_YES) return 0;
    for (int i = 0; i < n_oh; i++)
        if (MHD_add_response_header(resp, oh[i].name, oh[i].value) != MHD_YES) return 0;
    for (int i = 0; i < n_h; i++)
        if (!h[i].name || !h[i].value || MHD_add_response_header(resp, h[i].name, h[i].value) != MHD_YES) return 0;
    return 1;
}

/* ---------------------------------------------------------------- replies (MHD worker) */

void lf__http_mark_handling(lf__http_request *r) {
    lf__http_server *srv = r->srv;
    pthread_mutex_lock(&srv->mu);
    if (r->hc) r->hc->state = CONN_HANDLING;
    pthread_mutex_unlock(&srv->mu);
}

static lf_mhd_result queue_buffer(lf__http_request *r, int status, const char *ctype, const owned_header *oh, int n_oh,
                                  const lf__http_header *h, int n_h, void *body, size_t len,
                                  enum MHD_ResponseMemoryMode mode) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, mode);
    if (!resp) {
        if (mode == MHD_RESPMEM_MUST_FREE) free(body);
        return MHD_NO;
    }
    if (!lf__http_add_headers(resp, ctype, oh, n_oh, h, n_h)) {
        MHD_destroy_response(resp);
        return MHD_NO;
    }
    lf_mhd_result ret = MHD_queue_response(r->mc, (unsigned int)status, resp);
    MHD_destroy_response(resp);
    if (ret == MHD_YES) {
        r->answered = 1;
        lf__http_mark_handling(r);
    }
    return ret;
}

/* A 400 closes the connection: a request the server could not make sense
 * of may have been framed differently by the client (or a proxy) than by
 * MHD, so nothing after it on the connection is read as another request.
 * Other errors (404, 429, ...) keep it open. */
static const lf__http_header close_hdr = {"Connection", "close"};
#define CLOSES(status) ((status) == 400)

lf_mhd_result lf__http_reply_error(lf__http_request *r, int status, const char *msg) {
    const char *ctype;
    size_t len;
    char *b = lf__http_error_body(r->srv, status, msg, &ctype, &len);
    if (!b) return MHD_NO;
    return queue_buffer(r, status, ctype, NULL, 0, &close_hdr, CLOSES(status), b, len, MHD_RESPMEM_MUST_FREE);
}

lf_mhd_result lf__http_reply_error_close(lf__http_request *r, int status, const char *msg) {
    const char *ctype;
    size_t len;
    char *b = lf__http_error_body(r->srv, status, msg, &ctype, &len);
    if (!b) return MHD_NO;
    /* MHD closes the connection after a response carrying "Connection: close" */
    return queue_buffer(r, status, ctype, NULL, 0, &close_hdr, 1, b, len, MHD_RESPMEM_MUST_FREE);
}

lf_status lf__http_reply(lf__http_request *r, int status, const char *content_type, const lf__http_header *headers,
                         int n_headers, const void *body, size_t len) {
    if (!r) return lf_fail(LF_ERR_INVALID_ARG, "http: reply to a NULL request");
    if (r->answered) return lf_fail(LF_ERR_INVALID_ARG, "http: request '%s' is already answered", r->uri);
    if (!lf__http_valid_status(status))
        return lf_fail(LF_ERR_INVALID_ARG, "http: status %d is outside 100..599", status);
    if (n_headers < 0 || (n_headers > 0 && !headers))
        return lf_fail(LF_ERR_INVALID_ARG, "http: %d headers given with a NULL array", n_headers);
    if (len > 0 && !body) return lf_fail(LF_ERR_INVALID_ARG, "http: a %zu-byte body given as NULL", len);
    void *copy = malloc(len ? len : 1);
    if (!copy) return lf_fail(LF_ERR_NOMEM, "http: out of memory for a %zu-byte reply", len);
    if (len) memcpy(copy, body, len);
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, copy, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(copy);
        return lf_fail(LF_ERR_NOMEM, "http: out of memory for a %zu-byte reply", len);
    }
    if (!lf__http_add_headers(resp, content_type, NULL, 0, headers, n_headers) ||
        (CLOSES(status) && !lf__http_add_headers(resp, NULL, NULL, 0, &close_hdr, 1))) {
        MHD_destroy_response(resp);
        return lf_fail(LF_ERR_INVALID_ARG, "http: libmicrohttpd refused a response header (a name or value with "
                                           "CR/LF, or one it sets itself)");
    }
    lf_mhd_result ret = MHD_queue_response(r->mc, (unsigned int)status, resp);
    MHD_destroy_response(resp);
    if (ret != MHD_YES) return lf_fail(LF_ERR_INTERNAL, "http: libmicrohttpd refused to queue the reply");
    r->answered = 1;
    lf__http_mark_handling(r);
    return LF_OK;
}

lf_status lf__http_reply_text(lf__http_request *r, int status, const char *text) {
    return lf__http_reply(r, status, "text/plain; charset=utf-8", NULL, 0, text, text ? strlen(text) : 0);
}
