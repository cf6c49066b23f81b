/*
 * CPU backend internals: the op functions the table in cpu_backend.c points
 * at, and small helpers shared by the op files.
 *
 * Invariants (see backend_impl.h for the full contract):
 *  - Backward ops accumulate (+=) into parameter and residual-stream
 *    gradients and overwrite the single-producer activation gradients
 *    (the list is in backend_impl.h).
 *  - Every reduction that crosses rows (dbias, layernorm and rmsnorm
 *    dweight/dbias, encoder dwte/dwpe, the dk/dv of a grouped-query
 *    attention group, sum_squares) has a fixed summation order that does
 *    not depend on the number of threads, so results are bit-identical for
 *    any thread count. Rows are split across threads only where each output
 *    element is written by exactly one row.
 *  - Ops never allocate; the only scratch is fixed-size stack tiles in the
 *    attention (the forward with dropout, the small-T register-tiled path).
 *  - Helpers here and in cpu_math.h are written so the loops that use them
 *    vectorize (no calls, no branches); they are bit-exact with the core RNG
 *    and at least as accurate as libm, respectively.
 */
#ifndef LF_BACKEND_CPU_INTERNAL_H
#define LF_BACKEND_CPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include "backend/backend_impl.h"
#include "core/bf16.h"
#include "llmforge/core.h"

/* Elements of work below which a kernel stays on the calling thread: forking
 * a team costs a few microseconds, about what 16k simple flops take. */
/* Element-wise loops spell it `#pragma omp parallel if (n >= ...)` then
 * `#pragma omp for simd`, never the combined `parallel for simd ... if`:
 * GCC 12 runs the combined construct's if-false path as a scalar loop
 * (AdamW on a tensor below LF_CPU_PAR_MIN was 7x slower than the vector
 * loop; every bias and layernorm weight of a small model is one). */
#define LF_CPU_PAR_MIN 16384L

/* Channel-parallel reductions hand each thread a run of whole blocks of this
 * many floats (one 64-byte cache line), so no two threads share a line. */
#define LF_CPU_CBLK 16

/* The channels [*c0, *c1) of 0..C that thread `tid` of `nt` owns in a
 * channel-parallel reduction. Blocks are dealt out contiguously. */
static inline void lf__cpu_channel_slice(int C, int tid, int nt, int *c0, int *c1) {
    int nblk = (C + LF_CPU_CBLK - 1) / LF_CPU_CBLK;
    int b0 = (int)((long)nblk * tid / nt), b1 = (int)((long)nblk * (tid + 1) / nt);
    *c0 = b0 * LF_CPU_CBLK;
    *c1 = b1 * LF_CPU_CBLK < C ? b1 * LF_CPU_CBLK : C;
}

/* lf_rng_uniform (src/core/rng.c: Philox4x32-10, word 0, top 24 bits)
 * inlined so that dropout loops vectorize; the out-of-line call cannot.
 * Same arithmetic step for step, so the same bits: test_cpu_ops.c pins it
 * to lf_rng_uniform on random seeds, purposes and 64-bit indices. */
static inline float lf__cpu_rng_uniform(uint64_t seed, uint32_t purpose, uint64_t index) {
    uint32_t c0 = (uint32_t)index, c1 = (uint32_t)(index >> 32), c2 = purpose, c3 = 0;
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        const uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        const uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    return (float)(c0 >> 8) * (1.0f / 16777216.0f);
}

/* Dropout mask of element i of the tensor keyed by `d` (backend_impl.h):
 * 1 = keep, 0 = drop. */
static inline int lf__cpu_dropout_keep(lf_dropout d, uint64_t i) {
    return lf__cpu_rng_uniform(d.seed, LF_RNG_DROPOUT, lf_rng_mix(d.key, d.offset + i)) >= d.p;
}

/* x rounded to the nearest bf16 (core/bf16.h: ties to even, NaN stays NaN)
 * and back: the one rounding of every host path. */
