/* CPU backend, backward ops: every gradient against central finite
 * differences of the double-precision reference forward (ref_ops.h), with
 * L = sum(out * R) for a random R (R is dout). Gradient buffers start from
 * random values, so the checks also confirm the write mode of each output:
 * parameter and residual-stream gradients accumulate (+=, checked against the
 * start value), the other activation gradients are overwritten (=, checked
 * with no start value).
 * Sizes are odd on purpose (B=3, T=7, C=20, NH=4, V=37, Vp=40, OC=13), plus
 * cases that cross the kernels' internal block sizes. The Llama-family ops
 * (RMSNorm, RoPE, SwiGLU, grouped-query attention, the encoder without a
 * position table) are checked the same way. */
#include "ref_ops.h"

static lf_backend *ops(void) { return lf_backend_get("cpu"); }

/* ------------------------------------------------------------- sampled FD */

/* FD at `ns` indices spread over x (all when ns >= n); error of (got - start)
 * relative to the largest sampled numeric gradient. */
static double fd_check_sampled(const float *got, const float *start, double *x, size_t n,
                               size_t ns, ref_loss_fn L, void *ctx) {
    if (ns > n) ns = n;
    double scale = 1e-6, worst = 0;
    for (size_t s = 0; s < ns; s++) {
        size_t k = ns == n ? s : (size_t)(lf_rng_u64(99, LF_RNG_TEST, s) % n);
        double g;
        ref_fd_grad(&g, x + k, 1, L, ctx);
        double a = (double)got[k] - (start ? (double)start[k] : 0.0);
        scale = fmax(scale, fabs(g));
        worst = fmax(worst, fabs(a - g));
        if (a != a) return INFINITY;
    }
    return worst / scale;
}

/* ------------------------------------------------------------- encoder */

typedef struct {
    const int32_t *inp;
    double *wte, *wpe, *out;
    const double *R;
    int B, T, C;
} enc_ctx;

static double enc_loss(void *p) {
    enc_ctx *c = p;
    ref_encoder_forward(c->out, c->inp, c->wte, c->wpe, c->B, c->T, c->C);
    return ref_dot(c->out, c->R, (size_t)c->B * c->T * c->C);
}

static void test_encoder_backward(void **state) {
    (void)state;
    const int B = 3, T = 7, C = 20, V = 5, maxT = 9; /* V small: token ids repeat */
    int32_t inp[3 * 7];
    for (int i = 0; i < B * T; i++) inp[i] = (int32_t)(lf_rng_u64(1, LF_RNG_TEST, i) % V);
    ten wte = ten_rand((size_t)V * C, 1, 2), wpe = ten_rand((size_t)maxT * C, 1, 3);
    ten R = ten_rand((size_t)B * T * C, 1, 4), out = ten_new((size_t)B * T * C);
    ten dwte = ten_rand(wte.n, 1, 5), dwpe = ten_rand(wpe.n, 1, 6);
    float *dwte0 = floats_copy(dwte.f, dwte.n), *dwpe0 = floats_copy(dwpe.f, dwpe.n);
    ops()->ops->encoder_backward(ops(), dwte.f, dwpe.f, R.f, inp, B, T, C);

    enc_ctx ctx = {inp, wte.d, wpe.d, out.d, R.d, B, T, C};
    ref_fd_grad(dwte.d, wte.d, wte.n, enc_loss, &ctx);
    ref_fd_grad(dwpe.d, wpe.d, wpe.n, enc_loss, &ctx);
    GRAD_CHECK("encoder dwte", dwte.f, dwte0, dwte.d, dwte.n);
    GRAD_CHECK("encoder dwpe", dwpe.f, dwpe0, dwpe.d, dwpe.n);
    /* no position embedding: dwpe NULL, dwte accumulates the same gradient */
    memcpy(dwte.f, dwte0, dwte.n * sizeof(float));
    ops()->ops->encoder_backward(ops(), dwte.f, NULL, R.f, inp, B, T, C);
    ctx.wpe = NULL;
    ref_fd_grad(dwte.d, wte.d, wte.n, enc_loss, &ctx);
    GRAD_CHECK("encoder dwte (no wpe)", dwte.f, dwte0, dwte.d, dwte.n);
    free(dwte0);
    free(dwpe0);
    ten_free(&wte); ten_free(&wpe); ten_free(&R); ten_free(&out); ten_free(&dwte); ten_free(&dwpe);
}

