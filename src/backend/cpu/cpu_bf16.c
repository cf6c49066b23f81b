/*
 * bf16 matmul of the CPU backend ("cpu-bf16"): matrix products with bf16
 * operands and fp32 accumulation; everything else (weights, gradients,
 * optimizer state, layernorm, softmax, loss, attention) stays fp32.
 *
 * Paths, chosen once at run time (lf_backend_cpu_bf16_kernel says which):
 *  - MODE_ONEDNN, where oneDNN's effective ISA has bf16 instructions
 *    (AVX512-BF16, AMX): matmul primitives with bf16 src/weights and an f32
 *    destination; every operand (the layer input x, the weight W, the output
 *    gradient dout) rounded to bf16, fp32 accumulation.
 *  - MODE_FP32, everywhere else: fp32 products (cpu_gemm.c's sgemm) on the
 *    fp32 weights and gradients as they are, and on the layer input as it is
 *    stored, in bf16 (widened exactly into per-thread scratch; an fp32 input
 *    is rounded first, so the storage never changes a result): out =
 *    bf16(x) W, dinp = dout W^T (an fp32 product), dW += bf16(x)^T dout,
 *    by the fp32 op itself (cpu_matmul.c, its gemv for few rows too), so
 *    bit for bit the "cpu" table's op on the rounded input. Where no
 *    scratch can be had, product() below takes it on. Why
 *    not bf16 arithmetic here: without the instructions a bf16 product is
 *    an fp32 product on rounded operands, and rounding W and dout is a pass
 *    over them (plus a rounded copy of every weight) that only adds error;
 *    this path costs no more than fp32 (the widening reads 2 bytes and
 *    writes 4 per input element, next to a K-long dot product per output)
 *    and keeps bf16's activation memory. Its numbers are closer to fp32
 *    than MODE_ONEDNN's: one operand of each product rounded instead of two,
 *    none in dinp. oneDNN's own bf16 emulation on such CPUs is slower than
 *    sgemm.
 *  - MODE_EMULATE, only through lf__cpu_bf16_force_emulation (tests): what
 *    the bf16 instructions compute on any CPU: every operand rounded to bf16
 *    (kept as fp32; weights through the copy cache) and the fp32 sgemm. The
 *    same operands as MODE_ONEDNN, so the same numbers up to summation order:
 *    the cross-check of oneDNN's kernel and of cuda-bf16 on CPUs without
 *    the instructions. Also the path a product takes when oneDNN refuses it.
 * LLMFORGE_CPU_ISA=avx512 (cpu_isa.c) or ONEDNN_MAX_CPU_ISA=AVX512_CORE
 * (oneDNN's variable) selects MODE_FP32 on a CPU that has the instructions; lf__cpu_bf16_force_fallback too (tests).
 *
 * Rounding is round-to-nearest-even, NaN kept NaN (what oneDNN, PyTorch and
 * AVX512-BF16's vcvtne2ps2bf16 do).
 *
 * bf16 activations: the *_bf16 pair takes `inp` already stored in bf16 (the
 * model's ln_1/ln_2/ln_f outputs, attention output and GELU output on this
 * backend). Those bits are what this file's own conversion would have made
 * of the fp32 tensor (lf__cpu_cast_bf16, or lf__cpu_bf16_bits in the bf16
 * layernorm and GELU), so oneDNN gets the same source, and the fp32 and
 * emulated paths the same rounded fp32 (the exact expansion), as from the
 * fp32 pair: on every path results are bit-identical, and the conversion
 * pass is skipped.
 *
 * Invariants:
 *  - Same contract as the fp32 matmul (backend_impl.h): forward overwrites
 *    out; backward overwrites dinp and ACCUMULATES dweight (oneDNN "sum"
 *    post-op, sgemm beta = 1) and dbias. dbias is summed from the fp32 dout
 *    by the fp32 code (lf__cpu_bias_backward), so it is exact as before.
 *  - Weight copies: the bf16 (MODE_ONEDNN) or rounded (MODE_EMULATE) copy of
 *    each weight is cached, keyed by (pointer, length, kind); MODE_FP32
 *    makes none. A copy is valid while its generation is the
 *    current one and it is not marked stale. The generation moves when
 *    parameters may have changed anywhere (to_device, free, params_changed
 *    of the cpu-bf16 table, cpu_backend.c). adamw_update renews the copies of
 *    the tensor it updates in the same pass (lf__cpu_adamw_update_shadow), so
 *    in training a weight is converted once, at its first product, and never
 *    again per replica, micro-batch or step; a copy that only overlaps the
 *    updated range is marked stale and converted again at its next use.
 *    Parameters never change while ops run, so a copy handed out stays valid
 *    for the op that got it.
 *  - Threads: each model replica runs ops on its own OpenMP thread with one
 *    thread each. Every thread keeps its own oneDNN stream, primitive cache
 *    and scratch (oneDNN's library scratchpad forbids running a primitive on
 *    a thread other than the one that created it; we use user scratchpads
 *    and per-thread primitives, so nothing is shared). oneDNN's OpenMP
 *    runtime runs a primitive on one thread inside a parallel region and on
 *    omp_get_max_threads() outside one, like OpenBLAS; the thread count is
 *    part of the primitive key. The weight cache is shared, under a mutex.
 *  - A failure (no memory for a copy, a primitive oneDNN refuses) is
 *    reported on the calling instance's sticky status (lf__cpu_op_failed;
 *    LF_ERR_DEVICE at the next sync point) and counted
 *    (lf__cpu_bf16_failures; the tests require 0); the product is still
 *    computed by the next path down (oneDNN -> rounded sgemm; MODE_FP32 or
 *    rounded sgemm -> plain fp32 sgemm on the operands as given, or for a
 *    bf16 operand a plain loop on the operands as stored),
 *    so the outputs are defined, but the run stops at the sync.
 *  - Copies and primitives live until lf__cpu_bf16_release or process exit;
 *    they grow with the distinct weights and shapes seen, not per step.
 *
 * References: oneDNN v2.6 matmul primitive and attributes (post-ops sum,
 * user scratchpad); Kalamkar et al. 2019, "A Study of BFLOAT16 for Deep
 * Learning Training"; PyTorch torch.autocast CPU bf16 (matmul operands).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include "cpu_internal.h"
#include "llmforge/backend_cpu.h"

enum { KIND_BF16 = 0, KIND_F32R = 1, NKINDS = 2 };
enum { MODE_ONEDNN = 1, MODE_FP32 = 2, MODE_EMULATE = 3 };

#define PRIM_CACHE_MAX 64 /* primitives per thread; least recently used goes first */
#define NSLOTS 5          /* per-thread scratch: 2 operands x 2 kinds, + oneDNN's scratchpad */
#define SLOT_PAD 4
/* the kernel line of MODE_FP32, then why it runs */
#define FP32_PATH "fp32 products on bf16-stored activations"

