/*
 * The model registry's database: opening, the schema and its migrations,
 * and the records a training run writes (runs, checkpoints, metrics,
 * lineage edges). What is recorded is specified in include/llmforge/registry.h.
 *
 * Why SQLite: many runs, and `llmforge models` next to them, read and write
 * one file at once from several processes and hosts of a shared file system
 * without a server; SQLite gives transactions, locking and a query language
 * for exactly that, and Debian ships it (libsqlite3-dev). We do not write a
 * database ourselves.
 *
 * Invariants:
 *  - The file's magic is PRAGMA application_id = LF_REG_APP_ID and its
 *    version PRAGMA user_version. A file with another application id, or
 *    with tables but no version (someone else's database), is refused, and
 *    so is a version newer than this build's.
 *  - The schema is built only by the migrations, in order, inside one
 *    BEGIN IMMEDIATE transaction: a new file runs them all from version 0,
 *    an older file the ones it lacks, so an old file takes the path every
 *    new one takes, and a crash mid-migration leaves the old version intact.
 *  - WAL journal (readers never block the writer nor the writer them) and a
 *    busy timeout; every write is one BEGIN IMMEDIATE transaction, so a
 *    writer that must wait does so at BEGIN (on the busy handler) and never
 *    fails half way with SQLITE_BUSY when upgrading a read to a write.
 *  - Paths are stored absolute (realpath when they resolve), so a run, its
 *    resume and `llmforge models` from another directory agree on them.
 *  - Library code: nothing prints; every failure is an lf_status whose
 *    message names the registry file.
 *
 * Schema versions: 1 kept a checkpoint's metrics in a JSON column; 2 moved
 * them into a table (so --where and promotion filter in SQL and each value
 * keeps its source) and records when and why a checkpoint directory was
 * removed; 3 links a run to the sweep and trial that started it (two
 * columns of runs, set by `llmforge sweep` after the run: the trainer itself
 * knows nothing of sweeps).
 *
 * References: SQLite documentation: "Write-Ahead Logging"
 * (sqlite.org/wal.html), "PRAGMA user_version / application_id"
 * (sqlite.org/pragma.html), "ALTER TABLE ... DROP COLUMN" (3.35),
 * "RETURNING" (3.35), the JSON1 functions (json_each).
 */
#define _GNU_SOURCE /* realpath, gethostname */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "registry/registry_impl.h"

#define LF_REG_APP_ID 0x4C464752 /* "LFGR" */

/* ---------------------------------------------------------------- the schema */

static const char *const k_migrations[LF_REGISTRY_SCHEMA_VERSION] = {
    /* 0 -> 1 */
    "CREATE TABLE runs ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  out_dir TEXT NOT NULL,"
    "  config_json TEXT NOT NULL,"
    "  config_hash TEXT NOT NULL,"
    "  dataset TEXT NOT NULL DEFAULT '',"
    "  dataset_hash TEXT NOT NULL DEFAULT '',"
    "  tokenizer TEXT NOT NULL DEFAULT '',"
    "  tokenizer_hash TEXT NOT NULL DEFAULT '',"
    "  code_version TEXT NOT NULL,"
    "  host TEXT NOT NULL,"
    "  pid INTEGER NOT NULL,"
    "  world_size INTEGER NOT NULL,"
    "  started REAL NOT NULL,"
    "  ended REAL,"
    "  status TEXT NOT NULL CHECK (status IN ('running','finished','failed','preempted')),"
    "  message TEXT NOT NULL DEFAULT '');"
    "CREATE INDEX runs_out_dir ON runs(out_dir);"
    "CREATE TABLE checkpoints ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  run_id INTEGER NOT NULL REFERENCES runs(id),"
    "  step INTEGER NOT NULL,"
    "  path TEXT NOT NULL,"
    "  sha256 TEXT NOT NULL,"
    "  model_sha256 TEXT NOT NULL,"
    "  files_json TEXT NOT NULL,"
    "  metrics_json TEXT NOT NULL DEFAULT '{}',"
    "  is_best INTEGER NOT NULL DEFAULT 0,"
    "  is_latest INTEGER NOT NULL DEFAULT 0,"
    "  created REAL NOT NULL,"
    "  UNIQUE (run_id, step));"
    "CREATE INDEX checkpoints_model ON checkpoints(model_sha256);"
    "CREATE INDEX checkpoints_path ON checkpoints(path);"
    "CREATE TABLE edges ("
    "  run_id INTEGER NOT NULL REFERENCES runs(id),"
    "  kind TEXT NOT NULL CHECK (kind IN ('resumed-from','initialised-from','fine-tuned-from')),"
    "  parent_ckpt INTEGER REFERENCES checkpoints(id),"
    "  parent_path TEXT NOT NULL,"
    "  parent_sha256 TEXT NOT NULL DEFAULT '',"
    "  external TEXT," /* NULL: a registry checkpoint; 'hf', 'file', 'checkpoint' otherwise */
    "  UNIQUE (run_id, kind));"
    "CREATE TABLE tags ("
    "  ckpt_id INTEGER NOT NULL REFERENCES checkpoints(id),"
    "  name TEXT NOT NULL,"
    "  created REAL NOT NULL,"
    "  PRIMARY KEY (name, ckpt_id));",
    /* 1 -> 2: metrics as rows with their source; removal recorded */
    "CREATE TABLE metrics ("
    "  ckpt_id INTEGER NOT NULL REFERENCES checkpoints(id),"
    "  name TEXT NOT NULL,"
    "  value REAL,"
    "  source TEXT NOT NULL,"
    "  recorded REAL NOT NULL,"
    "  PRIMARY KEY (ckpt_id, name));"
    "CREATE INDEX metrics_name ON metrics(name, value);"
    "INSERT INTO metrics (ckpt_id, name, value, source, recorded)"
    "  SELECT c.id, j.key, CASE WHEN j.type IN ('integer','real') THEN j.value END, 'train', c.created"
    "  FROM checkpoints c, json_each(CASE WHEN json_valid(c.metrics_json) THEN c.metrics_json ELSE '{}' END) j;"
    "ALTER TABLE checkpoints DROP COLUMN metrics_json;"
    "ALTER TABLE checkpoints ADD COLUMN removed REAL;"
    "ALTER TABLE checkpoints ADD COLUMN removed_by TEXT;",
    /* 2 -> 3: the sweep and trial a run belongs to (llmforge sweep) */
    "ALTER TABLE runs ADD COLUMN sweep TEXT;"
    "ALTER TABLE runs ADD COLUMN sweep_trial TEXT;"
    "CREATE INDEX runs_sweep ON runs(sweep, sweep_trial);",
};

