/*
 * Reading the registry: references (c<N>, r<N>, paths, tags), metric
 * conditions, and the reports `llmforge models` prints (list, show, lineage,
 * diff, compare) as JSON documents whose keys registry.h specifies.
 *
 * Invariants:
 *  - Reads take no write lock: in WAL mode they see the last committed
 *    state while runs keep writing.
 *  - A lineage walk follows one edge per run (resumed-from first, else
 *    initialised-/fine-tuned-from) and stops at a run without one
 *    ("scratch"), at an external parent, or after 10000 links (a cycle can
 *    only come from a hand-edited file).
 *  - Conditions compare doubles exactly as written (strtod); a metric that
 *    was not recorded, or recorded as NULL, satisfies no condition.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cjson/cJSON.h>
#include "registry/registry_impl.h"

#define LINEAGE_MAX 10000

/* ---------------------------------------------------------------- conditions */

static const char *const k_ops[] = {"<", "<=", ">", ">=", "==", "!="};

const char *lf_registry_op_name(lf_registry_op op) { return (unsigned)op < 6 ? k_ops[op] : "?"; }

lf_status lf_registry_cond_parse(const char *text, lf_registry_cond *out) {
    if (!text || !out) return lf_fail(LF_ERR_INVALID_ARG, "lf_registry_cond_parse: NULL argument");
    const char *p = text + strcspn(text, "<>=!");
    if (!*p) return lf_fail(LF_ERR_INVALID_ARG, "'%s' is not a condition METRIC OP VALUE (OP: < <= > >= == !=)", text);
    const char *b = text, *e = p;
    while (b < e && (*b == ' ' || *b == '\t')) b++;
    while (e > b && (e[-1] == ' ' || e[-1] == '\t')) e--;
    if (e == b || (size_t)(e - b) >= sizeof out->metric)
        return lf_fail(LF_ERR_INVALID_ARG, "condition '%s' names no metric (or one over 255 bytes)", text);
    int op = -1;
    size_t oplen = 0;
    for (int k = 0; k < 6; k++) { /* the longest operator that matches */
        size_t l = strlen(k_ops[k]);
        if (!strncmp(p, k_ops[k], l) && l > oplen) {
            op = k;
            oplen = l;
        }
    }
    if (op < 0) return lf_fail(LF_ERR_INVALID_ARG, "condition '%s': operator is not one of < <= > >= == !=", text);
    const char *v = p + oplen;
    char *end;
    errno = 0;
    double val = strtod(v, &end);
    while (*end == ' ' || *end == '\t') end++;
    if (end == v || *end || errno == ERANGE || !isfinite(val))
        return lf_fail(LF_ERR_INVALID_ARG, "condition '%s': '%s' is not a finite number", text, v);
    memcpy(out->metric, b, (size_t)(e - b));
    out->metric[e - b] = 0;
    out->op = (lf_registry_op)op;
    out->value = val;
    return LF_OK;
}

int lf_registry_cond_holds(const lf_registry_cond *c, double v) {
    if (!c || isnan(v)) return 0;
    switch (c->op) {
    case LF_REGISTRY_LT: return v < c->value;
    case LF_REGISTRY_LE: return v <= c->value;
    case LF_REGISTRY_GT: return v > c->value;
    case LF_REGISTRY_GE: return v >= c->value;
    case LF_REGISTRY_EQ: return v == c->value;
    case LF_REGISTRY_NE: return v != c->value;
    }
    return 0;
}

/* ---------------------------------------------------------------- helpers */

static cJSON *id_str(char prefix, int64_t id) {
    char b[32];
    snprintf(b, sizeof b, "%c%lld", prefix, (long long)id);
    return cJSON_CreateString(b);
}

static cJSON *num_or_null(sqlite3_stmt *s, int col) {
    if (sqlite3_column_type(s, col) == SQLITE_NULL) return cJSON_CreateNull();
    return cJSON_CreateNumber(sqlite3_column_double(s, col));
}

static int is_file(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* A one-column, one-row integer query with one text or integer argument. */
static lf_status one_id(lf_registry *r, const char *sql, const char *text, int64_t arg, int64_t *out) {
    *out = 0;
    sqlite3_stmt *s = lf__reg_prepare(r, sql);
    if (!s) return r->last;
    if (text) sqlite3_bind_text(s, 1, text, -1, SQLITE_TRANSIENT);
    else sqlite3_bind_int64(s, 1, arg);
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) *out = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return lf__reg_fail(r, "cannot read");
    return LF_OK;
}

