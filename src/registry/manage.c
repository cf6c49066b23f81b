/*
 * Changing the registry on a person's request: tags, promotion behind
 * metric requirements, garbage collection of checkpoint directories, and
 * relinking checkpoints that moved on disk.
 *
 * Invariants:
 *  - gc never removes a tagged checkpoint, a run's newest checkpoint, nor
 *    the one its run directory's latest names (by the registry's flag and,
 *    at the moment of removal, by the ckpt/latest file on disk), and removes
 *    a directory only when the model hash its trainer_state.json records is
 *    the registry's (so a path reused by something else is left alone).
 *    Removal renames the directory to .del_<name> first, as the trainer's
 *    rotation does, so a half-removed directory never looks like a
 *    checkpoint.
 *  - Promotion decides on the metrics recorded when it runs, inside the
 *    transaction that moves the tag: a failing requirement tags nothing.
 *  - relink hashes what it finds (it trusts no recorded hash of a directory
 *    it has not seen), and only rewrites the path of a checkpoint whose
 *    recorded directory no longer holds it.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cjson/cJSON.h>
#include "registry/registry_impl.h"

#define RELINK_DEPTH 8

static int is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int is_file(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

static cJSON *id_str(char prefix, int64_t id) {
    char b[32];
    snprintf(b, sizeof b, "%c%lld", prefix, (long long)id);
    return cJSON_CreateString(b);
}

static lf_status ckpt_exists(lf_registry *r, int64_t id) {
    sqlite3_stmt *s = lf__reg_prepare(r, "SELECT 1 FROM checkpoints WHERE id = ?");
    if (!s) return r->last;
    sqlite3_bind_int64(s, 1, id);
    int rc = sqlite3_step(s);
    sqlite3_finalize(s);
    if (rc == SQLITE_ROW) return LF_OK;
    if (rc == SQLITE_DONE)
        return lf_fail(LF_ERR_NOT_FOUND, "registry '%s': no checkpoint c%lld", r->path, (long long)id);
    return lf__reg_fail(r, "cannot read a checkpoint");
}

/* ---------------------------------------------------------------- tags */

static lf_status check_tag(const char *name) {
    if (!name || !*name || strlen(name) > 64)
        return lf_fail(LF_ERR_INVALID_ARG, "tag '%s' must be 1 to 64 bytes", name ? name : "(null)");
    for (const char *p = name; *p; p++) {
        char c = *p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("._-:/@+", c)))
            return lf_fail(LF_ERR_INVALID_ARG, "tag '%s': character '%c' is not a letter, digit or one of ._-:/@+",
                           name, c);
    }
    if ((name[0] == 'c' || name[0] == 'r') && name[1] && strspn(name + 1, "0123456789") == strlen(name + 1))
        return lf_fail(LF_ERR_INVALID_ARG, "tag '%s' would read as a checkpoint or run id", name);
    return LF_OK;
}