/* The tables each version must hold (a damaged or foreign file lacks some). */
static const char *const k_tables[LF_REGISTRY_SCHEMA_VERSION + 1] = {"", "runs checkpoints edges tags",
                                                                     "runs checkpoints edges tags metrics",
                                                                     "runs checkpoints edges tags metrics"};

/* ---------------------------------------------------------------- helpers */

lf_status lf__reg_fail(lf_registry *r, const char *what) {
    int code = r->db ? sqlite3_errcode(r->db) : SQLITE_CANTOPEN;
    const char *msg = r->db ? sqlite3_errmsg(r->db) : "cannot open";
    lf_status st;
    switch (code) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED: st = LF_ERR_BUSY; break;
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
    case SQLITE_SCHEMA:
    case SQLITE_ERROR: st = LF_ERR_FORMAT; break;
    case SQLITE_NOMEM: st = LF_ERR_NOMEM; break;
    case SQLITE_CONSTRAINT:
    case SQLITE_MISMATCH:
    case SQLITE_RANGE: st = LF_ERR_INVALID_ARG; break;
    default: st = LF_ERR_IO; break; /* READONLY, CANTOPEN, IOERR, FULL, PERM, ... */
    }
    r->last = st;
    if (code == SQLITE_BUSY || code == SQLITE_LOCKED)
        return lf_fail(st, "registry '%s': %s: %s (another process held the database for more than %d ms)", r->path,
                       what, msg, LF_REGISTRY_BUSY_TIMEOUT_MS);
    return lf_fail(st, "registry '%s': %s: %s", r->path, what, msg);
}

lf_status lf__reg_exec(lf_registry *r, const char *sql, const char *what) {
    if (sqlite3_exec(r->db, sql, NULL, NULL, NULL) != SQLITE_OK) return lf__reg_fail(r, what);
    return LF_OK;
}

lf_status lf__reg_begin(lf_registry *r) { return lf__reg_exec(r, "BEGIN IMMEDIATE", "cannot start a write"); }

lf_status lf__reg_commit(lf_registry *r) {
    lf_status st = lf__reg_exec(r, "COMMIT", "cannot commit");
    if (st != LF_OK) lf__reg_rollback(r);
    return st;
}

void lf__reg_rollback(lf_registry *r) {
    if (!sqlite3_get_autocommit(r->db)) sqlite3_exec(r->db, "ROLLBACK", NULL, NULL, NULL);
}

sqlite3_stmt *lf__reg_prepare(lf_registry *r, const char *sql) {
    sqlite3_stmt *s = NULL;
    if (sqlite3_prepare_v2(r->db, sql, -1, &s, NULL) != SQLITE_OK) {
        lf__reg_fail(r, "cannot prepare a query");
        return NULL;
    }
    return s;
}

const char *lf__reg_text(sqlite3_stmt *s, int col) {
    const unsigned char *t = sqlite3_column_text(s, col);
    return t ? (const char *)t : "";
}

double lf__reg_now(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

void lf__reg_abspath(const char *p, char *out, size_t cap) {
    char *rp = realpath(p, NULL);
    snprintf(out, cap, "%s", rp ? rp : p);
    free(rp);
    size_t n = strlen(out);
    while (n > 1 && out[n - 1] == '/') out[--n] = 0;
}

/* One integer from a one-row query (PRAGMA user_version, counts). */
static lf_status query_int(lf_registry *r, const char *sql, long long *v, const char *what) {
    sqlite3_stmt *s = lf__reg_prepare(r, sql);
    if (!s) return r->last;
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) *v = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    if (rc != SQLITE_ROW) return lf__reg_fail(r, what);
    return LF_OK;
}

/* ---------------------------------------------------------------- paths */

