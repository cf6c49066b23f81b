/*
 * The registry as training fills it: a run, its resume and a run
 * --init-from its checkpoint make a lineage chain back to scratch; every
 * checkpoint carries the evaluation of its step (equal to log.jsonl's
 * figures) and eval.suite's metrics (those of the saved weights, and the
 * suite changes no weight); the run's hashes are the files'. A
 * registry file that is garbage, or a path that cannot be created, is a
 * warning and training goes on (the garbage is left untouched);
 * registry.enabled false records nothing; a bad eval.suite stops the run
 * before its first step.
 */
#include <sys/stat.h>
#include "test_util.h"
#include <cjson/cJSON.h>
#include "llmforge/data.h"
#include "llmforge/eval.h"
#include "llmforge/registry.h"
#include "llmforge/train.h"
#include "train/char_fixture.h"

static char suite_dir[700];

static int setup(void **state) {
    (void)state;
    char_fixture_setup(30000);
    snprintf(suite_dir, sizeof suite_dir, "%s/suite", tmp);
    LF_ASSERT_OK(lf_mkdirs(suite_dir));
    char p[800];
    snprintf(p, sizeof p, "%s/ppl.jsonl", suite_dir);
    const char *ppl = "{\"task\": \"perplexity\", \"name\": \"ppl\"}\n"
                      "{\"text\": \"First Citizen: Before we proceed any further, hear me speak.\"}\n";
    LF_ASSERT_OK(lf_file_write_all(p, ppl, strlen(ppl)));
    snprintf(p, sizeof p, "%s/mc.jsonl", suite_dir);
    const char *mc = "{\"task\": \"multiple_choice\", \"name\": \"mc\"}\n"
                     "{\"context\": \"First Citizen\", \"choices\": [\":\", \"z\"], \"gold\": 0}\n";
    LF_ASSERT_OK(lf_file_write_all(p, mc, strlen(mc)));
    return 0;
}

static lf_train_config cfg(const char *name, long iters, const char *registry) {
    lf_train_config c = lf_train_config_default();
    c.model.n_layer = 1;
    c.model.n_head = 2;
    c.model.n_embd = 16;
    c.model.block_size = 16;
    c.micro_batch = 4;
    c.train_batch_size = 4;
    c.train_iters = iters;
    c.warmup_iters = 0;
    c.decay_iters = 40;
    c.lr = 3e-3f;
    c.eval_interval = 5;
    c.eval_iters = 2;
    c.ckpt_interval = 5;
    c.keep_last = 10;
    c.prefetch = 0;
    snprintf(c.dataset, sizeof c.dataset, "%s", data_dir);
    snprintf(c.out_dir, sizeof c.out_dir, "%s/%s", tmp, name);
    snprintf(c.registry_path, sizeof c.registry_path, "%s", registry);
    return c;
}

static void train(const lf_train_config *c, int resume, const char *init_from) {
    lf_trainer *t = NULL;
    lf_trainer_opts o = {.resume = resume, .init_from = init_from};
    if (lf_trainer_create(&t, c, &o) != LF_OK) fail_msg("create: %s", lf_trainer_errmsg(t));
    if (lf_trainer_run(t) != LF_OK) fail_msg("run: %s", lf_trainer_errmsg(t));
    lf_trainer_free(t);
}

