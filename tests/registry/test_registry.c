/*
 * The model registry on its own (no training): the schema of a new file and
 * the migration of a version-1 file (its JSON metrics become rows), files
 * that must be refused (newer schema, someone else's database, garbage,
 * missing), two writer processes and a reader at once, lineage edges
 * (resumed-from with the parent marked preempted, initialised-from matched by
 * hash, fine-tuned-from, an external Hugging Face parent), diff, tags,
 * promotion, gc and relink. Checkpoints are fake step directories holding a
 * model.safetensors of known bytes and a trainer_state.json listing its
 * SHA-256, which is all the registry reads of them.
 */
#include <sys/stat.h>
#include <sys/wait.h>
#include <signal.h>
#include <sqlite3.h>
#include "test_util.h"
#include <cjson/cJSON.h>
#include "llmforge/registry.h"
#include "registry/registry_impl.h"

static char *g_dir;

static int setup(void **state) {
    (void)state;
    g_dir = lf_test_tmpdir();
    return g_dir ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    lf_test_rmrf(g_dir);
    free(g_dir);
    return 0;
}

static const char *in_dir(const char *name) {
    static char buf[8][1024];
    static int k;
    char *b = buf[k++ % 8];
    snprintf(b, 1024, "%s/%s", g_dir, name);
    return b;
}

/* A fake checkpoint directory: model.safetensors holding `content`, and a
 * trainer_state.json listing its hash (and, when model_sha is given, that
 * hash instead of the true one). */
static void fake_ckpt(const char *dir, const char *content, const char *model_sha) {
    LF_ASSERT_OK(lf_mkdirs(dir));
    char p[1200], hex[65];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    LF_ASSERT_OK(lf_file_write_all(p, content, strlen(content)));
    lf_sha256_hex(content, strlen(content), hex);
    char state[512];
    snprintf(state, sizeof state, "{\"step\":1,\"files\":{\"model.safetensors\":{\"sha256\":\"%s\",\"bytes\":%zu}}}",
             model_sha ? model_sha : hex, strlen(content));
    snprintf(p, sizeof p, "%s/trainer_state.json", dir);
    LF_ASSERT_OK(lf_file_write_all(p, state, strlen(state)));
}

static int64_t begin_run(lf_registry *r, const char *out_dir, const char *cfg, const lf_registry_run_info *extra) {
    lf_registry_run_info in = extra ? *extra : (lf_registry_run_info){0};
    in.out_dir = out_dir;
    in.config_json = cfg;
    if (!in.dataset) in.dataset = "data";
    if (!in.world_size) in.world_size = 1;
    int64_t id = 0;
    LF_ASSERT_OK(lf_registry_run_begin(r, &in, &id));
    assert_true(id > 0);
    return id;
}

static int64_t add_ckpt(lf_registry *r, int64_t run, long step, const char *dir, double val_loss) {
    lf_registry_metric m[1] = {{"val_loss", val_loss}};
    lf_registry_ckpt_info ci = {.run_id = run, .step = step, .path = dir, .metrics = m, .n_metrics = 1};
    int64_t id = 0;
    LF_ASSERT_OK(lf_registry_checkpoint_add(r, &ci, &id));
    assert_true(id > 0);
    return id;
}

static cJSON *show(lf_registry *r, int64_t id) {
    char *json = NULL;
    LF_ASSERT_OK(lf_registry_show_json(r, id, &json));
    cJSON *o = cJSON_Parse(json);
    lf_free(json);
    assert_non_null(o);
    return o;
}

static cJSON *jget(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

static long long sql_int(const char *db, const char *sql) {
    sqlite3 *h;
    assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(h, sql, -1, &s, NULL) != SQLITE_OK) fail_msg("%s: %s", sql, sqlite3_errmsg(h));
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    long long v = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    sqlite3_close(h);
    return v;
}

static void sql_exec(const char *db, const char *sql) {
    sqlite3 *h;
    assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
    char *err = NULL;
    if (sqlite3_exec(h, sql, NULL, NULL, &err) != SQLITE_OK) fail_msg("%s: %s", sql, err);
    sqlite3_close(h);
}

/* ---------------------------------------------------------------- schema */