static lf_status tag_locked(lf_registry *r, int64_t ckpt, const char *name, int move) {
    lf_status st = ckpt_exists(r, ckpt);
    if (st != LF_OK) return st;
    if (move) {
        sqlite3_stmt *s = lf__reg_prepare(r, "DELETE FROM tags WHERE name = ? AND ckpt_id != ?");
        if (!s) return r->last;
        sqlite3_bind_text(s, 1, name, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(s, 2, ckpt);
        int rc = sqlite3_step(s);
        sqlite3_finalize(s);
        if (rc != SQLITE_DONE) return lf__reg_fail(r, "cannot move a tag");
    }
    sqlite3_stmt *s = lf__reg_prepare(r, "INSERT OR IGNORE INTO tags (ckpt_id, name, created) VALUES (?, ?, ?)");
    if (!s) return r->last;
    sqlite3_bind_int64(s, 1, ckpt);
    sqlite3_bind_text(s, 2, name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_double(s, 3, lf__reg_now());
    int rc = sqlite3_step(s);
    sqlite3_finalize(s);
    return rc == SQLITE_DONE ? LF_OK : lf__reg_fail(r, "cannot tag");
}

lf_status lf_registry_tag(lf_registry *r, int64_t ckpt, const char *name, int move) {
    if (!r) return lf_fail(LF_ERR_INVALID_ARG, "lf_registry_tag: NULL registry");
    lf_status st = check_tag(name);
    if (st != LF_OK || (st = lf__reg_begin(r)) != LF_OK) return st;
    if ((st = tag_locked(r, ckpt, name, move)) != LF_OK) {
        lf__reg_rollback(r);
        return st;
    }
    return lf__reg_commit(r);
}

lf_status lf_registry_untag(lf_registry *r, int64_t ckpt, const char *name) {
    if (!r || !name) return lf_fail(LF_ERR_INVALID_ARG, "lf_registry_untag: NULL argument");
    lf_status st = lf__reg_begin(r);
    if (st != LF_OK) return st;
    sqlite3_stmt *s = lf__reg_prepare(r, "DELETE FROM tags WHERE ckpt_id = ? AND name = ?");
    if (!s) {
        lf__reg_rollback(r);
        return r->last;
    }
    sqlite3_bind_int64(s, 1, ckpt);
    sqlite3_bind_text(s, 2, name, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(s);
    sqlite3_finalize(s);
    if (rc != SQLITE_DONE) st = lf__reg_fail(r, "cannot untag");
    else if (sqlite3_changes(r->db) == 0)
        st = lf_fail(LF_ERR_NOT_FOUND, "registry '%s': checkpoint c%lld has no tag '%s'", r->path, (long long)ckpt,
                     name);
    if (st != LF_OK) {
        lf__reg_rollback(r);
        return st;
    }
    return lf__reg_commit(r);
}

/* ---------------------------------------------------------------- promotion */

lf_status lf_registry_promote(lf_registry *r, int64_t ckpt, const char *tag, const lf_registry_cond *req, int n,
                              double *observed, int *held) {
    if (!r || n < 0 || (n > 0 && !req)) return lf_fail(LF_ERR_INVALID_ARG, "lf_registry_promote: bad argument");
    lf_status st = check_tag(tag);
    if (st != LF_OK || (st = lf__reg_begin(r)) != LF_OK) return st;
    if ((st = ckpt_exists(r, ckpt)) != LF_OK) goto fail;
    sqlite3_stmt *s = lf__reg_prepare(r, "SELECT value FROM metrics WHERE ckpt_id = ? AND name = ?");
    if (!s) {
        st = r->last;
        goto fail;
    }
    char bad[2048] = "";
    size_t at = 0;
    int n_bad = 0;
    for (int i = 0; i < n; i++) {
        sqlite3_reset(s);
        sqlite3_bind_int64(s, 1, ckpt);
        sqlite3_bind_text(s, 2, req[i].metric, -1, SQLITE_TRANSIENT);
        int rc = sqlite3_step(s);
        double v = rc == SQLITE_ROW && sqlite3_column_type(s, 0) != SQLITE_NULL ? sqlite3_column_double(s, 0) : NAN;
        if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
            sqlite3_finalize(s);
            st = lf__reg_fail(r, "cannot read metrics");
            goto fail;
        }
        int ok = lf_registry_cond_holds(&req[i], v);
        if (observed) observed[i] = v;
        if (held) held[i] = ok;
        if (!ok) {
            n_bad++;
            if (at < sizeof bad - 1) {
                char want[LF_JSON_NUMBER_MAX], got[LF_JSON_NUMBER_MAX];
                lf_json_number(want, sizeof want, req[i].value); /* shortest digits that read back */
                lf_json_number(got, sizeof got, v);
                if (isnan(v))
                    at += (size_t)snprintf(bad + at, sizeof bad - at, "%s%s %s %s (%s is not recorded)",
                                           n_bad > 1 ? "; " : "", req[i].metric, lf_registry_op_name(req[i].op), want,
                                           req[i].metric);
                else
                    at += (size_t)snprintf(bad + at, sizeof bad - at, "%s%s %s %s (it is %s)", n_bad > 1 ? "; " : "",
                                           req[i].metric, lf_registry_op_name(req[i].op), want, got);
            }
        }
    }
    sqlite3_finalize(s);
    if (n_bad) {
        st = lf_fail(LF_ERR_RANGE, "c%lld not promoted to '%s': %d of %d requirement%s not met: %s", (long long)ckpt,
                     tag, n_bad, n, n == 1 ? "" : "s", bad);
        goto fail;
    }
    if ((st = tag_locked(r, ckpt, tag, 1)) != LF_OK) goto fail;
    return lf__reg_commit(r);
fail:
    lf__reg_rollback(r);
    return st;
}

/* ---------------------------------------------------------------- gc */

typedef struct gc_ent {
    int64_t id, run;
    long step;
    char *path, *out_dir, *model_sha;
    double metric; /* NaN: not recorded */
    int latest, tagged;
    const char *why; /* kept: why; NULL = removable */
} gc_ent;

static int cmp_gc_best(const void *a, const void *b, void *arg) {
    const gc_ent *x = *(gc_ent *const *)a, *y = *(gc_ent *const *)b;
    int higher = *(const int *)arg;
    int c = strcmp(x->out_dir, y->out_dir);
    if (c) return c;
    int nx = isnan(x->metric), ny = isnan(y->metric);
    if (nx != ny) return nx - ny; /* without the metric: last */
    if (!nx && x->metric != y->metric) return (higher ? x->metric > y->metric : x->metric < y->metric) ? -1 : 1;
    return x->step > y->step ? -1 : x->step < y->step ? 1 : (x->id > y->id ? -1 : 1);
}

static void gc_report(cJSON *arr, const gc_ent *e, const char *why) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "id", id_str('c', e->id));
    cJSON_AddStringToObject(o, "path", e->path);
    if (why) cJSON_AddStringToObject(o, "why", why);
    cJSON_AddItemToArray(arr, o);
}

