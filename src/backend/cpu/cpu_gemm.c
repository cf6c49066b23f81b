/*
 * The fp32 matrix product of the CPU backend: every fp32 GEMM the backend
 * runs (matmul, attention, the bf16 fallback) goes through lf__cpu_sgemm.
 *
 * Why not OpenBLAS alone: OpenBLAS picks its kernel from a table of CPU
 * models. Debian 12's OpenBLAS 0.3.21 does not know recent Xeons (e.g.
 * family 6 model 207) and falls back to its generic Prescott (SSE3) kernel,
 * 3-4x slower, silently; OPENBLAS_CORETYPE=Prescott reproduces that on any
 * x86 machine. oneDNN (already our bf16 kernel) picks its ISA from CPUID
 * feature bits (AVX2, AVX-512), so a CPU it has never heard of still gets
 * its widest kernel. Measured on one Sapphire Rapids core (bench/gemm_kernels.sh,
 * which prints the same table on any machine): oneDNN 2.6.3's dnnl_sgemm
 * 148-162 GFLOP/s on GPT-2 124M's products, OpenBLAS SkylakeX 124-143,
 * OpenBLAS Prescott 35-38.
 *
 * Choice, made once at the first product (thread-safe):
 *  - oneDNN's dnnl_sgemm by default;
 *  - OpenBLAS's cblas_sgemm when LLMFORGE_FP32_GEMM=openblas, or when
 *    oneDNN has no JIT kernel on this CPU (no SSE4.1: its reference gemm).
 * lf__cpu_gemm_choose is that decision as a pure function of the facts
 * (request, oneDNN's effective ISA, OpenBLAS's core, CPUID), so the tests
 * check it on made-up machines as well as on this one.
 *
 * Invariants:
 *  - Row-major BLAS semantics: C (M,N) = alpha * op(A) @ op(B) + beta * C;
 *    with beta == 0, C is not read (NaN in C does not leak).
 *  - Threads: both libraries use the OpenMP runtime: inside one of our
 *    parallel regions (model replicas, attention heads) a product runs on
 *    the calling thread; outside one on omp_get_max_threads() threads.
 *  - A product oneDNN refuses (it only refuses bad arguments) is computed
 *    by OpenBLAS, counted (lf__cpu_gemm_failures; the tests require 0) and
 *    reported on the calling instance's sticky status (lf__cpu_op_failed):
 *    no silent fallback.
 *
 * References: oneDNN v2.6 "BLAS functions" (dnnl_sgemm, row-major);
 * OpenBLAS driver/others/dynamic.c (the CPU table, OPENBLAS_CORETYPE).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>
#include "core/gemm_trace.h"
#include "cpu_internal.h"
#include "llmforge/backend.h"
#include "llmforge/backend_cpu.h"

/* OpenBLAS's own (cblas.h declares them in the openblas-openmp build). */
char *openblas_get_corename(void);
char *openblas_get_config(void);

const char *lf__cpu_onednn_isa_name(unsigned isa) {
    switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "unknown ISA";
    }
}

static int has_isa(unsigned isa, unsigned want) { return (isa & want) == want; }

/* The vector width dnnl_sgemm runs at under oneDNN's effective ISA: its gemm
 * has avx512_core, avx2, avx and sse41 kernels (and a reference loop). */
static lf__cpu_vec sgemm_vec_onednn(unsigned isa) {
    if (has_isa(isa, dnnl_cpu_isa_avx512_core)) return LF_CPU_VEC_AVX512;
    if (has_isa(isa, dnnl_cpu_isa_avx2)) return LF_CPU_VEC_AVX2;
    if (has_isa(isa, dnnl_cpu_isa_avx)) return LF_CPU_VEC_AVX;
    if (has_isa(isa, dnnl_cpu_isa_sse41)) return LF_CPU_VEC_SSE;
    return LF_CPU_VEC_NONE;
}

static const char *vec_name(lf__cpu_vec v) {
    static const char *names[] = {"no SIMD", "SSE", "AVX", "AVX2", "AVX-512"};
    return names[v];
}

/* The widest vector ISA of an OpenBLAS x86 core (driver/others/dynamic.c's
 * names). Unknown names count as generic. */
