/*
 * The "cuda" backend's dense ops (src/backend/cuda/cuda_ops_dense.c,
 * cuda_dense.cu) against the "cpu" backend. Built twice like
 * test_cuda_backend.c: on the CUDA-on-CPU shim (cuda.test_cuda_dense, every
 * CI run; its cuBLASLt checks layouts, transposes and leading dimensions
 * as strictly as the library) and, with LF_CUDA, on a real GPU
 * (gpu.test_cuda_dense: SKIPPED where none answers).
 *
 * Checked:
 *  - matmul_forward / matmul_backward for both weight layouts x bias or not
 *    x dinp NULL or not, on N in {1, 3, 67}, C in {37, 64}, OC in {1, 50,
 *    129} and one C = 769 (none a multiple of the 32-column tile of the
 *    bias kernel except C = 64), random inputs in [-1, 1).
 *    Tolerance from the fp32 error model (Higham 3.1; u = 2^-24,
 *    gamma_h = h u / (1 - h u)): a sum of h products computed in fp32 in any
 *    order (FMA or not) is within gamma_h * S of the exact value, S the sum
 *    of the terms' magnitudes; the cpu and cuda results are each that close,
 *    so they differ by at most 2 gamma_h S. h = C + 1 for out (the dot
 *    product, then the bias; S includes |bias|), OC for dinp, N + 1 for dW
 *    (the += of the pre-filled value P; S includes |P|), N + 6 for dbias
 *    (the cpu sums in double, the kernel in at most ceil(N/32) + 5 fp32
 *    additions, then the +=). A wrong transpose, leading dimension or
 *    layout shows as an O(1) difference, far above these bounds;
 *  - overwrite vs accumulate: out and dinp are pre-filled with NaN (a
 *    product that read them, or left an element unwritten, gives NaN and
 *    fails); dW and dbias are pre-filled with 3 + r / -2 + r (r random), so
 *    a product that overwrote instead of adding would be off by ~2-3;
 *  - determinism: forward + backward twice give the same bits, and (shim)
 *    the same bits under the FORWARD, REVERSE and two SHUFFLE schedules;
 *  - scale, add_inplace (also y += y) and convert (fp32): bit for bit
 *    against the host (one fp32 rounding per element), for n = 1, 37, 769
 *    and 100003, the element after n untouched;
 *  - every tensor at a float offset of 1 from its allocation (4-byte
 *    aligned only, as tensors inside a flat buffer are): the same results
 *    (on a GPU this exercises the alignments the heuristic is told; on both
 *    the bias-add kernel that replaces the epilogue for such a bias);
 *  - errors, each the instance's sticky status returned by lf_backend_sync
 *    with a message naming the op: bf16 storage for the matmul pair and
 *    convert (LF_ERR_UNSUPPORTED), a negative dimension (LF_ERR_RANGE), a
 *    bias pointer not aligned to a float (LF_ERR_INVALID_ARG); on the shim,
 *    a weight allocation one float too small, which cuBLASLt's read leaves
 *    (the shim's range check; the message names the product's shape; it
 *    faults the device as a GPU kernel would: LF_ERR_DEVICE; run last, then
 *    cudaDeviceReset).
 *
 * "cuda-bf16" (bf16 matmul operands, fp32 accumulation) against "cpu-bf16":
 *  - the matmul pair on the sizes above (both layouts, bias or not, dinp
 *    or not, every tensor aligned or at a float offset of 1: the bias
 *    epilogue and the bias-add kernel), with inp stored in fp32 and in
 *    bf16. Error model: both backends round the same operands to bf16
 *    with round-to-nearest-even (x, W, and backward's dout; the test's own
 *    reference rounding, lowp_ref.h, must agree with both), and a product
 *    of two bf16 values is exact in fp32, so each result is an fp32 sum of
 *    the same exact terms in another order: the two differ by at most
 *    2 gamma_h S_r, S_r the sum of the |rounded terms| (h as for fp32).
 *    dbias is summed from the fp32 dout by both, as in fp32;
 *  - bf16 was used: out differs from the fp32 product of the unrounded
 *    operands by more than fp32 could (some element beyond 2 gamma_h S);
 *  - a bf16-stored inp gives the same bits as the fp32 inp that rounds to
 *    it (the promise of act_dtypes, backend_impl.h);
 *  - the weight copies' staleness: a new weight through to_device, AdamW
 *    on the weight (the copy renewed in the same pass) or on a range
 *    overlapping it, params_changed after a write the backend cannot see
 *    (scale), and free + a new tensor: each next product equals that of a
 *    fresh instance holding the new weight, bit for bit; without
 *    params_changed the stale copy is still used (the cache is real);
 *  - determinism (two runs, and on the shim every schedule: same bits) and
 *    convert to bf16 bit for bit against the reference rounding.
 */
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include "../test_util.h"
#include "backend/cuda/cuda_internal.h"
#include "cuda_test_util.h"
#include "lowp_ref.h"

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}
static void fill_rand(float *x, size_t n, float offset) {
    for (size_t i = 0; i < n; i++) x[i] = offset + frand();
}

static double gamma_h(double h) {
    const double u = ldexp(1.0, -24);
    return h * u / (1.0 - h * u);
}

