/*
 * Tests of the HTTP layer (src/http/) and of the Prometheus endpoint's
 * and the live dashboard's resistance to slow clients through it.
 *
 * Every server listens on 127.0.0.1 port 0 (the kernel picks a free port),
 * so tests running in parallel never collide. Clients are raw POSIX sockets
 * (every socket operation has a timeout), so the tests control exactly what
 * bytes leave and when: idle connections, one byte at a time, bodies over
 * the cap, hang-ups in the middle of a stream.
 *
 * Timing model for the assertions: the watchdog looks at connections every
 * 50 ms, so a deadline fires within [D, D + 0.05 s] plus scheduling delay;
 * this machine is shared by several builds, so the upper bounds leave about
 * a second of slack for scheduling, and the lower bounds sit a little below
 * D (a connection closed well before its deadline is a bug just as one
 * closed long after). "Answers promptly" means within 2 s, when the failure
 * being guarded against takes 10 s (the old idle timeout) or forever.
 */
#define _GNU_SOURCE /* strcasestr, POLLRDHUP */
#include "test_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "llmforge/obs.h"
#include "http/http.h"

/* ---------------------------------------------------------------- client helpers */

static int tcp_connect(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
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

static int send_str(int fd, const char *s) { return send_all(fd, s, strlen(s)); }

typedef struct resp {
    int status;
    char *raw;
    char *head; /* status line + headers, NUL at the blank line */
    char *body;
    size_t body_len;
} resp;

static void resp_free(resp *r) {
    free(r->raw);
    memset(r, 0, sizeof *r);
}

/* Read until the peer closes (or 5 s of silence) and split head / body. */
static resp read_resp(int fd) {
    resp r = {0};
    size_t cap = 1 << 16, got = 0;
    r.raw = malloc(cap);
    for (;;) {
        if (got + 1 >= cap) {
            cap *= 2;
            r.raw = realloc(r.raw, cap);
        }
        ssize_t k = recv(fd, r.raw + got, cap - 1 - got, 0);
        if (k <= 0) break;
        got += (size_t)k;
    }
    r.raw[got] = '\0';
    char *sep = strstr(r.raw, "\r\n\r\n");
    if (sep && sscanf(r.raw, "HTTP/1.%*d %d", &r.status) == 1) {
        *sep = '\0';
        r.head = r.raw;
        r.body = sep + 4;
        r.body_len = got - (size_t)(r.body - r.raw);
    }
    return r;
}

/* One request on a fresh connection; the response read until close. */
static resp request(int port, const char *req, size_t req_len) {
    resp r = {0};
    int fd = tcp_connect(port);
    if (fd < 0) return r;
    if (send_all(fd, req, req_len) == 0) r = read_resp(fd);
    close(fd);
    return r;
}

static resp get(int port, const char *path) {
    char req[512];
    snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: t\r\n\r\n", path);
    return request(port, req, strlen(req));
}

static const char *header_of(const resp *r, const char *name) {
    static char val[512];
    if (!r->head) return NULL;
    size_t nl = strlen(name);
    for (const char *p = strstr(r->head, "\r\n"); p; p = strstr(p + 2, "\r\n")) {
        const char *l = p + 2;
        if (strncasecmp(l, name, nl) == 0 && l[nl] == ':') {
            const char *v = l + nl + 1;
            while (*v == ' ') v++;
            const char *e = strstr(v, "\r\n");
            size_t n = e ? (size_t)(e - v) : strlen(v);
            if (n >= sizeof val) n = sizeof val - 1;
            memcpy(val, v, n);
            val[n] = '\0';
            return val;
        }
    }
    return NULL;
}

/* Decode a chunked body in place; returns its length, or -1 if malformed or
 * unterminated (no last chunk). */
static long dechunk(char *b, size_t len) {
    size_t in = 0, out = 0;
    for (;;) {
        char *end = NULL;
        if (in >= len) return -1;
        unsigned long n = strtoul(b + in, &end, 16);
        if (end == b + in) return -1;
        char *crlf = strstr(end, "\r\n");
        if (!crlf) return -1;
        in = (size_t)(crlf - b) + 2;
        if (n == 0) return (long)out;
        if (in + n + 2 > len) return -1;
        memmove(b + out, b + in, n);
        out += n;
        in += n + 2;
    }
}

/* 1 when the peer closed fd (EOF or reset) within `timeout` seconds; data
 * that arrives first is read and skipped. Sets *when to the seconds taken. */
static int wait_closed(int fd, double timeout, double *when) {
    double t0 = lf_time_now();
    static char buf[1 << 16];
    for (;;) {
        double left = timeout - (lf_time_now() - t0);
        if (left <= 0) return 0;
        struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
        int k = poll(&p, 1, (int)(left * 1000) + 1);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return 0;
        ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            if (when) *when = lf_time_now() - t0;
            return 1;
        }
    }
}

/* 1 when fd is still open: no EOF, no reset, no data pending. */
static int still_open(int fd) {
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    return poll(&p, 1, 0) == 0;
}

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* ---------------------------------------------------------------- a test server */

typedef struct tserver {
    lf__http_server *srv;
    int port;
    /* deferred work handed to the test's producer */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    lf__http_stream *pending;
    char pending_path[128];
    int cancels;      /* on_cancel calls */
    int handled;      /* on_request calls */
} tserver;

