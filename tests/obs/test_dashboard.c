/*
 * Tests of the live dashboard (src/obs/dashboard/dash.c): the /api/run JSON
 * (records byte for byte as log.jsonl holds them, `since` paging that
 * neither loses nor repeats a record, whole steps, the size bound), what a
 * torn, corrupt, over-long, resumed, replaced or huge log gives, the header
 * (from config.resolved.json, the caller's members, the ETA from the
 * records' times, the status at the end), and the routes of both servers
 * that serve it (its own and the Prometheus one), their errors, and the
 * fallback to a free port.
 *
 * The logs here are written by the test, line by line as jsonl_sink.c
 * writes them, so each assertion knows exactly which lines must come back;
 * tests/cli/test_dashboard_browser.sh does the same against a real run.
 * Servers listen on 127.0.0.1 port 0 (the kernel's pick).
 */
#define _GNU_SOURCE
#include "test_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cjson/cJSON.h>

#include "llmforge/obs.h"
#include "obs/dashboard/dash.h"

/* ---------------------------------------------------------------- fixtures */

static const char k_config[] =
    "{\"model\":{\"arch\":\"gpt2\",\"n_layer\":2,\"n_head\":2,\"n_kv_head\":0,\"n_embd\":64,\"block_size\":32,"
    "\"vocab_size\":65},\"data\":{\"dataset\":\"data\"},\"train_batch_size\":8,\"train_micro_batch_size_per_gpu\":4,"
    "\"gradient_accumulation_steps\":2,\"train_iters\":500,\"bf16\":{\"enabled\":false},\"fp16\":{\"enabled\":true}}\n";

static void write_file(const char *path, const char *text, const char *mode) {
    FILE *f = fopen(path, mode);
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

typedef struct fixture {
    char *dir;
    char log[600];
    char cfg[600];
} fixture;

static void fixture_make(fixture *fx) {
    fx->dir = lf_test_tmpdir();
    assert_non_null(fx->dir);
    snprintf(fx->log, sizeof fx->log, "%s/log.jsonl", fx->dir);
    snprintf(fx->cfg, sizeof fx->cfg, "%s/config.resolved.json", fx->dir);
    write_file(fx->cfg, k_config, "w");
    write_file(fx->log, "", "w");
}

static void fixture_free(fixture *fx) {
    lf_test_rmrf(fx->dir);
    free(fx->dir);
}

/* A log whose lines the test keeps: lines[i] without its newline. */
typedef struct lines {
    char **text;
    long *step;
    int n, cap;
} lines;

static void lines_add(lines *L, const char *path, long step, const char *fmt, ...) {
    char buf[70000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (L->n == L->cap) {
        L->cap = L->cap ? L->cap * 2 : 256;
        L->text = realloc(L->text, sizeof *L->text * (size_t)L->cap);
        L->step = realloc(L->step, sizeof *L->step * (size_t)L->cap);
    }
    L->text[L->n] = strdup(buf);
    L->step[L->n++] = step;
    FILE *f = fopen(path, "a");
    assert_non_null(f);
    fprintf(f, "%s\n", buf);
    fclose(f);
}

static void lines_free(lines *L) {
    for (int i = 0; i < L->n; i++) free(L->text[i]);
    free(L->text);
    free(L->step);
    memset(L, 0, sizeof *L);
}

static void add_train(lines *L, const char *path, long step, double loss) {
    lines_add(L, path, step,
              "{\"type\":\"train\",\"step\":%ld,\"loss\":%.17g,\"lr\":0.001,\"grad_norm\":1.5,\"tokens_per_sec\":1000,"
              "\"ms\":12.5,\"train/mfu\":0.25,\"memory/rss_bytes\":1e+08,\"memory/planned_bytes\":9e+07}",
              step, loss);
}

static lf__dash *dash_open(const fixture *fx, size_t max_response, const char *header_json) {
    lf_dash_opts o = {.log_path = fx->log,
                      .run_dir = fx->dir,
                      .header_json = header_json,
                      .max_response = max_response};
    lf__dash *d = NULL;
    LF_ASSERT_OK(lf__dash_create(&d, &o));
    return d;
}

/* One /api/run answer: its text and its parse. */
typedef struct answer {
    char *text;
    size_t len;
    cJSON *json;
} answer;

static answer api(lf__dash *d, const char *query) {
    answer a = {0};
    int status = 0;
    a.text = lf__dash_api(d, query, &a.len, &status);
    assert_non_null(a.text);
    assert_int_equal(status, 200);
    assert_int_equal(strlen(a.text), a.len);
    a.json = cJSON_Parse(a.text);
    if (!a.json) fail_msg("/api/run?%s is not JSON: %.300s", query, a.text);
    return a;
}

static void answer_free(answer *a) {
    free(a->text);
    cJSON_Delete(a->json);
}

static double num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(v)) fail_msg("'%s' is not a number", k);
    return v->valuedouble;
}

