/*
 * The CUDA backend's LayerNorm, RMSNorm, fused softmax-cross-entropy and
 * loss sum against the "cpu" backend: on the CUDA-on-CPU shim
 * (cuda.test_cuda_norm_loss) and, with LF_CUDA, the real GPU
 * (gpu.test_cuda_norm_loss: SKIPPED where none answers). The element-wise
 * ops are in test_cuda_pointwise.c (which also describes the helpers).
 *
 * Error models (u = 2^-24; gamma_n = n u / (1 - n u), Higham's bound on an
 * n-term float sum in any order, so two orders differ by at most
 * 2 gamma_n sum|terms|):
 *  - norms, forward: the row sum and the sum of squares are fp32 sums of C
 *    terms in another order than the CPU's. The mean differs by
 *    2 gamma_C sum|x| / C (plus its division); the centred sum of squares
 *    by 2 gamma_(C+2) sum d^2 plus C dm^2 (the centring's first-order term
 *    sum(x - m) vanishes); rstd = 1/sqrt(v/C + eps) by half v's relative
 *    difference damped by v/C / (v/C + eps), plus 3 roundings each side;
 *    each output (x - m) r w (+ b) by |w| (r dm + |x - m| dr) plus 4
 *    roundings of its terms.
 *  - norms, backward dinp: the two row means of dnorm and dnorm * norm are
 *    C-term sums (2 gamma_(C+2) of their absolute sums, over C), then
 *    dinp += r (dnorm - dm - norm dnm): r (ddm + |norm| ddnm) plus 5
 *    roundings of the terms, plus the += rounding.
 *  - norms, dweight / dbias: both sum the CPU's float terms (the same
 *    bits: same inputs, same expression) in double, in other orders: the
 *    doubles differ by 2 N 2^-53 sum|t|, their float roundings by one ulp
 *    (2u relative), the += by another.
 *  - cross-entropy: exp differs (CUDA's or the host's expf, within 2 ulp,
 *    against the CPU's correctly rounded one): every e_j within 6u
 *    relative, so their double sum within 6u relative, 1/sum within 7u;
 *    loss = log(sum) + max - l_t within 7u absolute plus its rounding;
 *    dlogits = e s dloss within 20u relative (e, 1/sum, its rounding, two
 *    products); the target's (p_t - 1) dloss within 20u (p_t + 1) |dloss|
 *    (the subtraction cancels).
 *  - loss_sum: the CPU's additions in the CPU's order: the same bits.
 * The residual-fused norms must give the bits of residual_forward and the
 * plain norm on the same instance (test_residual_norms).
 * Ignored rows (target < 0) and padding columns must be exactly 0; a
 * target >= V gives a NaN loss and a zero row, as on the CPU. Outputs that
 * add are pre-filled with random values, outputs that overwrite with
 * garbage; every op is rerun under every shim schedule for the same bits.
 */
#include "pw_test_util.h"

/* ---------------------------------------------------------------- LayerNorm / RMSNorm */

typedef struct norm_ctx {
    lf_backend *be;
    int N, C, rms, with_bias;
    float eps;
    const float *x, *w, *b, *dout, *dinp0, *dw0, *db0, *mean_cpu, *rstd_cpu;
    float *d_x, *d_w, *d_b, *d_dout, *d_out, *d_mean, *d_rstd, *d_dinp, *d_dw, *d_db;
} norm_ctx;

/* out: out (N,C), mean (N), rstd (N), dinp (N,C), dweight (C), dbias (C).
 * The backward takes the CPU's mean/rstd, so its check is of backward
 * alone. */
static void norm_run(void *vc, void *out) {
    norm_ctx *c = vc;
    lf_backend *be = c->be;
    const size_t NC = (size_t)c->N * c->C;
    float *o = out;
    pw_put(be, c->d_dinp, c->dinp0, NC * 4);
    pw_put(be, c->d_dw, c->dw0, (size_t)c->C * 4);
    pw_put(be, c->d_db, c->db0, (size_t)c->C * 4);
    if (c->rms) {
        be->ops->rmsnorm_forward(be, c->d_out, LF_DT_F32, c->d_rstd, c->d_x, c->d_w, c->N, c->C, c->eps);
    } else {
        be->ops->layernorm_forward(be, c->d_out, LF_DT_F32, c->d_mean, c->d_rstd, c->d_x, c->d_w,
                                   c->with_bias ? c->d_b : NULL, c->N, c->C);
    }
    pw_down(be, o, c->d_out, NC * 4);
    pw_down(be, o + NC, c->d_mean, (size_t)c->N * 4);
    pw_down(be, o + NC + c->N, c->d_rstd, (size_t)c->N * 4);
    pw_put(be, c->d_mean, c->mean_cpu, (size_t)c->N * 4);
    pw_put(be, c->d_rstd, c->rstd_cpu, (size_t)c->N * 4);
    if (c->rms) {
        be->ops->rmsnorm_backward(be, c->d_dinp, c->d_dw, c->d_dout, c->d_x, c->d_w, c->d_rstd, c->N, c->C);
    } else {
        be->ops->layernorm_backward(be, c->d_dinp, c->d_dw, c->with_bias ? c->d_db : NULL, c->d_dout, c->d_x, c->d_w,
                                    c->d_mean, c->d_rstd, c->N, c->C);
    }
    pw_down(be, o + NC + 2 * (size_t)c->N, c->d_dinp, NC * 4);
    pw_down(be, o + 2 * NC + 2 * (size_t)c->N, c->d_dw, (size_t)c->C * 4);
    pw_down(be, o + 2 * NC + 2 * (size_t)c->N + c->C, c->d_db, (size_t)c->C * 4);
}

