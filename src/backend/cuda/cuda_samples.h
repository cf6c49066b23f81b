/*
 * The sample kernels of the CUDA build (cuda_samples.cu), C-callable. They
 * prove that one .cu source compiles both ways (nvcc: lf_backend_cuda;
 * host C++ + the shim: lf_backend_cuda_shim) and gives the same results;
 * the backend's op kernels replace them.
 *
 * Every wrapper launches on `stream` and returns the launch's error
 * (cudaGetLastError() after the launch, which also clears the calling
 * thread's last error), or cudaErrorInvalidValue for arguments it refuses
 * itself, before launching. All pointers are device memory. Internal
 * (lf__) names: not part of llmforge's public API.
 */
#ifndef LF_CUDA_SAMPLES_H
#define LF_CUDA_SAMPLES_H

#include <stdint.h>
#include "cuda_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out[i] = a[i] + b[i], i < n; one thread per element, `block` threads a
 * block (any value: a bad one is the launch's error). */
cudaError_t lf__cuda_sample_vadd(float *out,     // (n)
                                 const float *a, // (n)
                                 const float *b, // (n)
                                 int n, int block, cudaStream_t stream);

/* out[0] = sum of x[0..n): `grid` blocks of `block` threads (a power of two)
 * each sum a grid-stride slice in dynamic shared memory (a __syncthreads
 * tree) into partial[blockIdx.x]; one more block sums the partials. Fixed
 * order: the same bits every run. */
cudaError_t lf__cuda_sample_block_sum(float *out,     // (1)
                                      float *partial, // (grid) scratch
                                      const float *x, // (n)
                                      int n, int grid, int block, cudaStream_t stream);

/* The same sum with warp shuffles: each warp reduces with
 * __shfl_down_sync, warp 0 reduces the warps' sums (static __shared__)
 * with __shfl_xor_sync. block: a multiple of 32. */
cudaError_t lf__cuda_sample_warp_sum(float *out,     // (1)
                                     float *partial, // (grid) scratch
                                     const float *x, // (n)
                                     int n, int grid, int block, cudaStream_t stream);

/* Round trips through the 16-bit types: bf16_bits[i] = __float2bfloat16(x[i])
 * and bf16_back[i] its value as float; f16_bits / f16_back the same with
 * __float2half. */
cudaError_t lf__cuda_sample_lowp_round(uint16_t *bf16_bits, // (n)
                                       float *bf16_back,    // (n)
                                       uint16_t *f16_bits,  // (n)
                                       float *f16_back,     // (n)
                                       const float *x,      // (n)
                                       int n, int block, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