static void on_cancel(void *user) {
    tserver *t = user;
    pthread_mutex_lock(&t->mu);
    t->cancels++;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

/* /echo: the method, path, query, header X-Test and the body, as text.
 * /defer*: handed to the test through t->pending. /silent: no answer.
 * /big: 3 MB. Anything else: 404. */
static void handler(lf__http_request *r, void *user) {
    tserver *t = user;
    pthread_mutex_lock(&t->mu);
    t->handled++;
    pthread_mutex_unlock(&t->mu);
    const char *path = lf__http_path(r);
    if (strcmp(path, "/echo") == 0) {
        size_t blen = 0;
        const char *body = lf__http_body(r, &blen);
        const char *xt = lf__http_header_value(r, "x-test");
        char head[1024];
        int n = snprintf(head, sizeof head, "%s %s ?%s x-test=%s body=%zu:", lf__http_method(r), path,
                         lf__http_query(r), xt ? xt : "(none)", blen);
        char *out = malloc((size_t)n + blen + 1);
        memcpy(out, head, (size_t)n);
        if (blen) memcpy(out + n, body, blen);
        lf__http_header h[] = {{"X-Reply", "yes"}, {"Retry-After", "7"}};
        LF_ASSERT_OK(lf__http_reply(r, 200, "application/octet-stream", h, 2, out, (size_t)n + blen));
        /* a second answer is refused */
        assert_int_equal(lf__http_reply_text(r, 200, "again"), LF_ERR_INVALID_ARG);
        free(out);
    } else if (strncmp(path, "/defer", 6) == 0) {
        lf__http_stream *s = NULL;
        LF_ASSERT_OK(lf__http_defer(r, on_cancel, t, &s));
        pthread_mutex_lock(&t->mu);
        t->pending = s;
        snprintf(t->pending_path, sizeof t->pending_path, "%s", path);
        pthread_cond_broadcast(&t->cv);
        pthread_mutex_unlock(&t->mu);
    } else if (strcmp(path, "/silent") == 0) {
        /* no answer: the layer must send a 500 */
    } else if (strcmp(path, "/big") == 0) {
        size_t n = 3u << 20;
        char *b = malloc(n);
        for (size_t i = 0; i < n; i++) b[i] = (char)('a' + i % 26);
        LF_ASSERT_OK(lf__http_reply(r, 200, "text/plain", NULL, 0, b, n));
        free(b);
    } else {
        LF_ASSERT_OK(lf__http_reply_text(r, 404, "nope\n"));
    }
}

/* on_headers: /early is answered before its body is read. */
static void early(lf__http_request *r, void *user) {
    (void)user;
    if (strcmp(lf__http_path(r), "/early") == 0) {
        assert_null(lf__http_body(r, NULL));
        lf__http_stream *s = (lf__http_stream *)0x1;
        assert_int_equal(lf__http_defer(r, NULL, NULL, &s), LF_ERR_INVALID_ARG);
        assert_null(s);
        LF_ASSERT_OK(lf__http_reply_text(r, 401, "early\n"));
    }
}

static char *json_error(int status, const char *message, const char **ctype, void *user) {
    (void)user;
    *ctype = "application/json";
    char *b = malloc(strlen(message) + 64);
    sprintf(b, "{\"status\":%d,\"message\":\"%s\"}", status, message);
    return b;
}

static void tserver_start(tserver *t, int cap, double deadline, size_t max_body) {
    memset(t, 0, sizeof *t);
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    lf__http_opts o = {
        .what = "test",
        .host = "127.0.0.1",
        .port = 0,
        .threads = 2,
        .max_connections = cap,
        .request_deadline_s = deadline,
        .max_body = max_body,
        .on_headers = early,
        .on_request = handler,
        .error_body = json_error,
        .user = t,
    };
    LF_ASSERT_OK(lf__http_start(&t->srv, &o));
    t->port = lf__http_port(t->srv);
    assert_true(t->port > 0 && t->port < 65536);
}

static void tserver_stop(tserver *t) {
    lf__http_stop(t->srv);
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
}

/* The stream the handler deferred (waits up to 5 s). */
static lf__http_stream *take_pending(tserver *t) {
    pthread_mutex_lock(&t->mu);
    double t0 = lf_time_now();
    while (!t->pending && lf_time_now() - t0 < 5) {
        pthread_mutex_unlock(&t->mu);
        sleep_s(0.005);
        pthread_mutex_lock(&t->mu);
    }
    lf__http_stream *s = t->pending;
    t->pending = NULL;
    pthread_mutex_unlock(&t->mu);
    assert_non_null(s);
    return s;
}

static int wait_cancels(tserver *t, int n, double timeout) {
    double t0 = lf_time_now();
    pthread_mutex_lock(&t->mu);
    while (t->cancels < n && lf_time_now() - t0 < timeout) {
        pthread_mutex_unlock(&t->mu);
        sleep_s(0.01);
        pthread_mutex_lock(&t->mu);
    }
    int c = t->cancels;
    pthread_mutex_unlock(&t->mu);
    return c;
}

/* ---------------------------------------------------------------- tests */

static void test_requests(void **state) {
    (void)state;
    tserver t;
    tserver_start(&t, 16, 5, 1000);

    resp r = get(t.port, "/echo?a=1&b=%20x");
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "GET /echo ?a=1&b=%20x x-test=(none) body=0:");
    assert_string_equal(header_of(&r, "X-Reply"), "yes");
    assert_string_equal(header_of(&r, "Retry-After"), "7");
    assert_string_equal(header_of(&r, "Content-Type"), "application/octet-stream");
    resp_free(&r);

    /* a body with a NUL byte in it, delivered whole */
    static const char post[] = "POST /echo HTTP/1.0\r\nX-Test: hi\r\nContent-Length: 7\r\n\r\nab\0cdef";
    r = request(t.port, post, sizeof post - 1);
    assert_int_equal(r.status, 200);
    static const char want[] = "POST /echo ? x-test=hi body=7:ab\0cdef";
    assert_int_equal(r.body_len, sizeof want - 1);
    assert_memory_equal(r.body, want, sizeof want - 1);
    resp_free(&r);

    /* chunked body under the cap, HTTP/1.1 with Connection: close */
    static const char chunked[] = "POST /echo HTTP/1.1\r\nHost: t\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n"
                                  "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
    r = request(t.port, chunked, sizeof chunked - 1);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "body=5:abcde"));
    resp_free(&r);

    /* HEAD: headers only */
    r = request(t.port, "HEAD /echo HTTP/1.0\r\n\r\n", strlen("HEAD /echo HTTP/1.0\r\n\r\n"));
    assert_int_equal(r.status, 200);
    assert_int_equal(r.body_len, 0);
    resp_free(&r);

    /* answered from on_headers: the body is never read, and the status comes
     * before the client sends it */
    int fd = tcp_connect(t.port);
    assert_true(fd >= 0);
    assert_int_equal(send_str(fd, "POST /early HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n"), 0);
    r = read_resp(fd);
    close(fd);
    assert_int_equal(r.status, 401);
    assert_string_equal(r.body, "early\n");
    resp_free(&r);

    /* a handler that gives no answer: 500 through error_body */
    r = get(t.port, "/silent");
    assert_int_equal(r.status, 500);
    assert_string_equal(header_of(&r, "Content-Type"), "application/json");
    assert_non_null(strstr(r.body, "\"status\":500"));
    resp_free(&r);

    r = get(t.port, "/nothing");
    assert_int_equal(r.status, 404);
    resp_free(&r);

    /* keep-alive: two requests on one connection, each answered */
    fd = tcp_connect(t.port);
    assert_int_equal(send_str(fd, "GET /echo?1 HTTP/1.1\r\nHost: t\r\n\r\n"), 0);
    char buf[4096];
    ssize_t k = recv(fd, buf, sizeof buf - 1, 0);
    assert_true(k > 0);
    buf[k] = '\0';
    assert_non_null(strstr(buf, "HTTP/1.1 200"));
    assert_non_null(strstr(buf, "?1 x-test"));
    assert_int_equal(send_str(fd, "GET /echo?2 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"), 0);
    r = read_resp(fd);
    close(fd);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "?2 x-test"));
    resp_free(&r);

    /* a large reply arrives whole */
    r = get(t.port, "/big");
    assert_int_equal(r.status, 200);
    assert_int_equal(r.body_len, 3u << 20);
    assert_int_equal(r.body[(3u << 20) - 1], (char)('a' + ((3u << 20) - 1) % 26));
    resp_free(&r);
    tserver_stop(&t);
}