/* ---------------------------------------------------------------- rounding */

float lf__cpu_bf16_round(float x) { return lf__cpu_bf16_as_f32(lf__cpu_bf16_bits(x)); }

/* Every fp32 -> bf16 conversion of this backend goes through here or through
 * lf__cpu_bf16_bits itself (the bf16 layernorm and GELU), so an activation
 * stored in bf16 holds the bits the product would have made of it. */
void lf__cpu_cast_bf16(uint16_t *restrict out, const float *restrict in, size_t n) {
#pragma omp parallel if (n >= (size_t)4 * LF_CPU_PAR_MIN)
#pragma omp for simd schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = lf__cpu_bf16_bits(in[i]);
}

static void to_f32r(float *restrict out, const float *restrict in, size_t n) {
#pragma omp parallel if (n >= (size_t)4 * LF_CPU_PAR_MIN)
#pragma omp for simd schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = lf__cpu_bf16_as_f32(lf__cpu_bf16_bits(in[i]));
}

/* bf16 bits back to fp32: exact, and equal to to_f32r of any fp32 value
 * that rounds to them. */
void lf__cpu_widen_bf16(float *restrict out, const uint16_t *restrict in, size_t n) {
#pragma omp parallel if (n >= (size_t)4 * LF_CPU_PAR_MIN)
#pragma omp for simd schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = lf__cpu_bf16_as_f32(in[i]);
}

static void convert(void *out, const float *in, size_t n, int kind) {
    if (kind == KIND_BF16) lf__cpu_cast_bf16(out, in, n);
    else to_f32r(out, in, n);
}

static size_t kind_size(int kind) { return kind == KIND_BF16 ? sizeof(uint16_t) : sizeof(float); }

