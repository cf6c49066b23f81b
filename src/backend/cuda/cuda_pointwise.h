/*
 * The pointwise op family's kernels (cuda_pointwise.cu, cuda_norm.cu,
 * cuda_loss.cu, cuda_optim.cu), C-callable: embedding, LayerNorm, RMSNorm,
 * GELU, SwiGLU, RoPE, residual, dropout, the fused softmax-cross-entropy,
 * the loss sum, AdamW, the sum of squares and the fp16 rounding. The host
 * glue (cuda_ops_pointwise.c) checks the arguments as the CPU backend does
 * and calls these; shapes and semantics are those of the matching slot in
 * backend_impl.h, which documents every pointer.
 *
 * Every wrapper launches on `stream` and returns the launch's error
 * (cudaGetLastError() after the last launch), or cudaErrorInvalidValue for
 * arguments it refuses itself, before launching; a zero-sized op launches
 * nothing. All pointers are device memory. Internal (lf__) names, not part
 * of llmforge's public API. C, and C++ under extern "C"; never includes
 * backend_impl.h (C++ cannot parse its C11 atomics).
 *
 * Determinism: every reduction has a fixed shape (lane order, warp order,
 * block order fixed by the launch, never by the schedule) and no float
 * atomics are used, so two runs give the same bits.
 */
#ifndef LF_CUDA_POINTWISE_H
#define LF_CUDA_POINTWISE_H

#include <stddef.h>
#include <stdint.h>
#include "cuda_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the RNG (cuda_rng.cuh), for its test: out[i] = lf_rng_uniform(seed,
 * purpose, index[i]) computed on the device. */
cudaError_t lf__cuk_rng_uniform(float *out,            // (n)
                                const uint64_t *index, // (n)
                                int n, uint64_t seed, uint32_t purpose, cudaStream_t stream);

/* ---- embedding (wpe NULL: token embedding only; then dwpe NULL too).
 * backward: dwte[v,c] += the rows with token v in row order, dwpe[t,c] +=
 * over b in order: the CPU's summation order, so the CPU's bits. */
cudaError_t lf__cuk_encoder_forward(float *out, const int32_t *inp, const float *wte, const float *wpe, int B, int T,
                                    int C, cudaStream_t stream);
cudaError_t lf__cuk_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int B, int T,
                                     int C, cudaStream_t stream);
/* Packed rows (backend_impl.h): wpe row pos[n] (clamped into [0, t]);
 * backward: dwte as above, dwpe[p,c] += the rows with position p in row
 * order (the CPU's order, so its bits). */
cudaError_t lf__cuk_encoder_forward_packed(float *out, const int32_t *inp, const int32_t *pos, const float *wte,
                                           const float *wpe, int B, int T, int C, cudaStream_t stream);
cudaError_t lf__cuk_encoder_backward_packed(float *dwte, float *dwpe, const float *dout, const int32_t *inp,
                                            const int32_t *pos, int B, int T, int C, cudaStream_t stream);

/* ---- norms. The forward's out is fp32, or with out_bf16 uint16_t bf16
 * bits: each element the fp32 result rounded to nearest even (the same
 * arithmetic, rounded at the store). backward adds into dinp, dweight (and
 * dbias). */
cudaError_t lf__cuk_layernorm_forward(void *out, int out_bf16, float *mean, float *rstd, const float *inp,
                                      const float *weight, const float *bias, int N, int C, cudaStream_t stream);
/* res = a + b, then the norm of res, in one kernel (res may equal a or b):
 * the bits of residual_forward followed by the plain norm. */
cudaError_t lf__cuk_residual_layernorm_forward(float *res, void *out, int out_bf16, float *mean, float *rstd,
                                               const float *a, const float *b, const float *weight, const float *bias,
                                               int N, int C, cudaStream_t stream);
cudaError_t lf__cuk_residual_rmsnorm_forward(float *res, void *out, int out_bf16, float *rstd, const float *a,
                                             const float *b, const float *weight, int N, int C, float eps,
                                             cudaStream_t stream);
cudaError_t lf__cuk_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                                       const float *weight, const float *mean, const float *rstd, int N, int C,
                                       cudaStream_t stream);
cudaError_t lf__cuk_rmsnorm_forward(void *out, int out_bf16, float *rstd, const float *inp, const float *weight, int N,
                                    int C, float eps, cudaStream_t stream);
cudaError_t lf__cuk_rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                                     const float *weight, const float *rstd, int N, int C, cudaStream_t stream);
/* per-head RMSNorm of a qkv row's q and k heads (backend_impl.h's qknorm_*; backward in place) */
cudaError_t lf__cuk_qknorm_forward(float *out, float *rstd, const float *inp, const float *wq, const float *wk, int N,
                                   int NH, int NKV, int HS, float eps, cudaStream_t stream);