static void test_body_cap(void **state) {
    (void)state;
    tserver t;
    tserver_start(&t, 16, 5, 1000);
    char req[2048];

    /* exactly the cap: accepted */
    char body[1001];
    memset(body, 'x', sizeof body);
    int n = snprintf(req, sizeof req, "POST /echo HTTP/1.0\r\nContent-Length: 1000\r\n\r\n");
    memcpy(req + n, body, 1000);
    resp r = request(t.port, req, (size_t)n + 1000);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "body=1000:xxx"));
    resp_free(&r);

    /* one byte over, announced: 413 before a byte of the body is sent */
    int fd = tcp_connect(t.port);
    assert_int_equal(send_str(fd, "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 1001\r\n\r\n"), 0);
    r = read_resp(fd);
    close(fd);
    assert_int_equal(r.status, 413);
    assert_non_null(strstr(r.body, "1001 bytes is larger than the 1000-byte limit"));
    resp_free(&r);

    /* 10 MB announced: 413 at once */
    double t0 = lf_time_now();
    static const char ten_mb[] = "POST /echo HTTP/1.0\r\nContent-Length: 10485760\r\n\r\n";
    r = request(t.port, ten_mb, sizeof ten_mb - 1);
    assert_int_equal(r.status, 413);
    assert_true(lf_time_now() - t0 < 2.0);
    resp_free(&r);

    /* chunked, over the cap only once the chunks add up: 413 too */
    fd = tcp_connect(t.port);
    assert_int_equal(send_str(fd, "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"), 0);
    char chunk[700];
    memset(chunk, 'y', sizeof chunk);
    for (int i = 0; i < 3; i++) {
        char h[16];
        snprintf(h, sizeof h, "%zx\r\n", sizeof chunk);
        assert_int_equal(send_str(fd, h), 0);
        assert_int_equal(send_all(fd, chunk, sizeof chunk), 0);
        assert_int_equal(send_str(fd, "\r\n"), 0);
    }
    assert_int_equal(send_str(fd, "0\r\n\r\n"), 0);
    char buf[4096];
    ssize_t k = recv(fd, buf, sizeof buf - 1, 0);
    close(fd);
    assert_true(k > 0);
    buf[k] = '\0';
    assert_non_null(strstr(buf, "HTTP/1.1 413"));
    assert_non_null(strstr(buf, "larger than the 1000-byte limit"));

    lf__http_stats st;
    lf__http_stats_get(t.srv, &st);
    assert_int_equal(st.too_large, 3);
    /* still serving */
    r = get(t.port, "/echo");
    assert_int_equal(r.status, 200);
    resp_free(&r);
    tserver_stop(&t);
}

/* The probe: 32 idle connections made a scrape wait ~10 s. */
static void test_idle_connections_do_not_block(void **state) {
    (void)state;
    tserver t;
    tserver_start(&t, 32, 10, 0);
    int fds[40];
    for (int i = 0; i < 40; i++) {
        fds[i] = tcp_connect(t.port);
        assert_true(fds[i] >= 0);
    }
    double t0 = lf_time_now();
    resp r = get(t.port, "/echo");
    double dt = lf_time_now() - t0;
    assert_int_equal(r.status, 200);
    if (dt > 2.0) fail_msg("GET took %.2f s behind 40 idle connections", dt);
    resp_free(&r);
    /* 41 connections met a cap of 32: 9 idle ones made room (8 if the GET's
     * own connection had closed before the last idle ones were accepted) */
    lf__http_stats st;
    double t1 = lf_time_now();
    do {
        sleep_s(0.01);
        lf__http_stats_get(t.srv, &st);
    } while (st.accepted < 41 && lf_time_now() - t1 < 2.0);
    assert_int_equal(st.accepted, 41);
    if (st.dropped_idle < 8 || st.dropped_idle > 9) fail_msg("%llu idle connections dropped, want 8 or 9",
                                                              (unsigned long long)st.dropped_idle);
    assert_int_equal(st.refused, 0);
    assert_true(st.open <= 32);
    for (int i = 0; i < 40; i++) close(fds[i]);
    tserver_stop(&t);
}

/* 32 clients each trickling a request one byte at a time. */
typedef struct trickle {
    int *fds;
    int n;
    double interval;
    double until;
    double closed_at[64]; /* seconds after the start, 0 = not seen closed */
    double t0;
} trickle;

static void *trickle_main(void *arg) {
    trickle *tr = arg;
    static const char req[] = "GET /echo HTTP/1.1\r\nHost: t\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n";
    size_t pos = 0;
    while (lf_time_now() < tr->until) {
        for (int i = 0; i < tr->n; i++) {
            if (tr->closed_at[i] > 0) continue;
            if (!still_open(tr->fds[i]) || send(tr->fds[i], req + pos % (sizeof req - 1), 1, MSG_NOSIGNAL) != 1)
                tr->closed_at[i] = lf_time_now() - tr->t0;
        }
        pos++;
        sleep_s(tr->interval);
    }
    return NULL;
}

static void test_trickling_clients(void **state) {
    (void)state;
    tserver t;
    const double D = 2.0;
    tserver_start(&t, 32, D, 0);
    int fds[32];
    for (int i = 0; i < 32; i++) {
        fds[i] = tcp_connect(t.port);
        assert_true(fds[i] >= 0);
    }
    trickle tr = {.fds = fds, .n = 32, .interval = 0.25, .t0 = lf_time_now()};
    tr.until = tr.t0 + D + 1.2;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, trickle_main, &tr), 0);
    /* while they trickle (an idle timer would never fire), requests are served */
    for (int i = 0; i < 5; i++) {
        double t0 = lf_time_now();
        resp r = get(t.port, "/echo");
        double dt = lf_time_now() - t0;
        assert_int_equal(r.status, 200);
        if (dt > 2.0) fail_msg("GET %d took %.2f s behind 32 trickling clients", i, dt);
        resp_free(&r);
        sleep_s(0.2);
    }
    pthread_join(th, NULL);
    /* and the deadline closed the tricklers: not long before D, not long after.
     * The 5 GETs above each made room by dropping the oldest trickler. */
    int closed = 0, early_drop = 0;
    for (int i = 0; i < 32; i++) {
        if (tr.closed_at[i] == 0) fail_msg("trickling connection %d still open after %.1f s", i, D + 1.2);
        if (tr.closed_at[i] < D - 0.2) early_drop++;
        else closed++;
        close(fds[i]);
    }
    lf__http_stats st;
    lf__http_stats_get(t.srv, &st);
    assert_true(early_drop <= 5);
    assert_int_equal((int)st.dropped_idle, early_drop);
    assert_true(st.deadline >= (uint64_t)closed);
    tserver_stop(&t);
}

