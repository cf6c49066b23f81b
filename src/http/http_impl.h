/*
 * Private to the HTTP layer (src/http/): the records its files share and
 * the functions they call across files. Not for users of the layer (they
 * include http.h); how these fit together and the locking rules are in
 * server.c's header comment.
 */
#ifndef LF_HTTP_IMPL_H
#define LF_HTTP_IMPL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* POLLRDHUP */
#endif
#include <pthread.h>
#include <sys/types.h>

#include <microhttpd.h>

#include "http/http.h"

#if MHD_VERSION >= 0x00097002
typedef enum MHD_Result lf_mhd_result;
#else
typedef int lf_mhd_result;
#endif

#define HTTP_WATCHDOG_TICK_S 0.05
#define HTTP_STOP_FLUSH_S 1.0 /* lf__http_stop: how long answers already produced may take to leave */
#define HTTP_MAX_THREADS 64

/* ---------------------------------------------------------------- records */

enum { CONN_RECEIVING = 0, CONN_HANDLING = 1 };

typedef struct hconn {
    struct hconn *prev, *next;
    struct MHD_Connection *mc;
    int fd;
    int state;               /* CONN_RECEIVING / CONN_HANDLING */
    int dropped;             /* shut down by us; MHD will close it */
    double t0;               /* when the current deadline started */
    lf__http_request *cur;   /* request record made by the URI log callback, until completed */
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
    int state;     /* S_DEFERRED / S_WHOLE / S_STREAMING */
    int queued;    /* a response was handed to MHD */
    int suspended; /* MHD_suspend_connection called, resume not yet */
    int producer_closed;
    int cancelled;
    int finished;        /* the request completed normally */
    int cancel_notified; /* on_cancel called (or being called) */
    int in_cancel_cb;
    lf__http_cancel_fn on_cancel;
    void *cancel_user;
    int status;
    char *ctype;
    owned_header *hdr;
    int n_hdr;
    unsigned char *body;                 /* S_WHOLE body, or the stream's unsent bytes */
    size_t off, len, cap;                /* stream bytes: body[off, off + len) */
    struct lf__http_stream *notify_next; /* on a local list: call on_cancel */
    struct lf__http_stream *resume_next; /* on a local list: resume resume_mc */
    struct MHD_Connection *resume_mc;
};

struct lf__http_request {
    lf__http_server *srv;
    struct MHD_Connection *mc;
    hconn *hc;
    char *uri;         /* raw request target (copy) */
    const char *query; /* into uri */
    const char *method, *path;
    int started; /* the first access-handler call happened */
    int in_on_headers;
    int answered;  /* replied or deferred */
    int waiting;   /* deferred: the access handler suspended the connection */
    int too_large; /* discarding a body over the cap */
    int late;      /* its request line arrived after lf__http_drain began: 503 */
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
    int draining; /* lf__http_drain began: new requests get 503 and a close */
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

/* ---------------------------------------------------------------- helpers (reply.c) */

char *lf__http_dup_str(const char *s);
/* The layer's own error body through the user's hook, or text/plain: a
 * malloc'd string; *ctype static. */
char *lf__http_error_body(lf__http_server *srv, int status, const char *msg, const char **ctype, size_t *len);
void lf__http_free_headers(owned_header *h, int n);
lf_status lf__http_copy_headers(const lf__http_header *h, int n, owned_header **out);
int lf__http_valid_status(int status);
/* Attach content type and headers; 0 when MHD refused one. */
int lf__http_add_headers(struct MHD_Response *resp, const char *ctype, const owned_header *oh, int n_oh,
                         const lf__http_header *h, int n_h);
/* The connection is HANDLING: its request deadline no longer runs. */
void lf__http_mark_handling(lf__http_request *r);
/* Queue the layer's own error response (413, 500, 503) on an MHD worker. */
lf_mhd_result lf__http_reply_error(lf__http_request *r, int status, const char *msg);
/* The same with "Connection: close": MHD closes the connection once it is
 * sent, reading nothing more from it (refused framing, a stopping server). */
lf_mhd_result lf__http_reply_error_close(lf__http_request *r, int status, const char *msg);

/* ---------------------------------------------------------------- framing (framing.c) */

/* RFC 9112 framing of a request (method: its method, NULL when unknown)
 * whose header fields are h[0, n) as MHD parsed them (http10: the request
 * line said HTTP/1.0): 0 when acceptable, else the status to refuse it with
 * (400; 411 for a POST/PUT/PATCH of undefined length; 501 for a transfer
 * coding the server does not decode) and a reason in why[0, cap); a refused
 * request's connection is closed. framing.c lists the rules. */
int lf__http_check_framing(const char *method, const lf__http_header *h, int n, int http10, char *why, size_t cap);
/* Decode the %XX escapes of a request URI in place, except %00 (kept as
 * "%00"); the new length. MHD's unescape callback. */
size_t lf__http_unescape(char *s);

/* ---------------------------------------------------------------- connections (server.c) */

void lf__http_server_free(lf__http_server *srv);
/* Shut a connection down (mu held); MHD reads EOF and closes it. */
void lf__http_conn_drop_locked(lf__http_server *srv, hconn *c);

/* ---------------------------------------------------------------- streams (stream.c) */

/* Drop one reference (mu NOT held). Frees the stream, and the server when
 * that was the last thing keeping it. */
void lf__http_stream_unref(lf__http_stream *s);
/* Cancel (mu held): idempotent. The on_cancel call and the resume are put
 * on the local lists, to be run by lf__http_run_pending once mu is released. */
void lf__http_cancel_locked(lf__http_stream *s, lf__http_stream **notifies, lf__http_stream **resumes);
/* Run what the _locked functions queued (mu NOT held). */
void lf__http_run_pending(lf__http_server *srv, lf__http_stream *notifies, lf__http_stream *resumes);
void lf__http_stream_unlink_locked(lf__http_stream *s);
/* Hand a deferred stream's answer to MHD, if it has one (MHD worker, in the
 * access handler after the body). Suspends the connection when it has not. */
lf_mhd_result lf__http_answer_deferred(lf__http_request *r);

#endif