lf_status lf_registry_path_resolve(const char *configured, char *out, size_t cap) {
    if (!out || cap == 0) return lf_fail(LF_ERR_INVALID_ARG, "lf_registry_path_resolve: no output buffer");
    const char *env = getenv(LF_REGISTRY_ENV), *home = getenv("HOME");
    int n;
    if (configured && *configured) n = snprintf(out, cap, "%s", configured);
    else if (env && *env) n = snprintf(out, cap, "%s", env);
    else if (home && *home) n = snprintf(out, cap, "%s/.local/share/llmforge/registry.db", home);
    else
        return lf_fail(LF_ERR_NOT_FOUND, "no registry file: registry.path and %s are unset and so is HOME",
                       LF_REGISTRY_ENV);
    if (n < 0 || (size_t)n >= cap) return lf_fail(LF_ERR_INVALID_ARG, "registry path is too long (%d bytes)", n);
    return LF_OK;
}

/* mkdir -p of the directory holding path. */
static lf_status make_parent(const char *path) {
    char dir[REG_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir) return LF_OK;
    *slash = 0;
    return lf_mkdirs(dir);
}

/* ---------------------------------------------------------------- open */

static lf_status check_tables(lf_registry *r, int version) {
    char want[128];
    snprintf(want, sizeof want, "%s", k_tables[version]);
    for (char *tok = strtok(want, " "); tok; tok = strtok(NULL, " ")) {
        sqlite3_stmt *s = lf__reg_prepare(r, "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?");
        if (!s) return r->last;
        sqlite3_bind_text(s, 1, tok, -1, SQLITE_TRANSIENT);
        int rc = sqlite3_step(s);
        sqlite3_finalize(s);
        if (rc == SQLITE_DONE)
            return lf_fail(LF_ERR_FORMAT, "registry '%s': schema version %d but table '%s' is missing (damaged file)",
                           r->path, version, tok);
        if (rc != SQLITE_ROW) return lf__reg_fail(r, "cannot read the schema");
    }
    return LF_OK;
}

/* Bring the schema to `target` (<= LF_REGISTRY_SCHEMA_VERSION). */
static lf_status migrate(lf_registry *r, int target) {
    long long ver = 0, app = 0, ntab = 0;
    lf_status st = query_int(r, "PRAGMA user_version", &ver, "cannot read the schema version");
    if (st == LF_OK) st = query_int(r, "PRAGMA application_id", &app, "cannot read the application id");
    if (st != LF_OK) return st;
    if (app != 0 && app != LF_REG_APP_ID)
        return lf_fail(LF_ERR_FORMAT,
                       "registry '%s' is a SQLite database of another application (application_id "
                       "0x%llx)",
                       r->path, (unsigned long long)app);
    if (ver > LF_REGISTRY_SCHEMA_VERSION)
        return lf_fail(LF_ERR_UNSUPPORTED,
                       "registry '%s' has schema version %lld; this build knows versions up to %d "
                       "(a newer llmforge wrote it)",
                       r->path, ver, LF_REGISTRY_SCHEMA_VERSION);
    if (ver < 0) return lf_fail(LF_ERR_FORMAT, "registry '%s': schema version %lld", r->path, ver);
    if (ver >= target) return check_tables(r, (int)ver);
    if ((st = lf__reg_begin(r)) != LF_OK) return st;
    /* another process may have migrated while we waited for the lock */
    st = query_int(r, "PRAGMA user_version", &ver, "cannot read the schema version");
    if (st == LF_OK && ver == 0) {
        st = query_int(r, "SELECT count(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'", &ntab,
                       "cannot read the schema");
        if (st == LF_OK && ntab > 0)
            st = lf_fail(LF_ERR_FORMAT,
                         "registry '%s' is a SQLite database with %lld tables of its own and no "
                         "llmforge schema version: not a registry",
                         r->path, ntab);
    }
    for (int v = (int)ver; st == LF_OK && v < target; v++) {
        char what[64];
        snprintf(what, sizeof what, "migration of the schema from version %d to %d", v, v + 1);
        st = lf__reg_exec(r, k_migrations[v], what);
        char pragma[64];
        snprintf(pragma, sizeof pragma, "PRAGMA user_version = %d", v + 1);
        if (st == LF_OK) st = lf__reg_exec(r, pragma, what);
    }
    if (st == LF_OK) {
        char pragma[64];
        snprintf(pragma, sizeof pragma, "PRAGMA application_id = %d", LF_REG_APP_ID);
        st = lf__reg_exec(r, pragma, "cannot set the application id");
    }
    if (st == LF_OK && ver < target) st = check_tables(r, target);
    if (st == LF_OK) return lf__reg_commit(r);
    lf__reg_rollback(r);
    return st;
}

