/*
 * The CUDA backend's attention family (src/backend/cuda/cuda_attention.cu,
 * cuda_ops_attention.c) on the CUDA-on-CPU shim (cuda.test_cuda_attention)
 * and, with LF_CUDA, on a real GPU (gpu.test_cuda_attention: SKIPPED where
 * none answers).
 *
 * Checked, on shapes whose T is not a multiple of the kernels' tiles (64
 * query rows, 32 key rows), head sizes 8..65 (odd ones too: nothing in
 * these kernels needs an even HS) across the three register-array
 * instances, NH 4 with NKV 4, 2 and 1 (multi-head, grouped-query,
 * multi-query), B 1 and 2:
 *  - the fused forward's out and the fused backward's dqkv against a
 *    double-precision reference (written here, independent of both
 *    backends), against the "cpu" backend, and against the unfused
 *    reference kernels (lf__cuk_attention_ref_*), with tolerances from the
 *    error model below;
 *  - attention dropout (p = 0.2): the same masks as the CPU's (the
 *    reference draws them with lf_rng_uniform from include/llmforge/core.h,
 *    so a mask that differs in one entry of a row fails), and the masks
 *    really drop entries;
 *  - overwrite semantics: out and dqkv are pre-filled with NaN; every
 *    element must come back finite and right;
 *  - determinism: bit-identical reruns, and on the shim identical bits
 *    under the FORWARD, REVERSE and two SHUFFLE schedules;
 *  - the KV cache: kv_append copies bits and leaves other positions alone;
 *    attention_cached's prefill (pos0 0) equals attention_forward within
 *    the tolerance and the CPU's attention_cached; rows decoded one at a
 *    time, and a prefill split into two calls, give the all-at-once bits;
 *  - on a real GPU (gpu.test_cuda_attention) the same checks also at
 *    GPT-2's (12 heads of 64, T 500) and smollm-135m's (9 query, 3 kv
 *    heads of 64) shapes and an HS 128 multi-query one;
 *  - the size slots; bad arguments (NH % NKV != 0, C % NH != 0, a head
 *    size over the kernels' limit, a dropout probability of 1, a cache
 *    range past Tmax) recorded as the sticky status with a message.
 *
 * Error model (fp32, u = 2^-24; first-order terms, each implementation's
 * error against the exact value; gamma_n = n u):
 *  - a score s = scale * q.k differs by es <= gamma_(HS+2) scale sum|q_d k_d|
 *    for any summation order;
 *  - a probability P = exp(s - m)/l then has relative error
 *    relP <= 2 max_j es_j + (t + 12) u (the exps' 2 ulp, the sum of t+1
 *    terms, the division), plus u (|m| + |log l| + 1) for the fused
 *    backward's recomputation exp(s - lse) through the saved log-sum-exp;
 *  - out_d = sum_j P~_j v_jd: error <= sum_j P~_j |v_jd| (relP + (t+2) u);
 *  - backward, with dP = f (dout.v) (error edp <= f gamma_(HS+2) sum|g v|),
 *    D = sum_j P dP, ds = P (dP - D): the same propagation term by term
 *    (reference() below), and the sums of dq, dk, dv over n terms add
 *    gamma_n of the sum of absolute terms (n = t+1 for dq; G*T for dk, dv,
 *    which sum over the group's heads).
 * Each implementation must lie within 2x its bound of the double reference
 * (the factor covers the second-order terms); two implementations within
 * 4x of each other.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "../test_util.h"
#include "backend/cuda/cuda_internal.h"
#include "cuda_test_util.h"
#include "backend/cuda/cuda_attention.h"

static const double U = 1.0 / 16777216.0; /* 2^-24 */

typedef struct att_case {
    int B, T, NH, NKV, HS;
} att_case;

static int case_C(const att_case *c) { return c->NH * c->HS; }
static long case_W(const att_case *c) { return (long)c->NH * c->HS + 2L * c->NKV * c->HS; }

static lf_dropout no_drop(void) { return (lf_dropout){0.0f, 0, 0, 0}; }

/* uniform in [-a, a) from the test stream */
static void fill(float *x, size_t n, float a, uint64_t seed) {
    for (size_t i = 0; i < n; i++) x[i] = a * (2.0f * lf_rng_uniform(seed, LF_RNG_TEST, i) - 1.0f);
}

static int keep(lf_dropout d, uint64_t i) {
    return lf_rng_uniform(d.seed, LF_RNG_DROPOUT, lf_rng_mix(d.key, d.offset + i)) >= d.p;
}

/* ------------------------------------------------------------------ double reference */

