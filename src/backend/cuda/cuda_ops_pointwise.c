/*
 * The CUDA backend's pointwise op family: host glue (see cuda_internal.h)
 * for the embedding, LayerNorm, RMSNorm, GELU, SwiGLU, RoPE, residual,
 * dropout, the fused cross-entropy, the loss sum, AdamW, the sum of
 * squares and the fp16 rounding. Kernels: cuda_pointwise.cu, cuda_norm.cu,
 * cuda_loss.cu, cuda_optim.cu (declared in cuda_pointwise.h).
 *
 * The same slots serve both tables ("cuda" and "cuda-bf16"): the norms,
 * GELU and SwiGLU write bf16 storage when out_dt asks and the table offers
 * it (act_dtypes), which only cuda-bf16 does.
 *
 * Each slot has the table's exact signature, refuses what the CPU backend
 * refuses (an activation dtype outside act_dtypes: LF_ERR_UNSUPPORTED;
 * RoPE's head layout and positions, the cross-entropy's vocabulary:
 * LF_ERR_INVALID_ARG, with the CPU's messages) plus negative sizes, then
 * launches on the instance's stream and records a CUDA error with
 * lf__cuda_check. Nothing here allocates per call.
 *
 * Host values (loss_sum, sum_squares, fp16_round): the kernel writes into
 * the context's reduce_buf (allocated once, at first use), the value is
 * copied back and the stream synchronised: these three are sync points, as
 * on the CPU. After a failure they return 0 (the instance is failed and
 * results are undefined until it is closed).
 *
 * What comes from the host rather than the device, so that the numbers are
 * the CPU's: AdamW's constants (cpu_optim.c's formulas: bias corrections in
 * double, the lerp weight), RoPE's inv_freq table and cos/sin factor (the
 * model's, src/model/rope.c, as the CPU gets them), dropout's 1/(1-p).
 */
#include <math.h>
#include <string.h>
#include "cuda_internal.h"
#include "cuda_pointwise.h"

/* ---------------------------------------------------------------- checks */

static int dt_ok(lf_backend *be, const char *op, lf_dtype dt) {
    if (be->ops->act_dtypes & LF_DT_BIT(dt)) return 1;
    lf__backend_fail(be, LF_ERR_UNSUPPORTED, "%s: activation storage %s is not offered by backend '%s'", op,
                     dt == LF_DT_BF16  ? "bf16"
                     : dt == LF_DT_F32 ? "fp32"
                                       : "(unknown dtype)",
                     be->ops->name);
    return 0;
}

static int bad_size(lf_backend *be, const char *op, const char *what, long a, long b) {
    if (a >= 0 && b >= 0) return 0;
    lf__backend_fail(be, LF_ERR_INVALID_ARG, "%s: %s %ld x %ld (sizes must be >= 0)", op, what, a, b);
    return 1;
}

/* ---------------------------------------------------------------- embedding */

static void cu_encoder_forward(lf_backend *be, float *out, const int32_t *inp, const float *wte, const float *wpe,
                               int B, int T, int C) {
    if (bad_size(be, "encoder_forward", "batch x time", B, T) || bad_size(be, "encoder_forward", "channels", C, 0))
        return;
    lf__cuda_check(be, lf__cuk_encoder_forward(out, inp, wte, wpe, B, T, C, lf__cuda_stream(be)), "encoder_forward",
                   "pw_encoder_forward");
}

static void cu_encoder_backward(lf_backend *be, float *dwte, float *dwpe, const float *dout, const int32_t *inp, int B,
                                int T, int C) {
    if (bad_size(be, "encoder_backward", "batch x time", B, T) || bad_size(be, "encoder_backward", "channels", C, 0))
        return;
    if ((long)B * T > 0x7fffffffL) {
        lf__backend_fail(be, LF_ERR_INVALID_ARG, "encoder_backward: %d x %d rows (at most 2^31-1)", B, T);
        return;
    }
    lf__cuda_check(be, lf__cuk_encoder_backward(dwte, dwpe, dout, inp, B, T, C, lf__cuda_stream(be)),
                   "encoder_backward", "pw_encoder_backward");
}

