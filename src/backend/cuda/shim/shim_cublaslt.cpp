/*
 * cuBLASLt on the CPU for the CUDA-on-CPU shim (the contract is the header
 * comment of cublasLt_shim.h).
 *
 * How: validate the problem as cuBLASLt does (check()), then per batch
 * gather op(A) and op(B) into packed column-major fp32 matrices through
 * the layouts (type, order, ld, batch offset, transpose), multiply them
 * with OpenBLAS's sgemm (fp32 accumulation), and apply alpha, beta*C, the
 * bias and the activation element by element in fp32 before rounding to
 * D's type. Packing first keeps one GEMM call for every layout variant;
 * the packing is O(mk + kn) against the product's O(mnk). Why ours:
 * cuBLASLt exists only on a GPU, and the point is that a backend's wrong
 * layout or argument fails here as it would there, which a call into a
 * CPU BLAS with its own conventions would not show.
 *
 * Invariants:
 *  - Nothing is written unless check() passed, the ranges lie in device
 *    memory and the CUDA context is not in a sticky error.
 *  - beta == 0 never reads C.
 *  - The epilogue order is cuBLASLt's: x = alpha*AB + beta*C, then + bias,
 *    then the activation (the aux matrix keeps x before it); DGELU
 *    multiplies x by GELU'(aux); the bias gradients are fp32 sums of the
 *    fp32 values (row sums of the DGELU result, sums over k of op(A) rows
 *    or op(B) columns) rounded once to D's type.
 *  - GELU is the tanh approximation, 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))).
 *
 * Reference: cuBLAS documentation, cublasLtMatmul (datatype table,
 * in-place rules), cublasLtMatmulDescAttributes_t, cublasLtEpilogue_t,
 * cublasLtMatrixLayoutAttribute_t.
 */
#include <cblas.h>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>
#include <vector>
#include "core/gemm_trace.h"
#include "cublasLt_shim.h"
#include "cuda_device_shim.h"
#include "shim_internal.h"

struct cublasLtContext {
    int magic;
};
struct lf_shim_matmul_desc {
    int32_t compute, scale, pointer_mode, transa, transb, transc, fill;
    uint32_t epilogue;
    const void *bias;
    int64_t bias_batch_stride;
    void *aux;
    int64_t aux_ld, aux_batch_stride, alpha_vec_batch_stride;
    int32_t sm_count, aux_type, bias_type;
    const void *scale_ptr[5]; /* A, B, C, D scale and D amax: fp8 only */
    const void *aux_scale, *aux_amax;
    int8_t fast_accum;
};
struct lf_shim_matrix_layout {
    uint32_t type;
    int32_t order;
    uint64_t rows, cols;
    int64_t ld;
    int32_t batch;
    int64_t stride;
    int64_t plane_offset;
};
struct lf_shim_matmul_pref {
    uint32_t search_mode;
    uint64_t max_workspace;
    uint32_t reduction_mask;
    uint32_t min_align[4];
    float max_waves;
    uint64_t impl_mask;
};

namespace {

constexpr uint64_t kAlgoMagic = 0x4c46534849414c47ull; /* "LFSHIALG" */

std::mutex handles_mu;
std::set<cublasLtHandle_t> handles;
thread_local char tl_detail[512];
thread_local cublasStatus_t tl_detail_status = CUBLAS_STATUS_SUCCESS;
thread_local char tl_status_str[700];

__attribute__((format(printf, 2, 3))) cublasStatus_t bad(cublasStatus_t st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tl_detail, sizeof tl_detail, fmt, ap);
    va_end(ap);
    tl_detail_status = st;
    return st;
}
cublasStatus_t ok() {
    tl_detail[0] = 0;
    tl_detail_status = CUBLAS_STATUS_SUCCESS;
    return CUBLAS_STATUS_SUCCESS;
}

bool handle_live(cublasLtHandle_t h) {
    std::lock_guard<std::mutex> lk(handles_mu);
    return h && handles.count(h);
}

size_t type_size(uint32_t t) {
    switch (t) {
    case CUDA_R_32F: return 4;
    case CUDA_R_16F:
    case CUDA_R_16BF: return 2;
    }
    return 0;
}
const char *type_name(uint32_t t) {
    switch (t) {
    case CUDA_R_32F: return "CUDA_R_32F";
    case CUDA_R_16F: return "CUDA_R_16F";
    case CUDA_R_16BF: return "CUDA_R_16BF";
    case CUDA_R_64F: return "CUDA_R_64F";
    case CUDA_R_8I: return "CUDA_R_8I";
    case CUDA_R_32I: return "CUDA_R_32I";
    }
    return "an unknown type";
}

