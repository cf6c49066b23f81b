/* The packed-row ops (backend_impl.h "packed rows": SFT packing) on every
 * CPU backend (cpu, cpu-bf16, cpu-fenced; the CUDA kernels are checked
 * against these in tests/cuda/test_cuda_packed.c):
 *  - attention_forward_packed against a double reference with the
 *    block-diagonal causal mask (out and the saved probabilities, exact
 *    zeros outside each example), on the GEMM path (dropout, T > 128) and
 *    the small-T register-tiled path at both vector widths;
 *  - each example of a packed row equals that example run alone through
 *    the plain ops: attention forward and backward within a bound from the
 *    summation order (below), RoPE and the encoder bit for bit;
 *  - a row holding one example (pos[t] = t) gives the plain ops' bits;
 *  - backward with dropout against finite differences of the reference;
 *  - a NULL pos is refused by name; positions that break the rule stay in
 *    bounds (clamped), never read outside wpe;
 *  - a sliding window W (model/packed.c: the attention ops get positions
 *    min(pos, W-1), query t sees keys max(t-W+1, start)..t), unpacked and
 *    packed rows, on the GEMM and the small-T paths: forward against the
 *    reference, backward against a double backward of the same masked
 *    softmax (the same error model as below), and with dropout against
 *    finite differences.
 * Tensors live in backend memory (alloc / to_device / to_host), so the
 * fenced backend checks that the ops touch nothing outside their call.
 *
 * Error model of the one-by-one comparison: the packed op and the op on one
 * example compute every output element from the same fp32 terms (the
 * masked ones are exact zeros), grouped differently (GEMM blocks, vector
 * lanes keyed by column). Two fp32 sums of n terms in different orders
 * differ by at most 2 n u sum|terms| (u = 2^-24); the terms' magnitudes are
 * those of the output's own scale here (softmax weights times v rows,
 * gradient rows of the same size), so the check is |got - want| <=
 * 8 T u max|want| with T the row length (a 4x margin). */
#include "ref_ops.h"
#include "backend/cpu/cpu_internal.h"

static const char *g_backends[] = {"cpu", "cpu-bf16", "cpu-fenced"};
#define N_BACKENDS 3
#define U32 (1.0 / 16777216.0)

/* ------------------------------------------------------------- helpers */

static void *dput(lf_backend *be, const void *host, size_t bytes) {
    void *d = be->ops->alloc(be, bytes ? bytes : 4);
    assert_non_null(d);
    if (host && bytes) be->ops->to_device(be, d, host, bytes);
    return d;
}

static void dget(lf_backend *be, void *host, const void *d, size_t bytes) { be->ops->to_host(be, host, d, bytes); }

/* positions of rows whose examples have the given lengths (each row's
 * lengths sum to T) */
static int32_t *make_pos(const int *lens, int nlens, int B, int T) {
    int32_t *pos = malloc((size_t)B * T * sizeof *pos);
    assert_non_null(pos);
    int k = 0;
    for (int b = 0; b < B; b++) {
        int t = 0;
        while (t < T) {
            assert_true(k < nlens);
            for (int i = 0; i < lens[k]; i++) pos[(size_t)b * T + t + i] = i;
            t += lens[k++];
        }
        assert_int_equal(t, T);
    }
    return pos;
}

/* double reference: query t sees keys t - pos[t] .. t */
static void ref_attention_packed(double *out, double *att, const double *qkv, const int32_t *pos, int B, int T, int C,
                                 int NH, int NKV, lf_dropout drop) {
    const int HS = C / NH, g = NH / NKV;
    const size_t W = (size_t)C + 2 * (size_t)NKV * HS;
    const double scale = 1.0 / sqrt((double)HS);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const int lo = t - pos[(size_t)b * T + t];
                double *a = att + (((size_t)b * NH + h) * T + t) * T;
                const double *q = qkv + ((size_t)b * T + t) * W + (size_t)h * HS;
                const size_t kv = (size_t)(h / g) * HS;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j < T; j++) a[j] = 0;
                for (int j = lo; j <= t; j++) {
                    const double *k = qkv + ((size_t)b * T + j) * W + C + kv;
                    double s = 0;
                    for (int i = 0; i < HS; i++) s += q[i] * k[i];
                    a[j] = s * scale;
                    mx = fmax(mx, a[j]);
                }
                for (int j = lo; j <= t; j++) sum += (a[j] = exp(a[j] - mx));
                for (int j = lo; j <= t; j++) a[j] /= sum;
                double *o = out + ((size_t)b * T + t) * C + (size_t)h * HS;
                for (int i = 0; i < HS; i++) o[i] = 0;
                for (int j = lo; j <= t; j++) {
                    double p = a[j];
                    if (drop.p > 0) {
                        const uint64_t idx = (((uint64_t)b * NH + h) * T + t) * T + (uint64_t)j;
                        p = ref_keep(drop, idx) ? p * ref_drop_scale(drop) : 0.0;
                    }
                    const double *v = qkv + ((size_t)b * T + j) * W + C + (size_t)NKV * HS + kv;
                    for (int i = 0; i < HS; i++) o[i] += p * v[i];
                }
            }
}