static lf_backend *open_cuda(void) {
    lf_backend *be = NULL;
    LF_ASSERT_OK(lf__backend_open_ops(lf__backend_cuda(), &be));
    return be;
}
static lf_backend *open_cpu(void) {
    lf_backend *be = NULL;
    LF_ASSERT_OK(lf_backend_open("cpu", &be));
    return be;
}

/* a backend buffer holding n floats of h (h NULL: filled with NaN) */
static float *put(lf_backend *be, const float *h, size_t n) {
    float *d = be->ops->alloc(be, (n ? n : 1) * sizeof(float));
    assert_non_null(d);
    if (!n) return d;
    float *tmp = NULL;
    if (!h) {
        tmp = malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) tmp[i] = NAN;
        h = tmp;
    }
    be->ops->to_device(be, d, h, n * sizeof(float));
    free(tmp);
    return d;
}
static float *get(lf_backend *be, const float *d, size_t n) {
    float *h = malloc((n ? n : 1) * sizeof(float));
    if (n) be->ops->to_host(be, h, d, n * sizeof(float));
    return h;
}

/* ---------------------------------------------------------------- the matmul pair */

typedef struct mm_inputs {
    int N, C, OC;
    lf_weight_layout layout;
    float *x, *w, *b, *dout, *dw0, *db0; /* host */
} mm_inputs;

static void mm_inputs_make(mm_inputs *in, int N, int C, int OC, lf_weight_layout layout) {
    in->N = N, in->C = C, in->OC = OC, in->layout = layout;
    in->x = malloc((size_t)N * C * sizeof(float));
    in->w = malloc((size_t)C * OC * sizeof(float));
    in->b = malloc((size_t)OC * sizeof(float));
    in->dout = malloc((size_t)N * OC * sizeof(float));
    in->dw0 = malloc((size_t)C * OC * sizeof(float));
    in->db0 = malloc((size_t)OC * sizeof(float));
    fill_rand(in->x, (size_t)N * C, 0.0f);
    fill_rand(in->w, (size_t)C * OC, 0.0f);
    fill_rand(in->b, (size_t)OC, 0.0f);
    fill_rand(in->dout, (size_t)N * OC, 0.0f);
    fill_rand(in->dw0, (size_t)C * OC, 3.0f);
    fill_rand(in->db0, (size_t)OC, -2.0f);
}
static void mm_inputs_free(mm_inputs *in) {
    free(in->x), free(in->w), free(in->b), free(in->dout), free(in->dw0), free(in->db0);
}

/* W's element (k, o) of the logical (C, OC) matrix in either layout */
static double wel(const mm_inputs *in, int k, int o) {
    return in->layout == LF_W_IN_OUT ? in->w[(size_t)k * in->OC + o] : in->w[(size_t)o * in->C + k];
}

typedef struct mm_results {
    float *out, *dinp, *dw, *db; /* host copies; dinp/db NULL when not computed */
} mm_results;

static void mm_results_free(mm_results *r) { free(r->out), free(r->dinp), free(r->dw), free(r->db); }

/* n floats of h at float offset `off` of a fresh backend buffer (h NULL:
 * NaN); the buffer itself is put's, at base[-off] */
static float *put_at(lf_backend *be, const float *h, size_t n, int off) {
    float *base = put(be, NULL, n + (size_t)off);
    if (n && h) be->ops->to_device(be, base + off, h, n * sizeof(float));
    return base + off;
}

/* forward then backward on `be`; out and dinp start as NaN, dW and dbias as
 * the pre-filled values. off: every tensor at that float offset of its
 * allocation (1: 4-byte aligned only, as a tensor at an odd offset of a
 * flat buffer; on "cuda" also the bias-add kernel instead of the epilogue).
 * Returns the sync status. */
static lf_status mm_run(lf_backend *be, const mm_inputs *in, int bias, int dinp, int off, mm_results *r) {
    const int N = in->N, C = in->C, OC = in->OC;
    const size_t nx = (size_t)N * C, nw = (size_t)C * OC, no = (size_t)N * OC;
    float *x = put_at(be, in->x, nx, off), *w = put_at(be, in->w, nw, off), *b = put_at(be, in->b, OC, off);
    float *dout = put_at(be, in->dout, no, off), *out = put_at(be, NULL, no, off), *di = put_at(be, NULL, nx, off);
    float *dw = put_at(be, in->dw0, nw, off), *db = put_at(be, in->db0, OC, off);
    be->ops->matmul_forward(be, out, x, LF_DT_F32, w, bias ? b : NULL, N, C, OC, in->layout);
    be->ops->matmul_backward(be, dinp ? di : NULL, dw, bias ? db : NULL, dout, x, LF_DT_F32, w, N, C, OC,
                             in->layout);
    lf_status st = lf_backend_sync(be);
    r->out = get(be, out, no);
    r->dinp = dinp ? get(be, di, nx) : NULL;
    r->dw = get(be, dw, nw);
    r->db = bias ? get(be, db, OC) : NULL;
    float *bufs[] = {x, w, b, dout, out, di, dw, db};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) be->ops->free(be, bufs[i] - off);
    return st;
}

static void check_close(const char *what, const char *ctx, size_t i, double g, double c, double tol) {
    if (!(fabs(g - c) <= tol))
        fail_msg("%s [%s] element %zu: cuda %.9g, cpu %.9g, |diff| %.3g > tolerance %.3g", what, ctx, i, g, c,
                 fabs(g - c), tol);
}