/* A request whose headers trickle past the deadline is closed at the deadline. */
static void test_deadline(void **state) {
    (void)state;
    tserver t;
    const double D = 1.5;
    tserver_start(&t, 16, D, 100);
    int slow = tcp_connect(t.port), idle = tcp_connect(t.port), ok = tcp_connect(t.port);
    assert_true(slow >= 0 && idle >= 0 && ok >= 0);
    double t0 = lf_time_now();
    static const char req[] = "GET /echo HTTP/1.0\r\nHost: t\r\n\r\n"; /* 31 bytes */
    assert_int_equal(send_str(slow, "GET /echo HTTP/1.1\r\nHost: t\r\nX-Slow: "), 0);
    /* `ok` sends its request over ~0.9 s: inside the deadline, answered */
    for (size_t i = 0; i < sizeof req - 1; i++) {
        assert_int_equal(send(ok, req + i, 1, MSG_NOSIGNAL), 1);
        sleep_s(0.03);
    }
    resp r = read_resp(ok);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    close(ok);
    /* `slow` keeps sending a header byte every 100 ms, `idle` sends nothing */
    double slow_closed = 0;
    while (lf_time_now() - t0 < D + 1.5) {
        if (send(slow, "x", 1, MSG_NOSIGNAL) != 1 || !still_open(slow)) {
            slow_closed = lf_time_now() - t0;
            break;
        }
        sleep_s(0.1);
    }
    double w = 0;
    int idle_closed = wait_closed(idle, D + 1.5 - (lf_time_now() - t0), &w);
    double idle_at = lf_time_now() - t0;
    if (slow_closed < D - 0.1 || slow_closed > D + 1.0) fail_msg("trickling headers closed at %.2f s (deadline %.1f s)",
                                                                   slow_closed, D);
    assert_true(idle_closed);
    if (idle_at < D - 0.1 || idle_at > D + 1.0) fail_msg("idle connection closed at %.2f s (deadline %.1f)", idle_at, D);
    close(slow);
    close(idle);
    lf__http_stats st;
    lf__http_stats_get(t.srv, &st);
    assert_int_equal(st.deadline, 2);
    /* a slow body counts against the same deadline */
    int b = tcp_connect(t.port);
    assert_int_equal(send_str(b, "POST /echo HTTP/1.0\r\nContent-Length: 50\r\n\r\n"), 0);
    t0 = lf_time_now();
    double bc = 0;
    while (lf_time_now() - t0 < D + 1.5) {
        if (send(b, "z", 1, MSG_NOSIGNAL) != 1 || !still_open(b)) {
            bc = lf_time_now() - t0;
            break;
        }
        sleep_s(0.1);
    }
    close(b);
    if (bc == 0 || bc > D + 1.0) fail_msg("trickling body not closed by the deadline (%.2f s)", bc);
    /* a truncated chunked body from a client that then waits: a 408 that says
     * why, at the deadline */
    int tc = tcp_connect(t.port);
    t0 = lf_time_now();
    assert_int_equal(send_str(tc, "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab"), 0);
    r = read_resp(tc);
    double dt = lf_time_now() - t0;
    close(tc);
    assert_int_equal(r.status, 408);
    assert_string_equal(header_of(&r, "Content-Type"), "application/json");
    assert_non_null(strstr(r.body, "\"status\":408"));
    assert_non_null(strstr(r.body, "1.5-second deadline"));
    resp_free(&r);
    if (dt < D - 0.1 || dt > D + 1.0) fail_msg("408 after %.2f s (deadline %.1f s)", dt, D);
    tserver_stop(&t);
}

static void test_oldest_idle_dropped(void **state) {
    (void)state;
    tserver t;
    tserver_start(&t, 4, 30, 0);
    int c[7];
    for (int i = 0; i < 4; i++) {
        c[i] = tcp_connect(t.port);
        assert_true(c[i] >= 0);
        sleep_s(0.03); /* distinct ages */
    }
    sleep_s(0.1);
    /* a fifth: the oldest (c[0]) goes, the others stay */
    c[4] = tcp_connect(t.port);
    assert_true(wait_closed(c[0], 1.0, NULL));
    for (int i = 1; i < 4; i++) assert_true(still_open(c[i]));
    /* the newcomer is served */
    assert_int_equal(send_str(c[4], "GET /echo HTTP/1.0\r\n\r\n"), 0);
    resp r = read_resp(c[4]);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    close(c[4]);
    c[4] = -1;
    sleep_s(0.1);
    /* a connection busy with a deferred request is not idle: it survives */
    assert_int_equal(send_str(c[1], "GET /defer HTTP/1.0\r\n\r\n"), 0);
    lf__http_stream *s = take_pending(&t);
    c[5] = tcp_connect(t.port); /* c[1] busy, c[2], c[3], c[5]: at the cap */
    sleep_s(0.1);
    assert_true(still_open(c[2]));
    c[6] = tcp_connect(t.port); /* over it */
    assert_true(wait_closed(c[2], 1.0, NULL)); /* the oldest idle one, not the older busy c[1] */
    assert_true(still_open(c[1]));
    assert_true(still_open(c[3]));
    assert_true(still_open(c[5]));
    assert_true(still_open(c[6]));
    LF_ASSERT_OK(lf__http_stream_reply(s, 200, "text/plain", NULL, 0, "late", 4));
    lf__http_stream_close(s);
    r = read_resp(c[1]);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "late");
    resp_free(&r);
    lf__http_stats st;
    lf__http_stats_get(t.srv, &st);
    assert_int_equal(st.dropped_idle, 2);
    assert_int_equal(st.refused, 0);
    for (int i = 0; i < 7; i++)
        if (c[i] >= 0) close(c[i]); /* never twice: the number may be a server socket by now */

    /* every connection busy: the newcomer is the one refused */
    sleep_s(0.2);
    int busy[4];
    lf__http_stream *ss[4];
    for (int i = 0; i < 4; i++) {
        busy[i] = tcp_connect(t.port);
        assert_int_equal(send_str(busy[i], "GET /defer HTTP/1.0\r\n\r\n"), 0);
        ss[i] = take_pending(&t);
    }
    int extra = tcp_connect(t.port);
    assert_true(extra >= 0);
    assert_true(wait_closed(extra, 1.0, NULL));
    close(extra);
    for (int i = 0; i < 4; i++) {
        assert_true(still_open(busy[i]));
        LF_ASSERT_OK(lf__http_stream_reply(ss[i], 200, "text/plain", NULL, 0, "ok", 2));
        lf__http_stream_close(ss[i]);
        r = read_resp(busy[i]);
        assert_int_equal(r.status, 200);
        resp_free(&r);
        close(busy[i]);
    }
    lf__http_stats_get(t.srv, &st);
    assert_int_equal(st.refused, 1);
    tserver_stop(&t);
}

