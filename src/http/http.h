/*
 * The HTTP layer of llmforge (src/http/: server.c, reply.c, stream.c): one
 * small server API over libmicrohttpd (MHD), shared by the Prometheus
 * endpoint and the live dashboard (src/obs/) and the OpenAI server
 * (src/serve/). Internal: nothing here is public API.
 *
 * Why a layer of our own over MHD: MHD parses HTTP well, but the defences a
 * server facing slow or hostile clients needs are policy MHD leaves to its
 * user, and both servers need the same ones:
 *   - a per-request deadline: the headers and the body of a request must all
 *     arrive within request_deadline_s of the connection opening (or of the
 *     previous response on it finishing). MHD's own timeout is an idle timer
 *     that every byte restarts, so a client sending one byte every few
 *     seconds held a connection forever;
 *   - a connection cap that makes room: when a new connection would exceed
 *     max_connections, the oldest IDLE connection (one that has not
 *     delivered a whole request yet, slowloris clients included) is dropped,
 *     so new clients are served instead of waiting in the listen backlog;
 *     only when every connection is busy answering is the new one dropped;
 *   - a pool of worker threads (MHD_OPTION_THREAD_POOL_SIZE), each
 *     multiplexing its connections with epoll, so one slow client never
 *     holds the others;
 *   - a byte cap on request bodies (413);
 *   - responses produced on another thread (deferred replies and streams,
 *     e.g. server-sent events fed by an inference engine), with client
 *     disconnects reported to the producer so it can cancel its work.
 *
 * Threads and callbacks. The handlers run on MHD's worker threads, several
 * at a time: they must be thread-safe and must not block (a blocked worker
 * stalls every connection it multiplexes; hand long work to another thread
 * with lf__http_defer). A request object is valid only during the handler
 * call that received it. A stream (lf__http_stream) belongs to its producer
 * until lf__http_stream_close; its functions may be called from any one
 * thread at a time.
 *
 * Connection life: ACCEPTED -> RECEIVING (the deadline runs) -> HANDLING
 * (a whole request arrived, or a reply was queued: no deadline; MHD's idle
 * timeout idle_timeout_s still closes a client that stops reading) ->
 * RECEIVING again for the next request on a keep-alive connection. A
 * deferred reply or a stream waiting for its producer suspends the
 * connection in MHD (no CPU, no timeout); a watchdog thread looks at those
 * sockets (and those of every stream) every 50 ms, and every stream write
 * polls its own socket first; a peer that hung up is a disconnect (a
 * client that shuts down only its sending side after the request counts as
 * gone too: POLLRDHUP cannot tell the two apart). An idle keep-alive
 * connection is in RECEIVING, so the deadline also bounds how long it may
 * wait for its next request.
 *
 * Framing: before any handler runs, the header fields are checked against
 * RFC 9112's framing rules (framing.c: one Content-Length of digits only,
 * Transfer-Encoding only "chunked" and never with Content-Length, field
 * names that are tokens, no control bytes in values); a request that breaks
 * one gets 400, one whose transfer codings are well formed but more than
 * "chunked" alone ("gzip, chunked") gets 501, and either way its connection
 * is closed.
 *
 * Drain (lf__http_drain, then lf__http_stop): new requests get 503 and a
 * close, requests begun before are finished (received, handled, sent whole)
 * until a deadline; at the stop, what is still arriving gets 503, answers
 * already produced get up to a second to leave, the rest is cut.
 *
 * Invariants:
 *   - every request gets exactly one response, or its connection is closed:
 *     a handler that neither replies nor defers gets a 500, a producer that
 *     closes a stream it never answered gets a 500, a server stopping
 *     answers new deferrals with 503;
 *   - a producer's stream stays valid (and its calls fail cleanly) after the
 *     client left and after lf__http_stop: the server's memory lives until
 *     the last stream is closed;
 *   - on_cancel is called at most once per stream, never after
 *     lf__http_stream_close returned, and never with a lock held.
 *
 * References: RFC 9110 (HTTP semantics: 408, 413, 503 + Retry-After),
 * RFC 9112 (HTTP/1.1 message syntax, chunked transfer coding), the
 * libmicrohttpd 0.9 manual (suspend/resume, content reader callbacks),
 * the WHATWG HTML standard section 9.2 (server-sent events framing).
 */
