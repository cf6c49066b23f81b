/*
 * Tests of the Prometheus sink (src/obs/prometheus.c).
 *
 * Format reference: the Prometheus text exposition format 0.0.4
 * (https://prometheus.io/docs/instrumenting/exposition_formats/).
 *
 * Every sink listens on 127.0.0.1 port 0 (a free port the kernel picks, read
 * back with lf_obs_prometheus_port) so tests running in parallel never
 * collide. Pages are fetched with a small HTTP/1.0 client over a plain TCP
 * socket (every socket operation has a 5 s timeout), and compared with the
 * exact exposition text expected for a known sequence of records. When
 * promtool is on PATH the pages also go through `promtool check metrics`,
 * which must accept them with no lint complaint; without it that check is
 * skipped with a note.
 */
#include "test_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "llmforge/obs.h"

/* ---------------------------------------------------------------- HTTP client */

typedef struct http_resp {
    int status;   /* 0 if the request failed */
    char *raw;    /* whole response, NUL-terminated */
    char *head;   /* status line + headers (points into raw, NUL at the blank line) */
    char *body;   /* points into raw */
    size_t body_len;
} http_resp;

static void http_resp_free(http_resp *r) {
    free(r->raw);
    memset(r, 0, sizeof *r);
}

/* Send `req` verbatim to addr:port (family AF_INET or AF_INET6) and read the
 * response until the server closes the connection. */
static http_resp http_raw(int family, const char *addr, int port, const char *req) {
    http_resp r = {0};
    int fd = socket(family, SOCK_STREAM, 0);
    if (fd < 0) return r;
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_storage ss;
    socklen_t len;
    memset(&ss, 0, sizeof ss);
    if (family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_port = htons((uint16_t)port);
        inet_pton(AF_INET, addr, &a->sin_addr);
        len = sizeof *a;
    } else {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((uint16_t)port);
        inet_pton(AF_INET6, addr, &a->sin6_addr);
        len = sizeof *a;
    }
    if (connect(fd, (struct sockaddr *)&ss, len) != 0) goto done;
    size_t n = strlen(req), off = 0;
    while (off < n) {
        ssize_t w = send(fd, req + off, n - off, MSG_NOSIGNAL);
        if (w <= 0) goto done;
        off += (size_t)w;
    }
    size_t cap = 1 << 16, got = 0;
    r.raw = malloc(cap);
    if (!r.raw) goto done;
    for (;;) {
        if (got + 1 >= cap) {
            if (cap >= (8u << 20)) break;
            char *np = realloc(r.raw, cap * 2);
            if (!np) break;
            r.raw = np;
            cap *= 2;
        }
        ssize_t k = recv(fd, r.raw + got, cap - 1 - got, 0);
        if (k <= 0) break; /* EOF, error or timeout */
        got += (size_t)k;
    }
    r.raw[got] = '\0';
    char *sep = strstr(r.raw, "\r\n\r\n");
    if (sep && sscanf(r.raw, "HTTP/1.%*d %d", &r.status) == 1) {
        *sep = '\0';
        r.head = r.raw;
        r.body = sep + 4;
        r.body_len = got - (size_t)(r.body - r.raw);
    } else {
        r.status = 0;
    }
done:
    close(fd);
    return r;
}

static http_resp http_get(int port, const char *path) {
    char req[512];
    snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
    return http_raw(AF_INET, "127.0.0.1", port, req);
}

/* Case-insensitive search for a header line "name: value" (exact value). */
static int has_header(const http_resp *r, const char *name, const char *value) {
    char want[256];
    snprintf(want, sizeof want, "\r\n%s: %s\r\n", name, value);
    size_t wl = strlen(want);
    char buf[4096];
    snprintf(buf, sizeof buf, "%s\r\n", r->head ? r->head : "");
    for (char *p = buf; *p; p++)
        if (strncasecmp(p, want, wl) == 0) return 1;
    return 0;
}

/* ---------------------------------------------------------------- helpers */

static lf_obs_sink *open_sink(int rank, const char *job, int *port) {
    lf_obs_sink *s = NULL;
    lf_prom_opts o = {.host = "127.0.0.1", .port = 0, .rank = rank, .job = job};
    LF_ASSERT_OK(lf_obs_prometheus_open(&s, &o));
    assert_non_null(s);
    *port = lf_obs_prometheus_port(s);
    assert_true(*port > 0 && *port <= 65535);
    return s;
}

