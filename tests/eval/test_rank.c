/* Hits@N, MRR and mean rank by hand: ties under the pessimistic, optimistic
 * and average policies, several gold candidates, the filtered setting, and
 * bad input. */
#include "test_util.h"
#include "llmforge/eval.h"

#define EQ(a, b) assert_true(fabs((a) - (b)) < 1e-15)

static double rank_of(const double *s, size_t n, const size_t *g, size_t ng, const size_t *f, size_t nf,
                      lf_tie_policy t) {
    double r;
    LF_ASSERT_OK(lf_rank_query(s, n, g, ng, f, nf, t, &r));
    return r;
}

static void test_ties_and_filter(void **state) {
    (void)state;
    const double s[] = {0.9, 0.5, 0.9, 0.9, 0.1};
    const size_t g0[] = {0}, g13[] = {1, 3}, g4[] = {4}, f2[] = {2};
    /* gold 0 (0.9) ties with candidates 2 and 3 */
    EQ(rank_of(s, 5, g0, 1, NULL, 0, LF_TIES_PESSIMISTIC), 3.0);
    EQ(rank_of(s, 5, g0, 1, NULL, 0, LF_TIES_OPTIMISTIC), 1.0);
    EQ(rank_of(s, 5, g0, 1, NULL, 0, LF_TIES_AVERAGE), 2.0);
    /* filtered: candidate 2 is another true answer and leaves the ranking */
    EQ(rank_of(s, 5, g0, 1, f2, 1, LF_TIES_PESSIMISTIC), 2.0);
    EQ(rank_of(s, 5, g0, 1, f2, 1, LF_TIES_OPTIMISTIC), 1.0);
    EQ(rank_of(s, 5, g0, 1, f2, 1, LF_TIES_AVERAGE), 1.5);
    /* several gold: the best of them (candidate 3, 0.9) against 0 and 2 */
    EQ(rank_of(s, 5, g13, 2, NULL, 0, LF_TIES_PESSIMISTIC), 3.0);
    EQ(rank_of(s, 5, g13, 2, NULL, 0, LF_TIES_OPTIMISTIC), 1.0);
    /* a gold index listed as filtered stays gold */
    const size_t f0[] = {0};
    EQ(rank_of(s, 5, g0, 1, f0, 1, LF_TIES_PESSIMISTIC), 3.0);
    /* worst candidate: no ties, same rank under every policy */
    for (int t = 0; t < 3; t++) EQ(rank_of(s, 5, g4, 1, NULL, 0, (lf_tie_policy)t), 5.0);
    /* the order of candidates does not matter */
    const double s2[] = {0.9, 0.9, 0.1, 0.5, 0.9};
    const size_t g4b[] = {4};
    EQ(rank_of(s2, 5, g4b, 1, NULL, 0, LF_TIES_PESSIMISTIC), 3.0);
    EQ(rank_of(s2, 5, g4b, 1, NULL, 0, LF_TIES_OPTIMISTIC), 1.0);
}

static void test_hits_mrr(void **state) {
    (void)state;
    const double s[] = {0.9, 0.5, 0.9, 0.9, 0.1};
    const size_t g0[] = {0}, g13[] = {1, 3}, g4[] = {4}, f2[] = {2};
    const long ks[] = {1, 2, 3, 10};
    lf_ranking pes, avg;
    LF_ASSERT_OK(lf_ranking_init(&pes, ks, 4));
    LF_ASSERT_OK(lf_ranking_init(&avg, ks, 4));
    struct {
        const size_t *g;
        size_t ng;
        const size_t *f;
        size_t nf;
    } q[] = {{g0, 1, NULL, 0}, {g0, 1, f2, 1}, {g13, 2, NULL, 0}, {g4, 1, NULL, 0}};
    for (size_t i = 0; i < 4; i++) {
        LF_ASSERT_OK(lf_ranking_add(&pes, rank_of(s, 5, q[i].g, q[i].ng, q[i].f, q[i].nf, LF_TIES_PESSIMISTIC)));
        LF_ASSERT_OK(lf_ranking_add(&avg, rank_of(s, 5, q[i].g, q[i].ng, q[i].f, q[i].nf, LF_TIES_AVERAGE)));
    }
    double hits[4], mrr, mr;
    /* pessimistic ranks 3, 2, 3, 5 */
    LF_ASSERT_OK(lf_ranking_result(&pes, hits, &mrr, &mr));
    EQ(hits[0], 0.0);
    EQ(hits[1], 0.25);
    EQ(hits[2], 0.75);
    EQ(hits[3], 1.0);
    EQ(mrr, (1.0 / 3 + 1.0 / 2 + 1.0 / 3 + 1.0 / 5) / 4);
    EQ(mr, 13.0 / 4);
    /* average ranks 2, 1.5, 2, 5: Hits@1 0 (1.5 > 1), Hits@2 3/4 */
    LF_ASSERT_OK(lf_ranking_result(&avg, hits, &mrr, NULL));
    EQ(hits[0], 0.0);
    EQ(hits[1], 0.75);
    EQ(hits[2], 0.75);
    EQ(mrr, (1.0 / 2 + 1.0 / 1.5 + 1.0 / 2 + 1.0 / 5) / 4);
}

static void test_rank_errors(void **state) {
    (void)state;
    const double s[] = {0.3, NAN, 0.1};
    const size_t g0[] = {0}, g9[] = {9};
    double r;
    assert_int_equal(lf_rank_query(s, 3, g0, 1, NULL, 0, LF_TIES_PESSIMISTIC, &r), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS("NaN");
    const double ok[] = {0.3, 0.2, 0.1};
    assert_int_equal(lf_rank_query(ok, 3, g9, 1, NULL, 0, LF_TIES_PESSIMISTIC, &r), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("gold index 9, but only 3 candidates");
    assert_int_equal(lf_rank_query(ok, 3, g0, 1, g9, 1, LF_TIES_PESSIMISTIC, &r), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("filtered index 9");
    assert_int_equal(lf_rank_query(ok, 3, g0, 0, NULL, 0, LF_TIES_PESSIMISTIC, &r), LF_ERR_INVALID_ARG);
    assert_int_equal(lf_rank_query(ok, 3, g0, 1, NULL, 0, (lf_tie_policy)7, &r), LF_ERR_INVALID_ARG);
    lf_ranking k;
    const long bad[] = {0};
    assert_int_equal(lf_ranking_init(&k, bad, 1), LF_ERR_RANGE);
    LF_ASSERT_OK(lf_ranking_init(&k, NULL, 0));
    assert_int_equal(lf_ranking_result(&k, NULL, &r, NULL), LF_ERR_INVALID_ARG);
    assert_int_equal(lf_ranking_add(&k, 0.5), LF_ERR_RANGE);
    assert_int_equal(lf_ranking_add(&k, NAN), LF_ERR_RANGE);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ties_and_filter),
        cmocka_unit_test(test_hits_mrr),
        cmocka_unit_test(test_rank_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
