/*
 * The live dashboard: GET / (the embedded page, dashboard.html) and
 * GET /api/run (the run's header and its log.jsonl records, incremental),
 * served by the Prometheus sink's server or by a server of its own
 * (lf_obs_dashboard_open). include/llmforge/obs.h is the contract; dash.h
 * says which thread does what.
 *
 * Why the records come from the log file rather than from the bus: the page
 * must show what log.jsonl holds, byte for byte, including what an earlier
 * attempt of a resumed run wrote; and reading the file on the HTTP threads
 * keeps every client, fast, slow or hostile, off the training thread, which
 * only writes the file (jsonl_sink.c flushes every line) and notes the step
 * here. No library serves "the tail of a JSON-lines file, paged by a key":
 * it is a small index kept here.
 *
 * The index (idx_mu): one entry (offset, length, step) per usable line of
 * the effective log, in log order, steps non-decreasing. It grows on the
 * HTTP threads, from the last complete line read, by at most
 * LF_DASH_READ_CHUNK bytes per request (so a request never takes long even
 * on a huge log; the next one continues). A line is usable when it is a
 * JSON object with a numeric "step", at most LF_DASH_MAX_LINE bytes; other
 * lines are counted and the first few named ("log.jsonl:17: ..."). An
 * incomplete last line (being written) is not read until its newline
 * arrives. A line whose step is below the last entry's (a resume) removes
 * the entries with a greater step: those of the attempt that did not finish
 * (TensorBoard's purge of orphaned steps; resume is exact, so they are
 * repeated). A file that shrank or was replaced (another inode) is indexed
 * again from its start.
 *
 * Invariants of an /api/run answer for since = S: its records are the
 * entries with step > S in log order, from the first such entry up to the
 * end of a step (never part of a step), at most max_response bytes of them
 * unless the first step alone is more; last_step is the last record's step
 * (S when there is none) and more is 1 when entries with a greater step
 * exist or the last read stopped before the end of the file. So asking
 * again with since = last_step loses and repeats nothing.
 */
#include "dash.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "http/http.h"

#define DASH_MAX_WARN 8 /* lines named in "warnings"; the rest are counted */

/* ---------------------------------------------------------------- state */

typedef struct idx_entry {
    off_t off;
    size_t len;
    long step;
} idx_entry;

struct lf__dash {
    char *log_path;
    const char *log_name; /* the file name in messages ("log.jsonl") */
    char *header_static;  /* members of the header known at start, without braces */
    size_t max_response;
    double server_start;
    double train_iters; /* from the header; NAN when unknown */

    pthread_mutex_t live_mu; /* the training thread's notes */
    long step, first_step;
    double first_time, last_time;
    int have_first;
    char status[16];

    pthread_mutex_t idx_mu; /* the index of the log */
    idx_entry *ent;
    size_t n, cap;
    off_t read_off; /* bytes consumed: whole lines only */
    long line_no;   /* lines consumed */
    int skipping;   /* inside a line longer than LF_DASH_MAX_LINE */
    long skipping_line;
    dev_t dev;
    ino_t ino;
    int have_file;
    int unread; /* the last update stopped at LF_DASH_READ_CHUNK: the file holds more */
    long skipped;
    char warn[DASH_MAX_WARN][200];
    int n_warn;
};

/* ---------------------------------------------------------------- create / free */