static lf_status open_at(lf_registry **out, const char *path, unsigned flags, int version) {
    if (!out) return lf_fail(LF_ERR_INVALID_ARG, "lf_registry_open: out is NULL");
    *out = NULL;
    if (!path || !*path) return lf_fail(LF_ERR_INVALID_ARG, "lf_registry_open: no path");
    if (strlen(path) >= REG_PATH_MAX) return lf_fail(LF_ERR_INVALID_ARG, "registry path is too long");
    struct stat sb;
    int exists = stat(path, &sb) == 0;
    if (exists && !S_ISREG(sb.st_mode)) return lf_fail(LF_ERR_IO, "registry '%s' is not a regular file", path);
    if (!exists && !(flags & LF_REGISTRY_CREATE))
        return lf_fail(LF_ERR_NOT_FOUND, "registry '%s' does not exist (no run has been recorded there)", path);
    if (!exists) {
        lf_status st = make_parent(path);
        if (st != LF_OK) {
            lf_error_prefix("registry '%s'", path);
            return st;
        }
    }
    lf_registry *r = calloc(1, sizeof *r);
    if (!r) return lf_fail(LF_ERR_NOMEM, "out of memory opening registry '%s'", path);
    snprintf(r->path, sizeof r->path, "%s", path);
    lf_status st = LF_OK;
    int oflags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | (exists ? 0 : SQLITE_OPEN_CREATE);
    if (sqlite3_open_v2(path, &r->db, oflags, NULL) != SQLITE_OK) {
        st = lf__reg_fail(r, "cannot open");
        goto fail;
    }
    sqlite3_extended_result_codes(r->db, 0);
    sqlite3_busy_timeout(r->db, LF_REGISTRY_BUSY_TIMEOUT_MS);
    /* WAL is a property of the file (persistent); asking again is cheap */
    sqlite3_stmt *s = lf__reg_prepare(r, "PRAGMA journal_mode=WAL");
    if (!s) {
        st = r->last;
        goto fail;
    }
    int rc = sqlite3_step(s);
    int wal = rc == SQLITE_ROW && !strcmp(lf__reg_text(s, 0), "wal");
    sqlite3_finalize(s);
    if (rc != SQLITE_ROW) {
        st = lf__reg_fail(r, "cannot switch to WAL mode");
        goto fail;
    }
    if (!wal) {
        st = lf_fail(LF_ERR_IO,
                     "registry '%s': the file system refused WAL mode (it needs shared memory beside the "
                     "file: a local or POSIX-locking file system)",
                     path);
        goto fail;
    }
    if ((st = lf__reg_exec(r, "PRAGMA foreign_keys=ON; PRAGMA synchronous=NORMAL", "cannot configure")) != LF_OK)
        goto fail;
    if ((st = migrate(r, version)) != LF_OK) goto fail;
    *out = r;
    return LF_OK;
fail:
    sqlite3_close(r->db);
    free(r);
    return st;
}

lf_status lf_registry_open(lf_registry **out, const char *path, unsigned flags) {
    return open_at(out, path, flags, LF_REGISTRY_SCHEMA_VERSION);
}

lf_status lf__registry_open_version(lf_registry **out, const char *path, int version) {
    if (version < 1 || version > LF_REGISTRY_SCHEMA_VERSION)
        return lf_fail(LF_ERR_INVALID_ARG, "schema version %d is not in [1, %d]", version, LF_REGISTRY_SCHEMA_VERSION);
    return open_at(out, path, LF_REGISTRY_CREATE, version);
}

void lf_registry_close(lf_registry *r) {
    if (!r) return;
    sqlite3_close(r->db);
    free(r);
}

const char *lf_registry_file(const lf_registry *r) { return r ? r->path : ""; }

int lf_registry_schema_version(lf_registry *r) {
    if (!r) return LF_ERR_INVALID_ARG;
    long long v = 0;
    lf_status st = query_int(r, "PRAGMA user_version", &v, "cannot read the schema version");
    return st == LF_OK ? (int)v : st;
}

const char *lf_run_status_name(lf_run_status s) {
    static const char *const names[] = {"running", "finished", "failed", "preempted"};
    return (unsigned)s < 4 ? names[s] : "unknown";
}

/* ---------------------------------------------------------------- runs */

static int is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int file_exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* The registry checkpoint at abs_path (a step directory), else the newest
 * with model hash `sha` (may be ""); 0 when none. */
static lf_status find_parent(lf_registry *r, const char *abs_path, const char *sha, int64_t *id) {
    *id = 0;
    const char *sql[2] = {"SELECT id FROM checkpoints WHERE path = ? ORDER BY id DESC LIMIT 1",
                          "SELECT id FROM checkpoints WHERE model_sha256 = ? ORDER BY id DESC LIMIT 1"};
    const char *arg[2] = {abs_path, sha};
    for (int k = 0; k < 2 && *id == 0; k++) {
        if (!arg[k] || !*arg[k]) continue;
        sqlite3_stmt *s = lf__reg_prepare(r, sql[k]);
        if (!s) return r->last;
        sqlite3_bind_text(s, 1, arg[k], -1, SQLITE_TRANSIENT);
        int rc = sqlite3_step(s);
        if (rc == SQLITE_ROW) *id = sqlite3_column_int64(s, 0);
        sqlite3_finalize(s);
        if (rc != SQLITE_ROW && rc != SQLITE_DONE) return lf__reg_fail(r, "cannot look up a parent checkpoint");
    }
    return LF_OK;
}