static int is_true(const cJSON *o, const char *k) { return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, k)); }

/* The bytes of the records array: must be exactly the given lines joined by ','. */
static void assert_records_are(const answer *a, char **want, int n) {
    const char *p = strstr(a->text, "\"records\":[");
    assert_non_null(p);
    p += strlen("\"records\":[");
    for (int i = 0; i < n; i++) {
        size_t l = strlen(want[i]);
        if (strncmp(p, want[i], l) != 0)
            fail_msg("record %d differs from its log line:\n got  %.200s\n want %.200s", i, p, want[i]);
        p += l;
        if (i + 1 < n) {
            if (*p != ',') fail_msg("no ',' after record %d", i);
            p++;
        }
    }
    if (*p != ']') fail_msg("more records than the %d expected: %.100s", n, p);
}

/* ---------------------------------------------------------------- records and paging */

static void test_api_paging(void **state) {
    (void)state;
    fixture fx;
    fixture_make(&fx);
    lines L = {0};
    lines_add(&L, fx.log, 0, "{\"type\":\"start\",\"step\":0,\"time\":1700000000.5,\"num_params\":1234}");
    for (long s = 1; s <= 300; s++) {
        add_train(&L, fx.log, s, 4.0 - s * 0.001);
        if (s % 50 == 0) {
            lines_add(
                &L, fx.log, s,
                "{\"type\":\"eval\",\"step\":%ld,\"train_loss\":3.5,\"val_loss\":3.6,\"eval/arith/exact_match\":0.5}",
                s);
            lines_add(
                &L, fx.log, s,
                "{\"type\":\"checkpoint\",\"step\":%ld,\"time\":1700000100,\"path\":\"run/ckpt/step_%08ld\",\"ms\":3}",
                s, s);
        }
    }
    const size_t bound = 4096;
    lf__dash *d = dash_open(&fx, bound, NULL);
    long since = -1;
    int at = 0, pages = 0;
    for (;;) {
        char q[64];
        snprintf(q, sizeof q, "since=%ld", since);
        answer a = api(d, q);
        const cJSON *recs = cJSON_GetObjectItemCaseSensitive(a.json, "records");
        int n = cJSON_GetArraySize(recs);
        assert_int_equal((long)num(a.json, "count"), n);
        assert_int_equal((long)num(a.json, "since"), since);
        assert_int_equal((long)num(a.json, "skipped_lines"), 0);
        /* exactly the next lines of the log, byte for byte */
        if (at + n > L.n) fail_msg("page %d: %d records past the end", pages, at + n - L.n);
        assert_records_are(&a, L.text + at, n);
        size_t bytes = 0;
        for (int i = 0; i < n; i++) {
            assert_true(L.step[at + i] > since);
            bytes += strlen(L.text[at + i]) + 1;
        }
        long last = (long)num(a.json, "last_step");
        if (n) {
            assert_int_equal(last, L.step[at + n - 1]);
            /* whole steps: the next line (if any) has a greater step */
            if (at + n < L.n) assert_true(L.step[at + n] > last);
            /* bounded, unless one step alone is more */
            if (bytes > bound && L.step[at] != last) fail_msg("page %d holds %zu bytes > %zu", pages, bytes, bound);
        } else {
            assert_int_equal(last, since);
        }
        at += n;
        int more = is_true(a.json, "more");
        assert_int_equal(more, at < L.n);
        answer_free(&a);
        pages++;
        if (!more) break;
        since = last;
        assert_true(pages < 1000);
    }
    assert_int_equal(at, L.n);
    assert_true(pages > 10); /* the bound did page it: ~63 KB of log in 4 KiB pages */
    /* nothing new: an empty page that keeps its place */
    answer a = api(d, "since=300");
    assert_int_equal((long)num(a.json, "count"), 0);
    assert_int_equal((long)num(a.json, "last_step"), 300);
    assert_false(is_true(a.json, "more"));
    answer_free(&a);
    /* the log grows: the new step, and nothing else */
    add_train(&L, fx.log, 301, 1.25);
    a = api(d, "since=300");
    assert_records_are(&a, L.text + L.n - 1, 1);
    answer_free(&a);
    /* a since inside the log: from the first record after it */
    a = api(d, "since=149");
    const cJSON *first = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(a.json, "records"), 0);
    assert_int_equal((long)num(first, "step"), 150);
    answer_free(&a);
    /* no since, and since=-1: from the start */
    a = api(d, "");
    first = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(a.json, "records"), 0);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(first, "type")->valuestring, "start");
    answer_free(&a);
    lf__dash_free(d);
    lines_free(&L);
    fixture_free(&fx);
}

