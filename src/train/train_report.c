/*
 * The trainer's side of the live dashboard and the run report: options of
 * the dashboard for this run, its own server, the run_info record (what a
 * report needs that no other record says: the hardware, the kernels, the
 * code version, the memory plan item by item) and report.html at the end.
 * train_report.h lists the calls and when the trainer (trainer_*.c) makes them.
 *
 * Invariants:
 *   - only rank 0 calls any of this (it alone writes out_dir and emits);
 *   - the run never fails because of the report: a report that cannot be
 *     written is one warning; the dashboard's server is a monitoring sink
 *     like Prometheus (monitor.required decides), except that a taken port
 *     is not a failure: a free one is chosen and the URL logged, because a
 *     person reads the URL (`make run` on a machine where the default port
 *     is busy keeps working);
 *   - run_info is emitted once per process (fresh or resumed run), after
 *     the start or resume record, so log.jsonl still begins with one of
 *     those.
 */
#include "train_report.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "llmforge/backend.h"
#include "llmforge/backend_cpu.h"
#include "llmforge/registry.h"

char *lf__trep_plan_json(const lf_mem_plan *p) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddNumberToObject(o, "total_bytes", (double)p->total);
    cJSON *items = cJSON_AddArrayToObject(o, "items");
    for (int i = 0; i < p->n_items && items; i++) {
        cJSON *it = cJSON_CreateObject();
        if (!it) break;
        cJSON_AddStringToObject(it, "name", p->items[i].name);
        cJSON_AddNumberToObject(it, "bytes", (double)p->items[i].bytes);
        cJSON_AddItemToArray(items, it);
    }
    cJSON_AddNumberToObject(o, "parameters", (double)p->params);
    cJSON_AddNumberToObject(o, "parameter_bytes", (double)p->params_bytes);
    cJSON_AddNumberToObject(o, "gradient_bytes", (double)p->grads_bytes);
    cJSON_AddNumberToObject(o, "optimizer_bytes", (double)p->optim_bytes);
    cJSON_AddNumberToObject(o, "activation_bytes", (double)p->act.total);
    cJSON_AddStringToObject(o, "recompute", lf_recompute_name(p->policy));
    cJSON_AddStringToObject(o, "activation_dtype", lf_act_dtype_name(p->act_dtype));
    cJSON_AddNumberToObject(o, "world_size", p->world);
    cJSON_AddNumberToObject(o, "rank", p->rank);
    cJSON_AddNumberToObject(o, "zero_stage", p->zero_stage);
    cJSON_AddNumberToObject(o, "limit_bytes", (double)p->limit);
    cJSON_AddStringToObject(o, "limit_from",
                            p->limit_from_config ? "memory.limit_bytes"
                            : p->limit           ? "MemAvailable"
                                                 : "none");
    size_t need = lf_mem_plan_format(p, NULL, 0) + 1;
    char *text = malloc(need);
    if (text) {
        lf_mem_plan_format(p, text, need);
        cJSON_AddStringToObject(o, "text", text);
        free(text);
    }
    char *json = lf_json_print(o, 0);
    cJSON_Delete(o);
    if (!json) return NULL;
    char *out = strdup(json); /* plain malloc for the caller */
    cJSON_free(json);
    return out;
}

void lf__trep_dash_opts(lf__trep_dash *d, const lf_train_config *cfg, size_t num_params, int world) {
    memset(d, 0, sizeof *d);
    snprintf(d->log_path, sizeof d->log_path, "%s/log.jsonl", cfg->out_dir);
    snprintf(d->header, sizeof d->header, "{\"num_params\":%zu,\"world_size\":%d,\"rank\":0}", num_params, world);
    d->opts.host = cfg->dash_host;
    d->opts.port = cfg->dash_port;
    d->opts.port_fallback = 1;
    d->opts.log_path = d->log_path;
    d->opts.run_dir = cfg->out_dir;
    d->opts.header_json = d->header;
}

lf_status lf__trep_dashboard(lf_obs *obs, const lf_train_config *cfg, lf__trep_dash *d) {
    if (cfg->dash_port <= 0 || cfg->dash_port == cfg->prom_port) return LF_OK; /* off, or Prometheus serves it */
    lf_obs_sink *sink = NULL;
    lf_status st = lf_obs_dashboard_open(&sink, &d->opts);
    int port = st == LF_OK ? lf_obs_dashboard_port(sink) : -1;
    if (st == LF_OK) st = lf_obs_add_sink(obs, sink);
    if (st != LF_OK) {
        lf_error_prefix("monitor.dashboard");
        if (cfg->monitor_required) return st;
        lf_log(LF_LOG_WARN, "%s; training goes on without it (monitor.required is false)", lf_last_error());
        return LF_OK;
    }
    if (port != cfg->dash_port)
        lf_log(LF_LOG_INFO, "dashboard: port %d is taken; serving on port %d instead", cfg->dash_port, port);
    const char *host = cfg->dash_host[0] ? cfg->dash_host : "127.0.0.1";
    int v6 = strchr(host, ':') != NULL && host[0] != '[';
    lf_log(LF_LOG_INFO, "dashboard: http://%s%s%s:%d/", v6 ? "[" : "", host, v6 ? "]" : "", port);
    return LF_OK;
}

