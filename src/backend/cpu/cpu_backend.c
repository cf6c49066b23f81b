/*
 * The CPU backend: its operations table, memory ops and thread control.
 *
 * Memory is ordinary 64-byte aligned host memory, so to_device/to_host are
 * memcpy. Threads: OpenMP for our kernels and the OpenMP build of OpenBLAS
 * for matmuls share one pool; lf_backend_cpu_set_threads sets both. OpenBLAS
 * called from inside one of our parallel regions (attention) runs on the
 * calling thread only, which is what those call sites want.
 *
 * Two tables: "cpu" (fp32 throughout) and "cpu-bf16", the same ops except
 * matmul, which takes bf16 operands with fp32 accumulation (cpu_bf16.c),
 * and bf16 activation storage (act_dtypes): the norms, GELU, SwiGLU and
 * convert write bf16 and the matmul pair reads it, with which the model
 * stores the matmul inputs in bf16 at no change in results.
 * cpu-bf16 caches bf16 copies of the weights, so its memory ops and AdamW
 * also tell that cache when parameters may have changed: to_device and
 * params_changed make every copy stale, free drops them all, and AdamW
 * renews the copies of the tensor it updates (cpu_bf16.c).
 *
 * Reference: backend_impl.h (the contract), llm.c train_gpt2.c (op shapes).
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <math.h>
#include <omp.h>
#include <cblas.h>
#include "cpu_internal.h"
#include "llmforge/backend.h"
#include "llmforge/backend_cpu.h"

static void *cpu_alloc(size_t bytes) { return lf_alloc(bytes); }
static void cpu_free(void *p) { lf_free(p); }
static void cpu_copy(void *dst, const void *src, size_t bytes) {
    if (bytes) memcpy(dst, src, bytes);
}

/* Large buffers are cleared by all threads: one core cannot saturate memory
 * bandwidth on a multi-channel machine. */
#define ZERO_CHUNK ((size_t)1 << 16)

static void cpu_zero(float *x, size_t n) {
    size_t nchunks = (n + ZERO_CHUNK - 1) / ZERO_CHUNK;
#pragma omp parallel for schedule(static) if (nchunks > 4)
    for (size_t k = 0; k < nchunks; k++) {
        size_t lo = k * ZERO_CHUNK, len = n - lo < ZERO_CHUNK ? n - lo : ZERO_CHUNK;
        memset(x + lo, 0, len * sizeof(float));
    }
}

static void cpu_scale(float *x, size_t n, float s) {
#pragma omp parallel if (n >= (size_t)LF_CPU_PAR_MIN)
#pragma omp for simd schedule(static)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

void lf_backend_cpu_set_threads(int n) {
    if (n <= 0) return; /* keep OpenMP's default: OMP_NUM_THREADS, else every core */
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
}

int lf_backend_cpu_threads(void) { return omp_get_max_threads(); }

/* One model replica per thread, each running the ops single-threaded inside
 * the model's parallel region: on small and medium shapes this beats
 * splitting every op across threads (no fork/join per op, no BLAS thread
 * sync, each core keeps its own rows in cache). Never more replicas than rows. */
static int cpu_replicas(int B) {
    int n = omp_get_max_threads();
    return n < B ? n : B;
}

/* The replicas' threads set their own thread count to 1, so every op and
 * OpenBLAS call made inside runs single-threaded even where nested
 * parallelism is enabled (OMP_NESTED / OMP_MAX_ACTIVE_LEVELS). */
static void cpu_run_replicas(int n, void (*fn)(void *arg, int i), void *arg) {
#pragma omp parallel for num_threads(n) schedule(static, 1)
    for (int i = 0; i < n; i++) {
        omp_set_num_threads(1);
        fn(arg, i);
    }
}

static void cpu_add_inplace(float *restrict y, const float *restrict x, size_t n) {
#pragma omp parallel if (n >= (size_t)LF_CPU_PAR_MIN)
#pragma omp for simd schedule(static)
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

static int cpu_fp16_round(float *restrict x, size_t n) {
    int nonfinite = 0;
#pragma omp parallel for reduction(| : nonfinite) schedule(static) if (n >= (size_t)LF_CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        const float v = (float)(_Float16)x[i];
        x[i] = v;
        nonfinite |= !isfinite(v);
    }
    return nonfinite;
}

static void cpu_params_changed(void) {} /* fp32: nothing is derived from the parameters */

/* ---------------------------------------------------------------- failures inside ops */

/* Ops deep in the CPU code (a product oneDNN refuses, no memory for a bf16
 * copy) cannot see the instance, so they report here: a process-wide count
 * and the last message. Each table slot below compares the count before and
 * after its op and moves a failure into the calling instance's sticky
 * status. Two instances failing at the same moment could swap messages;
 * both still fail. */
static atomic_long g_fail_count;
static pthread_mutex_t g_fail_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_fail_msg[320];

void lf__cpu_op_failed(const char *fmt, ...) {
    pthread_mutex_lock(&g_fail_mu);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_fail_msg, sizeof g_fail_msg, fmt, ap);
    va_end(ap);
    atomic_fetch_add(&g_fail_count, 1);
    pthread_mutex_unlock(&g_fail_mu);
}

