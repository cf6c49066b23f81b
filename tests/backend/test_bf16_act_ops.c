/* bf16 activation storage of "cpu-bf16" (backend_impl.h): each op is its fp32
 * counterpart, bit for bit, with the activation in bf16. cast_bf16 is
 * lf__cpu_bf16_bits element by element (ties to even, NaN stays NaN, inf,
 * overflow to inf, subnormals); layernorm_forward_bf16 and gelu_forward_bf16
 * write cast_bf16 of the fp32 op's output (and the same statistics), on 1
 * and 2 threads, above and below the size where the ops go parallel; the
 * matmul pair given cast_bf16(inp) writes exactly what the fp32-input pair
 * of the same table writes given inp (forward with and without bias, dinp,
 * dweight accumulated onto a prefill, dbias), both layouts, odd and
 * GPT-2-like sizes, on oneDNN and on the fallback, outside and inside
 * replicas. rmsnorm_forward and swiglu_forward in bf16 are likewise the
 * fp32 op rounded. When no scratch can be had for a bf16 operand, the
 * product is still computed (a plain loop, counted as a failure and
 * reported on the instance) and right. The "cpu" table refuses bf16
 * storage in every op that takes a dtype, on the instance's sticky status. */
#include <omp.h>
#include "ref_ops.h"
#include "backend/cpu/cpu_internal.h"
#include "llmforge/backend.h"
#include "llmforge/backend_cpu.h"

static lf_backend *bf(void) { return lf_backend_get("cpu-bf16"); }

static uint16_t *cast_of(const float *x, size_t n) {
    uint16_t *h = malloc((n ? n : 1) * sizeof(uint16_t));
    assert_non_null(h);
    bf()->ops->convert(bf(), h, LF_DT_BF16, x, n);
    return h;
}

static const int SIZES[][3] = {{21, 20, 13}, {37, 67, 45}, {1, 5, 3}, {256, 128, 384}, {64, 768, 96}};
#define NSIZES ((int)(sizeof SIZES / sizeof SIZES[0]))

static void test_tables(void **state) {
    (void)state;
    lf_backend *b = bf();
    assert_true(b->ops->act_dtypes & LF_DT_BIT(LF_DT_BF16));
    assert_false(lf_backend_get("cpu")->ops->act_dtypes & LF_DT_BIT(LF_DT_BF16));
    /* "cpu" refuses bf16 storage on the instance (no silent conversion), op by op */
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, w[8] = {1, 1, 1, 1, 1, 1, 1, 1}, y[8], st[2];
    uint16_t h[16];
    for (int op = 0; op < 6; op++) {
        lf_backend *f;
        LF_ASSERT_OK(lf_backend_open("cpu", &f));
        switch (op) {
        case 0: f->ops->convert(f, h, LF_DT_BF16, x, 8); break;
        case 1: f->ops->layernorm_forward(f, h, LF_DT_BF16, st, st, x, w, NULL, 2, 4); break;
        case 2: f->ops->rmsnorm_forward(f, h, LF_DT_BF16, st, x, w, 2, 4, 1e-5f); break;
        case 3: f->ops->gelu_forward(f, h, LF_DT_BF16, x, 8); break;
        case 4: f->ops->swiglu_forward(f, h, LF_DT_BF16, x, 2, 2); break;
        default: f->ops->matmul_forward(f, y, h, LF_DT_BF16, w, NULL, 2, 4, 2, LF_W_IN_OUT); break;
        }
        assert_int_equal(lf_backend_sync(f), LF_ERR_UNSUPPORTED);
        LF_ASSERT_ERR_CONTAINS("bf16 is not offered by backend 'cpu'");
        lf_backend_close(f);
    }
    LF_ASSERT_OK(lf_backend_sync(b));
}

