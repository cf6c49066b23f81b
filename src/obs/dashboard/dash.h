/*
 * Private interface of the live dashboard (src/obs/dashboard/dash.c) and of
 * the run-directory reading the dashboard and the report share
 * (src/obs/report.c). Nothing here is public API; tests/obs include it.
 *
 * The dashboard object (lf__dash) is what both servers that show the page
 * hold: the Prometheus sink (prometheus.c, when lf_prom_opts.dashboard is
 * set) and the dashboard's own sink (lf_obs_dashboard_open). It answers the
 * routes GET /, GET /api/run; obs.h documents what they return.
 *
 * Threads: lf__dash_emit runs on the training thread and takes only
 * `live_mu` (a few stores). lf__dash_route and lf__dash_api run on HTTP
 * worker threads, several at once; they take `idx_mu`, under which the
 * log file is read, and never live_mu for longer than a copy. So nothing an
 * HTTP client does can hold the training thread.
 */
#ifndef LF_OBS_DASH_H
#define LF_OBS_DASH_H

#include <stddef.h>
#include "llmforge/obs.h"

struct cJSON;
struct lf__http_request;

#include "core/strbuf.h"

/* ---------------------------------------------------------------- the page */

/* src/obs/dashboard/dashboard.html, embedded at build time (cmake/embed_file.cmake). */
extern const char lf__dashboard_html[];
extern const size_t lf__dashboard_html_len;

/* ---------------------------------------------------------------- the dashboard */

typedef struct lf__dash lf__dash;

#define LF_DASH_DEFAULT_RESPONSE (256u << 10) /* bytes of records per /api/run answer */
#define LF_DASH_MAX_LINE (64u << 10)          /* a longer log line is left out */
#define LF_DASH_READ_CHUNK (8u << 20)         /* new log bytes read per request, at most */

/* Errors: LF_ERR_INVALID_ARG (no log_path), LF_ERR_CONFIG (header_json is
 * not a JSON object), LF_ERR_NOMEM. The host/port fields are not used. */
lf_status lf__dash_create(lf__dash **out, const lf_dash_opts *o);
void lf__dash_free(lf__dash *d);
/* Training thread: note the step, its time, the run's status. */
void lf__dash_emit(lf__dash *d, const lf_obs_record *r);
/* HTTP worker: answer the request when its path is the dashboard's
 * (GET/HEAD / and /api/run); 1 when answered, 0 to let the caller route it. */
int lf__dash_route(lf__dash *d, struct lf__http_request *r);
/* The /api/run answer for a query string ("since=12", "" for none) as a
 * malloc'd JSON text; *status 200, or 400 with a text message for a bad
 * query. NULL when out of memory. Used by the route and by the tests. */
char *lf__dash_api(lf__dash *d, const char *query, size_t *len, int *status);

/* ---------------------------------------------------------------- run directories (report.c) */

/* The run header from a run directory: out_dir, config_hash (SHA-256 of
 * config.resolved.json, the registry's config_hash), model {arch, n_layer,
 * n_head, n_kv_head, n_embd, block_size, vocab_size}, batch {micro,
 * accumulation, world_size, global, tokens_per_step}, train_iters, dataset,
 * precision ("fp32", "bf16", "fp16"). Members that cannot be read are left
 * out, and the reason is written to warn (may be NULL; "" when none).
 * NULL only when out of memory. */
struct cJSON *lf__run_header(const char *run_dir, char *warn, size_t warn_cap);

#endif
