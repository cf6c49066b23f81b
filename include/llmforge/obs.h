/*
 * Observability: metric records and the sinks that receive them.
 *
 * The trainer emits records onto a bus (lf_obs); sinks subscribe (console,
 * log.jsonl, TensorBoard event files, a Prometheus /metrics endpoint). The
 * trainer does not know which sinks exist. Emission happens on the training
 * thread; a sink must not block it for long (file sinks buffer and flush at
 * most every few seconds, the Prometheus sink only updates values under a
 * mutex that its HTTP thread reads).
 *
 * Tags are "section/name": train/loss, train/lr, train/grad_norm,
 * train/tokens_per_sec, train/samples_per_sec, train/mfu, train/loss_scale,
 * time/step_ms, time/data_ms, time/forward_ms, time/backward_ms,
 * time/comm_ms (communication issued), time/comm_exposed_ms (the part the
 * step waited for), time/optimizer_ms, time/checkpoint_ms, memory/rss_bytes,
 * memory/planned_bytes, eval/val_loss, eval/train_loss, eval/<task>/<metric>.
 */
#ifndef LLMFORGE_OBS_H
#define LLMFORGE_OBS_H

#include "llmforge/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum lf_obs_kind {
    LF_OBS_TRAIN = 0, /* one optimizer step finished: scalars train/..., time/..., memory/... */
    LF_OBS_EVAL = 1,  /* an evaluation finished: scalars eval/... */
    LF_OBS_EVENT = 2, /* a named event: run_start, checkpoint, resume, alert, run_end */
} lf_obs_kind;

typedef struct lf_obs_scalar {
    const char *tag; /* "train/loss" */
    double value;
} lf_obs_scalar;

typedef struct lf_obs_record {
    lf_obs_kind kind;
    long step;                    /* optimizer steps completed */
    double wall_time;             /* seconds since the Unix epoch */
    const lf_obs_scalar *scalars; /* n_scalars values (TRAIN, EVAL; may be 0 for EVENT) */
    int n_scalars;
    const char *event;      /* EVENT: its name; else NULL */
    const char *alert_kind; /* EVENT "alert": nan | loss_spike | stall | throughput_drop */
    const char *json;       /* optional JSON object with details (resolved config, paths), or NULL */
} lf_obs_record;

/* A sink: emit is called for every record, flush at least at the end, close
 * once (frees the sink). All may be NULL except close. error (optional)
 * returns the message of a sink that failed and stopped (see
 * lf_obs_sink_error). */
typedef struct lf_obs_sink lf_obs_sink;
struct lf_obs_sink {
    const char *name;
    void (*emit)(lf_obs_sink *s, const lf_obs_record *r);
    void (*flush)(lf_obs_sink *s);
    void (*close)(lf_obs_sink *s);
    void *impl;
    const char *(*error)(lf_obs_sink *s);
};

typedef struct lf_obs lf_obs;
lf_status lf_obs_create(lf_obs **out);
/* The bus takes ownership of the sink (closed by lf_obs_free), also when it
 * fails: a sink it cannot hold (o NULL, no close function, more than 16
 * sinks: LF_ERR_INVALID_ARG / LF_ERR_RANGE) is closed at once. Sinks receive
 * records in the order they were added. */
lf_status lf_obs_add_sink(lf_obs *o, lf_obs_sink *sink);
void lf_obs_emit(lf_obs *o, const lf_obs_record *r);
void lf_obs_flush(lf_obs *o);
/* Flushes and closes every sink. NULL is a no-op. */
void lf_obs_free(lf_obs *o);

/* The message of a sink that failed and stopped, e.g. "event file
 * 'run/events.out.tfevents.1700000000.host': write failed: No space left on
 * device" — a file sink that cannot write keeps the training going and drops
 * further records. NULL while the sink works, for a sink without an error
 * slot, and for a NULL sink. The pointer lives as long as the sink. */
const char *lf_obs_sink_error(lf_obs_sink *s);

/* Seconds since the Unix epoch (wall clock, for records). */
double lf_obs_wall_time(void);

/* ---------------------------------------------------------------- sinks */

