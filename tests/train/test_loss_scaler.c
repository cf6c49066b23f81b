/* fp16 loss scaler: replays the sequences DeepSpeed 0.12.6's DynamicLossScaler
 * produced for given overflow patterns (tests/fixtures/loss_scaler.json, from
 * tools/reference/make_loss_scaler_fixture.py): after every step the scale,
 * the hysteresis counter, last_overflow_iter and the iteration count must
 * equal DeepSpeed's, and the stop at the minimum scale must come at the same
 * step. A scaler copied mid-sequence (what a checkpoint stores) continues
 * identically. The static scaler keeps its scale through overflows. */
#include "test_util.h"
#include <cjson/cJSON.h>
#include "llmforge/loss_scaler.h"

#define FIXTURE LF_SOURCE_DIR "/tests/fixtures/loss_scaler.json"

static int geti(const cJSON *o, const char *k) { return (int)cJSON_GetObjectItemCaseSensitive(o, k)->valuedouble; }

static void test_deepspeed_sequences(void **state) {
    (void)state;
    char *buf = NULL;
    size_t len = 0;
    LF_ASSERT_OK(lf_file_read_all(FIXTURE, 1u << 24, &buf, &len));
    cJSON *root = cJSON_ParseWithLength(buf, len);
    assert_non_null(root);
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(root, "cases"), *c;
    int n_cases = 0, n_steps = 0, n_raised = 0;
    cJSON_ArrayForEach(c, cases) {
        const char *name = cJSON_GetObjectItemCaseSensitive(c, "name")->valuestring;
        lf_loss_scaler s, copy;
        lf_loss_scaler_init(&s, 0, geti(c, "initial_scale_power"), geti(c, "loss_scale_window"), geti(c, "hysteresis"),
                            cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "consecutive_hysteresis")),
                            cJSON_GetObjectItemCaseSensitive(c, "min_loss_scale")->valuedouble);
        const cJSON *steps = cJSON_GetObjectItemCaseSensitive(c, "steps"), *row;
        int i = 0, total = cJSON_GetArraySize(steps);
        cJSON_ArrayForEach(row, steps) {
            int ov = (int)cJSON_GetArrayItem(row, 0)->valuedouble, raised = (int)cJSON_GetArrayItem(row, 1)->valuedouble;
            double scale = cJSON_GetArrayItem(row, 2)->valuedouble;
            int hyst = (int)cJSON_GetArrayItem(row, 3)->valuedouble;
            long last = (long)cJSON_GetArrayItem(row, 4)->valuedouble, iter = (long)cJSON_GetArrayItem(row, 5)->valuedouble;
            if (i == total / 2) copy = s; /* a checkpoint mid-sequence */
            lf_status st = lf_loss_scaler_update(&s, ov);
            if ((st != LF_OK) != raised) fail_msg("%s step %d: raised %d, DeepSpeed %d", name, i, st != LF_OK, raised);
            if (raised) {
                LF_ASSERT_ERR_CONTAINS("minimum");
                n_raised++;
            }
            if (s.scale != scale || s.cur_hysteresis != hyst || s.last_overflow_iter != last || s.iter != iter)
                fail_msg("%s step %d: scale %g hysteresis %d last_overflow %ld iter %ld; DeepSpeed %g %d %ld %ld", name,
                         i, s.scale, s.cur_hysteresis, s.last_overflow_iter, s.iter, scale, hyst, last, iter);
            i++;
            n_steps++;
        }
        /* resume: the copy replays the second half identically */
        int k = 0;
        cJSON_ArrayForEach(row, steps) {
            if (k++ < total / 2) continue;
            lf_status st = lf_loss_scaler_update(&copy, (int)cJSON_GetArrayItem(row, 0)->valuedouble);
            assert_int_equal(st != LF_OK, (int)cJSON_GetArrayItem(row, 1)->valuedouble);
            assert_true(copy.scale == cJSON_GetArrayItem(row, 2)->valuedouble);
            assert_int_equal(copy.cur_hysteresis, (int)cJSON_GetArrayItem(row, 3)->valuedouble);
        }
        n_cases++;
    }
    assert_true(n_cases >= 10);
    assert_true(n_steps > 3000);
    assert_true(n_raised >= 3); /* the minimum-scale stop is exercised */
    cJSON_Delete(root);
    lf_free(buf);
}

static void test_static_and_edges(void **state) {
    (void)state;
    lf_loss_scaler s;
    lf_loss_scaler_init(&s, 128.0, 16, 1000, 2, 0, 1);
    assert_false(s.dynamic);
    for (int i = 0; i < 50; i++) {
        LF_ASSERT_OK(lf_loss_scaler_update(&s, i % 3 == 0));
        assert_true(s.scale == 128.0); /* static: never moves, never stops */
    }
    /* DeepSpeed defaults: 2^16, window 1000, hysteresis 2 */
    lf_loss_scaler_init(&s, 0, 16, 1000, 2, 0, 1);
    assert_true(s.dynamic && s.scale == 65536.0);
    LF_ASSERT_OK(lf_loss_scaler_update(&s, 1)); /* hysteresis absorbs the first */
    assert_true(s.scale == 65536.0);
    assert_int_equal(s.cur_hysteresis, 1);
    LF_ASSERT_OK(lf_loss_scaler_update(&s, 1));
    assert_true(s.scale == 32768.0);
    for (int i = 0; i < 999; i++) LF_ASSERT_OK(lf_loss_scaler_update(&s, 0));
    assert_true(s.scale == 32768.0);
    LF_ASSERT_OK(lf_loss_scaler_update(&s, 0)); /* the 1000th clean step doubles */
    assert_true(s.scale == 65536.0);
    assert_int_equal(s.cur_hysteresis, 2);
    /* at the minimum: stop */
    lf_loss_scaler_init(&s, 0, 1, 1000, 1, 0, 1);
    LF_ASSERT_OK(lf_loss_scaler_update(&s, 1));
    assert_true(s.scale == 1.0);
    assert_int_equal(lf_loss_scaler_update(&s, 1), LF_ERR_NUMERIC);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_deepspeed_sequences), cmocka_unit_test(test_static_and_edges)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
