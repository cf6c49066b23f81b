/*
 * The CUDA backend's element-wise ops (cuda_ops_pointwise.c and its
 * kernels) against the "cpu" backend: on the CUDA-on-CPU shim
 * (cuda.test_cuda_pointwise) and, with LF_CUDA, the real GPU
 * (gpu.test_cuda_pointwise: SKIPPED where none answers). The norms and the
 * loss are in test_cuda_norm_loss.c.
 *
 * Checked, per op, on random inputs with sizes that are not multiples of
 * the block or warp (n = 1001, 3001, C = 45, HS = 10, N = 150 rows across
 * two 128-row tiles):
 *  - the RNG: the device's Philox/uniform equals lf_rng_uniform exactly for
 *    many (seed, purpose, index), 64-bit indices included;
 *  - bit for bit where the device performs the CPU's sequence of roundings:
 *    encoder forward and backward (dwte/dwpe += rows in row order),
 *    residual forward/backward, dropout forward/backward (the masks equal
 *    the CPU's: zeros in the same places, survivors scaled by the same
 *    float), the fp16 rounding and its overflow flag;
 *  - within an error model elsewhere. The device evaluates the CPU's
 *    expressions (GELU and SwiGLU with the CPU's Cephes exp, RoPE with the
 *    host's inv_freq and double cos/sin of the float angle, AdamW with the
 *    host's constants), so what differs is FMA contraction (nvcc fuses
 *    a*b+c, one rounding instead of two: at most u = 2^-24 relative of the
 *    product per fused operation) and, on a GPU, the double cos/sin (a
 *    double ulp, which can move the float result by one ulp). Each op's
 *    bound sums those per-operation roundings, u times the magnitude of
 *    each intermediate, through the condition number of what follows
 *    (exp's argument error is multiplied by |argument|); the derivation is
 *    at each check. On the shim the host compiler evaluates the same
 *    expressions, and the bounds hold with room to spare;
 *  - accumulate semantics: outputs that add (+=) are pre-filled with random
 *    values and compared after the add; outputs that overwrite are
 *    pre-filled with garbage;
 *  - determinism: a second run (on the shim: under the forward, reverse
 *    and two shuffle schedules) gives the same bits;
 *  - refusals: the CPU's (odd head size, NH % NKV, bf16 storage) and
 *    negative sizes are sticky errors with a message naming the op;
 *  - the grid-stride loop past the 65535-block grid cap (one element-wise
 *    op over 16.8M elements, exact).
 */
#include <math.h>
#include "pw_test_util.h"
#include "backend/cuda/cuda_pointwise.h"

/* The plain RoPE table the model passes the rope ops (src/model/rope.c's default). */
static const float *rope_tab(int HS, float theta) {
    static float inv[1024];
    for (int i = 0; i < HS / 2 && i < 1024; i++) inv[i] = 1.0f / powf(theta, (float)(2 * i) / (float)HS);
    return inv;
}

/* ---------------------------------------------------------------- RNG */

static void test_rng_matches_core(void **state) {
    (void)state;
    PW_NEED_DEVICE();
    pw_env e;
    pw_open(&e);
    const int n = 2003;
    uint64_t *idx = malloc(n * sizeof *idx);
    float *got = malloc(n * sizeof *got);
    const uint64_t seeds[] = {0, 1, 0x9E3779B97F4A7C15ull, 0xffffffffffffffffull, 1234567};
    const uint32_t purposes[] = {LF_RNG_DROPOUT, LF_RNG_INIT, LF_RNG_TEST, 0xffffffffu, 0};
    uint64_t *didx = e.be->ops->alloc(e.be, n * sizeof *idx);
    float *dout = e.be->ops->alloc(e.be, n * sizeof *got);
    assert_non_null(didx);
    assert_non_null(dout);
    for (size_t s = 0; s < sizeof seeds / sizeof seeds[0]; s++) {
        for (int i = 0; i < n; i++)
            idx[i] = i < 8 ? (uint64_t[]){0, 1, 0xffffffffull, 0x100000000ull, ~0ull, ~0ull - 1, 1ull << 63, 42}[i]
                           : lf_rng_mix(s * 1000003u + 7, (uint64_t)i << (i % 37));
        pw_put(e.be, didx, idx, n * sizeof *idx);
        assert_int_equal(lf__cuk_rng_uniform(dout, didx, n, seeds[s], purposes[s], lf__cuda_stream(e.be)), cudaSuccess);
        pw_down(e.be, got, dout, n * sizeof *got);
        for (int i = 0; i < n; i++) {
            const float want = lf_rng_uniform(seeds[s], purposes[s], idx[i]);
            if (memcmp(&got[i], &want, sizeof want))
                fail_msg("rng seed %zu index %d (%llu): device %.9g, lf_rng_uniform %.9g", s, i,
                         (unsigned long long)idx[i], (double)got[i], (double)want);
        }
    }
    pw_free(e.be, didx);
    pw_free(e.be, dout);
    free(idx);
    free(got);
    pw_close(&e);
}

/* ---------------------------------------------------------------- encoder */

typedef struct enc_ctx {
    lf_backend *be;
    int B, T, C, V, maxT, use_wpe;
    const int32_t *tok;
    const float *wte, *wpe, *dout, *dwte0, *dwpe0;
    int32_t *d_tok;
    float *d_wte, *d_wpe, *d_out, *d_dout, *d_dwte, *d_dwpe;
} enc_ctx;

