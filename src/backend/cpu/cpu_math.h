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
 */
#ifndef LF_BACKEND_CPU_MATH_H
#define LF_BACKEND_CPU_MATH_H

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

/* exp(x) for x <= 0 (softmax arguments x - max), rounded to float.
 * x < -150 gives 0 (float underflows there anyway). NaN propagates through
 * the arithmetic (the clamps keep it: comparisons with NaN are false); an
 * explicit NaN select would make GCC sink the math into a branch and give up
 * vectorizing under -ftrapping-math. */
static inline float lf__cpu_expf_nonpos(float x) {
    double y = (double)x;
    y = y < -150.0 ? -150.0 : y;
    y = y > 0.0 ? 0.0 : y;
    double s;
    double p = lf__cpu_exp_parts(y, &s);
    return (float)(s + s * p);
}

/* tanh(x) rounded to float, from tanh(a) = -expm1(-2a) / (expm1(-2a) + 2),
 * a = |x| <= 10 (tanh(10) rounds to 1.0f). expm1 = (s - 1) + s*p has no
 * cancellation: s == 1 exactly when |y| < ln2/2. NaN propagates as in
 * lf__cpu_expf_nonpos. */
static inline float lf__cpu_tanhf(float x) {
    double a = (double)x;
    a = a < 0 ? -a : a;
    a = a > 10.0 ? 10.0 : a;
    double s;
    double p = lf__cpu_exp_parts(-2.0 * a, &s);
    double em1 = (s - 1.0) + s * p;
    double t = -em1 / (em1 + 2.0);
    float tf = (float)t;
    return x < 0 ? -tf : tf;
}

#endif
