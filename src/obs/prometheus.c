/*
 * Prometheus sink: the latest training metrics as a /metrics endpoint.
 *
 * Format reference: the Prometheus text exposition format, version 0.0.4
 * (https://prometheus.io/docs/instrumenting/exposition_formats/). Each metric
 * family is one block "# HELP name text", "# TYPE name kind", then its
 * samples "name{label="value",...} value"; label values escape backslash,
 * double quote and newline as \\ \" \n; HELP text escapes backslash and
 * newline; values are Go-style floats (NaN, +Inf, -Inf). A histogram has
 * cumulative name_bucket{le="..."} samples ending with le="+Inf" (which
 * equals name_count), then name_sum and name_count.
 *
 * What is exported (every series carries rank="R",job="J" first):
 *   TRAIN records set the gauges llmforge_step (r->step), llmforge_loss,
 *   llmforge_lr, llmforge_grad_norm, llmforge_tokens_per_second,
 *   llmforge_mfu, llmforge_loss_scale, llmforge_last_step_timestamp_seconds
 *   (r->wall_time), llmforge_memory_bytes{kind="rss"|"planned"} and
 *   llmforge_step_phase_seconds{phase} (time/<phase>_ms other than step_ms);
 *   they add to llmforge_steps_total (+1) and llmforge_tokens_total
 *   (+train/tokens) and observe time/step_ms in the histogram
 *   llmforge_step_seconds. EVAL records set llmforge_eval{metric} from each
 *   eval/<metric> tag. EVENT "skipped_step" adds to
 *   llmforge_skipped_steps_total, EVENT "alert" to
 *   llmforge_alerts_total{kind=r->alert_kind}.
 *
 * Invariants:
 *   - A gauge family appears only once one of its series has a value;
 *     counters and the histogram are always present (from 0), and the
 *     alert kinds nan, loss_spike, stall, throughput_drop are pre-declared
 *     at 0 so alert rules can take increase() of them from the first scrape.
 *   - Counters never decrease: negative or non-finite increments are dropped.
 *   - All state lives in one fixed-size struct guarded by a mutex. emit()
 *     (training thread) updates it in place; the HTTP thread copies it under
 *     the mutex and renders the copy without holding the lock, so a scrape
 *     never delays a training step by more than a memcpy.
 *   - Names and label values from records (eval metrics, phases, alert
 *     kinds) go into fixed tables with hard caps; what does not fit is
 *     dropped (eval, phases) or counted as kind="other" (alerts).
 *   - With lf_prom_opts.dashboard the same server also answers the live
 *     dashboard's GET / and GET /api/run (dashboard/dash.c); emit hands
 *     every record to it after updating the metrics.
 *   - Only GET and HEAD are served: /metrics, /health; other paths are 404,
 *     other methods 405 (answered as soon as the headers are in: a body is
 *     never read). The query string is ignored.
 *   - HTTP goes through the shared layer (src/http/http.h): 2 worker threads,
 *     at most 32 connections with the oldest idle one dropped to make room
 *     for a new one, and a 10 s deadline for a whole request, so idle or
 *     byte-trickling clients cannot keep a scrape waiting (before, 32 idle
 *     connections made a scrape wait ~10 s, and 32 clients sending a byte
 *     every 2 s blocked scrapes for good: MHD's idle timer restarts on every
 *     byte).
 */
#include "llmforge/obs.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/http.h"
#include "core/strbuf.h"
#include "dashboard/dash.h"

/* ---------------------------------------------------------------- state */

#define PROM_NAME_MAX 128        /* bytes of an eval metric / phase / alert kind, NUL included */
#define PROM_MAX_EVAL 64         /* distinct eval/<metric> series */
#define PROM_MAX_PHASE 16        /* distinct time/<phase>_ms series */
#define PROM_MAX_ALERT 32        /* distinct alert kinds, "other" included */
#define PROM_BODY_CAP (4u << 20) /* a rendered page never exceeds this */

/* Upper bounds of llmforge_step_seconds, as printed in le="..." and as numbers. */
static const char *const k_le_str[] = {"0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5",
                                       "1",     "2.5",  "5",     "10",   "30",  "60"};
