/*
 * The start-up check of the build's CPU baseline: a build assumes the
 * instruction set of its -march (LF_ARCH, default x86-64-v3 = AVX2+FMA, or
 * native; CMakeLists.txt), and on a CPU without it the first such
 * instruction dies with SIGILL, anywhere. lf_cpu_baseline_check says so
 * first, naming the baseline and the missing features.
 *
 * Invariants:
 *  - This file is compiled for plain x86-64 (-march=x86-64, CMakeLists.txt),
 *    whatever the build's baseline, and reads CPUID and XCR0 itself, so it
 *    runs on any x86-64 CPU. It must not
 *    call into the rest of llmforge (built for the baseline): not even
 *    lf_fail, hence the caller's buffer for the message.
 *  - It runs before anything else of llmforge: the CLI calls it from a
 *    constructor (tools/llmforge/cpu_guard.c, also built for plain x86-64);
 *    other programs call it first thing in main, which they must build
 *    without the baseline's flags for the check to come before any AVX
 *    instruction.
 *  - On CPUs other than x86 there is nothing to check: LF_OK.
 */
#include <stdio.h>
#include <string.h>
#include "core/cpu_baseline.h"

#ifndef LF_BUILD_ARCH
#define LF_BUILD_ARCH "default"
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

/* Where CPUID reports each feature of LF_CPU_FEATURES, by bit: (leaf,
 * subleaf, register 0-3 = EAX EBX ECX EDX, bit), and which register state
 * the OS must save for it (1: YMM, 2: ZMM). Read straight from CPUID rather
 * than through __builtin_cpu_supports, whose feature names differ between
 * compilers (clang 14 knows no "lzcnt" or "movbe"), so the fuzzing build
 * (clang) compiles this file too. */
static const struct {
    unsigned leaf, sub, reg, bit, os;
} k_where[28] = {
    [0] = {1, 0, 2, 0, 0},   [1] = {1, 0, 2, 9, 0},   [2] = {1, 0, 2, 19, 0},  [3] = {1, 0, 2, 20, 0},
    [4] = {1, 0, 2, 23, 0},  [5] = {1, 0, 2, 28, 1},  [6] = {7, 0, 1, 5, 1},   [7] = {1, 0, 2, 12, 1},
    [8] = {1, 0, 2, 29, 1},  [9] = {7, 0, 1, 3, 0},   [10] = {7, 0, 1, 8, 0},  [11] = {0x80000001u, 0, 2, 5, 0},
    [12] = {1, 0, 2, 22, 0}, [13] = {7, 0, 1, 16, 2}, [14] = {7, 0, 1, 30, 2}, [15] = {7, 0, 1, 31, 2},
    [16] = {7, 0, 1, 17, 2}, [17] = {7, 0, 1, 28, 2}, [18] = {7, 0, 2, 11, 2}, [19] = {7, 1, 0, 5, 2},
    [20] = {7, 0, 1, 21, 2}, [21] = {7, 0, 2, 1, 2},  [22] = {7, 0, 2, 6, 2},  [23] = {7, 0, 2, 12, 2},
    [24] = {7, 0, 2, 14, 2}, [25] = {7, 0, 2, 8, 0},  [26] = {7, 0, 2, 9, 1},  [27] = {7, 0, 2, 10, 1},
};

static int cpuid_reg(unsigned leaf, unsigned sub, unsigned reg, unsigned *out) {
    unsigned r[4] = {0, 0, 0, 0};
    if ((unsigned)__get_cpuid_max(leaf & 0x80000000u, NULL) < leaf) return 0;
    __cpuid_count(leaf, sub, r[0], r[1], r[2], r[3]);
    *out = r[reg];
    return 1;
}
#endif

unsigned long long lf__cpu_features_here(void) {
    unsigned long long have = 0;
#if defined(__x86_64__) || defined(__i386__)
    /* the register state the OS saves (XCR0): YMM needs SSE+AVX state,
     * ZMM also the opmask and both upper-ZMM states */
    unsigned ecx1 = 0, xcr0 = 0;
    if (cpuid_reg(1, 0, 2, &ecx1) && (ecx1 & (1u << 27))) { /* OSXSAVE */
        unsigned eax, edx;
        __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
        xcr0 = eax;
    }
    const int ymm = (xcr0 & 0x6u) == 0x6u, zmm = ymm && (xcr0 & 0xe0u) == 0xe0u;
    for (unsigned i = 0; i < sizeof k_where / sizeof *k_where; i++) {
        unsigned v = 0;
        if (!cpuid_reg(k_where[i].leaf, k_where[i].sub, k_where[i].reg, &v) || !(v & (1u << k_where[i].bit))) continue;
        if ((k_where[i].os == 1 && !ymm) || (k_where[i].os == 2 && !zmm)) continue;
        have |= 1ULL << i;
    }
#endif
    return have;
}

lf_status lf__cpu_baseline_compare(unsigned long long required, unsigned long long have, const char *arch, char *msg,
                                   size_t cap) {
    const unsigned long long missing = required & ~have;
    if (cap) msg[0] = '\0';
    if (!missing) return LF_OK;
    size_t n = (size_t)snprintf(msg, cap, "this build of llmforge assumes the CPU baseline '%s'; this CPU lacks",
                                arch ? arch : "?");
#define LF_NAME(bit, name) \
    if ((missing >> (bit)) & 1ULL && n < cap) n += (size_t)snprintf(msg + n, cap - n, " %s", name);
    LF_CPU_FEATURES(LF_NAME)
#undef LF_NAME
    return LF_ERR_UNSUPPORTED;
}

lf_status lf_cpu_baseline_check(char *msg, size_t cap) {
    return lf__cpu_baseline_compare(lf__cpu_baseline_required, lf__cpu_features_here(), LF_BUILD_ARCH, msg, cap);
}

const char *lf_cpu_baseline_name(void) { return LF_BUILD_ARCH; }