/* out: forward's (B,T,C) then dwte (V,C) then dwpe (maxT,C) */
static void enc_run(void *vc, void *out) {
    enc_ctx *c = vc;
    const size_t nBTC = (size_t)c->B * c->T * c->C, nVC = (size_t)c->V * c->C, nPC = (size_t)c->maxT * c->C;
    pw_put(c->be, c->d_dwte, c->dwte0, nVC * 4);
    pw_put(c->be, c->d_dwpe, c->dwpe0, nPC * 4);
    c->be->ops->encoder_forward(c->be, c->d_out, c->d_tok, c->d_wte, c->use_wpe ? c->d_wpe : NULL, c->B, c->T, c->C);
    c->be->ops->encoder_backward(c->be, c->d_dwte, c->use_wpe ? c->d_dwpe : NULL, c->d_dout, c->d_tok, c->B, c->T,
                                 c->C);
    float *o = out;
    pw_down(c->be, o, c->d_out, nBTC * 4);
    pw_down(c->be, o + nBTC, c->d_dwte, nVC * 4);
    pw_down(c->be, o + nBTC + nVC, c->d_dwpe, nPC * 4);
}

static void test_encoder(void **state) {
    (void)state;
    PW_NEED_DEVICE();
    pw_env e;
    pw_open(&e);
    /* 150 rows: a token's rows span both 128-row tiles of the dwte kernel;
     * 7 tokens: every token repeats ~21 times; token 6 never appears */
    const int B = 3, T = 50, C = 45, V = 7, maxT = 53;
    const size_t N = (size_t)B * T, nBTC = N * C, nVC = (size_t)V * C, nPC = (size_t)maxT * C;
    int32_t *tok = malloc(N * sizeof *tok);
    for (size_t i = 0; i < N; i++) tok[i] = (int32_t)(lf_rng_u64(11, LF_RNG_TEST, i) % 6);
    float *wte = pw_random(nVC, 1, -1, 1), *wpe = pw_random(nPC, 2, -1, 1), *dout = pw_random(nBTC, 3, -1, 1);
    float *dwte0 = pw_random(nVC, 4, -1, 1), *dwpe0 = pw_random(nPC, 5, -1, 1);
    enc_ctx c = {e.be, B, T, C, V, maxT, 1, tok, wte, wpe, dout, dwte0, dwpe0, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    c.d_tok = pw_up(e.be, tok, N * 4);
    c.d_wte = pw_up(e.be, wte, nVC * 4);
    c.d_wpe = pw_up(e.be, wpe, nPC * 4);
    c.d_dout = pw_up(e.be, dout, nBTC * 4);
    c.d_out = pw_up(e.be, NULL, nBTC * 4);
    c.d_dwte = pw_up(e.be, NULL, nVC * 4);
    c.d_dwpe = pw_up(e.be, NULL, nPC * 4);
    const size_t total = nBTC + nVC + nPC;
    float *got = malloc(total * 4), *ref = malloc(total * 4);
    for (int use_wpe = 1; use_wpe >= 0; use_wpe--) {
        c.use_wpe = use_wpe;
        enc_run(&c, got);
        memcpy(ref + nBTC, dwte0, nVC * 4);
        memcpy(ref + nBTC + nVC, dwpe0, nPC * 4);
        e.cpu->ops->encoder_forward(e.cpu, ref, tok, wte, use_wpe ? wpe : NULL, B, T, C);
        e.cpu->ops->encoder_backward(e.cpu, ref + nBTC, use_wpe ? ref + nBTC + nVC : NULL, dout, tok, B, T, C);
        /* the CPU's additions in the CPU's order: the same bits */
        pw_check_bits(use_wpe ? "encoder_forward" : "encoder_forward (no wpe)", got, ref, nBTC * 4);
        pw_check_bits(use_wpe ? "encoder_backward dwte" : "encoder_backward dwte (no wpe)", got + nBTC, ref + nBTC,
                      nVC * 4);
        pw_check_bits("encoder_backward dwpe (untouched without wpe)", got + nBTC + nVC, ref + nBTC + nVC, nPC * 4);
        pw_check_repeatable("encoder", enc_run, &c, got, total * 4);
    }
    pw_free(e.be, c.d_tok);
    pw_free(e.be, c.d_wte);
    pw_free(e.be, c.d_wpe);
    pw_free(e.be, c.d_dout);
    pw_free(e.be, c.d_out);
    pw_free(e.be, c.d_dwte);
    pw_free(e.be, c.d_dwpe);
    free(tok), free(wte), free(wpe), free(dout), free(dwte0), free(dwpe0), free(got), free(ref);
    pw_close(&e);
}

/* ---------------------------------------------------------------- GELU, SwiGLU */

/* Relative difference of the two implementations' exp(a), a the exact
 * argument: both are the CPU's Cephes expf (<= 2 ulp each: 8u apart at
 * most), and the argument itself is formed with up to 4 roundings that
 * contraction may change, each moving exp by u |a| relative. */
static double exp_rel(double a) {
    const double aa = fmin(fabs(a), 87.0); /* the clamp of both */
    return 8.0 * PW_U * aa + 16.0 * PW_U;
}

#define GELU_B 0.7978845608028654
#define GELU_K 0.044715

typedef struct act_ctx {
    lf_backend *be;
    size_t n, nout;
    int N, F;
    float *d_in, *d_dout, *d_out, *d_dinp;
} act_ctx;

static void gelu_run(void *vc, void *out) {
    act_ctx *c = vc;
    float *o = out;
    c->be->ops->gelu_forward(c->be, c->d_out, LF_DT_F32, c->d_in, c->n);
    c->be->ops->gelu_backward(c->be, c->d_dinp, c->d_in, c->d_dout, c->n);
    pw_down(c->be, o, c->d_out, c->n * 4);
    pw_down(c->be, o + c->n, c->d_dinp, c->n * 4);
}

static void test_gelu(void **state) {
    (void)state;
    PW_NEED_DEVICE();
    pw_env e;
    pw_open(&e);
    const size_t n = 1001;
    float *x = pw_random(n, 21, -7, 7), *dout = pw_random(n, 22, -2, 2);
    const float special[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 20.0f, -20.0f, 50.0f, -50.0f, 100.0f, -100.0f, -0.75f};
    memcpy(x, special, sizeof special);
    act_ctx c = {e.be, n, n, 0, 0, pw_up(e.be, x, n * 4), pw_up(e.be, dout, n * 4), pw_up(e.be, NULL, n * 4),
                 pw_up(e.be, NULL, n * 4)};
    float *got = malloc(2 * n * 4), *ref = malloc(2 * n * 4);
    double *tol = malloc(2 * n * sizeof *tol);
    gelu_run(&c, got);
    e.cpu->ops->gelu_forward(e.cpu, ref, LF_DT_F32, x, n);
    e.cpu->ops->gelu_backward(e.cpu, ref + n, x, dout, n);
    for (size_t i = 0; i < n; i++) {
        const double xi = x[i], a = 2.0 * GELU_B * (xi + GELU_K * xi * xi * xi); /* exp(-a) */
        const double ex = exp(fmin(fmax(-a, -87.0), 87.0)), frac = ex / (1.0 + ex);
        /* gelu = x / (1 + e): e's relative error damped by e/(1+e), then
         * the add and the division (2 roundings each side) */
        const double re = exp_rel(a) * frac + 4.0 * PW_U;
        tol[i] = fabs((double)ref[i]) * re + 1e-37;
        /* gelu' = s + 2 x s (1-s) beta (1 + 3 kappa x^2), s = 1/(1+e): s
         * off by s*re; the derivative's terms rounded ~10 times each */
        const double s = 1.0 / (1.0 + ex), q = 2.0 * xi * GELU_B * (1.0 + 3.0 * GELU_K * xi * xi);
        const double t2 = q * s * (1.0 - s);
        const double dgrad = s * re * (1.0 + fabs(q) * fabs(1.0 - 2.0 * s)) + 10.0 * PW_U * (s + fabs(t2));
        tol[n + i] = fabs((double)dout[i]) * dgrad + 2.0 * PW_U * fabs((double)ref[n + i]) + 1e-37;
    }
    pw_check_within("gelu_forward", got, ref, tol, n);
    pw_check_within("gelu_backward", got + n, ref + n, tol + n, n);
    pw_check_repeatable("gelu", gelu_run, &c, got, 2 * n * 4);
    pw_free(e.be, c.d_in), pw_free(e.be, c.d_dout), pw_free(e.be, c.d_out), pw_free(e.be, c.d_dinp);
    free(x), free(dout), free(got), free(ref), free(tol);
    pw_close(&e);
}

static void swiglu_run(void *vc, void *out) {
    act_ctx *c = vc;
    float *o = out;
    const size_t nin = (size_t)c->N * 2 * c->F, nout = (size_t)c->N * c->F;
    c->be->ops->swiglu_forward(c->be, c->d_out, LF_DT_F32, c->d_in, c->N, c->F);
    c->be->ops->swiglu_backward(c->be, c->d_dinp, c->d_in, c->d_dout, c->N, c->F);
    pw_down(c->be, o, c->d_out, nout * 4);
    pw_down(c->be, o + nout, c->d_dinp, nin * 4);
}

static void test_swiglu(void **state) {
    (void)state;
    PW_NEED_DEVICE();
    pw_env e;
    pw_open(&e);
    const int N = 3, F = 37;
    const size_t nin = (size_t)N * 2 * F, nout = (size_t)N * F;
    float *in = pw_random(nin, 31, -10, 10), *dout = pw_random(nout, 32, -2, 2);
    const float special[] = {0.0f, 100.0f, -100.0f, 88.0f, -88.0f, -1.2785f};
    memcpy(in, special, sizeof special);
    float *garbage = pw_random(nin, 33, -1e6f, 1e6f);
    act_ctx c = {e.be, 0, 0, N, F, pw_up(e.be, in, nin * 4), pw_up(e.be, dout, nout * 4), pw_up(e.be, garbage, nout * 4),
                 pw_up(e.be, garbage, nin * 4)};
    float *got = malloc((nin + nout) * 4), *ref = malloc((nin + nout) * 4);
    double *tol = malloc((nin + nout) * sizeof *tol);
    swiglu_run(&c, got);
    e.cpu->ops->swiglu_forward(e.cpu, ref, LF_DT_F32, in, N, F);
    e.cpu->ops->swiglu_backward(e.cpu, ref + nout, in, dout, N, F);
    for (int r = 0; r < N; r++) {
        for (int j = 0; j < F; j++) {
            const double g = in[(size_t)r * 2 * F + j], u = in[(size_t)r * 2 * F + F + j], d = dout[(size_t)r * F + j];
            const double ex = exp(fmin(fmax(-g, -87.0), 87.0)), frac = ex / (1.0 + ex), s = 1.0 / (1.0 + ex);
            /* the argument -g is exact: exp differs by its evaluation only */
            const double rs = 16.0 * PW_U * frac + 4.0 * PW_U; /* relative, of s and of g*s */
            const size_t io = (size_t)r * F + j, ig = nout + (size_t)r * 2 * F + j, iu = ig + F;
            tol[io] = fabs((double)ref[io]) * (rs + 2.0 * PW_U) + 1e-37;
            /* dg = d u s (1 + g (1-s)): d/ds = 1 + g - 2 g s */
            const double dh = fabs(1.0 + g - 2.0 * g * s) * s * rs + 6.0 * PW_U * (s + fabs(s * g * (1.0 - s)));
            tol[ig] = fabs(d * u) * dh + 4.0 * PW_U * fabs((double)ref[ig]) + 1e-37;
            tol[iu] = fabs(d * g) * s * rs + 4.0 * PW_U * fabs((double)ref[iu]) + 1e-37;
        }
    }
    pw_check_within("swiglu_forward", got, ref, tol, nout);
    pw_check_within("swiglu_backward", got + nout, ref + nout, tol + nout, nin);
    pw_check_repeatable("swiglu", swiglu_run, &c, got, (nin + nout) * 4);
    pw_free(e.be, c.d_in), pw_free(e.be, c.d_dout), pw_free(e.be, c.d_out), pw_free(e.be, c.d_dinp);
    free(in), free(dout), free(garbage), free(got), free(ref), free(tol);
    pw_close(&e);
}

/* ---------------------------------------------------------------- RoPE */

typedef struct rope_ctx {
    lf_backend *be;
    int B, T, NH, NKV, HS, pos0;
    float theta;
    const float *x;
    float *d_x;
    size_t n;
} rope_ctx;

static void rope_run(void *vc, void *out) {
    rope_ctx *c = vc;
    float *o = out;
    pw_put(c->be, c->d_x, c->x, c->n * 4);
    c->be->ops->rope_forward(c->be, c->d_x, c->B, c->T, c->NH, c->NKV, c->HS, c->pos0, rope_tab(c->HS, c->theta), 1.25f);
    pw_down(c->be, o, c->d_x, c->n * 4);
    pw_put(c->be, c->d_x, c->x, c->n * 4);
    c->be->ops->rope_backward(c->be, c->d_x, c->B, c->T, c->NH, c->NKV, c->HS, c->pos0, rope_tab(c->HS, c->theta), 1.25f);
    pw_down(c->be, o + c->n, c->d_x, c->n * 4);
}

static void test_rope(void **state) {
    (void)state;
    PW_NEED_DEVICE();
    pw_env e;
    pw_open(&e);
    /* grouped-query (4 query heads, 2 kv heads), HS = 10 (5 frequencies),
     * at position 3000: angles up to 3000 rad, where the float angle's
     * rounding matters */
    const int B = 2, T = 7, NH = 4, NKV = 2, HS = 10, pos0 = 3000, W = (NH + 2 * NKV) * HS;
    const size_t n = (size_t)B * T * W;
    float *x = pw_random(n, 41, -2, 2);
    rope_ctx c = {e.be, B, T, NH, NKV, HS, pos0, 10000.0f, x, pw_up(e.be, x, n * 4), n};
    float *got = malloc(2 * n * 4), *ref = malloc(2 * n * 4);
    double *tol = malloc(2 * n * sizeof *tol);
    rope_run(&c, got);
    memcpy(ref, x, n * 4);
    memcpy(ref + n, x, n * 4);
    e.cpu->ops->rope_forward(e.cpu, ref, B, T, NH, NKV, HS, pos0, rope_tab(HS, 10000.0f), 1.25f);
    e.cpu->ops->rope_backward(e.cpu, ref + n, B, T, NH, NKV, HS, pos0, rope_tab(HS, 10000.0f), 1.25f);
    /* out = a cs - c sn with cs = cos * 1.25, sn = sin * 1.25 (the cos/sin
     * factor a scaled RoPE passes): the factors are the same floats (the
     * host's inv_freq, the float product, double cos/sin rounded once, then
     * the float product with the factor; a GPU's double cos/sin may move a
     * factor by one float ulp <= 2u, times 1.25), the products and the
     * difference rounded <= 3 times: within 9u (|a| + |c|). The v part is
     * copied through: the same bits. */
    for (size_t r = 0; r < (size_t)B * T; r++) {
        for (int k = 0; k < W; k++) {
            const size_t i = r * W + k;
            double t = 0.0;
            if (k < (NH + NKV) * HS) {
                const int hd = k / HS, j = k % HS, p = j < HS / 2 ? j + HS / 2 : j - HS / 2;
                t = 9.0 * PW_U * (fabs((double)x[i]) + fabs((double)x[r * W + (size_t)hd * HS + p]));
            }
            tol[i] = tol[n + i] = t;
        }
    }
    pw_check_within("rope_forward", got, ref, tol, n);
    pw_check_within("rope_backward", got + n, ref + n, tol + n, n);
    pw_check_repeatable("rope", rope_run, &c, got, 2 * n * 4);
    pw_free(e.be, c.d_x);
    free(x), free(got), free(ref), free(tol);
    pw_close(&e);
}

/* ---------------------------------------------------------------- residual, dropout */

typedef struct res_ctx {
    lf_backend *be;
    size_t n;
    lf_dropout drop;
    const float *a, *b, *da0, *db0;
    float *d_a, *d_b, *d_out, *d_da, *d_db;
} res_ctx;

/* out: out, out in place (into a), da, db, dropout out, dropout in place, dropout backward */
static void res_run(void *vc, void *out) {
    res_ctx *c = vc;
    const size_t n = c->n;
    float *o = out;
    lf_backend *be = c->be;
    pw_put(be, c->d_a, c->a, n * 4);
    pw_put(be, c->d_da, c->da0, n * 4);
    pw_put(be, c->d_db, c->db0, n * 4);
    be->ops->residual_forward(be, c->d_out, c->d_a, c->d_b, n);
    pw_down(be, o, c->d_out, n * 4);
    be->ops->residual_forward(be, c->d_a, c->d_a, c->d_b, n); /* in place: out == a */
    pw_down(be, o + n, c->d_a, n * 4);
    be->ops->residual_backward(be, c->d_da, c->d_db, c->d_b, n); /* dout = b */
    pw_down(be, o + 2 * n, c->d_da, n * 4);
    pw_down(be, o + 3 * n, c->d_db, n * 4);
    be->ops->dropout_forward(be, c->d_out, c->d_b, n, c->drop);
    pw_down(be, o + 4 * n, c->d_out, n * 4);
    pw_put(be, c->d_a, c->b, n * 4);
    be->ops->dropout_forward(be, c->d_a, c->d_a, n, c->drop); /* in place */
    pw_down(be, o + 5 * n, c->d_a, n * 4);
    be->ops->dropout_backward(be, c->d_out, c->d_b, n, c->drop);
    pw_down(be, o + 6 * n, c->d_out, n * 4);
}

static void test_residual_dropout(void **state) {
    (void)state;
    PW_NEED_DEVICE();
    pw_env e;
    pw_open(&e);
    const size_t n = 3001;
    float *a = pw_random(n, 51, -3, 3), *b = pw_random(n, 52, -3, 3);
    float *da0 = pw_random(n, 53, -1, 1), *db0 = pw_random(n, 54, -1, 1);
    lf_dropout drops[] = {{0.25f, 0xfeedULL, 0x1234567890abcdefULL, 777}, {0.0f, 1, 2, 3}, {0.9f, 5, 6, 1ull << 40}};
    res_ctx c = {e.be, n, drops[0], a, b, da0, db0, pw_up(e.be, a, n * 4), pw_up(e.be, b, n * 4),
                 pw_up(e.be, NULL, n * 4), pw_up(e.be, NULL, n * 4), pw_up(e.be, NULL, n * 4)};
    float *got = malloc(7 * n * 4), *ref = malloc(7 * n * 4);
    for (size_t k = 0; k < sizeof drops / sizeof drops[0]; k++) {
        c.drop = drops[k];
        res_run(&c, got);
        /* the cpu's, in the same sequence */
        float *ta = pw_dup(a, n * 4);
        e.cpu->ops->residual_forward(e.cpu, ref, a, b, n);
        e.cpu->ops->residual_forward(e.cpu, ta, ta, b, n);
        memcpy(ref + n, ta, n * 4);
        memcpy(ref + 2 * n, da0, n * 4);
        memcpy(ref + 3 * n, db0, n * 4);
        e.cpu->ops->residual_backward(e.cpu, ref + 2 * n, ref + 3 * n, b, n);
        e.cpu->ops->dropout_forward(e.cpu, ref + 4 * n, b, n, c.drop);
        memcpy(ta, b, n * 4);
        e.cpu->ops->dropout_forward(e.cpu, ta, ta, n, c.drop);
        memcpy(ref + 5 * n, ta, n * 4);
        e.cpu->ops->dropout_backward(e.cpu, ref + 6 * n, b, n, c.drop);
        free(ta);
        /* one correctly rounded add or multiply per element: the same bits */
        pw_check_bits("residual_forward", got, ref, n * 4);
        pw_check_bits("residual_forward in place", got + n, ref + n, n * 4);
        pw_check_bits("residual_backward da", got + 2 * n, ref + 2 * n, n * 4);
        pw_check_bits("residual_backward db", got + 3 * n, ref + 3 * n, n * 4);
        pw_check_bits("dropout_forward (the CPU's mask)", got + 4 * n, ref + 4 * n, n * 4);
        pw_check_bits("dropout_forward in place", got + 5 * n, ref + 5 * n, n * 4);
        pw_check_bits("dropout_backward", got + 6 * n, ref + 6 * n, n * 4);
        /* the mask is a mask: the drop rate is p within 5 sigma, survivors
         * are x / (1-p) */
        size_t zeros = 0;
        for (size_t i = 0; i < n; i++) zeros += got[4 * n + i] == 0.0f;
        const double p = c.drop.p, sd = sqrt(n * p * (1 - p));
        if (fabs((double)zeros - n * p) > 5 * sd + 0.5)
            fail_msg("dropout p=%.2f: %zu of %zu dropped", p, zeros, n);
        pw_check_repeatable("residual/dropout", res_run, &c, got, 7 * n * 4);
    }
    pw_free(e.be, c.d_a), pw_free(e.be, c.d_b), pw_free(e.be, c.d_out), pw_free(e.be, c.d_da), pw_free(e.be, c.d_db);
    free(a), free(b), free(da0), free(db0), free(got), free(ref);
    pw_close(&e);
}

/* Past the grid cap: element-wise kernels launch at most 65535 blocks of
 * 256 threads and loop grid-stride over the rest (GELU on GPT-2's
 * B16 x T1024 x 3072 activations is 3x that). One op, the shared loop
 * shape; ~2 s on the shim. */
static void test_grid_stride(void **state) {
    (void)state;
    PW_NEED_DEVICE();
    pw_env e;
    pw_open(&e);
    const size_t n = (size_t)65535 * 256 + 1001;
    float *a = malloc(n * 4), *b = malloc(n * 4), *got = malloc(n * 4);
    assert_non_null(a), assert_non_null(b), assert_non_null(got);
    for (size_t i = 0; i < n; i++) {
        a[i] = (float)(i % 4099);
        b[i] = (float)(i / 4099) * 0.5f;
    }
    float *da = pw_up(e.be, a, n * 4), *db = pw_up(e.be, b, n * 4), *dout = pw_up(e.be, NULL, n * 4);
    e.be->ops->residual_forward(e.be, dout, da, db, n);
    pw_down(e.be, got, dout, n * 4);
    for (size_t i = 0; i < n; i++)
        if (got[i] != a[i] + b[i]) fail_msg("residual_forward[%zu] of %zu: %.9g, want %.9g", i, n, (double)got[i],
                                            (double)(a[i] + b[i]));
    pw_free(e.be, da), pw_free(e.be, db), pw_free(e.be, dout);
    free(a), free(b), free(got);
    pw_close(&e);
}

/* ---------------------------------------------------------------- AdamW */

typedef struct adam_ctx {
    lf_backend *be;
    size_t n;
    const float *p0, *g, *m0, *v0;
    float *d_p, *d_g, *d_m, *d_v;
    float beta1;
} adam_ctx;

#define ADAM_LR 1e-3f
#define ADAM_B2 0.95f
#define ADAM_EPS 1e-8f
#define ADAM_WD 0.1f
#define ADAM_GS 0.7f
#define ADAM_T 5

static void adam_run(void *vc, void *out) {
    adam_ctx *c = vc;
    float *o = out;
    pw_put(c->be, c->d_p, c->p0, c->n * 4);
    pw_put(c->be, c->d_m, c->m0, c->n * 4);
    pw_put(c->be, c->d_v, c->v0, c->n * 4);
    c->be->ops->adamw_update(c->be, c->d_p, c->d_g, c->d_m, c->d_v, c->n, ADAM_LR, c->beta1, ADAM_B2, ADAM_EPS,
                             ADAM_WD, ADAM_GS, ADAM_T);
    pw_down(c->be, o, c->d_p, c->n * 4);
    pw_down(c->be, o + c->n, c->d_m, c->n * 4);
    pw_down(c->be, o + 2 * c->n, c->d_v, c->n * 4);
}

static void test_adamw(void **state) {
    (void)state;
    PW_NEED_DEVICE();
    pw_env e;
    pw_open(&e);
    const size_t n = 1001;
    float *p0 = pw_random(n, 61, -1, 1), *g = pw_random(n, 62, -0.1f, 0.1f), *m0 = pw_random(n, 63, -0.01f, 0.01f);
    float *v0 = pw_random(n, 64, 0, 1e-4f);
    adam_ctx c = {e.be, n, p0, g, m0, v0, pw_up(e.be, p0, n * 4), pw_up(e.be, g, n * 4), pw_up(e.be, m0, n * 4),
                  pw_up(e.be, v0, n * 4), 0.9f};
    float *got = malloc(3 * n * 4), *ref = malloc(3 * n * 4);
    double *tol = malloc(3 * n * sizeof *tol);
    const float betas[] = {0.9f, 0.3f}; /* m by lerp's two branches (weight 0.1 < 0.5, 0.7 >= 0.5) */
    for (int k = 0; k < 2; k++) {
        c.beta1 = betas[k];
        adam_run(&c, got);
        memcpy(ref, p0, n * 4);
        memcpy(ref + n, m0, n * 4);
        memcpy(ref + 2 * n, v0, n * 4);
        e.cpu->ops->adamw_update(e.cpu, ref, g, ref + n, ref + 2 * n, n, ADAM_LR, c.beta1, ADAM_B2, ADAM_EPS, ADAM_WD,
                                 ADAM_GS, ADAM_T);
        const double w1 = 1.0 - c.beta1, step = ADAM_LR / (1.0 - pow(c.beta1, ADAM_T));
        const double bc2s = sqrt(1.0 - pow(ADAM_B2, ADAM_T));
        for (size_t i = 0; i < n; i++) {
            const double gi = (double)g[i] * ADAM_GS, mo = m0[i], mn = ref[n + i], vn = ref[2 * n + i];
            /* m: a multiply and an add that may fuse: u of the product, u of the sum */
            const double tm = 2.0 * PW_U * (fabs(gi - mo) * fmax(w1, 1.0 - w1) + fabs(mn));
            /* v: b2 v + (1-b2) g^2, two products and an add */
            const double tv = 2.0 * PW_U * (fabs(ADAM_B2 * (double)v0[i]) + fabs((1.0 - ADAM_B2) * gi * gi) + vn);
            /* p += -step m / (sqrt(v)/bc2 + eps): m's error, half v's
             * relative error, ~6 roundings of the update, the final add */
            const double denom = sqrt(vn) / bc2s + ADAM_EPS;
            const double tp = step * (tm + fabs(mn) * (0.5 * tv / vn + 6.0 * PW_U)) / denom + 2.0 * PW_U * fabs(ref[i]);
            tol[i] = tp;
            tol[n + i] = tm;
            tol[2 * n + i] = tv;
        }
        pw_check_within("adamw params", got, ref, tol, n);
        pw_check_within("adamw m", got + n, ref + n, tol + n, n);
        pw_check_within("adamw v", got + 2 * n, ref + 2 * n, tol + 2 * n, n);
        pw_check_repeatable("adamw", adam_run, &c, got, 3 * n * 4);
    }
    pw_free(e.be, c.d_p), pw_free(e.be, c.d_g), pw_free(e.be, c.d_m), pw_free(e.be, c.d_v);
    free(p0), free(g), free(m0), free(v0), free(got), free(ref), free(tol);
    pw_close(&e);
}

/* ---------------------------------------------------------------- host-value ops */

static void test_sum_squares(void **state) {
    (void)state;
    PW_NEED_DEVICE();
    pw_env e;
    pw_open(&e);
    const size_t sizes[] = {0, 1, 37, 50001};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const size_t n = sizes[k];
        float *x = pw_random(n, 71 + k, -3, 3);
        float *d = pw_up(e.be, x, n * 4);
        const double got = e.be->ops->sum_squares(e.be, d, n);
        LF_ASSERT_OK(lf_backend_sync(e.be));
        const double ref = e.cpu->ops->sum_squares(e.cpu, x, n);
        /* exact terms (a float squared is exact in double); two double sums
         * of n terms: each within n 2^-53 of the exact sum */
        const double tol = 2.0 * (double)n * 0x1p-53 * ref;
        if (!(fabs(got - ref) <= tol)) fail_msg("sum_squares n=%zu: %.17g, cpu %.17g", n, got, ref);
#ifdef LF_CUDA_SHIM
        const lf_shim_schedule_kind kinds[] = {LF_SHIM_SCHEDULE_FORWARD, LF_SHIM_SCHEDULE_REVERSE,
                                               LF_SHIM_SCHEDULE_SHUFFLE};
        for (int s = 0; s < 3; s++) {
            lf_shim_set_schedule(kinds[s], 17);
            const double again = e.be->ops->sum_squares(e.be, d, n);
            if (memcmp(&again, &got, sizeof got)) fail_msg("sum_squares n=%zu: schedule %d changed the bits", n, s);
        }
        lf_shim_set_schedule(LF_SHIM_SCHEDULE_SHUFFLE, LF_SHIM_DEFAULT_SEED);
#else
        const double again = e.be->ops->sum_squares(e.be, d, n);
        if (memcmp(&again, &got, sizeof got)) fail_msg("sum_squares n=%zu: a second run changed the bits", n);
#endif
        pw_free(e.be, d);
        free(x);
    }
    pw_close(&e);
}

