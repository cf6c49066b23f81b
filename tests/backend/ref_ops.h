/*
 * Plain double-precision reference implementations of the backend ops, and
 * small helpers shared by the backend tests. Written for obviousness, not
 * speed: straight loops over the math in backend_impl.h, no blocking, no
 * threads. The fast CPU ops are checked against these (forward), and their
 * backward against central finite differences of these (gradcheck).
 */
#ifndef LF_TEST_REF_OPS_H
#define LF_TEST_REF_OPS_H

#include "test_util.h"
#include "backend/backend_impl.h"

/* ------------------------------------------------------------- helpers */

/* A tensor held twice: float for the op under test, double for the reference
 * (d[i] == (double)f[i] exactly after ten_rand). */
typedef struct ten {
    float *f;
    double *d;
    size_t n;
} ten;

static inline ten ten_new(size_t n) {
    ten t = {calloc(n ? n : 1, sizeof(float)), calloc(n ? n : 1, sizeof(double)), n};
    assert_non_null(t.f);
    assert_non_null(t.d);
    return t;
}

static inline void ten_free(ten *t) {
    free(t->f);
    free(t->d);
    t->f = NULL;
    t->d = NULL;
}

/* Fill with N(0, scale^2) values from test stream `stream`. */
static inline ten ten_rand(size_t n, float scale, uint64_t stream) {
    ten t = ten_new(n);
    for (size_t i = 0; i < n; i++) {
        t.f[i] = scale * lf_rng_normal(stream, LF_RNG_TEST, i);
        t.d[i] = (double)t.f[i];
    }
    return t;
}

static inline float *floats_copy(const float *x, size_t n) {
    float *y = malloc((n ? n : 1) * sizeof(float));
    assert_non_null(y);
    if (n) memcpy(y, x, n * sizeof(float));
    return y;
}

static inline double ref_dot(const double *a, const double *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* max_i |got_i - want_i| / max(max_i |want_i|, floor): error relative to the
 * tensor's scale, robust to individual near-zero entries. */
static inline double ref_err_d(const float *got, const double *want, size_t n, double floor_) {
    double scale = floor_, worst = 0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]);
        if (e != e) return INFINITY;
        worst = fmax(worst, e);
    }
    return worst / scale;
}

#define REF_CHECK(what, got, want, n, tol)                                                 \
    do {                                                                                   \
        double e_ = ref_err_d((got), (want), (n), 1e-6);                                   \
        if (!(e_ <= (tol))) fail_msg("%s: error %.3g exceeds %.3g", (what), e_, (double)(tol)); \
    } while (0)

static inline int ref_keep(lf_dropout d, uint64_t i) {
    return lf_rng_uniform(d.seed, LF_RNG_DROPOUT, lf_rng_mix(d.key, i)) >= d.p;
}

static inline double ref_drop_scale(lf_dropout d) { return 1.0 / (1.0 - (double)d.p); }

/* ------------------------------------------------------------- ops */

/* wpe may be NULL (no position embedding) */
static inline void ref_encoder_forward(double *out, const int32_t *inp, const double *wte,
                                       const double *wpe, int B, int T, int C) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++)
                out[((size_t)b * T + t) * C + c] =
                    wte[(size_t)inp[b * T + t] * C + c] + (wpe ? wpe[(size_t)t * C + c] : 0.0);
}

static inline void ref_layernorm_forward(double *out, double *mean, double *rstd,
                                         const double *inp, const double *w, const double *bias,
                                         int N, int C) {
    for (int n = 0; n < N; n++) {
        const double *x = inp + (size_t)n * C;
        double m = 0, v = 0;
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
        for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
        v /= C; /* biased */
        double r = 1.0 / sqrt(v + 1e-5);
        for (int c = 0; c < C; c++)
            out[(size_t)n * C + c] = (x[c] - m) * r * w[c] + (bias ? bias[c] : 0.0);
        mean[n] = m;
        rstd[n] = r;
    }
}

/* HF LlamaRMSNorm: out = w * x / sqrt(mean(x^2) + eps) */
static inline void ref_rmsnorm_forward(double *out, double *rstd, const double *inp, const double *w,
                                       int N, int C, double eps) {
    for (int n = 0; n < N; n++) {
        const double *x = inp + (size_t)n * C;
        double ms = 0;
        for (int c = 0; c < C; c++) ms += x[c] * x[c];
        ms /= C;
        double r = 1.0 / sqrt(ms + eps);
        for (int c = 0; c < C; c++) out[(size_t)n * C + c] = w[c] * x[c] * r;
        rstd[n] = r;
    }
}