/* One step larger than the bound still comes whole, in one answer. */
static void test_api_big_step(void **state) {
    (void)state;
    fixture fx;
    fixture_make(&fx);
    lines L = {0};
    add_train(&L, fx.log, 1, 3);
    char pad[3000];
    memset(pad, 'x', sizeof pad - 1);
    pad[sizeof pad - 1] = '\0';
    for (int i = 0; i < 4; i++) lines_add(&L, fx.log, 2, "{\"type\":\"alert\",\"step\":2,\"message\":\"%s\"}", pad);
    add_train(&L, fx.log, 3, 3);
    lf__dash *d = dash_open(&fx, 1024, NULL);
    answer a = api(d, "since=1");
    assert_int_equal((long)num(a.json, "count"), 4);
    assert_records_are(&a, L.text + 1, 4);
    assert_true(is_true(a.json, "more"));
    assert_int_equal((long)num(a.json, "last_step"), 2);
    answer_free(&a);
    lf__dash_free(d);
    lines_free(&L);
    fixture_free(&fx);
}

/* ---------------------------------------------------------------- damaged logs */

static void test_api_torn_and_corrupt(void **state) {
    (void)state;
    fixture fx;
    fixture_make(&fx);
    lines L = {0};
    add_train(&L, fx.log, 1, 3.0);
    write_file(fx.log, "garbage{\n", "a");                          /* line 2 */
    add_train(&L, fx.log, 2, 2.9);                                  /* line 3 */
    write_file(fx.log, "{\"type\":\"train\"}\n", "a");              /* line 4: no step */
    write_file(fx.log, "\n", "a");                                  /* line 5: blank, not a warning */
    add_train(&L, fx.log, 3, 2.8);                                  /* line 6 */
    write_file(fx.log, "{\"type\":\"train\",\"step\":4,\"lo", "a"); /* line 7, being written */
    lf__dash *d = dash_open(&fx, 0, NULL);
    answer a = api(d, "since=-1");
    assert_records_are(&a, L.text, 3);
    assert_int_equal((long)num(a.json, "skipped_lines"), 2);
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(a.json, "warnings");
    assert_int_equal(cJSON_GetArraySize(w), 2);
    assert_non_null(strstr(cJSON_GetArrayItem(w, 0)->valuestring, "log.jsonl:2: not a JSON object"));
    assert_non_null(strstr(cJSON_GetArrayItem(w, 1)->valuestring, "log.jsonl:4: no numeric \"step\""));
    assert_false(is_true(a.json, "more"));
    answer_free(&a);
    /* the torn line is finished: now it counts, as line 7 */
    write_file(fx.log, "ss\":2.7}\n", "a");
    a = api(d, "since=3");
    assert_int_equal((long)num(a.json, "count"), 1);
    const cJSON *r = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(a.json, "records"), 0);
    assert_int_equal((long)num(r, "step"), 4);
    assert_true(fabs(num(r, "loss") - 2.7) == 0);
    answer_free(&a);
    /* a line over 64 KiB is left out, named; arriving in pieces too */
    char *big = malloc(70001);
    memset(big, 'y', 70000);
    big[70000] = '\0';
    FILE *f = fopen(fx.log, "a");
    fprintf(f, "{\"type\":\"alert\",\"step\":5,\"message\":\"%s\"}\n", big);     /* line 8 */
    fprintf(f, "{\"type\":\"alert\",\"step\":5,\"message\":\"%.*s", 35000, big); /* line 9, half */
    fclose(f);
    a = api(d, "since=4");
    assert_int_equal((long)num(a.json, "count"), 0);
    answer_free(&a);
    f = fopen(fx.log, "a");
    fprintf(f, "%.*s\"}\n", 35000, big);
    fclose(f);
    add_train(&L, fx.log, 6, 2.6); /* line 10 */
    a = api(d, "since=4");
    assert_records_are(&a, L.text + L.n - 1, 1);
    assert_int_equal((long)num(a.json, "skipped_lines"), 4);
    w = cJSON_GetObjectItemCaseSensitive(a.json, "warnings");
    assert_non_null(strstr(cJSON_GetArrayItem(w, 2)->valuestring, "log.jsonl:8: longer than 64 KiB"));
    assert_non_null(strstr(cJSON_GetArrayItem(w, 3)->valuestring, "log.jsonl:9: longer than 64 KiB"));
    answer_free(&a);
    free(big);
    lf__dash_free(d);
    lines_free(&L);
    fixture_free(&fx);
}