static void test_fp16_round(void **state) {
    (void)state;
    PW_NEED_DEVICE();
    pw_env e;
    pw_open(&e);
    const size_t n = 1001;
    float *x = malloc(n * 4);
    for (size_t i = 0; i < n; i++) { /* magnitudes 2^-30 .. 2^17: subnormal halves to overflow */
        const float m = 1.0f + lf_rng_uniform(81, LF_RNG_TEST, i);
        const int ex = (int)(lf_rng_u64(82, LF_RNG_TEST, i) % 48) - 30;
        x[i] = (i & 1 ? -1.0f : 1.0f) * ldexpf(m, ex);
    }
    const float special[] = {65504.0f, 65519.99f, 65520.0f, -65520.0f, 0.0f, -0.0f, 5.96e-8f, 2.98e-8f, 2.99e-8f,
                             1.0f + 0x1p-11f, 1.0f + 0x1p-11f + 0x1p-23f, 1.0f + 3 * 0x1p-11f, NAN, INFINITY};
    memcpy(x, special, sizeof special);
    float *d = pw_up(e.be, NULL, n * 4), *got = malloc(n * 4), *ref = malloc(n * 4);
    for (int finite_only = 0; finite_only < 2; finite_only++) {
        if (finite_only) /* all within range: flag 0 */
            for (size_t i = 0; i < n; i++) x[i] = isfinite(x[i]) ? fmaxf(fminf(x[i], 60000.0f), -60000.0f) : 1.0f;
        pw_put(e.be, d, x, n * 4);
        const int fg = e.be->ops->fp16_round(e.be, d, n);
        pw_down(e.be, got, d, n * 4);
        memcpy(ref, x, n * 4);
        const int fr = e.cpu->ops->fp16_round(e.cpu, ref, n);
        assert_int_equal(fg, fr);
        assert_int_equal(fg, !finite_only);
        for (size_t i = 0; i < n; i++) {
            if (isnan(ref[i]) && isnan(got[i])) continue;
            if (memcmp(&got[i], &ref[i], 4))
                fail_msg("fp16_round(%.9g): %.9g, cpu %.9g", (double)x[i], (double)got[i], (double)ref[i]);
        }
    }
    pw_free(e.be, d);
    free(x), free(got), free(ref);
    pw_close(&e);
}

