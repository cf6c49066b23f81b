/*
 * The start-up check of the build's CPU baseline: a build assumes the
 * instruction set of its -march (LF_ARCH, default x86-64-v3 = AVX2+FMA, or
 * native; CMakeLists.txt), and on a CPU without it the first such
 * instruction dies with SIGILL, anywhere. lf_cpu_baseline_check says so
 * first, naming the baseline and the missing features.
 *
 * Invariants:
 *  - This file is compiled for plain x86-64 (-march=x86-64, CMakeLists.txt),
 *    whatever the build's baseline, and calls only libc and libgcc
 *    (__builtin_cpu_supports), so it runs on any x86-64 CPU. It must not
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

unsigned long long lf__cpu_features_here(void) {
    unsigned long long have = 0;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
#define LF_HAVE(bit, name) if (__builtin_cpu_supports(name)) have |= 1ULL << (bit);
    LF_CPU_FEATURES(LF_HAVE)
#undef LF_HAVE
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
#define LF_NAME(bit, name)                                                                   \
    if ((missing >> (bit)) & 1ULL && n < cap) n += (size_t)snprintf(msg + n, cap - n, " %s", name);
    LF_CPU_FEATURES(LF_NAME)
#undef LF_NAME
    return LF_ERR_UNSUPPORTED;
}

lf_status lf_cpu_baseline_check(char *msg, size_t cap) {
    return lf__cpu_baseline_compare(lf__cpu_baseline_required, lf__cpu_features_here(), LF_BUILD_ARCH, msg, cap);
}

const char *lf_cpu_baseline_name(void) { return LF_BUILD_ARCH; }
