/*
 * The GPU's measured matrix rates, the peaks scripts/gpu-check.sh reports
 * MFU against: cuBLASLt GEMMs M = N = K = SIZE (8192 by default), each timed
 * with CUDA events after 3 warm-ups, the median of 10:
 *   - fp32: CUDA_R_32F operands, CUBLAS_COMPUTE_32F, no TF32 (what the
 *     "cuda" backend's matmuls use);
 *   - bf16: CUDA_R_16BF operands and output, CUBLAS_COMPUTE_32F (fp32
 *     accumulation, tensor cores: what "cuda-bf16" uses), the rate the
 *     spec's dense bf16 peak (989 TFLOP/s on H100/H200 SXM) is quoted for.
 * Prints one JSON line. Built with LF_CUDA only (cmake/cuda.cmake); on the
 * shim it would measure nothing worth printing.
 *   cuda_peak [SIZE]
 */
#include <stdio.h>
#include <stdlib.h>
#include "cuda_api.h"

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "cuda_peak: %s: %s\n", #x, cudaGetErrorString(e_));                  \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)
#define LT(x)                                                                                      \
    do {                                                                                           \
        cublasStatus_t s_ = (x);                                                                   \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                         \
            fprintf(stderr, "cuda_peak: %s: status %d\n", #x, (int)s_);                            \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

static int cmp(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* The median ms of one n^3 GEMM with operands and output of type dt. 0 on
 * success; 1 after a message. */
static int gemm_ms(cublasLtHandle_t lt, long n, cudaDataType_t dt, size_t elem, void *ws, size_t ws_bytes,
                   double *med) {
    void *a, *b, *c;
    const size_t bytes = (size_t)n * (size_t)n * elem;
    CK(cudaMalloc(&a, bytes));
    CK(cudaMalloc(&b, bytes));
    CK(cudaMalloc(&c, bytes));
    CK(cudaMemset(a, 0x3c, bytes)); /* fp32 0x3c3c3c3c ~ 0.0115, bf16 0x3c3c ~ 0.0115: finite */
    CK(cudaMemset(b, 0x3c, bytes));
    cublasLtMatmulDesc_t op;
    LT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasLtMatrixLayout_t la;
    LT(cublasLtMatrixLayoutCreate(&la, dt, (uint64_t)n, (uint64_t)n, n));
    cublasLtMatmulPreference_t pref;
    LT(cublasLtMatmulPreferenceCreate(&pref));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                            sizeof ws_bytes));
    cublasLtMatmulHeuristicResult_t h;
    int found = 0;
    LT(cublasLtMatmulAlgoGetHeuristic(lt, op, la, la, la, la, pref, 1, &h, &found));
    if (!found) {
        fprintf(stderr, "cuda_peak: no cuBLASLt algorithm for a %ld^3 GEMM of type %d\n", n, (int)dt);
        return 1;
    }
    const float alpha = 1.0f, beta = 0.0f;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float ms[10];
    for (int i = 0; i < 13; i++) {
        CK(cudaEventRecord(e0, 0));
        LT(cublasLtMatmul(lt, op, &alpha, a, la, b, la, &beta, c, la, c, la, &h.algo, ws, ws_bytes, 0));
        CK(cudaEventRecord(e1, 0));
        CK(cudaEventSynchronize(e1));
        if (i >= 3) CK(cudaEventElapsedTime(&ms[i - 3], e0, e1));
    }
    qsort(ms, 10, sizeof ms[0], cmp);
    *med = 0.5 * (ms[4] + ms[5]);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatmulDescDestroy(op);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    return 0;
}

int main(int argc, char **argv) {
    const long n = argc > 1 ? atol(argv[1]) : 8192;
    if (n < 256 || n > 32768) {
        fprintf(stderr, "cuda_peak: SIZE %ld outside 256..32768\n", n);
        return 2;
    }
    void *ws;
    const size_t ws_bytes = (size_t)32 << 20;
    CK(cudaMalloc(&ws, ws_bytes));
    cublasLtHandle_t lt;
    LT(cublasLtCreate(&lt));
    double ms32 = 0, ms16 = 0;
    if (gemm_ms(lt, n, CUDA_R_32F, 4, ws, ws_bytes, &ms32)) return 1;
    if (gemm_ms(lt, n, CUDA_R_16BF, 2, ws, ws_bytes, &ms16)) return 1;
    const double flop = 2.0 * (double)n * (double)n * (double)n;
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("{\"device\": \"%s\", \"size\": %ld, \"compute\": \"CUBLAS_COMPUTE_32F\", \"fp32_median_ms\": %.4f, "
           "\"fp32_gemm_gflops\": %.1f, \"bf16_median_ms\": %.4f, \"bf16_gemm_gflops\": %.1f}\n",
           prop.name, n, ms32, flop / (ms32 * 1e-3) / 1e9, ms16, flop / (ms16 * 1e-3) / 1e9);
    cublasLtDestroy(lt);
    cudaFree(ws);
    return 0;
}
