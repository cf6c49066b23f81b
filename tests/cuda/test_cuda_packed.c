/*
 * The CUDA backend's packed-row ops (backend_impl.h "packed rows": SFT
 * packing; cuda_attention.cu, cuda_pointwise.cu) on the CUDA-on-CPU shim
 * (cuda.test_cuda_packed) and, with LF_CUDA, on a real GPU
 * (gpu.test_cuda_packed: SKIPPED where none answers). The CPU backend's
 * packed ops, checked against a double reference and against each example
 * run alone in tests/backend/test_packed.c, are the reference here.
 *
 * Checked, on rows packing examples of 1..70 tokens (T not a multiple of
 * the kernels' 64/32-row tiles, examples crossing tile edges), head sizes
 * 8, 32 and 64 (the three register-array instances), multi-head and
 * grouped-query heads, with and without attention dropout:
 *  - attention_forward_packed's out and attention_backward_packed's dqkv
 *    against the CPU's packed ops, within 16 T u of each tensor's scale: the
 *    fused kernels sum the same fp32 terms in another order (online softmax
 *    rescaling, the library expf against the CPU's 2-ulp one), each within
 *    the error model of tests/cuda/test_cuda_attention.c, whose bounds are
 *    below 8 T u of the scale at these sizes; attention across an example
 *    boundary would differ by O(1);
 *  - a row holding one example (pos[t] = t) gives the plain fused ops' bits
 *    (lo = 0 is the causal mask: the same arithmetic);
 *  - rope_*_packed and encoder_*_packed bit for bit against the plain CUDA
 *    ops run example by example (the same float operations per element;
 *    dwpe gathered in row order as the plain op's), and encoder_packed
 *    against the CPU's bits;
 *  - a NULL pos refused with the op's name;
 *  - a sliding window (model/packed.c: positions min(pos, W-1), so query t
 *    sees keys max(t-W+1, its example's start)..t), on whole and packed
 *    rows, against the CPU's packed ops within the same bound.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "../test_util.h"
#include "backend/cuda/cuda_internal.h"
#include "cuda_test_util.h"

static const double U = 1.0 / 16777216.0; /* 2^-24 */

static lf_backend *open_cuda(void) {
    lf_backend *be = NULL;
    LF_ASSERT_OK(lf__backend_open_ops(lf__backend_cuda(), &be));
    return be;
}

static void *dput(lf_backend *be, const void *h, size_t bytes) {
    void *d = be->ops->alloc(be, bytes ? bytes : 4);
    assert_non_null(d);
    if (h && bytes) be->ops->to_device(be, d, h, bytes);
    return d;
}

static void fill(float *x, size_t n, float a, uint64_t seed) {
    for (size_t i = 0; i < n; i++) x[i] = a * (2.0f * lf_rng_uniform(seed, LF_RNG_TEST, i) - 1.0f);
}

static int32_t *make_pos(const int *lens, int B, int T) {
    int32_t *pos = malloc((size_t)B * T * sizeof *pos);
    assert_non_null(pos);
    int k = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t += lens[k++])
            for (int i = 0; i < lens[k]; i++) pos[(size_t)b * T + t + i] = i;
    return pos;
}

static void check_close(const char *what, const float *got, const float *want, size_t n, double tol) {
    double scale = 1e-6, worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs((double)want[i]));
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)got[i] - (double)want[i]);
        if (!(e <= worst)) worst = e, at = i;
    }
    if (!(worst <= tol * scale))
        fail_msg("%s: element %zu: %.9g vs %.9g (error %.3g, bound %.3g)", what, at, (double)got[at], (double)want[at],
                 worst, tol * scale);
}

typedef struct pcase {
    int B, T, NH, NKV, HS;
    const int *lens;
} pcase;

