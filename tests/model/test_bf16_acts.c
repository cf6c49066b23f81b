/*
 * bf16 activation storage (lf_act_dtype) on "cpu-bf16": the matmul inputs
 * (GPT-2: ln_1, ln_2, ln_f, attention and GELU outputs; with argv[1] llama:
 * the RMSNorm, attention and SwiGLU outputs) stored in bf16 give the
 * same losses, logits and parameter gradients as the same backend storing
 * them in fp32, bit for bit (memcmp), under every recompute policy, with
 * dropout off and on, on 1 and 2 threads and one replica running threaded
 * ops, over two accumulated micro-batches (the second a row shorter), on the
 * oneDNN kernel and on the fallback; and so do the weights after a few AdamW
 * steps. The plan: the bytes allocated (counted by a backend whose alloc
 * counts) equal lf_model_plan_bytes for bf16 storage, and on GPT-2
 * small bf16 saves exactly half of each bf16 slot, per policy. The API:
 * defaults per backend, bf16 refused on "cpu", the dtype waits for the next
 * plan.
 */
#include "test_util.h"
#include "backend/backend_impl.h"
#include "backend/cpu/cpu_internal.h"
#include "llmforge/backend.h"
#include "llmforge/model.h"
#include "llmforge/backend_cpu.h"
#include "model_fixture.h"

static lf_backend *counting_backend(void) { return counting_backend_of(lf__backend_cpu_bf16()); }

/* ---------------------------------------------------------------- training steps */

enum { B = 4, T = 16, MICRO = 2, STEPS = 3, VP = 128 };
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
static void make_batch(int k, int32_t *in, int32_t *tg) { fixture_batch(21, 13, 5, k, B, T, in, tg); }

typedef struct run_result {
    double loss[STEPS][MICRO + 1];
    float *grads;  /* num_params floats of the first step, malloc */
    float *params; /* after STEPS AdamW steps, malloc */
    float *logits; /* (rows_planned,T,VP) of an eval forward after the steps, malloc */
    size_t n, plan_bytes, counted;
} run_result;

/* Plan rows_planned x T with (policy, dtype); STEPS steps of MICRO
 * accumulated micro-batches (the last a row shorter when the plan has more
 * than one), each followed by the backend's AdamW; then an eval forward. */
static run_result run(const lf_model_config *c, lf_recompute policy, lf_act_dtype dtype) {
    run_result r = {0};
    lf_backend *be = counting_backend();
    lf_model *m = NULL;
    LF_ASSERT_OK(lf_model_create(&m, c, be));
    LF_ASSERT_OK(lf_model_init_weights(m, 13));
    LF_ASSERT_OK(lf_model_set_recompute(m, policy));
    LF_ASSERT_OK(lf_model_set_act_dtype(m, dtype));
    size_t before = allocated;
    int before_n = n_allocs;
    LF_ASSERT_OK(lf_model_plan(m, rows_planned, T, &r.plan_bytes));
    r.counted = allocated - before;
    assert_int_equal(n_allocs - before_n, 1); /* activations are one block */
    assert_int_equal(lf_model_act_dtype(m), dtype);
    r.n = lf_model_num_params(m);
    float *m1 = be->ops->alloc(be, r.n * sizeof(float)), *m2 = be->ops->alloc(be, r.n * sizeof(float));
    assert_non_null(m1);
    assert_non_null(m2);
    be->ops->zero(be, m1, r.n);
    be->ops->zero(be, m2, r.n);

    int32_t in[B * T], tg[B * T];
    for (int s = 0; s < STEPS; s++) {
        lf_model_zero_grad(m);
        for (int k = 0; k < MICRO; k++) {
            make_batch(s * MICRO + k, in, tg);
            int rows = k == MICRO - 1 && rows_planned > 1 ? rows_planned - 1 : rows_planned;
            lf_forward_opts fo = {.dloss = 1.0f / (float)(MICRO * rows_planned * T), .train = 1, .seed = 77,
                                  .key = (uint64_t)(s * MICRO + k)};
            LF_ASSERT_OK(lf_model_forward(m, in, tg, rows, T, &fo, &r.loss[s][k], NULL));
            LF_ASSERT_OK(lf_model_backward(m));
        }
        if (s == 0) {
            r.grads = malloc(r.n * sizeof(float));
            memcpy(r.grads, lf_model_grads(m), r.n * sizeof(float));
        }
        be->ops->adamw_update(be, lf_model_params(m), lf_model_grads(m), m1, m2, r.n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f,
                         s + 1);
        /* a forward-only loss (no dlogits) */
        make_batch(100 + s, in, tg);
        LF_ASSERT_OK(lf_model_forward(m, in, tg, rows_planned, T, NULL, &r.loss[s][MICRO], NULL));
    }
    r.params = malloc(r.n * sizeof(float));
    memcpy(r.params, lf_model_params(m), r.n * sizeof(float));
    LF_ASSERT_OK(lf_model_forward(m, in, NULL, rows_planned, T, NULL, NULL, NULL));
    size_t nl = (size_t)rows_planned * T * VP;
    r.logits = malloc(nl * sizeof(float));
    memcpy(r.logits, lf_model_logits(m), nl * sizeof(float));
    be->ops->free(be, m1);
    be->ops->free(be, m2);
    lf_model_free(m);
    return r;
}

