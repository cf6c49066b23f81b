/*
 * The HTTP layer (src/obs/http.h): libmicrohttpd with a request deadline, a
 * connection cap that drops the oldest idle connection, a worker pool, body
 * caps, and responses produced on other threads (deferred replies, streams).
 * Why each of these exists, and the connection life cycle, are in http.h.
 *
 * How it is put together:
 *   - MHD runs MHD_OPTION_THREAD_POOL_SIZE workers (epoll). Our callbacks:
 *     NOTIFY_CONNECTION (a connection record, `hconn`, per socket: its fd,
 *     its state and the time its current deadline started), URI_LOG (a
 *     request record, `lf__http_request`, holding the raw URI so the query
 *     string survives), the access handler (body accumulation, the user's
 *     handlers, deferral), NOTIFY_COMPLETED (the request record is freed, the
 *     connection goes back to RECEIVING).
 *   - MHD's own connection limit is set above ours ((cap + 8) per worker, as
 *     MHD splits its limit between workers), so a connection over our cap is
 *     still accepted and NOTIFY_CONNECTION can make room for it: the oldest
 *     connection in RECEIVING is shut down (shutdown(2); MHD then reads EOF
 *     and closes it itself, so the descriptor is never closed twice).
 *   - A watchdog thread wakes every 50 ms: connections in RECEIVING past
 *     their deadline are shut down; suspended connections (a deferred reply
 *     or a stream waiting for its producer: MHD does not watch them) are
 *     polled for POLLRDHUP/POLLHUP, a disconnect that cancels the stream.
 *   - A stream is shared by its producer, the request record and (once
 *     queued) the MHD response: a reference count under the server mutex.
 *     The server struct itself is counted too (1 + live streams), so a
 *     producer holding a stream after lf__http_stop still has a mutex.
 *
 * Locking: one mutex per server (`mu`) guards the connection list, every
 * stream field and the counters. MHD_suspend_connection is called with `mu`
 * held (from the access handler or the content reader, as MHD requires),
 * which makes "nothing to send -> suspend" atomic against a producer's
 * write. MHD_resume_connection and on_cancel are called with `mu` released:
 * whoever flips a stream's `suspended` flag from 1 to 0 under `mu` owns the
 * one resume call, and MHD cannot free a connection it holds suspended.
 * `resumes_in_flight` counts flips whose resume call has not returned, so
 * lf__http_stop never calls MHD_stop_daemon with a connection still
 * suspended (which MHD treats as a fatal API violation).
 *
 * A descriptor is touched by our threads (shutdown, poll) only while its
 * hconn is on the list, under `mu`; MHD calls NOTIFY_CONNECTION(CLOSED),
 * which takes `mu` to unlink it, before it closes the descriptor, so a
 * number reused by a newer socket is never shut down by mistake.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* POLLRDHUP */
#endif
#include "http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#if MHD_VERSION >= 0x00097002
typedef enum MHD_Result lf_mhd_result;
#else
typedef int lf_mhd_result;
#endif

#define HTTP_WATCHDOG_TICK_S 0.05
#define HTTP_MAX_THREADS 64

/* ---------------------------------------------------------------- records */

enum { CONN_RECEIVING = 0, CONN_HANDLING = 1 };

typedef struct hconn {
    struct hconn *prev, *next;
    struct MHD_Connection *mc;
    int fd;
    int state;       /* CONN_RECEIVING / CONN_HANDLING */
    int dropped;     /* shut down by us; MHD will close it */
    double t0;       /* when the current deadline started */
    lf__http_request *cur; /* request record made by the URI log callback, until completed */
    lf__http_stream *stream; /* the current request's stream, if any (watched while suspended) */
} hconn;

enum { S_DEFERRED = 0, S_WHOLE = 1, S_STREAMING = 2 };

typedef struct owned_header {
    char *name, *value;
} owned_header;

struct lf__http_stream {
    lf__http_server *srv;
    struct lf__http_stream *prev, *next; /* srv->streams, while its request is live */
    struct MHD_Connection *mc;           /* NULL once the request completed */
    hconn *hc;                           /* NULL once the request completed */
    int refs;
    int state;            /* S_DEFERRED / S_WHOLE / S_STREAMING */
    int queued;           /* a response was handed to MHD */
    int suspended;        /* MHD_suspend_connection called, resume not yet */
    int producer_closed;
    int cancelled;
    int finished;         /* the request completed normally */
    int cancel_notified;  /* on_cancel called (or being called) */
    int in_cancel_cb;
    lf__http_cancel_fn on_cancel;
    void *cancel_user;
    int status;
    char *ctype;
    owned_header *hdr;
    int n_hdr;
    unsigned char *body; /* S_WHOLE body, or the stream's unsent bytes */
    size_t off, len, cap;  /* stream bytes: body[off, off + len) */
    struct lf__http_stream *notify_next; /* on a local list: call on_cancel */
    struct lf__http_stream *resume_next; /* on a local list: resume resume_mc */
    struct MHD_Connection *resume_mc;
};

struct lf__http_request {
    lf__http_server *srv;
    struct MHD_Connection *mc;
    hconn *hc;
    char *uri;            /* raw request target (copy) */
    const char *query;    /* into uri */
    const char *method, *path;
    int started;          /* the first access-handler call happened */
    int in_on_headers;
    int answered;         /* replied or deferred */
    int waiting;          /* deferred: the access handler suspended the connection */
    int too_large;        /* discarding a body over the cap */
    unsigned char *body;
    size_t body_len, body_cap;
    lf__http_stream *stream;
};

struct lf__http_server {
    char *what;
    lf__http_opts o;
    struct MHD_Daemon *daemon;
    int port;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* watchdog wake-ups, in_cancel_cb and resumes_in_flight changes */
    int refs;          /* 1 (the server) + streams alive */
    int stopping;
    int watchdog_stop;
    int watchdog_started;
    pthread_t watchdog;
    hconn *conns;
    int n_conns, n_live; /* listed / listed and not dropped */
    lf__http_stream *streams;
    int resumes_in_flight;
    char *timeout_reply; /* a whole 408 response, sent raw by the watchdog */
    size_t timeout_reply_len;
    lf__http_stats st;
};