/* ---------------------------------------------------------------- mode */

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_detected;     /* MODE_ONEDNN or MODE_FP32, found by detect() */
static atomic_int g_force; /* test hooks: 0, MODE_FP32 or MODE_EMULATE */
static atomic_long g_failures;
static dnnl_engine_t g_engine;
static char g_info[192];

static dnnl_status_t matmul_pd(dnnl_primitive_desc_t *pd, int M, int N, int K, int ta, int tb, int bias, int sum);

static void detect(void) {
    lf__cpu_isa(); /* LLMFORGE_CPU_ISA's cap on oneDNN, before its first use */
    const dnnl_version_t *v = dnnl_version();
    const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    g_detected = MODE_FP32;
    if (((unsigned)isa & (unsigned)dnnl_cpu_isa_avx512_core_bf16) != (unsigned)dnnl_cpu_isa_avx512_core_bf16) {
        snprintf(g_info, sizeof g_info, FP32_PATH " (no bf16 instructions: oneDNN %d.%d.%d ISA %s)", v->major, v->minor,
                 v->patch, lf__cpu_onednn_isa_name((unsigned)isa));
        return;
    }
    if (dnnl_engine_create(&g_engine, dnnl_cpu, 0) != dnnl_success) {
        g_engine = NULL;
        snprintf(g_info, sizeof g_info, FP32_PATH " (no oneDNN CPU engine)");
        return;
    }
    /* a GPT-2-like product tells which kernel oneDNN picks on this CPU */
    dnnl_primitive_desc_t pd;
    const char *impl = NULL;
    if (matmul_pd(&pd, 256, 256, 256, 0, 0, 0, 0) != dnnl_success) {
        snprintf(g_info, sizeof g_info, FP32_PATH " (oneDNN %d.%d.%d refused a bf16 matmul)", v->major, v->minor,
                 v->patch);
        return;
    }
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl) impl = "?";
    snprintf(g_info, sizeof g_info, "oneDNN %d.%d.%d %s (%s)", v->major, v->minor, v->patch,
             lf__cpu_onednn_isa_name((unsigned)isa), impl);
    dnnl_primitive_desc_destroy(pd);
    g_detected = MODE_ONEDNN;
}

static int mode(void) {
    pthread_once(&g_once, detect);
    const int f = atomic_load_explicit(&g_force, memory_order_relaxed);
    return f ? f : g_detected;
}

const char *lf_backend_cpu_bf16_kernel(void) {
    const int m = mode();
    if (m == MODE_EMULATE) return "bf16 emulation (fp32 sgemm on bf16-rounded operands; forced)";
    if (m == MODE_FP32 && g_detected == MODE_ONEDNN) return FP32_PATH " (forced)";
    return g_info;
}

int lf__cpu_bf16_uses_onednn(void) { return mode() == MODE_ONEDNN; }

int lf_backend_cpu_bf16_native(void) { return mode() != MODE_FP32; }

void lf__cpu_bf16_force_fallback(int on) { atomic_store(&g_force, on ? MODE_FP32 : 0); }

void lf__cpu_bf16_force_emulation(int on) { atomic_store(&g_force, on ? MODE_EMULATE : 0); }

long lf__cpu_bf16_failures(void) { return atomic_load(&g_failures); }

static void failed(const char *what, int M, int N, int K) {
    atomic_fetch_add(&g_failures, 1);
    lf__cpu_op_failed("bf16 product %dx%dx%d: %s; computed by the next path down (fp32 sgemm)", M, N, K, what);
}

/* ---------------------------------------------------------------- weight cache */

typedef struct wentry {
    const float *w;
    size_t n;
    int kind;
    unsigned gen; /* 0: stale */
    void *data;
} wentry;

static pthread_mutex_t g_wlock = PTHREAD_MUTEX_INITIALIZER;
static atomic_uint g_gen = 1; /* never 0 */
static wentry *g_w;
static int g_nw, g_capw;

void lf__cpu_bf16_params_changed(void) {
    unsigned g = atomic_fetch_add(&g_gen, 1) + 1;
    if (g == 0) atomic_fetch_add(&g_gen, 1); /* wrapped: 0 means stale */
}

static void weights_clear_locked(void) {
    for (int i = 0; i < g_nw; i++) lf_free(g_w[i].data);
    lf_free(g_w);
    g_w = NULL;
    g_nw = g_capw = 0;
}