static void free_result(run_result *r) {
    free(r->grads);
    free(r->params);
    free(r->logits);
}

/* Every (policy, bf16 storage) and (policy, fp32 storage) against
 * (none, fp32 storage) on this backend. */
static void check_bit_identical(float dropout, int threads, int rows) {
    lf_backend_cpu_set_threads(threads);
    rows_planned = rows;
    lf_model_config c = small_config(dropout);
    run_result ref = run(&c, LF_RECOMPUTE_NONE, LF_ACT_FP32);
    for (int pol = LF_RECOMPUTE_NONE; pol <= LF_RECOMPUTE_FULL; pol++) {
        for (int dt = LF_ACT_FP32; dt <= LF_ACT_BF16; dt++) {
            if (pol == LF_RECOMPUTE_NONE && dt == LF_ACT_FP32) continue;
            run_result r = run(&c, (lf_recompute)pol, (lf_act_dtype)dt);
            printf("%s, dropout %.1f, %d threads, %d rows, %-9s %s: loss %.9g %.9g, activations %zu bytes "
                   "(none fp32 %zu)\n",
                   lf__cpu_bf16_uses_onednn() ? "oneDNN" : "fallback", (double)dropout, threads, rows,
                   lf_recompute_name((lf_recompute)pol), lf_act_dtype_name((lf_act_dtype)dt), r.loss[0][0],
                   r.loss[STEPS - 1][MICRO], r.plan_bytes, ref.plan_bytes);
            assert_memory_equal(r.loss, ref.loss, sizeof ref.loss);
            assert_int_equal(r.n, ref.n);
            assert_memory_equal(r.grads, ref.grads, ref.n * sizeof(float));
            assert_memory_equal(r.params, ref.params, ref.n * sizeof(float));
            assert_memory_equal(r.logits, ref.logits, (size_t)rows * T * VP * sizeof(float));
            assert_int_equal(r.counted, r.plan_bytes);
            if (dt == LF_ACT_BF16) assert_true(r.plan_bytes < ref.plan_bytes);
            free_result(&r);
        }
    }
    double sq = 0; /* the gradients are not trivially equal */
    for (size_t i = 0; i < ref.n; i++) sq += (double)ref.grads[i] * ref.grads[i];
    assert_true(sq > 0);
    free_result(&ref);
    lf_backend_cpu_set_threads(2);
    rows_planned = B;
}

/* On the kernel detected here (oneDNN where the CPU has bf16 instructions)
 * and on the fallback (rounded operands, fp32 sgemm). */
static void check_both_kernels(float dropout, int threads, int rows) {
    if (!lf__cpu_bf16_uses_onednn()) print_message("no oneDNN bf16 kernel here: the fallback only\n");
    check_bit_identical(dropout, threads, rows);
    if (lf__cpu_bf16_uses_onednn()) {
        lf__cpu_bf16_force_fallback(1);
        check_bit_identical(dropout, threads, rows);
        lf__cpu_bf16_force_fallback(0);
    }
    assert_int_equal(lf__cpu_bf16_failures(), 0);
}

