/* The KV-cache ops (backend_impl.h kv_append, attention_cached) of the CPU
 * tables:
 *  - kv_append places exactly the k and v parts of each new row (bit-exact)
 *    at (b, kv head, position) and touches no other cache entry;
 *  - a prefill (pos0 0, Tn = T) agrees with attention_forward and with the
 *    double-precision reference within an error bound computed per element
 *    (error_bound below), for multi-head, grouped-query and multi-query
 *    attention, head sizes 16, 24, 64, 128, T up to 300;
 *  - decoding one row at a time (pos0 = 0..T-1) and in chunks at pos0 > 0
 *    gives each row of the whole sequence's attention within that bound, and
 *    the very bits of the prefill (the CPU backend computes each row alone);
 *  - 1, 2 and 3 threads give the same bits;
 *  - scratch: only the attention_cached_scratch floats are used.
 * The cache has Tmax > T so the position stride is exercised. */
#include "ref_ops.h"
#include "backend/cpu/cpu_internal.h"
#include "llmforge/backend_cpu.h"

static lf_backend *cpu(void) { return lf_backend_get("cpu"); }

#define U (1.0 / 16777216.0) /* unit roundoff of float32 */
static double gamma_n(int n) { return n * U / (1.0 - n * U); }

typedef struct kv_case {
    int B, T, NH, NKV, HS, Tmax;
    size_t W, C;
    ten qkv;           /* (B,T,W) */
    double *ref_out;   /* (B,T,C) double reference of the whole sequence */
    double *bound;     /* (B,T,C) error bound of a float computation of ref_out */
} kv_case;

/* Worst-case forward error of a float32 evaluation of one output element
 * out[b,t,h,i] = sum_{j<=t} p_j v_ji, p = softmax(scale * q . k_j) (Higham's
 * gamma_n = n u / (1 - n u), u = 2^-24):
 *  - a score s_j = scale * dot: |err| <= gamma_HS * scale * sum_i |q_i k_ji|
 *    (the dot) + 3u |s_j| (the float scale 1/sqrtf(HS) and the product); the
 *    shift s_j - max adds u |s_j - max| (max is one of the float scores);
 *  - p_j = exp(s_j - max) / sum: an error d_j in each argument moves p_j by
 *    d_j - sum_k p_k d_k, at most 2 max_j d_j relative; exp
 *    (lf__cpu_expf_f32, <= 2 ulp) adds 4u, the sum gamma_{t+1}, the
 *    reciprocal and the product 2u;
 *  - the weighted sum over t+1 values: gamma_{t+1} * sum_j p_j |v_ji|.
 * So |err| <= sum_j p_j |v_ji| * (2 D + 6u + 2 gamma_{t+1}) to first order
 * (1% added for the second-order terms), D the largest argument error. Both
 * float implementations obey it, so they differ by at most twice it. */
static void kv_case_init(kv_case *k, int B, int T, int NH, int NKV, int HS, uint64_t stream) {
    memset(k, 0, sizeof *k);
    k->B = B, k->T = T, k->NH = NH, k->NKV = NKV, k->HS = HS, k->Tmax = T + 5;
    k->C = (size_t)NH * HS;
    k->W = k->C + 2 * (size_t)NKV * HS;
    k->qkv = ten_rand((size_t)B * T * k->W, 1.5f, stream);
    const size_t nout = (size_t)B * T * k->C;
    k->ref_out = calloc(nout, sizeof(double));
    k->bound = calloc(nout, sizeof(double));
    double *att = calloc((size_t)B * NH * T * T, sizeof(double));
    assert_non_null(k->ref_out);
    assert_non_null(k->bound);
    assert_non_null(att);
    lf_dropout off = {0};
    ref_attention_forward(k->ref_out, att, k->qkv.d, B, T, (int)k->C, NH, NKV, off);
    const double scale = 1.0 / sqrt((double)HS);
    const int G = NH / NKV;
    double *s = calloc((size_t)T, sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double *q = k->qkv.d + ((size_t)b * T + t) * k->W + (size_t)h * HS;
                const double *a = att + (((size_t)b * NH + h) * T + t) * T;
                double mx = -INFINITY, dmax = 0;
                for (int j = 0; j <= t; j++) {
                    const double *kk = k->qkv.d + ((size_t)b * T + j) * k->W + k->C + (size_t)(h / G) * HS;
                    double sabs = 0, sv = 0;
                    for (int i = 0; i < HS; i++) sabs += fabs(q[i] * kk[i]), sv += q[i] * kk[i];
                    s[j] = sv * scale;
                    mx = fmax(mx, s[j]);
                    dmax = fmax(dmax, gamma_n(HS) * scale * sabs + 3 * U * fabs(s[j]));
                }
                double shift = 0;
                for (int j = 0; j <= t; j++) shift = fmax(shift, U * fabs(s[j] - mx));
                const double rel = 1.01 * (2 * (dmax + shift) + 6 * U + 2 * gamma_n(t + 1));
                for (int i = 0; i < HS; i++) {
                    double A = 0;
                    for (int j = 0; j <= t; j++) {
                        const double *v = k->qkv.d + ((size_t)b * T + j) * k->W + k->C + (size_t)NKV * HS +
                                          (size_t)(h / G) * HS;
                        A += a[j] * fabs(v[i]);
                    }
                    k->bound[((size_t)b * T + t) * k->C + (size_t)h * HS + i] = A * rel + 1e-30;
                }
            }
    free(s);
    free(att);
}

