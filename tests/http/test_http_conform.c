/*
 * HTTP conformance and drain tests of the HTTP layer (src/http/), with a
 * tiny handler and raw sockets (every socket operation has a timeout):
 *
 *  - RFC 9112 framing: each request MHD 0.9.75 would accept but RFC 9112
 *    says to refuse (two Content-Length, Transfer-Encoding with
 *    Content-Length or other than chunked, obsolete line folding, a bare CR
 *    or another control byte in a value, whitespace before the colon, ...)
 *    gets 400 AND its connection closed, no byte after it read as another
 *    request; a well-framed request with a transfer coding the server does
 *    not decode ("gzip, chunked") gets 501, closed the same way (RFC 9112
 *    §6.1); the well-formed neighbours get 200 on a connection that stays
 *    open. The pure check (lf__http_check_framing) has its own table.
 *  - drain: a request held at each stage (headers only, part of the body,
 *    deferred and not answered, a stream mid-production, a stream with
 *    bytes the client has not read) gets a complete answer under a generous
 *    drain, and a complete answer or an explicit error when the drain time
 *    is zero; a request that arrives after the drain began gets 503 and a
 *    close. The stages are held by the test itself (it decides when the
 *    client sends and when the producer answers), not by timing.
 *  - cancellation: streams whose clients reset together: a producer's next
 *    write fails at once, and idle streams are cancelled within a bound.
 * Time bounds are generous upper bounds only (a shared, busy machine).
 */
#define _GNU_SOURCE
#include "test_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "http/http.h"
#include "http/http_impl.h"

/* ---------------------------------------------------------------- client helpers */

static int tcp_connect_buf(int port, int rcvbuf) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    if (rcvbuf > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf); /* before connect: the window */
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int tcp_connect(int port) { return tcp_connect_buf(port, 0); }

static int send_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n > 0) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w <= 0) return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Read what arrives until the peer closes (*closed 1) or `quiet` seconds
 * pass with nothing new (*closed 0). Malloc'd, NUL-terminated. */
static char *read_some(int fd, double quiet, size_t *len, int *closed) {
    size_t cap = 1 << 16, got = 0;
    char *b = malloc(cap);
    *closed = 0;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int k = poll(&p, 1, (int)(quiet * 1000));
        if (k <= 0) break;
        if (got + 4096 > cap) b = realloc(b, cap *= 2);
        ssize_t n = recv(fd, b + got, cap - 1 - got, 0);
        if (n <= 0) {
            *closed = 1;
            break;
        }
        got += (size_t)n;
    }
    b[got] = '\0';
    if (len) *len = got;
    return b;
}

static int status_of(const char *raw) {
    int st = 0;
    return sscanf(raw, "HTTP/1.%*d %d", &st) == 1 ? st : 0;
}

/* ---------------------------------------------------------------- the server under test */

typedef struct hold {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    lf__http_stream *pending[64];
    int n_pending;
    atomic_int cancels;
    atomic_int handled;
} hold;

static hold H;

static void on_cancel(void *user) {
    (void)user;
    atomic_fetch_add(&H.cancels, 1);
}

/* /echo: 200 with the body's length; /defer and /stream: handed to the test
 * (H.pending), which answers or streams from its own thread. */
static void handler(lf__http_request *r, void *user) {
    (void)user;
    atomic_fetch_add(&H.handled, 1);
    const char *path = lf__http_path(r);
    if (!strcmp(path, "/defer") || !strcmp(path, "/stream")) {
        lf__http_stream *s = NULL;
        if (lf__http_defer(r, on_cancel, NULL, &s) != LF_OK) return; /* the layer answers 503 */
        if (!strcmp(path, "/stream")) lf__http_stream_begin(s, 200, "text/event-stream", NULL, 0);
        pthread_mutex_lock(&H.mu);
        H.pending[H.n_pending++] = s;
        pthread_cond_broadcast(&H.cv);
        pthread_mutex_unlock(&H.mu);
        return;
    }
    size_t n = 0;
    (void)lf__http_body(r, &n);
    char msg[64];
    snprintf(msg, sizeof msg, "body=%zu\n", n);
    lf__http_reply_text(r, 200, msg);
}