static inline uint16_t lf__cpu_bf16_bits(float f) { return lf__bf16_from_f32(f); }
static inline float lf__cpu_bf16_as_f32(uint16_t h) { return lf__bf16_to_f32(h); }

/* The ops. Argument order, shapes and semantics are exactly those of the
 * matching slot of lf_backend_ops in backend_impl.h, which documents every
 * pointer's shape. */

/* cpu_backend.c: an op failed deep inside (a product oneDNN refused, no
 * memory for a copy) and computed its result another way: the table slot
 * that called it records the message on the calling instance (sticky
 * status, LF_ERR_DEVICE). Thread-safe. */
void lf__cpu_op_failed(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* cpu_pointwise.c */
void lf__cpu_encoder_forward(float *out, const int32_t *inp, const float *wte, const float *wpe, int B, int T, int C);
void lf__cpu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int B, int T, int C);
/* The packed forms (backend_impl.h "packed rows"): wpe row pos[b,t]. */
void lf__cpu_encoder_forward_packed(float *out, const int32_t *inp, const int32_t *pos, const float *wte,
                                    const float *wpe, int B, int T, int C);
void lf__cpu_encoder_backward_packed(float *dwte, float *dwpe, const float *dout, const int32_t *inp,
                                     const int32_t *pos, int B, int T, int C);
void lf__cpu_gelu_forward(float *out, const float *inp, size_t n);
void lf__cpu_gelu_forward_bf16(uint16_t *out, const float *inp, size_t n);
void lf__cpu_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);
/* The same two at AVX-512 (cpu_gelu_v16.c; called at that ISA level or above). */
void lf__cpu_gelu_forward_v16(float *out, const float *inp, size_t n);
void lf__cpu_gelu_backward_v16(float *dinp, const float *inp, const float *dout, size_t n);
/* Test hook: 1 = lf__cpu_gelu_forward/backward run the baseline build at any ISA level. */
void lf__cpu_gelu_force_baseline(int on);
void lf__cpu_residual_forward(float *out, const float *a, const float *b, size_t n);
void lf__cpu_residual_backward(float *da, float *db, const float *dout, size_t n);
void lf__cpu_residual_row(float *out, const float *a, const float *b, int n);
void lf__cpu_dropout_forward(float *out, const float *inp, size_t n, lf_dropout drop);
void lf__cpu_dropout_backward(float *dinp, const float *dout, size_t n, lf_dropout drop);

/* cpu_norm.c */
void lf__cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                               const float *bias, int N, int C);
void lf__cpu_layernorm_forward_bf16(uint16_t *out, float *mean, float *rstd, const float *inp, const float *weight,
                                    const float *bias, int N, int C);
/* res = a + b, then layernorm of res in one pass (out fp32, or bf16 bits with out_bf16) */
void lf__cpu_residual_layernorm_forward(float *res, void *out, int out_bf16, float *mean, float *rstd, const float *a,
                                        const float *b, const float *weight, const float *bias, int N, int C);
void lf__cpu_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                                const float *weight, const float *mean, const float *rstd, int N, int C);

/* cpu_matmul.c */
void lf__cpu_matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int N, int C, int OC,
                            lf_weight_layout layout);
/* LoRA's low-rank path (backend_impl.h lora_forward / lora_backward). */
void lf__cpu_lora_forward(float *out, int ldo, float *u, const float *inp, const float *A, const float *B, int N, int C,
                          int n, int r, float scale);
void lf__cpu_lora_backward(float *dinp, float *dA, float *dB, float *u, float *du, const float *dout, int ldo,
                           const float *inp, const float *A, const float *B, int N, int C, int n, int r, float scale);
void lf__cpu_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                             const float *weight, int N, int C, int OC, lf_weight_layout layout);
void lf__cpu_bias_backward(float *dbias, const float *dout, int N, int OC);

/* cpu_bf16.c: the matmul pair of the "cpu-bf16" table (bf16 operands, fp32
 * accumulation, on oneDNN; without bf16 instructions fp32 products on the
 * bf16-rounded layer input), and its weight-copy
 * cache. params_changed: parameters may have changed (the copies are stale);
 * memory_freed: some backend memory was freed (drop every copy, a new
 * tensor may reuse the address). */
