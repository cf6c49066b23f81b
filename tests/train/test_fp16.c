/*
 * fp16 training with DeepSpeed's loss scaling, through the trainer:
 *  - overflows injected at chosen steps: those steps are skipped (a
 *    skipped_step event naming fp16_overflow and the tensor), the other steps
 *    train; train/loss_scale per step equals the scaler replayed on the same
 *    overflow pattern (the scaler itself is checked against DeepSpeed in
 *    test_loss_scaler.c); Prometheus' loss-scale gauge follows;
 *  - a run resumed mid-sequence (checkpoint between overflows) logs exactly
 *    what the uninterrupted run logs: scale, hysteresis and losses;
 *  - a real overflow: starting at 2^40 the scaled gradients exceed fp16's
 *    range, the scale falls until they fit, then training proceeds;
 *  - at the minimum scale the run stops, naming the tensor and suggesting bf16;
 *  - a static scale never moves; fp16 lands close to the fp32 run;
 *  - fp16 together with bf16 is a configuration error.
 */
#include "test_util.h"
#include "llmforge/data.h"
#include "llmforge/loss_scaler.h"
#include "llmforge/train.h"

#include "char_fixture.h"

static int setup(void **state) {
    (void)state;
    return char_fixture_setup(32768);
}

static lf_train_config tiny(const char *name, int iters) {
    lf_train_config c = lf_train_config_default();
    c.model.n_layer = 1;
    c.model.n_head = 2;
    c.model.n_embd = 16;
    c.model.block_size = 16;
    c.micro_batch = 4;
    c.train_batch_size = 4;
    c.train_iters = iters;
    c.warmup_iters = 0;
    c.decay_iters = iters;
    c.eval_interval = 0;
    c.eval_iters = 1;
    c.ckpt_interval = 0;
    c.peak_gflops = 100;
    c.fp16 = 1;
    c.fp16_scale_power = 8;
    c.fp16_window = 3;
    c.fp16_hysteresis = 2;
    snprintf(c.dataset, sizeof c.dataset, "%s", data_dir);
    snprintf(c.out_dir, sizeof c.out_dir, "%s/%s", tmp, name);
    return c;
}

/* per train record of log.jsonl: loss, loss_scale (NAN when absent), skipped flag */
typedef struct rec {
    double loss, scale;
    int skipped;
} rec;

static int read_train(const lf_train_config *c, rec *out, int cap, int *n_overflow_events, char *tensor, size_t tcap) {
    char path[1200], *text;
    size_t len;
    snprintf(path, sizeof path, "%s/log.jsonl", c->out_dir);
    LF_ASSERT_OK(lf_file_read_all(path, 0, &text, &len));
    int n = 0;
    *n_overflow_events = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (strstr(line, "\"reason\":\"fp16_overflow\"")) {
            (*n_overflow_events)++;
            const char *p = strstr(line, "\"tensor\":\"");
            if (p && tensor) {
                p += 10;
                size_t k = 0;
                while (p[k] && p[k] != '"' && k + 1 < tcap) tensor[k] = p[k], k++;
                tensor[k] = 0;
            }
        }
        if (!strstr(line, "\"type\":\"train\"") || n >= cap) continue;
        const char *l = strstr(line, "\"loss\":"), *s = strstr(line, "\"train/loss_scale\":");
        if (!s) s = strstr(line, "\"loss_scale\":");
        out[n].loss = l ? strtod(l + 7, NULL) : NAN;
        out[n].scale = s ? strtod(strchr(s, ':') + 1, NULL) : NAN;
        out[n].skipped = strstr(line, "\"train/skipped\"") != NULL;
        n++;
    }
    lf_free(text);
    return n;
}

static void run(lf_train_config *c, const lf_trainer_opts *o, lf_status want) {
    lf_trainer *t = NULL;
    LF_ASSERT_OK(lf_trainer_create(&t, c, o));
    lf_status st = lf_trainer_run(t);
    if (st != want) fail_msg("run %s: %s (%s)", c->out_dir, lf_status_str(st), lf_trainer_errmsg(t));
    lf_trainer_free(t);
}

