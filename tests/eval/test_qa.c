/* SQuAD v1.1 normalisation, exact match and token F1 by hand; the expected
 * normalisations were checked against the evaluate-v1.1.py functions in
 * CPython 3.11 (Unicode lower-casing and the Unicode \b of re included). */
#include "test_util.h"
#include "llmforge/eval.h"

#define EQ(a, b) assert_true(fabs((a) - (b)) < 1e-15)

static void test_normalize(void **state) {
    (void)state;
    static const char *const cases[][2] = {
        {"The Cat!", "cat"},
        {"  An  apple, a day...  ", "apple day"},
        {"th\xC3\xA9" "a the_end", "th\xC3\xA9" "a theend"},     /* '_' is punctuation */
        {"a-the-an", "athean"},                                  /* punctuation removed first */
        {"the", ""},
        {"A", ""},
        {"\xC3\x9Cn\xC3\xAF THE Stra\xC3\x9F" "e", "\xC3\xBCn\xC3\xAF stra\xC3\x9F" "e"},
        {"\xC3\xA9the", "\xC3\xA9the"},                          /* é is a word character: no boundary */
        {"the\xC2\xA0" "end", "end"},                            /* NBSP is whitespace */
        {"x\xCC\x81the", "x\xCC\x81"},                          /* a combining mark is not \w */
        {"The\xC2\xB2 end", "the\xC2\xB2 end"},                  /* ² is \w */
        {"\xC4\xB0the", "i\xCC\x87"},                            /* İ lower-cases to i + U+0307 */
        {"\xCE\xA3\xCE\x91\xCE\xA3 the", "\xCF\x83\xCE\xB1\xCF\x82"}, /* final sigma */
        {"THE!!!the", "thethe"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *got;
        LF_ASSERT_OK(lf_squad_normalize(cases[i][0], &got));
        if (strcmp(got, cases[i][1])) fail_msg("normalize('%s') = '%s', want '%s'", cases[i][0], got, cases[i][1]);
        lf_free(got);
    }
}

static void test_em_f1(void **state) {
    (void)state;
    double em, f1;
    const char *g1[] = {"A cat sat down", "dog"};
    LF_ASSERT_OK(lf_squad_score("the cat sat", g1, 2, &em, &f1));
    EQ(em, 0.0);
    EQ(f1, 0.8); /* P 2/2, R 2/3 */
    const char *g2[] = {"paris!", "Paris, France"};
    LF_ASSERT_OK(lf_squad_score("Paris", g2, 2, &em, &f1));
    EQ(em, 1.0);
    EQ(f1, 1.0);
    const char *g3[] = {"a"}; /* both normalise to "": EM 1, F1 0 (v1.1) */
    LF_ASSERT_OK(lf_squad_score("the", g3, 1, &em, &f1));
    EQ(em, 1.0);
    EQ(f1, 0.0);
    const char *g4[] = {"b b c"}; /* multiset intersection: 2 */
    LF_ASSERT_OK(lf_squad_score("a b b b", g4, 1, &em, &f1));
    EQ(f1, 2.0 / 3.0);
    const char *g5[] = {"x", "y z", "the y"}; /* max over gold answers */
    LF_ASSERT_OK(lf_squad_score("y", g5, 3, &em, &f1));
    EQ(em, 1.0);
    EQ(f1, 1.0);
}

static void test_qa_errors(void **state) {
    (void)state;
    double em, f1;
    const char *g[] = {"ok"};
    assert_int_equal(lf_squad_score("bad\xFF", g, 1, &em, &f1), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("prediction: invalid UTF-8 at byte 3");
    const char *bg[] = {"ok", "\xE0\x80\x80"};
    assert_int_equal(lf_squad_score("x", bg, 2, &em, &f1), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("gold answer: invalid UTF-8 at byte 0 (overlong encoding)");
    assert_int_equal(lf_squad_score("x", g, 0, &em, &f1), LF_ERR_INVALID_ARG);
    const char *ng[] = {NULL};
    assert_int_equal(lf_squad_score("x", ng, 1, &em, &f1), LF_ERR_INVALID_ARG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_normalize),
        cmocka_unit_test(test_em_f1),
        cmocka_unit_test(test_qa_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