static void mm_case(lf_backend *cpu, lf_backend *gpu, int N, int C, int OC, lf_weight_layout layout, int bias,
                    int dinp, int off) {
    char ctx[128];
    snprintf(ctx, sizeof ctx, "N=%d C=%d OC=%d %s%s%s offset %d", N, C, OC, layout == LF_W_IN_OUT ? "IN_OUT" : "OUT_IN",
             bias ? " bias" : "", dinp ? " dinp" : " dinp=NULL", off);
    mm_inputs in;
    mm_inputs_make(&in, N, C, OC, layout);
    mm_results rc, rg;
    LF_ASSERT_OK(mm_run(cpu, &in, bias, dinp, 0, &rc));
    lf_status st = mm_run(gpu, &in, bias, dinp, off, &rg);
    if (st != LF_OK) fail_msg("[%s] %s: %s", ctx, lf_status_str(st), lf_last_error());
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double S = bias ? fabs(in.b[o]) : 0.0;
            for (int k = 0; k < C; k++) S += fabs(in.x[(size_t)n * C + k] * wel(&in, k, o));
            const size_t i = (size_t)n * OC + o;
            check_close("out", ctx, i, rg.out[i], rc.out[i], 2 * gamma_h(C + 1) * S);
        }
    if (dinp)
        for (int n = 0; n < N; n++)
            for (int k = 0; k < C; k++) {
                double S = 0;
                for (int o = 0; o < OC; o++) S += fabs(in.dout[(size_t)n * OC + o] * wel(&in, k, o));
                const size_t i = (size_t)n * C + k;
                check_close("dinp", ctx, i, rg.dinp[i], rc.dinp[i], 2 * gamma_h(OC) * S);
            }
    for (int k = 0; k < C; k++)
        for (int o = 0; o < OC; o++) {
            const size_t i = layout == LF_W_IN_OUT ? (size_t)k * OC + o : (size_t)o * C + k;
            double S = fabs(in.dw0[i]);
            for (int n = 0; n < N; n++) S += fabs(in.x[(size_t)n * C + k] * in.dout[(size_t)n * OC + o]);
            check_close("dweight", ctx, i, rg.dw[i], rc.dw[i], 2 * gamma_h(N + 1) * S);
        }
    if (bias)
        for (int o = 0; o < OC; o++) {
            double S = fabs(in.db0[o]);
            for (int n = 0; n < N; n++) S += fabs(in.dout[(size_t)n * OC + o]);
            check_close("dbias", ctx, (size_t)o, rg.db[o], rc.db[o], 2 * gamma_h(N + 6) * S);
        }
    mm_results_free(&rc);
    mm_results_free(&rg);
    mm_inputs_free(&in);
}

static void test_matmul_vs_cpu(void **state) {
    (void)state;
    NEED_DEVICE();
    lf_backend *cpu = open_cpu(), *gpu = open_cuda();
    const int Ns[] = {1, 3, 67}, Cs[] = {37, 64}, OCs[] = {1, 50, 129};
    for (int layout = 0; layout < 2; layout++)
        for (size_t a = 0; a < 3; a++)
            for (size_t c = 0; c < 2; c++)
                for (size_t o = 0; o < 3; o++)
                    for (int bias = 0; bias < 2; bias++)
                        for (int dinp = 0; dinp < 2; dinp++)
                            mm_case(cpu, gpu, Ns[a], Cs[c], OCs[o], (lf_weight_layout)layout, bias, dinp, 0);
    /* a wide inner dimension (768 + 1) */
    mm_case(cpu, gpu, 5, 769, 33, LF_W_IN_OUT, 1, 1, 0);
    mm_case(cpu, gpu, 5, 769, 33, LF_W_OUT_IN, 1, 1, 0);
    /* every tensor only 4-byte aligned: the alignment the heuristic is told,
     * and the bias added by the kernel instead of the epilogue */
    for (int layout = 0; layout < 2; layout++) {
        mm_case(cpu, gpu, 1, 37, 1, (lf_weight_layout)layout, 1, 1, 1);
        mm_case(cpu, gpu, 3, 37, 50, (lf_weight_layout)layout, 1, 1, 1);
        mm_case(cpu, gpu, 67, 64, 129, (lf_weight_layout)layout, 1, 0, 1);
    }
    lf_backend_close(gpu);
    lf_backend_close(cpu);
}

static int same_bits(const mm_results *a, const mm_results *b, const mm_inputs *in) {
    const size_t nx = (size_t)in->N * in->C, nw = (size_t)in->C * in->OC, no = (size_t)in->N * in->OC;
    return !memcmp(a->out, b->out, no * sizeof(float)) && !memcmp(a->dinp, b->dinp, nx * sizeof(float)) &&
           !memcmp(a->dw, b->dw, nw * sizeof(float)) && !memcmp(a->db, b->db, (size_t)in->OC * sizeof(float));
}