/* max |got - want| <= tol * max(max |want|, 1e-6) */
static void check_close(const char *what, const float *got, const float *want, size_t n, double tol) {
    double scale = 1e-6, worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs((double)want[i]));
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)got[i] - (double)want[i]);
        if (!(e <= worst)) {
            worst = e;
            at = i;
        }
    }
    if (!(worst <= tol * scale))
        fail_msg("%s: element %zu: %.9g vs %.9g (error %.3g of scale %.3g, bound %.3g)", what, at, (double)got[at],
                 (double)want[at], worst, scale, tol * scale);
}

/* ------------------------------------------------------------- attention */

typedef struct att_case {
    int B, T, C, NH, NKV;
    const int *lens;
    int nlens;
} att_case;

/* forward against the reference; every example against the plain ops alone */
static void attention_case(lf_backend *be, const att_case *c, float p) {
    const int B = c->B, T = c->T, C = c->C, NH = c->NH, NKV = c->NKV, HS = C / NH;
    const size_t W = (size_t)C + 2 * (size_t)NKV * HS, nq = (size_t)B * T * W, no = (size_t)B * T * C;
    const size_t na = be->ops->attention_saved(B, NH, T);
    lf_dropout drop = {p, 4242, 17, 0};
    int32_t *pos = make_pos(c->lens, c->nlens, B, T);
    ten qkv = ten_rand(nq, 1.5f, 40), dout = ten_rand(no, 1.0f, 41);
    ten out = ten_new(no), att = ten_new((size_t)B * NH * T * T);
    float *d_qkv = dput(be, qkv.f, nq * 4), *d_dout = dput(be, dout.f, no * 4);
    float *d_out = dput(be, NULL, no * 4), *d_att = dput(be, NULL, na * 4), *d_scr = dput(be, NULL, na * 4);
    float *d_dqkv = dput(be, NULL, nq * 4);
    int32_t *d_pos = dput(be, pos, (size_t)B * T * 4);
    be->ops->attention_forward_packed(be, d_out, d_att, d_qkv, d_pos, B, T, C, NH, NKV, drop);
    be->ops->attention_backward_packed(be, d_dqkv, d_scr, d_dout, d_qkv, d_att, d_pos, B, T, C, NH, NKV, drop);
    assert_int_equal(lf_backend_sync(be), LF_OK);
    float *dqkv = malloc(nq * 4);
    dget(be, out.f, d_out, no * 4);
    dget(be, att.f, d_att, na * 4);
    dget(be, dqkv, d_dqkv, nq * 4);

    char what[160];
    snprintf(what, sizeof what, "%s B%d T%d C%d NH%d NKV%d p%.2f", be->ops->name, B, T, C, NH, NKV, (double)p);
    ref_attention_packed(out.d, att.d, qkv.d, pos, B, T, C, NH, NKV, drop);
    REF_CHECK(what, out.f, out.d, no, 2e-6);
    REF_CHECK(what, att.f, att.d, att.n, 2e-6);
    for (size_t i = 0; i < att.n; i++) /* outside each example: exact zeros */
        if (att.d[i] == 0.0 && att.f[i] != 0.0f) fail_msg("%s: att[%zu] = %g outside the mask", what, i, att.f[i]);

    if (p == 0.0f) { /* each example alone (dropout indices differ there by design) */
        int k = 0;
        for (int b = 0; b < B; b++)
            for (int t0 = 0; t0 < T; t0 += c->lens[k++]) {
                const int L = c->lens[k];
                const size_t off = ((size_t)b * T + t0);
                const size_t sa = be->ops->attention_saved(1, NH, L);
                float *e_qkv = dput(be, qkv.f + off * W, (size_t)L * W * 4);
                float *e_dout = dput(be, dout.f + off * C, (size_t)L * C * 4);
                float *e_out = dput(be, NULL, (size_t)L * C * 4), *e_att = dput(be, NULL, sa * 4);
                float *e_scr = dput(be, NULL, sa * 4), *e_dqkv = dput(be, NULL, (size_t)L * W * 4);
                be->ops->attention_forward(be, e_out, e_att, e_qkv, 1, L, C, NH, NKV, drop);
                be->ops->attention_backward(be, e_dqkv, e_scr, e_dout, e_qkv, e_att, 1, L, C, NH, NKV, drop);
                assert_int_equal(lf_backend_sync(be), LF_OK);
                float *w_out = malloc((size_t)L * C * 4), *w_dqkv = malloc((size_t)L * W * 4);
                dget(be, w_out, e_out, (size_t)L * C * 4);
                dget(be, w_dqkv, e_dqkv, (size_t)L * W * 4);
                char ex[200];
                snprintf(ex, sizeof ex, "%s: example at row %d col %d (%d tokens) out", what, b, t0, L);
                check_close(ex, out.f + off * C, w_out, (size_t)L * C, 8.0 * T * U32);
                snprintf(ex, sizeof ex, "%s: example at row %d col %d (%d tokens) dqkv", what, b, t0, L);
                check_close(ex, dqkv + off * W, w_dqkv, (size_t)L * W, 8.0 * T * U32);
                free(w_out);
                free(w_dqkv);
                float *e[] = {e_qkv, e_dout, e_out, e_att, e_scr, e_dqkv};
                for (int i = 0; i < 6; i++) be->ops->free(be, e[i]);
            }
    }
    void *d[] = {d_qkv, d_dout, d_out, d_att, d_scr, d_dqkv, d_pos};
    for (int i = 0; i < 7; i++) be->ops->free(be, d[i]);
    free(dqkv);
    free(pos);
    ten_free(&qkv);
    ten_free(&dout);
    ten_free(&out);
    ten_free(&att);
}

