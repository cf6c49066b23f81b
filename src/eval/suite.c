/*
 * Evaluation suites: a directory of task files run together, what the
 * training key eval.suite and `llmforge models eval --suite DIR` take. A
 * suite is just the task files of one directory, so a team versions it with
 * its data and adds a task by dropping a file in.
 *
 * Invariants: every regular file of the directory whose name ends in ".jsonl"
 * (hidden files aside) is a task, loaded in name order (so metric order and
 * task names are the same on every machine) by lf_eval_tasks_load with the
 * caller's options; subdirectories and other files are ignored; an empty
 * suite is an error, not an evaluation of nothing.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "llmforge/eval.h"

#define SUITE_MAX_FILES 256

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

lf_status lf_eval_suite_load(lf_eval_tasks **out, const char *dir, const lf_eval_load_opts *opts) {
    if (!out || !dir) return lf_fail(LF_ERR_INVALID_ARG, "lf_eval_suite_load: NULL argument");
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d)
        return lf_fail(errno == ENOENT ? LF_ERR_NOT_FOUND : LF_ERR_IO, "eval suite '%s': cannot open the directory: %s",
                       dir, strerror(errno));
    char *paths[SUITE_MAX_FILES];
    int n = 0;
    lf_status st = LF_OK;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t ln = strlen(de->d_name);
        if (de->d_name[0] == '.' || ln < 6 || strcmp(de->d_name + ln - 6, ".jsonl") != 0) continue;
        size_t pl = strlen(dir) + ln + 2;
        char *p = malloc(pl);
        if (!p) {
            st = lf_fail(LF_ERR_NOMEM, "eval suite '%s': out of memory", dir);
            break;
        }
        snprintf(p, pl, "%s/%s", dir, de->d_name);
        struct stat sb;
        if (stat(p, &sb) != 0 || !S_ISREG(sb.st_mode)) {
            free(p);
            continue;
        }
        if (n == SUITE_MAX_FILES) {
            free(p);
            st = lf_fail(LF_ERR_RANGE, "eval suite '%s' holds more than %d task files", dir, SUITE_MAX_FILES);
            break;
        }
        paths[n++] = p;
    }
    closedir(d);
    if (st == LF_OK && n == 0) st = lf_fail(LF_ERR_NOT_FOUND, "eval suite '%s' holds no task file (*.jsonl)", dir);
    if (st == LF_OK) {
        qsort(paths, (size_t)n, sizeof *paths, cmp_str);
        st = lf_eval_tasks_load(out, (const char *const *)paths, n, opts);
        if (st != LF_OK) lf_error_prefix("eval suite '%s'", dir);
    }
    for (int i = 0; i < n; i++) free(paths[i]);
    return st;
}