static lf__cpu_vec openblas_core_vec(const char *core) {
    static const char *avx512[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
    static const char *avx2[] = {"Haswell", "Zen", "Excavator"};
    static const char *avx[] = {"Sandybridge", "Bulldozer", "Piledriver", "Steamroller"};
    static const char *sse[] = {"Prescott", "Core2",      "Penryn",        "Dunnington", "Nehalem",
                                "Atom",     "Opteron",    "Opteron(SSE3)", "Barcelona",  "Bobcat",
                                "Katmai",   "Coppermine", "Northwood"};
    if (!core) return LF_CPU_VEC_NONE;
#define LF_IN(list, v) \
    for (size_t i = 0; i < sizeof list / sizeof *list; i++) \
        if (!strcasecmp(core, list[i])) return v;
    LF_IN(avx512, LF_CPU_VEC_AVX512)
    LF_IN(avx2, LF_CPU_VEC_AVX2)
    LF_IN(avx, LF_CPU_VEC_AVX)
    LF_IN(sse, LF_CPU_VEC_SSE)
#undef LF_IN
    return LF_CPU_VEC_NONE;
}

void lf__cpu_gemm_choose(const lf__cpu_gemm_facts *f, lf__cpu_gemm_choice *c) {
    memset(c, 0, sizeof *c);
    const lf__cpu_vec dnnl_vec = sgemm_vec_onednn(f->onednn_isa);
    const lf__cpu_vec blas_vec = openblas_core_vec(f->openblas_core);
    const char *req = f->request && *f->request ? f->request : NULL;
    const char *why = "";
    if (req && !strcasecmp(req, "openblas")) {
        c->lib = LF_CPU_GEMM_OPENBLAS;
        why = ", LLMFORGE_FP32_GEMM=openblas";
    } else if (req && strcasecmp(req, "onednn")) {
        c->lib = LF_CPU_GEMM_ONEDNN;
        c->bad_request = 1;
    } else if (!req && dnnl_vec == LF_CPU_VEC_NONE && blas_vec > LF_CPU_VEC_NONE) {
        c->lib = LF_CPU_GEMM_OPENBLAS;
        why = ", oneDNN has no JIT kernel here";
    } else {
        c->lib = LF_CPU_GEMM_ONEDNN;
    }
    if (c->lib == LF_CPU_GEMM_ONEDNN) {
        c->vec = dnnl_vec;
        snprintf(c->kernel, sizeof c->kernel, "oneDNN %s %s (jit sgemm)", f->onednn_version,
                 dnnl_vec == LF_CPU_VEC_NONE
                     ? "reference"
                     : lf__cpu_onednn_isa_name(dnnl_vec == LF_CPU_VEC_AVX512 ? dnnl_cpu_isa_avx512_core
                                               : dnnl_vec == LF_CPU_VEC_AVX2 ? dnnl_cpu_isa_avx2
                                               : dnnl_vec == LF_CPU_VEC_AVX  ? dnnl_cpu_isa_avx
                                                                             : dnnl_cpu_isa_sse41));
    } else {
        c->vec = blas_vec;
        snprintf(c->kernel, sizeof c->kernel, "OpenBLAS %s %s (%s kernel%s)", f->openblas_version,
                 f->openblas_core ? f->openblas_core : "?", vec_name(blas_vec), why);
    }
    const lf__cpu_vec cpu_vec = f->cpu_avx512 ? LF_CPU_VEC_AVX512 : f->cpu_avx2 ? LF_CPU_VEC_AVX2 : LF_CPU_VEC_NONE;
    if (c->bad_request) {
        snprintf(c->warning, sizeof c->warning, "LLMFORGE_FP32_GEMM='%.40s' is not one of onednn, openblas", req);
    } else if (cpu_vec >= LF_CPU_VEC_AVX2 && c->vec < cpu_vec) {
        if (c->lib == LF_CPU_GEMM_OPENBLAS)
            snprintf(c->warning, sizeof c->warning,
                     "fp32 matmul: OpenBLAS runs its %s kernel '%s' on a CPU with %s (about %dx slower); "
                     "unset LLMFORGE_FP32_GEMM to use oneDNN, or set OPENBLAS_CORETYPE to a core this "
                     "OpenBLAS knows (e.g. %s)",
                     vec_name(c->vec), f->openblas_core ? f->openblas_core : "?", vec_name(cpu_vec),
                     cpu_vec == LF_CPU_VEC_AVX512 ? 4 : 2, cpu_vec == LF_CPU_VEC_AVX512 ? "SkylakeX" : "Haswell");
        else
            snprintf(c->warning, sizeof c->warning,
                     "fp32 matmul: oneDNN runs at %s on a CPU with %s (about %dx slower); ONEDNN_MAX_CPU_ISA "
                     "limits it: unset it",
                     vec_name(c->vec), vec_name(cpu_vec), cpu_vec == LF_CPU_VEC_AVX512 ? 4 : 2);
    }
}

/* ---------------------------------------------------------------- this machine */

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static lf__cpu_gemm_choice g_choice;
static atomic_int g_lib; /* the library in use: g_choice.lib unless a test forced one */
static atomic_long g_failures;

void lf__cpu_gemm_facts_here(lf__cpu_gemm_facts *f) {
    memset(f, 0, sizeof *f);
    lf__cpu_isa(); /* LLMFORGE_CPU_ISA's cap on oneDNN, before its first use */
    f->request = getenv("LLMFORGE_FP32_GEMM");
    f->onednn_isa = (unsigned)dnnl_get_effective_cpu_isa();
    const dnnl_version_t *v = dnnl_version();
    snprintf(f->onednn_version, sizeof f->onednn_version, "%d.%d.%d", v->major, v->minor, v->patch);
    f->openblas_core = openblas_get_corename();
    /* "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY SkylakeX MAX_THREADS=64": the second word */
    const char *cfg = openblas_get_config();
    if (cfg && !strncmp(cfg, "OpenBLAS ", 9)) sscanf(cfg + 9, "%15s", f->openblas_version);
    else snprintf(f->openblas_version, sizeof f->openblas_version, "?");
    /* the backend's ISA level (CPUID capped by LLMFORGE_CPU_ISA, cpu_isa.c):
     * under a cap, a kernel at the capped width is what was asked for, not a
     * slow kernel to warn about */
    const lf__cpu_isa_level isa = lf__cpu_isa();
    f->cpu_avx2 = isa >= LF_CPU_ISA_AVX2;
    f->cpu_avx512 = isa >= LF_CPU_ISA_AVX512;
}

static void detect(void) {
    lf__cpu_gemm_facts f;
    lf__cpu_gemm_facts_here(&f);
    lf__cpu_gemm_choose(&f, &g_choice);
    atomic_store(&g_lib, g_choice.lib);
    /* oneDNN generates its sgemm kernels at its first product, all at once:
     * 35-48 ms of one core (Zen 4), which a run's first step used to pay
     * (step 1 ~1.5x the next ones, so the ETA printed at step 1 was long).
     * One 8x8x8 product here pays it when the kernel is chosen: at the run
     * header, before any step is timed. */
    if (g_choice.lib == LF_CPU_GEMM_ONEDNN) {
        float a[64] = {0}, b[64] = {0}, c[64];
        (void)dnnl_sgemm('N', 'N', 8, 8, 8, 1.0f, a, 8, b, 8, 0.0f, c, 8);
    }
}

static const lf__cpu_gemm_choice *choice(void) {
    pthread_once(&g_once, detect);
    return &g_choice;
}

const char *lf_backend_cpu_fp32_kernel(void) {
    const lf__cpu_gemm_choice *c = choice();
    const int lib = atomic_load(&g_lib);
    if (lib == c->lib) return c->kernel;
    return lib == LF_CPU_GEMM_OPENBLAS ? "OpenBLAS (forced by a test)" : "oneDNN (forced by a test)";
}

const char *lf_backend_cpu_kernel_warning(void) {
    const lf__cpu_gemm_choice *c = choice();
    return c->warning[0] ? c->warning : NULL;
}

int lf__cpu_gemm_lib(void) {
    choice();
    return atomic_load(&g_lib);
}

void lf__cpu_gemm_force(int lib) {
    choice();
    atomic_store(&g_lib, lib ? lib : g_choice.lib);
}

long lf__cpu_gemm_failures(void) { return atomic_load(&g_failures); }

static atomic_int g_inject; /* test hook: products to fail on purpose */

void lf__cpu_gemm_inject_failures(int n) { atomic_store(&g_inject, n > 0 ? n : 0); }

/* ---------------------------------------------------------------- the product */

static void blas_sgemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                       int ldb, float beta, float *C, int ldc) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda,
                B, ldb, beta, C, ldc);
}

