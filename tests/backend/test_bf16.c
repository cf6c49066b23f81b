/* The "cpu-bf16" backend: its table and kernel report; bf16 rounding; matmul
 * forward and backward (both weight layouts, odd and GPT-2-like sizes)
 * against double references on the exact operands (bf16 error bound, and not
 * fp32: the product really rounded its input) and on the operands the path
 * rounds (fp32 accumulation: tight). Each path's error model: oneDNN's bf16
 * instructions and their emulation round every operand (the layer input, the
 * weight, the output gradient); the path of CPUs without the instructions
 * rounds only the layer input, so its dinp is an fp32 product (fp32's
 * bound) and its forward is closer to fp32 than the emulation's.
 * Accumulation semantics (dinp overwritten, dweight and dbias +=); never NaN
 * on large inputs; every path, oneDNN against the emulation; replicas on
 * several threads at once; the weight-copy cache follows to_device,
 * adamw_update (which renews the copy of the tensor it updates, or makes
 * overlapped copies stale) and params_changed; AdamW itself is the fp32 one. */
#include <float.h>
#include <omp.h>
#include "ref_ops.h"
#include "slots.h"
#include "backend/cpu/cpu_internal.h"
#include "llmforge/backend.h"
#include "llmforge/backend_cpu.h"

static lf_backend *bf(void) { return lf_backend_get("cpu-bf16"); }
static lf_backend *fp(void) { return lf_backend_get("cpu"); }

#define BF16_TOL 2e-2   /* relative Frobenius error against the exact product */
#define BF16_MIN 1e-4   /* ... and at least this: the operands were rounded */
#define ACC_TOL 1e-5    /* against the exact product of the rounded operands */

/* Which operands a path rounds to bf16 before its fp32-accumulated product. */
typedef enum rounding {
    ROUND_ALL,   /* oneDNN's bf16 instructions, and their emulation: input, weight, output gradient */
    ROUND_INPUT, /* without bf16 instructions: the layer input only (it is stored in bf16) */
} rounding;

/* the path detected here */
static rounding detected(void) { return lf__cpu_bf16_uses_onednn() ? ROUND_ALL : ROUND_INPUT; }
static const char *detected_name(void) { return lf__cpu_bf16_uses_onednn() ? "oneDNN" : "fp32 products"; }

/* sqrt(sum (got-want)^2 / sum want^2); INFINITY when got holds a NaN */
static double frob_err(const float *got, const double *want, size_t n) {
    double e = 0, w = 0;
    for (size_t i = 0; i < n; i++) {
        if (got[i] != got[i]) return INFINITY;
        double d = (double)got[i] - want[i];
        e += d * d;
        w += want[i] * want[i];
    }
    return sqrt(e / (w > 0 ? w : 1));
}

static double frob_err_f(const float *got, const float *want, size_t n) {
    double *w = malloc((n ? n : 1) * sizeof(double));
    assert_non_null(w);
    for (size_t i = 0; i < n; i++) w[i] = want[i];
    double e = frob_err(got, w, n);
    free(w);
    return e;
}

/* t as a path multiplies it: rounded to bf16 when `round`, else exact */
static double *rounded_if(const ten *t, int round) {
    double *r = malloc((t->n ? t->n : 1) * sizeof(double));
    assert_non_null(r);
    for (size_t i = 0; i < t->n; i++) r[i] = round ? (double)lf__cpu_bf16_round(t->f[i]) : (double)t->f[i];
    return r;
}
static double *rounded(const ten *t) { return rounded_if(t, 1); }

/* dinp = dout @ W^T (IN_OUT) or dout @ W (OUT_IN); dW = inp^T @ dout or dout^T @ inp */
static void ref_matmul_backward(double *dinp, double *dw, const double *dout, const double *inp, const double *w,
                                int N, int C, int OC, lf_weight_layout L) {
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int o = 0; o < OC; o++)
                s += dout[(size_t)n * OC + o] * (L == LF_W_IN_OUT ? w[(size_t)c * OC + o] : w[(size_t)o * C + c]);
            dinp[(size_t)n * C + c] = s;
        }
    for (int c = 0; c < C; c++)
        for (int o = 0; o < OC; o++) {
            double s = 0;
            for (int n = 0; n < N; n++) s += inp[(size_t)n * C + c] * dout[(size_t)n * OC + o];
            if (L == LF_W_IN_OUT)
                dw[(size_t)c * OC + o] = s;
            else
                dw[(size_t)o * C + c] = s;
        }
}

static const int SIZES[][3] = {{21, 20, 13}, {37, 67, 45}, {1, 5, 3}, {256, 128, 384}};
#define NSIZES ((int)(sizeof SIZES / sizeof SIZES[0]))

/* ------------------------------------------------------------- table, kernel, rounding */

