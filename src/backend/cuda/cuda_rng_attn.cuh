/*
 * Device copy of llmforge's counter-based RNG for the attention kernels'
 * dropout masks: Philox4x32-10 word 0 as a uniform float in [0,1), the
 * lf_rng_mix index mixer, and the keep test of one dropout element. The
 * same integer arithmetic step for step as src/core/rng.c
 * (lf_philox4x32 / lf_rng_uniform), include/llmforge/core.h (lf_rng_mix)
 * and src/backend/cpu/cpu_internal.h (lf__cpu_dropout_keep), so a mask
 * computed on the GPU equals the CPU's bit for bit: element i of a dropout
 * site (p, seed, key, offset) is kept when
 *   uniform(seed, LF_RNG_DROPOUT, mix(key, offset + i)) >= p.
 *
 * Why a copy: the pointwise family's cuda_rng.cuh is written in parallel;
 * until it lands this file stands in for it (same functions, to be merged
 * into that one file). Everything is static inline, so the two can coexist
 * in one library (never in one translation unit).
 *
 * Invariants: only 32x32->64 integer multiplies, xors and adds (exact on
 * any device); the float conversion (c0 >> 8) * 2^-24 is exact.
 *
 * Reference: Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy
 * as 1, 2, 3", SC'11 (Philox); Steele et al., SplitMix64 (the mixer).
 */
#ifndef LF_CUDA_RNG_ATTN_CUH
#define LF_CUDA_RNG_ATTN_CUH

#include <stdint.h>
#include "cuda_compat.h"

#define LF_CUDA_RNG_DROPOUT 4u /* LF_RNG_DROPOUT of include/llmforge/core.h */

static __device__ __forceinline__ uint64_t lf__cuda_rng_mix(uint64_t a, uint64_t b) {
    uint64_t z = a * 0x9E3779B97F4A7C15ull + b + 0x632BE59BD9B4E019ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* lf_rng_uniform: Philox4x32-10 of counter (index, purpose, 0), key seed;
 * word 0's top 24 bits over 2^24. */
static __device__ __forceinline__ float lf__cuda_rng_uniform(uint64_t seed, uint32_t purpose, uint64_t index) {
    uint32_t c0 = (uint32_t)index, c1 = (uint32_t)(index >> 32), c2 = purpose, c3 = 0;
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
#pragma unroll
    for (int r = 0; r < 10; r++) {
        const uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        const uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    return (float)(c0 >> 8) * (1.0f / 16777216.0f);
}

/* 1 when element i of the dropout site is kept (lf__cpu_dropout_keep). */
static __device__ __forceinline__ int lf__cuda_dropout_keep(float p, uint64_t seed, uint64_t key, uint64_t offset,
                                                            uint64_t i) {
    return lf__cuda_rng_uniform(seed, LF_CUDA_RNG_DROPOUT, lf__cuda_rng_mix(key, offset + i)) >= p;
}

#endif