static void test_bit_identical_no_dropout_1_thread(void **state) {
    (void)state;
    check_both_kernels(0.0f, 1, B);
}
/* two replicas, each running single-threaded ops */
static void test_bit_identical_no_dropout_2_threads(void **state) {
    (void)state;
    check_both_kernels(0.0f, 2, B);
}
static void test_bit_identical_dropout_1_thread(void **state) {
    (void)state;
    check_both_kernels(0.1f, 1, B);
}
static void test_bit_identical_dropout_2_threads(void **state) {
    (void)state;
    check_both_kernels(0.1f, 2, B);
}
/* one replica whose ops use both threads */
static void test_bit_identical_dropout_threaded_ops(void **state) {
    (void)state;
    check_both_kernels(0.1f, 2, 1);
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
            assert_int_equal(lf_model_act_dtype(m), LF_ACT_BF16); /* cpu-bf16's default */
            LF_ASSERT_OK(lf_model_set_recompute(m, (lf_recompute)pol));
            for (int b = 1; b <= 5; b += 2) {
                size_t before = allocated, bytes = 0;
                LF_ASSERT_OK(lf_model_plan(m, b, T, &bytes));
                size_t counted = allocated - before;
                lf_act_bytes pure, held, f32;
                int reps = lf_backend_cpu_threads();
                LF_ASSERT_OK(lf_model_plan_bytes(&c, b, T, (lf_recompute)pol, LF_ACT_BF16, reps, &pure));
                LF_ASSERT_OK(lf_model_plan_bytes(&c, b, T, (lf_recompute)pol, LF_ACT_FP32, reps, &f32));
                lf_model_activation_bytes(m, &held);
                assert_int_equal(counted, bytes);
                assert_int_equal(pure.total, bytes);
                assert_memory_equal(&pure, &held, sizeof pure);
                assert_int_equal(pure.saved + pure.work + pure.logits + pure.replica_grads, pure.total);
                assert_true(pure.total < f32.total);
                assert_int_equal(pure.logits, f32.logits);
                assert_int_equal(pure.replica_grads, f32.replica_grads);
            }
            lf_model_free(m);
        }
    }
    lf_backend_cpu_set_threads(2);
}

/* GPT-2 small at B 4, T 256 (rows and channels multiples of the slot
 * alignment, so every slot is exactly its tensor): bf16 storage saves half
 * of each tensor it stores in bf16, nothing else. */
static void test_gpt2_small_halves(void **state) {
    (void)state;
    lf_model_config c = {.n_layer = 12, .n_head = 12, .n_embd = 768, .block_size = 1024, .vocab_size = 50304, .bias = 1};
    const size_t b = 4, t = 256, L = 12, N = b * t, C = 768, H = sizeof(uint16_t); /* H: what bf16 saves per element */
    for (int reps = 1; reps <= 2; reps++) {
        const size_t Nr = N / (size_t)reps; /* rows of each replica */
        for (int pol = 0; pol < 3; pol++) {
            lf_act_bytes f, h;
            LF_ASSERT_OK(lf_model_plan_bytes(&c, (int)b, (int)t, (lf_recompute)pol, LF_ACT_FP32, reps, &f));
            LF_ASSERT_OK(lf_model_plan_bytes(&c, (int)b, (int)t, (lf_recompute)pol, LF_ACT_BF16, reps, &h));
            printf("gpt2-124m B %zu T %zu, %d replica(s), %-9s: fp32 %.1f MB, bf16 %.1f MB (saved %.1f -> %.1f, work "
                   "%.1f -> %.1f)\n",
                   b, t, reps, lf_recompute_name((lf_recompute)pol), f.total / 1e6, h.total / 1e6, f.saved / 1e6,
                   h.saved / 1e6, f.work / 1e6, h.work / 1e6);
            size_t saved_elems, work_elems; /* bf16 elements per replica */
            if (pol == LF_RECOMPUTE_NONE) {
                saved_elems = L * Nr * (C + C + C + 4 * C) + Nr * C; /* ln_1, atty, ln_2, GELU per layer; ln_f */
                work_elems = 0;
            } else if (pol == LF_RECOMPUTE_SELECTIVE) {
                saved_elems = L * Nr * C + Nr * C;  /* atty per layer; ln_f */
                work_elems = Nr * C + Nr * 4 * C;   /* the shared ln buffer and the GELU buffer */
            } else {
                saved_elems = Nr * C;                        /* ln_f */
                work_elems = Nr * (C + C + C + 4 * C);       /* ln_1, ln_2, atty, GELU of the working block */
            }
            assert_int_equal(f.saved - h.saved, (size_t)reps * saved_elems * H);
            assert_int_equal(f.work - h.work, (size_t)reps * work_elems * H);
            assert_int_equal(f.logits, h.logits);
            assert_int_equal(f.replica_grads, h.replica_grads);
            assert_int_equal(f.total - h.total, (size_t)reps * (saved_elems + work_elems) * H);
        }
    }
}

/* The SmolLM-135M shape at B 4, T 256: bf16 storage saves half of each of
 * the Llama tensors it stores in bf16 (the two RMSNorm outputs, the
 * attention output, the SwiGLU output per layer; the final norm's output),
 * nothing else. */
