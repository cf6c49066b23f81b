/*
 * The run report: one self-contained HTML file (inline SVG and CSS, no
 * script, nothing fetched) summarising a run directory, or several runs
 * overlaid; each chart also as a standalone SVG file on request.
 * include/llmforge/obs.h is the contract (what the report holds, how damaged
 * input is treated).
 *
 * Why in C and ourselves: the report is written by the trainer at the end of
 * every run and by `llmforge report` anywhere, with no Python, browser or
 * plotting library at hand; what it needs of SVG (polylines, axes with
 * round ticks, a legend, markers) is small.
 *
 * Reading (read_run):
 *   - config.resolved.json gives the header (lf__run_header, shared with the
 *     live dashboard) and the configuration shown;
 *   - log.jsonl is read line by line; a line that is not a JSON object with
 *     a numeric "step" (a torn last line, a corrupt one) or longer than
 *     64 KiB is left out with a warning naming file and line. Train records
 *     become columns of numbers (a report of a million steps holds ~100 MB,
 *     not a million JSON trees); evaluations and events are kept as JSON
 *     (at most REPORT_MAX_EVENTS events, the rest counted).
 *   - A record whose step is below the last one kept is a resume: what the
 *     unfinished attempt logged after that step is dropped (as the live
 *     dashboard and TensorBoard do; resume is exact, the steps repeat), so
 *     every series is in step order.
 *   - ckpt/step_* /trainer_state.json (step, best, sizes), ckpt/latest, the
 *     dataset manifest data.dataset/dataset.json, and the registry's list
 *     when the caller gives one.
 *
 * Charts (chart_svg): x = step, y linear (or log10 for the loss scale),
 * round ticks (1, 2, 5 x 10^k), non-finite values break the line; a series
 * of more than 1500 points is reduced to the minimum and maximum of 750
 * step buckets, in step order, so a spike survives; the <svg> carries
 * data-chart, data-points (points drawn) and, for the loss chart,
 * data-markers and data-markers-<kind>. The same layout as the live page
 * (src/obs/dashboard/dashboard.html), so a chart looks alike in both.
 *
 * Invariants: nothing the run directory holds is trusted: every number is
 * checked for type, every string is escaped for HTML (text and
 * attributes), every count and size has a cap; a failure to read anything
 * but the log itself is a warning in the report, never a failed report.
 */
#include "llmforge/obs.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "dashboard/dash.h"

#define REPORT_MAX_LINE (64u << 10) /* longer log lines are left out */
#define REPORT_MAX_EVENTS 20000     /* event records kept (alerts, skips, checkpoints, ...) */
#define REPORT_MAX_WARN 200         /* warnings kept (the rest are counted) */
#define REPORT_LOG_WARN 20          /* warnings also logged */
#define REPORT_MAX_POINTS 1500      /* per series, after downsampling */
#define REPORT_MAX_SERIES 24        /* per chart (evaluation metrics, compared runs) */
#define REPORT_MAX_RUNS 16          /* --compare */
#define REPORT_MAX_FILE (64u << 20) /* config, state, manifest files read */

/* ---------------------------------------------------------------- warnings */

typedef struct warnings {
    char *msg[REPORT_MAX_WARN];
    int n, total;
} warnings;

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void
warn(warnings *w, const char *fmt, ...) {
    char buf[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (w->total < REPORT_LOG_WARN) lf_log(LF_LOG_WARN, "report: %s", buf);
    else if (w->total == REPORT_LOG_WARN) lf_log(LF_LOG_WARN, "report: more warnings; the report lists them");
    w->total++;
    if (w->n < REPORT_MAX_WARN) w->msg[w->n] = strdup(buf), w->n += w->msg[w->n] != NULL;
}

static void warnings_free(warnings *w) {
    for (int i = 0; i < w->n; i++) free(w->msg[i]);
    memset(w, 0, sizeof *w);
}

/* ---------------------------------------------------------------- small JSON helpers */

static double jnum(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static const char *jstr(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) && v->valuestring ? v->valuestring : NULL;
}

/* A JSON file, or NULL with *why set ("" when it does not exist). */
static cJSON *read_json(const char *path, char *why, size_t cap) {
    char *text = NULL;
    why[0] = '\0';
    struct stat sb;
    if (stat(path, &sb) != 0) return NULL;
    if (lf_file_read_all(path, REPORT_MAX_FILE, &text, NULL) != LF_OK) {
        snprintf(why, cap, "%s", lf_last_error());
        return NULL;
    }
    cJSON *o = cJSON_Parse(text);
    lf_free(text);
    if (!o) snprintf(why, cap, "'%s' is not JSON", path);
    return o;
}

/* ---------------------------------------------------------------- the run header (shared with the dashboard) */

cJSON *lf__run_header(const char *run_dir, char *wbuf, size_t wcap) {
    if (wbuf && wcap) wbuf[0] = '\0';
    cJSON *h = cJSON_CreateObject();
    if (!h) return NULL;
    cJSON_AddStringToObject(h, "out_dir", run_dir);
    char path[4200], why[512];
    snprintf(path, sizeof path, "%s/config.resolved.json", run_dir);
    cJSON *cfg = read_json(path, why, sizeof why);
    if (!cfg) {
        if (wbuf && wcap) snprintf(wbuf, wcap, "%s", why[0] ? why : "no config.resolved.json in the run directory");
        return h;
    }
    char hex[65];
    if (lf_sha256_file_hex(path, hex) == LF_OK) cJSON_AddStringToObject(h, "config_hash", hex);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(cfg, "model");
    cJSON *mo = cJSON_AddObjectToObject(h, "model");
    if (mo && cJSON_IsObject(m)) {
        const char *arch = jstr(m, "arch");
        cJSON_AddStringToObject(mo, "arch", arch ? arch : "?");
        static const char *const keys[] = {"n_layer", "n_head", "n_kv_head", "n_embd", "block_size", "vocab_size"};
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
            double v = jnum(m, keys[i]);
            if (isfinite(v)) cJSON_AddNumberToObject(mo, keys[i], v);
        }
    }
    double micro = jnum(cfg, "train_micro_batch_size_per_gpu"), acc = jnum(cfg, "gradient_accumulation_steps");
    double glob = jnum(cfg, "train_batch_size"), T = cJSON_IsObject(m) ? jnum(m, "block_size") : NAN;
    cJSON *b = cJSON_AddObjectToObject(h, "batch");
    if (b && isfinite(micro) && isfinite(acc) && micro > 0 && acc > 0 && isfinite(glob)) {
        cJSON_AddNumberToObject(b, "micro", micro);
        cJSON_AddNumberToObject(b, "accumulation", acc);
        cJSON_AddNumberToObject(b, "world_size", floor(glob / (micro * acc) + 0.5));
        cJSON_AddNumberToObject(b, "global", glob);
        if (isfinite(T)) cJSON_AddNumberToObject(b, "tokens_per_step", glob * T);
    }
    double iters = jnum(cfg, "train_iters");
    if (isfinite(iters)) cJSON_AddNumberToObject(h, "train_iters", iters);
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(cfg, "data");
    const char *ds = cJSON_IsObject(data) ? jstr(data, "dataset") : NULL;
    if (ds) cJSON_AddStringToObject(h, "dataset", ds);
    const cJSON *bf = cJSON_GetObjectItemCaseSensitive(cfg, "bf16"),
                *fp = cJSON_GetObjectItemCaseSensitive(cfg, "fp16");
    const char *prec = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(bf, "enabled"))   ? "bf16"
                       : cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(fp, "enabled")) ? "fp16"
                                                                                       : "fp32";
    cJSON_AddStringToObject(h, "precision", prec);
    cJSON_Delete(cfg);
    return h;
}

/* ---------------------------------------------------------------- reading a run */

enum {
    C_STEP,
    C_LOSS,
    C_LR,
    C_GNORM,
    C_TPS,
    C_MS,
    C_MFU,
    C_LSCALE,
    C_DATA,
    C_FWD,
    C_BWD,
    C_OPT,
    C_COMM,
    C_RSS,
    C_PLAN,
    NCOL
};
static const char *const k_col[NCOL] = {"step",
                                        "loss",
                                        "lr",
                                        "grad_norm",
                                        "tokens_per_sec",
                                        "ms",
                                        "train/mfu",
                                        "train/loss_scale",
                                        "time/data_ms",
                                        "time/forward_ms",
                                        "time/backward_ms",
                                        "time/optimizer_ms",
                                        "time/comm_ms",
                                        "memory/rss_bytes",
                                        "memory/planned_bytes"};

typedef struct run_data {
    char dir[4096];
    cJSON *header;
    cJSON *config; /* config.resolved.json, or NULL */
    double *col[NCOL];
    size_t n, cap; /* train records */
    cJSON *evals;  /* eval records, step order */
    cJSON *events; /* every other record, step order */
    long events_dropped;
    long records, lines;
    long last_step; /* of the last record kept */
    int resumes;
    warnings w;
} run_data;

static void run_free(run_data *r) {
    cJSON_Delete(r->header);
    cJSON_Delete(r->config);
    for (int c = 0; c < NCOL; c++) free(r->col[c]);
    cJSON_Delete(r->evals);
    cJSON_Delete(r->events);
    warnings_free(&r->w);
    memset(r, 0, sizeof *r);
}

/* Drop what was kept with a step greater than s (a resume from step s). */
static void supersede(run_data *r, long s) {
    while (r->n > 0 && r->col[C_STEP][r->n - 1] > (double)s) r->n--;
    cJSON *arrs[2] = {r->evals, r->events};
    for (int a = 0; a < 2; a++) {
        int k;
        while ((k = cJSON_GetArraySize(arrs[a])) > 0 && jnum(cJSON_GetArrayItem(arrs[a], k - 1), "step") > (double)s)
            cJSON_DeleteItemFromArray(arrs[a], k - 1);
    }
}

static int push_train(run_data *r, const cJSON *o) {
    if (r->n == r->cap) {
        size_t nc = r->cap ? r->cap * 2 : 1024;
        for (int c = 0; c < NCOL; c++) {
            double *p = realloc(r->col[c], nc * sizeof *p);
            if (!p) return -1;
            r->col[c] = p;
        }
        r->cap = nc;
    }
    for (int c = 0; c < NCOL; c++) r->col[c][r->n] = jnum(o, k_col[c]);
    r->n++;
    return 0;
}

