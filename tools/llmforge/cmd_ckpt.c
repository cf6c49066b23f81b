/*
 * llmforge ckpt: checkpoints on disk.
 *
 *   llmforge ckpt verify DIR [--all]
 *
 * verify re-hashes a checkpoint against its trainer_state.json (every file
 * it lists: present, its recorded size, its SHA-256) and says whether it is
 * complete. DIR is a step directory, a checkpoint root (ckpt/) or a run's
 * out_dir; for the last two the directory `latest` names is checked, and a
 * `latest` that is missing, empty or names an incomplete directory is
 * itself the failure (no fallback: this is the command that proves `latest`
 * is good; `--resume` would fall back and say so). --all checks every step
 * directory of the root as well. Exit status: 0 complete; 1 incomplete or
 * unreadable (every bad file named); 2 usage.
 *
 * The checks are the library's (lf_checkpoint_resolve_flags,
 * lf_checkpoint_verify); this file only lists directories and prints.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "llmforge/checkpoint.h"
#include "cli_util.h"
#include "commands.h"

static void ckpt_usage(FILE *f) {
    fprintf(f, "usage: llmforge ckpt verify DIR [--all]\n"
               "  Re-hash a checkpoint against its trainer_state.json and say whether it is complete.\n"
               "  DIR: a step directory, a checkpoint root (ckpt/) or a run's out_dir (then the directory\n"
               "  `latest` names; a missing or broken `latest` fails). --all: every step directory too.\n"
               "  Exit status: 0 complete, 1 incomplete (the bad file is named), 2 usage.\n");
}

static int is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* One directory: a line saying complete or why not. 0 when complete. */
static int verify_one(const char *dir, const char *label) {
    int n = 0;
    lf_status st = lf_checkpoint_verify(dir, &n);
    if (st == LF_OK) {
        printf("%s'%s' is complete: %d file%s match their sizes and SHA-256 in trainer_state.json\n", label, dir, n,
               n == 1 ? "" : "s");
        return 0;
    }
    fprintf(stderr, "llmforge: ckpt verify: %s'%s' is incomplete: %s\n", label, dir, lf_last_error());
    return 1;
}

static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Every step_* directory of the root that holds `dir` (a step directory). */
static int verify_all(const char *root) {
    DIR *d = opendir(root);
    if (!d) {
        fprintf(stderr, "llmforge: ckpt verify: cannot list '%s'\n", root);
        return 1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, "step_", 5) != 0) continue;
        if (n == cap) {
            size_t nc = cap ? 2 * cap : 32;
            char **q = realloc(names, nc * sizeof *q);
            if (!q) break;
            names = q;
            cap = nc;
        }
        names[n] = strdup(de->d_name);
        if (names[n]) n++;
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_name);
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", root, names[i]);
        if (is_dir(path)) bad |= verify_one(path, "step directory ");
        free(names[i]);
    }
    free(names);
    if (!n) printf("no step directories in '%s'\n", root);
    return bad;
}

static int cmd_verify(int argc, char **argv) {
    const char *path = NULL;
    int all = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--all")) all = 1;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            ckpt_usage(stdout);
            return 0;
        } else if (argv[i][0] != '-' && !path) path = argv[i];
        else {
            fprintf(stderr, "llmforge ckpt verify: unknown argument '%s'\n", argv[i]);
            ckpt_usage(stderr);
            return 2;
        }
    }
    if (!path) {
        ckpt_usage(stderr);
        return 2;
    }
    char *dir = NULL;
    lf_status st = lf_checkpoint_resolve_flags(path, LF_CKPT_RESOLVE_STRICT, &dir);
    int bad = 0;
    if (st != LF_OK) {
        fprintf(stderr, "llmforge: ckpt verify: %s\n", lf_last_error());
        bad = 1;
    } else {
        int named = strcmp(dir, path) != 0; /* reached through latest */
        if (named) printf("'%s': latest names '%s'\n", path, dir);
        bad = verify_one(dir, "checkpoint ");
    }
    if (all) {
        /* the root: the parent of the resolved directory, else path itself or path/ckpt */
        char root[4200];
        if (dir) {
            snprintf(root, sizeof root, "%s", dir);
            char *slash = strrchr(root, '/');
            if (slash && slash != root) *slash = 0;
            else snprintf(root, sizeof root, ".");
        } else {
            snprintf(root, sizeof root, "%s/ckpt", path);
            if (!is_dir(root)) snprintf(root, sizeof root, "%s", path);
        }
        bad |= verify_all(root);
    }
    lf_free(dir);
    return bad ? 1 : 0;
}

int cmd_ckpt(int argc, char **argv) {
    if (argc < 1 || !strcmp(argv[0], "-h") || !strcmp(argv[0], "--help")) {
        ckpt_usage(argc < 1 ? stderr : stdout);
        return argc < 1 ? 2 : 0;
    }
    if (!strcmp(argv[0], "verify")) return cmd_verify(argc - 1, argv + 1);
    fprintf(stderr, "llmforge ckpt: unknown subcommand '%s'\n", argv[0]);
    ckpt_usage(stderr);
    return 2;
}
