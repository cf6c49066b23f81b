/*
 * The whole GPT-2 on the "cpu-bf16" backend against the same model on "cpu"
 * (fp32): same initial weights and batch; the loss, the logits and every
 * parameter gradient within bf16 error of fp32 and never NaN; and a few
 * AdamW steps (the backend's adamw_update, which also renews its bf16 weight
 * copies) keep the two losses together while they fall: stale copies would
 * leave the bf16 loss behind.
 */
#include "test_util.h"
#include "backend/backend_impl.h"
#include "llmforge/backend.h"
#include "llmforge/model.h"
#include "llmforge/backend_cpu.h"

enum { B = 4, T = 32, V = 97, STEPS = 8 };

static lf_model_config small_config(void) {
    lf_model_config c = {.n_layer = 2, .n_head = 4, .n_embd = 64, .block_size = T, .vocab_size = V,
                        .padded_vocab_size = 128, .bias = 1, .dropout = 0.0f};
    return c;
}

static void make_batch(int32_t *in, int32_t *tg) {
    /* a learnable pattern: the next token is a function of the current one */
    for (int i = 0; i < B * T; i++) {
        in[i] = (int32_t)(lf_rng_u64(9, LF_RNG_TEST, (uint64_t)i) % V);
        tg[i] = (in[i] * 7 + 3) % V;
    }
    tg[5] = -1; /* an ignored target */
}

typedef struct run {
    lf_model *m;
    lf_backend *be;
    float *m1, *m2;
} run;

static void run_open(run *r, const char *backend) {
    lf_model_config c = small_config();
    r->be = lf_backend_get(backend);
    assert_non_null(r->be);
    LF_ASSERT_OK(lf_model_create(&r->m, &c, r->be));
    LF_ASSERT_OK(lf_model_init_weights(r->m, 7));
    LF_ASSERT_OK(lf_model_plan(r->m, B, T, NULL));
    size_t n = lf_model_num_params(r->m);
    r->m1 = r->be->ops->alloc(r->be, n * sizeof(float));
    r->m2 = r->be->ops->alloc(r->be, n * sizeof(float));
    assert_non_null(r->m1);
    assert_non_null(r->m2);
    r->be->ops->zero(r->be, r->m1, n);
    r->be->ops->zero(r->be, r->m2, n);
}

static void run_close(run *r) {
    r->be->ops->free(r->be, r->m1);
    r->be->ops->free(r->be, r->m2);
    lf_model_free(r->m);
}

/* forward + backward; returns the mean loss */
static double step(run *r, const int32_t *in, const int32_t *tg) {
    lf_model_zero_grad(r->m);
    lf_forward_opts fo = {.dloss = 1.0f / (B * T - 1), .train = 1, .seed = 1, .key = 0};
    double loss;
    long valid;
    LF_ASSERT_OK(lf_model_forward(r->m, in, tg, B, T, &fo, &loss, &valid));
    assert_int_equal(valid, B * T - 1);
    LF_ASSERT_OK(lf_model_backward(r->m));
    return loss / (double)valid;
}

static double frob_rel(const float *a, const float *b, size_t n) {
    double e = 0, w = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        e += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        w += (double)b[i] * b[i];
    }
    return sqrt(e / (w > 0 ? w : 1));
}

static void test_forward_backward(void **state) {
    (void)state;
    int32_t in[B * T], tg[B * T];
    make_batch(in, tg);
    run f, h;
    run_open(&f, "cpu");
    run_open(&h, "cpu-bf16");
    print_message("bf16 kernel: %s\n", lf_backend_cpu_bf16_kernel());
    const size_t n = lf_model_num_params(f.m);
    assert_memory_equal(lf_model_params(f.m), lf_model_params(h.m), n * sizeof(float));

    double l32 = step(&f, in, tg), l16 = step(&h, in, tg);
    double dl = fabs(l16 - l32) / l32;
    double dg = frob_rel(lf_model_grads(h.m), lf_model_grads(f.m), n);
    print_message("loss fp32 %.6f bf16 %.6f (rel diff %.2e); gradients rel Frobenius diff %.2e\n", l32, l16, dl, dg);
    assert_true(isfinite(l16));
    assert_true(dl <= 1e-2);
    assert_true(dg <= 5e-2);
    assert_true(dg > 0); /* bf16 really changed the numbers */
    /* per tensor, too: no tensor's gradient is far off */
    int count;
    const lf_param_info *tab = lf_model_params_table(f.m, &count);
    for (int i = 0; i < count; i++) {
        double e = frob_rel(lf_model_grads(h.m) + tab[i].offset, lf_model_grads(f.m) + tab[i].offset, tab[i].numel);
        if (!(e <= 1e-1)) fail_msg("gradient of %s: rel Frobenius diff %.3g", tab[i].name, e);
    }

    /* logits without targets */
    LF_ASSERT_OK(lf_model_forward(f.m, in, NULL, B, T, NULL, NULL, NULL));
    LF_ASSERT_OK(lf_model_forward(h.m, in, NULL, B, T, NULL, NULL, NULL));
    double dlog = frob_rel(lf_model_logits(h.m), lf_model_logits(f.m), (size_t)B * T * 128);
    print_message("logits rel Frobenius diff %.2e\n", dlog);
    assert_true(dlog <= 2e-2);

    run_close(&f);
    run_close(&h);
}

static void test_training_steps(void **state) {
    (void)state;
    int32_t in[B * T], tg[B * T];
    make_batch(in, tg);
    run f, h;
    run_open(&f, "cpu");
    run_open(&h, "cpu-bf16");
    const size_t n = lf_model_num_params(f.m);
    double first32 = 0, l32 = 0, l16 = 0;
    for (int s = 1; s <= STEPS; s++) {
        l32 = step(&f, in, tg);
        l16 = step(&h, in, tg);
        if (s == 1) first32 = l32;
        if (!(fabs(l16 - l32) / l32 <= 2e-2)) fail_msg("step %d: loss fp32 %.6f bf16 %.6f", s, l32, l16);
        f.be->ops->adamw_update(f.be, lf_model_params(f.m), lf_model_grads(f.m), f.m1, f.m2, n, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.0f,
                           1.0f, s);
        h.be->ops->adamw_update(h.be, lf_model_params(h.m), lf_model_grads(h.m), h.m1, h.m2, n, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.0f,
                           1.0f, s);
    }
    print_message("after %d steps: loss fp32 %.6f bf16 %.6f (from %.6f)\n", STEPS, l32, l16, first32);
    assert_true(l32 < first32 - 0.1); /* it learns, so a stale weight copy would show */
    run_close(&f);
    run_close(&h);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_backward),
        cmocka_unit_test(test_training_steps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
