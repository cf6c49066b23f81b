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
 * time/comm_ms, time/optimizer_ms, time/checkpoint_ms, memory/rss_bytes,
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
    const char *tag;  /* "train/loss" */
    double value;
} lf_obs_scalar;

typedef struct lf_obs_record {
    lf_obs_kind kind;
    long step;                    /* optimizer steps completed */
    double wall_time;             /* seconds since the Unix epoch */
    const lf_obs_scalar *scalars; /* n_scalars values (TRAIN, EVAL; may be 0 for EVENT) */
    int n_scalars;
    const char *event;            /* EVENT: its name; else NULL */
    const char *alert_kind;       /* EVENT "alert": nan | loss_spike | stall | throughput_drop */
    const char *json;             /* optional JSON object with details (resolved config, paths), or NULL */
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
typedef struct lf_prom_opts {
    const char *host;   /* bind address; NULL = "127.0.0.1" */
    int port;           /* 1..65535; 0 = any free port (see lf_obs_prometheus_port) */
    int rank;           /* label */
    const char *job;    /* label; NULL = "llmforge" */
} lf_prom_opts;
lf_status lf_obs_prometheus_open(lf_obs_sink **out, const lf_prom_opts *opts);
/* The port a sink from lf_obs_prometheus_open listens on; -1 if s is NULL
 * or not a Prometheus sink. */
int lf_obs_prometheus_port(const lf_obs_sink *s);

#ifdef __cplusplus
}
#endif
#endif