static const int L_A[] = {5, 17, 9, 6, 1, 20, 16};        /* B 2, T 37: examples of 1..20 tokens */
static const int L_B[] = {64, 3, 63, 1, 1, 1, 60, 60, 7}; /* B 2, T 130: two row blocks, 1-token examples */
static const int L_C[] = {40, 88, 128};                   /* B 2, T 128: the small-T path's limit */

static void run_attention(lf_backend *be) {
    const att_case gpt2 = {2, 37, 20, 4, 4, L_A, 7}, gqa = {2, 37, 24, 8, 2, L_A, 7};
    const att_case blocks = {2, 130, 12, 3, 3, L_B, 9};
    const att_case fast16 = {2, 37, 64, 4, 4, L_A, 7}, fast_gqa = {2, 37, 128, 4, 2, L_A, 7};
    const att_case fast128 = {2, 128, 32, 2, 1, L_C, 3};
    attention_case(be, &gpt2, 0.0f);
    attention_case(be, &gpt2, 0.25f);
    attention_case(be, &gqa, 0.0f);
    attention_case(be, &gqa, 0.1f);
    attention_case(be, &blocks, 0.0f);
    attention_case(be, &blocks, 0.2f);
    attention_case(be, &fast16, 0.0f); /* HS 16: the register-tiled path where the CPU has one */
    attention_case(be, &fast_gqa, 0.0f);
    attention_case(be, &fast128, 0.0f);
    if (lf__cpu_attention_lanes(37, 16) == 16) { /* and its 8-lane kernels too */
        lf__cpu_attention_force_lanes(8);
        assert_int_equal(lf__cpu_attention_lanes(37, 16), 8);
        attention_case(be, &fast16, 0.0f);
        attention_case(be, &fast128, 0.0f);
        lf__cpu_attention_force_lanes(0);
    }
}

static void test_attention(void **state) {
    (void)state;
    for (int i = 0; i < N_BACKENDS; i++) {
        lf_backend *be = lf_backend_get(g_backends[i]);
        assert_non_null(be);
        assert_non_null(be->ops->attention_forward_packed);
        assert_non_null(be->ops->attention_backward_packed);
        run_attention(be);
    }
}