typedef struct ref_result {
    double *out, *out_b;   /* (B,T,C): value, first-order error bound */
    double *dqkv, *dqkv_b; /* (B,T,W) */
    long dropped;          /* masked entries on or below the diagonal */
} ref_result;

static void ref_free(ref_result *r) {
    free(r->out), free(r->out_b), free(r->dqkv), free(r->dqkv_b);
}

static void reference(const att_case *c, const float *qkv, const float *dout, lf_dropout drop, ref_result *r) {
    const int B = c->B, T = c->T, NH = c->NH, HS = c->HS, G = NH / c->NKV, C = case_C(c);
    const long W = case_W(c), KV = (long)c->NKV * HS;
    const double scale = 1.0 / sqrt((double)HS), dscale = drop.p > 0 ? 1.0 / (1.0 - (double)drop.p) : 1.0;
    /* the implementations scale by the float 1/sqrtf(HS) */
    const double fscale = (double)(1.0f / sqrtf((float)HS));
    (void)scale;
    r->out = calloc((size_t)B * T * C, sizeof(double));
    r->out_b = calloc((size_t)B * T * C, sizeof(double));
    r->dqkv = calloc((size_t)B * T * W, sizeof(double));
    r->dqkv_b = calloc((size_t)B * T * W, sizeof(double));
    r->dropped = 0;
    double *P = malloc(sizeof(double) * (size_t)T * T), *F = malloc(sizeof(double) * (size_t)T * T);
    double *dP = malloc(sizeof(double) * (size_t)T * T), *edp = malloc(sizeof(double) * (size_t)T * T);
    double *relP = malloc(sizeof(double) * (size_t)T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const int g = h / G;
            const float *base = qkv + (size_t)b * T * W;
            const float *gb = dout + (size_t)b * T * C + (size_t)h * HS;
            for (int t = 0; t < T; t++) {
                const float *q = base + (size_t)t * W + (size_t)h * HS;
                double m = -INFINITY, esmax = 0;
                for (int j = 0; j <= t; j++) {
                    const float *k = base + (size_t)j * W + C + (size_t)g * HS;
                    double s = 0, sa = 0;
                    for (int d = 0; d < HS; d++) s += (double)q[d] * k[d], sa += fabs((double)q[d] * k[d]);
                    P[(size_t)t * T + j] = s * fscale;
                    esmax = fmax(esmax, (HS + 2) * U * fscale * sa);
                    m = fmax(m, s * fscale);
                }
                double l = 0;
                for (int j = 0; j <= t; j++) l += exp(P[(size_t)t * T + j] - m);
                for (int j = 0; j <= t; j++) {
                    const size_t e = (size_t)t * T + j;
                    P[e] = exp(P[e] - m) / l;
                    const int kp = drop.p > 0 ? keep(drop, (((uint64_t)b * NH + h) * T + t) * T + j) : 1;
                    r->dropped += !kp;
                    F[e] = kp ? dscale : 0.0;
                }
                relP[t] = 2 * esmax + (t + 12) * U + U * (fabs(m) + fabs(log(l)) + 1);
                double *o = r->out + ((size_t)b * T + t) * C + (size_t)h * HS;
                double *ob = r->out_b + ((size_t)b * T + t) * C + (size_t)h * HS;
                for (int d = 0; d < HS; d++) {
                    double acc = 0, bnd = 0;
                    for (int j = 0; j <= t; j++) {
                        const double v = base[(size_t)j * W + C + KV + (size_t)g * HS + d];
                        acc += P[(size_t)t * T + j] * F[(size_t)t * T + j] * v;
                        bnd += P[(size_t)t * T + j] * F[(size_t)t * T + j] * fabs(v);
                    }
                    o[d] = acc;
                    ob[d] = bnd * (relP[t] + (t + 2) * U);
                }
            }
            /* backward of this head */
            const double nsum = (double)G * T + 2;
            for (int t = 0; t < T; t++) {
                const float *gt = gb + (size_t)t * C;
                const float *q = base + (size_t)t * W + (size_t)h * HS;
                double D = 0, Da = 0, eD = 0;
                for (int j = 0; j <= t; j++) {
                    const size_t e = (size_t)t * T + j;
                    const float *v = base + (size_t)j * W + C + KV + (size_t)g * HS;
                    double s = 0, sa = 0;
                    for (int d = 0; d < HS; d++) s += (double)gt[d] * v[d], sa += fabs((double)gt[d] * v[d]);
                    dP[e] = F[e] * s;
                    edp[e] = F[e] * (HS + 2) * U * sa;
                    D += P[e] * dP[e];
                    Da += fabs(P[e] * dP[e]);
                    eD += fabs(P[e] * dP[e]) * relP[t] + P[e] * edp[e];
                }
                eD += (t + 2) * U * Da;
                double *dq = r->dqkv + ((size_t)b * T + t) * W + (size_t)h * HS;
                double *dqb = r->dqkv_b + ((size_t)b * T + t) * W + (size_t)h * HS;
                for (int j = 0; j <= t; j++) {
                    const size_t e = (size_t)t * T + j;
                    const double ds = P[e] * (dP[e] - D);
                    const double eds = P[e] * fabs(dP[e] - D) * relP[t] + P[e] * (edp[e] + eD);
                    const float *k = base + (size_t)j * W + C + (size_t)g * HS;
                    double *dk = r->dqkv + ((size_t)b * T + j) * W + C + (size_t)g * HS;
                    double *dkb = r->dqkv_b + ((size_t)b * T + j) * W + C + (size_t)g * HS;
                    for (int d = 0; d < HS; d++) {
                        dq[d] += fscale * ds * k[d];
                        dqb[d] += fscale * (eds * fabs(k[d]) + (t + 2) * U * fabs(ds * k[d]));
                        dk[d] += fscale * ds * q[d];
                        dkb[d] += fscale * (eds * fabs(q[d]) + nsum * U * fabs(ds * q[d]));
                        dk[KV + d] += P[e] * F[e] * gt[d];
                        dkb[KV + d] += P[e] * F[e] * fabs(gt[d]) * (relP[t] + nsum * U);
                    }
                }
            }
        }
    free(P), free(F), free(dP), free(edp), free(relP);
}

