/*
 * The CPU features a build assumes (its -march baseline) and those the CPU
 * running it has, as bit masks, for the start-up check (cpu_baseline.c).
 * Internal to src/core; the public entry is lf_cpu_baseline_check
 * (llmforge/core.h).
 */
#ifndef LF_CORE_CPU_BASELINE_H
#define LF_CORE_CPU_BASELINE_H

#include <stddef.h>
#include "llmforge/core.h"

/* One bit per feature; LF_CPU_FEATURES(X) lists (bit, name) pairs, the name
 * being the one messages print (and GCC's -m option less the "m"); where
 * CPUID reports each bit: cpu_baseline.c's k_where. */
// clang-format off
#define LF_CPU_FEATURES(X)                                                                                   \
    X(0, "sse3") X(1, "ssse3") X(2, "sse4.1") X(3, "sse4.2") X(4, "popcnt") X(5, "avx") X(6, "avx2")          \
    X(7, "fma") X(8, "f16c") X(9, "bmi") X(10, "bmi2") X(11, "lzcnt") X(12, "movbe") X(13, "avx512f")      \
    X(14, "avx512bw") X(15, "avx512vl") X(16, "avx512dq") X(17, "avx512cd") X(18, "avx512vnni")           \
    X(19, "avx512bf16") X(20, "avx512ifma") X(21, "avx512vbmi") X(22, "avx512vbmi2")                       \
    X(23, "avx512bitalg") X(24, "avx512vpopcntdq") X(25, "gfni") X(26, "vaes") X(27, "vpclmulqdq")
// clang-format on

/* The features this build's baseline assumes (cpu_baseline_req.c, compiled
 * with the build's flags: the compiler's own macros say what it may emit). */
extern const unsigned long long lf__cpu_baseline_required;
/* The features of the CPU running this process (0 on CPUs other than x86). */
unsigned long long lf__cpu_features_here(void);
/* The message and status of the check as a pure function: LF_OK when have
 * covers required; else LF_ERR_UNSUPPORTED and msg says which baseline
 * (arch) needs what, and which features are missing. */
lf_status lf__cpu_baseline_compare(unsigned long long required, unsigned long long have, const char *arch, char *msg,
                                   size_t cap);

#endif
