/*
 * Ragged forwards (lf_session_forward_ragged), the engine step of continuous
 * batching, for both architectures. Four sequences with prompts of 5, 11, 3
 * and 8 tokens decode greedily together: three start at once, the fourth
 * joins at step 7 into the slot the second freed after step 6 (position 0
 * again), prefill runs and one-token decode runs mixed in one
 * forward. Each step's next-token logits of every sequence equal those of the
 * same sequence decoded alone in a one-row session, within 1e-5 of the
 * largest logit (the products see another row count, and the attention of a
 * run is the same op on the same cache: fp32 rounding of sums over <= 64
 * terms, ~1e-6 relative, as test_generate's bound), and so the greedy tokens
 * are the same. The whole schedule run twice gives the same bits. Runs
 * with every_row give a logits row per token (every_row_case). Bad runs
 * (shared slot, a gap before pos, too many tokens, empty, every_row not 0
 * or 1) are refused by name. Weights: the init scaled x4 so greedy choices are far from ties.
 */
#include "test_util.h"
#include "llmforge/model.h"

enum { NSEQ = 4, STEPS = 12, SLOTS = 3, CTX = 48 };
static const int PROMPT[NSEQ] = {5, 11, 3, 8};
static const int JOIN[NSEQ] = {0, 0, 0, 7};     /* step the sequence starts */
static const int FINISH[NSEQ] = {99, 6, 99, 99}; /* step after which it leaves */