static inline long op_begin(void) { return atomic_load_explicit(&g_fail_count, memory_order_relaxed); }

static void op_report(lf_backend *be, const char *op) {
    char msg[sizeof g_fail_msg];
    pthread_mutex_lock(&g_fail_mu);
    memcpy(msg, g_fail_msg, sizeof msg);
    pthread_mutex_unlock(&g_fail_mu);
    lf__backend_fail(be, LF_ERR_DEVICE, "%s: %s", op, msg);
}

static inline void op_end(lf_backend *be, const char *op, long f0) {
    if (atomic_load_explicit(&g_fail_count, memory_order_relaxed) != f0) op_report(be, op);
}

/* A slot: the op, with the failure check around it. */
#define OPV(name, impl, params, args) \
    static void w_##name params { \
        const long f0_ = op_begin(); \
        impl args; \
        op_end(be, #name, f0_); \
    }
#define OPR(type, name, impl, params, args) \
    static type w_##name params { \
        const long f0_ = op_begin(); \
        const type r_ = impl args; \
        op_end(be, #name, f0_); \
        return r_; \
    }

/* ---------------------------------------------------------------- preconditions the ops check */

/* Cheap checks of what callers must validate: a violation is a caller's
 * bug, reported on the instance instead of reading out of bounds. */
static int bad_heads(lf_backend *be, const char *op, int C, int NH, int NKV) {
    if (NH > 0 && NKV > 0 && NH % NKV == 0 && C % NH == 0) return 0;
    lf__backend_fail(be, LF_ERR_INVALID_ARG,
                     "%s: %d channels, %d heads, %d key/value heads (need NH %% NKV == 0 and C %% NH == 0)", op, C, NH,
                     NKV);
    return 1;
}

static int bad_kv(lf_backend *be, const char *op, int B, int Tn, int pos0, int Tmax) {
    if (B >= 1 && Tn >= 1 && pos0 >= 0 && (long)pos0 + Tn <= Tmax) return 0;
    lf__backend_fail(be, LF_ERR_INVALID_ARG, "%s: %d new rows at position %d of a cache of %d positions (batch %d)", op,
                     Tn, pos0, Tmax, B);
    return 1;
}

static int bad_rope(lf_backend *be, const char *op, int HS, int pos0, int T) {
    if (HS > 0 && HS % 2 == 0 && pos0 >= 0 && (long)pos0 + T <= (1L << 24)) return 0;
    lf__backend_fail(be, LF_ERR_INVALID_ARG, "%s: head size %d (must be even), positions %d..%ld (at most 2^24)", op,
                     HS, pos0, (long)pos0 + T - 1);
    return 1;
}