static lf_status add_edge(lf_registry *r, int64_t run, const char *kind, int64_t parent, const char *path,
                          const char *sha, const char *external) {
    sqlite3_stmt *s = lf__reg_prepare(r, "INSERT INTO edges (run_id, kind, parent_ckpt, parent_path, parent_sha256, "
                                         "external) VALUES (?, ?, ?, ?, ?, ?)");
    if (!s) return r->last;
    sqlite3_bind_int64(s, 1, run);
    sqlite3_bind_text(s, 2, kind, -1, SQLITE_STATIC);
    if (parent) sqlite3_bind_int64(s, 3, parent);
    else sqlite3_bind_null(s, 3);
    sqlite3_bind_text(s, 4, path, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 5, sha ? sha : "", -1, SQLITE_TRANSIENT);
    if (external) sqlite3_bind_text(s, 6, external, -1, SQLITE_STATIC);
    else sqlite3_bind_null(s, 6);
    int rc = sqlite3_step(s);
    sqlite3_finalize(s);
    return rc == SQLITE_DONE ? LF_OK : lf__reg_fail(r, "cannot record a lineage edge");
}

/* The run that wrote checkpoint `parent` is still "running" although a new
 * run resumed from it: it ended without saying so (killed, preempted). Unless
 * its process is alive on this host, record that. */
static lf_status mark_preempted(lf_registry *r, int64_t parent, int64_t child, const char *host) {
    sqlite3_stmt *s = lf__reg_prepare(r, "SELECT r.id, r.host, r.pid FROM runs r JOIN checkpoints c ON c.run_id = "
                                         "r.id WHERE c.id = ? AND r.status = 'running'");
    if (!s) return r->last;
    sqlite3_bind_int64(s, 1, parent);
    int rc = sqlite3_step(s);
    int64_t run = 0;
    int alive = 0;
    if (rc == SQLITE_ROW) {
        run = sqlite3_column_int64(s, 0);
        long pid = (long)sqlite3_column_int64(s, 2);
        alive = !strcmp(lf__reg_text(s, 1), host) && pid > 0 && pid != (long)getpid() &&
                (kill((pid_t)pid, 0) == 0 || errno == EPERM);
    }
    sqlite3_finalize(s);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return lf__reg_fail(r, "cannot read a parent run");
    if (!run || alive) return LF_OK;
    s = lf__reg_prepare(r, "UPDATE runs SET status = 'preempted', message = ? WHERE id = ?");
    if (!s) return r->last;
    char msg[128];
    snprintf(msg, sizeof msg, "ended without recording its end; resumed by r%lld", (long long)child);
    sqlite3_bind_text(s, 1, msg, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 2, run);
    rc = sqlite3_step(s);
    sqlite3_finalize(s);
    return rc == SQLITE_DONE ? LF_OK : lf__reg_fail(r, "cannot mark a run preempted");
}

lf_status lf_registry_run_begin(lf_registry *r, const lf_registry_run_info *in, int64_t *run_id) {
    if (!r || !in || !run_id || !in->out_dir || !in->config_json)
        return lf_fail(LF_ERR_INVALID_ARG, "lf_registry_run_begin: NULL argument");
    *run_id = 0;
    char out_dir[REG_PATH_MAX], host[256] = "", cfg_hash[65], dataset[REG_PATH_MAX] = "";
    lf__reg_abspath(in->out_dir, out_dir, sizeof out_dir);
    if (in->dataset && *in->dataset) lf__reg_abspath(in->dataset, dataset, sizeof dataset);
    if (in->host) snprintf(host, sizeof host, "%s", in->host);
    else if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "unknown");
    lf_sha256_hex(in->config_json, strlen(in->config_json), cfg_hash);

    /* parents, found before the write lock is taken (hashing may take a while) */
    char res_path[REG_PATH_MAX] = "", res_sha[65] = "", init_path[REG_PATH_MAX] = "", init_sha[65] = "";
    int init_hf = 0;
    lf_status st = LF_OK;
    if (in->resumed_from && *in->resumed_from) {
        lf__reg_abspath(in->resumed_from, res_path, sizeof res_path);
        char sha[65];
        if (lf__reg_ckpt_files(res_path, sha, res_sha, NULL) != LF_OK) res_sha[0] = 0;
    }
    if (in->init_from && *in->init_from) {
        lf__reg_abspath(in->init_from, init_path, sizeof init_path);
        if (in->init_from_hash && *in->init_from_hash) {
            snprintf(init_sha, sizeof init_sha, "%s", in->init_from_hash);
            init_hf = lf__reg_is_hf_dir(init_path);
        } else if ((st = lf_registry_hash_model(init_path, init_sha, &init_hf)) != LF_OK) {
            lf_error_prefix("registry: --init-from");
            return st;
        }
    }
    if ((st = lf__reg_begin(r)) != LF_OK) return st;
    sqlite3_stmt *s = lf__reg_prepare(r, "INSERT INTO runs (out_dir, config_json, config_hash, dataset, dataset_hash, "
                                         "tokenizer, tokenizer_hash, code_version, host, pid, world_size, started, "
                                         "status) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,'running') RETURNING id");
    if (!s) {
        st = r->last;
        goto fail;
    }
    sqlite3_bind_text(s, 1, out_dir, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 2, in->config_json, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 3, cfg_hash, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 4, dataset, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 5, in->dataset_hash ? in->dataset_hash : "", -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 6, in->tokenizer ? in->tokenizer : "", -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 7, in->tokenizer_hash ? in->tokenizer_hash : "", -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 8, in->code_version ? in->code_version : lf_registry_code_version(), -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 9, host, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 10, in->pid ? in->pid : (long)getpid());
    sqlite3_bind_int(s, 11, in->world_size > 0 ? in->world_size : 1);
    sqlite3_bind_double(s, 12, in->started > 0 ? in->started : lf__reg_now());
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) *run_id = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    if (rc != SQLITE_ROW) {
        st = lf__reg_fail(r, "cannot record the run");
        goto fail;
    }
    int64_t parent = 0;
    if (res_path[0]) {
        if ((st = find_parent(r, res_path, res_sha, &parent)) != LF_OK) goto fail;
        st = add_edge(r, *run_id, "resumed-from", parent, res_path, res_sha, parent ? NULL : "checkpoint");
        if (st == LF_OK && parent) st = mark_preempted(r, parent, *run_id, host);
        if (st != LF_OK) goto fail;
    }
    if (init_path[0]) {
        /* a model.safetensors inside a step directory names that checkpoint */
        char dir[REG_PATH_MAX];
        snprintf(dir, sizeof dir, "%s", init_path);
        if (!is_dir(dir)) {
            char *slash = strrchr(dir, '/');
            if (slash && slash != dir) *slash = 0;
        }
        char state[REG_PATH_MAX + 32];
        snprintf(state, sizeof state, "%s/trainer_state.json", dir);
        int is_ckpt = file_exists(state);
        if ((st = find_parent(r, is_ckpt ? dir : NULL, init_sha, &parent)) != LF_OK) goto fail;
        const char *ext = parent ? NULL : is_ckpt ? "checkpoint" : init_hf ? "hf" : "file";
        st = add_edge(r, *run_id, in->fine_tune ? "fine-tuned-from" : "initialised-from", parent, init_path, init_sha,
                      ext);
        if (st != LF_OK) goto fail;
    }
    return lf__reg_commit(r);