static void kv_case_free(kv_case *k) {
    ten_free(&k->qkv);
    free(k->ref_out);
    free(k->bound);
}

/* got (rows t0..t0+n-1 of every batch row, laid out (B,n,C)) against the
 * reference rows, each element within factor * bound. */
static void check_rows(const kv_case *k, const float *got, int t0, int n, double factor, const char *what) {
    for (int b = 0; b < k->B; b++)
        for (int t = 0; t < n; t++)
            for (size_t c = 0; c < k->C; c++) {
                const size_t r = ((size_t)b * k->T + t0 + t) * k->C + c;
                const double g = got[((size_t)b * n + t) * k->C + c], e = fabs(g - k->ref_out[r]);
                if (!(e <= factor * k->bound[r]))
                    fail_msg("%s (B %d T %d NH %d NKV %d HS %d): b %d row %d channel %zu: %.9g vs %.9g, "
                             "error %.3g > bound %.3g",
                             what, k->B, k->T, k->NH, k->NKV, k->HS, b, t0 + t, c, g, k->ref_out[r], e,
                             factor * k->bound[r]);
            }
}

/* Rows t0..t0+n-1 of qkv (B,T,W) as a (B,n,W) tensor. */
static float *qkv_rows(const kv_case *k, int t0, int n) {
    float *r = malloc((size_t)k->B * n * k->W * sizeof(float));
    assert_non_null(r);
    for (int b = 0; b < k->B; b++)
        memcpy(r + (size_t)b * n * k->W, k->qkv.f + ((size_t)b * k->T + t0) * k->W, (size_t)n * k->W * sizeof(float));
    return r;
}

static float *nan_cache(const kv_case *k) {
    const size_t n = (size_t)k->B * k->NKV * k->Tmax * k->HS;
    float *c = malloc(n * sizeof(float));
    assert_non_null(c);
    for (size_t i = 0; i < n; i++) c[i] = NAN;
    return c;
}

/* Feed the sequence in chunks of the given sizes (cycled), decoding each
 * chunk against the cache; returns the (B,T,C) outputs assembled. */
static float *run_chunks(lf_backend *o, const kv_case *k, const int *sizes, int nsizes) {
    float *kc = nan_cache(k), *vc = nan_cache(k);
    float *all = malloc((size_t)k->B * k->T * k->C * sizeof(float));
    assert_non_null(all);
    for (int t0 = 0, s = 0; t0 < k->T; s++) {
        int n = sizes[s % nsizes];
        if (n > k->T - t0) n = k->T - t0;
        float *rows = qkv_rows(k, t0, n);
        const size_t ns = cpu()->ops->attention_cached_scratch(k->B, k->NH, n, t0);
        /* one guard float past the scratch the op is allowed to use */
        float *scratch = malloc((ns + 1) * sizeof(float)), *out = malloc((size_t)k->B * n * k->C * sizeof(float));
        assert_non_null(scratch);
        assert_non_null(out);
        const float guard = -12345.5f;
        scratch[ns] = guard;
        for (size_t i = 0; i < (size_t)k->B * n * k->C; i++) out[i] = NAN; /* overwritten, not added to */
        o->ops->kv_append(o, kc, vc, rows, k->B, n, k->NH, k->NKV, k->HS, t0, k->Tmax);
        o->ops->attention_cached(o, out, scratch, rows, kc, vc, k->B, n, (int)k->C, k->NH, k->NKV, t0, k->Tmax);
        assert_true(scratch[ns] == guard);
        for (int b = 0; b < k->B; b++)
            memcpy(all + ((size_t)b * k->T + t0) * k->C, out + (size_t)b * n * k->C, (size_t)n * k->C * sizeof(float));
        free(rows);
        free(scratch);
        free(out);
        t0 += n;
    }
    free(kc);
    free(vc);
    return all;
}

/* ------------------------------------------------------------- kv_append */