/* ---------------------------------------------------------------- the slots */

static void *w_alloc(lf_backend *be, size_t bytes) {
    (void)be;
    return cpu_alloc(bytes);
}
static void w_free(lf_backend *be, void *p) {
    (void)be;
    cpu_free(p);
}
static size_t w_allocated(lf_backend *be, const void *p) {
    (void)be;
    return lf_alloc_usable(p);
}
static void w_copy(lf_backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    cpu_copy(dst, src, bytes);
}
static void w_params_changed(lf_backend *be) {
    (void)be;
    cpu_params_changed();
}
static int w_replicas(lf_backend *be, int B) {
    (void)be;
    return cpu_replicas(B);
}
static void w_run_replicas(lf_backend *be, int n, void (*fn)(void *arg, int i), void *arg) {
    (void)be;
    cpu_run_replicas(n, fn, arg);
}

OPV(zero, cpu_zero, (lf_backend * be, float *x, size_t n), (x, n))
OPV(scale, cpu_scale, (lf_backend * be, float *x, size_t n, float s), (x, n, s))
OPV(encoder_forward, lf__cpu_encoder_forward,
    (lf_backend * be, float *out, const int32_t *inp, const float *wte, const float *wpe, int B, int T, int C),
    (out, inp, wte, wpe, B, T, C))
OPV(encoder_backward, lf__cpu_encoder_backward,
    (lf_backend * be, float *dwte, float *dwpe, const float *dout, const int32_t *inp, int B, int T, int C),
    (dwte, dwpe, dout, inp, B, T, C))
OPV(layernorm_backward, lf__cpu_layernorm_backward,
    (lf_backend * be, float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
     const float *weight, const float *mean, const float *rstd, int N, int C),
    (dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C))
OPV(rmsnorm_backward, lf__cpu_rmsnorm_backward,
    (lf_backend * be, float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
     const float *rstd, int N, int C),
    (dinp, dweight, dout, inp, weight, rstd, N, C))
OPV(qknorm_forward, lf__cpu_qknorm_forward,
    (lf_backend * be, float *out, float *rstd, const float *inp, const float *wq, const float *wk, int N, int NH,
     int NKV, int HS, float eps),
    (out, rstd, inp, wq, wk, N, NH, NKV, HS, eps))
OPV(qknorm_backward, lf__cpu_qknorm_backward,
    (lf_backend * be, float *dqkv, float *dwq, float *dwk, const float *inp, const float *wq, const float *wk,
     const float *rstd, int N, int NH, int NKV, int HS),
    (dqkv, dwq, dwk, inp, wq, wk, rstd, N, NH, NKV, HS))

/* ---------------------------------------------------------------- activation storage (lf_dtype) */

/* 1 when the instance's table accepts dt; else records LF_ERR_UNSUPPORTED. */
static int dt_ok(lf_backend *be, const char *op, lf_dtype dt) {
    if (be->ops->act_dtypes & LF_DT_BIT(dt)) return 1;
    lf__backend_fail(be, LF_ERR_UNSUPPORTED, "%s: activation storage %s is not offered by backend '%s'", op,
                     dt == LF_DT_BF16  ? "bf16"
                     : dt == LF_DT_F32 ? "fp32"
                                       : "(unknown dtype)",
                     be->ops->name);
    return 0;
}