static lf__http_stream *take_pending(void) {
    lf__http_stream *s = NULL;
    pthread_mutex_lock(&H.mu);
    for (int i = 0; i < 500 && H.n_pending == 0; i++) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 10 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&H.cv, &H.mu, &ts);
    }
    if (H.n_pending > 0) {
        s = H.pending[0];
        memmove(H.pending, H.pending + 1, sizeof H.pending[0] * (size_t)--H.n_pending);
    }
    pthread_mutex_unlock(&H.mu);
    return s;
}

static lf__http_server *start(void) {
    pthread_mutex_init(&H.mu, NULL);
    pthread_cond_init(&H.cv, NULL);
    H.n_pending = 0;
    atomic_store(&H.cancels, 0);
    atomic_store(&H.handled, 0);
    lf__http_opts o = {.what = "t",
                       .port = 0,
                       .threads = 2,
                       .max_connections = 64,
                       .request_deadline_s = 20,
                       .max_body = 1 << 20,
                       .max_stream_buffer = 64u << 20,
                       .on_request = handler};
    lf__http_server *srv = NULL;
    LF_ASSERT_OK(lf__http_start(&srv, &o));
    return srv;
}

/* ---------------------------------------------------------------- framing: the pure check */

static void test_check_framing(void **state) {
    (void)state;
    char why[200];
    struct {
        lf__http_header h[3];
        int n, http10, want; /* want: 0 accepted, else the refusal's status */
    } T[] = {
        {{{"Host", "t"}, {"Content-Length", "7"}}, 2, 0, 0},
        {{{"Content-Length", "7"}, {"Content-Length", "2"}}, 2, 0, 400},
        {{{"Content-Length", "7"}, {"content-length", "7"}}, 2, 0, 400},
        {{{"Content-Length", "+7"}}, 1, 0, 400},
        {{{"Content-Length", "-7"}}, 1, 0, 400},
        {{{"Content-Length", "7, 7"}}, 1, 0, 400},
        {{{"Content-Length", ""}}, 1, 0, 400},
        {{{"Content-Length", "0x7"}}, 1, 0, 400},
        {{{"Transfer-Encoding", "chunked"}, {"Host", "t"}}, 2, 0, 0},
        {{{"Transfer-Encoding", "CHUNKED"}, {"Host", "t"}}, 2, 0, 0},
        {{{"Transfer-Encoding", "chunked"}}, 1, 1, 400},       /* HTTP/1.0: faulty framing (§6.1) */
        {{{"Transfer-Encoding", "gzip, chunked"}}, 1, 1, 400}, /* the same before the coding */
        {{{"Transfer-Encoding", "chunked"}, {"Content-Length", "7"}}, 2, 0, 400},
        {{{"Transfer-Encoding", "gzip, chunked"}, {"Content-Length", "7"}}, 2, 0, 400},
        {{{"Transfer-Encoding", "chunked"}, {"Transfer-Encoding", "chunked"}}, 2, 0, 400},
        {{{"Transfer-Encoding", "gzip"}, {"Transfer-Encoding", "chunked"}}, 2, 0, 400},
        /* chunked not the final coding: the length is unknown, 400 (§6.3 rule 4) */
        {{{"Transfer-Encoding", "gzip"}}, 1, 0, 400},
        {{{"Transfer-Encoding", "chunked, gzip"}}, 1, 0, 400},
        {{{"Transfer-Encoding", "identity"}}, 1, 0, 400},
        {{{"Transfer-Encoding", ""}}, 1, 0, 400},
        {{{"Transfer-Encoding", " , ,"}}, 1, 0, 400},
        {{{"Transfer-Encoding", "chunked, chunked"}}, 1, 0, 400}, /* §7.1: never twice */
        {{{"Transfer-Encoding", "chunked;"}}, 1, 0, 400},         /* not a list of codings */
        {{{"Transfer-Encoding", "gzip chunked"}}, 1, 0, 400},
        {{{"Transfer-Encoding", "gzip;q=\"1, chunked"}}, 1, 0, 400},
        {{{"Transfer-Encoding", "gz@p, chunked"}}, 1, 0, 400},
        /* well framed, but a coding this server does not decode: 501 (§6.1) */
        {{{"Transfer-Encoding", "gzip, chunked"}}, 1, 0, 501},
        {{{"Transfer-Encoding", "GZIP,chunked"}}, 1, 0, 501},
        {{{"Transfer-Encoding", "x-custom;a=b;c=\"d, e\", chunked"}}, 1, 0, 501},
        {{{"Transfer-Encoding", "deflate, gzip , chunked"}}, 1, 0, 501},
        {{{"Transfer-Encoding", ", chunked"}}, 1, 0, 501}, /* MHD decodes only the bare value */
        {{{"Transfer-Encoding", "chunked;x=1"}}, 1, 0, 501},
        {{{"Content-Length ", "7"}}, 1, 0, 400},
        {{{"Content-Length\t", "7"}}, 1, 0, 400},
        {{{"X A", "b"}}, 1, 0, 400},
        {{{"", "b"}}, 1, 0, 400},
        {{{"Xb: c", "a"}}, 1, 0, 400},           /* obs-fold as MHD leaves it */
        {{{"Content-Length0", "1"}}, 1, 0, 400}, /* a folded Content-Length */
        {{{"Transfer-Encodingx", "chunked"}}, 1, 0, 400},
        {{{"X-A", "foo\rbar"}}, 1, 0, 400},
        {{{"X-A", "foo\x01"
                  "bar"}},
         1,
         0,
         400},
        {{{"X-A", "foo\x7f"}}, 1, 0, 400},
        {{{"X-A", "foo\tbar"}, {"Host", "t"}}, 2, 0, 0},
        {{{"X-A", "caf\xc3\xa9"}, {"Host", "t"}}, 2, 0, 0},
        {{{"Content-Length-Extra", "1"}}, 1, 0, 400},
        /* Host (RFC 9112 §3.2): one in HTTP/1.1, none needed in 1.0, never two, host[:port] */
        {{{"X-A", "b"}}, 1, 0, 400},
        {{{"X-A", "b"}}, 1, 1, 0},
        {{{"Host", "t"}, {"Host", "t"}}, 2, 0, 400},
        {{{"Host", "t"}, {"host", "u"}}, 2, 1, 400},
        {{{"Host", "a b"}}, 1, 0, 400},
        {{{"Host", "a/b"}}, 1, 0, 400},
        {{{"Host", "a:8x"}}, 1, 0, 400},
        {{{"Host", "[::1"}}, 1, 0, 400},
        {{{"Host", "[]"}}, 1, 0, 400},
        {{{"Host", "a%zz"}}, 1, 0, 400},
        {{{"Host", ""}}, 1, 0, 0},
        {{{"Host", "example.com:8000"}}, 1, 0, 0},
        {{{"Host", "127.0.0.1"}}, 1, 0, 0},
        {{{"Host", "[::1]:80"}}, 1, 0, 0},
        {{{"Host", "a%2Db_c~d"}}, 1, 0, 0},
        {{{"Host", "t:"}}, 1, 0, 0},
    };
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
        int got = lf__http_check_framing("GET", T[i].h, T[i].n, T[i].http10, why, sizeof why);
        if (got != T[i].want)
            fail_msg("case %zu (%s: %s): got %d, want %d (%s)", i, T[i].h[0].name, T[i].h[0].value, got, T[i].want,
                     why);
        if (got) assert_true(why[0] != '\0');
    }
    /* a content method of undefined length: 411 (RFC 9110 §15.5.12) */
    struct {
        const char *method;
        lf__http_header h[2];
        int n, http10, want;
    } M[] = {
        {"POST", {{"Host", "t"}}, 1, 0, 411},
        {"PUT", {{"Host", "t"}}, 1, 0, 411},
        {"PATCH", {{"Host", "t"}}, 1, 0, 411},
        {"POST", {{"X-A", "b"}}, 1, 1, 411},
        {"POST", {{"Host", "t"}, {"Content-Length", "0"}}, 2, 0, 0},
        {"POST", {{"Host", "t"}, {"Transfer-Encoding", "chunked"}}, 2, 0, 0},
        {"DELETE", {{"Host", "t"}}, 1, 0, 0},
        {NULL, {{"Host", "t"}}, 1, 0, 0},
    };
    for (size_t i = 0; i < sizeof M / sizeof M[0]; i++) {
        int got = lf__http_check_framing(M[i].method, M[i].h, M[i].n, M[i].http10, why, sizeof why);
        if (got != M[i].want)
            fail_msg("method case %zu (%s): got %d, want %d (%s)", i, M[i].method ? M[i].method : "NULL", got,
                     M[i].want, why);
    }
}