/* Server-sent events from a producer thread, read as they are written. */
typedef struct sse_prod {
    tserver *t;
    lf__http_stream *s;
    volatile int client_got_first;
    lf_status last;
    int writes_ok;
    int mode; /* 0: 5 events, waiting for the client after the first; 1: write until an error */
} sse_prod;

static void *sse_main(void *arg) {
    sse_prod *p = arg;
    lf__http_header h[] = {{"Cache-Control", "no-cache"}};
    p->last = lf__http_stream_begin(p->s, 200, "text/event-stream", h, 1);
    if (p->last != LF_OK) return NULL;
    if (p->mode == 0) {
        for (int i = 0; i < 5; i++) {
            char ev[64];
            snprintf(ev, sizeof ev, "data: {\"i\":%d}\n\n", i);
            p->last = lf__http_stream_write(p->s, ev, strlen(ev));
            if (p->last != LF_OK) break;
            p->writes_ok++;
            if (i == 0) { /* the first event must reach the client before the rest exists */
                double t0 = lf_time_now();
                while (!p->client_got_first && lf_time_now() - t0 < 5) sleep_s(0.005);
            }
        }
        lf__http_stream_close(p->s);
    } else {
        for (int i = 0; i < 100000; i++) {
            p->last = lf__http_stream_write(p->s, "data: x\n\n", 9);
            if (p->last != LF_OK) break;
            p->writes_ok++;
            sleep_s(0.002);
        }
        assert_true(lf__http_stream_cancelled(p->s));
        lf__http_stream_close(p->s);
    }
    return NULL;
}

static void test_stream_sse(void **state) {
    (void)state;
    tserver t;
    tserver_start(&t, 16, 5, 0);
    int fd = tcp_connect(t.port);
    assert_int_equal(send_str(fd, "GET /defer-sse HTTP/1.1\r\nHost: t\r\n\r\n"), 0);
    sse_prod p = {.t = &t, .s = take_pending(&t), .mode = 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, sse_main, &p), 0);
    char buf[8192];
    size_t got = 0;
    double t0 = lf_time_now();
    while (!strstr(buf, "data: {\"i\":0}\n\n") && lf_time_now() - t0 < 5) {
        ssize_t k = recv(fd, buf + got, sizeof buf - 1 - got, 0);
        if (k <= 0) break;
        got += (size_t)k;
        buf[got] = '\0';
    }
    assert_non_null(strstr(buf, "data: {\"i\":0}\n\n"));
    assert_null(strstr(buf, "\"i\":1"));
    p.client_got_first = 1;
    /* the rest, up to the terminating chunk */
    while (!strstr(buf, "\r\n0\r\n\r\n") && lf_time_now() - t0 < 5) {
        ssize_t k = recv(fd, buf + got, sizeof buf - 1 - got, 0);
        if (k <= 0) break;
        got += (size_t)k;
        buf[got] = '\0';
    }
    pthread_join(th, NULL);
    assert_int_equal(p.last, LF_OK);
    assert_int_equal(p.writes_ok, 5);
    char *sep = strstr(buf, "\r\n\r\n");
    assert_non_null(sep);
    *sep = '\0';
    assert_non_null(strstr(buf, "HTTP/1.1 200"));
    assert_non_null(strcasestr(buf, "Content-Type: text/event-stream"));
    assert_non_null(strcasestr(buf, "Transfer-Encoding: chunked"));
    assert_non_null(strcasestr(buf, "Cache-Control: no-cache"));
    char *body = sep + 4;
    long n = dechunk(body, got - (size_t)(body - buf));
    assert_true(n > 0);
    body[n] = '\0';
    assert_string_equal(body, "data: {\"i\":0}\n\ndata: {\"i\":1}\n\ndata: {\"i\":2}\n\ndata: {\"i\":3}\n\ndata: {\"i\":4}\n\n");
    /* the connection is kept alive after a stream that ended cleanly */
    assert_int_equal(send_str(fd, "GET /echo HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"), 0);
    resp r = read_resp(fd);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    close(fd);
    assert_int_equal(wait_cancels(&t, 1, 0.2), 0); /* nothing was cancelled */
    tserver_stop(&t);
}

static void test_stream_disconnect(void **state) {
    (void)state;
    tserver t;
    tserver_start(&t, 16, 5, 0);

    /* 1. the producer is waiting (the connection is suspended): the hang-up is
     * seen by the watchdog and reported through on_cancel */
    int fd = tcp_connect(t.port);
    assert_int_equal(send_str(fd, "GET /defer HTTP/1.1\r\nHost: t\r\n\r\n"), 0);
    lf__http_stream *s = take_pending(&t);
    LF_ASSERT_OK(lf__http_stream_begin(s, 200, "text/event-stream", NULL, 0));
    LF_ASSERT_OK(lf__http_stream_write(s, "data: 1\n\n", 9));
    char buf[1024];
    ssize_t k = recv(fd, buf, sizeof buf, 0);
    assert_true(k > 0);
    sleep_s(0.1); /* the reader has run dry: suspended */
    close(fd);
    assert_int_equal(wait_cancels(&t, 1, 1.5), 1);
    assert_true(lf__http_stream_cancelled(s));
    assert_int_equal(lf__http_stream_write(s, "data: 2\n\n", 9), LF_ERR_IO);
    lf__http_stream_close(s);

    /* 2. the producer is writing: a write fails soon after the hang-up */
    fd = tcp_connect(t.port);
    assert_int_equal(send_str(fd, "GET /defer HTTP/1.1\r\nHost: t\r\n\r\n"), 0);
    sse_prod p = {.t = &t, .s = take_pending(&t), .mode = 1};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, sse_main, &p), 0);
    k = recv(fd, buf, sizeof buf, 0);
    assert_true(k > 0);
    double t0 = lf_time_now();
    close(fd);
    pthread_join(th, NULL);
    double dt = lf_time_now() - t0;
    assert_int_equal(p.last, LF_ERR_IO);
    if (dt > 2.0) fail_msg("the producer kept writing %.2f s after the client left", dt);
    assert_int_equal(wait_cancels(&t, 2, 1.0), 2);

    /* 3. a deferred (not yet begun) reply whose client leaves */
    fd = tcp_connect(t.port);
    assert_int_equal(send_str(fd, "POST /defer HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n"), 0);
    s = take_pending(&t);
    sleep_s(0.05);
    close(fd);
    assert_int_equal(wait_cancels(&t, 3, 1.5), 3);
    assert_int_equal(lf__http_stream_reply(s, 200, "text/plain", NULL, 0, "x", 1), LF_ERR_IO);
    lf__http_stream_close(s);

    lf__http_stats st;
    lf__http_stats_get(t.srv, &st);
    assert_int_equal(st.disconnects, 3);
    /* a client that does not read: the stream buffer cap cancels the stream */
    tserver_stop(&t);
}

