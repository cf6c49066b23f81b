/* Perplexity and bits per byte by hand. */
#include "test_util.h"
#include "llmforge/eval.h"

static void test_ppl_bpb(void **state) {
    (void)state;
    lf_lm_stats s = {0};
    lf_lm_stats_add(&s, 2.0, 1, 4);
    lf_lm_stats_add(&s, 1.0 + 3.0, 2, 6); /* token NLLs 2, 1, 3 over 10 bytes */
    double ppl, bpb;
    LF_ASSERT_OK(lf_lm_perplexity(&s, &ppl));
    assert_true(ppl == exp(2.0));
    LF_ASSERT_OK(lf_lm_bits_per_byte(&s, &bpb));
    assert_true(fabs(bpb - 6.0 / (log(2.0) * 10.0)) < 1e-15);
    /* a uniform model over 256 byte values: 8 bits per byte, perplexity 256 */
    lf_lm_stats u = {0};
    for (int i = 0; i < 1000; i++) lf_lm_stats_add(&u, log(256.0), 1, 1);
    LF_ASSERT_OK(lf_lm_perplexity(&u, &ppl));
    LF_ASSERT_OK(lf_lm_bits_per_byte(&u, &bpb));
    assert_true(fabs(ppl - 256.0) < 1e-9);
    assert_true(fabs(bpb - 8.0) < 1e-12);
}

static void test_lm_errors(void **state) {
    (void)state;
    lf_lm_stats s = {0};
    double v;
    assert_int_equal(lf_lm_perplexity(&s, &v), LF_ERR_INVALID_ARG);
    assert_int_equal(lf_lm_bits_per_byte(&s, &v), LF_ERR_INVALID_ARG);
    lf_lm_stats_add(&s, INFINITY, 1, 1);
    assert_int_equal(lf_lm_perplexity(&s, &v), LF_ERR_NUMERIC);
    assert_int_equal(lf_lm_bits_per_byte(&s, &v), LF_ERR_NUMERIC);
    lf_lm_stats_add(NULL, 1.0, 1, 1); /* no-op */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ppl_bpb),
        cmocka_unit_test(test_lm_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