static lf_status need_ckpt(lf_registry *r, int64_t id) {
    int64_t got;
    lf_status st = one_id(r, "SELECT id FROM checkpoints WHERE id = ?", NULL, id, &got);
    if (st == LF_OK && !got)
        st = lf_fail(LF_ERR_NOT_FOUND, "registry '%s': no checkpoint c%lld", r->path, (long long)id);
    return st;
}

cJSON *lf__reg_ckpt_json(lf_registry *r, int64_t id, lf_status *st) {
    *st = LF_OK;
    sqlite3_stmt *s = lf__reg_prepare(r, "SELECT c.id, c.run_id, c.step, c.path, c.created, c.is_latest, c.is_best, "
                                         "c.removed, c.removed_by, r.status FROM checkpoints c JOIN runs r ON r.id = "
                                         "c.run_id WHERE c.id = ?");
    if (!s) {
        *st = r->last;
        return NULL;
    }
    sqlite3_bind_int64(s, 1, id);
    int rc = sqlite3_step(s);
    if (rc != SQLITE_ROW) {
        sqlite3_finalize(s);
        *st = rc == SQLITE_DONE
                  ? lf_fail(LF_ERR_NOT_FOUND, "registry '%s': no checkpoint c%lld", r->path, (long long)id)
                  : lf__reg_fail(r, "cannot read a checkpoint");
        return NULL;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "id", id_str('c', sqlite3_column_int64(s, 0)));
    cJSON_AddItemToObject(o, "run", id_str('r', sqlite3_column_int64(s, 1)));
    cJSON_AddNumberToObject(o, "step", (double)sqlite3_column_int64(s, 2));
    cJSON_AddStringToObject(o, "path", lf__reg_text(s, 3));
    cJSON_AddNumberToObject(o, "created", sqlite3_column_double(s, 4));
    cJSON_AddBoolToObject(o, "latest", sqlite3_column_int(s, 5) != 0);
    cJSON_AddBoolToObject(o, "best", sqlite3_column_int(s, 6) != 0);
    if (sqlite3_column_type(s, 7) == SQLITE_NULL) {
        cJSON_AddNullToObject(o, "removed");
    } else {
        cJSON *rm = cJSON_AddObjectToObject(o, "removed");
        cJSON_AddNumberToObject(rm, "time", sqlite3_column_double(s, 7));
        cJSON_AddStringToObject(rm, "by", lf__reg_text(s, 8));
    }
    cJSON_AddStringToObject(o, "run_status", lf__reg_text(s, 9));
    sqlite3_finalize(s);
    cJSON *tags = cJSON_AddArrayToObject(o, "tags");
    s = lf__reg_prepare(r, "SELECT name FROM tags WHERE ckpt_id = ? ORDER BY name");
    if (!s) goto fail;
    sqlite3_bind_int64(s, 1, id);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) cJSON_AddItemToArray(tags, cJSON_CreateString(lf__reg_text(s, 0)));
    sqlite3_finalize(s);
    if (rc != SQLITE_DONE) goto fail_sql;
    cJSON *met = cJSON_AddObjectToObject(o, "metrics");
    s = lf__reg_prepare(r, "SELECT name, value FROM metrics WHERE ckpt_id = ? ORDER BY name");
    if (!s) goto fail;
    sqlite3_bind_int64(s, 1, id);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) cJSON_AddItemToObject(met, lf__reg_text(s, 0), num_or_null(s, 1));
    sqlite3_finalize(s);
    if (rc != SQLITE_DONE) goto fail_sql;
    return o;
fail_sql:
    *st = lf__reg_fail(r, "cannot read a checkpoint");
    cJSON_Delete(o);
    return NULL;
fail:
    *st = r->last;
    cJSON_Delete(o);
    return NULL;
}

/* ---------------------------------------------------------------- references */

/* The step directory a path stands for: itself when it holds
 * trainer_state.json, else what its latest, its ckpt/latest, or (for a file
 * named latest) the file names. "" when none. */
static void step_dir_of(const char *abs, char *out, size_t cap) {
    char p[REG_PATH_MAX], name[256];
    out[0] = 0;
    snprintf(p, sizeof p, "%s/trainer_state.json", abs);
    if (is_file(p)) {
        snprintf(out, cap, "%s", abs);
        return;
    }
    const char *base = strrchr(abs, '/');
    if (is_file(abs) && base && !strcmp(base + 1, "latest")) {
        char root[REG_PATH_MAX];
        snprintf(root, sizeof root, "%.*s", (int)(base - abs), abs);
        lf__reg_latest_name(root, name, sizeof name);
        if (name[0]) snprintf(out, cap, "%s/%s", root, name);
        return;
    }
    lf__reg_latest_name(abs, name, sizeof name);
    if (name[0]) {
        snprintf(out, cap, "%s/%s", abs, name);
        return;
    }
    snprintf(p, sizeof p, "%s/ckpt", abs);
    lf__reg_latest_name(p, name, sizeof name);
    if (name[0]) snprintf(out, cap, "%s/ckpt/%s", abs, name);
}