static void w_layernorm_forward(lf_backend *be, void *out, lf_dtype dt, float *mean, float *rstd, const float *inp,
                                const float *weight, const float *bias, int N, int C) {
    if (!dt_ok(be, "layernorm_forward", dt)) return;
    if (dt == LF_DT_BF16) lf__cpu_layernorm_forward_bf16(out, mean, rstd, inp, weight, bias, N, C);
    else lf__cpu_layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
}
static void w_rmsnorm_forward(lf_backend *be, void *out, lf_dtype dt, float *rstd, const float *inp,
                              const float *weight, int N, int C, float eps) {
    if (!dt_ok(be, "rmsnorm_forward", dt)) return;
    if (dt == LF_DT_BF16) lf__cpu_rmsnorm_forward_bf16(out, rstd, inp, weight, N, C, eps);
    else lf__cpu_rmsnorm_forward(out, rstd, inp, weight, N, C, eps);
}
static void w_residual_layernorm_forward(lf_backend *be, float *res, void *out, lf_dtype dt, float *mean, float *rstd,
                                         const float *a, const float *b, const float *weight, const float *bias, int N,
                                         int C) {
    if (!dt_ok(be, "residual_layernorm_forward", dt)) return;
    const long f0 = op_begin();
    lf__cpu_residual_layernorm_forward(res, out, dt == LF_DT_BF16, mean, rstd, a, b, weight, bias, N, C);
    op_end(be, "residual_layernorm_forward", f0);
}
static void w_residual_rmsnorm_forward(lf_backend *be, float *res, void *out, lf_dtype dt, float *rstd, const float *a,
                                       const float *b, const float *weight, int N, int C, float eps) {
    if (!dt_ok(be, "residual_rmsnorm_forward", dt)) return;
    const long f0 = op_begin();
    lf__cpu_residual_rmsnorm_forward(res, out, dt == LF_DT_BF16, rstd, a, b, weight, N, C, eps);
    op_end(be, "residual_rmsnorm_forward", f0);
}
static void w_gelu_forward(lf_backend *be, void *out, lf_dtype dt, const float *inp, size_t n) {
    if (!dt_ok(be, "gelu_forward", dt)) return;
    if (dt == LF_DT_BF16) lf__cpu_gelu_forward_bf16(out, inp, n);
    else lf__cpu_gelu_forward(out, inp, n);
}
static void w_swiglu_forward(lf_backend *be, void *out, lf_dtype dt, const float *inp, int N, int F) {
    if (!dt_ok(be, "swiglu_forward", dt)) return;
    if (dt == LF_DT_BF16) lf__cpu_swiglu_forward_bf16(out, inp, N, F);
    else lf__cpu_swiglu_forward(out, inp, N, F);
}
static void w_convert(lf_backend *be, void *out, lf_dtype dt, const float *inp, size_t n) {
    if (!dt_ok(be, "convert", dt)) return;
    if (dt == LF_DT_BF16) lf__cpu_cast_bf16(out, inp, n);
    else if (out != inp) memmove(out, inp, n * sizeof(float));
}
static void w_grad_to_bf16(lf_backend *be, uint16_t *out, const float *inp, size_t n) {
    (void)be;
    lf__cpu_cast_bf16(out, inp, n);
}
static void w_grad_from_bf16(lf_backend *be, float *out, const uint16_t *inp, size_t n) {
    (void)be;
    lf__cpu_widen_bf16(out, inp, n);
}
static void w_matmul_forward(lf_backend *be, float *out, const void *inp, lf_dtype dt, const float *weight,
                             const float *bias, int N, int C, int OC, lf_weight_layout layout) {
    if (!dt_ok(be, "matmul_forward", dt)) return;
    const long f0 = op_begin();
    /* "cpu" accepts fp32 only */
    if (!be->batch_invariant || !lf__cpu_gemm_invariant(out, inp, weight, bias, N, C, OC, layout))
        lf__cpu_matmul_forward(out, inp, weight, bias, N, C, OC, layout);
    op_end(be, "matmul_forward", f0);
}
static void w_matmul_backward(lf_backend *be, float *dinp, float *dweight, float *dbias, const float *dout,
                              const void *inp, lf_dtype dt, const float *weight, int N, int C, int OC,
                              lf_weight_layout layout) {
    if (!dt_ok(be, "matmul_backward", dt)) return;
    const long f0 = op_begin();
    lf__cpu_matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, layout);
    op_end(be, "matmul_backward", f0);
}
static void w_lora_forward(lf_backend *be, float *out, int ldo, float *u, const float *inp, const float *A,
                           const float *B, int N, int C, int n, int r, float scale) {
    const long f0 = op_begin();
    lf__cpu_lora_forward(out, ldo, u, inp, A, B, N, C, n, r, scale);
    op_end(be, "lora_forward", f0);
}
static void w_lora_backward(lf_backend *be, float *dinp, float *dA, float *dB, float *u, float *du, const float *dout,
                            int ldo, const float *inp, const float *A, const float *B, int N, int C, int n, int r,
                            float scale) {
    const long f0 = op_begin();
    lf__cpu_lora_backward(dinp, dA, dB, u, du, dout, ldo, inp, A, B, N, C, n, r, scale);
    op_end(be, "lora_backward", f0);
}
/* cpu-bf16's pair: bf16 operands either way; a bf16 inp is used as stored. */
static void w_bf16_matmul_forward(lf_backend *be, float *out, const void *inp, lf_dtype dt, const float *weight,
                                  const float *bias, int N, int C, int OC, lf_weight_layout layout) {
    if (!dt_ok(be, "matmul_forward", dt)) return;
    const long f0 = op_begin();
    if (dt == LF_DT_BF16) lf__cpu_bf16_matmul_forward_bf16(out, inp, weight, bias, N, C, OC, layout);
    else lf__cpu_bf16_matmul_forward(out, inp, weight, bias, N, C, OC, layout);
    op_end(be, "matmul_forward", f0);
}
static void w_bf16_matmul_backward(lf_backend *be, float *dinp, float *dweight, float *dbias, const float *dout,
                                   const void *inp, lf_dtype dt, const float *weight, int N, int C, int OC,
                                   lf_weight_layout layout) {
    if (!dt_ok(be, "matmul_backward", dt)) return;
    const long f0 = op_begin();
    if (dt == LF_DT_BF16) lf__cpu_bf16_matmul_backward_bf16(dinp, dweight, dbias, dout, inp, weight, N, C, OC, layout);
    else lf__cpu_bf16_matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, layout);
    op_end(be, "matmul_backward", f0);
}

