/*
 * "cpu-fenced": the CPU backend with memory the host cannot touch outside a
 * backend call. A test backend: the proof that no code outside src/backend/
 * reads or writes backend memory as host floats (what a GPU backend needs).
 *
 * How: every allocation is its own mmap'd region, kept PROT_NONE; each op,
 * and to_device/to_host, opens every region (PROT_READ|PROT_WRITE) for the
 * duration of the call and closes them again. A host access outside an op
 * faults (SIGSEGV) at the instruction that made it. host_memory is 0, so
 * callers stage through to_device/to_host as they must for a device. One
 * replica (no concurrent ops, so opening and closing cannot race); the ops
 * themselves are the "cpu" table's, so results equal "cpu"'s with one
 * replica bit for bit.
 *
 * Why not a real device: none is lent to CI; this catches the same class of
 * bug (a host pointer dereference into device memory) on any machine.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "cpu_internal.h"

typedef struct region {
    void *p;
    size_t len;
} region;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static region *g_reg;
static size_t g_n, g_cap;
static int g_open; /* nesting depth (an op never calls another, but be safe) */

static const lf_backend_ops *base(void) { return lf__backend_cpu(); }

static void protect_all(int prot) {
    for (size_t i = 0; i < g_n; i++) mprotect(g_reg[i].p, g_reg[i].len, prot);
}

static void fence_open(void) {
    pthread_mutex_lock(&g_mu);
    if (g_open++ == 0) protect_all(PROT_READ | PROT_WRITE);
    pthread_mutex_unlock(&g_mu);
}

static void fence_close(void) {
    pthread_mutex_lock(&g_mu);
    if (--g_open == 0) protect_all(PROT_NONE);
    pthread_mutex_unlock(&g_mu);
}

static size_t page_round(size_t n) {
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    return (n + pg - 1) / pg * pg;
}

static void *fenced_alloc(size_t bytes) {
    const size_t len = page_round(bytes ? bytes : 1);
    void *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    pthread_mutex_lock(&g_mu);
    if (g_n == g_cap) {
        size_t cap = g_cap ? 2 * g_cap : 64;
        region *r = realloc(g_reg, cap * sizeof *r);
        if (!r) {
            pthread_mutex_unlock(&g_mu);
            munmap(p, len);
            return NULL;
        }
        g_reg = r;
        g_cap = cap;
    }
    g_reg[g_n++] = (region){p, len};
    if (g_open) mprotect(p, len, PROT_READ | PROT_WRITE);
    pthread_mutex_unlock(&g_mu);
    return p;
}

static void fenced_free(void *p) {
    if (!p) return;
    pthread_mutex_lock(&g_mu);
    for (size_t i = 0; i < g_n; i++)
        if (g_reg[i].p == p) {
            munmap(p, g_reg[i].len);
            g_reg[i] = g_reg[--g_n];
            break;
        }
    pthread_mutex_unlock(&g_mu);
}

static void fenced_to_device(void *dst, const void *src, size_t bytes) {
    fence_open();
    memcpy(dst, src, bytes);
    fence_close();
}

static void fenced_to_host(void *dst, const void *src, size_t bytes) {
    fence_open();
    memcpy(dst, src, bytes);
    fence_close();
}

static void fenced_copy(void *dst, const void *src, size_t bytes) {
    fence_open();
    memmove(dst, src, bytes);
    fence_close();
}

static int fenced_replicas(int B) {
    (void)B;
    return 1;
}

static void fenced_params_changed(void) {}

/* ---------------------------------------------------------------- the ops, each inside the fence */

static void f_zero(float *x, size_t n) {
    fence_open();
    base()->zero(x, n);
    fence_close();
}

static void f_scale(float *x, size_t n, float s) {
    fence_open();
    base()->scale(x, n, s);
    fence_close();
}

static void f_encoder_forward(float *out, const int32_t *inp, const float *wte, const float *wpe, int B, int T, int C) {
    fence_open();
    base()->encoder_forward(out, inp, wte, wpe, B, T, C);
    fence_close();
}

static void f_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int B, int T, int C) {
    fence_open();
    base()->encoder_backward(dwte, dwpe, dout, inp, B, T, C);
    fence_close();
}

static void f_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *weight, const float *bias, int N, int C) {
    fence_open();
    base()->layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
    fence_close();
}

static void f_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp, const float *weight, const float *mean, const float *rstd, int N, int C) {
    fence_open();
    base()->layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
    fence_close();
}

static void f_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight, int N, int C, float eps) {
    fence_open();
    base()->rmsnorm_forward(out, rstd, inp, weight, N, C, eps);
    fence_close();
}

static void f_rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight, const float *rstd, int N, int C) {
    fence_open();
    base()->rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C);
    fence_close();
}

static void f_matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int N, int C, int OC, lf_weight_layout layout) {
    fence_open();
    base()->matmul_forward(out, inp, weight, bias, N, C, OC, layout);
    fence_close();
}

static void f_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp, const float *weight, int N, int C, int OC, lf_weight_layout layout) {
    fence_open();
    base()->matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, layout);
    fence_close();
}

static void f_rope_forward(float *qkv, int B, int T, int NH, int NKV, int HS, int pos0, float theta) {
    fence_open();
    base()->rope_forward(qkv, B, T, NH, NKV, HS, pos0, theta);
    fence_close();
}

static void f_rope_backward(float *dqkv, int B, int T, int NH, int NKV, int HS, int pos0, float theta) {
    fence_open();
    base()->rope_backward(dqkv, B, T, NH, NKV, HS, pos0, theta);
    fence_close();
}