static int parse_id(const char *ref, char prefix, int64_t *id) {
    if (ref[0] != prefix || !ref[1]) return 0;
    for (const char *p = ref + 1; *p; p++)
        if (*p < '0' || *p > '9') return 0;
    char *end;
    errno = 0;
    long long v = strtoll(ref + 1, &end, 10);
    if (errno || v <= 0) return 0;
    *id = v;
    return 1;
}

lf_status lf_registry_find(lf_registry *r, const char *ref, int64_t *ckpt_id) {
    if (!r || !ref || !ckpt_id) return lf_fail(LF_ERR_INVALID_ARG, "lf_registry_find: NULL argument");
    *ckpt_id = 0;
    int64_t id = 0;
    lf_status st;
    if (parse_id(ref, 'c', &id)) {
        if ((st = need_ckpt(r, id)) != LF_OK) return st;
        *ckpt_id = id;
        return LF_OK;
    }
    if (parse_id(ref, 'r', &id)) {
        int64_t run;
        if ((st = one_id(r, "SELECT id FROM runs WHERE id = ?", NULL, id, &run)) != LF_OK) return st;
        if (!run) return lf_fail(LF_ERR_NOT_FOUND, "registry '%s': no run r%lld", r->path, (long long)id);
        st = one_id(r, "SELECT id FROM checkpoints WHERE run_id = ? ORDER BY step DESC, id DESC LIMIT 1", NULL, id,
                    ckpt_id);
        if (st == LF_OK && !*ckpt_id)
            st = lf_fail(LF_ERR_NOT_FOUND, "registry '%s': run r%lld has no checkpoint", r->path, (long long)id);
        return st;
    }
    struct stat sb;
    if (stat(ref, &sb) == 0) {
        char abs[REG_PATH_MAX], dir[REG_PATH_MAX];
        lf__reg_abspath(ref, abs, sizeof abs);
        if ((st = one_id(r, "SELECT id FROM checkpoints WHERE path = ? ORDER BY id DESC LIMIT 1", abs, 0, ckpt_id)) !=
                LF_OK ||
            *ckpt_id)
            return st;
        step_dir_of(abs, dir, sizeof dir);
        if (dir[0]) {
            char a2[REG_PATH_MAX];
            lf__reg_abspath(dir, a2, sizeof a2);
            if ((st = one_id(r, "SELECT id FROM checkpoints WHERE path = ? ORDER BY id DESC LIMIT 1", a2, 0,
                             ckpt_id)) != LF_OK ||
                *ckpt_id)
                return st;
        }
        /* a run directory the registry knows: its latest */
        if ((st = one_id(r,
                         "SELECT c.id FROM checkpoints c JOIN runs r ON r.id = c.run_id WHERE r.out_dir = ? AND "
                         "c.is_latest ORDER BY c.id DESC LIMIT 1",
                         abs, 0, ckpt_id)) != LF_OK ||
            *ckpt_id)
            return st;
        /* a checkpoint that moved: by its model hash */
        char sha[65], model_sha[65];
        if (dir[0] && lf__reg_ckpt_files(dir, sha, model_sha, NULL) == LF_OK) {
            if ((st = one_id(r, "SELECT id FROM checkpoints WHERE model_sha256 = ? ORDER BY id DESC LIMIT 1", model_sha,
                             0, ckpt_id)) != LF_OK ||
                *ckpt_id)
                return st;
        }
        return lf_fail(LF_ERR_NOT_FOUND, "registry '%s' knows no checkpoint at '%s'%s", r->path, ref,
                       dir[0] ? " (not by its path, nor by its model's hash)" : " (and it holds none)");
    }
    sqlite3_stmt *s = lf__reg_prepare(r, "SELECT ckpt_id FROM tags WHERE name = ? ORDER BY ckpt_id");
    if (!s) return r->last;
    sqlite3_bind_text(s, 1, ref, -1, SQLITE_TRANSIENT);
    char list[512] = "";
    size_t at = 0;
    int n = 0, rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        id = sqlite3_column_int64(s, 0);
        if (at < sizeof list - 24)
            at += (size_t)snprintf(list + at, sizeof list - at, "%sc%lld", n ? ", " : "", (long long)id);
        n++;
    }
    sqlite3_finalize(s);
    if (rc != SQLITE_DONE) return lf__reg_fail(r, "cannot read tags");
    if (n == 1) {
        *ckpt_id = id;
        return LF_OK;
    }
    if (n > 1)
        return lf_fail(LF_ERR_INVALID_ARG, "tag '%s' is on %d checkpoints (%s): name one by its id", ref, n, list);
    return lf_fail(LF_ERR_NOT_FOUND, "registry '%s': '%s' is no checkpoint (c<N>), run (r<N>), existing path or tag",
                   r->path, ref);
}

