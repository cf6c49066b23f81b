/* lf_sample_token and its validation (src/infer/sample.c):
 *  - lf_sample_check names the bad field; the sampler returns -1 on what it
 *    rejects (never crashes);
 *  - greedy: argmax, lowest id on ties, NaN never chosen;
 *  - top_k = 1 and a tiny top_p are greedy at any temperature;
 *  - top_p = 1 draws exactly the token lf_generate's sampler drew before
 *    top_p existed (a copy of that loop below), for many seeds, steps,
 *    temperatures and top_k (ties at the k-th value included);
 *  - the nucleus on hand-worked rows (HF TopPLogitsWarper's rule, ties by id);
 *  - top_p < 1 on GPT-2-sized rows (V 50257, flat and peaked) draws exactly
 *    what sorting every token and a running sum give (the radix select
 *    finds the same nucleus edge);
 *  - empirical frequencies over many steps against the truncated,
 *    renormalised distribution computed independently in double: excluded
 *    tokens never drawn, and Pearson's chi-square below its 1e-6 quantile
 *    for the sample size (Wilson-Hilferty). */
#include "test_util.h"
#include "llmforge/infer.h"

/* ------------------------------------------------------------- validation */

static void test_checks(void **state) {
    (void)state;
    LF_ASSERT_OK(lf_sample_check(10, 0.0f, 0, 1.0f));
    LF_ASSERT_OK(lf_sample_check(1, 2.5f, 3, 0.01f));
    assert_int_equal(lf_sample_check(0, 1.0f, 0, 1.0f), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("vocab_size 0");
    assert_int_equal(lf_sample_check(10, -1.0f, 0, 1.0f), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("temperature -1");
    assert_int_equal(lf_sample_check(10, NAN, 0, 1.0f), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("temperature");
    assert_int_equal(lf_sample_check(10, INFINITY, 0, 1.0f), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("temperature");
    assert_int_equal(lf_sample_check(10, 1.0f, -2, 1.0f), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("top_k -2");
    const float bad_p[] = {0.0f, -0.5f, 1.0001f, NAN, INFINITY};
    for (size_t i = 0; i < sizeof bad_p / sizeof bad_p[0]; i++) {
        assert_int_equal(lf_sample_check(10, 1.0f, 0, bad_p[i]), LF_ERR_RANGE);
        LF_ASSERT_ERR_CONTAINS("top_p");
    }

    /* the sampler refuses what the check refuses, without crashing */
    float logits[4] = {1, 2, 3, 4}, work[4];
    int iwork[4];
    assert_int_equal(lf_sample_token(logits, 0, 1.0f, 0, 1.0f, 1, 0, work, iwork), -1);
    assert_int_equal(lf_sample_token(NULL, 4, 1.0f, 0, 1.0f, 1, 0, work, iwork), -1);
    assert_int_equal(lf_sample_token(logits, 4, NAN, 0, 1.0f, 1, 0, work, iwork), -1);
    assert_int_equal(lf_sample_token(logits, 4, 1.0f, -1, 1.0f, 1, 0, work, iwork), -1);
    assert_int_equal(lf_sample_token(logits, 4, 1.0f, 0, 0.0f, 1, 0, work, iwork), -1);
    assert_int_equal(lf_sample_token(logits, 4, 1.0f, 0, 1.5f, 1, 0, work, iwork), -1);
    assert_int_equal(lf_sample_token(logits, 4, 1.0f, 0, NAN, 1, 0, work, iwork), -1);
    assert_int_equal(lf_sample_token(logits, 4, 1.0f, 0, 1.0f, 1, 0, NULL, iwork), -1);
    assert_int_equal(lf_sample_token(logits, 4, 1.0f, 0, 1.0f, 1, 0, work, NULL), -1);
}

/* ------------------------------------------------------------- greedy */

static void test_argmax(void **state) {
    (void)state;
    const float a[] = {1, 5, 3, 5, -INFINITY, 2};
    assert_int_equal(lf_sample_token(a, 6, 0.0f, 0, 1.0f, 1, 0, NULL, NULL), 1); /* lowest id of the tie */
    assert_int_equal(lf_sample_token(a, 6, -1.0f, 0, 1.0f, 1, 0, NULL, NULL), 1); /* <= 0: greedy */
    const float b[] = {NAN, -3, NAN, -1, -2};
    assert_int_equal(lf_sample_token(b, 5, 0.0f, 0, 1.0f, 1, 0, NULL, NULL), 3);
    const float c[] = {NAN, NAN};
    assert_int_equal(lf_sample_token(c, 2, 0.0f, 0, 1.0f, 1, 0, NULL, NULL), 0);
    const float d[] = {-INFINITY, -INFINITY, -INFINITY};
    assert_int_equal(lf_sample_token(d, 3, 0.0f, 0, 1.0f, 1, 0, NULL, NULL), 0);
    const float e[] = {7};
    assert_int_equal(lf_sample_token(e, 1, 0.0f, 0, 1.0f, 1, 0, NULL, NULL), 0);
    float work[6];
    int iwork[6];
    assert_int_equal(lf_sample_token(e, 1, 1.3f, 0, 0.5f, 1, 0, work, iwork), 0);
    /* non-finite logits when sampling: +inf wins, NaN never drawn, all -inf -> lowest id */
    const float f[] = {0, INFINITY, 3, INFINITY};
    for (uint64_t s = 0; s < 20; s++) assert_int_equal(lf_sample_token(f, 4, 1.0f, 0, 1.0f, 9, s, work, iwork), 1);
    const float g[] = {NAN, 0.5f, NAN, 0.7f};
    for (uint64_t s = 0; s < 200; s++) {
        const int t = lf_sample_token(g, 4, 1.0f, 0, 0.99f, 9, s, work, iwork);
        assert_true(t == 1 || t == 3);
    }
    assert_int_equal(lf_sample_token(d, 3, 1.0f, 0, 1.0f, 9, 0, work, iwork), 0);
    /* top_k above the number of non-NaN logits keeps those */
    const float h[] = {NAN, 1.0f, 1.5f, NAN, NAN};
    int seen = 0;
    for (uint64_t s = 0; s < 200; s++) {
        const int t = lf_sample_token(h, 5, 1.0f, 4, 1.0f, 9, s, work, iwork);
        assert_true(t == 1 || t == 2);
        seen |= 1 << t;
    }
    assert_int_equal(seen, 6);
}

static float *random_logits(int V, float scale, uint64_t stream) {
    float *l = malloc(sizeof(float) * (size_t)V);
    assert_non_null(l);
    for (int v = 0; v < V; v++) l[v] = scale * lf_rng_normal(stream, LF_RNG_TEST, (uint64_t)v);
    return l;
}

static int argmax(const float *l, int V) {
    int b = 0;
    for (int v = 1; v < V; v++)
        if (l[v] > l[b]) b = v;
    return b;
}

static void test_topk1_and_tiny_top_p_are_greedy(void **state) {
    (void)state;
    const int V = 1000;
    float *l = random_logits(V, 2.0f, 5), *work = malloc(sizeof(float) * V);
    int *iwork = malloc(sizeof(int) * V);
    const int want = argmax(l, V);
    const float temps[] = {0.3f, 1.0f, 3.0f};
    for (int ti = 0; ti < 3; ti++)
        for (uint64_t s = 0; s < 300; s++) {
            assert_int_equal(lf_sample_token(l, V, temps[ti], 1, 1.0f, 42, s, work, iwork), want);
            assert_int_equal(lf_sample_token(l, V, temps[ti], 0, 1e-6f, 42, s, work, iwork), want);
            assert_int_equal(lf_sample_token(l, V, temps[ti], 50, 1e-6f, 42, s, work, iwork), want);
        }
    free(l); free(work); free(iwork);
}

/* ------------------------------------------------------------- top_p = 1 is lf_generate's draw */

static int cmp_desc(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

/* The sampling loop of src/infer/generate.c as it was before top_p (commit
 * ec0f648), copied verbatim but for names: the behaviour top_p = 1 keeps. */
static uint32_t generate_draw(const float *logits, int V, float temperature, int top_k, uint64_t seed,
                              uint64_t pos) {
    float *probs = malloc(sizeof(float) * (size_t)V), *sorted = malloc(sizeof(float) * (size_t)V);
    float thresh = -INFINITY;
    if (top_k > 0 && top_k < V) {
        for (int v = 0; v < V; v++) sorted[v] = logits[v];
        qsort(sorted, (size_t)V, sizeof(float), cmp_desc);
        thresh = sorted[top_k - 1];
    }
    float mx = -INFINITY;
    for (int v = 0; v < V; v++)
        if (logits[v] >= thresh && logits[v] > mx) mx = logits[v];
    double sum = 0;
    for (int v = 0; v < V; v++) {
        probs[v] = logits[v] >= thresh ? expf((logits[v] - mx) / temperature) : 0.0f;
        sum += probs[v];
    }
    double r = (double)lf_rng_uniform(seed, LF_RNG_SAMPLE, pos) * sum, acc = 0;
    uint32_t next = (uint32_t)(V - 1);
    for (int v = 0; v < V; v++) {
        acc += probs[v];
        if (probs[v] > 0 && r < acc) {
            next = (uint32_t)v;
            break;
        }
    }
    while (probs[next] == 0.0f && next > 0) next--;
    free(probs);
    free(sorted);
    return next;
}

static void test_top_p_one_is_generate_draw(void **state) {
    (void)state;
    const int Vs[] = {1, 2, 7, 300, 5000};
    const int topks[] = {0, 1, 2, 5, 299, 300, 301};
    const float temps[] = {0.5f, 1.0f, 1.7f};
    for (int vi = 0; vi < 5; vi++) {
        const int V = Vs[vi];
        float *l = random_logits(V, 3.0f, 100 + (uint64_t)vi), *work = malloc(sizeof(float) * V);
        int *iwork = malloc(sizeof(int) * V);
        /* rows with many equal logits too: the k-th value is then shared */
        float *lq = malloc(sizeof(float) * V);
        for (int v = 0; v < V; v++) lq[v] = roundf(l[v]);
        for (int ki = 0; ki < 7; ki++)
            for (int ti = 0; ti < 3; ti++)
                for (uint64_t s = 0; s < (V > 1000 ? 20u : 100u); s++) {
                    const uint64_t seed = 7 + s % 3, pos = s * 13 + 5;
                    assert_int_equal(lf_sample_token(l, V, temps[ti], topks[ki], 1.0f, seed, pos, work, iwork),
                                     (int)generate_draw(l, V, temps[ti], topks[ki], seed, pos));
                    assert_int_equal(lf_sample_token(lq, V, temps[ti], topks[ki], 1.0f, seed, pos, work, iwork),
                                     (int)generate_draw(lq, V, temps[ti], topks[ki], seed, pos));
                }
        free(l); free(lq); free(work); free(iwork);
    }
}

/* ------------------------------------------------------------- the nucleus */

/* The set of tokens drawn over n steps, as a bit mask (V <= 32). */
static uint32_t support(const float *l, int V, float temp, int top_k, float top_p, int n) {
    float work[32];
    int iwork[32];
    uint32_t m = 0;
    for (int s = 0; s < n; s++) {
        const int t = lf_sample_token(l, V, temp, top_k, top_p, 3, (uint64_t)s, work, iwork);
        assert_true(t >= 0 && t < V);
        m |= 1u << t;
    }
    return m;
}

static void test_nucleus_hand_examples(void **state) {
    (void)state;
    /* probabilities 0.05, 0.3, 0.15, 0.5 for ids 0..3 (sorted: 3, 1, 2, 0);
     * keep while the mass before a token is < top_p */
    const float l[] = {logf(0.05f), logf(0.3f), logf(0.15f), logf(0.5f)};
    assert_int_equal(support(l, 4, 1.0f, 0, 0.4f, 3000), 1u << 3);                          /* 0.5 alone */
    assert_int_equal(support(l, 4, 1.0f, 0, 0.51f, 3000), (1u << 3) | (1u << 1));           /* 0 and 0.5 before */
    assert_int_equal(support(l, 4, 1.0f, 0, 0.79f, 3000), (1u << 3) | (1u << 1));
    assert_int_equal(support(l, 4, 1.0f, 0, 0.81f, 3000), (1u << 3) | (1u << 1) | (1u << 2)); /* 0.8 before id 2 */
    assert_int_equal(support(l, 4, 1.0f, 0, 0.96f, 3000), 15u);
    assert_int_equal(support(l, 4, 1.0f, 0, 1.0f, 3000), 15u);
    /* top-k first, then the nucleus of the renormalised top 2: 0.625, 0.375 */
    assert_int_equal(support(l, 4, 1.0f, 2, 1.0f, 3000), (1u << 3) | (1u << 1));
    assert_int_equal(support(l, 4, 1.0f, 2, 0.62f, 3000), 1u << 3);
    assert_int_equal(support(l, 4, 1.0f, 2, 0.63f, 3000), (1u << 3) | (1u << 1));
    /* equal probabilities: ordered by id, so top_p 0.5 of four equal keeps ids 0, 1 */
    const float eq[] = {0.25f, 0.25f, 0.25f, 0.25f};
    assert_int_equal(support(eq, 4, 1.0f, 0, 0.5f, 3000), 3u);
    assert_int_equal(support(eq, 4, 1.0f, 0, 0.51f, 3000), 7u);
    /* temperature reshapes before the nucleus: at T = 0.25 the 0.5 token holds
     * 0.5^4 / (sum of p^4) = 0.88 of the mass */
    assert_int_equal(support(l, 4, 0.25f, 0, 0.85f, 3000), 1u << 3);
    assert_int_equal(support(l, 4, 0.25f, 0, 0.9f, 3000), (1u << 3) | (1u << 1));
}

/* Reference for top_p < 1: every positive token sorted (qsort), the same
 * float probabilities and double sums as the sampler's contract. */
static const float *g_p;
static int cmp_nucleus(const void *a, const void *b) {
    const int x = *(const int *)a, y = *(const int *)b;
    if (g_p[x] != g_p[y]) return g_p[x] > g_p[y] ? -1 : 1;
    return (x > y) - (x < y);
}

static int full_sort_draw(const float *l, int V, float temp, float top_p, uint64_t seed, uint64_t step) {
    float *p = malloc(sizeof(float) * V);
    int *ids = malloc(sizeof(int) * V);
    float mx = -INFINITY;
    for (int v = 0; v < V; v++) mx = l[v] > mx ? l[v] : mx;
    double sum = 0;
    int n = 0;
    for (int v = 0; v < V; v++) {
        p[v] = expf((l[v] - mx) / temp);
        sum += p[v];
        if (p[v] > 0) ids[n++] = v;
    }
    g_p = p;
    qsort(ids, (size_t)n, sizeof(int), cmp_nucleus);
    double before = 0;
    int m = 0;
    while (m < n && (m == 0 || before < (double)top_p * sum)) before += p[ids[m++]];
    for (int i = m; i < n; i++) p[ids[i]] = 0.0f;
    sum = 0;
    for (int v = 0; v < V; v++) sum += p[v];
    const double r = (double)lf_rng_uniform(seed, LF_RNG_SAMPLE, step) * sum;
    double acc = 0;
    int next = V - 1;
    for (int v = 0; v < V; v++) {
        acc += p[v];
        if (p[v] > 0 && r < acc) {
            next = v;
            break;
        }
    }
    while (p[next] == 0.0f && next > 0) next--;
    free(p);
    free(ids);
    return next;
}

static void test_nucleus_equals_full_sort(void **state) {
    (void)state;
    const int V = 50257;
    float *work = malloc(sizeof(float) * V);
    int *iwork = malloc(sizeof(int) * V);
    const float scales[] = {0.3f, 2.0f, 6.0f}; /* nearly flat (most tokens candidates) to peaked */
    const float tops[] = {0.1f, 0.5f, 0.9f, 0.999f};
    for (int si = 0; si < 3; si++) {
        float *l = random_logits(V, scales[si], 200 + (uint64_t)si);
        for (int ti = 0; ti < 4; ti++)
            for (uint64_t s = 0; s < 4; s++)
                assert_int_equal(lf_sample_token(l, V, 1.0f, 0, tops[ti], 11, s, work, iwork),
                                 full_sort_draw(l, V, 1.0f, tops[ti], 11, s));
        free(l);
    }
    free(work);
    free(iwork);
}

/* ------------------------------------------------------------- frequencies */

typedef struct ref_pair {
    double p;
    int id;
} ref_pair;
static int cmp_pair(const void *a, const void *b) {
    const ref_pair *x = a, *y = b;
    if (x->p != y->p) return x->p > y->p ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* The truncated, renormalised distribution in double: top-k by value (ties
 * at the k-th kept), softmax(l / temp), nucleus. *gap: the smallest distance
 * of top_p from a cumulative mass at the nucleus's edge. The sampler's
 * float probabilities are within ~1e-6 relative of these (expf's 2 ulp,
 * the division by the temperature, the double sums), so its cumulative
 * masses are within ~1e-6 of these: a case with a gap above 1e-5 has the
 * same nucleus in both, and freq_case refuses one closer to the edge. */
static void ref_dist(const float *l, int V, double temp, int top_k, double top_p, double *q, double *gap) {
    ref_pair *s = malloc(sizeof(ref_pair) * V);
    for (int v = 0; v < V; v++) s[v] = (ref_pair){l[v], v};
    qsort(s, (size_t)V, sizeof *s, cmp_pair);
    const double thresh = top_k > 0 && top_k < V ? s[top_k - 1].p : -INFINITY;
    const double mx = s[0].p;
    double sum = 0;
    for (int v = 0; v < V; v++) sum += (q[v] = l[v] >= thresh ? exp((l[v] - mx) / temp) : 0.0);
    for (int v = 0; v < V; v++) s[v] = (ref_pair){q[v] /= sum, v};
    qsort(s, (size_t)V, sizeof *s, cmp_pair);
    double before = 0;
    int m = 0;
    *gap = INFINITY;
    while (m < V && s[m].p > 0 && (m == 0 || before < top_p)) before += s[m++].p;
    if (m > 0) *gap = fabs(before - s[m - 1].p - top_p);
    if (m < V && s[m].p > 0) *gap = fmin(*gap, fabs(before - top_p));
    for (int i = m; i < V; i++) q[s[i].id] = 0;
    double kept = 0;
    for (int v = 0; v < V; v++) kept += q[v];
    for (int v = 0; v < V; v++) q[v] /= kept;
    free(s);
}

/* Upper 1e-6 quantile of chi-square with df degrees of freedom
 * (Wilson-Hilferty; z = 4.753 is the standard normal's 1e-6 quantile). */
static double chi2_quantile_1e6(int df) {
    const double z = 4.753, a = 2.0 / (9.0 * df);
    return df * pow(1.0 - a + z * sqrt(a), 3.0);
}

static void freq_case(int V, float temp, int top_k, float top_p, float scale, uint64_t stream) {
    float *l = random_logits(V, scale, stream), *work = malloc(sizeof(float) * V);
    int *iwork = malloc(sizeof(int) * V);
    double *q = malloc(sizeof(double) * V), gap;
    long *count = calloc((size_t)V, sizeof(long));
    ref_dist(l, V, temp, top_k, top_p, q, &gap);
    if (top_p < 1.0f && !(gap > 1e-5))
        fail_msg("V %d top_k %d top_p %g stream %d: too close to the nucleus edge (gap %g)", V, top_k, top_p,
                 (int)stream, gap);
    const long N = 200000;
    for (long s = 0; s < N; s++) {
        const int t = lf_sample_token(l, V, temp, top_k, top_p, 1234, (uint64_t)s, work, iwork);
        assert_true(t >= 0 && t < V);
        count[t]++;
    }
    double chi2 = 0;
    int m = 0;
    for (int v = 0; v < V; v++) {
        if (q[v] == 0) {
            if (count[v]) fail_msg("token %d is outside the kept set but was drawn %ld times", v, count[v]);
            continue;
        }
        m++;
        const double e = (double)N * q[v];
        chi2 += ((double)count[v] - e) * ((double)count[v] - e) / e;
    }
    if (m > 1) {
        const double lim = chi2_quantile_1e6(m - 1);
        if (!(chi2 < lim))
            fail_msg("V %d T %g top_k %d top_p %g: chi-square %.1f over %d tokens exceeds %.1f", V, temp, top_k,
                     top_p, chi2, m, lim);
    }
    free(l); free(work); free(iwork); free(q); free(count);
}

static void test_frequencies(void **state) {
    (void)state;
    freq_case(50, 1.0f, 0, 1.0f, 1.0f, 300);   /* plain softmax */
    freq_case(50, 0.7f, 20, 1.0f, 1.5f, 301);  /* top-k */
    freq_case(50, 1.0f, 0, 0.8f, 1.5f, 302);   /* nucleus */
    freq_case(50, 1.3f, 30, 0.6f, 2.0f, 303);  /* both */
    freq_case(400, 1.0f, 0, 0.95f, 1.0f, 304); /* wide nucleus, small expected counts in its tail */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_checks),
        cmocka_unit_test(test_argmax),
        cmocka_unit_test(test_topk1_and_tiny_top_p_are_greedy),
        cmocka_unit_test(test_top_p_one_is_generate_draw),
        cmocka_unit_test(test_nucleus_hand_examples),
        cmocka_unit_test(test_nucleus_equals_full_sort),
        cmocka_unit_test(test_frequencies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
