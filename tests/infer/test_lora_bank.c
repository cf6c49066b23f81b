/*
 * Serving several LoRA adapters on one base (lf_model_lora_bank_add): one
 * ragged forward over three runs, one with adapter A (all-linear, r 4), one
 * with no adapter, one with adapter B (a few modules, r 2), then a decode
 * step of one token each, gives row by row the logits of each sequence run
 * alone on base + A merged, on the base, and on base + B merged (every row,
 * every_row = 1), for both architectures. The adapters are random and
 * nonzero (B ~ 0.3 uniform) and change the logits by far more than the
 * tolerance (checked).
 *
 * Error model: the banked path adds s (x A^T) B^T to x W, the merged model
 * computes x (W + s B A) with W + s B A rounded to fp32: per product the two
 * differ by a few K u max|x||W| (K <= 4C = 256 terms, u = 2^-24: 3 K u
 * ~ 4.6e-5 relative), carried through two blocks and the head, whose norms
 * keep it relative; rows of different runs never mix. Bound: 5e-5 of the
 * largest logit (seen: ~1e-5 of it at most).
 */
#include "test_util.h"
#include "llmforge/model.h"

enum { CTX = 32, NRUN = 3 };
static const int LEN[NRUN] = {5, 7, 4};
static const int ADAPTER[NRUN] = {1, 0, 2};

static lf_model_config config(lf_arch arch) {
    lf_model_config c = {.arch = arch, .n_layer = 2, .n_head = 4, .n_embd = 64, .block_size = CTX, .vocab_size = 61,
                         .bias = arch == LF_ARCH_GPT2, .tie_embeddings = 1};
    if (arch == LF_ARCH_LLAMA) {
        c.n_kv_head = 2;
        c.tie_embeddings = 0;
    }
    return c;
}

static lf_model *base(lf_arch arch) {
    lf_model_config c = config(arch);
    lf_model *m = NULL;
    LF_ASSERT_OK(lf_model_create(&m, &c, lf_backend_get("cpu")));
    LF_ASSERT_OK(lf_model_init_weights(m, 11));
    float *p = lf_model_params(m);
    for (size_t i = 0; i < lf_model_num_params(m); i++) p[i] *= 3.0f; /* CPU backend: host memory */
    return m;
}

static lf_lora_config lora(lf_arch arch, int which) {
    lf_lora_config lc = lf_lora_config_default();
    lc.r = which == 1 ? 4 : 2;
    lc.alpha = which == 1 ? 8.0f : 3.0f;
    snprintf(lc.target_modules, sizeof lc.target_modules, "%s",
             which == 1 ? "all-linear" : arch == LF_ARCH_GPT2 ? "c_attn c_fc" : "q_proj v_proj down_proj");
    return lc;
}

/* Attach adapter `which` to m with random nonzero A and B (host memory). */
static void attach(lf_model *m, lf_arch arch, int which) {
    lf_lora_config lc = lora(arch, which);
    LF_ASSERT_OK(lf_model_lora_attach(m, &lc, 5 + (uint64_t)which));
    float *p = lf_model_train_params(m);
    for (size_t i = 0; i < lf_model_train_num_params(m); i++)
        p[i] = 0.6f * (lf_rng_uniform(77 + (uint64_t)which, LF_RNG_BENCH, i) - 0.5f);
}

/* The base with adapter `which` merged in (0: the base), no adapters attached. */
static lf_model *merged(lf_arch arch, int which) {
    lf_model *b = base(arch);
    if (!which) return b;
    lf_model *t = base(arch);
    attach(t, arch, which);
    LF_ASSERT_OK(lf_model_lora_merge(t));
    memcpy(lf_model_params(b), lf_model_params(t), lf_model_num_params(b) * sizeof(float));
    lf_model_params_changed(b);
    lf_model_free(t);
    return b;
}

static void tokens(int q, int n, int V, int32_t *t) {
    for (int i = 0; i < n; i++) t[i] = (int32_t)(lf_rng_u64(300 + (uint64_t)q, LF_RNG_BENCH, (uint64_t)i) % (uint64_t)V);
}