/* One log line (NUL-terminated, newline removed). */
static lf_status take_line(run_data *r, char *line, size_t len, long no, const char *name) {
    if (len == 0 || strspn(line, " \t\r") == len) return LF_OK;
    cJSON *o = cJSON_ParseWithLength(line, len);
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(o, "step");
    const char *type = jstr(o, "type");
    if (!cJSON_IsObject(o)) {
        warn(&r->w, "%s:%ld: not a JSON object (truncated or corrupt); left out", name, no);
        cJSON_Delete(o);
        return LF_OK;
    }
    if (!cJSON_IsNumber(step) || !(step->valuedouble >= -1) || step->valuedouble > 9e15 || !type) {
        warn(&r->w, "%s:%ld: no numeric \"step\" or no \"type\"; left out", name, no);
        cJSON_Delete(o);
        return LF_OK;
    }
    long s = (long)step->valuedouble;
    if (r->records > 0 && s < r->last_step) supersede(r, s);
    r->last_step = s;
    r->records++;
    if (!strcmp(type, "train")) {
        int rc = push_train(r, o);
        cJSON_Delete(o);
        return rc ? lf_fail(LF_ERR_NOMEM, "report: out of memory reading '%s'", name) : LF_OK;
    }
    if (!strcmp(type, "resume")) r->resumes++;
    cJSON *arr = !strcmp(type, "eval") ? r->evals : r->events;
    if (arr == r->events && cJSON_GetArraySize(arr) >= REPORT_MAX_EVENTS) {
        r->events_dropped++;
        cJSON_Delete(o);
        return LF_OK;
    }
    cJSON_AddItemToArray(arr, o);
    return LF_OK;
}