static void check_norm(int N, int C, int rms, int with_bias, uint64_t seed) {
    pw_env e;
    pw_open(&e);
    const size_t NC = (size_t)N * C;
    const float eps = rms ? 1e-6f : 1e-5f;
    /* an offset mean (3) makes LayerNorm's centring matter */
    float *x = pw_random(NC, seed, rms ? -2.0f : 1.0f, rms ? 2.0f : 5.0f), *w = pw_random(C, seed + 1, 0.5f, 1.5f);
    float *b = pw_random(C, seed + 2, -1, 1), *dout = pw_random(NC, seed + 3, -1, 1);
    float *dinp0 = pw_random(NC, seed + 4, -1, 1), *dw0 = pw_random(C, seed + 5, -1, 1);
    float *db0 = pw_random(C, seed + 6, -1, 1);
    float *mean = calloc(N, 4), *rstd = calloc(N, 4), *ref_out = malloc(NC * 4);
    if (rms) {
        e.cpu->ops->rmsnorm_forward(e.cpu, ref_out, LF_DT_F32, rstd, x, w, N, C, eps);
    } else {
        e.cpu->ops->layernorm_forward(e.cpu, ref_out, LF_DT_F32, mean, rstd, x, w, with_bias ? b : NULL, N, C);
    }
    float *ref_dinp = pw_dup(dinp0, NC * 4), *ref_dw = pw_dup(dw0, C * 4), *ref_db = pw_dup(db0, C * 4);
    if (rms) {
        e.cpu->ops->rmsnorm_backward(e.cpu, ref_dinp, ref_dw, dout, x, w, rstd, N, C);
    } else {
        e.cpu->ops->layernorm_backward(e.cpu, ref_dinp, ref_dw, with_bias ? ref_db : NULL, dout, x, w, mean, rstd, N,
                                       C);
    }
    norm_ctx c = {e.be, N, C, rms, with_bias, eps, x, w, b, dout, dinp0, dw0, db0, mean, rstd,
                  pw_up(e.be, x, NC * 4), pw_up(e.be, w, C * 4), pw_up(e.be, b, C * 4), pw_up(e.be, dout, NC * 4),
                  pw_up(e.be, NULL, NC * 4), pw_up(e.be, mean, N * 4), /* RMSNorm leaves mean alone */
                  pw_up(e.be, NULL, N * 4), pw_up(e.be, NULL, NC * 4), pw_up(e.be, NULL, C * 4),
                  pw_up(e.be, NULL, C * 4)};
    const size_t total = 2 * NC + 2 * (size_t)N + 2 * (size_t)C;
    float *got = malloc(total * 4);
    norm_run(&c, got);
    const float *g_out = got, *g_mean = got + NC, *g_rstd = got + NC + N, *g_dinp = got + NC + 2 * N;
    const float *g_dw = got + 2 * NC + 2 * N, *g_db = g_dw + C;
    double *tol = malloc(NC * sizeof *tol), *tr = malloc(N * sizeof *tr), *tm = malloc(N * sizeof *tm);
    double *tdinp = malloc(NC * sizeof *tdinp);
    const double gC = pw_gamma(C + 2);
    for (int n = 0; n < N; n++) {
        const float *xr = x + (size_t)n * C, *dr = dout + (size_t)n * C;
        const double m = rms ? 0.0 : mean[n], r = rstd[n];
        double sabs = 0, sdd = 0;
        for (int k = 0; k < C; k++) {
            sabs += fabs((double)xr[k]);
            sdd += ((double)xr[k] - m) * ((double)xr[k] - m);
        }
        const double dm = rms ? 0.0 : 2.0 * gC * sabs / C + 2.0 * PW_U * fabs(m);
        const double dv = 2.0 * gC * sdd + C * dm * dm; /* of sum d^2 */
        const double vc = sdd / C;
        const double drel = 0.5 * (dv / C) / (vc + eps) + 6.0 * PW_U; /* of rstd, relative */
        tm[n] = dm;
        tr[n] = r * drel;
        double a1 = 0, a2 = 0, s1 = 0, s2 = 0;
        for (int k = 0; k < C; k++) {
            const double nk = ((double)xr[k] - m) * r, dn = (double)w[k] * dr[k];
            a1 += fabs(dn);
            a2 += fabs(dn * nk);
            s1 += dn;
            s2 += dn * nk;
        }
        const double ddm = rms ? 0.0 : 2.0 * gC * a1 / C, ddnm = 2.0 * gC * a2 / C;
        const double mdm = rms ? 0.0 : fabs(s1 / C), mdnm = fabs(s2 / C);
        for (int k = 0; k < C; k++) {
            const size_t i = (size_t)n * C + k;
            const double d = (double)xr[k] - m, wk = w[k];
            tol[i] = fabs(wk) * (r * dm + fabs(d) * r * drel) + 4.0 * PW_U * (fabs(d * r * wk) +
                                                                              (with_bias && !rms ? fabs((double)b[k]) : 0));
            const double nk = d * r, dn = wk * dr[k];
            tdinp[i] = r * (ddm + fabs(nk) * ddnm + 5.0 * PW_U * (fabs(dn) + mdm + fabs(nk) * mdnm)) +
                       2.0 * PW_U * fabs((double)ref_dinp[i]);
        }
    }
    char what[96];
    snprintf(what, sizeof what, "%s_forward N=%d C=%d%s", rms ? "rmsnorm" : "layernorm", N, C,
             with_bias ? "" : " (no bias)");
    pw_check_within(what, g_out, ref_out, tol, NC);
    if (!rms) {
        pw_check_within("layernorm mean", g_mean, mean, tm, N);
    } else {
        pw_check_bits("rmsnorm leaves mean alone", g_mean, mean, N * 4);
    }
    pw_check_within("norm rstd", g_rstd, rstd, tr, N);
    snprintf(what, sizeof what, "%s_backward dinp N=%d C=%d", rms ? "rmsnorm" : "layernorm", N, C);
    pw_check_within(what, g_dinp, ref_dinp, tdinp, NC);
    /* dweight, dbias: double sums of the same float terms */
    double *tw = malloc(C * sizeof *tw), *tb = malloc(C * sizeof *tb);
    for (int k = 0; k < C; k++) {
        double aw = 0, ab = 0, sw = 0, sb = 0;
        for (int n = 0; n < N; n++) {
            const size_t i = (size_t)n * C + k;
            const double t = rms ? (double)(dout[i] * (x[i] * rstd[n])) : (double)(dout[i] * ((x[i] - mean[n]) * rstd[n]));
            aw += fabs(t);
            sw += t;
            ab += fabs((double)dout[i]);
            sb += dout[i];
        }
        tw[k] = 2.0 * N * 0x1p-53 * aw + 2.0 * PW_U * (fabs(sw) + fabs((double)ref_dw[k]));
        tb[k] = 2.0 * N * 0x1p-53 * ab + 2.0 * PW_U * (fabs(sb) + fabs((double)ref_db[k]));
    }
    pw_check_within("norm dweight", g_dw, ref_dw, tw, C);
    if (with_bias && !rms) {
        pw_check_within("layernorm dbias", g_db, ref_db, tb, C);
    } else {
        pw_check_bits("dbias untouched (NULL)", g_db, db0, C * 4);
    }
    pw_check_repeatable(what, norm_run, &c, got, total * 4);
    pw_free(e.be, c.d_x), pw_free(e.be, c.d_w), pw_free(e.be, c.d_b), pw_free(e.be, c.d_dout);
    pw_free(e.be, c.d_out), pw_free(e.be, c.d_mean), pw_free(e.be, c.d_rstd), pw_free(e.be, c.d_dinp);
    pw_free(e.be, c.d_dw), pw_free(e.be, c.d_db);
    free(x), free(w), free(b), free(dout), free(dinp0), free(dw0), free(db0), free(mean), free(rstd);
    free(ref_out), free(ref_dinp), free(ref_dw), free(ref_db), free(got), free(tol), free(tr), free(tm);
    free(tdinp), free(tw), free(tb);
    pw_close(&e);
}