static void test_injected_sequence(void **state) {
    (void)state;
    lf_train_config c = tiny("seq", 14);
    lf_trainer_opts o = {.inject_overflow_steps = {2, 3, 5, 6, 7, 11}, .n_inject_overflow = 6};
    run(&c, &o, LF_OK);
    rec r[32];
    int nov = 0;
    char tensor[128] = "";
    int n = read_train(&c, r, 32, &nov, tensor, sizeof tensor);
    assert_int_equal(n, 14);
    assert_int_equal(nov, 6);
    assert_string_equal(tensor, "h.0.mlp.c_fc.weight");
    /* replay the scaler on the same pattern: the scale each step used */
    lf_loss_scaler s;
    lf_loss_scaler_init(&s, 0, 8, 3, 2, 0, 1);
    for (int i = 0; i < n; i++) {
        int ov = i + 1 == 2 || i + 1 == 3 || i + 1 == 5 || i + 1 == 6 || i + 1 == 7 || i + 1 == 11;
        if (r[i].scale != s.scale) fail_msg("step %d: logged loss scale %g, expected %g", i + 1, r[i].scale, s.scale);
        assert_int_equal(r[i].skipped, ov);
        assert_true(isfinite(r[i].loss));
        LF_ASSERT_OK(lf_loss_scaler_update(&s, ov));
    }
    assert_true(r[13].loss < r[0].loss); /* the clean steps trained */
}

static void test_resume_mid_sequence(void **state) {
    (void)state;
    lf_trainer_opts o = {.inject_overflow_steps = {3, 4, 9}, .n_inject_overflow = 3};
    lf_train_config a = tiny("straight", 12);
    a.ckpt_interval = 6;
    run(&a, &o, LF_OK);
    lf_train_config b = tiny("resumed", 6); /* stops at 6: after the overflows at 3 and 4, hysteresis spent */
    b.ckpt_interval = 6;
    b.decay_iters = 12;
    run(&b, &o, LF_OK);
    b.train_iters = 12;
    lf_trainer_opts ro = o;
    ro.resume = 1;
    run(&b, &ro, LF_OK);
    rec ra[32], rb[32];
    int nov;
    int na = read_train(&a, ra, 32, &nov, NULL, 0), nb = read_train(&b, rb, 32, &nov, NULL, 0);
    assert_int_equal(na, 12);
    assert_int_equal(nb, 12);
    for (int i = 0; i < 12; i++) {
        if (ra[i].loss != rb[i].loss || ra[i].scale != rb[i].scale || ra[i].skipped != rb[i].skipped)
            fail_msg("step %d: straight loss %.9g scale %g skipped %d; resumed %.9g %g %d", i + 1, ra[i].loss,
                     ra[i].scale, ra[i].skipped, rb[i].loss, rb[i].scale, rb[i].skipped);
    }
    /* the checkpoint holds the scaler */
    char path[1200], *st;
    size_t len;
    snprintf(path, sizeof path, "%s/ckpt/step_00000006/trainer_state.json", b.out_dir);
    LF_ASSERT_OK(lf_file_read_all(path, 0, &st, &len));
    assert_non_null(strstr(st, "\"loss_scaler\""));
    assert_non_null(strstr(st, "\"last_overflow_iter\""));
    lf_free(st);
}

static void test_real_overflow_then_training(void **state) {
    (void)state;
    lf_train_config c = tiny("real", 30);
    c.fp16_scale_power = 40; /* gradients x 2^40 exceed fp16's 65504 */
    c.fp16_hysteresis = 1;
    c.fp16_window = 1000;
    lf_trainer_opts o = {0};
    run(&c, &o, LF_OK);
    rec r[64];
    int nov;
    int n = read_train(&c, r, 64, &nov, NULL, 0);
    assert_int_equal(n, 30);
    assert_true(nov >= 5);   /* the scale had to come down */
    assert_true(nov < 30);   /* and then it fit */
    assert_true(r[29].scale < ldexp(1, 40));
    assert_false(r[29].skipped);
    for (int i = 1; i < n; i++) assert_true(r[i].scale <= r[i - 1].scale); /* halving only (window 1000) */
    /* the steps after the last overflow train */
    assert_true(r[29].loss < r[nov].loss);
}

