/*
 * What the trainer tells people and tools: the record bus with its sinks
 * (log.jsonl, TensorBoard, Prometheus and the dashboard, and the caller's),
 * events and alerts, and the per-step training record.
 *
 * Invariants:
 *  - Everything a person or a tool watches goes out as records on one bus
 *    (obs.h): log.jsonl always, TensorBoard and Prometheus when configured,
 *    and whatever sinks the caller adds (the CLI's console). Emission is
 *    serialised by obs_mu because the stall watchdog emits from its thread.
 *  - Records go out on rank 0 only; every rank computes the same reduced
 *    values.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "llmforge/train.h"
#include "trainer_impl.h"

/* Records go out on rank 0 only: every rank computes the same reduced
 * values, one of them reports them. */
void lf__trainer_emit(lf_trainer *t, lf_obs_record *r) {
    if (!t->obs || t->rank != 0) return;
    r->wall_time = lf_obs_wall_time();
    pthread_mutex_lock(&t->obs_mu);
    lf_obs_emit(t->obs, r);
    pthread_mutex_unlock(&t->obs_mu);
}

void lf__trainer_event(lf_trainer *t, const char *name, const char *alert_kind, const char *json) {
    lf_obs_record r = {.kind = LF_OBS_EVENT, .step = t->step, .event = name, .alert_kind = alert_kind, .json = json};
    lf__trainer_emit(t, &r);
}

/* JSON string body of s (quotes, backslashes and control characters escaped). */
void lf__trainer_json_escape(char *out, size_t cap, const char *s) {
    size_t at = 0;
    for (; *s && at + 7 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            out[at++] = '\\';
            out[at++] = (char)c;
        } else if (c < 0x20) {
            at += (size_t)snprintf(out + at, cap - at, "\\u%04x", c);
        } else {
            out[at++] = (char)c;
        }
    }
    out[at] = 0;
}

void lf__trainer_alert(lf_trainer *t, const char *kind, const char *action, const char *msg) {
    char esc[1024], json[1400];
    lf__trainer_json_escape(esc, sizeof esc, msg);
    snprintf(json, sizeof json, "{\"kind\":\"%s\",\"action\":\"%s\",\"message\":\"%s\"}", kind, action, esc);
    if (t->rank == 0) lf_log(LF_LOG_WARN, "alert %s (%s): %s", kind, action, msg); /* decided alike on every rank */
    lf__trainer_event(t, "alert", kind, json);
}

/* Resident set size from /proc/self/statm (0 where unavailable). */
static double rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    long pages = 0, resident = 0;
    int got = fscanf(f, "%ld %ld", &pages, &resident);
    fclose(f);
    return got == 2 ? (double)resident * (double)sysconf(_SC_PAGESIZE) : 0;
}

/* Sinks the configuration asks for. log.jsonl is always there; a monitoring
 * sink that cannot start stops the run unless monitor.required is false. */
