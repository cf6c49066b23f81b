/*
 * Writing checkpoints (checkpoint.h): the save protocol of checkpoint.c's
 * header (temporary directory, fsync, rename, `latest` replaced
 * atomically), the sharded write (begin / write_slice / commit, every rank
 * its shard), and retention (prune).
 *
 * Invariants: a crash at any point leaves either the previous state or the
 * new one, never a half-written directory that `latest` names; retention
 * never removes what `latest` names, `protect`, or the step being saved.
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
            return lf_fail(LF_ERR_INVALID_ARG,
                           "checkpoint: parameter '%s' does not follow the one before it in "
                           "the flat buffer",
                           p->name);
        t->dtype = LF_ST_F32;
        t->ndim = p->ndim;
        for (int d = 0; d < p->ndim; d++) t->shape[d] = p->shape[d];
        t->numel = p->numel;
        t->nbytes = p->numel * sizeof(float);
    }
    return tt->count > 0 && tt->table[0].offset == 0
               ? LF_OK
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
    if (s == LF_OK) s = lf__ck_path_join(file, dir, CK_MODEL_FILE);
    if (s == LF_OK) s = lf_safetensors_create(file, ts, tt->count, model_meta, 1, NULL);
    if (s == LF_OK && with_optim) { /* both moments in one file: exp_avg.* then exp_avg_sq.* */
        s = describe(tt, CK_M_PREFIX, ts);
        if (s == LF_OK) s = describe(tt, CK_V_PREFIX, ts + tt->count);
        if (s == LF_OK) s = lf__ck_path_join(file, dir, CK_OPTIM_FILE);
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
        s = pwrite_all(fd, path, bufs[i], n * sizeof(float),
                       8 + (size_t)hlen + ((size_t)i * total + lo) * sizeof(float));
    if (s == LF_OK && lf__io_fsync(fd) != 0) s = lf_fail(LF_ERR_IO, "fsync of '%s' failed: %s", path, strerror(errno));
    if (lf__io_close(fd) != 0 && s == LF_OK) s = lf_fail(LF_ERR_IO, "close of '%s' failed: %s", path, strerror(errno));
    return s;
}

static lf_status add_file_entry(cJSON *files, const char *dir, const char *name) {
    char path[CK_PATH_MAX];
    lf_status s = lf__ck_path_join(path, dir, name);
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
    if (!lf__ck_is_dir(final)) return lf_fail(LF_ERR_IO, "'%s' exists and is not a directory", final);
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
    lf_status s = lf__ck_path_join(old, root, oname);
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
    if (lf_remove_tree(old) != 0)
        lf_log(LF_LOG_WARN, "cannot remove replaced checkpoint '%s': %s", old, strerror(errno));
    return LF_OK;
}

/* The step directory name `latest` holds ("" when it is missing or holds
 * no plain name). */
static void read_latest_name(const char *root, char *name, size_t cap) {
    name[0] = 0;
    char path[CK_PATH_MAX], buf[300];
    if (lf__ck_path_join(path, root, "latest") != LF_OK) return;
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
    return lf__ck_path_join(dir, root, name) == LF_OK && lf__ck_path_join(st, dir, CK_STATE_FILE) == LF_OK &&
           lf__ck_is_file(st);
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
    if (protect && *protect && lf__ck_path_norm(prot, protect) == LF_OK)
        memmove(prot, lf__ck_base_name(prot), strlen(lf__ck_base_name(prot)) + 1);
    step_ent *ents = NULL;
    size_t n = 0;
    if (lf__ck_list_steps(root, 1, &ents, &n) != 0) {
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
        if (lf__ck_path_join(from, root, nm) != LF_OK || lf__ck_path_join(to, root, dname) != LF_OK) continue;
        if (lf__io_rename(from, to) != 0 || lf_remove_tree(to) != 0)
            lf_log(LF_LOG_WARN, "checkpoint rotation: cannot remove '%s': %s", from, strerror(errno));
        else removed++;
    }
    free(ents);
    return removed;
}

