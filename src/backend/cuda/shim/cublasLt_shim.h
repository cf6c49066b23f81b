/*
 * The cuBLASLt subset of the CUDA-on-CPU shim (C; see ../README.md):
 * handles, matmul/layout/preference descriptors, the one-algorithm
 * heuristic and cublasLtMatmul, with cuBLASLt's names and numeric values
 * (cublasLt.h, cublas_api.h of CUDA 13), computed by a CPU GEMM in
 * shim_cublaslt.cpp. ../cuda_api.h picks the real <cublasLt.h> when
 * LF_CUDA_SHIM is not defined.
 *
 * Semantics (cuBLASLt's, exactly, for what the shim accepts):
 *   D = epilogue(alpha * op(A) op(B) + beta * C  [+ bias]),
 * every matrix described by its layout (type, rows, cols, ld, order,
 * batch count, strided batch offset in elements) as STORED: op(A) is
 * A (rows m, cols k) for CUBLAS_OP_N and A^T (A has k rows, m cols) for
 * CUBLAS_OP_T/C; column-major (CUBLASLT_ORDER_COL, the default) puts
 * element (r, c) at r + c*ld, row-major at r*ld + c. beta == 0: C is not
 * read (it may hold NaN, or be NULL). C == D in place needs identical
 * layouts; out of place, C may have ld 0 (a broadcast row or column).
 * Epilogues: DEFAULT, RELU, BIAS, RELU_BIAS, GELU, GELU_BIAS (tanh GELU),
 * GELU_AUX(_BIAS) (the GELU input stored in the aux matrix, column-major
 * m x n with EPILOGUE_AUX_LD), DGELU(_BGRAD) (D multiplied by GELU'(aux);
 * _BGRAD also writes the row sums of that D to the bias pointer), BGRADA
 * (bias[i] = sum_k op(A)[i,k], length m) and BGRADB (bias[j] =
 * sum_k op(B)[k,j], length n). Bias, bias gradient and aux have D's type.
 * Types: fp32 in and out; bf16 or fp16 in, same or fp32 out, always fp32
 * accumulation and scale type fp32; CUBLAS_COMPUTE_32F_FAST_TF32 /
 * _FAST_16BF / _FAST_16F round fp32 inputs to tf32 (nearest, ties away,
 * as cvt.rna.tf32.f32) / bf16 / fp16 (nearest even) first.
 *
 * Errors, as cuBLASLt reports them: a NULL or destroyed handle is
 * CUBLAS_STATUS_NOT_INITIALIZED; arguments in conflict (ld below the rows
 * of a column-major matrix, shapes that do not chain, a missing bias or
 * aux pointer, an aux ld not a multiple of 8 or below m, a wrong
 * attribute size) CUBLAS_STATUS_INVALID_VALUE; what the shim does not
 * implement (other compute/scale types, other orders, the ReLU bit-mask
 * epilogues, device-vector alpha, fp8 scales) CUBLAS_STATUS_NOT_SUPPORTED.
 * Where cuBLASLt's documentation leaves a case open the shim is the
 * stricter (zero dimensions, differing batch counts, overlapping D
 * batches, a bias or aux type other than D's are refused), so code that
 * passes here does not rely on a leniency the GPU may not have.
 * Shim-only check: every matrix, bias and aux range the call touches must
 * lie inside one cudaMalloc allocation; otherwise the call returns
 * CUBLAS_STATUS_EXECUTION_FAILED and the device takes the sticky
 * cudaErrorIllegalAddress, as a faulting GPU kernel would.
 * lf_shim_cublaslt_last_detail() says why the calling thread's last
 * failing call failed; cublasLtGetStatusString includes it.
 *
 * Thread safety: handles and descriptors may be used from any thread, one
 * thread per descriptor at a time (as cuBLASLt). Everything is synchronous.
 *
 * Reference: cuBLAS library documentation, "Using the cuBLASLt API"
 * (docs.nvidia.com/cuda/cublas, cublasLtMatmul and its attribute tables).
 */
#ifndef LF_CUBLASLT_SHIM_H
#define LF_CUBLASLT_SHIM_H

#include <stddef.h>
#include <stdint.h>
#include "cuda_runtime_shim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_ARCH_MISMATCH = 8,
    CUBLAS_STATUS_MAPPING_ERROR = 11,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_INTERNAL_ERROR = 14,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
    CUBLAS_STATUS_LICENSE_ERROR = 16
} cublasStatus_t;

typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 } cublasOperation_t;
typedef enum { CUBLAS_FILL_MODE_LOWER = 0, CUBLAS_FILL_MODE_UPPER = 1, CUBLAS_FILL_MODE_FULL = 2 } cublasFillMode_t;
typedef enum { CUBLAS_POINTER_MODE_HOST = 0, CUBLAS_POINTER_MODE_DEVICE = 1 } cublasPointerMode_t;

typedef enum {
    CUBLAS_COMPUTE_16F = 64,
    CUBLAS_COMPUTE_16F_PEDANTIC = 65,
    CUBLAS_COMPUTE_32F = 68,
    CUBLAS_COMPUTE_32F_PEDANTIC = 69,
    CUBLAS_COMPUTE_32F_FAST_16F = 74,
    CUBLAS_COMPUTE_32F_FAST_16BF = 75,
    CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
    CUBLAS_COMPUTE_64F = 70,
    CUBLAS_COMPUTE_64F_PEDANTIC = 71,
    CUBLAS_COMPUTE_32I = 72,
    CUBLAS_COMPUTE_32I_PEDANTIC = 73
} cublasComputeType_t;

typedef enum {
    CUBLASLT_POINTER_MODE_HOST = CUBLAS_POINTER_MODE_HOST,
    CUBLASLT_POINTER_MODE_DEVICE = CUBLAS_POINTER_MODE_DEVICE,
    CUBLASLT_POINTER_MODE_DEVICE_VECTOR = 2,
    CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_ZERO = 3,
    CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST = 4
} cublasLtPointerMode_t;

typedef enum {
    CUBLASLT_ORDER_COL = 0,
    CUBLASLT_ORDER_ROW = 1,
    CUBLASLT_ORDER_COL32 = 2,
    CUBLASLT_ORDER_COL4_4R2_8C = 3,
    CUBLASLT_ORDER_COL32_2R_4R4 = 4
} cublasLtOrder_t;

typedef enum {
    CUBLASLT_MATRIX_LAYOUT_TYPE = 0,                 /* uint32_t */
    CUBLASLT_MATRIX_LAYOUT_ORDER = 1,                /* int32_t */
    CUBLASLT_MATRIX_LAYOUT_ROWS = 2,                 /* uint64_t */
    CUBLASLT_MATRIX_LAYOUT_COLS = 3,                 /* uint64_t */
    CUBLASLT_MATRIX_LAYOUT_LD = 4,                   /* int64_t */
    CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5,          /* int32_t */
    CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6, /* int64_t */
    CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET = 7          /* int64_t */
} cublasLtMatrixLayoutAttribute_t;

typedef enum {
    CUBLASLT_MATMUL_DESC_COMPUTE_TYPE = 0,                /* int32_t */
    CUBLASLT_MATMUL_DESC_SCALE_TYPE = 1,                  /* int32_t */
    CUBLASLT_MATMUL_DESC_POINTER_MODE = 2,                /* int32_t */
    CUBLASLT_MATMUL_DESC_TRANSA = 3,                      /* int32_t */
    CUBLASLT_MATMUL_DESC_TRANSB = 4,                      /* int32_t */
    CUBLASLT_MATMUL_DESC_TRANSC = 5,                      /* int32_t */
    CUBLASLT_MATMUL_DESC_FILL_MODE = 6,                   /* int32_t */
    CUBLASLT_MATMUL_DESC_EPILOGUE = 7,                    /* uint32_t */
    CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,                /* void * */
    CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE = 10,          /* int64_t */
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,       /* void * */
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,            /* int64_t */
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE = 13,  /* int64_t */
    CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE = 14,  /* int64_t */
    CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET = 15,            /* int32_t */
    CUBLASLT_MATMUL_DESC_A_SCALE_POINTER = 17,            /* void * */
    CUBLASLT_MATMUL_DESC_B_SCALE_POINTER = 18,            /* void * */
    CUBLASLT_MATMUL_DESC_C_SCALE_POINTER = 19,            /* void * */
    CUBLASLT_MATMUL_DESC_D_SCALE_POINTER = 20,            /* void * */
    CUBLASLT_MATMUL_DESC_AMAX_D_POINTER = 21,             /* void * */
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE = 22,     /* int32_t, -1: D's type */
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_POINTER = 23, /* void * */
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_AMAX_POINTER = 24,  /* void * */
    CUBLASLT_MATMUL_DESC_FAST_ACCUM = 25,                 /* int8_t */
    CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26              /* int32_t, -1: D's type */
} cublasLtMatmulDescAttributes_t;

