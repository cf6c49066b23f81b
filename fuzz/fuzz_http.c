/*
 * Fuzz harness: the HTTP request path of the HTTP layer (src/http/) on top
 * of libmicrohttpd: the framing check (framing.c) as a pure function, and a
 * live server (started once per process on 127.0.0.1, port 0) fed the input
 * as the raw bytes of a connection.
 *
 * Input: the raw bytes a client sends (request line, header fields, body;
 * several pipelined requests allowed). fuzz/make_seeds_http.py writes the
 * RFC 9112 cases as seeds.
 *
 * Checks (FUZZ_CHECK traps on a failure):
 *   1. The input's header block, split into fields the way MHD 0.9.75 does
 *      it (lines end at CRLF or LF; a line starting with SP/HTAB is appended
 *      to the previous field's name; a value starts after the colon's
 *      whitespace and ends at NUL), run through lf__http_check_framing: the
 *      answer is 0, 400 or 501, a refusal comes with a reason, and the same
 *      fields give the same answer twice.
 *   2. The live server, sent the input then a half-close: whatever comes
 *      back is a sequence of responses that each start with "HTTP/1.", and
 *      a refusal from the framing check (400, or 501 for a transfer coding
 *      it does not know) carries "Connection: close" and is the last thing
 *      on the connection.
 *   3. Liveness: after the half-close, the client never waits more than
 *      LIVENESS_S (30 s) for the next byte or the close; and after each
 *      input the server still answers a plain request on a new connection
 *      with 200 and closes it ("Connection: close").
 *
 * Why check 3's bound holds (server opts below: request deadline 1 s, idle
 * timeout = the deadline, 2 workers, cap 64 connections): the harness has
 * one connection open at a time, and the server keeps an earlier one at most
 * 1 s after its client left (until it reads the EOF or the deadline cuts
 * it): a few connections, far below the cap and MHD's limit, so a new
 * connection is accepted at once (the listen socket is level-triggered in
 * each worker's epoll). Once accepted it is either RECEIVING, where the
 * watchdog (50 ms tick) sends a 408 if a request line came and shuts it
 * down 1 s after it was accepted or after its previous response (the
 * request deadline), or HANDLING, where the handler has replied at once and
 * MHD sends to a client that reads everything (MHD's idle timeout of 1 s
 * ends a send that stops moving). So the server's own bound between two
 * events the client sees is about 1.05 s; the other 29 s are for a CPU shared
 * with other work under nice -n 19, where a thread may wait seconds for a
 * core. The longest wait seen is printed at exit.
 *
 * MHD 0.9.75 often misses the half-close itself: its epoll is edge-triggered
 * and a short recv() clears its "read-ready" flag, so a FIN that came with
 * the last bytes is never read (connection.c, recv_param_adapter). An
 * incomplete request is then cut by the deadline (408) instead of at the EOF,
 * and a keep-alive connection stays open until the deadline; both are within
 * the bound. To keep inputs fast the input's exchange stops after 0.3 s
 * without a byte once something came; the ping reads until the close.
 *
 * Every socket call may be interrupted: libFuzzer's -timeout check is a
 * SIGALRM every timeout/2 + 1 s, and poll() then fails with EINTR. The
 * harness once took that for a server that hung (fuzz/README.md);
 * fuzz.replay_http_eintr replays the corpus under a SIGALRM every 2 ms.
 */
#include "fuzz_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <math.h>
#include <sys/time.h>

#include "http/http_impl.h"

static void handler(lf__http_request *r, void *user) {
    (void)user;
    size_t n = 0;
    (void)lf__http_body(r, &n);
    char msg[64];
    snprintf(msg, sizeof msg, "body=%zu\n", n);
    lf__http_reply_text(r, 200, msg);
}

static lf__http_server *srv;

/* The liveness bound of check 3 (see the header comment): the longest the
 * client waits, after its half-close, for the next byte or the close. */
#define LIVENESS_S 30.0

static double longest_wait_s; /* the longest such wait seen, printed at exit */
static unsigned long long n_exchanges;

static void report_waits(void) {
    fprintf(stderr, "fuzz_http: %llu exchanges; the longest wait for a byte or a close was %.3f s (bound %.0f s)\n",
            n_exchanges, longest_wait_s, LIVENESS_S);
}

