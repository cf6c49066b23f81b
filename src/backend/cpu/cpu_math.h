/*
 * exp and tanh for the CPU backend's element-wise loops, written so the
 * compiler can vectorize them (no calls, no tables, no float->int casts).
 *
 * Why not expf/tanhf: glibc's are scalar calls (tanhf ~10 ns), and they
 * dominate GELU, the attention softmax and the classifier. These compute in
 * double with relative error below 1e-12, so the float result is the
 * correctly rounded value except when the exact value lies within ~1e-12
 * relative of a rounding tie: at most 1 ulp from the true value, never worse
 * than glibc's expf/tanhf (which are themselves not correctly rounded).
 * tests/backend/test_cpu_ops.c sweeps them against double-precision libm.
 *
 * Method (the usual one, e.g. ARM optimized-routines exp): y = k ln2 + r with
 * |r| <= ln2/2, k found with the round-to-nearest shifter 1.5*2^52 (no
 * conversion to int, so no UB on NaN), expm1(r) by a degree-11 Taylor
 * polynomial (truncation < 1e-14 relative), 2^k built from k's bits.
 * Also: a float max that vectorizes under both GCC and clang.
 */
#ifndef LF_BACKEND_CPU_MATH_H
#define LF_BACKEND_CPU_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline double lf__cpu_asdouble(uint64_t u) {
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}
static inline uint64_t lf__cpu_asuint64(double d) {
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

/* expm1(y) for y in [-150, 0] (callers clamp), split as exp(y) = s*(1+p):
 * returns p and sets *scale = s = 2^k. Both exact to ~1e-15 relative. */
static inline double lf__cpu_exp_parts(double y, double *scale) {
    const double shift = 0x1.8p52, inv_ln2 = 0x1.71547652b82fep0;
    const double ln2_hi = 0x1.62e42fefa3800p-1, ln2_lo = 0x1.ef35793c76730p-45;
    double kd = y * inv_ln2 + shift;
    uint64_t ki = lf__cpu_asuint64(kd);
    kd -= shift;
    double r = (y - kd * ln2_hi) - kd * ln2_lo;
    /* expm1(r) = r + r^2/2! + ... + r^11/11!, Horner */
    double p = 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r;
    /* 2^k: k's low bits sit in the mantissa of kd+shift; shifting them into
     * the exponent field and adding 1.0's bits gives exponent 1023+k. */
    *scale = lf__cpu_asdouble((ki << 52) + 0x3ff0000000000000ull);
    return p;
}

static inline uint32_t lf__cpu_fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static inline float lf__cpu_bitsf(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Clamps and the NaN pass-through are done on the float's bits with integer
 * min and masks. Floating-point selects would let GCC specialise the clamped
 * path to a constant, sink the math into a branch and then (under the
 * default -ftrapping-math) refuse to if-convert and vectorize the loop. */
#define LF_CPU_F32_INF_BITS 0x7f800000u

/* exp(x) for x <= 0 (softmax arguments x - max), rounded to float. The
 * magnitude is clamped to 150 (float underflows to 0 well before); NaN
 * passes through. A positive x is treated as -x: callers never pass one. */
static inline float lf__cpu_expf_nonpos(float x) {
    const uint32_t xb = lf__cpu_fbits(x), ab = xb & 0x7fffffffu;
    const uint32_t cb = ab < 0x43160000u ? ab : 0x43160000u; /* min(|x|, 150.0f) */
    double s;
    const double p = lf__cpu_exp_parts(-(double)lf__cpu_bitsf(cb), &s);
    const uint32_t eb = lf__cpu_fbits((float)(s + s * p));
    const uint32_t nan_mask = 0u - (uint32_t)(ab > LF_CPU_F32_INF_BITS);
    return lf__cpu_bitsf((eb & ~nan_mask) | (xb & nan_mask));
}

/* tanh(x) rounded to float, from tanh(a) = -expm1(-2a) / (expm1(-2a) + 2)
 * with a = min(|x|, 10) (tanh(10) rounds to 1.0f) and the sign of x put
 * back. expm1 = (s - 1) + s*p has no cancellation: s == 1 exactly when
 * 2a < ln2/2, and the polynomial p is expm1 itself there. NaN passes through. */
static inline float lf__cpu_tanhf(float x) {
    const uint32_t xb = lf__cpu_fbits(x), ab = xb & 0x7fffffffu;
    const uint32_t cb = ab < 0x41200000u ? ab : 0x41200000u; /* min(|x|, 10.0f) */
    double s;
    const double p = lf__cpu_exp_parts(-2.0 * (double)lf__cpu_bitsf(cb), &s);
    const double em1 = (s - 1.0) + s * p;
    const uint32_t tb = lf__cpu_fbits((float)(-em1 / (em1 + 2.0))) | (xb & 0x80000000u);
    const uint32_t nan_mask = 0u - (uint32_t)(ab > LF_CPU_F32_INF_BITS);
    return lf__cpu_bitsf((tb & ~nan_mask) | (xb & nan_mask));
}

/* exp(x) in float arithmetic, for GELU's sigmoid form where double
 * precision buys nothing: Cephes' expf (Moshier) range reduction
 * x = k ln2 + r with a two-part ln2 and its degree-6 polynomial, relative
 * error about 1e-7 (<= 2 ulp) on the clamped domain [-87, 87]; beyond it
 * the result saturates at exp(-87) or exp(87), which is what the callers'
 * x / (1 + e) needs. k is found with the 1.5*2^23 shifter, so no float->int
 * conversion; 2^k is built from k's bits. */
static inline float lf__cpu_expf_f32(float x) {
    /* clamp |x| to 87 on the bits (integer min keeps the loop vectorizable,
     * see above); exp(+-87) is finite in float */
    const uint32_t xb = lf__cpu_fbits(x), ab = xb & 0x7fffffffu;
    const uint32_t cb = ab < 0x42AE0000u ? ab : 0x42AE0000u;
    x = lf__cpu_bitsf(cb | (xb & 0x80000000u));
    const float t = x * 1.44269504088896341f + 12582912.0f;
    const uint32_t ki = lf__cpu_fbits(t) - 0x4B400000u;
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
    return p * lf__cpu_bitsf((ki + 127u) << 23);
}

/* max of x[0..n-1] ignoring NaNs (-INFINITY when n == 0). Sixteen running
 * maxima updated by element-wise selects: a float max *reduction* is not
 * vectorized by clang (NaN semantics), an element-wise select is by both. */
static inline float lf__cpu_max_f32(const float *x, int n) {
    float m[16];
    for (int l = 0; l < 16; l++) m[l] = -INFINITY;
    int j = 0;
    for (; j + 16 <= n; j += 16) {
#pragma omp simd
        for (int l = 0; l < 16; l++) m[l] = x[j + l] > m[l] ? x[j + l] : m[l];
    }
    float mx = -INFINITY;
    for (; j < n; j++) mx = x[j] > mx ? x[j] : mx;
    for (int l = 0; l < 16; l++) mx = m[l] > mx ? m[l] : mx;
    return mx;
}

#endif