/* ---------------------------------------------------------------- list */

lf_status lf_registry_list_json(lf_registry *r, const lf_registry_filter *f, char **json) {
    if (!r || !json) return lf_fail(LF_ERR_INVALID_ARG, "lf_registry_list_json: NULL argument");
    *json = NULL;
    lf_registry_filter none = {0};
    if (!f) f = &none;
    if (f->n_where < 0 || (f->n_where > 0 && !f->where) || f->n_where > 64)
        return lf_fail(LF_ERR_INVALID_ARG, "lf_registry_list_json: bad conditions");
    char sql[8192];
    size_t at = (size_t)snprintf(sql, sizeof sql, "SELECT c.id FROM checkpoints c WHERE 1");
    if (!f->include_removed) at += (size_t)snprintf(sql + at, sizeof sql - at, " AND c.removed IS NULL");
    if (f->tag)
        at += (size_t)snprintf(sql + at, sizeof sql - at,
                               " AND EXISTS (SELECT 1 FROM tags t WHERE t.ckpt_id = c.id AND t.name = ?)");
    for (int i = 0; i < f->n_where; i++) {
        if ((unsigned)f->where[i].op > LF_REGISTRY_NE)
            return lf_fail(LF_ERR_INVALID_ARG, "lf_registry_list_json: bad operator");
        const char *op = f->where[i].op == LF_REGISTRY_EQ ? "=" : lf_registry_op_name(f->where[i].op);
        at += (size_t)snprintf(sql + at, sizeof sql - at,
                               " AND EXISTS (SELECT 1 FROM metrics m WHERE m.ckpt_id = "
                               "c.id AND m.name = ? AND m.value IS NOT NULL AND m.value %s ?)",
                               op);
    }
    snprintf(sql + at, sizeof sql - at, " ORDER BY c.id");
    sqlite3_stmt *s = lf__reg_prepare(r, sql);
    if (!s) return r->last;
    int k = 1;
    if (f->tag) sqlite3_bind_text(s, k++, f->tag, -1, SQLITE_TRANSIENT);
    for (int i = 0; i < f->n_where; i++) {
        sqlite3_bind_text(s, k++, f->where[i].metric, -1, SQLITE_TRANSIENT);
        sqlite3_bind_double(s, k++, f->where[i].value);
    }
    int64_t *ids = NULL;
    size_t n = 0, cap = 0;
    int rc;
    lf_status st = LF_OK;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (n == cap) {
            size_t nc = cap ? 2 * cap : 64;
            int64_t *q = realloc(ids, nc * sizeof *q);
            if (!q) {
                st = lf_fail(LF_ERR_NOMEM, "out of memory listing checkpoints");
                break;
            }
            ids = q;
            cap = nc;
        }
        ids[n++] = sqlite3_column_int64(s, 0);
    }
    if (st == LF_OK && rc != SQLITE_DONE) st = lf__reg_fail(r, "cannot list checkpoints");
    sqlite3_finalize(s);
    cJSON *arr = st == LF_OK ? cJSON_CreateArray() : NULL;
    for (size_t i = 0; st == LF_OK && i < n; i++) {
        cJSON *o = lf__reg_ckpt_json(r, ids[i], &st);
        if (o) cJSON_AddItemToArray(arr, o);
    }
    free(ids);
    if (st == LF_OK) st = lf__reg_print(arr, json);
    cJSON_Delete(arr);
    return st;
}

/* ---------------------------------------------------------------- runs and show */