cudaError_t lf__cuk_qknorm_backward(float *dqkv, float *dwq, float *dwk, const float *inp, const float *wq,
                                    const float *wk, const float *rstd, int N, int NH, int NKV, int HS,
                                    cudaStream_t stream);

/* ---- activations (the forwards' out: fp32, or bf16 bits with out_bf16, as the norms) */
cudaError_t lf__cuk_gelu_forward(void *out, int out_bf16, const float *inp, size_t n, cudaStream_t stream);
cudaError_t lf__cuk_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n, cudaStream_t stream);
cudaError_t lf__cuk_swiglu_forward(void *out, int out_bf16, const float *inp, int N, int F, cudaStream_t stream);
cudaError_t lf__cuk_swiglu_backward(float *dinp, const float *inp, const float *dout, int N, int F,
                                    cudaStream_t stream);

/* ---- RoPE: rotate the q and k heads of every row in place; sgn -1 is the
 * transpose (backward). inv_freq[i], i < HS/2, comes from the host (the
 * model's table, src/model/rope.c, so the CPU's bits), and scale multiplies
 * cos and sin (YaRN; 1 otherwise); HS/2 <= LF_CUK_ROPE_MAX_HALF. */
#define LF_CUK_ROPE_MAX_HALF 512
typedef struct lf_cuk_rope_freqs {
    float inv_freq[LF_CUK_ROPE_MAX_HALF];
    float scale;
} lf_cuk_rope_freqs;
cudaError_t lf__cuk_rope(float *qkv, const lf_cuk_rope_freqs *freqs, int B, int T, int NH, int NKV, int HS, int pos0,
                         float sgn, cudaStream_t stream);
/* Packed rows: row (b,t) at position pos[b*T+t] (clamped into [0, t]). */
cudaError_t lf__cuk_rope_packed(float *qkv, const int32_t *pos, const lf_cuk_rope_freqs *freqs, int B, int T, int NH,
                                int NKV, int HS, float sgn, cudaStream_t stream);

/* ---- residual, dropout. out may equal a or b, and dropout's out its inp.
 * dropout: element i kept when lf_cuda_dropout_keep(seed, key, offset + i,
 * p), then multiplied by scale (= 1/(1-p), the host's float); p > 0. The
 * same kernel is forward (inp) and backward (dout). */
cudaError_t lf__cuk_residual_forward(float *out, const float *a, const float *b, size_t n, cudaStream_t stream);
cudaError_t lf__cuk_residual_backward(float *da, float *db, const float *dout, size_t n, cudaStream_t stream);
cudaError_t lf__cuk_dropout(float *out, const float *inp, size_t n, float p, float scale, uint64_t seed, uint64_t key,
                            uint64_t offset, cudaStream_t stream);

/* ---- loss: a block per row (max, sum of exp in double, the gradient);
 * dlogits may be NULL or equal logits. */
cudaError_t lf__cuk_crossentropy(float *losses, float *dlogits, const float *logits, const int32_t *targets, int N,
                                 int V, int Vp, float dloss, cudaStream_t stream);
/* out->sum: the valid rows' losses added in row order in double (the CPU's
 * order, so its bits), out->count their number; one block. */
typedef struct lf_cuk_loss_result {
    double sum;
    long long count;
} lf_cuk_loss_result;
cudaError_t lf__cuk_loss_sum(lf_cuk_loss_result *out, const float *losses, const int32_t *targets, int N,
                             cudaStream_t stream);

/* ---- optimizer. The constants of one AdamW update, formed on the host as
 * the CPU forms them (cpu_optim.c). */
typedef struct lf_cuk_adamw_k {
    float decay, step_size, bc2_sqrt, w1, w1c, b2, omb2, eps, grad_scale;
    int lerp_low;
} lf_cuk_adamw_k;
/* shadow: NULL, or n uint16_t that receive the new params rounded to bf16
 * (the cuda-bf16 table's cached weight copy, renewed in the same pass). */
cudaError_t lf__cuk_adamw(float *params, const float *grads, float *m, float *v, uint16_t *shadow, size_t n,
                          lf_cuk_adamw_k k, cudaStream_t stream);
/* *out = sum of x[i]^2 in double: LF_CUK_SS_BLOCKS (or fewer) blocks write
 * partial sums (a fixed tree each), one block adds them in a fixed tree.
 * partial: LF_CUK_SS_BLOCKS doubles of scratch. */
#define LF_CUK_SS_BLOCKS 256
cudaError_t lf__cuk_sum_squares(double *out, double *partial, const float *x, size_t n, cudaStream_t stream);
/* x[i] = fp16(x[i]) (round to nearest even, overflow to inf) in place;
 * *flag = 1 when any result is not finite (else untouched: the caller
 * clears it). */
cudaError_t lf__cuk_fp16_round(float *x, size_t n, int *flag, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