/* ---------------------------------------------------------------- small helpers */

static char *dup_str(const char *s) {
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
    case 503: return "Service Unavailable";
    default: return "";
    }
}

/* The layer's own error body through the user's hook, or text/plain. */
static char *error_body(lf__http_server *srv, int status, const char *msg, const char **ctype, size_t *len) {
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

static void free_headers(owned_header *h, int n) {
    for (int i = 0; i < n; i++) {
        free(h[i].name);
        free(h[i].value);
    }
    free(h);
}

static lf_status copy_headers(const lf__http_header *h, int n, owned_header **out) {
    *out = NULL;
    if (n < 0 || (n > 0 && !h)) return lf_fail(LF_ERR_INVALID_ARG, "http: %d headers given with a NULL array", n);
    if (n == 0) return LF_OK;
    owned_header *o = calloc((size_t)n, sizeof *o);
    if (!o) return lf_fail(LF_ERR_NOMEM, "http: out of memory copying %d headers", n);
    for (int i = 0; i < n; i++) {
        if (!h[i].name || !h[i].value) {
            free_headers(o, n);
            return lf_fail(LF_ERR_INVALID_ARG, "http: header %d has a NULL name or value", i);
        }
        o[i].name = dup_str(h[i].name);
        o[i].value = dup_str(h[i].value);
        if (!o[i].name || !o[i].value) {
            free_headers(o, n);
            return lf_fail(LF_ERR_NOMEM, "http: out of memory copying header '%s'", h[i].name);
        }
    }
    *out = o;
    return LF_OK;
}

static int valid_status(int status) { return status >= 100 && status <= 599; }

/* Attach content type and headers; 0 when MHD refused one. */
static int add_headers(struct MHD_Response *resp, const char *ctype, const owned_header *oh, int n_oh,
                       const lf__http_header *h, int n_h) {
    if (ctype && MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype) != MHD_YES) return 0;
    for (int i = 0; i < n_oh; i++)
        if (MHD_add_response_header(resp, oh[i].name, oh[i].value) != MHD_YES) return 0;
    for (int i = 0; i < n_h; i++)
        if (!h[i].name || !h[i].value || MHD_add_response_header(resp, h[i].name, h[i].value) != MHD_YES) return 0;
    return 1;
}

/* ---------------------------------------------------------------- streams: references, cancel */

static void server_free(lf__http_server *srv) {
    pthread_cond_destroy(&srv->cv);
    pthread_mutex_destroy(&srv->mu);
    free(srv->what);
    free(srv->timeout_reply);
    free((char *)srv->o.host);
    free(srv);
}

static void stream_free(lf__http_stream *s) {
    free(s->ctype);
    free_headers(s->hdr, s->n_hdr);
    free(s->body);
    free(s);
}

/* Drop one reference (mu NOT held). Frees the stream, and the server when
 * that was the last thing keeping it. */
static void stream_unref(lf__http_stream *s) {
    lf__http_server *srv = s->srv;
    pthread_mutex_lock(&srv->mu);
    int left = --s->refs;
    int srv_left = srv->refs;
    if (left == 0) srv_left = --srv->refs;
    pthread_mutex_unlock(&srv->mu);
    if (left == 0) {
        stream_free(s);
        if (srv_left == 0) server_free(srv);
    }
}

/* Take the resume of a suspended stream (mu held): pushes it on *resumes. */
static void take_resume_locked(lf__http_stream *s, lf__http_stream **resumes) {
    if (!s->suspended) return;
    s->suspended = 0;
    s->srv->resumes_in_flight++;
    s->resume_mc = s->mc;
    s->refs++; /* kept until the resume call returned */
    s->resume_next = *resumes;
    *resumes = s;
}

/* Cancel (mu held): idempotent. The on_cancel call and the resume are put
 * on the local lists, to be run by run_pending once mu is released. */
static void cancel_locked(lf__http_stream *s, lf__http_stream **notifies, lf__http_stream **resumes) {
    if (s->cancelled) return;
    s->cancelled = 1;
    if (s->on_cancel && !s->producer_closed && !s->cancel_notified) {
        s->cancel_notified = 1;
        s->in_cancel_cb = 1;
        s->refs++;
        s->notify_next = *notifies;
        *notifies = s;
    }
    take_resume_locked(s, resumes);
}

/* Run what cancel_locked / take_resume_locked queued (mu NOT held). */
static void run_pending(lf__http_server *srv, lf__http_stream *notifies, lf__http_stream *resumes) {
    while (resumes) {
        lf__http_stream *s = resumes;
        resumes = s->resume_next;
        MHD_resume_connection(s->resume_mc);
        pthread_mutex_lock(&srv->mu);
        s->resume_mc = NULL;
        srv->resumes_in_flight--;
        pthread_cond_broadcast(&srv->cv);
        pthread_mutex_unlock(&srv->mu);
        stream_unref(s);
    }
    while (notifies) {
        lf__http_stream *s = notifies;
        notifies = s->notify_next;
        s->on_cancel(s->cancel_user);
        pthread_mutex_lock(&srv->mu);
        s->in_cancel_cb = 0;
        pthread_cond_broadcast(&srv->cv);
        pthread_mutex_unlock(&srv->mu);
        stream_unref(s);
    }
}

static void stream_unlink_locked(lf__http_stream *s) {
    lf__http_server *srv = s->srv;
    if (s->prev) s->prev->next = s->next;
    else if (srv->streams == s) srv->streams = s->next;
    if (s->next) s->next->prev = s->prev;
    s->prev = s->next = NULL;
}

/* ---------------------------------------------------------------- the content reader (MHD worker) */

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    lf__http_stream *s = cls;
    lf__http_server *srv = s->srv;
    ssize_t ret;
    pthread_mutex_lock(&srv->mu);
    if (s->cancelled) {
        ret = MHD_CONTENT_READER_END_WITH_ERROR;
    } else if (s->len > 0) {
        size_t n = s->len < max ? s->len : max;
        memcpy(buf, s->body + s->off, n);
        s->off += n;
        s->len -= n;
        if (s->len == 0) s->off = 0;
        ret = (ssize_t)n;
    } else if (s->producer_closed) {
        ret = MHD_CONTENT_READER_END_OF_STREAM;
    } else {
        /* nothing to send yet: sleep until the producer writes (no busy loop) */
        s->suspended = 1;
        MHD_suspend_connection(s->mc);
        ret = 0;
    }
    pthread_mutex_unlock(&srv->mu);
    return ret;
}