static void emit_train(lf_obs_sink *s, long step, double wall, const lf_obs_scalar *sc, int n) {
    lf_obs_record r = {.kind = LF_OBS_TRAIN, .step = step, .wall_time = wall, .scalars = sc, .n_scalars = n};
    s->emit(s, &r);
}

static void emit_event(lf_obs_sink *s, const char *event, const char *alert_kind) {
    lf_obs_record r = {.kind = LF_OBS_EVENT, .step = 0, .wall_time = 1.0, .event = event, .alert_kind = alert_kind};
    s->emit(s, &r);
}

static void emit_eval(lf_obs_sink *s, long step, const lf_obs_scalar *sc, int n) {
    lf_obs_record r = {.kind = LF_OBS_EVAL, .step = step, .wall_time = 2.0, .scalars = sc, .n_scalars = n};
    s->emit(s, &r);
}

/* Fetch /metrics, check status and content type, return the body (malloc'd). */
static char *fetch_metrics(int port) {
    http_resp r = http_get(port, "/metrics");
    if (r.status != 200) fail_msg("GET /metrics: status %d, response '%s'", r.status, r.raw ? r.raw : "(none)");
    assert_true(has_header(&r, "Content-Type", "text/plain; version=0.0.4; charset=utf-8"));
    char *body = strdup(r.body);
    http_resp_free(&r);
    return body;
}

static void assert_text_eq(const char *got, const char *want) {
    if (strcmp(got, want) != 0) {
        size_t i = 0;
        while (got[i] && got[i] == want[i]) i++;
        fail_msg("exposition differs at byte %zu\n--- got:\n%s\n--- want:\n%s", i, got, want);
    }
}

/* The histogram block for `base` labels with the given cumulative counts. */
static void hist_text(char *out, size_t cap, const char *base, const unsigned long cum[13], unsigned long count,
                      const char *sum) {
    static const char *le[] = {"0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5",
                               "1",     "2.5",  "5",     "10",   "30",  "60"};
    size_t o = (size_t)snprintf(out, cap,
                                "# HELP llmforge_step_seconds Wall-clock time of a training step.\n"
                                "# TYPE llmforge_step_seconds histogram\n");
    for (int i = 0; i < 13; i++)
        o += (size_t)snprintf(out + o, cap - o, "llmforge_step_seconds_bucket{%s,le=\"%s\"} %lu\n", base, le[i], cum[i]);
    snprintf(out + o, cap - o,
             "llmforge_step_seconds_bucket{%s,le=\"+Inf\"} %lu\n"
             "llmforge_step_seconds_sum{%s} %s\n"
             "llmforge_step_seconds_count{%s} %lu\n",
             base, count, base, sum, base, count);
}

#define COUNTERS_TEXT(B, STEPS, TOKENS, SKIPPED, NAN_, SPIKE, STALL, DROP)                                       \
    "# HELP llmforge_steps_total Optimizer steps completed by this process.\n"                                    \
    "# TYPE llmforge_steps_total counter\n"                                                                       \
    "llmforge_steps_total{" B "} " STEPS "\n"                                                                     \
    "# HELP llmforge_tokens_total Training tokens processed by this process.\n"                                   \
    "# TYPE llmforge_tokens_total counter\n"                                                                      \
    "llmforge_tokens_total{" B "} " TOKENS "\n"                                                                   \
    "# HELP llmforge_skipped_steps_total Steps whose update was skipped (non-finite gradients, loss-scale "       \
    "overflow, loss spike).\n"                                                                                    \
    "# TYPE llmforge_skipped_steps_total counter\n"                                                               \
    "llmforge_skipped_steps_total{" B "} " SKIPPED "\n"                                                           \
    "# HELP llmforge_alerts_total Alerts raised, by kind.\n"                                                      \
    "# TYPE llmforge_alerts_total counter\n"                                                                      \
    "llmforge_alerts_total{" B ",kind=\"nan\"} " NAN_ "\n"                                                        \
    "llmforge_alerts_total{" B ",kind=\"loss_spike\"} " SPIKE "\n"                                                \
    "llmforge_alerts_total{" B ",kind=\"stall\"} " STALL "\n"                                                     \
    "llmforge_alerts_total{" B ",kind=\"throughput_drop\"} " DROP "\n"