static void test_layernorm(void **state) {
    (void)state;
    PW_NEED_DEVICE();
    check_norm(3, 37, 0, 1, 100);
    check_norm(130, 769, 0, 1, 200); /* 768 + 1 channels: a partial warp stride and a partial channel slice */
    check_norm(1, 45, 0, 0, 300);    /* bias=false */
}

static void test_rmsnorm(void **state) {
    (void)state;
    PW_NEED_DEVICE();
    check_norm(3, 37, 1, 0, 400);
    check_norm(130, 769, 1, 0, 500);
}

/* ---------------------------------------------------------------- per-head q/k RMSNorm (Qwen3) */

/* The error model of RMSNorm above, per head of HS channels; the v part
 * (forward: copied; backward: untouched) must be the same bits. */
typedef struct qk_ctx {
    lf_backend *be;
    int N, NH, NKV, HS;
    float eps;
    const float *dout, *dw0, *rstd_cpu;
    float *d_x, *d_wq, *d_wk, *d_out, *d_rstd, *d_d, *d_dwq, *d_dwk;
} qk_ctx;

/* out: out (N,W), rstd (N,H), d(inp) (N,W), dwq (HS), dwk (HS) */
static void qk_run(void *vc, void *out) {
    qk_ctx *c = vc;
    lf_backend *be = c->be;
    const size_t W = (size_t)(c->NH + 2 * c->NKV) * c->HS, NW = (size_t)c->N * W, NHh = (size_t)c->N * (c->NH + c->NKV);
    float *o = out;
    be->ops->qknorm_forward(be, c->d_out, c->d_rstd, c->d_x, c->d_wq, c->d_wk, c->N, c->NH, c->NKV, c->HS, c->eps);
    pw_down(be, o, c->d_out, NW * 4);
    pw_down(be, o + NW, c->d_rstd, NHh * 4);
    pw_put(be, c->d_rstd, c->rstd_cpu, NHh * 4);
    pw_put(be, c->d_d, c->dout, NW * 4);
    pw_put(be, c->d_dwq, c->dw0, (size_t)c->HS * 4);
    pw_put(be, c->d_dwk, c->dw0 + c->HS, (size_t)c->HS * 4);
    be->ops->qknorm_backward(be, c->d_d, c->d_dwq, c->d_dwk, c->d_x, c->d_wq, c->d_wk, c->d_rstd, c->N, c->NH, c->NKV,
                             c->HS);
    pw_down(be, o + NW + NHh, c->d_d, NW * 4);
    pw_down(be, o + 2 * NW + NHh, c->d_dwq, (size_t)c->HS * 4);
    pw_down(be, o + 2 * NW + NHh + c->HS, c->d_dwk, (size_t)c->HS * 4);
}

