/*
 * `llmforge plan CONFIG [--key=value ...] [--threads N]`: the memory plan of a
 * training run (include/llmforge/plan.h) without training: every consumer,
 * the total against memory.limit_bytes or the available memory (on a device
 * backend, the device part against the device's free memory, which opening
 * the backend asks), activation bytes under each recompute policy, and —
 * when it does not fit — the advice the trainer would stop with. Exit 0 when it fits, 1 when it does not, 2 on
 * usage or configuration errors.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmforge/backend.h"
#include "llmforge/data.h"
#include "llmforge/plan.h"
#include "llmforge/train.h"
#include "llmforge/backend_cpu.h"
#include "commands.h"
#include "cli_util.h"

int cmd_plan(int argc, char **argv) {
    const char *config = NULL;
    long threads = 0, world = 0, rank = 0;
    int json = 0;
    int rc = 2;
    const char **ov = calloc((size_t)argc + 24, sizeof *ov);
    const char *preset = NULL;
    char preset_ov[1024];
    int n_ov = 0;
    lf_backend *be = NULL;
    if (!ov) return 1;
    for (int i = 0; i < argc; i++) {
        int missing = 0;
        const char *v;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: llmforge plan [CONFIG.json] [--preset NAME] [--key.path=value ...] [--threads N]\n"
                   "                     [--world-size W] [--rank R] [--json]\n"
                   "  --preset NAME takes the model section from a named shape (%s);\n"
                   "  without CONFIG the rest is the defaults.\n"
                   "  The memory a training run needs per rank, item by item, before anything is allocated;\n"
                   "  the vocabulary comes from data.dataset (or model.vocab_size when the dataset is absent).\n"
                   "  --world-size W plans for W ranks (default: the launcher's, else 1): the batch identity\n"
                   "  and the communication buffers follow it; with zero_optimization.stage 1-3 parameters,\n"
                   "  gradients and AdamW moments are those of one rank's shard (--rank R, default 0: the\n"
                   "  largest). --json prints one JSON object instead.\n"
                   "  On a device backend (backend cuda, or --backend cuda) the device part (parameters,\n"
                   "  gradients, moments, activations) is held against the GPU's free memory (cudaMemGetInfo)\n"
                   "  and the host part (staging copies, batches) against the host's.\n"
                   "  Exit 0 when it fits memory.limit_bytes (or the available memory), 1 when it does not.\n",
                   lf_model_preset_names());
            rc = 0;
            goto done;
        } else if ((v = opt_value(argc, argv, &i, "--preset", &missing))) {
            preset = v;
        } else if ((v = opt_value(argc, argv, &i, "--threads", &missing))) {
            if (parse_long("--threads", v, 0, 4096, &threads)) goto done;
        } else if ((v = opt_value(argc, argv, &i, "--world-size", &missing))) {
            if (parse_long("--world-size", v, 1, 1 << 20, &world)) goto done;
        } else if ((v = opt_value(argc, argv, &i, "--rank", &missing))) {
            if (parse_long("--rank", v, 0, (1 << 20) - 1, &rank)) goto done;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
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
    if (preset) { /* the preset's model keys first, so --model.* overrides still apply */
        lf_model_config pm;
        if (lf_model_preset(preset, &pm) != LF_OK) {
            fprintf(stderr, "llmforge plan: %s\n", lf_last_error());
            goto done;
        }
        lf_model_config_overrides(&pm, preset_ov, sizeof preset_ov);
        const char *pre[24];
        int n_pre = 0;
        for (char *line = preset_ov, *nl; line && n_pre < 22; line = nl) {
            nl = strchr(line, '\n');
            if (nl) *nl++ = 0;
            pre[n_pre++] = line;
        }
        if (!config) pre[n_pre++] = "data.dataset=(none: --preset)";
        memmove(ov + n_pre, ov, sizeof *ov * (size_t)n_ov);
        memcpy(ov, pre, sizeof *ov * (size_t)n_pre);
        n_ov += n_pre;
    }
    if (cli_backend_override()) ov[n_ov++] = cli_backend_override(); /* --backend: wins over the file */
    lf_train_config cfg;
    lf_status st = lf_train_config_load_world(&cfg, config, (int)world, n_ov, ov);
    if (st != LF_OK) {
        fprintf(stderr, "llmforge: plan: config: %s\n", lf_last_error());
        goto done;
    }
    if (rank >= cfg.world_size) {
        fprintf(stderr, "llmforge: plan: --rank %ld is not below the world size %d\n", rank, cfg.world_size);
        goto done;
    }
    lf_cpu_threads ct; /* the replicas train will run: --threads, OMP_NUM_THREADS, else the CPUs granted */
    lf_cpu_threads_choose(&ct, (int)threads);
    lf_backend_cpu_set_threads(ct.source == LF_THREADS_SOURCE_ENV ? 0 : ct.threads);
    lf_model_config m = cfg.model;
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
    /* the run's backend: its replicas and, on a device, the device's free memory */
    const char *bname = NULL;
    char no_device[600] = "";
    if (lf_backend_select(cfg.backend, &bname) != LF_OK) {
        fprintf(stderr, "llmforge: plan: key 'backend': %s\n", lf_last_error());
        goto done;
    }
    lf_mem_plan p;
    if (lf_backend_open(bname, &be) == LF_OK) {
        st = lf_mem_plan_make_backend(&p, &cfg, &m, be, (int)rank);
    } else {
        /* no device answers (no GPU here): the plan still splits device and host memory, unchecked */
        snprintf(no_device, sizeof no_device, "%s", lf_last_error());
        int B = cfg.micro_batch, replicas = lf_backend_cpu_threads();
        if (replicas > B) replicas = B;
        const int dev = strncmp(bname, "cpu", 3) != 0;
        st = lf_mem_plan_make_rank(&p, &cfg, &m, dev ? 1 : replicas, dev ? 2 : 0, (int)rank);
    }
    if (st != LF_OK) {
        fprintf(stderr, "llmforge: plan: %s\n", lf_last_error());
        goto done;
    }
    st = lf_mem_plan_check(&p, &cfg, &m);
    if (json) {
        /* one object; item names are plain ASCII without quotes or backslashes */
        printf("{\"world_size\":%d,\"rank\":%d,\"zero_stage\":%d,\"shard_elements\":%zu,\"parameters\":%zu,"
               "\"micro_batch\":%d,\"block_size\":%d,\"gradient_accumulation_steps\":%d,\"replicas\":%d,"
               "\"recompute\":\"%s\",\"parameter_bytes\":%zu,\"gradient_bytes\":%zu,\"optimizer_bytes\":%zu,"
               "\"activation_bytes\":%zu,\"per_rank\":[",
               cfg.world_size, p.rank, p.zero_stage, p.zero_stage ? p.shard : p.params, p.params, p.B, p.T, p.A,
               p.replicas, lf_recompute_name(p.policy), p.params_bytes, p.grads_bytes, p.optim_bytes, p.act.total);
        for (int i = 0; i < p.n_items; i++)
            printf("%s{\"name\":\"%s\",\"bytes\":%zu}", i ? "," : "", p.items[i].name, p.items[i].bytes);
        printf("],\"total_bytes\":%zu,\"activation_dtype\":\"%s\",\"activation_bytes_by_policy\":{\"none\":%zu,"
               "\"selective\":%zu,\"full\":%zu},",
               p.total, lf_act_dtype_name(p.act_dtype), p.act_policy[0], p.act_policy[1], p.act_policy[2]);
        printf("\"activation_bytes_by_dtype\":{");
        for (int d = 0; d < 2; d++)
            printf("%s\"%s\":{\"none\":%zu,\"selective\":%zu,\"full\":%zu}", d ? "," : "",
                   lf_act_dtype_name((lf_act_dtype)d), p.act_by_dtype[d][0], p.act_by_dtype[d][1],
                   p.act_by_dtype[d][2]);
        printf("},\"limit_bytes\":%zu,\"limit_from\":\"%s\",", p.limit,
               p.limit_from_config ? "memory.limit_bytes"
               : p.limit           ? "MemAvailable"
                                   : "none");
        /* the device: names are the driver's (printable ASCII, no quotes) */
        printf("\"backend\":\"%s\",\"device\":\"%s\",\"device_bytes\":%zu,\"host_bytes\":%zu,"
               "\"device_free_bytes\":%zu,\"device_total_bytes\":%zu,\"device_items\":[",
               bname, p.device, p.device_total, p.host_total, p.device_free, p.device_capacity);
        for (int i = 0, k = 0; i < p.n_items; i++)
            if (p.items[i].device) printf("%s\"%s\"", k++ ? "," : "", p.items[i].name);
        printf("],\"fits\":%s}\n", st == LF_OK ? "true" : "false");
    } else {
        size_t need = lf_mem_plan_format(&p, NULL, 0) + 1;
        char *text = malloc(need);
        if (!text) goto done;
        lf_mem_plan_format(&p, text, need);
        if (cfg.world_size > 1) printf("world size %d: every figure below is per rank\n", cfg.world_size);
        if (p.on_device) printf("backend %s: %s\n", bname, no_device[0] ? no_device : p.device);
        fputs(text, stdout);
        free(text);
        if (no_device[0])
            printf("device memory not checked: %s (activations sized as the CPU's attention keeps them, an upper "
                   "bound)\n",
                   no_device);
        if (st != LF_OK) printf("does not fit: %s\n", lf_last_error());
    }
    rc = st == LF_OK ? 0 : 1;
done:
    lf_backend_close(be);
    free(ov);
    return rc;
}