typedef enum {
    CUBLASLT_EPILOGUE_DEFAULT = 1,
    CUBLASLT_EPILOGUE_RELU = 2,
    CUBLASLT_EPILOGUE_RELU_AUX = (CUBLASLT_EPILOGUE_RELU | 128),
    CUBLASLT_EPILOGUE_BIAS = 4,
    CUBLASLT_EPILOGUE_RELU_BIAS = (CUBLASLT_EPILOGUE_RELU | CUBLASLT_EPILOGUE_BIAS),
    CUBLASLT_EPILOGUE_RELU_AUX_BIAS = (CUBLASLT_EPILOGUE_RELU_AUX | CUBLASLT_EPILOGUE_BIAS),
    CUBLASLT_EPILOGUE_DRELU = 8 | 128,
    CUBLASLT_EPILOGUE_DRELU_BGRAD = CUBLASLT_EPILOGUE_DRELU | 16,
    CUBLASLT_EPILOGUE_GELU = 32,
    CUBLASLT_EPILOGUE_GELU_AUX = (CUBLASLT_EPILOGUE_GELU | 128),
    CUBLASLT_EPILOGUE_GELU_BIAS = (CUBLASLT_EPILOGUE_GELU | CUBLASLT_EPILOGUE_BIAS),
    CUBLASLT_EPILOGUE_GELU_AUX_BIAS = (CUBLASLT_EPILOGUE_GELU_AUX | CUBLASLT_EPILOGUE_BIAS),
    CUBLASLT_EPILOGUE_DGELU = 64 | 128,
    CUBLASLT_EPILOGUE_DGELU_BGRAD = CUBLASLT_EPILOGUE_DGELU | 16,
    CUBLASLT_EPILOGUE_BGRADA = 256,
    CUBLASLT_EPILOGUE_BGRADB = 512
} cublasLtEpilogue_t;

typedef enum {
    CUBLASLT_MATMUL_PREF_SEARCH_MODE = 0,           /* uint32_t */
    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,   /* uint64_t */
    CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK = 3, /* uint32_t */
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5, /* uint32_t */
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6, /* uint32_t */
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7, /* uint32_t */
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8, /* uint32_t */
    CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT = 9,       /* float */
    CUBLASLT_MATMUL_PREF_IMPL_MASK = 12             /* uint64_t */
} cublasLtMatmulPreferenceAttributes_t;

typedef struct cublasLtContext *cublasLtHandle_t;
typedef struct lf_shim_matmul_desc *cublasLtMatmulDesc_t;
typedef struct lf_shim_matrix_layout *cublasLtMatrixLayout_t;
typedef struct lf_shim_matmul_pref *cublasLtMatmulPreference_t;

typedef struct {
    uint64_t data[8];
} cublasLtMatmulAlgo_t;

typedef struct {
    cublasLtMatmulAlgo_t algo;
    size_t workspaceSize;
    cublasStatus_t state;
    float wavesCount;
    int reserved[4];
} cublasLtMatmulHeuristicResult_t;

cublasStatus_t cublasLtCreate(cublasLtHandle_t *lightHandle);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle);
size_t cublasLtGetVersion(void);
const char *cublasLtGetStatusName(cublasStatus_t status);
const char *cublasLtGetStatusString(cublasStatus_t status);

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *matmulDesc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t sizeInBytes);
cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
                                              void *buf, size_t sizeInBytes, size_t *sizeWritten);

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *matLayout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout);
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void *buf, size_t sizeInBytes);
cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr,
                                                void *buf, size_t sizeInBytes, size_t *sizeWritten);

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                                    size_t sizeInBytes);
cublasStatus_t cublasLtMatmulPreferenceGetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, void *buf,
                                                    size_t sizeInBytes, size_t *sizeWritten);

/* Validates the problem as cublasLtMatmul does (without the data
 * pointers) and returns one algorithm needing no workspace. */
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int *returnAlgoCount);

cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t Adesc, const void *B, cublasLtMatrixLayout_t Bdesc,
                              const void *beta, const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo, void *workspace,
                              size_t workspaceSizeInBytes, cudaStream_t stream);

/* Shim only: why the calling thread's last failing cuBLASLt call failed
 * ("" after a success). */
const char *lf_shim_cublaslt_last_detail(void);

#ifdef __cplusplus
}
#endif

#endif
