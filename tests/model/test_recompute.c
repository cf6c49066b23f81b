/*
 * Activation recomputation (lf_recompute): selective and full give the same
 * losses, logits and parameter gradients as none, bit for bit (memcmp), with
 * dropout off and on, on 1 and 2 threads (one model replica per thread),
 * over two accumulated micro-batches with ignored targets and a micro-batch
 * smaller than the plan. The bytes lf_model_plan allocates (counted by a
 * backend whose alloc counts) equal the plan it reports and the pure
 * lf_model_plan_bytes; on a GPT-2 small shape full < selective < none,
 * by exactly the tensors each policy drops.
 */
#include "test_util.h"
#include "backend/backend_impl.h"
#include "llmforge/backend.h"
#include "llmforge/model.h"
#include "llmforge/backend_cpu.h"
#include "model_fixture.h"

static lf_backend *counting_backend(void) { return counting_backend_of(lf__backend_cpu()); }

/* ---------------------------------------------------------------- one training step */

enum { B = 4, T = 16, MICRO = 2 };
static int rows_planned = B; /* B, or 1 for one replica running threaded ops */

/* The architecture under test (argv[1]: gpt2 by default, or llama: GQA 4/2,
 * SwiGLU, RoPE, attention dropout only, untied head). */
static lf_arch g_arch = LF_ARCH_GPT2;

static lf_model_config small_config(float dropout) {
    lf_model_config c = fixture_config(T, dropout);
    if (g_arch == LF_ARCH_LLAMA) {
        c.arch = LF_ARCH_LLAMA;
        c.bias = 0;
        c.n_kv_head = 2;
        c.ffn_hidden = 96;
        c.tie_embeddings = 0;
    }
    return c;
}

/* Deterministic tokens; a few ignored targets. */
static void make_batch(int k, int32_t *in, int32_t *tg) { fixture_batch(5, 11, 3, k, B, T, in, tg); }

typedef struct step_result {
    double loss[MICRO + 1];
    long valid[MICRO + 1];
    float *grads;   /* num_params floats, malloc */
    float *logits;  /* (B,T,Vp) of an eval forward, malloc */
    size_t n;
    size_t plan_bytes, counted;
} step_result;

/* Plan rows_planned x T with `policy`, zero the gradients, accumulate MICRO
 * micro-batches (the last one a row shorter, a prefix of the plan, unless
 * the plan has one row), then an eval forward. */
static step_result run_step(const lf_model_config *c, lf_recompute policy) {
    step_result r = {0};
    lf_model *m = NULL;
    LF_ASSERT_OK(lf_model_create(&m, c, counting_backend()));
    LF_ASSERT_OK(lf_model_init_weights(m, 11));
    LF_ASSERT_OK(lf_model_set_recompute(m, policy));
    size_t before = allocated;
    int before_n = n_allocs;
    LF_ASSERT_OK(lf_model_plan(m, rows_planned, T, &r.plan_bytes));
    r.counted = allocated - before;
    assert_int_equal(n_allocs - before_n, 1); /* activations are one block */
    assert_int_equal(lf_model_recompute(m), policy);

    int32_t in[B * T], tg[B * T];
    lf_model_zero_grad(m);
    for (int k = 0; k < MICRO; k++) {
        make_batch(k, in, tg);
        int rows = k == MICRO - 1 && rows_planned > 1 ? rows_planned - 1 : rows_planned;
        lf_forward_opts fo = {.dloss = 1.0f / (float)(MICRO * rows_planned * T), .train = 1, .seed = 99,
                              .key = (uint64_t)k};
        LF_ASSERT_OK(lf_model_forward(m, in, tg, rows, T, &fo, &r.loss[k], &r.valid[k]));
        LF_ASSERT_OK(lf_model_backward(m));
    }
    r.n = lf_model_num_params(m);
    r.grads = malloc(r.n * sizeof(float));
    memcpy(r.grads, lf_model_grads(m), r.n * sizeof(float));

    /* forward only: logits, and a loss without dlogits */
    make_batch(MICRO, in, tg);
    LF_ASSERT_OK(lf_model_forward(m, in, NULL, rows_planned, T, NULL, NULL, NULL));
    size_t nl = (size_t)rows_planned * T * (size_t)c->padded_vocab_size;
    r.logits = malloc(nl * sizeof(float));
    memcpy(r.logits, lf_model_logits(m), nl * sizeof(float));
    LF_ASSERT_OK(lf_model_forward(m, in, tg, rows_planned, T, NULL, &r.loss[MICRO], &r.valid[MICRO]));
    lf_model_free(m);
    return r;
}