/* A resumed run: the unfinished attempt's steps after the resume point are superseded. */
static void test_api_resume(void **state) {
    (void)state;
    fixture fx;
    fixture_make(&fx);
    lines L = {0};
    for (long s = 1; s <= 10; s++) {
        add_train(&L, fx.log, s, 5.0);
        if (s == 5) lines_add(&L, fx.log, 5, "{\"type\":\"checkpoint\",\"step\":5,\"time\":1,\"path\":\"c\",\"ms\":1}");
    }
    lines_add(&L, fx.log, 5, "{\"type\":\"resume\",\"step\":5,\"time\":2,\"path\":\"c\"}");
    for (long s = 6; s <= 8; s++) add_train(&L, fx.log, s, 100.0 + (double)s);
    lf__dash *d = dash_open(&fx, 0, NULL);
    answer a = api(d, "since=-1");
    /* train 1-5, checkpoint 5 (lines 0-5), then the resume and the new 6-8 (lines 11-14) */
    char *want[10];
    int n = 0;
    for (int i = 0; i <= 5; i++) want[n++] = L.text[i];
    for (int i = 11; i < L.n; i++) want[n++] = L.text[i];
    assert_int_equal(n, 10);
    assert_records_are(&a, want, n);
    answer_free(&a);
    a = api(d, "since=7");
    const cJSON *r = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(a.json, "records"), 0);
    assert_int_equal((long)num(a.json, "count"), 1);
    assert_true(num(r, "loss") == 108.0);
    answer_free(&a);
    lf__dash_free(d);
    lines_free(&L);
    fixture_free(&fx);
}