void lf__cpu_bf16_memory_freed(void) {
    pthread_mutex_lock(&g_wlock);
    weights_clear_locked();
    pthread_mutex_unlock(&g_wlock);
    lf__cpu_bf16_params_changed();
}

/* The `kind` copy of weight w[0..n), converted now unless a valid one
 * exists. NULL when out of memory. */
static const void *weight_copy(const float *w, size_t n, int kind) {
    const unsigned gen = atomic_load(&g_gen);
    void *out = NULL;
    pthread_mutex_lock(&g_wlock);
    wentry *e = NULL;
    for (int i = 0; i < g_nw; i++)
        if (g_w[i].w == w && g_w[i].n == n && g_w[i].kind == kind) {
            e = &g_w[i];
            break;
        }
    if (!e) {
        if (g_nw == g_capw) {
            int cap = g_capw ? 2 * g_capw : 64;
            wentry *nw = lf_alloc((size_t)cap * sizeof *nw);
            if (!nw) goto done;
            if (g_nw) memcpy(nw, g_w, (size_t)g_nw * sizeof *nw);
            lf_free(g_w);
            g_w = nw;
            g_capw = cap;
        }
        void *data = lf_alloc(n * kind_size(kind));
        if (!data) goto done;
        e = &g_w[g_nw++];
        *e = (wentry){.w = w, .n = n, .kind = kind, .gen = 0, .data = data};
    }
    if (e->gen != gen) {
        convert(e->data, w, n, kind);
        e->gen = gen;
    }
    out = e->data;
done:
    pthread_mutex_unlock(&g_wlock);
    return out;
}

void lf__cpu_bf16_adamw_update(float *params, const float *grads, float *m, float *v, size_t n, float lr, float beta1,
                               float beta2, float eps, float weight_decay, float grad_scale, int t) {
    const unsigned gen = atomic_load(&g_gen);
    const uintptr_t lo = (uintptr_t)params, hi = (uintptr_t)(params + n);
    void *shadow[NKINDS] = {NULL, NULL};
    pthread_mutex_lock(&g_wlock);
    for (int i = 0; i < g_nw; i++) {
        wentry *e = &g_w[i];
        const uintptr_t elo = (uintptr_t)e->w, ehi = (uintptr_t)(e->w + e->n);
        if (ehi <= lo || elo >= hi) continue;                                        /* no overlap */
        if (e->w == params && e->n == n && e->gen == gen) shadow[e->kind] = e->data; /* renewed below, stays valid */
        else e->gen = 0;
    }
    /* copies are read only by ops, which never run during the update */
    pthread_mutex_unlock(&g_wlock);
    if (!shadow[KIND_BF16] && !shadow[KIND_F32R]) { /* no copy to renew (MODE_FP32 keeps none): fp32's AdamW */
        lf__cpu_adamw_update(params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale, t);
        return;
    }
    lf__cpu_adamw_update_shadow(params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale, t,
                                shadow[KIND_BF16], shadow[KIND_F32R]);
}

/* ---------------------------------------------------------------- per-thread state */

typedef struct prim {
    int M, N, K, ta, tb, bias, sum, nthr;
    dnnl_primitive_t p;
    dnnl_memory_t src, wei, bia, dst, pad;
    size_t pad_bytes;
    unsigned long used;
} prim;

typedef struct tstate {
    dnnl_stream_t stream;
    prim prims[PRIM_CACHE_MAX];
    int nprims;
    unsigned long clock;
    void *buf[NSLOTS];
    size_t cap[NSLOTS];
    struct tstate *next;
} tstate;

static _Thread_local tstate *t_state;
static _Thread_local unsigned t_epoch; /* g_epoch when t_state was made */
static pthread_mutex_t g_tlock = PTHREAD_MUTEX_INITIALIZER;
static tstate *g_threads;   /* every thread's state, so release can free them */
static atomic_uint g_epoch; /* moves on release: every t_state is stale */

static tstate *thread_state(void) {
    const unsigned epoch = atomic_load(&g_epoch);
    if (t_state && t_epoch == epoch) return t_state;
    tstate *s = lf_alloc(sizeof *s);
    if (!s) return NULL;
    memset(s, 0, sizeof *s);
    pthread_mutex_lock(&g_tlock);
    s->next = g_threads;
    g_threads = s;
    pthread_mutex_unlock(&g_tlock);
    t_state = s;
    t_epoch = epoch;
    return s;
}

