/*
 * The CUDA backend's dense op family (host glue, see cuda_internal.h): the
 * matmul pair through cuBLASLt, scale, add_inplace and convert. The kernels
 * (the bias gradient, the bias add, scale, add) are in cuda_dense.cu.
 *
 * Row-major tensors on column-major cuBLASLt. A row-major (R, K) matrix with
 * row stride K is, read column-major, the (K, R) matrix with ld K: its
 * transpose, for free. So every product is computed transposed,
 * Y = X W  <=>  Y^T = W^T X^T, with each row-major operand handed over as
 * the column-major transpose it already is, and opA/opB chosen to undo or
 * keep that transpose. With m, n, k cuBLASLt's sizes (op(A) m x k, op(B)
 * k x n, D m x n, all column-major):
 *
 *  forward, LF_W_IN_OUT, W (C,OC):  out^T (OC,N) = W^T x^T
 *      A = W stored (OC,C) ld OC, op N;  B = x stored (C,N) ld C, op N;
 *      m = OC, n = N, k = C;  D = out (OC,N) ld OC; bias: EPILOGUE_BIAS
 *      (one value per row of D, i.e. per output channel) when the bias is
 *      16-byte aligned, else our bias-add kernel after the product.
 *  forward, LF_W_OUT_IN, W (OC,C):  out^T = W x^T
 *      A = W stored (C,OC) ld C, op T;   B = x (C,N) ld C, op N.
 *  backward dinp (N,C) = dout W^T (IN_OUT) / dout W (OUT_IN):
 *      dinp^T (C,N) = W dout^T  (IN_OUT: A = W stored (OC,C) ld OC, op T)
 *                   = W^T dout^T (OUT_IN: A = W stored (C,OC) ld C, op N);
 *      B = dout stored (OC,N) ld OC, op N;  m = C, n = N, k = OC; beta 0
 *      (overwritten; cuBLASLt does not read C then, so a NaN-filled dinp
 *      is fine).
 *  backward dW, IN_OUT (C,OC) += x^T dout:  dW^T (OC,C) += dout^T x
 *      A = dout (OC,N) ld OC, op N;  B = x stored (C,N) ld C, op T;
 *      m = OC, n = C, k = N;  C = D = dW (OC,C) ld OC, beta 1.
 *  backward dW, OUT_IN (OC,C) += dout^T x:  dW^T (C,OC) += x^T dout
 *      A = x (C,N) ld C, op N;  B = dout stored (OC,N) ld OC, op T;
 *      m = C, n = OC, k = N;  C = D = dW (C,OC) ld C, beta 1.
 *  dbias += column sums of dout: our kernel (cuda_dense.cu says why not
 *      BGRADB: it overwrites and reduces in an undocumented order).
 *
 * Precision: CUBLAS_COMPUTE_32F with fp32 scale, A/B/C/D all CUDA_R_32F: no
 * TF32 (the default). inp_dt other than LF_DT_F32 records
 * LF_ERR_UNSUPPORTED on "cuda" (act_dtypes is F32 only).
 *
 * "cuda-bf16" (lf__cuda_install_dense_bf16) runs the same products with A
 * and B in CUDA_R_16BF, still CUBLAS_COMPUTE_32F with fp32 scale, C, D and
 * bias (cuBLASLt's bf16-in, fp32-out row of its type table): the weight
 * from its cached bf16 copy (cuda_bf16.c), inp as stored when it is bf16,
 * else rounded into operand scratch, and backward's dout rounded into
 * scratch too; dbias is still summed from the fp32 dout by our kernel.
 * These are cpu-bf16's operands (cpu_bf16.c: both operands of every
 * product rounded to nearest even), so the two backends differ only in
 * the order of the fp32 sums: bf16 x bf16 products are exact in fp32.
 *
 * Determinism and batch invariance: cuBLAS documents bit-wise reproducible
 * results run to run for one toolkit version on GPUs of one architecture
 * and SM count, so two runs of a step give the same bits. The algorithm
 * (tile shape, split-K) the heuristic picks may change with N, so a row's
 * bits may depend on how many rows are computed with it: the "cuda" table
 * leaves batch_invariant 0.
 *
 * Descriptors are created and destroyed per call (simple and correct
 * first; a cache keyed by the shape is the obvious later optimisation, the
 * heuristic query being the costly part). The workspace is the context's.
 * The preference tells the heuristic each matrix's real alignment (tensors
 * sit at any float offset of the flat buffers; cuBLASLt otherwise assumes
 * 256 bytes and may pick a kernel whose wide loads fault).
 *
 * Errors: every cuBLASLt status, a heuristic that returns no algorithm,
 * and every launch error become the instance's sticky status with the op,
 * the call and the product's shape (lf__cuda_check_lt / lf__cuda_check).
 * Ops never allocate and never synchronise.
 *
 * Reference: cuBLAS documentation, "cuBLASLt API" (cublasLtMatmul, the
 * matrix layout and epilogue attributes, "Results reproducibility").
 */