/* One example filling the row (pos[t] = t): the plain ops' bits. */
static void test_one_example_is_plain(void **state) {
    (void)state;
    const int shapes[][4] = {{37, 20, 4, 4}, {37, 64, 4, 2}, {130, 12, 3, 3}};
    for (int bi = 0; bi < N_BACKENDS; bi++) {
        lf_backend *be = lf_backend_get(g_backends[bi]);
        for (int s = 0; s < 3; s++) {
            const int T = shapes[s][0], C = shapes[s][1], NH = shapes[s][2], NKV = shapes[s][3], B = 2;
            const size_t W = (size_t)C + 2 * (size_t)NKV * (C / NH), nq = (size_t)B * T * W, no = (size_t)B * T * C;
            const size_t na = be->ops->attention_saved(B, NH, T);
            const int lens[] = {T, T};
            int32_t *pos = make_pos(lens, 2, B, T);
            ten qkv = ten_rand(nq, 1.0f, 50), dout = ten_rand(no, 1.0f, 51);
            float *d_qkv = dput(be, qkv.f, nq * 4), *d_dout = dput(be, dout.f, no * 4);
            int32_t *d_pos = dput(be, pos, (size_t)B * T * 4);
            float *r[2][4];
            for (int k = 0; k < 2; k++) {
                r[k][0] = dput(be, NULL, no * 4), r[k][1] = dput(be, NULL, na * 4);
                r[k][2] = dput(be, NULL, na * 4), r[k][3] = dput(be, NULL, nq * 4);
            }
            const lf_dropout none = {0};
            be->ops->attention_forward(be, r[0][0], r[0][1], d_qkv, B, T, C, NH, NKV, none);
            be->ops->attention_backward(be, r[0][3], r[0][2], d_dout, d_qkv, r[0][1], B, T, C, NH, NKV, none);
            be->ops->attention_forward_packed(be, r[1][0], r[1][1], d_qkv, d_pos, B, T, C, NH, NKV, none);
            be->ops->attention_backward_packed(be, r[1][3], r[1][2], d_dout, d_qkv, r[1][1], d_pos, B, T, C, NH, NKV,
                                               none);
            assert_int_equal(lf_backend_sync(be), LF_OK);
            const size_t sz[4] = {no, na, 0, nq};
            for (int k = 0; k < 4; k++) {
                if (!sz[k]) continue; /* scratch: contents undefined */
                float *a = malloc(sz[k] * 4), *b = malloc(sz[k] * 4);
                dget(be, a, r[0][k], sz[k] * 4);
                dget(be, b, r[1][k], sz[k] * 4);
                if (memcmp(a, b, sz[k] * 4) != 0)
                    fail_msg("%s T%d C%d: packed op with one example differs from the plain op (tensor %d)",
                             be->ops->name, T, C, k);
                free(a);
                free(b);
            }
            for (int k = 0; k < 2; k++)
                for (int j = 0; j < 4; j++) be->ops->free(be, r[k][j]);
            be->ops->free(be, d_qkv), be->ops->free(be, d_dout), be->ops->free(be, d_pos);
            free(pos);
            ten_free(&qkv);
            ten_free(&dout);
        }
    }
}

/* ------------------------------------------------------------- backward with dropout: finite differences */

typedef struct {
    double *qkv, *out, *att;
    const double *R;
    const int32_t *pos;
    int B, T, C, NH, NKV;
    lf_dropout drop;
} fd_ctx;

static double fd_loss(void *p) {
    fd_ctx *c = p;
    ref_attention_packed(c->out, c->att, c->qkv, c->pos, c->B, c->T, c->C, c->NH, c->NKV, c->drop);
    return ref_dot(c->out, c->R, (size_t)c->B * c->T * c->C);
}