static lf_status read_log(run_data *r) {
    char path[4200];
    snprintf(path, sizeof path, "%s/log.jsonl", r->dir);
    FILE *f = fopen(path, "rb");
    if (!f)
        return lf_fail(errno == ENOENT ? LF_ERR_NOT_FOUND : LF_ERR_IO, "report: cannot open '%s': %s", path,
                       strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    lf_status st = LF_OK;
    while ((len = getline(&line, &cap, f)) >= 0) {
        r->lines++;
        int torn = len == 0 || line[len - 1] != '\n';
        if (!torn) line[--len] = '\0';
        if ((size_t)len > REPORT_MAX_LINE) {
            warn(&r->w, "log.jsonl:%ld: longer than 64 KiB; left out", r->lines);
            continue;
        }
        if (torn && len > 0) {
            /* the last line has no newline: a write cut short (the process died) */
            cJSON *o = cJSON_ParseWithLength(line, (size_t)len);
            int whole = cJSON_IsObject(o);
            cJSON_Delete(o);
            if (!whole) {
                warn(&r->w, "log.jsonl:%ld: the last line is cut short (no newline, not a whole JSON object); left out",
                     r->lines);
                continue;
            }
        }
        st = take_line(r, line, (size_t)len, r->lines, "log.jsonl");
        if (st != LF_OK) break;
    }
    if (st == LF_OK && ferror(f)) st = lf_fail(LF_ERR_IO, "report: error reading '%s': %s", path, strerror(errno));
    free(line);
    fclose(f);
    return st;
}

static lf_status read_run(run_data *r, const char *dir) {
    memset(r, 0, sizeof *r);
    snprintf(r->dir, sizeof r->dir, "%s", dir);
    size_t dl = strlen(r->dir);
    while (dl > 1 && r->dir[dl - 1] == '/') r->dir[--dl] = '\0';
    struct stat sb;
    if (stat(r->dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return lf_fail(LF_ERR_NOT_FOUND, "report: run directory '%s' %s", r->dir,
                       stat(r->dir, &sb) != 0 ? "does not exist" : "is not a directory");
    char wbuf[600];
    r->header = lf__run_header(r->dir, wbuf, sizeof wbuf);
    r->evals = cJSON_CreateArray();
    r->events = cJSON_CreateArray();
    if (!r->header || !r->evals || !r->events) return lf_fail(LF_ERR_NOMEM, "report: out of memory");
    if (wbuf[0]) warn(&r->w, "%s", wbuf);
    char path[4200], why[512];
    snprintf(path, sizeof path, "%s/config.resolved.json", r->dir);
    r->config = read_json(path, why, sizeof why);
    return read_log(r);
}

/* The newest record of a type (NULL: none). */
static const cJSON *last_event(const run_data *r, const char *type) {
    const cJSON *found = NULL, *it;
    cJSON_ArrayForEach(it, r->events) {
        const char *t = jstr(it, "type");
        if (t && !strcmp(t, type)) found = it;
    }
    return found;
}

static const cJSON *first_event(const run_data *r, const char *type) {
    const cJSON *it;
    cJSON_ArrayForEach(it, r->events) {
        const char *t = jstr(it, "type");
        if (t && !strcmp(t, type)) return it;
    }
    return NULL;
}

static int count_events(const run_data *r, const char *type) {
    int n = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, r->events) {
        const char *t = jstr(it, "type");
        n += t && !strcmp(t, type);
    }
    return n;
}

/* ---------------------------------------------------------------- numbers as people read them */

static void fmt_num(char *buf, size_t cap, double v) {
    double a = fabs(v);
    if (!isfinite(v)) snprintf(buf, cap, "–");
    else if (a == 0) snprintf(buf, cap, "0");
    else if (a >= 1e12) snprintf(buf, cap, "%.1e", v);
    else if (a >= 1e9) snprintf(buf, cap, "%.3gG", v / 1e9);
    else if (a >= 1e6) snprintf(buf, cap, "%.3gM", v / 1e6);
    else if (a >= 1e4) snprintf(buf, cap, "%.3gk", v / 1e3);
    else if (a >= 1) snprintf(buf, cap, "%.4g", v);
    else if (a >= 1e-3) snprintf(buf, cap, "%.3g", v);
    else snprintf(buf, cap, "%.1e", v);
}

static void fmt_dur(char *buf, size_t cap, double s) {
    if (!isfinite(s) || s < 0) {
        snprintf(buf, cap, "–");
        return;
    }
    long v = (long)(s + 0.5);
    if (v >= 3600) snprintf(buf, cap, "%ldh%02ldm", v / 3600, (v % 3600) / 60);
    else if (v >= 60) snprintf(buf, cap, "%ldm%02lds", v / 60, v % 60);
    else if (s < 10) snprintf(buf, cap, "%.1fs", s);
    else snprintf(buf, cap, "%lds", v);
}

static void fmt_bytes(char *buf, size_t cap, double b) {
    if (!isfinite(b) || b < 0) snprintf(buf, cap, "–");
    else if (b >= 1073741824.0) snprintf(buf, cap, "%.2f GiB", b / 1073741824.0);
    else if (b >= 1048576.0) snprintf(buf, cap, "%.1f MiB", b / 1048576.0);
    else if (b >= 1024.0) snprintf(buf, cap, "%.1f KiB", b / 1024.0);
    else snprintf(buf, cap, "%.0f B", b);
}

static void put_num(lf__sb *b, double v) {
    char buf[64];
    fmt_num(buf, sizeof buf, v);
    lf__sb_puts(b, buf);
}

/* ---------------------------------------------------------------- charts */

typedef struct series {
    char name[128];
    double *x, *y;
    size_t n;
    int dash;
} series;

enum { MK_ALERT, MK_SKIP, MK_RESUME, MK_CHECKPOINT, MK_KINDS };
static const char *const k_mk_name[MK_KINDS] = {"alert", "skip", "resume", "checkpoint"};

typedef struct marker {
    double x;
    int kind;
    char label[240];
} marker;

typedef struct chart {
    const char *id, *title;
    int ylog;
    series s[REPORT_MAX_SERIES];
    int ns;
    marker *m; /* NULL: this chart has no markers */
    int nm;
    int points; /* drawn (set by chart_svg) */
} chart;

static const char *const k_colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                       "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
#define N_COLORS ((int)(sizeof k_colors / sizeof k_colors[0]))

static void chart_free(chart *c) {
    for (int i = 0; i < c->ns; i++) {
        free(c->s[i].x);
        free(c->s[i].y);
    }
    free(c->m);
    memset(c, 0, sizeof *c);
}

/* A series of n points (copied), y scaled; NULL arrays when n = 0. */
static series *add_series(chart *c, const char *name, const double *x, const double *y, size_t n, double scale,
                          int dash) {
    if (c->ns >= REPORT_MAX_SERIES) return NULL;
    series *s = &c->s[c->ns];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->dash = dash;
    if (n) {
        s->x = malloc(n * sizeof *s->x);
        s->y = malloc(n * sizeof *s->y);
        if (!s->x || !s->y) {
            free(s->x);
            free(s->y);
            return NULL;
        }
        for (size_t i = 0; i < n; i++) {
            s->x[i] = x[i];
            s->y[i] = y[i] * scale;
        }
    }
    s->n = n;
    c->ns++;
    return s;
}

/* Reduce to at most REPORT_MAX_POINTS: min and max of 750 step buckets (in
 * x order), non-finite points kept as breaks. In place. */
static void downsample(series *s) {
    if (s->n <= REPORT_MAX_POINTS) return;
    const int nb = REPORT_MAX_POINTS / 2;
    double x0 = s->x[0], x1 = s->x[s->n - 1], w = x1 - x0 > 0 ? x1 - x0 : 1;
    size_t out = 0, lo = SIZE_MAX, hi = SIZE_MAX;
    int bucket = -1;
    double *nx = s->x, *ny = s->y; /* writing never overtakes reading: out <= i */
#define FLUSH() \
    do { \
        if (lo != SIZE_MAX) { \
            size_t a = lo < hi ? lo : hi, z = lo < hi ? hi : lo; \
            double ax = s->x[a], ay = s->y[a], zx = s->x[z], zy = s->y[z]; \
            nx[out] = ax, ny[out] = ay, out++; \
            if (z != a) nx[out] = zx, ny[out] = zy, out++; \
        } \
        lo = hi = SIZE_MAX; \
    } while (0)
    for (size_t i = 0; i < s->n; i++) {
        int k = (int)((s->x[i] - x0) / w * nb);
        if (k >= nb) k = nb - 1;
        if (k < 0) k = 0;
        if (k != bucket) {
            FLUSH();
            bucket = k;
        }
        if (!isfinite(s->y[i])) {
            FLUSH();
            nx[out] = s->x[i], ny[out] = s->y[i], out++;
            continue;
        }
        if (lo == SIZE_MAX || s->y[i] < s->y[lo]) lo = i;
        if (hi == SIZE_MAX || s->y[i] > s->y[hi]) hi = i;
    }
    FLUSH();
#undef FLUSH
    s->n = out;
}

static void nice_ticks(double lo, double hi, int n, double *t, int *nt) {
    *nt = 0;
    if (!(hi > lo)) {
        double c = isfinite(lo) ? lo : 0;
        lo = c - 1;
        hi = c + 1;
    }
    double raw = (hi - lo) / n, p = pow(10, floor(log10(raw))), m = raw / p;
    double step = (m >= 5 ? 10 : m >= 2 ? 5 : m >= 1 ? 2 : 1) * p;
    if (m < 1.5) step = p;
    for (double v = ceil(lo / step) * step; v <= hi + step * 1e-9 && *nt < 32; v += step)
        t[(*nt)++] = fabs(v) < step * 1e-9 ? 0 : v;
}

#define CW 560
#define CH 250
#define CML 58
#define CMR 14
#define CMT 10
#define CMB 30
#define CLEG 34 /* two rows of legend below the plot */

static void chart_svg(lf__sb *b, chart *c, int standalone) {
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    int any = 0;
    for (int i = 0; i < c->ns; i++) {
        downsample(&c->s[i]);
        for (size_t k = 0; k < c->s[i].n; k++) {
            double x = c->s[i].x[k], y = c->s[i].y[k];
            if (!isfinite(x) || !isfinite(y) || (c->ylog && y <= 0)) continue;
            any = 1;
            if (x < x0) x0 = x;
            if (x > x1) x1 = x;
            if (y < y0) y0 = y;
            if (y > y1) y1 = y;
        }
    }
    for (int i = 0; i < c->nm; i++) {
        if (c->m[i].x < x0) x0 = c->m[i].x;
        if (c->m[i].x > x1) x1 = c->m[i].x;
    }
    const int height = CH + CLEG + (standalone ? 24 : 0);
    lf__sb_printf(b,
                  "<svg %sclass=\"chart\" viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" role=\"img\" data-chart=\"",
                  standalone ? "xmlns=\"http://www.w3.org/2000/svg\" " : "", CW, height, CW, height);
    lf__sb_html(b, c->id);
    lf__sb_puts(b, "\" font-family=\"system-ui, sans-serif\" font-size=\"11\"");
    c->points = 0;
    int counts[MK_KINDS] = {0};
    lf__sb b2 = {0}; /* the body, so data-points can go in the opening tag */
    if (standalone) {
        lf__sb_puts(&b2, "<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/><text x=\"8\" y=\"18\" font-size=\"14\" "
                         "font-weight=\"600\" fill=\"#1d2430\">");
        lf__sb_html(&b2, c->title);
        lf__sb_puts(&b2, "</text><g transform=\"translate(0,24)\">");
    }
    if (!any) {
        lf__sb_printf(&b2,
                      "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" fill=\"#98a2b3\" font-size=\"13\">no data</text>",
                      CW / 2, CH / 2);
    } else {
        if (x1 == x0) x0 -= 1, x1 += 1;
        double ly0 = c->ylog ? log10(y0) : y0, ly1 = c->ylog ? log10(y1) : y1;
        if (ly1 == ly0) {
            ly0 -= c->ylog ? 0.5 : fabs(ly0) * 0.05 + 1e-9;
            ly1 += c->ylog ? 0.5 : fabs(ly1) * 0.05 + 1e-9;
        }
        double pad = (ly1 - ly0) * 0.05;
        ly0 -= pad;
        ly1 += pad;
        if (!c->ylog && y0 >= 0 && ly0 < 0) ly0 = 0;
#define SX(v) (CML + ((v)-x0) / (x1 - x0) * (CW - CML - CMR))
#define SY(v) (CMT + (1 - ((c->ylog ? log10(v) : (v)) - ly0) / (ly1 - ly0)) * (CH - CMT - CMB))
        double t[32];
        int nt;
        if (c->ylog && floor(ly1) - ceil(ly0) >= 1) { /* powers of ten */
            nice_ticks(ceil(ly0), floor(ly1), 4, t, &nt);
            for (int i = 0; i < nt; i++) t[i] = pow(10, round(t[i]));
        } else if (c->ylog) { /* less than a decade: round values inside it */
            nice_ticks(pow(10, ly0), pow(10, ly1), 4, t, &nt);
        } else {
            nice_ticks(ly0, ly1, 4, t, &nt);
        }
        lf__sb_puts(&b2, "<g stroke=\"#eef0f3\">");
        for (int i = 0; i < nt; i++) {
            double y = SY(t[i]);
            if (y < CMT - 0.5 || y > CH - CMB + 0.5) continue;
            lf__sb_printf(&b2, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\"/>", CML, CW - CMR, y, y);
        }
        double tx[32];
        int ntx;
        nice_ticks(x0, x1, 6, tx, &ntx);
        for (int i = 0; i < ntx; i++) {
            double x = SX(tx[i]);
            if (x < CML - 0.5 || x > CW - CMR + 0.5) continue;
            lf__sb_printf(&b2, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\"/>", x, x, CMT, CH - CMB);
        }
        lf__sb_puts(&b2, "</g><g fill=\"#667085\">");
        char num[64];
        for (int i = 0; i < nt; i++) {
            double y = SY(t[i]);
            if (y < CMT - 0.5 || y > CH - CMB + 0.5) continue;
            fmt_num(num, sizeof num, t[i]);
            lf__sb_printf(&b2, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>", CML - 6, y + 4, num);
        }
        for (int i = 0; i < ntx; i++) {
            double x = SX(tx[i]);
            if (x < CML - 0.5 || x > CW - CMR + 0.5) continue;
            fmt_num(num, sizeof num, tx[i]);
            lf__sb_printf(&b2, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>", x, CH - CMB + 15, num);
        }
        lf__sb_printf(&b2, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">step</text></g>", CW - CMR, CH - 2);
        lf__sb_printf(&b2,
                      "<g stroke=\"#98a2b3\"><line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\"/><line x1=\"%d\" "
                      "x2=\"%d\" y1=\"%d\" y2=\"%d\"/></g>",
                      CML, CW - CMR, CH - CMB, CH - CMB, CML, CML, CMT, CH - CMB);
        for (int i = 0; i < c->nm; i++) {
            const marker *m = &c->m[i];
            double x = SX(m->x);
            switch (m->kind) {
            case MK_RESUME:
                lf__sb_printf(
                    &b2,
                    "<line class=\"mk-resume\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#1f6feb\" "
                    "stroke-dasharray=\"4 3\">",
                    x, x, CMT, CH - CMB);
                break;
            case MK_CHECKPOINT:
                lf__sb_printf(&b2, "<path class=\"mk-checkpoint\" d=\"M%.1f %dl-4 7h8z\" fill=\"#667085\">", x,
                              CH - CMB);
                break;
            case MK_SKIP:
                lf__sb_printf(&b2,
                              "<line class=\"mk-skip\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#7a5af8\" "
                              "stroke-opacity=\"0.6\">",
                              x, x, CMT, CH - CMB);
                break;
            default:
                lf__sb_printf(&b2, "<path class=\"mk-alert\" d=\"M%.1f %dl-5 -9h10z\" fill=\"#d92d20\">", x, CMT + 9);
                break;
            }
            lf__sb_puts(&b2, "<title>");
            lf__sb_html(&b2, m->label);
            lf__sb_puts(&b2, m->kind == MK_RESUME || m->kind == MK_SKIP ? "</title></line>" : "</title></path>");
            counts[m->kind]++;
        }
        for (int i = 0; i < c->ns; i++) {
            const series *s = &c->s[i];
            int n = 0, pen = 0;
            lf__sb path = {0};
            for (size_t k = 0; k < s->n; k++) {
                double x = s->x[k], y = s->y[k];
                if (!isfinite(x) || !isfinite(y) || (c->ylog && y <= 0)) {
                    pen = 0;
                    continue;
                }
                lf__sb_printf(&path, "%c%.1f %.1f", pen ? 'L' : 'M', SX(x), SY(y));
                pen = 1;
                n++;
            }
            if (n == 1) lf__sb_puts(&path, "h0.01");
            if (n > 0 && !path.failed) {
                lf__sb_printf(&b2,
                              "<path data-series=\"%d\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.6\" "
                              "stroke-linejoin=\"round\" stroke-linecap=\"round\"%s d=\"",
                              i, k_colors[i % N_COLORS], s->dash ? " stroke-dasharray=\"5 3\"" : "");
                lf__sb_put(&b2, path.p, path.len);
                lf__sb_puts(&b2, "\"><title>");
                lf__sb_html(&b2, s->name);
                lf__sb_puts(&b2, "</title></path>");
                c->points += n;
            }
            lf__sb_free(&path);
        }
#undef SX
#undef SY
        /* the legend below the plot, inside the SVG so a standalone file carries it (two rows at most) */
        static const char *const mk_color[MK_KINDS] = {"#d92d20", "#7a5af8", "#1f6feb", "#667085"};
        static const char *const mk_text[MK_KINDS] = {"alerts", "skipped", "resumed", "checkpoints"};
        int lx = 8, ly = CH + 8;
        for (int i = 0; i < c->ns + MK_KINDS; i++) {
            char lt[160];
            const char *color;
            if (i < c->ns) {
                int has = 0;
                for (size_t k = 0; k < c->s[i].n && !has; k++) has = isfinite(c->s[i].y[k]);
                if (!has) continue;
                snprintf(lt, sizeof lt, "%s", c->s[i].name);
                color = k_colors[i % N_COLORS];
            } else {
                int k = i - c->ns;
                if (!counts[k]) continue;
                snprintf(lt, sizeof lt, "%s %d", mk_text[k], counts[k]);
                color = mk_color[k];
            }
            int w = 24 + 6 * (int)strlen(lt);
            if (lx + w > CW - 4 && lx > 8) {
                if (ly > CH + 8) break; /* no third row */
                lx = 8;
                ly += 15;
            }
            lf__sb_printf(&b2,
                          "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"3\" fill=\"%s\"/><text x=\"%d\" y=\"%d\" "
                          "fill=\"#475467\">",
                          lx, ly + 4, color, lx + 16, ly + 8);
            lf__sb_html(&b2, lt);
            lf__sb_puts(&b2, "</text>");
            lx += w;
        }
    }
    if (standalone) lf__sb_puts(&b2, "</g>");
    lf__sb_printf(b, " data-points=\"%d\"", c->points);
    if (c->m) {
        lf__sb_printf(b, " data-markers=\"%d\"", c->nm);
        for (int k = 0; k < MK_KINDS; k++) lf__sb_printf(b, " data-markers-%s=\"%d\"", k_mk_name[k], counts[k]);
    }
    lf__sb_puts(b, ">");
    if (b2.failed) b->failed = 1;
    else if (b2.p) lf__sb_put(b, b2.p, b2.len);
    lf__sb_free(&b2);
    lf__sb_puts(b, "</svg>");
}

/* ---------------------------------------------------------------- the charts of one run */

#define N_RUN_CHARTS 9

static void add_col(chart *c, const run_data *r, const char *name, int col, double scale, int dash) {
    (void)add_series(c, name, r->col[C_STEP], r->col[col], r->n, scale, dash);
}

static int push_marker(chart *c, int *cap, double x, int kind, const char *label) {
    if (c->nm == *cap) {
        int nc = *cap ? *cap * 2 : 64;
        marker *nm = realloc(c->m, (size_t)nc * sizeof *nm);
        if (!nm) return -1;
        c->m = nm;
        *cap = nc;
    }
    marker *m = &c->m[c->nm++];
    m->x = x;
    m->kind = kind;
    snprintf(m->label, sizeof m->label, "%s", label);
    return 0;
}

static void build_run_charts(const run_data *r, chart *ch) {
    memset(ch, 0, sizeof(chart) * N_RUN_CHARTS);
    /* loss, with the markers */
    chart *c = &ch[0];
    c->id = "loss";
    c->title = "Loss";
    add_col(c, r, "train", C_LOSS, 1, 0);
    int ne = cJSON_GetArraySize(r->evals);
    double *ex = malloc(sizeof(double) * (size_t)(ne + 1)), *ey = malloc(sizeof(double) * (size_t)(ne + 1));
    if (ex && ey) {
        static const char *const ek[2] = {"val_loss", "train_loss"};
        static const char *const en[2] = {"val", "train (eval)"};
        for (int k = 0; k < 2; k++) {
            int i = 0;
            const cJSON *it;
            cJSON_ArrayForEach(it, r->evals) {
                ex[i] = jnum(it, "step");
                ey[i++] = jnum(it, ek[k]);
            }
            (void)add_series(c, en[k], ex, ey, (size_t)ne, 1, k == 1);
        }
    }
    int mcap = 0;
    c->m = calloc(1, sizeof(marker)); /* non-NULL: this chart reports its markers (even none) */
    mcap = c->m ? 1 : 0;
    const cJSON *it;
    char label[300];
    cJSON_ArrayForEach(it, r->events) {
        const char *t = jstr(it, "type");
        double s = jnum(it, "step");
        if (!t || !isfinite(s)) continue;
        if (!strcmp(t, "alert")) {
            snprintf(label, sizeof label, "step %.0f: alert %s (%s): %s", s + 1,
                     jstr(it, "kind") ? jstr(it, "kind") : "?", jstr(it, "action") ? jstr(it, "action") : "?",
                     jstr(it, "message") ? jstr(it, "message") : "");
            (void)push_marker(c, &mcap, s + 1, MK_ALERT, label);
        } else if (!strcmp(t, "skipped_step")) {
            snprintf(label, sizeof label, "step %.0f skipped: %s", s + 1,
                     jstr(it, "reason") ? jstr(it, "reason") : "?");
            (void)push_marker(c, &mcap, s + 1, MK_SKIP, label);
        } else if (!strcmp(t, "resume")) {
            snprintf(label, sizeof label, "resumed at step %.0f from %s", s, jstr(it, "path") ? jstr(it, "path") : "?");
            (void)push_marker(c, &mcap, s, MK_RESUME, label);
        } else if (!strcmp(t, "checkpoint")) {
            snprintf(label, sizeof label, "checkpoint at step %.0f: %s", s, jstr(it, "path") ? jstr(it, "path") : "?");
            (void)push_marker(c, &mcap, s, MK_CHECKPOINT, label);
        }
    }
    /* evaluation tasks: every eval/<task>/<metric> */
    c = &ch[1];
    c->id = "eval";
    c->title = "Evaluation tasks";
    if (ex && ey) {
        cJSON_ArrayForEach(it, r->evals) {
            const cJSON *kv;
            cJSON_ArrayForEach(kv, it) {
                if (!kv->string || strncmp(kv->string, "eval/", 5) != 0) continue;
                int seen = 0;
                for (int i = 0; i < c->ns && !seen; i++) seen = !strcmp(c->s[i].name, kv->string + 5);
                if (seen || c->ns >= REPORT_MAX_SERIES) continue;
                int i = 0;
                const cJSON *e2;
                cJSON_ArrayForEach(e2, r->evals) {
                    ex[i] = jnum(e2, "step");
                    ey[i++] = jnum(e2, kv->string);
                }
                (void)add_series(c, kv->string + 5, ex, ey, (size_t)ne, 1, 0);
            }
        }
    }
    free(ex);
    free(ey);
    c = &ch[2], c->id = "lr", c->title = "Learning rate";
    add_col(c, r, "lr", C_LR, 1, 0);
    c = &ch[3], c->id = "grad_norm", c->title = "Gradient norm (before clipping)";
    add_col(c, r, "grad norm", C_GNORM, 1, 0);
    c = &ch[4], c->id = "loss_scale", c->title = "Loss scale (fp16)", c->ylog = 1;
    add_col(c, r, "loss scale", C_LSCALE, 1, 0);
    c = &ch[5], c->id = "throughput", c->title = "Tokens / s";
    add_col(c, r, "tokens/s", C_TPS, 1, 0);
    c = &ch[6], c->id = "mfu", c->title = "MFU (%)";
    add_col(c, r, "MFU", C_MFU, 100, 0);
    c = &ch[7], c->id = "step_time", c->title = "Step time breakdown (ms)";
    add_col(c, r, "step", C_MS, 1, 0);
    add_col(c, r, "data", C_DATA, 1, 0);
    add_col(c, r, "forward", C_FWD, 1, 0);
    add_col(c, r, "backward", C_BWD, 1, 0);
    add_col(c, r, "optimizer", C_OPT, 1, 0);
    add_col(c, r, "comm", C_COMM, 1, 0);
    c = &ch[8], c->id = "memory", c->title = "Memory (MiB): planned vs RSS";
    add_col(c, r, "RSS", C_RSS, 1.0 / 1048576, 0);
    add_col(c, r, "planned", C_PLAN, 1.0 / 1048576, 1);
}

/* ---------------------------------------------------------------- HTML pieces */

static const char k_css[] =
    "<style>"
    ":root{--fg:#1d2430;--muted:#667085;--line:#e4e7ec;--bg:#f6f7f9;--card:#fff}"
    "*{box-sizing:border-box}"
    "body{margin:0;font:14px/1.4 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:var(--fg);background:var(--bg)}"
    "header{background:var(--card);border-bottom:1px solid var(--line);padding:14px 20px}"
    "h1{font-size:18px;margin:0 0 6px 0;font-weight:600}"
    ".badge{font-size:12px;padding:2px 8px;border-radius:10px;margin-left:8px;vertical-align:middle;background:#e8f1ff;color:#1f6feb}"
    ".badge.ok{background:#e6f6ec;color:#1a7f37}.badge.error,.badge.unfinished{background:#fdecec;color:#b42318}"
    ".meta{display:flex;flex-wrap:wrap;gap:4px 22px;color:var(--muted);font-size:13px}.meta b{color:var(--fg);font-weight:600}"
    "main{padding:16px 20px}"
    ".grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(440px,1fr));gap:14px}"
    "figure{margin:0;background:var(--card);border:1px solid var(--line);border-radius:8px;padding:10px 12px 6px}"
    "figcaption{font-weight:600;font-size:13px}svg.chart{width:100%;height:auto;display:block}"
    "section{margin-top:16px;background:var(--card);border:1px solid var(--line);border-radius:8px;padding:10px 12px;overflow-x:auto}"
    "section h2{font-size:14px;margin:0 0 8px 0}"
    "table{border-collapse:collapse;font-size:12px}"
    "th,td{text-align:left;padding:3px 8px;border-bottom:1px solid var(--line);vertical-align:top}"
    "th{color:var(--muted);font-weight:600}td.num{font-variant-numeric:tabular-nums;text-align:right}"
    "tr.best td{background:#fffbe6;font-weight:600}"
    "pre{font-size:12px;background:#f9fafb;border:1px solid var(--line);padding:8px;overflow-x:auto}"
    ".warn{color:#b42318}.muted{color:var(--muted)}"
    "footer{color:var(--muted);font-size:12px;padding:8px 20px 20px}"
    "</style>";

static void html_begin(lf__sb *b, const char *title) {
    lf__sb_puts(b, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                   "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
                   /* nothing may be fetched: the file stands alone */
                   "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src "
                   "'unsafe-inline'; img-src data:\"><title>");
    lf__sb_html(b, title);
    lf__sb_puts(b, "</title><link rel=\"icon\" href=\"data:,\">"); /* no favicon request either */
    lf__sb_puts(b, k_css);
    lf__sb_puts(b, "</head>\n<body>\n");
}

static void meta_item(lf__sb *b, const char *k, const char *v) {
    lf__sb_puts(b, "<span>");
    lf__sb_html(b, k);
    lf__sb_puts(b, " <b>");
    lf__sb_html(b, v);
    lf__sb_puts(b, "</b></span>");
}

static void html_footer(lf__sb *b, const char *what) {
    char when[64];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
    lf__sb_puts(b, "<footer>written by llmforge (");
    lf__sb_html(b, what);
    lf__sb_printf(b,
                  ") at %s; one self-contained file: inline SVG and CSS, no script, nothing fetched.</footer>\n"
                  "</body></html>\n",
                  when);
}

static void section_warnings(lf__sb *b, const warnings *w) {
    if (!w->total) return;
    lf__sb_printf(b, "<section id=\"warnings\"><h2 class=\"warn\">Warnings (%d)</h2><ul class=\"warn\">", w->total);
    for (int i = 0; i < w->n; i++) {
        lf__sb_puts(b, "<li>");
        lf__sb_html(b, w->msg[i]);
        lf__sb_puts(b, "</li>");
    }
    if (w->total > w->n) lf__sb_printf(b, "<li>… and %d more</li>", w->total - w->n);
    lf__sb_puts(b, "</ul></section>\n");
}

/* A value of any JSON type, for a table cell. */
static void put_json_value(lf__sb *b, const cJSON *v) {
    if (cJSON_IsNumber(v)) put_num(b, v->valuedouble);
    else if (cJSON_IsString(v)) lf__sb_html(b, v->valuestring);
    else if (cJSON_IsBool(v)) lf__sb_puts(b, cJSON_IsTrue(v) ? "true" : "false");
    else if (cJSON_IsNull(v) || !v) lf__sb_puts(b, "–");
    else {
        char *t = cJSON_PrintUnformatted(v);
        if (t) lf__sb_html(b, t);
        cJSON_free(t);
    }
}

/* ---------------------------------------------------------------- sections of one run */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median_col(const run_data *r, int col) {
    size_t n = 0;
    double *v = malloc(sizeof(double) * (r->n + 1));
    if (!v) return NAN;
    for (size_t i = 0; i < r->n; i++)
        if (isfinite(r->col[col][i])) v[n++] = r->col[col][i];
    double m = NAN;
    if (n) {
        qsort(v, n, sizeof *v, cmp_double);
        m = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    }
    free(v);
    return m;
}

static void header_section(lf__sb *b, const run_data *r, const char *title) {
    const cJSON *h = r->header, *m = cJSON_GetObjectItemCaseSensitive(h, "model");
    const cJSON *bt = cJSON_GetObjectItemCaseSensitive(h, "batch");
    const cJSON *end = last_event(r, "end"), *start = first_event(r, "start");
    const char *status = end ? jstr(end, "status") : NULL;
    lf__sb_puts(b, "<header><h1>");
    lf__sb_html(b, title);
    lf__sb_puts(b, "<span class=\"badge ");
    lf__sb_html(b, status ? status : "unfinished"); /* the log's text: escaped even in a class name */
    lf__sb_puts(b, "\" id=\"status\">");
    lf__sb_html(b, status ? status : "no end record (still running, or stopped)");
    lf__sb_puts(b, "</span></h1><div class=\"meta\">");
    char buf[512], a[64], c2[64];
    double last = r->n ? r->col[C_STEP][r->n - 1] : NAN, iters = jnum(h, "train_iters");
    fmt_num(a, sizeof a, last);
    fmt_num(c2, sizeof c2, iters);
    snprintf(buf, sizeof buf, "%s / %s", a, c2);
    meta_item(b, "steps", buf);
    /* wall time: the first record with a time to the last */
    double t0 = NAN, t1 = NAN;
    const cJSON *it;
    cJSON_ArrayForEach(it, r->events) {
        double t = jnum(it, "time");
        if (isfinite(t)) {
            if (!isfinite(t0)) t0 = t;
            t1 = t;
        }
    }
    fmt_dur(buf, sizeof buf, t1 - t0);
    meta_item(b, "wall time", buf);
    if (cJSON_IsObject(m)) {
        const char *arch = jstr(m, "arch");
        double np = start ? jnum(start, "num_params") : NAN;
        char p[64];
        fmt_num(p, sizeof p, np);
        snprintf(buf, sizeof buf, "%s %.0fL %.0fH %.0fC, block %.0f, vocab %.0f%s%s%s", arch ? arch : "?",
                 jnum(m, "n_layer"), jnum(m, "n_head"), jnum(m, "n_embd"), jnum(m, "block_size"), jnum(m, "vocab_size"),
                 isfinite(np) ? ", " : "", isfinite(np) ? p : "", isfinite(np) ? " params" : "");
        meta_item(b, "model", buf);
    }
    if (cJSON_IsObject(bt)) {
        char tps[64];
        fmt_num(tps, sizeof tps, jnum(bt, "tokens_per_step"));
        snprintf(buf, sizeof buf, "%.0f × accum %.0f × %.0f rank(s) = %.0f (%s tokens/step)", jnum(bt, "micro"),
                 jnum(bt, "accumulation"), jnum(bt, "world_size"), jnum(bt, "global"), tps);
        meta_item(b, "batch", buf);
        snprintf(buf, sizeof buf, "%.0f", jnum(bt, "world_size"));
        meta_item(b, "world size", buf);
    }
    const char *prec = jstr(h, "precision");
    if (prec) meta_item(b, "precision", prec);
    const char *hash = jstr(h, "config_hash");
    if (hash) {
        snprintf(buf, sizeof buf, "%.12s", hash);
        meta_item(b, "config", buf);
    }
    double best = INFINITY, best_step = NAN;
    cJSON_ArrayForEach(it, r->evals) {
        double v = jnum(it, "val_loss");
        if (isfinite(v) && v < best) best = v, best_step = jnum(it, "step");
    }
    if (isfinite(best)) {
        fmt_num(a, sizeof a, best);
        snprintf(buf, sizeof buf, "%s (step %.0f)", a, best_step);
        meta_item(b, "best val loss", buf);
    }
    if (r->n) {
        fmt_num(a, sizeof a, r->col[C_LOSS][r->n - 1]);
        meta_item(b, "final train loss", a);
        fmt_num(a, sizeof a, median_col(r, C_TPS));
        meta_item(b, "median tokens/s", a);
        double mfu = median_col(r, C_MFU);
        if (isfinite(mfu)) {
            snprintf(buf, sizeof buf, "%.2f%%", mfu * 100);
            meta_item(b, "median MFU", buf);
        }
    }
    snprintf(buf, sizeof buf, "%d alerts, %d skipped steps, %d resumes", count_events(r, "alert"),
             count_events(r, "skipped_step"), r->resumes);
    meta_item(b, "events", buf);
    lf__sb_puts(b, "</div></header>\n");
}

static void charts_section(lf__sb *b, chart *ch, int n, int *with_data) {
    lf__sb_puts(b, "<main><div class=\"grid\" id=\"charts\">\n");
    for (int i = 0; i < n; i++) {
        lf__sb_puts(b, "<figure id=\"chart-");
        lf__sb_html(b, ch[i].id);
        lf__sb_puts(b, "\"><figcaption>");
        lf__sb_html(b, ch[i].title);
        lf__sb_puts(b, "</figcaption>");
        chart_svg(b, &ch[i], 0);
        lf__sb_puts(b, "</figure>\n");
        *with_data += ch[i].points > 0;
    }
    lf__sb_puts(b, "</div>\n");
}

/* Every eval/ key of the evaluations, in first-seen order. */
static int eval_keys(const run_data *r, const char **keys, int cap) {
    int n = 0;
    const cJSON *it, *kv;
    cJSON_ArrayForEach(it, r->evals) {
        cJSON_ArrayForEach(kv, it) {
            if (!kv->string || strncmp(kv->string, "eval/", 5) != 0) continue;
            int seen = 0;
            for (int i = 0; i < n && !seen; i++) seen = !strcmp(keys[i], kv->string);
            if (!seen && n < cap) keys[n++] = kv->string;
        }
    }
    return n;
}

static void eval_section(lf__sb *b, const run_data *r) {
    int ne = cJSON_GetArraySize(r->evals);
    lf__sb_printf(b, "<section id=\"evaluations\"><h2>Evaluations (%d)</h2>", ne);
    if (!ne) {
        lf__sb_puts(b, "<p class=\"muted\">none</p></section>\n");
        return;
    }
    const char *keys[64];
    int nk = eval_keys(r, keys, 64);
    double best = INFINITY;
    const cJSON *it;
    cJSON_ArrayForEach(it, r->evals) {
        double v = jnum(it, "val_loss");
        if (isfinite(v) && v < best) best = v;
    }
    lf__sb_puts(b, "<table><tr><th>step</th><th>train loss</th><th>val loss</th>");
    for (int k = 0; k < nk; k++) {
        lf__sb_puts(b, "<th>");
        lf__sb_html(b, keys[k] + 5);
        lf__sb_puts(b, "</th>");
    }
    lf__sb_puts(b, "<th>ms</th></tr>");
    int shown = 0;
    cJSON_ArrayForEach(it, r->evals) {
        /* at most 200 rows: the first 100 and the last 100 */
        if (ne > 200 && shown >= 100 && shown < ne - 100) {
            if (shown == 100)
                lf__sb_printf(b, "<tr><td colspan=\"%d\" class=\"muted\">… %d more …</td></tr>", nk + 4, ne - 200);
            shown++;
            continue;
        }
        shown++;
        double v = jnum(it, "val_loss");
        lf__sb_printf(b, "<tr%s><td class=\"num\">%.0f</td><td class=\"num\">",
                      isfinite(v) && v == best ? " class=\"best\"" : "", jnum(it, "step"));
        put_num(b, jnum(it, "train_loss"));
        lf__sb_puts(b, "</td><td class=\"num\">");
        put_num(b, v);
        lf__sb_puts(b, "</td>");
        for (int k = 0; k < nk; k++) {
            lf__sb_puts(b, "<td class=\"num\">");
            put_num(b, jnum(it, keys[k]));
            lf__sb_puts(b, "</td>");
        }
        lf__sb_puts(b, "<td class=\"num\">");
        put_num(b, jnum(it, "time/eval_ms"));
        lf__sb_puts(b, "</td></tr>");
    }
    lf__sb_puts(b, "</table>");
    /* eval.suite on each checkpoint */
    int header = 0;
    cJSON_ArrayForEach(it, r->events) {
        const char *t = jstr(it, "type");
        const cJSON *mo = cJSON_GetObjectItemCaseSensitive(it, "metrics");
        if (!t || strcmp(t, "eval_suite") != 0 || !cJSON_IsObject(mo)) continue;
        if (!header) {
            lf__sb_puts(b,
                        "<h2>eval.suite on checkpoints</h2><table><tr><th>step</th><th>metric</th><th>value</th></tr>");
            header = 1;
        }
        const cJSON *kv;
        cJSON_ArrayForEach(kv, mo) {
            lf__sb_printf(b, "<tr><td class=\"num\">%.0f</td><td>", jnum(it, "step"));
            lf__sb_html(b, kv->string ? kv->string : "?");
            lf__sb_puts(b, "</td><td class=\"num\">");
            put_json_value(b, kv);
            lf__sb_puts(b, "</td></tr>");
        }
    }
    if (header) lf__sb_puts(b, "</table>");
    lf__sb_puts(b, "</section>\n");
}

typedef struct ckpt_row {
    long step;
    int on_disk, logged;
    double bytes;
    char name[64];
} ckpt_row;

static int ckpt_cmp(const void *a, const void *b) {
    long x = ((const ckpt_row *)a)->step, y = ((const ckpt_row *)b)->step;
    return x < y ? -1 : x > y;
}

static const cJSON *eval_at(const run_data *r, long step) {
    const cJSON *it, *found = NULL;
    cJSON_ArrayForEach(it, r->evals) if (jnum(it, "step") == (double)step) found = it;
    return found;
}

static const cJSON *event_at(const run_data *r, const char *type, long step) {
    const cJSON *it, *found = NULL;
    cJSON_ArrayForEach(it, r->events) {
        const char *t = jstr(it, "type");
        if (t && !strcmp(t, type) && jnum(it, "step") == (double)step) found = it;
    }
    return found;
}

/* The registry's entry for a checkpoint directory of this run (NULL: none). */
static const cJSON *registry_entry(const cJSON *reg, const char *abs_ckpt_root, const char *name) {
    if (!reg || !abs_ckpt_root[0]) return NULL;
    char want[4400];
    snprintf(want, sizeof want, "%s/%s", abs_ckpt_root, name);
    const cJSON *it, *found = NULL;
    cJSON_ArrayForEach(it, reg) {
        const char *p = jstr(it, "path");
        if (p && !strcmp(p, want)) found = it;
    }
    return found;
}

static void checkpoints_section(lf__sb *b, run_data *r, const char *registry_json) {
    char root[4200];
    snprintf(root, sizeof root, "%s/ckpt", r->dir);
    ckpt_row rows[512];
    int n = 0;
    DIR *d = opendir(root);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) && n < 512) {
            long s;
            char tail;
            if (sscanf(e->d_name, "step_%ld%c", &s, &tail) != 1 || s < 0) continue;
            ckpt_row *row = &rows[n++];
            memset(row, 0, sizeof *row);
            row->step = s;
            row->on_disk = 1;
            row->bytes = NAN;
            snprintf(row->name, sizeof row->name, "%s", e->d_name);
        }
        closedir(d);
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, r->events) { /* checkpoints the log saw, removed since by rotation */
        const char *t = jstr(it, "type");
        double s = jnum(it, "step");
        if (!t || strcmp(t, "checkpoint") != 0 || !isfinite(s)) continue;
        int k;
        for (k = 0; k < n && rows[k].step != (long)s; k++) {
        }
        if (k == n && n < 512) {
            memset(&rows[n], 0, sizeof rows[n]);
            rows[n].step = (long)s;
            rows[n].bytes = NAN;
            snprintf(rows[n].name, sizeof rows[n].name, "step_%08ld", (long)s);
            n++;
        }
        rows[k].logged = 1;
    }
    qsort(rows, (size_t)n, sizeof rows[0], ckpt_cmp);
    /* the best and the latest, from the newest state on disk */
    char best[64] = "", latest[64] = "", best_metric[128] = "val_loss", why[512], path[4400];
    double best_value = NAN;
    for (int k = n - 1; k >= 0; k--) {
        if (!rows[k].on_disk) continue;
        snprintf(path, sizeof path, "%s/%s/trainer_state.json", root, rows[k].name);
        cJSON *stt = read_json(path, why, sizeof why);
        if (!stt) {
            warn(&r->w, "checkpoint '%s/%s': %s", root, rows[k].name, why[0] ? why : "no trainer_state.json");
            continue;
        }
        const char *bc = jstr(stt, "best_checkpoint");
        if (bc) snprintf(best, sizeof best, "%s", bc);
        const cJSON *bm = cJSON_GetObjectItemCaseSensitive(stt, "best_metric");
        if (jstr(bm, "name")) snprintf(best_metric, sizeof best_metric, "%s", jstr(bm, "name"));
        best_value = jnum(bm, "value");
        cJSON_Delete(stt);
        break;
    }
    for (int k = 0; k < n; k++) { /* sizes */
        if (!rows[k].on_disk) continue;
        snprintf(path, sizeof path, "%s/%s/trainer_state.json", root, rows[k].name);
        cJSON *stt = read_json(path, why, sizeof why);
        const cJSON *files = cJSON_GetObjectItemCaseSensitive(stt, "files"), *f;
        double total = 0;
        int any = 0;
        cJSON_ArrayForEach(f, files) {
            double by = jnum(f, "bytes");
            if (isfinite(by)) total += by, any = 1;
        }
        if (any) rows[k].bytes = total;
        cJSON_Delete(stt);
    }
    snprintf(path, sizeof path, "%s/latest", root);
    char *lt = NULL;
    if (lf_file_read_all(path, 4096, &lt, NULL) == LF_OK) {
        snprintf(latest, sizeof latest, "%s", lt);
        latest[strcspn(latest, "\r\n")] = '\0';
        lf_free(lt);
    }
    cJSON *reg = NULL;
    char abs_root[PATH_MAX] = "";
    if (registry_json) {
        reg = cJSON_Parse(registry_json);
        if (!cJSON_IsArray(reg)) {
            warn(&r->w, "the model registry's list is not a JSON array; checkpoints are shown without it");
            cJSON_Delete(reg);
            reg = NULL;
        }
        if (reg && !realpath(root, abs_root)) abs_root[0] = '\0';
    }
    const char *keys[64];
    int nk = eval_keys(r, keys, 64);
    lf__sb_printf(b, "<section id=\"checkpoints\"><h2>Checkpoints (%d)</h2>", n);
    if (!n) {
        lf__sb_puts(b, "<p class=\"muted\">none</p></section>\n");
        cJSON_Delete(reg);
        return;
    }
    lf__sb_puts(b, "<p class=\"muted\">best by ");
    lf__sb_html(b, best_metric);
    lf__sb_puts(b, ": <b>");
    lf__sb_html(b, best[0] ? best : "none yet");
    lf__sb_puts(b, "</b>");
    if (isfinite(best_value)) {
        lf__sb_puts(b, " (");
        put_num(b, best_value);
        lf__sb_puts(b, ")");
    }
    lf__sb_puts(b, "; latest: <b>");
    lf__sb_html(b, latest[0] ? latest : "–");
    lf__sb_puts(
        b,
        "</b></p><table><tr><th></th><th>checkpoint</th><th>step</th><th>state</th><th>train loss</th><th>val loss</th>");
    for (int k = 0; k < nk; k++) {
        lf__sb_puts(b, "<th>");
        lf__sb_html(b, keys[k] + 5);
        lf__sb_puts(b, "</th>");
    }
    lf__sb_puts(b, "<th>eval.suite</th><th>size</th>");
    if (reg) lf__sb_puts(b, "<th>registry</th><th>tags</th>");
    lf__sb_puts(b, "</tr>");
    for (int k = 0; k < n; k++) {
        const ckpt_row *row = &rows[k];
        int is_best = best[0] && !strcmp(best, row->name);
        lf__sb_printf(b, "<tr%s><td>%s</td><td>", is_best ? " class=\"best\" data-best=\"1\"" : "", is_best ? "★" : "");
        lf__sb_html(b, row->name);
        lf__sb_printf(b, "</td><td class=\"num\">%ld</td><td>%s%s</td>", row->step,
                      row->on_disk ? "on disk" : "removed (rotation)",
                      latest[0] && !strcmp(latest, row->name) ? ", latest" : "");
        const cJSON *ev = eval_at(r, row->step);
        lf__sb_puts(b, "<td class=\"num\">");
        put_num(b, ev ? jnum(ev, "train_loss") : NAN);
        lf__sb_puts(b, "</td><td class=\"num\">");
        put_num(b, ev ? jnum(ev, "val_loss") : NAN);
        lf__sb_puts(b, "</td>");
        for (int q = 0; q < nk; q++) {
            lf__sb_puts(b, "<td class=\"num\">");
            put_num(b, ev ? jnum(ev, keys[q]) : NAN);
            lf__sb_puts(b, "</td>");
        }
        const cJSON *su = event_at(r, "eval_suite", row->step);
        const cJSON *sm = su ? cJSON_GetObjectItemCaseSensitive(su, "metrics") : NULL, *kv;
        lf__sb_puts(b, "<td>");
        int first = 1;
        cJSON_ArrayForEach(kv, sm) {
            lf__sb_puts(b, first ? "" : ", ");
            first = 0;
            lf__sb_html(b, kv->string ? kv->string : "?");
            lf__sb_puts(b, " ");
            put_json_value(b, kv);
        }
        char sz[64];
        fmt_bytes(sz, sizeof sz, row->bytes);
        lf__sb_printf(b, "</td><td class=\"num\">%s</td>", sz);
        if (reg) {
            const cJSON *re = registry_entry(reg, abs_root, row->name);
            lf__sb_puts(b, "<td>");
            if (re) put_json_value(b, cJSON_GetObjectItemCaseSensitive(re, "id"));
            lf__sb_puts(b, "</td><td>");
            const cJSON *tags = re ? cJSON_GetObjectItemCaseSensitive(re, "tags") : NULL, *tg;
            first = 1;
            cJSON_ArrayForEach(tg, tags) {
                if (!cJSON_IsString(tg)) continue;
                lf__sb_puts(b, first ? "" : ", ");
                first = 0;
                lf__sb_html(b, tg->valuestring);
            }
            lf__sb_puts(b, "</td>");
        }
        lf__sb_puts(b, "</tr>");
    }
    lf__sb_puts(b, "</table></section>\n");
    cJSON_Delete(reg);
}

static void events_section(lf__sb *b, const run_data *r) {
    int na = count_events(r, "alert"), ns = count_events(r, "skipped_step"), nr = count_events(r, "resume");
    lf__sb_printf(b, "<section id=\"events\"><h2>Alerts, skipped steps and resumes (%d, %d, %d)</h2>", na, ns, nr);
    if (!na && !ns && !nr) {
        lf__sb_puts(b, "<p class=\"muted\">none</p></section>\n");
        return;
    }
    lf__sb_puts(b, "<table><tr><th>step</th><th>event</th><th>details</th></tr>");
    int shown = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, r->events) {
        const char *t = jstr(it, "type");
        if (!t || (strcmp(t, "alert") && strcmp(t, "skipped_step") && strcmp(t, "resume"))) continue;
        if (shown++ >= 300) continue;
        int during = strcmp(t, "resume") != 0; /* raised during the step after the count */
        lf__sb_printf(b, "<tr data-event=\"%s\"><td class=\"num\">%.0f</td><td>", t, jnum(it, "step") + during);
        if (!strcmp(t, "alert")) {
            lf__sb_puts(b, "alert ");
            lf__sb_html(b, jstr(it, "kind") ? jstr(it, "kind") : "?");
            lf__sb_puts(b, "</td><td>");
            lf__sb_html(b, jstr(it, "action") ? jstr(it, "action") : "?");
            lf__sb_puts(b, ": ");
            lf__sb_html(b, jstr(it, "message") ? jstr(it, "message") : "");
        } else if (!strcmp(t, "skipped_step")) {
            lf__sb_puts(b, "skipped step</td><td>");
            lf__sb_html(b, jstr(it, "reason") ? jstr(it, "reason") : "?");
            const char *tensor = jstr(it, "tensor");
            if (tensor) {
                lf__sb_puts(b, " in ");
                lf__sb_html(b, tensor);
            }
        } else {
            lf__sb_puts(b, "resume</td><td>from ");
            lf__sb_html(b, jstr(it, "path") ? jstr(it, "path") : "?");
        }
        lf__sb_puts(b, "</td></tr>");
    }
    if (shown > 300) lf__sb_printf(b, "<tr><td colspan=\"3\" class=\"muted\">… %d more</td></tr>", shown - 300);
    lf__sb_puts(b, "</table></section>\n");
}