#include <stdint.h>
#include <stdio.h>
#include "cuda_internal.h"
#include "cuda_dense.h"

/* ---------------------------------------------------------------- argument checks */

/* 1 when dt is fp32 storage; else records LF_ERR_UNSUPPORTED (as the CPU
 * backend words it). */
static int dt_ok(lf_backend *be, const char *op, lf_dtype dt) {
    if (be->ops->act_dtypes & LF_DT_BIT(dt)) return 1;
    lf__backend_fail(be, LF_ERR_UNSUPPORTED, "%s: activation storage %s is not offered by backend '%s'", op,
                     dt == LF_DT_BF16 ? "bf16" : "(unknown dtype)", be->ops->name);
    return 0;
}

/* 1 when the shape and layout are usable; else records LF_ERR_RANGE /
 * LF_ERR_INVALID_ARG. */
static int shape_ok(lf_backend *be, const char *op, int N, int C, int OC, lf_weight_layout layout) {
    if (layout != LF_W_IN_OUT && layout != LF_W_OUT_IN) {
        lf__backend_fail(be, LF_ERR_INVALID_ARG, "%s: weight layout %d is neither LF_W_IN_OUT nor LF_W_OUT_IN", op,
                         (int)layout);
        return 0;
    }
    if (N < 0 || C < 0 || OC < 0) {
        lf__backend_fail(be, LF_ERR_RANGE, "%s: N=%d C=%d OC=%d: a negative dimension", op, N, C, OC);
        return 0;
    }
    return 1;
}

/* The largest power of two dividing p's address, at most 256 (what
 * cuBLASLt's heuristic assumes of every matrix unless told less). */
static uint32_t alignment_of(const void *p) {
    const uintptr_t a = (uintptr_t)p;
    uint32_t al = 256;
    while (al > 1 && (a & (al - 1))) al >>= 1;
    return al;
}

/* 1 when every given pointer is aligned to a float (a caller's bug
 * otherwise: a GPU faults on a misaligned float, cuBLASLt refuses it);
 * else records LF_ERR_INVALID_ARG naming the tensor. */
static int floats_aligned(lf_backend *be, const char *op, int n, const char *const *names, const void *const *ptrs) {
    for (int i = 0; i < n; i++)
        if (ptrs[i] && alignment_of(ptrs[i]) < sizeof(float)) {
            lf__backend_fail(be, LF_ERR_INVALID_ARG, "%s: %s %p is not aligned to a float (4 bytes)", op, names[i],
                             ptrs[i]);
            return 0;
        }
    return 1;
}

/* cuBLASLt's bias epilogue reads the vector with wide loads and its
 * documentation states no alignment for it; a bias not 16-byte aligned
 * (a tensor at an odd offset of the flat parameter buffer) is added by our
 * kernel after the product instead: one more pass over out, the same
 * arithmetic (the fp32 product, then + bias, rounded once). */
#define LF_CUDA_BIAS_EPILOGUE_ALIGN 16

/* ---------------------------------------------------------------- one cuBLASLt product */

