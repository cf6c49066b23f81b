/* Private declarations shared by the registry's files (registry.c: opening,
 * schema, recording; query.c: references and reports; manage.c: tags,
 * promotion, gc, relink; hash.c: identities of files). */
#ifndef LF_REGISTRY_IMPL_H
#define LF_REGISTRY_IMPL_H

#include <sqlite3.h>
#include "llmforge/registry.h"

#define REG_PATH_MAX 4096

struct lf_registry {
    sqlite3 *db;
    lf_status last; /* the status of the last lf__reg_fail (what a failed prepare returns) */
    char path[REG_PATH_MAX];
};

struct cJSON;

/* lf_fail with the registry's path, `what` and SQLite's message; the status
 * follows SQLite's code (BUSY -> LF_ERR_BUSY, NOTADB/CORRUPT -> FORMAT, ...). */
lf_status lf__reg_fail(lf_registry *r, const char *what);
/* Run SQL without results. */
lf_status lf__reg_exec(lf_registry *r, const char *sql, const char *what);
/* BEGIN IMMEDIATE (the write lock up front, so a writer waits on the busy
 * timeout instead of failing half way), COMMIT, ROLLBACK. */
lf_status lf__reg_begin(lf_registry *r);
lf_status lf__reg_commit(lf_registry *r);
void lf__reg_rollback(lf_registry *r);
/* Prepare a statement; NULL after lf__reg_fail. */
sqlite3_stmt *lf__reg_prepare(lf_registry *r, const char *sql);
/* Unix time in seconds (wall clock). */
double lf__reg_now(void);
/* realpath of p into out (cap bytes); p itself when it does not resolve. */
void lf__reg_abspath(const char *p, char *out, size_t cap);
/* A checkpoint's row as a JSON object (the list entry); NULL on failure. */
struct cJSON *lf__reg_ckpt_json(lf_registry *r, int64_t id, lf_status *st);
/* A column as text ("" for NULL). */
const char *lf__reg_text(sqlite3_stmt *s, int col);
/* 1 for a directory holding config.json and no trainer_state.json (a
 * Hugging Face model directory). */
int lf__reg_is_hf_dir(const char *path);
/* Printed JSON of item (lf_alloc'd, numbers as lf_json_print writes them) into *out. */
lf_status lf__reg_print(struct cJSON *item, char **out);
/* The name ckpt_root/latest holds ("" when there is none). */
void lf__reg_latest_name(const char *ckpt_root, char *out, size_t cap);
/* The files recorded in dir/trainer_state.json: the combined SHA-256 (over
 * the sorted "name sha256\n" lines), the model file's, and the "files" object
 * printed (lf_alloc'd). */
lf_status lf__reg_ckpt_files(const char *dir, char sha[65], char model_sha[65], char **files_json);

/* The schema built only up to `version` (tests: a file as an older build
 * left it). */
lf_status lf__registry_open_version(lf_registry **out, const char *path, int version);

#endif