/* ------------------------------------------------------------- layernorm */

typedef struct {
    double *inp, *w, *b, *out, *mean, *rstd;
    const double *R;
    int N, C;
} ln_ctx;

static double ln_loss(void *p) {
    ln_ctx *c = p;
    ref_layernorm_forward(c->out, c->mean, c->rstd, c->inp, c->w, c->b, c->N, c->C);
    return ref_dot(c->out, c->R, (size_t)c->N * c->C);
}

static void layernorm_case(int N, int C, int with_bias) {
    ten inp = ten_rand((size_t)N * C, 1.5f, 10), w = ten_rand((size_t)C, 1, 11),
        b = ten_rand((size_t)C, 1, 12), R = ten_rand((size_t)N * C, 1, 13);
    for (int i = 0; i < N * C; i++) { /* non-zero row means */
        inp.f[i] += 0.3f * (float)(i / C);
        inp.d[i] = inp.f[i];
    }
    ten out = ten_new(inp.n), mean = ten_new((size_t)N), rstd = ten_new((size_t)N);
    ops()->ops->layernorm_forward(ops(), out.f, LF_DT_F32, mean.f, rstd.f, inp.f, w.f, with_bias ? b.f : NULL, N, C);

    ten dinp = ten_rand(inp.n, 1, 14), dw = ten_rand(w.n, 1, 15), db = ten_rand(b.n, 1, 16);
    float *dinp0 = floats_copy(dinp.f, dinp.n), *dw0 = floats_copy(dw.f, dw.n),
          *db0 = floats_copy(db.f, db.n);
    ops()->ops->layernorm_backward(ops(), dinp.f, dw.f, with_bias ? db.f : NULL, R.f, inp.f, w.f, mean.f,
                              rstd.f, N, C);
    if (!with_bias) assert_memory_equal(db.f, db0, db.n * sizeof(float));

    ln_ctx ctx = {inp.d, w.d, with_bias ? b.d : NULL, out.d, mean.d, rstd.d, R.d, N, C};
    ref_fd_grad(dinp.d, inp.d, inp.n, ln_loss, &ctx);
    ref_fd_grad(dw.d, w.d, w.n, ln_loss, &ctx);
    GRAD_CHECK("layernorm dinp", dinp.f, dinp0, dinp.d, dinp.n);
    GRAD_CHECK("layernorm dweight", dw.f, dw0, dw.d, dw.n);
    if (with_bias) {
        ref_fd_grad(db.d, b.d, b.n, ln_loss, &ctx);
        GRAD_CHECK("layernorm dbias", db.f, db0, db.d, db.n);
    }
    free(dinp0); free(dw0); free(db0);
    ten_free(&inp); ten_free(&w); ten_free(&b); ten_free(&R); ten_free(&out); ten_free(&mean);
    ten_free(&rstd); ten_free(&dinp); ten_free(&dw); ten_free(&db);
}

static void test_layernorm_backward(void **state) {
    (void)state;
    layernorm_case(21, 20, 1);
    layernorm_case(21, 20, 0);
    layernorm_case(5, 131, 1); /* crosses the 64-channel accumulator block */
}

/* ------------------------------------------------------------- RMSNorm */

typedef struct {
    double *inp, *w, *out, *rstd;
    const double *R;
    int N, C;
    double eps;
} rms_ctx;

static double rms_loss(void *p) {
    rms_ctx *c = p;
    ref_rmsnorm_forward(c->out, c->rstd, c->inp, c->w, c->N, c->C, c->eps);
    return ref_dot(c->out, c->R, (size_t)c->N * c->C);
}