/* Run `promtool check metrics` on `text`; skipped (with a note) without promtool. */
static void promtool_check(const char *text) {
    if (system("command -v promtool >/dev/null 2>&1") != 0) {
        printf("note: promtool not found; skipping `promtool check metrics`\n");
        return;
    }
    char *dir = lf_test_tmpdir();
    assert_non_null(dir);
    char in[600], outp[600], cmd[1500];
    snprintf(in, sizeof in, "%s/metrics.txt", dir);
    snprintf(outp, sizeof outp, "%s/promtool.out", dir);
    LF_ASSERT_OK(lf_file_write_all(in, text, strlen(text)));
    snprintf(cmd, sizeof cmd, "promtool check metrics < '%s' > '%s' 2>&1", in, outp);
    int rc = system(cmd);
    char *out = NULL;
    size_t len = 0;
    LF_ASSERT_OK(lf_file_read_all(outp, 1 << 20, &out, &len));
    if (rc != 0 || len != 0) fail_msg("promtool check metrics: exit %d, output:\n%s\ninput:\n%s", rc, out, text);
    lf_free(out);
    lf_test_rmrf(dir);
    free(dir);
}

/* ---------------------------------------------------------------- tests */

static void test_empty_page(void **state) {
    (void)state;
    int port;
    lf_obs_sink *s = open_sink(0, NULL, &port);
    assert_string_equal(s->name, "prometheus");
    char *body = fetch_metrics(port);
    char hist[4096];
    static const unsigned long zero[13] = {0};
    hist_text(hist, sizeof hist, "rank=\"0\",job=\"llmforge\"", zero, 0, "0");
    char want[8192];
    snprintf(want, sizeof want, "%s%s", COUNTERS_TEXT("rank=\"0\",job=\"llmforge\"", "0", "0", "0", "0", "0", "0", "0"),
             hist);
    assert_text_eq(body, want);
    promtool_check(body);
    free(body);
    s->close(s);
}