/* rmsnorm_forward and swiglu_forward in bf16: convert of the fp32 output */
static void test_rmsnorm_swiglu(void **state) {
    (void)state;
    const int shapes[][2] = {{7, 20}, {33, 48}, {64, 576}, {5, 1}};
    for (int threads = 1; threads <= 2; threads++) {
        lf_backend_cpu_set_threads(threads);
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            const int N = shapes[s][0], C = shapes[s][1];
            const size_t n = (size_t)N * C;
            ten inp = ten_rand(n, 2.0f, 71 + s), w = ten_rand((size_t)C, 1.0f, 72);
            float *out = malloc(n * sizeof(float)), *rstd = malloc(N * sizeof(float)), *rstd_h = malloc(N * sizeof(float));
            uint16_t *out_h = malloc(n * sizeof(uint16_t));
            bf()->ops->rmsnorm_forward(bf(), out, LF_DT_F32, rstd, inp.f, w.f, N, C, 1e-6f);
            bf()->ops->rmsnorm_forward(bf(), out_h, LF_DT_BF16, rstd_h, inp.f, w.f, N, C, 1e-6f);
            uint16_t *want = cast_of(out, n);
            if (memcmp(out_h, want, n * sizeof(uint16_t)))
                fail_msg("rmsnorm N=%d C=%d, %d threads: bf16 output is not the cast fp32 output", N, C, threads);
            assert_memory_equal(rstd_h, rstd, N * sizeof(float));
            free(want);
            /* SwiGLU with F = C over the same rows read as [gate | up] of width 2F: N/2 rows */
            const int Ns = N / 2 > 0 ? N / 2 : 1, F = N / 2 > 0 ? C : (C + 1) / 2;
            if ((size_t)Ns * 2 * F <= n) {
                bf()->ops->swiglu_forward(bf(), out, LF_DT_F32, inp.f, Ns, F);
                bf()->ops->swiglu_forward(bf(), out_h, LF_DT_BF16, inp.f, Ns, F);
                want = cast_of(out, (size_t)Ns * F);
                if (memcmp(out_h, want, (size_t)Ns * F * sizeof(uint16_t)))
                    fail_msg("swiglu N=%d F=%d, %d threads: bf16 output is not the cast fp32 output", Ns, F, threads);
                free(want);
            }
            ten_free(&inp), ten_free(&w);
            free(out), free(rstd), free(rstd_h), free(out_h);
        }
    }
    lf_backend_cpu_set_threads(2);
}

static void test_cast(void **state) {
    (void)state;
    const uint32_t special[] = {0x00000000u, 0x80000000u, 0x3F800000u, 0x3F808000u, /* tie: to even (down) */
                                0x3F818000u,                                        /* tie: to even (up) */
                                0x3F808001u, 0x7F7FFFFFu,                           /* FLT_MAX: to inf */
                                0x7F800000u, 0xFF800000u, 0x7FC00000u, 0x7F800001u, /* signalling NaN, low payload */
                                0xFF800001u, 0x00000001u, 0x007FFFFFu, 0x80008000u};
    const size_t ns = sizeof special / sizeof special[0];
    const size_t n = 100000; /* above the parallel threshold */
    float *x = malloc(n * sizeof(float));
    assert_non_null(x);
    for (size_t i = 0; i < n; i++) x[i] = lf_rng_normal(31, LF_RNG_TEST, i) * 50.0f;
    for (size_t i = 0; i < ns; i++) memcpy(&x[i * 997], &special[i], sizeof(float));
    for (int threads = 1; threads <= 2; threads++) {
        lf_backend_cpu_set_threads(threads);
        uint16_t *h = cast_of(x, n);
        for (size_t i = 0; i < n; i++)
            if (h[i] != lf__cpu_bf16_bits(x[i])) fail_msg("cast of element %zu: %04x, want %04x", i, h[i],
                                                          lf__cpu_bf16_bits(x[i]));
        /* NaN stays NaN, never inf */
        for (size_t i = 0; i < ns; i++) {
            float v = lf__cpu_bf16_as_f32(h[i * 997]), o = x[i * 997];
            assert_true(isnan(v) == isnan(o));
        }
        free(h);
        uint16_t small[7];
        bf()->ops->convert(bf(), small, LF_DT_BF16, x, 7);
        for (int i = 0; i < 7; i++) assert_int_equal(small[i], lf__cpu_bf16_bits(x[i]));
    }
    free(x);
    lf_backend_cpu_set_threads(2);
}