lf_status lf__dash_create(lf__dash **out, const lf_dash_opts *o) {
    *out = NULL;
    if (!o || !o->log_path || !o->log_path[0])
        return lf_fail(LF_ERR_INVALID_ARG, "dashboard: no log_path (the log.jsonl to show)");
    cJSON *extra = NULL;
    if (o->header_json) {
        extra = cJSON_Parse(o->header_json);
        if (!cJSON_IsObject(extra)) {
            cJSON_Delete(extra);
            return lf_fail(LF_ERR_CONFIG, "dashboard: header_json is not a JSON object");
        }
    }
    lf__dash *d = calloc(1, sizeof *d);
    if (!d) {
        cJSON_Delete(extra);
        return lf_fail(LF_ERR_NOMEM, "dashboard: out of memory");
    }
    pthread_mutex_init(&d->live_mu, NULL);
    pthread_mutex_init(&d->idx_mu, NULL);
    d->log_path = strdup(o->log_path);
    char *dir = NULL;
    if (o->run_dir) {
        dir = strdup(o->run_dir);
    } else if (d->log_path) {
        dir = strdup(d->log_path);
        char *slash = dir ? strrchr(dir, '/') : NULL;
        if (slash) *slash = '\0';
        else if (dir) strcpy(dir, ".");
    }
    char warn[256] = "";
    cJSON *h = dir ? lf__run_header(dir, warn, sizeof warn) : NULL;
    free(dir);
    if (!d->log_path || !h) {
        cJSON_Delete(h);
        cJSON_Delete(extra);
        lf__dash_free(d);
        return lf_fail(LF_ERR_NOMEM, "dashboard: out of memory");
    }
    const char *slash = strrchr(d->log_path, '/');
    d->log_name = slash ? slash + 1 : d->log_path;
    if (warn[0]) cJSON_AddStringToObject(h, "header_warning", warn);
    cJSON *it;
    cJSON_ArrayForEach(it, extra) {
        cJSON_DeleteItemFromObjectCaseSensitive(h, it->string);
        cJSON_AddItemToObject(h, it->string, cJSON_Duplicate(it, 1));
    }
    cJSON_Delete(extra);
    const cJSON *ti = cJSON_GetObjectItemCaseSensitive(h, "train_iters");
    d->train_iters = cJSON_IsNumber(ti) ? ti->valuedouble : NAN;
    char *txt = lf_json_print(h, 0);
    cJSON_Delete(h);
    if (!txt) {
        lf__dash_free(d);
        return lf_fail(LF_ERR_NOMEM, "dashboard: out of memory");
    }
    size_t tl = strlen(txt); /* "{...}" -> "..." */
    d->header_static = malloc(tl);
    if (d->header_static) {
        memcpy(d->header_static, txt + 1, tl - 2);
        d->header_static[tl - 2] = '\0';
    }
    cJSON_free(txt);
    if (!d->header_static) {
        lf__dash_free(d);
        return lf_fail(LF_ERR_NOMEM, "dashboard: out of memory");
    }
    d->max_response = o->max_response ? o->max_response : LF_DASH_DEFAULT_RESPONSE;
    d->server_start = lf_obs_wall_time();
    snprintf(d->status, sizeof d->status, "running");
    *out = d;
    return LF_OK;
}

void lf__dash_free(lf__dash *d) {
    if (!d) return;
    pthread_mutex_destroy(&d->live_mu);
    pthread_mutex_destroy(&d->idx_mu);
    free(d->log_path);
    free(d->header_static);
    free(d->ent);
    free(d);
}

/* ---------------------------------------------------------------- training thread */

void lf__dash_emit(lf__dash *d, const lf_obs_record *r) {
    if (!d || !r) return;
    pthread_mutex_lock(&d->live_mu);
    if (r->kind == LF_OBS_TRAIN) {
        if (!d->have_first) {
            double ms = 0;
            for (int i = 0; i < r->n_scalars; i++)
                if (r->scalars[i].tag && !strcmp(r->scalars[i].tag, "time/step_ms")) ms = r->scalars[i].value;
            d->have_first = 1;
            d->first_step = r->step - 1; /* the step began when the previous one ended */
            d->first_time = r->wall_time - (isfinite(ms) && ms > 0 ? ms / 1e3 : 0);
        }
        d->step = r->step;
        d->last_time = r->wall_time;
    } else if (r->kind == LF_OBS_EVENT && r->event && !strcmp(r->event, "end")) {
        const char *s = r->json ? strstr(r->json, "\"status\":\"") : NULL;
        if (s) {
            s += 10;
            size_t n = strcspn(s, "\"");
            if (n >= sizeof d->status) n = sizeof d->status - 1;
            memcpy(d->status, s, n);
            d->status[n] = '\0';
        } else {
            snprintf(d->status, sizeof d->status, "ended");
        }
    }
    pthread_mutex_unlock(&d->live_mu);
}