static void test_table(void **state) {
    (void)state;
    lf_backend *o = bf();
    assert_string_equal(o->ops->name, "cpu-bf16");
    assert_ptr_equal(lf_backend_get("cpu-bf16"), o);
    assert_ptr_equal(lf_backend_get("cpu"), fp());
    assert_null(lf_backend_get("cpu-fp8"));
    LF_ASSERT_ERR_CONTAINS("cpu-bf16");
    lf_test_required_slots(o->ops);
    assert_true(o->ops->act_dtypes == (LF_DT_BIT(LF_DT_F32) | LF_DT_BIT(LF_DT_BF16)));
    /* everything but matmul and the parameter-writing ops is the fp32 op */
    assert_ptr_equal(o->ops->layernorm_forward, fp()->ops->layernorm_forward);
    assert_ptr_equal(o->ops->attention_backward, fp()->ops->attention_backward);
    assert_ptr_equal(o->ops->rmsnorm_backward, fp()->ops->rmsnorm_backward);
    assert_ptr_equal(o->ops->rope_forward, fp()->ops->rope_forward);
    assert_ptr_equal(o->ops->swiglu_forward, fp()->ops->swiglu_forward);
    assert_ptr_equal(o->ops->crossentropy_forward_backward, fp()->ops->crossentropy_forward_backward);
    assert_ptr_not_equal(o->ops->matmul_forward, fp()->ops->matmul_forward);
}

static void test_kernel_report(void **state) {
    (void)state;
    const char *k = lf_backend_cpu_bf16_kernel();
    assert_non_null(k);
    print_message("bf16 kernel: %s\n", k);
    static const char fp32_path[] = "fp32 products on bf16-stored activations (";
    if (lf__cpu_bf16_uses_onednn())
        assert_true(strncmp(k, "oneDNN ", 7) == 0);
    else
        assert_true(strncmp(k, fp32_path, strlen(fp32_path)) == 0);
    lf__cpu_bf16_force_fallback(1);
    assert_false(lf__cpu_bf16_uses_onednn());
    assert_true(strncmp(lf_backend_cpu_bf16_kernel(), fp32_path, strlen(fp32_path)) == 0);
    lf__cpu_bf16_force_emulation(1);
    assert_false(lf__cpu_bf16_uses_onednn());
    assert_true(strncmp(lf_backend_cpu_bf16_kernel(), "bf16 emulation (", 16) == 0);
    lf__cpu_bf16_force_emulation(0);
    assert_string_equal(lf_backend_cpu_bf16_kernel(), k);
}

static void test_rounding(void **state) {
    (void)state;
    const float one = 1.0f, ulp = 0x1p-7f; /* bf16 spacing at 1 */
    assert_true(lf__cpu_bf16_round(one) == one);
    assert_true(lf__cpu_bf16_round(one + 0.5f * ulp) == one);              /* tie: to even */
    assert_true(lf__cpu_bf16_round(one + 1.5f * ulp) == one + 2.0f * ulp); /* tie: to even */
    assert_true(lf__cpu_bf16_round(one + 0.6f * ulp) == one + ulp);
    assert_true(lf__cpu_bf16_round(-3.0f) == -3.0f);
    assert_true(lf__cpu_bf16_round(0.0f) == 0.0f);
    assert_true(isinf(lf__cpu_bf16_round(INFINITY)));
    assert_true(isinf(lf__cpu_bf16_round(FLT_MAX))); /* above bf16's largest finite */
    assert_true(isnan(lf__cpu_bf16_round(NAN)));
    uint32_t snan_bits = 0x7F800001u; /* low payload only: truncation would make inf */
    float snan;
    memcpy(&snan, &snan_bits, sizeof snan);
    assert_true(isnan(lf__cpu_bf16_round(snan)));
    /* relative rounding error is at most the unit roundoff 2^-8 (8 significant bits) */
    for (int i = 0; i < 10000; i++) {
        float x = lf_rng_normal(3, LF_RNG_TEST, (uint64_t)i) * 100.0f;
        assert_true(fabs((double)lf__cpu_bf16_round(x) - x) <= fabs((double)x) * 0x1p-8);
    }
}

/* ------------------------------------------------------------- matmul */

static void check_forward(const char *path, rounding rnd) {
    for (int s = 0; s < NSIZES; s++)
        for (int L = 0; L < 2; L++)
            for (int with_bias = 0; with_bias < 2; with_bias++) {
                const int N = SIZES[s][0], C = SIZES[s][1], OC = SIZES[s][2];
                const lf_weight_layout lay = (lf_weight_layout)L;
                ten inp = ten_rand((size_t)N * C, 1.0f, 11), w = ten_rand((size_t)C * OC, 0.5f, 12 + s);
                ten b = ten_rand((size_t)OC, 0.3f, 13), out = ten_new((size_t)N * OC);
                float *f32 = malloc(out.n * sizeof(float));
                double *ir = rounded(&inp), *wr = rounded_if(&w, rnd == ROUND_ALL);
                double *exact_r = malloc(out.n * sizeof(double));
                bf()->ops->params_changed(bf()); /* w's buffer is new */
                bf()->ops->matmul_forward(bf(), out.f, inp.f, LF_DT_F32, w.f, with_bias ? b.f : NULL, N, C, OC, lay);
                fp()->ops->matmul_forward(fp(), f32, inp.f, LF_DT_F32, w.f, with_bias ? b.f : NULL, N, C, OC, lay);
                ref_matmul_forward(out.d, inp.d, w.d, with_bias ? b.d : NULL, N, C, OC, lay);
                ref_matmul_forward(exact_r, ir, wr, with_bias ? b.d : NULL, N, C, OC, lay);
                double e = frob_err(out.f, out.d, out.n), er = frob_err(out.f, exact_r, out.n);
                if (!(e <= BF16_TOL) || !(er <= ACC_TOL) || (N * C > 8 && !(e >= BF16_MIN)))
                    fail_msg("%s forward N=%d C=%d OC=%d layout %d bias %d: error %.3g vs exact, %.3g vs rounded "
                             "operands",
                             path, N, C, OC, L, with_bias, e, er);
                if (N * C > 8 && !memcmp(out.f, f32, out.n * sizeof(float)))
                    fail_msg("%s forward N=%d C=%d OC=%d: bit-identical to fp32", path, N, C, OC);
                ten_free(&inp), ten_free(&w), ten_free(&b), ten_free(&out);
                free(f32), free(ir), free(wr), free(exact_r);
            }
}