lf_status lf__trainer_open_sinks(lf_trainer *t) {
    char path[LF_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/log.jsonl", t->cfg.out_dir);
    lf_obs_sink *sink = NULL;
    lf_status st = lf__jsonl_sink_open(&sink, path, t->opts.resume);
    if (st == LF_OK) st = lf_obs_add_sink(t->obs, sink);
    if (st != LF_OK) return st;
    if (t->cfg.tb_enabled) {
        const char *dir = t->cfg.tb_output_path;
        if (!dir[0]) {
            snprintf(path, sizeof path, "%s/tensorboard", t->cfg.out_dir);
            dir = path;
        }
        st = lf_obs_tensorboard_open(&sink, dir, t->cfg.tb_job_name[0] ? t->cfg.tb_job_name : NULL, 5.0);
        if (st == LF_OK) st = lf_obs_add_sink(t->obs, sink);
        if (st != LF_OK) {
            lf_error_prefix("tensorboard");
            if (t->cfg.monitor_required) return st;
            lf_log(LF_LOG_WARN, "%s; training goes on without it (monitor.required is false)", lf_last_error());
        }
    }
    lf__trep_dash dash; /* the live dashboard: on the Prometheus port, and on its own (train_report.c) */
    lf__trep_dash_opts(&dash, &t->cfg, lf_model_num_params(t->model), t->world);
    if (t->cfg.prom_port > 0) {
        lf_prom_opts po = {.host = t->cfg.prom_host,
                           .port = t->cfg.prom_port,
                           .rank = 0,
                           .job = NULL,
                           .dashboard = &dash.opts};
        st = lf_obs_prometheus_open(&sink, &po);
        if (st == LF_OK) st = lf_obs_add_sink(t->obs, sink);
        if (st != LF_OK) {
            lf_error_prefix("monitor.prometheus");
            if (t->cfg.monitor_required) return st;
            lf_log(LF_LOG_WARN, "%s; training goes on without it (monitor.required is false)", lf_last_error());
        } else {
            lf_log(LF_LOG_INFO, "serving metrics on http://%s:%d/metrics (the dashboard on /)", t->cfg.prom_host,
                   t->cfg.prom_port);
        }
    }
    st = lf__trep_dashboard(t->obs, &t->cfg, &dash);
    if (st != LF_OK) return st;
    /* MFU needs a peak: the configured one, or the FMA rate measured once when
     * a monitoring sink will show it */
    if (t->cfg.peak_gflops > 0) t->peak_flops = t->cfg.peak_gflops * 1e9;
    else if (t->cfg.tb_enabled || t->cfg.prom_port > 0 || t->cfg.dash_port > 0)
        t->peak_flops = lf_probe_peak_flops(0.25);
    return LF_OK;
}

/* The "start" event (a fresh run: the configuration) and, on rank 0, the
 * "run_info" event: hardware, kernels, memory plan (train_report.c). */
void lf__trainer_emit_start(lf_trainer *t) {
    if (t->step == 0) {
        char *cfgjson = lf_train_config_to_json(&t->cfg);
        cJSON *c = cfgjson ? cJSON_Parse(cfgjson) : NULL;
        char *flat = c ? cJSON_PrintUnformatted(c) : NULL;
        char *json = flat ? malloc(strlen(flat) + 96) : NULL;
        if (json) {
            sprintf(json, "{\"num_params\":%zu,\"config\":%s}", lf_model_num_params(t->model), flat);
            lf__trainer_event(t, "start", NULL, json);
        }
        free(json);
        free(flat);
        cJSON_Delete(c);
        lf_free(cfgjson);
    }
    if (t->rank == 0) { /* hardware, kernels, memory plan: what the report shows of this process */
        char *info = lf__trep_run_info(t->plan_json, &t->cfg, t->world, t->peak_flops, t->be);
        if (info) lf__trainer_event(t, "run_info", NULL, info);
        free(info);
    }
}

/* The train record of step t->step, which took dt seconds: throughput of
 * the whole job (the global batch), MFU against every rank's peak, memory,
 * and with wall_clock_breakdown the phases. */
void lf__trainer_emit_step(lf_trainer *t, const step_result *sr, double dt) {
    const int B = t->cfg.micro_batch, T = t->cfg.model.block_size, A = t->cfg.grad_accum;
    const double tokens_per_step = (double)A * B * T * t->world; /* the global batch: throughput of the whole job */
    double tps = tokens_per_step / dt;
    lf_obs_scalar sc[27];
    char dpo_names[6][160];
    int n = 0;
    sc[n++] = (lf_obs_scalar){"train/loss", sr->loss};
    sc[n++] = (lf_obs_scalar){"train/lr", sr->lr};
    sc[n++] = (lf_obs_scalar){"train/grad_norm", sr->norm};
    sc[n++] = (lf_obs_scalar){"train/tokens_per_sec", tps};
    sc[n++] = (lf_obs_scalar){"time/step_ms", dt * 1e3};
    sc[n++] = (lf_obs_scalar){"train/samples_per_sec", (double)A * B * t->world / dt};
    sc[n++] = (lf_obs_scalar){"train/tokens", tokens_per_step};
    sc[n++] = (lf_obs_scalar){"train/epoch", t->dpo ? lf__dpo_epoch(t) : lf_loader_epoch(t->loader)};
    if (sr->has_dpo) n += lf__dpo_metrics(&sr->dpo, "train", sc + n, dpo_names, 6);
    if (t->pos) /* data.packing: the example tokens of the step (tokens_per_sec counts the padding too) */
        sc[n++] = (lf_obs_scalar){"train/real_tokens_per_sec", (double)t->real_tokens / dt};
    if (t->peak_flops > 0) /* against every rank's peak (rank 0's measurement, times the ranks) */
        sc[n++] = (lf_obs_scalar){"train/mfu", t->flops_per_token * tps / (t->peak_flops * t->world)};
    if (sr->skipped) sc[n++] = (lf_obs_scalar){"train/skipped", 1};
    if (t->cfg.fp16) sc[n++] = (lf_obs_scalar){"train/loss_scale", sr->loss_scale};
    sc[n++] = (lf_obs_scalar){"memory/rss_bytes", rss_bytes()};
    sc[n++] = (lf_obs_scalar){"memory/planned_bytes", (double)t->planned_bytes};
    if (t->cfg.wall_clock_breakdown) {
        sc[n++] = (lf_obs_scalar){"time/data_ms", sr->data_ms};
        sc[n++] = (lf_obs_scalar){"time/forward_ms", sr->forward_ms};
        sc[n++] = (lf_obs_scalar){"time/backward_ms", sr->backward_ms};
        sc[n++] = (lf_obs_scalar){"time/optimizer_ms", sr->optimizer_ms};
        if (t->world > 1) { /* issued: exposed + hidden; exposed: the step waited for it */
            sc[n++] = (lf_obs_scalar){"time/comm_ms", sr->comm_ms + sr->comm_hidden_ms};
            sc[n++] = (lf_obs_scalar){"time/comm_exposed_ms", sr->comm_ms};
        }
    }
    lf_obs_record r = {.kind = LF_OBS_TRAIN, .step = t->step, .scalars = sc, .n_scalars = n};
    lf__trainer_emit(t, &r);
}

/* The "end" event: ok, or the status and t->errmsg. */
void lf__trainer_emit_end(lf_trainer *t, lf_status st) {
    if (st != LF_OK) {
        char esc[1100], json[1200];
        lf__trainer_json_escape(esc, sizeof esc, t->errmsg);
        snprintf(json, sizeof json, "{\"status\":\"%s\",\"message\":\"%s\"}",
                 st == LF_ERR_PREEMPTED ? "preempted" : "error", esc);
        lf__trainer_event(t, "end", NULL, json);
    } else {
        lf__trainer_event(t, "end", NULL, "{\"status\":\"ok\"}");
    }
}