/* |got - want| <= factor * bound for every element (and got finite). */
static void check_close(const char *what, const att_case *c, const float *got, const double *want, const double *bnd,
                        size_t n, double factor) {
    for (size_t i = 0; i < n; i++) {
        const double err = fabs((double)got[i] - want[i]);
        if (!isfinite(got[i]) || err > factor * bnd[i] + 1e-30)
            fail_msg("%s (B %d T %d NH %d NKV %d HS %d): element %zu is %.9g, reference %.9g, |error| %.3g > %.0f x "
                     "bound %.3g",
                     what, c->B, c->T, c->NH, c->NKV, c->HS, i, (double)got[i], want[i], err, factor, bnd[i]);
    }
}

/* The same between two fp32 results, with the reference's bound. */
static void check_pair(const char *what, const att_case *c, const float *a, const float *b, const double *bnd,
                       size_t n) {
    for (size_t i = 0; i < n; i++) {
        const double err = fabs((double)a[i] - (double)b[i]);
        if (!isfinite(a[i]) || !isfinite(b[i]) || err > 4.0 * bnd[i] + 1e-30)
            fail_msg("%s (B %d T %d NH %d NKV %d HS %d): element %zu: %.9g against %.9g, |difference| %.3g > 4 x "
                     "bound %.3g",
                     what, c->B, c->T, c->NH, c->NKV, c->HS, i, (double)a[i], (double)b[i], err, bnd[i]);
    }
}

/* ------------------------------------------------------------------ runs */

static float *dev_from(lf_backend *be, const float *h, size_t n) {
    float *d = be->ops->alloc(be, (n ? n : 1) * sizeof(float));
    assert_non_null(d);
    if (n) be->ops->to_device(be, d, h, n * sizeof(float));
    return d;
}

static float *dev_nan(lf_backend *be, size_t n) {
    float *h = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = NAN;
    float *d = dev_from(be, h, n);
    free(h);
    return d;
}

static void dev_get(lf_backend *be, float *h, const float *d, size_t n) { be->ops->to_host(be, h, d, n * sizeof(float)); }

static lf_backend *open_cuda(void) {
    lf_backend *be = NULL;
    LF_ASSERT_OK(lf__backend_open_ops(lf__backend_cuda(), &be));
    return be;
}

typedef enum { RUN_FUSED, RUN_UNFUSED } run_kind;