static const double k_le_val[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
#define PROM_N_BUCKETS ((int)(sizeof k_le_val / sizeof k_le_val[0]))

static const char *const k_alert_kinds[] = {"nan", "loss_spike", "stall", "throughput_drop"};

/* Scalar gauges, in the order they are rendered. */
enum { G_STEP, G_LOSS, G_LR, G_GRAD_NORM, G_TOKENS_PER_SEC, G_MFU, G_LOSS_SCALE, G_LAST_STEP_TS, G_COUNT };

typedef struct gauge_def {
    const char *name;
    const char *tag; /* source tag in TRAIN records; NULL = from the record itself */
    const char *help;
} gauge_def;

static const gauge_def k_gauges[G_COUNT] = {
    [G_STEP] = {"llmforge_step", NULL, "Optimizer steps completed."},
    [G_LOSS] = {"llmforge_loss", "train/loss", "Training loss of the last step."},
    [G_LR] = {"llmforge_lr", "train/lr", "Learning rate of the last step."},
    [G_GRAD_NORM] = {"llmforge_grad_norm", "train/grad_norm",
                     "Global gradient norm of the last step (before clipping)."},
    [G_TOKENS_PER_SEC] = {"llmforge_tokens_per_second", "train/tokens_per_sec",
                          "Training throughput of the last step in tokens per second."},
    [G_MFU] = {"llmforge_mfu", "train/mfu", "Model FLOPs utilization of the last step (0..1)."},
    [G_LOSS_SCALE] = {"llmforge_loss_scale", "train/loss_scale", "Dynamic loss scale (fp16)."},
    [G_LAST_STEP_TS] = {"llmforge_last_step_timestamp_seconds", NULL, "Unix time at which the last step finished."},
};

typedef struct named_value {
    char name[PROM_NAME_MAX];
    double value;
} named_value;

/* Everything the page shows. Plain data, copied whole for a scrape. */
typedef struct prom_state {
    double gauge[G_COUNT];
    unsigned char gauge_set[G_COUNT];
    double mem_rss, mem_planned;
    unsigned char mem_rss_set, mem_planned_set;
    named_value phase[PROM_MAX_PHASE];
    int n_phase;
    named_value eval[PROM_MAX_EVAL];
    int n_eval;
    named_value alert[PROM_MAX_ALERT]; /* value = count */
    int n_alert;
    double steps_total, tokens_total, skipped_total;
    uint64_t bucket[PROM_N_BUCKETS]; /* non-cumulative; the +Inf bucket is hist_count */
    uint64_t hist_count;
    double hist_sum;
} prom_state;

typedef struct prom_sink {
    lf_obs_sink base;
    lf__http_server *http;
    int port;          /* the bound port (differs from opts->port when that was 0) */
    char *base_labels; /* rank="R",job="J" with J escaped */
    pthread_mutex_t mu;
    prom_state st;
    lf__dash *dash; /* the live dashboard on the same server (NULL: none) */
} prom_sink;

/* ---------------------------------------------------------------- text buffer */

/* A label value, escaped: \ -> \\, " -> \", newline -> \n. */
static void sb_label_value(lf__sb *b, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '\\': lf__sb_put(b, "\\\\", 2); break;
        case '"': lf__sb_put(b, "\\\"", 2); break;
        case '\n': lf__sb_put(b, "\\n", 2); break;
        default: lf__sb_put(b, s, 1); break;
        }
    }
}

/* A sample value: %.17g, or NaN / +Inf / -Inf as the format spells them. */
static void sb_value(lf__sb *b, double v) {
    if (isnan(v)) lf__sb_puts(b, "NaN");
    else if (isinf(v)) lf__sb_puts(b, v > 0 ? "+Inf" : "-Inf");
    else lf__sb_printf(b, "%.17g", v);
}

/* ---------------------------------------------------------------- rendering */