static void stream_reader_free(void *cls) { stream_unref(cls); }

/* ---------------------------------------------------------------- connection records */

static void conn_unlink_locked(lf__http_server *srv, hconn *c) {
    if (c->prev) c->prev->next = c->next;
    else if (srv->conns == c) srv->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    c->prev = c->next = NULL;
}

static void conn_drop_locked(lf__http_server *srv, hconn *c) {
    if (c->dropped) return;
    c->dropped = 1;
    srv->n_live--;
    (void)shutdown(c->fd, SHUT_RDWR); /* MHD reads EOF and closes it */
}

static void free_request(lf__http_request *r) {
    if (!r) return;
    free(r->uri);
    free(r->body);
    free(r);
}

static void finish_request(lf__http_server *srv, lf__http_request *r, int ok);

static void on_connection(void *cls, struct MHD_Connection *mc, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    lf__http_server *srv = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        hconn *c = calloc(1, sizeof *c);
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!c || !ci) { /* cannot track it: cannot bound it either, so refuse it */
            free(c);
            if (ci) (void)shutdown(ci->connect_fd, SHUT_RDWR);
            *socket_context = NULL;
            return;
        }
        c->mc = mc;
        c->fd = ci->connect_fd;
        c->state = CONN_RECEIVING;
        c->t0 = lf_time_now();
        pthread_mutex_lock(&srv->mu);
        c->next = srv->conns;
        if (srv->conns) srv->conns->prev = c;
        srv->conns = c;
        srv->n_conns++;
        srv->n_live++;
        srv->st.accepted++;
        if (srv->n_live > srv->o.max_connections) {
            hconn *victim = NULL;
            for (hconn *p = c->next; p; p = p->next) /* every connection older than c */
                if (!p->dropped && p->state == CONN_RECEIVING && (!victim || p->t0 < victim->t0)) victim = p;
            if (victim) {
                conn_drop_locked(srv, victim);
                srv->st.dropped_idle++;
            } else {
                conn_drop_locked(srv, c);
                srv->st.refused++;
            }
        }
        pthread_mutex_unlock(&srv->mu);
        *socket_context = c;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        hconn *c = *socket_context;
        if (!c) return;
        pthread_mutex_lock(&srv->mu);
        conn_unlink_locked(srv, c);
        srv->n_conns--;
        if (!c->dropped) srv->n_live--;
        lf__http_request *left = c->cur; /* a request MHD never completed (defensive) */
        c->cur = NULL;
        if (left) left->hc = NULL;
        pthread_mutex_unlock(&srv->mu);
        if (left) finish_request(srv, left, 0);
        free(c);
        *socket_context = NULL;
    }
}

static void *on_uri(void *cls, const char *uri, struct MHD_Connection *mc) {
    lf__http_server *srv = cls;
    lf__http_request *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->srv = srv;
    r->mc = mc;
    r->uri = dup_str(uri ? uri : "");
    if (!r->uri) {
        free(r);
        return NULL;
    }
    char *q = strchr(r->uri, '?');
    r->query = q ? q + 1 : "";
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    hconn *c = ci ? ci->socket_context : NULL;
    if (c) {
        pthread_mutex_lock(&srv->mu);
        lf__http_request *old = c->cur;
        c->cur = r;
        r->hc = c;
        pthread_mutex_unlock(&srv->mu);
        if (old) { /* never completed (defensive) */
            pthread_mutex_lock(&srv->mu);
            old->hc = NULL;
            pthread_mutex_unlock(&srv->mu);
            finish_request(srv, old, 0);
        }
    }
    return r;
}

/* The request is over (sent, failed, or its client left), mu NOT held: the
 * connection goes back to RECEIVING, the stream (if any) is detached from
 * it, a producer still working hears of a cancel, the record is freed. */
static void finish_request(lf__http_server *srv, lf__http_request *r, int ok) {
    lf__http_stream *notifies = NULL, *resumes = NULL, *s = r->stream;
    pthread_mutex_lock(&srv->mu);
    if (r->hc) {
        if (r->hc->cur == r) r->hc->cur = NULL;
        r->hc->state = CONN_RECEIVING; /* the next request's deadline starts now */
        r->hc->t0 = lf_time_now();
        r->hc->stream = NULL;
    }
    if (s) {
        if (ok && s->queued) { /* sent whole: nothing to cancel, later writes fail */
            s->finished = 1;
            s->cancelled = 1;
        } else {
            if (!s->producer_closed && !s->cancelled) srv->st.disconnects++;
            cancel_locked(s, &notifies, &resumes);
        }
        s->mc = NULL;
        s->hc = NULL;
        stream_unlink_locked(s);
    }
    pthread_mutex_unlock(&srv->mu);
    run_pending(srv, notifies, resumes);
    if (s) stream_unref(s); /* the request's reference */
    free_request(r);
}

static void on_completed(void *cls, struct MHD_Connection *mc, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)mc;
    lf__http_request *r = *con_cls;
    if (!r) return;
    *con_cls = NULL;
    finish_request(cls, r, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK);
}

/* ---------------------------------------------------------------- replies (MHD worker) */

static void mark_handling(lf__http_request *r) {
    lf__http_server *srv = r->srv;
    pthread_mutex_lock(&srv->mu);
    if (r->hc) r->hc->state = CONN_HANDLING;
    pthread_mutex_unlock(&srv->mu);
}

static lf_mhd_result queue_buffer(lf__http_request *r, int status, const char *ctype, const owned_header *oh,
                                  int n_oh, const lf__http_header *h, int n_h, void *body, size_t len,
                                  enum MHD_ResponseMemoryMode mode) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, mode);
    if (!resp) {
        if (mode == MHD_RESPMEM_MUST_FREE) free(body);
        return MHD_NO;
    }
    if (!add_headers(resp, ctype, oh, n_oh, h, n_h)) {
        MHD_destroy_response(resp);
        return MHD_NO;
    }
    lf_mhd_result ret = MHD_queue_response(r->mc, (unsigned int)status, resp);
    MHD_destroy_response(resp);
    if (ret == MHD_YES) {
        r->answered = 1;
        mark_handling(r);
    }
    return ret;
}

