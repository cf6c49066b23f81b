/*
 * Reading checkpoints (checkpoint.h): verify (sizes and SHA-256 of every
 * file trainer_state.json lists), resolve (a root's `latest`, or the newest
 * complete step directory when it is missing or broken), load (whole or a
 * slice, by tensor name with dtype and shape checks), and weights by Hugging
 * Face name (lf_weights_load; each family's name prefix and buffers come from
 * the architecture tables).
 *
 * Invariants: every problem (missing, unexpected, wrong shape, not F32) is
 * reported in one message, and the caller's buffers are written only when
 * all is well.
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
#include "llmforge/hf.h"
#include "llmforge/safetensors.h"

/* A bounded list of ", "-separated items (one problem category). */
typedef struct {
    char buf[1024];
    size_t len;
    int n;
} msglist;

static void msg_add(msglist *m, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void msg_add(msglist *m, const char *fmt, ...) {
    m->n++;
    if (m->len + 8 >= sizeof m->buf) return;
    if (m->n > 1) m->len += (size_t)snprintf(m->buf + m->len, sizeof m->buf - m->len, ", ");
    if (m->len >= sizeof m->buf) {
        m->len = sizeof m->buf - 1;
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(m->buf + m->len, sizeof m->buf - m->len, fmt, ap);
    va_end(ap);
    if (k > 0) m->len += (size_t)k;
    if (m->len >= sizeof m->buf) m->len = sizeof m->buf - 1;
}

static void shape_str(const int64_t *shape, int ndim, char *buf, size_t cap) {
    size_t at = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (at < cap) snprintf(buf + at, cap - at, "]");
}

/* ---------------------------------------------------------------- tensor matching */

typedef struct {
    msglist missing, unexpected, shape, dtype, dup;
} problems;

typedef struct {
    const char *prefix;         /* names in the file are prefix + param name */
    const lf_st_tensor **found; /* per table entry, NULL = missing */
} slot;

/* Tensors of an HF file that are not parameters: a tied lm_head.weight, and
 * the buffers the architecture tables name (GPT-2's attention masks, RoPE's
 * inv_freq: lf_hf_tensor_ignored). */
static int hf_ignorable(const char *name, const lf_st_tensor *t) {
    return strcmp(name, "lm_head.weight") == 0 || lf_hf_tensor_ignored(name, t->ndim);
}

/* Match every tensor of `st` against the table through the slots; hf enables
 * the families' tensor-name prefixes (lf_hf_tensor_unprefixed) and the
 * buffers above. */
static void match_tensors(const lf_safetensors *st, const lf_ckpt_tensors *tt, const pindex *ix, slot *slots,
                          int nslots, int hf, problems *pr) {
    int n = lf_safetensors_count(st);
    for (int i = 0; i < n; i++) {
        const lf_st_tensor *t = lf_safetensors_at(st, i);
        const char *name = t->name;
        if (hf) name = lf_hf_tensor_unprefixed(name);
        int matched = 0;
        for (int k = 0; k < nslots && !matched; k++) {
            if (!starts_with(name, slots[k].prefix)) continue;
            const lf_param_info *p = lf__ck_pindex_find(ix, name + strlen(slots[k].prefix));
            if (!p) continue;
            matched = 1;
            size_t j = (size_t)(p - tt->table);
            if (slots[k].found[j]) msg_add(&pr->dup, "'%s' and '%s'", slots[k].found[j]->name, t->name);
            else slots[k].found[j] = t;
        }
        if (!matched && !(hf && hf_ignorable(name, t))) msg_add(&pr->unexpected, "%s", t->name);
    }
    for (int k = 0; k < nslots; k++) {
        for (int j = 0; j < tt->count; j++) {
            const lf_param_info *p = &tt->table[j];
            const lf_st_tensor *t = slots[k].found[j];
            if (!t) {
                msg_add(&pr->missing, "%s%s", slots[k].prefix, p->name);
                continue;
            }
            if (t->dtype != LF_ST_F32) {
                msg_add(&pr->dtype, "%s (%s)", t->name, lf_st_dtype_name(t->dtype));
                continue;
            }
            int same = t->ndim == p->ndim;
            for (int d = 0; same && d < p->ndim; d++) same = t->shape[d] == p->shape[d];
            if (!same) {
                char a[128], b[64];
                shape_str(t->shape, t->ndim, a, sizeof a);
                shape_str(p->shape, p->ndim, b, sizeof b);
                msg_add(&pr->shape, "%s (file %s, model %s)", t->name, a, b);
            }
        }
    }
}

static int problems_any(const problems *pr) {
    return pr->missing.n || pr->unexpected.n || pr->shape.n || pr->dtype.n || pr->dup.n;
}

/* One message listing every problem, counts first so truncation keeps them. */
static lf_status problems_fail(const problems *pr, const char *what) {
    char head[CK_PATH_MAX + 256];
    snprintf(head, sizeof head,
             "%s does not match the model (%d missing, %d unexpected, %d wrong shape, %d not F32, %d "
             "duplicate)",
             what, pr->missing.n, pr->unexpected.n, pr->shape.n, pr->dtype.n, pr->dup.n);
    return lf_fail(LF_ERR_MISMATCH, "%s%s%s%s%s%s%s%s%s%s%s", head, pr->missing.n ? "; missing: " : "",
                   pr->missing.n ? pr->missing.buf : "", pr->unexpected.n ? "; unexpected: " : "",
                   pr->unexpected.n ? pr->unexpected.buf : "", pr->shape.n ? "; wrong shape: " : "",
                   pr->shape.n ? pr->shape.buf : "", pr->dtype.n ? "; not F32: " : "", pr->dtype.n ? pr->dtype.buf : "",
                   pr->dup.n ? "; duplicate: " : "", pr->dup.n ? pr->dup.buf : "");
}

/* Flat elements [lo, lo+n) of the tensors found into dst[0..n). */
static void copy_found(const lf_ckpt_tensors *tt, const lf_st_tensor *const *found, size_t lo, size_t n, float *dst) {
    for (int j = 0; j < tt->count; j++) {
        size_t a = tt->table[j].offset, b = a + tt->table[j].numel;
        if (a < lo) a = lo;
        if (b > lo + n) b = lo + n;
        if (a >= b) continue;
        const unsigned char *src = (const unsigned char *)found[j]->data + (a - tt->table[j].offset) * sizeof(float);
        memcpy(dst + (a - lo), src, (b - a) * sizeof(float)); /* data may be unaligned */
    }
}

/* ---------------------------------------------------------------- verify and resolve */

static int is_hex64(const char *s) {
    if (strlen(s) != 64) return 0;
    for (; *s; s++)
        if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f'))) return 0;
    return 1;
}

/* Verify size and (hash != 0) SHA-256 of every file listed in "files"; all
 * problems in one message. *count (may be NULL): the files listed. */
static lf_status verify_files(const char *dir, const cJSON *files, int hash, int *count) {
    msglist bad = {0};
    lf_status worst = LF_OK;
    const cJSON *f;
    cJSON_ArrayForEach(f, files) {
        const char *nm = f->string;
        const cJSON *jh = cJSON_GetObjectItemCaseSensitive(f, "sha256");
        const cJSON *jb = cJSON_GetObjectItemCaseSensitive(f, "bytes");
        if (!*nm || strchr(nm, '/') || strcmp(nm, ".") == 0 || strcmp(nm, "..") == 0 || !cJSON_IsObject(f) ||
            !cJSON_IsString(jh) || !is_hex64(jh->valuestring) || !cJSON_IsNumber(jb) ||
            !(jb->valuedouble >= 0 && jb->valuedouble <= 9007199254740992.0) ||
            jb->valuedouble != (double)(long long)jb->valuedouble)
            return lf_fail(LF_ERR_FORMAT, "checkpoint '%s': %s: bad \"files\" entry '%.200s'", dir, CK_STATE_FILE, nm);
        char path[CK_PATH_MAX];
        lf_status s = lf__ck_path_join(path, dir, nm);
        if (s != LF_OK) return s;
        struct stat sb;
        if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) {
            msg_add(&bad, "file '%s' is missing", nm);
            worst = LF_ERR_NOT_FOUND;
            continue;
        }
        if (count) (*count)++;
        long long want = (long long)jb->valuedouble;
        if ((long long)sb.st_size != want) {
            msg_add(&bad, "file '%s' is %lld bytes, %s says %lld", nm, (long long)sb.st_size, CK_STATE_FILE, want);
            if (worst == LF_OK) worst = LF_ERR_CHECKSUM;
            continue;
        }
        if (!hash) continue;
        char hex[65];
        if ((s = lf_sha256_file_hex(path, hex)) != LF_OK) return s;
        if (strcmp(hex, jh->valuestring) != 0) {
            msg_add(&bad, "file '%s' has SHA-256 %.16s..., %s says %.16s...", nm, hex, CK_STATE_FILE, jh->valuestring);
            if (worst == LF_OK) worst = LF_ERR_CHECKSUM;
        }
    }
    if (worst != LF_OK) return lf_fail(worst, "checkpoint '%s': %s", dir, bad.buf);
    return LF_OK;
}

/* dir's trainer_state.json checked against the files it lists: sizes only
 * (hash 0: what resolve does for the directory `latest` names; a full check
 * follows when it is loaded), or sizes and SHA-256 (hash 1). */
static lf_status check_dir(const char *dir, int hash, int *n_files) {
    if (n_files) *n_files = 0;
    char path[CK_PATH_MAX];
    lf_status s = lf__ck_path_join(path, dir, CK_STATE_FILE);
    if (s != LF_OK) return s;
    char *text = NULL;
    if ((s = lf_file_read_all(path, CK_STATE_CAP, &text, NULL)) != LF_OK) {
        lf_error_prefix("checkpoint '%s'", dir);
        return s;
    }
    cJSON *state = cJSON_Parse(text);
    lf_free(text);
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(state, "files");
    if (!cJSON_IsObject(state) || !cJSON_IsObject(files))
        s = lf_fail(LF_ERR_FORMAT, "checkpoint '%s': %s is not a JSON object with a \"files\" object", dir,
                    CK_STATE_FILE);
    else if (!cJSON_GetObjectItemCaseSensitive(files, CK_MODEL_FILE))
        s = lf_fail(LF_ERR_FORMAT, "checkpoint '%s': %s does not list %s", dir, CK_STATE_FILE, CK_MODEL_FILE);
    else s = verify_files(dir, files, hash, n_files);
    cJSON_Delete(state);
    return s;
}

lf_status lf_checkpoint_verify(const char *dir, int *n_files) {
    if (n_files) *n_files = 0;
    if (!dir) return lf_fail(LF_ERR_INVALID_ARG, "lf_checkpoint_verify: dir is NULL");
    return check_dir(dir, 1, n_files);
}

/* `latest_path` names a file in `root` holding a step directory name. */
static lf_status follow_latest(const char *root, const char *latest_path, char **dir) {
    char *text = NULL;
    size_t len = 0;
    lf_status s = lf_file_read_all(latest_path, 4096, &text, &len);
    if (s != LF_OK) return s;
    char *b = text, *e = text + len;
    while (b < e && (*b == ' ' || *b == '\t' || *b == '\n' || *b == '\r')) b++;
    while (e > b && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r')) e--;
    *e = 0;
    int ok = b < e && strcmp(b, ".") != 0 && strcmp(b, "..") != 0;
    for (const char *p = b; ok && *p; p++)
        if (*p == '/' || (unsigned char)*p < 0x20) ok = 0;
    if (!ok) {
        s = lf_fail(LF_ERR_FORMAT, "'%s' does not hold a step directory name%s", latest_path,
                    len ? "" : " (it is empty)");
        goto done;
    }
    char path[CK_PATH_MAX], st[CK_PATH_MAX];
    if ((s = lf__ck_path_join(path, root, b)) != LF_OK || (s = lf__ck_path_join(st, path, CK_STATE_FILE)) != LF_OK)
        goto done;
    if (!lf__ck_is_file(st)) {
        s = lf_fail(LF_ERR_NOT_FOUND, "'%s' names '%s', which holds no %s", latest_path, b, CK_STATE_FILE);
        goto done;
    }
    if ((s = check_dir(path, 0, NULL)) != LF_OK) { /* a file missing or of the wrong size */
        lf_error_prefix("'%s' names an incomplete checkpoint", latest_path);
        goto done;
    }
    *dir = lf__ck_dup(path);
    if (!*dir) s = lf_fail(LF_ERR_NOMEM, "out of memory");
done:
    lf_free(text);
    return s;
}

/* A checkpoint root: its `latest`, else (unless strict) the newest step
 * directory whose every file matches its SHA-256, with a warning saying
 * which was chosen and why. */
static lf_status resolve_root(const char *root, unsigned flags, char **dir) {
    char latest[CK_PATH_MAX], why[1024] = "";
    lf_status s = lf__ck_path_join(latest, root, "latest");
    if (s != LF_OK) return s;
    lf_status first = LF_ERR_NOT_FOUND;
    if (lf__ck_is_file(latest)) {
        if ((first = follow_latest(root, latest, dir)) == LF_OK) return LF_OK;
        snprintf(why, sizeof why, "%s", lf_last_error());
        if (flags & LF_CKPT_RESOLVE_STRICT) return first;
    } else {
        snprintf(why, sizeof why, "'%s' is missing", latest);
        if (flags & LF_CKPT_RESOLVE_STRICT) return lf_fail(LF_ERR_NOT_FOUND, "no checkpoint in '%s': %s", root, why);
    }
    step_ent *ents = NULL;
    size_t n = 0;
    if (lf__ck_list_steps(root, 0, &ents, &n) != 0)
        return lf_fail(errno == ENOENT ? LF_ERR_NOT_FOUND : LF_ERR_IO, "checkpoint root '%s': %s", root,
                       strerror(errno));
    char rejected[512] = "";
    size_t rl = 0;
    for (size_t i = 0; i < n; i++) {
        char path[CK_PATH_MAX];
        if (lf__ck_path_join(path, root, ents[i].name) != LF_OK) continue;
        if (check_dir(path, 1, NULL) != LF_OK) {
            if (rl < sizeof rejected)
                rl += (size_t)snprintf(rejected + rl, sizeof rejected - rl, "%s%s", rl ? ", " : "", ents[i].name);
            continue;
        }
        free(ents);
        lf_log(LF_LOG_WARN,
               "checkpoint root '%s': %s; using '%s', the newest step directory whose every file "
               "matches its SHA-256%s%s%s",
               root, why, path, rl ? " (incomplete: " : "", rejected, rl ? ")" : "");
        *dir = lf__ck_dup(path);
        return *dir ? LF_OK : lf_fail(LF_ERR_NOMEM, "out of memory");
    }
    free(ents);
    if (first != LF_ERR_NOT_FOUND && lf__ck_is_file(latest))
        return lf_fail(first, "%s; and no step directory of '%s' is complete%s%s", why, root, rl ? ": " : "", rejected);
    if (rl) /* damaged checkpoints are not "no checkpoint" (--resume auto must not start over on them) */
        return lf_fail(LF_ERR_CHECKSUM, "no complete checkpoint in '%s' (%s; incomplete: %s)", root, why, rejected);
    return lf_fail(LF_ERR_NOT_FOUND, "no checkpoint in '%s' (%s, and no step directory)", root, why);
}

/* A directory that is a checkpoint root: it holds `latest` or a step directory. */
static int looks_like_root(const char *p) {
    char a[CK_PATH_MAX];
    if (lf__ck_path_join(a, p, "latest") == LF_OK && lf__ck_is_file(a)) return 1;
    step_ent *ents = NULL;
    size_t n = 0;
    if (lf__ck_list_steps(p, 0, &ents, &n) != 0) return 0;
    free(ents);
    return n > 0;
}

lf_status lf_checkpoint_resolve_flags(const char *path, unsigned flags, char **dir) {
    if (!dir) return lf_fail(LF_ERR_INVALID_ARG, "lf_checkpoint_resolve: dir is NULL");
    *dir = NULL;
    if (!path) return lf_fail(LF_ERR_INVALID_ARG, "lf_checkpoint_resolve: path is NULL");
    char p[CK_PATH_MAX], a[CK_PATH_MAX], b[CK_PATH_MAX];
    lf_status s = lf__ck_path_norm(p, path);
    if (s != LF_OK) return s;
    struct stat sb;
    if (stat(p, &sb) != 0)
        return lf_fail(errno == ENOENT ? LF_ERR_NOT_FOUND : LF_ERR_IO, "checkpoint '%s': %s", p, strerror(errno));
    if (S_ISREG(sb.st_mode)) {
        if (strcmp(lf__ck_base_name(p), "latest") != 0)
            return lf_fail(LF_ERR_NOT_FOUND, "checkpoint '%s' is a file, neither a directory nor 'latest'", p);
        memcpy(a, p, strlen(p) + 1);
        char *slash = strrchr(a, '/');
        if (!slash) strcpy(a, ".");
        else if (slash == a) a[1] = 0;
        else *slash = 0;
        return resolve_root(a, flags, dir);
    }
    if (!S_ISDIR(sb.st_mode)) return lf_fail(LF_ERR_NOT_FOUND, "checkpoint '%s' is not a directory", p);
    if ((s = lf__ck_path_join(a, p, CK_STATE_FILE)) != LF_OK) return s;
    if (lf__ck_is_file(a)) { /* a step directory */
        *dir = lf__ck_dup(p);
        return *dir ? LF_OK : lf_fail(LF_ERR_NOMEM, "out of memory");
    }
    if (looks_like_root(p)) return resolve_root(p, flags, dir); /* a checkpoint root */
    if ((s = lf__ck_path_join(b, p, "ckpt")) != LF_OK) return s;
    if (lf__ck_is_dir(b) && looks_like_root(b)) return resolve_root(b, flags, dir); /* a run directory */
    return lf_fail(LF_ERR_NOT_FOUND, "no checkpoint in '%s' (no %s, latest, step directory, or ckpt/latest)", p,
                   CK_STATE_FILE);
}

lf_status lf_checkpoint_resolve(const char *path, char **dir) { return lf_checkpoint_resolve_flags(path, 0, dir); }

/* ---------------------------------------------------------------- load */

lf_status lf_checkpoint_load(const char *dir, const lf_ckpt_tensors *tt, float *params, float *m, float *v,
                             char **state_json) {
    if (!tt) return lf_fail(LF_ERR_INVALID_ARG, "lf_checkpoint_load: no table");
    return lf_checkpoint_load_slice(dir, tt, 1, 0, tt->total, params, m, v, state_json);
}

lf_status lf_checkpoint_load_slice(const char *dir, const lf_ckpt_tensors *tt, int verify, size_t lo, size_t n,
                                   float *params, float *m, float *v, char **state_json) {
    if (state_json) *state_json = NULL;
    if (!dir || (!params && !m)) return lf_fail(LF_ERR_INVALID_ARG, "lf_checkpoint_load: dir or buffers are NULL");
    if ((m == NULL) != (v == NULL))
        return lf_fail(LF_ERR_INVALID_ARG, "lf_checkpoint_load: give both optimizer moments or neither");
    if (!tt || lo > tt->total || n > tt->total - lo)
        return lf_fail(LF_ERR_INVALID_ARG, "lf_checkpoint_load: range [%zu, +%zu) outside the model", lo, n);

    lf_status s;
    pindex ix = {0};
    char *text = NULL;
    cJSON *state = NULL;
    lf_safetensors *ms = NULL, *os = NULL;
    const lf_st_tensor **found = NULL;
    problems *pr = NULL;
    char path[CK_PATH_MAX], what[CK_PATH_MAX + 64];

    if ((s = lf__ck_table_check("checkpoint load", tt, &ix)) != LF_OK) goto done;
    if ((s = lf__ck_path_join(path, dir, CK_STATE_FILE)) != LF_OK) goto done;
    if ((s = lf_file_read_all(path, CK_STATE_CAP, &text, NULL)) != LF_OK) {
        lf_error_prefix("checkpoint '%s'", dir);
        goto done;
    }
    state = cJSON_Parse(text);
    if (!cJSON_IsObject(state)) {
        s = lf_fail(LF_ERR_FORMAT, "checkpoint '%s': %s is not a JSON object", dir, CK_STATE_FILE);
        goto done;
    }
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(state, "files");
    if (!cJSON_IsObject(files)) {
        s = lf_fail(LF_ERR_FORMAT, "checkpoint '%s': %s has no \"files\" object", dir, CK_STATE_FILE);
        goto done;
    }
    if (!cJSON_GetObjectItemCaseSensitive(files, CK_MODEL_FILE)) {
        s = lf_fail(LF_ERR_FORMAT, "checkpoint '%s': %s does not list %s", dir, CK_STATE_FILE, CK_MODEL_FILE);
        goto done;
    }
    if (m && !cJSON_GetObjectItemCaseSensitive(files, CK_OPTIM_FILE)) {
        s = lf_fail(LF_ERR_NOT_FOUND, "checkpoint '%s' holds no optimizer state (%s)", dir, CK_OPTIM_FILE);
        goto done;
    }
    if (verify && (s = verify_files(dir, files, 1, NULL)) != LF_OK) goto done;

    found = calloc(3 * (size_t)tt->count, sizeof *found);
    pr = calloc(1, sizeof *pr);
    if (!found || !pr) {
        s = lf_fail(LF_ERR_NOMEM, "checkpoint load: out of memory");
        goto done;
    }
    if ((s = lf__ck_path_join(path, dir, CK_MODEL_FILE)) != LF_OK || (s = lf_safetensors_open(&ms, path)) != LF_OK)
        goto done;
    slot ms_slot = {"", found};
    match_tensors(ms, tt, &ix, &ms_slot, 1, 0, pr);
    if (problems_any(pr)) {
        snprintf(what, sizeof what, "checkpoint '%s': %s", dir, CK_MODEL_FILE);
        s = problems_fail(pr, what);
        goto done;
    }
    if (m) {
        if ((s = lf__ck_path_join(path, dir, CK_OPTIM_FILE)) != LF_OK || (s = lf_safetensors_open(&os, path)) != LF_OK)
            goto done;
        slot os_slots[2] = {{CK_M_PREFIX, found + tt->count}, {CK_V_PREFIX, found + 2 * (size_t)tt->count}};
        match_tensors(os, tt, &ix, os_slots, 2, 0, pr);
        if (problems_any(pr)) {
            snprintf(what, sizeof what, "checkpoint '%s': %s", dir, CK_OPTIM_FILE);
            s = problems_fail(pr, what);
            goto done;
        }
    }

    /* everything verified: now write the caller's buffers */
    if (params) copy_found(tt, found, lo, n, params);
    if (m) {
        copy_found(tt, found + tt->count, lo, n, m);
        copy_found(tt, found + 2 * (size_t)tt->count, lo, n, v);
    }
    if (state_json) {
        *state_json = text;
        text = NULL;
    }

done:
    lf_safetensors_close(os);
    lf_safetensors_close(ms);
    free(pr);
    free(found);
    cJSON_Delete(state);
    lf_free(text);
    free(ix.by_name);
    return s;
}

lf_status lf_weights_load(const char *path, const lf_ckpt_tensors *tt, float *params) {
    if (!path || !params) return lf_fail(LF_ERR_INVALID_ARG, "lf_weights_load: path or params is NULL");
    pindex ix = {0};
    lf_safetensors *st = NULL;
    const lf_st_tensor **found = NULL;
    problems *pr = NULL;
    lf_status s = lf__ck_table_check("weights load", tt, &ix);
    if (s != LF_OK) goto done;
    if ((s = lf_safetensors_open(&st, path)) != LF_OK) goto done;
    found = calloc((size_t)tt->count, sizeof *found);
    pr = calloc(1, sizeof *pr);
    if (!found || !pr) {
        s = lf_fail(LF_ERR_NOMEM, "weights load: out of memory");
        goto done;
    }
    slot sl = {"", found};
    match_tensors(st, tt, &ix, &sl, 1, 1, pr);
    if (problems_any(pr)) {
        char what[CK_PATH_MAX + 32];
        snprintf(what, sizeof what, "weights '%s'", path);
        s = problems_fail(pr, what);
        goto done;
    }
    copy_found(tt, found, 0, tt->total, params);
done:
    free(pr);
    free(found);
    lf_safetensors_close(st);
    free(ix.by_name);
    return s;
}