int lf_checkpoint_prune(const char *ckpt_root, long step, const lf_ckpt_retention *r) {
    char root[CK_PATH_MAX];
    if (!ckpt_root || !r || lf__ck_path_norm(root, ckpt_root) != LF_OK) return 0;
    return prune(root, step, r->keep_last, r->keep_every, r->protect);
}

/* The step directory's name and its tmp twin under the normalised root. */
static lf_status step_paths(const char *ckpt_root, long step, char *root, char *name, char *tmp, char *final) {
    lf_status s = lf__ck_path_norm(root, ckpt_root);
    if (s != LF_OK) return s;
    snprintf(name, 64, "step_%08ld", step);
    char tname[80];
    snprintf(tname, sizeof tname, ".tmp_%s", name);
    char probe[CK_PATH_MAX];
    if ((s = lf__ck_path_join(tmp, root, tname)) != LF_OK || (s = lf__ck_path_join(final, root, name)) != LF_OK ||
        (s = lf__ck_path_join(probe, tmp, CK_OPTIM_FILE)) != LF_OK) /* longest file path fits */
        return s;
    return LF_OK;
}

lf_status lf_checkpoint_begin(const char *ckpt_root, long step, const lf_ckpt_tensors *tt, int with_optim,
                              char **tmp_dir) {
    *tmp_dir = NULL;
    if (!ckpt_root || step < 0) return lf_fail(LF_ERR_INVALID_ARG, "lf_checkpoint_begin: no root or negative step");
    pindex ix = {0};
    lf_status s = lf__ck_table_check("checkpoint save", tt, &ix);
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
    if (s == LF_OK && !(*tmp_dir = lf__ck_dup(tmp))) s = lf_fail(LF_ERR_NOMEM, "checkpoint save: out of memory");
    if (s != LF_OK) lf_remove_tree(tmp);
    return s;
}

lf_status lf_checkpoint_write_slice(const char *tmp_dir, const lf_ckpt_tensors *tt, size_t lo, size_t n,
                                    const float *params, const float *m, const float *v) {
    if (!tmp_dir || !tt || lo > tt->total || n > tt->total - lo || (n && !params) || ((m == NULL) != (v == NULL)))
        return lf_fail(LF_ERR_INVALID_ARG, "lf_checkpoint_write_slice: bad arguments");
    if (n == 0) return LF_OK;
    char file[CK_PATH_MAX];
    lf_status s = lf__ck_path_join(file, tmp_dir, CK_MODEL_FILE);
    const float *pb[1] = {params}, *ob[2] = {m, v};
    if (s == LF_OK) s = write_ranges(file, tt->total, lo, n, pb, 1);
    if (s == LF_OK && m && (s = lf__ck_path_join(file, tmp_dir, CK_OPTIM_FILE)) == LF_OK)
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
    if ((s = lf__ck_path_join(file, tmp, CK_OPTIM_FILE)) != LF_OK) goto done;
    if (lf__ck_is_file(file) && (s = add_file_entry(files, tmp, CK_OPTIM_FILE)) != LF_OK) goto done;
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
    lf__ck_path_join(file, tmp, CK_STATE_FILE);
    if ((s = lf_file_write_all(file, text, strlen(text))) != LF_OK) goto done;
    if ((s = lf_fsync_dir(tmp)) != LF_OK) goto done;

    if ((s = install_dir(root, tmp, final, name)) != LF_OK) goto done;
    if ((s = lf_fsync_dir(root)) != LF_OK) goto done;

    char latest[CK_PATH_MAX], latest_tmp[CK_PATH_MAX], line[80];
    if ((s = lf__ck_path_join(latest, root, "latest")) != LF_OK ||
        (s = lf__ck_path_join(latest_tmp, root, "latest.tmp")) != LF_OK)
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
        *saved_dir = lf__ck_dup(final);
        if (!*saved_dir) s = lf_fail(LF_ERR_NOMEM, "checkpoint save: out of memory");
    }

done:
    if (s != LF_OK && lf__ck_is_dir(tmp_dir)) lf_remove_tree(tmp_dir);
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
    else lf_checkpoint_discard(tmp);
    lf_free(tmp);
    return s;
}
