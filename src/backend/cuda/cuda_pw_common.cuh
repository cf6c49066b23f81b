/*
 * Device helpers shared by the pointwise family's kernels (cuda_pointwise.cu,
 * cuda_norm.cu, cuda_loss.cu, cuda_optim.cu): fixed-shape warp and block
 * reductions, the CPU's float exp, the launch-size helpers.
 *
 * Invariants:
 *  - The reductions are butterflies (__shfl_xor_sync, full mask) and a
 *    fixed warp order: every lane ends with the same bits (float addition is
 *    commutative, and each node of the tree adds the same two partials in
 *    every lane), and the result does not depend on the schedule. Blocks
 *    using them are whole warps (blockDim.x a multiple of 32) and every
 *    thread of the block calls the block versions (they contain
 *    __syncthreads).
 *  - pw_expf_f32 is src/backend/cpu/cpu_math.h's lf__cpu_expf_f32 (Cephes'
 *    expf, argument clamped to +-87) operation for operation, so GELU and
 *    SwiGLU evaluate the CPU's function: results differ only where the
 *    compilers contract a*b+c into an FMA (nvcc does; a few ulp, see the
 *    tests' error models), not by a different approximation.
 */
#ifndef LF_CUDA_PW_COMMON_CUH
#define LF_CUDA_PW_COMMON_CUH

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include "cuda_compat.h"

#define PW_FULL 0xffffffffu

__device__ __forceinline__ float pw_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(PW_FULL, v, o);
    return v;
}

__device__ __forceinline__ double pw_warp_sum_d(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(PW_FULL, v, o);
    return v;
}

/* max ignoring NaN (x > m ? x : m, as lf__cpu_max_f32): exact in any order */
__device__ __forceinline__ float pw_warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float w = __shfl_xor_sync(PW_FULL, v, o);
        v = w > v ? w : v;
    }
    return v;
}

/* Block-wide versions: sh holds 32 slots; every thread returns the result.
 * The trailing barrier lets the caller reuse sh at once. */
__device__ __forceinline__ float pw_block_sum(float v, float *sh) {
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = pw_warp_sum(v);
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    float r = lane < nw ? sh[lane] : 0.0f;
    r = pw_warp_sum(r);
    __syncthreads();
    return r;
}

__device__ __forceinline__ double pw_block_sum_d(double v, double *sh) {
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = pw_warp_sum_d(v);
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    double r = lane < nw ? sh[lane] : 0.0;
    r = pw_warp_sum_d(r);
    __syncthreads();
    return r;
}

__device__ __forceinline__ float pw_block_max(float v, float *sh) {
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = pw_warp_max(v);
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    float r = lane < nw ? sh[lane] : -INFINITY;
    r = pw_warp_max(r);
    __syncthreads();
    return r;
}

/* lf__cpu_expf_f32 (cpu_math.h): Cephes' expf with |x| clamped to 87 on the
 * bits; 2^k built from k's bits (the 1.5*2^23 shifter), no float->int cast. */
__device__ __forceinline__ float pw_expf_f32(float x) {
    const uint32_t xb = __float_as_uint(x), ab = xb & 0x7fffffffu;
    const uint32_t cb = ab < 0x42AE0000u ? ab : 0x42AE0000u;
    x = __uint_as_float(cb | (xb & 0x80000000u));
    const float t = x * 1.44269504088896341f + 12582912.0f;
    const uint32_t ki = __float_as_uint(t) - 0x4B400000u;
    const float k = t - 12582912.0f;
    float r = x - k * 0.693359375f;
    r = r - k * -2.12194440e-4f;
    float p = 1.9875691500E-4f;
    p = p * r + 1.3981999507E-3f;
    p = p * r + 8.3334519073E-3f;
    p = p * r + 4.1665795894E-2f;
    p = p * r + 1.6666665459E-1f;
    p = p * r + 5.0000001201E-1f;
    p = p * r * r + r + 1.0f;
    return p * __uint_as_float((ki + 127u) << 23);
}

/* An activation output element: fp32 as computed, or (bf16 storage, the
 * cuda-bf16 table) that fp32 value rounded to nearest even by CUDA's
 * cvt.rn.bf16.f32 (NaN becomes the canonical 0x7fff). The value is computed
 * by the same expression either way and rounded only at the store, so a
 * bf16 output is exactly the rounding of the fp32 output. */
__device__ __forceinline__ void pw_store(float *o, size_t i, float v) { o[i] = v; }
__device__ __forceinline__ void pw_store(uint16_t *o, size_t i, float v) {
    o[i] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

/* Blocks for n items at `per` items a block, capped (kernels loop
 * grid-stride over the rest). At least 1. */
static inline unsigned pw_blocks(size_t n, size_t per, unsigned cap) {
    size_t b = per ? (n + per - 1) / per : 1;
    if (b < 1) b = 1;
    return b > cap ? cap : (unsigned)b;
}

#define PW_GRID_CAP 65535u /* also what gridDim.y/z allow: any kernel may use it */

#endif
