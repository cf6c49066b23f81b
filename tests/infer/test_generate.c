/*
 * KV-cache generation against the uncached path, for both architectures:
 *  - a cached prefill of the first n-1 tokens and a one-token decode give the
 *    last position's logits of a full forward over all n tokens, within 1e-5
 *    of the largest logit (the attention sums the same terms in another
 *    order: fp32 rounding of dot products over <= 64 terms, ~1e-6 relative);
 *  - chunked decoding (several rows at pos0 > 0) agrees the same way;
 *  - greedy generation with and without the cache gives the same tokens,
 *    also past block_size (the crop re-fills the cache);
 *  - sessions leave the model's own activation plan alone;
 *  - bad arguments (cache overflow, top_p out of range) are refused.
 * Weights: the architecture's init scaled up (x4) so that logits are peaked
 * and greedy choices are far from ties.
 */
#include "test_util.h"
#include "llmforge/infer.h"
#include "llmforge/model.h"

static lf_model *make(lf_arch arch) {
    lf_model_config c = {.arch = arch, .n_layer = 2, .n_head = 4, .n_embd = 64, .block_size = 48, .vocab_size = 61,
                         .bias = arch == LF_ARCH_GPT2, .tie_embeddings = 1};
    if (arch == LF_ARCH_LLAMA) {
        c.n_kv_head = 2; /* GQA */
        c.tie_embeddings = 0;
    }
    lf_model *m = NULL;
    LF_ASSERT_OK(lf_model_create(&m, &c, lf_backend_get("cpu")));
    LF_ASSERT_OK(lf_model_init_weights(m, 7));
    float *p = lf_model_params(m);
    for (size_t i = 0; i < lf_model_num_params(m); i++) p[i] *= 4.0f; /* CPU backend: host memory */
    return m;
}

static void tokens(int32_t *t, int n, uint64_t seed, int V) {
    for (int i = 0; i < n; i++) t[i] = (int32_t)(lf_rng_u64(seed, LF_RNG_BENCH, (uint64_t)i) % (uint64_t)V);
}