static void test_matmul_deterministic(void **state) {
    (void)state;
    NEED_DEVICE();
    lf_backend *gpu = open_cuda();
    for (int layout = 0; layout < 2; layout++) {
        mm_inputs in;
        mm_inputs_make(&in, 67, 37, 129, (lf_weight_layout)layout);
        mm_results r0, r1;
        LF_ASSERT_OK(mm_run(gpu, &in, 1, 1, 0, &r0));
        LF_ASSERT_OK(mm_run(gpu, &in, 1, 1, 0, &r1));
        assert_true(same_bits(&r0, &r1, &in));
        mm_results_free(&r1);
#ifdef LF_CUDA_SHIM
        const struct {
            lf_shim_schedule_kind kind;
            uint64_t seed;
        } sched[] = {{LF_SHIM_SCHEDULE_FORWARD, 0}, {LF_SHIM_SCHEDULE_REVERSE, 0}, {LF_SHIM_SCHEDULE_SHUFFLE, 1},
                     {LF_SHIM_SCHEDULE_SHUFFLE, 977}};
        for (size_t s = 0; s < sizeof sched / sizeof *sched; s++) {
            lf_shim_set_schedule(sched[s].kind, sched[s].seed);
            mm_results rs;
            LF_ASSERT_OK(mm_run(gpu, &in, 1, 1, 0, &rs));
            if (!same_bits(&r0, &rs, &in)) fail_msg("schedule %d seed %llu changed the bits", (int)sched[s].kind,
                                                    (unsigned long long)sched[s].seed);
            mm_results_free(&rs);
        }
        lf_shim_set_schedule(LF_SHIM_SCHEDULE_SHUFFLE, LF_SHIM_DEFAULT_SEED);
#endif
        mm_results_free(&r0);
        mm_inputs_free(&in);
    }
    lf_backend_close(gpu);
}

/* ---------------------------------------------------------------- cuda-bf16 against cpu-bf16 */

static lf_backend *open_cuda_bf16(void) {
    lf_backend *be = NULL;
    LF_ASSERT_OK(lf__backend_open_ops(lf__backend_cuda_bf16(), &be));
    return be;
}

static double r16(float x) { return ref_bf16_value(ref_bf16_bits(x)); }

static uint16_t *bf16_of(const float *x, size_t n) {
    uint16_t *h = malloc((n ? n : 1) * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) h[i] = ref_bf16_bits(x[i]);
    return h;
}

/* mm_run with bf16 storage for inp (inp16: bf16 bits on the host). */
static lf_status mm_run16(lf_backend *be, const mm_inputs *in, int bias, int dinp, int off, int inp_bf16,
                          mm_results *r) {
    if (!inp_bf16) return mm_run(be, in, bias, dinp, off, r);
    const int N = in->N, C = in->C, OC = in->OC;
    const size_t nx = (size_t)N * C, nw = (size_t)C * OC, no = (size_t)N * OC;
    uint16_t *h16 = bf16_of(in->x, nx);
    uint16_t *x16 = be->ops->alloc(be, (nx + 1) * sizeof(uint16_t));
    assert_non_null(x16);
    be->ops->to_device(be, x16 + off, h16, nx * sizeof(uint16_t));
    float *w = put_at(be, in->w, nw, off), *b = put_at(be, in->b, OC, off);
    float *dout = put_at(be, in->dout, no, off), *out = put_at(be, NULL, no, off), *di = put_at(be, NULL, nx, off);
    float *dw = put_at(be, in->dw0, nw, off), *db = put_at(be, in->db0, OC, off);
    be->ops->matmul_forward(be, out, x16 + off, LF_DT_BF16, w, bias ? b : NULL, N, C, OC, in->layout);
    be->ops->matmul_backward(be, dinp ? di : NULL, dw, bias ? db : NULL, dout, x16 + off, LF_DT_BF16, w, N, C, OC,
                             in->layout);
    lf_status st = lf_backend_sync(be);
    r->out = get(be, out, no);
    r->dinp = dinp ? get(be, di, nx) : NULL;
    r->dw = get(be, dw, nw);
    r->db = bias ? get(be, db, OC) : NULL;
    float *bufs[] = {w, b, dout, out, di, dw, db};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) be->ops->free(be, bufs[i] - off);
    be->ops->free(be, x16);
    free(h16);
    return st;
}

static double wel16(const mm_inputs *in, int k, int o) { return r16((float)wel(in, k, o)); }

