/*
 * Checkpoints: save (crash-safe), resolve, load (verified), and loading
 * weights with Hugging Face names. The layout is specified in
 * include/llmforge/checkpoint.h; the tensor files are safetensors
 * (src/core/safetensors.c).
 *
 * Save protocol (a crash at any point leaves either the previous state or the
 * new one, never a half-written directory that `latest` names):
 *   1. ckpt/.tmp_step_N/ is created fresh (a leftover from a crash is removed);
 *   2. model.safetensors, optimizer.safetensors (when m, v are given) and
 *      trainer_state.json are written and fsynced; trainer_state.json is the
 *      caller's object with "files": {name: {"sha256": hex, "bytes": n}};
 *   3. the tmp directory is fsynced and renamed to ckpt/step_N. If step_N
 *      already exists (the same step saved again) the two are swapped
 *      atomically with renameat2(RENAME_EXCHANGE) and the old one removed;
 *      where that call is unavailable, the old one is first renamed aside;
 *   4. ckpt/ is fsynced; ckpt/latest.tmp ("step_N\n") is written, fsynced
 *      and renamed over ckpt/latest; ckpt/ is fsynced again;
 *   5. rotation: step directories beyond the newest keep_last (keep_last <= 0
 *      keeps all) are renamed to .del_* and removed, except the one `latest`
 *      names and `protect`; stale .tmp_/.del_/.old_ entries are removed.
 *      A rotation failure is logged (the checkpoint itself is already
 *      durable) and does not fail the save.
 * One writer per checkpoint root (rank 0) is assumed; nothing is locked.
 *
 * Load verifies every file listed in trainer_state.json (size, then SHA-256)
 * before reading anything, matches tensors by name with dtype and shape
 * checks, reports every problem (missing, unexpected, wrong shape, not F32)
 * in one message, and writes the caller's buffers only when all is well.
 *
 * The module's files: checkpoint.c (this one: paths, the step directories
 * of a root, the parameter table's name index), checkpoint_write.c (save,
 * commit, retention), checkpoint_read.c (verify, resolve, load),
 * model_load.c (a model from a checkpoint); checkpoint_impl.h holds what
 * they share.
 */
#define _GNU_SOURCE /* renameat2, RENAME_EXCHANGE */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "checkpoint/checkpoint_impl.h"
#include "core/io_impl.h"
#include "llmforge/checkpoint.h"
#include "llmforge/safetensors.h"

/* ---------------------------------------------------------------- helpers */

lf_status lf__ck_path_join(char *out, const char *a, const char *b) {
    int n = snprintf(out, CK_PATH_MAX, "%s/%s", a, b);
    if (n < 0 || n >= CK_PATH_MAX) return lf_fail(LF_ERR_INVALID_ARG, "path '%s/%s' is too long", a, b);
    return LF_OK;
}

/* Copy `in` without trailing slashes (but keep "/"). */
lf_status lf__ck_path_norm(char *out, const char *in) {
    size_t n = strlen(in);
    if (n == 0) return lf_fail(LF_ERR_INVALID_ARG, "empty path");
    if (n >= CK_PATH_MAX) return lf_fail(LF_ERR_INVALID_ARG, "path '%.200s...' is too long", in);
    memcpy(out, in, n + 1);
    while (n > 1 && out[n - 1] == '/') out[--n] = 0;
    return LF_OK;
}

const char *lf__ck_base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

char *lf__ck_dup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = lf_alloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

int lf__ck_is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