/* A known sequence of records and the exact page it must produce. */
static void test_exact_exposition(void **state) {
    (void)state;
    int port;
    lf_obs_sink *s = open_sink(1, "test", &port);
    emit_event(s, "run_start", NULL);
    const lf_obs_scalar t1[] = {
        {"train/loss", 2.5},          {"train/lr", 0.001},           {"train/grad_norm", 1.25},
        {"train/tokens_per_sec", 1000}, {"train/mfu", 0.25},         {"train/tokens", 768},
        {"time/step_ms", 62.5},       {"time/forward_ms", 250},      {"time/backward_ms", 125},
        {"memory/rss_bytes", 1048576}, {"memory/planned_bytes", 2097152}, {"train/samples_per_sec", 7},
    };
    emit_train(s, 1, 1700000000.5, t1, (int)(sizeof t1 / sizeof t1[0]));
    const lf_obs_scalar t2[] = {
        {"train/loss", 2.25}, {"train/lr", 0.1}, {"train/tokens", 768}, {"time/step_ms", 375}, {"time/forward_ms", 500},
    };
    emit_train(s, 2, 1700000001.5, t2, (int)(sizeof t2 / sizeof t2[0]));
    emit_event(s, "skipped_step", NULL);
    emit_event(s, "alert", "loss_spike");
    emit_event(s, "alert", "custom");
    emit_event(s, "checkpoint", NULL);
    const lf_obs_scalar e1[] = {{"eval/val_loss", 2.125}, {"eval/train_loss", 2}, {"eval/hellaswag/acc", 0.25},
                                {"train/loss", 99}};
    emit_eval(s, 2, e1, (int)(sizeof e1 / sizeof e1[0]));

#define B "rank=\"1\",job=\"test\""
    char want[16384];
    char hist[4096];
    static const unsigned long cum[13] = {0, 0, 0, 0, 1, 1, 2, 2, 2, 2, 2, 2, 2};
    hist_text(hist, sizeof hist, B, cum, 2, "0.4375");
    snprintf(want, sizeof want,
             "# HELP llmforge_step Optimizer steps completed.\n"
             "# TYPE llmforge_step gauge\n"
             "llmforge_step{" B "} 2\n"
             "# HELP llmforge_loss Training loss of the last step.\n"
             "# TYPE llmforge_loss gauge\n"
             "llmforge_loss{" B "} 2.25\n"
             "# HELP llmforge_lr Learning rate of the last step.\n"
             "# TYPE llmforge_lr gauge\n"
             "llmforge_lr{" B "} 0.10000000000000001\n"
             "# HELP llmforge_grad_norm Global gradient norm of the last step (before clipping).\n"
             "# TYPE llmforge_grad_norm gauge\n"
             "llmforge_grad_norm{" B "} 1.25\n"
             "# HELP llmforge_tokens_per_second Training throughput of the last step in tokens per second.\n"
             "# TYPE llmforge_tokens_per_second gauge\n"
             "llmforge_tokens_per_second{" B "} 1000\n"
             "# HELP llmforge_mfu Model FLOPs utilization of the last step (0..1).\n"
             "# TYPE llmforge_mfu gauge\n"
             "llmforge_mfu{" B "} 0.25\n"
             "# HELP llmforge_last_step_timestamp_seconds Unix time at which the last step finished.\n"
             "# TYPE llmforge_last_step_timestamp_seconds gauge\n"
             "llmforge_last_step_timestamp_seconds{" B "} 1700000001.5\n"
             "# HELP llmforge_memory_bytes Memory of this rank: rss = resident set size, planned = bytes the memory "
             "plan reserves.\n"
             "# TYPE llmforge_memory_bytes gauge\n"
             "llmforge_memory_bytes{" B ",kind=\"rss\"} 1048576\n"
             "llmforge_memory_bytes{" B ",kind=\"planned\"} 2097152\n"
             "# HELP llmforge_step_phase_seconds Wall-clock time of each phase of the last step.\n"
             "# TYPE llmforge_step_phase_seconds gauge\n"
             "llmforge_step_phase_seconds{" B ",phase=\"forward\"} 0.5\n"
             "llmforge_step_phase_seconds{" B ",phase=\"backward\"} 0.125\n"
             "# HELP llmforge_eval Result of the last evaluation, by metric (eval/<metric>).\n"
             "# TYPE llmforge_eval gauge\n"
             "llmforge_eval{" B ",metric=\"val_loss\"} 2.125\n"
             "llmforge_eval{" B ",metric=\"train_loss\"} 2\n"
             "llmforge_eval{" B ",metric=\"hellaswag/acc\"} 0.25\n"
             "%s"
             "llmforge_alerts_total{" B ",kind=\"custom\"} 1\n"
             "%s",
             COUNTERS_TEXT(B, "2", "1536", "1", "0", "1", "0", "0"), hist);
#undef B
    char *body = fetch_metrics(port);
    assert_text_eq(body, want);
    promtool_check(body);
    free(body);

    /* The same page for a query string; HEAD answers the headers only. */
    http_resp q = http_get(port, "/metrics?name[]=llmforge_loss&x=1");
    assert_int_equal(q.status, 200);
    assert_text_eq(q.body, want);
    http_resp_free(&q);
    http_resp h = http_raw(AF_INET, "127.0.0.1", port, "HEAD /metrics HTTP/1.0\r\n\r\n");
    assert_int_equal(h.status, 200);
    assert_int_equal(h.body_len, 0);
    http_resp_free(&h);
    s->close(s);
}