static void mm_case16(lf_backend *cpu, lf_backend *gpu, int N, int C, int OC, lf_weight_layout layout, int bias,
                      int dinp, int off, int inp_bf16, int *bf16_seen) {
    char ctx[160];
    snprintf(ctx, sizeof ctx, "bf16: N=%d C=%d OC=%d %s%s%s offset %d, inp in %s", N, C, OC,
             layout == LF_W_IN_OUT ? "IN_OUT" : "OUT_IN", bias ? " bias" : "", dinp ? " dinp" : " dinp=NULL", off,
             inp_bf16 ? "bf16" : "fp32");
    mm_inputs in;
    mm_inputs_make(&in, N, C, OC, layout);
    mm_results rc, rg;
    LF_ASSERT_OK(mm_run16(cpu, &in, bias, dinp, 0, inp_bf16, &rc));
    lf_status st = mm_run16(gpu, &in, bias, dinp, off, inp_bf16, &rg);
    if (st != LF_OK) fail_msg("[%s] %s: %s", ctx, lf_status_str(st), lf_last_error());
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double S = bias ? fabs(in.b[o]) : 0.0, S32 = S, exact = bias ? in.b[o] : 0.0;
            for (int k = 0; k < C; k++) {
                S += fabs(r16(in.x[(size_t)n * C + k]) * wel16(&in, k, o));
                S32 += fabs(in.x[(size_t)n * C + k] * wel(&in, k, o));
                exact += in.x[(size_t)n * C + k] * wel(&in, k, o);
            }
            const size_t i = (size_t)n * OC + o;
            check_close("out", ctx, i, rg.out[i], rc.out[i], 2 * gamma_h(C + 1) * S);
            if (fabs(rg.out[i] - exact) > 2 * gamma_h(C + 1) * S32) *bf16_seen = 1;
        }
    if (dinp)
        for (int n = 0; n < N; n++)
            for (int k = 0; k < C; k++) {
                double S = 0;
                for (int o = 0; o < OC; o++) S += fabs(r16(in.dout[(size_t)n * OC + o]) * wel16(&in, k, o));
                const size_t i = (size_t)n * C + k;
                check_close("dinp", ctx, i, rg.dinp[i], rc.dinp[i], 2 * gamma_h(OC) * S);
            }
    for (int k = 0; k < C; k++)
        for (int o = 0; o < OC; o++) {
            const size_t i = layout == LF_W_IN_OUT ? (size_t)k * OC + o : (size_t)o * C + k;
            double S = fabs(in.dw0[i]);
            for (int n = 0; n < N; n++) S += fabs(r16(in.x[(size_t)n * C + k]) * r16(in.dout[(size_t)n * OC + o]));
            check_close("dweight", ctx, i, rg.dw[i], rc.dw[i], 2 * gamma_h(N + 1) * S);
        }
    if (bias)
        for (int o = 0; o < OC; o++) {
            double S = fabs(in.db0[o]);
            for (int n = 0; n < N; n++) S += fabs(in.dout[(size_t)n * OC + o]);
            check_close("dbias", ctx, (size_t)o, rg.db[o], rc.db[o], 2 * gamma_h(N + 6) * S);
        }
    /* a bf16-stored inp: the bits of the fp32 inp that rounds to it */
    if (inp_bf16) {
        mm_results r32;
        LF_ASSERT_OK(mm_run16(gpu, &in, bias, dinp, off, 0, &r32));
        const size_t nx = (size_t)N * C, nw = (size_t)C * OC, no = (size_t)N * OC;
        if (memcmp(r32.out, rg.out, no * sizeof(float)) || (dinp && memcmp(r32.dinp, rg.dinp, nx * sizeof(float))) ||
            memcmp(r32.dw, rg.dw, nw * sizeof(float)) || (bias && memcmp(r32.db, rg.db, (size_t)OC * sizeof(float))))
            fail_msg("[%s] a bf16 inp changed the bits against its fp32 source", ctx);
        mm_results_free(&r32);
    }
    mm_results_free(&rc);
    mm_results_free(&rg);
    mm_inputs_free(&in);
}

static void test_bf16_matmul_vs_cpu_bf16(void **state) {
    (void)state;
    NEED_DEVICE();
    lf_backend *cpu = NULL, *gpu = open_cuda_bf16();
    LF_ASSERT_OK(lf_backend_open("cpu-bf16", &cpu));
    int seen = 0;
    const int Ns[] = {1, 3, 67}, Cs[] = {37, 64}, OCs[] = {1, 50, 129};
    for (int layout = 0; layout < 2; layout++)
        for (size_t a = 0; a < 3; a++)
            for (size_t c = 0; c < 2; c++)
                for (size_t o = 0; o < 3; o++)
                    for (int bias = 0; bias < 2; bias++)
                        for (int dinp = 0; dinp < 2; dinp++)
                            mm_case16(cpu, gpu, Ns[a], Cs[c], OCs[o], (lf_weight_layout)layout, bias, dinp, 0,
                                      (int)((a + c + o) & 1), &seen);
    for (int layout = 0; layout < 2; layout++)
        for (int inp16 = 0; inp16 < 2; inp16++) {
            mm_case16(cpu, gpu, 5, 769, 33, (lf_weight_layout)layout, 1, 1, 0, inp16, &seen);
            /* 4-byte aligned tensors: the bias-add kernel instead of the epilogue */
            mm_case16(cpu, gpu, 3, 37, 50, (lf_weight_layout)layout, 1, 1, 1, inp16, &seen);
            mm_case16(cpu, gpu, 67, 64, 129, (lf_weight_layout)layout, 1, 0, 1, inp16, &seen);
        }
    assert_true(seen); /* the products rounded their operands */
    LF_ASSERT_OK(lf_backend_sync(gpu));
    lf_backend_close(gpu);
    lf_backend_close(cpu);
}

static void test_bf16_matmul_deterministic(void **state) {
    (void)state;
    NEED_DEVICE();
    lf_backend *gpu = open_cuda_bf16();
    for (int layout = 0; layout < 2; layout++) {
        mm_inputs in;
        mm_inputs_make(&in, 67, 37, 129, (lf_weight_layout)layout);
        mm_results r0, r1;
        LF_ASSERT_OK(mm_run16(gpu, &in, 1, 1, 0, layout, &r0));
        LF_ASSERT_OK(mm_run16(gpu, &in, 1, 1, 0, layout, &r1));
        assert_true(same_bits(&r0, &r1, &in));
        mm_results_free(&r1);
#ifdef LF_CUDA_SHIM
        const lf_shim_schedule_kind kinds[] = {LF_SHIM_SCHEDULE_FORWARD, LF_SHIM_SCHEDULE_REVERSE,
                                               LF_SHIM_SCHEDULE_SHUFFLE};
        for (size_t s = 0; s < 3; s++) {
            lf_shim_set_schedule(kinds[s], 5);
            mm_results rs;
            LF_ASSERT_OK(mm_run16(gpu, &in, 1, 1, 0, layout, &rs));
            if (!same_bits(&r0, &rs, &in)) fail_msg("bf16: schedule %d changed the bits", (int)kinds[s]);
            mm_results_free(&rs);
        }
        lf_shim_set_schedule(LF_SHIM_SCHEDULE_SHUFFLE, LF_SHIM_DEFAULT_SEED);
#endif
        mm_results_free(&r0);
        mm_inputs_free(&in);
    }
    lf_backend_close(gpu);
}

