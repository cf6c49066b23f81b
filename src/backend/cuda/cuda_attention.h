/*
 * The attention kernels of the CUDA backend (cuda_attention.cu), C-callable:
 * causal self-attention forward and backward, fused (flash-attention
 * style: O(T) saved per head) and unfused (the (B,NH,T,T) probabilities
 * materialised, the reference the fused kernels are tested against), and
 * the KV-cache ops of generation.
 *
 * Shapes and layouts are exactly those of backend_impl.h's attention
 * slots: qkv (B,T,W) rows [q: NH*HS | k: NKV*HS | v: NKV*HS],
 * W = C + 2*NKV*HS, HS = C/NH; query head h reads key/value head
 * h / (NH/NKV); scores scaled by 1/sqrt(HS); causal. Dropout of the
 * probabilities (p, seed, key, offset: the fields of lf_dropout) keeps
 * entry (b,h,t,s) when the mask of flat index ((b*NH+h)*T+t)*T+s is 1, as
 * the CPU backend draws it. All pointers are device memory.
 *
 * Every wrapper launches on `stream` and returns the launch's error
 * (cudaGetLastError() after each launch), or cudaErrorInvalidValue for
 * arguments it refuses before launching: B, T < 0, NH or NKV < 1,
 * NH % NKV != 0, C % NH != 0, HS > LF_CUDA_ATT_HS_MAX, p outside [0,1).
 * B == 0 or T == 0 launches nothing. The host glue (cuda_ops_attention.c)
 * makes the same checks with messages first. Internal (lf__) names.
 */
#ifndef LF_CUDA_ATTENTION_H
#define LF_CUDA_ATTENTION_H

#include <stddef.h>
#include <stdint.h>
#include "cuda_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The largest head size the kernels take (a thread keeps rows of HS floats
 * in registers; instances for HS <= 32, 64, 128). */
#define LF_CUDA_ATT_HS_MAX 128

/* Floats of the fused forward's saved tensor (the per-row log-sum-exp of
 * the scaled scores, (B,NH,T)) and of the fused backward's scratch (the
 * per-row D = rowsum(dout * out), (B,NH,T)). */
size_t lf__cuda_attention_saved(int B, int NH, int T);
size_t lf__cuda_attention_scratch(int B, int NH, int T);
/* Floats of attention_cached's scratch: one probability row of pos0+Tn
 * entries per (batch row, query head, new row), (B,NH,Tn,pos0+Tn). */
size_t lf__cuda_attention_cached_scratch(int B, int NH, int Tn, int pos0);

/* Fused forward: out (overwritten) and lse, the log-sum-exp of each query
 * row's scaled scores (what backward recomputes the probabilities from). */
cudaError_t lf__cuk_attention_forward(float *out,       // (B,T,C)
                                      float *lse,       // (B,NH,T)
                                      const float *qkv, // (B,T,W)
                                      int B, int T, int C, int NH, int NKV, float p, uint64_t seed, uint64_t key,
                                      uint64_t offset, cudaStream_t stream);
/* Fused backward: dqkv overwritten (the k, v parts of a key/value head sum
 * its query heads in order); scratch receives D (B,NH,T). */
cudaError_t lf__cuk_attention_backward(float *dqkv,       // (B,T,W)
                                       float *scratch,    // (B,NH,T)
                                       const float *dout, // (B,T,C)
                                       const float *qkv,  // (B,T,W)
                                       const float *lse,  // (B,NH,T) from the fused forward
                                       int B, int T, int C, int NH, int NKV, float p, uint64_t seed, uint64_t key,
                                       uint64_t offset, cudaStream_t stream);

/* The fused pair on packed rows (backend_impl.h): pos (B,T) device memory,
 * query t of row b sees keys t - pos[b,t] .. t. pos NULL: the plain pair. */
cudaError_t lf__cuk_attention_forward_packed(float *out, float *lse, const float *qkv, const int32_t *pos, int B, int T,
                                             int C, int NH, int NKV, float p, uint64_t seed, uint64_t key,
                                             uint64_t offset, cudaStream_t stream);
cudaError_t lf__cuk_attention_backward_packed(float *dqkv, float *scratch, const float *dout, const float *qkv,
                                              const float *lse, const int32_t *pos, int B, int T, int C, int NH,
                                              int NKV, float p, uint64_t seed, uint64_t key, uint64_t offset,
                                              cudaStream_t stream);

/* Unfused reference forward: att (B,NH,T,T) the probabilities before
 * dropout, 0 above the diagonal (the CPU backend's saved tensor); out
 * overwritten. */
cudaError_t lf__cuk_attention_ref_forward(float *out,       // (B,T,C)
                                          float *att,       // (B,NH,T,T)
                                          const float *qkv, // (B,T,W)
                                          int B, int T, int C, int NH, int NKV, float p, uint64_t seed, uint64_t key,
                                          uint64_t offset, cudaStream_t stream);
/* Unfused reference backward from att of the reference forward; scratch
 * (B,NH,T,T) ends as the softmax gradient; dqkv overwritten. */
cudaError_t lf__cuk_attention_ref_backward(float *dqkv,       // (B,T,W)
                                           float *scratch,    // (B,NH,T,T)
                                           const float *dout, // (B,T,C)
                                           const float *qkv,  // (B,T,W)
                                           const float *att,  // (B,NH,T,T)
                                           int B, int T, int C, int NH, int NKV, float p, uint64_t seed, uint64_t key,
                                           uint64_t offset, cudaStream_t stream);

/* The k and v parts of Tn qkv rows into cache positions pos0..pos0+Tn-1,
 * bit for bit. Refuses (cudaErrorInvalidValue) Tn < 1, pos0 < 0,
 * pos0 + Tn > Tmax as well. */
cudaError_t lf__cuk_kv_append(float *kcache,    // (B,NKV,Tmax,HS)
                              float *vcache,    // (B,NKV,Tmax,HS)
                              const float *qkv, // (B,Tn,W)
                              int B, int Tn, int NH, int NKV, int HS, int pos0, int Tmax, cudaStream_t stream);
/* Tn query rows at positions pos0.. against cached positions 0..pos0+t;
 * each row computed alone by one warp (the same bits however positions are
 * split into calls). out overwritten. */
cudaError_t lf__cuk_attention_cached(float *out,          // (B,Tn,C)
                                     float *scratch,      // (B,NH,Tn,pos0+Tn)
                                     const float *qkv,    // (B,Tn,W)
                                     const float *kcache, // (B,NKV,Tmax,HS)
                                     const float *vcache, // (B,NKV,Tmax,HS)
                                     int B, int Tn, int C, int NH, int NKV, int pos0, int Tmax, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
