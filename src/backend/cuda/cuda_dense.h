/*
 * Kernels of the CUDA backend's dense op family (cuda_dense.cu), C-callable
 * for cuda_ops_dense.c: the matmul's bias gradient (the products themselves
 * go through cuBLASLt from the host glue) and the bias add where its
 * epilogue is not used, scale and add_inplace.
 *
 * Every wrapper launches on `stream` and returns the launch's error
 * (cudaGetLastError() after the launch, which also clears the calling
 * thread's last error), or cudaErrorInvalidValue for sizes it refuses
 * before launching. n == 0 (or N == 0 / OC == 0) launches nothing and
 * returns cudaSuccess. All pointers are device memory. Internal (lf__)
 * names: not part of llmforge's public API.
 */
#ifndef LF_CUDA_DENSE_H
#define LF_CUDA_DENSE_H

#include <stddef.h>
#include <stdint.h>
#include "cuda_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dbias[o] += sum_n dout[n,o] (column sums), in a fixed order: the same bits
 * every run and for every schedule (no atomics). N, OC >= 0. */
cudaError_t lf__cuk_bias_backward(float *dbias,      // (OC) +=
                                  const float *dout, // (N,OC)
                                  int N, int OC, cudaStream_t stream);

/* out[n,o] += bias[o] (the forward's bias where cuBLASLt's epilogue is not
 * used: a bias pointer not 16-byte aligned). N, OC >= 0. */
cudaError_t lf__cuk_bias_add(float *out,        // (N,OC) +=
                             const float *bias, // (OC)
                             int N, int OC, cudaStream_t stream);

/* x[i] *= s, i < n. */
cudaError_t lf__cuk_scale(float *x, size_t n, float s, cudaStream_t stream);

/* y[i] += x[i], i < n (y and x the same or disjoint). */
cudaError_t lf__cuk_add_inplace(float *y, const float *x, size_t n, cudaStream_t stream);

/* out[i] = inp[i] rounded to bf16 (nearest even; NaN -> 0x7fff), i < n;
 * out and inp disjoint. */
cudaError_t lf__cuk_cast_bf16(uint16_t *out, const float *inp, size_t n, cudaStream_t stream);

/* out[i] = the fp32 value of bf16 bits inp[i] (exact), i < n; disjoint. */
cudaError_t lf__cuk_widen_bf16(float *out, const uint16_t *inp, size_t n, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