static void rmsnorm_case(int N, int C, float eps) {
    ten inp = ten_rand((size_t)N * C, 1.5f, 17), w = ten_rand((size_t)C, 1, 18), R = ten_rand((size_t)N * C, 1, 19);
    for (int i = 0; i < N * C; i++) { /* row offsets: RMSNorm does not centre */
        inp.f[i] += 0.3f * (float)(i / C);
        inp.d[i] = inp.f[i];
    }
    ten out = ten_new(inp.n), rstd = ten_new((size_t)N);
    ops()->ops->rmsnorm_forward(ops(), out.f, LF_DT_F32, rstd.f, inp.f, w.f, N, C, eps);
    ten dinp = ten_rand(inp.n, 1, 20), dw = ten_rand(w.n, 1, 21);
    float *dinp0 = floats_copy(dinp.f, dinp.n), *dw0 = floats_copy(dw.f, dw.n);
    ops()->ops->rmsnorm_backward(ops(), dinp.f, dw.f, R.f, inp.f, w.f, rstd.f, N, C);

    rms_ctx ctx = {inp.d, w.d, out.d, rstd.d, R.d, N, C, (double)eps};
    ref_fd_grad(dinp.d, inp.d, inp.n, rms_loss, &ctx);
    ref_fd_grad(dw.d, w.d, w.n, rms_loss, &ctx);
    GRAD_CHECK("rmsnorm dinp", dinp.f, dinp0, dinp.d, dinp.n); /* accumulated */
    GRAD_CHECK("rmsnorm dweight", dw.f, dw0, dw.d, dw.n);
    free(dinp0); free(dw0);
    ten_free(&inp); ten_free(&w); ten_free(&R); ten_free(&out); ten_free(&rstd); ten_free(&dinp);
    ten_free(&dw);
}

static void test_rmsnorm_backward(void **state) {
    (void)state;
    rmsnorm_case(21, 20, 1e-5f);
    rmsnorm_case(5, 131, 1e-6f); /* crosses the 64-channel accumulator block */
}

/* ------------------------------------------------------------- per-head q/k RMSNorm (Qwen3) */

typedef struct {
    double *inp, *wq, *wk, *out, *rstd;
    const double *R;
    int N, NH, NKV, HS;
    double eps;
} qkn_ctx;

/* The reference: ref_rmsnorm_forward on each q head (wq) and k head (wk)
 * of a [q | k | v] row; v copied. */
static void ref_qknorm(qkn_ctx *c) {
    const int H = c->NH + c->NKV, W = (c->NH + 2 * c->NKV) * c->HS;
    for (int n = 0; n < c->N; n++) {
        const size_t o = (size_t)n * W;
        for (int h = 0; h < H; h++)
            ref_rmsnorm_forward(c->out + o + (size_t)h * c->HS, c->rstd + (size_t)n * H + h,
                                c->inp + o + (size_t)h * c->HS, h < c->NH ? c->wq : c->wk, 1, c->HS, c->eps);
        for (int i = H * c->HS; i < W; i++) c->out[o + i] = c->inp[o + i];
    }
}

static double qkn_loss(void *p) {
    qkn_ctx *c = p;
    ref_qknorm(c);
    return ref_dot(c->out, c->R, (size_t)c->N * (c->NH + 2 * c->NKV) * c->HS);
}