/* The lineage edge of a run (resumed-from first); NULL object = none. */
static lf_status run_edge(lf_registry *r, int64_t run, cJSON **edge, int64_t *parent) {
    *edge = NULL;
    *parent = 0;
    sqlite3_stmt *s = lf__reg_prepare(r, "SELECT kind, parent_ckpt, parent_path, parent_sha256, external FROM edges "
                                         "WHERE run_id = ? ORDER BY kind = 'resumed-from' DESC LIMIT 1");
    if (!s) return r->last;
    sqlite3_bind_int64(s, 1, run);
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "kind", lf__reg_text(s, 0));
        if (sqlite3_column_type(s, 1) == SQLITE_NULL) {
            cJSON_AddNullToObject(e, "parent");
        } else {
            *parent = sqlite3_column_int64(s, 1);
            cJSON_AddItemToObject(e, "parent", id_str('c', *parent));
        }
        cJSON_AddStringToObject(e, "path", lf__reg_text(s, 2));
        cJSON_AddStringToObject(e, "sha256", lf__reg_text(s, 3));
        if (sqlite3_column_type(s, 4) == SQLITE_NULL) cJSON_AddNullToObject(e, "external");
        else cJSON_AddStringToObject(e, "external", lf__reg_text(s, 4));
        *edge = e;
    }
    sqlite3_finalize(s);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return lf__reg_fail(r, "cannot read lineage");
    return LF_OK;
}

static cJSON *run_json(lf_registry *r, int64_t run, lf_status *st) {
    *st = LF_OK;
    sqlite3_stmt *s = lf__reg_prepare(r, "SELECT out_dir, status, message, started, ended, host, pid, world_size, "
                                         "code_version, config_hash, dataset, dataset_hash, tokenizer, tokenizer_hash, "
                                         "config_json, sweep, sweep_trial FROM runs WHERE id = ?");
    if (!s) {
        *st = r->last;
        return NULL;
    }
    sqlite3_bind_int64(s, 1, run);
    int rc = sqlite3_step(s);
    if (rc != SQLITE_ROW) {
        sqlite3_finalize(s);
        *st = rc == SQLITE_DONE ? lf_fail(LF_ERR_NOT_FOUND, "registry '%s': no run r%lld", r->path, (long long)run)
                                : lf__reg_fail(r, "cannot read a run");
        return NULL;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "id", id_str('r', run));
    static const char *const text_cols[] = {"out_dir", "status", "message"};
    for (int i = 0; i < 3; i++) cJSON_AddStringToObject(o, text_cols[i], lf__reg_text(s, i));
    cJSON_AddItemToObject(o, "started", num_or_null(s, 3));
    cJSON_AddItemToObject(o, "ended", num_or_null(s, 4));
    cJSON_AddStringToObject(o, "host", lf__reg_text(s, 5));
    cJSON_AddNumberToObject(o, "pid", (double)sqlite3_column_int64(s, 6));
    cJSON_AddNumberToObject(o, "world_size", (double)sqlite3_column_int64(s, 7));
    static const char *const more[] = {"code_version", "config_hash", "dataset",
                                       "dataset_hash", "tokenizer",   "tokenizer_hash"};
    for (int i = 0; i < 6; i++) cJSON_AddStringToObject(o, more[i], lf__reg_text(s, 8 + i));
    for (int i = 0; i < 2; i++) /* NULL: not started by a sweep */
        cJSON_AddItemToObject(o, i ? "sweep_trial" : "sweep",
                              sqlite3_column_type(s, 15 + i) == SQLITE_NULL
                                  ? cJSON_CreateNull()
                                  : cJSON_CreateString(lf__reg_text(s, 15 + i)));
    cJSON *cfg = cJSON_Parse(lf__reg_text(s, 14));
    cJSON_AddItemToObject(o, "config", cfg ? cfg : cJSON_CreateNull());
    sqlite3_finalize(s);
    cJSON *list = cJSON_AddArrayToObject(o, "checkpoints");
    s = lf__reg_prepare(r, "SELECT id FROM checkpoints WHERE run_id = ? ORDER BY step, id");
    if (!s) {
        *st = r->last;
        cJSON_Delete(o);
        return NULL;
    }
    sqlite3_bind_int64(s, 1, run);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) cJSON_AddItemToArray(list, id_str('c', sqlite3_column_int64(s, 0)));
    sqlite3_finalize(s);
    if (rc != SQLITE_DONE) {
        *st = lf__reg_fail(r, "cannot read a run");
        cJSON_Delete(o);
        return NULL;
    }
    cJSON *edge;
    int64_t parent;
    if ((*st = run_edge(r, run, &edge, &parent)) != LF_OK) {
        cJSON_Delete(o);
        return NULL;
    }
    cJSON_AddItemToObject(o, "parent", edge ? edge : cJSON_CreateNull());
    return o;
}

static int64_t run_of(lf_registry *r, int64_t ckpt, lf_status *st) {
    int64_t run = 0;
    *st = one_id(r, "SELECT run_id FROM checkpoints WHERE id = ?", NULL, ckpt, &run);
    if (*st == LF_OK && !run)
        *st = lf_fail(LF_ERR_NOT_FOUND, "registry '%s': no checkpoint c%lld", r->path, (long long)ckpt);
    return run;
}