/* forward and backward on the CUDA backend: out (B,T,C), dqkv (B,T,W) */
static void cuda_run(lf_backend *be, run_kind kind, const att_case *c, const float *qkv, const float *dout,
                     lf_dropout drop, float *out, float *dqkv) {
    const int B = c->B, T = c->T, C = case_C(c);
    const size_t nq = (size_t)B * T * case_W(c), no = (size_t)B * T * C;
    const size_t nsave = kind == RUN_FUSED ? be->ops->attention_saved(B, c->NH, T) : (size_t)B * c->NH * T * T;
    const size_t nscr = kind == RUN_FUSED ? be->ops->attention_scratch(B, c->NH, T) : (size_t)B * c->NH * T * T;
    float *d_qkv = dev_from(be, qkv, nq), *d_dout = dev_from(be, dout, no);
    float *d_out = dev_nan(be, no), *d_dqkv = dev_nan(be, nq);
    float *d_att = dev_nan(be, nsave), *d_scr = dev_nan(be, nscr);
    if (kind == RUN_FUSED) {
        be->ops->attention_forward(be, d_out, d_att, d_qkv, B, T, C, c->NH, c->NKV, drop);
        be->ops->attention_backward(be, d_dqkv, d_scr, d_dout, d_qkv, d_att, B, T, C, c->NH, c->NKV, drop);
    } else {
        cudaStream_t st = lf__cuda_stream(be);
        assert_int_equal(lf__cuk_attention_ref_forward(d_out, d_att, d_qkv, B, T, C, c->NH, c->NKV, drop.p, drop.seed,
                                                       drop.key, drop.offset, st),
                         cudaSuccess);
        assert_int_equal(lf__cuk_attention_ref_backward(d_dqkv, d_scr, d_dout, d_qkv, d_att, B, T, C, c->NH, c->NKV,
                                                        drop.p, drop.seed, drop.key, drop.offset, st),
                         cudaSuccess);
    }
    LF_ASSERT_OK(lf_backend_sync(be));
    dev_get(be, out, d_out, no);
    dev_get(be, dqkv, d_dqkv, nq);
    LF_ASSERT_OK(lf_backend_sync(be));
    be->ops->free(be, d_qkv), be->ops->free(be, d_dout), be->ops->free(be, d_out), be->ops->free(be, d_dqkv);
    be->ops->free(be, d_att), be->ops->free(be, d_scr);
}

static void cpu_run(const att_case *c, const float *qkv, const float *dout, lf_dropout drop, float *out, float *dqkv) {
    lf_backend *cpu = NULL;
    LF_ASSERT_OK(lf_backend_open("cpu", &cpu));
    const int B = c->B, T = c->T, C = case_C(c);
    float *att = malloc(sizeof(float) * cpu->ops->attention_saved(B, c->NH, T));
    float *scr = malloc(sizeof(float) * cpu->ops->attention_scratch(B, c->NH, T));
    cpu->ops->attention_forward(cpu, out, att, qkv, B, T, C, c->NH, c->NKV, drop);
    cpu->ops->attention_backward(cpu, dqkv, scr, dout, qkv, att, B, T, C, c->NH, c->NKV, drop);
    LF_ASSERT_OK(lf_backend_sync(cpu));
    free(att), free(scr);
    lf_backend_close(cpu);
}

/* Every check of one case: fused against the double reference, the cpu
 * backend and the unfused kernels. */
static void check_case(lf_backend *be, const att_case *c, lf_dropout drop, uint64_t seed) {
    const size_t nq = (size_t)c->B * c->T * case_W(c), no = (size_t)c->B * c->T * case_C(c);
    float *qkv = malloc(nq * sizeof(float)), *dout = malloc(no * sizeof(float));
    fill(qkv, nq, 1.5f, seed);
    fill(dout, no, 1.0f, seed + 1);
    ref_result r;
    reference(c, qkv, dout, drop, &r);
    if (drop.p > 0) assert_true(r.dropped > 0); /* the masks are exercised */
    float *out = malloc(no * sizeof(float)), *dqkv = malloc(nq * sizeof(float));
    float *out2 = malloc(no * sizeof(float)), *dqkv2 = malloc(nq * sizeof(float));
    cuda_run(be, RUN_FUSED, c, qkv, dout, drop, out, dqkv);
    check_close("fused forward out vs double reference", c, out, r.out, r.out_b, no, 2.0);
    check_close("fused backward dqkv vs double reference", c, dqkv, r.dqkv, r.dqkv_b, nq, 2.0);

    cpu_run(c, qkv, dout, drop, out2, dqkv2);
    check_close("cpu forward out vs double reference", c, out2, r.out, r.out_b, no, 2.0);
    check_pair("fused forward out vs cpu", c, out, out2, r.out_b, no);
    check_pair("fused backward dqkv vs cpu", c, dqkv, dqkv2, r.dqkv_b, nq);

    cuda_run(be, RUN_UNFUSED, c, qkv, dout, drop, out2, dqkv2);
    check_close("unfused forward out vs double reference", c, out2, r.out, r.out_b, no, 2.0);
    check_close("unfused backward dqkv vs double reference", c, dqkv2, r.dqkv, r.dqkv_b, nq, 2.0);
    check_pair("fused forward out vs unfused", c, out, out2, r.out_b, no);
    check_pair("fused backward dqkv vs unfused", c, dqkv, dqkv2, r.dqkv_b, nq);
    ref_free(&r);
    free(qkv), free(dout), free(out), free(dqkv), free(out2), free(dqkv2);
}

