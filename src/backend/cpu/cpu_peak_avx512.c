/*
 * The FMA probe's AVX-512 kernel (cpu_peak.c says why): 24 independent
 * chains of 16-lane FMAs with the multiplier and addend in registers, 26 of
 * the 32 zmm registers. Compiled with -mavx512f/bw/vl/dq (CMakeLists.txt);
 * called only at the AVX-512 level or above.
 */
#include "cpu_internal.h"

#if defined(__x86_64__) && defined(__AVX512F__)
#include <immintrin.h>

double lf__cpu_peak_kernel_avx512(long iters, float seed) {
    const __m512 mul = _mm512_set1_ps(0.9999999f), add = _mm512_set1_ps(1e-7f);
    __m512 a[24];
    for (int c = 0; c < 24; c++) a[c] = _mm512_set1_ps(seed + (float)c);
    for (long i = 0; i < iters; i++) {
#define LF_F4(k) \
    a[k] = _mm512_fmadd_ps(a[k], mul, add); \
    a[k + 1] = _mm512_fmadd_ps(a[k + 1], mul, add); \
    a[k + 2] = _mm512_fmadd_ps(a[k + 2], mul, add); \
    a[k + 3] = _mm512_fmadd_ps(a[k + 3], mul, add);
        LF_F4(0) LF_F4(4) LF_F4(8) LF_F4(12) LF_F4(16) LF_F4(20)
#undef LF_F4
    }
    __m512 s = a[0];
    for (int c = 1; c < 24; c++) s = _mm512_add_ps(s, a[c]);
    float out[16];
    _mm512_storeu_ps(out, s);
    __asm__ volatile("" ::"r"(out) : "memory");
    return (double)iters * 24 * 16 * 2;
}
#else
double lf__cpu_peak_kernel_avx512(long iters, float seed) {
    (void)iters;
    (void)seed;
    return 0;
} /* never called */
#endif
