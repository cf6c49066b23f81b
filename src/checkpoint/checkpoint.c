/*
 * Checkpoints: save (crash-safe), resolve, load (verified), and loading
 * Hugging Face GPT-2 weights. The layout is specified in
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
#include "core/io_impl.h"
#include "llmforge/checkpoint.h"
#include "llmforge/safetensors.h"

#define CK_PATH_MAX 4096
#define CK_STATE_CAP ((size_t)256 << 20) /* trainer_state.json holds a resolved config, not tensors */
#define CK_MODEL_FILE "model.safetensors"
#define CK_OPTIM_FILE "optimizer.safetensors"
#define CK_STATE_FILE "trainer_state.json"
#define CK_M_PREFIX "exp_avg."
#define CK_V_PREFIX "exp_avg_sq."
#define HF_PREFIX "transformer."

/* ---------------------------------------------------------------- helpers */

static lf_status path_join(char *out, const char *a, const char *b) {
    int n = snprintf(out, CK_PATH_MAX, "%s/%s", a, b);
    if (n < 0 || n >= CK_PATH_MAX) return lf_fail(LF_ERR_INVALID_ARG, "path '%s/%s' is too long", a, b);
    return LF_OK;
}

/* Copy `in` without trailing slashes (but keep "/"). */
static lf_status path_norm(char *out, const char *in) {
    size_t n = strlen(in);
    if (n == 0) return lf_fail(LF_ERR_INVALID_ARG, "empty path");
    if (n >= CK_PATH_MAX) return lf_fail(LF_ERR_INVALID_ARG, "path '%.200s...' is too long", in);
    memcpy(out, in, n + 1);
    while (n > 1 && out[n - 1] == '/') out[--n] = 0;
    return LF_OK;
}

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static int starts_with(const char *s, const char *pre) { return strncmp(s, pre, strlen(pre)) == 0; }

static int ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && strcmp(s + n - k, suf) == 0;
}