static void test_deferred_reply(void **state) {
    (void)state;
    tserver t;
    tserver_start(&t, 16, 5, 0);
    int fd = tcp_connect(t.port);
    assert_int_equal(send_str(fd, "GET /defer HTTP/1.0\r\n\r\n"), 0);
    lf__http_stream *s = take_pending(&t);
    sleep_s(0.2); /* the connection waits, suspended, past several watchdog ticks */
    assert_true(still_open(fd));
    lf__http_header h[] = {{"Retry-After", "2"}};
    LF_ASSERT_OK(lf__http_stream_reply(s, 503, "application/json", h, 1, "{\"busy\":1}", 10));
    /* one answer only; writes are for begun streams */
    assert_int_equal(lf__http_stream_begin(s, 200, "text/plain", NULL, 0), LF_ERR_INVALID_ARG);
    assert_int_equal(lf__http_stream_write(s, "x", 1), LF_ERR_INVALID_ARG);
    lf__http_stream_close(s);
    resp r = read_resp(fd);
    close(fd);
    assert_int_equal(r.status, 503);
    assert_string_equal(header_of(&r, "Retry-After"), "2");
    assert_string_equal(header_of(&r, "Content-Length"), "10");
    assert_string_equal(r.body, "{\"busy\":1}");
    resp_free(&r);

    /* a producer that closes without answering: 500 */
    fd = tcp_connect(t.port);
    assert_int_equal(send_str(fd, "GET /defer HTTP/1.0\r\n\r\n"), 0);
    s = take_pending(&t);
    lf__http_stream_close(s);
    r = read_resp(fd);
    close(fd);
    assert_int_equal(r.status, 500);
    assert_non_null(strstr(r.body, "never produced"));
    resp_free(&r);

    /* bad arguments */
    assert_int_equal(lf__http_stream_write(NULL, "x", 1), LF_ERR_INVALID_ARG);
    assert_int_equal(lf__http_stream_cancelled(NULL), 1);
    lf__http_stream_close(NULL);
    tserver_stop(&t);
}

typedef struct slow_reader_arg {
    lf__http_stream *s;
    lf_status st;
    size_t written;
} slow_reader_arg;

/* A client that never reads its stream: the producer is told, not blocked. */
static void test_stream_buffer_cap(void **state) {
    (void)state;
    tserver t;
    memset(&t, 0, sizeof t);
    pthread_mutex_init(&t.mu, NULL);
    pthread_cond_init(&t.cv, NULL);
    lf__http_opts o = {.port = 0, .max_stream_buffer = 1 << 20, .on_request = handler, .user = &t};
    LF_ASSERT_OK(lf__http_start(&t.srv, &o));
    t.port = lf__http_port(t.srv);
    int fd = tcp_connect(t.port);
    assert_int_equal(send_str(fd, "GET /defer HTTP/1.1\r\nHost: t\r\n\r\n"), 0);
    lf__http_stream *s = take_pending(&t);
    LF_ASSERT_OK(lf__http_stream_begin(s, 200, "text/event-stream", NULL, 0));
    char chunk[65536];
    memset(chunk, 'q', sizeof chunk);
    lf_status st = LF_OK;
    size_t written = 0;
    double t0 = lf_time_now();
    while (st == LF_OK && lf_time_now() - t0 < 5) {
        st = lf__http_stream_write(s, chunk, sizeof chunk);
        if (st == LF_OK) written += sizeof chunk;
    }
    double t_write = lf_time_now() - t0;
    if (st != LF_ERR_IO) fail_msg("writes to a client that does not read: %s after %zu bytes, %.2f s",
                                  lf_status_str(st), written, t_write);
    LF_ASSERT_ERR_CONTAINS("not reading");
    /* what was accepted is bounded by the cap plus what the sockets hold */
    if (written < (1u << 20) || written >= (1u << 20) + (16u << 20))
        fail_msg("%zu bytes accepted before the 1 MiB cap cancelled the stream", written);
    assert_true(lf__http_stream_cancelled(s));
    lf__http_stream_close(s);
    /* the server shut the connection at once: the client reads what the
     * sockets still hold, then the end (MHD itself may keep the descriptor
     * until its worker next wakes up, so its count is not what is checked) */
    double w = 0;
    if (!wait_closed(fd, 3.0, &w)) fail_msg("connection not closed 3 s after the stream was cancelled");
    lf__http_stats hs;
    lf__http_stats_get(t.srv, &hs);
    assert_int_equal(hs.disconnects, 1);
    close(fd);
    tserver_stop(&t);
    pthread_cond_destroy(&t.cv);
    pthread_mutex_destroy(&t.mu);
}