static void check_qknorm(int N, int NH, int NKV, int HS, uint64_t seed) {
    pw_env e;
    pw_open(&e);
    const int H = NH + NKV;
    const size_t W = (size_t)(NH + 2 * NKV) * HS, NW = (size_t)N * W, NHh = (size_t)N * H;
    const float eps = 1e-6f;
    float *x = pw_random(NW, seed, -2.0f, 2.0f), *wq = pw_random(HS, seed + 1, 0.5f, 1.5f);
    float *wk = pw_random(HS, seed + 2, 0.5f, 1.5f), *dout = pw_random(NW, seed + 3, -1, 1);
    float *dw0 = pw_random(2 * (size_t)HS, seed + 4, -1, 1);
    float *rstd = calloc(NHh, 4), *ref_out = malloc(NW * 4), *ref_d = pw_dup(dout, NW * 4);
    float *ref_dw = pw_dup(dw0, 2 * (size_t)HS * 4);
    e.cpu->ops->qknorm_forward(e.cpu, ref_out, rstd, x, wq, wk, N, NH, NKV, HS, eps);
    e.cpu->ops->qknorm_backward(e.cpu, ref_d, ref_dw, ref_dw + HS, x, wq, wk, rstd, N, NH, NKV, HS);
    qk_ctx c = {e.be, N, NH, NKV, HS, eps, dout, dw0, rstd,
                pw_up(e.be, x, NW * 4), pw_up(e.be, wq, HS * 4), pw_up(e.be, wk, HS * 4), pw_up(e.be, NULL, NW * 4),
                pw_up(e.be, NULL, NHh * 4), pw_up(e.be, NULL, NW * 4), pw_up(e.be, NULL, HS * 4),
                pw_up(e.be, NULL, HS * 4)};
    const size_t total = 2 * NW + NHh + 2 * (size_t)HS;
    float *got = malloc(total * 4);
    qk_run(&c, got);
    const float *g_out = got, *g_rstd = got + NW, *g_d = got + NW + NHh, *g_dw = got + 2 * NW + NHh;
    double *tol = calloc(NW, sizeof *tol), *tr = calloc(NHh, sizeof *tr), *td = calloc(NW, sizeof *td);
    double *tw = calloc(2 * (size_t)HS, sizeof *tw), *aw = calloc(2 * (size_t)HS, sizeof *aw),
           *sw = calloc(2 * (size_t)HS, sizeof *sw);
    const double gC = pw_gamma(HS + 2);
    for (int n = 0; n < N; n++)
        for (int h = 0; h < H; h++) {
            const size_t o = (size_t)n * W + (size_t)h * HS;
            const float *xr = x + o, *dr = dout + o, *w = h < NH ? wq : wk;
            const double r = rstd[(size_t)n * H + h];
            double sdd = 0, a2 = 0, s2 = 0;
            for (int k = 0; k < HS; k++) sdd += (double)xr[k] * xr[k];
            const double drel = 0.5 * (2.0 * gC * sdd / HS) / (sdd / HS + eps) + 6.0 * PW_U;
            tr[(size_t)n * H + h] = r * drel;
            for (int k = 0; k < HS; k++) {
                const double nk = xr[k] * r, dn = (double)w[k] * dr[k];
                a2 += fabs(dn * nk);
                s2 += dn * nk;
                const double t = (double)(dr[k] * (xr[k] * (float)r));
                aw[(h < NH ? 0 : HS) + k] += fabs(t);
                sw[(h < NH ? 0 : HS) + k] += t;
            }
            const double ddnm = 2.0 * gC * a2 / HS, mdnm = fabs(s2 / HS);
            for (int k = 0; k < HS; k++) {
                const double nk = xr[k] * r, dn = (double)w[k] * dr[k];
                tol[o + k] = fabs((double)w[k]) * fabs((double)xr[k]) * r * drel + 4.0 * PW_U * fabs(nk * w[k]);
                td[o + k] = r * (fabs(nk) * ddnm + 5.0 * PW_U * (fabs(dn) + fabs(nk) * mdnm)) +
                            2.0 * PW_U * fabs((double)ref_d[o + k]);
            }
        }
    for (int k = 0; k < 2 * HS; k++)
        tw[k] = 2.0 * N * (k < HS ? NH : NKV) * 0x1p-53 * aw[k] + 2.0 * PW_U * (fabs(sw[k]) + fabs((double)ref_dw[k]));
    char what[96];
    snprintf(what, sizeof what, "qknorm N=%d NH=%d NKV=%d HS=%d", N, NH, NKV, HS);
    pw_check_within(what, g_out, ref_out, tol, NW); /* v: tolerance 0, the copy */
    pw_check_within("qknorm rstd", g_rstd, rstd, tr, NHh);
    pw_check_within("qknorm_backward d(inp)", g_d, ref_d, td, NW); /* v: tolerance 0, untouched */
    pw_check_within("qknorm dwq, dwk", g_dw, ref_dw, tw, 2 * (size_t)HS);
    pw_check_repeatable(what, qk_run, &c, got, total * 4);
    float *bufs[] = {c.d_x, c.d_wq, c.d_wk, c.d_out, c.d_rstd, c.d_d, c.d_dwq, c.d_dwk};
    for (int i = 0; i < 8; i++) pw_free(e.be, bufs[i]);
    free(x), free(wq), free(wk), free(dout), free(dw0), free(rstd), free(ref_out), free(ref_d), free(ref_dw);
    free(got), free(tol), free(tr), free(td), free(tw), free(aw), free(sw);
    pw_close(&e);
}

