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
 *   3. After each input the server still answers a plain request on a new
 *      connection with 200 (nothing hangs, nothing died).
 */
#include "fuzz_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
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

static int server_port(void) {
    if (!srv) {
        lf__http_opts o = {.what = "fuzz", .port = 0, .threads = 2, .max_connections = 64,
                           .request_deadline_s = 1, .max_body = 1 << 16, .on_request = handler};
        if (lf__http_start(&srv, &o) != LF_OK) {
            fprintf(stderr, "fuzz_http: cannot start the server: %s\n", lf_last_error());
            abort();
        }
    }
    return lf__http_port(srv);
}

static int connect_to(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    FUZZ_CHECK(fd >= 0);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    FUZZ_CHECK(connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
    return fd;
}

/* Send, half-close, read until the server closes, or until 0.3 s pass
 * without a byte once something came (a keep-alive connection MHD does not
 * close at the half-close: its request deadline would, seconds later). */
static char *exchange(int port, const uint8_t *data, size_t size, size_t *got) {
    int fd = connect_to(port);
    size_t off = 0;
    while (off < size) {
        ssize_t w = send(fd, data + off, size - off, MSG_NOSIGNAL);
        if (w <= 0) break; /* the server closed early: fine, read what it said */
        off += (size_t)w;
    }
    shutdown(fd, SHUT_WR);
    size_t cap = 1 << 16;
    char *b = malloc(cap);
    FUZZ_CHECK(b != NULL);
    *got = 0;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int k = poll(&p, 1, *got ? 300 : 30000);
        if (k == 0 && *got) break;
        if (k <= 0) {
            lf__http_stats st;
            lf__http_stats_get(srv, &st);
            fprintf(stderr, "fuzz_http: no answer nor close in 30 s: accepted %llu open %d refused %llu deadline %llu "
                            "dropped_idle %llu\n", (unsigned long long)st.accepted, st.open,
                    (unsigned long long)st.refused, (unsigned long long)st.deadline,
                    (unsigned long long)st.dropped_idle);
            pthread_mutex_lock(&srv->mu);
            for (hconn *c = srv->conns; c; c = c->next)
                fprintf(stderr, "  conn fd %d state %d dropped %d age %.2f s cur %p\n", c->fd, c->state, c->dropped,
                        lf_time_now() - c->t0, (void *)c->cur);
            pthread_mutex_unlock(&srv->mu);
        }
        FUZZ_CHECK(k > 0); /* an answer or a close: the request deadline is 1 s */
        if (*got + 4096 > cap) {
            b = realloc(b, cap *= 2);
            FUZZ_CHECK(b != NULL);
        }
        ssize_t n = recv(fd, b + *got, cap - 1 - *got, 0);
        if (n <= 0) break;
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
            continue;
        }
        if (line[0] == '\0') break; /* the end of the header block */
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
    int a = lf__http_check_framing(h, n, http10, why1, sizeof why1);
    int b = lf__http_check_framing(h, n, http10, why2, sizeof why2);
    FUZZ_CHECK(a == 0 || a == 400 || a == 501);
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
        FUZZ_CHECK(!memcmp(start + 9, framing == unsupported ? "501" : "400", 3));
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
    char *r = exchange(port, data, size, &got);
    check_responses(r, got);
    free(r);
    static const char ping[] = "GET /ping HTTP/1.1\r\nHost: f\r\nConnection: close\r\n\r\n";
    r = exchange(port, (const uint8_t *)ping, sizeof ping - 1, &got);
    FUZZ_CHECK(got > 12 && !memcmp(r, "HTTP/1.1 200", 12));
    free(r);
    return 0;
}