/* HF Llama's rotation angle for position p and frequency i, rounded where
 * HF rounds (backend_impl.h): the float exponent 2i/HS, powf, the float
 * reciprocal, the float product p * inv_freq. exact_angle = 1 gives the
 * same angle in exact (double) arithmetic instead, to show that the tests
 * can tell the two apart. */
static inline double ref_rope_angle(int p, int i, int HS, float theta, int exact_angle) {
    if (exact_angle) return (double)p * pow((double)theta, -2.0 * i / HS);
    const float inv = 1.0f / powf(theta, (float)(2 * i) / (float)HS);
    return (double)((float)p * inv);
}

/* The plain RoPE table the model passes the rope ops (src/model/rope.c's
 * default: the float exponent 2i/HS, powf, the float reciprocal), in a
 * static buffer (tests are single-threaded). */
static inline const float *ref_rope_table(int HS, float theta) {
    static float inv[1024];
    for (int i = 0; i < HS / 2 && i < 1024; i++) inv[i] = 1.0f / powf(theta, (float)(2 * i) / (float)HS);
    return inv;
}

/* RoPE (rotate_half convention) in place on the q and k heads of qkv rows
 * [q: NH*HS | k: NKV*HS | v: NKV*HS]; row t at position pos0 + t. */
static inline void ref_rope_forward(double *qkv, int B, int T, int NH, int NKV, int HS, int pos0,
                                    float theta, int exact_angle) {
    const int half = HS / 2;
    const size_t W = (size_t)(NH + 2 * NKV) * HS;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int hd = 0; hd < NH + NKV; hd++) {
                double *x = qkv + ((size_t)b * T + t) * W + (size_t)hd * HS;
                for (int i = 0; i < half; i++) {
                    const double a = ref_rope_angle(pos0 + t, i, HS, theta, exact_angle);
                    const double x1 = x[i], x2 = x[i + half];
                    x[i] = x1 * cos(a) - x2 * sin(a);
                    x[i + half] = x2 * cos(a) + x1 * sin(a);
                }
            }
}

/* out = silu(gate) * up on rows [gate (F) | up (F)] */
static inline void ref_swiglu_forward(double *out, const double *inp, int N, int F) {
    for (int n = 0; n < N; n++)
        for (int j = 0; j < F; j++) {
            const double g = inp[(size_t)n * 2 * F + j], u = inp[(size_t)n * 2 * F + F + j];
            out[(size_t)n * F + j] = g / (1.0 + exp(-g)) * u;
        }
}

static inline void ref_matmul_forward(double *out, const double *inp, const double *w,
                                      const double *bias, int N, int C, int OC,
                                      lf_weight_layout layout) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = bias ? bias[o] : 0.0;
            for (int c = 0; c < C; c++) {
                double wv = layout == LF_W_IN_OUT ? w[(size_t)c * OC + o] : w[(size_t)o * C + c];
                s += inp[(size_t)n * C + c] * wv;
            }
            out[(size_t)n * OC + o] = s;
        }
}

/* qkv rows [q: NH*HS | k: NKV*HS | v: NKV*HS]; query head h reads kv head
 * h / (NH/NKV) (NKV == NH: GPT-2's [q | k | v]) */