/* Stopping with a stream and a deferred reply in flight. */
static void test_stop_in_flight(void **state) {
    (void)state;
    tserver t;
    tserver_start(&t, 16, 5, 0);
    int a = tcp_connect(t.port), b = tcp_connect(t.port);
    assert_int_equal(send_str(a, "GET /defer HTTP/1.1\r\nHost: t\r\n\r\n"), 0);
    lf__http_stream *sa = take_pending(&t);
    LF_ASSERT_OK(lf__http_stream_begin(sa, 200, "text/event-stream", NULL, 0));
    LF_ASSERT_OK(lf__http_stream_write(sa, "data: 1\n\n", 9));
    assert_int_equal(send_str(b, "GET /defer HTTP/1.1\r\nHost: t\r\n\r\n"), 0);
    lf__http_stream *sb = take_pending(&t);
    sleep_s(0.1); /* both suspended */
    double t0 = lf_time_now();
    lf__http_stop(t.srv);
    assert_true(lf_time_now() - t0 < 2.0);
    assert_int_equal(wait_cancels(&t, 2, 0), 2);
    assert_int_equal(lf__http_stream_write(sa, "data: 2\n\n", 9), LF_ERR_IO);
    assert_int_equal(lf__http_stream_reply(sb, 200, NULL, NULL, 0, "x", 1), LF_ERR_IO);
    assert_true(wait_closed(a, 1.0, NULL));
    assert_true(wait_closed(b, 1.0, NULL));
    /* the producers' streams outlive the server */
    lf__http_stream_close(sa);
    lf__http_stream_close(sb);
    close(a);
    close(b);
    pthread_cond_destroy(&t.cv);
    pthread_mutex_destroy(&t.mu);
}

/* Nothing a client sends crashes the server or stops it serving others. */
static void test_bad_input(void **state) {
    (void)state;
    tserver t;
    tserver_start(&t, 16, 0.5, 100);
    static const char nul_garbage[] = "\x00\x01\x02\x03 garbage\r\n\r\n";
    static const char *const bad[] = {
        nul_garbage,
        "GET\r\n\r\n",
        "GET / HTTP/9.9\r\n\r\n",
        "GE T /echo HTTP/1.1\r\nHost: t\r\n\r\n",
        "GET /echo HTTP/1.1\r\nHost: t\r\nContent-Length: -5\r\n\r\n",
        "GET /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 99999999999999999999999\r\n\r\n",
        "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n",
        "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", /* truncated, then close */
        "GET /echo HTTP/1.1\r\nHost: t\r\nBad Header Line\r\n\r\n",
        "GET /%zz%00%ff HTTP/1.0\r\n\r\n",
        "\r\n\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t len = i == 0 ? sizeof nul_garbage - 1 : strlen(bad[i]);
        int fd = tcp_connect(t.port);
        assert_true(fd >= 0);
        (void)send_all(fd, bad[i], len);
        shutdown(fd, SHUT_WR);
        double t0 = lf_time_now();
        resp r = read_resp(fd);
        close(fd);
        printf("bad input %zu: status %d after %.2f s: %.40s\n", i, r.status, lf_time_now() - t0, r.raw);
        resp_free(&r);
        r = get(t.port, "/echo");
        if (r.status != 200) fail_msg("after bad input %zu: GET answered %d", i, r.status);
        resp_free(&r);
    }
    /* headers larger than the connection memory: refused, server unharmed */
    size_t big = 200000;
    char *huge = malloc(big + 64);
    int n = sprintf(huge, "GET /echo HTTP/1.1\r\nHost: t\r\nX-Big: ");
    memset(huge + n, 'h', big);
    memcpy(huge + n + big, "\r\n\r\n", 4);
    resp r = request(t.port, huge, (size_t)n + big + 4);
    assert_true(r.status == 0 || (r.status >= 400 && r.status < 500));
    resp_free(&r);
    free(huge);
    /* a client that connects and leaves at once, many times */
    for (int i = 0; i < 50; i++) {
        int fd = tcp_connect(t.port);
        if (i % 2) (void)send_str(fd, "GET /echo HT");
        close(fd);
    }
    r = get(t.port, "/echo");
    assert_int_equal(r.status, 200);
    resp_free(&r);
    tserver_stop(&t);
}

static void not_found(lf__http_request *r, void *user) {
    (void)user;
    LF_ASSERT_OK(lf__http_reply_text(r, 404, "no\n"));
}

static void test_start_errors(void **state) {
    (void)state;
    lf__http_server *s = (lf__http_server *)0x1;
    lf__http_opts o = {.what = "tst", .on_request = not_found};
    assert_int_equal(lf__http_start(NULL, &o), LF_ERR_INVALID_ARG);
    assert_int_equal(lf__http_start(&s, NULL), LF_ERR_INVALID_ARG);
    assert_null(s);
    lf__http_opts no_handler = {.what = "tst"};
    assert_int_equal(lf__http_start(&s, &no_handler), LF_ERR_INVALID_ARG);
    o.port = 70000;
    assert_int_equal(lf__http_start(&s, &o), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("tst: port 70000");
    o.port = 0;
    o.threads = -1;
    assert_int_equal(lf__http_start(&s, &o), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("threads -1");
    o.threads = 0;
    o.request_deadline_s = NAN;
    assert_int_equal(lf__http_start(&s, &o), LF_ERR_RANGE);
    o.request_deadline_s = 0;
    o.host = "not-an-address";
    assert_int_equal(lf__http_start(&s, &o), LF_ERR_CONFIG);
    LF_ASSERT_ERR_CONTAINS("tst: host 'not-an-address'");
    /* names only when allowed; "localhost" always */
    o.allow_names = 1;
    o.host = "no-such-host.invalid"; /* RFC 2606: never resolves */
    assert_int_equal(lf__http_start(&s, &o), LF_ERR_CONFIG);
    LF_ASSERT_ERR_CONTAINS("'no-such-host.invalid' does not resolve");
    o.host = "localhost";
    LF_ASSERT_OK(lf__http_start(&s, &o));
    int port = lf__http_port(s);
    resp r = get(port, "/x");
    assert_int_equal(r.status, 404);
    resp_free(&r);
    /* the port is taken now */
    lf__http_server *s2 = NULL;
    o.port = port;
    o.host = "127.0.0.1";
    assert_int_equal(lf__http_start(&s2, &o), LF_ERR_IO);
    char hp[64];
    snprintf(hp, sizeof hp, "tst: cannot listen on 127.0.0.1:%d", port);
    LF_ASSERT_ERR_CONTAINS(hp);
    assert_null(s2);
    lf__http_stop(s);
    lf__http_stop(NULL);
    assert_int_equal(lf__http_port(NULL), -1);
}

/* The Prometheus endpoint behind the same slow clients: a scrape is answered. */
static void test_prometheus_slow_clients(void **state) {
    (void)state;
    lf_obs_sink *sink = NULL;
    lf_prom_opts po = {.host = "127.0.0.1", .port = 0};
    LF_ASSERT_OK(lf_obs_prometheus_open(&sink, &po));
    int port = lf_obs_prometheus_port(sink);
    int idle[40];
    for (int i = 0; i < 40; i++) idle[i] = tcp_connect(port);
    double t0 = lf_time_now();
    resp r = get(port, "/metrics");
    double dt = lf_time_now() - t0;
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "llmforge_steps_total{"));
    resp_free(&r);
    if (dt > 2.0) fail_msg("scrape took %.2f s behind 40 idle connections", dt);
    for (int i = 0; i < 40; i++) close(idle[i]);

    int fds[32];
    for (int i = 0; i < 32; i++) {
        fds[i] = tcp_connect(port);
        assert_true(fds[i] >= 0);
    }
    trickle tr = {.fds = fds, .n = 32, .interval = 0.25, .t0 = lf_time_now()};
    tr.until = tr.t0 + 1.5;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, trickle_main, &tr), 0);
    for (int i = 0; i < 3; i++) {
        sleep_s(0.3);
        t0 = lf_time_now();
        r = get(port, "/metrics");
        dt = lf_time_now() - t0;
        assert_int_equal(r.status, 200);
        resp_free(&r);
        if (dt > 2.0) fail_msg("scrape %d took %.2f s behind 32 trickling clients", i, dt);
    }
    pthread_join(th, NULL);
    for (int i = 0; i < 32; i++) close(fds[i]);
    sink->close(sink);
}