/* "model name" of /proc/cpuinfo (x86), or "" */
static void cpu_model(char *out, size_t cap) {
    out[0] = '\0';
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        const char *v = strchr(line, ':');
        if (!v) break;
        v++;
        while (*v == ' ' || *v == '\t') v++;
        snprintf(out, cap, "%s", v);
        out[strcspn(out, "\n")] = '\0';
        break;
    }
    fclose(f);
}

char *lf__trep_run_info(const char *plan_json, const lf_train_config *cfg, int world, double peak_flops,
                        const struct lf_backend *be) {
    cJSON *o = cJSON_CreateObject(), *hw = o ? cJSON_AddObjectToObject(o, "hardware") : NULL;
    if (!hw) {
        cJSON_Delete(o);
        return NULL;
    }
    char host[256] = "", cpu[256];
    if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
    cpu_model(cpu, sizeof cpu);
    cJSON_AddStringToObject(hw, "host", host);
    cJSON_AddStringToObject(hw, "cpu", cpu[0] ? cpu : "unknown");
    lf_cpu_threads ct;
    lf_cpu_threads_detect(&ct);
    cJSON_AddNumberToObject(hw, "cores", ct.online);
    cJSON_AddNumberToObject(hw, "cpus_granted", ct.threads); /* affinity mask, cgroup CPU limit */
    cJSON_AddStringToObject(hw, "cpus_granted_by", lf_threads_source_name(ct.source));
    cJSON_AddNumberToObject(hw, "threads", lf_backend_cpu_threads());
    cJSON_AddStringToObject(hw, "backend", be ? lf_backend_name(be) : "?");
    if (be && *lf_backend_device_name(be)) cJSON_AddStringToObject(hw, "device", lf_backend_device_name(be));
    cJSON_AddStringToObject(hw, "cpu_isa", lf_backend_cpu_isa());
    cJSON_AddStringToObject(hw, "cpu_isa_source", lf_backend_cpu_isa_source());
    cJSON_AddStringToObject(hw, "fp32_kernel", lf_backend_cpu_fp32_kernel());
    if (cfg->bf16) cJSON_AddStringToObject(hw, "bf16_kernel", lf_backend_cpu_bf16_kernel());
    if (lf_backend_cpu_kernel_warning()) cJSON_AddStringToObject(hw, "kernel_warning", lf_backend_cpu_kernel_warning());
    if (peak_flops > 0) cJSON_AddNumberToObject(hw, "peak_gflops", peak_flops / 1e9);
    cJSON_AddStringToObject(hw, "peak_from",
                            cfg->peak_gflops > 0 ? "monitor.peak_gflops"
                            : peak_flops > 0     ? "measured FMA rate"
                                                 : "none");
    cJSON_AddNumberToObject(hw, "world_size", world);
    cJSON_AddStringToObject(hw, "comm", cfg->comm_backend);
    cJSON_AddStringToObject(hw, "code_version", lf_registry_code_version());
    cJSON *plan = plan_json ? cJSON_Parse(plan_json) : NULL;
    if (plan) cJSON_AddItemToObject(o, "memory_plan", plan);
    char *json = lf_json_print(o, 0);
    cJSON_Delete(o);
    if (!json) return NULL;
    char *out = strdup(json);
    cJSON_free(json);
    return out;
}

void lf__trep_report(const lf_train_config *cfg) {
    if (!cfg->report_enabled) return;
    char *reg_json = NULL;
    if (cfg->registry_enabled) { /* the checkpoints' registry ids and tags, when the registry is there */
        char path[LF_PATH_MAX + 64];
        lf_registry *reg = NULL;
        if (lf_registry_path_resolve(cfg->registry_path, path, sizeof path) == LF_OK &&
            lf_registry_open(&reg, path, 0) == LF_OK) {
            if (lf_registry_list_json(reg, NULL, &reg_json) != LF_OK) reg_json = NULL;
        }
        lf_registry_close(reg);
    }
    lf_report_opts ro = {.registry_json = reg_json};
    lf_report_result res;
    lf_status st = lf_report_write(cfg->out_dir, &ro, &res);
    lf_free(reg_json);
    if (st != LF_OK)
        lf_log(LF_LOG_WARN, "%s (the run itself is unaffected; `llmforge report %s` tries again)", lf_last_error(),
               cfg->out_dir);
    else lf_log(LF_LOG_INFO, "report: %s", res.out_path);
}