static void cu_encoder_forward_packed(lf_backend *be, float *out, const int32_t *inp, const int32_t *pos,
                                      const float *wte, const float *wpe, int B, int T, int C) {
    const char *op = "encoder_forward_packed";
    if (bad_size(be, op, "batch x time", B, T) || bad_size(be, op, "channels", C, 0)) return;
    if (!pos || !wpe) {
        lf__backend_fail(be, LF_ERR_INVALID_ARG, "%s: %s is NULL", op, pos ? "wpe" : "pos");
        return;
    }
    lf__cuda_check(be, lf__cuk_encoder_forward_packed(out, inp, pos, wte, wpe, B, T, C, lf__cuda_stream(be)), op,
                   "pw_encoder_forward_packed");
}

static void cu_encoder_backward_packed(lf_backend *be, float *dwte, float *dwpe, const float *dout, const int32_t *inp,
                                       const int32_t *pos, int B, int T, int C) {
    const char *op = "encoder_backward_packed";
    if (bad_size(be, op, "batch x time", B, T) || bad_size(be, op, "channels", C, 0)) return;
    if ((long)B * T > 0x7fffffffL || !pos || !dwpe) {
        lf__backend_fail(be, LF_ERR_INVALID_ARG, "%s: %d x %d rows (at most 2^31-1), pos and dwpe given", op, B, T);
        return;
    }
    lf__cuda_check(be, lf__cuk_encoder_backward_packed(dwte, dwpe, dout, inp, pos, B, T, C, lf__cuda_stream(be)), op,
                   "pw_encoder_backward_wte");
}

/* ---------------------------------------------------------------- norms */

static void cu_layernorm_forward(lf_backend *be, void *out, lf_dtype out_dt, float *mean, float *rstd, const float *inp,
                                 const float *weight, const float *bias, int N, int C) {
    if (!dt_ok(be, "layernorm_forward", out_dt) || bad_size(be, "layernorm_forward", "rows x channels", N, C)) return;
    lf__cuda_check(be,
                   lf__cuk_layernorm_forward(out, out_dt == LF_DT_BF16, mean, rstd, inp, weight, bias, N, C,
                                             lf__cuda_stream(be)),
                   "layernorm_forward", "ln_forward");
}

static void cu_layernorm_backward(lf_backend *be, float *dinp, float *dweight, float *dbias, const float *dout,
                                  const float *inp, const float *weight, const float *mean, const float *rstd, int N,
                                  int C) {
    if (bad_size(be, "layernorm_backward", "rows x channels", N, C)) return;
    lf__cuda_check(be,
                   lf__cuk_layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C,
                                              lf__cuda_stream(be)),
                   "layernorm_backward", "ln_backward_dinp / norm_backward_params");
}

static void cu_rmsnorm_forward(lf_backend *be, void *out, lf_dtype out_dt, float *rstd, const float *inp,
                               const float *weight, int N, int C, float eps) {
    if (!dt_ok(be, "rmsnorm_forward", out_dt) || bad_size(be, "rmsnorm_forward", "rows x channels", N, C)) return;
    lf__cuda_check(be,
                   lf__cuk_rmsnorm_forward(out, out_dt == LF_DT_BF16, rstd, inp, weight, N, C, eps,
                                           lf__cuda_stream(be)),
                   "rmsnorm_forward", "rms_forward");
}

static void cu_rmsnorm_backward(lf_backend *be, float *dinp, float *dweight, const float *dout, const float *inp,
                                const float *weight, const float *rstd, int N, int C) {
    if (bad_size(be, "rmsnorm_backward", "rows x channels", N, C)) return;
    lf__cuda_check(be, lf__cuk_rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C, lf__cuda_stream(be)),
                   "rmsnorm_backward", "rms_backward_dinp / norm_backward_params");
}

static void cu_qknorm_forward(lf_backend *be, float *out, float *rstd, const float *inp, const float *wq,
                              const float *wk, int N, int NH, int NKV, int HS, float eps) {
    if (bad_size(be, "qknorm_forward", "rows x heads", N, NH + NKV) ||
        bad_size(be, "qknorm_forward", "head size", HS, 0))
        return;
    lf__cuda_check(be, lf__cuk_qknorm_forward(out, rstd, inp, wq, wk, N, NH, NKV, HS, eps, lf__cuda_stream(be)),
                   "qknorm_forward", "qk_forward");
}

