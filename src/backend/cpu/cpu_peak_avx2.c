/*
 * The FMA probe's AVX2 kernel (cpu_peak.c says why): 12 independent chains
 * of 8-lane FMAs with the multiplier and addend in registers, 14 of the 16
 * ymm registers, so nothing spills. Compiled with -mavx2 -mfma and AVX-512
 * off (CMakeLists.txt); called only at the AVX2 level or above.
 */
#include "cpu_internal.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

double lf__cpu_peak_kernel_avx2(long iters, float seed) {
    const __m256 mul = _mm256_set1_ps(0.9999999f), add = _mm256_set1_ps(1e-7f);
    __m256 a[12];
    for (int c = 0; c < 12; c++) a[c] = _mm256_set1_ps(seed + (float)c);
    for (long i = 0; i < iters; i++) {
        a[0] = _mm256_fmadd_ps(a[0], mul, add);
        a[1] = _mm256_fmadd_ps(a[1], mul, add);
        a[2] = _mm256_fmadd_ps(a[2], mul, add);
        a[3] = _mm256_fmadd_ps(a[3], mul, add);
        a[4] = _mm256_fmadd_ps(a[4], mul, add);
        a[5] = _mm256_fmadd_ps(a[5], mul, add);
        a[6] = _mm256_fmadd_ps(a[6], mul, add);
        a[7] = _mm256_fmadd_ps(a[7], mul, add);
        a[8] = _mm256_fmadd_ps(a[8], mul, add);
        a[9] = _mm256_fmadd_ps(a[9], mul, add);
        a[10] = _mm256_fmadd_ps(a[10], mul, add);
        a[11] = _mm256_fmadd_ps(a[11], mul, add);
    }
    __m256 s = a[0];
    for (int c = 1; c < 12; c++) s = _mm256_add_ps(s, a[c]);
    float out[8];
    _mm256_storeu_ps(out, s);
    __asm__ volatile("" ::"r"(out) : "memory");
    return (double)iters * 12 * 8 * 2;
}
#else
double lf__cpu_peak_kernel_avx2(long iters, float seed) {
    (void)iters;
    (void)seed;
    return 0;
} /* never called */
#endif