static void free_result(step_result *r) {
    free(r->grads);
    free(r->logits);
}

static void check_bit_identical(float dropout, int threads, int rows) {
    lf_backend_cpu_set_threads(threads);
    rows_planned = rows;
    lf_model_config c = small_config(dropout);
    step_result ref = run_step(&c, LF_RECOMPUTE_NONE);
    for (int pol = LF_RECOMPUTE_SELECTIVE; pol <= LF_RECOMPUTE_FULL; pol++) {
        step_result r = run_step(&c, (lf_recompute)pol);
        printf("dropout %.1f, %d threads, %d rows, %-9s: loss %.9g %.9g %.9g, activations %zu bytes (none %zu)\n",
               (double)dropout, threads, rows, lf_recompute_name((lf_recompute)pol), r.loss[0], r.loss[1], r.loss[2],
               r.plan_bytes, ref.plan_bytes);
        assert_memory_equal(r.loss, ref.loss, sizeof ref.loss);
        assert_memory_equal(r.valid, ref.valid, sizeof ref.valid);
        assert_int_equal(r.n, ref.n);
        assert_memory_equal(r.grads, ref.grads, ref.n * sizeof(float));
        assert_memory_equal(r.logits, ref.logits, (size_t)rows * T * c.padded_vocab_size * sizeof(float));
        assert_true(r.plan_bytes < ref.plan_bytes);
        free_result(&r);
    }
    /* the gradients are not trivially equal: something was learned from */
    double sq = 0;
    for (size_t i = 0; i < ref.n; i++) sq += (double)ref.grads[i] * ref.grads[i];
    assert_true(sq > 0);
    free_result(&ref);
    lf_backend_cpu_set_threads(2);
    rows_planned = B;
}

static void test_bit_identical_no_dropout_1_thread(void **state) {
    (void)state;
    check_bit_identical(0.0f, 1, B);
}
/* two replicas, each running single-threaded ops */
static void test_bit_identical_no_dropout_2_threads(void **state) {
    (void)state;
    check_bit_identical(0.0f, 2, B);
}
static void test_bit_identical_dropout_1_thread(void **state) {
    (void)state;
    check_bit_identical(0.1f, 1, B);
}
static void test_bit_identical_dropout_2_threads(void **state) {
    (void)state;
    check_bit_identical(0.1f, 2, B);
}
/* one replica whose ops and BLAS use both threads */
static void test_bit_identical_dropout_threaded_ops(void **state) {
    (void)state;
    check_bit_identical(0.1f, 2, 1);
}

/* ---------------------------------------------------------------- the plan */

static void test_planned_equals_allocated(void **state) {
    (void)state;
    for (int threads = 1; threads <= 2; threads++) {
        lf_backend_cpu_set_threads(threads);
        lf_model_config c = small_config(0.1f);
        for (int pol = LF_RECOMPUTE_NONE; pol <= LF_RECOMPUTE_FULL; pol++) {
            lf_model *m = NULL;
            LF_ASSERT_OK(lf_model_create(&m, &c, counting_backend()));
            LF_ASSERT_OK(lf_model_set_recompute(m, (lf_recompute)pol));
            for (int b = 1; b <= 5; b += 2) {
                size_t before = allocated, bytes = 0;
                LF_ASSERT_OK(lf_model_plan(m, b, T, &bytes));
                size_t counted = allocated - before;
                lf_act_bytes pure, held;
                int reps = lf_backend_cpu_threads();
                LF_ASSERT_OK(lf_model_plan_bytes(&c, b, T, (lf_recompute)pol, LF_ACT_FP32, reps, &pure));
                lf_model_activation_bytes(m, &held);
                assert_int_equal(counted, bytes);
                assert_int_equal(pure.total, bytes);
                assert_memory_equal(&pure, &held, sizeof pure);
                assert_int_equal(pure.saved + pure.work + pure.logits + pure.replica_grads, pure.total);
                /* replicas beyond the first carry two unit gradient buffers each:
                 * the embeddings' and the largest other unit's */
                int used_reps = reps < b ? reps : b;
                size_t u0 = 0, mo = 0;
                assert_int_equal(lf_model_unit_sizes(&c, &u0, &mo), lf_model_num_params(m));
                assert_true(u0 > 0 && mo > 0 && u0 + mo < lf_model_num_params(m));
                assert_int_equal(pure.replica_grads, (size_t)(used_reps - 1) * (lf_arena_round(u0 * sizeof(float)) +
                                                                                 lf_arena_round(mo * sizeof(float))));
            }
            lf_model_free(m);
        }
    }
    lf_backend_cpu_set_threads(2);
}