void lf__cpu_bf16_matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int N, int C,
                                 int OC, lf_weight_layout layout);
void lf__cpu_bf16_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                                  const float *weight, int N, int C, int OC, lf_weight_layout layout);
/* The same pair with inp stored in bf16 (the model's bf16 activations):
 * exactly the numbers the fp32-inp pair gives for the fp32 inp that rounds
 * to it, since that pair rounds inp to bf16 first. */
void lf__cpu_bf16_matmul_forward_bf16(float *out, const uint16_t *inp, const float *weight, const float *bias, int N,
                                      int C, int OC, lf_weight_layout layout);
void lf__cpu_bf16_matmul_backward_bf16(float *dinp, float *dweight, float *dbias, const float *dout,
                                       const uint16_t *inp, const float *weight, int N, int C, int OC,
                                       lf_weight_layout layout);
/* out[i] = inp[i] rounded to bf16 (lf__cpu_bf16_bits): the conversion the
 * products apply to their operands. */
void lf__cpu_cast_bf16(uint16_t *out, const float *inp, size_t n);
/* out = the fp32 values of bf16 bits (exact); disjoint */
void lf__cpu_widen_bf16(float *out, const uint16_t *inp, size_t n);
void lf__cpu_bf16_params_changed(void);
void lf__cpu_bf16_memory_freed(void);
/* adamw_update of the cpu-bf16 table: the fp32 update, renewing in the same
 * pass the copies of the weight that is exactly [params, params+n), and
 * marking stale any other copy that overlaps the range. */
void lf__cpu_bf16_adamw_update(float *params, const float *grads, float *m, float *v, size_t n, float lr, float beta1,
                               float beta2, float eps, float weight_decay, float grad_scale, int t);
/* x rounded to the nearest bf16 (ties to even; NaN stays NaN), as fp32. */
float lf__cpu_bf16_round(float x);
/* Test hooks: 1 when products go to oneDNN; force the path of CPUs without
 * bf16 instructions (fp32 products on bf16-stored activations, on = 1), or
 * the emulation of the bf16 instructions (every operand rounded, fp32 sgemm:
 * oneDNN's numbers on any CPU), or return to what was detected (0; either
 * hook); products that fell back a level because of a failure; free every
 * thread's primitives and scratch and every weight copy (only while no op
 * runs). */
int lf__cpu_bf16_uses_onednn(void);
void lf__cpu_bf16_force_fallback(int on);
void lf__cpu_bf16_force_emulation(int on);
long lf__cpu_bf16_failures(void);
void lf__cpu_bf16_release(void);

/* cpu_gemm.c: the fp32 GEMM every fp32 product goes through (oneDNN's
 * dnnl_sgemm by default, OpenBLAS as the fallback). Row-major BLAS
 * semantics: C (M,N) = alpha * op(A) @ op(B) + beta * C, op = transpose
 * when ta/tb; C is not read when beta == 0. */
void lf__cpu_sgemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                   float beta, float *C, int ldc);

enum { LF_CPU_GEMM_ONEDNN = 1, LF_CPU_GEMM_OPENBLAS = 2 };

/* Vector ISA widths, ordered. */
typedef enum lf__cpu_vec {
    LF_CPU_VEC_NONE = 0,
    LF_CPU_VEC_SSE,
    LF_CPU_VEC_AVX,
    LF_CPU_VEC_AVX2,
    LF_CPU_VEC_AVX512
} lf__cpu_vec;