/* ---------------------------------------------------------------- framing: on the wire */

#define REQ_HEAD "POST /echo HTTP/1.1\r\nHost: t\r\n"
#define BODY "{\"a\":1}"

typedef struct wire_case {
    const char *name;
    const char *raw;
    size_t len; /* 0: strlen */
    int want;   /* 200: answered, connection stays open; 400, 411 or 501: refused and closed */
    int by_mhd; /* refused by MHD itself before our layer: 0.9.75 writes that 400's head twice */
} wire_case;

static const wire_case WIRE[] = {
    {"valid", REQ_HEAD "Content-Length: 7\r\n\r\n" BODY, 0, 200, 0},
    {"chunked", REQ_HEAD "Transfer-Encoding: chunked\r\n\r\n7\r\n" BODY "\r\n0\r\n\r\n", 0, 200, 0},
    {"tab in a value", REQ_HEAD "X-A: a\tb\r\nContent-Length: 7\r\n\r\n" BODY, 0, 200, 0},
    {"two different Content-Length", REQ_HEAD "Content-Length: 7\r\nContent-Length: 2\r\n\r\n" BODY, 0, 400, 0},
    {"two equal Content-Length", REQ_HEAD "Content-Length: 7\r\nContent-Length: 7\r\n\r\n" BODY, 0, 400, 0},
    {"Content-Length list", REQ_HEAD "Content-Length: 7, 7\r\n\r\n" BODY, 0, 400, 1},
    {"Content-Length with a sign", REQ_HEAD "Content-Length: +7\r\n\r\n" BODY, 0, 400, 1},
    {"Content-Length not digits", REQ_HEAD "Content-Length: 7a\r\n\r\n" BODY, 0, 400, 1},
    {"Transfer-Encoding and Content-Length",
     REQ_HEAD "Transfer-Encoding: chunked\r\nContent-Length: 7\r\n\r\n7\r\n" BODY "\r\n0\r\n\r\n", 0, 400, 0},
    {"Transfer-Encoding gzip", REQ_HEAD "Transfer-Encoding: gzip\r\n\r\n" BODY, 0, 400, 0},
    {"gzip then chunked", REQ_HEAD "Transfer-Encoding: gzip, chunked\r\n\r\n7\r\n" BODY "\r\n0\r\n\r\n", 0, 501, 0},
    {"unknown coding then chunked, a request after it",
     REQ_HEAD "Transfer-Encoding: x-zip, chunked\r\n\r\n7\r\n" BODY "\r\n0\r\n\r\n"
              "GET /x HTTP/1.1\r\nHost: t\r\n\r\n",
     0, 501, 0},
    {"chunked with a parameter", REQ_HEAD "Transfer-Encoding: chunked;x=1\r\n\r\n7\r\n" BODY "\r\n0\r\n\r\n", 0, 501,
     0},
    {"chunked twice", REQ_HEAD "Transfer-Encoding: chunked, chunked\r\n\r\n7\r\n" BODY "\r\n0\r\n\r\n", 0, 400, 0},
    {"chunked not last", REQ_HEAD "Transfer-Encoding: chunked, gzip\r\n\r\n7\r\n" BODY "\r\n0\r\n\r\n", 0, 400, 0},
    {"two Transfer-Encoding",
     REQ_HEAD "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n7\r\n" BODY "\r\n0\r\n\r\n", 0, 400, 0},
    {"Transfer-Encoding in HTTP/1.0",
     "POST /echo HTTP/1.0\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n7\r\n" BODY "\r\n0\r\n\r\n", 0, 400, 0},
    {"obs-fold", REQ_HEAD "X-A: foo\r\n bar baz\r\nContent-Length: 7\r\n\r\n" BODY, 0, 400, 0},
    {"obs-fold of Content-Length", REQ_HEAD "Content-Length: 1\r\n 0\r\nX: y\r\n\r\n" BODY "abc", 0, 400, 0},
    {"obs-fold hiding a field", REQ_HEAD "X-A: foo\r\n\tContent-Length: 2\r\nContent-Length: 7\r\n\r\n" BODY, 0, 400,
     0},
    {"bare CR in a value", REQ_HEAD "X-A: foo\rbar\r\nContent-Length: 7\r\n\r\n" BODY, 0, 400, 0},
    {"control byte in a value",
     REQ_HEAD "X-A: foo\x01"
              "bar\r\nContent-Length: 7\r\n\r\n" BODY,
     0, 400, 0},
    {"space before the colon", REQ_HEAD "Content-Length : 2\r\nContent-Length: 7\r\n\r\n" BODY, 0, 400, 0},
    {"tab before the colon", REQ_HEAD "Content-Length\t: 7\r\n\r\n" BODY, 0, 400, 0},
    {"bare LF ending a line, then a second Content-Length",
     REQ_HEAD "X-A: foo\nContent-Length: 2\r\nContent-Length: 7\r\n\r\n" BODY, 0, 400, 0},
    {"no Host in HTTP/1.1", "POST /echo HTTP/1.1\r\nContent-Length: 7\r\n\r\n" BODY, 0, 400, 0},
    {"two Host", REQ_HEAD "Host: u\r\nContent-Length: 7\r\n\r\n" BODY, 0, 400, 0},
    {"Host not host[:port]", "POST /echo HTTP/1.1\r\nHost: a b\r\nContent-Length: 7\r\n\r\n" BODY, 0, 400, 0},
    /* MHD 0.9.75 ends the header section at a line with an empty field name after a field: the
     * POST it sees has no length (411), and the rest must not be read as another request */
    {"empty field name after a field", REQ_HEAD ": b\r\nContent-Length: 7\r\n\r\n" BODY, 0, 411, 0},
    {"POST without a length", REQ_HEAD "\r\n", 0, 411, 0},
};

