/*
 * cuBLASLt's matmul semantics against a plain triple loop in double.
 * Built twice, like test_cuda_samples.c: against the shim's CPU mapping
 * (cuda.test_cublaslt) and, with LF_CUDA, against the real cuBLASLt
 * (gpu.test_cublaslt; SKIPPED without a GPU), so the shim is held to what
 * the library does.
 *
 * The reference works on logical matrices op(A) (m x k), op(B) (k x n),
 * C (m x n); the test stores them through its own index arithmetic
 * (transpose, order, ld, batch offset) and fills every element outside
 * the logical matrices of A, B and C with NaN and those of D with a
 * sentinel: reading padding shows as NaN, writing it as a changed sentinel.
 *
 * Cases: every transpose pair, sizes 1x1x1, 7x5x3, 33x17x65, ld = minimal
 * and minimal + 3, fp32 -> fp32, bf16 -> bf16 / fp32, fp16 -> fp16 / fp32,
 * alpha/beta (1, 0) and (0.75, -1.5); row-major; batched with strides
 * larger than the matrices (and a per-batch bias); every epilogue the shim
 * has (RELU, BIAS, RELU_BIAS, GELU, GELU_BIAS, GELU_AUX, GELU_AUX_BIAS,
 * DGELU, DGELU_BGRAD, BGRADA, BGRADB) in fp32, bf16 and bf16 in / fp32 out
 * (cuda-bf16's products); the A/B/D type combinations cuBLASLt lacks
 * refused; beta = 0 over a C
 * of NaN; in place (C == D); a broadcast C (ld 0); TF32 and BF16 fast
 * compute. Where the real library may decline a configuration the shim
 * accepts (row-major, ld-0 C, some epilogues), the GPU build notes the
 * refusal and moves on; the shim must compute it.
 *
 * Tolerance, per element, from the standard error model (Higham, 3.1; u =
 * 2^-24): the pre-activation x = alpha*sum_l a_il b_lj + beta*c_ij + bias_i
 * computed in fp32 is within E = gamma_{k+4} (|alpha| S + |beta c| + |bias|),
 * S = sum_l |a_il b_lj| (the dot product, then alpha*, beta*, the two adds);
 * inputs rounded to tf32 / bf16 by a fast compute type add 2 u_in |alpha| S.
 * ReLU keeps E; GELU (slope <= 1.13, a few roundings and a tanhf of a few
 * ulp) 1.13 E + 8u (|x| + |gelu x|); DGELU |g'| E + 8u |x| (1 + |a|(1 +
 * 0.14 a^2)) + u |y| (g' of the aux value a evaluated in fp32). Rounding to
 * D's type adds u_out (|y| + error), u_out = 2^-8 (bf16), 2^-11 (fp16), plus
 * fp16's subnormal step. Bias gradients: a sum of k (or n) terms, gamma
 * bound on their magnitudes plus the terms' own errors. The inputs are
 * exactly representable in their types, so no input rounding enters.
 *
 * Argument errors: a NULL handle, ld below the rows, shapes that do not
 * chain, attribute sizes, a missing bias or aux pointer, an aux ld not a
 * multiple of 8; on the shim also what it refuses (zero sizes, batch
 * counts that differ, unsupported types and epilogues, a matrix outside
 * device memory, which also faults the context as a GPU kernel would).
 */
#include "../test_util.h"
#include "backend/cuda/cuda_api.h"
#include "lowp_ref.h"

#ifdef LF_CUDA_SHIM
#define ON_SHIM 1
#define LT_DETAIL() lf_shim_cublaslt_last_detail()
#else
#define ON_SHIM 0
#define LT_DETAIL() ""
#endif

#define CK(expr)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (expr);                                                                   \
        if (e_ != cudaSuccess) fail_msg("%s -> %s", #expr, cudaGetErrorString(e_));                \
    } while (0)