/* Scratch slot `i` of at least `bytes`; grows only (so after the first step
 * of a fixed shape, nothing is allocated). */
static void *scratch(tstate *s, int i, size_t bytes) {
    if (!s) return NULL;
    if (s->cap[i] >= bytes) return s->buf[i];
    void *b = lf_alloc(bytes);
    if (!b) return NULL;
    lf_free(s->buf[i]);
    s->buf[i] = b;
    s->cap[i] = bytes;
    return b;
}

static void prim_destroy(prim *p) {
    dnnl_memory_destroy(p->src);
    dnnl_memory_destroy(p->wei);
    if (p->bia) dnnl_memory_destroy(p->bia);
    dnnl_memory_destroy(p->dst);
    if (p->pad) dnnl_memory_destroy(p->pad);
    dnnl_primitive_destroy(p->p);
    memset(p, 0, sizeof *p);
}

void lf__cpu_bf16_release(void) {
    pthread_mutex_lock(&g_tlock);
    for (tstate *s = g_threads, *nx; s; s = nx) {
        nx = s->next;
        for (int i = 0; i < s->nprims; i++) prim_destroy(&s->prims[i]);
        if (s->stream) dnnl_stream_destroy(s->stream);
        for (int i = 0; i < NSLOTS; i++) lf_free(s->buf[i]);
        lf_free(s);
    }
    g_threads = NULL;
    atomic_fetch_add(&g_epoch, 1); /* every thread's t_state is now stale */
    pthread_mutex_unlock(&g_tlock);
    lf__cpu_bf16_memory_freed();
}

/* ---------------------------------------------------------------- oneDNN matmul */

/* C (M,N) f32 = A (M,K) bf16 @ B (K,N) bf16 [+ bias (N) f32] [+ C]. A is
 * stored row-major as (M,K), or as (K,M) when ta; B as (K,N), or (N,K) when
 * tb. */
static dnnl_status_t matmul_pd(dnnl_primitive_desc_t *pd, int M, int N, int K, int ta, int tb, int bias, int sum) {
    dnnl_memory_desc_t a, b, c, bi;
    const dnnl_dims_t da = {M, K}, db = {K, N}, dc = {M, N}, dbi = {1, N};
    const dnnl_dims_t sa = {ta ? 1 : K, ta ? M : 1}, sb = {tb ? 1 : N, tb ? K : 1}, sc = {N, 1};
    dnnl_status_t st;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_matmul_desc_t d;
    if ((st = dnnl_memory_desc_init_by_strides(&a, 2, da, dnnl_bf16, sa)) != dnnl_success) return st;
    if ((st = dnnl_memory_desc_init_by_strides(&b, 2, db, dnnl_bf16, sb)) != dnnl_success) return st;
    if ((st = dnnl_memory_desc_init_by_strides(&c, 2, dc, dnnl_f32, sc)) != dnnl_success) return st;
    if ((st = dnnl_memory_desc_init_by_strides(&bi, 2, dbi, dnnl_f32, sc)) != dnnl_success) return st;
    if ((st = dnnl_matmul_desc_init(&d, &a, &b, bias ? &bi : NULL, &c)) != dnnl_success) return st;
    if ((st = dnnl_primitive_attr_create(&attr)) != dnnl_success) return st;
    if ((st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user)) != dnnl_success) goto done;
    if (sum) {
        if ((st = dnnl_post_ops_create(&po)) != dnnl_success) goto done;
        if ((st = dnnl_post_ops_append_sum(po, 1.0f)) != dnnl_success) goto done;
        if ((st = dnnl_primitive_attr_set_post_ops(attr, po)) != dnnl_success) goto done;
    }
    st = dnnl_primitive_desc_create(pd, &d, attr, g_engine, NULL);
done:
    if (po) dnnl_post_ops_destroy(po);
    dnnl_primitive_attr_destroy(attr);
    return st;
}