static const att_case g_cases[] = {
    {2, 70, 4, 4, 16}, /* multi-head; T = 64 + 6 query rows, 2 x 32 + 6 key rows */
    {1, 37, 4, 2, 8},  /* grouped-query */
    {2, 33, 4, 1, 32}, /* multi-query, HS at the first instance's limit */
    {1, 1, 4, 2, 13},  /* one position; odd head size */
    {1, 66, 4, 2, 37}, /* the HS <= 64 instance, odd */
    {1, 3, 4, 4, 65},  /* the HS <= 128 instance */
    {1, 130, 4, 2, 8}, /* three query-row blocks, dk/dv over three key blocks */
};

#ifndef LF_CUDA_SHIM
/* On a real GPU also GPT-2's and Llama's head shapes at a longer T. */
static const att_case g_gpu_cases[] = {
    {2, 500, 12, 12, 64}, /* GPT-2 124M heads */
    {1, 333, 9, 3, 64},   /* smollm-135m: 9 query heads, 3 kv heads */
    {1, 200, 4, 1, 128},  /* the HS <= 128 instance, multi-query */
};
#endif

static void test_fused_vs_references(void **state) {
    (void)state;
    NEED_DEVICE();
    lf_backend *be = open_cuda();
    for (size_t i = 0; i < sizeof g_cases / sizeof g_cases[0]; i++) check_case(be, &g_cases[i], no_drop(), 100 + i);
#ifndef LF_CUDA_SHIM
    for (size_t i = 0; i < sizeof g_gpu_cases / sizeof g_gpu_cases[0]; i++)
        check_case(be, &g_gpu_cases[i], no_drop(), 200 + i);
    const lf_dropout drop = {0.1f, 42, 43, 44};
    check_case(be, &g_gpu_cases[1], drop, 210);
#endif
    lf_backend_close(be);
}

static void test_dropout(void **state) {
    (void)state;
    NEED_DEVICE();
    lf_backend *be = open_cuda();
    const lf_dropout drop = {0.2f, 0x1234abcdULL, 77, 1000};
    const att_case c1 = {2, 45, 4, 2, 16}, c2 = {1, 70, 4, 4, 8};
    check_case(be, &c1, drop, 7);
    check_case(be, &c2, drop, 8);
    /* dropout changes the result (the masks reach the kernels) */
    const size_t nq = (size_t)c1.B * c1.T * case_W(&c1), no = (size_t)c1.B * c1.T * case_C(&c1);
    float *qkv = malloc(nq * 4), *dout = malloc(no * 4), *o1 = malloc(no * 4), *o2 = malloc(no * 4);
    float *g1 = malloc(nq * 4), *g2 = malloc(nq * 4);
    fill(qkv, nq, 1.5f, 9);
    fill(dout, no, 1.0f, 10);
    cuda_run(be, RUN_FUSED, &c1, qkv, dout, drop, o1, g1);
    cuda_run(be, RUN_FUSED, &c1, qkv, dout, no_drop(), o2, g2);
    assert_true(memcmp(o1, o2, no * 4) != 0);
    free(qkv), free(dout), free(o1), free(o2), free(g1), free(g2);
    lf_backend_close(be);
}

/* ------------------------------------------------------------------ determinism */