#define LT(expr)                                                                                   \
    do {                                                                                           \
        cublasStatus_t s_ = (expr);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                           \
            fail_msg("%s -> %s %s", #expr, cublasLtGetStatusName(s_), LT_DETAIL());                \
    } while (0)

static cublasLtHandle_t g_lt;
static void *g_workspace;
static const size_t kWorkspace = 32u << 20;

static uint64_t rng_state = 0x9e3779b9;
static double frand(void) { /* uniform in [-1, 1) */
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static size_t tsize(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }
static double round_to(cudaDataType_t t, double v) {
    if (t == CUDA_R_32F) return (double)(float)v;
    if (t == CUDA_R_16BF) return ref_bf16_value(ref_bf16_bits((float)v));
    return ref_f16_value(ref_f16_bits((float)v));
}
static double unit_out(cudaDataType_t t) {
    return t == CUDA_R_32F ? ldexp(1.0, -24) : t == CUDA_R_16BF ? ldexp(1.0, -8) : ldexp(1.0, -11);
}
static double step_floor(cudaDataType_t t) { /* half the smallest subnormal step */
    return t == CUDA_R_16F ? ldexp(1.0, -25) : t == CUDA_R_16BF ? ldexp(1.0, -134) : ldexp(1.0, -150);
}
static void hput(void *buf, cudaDataType_t t, int64_t i, double v) {
    if (t == CUDA_R_32F)
        ((float *)buf)[i] = (float)v;
    else if (t == CUDA_R_16BF)
        ((uint16_t *)buf)[i] = ref_bf16_bits((float)v);
    else
        ((uint16_t *)buf)[i] = ref_f16_bits((float)v);
}
static double hget(const void *buf, cudaDataType_t t, int64_t i) {
    if (t == CUDA_R_32F) return ((const float *)buf)[i];
    if (t == CUDA_R_16BF) return ref_bf16_value(((const uint16_t *)buf)[i]);
    return ref_f16_value(((const uint16_t *)buf)[i]);
}

typedef struct {
    int rows, cols, row, batch;
    int64_t ld, stride;
    cudaDataType_t type;
} lay;

static int64_t lay_off(const lay *L, int r, int c, int b) {
    return b * L->stride + (L->row ? (int64_t)r * L->ld + c : r + (int64_t)c * L->ld);
}
static int64_t lay_extent(const lay *L) {
    int64_t one = L->row ? (int64_t)(L->rows - 1) * L->ld + L->cols : (int64_t)(L->cols - 1) * L->ld + L->rows;
    return (int64_t)(L->batch - 1) * L->stride + one;
}
static void lay_init(lay *L, int rows, int cols, cudaDataType_t t, int row, int pad, int batch, int stride_pad) {
    L->rows = rows, L->cols = cols, L->type = t, L->row = row, L->batch = batch;
    L->ld = (row ? cols : rows) + pad;
    L->stride = batch > 1 ? (int64_t)(row ? rows : cols) * L->ld + stride_pad : 0;
}
static cublasLtMatrixLayout_t mklayout(const lay *L) {
    cublasLtMatrixLayout_t h;
    LT(cublasLtMatrixLayoutCreate(&h, L->type, (uint64_t)L->rows, (uint64_t)L->cols, L->ld));
    if (L->row) {
        int32_t order = CUBLASLT_ORDER_ROW;
        LT(cublasLtMatrixLayoutSetAttribute(h, CUBLASLT_MATRIX_LAYOUT_ORDER, &order, sizeof order));
    }
    if (L->batch > 1) {
        int32_t b = L->batch;
        LT(cublasLtMatrixLayoutSetAttribute(h, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof b));
        LT(cublasLtMatrixLayoutSetAttribute(h, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &L->stride,
                                            sizeof L->stride));
    }
    return h;
}

static double gelu_d(double x) { return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
static double gelu_grad_d(double x) {
    double t = tanh(0.7978845608028654 * (x + 0.044715 * x * x * x));
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
}

static int epi_adds_bias(uint32_t e) {
    return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_RELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS ||
           e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
static int epi_aux_out(uint32_t e) { return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS; }
static int epi_aux_in(uint32_t e) { return e == CUBLASLT_EPILOGUE_DGELU || e == CUBLASLT_EPILOGUE_DGELU_BGRAD; }
static int epi_bgrad(uint32_t e) {
    return e == CUBLASLT_EPILOGUE_DGELU_BGRAD || e == CUBLASLT_EPILOGUE_BGRADA || e == CUBLASLT_EPILOGUE_BGRADB;
}
static int epi_relu(uint32_t e) { return e == CUBLASLT_EPILOGUE_RELU || e == CUBLASLT_EPILOGUE_RELU_BIAS; }
static int epi_gelu(uint32_t e) {
    return e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_BIAS || epi_aux_out(e);
}

typedef struct {
    int ta, tb, m, n, k, pad, row_major;
    cudaDataType_t ab, cd;
    cublasComputeType_t compute;
    int batch, stride_pad;
    double alpha, beta;
    uint32_t epilogue;
    int in_place, c_broadcast, c_nan;
    int gpu_may_refuse;
} mm_case;

static mm_case base_case(int m, int n, int k) {
    mm_case c;
    memset(&c, 0, sizeof c);
    c.m = m, c.n = n, c.k = k;
    c.ab = c.cd = CUDA_R_32F;
    c.compute = CUBLAS_COMPUTE_32F;
    c.batch = 1;
    c.alpha = 1.0;
    c.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    return c;
}

static const char *tname(cudaDataType_t t) { return t == CUDA_R_32F ? "f32" : t == CUDA_R_16BF ? "bf16" : "f16"; }

static void describe(const mm_case *c, char *buf, size_t n) {
    snprintf(buf, n, "%c%c m=%d n=%d k=%d pad=%d %s %s->%s compute=%d batch=%d alpha=%g beta=%g epilogue=%u%s%s%s",
             c->ta ? 'T' : 'N', c->tb ? 'T' : 'N', c->m, c->n, c->k, c->pad, c->row_major ? "row" : "col",
             tname(c->ab), tname(c->cd), (int)c->compute, c->batch, c->alpha, c->beta, c->epilogue,
             c->in_place ? " in-place" : "", c->c_broadcast ? " C-ld0" : "", c->c_nan ? " C=NaN" : "");
}

static void *upload(const void *h, size_t bytes) {
    void *d = NULL;
    CK(cudaMalloc(&d, bytes ? bytes : 1));
    if (bytes) CK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    return d;
}

static int run_case(const mm_case *c) {
    char what[256];
    describe(c, what, sizeof what);
    const int m = c->m, n = c->n, k = c->k, B = c->batch;
    const uint32_t e = c->epilogue;
    lay LA, LB, LC, LD;
    lay_init(&LA, c->ta ? k : m, c->ta ? m : k, c->ab, c->row_major, c->pad, B, c->stride_pad);
    lay_init(&LB, c->tb ? n : k, c->tb ? k : n, c->ab, c->row_major, c->pad, B, c->stride_pad);
    lay_init(&LD, m, n, c->cd, c->row_major, c->pad, B, c->stride_pad);
    LC = LD;
    if (c->c_broadcast) {
        LC.ld = 0;
        LC.stride = B > 1 ? m + c->stride_pad : 0;
    }
    const int64_t nA = lay_extent(&LA), nB = lay_extent(&LB), nC = lay_extent(&LC), nD = lay_extent(&LD);
    unsigned char *hA = malloc((size_t)nA * tsize(c->ab)), *hB = malloc((size_t)nB * tsize(c->ab));
    unsigned char *hC = malloc((size_t)nC * tsize(c->cd)), *hD = malloc((size_t)nD * tsize(c->cd));
    memset(hA, 0xff, (size_t)nA * tsize(c->ab)); /* NaN in every type */
    memset(hB, 0xff, (size_t)nB * tsize(c->ab));
    memset(hC, 0xff, (size_t)nC * tsize(c->cd));
    memset(hD, 0x5a, (size_t)nD * tsize(c->cd)); /* the sentinel */
    double *A = malloc(sizeof(double) * B * m * k), *Bm = malloc(sizeof(double) * B * k * n);
    double *Cv = malloc(sizeof(double) * B * m * n), *aux_in = malloc(sizeof(double) * B * m * n);
    for (int b = 0; b < B; b++) {
        for (int i = 0; i < m; i++)
            for (int l = 0; l < k; l++) {
                double v = round_to(c->ab, frand());
                A[(b * m + i) * k + l] = v;
                hput(hA, c->ab, c->ta ? lay_off(&LA, l, i, b) : lay_off(&LA, i, l, b), v);
            }
        for (int l = 0; l < k; l++)
            for (int j = 0; j < n; j++) {
                double v = round_to(c->ab, frand());
                Bm[(b * k + l) * n + j] = v;
                hput(hB, c->ab, c->tb ? lay_off(&LB, j, l, b) : lay_off(&LB, l, j, b), v);
            }
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
                double v = round_to(c->cd, frand());
                if (c->c_broadcast) {
                    v = round_to(c->cd, 0.25 * (i + 1) - 1.0);
                    hput(hC, c->cd, lay_off(&LC, i, 0, b), v);
                } else if (!c->c_nan) {
                    hput(hC, c->cd, lay_off(&LC, i, j, b), v);
                }
                Cv[(b * m + i) * n + j] = v;
                if (c->in_place && !c->c_nan) hput(hD, c->cd, lay_off(&LD, i, j, b), v);
                aux_in[(b * m + i) * n + j] = round_to(c->cd, 3.0 * frand());
            }
    }
    /* bias (or its gradient) and aux */
    const int bias_len = e == CUBLASLT_EPILOGUE_BGRADB ? n : m;
    const int64_t bias_stride = B > 1 ? bias_len + 2 : 0;
    const int64_t aux_ld = ((m + 7) / 8) * 8 + (c->pad ? 8 : 0), aux_stride = B > 1 ? aux_ld * n + 8 : 0;
    const int64_t nbias = (int64_t)(B - 1) * bias_stride + bias_len, naux = (int64_t)(B - 1) * aux_stride + aux_ld * n;
    unsigned char *hbias = malloc((size_t)nbias * tsize(c->cd)), *haux = malloc((size_t)naux * tsize(c->cd));
    memset(hbias, 0x5a, (size_t)nbias * tsize(c->cd));
    memset(haux, 0x5a, (size_t)naux * tsize(c->cd));
    double *biasv = malloc(sizeof(double) * B * bias_len);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < bias_len; i++) {
            biasv[b * bias_len + i] = round_to(c->cd, frand());
            if (epi_adds_bias(e)) hput(hbias, c->cd, b * bias_stride + i, biasv[b * bias_len + i]);
        }
    if (epi_aux_in(e))
        for (int b = 0; b < B; b++)
            for (int i = 0; i < m; i++)
                for (int j = 0; j < n; j++) hput(haux, c->cd, b * aux_stride + i + j * aux_ld, aux_in[(b * m + i) * n + j]);

    void *dA = upload(hA, (size_t)nA * tsize(c->ab)), *dB = upload(hB, (size_t)nB * tsize(c->ab));
    void *dD = upload(hD, (size_t)nD * tsize(c->cd));
    void *dC = c->in_place ? dD : upload(hC, (size_t)nC * tsize(c->cd));
    void *dbias = upload(hbias, (size_t)nbias * tsize(c->cd)), *daux = upload(haux, (size_t)naux * tsize(c->cd));

    cublasLtMatmulDesc_t desc;
    LT(cublasLtMatmulDescCreate(&desc, c->compute, CUDA_R_32F));
    int32_t ta = c->ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = c->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e));
    if (epi_adds_bias(e) || epi_bgrad(e)) {
        LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias, sizeof dbias));
        if (B > 1)
            LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &bias_stride,
                                              sizeof bias_stride));
    }
    if (epi_aux_in(e) || epi_aux_out(e)) {
        LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &daux, sizeof daux));
        LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld));
        if (B > 1)
            LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, &aux_stride,
                                              sizeof aux_stride));
    }
    cublasLtMatrixLayout_t hLA = mklayout(&LA), hLB = mklayout(&LB), hLC = mklayout(&LC), hLD = mklayout(&LD);
    cublasLtMatmulPreference_t pref;
    LT(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = kWorkspace;
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(g_lt, desc, hLA, hLB, hLC, hLD, pref, 1, &heur, &found);
    float alpha = (float)c->alpha, beta = (float)c->beta;
    int ran = 0;
    if (st == CUBLAS_STATUS_SUCCESS && found >= 1) {
        st = cublasLtMatmul(g_lt, desc, &alpha, dA, hLA, dB, hLB, &beta, dC, hLC, dD, hLD, &heur.algo, g_workspace,
                            heur.workspaceSize, 0);
        ran = st == CUBLAS_STATUS_SUCCESS;
    }
    if (!ran && !ON_SHIM && c->gpu_may_refuse) {
        printf("NOTE: cuBLASLt declines %s: %s\n", what, cublasLtGetStatusName(st));
    } else if (!ran) {
        fail_msg("%s: %s (%d algorithms) %s", what, cublasLtGetStatusName(st), found, LT_DETAIL());
    }
    if (ran) {
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(hD, dD, (size_t)nD * tsize(c->cd), cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(hbias, dbias, (size_t)nbias * tsize(c->cd), cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(haux, daux, (size_t)naux * tsize(c->cd), cudaMemcpyDeviceToHost));
        const double u = ldexp(1.0, -24), uo = unit_out(c->cd), fl = step_floor(c->cd);
        double u_in = c->compute == CUBLAS_COMPUTE_32F_FAST_TF32 ? ldexp(1.0, -11)
                      : c->compute == CUBLAS_COMPUTE_32F_FAST_16BF ? ldexp(1.0, -8)
                                                                     : 0.0;
        const double gk = (k + 4) * u / (1 - (k + 4) * u);
        unsigned char *written = calloc((size_t)nD, 1);
        for (int b = 0; b < B; b++) {
            double *colsum_ref = calloc((size_t)m, sizeof(double)), *colsum_tol = calloc((size_t)m, sizeof(double));
            for (int i = 0; i < m; i++)
                for (int j = 0; j < n; j++) {
                    double acc = 0, S = 0;
                    for (int l = 0; l < k; l++) {
                        double p = A[(b * m + i) * k + l] * Bm[(b * k + l) * n + j];
                        acc += p;
                        S += fabs(p);
                    }
                    double x = c->alpha * acc, mag = fabs(c->alpha) * S;
                    if (c->beta != 0) {
                        x += c->beta * Cv[(b * m + i) * n + j];
                        mag += fabs(c->beta * Cv[(b * m + i) * n + j]);
                    }
                    if (epi_adds_bias(e)) {
                        x += biasv[b * bias_len + i];
                        mag += fabs(biasv[b * bias_len + i]);
                    }
                    double E = gk * mag + 2 * u_in * fabs(c->alpha) * S, y = x, Ey = E;
                    if (epi_aux_out(e)) {
                        double got = hget(haux, c->cd, b * aux_stride + i + j * aux_ld);
                        if (!(fabs(got - x) <= E * (1 + uo) + uo * fabs(x) + fl))
                            fail_msg("%s: aux(%d,%d,%d) = %.9g, reference %.9g", what, b, i, j, got, x);
                    }
                    if (epi_relu(e)) y = x > 0 ? x : 0;
                    if (epi_gelu(e)) {
                        y = gelu_d(x);
                        Ey = 1.13 * E + 8 * u * (fabs(x) + fabs(y));
                    }
                    if (epi_aux_in(e)) {
                        double a = aux_in[(b * m + i) * n + j], g = gelu_grad_d(a);
                        y = x * g;
                        Ey = fabs(g) * E + 8 * u * fabs(x) * (1 + fabs(a) * (1 + 0.14 * a * a)) + u * fabs(y);
                    }
                    double tol = Ey * (1 + uo) + uo * fabs(y) + fl;
                    int64_t o = lay_off(&LD, i, j, b);
                    written[o] = 1;
                    double got = hget(hD, c->cd, o);
                    if (!(fabs(got - y) <= tol))
                        fail_msg("%s: D(%d,%d,%d) = %.9g, reference %.9g, |error| %.3g > %.3g", what, b, i, j, got, y,
                                 fabs(got - y), tol);
                    colsum_ref[i] += y;
                    colsum_tol[i] += Ey + uo * fabs(y) + (n + 1) * u * fabs(y);
                }
            if (epi_bgrad(e)) {
                for (int i = 0; i < bias_len; i++) {
                    double ref = 0, tol = 0;
                    if (e == CUBLASLT_EPILOGUE_DGELU_BGRAD) {
                        ref = colsum_ref[i], tol = colsum_tol[i];
                    } else {
                        double mag = 0;
                        for (int l = 0; l < k; l++) {
                            double v = e == CUBLASLT_EPILOGUE_BGRADA ? A[(b * m + i) * k + l] : Bm[(b * k + l) * n + i];
                            ref += v;
                            mag += fabs(v);
                        }
                        tol = (k + 1) * u * mag;
                    }
                    tol = tol * (1 + uo) + uo * fabs(ref) + fl;
                    double got = hget(hbias, c->cd, b * bias_stride + i);
                    if (!(fabs(got - ref) <= tol))
                        fail_msg("%s: bias gradient (%d,%d) = %.9g, reference %.9g, tol %.3g", what, b, i, got, ref, tol);
                }
            }
            free(colsum_ref);
            free(colsum_tol);
        }
        /* nothing written outside D's matrices */
        size_t es = tsize(c->cd);
        for (int64_t o = 0; o < nD; o++) {
            if (written[o]) continue;
            for (size_t q = 0; q < es; q++)
                if (hD[(size_t)o * es + q] != 0x5a) fail_msg("%s: D's padding element %lld was written", what, (long long)o);
        }
        free(written);
    }
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(hLA);
    cublasLtMatrixLayoutDestroy(hLB);
    cublasLtMatrixLayoutDestroy(hLC);
    cublasLtMatrixLayoutDestroy(hLD);
    cublasLtMatmulDescDestroy(desc);
    CK(cudaFree(dA));
    CK(cudaFree(dB));
    if (!c->in_place) CK(cudaFree(dC));
    CK(cudaFree(dD));
    CK(cudaFree(dbias));
    CK(cudaFree(daux));
    free(hA), free(hB), free(hC), free(hD), free(hbias), free(haux);
    free(A), free(Bm), free(Cv), free(aux_in), free(biasv);
    return ran;
}

static void test_layouts_and_types(void **state) {
    (void)state;
    const int sizes[][3] = {{1, 1, 1}, {7, 5, 3}, {33, 17, 65}};
    const cudaDataType_t types[][2] = {{CUDA_R_32F, CUDA_R_32F}, {CUDA_R_16BF, CUDA_R_16BF}, {CUDA_R_16BF, CUDA_R_32F},
                                       {CUDA_R_16F, CUDA_R_16F}, {CUDA_R_16F, CUDA_R_32F}};
    const double ab[][2] = {{1.0, 0.0}, {0.75, -1.5}};
    int runs = 0;
    for (int t = 0; t < 4; t++)
        for (size_t s = 0; s < 3; s++)
            for (int pad = 0; pad <= 3; pad += 3)
                for (size_t ty = 0; ty < 5; ty++)
                    for (size_t a = 0; a < 2; a++) {
                        mm_case c = base_case(sizes[s][0], sizes[s][1], sizes[s][2]);
                        c.ta = t & 1, c.tb = t >> 1, c.pad = pad;
                        c.ab = types[ty][0], c.cd = types[ty][1];
                        c.alpha = ab[a][0], c.beta = ab[a][1];
                        runs += run_case(&c);
                    }
    assert_int_equal(runs, 240);
}

static void test_row_major(void **state) {
    (void)state;
    for (int t = 0; t < 4; t++)
        for (int bf = 0; bf < 2; bf++) {
            mm_case c = base_case(9, 6, 11);
            c.ta = t & 1, c.tb = t >> 1, c.pad = 2, c.row_major = 1, c.beta = 0.5;
            c.ab = c.cd = bf ? CUDA_R_16BF : CUDA_R_32F;
            c.gpu_may_refuse = 1;
            run_case(&c);
        }
}

static void test_batched(void **state) {
    (void)state;
    const uint32_t epis[] = {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_GELU_AUX_BIAS};
    for (size_t ei = 0; ei < 3; ei++)
        for (int bf = 0; bf < 2; bf++) {
            mm_case c = base_case(6, 7, 9);
            c.ta = 1, c.batch = 3, c.stride_pad = 5, c.pad = 1, c.alpha = 1.25, c.beta = 0.5;
            c.ab = c.cd = bf ? CUDA_R_16BF : CUDA_R_32F;
            c.epilogue = epis[ei];
            c.gpu_may_refuse = ei > 0;
            run_case(&c);
        }
}

static void test_epilogues(void **state) {
    (void)state;
    const struct {
        uint32_t e;
        int refuse;
    } epis[] = {
        {CUBLASLT_EPILOGUE_RELU, 1},      {CUBLASLT_EPILOGUE_BIAS, 0},          {CUBLASLT_EPILOGUE_RELU_BIAS, 1},
        {CUBLASLT_EPILOGUE_GELU, 1},      {CUBLASLT_EPILOGUE_GELU_BIAS, 0},     {CUBLASLT_EPILOGUE_GELU_AUX, 1},
        {CUBLASLT_EPILOGUE_GELU_AUX_BIAS, 0}, {CUBLASLT_EPILOGUE_DGELU, 0},     {CUBLASLT_EPILOGUE_DGELU_BGRAD, 1},
        {CUBLASLT_EPILOGUE_BGRADA, 1},    {CUBLASLT_EPILOGUE_BGRADB, 0},
    };
    /* bf: 0 fp32, 1 bf16 in and out, 2 bf16 in, fp32 out (cuda-bf16's products, whose bias is fp32) */
    for (size_t ei = 0; ei < sizeof epis / sizeof *epis; ei++)
        for (int bf = 0; bf < 3; bf++)
            for (int t = 0; t < 2; t++) {
                mm_case c = base_case(13, 10, 24);
                /* nn.Linear forward (W^T x) and the weight gradient (x dout^T) shapes */
                c.ta = t == 0, c.tb = t == 1, c.pad = t;
                c.ab = bf ? CUDA_R_16BF : CUDA_R_32F;
                c.cd = bf == 1 ? CUDA_R_16BF : CUDA_R_32F;
                c.epilogue = epis[ei].e;
                c.beta = epis[ei].e == CUBLASLT_EPILOGUE_BIAS ? 0.5 : 0.0;
                c.gpu_may_refuse = epis[ei].refuse || t == 1;
                run_case(&c);
            }
}

static void test_special_c(void **state) {
    (void)state;
    mm_case c = base_case(12, 9, 14);
    c.c_nan = 1; /* beta == 0: C is never read */
    run_case(&c);
    c.ab = c.cd = CUDA_R_16BF;
    run_case(&c);
    c = base_case(12, 9, 14);
    c.in_place = 1, c.beta = 0.5, c.alpha = -2.0, c.ta = 1;
    run_case(&c);
    c = base_case(12, 9, 14);
    c.c_broadcast = 1, c.beta = 1.0, c.gpu_may_refuse = 1;
    run_case(&c);
}

static void test_fast_compute(void **state) {
    (void)state;
    mm_case c = base_case(33, 17, 65);
    c.compute = CUBLAS_COMPUTE_32F_FAST_TF32;
    c.ta = 1;
    run_case(&c);
    c.compute = CUBLAS_COMPUTE_32F_FAST_16BF;
    c.gpu_may_refuse = 1;
    run_case(&c);
}

/* ------------------------------------------------------------ argument errors */
/* the shim answers exactly `want`; the real library must refuse somehow */
static void expect_refused(cublasStatus_t st, cublasStatus_t want, const char *what) {
    if (ON_SHIM ? st != want : st == CUBLAS_STATUS_SUCCESS)
        fail_msg("%s: got %s, expected %s", what, cublasLtGetStatusName(st), cublasLtGetStatusName(want));
}

typedef struct {
    void *A, *B, *D, *bias, *aux;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t LA, LB, LD;
} small_problem;

static void small_setup(small_problem *p) { /* D (5x4) = A (5x3) B (3x4), fp32, column-major */
    CK(cudaMalloc(&p->A, 256 * 4));
    CK(cudaMalloc(&p->B, 256 * 4));
    CK(cudaMalloc(&p->D, 256 * 4));
    CK(cudaMalloc(&p->bias, 256 * 4));
    CK(cudaMalloc(&p->aux, 256 * 4));
    CK(cudaMemset(p->A, 0, 256 * 4));
    CK(cudaMemset(p->B, 0, 256 * 4));
    LT(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT(cublasLtMatrixLayoutCreate(&p->LA, CUDA_R_32F, 5, 3, 5));
    LT(cublasLtMatrixLayoutCreate(&p->LB, CUDA_R_32F, 3, 4, 3));
    LT(cublasLtMatrixLayoutCreate(&p->LD, CUDA_R_32F, 5, 4, 5));
}
#ifndef LF_CUDA_SHIM /* the shim's part of test_argument_errors ends in a cudaDeviceReset instead */
static void small_teardown(small_problem *p) {
    cublasLtMatrixLayoutDestroy(p->LA);
    cublasLtMatrixLayoutDestroy(p->LB);
    cublasLtMatrixLayoutDestroy(p->LD);
    cublasLtMatmulDescDestroy(p->desc);
    CK(cudaFree(p->A));
    CK(cudaFree(p->B));
    CK(cudaFree(p->D));
    CK(cudaFree(p->bias));
    CK(cudaFree(p->aux));
}
#endif
static cublasStatus_t small_run(small_problem *p, cublasLtHandle_t h) {
    float alpha = 1, beta = 0;
    return cublasLtMatmul(h, p->desc, &alpha, p->A, p->LA, p->B, p->LB, &beta, p->D, p->LD, p->D, p->LD, NULL,
                          g_workspace, kWorkspace, 0);
}

static void test_argument_errors(void **state) {
    (void)state;
    small_problem p;
    small_setup(&p);
    LT(small_run(&p, g_lt));
    expect_refused(small_run(&p, NULL), CUBLAS_STATUS_NOT_INITIALIZED, "NULL handle");

    /* ld below the rows of a column-major matrix */
    int64_t ld = 4;
    LT(cublasLtMatrixLayoutSetAttribute(p.LA, CUBLASLT_MATRIX_LAYOUT_LD, &ld, sizeof ld));
    expect_refused(small_run(&p, g_lt), CUBLAS_STATUS_INVALID_VALUE, "lda 4 < rows 5");
    if (ON_SHIM) assert_non_null(strstr(cublasLtGetStatusString(CUBLAS_STATUS_INVALID_VALUE), "ld 4 is below its rows (5)"));
    ld = 5;
    LT(cublasLtMatrixLayoutSetAttribute(p.LA, CUBLASLT_MATRIX_LAYOUT_LD, &ld, sizeof ld));
    LT(small_run(&p, g_lt));

    /* shapes that do not chain: op(A) is 5x3 but B has 4 rows */
    uint64_t rows = 4;
    LT(cublasLtMatrixLayoutSetAttribute(p.LB, CUBLASLT_MATRIX_LAYOUT_ROWS, &rows, sizeof rows));
    expect_refused(small_run(&p, g_lt), CUBLAS_STATUS_INVALID_VALUE, "k mismatch");
    rows = 3;
    LT(cublasLtMatrixLayoutSetAttribute(p.LB, CUBLASLT_MATRIX_LAYOUT_ROWS, &rows, sizeof rows));
    int32_t t = CUBLAS_OP_T; /* op(A) would be 3x5 */
    LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t));
    expect_refused(small_run(&p, g_lt), CUBLAS_STATUS_INVALID_VALUE, "transposed A does not chain");
    t = CUBLAS_OP_N;
    LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t));

    /* attribute sizes are checked */
    int64_t wide = CUBLAS_OP_T;
    assert_int_equal(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &wide, sizeof wide),
                     CUBLAS_STATUS_INVALID_VALUE);
    uint32_t narrow = 5;
    assert_int_equal(cublasLtMatrixLayoutSetAttribute(p.LA, CUBLASLT_MATRIX_LAYOUT_ROWS, &narrow, sizeof narrow),
                     CUBLAS_STATUS_INVALID_VALUE);
    size_t need = 0;
    LT(cublasLtMatmulDescGetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, NULL, 0, &need));
    assert_int_equal(need, sizeof(uint32_t));
    uint32_t epi = 0;
    LT(cublasLtMatmulDescGetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi, &need));
    assert_int_equal(epi, CUBLASLT_EPILOGUE_DEFAULT);
    LT(small_run(&p, g_lt));

    /* A/B/D types: cuBLASLt's CUBLAS_COMPUTE_32F table has bf16 A and B with
     * fp32 D (cuda-bf16's products) but not bf16 A with fp32 B, bf16 A and
     * B with fp16 D, or fp32 A and B with bf16 D */
    uint32_t ty = CUDA_R_16BF;
    LT(cublasLtMatrixLayoutSetAttribute(p.LA, CUBLASLT_MATRIX_LAYOUT_TYPE, &ty, sizeof ty));
    expect_refused(small_run(&p, g_lt), CUBLAS_STATUS_NOT_SUPPORTED, "bf16 A with fp32 B");
    LT(cublasLtMatrixLayoutSetAttribute(p.LB, CUBLASLT_MATRIX_LAYOUT_TYPE, &ty, sizeof ty));
    LT(small_run(&p, g_lt));
    ty = CUDA_R_16F;
    LT(cublasLtMatrixLayoutSetAttribute(p.LD, CUBLASLT_MATRIX_LAYOUT_TYPE, &ty, sizeof ty));
    expect_refused(small_run(&p, g_lt), CUBLAS_STATUS_NOT_SUPPORTED, "bf16 A and B with fp16 D");
    ty = CUDA_R_32F;
    LT(cublasLtMatrixLayoutSetAttribute(p.LA, CUBLASLT_MATRIX_LAYOUT_TYPE, &ty, sizeof ty));
    LT(cublasLtMatrixLayoutSetAttribute(p.LB, CUBLASLT_MATRIX_LAYOUT_TYPE, &ty, sizeof ty));
    ty = CUDA_R_16BF;
    LT(cublasLtMatrixLayoutSetAttribute(p.LD, CUBLASLT_MATRIX_LAYOUT_TYPE, &ty, sizeof ty));
    expect_refused(small_run(&p, g_lt), CUBLAS_STATUS_NOT_SUPPORTED, "fp32 A and B with bf16 D");
    ty = CUDA_R_32F;
    LT(cublasLtMatrixLayoutSetAttribute(p.LD, CUBLASLT_MATRIX_LAYOUT_TYPE, &ty, sizeof ty));
    LT(small_run(&p, g_lt));

    /* epilogues need their pointers; aux ld a multiple of 8, at least m */
    epi = CUBLASLT_EPILOGUE_BIAS;
    LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    expect_refused(small_run(&p, g_lt), CUBLAS_STATUS_INVALID_VALUE, "BIAS without a bias pointer");
    LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias, sizeof p.bias));
    LT(small_run(&p, g_lt));
    epi = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    expect_refused(small_run(&p, g_lt), CUBLAS_STATUS_INVALID_VALUE, "GELU_AUX_BIAS without an aux pointer");
    LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p.aux, sizeof p.aux));
    int64_t aux_ld = 6;
    LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld));
    expect_refused(small_run(&p, g_lt), CUBLAS_STATUS_INVALID_VALUE, "aux ld 6, not a multiple of 8");
    aux_ld = 8;
    LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld));
    LT(small_run(&p, g_lt));
    epi = CUBLASLT_EPILOGUE_DEFAULT;
    LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));