float load(uint32_t type, const void *base, int64_t idx) {
    switch (type) {
    case CUDA_R_32F: return ((const float *)base)[idx];
    case CUDA_R_16F: return lf_shim::f16_to_f32(((const uint16_t *)base)[idx]);
    default: return lf_shim::bf16_to_f32(((const uint16_t *)base)[idx]);
    }
}
void store(uint32_t type, void *base, int64_t idx, float v) {
    switch (type) {
    case CUDA_R_32F: ((float *)base)[idx] = v; break;
    case CUDA_R_16F: ((uint16_t *)base)[idx] = lf_shim::f32_to_f16_rn(v); break;
    default: ((uint16_t *)base)[idx] = lf_shim::f32_to_bf16_rn(v); break;
    }
}

/* element (r, c) of the stored matrix, batch b */
int64_t offset(const lf_shim_matrix_layout *L, int64_t r, int64_t c, int64_t b) {
    int64_t o = b * L->stride;
    return L->order == CUBLASLT_ORDER_ROW ? o + r * L->ld + c : o + r + c * L->ld;
}

/* elements from a matrix's first to its last, over every batch */
int64_t extent(const lf_shim_matrix_layout *L) {
    int64_t r = (int64_t)L->rows, c = (int64_t)L->cols;
    int64_t one = L->order == CUBLASLT_ORDER_ROW ? (r - 1) * L->ld + c : (c - 1) * L->ld + r;
    return (int64_t)(L->batch - 1) * L->stride + one;
}

float tf32_rna(float x) {
    uint32_t u = lf_shim::f32_bits(x);
    if ((u & 0x7f800000u) == 0x7f800000u) return x; /* inf, NaN */
    u = (u + 0x1000u) & ~0x1fffu;                    /* keep 10 mantissa bits, ties away from zero */
    return lf_shim::bits_f32(u);
}

float gelu(float x) {
    const float s = 0.7978845608028654f; /* sqrt(2/pi) */
    return 0.5f * x * (1.0f + tanhf(s * (x + 0.044715f * x * x * x)));
}
float gelu_grad(float x) {
    const float s = 0.7978845608028654f;
    float x2 = x * x;
    float t = tanhf(s * (x + 0.044715f * x2 * x));
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * s * (1.0f + 3.0f * 0.044715f * x2);
}

enum : uint32_t { EPI_BIAS = 4, EPI_RELU = 2, EPI_GELU = 32, EPI_AUX = 128, EPI_DGELU = 64, EPI_BGRAD = 16 };

bool epilogue_known(uint32_t e) {
    switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT:
    case CUBLASLT_EPILOGUE_RELU:
    case CUBLASLT_EPILOGUE_RELU_AUX:
    case CUBLASLT_EPILOGUE_BIAS:
    case CUBLASLT_EPILOGUE_RELU_BIAS:
    case CUBLASLT_EPILOGUE_RELU_AUX_BIAS:
    case CUBLASLT_EPILOGUE_DRELU:
    case CUBLASLT_EPILOGUE_DRELU_BGRAD:
    case CUBLASLT_EPILOGUE_GELU:
    case CUBLASLT_EPILOGUE_GELU_AUX:
    case CUBLASLT_EPILOGUE_GELU_BIAS:
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
    case CUBLASLT_EPILOGUE_DGELU:
    case CUBLASLT_EPILOGUE_DGELU_BGRAD:
    case CUBLASLT_EPILOGUE_BGRADA:
    case CUBLASLT_EPILOGUE_BGRADB: return true;
    }
    return false;
}
bool epilogue_relu_mask(uint32_t e) {
    return e == CUBLASLT_EPILOGUE_RELU_AUX || e == CUBLASLT_EPILOGUE_RELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DRELU ||
           e == CUBLASLT_EPILOGUE_DRELU_BGRAD;
}
bool epilogue_uses_aux(uint32_t e) {
    return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU ||
           e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}