#ifndef LF_HTTP_HTTP_H
#define LF_HTTP_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "llmforge/core.h"

typedef struct lf__http_server lf__http_server;
typedef struct lf__http_request lf__http_request; /* one request, valid during its handler call */
typedef struct lf__http_stream lf__http_stream;   /* a response produced off the handler's thread */

typedef struct lf__http_header {
    const char *name;
    const char *value;
} lf__http_header;

/* A request handler (runs on a worker thread). It answers with
 * lf__http_reply* or hands the answer to another thread with lf__http_defer;
 * returning without either answers 500 (503 while the server stops). */
typedef void (*lf__http_handler)(lf__http_request *req, void *user);

/* Body of an error the layer itself answers (400, 408, 413, 500, 501, 503): a malloc'd
 * string (freed by the layer) and its content type (a static string).
 * Called on any thread, with no lock held. NULL: text/plain "message\n". */
typedef char *(*lf__http_error_body_fn)(int status, const char *message, const char **content_type, void *user);

/* Called once when the client of a stream goes away (or the server stops)
 * before the producer closed it; on an MHD worker, the watchdog, the thread
 * calling lf__http_stop, or the producer's own thread inside the
 * lf__http_stream_write that found the client gone (with no lock of the
 * layer held). It must not call lf__http_stream_close (it may set a flag
 * the producer reads). */
typedef void (*lf__http_cancel_fn)(void *user);

typedef struct lf__http_opts {
    const char *what;                  /* prefix of error messages ("prometheus"); NULL = "http" */
    const char *host;                  /* NULL = "127.0.0.1" */
    int allow_names;                   /* 0: IPv4/IPv6 literals and "localhost" only; 1: names resolved too */
    int port;                          /* 0..65535; 0 = a free port (lf__http_port says which) */
    int threads;                       /* worker threads; 0 = 2 */
    int max_connections;               /* open connections; 0 = 64 */
    double request_deadline_s;         /* headers + body of one request; 0 = 10 */
    double idle_timeout_s;             /* no byte moving while answering; 0 = request_deadline_s */
    size_t max_body;                   /* request body bytes (more: 413); 0 = no body accepted */
    size_t max_stream_buffer;          /* bytes a stream may hold unsent (more: cancelled); 0 = 4 MiB */
    lf__http_handler on_headers;       /* optional: the headers arrived, the body is not read yet */
    lf__http_handler on_request;       /* required: the whole request arrived */
    lf__http_error_body_fn error_body; /* optional */
    void *user;                        /* passed to every callback */
} lf__http_opts;

/* Counters since start (a snapshot; all monotonic but `open`). */
typedef struct lf__http_stats {
    uint64_t accepted;     /* connections accepted */
    uint64_t dropped_idle; /* oldest idle connections dropped to make room */
    uint64_t refused;      /* new connections dropped: at the cap and nothing idle */
    uint64_t deadline;     /* connections closed for missing the request deadline */
    uint64_t too_large;    /* 413 answers */
    uint64_t disconnects;  /* streams or deferred replies whose client went away */
    int open;              /* connections open now */
} lf__http_stats;

/* ---------------------------------------------------------------- server */

/* Start listening and serving. Errors (nothing started, *out NULL):
 * LF_ERR_INVALID_ARG (NULL out/opts/on_request), LF_ERR_RANGE (port outside
 * 0..65535, threads < 0 or > 64, max_connections < 0, a negative or
 * non-finite time), LF_ERR_CONFIG (host is not an address, or a name that
 * does not resolve: "<what>: host 'x' ..."), LF_ERR_IO ("<what>: cannot
 * listen on host:port: <reason>"), LF_ERR_NOMEM, LF_ERR_INTERNAL. */
lf_status lf__http_start(lf__http_server **out, const lf__http_opts *opts);
/* The bound port (the kernel's pick when opts.port was 0); -1 for NULL. */
int lf__http_port(const lf__http_server *s);
void lf__http_stats_get(const lf__http_server *s, lf__http_stats *out);
/* Requests in flight: begun (their request line arrived) and not over
 * (their response not wholly sent, their connection not closed). */
int lf__http_in_flight(const lf__http_server *s);
/* Begin draining and wait for it: from now on a request whose request line
 * arrives is answered 503 with "Connection: close" by the layer, before any
 * handler; requests begun before keep going (their bodies are read, their
 * handlers run, their deferred replies and streams are sent). Returns once
 * none of those is in flight, or when the monotonic time `until` (the clock
 * of lf_time_now) has passed: the number still in flight. Then call
 * lf__http_stop (after making the producers answer). NULL: 0. */