/* A log replaced by a new file (a fresh run in the same out_dir) is read again from its start. */
static void test_api_log_replaced(void **state) {
    (void)state;
    fixture fx;
    fixture_make(&fx);
    lines L = {0};
    for (long s = 1; s <= 20; s++) add_train(&L, fx.log, s, 3.0);
    lf__dash *d = dash_open(&fx, 0, NULL);
    answer a = api(d, "since=-1");
    assert_int_equal((long)num(a.json, "count"), 20);
    answer_free(&a);
    char tmp[700];
    snprintf(tmp, sizeof tmp, "%s.new", fx.log);
    write_file(tmp, "{\"type\":\"start\",\"step\":0,\"time\":5}\n{\"type\":\"train\",\"step\":1,\"loss\":9}\n", "w");
    assert_int_equal(rename(tmp, fx.log), 0);
    a = api(d, "since=-1");
    assert_int_equal((long)num(a.json, "count"), 2);
    const cJSON *r = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(a.json, "records"), 1);
    assert_true(num(r, "loss") == 9.0);
    answer_free(&a);
    /* and a log that does not exist yet is an empty run, not an error */
    assert_int_equal(unlink(fx.log), 0);
    a = api(d, "since=-1");
    assert_int_equal((long)num(a.json, "count"), 0);
    answer_free(&a);
    lf__dash_free(d);
    lines_free(&L);
    fixture_free(&fx);
}

/* More than one read's worth (8 MiB): indexed over several requests, "more" until all is read. */
static void test_api_large_log(void **state) {
    (void)state;
    fixture fx;
    fixture_make(&fx);
    FILE *f = fopen(fx.log, "w");
    assert_non_null(f);
    char pad[201];
    memset(pad, 'p', 200);
    pad[200] = '\0';
    const long N = 40000; /* ~10 MB */
    for (long s = 1; s <= N; s++) fprintf(f, "{\"type\":\"train\",\"step\":%ld,\"loss\":1,\"pad\":\"%s\"}\n", s, pad);
    fclose(f);
    /* a bound above the read size: the first answer ends where reading stopped, and says more */
    lf__dash *d = dash_open(&fx, 16u << 20, NULL);
    long since = -1, total = 0, prev = 0;
    int pages = 0;
    for (;;) {
        char q[64];
        snprintf(q, sizeof q, "since=%ld", since);
        answer a = api(d, q);
        const cJSON *recs = cJSON_GetObjectItemCaseSensitive(a.json, "records"), *r;
        cJSON_ArrayForEach(r, recs) {
            long s = (long)num(r, "step");
            if (s != prev + 1) fail_msg("record after step %ld is step %ld", prev, s);
            prev = s;
            total++;
        }
        assert_true(a.len < (16u << 20) + 4096);
        if (pages == 0 && total >= N) fail_msg("the first answer holds all %ld records: more than one read", total);
        int more = is_true(a.json, "more");
        since = (long)num(a.json, "last_step");
        answer_free(&a);
        pages++;
        if (!more) break;
        assert_true(pages < 100);
    }
    assert_int_equal(total, N);
    assert_true(pages >= 2);
    lf__dash_free(d);
    fixture_free(&fx);
}

static void test_api_bad_query(void **state) {
    (void)state;
    fixture fx;
    fixture_make(&fx);
    lines L = {0};
    add_train(&L, fx.log, 1, 3.0);
    lf__dash *d = dash_open(&fx, 0, NULL);
    static const char *bad[] = {"since=abc", "since=-2", "since=", "since=1x", "since=99999999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t len;
        int status = 0;
        char *t = lf__dash_api(d, bad[i], &len, &status);
        assert_non_null(t);
        if (status != 400) fail_msg("?%s answered %d, not 400", bad[i], status);
        assert_non_null(strstr(t, "since must be an integer"));
        free(t);
    }
    /* other parameters are ignored; since may come after them */
    answer a = api(d, "x=1&since=0");
    assert_int_equal((long)num(a.json, "count"), 1);
    answer_free(&a);
    a = api(d, "x=1");
    assert_int_equal((long)num(a.json, "since"), -1);
    answer_free(&a);
    lf__dash_free(d);
    lines_free(&L);
    fixture_free(&fx);
}