static void check_backward(const char *path, rounding rnd) {
    for (int s = 0; s < NSIZES; s++)
        for (int L = 0; L < 2; L++) {
            const int N = SIZES[s][0], C = SIZES[s][1], OC = SIZES[s][2];
            const lf_weight_layout lay = (lf_weight_layout)L;
            ten inp = ten_rand((size_t)N * C, 1.0f, 21), w = ten_rand((size_t)C * OC, 0.5f, 22 + s);
            ten dout = ten_rand((size_t)N * OC, 0.7f, 23);
            ten pre = ten_rand((size_t)C * OC, 2.0f, 24), preb = ten_rand((size_t)OC, 1.0f, 25);
            const size_t nx = (size_t)N * C, nw = (size_t)C * OC;
            float *dinp = malloc(nx * sizeof(float)), *dw = floats_copy(pre.f, nw), *db = floats_copy(preb.f, OC);
            float *db32 = floats_copy(preb.f, OC), *dw32 = calloc(nw, sizeof(float));
            for (size_t i = 0; i < nx; i++) dinp[i] = NAN; /* dinp is overwritten: never read */
            double *rdinp = malloc(nx * sizeof(double)), *rdw = malloc(nw * sizeof(double));
            double *rrdinp = malloc(nx * sizeof(double)), *rrdw = malloc(nw * sizeof(double));
            double *ir = rounded(&inp), *wr = rounded_if(&w, rnd == ROUND_ALL);
            double *dr = rounded_if(&dout, rnd == ROUND_ALL), *want = malloc(nw * sizeof(double));
            ref_matmul_backward(rdinp, rdw, dout.d, inp.d, w.d, N, C, OC, lay);
            ref_matmul_backward(rrdinp, rrdw, dr, ir, wr, N, C, OC, lay);
            bf()->ops->params_changed(bf());

            bf()->ops->matmul_backward(bf(), dinp, dw, db, dout.f, inp.f, LF_DT_F32, w.f, N, C, OC, lay);
            double e = frob_err(dinp, rdinp, nx), er = frob_err(dinp, rrdinp, nx);
            /* dinp = dout W^T: bf16 operands on ROUND_ALL, an fp32 product on ROUND_INPUT */
            if (!(e <= BF16_TOL) || !(er <= ACC_TOL) || (rnd == ROUND_ALL && OC > 3 && !(e >= BF16_MIN)) ||
                (rnd == ROUND_INPUT && !(e <= ACC_TOL)))
                fail_msg("%s dinp N=%d C=%d OC=%d layout %d: error %.3g vs exact, %.3g vs rounded", path, N, C, OC, L,
                         e, er);
            /* dweight += : prefill + product */
            for (size_t i = 0; i < nw; i++) want[i] = pre.d[i] + rrdw[i];
            er = frob_err(dw, want, nw);
            for (size_t i = 0; i < nw; i++) dw32[i] = dw[i] - pre.f[i];
            e = frob_err(dw32, rdw, nw);
            if (!(er <= ACC_TOL) || !(e <= BF16_TOL))
                fail_msg("%s dweight N=%d C=%d OC=%d layout %d: error %.3g vs prefill + rounded product, %.3g vs "
                         "exact",
                         path, N, C, OC, L, er, e);
            /* dbias += from the fp32 dout: exactly the fp32 op's */
            fp()->ops->matmul_backward(fp(), NULL, dw32, db32, dout.f, inp.f, LF_DT_F32, w.f, N, C, OC, lay);
            assert_memory_equal(db, db32, OC * sizeof(float));

            /* again, without dinp: dweight accumulates a second product */
            bf()->ops->matmul_backward(bf(), NULL, dw, NULL, dout.f, inp.f, LF_DT_F32, w.f, N, C, OC, lay);
            for (size_t i = 0; i < nw; i++) want[i] = pre.d[i] + 2 * rrdw[i];
            er = frob_err(dw, want, nw);
            if (!(er <= ACC_TOL)) fail_msg("%s dweight twice: error %.3g", path, er);
            assert_memory_equal(db, db32, OC * sizeof(float)); /* NULL dbias untouched */

            ten_free(&inp), ten_free(&w), ten_free(&dout), ten_free(&pre), ten_free(&preb);
            free(dinp), free(dw), free(db), free(db32), free(dw32), free(rdinp), free(rdw), free(rrdinp), free(rrdw);
            free(ir), free(wr), free(dr), free(want);
        }
}