/* forward + backward on backend be (packed when pos != NULL): out, dqkv to the host */
static void run(lf_backend *be, const pcase *c, const float *qkv, const float *dout, const int32_t *pos,
                lf_dropout drop, float *out, float *dqkv) {
    const int B = c->B, T = c->T, C = c->NH * c->HS;
    const size_t W = (size_t)C + 2 * (size_t)c->NKV * c->HS, nq = (size_t)B * T * W, no = (size_t)B * T * C;
    const size_t ns = be->ops->attention_saved(B, c->NH, T), nr = be->ops->attention_scratch(B, c->NH, T);
    float *d_qkv = dput(be, qkv, nq * 4), *d_dout = dput(be, dout, no * 4), *d_out = dput(be, NULL, no * 4);
    float *d_att = dput(be, NULL, ns * 4), *d_scr = dput(be, NULL, nr * 4), *d_dqkv = dput(be, NULL, nq * 4);
    int32_t *d_pos = pos ? dput(be, pos, (size_t)B * T * 4) : NULL;
    if (pos) {
        be->ops->attention_forward_packed(be, d_out, d_att, d_qkv, d_pos, B, T, C, c->NH, c->NKV, drop);
        be->ops->attention_backward_packed(be, d_dqkv, d_scr, d_dout, d_qkv, d_att, d_pos, B, T, C, c->NH, c->NKV,
                                           drop);
    } else {
        be->ops->attention_forward(be, d_out, d_att, d_qkv, B, T, C, c->NH, c->NKV, drop);
        be->ops->attention_backward(be, d_dqkv, d_scr, d_dout, d_qkv, d_att, B, T, C, c->NH, c->NKV, drop);
    }
    LF_ASSERT_OK(lf_backend_sync(be));
    be->ops->to_host(be, out, d_out, no * 4);
    be->ops->to_host(be, dqkv, d_dqkv, nq * 4);
    void *d[] = {d_qkv, d_dout, d_out, d_att, d_scr, d_dqkv, d_pos};
    for (int i = 0; i < 7; i++)
        if (d[i]) be->ops->free(be, d[i]);
}

static const int L1[] = {5, 70, 9, 16, 1, 1, 69, 30, 1}; /* B 2, T 101 */
static const int L2[] = {33, 32, 64, 1, 128};            /* B 2, T 129 */

static void test_attention_vs_cpu(void **state) {
    (void)state;
    NEED_DEVICE();
    lf_backend *be = open_cuda(), *cpu = lf_backend_get("cpu");
    assert_non_null(be->ops->attention_forward_packed);
    assert_non_null(be->ops->attention_backward_packed);
    const pcase cases[] = {{2, 101, 4, 4, 8, L1}, {2, 101, 4, 2, 32, L1}, {2, 129, 2, 1, 64, L2}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int k = 0; k < 2; k++) {
            const pcase *c = &cases[i];
            const lf_dropout drop = {k ? 0.2f : 0.0f, 7, 11, 0};
            const int B = c->B, T = c->T, C = c->NH * c->HS;
            const size_t W = (size_t)C + 2 * (size_t)c->NKV * c->HS, nq = (size_t)B * T * W, no = (size_t)B * T * C;
            float *qkv = malloc(nq * 4), *dout = malloc(no * 4);
            float *o1 = malloc(no * 4), *o2 = malloc(no * 4), *g1 = malloc(nq * 4), *g2 = malloc(nq * 4);
            fill(qkv, nq, 1.5f, 100 + i);
            fill(dout, no, 1.0f, 200 + i);
            int32_t *pos = make_pos(c->lens, B, T);
            run(be, c, qkv, dout, pos, drop, o1, g1);
            run(cpu, c, qkv, dout, pos, drop, o2, g2);
            char what[128];
            snprintf(what, sizeof what, "packed out HS %d NKV %d p %.1f", c->HS, c->NKV, (double)drop.p);
            check_close(what, o1, o2, no, 16.0 * T * U);
            snprintf(what, sizeof what, "packed dqkv HS %d NKV %d p %.1f", c->HS, c->NKV, (double)drop.p);
            check_close(what, g1, g2, nq, 16.0 * T * U);
            free(qkv), free(dout), free(o1), free(o2), free(g1), free(g2), free(pos);
        }
    lf_backend_close(be);
}