/* ---------------------------------------------------------------- the header */

static void emit_train(lf__dash *d, long step, double wall, double ms) {
    lf_obs_scalar sc[2] = {{"train/loss", 1.0}, {"time/step_ms", ms}};
    lf_obs_record r = {.kind = LF_OBS_TRAIN, .step = step, .wall_time = wall, .scalars = sc, .n_scalars = 2};
    lf__dash_emit(d, &r);
}

static void test_header(void **state) {
    (void)state;
    fixture fx;
    fixture_make(&fx);
    lf__dash *d = dash_open(&fx, 0, "{\"num_params\":1234,\"world_size\":1,\"precision\":\"overridden\"}");
    answer a = api(d, "");
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(a.json, "header");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(h, "model"), *b = cJSON_GetObjectItemCaseSensitive(h, "batch");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(m, "arch")->valuestring, "gpt2");
    assert_int_equal((int)num(m, "n_layer"), 2);
    assert_int_equal((int)num(m, "n_embd"), 64);
    assert_int_equal((int)num(b, "micro"), 4);
    assert_int_equal((int)num(b, "accumulation"), 2);
    assert_int_equal((int)num(b, "world_size"), 1); /* 8 / (4 x 2) */
    assert_int_equal((int)num(b, "tokens_per_step"), 8 * 32);
    assert_int_equal((int)num(h, "train_iters"), 500);
    assert_int_equal((int)num(h, "num_params"), 1234);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(h, "precision")->valuestring,
                        "overridden"); /* the caller's wins */
    char hex[65];
    LF_ASSERT_OK(lf_sha256_file_hex(fx.cfg, hex));
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(h, "config_hash")->valuestring, hex);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(h, "status")->valuestring, "running");
    assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(h, "eta_s"))); /* no step yet */
    answer_free(&a);
    /* step 1 ended at t=1000.5 after 500 ms, step 11 at t=1010.5: 11 steps in 10.5 s */
    emit_train(d, 1, 1000.5, 500);
    emit_train(d, 11, 1010.5, 500);
    a = api(d, "");
    h = cJSON_GetObjectItemCaseSensitive(a.json, "header");
    assert_int_equal((long)num(h, "step"), 11);
    assert_int_equal((long)num(h, "first_step"), 0);
    assert_true(fabs(num(h, "first_time") - 1000.0) < 1e-9);
    assert_true(fabs(num(h, "last_time") - 1010.5) < 1e-9);
    double want = (500.0 - 11.0) * 10.5 / 11.0;
    if (fabs(num(h, "eta_s") - want) > 1e-9 * want) fail_msg("eta_s %.17g, want %.17g", num(h, "eta_s"), want);
    answer_free(&a);
    lf_obs_record end = {.kind = LF_OBS_EVENT,
                         .step = 11,
                         .event = "end",
                         .json = "{\"status\":\"error\",\"message\":\"x\"}"};
    lf__dash_emit(d, &end);
    a = api(d, "");
    h = cJSON_GetObjectItemCaseSensitive(a.json, "header");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(h, "status")->valuestring, "error");
    answer_free(&a);
    lf__dash_free(d);
    /* a run directory without its config: the header says why, the API still answers */
    assert_int_equal(unlink(fx.cfg), 0);
    d = dash_open(&fx, 0, NULL);
    a = api(d, "");
    h = cJSON_GetObjectItemCaseSensitive(a.json, "header");
    assert_non_null(strstr(cJSON_GetObjectItemCaseSensitive(h, "header_warning")->valuestring, "config.resolved.json"));
    answer_free(&a);
    lf__dash_free(d);
    fixture_free(&fx);
}

/* ---------------------------------------------------------------- the servers */