/* TensorBoard: writes dir/events.out.tfevents.<unix time>.<hostname>
 * (TFRecord framing with masked CRC-32C; first event file_version
 * "brain.Event:2"; then for each TRAIN or EVAL record one Event at its step
 * and wall_time whose Summary holds every scalar as a simple_value; EVENT
 * records are not written). job_name (may be NULL) becomes a sub-directory,
 * as DeepSpeed does; directories are created as needed. Flushes at most
 * every flush_secs seconds (<= 0: 5; sooner only if 256 KiB are pending) and
 * at flush/close. A write error stops the sink (lf_obs_sink_error).
 * Errors: LF_ERR_INVALID_ARG (NULL out or dir), LF_ERR_IO naming the path
 * (cannot create the directory or the file, a file in the way),
 * LF_ERR_NOMEM. */
lf_status lf_obs_tensorboard_open(lf_obs_sink **out, const char *dir, const char *job_name, double flush_secs);

/* Prometheus text exposition 0.0.4 on http://host:port/metrics through
 * libmicrohttpd (own thread). Gauges llmforge_step, llmforge_loss,
 * llmforge_lr, llmforge_grad_norm, llmforge_tokens_per_second, llmforge_mfu,
 * llmforge_loss_scale, llmforge_last_step_timestamp_seconds,
 * llmforge_memory_bytes{kind}, llmforge_step_phase_seconds{phase},
 * llmforge_eval{metric}; counters llmforge_tokens_total,
 * llmforge_steps_total, llmforge_skipped_steps_total,
 * llmforge_alerts_total{kind}; histogram llmforge_step_seconds; every
 * series labelled rank and job. GET /health answers "ok".
 * Errors: LF_ERR_INVALID_ARG (NULL out/opts), LF_ERR_RANGE (port, rank < 0),
 * LF_ERR_CONFIG (host not an IPv4/IPv6 literal or "localhost"), LF_ERR_IO
 * (cannot listen: the message names host:port and the reason). */
typedef struct lf_dash_opts lf_dash_opts;
typedef struct lf_prom_opts {
    const char *host; /* bind address; NULL = "127.0.0.1" */
    int port;         /* 1..65535; 0 = any free port (see lf_obs_prometheus_port) */
    int rank;         /* label */
    const char *job;  /* label; NULL = "llmforge" */
    /* optional: the same server also serves the live dashboard (GET /,
     * GET /api/run; see lf_obs_dashboard_open; its host, port and
     * port_fallback are not used here). Copied: it need not outlive the call. */
    const lf_dash_opts *dashboard;
} lf_prom_opts;
lf_status lf_obs_prometheus_open(lf_obs_sink **out, const lf_prom_opts *opts);
/* The port a sink from lf_obs_prometheus_open listens on; -1 if s is NULL
 * or not a Prometheus sink. */
int lf_obs_prometheus_port(const lf_obs_sink *s);

/* ---------------------------------------------------------------- live dashboard
 *
 * A page in the browser while a run trains: GET / answers one static HTML
 * page (hand-written JavaScript drawing SVG, embedded in the binary; it
 * loads nothing else), which polls GET /api/run:
 *
 *   {"format":"llmforge-run-api","version":1,
 *    "header":{"out_dir","config_hash","model":{...},"batch":{...},"train_iters","status",
 *              "step","first_step","first_time","last_time","now","eta_s","server_start",...},
 *    "since":S,"last_step":L,"more":bool,"count":N,"records":[...],"skipped_lines":K,"warnings":[...]}
 *
 * records are the lines of log.jsonl themselves, byte for byte, those whose
 * step is greater than since (?since=S, an integer; absent or -1: from the
 * beginning), in log order, whole steps only: a response ends where a step
 * ends, and holds at most max_response bytes of records (or one step's
 * records when those alone are more); more = true when records after
 * last_step exist, or log bytes not read yet (ask again with
 * since=last_step). A line that is not a
 * JSON object with a numeric "step" (a torn or corrupt line) is left out and
 * counted in skipped_lines, the first few named in warnings
 * ("log.jsonl:17: ..."); a line over 64 KiB is left out the same way.
 * A resumed run (the log's steps go back) is shown as TensorBoard shows
 * one: the records of the earlier attempt after the step the run resumed
 * from are superseded by the resumed run's (resume is exact: they repeat).
 *
 * The log file is read by the HTTP threads, at most 8 MiB of new bytes per
 * request, never by the training thread: emit only notes the step, its
 * time and the run's status under a mutex, so a client that never reads
 * (or a flood of them) cannot slow training. HTTP defences are those of the
 * Prometheus endpoint (2 workers, 32 connections with the oldest idle one
 * dropped, a 10 s request deadline). Only GET and HEAD: /, /api/run,
 * /health; other paths 404, other methods 405, a bad since 400.
 */