static double max_abs(const float *x, int n) {
    double m = 0;
    for (int i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

static void cached_logits_case(lf_arch arch) {
    lf_model *m = make(arch);
    const lf_model_config *c = lf_model_get_config(m);
    const int V = c->vocab_size, n = 40;
    int32_t t[64];
    tokens(t, n, 3, V);
    lf_session *full = NULL, *kv = NULL;
    LF_ASSERT_OK(lf_session_create(&full, m, 1, c->block_size, 0));
    LF_ASSERT_OK(lf_session_create(&kv, m, 1, c->block_size, 1));
    assert_true(lf_session_has_cache(kv));
    LF_ASSERT_OK(lf_session_forward(full, t, 1, n, 0));
    float *ref = malloc(sizeof(float) * (size_t)n * V);
    for (int i = 0; i < n; i++) memcpy(ref + (size_t)i * V, lf_session_logits(full) + (size_t)i * V, sizeof(float) * V);
    /* prefill n-1, decode the last */
    LF_ASSERT_OK(lf_session_forward(kv, t, 1, n - 1, 1));
    assert_int_equal(lf_session_pos(kv), n - 1);
    LF_ASSERT_OK(lf_session_forward(kv, t + n - 1, 1, 1, 1));
    const float *last = ref + (size_t)(n - 1) * V;
    double err = lf_test_max_rel_err(lf_session_logits(kv), last, (size_t)V, max_abs(last, V));
    printf("%s: decoded last-token logits vs full forward: %.3g (of the largest logit)\n", lf_arch_name(c->arch), err);
    assert_true(err <= 1e-5);
    /* again in chunks: 17 rows, then 9, 1, 13 */
    lf_session_reset(kv);
    const int chunk[4] = {17, 9, 1, 13};
    int at = 0;
    for (int k = 0; k < 4; k++) {
        LF_ASSERT_OK(lf_session_forward(kv, t + at, 1, chunk[k], 1));
        for (int r = 0; r < chunk[k]; r++) {
            const float *want = ref + (size_t)(at + r) * V;
            err = lf_test_max_rel_err(lf_session_logits(kv) + (size_t)r * V, want, (size_t)V, max_abs(want, V));
            if (!(err <= 1e-5)) fail_msg("%s: chunked decode, position %d: %.3g", lf_arch_name(c->arch), at + r, err);
        }
        at += chunk[k];
    }
    assert_int_equal(at, n);
    /* a full cache refuses more (reset starts over) */
    LF_ASSERT_OK(lf_session_forward(kv, t, 1, c->block_size - n, 1));
    assert_int_equal(lf_session_forward(kv, t, 1, 1, 1), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("lf_session_reset");
    lf_session_reset(kv);
    LF_ASSERT_OK(lf_session_forward(kv, t, 1, 1, 1));
    free(ref);
    lf_session_free(full);
    lf_session_free(kv);
    lf_model_free(m);
}

static void test_cached_logits_gpt2(void **state) {
    (void)state;
    cached_logits_case(LF_ARCH_GPT2);
}
static void test_cached_logits_llama(void **state) {
    (void)state;
    cached_logits_case(LF_ARCH_LLAMA);
}

static void greedy_case(lf_arch arch) {
    lf_model *m = make(arch);
    const lf_model_config *c = lf_model_get_config(m);
    int32_t t[8];
    tokens(t, 8, 5, c->vocab_size);
    uint32_t prompt[8];
    for (int i = 0; i < 8; i++) prompt[i] = (uint32_t)t[i];
    /* the model has a training plan of its own: sessions must leave it alone */
    LF_ASSERT_OK(lf_model_plan(m, 3, 16, NULL));
    lf_act_bytes before, after;
    lf_model_activation_bytes(m, &before);
    const int n_new = 2 * c->block_size; /* well past block_size: the crop */
    lf_sample_opts a = {.max_new_tokens = n_new, .temperature = 0.0f, .seed = 1};
    lf_sample_opts b = a;
    b.no_cache = 1;
    uint32_t *oa = NULL, *ob = NULL;
    size_t na = 0, nb = 0;
    LF_ASSERT_OK(lf_generate(m, prompt, 8, &a, NULL, NULL, &oa, &na));
    LF_ASSERT_OK(lf_generate(m, prompt, 8, &b, NULL, NULL, &ob, &nb));
    assert_int_equal(na, (size_t)n_new);
    assert_int_equal(nb, (size_t)n_new);
    int distinct = 0;
    for (size_t i = 0; i < na; i++) {
        if (oa[i] != ob[i]) fail_msg("%s: greedy token %zu differs: cache %u, no cache %u", lf_arch_name(c->arch), i,
                                     oa[i], ob[i]);
        distinct |= oa[i] != oa[0];
    }
    assert_true(distinct); /* not a degenerate constant sequence */
    lf_model_activation_bytes(m, &after);
    assert_int_equal(before.total, after.total);
    /* sampling is reproducible in the seed, with and without the cache */
    lf_sample_opts s1 = {.max_new_tokens = 30, .temperature = 1.0f, .top_k = 20, .top_p = 0.9f, .seed = 11};
    lf_sample_opts s2 = s1;
    s2.no_cache = 1;
    lf_free(oa);
    lf_free(ob);
    LF_ASSERT_OK(lf_generate(m, prompt, 8, &s1, NULL, NULL, &oa, &na));
    LF_ASSERT_OK(lf_generate(m, prompt, 8, &s2, NULL, NULL, &ob, &nb));
    assert_memory_equal(oa, ob, sizeof(uint32_t) * na);
    /* bad options name the field */
    lf_sample_opts bad = a;
    bad.top_p = 1.5f;
    lf_free(oa);
    assert_int_equal(lf_generate(m, prompt, 8, &bad, NULL, NULL, &oa, &na), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("top_p");
    lf_free(oa);
    lf_free(ob);
    lf_model_free(m);
}

static void test_greedy_gpt2(void **state) {
    (void)state;
    greedy_case(LF_ARCH_GPT2);
}
static void test_greedy_llama(void **state) {
    (void)state;
    greedy_case(LF_ARCH_LLAMA);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cached_logits_gpt2),
        cmocka_unit_test(test_cached_logits_llama),
        cmocka_unit_test(test_greedy_gpt2),
        cmocka_unit_test(test_greedy_llama),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