lf_status lf_registry_show_json(lf_registry *r, int64_t ckpt, char **json) {
    if (!r || !json) return lf_fail(LF_ERR_INVALID_ARG, "lf_registry_show_json: NULL argument");
    *json = NULL;
    lf_status st;
    cJSON *o = lf__reg_ckpt_json(r, ckpt, &st);
    if (!o) return st;
    sqlite3_stmt *s = lf__reg_prepare(r,
                                      "SELECT sha256, model_sha256, files_json, run_id FROM checkpoints WHERE id = ?");
    if (!s) {
        cJSON_Delete(o);
        return r->last;
    }
    sqlite3_bind_int64(s, 1, ckpt);
    int64_t run = 0;
    if (sqlite3_step(s) == SQLITE_ROW) {
        cJSON_AddStringToObject(o, "sha256", lf__reg_text(s, 0));
        cJSON_AddStringToObject(o, "model_sha256", lf__reg_text(s, 1));
        cJSON *files = cJSON_Parse(lf__reg_text(s, 2));
        cJSON_AddItemToObject(o, "files", files ? files : cJSON_CreateNull());
        run = sqlite3_column_int64(s, 3);
    }
    sqlite3_finalize(s);
    cJSON *src = cJSON_AddObjectToObject(o, "metric_sources");
    s = lf__reg_prepare(r, "SELECT name, source FROM metrics WHERE ckpt_id = ? ORDER BY name");
    if (!s) {
        cJSON_Delete(o);
        return r->last;
    }
    sqlite3_bind_int64(s, 1, ckpt);
    while (sqlite3_step(s) == SQLITE_ROW) cJSON_AddStringToObject(src, lf__reg_text(s, 0), lf__reg_text(s, 1));
    sqlite3_finalize(s);
    cJSON *ro = run_json(r, run, &st);
    if (!ro) {
        cJSON_Delete(o);
        return st;
    }
    cJSON_AddItemToObject(o, "run_record", ro);
    st = lf__reg_print(o, json);
    cJSON_Delete(o);
    return st;
}

/* ---------------------------------------------------------------- lineage */

lf_status lf_registry_lineage_json(lf_registry *r, int64_t ckpt, char **json) {
    if (!r || !json) return lf_fail(LF_ERR_INVALID_ARG, "lf_registry_lineage_json: NULL argument");
    *json = NULL;
    lf_status st = need_ckpt(r, ckpt);
    if (st != LF_OK) return st;
    cJSON *root = cJSON_CreateObject(), *chain = cJSON_AddArrayToObject(root, "chain");
    const char *origin = "scratch";
    int64_t cur = ckpt;
    for (int hops = 0; cur; hops++) {
        if (hops == LINEAGE_MAX) {
            st = lf_fail(LF_ERR_FORMAT, "registry '%s': lineage of c%lld is longer than %d links (a cycle?)", r->path,
                         (long long)ckpt, LINEAGE_MAX);
            break;
        }
        cJSON *c = lf__reg_ckpt_json(r, cur, &st);
        if (!c) break;
        cJSON *e = cJSON_CreateObject();
        static const char *const keep[] = {"id", "run", "step", "path"};
        for (int i = 0; i < 4; i++)
            cJSON_AddItemToObject(e, keep[i], cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(c, keep[i]), 1));
        cJSON_AddBoolToObject(e, "removed", !cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(c, "removed")));
        cJSON_Delete(c);
        cJSON_AddItemToArray(chain, e);
        int64_t run = run_of(r, cur, &st), parent = 0;
        if (st != LF_OK) break;
        cJSON *edge;
        if ((st = run_edge(r, run, &edge, &parent)) != LF_OK) break;
        cJSON_AddItemToObject(e, "edge", edge ? edge : cJSON_CreateNull());
        if (edge && !parent) {
            const cJSON *ext = cJSON_GetObjectItemCaseSensitive(edge, "external");
            origin = cJSON_IsString(ext) && !strcmp(ext->valuestring, "hf")     ? "hf"
                     : cJSON_IsString(ext) && !strcmp(ext->valuestring, "file") ? "file"
                                                                                : "unregistered";
        }
        cur = parent;
    }
    if (st == LF_OK) {
        cJSON_AddStringToObject(root, "origin", origin);
        st = lf__reg_print(root, json);
    }
    cJSON_Delete(root);
    return st;
}

/* ---------------------------------------------------------------- diff and compare */

typedef struct leaf {
    char *key;
    const cJSON *item;
} leaf;

typedef struct leaves {
    leaf *v;
    size_t n, cap;
} leaves;