static void test_matmul_forward(void **state) {
    (void)state;
    check_forward(detected_name(), detected());
}

static void test_matmul_backward(void **state) {
    (void)state;
    check_backward(detected_name(), detected());
}

/* the path of CPUs without bf16 instructions, and the emulation of them, on any CPU */
static void test_fallback_path(void **state) {
    (void)state;
    lf__cpu_bf16_force_fallback(1);
    check_forward("fp32 products", ROUND_INPUT);
    check_backward("fp32 products", ROUND_INPUT);
    lf__cpu_bf16_force_emulation(1);
    check_forward("emulation", ROUND_ALL);
    check_backward("emulation", ROUND_ALL);
    lf__cpu_bf16_force_emulation(0);
}

/* The path without bf16 instructions is the fp32 op ("cpu") on the input
 * rounded to bf16, bit for bit: the same kernel on the same operands and
 * thread count (its gemv for few rows too), whether the input comes in fp32
 * or stored in bf16; the weights and output gradients as they are. */
static void test_fp32_path_is_fp32_op(void **state) {
    (void)state;
    static const int sizes[][3] = {{21, 20, 13}, {1, 64, 96}, {3, 48, 40}, {256, 128, 384}};
    lf__cpu_bf16_force_fallback(1);
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
        for (int L = 0; L < 2; L++) {
            const int N = sizes[s][0], C = sizes[s][1], OC = sizes[s][2];
            const size_t nx = (size_t)N * C, nw = (size_t)C * OC, no = (size_t)N * OC;
            const lf_weight_layout lay = (lf_weight_layout)L;
            ten inp = ten_rand(nx, 1.0f, 81), w = ten_rand(nw, 0.5f, 82), b = ten_rand((size_t)OC, 0.3f, 83);
            ten dout = ten_rand(no, 0.7f, 84), pre = ten_rand(nw, 2.0f, 85), preb = ten_rand((size_t)OC, 1.0f, 86);
            float *xr = malloc(nx * sizeof(float));
            uint16_t *xh = malloc(nx * sizeof(uint16_t));
            lf__cpu_cast_bf16(xh, inp.f, nx);
            for (size_t i = 0; i < nx; i++) xr[i] = lf__cpu_bf16_round(inp.f[i]);
            float *o[3], *di[3], *dw[3], *db[3];
            for (int k = 0; k < 3; k++) {
                o[k] = malloc(no * sizeof(float)), di[k] = malloc(nx * sizeof(float));
                dw[k] = floats_copy(pre.f, nw), db[k] = floats_copy(preb.f, (size_t)OC);
            }
            bf()->ops->params_changed(bf());
            fp()->ops->matmul_forward(fp(), o[0], xr, LF_DT_F32, w.f, b.f, N, C, OC, lay);
            bf()->ops->matmul_forward(bf(), o[1], inp.f, LF_DT_F32, w.f, b.f, N, C, OC, lay);
            bf()->ops->matmul_forward(bf(), o[2], xh, LF_DT_BF16, w.f, b.f, N, C, OC, lay);
            fp()->ops->matmul_backward(fp(), di[0], dw[0], db[0], dout.f, xr, LF_DT_F32, w.f, N, C, OC, lay);
            bf()->ops->matmul_backward(bf(), di[1], dw[1], db[1], dout.f, inp.f, LF_DT_F32, w.f, N, C, OC, lay);
            bf()->ops->matmul_backward(bf(), di[2], dw[2], db[2], dout.f, xh, LF_DT_BF16, w.f, N, C, OC, lay);
            for (int k = 1; k < 3; k++)
                if (memcmp(o[k], o[0], no * sizeof(float)) || memcmp(di[k], di[0], nx * sizeof(float)) ||
                    memcmp(dw[k], dw[0], nw * sizeof(float)) || memcmp(db[k], db[0], (size_t)OC * sizeof(float)))
                    fail_msg("N=%d C=%d OC=%d layout %d, input %s: not the fp32 op on the rounded input", N, C, OC, L,
                             k == 1 ? "fp32" : "bf16");
            for (int k = 0; k < 3; k++) free(o[k]), free(di[k]), free(dw[k]), free(db[k]);
            free(xr), free(xh);
            ten_free(&inp), ten_free(&w), ten_free(&b), ten_free(&dout), ten_free(&pre), ten_free(&preb);
        }
    lf__cpu_bf16_force_fallback(0);
}

/* A GPT-2 block's product (64 x 768 @ 768 x 3072, both layouts), forward
 * and backward, on one path; the outputs malloc'd. */