static void test_qknorm(void **state) {
    (void)state;
    PW_NEED_DEVICE();
    check_qknorm(5, 4, 2, 16, 600);  /* GQA, half a warp per head */
    check_qknorm(33, 3, 1, 40, 700); /* a partial warp stride */
}

/* ---------------------------------------------------------------- cross-entropy, loss sum */

typedef struct ce_ctx {
    lf_backend *be;
    int N, V, Vp, mode; /* mode 0: separate dlogits, 1: dlogits NULL, 2: in place */
    float dloss;
    const float *logits;
    const int32_t *tgt;
    float *d_logits, *d_dl, *d_loss;
    int32_t *d_tgt;
} ce_ctx;

/* out: losses (N), dlogits (N,Vp) (mode 1: the logits, untouched) */
static void ce_run(void *vc, void *out) {
    ce_ctx *c = vc;
    lf_backend *be = c->be;
    const size_t NV = (size_t)c->N * c->Vp;
    float *o = out;
    pw_put(be, c->d_logits, c->logits, NV * 4);
    float *dl = c->mode == 0 ? c->d_dl : c->mode == 1 ? NULL : c->d_logits;
    be->ops->crossentropy_forward_backward(be, c->d_loss, dl, c->d_logits, c->d_tgt, c->N, c->V, c->Vp, c->dloss);
    pw_down(be, o, c->d_loss, (size_t)c->N * 4);
    pw_down(be, o + c->N, c->mode == 0 ? c->d_dl : c->d_logits, NV * 4);
}

static void check_ce(int N, int V, int Vp, uint64_t seed) {
    pw_env e;
    pw_open(&e);
    const size_t NV = (size_t)N * Vp;
    float *logits = pw_random(NV, seed, -6, 6);
    if (V > 1) logits[1] = 30.0f; /* one dominant logit: p near 1, p_t - 1 cancels */
    int32_t *tgt = malloc(N * sizeof *tgt);
    for (int i = 0; i < N; i++) tgt[i] = (int32_t)(lf_rng_u64(seed, LF_RNG_TEST, 1000 + i) % (uint64_t)V);
    tgt[0] = V > 1 ? 1 : 0;
    if (N > 2) tgt[2] = -1; /* ignored */
    if (N > 3) tgt[3] = V;  /* malformed: NaN loss, zero row */
    const float dloss = 1.0f / (float)N;
    float *garbage = pw_random(NV, seed + 1, -1e3f, 1e3f);
    ce_ctx c = {e.be, N, V, Vp, 0, dloss, logits, tgt, pw_up(e.be, logits, NV * 4), pw_up(e.be, garbage, NV * 4),
                pw_up(e.be, garbage, N * 4), pw_up(e.be, tgt, N * 4)};
    float *got = malloc((N + NV) * 4), *ref = malloc((N + NV) * 4);
    double *tol = malloc((N + NV) * sizeof *tol);
    for (int mode = 0; mode < 3; mode++) {
        c.mode = mode;
        pw_put(e.be, c.d_dl, garbage, NV * 4);
        ce_run(&c, got);
        memcpy(ref + N, logits, NV * 4);
        e.cpu->ops->crossentropy_forward_backward(e.cpu, ref, mode == 1 ? NULL : ref + N, ref + N, tgt, N, V, Vp,
                                                  dloss);
        for (int i = 0; i < N; i++) {
            const float *l = logits + (size_t)i * Vp;
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j < V; j++) mx = fmax(mx, l[j]);
            for (int j = 0; j < V; j++) sum += exp(l[j] - mx);
            tol[i] = 7.0 * PW_U + 2.0 * PW_U * fabs((double)ref[i]);
            for (int j = 0; j < Vp; j++) {
                const size_t k = N + (size_t)i * Vp + j;
                if (mode == 1 || tgt[i] < 0 || tgt[i] >= V || j >= V) {
                    tol[k] = 0.0; /* untouched logits, or exact zeros */
                } else {
                    const double p = exp(l[j] - mx) / sum;
                    /* e: 5u (2.5 ulp); the sum and so 1/sum: 5u, its float
                     * rounding 2u; two products 4u: 16u, and 4u more for
                     * ulps being up to 2u relative in the roundings counted
                     * at u */
                    tol[k] = j == tgt[i] ? 20.0 * PW_U * (p + 1.0) * fabs(dloss) : 20.0 * PW_U * p * fabs(dloss) + 1e-40;
                }
            }
        }
        char what[96];
        snprintf(what, sizeof what, "crossentropy N=%d V=%d Vp=%d %s losses", N, V, Vp,
                 mode == 0 ? "(dlogits apart)" : mode == 1 ? "(no dlogits)" : "(in place)");
        pw_check_within(what, got, ref, tol, N);
        snprintf(what, sizeof what, "crossentropy N=%d V=%d Vp=%d %s dlogits", N, V, Vp,
                 mode == 0 ? "(dlogits apart)" : mode == 1 ? "(no dlogits: the logits untouched)" : "(in place)");
        pw_check_within(what, got + N, ref + N, tol + N, NV);
        if (N > 2) assert_true(got[2] == 0.0f);
        if (N > 3) assert_true(isnan(got[3]));
        pw_check_repeatable(what, ce_run, &c, got, (N + NV) * 4);
    }
    /* loss_sum over these losses: the valid rows in row order, in double */
    float *d_losses = pw_up(e.be, ref, N * 4);
    long nv = -1, nvc = -1;
    const double s = e.be->ops->loss_sum(e.be, d_losses, c.d_tgt, N, &nv);
    LF_ASSERT_OK(lf_backend_sync(e.be));
    const double sc = e.cpu->ops->loss_sum(e.cpu, ref, tgt, N, &nvc);
    assert_int_equal(nv, nvc);
    if (memcmp(&s, &sc, sizeof s)) fail_msg("loss_sum N=%d: %.17g, cpu %.17g", N, s, sc);
    pw_free(e.be, d_losses);
    pw_free(e.be, c.d_logits), pw_free(e.be, c.d_dl), pw_free(e.be, c.d_loss), pw_free(e.be, c.d_tgt);
    free(logits), free(tgt), free(garbage), free(got), free(ref), free(tol);
    pw_close(&e);
}