static inline void ref_attention_forward(double *out, double *att, const double *qkv, int B, int T,
                                         int C, int NH, int NKV, lf_dropout drop) {
    const int HS = C / NH, g = NH / NKV;
    const size_t W = (size_t)C + 2 * (size_t)NKV * HS;
    const double scale = 1.0 / sqrt((double)HS);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                double *a = att + (((size_t)b * NH + h) * T + t) * T;
                const double *q = qkv + ((size_t)b * T + t) * W + h * HS;
                const size_t kv = (size_t)(h / g) * HS;
                double mx = -INFINITY;
                for (int j = 0; j <= t; j++) {
                    const double *k = qkv + ((size_t)b * T + j) * W + C + kv;
                    double s = 0;
                    for (int i = 0; i < HS; i++) s += q[i] * k[i];
                    a[j] = s * scale;
                    if (a[j] > mx) mx = a[j];
                }
                double sum = 0;
                for (int j = 0; j <= t; j++) sum += (a[j] = exp(a[j] - mx));
                for (int j = 0; j <= t; j++) a[j] /= sum;
                for (int j = t + 1; j < T; j++) a[j] = 0;
                double *o = out + ((size_t)b * T + t) * C + h * HS;
                for (int i = 0; i < HS; i++) o[i] = 0;
                for (int j = 0; j <= t; j++) {
                    double p = a[j];
                    if (drop.p > 0) {
                        uint64_t idx = (((uint64_t)b * NH + h) * T + t) * T + j;
                        p = ref_keep(drop, idx) ? p * ref_drop_scale(drop) : 0.0;
                    }
                    const double *v = qkv + ((size_t)b * T + j) * W + C + (size_t)NKV * HS + kv;
                    for (int i = 0; i < HS; i++) o[i] += p * v[i];
                }
            }
}

static inline double ref_gelu(double x) {
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

static inline void ref_dropout_forward(double *out, const double *inp, size_t n, lf_dropout d) {
    for (size_t i = 0; i < n; i++)
        out[i] = d.p > 0 ? (ref_keep(d, i) ? inp[i] * ref_drop_scale(d) : 0.0) : inp[i];
}

/* losses only; rows with target < 0 give 0 */
static inline void ref_crossentropy(double *losses, const double *logits, const int32_t *targets,
                                    int N, int V, int Vp) {
    for (int i = 0; i < N; i++) {
        const double *l = logits + (size_t)i * Vp;
        if (targets[i] < 0) {
            losses[i] = 0;
            continue;
        }
        double mx = -INFINITY, s = 0;
        for (int j = 0; j < V; j++) mx = fmax(mx, l[j]);
        for (int j = 0; j < V; j++) s += exp(l[j] - mx);
        losses[i] = log(s) + mx - l[targets[i]];
    }
}

/* One torch.optim.AdamW step, straight from its documentation, in double. */
static inline void ref_adamw(double *p, const double *grad, double *m, double *v, size_t n,
                             double lr, double b1, double b2, double eps, double wd,
                             double grad_scale, int t) {
    for (size_t i = 0; i < n; i++) {
        double g = grad[i] * grad_scale;
        p[i] *= 1.0 - lr * wd;
        m[i] = b1 * m[i] + (1.0 - b1) * g;
        v[i] = b2 * v[i] + (1.0 - b2) * g * g;
        double mhat = m[i] / (1.0 - pow(b1, t));
        double vhat = v[i] / (1.0 - pow(b2, t));
        p[i] -= lr * mhat / (sqrt(vhat) + eps);
    }
}

/* ------------------------------------------------------------- finite differences */

/* g[k] = dL/dx[k] by central differences in double; L reads x through ctx. */
typedef double (*ref_loss_fn)(void *ctx);

static inline void ref_fd_grad(double *g, double *x, size_t n, ref_loss_fn L, void *ctx) {
    const double h = 1e-5;
    for (size_t k = 0; k < n; k++) {
        double x0 = x[k];
        x[k] = x0 + h;
        double lp = L(ctx);
        x[k] = x0 - h;
        double lm = L(ctx);
        x[k] = x0;
        g[k] = (lp - lm) / (2 * h);
    }
}

/* Check an accumulated analytic gradient: (got - start) against want. */
static inline double ref_grad_err(const float *got, const float *start, const double *want,
                                  size_t n) {
    double scale = 1e-6, worst = 0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    for (size_t i = 0; i < n; i++) {
        double a = (double)got[i] - (start ? (double)start[i] : 0.0);
        double e = fabs(a - want[i]);
        if (e != e) return INFINITY;
        worst = fmax(worst, e);
    }
    return worst / scale;
}

#define GRAD_TOL 2e-5
#define GRAD_CHECK(what, got, start, want, n)                                              \
    do {                                                                                   \
        double e_ = ref_grad_err((got), (start), (want), (n));                             \
        if (getenv("LF_TEST_VERBOSE")) printf("  %-32s err %.2e\n", (what), e_);          \
        if (!(e_ <= GRAD_TOL)) fail_msg("%s: gradient error %.3g exceeds %.3g", (what), e_, \
                                        (double)GRAD_TOL);                                 \
    } while (0)

#endif