static void test_llama_halves(void **state) {
    (void)state;
    lf_model_config c;
    LF_ASSERT_OK(lf_model_preset("smollm-135m", &c));
    const size_t b = 4, t = 256, N = b * t, H = sizeof(uint16_t);
    const size_t L = (size_t)c.n_layer, C = (size_t)c.n_embd, F = (size_t)c.ffn_hidden;
    for (int reps = 1; reps <= 2; reps++) {
        const size_t Nr = N / (size_t)reps;
        for (int pol = 0; pol < 3; pol++) {
            lf_act_bytes f, h;
            LF_ASSERT_OK(lf_model_plan_bytes(&c, (int)b, (int)t, (lf_recompute)pol, LF_ACT_FP32, reps, &f));
            LF_ASSERT_OK(lf_model_plan_bytes(&c, (int)b, (int)t, (lf_recompute)pol, LF_ACT_BF16, reps, &h));
            printf("smollm-135m B %zu T %zu, %d replica(s), %-9s: fp32 %.1f MB, bf16 %.1f MB\n", b, t, reps,
                   lf_recompute_name((lf_recompute)pol), f.total / 1e6, h.total / 1e6);
            size_t saved_elems, work_elems;
            if (pol == LF_RECOMPUTE_NONE) {
                saved_elems = L * Nr * (3 * C + F) + Nr * C; /* h1, atty, h2, sw per layer; the final norm */
                work_elems = 0;
            } else if (pol == LF_RECOMPUTE_SELECTIVE) {
                saved_elems = L * Nr * C + Nr * C; /* atty per layer; the final norm */
                work_elems = Nr * C + Nr * F;      /* the shared norm buffer and the SwiGLU buffer */
            } else {
                saved_elems = Nr * C;              /* the final norm */
                work_elems = Nr * (3 * C + F);     /* h1, h2, atty, sw of the working block */
            }
            assert_int_equal(f.saved - h.saved, (size_t)reps * saved_elems * H);
            assert_int_equal(f.work - h.work, (size_t)reps * work_elems * H);
            assert_int_equal(f.logits, h.logits);
            assert_int_equal(f.total - h.total, (size_t)reps * (saved_elems + work_elems) * H);
        }
    }
}

/* ---------------------------------------------------------------- API */

static void test_api(void **state) {
    (void)state;
    assert_string_equal(lf_act_dtype_name(LF_ACT_FP32), "fp32");
    assert_string_equal(lf_act_dtype_name(LF_ACT_BF16), "bf16");
    assert_string_equal(lf_act_dtype_name((lf_act_dtype)5), "?");
    lf_model_config c = small_config(0);

    /* fp32 backend: fp32 storage, bf16 refused */
    lf_model *m = NULL;
    LF_ASSERT_OK(lf_model_create(&m, &c, lf_backend_get("cpu")));
    assert_int_equal(lf_model_act_dtype(m), LF_ACT_FP32);
    assert_int_equal(lf_model_set_act_dtype(m, LF_ACT_BF16), LF_ERR_UNSUPPORTED);
    LF_ASSERT_ERR_CONTAINS("'cpu'");
    assert_int_equal(lf_model_act_dtype(m), LF_ACT_FP32);
    LF_ASSERT_OK(lf_model_set_act_dtype(m, LF_ACT_FP32));
    lf_model_free(m);

    /* cpu-bf16: bf16 by default; a change waits for the next plan */
    LF_ASSERT_OK(lf_model_create(&m, &c, lf_backend_get("cpu-bf16")));
    assert_int_equal(lf_model_act_dtype(m), LF_ACT_BF16);
    assert_int_equal(lf_model_set_act_dtype(m, (lf_act_dtype)2), LF_ERR_INVALID_ARG);
    size_t bf_bytes, fp_bytes;
    LF_ASSERT_OK(lf_model_plan(m, B, T, &bf_bytes));
    LF_ASSERT_OK(lf_model_set_act_dtype(m, LF_ACT_FP32));
    assert_int_equal(lf_model_act_dtype(m), LF_ACT_BF16);
    LF_ASSERT_OK(lf_model_plan(m, B, T, &fp_bytes));
    assert_int_equal(lf_model_act_dtype(m), LF_ACT_FP32);
    assert_true(bf_bytes < fp_bytes);
    lf_act_bytes ab;
    LF_ASSERT_OK(lf_model_plan_bytes(&c, B, T, LF_RECOMPUTE_NONE, LF_ACT_BF16, lf_backend_cpu_threads(), &ab));
    assert_int_equal(ab.total, bf_bytes);
    lf_model_free(m);
}

int main(int argc, char **argv) {
    if (argc > 1 && lf_arch_parse(argv[1], &g_arch) != LF_OK) return 2;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bit_identical_no_dropout_1_thread),
        cmocka_unit_test(test_bit_identical_no_dropout_2_threads),
        cmocka_unit_test(test_bit_identical_dropout_1_thread),
        cmocka_unit_test(test_bit_identical_dropout_2_threads),
        cmocka_unit_test(test_bit_identical_dropout_threaded_ops),
        cmocka_unit_test(test_planned_equals_allocated),
        cmocka_unit_test(test_gpt2_small_halves),
        cmocka_unit_test(test_llama_halves),
        cmocka_unit_test(test_api),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