/* Mark one checkpoint removed (inside the caller's transaction). */
static lf_status mark_removed(lf_registry *r, int64_t id, const char *by) {
    sqlite3_stmt *s = lf__reg_prepare(r, "UPDATE checkpoints SET removed = ?, removed_by = ? WHERE id = ?");
    if (!s) return r->last;
    sqlite3_bind_double(s, 1, lf__reg_now());
    sqlite3_bind_text(s, 2, by, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 3, id);
    int rc = sqlite3_step(s);
    sqlite3_finalize(s);
    return rc == SQLITE_DONE ? LF_OK : lf__reg_fail(r, "cannot mark a checkpoint removed");
}

lf_status lf_registry_gc(lf_registry *r, const lf_registry_gc_opts *o, char **json) {
    if (!r || !o || !json || o->keep_best < 0) return lf_fail(LF_ERR_INVALID_ARG, "lf_registry_gc: bad argument");
    *json = NULL;
    const char *metric = o->metric && *o->metric ? o->metric : "val_loss";
    sqlite3_stmt *s = lf__reg_prepare(
        r, "SELECT c.id, c.run_id, c.step, c.path, r.out_dir, c.model_sha256, m.value, c.is_latest, "
           "EXISTS (SELECT 1 FROM tags t WHERE t.ckpt_id = c.id), "
           "c.step = (SELECT max(c2.step) FROM checkpoints c2 WHERE c2.run_id = c.run_id) "
           "FROM checkpoints c JOIN runs r ON r.id = c.run_id "
           "LEFT JOIN metrics m ON m.ckpt_id = c.id AND m.name = ? WHERE c.removed IS NULL ORDER BY c.id");
    if (!s) return r->last;
    sqlite3_bind_text(s, 1, metric, -1, SQLITE_TRANSIENT);
    gc_ent *v = NULL;
    size_t n = 0, cap = 0;
    lf_status st = LF_OK;
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (n == cap) {
            size_t nc = cap ? 2 * cap : 64;
            gc_ent *q = realloc(v, nc * sizeof *q);
            if (!q) {
                st = lf_fail(LF_ERR_NOMEM, "out of memory in gc");
                break;
            }
            v = q;
            cap = nc;
        }
        gc_ent *e = &v[n++];
        memset(e, 0, sizeof *e);
        e->id = sqlite3_column_int64(s, 0);
        e->run = sqlite3_column_int64(s, 1);
        e->step = (long)sqlite3_column_int64(s, 2);
        e->path = strdup(lf__reg_text(s, 3));
        e->out_dir = strdup(lf__reg_text(s, 4));
        e->model_sha = strdup(lf__reg_text(s, 5));
        e->metric = sqlite3_column_type(s, 6) == SQLITE_NULL ? NAN : sqlite3_column_double(s, 6);
        e->latest = sqlite3_column_int(s, 7);
        e->tagged = sqlite3_column_int(s, 8);
        if (!e->path || !e->out_dir || !e->model_sha) st = lf_fail(LF_ERR_NOMEM, "out of memory in gc");
        if (e->tagged) e->why = "tagged";
        else if (sqlite3_column_int(s, 9)) e->why = "the newest checkpoint of its run";
        else if (e->latest) e->why = "its run directory's latest";
        if (st != LF_OK) break;
    }
    if (st == LF_OK && rc != SQLITE_DONE) st = lf__reg_fail(r, "cannot list checkpoints");
    sqlite3_finalize(s);
    gc_ent **order = st == LF_OK && n ? malloc(n * sizeof *order) : NULL;
    if (st == LF_OK && n && !order) st = lf_fail(LF_ERR_NOMEM, "out of memory in gc");
    char best_why[320];
    snprintf(best_why, sizeof best_why, "among the %d best by %.256s of its run directory", o->keep_best, metric);
    if (st == LF_OK && n) {
        for (size_t i = 0; i < n; i++) order[i] = &v[i];
        int higher = o->higher_is_better;
        qsort_r(order, n, sizeof *order, cmp_gc_best, &higher);
        int rank = 0;
        for (size_t i = 0; i < n; i++) {
            if (i == 0 || strcmp(order[i]->out_dir, order[i - 1]->out_dir)) rank = 0;
            if (rank++ < o->keep_best && !isnan(order[i]->metric) && !order[i]->why) order[i]->why = best_why;
        }
    }
    cJSON *root = cJSON_CreateObject();
    cJSON *removed = cJSON_AddArrayToObject(root, "removed"), *kept = cJSON_AddArrayToObject(root, "kept");
    cJSON *skipped = cJSON_AddArrayToObject(root, "skipped"), *missing = cJSON_AddArrayToObject(root, "missing");
    cJSON_AddBoolToObject(root, "dry_run", o->dry_run != 0);
    /* decide and remove first; record in one transaction after */
    int *fate = st == LF_OK && n ? calloc(n, sizeof *fate) : NULL; /* 1 removed, 2 missing */
    if (st == LF_OK && n && !fate) st = lf_fail(LF_ERR_NOMEM, "out of memory in gc");
    for (size_t i = 0; st == LF_OK && i < n; i++) {
        gc_ent *e = &v[i];
        if (e->why) {
            cJSON *k = cJSON_CreateObject();
            cJSON_AddItemToObject(k, "id", id_str('c', e->id));
            cJSON_AddStringToObject(k, "why", e->why);
            cJSON_AddItemToArray(kept, k);
            continue;
        }
        if (!is_dir(e->path)) {
            fate[i] = 2;
            gc_report(missing, e, NULL);
            continue;
        }
        /* the ckpt/latest on disk, whatever the registry's flag says */
        char root_dir[REG_PATH_MAX], latest[256];
        snprintf(root_dir, sizeof root_dir, "%s", e->path);
        char *slash = strrchr(root_dir, '/');
        const char *base = slash ? slash + 1 : e->path;
        if (slash) *slash = 0;
        lf__reg_latest_name(root_dir, latest, sizeof latest);
        if (latest[0] && !strcmp(latest, base)) {
            gc_report(skipped, e, "ckpt/latest names it on disk");
            continue;
        }
        char sha[65], model_sha[65];
        if (lf__reg_ckpt_files(e->path, sha, model_sha, NULL) != LF_OK || strcmp(model_sha, e->model_sha) != 0) {
            gc_report(skipped, e,
                      "the directory does not hold the recorded checkpoint (model hash differs or "
                      "trainer_state.json unreadable)");
            continue;
        }
        if (o->dry_run) {
            gc_report(removed, e, NULL);
            continue;
        }
        char del[REG_PATH_MAX + 8];
        snprintf(del, sizeof del, "%s/.del_%s", root_dir, base);
        if (rename(e->path, del) != 0 || lf_remove_tree(del) != 0) {
            char why[300];
            snprintf(why, sizeof why, "cannot remove: %s", strerror(errno));
            gc_report(skipped, e, why);
            continue;
        }
        fate[i] = 1;
        gc_report(removed, e, NULL);
    }
    int any = 0;
    for (size_t i = 0; fate && i < n; i++) any |= fate[i];
    if (st == LF_OK && any && (st = lf__reg_begin(r)) == LF_OK) {
        for (size_t i = 0; st == LF_OK && i < n; i++)
            if (fate[i]) st = mark_removed(r, v[i].id, fate[i] == 1 ? "gc" : "missing");
        if (st == LF_OK) st = lf__reg_commit(r);
        else lf__reg_rollback(r);
    }
    if (st == LF_OK) st = lf__reg_print(root, json);
    cJSON_Delete(root);
    free(fate);
    free(order);
    for (size_t i = 0; i < n; i++) {
        free(v[i].path);
        free(v[i].out_dir);
        free(v[i].model_sha);
    }
    free(v);
    return st;
}