static lf_mhd_result reply_error(lf__http_request *r, int status, const char *msg) {
    const char *ctype;
    size_t len;
    char *b = error_body(r->srv, status, msg, &ctype, &len);
    if (!b) return MHD_NO;
    return queue_buffer(r, status, ctype, NULL, 0, NULL, 0, b, len, MHD_RESPMEM_MUST_FREE);
}

lf_status lf__http_reply(lf__http_request *r, int status, const char *content_type, const lf__http_header *headers,
                         int n_headers, const void *body, size_t len) {
    if (!r) return lf_fail(LF_ERR_INVALID_ARG, "http: reply to a NULL request");
    if (r->answered) return lf_fail(LF_ERR_INVALID_ARG, "http: request '%s' is already answered", r->uri);
    if (!valid_status(status)) return lf_fail(LF_ERR_INVALID_ARG, "http: status %d is outside 100..599", status);
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
    if (!add_headers(resp, content_type, NULL, 0, headers, n_headers)) {
        MHD_destroy_response(resp);
        return lf_fail(LF_ERR_INVALID_ARG, "http: libmicrohttpd refused a response header (a name or value with "
                                           "CR/LF, or one it sets itself)");
    }
    lf_mhd_result ret = MHD_queue_response(r->mc, (unsigned int)status, resp);
    MHD_destroy_response(resp);
    if (ret != MHD_YES) return lf_fail(LF_ERR_INTERNAL, "http: libmicrohttpd refused to queue the reply");
    r->answered = 1;
    mark_handling(r);
    return LF_OK;
}

lf_status lf__http_reply_text(lf__http_request *r, int status, const char *text) {
    return lf__http_reply(r, status, "text/plain; charset=utf-8", NULL, 0, text, text ? strlen(text) : 0);
}

lf_status lf__http_defer(lf__http_request *r, lf__http_cancel_fn on_cancel, void *cancel_user, lf__http_stream **out) {
    if (out) *out = NULL;
    if (!r || !out) return lf_fail(LF_ERR_INVALID_ARG, "http: defer with a NULL request or out");
    if (r->answered) return lf_fail(LF_ERR_INVALID_ARG, "http: request '%s' is already answered", r->uri);
    if (r->in_on_headers)
        return lf_fail(LF_ERR_INVALID_ARG, "http: request '%s': defer from on_headers (the body is not read yet)",
                       r->uri);
    lf__http_server *srv = r->srv;
    lf__http_stream *s = calloc(1, sizeof *s);
    if (!s) return lf_fail(LF_ERR_NOMEM, "http: out of memory for a stream");
    s->srv = srv;
    s->mc = r->mc;
    s->hc = r->hc;
    s->refs = 2; /* the producer and the request */
    s->state = S_DEFERRED;
    s->on_cancel = on_cancel;
    s->cancel_user = cancel_user;
    pthread_mutex_lock(&srv->mu);
    if (srv->stopping) {
        pthread_mutex_unlock(&srv->mu);
        free(s);
        return lf_fail(LF_ERR_UNSUPPORTED, "http: the server is stopping");
    }
    srv->refs++;
    s->next = srv->streams;
    if (srv->streams) srv->streams->prev = s;
    srv->streams = s;
    if (r->hc) {
        r->hc->state = CONN_HANDLING;
        r->hc->stream = s;
    }
    pthread_mutex_unlock(&srv->mu);
    r->stream = s;
    r->answered = 1;
    *out = s;
    return LF_OK;
}

/* Hand a deferred stream's answer to MHD, if it has one (MHD worker, in the
 * access handler after the body). Suspends the connection when it has not. */