static lf_status flatten(const cJSON *o, const char *prefix, leaves *out, int depth) {
    if (depth > 32) return lf_fail(LF_ERR_FORMAT, "configuration nests deeper than 32 levels");
    const cJSON *c;
    cJSON_ArrayForEach(c, o) {
        char key[1024];
        snprintf(key, sizeof key, "%s%s%s", prefix, *prefix ? "." : "", c->string ? c->string : "");
        if (cJSON_IsObject(c) && c->child) {
            lf_status st = flatten(c, key, out, depth + 1);
            if (st != LF_OK) return st;
            continue;
        }
        if (out->n == out->cap) {
            size_t nc = out->cap ? 2 * out->cap : 128;
            leaf *q = realloc(out->v, nc * sizeof *q);
            if (!q) return lf_fail(LF_ERR_NOMEM, "out of memory comparing configurations");
            out->v = q;
            out->cap = nc;
        }
        out->v[out->n].key = strdup(key);
        if (!out->v[out->n].key) return lf_fail(LF_ERR_NOMEM, "out of memory comparing configurations");
        out->v[out->n++].item = c;
    }
    return LF_OK;
}

static void leaves_free(leaves *l) {
    for (size_t i = 0; i < l->n; i++) free(l->v[i].key);
    free(l->v);
}

static int cmp_leaf(const void *a, const void *b) { return strcmp(((const leaf *)a)->key, ((const leaf *)b)->key); }

static int same_item(const cJSON *a, const cJSON *b) {
    if (!a || !b) return a == b;
    return cJSON_Compare(a, b, 1);
}

static void add_pair(cJSON *arr, const char *key, const cJSON *a, const cJSON *b) {
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "key", key);
    cJSON_AddItemToObject(e, "a", a ? cJSON_Duplicate(a, 1) : cJSON_CreateNull());
    cJSON_AddItemToObject(e, "b", b ? cJSON_Duplicate(b, 1) : cJSON_CreateNull());
    cJSON_AddItemToArray(arr, e);
}

/* The parent edge as one string: "resumed-from c1", "initialised-from hf /path", "scratch". */
static cJSON *edge_str(const cJSON *run) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(run, "parent");
    if (!cJSON_IsObject(p)) return cJSON_CreateString("scratch");
    char b[REG_PATH_MAX + 64];
    const cJSON *par = cJSON_GetObjectItemCaseSensitive(p, "parent"),
                *ext = cJSON_GetObjectItemCaseSensitive(p, "external");
    if (cJSON_IsString(par))
        snprintf(b, sizeof b, "%s %s", cJSON_GetObjectItemCaseSensitive(p, "kind")->valuestring, par->valuestring);
    else
        snprintf(b, sizeof b, "%s %s %s", cJSON_GetObjectItemCaseSensitive(p, "kind")->valuestring,
                 cJSON_IsString(ext) ? ext->valuestring : "?",
                 cJSON_GetObjectItemCaseSensitive(p, "path")->valuestring);
    return cJSON_CreateString(b);
}

static lf_status two_shows(lf_registry *r, int64_t a, int64_t b, cJSON **ja, cJSON **jb) {
    char *sa = NULL, *sb = NULL;
    *ja = *jb = NULL;
    lf_status st = lf_registry_show_json(r, a, &sa);
    if (st == LF_OK) st = lf_registry_show_json(r, b, &sb);
    if (st == LF_OK) {
        *ja = cJSON_Parse(sa);
        *jb = cJSON_Parse(sb);
        if (!*ja || !*jb) st = lf_fail(LF_ERR_NOMEM, "out of memory comparing checkpoints");
    }
    lf_free(sa);
    lf_free(sb);
    if (st != LF_OK) {
        cJSON_Delete(*ja);
        cJSON_Delete(*jb);
        *ja = *jb = NULL;
    }
    return st;
}