static void w_rope_forward(lf_backend *be, float *qkv, int B, int T, int NH, int NKV, int HS, int pos0,
                           const float *inv_freq, float scale) {
    if (bad_heads(be, "rope_forward", NH * HS, NH, NKV) || bad_rope(be, "rope_forward", HS, pos0, T)) return;
    lf__cpu_rope_forward(qkv, B, T, NH, NKV, HS, pos0, inv_freq, scale);
}
static void w_rope_backward(lf_backend *be, float *dqkv, int B, int T, int NH, int NKV, int HS, int pos0,
                            const float *inv_freq, float scale) {
    if (bad_heads(be, "rope_backward", NH * HS, NH, NKV) || bad_rope(be, "rope_backward", HS, pos0, T)) return;
    lf__cpu_rope_backward(dqkv, B, T, NH, NKV, HS, pos0, inv_freq, scale);
}
static void w_attention_forward(lf_backend *be, float *out, float *att, const float *qkv, int B, int T, int C, int NH,
                                int NKV, lf_dropout drop) {
    if (bad_heads(be, "attention_forward", C, NH, NKV)) return;
    const long f0 = op_begin();
    lf__cpu_attention_forward(out, att, qkv, B, T, C, NH, NKV, drop);
    op_end(be, "attention_forward", f0);
}
static void w_attention_backward(lf_backend *be, float *dqkv, float *scratch, const float *dout, const float *qkv,
                                 const float *att, int B, int T, int C, int NH, int NKV, lf_dropout drop) {
    if (bad_heads(be, "attention_backward", C, NH, NKV)) return;
    const long f0 = op_begin();
    lf__cpu_attention_backward(dqkv, scratch, dout, qkv, att, B, T, C, NH, NKV, drop);
    op_end(be, "attention_backward", f0);
}
/* ---- packed rows (backend_impl.h): pos and wpe must be given */
static int bad_packed(lf_backend *be, const char *op, const void *pos, const void *wpe) {
    if (pos && wpe) return 0;
    lf__backend_fail(be, LF_ERR_INVALID_ARG, "%s: %s is NULL", op, pos ? "wpe" : "pos");
    return 1;
}
static void w_encoder_forward_packed(lf_backend *be, float *out, const int32_t *inp, const int32_t *pos,
                                     const float *wte, const float *wpe, int B, int T, int C) {
    if (bad_packed(be, "encoder_forward_packed", pos, wpe)) return;
    lf__cpu_encoder_forward_packed(out, inp, pos, wte, wpe, B, T, C);
}
static void w_encoder_backward_packed(lf_backend *be, float *dwte, float *dwpe, const float *dout, const int32_t *inp,
                                      const int32_t *pos, int B, int T, int C) {
    if (bad_packed(be, "encoder_backward_packed", pos, dwpe)) return;
    lf__cpu_encoder_backward_packed(dwte, dwpe, dout, inp, pos, B, T, C);
}
static void w_rope_packed(lf_backend *be, const char *op, float *x, const int32_t *pos, int B, int T, int NH, int NKV,
                          int HS, const float *inv_freq, float scale, float sgn) {
    if (bad_packed(be, op, pos, inv_freq) || bad_heads(be, op, NH * HS, NH, NKV) || bad_rope(be, op, HS, 0, T)) return;
    lf__cpu_rope_packed(x, pos, B, T, NH, NKV, HS, inv_freq, scale, sgn);
}
static void w_rope_forward_packed(lf_backend *be, float *qkv, const int32_t *pos, int B, int T, int NH, int NKV, int HS,
                                  const float *inv_freq, float scale) {
    w_rope_packed(be, "rope_forward_packed", qkv, pos, B, T, NH, NKV, HS, inv_freq, scale, 1.0f);
}
static void w_rope_backward_packed(lf_backend *be, float *dqkv, const int32_t *pos, int B, int T, int NH, int NKV,
                                   int HS, const float *inv_freq, float scale) {
    w_rope_packed(be, "rope_backward_packed", dqkv, pos, B, T, NH, NKV, HS, inv_freq, scale, -1.0f);
}
static void w_attention_forward_packed(lf_backend *be, float *out, float *att, const float *qkv, const int32_t *pos,
                                       int B, int T, int C, int NH, int NKV, lf_dropout drop) {
    if (bad_packed(be, "attention_forward_packed", pos, qkv) || bad_heads(be, "attention_forward_packed", C, NH, NKV))
        return;
    const long f0 = op_begin();
    lf__cpu_attention_forward_packed(out, att, qkv, pos, B, T, C, NH, NKV, drop);
    op_end(be, "attention_forward", f0);
}
static void w_attention_backward_packed(lf_backend *be, float *dqkv, float *scratch, const float *dout,
                                        const float *qkv, const float *att, const int32_t *pos, int B, int T, int C,
                                        int NH, int NKV, lf_dropout drop) {
    if (bad_packed(be, "attention_backward_packed", pos, qkv) || bad_heads(be, "attention_backward_packed", C, NH, NKV))
        return;
    const long f0 = op_begin();
    lf__cpu_attention_backward(dqkv, scratch, dout, qkv, att, B, T, C, NH, NKV, drop); /* the mask is in att */
    op_end(be, "attention_backward", f0);
}
static void w_kv_append(lf_backend *be, float *kcache, float *vcache, const float *qkv, int B, int Tn, int NH, int NKV,
                        int HS, int pos0, int Tmax) {
    if (bad_heads(be, "kv_append", NH * HS, NH, NKV) || bad_kv(be, "kv_append", B, Tn, pos0, Tmax)) return;
    lf__cpu_kv_append(kcache, vcache, qkv, B, Tn, NH, NKV, HS, pos0, Tmax);
}
static void w_attention_cached(lf_backend *be, float *out, float *scratch, const float *qkv, const float *kcache,
                               const float *vcache, int B, int Tn, int C, int NH, int NKV, int pos0, int Tmax) {
    if (bad_heads(be, "attention_cached", C, NH, NKV) || bad_kv(be, "attention_cached", B, Tn, pos0, Tmax)) return;
    const long f0 = op_begin();
    lf__cpu_attention_cached(out, scratch, qkv, kcache, vcache, B, Tn, C, NH, NKV, pos0, Tmax);
    op_end(be, "attention_cached", f0);
}

