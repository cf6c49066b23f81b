/*
 * GELU (tanh approximation) element by element, shared by the baseline
 * build of cpu_pointwise.c and the AVX-512 build of cpu_gelu_v16.c: the
 * same operations, so the same bits at any vector width (fused
 * multiply-adds are fmaf, exact wherever they run; the rest is exact
 * integer work or one IEEE operation per element).
 *
 * Why a second build: at one layer of shakespeare_char (768x512) GELU is
 * compute-bound, and the same loop compiled for AVX-512 (32 zmm registers,
 * 16 lanes) ran 203 -> 147 us forward on an AMD EPYC Zen 4, where the
 * x86-64-v3 baseline has 16 ymm. cpu_pointwise.c calls the AVX-512 loops
 * when the backend's ISA level (cpu_isa.c) is AVX-512 or above.
 */
#ifndef LF_BACKEND_CPU_GELU_H
#define LF_BACKEND_CPU_GELU_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include "cpu_internal.h"
#include "cpu_math.h"

#define GELU_BETA 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_KAPPA 0.044715f

/* GELU's tanh form rewritten with 0.5 (1 + tanh(u)) = sigmoid(2u):
 * out = x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3); the same
 * function, one float exp instead of a tanh. Derivative:
 * s + 2 x s (1 - s) u', s = sigmoid(2u), u' = sqrt(2/pi) (1 + 3*0.044715 x^2).
 *
 * GELU is compute-bound at the sizes training runs (the fc activation of a
 * layer sits in L2), so its a*b+c terms are fused multiply-adds, spelled out
 * (GELU_FMA; the backend is built -ffp-contract=off, see CMakeLists.txt):
 * the forward and backward loops went from ~38 to ~26 vector instructions an
 * element, and shakespeare_char's GELU time fell by a third. fmaf is exact
 * (one rounding) wherever it runs, so every vector width, peel and tail
 * gives the same bits; where the build's baseline has no FMA instruction
 * (LF_ARCH below x86-64-v3, other CPUs without __FMA__) a*b+c is used
 * instead, as a libm fmaf call per element would be far slower. gelu_exp
 * is lf__cpu_expf_f32's method (cpu_math.h: Cephes' range reduction and
 * polynomial, the same clamp) with the fusions; lf__cpu_expf_f32 itself
 * stays as it is, because the attention kernels reproduce its operations
 * lane by lane. */
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
#define GELU_FMA(a, b, c) fmaf((a), (b), (c))
#else
#define GELU_FMA(a, b, c) ((a) * (b) + (c))
#endif

static inline float gelu_exp(float x) {
    const uint32_t xb = lf__cpu_fbits(x), ab = xb & 0x7fffffffu;
    const uint32_t cb = ab < 0x42AE0000u ? ab : 0x42AE0000u; /* |x| <= 87 */
    x = lf__cpu_bitsf(cb | (xb & 0x80000000u));
    const float t = GELU_FMA(x, 1.44269504088896341f, 12582912.0f);
    const uint32_t ki = lf__cpu_fbits(t) - 0x4B400000u;
    const float k = t - 12582912.0f;
    float r = GELU_FMA(k, -0.693359375f, x);
    r = GELU_FMA(k, 2.12194440e-4f, r);
    float p = 1.9875691500E-4f;
    p = GELU_FMA(p, r, 1.3981999507E-3f);
    p = GELU_FMA(p, r, 8.3334519073E-3f);
    p = GELU_FMA(p, r, 4.1665795894E-2f);
    p = GELU_FMA(p, r, 1.6666665459E-1f);
    p = GELU_FMA(p, r, 5.0000001201E-1f);
    p = GELU_FMA(p, r * r, r) + 1.0f;
    return p * lf__cpu_bitsf((ki + 127u) << 23);
}

/* exp(-2u) of GELU's sigmoid form */
static inline float gelu_e(float x, float x2) {
    return gelu_exp((-2.0f * GELU_BETA) * GELU_FMA(GELU_KAPPA * x2, x, x));
}

static inline float gelu(float x) { return x / (1.0f + gelu_e(x, x * x)); }

/* out = gelu(inp), n elements, threads over the range. */
static inline void gelu_forward_loop(float *restrict out, const float *restrict inp, size_t n) {
#pragma omp parallel if (n >= (size_t)LF_CPU_PAR_MIN)
#pragma omp for simd schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = gelu(inp[i]);
}

/* dinp = dout * gelu'(inp) (overwritten). */
static inline void gelu_backward_loop(float *restrict dinp, const float *restrict inp, const float *restrict dout,
                                      size_t n) {
#pragma omp parallel if (n >= (size_t)LF_CPU_PAR_MIN)
#pragma omp for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        const float x = inp[i], x2 = x * x;
        const float s = 1.0f / (1.0f + gelu_e(x, x2));
        /* s + 2 x s (1 - s) u' with u' = beta (1 + 3 kappa x^2) */
        const float du = GELU_FMA(3.0f * GELU_KAPPA * GELU_BETA, x2, GELU_BETA);
        const float grad = GELU_FMA((2.0f * x) * (s - s * s), du, s);
        dinp[i] = dout[i] * grad;
    }
}

#endif