static void test_crossentropy(void **state) {
    (void)state;
    PW_NEED_DEVICE();
    check_ce(5, 37, 40, 600);
    check_ce(3, 1025, 1032, 700); /* V over two strides of the 512-thread block */
    check_ce(1, 1, 1, 800);       /* the smallest: loss 0, dlogits 0 */
}

static void test_loss_sum(void **state) {
    (void)state;
    PW_NEED_DEVICE();
    pw_env e;
    pw_open(&e);
    const int sizes[] = {0, 1, 300, 1000};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const int N = sizes[k];
        float *l = pw_random(N, 900 + k, 0, 12);
        int32_t *t = malloc((N ? N : 1) * sizeof *t);
        for (int i = 0; i < N; i++) t[i] = lf_rng_u64(901, LF_RNG_TEST, i) % 4 == 0 ? -1 : i % 50;
        float *dl = pw_up(e.be, l, N * 4);
        int32_t *dt = pw_up(e.be, t, N * 4);
        long nv = -1, nvc = -1;
        const double s = e.be->ops->loss_sum(e.be, dl, dt, N, &nv);
        const double sc = e.cpu->ops->loss_sum(e.cpu, l, t, N, &nvc);
        LF_ASSERT_OK(lf_backend_sync(e.be));
        assert_int_equal(nv, nvc);
        if (memcmp(&s, &sc, sizeof s)) fail_msg("loss_sum N=%d: %.17g, cpu %.17g", N, s, sc);
        pw_free(e.be, dl);
        pw_free(e.be, dt);
        free(l), free(t);
    }
    pw_close(&e);
}

/* ---------------------------------------------------------------- bf16 outputs (cuda-bf16) */

/* LayerNorm (with and without bias) and RMSNorm writing bf16 storage on
 * cuda-bf16: exactly the rounding of the same instance's fp32 output, the
 * same statistics bit for bit, and within one bf16 step of cpu-bf16's bf16
 * output (the fp32 outputs agree within test_layernorm's bound, far below
 * a bf16 step). Odd N and C; the element after the output untouched. */