static void cu_qknorm_backward(lf_backend *be, float *dqkv, float *dwq, float *dwk, const float *inp, const float *wq,
                               const float *wk, const float *rstd, int N, int NH, int NKV, int HS) {
    if (bad_size(be, "qknorm_backward", "rows x heads", N, NH + NKV) ||
        bad_size(be, "qknorm_backward", "head size", HS, 0))
        return;
    lf__cuda_check(be, lf__cuk_qknorm_backward(dqkv, dwq, dwk, inp, wq, wk, rstd, N, NH, NKV, HS, lf__cuda_stream(be)),
                   "qknorm_backward", "qk_backward_params / qk_backward_dinp");
}

static void cu_residual_layernorm_forward(lf_backend *be, float *res, void *out, lf_dtype out_dt, float *mean,
                                          float *rstd, const float *a, const float *b, const float *weight,
                                          const float *bias, int N, int C) {
    if (!dt_ok(be, "residual_layernorm_forward", out_dt) ||
        bad_size(be, "residual_layernorm_forward", "rows x channels", N, C))
        return;
    lf__cuda_check(be,
                   lf__cuk_residual_layernorm_forward(res, out, out_dt == LF_DT_BF16, mean, rstd, a, b, weight, bias, N,
                                                      C, lf__cuda_stream(be)),
                   "residual_layernorm_forward", "ln_forward<Res>");
}

static void cu_residual_rmsnorm_forward(lf_backend *be, float *res, void *out, lf_dtype out_dt, float *rstd,
                                        const float *a, const float *b, const float *weight, int N, int C, float eps) {
    if (!dt_ok(be, "residual_rmsnorm_forward", out_dt) ||
        bad_size(be, "residual_rmsnorm_forward", "rows x channels", N, C))
        return;
    lf__cuda_check(be,
                   lf__cuk_residual_rmsnorm_forward(res, out, out_dt == LF_DT_BF16, rstd, a, b, weight, N, C, eps,
                                                    lf__cuda_stream(be)),
                   "residual_rmsnorm_forward", "rms_forward<Res>");
}

/* ---------------------------------------------------------------- activations */

static void cu_gelu_forward(lf_backend *be, void *out, lf_dtype out_dt, const float *inp, size_t n) {
    if (!dt_ok(be, "gelu_forward", out_dt)) return;
    lf__cuda_check(be, lf__cuk_gelu_forward(out, out_dt == LF_DT_BF16, inp, n, lf__cuda_stream(be)), "gelu_forward",
                   "pw_gelu_forward");
}

static void cu_gelu_backward(lf_backend *be, float *dinp, const float *inp, const float *dout, size_t n) {
    lf__cuda_check(be, lf__cuk_gelu_backward(dinp, inp, dout, n, lf__cuda_stream(be)), "gelu_backward",
                   "pw_gelu_backward");
}

static void cu_swiglu_forward(lf_backend *be, void *out, lf_dtype out_dt, const float *inp, int N, int F) {
    if (!dt_ok(be, "swiglu_forward", out_dt) || bad_size(be, "swiglu_forward", "rows x width", N, F)) return;
    lf__cuda_check(be, lf__cuk_swiglu_forward(out, out_dt == LF_DT_BF16, inp, N, F, lf__cuda_stream(be)),
                   "swiglu_forward", "pw_swiglu_forward");
}

static void cu_swiglu_backward(lf_backend *be, float *dinp, const float *inp, const float *dout, int N, int F) {
    if (bad_size(be, "swiglu_backward", "rows x width", N, F)) return;
    lf__cuda_check(be, lf__cuk_swiglu_backward(dinp, inp, dout, N, F, lf__cuda_stream(be)), "swiglu_backward",
                   "pw_swiglu_backward");
}

/* ---------------------------------------------------------------- RoPE */

/* The CPU's checks (cpu_backend.c bad_heads / bad_rope) with its messages,
 * and this backend's limit on the head size. */
static int bad_rope(lf_backend *be, const char *op, int B, int T, int NH, int NKV, int HS, int pos0) {
    const int C = NH * HS;
    if (!(NH > 0 && NKV > 0 && NH % NKV == 0 && C % NH == 0)) {
        lf__backend_fail(be, LF_ERR_INVALID_ARG,
                         "%s: %d channels, %d heads, %d key/value heads (need NH %% NKV == 0 and C %% NH == 0)", op, C,
                         NH, NKV);
        return 1;
    }
    if (!(HS > 0 && HS % 2 == 0 && pos0 >= 0 && (long)pos0 + T <= (1L << 24))) {
        lf__backend_fail(be, LF_ERR_INVALID_ARG, "%s: head size %d (must be even), positions %d..%ld (at most 2^24)",
                         op, HS, pos0, (long)pos0 + T - 1);
        return 1;
    }
    if (bad_size(be, op, "batch x time", B, T)) return 1;
    if (HS / 2 > LF_CUK_ROPE_MAX_HALF) {
        lf__backend_fail(be, LF_ERR_UNSUPPORTED, "%s: head size %d (backend 'cuda' supports at most %d)", op, HS,
                         2 * LF_CUK_ROPE_MAX_HALF);
        return 1;
    }
    return 0;
}