/* One shape: reruns and (shim) schedules give the same bits. */
static void determinism_case(lf_backend *be, const att_case *c, uint64_t seed) {
    const lf_dropout drop = {0.1f, 5, 6, 0};
    const size_t nq = (size_t)c->B * c->T * case_W(c), no = (size_t)c->B * c->T * case_C(c);
    float *qkv = malloc(nq * 4), *dout = malloc(no * 4);
    float *o0 = malloc(no * 4), *g0 = malloc(nq * 4), *o1 = malloc(no * 4), *g1 = malloc(nq * 4);
    float *u0 = malloc(no * 4), *v0 = malloc(nq * 4);
    fill(qkv, nq, 1.5f, seed);
    fill(dout, no, 1.0f, seed + 1);
    cuda_run(be, RUN_FUSED, c, qkv, dout, drop, o0, g0);
    cuda_run(be, RUN_UNFUSED, c, qkv, dout, drop, u0, v0);
    cuda_run(be, RUN_FUSED, c, qkv, dout, drop, o1, g1);
    assert_memory_equal(o0, o1, no * 4);
    assert_memory_equal(g0, g1, nq * 4);
#ifdef LF_CUDA_SHIM
    lf_shim_schedule_kind kind0;
    uint64_t seed0;
    lf_shim_get_schedule(&kind0, &seed0);
    const struct {
        lf_shim_schedule_kind k;
        uint64_t seed;
    } sched[] = {{LF_SHIM_SCHEDULE_FORWARD, 0}, {LF_SHIM_SCHEDULE_REVERSE, 0}, {LF_SHIM_SCHEDULE_SHUFFLE, 1},
                 {LF_SHIM_SCHEDULE_SHUFFLE, 99}};
    for (size_t i = 0; i < sizeof sched / sizeof sched[0]; i++) {
        lf_shim_set_schedule(sched[i].k, sched[i].seed);
        cuda_run(be, RUN_FUSED, c, qkv, dout, drop, o1, g1);
        assert_memory_equal(o0, o1, no * 4);
        assert_memory_equal(g0, g1, nq * 4);
        cuda_run(be, RUN_UNFUSED, c, qkv, dout, drop, o1, g1);
        assert_memory_equal(u0, o1, no * 4);
        assert_memory_equal(v0, g1, nq * 4);
    }
    lf_shim_set_schedule(kind0, seed0);
#endif
    free(qkv), free(dout), free(o0), free(g0), free(o1), free(g1), free(u0), free(v0);
}

static void test_determinism(void **state) {
    (void)state;
    NEED_DEVICE();
    lf_backend *be = open_cuda();
    /* one lane a row (HS <= 32), two (<= 64) and four (<= 128) */
    const att_case cases[] = {{2, 41, 4, 2, 12}, {1, 35, 4, 2, 40}, {1, 20, 4, 1, 70}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) determinism_case(be, &cases[i], 11 + 2 * i);
    lf_backend_close(be);
}

/* ------------------------------------------------------------------ KV cache */

/* The rows [t0, t0+n) of every batch row of x (B,T,w) as (B,n,w). */
static void rows_of(float *dst, const float *x, int B, int T, long w, int t0, int n) {
    for (int b = 0; b < B; b++)
        memcpy(dst + (size_t)b * n * w, x + ((size_t)b * T + t0) * w, sizeof(float) * (size_t)n * w);
}

/* append rows [t0, t0+n) at position t0, then attend them; out rows (B,n,C) */
static void cached_step(lf_backend *be, const att_case *c, const float *qkv, int t0, int n, float *kc, float *vc,
                        int Tmax, float *out) {
    const int B = c->B, C = case_C(c);
    const long W = case_W(c);
    float *h = malloc(sizeof(float) * (size_t)B * n * W);
    rows_of(h, qkv, B, c->T, W, t0, n);
    float *d_q = dev_from(be, h, (size_t)B * n * W), *d_o = dev_nan(be, (size_t)B * n * C);
    float *d_s = dev_nan(be, be->ops->attention_cached_scratch(B, c->NH, n, t0));
    be->ops->kv_append(be, kc, vc, d_q, B, n, c->NH, c->NKV, c->HS, t0, Tmax);
    be->ops->attention_cached(be, d_o, d_s, d_q, kc, vc, B, n, C, c->NH, c->NKV, t0, Tmax);
    LF_ASSERT_OK(lf_backend_sync(be));
    dev_get(be, out, d_o, (size_t)B * n * C);
    be->ops->free(be, d_q), be->ops->free(be, d_o), be->ops->free(be, d_s);
    free(h);
}

