/*
 * eval.tasks during training: task metrics appear in every evaluation record,
 * checkpoint.best_metric picks the best checkpoint by a task metric (never
 * rotated away), load_best_model_at_end exports it to out_dir/final_model,
 * and a run with tasks still resumes bit for bit.
 */
#include "test_util.h"
#include "llmforge/data.h"
#include "llmforge/train.h"

static char *tmp;
static char data_dir[600], task_file[700];

static int setup(void **state) {
    (void)state;
    tmp = lf_test_tmpdir();
    char *text;
    size_t len;
    LF_ASSERT_OK(lf_file_read_all(LF_SHARED_DIR "/data/tinyshakespeare.txt", 0, &text, &len));
    char path[700];
    snprintf(path, sizeof path, "%s/small.txt", tmp);
    LF_ASSERT_OK(lf_file_write_all(path, text, 40000));
    lf_free(text);
    snprintf(data_dir, sizeof data_dir, "%s/data", tmp);
    lf_prepare_stats ps;
    LF_ASSERT_OK(lf_prepare_char(path, data_dir, &ps));
    /* a small multiple-choice task over characters of the corpus */
    snprintf(task_file, sizeof task_file, "%s/mc.jsonl", tmp);
    const char *mc = "{\"task\": \"multiple_choice\", \"name\": \"mc\"}\n"
                     "{\"context\": \"First Citizen\", \"choices\": [\":\", \"z\"], \"gold\": 0}\n"
                     "{\"context\": \"What say yo\", \"choices\": [\"u\", \"q\"], \"gold\": 0}\n"
                     "{\"context\": \"We are accounted poor citizen\", \"choices\": [\"s\", \"x\"], \"gold\": 0}\n";
    LF_ASSERT_OK(lf_file_write_all(task_file, mc, strlen(mc)));
    return 0;
}

static int teardown(void **state) {
    (void)state;
    lf_test_rmrf(tmp);
    free(tmp);
    return 0;
}

static lf_train_config cfg(const char *name, long iters) {
    lf_train_config c = lf_train_config_default();
    c.model.n_layer = 1;
    c.model.n_head = 2;
    c.model.n_embd = 32;
    c.model.block_size = 32;
    c.micro_batch = 6;
    c.train_batch_size = 6;
    c.train_iters = iters;
    c.warmup_iters = 0;
    c.decay_iters = 20;
    c.lr = 3e-3f;
    c.eval_interval = 5;
    c.eval_iters = 2;
    c.ckpt_interval = 5;
    c.keep_last = 1;
    snprintf(c.eval_tasks, sizeof c.eval_tasks, "%s", task_file);
    snprintf(c.best_metric, sizeof c.best_metric, "mc/acc_norm");
    c.greater_is_better = 1;
    c.load_best_model_at_end = 1;
    snprintf(c.dataset, sizeof c.dataset, "%s", data_dir);
    snprintf(c.out_dir, sizeof c.out_dir, "%s/%s", tmp, name);
    return c;
}

static float *run(const lf_train_config *c, int resume, size_t *n) {
    lf_trainer *t = NULL;
    lf_trainer_opts o = {.resume = resume};
    if (lf_trainer_create(&t, c, &o) != LF_OK) fail_msg("create: %s", lf_trainer_errmsg(t));
    if (lf_trainer_run(t) != LF_OK) fail_msg("run: %s", lf_trainer_errmsg(t));
    lf_model *m = lf_trainer_model(t);
    *n = lf_model_num_params(m);
    float *w = malloc(*n * sizeof(float));
    memcpy(w, lf_model_params(m), *n * sizeof(float));
    lf_trainer_free(t);
    return w;
}

static void test_tasks_best_and_final(void **state) {
    (void)state;
    lf_train_config c = cfg("tasks", 20);
    size_t n;
    float *w = run(&c, 0, &n);
    free(w);
    char path[1200], *log;
    snprintf(path, sizeof path, "%s/log.jsonl", c.out_dir);
    LF_ASSERT_OK(lf_file_read_all(path, 0, &log, NULL));
    int evals = 0;
    for (const char *p = log; (p = strstr(p, "\"type\":\"eval\"")); p++) evals++;
    assert_int_equal(evals, 4);
    assert_non_null(strstr(log, "\"eval/mc/acc\":"));
    assert_non_null(strstr(log, "\"eval/mc/acc_norm\":"));
    assert_non_null(strstr(log, "\"type\":\"final_model\""));
    lf_free(log);
    /* the best checkpoint is named in trainer_state and survives keep_last 1 */
    snprintf(path, sizeof path, "%s/ckpt/step_00000020/trainer_state.json", c.out_dir);
    char *st;
    LF_ASSERT_OK(lf_file_read_all(path, 0, &st, NULL));
    const char *b = strstr(st, "\"best_checkpoint\":");
    assert_non_null(b);
    char best[64] = {0};
    sscanf(strchr(b + 18, '"') + 1, "%63[^\"]", best);
    assert_non_null(strstr(st, "\"mc/acc_norm\""));
    lf_free(st);
    snprintf(path, sizeof path, "%s/ckpt/%s/model.safetensors", c.out_dir, best);
    assert_int_equal(access(path, F_OK), 0);
    /* final_model is a copy of the best checkpoint's weights */
    char fm[1200];
    snprintf(fm, sizeof fm, "%s/final_model/model.safetensors", c.out_dir);
    char h1[65], h2[65];
    LF_ASSERT_OK(lf_sha256_file_hex(path, h1));
    LF_ASSERT_OK(lf_sha256_file_hex(fm, h2));
    assert_string_equal(h1, h2);
}

static void test_resume_with_tasks(void **state) {
    (void)state;
    lf_train_config a = cfg("straight", 20);
    lf_train_config b = cfg("resumed", 10);
    a.load_best_model_at_end = b.load_best_model_at_end = 0;
    size_t na, nb;
    float *wa = run(&a, 0, &na);
    free(run(&b, 0, &nb));
    b.train_iters = 20;
    float *wb = run(&b, 1, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(wa, wb, na * sizeof(float));
    free(wa);
    free(wb);
}

static void test_bad_best_metric(void **state) {
    (void)state;
    lf_train_config c = cfg("bad", 5);
    snprintf(c.best_metric, sizeof c.best_metric, "nope/acc");
    lf_trainer *t = NULL;
    assert_int_equal(lf_trainer_create(&t, &c, NULL), LF_ERR_CONFIG);
    assert_non_null(strstr(lf_trainer_errmsg(t), "nope/acc"));
    lf_trainer_free(t);
    c = cfg("bad2", 5);
    c.eval_tasks[0] = 0;
    t = NULL;
    assert_int_equal(lf_trainer_create(&t, &c, NULL), LF_ERR_CONFIG);
    assert_non_null(strstr(lf_trainer_errmsg(t), "eval.tasks is empty"));
    lf_trainer_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tasks_best_and_final),
        cmocka_unit_test(test_resume_with_tasks),
        cmocka_unit_test(test_bad_best_metric),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