static lf_model *make(lf_arch arch) {
    lf_model_config c = {.arch = arch, .n_layer = 2, .n_head = 4, .n_embd = 64, .block_size = CTX, .vocab_size = 61,
                         .bias = arch == LF_ARCH_GPT2, .tie_embeddings = 1};
    if (arch == LF_ARCH_LLAMA) {
        c.n_kv_head = 2;
        c.tie_embeddings = 0;
    }
    lf_model *m = NULL;
    LF_ASSERT_OK(lf_model_create(&m, &c, lf_backend_get("cpu")));
    LF_ASSERT_OK(lf_model_init_weights(m, 11));
    float *p = lf_model_params(m);
    for (size_t i = 0; i < lf_model_num_params(m); i++) p[i] *= 4.0f; /* CPU backend: host memory */
    return m;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static double max_abs(const float *x, int n) {
    double m = 0;
    for (int i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

/* prompt tokens of sequence q */
static void prompt(int q, int V, int32_t *t) {
    for (int i = 0; i < PROMPT[q]; i++) t[i] = (int32_t)(lf_rng_u64(100 + (uint64_t)q, LF_RNG_BENCH, (uint64_t)i) % (uint64_t)V);
}

/* Sequence q alone: the next-token logits after its prompt and after each of
 * its steps' tokens (ref[q][k], k = 0 .. steps-1) and the greedy tokens. */
static void solo(lf_model *m, int q, int steps, float *ref, int32_t *toks) {
    const int V = lf_model_get_config(m)->vocab_size;
    lf_session *s;
    LF_ASSERT_OK(lf_session_create(&s, m, 1, CTX, 1));
    int32_t t[CTX];
    prompt(q, V, t);
    LF_ASSERT_OK(lf_session_forward(s, t, 1, PROMPT[q], 1));
    for (int k = 0; k < steps; k++) {
        const float *lg = lf_session_logits(s) + (size_t)(k == 0 ? PROMPT[q] - 1 : 0) * V;
        memcpy(ref + (size_t)k * V, lg, sizeof(float) * V);
        toks[k] = argmax(lg, V);
        LF_ASSERT_OK(lf_session_forward(s, &toks[k], 1, 1, 1));
    }
    lf_session_free(s);
}

/* The batched schedule; writes every step's logits of every sequence (got). */
static void batched(lf_model *m, float *got[NSEQ], int32_t *toks[NSEQ]) {
    const int V = lf_model_get_config(m)->vocab_size;
    lf_session *s;
    LF_ASSERT_OK(lf_session_create(&s, m, SLOTS, CTX, 1));
    int slot[NSEQ] = {0, 1, 2, 1}; /* the fourth takes the second's slot */
    int done[NSEQ] = {0};
    for (int step = 0; step < STEPS; step++) {
        int32_t in[CTX];
        lf_segment seg[SLOTS];
        int who[SLOTS], n = 0, len = 0;
        for (int q = 0; q < NSEQ; q++) {
            if (step < JOIN[q] || step > FINISH[q]) continue;
            const int k = step - JOIN[q]; /* this sequence's own step */
            if (k == 0) {
                prompt(q, V, in + len);
                seg[n] = (lf_segment){.slot = slot[q], .pos = 0, .len = PROMPT[q]};
            } else {
                in[len] = toks[q][k - 1];
                seg[n] = (lf_segment){.slot = slot[q], .pos = PROMPT[q] + k - 1, .len = 1};
            }
            who[n] = q;
            len += seg[n].len;
            n++;
        }
        LF_ASSERT_OK(lf_session_forward_ragged(s, in, seg, n));
        for (int i = 0; i < n; i++) {
            const int q = who[i], k = step - JOIN[q];
            const float *lg = lf_session_logits(s) + (size_t)i * V; /* run i's last position */
            memcpy(got[q] + (size_t)k * V, lg, sizeof(float) * V);
            toks[q][k] = argmax(lg, V);
            assert_int_equal(lf_session_slot_pos(s, seg[i].slot), seg[i].pos + seg[i].len);
            done[q] = k + 1;
        }
    }
    for (int q = 0; q < NSEQ; q++) assert_true(done[q] > 0);
    lf_session_free(s);
}

static void ragged_case(lf_arch arch) {
    lf_model *m = make(arch);
    const int V = lf_model_get_config(m)->vocab_size;
    float *ref[NSEQ], *got[NSEQ], *again[NSEQ];
    int32_t *rtok[NSEQ], *gtok[NSEQ], *atok[NSEQ];
    for (int q = 0; q < NSEQ; q++) {
        ref[q] = calloc((size_t)STEPS * V, sizeof(float));
        got[q] = calloc((size_t)STEPS * V, sizeof(float));
        again[q] = calloc((size_t)STEPS * V, sizeof(float));
        rtok[q] = calloc(STEPS, sizeof(int32_t));
        gtok[q] = calloc(STEPS, sizeof(int32_t));
        atok[q] = calloc(STEPS, sizeof(int32_t));
    }
    batched(m, got, gtok);
    batched(m, again, atok);
    double worst = 0;
    for (int q = 0; q < NSEQ; q++) {
        const int steps = (FINISH[q] < STEPS ? FINISH[q] + 1 : STEPS) - JOIN[q];
        solo(m, q, steps, ref[q], rtok[q]);
        for (int k = 0; k < steps; k++) {
            const float *a = got[q] + (size_t)k * V, *b = ref[q] + (size_t)k * V;
            const double scale = max_abs(b, V);
            for (int v = 0; v < V; v++) {
                const double e = fabs((double)a[v] - b[v]) / scale;
                if (e > worst) worst = e;
                if (!(e <= 1e-5))
                    fail_msg("%s seq %d step %d logit %d: batched %.9g alone %.9g", lf_arch_name(arch), q, k, v, a[v],
                             b[v]);
            }
            if (gtok[q][k] != rtok[q][k])
                fail_msg("%s seq %d step %d: batched token %d, alone %d", lf_arch_name(arch), q, k, gtok[q][k],
                         rtok[q][k]);
        }
        if (memcmp(got[q], again[q], sizeof(float) * (size_t)STEPS * V) != 0)
            fail_msg("%s seq %d: the same schedule twice gave different bits", lf_arch_name(arch), q);
    }
    printf("%s: batched vs alone, worst |diff| / max|logit| = %.3g\n", lf_arch_name(arch), worst);
    for (int q = 0; q < NSEQ; q++) {
        free(ref[q]), free(got[q]), free(again[q]);
        free(rtok[q]), free(gtok[q]), free(atok[q]);
    }
    lf_model_free(m);
}

static void test_ragged_gpt2(void **state) {
    (void)state;
    ragged_case(LF_ARCH_GPT2);
}

static void test_ragged_llama(void **state) {
    (void)state;
    ragged_case(LF_ARCH_LLAMA);
}

/* every_row: a run that asks for every row gets len logits rows, each
 * equal to the same position of the tokens run alone without a cache (all
 * rows of one uncached forward), to the same 1e-5 of the largest logit;
 * the runs beside it keep their last row only, and the rows are laid out
 * as lf_session_ragged_rows says. Schedule, 3 slots: step 1 runs seq A's
 * prompt (every row) between seq B's prompt and seq C's prompt (last rows);
 * step 2 decodes B one token beside A's second chunk (every row) and C's
 * one token. */
typedef struct row_check {
    const float *got, *want;
    const char *what;
} row_check;

static void every_row_case(lf_arch arch) {
    lf_model *m = make(arch);
    const int V = lf_model_get_config(m)->vocab_size;
    const int NA = 9, NA2 = 4, NB = 6, NC = 3;
    int32_t a[16], b[8], c[8];
    for (int i = 0; i < NA + NA2; i++) a[i] = (int32_t)(lf_rng_u64(7, LF_RNG_BENCH, (uint64_t)i) % (uint64_t)V);
    for (int i = 0; i < NB + 1; i++) b[i] = (int32_t)(lf_rng_u64(8, LF_RNG_BENCH, (uint64_t)i) % (uint64_t)V);
    for (int i = 0; i < NC + 1; i++) c[i] = (int32_t)(lf_rng_u64(9, LF_RNG_BENCH, (uint64_t)i) % (uint64_t)V);
    /* references: each sequence's every position, one uncached forward */
    float *ra = malloc(sizeof(float) * (size_t)(NA + NA2) * V), *rb = malloc(sizeof(float) * (size_t)(NB + 1) * V),
          *rc = malloc(sizeof(float) * (size_t)(NC + 1) * V);
    lf_session *one;
    LF_ASSERT_OK(lf_session_create(&one, m, 1, CTX, 0));
    LF_ASSERT_OK(lf_session_forward(one, a, 1, NA + NA2, 0));
    memcpy(ra, lf_session_logits(one), sizeof(float) * (size_t)(NA + NA2) * V);
    LF_ASSERT_OK(lf_session_forward(one, b, 1, NB + 1, 0));
    memcpy(rb, lf_session_logits(one), sizeof(float) * (size_t)(NB + 1) * V);
    LF_ASSERT_OK(lf_session_forward(one, c, 1, NC + 1, 0));
    memcpy(rc, lf_session_logits(one), sizeof(float) * (size_t)(NC + 1) * V);
    lf_session_free(one);

    lf_session *s;
    LF_ASSERT_OK(lf_session_create(&s, m, 3, CTX, 1));
    int32_t in[CTX];
    /* step 1: B (last row), A (every row), C (last row) */
    memcpy(in, b, sizeof(int32_t) * NB);
    memcpy(in + NB, a, sizeof(int32_t) * NA);
    memcpy(in + NB + NA, c, sizeof(int32_t) * NC);
    lf_segment s1[3] = {{.slot = 1, .pos = 0, .len = NB},
                        {.slot = 0, .pos = 0, .len = NA, .every_row = 1},
                        {.slot = 2, .pos = 0, .len = NC}};
    LF_ASSERT_OK(lf_session_forward_ragged(s, in, s1, 3));
    assert_int_equal(lf_session_ragged_rows(s1, 1), 1);
    assert_int_equal(lf_session_ragged_rows(s1, 2), 1 + NA);
    assert_int_equal(lf_session_ragged_rows(s1, 3), 2 + NA);
    const float *lg = lf_session_logits(s);
    row_check chk[64];
    int n = 0;
    chk[n++] = (row_check){lg, rb + (size_t)(NB - 1) * V, "step 1 B last"};
    for (int t = 0; t < NA; t++) chk[n++] = (row_check){lg + (size_t)(1 + t) * V, ra + (size_t)t * V, "step 1 A"};
    chk[n++] = (row_check){lg + (size_t)(1 + NA) * V, rc + (size_t)(NC - 1) * V, "step 1 C last"};
    double worst = 0;
    for (int i = 0; i < n; i++) {
        const double scale = max_abs(chk[i].want, V);
        for (int v = 0; v < V; v++) {
            const double e = fabs((double)chk[i].got[v] - chk[i].want[v]) / scale;
            worst = fmax(worst, e);
            if (!(e <= 1e-5))
                fail_msg("%s %s (check %d) logit %d: %.9g, alone %.9g", lf_arch_name(arch), chk[i].what, i, v,
                         chk[i].got[v], chk[i].want[v]);
        }
    }
    /* step 2: A's next chunk (every row) first, then B and C one token each */
    memcpy(in, a + NA, sizeof(int32_t) * NA2);
    in[NA2] = b[NB];
    in[NA2 + 1] = c[NC];
    lf_segment s2[3] = {{.slot = 0, .pos = NA, .len = NA2, .every_row = 1},
                        {.slot = 1, .pos = NB, .len = 1},
                        {.slot = 2, .pos = NC, .len = 1}};
    LF_ASSERT_OK(lf_session_forward_ragged(s, in, s2, 3));
    assert_int_equal(lf_session_ragged_rows(s2, 3), NA2 + 2);
    lg = lf_session_logits(s);
    n = 0;
    for (int t = 0; t < NA2; t++) chk[n++] = (row_check){lg + (size_t)t * V, ra + (size_t)(NA + t) * V, "step 2 A"};
    chk[n++] = (row_check){lg + (size_t)NA2 * V, rb + (size_t)NB * V, "step 2 B"};
    chk[n++] = (row_check){lg + (size_t)(NA2 + 1) * V, rc + (size_t)NC * V, "step 2 C"};
    for (int i = 0; i < n; i++) {
        const double scale = max_abs(chk[i].want, V);
        for (int v = 0; v < V; v++) {
            const double e = fabs((double)chk[i].got[v] - chk[i].want[v]) / scale;
            worst = fmax(worst, e);
            if (!(e <= 1e-5))
                fail_msg("%s %s (check %d) logit %d: %.9g, alone %.9g", lf_arch_name(arch), chk[i].what, i, v,
                         chk[i].got[v], chk[i].want[v]);
        }
    }
    printf("%s: every_row runs vs one uncached forward, worst |diff| / max|logit| = %.3g\n", lf_arch_name(arch), worst);
    lf_session_free(s);
    free(ra), free(rb), free(rc);
    lf_model_free(m);
}

static void test_every_row_gpt2(void **state) {
    (void)state;
    every_row_case(LF_ARCH_GPT2);
}

static void test_every_row_llama(void **state) {
    (void)state;
    every_row_case(LF_ARCH_LLAMA);
}

static void test_bad_runs(void **state) {
    (void)state;
    lf_model *m = make(LF_ARCH_LLAMA);
    lf_session *s, *nocache;
    LF_ASSERT_OK(lf_session_create(&s, m, 2, 16, 1));
    int32_t in[32] = {0};
    lf_segment two[2] = {{0, 0, 3, 0, 0}, {0, 0, 2, 0, 0}};
    assert_int_equal(lf_session_forward_ragged(s, in, two, 2), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS("runs 0 and 1 share slot 0");
    lf_segment gap = {1, 2, 1, 0, 0};
    assert_int_equal(lf_session_forward_ragged(s, in, &gap, 1), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("starts at position 2, slot 1 holds 0");
    lf_segment big[2] = {{0, 0, 9, 0, 0}, {1, 0, 8, 0, 0}};
    assert_int_equal(lf_session_forward_ragged(s, in, big, 2), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("17 tokens in one forward, the session holds 16");
    lf_segment empty = {0, 0, 0, 0, 0};
    assert_int_equal(lf_session_forward_ragged(s, in, &empty, 1), LF_ERR_INVALID_ARG);
    lf_segment slot = {2, 0, 1, 0, 0};
    assert_int_equal(lf_session_forward_ragged(s, in, &slot, 1), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS("slot 2 outside [0, 2)");
    lf_segment ok = {1, 0, 4, 0, 0};
    LF_ASSERT_OK(lf_session_forward_ragged(s, in, &ok, 1));
    assert_int_equal(lf_session_slot_pos(s, 1), 4);
    lf_segment past = {1, 4, 13, 0, 0}; /* positions 4..16 of a 16-position cache */
    assert_int_equal(lf_session_forward_ragged(s, in, &past, 1), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("exceed the cache of 16");
    lf_session_reset(s);
    assert_int_equal(lf_session_slot_pos(s, 1), 0);
    assert_int_equal(lf_session_slot_pos(s, 5), -1);
    lf_segment odd = {0, 0, 2, 2, 0};
    assert_int_equal(lf_session_forward_ragged(s, in, &odd, 1), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS("every_row is 2");
    lf_segment adapter = {0, 0, 2, 0, 1}; /* the model has no serving adapters */
    assert_int_equal(lf_session_forward_ragged(s, in, &adapter, 1), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS("adapter 1 (0 to the model's 0)");
    LF_ASSERT_OK(lf_session_create(&nocache, m, 2, 16, 0));
    assert_int_equal(lf_session_forward_ragged(nocache, in, &ok, 1), LF_ERR_UNSUPPORTED);
    lf_session_free(nocache);
    lf_session_free(s);
    lf_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ragged_gpt2),
        cmocka_unit_test(test_ragged_llama),
        cmocka_unit_test(test_every_row_gpt2),
        cmocka_unit_test(test_every_row_llama),
        cmocka_unit_test(test_bad_runs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