static void gpt2_block_product(int L, float **o, float **x, float **w) {
    const int N = 64, C = 768, OC = 3072;
    ten inp = ten_rand((size_t)N * C, 1.0f, 31), wt = ten_rand((size_t)C * OC, 0.02f, 32);
    ten b = ten_rand(OC, 0.1f, 33), dout = ten_rand((size_t)N * OC, 1e-3f, 34);
    *o = malloc((size_t)N * OC * sizeof(float));
    *x = malloc((size_t)N * C * sizeof(float));
    *w = calloc((size_t)C * OC, sizeof(float));
    bf()->ops->params_changed(bf());
    bf()->ops->matmul_forward(bf(), *o, inp.f, LF_DT_F32, wt.f, b.f, N, C, OC, (lf_weight_layout)L);
    bf()->ops->matmul_backward(bf(), *x, *w, NULL, dout.f, inp.f, LF_DT_F32, wt.f, N, C, OC, (lf_weight_layout)L);
    ten_free(&inp), ten_free(&wt), ten_free(&b), ten_free(&dout);
}

/* The path without bf16 instructions is closer to fp32 than the bf16
 * instructions' numbers (their emulation): one operand of the forward and
 * of dweight rounded instead of two, none of dinp's. Rounding errors of
 * independent operands add in variance, so over 196608 outputs the forward's
 * error is below the emulation's by far more than its spread; dinp is fp32's
 * up to summation order. */
static void test_fp32_path_closer_to_fp32(void **state) {
    (void)state;
    const int N = 64, C = 768, OC = 3072;
    for (int L = 0; L < 2; L++) {
        float *of, *xf, *wf, *o1, *x1, *w1, *o2, *x2, *w2;
        /* fp32 reference: the cpu table */
        ten inp = ten_rand((size_t)N * C, 1.0f, 31), wt = ten_rand((size_t)C * OC, 0.02f, 32);
        ten b = ten_rand(OC, 0.1f, 33), dout = ten_rand((size_t)N * OC, 1e-3f, 34);
        of = malloc((size_t)N * OC * sizeof(float)), xf = malloc((size_t)N * C * sizeof(float));
        wf = calloc((size_t)C * OC, sizeof(float));
        fp()->ops->matmul_forward(fp(), of, inp.f, LF_DT_F32, wt.f, b.f, N, C, OC, (lf_weight_layout)L);
        fp()->ops->matmul_backward(fp(), xf, wf, NULL, dout.f, inp.f, LF_DT_F32, wt.f, N, C, OC, (lf_weight_layout)L);
        ten_free(&inp), ten_free(&wt), ten_free(&b), ten_free(&dout);
        lf__cpu_bf16_force_fallback(1);
        gpt2_block_product(L, &o1, &x1, &w1);
        lf__cpu_bf16_force_emulation(1);
        gpt2_block_product(L, &o2, &x2, &w2);
        lf__cpu_bf16_force_emulation(0);
        const double eo1 = frob_err_f(o1, of, (size_t)N * OC), eo2 = frob_err_f(o2, of, (size_t)N * OC);
        const double ex1 = frob_err_f(x1, xf, (size_t)N * C), ex2 = frob_err_f(x2, xf, (size_t)N * C);
        const double ew1 = frob_err_f(w1, wf, (size_t)C * OC), ew2 = frob_err_f(w2, wf, (size_t)C * OC);
        print_message("layout %d, error against fp32, fp32 path / emulation: out %.3g / %.3g, dinp %.3g / %.3g, "
                      "dweight %.3g / %.3g\n", L, eo1, eo2, ex1, ex2, ew1, ew2);
        if (!(eo1 < 0.9 * eo2 && ew1 < 0.9 * ew2 && ex1 <= ACC_TOL && ex2 >= BF16_MIN && eo1 >= BF16_MIN))
            fail_msg("layout %d: the fp32 path is not closer to fp32 than the emulation", L);
        free(of), free(xf), free(wf), free(o1), free(x1), free(w1), free(o2), free(x2), free(w2);
    }
}

/* oneDNN and the emulation of the bf16 instructions multiply the same
 * rounded operands: they agree to fp32 summation order (a GPT-2 block's
 * shapes, both layouts). */