static prim *prim_get(tstate *s, int M, int N, int K, int ta, int tb, int bias, int sum) {
    const int nthr = omp_in_parallel() ? 1 : omp_get_max_threads();
    for (int i = 0; i < s->nprims; i++) {
        prim *p = &s->prims[i];
        if (p->M == M && p->N == N && p->K == K && p->ta == ta && p->tb == tb && p->bias == bias && p->sum == sum &&
            p->nthr == nthr) {
            p->used = ++s->clock;
            return p;
        }
    }
    prim *p;
    if (s->nprims < PRIM_CACHE_MAX) {
        p = &s->prims[s->nprims++];
    } else {
        p = &s->prims[0];
        for (int i = 1; i < s->nprims; i++)
            if (s->prims[i].used < p->used) p = &s->prims[i];
        prim_destroy(p);
    }
    dnnl_primitive_desc_t pd = NULL;
    if (matmul_pd(&pd, M, N, K, ta, tb, bias, sum) != dnnl_success) goto fail;
    const dnnl_memory_desc_t *pad = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    *p = (prim){.M = M, .N = N, .K = K, .ta = ta, .tb = tb, .bias = bias, .sum = sum, .nthr = nthr};
    p->pad_bytes = pad ? dnnl_memory_desc_get_size(pad) : 0;
    if (dnnl_primitive_create(&p->p, pd) != dnnl_success) goto fail;
    if (dnnl_memory_create(&p->src, dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0), g_engine,
                           DNNL_MEMORY_NONE) != dnnl_success ||
        dnnl_memory_create(&p->wei, dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0), g_engine,
                           DNNL_MEMORY_NONE) != dnnl_success ||
        dnnl_memory_create(&p->dst, dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0), g_engine,
                           DNNL_MEMORY_NONE) != dnnl_success ||
        (bias && dnnl_memory_create(&p->bia, dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 1), g_engine,
                                    DNNL_MEMORY_NONE) != dnnl_success) ||
        (p->pad_bytes && dnnl_memory_create(&p->pad, pad, g_engine, DNNL_MEMORY_NONE) != dnnl_success))
        goto fail;
    dnnl_primitive_desc_destroy(pd);
    p->used = ++s->clock;
    return p;
fail:
    if (pd) dnnl_primitive_desc_destroy(pd);
    /* release what was built and drop the slot (the last slot moves into it) */
    if (p->src) dnnl_memory_destroy(p->src);
    if (p->wei) dnnl_memory_destroy(p->wei);
    if (p->bia) dnnl_memory_destroy(p->bia);
    if (p->dst) dnnl_memory_destroy(p->dst);
    if (p->pad) dnnl_memory_destroy(p->pad);
    if (p->p) dnnl_primitive_destroy(p->p);
    *p = s->prims[--s->nprims];
    memset(&s->prims[s->nprims], 0, sizeof(prim));
    return NULL;
}

/* 0 on success; -1 when a primitive, memory or scratch cannot be had
 * (C untouched: oneDNN checks its arguments before it computes). */
static int onednn_product(tstate *s, int M, int N, int K, const uint16_t *A, int ta, const uint16_t *B, int tb,
                          const float *bias, float *C, int sum) {
    if (!s->stream && dnnl_stream_create(&s->stream, g_engine, dnnl_stream_default_flags) != dnnl_success) {
        s->stream = NULL;
        return -1;
    }
    prim *p = prim_get(s, M, N, K, ta, tb, bias != NULL, sum);
    if (!p) return -1;
    void *pad = p->pad_bytes ? scratch(s, SLOT_PAD, p->pad_bytes) : NULL;
    if (p->pad_bytes && !pad) return -1;
    if (dnnl_memory_set_data_handle(p->src, (void *)A) != dnnl_success ||
        dnnl_memory_set_data_handle(p->wei, (void *)B) != dnnl_success ||
        dnnl_memory_set_data_handle(p->dst, C) != dnnl_success ||
        (p->bia && dnnl_memory_set_data_handle(p->bia, (void *)bias) != dnnl_success) ||
        (p->pad && dnnl_memory_set_data_handle(p->pad, pad) != dnnl_success))
        return -1;
    dnnl_exec_arg_t args[5];
    int n = 0;
    args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SRC, p->src};
    args[n++] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, p->wei};
    args[n++] = (dnnl_exec_arg_t){DNNL_ARG_DST, p->dst};
    if (p->bia) args[n++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, p->bia};
    if (p->pad) args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, p->pad};
    if (dnnl_primitive_execute(p->p, s->stream, n, args) != dnnl_success) return -1;
    return dnnl_stream_wait(s->stream) == dnnl_success ? 0 : -1;
}

/* ---------------------------------------------------------------- products */