static int tcp_connect(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

typedef struct resp {
    int status;
    char *raw, *body;
    size_t body_len;
} resp;

static resp request(int port, const char *method, const char *path) {
    resp r = {0};
    int fd = tcp_connect(port);
    if (fd < 0) return r;
    char req[512];
    snprintf(req, sizeof req, "%s %s HTTP/1.0\r\nHost: t\r\n%s\r\n", method, path,
             strcmp(method, "POST") ? "" : "Content-Length: 0\r\n"); /* a POST without a length is a 411 */
    if (send(fd, req, strlen(req), MSG_NOSIGNAL) != (ssize_t)strlen(req)) {
        close(fd);
        return r;
    }
    size_t cap = 1 << 16, got = 0;
    r.raw = malloc(cap);
    for (;;) {
        if (got + 1 >= cap) r.raw = realloc(r.raw, cap *= 2);
        ssize_t k = recv(fd, r.raw + got, cap - 1 - got, 0);
        if (k <= 0) break;
        got += (size_t)k;
    }
    close(fd);
    r.raw[got] = '\0';
    char *sep = strstr(r.raw, "\r\n\r\n");
    if (sep && sscanf(r.raw, "HTTP/1.%*d %d", &r.status) == 1) {
        *sep = '\0';
        r.body = sep + 4;
        r.body_len = got - (size_t)(r.body - r.raw);
    }
    return r;
}

static void check_page(int port) {
    resp r = request(port, "GET", "/");
    assert_int_equal(r.status, 200);
    assert_non_null(strcasestr(r.raw, "Content-Type: text/html; charset=utf-8"));
    assert_non_null(strstr(r.raw, "Content-Security-Policy: default-src 'none'"));
    assert_int_equal(r.body_len, lf__dashboard_html_len);
    assert_int_equal(memcmp(r.body, lf__dashboard_html, r.body_len), 0);
    assert_non_null(strstr(r.body, "id=\"lf-schema\""));
    free(r.raw);
    r = request(port, "HEAD", "/");
    assert_int_equal(r.status, 200);
    assert_int_equal(r.body_len, 0);
    free(r.raw);
    r = request(port, "GET", "/api/run?since=-1");
    assert_int_equal(r.status, 200);
    assert_non_null(strcasestr(r.raw, "Content-Type: application/json"));
    cJSON *j = cJSON_Parse(r.body);
    assert_non_null(j);
    assert_int_equal((int)num(j, "count"), 3);
    cJSON_Delete(j);
    free(r.raw);
    r = request(port, "GET", "/api/run?since=zz");
    assert_int_equal(r.status, 400);
    free(r.raw);
    r = request(port, "POST", "/api/run");
    assert_int_equal(r.status, 405);
    assert_non_null(strstr(r.raw, "Allow: GET, HEAD"));
    free(r.raw);
}

static void test_servers(void **state) {
    (void)state;
    fixture fx;
    fixture_make(&fx);
    lines L = {0};
    for (long s = 1; s <= 3; s++) add_train(&L, fx.log, s, 3.0);
    /* the dashboard's own server */
    lf_dash_opts o = {.host = "127.0.0.1", .port = 0, .log_path = fx.log, .run_dir = fx.dir};
    lf_obs_sink *sink = NULL;
    LF_ASSERT_OK(lf_obs_dashboard_open(&sink, &o));
    int port = lf_obs_dashboard_port(sink);
    assert_true(port > 0);
    check_page(port);
    resp r = request(port, "GET", "/health");
    assert_int_equal(r.status, 200);
    free(r.raw);
    r = request(port, "GET", "/metrics"); /* the dashboard alone has no metrics */
    assert_int_equal(r.status, 404);
    free(r.raw);
    sink->close(sink);
    /* the Prometheus server with the dashboard */
    lf_prom_opts po = {.host = "127.0.0.1", .port = 0, .dashboard = &o};
    LF_ASSERT_OK(lf_obs_prometheus_open(&sink, &po));
    port = lf_obs_prometheus_port(sink);
    assert_int_equal(lf_obs_dashboard_port(sink), port);
    check_page(port);
    r = request(port, "GET", "/metrics");
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "llmforge_steps_total{"));
    free(r.raw);
    /* records reach both: the metrics and the dashboard's header */
    lf_obs_scalar sc[1] = {{"train/loss", 2.5}};
    lf_obs_record rec = {.kind = LF_OBS_TRAIN, .step = 3, .wall_time = 10, .scalars = sc, .n_scalars = 1};
    sink->emit(sink, &rec);
    r = request(port, "GET", "/api/run?since=3");
    assert_non_null(strstr(r.body, "\"step\":3,"));
    free(r.raw);
    sink->close(sink);
    /* and without it, / is not served */
    lf_prom_opts plain = {.host = "127.0.0.1", .port = 0};
    LF_ASSERT_OK(lf_obs_prometheus_open(&sink, &plain));
    assert_int_equal(lf_obs_dashboard_port(sink), -1);
    r = request(lf_obs_prometheus_port(sink), "GET", "/");
    assert_int_equal(r.status, 404);
    free(r.raw);
    sink->close(sink);
    lines_free(&L);
    fixture_free(&fx);
}