/* What the choice of fp32 GEMM depends on. */
typedef struct lf__cpu_gemm_facts {
    const char *request;       /* LLMFORGE_FP32_GEMM: NULL/"" (default), "onednn", "openblas" */
    unsigned onednn_isa;       /* dnnl_get_effective_cpu_isa() (ONEDNN_MAX_CPU_ISA applied) */
    char onednn_version[16];   /* "2.6.3" */
    const char *openblas_core; /* openblas_get_corename(): "SkylakeX", "Prescott", ... */
    char openblas_version[16]; /* "0.3.21" */
    int cpu_avx2, cpu_avx512;  /* the ISA level (CPUID capped by LLMFORGE_CPU_ISA): AVX2+FMA; AVX-512 F/BW/VL/DQ */
} lf__cpu_gemm_facts;

typedef struct lf__cpu_gemm_choice {
    int lib;           /* LF_CPU_GEMM_* */
    lf__cpu_vec vec;   /* the vector width the chosen kernel runs at */
    int bad_request;   /* LLMFORGE_FP32_GEMM holds something else */
    char kernel[128];  /* "oneDNN 2.6.3 avx512_core (jit sgemm)" */
    char warning[320]; /* "" or why this kernel is slower than the CPU allows */
} lf__cpu_gemm_choice;

/* The decision, as a pure function (tested on made-up machines). */
void lf__cpu_gemm_choose(const lf__cpu_gemm_facts *f, lf__cpu_gemm_choice *c);
/* The facts of this process's machine and environment. */
void lf__cpu_gemm_facts_here(lf__cpu_gemm_facts *f);
/* The library in use (LF_CPU_GEMM_*); a test may force one (0: back to the choice). */
int lf__cpu_gemm_lib(void);
void lf__cpu_gemm_force(int lib);
/* Products oneDNN refused and OpenBLAS computed (0 unless a bug). */
long lf__cpu_gemm_failures(void);
/* Test hook: the next n fp32 products fail as one oneDNN refused would (reported, then computed by OpenBLAS; n <= 0: none). */
void lf__cpu_gemm_inject_failures(int n);
/* oneDNN's name of an ISA value ("avx512_core"). */
const char *lf__cpu_onednn_isa_name(unsigned isa);

/* cpu_isa.c: the vector ISA level of the backend's kernels and oneDNN:
 * CPUID, capped by LLMFORGE_CPU_ISA (the file header says what follows it). */
typedef enum lf__cpu_isa_level {
    LF_CPU_ISA_GENERIC = 0,
    LF_CPU_ISA_AVX2,
    LF_CPU_ISA_AVX512,
    LF_CPU_ISA_AVX512_BF16,
    LF_CPU_ISA_AMX
} lf__cpu_isa_level;
enum { LF_CPU_ISA_ERR_UNKNOWN = 1, LF_CPU_ISA_ERR_ABOVE_CPU, LF_CPU_ISA_ERR_ONEDNN };
typedef struct lf__cpu_isa_choice {
    lf__cpu_isa_level cpu; /* what CPUID says */
    lf__cpu_isa_level isa; /* in use: cpu, or LLMFORGE_CPU_ISA's level when valid */
    int from_env;          /* isa comes from LLMFORGE_CPU_ISA */
    int error;             /* 0 or LF_CPU_ISA_ERR_*: LLMFORGE_CPU_ISA unusable (isa = cpu) */
    char message[224];     /* the error, naming the variable and its value */
} lf__cpu_isa_choice;
/* The decision as a pure function (tested on made-up CPUs); env = NULL or "": CPUID. */
void lf__cpu_isa_choose(const char *env, lf__cpu_isa_level cpu, lf__cpu_isa_choice *c);
lf__cpu_isa_level lf__cpu_isa_cpuid(void);
const lf__cpu_isa_choice *lf__cpu_isa_here(void);
lf__cpu_isa_level lf__cpu_isa(void);
const char *lf__cpu_isa_name(lf__cpu_isa_level l);

/* cpu_peak.c: the FMA probe's kernels per level (cpu_peak_avx2.c,
 * cpu_peak_avx512.c, each compiled for its ISA): `iters` rounds of
 * independent FMA chains on the calling thread; returns the flops done. */
double lf__cpu_peak_kernel_avx2(long iters, float seed);
double lf__cpu_peak_kernel_avx512(long iters, float seed);

