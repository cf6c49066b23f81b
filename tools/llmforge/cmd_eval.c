/*
 * llmforge eval: score a checkpoint on task files (JSON Lines).
 *
 *   llmforge eval --ckpt DIR --task FILE [--task FILE ...] [--kind K] [--limit N] [--batch B]
 *                 [--max-new-tokens N] [--samples] [--json] [--out FILE.json] [--threads N]
 *
 * The harness is the library's (lf_eval_tasks_load / lf_eval_tasks_run); this
 * file loads the checkpoint as `sample` does, prints the table (or, with
 * --json, the JSON object) and writes --out. Exit status: 0 done, 1 a file,
 * checkpoint or task failed (the message names file:line), 2 usage.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "llmforge/backend.h"
#include "llmforge/checkpoint.h"
#include "llmforge/data.h"
#include "llmforge/eval.h"
#include "llmforge/model.h"
#include "cli_util.h"
#include "commands.h"

#define MAX_TASK_FILES 256

static void eval_usage(FILE *f) {
    fprintf(f, "usage: llmforge eval --ckpt DIR --task FILE [--task FILE ...] [--kind K] [--limit N] [--batch B]\n"
               "                     [--max-new-tokens N] [--samples] [--json] [--out FILE.json] [--threads N]\n"
               "  Scores a checkpoint on tasks read from JSON Lines files (one example per line; the kind from a\n"
               "  \"task\" field or --kind): perplexity, multiple_choice (acc, acc_norm as lm-evaluation-harness),\n"
               "  classification (accuracy, macro-F1, confusion matrix), generation (BLEU, ROUGE), ranking\n"
               "  (Hits@1/3/10, MRR) and exact_match (EM, token F1). File formats: docs/eval.md.\n\n"
               "options:\n"
               "  --ckpt DIR            a checkpoint step directory, a run's ckpt/ or ckpt/latest, or its out_dir\n"
               "  --model DIR           the same, or a Hugging Face model directory (its tokenizer.json)\n"
               "  --task FILE           a task file (repeat for several); with --kind perplexity also a plain text\n"
               "                        file or a dataset directory (its val split)\n"
               "  --kind K              the kind of files that name none: perplexity, multiple_choice,\n"
               "                        classification, generation, ranking, exact_match\n"
               "  --limit N             the first N examples of each task (perplexity over a file: N windows)\n"
               "  --batch B             sequences per forward (default: the thread count, less for long contexts)\n"
               "  --max-new-tokens N    generation length for every generation/exact_match task\n"
               "                        (default: the task's, else 64 / 16)\n"
               "  --samples             per-example records (predictions, log-likelihoods) in the JSON\n"
               "  --json                print the JSON object instead of the table\n"
               "  --out FILE.json       also write the JSON object to FILE.json\n"
               "  --threads N           CPU threads (0: OMP_NUM_THREADS, else the CPUs granted)\n");
}

/* Load the checkpoint's (or HF directory's) model and tokenizer. */
static int load_checkpoint(const char *ckpt, char **dir, lf_model **m, lf_tokenizer **tok) {
    lf_status st = lf_checkpoint_load_text_model(ckpt, NULL, m, tok, dir);
    if (st != LF_OK) {
        die_status(st, "eval");
        return 1;
    }
    return 0;
}

