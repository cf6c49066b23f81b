/*
 * The registry's sweep columns: a version-2 file (as the build before sweeps
 * left it, holding a run) migrates to version 3 keeping its run; runs are
 * linked to a sweep and trial by their run directory and process (so a
 * later sweep in the same directory does not claim an earlier one's runs),
 * or by the directory alone, listed by trial, and shown in
 * `models show`'s run record; a run no sweep started shows null.
 */
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

static int64_t begin(lf_registry *r, const char *out_dir, long pid) {
    lf_registry_run_info in = {.out_dir = out_dir, .config_json = "{}", .dataset = "data", .world_size = 1, .pid = pid};
    int64_t id = 0;
    LF_ASSERT_OK(lf_registry_run_begin(r, &in, &id));
    return id;
}

/* A checkpoint directory the registry accepts: a model file and a trainer_state.json listing its hash. */
static void fake_ckpt(const char *dir) {
    LF_ASSERT_OK(lf_mkdirs(dir));
    char p[1200], hex[65];
    const char *content = "weights";
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    LF_ASSERT_OK(lf_file_write_all(p, content, strlen(content)));
    lf_sha256_hex(content, strlen(content), hex);
    char st[512];
    snprintf(st, sizeof st, "{\"step\":1,\"files\":{\"model.safetensors\":{\"sha256\":\"%s\",\"bytes\":7}}}", hex);
    snprintf(p, sizeof p, "%s/trainer_state.json", dir);
    LF_ASSERT_OK(lf_file_write_all(p, st, strlen(st)));
}

static void test_migration_and_link(void **state) {
    (void)state;
    char db[1024], a[1024], b[1024], other[1024], ck[1100];
    snprintf(db, sizeof db, "%s/reg.db", g_dir);
    snprintf(a, sizeof a, "%s/sweep/trials/t000", g_dir);
    snprintf(b, sizeof b, "%s/sweep/trials/t001", g_dir);
    snprintf(other, sizeof other, "%s/plain", g_dir);
    LF_ASSERT_OK(lf_mkdirs(a));
    LF_ASSERT_OK(lf_mkdirs(b));
    LF_ASSERT_OK(lf_mkdirs(other));
    lf_registry *r = NULL;
    LF_ASSERT_OK(lf__registry_open_version(&r, db, 2));
    assert_int_equal(lf_registry_schema_version(r), 2);
    int64_t r1 = begin(r, a, 101); /* recorded before the migration */
    lf_registry_close(r);

    LF_ASSERT_OK(lf_registry_open(&r, db, 0));
    assert_int_equal(lf_registry_schema_version(r), 3);
    int64_t r2 = begin(r, b, 102), r3 = begin(r, a, 103), r4 = begin(r, other, 104); /* r3: t000 resumed */
    int64_t r5 = begin(r, a, 105); /* a later run in the same directory, another sweep's */
    int n = -1;
    /* by process: the runs of pids 101 and 103 on this host (the default host) */
    LF_ASSERT_OK(lf_registry_run_link_sweep(r, a, 101, NULL, "/abs/sweep", "t000", &n));
    assert_int_equal(n, 1);
    LF_ASSERT_OK(lf_registry_run_link_sweep(r, a, 103, NULL, "/abs/sweep", "t000", &n));
    assert_int_equal(n, 1);
    LF_ASSERT_OK(lf_registry_run_link_sweep(r, a, 103, "another-host", "/abs/sweep", "t000", &n));
    assert_int_equal(n, 0);
    char rel[1100];
    snprintf(rel, sizeof rel, "%s/sweep/trials/../trials/t001", g_dir); /* the same directory, spelled otherwise */
    LF_ASSERT_OK(lf_registry_run_link_sweep(r, rel, 102, NULL, "/abs/sweep", "t001", &n));
    assert_int_equal(n, 1);
    LF_ASSERT_OK(lf_registry_run_link_sweep(r, "/no/such/dir", 0, NULL, "/abs/sweep", "t002", &n));
    assert_int_equal(n, 0);
    assert_int_equal(lf_registry_run_link_sweep(r, a, 0, NULL, "", "t000", &n), LF_ERR_INVALID_ARG);
    char *json = NULL;
    LF_ASSERT_OK(lf_registry_sweep_runs_json(r, "/abs/sweep", &json));
    char want[128];
    snprintf(want, sizeof want, "{\"t000\":[\"r%lld\",\"r%lld\"],\"t001\":[\"r%lld\"]}", (long long)r1, (long long)r3,
             (long long)r2);
    assert_string_equal(json, want);
    lf_free(json);
    LF_ASSERT_OK(lf_registry_sweep_runs_json(r, "/another", &json));
    assert_string_equal(json, "{}");
    lf_free(json);
    /* pid 0: every run of the directory (r5 too) */
    LF_ASSERT_OK(lf_registry_run_link_sweep(r, a, 0, NULL, "/other/sweep", "t009", &n));
    assert_int_equal(n, 3);
    LF_ASSERT_OK(lf_registry_sweep_runs_json(r, "/other/sweep", &json));
    snprintf(want, sizeof want, "{\"t009\":[\"r%lld\",\"r%lld\",\"r%lld\"]}", (long long)r1, (long long)r3,
             (long long)r5);
    assert_string_equal(json, want);
    lf_free(json);
    LF_ASSERT_OK(lf_registry_run_link_sweep(r, a, 101, NULL, "/abs/sweep", "t000", &n));
    LF_ASSERT_OK(lf_registry_run_link_sweep(r, a, 103, NULL, "/abs/sweep", "t000", &n));

    /* show: the run record names the sweep; a plain run has null */
    for (int k = 0; k < 2; k++) {
        snprintf(ck, sizeof ck, "%s/ckpt/step_00000001", k ? other : a);
        fake_ckpt(ck);
        lf_registry_ckpt_info ci = {.run_id = k ? r4 : r3, .step = 1, .path = ck};
        int64_t cid = 0;
        LF_ASSERT_OK(lf_registry_checkpoint_add(r, &ci, &cid));
        LF_ASSERT_OK(lf_registry_show_json(r, cid, &json));
        cJSON *o = cJSON_Parse(json);
        lf_free(json);
        cJSON *rr = cJSON_GetObjectItemCaseSensitive(o, "run_record");
        cJSON *sw = cJSON_GetObjectItemCaseSensitive(rr, "sweep"), *tr = cJSON_GetObjectItemCaseSensitive(rr, "sweep_trial");
        if (k) {
            assert_true(cJSON_IsNull(sw) && cJSON_IsNull(tr));
        } else {
            assert_string_equal(sw->valuestring, "/abs/sweep");
            assert_string_equal(tr->valuestring, "t000");
        }
        cJSON_Delete(o);
    }
    lf_registry_close(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_migration_and_link),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