/* One operand of a product: its source, fp32 (x) or an activation stored in
 * bf16 (h, x NULL), and its converted copies, made on first need (weights
 * through the cache, activations into scratch). A bf16 source is its own
 * bf16 copy; its rounded-fp32 copy is its exact expansion. */
typedef struct operand {
    const float *x;
    const uint16_t *h;
    size_t n;
    int weight;
    int act;  /* the layer input (stored in bf16 where the model can): rounded on every path */
    int slot; /* scratch slot 0 or 1 for activations */
    const void *cvt[NKINDS];
} operand;

static const void *operand_get(tstate *s, operand *o, int kind) {
    if (o->cvt[kind]) return o->cvt[kind];
    if (o->h && kind == KIND_BF16) {
        o->cvt[kind] = o->h;
    } else if (o->weight) {
        o->cvt[kind] = weight_copy(o->x, o->n, kind);
    } else {
        void *b = scratch(s, kind * 2 + o->slot, o->n * kind_size(kind));
        if (b && o->h) lf__cpu_widen_bf16(b, o->h, o->n);
        else if (b) convert(b, o->x, o->n, kind);
        o->cvt[kind] = b;
    }
    return o->cvt[kind];
}

/* Element (i, k) of operand o viewed as an (rows, cols) matrix stored
 * row-major, or transposed when t. */
static inline float operand_at(const operand *o, int t, int rows, int cols, int i, int k) {
    const size_t at = t ? (size_t)k * rows + i : (size_t)i * cols + k;
    return o->h ? lf__cpu_bf16_as_f32(o->h[at]) : o->x[at];
}

/* The last path down, when no scratch could be had for a bf16 operand's
 * expansion: a plain loop (fp32 accumulation in row order) on the operands
 * as stored. Slow; it exists so that an op without memory still computes. */
static void product_direct(int M, int N, int K, const operand *A, int ta, const operand *B, int tb, const float *bias,
                           float *C, int sum) {
#pragma omp parallel for schedule(static) if ((long)M * N * K >= LF_CPU_PAR_MIN)
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float acc = 0.0f;
            for (int k = 0; k < K; k++) acc += operand_at(A, ta, M, K, i, k) * operand_at(B, tb, K, N, k, j);
            float *c = C + (size_t)i * N + j;
            *c = sum ? *c + acc : bias ? bias[j] + acc : acc;
        }
}

/* MODE_FP32's fp32 operand: the layer input rounded to bf16 (as stored),
 * anything else as it is. NULL when no scratch could be had. */
static const float *operand_fp32(tstate *s, operand *o) { return o->act ? operand_get(s, o, KIND_F32R) : o->x; }

/* C (M,N) = A @ B [+ bias] (sum: C += A @ B), A/B stored as onednn_product
 * says: oneDNN on bf16 operands; else sgemm on MODE_FP32's operands, or on
 * rounded ones (MODE_EMULATE, and where oneDNN refused); else (no memory)
 * plain sgemm, or a plain loop on a bf16 operand as stored. */
static void product(tstate *s, int M, int N, int K, operand *A, int ta, operand *B, int tb, const float *bias, float *C,
                    int sum) {
    const int m = mode();
    if (m == MODE_ONEDNN && s) {
        const void *a = operand_get(s, A, KIND_BF16), *b = operand_get(s, B, KIND_BF16);
        if (a && b && onednn_product(s, M, N, K, a, ta, b, tb, bias, C, sum) == 0) return;
        failed(a && b ? "oneDNN refused the matmul primitive" : "no memory for the bf16 operand copies", M, N, K);
    }
    const float *a, *b;
    if (m == MODE_FP32) {
        a = operand_fp32(s, A);
        b = operand_fp32(s, B);
    } else {
        a = operand_get(s, A, KIND_F32R);
        b = operand_get(s, B, KIND_F32R);
    }
    if (!a || !b) {
        if (m != MODE_ONEDNN) failed("no memory for the operand copies", M, N, K);
        a = A->x;
        b = B->x;
        if (!a || !b) { /* a bf16 operand: no fp32 source to hand to sgemm */
            product_direct(M, N, K, A, ta, B, tb, bias, C, sum);
            return;
        }
    }
    float beta = sum ? 1.0f : 0.0f;
    if (bias && !sum) {
        for (int i = 0; i < M; i++) memcpy(C + (size_t)i * N, bias, (size_t)N * sizeof(float));
        beta = 1.0f;
    }
    lf__cpu_sgemm(ta, tb, M, N, K, 1.0f, a, ta ? M : K, b, tb ? K : N, beta, C, N);
}