fail:
    lf__reg_rollback(r);
    *run_id = 0;
    return st;
}

lf_status lf_registry_run_end(lf_registry *r, int64_t run_id, lf_run_status status, const char *message) {
    if (!r || (unsigned)status > LF_RUN_PREEMPTED)
        return lf_fail(LF_ERR_INVALID_ARG, "lf_registry_run_end: bad argument");
    lf_status st = lf__reg_begin(r);
    if (st != LF_OK) return st;
    sqlite3_stmt *s = lf__reg_prepare(r, "UPDATE runs SET status = ?, ended = ?, message = ? WHERE id = ?");
    if (!s) {
        lf__reg_rollback(r);
        return r->last;
    }
    sqlite3_bind_text(s, 1, lf_run_status_name(status), -1, SQLITE_STATIC);
    sqlite3_bind_double(s, 2, lf__reg_now());
    sqlite3_bind_text(s, 3, message ? message : "", -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 4, run_id);
    int rc = sqlite3_step(s);
    sqlite3_finalize(s);
    if (rc != SQLITE_DONE) {
        st = lf__reg_fail(r, "cannot record the end of the run");
    } else if (sqlite3_changes(r->db) != 1) {
        st = lf_fail(LF_ERR_NOT_FOUND, "registry '%s': no run r%lld", r->path, (long long)run_id);
    }
    if (st != LF_OK) {
        lf__reg_rollback(r);
        return st;
    }
    return lf__reg_commit(r);
}

/* ---------------------------------------------------------------- sweeps */

lf_status lf_registry_run_link_sweep(lf_registry *r, const char *out_dir, long pid, const char *host, const char *sweep,
                                     const char *trial, int *n_runs) {
    if (n_runs) *n_runs = 0;
    if (!r || !out_dir || !sweep || !trial || !*sweep || !*trial)
        return lf_fail(LF_ERR_INVALID_ARG, "lf_registry_run_link_sweep: NULL or empty argument");
    char abs[REG_PATH_MAX];
    lf__reg_abspath(out_dir, abs, sizeof abs);
    lf_status st = lf__reg_begin(r);
    if (st != LF_OK) return st;
    char me[256] = "";
    if (pid > 0 && !host) {
        if (gethostname(me, sizeof me - 1) != 0) me[0] = 0;
        host = me;
    }
    sqlite3_stmt *s = lf__reg_prepare(r, pid > 0 ? "UPDATE runs SET sweep = ?, sweep_trial = ? WHERE out_dir = ? AND "
                                                   "pid = ? AND host = ?"
                                                 : "UPDATE runs SET sweep = ?, sweep_trial = ? WHERE out_dir = ?");
    if (!s) {
        lf__reg_rollback(r);
        return r->last;
    }
    sqlite3_bind_text(s, 1, sweep, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 2, trial, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 3, abs, -1, SQLITE_TRANSIENT);
    if (pid > 0) {
        sqlite3_bind_int64(s, 4, pid);
        sqlite3_bind_text(s, 5, host, -1, SQLITE_TRANSIENT);
    }
    int rc = sqlite3_step(s);
    sqlite3_finalize(s);
    if (rc != SQLITE_DONE) {
        st = lf__reg_fail(r, "cannot link runs to a sweep");
        lf__reg_rollback(r);
        return st;
    }
    int changed = sqlite3_changes(r->db);
    st = lf__reg_commit(r);
    if (st == LF_OK && n_runs) *n_runs = changed;
    return st;
}

