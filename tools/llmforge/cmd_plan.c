/*
 * `llmforge plan CONFIG [--key=value ...] [--threads N]`: the memory plan of a
 * training run (include/llmforge/plan.h) without training: every consumer,
 * the total against memory.limit_bytes or the available memory, activation
 * bytes under each recompute policy, and — when it does not fit — the advice
 * the trainer would stop with. Exit 0 when it fits, 1 when it does not, 2 on
 * usage or configuration errors.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmforge/backend.h"
#include "llmforge/data.h"
#include "llmforge/plan.h"
#include "llmforge/train.h"
#include "commands.h"
#include "cli_util.h"

int cmd_plan(int argc, char **argv) {
    const char *config = NULL;
    long threads = 0;
    int rc = 2;
    const char **ov = calloc((size_t)argc + 1, sizeof *ov);
    int n_ov = 0;
    if (!ov) return 1;
    for (int i = 0; i < argc; i++) {
        int missing = 0;
        const char *v;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: llmforge plan [CONFIG.json] [--key.path=value ...] [--threads N]\n"
                   "  The memory a training run needs, item by item, before anything is allocated; the\n"
                   "  vocabulary comes from data.dataset (or model.vocab_size when the dataset is absent).\n"
                   "  Exit 0 when it fits memory.limit_bytes (or the available memory), 1 when it does not.\n");
            rc = 0;
            goto done;
        } else if ((v = opt_value(argc, argv, &i, "--threads", &missing))) {
            if (parse_long("--threads", v, 0, 4096, &threads)) goto done;
        } else if (missing) {
            goto done;
        } else if (!strncmp(argv[i], "--", 2) && strchr(argv[i], '=')) {
            ov[n_ov++] = argv[i] + 2;
        } else if (argv[i][0] != '-' && !config) {
            config = argv[i];
        } else {
            fprintf(stderr, "llmforge plan: unknown argument '%s' (see --help)\n", argv[i]);
            goto done;
        }
    }
    lf_train_config cfg;
    lf_status st = lf_train_config_load(&cfg, config, n_ov, ov);
    if (st != LF_OK) {
        fprintf(stderr, "llmforge: plan: config: %s\n", lf_last_error());
        goto done;
    }
    lf_backend_cpu_set_threads((int)threads);
    lf_gpt2_config m = cfg.model;
    lf_dataset *ds = NULL;
    if (lf_dataset_open(&ds, cfg.dataset) == LF_OK) {
        int V = lf_dataset_vocab_size(ds);
        lf_dataset_close(ds);
        if (m.vocab_size > V) m.padded_vocab_size = m.vocab_size;
        m.vocab_size = V;
    } else if (m.vocab_size <= 0) {
        fprintf(stderr, "llmforge: plan: %s (set model.vocab_size to plan without the dataset)\n", lf_last_error());
        goto done;
    }
    int B = cfg.micro_batch, replicas = lf_backend_cpu_threads();
    if (replicas > B) replicas = B;
    lf_mem_plan p;
    st = lf_mem_plan_make(&p, &cfg, &m, replicas, 0);
    if (st != LF_OK) {
        fprintf(stderr, "llmforge: plan: %s\n", lf_last_error());
        goto done;
    }
    size_t need = lf_mem_plan_format(&p, NULL, 0) + 1;
    char *text = malloc(need);
    if (!text) goto done;
    lf_mem_plan_format(&p, text, need);
    fputs(text, stdout);
    free(text);
    st = lf_mem_plan_check(&p, &cfg, &m);
    if (st != LF_OK) {
        printf("does not fit: %s\n", lf_last_error());
        rc = 1;
        goto done;
    }
    rc = 0;
done:
    free(ov);
    return rc;
}