struct lf_dash_opts {
    const char *host;        /* lf_obs_dashboard_open: bind address; NULL = "127.0.0.1" */
    int port;                /* lf_obs_dashboard_open: 0..65535; 0 = any free port */
    int port_fallback;       /* lf_obs_dashboard_open: port taken -> any free port instead of LF_ERR_IO */
    const char *log_path;    /* required: the log.jsonl to show */
    const char *run_dir;     /* the run directory (config.resolved.json for the header); NULL: log_path's */
    const char *header_json; /* optional JSON object whose members are added to the header */
    size_t max_response;     /* bytes of records per /api/run answer; 0 = 256 KiB */
};

/* A sink serving the dashboard alone (no /metrics) on its own server.
 * Errors: LF_ERR_INVALID_ARG (NULL out/opts/log_path), LF_ERR_RANGE (port),
 * LF_ERR_CONFIG (host not an address; header_json not a JSON object),
 * LF_ERR_IO (cannot listen, and port_fallback is off or fails too),
 * LF_ERR_NOMEM. */
lf_status lf_obs_dashboard_open(lf_obs_sink **out, const lf_dash_opts *opts);
/* The port of a sink from lf_obs_dashboard_open, or of a Prometheus sink
 * serving the dashboard; -1 otherwise (NULL, another sink). */
int lf_obs_dashboard_port(const lf_obs_sink *s);

/* ---------------------------------------------------------------- run report
 *
 * One self-contained HTML file (inline SVG and CSS, no script, nothing
 * fetched) summarising a run directory: the charts of log.jsonl (loss,
 * evaluation metrics, learning rate, gradient norm, loss scale, tokens/s,
 * MFU, step-time breakdown, memory planned vs RSS; alerts, skipped steps,
 * resumes and checkpoints as markers), the run's header (model, batch,
 * config hash, world size, duration), checkpoints with their metrics and
 * the best marked (ckpt/step_* /trainer_state.json, the log's eval and
 * eval_suite records, and registry_json when given), evaluation tables, the
 * memory plan, hardware and kernels (the log's run_info record), the
 * dataset manifest (data.dataset/dataset.json) and the resolved
 * configuration. Every chart's <svg> carries data-chart="<name>",
 * data-points (points drawn) and data-markers (markers drawn, with
 * data-markers-<kind> for alert, skip, resume and checkpoint).
 *
 * Damaged input never fails the report: a line of log.jsonl that is not a
 * JSON object (a torn last line, a corrupt one) is left out with a warning
 * naming the file and line ("log.jsonl:41: not a JSON object (truncated?)"),
 * shown in the report and logged (lf_log, LF_LOG_WARN; the first 20, then a
 * count); an unreadable config, manifest or checkpoint state is a warning
 * too. Only a missing or unreadable run directory, a missing log.jsonl, or
 * an output that cannot be written fail (LF_ERR_NOT_FOUND / LF_ERR_IO naming
 * the path). Charts are downsampled to at most 1500 points per series
 * (minimum and maximum of each of 750 step buckets, so spikes stay).
 */
typedef struct lf_report_opts {
    const char *out_path;      /* NULL: <run_dir>/report.html (compare: "compare.html") */
    const char *svg_dir;       /* optional: also each chart as <svg_dir>/<name>.svg (created) */
    const char *registry_json; /* optional: lf_registry_list_json's array; entries under the run's ckpt/ are shown */
    const char *title;         /* optional; default: the run directory */
} lf_report_opts;

typedef struct lf_report_result {
    int warnings; /* how many */
    char first_warning[512];
    long records;        /* readable log records (those a resume superseded included) */
    int charts;          /* charts with data */
    char out_path[4096]; /* the file written */
} lf_report_result;

/* The report of one run directory. opts and result may be NULL. */
lf_status lf_report_write(const char *run_dir, const lf_report_opts *opts, lf_report_result *result);
/* Several runs overlaid (sweeps, ablations): train and validation loss of
 * every run on one chart each, a table of the runs and of the configuration
 * keys whose values differ. n in 1..16. */
lf_status lf_report_compare(const char *const *run_dirs, int n, const lf_report_opts *opts, lf_report_result *result);

#ifdef __cplusplus
}
#endif
#endif
