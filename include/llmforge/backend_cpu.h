/*
 * What only the CPU backend ("cpu", "cpu-bf16", "cpu-fenced") has: its
 * thread count, the kernels it picked for this machine and why, its vector
 * ISA level and the machine's measured FMA peak. Defined in lf_backend_cpu
 * (src/backend/cpu/); the generic backend API is llmforge/backend.h.
 */
#ifndef LLMFORGE_BACKEND_CPU_H
#define LLMFORGE_BACKEND_CPU_H

#include "llmforge/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Threads the CPU backend uses (OpenMP + BLAS). n <= 0 keeps OpenMP's
 * default (OMP_NUM_THREADS when set, else the CPUs of the affinity mask;
 * OpenMP does not read a cgroup CPU limit: lf_cpu_threads_choose does, and
 * is what the CLI passes here). */
void lf_backend_cpu_set_threads(int n);
int lf_backend_cpu_threads(void);

/* Which kernel "cpu-bf16" uses on this machine, decided at the first call
 * (thread-safe; the string is static): "oneDNN 2.6.3 avx512_core_amx
 * (brg:avx512_core_amx_bf16)" when oneDNN's ISA has bf16 instructions (every
 * product operand rounded to bf16, fp32 accumulation, bf16 weight copies),
 * else "fp32 products on bf16-stored activations (no bf16 instructions:
 * oneDNN 2.6.3 ISA avx2)": fp32 products on the fp32 weights and output
 * gradients and on the layer input as stored in bf16 (docs/bf16.md).
 * ONEDNN_MAX_CPU_ISA (oneDNN's variable, read before the first call) below
 * AVX512_CORE_BF16 selects the latter. */
const char *lf_backend_cpu_bf16_kernel(void);
/* 1 when "cpu-bf16" multiplies with bf16 instructions (and so keeps bf16
 * copies of the weights), 0 when its products are fp32 (the second kernel
 * above). Decided with lf_backend_cpu_bf16_kernel; thread-safe. */
int lf_backend_cpu_bf16_native(void);

/* Which kernel does the fp32 matrix products of "cpu" (and of the attention
 * and the bf16 fallback), decided at the first call (thread-safe; the string
 * is static): "oneDNN 2.6.3 avx512_core (jit sgemm)" by default, oneDNN's
 * ISA chosen from CPUID feature bits, so it does not depend on a BLAS's table
 * of CPU models; "OpenBLAS 0.3.21 SkylakeX (AVX-512 kernel, ...)" with the
 * environment variable LLMFORGE_FP32_GEMM=openblas (or where oneDNN has no
 * JIT kernel). LLMFORGE_FP32_GEMM=onednn is the default spelled out. */
const char *lf_backend_cpu_fp32_kernel(void);

/* NULL, or a sentence saying that the fp32 kernel in use is narrower than
 * the CPU allows (e.g. OpenBLAS's generic Prescott kernel on an AVX-512 CPU)
 * and what to do, or that LLMFORGE_FP32_GEMM holds an unknown value. */
const char *lf_backend_cpu_kernel_warning(void);

/* LF_OK; or LF_ERR_CONFIG naming LLMFORGE_CPU_ISA and its value when it
 * holds an unknown level or one above this CPU's, or oneDNN refused the cap
 * (the CPUID level is used meanwhile); or LF_ERR_CONFIG naming
 * LLMFORGE_FP32_GEMM when it holds something other than onednn/openblas
 * (the products then use oneDNN). */
lf_status lf_backend_cpu_check(void);

/* The vector ISA level of the CPU backend's own kernels (small-T attention,
 * GEMV, the FMA probe) and of oneDNN: "generic" (no AVX2), "avx2",
 * "avx512" (F/BW/VL/DQ), "avx512_bf16" or "amx", read from CPUID once and
 * capped by the environment variable LLMFORGE_CPU_ISA (one of those names;
 * read at the first call). _source: "cpuid" or "LLMFORGE_CPU_ISA". Static
 * strings; thread-safe. */
const char *lf_backend_cpu_isa(void);
const char *lf_backend_cpu_isa_source(void);

/* The fp32 FMA rate of this machine on the backend's threads
 * (omp_get_max_threads()), in FLOP/s: independent FMA chains in registers,
 * rounds of a few ms for about `seconds` (at least two), the best round's
 * rate (a peak; on a shared machine the mean measures the other load), with the kernel of the ISA
 * level above (AVX2: 8 lanes, 12 chains in 16 registers; AVX-512: 16 lanes,
 * 24 chains in 32), the peak MFU is measured against. */
double lf_backend_cpu_peak_flops(double seconds);

#ifdef __cplusplus
}
#endif
#endif
