/*
 * Backends: the compute behind the model. A backend is an operations table
 * (src/backend/backend_impl.h); this public header only names and selects
 * them. The CPU backend is the reference every other backend is tested
 * against.
 */
#ifndef LLMFORGE_BACKEND_H
#define LLMFORGE_BACKEND_H

#include "llmforge/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lf_backend_ops lf_backend_ops;

/* The backend registered under `name`, or NULL (message recorded; status
 * LF_ERR_NOT_FOUND). NULL name = "cpu". Compiled in:
 *   "cpu"       fp32 throughout (OpenMP + OpenBLAS);
 *   "cpu-bf16"  the same, except that matrix products take bf16 operands and
 *               accumulate in fp32 (oneDNN on CPUs with AVX512-BF16 or AMX,
 *               else a fallback; see lf_backend_cpu_bf16_kernel). Weights,
 *               gradients, optimizer state, layernorm, softmax, attention
 *               and the loss stay fp32. Training config: bf16.enabled. */
const lf_backend_ops *lf_backend_get(const char *name);
/* The fp32 backend the trainer, bench, eval and sample use: "cpu", or the
 * one the environment variable LLMFORGE_BACKEND names ("cpu-fenced": the
 * test backend whose memory the host cannot touch outside a backend call,
 * see src/backend/cpu/cpu_fenced.c). NULL (message recorded) for an unknown
 * name. */
const lf_backend_ops *lf_backend_default(void);
const char *lf_backend_name(const lf_backend_ops *ops);

/* Threads the CPU backend uses (OpenMP + BLAS). n <= 0 keeps OpenMP's
 * default (OMP_NUM_THREADS when set, else every core). */
void lf_backend_cpu_set_threads(int n);
int lf_backend_cpu_threads(void);

/* Which kernel "cpu-bf16" uses on this machine, decided at the first call
 * (thread-safe; the string is static): "oneDNN 2.6.3 avx512_core_amx
 * (brg:avx512_core_amx_bf16)" when oneDNN's ISA has bf16 instructions, else
 * "fallback (fp32 sgemm on bf16-rounded operands; ...)" with the reason.
 * ONEDNN_MAX_CPU_ISA (oneDNN's variable, read before the first call) below
 * AVX512_CORE_BF16 selects the fallback. */
const char *lf_backend_cpu_bf16_kernel(void);

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

/* LF_OK, or LF_ERR_CONFIG naming LLMFORGE_FP32_GEMM when it holds something
 * other than onednn/openblas (the products then use oneDNN). */
lf_status lf_backend_cpu_check(void);

#ifdef __cplusplus
}
#endif
#endif