static void test_framing_on_the_wire(void **state) {
    (void)state;
    lf__http_server *srv = start();
    const int port = lf__http_port(srv);
    for (size_t i = 0; i < sizeof WIRE / sizeof WIRE[0]; i++) {
        const wire_case *c = &WIRE[i];
        int fd = tcp_connect(port);
        assert_true(fd >= 0);
        assert_int_equal(send_all(fd, c->raw, c->len ? c->len : strlen(c->raw)), 0);
        int closed = 0;
        size_t n = 0;
        /* a refused request: the answer then the close (within 5 s); an
         * accepted one: the answer, and the connection still open 0.3 s on */
        char *got = read_some(fd, c->want != 200 ? 5.0 : 0.3, &n, &closed);
        const int st = status_of(got);
        if (st != c->want) fail_msg("%s: status %d, want %d: %.200s", c->name, st, c->want, got);
        if (c->want != 200) {
            if (!closed) fail_msg("%s: %d but the connection stayed open", c->name, st);
            if (!strstr(got, "Connection: close")) fail_msg("%s: %d without Connection: close", c->name, st);
            /* exactly one response: nothing of the request was read as another */
            if (!c->by_mhd && strstr(got, "\nHTTP/1.")) fail_msg("%s: a second response: %.300s", c->name, got);
        } else {
            if (closed) fail_msg("%s: 200 but the connection closed", c->name);
            if (!strstr(got, "body=7")) fail_msg("%s: the body was not read whole: %.200s", c->name, got);
        }
        free(got);
        close(fd);
    }
    lf__http_stop(srv);
}