/* ---------------------------------------------------------------- the index (idx_mu held) */

static void add_warning(lf__dash *d, long line, const char *what) {
    d->skipped++;
    if (d->n_warn < DASH_MAX_WARN)
        snprintf(d->warn[d->n_warn++], sizeof d->warn[0], "%s:%ld: %s", d->log_name, line, what);
}

static int push_entry(lf__dash *d, off_t off, size_t len, long step) {
    /* a step that goes back is a resume: the unfinished attempt's later steps are superseded */
    while (d->n > 0 && d->ent[d->n - 1].step > step) d->n--;
    if (d->n == d->cap) {
        size_t nc = d->cap ? d->cap * 2 : 1024;
        idx_entry *ne = realloc(d->ent, nc * sizeof *ne);
        if (!ne) return -1;
        d->ent = ne;
        d->cap = nc;
    }
    d->ent[d->n++] = (idx_entry){off, len, step};
    return 0;
}

static void reset_index(lf__dash *d) {
    d->n = 0;
    d->read_off = 0;
    d->line_no = 0;
    d->skipping = 0;
    d->skipped = 0;
    d->n_warn = 0;
}

/* Judge one complete line (NUL-terminated in place, newline removed). */
static int index_line(lf__dash *d, char *line, size_t len, off_t off) {
    long no = d->line_no;
    if (len == 0 || strspn(line, " \t\r") == len) return 0; /* blank: nothing to show, nothing wrong */
    cJSON *o = cJSON_ParseWithLength(line, len);
    const cJSON *st = o ? cJSON_GetObjectItemCaseSensitive(o, "step") : NULL;
    int rc = 0;
    if (!cJSON_IsObject(o)) add_warning(d, no, "not a JSON object (a torn or corrupt line); left out");
    else if (!cJSON_IsNumber(st) || !(st->valuedouble >= -1) || st->valuedouble > 9e15)
        add_warning(d, no, "no numeric \"step\"; left out");
    else rc = push_entry(d, off, len, (long)st->valuedouble);
    cJSON_Delete(o);
    return rc;
}

/* Read what the log gained since the last call (at most LF_DASH_READ_CHUNK). */
static lf_status update_index(lf__dash *d) {
    int fd = open(d->log_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) {
            reset_index(d);
            d->have_file = 0;
            return LF_OK; /* not written yet: an empty run */
        }
        return lf_fail(LF_ERR_IO, "dashboard: cannot open '%s': %s", d->log_path, strerror(errno));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return lf_fail(LF_ERR_IO, "dashboard: cannot stat '%s': %s", d->log_path, strerror(errno));
    }
    if (!d->have_file || sb.st_dev != d->dev || sb.st_ino != d->ino || sb.st_size < d->read_off) reset_index(d);
    d->have_file = 1;
    d->dev = sb.st_dev;
    d->ino = sb.st_ino;
    d->unread = 0;
    if (sb.st_size <= d->read_off) {
        close(fd);
        return LF_OK;
    }
    size_t want = (size_t)(sb.st_size - d->read_off);
    if (want > LF_DASH_READ_CHUNK) {
        want = LF_DASH_READ_CHUNK;
        d->unread = 1;
    }
    char *buf = malloc(want + 1);
    if (!buf) {
        close(fd);
        return lf_fail(LF_ERR_NOMEM, "dashboard: out of memory reading '%s'", d->log_path);
    }
    size_t got = 0;
    while (got < want) {
        ssize_t k = pread(fd, buf + got, want - got, d->read_off + (off_t)got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        got += (size_t)k;
    }
    close(fd);
    size_t at = 0;
    lf_status st = LF_OK;
    while (at < got) {
        char *nl = memchr(buf + at, '\n', got - at);
        if (!nl) {
            /* an incomplete line: wait for its end, unless it is already too long to show */
            if (got - at > LF_DASH_MAX_LINE && !d->skipping) {
                d->skipping = 1;
                d->skipping_line = d->line_no + 1;
            }
            if (d->skipping) at = got; /* consumed; the rest of it comes later */
            break;
        }
        size_t len = (size_t)(nl - (buf + at));
        d->line_no++;
        if (d->skipping) {
            d->skipping = 0;
            add_warning(d, d->skipping_line, "longer than 64 KiB; left out");
        } else if (len > LF_DASH_MAX_LINE) {
            add_warning(d, d->line_no, "longer than 64 KiB; left out");
        } else {
            *nl = '\0';
            if (index_line(d, buf + at, len, d->read_off + (off_t)at) != 0) {
                st = lf_fail(LF_ERR_NOMEM, "dashboard: out of memory indexing '%s'", d->log_path);
                break;
            }
        }
        at = (size_t)(nl - buf) + 1;
    }
    d->read_off += (off_t)at;
    free(buf);
    return st;
}

