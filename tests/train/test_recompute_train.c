/*
 * activation_checkpointing.policy through the trainer: five training steps
 * (dropout on, two accumulated micro-batches, two threads) log the same
 * losses, as printed in log.jsonl, and end with the same weights, bit for
 * bit, under none, selective and full; a run checkpointed under one policy
 * resumes under another exactly; the key parses, dumps and rejects bad
 * values by name.
 */
#include "test_util.h"
#include "llmforge/data.h"
#include "llmforge/train.h"

#include "char_fixture.h"

static int setup(void **state) {
    (void)state;
    return char_fixture_setup(32768);
}

enum { STEPS = 5 };

static lf_train_config tiny_config(const char *out_name, lf_recompute policy) {
    lf_train_config c = lf_train_config_default();
    c.model.n_layer = 3;
    c.model.n_head = 2;
    c.model.n_embd = 32;
    c.model.block_size = 16;
    c.model.dropout = 0.1f;
    c.micro_batch = 4;
    c.grad_accum = 2;
    c.train_batch_size = 8;
    c.train_iters = STEPS;
    c.warmup_iters = 2;
    c.decay_iters = STEPS;
    c.lr = 3e-3f;
    c.min_lr = 3e-4f;
    c.eval_interval = 0;
    c.eval_iters = 1;
    c.ckpt_interval = 3;
    c.steps_per_print = 1;
    c.seed = 7;
    c.recompute = (int)policy;
    snprintf(c.dataset, sizeof c.dataset, "%s", data_dir);
    snprintf(c.out_dir, sizeof c.out_dir, "%s/%s", tmp, out_name);
    return c;
}

/* Train; copy out the final weights (caller frees). */
static float *train(const lf_train_config *c, int resume, size_t *n) {
    lf_trainer *t = NULL;
    lf_trainer_opts o = {.resume = resume};
    lf_status st = lf_trainer_create(&t, c, &o);
    if (st != LF_OK) fail_msg("create: %s", lf_trainer_errmsg(t));
    assert_int_equal(lf_model_recompute(lf_trainer_model(t)), c->recompute);
    st = lf_trainer_run(t);
    if (st != LF_OK) fail_msg("run: %s", lf_trainer_errmsg(t));
    lf_model *m = lf_trainer_model(t);
    *n = lf_model_num_params(m);
    float *w = malloc(*n * sizeof(float));
    memcpy(w, lf_model_params(m), *n * sizeof(float));
    lf_trainer_free(t);
    return w;
}

/* Train-step losses from log.jsonl, as the exact text written. */
static int read_losses(const char *out_dir, char losses[][40], int cap) {
    char path[700];
    snprintf(path, sizeof path, "%s/log.jsonl", out_dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        if (!strstr(line, "\"type\":\"train\"")) continue;
        const char *p = strstr(line, "\"loss\":");
        const char *s = strstr(line, "\"step\":");
        assert_non_null(p);
        assert_non_null(s);
        long step = strtol(s + 7, NULL, 10);
        assert_true(step >= 1 && step <= cap);
        sscanf(p + 7, "%39[^,}]", losses[step - 1]);
        n++;
    }
    fclose(f);
    return n;
}

static void test_policies_log_identical_losses(void **state) {
    (void)state;
    const char *names[] = {"none", "selective", "full"};
    char losses[3][STEPS][40];
    float *w[3];
    size_t n[3];
    memset(losses, 0, sizeof losses);
    for (int p = 0; p < 3; p++) {
        lf_train_config c = tiny_config(names[p], (lf_recompute)p);
        w[p] = train(&c, 0, &n[p]);
        assert_int_equal(read_losses(c.out_dir, losses[p], STEPS), STEPS);
    }
    for (int s = 0; s < STEPS; s++) printf("step %d: %s %s %s\n", s + 1, losses[0][s], losses[1][s], losses[2][s]);
    for (int p = 1; p < 3; p++) {
        for (int s = 0; s < STEPS; s++) assert_string_equal(losses[p][s], losses[0][s]);
        assert_int_equal(n[p], n[0]);
        assert_memory_equal(w[p], w[0], n[0] * sizeof(float));
    }
    assert_true(atof(losses[0][STEPS - 1]) < atof(losses[0][0]));
    for (int p = 0; p < 3; p++) free(w[p]);
}