bool epilogue_adds_bias(uint32_t e) {
    return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_RELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS ||
           e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool epilogue_bias_grad(uint32_t e) {
    return e == CUBLASLT_EPILOGUE_DGELU_BGRAD || e == CUBLASLT_EPILOGUE_BGRADA || e == CUBLASLT_EPILOGUE_BGRADB;
}

/* The checked problem. */
struct problem {
    int64_t m, n, k, batch;
    bool ta, tb;
    uint32_t ab_type, cd_type;
    int32_t compute;
    uint32_t epilogue;
    int64_t bias_len;
};

bool same_layout(const lf_shim_matrix_layout *a, const lf_shim_matrix_layout *b) {
    return a->type == b->type && a->order == b->order && a->rows == b->rows && a->cols == b->cols &&
           a->ld == b->ld && a->batch == b->batch && (a->batch == 1 || a->stride == b->stride);
}

cublasStatus_t check_layout(const char *name, const lf_shim_matrix_layout *L, bool may_broadcast) {
    if (L->order != CUBLASLT_ORDER_COL && L->order != CUBLASLT_ORDER_ROW)
        return bad(CUBLAS_STATUS_NOT_SUPPORTED, "matrix %s: order %d (the shim has CUBLASLT_ORDER_COL and _ROW)", name,
                   L->order);
    if (!type_size(L->type))
        return bad(CUBLAS_STATUS_NOT_SUPPORTED, "matrix %s: type %s (the shim has CUDA_R_32F, _16F, _16BF)", name,
                   type_name(L->type));
    if (L->rows == 0 || L->cols == 0)
        return bad(CUBLAS_STATUS_INVALID_VALUE, "matrix %s: %llu x %llu (the shim refuses empty matrices)", name,
                   (unsigned long long)L->rows, (unsigned long long)L->cols);
    if (L->rows > INT32_MAX || L->cols > INT32_MAX)
        return bad(CUBLAS_STATUS_NOT_SUPPORTED, "matrix %s: %llu x %llu does not fit int32", name,
                   (unsigned long long)L->rows, (unsigned long long)L->cols);
    uint64_t need = L->order == CUBLASLT_ORDER_ROW ? L->cols : L->rows;
    if (L->ld < 0 || (!(may_broadcast && L->ld == 0) && (uint64_t)L->ld < need))
        return bad(CUBLAS_STATUS_INVALID_VALUE, "matrix %s: ld %lld is below its %s (%llu) in %s order", name,
                   (long long)L->ld, L->order == CUBLASLT_ORDER_ROW ? "cols" : "rows", (unsigned long long)need,
                   L->order == CUBLASLT_ORDER_ROW ? "row" : "column");
    if (L->batch < 1) return bad(CUBLAS_STATUS_INVALID_VALUE, "matrix %s: batch count %d", name, L->batch);
    if (L->batch > 1 && L->stride < 0)
        return bad(CUBLAS_STATUS_INVALID_VALUE, "matrix %s: strided batch offset %lld is negative", name,
                   (long long)L->stride);
    if (L->plane_offset != 0)
        return bad(CUBLAS_STATUS_NOT_SUPPORTED, "matrix %s: planar complex layouts are not in the shim", name);
    return CUBLAS_STATUS_SUCCESS;
}

/* Everything cuBLASLt checks before it runs (heuristic and matmul alike). */
cublasStatus_t check(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t A, cublasLtMatrixLayout_t B,
                     cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D, bool c_is_d, problem *p) {
    if (!handle_live(h)) return bad(CUBLAS_STATUS_NOT_INITIALIZED, "the handle is NULL or destroyed");
    if (!d || !A || !B || !D) return bad(CUBLAS_STATUS_INVALID_VALUE, "a descriptor is NULL");
    if (!C) C = D;
    if (d->compute != CUBLAS_COMPUTE_32F && d->compute != CUBLAS_COMPUTE_32F_PEDANTIC &&
        d->compute != CUBLAS_COMPUTE_32F_FAST_TF32 && d->compute != CUBLAS_COMPUTE_32F_FAST_16BF &&
        d->compute != CUBLAS_COMPUTE_32F_FAST_16F)
        return bad(CUBLAS_STATUS_NOT_SUPPORTED, "compute type %d (the shim has CUBLAS_COMPUTE_32F and its variants)",
                   d->compute);
    if (d->scale != CUDA_R_32F)
        return bad(CUBLAS_STATUS_NOT_SUPPORTED, "scale type %s with a 32F compute type", type_name((uint32_t)d->scale));
    if (d->pointer_mode != CUBLASLT_POINTER_MODE_HOST && d->pointer_mode != CUBLASLT_POINTER_MODE_DEVICE)
        return bad(CUBLAS_STATUS_NOT_SUPPORTED, "pointer mode %d (the shim has HOST and DEVICE)", d->pointer_mode);
    for (int32_t t : {d->transa, d->transb})
        if (t != CUBLAS_OP_N && t != CUBLAS_OP_T && t != CUBLAS_OP_C)
            return bad(CUBLAS_STATUS_INVALID_VALUE, "transpose %d is not a cublasOperation_t", t);
    if (d->transc != CUBLAS_OP_N) return bad(CUBLAS_STATUS_NOT_SUPPORTED, "TRANSC must be CUBLAS_OP_N");
    if (d->fill != CUBLAS_FILL_MODE_FULL) return bad(CUBLAS_STATUS_NOT_SUPPORTED, "FILL_MODE must be FULL");
    for (const void *s : d->scale_ptr)
        if (s) return bad(CUBLAS_STATUS_NOT_SUPPORTED, "fp8 scale pointers are not in the shim");
    if (d->aux_scale || d->aux_amax) return bad(CUBLAS_STATUS_NOT_SUPPORTED, "fp8 aux scales are not in the shim");
    cublasStatus_t st;
    if ((st = check_layout("A", A, false)) || (st = check_layout("B", B, false)) ||
        (st = check_layout("C", C, !c_is_d)) || (st = check_layout("D", D, false)))
        return st;
    if (A->type != B->type)
        return bad(CUBLAS_STATUS_NOT_SUPPORTED, "A is %s but B %s", type_name(A->type), type_name(B->type));
    if (C->type != D->type)
        return bad(CUBLAS_STATUS_INVALID_VALUE, "C is %s but D %s: out of place they must have the same type",
                   type_name(C->type), type_name(D->type));
    bool fast_in = d->compute == CUBLAS_COMPUTE_32F_FAST_TF32 || d->compute == CUBLAS_COMPUTE_32F_FAST_16BF ||
                   d->compute == CUBLAS_COMPUTE_32F_FAST_16F;
    if (fast_in && (A->type != CUDA_R_32F || D->type != CUDA_R_32F))
        return bad(CUBLAS_STATUS_NOT_SUPPORTED, "a FAST compute type takes CUDA_R_32F A, B, C and D");
    if (A->type == CUDA_R_32F && D->type != CUDA_R_32F)
        return bad(CUBLAS_STATUS_NOT_SUPPORTED, "CUDA_R_32F A and B with %s C and D", type_name(D->type));
    if (A->type != CUDA_R_32F && D->type != CUDA_R_32F && D->type != A->type)
        return bad(CUBLAS_STATUS_NOT_SUPPORTED, "%s A and B with %s C and D", type_name(A->type), type_name(D->type));
    if (C->order != D->order)
        return bad(CUBLAS_STATUS_INVALID_VALUE, "C and D have different orders");
    bool ta = d->transa != CUBLAS_OP_N, tb = d->transb != CUBLAS_OP_N;
    int64_t am = (int64_t)(ta ? A->cols : A->rows), ak = (int64_t)(ta ? A->rows : A->cols);
    int64_t bk = (int64_t)(tb ? B->cols : B->rows), bn = (int64_t)(tb ? B->rows : B->cols);
    int64_t m = (int64_t)D->rows, n = (int64_t)D->cols;
    if (am != m || bn != n || ak != bk)
        return bad(CUBLAS_STATUS_INVALID_VALUE,
                   "shapes do not chain: op(A) is %lld x %lld, op(B) %lld x %lld, D %lld x %lld", (long long)am,
                   (long long)ak, (long long)bk, (long long)bn, (long long)m, (long long)n);
    if (C->rows != D->rows || C->cols != D->cols)
        return bad(CUBLAS_STATUS_INVALID_VALUE, "C is %llu x %llu but D %llu x %llu", (unsigned long long)C->rows,
                   (unsigned long long)C->cols, (unsigned long long)D->rows, (unsigned long long)D->cols);
    if (c_is_d && !same_layout(C, D))
        return bad(CUBLAS_STATUS_INVALID_VALUE, "C and D are the same memory but their layouts differ");
    if (A->batch != D->batch || B->batch != D->batch || C->batch != D->batch)
        return bad(CUBLAS_STATUS_INVALID_VALUE, "batch counts differ: A %d, B %d, C %d, D %d", A->batch, B->batch,
                   C->batch, D->batch);
    if (D->batch > 1) {
        int64_t one = D->order == CUBLASLT_ORDER_ROW ? (int64_t)D->rows * D->ld : (int64_t)D->cols * D->ld;
        if (D->stride < one)
            return bad(CUBLAS_STATUS_INVALID_VALUE, "D's batches overlap: strided batch offset %lld < %lld",
                       (long long)D->stride, (long long)one);
    }
    uint32_t e = d->epilogue;
    if (!epilogue_known(e)) return bad(CUBLAS_STATUS_INVALID_VALUE, "epilogue %u is not a cublasLtEpilogue_t", e);
    if (epilogue_relu_mask(e))
        return bad(CUBLAS_STATUS_NOT_SUPPORTED, "epilogue %u (ReLU bit-mask) is not in the shim", e);
    int64_t bias_len = 0;
    if (epilogue_adds_bias(e) || epilogue_bias_grad(e)) {
        bias_len = e == CUBLASLT_EPILOGUE_BGRADB ? n : m;
        if (!d->bias) return bad(CUBLAS_STATUS_INVALID_VALUE, "epilogue %u needs BIAS_POINTER", e);
        if (d->bias_type != -1 && (uint32_t)d->bias_type != D->type)
            return bad(CUBLAS_STATUS_NOT_SUPPORTED, "bias type %s with D %s (the shim takes D's type)",
                       type_name((uint32_t)d->bias_type), type_name(D->type));
        if ((uintptr_t)d->bias % type_size(D->type))
            return bad(CUBLAS_STATUS_NOT_SUPPORTED, "the bias pointer is not aligned to its type");
        if (D->batch > 1 && d->bias_batch_stride < 0)
            return bad(CUBLAS_STATUS_INVALID_VALUE, "BIAS_BATCH_STRIDE is negative");
    }
    if (epilogue_uses_aux(e)) {
        if (!d->aux) return bad(CUBLAS_STATUS_INVALID_VALUE, "epilogue %u needs EPILOGUE_AUX_POINTER", e);
        if (d->aux_ld < m || d->aux_ld % 8)
            return bad(CUBLAS_STATUS_INVALID_VALUE, "EPILOGUE_AUX_LD %lld: must be a multiple of 8 and at least m = %lld",
                       (long long)d->aux_ld, (long long)m);
        if (D->batch > 1 && (d->aux_batch_stride < d->aux_ld * n || d->aux_batch_stride % 8))
            return bad(CUBLAS_STATUS_INVALID_VALUE,
                       "EPILOGUE_AUX_BATCH_STRIDE %lld: must be a multiple of 8 and at least aux ld * n",
                       (long long)d->aux_batch_stride);
        if (d->aux_type != -1 && (uint32_t)d->aux_type != D->type)
            return bad(CUBLAS_STATUS_NOT_SUPPORTED, "aux type %s with D %s (the shim takes D's type)",
                       type_name((uint32_t)d->aux_type), type_name(D->type));
        if (D->order != CUBLASLT_ORDER_COL)
            return bad(CUBLAS_STATUS_NOT_SUPPORTED, "aux epilogues with a row-major D are not in the shim");
        if ((uintptr_t)d->aux % type_size(D->type))
            return bad(CUBLAS_STATUS_NOT_SUPPORTED, "the aux pointer is not aligned to its type");
    }
    p->m = m;
    p->n = n;
    p->k = ak;
    p->batch = D->batch;
    p->ta = ta;
    p->tb = tb;
    p->ab_type = A->type;
    p->cd_type = D->type;
    p->compute = d->compute;
    p->epilogue = e;
    p->bias_len = bias_len;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t in_device(const char *what, const void *p, int64_t elems, size_t esize) {
    if (!lf_shim_rt::device_range(p, (size_t)elems * esize)) {
        (void)lf_shim_rt::fail_sticky(cudaErrorIllegalAddress,
                                      "cublasLtMatmul: %s [%p, +%lld bytes) is not inside one cudaMalloc allocation",
                                      what, p, (long long)elems * (long long)esize);
        return bad(CUBLAS_STATUS_EXECUTION_FAILED, "%s [%p, +%lld bytes) is not inside one cudaMalloc allocation",
                   what, p, (long long)elems * (long long)esize);
    }
    return CUBLAS_STATUS_SUCCESS;
}

template <typename T> cublasStatus_t set_attr(T *field, const void *buf, size_t size) {
    if (!buf || size != sizeof(T)) return bad(CUBLAS_STATUS_INVALID_VALUE, "attribute size %zu, expected %zu", size, sizeof(T));
    memcpy(field, buf, sizeof(T));
    return ok();
}
template <typename T> cublasStatus_t get_attr(const T *field, void *buf, size_t size, size_t *written) {
    if (size == 0 && written) {
        *written = sizeof(T);
        return ok();
    }
    if (!buf || size != sizeof(T))
        return bad(CUBLAS_STATUS_INVALID_VALUE, "attribute buffer of %zu bytes, expected %zu", size, sizeof(T));
    memcpy(buf, field, sizeof(T));
    if (written) *written = sizeof(T);
    return ok();
}

} // namespace

/* ------------------------------------------------------------ handles */
extern "C" cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
    if (!h) return bad(CUBLAS_STATUS_INVALID_VALUE, "cublasLtCreate: lightHandle is NULL");
    cublasLtHandle_t x = new cublasLtContext{1};
    std::lock_guard<std::mutex> lk(handles_mu);
    handles.insert(x);
    *h = x;
    return ok();
}

