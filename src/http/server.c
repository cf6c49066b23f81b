/*
 * The HTTP layer (http.h): libmicrohttpd with a request deadline, a
 * connection cap that drops the oldest idle connection, a worker pool, body
 * caps, and responses produced on other threads (deferred replies, streams).
 * Why each of these exists, and the connection life cycle, are in http.h.
 *
 * This file: the server (start/stop, addresses), the connection records and
 * MHD's callbacks, the access handler and the watchdog. reply.c: immediate
 * replies and the layer's helpers; stream.c: deferred replies and streams.
 * The records all three share are in http_impl.h.
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
 *     their deadline are shut down; connections holding a stream (a
 *     deferred reply or a stream waiting for its producer, which MHD does
 *     not watch, or one MHD is sending on, which MHD notices only at a
 *     failed send) are polled for POLLRDHUP/POLLHUP, a disconnect that
 *     cancels the stream and shuts the socket down.
 *   - The access handler's first call checks the request's framing
 *     (framing.c) before any handler: 400 (501 for a transfer coding it
 *     does not decode) and "Connection: close".
 *   - Drain (lf__http_drain): a request whose request line arrives after it
 *     began is answered 503 with "Connection: close"; the drain waits for
 *     the requests in flight (a connection with a request record that MHD
 *     has not completed: receiving, handled, deferred, or with response
 *     bytes unsent). lf__http_stop then sends a raw 503 to requests still
 *     arriving, waits up to HTTP_STOP_FLUSH_S for answers already produced,
 *     and cuts the rest.
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
#include "http/http_impl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------- the server record */

void lf__http_server_free(lf__http_server *srv) {
    pthread_cond_destroy(&srv->cv);
    pthread_mutex_destroy(&srv->mu);
    free(srv->what);
    free(srv->timeout_reply);
    free((char *)srv->o.host);
    free(srv);
}

/* ---------------------------------------------------------------- connection records */

static void conn_unlink_locked(lf__http_server *srv, hconn *c) {
    if (c->prev) c->prev->next = c->next;
    else if (srv->conns == c) srv->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    c->prev = c->next = NULL;
}

void lf__http_conn_drop_locked(lf__http_server *srv, hconn *c) {
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
                lf__http_conn_drop_locked(srv, victim);
                srv->st.dropped_idle++;
            } else {
                lf__http_conn_drop_locked(srv, c);
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
    r->uri = lf__http_dup_str(uri ? uri : "");
    if (!r->uri) {
        free(r);
        return NULL;
    }
    char *q = strchr(r->uri, '?');
    r->query = q ? q + 1 : "";
    pthread_mutex_lock(&srv->mu);
    r->late = srv->draining;
    pthread_mutex_unlock(&srv->mu);
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
            lf__http_cancel_locked(s, &notifies, &resumes);
        }
        s->mc = NULL;
        s->hc = NULL;
        lf__http_stream_unlink_locked(s);
    }
    pthread_mutex_unlock(&srv->mu);
    lf__http_run_pending(srv, notifies, resumes);
    if (s) lf__http_stream_unref(s); /* the request's reference */
    free_request(r);
}

static void on_completed(void *cls, struct MHD_Connection *mc, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)mc;
    lf__http_request *r = *con_cls;
    if (!r) return;
    *con_cls = NULL;
    finish_request(cls, r, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK);
}

/* ---------------------------------------------------------------- the access handler (MHD worker) */

typedef struct header_list {
    lf__http_header *h;
    int n, cap, failed;
} header_list;

static lf_mhd_result collect_header(void *cls, enum MHD_ValueKind kind, const char *name, const char *value) {
    (void)kind;
    header_list *l = cls;
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 32;
        lf__http_header *p = realloc(l->h, sizeof *p * (size_t)cap);
        if (!p) {
            l->failed = 1;
            return MHD_NO;
        }
        l->h = p;
        l->cap = cap;
    }
    l->h[l->n++] = (lf__http_header){name, value};
    return MHD_YES;
}

/* The request's framing (framing.c), on the first access-handler call: the
 * status to refuse it with (*why says why), 0 when acceptable, -1 when out
 * of memory. */
static int refuse_framing(struct MHD_Connection *mc, const char *method, const char *version, char *why, size_t cap) {
    header_list l = {0};
    MHD_get_connection_values(mc, MHD_HEADER_KIND, collect_header, &l);
    int bad = l.failed ? -1
                       : lf__http_check_framing(method, l.h, l.n, version && !strcmp(version, "HTTP/1.0"), why, cap);
    free(l.h);
    return bad;
}