static cJSON *jget(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

static cJSON *show_ref(lf_registry *r, const char *ref) {
    int64_t id;
    LF_ASSERT_OK(lf_registry_find(r, ref, &id));
    char *json = NULL;
    LF_ASSERT_OK(lf_registry_show_json(r, id, &json));
    cJSON *o = cJSON_Parse(json);
    lf_free(json);
    assert_non_null(o);
    return o;
}

/* log.jsonl's eval record of `step`: the val_loss text as written. */
static double logged_val_loss(const char *out_dir, long step) {
    char path[800], line[8192];
    snprintf(path, sizeof path, "%s/log.jsonl", out_dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    double v = NAN;
    while (fgets(line, sizeof line, f)) {
        cJSON *o = cJSON_Parse(line);
        if (o && !strcmp(jget(o, "type")->valuestring, "eval") && (long)jget(o, "step")->valuedouble == step)
            v = jget(o, "val_loss")->valuedouble;
        cJSON_Delete(o);
    }
    fclose(f);
    return v;
}

static void test_lineage_through_resume_and_init_from(void **state) {
    (void)state;
    char db[700];
    snprintf(db, sizeof db, "%s/reg.db", tmp);
    lf_train_config a = cfg("a", 10, db);
    train(&a, 0, NULL);
    a.train_iters = 20;
    train(&a, 1, NULL); /* run 2: resumes a's step 10 */
    lf_train_config b = cfg("b", 10, db);
    snprintf(b.eval_suite, sizeof b.eval_suite, "%s", suite_dir);
    char init[800];
    snprintf(init, sizeof init, "%s/a/ckpt/step_00000020/model.safetensors", tmp);
    train(&b, 0, init); /* run 3: initialised from run 2's last checkpoint */

    lf_registry *r = NULL;
    LF_ASSERT_OK(lf_registry_open(&r, db, 0));
    cJSON *cb = show_ref(r, b.out_dir); /* b's latest: step 10 of run 3 */
    assert_int_equal((int)jget(cb, "step")->valuedouble, 10);
    assert_true(cJSON_IsTrue(jget(cb, "latest")));
    char *json = NULL;
    int64_t id;
    LF_ASSERT_OK(lf_registry_find(r, b.out_dir, &id));
    LF_ASSERT_OK(lf_registry_lineage_json(r, id, &json));
    cJSON *lin = cJSON_Parse(json);
    lf_free(json);
    cJSON *chain = jget(lin, "chain");
    assert_int_equal(cJSON_GetArraySize(chain), 3);
    const char *runs[3] = {"r3", "r2", "r1"}, *kinds[3] = {"initialised-from", "resumed-from", NULL};
    const int steps[3] = {10, 20, 10};
    for (int i = 0; i < 3; i++) {
        cJSON *e = cJSON_GetArrayItem(chain, i);
        assert_string_equal(jget(e, "run")->valuestring, runs[i]);
        assert_int_equal((int)jget(e, "step")->valuedouble, steps[i]);
        if (kinds[i]) assert_string_equal(jget(jget(e, "edge"), "kind")->valuestring, kinds[i]);
        else assert_true(cJSON_IsNull(jget(e, "edge")));
    }
    assert_string_equal(jget(lin, "origin")->valuestring, "scratch");
    cJSON_Delete(lin);

    /* what the runs recorded */
    cJSON *run = jget(cb, "run_record");
    assert_string_equal(jget(run, "status")->valuestring, "finished");
    assert_int_equal((int)jget(run, "world_size")->valuedouble, 1);
    assert_string_equal(jget(run, "code_version")->valuestring, lf_registry_code_version());
    char hex[65];
    LF_ASSERT_OK(lf_registry_hash_dataset(data_dir, hex));
    assert_string_equal(jget(run, "dataset_hash")->valuestring, hex);
    char vocab[700];
    snprintf(vocab, sizeof vocab, "%s/vocab.json", data_dir);
    LF_ASSERT_OK(lf_sha256_file_hex(vocab, hex));
    assert_string_equal(jget(run, "tokenizer_hash")->valuestring, hex);
    char *cfg_json = lf_train_config_to_json(&b); /* the hash of the resolved configuration */
    assert_non_null(cfg_json);
    cJSON *resolved = jget(run, "config");
    assert_string_equal(jget(resolved, "out_dir")->valuestring, b.out_dir);
    assert_string_equal(jget(jget(resolved, "eval"), "suite")->valuestring, suite_dir);
    lf_free(cfg_json);
    assert_int_equal(strlen(jget(run, "config_hash")->valuestring), 64);
    /* the model file's hash is the one trainer_state.json records */
    char model[800];
    snprintf(model, sizeof model, "%s/b/ckpt/step_00000010/model.safetensors", tmp);
    LF_ASSERT_OK(lf_sha256_file_hex(model, hex));
    assert_string_equal(jget(cb, "model_sha256")->valuestring, hex);
    /* metrics: the step's evaluation as log.jsonl has it, and eval.suite's */
    cJSON *m = jget(cb, "metrics");
    assert_true(jget(m, "val_loss")->valuedouble == logged_val_loss(b.out_dir, 10));
    double nll = jget(m, "ppl/nll")->valuedouble, ppl = jget(m, "ppl/perplexity")->valuedouble;
    assert_true(fabs(ppl - exp(nll)) <= 1e-12 * ppl);
    assert_true(cJSON_IsNumber(jget(m, "mc/acc")));
    assert_string_equal(jget(jget(cb, "metric_sources"), "ppl/nll")->valuestring, "suite");
    assert_string_equal(jget(jget(cb, "metric_sources"), "val_loss")->valuestring, "train");
    cJSON_Delete(cb);
    /* the suite ran on the checkpoint's own weights: the saved model scores the same (the
     * harness is batch-invariant to 1e-5, docs/eval.md; here the batch is the same too) */
    char step10[800];
    snprintf(step10, sizeof step10, "%s/b/ckpt/step_00000010", tmp);
    lf_model *mod = NULL;
    lf_tokenizer *tok = NULL;
    lf_eval_tasks *ts = NULL;
    lf_eval_results *res = NULL;
    char spec[LF_PATH_MAX + 32];
    double again = NAN;
    LF_ASSERT_OK(lf_checkpoint_load_model(step10, NULL, &mod, spec, sizeof spec, NULL));
    LF_ASSERT_OK(lf_tokenizer_open(&tok, spec, step10));
    LF_ASSERT_OK(lf_eval_suite_load(&ts, suite_dir, NULL));
    LF_ASSERT_OK(lf_eval_results_create(&res));
    LF_ASSERT_OK(lf_eval_tasks_run(ts, mod, tok, NULL, res));
    LF_ASSERT_OK(lf_eval_results_get(res, "ppl/nll", &again));
    assert_true(fabs(again - nll) <= 1e-5 * fabs(nll));
    lf_eval_results_free(res);
    lf_eval_tasks_free(ts);
    lf_tokenizer_free(tok);
    lf_model_free(mod);
    /* ... and on every checkpoint, not only where an evaluation was: step 5's weights score otherwise */
    char ref[800];
    snprintf(ref, sizeof ref, "%s/b/ckpt/step_00000005", tmp);
    cJSON *c5 = show_ref(r, ref);
    assert_true(cJSON_IsNumber(jget(jget(c5, "metrics"), "ppl/nll")));
    assert_true(jget(jget(c5, "metrics"), "ppl/nll")->valuedouble != nll);
    cJSON_Delete(c5);
    /* the resumed run: resumed-from a's step 10, in the same out_dir */
    cJSON *ca = show_ref(r, a.out_dir);
    assert_int_equal((int)jget(ca, "step")->valuedouble, 20);
    assert_true(jget(jget(ca, "metrics"), "val_loss")->valuedouble == logged_val_loss(a.out_dir, 20));
    cJSON *par = jget(jget(ca, "run_record"), "parent");
    assert_string_equal(jget(par, "kind")->valuestring, "resumed-from");
    cJSON_Delete(ca);
    lf_registry_close(r);
    /* the suite changes nothing of the training: the same run without it saves the same weights */
    lf_train_config b2 = cfg("b_nosuite", 10, db);
    train(&b2, 0, init);
    char m1[800], m2[800], h1[65], h2[65];
    snprintf(m1, sizeof m1, "%s/b/ckpt/step_00000010/model.safetensors", tmp);
    snprintf(m2, sizeof m2, "%s/b_nosuite/ckpt/step_00000010/model.safetensors", tmp);
    LF_ASSERT_OK(lf_sha256_file_hex(m1, h1));
    LF_ASSERT_OK(lf_sha256_file_hex(m2, h2));
    assert_string_equal(h1, h2);
    /* log.jsonl carries the suite's metrics too */
    char logp[800], *logt = NULL;
    snprintf(logp, sizeof logp, "%s/log.jsonl", b.out_dir);
    LF_ASSERT_OK(lf_file_read_all(logp, 0, &logt, NULL));
    assert_non_null(strstr(logt, "\"type\":\"eval_suite\""));
    lf_free(logt);
}

/* lf_log sink collecting warnings */
static char g_warnings[8192];
static void collect(lf_log_level level, const char *msg, void *user) {
    (void)user;
    if (level >= LF_LOG_WARN) {
        size_t n = strlen(g_warnings);
        snprintf(g_warnings + n, sizeof g_warnings - n, "%s\n", msg);
    }
}

static void test_unusable_registry_warns_and_training_goes_on(void **state) {
    (void)state;
    lf_log_set_callback(collect, NULL);
    /* garbage in the registry file */
    char db[700];
    snprintf(db, sizeof db, "%s/corrupt.db", tmp);
    char junk[2048];
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (char)(255 - i % 251);
    LF_ASSERT_OK(lf_file_write_all(db, junk, sizeof junk));
    g_warnings[0] = 0;
    lf_train_config c = cfg("corrupt", 5, db);
    train(&c, 0, NULL);
    assert_non_null(strstr(g_warnings, "model registry"));
    assert_non_null(strstr(g_warnings, "not a database"));
    assert_non_null(strstr(g_warnings, db));
    assert_non_null(strstr(g_warnings, "training goes on"));
    char ck[800];
    snprintf(ck, sizeof ck, "%s/corrupt/ckpt/step_00000005/model.safetensors", tmp);
    struct stat sb;
    assert_int_equal(stat(ck, &sb), 0); /* trained and checkpointed */
    char *after = NULL;
    size_t len = 0;
    LF_ASSERT_OK(lf_file_read_all(db, 0, &after, &len));
    assert_int_equal(len, sizeof junk);
    assert_memory_equal(after, junk, sizeof junk); /* left as it was */
    lf_free(after);
    /* a registry whose directory cannot be made (a file is in the way) */
    char blocker[700], db2[800];
    snprintf(blocker, sizeof blocker, "%s/blocker", tmp);
    LF_ASSERT_OK(lf_file_write_all(blocker, "x", 1));
    snprintf(db2, sizeof db2, "%s/reg.db", blocker);
    g_warnings[0] = 0;
    lf_train_config c2 = cfg("blocked", 5, db2);
    train(&c2, 0, NULL);
    assert_non_null(strstr(g_warnings, "model registry"));
    assert_non_null(strstr(g_warnings, "training goes on"));
    /* registry.enabled false: nothing is created, nothing is said */
    char db3[700];
    snprintf(db3, sizeof db3, "%s/off.db", tmp);
    g_warnings[0] = 0;
    lf_train_config c3 = cfg("off", 5, db3);
    c3.registry_enabled = 0;
    train(&c3, 0, NULL);
    assert_int_equal(stat(db3, &sb), -1);
    assert_null(strstr(g_warnings, "registry"));
    lf_log_set_callback(NULL, NULL);
}

static void test_bad_suite_stops_before_training(void **state) {
    (void)state;
    char db[700];
    snprintf(db, sizeof db, "%s/suite_err.db", tmp);
    lf_train_config c = cfg("badsuite", 5, db);
    snprintf(c.eval_suite, sizeof c.eval_suite, "%s/no_such_suite", tmp);
    lf_trainer *t = NULL;
    lf_trainer_opts o = {0};
    assert_int_equal(lf_trainer_create(&t, &c, &o), LF_ERR_NOT_FOUND);
    assert_non_null(strstr(lf_trainer_errmsg(t), "eval.suite"));
    assert_non_null(strstr(lf_trainer_errmsg(t), "no_such_suite"));
    lf_trainer_free(t);
    /* an empty directory is an error too, not a suite of nothing */
    snprintf(c.eval_suite, sizeof c.eval_suite, "%s", tmp); /* holds no *.jsonl */
    assert_int_equal(lf_trainer_create(&t, &c, &o), LF_ERR_NOT_FOUND);
    assert_non_null(strstr(lf_trainer_errmsg(t), "holds no task file"));
    lf_trainer_free(t);
}

static void test_config_keys(void **state) {
    (void)state;
    const char *json = "{\"data\": {\"dataset\": \"d\"}, \"registry\": {\"enabled\": false, \"path\": \"/r/x.db\"},"
                       " \"eval\": {\"suite\": \"suites/smoke\"}}";
    lf_train_config c;
    LF_ASSERT_OK(lf_train_config_parse_world(&c, json, "test", 1, 0, NULL));
    assert_int_equal(c.registry_enabled, 0);
    assert_string_equal(c.registry_path, "/r/x.db");
    assert_string_equal(c.eval_suite, "suites/smoke");
    lf_train_config d = lf_train_config_default();
    assert_int_equal(d.registry_enabled, 1); /* on unless turned off */
    assert_string_equal(d.registry_path, "");
    /* the resolved dump reads back the same */
    char *dump = lf_train_config_to_json(&c);
    lf_train_config e;
    LF_ASSERT_OK(lf_train_config_parse_world(&e, dump, "dump", 1, 0, NULL));
    lf_free(dump);
    assert_int_equal(e.registry_enabled, 0);
    assert_string_equal(e.registry_path, "/r/x.db");
    assert_string_equal(e.eval_suite, "suites/smoke");
    const char *over[] = {"data.dataset=d", "registry.enabled=3"};
    assert_int_equal(lf_train_config_parse_world(&e, "{}", "test", 1, 2, over), LF_ERR_CONFIG);
    LF_ASSERT_ERR_CONTAINS("registry.enabled");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lineage_through_resume_and_init_from),
        cmocka_unit_test(test_unusable_registry_warns_and_training_goes_on),
        cmocka_unit_test(test_bad_suite_stops_before_training),
        cmocka_unit_test(test_config_keys),
    };
    return cmocka_run_group_tests(tests, setup, char_fixture_teardown);
}