static int server_port(void) {
    if (!srv) {
        lf__http_opts o = {.what = "fuzz",
                           .port = 0,
                           .threads = 2,
                           .max_connections = 64,
                           .request_deadline_s = 1,
                           .max_body = 1 << 16,
                           .on_request = handler};
        if (lf__http_start(&srv, &o) != LF_OK) {
            fprintf(stderr, "fuzz_http: cannot start the server: %s\n", lf_last_error());
            abort();
        }
        atexit(report_waits);
    }
    return lf__http_port(srv);
}

/* Every call below may be interrupted by a signal: libFuzzer's -timeout
 * check is a SIGALRM every timeout/2 + 1 seconds, installed without
 * SA_RESTART, and poll() is never restarted anyway. An EINTR is retried,
 * never taken for a timeout or a close. */
static int connect_to(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    FUZZ_CHECK(fd >= 0);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        /* interrupted: the handshake goes on; wait for it to finish */
        FUZZ_CHECK(errno == EINTR || errno == EINPROGRESS);
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int k;
        while ((k = poll(&p, 1, (int)(LIVENESS_S * 1000))) < 0 && errno == EINTR) {
        }
        FUZZ_CHECK(k == 1);
        int err = -1;
        socklen_t len = sizeof err;
        FUZZ_CHECK(getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0);
    }
    return fd;
}

/* Wait for fd to be readable: 1, or 0 when `ms` milliseconds passed
 * (measured on the monotonic clock across interruptions). */
static int wait_readable(int fd, double ms) {
    const double until = lf_time_now() + ms / 1000.0;
    for (;;) {
        double left = (until - lf_time_now()) * 1000.0;
        if (left < 0) left = 0;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int k = poll(&p, 1, (int)ceil(left));
        if (k > 0) return 1;
        if (k == 0 && lf_time_now() >= until) return 0;
        FUZZ_CHECK(k == 0 || errno == EINTR);
    }
}

static void dump_server(void) {
    lf__http_stats st;
    lf__http_stats_get(srv, &st);
    fprintf(stderr,
            "fuzz_http: no byte nor close in %.0f s: accepted %llu open %d refused %llu deadline %llu "
            "dropped_idle %llu\n",
            LIVENESS_S, (unsigned long long)st.accepted, st.open, (unsigned long long)st.refused,
            (unsigned long long)st.deadline, (unsigned long long)st.dropped_idle);
    pthread_mutex_lock(&srv->mu);
    for (hconn *c = srv->conns; c; c = c->next)
        fprintf(stderr, "  conn fd %d state %d dropped %d age %.2f s cur %p\n", c->fd, c->state, c->dropped,
                lf_time_now() - c->t0, (void *)c->cur);
    pthread_mutex_unlock(&srv->mu);
}

/* Send, half-close, then read until the server closes (*closed = 1). With
 * until_close 0, also stop once 0.3 s pass without a byte after something
 * came: a keep-alive connection that MHD does not close at the half-close
 * (it often misses the EOF, see the header comment) would only be closed by
 * the request deadline, a second later, and every input would cost it. */