static void qknorm_case(lf_backend *be, int N, int NH, int NKV, int HS, float eps) {
    const size_t W = (size_t)(NH + 2 * NKV) * HS, H = (size_t)(NH + NKV);
    ten inp = ten_rand((size_t)N * W, 1.5f, 60), wq = ten_rand((size_t)HS, 1, 61), wk = ten_rand((size_t)HS, 1, 62);
    ten R = ten_rand(inp.n, 1, 63), out = ten_new(inp.n), rstd = ten_new((size_t)N * H);
    for (size_t i = 0; i < inp.n; i++) { /* heads of different scales: RMSNorm does not centre */
        inp.f[i] += 0.3f * (float)((i / (size_t)HS) % 5);
        inp.d[i] = inp.f[i];
    }
    float *dev_out = be->ops->alloc(be, inp.n * sizeof(float)), *dev_in = be->ops->alloc(be, inp.n * sizeof(float));
    float *dev_r = be->ops->alloc(be, rstd.n * sizeof(float)), *dev_d = be->ops->alloc(be, inp.n * sizeof(float));
    float *dev_wq = be->ops->alloc(be, (size_t)HS * sizeof(float)), *dev_wk = be->ops->alloc(be, (size_t)HS * sizeof(float));
    float *dev_dwq = be->ops->alloc(be, (size_t)HS * sizeof(float)), *dev_dwk = be->ops->alloc(be, (size_t)HS * sizeof(float));
    be->ops->to_device(be, dev_in, inp.f, inp.n * sizeof(float));
    be->ops->to_device(be, dev_wq, wq.f, wq.n * sizeof(float));
    be->ops->to_device(be, dev_wk, wk.f, wk.n * sizeof(float));
    be->ops->qknorm_forward(be, dev_out, dev_r, dev_in, dev_wq, dev_wk, N, NH, NKV, HS, eps);
    qkn_ctx ctx = {inp.d, wq.d, wk.d, out.d, rstd.d, R.d, N, NH, NKV, HS, (double)eps};
    ref_qknorm(&ctx);
    float *got = malloc(inp.n * sizeof(float));
    be->ops->to_host(be, got, dev_out, inp.n * sizeof(float));
    double worst = 0;
    for (size_t i = 0; i < inp.n; i++) worst = fmax(worst, fabs((double)got[i] - out.d[i]) / (1 + fabs(out.d[i])));
    if (worst > 2e-6) fail_msg("qknorm forward on %s: error %.3g", be->ops->name, worst);

    ten dwq = ten_rand(wq.n, 1, 64), dwk = ten_rand(wk.n, 1, 65), dinp = ten_new(inp.n);
    float *dwq0 = floats_copy(dwq.f, dwq.n), *dwk0 = floats_copy(dwk.f, dwk.n);
    be->ops->to_device(be, dev_d, R.f, inp.n * sizeof(float)); /* d(out) in, d(inp) out */
    be->ops->to_device(be, dev_dwq, dwq.f, dwq.n * sizeof(float));
    be->ops->to_device(be, dev_dwk, dwk.f, dwk.n * sizeof(float));
    be->ops->qknorm_backward(be, dev_d, dev_dwq, dev_dwk, dev_in, dev_wq, dev_wk, dev_r, N, NH, NKV, HS);
    be->ops->to_host(be, dinp.f, dev_d, inp.n * sizeof(float));
    be->ops->to_host(be, dwq.f, dev_dwq, dwq.n * sizeof(float));
    be->ops->to_host(be, dwk.f, dev_dwk, dwk.n * sizeof(float));
    ref_fd_grad(dinp.d, inp.d, inp.n, qkn_loss, &ctx);
    ref_fd_grad(dwq.d, wq.d, wq.n, qkn_loss, &ctx);
    ref_fd_grad(dwk.d, wk.d, wk.n, qkn_loss, &ctx);
    GRAD_CHECK("qknorm dinp", dinp.f, NULL, dinp.d, dinp.n); /* overwritten, in place */
    GRAD_CHECK("qknorm dwq", dwq.f, dwq0, dwq.d, dwq.n);     /* accumulated */
    GRAD_CHECK("qknorm dwk", dwk.f, dwk0, dwk.d, dwk.n);
    float *bufs[] = {dev_out, dev_in, dev_r, dev_d, dev_wq, dev_wk, dev_dwq, dev_dwk};
    for (int i = 0; i < 8; i++) be->ops->free(be, bufs[i]);
    free(got); free(dwq0); free(dwk0);
    ten_free(&inp); ten_free(&wq); ten_free(&wk); ten_free(&R); ten_free(&out); ten_free(&rstd);
    ten_free(&dwq); ten_free(&dwk); ten_free(&dinp);
}

static void test_qknorm_backward(void **state) {
    (void)state;
    qknorm_case(ops(), 7, 4, 2, 6, 1e-6f); /* GQA */
    qknorm_case(ops(), 3, 3, 3, 10, 1e-5f);
    qknorm_case(lf_backend_get("cpu-fenced"), 5, 2, 1, 8, 1e-6f);
}

/* ------------------------------------------------------------- RoPE */

typedef struct {
    double *x, *y;
    const double *R;
    int B, T, NH, NKV, HS, pos0;
    float theta;
} rope_ctx;

static double rope_loss(void *p) {
    rope_ctx *c = p;
    const size_t n = (size_t)c->B * c->T * (c->NH + 2 * c->NKV) * c->HS;
    memcpy(c->y, c->x, n * sizeof(double));
    ref_rope_forward(c->y, c->B, c->T, c->NH, c->NKV, c->HS, c->pos0, c->theta, 0);
    return ref_dot(c->y, c->R, n);
}