static void test_gpt2_small_ordering(void **state) {
    (void)state;
    lf_model_config c = {.n_layer = 12, .n_head = 12, .n_embd = 768, .block_size = 1024, .vocab_size = 50304, .bias = 1};
    const int b = 4, t = 256, L = 12;
    lf_act_bytes a[3];
    for (int pol = 0; pol < 3; pol++) {
        LF_ASSERT_OK(lf_model_plan_bytes(&c, b, t, (lf_recompute)pol, LF_ACT_FP32, 1, &a[pol]));
        printf("gpt2-124m B %d T %d %-9s: total %.1f MB (saved %.1f, work %.1f, logits %.1f)\n", b, t,
               lf_recompute_name((lf_recompute)pol), a[pol].total / 1e6, a[pol].saved / 1e6, a[pol].work / 1e6,
               a[pol].logits / 1e6);
    }
    assert_true(a[LF_RECOMPUTE_SELECTIVE].total < a[LF_RECOMPUTE_NONE].total);
    assert_true(a[LF_RECOMPUTE_FULL].total < a[LF_RECOMPUTE_SELECTIVE].total);
    size_t N = (size_t)b * t, C = 768, F = sizeof(float);
    /* selective drops ln_1, ln_2 (C each) and the GELU output (4C) of every
     * layer, and adds one ln buffer and one GELU buffer to the working set */
    assert_int_equal(a[LF_RECOMPUTE_NONE].saved - a[LF_RECOMPUTE_SELECTIVE].saved, (size_t)L * N * 6 * C * F);
    assert_int_equal(a[LF_RECOMPUTE_SELECTIVE].work - a[LF_RECOMPUTE_NONE].work, N * 5 * C * F);
    /* full keeps the embeddings, each block's output and ln_f (output + 2 stats) */
    assert_int_equal(a[LF_RECOMPUTE_FULL].saved, (size_t)(L + 2) * N * C * F + 2 * N * F);
    assert_int_equal(a[LF_RECOMPUTE_NONE].logits, a[LF_RECOMPUTE_FULL].logits);
    /* with replicas, every replica carries its own working set */
    lf_act_bytes two;
    LF_ASSERT_OK(lf_model_plan_bytes(&c, b, t, LF_RECOMPUTE_FULL, LF_ACT_FP32, 2, &two));
    assert_true(two.replica_grads > 0);
    assert_int_equal(two.saved, a[LF_RECOMPUTE_FULL].saved);
}

static void test_llama_smollm_ordering(void **state) {
    (void)state;
    lf_model_config c;
    LF_ASSERT_OK(lf_model_preset("smollm-135m", &c));
    const int b = 4, t = 256, L = 30;
    lf_act_bytes a[3];
    for (int pol = 0; pol < 3; pol++) {
        LF_ASSERT_OK(lf_model_plan_bytes(&c, b, t, (lf_recompute)pol, LF_ACT_FP32, 1, &a[pol]));
        printf("smollm-135m B %d T %d %-9s: total %.1f MB (saved %.1f, work %.1f, logits %.1f)\n", b, t,
               lf_recompute_name((lf_recompute)pol), a[pol].total / 1e6, a[pol].saved / 1e6, a[pol].work / 1e6,
               a[pol].logits / 1e6);
    }
    const size_t N = (size_t)b * t, C = 576, Fh = 1536, W = 576 + 2 * 3 * 64, NH = 9, F = sizeof(float);
    /* none keeps per layer and token 5C + W + 3F + NH*T + 2 floats, plus the
     * embeddings and the final norm (C + 1) */
    assert_int_equal(a[LF_RECOMPUTE_NONE].saved,
                     (size_t)L * N * (5 * C + W + 3 * Fh + NH * t + 2) * F + N * C * F + N * (C + 1) * F);
    /* selective drops both norm outputs and the SwiGLU output (2C + F) */
    assert_int_equal(a[LF_RECOMPUTE_NONE].saved - a[LF_RECOMPUTE_SELECTIVE].saved, (size_t)L * N * (2 * C + Fh) * F);
    /* full keeps the embeddings, each block's output and the final norm (output + rstd) */
    assert_int_equal(a[LF_RECOMPUTE_FULL].saved, (size_t)(L + 2) * N * C * F + N * F);
    assert_true(a[LF_RECOMPUTE_FULL].total < a[LF_RECOMPUTE_SELECTIVE].total);
}