static void test_schema_new_file(void **state) {
    (void)state;
    const char *db = in_dir("sub/dir/reg.db"); /* the directory is created too */
    lf_registry *r = NULL;
    LF_ASSERT_OK(lf_registry_open(&r, db, LF_REGISTRY_CREATE));
    assert_int_equal(lf_registry_schema_version(r), LF_REGISTRY_SCHEMA_VERSION);
    assert_string_equal(lf_registry_file(r), db);
    lf_registry_close(r);
    assert_int_equal(sql_int(db, "PRAGMA user_version"), LF_REGISTRY_SCHEMA_VERSION);
    assert_int_equal(sql_int(db, "PRAGMA application_id"), 0x4C464752);
    assert_int_equal(sql_int(db, "SELECT count(*) FROM sqlite_master WHERE type='table' AND name IN "
                                 "('runs','checkpoints','edges','tags','metrics')"), 5);
    sqlite3 *h;
    assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
    sqlite3_stmt *s;
    assert_int_equal(sqlite3_prepare_v2(h, "PRAGMA journal_mode", -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(s, 0), "wal");
    sqlite3_finalize(s);
    sqlite3_close(h);
    /* opening again changes nothing */
    LF_ASSERT_OK(lf_registry_open(&r, db, 0));
    assert_int_equal(lf_registry_schema_version(r), LF_REGISTRY_SCHEMA_VERSION);
    lf_registry_close(r);
    lf_registry_close(NULL);
    assert_true(strlen(lf_registry_code_version()) > 0);
}

static void test_migration_from_version_1(void **state) {
    (void)state;
    const char *db = in_dir("old.db");
    lf_registry *r = NULL;
    LF_ASSERT_OK(lf__registry_open_version(&r, db, 1)); /* as a version-1 build left it */
    assert_int_equal(lf_registry_schema_version(r), 1);
    lf_registry_close(r);
    assert_int_equal(sql_int(db, "SELECT count(*) FROM sqlite_master WHERE name = 'metrics'"), 0);
    sql_exec(db, "INSERT INTO runs (out_dir, config_json, config_hash, code_version, host, pid, world_size, started, "
                 "status) VALUES ('/x', '{}', 'h', 'v1', 'host', 1, 1, 1.5, 'finished');"
                 "INSERT INTO checkpoints (run_id, step, path, sha256, model_sha256, files_json, metrics_json, "
                 "created) VALUES (1, 10, '/x/ckpt/step_00000010', 's', 'm', '{}', "
                 "'{\"val_loss\":2.5,\"arith/exact_match\":0.75,\"broken\":null}', 2.5);"
                 "INSERT INTO tags (ckpt_id, name, created) VALUES (1, 'prod', 3.0);");
    LF_ASSERT_OK(lf_registry_open(&r, db, 0)); /* migrates 1 -> 2 (and on to the newest) */
    assert_int_equal(lf_registry_schema_version(r), LF_REGISTRY_SCHEMA_VERSION);
    char *json = NULL;
    lf_registry_filter f = {.include_removed = 1};
    LF_ASSERT_OK(lf_registry_list_json(r, &f, &json));
    cJSON *arr = cJSON_Parse(json);
    lf_free(json);
    assert_int_equal(cJSON_GetArraySize(arr), 1);
    cJSON *c = cJSON_GetArrayItem(arr, 0), *m = jget(c, "metrics");
    assert_string_equal(jget(c, "id")->valuestring, "c1");
    assert_true(jget(m, "val_loss")->valuedouble == 2.5);
    assert_true(jget(m, "arith/exact_match")->valuedouble == 0.75);
    assert_true(cJSON_IsNull(jget(m, "broken")));
    assert_true(cJSON_IsNull(jget(c, "removed")));
    assert_string_equal(cJSON_GetArrayItem(jget(c, "tags"), 0)->valuestring, "prod");
    cJSON_Delete(arr);
    /* the metrics kept their source; the old column is gone, the new ones are there */
    lf_registry_close(r);
    assert_int_equal(sql_int(db, "SELECT count(*) FROM metrics WHERE source = 'train'"), 3);
    assert_int_equal(sql_int(db, "SELECT count(*) FROM pragma_table_info('checkpoints') WHERE name = 'metrics_json'"),
                     0);
    assert_int_equal(sql_int(db, "SELECT count(*) FROM pragma_table_info('checkpoints') WHERE name IN "
                                 "('removed','removed_by')"), 2);
    /* a where filter runs on the migrated rows */
    LF_ASSERT_OK(lf_registry_open(&r, db, 0));
    lf_registry_cond cnd;
    LF_ASSERT_OK(lf_registry_cond_parse("val_loss < 3", &cnd));
    f.where = &cnd;
    f.n_where = 1;
    LF_ASSERT_OK(lf_registry_list_json(r, &f, &json));
    assert_non_null(strstr(json, "\"c1\""));
    lf_free(json);
    LF_ASSERT_OK(lf_registry_cond_parse("val_loss < 2.5", &cnd));
    LF_ASSERT_OK(lf_registry_list_json(r, &f, &json));
    assert_string_equal(json, "[]");
    lf_free(json);
    lf_registry_close(r);
}

static void test_refused_files(void **state) {
    (void)state;
    lf_registry *r = NULL;
    /* a missing file without CREATE */
    assert_int_equal(lf_registry_open(&r, in_dir("none.db"), 0), LF_ERR_NOT_FOUND);
    LF_ASSERT_ERR_CONTAINS("does not exist");
    assert_null(r);
    /* garbage */
    const char *junk = in_dir("junk.db");
    char bytes[4096];
    for (size_t i = 0; i < sizeof bytes; i++) bytes[i] = (char)(i * 7 + 3);
    LF_ASSERT_OK(lf_file_write_all(junk, bytes, sizeof bytes));
    assert_int_equal(lf_registry_open(&r, junk, LF_REGISTRY_CREATE), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("not a database");
    LF_ASSERT_ERR_CONTAINS(junk);
    assert_null(r);
    /* a newer schema */
    const char *newer = in_dir("newer.db");
    LF_ASSERT_OK(lf_registry_open(&r, newer, LF_REGISTRY_CREATE));
    lf_registry_close(r);
    sql_exec(newer, "PRAGMA user_version = 99");
    assert_int_equal(lf_registry_open(&r, newer, 0), LF_ERR_UNSUPPORTED);
    LF_ASSERT_ERR_CONTAINS("schema version 99");
    /* another application's database */
    const char *other = in_dir("other.db");
    sql_exec(other, "CREATE TABLE songs (title TEXT)");
    assert_int_equal(lf_registry_open(&r, other, LF_REGISTRY_CREATE), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("not a registry");
    assert_int_equal(sql_int(other, "SELECT count(*) FROM sqlite_master"), 1); /* left as it was */
    const char *app = in_dir("app.db");
    sql_exec(app, "PRAGMA application_id = 1234");
    assert_int_equal(lf_registry_open(&r, app, LF_REGISTRY_CREATE), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("another application");
    /* a damaged schema: the version says 2 but a table is gone */
    const char *dam = in_dir("damaged.db");
    LF_ASSERT_OK(lf_registry_open(&r, dam, LF_REGISTRY_CREATE));
    lf_registry_close(r);
    sql_exec(dam, "DROP TABLE tags");
    assert_int_equal(lf_registry_open(&r, dam, 0), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("table 'tags' is missing");
    /* a directory that cannot be created (a file is in the way) */
    LF_ASSERT_OK(lf_file_write_all(in_dir("afile"), "x", 1));
    assert_true(lf_registry_open(&r, in_dir("afile/reg.db"), LF_REGISTRY_CREATE) != LF_OK);
    assert_null(r);
    /* path resolution: configured, then the environment, then HOME */
    char p[512];
    setenv(LF_REGISTRY_ENV, "/env/reg.db", 1);
    LF_ASSERT_OK(lf_registry_path_resolve("/cfg/reg.db", p, sizeof p));
    assert_string_equal(p, "/cfg/reg.db");
    LF_ASSERT_OK(lf_registry_path_resolve("", p, sizeof p));
    assert_string_equal(p, "/env/reg.db");
    unsetenv(LF_REGISTRY_ENV);
    char *home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
    setenv("HOME", "/home/someone", 1);
    LF_ASSERT_OK(lf_registry_path_resolve(NULL, p, sizeof p));
    assert_string_equal(p, "/home/someone/.local/share/llmforge/registry.db");
    unsetenv("HOME");
    assert_int_equal(lf_registry_path_resolve(NULL, p, sizeof p), LF_ERR_NOT_FOUND);
    if (home) setenv("HOME", home, 1);
    free(home);
    assert_int_equal(lf_registry_path_resolve("/a/much/longer/path", p, 8), LF_ERR_INVALID_ARG);
}

/* ---------------------------------------------------------------- concurrency */

#define WRITER_RUNS 20

/* One writer process: WRITER_RUNS runs of two checkpoints each. */
static int writer(const char *db, int w) {
    lf_registry *r = NULL;
    if (lf_registry_open(&r, db, LF_REGISTRY_CREATE) != LF_OK) {
        fprintf(stderr, "writer %d: open: %s\n", w, lf_last_error());
        return 1;
    }
    for (int i = 0; i < WRITER_RUNS; i++) {
        char out[1024], ck[1100], content[64];
        snprintf(out, sizeof out, "%s/w%d_%d", g_dir, w, i);
        lf_registry_run_info in = {.out_dir = out, .config_json = "{\"seed\":1}", .world_size = 1};
        int64_t run;
        if (lf_registry_run_begin(r, &in, &run) != LF_OK) goto fail;
        for (int k = 1; k <= 2; k++) {
            snprintf(ck, sizeof ck, "%s/ckpt/step_%08d", out, k);
            snprintf(content, sizeof content, "weights of writer %d run %d step %d", w, i, k);
            fake_ckpt(ck, content, NULL);
            lf_registry_metric m[2] = {{"val_loss", 1.0 / k}, {"writer", w}};
            lf_registry_ckpt_info ci = {.run_id = run, .step = k, .path = ck, .metrics = m, .n_metrics = 2};
            if (lf_registry_checkpoint_add(r, &ci, NULL) != LF_OK) goto fail;
        }
        if (lf_registry_run_end(r, run, LF_RUN_FINISHED, NULL) != LF_OK) goto fail;
    }
    lf_registry_close(r);
    return 0;
fail:
    fprintf(stderr, "writer %d: %s\n", w, lf_last_error());
    lf_registry_close(r);
    return 1;
}

/* The reader: every snapshot it sees is consistent (every checkpoint belongs
 * to a run, two per finished run at most) and never shrinks. */
static int reader(const char *db, const char *stop_file) {
    lf_registry *r = NULL;
    int last = 0, reads = 0;
    for (int tries = 0; tries < 2000 && lf_registry_open(&r, db, 0) != LF_OK; tries++) usleep(1000);
    if (!r) {
        fprintf(stderr, "reader: open: %s\n", lf_last_error());
        return 1;
    }
    for (;;) {
        int done = access(stop_file, F_OK) == 0;
        char *json = NULL;
        if (lf_registry_list_json(r, NULL, &json) != LF_OK) {
            fprintf(stderr, "reader: %s\n", lf_last_error());
            lf_registry_close(r);
            return 1;
        }
        cJSON *arr = cJSON_Parse(json);
        lf_free(json);
        int n = cJSON_GetArraySize(arr);
        const cJSON *c;
        cJSON_ArrayForEach(c, arr) {
            const cJSON *w = jget(jget(c, "metrics"), "writer");
            if (!cJSON_IsNumber(w) || !cJSON_IsString(jget(c, "run"))) {
                fprintf(stderr, "reader: a checkpoint without its metrics or run\n");
                return 1;
            }
        }
        cJSON_Delete(arr);
        if (n < last) {
            fprintf(stderr, "reader: %d checkpoints after %d\n", n, last);
            return 1;
        }
        last = n;
        reads++;
        if (done) break;
    }
    lf_registry_close(r);
    return reads >= 2 ? 0 : 1;
}

static void test_two_writers_and_a_reader(void **state) {
    (void)state;
    const char *db = in_dir("busy.db");
    char stop[1024];
    snprintf(stop, sizeof stop, "%s/stop", g_dir);
    lf_registry *r0 = NULL;
    LF_ASSERT_OK(lf_registry_open(&r0, db, LF_REGISTRY_CREATE));
    lf_registry_close(r0);
    pid_t pids[3];
    for (int w = 0; w < 3; w++) {
        fflush(NULL);
        pids[w] = fork();
        assert_true(pids[w] >= 0);
        if (pids[w] == 0) _exit(w < 2 ? writer(db, w) : reader(db, stop));
    }
    int ok = 1;
    for (int w = 0; w < 2; w++) {
        int status;
        assert_int_equal(waitpid(pids[w], &status, 0), pids[w]);
        ok &= WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    LF_ASSERT_OK(lf_file_write_all(stop, "", 0));
    int status;
    assert_int_equal(waitpid(pids[2], &status, 0), pids[2]);
    assert_true(ok);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* nothing lost: every run and checkpoint of both writers */
    assert_int_equal(sql_int(db, "SELECT count(*) FROM runs WHERE status = 'finished'"), 2 * WRITER_RUNS);
    assert_int_equal(sql_int(db, "SELECT count(*) FROM checkpoints"), 4 * WRITER_RUNS);
    assert_int_equal(sql_int(db, "SELECT count(*) FROM metrics WHERE name = 'writer' AND value = 1"), 2 * WRITER_RUNS);
    assert_int_equal(sql_int(db, "SELECT count(*) FROM checkpoints WHERE is_latest AND step = 2"), 2 * WRITER_RUNS);
}

/* ---------------------------------------------------------------- lineage */

static void test_lineage_edges(void **state) {
    (void)state;
    const char *db = in_dir("lin.db");
    lf_registry *r = NULL;
    LF_ASSERT_OK(lf_registry_open(&r, db, LF_REGISTRY_CREATE));
    /* run A from scratch, by a process that is gone */
    pid_t dead = fork();
    if (dead == 0) _exit(0);
    waitpid(dead, NULL, 0);
    char a_dir[1024], a_ck[1100];
    snprintf(a_dir, sizeof a_dir, "%s/a", g_dir);
    snprintf(a_ck, sizeof a_ck, "%s/ckpt/step_00000010", a_dir);
    fake_ckpt(a_ck, "weights A10", NULL);
    lf_registry_run_info ia = {.pid = dead};
    int64_t ra = begin_run(r, a_dir, "{\"seed\":1}", &ia);
    int64_t ca = add_ckpt(r, ra, 10, a_ck, 2.0);
    /* run B resumes A's checkpoint: A never recorded its end -> preempted */
    lf_registry_run_info ib = {.resumed_from = a_ck};
    int64_t rb = begin_run(r, a_dir, "{\"seed\":1}", &ib);
    char b_ck[1100];
    snprintf(b_ck, sizeof b_ck, "%s/ckpt/step_00000020", a_dir);
    fake_ckpt(b_ck, "weights B20", NULL);
    int64_t cb = add_ckpt(r, rb, 20, b_ck, 1.5);
    cJSON *sa = show(r, ca), *sb = show(r, cb);
    assert_string_equal(jget(jget(sa, "run_record"), "status")->valuestring, "preempted");
    assert_false(cJSON_IsTrue(jget(sa, "latest")));
    assert_true(cJSON_IsTrue(jget(sb, "latest")));
    cJSON *pb = jget(jget(sb, "run_record"), "parent");
    assert_string_equal(jget(pb, "kind")->valuestring, "resumed-from");
    char want[32];
    snprintf(want, sizeof want, "c%lld", (long long)ca);
    assert_string_equal(jget(pb, "parent")->valuestring, want);
    cJSON_Delete(sa);
    cJSON_Delete(sb);
    LF_ASSERT_OK(lf_registry_run_end(r, rb, LF_RUN_FINISHED, NULL));
    /* run C: --init-from a copy of B's weights elsewhere: found by hash */
    char copy[1024], c_dir[1024], c_ck[1100];
    snprintf(copy, sizeof copy, "%s/copy.safetensors", g_dir);
    LF_ASSERT_OK(lf_file_write_all(copy, "weights B20", 11));
    snprintf(c_dir, sizeof c_dir, "%s/c", g_dir);
    snprintf(c_ck, sizeof c_ck, "%s/ckpt/step_00000005", c_dir);
    lf_registry_run_info ic = {.init_from = copy, .fine_tune = 1};
    int64_t rc = begin_run(r, c_dir, "{\"seed\":2}", &ic);
    fake_ckpt(c_ck, "weights C5", NULL);
    int64_t cc = add_ckpt(r, rc, 5, c_ck, 1.2);
    char *json = NULL;
    LF_ASSERT_OK(lf_registry_lineage_json(r, cc, &json));
    cJSON *lin = cJSON_Parse(json);
    lf_free(json);
    cJSON *chain = jget(lin, "chain");
    assert_int_equal(cJSON_GetArraySize(chain), 3); /* C5 <- B20 <- A10 */
    long long ids[3] = {cc, cb, ca};
    const char *kinds[3] = {"fine-tuned-from", "resumed-from", NULL};
    for (int i = 0; i < 3; i++) {
        cJSON *e = cJSON_GetArrayItem(chain, i);
        snprintf(want, sizeof want, "c%lld", ids[i]);
        assert_string_equal(jget(e, "id")->valuestring, want);
        if (kinds[i]) assert_string_equal(jget(jget(e, "edge"), "kind")->valuestring, kinds[i]);
        else assert_true(cJSON_IsNull(jget(e, "edge")));
    }
    assert_string_equal(jget(lin, "origin")->valuestring, "scratch");
    cJSON_Delete(lin);
    /* run D: --init-from a Hugging Face directory nobody registered */
    char hf[1024], d_ck[1100];
    snprintf(hf, sizeof hf, "%s/hf_model", g_dir);
    LF_ASSERT_OK(lf_mkdirs(hf));
    LF_ASSERT_OK(lf_file_write_all(in_dir("hf_model/config.json"), "{}", 2));
    LF_ASSERT_OK(lf_file_write_all(in_dir("hf_model/model.safetensors"), "hf weights", 10));
    lf_registry_run_info id_ = {.init_from = hf};
    int64_t rd = begin_run(r, in_dir("d"), "{\"seed\":3}", &id_);
    snprintf(d_ck, sizeof d_ck, "%s/d/ckpt/step_00000001", g_dir);
    fake_ckpt(d_ck, "weights D1", NULL);
    int64_t cd = add_ckpt(r, rd, 1, d_ck, 3.0);
    LF_ASSERT_OK(lf_registry_lineage_json(r, cd, &json));
    lin = cJSON_Parse(json);
    lf_free(json);
    assert_int_equal(cJSON_GetArraySize(jget(lin, "chain")), 1);
    cJSON *e = jget(cJSON_GetArrayItem(jget(lin, "chain"), 0), "edge");
    assert_string_equal(jget(e, "kind")->valuestring, "initialised-from");
    assert_true(cJSON_IsNull(jget(e, "parent")));
    assert_string_equal(jget(e, "external")->valuestring, "hf");
    char hex[65];
    lf_sha256_hex("hf weights", 10, hex);
    assert_string_equal(jget(e, "sha256")->valuestring, hex);
    assert_string_equal(jget(lin, "origin")->valuestring, "hf");
    cJSON_Delete(lin);
    /* an --init-from that does not exist is an error, and nothing is recorded */
    lf_registry_run_info bad = {.out_dir = in_dir("e"), .config_json = "{}", .init_from = in_dir("nope")};
    int64_t re = 0;
    assert_int_equal(lf_registry_run_begin(r, &bad, &re), LF_ERR_NOT_FOUND);
    assert_int_equal(re, 0);
    lf_registry_close(r);
    assert_int_equal(sql_int(db, "SELECT count(*) FROM runs"), 4);
}

/* ---------------------------------------------------------------- diff, tags, promotion */

static void test_diff_and_tags(void **state) {
    (void)state;
    lf_registry *r = NULL;
    LF_ASSERT_OK(lf_registry_open(&r, in_dir("diff.db"), LF_REGISTRY_CREATE));
    lf_registry_run_info i1 = {.dataset_hash = "d1", .tokenizer_hash = "t"};
    lf_registry_run_info i2 = {.dataset_hash = "d2", .tokenizer_hash = "t"};
    int64_t r1 = begin_run(r, in_dir("x1"), "{\"optimizer\":{\"params\":{\"lr\":0.001,\"betas\":[0.9,0.99]}},"
                                            "\"seed\":1,\"out_dir\":\"x\"}", &i1);
    int64_t r2 = begin_run(r, in_dir("x2"), "{\"optimizer\":{\"params\":{\"lr\":0.002,\"betas\":[0.9,0.95]}},"
                                            "\"seed\":1,\"out_dir\":\"x\",\"extra\":true}", &i2);
    fake_ckpt(in_dir("x1/ckpt/step_00000001"), "w1", NULL);
    fake_ckpt(in_dir("x2/ckpt/step_00000001"), "w2", NULL);
    int64_t c1 = add_ckpt(r, r1, 1, in_dir("x1/ckpt/step_00000001"), 2.0);
    int64_t c2 = add_ckpt(r, r2, 1, in_dir("x2/ckpt/step_00000001"), 1.8);
    char *json = NULL;
    LF_ASSERT_OK(lf_registry_diff_json(r, c1, c2, &json));
    cJSON *d = cJSON_Parse(json);
    lf_free(json);
    cJSON *cfg = jget(d, "config");
    assert_int_equal(cJSON_GetArraySize(cfg), 3); /* betas, lr, extra; seed and out_dir are equal */
    const char *keys[3] = {"extra", "optimizer.params.betas", "optimizer.params.lr"};
    for (int i = 0; i < 3; i++) assert_string_equal(jget(cJSON_GetArrayItem(cfg, i), "key")->valuestring, keys[i]);
    assert_true(cJSON_IsNull(jget(cJSON_GetArrayItem(cfg, 0), "a")));
    assert_true(jget(cJSON_GetArrayItem(cfg, 2), "a")->valuedouble == 0.001);
    assert_true(jget(cJSON_GetArrayItem(cfg, 2), "b")->valuedouble == 0.002);
    cJSON *data = jget(d, "data");
    assert_int_equal(cJSON_GetArraySize(data), 1); /* only the dataset's hash differs */
    assert_string_equal(jget(cJSON_GetArrayItem(data, 0), "key")->valuestring, "dataset_hash");
    cJSON_Delete(d);
    LF_ASSERT_OK(lf_registry_diff_json(r, c1, c1, &json));
    assert_non_null(strstr(json, "\"config\":[],\"data\":[]"));
    lf_free(json);
    /* compare: deltas of the recorded metrics */
    LF_ASSERT_OK(lf_registry_compare_json(r, c1, c2, &json));
    d = cJSON_Parse(json);
    lf_free(json);
    cJSON *m0 = cJSON_GetArrayItem(jget(d, "metrics"), 0);
    assert_string_equal(jget(m0, "name")->valuestring, "val_loss");
    assert_true(jget(m0, "delta")->valuedouble == 1.8 - 2.0);
    cJSON_Delete(d);

    /* tags: add, find by tag, move, untag, refuse bad names */
    LF_ASSERT_OK(lf_registry_tag(r, c1, "best", 0));
    LF_ASSERT_OK(lf_registry_tag(r, c1, "best", 0)); /* twice is fine */
    int64_t found = 0;
    LF_ASSERT_OK(lf_registry_find(r, "best", &found));
    assert_int_equal(found, c1);
    LF_ASSERT_OK(lf_registry_tag(r, c2, "best", 0));
    assert_int_equal(lf_registry_find(r, "best", &found), LF_ERR_INVALID_ARG); /* on two now */
    LF_ASSERT_ERR_CONTAINS("on 2 checkpoints");
    LF_ASSERT_OK(lf_registry_tag(r, c1, "best", 1)); /* moved back: only c1 */
    LF_ASSERT_OK(lf_registry_find(r, "best", &found));
    assert_int_equal(found, c1);
    lf_registry_filter f = {.tag = "best"};
    LF_ASSERT_OK(lf_registry_list_json(r, &f, &json));
    d = cJSON_Parse(json);
    lf_free(json);
    assert_int_equal(cJSON_GetArraySize(d), 1);
    cJSON_Delete(d);
    LF_ASSERT_OK(lf_registry_untag(r, c1, "best"));
    assert_int_equal(lf_registry_untag(r, c1, "best"), LF_ERR_NOT_FOUND);
    assert_int_equal(lf_registry_find(r, "best", &found), LF_ERR_NOT_FOUND);
    assert_int_equal(lf_registry_tag(r, c1, "has space", 0), LF_ERR_INVALID_ARG);
    assert_int_equal(lf_registry_tag(r, c1, "c12", 0), LF_ERR_INVALID_ARG);
    assert_int_equal(lf_registry_tag(r, c1, "", 0), LF_ERR_INVALID_ARG);
    assert_int_equal(lf_registry_tag(r, 999, "x", 0), LF_ERR_NOT_FOUND);
    /* references */
    char ref[32];
    snprintf(ref, sizeof ref, "r%lld", (long long)r2);
    LF_ASSERT_OK(lf_registry_find(r, ref, &found));
    assert_int_equal(found, c2);
    LF_ASSERT_OK(lf_registry_find(r, in_dir("x1"), &found)); /* a run directory: its latest */
    assert_int_equal(found, c1);
    LF_ASSERT_OK(lf_registry_find(r, in_dir("x2/ckpt/step_00000001"), &found));
    assert_int_equal(found, c2);
    assert_int_equal(lf_registry_find(r, "c999", &found), LF_ERR_NOT_FOUND);
    assert_int_equal(lf_registry_find(r, "no-such-thing", &found), LF_ERR_NOT_FOUND);

    /* promotion: a failing requirement tags nothing; all holding moves the tag */
    LF_ASSERT_OK(lf_registry_tag(r, c1, "prod", 0));
    lf_registry_cond req[2];
    LF_ASSERT_OK(lf_registry_cond_parse("val_loss<=1.8", &req[0]));
    LF_ASSERT_OK(lf_registry_cond_parse("acc >= 0.5", &req[1]));
    double seen[2];
    int held[2];
    assert_int_equal(lf_registry_promote(r, c2, "prod", req, 2, seen, held), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("acc >= 0.5 (acc is not recorded)");
    assert_true(held[0] && !held[1]);
    assert_true(seen[0] == 1.8 && isnan(seen[1]));
    LF_ASSERT_OK(lf_registry_find(r, "prod", &found));
    assert_int_equal(found, c1); /* unchanged */
    lf_registry_metric acc = {"acc", 0.49};
    LF_ASSERT_OK(lf_registry_metrics_put(r, c2, &acc, 1, "suite"));
    assert_int_equal(lf_registry_promote(r, c2, "prod", req, 2, seen, held), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("acc >= 0.5 (it is 0.49)");
    acc.value = 0.5;
    LF_ASSERT_OK(lf_registry_metrics_put(r, c2, &acc, 1, "suite"));
    LF_ASSERT_OK(lf_registry_promote(r, c2, "prod", req, 2, seen, held));
    LF_ASSERT_OK(lf_registry_find(r, "prod", &found));
    assert_int_equal(found, c2); /* moved */
    lf_registry_close(r);
}

static void test_conditions(void **state) {
    (void)state;
    lf_registry_cond c;
    LF_ASSERT_OK(lf_registry_cond_parse("arith/exact_match>=0.9", &c));
    assert_string_equal(c.metric, "arith/exact_match");
    assert_int_equal(c.op, LF_REGISTRY_GE);
    assert_true(c.value == 0.9);
    LF_ASSERT_OK(lf_registry_cond_parse("  hits@1 != 3e-1 ", &c));
    assert_string_equal(c.metric, "hits@1");
    assert_int_equal(c.op, LF_REGISTRY_NE);
    assert_true(lf_registry_cond_holds(&c, 0.2) && !lf_registry_cond_holds(&c, 0.3) && !lf_registry_cond_holds(&c, NAN));
    LF_ASSERT_OK(lf_registry_cond_parse("x<1", &c));
    assert_true(lf_registry_cond_holds(&c, 0.5) && !lf_registry_cond_holds(&c, 1));
    LF_ASSERT_OK(lf_registry_cond_parse("x==1", &c));
    assert_true(lf_registry_cond_holds(&c, 1) && !lf_registry_cond_holds(&c, 1.0000001));
    const char *bad[] = {"val_loss", "<3", "val_loss<", "val_loss<abc", "val_loss=>3", "val_loss<3x", "v<inf"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(lf_registry_cond_parse(bad[i], &c), LF_ERR_INVALID_ARG);
        LF_ASSERT_ERR_CONTAINS(bad[i]);
    }
}

/* ---------------------------------------------------------------- gc, relink */

static void test_gc_never_removes_tagged_or_latest(void **state) {
    (void)state;
    lf_registry *r = NULL;
    LF_ASSERT_OK(lf_registry_open(&r, in_dir("gc.db"), LF_REGISTRY_CREATE));
    int64_t run = begin_run(r, in_dir("g"), "{}", NULL);
    const double val[6] = {0, 3.0, 2.5, 1.0, 2.0, 2.8}; /* step 3 is the best */
    int64_t c[6];
    char dirs[6][1100];
    for (int k = 1; k <= 5; k++) {
        snprintf(dirs[k], sizeof dirs[k], "%s/g/ckpt/step_%08d", g_dir, k);
        char w[32];
        snprintf(w, sizeof w, "weights %d", k);
        fake_ckpt(dirs[k], w, NULL);
        c[k] = add_ckpt(r, run, k, dirs[k], val[k]);
    }
    LF_ASSERT_OK(lf_registry_tag(r, c[1], "baseline", 0));
    /* a directory whose trainer_state.json records another model: left alone */
    fake_ckpt(dirs[4], "weights 4", "0000000000000000000000000000000000000000000000000000000000000000");
    lf_registry_gc_opts o = {.keep_best = 1, .dry_run = 1};
    char *json = NULL;
    LF_ASSERT_OK(lf_registry_gc(r, &o, &json));
    cJSON *rep = cJSON_Parse(json);
    lf_free(json);
    assert_int_equal(cJSON_GetArraySize(jget(rep, "removed")), 1); /* would remove step 2 only */
    assert_int_equal(cJSON_GetArraySize(jget(rep, "skipped")), 1); /* step 4 */
    cJSON_Delete(rep);
    for (int k = 1; k <= 5; k++) {
        struct stat sb;
        assert_int_equal(stat(dirs[k], &sb), 0); /* a dry run removes nothing */
    }
    o.dry_run = 0;
    LF_ASSERT_OK(lf_registry_gc(r, &o, &json));
    rep = cJSON_Parse(json);
    lf_free(json);
    char want[32];
    snprintf(want, sizeof want, "c%lld", (long long)c[2]);
    assert_int_equal(cJSON_GetArraySize(jget(rep, "removed")), 1);
    assert_string_equal(jget(cJSON_GetArrayItem(jget(rep, "removed"), 0), "id")->valuestring, want);
    cJSON_Delete(rep);
    struct stat sb;
    assert_int_equal(stat(dirs[2], &sb), -1);
    for (int k = 1; k <= 5; k++)
        if (k != 2) assert_int_equal(stat(dirs[k], &sb), 0); /* tagged 1, best 3, skipped 4, newest/latest 5 */
    cJSON *s2 = show(r, c[2]);
    assert_string_equal(jget(jget(s2, "removed"), "by")->valuestring, "gc");
    cJSON_Delete(s2);
    /* with nothing kept by rank: still never the tagged one, the newest, nor the one ckpt/latest names */
    LF_ASSERT_OK(lf_file_write_all(in_dir("g/ckpt/latest"), "step_00000003\n", 14));
    fake_ckpt(dirs[4], "weights 4", NULL); /* now genuinely the recorded checkpoint */
    lf_registry_gc_opts o0 = {.keep_best = 0};
    LF_ASSERT_OK(lf_registry_gc(r, &o0, &json));
    lf_free(json);
    assert_int_equal(stat(dirs[1], &sb), 0); /* tagged */
    assert_int_equal(stat(dirs[3], &sb), 0); /* named by ckpt/latest on disk */
    assert_int_equal(stat(dirs[4], &sb), -1);
    assert_int_equal(stat(dirs[5], &sb), 0); /* the run's newest (and the registry's latest) */
    /* a directory already gone is marked missing */
    lf_test_rmrf(dirs[3]);
    LF_ASSERT_OK(lf_file_write_all(in_dir("g/ckpt/latest"), "step_00000005\n", 14));
    LF_ASSERT_OK(lf_registry_gc(r, &o0, &json));
    assert_non_null(strstr(json, "\"missing\":[{"));
    lf_free(json);
    lf_registry_filter f = {0};
    LF_ASSERT_OK(lf_registry_list_json(r, &f, &json));
    rep = cJSON_Parse(json);
    lf_free(json);
    assert_int_equal(cJSON_GetArraySize(rep), 2); /* on disk: steps 1 and 5 */
    cJSON_Delete(rep);
    lf_registry_close(r);
}

static void test_relink(void **state) {
    (void)state;
    lf_registry *r = NULL;
    LF_ASSERT_OK(lf_registry_open(&r, in_dir("relink.db"), LF_REGISTRY_CREATE));
    int64_t run = begin_run(r, in_dir("old/run"), "{}", NULL);
    fake_ckpt(in_dir("old/run/ckpt/step_00000007"), "weights 7", NULL);
    int64_t c = add_ckpt(r, run, 7, in_dir("old/run/ckpt/step_00000007"), 1.0);
    LF_ASSERT_OK(lf_mkdirs(in_dir("new")));
    assert_int_equal(rename(in_dir("old/run"), in_dir("new/run")), 0);
    fake_ckpt(in_dir("new/other/ckpt/step_00000001"), "not registered", NULL);
    char *json = NULL;
    LF_ASSERT_OK(lf_registry_relink(r, in_dir("new"), &json));
    cJSON *rep = cJSON_Parse(json);
    lf_free(json);
    assert_int_equal((int)jget(rep, "scanned")->valuedouble, 2);
    assert_int_equal(cJSON_GetArraySize(jget(rep, "relinked")), 1);
    assert_int_equal(cJSON_GetArraySize(jget(rep, "unknown")), 1);
    cJSON_Delete(rep);
    cJSON *s = show(r, c);
    char abs[1100];
    lf__reg_abspath(in_dir("new/run/ckpt/step_00000007"), abs, sizeof abs);
    assert_string_equal(jget(s, "path")->valuestring, abs);
    lf__reg_abspath(in_dir("new/run"), abs, sizeof abs);
    assert_string_equal(jget(jget(s, "run_record"), "out_dir")->valuestring, abs); /* the old out_dir is gone */
    cJSON_Delete(s);
    /* found again by path now; relinking again changes nothing */
    int64_t found;
    LF_ASSERT_OK(lf_registry_find(r, in_dir("new/run"), &found));
    assert_int_equal(found, c);
    LF_ASSERT_OK(lf_registry_relink(r, in_dir("new"), &json));
    assert_non_null(strstr(json, "\"relinked\":[]"));
    lf_free(json);
    assert_int_equal(lf_registry_relink(r, in_dir("nowhere"), &json), LF_ERR_NOT_FOUND);
    lf_registry_close(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_schema_new_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_migration_from_version_1, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refused_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_two_writers_and_a_reader, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lineage_edges, setup, teardown),
        cmocka_unit_test_setup_teardown(test_diff_and_tags, setup, teardown),
        cmocka_unit_test(test_conditions),
        cmocka_unit_test_setup_teardown(test_gc_never_removes_tagged_or_latest, setup, teardown),
        cmocka_unit_test_setup_teardown(test_relink, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
