/*
 * The vector ISA of the CPU backend, chosen once per process: what CPUID
 * says (AVX2+FMA; AVX-512 F/BW/VL/DQ; AVX512-BF16; AMX tiles with bf16),
 * capped by the environment variable LLMFORGE_CPU_ISA. Every ISA-dependent
 * choice of the backend follows it, so one variable moves them all:
 *  - the small-T attention kernels (cpu_attention.c: 8-lane AVX2 or 16-lane
 *    AVX-512 code, both in every x86-64 binary);
 *  - the GEMV kernels (cpu_gemv.c: AVX-512, AVX2+FMA or plain C);
 *  - the FMA peak probe (cpu_peak.c) that MFU is reported against;
 *  - oneDNN, through dnnl_set_max_cpu_isa before its first use, so the fp32
 *    sgemm (cpu_gemm.c) and the bf16 matmul (cpu_bf16.c) run at the same
 *    level; without LLMFORGE_CPU_ISA oneDNN is left to its own CPUID
 *    detection and its own ONEDNN_MAX_CPU_ISA, as before.
 * This is oneDNN's model (dispatch from CPUID, a variable to cap it) for the
 * kernels of our own; the build's baseline (-march=x86-64-v3 by default,
 * CMakeLists.txt) only has to cover the lowest level.
 *
 * Levels, ordered: generic (no AVX2: plain C kernels; a build with
 * LF_ARCH=x86-64 on an older CPU, or a CPU other than x86), avx2, avx512,
 * avx512_bf16, amx. LLMFORGE_CPU_ISA names one; an unknown value, or a level
 * above the CPU's, is an error (lf_backend_cpu_check, which the CLI runs
 * before any work): never silently ignored. Until reported, the CPUID level
 * stays in use.
 *
 * Capping is not emulation: LLMFORGE_CPU_ISA=avx2 on an AVX-512 machine runs
 * the AVX2 code paths on that machine's cores, caches and clocks, which an
 * AVX2-only CPU does not have.
 *
 * Thread-safe: decided under pthread_once at the first call.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <oneapi/dnnl/dnnl.h>
#include "cpu_internal.h"
#include "llmforge/backend.h"
#include "llmforge/backend_cpu.h"

static const char *const g_names[] = {"generic", "avx2", "avx512", "avx512_bf16", "amx"};

const char *lf__cpu_isa_name(lf__cpu_isa_level l) {
    return (unsigned)l < sizeof g_names / sizeof *g_names ? g_names[l] : "?";
}

lf__cpu_isa_level lf__cpu_isa_cpuid(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) return LF_CPU_ISA_GENERIC;
    if (!(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")))
        return LF_CPU_ISA_AVX2;
    if (!__builtin_cpu_supports("avx512bf16")) return LF_CPU_ISA_AVX512;
    if (!(__builtin_cpu_supports("amx-tile") && __builtin_cpu_supports("amx-bf16"))) return LF_CPU_ISA_AVX512_BF16;
    return LF_CPU_ISA_AMX;
#else
    return LF_CPU_ISA_GENERIC;
#endif
}

void lf__cpu_isa_choose(const char *env, lf__cpu_isa_level cpu, lf__cpu_isa_choice *c) {
    memset(c, 0, sizeof *c);
    c->cpu = cpu;
    c->isa = cpu;
    if (!env || !*env) return;
    int want = -1;
    for (int i = 0; i < (int)(sizeof g_names / sizeof *g_names); i++)
        if (!strcasecmp(env, g_names[i])) want = i;
    if (want < 0) {
        c->error = LF_CPU_ISA_ERR_UNKNOWN;
        snprintf(c->message, sizeof c->message,
                 "environment variable LLMFORGE_CPU_ISA='%.40s' is not one of generic, avx2, avx512, avx512_bf16, "
                 "amx",
                 env);
        return;
    }
    if (want > (int)cpu) {
        c->error = LF_CPU_ISA_ERR_ABOVE_CPU;
        snprintf(c->message, sizeof c->message,
                 "environment variable LLMFORGE_CPU_ISA='%.40s' asks for more than this CPU has (%s)", env,
                 lf__cpu_isa_name(cpu));
        return;
    }
    c->isa = (lf__cpu_isa_level)want;
    c->from_env = 1;
}

/* oneDNN's ISA for a level: the most its kernels may use. */
static dnnl_cpu_isa_t onednn_isa(lf__cpu_isa_level l) {
    switch (l) {
    case LF_CPU_ISA_GENERIC: return dnnl_cpu_isa_sse41;
    case LF_CPU_ISA_AVX2: return dnnl_cpu_isa_avx2;
    case LF_CPU_ISA_AVX512: return dnnl_cpu_isa_avx512_core;
    case LF_CPU_ISA_AVX512_BF16: return dnnl_cpu_isa_avx512_core_bf16;
    default: return dnnl_cpu_isa_all;
    }
}

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static lf__cpu_isa_choice g_choice;

static void decide(void) {
    lf__cpu_isa_choose(getenv("LLMFORGE_CPU_ISA"), lf__cpu_isa_cpuid(), &g_choice);
    if (!g_choice.from_env) return;
    /* before oneDNN's first use: every oneDNN call of the backend comes after
     * lf__cpu_isa() (cpu_gemm.c, cpu_bf16.c) */
    const dnnl_status_t st = dnnl_set_max_cpu_isa(onednn_isa(g_choice.isa));
    if (st != dnnl_success) {
        g_choice.error = LF_CPU_ISA_ERR_ONEDNN;
        snprintf(g_choice.message, sizeof g_choice.message,
                 "LLMFORGE_CPU_ISA=%s: oneDNN refused dnnl_set_max_cpu_isa (status %d: built without "
                 "DNNL_ENABLE_MAX_CPU_ISA, or already in use)",
                 lf__cpu_isa_name(g_choice.isa), (int)st);
    }
}

const lf__cpu_isa_choice *lf__cpu_isa_here(void) {
    pthread_once(&g_once, decide);
    return &g_choice;
}

lf__cpu_isa_level lf__cpu_isa(void) { return lf__cpu_isa_here()->isa; }

const char *lf_backend_cpu_isa(void) { return lf__cpu_isa_name(lf__cpu_isa()); }

const char *lf_backend_cpu_isa_source(void) { return lf__cpu_isa_here()->from_env ? "LLMFORGE_CPU_ISA" : "cpuid"; }