/* First entry with step > since (steps are non-decreasing). */
static size_t first_after(const lf__dash *d, long since) {
    size_t lo = 0, hi = d->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (d->ent[mid].step > since) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

/* ---------------------------------------------------------------- /api/run */

/* since=N in a query string; 0 when absent (since = -1), -1 when malformed. */
static int parse_since(const char *q, long *since) {
    *since = -1;
    for (const char *p = q; p && *p;) {
        const char *amp = strchr(p, '&');
        size_t n = amp ? (size_t)(amp - p) : strlen(p);
        if (n > 6 && !strncmp(p, "since=", 6)) {
            char num[32];
            size_t m = n - 6;
            if (m >= sizeof num) return -1;
            memcpy(num, p + 6, m);
            num[m] = '\0';
            char *end;
            errno = 0;
            long v = strtol(num, &end, 10);
            if (errno || end == num || *end || v < -1) return -1;
            *since = v;
            return 1;
        } else if (n == 6 && !strncmp(p, "since=", 6)) {
            return -1;
        }
        p = amp ? amp + 1 : NULL;
    }
    return 0;
}

static void put_header(lf__dash *d, lf__sb *b) {
    pthread_mutex_lock(&d->live_mu);
    long step = d->step, first_step = d->first_step;
    double first_time = d->first_time, last_time = d->last_time;
    int have = d->have_first;
    char status[sizeof d->status];
    memcpy(status, d->status, sizeof status);
    pthread_mutex_unlock(&d->live_mu);
    double eta = NAN;
    if (have && step > first_step && last_time > first_time && isfinite(d->train_iters)) {
        double left = d->train_iters - (double)step;
        eta = left > 0 ? left * (last_time - first_time) / (double)(step - first_step) : 0;
    }
    lf__sb_puts(b, "\"header\":{");
    lf__sb_puts(b, d->header_static);
    if (d->header_static[0]) lf__sb_puts(b, ",");
    lf__sb_puts(b, "\"status\":\"");
    lf__sb_json_str(b, status);
    lf__sb_printf(b, "\",\"step\":%ld,\"first_step\":", have ? step : 0);
    if (have) lf__sb_printf(b, "%ld", first_step);
    else lf__sb_puts(b, "null");
    lf__sb_puts(b, ",\"first_time\":");
    lf__sb_json_num(b, have ? first_time : NAN);
    lf__sb_puts(b, ",\"last_time\":");
    lf__sb_json_num(b, have ? last_time : NAN);
    lf__sb_puts(b, ",\"now\":");
    lf__sb_json_num(b, lf_obs_wall_time());
    lf__sb_puts(b, ",\"eta_s\":");
    lf__sb_json_num(b, eta);
    lf__sb_puts(b, ",\"server_start\":");
    lf__sb_json_num(b, d->server_start);
    lf__sb_puts(b, "}");
}

char *lf__dash_api(lf__dash *d, const char *query, size_t *len, int *status) {
    *len = 0;
    long since;
    if (parse_since(query, &since) < 0) {
        *status = 400;
        static const char msg[] = "bad query: since must be an integer >= -1 (the last step the client has)\n";
        char *m = malloc(sizeof msg);
        if (m) memcpy(m, msg, sizeof msg);
        *len = sizeof msg - 1;
        return m;
    }
    *status = 200;
    lf__sb b = {0};
    lf__sb_puts(&b, "{\"format\":\"llmforge-run-api\",\"version\":1,");
    put_header(d, &b);
    pthread_mutex_lock(&d->idx_mu);
    lf_status ust = update_index(d);
    char uerr[256] = "";
    if (ust != LF_OK) snprintf(uerr, sizeof uerr, "%s", lf_last_error());
    size_t i = first_after(d, since), end = i, bytes = 0;
    while (end < d->n) { /* whole steps, within the bound (the first step always) */
        size_t j = end, gb = 0;
        while (j < d->n && d->ent[j].step == d->ent[end].step) gb += d->ent[j++].len + 1;
        if (end > i && bytes + gb > d->max_response) break;
        bytes += gb;
        end = j;
    }
    long last = end > i ? d->ent[end - 1].step : since;
    int more = end < d->n || d->unread;
    lf__sb_printf(&b, ",\"since\":%ld,\"last_step\":%ld,\"more\":%s,\"count\":%zu,\"records\":[", since, last,
                  more ? "true" : "false", end - i);
    int fd = end > i ? open(d->log_path, O_RDONLY | O_CLOEXEC) : -1;
    size_t written = 0;
    for (size_t k = i; k < end && fd >= 0; k++) {
        const idx_entry *e = &d->ent[k];
        char tmp[8192], *line = e->len <= sizeof tmp ? tmp : malloc(e->len);
        if (!line) {
            b.failed = 1;
            break;
        }
        size_t got = 0;
        while (got < e->len) {
            ssize_t r = pread(fd, line + got, e->len - got, e->off + (off_t)got);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) break;
            got += (size_t)r;
        }
        /* a file changed under us between indexing and now: keep the JSON valid */
        if (got == e->len && line[0] == '{' && line[e->len - 1] == '}') {
            if (written++) lf__sb_puts(&b, ",");
            lf__sb_put(&b, line, e->len);
        }
        if (line != tmp) free(line);
    }
    if (fd >= 0) close(fd);
    lf__sb_printf(&b, "],\"skipped_lines\":%ld,\"warnings\":[", d->skipped);
    for (int w = 0; w < d->n_warn; w++) {
        lf__sb_puts(&b, w ? ",\"" : "\"");
        lf__sb_json_str(&b, d->warn[w]);
        lf__sb_puts(&b, "\"");
    }
    if (uerr[0]) {
        lf__sb_puts(&b, d->n_warn ? ",\"" : "\"");
        lf__sb_json_str(&b, uerr);
        lf__sb_puts(&b, "\"");
    }
    pthread_mutex_unlock(&d->idx_mu);
    lf__sb_puts(&b, "]}");
    if (b.failed) {
        lf__sb_free(&b);
        return NULL;
    }
    *len = b.len;
    return b.p;
}