static lf_mhd_result answer_deferred(lf__http_request *r) {
    lf__http_stream *s = r->stream;
    lf__http_server *srv = r->srv;
    pthread_mutex_lock(&srv->mu);
    if (s->state == S_DEFERRED) {
        if (s->cancelled || srv->stopping) {
            pthread_mutex_unlock(&srv->mu);
            return MHD_NO; /* closes the connection; completion cleans up */
        }
        s->suspended = 1;
        r->waiting = 1;
        MHD_suspend_connection(r->mc);
        pthread_mutex_unlock(&srv->mu);
        return MHD_YES;
    }
    r->waiting = 0;
    struct MHD_Response *resp = NULL;
    if (s->state == S_WHOLE) {
        resp = MHD_create_response_from_buffer(s->len, s->body, MHD_RESPMEM_MUST_FREE);
        if (resp) s->body = NULL, s->len = 0, s->cap = 0;
    } else {
        resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_reader, s, stream_reader_free);
        if (resp) s->refs++; /* the response's reference, dropped by stream_reader_free */
    }
    if (!resp || !add_headers(resp, s->ctype, s->hdr, s->n_hdr, NULL, 0)) {
        pthread_mutex_unlock(&srv->mu);
        if (resp) MHD_destroy_response(resp);
        return MHD_NO;
    }
    s->queued = 1;
    int status = s->status;
    pthread_mutex_unlock(&srv->mu);
    lf_mhd_result ret = MHD_queue_response(r->mc, (unsigned int)status, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* ---------------------------------------------------------------- the access handler (MHD worker) */

static lf_mhd_result on_access(void *cls, struct MHD_Connection *mc, const char *url, const char *method,
                               const char *version, const char *upload_data, size_t *upload_data_size,
                               void **con_cls) {
    (void)version;
    lf__http_server *srv = cls;
    lf__http_request *r = *con_cls;
    if (!r) { /* the URI log callback could not allocate */
        r = on_uri(srv, url, mc);
        if (!r) return MHD_NO;
        *con_cls = r;
    }
    r->mc = mc;
    r->method = method;
    r->path = url;

    if (!r->started) {
        r->started = 1;
        if (srv->o.on_headers) {
            r->in_on_headers = 1;
            srv->o.on_headers(r, srv->o.user);
            r->in_on_headers = 0;
            if (r->answered) return MHD_YES;
        }
        const char *cl = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl) {
            char *end = NULL;
            errno = 0;
            unsigned long long n = strtoull(cl, &end, 10);
            if (end != cl && errno == 0 && n > (unsigned long long)srv->o.max_body) {
                char msg[160];
                snprintf(msg, sizeof msg, "request body of %llu bytes is larger than the %zu-byte limit", n,
                         srv->o.max_body);
                pthread_mutex_lock(&srv->mu);
                srv->st.too_large++;
                pthread_mutex_unlock(&srv->mu);
                return reply_error(r, 413, msg);
            }
        }
        if (*upload_data_size == 0) return MHD_YES; /* MHD calls again with the body, or at its end */
    }

    if (r->waiting) return answer_deferred(r); /* resumed: the producer answered, or was cancelled */

    if (*upload_data_size > 0) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (r->too_large) return MHD_YES; /* discarding the rest */
        if (n > srv->o.max_body - r->body_len) {
            r->too_large = 1;
            free(r->body);
            r->body = NULL;
            r->body_len = r->body_cap = 0;
            pthread_mutex_lock(&srv->mu);
            srv->st.too_large++;
            pthread_mutex_unlock(&srv->mu);
            return MHD_YES;
        }
        if (r->body_len + n + 1 > r->body_cap) {
            size_t cap = r->body_cap ? r->body_cap : 4096;
            while (cap < r->body_len + n + 1) cap *= 2;
            if (cap > srv->o.max_body + 1) cap = srv->o.max_body + 1;
            unsigned char *p = realloc(r->body, cap);
            if (!p) return MHD_NO;
            r->body = p;
            r->body_cap = cap;
        }
        memcpy(r->body + r->body_len, upload_data, n);
        r->body_len += n;
        r->body[r->body_len] = '\0';
        return MHD_YES;
    }

    /* The whole request is here. */
    if (r->answered && r->stream) return answer_deferred(r);
    if (r->answered) return MHD_YES;
    if (r->too_large) {
        char msg[160];
        snprintf(msg, sizeof msg, "request body is larger than the %zu-byte limit", srv->o.max_body);
        return reply_error(r, 413, msg);
    }
    mark_handling(r);
    srv->o.on_request(r, srv->o.user);
    if (r->stream) return answer_deferred(r);
    if (r->answered) return MHD_YES;
    pthread_mutex_lock(&srv->mu);
    int stopping = srv->stopping;
    pthread_mutex_unlock(&srv->mu);
    return stopping ? reply_error(r, 503, "the server is shutting down")
                    : reply_error(r, 500, "internal error: the request handler gave no response");
}

/* ---------------------------------------------------------------- requests: accessors */

const char *lf__http_method(const lf__http_request *r) { return r && r->method ? r->method : ""; }
const char *lf__http_path(const lf__http_request *r) { return r && r->path ? r->path : ""; }
const char *lf__http_query(const lf__http_request *r) { return r && r->query ? r->query : ""; }

const char *lf__http_header_value(const lf__http_request *r, const char *name) {
    if (!r || !name) return NULL;
    return MHD_lookup_connection_value(r->mc, MHD_HEADER_KIND, name);
}

const char *lf__http_body(const lf__http_request *r, size_t *len) {
    if (len) *len = 0;
    if (!r || r->in_on_headers || !r->body) return NULL;
    if (len) *len = r->body_len;
    return (const char *)r->body;
}

/* ---------------------------------------------------------------- streams: producer side */

/* Set the stream's answer (mu held by the caller? no: takes it). */
static lf_status stream_answer(lf__http_stream *s, int state, int status, const char *ctype,
                               const lf__http_header *headers, int n_headers, const void *body, size_t len) {
    if (!s) return lf_fail(LF_ERR_INVALID_ARG, "http: NULL stream");
    if (!valid_status(status)) return lf_fail(LF_ERR_INVALID_ARG, "http: status %d is outside 100..599", status);
    if (len > 0 && !body) return lf_fail(LF_ERR_INVALID_ARG, "http: a %zu-byte body given as NULL", len);
    owned_header *oh = NULL;
    lf_status st = copy_headers(headers, n_headers, &oh);
    if (st != LF_OK) return st;
    char *ct = ctype ? dup_str(ctype) : NULL;
    unsigned char *copy = NULL;
    if (state == S_WHOLE) {
        copy = malloc(len ? len : 1);
        if (copy && len) memcpy(copy, body, len);
    }
    if ((ctype && !ct) || (state == S_WHOLE && !copy)) {
        free(ct);
        free(copy);
        free_headers(oh, n_headers);
        return lf_fail(LF_ERR_NOMEM, "http: out of memory for a %zu-byte response", len);
    }
    lf__http_server *srv = s->srv;
    lf__http_stream *resumes = NULL;
    pthread_mutex_lock(&srv->mu);
    if (s->producer_closed || s->state != S_DEFERRED) {
        pthread_mutex_unlock(&srv->mu);
        free(ct);
        free(copy);
        free_headers(oh, n_headers);
        return lf_fail(LF_ERR_INVALID_ARG, "http: the stream is already answered");
    }
    if (s->cancelled) {
        pthread_mutex_unlock(&srv->mu);
        free(ct);
        free(copy);
        free_headers(oh, n_headers);
        return lf_fail(LF_ERR_IO, "http: the client went away (or the server stopped) before the response");
    }
    s->state = state;
    s->status = status;
    s->ctype = ct;
    s->hdr = oh;
    s->n_hdr = n_headers;
    if (state == S_WHOLE) {
        s->body = copy;
        s->len = len;
        s->cap = len;
    }
    take_resume_locked(s, &resumes);
    pthread_mutex_unlock(&srv->mu);
    run_pending(srv, NULL, resumes);
    return LF_OK;
}

lf_status lf__http_stream_reply(lf__http_stream *s, int status, const char *content_type,
                                const lf__http_header *headers, int n_headers, const void *body, size_t len) {
    return stream_answer(s, S_WHOLE, status, content_type, headers, n_headers, body, len);
}