/* MHD_OPTION_UNESCAPE_CALLBACK: %00 is not decoded (framing.c). */
static size_t unescape_uri(void *cls, struct MHD_Connection *mc, char *uri) {
    (void)cls;
    (void)mc;
    return lf__http_unescape(uri);
}

static lf_mhd_result on_access(void *cls, struct MHD_Connection *mc, const char *url, const char *method,
                               const char *version, const char *upload_data, size_t *upload_data_size, void **con_cls) {
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
        /* Framing first: a request MHD and a proxy could read differently
         * is refused before a handler sees it (400; 501 for a transfer
         * coding not decoded here), and nothing more is read from its
         * connection (RFC 9112 §6.1, §6.3). */
        char why[200];
        const int bad = refuse_framing(mc, method, version, why, sizeof why);
        if (bad < 0) return MHD_NO;
        if (bad) {
            char msg[240];
            snprintf(msg, sizeof msg, "%s: %s", bad == 501 ? "unsupported request framing" : "bad request framing",
                     why);
            return lf__http_reply_error_close(r, bad, msg);
        }
        if (r->late) return lf__http_reply_error_close(r, 503, "the server is shutting down");
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
                return lf__http_reply_error(r, 413, msg);
            }
        }
        if (*upload_data_size == 0) return MHD_YES; /* MHD calls again with the body, or at its end */
    }

    if (r->waiting) return lf__http_answer_deferred(r); /* resumed: the producer answered, or was cancelled */

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
    if (r->answered && r->stream) return lf__http_answer_deferred(r);
    if (r->answered) return MHD_YES;
    if (r->too_large) {
        char msg[160];
        snprintf(msg, sizeof msg, "request body is larger than the %zu-byte limit", srv->o.max_body);
        return lf__http_reply_error(r, 413, msg);
    }
    lf__http_mark_handling(r);
    srv->o.on_request(r, srv->o.user);
    if (r->stream) return lf__http_answer_deferred(r);
    if (r->answered) return MHD_YES;
    pthread_mutex_lock(&srv->mu);
    int stopping = srv->stopping;
    pthread_mutex_unlock(&srv->mu);
    return stopping ? lf__http_reply_error(r, 503, "the server is shutting down")
                    : lf__http_reply_error(r, 500, "internal error: the request handler gave no response");
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
                    lf__http_conn_drop_locked(srv, c);
                    srv->st.deadline++;
                }
            } else if (c->stream && !c->stream->cancelled && (c->stream->suspended || c->stream->queued)) {
                /* MHD does not watch a suspended connection, and one it is
                 * sending on learns of a hang-up only from a failed send,
                 * which may never come (nothing to send, or a full socket
                 * buffer it waits on): a peer that hung up is seen here
                 * within a tick either way (a pipelined request would show
                 * as POLLIN only). */
                struct pollfd p = {.fd = c->fd, .events = POLLRDHUP};
                if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
                    srv->st.disconnects++;
                    lf__http_cancel_locked(c->stream, &notifies, &resumes);
                    lf__http_conn_drop_locked(srv, c); /* MHD closes it at once, not at its next send */
                }
            }
        }
        if (notifies || resumes) {
            pthread_mutex_unlock(&srv->mu);
            lf__http_run_pending(srv, notifies, resumes);
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
static lf_status parse_host(const lf__http_server *srv, const char *host, int allow_names, struct sockaddr_storage *sa,
                            socklen_t *sa_len, int port) {
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
        return lf_fail(LF_ERR_RANGE, "%s: threads %d is outside 1..%d (0 = 2)", what, opts->threads, HTTP_MAX_THREADS);
    if (opts->max_connections < 0 || opts->max_connections > 100000)
        return lf_fail(LF_ERR_RANGE, "%s: max_connections %d is outside 1..100000 (0 = 64)", what,
                       opts->max_connections);
    if (bad_time(opts->request_deadline_s) || bad_time(opts->idle_timeout_s))
        return lf_fail(LF_ERR_RANGE, "%s: request_deadline_s %g / idle_timeout_s %g must be finite and >= 0", what,
                       opts->request_deadline_s, opts->idle_timeout_s);

    lf__http_server *srv = calloc(1, sizeof *srv);
    if (!srv) return lf_fail(LF_ERR_NOMEM, "%s: out of memory", what);
    srv->o = *opts;
    srv->what = lf__http_dup_str(what);
    srv->o.host = lf__http_dup_str(opts->host ? opts->host : "127.0.0.1");
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
        char *b = lf__http_error_body(srv, 408, msg, &ctype, &blen);
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
    srv->daemon = MHD_start_daemon(flags, (uint16_t)opts->port, NULL, NULL, on_access, srv, MHD_OPTION_SOCK_ADDR,
                                   (struct sockaddr *)&sa, MHD_OPTION_THREAD_POOL_SIZE, (unsigned int)srv->o.threads,
                                   MHD_OPTION_CONNECTION_LIMIT, mhd_limit, MHD_OPTION_CONNECTION_TIMEOUT, idle,
                                   MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024),
                                   MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned int)128, MHD_OPTION_NOTIFY_CONNECTION,
                                   on_connection, srv, MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
                                   MHD_OPTION_URI_LOG_CALLBACK, on_uri, srv, MHD_OPTION_UNESCAPE_CALLBACK, unescape_uri,
                                   NULL, MHD_OPTION_END);
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
    lf__http_server_free(srv);
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