lf_status lf_registry_sweep_runs_json(lf_registry *r, const char *sweep, char **json) {
    if (!r || !sweep || !json) return lf_fail(LF_ERR_INVALID_ARG, "lf_registry_sweep_runs_json: NULL argument");
    *json = NULL;
    sqlite3_stmt *s = lf__reg_prepare(r, "SELECT sweep_trial, id FROM runs WHERE sweep = ? ORDER BY sweep_trial, id");
    if (!s) return r->last;
    sqlite3_bind_text(s, 1, sweep, -1, SQLITE_TRANSIENT);
    cJSON *o = cJSON_CreateObject();
    int rc = SQLITE_DONE;
    while (o && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        const char *trial = lf__reg_text(s, 0);
        cJSON *list = cJSON_GetObjectItemCaseSensitive(o, trial);
        if (!list) list = cJSON_AddArrayToObject(o, trial);
        char id[32];
        snprintf(id, sizeof id, "r%lld", (long long)sqlite3_column_int64(s, 1));
        if (list) cJSON_AddItemToArray(list, cJSON_CreateString(id));
    }
    sqlite3_finalize(s);
    if (!o) return lf_fail(LF_ERR_NOMEM, "registry '%s': out of memory listing a sweep's runs", r->path);
    if (rc != SQLITE_DONE) {
        cJSON_Delete(o);
        return lf__reg_fail(r, "cannot list a sweep's runs");
    }
    lf_status st = lf__reg_print(o, json);
    cJSON_Delete(o);
    return st;
}

/* ---------------------------------------------------------------- checkpoints and metrics */

static lf_status put_metrics(lf_registry *r, int64_t ckpt, const lf_registry_metric *m, int n, const char *source) {
    if (n <= 0) return LF_OK;
    sqlite3_stmt *s = lf__reg_prepare(r, "INSERT INTO metrics (ckpt_id, name, value, source, recorded) VALUES "
                                         "(?,?,?,?,?) ON CONFLICT (ckpt_id, name) DO UPDATE SET value = "
                                         "excluded.value, source = excluded.source, recorded = excluded.recorded");
    if (!s) return r->last;
    double now = lf__reg_now();
    lf_status st = LF_OK;
    for (int i = 0; i < n && st == LF_OK; i++) {
        if (!m[i].name || !*m[i].name || strlen(m[i].name) > 255) {
            st = lf_fail(LF_ERR_INVALID_ARG, "registry '%s': metric %d has no name or a name over 255 bytes", r->path,
                         i);
            break;
        }
        sqlite3_reset(s);
        sqlite3_bind_int64(s, 1, ckpt);
        sqlite3_bind_text(s, 2, m[i].name, -1, SQLITE_TRANSIENT);
        if (isfinite(m[i].value)) sqlite3_bind_double(s, 3, m[i].value);
        else sqlite3_bind_null(s, 3);
        sqlite3_bind_text(s, 4, source, -1, SQLITE_TRANSIENT);
        sqlite3_bind_double(s, 5, now);
        if (sqlite3_step(s) != SQLITE_DONE) st = lf__reg_fail(r, "cannot record a metric");
    }
    sqlite3_finalize(s);
    return st;
}

/* Checkpoints of out_dir's runs whose directories are gone: removed by the
 * trainer's rotation (checkpoint.keep_last). */
static lf_status mark_rotated(lf_registry *r, const char *out_dir) {
    sqlite3_stmt *s = lf__reg_prepare(r, "SELECT c.id, c.path FROM checkpoints c JOIN runs r ON c.run_id = r.id "
                                         "WHERE r.out_dir = ? AND c.removed IS NULL");
    sqlite3_stmt *u = s ? lf__reg_prepare(r, "UPDATE checkpoints SET removed = ?, removed_by = 'rotation' WHERE id = ?")
                        : NULL;
    if (!s || !u) {
        sqlite3_finalize(s);
        return r->last;
    }
    sqlite3_bind_text(s, 1, out_dir, -1, SQLITE_TRANSIENT);
    lf_status st = LF_OK;
    int rc;
    while (st == LF_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (is_dir(lf__reg_text(s, 1))) continue;
        sqlite3_reset(u);
        sqlite3_bind_double(u, 1, lf__reg_now());
        sqlite3_bind_int64(u, 2, sqlite3_column_int64(s, 0));
        if (sqlite3_step(u) != SQLITE_DONE) st = lf__reg_fail(r, "cannot mark a rotated checkpoint");
    }
    if (st == LF_OK && rc != SQLITE_DONE) st = lf__reg_fail(r, "cannot list checkpoints");
    sqlite3_finalize(s);
    sqlite3_finalize(u);
    return st;
}