static void rope_case(int B, int T, int NH, int NKV, int HS, int pos0, float theta) {
    const size_t n = (size_t)B * T * (NH + 2 * NKV) * HS;
    ten x = ten_rand(n, 1, 70), R = ten_rand(n, 1, 71), y = ten_new(n);
    /* backward runs in place on the gradient w.r.t. the rotated qkv (here R)
     * and leaves the gradient w.r.t. the unrotated one, v part included */
    ten g = ten_new(n);
    memcpy(g.f, R.f, n * sizeof(float));
    ops()->ops->rope_backward(ops(), g.f, B, T, NH, NKV, HS, pos0, ref_rope_table(HS, theta), 1.0f);
    rope_ctx ctx = {x.d, y.d, R.d, B, T, NH, NKV, HS, pos0, theta};
    ref_fd_grad(g.d, x.d, n, rope_loss, &ctx);
    char what[96];
    snprintf(what, sizeof what, "rope dqkv HS=%d pos0=%d", HS, pos0);
    GRAD_CHECK(what, g.f, NULL, g.d, n);
    ten_free(&x); ten_free(&R); ten_free(&y); ten_free(&g);
}

static void test_rope_backward(void **state) {
    (void)state;
    rope_case(3, 7, 4, 2, 8, 0, 10000.0f);
    rope_case(2, 5, 4, 1, 6, 1000, 500000.0f);
    rope_case(1, 2, 1, 1, 130, 7, 10000.0f); /* two chunks of frequencies */
}

/* ------------------------------------------------------------- SwiGLU */

typedef struct {
    double *inp, *out;
    const double *R;
    int N, F;
} swiglu_ctx;

static double swiglu_loss(void *p) {
    swiglu_ctx *c = p;
    ref_swiglu_forward(c->out, c->inp, c->N, c->F);
    return ref_dot(c->out, c->R, (size_t)c->N * c->F);
}

static void test_swiglu_backward(void **state) {
    (void)state;
    const int sizes[][2] = {{21, 20}, {3, 77}};
    for (int s = 0; s < 2; s++) {
        const int N = sizes[s][0], F = sizes[s][1];
        ten inp = ten_rand((size_t)N * 2 * F, 2.5f, 72), R = ten_rand((size_t)N * F, 1, 73);
        ten out = ten_new((size_t)N * F), dinp = ten_rand(inp.n, 100, 74); /* garbage: overwritten */
        ops()->ops->swiglu_backward(ops(), dinp.f, inp.f, R.f, N, F);
        swiglu_ctx ctx = {inp.d, out.d, R.d, N, F};
        ref_fd_grad(dinp.d, inp.d, inp.n, swiglu_loss, &ctx);
        GRAD_CHECK("swiglu dinp", dinp.f, NULL, dinp.d, dinp.n);
        ten_free(&inp); ten_free(&R); ten_free(&out); ten_free(&dinp);
    }
}

/* ------------------------------------------------------------- matmul */

typedef struct {
    double *inp, *w, *b, *out;
    const double *R;
    int N, C, OC;
    lf_weight_layout layout;
} mm_ctx;

static double mm_loss(void *p) {
    mm_ctx *c = p;
    ref_matmul_forward(c->out, c->inp, c->w, c->b, c->N, c->C, c->OC, c->layout);
    return ref_dot(c->out, c->R, (size_t)c->N * c->OC);
}

