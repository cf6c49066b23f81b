/*
 * Device copy of llmforge's counter-based RNG for the attention kernels'
 * dropout masks: Philox4x32-10 (src/core/rng.c lf_philox4x32), word 0 as a
 * uniform float in [0,1) (lf_rng_uniform), the index mixer
 * (include/llmforge/core.h lf_rng_mix) and the keep test of one dropout
 * element (src/backend/cpu/cpu_internal.h lf__cpu_dropout_keep), the same
 * integer arithmetic step for step, so a mask drawn on the GPU equals the
 * CPU's bit for bit: element j (= offset + i) of a dropout site is kept when
 *   uniform(seed, LF_RNG_DROPOUT, mix(key, j)) >= p.
 *
 * Why a copy: the pointwise family's cuda_rng.cuh is written in parallel;
 * until the branches meet this file stands in for it with the same names
 * and signatures (lf_cuda_rng_mix, lf_cuda_philox4x32, lf_cuda_rng_uniform,
 * lf_cuda_dropout_keep), so the merge is: include "cuda_rng.cuh" in
 * cuda_attention.cu and delete this file. Until then the functions are
 * static, so the two headers never give one function two definitions in
 * the library (and a file including both fails to compile, loudly).
 *
 * Invariants: only 32x32->64 integer multiplies, xors and adds (exact on
 * any device); the float conversion (c0 >> 8) * 2^-24 is exact. No
 * #pragma unroll (the host compiler sees the __host__ side); nvcc unrolls
 * the 10 constant trips itself.
 *
 * Reference: Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy
 * as 1, 2, 3", SC'11 (Philox); Steele, Lea, Flood 2014 (SplitMix64's
 * finalizer, the mixer).
 */
#ifndef LF_CUDA_RNG_ATTN_CUH
#define LF_CUDA_RNG_ATTN_CUH

#include <stdint.h>
#include "cuda_compat.h"

#define LF_CUDA_RNG_DROPOUT 4u /* LF_RNG_DROPOUT of include/llmforge/core.h */

static __host__ __device__ __forceinline__ uint64_t lf_cuda_rng_mix(uint64_t a, uint64_t b) {
    uint64_t z = a * 0x9E3779B97F4A7C15ull + b + 0x632BE59BD9B4E019ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Philox4x32-10 of counter (index lo, index hi, purpose, sub), key seed. */
static __host__ __device__ __forceinline__ void lf_cuda_philox4x32(uint64_t seed, uint32_t purpose, uint64_t index,
                                                                   uint32_t sub, uint32_t out[4]) {
    uint32_t c[4] = {(uint32_t)index, (uint32_t)(index >> 32), purpose, sub};
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        const uint64_t p0 = (uint64_t)0xD2511F53u * c[0], p1 = (uint64_t)0xCD9E8D57u * c[2];
        const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c[1] ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c[3] ^ k1;
        c[1] = (uint32_t)p1;
        c[3] = (uint32_t)p0;
        c[0] = n0;
        c[2] = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    for (int i = 0; i < 4; i++) out[i] = c[i];
}

/* lf_rng_uniform: word 0's top 24 bits over 2^24. */
static __host__ __device__ __forceinline__ float lf_cuda_rng_uniform(uint64_t seed, uint32_t purpose, uint64_t index) {
    uint32_t o[4];
    lf_cuda_philox4x32(seed, purpose, index, 0u, o);
    return (float)(o[0] >> 8) * (1.0f / 16777216.0f);
}

/* 1 when element j (offset + i: the flat index in the whole batch's tensor)
 * of the dropout site keyed by (seed, key) is kept at drop probability p. */
static __host__ __device__ __forceinline__ int lf_cuda_dropout_keep(uint64_t seed, uint64_t key, uint64_t j, float p) {
    return lf_cuda_rng_uniform(seed, LF_CUDA_RNG_DROPOUT, lf_cuda_rng_mix(key, j)) >= p;
}

#endif
