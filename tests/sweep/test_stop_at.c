/*
 * train.stop_at, the key sweeps stop trials at their rungs with: a run with
 * stop_at S trains exactly S steps, evaluates and checkpoints step S, and
 * keeps train_iters' learning-rate schedule (decay_iters derived from
 * train_iters, not from S); resumed without it, it ends bit for bit where
 * the uninterrupted run ends (weights, every step's loss and learning
 * rate). Bad values are refused naming the key.
 */
#include "test_util.h"
#include "llmforge/data.h"
#include "llmforge/sweep.h"
#include "llmforge/train.h"

#include "train/char_fixture.h"

static int setup(void **state) {
    (void)state;
    return char_fixture_setup(65536);
}

/* The configuration as a file and the command line give it (so the derived
 * keys are derived as they are for a trial). */
static lf_train_config config(const char *out, const char *extra) {
    char json[2048];
    snprintf(json, sizeof json,
             "{\"model\": {\"n_layer\": 2, \"n_head\": 2, \"n_embd\": 32, \"block_size\": 16, \"dropout\": 0.1},"
             " \"data\": {\"dataset\": \"%s\"}, \"train_micro_batch_size_per_gpu\": 4, \"train_iters\": 12,"
             " \"optimizer\": {\"params\": {\"lr\": 3e-3}}, \"scheduler\": {\"warmup_iters\": 3},"
             " \"eval\": {\"interval\": 0, \"iters\": 2}, \"checkpoint\": {\"interval\": 0}, \"seed\": 5,"
             " \"registry\": {\"enabled\": false}, \"out_dir\": \"%s/%s\"}",
             data_dir, tmp, out);
    const char *ov[1] = {extra};
    lf_train_config c;
    LF_ASSERT_OK(lf_train_config_parse_world(&c, json, "test", 1, extra ? 1 : 0, ov));
    return c;
}

static float *train(const lf_train_config *c, int resume, size_t *n) {
    lf_trainer *t = NULL;
    lf_trainer_opts o = {.resume = resume};
    if (lf_trainer_create(&t, c, &o) != LF_OK) fail_msg("create: %s", lf_trainer_errmsg(t));
    if (lf_trainer_run(t) != LF_OK) fail_msg("run: %s", lf_trainer_errmsg(t));
    *n = lf_model_num_params(lf_trainer_model(t));
    float *w = malloc(*n * sizeof(float));
    LF_ASSERT_OK(lf_trainer_copy_params(t, w));
    lf_trainer_free(t);
    return w;
}

/* "loss" and "lr" text of each train record of out/log.jsonl by step; the highest step. */
static long read_steps(const char *out, char loss[][32], char lr[][32], int cap) {
    char path[900];
    snprintf(path, sizeof path, "%s/log.jsonl", out);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[4096];
    long last = 0;
    while (fgets(line, sizeof line, f)) {
        if (!strstr(line, "\"type\":\"train\"")) continue;
        long step = strtol(strstr(line, "\"step\":") + 7, NULL, 10);
        assert_true(step >= 1 && step <= cap);
        sscanf(strstr(line, "\"loss\":") + 7, "%31[^,]", loss[step - 1]);
        sscanf(strstr(line, "\"lr\":") + 5, "%31[^,]", lr[step - 1]);
        if (step > last) last = step;
    }
    fclose(f);
    return last;
}

static void test_stop_and_resume_equals_straight(void **state) {
    (void)state;
    lf_train_config a = config("straight", NULL);
    assert_int_equal(a.stop_at, 0);
    size_t na, nb;
    float *wa = train(&a, 0, &na);

    lf_train_config b = config("stopped", "train.stop_at=7");
    assert_int_equal(b.stop_at, 7);
    assert_int_equal(b.decay_iters, 12); /* the schedule is train_iters', not stop_at's */
    free(train(&b, 0, &nb));
    char la[12][32], ra[12][32], lb[12][32], rb[12][32];
    memset(lb, 0, sizeof lb);
    memset(rb, 0, sizeof rb);
    assert_int_equal(read_steps(b.out_dir, lb, rb, 12), 7); /* not one step past the stop */
    long ck = 0;
    LF_ASSERT_OK(lf_sweep_checkpoint_step(b.out_dir, &ck));
    assert_int_equal(ck, 7);
    char log[900];
    snprintf(log, sizeof log, "%s/log.jsonl", b.out_dir);
    double v;
    LF_ASSERT_OK(lf_sweep_log_metric(log, "val_loss", 7, &v)); /* evaluated where it stopped */
    assert_true(isfinite(v));

    /* resumed to the end (stop_at 0, off) */
    b = config("stopped", NULL);
    float *wb = train(&b, 1, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(wa, wb, na * sizeof(float));
    memset(la, 0, sizeof la);
    assert_int_equal(read_steps(a.out_dir, la, ra, 12), 12);
    assert_int_equal(read_steps(b.out_dir, lb, rb, 12), 12);
    for (int i = 0; i < 12; i++) {
        assert_string_equal(la[i], lb[i]);
        assert_string_equal(ra[i], rb[i]);
    }
    /* step 7's rate is the 12-step schedule's, which a 7-step run would not have */
    lf_train_config short_run = config("x", "train_iters=7");
    assert_true(fabsf(lf_lr_at(&a, 6) - (float)atof(ra[6])) <= 1e-6f * lf_lr_at(&a, 6));
    assert_true(fabsf(lf_lr_at(&short_run, 6) - lf_lr_at(&a, 6)) > 1e-2f * lf_lr_at(&a, 6));
    free(wa);
    free(wb);
}

static void test_stop_at_past_the_end_and_bad_values(void **state) {
    (void)state;
    /* at or past train_iters: no effect */
    lf_train_config c = config("past", "train.stop_at=50");
    size_t n;
    free(train(&c, 0, &n));
    char l[12][32], r[12][32];
    assert_int_equal(read_steps(c.out_dir, l, r, 12), 12);
    lf_train_config bad;
    const char *ov[] = {"data.dataset=x", "train.stop_at=-1"};
    assert_int_equal(lf_train_config_parse_world(&bad, NULL, NULL, 1, 2, ov), LF_ERR_CONFIG);
    LF_ASSERT_ERR_CONTAINS("train.stop_at");
    const char *ov2[] = {"data.dataset=x", "train.stop_at=2.5"};
    assert_int_equal(lf_train_config_parse_world(&bad, NULL, NULL, 1, 2, ov2), LF_ERR_CONFIG);
    LF_ASSERT_ERR_CONTAINS("train.stop_at");
    char help[32768];
    lf_train_config_help(help, sizeof help);
    assert_non_null(strstr(help, "train.stop_at"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stop_and_resume_equals_straight),
        cmocka_unit_test(test_stop_at_past_the_end_and_bad_values),
    };
    return cmocka_run_group_tests(tests, setup, char_fixture_teardown);
}
