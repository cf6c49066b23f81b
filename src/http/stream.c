/*
 * Deferred replies and streams of the HTTP layer (API in http.h; the records
 * in http_impl.h): lf__http_defer, the producer's side (reply, begin, write,
 * close), the content reader MHD pulls a stream through, and the reference
 * counting and cancellation that let a producer outlive its client and the
 * server.
 *
 * Invariants (server.c has the locking rules): a stream is shared by its
 * producer, the request record and (once queued) the MHD response, each
 * holding a reference under the server mutex; whoever flips `suspended`
 * from 1 to 0 owns the one MHD_resume_connection call, made with the mutex
 * released; on_cancel runs at most once, never with the mutex held.
 */
#include "http/http_impl.h"

#include <poll.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- streams: references, cancel */

static void stream_free(lf__http_stream *s) {
    free(s->ctype);
    lf__http_free_headers(s->hdr, s->n_hdr);
    free(s->body);
    free(s);
}

void lf__http_stream_unref(lf__http_stream *s) {
    lf__http_server *srv = s->srv;
    pthread_mutex_lock(&srv->mu);
    int left = --s->refs;
    int srv_left = srv->refs;
    if (left == 0) srv_left = --srv->refs;
    pthread_mutex_unlock(&srv->mu);
    if (left == 0) {
        stream_free(s);
        if (srv_left == 0) lf__http_server_free(srv);
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
 * on the local lists, to be run by lf__http_run_pending once mu is released. */
void lf__http_cancel_locked(lf__http_stream *s, lf__http_stream **notifies, lf__http_stream **resumes) {
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

/* Run what lf__http_cancel_locked / take_resume_locked queued (mu NOT held). */
void lf__http_run_pending(lf__http_server *srv, lf__http_stream *notifies, lf__http_stream *resumes) {
    while (resumes) {
        lf__http_stream *s = resumes;
        resumes = s->resume_next;
        MHD_resume_connection(s->resume_mc);
        pthread_mutex_lock(&srv->mu);
        s->resume_mc = NULL;
        srv->resumes_in_flight--;
        pthread_cond_broadcast(&srv->cv);
        pthread_mutex_unlock(&srv->mu);
        lf__http_stream_unref(s);
    }
    while (notifies) {
        lf__http_stream *s = notifies;
        notifies = s->notify_next;
        s->on_cancel(s->cancel_user);
        pthread_mutex_lock(&srv->mu);
        s->in_cancel_cb = 0;
        pthread_cond_broadcast(&srv->cv);
        pthread_mutex_unlock(&srv->mu);
        lf__http_stream_unref(s);
    }
}

void lf__http_stream_unlink_locked(lf__http_stream *s) {
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

static void stream_reader_free(void *cls) { lf__http_stream_unref(cls); }

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

lf_mhd_result lf__http_answer_deferred(lf__http_request *r) {
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
    if (!resp || !lf__http_add_headers(resp, s->ctype, s->hdr, s->n_hdr, NULL, 0)) {
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

/* ---------------------------------------------------------------- streams: producer side */

/* Set the stream's answer (mu held by the caller? no: takes it). */
static lf_status stream_answer(lf__http_stream *s, int state, int status, const char *ctype,
                               const lf__http_header *headers, int n_headers, const void *body, size_t len) {
    if (!s) return lf_fail(LF_ERR_INVALID_ARG, "http: NULL stream");
    if (!lf__http_valid_status(status))
        return lf_fail(LF_ERR_INVALID_ARG, "http: status %d is outside 100..599", status);
    if (len > 0 && !body) return lf_fail(LF_ERR_INVALID_ARG, "http: a %zu-byte body given as NULL", len);
    owned_header *oh = NULL;
    lf_status st = lf__http_copy_headers(headers, n_headers, &oh);
    if (st != LF_OK) return st;
    char *ct = ctype ? lf__http_dup_str(ctype) : NULL;
    unsigned char *copy = NULL;
    if (state == S_WHOLE) {
        copy = malloc(len ? len : 1);
        if (copy && len) memcpy(copy, body, len);
    }
    if ((ctype && !ct) || (state == S_WHOLE && !copy)) {
        free(ct);
        free(copy);
        lf__http_free_headers(oh, n_headers);
        return lf_fail(LF_ERR_NOMEM, "http: out of memory for a %zu-byte response", len);
    }
    lf__http_server *srv = s->srv;
    lf__http_stream *resumes = NULL;
    pthread_mutex_lock(&srv->mu);
    if (s->producer_closed || s->state != S_DEFERRED) {
        pthread_mutex_unlock(&srv->mu);
        free(ct);
        free(copy);
        lf__http_free_headers(oh, n_headers);
        return lf_fail(LF_ERR_INVALID_ARG, "http: the stream is already answered");
    }
    if (s->cancelled) {
        pthread_mutex_unlock(&srv->mu);
        free(ct);
        free(copy);
        lf__http_free_headers(oh, n_headers);
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
    lf__http_run_pending(srv, NULL, resumes);
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

/* The client of a stream hung up (mu held; hc listed, so its fd is ours to
 * poll): one non-blocking poll, so the producer hears of it at its next
 * write on its own thread, whether or not MHD or the watchdog have run. */
static int peer_gone_locked(const lf__http_stream *s) {
    if (!s->hc || s->hc->dropped) return 0;
    struct pollfd p = {.fd = s->hc->fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
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
    } else if (peer_gone_locked(s)) {
        srv->st.disconnects++;
        lf__http_cancel_locked(s, &notifies, &resumes); /* on_cancel runs below, mu released */
        lf__http_conn_drop_locked(srv, s->hc);
        st = lf_fail(LF_ERR_IO, "http: the client went away");
    } else if (len > srv->o.max_stream_buffer - s->len) {
        srv->st.disconnects++;
        s->cancel_notified = 1; /* the caller hears it from the status */
        lf__http_cancel_locked(s, &notifies, &resumes);
        if (s->hc) lf__http_conn_drop_locked(srv, s->hc); /* do not wait for the idle timeout */
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
    lf__http_run_pending(srv, notifies, resumes);
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
        char *b = lf__http_error_body(srv, 500, "internal error: the response was never produced", &ctype, &len);
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
        lf__http_cancel_locked(s, &notifies, &resumes); /* producer_closed: nobody to notify */
    } else {
        take_resume_locked(s, &resumes); /* the reader ends the stream */
    }
    pthread_mutex_unlock(&srv->mu);
    lf__http_run_pending(srv, NULL, resumes);
    lf__http_stream_unref(s);
}