/* Requests begun and not over (mu held): a request line arrived and the
 * response has not been wholly sent (nor the connection closed). With
 * flushable_only, those that wait for a producer that has not closed its
 * stream are left out: only answers already produced. */
static int in_flight_locked(const lf__http_server *srv, int flushable_only) {
    int n = 0;
    for (const hconn *c = srv->conns; c; c = c->next) {
        if (c->dropped || !c->cur) continue;
        const lf__http_stream *st = c->cur->stream;
        if (flushable_only && st && !st->producer_closed && !st->cancelled) continue;
        n++;
    }
    return n;
}

int lf__http_in_flight(const lf__http_server *s) {
    if (!s) return 0;
    lf__http_server *srv = (lf__http_server *)s;
    pthread_mutex_lock(&srv->mu);
    int n = in_flight_locked(srv, 0);
    pthread_mutex_unlock(&srv->mu);
    return n;
}

/* Wait (mu held) until in_flight_locked(srv, flushable_only) is 0 or the
 * monotonic time `until` (lf_time_now's clock) passes; returns what is left. */
static int wait_in_flight_locked(lf__http_server *srv, int flushable_only, double until) {
    for (;;) {
        int n = in_flight_locked(srv, flushable_only);
        double now = lf_time_now();
        if (n == 0 || now >= until) return n;
        double dt = until - now < 0.005 ? until - now : 0.005;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        long ns = ts.tv_nsec + (long)(dt * 1e9);
        ts.tv_sec += ns / 1000000000L;
        ts.tv_nsec = ns % 1000000000L;
        pthread_cond_timedwait(&srv->cv, &srv->mu, &ts);
    }
}

int lf__http_drain(lf__http_server *srv, double until) {
    if (!srv) return 0;
    pthread_mutex_lock(&srv->mu);
    srv->draining = 1;
    int left = wait_in_flight_locked(srv, 0, until);
    pthread_mutex_unlock(&srv->mu);
    return left;
}

void lf__http_stop(lf__http_server *srv) {
    if (!srv) return;
    lf__http_stream *notifies = NULL, *resumes = NULL;
    pthread_mutex_lock(&srv->mu);
    srv->draining = 1;
    /* A request still arriving is cut with an explicit 503 (MHD writes
     * nothing while it receives, so these bytes cannot interleave with its
     * own), then its connection is shut down. */
    if (!srv->stopping) {
        const char *ctype;
        size_t blen;
        char *b = lf__http_error_body(srv, 503, "the server stopped before the request arrived whole", &ctype, &blen);
        char head[256];
        int hn = b ? snprintf(head, sizeof head,
                              "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 1\r\n"
                              "Content-Type: %s\r\nContent-Length: %zu\r\n\r\n",
                              ctype, blen)
                   : 0;
        for (hconn *c = srv->conns; b && c; c = c->next) {
            if (c->dropped || c->state != CONN_RECEIVING || !c->cur) continue;
            (void)send(c->fd, head, (size_t)hn, MSG_DONTWAIT | MSG_NOSIGNAL | MSG_MORE);
            (void)send(c->fd, b, blen, MSG_DONTWAIT | MSG_NOSIGNAL);
            lf__http_conn_drop_locked(srv, c);
        }
        free(b);
        /* Answers already produced (whole replies, streams their producers
         * closed, the error answers of a cut drain) get a moment to leave. */
        (void)wait_in_flight_locked(srv, 1, lf_time_now() + HTTP_STOP_FLUSH_S);
    }
    srv->stopping = 1;
    srv->watchdog_stop = 1;
    pthread_cond_broadcast(&srv->cv);
    for (lf__http_stream *s = srv->streams; s; s = s->next) lf__http_cancel_locked(s, &notifies, &resumes);
    pthread_mutex_unlock(&srv->mu);
    if (srv->watchdog_started) pthread_join(srv->watchdog, NULL);
    lf__http_run_pending(srv, notifies, resumes);
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
    if (left == 0) lf__http_server_free(srv);
}