/* ---------------------------------------------------------------- drain */

typedef struct drainer {
    lf__http_server *srv;
    double until;
    int left;
    pthread_t th;
} drainer;

static void *drain_main(void *arg) {
    drainer *d = arg;
    d->left = lf__http_drain(d->srv, d->until);
    return NULL;
}

/* Stages of one request held at the moment the drain begins. */
enum { ST_HEADERS, ST_PARTIAL, ST_DEFERRED, ST_STREAM, ST_UNSENT, ST_N };
static const char *const ST_NAME[ST_N] = {"headers only", "partial body", "deferred, unanswered",
                                          "stream mid-production", "stream with unsent bytes"};

#define BIG (12u << 20) /* more than the kernel's socket buffers take (4 MiB + the window) */

typedef struct client {
    int fd;
    int stage;
} client;

/* Put each stage in place: the clients' requests, the producers' state. */
static void setup_stages(lf__http_server *srv, int port, client *cl, lf__http_stream **st) {
    const char *head20 = "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 20\r\n\r\n";
    for (int i = 0; i < ST_N; i++) {
        cl[i].stage = i;
        cl[i].fd = tcp_connect(port);
        assert_true(cl[i].fd >= 0);
        st[i] = NULL;
    }
    close(cl[ST_UNSENT].fd); /* the unsent stage: a small window, so the bytes wait in the server */
    cl[ST_UNSENT].fd = tcp_connect_buf(port, 65536);
    assert_true(cl[ST_UNSENT].fd >= 0);
    assert_int_equal(send_all(cl[ST_HEADERS].fd, head20, strlen(head20)), 0);
    assert_int_equal(send_all(cl[ST_PARTIAL].fd, head20, strlen(head20)), 0);
    assert_int_equal(send_all(cl[ST_PARTIAL].fd, "0123456789", 10), 0);
    const char *get_defer = "GET /defer HTTP/1.1\r\nHost: t\r\n\r\n";
    const char *get_stream = "GET /stream HTTP/1.1\r\nHost: t\r\n\r\n";
    assert_int_equal(send_all(cl[ST_DEFERRED].fd, get_defer, strlen(get_defer)), 0);
    st[ST_DEFERRED] = take_pending();
    assert_non_null(st[ST_DEFERRED]);
    assert_int_equal(send_all(cl[ST_STREAM].fd, get_stream, strlen(get_stream)), 0);
    st[ST_STREAM] = take_pending();
    assert_non_null(st[ST_STREAM]);
    LF_ASSERT_OK(lf__http_stream_write(st[ST_STREAM], "data: 1\n\n", 9));
    assert_int_equal(send_all(cl[ST_UNSENT].fd, get_stream, strlen(get_stream)), 0);
    st[ST_UNSENT] = take_pending();
    assert_non_null(st[ST_UNSENT]);
    char *big = malloc(BIG);
    memset(big, 'x', BIG);
    LF_ASSERT_OK(lf__http_stream_write(st[ST_UNSENT], big, BIG));
    free(big);
    lf__http_stream_close(st[ST_UNSENT]); /* produced whole; the client has not read it */
    st[ST_UNSENT] = NULL;
    /* the headers-only and partial requests are in (their connections hold
     * a request record) before the drain starts */
    for (int i = 0; i < 2000 && lf__http_in_flight(srv) < ST_N; i++) usleep(1000);
    assert_int_equal(lf__http_in_flight(srv), ST_N);
}