static void kv_row(lf__sb *b, const char *k, const cJSON *v) {
    lf__sb_puts(b, "<tr><th>");
    lf__sb_html(b, k);
    lf__sb_puts(b, "</th><td>");
    put_json_value(b, v);
    lf__sb_puts(b, "</td></tr>");
}

static void memory_section(lf__sb *b, const run_data *r) {
    const cJSON *mp = NULL, *ev; /* the newest run_info that has the plan */
    cJSON_ArrayForEach(ev, r->events) {
        const char *t = jstr(ev, "type");
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(ev, "memory_plan");
        if (t && !strcmp(t, "run_info") && cJSON_IsObject(m)) mp = m;
    }
    lf__sb_puts(b, "<section id=\"memory\"><h2>Memory plan</h2>");
    double peak = NAN, plan = NAN;
    for (size_t i = 0; i < r->n; i++) {
        if (isfinite(r->col[C_RSS][i]) && !(r->col[C_RSS][i] <= peak)) peak = r->col[C_RSS][i];
        if (isfinite(r->col[C_PLAN][i])) plan = r->col[C_PLAN][i];
    }
    char a[64], c2[64];
    fmt_bytes(a, sizeof a, plan);
    fmt_bytes(c2, sizeof c2, peak);
    lf__sb_printf(b,
                  "<p>planned <b>%s</b>, peak RSS <b>%s</b> (rank 0; RSS also counts the program, its libraries "
                  "and the data loader's ring)</p>",
                  a, c2);
    if (!cJSON_IsObject(mp)) {
        lf__sb_puts(b, "<p class=\"muted\">the log has no run_info record with the plan's items (a run from before "
                       "llmforge logged it)</p></section>\n");
        return;
    }
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(mp, "items"), *it;
    lf__sb_puts(b, "<table><tr><th>item</th><th>bytes</th></tr>");
    cJSON_ArrayForEach(it, items) {
        lf__sb_puts(b, "<tr><td>");
        lf__sb_html(b, jstr(it, "name") ? jstr(it, "name") : "?");
        fmt_bytes(a, sizeof a, jnum(it, "bytes"));
        lf__sb_printf(b, "</td><td class=\"num\">%s</td></tr>", a);
    }
    fmt_bytes(a, sizeof a, jnum(mp, "total_bytes"));
    lf__sb_printf(b, "<tr class=\"best\"><td>total</td><td class=\"num\">%s</td></tr></table>", a);
    const cJSON *kv;
    lf__sb_puts(b, "<table>");
    cJSON_ArrayForEach(kv, mp) {
        if (!kv->string || !strcmp(kv->string, "items") || !strcmp(kv->string, "text")) continue;
        kv_row(b, kv->string, kv);
    }
    lf__sb_puts(b, "</table>");
    const char *text = jstr(mp, "text");
    if (text) {
        lf__sb_puts(b, "<details><summary>as <code>llmforge plan</code> prints it</summary><pre>");
        lf__sb_html(b, text);
        lf__sb_puts(b, "</pre></details>");
    }
    lf__sb_puts(b, "</section>\n");
}