void lf__cpu_sgemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                   float beta, float *C, int ldc) {
    lf__gemm_trace_mark();
    if (M <= 0 || N <= 0) return;
    if (K <= 0) { /* no product: C = beta * C, and C is not read when beta == 0 */
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) C[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[(size_t)i * ldc + j];
        return;
    }
    pthread_once(&g_once, detect);
    if (atomic_load_explicit(&g_inject, memory_order_relaxed) > 0 && atomic_fetch_sub(&g_inject, 1) > 0) {
        atomic_fetch_add(&g_failures, 1);
        lf__cpu_op_failed("sgemm(M %d, N %d, K %d): failure injected by a test; computed by OpenBLAS", M, N, K);
        blas_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    if (atomic_load_explicit(&g_lib, memory_order_relaxed) == LF_CPU_GEMM_OPENBLAS) {
        blas_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    const dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    if (st == dnnl_success) return;
    atomic_fetch_add(&g_failures, 1);
    lf__cpu_op_failed("oneDNN dnnl_sgemm(%c, %c, M %d, N %d, K %d, lda %d, ldb %d, ldc %d) returned status %d; "
                      "computed by OpenBLAS",
                      ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, lda, ldb, ldc, (int)st);
    blas_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

lf_status lf_backend_cpu_check(void) {
    const lf__cpu_isa_choice *isa = lf__cpu_isa_here();
    if (isa->error) return lf_fail(LF_ERR_CONFIG, "%s", isa->message);
    const lf__cpu_gemm_choice *c = choice();
    if (c->bad_request) return lf_fail(LF_ERR_CONFIG, "environment variable %s", c->warning);
    return LF_OK;
}