/* cpu_gemv.c: matmul_forward with at most LF_CPU_GEMV_MAX_N rows (decoding's
 * one new token), streamed by our own kernels: out (N,OC) = inp (N,C) @ W
 * (+ bias), shapes and layouts as matmul_forward. Returns 1 when it computed
 * the product, 0 (nothing written) when the caller's GEMM should: N outside
 * 1..LF_CPU_GEMV_MAX_N, C < 1 or OC < 1. Each output's bits do not depend
 * on the thread count or on N. Test hooks: the vector path this CPU gets
 * (AVX-512, AVX2+FMA or plain C); lf__cpu_gemv_force(v) caps it at v (< 0:
 * back to what the CPU has). */
#define LF_CPU_GEMV_MAX_N 4
int lf__cpu_gemv(float *out, const float *inp, const float *weight, const float *bias, int N, int C, int OC,
                 lf_weight_layout layout);
lf__cpu_vec lf__cpu_gemv_vec(void);
void lf__cpu_gemv_force(int vec);
/* The batch-invariant GEMM (cpu_gemv.c): the same product for any N >= 1,
 * each out[n,o] computed by the sequence lf__cpu_gemv uses for it, so its
 * bits do not depend on N, on the other rows or on the thread count. Returns
 * 0 (nothing written) for N, C or OC < 1. */
int lf__cpu_gemm_invariant(float *out, const float *inp, const float *weight, const float *bias, int N, int C, int OC,
                           lf_weight_layout layout);

/* cpu_attention.c */
void lf__cpu_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH, int NKV,
                               lf_dropout drop);
void lf__cpu_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *att,
                                int B, int T, int C, int NH, int NKV, lf_dropout drop);
/* Packed rows (backend_impl.h): query t of row b sees keys t - pos[b,t] .. t.
 * Backward needs no pos of its own: the saved probabilities are 0 outside
 * each query's example, and every gradient term is a multiple of them. */
void lf__cpu_attention_forward_packed(float *out, float *att, const float *qkv, const int32_t *pos, int B, int T, int C,
                                      int NH, int NKV, lf_dropout drop);

/* The small-T attention path (cpu_attention_fast.h): its limits, and its
 * kernels per vector width (cpu_attention_v8.c: AVX2, cpu_attention_v16.c:
 * AVX-512), one (b,h) pair per call. */
#define LF_CPU_ATT_FAST_TMAX 128
#define LF_CPU_ATT_FAST_TILE 16384 /* floats of the transposed K (or V) tile on the stack */
void lf__cpu_att_fast_forward_bh_v8(float *out_bh, float *att_bh, const float *q, const float *k, const float *v,
                                    const int32_t *pos, int T, int C, int W, int HS, float scale);
void lf__cpu_att_fast_backward_bh_v8(float *dq, float *dk, float *dv, float *S_bh, const float *dout_bh, const float *q,
                                     const float *k, const float *v, const float *att_bh, int T, int C, int W, int HS,
                                     float scale, int add);
void lf__cpu_att_fast_forward_bh_v16(float *out_bh, float *att_bh, const float *q, const float *k, const float *v,
                                     const int32_t *pos, int T, int C, int W, int HS, float scale);
void lf__cpu_att_fast_backward_bh_v16(float *dq, float *dk, float *dv, float *S_bh, const float *dout_bh,
                                      const float *q, const float *k, const float *v, const float *att_bh, int T, int C,
                                      int W, int HS, float scale, int add);
/* Test hooks: the lanes of the small-T kernels a (T, HS) without dropout
 * would run at (0: the GEMM path); force 8-lane kernels (lanes = 8) where
 * the ISA level would pick 16, or back to the level's choice (0). */
int lf__cpu_attention_lanes(int T, int HS);
void lf__cpu_attention_force_lanes(int lanes);

/* What the CPU's attention saves and needs (backend_impl.h's size slots):
 * the (B,NH,T,T) probabilities, the same again as backward's scratch, and
 * one probability row of pos0 + Tn entries per (batch row, query head, new
 * row) for attention_cached. */