static void test_layernorm(void **state) {
    (void)state;
    const int shapes[][2] = {{7, 20}, {33, 48}, {64, 768}, {5, 1}};
    for (int threads = 1; threads <= 2; threads++) {
        lf_backend_cpu_set_threads(threads);
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int with_bias = 0; with_bias < 2; with_bias++) {
                const int N = shapes[s][0], C = shapes[s][1];
                const size_t n = (size_t)N * C;
                ten inp = ten_rand(n, 2.0f, 41 + s), w = ten_rand((size_t)C, 1.0f, 42);
                ten b = ten_rand((size_t)C, 0.5f, 43);
                for (size_t i = 0; i < n; i++) inp.f[i] += 3.0f; /* an offset the mean removes */
                float *out = malloc(n * sizeof(float)), *mean = malloc(N * sizeof(float));
                float *rstd = malloc(N * sizeof(float));
                float *mean_h = malloc(N * sizeof(float)), *rstd_h = malloc(N * sizeof(float));
                uint16_t *out_h = malloc(n * sizeof(uint16_t));
                bf()->ops->layernorm_forward(bf(), out, LF_DT_F32, mean, rstd, inp.f, w.f, with_bias ? b.f : NULL, N, C);
                bf()->ops->layernorm_forward(bf(), out_h, LF_DT_BF16, mean_h, rstd_h, inp.f, w.f, with_bias ? b.f : NULL, N, C);
                uint16_t *want = cast_of(out, n);
                if (memcmp(out_h, want, n * sizeof(uint16_t)))
                    fail_msg("layernorm N=%d C=%d bias %d, %d threads: bf16 output is not the cast fp32 output", N, C,
                             with_bias, threads);
                assert_memory_equal(mean_h, mean, N * sizeof(float));
                assert_memory_equal(rstd_h, rstd, N * sizeof(float));
                ten_free(&inp), ten_free(&w), ten_free(&b);
                free(out), free(mean), free(rstd), free(mean_h), free(rstd_h), free(out_h), free(want);
            }
    }
    lf_backend_cpu_set_threads(2);
}

static void test_gelu(void **state) {
    (void)state;
    const size_t sizes[] = {1, 13, 4096, 100003};
    for (int threads = 1; threads <= 2; threads++) {
        lf_backend_cpu_set_threads(threads);
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            const size_t n = sizes[s];
            ten x = ten_rand(n, 3.0f, 51 + s);
            if (n > 10) { /* the tails: saturating, and far beyond */
                x.f[0] = 40.0f, x.f[1] = -40.0f, x.f[2] = 1e30f, x.f[3] = -1e30f, x.f[4] = 0.0f;
            }
            float *out = malloc(n * sizeof(float));
            uint16_t *out_h = malloc(n * sizeof(uint16_t));
            bf()->ops->gelu_forward(bf(), out, LF_DT_F32, x.f, n);
            bf()->ops->gelu_forward(bf(), out_h, LF_DT_BF16, x.f, n);
            uint16_t *want = cast_of(out, n);
            if (memcmp(out_h, want, n * sizeof(uint16_t)))
                fail_msg("gelu n=%zu, %d threads: bf16 output is not the cast fp32 output", n, threads);
            ten_free(&x);
            free(out), free(out_h), free(want);
        }
    }
    lf_backend_cpu_set_threads(2);
}