static void hardware_section(lf__sb *b, const run_data *r) {
    const cJSON *ri = last_event(r, "run_info");
    const cJSON *hw = ri ? cJSON_GetObjectItemCaseSensitive(ri, "hardware") : NULL;
    lf__sb_puts(b, "<section id=\"hardware\"><h2>Hardware and kernels</h2>");
    if (!cJSON_IsObject(hw)) {
        lf__sb_puts(b, "<p class=\"muted\">the log has no run_info record</p></section>\n");
        return;
    }
    lf__sb_puts(b, "<table>");
    const cJSON *kv;
    cJSON_ArrayForEach(kv, hw) kv_row(b, kv->string ? kv->string : "?", kv);
    lf__sb_puts(b, "</table></section>\n");
}

static void dataset_section(lf__sb *b, run_data *r) {
    const char *ds = jstr(r->header, "dataset");
    lf__sb_puts(b, "<section id=\"dataset\"><h2>Dataset</h2>");
    if (!ds || !ds[0]) {
        lf__sb_puts(b, "<p class=\"muted\">no data.dataset in the configuration</p></section>\n");
        return;
    }
    char path[4400], why[512];
    snprintf(path, sizeof path, "%s/dataset.json", ds);
    cJSON *m = read_json(path, why, sizeof why);
    if (!m && ds[0] != '/') { /* relative to where the run was started: try beside the run directory too */
        snprintf(path, sizeof path, "%s/../%s/dataset.json", r->dir, ds);
        m = read_json(path, why, sizeof why);
    }
    lf__sb_puts(b, "<p><code>");
    lf__sb_html(b, ds);
    lf__sb_puts(b, "</code></p>");
    if (!m) {
        lf__sb_puts(b, "<p class=\"muted\">its manifest cannot be read here</p></section>\n");
        warn(&r->w, "dataset '%s': %s", ds, why[0] ? why : "no dataset.json (moved, or on another machine)");
        return;
    }
    lf__sb_puts(b, "<table>");
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(m, "tokenizer");
    kv_row(b, "format", cJSON_GetObjectItemCaseSensitive(m, "format"));
    if (cJSON_GetObjectItemCaseSensitive(m, "mode")) kv_row(b, "mode", cJSON_GetObjectItemCaseSensitive(m, "mode"));
    kv_row(b, "tokenizer", cJSON_GetObjectItemCaseSensitive(tok, "spec"));
    kv_row(b, "tokenizer sha256", cJSON_GetObjectItemCaseSensitive(tok, "sha256"));
    kv_row(b, "vocab size", cJSON_GetObjectItemCaseSensitive(m, "vocab_size"));
    const cJSON *splits = cJSON_GetObjectItemCaseSensitive(m, "splits"), *sp;
    cJSON_ArrayForEach(sp, splits) {
        char k[160], v[160], tk[64];
        fmt_num(tk, sizeof tk, jnum(sp, "tokens"));
        snprintf(k, sizeof k, "split %s", sp->string ? sp->string : "?");
        snprintf(v, sizeof v, "%s tokens in %d shard(s)", tk,
                 cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(sp, "shards")));
        lf__sb_puts(b, "<tr><th>");
        lf__sb_html(b, k);
        lf__sb_puts(b, "</th><td>");
        lf__sb_html(b, v);
        lf__sb_puts(b, "</td></tr>");
    }
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(m, "sources"), *s;
    int ns = cJSON_GetArraySize(src), i = 0;
    lf__sb_printf(b, "<tr><th>sources</th><td>%d file(s)", ns);
    cJSON_ArrayForEach(s, src) {
        if (i++ >= 10) {
            lf__sb_printf(b, "<br>… %d more", ns - 10);
            break;
        }
        char by[64];
        fmt_bytes(by, sizeof by, jnum(s, "bytes"));
        lf__sb_puts(b, "<br><code>");
        lf__sb_html(b, jstr(s, "path") ? jstr(s, "path") : "?");
        lf__sb_printf(b, "</code> %s", by);
    }
    lf__sb_puts(b, "</td></tr></table></section>\n");
    cJSON_Delete(m);
}