static void test_backward_fd(void **state) {
    (void)state;
    lf_backend *be = lf_backend_get("cpu");
    const int B = 2, T = 11, C = 8, NH = 2, NKV = 1, lens[] = {4, 7, 1, 6, 4};
    const size_t W = (size_t)C + 2 * (size_t)NKV * (C / NH), nq = (size_t)B * T * W, no = (size_t)B * T * C;
    for (int k = 0; k < 2; k++) {
        lf_dropout drop = {k ? 0.3f : 0.0f, 99, 3, 0};
        int32_t *pos = make_pos(lens, 5, B, T);
        ten qkv = ten_rand(nq, 1.0f, 60), R = ten_rand(no, 1.0f, 61), out = ten_new(no);
        ten att = ten_new((size_t)B * NH * T * T), scr = ten_new(att.n), dqkv = ten_new(nq);
        be->ops->attention_forward_packed(be, out.f, att.f, qkv.f, pos, B, T, C, NH, NKV, drop);
        be->ops->attention_backward_packed(be, dqkv.f, scr.f, R.f, qkv.f, att.f, pos, B, T, C, NH, NKV, drop);
        assert_int_equal(lf_backend_sync(be), LF_OK);
        fd_ctx ctx = {qkv.d, out.d, att.d, R.d, pos, B, T, C, NH, NKV, drop};
        ref_fd_grad(dqkv.d, qkv.d, nq, fd_loss, &ctx);
        GRAD_CHECK(k ? "packed attention dqkv, dropout" : "packed attention dqkv", dqkv.f, NULL, dqkv.d, nq);
        free(pos);
        ten_free(&qkv);
        ten_free(&R);
        ten_free(&out);
        ten_free(&att);
        ten_free(&scr);
        ten_free(&dqkv);
    }
}

/* ------------------------------------------------------------- sliding window */

/* Attention positions of a window wn on rows of the given examples
 * (lens {T, T}: unpacked rows): min(pos, wn - 1). */
static int32_t *window_pos(const int *lens, int nlens, int B, int T, int wn) {
    int32_t *pos = make_pos(lens, nlens, B, T);
    for (size_t i = 0; i < (size_t)B * T; i++)
        if (pos[i] > wn - 1) pos[i] = wn - 1;
    return pos;
}

/* Double backward of ref_attention_packed without dropout, from its saved
 * probabilities att (B,NH,T,T): dv_j = sum_t P_tj g_t, dS_tj = P_tj (g_t.v_j
 * - sum_i P_ti g_t.v_i), dq_t = s sum_j dS_tj k_j, dk_j = s sum_t dS_tj q_t. */
static void ref_attention_backward(double *dqkv, const double *dout, const double *qkv, const double *att, int B, int T,
                                   int C, int NH, int NKV) {
    const int HS = C / NH, g = NH / NKV;
    const size_t W = (size_t)C + 2 * (size_t)NKV * HS;
    const double scale = 1.0 / sqrt((double)HS);
    double *ds = malloc((size_t)T * sizeof *ds);
    assert_non_null(ds);
    memset(dqkv, 0, (size_t)B * T * W * sizeof *dqkv);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double *a = att + (((size_t)b * NH + h) * T + t) * T,
                             *go = dout + ((size_t)b * T + t) * C + h * HS;
                const size_t qo = ((size_t)b * T + t) * W + (size_t)h * HS, kv = (size_t)(h / g) * HS;
                double dot = 0;
                for (int j = 0; j <= t; j++) {
                    const double *v = qkv + ((size_t)b * T + j) * W + C + (size_t)NKV * HS + kv;
                    double gv = 0;
                    for (int i = 0; i < HS; i++) gv += go[i] * v[i];
                    ds[j] = gv;
                    dot += a[j] * gv;
                }
                for (int j = 0; j <= t; j++) {
                    if (a[j] == 0.0) continue; /* masked */
                    const size_t ko = ((size_t)b * T + j) * W + C + kv, vo = ko + (size_t)NKV * HS;
                    const double d = a[j] * (ds[j] - dot) * scale;
                    for (int i = 0; i < HS; i++) {
                        dqkv[vo + i] += a[j] * go[i];
                        dqkv[qo + i] += d * qkv[ko + i];
                        dqkv[ko + i] += d * qkv[qo + i];
                    }
                }
            }
    free(ds);
}