static void test_window_vs_cpu(void **state) {
    (void)state;
    NEED_DEVICE();
    lf_backend *be = open_cuda(), *cpu = lf_backend_get("cpu");
    static const int whole[] = {101, 101};
    const pcase cases[] = {{2, 101, 4, 4, 8, whole}, {2, 101, 4, 2, 32, L1}, {2, 129, 2, 1, 64, L2}};
    const int windows[] = {16, 40, 1};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const pcase *c = &cases[i];
        const int B = c->B, T = c->T, C = c->NH * c->HS, wn = windows[i];
        const size_t W = (size_t)C + 2 * (size_t)c->NKV * c->HS, nq = (size_t)B * T * W, no = (size_t)B * T * C;
        const lf_dropout drop = {i == 1 ? 0.2f : 0.0f, 7, 11, 0};
        float *qkv = malloc(nq * 4), *dout = malloc(no * 4);
        float *o1 = malloc(no * 4), *o2 = malloc(no * 4), *g1 = malloc(nq * 4), *g2 = malloc(nq * 4);
        fill(qkv, nq, 1.5f, 300 + i);
        fill(dout, no, 1.0f, 400 + i);
        int32_t *pos = make_pos(c->lens, B, T);
        for (size_t t = 0; t < (size_t)B * T; t++)
            if (pos[t] > wn - 1) pos[t] = wn - 1;
        run(be, c, qkv, dout, pos, drop, o1, g1);
        run(cpu, c, qkv, dout, pos, drop, o2, g2);
        char what[128];
        snprintf(what, sizeof what, "window %d out HS %d NKV %d", wn, c->HS, c->NKV);
        check_close(what, o1, o2, no, 16.0 * T * U);
        snprintf(what, sizeof what, "window %d dqkv HS %d NKV %d", wn, c->HS, c->NKV);
        check_close(what, g1, g2, nq, 16.0 * T * U);
        free(qkv), free(dout), free(o1), free(o2), free(g1), free(g2), free(pos);
    }
    lf_backend_close(be);
}

static void test_one_example_is_plain(void **state) {
    (void)state;
    NEED_DEVICE();
    lf_backend *be = open_cuda();
    const int lens[] = {101, 101};
    const pcase c = {2, 101, 4, 2, 32, lens};
    const size_t W = 4 * 32 + 2 * 2 * 32, nq = (size_t)2 * 101 * W, no = (size_t)2 * 101 * 128;
    float *qkv = malloc(nq * 4), *dout = malloc(no * 4);
    float *o1 = malloc(no * 4), *o2 = malloc(no * 4), *g1 = malloc(nq * 4), *g2 = malloc(nq * 4);
    fill(qkv, nq, 1.0f, 300);
    fill(dout, no, 1.0f, 301);
    int32_t *pos = make_pos(lens, 2, 101);
    const lf_dropout drop = {0.1f, 5, 6, 0};
    run(be, &c, qkv, dout, pos, drop, o1, g1);
    run(be, &c, qkv, dout, NULL, drop, o2, g2);
    assert_memory_equal(o1, o2, no * 4);
    assert_memory_equal(g1, g2, nq * 4);
    free(qkv), free(dout), free(o1), free(o2), free(g1), free(g2), free(pos);
    lf_backend_close(be);
}