typedef struct lt_product {
    cublasOperation_t ta, tb;
    int m, n, k;
    cudaDataType_t ab; /* A's and B's type: CUDA_R_32F, or CUDA_R_16BF (cuda-bf16); C, D, bias are fp32 */
    const void *A;
    int lda;
    const void *B;
    int ldb;
    float beta; /* 0: D overwritten (C not read); 1: D += (C = D) */
    float *D;
    int ldd;
    const float *bias; /* EPILOGUE_BIAS (m values) or NULL */
} lt_product;

/* D = op(A) op(B) (+ beta D) (+ bias) on the instance's stream. `op` is the
 * table slot, `what` the product in the op's terms (named in messages with
 * the shape). Returns 0 or 1 on failure (recorded). */
static int lt_matmul(lf_backend *be, const char *op, const char *what, const lt_product *p) {
    lf_cuda_ctx *c = lf__cuda_ctx(be);
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    char shape[200], call[400];
    int failed = 1;
    snprintf(shape, sizeof shape, "%s: op(A) %c, op(B) %c, m=%d n=%d k=%d, lda=%d ldb=%d ldd=%d%s%s", what,
             p->ta == CUBLAS_OP_N ? 'N' : 'T', p->tb == CUBLAS_OP_N ? 'N' : 'T', p->m, p->n, p->k, p->lda, p->ldb,
             p->ldd, p->ab == CUDA_R_16BF ? ", bf16 A and B" : "", p->bias ? ", bias epilogue" : "");
#define LT_CALL(name, expr) \
    do { \
        cublasStatus_t st_ = (expr); \
        if (st_ != CUBLAS_STATUS_SUCCESS) { \
            snprintf(call, sizeof call, "%s (%s): %s", name, shape, cublasLtGetStatusString(st_)); \
            lf__cuda_check_lt(be, st_, op, call); \
            goto done; \
        } \
    } while (0)

    LT_CALL("cublasLtMatmulDescCreate", cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const int32_t ta = (int32_t)p->ta, tb = (int32_t)p->tb;
    LT_CALL("cublasLtMatmulDescSetAttribute(TRANSA)",
            cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT_CALL("cublasLtMatmulDescSetAttribute(TRANSB)",
            cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (p->bias) {
        const uint32_t epi = CUBLASLT_EPILOGUE_BIAS;
        const void *bias = p->bias;
        LT_CALL("cublasLtMatmulDescSetAttribute(EPILOGUE)",
                cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
        LT_CALL("cublasLtMatmulDescSetAttribute(BIAS_POINTER)",
                cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    }
    /* stored shapes: op N keeps (rows, cols) = (m, k) / (k, n); op T stores the transpose */
    const int a_rows = p->ta == CUBLAS_OP_N ? p->m : p->k, a_cols = p->ta == CUBLAS_OP_N ? p->k : p->m;
    const int b_rows = p->tb == CUBLAS_OP_N ? p->k : p->n, b_cols = p->tb == CUBLAS_OP_N ? p->n : p->k;
    LT_CALL("cublasLtMatrixLayoutCreate(A)",
            cublasLtMatrixLayoutCreate(&la, p->ab, (uint64_t)a_rows, (uint64_t)a_cols, p->lda));
    LT_CALL("cublasLtMatrixLayoutCreate(B)",
            cublasLtMatrixLayoutCreate(&lb, p->ab, (uint64_t)b_rows, (uint64_t)b_cols, p->ldb));
    LT_CALL("cublasLtMatrixLayoutCreate(D)",
            cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, (uint64_t)p->m, (uint64_t)p->n, p->ldd));
    LT_CALL("cublasLtMatmulPreferenceCreate", cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = c->workspace_bytes;
    LT_CALL("cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)",
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    /* the heuristic assumes 256-byte aligned matrices unless told otherwise;
     * tensors inside the plan's and the parameters' flat buffers may sit at
     * any float offset, so say what each pointer really is (C is D) */
    const uint32_t al_a = alignment_of(p->A), al_b = alignment_of(p->B), al_d = alignment_of(p->D);
    LT_CALL("cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_A_BYTES)",
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a));
    LT_CALL("cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_B_BYTES)",
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b));
    LT_CALL("cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_C_BYTES)",
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof al_d));
    LT_CALL("cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_D_BYTES)",
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d));
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    LT_CALL("cublasLtMatmulAlgoGetHeuristic",
            cublasLtMatmulAlgoGetHeuristic(c->lt, desc, la, lb, ld, ld, pref, 1, &heur, &found));
    if (found < 1) {
        lf__backend_fail(be, LF_ERR_UNSUPPORTED, "%s: cublasLtMatmulAlgoGetHeuristic (%s): no algorithm", op, shape);
        goto done;
    }
    const float alpha = 1.0f, beta = p->beta;
    /* C = D with D's layout: read only when beta != 0 (the += of dW) */
    LT_CALL("cublasLtMatmul", cublasLtMatmul(c->lt, desc, &alpha, p->A, la, p->B, lb, &beta, p->D, ld, p->D, ld,
                                             &heur.algo, c->workspace, c->workspace_bytes, lf__cuda_stream(be)));
    failed = 0;
done:
#undef LT_CALL
    if (pref) (void)cublasLtMatmulPreferenceDestroy(pref);
    if (ld) (void)cublasLtMatrixLayoutDestroy(ld);
    if (lb) (void)cublasLtMatrixLayoutDestroy(lb);
    if (la) (void)cublasLtMatrixLayoutDestroy(la);
    if (desc) (void)cublasLtMatmulDescDestroy(desc);
    return failed;
}

/* ---------------------------------------------------------------- the matmul pair */

/* The operands of one call, resolved: A/B of the products in `ab` (fp32, or
 * bf16 copies for cuda-bf16); w the weight, x the input, d the output
 * gradient (backward), each in that type. */
typedef struct mm_operands {
    cudaDataType_t ab;
    const void *w, *x, *d;
} mm_operands;

/* Checks shared by the forward of both tables; 0 when the call is to be
 * skipped (nothing to do, or a failure recorded). */
static int forward_ok(lf_backend *be, const char *op, float *out, const void *inp, lf_dtype inp_dt, const float *weight,
                      const float *bias, int N, int C, int OC, lf_weight_layout layout) {
    if (!dt_ok(be, op, inp_dt) || !shape_ok(be, op, N, C, OC, layout)) return 0;
    if (N == 0 || OC == 0) return 0; /* nothing to write */
    if (C == 0) {
        /* out = bias (or 0): cuBLASLt refuses k = 0; no caller has it */
        lf__backend_fail(be, LF_ERR_RANGE, "%s: N=%d C=0 OC=%d: an empty inner dimension", op, N, OC);
        return 0;
    }
    if (!out || !inp || !weight) {
        lf__backend_fail(be, LF_ERR_INVALID_ARG, "%s: out, inp and weight must be given (N=%d C=%d OC=%d)", op, N, C,
                         OC);
        return 0;
    }
    static const char *const names[] = {"out", "weight", "bias", "inp"};
    const void *const ptrs[] = {out, weight, bias, inp};
    /* a bf16 inp needs only its 2-byte alignment */
    if (!floats_aligned(be, op, inp_dt == LF_DT_F32 ? 4 : 3, names, ptrs)) return 0;
    if (inp_dt == LF_DT_BF16 && ((uintptr_t)inp & 1u)) {
        lf__backend_fail(be, LF_ERR_INVALID_ARG, "%s: bf16 inp %p is not aligned to 2 bytes", op, inp);
        return 0;
    }
    return 1;
}

/* out = x W (+ bias) with the resolved operands. */
static void forward_product(lf_backend *be, const char *op, float *out, const mm_operands *o, const float *bias, int N,
                            int C, int OC, lf_weight_layout layout) {
    const int epilogue = bias && alignment_of(bias) >= LF_CUDA_BIAS_EPILOGUE_ALIGN;
    char what[96];
    snprintf(what, sizeof what, "out = inp @ %s, N=%d C=%d OC=%d", layout == LF_W_IN_OUT ? "W" : "W^T", N, C, OC);
    lt_product p = {
        .ta = layout == LF_W_IN_OUT ? CUBLAS_OP_N : CUBLAS_OP_T,
        .tb = CUBLAS_OP_N,
        .m = OC,
        .n = N,
        .k = C,
        .ab = o->ab,
        .A = o->w,
        .lda = layout == LF_W_IN_OUT ? OC : C,
        .B = o->x,
        .ldb = C,
        .beta = 0.0f,
        .D = out,
        .ldd = OC,
        .bias = epilogue ? bias : NULL,
    };
    if (lt_matmul(be, op, what, &p)) return;
    if (bias && !epilogue)
        lf__cuda_check(be, lf__cuk_bias_add(out, bias, N, OC, lf__cuda_stream(be)), op, "dense_bias_add");
}

static void cuda_matmul_forward(lf_backend *be, float *out, // (N,OC)
                                const void *inp,            // (N,C) in inp_dt
                                lf_dtype inp_dt,
                                const float *weight, // (C,OC) or (OC,C)
                                const float *bias,   // (OC) or NULL
                                int N, int C, int OC, lf_weight_layout layout) {
    static const char op[] = "matmul_forward";
    if (!forward_ok(be, op, out, inp, inp_dt, weight, bias, N, C, OC, layout)) return;
    const mm_operands o = {.ab = CUDA_R_32F, .w = weight, .x = inp, .d = NULL};
    forward_product(be, op, out, &o, bias, N, C, OC, layout);
}

/* Checks shared by the backward of both tables, as forward_ok. */
static int backward_ok(lf_backend *be, const char *op, float *dinp, float *dweight, float *dbias, const float *dout,
                       const void *inp, lf_dtype inp_dt, const float *weight, int N, int C, int OC,
                       lf_weight_layout layout) {
    if (!dt_ok(be, op, inp_dt) || !shape_ok(be, op, N, C, OC, layout)) return 0;
    if (N == 0 || C == 0 || OC == 0) return 0; /* every product and sum is empty (as the CPU backend) */
    if (!dweight || !dout || !inp || (dinp && !weight)) {
        lf__backend_fail(be, LF_ERR_INVALID_ARG,
                         "%s: dweight, dout, inp (and weight, with dinp) must be given (N=%d C=%d OC=%d)", op, N, C,
                         OC);
        return 0;
    }
    static const char *const names[] = {"dinp", "dweight", "dbias", "dout", "weight", "inp"};
    const void *const ptrs[] = {dinp, dweight, dbias, dout, weight, inp};
    if (!floats_aligned(be, op, inp_dt == LF_DT_F32 ? 6 : 5, names, ptrs)) return 0;
    if (inp_dt == LF_DT_BF16 && ((uintptr_t)inp & 1u)) {
        lf__backend_fail(be, LF_ERR_INVALID_ARG, "%s: bf16 inp %p is not aligned to 2 bytes", op, inp);
        return 0;
    }
    return 1;
}

/* dinp = dout W^T (or dout W), dW += ..., dbias += column sums of the fp32
 * dout, with the resolved operands (o->w unused when dinp is NULL). */
static void backward_products(lf_backend *be, const char *op, float *dinp, float *dweight, float *dbias,
                              const float *dout, const mm_operands *o, int N, int C, int OC, lf_weight_layout layout) {
    const int in_out = layout == LF_W_IN_OUT;
    char what[112];
    if (dinp) {
        snprintf(what, sizeof what, "dinp = dout @ %s, N=%d C=%d OC=%d", in_out ? "W^T" : "W", N, C, OC);
        lt_product p = {
            .ta = in_out ? CUBLAS_OP_T : CUBLAS_OP_N,
            .tb = CUBLAS_OP_N,
            .m = C,
            .n = N,
            .k = OC,
            .ab = o->ab,
            .A = o->w,
            .lda = in_out ? OC : C,
            .B = o->d,
            .ldb = OC,
            .beta = 0.0f,
            .D = dinp,
            .ldd = C,
            .bias = NULL,
        };
        if (lt_matmul(be, op, what, &p)) return;
    }
    lt_product q;
    if (in_out) {
        snprintf(what, sizeof what, "dW (C,OC) += inp^T @ dout, N=%d C=%d OC=%d", N, C, OC);
        q = (lt_product){
            .ta = CUBLAS_OP_N,
            .tb = CUBLAS_OP_T,
            .m = OC,
            .n = C,
            .k = N,
            .ab = o->ab,
            .A = o->d,
            .lda = OC,
            .B = o->x,
            .ldb = C,
            .beta = 1.0f,
            .D = dweight,
            .ldd = OC,
            .bias = NULL,
        };
    } else {
        snprintf(what, sizeof what, "dW (OC,C) += dout^T @ inp, N=%d C=%d OC=%d", N, C, OC);
        q = (lt_product){
            .ta = CUBLAS_OP_N,
            .tb = CUBLAS_OP_T,
            .m = C,
            .n = OC,
            .k = N,
            .ab = o->ab,
            .A = o->x,
            .lda = C,
            .B = o->d,
            .ldb = OC,
            .beta = 1.0f,
            .D = dweight,
            .ldd = C,
            .bias = NULL,
        };
    }
    if (lt_matmul(be, op, what, &q)) return;
    if (dbias)
        lf__cuda_check(be, lf__cuk_bias_backward(dbias, dout, N, OC, lf__cuda_stream(be)), op, "dense_bias_backward");
}

static void cuda_matmul_backward(lf_backend *be, float *dinp, // (N,C) = (overwritten) or NULL
                                 float *dweight,              // same shape as weight, +=
                                 float *dbias,                // (OC) += or NULL
                                 const float *dout,           // (N,OC)
                                 const void *inp,             // (N,C) in inp_dt
                                 lf_dtype inp_dt,
                                 const float *weight, // (C,OC) or (OC,C)
                                 int N, int C, int OC, lf_weight_layout layout) {
    static const char op[] = "matmul_backward";
    if (!backward_ok(be, op, dinp, dweight, dbias, dout, inp, inp_dt, weight, N, C, OC, layout)) return;
    const mm_operands o = {.ab = CUDA_R_32F, .w = weight, .x = inp, .d = dout};
    backward_products(be, op, dinp, dweight, dbias, dout, &o, N, C, OC, layout);
}

/* ---------------------------------------------------------------- cuda-bf16's matmul pair */

/* The input as bf16: as stored (LF_DT_BF16), else rounded into operand
 * scratch `slot` (cuda_bf16.c). NULL: failure recorded. */
static const uint16_t *bf16_input(lf_backend *be, const char *op, int slot, const void *x, lf_dtype dt, size_t n) {
    if (dt == LF_DT_BF16) return x;
    uint16_t *s = lf__cuda_bf16_scratch(be, op, slot, n);
    if (!s) return NULL;
    if (lf__cuda_check(be, lf__cuk_cast_bf16(s, x, n, lf__cuda_stream(be)), op, "dense_cast_bf16")) return NULL;
    return s;
}

static void cuda_bf16_matmul_forward(lf_backend *be, float *out, // (N,OC)
                                     const void *inp,            // (N,C) in inp_dt
                                     lf_dtype inp_dt,
                                     const float *weight, // (C,OC) or (OC,C)
                                     const float *bias,   // (OC) or NULL
                                     int N, int C, int OC, lf_weight_layout layout) {
    static const char op[] = "matmul_forward";
    if (!forward_ok(be, op, out, inp, inp_dt, weight, bias, N, C, OC, layout)) return;
    mm_operands o = {.ab = CUDA_R_16BF};
    if (!(o.w = lf__cuda_bf16_weight(be, op, weight, (size_t)C * OC))) return;
    if (!(o.x = bf16_input(be, op, 0, inp, inp_dt, (size_t)N * C))) return;
    forward_product(be, op, out, &o, bias, N, C, OC, layout);
}

static void cuda_bf16_matmul_backward(lf_backend *be, float *dinp, // (N,C) = (overwritten) or NULL
                                      float *dweight,              // same shape as weight, +=
                                      float *dbias,                // (OC) += or NULL
                                      const float *dout,           // (N,OC)
                                      const void *inp,             // (N,C) in inp_dt
                                      lf_dtype inp_dt,
                                      const float *weight, // (C,OC) or (OC,C)
                                      int N, int C, int OC, lf_weight_layout layout) {
    static const char op[] = "matmul_backward";
    if (!backward_ok(be, op, dinp, dweight, dbias, dout, inp, inp_dt, weight, N, C, OC, layout)) return;
    mm_operands o = {.ab = CUDA_R_16BF};
    if (dinp && !(o.w = lf__cuda_bf16_weight(be, op, weight, (size_t)C * OC))) return;
    if (!(o.x = bf16_input(be, op, 0, inp, inp_dt, (size_t)N * C))) return;
    if (!(o.d = bf16_input(be, op, 1, dout, LF_DT_F32, (size_t)N * OC))) return;
    backward_products(be, op, dinp, dweight, dbias, dout, &o, N, C, OC, layout);
}

/* ---------------------------------------------------------------- element-wise */

static void cuda_scale(lf_backend *be, float *x, size_t n, float s) {
    if (!n) return;
    lf__cuda_check(be, lf__cuk_scale(x, n, s, lf__cuda_stream(be)), "scale", "dense_scale");
}

static void cuda_add_inplace(lf_backend *be, float *y, const float *x, size_t n) {
    if (!n) return;
    lf__cuda_check(be, lf__cuk_add_inplace(y, x, n, lf__cuda_stream(be)), "add_inplace", "dense_add_inplace");
}

/* out = inp for fp32 storage (out and inp the same or disjoint, as the
 * contract's callers use it); for bf16 storage (cuda-bf16 only: act_dtypes)
 * the rounding, out and inp disjoint. */
static void cuda_convert(lf_backend *be, void *out, lf_dtype out_dt, const float *inp, size_t n) {
    if (!dt_ok(be, "convert", out_dt)) return;
    if (out_dt == LF_DT_BF16) {
        if (!n) return;
        if (out == (const void *)inp) {
            lf__backend_fail(be, LF_ERR_INVALID_ARG, "convert: bf16 out must not be inp (%p)", out);
            return;
        }
        lf__cuda_check(be, lf__cuk_cast_bf16(out, inp, n, lf__cuda_stream(be)), "convert", "dense_cast_bf16");
        return;
    }
    if (!n || out == (const void *)inp) return;
    lf__cuda_check(be, cudaMemcpyAsync(out, inp, n * sizeof(float), cudaMemcpyDeviceToDevice, lf__cuda_stream(be)),
                   "convert", "cudaMemcpyAsync");
}

/* Gradients on the wire in bf16 (communication_data_type): on cuda and
 * cuda-bf16 alike, whatever the activation storage. */
static void cuda_grad_to_bf16(lf_backend *be, uint16_t *out, const float *inp, size_t n) {
    lf__cuda_check(be, lf__cuk_cast_bf16(out, inp, n, lf__cuda_stream(be)), "grad_to_bf16", "dense_cast_bf16");
}
static void cuda_grad_from_bf16(lf_backend *be, float *out, const uint16_t *inp, size_t n) {
    lf__cuda_check(be, lf__cuk_widen_bf16(out, inp, n, lf__cuda_stream(be)), "grad_from_bf16", "dense_widen_bf16");
}

void lf__cuda_install_dense(lf_backend_ops *ops) {
    ops->matmul_forward = cuda_matmul_forward;
    ops->matmul_backward = cuda_matmul_backward;
    ops->scale = cuda_scale;
    ops->add_inplace = cuda_add_inplace;
    ops->convert = cuda_convert;
    ops->grad_to_bf16 = cuda_grad_to_bf16;
    ops->grad_from_bf16 = cuda_grad_from_bf16;
    /* replicas / run_replicas stay NULL: one replica on a device.
     * batch_invariant stays 0: cuBLASLt's algorithm may change with N. */
}

void lf__cuda_install_dense_bf16(lf_backend_ops *ops) {
    ops->matmul_forward = cuda_bf16_matmul_forward;
    ops->matmul_backward = cuda_bf16_matmul_backward;
}