static void put_family(lf__sb *b, const char *name, const char *type, const char *help) {
    /* HELP texts are constants here, free of backslashes and newlines. */
    lf__sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* name{<base>[,key="val"]} value */
static void put_sample(lf__sb *b, const char *name, const char *base, const char *key, const char *val, double v) {
    lf__sb_puts(b, name);
    lf__sb_puts(b, "{");
    lf__sb_puts(b, base);
    if (key) {
        lf__sb_puts(b, ",");
        lf__sb_puts(b, key);
        lf__sb_puts(b, "=\"");
        sb_label_value(b, val);
        lf__sb_puts(b, "\"");
    }
    lf__sb_puts(b, "} ");
    sb_value(b, v);
    lf__sb_puts(b, "\n");
}

static void render(lf__sb *b, const prom_state *st, const char *base) {
    for (int g = 0; g < G_COUNT; g++) {
        if (!st->gauge_set[g]) continue;
        put_family(b, k_gauges[g].name, "gauge", k_gauges[g].help);
        put_sample(b, k_gauges[g].name, base, NULL, NULL, st->gauge[g]);
    }
    if (st->mem_rss_set || st->mem_planned_set) {
        put_family(b, "llmforge_memory_bytes", "gauge",
                   "Memory of this rank: rss = resident set size, planned = bytes the memory plan reserves.");
        if (st->mem_rss_set) put_sample(b, "llmforge_memory_bytes", base, "kind", "rss", st->mem_rss);
        if (st->mem_planned_set) put_sample(b, "llmforge_memory_bytes", base, "kind", "planned", st->mem_planned);
    }
    if (st->n_phase > 0) {
        put_family(b, "llmforge_step_phase_seconds", "gauge", "Wall-clock time of each phase of the last step.");
        for (int i = 0; i < st->n_phase; i++)
            put_sample(b, "llmforge_step_phase_seconds", base, "phase", st->phase[i].name, st->phase[i].value);
    }
    if (st->n_eval > 0) {
        put_family(b, "llmforge_eval", "gauge", "Result of the last evaluation, by metric (eval/<metric>).");
        for (int i = 0; i < st->n_eval; i++)
            put_sample(b, "llmforge_eval", base, "metric", st->eval[i].name, st->eval[i].value);
    }
    put_family(b, "llmforge_steps_total", "counter", "Optimizer steps completed by this process.");
    put_sample(b, "llmforge_steps_total", base, NULL, NULL, st->steps_total);
    put_family(b, "llmforge_tokens_total", "counter", "Training tokens processed by this process.");
    put_sample(b, "llmforge_tokens_total", base, NULL, NULL, st->tokens_total);
    put_family(b, "llmforge_skipped_steps_total", "counter",
               "Steps whose update was skipped (non-finite gradients, loss-scale overflow, loss spike).");
    put_sample(b, "llmforge_skipped_steps_total", base, NULL, NULL, st->skipped_total);
    put_family(b, "llmforge_alerts_total", "counter", "Alerts raised, by kind.");
    for (int i = 0; i < st->n_alert; i++)
        put_sample(b, "llmforge_alerts_total", base, "kind", st->alert[i].name, st->alert[i].value);

    put_family(b, "llmforge_step_seconds", "histogram", "Wall-clock time of a training step.");
    uint64_t cum = 0;
    for (int i = 0; i < PROM_N_BUCKETS; i++) {
        cum += st->bucket[i];
        lf__sb_printf(b, "llmforge_step_seconds_bucket{%s,le=\"%s\"} %llu\n", base, k_le_str[i],
                      (unsigned long long)cum);
    }
    lf__sb_printf(b, "llmforge_step_seconds_bucket{%s,le=\"+Inf\"} %llu\n", base, (unsigned long long)st->hist_count);
    lf__sb_printf(b, "llmforge_step_seconds_sum{%s} ", base);
    sb_value(b, st->hist_sum);
    lf__sb_printf(b, "\nllmforge_step_seconds_count{%s} %llu\n", base, (unsigned long long)st->hist_count);
}

/* ---------------------------------------------------------------- updates (mutex held) */

/* The entry named `name` in tab[0..*n), added if there is room; NULL if full. */
static named_value *table_slot(named_value *tab, int *n, int cap, const char *name, size_t name_len) {
    for (int i = 0; i < *n; i++)
        if (strlen(tab[i].name) == name_len && memcmp(tab[i].name, name, name_len) == 0) return &tab[i];
    if (*n >= cap || name_len == 0 || name_len >= PROM_NAME_MAX) return NULL;
    named_value *e = &tab[(*n)++];
    memcpy(e->name, name, name_len);
    e->name[name_len] = '\0';
    e->value = 0;
    return e;
}

static void observe_step_seconds(prom_state *st, double sec) {
    if (!(sec >= 0) || isinf(sec)) return; /* NaN, negative, infinite: not a duration */
    int i = 0;
    while (i < PROM_N_BUCKETS && sec > k_le_val[i]) i++;
    if (i < PROM_N_BUCKETS) st->bucket[i]++;
    st->hist_count++;
    st->hist_sum += sec;
}

static void update_train(prom_state *st, const lf_obs_record *r) {
    st->gauge[G_STEP] = (double)r->step;
    st->gauge_set[G_STEP] = 1;
    st->gauge[G_LAST_STEP_TS] = r->wall_time;
    st->gauge_set[G_LAST_STEP_TS] = 1;
    st->steps_total += 1;
    for (int i = 0; i < r->n_scalars; i++) {
        const char *tag = r->scalars[i].tag;
        double v = r->scalars[i].value;
        if (!tag) continue;
        int matched = 0;
        for (int g = 0; g < G_COUNT && !matched; g++) {
            if (k_gauges[g].tag && strcmp(tag, k_gauges[g].tag) == 0) {
                st->gauge[g] = v;
                st->gauge_set[g] = 1;
                matched = 1;
            }
        }
        if (matched) continue;
        if (strcmp(tag, "train/tokens") == 0) {
            if (v >= 0 && !isinf(v)) st->tokens_total += v;
        } else if (strcmp(tag, "memory/rss_bytes") == 0) {
            st->mem_rss = v;
            st->mem_rss_set = 1;
        } else if (strcmp(tag, "memory/planned_bytes") == 0) {
            st->mem_planned = v;
            st->mem_planned_set = 1;
        } else if (strcmp(tag, "time/step_ms") == 0) {
            observe_step_seconds(st, v / 1000.0);
        } else if (strncmp(tag, "time/", 5) == 0) {
            const char *ph = tag + 5;
            size_t n = strlen(ph);
            if (n > 3 && strcmp(ph + n - 3, "_ms") == 0) {
                named_value *e = table_slot(st->phase, &st->n_phase, PROM_MAX_PHASE, ph, n - 3);
                if (e) e->value = v / 1000.0;
            }
        }
    }
}

static void update_eval(prom_state *st, const lf_obs_record *r) {
    for (int i = 0; i < r->n_scalars; i++) {
        const char *tag = r->scalars[i].tag;
        if (!tag || strncmp(tag, "eval/", 5) != 0) continue;
        const char *m = tag + 5;
        named_value *e = table_slot(st->eval, &st->n_eval, PROM_MAX_EVAL, m, strlen(m));
        if (e) e->value = r->scalars[i].value;
    }
}

static void update_event(prom_state *st, const lf_obs_record *r) {
    if (!r->event) return;
    if (strcmp(r->event, "skipped_step") == 0) {
        st->skipped_total += 1;
    } else if (strcmp(r->event, "alert") == 0) {
        const char *kind = r->alert_kind && r->alert_kind[0] ? r->alert_kind : "unknown";
        /* The last slot is kept for "other", so a flood of new kinds cannot
         * push out the count of alerts that happened. */
        named_value *e = table_slot(st->alert, &st->n_alert, PROM_MAX_ALERT - 1, kind, strlen(kind));
        if (!e) e = table_slot(st->alert, &st->n_alert, PROM_MAX_ALERT, "other", 5);
        if (e) e->value += 1;
    }
}

/* ---------------------------------------------------------------- sink callbacks */

static void prom_emit(lf_obs_sink *s, const lf_obs_record *r) {
    if (!s || !r) return;
    prom_sink *p = s->impl;
    pthread_mutex_lock(&p->mu);
    switch (r->kind) {
    case LF_OBS_TRAIN: update_train(&p->st, r); break;
    case LF_OBS_EVAL: update_eval(&p->st, r); break;
    case LF_OBS_EVENT: update_event(&p->st, r); break;
    }
    pthread_mutex_unlock(&p->mu);
    lf__dash_emit(p->dash, r);
}

static void prom_close(lf_obs_sink *s) {
    if (!s) return;
    prom_sink *p = s->impl;
    lf__http_stop(p->http); /* joins the HTTP threads */
    lf__dash_free(p->dash);
    pthread_mutex_destroy(&p->mu);
    free(p->base_labels);
    free(p);
}

/* ---------------------------------------------------------------- HTTP */

static void serve_metrics(prom_sink *p, lf__http_request *r) {
    prom_state *snap = malloc(sizeof *snap);
    if (!snap) {
        (void)lf__http_reply_text(r, 500, "out of memory\n");
        return;
    }
    pthread_mutex_lock(&p->mu);
    memcpy(snap, &p->st, sizeof *snap);
    pthread_mutex_unlock(&p->mu);
    lf__sb b = {.limit = PROM_BODY_CAP};
    render(&b, snap, p->base_labels);
    free(snap);
    if (b.failed || !b.p) {
        free(b.p);
        (void)lf__http_reply_text(r, 500, "could not render metrics\n");
        return;
    }
    if (lf__http_reply(r, 200, "text/plain; version=0.0.4; charset=utf-8", NULL, 0, b.p, b.len) != LF_OK)
        (void)lf__http_reply_text(r, 500, "out of memory\n");
    free(b.p);
}

/* Everything is answered from the headers alone (on_headers): no request
 * here needs a body, so none is ever read. */
static void on_request(lf__http_request *r, void *user) {
    prom_sink *p = user;
    if (p->dash && lf__dash_route(p->dash, r)) return; /* GET /, /api/run */
    const char *method = lf__http_method(r);
    const char *path = lf__http_path(r);
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
        static const lf__http_header allow = {"Allow", "GET, HEAD"};
        static const char msg[] = "method not allowed\n";
        (void)lf__http_reply(r, 405, "text/plain; charset=utf-8", &allow, 1, msg, sizeof msg - 1);
    } else if (strcmp(path, "/metrics") == 0) {
        serve_metrics(p, r);
    } else if (strcmp(path, "/health") == 0) {
        (void)lf__http_reply_text(r, 200, "ok");
    } else {
        (void)lf__http_reply_text(r, 404, "not found\n");
    }
}