OPV(gelu_backward, lf__cpu_gelu_backward, (lf_backend * be, float *dinp, const float *inp, const float *dout, size_t n),
    (dinp, inp, dout, n))
OPV(swiglu_backward, lf__cpu_swiglu_backward,
    (lf_backend * be, float *dinp, const float *inp, const float *dout, int N, int F), (dinp, inp, dout, N, F))
OPV(residual_forward, lf__cpu_residual_forward, (lf_backend * be, float *out, const float *a, const float *b, size_t n),
    (out, a, b, n))
OPV(residual_backward, lf__cpu_residual_backward, (lf_backend * be, float *da, float *db, const float *dout, size_t n),
    (da, db, dout, n))
OPV(dropout_forward, lf__cpu_dropout_forward,
    (lf_backend * be, float *out, const float *inp, size_t n, lf_dropout drop), (out, inp, n, drop))
OPV(dropout_backward, lf__cpu_dropout_backward,
    (lf_backend * be, float *dinp, const float *dout, size_t n, lf_dropout drop), (dinp, dout, n, drop))

static void w_crossentropy_forward_backward(lf_backend *be, float *losses, float *dlogits, const float *logits,
                                            const int32_t *targets, int N, int V, int Vp, float dloss) {
    if (V < 1 || Vp < V) {
        lf__backend_fail(be, LF_ERR_INVALID_ARG, "crossentropy_forward_backward: vocabulary %d padded to %d", V, Vp);
        return;
    }
    lf__cpu_crossentropy_forward_backward(losses, dlogits, logits, targets, N, V, Vp, dloss);
}