static void test_nan_inf_and_loss_scale(void **state) {
    (void)state;
    int port;
    lf_obs_sink *s = open_sink(0, "j", &port);
    const lf_obs_scalar t[] = {{"train/loss", NAN},          {"train/lr", INFINITY},     {"train/grad_norm", -INFINITY},
                               {"train/loss_scale", 65536},  {"train/tokens", NAN},      {"train/tokens", -5},
                               {"train/tokens", INFINITY},   {"time/step_ms", NAN},      {"time/step_ms", -1},
                               {"train/mfu", 1e-300},        {"train/tokens_per_sec", 123456789.125}};
    emit_train(s, 7, 1.0, t, (int)(sizeof t / sizeof t[0]));
    const lf_obs_scalar e[] = {{"eval/val_loss", NAN}};
    emit_eval(s, 7, e, 1);
    char *body = fetch_metrics(port);
    const char *want[] = {
        "\nllmforge_loss{rank=\"0\",job=\"j\"} NaN\n",
        "\nllmforge_lr{rank=\"0\",job=\"j\"} +Inf\n",
        "\nllmforge_grad_norm{rank=\"0\",job=\"j\"} -Inf\n",
        "# TYPE llmforge_loss_scale gauge\nllmforge_loss_scale{rank=\"0\",job=\"j\"} 65536\n",
        "\nllmforge_mfu{rank=\"0\",job=\"j\"} 1e-300\n",
        "\nllmforge_tokens_per_second{rank=\"0\",job=\"j\"} 123456789.125\n",
        "\nllmforge_eval{rank=\"0\",job=\"j\",metric=\"val_loss\"} NaN\n",
        /* counters ignore NaN / negative / infinite increments; the histogram ignores non-durations */
        "\nllmforge_tokens_total{rank=\"0\",job=\"j\"} 0\n",
        "\nllmforge_steps_total{rank=\"0\",job=\"j\"} 1\n",
        "\nllmforge_step_seconds_count{rank=\"0\",job=\"j\"} 0\n",
        "\nllmforge_step_seconds_sum{rank=\"0\",job=\"j\"} 0\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(body, want[i])) fail_msg("page lacks '%s':\n%s", want[i], body);
    promtool_check(body);
    free(body);
    s->close(s);
}

static void test_label_escaping(void **state) {
    (void)state;
    int port;
    lf_obs_sink *s = open_sink(3, "we\"ird\\job\nx", &port);
    emit_event(s, "alert", "a\"b\\c\nd");
    const lf_obs_scalar e[] = {{"eval/q\"a", 1}};
    emit_eval(s, 1, e, 1);
    char *body = fetch_metrics(port);
    const char *b = "rank=\"3\",job=\"we\\\"ird\\\\job\\nx\"";
    char want[512];
    snprintf(want, sizeof want, "llmforge_alerts_total{%s,kind=\"a\\\"b\\\\c\\nd\"} 1\n", b);
    if (!strstr(body, want)) fail_msg("page lacks '%s':\n%s", want, body);
    snprintf(want, sizeof want, "llmforge_eval{%s,metric=\"q\\\"a\"} 1\n", b);
    if (!strstr(body, want)) fail_msg("page lacks '%s':\n%s", want, body);
    promtool_check(body);
    free(body);
    s->close(s);

    /* The longest job name (255 bytes), every byte escaped: lines longer
     * than any fixed buffer in the renderer. One byte more is refused. */
    char job[257];
    memset(job, '"', 255);
    job[255] = '\0';
    s = open_sink(0, job, &port);
    body = fetch_metrics(port);
    char esc[600];
    for (int i = 0; i < 255; i++) memcpy(esc + 2 * i, "\\\"", 2);
    esc[510] = '\0';
    char want2[800];
    snprintf(want2, sizeof want2, "llmforge_step_seconds_bucket{rank=\"0\",job=\"%s\",le=\"0.005\"} 0\n", esc);
    if (!strstr(body, want2)) fail_msg("page lacks '%s'", want2);
    promtool_check(body);
    free(body);
    s->close(s);
    memset(job, 'j', 256);
    job[256] = '\0';
    lf_prom_opts o = {.host = NULL, .port = 0, .job = job};
    assert_int_equal(lf_obs_prometheus_open(&s, &o), LF_ERR_CONFIG);
    LF_ASSERT_ERR_CONTAINS("job name");
}

/* Tables from records have hard caps; a flood of new names cannot grow them. */
static void test_caps(void **state) {
    (void)state;
    int port;
    lf_obs_sink *s = open_sink(0, NULL, &port);
    char name[64];
    for (int i = 0; i < 200; i++) {
        snprintf(name, sizeof name, "eval/m%03d", i);
        lf_obs_scalar e = {name, i};
        emit_eval(s, 1, &e, 1);
        snprintf(name, sizeof name, "k%03d", i);
        emit_event(s, "alert", name);
        snprintf(name, sizeof name, "time/p%03d_ms", i);
        lf_obs_scalar t = {name, 1};
        emit_train(s, i, 1.0, &t, 1);
    }
    char longname[300];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    emit_event(s, "alert", longname);
    emit_event(s, "alert", NULL);
    char *body = fetch_metrics(port);
    int n_eval = 0, n_alert = 0, n_phase = 0;
    for (const char *p = body; (p = strstr(p, "\nllmforge_eval{")); p++) n_eval++;
    for (const char *p = body; (p = strstr(p, "\nllmforge_alerts_total{")); p++) n_alert++;
    for (const char *p = body; (p = strstr(p, "\nllmforge_step_phase_seconds{")); p++) n_phase++;
    assert_int_equal(n_eval, 64);
    assert_int_equal(n_alert, 32);
    assert_int_equal(n_phase, 16);
    /* 4 pre-declared + 27 named kinds; the rest (173 + long + NULL -> "unknown" which found no room) is "other" */
    if (!strstr(body, "llmforge_alerts_total{rank=\"0\",job=\"llmforge\",kind=\"other\"} 175\n"))
        fail_msg("no other=175 in:\n%s", body);
    promtool_check(body);
    free(body);
    s->close(s);
}

static void test_health_404_405(void **state) {
    (void)state;
    int port;
    lf_obs_sink *s = open_sink(0, NULL, &port);
    http_resp r = http_get(port, "/health");
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "ok");
    http_resp_free(&r);
    r = http_get(port, "/health?verbose=1");
    assert_int_equal(r.status, 200);
    http_resp_free(&r);
    const char *missing[] = {"/", "/nope", "/metrics/", "/metricsx", "/health/x"};
    for (size_t i = 0; i < sizeof missing / sizeof missing[0]; i++) {
        r = http_get(port, missing[i]);
        if (r.status != 404) fail_msg("GET %s: status %d", missing[i], r.status);
        http_resp_free(&r);
    }
    const char *bad[] = {
        "POST /metrics HTTP/1.0\r\nContent-Length: 5\r\n\r\nhello",
        "PUT /health HTTP/1.0\r\nContent-Length: 0\r\n\r\n",
        "DELETE /metrics HTTP/1.0\r\n\r\n",
        "POST /nope HTTP/1.0\r\nContent-Length: 2\r\n\r\n{}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        r = http_raw(AF_INET, "127.0.0.1", port, bad[i]);
        if (r.status != 405) fail_msg("'%.20s...': status %d", bad[i], r.status);
        assert_true(has_header(&r, "Allow", "GET, HEAD"));
        http_resp_free(&r);
    }
    /* Still serving after all that. */
    r = http_get(port, "/health");
    assert_int_equal(r.status, 200);
    http_resp_free(&r);
    s->close(s);
}

