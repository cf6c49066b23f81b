/*
 * llmforge merge: a base model and a PEFT LoRA adapter merged into one
 * Hugging Face directory (PEFT's merge_and_unload: W += scale * B A), which
 * transformers loads and every llmforge command takes as a model.
 *
 *   llmforge merge --adapter DIR [--base DIR] --out DIR
 *
 * DIR (--adapter): a PEFT adapter directory (adapter_config.json and
 * adapter_model.safetensors), e.g. a LoRA run's checkpoint step directory.
 * The base is --base, else the adapter's base_model_name_or_path when that is
 * a local directory. The work is the library's (lf_lora_merge); this file
 * parses and prints. Exit status: 0 written; 1 failed (the file or key
 * named); 2 usage.
 */
#include <stdio.h>
#include <string.h>
#include "llmforge/checkpoint.h"
#include "cli_util.h"
#include "commands.h"

static void merge_usage(FILE *f) {
    fprintf(f, "usage: llmforge merge --adapter DIR [--base DIR] --out DIR\n"
               "  Merge a PEFT LoRA adapter (adapter_config.json + adapter_model.safetensors: a LoRA run's\n"
               "  checkpoint step directory, or peft's save_pretrained) into its base, as PEFT's\n"
               "  merge_and_unload, and write a Hugging Face directory that transformers loads.\n"
               "  --base DIR: the base model (default: the adapter's base_model_name_or_path when that is a\n"
               "  local directory).\n");
}

int cmd_merge(int argc, char **argv) {
    const char *adapter = NULL, *base = NULL, *out = NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            merge_usage(stdout);
            return 0;
        }
        const char **dst = !strcmp(a, "--adapter") ? &adapter
                           : !strcmp(a, "--base")  ? &base
                           : !strcmp(a, "--out")   ? &out
                                                   : NULL;
        if (!dst || i + 1 >= argc) {
            fprintf(stderr, "llmforge merge: %s '%s'\n", dst ? "missing value after" : "unknown argument", a);
            merge_usage(stderr);
            return 2;
        }
        *dst = argv[++i];
    }
    if (!adapter || !out) {
        fprintf(stderr, "llmforge merge: --adapter DIR and --out DIR are required\n");
        merge_usage(stderr);
        return 2;
    }
    if (lf_lora_merge(adapter, base, out) != LF_OK) {
        fprintf(stderr, "llmforge: merge: %s\n", lf_last_error());
        return 1;
    }
    printf("merged adapter '%s' into its base: %s\n", adapter, out);
    return 0;
}