static void matmul_case(int N, int C, int OC, lf_weight_layout layout, int with_bias,
                        int with_dinp) {
    ten inp = ten_rand((size_t)N * C, 1, 20), w = ten_rand((size_t)C * OC, 0.5f, 21),
        b = ten_rand((size_t)OC, 1, 22), R = ten_rand((size_t)N * OC, 1, 23);
    ten out = ten_new((size_t)N * OC);
    ten dinp = ten_rand(inp.n, 1, 24), dw = ten_rand(w.n, 1, 25), db = ten_rand(b.n, 1, 26);
    float *dinp0 = floats_copy(dinp.f, dinp.n), *dw0 = floats_copy(dw.f, dw.n),
          *db0 = floats_copy(db.f, db.n);
    ops()->ops->matmul_backward(ops(), with_dinp ? dinp.f : NULL, dw.f, with_bias ? db.f : NULL, R.f, inp.f, LF_DT_F32,
                           w.f, N, C, OC, layout);

    mm_ctx ctx = {inp.d, w.d, with_bias ? b.d : NULL, out.d, R.d, N, C, OC, layout};
    ref_fd_grad(dw.d, w.d, w.n, mm_loss, &ctx);
    GRAD_CHECK(layout == LF_W_IN_OUT ? "matmul dweight (in,out)" : "matmul dweight (out,in)",
               dw.f, dw0, dw.d, dw.n);
    if (with_dinp) {
        ref_fd_grad(dinp.d, inp.d, inp.n, mm_loss, &ctx);
        GRAD_CHECK("matmul dinp", dinp.f, NULL, dinp.d, dinp.n); /* overwritten */
    } else {
        assert_memory_equal(dinp.f, dinp0, dinp.n * sizeof(float));
    }
    if (with_bias) {
        ref_fd_grad(db.d, b.d, b.n, mm_loss, &ctx);
        GRAD_CHECK("matmul dbias", db.f, db0, db.d, db.n);
    } else {
        assert_memory_equal(db.f, db0, db.n * sizeof(float));
    }
    free(dinp0); free(dw0); free(db0);
    ten_free(&inp); ten_free(&w); ten_free(&b); ten_free(&R); ten_free(&out);
    ten_free(&dinp); ten_free(&dw); ten_free(&db);
}

static void test_matmul_backward(void **state) {
    (void)state;
    for (int layout = 0; layout < 2; layout++)
        for (int bias = 0; bias < 2; bias++) {
            matmul_case(21, 20, 13, (lf_weight_layout)layout, bias, 1);
            matmul_case(21, 20, 13, (lf_weight_layout)layout, bias, 0);
        }
    matmul_case(9, 11, 150, LF_W_IN_OUT, 1, 1); /* dbias crosses accumulator blocks */
}

/* ------------------------------------------------------------- attention */

typedef struct {
    double *qkv, *out, *att;
    const double *R;
    int B, T, C, NH, NKV;
    lf_dropout drop;
} att_ctx;

static double att_loss(void *p) {
    att_ctx *c = p;
    ref_attention_forward(c->out, c->att, c->qkv, c->B, c->T, c->C, c->NH, c->NKV, c->drop);
    return ref_dot(c->out, c->R, (size_t)c->B * c->T * c->C);
}

/* NKV key/value heads (NKV == NH: multi-head) */
static void attention_case_gqa(int B, int T, int C, int NH, int NKV, float p, size_t samples) {
    lf_dropout drop = {p, 1234, 77, 0};
    const size_t W = (size_t)C + 2 * (size_t)NKV * (C / NH);
    ten qkv = ten_rand((size_t)B * T * W, 1, 30), R = ten_rand((size_t)B * T * C, 1, 31);
    ten out = ten_new((size_t)B * T * C), att = ten_new((size_t)B * NH * T * T);
    ten scratch = ten_new(att.n);
    ops()->ops->attention_forward(ops(), out.f, att.f, qkv.f, B, T, C, NH, NKV, drop);
    ten dqkv = ten_rand(qkv.n, 1, 32);
    float *dqkv0 = floats_copy(dqkv.f, dqkv.n);
    for (size_t i = 0; i < scratch.n; i++) scratch.f[i] = NAN; /* contents are undefined */
    ops()->ops->attention_backward(ops(), dqkv.f, scratch.f, R.f, qkv.f, att.f, B, T, C, NH, NKV, drop);

    att_ctx ctx = {qkv.d, out.d, att.d, R.d, B, T, C, NH, NKV, drop};
    char what[96];
    snprintf(what, sizeof what, "attention dqkv T=%d NH=%d NKV=%d p=%.2f", T, NH, NKV, (double)p);
    if (samples == 0) {
        ref_fd_grad(dqkv.d, qkv.d, qkv.n, att_loss, &ctx);
        GRAD_CHECK(what, dqkv.f, NULL, dqkv.d, dqkv.n); /* overwritten */
    } else {
        double e = fd_check_sampled(dqkv.f, NULL, qkv.d, qkv.n, samples, att_loss, &ctx);
        if (getenv("LF_TEST_VERBOSE")) printf("  %-32s err %.2e\n", what, e);
        if (!(e <= GRAD_TOL)) fail_msg("%s: gradient error %.3g", what, e);
    }
    free(dqkv0);
    ten_free(&qkv); ten_free(&R); ten_free(&out); ten_free(&att); ten_free(&scratch);
    ten_free(&dqkv);
}