static lf_status set_flag(lf_registry *r, const char *flag, const char *match_col, int64_t id, const char *path,
                          const char *out_dir) {
    char sql[256];
    snprintf(sql, sizeof sql,
             "UPDATE checkpoints SET %s = (%s = ?) WHERE run_id IN (SELECT id FROM runs WHERE "
             "out_dir = ?)",
             flag, match_col);
    sqlite3_stmt *s = lf__reg_prepare(r, sql);
    if (!s) return r->last;
    if (path) sqlite3_bind_text(s, 1, path, -1, SQLITE_TRANSIENT);
    else sqlite3_bind_int64(s, 1, id);
    sqlite3_bind_text(s, 2, out_dir, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(s);
    sqlite3_finalize(s);
    return rc == SQLITE_DONE ? LF_OK : lf__reg_fail(r, "cannot set the best/latest flags");
}

lf_status lf_registry_checkpoint_add(lf_registry *r, const lf_registry_ckpt_info *c, int64_t *ckpt_id) {
    if (ckpt_id) *ckpt_id = 0;
    if (!r || !c || !c->path || c->step < 0 || (c->n_metrics > 0 && !c->metrics))
        return lf_fail(LF_ERR_INVALID_ARG, "lf_registry_checkpoint_add: bad argument");
    char path[REG_PATH_MAX], sha[65], model_sha[65];
    lf__reg_abspath(c->path, path, sizeof path);
    char *files = NULL;
    lf_status st = lf__reg_ckpt_files(path, sha, model_sha, &files);
    if (st != LF_OK) {
        lf_error_prefix("registry '%s'", r->path);
        return st;
    }
    char out_dir[REG_PATH_MAX] = "";
    int64_t id = 0;
    if ((st = lf__reg_begin(r)) != LF_OK) goto done;
    sqlite3_stmt *s = lf__reg_prepare(r, "SELECT out_dir FROM runs WHERE id = ?");
    if (!s) {
        st = r->last;
        goto fail;
    }
    sqlite3_bind_int64(s, 1, c->run_id);
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) snprintf(out_dir, sizeof out_dir, "%s", lf__reg_text(s, 0));
    sqlite3_finalize(s);
    if (rc != SQLITE_ROW) {
        st = rc == SQLITE_DONE ? lf_fail(LF_ERR_NOT_FOUND, "registry '%s': no run r%lld", r->path, (long long)c->run_id)
                               : lf__reg_fail(r, "cannot read the run");
        goto fail;
    }
    s = lf__reg_prepare(r, "INSERT INTO checkpoints (run_id, step, path, sha256, model_sha256, files_json, created) "
                           "VALUES (?,?,?,?,?,?,?) ON CONFLICT (run_id, step) DO UPDATE SET path = excluded.path, "
                           "sha256 = excluded.sha256, model_sha256 = excluded.model_sha256, files_json = "
                           "excluded.files_json, created = excluded.created, removed = NULL, removed_by = NULL "
                           "RETURNING id");
    if (!s) {
        st = r->last;
        goto fail;
    }
    sqlite3_bind_int64(s, 1, c->run_id);
    sqlite3_bind_int64(s, 2, c->step);
    sqlite3_bind_text(s, 3, path, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 4, sha, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 5, model_sha, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 6, files, -1, SQLITE_STATIC);
    sqlite3_bind_double(s, 7, lf__reg_now());
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) id = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    if (rc != SQLITE_ROW) {
        st = lf__reg_fail(r, "cannot record the checkpoint");
        goto fail;
    }
    if ((st = set_flag(r, "is_latest", "id", id, NULL, out_dir)) != LF_OK) goto fail;
    if (c->best_path && *c->best_path) {
        char best[REG_PATH_MAX];
        lf__reg_abspath(c->best_path, best, sizeof best);
        if ((st = set_flag(r, "is_best", "path", 0, best, out_dir)) != LF_OK) goto fail;
    }
    if ((st = put_metrics(r, id, c->metrics, c->n_metrics, "train")) != LF_OK) goto fail;
    if ((st = mark_rotated(r, out_dir)) != LF_OK) goto fail;
    st = lf__reg_commit(r);
    if (st == LF_OK && ckpt_id) *ckpt_id = id;
    goto done;
fail:
    lf__reg_rollback(r);
done:
    lf_free(files);
    return st;
}

lf_status lf_registry_metrics_put(lf_registry *r, int64_t ckpt_id, const lf_registry_metric *m, int n,
                                  const char *source) {
    if (!r || n < 0 || (n > 0 && !m)) return lf_fail(LF_ERR_INVALID_ARG, "lf_registry_metrics_put: bad argument");
    lf_status st = lf__reg_begin(r);
    if (st != LF_OK) return st;
    long long found = 0;
    sqlite3_stmt *s = lf__reg_prepare(r, "SELECT count(*) FROM checkpoints WHERE id = ?");
    if (!s) {
        lf__reg_rollback(r);
        return r->last;
    }
    sqlite3_bind_int64(s, 1, ckpt_id);
    if (sqlite3_step(s) == SQLITE_ROW) found = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    if (!found) st = lf_fail(LF_ERR_NOT_FOUND, "registry '%s': no checkpoint c%lld", r->path, (long long)ckpt_id);
    if (st == LF_OK) st = put_metrics(r, ckpt_id, m, n, source ? source : "suite");
    if (st != LF_OK) {
        lf__reg_rollback(r);
        return st;
    }
    return lf__reg_commit(r);
}