lf_status lf__http_stream_begin(lf__http_stream *s, int status, const char *content_type,
                                const lf__http_header *headers, int n_headers) {
    return stream_answer(s, S_STREAMING, status, content_type, headers, n_headers, NULL, 0);
}

lf_status lf__http_stream_write(lf__http_stream *s, const void *data, size_t len) {
    if (!s) return lf_fail(LF_ERR_INVALID_ARG, "http: NULL stream");
    if (len > 0 && !data) return lf_fail(LF_ERR_INVALID_ARG, "http: %zu bytes given as NULL", len);
    lf__http_server *srv = s->srv;
    lf__http_stream *notifies = NULL, *resumes = NULL;
    lf_status st = LF_OK;
    pthread_mutex_lock(&srv->mu);
    if (s->state != S_STREAMING || s->producer_closed) {
        st = lf_fail(LF_ERR_INVALID_ARG, "http: write to a stream that was not begun (or is closed)");
    } else if (s->cancelled) {
        st = lf_fail(LF_ERR_IO, s->finished ? "http: the response is already finished"
                                            : "http: the client went away (or the server stopped)");
    } else if (len > srv->o.max_stream_buffer - s->len) {
        srv->st.disconnects++;
        s->cancel_notified = 1; /* the caller hears it from the status */
        cancel_locked(s, &notifies, &resumes);
        if (s->hc) conn_drop_locked(srv, s->hc); /* do not wait for the idle timeout */
        st = lf_fail(LF_ERR_IO, "http: the client is not reading: %zu bytes wait unsent (limit %zu); stream cancelled",
                     s->len, srv->o.max_stream_buffer);
    } else if (len > 0) {
        if (s->off + s->len + len > s->cap) {
            if (s->off > 0) { /* compact first */
                memmove(s->body, s->body + s->off, s->len);
                s->off = 0;
            }
            if (s->len + len > s->cap) {
                size_t cap = s->cap ? s->cap : 4096;
                while (cap < s->len + len) cap *= 2;
                unsigned char *p = realloc(s->body, cap);
                if (!p) {
                    pthread_mutex_unlock(&srv->mu);
                    return lf_fail(LF_ERR_NOMEM, "http: out of memory queueing %zu stream bytes", len);
                }
                s->body = p;
                s->cap = cap;
            }
        }
        memcpy(s->body + s->off + s->len, data, len);
        s->len += len;
        take_resume_locked(s, &resumes);
    }
    pthread_mutex_unlock(&srv->mu);
    run_pending(srv, notifies, resumes);
    return st;
}

int lf__http_stream_cancelled(lf__http_stream *s) {
    if (!s) return 1;
    pthread_mutex_lock(&s->srv->mu);
    int c = s->cancelled;
    pthread_mutex_unlock(&s->srv->mu);
    return c;
}

void lf__http_stream_close(lf__http_stream *s) {
    if (!s) return;
    lf__http_server *srv = s->srv;
    lf__http_stream *resumes = NULL;
    pthread_mutex_lock(&srv->mu);
    while (s->in_cancel_cb) pthread_cond_wait(&srv->cv, &srv->mu);
    int unanswered = s->state == S_DEFERRED && !s->cancelled;
    pthread_mutex_unlock(&srv->mu);
    if (unanswered) { /* a 500 rather than a connection that waits forever */
        const char *ctype;
        size_t len;
        char *b = error_body(srv, 500, "internal error: the response was never produced", &ctype, &len);
        if (b) {
            (void)lf__http_stream_reply(s, 500, ctype, NULL, 0, b, len);
            free(b);
        }
    }
    pthread_mutex_lock(&srv->mu);
    while (s->in_cancel_cb) pthread_cond_wait(&srv->cv, &srv->mu);
    s->producer_closed = 1;
    if (s->state == S_DEFERRED && !s->cancelled) { /* out of memory above: close the connection */
        lf__http_stream *notifies = NULL;
        cancel_locked(s, &notifies, &resumes); /* producer_closed: nobody to notify */
    } else {
        take_resume_locked(s, &resumes); /* the reader ends the stream */
    }
    pthread_mutex_unlock(&srv->mu);
    run_pending(srv, NULL, resumes);
    stream_unref(s);
}

/* ---------------------------------------------------------------- watchdog */

static void *watchdog_main(void *arg) {
    lf__http_server *srv = arg;
    pthread_mutex_lock(&srv->mu);
    while (!srv->watchdog_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        long ns = ts.tv_nsec + (long)(HTTP_WATCHDOG_TICK_S * 1e9);
        ts.tv_sec += ns / 1000000000L;
        ts.tv_nsec = ns % 1000000000L;
        pthread_cond_timedwait(&srv->cv, &srv->mu, &ts);
        if (srv->watchdog_stop) break;
        double now = lf_time_now();
        lf__http_stream *notifies = NULL, *resumes = NULL;
        for (hconn *c = srv->conns; c; c = c->next) {
            if (c->dropped) continue;
            if (c->state == CONN_RECEIVING) {
                if (now - c->t0 > srv->o.request_deadline_s) {
                    /* A request was under way (its request line arrived): tell
                     * the client why. MHD writes nothing while it receives, so
                     * these bytes cannot interleave with its own; an idle
                     * keep-alive connection is closed without a word. */
                    if (c->cur && srv->timeout_reply)
                        (void)send(c->fd, srv->timeout_reply, srv->timeout_reply_len, MSG_DONTWAIT | MSG_NOSIGNAL);
                    conn_drop_locked(srv, c);
                    srv->st.deadline++;
                }
            } else if (c->stream && c->stream->suspended && !c->stream->cancelled) {
                /* MHD does not watch a suspended connection: a peer that hung up
                 * is seen here (a pipelined request would show as POLLIN only). */
                struct pollfd p = {.fd = c->fd, .events = POLLRDHUP};
                if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
                    srv->st.disconnects++;
                    cancel_locked(c->stream, &notifies, &resumes);
                }
            }
        }
        if (notifies || resumes) {
            pthread_mutex_unlock(&srv->mu);
            run_pending(srv, notifies, resumes);
            pthread_mutex_lock(&srv->mu);
        }
    }
    pthread_mutex_unlock(&srv->mu);
    return NULL;
}