static void test_open_errors(void **state) {
    (void)state;
    lf_obs_sink *s = (lf_obs_sink *)0x1;
    lf_prom_opts o = {.host = NULL, .port = 0, .rank = 0, .job = NULL};
    assert_int_equal(lf_obs_prometheus_open(NULL, &o), LF_ERR_INVALID_ARG);
    assert_int_equal(lf_obs_prometheus_open(&s, NULL), LF_ERR_INVALID_ARG);
    assert_null(s);

    o.port = 65536;
    assert_int_equal(lf_obs_prometheus_open(&s, &o), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("65536");
    o.port = -1;
    assert_int_equal(lf_obs_prometheus_open(&s, &o), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("-1");
    o.port = 0;
    o.rank = -2;
    assert_int_equal(lf_obs_prometheus_open(&s, &o), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("rank");
    o.rank = 0;

    const char *hosts[] = {"not-an-address", "256.1.1.1", "", "example.com", "1.2.3", "::1::2", "[::1", "127.0.0.1:80"};
    for (size_t i = 0; i < sizeof hosts / sizeof hosts[0]; i++) {
        o.host = hosts[i];
        lf_status st = lf_obs_prometheus_open(&s, &o);
        if (st != LF_ERR_CONFIG) fail_msg("host '%s': %s", hosts[i], lf_status_str(st));
        char quoted[300];
        snprintf(quoted, sizeof quoted, "'%s'", hosts[i]);
        LF_ASSERT_ERR_CONTAINS(quoted);
        assert_null(s);
    }
    /* A well-formed address this machine does not have (TEST-NET-1, RFC 5737). */
    o.host = "192.0.2.1";
    o.port = 19400;
    lf_status st = lf_obs_prometheus_open(&s, &o);
    if (st == LF_OK) { /* net.ipv4.ip_nonlocal_bind=1 allows it */
        printf("note: this machine binds non-local addresses; skipping the EADDRNOTAVAIL check\n");
        s->close(s);
        s = NULL;
    } else {
        assert_int_equal(st, LF_ERR_IO);
        LF_ASSERT_ERR_CONTAINS("192.0.2.1:19400");
        LF_ASSERT_ERR_CONTAINS(strerror(EADDRNOTAVAIL));
        assert_null(s);
    }

    assert_int_equal(lf_obs_prometheus_port(NULL), -1);
    lf_obs_sink other = {.name = "prometheus", .close = NULL};
    assert_int_equal(lf_obs_prometheus_port(&other), -1);
}

static void test_port_in_use(void **state) {
    (void)state;
    int port;
    lf_obs_sink *a = open_sink(0, NULL, &port);
    lf_obs_sink *b = (lf_obs_sink *)0x1;
    lf_prom_opts o = {.host = "127.0.0.1", .port = port, .rank = 1, .job = NULL};
    assert_int_equal(lf_obs_prometheus_open(&b, &o), LF_ERR_IO);
    assert_null(b);
    char hp[64];
    snprintf(hp, sizeof hp, "127.0.0.1:%d", port);
    LF_ASSERT_ERR_CONTAINS(hp);
    LF_ASSERT_ERR_CONTAINS(strerror(EADDRINUSE));
    /* The first sink is unharmed. */
    http_resp r = http_get(port, "/health");
    assert_int_equal(r.status, 200);
    http_resp_free(&r);
    a->close(a);

    /* Occupied by a plain socket that is not ours either. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(fd, 1), 0);
    socklen_t sl = sizeof sa;
    getsockname(fd, (struct sockaddr *)&sa, &sl);
    o.port = ntohs(sa.sin_port);
    o.host = "localhost";
    assert_int_equal(lf_obs_prometheus_open(&b, &o), LF_ERR_IO);
    snprintf(hp, sizeof hp, "localhost:%d", o.port);
    LF_ASSERT_ERR_CONTAINS(hp);
    close(fd);
}

static void test_hosts(void **state) {
    (void)state;
    /* "localhost" binds the IPv4 loopback. */
    lf_obs_sink *s = NULL;
    lf_prom_opts o = {.host = "localhost", .port = 0, .rank = 0, .job = NULL};
    LF_ASSERT_OK(lf_obs_prometheus_open(&s, &o));
    http_resp r = http_get(lf_obs_prometheus_port(s), "/health");
    assert_int_equal(r.status, 200);
    http_resp_free(&r);
    s->close(s);

    /* IPv6 loopback, plain and bracketed, where the machine has one. */
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = 0, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    int have_v6 = fd >= 0 && bind(fd, (struct sockaddr *)&a6, sizeof a6) == 0;
    if (fd >= 0) close(fd);
    if (!have_v6) {
        printf("note: no IPv6 loopback here; skipping the ::1 checks\n");
        return;
    }
    const char *v6[] = {"::1", "[::1]"};
    for (int i = 0; i < 2; i++) {
        o.host = v6[i];
        LF_ASSERT_OK(lf_obs_prometheus_open(&s, &o));
        int port = lf_obs_prometheus_port(s);
        r = http_raw(AF_INET6, "::1", port, "GET /metrics HTTP/1.0\r\n\r\n");
        assert_int_equal(r.status, 200);
        assert_non_null(strstr(r.body, "llmforge_steps_total{rank=\"0\",job=\"llmforge\"} 0\n"));
        http_resp_free(&r);
        /* The same port on ::1 is now taken. */
        lf_obs_sink *b = NULL;
        lf_prom_opts o2 = {.host = "::1", .port = port};
        assert_int_equal(lf_obs_prometheus_open(&b, &o2), LF_ERR_IO);
        char hp[64];
        snprintf(hp, sizeof hp, "[::1]:%d", port);
        LF_ASSERT_ERR_CONTAINS(hp);
        s->close(s);
    }
}

/* Through the bus, as the trainer uses it: the bus owns and closes the sink. */
static void test_through_bus(void **state) {
    (void)state;
    lf_obs *bus = NULL;
    LF_ASSERT_OK(lf_obs_create(&bus));
    int port;
    lf_obs_sink *s = open_sink(0, "bus", &port);
    LF_ASSERT_OK(lf_obs_add_sink(bus, s));
    const lf_obs_scalar t[] = {{"train/loss", 3.5}, {"train/tokens", 64}};
    lf_obs_record r = {.kind = LF_OBS_TRAIN, .step = 5, .wall_time = lf_obs_wall_time(), .scalars = t, .n_scalars = 2};
    lf_obs_emit(bus, &r);
    lf_obs_flush(bus);
    char *body = fetch_metrics(port);
    assert_non_null(strstr(body, "llmforge_loss{rank=\"0\",job=\"bus\"} 3.5\n"));
    assert_non_null(strstr(body, "llmforge_tokens_total{rank=\"0\",job=\"bus\"} 64\n"));
    free(body);
    lf_obs_free(bus);
    /* Closed with the bus: nobody listens any more. */
    http_resp gone = http_get(port, "/health");
    assert_int_equal(gone.status, 0);
    http_resp_free(&gone);
}

/* Emission on one thread while another scrapes: every page is whole, and the
 * counters end where the records say (run under ASan/TSan for races). */
typedef struct emitter_arg {
    lf_obs_sink *s;
    int n;
} emitter_arg;

static void *emitter(void *arg) {
    emitter_arg *a = arg;
    for (int i = 1; i <= a->n; i++) {
        lf_obs_scalar t[] = {{"train/loss", 1.0 / i}, {"train/tokens", 10}, {"time/step_ms", (double)(i % 100)}};
        emit_train(a->s, i, 1.0 * i, t, 3);
        if (i % 50 == 0) emit_event(a->s, "alert", i % 100 == 0 ? "stall" : "nan");
    }
    return NULL;
}

static void test_concurrent_scrape(void **state) {
    (void)state;
    int port;
    lf_obs_sink *s = open_sink(0, NULL, &port);
    emitter_arg a = {s, 20000};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, emitter, &a), 0);
    for (int k = 0; k < 30; k++) {
        char *body = fetch_metrics(port);
        size_t n = strlen(body);
        assert_true(n > 0 && body[n - 1] == '\n');
        assert_non_null(strstr(body, "llmforge_step_seconds_count{"));
        free(body);
    }
    pthread_join(th, NULL);
    char *body = fetch_metrics(port);
    assert_non_null(strstr(body, "llmforge_steps_total{rank=\"0\",job=\"llmforge\"} 20000\n"));
    assert_non_null(strstr(body, "llmforge_tokens_total{rank=\"0\",job=\"llmforge\"} 200000\n"));
    assert_non_null(strstr(body, "llmforge_step_seconds_count{rank=\"0\",job=\"llmforge\"} 20000\n"));
    assert_non_null(strstr(body, "llmforge_step_seconds_bucket{rank=\"0\",job=\"llmforge\",le=\"+Inf\"} 20000\n"));
    assert_non_null(strstr(body, "llmforge_alerts_total{rank=\"0\",job=\"llmforge\",kind=\"nan\"} 200\n"));
    assert_non_null(strstr(body, "llmforge_alerts_total{rank=\"0\",job=\"llmforge\",kind=\"stall\"} 200\n"));
    promtool_check(body);
    free(body);
    s->close(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_page),
        cmocka_unit_test(test_exact_exposition),
        cmocka_unit_test(test_nan_inf_and_loss_scale),
        cmocka_unit_test(test_label_escaping),
        cmocka_unit_test(test_caps),
        cmocka_unit_test(test_health_404_405),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_port_in_use),
        cmocka_unit_test(test_hosts),
        cmocka_unit_test(test_through_bus),
        cmocka_unit_test(test_concurrent_scrape),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