#ifdef LF_CUDA_SHIM
    /* what the shim refuses where cuBLASLt's documentation is silent or it has no implementation */
    uint64_t zero = 0;
    LT(cublasLtMatrixLayoutSetAttribute(p.LD, CUBLASLT_MATRIX_LAYOUT_COLS, &zero, sizeof zero));
    assert_int_equal(small_run(&p, g_lt), CUBLAS_STATUS_INVALID_VALUE);
    uint64_t four = 4;
    LT(cublasLtMatrixLayoutSetAttribute(p.LD, CUBLASLT_MATRIX_LAYOUT_COLS, &four, sizeof four));
    int32_t two = 2;
    LT(cublasLtMatrixLayoutSetAttribute(p.LA, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &two, sizeof two));
    assert_int_equal(small_run(&p, g_lt), CUBLAS_STATUS_INVALID_VALUE);
    assert_non_null(strstr(lf_shim_cublaslt_last_detail(), "batch counts differ"));
    int32_t one = 1;
    LT(cublasLtMatrixLayoutSetAttribute(p.LA, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &one, sizeof one));
    int32_t order = CUBLASLT_ORDER_COL32;
    LT(cublasLtMatrixLayoutSetAttribute(p.LA, CUBLASLT_MATRIX_LAYOUT_ORDER, &order, sizeof order));
    assert_int_equal(small_run(&p, g_lt), CUBLAS_STATUS_NOT_SUPPORTED);
    order = CUBLASLT_ORDER_COL;
    LT(cublasLtMatrixLayoutSetAttribute(p.LA, CUBLASLT_MATRIX_LAYOUT_ORDER, &order, sizeof order));
    epi = CUBLASLT_EPILOGUE_RELU_AUX;
    LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    assert_int_equal(small_run(&p, g_lt), CUBLAS_STATUS_NOT_SUPPORTED);
    epi = 12345;
    LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    assert_int_equal(small_run(&p, g_lt), CUBLAS_STATUS_INVALID_VALUE);
    epi = CUBLASLT_EPILOGUE_BIAS;
    LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    int32_t btype = CUDA_R_16BF;
    LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &btype, sizeof btype));
    assert_int_equal(small_run(&p, g_lt), CUBLAS_STATUS_NOT_SUPPORTED);
    btype = -1;
    LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &btype, sizeof btype));
    epi = CUBLASLT_EPILOGUE_DEFAULT;
    LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    cublasLtMatmulDesc_t d16;
    LT(cublasLtMatmulDescCreate(&d16, CUBLAS_COMPUTE_16F, CUDA_R_16F));
    float alpha = 1, beta = 0;
    assert_int_equal(cublasLtMatmul(g_lt, d16, &alpha, p.A, p.LA, p.B, p.LB, &beta, p.D, p.LD, p.D, p.LD, NULL, NULL,
                                    0, 0),
                     CUBLAS_STATUS_NOT_SUPPORTED);
    cublasLtMatmulDescDestroy(d16);
    cublasLtMatmulAlgo_t junk;
    memset(&junk, 0, sizeof junk);
    assert_int_equal(cublasLtMatmul(g_lt, p.desc, &alpha, p.A, p.LA, p.B, p.LB, &beta, p.D, p.LD, p.D, p.LD, &junk,
                                    NULL, 0, 0),
                     CUBLAS_STATUS_INVALID_VALUE);
    /* C may be NULL when beta is 0 */
    assert_int_equal(cublasLtMatmul(g_lt, p.desc, &alpha, p.A, p.LA, p.B, p.LB, &beta, NULL, p.LD, p.D, p.LD, NULL,
                                    NULL, 0, 0),
                     CUBLAS_STATUS_SUCCESS);
    /* a matrix outside device memory faults the context, as a GPU kernel would */
    float host[64] = {0};
    assert_int_equal(cublasLtMatmul(g_lt, p.desc, &alpha, host, p.LA, p.B, p.LB, &beta, p.D, p.LD, p.D, p.LD, NULL,
                                    NULL, 0, 0),
                     CUBLAS_STATUS_EXECUTION_FAILED);
    assert_non_null(strstr(lf_shim_cublaslt_last_detail(), "A ["));
    assert_int_equal(cudaGetLastError(), cudaErrorIllegalAddress);
    assert_int_equal(cudaDeviceReset(), cudaSuccess);
    CK(cudaMalloc(&g_workspace, kWorkspace));
    /* the reset freed the small problem's buffers: only the descriptors remain */
    cublasLtMatrixLayoutDestroy(p.LA);
    cublasLtMatrixLayoutDestroy(p.LB);
    cublasLtMatrixLayoutDestroy(p.LD);
    cublasLtMatmulDescDestroy(p.desc);
    cublasLtHandle_t dead;
    LT(cublasLtCreate(&dead));
    LT(cublasLtDestroy(dead));
    assert_int_equal(cublasLtDestroy(dead), CUBLAS_STATUS_NOT_INITIALIZED);
#else
    small_teardown(&p);
#endif
}

int main(void) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        printf("SKIPPED: no CUDA device (cudaGetDeviceCount: %s, %d devices)\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "no error", count);
        return 0;
    }
    if (cublasLtCreate(&g_lt) != CUBLAS_STATUS_SUCCESS || cudaMalloc(&g_workspace, kWorkspace) != cudaSuccess) {
        printf("cannot create a cuBLASLt handle and its workspace\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layouts_and_types), cmocka_unit_test(test_row_major),
        cmocka_unit_test(test_batched),           cmocka_unit_test(test_epilogues),
        cmocka_unit_test(test_special_c),         cmocka_unit_test(test_fast_compute),
        cmocka_unit_test(test_argument_errors),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    cudaFree(g_workspace);
    cublasLtDestroy(g_lt);
    return rc;
}