/* A complete answer: "body=20" for the echo stages, the stream's whole
 * chunked body with its terminator, the deferred reply's body. */
static int complete(int stage, const char *raw, size_t len) {
    if (status_of(raw) != 200) return 0;
    switch (stage) {
    case ST_HEADERS:
    case ST_PARTIAL: return strstr(raw, "body=20") != NULL;
    case ST_DEFERRED: return strstr(raw, "deferred-ok") != NULL;
    case ST_STREAM: return strstr(raw, "data: 2") != NULL && len >= 5 && !memcmp(raw + len - 5, "0\r\n\r\n", 5);
    case ST_UNSENT: return len > BIG && !memcmp(raw + len - 5, "0\r\n\r\n", 5);
    }
    return 0;
}

/* An explicit error: a 503 (or the stream's error event, ended cleanly). */
static int explicit_error(int stage, const char *raw, size_t len) {
    if (status_of(raw) == 503) return 1;
    return stage == ST_STREAM && status_of(raw) == 200 && strstr(raw, "data: {\"error\"") && len >= 5 &&
           !memcmp(raw + len - 5, "0\r\n\r\n", 5);
}

static void *stop_main(void *arg) {
    lf__http_stop(arg);
    return NULL;
}

static void run_drain(int generous) {
    lf__http_server *srv = start();
    const int port = lf__http_port(srv);
    client cl[ST_N];
    lf__http_stream *st[ST_N];
    setup_stages(srv, port, cl, st);

    /* the drain begins (synchronously: a deadline already past), then waits */
    (void)lf__http_drain(srv, 0);
    drainer d = {.srv = srv, .until = lf_time_now() + (generous ? 30.0 : 0.0)};
    assert_int_equal(pthread_create(&d.th, NULL, drain_main, &d), 0);

    /* a request that arrives now: 503 and a close */
    int late = tcp_connect(port);
    assert_true(late >= 0);
    const char *get = "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nab";
    assert_int_equal(send_all(late, get, strlen(get)), 0);

    if (generous) {
        /* the rest arrives after the drain began; the producers finish */
        assert_int_equal(send_all(cl[ST_HEADERS].fd, "01234567890123456789", 20), 0);
        assert_int_equal(send_all(cl[ST_PARTIAL].fd, "0123456789", 10), 0);
        LF_ASSERT_OK(lf__http_stream_reply(st[ST_DEFERRED], 200, "text/plain", NULL, 0, "deferred-ok", 11));
        LF_ASSERT_OK(lf__http_stream_write(st[ST_STREAM], "data: 2\n\n", 9));
    } else {
        pthread_join(d.th, NULL);
        assert_true(d.left > 0); /* nothing could finish in no time */
        /* the producers cut their work with an explicit error, as serve does */
        LF_ASSERT_OK(lf__http_stream_reply(st[ST_DEFERRED], 503, "text/plain", NULL, 0, "cut", 3));
        LF_ASSERT_OK(lf__http_stream_write(st[ST_STREAM], "data: {\"error\":{}}\n\n", 20));
    }
    lf__http_stream_close(st[ST_DEFERRED]);
    lf__http_stream_close(st[ST_STREAM]);
    if (generous) {
        /* the slow reader reads now: everything queued leaves */
        int closed;
        size_t n;
        char *raw = read_some(cl[ST_UNSENT].fd, 5.0, &n, &closed); /* read while the drain runs */
        const int ok = complete(ST_UNSENT, raw, n);
        free(raw);
        if (!ok) fail_msg("generous drain: %s: not complete (%zu bytes)", ST_NAME[ST_UNSENT], n);
        const double t0 = lf_time_now();
        pthread_join(d.th, NULL);
        assert_true(lf_time_now() - t0 < 10.0); /* it ended when the work did, not at the deadline */
        assert_int_equal(d.left, 0);
    }

    /* the stop: a request still arriving gets 503; produced answers leave */
    pthread_t stopper;
    assert_int_equal(pthread_create(&stopper, NULL, stop_main, srv), 0);
    for (int i = ST_N - 1; i >= 0; i--) { /* the unsent bytes first: they have a second to leave */
        if (generous && i == ST_UNSENT) continue;
        int closed;
        size_t n;
        char *raw = read_some(cl[i].fd, 5.0, &n, &closed);
        const int ok = complete(i, raw, n) || (!generous && explicit_error(i, raw, n));
        if (!ok)
            fail_msg("%s drain: %s: neither complete nor an explicit error (%zu bytes): %.300s",
                     generous ? "generous" : "zero", ST_NAME[i], n, raw);
        if (generous && !complete(i, raw, n)) fail_msg("generous drain: %s: not complete: %.300s", ST_NAME[i], raw);
        free(raw);
        close(cl[i].fd);
    }
    int closed;
    size_t n;
    char *raw = read_some(late, 5.0, &n, &closed);
    if (status_of(raw) != 503 || !strstr(raw, "Connection: close"))
        fail_msg("a request after the drain began: %.300s", raw);
    free(raw);
    close(late);
    pthread_join(stopper, NULL);
}