/* out of one forward of x (N,C) through the weight at dw on be */
static float *fwd(lf_backend *be, const float *dx, const float *dw, int N, int C, int OC) {
    float *out = put(be, NULL, (size_t)N * OC);
    be->ops->matmul_forward(be, out, dx, LF_DT_F32, dw, NULL, N, C, OC, LF_W_IN_OUT);
    float *h = get(be, out, (size_t)N * OC);
    LF_ASSERT_OK(lf_backend_sync(be));
    be->ops->free(be, out);
    return h;
}

/* the forward of a fresh cuda-bf16 instance holding weight w (host) */
static float *fresh_fwd(const float *x, const float *w, int N, int C, int OC) {
    lf_backend *be = open_cuda_bf16();
    float *dx = put(be, x, (size_t)N * C), *dw = put(be, w, (size_t)C * OC);
    float *h = fwd(be, dx, dw, N, C, OC);
    be->ops->free(be, dx), be->ops->free(be, dw);
    lf_backend_close(be);
    return h;
}

static void expect_same(const char *what, const float *a, const float *b, size_t n, int same) {
    const int eq = memcmp(a, b, n * sizeof(float)) == 0;
    if (eq != same) fail_msg("%s: the products %s", what, same ? "differ" : "are the same");
}

static void test_bf16_weight_copies(void **state) {
    (void)state;
    NEED_DEVICE();
    enum { N = 5, C = 37, OC = 50 };
    const size_t nw = (size_t)C * OC, no = (size_t)N * OC;
    float x[N * C], w[C * OC], w2[C * OC], g[C * OC], zero[C * OC] = {0};
    fill_rand(x, N * C, 0.0f);
    fill_rand(w, nw, 0.0f);
    fill_rand(w2, nw, 0.0f);
    fill_rand(g, nw, 0.0f);
    lf_backend *be = open_cuda_bf16();
    /* the weight inside a larger block, as in the flat parameter buffer */
    float *block = put(be, NULL, 3 * nw), *dw = block + nw, *dx = put(be, x, N * C);
    be->ops->to_device(be, dw, w, nw * sizeof(float));
    float *o0 = fwd(be, dx, dw, N, C, OC), *ref = fresh_fwd(x, w, N, C, OC);
    expect_same("first product", o0, ref, no, 1);
    free(ref);

    /* to_device of a neighbour (the tokens of a step): the copy stays */
    be->ops->to_device(be, block, w2, nw * sizeof(float));
    float *o1 = fwd(be, dx, dw, N, C, OC);
    expect_same("after a write next to the weight", o1, o0, no, 1);
    free(o1);

    /* a new weight through to_device (one element is enough) */
    be->ops->to_device(be, dw + nw - 1, &w2[nw - 1], sizeof(float));
    w[nw - 1] = w2[nw - 1];
    o1 = fwd(be, dx, dw, N, C, OC), ref = fresh_fwd(x, w, N, C, OC);
    expect_same("after to_device of the weight's last element", o1, ref, no, 1);
    expect_same("(the change showed)", o1, o0, no, 0);
    free(o1), free(ref);

    /* AdamW on exactly the weight: the copy renewed in the same pass */
    float *dg = put(be, g, nw), *m1 = put(be, zero, nw), *m2 = put(be, zero, nw);
    be->ops->adamw_update(be, dw, dg, m1, m2, nw, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1);
    float *wn = get(be, dw, nw);
    o1 = fwd(be, dx, dw, N, C, OC), ref = fresh_fwd(x, wn, N, C, OC);
    expect_same("after adamw_update of the weight", o1, ref, no, 1);
    free(o1), free(ref), free(wn);

    /* AdamW on a range that overlaps the weight (its second half and beyond) */
    be->ops->adamw_update(be, dw + nw / 2, dg, m1, m2, nw, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 2);
    wn = get(be, dw, nw);
    o1 = fwd(be, dx, dw, N, C, OC), ref = fresh_fwd(x, wn, N, C, OC);
    expect_same("after adamw_update of an overlapping range", o1, ref, no, 1);
    free(ref);

    /* a write the backend does not watch (scale): the stale copy is used
     * until params_changed (the contract's rule) */
    be->ops->scale(be, dw, nw, -1.0f);
    float *o2 = fwd(be, dx, dw, N, C, OC);
    expect_same("after scale, before params_changed (the cached copy)", o2, o1, no, 1);
    free(o2);
    be->ops->params_changed(be);
    for (size_t i = 0; i < nw; i++) wn[i] = -wn[i];
    o2 = fwd(be, dx, dw, N, C, OC), ref = fresh_fwd(x, wn, N, C, OC);
    expect_same("after params_changed", o2, ref, no, 1);
    free(o1), free(o2), free(ref), free(wn);

    /* free the block, then a new weight (maybe at the same address) */
    be->ops->free(be, block);
    dw = put(be, w2, nw);
    o1 = fwd(be, dx, dw, N, C, OC), ref = fresh_fwd(x, w2, N, C, OC);
    expect_same("a new tensor after free", o1, ref, no, 1);
    free(o1), free(ref), free(o0);

    /* convert to bf16: the reference rounding, bit for bit; ties, inf, NaN */
    float xs[8] = {1.0f + ldexpf(1.0f, -8), 1.0f + 3 * ldexpf(1.0f, -8), -2.5f, 3.4e38f, INFINITY, -0.0f,
                   ldexpf(1.0f, -130), NAN};
    float *dxs = put(be, xs, 8);
    uint16_t *d16 = be->ops->alloc(be, 9 * sizeof(uint16_t)), h16[9];
    be->ops->convert(be, d16, LF_DT_BF16, dxs, 8);
    be->ops->to_host(be, h16, d16, 9 * sizeof(uint16_t));
    LF_ASSERT_OK(lf_backend_sync(be));
    for (int i = 0; i < 8; i++)
        if (h16[i] != ref_bf16_bits(xs[i]))
            fail_msg("convert bf16 [%d]: %04x, want %04x", i, h16[i], ref_bf16_bits(xs[i]));
#ifdef LF_CUDA_SHIM
    assert_int_equal(h16[8], 0xffff); /* the element after n: still the shim's poison of new memory */
#endif
    be->ops->free(be, dxs), be->ops->free(be, d16);
    be->ops->free(be, dw), be->ops->free(be, dx), be->ops->free(be, dg), be->ops->free(be, m1), be->ops->free(be, m2);
    LF_ASSERT_OK(lf_backend_sync(be));
    lf_backend_close(be);
}