static void window_case(lf_backend *be, const att_case *c, int wn) {
    const int B = c->B, T = c->T, C = c->C, NH = c->NH, NKV = c->NKV, HS = C / NH;
    const size_t W = (size_t)C + 2 * (size_t)NKV * HS, nq = (size_t)B * T * W, no = (size_t)B * T * C;
    const size_t na = be->ops->attention_saved(B, NH, T);
    const lf_dropout none = {0};
    int32_t *pos = window_pos(c->lens, c->nlens, B, T, wn);
    ten qkv = ten_rand(nq, 1.5f, 70), dout = ten_rand(no, 1.0f, 71), out = ten_new(no), dqkv = ten_new(nq);
    ten att = ten_new((size_t)B * NH * T * T);
    float *d_qkv = dput(be, qkv.f, nq * 4), *d_dout = dput(be, dout.f, no * 4);
    float *d_out = dput(be, NULL, no * 4), *d_att = dput(be, NULL, na * 4), *d_scr = dput(be, NULL, na * 4);
    float *d_dqkv = dput(be, NULL, nq * 4);
    int32_t *d_pos = dput(be, pos, (size_t)B * T * 4);
    be->ops->attention_forward_packed(be, d_out, d_att, d_qkv, d_pos, B, T, C, NH, NKV, none);
    be->ops->attention_backward_packed(be, d_dqkv, d_scr, d_dout, d_qkv, d_att, d_pos, B, T, C, NH, NKV, none);
    assert_int_equal(lf_backend_sync(be), LF_OK);
    dget(be, out.f, d_out, no * 4);
    dget(be, att.f, d_att, na * 4);
    dget(be, dqkv.f, d_dqkv, nq * 4);
    char what[160];
    snprintf(what, sizeof what, "%s window %d B%d T%d C%d NH%d NKV%d", be->ops->name, wn, B, T, C, NH, NKV);
    ref_attention_packed(out.d, att.d, qkv.d, pos, B, T, C, NH, NKV, none);
    REF_CHECK(what, out.f, out.d, no, 2e-6);
    REF_CHECK(what, att.f, att.d, att.n, 2e-6);
    for (int b = 0; b < B; b++) /* the window in the saved probabilities: exact zeros before t - wn + 1 */
        for (int h = 0; h < NH; h++)
            for (int t = wn; t < T; t++)
                for (int j = 0; j <= t - wn; j++)
                    if (att.f[(((size_t)b * NH + h) * T + t) * T + j] != 0.0f)
                        fail_msg("%s: query %d attends key %d, outside the window", what, t, j);
    ref_attention_backward(dqkv.d, dout.d, qkv.d, att.d, B, T, C, NH, NKV);
    snprintf(what + strlen(what), sizeof what - strlen(what), " dqkv");
    const double e = ref_err_d(dqkv.f, dqkv.d, nq, 1e-6);
    if (!(e <= 8.0 * T * U32)) fail_msg("%s: error %.3g exceeds %.3g", what, e, 8.0 * T * U32);
    void *d[] = {d_qkv, d_dout, d_out, d_att, d_scr, d_dqkv, d_pos};
    for (int i = 0; i < 7; i++) be->ops->free(be, d[i]);
    free(pos);
    ten_free(&qkv);
    ten_free(&dout);
    ten_free(&out);
    ten_free(&dqkv);
    ten_free(&att);
}

static void test_window(void **state) {
    (void)state;
    const int whole37[] = {37, 37}, whole130[] = {130, 130}, whole128[] = {128, 128};
    const att_case plain = {2, 37, 20, 4, 4, whole37, 2}, gqa = {2, 37, 24, 8, 2, L_A, 7};
    const att_case blocks = {2, 130, 12, 3, 3, whole130, 2}, blocks_p = {2, 130, 12, 3, 3, L_B, 9};
    const att_case fast16 = {2, 37, 64, 4, 4, whole37, 2}, fast128 = {2, 128, 32, 2, 1, whole128, 2};
    const att_case fast128_p = {2, 128, 32, 2, 1, L_C, 3};
    for (int i = 0; i < N_BACKENDS; i++) {
        lf_backend *be = lf_backend_get(g_backends[i]);
        window_case(be, &plain, 16);
        window_case(be, &plain, 1); /* each query its own key only */
        window_case(be, &gqa, 5);   /* packed rows and a window */
        window_case(be, &blocks, 70);
        window_case(be, &blocks_p, 33);
        window_case(be, &fast16, 7);
        window_case(be, &fast128, 16);
        window_case(be, &fast128_p, 50);
        if (lf__cpu_attention_lanes(37, 16) == 16) {
            lf__cpu_attention_force_lanes(8);
            window_case(be, &fast16, 7);
            window_case(be, &fast128, 16);
            lf__cpu_attention_force_lanes(0);
        }
    }
    /* with dropout: finite differences of the reference (cpu) */
    lf_backend *be = lf_backend_get("cpu");
    const int B = 2, T = 11, C = 8, NH = 2, NKV = 1, lens[] = {11, 11};
    const size_t W = (size_t)C + 2 * (size_t)NKV * (C / NH), nq = (size_t)B * T * W, no = (size_t)B * T * C;
    lf_dropout drop = {0.3f, 99, 3, 0};
    int32_t *pos = window_pos(lens, 2, B, T, 4);
    ten qkv = ten_rand(nq, 1.0f, 72), R = ten_rand(no, 1.0f, 73), out = ten_new(no);
    ten att = ten_new((size_t)B * NH * T * T), scr = ten_new(att.n), dqkv = ten_new(nq);
    be->ops->attention_forward_packed(be, out.f, att.f, qkv.f, pos, B, T, C, NH, NKV, drop);
    be->ops->attention_backward_packed(be, dqkv.f, scr.f, R.f, qkv.f, att.f, pos, B, T, C, NH, NKV, drop);
    assert_int_equal(lf_backend_sync(be), LF_OK);
    fd_ctx ctx = {qkv.d, out.d, att.d, R.d, pos, B, T, C, NH, NKV, drop};
    ref_fd_grad(dqkv.d, qkv.d, nq, fd_loss, &ctx);
    GRAD_CHECK("windowed attention dqkv, dropout", dqkv.f, NULL, dqkv.d, nq);
    free(pos);
    ten_free(&qkv);
    ten_free(&R);
    ten_free(&out);
    ten_free(&att);
    ten_free(&scr);
    ten_free(&dqkv);
}