int cmd_eval(int argc, char **argv) {
    const char *ckpt = NULL, *out_path = NULL;
    const char *tasks[MAX_TASK_FILES];
    int n_tasks = 0, json = 0;
    long limit = 0, batch = 0, max_new = 0, threads = 0;
    lf_eval_load_opts lo = lf_eval_load_opts_default();
    lf_eval_run_opts ro = lf_eval_run_opts_default();
    for (int i = 0; i < argc; i++) {
        int missing = 0;
        const char *v;
        if ((v = opt_value(argc, argv, &i, "--ckpt", &missing)) || (v = opt_value(argc, argv, &i, "--model", &missing)))
            ckpt = v;
        else if ((v = opt_value(argc, argv, &i, "--task", &missing))) {
            if (n_tasks == MAX_TASK_FILES) {
                fprintf(stderr, "llmforge eval: at most %d --task files\n", MAX_TASK_FILES);
                return 2;
            }
            tasks[n_tasks++] = v;
        } else if ((v = opt_value(argc, argv, &i, "--kind", &missing))) {
            if (lf_eval_kind_parse(v, &lo.kind) != LF_OK) {
                fprintf(stderr, "llmforge eval: --kind: %s\n", lf_last_error());
                return 2;
            }
        } else if ((v = opt_value(argc, argv, &i, "--limit", &missing))) {
            if (parse_long("--limit", v, 1, LONG_MAX, &limit)) return 2;
        } else if ((v = opt_value(argc, argv, &i, "--batch", &missing))) {
            if (parse_long("--batch", v, 1, 65536, &batch)) return 2;
        } else if ((v = opt_value(argc, argv, &i, "--max-new-tokens", &missing))) {
            if (parse_long("--max-new-tokens", v, 1, 1L << 20, &max_new)) return 2;
        } else if ((v = opt_value(argc, argv, &i, "--out", &missing))) {
            out_path = v;
        } else if ((v = opt_value(argc, argv, &i, "--threads", &missing))) {
            if (parse_long("--threads", v, 0, 4096, &threads)) return 2;
        } else if (missing) {
            return 2;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[i], "--samples")) {
            ro.samples = 1;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            eval_usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "llmforge eval: unknown argument '%s' (see --help)\n", argv[i]);
            return 2;
        }
    }
    if (!ckpt) {
        fprintf(stderr, "llmforge eval: --ckpt DIR is required (see --help)\n");
        return 2;
    }
    if (!n_tasks) {
        fprintf(stderr, "llmforge eval: --task FILE is required (see --help)\n");
        return 2;
    }
    lo.limit = limit;
    ro.batch = (int)batch;
    ro.max_new_tokens = (int)max_new;
    if (cli_backend_setup("eval", threads, 1)) return 2;
    char thr[256];
    cli_threads_line(thr, sizeof thr); /* stdout is the result (the table, --json) */
    fprintf(stderr, "llmforge eval: %s\n", thr);

    int rc = 1;
    char *dir = NULL, *js = NULL, *table = NULL, *final_json = NULL;
    lf_model *m = NULL;
    lf_tokenizer *tok = NULL;
    lf_eval_tasks *ts = NULL;
    lf_eval_results *res = NULL;
    cJSON *root = NULL;
    lf_status st = lf_eval_tasks_load(&ts, tasks, n_tasks, &lo);
    if (st != LF_OK) {
        die_status(st, "eval");
        goto done;
    }
    if (load_checkpoint(ckpt, &dir, &m, &tok)) goto done;
    if ((st = lf_eval_results_create(&res)) != LF_OK) {
        die_status(st, "eval");
        goto done;
    }
    st = lf_eval_tasks_run(ts, m, tok, &ro, res);
    if (st != LF_OK) {
        die_status(st, "eval");
        goto done;
    }
    if ((st = lf_eval_results_json(res, &js)) != LF_OK) {
        die_status(st, "eval");
        goto done;
    }
    /* the checkpoint that was scored goes first in the object */
    cJSON *parsed = cJSON_Parse(js);
    root = cJSON_CreateObject();
    int ok = parsed && root && cJSON_AddStringToObject(root, "checkpoint", dir);
    while (ok && parsed->child) {
        cJSON *item = cJSON_DetachItemViaPointer(parsed, parsed->child);
        ok = cJSON_AddItemToObject(root, item->string, item);
    }
    cJSON_Delete(parsed);
    if (!ok || !(final_json = lf_json_print(root, 0))) { /* metrics that read back exactly */
        die_status(LF_ERR_NOMEM, "eval");
        goto done;
    }
    if (out_path) {
        size_t n = strlen(final_json);
        final_json[n] = '\n';
        st = lf_file_write_all(out_path, final_json, n + 1);
        final_json[n] = 0;
        if (st != LF_OK) {
            die_status(st, "eval: --out");
            goto done;
        }
    }
    if (json) {
        printf("%s\n", final_json);
    } else {
        if ((st = lf_eval_results_table(res, &table)) != LF_OK) {
            die_status(st, "eval");
            goto done;
        }
        printf("checkpoint %s\n%s", dir, table);
        if (out_path) printf("results written to %s\n", out_path);
    }
    rc = 0;
done:
    cJSON_Delete(root);
    free(final_json);
    lf_free(js);
    lf_free(table);
    lf_free(dir);
    lf_eval_results_free(res);
    lf_eval_tasks_free(ts);
    lf_model_free(m);
    lf_tokenizer_free(tok);
    return rc;
}