/* ---------------------------------------------------------------- scale, add_inplace, convert */

static void test_elementwise(void **state) {
    (void)state;
    NEED_DEVICE();
    lf_backend *gpu = open_cuda();
    const size_t sizes[] = {1, 37, 769, 100003};
    const float s = -0.3f; /* not a power of two: every product rounds */
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        const size_t n = sizes[si];
        float *x = malloc((n + 1) * sizeof(float)), *y = malloc((n + 1) * sizeof(float));
        fill_rand(x, n + 1, 0.0f);
        fill_rand(y, n + 1, 0.5f);
        float *dx = put(gpu, x, n + 1), *dy = put(gpu, y, n + 1), *dz = put(gpu, NULL, n + 1);

        gpu->ops->scale(gpu, dx, n, s);
        float *h = get(gpu, dx, n + 1);
        for (size_t i = 0; i < n; i++) {
            const float want = x[i] * s;
            if (memcmp(&h[i], &want, sizeof want)) fail_msg("scale n=%zu [%zu]: %.9g, want %.9g", n, i, h[i], want);
        }
        assert_memory_equal(&h[n], &x[n], sizeof(float));
        free(h);
        gpu->ops->to_device(gpu, dx, x, (n + 1) * sizeof(float));

        gpu->ops->add_inplace(gpu, dy, dx, n);
        h = get(gpu, dy, n + 1);
        for (size_t i = 0; i < n; i++) {
            const float want = y[i] + x[i];
            if (memcmp(&h[i], &want, sizeof want)) fail_msg("add_inplace n=%zu [%zu]: %.9g, want %.9g", n, i, h[i], want);
        }
        assert_memory_equal(&h[n], &y[n], sizeof(float));
        free(h);
        gpu->ops->add_inplace(gpu, dx, dx, n); /* y += y */
        h = get(gpu, dx, n + 1);
        for (size_t i = 0; i < n; i++) assert_true(h[i] == x[i] + x[i]);
        free(h);
        gpu->ops->to_device(gpu, dx, x, (n + 1) * sizeof(float));

        gpu->ops->convert(gpu, dz, LF_DT_F32, dx, n);
        gpu->ops->convert(gpu, dx, LF_DT_F32, dx, n); /* in place: a no-op */
        h = get(gpu, dz, n + 1);
        assert_memory_equal(h, x, n * sizeof(float));
        assert_true(isnan(h[n])); /* still the NaN fill */
        free(h);
        h = get(gpu, dx, n + 1);
        assert_memory_equal(h, x, (n + 1) * sizeof(float));
        free(h);

        LF_ASSERT_OK(lf_backend_sync(gpu));
        gpu->ops->free(gpu, dx), gpu->ops->free(gpu, dy), gpu->ops->free(gpu, dz);
        free(x), free(y);
    }
    /* n = 0 launches nothing and is fine */
    gpu->ops->scale(gpu, NULL, 0, 2.0f);
    gpu->ops->add_inplace(gpu, NULL, NULL, 0);
    gpu->ops->convert(gpu, NULL, LF_DT_F32, NULL, 0);
    LF_ASSERT_OK(lf_backend_sync(gpu));
    lf_backend_close(gpu);
}

/* ---------------------------------------------------------------- errors */