OPV(adamw_update, lf__cpu_adamw_update,
    (lf_backend * be, float *params, const float *grads, float *m, float *v, size_t n, float lr, float beta1,
     float beta2, float eps, float weight_decay, float grad_scale, int t),
    (params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale, t))
OPV(bf16_adamw_update, lf__cpu_bf16_adamw_update,
    (lf_backend * be, float *params, const float *grads, float *m, float *v, size_t n, float lr, float beta1,
     float beta2, float eps, float weight_decay, float grad_scale, int t),
    (params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale, t))
OPR(double, loss_sum, lf__cpu_loss_sum,
    (lf_backend * be, const float *losses, const int32_t *targets, int N, long *n_valid), (losses, targets, N, n_valid))
OPR(int, fp16_round, cpu_fp16_round, (lf_backend * be, float *x, size_t n), (x, n))
OPR(double, sum_squares, lf__cpu_sum_squares, (lf_backend * be, const float *x, size_t n), (x, n))
OPV(add_inplace, cpu_add_inplace, (lf_backend * be, float *y, const float *x, size_t n), (y, x, n))


/* The ops both CPU tables share: every op that takes no matmul operand
 * (cpu_rmsnorm.c's, cpu_rope.c's, cpu_swiglu.c's and the KV-cache ones of
 * cpu_kv.c too), and the host-memory plumbing. */
