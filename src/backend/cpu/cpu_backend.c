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
 * plus the bf16 activation slots (a layernorm and a GELU that write bf16, a
 * cast, and the matmul pair with a bf16 input), with which the model stores
 * the matmul inputs in bf16 at no change in results.
 * cpu-bf16 caches bf16 copies of the weights, so its memory ops and AdamW
 * also tell that cache when parameters may have changed: to_device and
 * params_changed make every copy stale, free drops them all, and AdamW
 * renews the copies of the tensor it updates (cpu_bf16.c).
 *
 * Reference: backend_impl.h (the contract), llm.c train_gpt2.c (op shapes).
 */
#include <string.h>
#include <math.h>
#include <omp.h>
#include <cblas.h>
#include "cpu_internal.h"
#include "llmforge/backend.h"

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

/* The ops both CPU tables share: every op that takes no matmul operand
 * (the Llama-family ones of cpu_llama.c and the KV-cache ones of cpu_kv.c
 * too), and the host-memory plumbing. */
#define CPU_SHARED_OPS                                                     \
    .host_memory = 1, .alloc = cpu_alloc, .to_host = cpu_copy, .copy = cpu_copy, .zero = cpu_zero, .scale = cpu_scale, \
    .encoder_forward = lf__cpu_encoder_forward, .encoder_backward = lf__cpu_encoder_backward,         \
    .layernorm_forward = lf__cpu_layernorm_forward, .layernorm_backward = lf__cpu_layernorm_backward, \
    .rmsnorm_forward = lf__cpu_rmsnorm_forward, .rmsnorm_backward = lf__cpu_rmsnorm_backward,         \
    .rope_forward = lf__cpu_rope_forward, .rope_backward = lf__cpu_rope_backward,                     \
    .attention_forward = lf__cpu_attention_forward, .attention_backward = lf__cpu_attention_backward, \
    .kv_append = lf__cpu_kv_append, .attention_cached = lf__cpu_attention_cached,                     \
    .gelu_forward = lf__cpu_gelu_forward, .gelu_backward = lf__cpu_gelu_backward,                     \
    .swiglu_forward = lf__cpu_swiglu_forward, .swiglu_backward = lf__cpu_swiglu_backward,             \
    .residual_forward = lf__cpu_residual_forward, .residual_backward = lf__cpu_residual_backward,     \
    .dropout_forward = lf__cpu_dropout_forward, .dropout_backward = lf__cpu_dropout_backward,         \
    .crossentropy_forward_backward = lf__cpu_crossentropy_forward_backward,                           \
    .loss_sum = lf__cpu_loss_sum, .fp16_round = cpu_fp16_round, .sum_squares = lf__cpu_sum_squares, .replicas = cpu_replicas, .run_replicas = cpu_run_replicas,   \
    .add_inplace = cpu_add_inplace

static const lf_backend_ops cpu_ops = {
    CPU_SHARED_OPS,
    .name = "cpu",
    .free = cpu_free,
    .to_device = cpu_copy,
    .matmul_forward = lf__cpu_matmul_forward,
    .matmul_backward = lf__cpu_matmul_backward,
    .adamw_update = lf__cpu_adamw_update,
    /* bf16 activation slots NULL: fp32 keeps its activations in fp32 */
    .params_changed = cpu_params_changed,
};

const lf_backend_ops *lf__backend_cpu(void) { return &cpu_ops; }

/* ---------------------------------------------------------------- cpu-bf16 */

static void bf16_free(void *p) {
    if (!p) return;
    lf__cpu_bf16_memory_freed(); /* a later tensor may get this address */
    lf_free(p);
}

static void bf16_to_device(void *dst, const void *src, size_t bytes) {
    cpu_copy(dst, src, bytes);
    lf__cpu_bf16_params_changed();
}

static const lf_backend_ops cpu_bf16_ops = {
    CPU_SHARED_OPS,
    .name = "cpu-bf16",
    .free = bf16_free,
    .to_device = bf16_to_device,
    .matmul_forward = lf__cpu_bf16_matmul_forward,
    .matmul_backward = lf__cpu_bf16_matmul_backward,
    .adamw_update = lf__cpu_bf16_adamw_update,
    .cast_bf16 = lf__cpu_cast_bf16,
    .layernorm_forward_bf16 = lf__cpu_layernorm_forward_bf16,
    .gelu_forward_bf16 = lf__cpu_gelu_forward_bf16,
    .matmul_forward_bf16 = lf__cpu_bf16_matmul_forward_bf16,
    .matmul_backward_bf16 = lf__cpu_bf16_matmul_backward_bf16,
    .params_changed = lf__cpu_bf16_params_changed,
};

const lf_backend_ops *lf__backend_cpu_bf16(void) { return &cpu_bf16_ops; }