int lf__ck_is_file(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Parses "step_<digits>" exactly. */
static int parse_step_name(const char *s, long *step) {
    if (strncmp(s, "step_", 5) != 0) return 0;
    const char *p = s + 5;
    if (!*p) return 0;
    for (const char *q = p; *q; q++)
        if (*q < '0' || *q > '9') return 0;
    errno = 0;
    char *end;
    long v = strtol(p, &end, 10);
    if (errno || *end) return 0;
    *step = v;
    return 1;
}

/* ---------------------------------------------------------------- parameter table */

static int cmp_param_name(const void *a, const void *b) {
    return strcmp((*(const lf_param_info *const *)a)->name, (*(const lf_param_info *const *)b)->name);
}

const lf_param_info *lf__ck_pindex_find(const pindex *ix, const char *name) {
    if (strlen(name) >= LF_PARAM_NAME_MAX) return NULL;
    lf_param_info key;
    strcpy(key.name, name);
    const lf_param_info *kp = &key;
    const lf_param_info **hit = bsearch(&kp, ix->by_name, (size_t)ix->n, sizeof *ix->by_name, cmp_param_name);
    return hit ? *hit : NULL;
}

/* Checks the table against the buffers and builds the name index. */
lf_status lf__ck_table_check(const char *what, const lf_ckpt_tensors *tt, pindex *ix) {
    ix->by_name = NULL;
    ix->n = 0;
    if (!tt || !tt->table || tt->count <= 0)
        return lf_fail(LF_ERR_INVALID_ARG, "%s: empty or missing parameter table", what);
    for (int i = 0; i < tt->count; i++) {
        const lf_param_info *p = &tt->table[i];
        if (!memchr(p->name, 0, LF_PARAM_NAME_MAX) || !p->name[0])
            return lf_fail(LF_ERR_INVALID_ARG, "%s: parameter %d has no valid name", what, i);
        if (p->ndim < 0 || p->ndim > 2)
            return lf_fail(LF_ERR_INVALID_ARG, "%s: parameter '%s': ndim %d outside [0, 2]", what, p->name, p->ndim);
        size_t numel = 1;
        for (int d = 0; d < p->ndim; d++) {
            if (p->shape[d] < 0 || __builtin_mul_overflow(numel, (size_t)p->shape[d], &numel))
                return lf_fail(LF_ERR_INVALID_ARG, "%s: parameter '%s': bad shape", what, p->name);
        }
        if (numel != p->numel)
            return lf_fail(LF_ERR_INVALID_ARG, "%s: parameter '%s': numel %zu but shape holds %zu", what, p->name,
                           p->numel, numel);
        if (p->offset > tt->total || p->numel > tt->total - p->offset)
            return lf_fail(LF_ERR_INVALID_ARG, "%s: parameter '%s': [%zu, +%zu) outside the %zu-float buffer", what,
                           p->name, p->offset, p->numel, tt->total);
    }
    ix->by_name = malloc((size_t)tt->count * sizeof *ix->by_name);
    if (!ix->by_name) return lf_fail(LF_ERR_NOMEM, "%s: out of memory", what);
    for (int i = 0; i < tt->count; i++) ix->by_name[i] = &tt->table[i];
    ix->n = tt->count;
    qsort(ix->by_name, (size_t)ix->n, sizeof *ix->by_name, cmp_param_name);
    for (int i = 1; i < ix->n; i++)
        if (strcmp(ix->by_name[i - 1]->name, ix->by_name[i]->name) == 0) {
            lf_status s = lf_fail(LF_ERR_INVALID_ARG, "%s: parameter '%s' appears twice in the table", what,
                                  ix->by_name[i]->name);
            free(ix->by_name);
            ix->by_name = NULL;
            return s;
        }
    return LF_OK;
}

static int cmp_step_desc(const void *a, const void *b) {
    const step_ent *x = a, *y = b;
    if (x->step != y->step) return x->step > y->step ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* The step directories of root (by name, "step_<digits>", directories only),
 * newest first; stale temporaries (.tmp_step_*, .del_step_*, .old_step_*,
 * latest.tmp) are removed on the way when clean is set. *out: malloc'd
 * (free), NULL when there are none. -1 when root cannot be read (errno). */
int lf__ck_list_steps(const char *root, int clean, step_ent **out, size_t *count) {
    *out = NULL;
    *count = 0;
    DIR *d = opendir(root);
    if (!d) return -1;
    step_ent *ents = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        const char *nm = de->d_name;
        if (starts_with(nm, ".tmp_step_") || starts_with(nm, ".del_step_") || starts_with(nm, ".old_step_") ||
            !strcmp(nm, "latest.tmp")) {
            if (clean && lf_remove_tree_at(dirfd(d), nm, 0) != 0)
                lf_log(LF_LOG_WARN, "checkpoint rotation: cannot remove '%s/%s': %s", root, nm, strerror(errno));
            continue;
        }
        long step;
        if (!parse_step_name(nm, &step) || strlen(nm) >= sizeof ents->name) continue;
        struct stat sb;
        if (fstatat(dirfd(d), nm, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(sb.st_mode)) continue;
        if (n == cap) {
            size_t nc = cap ? 2 * cap : 64;
            step_ent *q = realloc(ents, nc * sizeof *q);
            if (!q) {
                free(ents);
                closedir(d);
                errno = ENOMEM;
                return -1;
            }
            ents = q;
            cap = nc;
        }
        strcpy(ents[n].name, nm);
        ents[n].step = step;
        n++;
    }
    closedir(d);
    if (n) qsort(ents, n, sizeof *ents, cmp_step_desc);
    *out = ents;
    *count = n;
    return 0;
}