#define CPU_SHARED_OPS \
    .host_memory = 1, .convert = w_convert, .grad_to_bf16 = w_grad_to_bf16, .grad_from_bf16 = w_grad_from_bf16, \
    .alloc = w_alloc, .allocated = w_allocated, .to_host = w_copy, .copy = w_copy, .zero = w_zero, .scale = w_scale, \
    .encoder_forward = w_encoder_forward, .encoder_backward = w_encoder_backward, \
    .layernorm_forward = w_layernorm_forward, .layernorm_backward = w_layernorm_backward, \
    .rmsnorm_forward = w_rmsnorm_forward, .rmsnorm_backward = w_rmsnorm_backward, .qknorm_forward = w_qknorm_forward, \
    .qknorm_backward = w_qknorm_backward, .residual_layernorm_forward = w_residual_layernorm_forward, \
    .residual_rmsnorm_forward = w_residual_rmsnorm_forward, .rope_forward = w_rope_forward, \
    .rope_backward = w_rope_backward, .attention_forward = w_attention_forward, \
    .attention_backward = w_attention_backward, .kv_append = w_kv_append, .attention_cached = w_attention_cached, \
    .attention_saved = lf__cpu_attention_saved, .attention_scratch = lf__cpu_attention_saved, \
    .attention_cached_scratch = lf__cpu_attention_cached_scratch, .gelu_forward = w_gelu_forward, \
    .gelu_backward = w_gelu_backward, .swiglu_forward = w_swiglu_forward, .swiglu_backward = w_swiglu_backward, \
    .residual_forward = w_residual_forward, .residual_backward = w_residual_backward, \
    .dropout_forward = w_dropout_forward, .dropout_backward = w_dropout_backward, \
    .crossentropy_forward_backward = w_crossentropy_forward_backward, .loss_sum = w_loss_sum, \
    .fp16_round = w_fp16_round, .sum_squares = w_sum_squares, .replicas = w_replicas, .run_replicas = w_run_replicas, \
    .add_inplace = w_add_inplace

/* The packed-row ops (backend_impl.h), in both CPU tables. */
#define CPU_PACKED_OPS \
    .encoder_forward_packed = w_encoder_forward_packed, .encoder_backward_packed = w_encoder_backward_packed, \
    .rope_forward_packed = w_rope_forward_packed, .rope_backward_packed = w_rope_backward_packed, \
    .attention_forward_packed = w_attention_forward_packed, .attention_backward_packed = w_attention_backward_packed

static const lf_backend_ops cpu_ops = {
    CPU_SHARED_OPS,
    CPU_PACKED_OPS,
    .name = "cpu",
    .free = w_free,
    .to_device = w_copy,
    .act_dtypes = LF_DT_BIT(LF_DT_F32), /* fp32 keeps its activations in fp32 */
    .batch_invariant = 1,
    .matmul_forward = w_matmul_forward,
    .matmul_backward = w_matmul_backward,
    .lora_forward = w_lora_forward,
    .lora_backward = w_lora_backward,
    .adamw_update = w_adamw_update,
    .params_changed = w_params_changed,
};

const lf_backend_ops *lf__backend_cpu(void) { return &cpu_ops; }

/* ---------------------------------------------------------------- cpu-bf16 */

static void bf16_free(lf_backend *be, void *p) {
    (void)be;
    if (!p) return;
    lf__cpu_bf16_memory_freed(); /* a later tensor may get this address */
    lf_free(p);
}

static void bf16_to_device(lf_backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    cpu_copy(dst, src, bytes);
    lf__cpu_bf16_params_changed();
}

static void bf16_params_changed(lf_backend *be) {
    (void)be;
    lf__cpu_bf16_params_changed();
}

static const lf_backend_ops cpu_bf16_ops = {
    CPU_SHARED_OPS,
    CPU_PACKED_OPS,
    .name = "cpu-bf16",
    .free = bf16_free,
    .to_device = bf16_to_device,
    .matmul_forward = w_bf16_matmul_forward,
    .matmul_backward = w_bf16_matmul_backward,
    .adamw_update = w_bf16_adamw_update,
    .act_dtypes = LF_DT_BIT(LF_DT_F32) | LF_DT_BIT(LF_DT_BF16),
    .params_changed = bf16_params_changed,
};

const lf_backend_ops *lf__backend_cpu_bf16(void) { return &cpu_bf16_ops; }