/* ---------------------------------------------------------------- addresses */

/* host -> address. Literals: strict dotted-quad IPv4, IPv6 (bracketed or not,
 * with a zone); "localhost" = 127.0.0.1. Other names only with allow_names,
 * through getaddrinfo (the first address it gives). */
static lf_status parse_host(const lf__http_server *srv, const char *host, int allow_names,
                            struct sockaddr_storage *sa, socklen_t *sa_len, int port) {
    char buf[256];
    size_t n = strlen(host);
    if (n == 0 || n >= sizeof buf) goto bad;
    if (host[0] == '[' && host[n - 1] == ']' && n > 2) {
        memcpy(buf, host + 1, n - 2);
        buf[n - 2] = '\0';
    } else {
        memcpy(buf, host, n + 1);
    }
    if (strcmp(buf, "localhost") == 0) strcpy(buf, "127.0.0.1");
    memset(sa, 0, sizeof *sa);
    struct sockaddr_in *a4 = (struct sockaddr_in *)sa;
    if (buf[0] != '[' && inet_pton(AF_INET, buf, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
        *sa_len = sizeof *a4;
        return LF_OK;
    }
    struct addrinfo hints, *res = NULL;
    if (strchr(buf, ':')) {
        memset(&hints, 0, sizeof hints);
        hints.ai_flags = AI_NUMERICHOST | AI_PASSIVE;
        hints.ai_family = AF_INET6;
        hints.ai_socktype = SOCK_STREAM;
        if (getaddrinfo(buf, NULL, &hints, &res) != 0 || !res || res->ai_family != AF_INET6 ||
            res->ai_addrlen > sizeof *sa) {
            if (res) freeaddrinfo(res);
            goto bad;
        }
    } else if (allow_names && host[0] != '[') {
        memset(&hints, 0, sizeof hints);
        hints.ai_flags = AI_PASSIVE | AI_ADDRCONFIG;
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        int rc = getaddrinfo(buf, NULL, &hints, &res);
        if (rc != 0 || !res) {
            if (res) freeaddrinfo(res);
            return lf_fail(LF_ERR_CONFIG, "%s: host '%s' does not resolve: %s", srv->what, host,
                           rc ? gai_strerror(rc) : "no address");
        }
        if ((res->ai_family != AF_INET && res->ai_family != AF_INET6) || res->ai_addrlen > sizeof *sa) {
            freeaddrinfo(res);
            return lf_fail(LF_ERR_CONFIG, "%s: host '%s' resolves to neither IPv4 nor IPv6", srv->what, host);
        }
    } else {
        goto bad;
    }
    memcpy(sa, res->ai_addr, res->ai_addrlen);
    *sa_len = (socklen_t)res->ai_addrlen;
    freeaddrinfo(res);
    if (sa->ss_family == AF_INET6) ((struct sockaddr_in6 *)sa)->sin6_port = htons((uint16_t)port);
    else ((struct sockaddr_in *)sa)->sin_port = htons((uint16_t)port);
    return LF_OK;
bad:
    return lf_fail(LF_ERR_CONFIG, "%s: host '%s' is not an IPv4 or IPv6 address (or localhost)%s", srv->what, host,
                   allow_names ? " nor a name" : "");
}

/* MHD says only that it could not start; bind the address ourselves to learn
 * why (the socket is closed again at once). */
static const char *bind_failure_reason(const struct sockaddr_storage *sa, socklen_t sa_len) {
    int fd = socket(sa->ss_family, SOCK_STREAM, 0);
    if (fd < 0) return strerror(errno);
    int one = 1;
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (sa->ss_family == AF_INET6) (void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    const char *why = NULL;
    if (bind(fd, (const struct sockaddr *)sa, sa_len) != 0 || listen(fd, 1) != 0) why = strerror(errno);
    close(fd);
    return why ? why : "libmicrohttpd could not start its listener";
}

/* ---------------------------------------------------------------- start / stop */

static int bad_time(double t) { return !(t >= 0) || !isfinite(t) || t > 86400.0 * 365; }

lf_status lf__http_start(lf__http_server **out, const lf__http_opts *opts) {
    if (!out) return lf_fail(LF_ERR_INVALID_ARG, "http: out is NULL");
    *out = NULL;
    if (!opts || !opts->on_request) return lf_fail(LF_ERR_INVALID_ARG, "http: opts or opts->on_request is NULL");
    const char *what = opts->what ? opts->what : "http";
    if (opts->port < 0 || opts->port > 65535)
        return lf_fail(LF_ERR_RANGE, "%s: port %d is outside 1..65535 (0 = any free port)", what, opts->port);
    if (opts->threads < 0 || opts->threads > HTTP_MAX_THREADS)
        return lf_fail(LF_ERR_RANGE, "%s: threads %d is outside 1..%d (0 = 2)", what, opts->threads,
                       HTTP_MAX_THREADS);
    if (opts->max_connections < 0 || opts->max_connections > 100000)
        return lf_fail(LF_ERR_RANGE, "%s: max_connections %d is outside 1..100000 (0 = 64)", what,
                       opts->max_connections);
    if (bad_time(opts->request_deadline_s) || bad_time(opts->idle_timeout_s))
        return lf_fail(LF_ERR_RANGE, "%s: request_deadline_s %g / idle_timeout_s %g must be finite and >= 0", what,
                       opts->request_deadline_s, opts->idle_timeout_s);

    lf__http_server *srv = calloc(1, sizeof *srv);
    if (!srv) return lf_fail(LF_ERR_NOMEM, "%s: out of memory", what);
    srv->o = *opts;
    srv->what = dup_str(what);
    srv->o.host = dup_str(opts->host ? opts->host : "127.0.0.1");
    if (!srv->what || !srv->o.host) {
        free(srv->what);
        free((char *)srv->o.host);
        free(srv);
        return lf_fail(LF_ERR_NOMEM, "%s: out of memory", what);
    }
    if (srv->o.threads == 0) srv->o.threads = 2;
    if (srv->o.max_connections == 0) srv->o.max_connections = 64;
    if (srv->o.request_deadline_s == 0) srv->o.request_deadline_s = 10;
    if (srv->o.idle_timeout_s == 0) srv->o.idle_timeout_s = srv->o.request_deadline_s;
    if (srv->o.max_stream_buffer == 0) srv->o.max_stream_buffer = 4u << 20;
    srv->refs = 1;
    const char *host = srv->o.host;

    lf_status st;
    pthread_condattr_t ca;
    if (pthread_mutex_init(&srv->mu, NULL) != 0) {
        free(srv->what);
        free((char *)srv->o.host);
        free(srv);
        return lf_fail(LF_ERR_INTERNAL, "%s: pthread_mutex_init failed", what);
    }
    if (pthread_condattr_init(&ca) != 0 || pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) != 0 ||
        pthread_cond_init(&srv->cv, &ca) != 0) {
        pthread_mutex_destroy(&srv->mu);
        free(srv->what);
        free((char *)srv->o.host);
        free(srv);
        return lf_fail(LF_ERR_INTERNAL, "%s: pthread_cond_init failed", what);
    }
    pthread_condattr_destroy(&ca);

    {
        char msg[128];
        snprintf(msg, sizeof msg, "the request did not arrive whole within the %g-second deadline",
                 srv->o.request_deadline_s);
        const char *ctype;
        size_t blen;
        char *b = error_body(srv, 408, msg, &ctype, &blen);
        size_t cap = blen + strlen(ctype) + 160;
        srv->timeout_reply = b ? malloc(cap) : NULL;
        if (srv->timeout_reply) {
            int n = snprintf(srv->timeout_reply, cap,
                             "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Type: %s\r\n"
                             "Content-Length: %zu\r\n\r\n",
                             ctype, blen);
            memcpy(srv->timeout_reply + n, b, blen);
            srv->timeout_reply_len = (size_t)n + blen;
        }
        free(b);
        if (!srv->timeout_reply) {
            st = lf_fail(LF_ERR_NOMEM, "%s: out of memory", what);
            goto fail;
        }
    }

    struct sockaddr_storage sa;
    socklen_t sa_len = 0;
    st = parse_host(srv, host, opts->allow_names, &sa, &sa_len, opts->port);
    if (st != LF_OK) goto fail;
    const int v6 = sa.ss_family == AF_INET6;

    /* MHD_USE_ERROR_LOG stays off: library code does not write to stderr; a
     * failure to start is explained by bind_failure_reason instead.
     * MHD_USE_AUTO picks epoll, which has no FD_SETSIZE ceiling. */
    unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_ALLOW_SUSPEND_RESUME |
                         (v6 ? MHD_USE_IPv6 : 0);
    unsigned int idle = (unsigned int)ceil(srv->o.idle_timeout_s);
    if (idle < 1) idle = 1;
    unsigned int mhd_limit = (unsigned int)(srv->o.max_connections + 8) * (unsigned int)srv->o.threads;
    srv->daemon = MHD_start_daemon(flags, (uint16_t)opts->port, NULL, NULL, on_access, srv,
                                   MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                                   MHD_OPTION_THREAD_POOL_SIZE, (unsigned int)srv->o.threads,
                                   MHD_OPTION_CONNECTION_LIMIT, mhd_limit,
                                   MHD_OPTION_CONNECTION_TIMEOUT, idle,
                                   MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024),
                                   MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned int)128,
                                   MHD_OPTION_NOTIFY_CONNECTION, on_connection, srv,
                                   MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
                                   MHD_OPTION_URI_LOG_CALLBACK, on_uri, srv,
                                   MHD_OPTION_END);
    if (!srv->daemon) {
        const char *why = bind_failure_reason(&sa, sa_len);
        const int bracket = v6 && host[0] != '[';
        st = lf_fail(LF_ERR_IO, "%s: cannot listen on %s%s%s:%d: %s", what, bracket ? "[" : "", host,
                     bracket ? "]" : "", opts->port, why);
        goto fail;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(srv->daemon, MHD_DAEMON_INFO_BIND_PORT);
    srv->port = info && info->port ? (int)info->port : opts->port;
    if (pthread_create(&srv->watchdog, NULL, watchdog_main, srv) != 0) {
        MHD_stop_daemon(srv->daemon);
        st = lf_fail(LF_ERR_INTERNAL, "%s: cannot start the watchdog thread", what);
        goto fail;
    }
    srv->watchdog_started = 1;
    *out = srv;
    return LF_OK;

fail:
    server_free(srv);
    return st;
}