/* ---------------------------------------------------------------- bf16 outputs (cuda-bf16) */

/* GELU, SwiGLU and convert writing bf16 storage on cuda-bf16: exactly the
 * rounding of the same instance's fp32 output (pw_check_bf16_of), and
 * within one bf16 step of cpu-bf16's bf16 output (the fp32 outputs agree
 * to a few ulp, test_gelu / test_swiglu). Odd sizes, the element after n
 * untouched. */
static void test_bf16_outputs(void **state) {
    (void)state;
    PW_NEED_DEVICE();
    pw_env e;
    pw_open_bf16(&e);
    const int N = 37, F = 67;
    const size_t n = (size_t)N * F, n2 = 2 * n;
    float *x = pw_random(n2, 91, -4, 4), *f32 = malloc(n2 * 4);
    uint16_t *g16 = malloc((n + 1) * 2), *c16 = malloc(n * 2);
    float *d_x = pw_up(e.be, x, n2 * 4), *d_f = pw_up(e.be, NULL, n2 * 4);
    uint16_t *d_h = pw_up(e.be, NULL, (n + 1) * 2);
    const uint16_t guard = 0x1234;
    for (int op = 0; op < 3; op++) {
        const char *what = op == 0 ? "gelu_forward bf16" : op == 1 ? "swiglu_forward bf16" : "convert bf16";
        pw_put(e.be, d_h + n, &guard, 2);
        if (op == 0) {
            e.be->ops->gelu_forward(e.be, d_f, LF_DT_F32, d_x, n);
            e.be->ops->gelu_forward(e.be, d_h, LF_DT_BF16, d_x, n);
            e.cpu->ops->gelu_forward(e.cpu, c16, LF_DT_BF16, x, n);
        } else if (op == 1) {
            e.be->ops->swiglu_forward(e.be, d_f, LF_DT_F32, d_x, N, F);
            e.be->ops->swiglu_forward(e.be, d_h, LF_DT_BF16, d_x, N, F);
            e.cpu->ops->swiglu_forward(e.cpu, c16, LF_DT_BF16, x, N, F);
        } else {
            e.be->ops->convert(e.be, d_f, LF_DT_F32, d_x, n);
            e.be->ops->convert(e.be, d_h, LF_DT_BF16, d_x, n);
            e.cpu->ops->convert(e.cpu, c16, LF_DT_BF16, x, n);
        }
        pw_down(e.be, f32, d_f, n * 4);
        pw_down(e.be, g16, d_h, (n + 1) * 2);
        pw_check_bf16_of(what, g16, f32, n);
        pw_check_bf16_adjacent(what, g16, c16, n);
        if (op == 2) pw_check_bits(what, g16, c16, n * 2); /* the same rounding of the same fp32 values */
        assert_int_equal(g16[n], guard);
    }
    LF_ASSERT_OK(lf_backend_sync(e.cpu));
    pw_free(e.be, d_x), pw_free(e.be, d_f), pw_free(e.be, d_h);
    free(x), free(f32), free(g16), free(c16);
    pw_close(&e);
}