static void test_kv_append_exact(void **state) {
    (void)state;
    const int shapes[][4] = {{2, 4, 2, 24}, {1, 4, 4, 16}, {3, 8, 1, 64}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        kv_case k;
        kv_case_init(&k, shapes[s][0], 11, shapes[s][1], shapes[s][2], shapes[s][3], 70 + s);
        float *kc = nan_cache(&k), *vc = nan_cache(&k);
        /* positions 0..10 in chunks 3, 1, 7: positions 11..Tmax-1 stay NaN */
        const int chunks[][2] = {{0, 3}, {3, 1}, {4, 7}};
        for (int c = 0; c < 3; c++) {
            float *rows = qkv_rows(&k, chunks[c][0], chunks[c][1]);
            cpu()->ops->kv_append(cpu(), kc, vc, rows, k.B, chunks[c][1], k.NH, k.NKV, k.HS, chunks[c][0], k.Tmax);
            free(rows);
        }
        for (int b = 0; b < k.B; b++)
            for (int g = 0; g < k.NKV; g++)
                for (int p = 0; p < k.Tmax; p++)
                    for (int i = 0; i < k.HS; i++) {
                        const size_t at = (((size_t)b * k.NKV + g) * k.Tmax + p) * k.HS + i;
                        if (p >= k.T) {
                            if (!isnan(kc[at]) || !isnan(vc[at]))
                                fail_msg("cache position %d (past the appended ones) was written", p);
                            continue;
                        }
                        const float *row = k.qkv.f + ((size_t)b * k.T + p) * k.W;
                        const float kw = row[k.C + (size_t)g * k.HS + i];
                        const float vw = row[k.C + (size_t)k.NKV * k.HS + (size_t)g * k.HS + i];
                        if (memcmp(&kc[at], &kw, sizeof kw) || memcmp(&vc[at], &vw, sizeof vw))
                            fail_msg("cache b %d kv head %d position %d channel %d: k %g v %g, want %g %g", b, g, p,
                                     i, kc[at], vc[at], kw, vw);
                    }
        free(kc);
        free(vc);
        kv_case_free(&k);
    }
}

/* ------------------------------------------------------------- attention_cached */

/* Prefill against attention_forward and the reference, then one row at a
 * time and in uneven chunks: each within the bound, and the same bits as the
 * prefill. */
static void cached_case(int B, int T, int NH, int NKV, int HS) {
    kv_case k;
    kv_case_init(&k, B, T, NH, NKV, HS, 1000 + (uint64_t)T * 7 + (uint64_t)HS + (uint64_t)NKV * 13);
    const size_t nout = (size_t)B * T * k.C;

    /* attention_forward on the whole sequence */
    float *fwd = malloc(nout * sizeof(float)), *att = malloc((size_t)B * NH * T * T * sizeof(float));
    assert_non_null(fwd);
    assert_non_null(att);
    lf_dropout off = {0};
    cpu()->ops->attention_forward(cpu(), fwd, att, k.qkv.f, B, T, (int)k.C, NH, NKV, off);
    check_rows(&k, fwd, 0, T, 1.0, "attention_forward"); /* the bound holds for the existing op too */

    const int whole[] = {T}, one[] = {1}, uneven[] = {5, 1, 17, 2, 64, 3};
    float *pre = run_chunks(cpu(), &k, whole, 1);
    check_rows(&k, pre, 0, T, 1.0, "prefill");
    for (size_t i = 0; i < nout; i++) {
        const double e = fabs((double)pre[i] - fwd[i]);
        if (!(e <= 2 * k.bound[i]))
            fail_msg("prefill vs attention_forward element %zu: %.9g vs %.9g (bound %.3g)", i, pre[i], fwd[i],
                     2 * k.bound[i]);
    }
    float *dec = run_chunks(cpu(), &k, one, 1);
    check_rows(&k, dec, 0, T, 1.0, "decode row by row");
    for (size_t i = 0; i < nout; i++)
        if (!(fabs((double)dec[i] - fwd[i]) <= 2 * k.bound[i]))
            fail_msg("decoded element %zu: %.9g vs attention_forward %.9g", i, dec[i], fwd[i]);
    if (memcmp(dec, pre, nout * sizeof(float)) != 0) fail_msg("decoding row by row changed bits of the prefill");
    float *chk = run_chunks(cpu(), &k, uneven, 6);
    check_rows(&k, chk, 0, T, 1.0, "uneven chunks");
    if (memcmp(chk, pre, nout * sizeof(float)) != 0) fail_msg("chunked decoding changed bits of the prefill");
    /* the cpu-bf16 table: the same op (its matmul differs, not attention) */
    float *b16 = run_chunks(lf_backend_get("cpu-bf16"), &k, uneven, 6);
    if (memcmp(b16, pre, nout * sizeof(float)) != 0) fail_msg("cpu-bf16's attention_cached differs from cpu's");
    free(fwd); free(att); free(pre); free(dec); free(chk); free(b16);
    kv_case_free(&k);
}