static void test_bf16_outputs(void **state) {
    (void)state;
    PW_NEED_DEVICE();
    pw_env e;
    pw_open_bf16(&e);
    const int N = 37, C = 67;
    const size_t NC = (size_t)N * C;
    float *x = pw_random(NC, 71, -2, 3), *w = pw_random((size_t)C, 72, 0.5f, 1.5f), *b = pw_random((size_t)C, 73, -1, 1);
    float *f32 = malloc(NC * 4), *st32 = malloc(2 * (size_t)N * 4), *st16 = malloc(2 * (size_t)N * 4);
    float *cst = malloc(2 * (size_t)N * 4);
    uint16_t *g16 = malloc((NC + 1) * 2), *c16 = malloc(NC * 2);
    float *d_x = pw_up(e.be, x, NC * 4), *d_w = pw_up(e.be, w, (size_t)C * 4), *d_b = pw_up(e.be, b, (size_t)C * 4);
    float *d_f = pw_up(e.be, NULL, NC * 4), *d_s = pw_up(e.be, NULL, 2 * (size_t)N * 4);
    uint16_t *d_h = pw_up(e.be, NULL, (NC + 1) * 2);
    const uint16_t guard = 0x4321;
    for (int op = 0; op < 3; op++) {
        const char *what = op == 0 ? "layernorm_forward bf16" : op == 1 ? "layernorm_forward bf16 (no bias)"
                                                                          : "rmsnorm_forward bf16";
        pw_put(e.be, d_h + NC, &guard, 2);
        if (op < 2) {
            const float *bb = op == 0 ? d_b : NULL;
            e.be->ops->layernorm_forward(e.be, d_f, LF_DT_F32, d_s, d_s + N, d_x, d_w, bb, N, C);
            pw_down(e.be, st32, d_s, 2 * (size_t)N * 4);
            e.be->ops->layernorm_forward(e.be, d_h, LF_DT_BF16, d_s, d_s + N, d_x, d_w, bb, N, C);
            pw_down(e.be, st16, d_s, 2 * (size_t)N * 4);
            e.cpu->ops->layernorm_forward(e.cpu, c16, LF_DT_BF16, cst, cst + N, x, w, op == 0 ? b : NULL, N, C);
        } else {
            e.be->ops->rmsnorm_forward(e.be, d_f, LF_DT_F32, d_s, d_x, d_w, N, C, 1e-6f);
            pw_down(e.be, st32, d_s, (size_t)N * 4);
            e.be->ops->rmsnorm_forward(e.be, d_h, LF_DT_BF16, d_s, d_x, d_w, N, C, 1e-6f);
            pw_down(e.be, st16, d_s, (size_t)N * 4);
            e.cpu->ops->rmsnorm_forward(e.cpu, c16, LF_DT_BF16, cst, x, w, N, C, 1e-6f);
        }
        pw_down(e.be, f32, d_f, NC * 4);
        pw_down(e.be, g16, d_h, (NC + 1) * 2);
        pw_check_bf16_of(what, g16, f32, NC);
        pw_check_bits(what, st16, st32, (op < 2 ? 2 : 1) * (size_t)N * 4);
        pw_check_bf16_adjacent(what, g16, c16, NC);
        assert_int_equal(g16[NC], guard);
    }
    LF_ASSERT_OK(lf_backend_sync(e.cpu));
    pw_free(e.be, d_x), pw_free(e.be, d_w), pw_free(e.be, d_b), pw_free(e.be, d_f), pw_free(e.be, d_s);
    pw_free(e.be, d_h);
    free(x), free(w), free(b), free(f32), free(st32), free(st16), free(cst), free(g16), free(c16);
    pw_close(&e);
}

/* ---------------------------------------------------------------- residual-fused norms */

/* residual_layernorm_forward / residual_rmsnorm_forward against the same
 * instance's residual_forward followed by the plain norm: the same bits
 * (res, out, mean, rstd), since the fused kernel stores and reads back the
 * very sums the pair stores and reads (the plain norms are checked against
 * the CPU above). fp32 on "cuda", bf16 storage on "cuda-bf16"; odd N and C
 * (a partial last block of rows, a partial warp stride); res written in
 * place over a (the model's residual stream may alias); the element after
 * each output untouched; every shim schedule gives the same bits. */
typedef struct rn_ctx {
    lf_backend *be;
    int N, C, op, bf16, inplace;
    const float *a, *b;
    float *d_a, *d_b, *d_w, *d_bias, *d_res, *d_s;
    void *d_out;
} rn_ctx;

/* out: res (N,C), out (N,C floats of room), mean, rstd (N each); fused == 1 the fused op, else the pair */
static void rn_run1(rn_ctx *c, float *o, int fused) {
    lf_backend *be = c->be;
    const size_t NC = (size_t)c->N * c->C;
    const lf_dtype dt = c->bf16 ? LF_DT_BF16 : LF_DT_F32;
    memset(o, 0, (2 * NC + 1 + 2 * (size_t)c->N) * 4); /* bf16 outputs fill half their room */
    pw_put(be, c->d_a, c->a, NC * 4);
    pw_put(be, c->d_b, c->b, NC * 4);
    float *res = c->inplace ? c->d_a : c->d_res;
    const float *bias = c->op == 0 ? c->d_bias : NULL;
    if (c->op < 2) {
        if (fused) {
            be->ops->residual_layernorm_forward(be, res, c->d_out, dt, c->d_s, c->d_s + c->N, c->d_a, c->d_b, c->d_w,
                                                bias, c->N, c->C);
        } else {
            be->ops->residual_forward(be, res, c->d_a, c->d_b, NC);
            be->ops->layernorm_forward(be, c->d_out, dt, c->d_s, c->d_s + c->N, res, c->d_w, bias, c->N, c->C);
        }
    } else if (fused) {
        be->ops->residual_rmsnorm_forward(be, res, c->d_out, dt, c->d_s + c->N, c->d_a, c->d_b, c->d_w, c->N, c->C,
                                          1e-6f);
    } else {
        be->ops->residual_forward(be, res, c->d_a, c->d_b, NC);
        be->ops->rmsnorm_forward(be, c->d_out, dt, c->d_s + c->N, res, c->d_w, c->N, c->C, 1e-6f);
    }
    pw_down(be, o, res, NC * 4);
    pw_down(be, o + NC, c->d_out, (NC + 1) * (c->bf16 ? 2 : 4));
    pw_down(be, o + 2 * NC + 1, c->d_s, 2 * (size_t)c->N * 4);
}

static void rn_run(void *vc, void *out) { rn_run1(vc, out, 1); }