static void test_open_errors_and_fallback(void **state) {
    (void)state;
    fixture fx;
    fixture_make(&fx);
    lf_obs_sink *sink = (lf_obs_sink *)1;
    assert_int_equal(lf_obs_dashboard_open(&sink, NULL), LF_ERR_INVALID_ARG);
    assert_null(sink);
    lf_dash_opts o = {.port = 0};
    assert_int_equal(lf_obs_dashboard_open(&sink, &o), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS("log_path");
    o.log_path = fx.log;
    o.port = 70000;
    assert_int_equal(lf_obs_dashboard_open(&sink, &o), LF_ERR_RANGE);
    o.port = 0;
    o.header_json = "[1]";
    assert_int_equal(lf_obs_dashboard_open(&sink, &o), LF_ERR_CONFIG);
    LF_ASSERT_ERR_CONTAINS("header_json");
    o.header_json = NULL;
    o.host = "not a host";
    assert_int_equal(lf_obs_dashboard_open(&sink, &o), LF_ERR_CONFIG);
    LF_ASSERT_ERR_CONTAINS("dashboard: host 'not a host'");
    o.host = NULL;
    /* a taken port: an error, or with port_fallback another port */
    int busy = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    assert_int_equal(bind(busy, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(busy, 4), 0);
    socklen_t al = sizeof a;
    getsockname(busy, (struct sockaddr *)&a, &al);
    o.port = ntohs(a.sin_port);
    assert_int_equal(lf_obs_dashboard_open(&sink, &o), LF_ERR_IO);
    char want[64];
    snprintf(want, sizeof want, "dashboard: cannot listen on 127.0.0.1:%d", o.port);
    LF_ASSERT_ERR_CONTAINS(want);
    o.port_fallback = 1;
    LF_ASSERT_OK(lf_obs_dashboard_open(&sink, &o));
    int got = lf_obs_dashboard_port(sink);
    assert_true(got > 0 && got != o.port);
    resp r = request(got, "GET", "/health");
    assert_int_equal(r.status, 200);
    free(r.raw);
    sink->close(sink);
    close(busy);
    assert_int_equal(lf_obs_dashboard_port(NULL), -1);
    fixture_free(&fx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_api_paging),
        cmocka_unit_test(test_api_big_step),
        cmocka_unit_test(test_api_torn_and_corrupt),
        cmocka_unit_test(test_api_resume),
        cmocka_unit_test(test_api_log_replaced),
        cmocka_unit_test(test_api_large_log),
        cmocka_unit_test(test_api_bad_query),
        cmocka_unit_test(test_header),
        cmocka_unit_test(test_servers),
        cmocka_unit_test(test_open_errors_and_fallback),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