/* The live dashboard (GET /, GET /api/run) behind the same slow clients, and
 * clients that ask and never read: answers stay prompt for everyone else,
 * and the training thread's emit is never held (it takes no lock an HTTP
 * thread holds while reading the log or writing to a socket). */
static void test_dashboard_slow_clients(void **state) {
    (void)state;
    char *dir = lf_test_tmpdir();
    assert_non_null(dir);
    char log[600];
    snprintf(log, sizeof log, "%s/log.jsonl", dir);
    FILE *f = fopen(log, "w");
    assert_non_null(f);
    for (long s = 1; s <= 8000; s++) /* ~2.4 MB: every /api/run answer from the start is the full 256 KiB */
        fprintf(f, "{\"type\":\"train\",\"step\":%ld,\"loss\":2.5,\"lr\":0.001,\"grad_norm\":1,\"tokens_per_sec\":1000,"
                   "\"ms\":10,\"pad\":\"%0200d\"}\n", s, 0);
    fclose(f);
    lf_dash_opts o = {.host = "127.0.0.1", .port = 0, .log_path = log, .run_dir = dir};
    lf_obs_sink *sink = NULL;
    LF_ASSERT_OK(lf_obs_dashboard_open(&sink, &o));
    int port = lf_obs_dashboard_port(sink);
    static const char *paths[] = {"/", "/api/run?since=-1"};

    int idle[40];
    for (int i = 0; i < 40; i++) idle[i] = tcp_connect(port);
    for (int k = 0; k < 2; k++) {
        double t0 = lf_time_now();
        resp r = get(port, paths[k]);
        double dt = lf_time_now() - t0;
        assert_int_equal(r.status, 200);
        resp_free(&r);
        if (dt > 2.0) fail_msg("GET %s took %.2f s behind 40 idle connections", paths[k], dt);
    }
    for (int i = 0; i < 40; i++) close(idle[i]);

    int fds[32];
    for (int i = 0; i < 32; i++) {
        fds[i] = tcp_connect(port);
        assert_true(fds[i] >= 0);
    }
    trickle tr = {.fds = fds, .n = 32, .interval = 0.25, .t0 = lf_time_now()};
    tr.until = tr.t0 + 1.5;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, trickle_main, &tr), 0);
    for (int i = 0; i < 4; i++) {
        sleep_s(0.3);
        double t0 = lf_time_now();
        resp r = get(port, paths[i % 2]);
        double dt = lf_time_now() - t0;
        assert_int_equal(r.status, 200);
        resp_free(&r);
        if (dt > 2.0) fail_msg("GET %s took %.2f s behind 32 trickling clients", paths[i % 2], dt);
    }
    pthread_join(th, NULL);
    for (int i = 0; i < 32; i++) close(fds[i]);

    /* 8 clients pipeline 40 requests each for 256 KiB answers and never read
     * (a small receive buffer: their sockets fill at once) */
    int deaf[8];
    for (int i = 0; i < 8; i++) {
        deaf[i] = socket(AF_INET, SOCK_STREAM, 0);
        int small = 4096;
        setsockopt(deaf[i], SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
        assert_int_equal(connect(deaf[i], (struct sockaddr *)&a, sizeof a), 0);
        char req[4096] = "";
        for (int k = 0; k < 40; k++) strcat(req, "GET /api/run?since=-1 HTTP/1.1\r\nHost: t\r\n\r\n");
        (void)send(deaf[i], req, strlen(req), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    sleep_s(0.3);
    /* the training thread goes on: 2000 emits, none held */
    double worst = 0;
    for (long s = 0; s < 2000; s++) {
        lf_obs_scalar sc[2] = {{"train/loss", 2.0}, {"time/step_ms", 1.0}};
        lf_obs_record rec = {.kind = LF_OBS_TRAIN, .step = 8001 + s, .wall_time = lf_obs_wall_time(), .scalars = sc,
                             .n_scalars = 2};
        double t0 = lf_time_now();
        sink->emit(sink, &rec);
        double dt = lf_time_now() - t0;
        if (dt > worst) worst = dt;
    }
    if (worst > 0.05) fail_msg("an emit took %.3f s while clients did not read", worst);
    /* and other clients are still answered */
    for (int k = 0; k < 2; k++) {
        double t0 = lf_time_now();
        resp r = get(port, paths[k]);
        double dt = lf_time_now() - t0;
        assert_int_equal(r.status, 200);
        if (k == 1) assert_non_null(strstr(r.body, "\"step\":10000,")); /* the header saw the last emit */
        resp_free(&r);
        if (dt > 2.0) fail_msg("GET %s took %.2f s while 8 clients did not read", paths[k], dt);
    }
    for (int i = 0; i < 8; i++) close(deaf[i]);
    sink->close(sink); /* stops promptly with unread answers queued */
    lf_test_rmrf(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_requests),
        cmocka_unit_test(test_body_cap),
        cmocka_unit_test(test_idle_connections_do_not_block),
        cmocka_unit_test(test_trickling_clients),
        cmocka_unit_test(test_deadline),
        cmocka_unit_test(test_oldest_idle_dropped),
        cmocka_unit_test(test_stream_sse),
        cmocka_unit_test(test_stream_disconnect),
        cmocka_unit_test(test_deferred_reply),
        cmocka_unit_test(test_stream_buffer_cap),
        cmocka_unit_test(test_stop_in_flight),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_start_errors),
        cmocka_unit_test(test_prometheus_slow_clients),
        cmocka_unit_test(test_dashboard_slow_clients),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