int lf__http_port(const lf__http_server *s) { return s ? s->port : -1; }

void lf__http_stats_get(const lf__http_server *s, lf__http_stats *out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!s) return;
    lf__http_server *srv = (lf__http_server *)s;
    pthread_mutex_lock(&srv->mu);
    *out = srv->st;
    out->open = srv->n_conns;
    pthread_mutex_unlock(&srv->mu);
}

void lf__http_stop(lf__http_server *srv) {
    if (!srv) return;
    lf__http_stream *notifies = NULL, *resumes = NULL;
    pthread_mutex_lock(&srv->mu);
    srv->stopping = 1;
    srv->watchdog_stop = 1;
    pthread_cond_broadcast(&srv->cv);
    for (lf__http_stream *s = srv->streams; s; s = s->next) cancel_locked(s, &notifies, &resumes);
    pthread_mutex_unlock(&srv->mu);
    if (srv->watchdog_started) pthread_join(srv->watchdog, NULL);
    run_pending(srv, notifies, resumes);
    /* No connection may stay suspended into MHD_stop_daemon: wait for resumes
     * other threads have taken but not yet made. Nothing suspends any more:
     * every stream is cancelled, and new deferrals are refused. */
    pthread_mutex_lock(&srv->mu);
    while (srv->resumes_in_flight > 0) pthread_cond_wait(&srv->cv, &srv->mu);
    pthread_mutex_unlock(&srv->mu);
    MHD_stop_daemon(srv->daemon); /* joins the workers; every request completes, every connection closes */
    srv->daemon = NULL;
    pthread_mutex_lock(&srv->mu);
    int left = --srv->refs;
    pthread_mutex_unlock(&srv->mu);
    if (left == 0) server_free(srv);
}