static void test_onednn_matches_emulation(void **state) {
    (void)state;
    if (!lf__cpu_bf16_uses_onednn()) skip();
    const int N = 64, C = 768, OC = 3072;
    for (int L = 0; L < 2; L++) {
        ten inp = ten_rand((size_t)N * C, 1.0f, 31), w = ten_rand((size_t)C * OC, 0.02f, 32);
        ten b = ten_rand(OC, 0.1f, 33), dout = ten_rand((size_t)N * OC, 1e-3f, 34);
        float *o1 = malloc((size_t)N * OC * sizeof(float)), *o2 = malloc((size_t)N * OC * sizeof(float));
        float *x1 = malloc((size_t)N * C * sizeof(float)), *x2 = malloc((size_t)N * C * sizeof(float));
        float *w1 = calloc((size_t)C * OC, sizeof(float)), *w2 = calloc((size_t)C * OC, sizeof(float));
        bf()->ops->params_changed(bf());
        bf()->ops->matmul_forward(bf(), o1, inp.f, LF_DT_F32, w.f, b.f, N, C, OC, (lf_weight_layout)L);
        bf()->ops->matmul_backward(bf(), x1, w1, NULL, dout.f, inp.f, LF_DT_F32, w.f, N, C, OC, (lf_weight_layout)L);
        lf__cpu_bf16_force_emulation(1);
        bf()->ops->matmul_forward(bf(), o2, inp.f, LF_DT_F32, w.f, b.f, N, C, OC, (lf_weight_layout)L);
        bf()->ops->matmul_backward(bf(), x2, w2, NULL, dout.f, inp.f, LF_DT_F32, w.f, N, C, OC, (lf_weight_layout)L);
        lf__cpu_bf16_force_emulation(0);
        double e1 = frob_err_f(o1, o2, (size_t)N * OC), e2 = frob_err_f(x1, x2, (size_t)N * C);
        double e3 = frob_err_f(w1, w2, (size_t)C * OC);
        if (!(e1 <= ACC_TOL && e2 <= ACC_TOL && e3 <= ACC_TOL))
            fail_msg("layout %d: oneDNN vs emulation out %.3g dinp %.3g dweight %.3g", L, e1, e2, e3);
        ten_free(&inp), ten_free(&w), ten_free(&b), ten_free(&dout);
        free(o1), free(o2), free(x1), free(x2), free(w1), free(w2);
    }
}

/* Large magnitudes: bf16 has fp32's exponent range, so nothing overflows. A
 * NaN input stays NaN in the rows it reaches (never hidden). */
static void test_never_nan(void **state) {
    (void)state;
    const int N = 33, C = 96, OC = 80;
    ten inp = ten_rand((size_t)N * C, 1e4f, 41), w = ten_rand((size_t)C * OC, 1e3f, 42);
    ten dout = ten_rand((size_t)N * OC, 1e4f, 43);
    float *out = malloc((size_t)N * OC * sizeof(float)), *dinp = malloc((size_t)N * C * sizeof(float));
    float *dw = calloc((size_t)C * OC, sizeof(float)), *db = calloc(OC, sizeof(float));
    bf()->ops->params_changed(bf());
    bf()->ops->matmul_forward(bf(), out, inp.f, LF_DT_F32, w.f, NULL, N, C, OC, LF_W_IN_OUT);
    bf()->ops->matmul_backward(bf(), dinp, dw, db, dout.f, inp.f, LF_DT_F32, w.f, N, C, OC, LF_W_IN_OUT);
    for (size_t i = 0; i < (size_t)N * OC; i++) assert_true(isfinite(out[i]));
    for (size_t i = 0; i < (size_t)N * C; i++) assert_true(isfinite(dinp[i]));
    for (size_t i = 0; i < (size_t)C * OC; i++) assert_true(isfinite(dw[i]));
    inp.f[5 * C + 7] = NAN; /* row 5 */
    bf()->ops->matmul_forward(bf(), out, inp.f, LF_DT_F32, w.f, NULL, N, C, OC, LF_W_IN_OUT);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) assert_true(n == 5 ? isnan(out[n * OC + o]) : isfinite(out[n * OC + o]));
    ten_free(&inp), ten_free(&w), ten_free(&dout);
    free(out), free(dinp), free(dw), free(db);
}

/* ------------------------------------------------------------- threads, weight cache */

typedef struct rep_job {
    const float *inp, *w, *dout;
    float *out[4], *dinp[4], *dw[4];
    int rows, C, OC;
} rep_job;

static void rep_task(void *arg, int i) {
    rep_job *j = arg;
    const size_t r0 = (size_t)i * j->rows;
    bf()->ops->matmul_forward(bf(), j->out[i], j->inp + r0 * j->C, LF_DT_F32, j->w, NULL, j->rows, j->C, j->OC, LF_W_IN_OUT);
    bf()->ops->matmul_backward(bf(), j->dinp[i], j->dw[i], NULL, j->dout + r0 * j->OC, j->inp + r0 * j->C, LF_DT_F32, j->w, j->rows, j->C,
                          j->OC, LF_W_IN_OUT);
}

/* Replicas on their own threads at once (what the model does), sharing the
 * weight's copy, each equal to its rows computed alone. */