/* ---------------------------------------------------------------- relink */

typedef struct found {
    char *path;
    char sha[65];
} found;

typedef struct found_list {
    found *v;
    size_t n, cap;
} found_list;

static lf_status walk(const char *dir, int depth, found_list *out) {
    char state[REG_PATH_MAX], model[REG_PATH_MAX];
    snprintf(state, sizeof state, "%s/trainer_state.json", dir);
    snprintf(model, sizeof model, "%s/model.safetensors", dir);
    if (is_file(state) && is_file(model)) {
        if (out->n == out->cap) {
            size_t nc = out->cap ? 2 * out->cap : 32;
            found *q = realloc(out->v, nc * sizeof *q);
            if (!q) return lf_fail(LF_ERR_NOMEM, "out of memory in relink");
            out->v = q;
            out->cap = nc;
        }
        found *f = &out->v[out->n];
        if (!(f->path = strdup(dir))) return lf_fail(LF_ERR_NOMEM, "out of memory in relink");
        lf_status st = lf_sha256_file_hex(model, f->sha);
        if (st != LF_OK) {
            free(f->path);
            return st;
        }
        out->n++;
        return LF_OK; /* a checkpoint holds no checkpoints */
    }
    if (depth >= RELINK_DEPTH) return LF_OK;
    DIR *d = opendir(dir);
    if (!d)
        return depth == 0 ? lf_fail(LF_ERR_NOT_FOUND, "cannot open directory '%s': %s", dir, strerror(errno)) : LF_OK;
    struct dirent *de;
    lf_status st = LF_OK;
    while (st == LF_OK && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.') continue; /* ., .., and .tmp_/.del_ leftovers */
        char p[REG_PATH_MAX];
        if (snprintf(p, sizeof p, "%s/%s", dir, de->d_name) >= (int)sizeof p) continue;
        struct stat sb;
        if (lstat(p, &sb) != 0 || !S_ISDIR(sb.st_mode)) continue; /* no symlinks followed */
        st = walk(p, depth + 1, out);
    }
    closedir(d);
    return st;
}