static void attention_case(int B, int T, int C, int NH, float p, size_t samples) {
    attention_case_gqa(B, T, C, NH, NH, p, samples);
}

static void test_attention_backward(void **state) {
    (void)state;
    attention_case(3, 7, 20, 4, 0.0f, 0);
    attention_case(3, 7, 20, 4, 0.3f, 0); /* same mask in backward, or FD disagrees */
    attention_case(1, 70, 8, 2, 0.0f, 200); /* two row blocks */
    attention_case(1, 70, 8, 2, 0.2f, 200);
    attention_case(1, 300, 4, 1, 0.2f, 150); /* dropout tile in column chunks */
    /* the register-tiled small-T path (head size a multiple of 16, T <= 128, no dropout):
     * T neither a multiple of the 4-row tile nor of the 16-wide blocks, one to eight vectors per head
     * row (HS 128: the two-row tiles), and T at the path's limit */
    attention_case(1, 18, 16, 1, 0.0f, 0);
    attention_case(2, 37, 64, 2, 0.0f, 200);
    attention_case(1, 21, 256, 2, 0.0f, 200);
    attention_case(1, 128, 128, 2, 0.0f, 200);
    /* grouped-query (NKV 2 of NH 4 or 8) and multi-query (NKV 1) on both paths: dk and dv of
     * a key/value head sum its query heads. GEMM path: HS not a multiple of 16, dropout, T > 128 */
    attention_case_gqa(3, 7, 20, 4, 2, 0.0f, 0);
    attention_case_gqa(3, 7, 20, 4, 1, 0.3f, 0);
    attention_case_gqa(2, 7, 24, 8, 2, 0.0f, 0);
    attention_case_gqa(1, 70, 16, 4, 2, 0.2f, 200);
    attention_case_gqa(1, 140, 64, 4, 1, 0.0f, 150);
    /* small-T path: HS 16 and 32 */
    attention_case_gqa(2, 18, 64, 4, 2, 0.0f, 0);
    attention_case_gqa(1, 21, 128, 8, 2, 0.0f, 300);
    attention_case_gqa(1, 37, 128, 4, 1, 0.0f, 300);
}

/* ------------------------------------------------------------- element-wise */

typedef struct {
    double *x, *y, *out;
    const double *R;
    size_t n;
    int op; /* 0 gelu, 1 residual, 2 dropout */
    lf_dropout drop;
} ew_ctx;

static double ew_loss(void *p) {
    ew_ctx *c = p;
    for (size_t i = 0; i < c->n; i++) {
        if (c->op == 0) c->out[i] = ref_gelu(c->x[i]);
        if (c->op == 1) c->out[i] = c->x[i] + c->y[i];
    }
    if (c->op == 2) ref_dropout_forward(c->out, c->x, c->n, c->drop);
    return ref_dot(c->out, c->R, c->n);
}

static void test_gelu_backward(void **state) {
    (void)state;
    const size_t n = 1001;
    ten x = ten_rand(n, 2, 40), R = ten_rand(n, 1, 41), out = ten_new(n), dx = ten_rand(n, 1, 42);
    float *dx0 = floats_copy(dx.f, n);
    ops()->ops->gelu_backward(ops(), dx.f, x.f, R.f, n);
    ew_ctx ctx = {x.d, NULL, out.d, R.d, n, 0, {0, 0, 0, 0}};
    ref_fd_grad(dx.d, x.d, n, ew_loss, &ctx);
    GRAD_CHECK("gelu dinp", dx.f, NULL, dx.d, n); /* overwritten */
    free(dx0);
    ten_free(&x); ten_free(&R); ten_free(&out); ten_free(&dx);
}