static inline size_t lf__cpu_attention_saved(int B, int NH, int T) {
    return (size_t)B * (size_t)NH * (size_t)T * (size_t)T;
}
static inline size_t lf__cpu_attention_cached_scratch(int B, int NH, int Tn, int pos0) {
    return (size_t)B * (size_t)NH * (size_t)Tn * ((size_t)pos0 + (size_t)Tn);
}

/* cpu_kv.c: the KV-cache ops of generation. */
void lf__cpu_kv_append(float *kcache, float *vcache, const float *qkv, int B, int Tn, int NH, int NKV, int HS, int pos0,
                       int Tmax);
void lf__cpu_attention_cached(float *out, float *scratch, const float *qkv, const float *kcache, const float *vcache,
                              int B, int Tn, int C, int NH, int NKV, int pos0, int Tmax);

/* cpu_rmsnorm.c, cpu_rope.c, cpu_swiglu.c: RMSNorm, RoPE and SwiGLU (the Llama family's ops). */
void lf__cpu_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight, int N, int C, float eps);
void lf__cpu_residual_rmsnorm_forward(float *res, void *out, int out_bf16, float *rstd, const float *a, const float *b,
                                      const float *weight, int N, int C, float eps);
void lf__cpu_rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                              const float *rstd, int N, int C);
void lf__cpu_qknorm_forward(float *out, float *rstd, const float *inp, const float *wq, const float *wk, int N, int NH,
                            int NKV, int HS, float eps);
void lf__cpu_qknorm_backward(float *dqkv, float *dwq, float *dwk, const float *inp, const float *wq, const float *wk,
                             const float *rstd, int N, int NH, int NKV, int HS);
void lf__cpu_rope_forward(float *qkv, int B, int T, int NH, int NKV, int HS, int pos0, const float *inv_freq,
                          float scale);
void lf__cpu_rope_backward(float *dqkv, int B, int T, int NH, int NKV, int HS, int pos0, const float *inv_freq,
                           float scale);
/* Row t of batch row b at position pos[b,t] (backend_impl.h "packed rows");
 * sgn 1 forward, -1 backward. */
void lf__cpu_rope_packed(float *x, const int32_t *pos, int B, int T, int NH, int NKV, int HS, const float *inv_freq,
                         float scale, float sgn);
void lf__cpu_swiglu_forward(float *out, const float *inp, int N, int F);
/* bf16-output forms (cpu-bf16's activation storage): the fp32 op rounded. */
void lf__cpu_rmsnorm_forward_bf16(uint16_t *out, float *rstd, const float *inp, const float *weight, int N, int C,
                                  float eps);
void lf__cpu_swiglu_forward_bf16(uint16_t *out, const float *inp, int N, int F);
void lf__cpu_swiglu_backward(float *dinp, const float *inp, const float *dout, int N, int F);

/* cpu_loss.c */
double lf__cpu_loss_sum(const float *losses, const int32_t *targets, int N, long *n_valid);
void lf__cpu_crossentropy_forward_backward(float *losses, float *dlogits, const float *logits, const int32_t *targets,
                                           int N, int V, int Vp, float dloss);

/* cpu_optim.c */
void lf__cpu_adamw_update(float *params, const float *grads, float *m, float *v, size_t n, float lr, float beta1,
                          float beta2, float eps, float weight_decay, float grad_scale, int t);
/* The same update, also writing the new parameters rounded to bf16 into
 * shadow_bf16 (bits) and/or shadow_f32r (as fp32), each n long or NULL: the
 * cpu-bf16 weight copies renewed in the pass that moves the weights. */
void lf__cpu_adamw_update_shadow(float *params, const float *grads, float *m, float *v, size_t n, float lr, float beta1,
                                 float beta2, float eps, float weight_decay, float grad_scale, int t,
                                 uint16_t *shadow_bf16, float *shadow_f32r);
double lf__cpu_sum_squares(const float *x, size_t n);

#endif