static void check_residual_norm(int bf16) {
    pw_env e;
    if (bf16) pw_open_bf16(&e);
    else pw_open(&e);
    const int N = 19, C = 101;
    const size_t NC = (size_t)N * C, total = 2 * NC + 1 + 2 * (size_t)N;
    float *a = pw_random(NC, 81, -2, 3), *b = pw_random(NC, 82, -1, 1), *w = pw_random((size_t)C, 83, 0.5f, 1.5f);
    float *bias = pw_random((size_t)C, 84, -1, 1);
    float *want = malloc(total * 4), *got = malloc(total * 4);
    rn_ctx c = {e.be, N, C, 0, bf16, 0, a, b, pw_up(e.be, a, NC * 4), pw_up(e.be, b, NC * 4),
                pw_up(e.be, w, (size_t)C * 4), pw_up(e.be, bias, (size_t)C * 4), pw_up(e.be, NULL, NC * 4),
                pw_up(e.be, NULL, 2 * (size_t)N * 4), pw_up(e.be, NULL, (NC + 1) * 4)};
    for (int op = 0; op < 3; op++) {
        for (int inplace = 0; inplace < 2; inplace++) {
            char what[96];
            snprintf(what, sizeof what, "residual_%s_forward%s%s%s", op < 2 ? "layernorm" : "rmsnorm",
                     op == 1 ? " (no bias)" : "", bf16 ? " bf16" : "", inplace ? " in place" : "");
            c.op = op;
            c.inplace = inplace;
            /* the same garbage before both runs: untouched parts must agree too */
            for (size_t i = 0; i < total; i++) want[i] = got[i] = (float)i;
            pw_put(e.be, c.d_out, want, (NC + 1) * 4);
            pw_put(e.be, c.d_s, want, 2 * (size_t)N * 4);
            rn_run1(&c, want, 0);
            pw_put(e.be, c.d_out, got, (NC + 1) * 4);
            pw_put(e.be, c.d_s, got, 2 * (size_t)N * 4);
            rn_run1(&c, got, 1);
            pw_check_bits(what, got, want, total * 4);
            pw_check_repeatable(what, rn_run, &c, got, total * 4);
        }
    }
    LF_ASSERT_OK(lf_backend_sync(e.be));
    pw_free(e.be, c.d_a), pw_free(e.be, c.d_b), pw_free(e.be, c.d_w), pw_free(e.be, c.d_bias);
    pw_free(e.be, c.d_res), pw_free(e.be, c.d_s), pw_free(e.be, c.d_out);
    free(a), free(b), free(w), free(bias), free(want), free(got);
    pw_close(&e);
}

static void test_residual_norms(void **state) {
    (void)state;
    PW_NEED_DEVICE();
    check_residual_norm(0);
    check_residual_norm(1);
}

/* ---------------------------------------------------------------- refusals */

static void test_refusals(void **state) {
    (void)state;
    PW_NEED_DEVICE();
    float *d = NULL; /* refused before it is touched */
    assert_int_equal(cudaMalloc((void **)&d, 4096), cudaSuccess);
    lf_backend *be = pw_fresh();
    be->ops->layernorm_forward(be, d, LF_DT_BF16, d, d, d, d, NULL, 2, 4);
    pw_expect_fail(be, LF_ERR_UNSUPPORTED, "layernorm_forward: activation storage bf16");
    be = pw_fresh();
    be->ops->rmsnorm_forward(be, d, LF_DT_BF16, d, d, d, 2, 4, 1e-6f);
    pw_expect_fail(be, LF_ERR_UNSUPPORTED, "rmsnorm_forward: activation storage bf16");
    be = pw_fresh();
    be->ops->residual_layernorm_forward(be, d, d, LF_DT_BF16, d, d, d, d, d, NULL, 2, 4);
    pw_expect_fail(be, LF_ERR_UNSUPPORTED, "residual_layernorm_forward: activation storage bf16");
    be = pw_fresh();
    be->ops->residual_rmsnorm_forward(be, d, d, LF_DT_F32, d, d, d, d, -2, 4, 1e-6f);
    pw_expect_fail(be, LF_ERR_INVALID_ARG, "residual_rmsnorm_forward: rows x channels -2 x 4");
    be = pw_fresh();
    be->ops->crossentropy_forward_backward(be, d, d, d, (const int32_t *)d, 2, 10, 8, 1.0f);
    pw_expect_fail(be, LF_ERR_INVALID_ARG, "crossentropy_forward_backward: vocabulary 10 padded to 8");
    be = pw_fresh();
    be->ops->crossentropy_forward_backward(be, d, d, d, (const int32_t *)d, 2, 0, 8, 1.0f);
    pw_expect_fail(be, LF_ERR_INVALID_ARG, "vocabulary 0 padded to 8");
    be = pw_fresh();
    be->ops->layernorm_backward(be, d, d, d, d, d, d, d, d, -2, 4);
    pw_expect_fail(be, LF_ERR_INVALID_ARG, "layernorm_backward: rows x channels -2 x 4");
    be = pw_fresh();
    long nv = 7;
    assert_true(be->ops->loss_sum(be, d, (const int32_t *)d, -1, &nv) == 0.0);
    assert_int_equal(nv, 0);
    pw_expect_fail(be, LF_ERR_INVALID_ARG, "loss_sum: rows -1");
    assert_int_equal(cudaFree(d), cudaSuccess);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layernorm), cmocka_unit_test(test_rmsnorm),  cmocka_unit_test(test_crossentropy),
        cmocka_unit_test(test_loss_sum),  cmocka_unit_test(test_refusals), cmocka_unit_test(test_bf16_outputs),
        cmocka_unit_test(test_residual_norms), cmocka_unit_test(test_qknorm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
