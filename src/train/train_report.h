/*
 * The trainer's side of the live dashboard and the run report
 * (train_report.c): the few calls the trainer (trainer_*.c) makes, kept out of it so the
 * training loop stays about training. Private to src/train.
 *
 *   lf__trep_plan_json   at create, once the memory plan is made: the plan
 *                        as the run_info record carries it (malloc'd);
 *   lf__trep_dash_opts   the dashboard's options for this run (log.jsonl,
 *                        header members), for the Prometheus server and
 *                        the dashboard's own one alike;
 *   lf__trep_dashboard   on rank 0 with the sinks: the dashboard's own server
 *                        when monitor.dashboard.port is set (and is not the
 *                        Prometheus port, which serves it already); logs
 *                        the URL; a failure follows monitor.required;
 *   lf__trep_run_info    at the start of lf_trainer_run: the run_info
 *                        record's JSON (hardware, kernels, code version,
 *                        memory plan), malloc'd;
 *   lf__trep_report      at the end (rank 0, monitor.report): report.html;
 *                        a failure is a warning, never the run's.
 */
#ifndef LF_TRAIN_REPORT_H
#define LF_TRAIN_REPORT_H

#include <stddef.h>
#include "llmforge/obs.h"
#include "llmforge/plan.h"
#include "llmforge/train.h"

struct lf_backend;

char *lf__trep_plan_json(const lf_mem_plan *plan);

typedef struct lf__trep_dash {
    lf_dash_opts opts;
    char log_path[LF_PATH_MAX + 16];
    char header[256];
} lf__trep_dash;
void lf__trep_dash_opts(lf__trep_dash *d, const lf_train_config *cfg, size_t num_params, int world);

lf_status lf__trep_dashboard(lf_obs *obs, const lf_train_config *cfg, lf__trep_dash *d);

char *lf__trep_run_info(const char *plan_json, const lf_train_config *cfg, int world, double peak_flops,
                        const struct lf_backend *be);

void lf__trep_report(const lf_train_config *cfg);

#endif