static void test_kv_cache(void **state) {
    (void)state;
    NEED_DEVICE();
    lf_backend *be = open_cuda();
    const att_case cases[] = {{2, 45, 4, 2, 16}, {1, 37, 4, 1, 9}, {1, 35, 4, 4, 40}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const att_case *c = &cases[ci];
        const int B = c->B, T = c->T, C = case_C(c), HS = c->HS, NKV = c->NKV, Tmax = T + 5;
        const long W = case_W(c);
        const size_t nq = (size_t)B * T * W, no = (size_t)B * T * C, ncache = (size_t)B * NKV * Tmax * HS;
        float *qkv = malloc(nq * 4), *dout = malloc(no * 4);
        fill(qkv, nq, 1.5f, 20 + ci);
        fill(dout, no, 1.0f, 30 + ci);
        ref_result r;
        reference(c, qkv, dout, no_drop(), &r);
        float *fwd = malloc(no * 4), *dq = malloc(nq * 4), *all = malloc(no * 4), *one = malloc(no * 4);
        cuda_run(be, RUN_FUSED, c, qkv, dout, no_drop(), fwd, dq);

        /* prefill: all T rows at pos0 0 into a cache pre-filled with a sentinel */
        float *sent = malloc(ncache * 4);
        for (size_t i = 0; i < ncache; i++) sent[i] = -123.5f;
        float *kc = dev_from(be, sent, ncache), *vc = dev_from(be, sent, ncache);
        cached_step(be, c, qkv, 0, T, kc, vc, Tmax, all);
        check_close("attention_cached prefill vs double reference", c, all, r.out, r.out_b, no, 2.0);
        check_pair("attention_cached prefill vs attention_forward", c, all, fwd, r.out_b, no);
        /* the cache holds the k, v bits at 0..T-1 and the sentinel after */
        float *hk = malloc(ncache * 4), *hv = malloc(ncache * 4);
        dev_get(be, hk, kc, ncache);
        dev_get(be, hv, vc, ncache);
        for (int b = 0; b < B; b++)
            for (int g = 0; g < NKV; g++)
                for (int p = 0; p < Tmax; p++)
                    for (int d = 0; d < HS; d++) {
                        const size_t at = (((size_t)b * NKV + g) * Tmax + p) * HS + d;
                        const float *row = qkv + ((size_t)b * T + p) * W + C + (size_t)g * HS + d;
                        assert_true(p < T ? memcmp(&hk[at], row, 4) == 0 : hk[at] == -123.5f);
                        assert_true(p < T ? memcmp(&hv[at], row + (size_t)NKV * HS, 4) == 0 : hv[at] == -123.5f);
                    }

        /* the CPU's attention_cached on the same inputs */
        {
            lf_backend *cpu = NULL;
            LF_ASSERT_OK(lf_backend_open("cpu", &cpu));
            float *ck = malloc(ncache * 4), *cv = malloc(ncache * 4), *co = malloc(no * 4);
            float *cs = malloc(sizeof(float) * cpu->ops->attention_cached_scratch(B, c->NH, T, 0));
            cpu->ops->kv_append(cpu, ck, cv, qkv, B, T, c->NH, NKV, HS, 0, Tmax);
            cpu->ops->attention_cached(cpu, co, cs, qkv, ck, cv, B, T, C, c->NH, NKV, 0, Tmax);
            LF_ASSERT_OK(lf_backend_sync(cpu));
            check_pair("attention_cached vs cpu attention_cached", c, all, co, r.out_b, no);
            free(ck), free(cv), free(co), free(cs);
            lf_backend_close(cpu);
        }

        /* one row at a time: the same bits as the prefill */
        be->ops->to_device(be, kc, sent, ncache * 4);
        be->ops->to_device(be, vc, sent, ncache * 4);
        float *row = malloc(sizeof(float) * (size_t)B * C);
        for (int p = 0; p < T; p++) {
            cached_step(be, c, qkv, p, 1, kc, vc, Tmax, row);
            for (int b = 0; b < B; b++)
                memcpy(one + ((size_t)b * T + p) * C, row + (size_t)b * C, sizeof(float) * (size_t)C);
        }
        assert_memory_equal(one, all, no * 4);
        /* a prefill split in two calls: the same bits again */
        const int split = T / 3 + 1;
        float *part = malloc(no * 4);
        cached_step(be, c, qkv, 0, split, kc, vc, Tmax, part);
        for (int b = 0; b < B; b++)
            memcpy(one + (size_t)b * T * C, part + (size_t)b * split * C, sizeof(float) * (size_t)split * C);
        cached_step(be, c, qkv, split, T - split, kc, vc, Tmax, part);
        for (int b = 0; b < B; b++)
            memcpy(one + ((size_t)b * T + split) * C, part + (size_t)b * (T - split) * C,
                   sizeof(float) * (size_t)(T - split) * C);
        assert_memory_equal(one, all, no * 4);

        be->ops->free(be, kc), be->ops->free(be, vc);
        ref_free(&r);
        free(qkv), free(dout), free(fwd), free(dq), free(all), free(one), free(sent), free(hk), free(hv), free(row);
        free(part);
    }
    lf_backend_close(be);
}

/* ------------------------------------------------------------------ sizes and bad arguments */