/* One size and layout: the bf16-input pair against the fp32-input pair. */
static void check_matmul(int N, int C, int OC, lf_weight_layout lay, const char *where) {
    const size_t nx = (size_t)N * C, nw = (size_t)C * OC, no = (size_t)N * OC;
    ten inp = ten_rand(nx, 1.0f, 61), w = ten_rand(nw, 0.5f, 62), b = ten_rand((size_t)OC, 0.3f, 63);
    ten dout = ten_rand(no, 0.7f, 64), pre = ten_rand(nw, 2.0f, 65), preb = ten_rand((size_t)OC, 1.0f, 66);
    uint16_t *inp_h = cast_of(inp.f, nx);
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        float *o32 = malloc(no * sizeof(float)), *o16 = malloc(no * sizeof(float));
        bf()->ops->matmul_forward(bf(), o32, inp.f, LF_DT_F32, w.f, with_bias ? b.f : NULL, N, C, OC, lay);
        bf()->ops->matmul_forward(bf(), o16, inp_h, LF_DT_BF16, w.f, with_bias ? b.f : NULL, N, C, OC, lay);
        if (memcmp(o16, o32, no * sizeof(float)))
            fail_msg("%s: forward N=%d C=%d OC=%d layout %d bias %d differs", where, N, C, OC, (int)lay, with_bias);
        free(o32), free(o16);
    }
    float *di32 = malloc(nx * sizeof(float)), *di16 = malloc(nx * sizeof(float));
    float *dw32 = floats_copy(pre.f, nw), *dw16 = floats_copy(pre.f, nw);
    float *db32 = floats_copy(preb.f, OC), *db16 = floats_copy(preb.f, OC);
    bf()->ops->matmul_backward(bf(), di32, dw32, db32, dout.f, inp.f, LF_DT_F32, w.f, N, C, OC, lay);
    bf()->ops->matmul_backward(bf(), di16, dw16, db16, dout.f, inp_h, LF_DT_BF16, w.f, N, C, OC, lay);
    if (memcmp(di16, di32, nx * sizeof(float)) || memcmp(dw16, dw32, nw * sizeof(float)) ||
        memcmp(db16, db32, OC * sizeof(float)))
        fail_msg("%s: backward N=%d C=%d OC=%d layout %d differs", where, N, C, OC, (int)lay);
    /* without dinp and dbias: dweight accumulates a second product */
    bf()->ops->matmul_backward(bf(), NULL, dw32, NULL, dout.f, inp.f, LF_DT_F32, w.f, N, C, OC, lay);
    bf()->ops->matmul_backward(bf(), NULL, dw16, NULL, dout.f, inp_h, LF_DT_BF16, w.f, N, C, OC, lay);
    if (memcmp(dw16, dw32, nw * sizeof(float)))
        fail_msg("%s: second backward N=%d C=%d OC=%d layout %d differs", where, N, C, OC, (int)lay);
    ten_free(&inp), ten_free(&w), ten_free(&b), ten_free(&dout), ten_free(&pre), ten_free(&preb);
    free(inp_h), free(di32), free(di16), free(dw32), free(dw16), free(db32), free(db16);
}

static void check_all_matmuls(const char *where) {
    bf()->ops->params_changed(bf()); /* new weight buffers at old addresses */
    for (int s = 0; s < NSIZES; s++)
        for (int L = 0; L < 2; L++) {
            check_matmul(SIZES[s][0], SIZES[s][1], SIZES[s][2], (lf_weight_layout)L, where);
            bf()->ops->params_changed(bf());
        }
}

static void test_matmul(void **state) {
    (void)state;
    print_message("bf16 kernel: %s\n", lf_backend_cpu_bf16_kernel());
    for (int threads = 1; threads <= 2; threads++) {
        lf_backend_cpu_set_threads(threads);
        check_all_matmuls(lf__cpu_bf16_uses_onednn() ? "oneDNN" : "fp32 products");
        lf__cpu_bf16_force_fallback(1);
        check_all_matmuls("fp32 products");
        lf__cpu_bf16_force_emulation(1);
        check_all_matmuls("emulation");
        lf__cpu_bf16_force_emulation(0);
    }
    lf_backend_cpu_set_threads(2);
    assert_int_equal(lf__cpu_bf16_failures(), 0);
}

/* Inside replicas: each thread runs single-threaded products with its own
 * oneDNN stream, primitives and scratch. */
static void replica_task(void *arg, int i) {
    (void)arg;
    check_matmul(SIZES[i % NSIZES][0], SIZES[i % NSIZES][1], SIZES[i % NSIZES][2], (lf_weight_layout)(i % 2),
                 "replica");
}

static void test_matmul_replicas(void **state) {
    (void)state;
    lf_backend_cpu_set_threads(2);
    bf()->ops->params_changed(bf());
    bf()->ops->run_replicas(bf(), 2, replica_task, NULL);
    lf_backend_cpu_set_threads(2);
    assert_int_equal(lf__cpu_bf16_failures(), 0);
}

/* No memory for the bf16 operand's expansion (the fp32 path's widened
 * input): the product still comes out, from the operands as stored (bf16
 * input, fp32 weight), and the failure is counted. */