int lf__http_drain(lf__http_server *s, double until);
/* Stop: a request still arriving gets a 503 ("Connection: close") and its
 * connection is shut down; answers already produced (whole replies, streams
 * whose producer closed them) get up to 1 s to leave; then every stream and
 * deferred reply still open is cancelled (their producers' on_cancel runs,
 * their later calls fail), every connection is closed, the threads are
 * joined. Producers may still hold streams; those stay valid until closed.
 * NULL: no-op. Not from a handler or a callback. */
void lf__http_stop(lf__http_server *s);

/* ---------------------------------------------------------------- requests (in a handler) */

const char *lf__http_method(const lf__http_request *r); /* "GET", "POST", ... */
const char *lf__http_path(const lf__http_request *r);   /* the path, percent-decoded by MHD, no query */
const char *lf__http_query(const lf__http_request *r);  /* raw query after '?', "" when none */
/* The value of header `name` (case-insensitive), NULL when absent. */
const char *lf__http_header_value(const lf__http_request *r, const char *name);
/* The body (NUL-terminated; may hold NUL bytes: use *len); NULL in on_headers
 * and for a request without one (*len 0). */
const char *lf__http_body(const lf__http_request *r, size_t *len);

/* Answer now with a copy of body[0, len) and the headers (n_headers may be
 * 0 with headers NULL). content_type NULL: none. Errors: LF_ERR_INVALID_ARG
 * (already answered, a status outside 100..599, a header MHD refuses),
 * LF_ERR_NOMEM. After an error the request is still unanswered. */
lf_status lf__http_reply(lf__http_request *r, int status, const char *content_type, const lf__http_header *headers,
                         int n_headers, const void *body, size_t len);
/* text/plain; charset=utf-8 */
lf_status lf__http_reply_text(lf__http_request *r, int status, const char *text);

/* Answer later, from any thread, through *out. on_cancel (may be NULL) is
 * called if the client goes away first. Errors: LF_ERR_INVALID_ARG (already
 * answered, from on_headers), LF_ERR_UNSUPPORTED (the server is stopping:
 * the request stays unanswered and gets a 503), LF_ERR_NOMEM. */
lf_status lf__http_defer(lf__http_request *r, lf__http_cancel_fn on_cancel, void *cancel_user, lf__http_stream **out);

/* ---------------------------------------------------------------- streams (any thread) */

/* A whole response (copied), sent with a Content-Length. Or: */
lf_status lf__http_stream_reply(lf__http_stream *s, int status, const char *content_type,
                                const lf__http_header *headers, int n_headers, const void *body, size_t len);
/* the status and headers of a response whose body follows in writes
 * (chunked under HTTP/1.1; under HTTP/1.0 the connection closes at its end). */
lf_status lf__http_stream_begin(lf__http_stream *s, int status, const char *content_type,
                                const lf__http_header *headers, int n_headers);
/* Queue data[0, len) (copied) for the client; it leaves as soon as the
 * socket takes it. Each write first polls the client's socket (one
 * non-blocking poll): a client that hung up fails the write at once, on the
 * producer's thread, however busy MHD's workers and the watchdog are, so a
 * producer generates at most one piece after the client left. Errors:
 * LF_ERR_IO when the client went away (the stream is cancelled and its
 * on_cancel runs before this returns), the server stopped, or max_stream_buffer
 * bytes are waiting (the client does not read: the stream is cancelled);
 * LF_ERR_INVALID_ARG (not begun, or already a whole reply); LF_ERR_NOMEM. */
lf_status lf__http_stream_write(lf__http_stream *s, const void *data, size_t len);
/* 1 once the client went away or the server stopped (later writes fail). */
int lf__http_stream_cancelled(lf__http_stream *s);
/* End the response (a begun stream ends cleanly after its queued data; one
 * never answered gets a 500) and release the producer's hold: s is invalid
 * afterwards. Waits for a running on_cancel of this stream. NULL: no-op. */
void lf__http_stream_close(lf__http_stream *s);

/* The reason phrase of a status ("Not Found"), "" when unknown. */
const char *lf__http_reason(int status);

#endif