static void test_residual_backward(void **state) {
    (void)state;
    const size_t n = 101;
    ten a = ten_rand(n, 1, 43), b = ten_rand(n, 1, 44), R = ten_rand(n, 1, 45), out = ten_new(n);
    ten da = ten_rand(n, 1, 46), db = ten_rand(n, 1, 47);
    float *da0 = floats_copy(da.f, n), *db0 = floats_copy(db.f, n);
    ops()->ops->residual_backward(ops(), da.f, db.f, R.f, n);
    ew_ctx ctx = {a.d, b.d, out.d, R.d, n, 1, {0, 0, 0, 0}};
    ref_fd_grad(da.d, a.d, n, ew_loss, &ctx);
    ref_fd_grad(db.d, b.d, n, ew_loss, &ctx);
    GRAD_CHECK("residual da", da.f, da0, da.d, n);
    GRAD_CHECK("residual db", db.f, db0, db.d, n);
    free(da0); free(db0);
    ten_free(&a); ten_free(&b); ten_free(&R); ten_free(&out); ten_free(&da); ten_free(&db);
}

static void test_dropout_backward(void **state) {
    (void)state;
    const size_t n = 301; /* the parallel path: test_cpu_ops.c checks it bit-exactly */
    const float ps[] = {0.0f, 0.3f};
    for (int k = 0; k < 2; k++) {
        lf_dropout drop = {ps[k], 42, 9, 0};
        ten x = ten_rand(n, 1, 48), R = ten_rand(n, 1, 49), out = ten_new(n), dx = ten_rand(n, 1, 50);
        float *dx0 = floats_copy(dx.f, n);
        ops()->ops->dropout_backward(ops(), dx.f, R.f, n, drop);
        ew_ctx ctx = {x.d, NULL, out.d, R.d, n, 2, drop};
        ref_fd_grad(dx.d, x.d, n, ew_loss, &ctx);
        GRAD_CHECK("dropout dinp", dx.f, NULL, dx.d, n); /* overwritten */
        free(dx0);
        ten_free(&x); ten_free(&R); ten_free(&out); ten_free(&dx);
    }
}

/* ------------------------------------------------------------- classifier */

typedef struct {
    double *logits, *losses;
    const int32_t *targets;
    int N, V, Vp;
    double dloss;
} ce_ctx;

static double ce_loss(void *p) {
    ce_ctx *c = p;
    ref_crossentropy(c->losses, c->logits, c->targets, c->N, c->V, c->Vp);
    double s = 0;
    for (int i = 0; i < c->N; i++) s += c->losses[i];
    return s * c->dloss;
}

static void test_crossentropy_backward(void **state) {
    (void)state;
    const int N = 21, V = 37, Vp = 40;
    const float dloss = 1.0f / 17.0f;
    int32_t targets[21];
    for (int i = 0; i < N; i++)
        targets[i] = i % 5 == 3 ? -1 : (int32_t)(lf_rng_u64(3, LF_RNG_TEST, i) % V);
    targets[0] = V - 1;
    ten logits = ten_rand((size_t)N * Vp, 3, 60), losses = ten_new((size_t)N);
    /* dlogits starts as garbage: it is overwritten, padding and ignored rows too */
    ten dl = ten_rand(logits.n, 5, 61);
    ops()->ops->crossentropy_forward_backward(ops(), losses.f, dl.f, logits.f, targets, N, V, Vp, dloss);

    ce_ctx ctx = {logits.d, losses.d, targets, N, V, Vp, (double)dloss};
    ref_fd_grad(dl.d, logits.d, logits.n, ce_loss, &ctx);
    GRAD_CHECK("crossentropy dlogits", dl.f, NULL, dl.d, dl.n);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < Vp; j++)
            if (targets[i] < 0 || j >= V) assert_true(dl.f[(size_t)i * Vp + j] == 0.0f);
    ten_free(&logits); ten_free(&losses); ten_free(&dl);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encoder_backward),   cmocka_unit_test(test_layernorm_backward),
        cmocka_unit_test(test_rmsnorm_backward),   cmocka_unit_test(test_rope_backward),
        cmocka_unit_test(test_qknorm_backward),
        cmocka_unit_test(test_swiglu_backward),
        cmocka_unit_test(test_matmul_backward),    cmocka_unit_test(test_attention_backward),
        cmocka_unit_test(test_gelu_backward),      cmocka_unit_test(test_residual_backward),
        cmocka_unit_test(test_dropout_backward),   cmocka_unit_test(test_crossentropy_backward),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