extern "C" cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
    std::lock_guard<std::mutex> lk(handles_mu);
    if (!h || !handles.erase(h)) return bad(CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtDestroy: not a live handle");
    delete h;
    return ok();
}

extern "C" size_t cublasLtGetVersion(void) { return 130000; }

extern "C" const char *cublasLtGetStatusName(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

extern "C" const char *cublasLtGetStatusString(cublasStatus_t s) {
    const char *g;
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: g = "success"; break;
    case CUBLAS_STATUS_NOT_INITIALIZED: g = "the library was not initialized"; break;
    case CUBLAS_STATUS_ALLOC_FAILED: g = "the resource allocation failed"; break;
    case CUBLAS_STATUS_INVALID_VALUE: g = "an invalid numeric value was used as an argument"; break;
    case CUBLAS_STATUS_ARCH_MISMATCH: g = "an absent device architectural feature is required"; break;
    case CUBLAS_STATUS_MAPPING_ERROR: g = "an access to GPU memory space failed"; break;
    case CUBLAS_STATUS_EXECUTION_FAILED: g = "the GPU program failed to execute"; break;
    case CUBLAS_STATUS_INTERNAL_ERROR: g = "an internal operation failed"; break;
    case CUBLAS_STATUS_NOT_SUPPORTED: g = "the functionality requested is not supported"; break;
    default: g = "unknown status"; break;
    }
    if (s == CUBLAS_STATUS_SUCCESS || s != tl_detail_status || !tl_detail[0]) return g;
    snprintf(tl_status_str, sizeof tl_status_str, "%s (shim: %s)", g, tl_detail);
    return tl_status_str;
}