static void test_rope_encoder(void **state) {
    (void)state;
    NEED_DEVICE();
    lf_backend *be = open_cuda(), *cpu = lf_backend_get("cpu");
    const int B = 2, T = 101, NH = 4, NKV = 2, HS = 10, C = 12, V = 40;
    const size_t W = (size_t)(NH + 2 * NKV) * HS, nq = (size_t)B * T * W, nc = (size_t)B * T * C;
    float inv[5];
    for (int i = 0; i < HS / 2; i++) inv[i] = 1.0f / powf(10000.0f, (float)(2 * i) / (float)HS);
    int32_t *pos = make_pos(L1, B, T), tok[2 * 101];
    for (int i = 0; i < B * T; i++) tok[i] = (int32_t)((i * 13 + 5) % V);
    float *x = malloc(nq * 4), *wte = malloc((size_t)V * C * 4), *wpe = malloc((size_t)T * C * 4),
          *dout = malloc(nc * 4);
    fill(x, nq, 1.0f, 400);
    fill(wte, (size_t)V * C, 1.0f, 401);
    fill(wpe, (size_t)T * C, 1.0f, 402);
    fill(dout, nc, 1.0f, 403);
    int32_t *d_pos = dput(be, pos, (size_t)B * T * 4), *d_tok = dput(be, tok, sizeof tok);
    float *d_wte = dput(be, wte, (size_t)V * C * 4), *d_wpe = dput(be, wpe, (size_t)T * C * 4);
    float *d_dout = dput(be, dout, nc * 4);
    float *px = dput(be, x, nq * 4), *py = dput(be, x, nq * 4), *ex = dput(be, x, nq * 4), *ey = dput(be, x, nq * 4);
    float *pout = dput(be, NULL, nc * 4), *eout = dput(be, NULL, nc * 4);
    float *zero = calloc((size_t)V * C + (size_t)T * C, 4);
    float *pg[2] = {dput(be, zero, (size_t)V * C * 4), dput(be, zero, (size_t)T * C * 4)};
    float *eg[2] = {dput(be, zero, (size_t)V * C * 4), dput(be, zero, (size_t)T * C * 4)};
    be->ops->rope_forward_packed(be, px, d_pos, B, T, NH, NKV, HS, inv, 1.25f);
    be->ops->rope_backward_packed(be, py, d_pos, B, T, NH, NKV, HS, inv, 1.25f);
    be->ops->encoder_forward_packed(be, pout, d_tok, d_pos, d_wte, d_wpe, B, T, C);
    be->ops->encoder_backward_packed(be, pg[0], pg[1], d_dout, d_tok, d_pos, B, T, C);
    int k = 0;
    for (int b = 0; b < B; b++)
        for (int t0 = 0; t0 < T; t0 += L1[k++]) {
            const size_t r = (size_t)b * T + t0;
            be->ops->rope_forward(be, ex + r * W, 1, L1[k], NH, NKV, HS, 0, inv, 1.25f);
            be->ops->rope_backward(be, ey + r * W, 1, L1[k], NH, NKV, HS, 0, inv, 1.25f);
            be->ops->encoder_forward(be, eout + r * C, d_tok + r, d_wte, d_wpe, 1, L1[k], C);
            be->ops->encoder_backward(be, eg[0], eg[1], d_dout + r * C, d_tok + r, 1, L1[k], C);
        }
    LF_ASSERT_OK(lf_backend_sync(be));
    const struct {
        const char *what;
        float *a, *b;
        size_t n;
    } cmp[] = {{"rope_forward_packed", px, ex, nq},
               {"rope_backward_packed", py, ey, nq},
               {"encoder_forward_packed", pout, eout, nc},
               {"encoder_backward_packed dwte", pg[0], eg[0], (size_t)V * C},
               {"encoder_backward_packed dwpe", pg[1], eg[1], (size_t)T * C}};
    float *cpu_out = malloc(nc * 4);
    cpu->ops->encoder_forward_packed(cpu, cpu_out, tok, pos, wte, wpe, B, T, C);
    for (size_t i = 0; i < sizeof cmp / sizeof cmp[0]; i++) {
        float *a = malloc(cmp[i].n * 4), *b = malloc(cmp[i].n * 4);
        be->ops->to_host(be, a, cmp[i].a, cmp[i].n * 4);
        be->ops->to_host(be, b, cmp[i].b, cmp[i].n * 4);
        if (memcmp(a, b, cmp[i].n * 4) != 0)
            fail_msg("%s differs from the plain op run example by example", cmp[i].what);
        if (i == 2 && memcmp(a, cpu_out, nc * 4) != 0) fail_msg("encoder_forward_packed differs from the CPU's bits");
        free(a), free(b);
    }
    void *d[] = {d_pos, d_tok, d_wte, d_wpe, d_dout, px, py, ex, ey, pout, eout, pg[0], pg[1], eg[0], eg[1]};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) be->ops->free(be, d[i]);
    free(pos), free(x), free(wte), free(wpe), free(dout), free(zero), free(cpu_out);
    lf_backend_close(be);
}

static void test_bad_args(void **state) {
    (void)state;
    NEED_DEVICE();
    lf_backend *be = open_cuda();
    float *buf = dput(be, NULL, 1024 * 4);
    const lf_dropout none = {0};
    be->ops->attention_forward_packed(be, buf, buf, buf, NULL, 1, 8, 32, 4, 4, none);
    assert_int_equal(lf_backend_sync(be), LF_ERR_INVALID_ARG);
    assert_non_null(strstr(lf_last_error(), "attention_forward_packed: pos is NULL"));
    be->ops->free(be, buf);
    lf_backend_close(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention_vs_cpu),
        cmocka_unit_test(test_window_vs_cpu),
        cmocka_unit_test(test_one_example_is_plain),
        cmocka_unit_test(test_rope_encoder),
        cmocka_unit_test(test_bad_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