/* ---------------------------------------------------------------- refusals */

static void test_refusals(void **state) {
    (void)state;
    PW_NEED_DEVICE();
    float *d = NULL; /* the ops are refused before they touch it */
    assert_int_equal(cudaMalloc((void **)&d, 4096), cudaSuccess);
    lf_backend *be = pw_fresh();
    be->ops->rope_forward(be, d, 1, 2, 2, 1, 9, 0, rope_tab(9, 10000.0f), 1.0f);
    pw_expect_fail(be, LF_ERR_INVALID_ARG, "rope_forward: head size 9");
    be = pw_fresh();
    be->ops->rope_backward(be, d, 1, 2, 3, 2, 4, 0, rope_tab(4, 10000.0f), 1.0f);
    pw_expect_fail(be, LF_ERR_INVALID_ARG, "rope_backward: 12 channels, 3 heads, 2 key/value heads");
    be = pw_fresh();
    be->ops->rope_forward(be, d, 1, 2, 1, 1, 4, (1 << 24) - 1, rope_tab(4, 10000.0f), 1.0f);
    pw_expect_fail(be, LF_ERR_INVALID_ARG, "at most 2^24");
    be = pw_fresh();
    be->ops->gelu_forward(be, d, LF_DT_BF16, d, 4);
    pw_expect_fail(be, LF_ERR_UNSUPPORTED, "gelu_forward: activation storage bf16");
    be = pw_fresh();
    be->ops->swiglu_forward(be, d, LF_DT_BF16, d, 1, 4);
    pw_expect_fail(be, LF_ERR_UNSUPPORTED, "swiglu_forward: activation storage bf16");
    be = pw_fresh();
    be->ops->swiglu_backward(be, d, d, d, -1, 4);
    pw_expect_fail(be, LF_ERR_INVALID_ARG, "swiglu_backward: rows x width -1");
    be = pw_fresh();
    be->ops->encoder_forward(be, d, (const int32_t *)d, d, d, 2, -3, 4);
    pw_expect_fail(be, LF_ERR_INVALID_ARG, "encoder_forward: batch x time 2 x -3");
    /* the refused ops touched nothing: a fresh instance still works */
    be = pw_fresh();
    be->ops->free(be, be->ops->alloc(be, 16));
    LF_ASSERT_OK(lf_backend_sync(be));
    lf_backend_close(be);
    assert_int_equal(cudaFree(d), cudaSuccess);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rng_matches_core), cmocka_unit_test(test_encoder),
        cmocka_unit_test(test_gelu),             cmocka_unit_test(test_swiglu),
        cmocka_unit_test(test_rope),             cmocka_unit_test(test_residual_dropout),
        cmocka_unit_test(test_adamw),            cmocka_unit_test(test_sum_squares),
        cmocka_unit_test(test_fp16_round),       cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_grid_stride),       cmocka_unit_test(test_bf16_outputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