/* The run directory of a step directory ".../X/ckpt/step_N": X, else "". */
static void run_dir_of(const char *step_dir, char *out, size_t cap) {
    out[0] = 0;
    char a[REG_PATH_MAX];
    snprintf(a, sizeof a, "%s", step_dir);
    char *s = strrchr(a, '/');
    if (!s) return;
    *s = 0;
    s = strrchr(a, '/');
    if (!s || strcmp(s + 1, "ckpt") != 0) return;
    *s = 0;
    snprintf(out, cap, "%s", a[0] ? a : "/");
}

lf_status lf_registry_relink(lf_registry *r, const char *dir, char **json) {
    if (!r || !dir || !json) return lf_fail(LF_ERR_INVALID_ARG, "lf_registry_relink: NULL argument");
    *json = NULL;
    char abs[REG_PATH_MAX];
    lf__reg_abspath(dir, abs, sizeof abs);
    if (!is_dir(abs)) return lf_fail(LF_ERR_NOT_FOUND, "relink: '%s' is not a directory", dir);
    found_list fl = {0};
    lf_status st = walk(abs, 0, &fl);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "scanned", (double)fl.n);
    cJSON *relinked = cJSON_AddArrayToObject(root, "relinked"), *unknown = cJSON_AddArrayToObject(root, "unknown");
    sqlite3_stmt *q = NULL, *u = NULL, *ur = NULL;
    if (st == LF_OK && (st = lf__reg_begin(r)) == LF_OK) {
        q = lf__reg_prepare(r, "SELECT c.id, c.path, c.model_sha256, r.id, r.out_dir FROM checkpoints c JOIN runs r "
                               "ON r.id = c.run_id WHERE c.model_sha256 = ?");
        u = q ? lf__reg_prepare(r, "UPDATE checkpoints SET path = ?, removed = NULL, removed_by = NULL WHERE id = ?")
              : NULL;
        ur = u ? lf__reg_prepare(r, "UPDATE runs SET out_dir = ? WHERE id = ?") : NULL;
        if (!ur) st = r->last;
    }
    for (size_t i = 0; st == LF_OK && i < fl.n; i++) {
        sqlite3_reset(q);
        sqlite3_bind_text(q, 1, fl.v[i].sha, -1, SQLITE_TRANSIENT);
        int matched = 0, rc = SQLITE_DONE;
        while (st == LF_OK && (rc = sqlite3_step(q)) == SQLITE_ROW) {
            matched = 1;
            int64_t id = sqlite3_column_int64(q, 0), run = sqlite3_column_int64(q, 3);
            char old[REG_PATH_MAX], out_dir[REG_PATH_MAX];
            snprintf(old, sizeof old, "%s", lf__reg_text(q, 1));
            snprintf(out_dir, sizeof out_dir, "%s", lf__reg_text(q, 4));
            if (!strcmp(old, fl.v[i].path)) continue;
            char sha[65], model_sha[65];
            if (is_dir(old) && lf__reg_ckpt_files(old, sha, model_sha, NULL) == LF_OK &&
                !strcmp(model_sha, fl.v[i].sha))
                continue; /* still where it was recorded: this is a copy */
            sqlite3_reset(u);
            sqlite3_bind_text(u, 1, fl.v[i].path, -1, SQLITE_TRANSIENT);
            sqlite3_bind_int64(u, 2, id);
            if (sqlite3_step(u) != SQLITE_DONE) {
                st = lf__reg_fail(r, "cannot relink");
                break;
            }
            char new_run[REG_PATH_MAX];
            run_dir_of(fl.v[i].path, new_run, sizeof new_run);
            if (new_run[0] && !is_dir(out_dir)) {
                sqlite3_reset(ur);
                sqlite3_bind_text(ur, 1, new_run, -1, SQLITE_TRANSIENT);
                sqlite3_bind_int64(ur, 2, run);
                if (sqlite3_step(ur) != SQLITE_DONE) {
                    st = lf__reg_fail(r, "cannot relink");
                    break;
                }
            }
            cJSON *e = cJSON_CreateObject();
            cJSON_AddItemToObject(e, "id", id_str('c', id));
            cJSON_AddStringToObject(e, "from", old);
            cJSON_AddStringToObject(e, "to", fl.v[i].path);
            cJSON_AddItemToArray(relinked, e);
        }
        if (st == LF_OK && rc != SQLITE_DONE) st = lf__reg_fail(r, "cannot read checkpoints");
        if (st == LF_OK && !matched) cJSON_AddItemToArray(unknown, cJSON_CreateString(fl.v[i].path));
    }
    sqlite3_finalize(q);
    sqlite3_finalize(u);
    sqlite3_finalize(ur);
    if (!sqlite3_get_autocommit(r->db)) {
        if (st == LF_OK) st = lf__reg_commit(r);
        else lf__reg_rollback(r);
    }
    if (st == LF_OK) st = lf__reg_print(root, json);
    cJSON_Delete(root);
    for (size_t i = 0; i < fl.n; i++) free(fl.v[i].path);
    free(fl.v);
    return st;
}