static void test_replicas_threads(void **state) {
    (void)state;
    const int R = 4, rows = 48, C = 160, OC = 224, N = R * rows;
    ten inp = ten_rand((size_t)N * C, 1.0f, 51), w = ten_rand((size_t)C * OC, 0.1f, 52);
    ten dout = ten_rand((size_t)N * OC, 0.1f, 53);
    rep_job j = {.inp = inp.f, .w = w.f, .dout = dout.f, .rows = rows, .C = C, .OC = OC};
    for (int i = 0; i < R; i++) {
        j.out[i] = malloc((size_t)rows * OC * sizeof(float));
        j.dinp[i] = malloc((size_t)rows * C * sizeof(float));
        j.dw[i] = calloc((size_t)C * OC, sizeof(float));
    }
    bf()->ops->params_changed(bf());
    for (int round = 0; round < 3; round++) bf()->ops->run_replicas(bf(), R, rep_task, &j); /* dw: 3 products */
    float *o = malloc((size_t)rows * OC * sizeof(float)), *x = malloc((size_t)rows * C * sizeof(float));
    float *dw = calloc((size_t)C * OC, sizeof(float));
    for (int i = 0; i < R; i++) {
        const size_t r0 = (size_t)i * rows;
        memset(dw, 0, (size_t)C * OC * sizeof(float));
        bf()->ops->matmul_forward(bf(), o, inp.f + r0 * C, LF_DT_F32, w.f, NULL, rows, C, OC, LF_W_IN_OUT);
        for (int round = 0; round < 3; round++)
            bf()->ops->matmul_backward(bf(), x, dw, NULL, dout.f + r0 * OC, inp.f + r0 * C, LF_DT_F32, w.f, rows, C, OC, LF_W_IN_OUT);
        double e1 = frob_err_f(j.out[i], o, (size_t)rows * OC), e2 = frob_err_f(j.dinp[i], x, (size_t)rows * C);
        double e3 = frob_err_f(j.dw[i], dw, (size_t)C * OC);
        if (!(e1 <= 1e-6 && e2 <= 1e-6 && e3 <= 1e-6))
            fail_msg("replica %d: out %.3g dinp %.3g dweight %.3g against the same rows alone", i, e1, e2, e3);
    }
    for (int i = 0; i < R; i++) free(j.out[i]), free(j.dinp[i]), free(j.dw[i]);
    free(o), free(x), free(dw);
    ten_free(&inp), ten_free(&w), ten_free(&dout);
}

/* The bf16 copy of a weight is made once per generation of the parameters;
 * to_device, adamw_update and params_changed start a new one. Without
 * copies (the fp32 path) every product reads the weights as they are. */
static void check_weight_cache(int copies) {
    const int N = 8, C = 32, OC = 24;
    const size_t nw = (size_t)C * OC;
    ten inp = ten_rand((size_t)N * C, 1.0f, 61), w0 = ten_rand(nw, 0.5f, 62), w1 = ten_rand(nw, 0.5f, 63);
    float *w = bf()->ops->alloc(bf(), nw * sizeof(float)), *out = malloc((size_t)N * OC * sizeof(float));
    float *want = malloc((size_t)N * OC * sizeof(float));
    assert_non_null(w);
    bf()->ops->to_device(bf(), w, w0.f, nw * sizeof(float));
    bf()->ops->matmul_forward(bf(), out, inp.f, LF_DT_F32, w, NULL, N, C, OC, LF_W_IN_OUT);
    bf()->ops->matmul_forward(bf(), want, inp.f, LF_DT_F32, w0.f, NULL, N, C, OC, LF_W_IN_OUT);
    assert_memory_equal(out, want, (size_t)N * OC * sizeof(float));

    /* a host write the backend is not told about: the copy is still in use */
    memcpy(w, w1.f, nw * sizeof(float));
    bf()->ops->matmul_forward(bf(), out, inp.f, LF_DT_F32, w, NULL, N, C, OC, LF_W_IN_OUT);
    bf()->ops->matmul_forward(bf(), want, inp.f, LF_DT_F32, copies ? w0.f : w1.f, NULL, N, C, OC, LF_W_IN_OUT);
    assert_memory_equal(out, want, (size_t)N * OC * sizeof(float));
    /* ... until params_changed */
    bf()->ops->params_changed(bf());
    bf()->ops->matmul_forward(bf(), out, inp.f, LF_DT_F32, w, NULL, N, C, OC, LF_W_IN_OUT);
    bf()->ops->matmul_forward(bf(), want, inp.f, LF_DT_F32, w1.f, NULL, N, C, OC, LF_W_IN_OUT);
    assert_memory_equal(out, want, (size_t)N * OC * sizeof(float));

    /* to_device */
    bf()->ops->to_device(bf(), w, w0.f, nw * sizeof(float));
    bf()->ops->matmul_forward(bf(), out, inp.f, LF_DT_F32, w, NULL, N, C, OC, LF_W_IN_OUT);
    bf()->ops->matmul_forward(bf(), want, inp.f, LF_DT_F32, w0.f, NULL, N, C, OC, LF_W_IN_OUT);
    assert_memory_equal(out, want, (size_t)N * OC * sizeof(float));

    /* adamw_update moves the weights: the next product sees the new ones */
    float *g = calloc(nw, sizeof(float)), *m = calloc(nw, sizeof(float)), *v = calloc(nw, sizeof(float));
    for (size_t i = 0; i < nw; i++) g[i] = (float)((i % 7) - 3);
    bf()->ops->adamw_update(bf(), w, g, m, v, nw, 0.05f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f, 1);
    float *wn = malloc(nw * sizeof(float));
    bf()->ops->to_host(bf(), wn, w, nw * sizeof(float));
    assert_memory_not_equal(wn, w0.f, nw * sizeof(float));
    bf()->ops->matmul_forward(bf(), out, inp.f, LF_DT_F32, w, NULL, N, C, OC, LF_W_IN_OUT);
    bf()->ops->matmul_forward(bf(), want, inp.f, LF_DT_F32, wn, NULL, N, C, OC, LF_W_IN_OUT);
    assert_memory_equal(out, want, (size_t)N * OC * sizeof(float));

    /* adamw_update over a range holding two weights (neither exactly): both
     * copies go stale and are made again from the new values */
    float *two = bf()->ops->alloc(bf(), 2 * nw * sizeof(float)), *g2 = calloc(2 * nw, sizeof(float));
    float *m2 = calloc(2 * nw, sizeof(float)), *v2 = calloc(2 * nw, sizeof(float));
    float *out2 = malloc((size_t)N * OC * sizeof(float)), *host = malloc(2 * nw * sizeof(float));
    assert_non_null(two);
    bf()->ops->to_device(bf(), two, w0.f, nw * sizeof(float));
    bf()->ops->to_device(bf(), two + nw, w1.f, nw * sizeof(float));
    bf()->ops->matmul_forward(bf(), out, inp.f, LF_DT_F32, two, NULL, N, C, OC, LF_W_IN_OUT);
    bf()->ops->matmul_forward(bf(), out2, inp.f, LF_DT_F32, two + nw, NULL, N, C, OC, LF_W_IN_OUT);
    for (size_t i = 0; i < 2 * nw; i++) g2[i] = (float)((i % 5) - 2);
    bf()->ops->adamw_update(bf(), two, g2, m2, v2, 2 * nw, 0.05f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1);
    bf()->ops->to_host(bf(), host, two, 2 * nw * sizeof(float));
    for (int k = 0; k < 2; k++) {
        bf()->ops->matmul_forward(bf(), out, inp.f, LF_DT_F32, two + k * nw, NULL, N, C, OC, LF_W_IN_OUT);
        bf()->ops->matmul_forward(bf(), want, inp.f, LF_DT_F32, host + k * nw, NULL, N, C, OC, LF_W_IN_OUT);
        assert_memory_equal(out, want, (size_t)N * OC * sizeof(float));
    }
    bf()->ops->free(bf(), two);
    free(g2), free(m2), free(v2), free(out2), free(host);

    bf()->ops->free(bf(), w);
    bf()->ops->free(bf(), NULL);
    free(out), free(want), free(g), free(m), free(v), free(wn);
    ten_free(&inp), ten_free(&w0), ten_free(&w1);
}