static void expect_failure(lf_backend *be, lf_status code, const char *needle1, const char *needle2) {
    lf_status st = lf_backend_sync(be);
    if (st != code)
        fail_msg("sync: %s, expected %s (%s)", lf_status_str(st), lf_status_str(code), lf_last_error());
    LF_ASSERT_ERR_CONTAINS(needle1);
    if (needle2) LF_ASSERT_ERR_CONTAINS(needle2);
    assert_int_equal(lf_backend_status(be), code); /* sticky */
}

static void test_bad_arguments(void **state) {
    (void)state;
    NEED_DEVICE();
    const int N = 3, C = 37, OC = 50;
    /* bf16 storage: not offered by "cuda" (act_dtypes is fp32) */
    lf_backend *gpu = open_cuda();
    float *x = put(gpu, NULL, (size_t)N * C), *w = put(gpu, NULL, (size_t)C * OC), *o = put(gpu, NULL, (size_t)N * OC);
    gpu->ops->matmul_forward(gpu, o, x, LF_DT_BF16, w, NULL, N, C, OC, LF_W_IN_OUT);
    expect_failure(gpu, LF_ERR_UNSUPPORTED, "matmul_forward", "bf16");
    gpu->ops->free(gpu, x), gpu->ops->free(gpu, w), gpu->ops->free(gpu, o);
    lf_backend_close(gpu);

    gpu = open_cuda();
    x = put(gpu, NULL, (size_t)N * C), w = put(gpu, NULL, (size_t)C * OC), o = put(gpu, NULL, (size_t)N * OC);
    gpu->ops->matmul_backward(gpu, x, w, NULL, o, x, LF_DT_BF16, w, N, C, OC, LF_W_OUT_IN);
    expect_failure(gpu, LF_ERR_UNSUPPORTED, "matmul_backward", "bf16");
    gpu->ops->free(gpu, x), gpu->ops->free(gpu, w), gpu->ops->free(gpu, o);
    lf_backend_close(gpu);

    gpu = open_cuda();
    x = put(gpu, NULL, 8);
    gpu->ops->convert(gpu, x, LF_DT_BF16, x, 8);
    expect_failure(gpu, LF_ERR_UNSUPPORTED, "convert", "bf16");
    gpu->ops->free(gpu, x);
    lf_backend_close(gpu);

    /* a negative dimension; the first failure is the one kept */
    gpu = open_cuda();
    x = put(gpu, NULL, 8);
    gpu->ops->matmul_forward(gpu, x, x, LF_DT_F32, x, NULL, -1, 2, 2, LF_W_IN_OUT);
    gpu->ops->convert(gpu, x, LF_DT_BF16, x, 8);
    expect_failure(gpu, LF_ERR_RANGE, "matmul_forward", "N=-1");
    gpu->ops->free(gpu, x);
    lf_backend_close(gpu);

    /* a float pointer that is not 4-byte aligned (a GPU would fault on it) */
    gpu = open_cuda();
    x = put(gpu, NULL, (size_t)N * C), w = put(gpu, NULL, (size_t)C * OC), o = put(gpu, NULL, (size_t)N * OC);
    float *b = put(gpu, NULL, (size_t)OC + 1);
    const float *bad_bias = (const float *)(const void *)((const char *)b + 2);
    gpu->ops->matmul_forward(gpu, o, x, LF_DT_F32, w, bad_bias, N, C, OC, LF_W_IN_OUT);
    expect_failure(gpu, LF_ERR_INVALID_ARG, "matmul_forward", "bias");
    LF_ASSERT_ERR_CONTAINS("not aligned");
    gpu->ops->free(gpu, x), gpu->ops->free(gpu, w), gpu->ops->free(gpu, o), gpu->ops->free(gpu, b);
    lf_backend_close(gpu);
}

#ifdef LF_CUDA_SHIM
/* A weight one float shorter than (C, OC): cuBLASLt's read of it leaves the
 * allocation, which the shim catches and turns into a device fault (as a GPU
 * would). Run last: it leaves the context's sticky error, cleared by
 * cudaDeviceReset. */
static void test_wrong_pointer(void **state) {
    (void)state;
    NEED_DEVICE();
    const int N = 3, C = 37, OC = 50;
    lf_backend *gpu = open_cuda();
    float *x = put(gpu, NULL, (size_t)N * C), *w = put(gpu, NULL, (size_t)C * OC - 1);
    float *o = put(gpu, NULL, (size_t)N * OC);
    gpu->ops->matmul_forward(gpu, o, x, LF_DT_F32, w, NULL, N, C, OC, LF_W_OUT_IN);
    expect_failure(gpu, LF_ERR_DEVICE, "matmul_forward", "cublasLtMatmul");
    LF_ASSERT_ERR_CONTAINS("out = inp @ W^T, N=3 C=37 OC=50");
    gpu->ops->free(gpu, x), gpu->ops->free(gpu, w), gpu->ops->free(gpu, o);
    lf_backend_close(gpu);
    (void)cudaDeviceReset();
}
#endif

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_vs_cpu),
        cmocka_unit_test(test_matmul_deterministic),
        cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_bf16_matmul_vs_cpu_bf16),
        cmocka_unit_test(test_bf16_matmul_deterministic),
        cmocka_unit_test(test_bf16_weight_copies),
#ifdef LF_CUDA_SHIM
        cmocka_unit_test(test_wrong_pointer), /* last: faults the device */
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
