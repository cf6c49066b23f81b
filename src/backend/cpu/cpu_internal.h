/*
 * CPU backend internals: the op functions the table in cpu_backend.c points
 * at, and small helpers shared by the op files.
 *
 * Invariants (see backend_impl.h for the full contract):
 *  - Backward ops accumulate (+=) into every gradient; only the fused
 *    classifier overwrites dlogits.
 *  - Every reduction that crosses rows (dbias, layernorm dweight/dbias,
 *    encoder dwte/dwpe, sum_squares) has a fixed summation order that does
 *    not depend on the number of threads, so results are bit-identical for
 *    any thread count. Rows are split across threads only where each output
 *    element is written by exactly one row.
 *  - Ops never allocate; the only scratch is a fixed-size stack tile in the
 *    attention forward with dropout.
 */
#ifndef LF_BACKEND_CPU_INTERNAL_H
#define LF_BACKEND_CPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include "backend/backend_impl.h"
#include "llmforge/core.h"

/* Elements of work below which a kernel stays on the calling thread: forking
 * a team costs a few microseconds, about what 16k simple flops take. */
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

/* Dropout mask of element i of the tensor keyed by `d` (backend_impl.h). */
static inline int lf__cpu_dropout_keep(lf_dropout d, uint64_t i) {
    return lf_rng_uniform(d.seed, LF_RNG_DROPOUT, lf_rng_mix(d.key, i)) >= d.p;
}

/* cpu_pointwise.c */
void lf__cpu_encoder_forward(float *out, const int32_t *inp, const float *wte, const float *wpe,
                             int B, int T, int C);
void lf__cpu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp,
                              int B, int T, int C);
void lf__cpu_gelu_forward(float *out, const float *inp, size_t n);
void lf__cpu_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);
void lf__cpu_residual_forward(float *out, const float *a, const float *b, size_t n);
void lf__cpu_residual_backward(float *da, float *db, const float *dout, size_t n);
void lf__cpu_dropout_forward(float *out, const float *inp, size_t n, lf_dropout drop);
void lf__cpu_dropout_backward(float *dinp, const float *dout, size_t n, lf_dropout drop);

/* cpu_norm.c */
void lf__cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                               const float *weight, const float *bias, int N, int C);
void lf__cpu_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                const float *inp, const float *weight, const float *mean,
                                const float *rstd, int N, int C);

/* cpu_matmul.c */
void lf__cpu_matmul_forward(float *out, const float *inp, const float *weight, const float *bias,
                            int N, int C, int OC, lf_weight_layout layout);
void lf__cpu_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                             const float *inp, const float *weight, int N, int C, int OC,
                             lf_weight_layout layout);

/* cpu_attention.c */
void lf__cpu_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                               int NH, lf_dropout drop);
void lf__cpu_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                                const float *att, int B, int T, int C, int NH, lf_dropout drop);

/* cpu_loss.c */
void lf__cpu_crossentropy_forward_backward(float *losses, float *dlogits, const float *logits,
                                           const int32_t *targets, int N, int V, int Vp,
                                           float dloss);

/* cpu_optim.c */
void lf__cpu_adamw_update(float *params, const float *grads, float *m, float *v, size_t n, float lr,
                          float beta1, float beta2, float eps, float weight_decay,
                          float grad_scale, int t);
double lf__cpu_sum_squares(const float *x, size_t n);

#endif