static void test_weight_cache(void **state) {
    (void)state;
    check_weight_cache(lf__cpu_bf16_uses_onednn());
}

static void test_weight_cache_fallback(void **state) {
    (void)state;
    lf__cpu_bf16_force_fallback(1); /* no copies: the products read the weights */
    check_weight_cache(0);
    lf__cpu_bf16_force_emulation(1); /* rounded fp32 copies */
    check_weight_cache(1);
    lf__cpu_bf16_force_emulation(0);
}

/* AdamW on cpu-bf16 is AdamW on cpu, bit for bit (its weight copies aside). */
static void test_adamw_same(void **state) {
    (void)state;
    const size_t n = 100003;
    ten p = ten_rand(n, 1.0f, 71), g = ten_rand(n, 0.1f, 72), m = ten_rand(n, 0.01f, 73), v = ten_rand(n, 0.01f, 74);
    for (size_t i = 0; i < n; i++) v.f[i] = fabsf(v.f[i]);
    float *p2 = floats_copy(p.f, n), *m2 = floats_copy(m.f, n), *v2 = floats_copy(v.f, n);
    fp()->ops->adamw_update(fp(), p.f, g.f, m.f, v.f, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 3);
    bf()->ops->adamw_update(bf(), p2, g.f, m2, v2, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 3);
    assert_memory_equal(p.f, p2, n * sizeof(float));
    assert_memory_equal(m.f, m2, n * sizeof(float));
    assert_memory_equal(v.f, v2, n * sizeof(float));
    ten_free(&p), ten_free(&g), ten_free(&m), ten_free(&v);
    free(p2), free(m2), free(v2);
}

static void test_no_failures(void **state) {
    (void)state;
    assert_int_equal(lf__cpu_bf16_failures(), 0);
    lf__cpu_bf16_release(); /* and everything still works after a release */
    test_weight_cache(state);
    assert_int_equal(lf__cpu_bf16_failures(), 0);
    lf__cpu_bf16_release();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_kernel_report),
        cmocka_unit_test(test_rounding),
        cmocka_unit_test(test_matmul_forward),
        cmocka_unit_test(test_matmul_backward),
        cmocka_unit_test(test_fallback_path),
        cmocka_unit_test(test_fp32_path_is_fp32_op),
        cmocka_unit_test(test_fp32_path_closer_to_fp32),
        cmocka_unit_test(test_onednn_matches_emulation),
        cmocka_unit_test(test_never_nan),
        cmocka_unit_test(test_replicas_threads),
        cmocka_unit_test(test_weight_cache),
        cmocka_unit_test(test_weight_cache_fallback),
        cmocka_unit_test(test_adamw_same),
        cmocka_unit_test(test_no_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