/* ---------------------------------------------------------------- routes */

int lf__dash_route(lf__dash *d, lf__http_request *r) {
    const char *method = lf__http_method(r);
    const char *path = lf__http_path(r);
    int is_page = !strcmp(path, "/") || !strcmp(path, "/index.html");
    int is_api = !strcmp(path, "/api/run");
    if (!d || (!is_page && !is_api)) return 0;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
        static const lf__http_header allow = {"Allow", "GET, HEAD"};
        static const char msg[] = "method not allowed\n";
        (void)lf__http_reply(r, 405, "text/plain; charset=utf-8", &allow, 1, msg, sizeof msg - 1);
        return 1;
    }
    if (is_page) {
        /* the page loads nothing from anywhere: only its own /api/run */
        static const lf__http_header h[] = {
            {"Cache-Control", "no-store"},
            {"X-Content-Type-Options", "nosniff"},
            {"Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                                        "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'"},
        };
        if (lf__http_reply(r, 200, "text/html; charset=utf-8", h, 3, lf__dashboard_html, lf__dashboard_html_len) !=
            LF_OK)
            (void)lf__http_reply_text(r, 500, "out of memory\n");
        return 1;
    }
    size_t len = 0;
    int status = 500;
    char *body = lf__dash_api(d, lf__http_query(r), &len, &status);
    static const lf__http_header h[] = {{"Cache-Control", "no-store"}, {"X-Content-Type-Options", "nosniff"}};
    if (!body) {
        (void)lf__http_reply_text(r, 500, "out of memory\n");
        return 1;
    }
    const char *ctype = status == 200 ? "application/json" : "text/plain; charset=utf-8";
    if (lf__http_reply(r, status, ctype, h, 2, body, len) != LF_OK)
        (void)lf__http_reply_text(r, 500, "out of memory\n");
    free(body);
    return 1;
}