static char *dup_lf(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = lf_alloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

static int is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int is_file(const char *p) {
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

/* ---------------------------------------------------------------- parameter table */

typedef struct {
    const lf_param_info **by_name;
    int n;
} pindex;

static int cmp_param_name(const void *a, const void *b) {
    return strcmp((*(const lf_param_info *const *)a)->name, (*(const lf_param_info *const *)b)->name);
}

static const lf_param_info *pindex_find(const pindex *ix, const char *name) {
    if (strlen(name) >= LF_PARAM_NAME_MAX) return NULL;
    lf_param_info key;
    strcpy(key.name, name);
    const lf_param_info *kp = &key;
    const lf_param_info **hit = bsearch(&kp, ix->by_name, (size_t)ix->n, sizeof *ix->by_name, cmp_param_name);
    return hit ? *hit : NULL;
}

/* Checks the table against the buffers and builds the name index. */
static lf_status table_check(const char *what, const lf_ckpt_tensors *tt, pindex *ix) {
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

/* ---------------------------------------------------------------- tensor matching */

typedef struct {
    msglist missing, unexpected, shape, dtype, dup;
} problems;

typedef struct {
    const char *prefix;         /* names in the file are prefix + param name */
    const lf_st_tensor **found; /* per table entry, NULL = missing */
} slot;

/* HF GPT-2 buffers that are not parameters (checkpoint.h: lf_weights_load). */
static int hf_ignorable(const char *name, const lf_st_tensor *t) {
    if (strcmp(name, "lm_head.weight") == 0) return 1;
    if (ends_with(name, ".attn.masked_bias")) return 1;
    if (ends_with(name, ".attn.bias") && t->ndim == 4) return 1;
    return 0;
}

/* Match every tensor of `st` against the table through the slots; hf enables
 * the "transformer." prefix and the HF buffers above. */
static void match_tensors(const lf_safetensors *st, const lf_ckpt_tensors *tt, const pindex *ix, slot *slots,
                          int nslots, int hf, problems *pr) {
    int n = lf_safetensors_count(st);
    for (int i = 0; i < n; i++) {
        const lf_st_tensor *t = lf_safetensors_at(st, i);
        const char *name = t->name;
        if (hf && starts_with(name, HF_PREFIX)) name += strlen(HF_PREFIX);
        int matched = 0;
        for (int k = 0; k < nslots && !matched; k++) {
            if (!starts_with(name, slots[k].prefix)) continue;
            const lf_param_info *p = pindex_find(ix, name + strlen(slots[k].prefix));
            if (!p) continue;
            matched = 1;
            size_t j = (size_t)(p - tt->table);
            if (slots[k].found[j])
                msg_add(&pr->dup, "'%s' and '%s'", slots[k].found[j]->name, t->name);
            else
                slots[k].found[j] = t;
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

/* ---------------------------------------------------------------- save */

/* The safetensors description of the table (names prefix + param name), in
 * table order: the data region is then the flat buffer itself, so flat
 * element i of the buffer lies at data_start + 4i. */
static lf_status describe(const lf_ckpt_tensors *tt, const char *prefix, lf_st_tensor *ts) {
    for (int i = 0; i < tt->count; i++) {
        const lf_param_info *p = &tt->table[i];
        lf_st_tensor *t = &ts[i];
        memset(t, 0, sizeof *t);
        int k = snprintf(t->name, sizeof t->name, "%s%s", prefix, p->name);
        if (k < 0 || (size_t)k >= sizeof t->name)
            return lf_fail(LF_ERR_INVALID_ARG, "tensor name '%s%s' is too long", prefix, p->name);
        if (i > 0 && p->offset != tt->table[i - 1].offset + tt->table[i - 1].numel)
            return lf_fail(LF_ERR_INVALID_ARG, "checkpoint: parameter '%s' does not follow the one before it in "
                           "the flat buffer", p->name);
        t->dtype = LF_ST_F32;
        t->ndim = p->ndim;
        for (int d = 0; d < p->ndim; d++) t->shape[d] = p->shape[d];
        t->numel = p->numel;
        t->nbytes = p->numel * sizeof(float);
    }
    return tt->count > 0 && tt->table[0].offset == 0 ? LF_OK
                                                     : lf_fail(LF_ERR_INVALID_ARG, "checkpoint: the table does not start "
                                                               "at offset 0");
}

/* model.safetensors and (with_optim) optimizer.safetensors, header only,
 * at full size: the ranks fill the data regions (lf_checkpoint_write_slice). */
static lf_status create_tensor_files(const char *dir, const lf_ckpt_tensors *tt, int with_optim) {
    lf_st_tensor *ts = malloc(2 * (size_t)tt->count * sizeof *ts);
    if (!ts) return lf_fail(LF_ERR_NOMEM, "checkpoint save: out of memory");
    char file[CK_PATH_MAX];
    static const char *const model_meta[] = {"format", "pt"};
    lf_status s = describe(tt, "", ts);
    if (s == LF_OK) s = path_join(file, dir, CK_MODEL_FILE);
    if (s == LF_OK) s = lf_safetensors_create(file, ts, tt->count, model_meta, 1, NULL);
    if (s == LF_OK && with_optim) { /* both moments in one file: exp_avg.* then exp_avg_sq.* */
        s = describe(tt, CK_M_PREFIX, ts);
        if (s == LF_OK) s = describe(tt, CK_V_PREFIX, ts + tt->count);
        if (s == LF_OK) s = path_join(file, dir, CK_OPTIM_FILE);
        if (s == LF_OK) s = lf_safetensors_create(file, ts, 2 * tt->count, NULL, 0, NULL);
    }
    free(ts);
    return s;
}

/* pwrite all of buf at off. */
static lf_status pwrite_all(int fd, const char *path, const void *buf, size_t len, size_t off) {
    const unsigned char *p = buf;
    while (len > 0) {
        size_t chunk = len > ((size_t)1 << 30) ? ((size_t)1 << 30) : len;
        ssize_t w = lf__io_pwrite(fd, p, chunk, (off_t)off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return lf_fail(LF_ERR_IO, "cannot write '%s': %s", path, w < 0 ? strerror(errno) : "no progress");
        p += w;
        len -= (size_t)w;
        off += (size_t)w;
    }
    return LF_OK;
}

/* Write flat elements [lo, lo+n) of k buffers (laid one after another in the
 * file, each `total` floats) into a file made by create_tensor_files. */
static lf_status write_ranges(const char *path, size_t total, size_t lo, size_t n, const float *const *bufs, int k) {
    int fd = lf__io_open(path, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0)
        return lf_fail(errno == ENOENT ? LF_ERR_NOT_FOUND : LF_ERR_IO, "cannot open '%s' for writing: %s", path,
                       strerror(errno));
    uint64_t hlen = 0;
    struct stat sb;
    lf_status s = LF_OK;
    if (pread(fd, &hlen, 8, 0) != 8 || fstat(fd, &sb) != 0 || hlen > ((uint64_t)100 << 20) ||
        (uint64_t)sb.st_size != 8 + hlen + (uint64_t)k * total * sizeof(float))
        s = lf_fail(LF_ERR_FORMAT, "'%s' is not the checkpoint file this save created (header or size differs)", path);
    for (int i = 0; i < k && s == LF_OK; i++)
        s = pwrite_all(fd, path, bufs[i], n * sizeof(float), 8 + (size_t)hlen + ((size_t)i * total + lo) * sizeof(float));
    if (s == LF_OK && lf__io_fsync(fd) != 0) s = lf_fail(LF_ERR_IO, "fsync of '%s' failed: %s", path, strerror(errno));
    if (lf__io_close(fd) != 0 && s == LF_OK) s = lf_fail(LF_ERR_IO, "close of '%s' failed: %s", path, strerror(errno));
    return s;
}

static lf_status add_file_entry(cJSON *files, const char *dir, const char *name) {
    char path[CK_PATH_MAX];
    lf_status s = path_join(path, dir, name);
    if (s != LF_OK) return s;
    char hex[65];
    s = lf_sha256_file_hex(path, hex);
    if (s != LF_OK) return s;
    struct stat sb;
    if (stat(path, &sb) != 0) return lf_fail(LF_ERR_IO, "cannot stat '%s': %s", path, strerror(errno));
    cJSON *e = cJSON_CreateObject();
    if (!e || !cJSON_AddItemToObject(files, name, e)) {
        cJSON_Delete(e);
        return lf_fail(LF_ERR_NOMEM, "out of memory building trainer_state.json");
    }
    if (!cJSON_AddStringToObject(e, "sha256", hex) || !cJSON_AddNumberToObject(e, "bytes", (double)sb.st_size))
        return lf_fail(LF_ERR_NOMEM, "out of memory building trainer_state.json");
    return LF_OK;
}

/* Move tmp into place as final (replacing an existing final atomically where
 * the kernel can). */
static lf_status install_dir(const char *root, const char *tmp, const char *final, const char *name) {
    if (lf__io_rename(tmp, final) == 0) return LF_OK;
    if (errno != EEXIST && errno != ENOTEMPTY)
        return lf_fail(LF_ERR_IO, "cannot rename '%s' to '%s': %s", tmp, final, strerror(errno));
    if (!is_dir(final)) return lf_fail(LF_ERR_IO, "'%s' exists and is not a directory", final);
#ifdef RENAME_EXCHANGE
    if (lf__io_renameat2(tmp, final, RENAME_EXCHANGE) == 0) {
        /* tmp now holds the old checkpoint */
        if (lf_remove_tree(tmp) != 0)
            lf_log(LF_LOG_WARN, "cannot remove replaced checkpoint '%s': %s", tmp, strerror(errno));
        return LF_OK;
    }
    if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP)
        return lf_fail(LF_ERR_IO, "cannot exchange '%s' and '%s': %s", tmp, final, strerror(errno));
#endif
    char old[CK_PATH_MAX], oname[CK_PATH_MAX];
    snprintf(oname, sizeof oname, ".old_%s", name);
    lf_status s = path_join(old, root, oname);
    if (s != LF_OK) return s;
    lf_remove_tree(old);
    if (lf__io_rename(final, old) != 0)
        return lf_fail(LF_ERR_IO, "cannot move '%s' aside to '%s': %s", final, old, strerror(errno));
    if (lf__io_rename(tmp, final) != 0) {
        int e = errno;
        if (rename(old, final) != 0) { /* put the old one back; nothing more to do if that fails too */
        }
        return lf_fail(LF_ERR_IO, "cannot rename '%s' to '%s': %s", tmp, final, strerror(e));
    }
    if (lf_remove_tree(old) != 0) lf_log(LF_LOG_WARN, "cannot remove replaced checkpoint '%s': %s", old, strerror(errno));
    return LF_OK;
}

typedef struct {
    char name[256];
    long step;
} step_ent;

static int cmp_step_desc(const void *a, const void *b) {
    const step_ent *x = a, *y = b;
    if (x->step != y->step) return x->step > y->step ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* The step directories of root (by name, "step_<digits>", directories only),
 * newest first; stale temporaries (.tmp_step_*, .del_step_*, .old_step_*,
 * latest.tmp) are removed on the way when clean is set. *out: malloc'd
 * (free), NULL when there are none. -1 when root cannot be read (errno). */
static int list_steps(const char *root, int clean, step_ent **out, size_t *count) {
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

/* The step directory name `latest` holds ("" when it is missing or holds
 * no plain name). */
static void read_latest_name(const char *root, char *name, size_t cap) {
    name[0] = 0;
    char path[CK_PATH_MAX], buf[300];
    if (path_join(path, root, "latest") != LF_OK) return;
    FILE *f = fopen(path, "rb");
    if (!f) return;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *b = buf, *e = buf + n;
    while (b < e && (*b == ' ' || *b == '\t' || *b == '\n' || *b == '\r')) b++;
    while (e > b && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r')) e--;
    *e = 0;
    if (b < e && !strchr(b, '/') && (size_t)(e - b) < cap) memcpy(name, b, (size_t)(e - b) + 1);
}

static int step_dir_has_state(const char *root, const char *name) {
    char dir[CK_PATH_MAX], st[CK_PATH_MAX];
    return path_join(dir, root, name) == LF_OK && path_join(st, dir, CK_STATE_FILE) == LF_OK && is_file(st);
}

/* Retention (checkpoint.h: lf_checkpoint_prune): with `incoming` counted
 * among the step directories whether or not it exists yet, keep the newest
 * keep_last (<= 0: all), every multiple of keep_every (> 0), the directory
 * `latest` names (when it names none that exists: the newest other step
 * directory holding a trainer_state.json, what resolve falls back to),
 * `protect`, and `incoming` itself; remove the rest (each
 * renamed to .del_* first, so a half-removed directory never looks like a
 * checkpoint). Failures are logged; returns the number removed. */
static int prune(const char *root, long incoming, int keep_last, long keep_every, const char *protect) {
    char prot[CK_PATH_MAX] = "", latest[256];
    if (protect && *protect && path_norm(prot, protect) == LF_OK)
        memmove(prot, base_name(prot), strlen(base_name(prot)) + 1);
    step_ent *ents = NULL;
    size_t n = 0;
    if (list_steps(root, 1, &ents, &n) != 0) {
        if (errno != ENOENT) lf_log(LF_LOG_WARN, "checkpoint rotation: cannot read '%s': %s", root, strerror(errno));
        return 0;
    }
    read_latest_name(root, latest, sizeof latest);
    if (!latest[0] || !step_dir_has_state(root, latest)) {
        /* latest is missing or broken (a crash, ENOSPC at latest.tmp): what resolve falls back to, the
         * newest step directory with a trainer_state.json, is the one to keep instead */
        latest[0] = 0;
        for (size_t i = 0; i < n && !latest[0]; i++)
            if (ents[i].step != incoming && step_dir_has_state(root, ents[i].name))
                snprintf(latest, sizeof latest, "%s", ents[i].name);
    }
    int removed = 0;
    size_t rank = 0; /* position among the step directories, `incoming` included */
    int incoming_counted = 0;
    for (size_t i = 0; i < n; i++) {
        if (!incoming_counted && incoming >= 0 && ents[i].step <= incoming) {
            incoming_counted = 1;
            if (ents[i].step < incoming) rank++; /* not on disk yet: it takes a place of its own */
        }
        const char *nm = ents[i].name;
        size_t my_rank = rank++;
        int keep = keep_last <= 0 || my_rank < (size_t)keep_last || ents[i].step == incoming ||
                   (keep_every > 0 && ents[i].step % keep_every == 0) || !strcmp(nm, latest) || !strcmp(nm, prot);
        if (keep) continue;
        char from[CK_PATH_MAX], to[CK_PATH_MAX], dname[CK_PATH_MAX];
        snprintf(dname, sizeof dname, ".del_%s", nm);
        if (path_join(from, root, nm) != LF_OK || path_join(to, root, dname) != LF_OK) continue;
        if (lf__io_rename(from, to) != 0 || lf_remove_tree(to) != 0)
            lf_log(LF_LOG_WARN, "checkpoint rotation: cannot remove '%s': %s", from, strerror(errno));
        else
            removed++;
    }
    free(ents);
    return removed;
}

int lf_checkpoint_prune(const char *ckpt_root, long step, const lf_ckpt_retention *r) {
    char root[CK_PATH_MAX];
    if (!ckpt_root || !r || path_norm(root, ckpt_root) != LF_OK) return 0;
    return prune(root, step, r->keep_last, r->keep_every, r->protect);
}

/* The step directory's name and its tmp twin under the normalised root. */
static lf_status step_paths(const char *ckpt_root, long step, char *root, char *name, char *tmp, char *final) {
    lf_status s = path_norm(root, ckpt_root);
    if (s != LF_OK) return s;
    snprintf(name, 64, "step_%08ld", step);
    char tname[80];
    snprintf(tname, sizeof tname, ".tmp_%s", name);
    char probe[CK_PATH_MAX];
    if ((s = path_join(tmp, root, tname)) != LF_OK || (s = path_join(final, root, name)) != LF_OK ||
        (s = path_join(probe, tmp, CK_OPTIM_FILE)) != LF_OK) /* longest file path fits */
        return s;
    return LF_OK;
}

lf_status lf_checkpoint_begin(const char *ckpt_root, long step, const lf_ckpt_tensors *tt, int with_optim,
                              char **tmp_dir) {
    *tmp_dir = NULL;
    if (!ckpt_root || step < 0) return lf_fail(LF_ERR_INVALID_ARG, "lf_checkpoint_begin: no root or negative step");
    pindex ix = {0};
    lf_status s = table_check("checkpoint save", tt, &ix);
    free(ix.by_name);
    if (s != LF_OK) return s;
    char root[CK_PATH_MAX], name[64], tmp[CK_PATH_MAX], final[CK_PATH_MAX];
    if ((s = step_paths(ckpt_root, step, root, name, tmp, final)) != LF_OK) return s;
    if ((s = lf_mkdirs(root)) != LF_OK) {
        lf_error_prefix("checkpoint root '%s'", root);
        return s;
    }
    if (lf_remove_tree(tmp) != 0) return lf_fail(LF_ERR_IO, "cannot remove stale '%s': %s", tmp, strerror(errno));
    if (lf__io_mkdir(tmp, 0755) != 0) return lf_fail(LF_ERR_IO, "cannot create '%s': %s", tmp, strerror(errno));
    s = create_tensor_files(tmp, tt, with_optim);
    if (s == LF_OK && !(*tmp_dir = dup_lf(tmp))) s = lf_fail(LF_ERR_NOMEM, "checkpoint save: out of memory");
    if (s != LF_OK) lf_remove_tree(tmp);
    return s;
}

lf_status lf_checkpoint_write_slice(const char *tmp_dir, const lf_ckpt_tensors *tt, size_t lo, size_t n,
                                    const float *params, const float *m, const float *v) {
    if (!tmp_dir || !tt || lo > tt->total || n > tt->total - lo || (n && !params) || ((m == NULL) != (v == NULL)))
        return lf_fail(LF_ERR_INVALID_ARG, "lf_checkpoint_write_slice: bad arguments");
    if (n == 0) return LF_OK;
    char file[CK_PATH_MAX];
    lf_status s = path_join(file, tmp_dir, CK_MODEL_FILE);
    const float *pb[1] = {params}, *ob[2] = {m, v};
    if (s == LF_OK) s = write_ranges(file, tt->total, lo, n, pb, 1);
    if (s == LF_OK && m && (s = path_join(file, tmp_dir, CK_OPTIM_FILE)) == LF_OK)
        s = write_ranges(file, tt->total, lo, n, ob, 2);
    return s;
}

void lf_checkpoint_discard(const char *tmp_dir) {
    if (tmp_dir) lf_remove_tree(tmp_dir);
}

lf_status lf_checkpoint_commit(const char *ckpt_root, long step, const char *tmp_dir, const char *state_json,
                               const lf_ckpt_file *extra, int n_extra, int keep_last, const char *protect,
                               char **saved_dir) {
    if (saved_dir) *saved_dir = NULL;
    if (!ckpt_root || !tmp_dir || !state_json || step < 0)
        return lf_fail(LF_ERR_INVALID_ARG, "lf_checkpoint_commit: missing root, directory or state, or negative step");
    for (int i = 0; i < n_extra; i++) {
        const char *en = extra[i].name;
        if (!en || !*en || strchr(en, '/') || en[0] == '.' || strlen(en) > 128 || !strcmp(en, CK_MODEL_FILE) ||
            !strcmp(en, CK_OPTIM_FILE) || !strcmp(en, CK_STATE_FILE) || (!extra[i].data && extra[i].len))
            return lf_fail(LF_ERR_INVALID_ARG, "lf_checkpoint_save: bad extra file name '%s'", en ? en : "(null)");
    }
    lf_status s = LF_OK;
    cJSON *state = NULL;
    char *text = NULL;
    char root[CK_PATH_MAX], name[64], tmp[CK_PATH_MAX], final[CK_PATH_MAX], file[CK_PATH_MAX];
    if ((s = step_paths(ckpt_root, step, root, name, tmp, final)) != LF_OK) goto done;
    if (strcmp(tmp, tmp_dir) != 0) {
        s = lf_fail(LF_ERR_INVALID_ARG, "lf_checkpoint_commit: '%s' is not the directory begun for step %ld", tmp_dir,
                    step);
        goto done;
    }
    state = cJSON_Parse(state_json);
    if (!cJSON_IsObject(state)) {
        s = lf_fail(LF_ERR_INVALID_ARG, "checkpoint save: state_json is not a JSON object");
        goto done;
    }
    cJSON_DeleteItemFromObjectCaseSensitive(state, "files");
    cJSON *files = cJSON_AddObjectToObject(state, "files");
    if (!files) {
        s = lf_fail(LF_ERR_NOMEM, "checkpoint save: out of memory");
        goto done;
    }
    if ((s = add_file_entry(files, tmp, CK_MODEL_FILE)) != LF_OK) goto done;
    if ((s = path_join(file, tmp, CK_OPTIM_FILE)) != LF_OK) goto done;
    if (is_file(file) && (s = add_file_entry(files, tmp, CK_OPTIM_FILE)) != LF_OK) goto done;
    for (int i = 0; i < n_extra; i++) {
        char epath[CK_PATH_MAX + 160];
        snprintf(epath, sizeof epath, "%s/%s", tmp, extra[i].name);
        if ((s = lf_file_write_all(epath, extra[i].data, extra[i].len)) != LF_OK) goto done;
        if ((s = add_file_entry(files, tmp, extra[i].name)) != LF_OK) goto done;
    }
    text = lf_json_print(state, 1); /* the trainer's numbers read back exactly */
    if (!text) {
        s = lf_fail(LF_ERR_NOMEM, "checkpoint save: out of memory printing trainer_state.json");
        goto done;
    }
    path_join(file, tmp, CK_STATE_FILE);
    if ((s = lf_file_write_all(file, text, strlen(text))) != LF_OK) goto done;
    if ((s = lf_fsync_dir(tmp)) != LF_OK) goto done;

    if ((s = install_dir(root, tmp, final, name)) != LF_OK) goto done;
    if ((s = lf_fsync_dir(root)) != LF_OK) goto done;

    char latest[CK_PATH_MAX], latest_tmp[CK_PATH_MAX], line[80];
    if ((s = path_join(latest, root, "latest")) != LF_OK || (s = path_join(latest_tmp, root, "latest.tmp")) != LF_OK)
        goto done;
    int ln = snprintf(line, sizeof line, "%s\n", name);
    if ((s = lf_file_write_all(latest_tmp, line, (size_t)ln)) != LF_OK) goto done;
    if (lf__io_rename(latest_tmp, latest) != 0) {
        s = lf_fail(LF_ERR_IO, "cannot rename '%s' to '%s': %s", latest_tmp, latest, strerror(errno));
        unlink(latest_tmp);
        goto done;
    }
    if ((s = lf_fsync_dir(root)) != LF_OK) goto done;

    prune(root, step, keep_last, 0, protect);

    if (saved_dir) {
        *saved_dir = dup_lf(final);
        if (!*saved_dir) s = lf_fail(LF_ERR_NOMEM, "checkpoint save: out of memory");
    }

done:
    if (s != LF_OK && is_dir(tmp_dir)) lf_remove_tree(tmp_dir);
    cJSON_free(text);
    cJSON_Delete(state);
    return s;
}

lf_status lf_checkpoint_save(const char *ckpt_root, long step, const lf_ckpt_tensors *tt, const float *params,
                             const float *m, const float *v, const char *state_json, const lf_ckpt_file *extra,
                             int n_extra, int keep_last, const char *protect, char **saved_dir) {
    if (saved_dir) *saved_dir = NULL;
    if (!ckpt_root || !params || !state_json || step < 0)
        return lf_fail(LF_ERR_INVALID_ARG, "lf_checkpoint_save: missing root, params or state, or negative step");
    if ((m == NULL) != (v == NULL))
        return lf_fail(LF_ERR_INVALID_ARG, "lf_checkpoint_save: give both optimizer moments or neither");
    char *tmp = NULL;
    lf_status s = lf_checkpoint_begin(ckpt_root, step, tt, m != NULL, &tmp);
    if (s != LF_OK) return s;
    s = lf_checkpoint_write_slice(tmp, tt, 0, tt->total, params, m, v);
    if (s == LF_OK)
        s = lf_checkpoint_commit(ckpt_root, step, tmp, state_json, extra, n_extra, keep_last, protect, saved_dir);
    else
        lf_checkpoint_discard(tmp);
    lf_free(tmp);
    return s;
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
        lf_status s = path_join(path, dir, nm);
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
    lf_status s = path_join(path, dir, CK_STATE_FILE);
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
    else
        s = verify_files(dir, files, hash, n_files);
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
        s = lf_fail(LF_ERR_FORMAT, "'%s' does not hold a step directory name%s", latest_path, len ? "" : " (it is empty)");
        goto done;
    }
    char path[CK_PATH_MAX], st[CK_PATH_MAX];
    if ((s = path_join(path, root, b)) != LF_OK || (s = path_join(st, path, CK_STATE_FILE)) != LF_OK) goto done;
    if (!is_file(st)) {
        s = lf_fail(LF_ERR_NOT_FOUND, "'%s' names '%s', which holds no %s", latest_path, b, CK_STATE_FILE);
        goto done;
    }
    if ((s = check_dir(path, 0, NULL)) != LF_OK) { /* a file missing or of the wrong size */
        lf_error_prefix("'%s' names an incomplete checkpoint", latest_path);
        goto done;
    }
    *dir = dup_lf(path);
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
    lf_status s = path_join(latest, root, "latest");
    if (s != LF_OK) return s;
    lf_status first = LF_ERR_NOT_FOUND;
    if (is_file(latest)) {
        if ((first = follow_latest(root, latest, dir)) == LF_OK) return LF_OK;
        snprintf(why, sizeof why, "%s", lf_last_error());
        if (flags & LF_CKPT_RESOLVE_STRICT) return first;
    } else {
        snprintf(why, sizeof why, "'%s' is missing", latest);
        if (flags & LF_CKPT_RESOLVE_STRICT)
            return lf_fail(LF_ERR_NOT_FOUND, "no checkpoint in '%s': %s", root, why);
    }
    step_ent *ents = NULL;
    size_t n = 0;
    if (list_steps(root, 0, &ents, &n) != 0)
        return lf_fail(errno == ENOENT ? LF_ERR_NOT_FOUND : LF_ERR_IO, "checkpoint root '%s': %s", root, strerror(errno));
    char rejected[512] = "";
    size_t rl = 0;
    for (size_t i = 0; i < n; i++) {
        char path[CK_PATH_MAX];
        if (path_join(path, root, ents[i].name) != LF_OK) continue;
        if (check_dir(path, 1, NULL) != LF_OK) {
            if (rl < sizeof rejected)
                rl += (size_t)snprintf(rejected + rl, sizeof rejected - rl, "%s%s", rl ? ", " : "", ents[i].name);
            continue;
        }
        free(ents);
        lf_log(LF_LOG_WARN, "checkpoint root '%s': %s; using '%s', the newest step directory whose every file "
               "matches its SHA-256%s%s%s", root, why, path, rl ? " (incomplete: " : "", rejected, rl ? ")" : "");
        *dir = dup_lf(path);
        return *dir ? LF_OK : lf_fail(LF_ERR_NOMEM, "out of memory");
    }
    free(ents);
    if (first != LF_ERR_NOT_FOUND && is_file(latest))
        return lf_fail(first, "%s; and no step directory of '%s' is complete%s%s", why, root, rl ? ": " : "", rejected);
    if (rl) /* damaged checkpoints are not "no checkpoint" (--resume auto must not start over on them) */
        return lf_fail(LF_ERR_CHECKSUM, "no complete checkpoint in '%s' (%s; incomplete: %s)", root, why, rejected);
    return lf_fail(LF_ERR_NOT_FOUND, "no checkpoint in '%s' (%s, and no step directory)", root, why);
}

/* A directory that is a checkpoint root: it holds `latest` or a step directory. */
static int looks_like_root(const char *p) {
    char a[CK_PATH_MAX];
    if (path_join(a, p, "latest") == LF_OK && is_file(a)) return 1;
    step_ent *ents = NULL;
    size_t n = 0;
    if (list_steps(p, 0, &ents, &n) != 0) return 0;
    free(ents);
    return n > 0;
}

lf_status lf_checkpoint_resolve_flags(const char *path, unsigned flags, char **dir) {
    if (!dir) return lf_fail(LF_ERR_INVALID_ARG, "lf_checkpoint_resolve: dir is NULL");
    *dir = NULL;
    if (!path) return lf_fail(LF_ERR_INVALID_ARG, "lf_checkpoint_resolve: path is NULL");
    char p[CK_PATH_MAX], a[CK_PATH_MAX], b[CK_PATH_MAX];
    lf_status s = path_norm(p, path);
    if (s != LF_OK) return s;
    struct stat sb;
    if (stat(p, &sb) != 0)
        return lf_fail(errno == ENOENT ? LF_ERR_NOT_FOUND : LF_ERR_IO, "checkpoint '%s': %s", p, strerror(errno));
    if (S_ISREG(sb.st_mode)) {
        if (strcmp(base_name(p), "latest") != 0)
            return lf_fail(LF_ERR_NOT_FOUND, "checkpoint '%s' is a file, neither a directory nor 'latest'", p);
        memcpy(a, p, strlen(p) + 1);
        char *slash = strrchr(a, '/');
        if (!slash)
            strcpy(a, ".");
        else if (slash == a)
            a[1] = 0;
        else
            *slash = 0;
        return resolve_root(a, flags, dir);
    }
    if (!S_ISDIR(sb.st_mode)) return lf_fail(LF_ERR_NOT_FOUND, "checkpoint '%s' is not a directory", p);
    if ((s = path_join(a, p, CK_STATE_FILE)) != LF_OK) return s;
    if (is_file(a)) { /* a step directory */
        *dir = dup_lf(p);
        return *dir ? LF_OK : lf_fail(LF_ERR_NOMEM, "out of memory");
    }
    if (looks_like_root(p)) return resolve_root(p, flags, dir); /* a checkpoint root */
    if ((s = path_join(b, p, "ckpt")) != LF_OK) return s;
    if (is_dir(b) && looks_like_root(b)) return resolve_root(b, flags, dir); /* a run directory */
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

    if ((s = table_check("checkpoint load", tt, &ix)) != LF_OK) goto done;
    if ((s = path_join(path, dir, CK_STATE_FILE)) != LF_OK) goto done;
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
    if ((s = path_join(path, dir, CK_MODEL_FILE)) != LF_OK || (s = lf_safetensors_open(&ms, path)) != LF_OK) goto done;
    slot ms_slot = {"", found};
    match_tensors(ms, tt, &ix, &ms_slot, 1, 0, pr);
    if (problems_any(pr)) {
        snprintf(what, sizeof what, "checkpoint '%s': %s", dir, CK_MODEL_FILE);
        s = problems_fail(pr, what);
        goto done;
    }
    if (m) {
        if ((s = path_join(path, dir, CK_OPTIM_FILE)) != LF_OK || (s = lf_safetensors_open(&os, path)) != LF_OK)
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
    lf_status s = table_check("weights load", tt, &ix);
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