static void test_cached_mha(void **state) {
    (void)state;
    cached_case(2, 37, 4, 4, 16);
    cached_case(1, 130, 3, 3, 24);
    cached_case(2, 65, 2, 2, 64);
    cached_case(1, 300, 2, 2, 128);
    cached_case(1, 1, 4, 4, 16);
}

static void test_cached_gqa(void **state) {
    (void)state;
    cached_case(2, 41, 4, 2, 16);
    cached_case(1, 150, 4, 2, 24);
    cached_case(2, 70, 4, 1, 64);
    cached_case(1, 300, 4, 1, 128);
    cached_case(1, 200, 8, 2, 64);
}

/* A single decode step at pos0 = p attends to exactly the positions 0..p:
 * poison the cache past p (NaN) and change position p's value: the row
 * changes and stays finite. */
static void test_cached_reads_only_its_positions(void **state) {
    (void)state;
    const int NH = 4, NKV = 2, HS = 24, Tmax = 40, p = 17;
    const size_t C = (size_t)NH * HS, W = C + 2 * (size_t)NKV * HS, ncache = (size_t)NKV * Tmax * HS;
    ten rows = ten_rand((size_t)(p + 1) * W, 1.0f, 90);
    float *kc = malloc(ncache * sizeof(float)), *vc = malloc(ncache * sizeof(float));
    float out1[96], out2[96], scratch[4 * 18];
    for (size_t i = 0; i < ncache; i++) kc[i] = vc[i] = NAN;
    cpu()->ops->kv_append(cpu(), kc, vc, rows.f, 1, p + 1, NH, NKV, HS, 0, Tmax);
    const float *last = rows.f + (size_t)p * W;
    cpu()->ops->attention_cached(cpu(), out1, scratch, last, kc, vc, 1, 1, (int)C, NH, NKV, p, Tmax);
    for (size_t c = 0; c < C; c++) assert_true(isfinite(out1[c]));
    /* position p's value matters: v of kv head 0 at p doubled changes heads 0, 1 only */
    for (int i = 0; i < HS; i++) vc[(size_t)p * HS + i] *= 2.0f;
    cpu()->ops->attention_cached(cpu(), out2, scratch, last, kc, vc, 1, 1, (int)C, NH, NKV, p, Tmax);
    for (int h = 0; h < NH; h++) {
        int changed = 0;
        for (int i = 0; i < HS; i++) changed |= out1[h * HS + i] != out2[h * HS + i];
        if (changed != (h < 2)) fail_msg("head %d: changed %d after editing kv head 0 at the last position", h, changed);
    }
    free(kc);
    free(vc);
    ten_free(&rows);
}

/* ------------------------------------------------------------- determinism */

static void test_cached_thread_identity(void **state) {
    (void)state;
    kv_case k;
    kv_case_init(&k, 2, 96, 8, 2, 64, 77); /* B*NH*T*L*HS far above LF_CPU_PAR_MIN */
    const int whole[] = {96}, mixed[] = {1, 1, 30, 1, 7};
    float *res[3][2];
    for (int r = 0; r < 3; r++) {
        lf_backend_cpu_set_threads(r + 1);
        res[r][0] = run_chunks(cpu(), &k, whole, 1);
        res[r][1] = run_chunks(cpu(), &k, mixed, 5);
    }
    lf_backend_cpu_set_threads(2);
    const size_t nout = (size_t)k.B * k.T * k.C;
    for (int r = 1; r < 3; r++)
        for (int m = 0; m < 2; m++)
            if (memcmp(res[0][m], res[r][m], nout * sizeof(float)) != 0)
                fail_msg("attention_cached (%s) differs between 1 and %d threads", m ? "chunks" : "prefill", r + 1);
    for (int r = 0; r < 3; r++) free(res[r][0]), free(res[r][1]);
    kv_case_free(&k);
}

static void test_tables(void **state) {
    (void)state;
    assert_non_null(cpu()->ops->kv_append);
    assert_non_null(cpu()->ops->attention_cached);
    assert_ptr_equal(lf__backend_cpu_bf16()->kv_append, cpu()->ops->kv_append);
    assert_ptr_equal(lf__backend_cpu_bf16()->attention_cached, cpu()->ops->attention_cached);
    assert_int_equal(cpu()->ops->attention_cached_scratch(2, 3, 4, 5), 2 * 3 * 4 * 9);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tables),
        cmocka_unit_test(test_kv_append_exact),
        cmocka_unit_test(test_cached_mha),
        cmocka_unit_test(test_cached_gqa),
        cmocka_unit_test(test_cached_reads_only_its_positions),
        cmocka_unit_test(test_cached_thread_identity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