/* ---------------------------------------------------------------- the dashboard's own sink */

typedef struct dash_sink {
    lf_obs_sink base;
    lf__http_server *http;
    lf__dash *dash;
    int port;
} dash_sink;

static void dash_sink_emit(lf_obs_sink *s, const lf_obs_record *r) { lf__dash_emit(((dash_sink *)s->impl)->dash, r); }

static void dash_sink_close(lf_obs_sink *s) {
    if (!s) return;
    dash_sink *ds = s->impl;
    lf__http_stop(ds->http); /* joins the HTTP threads: nothing uses dash after this */
    lf__dash_free(ds->dash);
    free(ds);
}

static void dash_on_request(lf__http_request *r, void *user) {
    dash_sink *ds = user;
    if (lf__dash_route(ds->dash, r)) return;
    const char *method = lf__http_method(r);
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
        static const lf__http_header allow = {"Allow", "GET, HEAD"};
        static const char msg[] = "method not allowed\n";
        (void)lf__http_reply(r, 405, "text/plain; charset=utf-8", &allow, 1, msg, sizeof msg - 1);
    } else if (!strcmp(lf__http_path(r), "/health")) {
        (void)lf__http_reply_text(r, 200, "ok");
    } else {
        (void)lf__http_reply_text(r, 404, "not found\n");
    }
}

lf_status lf_obs_dashboard_open(lf_obs_sink **out, const lf_dash_opts *opts) {
    if (!out) return lf_fail(LF_ERR_INVALID_ARG, "dashboard: out is NULL");
    *out = NULL;
    if (!opts) return lf_fail(LF_ERR_INVALID_ARG, "dashboard: opts is NULL");
    if (opts->port < 0 || opts->port > 65535)
        return lf_fail(LF_ERR_RANGE, "dashboard: port %d is outside 1..65535 (0 = any free port)", opts->port);
    dash_sink *ds = calloc(1, sizeof *ds);
    if (!ds) return lf_fail(LF_ERR_NOMEM, "dashboard: out of memory");
    lf_status st = lf__dash_create(&ds->dash, opts);
    if (st != LF_OK) {
        free(ds);
        return st;
    }
    lf__http_opts ho = {
        .what = "dashboard",
        .host = opts->host ? opts->host : "127.0.0.1",
        .allow_names = 0,
        .port = opts->port,
        .threads = 2,
        .max_connections = 32,
        .request_deadline_s = 10,
        .idle_timeout_s = 10,
        .max_body = 0,
        .on_headers = dash_on_request,
        .on_request = dash_on_request,
        .user = ds,
    };
    st = lf__http_start(&ds->http, &ho);
    if (st == LF_ERR_IO && opts->port_fallback && opts->port != 0) {
        ho.port = 0; /* a person reads the URL from the log: any free port will do */
        st = lf__http_start(&ds->http, &ho);
    }
    if (st != LF_OK) {
        lf__dash_free(ds->dash);
        free(ds);
        return st;
    }
    ds->port = lf__http_port(ds->http);
    ds->base.name = "dashboard";
    ds->base.emit = dash_sink_emit;
    ds->base.close = dash_sink_close;
    ds->base.impl = ds;
    *out = &ds->base;
    return LF_OK;
}

int lf__prom_dashboard_port(const lf_obs_sink *s); /* prometheus.c */

int lf_obs_dashboard_port(const lf_obs_sink *s) {
    if (!s || !s->impl) return -1;
    if (s->close == dash_sink_close) return ((const dash_sink *)s->impl)->port;
    return lf__prom_dashboard_port(s);
}