static char *exchange(int port, const uint8_t *data, size_t size, int until_close, size_t *got, int *closed) {
    int fd = connect_to(port);
    size_t off = 0;
    while (off < size) {
        ssize_t w = send(fd, data + off, size - off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break; /* the server closed early: fine, read what it said */
        off += (size_t)w;
    }
    shutdown(fd, SHUT_WR);
    size_t cap = 1 << 16;
    char *b = malloc(cap);
    FUZZ_CHECK(b != NULL);
    *got = 0;
    *closed = 0;
    n_exchanges++;
    for (;;) {
        const int quiet_stop = *got && !until_close;
        const double t0 = lf_time_now();
        const int k = wait_readable(fd, quiet_stop ? 300 : LIVENESS_S * 1000);
        const double waited = lf_time_now() - t0;
        if (k == 0 && quiet_stop) break;
        if (k && waited > longest_wait_s) longest_wait_s = waited;
        if (!k) dump_server();
        FUZZ_CHECK(k); /* check 3: a byte or the close within the bound */
        if (*got + 4096 > cap) {
            b = realloc(b, cap *= 2);
            FUZZ_CHECK(b != NULL);
        }
        ssize_t n = recv(fd, b + *got, cap - 1 - *got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            *closed = 1; /* EOF, or a reset: the server is done with it */
            break;
        }
        *got += (size_t)n;
    }
    b[*got] = '\0';
    close(fd);
    return b;
}

/* Check 1: the header block as MHD would split it. */
static void check_pure(const uint8_t *data, size_t size) {
    enum { MAXH = 64 };
    char *buf = malloc(size + 1);
    FUZZ_CHECK(buf != NULL);
    memcpy(buf, data, size);
    buf[size] = '\0';
    lf__http_header h[MAXH];
    char *names[MAXH] = {0};
    int n = 0, http10 = 0, line_no = 0;
    char method[16] = "";
    size_t pos = 0;
    while (pos < size && n < MAXH) {
        char *nl = memchr(buf + pos, '\n', size - pos);
        if (!nl) break;
        size_t end = (size_t)(nl - buf);
        size_t len = end - pos;
        if (len > 0 && buf[end - 1] == '\r') len--;
        char *line = buf + pos;
        line[len] = '\0';
        pos = end + 1;
        if (line_no++ == 0) {
            http10 = strstr(line, "HTTP/1.0") != NULL;
            const size_t m = strcspn(line, " ");
            if (m < sizeof method) memcpy(method, line, m), method[m] = '\0';
            continue;
        }
        if (line[0] == '\0') break;                         /* the end of the header block */
        if ((line[0] == ' ' || line[0] == '\t') && n > 0) { /* MHD: appended to the previous NAME */
            const char *t = line;
            while (*t == ' ' || *t == '\t') t++;
            size_t a = strlen(names[n - 1]), b = strlen(t);
            char *nn = realloc(names[n - 1], a + b + 1);
            FUZZ_CHECK(nn != NULL);
            memcpy(nn + a, t, b + 1);
            names[n - 1] = nn;
            h[n - 1].name = nn;
            continue;
        }
        char *colon = strchr(line, ':');
        if (!colon) break; /* MHD refuses the request itself */
        *colon = '\0';
        char *v = colon + 1;
        while (*v == ' ' || *v == '\t') v++;
        names[n] = strdup(line);
        FUZZ_CHECK(names[n] != NULL);
        h[n] = (lf__http_header){names[n], v};
        n++;
    }
    char why1[200], why2[200];
    int a = lf__http_check_framing(method, h, n, http10, why1, sizeof why1);
    int b = lf__http_check_framing(method, h, n, http10, why2, sizeof why2);
    FUZZ_CHECK(a == 0 || a == 400 || a == 411 || a == 501);
    FUZZ_CHECK(a == b);
    if (a) FUZZ_CHECK(why1[0] != '\0' && strcmp(why1, why2) == 0);
    for (int i = 0; i < n; i++) free(names[i]);
    free(buf);
}

/* Check 2: each response starts with "HTTP/1."; a framing refusal is last. */
static void check_responses(const char *r, size_t len) {
    if (len == 0) return; /* closed without a word (an incomplete request at EOF) */
    FUZZ_CHECK(len >= 7 && !memcmp(r, "HTTP/1.", 7));
    const char *framing = strstr(r, "bad request framing:");
    const char *unsupported = strstr(r, "unsupported request framing:");
    if (!framing || (unsupported && unsupported < framing)) framing = unsupported;
    if (framing) {
        /* the refusal that carries it says Connection: close, and nothing
         * follows it. A response starts after a "\n" (a body may end in a
         * bare "\n": "body=7\n"), and our bodies hold no "\nHTTP/1.". */
        const char *start = r, *p;
        while ((p = strstr(start + 1, "\nHTTP/1.")) && p < framing) start = p + 1;
        const char *head_end = strstr(start, "\r\n\r\n");
        FUZZ_CHECK(head_end != NULL);
        FUZZ_CHECK(framing == unsupported ? !memcmp(start + 9, "501", 3)
                                          : !memcmp(start + 9, "400", 3) || !memcmp(start + 9, "411", 3));
        const char *cc = strstr(start, "Connection: close");
        FUZZ_CHECK(cc != NULL && cc < head_end);
        FUZZ_CHECK(strstr(framing, "\nHTTP/1.") == NULL);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > (1u << 16)) return 0;
    check_pure(data, size);
    const int port = server_port();
    size_t got = 0;
    int closed = 0;
    char *r = exchange(port, data, size, 0, &got, &closed);
    check_responses(r, got);
    free(r);
    static const char ping[] = "GET /ping HTTP/1.1\r\nHost: f\r\nConnection: close\r\n\r\n";
    r = exchange(port, (const uint8_t *)ping, sizeof ping - 1, 1, &got, &closed);
    FUZZ_CHECK(got > 12 && !memcmp(r, "HTTP/1.1 200", 12));
    FUZZ_CHECK(closed); /* "Connection: close": the server closes */
    free(r);
    return 0;
}