extern "C" const char *lf_shim_cublaslt_last_detail(void) {
    return tl_detail_status == CUBLAS_STATUS_SUCCESS ? "" : tl_detail;
}

/* ------------------------------------------------------------ matmul descriptor */
extern "C" cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *desc, cublasComputeType_t compute,
                                                   cudaDataType_t scale) {
    if (!desc) return bad(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescCreate: matmulDesc is NULL");
    lf_shim_matmul_desc *d = new lf_shim_matmul_desc();
    d->compute = compute;
    d->scale = scale;
    d->pointer_mode = CUBLASLT_POINTER_MODE_HOST;
    d->transa = d->transb = d->transc = CUBLAS_OP_N;
    d->fill = CUBLAS_FILL_MODE_FULL;
    d->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    d->aux_type = d->bias_type = -1;
    *desc = d;
    return ok();
}

extern "C" cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
    delete desc;
    return ok();
}

#define LF_DESC_ATTRS(X)                                                                           \
    X(CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, compute)                                                  \
    X(CUBLASLT_MATMUL_DESC_SCALE_TYPE, scale)                                                      \
    X(CUBLASLT_MATMUL_DESC_POINTER_MODE, pointer_mode)                                             \
    X(CUBLASLT_MATMUL_DESC_TRANSA, transa)                                                         \
    X(CUBLASLT_MATMUL_DESC_TRANSB, transb)                                                         \
    X(CUBLASLT_MATMUL_DESC_TRANSC, transc)                                                         \
    X(CUBLASLT_MATMUL_DESC_FILL_MODE, fill)                                                        \
    X(CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue)                                                     \
    X(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias)                                                     \
    X(CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, bias_batch_stride)                                   \
    X(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux)                                              \
    X(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, aux_ld)                                                \
    X(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, aux_batch_stride)                            \
    X(CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE, alpha_vec_batch_stride)                      \
    X(CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, sm_count)                                              \
    X(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, scale_ptr[0])                                          \
    X(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, scale_ptr[1])                                          \
    X(CUBLASLT_MATMUL_DESC_C_SCALE_POINTER, scale_ptr[2])                                          \
    X(CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, scale_ptr[3])                                          \
    X(CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, scale_ptr[4])                                           \
    X(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, aux_type)                                       \
    X(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_POINTER, aux_scale)                                  \
    X(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_AMAX_POINTER, aux_amax)                                    \
    X(CUBLASLT_MATMUL_DESC_FAST_ACCUM, fast_accum)                                                 \
    X(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_type)