static double max_abs(const float *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

static void run_case(lf_arch arch) {
    const lf_model_config *c0 = NULL;
    lf_model *m = base(arch);
    c0 = lf_model_get_config(m);
    const int V = c0->vocab_size, Vp = c0->padded_vocab_size > 0 ? c0->padded_vocab_size : V;
    int idx = 0;
    attach(m, arch, 1);
    LF_ASSERT_OK(lf_model_lora_bank_add(m, &idx));
    assert_int_equal(idx, 1);
    assert_null(lf_model_lora(m));
    attach(m, arch, 2);
    LF_ASSERT_OK(lf_model_lora_bank_add(m, &idx));
    assert_int_equal(idx, 2);
    assert_int_equal(lf_model_lora_bank_count(m), 2);

    /* each sequence: LEN[q] prompt tokens then one more token (a decode step) */
    int32_t seq[NRUN][CTX];
    for (int q = 0; q < NRUN; q++) tokens(q, LEN[q] + 1, V, seq[q]);
    lf_session *s;
    LF_ASSERT_OK(lf_session_create(&s, m, NRUN, CTX, 1));
    int32_t in[CTX];
    lf_segment g[NRUN];
    int n = 0;
    for (int q = 0; q < NRUN; q++) {
        memcpy(in + n, seq[q], sizeof(int32_t) * (size_t)LEN[q]);
        g[q] = (lf_segment){.slot = q, .pos = 0, .len = LEN[q], .every_row = 1, .adapter = ADAPTER[q]};
        n += LEN[q];
    }
    float *got = malloc(sizeof(float) * (size_t)(n + NRUN) * Vp);
    LF_ASSERT_OK(lf_session_forward_ragged(s, in, g, NRUN));
    LF_ASSERT_OK(lf_session_copy_logits(s, 0, (size_t)n, got));
    for (int q = 0; q < NRUN; q++) { /* the decode step, runs in another order */
        const int r = NRUN - 1 - q;
        in[q] = seq[r][LEN[r]];
        g[q] = (lf_segment){.slot = r, .pos = LEN[r], .len = 1, .every_row = 0, .adapter = ADAPTER[r]};
    }
    LF_ASSERT_OK(lf_session_forward_ragged(s, in, g, NRUN));
    LF_ASSERT_OK(lf_session_copy_logits(s, 0, NRUN, got + (size_t)n * Vp));
    lf_session_free(s);

    int row = 0;
    float *want = malloc(sizeof(float) * (size_t)CTX * Vp), *plain = malloc(sizeof(float) * (size_t)CTX * Vp);
    lf_model *b0 = base(arch);
    for (int q = 0; q < NRUN; q++) {
        lf_model *r = merged(arch, ADAPTER[q]);
        lf_session *rs, *bs;
        const int T = LEN[q] + 1;
        LF_ASSERT_OK(lf_session_create(&rs, r, 1, CTX, 0));
        LF_ASSERT_OK(lf_session_forward(rs, seq[q], 1, T, 0));
        LF_ASSERT_OK(lf_session_copy_logits(rs, 0, (size_t)T, want));
        LF_ASSERT_OK(lf_session_create(&bs, b0, 1, CTX, 0));
        LF_ASSERT_OK(lf_session_forward(bs, seq[q], 1, T, 0));
        LF_ASSERT_OK(lf_session_copy_logits(bs, 0, (size_t)T, plain));
        const double tol = 5e-5 * max_abs(want, (size_t)T * Vp);
        double err = 0, moved = 0;
        for (int t = 0; t < T; t++) {
            const int dec = NRUN - 1 - q; /* the decode step's row of run q */
            const float *gr = t < LEN[q] ? got + (size_t)(row + t) * Vp : got + (size_t)(n + dec) * Vp;
            for (int v = 0; v < V; v++) {
                err = fmax(err, fabs(gr[v] - want[(size_t)t * Vp + v]));
                moved = fmax(moved, fabs(want[(size_t)t * Vp + v] - plain[(size_t)t * Vp + v]));
            }
        }
        printf("%s run %d (adapter %d): max |banked - alone| %.3g, tolerance %.3g, adapter moved logits %.3g\n",
               arch == LF_ARCH_GPT2 ? "gpt2" : "llama", q, ADAPTER[q], err, tol, moved);
        assert_true(err <= tol);
        if (ADAPTER[q]) assert_true(moved > 100 * tol);
        row += LEN[q];
        lf_session_free(rs);
        lf_session_free(bs);
        lf_model_free(r);
    }
    lf_model_free(b0);
    free(want);
    free(plain);
    free(got);
    lf_model_free(m);
}

static void bank_gpt2(void **state) {
    (void)state;
    run_case(LF_ARCH_GPT2);
}
static void bank_llama(void **state) {
    (void)state;
    run_case(LF_ARCH_LLAMA);
}

/* Bank misuse is refused by name. */
static void bank_errors(void **state) {
    (void)state;
    lf_model *m = base(LF_ARCH_GPT2);
    int idx = 0;
    assert_int_equal(lf_model_lora_bank_add(m, &idx), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS("no attached adapters");
    lf_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(bank_gpt2), cmocka_unit_test(bank_llama),
                                       cmocka_unit_test(bank_errors)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
