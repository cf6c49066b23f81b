/* Accuracy, precision/recall/F1 (per class, macro, micro, binary) and the
 * confusion matrix, against values computed by hand with scikit-learn's
 * definitions (zero_division=0): classes absent from the predictions or
 * from the gold labels, and the binary rules. */
#include "test_util.h"
#include "llmforge/eval.h"

#define EQ(a, b) assert_true(fabs((a) - (b)) < 1e-15)

static lf_confusion *make(const char *const *gold, const char *const *pred, size_t n) {
    lf_confusion *c;
    LF_ASSERT_OK(lf_confusion_create(&c));
    for (size_t i = 0; i < n; i++) LF_ASSERT_OK(lf_confusion_add(c, gold[i], pred[i]));
    return c;
}

static void test_multiclass(void **state) {
    (void)state;
    /* pairs (a,a) (a,b) (b,b) (b,b) (c,c) (c,a) — labels arrive out of order */
    const char *gold[] = {"c", "a", "a", "b", "b", "c"}, *pred[] = {"c", "a", "b", "b", "b", "a"};
    lf_confusion *c = make(gold, pred, 6);
    assert_int_equal(lf_confusion_num_labels(c), 3);
    assert_string_equal(lf_confusion_label(c, 0), "a");
    assert_string_equal(lf_confusion_label(c, 1), "b");
    assert_string_equal(lf_confusion_label(c, 2), "c");
    assert_null(lf_confusion_label(c, 3));
    /* confusion matrix, rows gold, columns predicted */
    static const uint64_t want[3][3] = {{1, 1, 0}, {0, 2, 0}, {1, 0, 1}};
    for (size_t i = 0; i < 3; i++)
        for (size_t j = 0; j < 3; j++) assert_int_equal(lf_confusion_count(c, i, j), want[i][j]);
    double acc;
    LF_ASSERT_OK(lf_confusion_accuracy(c, &acc));
    EQ(acc, 4.0 / 6.0);
    lf_prf p;
    LF_ASSERT_OK(lf_confusion_class(c, 0, &p)); /* a: tp 1, predicted 2, gold 2 */
    EQ(p.precision, 0.5);
    EQ(p.recall, 0.5);
    EQ(p.f1, 0.5);
    assert_int_equal(p.support, 2);
    LF_ASSERT_OK(lf_confusion_class(c, 1, &p)); /* b: tp 2, predicted 3, gold 2 */
    EQ(p.precision, 2.0 / 3.0);
    EQ(p.recall, 1.0);
    EQ(p.f1, 0.8);
    LF_ASSERT_OK(lf_confusion_class(c, 2, &p)); /* c: tp 1, predicted 1, gold 2 */
    EQ(p.precision, 1.0);
    EQ(p.recall, 0.5);
    EQ(p.f1, 2.0 / 3.0);
    LF_ASSERT_OK(lf_confusion_average(c, LF_AVERAGE_MACRO, NULL, &p));
    EQ(p.precision, 13.0 / 18.0);
    EQ(p.recall, 2.0 / 3.0);
    EQ(p.f1, 59.0 / 90.0);
    assert_int_equal(p.support, 6);
    LF_ASSERT_OK(lf_confusion_average(c, LF_AVERAGE_MICRO, NULL, &p));
    EQ(p.precision, 4.0 / 6.0);
    EQ(p.recall, 4.0 / 6.0);
    EQ(p.f1, 4.0 / 6.0);
    /* binary needs at most two labels */
    assert_int_equal(lf_confusion_average(c, LF_AVERAGE_BINARY, "a", &p), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS("at most 2 labels, found 3");
    assert_int_equal(lf_confusion_class(c, 3, &p), LF_ERR_RANGE);
    lf_confusion_free(c);
}

static void test_absent_classes(void **state) {
    (void)state;
    /* y never predicted (precision 0/0 -> 0), z never in the gold labels (recall 0/0 -> 0) */
    const char *gold[] = {"x", "x", "y"}, *pred[] = {"x", "z", "x"};
    lf_confusion *c = make(gold, pred, 3);
    assert_int_equal(lf_confusion_num_labels(c), 3);
    lf_prf p;
    LF_ASSERT_OK(lf_confusion_class(c, 1, &p)); /* y */
    EQ(p.precision, 0.0);
    EQ(p.recall, 0.0);
    EQ(p.f1, 0.0);
    assert_int_equal(p.support, 1);
    LF_ASSERT_OK(lf_confusion_class(c, 2, &p)); /* z */
    EQ(p.precision, 0.0);
    EQ(p.recall, 0.0);
    assert_int_equal(p.support, 0);
    LF_ASSERT_OK(lf_confusion_average(c, LF_AVERAGE_MACRO, NULL, &p));
    EQ(p.precision, 1.0 / 6.0);
    EQ(p.recall, 1.0 / 6.0);
    EQ(p.f1, 1.0 / 6.0);
    LF_ASSERT_OK(lf_confusion_average(c, LF_AVERAGE_MICRO, NULL, &p));
    EQ(p.f1, 1.0 / 3.0);
    lf_confusion_free(c);
}

static void test_binary(void **state) {
    (void)state;
    const char *gold[] = {"1", "0", "1", "1", "0"}, *pred[] = {"1", "1", "0", "1", "0"};
    lf_confusion *c = make(gold, pred, 5);
    lf_prf p;
    LF_ASSERT_OK(lf_confusion_average(c, LF_AVERAGE_BINARY, "1", &p)); /* tp 2, fp 1, fn 1 */
    EQ(p.precision, 2.0 / 3.0);
    EQ(p.recall, 2.0 / 3.0);
    EQ(p.f1, 2.0 / 3.0);
    assert_int_equal(p.support, 3);
    LF_ASSERT_OK(lf_confusion_average(c, LF_AVERAGE_BINARY, "0", &p)); /* tp 1, fp 1, fn 1 */
    EQ(p.precision, 0.5);
    EQ(p.recall, 0.5);
    assert_int_equal(lf_confusion_average(c, LF_AVERAGE_BINARY, "yes", &p), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS("positive label 'yes' is not one of the labels '0', '1'");
    assert_int_equal(lf_confusion_average(c, LF_AVERAGE_BINARY, NULL, &p), LF_ERR_INVALID_ARG);
    lf_confusion_free(c);
    /* one label only, positive label absent: everything 0, as scikit-learn */
    const char *g1[] = {"neg", "neg"};
    c = make(g1, g1, 2);
    LF_ASSERT_OK(lf_confusion_average(c, LF_AVERAGE_BINARY, "pos", &p));
    EQ(p.f1, 0.0);
    assert_int_equal(p.support, 0);
    lf_confusion_free(c);
}

static void test_errors(void **state) {
    (void)state;
    lf_confusion *c;
    LF_ASSERT_OK(lf_confusion_create(&c));
    double acc;
    lf_prf p;
    assert_int_equal(lf_confusion_accuracy(c, &acc), LF_ERR_INVALID_ARG);
    assert_int_equal(lf_confusion_average(c, LF_AVERAGE_MACRO, NULL, &p), LF_ERR_INVALID_ARG);
    assert_int_equal(lf_confusion_add(c, "ok", "bad \xC3"), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("predicted label: invalid UTF-8 at byte 4");
    assert_int_equal(lf_confusion_add(c, NULL, "x"), LF_ERR_INVALID_ARG);
    assert_int_equal(lf_confusion_total(c), 0);
    /* Unicode labels sort by code point (UTF-8 byte order) */
    LF_ASSERT_OK(lf_confusion_add(c, "\xC3\xA9t\xC3\xA9", "z"));
    LF_ASSERT_OK(lf_confusion_add(c, "Z", "a"));
    assert_string_equal(lf_confusion_label(c, 0), "Z");
    assert_string_equal(lf_confusion_label(c, 1), "a");
    assert_string_equal(lf_confusion_label(c, 2), "z");
    assert_string_equal(lf_confusion_label(c, 3), "\xC3\xA9t\xC3\xA9");
    lf_confusion_free(c);
    lf_confusion_free(NULL);
}

static void test_many_labels(void **state) {
    (void)state;
    lf_confusion *c;
    LF_ASSERT_OK(lf_confusion_create(&c));
    char g[32], q[32];
    for (int i = 0; i < 3000; i++) {
        snprintf(g, sizeof g, "label%05d", (i * 7919) % 3000);
        snprintf(q, sizeof q, "label%05d", (i * 7919 + (i % 3 == 0)) % 3000);
        LF_ASSERT_OK(lf_confusion_add(c, g, q));
    }
    assert_int_equal(lf_confusion_num_labels(c), 3000);
    for (size_t i = 1; i < 3000; i++) assert_true(strcmp(lf_confusion_label(c, i - 1), lf_confusion_label(c, i)) < 0);
    double acc;
    LF_ASSERT_OK(lf_confusion_accuracy(c, &acc));
    EQ(acc, 2000.0 / 3000.0);
    lf_confusion_free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_multiclass), cmocka_unit_test(test_absent_classes), cmocka_unit_test(test_binary),
        cmocka_unit_test(test_errors),     cmocka_unit_test(test_many_labels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