lf_status lf_registry_diff_json(lf_registry *r, int64_t a, int64_t b, char **json) {
    if (!r || !json) return lf_fail(LF_ERR_INVALID_ARG, "lf_registry_diff_json: NULL argument");
    *json = NULL;
    cJSON *ja, *jb;
    lf_status st = two_shows(r, a, b, &ja, &jb);
    if (st != LF_OK) return st;
    cJSON *ra = cJSON_GetObjectItemCaseSensitive(ja, "run_record"),
          *rb = cJSON_GetObjectItemCaseSensitive(jb, "run_record");
    leaves la = {0}, lb = {0};
    st = flatten(cJSON_GetObjectItemCaseSensitive(ra, "config"), "", &la, 0);
    if (st == LF_OK) st = flatten(cJSON_GetObjectItemCaseSensitive(rb, "config"), "", &lb, 0);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddItemToObject(root, "a", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(ja, "id"), 1));
    cJSON_AddItemToObject(root, "b", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(jb, "id"), 1));
    cJSON *cfg = cJSON_AddArrayToObject(root, "config"), *data = cJSON_AddArrayToObject(root, "data");
    if (st == LF_OK) {
        qsort(la.v, la.n, sizeof *la.v, cmp_leaf);
        qsort(lb.v, lb.n, sizeof *lb.v, cmp_leaf);
        size_t i = 0, j = 0;
        while (i < la.n || j < lb.n) { /* merge of two sorted key lists */
            int c = i == la.n ? 1 : j == lb.n ? -1 : strcmp(la.v[i].key, lb.v[j].key);
            if (c < 0) {
                add_pair(cfg, la.v[i].key, la.v[i].item, NULL);
                i++;
            } else if (c > 0) {
                add_pair(cfg, lb.v[j].key, NULL, lb.v[j].item);
                j++;
            } else {
                if (!same_item(la.v[i].item, lb.v[j].item)) add_pair(cfg, la.v[i].key, la.v[i].item, lb.v[j].item);
                i++;
                j++;
            }
        }
        static const char *const keys[] = {"dataset",        "dataset_hash", "tokenizer",
                                           "tokenizer_hash", "code_version", "world_size"};
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
            const cJSON *x = cJSON_GetObjectItemCaseSensitive(ra, keys[k]),
                        *y = cJSON_GetObjectItemCaseSensitive(rb, keys[k]);
            if (!same_item(x, y)) add_pair(data, keys[k], x, y);
        }
        cJSON *ea = edge_str(ra), *eb = edge_str(rb);
        if (!same_item(ea, eb)) add_pair(data, "parent", ea, eb);
        cJSON_Delete(ea);
        cJSON_Delete(eb);
        const cJSON *sa = cJSON_GetObjectItemCaseSensitive(ja, "step"),
                    *sb = cJSON_GetObjectItemCaseSensitive(jb, "step");
        if (!same_item(sa, sb)) add_pair(data, "step", sa, sb);
        st = lf__reg_print(root, json);
    }
    cJSON_Delete(root);
    leaves_free(&la);
    leaves_free(&lb);
    cJSON_Delete(ja);
    cJSON_Delete(jb);
    return st;
}

lf_status lf_registry_compare_json(lf_registry *r, int64_t a, int64_t b, char **json) {
    if (!r || !json) return lf_fail(LF_ERR_INVALID_ARG, "lf_registry_compare_json: NULL argument");
    *json = NULL;
    cJSON *ja, *jb;
    lf_status st = two_shows(r, a, b, &ja, &jb);
    if (st != LF_OK) return st;
    leaves la = {0}, lb = {0};
    st = flatten(cJSON_GetObjectItemCaseSensitive(ja, "metrics"), "", &la, 31);
    if (st == LF_OK) st = flatten(cJSON_GetObjectItemCaseSensitive(jb, "metrics"), "", &lb, 31);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddItemToObject(root, "a", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(ja, "id"), 1));
    cJSON_AddItemToObject(root, "b", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(jb, "id"), 1));
    cJSON *arr = cJSON_AddArrayToObject(root, "metrics");
    if (st == LF_OK) {
        qsort(la.v, la.n, sizeof *la.v, cmp_leaf);
        qsort(lb.v, lb.n, sizeof *lb.v, cmp_leaf);
        size_t i = 0, j = 0;
        while (i < la.n || j < lb.n) {
            int c = i == la.n ? 1 : j == lb.n ? -1 : strcmp(la.v[i].key, lb.v[j].key);
            const leaf *x = c <= 0 ? &la.v[i] : NULL, *y = c >= 0 ? &lb.v[j] : NULL;
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "name", x ? x->key : y->key);
            cJSON_AddItemToObject(e, "a", x ? cJSON_Duplicate(x->item, 1) : cJSON_CreateNull());
            cJSON_AddItemToObject(e, "b", y ? cJSON_Duplicate(y->item, 1) : cJSON_CreateNull());
            if (x && y && cJSON_IsNumber(x->item) && cJSON_IsNumber(y->item))
                cJSON_AddNumberToObject(e, "delta", y->item->valuedouble - x->item->valuedouble);
            else cJSON_AddNullToObject(e, "delta");
            cJSON_AddItemToArray(arr, e);
            if (x) i++;
            if (y) j++;
        }
        st = lf__reg_print(root, json);
    }
    cJSON_Delete(root);
    leaves_free(&la);
    leaves_free(&lb);
    cJSON_Delete(ja);
    cJSON_Delete(jb);
    return st;
}