extern "C" cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                                         const void *buf, size_t size) {
    if (!d) return bad(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescSetAttribute: matmulDesc is NULL");
    switch (attr) {
#define X(a, f)                                                                                    \
    case a: return set_attr(&d->f, buf, size);
        LF_DESC_ATTRS(X)
#undef X
    }
    return bad(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescSetAttribute: attribute %d is not in the shim", (int)attr);
}

extern "C" cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                                         void *buf, size_t size, size_t *written) {
    if (!d) return bad(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescGetAttribute: matmulDesc is NULL");
    switch (attr) {
#define X(a, f)                                                                                    \
    case a: return get_attr(&d->f, buf, size, written);
        LF_DESC_ATTRS(X)
#undef X
    }
    return bad(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescGetAttribute: attribute %d is not in the shim", (int)attr);
}

/* ------------------------------------------------------------ layouts */
extern "C" cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *L, cudaDataType type, uint64_t rows,
                                                     uint64_t cols, int64_t ld) {
    if (!L) return bad(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutCreate: matLayout is NULL");
    *L = new lf_shim_matrix_layout{(uint32_t)type, CUBLASLT_ORDER_COL, rows, cols, ld, 1, 0, 0};
    return ok();
}

extern "C" cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t L) {
    delete L;
    return ok();
}

#define LF_LAYOUT_ATTRS(X)                                                                         \
    X(CUBLASLT_MATRIX_LAYOUT_TYPE, type)                                                           \
    X(CUBLASLT_MATRIX_LAYOUT_ORDER, order)                                                         \
    X(CUBLASLT_MATRIX_LAYOUT_ROWS, rows)                                                           \
    X(CUBLASLT_MATRIX_LAYOUT_COLS, cols)                                                           \
    X(CUBLASLT_MATRIX_LAYOUT_LD, ld)                                                               \
    X(CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, batch)                                                   \
    X(CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride)                                         \
    X(CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET, plane_offset)

extern "C" cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t L,
                                                           cublasLtMatrixLayoutAttribute_t attr, const void *buf,
                                                           size_t size) {
    if (!L) return bad(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutSetAttribute: matLayout is NULL");
    switch (attr) {
#define X(a, f)                                                                                    \
    case a: return set_attr(&L->f, buf, size);
        LF_LAYOUT_ATTRS(X)
#undef X
    }
    return bad(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutSetAttribute: attribute %d is not in the shim", (int)attr);
}

extern "C" cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t L,
                                                           cublasLtMatrixLayoutAttribute_t attr, void *buf,
                                                           size_t size, size_t *written) {
    if (!L) return bad(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutGetAttribute: matLayout is NULL");
    switch (attr) {
#define X(a, f)                                                                                    \
    case a: return get_attr(&L->f, buf, size, written);
        LF_LAYOUT_ATTRS(X)
#undef X
    }
    return bad(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutGetAttribute: attribute %d is not in the shim", (int)attr);
}

/* ------------------------------------------------------------ preferences */
extern "C" cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref) {
    if (!pref) return bad(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceCreate: pref is NULL");
    lf_shim_matmul_pref *p = new lf_shim_matmul_pref();
    p->reduction_mask = 0xff;
    p->impl_mask = ~0ull;
    *pref = p;
    return ok();
}

extern "C" cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
    delete pref;
    return ok();
}

#define LF_PREF_ATTRS(X)                                                                           \
    X(CUBLASLT_MATMUL_PREF_SEARCH_MODE, search_mode)                                               \
    X(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, max_workspace)                                     \
    X(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, reduction_mask)                                  \
    X(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, min_align[0])                                    \
    X(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, min_align[1])                                    \
    X(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, min_align[2])                                    \
    X(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, min_align[3])                                    \
    X(CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT, max_waves)                                             \
    X(CUBLASLT_MATMUL_PREF_IMPL_MASK, impl_mask)

extern "C" cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                               cublasLtMatmulPreferenceAttributes_t attr,
                                                               const void *buf, size_t size) {
    if (!p) return bad(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceSetAttribute: pref is NULL");
    switch (attr) {
#define X(a, f)                                                                                    \
    case a: return set_attr(&p->f, buf, size);
        LF_PREF_ATTRS(X)
#undef X
    }
    return bad(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceSetAttribute: attribute %d is not in the shim",
               (int)attr);
}

extern "C" cublasStatus_t cublasLtMatmulPreferenceGetAttribute(cublasLtMatmulPreference_t p,
                                                               cublasLtMatmulPreferenceAttributes_t attr, void *buf,
                                                               size_t size, size_t *written) {
    if (!p) return bad(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceGetAttribute: pref is NULL");
    switch (attr) {
#define X(a, f)                                                                                    \
    case a: return get_attr(&p->f, buf, size, written);
        LF_PREF_ATTRS(X)
#undef X
    }
    return bad(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceGetAttribute: attribute %d is not in the shim",
               (int)attr);
}

/* ------------------------------------------------------------ heuristic */
extern "C" cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d,
                                                         cublasLtMatrixLayout_t A, cublasLtMatrixLayout_t B,
                                                         cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D,
                                                         cublasLtMatmulPreference_t pref, int requested,
                                                         cublasLtMatmulHeuristicResult_t results[], int *returned) {
    if (returned) *returned = 0;
    if (!handle_live(h)) return bad(CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtMatmulAlgoGetHeuristic: not a live handle");
    if (!pref || requested < 1 || !results || !returned)
        return bad(CUBLAS_STATUS_INVALID_VALUE,
                   "cublasLtMatmulAlgoGetHeuristic: preference, results and returnAlgoCount must be given and "
                   "requestedAlgoCount >= 1");
    problem p;
    cublasStatus_t st = check(h, d, A, B, C, D, false, &p);
    if (st) return st;
    memset(&results[0], 0, sizeof results[0]);
    results[0].algo.data[0] = kAlgoMagic;
    results[0].workspaceSize = 0;
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *returned = 1;
    return ok();
}

/* ------------------------------------------------------------ matmul */
extern "C" cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha_p,
                                         const void *Aptr, cublasLtMatrixLayout_t A, const void *Bptr,
                                         cublasLtMatrixLayout_t B, const void *beta_p, const void *Cptr,
                                         cublasLtMatrixLayout_t C, void *Dptr, cublasLtMatrixLayout_t D,
                                         const cublasLtMatmulAlgo_t *algo, void *workspace, size_t workspace_bytes,
                                         cudaStream_t stream) {
    lf__gemm_trace_mark(); /* the product below is OpenBLAS's cblas_sgemm */
    problem p;
    if (!C) C = D;
    bool c_is_d = Cptr && Cptr == Dptr;
    cublasStatus_t st = check(h, d, A, B, C, D, c_is_d, &p);
    if (st) return st;
    if (!alpha_p || !beta_p) return bad(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: alpha or beta is NULL");
    if (!Aptr || !Bptr || !Dptr) return bad(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: A, B or D is NULL");
    if (algo && algo->data[0] != kAlgoMagic)
        return bad(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: algo did not come from cublasLtMatmulAlgoGetHeuristic");
    if (workspace_bytes && !workspace)
        return bad(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: workspace is NULL but its size is %zu", workspace_bytes);
    if (!lf_shim_rt::stream_valid(stream))
        return bad(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: stream %p is not a live stream", (void *)stream);
    if (lf_shim_rt::enter() != cudaSuccess)
        return bad(CUBLAS_STATUS_EXECUTION_FAILED, "cublasLtMatmul: the CUDA context has a sticky error");
    if (d->pointer_mode == CUBLASLT_POINTER_MODE_DEVICE) {
        if ((st = in_device("alpha", alpha_p, 1, 4)) || (st = in_device("beta", beta_p, 1, 4))) return st;
    }
    float alpha, beta;
    memcpy(&alpha, alpha_p, 4);
    memcpy(&beta, beta_p, 4);
    bool read_c = beta != 0.0f;
    if (read_c && !Cptr) return bad(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: C is NULL and beta is not 0");
    size_t ab_sz = type_size(p.ab_type), cds = type_size(p.cd_type);
    for (auto q : {std::make_pair(Aptr, ab_sz), std::make_pair(Bptr, ab_sz), std::make_pair((const void *)Dptr, cds)})
        if ((uintptr_t)q.first % q.second)
            return bad(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmul: a matrix pointer is not aligned to its type");
    if ((st = in_device("A", Aptr, extent(A), ab_sz)) || (st = in_device("B", Bptr, extent(B), ab_sz)) ||
        (st = in_device("D", Dptr, extent(D), cds)))
        return st;
    if (read_c && (st = in_device("C", Cptr, extent(C), cds))) return st;
    uint32_t e = p.epilogue;
    if (p.bias_len) {
        int64_t len = (p.batch - 1) * d->bias_batch_stride + p.bias_len;
        if ((st = in_device("the bias", d->bias, len, cds))) return st;
    }
    if (epilogue_uses_aux(e)) {
        int64_t len = (p.batch - 1) * d->aux_batch_stride + d->aux_ld * (p.n - 1) + p.m;
        if ((st = in_device("the aux matrix", d->aux, len, cds))) return st;
    }

    const int64_t m = p.m, n = p.n, k = p.k;
    std::vector<float> Ap((size_t)(m * k)), Bp((size_t)(k * n)), P((size_t)(m * n)), bsum;
    auto in_round = [&](float x) {
        switch (p.compute) {
        case CUBLAS_COMPUTE_32F_FAST_TF32: return tf32_rna(x);
        case CUBLAS_COMPUTE_32F_FAST_16BF: return lf_shim::bf16_to_f32(lf_shim::f32_to_bf16_rn(x));
        case CUBLAS_COMPUTE_32F_FAST_16F: return lf_shim::f16_to_f32(lf_shim::f32_to_f16_rn(x));
        }
        return x;
    };
    for (int64_t b = 0; b < p.batch; b++) {
        /* op(A)(i, l) and op(B)(l, j), packed column-major */
        for (int64_t l = 0; l < k; l++)
            for (int64_t i = 0; i < m; i++)
                Ap[(size_t)(i + l * m)] = in_round(load(A->type, Aptr, p.ta ? offset(A, l, i, b) : offset(A, i, l, b)));
        for (int64_t j = 0; j < n; j++)
            for (int64_t l = 0; l < k; l++)
                Bp[(size_t)(l + j * k)] = in_round(load(B->type, Bptr, p.tb ? offset(B, j, l, b) : offset(B, l, j, b)));
        cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, 1.0f, Ap.data(), (int)m,
                    Bp.data(), (int)k, 0.0f, P.data(), (int)m);
        const void *bias = d->bias ? (const char *)d->bias + (size_t)(b * d->bias_batch_stride) * cds : nullptr;
        void *aux = d->aux ? (char *)d->aux + (size_t)(b * d->aux_batch_stride) * cds : nullptr;
        bsum.assign((size_t)m, 0.0f);
        for (int64_t j = 0; j < n; j++)
            for (int64_t i = 0; i < m; i++) {
                float x = alpha * P[(size_t)(i + j * m)];
                if (read_c) x += beta * load(C->type, Cptr, offset(C, i, j, b));
                if (epilogue_adds_bias(e)) x += load(p.cd_type, bias, i);
                if (epilogue_uses_aux(e) && !(e & EPI_DGELU)) store(p.cd_type, aux, i + j * d->aux_ld, x);
                if (e & EPI_RELU) x = x > 0.0f ? x : 0.0f;
                if (e & EPI_GELU) x = gelu(x);
                if (e & EPI_DGELU) x *= gelu_grad(load(p.cd_type, aux, i + j * d->aux_ld));
                if (e == CUBLASLT_EPILOGUE_DGELU_BGRAD) bsum[(size_t)i] += x;
                store(p.cd_type, Dptr, offset(D, i, j, b), x);
            }
        if (e == CUBLASLT_EPILOGUE_DGELU_BGRAD) {
            for (int64_t i = 0; i < m; i++) store(p.cd_type, (void *)bias, i, bsum[(size_t)i]);
        } else if (e == CUBLASLT_EPILOGUE_BGRADA) {
            for (int64_t i = 0; i < m; i++) {
                float s = 0.0f;
                for (int64_t l = 0; l < k; l++) s += Ap[(size_t)(i + l * m)];
                store(p.cd_type, (void *)bias, i, s);
            }
        } else if (e == CUBLASLT_EPILOGUE_BGRADB) {
            for (int64_t j = 0; j < n; j++) {
                float s = 0.0f;
                for (int64_t l = 0; l < k; l++) s += Bp[(size_t)(l + j * k)];
                store(p.cd_type, (void *)bias, j, s);
            }
        }
    }
    return ok();
}
