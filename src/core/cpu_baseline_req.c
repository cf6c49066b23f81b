/*
 * The features this build's baseline assumes, read from the compiler's own
 * macros: this file is compiled with the build's -march (LF_ARCH or native,
 * CMakeLists.txt) and holds data only, so it runs no instruction and is safe
 * on any CPU. cpu_baseline.c (compiled for plain x86-64) compares it with
 * CPUID.
 */
#include "core/cpu_baseline.h"

const unsigned long long lf__cpu_baseline_required = 0ULL
#ifdef __SSE3__
                                                     | 1ULL << 0
#endif
#ifdef __SSSE3__
                                                     | 1ULL << 1
#endif
#ifdef __SSE4_1__
                                                     | 1ULL << 2
#endif
#ifdef __SSE4_2__
                                                     | 1ULL << 3
#endif
#ifdef __POPCNT__
                                                     | 1ULL << 4
#endif
#ifdef __AVX__
                                                     | 1ULL << 5
#endif
#ifdef __AVX2__
                                                     | 1ULL << 6
#endif
#ifdef __FMA__
                                                     | 1ULL << 7
#endif
#ifdef __F16C__
                                                     | 1ULL << 8
#endif
#ifdef __BMI__
                                                     | 1ULL << 9
#endif
#ifdef __BMI2__
                                                     | 1ULL << 10
#endif
#ifdef __LZCNT__
                                                     | 1ULL << 11
#endif
#ifdef __MOVBE__
                                                     | 1ULL << 12
#endif
#ifdef __AVX512F__
                                                     | 1ULL << 13
#endif
#ifdef __AVX512BW__
                                                     | 1ULL << 14
#endif
#ifdef __AVX512VL__
                                                     | 1ULL << 15
#endif
#ifdef __AVX512DQ__
                                                     | 1ULL << 16
#endif
#ifdef __AVX512CD__
                                                     | 1ULL << 17
#endif
#ifdef __AVX512VNNI__
                                                     | 1ULL << 18
#endif
#ifdef __AVX512BF16__
                                                     | 1ULL << 19
#endif
#ifdef __AVX512IFMA__
                                                     | 1ULL << 20
#endif
#ifdef __AVX512VBMI__
                                                     | 1ULL << 21
#endif
#ifdef __AVX512VBMI2__
                                                     | 1ULL << 22
#endif
#ifdef __AVX512BITALG__
                                                     | 1ULL << 23
#endif
#ifdef __AVX512VPOPCNTDQ__
                                                     | 1ULL << 24
#endif
#ifdef __GFNI__
                                                     | 1ULL << 25
#endif
#ifdef __VAES__
                                                     | 1ULL << 26
#endif
#ifdef __VPCLMULQDQ__
                                                     | 1ULL << 27
#endif
    ;
