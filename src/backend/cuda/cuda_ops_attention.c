/*
 * The CUDA backend's attention op family: host glue (see cuda_internal.h)
 * for attention_forward/backward (the fused flash-attention kernels of
 * cuda_attention.cu), the size slots, kv_append and attention_cached.
 *
 * Each slot checks its arguments as the CPU backend's table does
 * (cpu_backend.c: NH % NKV == 0 and C % NH == 0, the cache's position
 * range), plus what these kernels add: a head size of at most
 * LF_CUDA_ATT_HS_MAX (LF_ERR_UNSUPPORTED: the kernels keep rows in
 * registers), B and T not negative, a dropout probability in [0, 1). A
 * refused call records the sticky status with a message naming the op and
 * the values, and launches nothing; a CUDA error becomes the sticky status
 * through lf__cuda_check.
 *
 * Sizes: the fused forward saves the per-row log-sum-exp, (B,NH,T) floats;
 * backward's scratch holds D = rowsum(dout * out), (B,NH,T) floats (O(T)
 * per head both); attention_cached's scratch is the CPU's, one probability
 * row per new query row. The ops never allocate.
 *
 * The unfused reference (lf__cuk_attention_ref_*) is not in the table: it
 * needs (B,NH,T,T) buffers; tests/cuda/test_cuda_attention.c calls it
 * directly to check the fused kernels.
 */
#include "cuda_internal.h"
#include "cuda_attention.h"

static int bad_heads(lf_backend *be, const char *op, int C, int NH, int NKV) {
    if (NH > 0 && NKV > 0 && NH % NKV == 0 && C > 0 && C % NH == 0) return 0;
    lf__backend_fail(be, LF_ERR_INVALID_ARG,
                     "%s: %d channels, %d heads, %d key/value heads (need NH %% NKV == 0 and C %% NH == 0)", op, C, NH,
                     NKV);
    return 1;
}

static int bad_hs(lf_backend *be, const char *op, int HS) {
    if (HS <= LF_CUDA_ATT_HS_MAX) return 0;
    lf__backend_fail(be, LF_ERR_UNSUPPORTED, "%s: head size %d: the CUDA attention kernels take at most %d", op, HS,
                     LF_CUDA_ATT_HS_MAX);
    return 1;
}

static int bad_bt(lf_backend *be, const char *op, int B, int T) {
    if (B >= 0 && T >= 0) return 0;
    lf__backend_fail(be, LF_ERR_INVALID_ARG, "%s: batch %d, %d positions (must not be negative)", op, B, T);
    return 1;
}

static int bad_drop(lf_backend *be, const char *op, lf_dropout drop) {
    if (drop.p >= 0.0f && drop.p < 1.0f) return 0;
    lf__backend_fail(be, LF_ERR_INVALID_ARG, "%s: attention dropout probability %g (must be in [0, 1))", op,
                     (double)drop.p);
    return 1;
}

static int bad_kv(lf_backend *be, const char *op, int B, int Tn, int pos0, int Tmax) {
    if (B >= 1 && Tn >= 1 && pos0 >= 0 && (long)pos0 + Tn <= Tmax) return 0;
    lf__backend_fail(be, LF_ERR_INVALID_ARG, "%s: %d new rows at position %d of a cache of %d positions (batch %d)", op,
                     Tn, pos0, Tmax, B);
    return 1;
}

static void cuda_attention_forward(lf_backend *be, float *out, float *att, const float *qkv, int B, int T, int C,
                                   int NH, int NKV, lf_dropout drop) {
    const char *op = "attention_forward";
    if (bad_heads(be, op, C, NH, NKV) || bad_hs(be, op, C / NH) || bad_bt(be, op, B, T) || bad_drop(be, op, drop))
        return;
    if (B == 0 || T == 0) return;
    cudaError_t e = lf__cuk_attention_forward(out, att, qkv, B, T, C, NH, NKV, drop.p, drop.seed, drop.key, drop.offset,
                                              lf__cuda_stream(be));
    lf__cuda_check(be, e, op, "att_fwd_flash");
}

