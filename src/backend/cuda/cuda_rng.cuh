/*
 * The counter-based RNG on the device: Philox4x32-10 and the index mixer,
 * the same functions as src/core/rng.c (lf_philox4x32, lf_rng_uniform) and
 * include/llmforge/core.h (lf_rng_mix), step for step, so a kernel draws
 * exactly the numbers the CPU draws. Dropout masks (backend_impl.h) are a
 * pure function of (seed, key, element index): a GPU mask equals the CPU's
 * bit for bit, backward recomputes it instead of storing it, and a batch
 * split across replicas draws the masks of the unsplit batch.
 *
 * Why ourselves: cuRAND's Philox (curand_init / curand_uniform) maps its
 * state to floats differently (32 bits scaled into (0,1]) and keys its
 * counter by subsequence and offset; its numbers are not rng.c's. The
 * generator is ~30 integer ops per draw, all in registers.
 *
 * Self-contained on purpose (only cuda_compat.h and <stdint.h>): the
 * attention kernels include it for attention dropout. Everything is
 * __host__ __device__ and header-inline; no state.
 *
 * Invariants (pinned by tests/cuda/test_cuda_pointwise.c against
 * lf_rng_uniform, lf_rng_mix and the CPU backend's dropout):
 *  - lf_cuda_philox4x32(seed, purpose, index, sub) == lf_philox4x32(...):
 *    counter (index lo, index hi, purpose, sub), key (seed lo, seed hi),
 *    10 rounds with multipliers 0xD2511F53 / 0xCD9E8D57 and key bumps
 *    0x9E3779B9 / 0xBB67AE85.
 *  - lf_cuda_rng_uniform = (word 0 >> 8) * 2^-24: 24 bits in [0, 1),
 *    exact in float (no rounding, so no device/host difference).
 *  - lf_cuda_dropout_keep(seed, key, j, p): element j (= offset + i) kept
 *    when lf_cuda_rng_uniform(seed, LF_CUDA_RNG_DROPOUT, lf_cuda_rng_mix(key,
 *    j)) >= p: src/backend/cpu/cpu_internal.h lf__cpu_dropout_keep.
 *
 * Reference: Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy
 * as 1, 2, 3" (SC'11); SplitMix64's finalizer (Steele, Lea, Flood 2014)
 * for the mixer.
 */
#ifndef LF_CUDA_RNG_CUH
#define LF_CUDA_RNG_CUH

#include <stdint.h>
#include "cuda_compat.h"

/* LF_RNG_DROPOUT of include/llmforge/core.h (lf_rng_purpose); the test's
 * comparison with the CPU backend's dropout catches a drift. */
#define LF_CUDA_RNG_DROPOUT 4u

/* lf_rng_mix: combine two 64-bit numbers into one stream index. */
__host__ __device__ __forceinline__ uint64_t lf_cuda_rng_mix(uint64_t a, uint64_t b) {
    uint64_t z = a * 0x9E3779B97F4A7C15ull + b + 0x632BE59BD9B4E019ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Philox4x32-10 of counter (index, purpose, sub) under key seed. */
__host__ __device__ __forceinline__ void lf_cuda_philox4x32(uint64_t seed, uint32_t purpose, uint64_t index,
                                                            uint32_t sub, uint32_t out[4]) {
    uint32_t c0 = (uint32_t)index, c1 = (uint32_t)(index >> 32), c2 = purpose, c3 = sub;
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    /* no #pragma unroll: the host compiler sees this __host__ function and
     * -Werror rejects an unknown pragma; nvcc unrolls 10 constant trips */
    for (int r = 0; r < 10; r++) {
        const uint64_t p0 = (uint64_t)0xD2511F53u * c0; /* a 32x32 -> 64 multiply (mul.wide.u32) */
        const uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
        const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        const uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* lf_rng_uniform: a float in [0, 1) from the top 24 bits of word 0. */
__host__ __device__ __forceinline__ float lf_cuda_rng_uniform(uint64_t seed, uint32_t purpose, uint64_t index) {
    uint32_t o[4];
    lf_cuda_philox4x32(seed, purpose, index, 0u, o);
    return (float)(o[0] >> 8) * (1.0f / 16777216.0f);
}

/* 1 when element j (the whole tensor's flat index: offset + i) of the
 * tensor keyed by (seed, key) is kept by dropout with drop probability p. */
__host__ __device__ __forceinline__ int lf_cuda_dropout_keep(uint64_t seed, uint64_t key, uint64_t j, float p) {
    return lf_cuda_rng_uniform(seed, LF_CUDA_RNG_DROPOUT, lf_cuda_rng_mix(key, j)) >= p;
}

#endif