/* ---------------------------------------------------------------- open */

lf_status lf_obs_prometheus_open(lf_obs_sink **out, const lf_prom_opts *opts) {
    if (!out) return lf_fail(LF_ERR_INVALID_ARG, "prometheus: out is NULL");
    *out = NULL;
    if (!opts) return lf_fail(LF_ERR_INVALID_ARG, "prometheus: opts is NULL");
    const char *host = opts->host ? opts->host : "127.0.0.1";
    const char *job = opts->job ? opts->job : "llmforge";
    if (opts->port < 0 || opts->port > 65535)
        return lf_fail(LF_ERR_RANGE, "prometheus: port %d is outside 1..65535", opts->port);
    if (opts->rank < 0) return lf_fail(LF_ERR_RANGE, "prometheus: rank %d is negative", opts->rank);
    if (strlen(job) > 255) return lf_fail(LF_ERR_CONFIG, "prometheus: job name is longer than 255 bytes");

    lf_status st;
    prom_sink *p = calloc(1, sizeof *p);
    if (!p) return lf_fail(LF_ERR_NOMEM, "prometheus: out of memory");
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        free(p);
        return lf_fail(LF_ERR_INTERNAL, "prometheus: pthread_mutex_init failed");
    }
    lf__sb lb = {.limit = PROM_BODY_CAP};
    lf__sb_printf(&lb, "rank=\"%d\",job=\"", opts->rank);
    sb_label_value(&lb, job);
    lf__sb_puts(&lb, "\"");
    if (lb.failed) {
        free(lb.p);
        st = lf_fail(LF_ERR_NOMEM, "prometheus: out of memory");
        goto fail;
    }
    p->base_labels = lb.p;
    for (size_t i = 0; i < sizeof k_alert_kinds / sizeof k_alert_kinds[0]; i++)
        (void)table_slot(p->st.alert, &p->st.n_alert, PROM_MAX_ALERT, k_alert_kinds[i], strlen(k_alert_kinds[i]));
    if (opts->dashboard) {
        st = lf__dash_create(&p->dash, opts->dashboard);
        if (st != LF_OK) goto fail;
    }

    lf__http_opts ho = {
        .what = "prometheus",
        .host = host,
        .allow_names = 0, /* a bind address is never looked up in DNS */
        .port = opts->port,
        .threads = 2,
        .max_connections = 32,
        .request_deadline_s = 10,
        .idle_timeout_s = 10,
        .max_body = 0,
        .on_headers = on_request,
        .on_request = on_request,
        .user = p,
    };
    st = lf__http_start(&p->http, &ho);
    if (st != LF_OK) goto fail;
    p->port = lf__http_port(p->http);

    p->base.name = "prometheus";
    p->base.emit = prom_emit;
    p->base.flush = NULL;
    p->base.close = prom_close;
    p->base.impl = p;
    p->base.error = NULL; /* never fails after it started */
    *out = &p->base;
    return LF_OK;

fail:
    lf__dash_free(p->dash);
    pthread_mutex_destroy(&p->mu);
    free(p->base_labels);
    free(p);
    return st;
}

int lf_obs_prometheus_port(const lf_obs_sink *s) {
    if (!s || s->close != prom_close || !s->impl) return -1;
    return ((const prom_sink *)s->impl)->port;
}

/* lf_obs_dashboard_port for a Prometheus sink (dashboard/dash.c). */
int lf__prom_dashboard_port(const lf_obs_sink *s);
int lf__prom_dashboard_port(const lf_obs_sink *s) {
    if (!s || s->close != prom_close || !s->impl || !((const prom_sink *)s->impl)->dash) return -1;
    return ((const prom_sink *)s->impl)->port;
}
