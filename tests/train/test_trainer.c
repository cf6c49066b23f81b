/*
 * Trainer: exact resume (20 steps straight == 10 + resume + 10, bit for bit,
 * with dropout on), gradient accumulation (micro 4 x accum 2 == batch 8),
 * and the errors a person meets first (block size larger than the data,
 * unwritable out_dir, missing dataset, resume without a checkpoint).
 */
#include <sys/stat.h>
#include "test_util.h"
#include "llmforge/data.h"
#include "llmforge/train.h"
#include <cjson/cJSON.h>
#include "train/train_impl.h"

#include "char_fixture.h"

static int setup(void **state) {
    (void)state;
    return char_fixture_setup(65536);
}

static lf_train_config tiny_config(const char *out_name) {
    lf_train_config c = lf_train_config_default();
    c.model.n_layer = 2;
    c.model.n_head = 2;
    c.model.n_embd = 32;
    c.model.block_size = 16;
    c.model.bias = 1;
    c.model.dropout = 0.1f;
    c.micro_batch = 4;
    c.grad_accum = 1;
    c.train_batch_size = 4;
    c.train_iters = 20;
    c.warmup_iters = 3;
    c.decay_iters = 20;
    c.lr = 3e-3f;
    c.min_lr = 3e-4f;
    c.eval_interval = 10;
    c.eval_iters = 2;
    c.ckpt_interval = 10;
    c.keep_last = 3;
    c.seed = 42;
    snprintf(c.dataset, sizeof c.dataset, "%s", data_dir);
    snprintf(c.out_dir, sizeof c.out_dir, "%s/%s", tmp, out_name);
    return c;
}

/* Train and copy out the final weights (caller frees). */
static float *train(const lf_train_config *c, int resume, size_t *n) {
    lf_trainer *t = NULL;
    lf_trainer_opts o = {.resume = resume};
    lf_status st = lf_trainer_create(&t, c, &o);
    if (st != LF_OK) fail_msg("create: %s", lf_trainer_errmsg(t));
    st = lf_trainer_run(t);
    if (st != LF_OK) fail_msg("run: %s", lf_trainer_errmsg(t));
    lf_model *m = lf_trainer_model(t);
    *n = lf_model_num_params(m);
    float *w = malloc(*n * sizeof(float));
    memcpy(w, lf_model_params(m), *n * sizeof(float));
    lf_trainer_free(t);
    return w;
}

/* Train-step losses from log.jsonl, as the exact text printed (%.9g). */
static int read_losses(const char *out_dir, char losses[][32], int cap) {
    char path[700];
    snprintf(path, sizeof path, "%s/log.jsonl", out_dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        if (!strstr(line, "\"type\":\"train\"")) continue;
        const char *p = strstr(line, "\"loss\":");
        assert_non_null(p);
        int step = atoi(strstr(line, "\"step\":") + 7);
        assert_true(step >= 1 && step <= cap);
        sscanf(p + 7, "%31[^,]", losses[step - 1]);
        n++;
    }
    fclose(f);
    return n;
}

static void test_resume_is_bit_exact(void **state) {
    (void)state;
    lf_train_config a = tiny_config("straight");
    size_t na, nb;
    float *wa = train(&a, 0, &na);

    lf_train_config b = tiny_config("resumed");
    b.train_iters = 10; /* stop half way: the checkpoint at step 10 is the last one */
    float *wb0 = train(&b, 0, &nb);
    free(wb0);
    b.train_iters = 20;
    float *wb = train(&b, 1, &nb);

    assert_int_equal(na, nb);
    assert_memory_equal(wa, wb, na * sizeof(float));
    char la[20][32], lb[20][32];
    memset(la, 0, sizeof la);
    memset(lb, 0, sizeof lb);
    assert_int_equal(read_losses(a.out_dir, la, 20), 20);
    assert_int_equal(read_losses(b.out_dir, lb, 20), 20);
    for (int i = 0; i < 20; i++) assert_string_equal(la[i], lb[i]);
    /* the run really learned something and dropout was on */
    assert_true(atof(la[19]) < atof(la[0]));
    free(wa);
    free(wb);
}