static void rope(lf_backend *be, const char *op, float *x, int B, int T, int NH, int NKV, int HS, int pos0,
                 const float *inv_freq, float scale, float sgn) {
    if (bad_rope(be, op, B, T, NH, NKV, HS, pos0)) return;
    lf_cuk_rope_freqs f;
    memset(&f, 0, sizeof f);
    /* the host's table (src/model/rope.c), passed by value as a kernel argument */
    memcpy(f.inv_freq, inv_freq, sizeof(float) * (size_t)(HS / 2));
    f.scale = scale;
    lf__cuda_check(be, lf__cuk_rope(x, &f, B, T, NH, NKV, HS, pos0, sgn, lf__cuda_stream(be)), op, "pw_rope");
}

static void cu_rope_forward(lf_backend *be, float *qkv, int B, int T, int NH, int NKV, int HS, int pos0,
                            const float *inv_freq, float scale) {
    rope(be, "rope_forward", qkv, B, T, NH, NKV, HS, pos0, inv_freq, scale, 1.0f);
}

static void cu_rope_backward(lf_backend *be, float *dqkv, int B, int T, int NH, int NKV, int HS, int pos0,
                             const float *inv_freq, float scale) {
    rope(be, "rope_backward", dqkv, B, T, NH, NKV, HS, pos0, inv_freq, scale, -1.0f);
}

static void rope_packed(lf_backend *be, const char *op, float *x, const int32_t *pos, int B, int T, int NH, int NKV,
                        int HS, const float *inv_freq, float scale, float sgn) {
    if (bad_rope(be, op, B, T, NH, NKV, HS, 0)) return;
    if (!pos || !inv_freq) {
        lf__backend_fail(be, LF_ERR_INVALID_ARG, "%s: %s is NULL", op, pos ? "inv_freq" : "pos");
        return;
    }
    lf_cuk_rope_freqs f;
    memset(&f, 0, sizeof f);
    memcpy(f.inv_freq, inv_freq, sizeof(float) * (size_t)(HS / 2));
    f.scale = scale;
    lf__cuda_check(be, lf__cuk_rope_packed(x, pos, &f, B, T, NH, NKV, HS, sgn, lf__cuda_stream(be)), op,
                   "pw_rope_packed");
}

static void cu_rope_forward_packed(lf_backend *be, float *qkv, const int32_t *pos, int B, int T, int NH, int NKV,
                                   int HS, const float *inv_freq, float scale) {
    rope_packed(be, "rope_forward_packed", qkv, pos, B, T, NH, NKV, HS, inv_freq, scale, 1.0f);
}

static void cu_rope_backward_packed(lf_backend *be, float *dqkv, const int32_t *pos, int B, int T, int NH, int NKV,
                                    int HS, const float *inv_freq, float scale) {
    rope_packed(be, "rope_backward_packed", dqkv, pos, B, T, NH, NKV, HS, inv_freq, scale, -1.0f);
}

/* ---------------------------------------------------------------- residual, dropout */

static void cu_residual_forward(lf_backend *be, float *out, const float *a, const float *b, size_t n) {
    lf__cuda_check(be, lf__cuk_residual_forward(out, a, b, n, lf__cuda_stream(be)), "residual_forward",
                   "pw_residual_forward");
}

static void cu_residual_backward(lf_backend *be, float *da, float *db, const float *dout, size_t n) {
    lf__cuda_check(be, lf__cuk_residual_backward(da, db, dout, n, lf__cuda_stream(be)), "residual_backward",
                   "pw_residual_backward");
}