/* ------------------------------------------------------------- RoPE and the encoder: bit for bit */

static void test_rope_encoder(void **state) {
    (void)state;
    const int B = 2, T = 37, NH = 4, NKV = 2, HS = 10, C = 12, V = 50;
    const size_t W = (size_t)(NH + 2 * NKV) * HS, nq = (size_t)B * T * W;
    int32_t *pos = make_pos(L_A, 7, B, T);
    int32_t tok[2 * 37];
    for (int i = 0; i < B * T; i++) tok[i] = (int32_t)((i * 7 + 3) % V);
    const float *inv = ref_rope_table(HS, 10000.0f);
    ten x = ten_rand(nq, 1.0f, 70), wte = ten_rand((size_t)V * C, 1.0f, 71), wpe = ten_rand((size_t)T * C, 1.0f, 72);
    ten dout = ten_rand((size_t)B * T * C, 1.0f, 73);
    for (int bi = 0; bi < N_BACKENDS; bi++) {
        lf_backend *be = lf_backend_get(g_backends[bi]);
        const char *name = be->ops->name;
        int32_t *d_pos = dput(be, pos, (size_t)B * T * 4), *d_tok = dput(be, tok, (size_t)B * T * 4);
        float *d_wte = dput(be, wte.f, wte.n * 4), *d_wpe = dput(be, wpe.f, wpe.n * 4);
        float *d_dout = dput(be, dout.f, dout.n * 4);
        /* packed: rope forward then backward on one copy; plain per example on another */
        float *px = dput(be, x.f, nq * 4), *py = dput(be, x.f, nq * 4), *ex = dput(be, x.f, nq * 4),
              *ey = dput(be, x.f, nq * 4);
        float *pout = dput(be, NULL, dout.n * 4), *eout = dput(be, NULL, dout.n * 4);
        float *pg[2] = {dput(be, NULL, wte.n * 4), dput(be, NULL, wpe.n * 4)};
        float *eg[2] = {dput(be, NULL, wte.n * 4), dput(be, NULL, wpe.n * 4)};
        for (int k = 0; k < 2; k++) {
            be->ops->zero(be, pg[k], k ? wpe.n : wte.n);
            be->ops->zero(be, eg[k], k ? wpe.n : wte.n);
        }
        be->ops->rope_forward_packed(be, px, d_pos, B, T, NH, NKV, HS, inv, 1.0f);
        be->ops->rope_backward_packed(be, py, d_pos, B, T, NH, NKV, HS, inv, 1.0f);
        be->ops->encoder_forward_packed(be, pout, d_tok, d_pos, d_wte, d_wpe, B, T, C);
        be->ops->encoder_backward_packed(be, pg[0], pg[1], d_dout, d_tok, d_pos, B, T, C);
        int k = 0;
        for (int b = 0; b < B; b++)
            for (int t0 = 0; t0 < T; t0 += L_A[k++]) {
                const size_t r = (size_t)b * T + t0;
                const int L = L_A[k];
                be->ops->rope_forward(be, ex + r * W, 1, L, NH, NKV, HS, 0, inv, 1.0f);
                be->ops->rope_backward(be, ey + r * W, 1, L, NH, NKV, HS, 0, inv, 1.0f);
                be->ops->encoder_forward(be, eout + r * C, d_tok + r, d_wte, d_wpe, 1, L, C);
                be->ops->encoder_backward(be, eg[0], eg[1], d_dout + r * C, d_tok + r, 1, L, C);
            }
        assert_int_equal(lf_backend_sync(be), LF_OK);
        const struct {
            const char *what;
            float *a, *b;
            size_t n;
        } cmp[] = {{"rope_forward_packed", px, ex, nq},
                   {"rope_backward_packed", py, ey, nq},
                   {"encoder_forward_packed", pout, eout, dout.n},
                   {"encoder_backward_packed dwte", pg[0], eg[0], wte.n},
                   {"encoder_backward_packed dwpe", pg[1], eg[1], wpe.n}};
        for (size_t i = 0; i < sizeof cmp / sizeof cmp[0]; i++) {
            float *a = malloc(cmp[i].n * 4), *b = malloc(cmp[i].n * 4);
            dget(be, a, cmp[i].a, cmp[i].n * 4);
            dget(be, b, cmp[i].b, cmp[i].n * 4);
            if (memcmp(a, b, cmp[i].n * 4) != 0)
                fail_msg("%s: %s differs from the plain op run example by example", name, cmp[i].what);
            free(a);
            free(b);
        }
        void *d[] = {d_pos, d_tok, d_wte, d_wpe, d_dout, px, py, ex, ey, pout, eout, pg[0], pg[1], eg[0], eg[1]};
        for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) be->ops->free(be, d[i]);
    }
    free(pos);
    ten_free(&x);
    ten_free(&wte);
    ten_free(&wpe);
    ten_free(&dout);
}