static void cuda_attention_backward(lf_backend *be, float *dqkv, float *scratch, const float *dout, const float *qkv,
                                    const float *att, int B, int T, int C, int NH, int NKV, lf_dropout drop) {
    const char *op = "attention_backward";
    if (bad_heads(be, op, C, NH, NKV) || bad_hs(be, op, C / NH) || bad_bt(be, op, B, T) || bad_drop(be, op, drop))
        return;
    if (B == 0 || T == 0) return;
    cudaError_t e = lf__cuk_attention_backward(dqkv, scratch, dout, qkv, att, B, T, C, NH, NKV, drop.p, drop.seed,
                                               drop.key, drop.offset, lf__cuda_stream(be));
    lf__cuda_check(be, e, op, "att_bwd_dq/att_bwd_dkdv");
}

static void cuda_attention_forward_packed(lf_backend *be, float *out, float *att, const float *qkv, const int32_t *pos,
                                          int B, int T, int C, int NH, int NKV, lf_dropout drop) {
    const char *op = "attention_forward_packed";
    if (bad_heads(be, op, C, NH, NKV) || bad_hs(be, op, C / NH) || bad_bt(be, op, B, T) || bad_drop(be, op, drop))
        return;
    if (!pos) {
        lf__backend_fail(be, LF_ERR_INVALID_ARG, "%s: pos is NULL", op);
        return;
    }
    if (B == 0 || T == 0) return;
    cudaError_t e = lf__cuk_attention_forward_packed(out, att, qkv, pos, B, T, C, NH, NKV, drop.p, drop.seed, drop.key,
                                                     drop.offset, lf__cuda_stream(be));
    lf__cuda_check(be, e, op, "att_fwd_flash");
}

static void cuda_attention_backward_packed(lf_backend *be, float *dqkv, float *scratch, const float *dout,
                                           const float *qkv, const float *att, const int32_t *pos, int B, int T, int C,
                                           int NH, int NKV, lf_dropout drop) {
    const char *op = "attention_backward_packed";
    if (bad_heads(be, op, C, NH, NKV) || bad_hs(be, op, C / NH) || bad_bt(be, op, B, T) || bad_drop(be, op, drop))
        return;
    if (!pos) {
        lf__backend_fail(be, LF_ERR_INVALID_ARG, "%s: pos is NULL", op);
        return;
    }
    if (B == 0 || T == 0) return;
    cudaError_t e = lf__cuk_attention_backward_packed(dqkv, scratch, dout, qkv, att, pos, B, T, C, NH, NKV, drop.p,
                                                      drop.seed, drop.key, drop.offset, lf__cuda_stream(be));
    lf__cuda_check(be, e, op, "att_bwd_dq/att_bwd_dkdv");
}

static void cuda_kv_append(lf_backend *be, float *kcache, float *vcache, const float *qkv, int B, int Tn, int NH,
                           int NKV, int HS, int pos0, int Tmax) {
    const char *op = "kv_append";
    if (HS < 1) {
        lf__backend_fail(be, LF_ERR_INVALID_ARG, "%s: head size %d", op, HS);
        return;
    }
    if (bad_heads(be, op, NH * HS, NH, NKV) || bad_kv(be, op, B, Tn, pos0, Tmax)) return;
    cudaError_t e = lf__cuk_kv_append(kcache, vcache, qkv, B, Tn, NH, NKV, HS, pos0, Tmax, lf__cuda_stream(be));
    lf__cuda_check(be, e, op, "att_kv_append");
}

static void cuda_attention_cached(lf_backend *be, float *out, float *scratch, const float *qkv, const float *kcache,
                                  const float *vcache, int B, int Tn, int C, int NH, int NKV, int pos0, int Tmax) {
    const char *op = "attention_cached";
    if (bad_heads(be, op, C, NH, NKV) || bad_hs(be, op, C / NH) || bad_kv(be, op, B, Tn, pos0, Tmax)) return;
    cudaError_t e = lf__cuk_attention_cached(out, scratch, qkv, kcache, vcache, B, Tn, C, NH, NKV, pos0, Tmax,
                                             lf__cuda_stream(be));
    lf__cuda_check(be, e, op, "att_cached_row");
}

void lf__cuda_install_attention(lf_backend_ops *ops) {
    ops->attention_forward = cuda_attention_forward;
    ops->attention_backward = cuda_attention_backward;
    ops->attention_forward_packed = cuda_attention_forward_packed;
    ops->attention_backward_packed = cuda_attention_backward_packed;
    ops->attention_saved = lf__cuda_attention_saved;
    ops->attention_scratch = lf__cuda_attention_scratch;
    ops->attention_cached_scratch = lf__cuda_attention_cached_scratch;
    ops->kv_append = cuda_kv_append;
    ops->attention_cached = cuda_attention_cached;
}