/* dropout forward and backward are the same map (mask * x / (1-p)) */
static void dropout(lf_backend *be, const char *op, float *out, const float *inp, size_t n, lf_dropout d) {
    if (!n) return;
    if (d.p <= 0.0f) {
        if (out != inp)
            lf__cuda_check(be,
                           cudaMemcpyAsync(out, inp, n * sizeof(float), cudaMemcpyDeviceToDevice, lf__cuda_stream(be)),
                           op, "cudaMemcpyAsync");
        return;
    }
    const float scale = 1.0f / (1.0f - d.p); /* the CPU's float */
    lf__cuda_check(be, lf__cuk_dropout(out, inp, n, d.p, scale, d.seed, d.key, d.offset, lf__cuda_stream(be)), op,
                   "pw_dropout");
}

static void cu_dropout_forward(lf_backend *be, float *out, const float *inp, size_t n, lf_dropout drop) {
    dropout(be, "dropout_forward", out, inp, n, drop);
}

static void cu_dropout_backward(lf_backend *be, float *dinp, const float *dout, size_t n, lf_dropout drop) {
    dropout(be, "dropout_backward", dinp, dout, n, drop);
}

/* ---------------------------------------------------------------- loss */

static void cu_crossentropy_forward_backward(lf_backend *be, float *losses, float *dlogits, const float *logits,
                                             const int32_t *targets, int N, int V, int Vp, float dloss) {
    if (V < 1 || Vp < V) {
        lf__backend_fail(be, LF_ERR_INVALID_ARG, "crossentropy_forward_backward: vocabulary %d padded to %d", V, Vp);
        return;
    }
    if (bad_size(be, "crossentropy_forward_backward", "rows x vocabulary", N, V)) return;
    lf__cuda_check(be, lf__cuk_crossentropy(losses, dlogits, logits, targets, N, V, Vp, dloss, lf__cuda_stream(be)),
                   "crossentropy_forward_backward", "ce_kernel");
}

/* The context's reduction buffer: [0, 64) the loss result, [64, 72) the sum
 * of squares, [128, 132) the fp16 flag, [256, 256 + 8*LF_CUK_SS_BLOCKS) the
 * sum of squares' partials. NULL (failure recorded) when it cannot be had. */
#define RB_LOSS 0
#define RB_SS 64
#define RB_FLAG 128
#define RB_PARTIAL 256

static char *reduce_buf(lf_backend *be, const char *op) {
    lf_cuda_ctx *c = lf__cuda_ctx(be);
    if (lf__backend_failed(be)) return NULL;
    if (!c->reduce_buf) {
        void *p = NULL;
        if (lf__cuda_check(be, cudaMalloc(&p, LF_CUDA_REDUCE_BYTES), op, "cudaMalloc (reduction buffer)")) return NULL;
        c->reduce_buf = p;
    }
    return c->reduce_buf;
}

/* Copy `bytes` of the device result back and wait for the stream. 0 on success. */
static int fetch(lf_backend *be, const char *op, void *host, const void *dev, size_t bytes) {
    if (lf__cuda_check(be, cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, lf__cuda_stream(be)), op,
                       "cudaMemcpyAsync"))
        return 1;
    return lf__cuda_check(be, cudaStreamSynchronize(lf__cuda_stream(be)), op, "cudaStreamSynchronize");
}

static double cu_loss_sum(lf_backend *be, const float *losses, const int32_t *targets, int N, long *n_valid) {
    *n_valid = 0;
    if (bad_size(be, "loss_sum", "rows", N, 0)) return 0.0;
    char *rb = reduce_buf(be, "loss_sum");
    if (!rb) return 0.0;
    lf_cuk_loss_result r = {0.0, 0};
    if (lf__cuda_check(be,
                       lf__cuk_loss_sum((lf_cuk_loss_result *)(rb + RB_LOSS), losses, targets, N, lf__cuda_stream(be)),
                       "loss_sum", "ls_kernel") ||
        fetch(be, "loss_sum", &r, rb + RB_LOSS, sizeof r))
        return 0.0;
    *n_valid = (long)r.count;
    return r.sum;
}

/* ---------------------------------------------------------------- optimizer */

void lf__cuda_adamw(lf_backend *be, float *params, const float *grads, float *m, float *v, uint16_t *shadow, size_t n,
                    float lr, float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t) {
    /* cpu_optim.c adamw_consts, term for term */
    if (t < 1) t = 1;
    const double bc1 = 1.0 - pow((double)beta1, (double)t);
    const double bc2 = 1.0 - pow((double)beta2, (double)t);
    lf_cuk_adamw_k k = {.decay = (float)(1.0 - (double)lr * (double)weight_decay),
                        .step_size = (float)((double)lr / bc1),
                        .bc2_sqrt = (float)sqrt(bc2),
                        .w1 = (float)(1.0 - (double)beta1),
                        .b2 = beta2,
                        .omb2 = (float)(1.0 - (double)beta2),
                        .eps = eps,
                        .grad_scale = grad_scale};
    k.w1c = 1.0f - k.w1;
    k.lerp_low = fabsf(k.w1) < 0.5f;
    lf__cuda_check(be, lf__cuk_adamw(params, grads, m, v, shadow, n, k, lf__cuda_stream(be)), "adamw_update",
                   "opt_adamw");
}

