/*
 * Reference conversions float -> bf16 / fp16 for the CUDA tests, written
 * from the formats' definitions in double arithmetic (scale by the unit in
 * the last place, round with nearbyint, which is ties-to-even in the
 * default rounding mode), not from bit tricks, so they check the shim's
 * and the GPU's conversions independently. CUDA's conventions: a NaN
 * becomes 0x7fff in both formats; fp16 overflow becomes infinity.
 */
#ifndef LF_TEST_LOWP_REF_H
#define LF_TEST_LOWP_REF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float ref_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* the bf16 or fp16 nearest |x| (ties to even) as a double, or INFINITY;
 * mant: significand bits after the point; emin: smallest normal exponent;
 * max: largest finite value */
static inline double ref_round_mag(double ax, int mant, int emin, double max) {
    if (ax == 0.0) return 0.0;
    int e = ilogb(ax);
    if (e < emin) e = emin;
    double ulp = ldexp(1.0, e - mant);
    double v = nearbyint(ax / ulp) * ulp;
    return v > max ? INFINITY : v;
}

static inline uint16_t ref_bf16_bits(float f) {
    if (isnan(f)) return 0x7fff;
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    if (isinf(f)) return (uint16_t)(sign | 0x7f80);
    double v = ref_round_mag(fabs((double)f), 7, -126, ldexp(255.0 / 128.0, 127));
    if (isinf(v)) return (uint16_t)(sign | 0x7f80);
    float fv = (float)v; /* exact: v is a bf16 value */
    uint32_t u;
    memcpy(&u, &fv, 4);
    return (uint16_t)(sign | (u >> 16));
}

static inline uint16_t ref_f16_bits(float f) {
    if (isnan(f)) return 0x7fff;
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    if (isinf(f)) return (uint16_t)(sign | 0x7c00);
    double v = ref_round_mag(fabs((double)f), 10, -14, 65504.0);
    if (isinf(v)) return (uint16_t)(sign | 0x7c00);
    if (v == 0.0) return sign;
    int e = ilogb(v);
    if (e < -14) return (uint16_t)(sign | (uint16_t)(v / ldexp(1.0, -24))); /* subnormal */
    uint16_t m = (uint16_t)(v / ldexp(1.0, e - 10) - 1024.0);
    return (uint16_t)(sign | ((e + 15) << 10) | m);
}

static inline double ref_bf16_value(uint16_t h) { return (double)ref_bits_f32((uint32_t)h << 16); }

static inline double ref_f16_value(uint16_t h) {
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double s = (h & 0x8000) ? -1.0 : 1.0;
    if (e == 0x1f) return m ? NAN : s * INFINITY;
    if (e == 0) return s * ldexp((double)m, -24);
    return s * ldexp((double)(1024 + m), e - 25);
}

#endif