/* Checkpoints hold no trace of the policy: 3 steps under none, then resume
 * under full (and selective) to step 5 == 5 straight steps under none. */
static void test_resume_changes_policy(void **state) {
    (void)state;
    lf_train_config a = tiny_config("straight", LF_RECOMPUTE_NONE);
    size_t na, nb;
    float *wa = train(&a, 0, &na);
    char la[STEPS][40];
    assert_int_equal(read_losses(a.out_dir, la, STEPS), STEPS);

    for (int p = LF_RECOMPUTE_SELECTIVE; p <= LF_RECOMPUTE_FULL; p++) {
        char name[32];
        snprintf(name, sizeof name, "resumed%d", p);
        lf_train_config b = tiny_config(name, LF_RECOMPUTE_NONE);
        b.train_iters = 3;
        free(train(&b, 0, &nb));
        b.train_iters = STEPS;
        b.recompute = p;
        float *wb = train(&b, 1, &nb);
        assert_int_equal(na, nb);
        assert_memory_equal(wa, wb, na * sizeof(float));
        char lb[STEPS][40];
        memset(lb, 0, sizeof lb);
        assert_int_equal(read_losses(b.out_dir, lb, STEPS), STEPS);
        for (int s = 0; s < STEPS; s++) assert_string_equal(la[s], lb[s]);
        free(wb);
    }
    free(wa);
}

static void test_config_key(void **state) {
    (void)state;
    lf_train_config c;
    const char *ov[] = {"data.dataset=x", "activation_checkpointing.policy=selective"};
    LF_ASSERT_OK(lf_train_config_load(&c, NULL, 2, ov));
    assert_int_equal(c.recompute, LF_RECOMPUTE_SELECTIVE);
    char *json = lf_train_config_to_json(&c);
    assert_non_null(json);
    assert_non_null(strstr(json, "\"activation_checkpointing\""));
    assert_non_null(strstr(json, "\"selective\""));
    lf_train_config back;
    LF_ASSERT_OK(lf_train_config_parse(&back, json, "dump", 0, NULL));
    assert_int_equal(back.recompute, LF_RECOMPUTE_SELECTIVE);
    lf_free(json);

    LF_ASSERT_OK(lf_train_config_load(&c, NULL, 1, ov));
    assert_int_equal(c.recompute, LF_RECOMPUTE_NONE); /* the default */

    /* DeepSpeed's own keys of the section load (and change nothing) */
    const char *ds = "{\"data\": {\"dataset\": \"x\"}, \"activation_checkpointing\": {\"partition_activations\": true, "
                     "\"cpu_checkpointing\": false, \"contiguous_memory_optimization\": false, "
                     "\"number_checkpoints\": null, \"synchronize_checkpoint_boundary\": false, \"profile\": false, "
                     "\"policy\": \"full\"}}";
    LF_ASSERT_OK(lf_train_config_parse(&c, ds, "ds_config.json", 0, NULL));
    assert_int_equal(c.recompute, LF_RECOMPUTE_FULL);

    const char *bad[] = {"data.dataset=x", "activation_checkpointing.policy=some"};
    assert_int_equal(lf_train_config_load(&c, NULL, 2, bad), LF_ERR_CONFIG);
    LF_ASSERT_ERR_CONTAINS("activation_checkpointing.policy");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_policies_log_identical_losses),
        cmocka_unit_test(test_resume_changes_policy),
        cmocka_unit_test(test_config_key),
    };
    return cmocka_run_group_tests(tests, setup, char_fixture_teardown);
}
