/*
 * llmforge report: a run directory as one self-contained HTML file.
 *
 *   llmforge report RUN_DIR [--out FILE.html] [--svg DIR] [--title T] [--registry FILE | --no-registry]
 *   llmforge report A B [C ...] --compare [--out FILE.html] [--svg DIR] [--title T]
 *
 * The library (lf_report_write, lf_report_compare in include/llmforge/obs.h)
 * reads the run and renders; this file parses options, looks the run's
 * checkpoints up in the model registry (their ids and tags) when a registry
 * file exists, and says where the report went. A damaged log.jsonl is not
 * an error: the report shows what can be read and the warnings (each naming
 * file and line) go to stderr. Exit status: 0 written (with or without
 * warnings); 1 nothing written (no such run directory, no log.jsonl, an
 * output that cannot be written); 2 usage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "llmforge/obs.h"
#include "llmforge/registry.h"
#include "cli_util.h"
#include "commands.h"

#define REPORT_MAX_DIRS 16

static void report_usage(FILE *f) {
    fprintf(
        f,
        "usage: llmforge report RUN_DIR [--out FILE.html] [--svg DIR] [--title T] [--registry FILE | --no-registry]\n"
        "       llmforge report A B [C ...] --compare [--out FILE.html] [--svg DIR] [--title T]\n"
        "  One self-contained HTML file (inline SVG, no script, nothing fetched): the charts of log.jsonl\n"
        "  (loss, evaluation metrics, lr, gradient norm, loss scale, tokens/s, MFU, step-time breakdown,\n"
        "  memory planned vs RSS; alerts, skipped steps, resumes and checkpoints as markers), the resolved\n"
        "  config, the dataset manifest, checkpoints with their metrics and the best marked, evaluation\n"
        "  tables, the memory plan, hardware and kernels.\n"
        "  --out FILE     default RUN_DIR/report.html (--compare: compare.html)\n"
        "  --svg DIR      also each chart as DIR/<chart>.svg\n"
        "  --registry F   the model registry to take checkpoint ids and tags from (default: $LLMFORGE_REGISTRY,\n"
        "                 else ~/.local/share/llmforge/registry.db, when it exists); --no-registry: none\n"
        "  --compare      overlay the training and validation loss of several runs, and list the\n"
        "                 configuration keys that differ (sweeps, ablations); at most %d runs\n"
        "  Exit 0 when written (a damaged log.jsonl gives warnings naming the line), 1 when not, 2 usage.\n",
        REPORT_MAX_DIRS);
}

/* The registry's checkpoint list, or NULL (no registry file, or unusable:
 * then a warning only when the file was named explicitly). */
static char *registry_list(const char *configured) {
    char path[4096];
    if (lf_registry_path_resolve(configured, path, sizeof path) != LF_OK) return NULL;
    struct stat sb;
    if (stat(path, &sb) != 0) {
        if (configured) fprintf(stderr, "llmforge: report: warning: registry '%s' does not exist\n", path);
        return NULL;
    }
    lf_registry *reg = NULL;
    char *json = NULL;
    if (lf_registry_open(&reg, path, 0) != LF_OK || lf_registry_list_json(reg, NULL, &json) != LF_OK) {
        fprintf(stderr, "llmforge: report: warning: the model registry is not used: %s\n", lf_last_error());
        json = NULL;
    }
    lf_registry_close(reg);
    return json;
}

int cmd_report(int argc, char **argv) {
    const char *dirs[REPORT_MAX_DIRS], *out = NULL, *svg = NULL, *title = NULL, *registry = NULL;
    int n = 0, compare = 0, no_registry = 0;
    for (int i = 0; i < argc; i++) {
        int missing = 0;
        const char *v;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            report_usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--compare")) {
            compare = 1;
        } else if (!strcmp(argv[i], "--no-registry")) {
            no_registry = 1;
        } else if ((v = opt_value(argc, argv, &i, "--out", &missing))) {
            out = v;
        } else if ((v = opt_value(argc, argv, &i, "--svg", &missing))) {
            svg = v;
        } else if ((v = opt_value(argc, argv, &i, "--title", &missing))) {
            title = v;
        } else if ((v = opt_value(argc, argv, &i, "--registry", &missing))) {
            registry = v;
        } else if (missing) {
            return 2;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "llmforge report: unknown option '%s' (see --help)\n", argv[i]);
            return 2;
        } else {
            if (n == REPORT_MAX_DIRS) {
                fprintf(stderr, "llmforge report: at most %d run directories\n", REPORT_MAX_DIRS);
                return 2;
            }
            dirs[n++] = argv[i];
        }
    }
    if (n == 0) {
        fprintf(stderr, "llmforge report: a run directory is required\n");
        report_usage(stderr);
        return 2;
    }
    if (n > 1 && !compare) {
        fprintf(stderr, "llmforge report: %d run directories given: add --compare to overlay them\n", n);
        return 2;
    }
    if (registry && no_registry) {
        fprintf(stderr, "llmforge report: --registry and --no-registry exclude each other\n");
        return 2;
    }
    lf_report_opts o = {.out_path = out, .svg_dir = svg, .title = title};
    lf_report_result res;
    lf_status st;
    char *reg_json = NULL;
    if (compare) {
        st = lf_report_compare(dirs, n, &o, &res);
    } else {
        if (!no_registry) reg_json = registry_list(registry);
        o.registry_json = reg_json;
        st = lf_report_write(dirs[0], &o, &res);
    }
    lf_free(reg_json);
    if (st != LF_OK) {
        die_status(st, "report");
        return 1;
    }
    printf("report: %s (%ld records, %d charts with data%s", res.out_path, res.records, res.charts,
           svg ? ", each also as an SVG in " : "");
    if (svg) printf("%s", svg);
    if (res.warnings)
        printf("; %d warning%s, the first: %s", res.warnings, res.warnings == 1 ? "" : "s", res.first_warning);
    printf(")\n");
    return 0;
}