static void cu_adamw_update(lf_backend *be, float *params, const float *grads, float *m, float *v, size_t n, float lr,
                            float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t) {
    lf__cuda_adamw(be, params, grads, m, v, NULL, n, lr, beta1, beta2, eps, weight_decay, grad_scale, t);
}

static double cu_sum_squares(lf_backend *be, const float *x, size_t n) {
    char *rb = reduce_buf(be, "sum_squares");
    if (!rb) return 0.0;
    double s = 0.0;
    if (lf__cuda_check(be,
                       lf__cuk_sum_squares((double *)(rb + RB_SS), (double *)(rb + RB_PARTIAL), x, n,
                                           lf__cuda_stream(be)),
                       "sum_squares", "opt_ss_partial / opt_ss_final") ||
        fetch(be, "sum_squares", &s, rb + RB_SS, sizeof s))
        return 0.0;
    return s;
}

static int cu_fp16_round(lf_backend *be, float *x, size_t n) {
    if (!n) return 0;
    char *rb = reduce_buf(be, "fp16_round");
    if (!rb) return 0;
    int flag = 0;
    if (lf__cuda_check(be, cudaMemsetAsync(rb + RB_FLAG, 0, sizeof(int), lf__cuda_stream(be)), "fp16_round",
                       "cudaMemsetAsync") ||
        lf__cuda_check(be, lf__cuk_fp16_round(x, n, (int *)(rb + RB_FLAG), lf__cuda_stream(be)), "fp16_round",
                       "opt_fp16_round") ||
        fetch(be, "fp16_round", &flag, rb + RB_FLAG, sizeof flag))
        return 0;
    return flag != 0;
}

/* ---------------------------------------------------------------- the slots */

void lf__cuda_install_pointwise(lf_backend_ops *ops) {
    _Static_assert(RB_PARTIAL + 8 * LF_CUK_SS_BLOCKS <= LF_CUDA_REDUCE_BYTES, "reduce_buf layout");
    _Static_assert(sizeof(lf_cuk_loss_result) <= RB_SS - RB_LOSS, "reduce_buf layout");
    ops->encoder_forward = cu_encoder_forward;
    ops->encoder_backward = cu_encoder_backward;
    ops->layernorm_forward = cu_layernorm_forward;
    ops->layernorm_backward = cu_layernorm_backward;
    ops->rmsnorm_forward = cu_rmsnorm_forward;
    ops->rmsnorm_backward = cu_rmsnorm_backward;
    ops->qknorm_forward = cu_qknorm_forward;
    ops->qknorm_backward = cu_qknorm_backward;
    ops->residual_layernorm_forward = cu_residual_layernorm_forward;
    ops->residual_rmsnorm_forward = cu_residual_rmsnorm_forward;
    ops->gelu_forward = cu_gelu_forward;
    ops->gelu_backward = cu_gelu_backward;
    ops->swiglu_forward = cu_swiglu_forward;
    ops->swiglu_backward = cu_swiglu_backward;
    ops->rope_forward = cu_rope_forward;
    ops->rope_backward = cu_rope_backward;
    ops->encoder_forward_packed = cu_encoder_forward_packed;
    ops->encoder_backward_packed = cu_encoder_backward_packed;
    ops->rope_forward_packed = cu_rope_forward_packed;
    ops->rope_backward_packed = cu_rope_backward_packed;
    ops->residual_forward = cu_residual_forward;
    ops->residual_backward = cu_residual_backward;
    ops->dropout_forward = cu_dropout_forward;
    ops->dropout_backward = cu_dropout_backward;
    ops->crossentropy_forward_backward = cu_crossentropy_forward_backward;
    ops->loss_sum = cu_loss_sum;
    ops->adamw_update = cu_adamw_update;
    ops->sum_squares = cu_sum_squares;
    ops->fp16_round = cu_fp16_round;
}