static void test_drain_generous(void **state) {
    (void)state;
    run_drain(1);
}

static void test_drain_zero(void **state) {
    (void)state;
    run_drain(0);
}

/* ---------------------------------------------------------------- cancellation */

/* 32 streams whose clients reset together. Half of the producers write at
 * once after the reset: each of those writes fails (the write polls the
 * socket itself, so nothing the producer makes after the client left is
 * accepted, however late MHD's workers or the watchdog run). The other half
 * write nothing: the watchdog finds them (on_cancel) within a bound. */
static void test_reset_streams_cancelled(void **state) {
    (void)state;
    enum { N = 32 };
    lf__http_server *srv = start();
    const int port = lf__http_port(srv);
    int fd[N];
    lf__http_stream *st[N];
    const char *get_stream = "GET /stream HTTP/1.1\r\nHost: t\r\n\r\n";
    for (int i = 0; i < N; i++) {
        fd[i] = tcp_connect(port);
        assert_true(fd[i] >= 0);
        assert_int_equal(send_all(fd[i], get_stream, strlen(get_stream)), 0);
        st[i] = take_pending();
        assert_non_null(st[i]);
        LF_ASSERT_OK(lf__http_stream_write(st[i], "data: tok\n\n", 11));
    }
    for (int i = 0; i < N; i++) { /* each client has its first event: the stream is live */
        char buf[512];
        size_t got = 0;
        while (!memmem(buf, got, "data: tok", 9)) {
            ssize_t k = recv(fd[i], buf + got, sizeof buf - got, 0);
            assert_true(k > 0);
            got += (size_t)k;
        }
    }
    for (int i = 0; i < N; i++) { /* reset: RST */
        struct linger lg = {1, 0};
        setsockopt(fd[i], SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        close(fd[i]);
    }
    const double t0 = lf_time_now();
    int accepted = 0;
    for (int i = 0; i < N; i += 2) /* the producers' next token */
        if (lf__http_stream_write(st[i], "data: tok\n\n", 11) == LF_OK) accepted++;
    if (accepted) fail_msg("%d of %d writes right after the clients reset were accepted", accepted, N / 2);
    /* on_cancel: the writers' from their failed write, the idle ones' from the watchdog or MHD */
    while (atomic_load(&H.cancels) < N && lf_time_now() - t0 < 5.0) usleep(2000);
    const double dt = lf_time_now() - t0;
    if (atomic_load(&H.cancels) < N) fail_msg("only %d of the %d streams were cancelled", atomic_load(&H.cancels), N);
    assert_true(dt < 2.0); /* the watchdog ticks every 50 ms: generous */
    for (int i = 0; i < N; i++) {
        assert_true(lf__http_stream_cancelled(st[i]));
        lf__http_stream_close(st[i]);
    }
    printf("32 streams reset: 16 writes after it all refused; all 32 cancelled in %.3f s\n", dt);
    lf__http_stop(srv);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check_framing),           cmocka_unit_test(test_framing_on_the_wire),
        cmocka_unit_test(test_drain_generous),          cmocka_unit_test(test_drain_zero),
        cmocka_unit_test(test_reset_streams_cancelled),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