/* The forward with inp given as fp32 (inp) or bf16 (inp_h). */
static void matmul_forward(float *out, const float *inp, const uint16_t *inp_h, const float *weight, const float *bias,
                           int N, int C, int OC, lf_weight_layout layout) {
    if (N <= 0 || OC <= 0) return;
    if (C <= 0) { /* no product: out = bias (or 0), exactly what the fp32 op does (inp is not read) */
        lf__cpu_matmul_forward(out, inp, weight, bias, N, C, OC, layout);
        return;
    }
    tstate *s = thread_state();
    operand x = {.x = inp, .h = inp_h, .n = (size_t)N * C, .act = 1, .slot = 0};
    operand w = {.x = weight, .n = (size_t)C * OC, .weight = 1};
    const float *xr = mode() == MODE_FP32 && s ? operand_get(s, &x, KIND_F32R) : NULL;
    if (xr) { /* the fp32 op itself (its gemv for few rows too) on the input as stored */
        lf__cpu_matmul_forward(out, xr, weight, bias, N, C, OC, layout);
        return;
    }
    /* IN_OUT: W stored (C,OC) = (K,N); OUT_IN: stored (OC,C) = (N,K) */
    product(s, N, OC, C, &x, 0, &w, layout == LF_W_OUT_IN, bias, out, 0);
}

void lf__cpu_bf16_matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int N, int C,
                                 int OC, lf_weight_layout layout) {
    matmul_forward(out, inp, NULL, weight, bias, N, C, OC, layout);
}

void lf__cpu_bf16_matmul_forward_bf16(float *out, const uint16_t *inp, const float *weight, const float *bias, int N,
                                      int C, int OC, lf_weight_layout layout) {
    matmul_forward(out, NULL, inp, weight, bias, N, C, OC, layout);
}

/* The backward with inp given as fp32 (inp) or bf16 (inp_h). */
static void matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                            const uint16_t *inp_h, const float *weight, int N, int C, int OC, lf_weight_layout layout) {
    if (N <= 0 || OC <= 0 || C <= 0) return;
    tstate *s = thread_state();
    operand d = {.x = dout, .n = (size_t)N * OC, .slot = 1};
    operand x = {.x = inp, .h = inp_h, .n = (size_t)N * C, .act = 1, .slot = 0};
    operand w = {.x = weight, .n = (size_t)C * OC, .weight = 1};
    const float *xr = mode() == MODE_FP32 && s ? operand_get(s, &x, KIND_F32R) : NULL;
    if (xr) { /* the fp32 op itself on the input as stored */
        lf__cpu_matmul_backward(dinp, dweight, dbias, dout, xr, weight, N, C, OC, layout);
        return;
    }
    if (layout == LF_W_IN_OUT) {
        /* dinp (N,C) = dout (N,OC) @ W^T, W stored (C,OC) = (N,K) of this product */
        if (dinp) product(s, N, C, OC, &d, 0, &w, 1, NULL, dinp, 0);
        /* dW (C,OC) += inp^T @ dout: inp stored (N,C) = (K,M) */
        product(s, C, OC, N, &x, 1, &d, 0, NULL, dweight, 1);
    } else {
        /* dinp (N,C) = dout @ W, W stored (OC,C) = (K,N) */
        if (dinp) product(s, N, C, OC, &d, 0, &w, 0, NULL, dinp, 0);
        /* dW (OC,C) += dout^T @ inp: dout stored (N,OC) = (K,M) */
        product(s, OC, C, N, &d, 1, &x, 0, NULL, dweight, 1);
    }
    if (dbias) lf__cpu_bias_backward(dbias, dout, N, OC);
}

void lf__cpu_bf16_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                                  const float *weight, int N, int C, int OC, lf_weight_layout layout) {
    matmul_backward(dinp, dweight, dbias, dout, inp, NULL, weight, N, C, OC, layout);
}

void lf__cpu_bf16_matmul_backward_bf16(float *dinp, float *dweight, float *dbias, const float *dout,
                                       const uint16_t *inp, const float *weight, int N, int C, int OC,
                                       lf_weight_layout layout) {
    matmul_backward(dinp, dweight, dbias, dout, NULL, inp, weight, N, C, OC, layout);
}