/* ------------------------------------------------------------- bad input */

static void test_bad_input(void **state) {
    (void)state;
    /* NULL pos: refused by the op's name (own instance: failures are sticky) */
    lf_backend *be = NULL;
    assert_int_equal(lf_backend_open("cpu", &be), LF_OK);
    float buf[64] = {0};
    const lf_dropout none = {0};
    be->ops->attention_forward_packed(be, buf, buf, buf, NULL, 1, 2, 4, 2, 2, none);
    assert_int_equal(lf_backend_sync(be), LF_ERR_INVALID_ARG);
    assert_non_null(strstr(lf_last_error(), "attention_forward_packed: pos is NULL"));
    lf_backend_close(be);
    assert_int_equal(lf_backend_open("cpu", &be), LF_OK);
    be->ops->encoder_forward_packed(be, buf, (const int32_t *)buf, (const int32_t *)buf, buf, NULL, 1, 2, 4);
    assert_int_equal(lf_backend_sync(be), LF_ERR_INVALID_ARG);
    assert_non_null(strstr(lf_last_error(), "encoder_forward_packed: wpe is NULL"));
    lf_backend_close(be);

    /* positions past the row's column (or negative) are clamped: in bounds */
    lf_backend *f = lf_backend_get("cpu-fenced");
    const int T = 4, C = 4;
    const int32_t bad[4] = {0, 1000, -5, 2};
    const int32_t tok[4] = {1, 2, 3, 0};
    ten wte = ten_rand(4 * C, 1.0f, 80), wpe = ten_rand((size_t)T * C, 1.0f, 81);
    int32_t *d_pos = dput(f, bad, sizeof bad), *d_tok = dput(f, tok, sizeof tok);
    float *d_wte = dput(f, wte.f, wte.n * 4), *d_wpe = dput(f, wpe.f, wpe.n * 4), *d_out = dput(f, NULL, T * C * 4);
    f->ops->encoder_forward_packed(f, d_out, d_tok, d_pos, d_wte, d_wpe, 1, T, C);
    f->ops->encoder_backward_packed(f, d_wte, d_wpe, d_out, d_tok, d_pos, 1, T, C);
    assert_int_equal(lf_backend_sync(f), LF_OK);
    void *d[] = {d_pos, d_tok, d_wte, d_wpe, d_out};
    for (int i = 0; i < 5; i++) f->ops->free(f, d[i]);
    ten_free(&wte);
    ten_free(&wpe);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention),   cmocka_unit_test(test_one_example_is_plain),
        cmocka_unit_test(test_backward_fd), cmocka_unit_test(test_rope_encoder),
        cmocka_unit_test(test_bad_input),   cmocka_unit_test(test_window),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