static void test_sizes(void **state) {
    (void)state;
    const lf_backend_ops *o = lf__backend_cuda();
    assert_non_null(o->attention_forward);
    assert_non_null(o->attention_backward);
    assert_non_null(o->kv_append);
    assert_non_null(o->attention_cached);
    /* O(T) per head: B*NH*T, not B*NH*T*T */
    assert_int_equal(o->attention_saved(2, 12, 1024), (size_t)2 * 12 * 1024);
    assert_int_equal(o->attention_scratch(2, 12, 1024), (size_t)2 * 12 * 1024);
    assert_int_equal(o->attention_cached_scratch(2, 4, 3, 10), (size_t)2 * 4 * 3 * 13);
    assert_int_equal(o->attention_saved(0, 4, 7), 0);
}

/* A fresh instance, one bad call, its sticky status and message. */
#define BAD_CALL(code, needle, call)                                                               \
    do {                                                                                           \
        lf_backend *be_ = open_cuda();                                                             \
        lf_backend *be = be_;                                                                      \
        call;                                                                                      \
        assert_int_equal(lf_backend_sync(be_), (code));                                            \
        LF_ASSERT_ERR_CONTAINS(needle);                                                            \
        lf_backend_close(be_);                                                                     \
    } while (0)

static void test_bad_args(void **state) {
    (void)state;
    NEED_DEVICE();
    lf_backend *h = open_cuda();
    float *buf = h->ops->alloc(h, 1 << 20); /* large enough for any call below */
    assert_non_null(buf);
    const lf_dropout nd = no_drop(), p1 = {1.0f, 1, 2, 0};
    BAD_CALL(LF_ERR_INVALID_ARG, "4 heads, 3 key/value heads",
             be->ops->attention_forward(be, buf, buf, buf, 1, 8, 32, 4, 3, nd));
    BAD_CALL(LF_ERR_INVALID_ARG, "30 channels, 4 heads",
             be->ops->attention_backward(be, buf, buf, buf, buf, buf, 1, 8, 30, 4, 4, nd));
    BAD_CALL(LF_ERR_UNSUPPORTED, "head size 129",
             be->ops->attention_forward(be, buf, buf, buf, 1, 4, 129 * 2, 2, 2, nd));
    BAD_CALL(LF_ERR_INVALID_ARG, "dropout probability 1",
             be->ops->attention_forward(be, buf, buf, buf, 1, 8, 32, 4, 4, p1));
    BAD_CALL(LF_ERR_INVALID_ARG, "batch 1, -3 positions",
             be->ops->attention_forward(be, buf, buf, buf, 1, -3, 32, 4, 4, nd));
    BAD_CALL(LF_ERR_INVALID_ARG, "5 new rows at position 6 of a cache of 10",
             be->ops->kv_append(be, buf, buf, buf, 1, 5, 4, 2, 8, 6, 10));
    BAD_CALL(LF_ERR_INVALID_ARG, "4 heads, 3 key/value heads",
             be->ops->kv_append(be, buf, buf, buf, 1, 5, 4, 3, 8, 0, 10));
    BAD_CALL(LF_ERR_INVALID_ARG, "11 new rows at position 0 of a cache of 10",
             be->ops->attention_cached(be, buf, buf, buf, buf, buf, 1, 11, 32, 4, 4, 0, 10));
    BAD_CALL(LF_ERR_INVALID_ARG, "4 heads, 3 key/value heads",
             be->ops->attention_cached(be, buf, buf, buf, buf, buf, 1, 2, 32, 4, 3, 0, 10));
    /* the kernels' own wrappers refuse the same before launching */
    assert_int_equal(lf__cuk_attention_forward(buf, buf, buf, 1, 8, 32, 4, 3, 0.0f, 0, 0, 0, lf__cuda_stream(h)),
                     cudaErrorInvalidValue);
    assert_int_equal(lf__cuk_kv_append(buf, buf, buf, 1, 5, 4, 2, 8, 6, 10, lf__cuda_stream(h)),
                     cudaErrorInvalidValue);
    /* nothing launched: the instance is fine, and B = 0 or T = 0 is a no-op */
    h->ops->attention_forward(h, buf, buf, buf, 0, 8, 32, 4, 4, nd);
    h->ops->attention_backward(h, buf, buf, buf, buf, buf, 1, 0, 32, 4, 4, nd);
    LF_ASSERT_OK(lf_backend_sync(h));
    h->ops->free(h, buf);
    lf_backend_close(h);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_fused_vs_references),
        cmocka_unit_test(test_dropout),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_kv_cache),
        cmocka_unit_test(test_bad_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