/* ---------------------------------------------------------------- API edges */

static void test_api(void **state) {
    (void)state;
    lf_recompute p = LF_RECOMPUTE_NONE;
    LF_ASSERT_OK(lf_recompute_parse("full", &p));
    assert_int_equal(p, LF_RECOMPUTE_FULL);
    LF_ASSERT_OK(lf_recompute_parse("selective", &p));
    assert_int_equal(p, LF_RECOMPUTE_SELECTIVE);
    assert_int_equal(lf_recompute_parse("partial", &p), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS("'partial'");
    assert_int_equal(p, LF_RECOMPUTE_SELECTIVE);
    assert_string_equal(lf_recompute_name(LF_RECOMPUTE_NONE), "none");
    assert_string_equal(lf_recompute_name((lf_recompute)7), "?");

    lf_model_config c = small_config(0);
    lf_act_bytes ab;
    assert_int_equal(lf_model_plan_bytes(&c, 0, T, LF_RECOMPUTE_NONE, LF_ACT_FP32, 1, &ab), LF_ERR_INVALID_ARG);
    assert_int_equal(lf_model_plan_bytes(&c, 1, T, LF_RECOMPUTE_NONE, LF_ACT_FP32, 0, &ab), LF_ERR_INVALID_ARG);
    assert_int_equal(lf_model_plan_bytes(&c, 1, T + 1, LF_RECOMPUTE_NONE, LF_ACT_FP32, 1, &ab), LF_ERR_RANGE);
    assert_int_equal(lf_model_plan_bytes(&c, 1, T, (lf_recompute)3, LF_ACT_FP32, 1, &ab), LF_ERR_INVALID_ARG);
    assert_int_equal(lf_model_plan_bytes(&c, 1, T, LF_RECOMPUTE_NONE, (lf_act_dtype)2, 1, &ab),
                     LF_ERR_INVALID_ARG);
    assert_int_equal(ab.total, 0);

    lf_model *m = NULL;
    LF_ASSERT_OK(lf_model_create(&m, &c, lf_backend_get("cpu")));
    assert_int_equal(lf_model_set_recompute(m, (lf_recompute)-1), LF_ERR_INVALID_ARG);
    assert_int_equal(lf_model_recompute(m), LF_RECOMPUTE_NONE);
    size_t none_bytes, full_bytes;
    LF_ASSERT_OK(lf_model_plan(m, B, T, &none_bytes));
    /* the policy waits for the next plan */
    LF_ASSERT_OK(lf_model_set_recompute(m, LF_RECOMPUTE_FULL));
    assert_int_equal(lf_model_recompute(m), LF_RECOMPUTE_NONE);
    int32_t in[B * T], tg[B * T];
    make_batch(0, in, tg);
    lf_forward_opts fo = {.dloss = 1.0f / (B * T), .train = 1};
    LF_ASSERT_OK(lf_model_forward(m, in, tg, B, T, &fo, NULL, NULL));
    /* re-planning drops the pending backward: its activations are gone */
    LF_ASSERT_OK(lf_model_plan(m, B, T, &full_bytes));
    assert_int_equal(lf_model_recompute(m), LF_RECOMPUTE_FULL);
    assert_true(full_bytes < none_bytes);
    assert_int_equal(lf_model_backward(m), LF_ERR_INVALID_ARG);
    lf_model_free(m);
}

int main(int argc, char **argv) {
    if (argc > 1 && lf_arch_parse(argv[1], &g_arch) != LF_OK) return 2;
    printf("architecture %s\n", lf_arch_name(g_arch));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bit_identical_no_dropout_1_thread),
        cmocka_unit_test(test_bit_identical_no_dropout_2_threads),
        cmocka_unit_test(test_bit_identical_dropout_1_thread),
        cmocka_unit_test(test_bit_identical_dropout_2_threads),
        cmocka_unit_test(test_bit_identical_dropout_threaded_ops),
        cmocka_unit_test(test_planned_equals_allocated),
        cmocka_unit_test(test_gpt2_small_ordering),
        cmocka_unit_test(test_llama_smollm_ordering),
        cmocka_unit_test(test_api),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