static void test_no_scratch(void **state) {
    (void)state;
    lf_backend_cpu_set_threads(1);
    lf__cpu_bf16_force_fallback(1);
    const int N = 19, C = 33, OC = 27;
    const size_t nx = (size_t)N * C, nw = (size_t)C * OC, no = (size_t)N * OC;
    for (int L = 0; L < 2; L++) {
        const lf_weight_layout lay = (lf_weight_layout)L;
        ten inp = ten_rand(nx, 1.0f, 71), w = ten_rand(nw, 0.5f, 72), b = ten_rand((size_t)OC, 0.3f, 73);
        ten dout = ten_rand(no, 0.7f, 74);
        uint16_t *inp_h = cast_of(inp.f, nx);
        double *xr = malloc(nx * sizeof(double)), *want = malloc(no * sizeof(double));
        double *wdinp = malloc(nx * sizeof(double)), *wdw = malloc(nw * sizeof(double));
        for (size_t i = 0; i < nx; i++) xr[i] = lf__cpu_bf16_as_f32(inp_h[i]);
        ref_matmul_forward(want, xr, w.d, b.d, N, C, OC, lay);

        /* forward: the thread's state is the first allocation, and fails */
        lf__cpu_bf16_release();
        long f0 = lf__cpu_bf16_failures();
        float *out = malloc(no * sizeof(float));
        lf_alloc_fail_after(0);
        bf()->ops->matmul_forward(bf(), out, inp_h, LF_DT_BF16, w.f, b.f, N, C, OC, lay);
        lf_alloc_fail_after(-1);
        assert_true(lf__cpu_bf16_failures() > f0);
        REF_CHECK("forward without scratch", out, want, no, 1e-5);

        /* backward: dweight += inp^T dout (or dout^T inp) from the bf16 input */
        lf__cpu_bf16_release();
        f0 = lf__cpu_bf16_failures();
        float *dw = calloc(nw, sizeof(float)), *dinp = malloc(nx * sizeof(float));
        lf_alloc_fail_after(0);
        bf()->ops->matmul_backward(bf(), dinp, dw, NULL, dout.f, inp_h, LF_DT_BF16, w.f, N, C, OC, lay);
        lf_alloc_fail_after(-1);
        assert_true(lf__cpu_bf16_failures() > f0);
        double *dr = malloc(no * sizeof(double));
        for (size_t i = 0; i < no; i++) dr[i] = dout.d[i];
        /* the reference backward (test_bf16.c's formulas): dW over the stored operands */
        for (int c = 0; c < C; c++)
            for (int o = 0; o < OC; o++) {
                double s = 0;
                for (int n = 0; n < N; n++) s += xr[(size_t)n * C + c] * dr[(size_t)n * OC + o];
                wdw[L == LF_W_IN_OUT ? (size_t)c * OC + o : (size_t)o * C + c] = s;
            }
        for (int n = 0; n < N; n++)
            for (int c = 0; c < C; c++) {
                double s = 0;
                for (int o = 0; o < OC; o++)
                    s += dr[(size_t)n * OC + o] * (L == LF_W_IN_OUT ? w.d[(size_t)c * OC + o] : w.d[(size_t)o * C + c]);
                wdinp[(size_t)n * C + c] = s;
            }
        REF_CHECK("dweight without scratch", dw, wdw, nw, 1e-5);
        REF_CHECK("dinp without scratch", dinp, wdinp, nx, 2e-2); /* may be the rounded path */
        ten_free(&inp), ten_free(&w), ten_free(&b), ten_free(&dout);
        free(inp_h), free(xr), free(want), free(wdinp), free(wdw), free(out), free(dw), free(dinp), free(dr);
    }
    lf__cpu_bf16_force_fallback(0);
    lf__cpu_bf16_release();
    lf_backend_cpu_set_threads(2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tables),
        cmocka_unit_test(test_rmsnorm_swiglu),
        cmocka_unit_test(test_cast),
        cmocka_unit_test(test_layernorm),
        cmocka_unit_test(test_gelu),
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_matmul_replicas),
        cmocka_unit_test(test_no_scratch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