static void test_min_scale_stops(void **state) {
    (void)state;
    lf_train_config c = tiny("min", 10);
    c.fp16_scale_power = 40;
    c.fp16_min_scale = 1099511627776.0f; /* 2^40: cannot go lower */
    c.fp16_hysteresis = 1;
    lf_trainer_opts o = {0};
    lf_trainer *t = NULL;
    LF_ASSERT_OK(lf_trainer_create(&t, &c, &o));
    assert_int_equal(lf_trainer_run(t), LF_ERR_NUMERIC);
    const char *msg = lf_trainer_errmsg(t);
    if (!strstr(msg, "bf16") || !strstr(msg, "minimum") || !strstr(msg, "step 1") || !strstr(msg, "'"))
        fail_msg("message: %s", msg);
    lf_trainer_free(t);
}

static void test_static_scale_and_accuracy(void **state) {
    (void)state;
    lf_train_config c = tiny("static", 20);
    c.fp16_loss_scale = 1024;
    lf_trainer_opts o = {.inject_overflow_steps = {4}, .n_inject_overflow = 1};
    run(&c, &o, LF_OK);
    rec r[32], f[32];
    int nov;
    int n = read_train(&c, r, 32, &nov, NULL, 0);
    assert_int_equal(n, 20);
    assert_int_equal(nov, 1);
    for (int i = 0; i < n; i++) assert_true(r[i].scale == 1024);
    assert_true(r[3].skipped);
    /* fp32 reference without the injected overflow; fp16 without it either */
    lf_train_config a = tiny("fp32", 20), b = tiny("fp16", 20);
    a.fp16 = 0;
    lf_trainer_opts none = {0};
    run(&a, &none, LF_OK);
    run(&b, &none, LF_OK);
    int na = read_train(&a, f, 32, &nov, NULL, 0);
    assert_int_equal(na, 20);
    assert_true(isnan(f[0].scale)); /* fp32 logs no loss scale */
    n = read_train(&b, r, 32, &nov, NULL, 0);
    assert_int_equal(nov, 0);
    assert_true(r[0].loss == f[0].loss); /* same forward */
    double rel = fabs(r[19].loss - f[19].loss) / f[19].loss;
    if (rel > 0.01) fail_msg("fp16 final loss %.6f vs fp32 %.6f", r[19].loss, f[19].loss);
    int differ = 0;
    for (int i = 1; i < 20; i++) differ |= r[i].loss != f[i].loss;
    assert_true(differ); /* the fp16 rounding really happens */
}

static void test_config(void **state) {
    (void)state;
    lf_train_config c;
    const char *ov[] = {"data.dataset=x", "fp16.enabled=true", "bf16.enabled=true"};
    assert_int_equal(lf_train_config_parse(&c, NULL, NULL, 3, ov), LF_ERR_CONFIG);
    LF_ASSERT_ERR_CONTAINS("fp16.enabled");
    const char *ov2[] = {"data.dataset=x", "fp16.enabled=true", "fp16.min_loss_scale=0"};
    assert_int_equal(lf_train_config_parse(&c, NULL, NULL, 3, ov2), LF_ERR_CONFIG);
    LF_ASSERT_ERR_CONTAINS("fp16.min_loss_scale");
    const char *js = "{\"data\":{\"dataset\":\"x\"},\"fp16\":{\"enabled\":true,\"loss_scale\":0,"
                     "\"initial_scale_power\":12,\"loss_scale_window\":500,\"hysteresis\":3,"
                     "\"consecutive_hysteresis\":true,\"min_loss_scale\":2,\"auto_cast\":false}}";
    LF_ASSERT_OK(lf_train_config_parse(&c, js, "ds.json", 0, NULL));
    assert_int_equal(c.fp16, 1);
    assert_int_equal(c.fp16_scale_power, 12);
    assert_int_equal(c.fp16_window, 500);
    assert_int_equal(c.fp16_hysteresis, 3);
    assert_int_equal(c.fp16_consecutive, 1);
    assert_true(c.fp16_min_scale == 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_injected_sequence), cmocka_unit_test(test_resume_mid_sequence),
        cmocka_unit_test(test_real_overflow_then_training), cmocka_unit_test(test_min_scale_stops),
        cmocka_unit_test(test_static_scale_and_accuracy), cmocka_unit_test(test_config),
    };
    return cmocka_run_group_tests(tests, setup, char_fixture_teardown);
}
