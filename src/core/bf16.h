/*
 * bfloat16 <-> float32 on the host, the one rounding every host path of
 * llmforge uses (the cpu backends' bf16 storage, the communicators' bf16
 * collectives). Internal to llmforge, not public API. Header-only: the
 * conversion loops inline and vectorize.
 */
#ifndef LF_CORE_BF16_H
#define LF_CORE_BF16_H

#include <stddef.h>
#include <stdint.h>

/* x rounded to the nearest bf16, ties to even (what oneDNN, PyTorch and
 * AVX512-BF16's vcvtne2ps2bf16 do); a NaN stays a (quiet) NaN, never rounded
 * into inf; a finite value past the largest bf16 rounds to inf.
 * Branch-free, so conversion loops vectorize. */
static inline uint16_t lf__bf16_from_f32(float f) {
    uint32_t u;
    __builtin_memcpy(&u, &f, sizeof u);
    const uint32_t rne = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    const uint32_t nan = (u >> 16) | 0x40u;
    return (uint16_t)(((u & 0x7FFFFFFFu) > 0x7F800000u) ? nan : rne);
}

/* The same value as an fp32 (bf16 bits in the high half): exact. */
static inline float lf__bf16_to_f32(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    __builtin_memcpy(&f, &u, sizeof f);
    return f;
}

static inline void lf__bf16_widen(float *out, const uint16_t *in, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = lf__bf16_to_f32(in[i]);
}

static inline void lf__bf16_round(uint16_t *out, const float *in, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = lf__bf16_from_f32(in[i]);
}

#endif