static void f_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH, int NKV, lf_dropout drop) {
    fence_open();
    base()->attention_forward(out, att, qkv, B, T, C, NH, NKV, drop);
    fence_close();
}

static void f_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *att, int B, int T, int C, int NH, int NKV, lf_dropout drop) {
    fence_open();
    base()->attention_backward(dqkv, scratch, dout, qkv, att, B, T, C, NH, NKV, drop);
    fence_close();
}

static void f_kv_append(float *kcache, float *vcache, const float *qkv, int B, int Tn, int NH, int NKV, int HS, int pos0, int Tmax) {
    fence_open();
    base()->kv_append(kcache, vcache, qkv, B, Tn, NH, NKV, HS, pos0, Tmax);
    fence_close();
}

static void f_attention_cached(float *out, float *scratch, const float *qkv, const float *kcache, const float *vcache, int B, int Tn, int C, int NH, int NKV, int pos0, int Tmax) {
    fence_open();
    base()->attention_cached(out, scratch, qkv, kcache, vcache, B, Tn, C, NH, NKV, pos0, Tmax);
    fence_close();
}

static void f_gelu_forward(float *out, const float *inp, size_t n) {
    fence_open();
    base()->gelu_forward(out, inp, n);
    fence_close();
}

static void f_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    fence_open();
    base()->gelu_backward(dinp, inp, dout, n);
    fence_close();
}

static void f_swiglu_forward(float *out, const float *inp, int N, int F) {
    fence_open();
    base()->swiglu_forward(out, inp, N, F);
    fence_close();
}

static void f_swiglu_backward(float *dinp, const float *inp, const float *dout, int N, int F) {
    fence_open();
    base()->swiglu_backward(dinp, inp, dout, N, F);
    fence_close();
}

static void f_residual_forward(float *out, const float *a, const float *b, size_t n) {
    fence_open();
    base()->residual_forward(out, a, b, n);
    fence_close();
}

static void f_residual_backward(float *da, float *db, const float *dout, size_t n) {
    fence_open();
    base()->residual_backward(da, db, dout, n);
    fence_close();
}

static void f_dropout_forward(float *out, const float *inp, size_t n, lf_dropout drop) {
    fence_open();
    base()->dropout_forward(out, inp, n, drop);
    fence_close();
}

static void f_dropout_backward(float *dinp, const float *dout, size_t n, lf_dropout drop) {
    fence_open();
    base()->dropout_backward(dinp, dout, n, drop);
    fence_close();
}

static void f_crossentropy_forward_backward(float *losses, float *dlogits, const float *logits, const int32_t *targets, int N, int V, int Vp, float dloss) {
    fence_open();
    base()->crossentropy_forward_backward(losses, dlogits, logits, targets, N, V, Vp, dloss);
    fence_close();
}

static void f_adamw_update(float *params, const float *grads, float *m, float *v, size_t n, float lr, float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t) {
    fence_open();
    base()->adamw_update(params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale, t);
    fence_close();
}

static double f_loss_sum(const float *losses, const int32_t *targets, int N, long *n_valid) {
    long n = 0; /* n_valid is host memory: written after the fence closes */
    fence_open();
    const double r = base()->loss_sum(losses, targets, N, &n);
    fence_close();
    *n_valid = n;
    return r;
}

static int f_fp16_round(float *x, size_t n) {
    fence_open();
    const int r = base()->fp16_round(x, n);
    fence_close();
    return r;
}

static double f_sum_squares(const float *x, size_t n) {
    fence_open();
    const double r = base()->sum_squares(x, n);
    fence_close();
    return r;
}

static void f_add_inplace(float *y, const float *x, size_t n) {
    fence_open();
    base()->add_inplace(y, x, n);
    fence_close();
}

static const lf_backend_ops fenced_ops = {
    .name = "cpu-fenced",
    .host_memory = 0,
    .alloc = fenced_alloc,
    .free = fenced_free,
    .to_device = fenced_to_device,
    .to_host = fenced_to_host,
    .copy = fenced_copy,
    .replicas = fenced_replicas,
    .params_changed = fenced_params_changed,
    .zero = f_zero,
    .scale = f_scale,
    .encoder_forward = f_encoder_forward,
    .encoder_backward = f_encoder_backward,
    .layernorm_forward = f_layernorm_forward,
    .layernorm_backward = f_layernorm_backward,
    .rmsnorm_forward = f_rmsnorm_forward,
    .rmsnorm_backward = f_rmsnorm_backward,
    .matmul_forward = f_matmul_forward,
    .matmul_backward = f_matmul_backward,
    .rope_forward = f_rope_forward,
    .rope_backward = f_rope_backward,
    .attention_forward = f_attention_forward,
    .attention_backward = f_attention_backward,
    .kv_append = f_kv_append,
    .attention_cached = f_attention_cached,
    .gelu_forward = f_gelu_forward,
    .gelu_backward = f_gelu_backward,
    .swiglu_forward = f_swiglu_forward,
    .swiglu_backward = f_swiglu_backward,
    .residual_forward = f_residual_forward,
    .residual_backward = f_residual_backward,
    .dropout_forward = f_dropout_forward,
    .dropout_backward = f_dropout_backward,
    .crossentropy_forward_backward = f_crossentropy_forward_backward,
    .adamw_update = f_adamw_update,
    .loss_sum = f_loss_sum,
    .fp16_round = f_fp16_round,
    .sum_squares = f_sum_squares,
    .add_inplace = f_add_inplace,
};

const lf_backend_ops *lf__backend_cpu_fenced(void) { return &fenced_ops; }