static void config_section(lf__sb *b, const run_data *r) {
    lf__sb_puts(b, "<section id=\"config\"><h2>Resolved configuration</h2>");
    char *txt = r->config ? lf_json_print(r->config, 1) : NULL;
    if (!txt) {
        lf__sb_puts(b, "<p class=\"muted\">no readable config.resolved.json</p></section>\n");
        return;
    }
    lf__sb_puts(b, "<details open><summary>config.resolved.json</summary><pre>");
    lf__sb_html(b, txt);
    lf__sb_puts(b, "</pre></details></section>\n");
    cJSON_free(txt);
}

/* ---------------------------------------------------------------- writing */

static lf_status write_file(const char *path, const lf__sb *b) {
    if (b->failed || !b->p) return lf_fail(LF_ERR_NOMEM, "report: out of memory rendering '%s'", path);
    /* write a temporary file beside it, then rename: a reader never sees half a report */
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return lf_fail(LF_ERR_IO, "report: cannot write '%s': %s", tmp, strerror(errno));
    int bad = fwrite(b->p, 1, b->len, f) != b->len;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        int e = errno;
        remove(tmp);
        return lf_fail(LF_ERR_IO, "report: cannot write '%s': %s", path, strerror(e));
    }
    return LF_OK;
}

static lf_status write_svgs(chart *ch, int n, const char *dir) {
    lf_status st = lf_mkdirs(dir);
    if (st != LF_OK) {
        lf_error_prefix("report: --svg directory '%s'", dir);
        return st;
    }
    for (int i = 0; i < n && st == LF_OK; i++) {
        lf__sb b = {0};
        lf__sb_puts(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        chart_svg(&b, &ch[i], 1);
        lf__sb_puts(&b, "\n");
        char path[4400];
        snprintf(path, sizeof path, "%s/%s.svg", dir, ch[i].id);
        st = write_file(path, &b);
        lf__sb_free(&b);
    }
    return st;
}

static void fill_result(lf_report_result *res, const warnings *w, long records, int charts, const char *out) {
    if (!res) return;
    memset(res, 0, sizeof *res);
    res->warnings = w->total;
    if (w->n) snprintf(res->first_warning, sizeof res->first_warning, "%s", w->msg[0]);
    res->records = records;
    res->charts = charts;
    snprintf(res->out_path, sizeof res->out_path, "%s", out);
}

lf_status lf_report_write(const char *run_dir, const lf_report_opts *opts, lf_report_result *result) {
    if (result) memset(result, 0, sizeof *result);
    if (!run_dir || !run_dir[0]) return lf_fail(LF_ERR_INVALID_ARG, "report: no run directory");
    lf_report_opts o = opts ? *opts : (lf_report_opts){0};
    run_data r;
    lf_status st = read_run(&r, run_dir);
    if (st != LF_OK) {
        run_free(&r);
        return st;
    }
    char out[4200];
    if (o.out_path && o.out_path[0]) snprintf(out, sizeof out, "%s", o.out_path);
    else snprintf(out, sizeof out, "%s/report.html", r.dir);
    char title[4200];
    snprintf(title, sizeof title, "%s", o.title && o.title[0] ? o.title : r.dir);
    chart ch[N_RUN_CHARTS];
    build_run_charts(&r, ch);
    if (r.events_dropped)
        warn(&r.w, "log.jsonl: %ld event records beyond the first %d are not shown", r.events_dropped,
             REPORT_MAX_EVENTS);
    lf__sb b = {0};
    lf__sb body = {0}; /* sections that may add warnings come first, the warnings box is placed before them */
    int with_data = 0;
    char full_title[4300];
    snprintf(full_title, sizeof full_title, "llmforge report · %s", title);
    charts_section(&body, ch, N_RUN_CHARTS, &with_data);
    eval_section(&body, &r);
    checkpoints_section(&body, &r, o.registry_json);
    events_section(&body, &r);
    memory_section(&body, &r);
    hardware_section(&body, &r);
    dataset_section(&body, &r);
    config_section(&body, &r);
    lf__sb_puts(&body, "</main>\n");
    html_begin(&b, full_title);
    header_section(&b, &r, full_title);
    section_warnings(&b, &r.w);
    if (body.failed) b.failed = 1;
    else lf__sb_put(&b, body.p, body.len);
    lf__sb_free(&body);
    html_footer(&b, "report");
    st = write_file(out, &b);
    lf__sb_free(&b);
    if (st == LF_OK && o.svg_dir && o.svg_dir[0]) st = write_svgs(ch, N_RUN_CHARTS, o.svg_dir);
    fill_result(result, &r.w, r.records, with_data, out);
    for (int i = 0; i < N_RUN_CHARTS; i++) chart_free(&ch[i]);
    run_free(&r);
    return st;
}

/* ---------------------------------------------------------------- comparing runs */

/* Every leaf of a JSON object as "a.b.c" -> its JSON text, into names/values. */
static void flatten(const cJSON *o, const char *prefix, cJSON *out) {
    const cJSON *kv;
    cJSON_ArrayForEach(kv, o) {
        char key[512];
        snprintf(key, sizeof key, "%s%s%s", prefix, prefix[0] ? "." : "", kv->string ? kv->string : "?");
        if (cJSON_IsObject(kv)) {
            flatten(kv, key, out);
        } else {
            char *t = lf_json_print(kv, 0);
            if (t) cJSON_AddStringToObject(out, key, t);
            cJSON_free(t);
        }
    }
}

lf_status lf_report_compare(const char *const *run_dirs, int n, const lf_report_opts *opts, lf_report_result *result) {
    if (result) memset(result, 0, sizeof *result);
    if (!run_dirs || n < 1 || n > REPORT_MAX_RUNS)
        return lf_fail(LF_ERR_INVALID_ARG, "report --compare: %d run directories (1..%d)", n, REPORT_MAX_RUNS);
    lf_report_opts o = opts ? *opts : (lf_report_opts){0};
    run_data *r = calloc((size_t)n, sizeof *r);
    if (!r) return lf_fail(LF_ERR_NOMEM, "report: out of memory");
    lf_status st = LF_OK;
    int got = 0;
    for (; got < n; got++) {
        st = read_run(&r[got], run_dirs[got]);
        if (st != LF_OK) {
            got++;
            goto done;
        }
    }
    warnings w = {0}; /* every run's, prefixed */
    long records = 0;
    for (int i = 0; i < n; i++) {
        records += r[i].records;
        for (int k = 0; k < r[i].w.n; k++) {
            if (w.total >= REPORT_MAX_WARN) {
                w.total++;
                continue;
            }
            char buf[700];
            snprintf(buf, sizeof buf, "%s: %s", r[i].dir, r[i].w.msg[k]);
            w.msg[w.n] = strdup(buf);
            w.n += w.msg[w.n] != NULL;
            w.total++;
        }
        w.total += r[i].w.total - r[i].w.n;
    }
    chart ch[2];
    memset(ch, 0, sizeof ch);
    ch[0].id = "loss";
    ch[0].title = "Training loss";
    ch[1].id = "val_loss";
    ch[1].title = "Validation loss";
    for (int i = 0; i < n; i++) {
        char name[128];
        const char *slash = strrchr(r[i].dir, '/');
        snprintf(name, sizeof name, "%s", slash && slash[1] ? slash + 1 : r[i].dir);
        (void)add_series(&ch[0], name, r[i].col[C_STEP], r[i].col[C_LOSS], r[i].n, 1, 0);
        int ne = cJSON_GetArraySize(r[i].evals);
        double *ex = malloc(sizeof(double) * (size_t)(ne + 1)), *ey = malloc(sizeof(double) * (size_t)(ne + 1));
        if (ex && ey) {
            int k = 0;
            const cJSON *it;
            cJSON_ArrayForEach(it, r[i].evals) {
                ex[k] = jnum(it, "step");
                ey[k++] = jnum(it, "val_loss");
            }
            (void)add_series(&ch[1], name, ex, ey, (size_t)ne, 1, 0);
        }
        free(ex);
        free(ey);
    }
    char out[4200];
    snprintf(out, sizeof out, "%s", o.out_path && o.out_path[0] ? o.out_path : "compare.html");
    lf__sb b = {0};
    char title[600];
    snprintf(title, sizeof title, "llmforge report · %d runs compared", n);
    html_begin(&b, o.title && o.title[0] ? o.title : title);
    lf__sb_puts(&b, "<header><h1>");
    lf__sb_html(&b, o.title && o.title[0] ? o.title : title);
    lf__sb_puts(&b, "</h1></header>\n");
    section_warnings(&b, &w);
    int with_data = 0;
    charts_section(&b, ch, 2, &with_data);
    /* the runs */
    lf__sb_puts(&b, "<section id=\"runs\"><h2>Runs</h2><table><tr><th></th><th>run</th><th>steps</th><th>final train "
                    "loss</th><th>best val loss</th><th>median tokens/s</th><th>status</th><th>config</th></tr>");
    for (int i = 0; i < n; i++) {
        double best = INFINITY;
        const cJSON *it;
        cJSON_ArrayForEach(it, r[i].evals) {
            double v = jnum(it, "val_loss");
            if (isfinite(v) && v < best) best = v;
        }
        const cJSON *end = last_event(&r[i], "end");
        lf__sb_printf(
            &b, "<tr><td><span style=\"display:inline-block;width:12px;height:3px;background:%s\"></span></td><td>",
            k_colors[i % N_COLORS]);
        lf__sb_html(&b, r[i].dir);
        lf__sb_puts(&b, "</td><td class=\"num\">");
        put_num(&b, r[i].n ? r[i].col[C_STEP][r[i].n - 1] : NAN);
        lf__sb_puts(&b, "</td><td class=\"num\">");
        put_num(&b, r[i].n ? r[i].col[C_LOSS][r[i].n - 1] : NAN);
        lf__sb_puts(&b, "</td><td class=\"num\">");
        put_num(&b, isfinite(best) ? best : NAN);
        lf__sb_puts(&b, "</td><td class=\"num\">");
        put_num(&b, median_col(&r[i], C_TPS));
        lf__sb_puts(&b, "</td><td>");
        lf__sb_html(&b, end && jstr(end, "status") ? jstr(end, "status") : "unfinished");
        lf__sb_printf(&b, "</td><td><code>%.12s</code></td></tr>",
                      jstr(r[i].header, "config_hash") ? jstr(r[i].header, "config_hash") : "");
    }
    lf__sb_puts(&b, "</table></section>\n");
    /* what differs */
    cJSON *flat[REPORT_MAX_RUNS];
    for (int i = 0; i < n; i++) {
        flat[i] = cJSON_CreateObject();
        if (flat[i] && r[i].config) flatten(r[i].config, "", flat[i]);
    }
    lf__sb_puts(&b, "<section id=\"differences\"><h2>Configuration keys that differ</h2><table><tr><th>key</th>");
    for (int i = 0; i < n; i++) lf__sb_printf(&b, "<th>run %d</th>", i + 1);
    lf__sb_puts(&b, "</tr>");
    int ndiff = 0;
    for (int i = 0; i < n; i++) {
        const cJSON *kv;
        cJSON_ArrayForEach(kv, flat[i]) {
            int seen_before = 0;
            for (int j = 0; j < i && !seen_before; j++)
                seen_before = cJSON_GetObjectItemCaseSensitive(flat[j], kv->string) != NULL;
            if (seen_before) continue;
            int differs = 0;
            for (int j = 0; j < n && !differs; j++) {
                const char *v = jstr(flat[j], kv->string);
                differs = !v || strcmp(v, kv->valuestring) != 0;
            }
            if (!differs) continue;
            ndiff++;
            lf__sb_puts(&b, "<tr><th>");
            lf__sb_html(&b, kv->string);
            lf__sb_puts(&b, "</th>");
            for (int j = 0; j < n; j++) {
                const char *v = jstr(flat[j], kv->string);
                lf__sb_puts(&b, "<td><code>");
                lf__sb_html(&b, v ? v : "(absent)");
                lf__sb_puts(&b, "</code></td>");
            }
            lf__sb_puts(&b, "</tr>");
        }
    }
    if (!ndiff)
        lf__sb_printf(&b, "<tr><td colspan=\"%d\" class=\"muted\">none: the same configuration</td></tr>", n + 1);
    lf__sb_puts(&b, "</table></section></main>\n");
    for (int i = 0; i < n; i++) cJSON_Delete(flat[i]);
    html_footer(&b, "report --compare");
    st = write_file(out, &b);
    lf__sb_free(&b);
    if (st == LF_OK && o.svg_dir && o.svg_dir[0]) st = write_svgs(ch, 2, o.svg_dir);
    fill_result(result, &w, records, with_data, out);
    warnings_free(&w);
    chart_free(&ch[0]);
    chart_free(&ch[1]);
done:
    for (int i = 0; i < got; i++) run_free(&r[i]);
    free(r);
    return st;
}