static void test_accumulation_equals_big_batch(void **state) {
    (void)state;
    lf_train_config a = tiny_config("accum");
    a.model.dropout = 0; /* dropout keys differ by micro-batch split */
    a.train_iters = 5;
    a.eval_interval = 0;
    a.micro_batch = 4;
    a.grad_accum = 2;
    a.train_batch_size = 8;
    lf_train_config b = tiny_config("big");
    b.model.dropout = 0;
    b.train_iters = 5;
    b.eval_interval = 0;
    b.micro_batch = 8;
    b.grad_accum = 1;
    b.train_batch_size = 8;
    size_t na, nb;
    float *wa = train(&a, 0, &na);
    float *wb = train(&b, 0, &nb);
    char la[20][32], lb[20][32];
    assert_int_equal(read_losses(a.out_dir, la, 20), 5);
    assert_int_equal(read_losses(b.out_dir, lb, 20), 5);
    for (int i = 0; i < 5; i++) {
        double x = atof(la[i]), y = atof(lb[i]);
        assert_true(fabs(x - y) / y < 1e-6);
    }
    /* weights: relative to the largest weight (AdamW turns rounding-level
     * gradient differences into visible steps on near-zero gradients, e.g.
     * the key bias whose exact gradient is 0) */
    double mx = 0;
    for (size_t i = 0; i < nb; i++) mx = fmax(mx, fabs(wb[i]));
    double err = lf_test_max_rel_err(wa, wb, na, mx);
    printf("accumulation: max weight diff / max weight %.3g\n", err);
    assert_true(err < 1e-4);
    free(wa);
    free(wb);
}

static void expect_create_error(const lf_train_config *c, int resume, const char *needle) {
    lf_trainer *t = NULL;
    lf_trainer_opts o = {.resume = resume};
    lf_status st = lf_trainer_create(&t, c, &o);
    assert_true(st != LF_OK);
    if (!strstr(lf_trainer_errmsg(t), needle)) fail_msg("message '%s' lacks '%s'", lf_trainer_errmsg(t), needle);
    lf_trainer_free(t);
}

static void test_errors(void **state) {
    (void)state;
    lf_train_config c = tiny_config("err");
    c.model.block_size = 10000;
    expect_create_error(&c, 0, "larger than the data");

    c = tiny_config("err2");
    snprintf(c.dataset, sizeof c.dataset, "%s/no-such-dataset", tmp);
    expect_create_error(&c, 0, "no-such-dataset");

    c = tiny_config("err3");
    char file[700];
    snprintf(file, sizeof file, "%s/plainfile", tmp);
    LF_ASSERT_OK(lf_file_write_all(file, "x", 1));
    snprintf(c.out_dir, sizeof c.out_dir, "%s/sub", file); /* a directory under a file: fails even as root */
    expect_create_error(&c, 0, "out_dir");

    c = tiny_config("never-trained");
    expect_create_error(&c, 1, "ckpt");
}

/* log.jsonl numbers read back as the values published: doubles exactly,
 * floats (the learning rate) as the same float in their shortest form. */
static void test_log_numbers_read_back(void **state) {
    (void)state;
    char path[700];
    snprintf(path, sizeof path, "%s/numbers.jsonl", tmp);
    lf_obs_sink *sink;
    LF_ASSERT_OK(lf__jsonl_sink_open(&sink, path, 0));
    const double loss = 0.1 + 0.2, norm = 1.0 / 3, tps = 123456.78901234567, when = 1764620000.1234567;
    const float lr = 6e-4f;
    lf_obs_scalar sc[] = {{"train/loss", loss},           {"train/lr", lr},         {"train/grad_norm", norm},
                          {"train/tokens_per_sec", tps}, {"time/step_ms", 1e-300}, {"train/tokens", 4096},
                          {"train/mfu", NAN}};
    lf_obs_record r = {.kind = LF_OBS_TRAIN, .step = 1, .scalars = sc, .n_scalars = 7};
    sink->emit(sink, &r);
    lf_obs_record ev = {.kind = LF_OBS_EVENT, .step = 1, .wall_time = when, .event = "checkpoint"};
    sink->emit(sink, &ev);
    sink->close(sink);
    char *text;
    size_t len;
    LF_ASSERT_OK(lf_file_read_all(path, 0, &text, &len));
    printf("%s", text);
    char *nl = strchr(text, '\n');
    assert_non_null(nl);
    *nl = 0;
    cJSON *a = cJSON_Parse(text), *b = cJSON_Parse(nl + 1);
    assert_non_null(a);
    assert_non_null(b);
    assert_true(cJSON_GetObjectItem(a, "loss")->valuedouble == loss);
    assert_true(cJSON_GetObjectItem(a, "grad_norm")->valuedouble == norm);
    assert_true(cJSON_GetObjectItem(a, "tokens_per_sec")->valuedouble == tps);
    assert_true(cJSON_GetObjectItem(a, "ms")->valuedouble == 1e-300);
    assert_true((float)cJSON_GetObjectItem(a, "lr")->valuedouble == lr);
    assert_non_null(strstr(text, "\"lr\":0.0006,"));
    assert_non_null(strstr(text, "\"train/tokens\":4096,"));
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(a, "train/mfu")));
    assert_true(cJSON_GetObjectItem(b, "time")->valuedouble == when);
    cJSON_Delete(a);
    cJSON_Delete(b);
    lf_free(text);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_log_numbers_read_back),
        cmocka_unit_test(test_resume_is_bit_exact),
        cmocka_unit_test(test_accumulation_equals_big_batch),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, setup, char_fixture_teardown);
}
