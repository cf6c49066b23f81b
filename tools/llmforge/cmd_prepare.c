/*
 * llmforge prepare: turn text into token shards.
 *   llmforge prepare --char INPUT --out DIR
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include "llmforge/data.h"
#include "cli_util.h"
#include "commands.h"

/* ---------------------------------------------------------------- prepare */
int cmd_prepare(int argc, char **argv) {
    const char *input = NULL, *out = NULL;
    for (int i = 0; i < argc; i++) {
        int missing = 0;
        const char *v;
        if ((v = opt_value(argc, argv, &i, "--char", &missing))) input = v;
        else if ((v = opt_value(argc, argv, &i, "--out", &missing))) out = v;
        else if (missing) return 2;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: llmforge prepare --char INPUT(file or directory) --out DIR\n"
                   "  Character-level dataset as nanoGPT's shakespeare_char: vocabulary = sorted unique\n"
                   "  characters, first 90%% train, last 10%% val; writes shards, vocab.json, dataset.json.\n");
            return 0;
        } else {
            fprintf(stderr, "llmforge prepare: unknown argument '%s' (see --help)\n", argv[i]);
            return 2;
        }
    }
    if (!input || !out) {
        fprintf(stderr, "llmforge prepare: --char INPUT and --out DIR are required\n");
        return 2;
    }
    lf_prepare_stats stats;
    double t0 = lf_time_now();
    lf_status st = lf_prepare_char(input, out, &stats);
    if (st != LF_OK) {
        die_status(st, "prepare");
        return 1;
    }
    printf("prepared '%s' -> %s: %zu characters, vocabulary %d, train %zu tokens, val %zu tokens (%.2f s)\n", input,
           out, stats.n_chars, stats.vocab_size, stats.train_tokens, stats.val_tokens, lf_time_now() - t0);
    return 0;
}

