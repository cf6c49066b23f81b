/*
 * "cpu-fenced": the CPU backend with memory the host cannot touch outside a
 * backend call. A test backend: the proof that no code outside src/backend/
 * reads or writes backend memory as host floats (what a GPU backend needs).
 *
 * How: every allocation is its own mmap'd region, kept PROT_NONE; each op,
 * and to_device/to_host, opens every region of its instance
 * (PROT_READ|PROT_WRITE) for the duration of the call and closes them
 * again. The region list is the instance's context (be->ctx), so two
 * instances fence independently. A host access outside an op
 * faults (SIGSEGV) at the instruction that made it. host_memory is 0, so
 * callers stage through to_device/to_host as they must for a device. One
 * replica (no concurrent ops, so opening and closing cannot race); the ops
 * themselves are the "cpu" table's slots, called with this instance (so
 * their precondition checks and failures land on its sticky status), and
 * results equal "cpu"'s with one replica bit for bit.
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

typedef struct fence {
    pthread_mutex_t mu;
    region *reg;
    size_t n, cap;
    int open; /* nesting depth (an op never calls another, but be safe) */
} fence;

static fence *F(lf_backend *be) { return be->ctx; }
static const lf_backend_ops *base(void) { return lf__backend_cpu(); }

static lf_status fenced_open(lf_backend *be) {
    fence *f = lf_calloc(sizeof *f);
    if (!f) return LF_ERR_NOMEM;
    pthread_mutex_init(&f->mu, NULL);
    be->ctx = f;
    return LF_OK;
}

static void fenced_close(lf_backend *be) {
    fence *f = F(be);
    if (!f) return;
    for (size_t i = 0; i < f->n; i++) munmap(f->reg[i].p, f->reg[i].len);
    free(f->reg);
    pthread_mutex_destroy(&f->mu);
    lf_free(f);
    be->ctx = NULL;
}

static void protect_all(fence *f, int prot) {
    for (size_t i = 0; i < f->n; i++) mprotect(f->reg[i].p, f->reg[i].len, prot);
}

static void fence_open(lf_backend *be) {
    fence *f = F(be);
    pthread_mutex_lock(&f->mu);
    if (f->open++ == 0) protect_all(f, PROT_READ | PROT_WRITE);
    pthread_mutex_unlock(&f->mu);
}

static void fence_close(lf_backend *be) {
    fence *f = F(be);
    pthread_mutex_lock(&f->mu);
    if (--f->open == 0) protect_all(f, PROT_NONE);
    pthread_mutex_unlock(&f->mu);
}

static size_t page_round(size_t n) {
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    return (n + pg - 1) / pg * pg;
}

static void *fenced_alloc(lf_backend *be, size_t bytes) {
    fence *f = F(be);
    const size_t len = page_round(bytes ? bytes : 1);
    void *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    pthread_mutex_lock(&f->mu);
    if (f->n == f->cap) {
        size_t cap = f->cap ? 2 * f->cap : 64;
        region *r = realloc(f->reg, cap * sizeof *r);
        if (!r) {
            pthread_mutex_unlock(&f->mu);
            munmap(p, len);
            return NULL;
        }
        f->reg = r;
        f->cap = cap;
    }
    f->reg[f->n++] = (region){p, len};
    if (f->open) mprotect(p, len, PROT_READ | PROT_WRITE);
    pthread_mutex_unlock(&f->mu);
    return p;
}

static void fenced_free(lf_backend *be, void *p) {
    if (!p) return;
    fence *f = F(be);
    pthread_mutex_lock(&f->mu);
    for (size_t i = 0; i < f->n; i++)
        if (f->reg[i].p == p) {
            munmap(p, f->reg[i].len);
            f->reg[i] = f->reg[--f->n];
            break;
        }
    pthread_mutex_unlock(&f->mu);
}

static size_t fenced_allocated(lf_backend *be, const void *p) {
    if (!p) return 0;
    fence *f = F(be);
    size_t len = 0;
    pthread_mutex_lock(&f->mu);
    for (size_t i = 0; i < f->n; i++)
        if (f->reg[i].p == p) len = f->reg[i].len;
    pthread_mutex_unlock(&f->mu);
    return len;
}

static void fenced_to_device(lf_backend *be, void *dst, const void *src, size_t bytes) {
    fence_open(be);
    memcpy(dst, src, bytes);
    fence_close(be);
}

static void fenced_to_host(lf_backend *be, void *dst, const void *src, size_t bytes) {
    fence_open(be);
    memcpy(dst, src, bytes);
    fence_close(be);
}

static void fenced_copy(lf_backend *be, void *dst, const void *src, size_t bytes) {
    fence_open(be);
    memmove(dst, src, bytes);
    fence_close(be);
}

static int fenced_replicas(lf_backend *be, int B) {
    (void)be;
    (void)B;
    return 1;
}

static void fenced_params_changed(lf_backend *be) { (void)be; }

/* ---------------------------------------------------------------- the ops, each inside the fence */

#define FV(name, params, args) \
    static void f_##name params { \
        fence_open(be); \
        base()->name args; \
        fence_close(be); \
    }
#define FR(type, name, params, args) \
    static type f_##name params { \
        fence_open(be); \
        const type r_ = base()->name args; \
        fence_close(be); \
        return r_; \
    }

FV(zero, (lf_backend * be, float *x, size_t n), (be, x, n))
FV(scale, (lf_backend * be, float *x, size_t n, float s), (be, x, n, s))
FV(encoder_forward,
   (lf_backend * be, float *out, const int32_t *inp, const float *wte, const float *wpe, int B, int T, int C),
   (be, out, inp, wte, wpe, B, T, C))
FV(encoder_backward,
   (lf_backend * be, float *dwte, float *dwpe, const float *dout, const int32_t *inp, int B, int T, int C),
   (be, dwte, dwpe, dout, inp, B, T, C))
FV(layernorm_forward,
   (lf_backend * be, void *out, lf_dtype dt, float *mean, float *rstd, const float *inp, const float *weight,
    const float *bias, int N, int C),
   (be, out, dt, mean, rstd, inp, weight, bias, N, C))
FV(layernorm_backward,
   (lf_backend * be, float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
    const float *weight, const float *mean, const float *rstd, int N, int C),
   (be, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C))
FV(rmsnorm_forward,
   (lf_backend * be, void *out, lf_dtype dt, float *rstd, const float *inp, const float *weight, int N, int C,
    float eps),
   (be, out, dt, rstd, inp, weight, N, C, eps))
FV(rmsnorm_backward,
   (lf_backend * be, float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
    const float *rstd, int N, int C),
   (be, dinp, dweight, dout, inp, weight, rstd, N, C))
FV(qknorm_forward,
   (lf_backend * be, float *out, float *rstd, const float *inp, const float *wq, const float *wk, int N, int NH,
    int NKV, int HS, float eps),
   (be, out, rstd, inp, wq, wk, N, NH, NKV, HS, eps))
FV(qknorm_backward,
   (lf_backend * be, float *dqkv, float *dwq, float *dwk, const float *inp, const float *wq, const float *wk,
    const float *rstd, int N, int NH, int NKV, int HS),
   (be, dqkv, dwq, dwk, inp, wq, wk, rstd, N, NH, NKV, HS))
FV(residual_layernorm_forward,
   (lf_backend * be, float *res, void *out, lf_dtype dt, float *mean, float *rstd, const float *a, const float *b,
    const float *weight, const float *bias, int N, int C),
   (be, res, out, dt, mean, rstd, a, b, weight, bias, N, C))
FV(residual_rmsnorm_forward,
   (lf_backend * be, float *res, void *out, lf_dtype dt, float *rstd, const float *a, const float *b,
    const float *weight, int N, int C, float eps),
   (be, res, out, dt, rstd, a, b, weight, N, C, eps))
FV(matmul_forward,
   (lf_backend * be, float *out, const void *inp, lf_dtype dt, const float *weight, const float *bias, int N, int C,
    int OC, lf_weight_layout layout),
   (be, out, inp, dt, weight, bias, N, C, OC, layout))
FV(matmul_backward,
   (lf_backend * be, float *dinp, float *dweight, float *dbias, const float *dout, const void *inp, lf_dtype dt,
    const float *weight, int N, int C, int OC, lf_weight_layout layout),
   (be, dinp, dweight, dbias, dout, inp, dt, weight, N, C, OC, layout))
FV(rope_forward,
   (lf_backend * be, float *qkv, int B, int T, int NH, int NKV, int HS, int pos0, const float *inv_freq, float scale),
   (be, qkv, B, T, NH, NKV, HS, pos0, inv_freq, scale))
FV(rope_backward,
   (lf_backend * be, float *dqkv, int B, int T, int NH, int NKV, int HS, int pos0, const float *inv_freq, float scale),
   (be, dqkv, B, T, NH, NKV, HS, pos0, inv_freq, scale))
FV(attention_forward,
   (lf_backend * be, float *out, float *att, const float *qkv, int B, int T, int C, int NH, int NKV, lf_dropout drop),
   (be, out, att, qkv, B, T, C, NH, NKV, drop))
FV(attention_backward,
   (lf_backend * be, float *dqkv, float *scratch, const float *dout, const float *qkv, const float *att, int B, int T,
    int C, int NH, int NKV, lf_dropout drop),
   (be, dqkv, scratch, dout, qkv, att, B, T, C, NH, NKV, drop))
FV(encoder_forward_packed,
   (lf_backend * be, float *out, const int32_t *inp, const int32_t *pos, const float *wte, const float *wpe, int B,
    int T, int C),
   (be, out, inp, pos, wte, wpe, B, T, C))
FV(encoder_backward_packed,
   (lf_backend * be, float *dwte, float *dwpe, const float *dout, const int32_t *inp, const int32_t *pos, int B, int T,
    int C),
   (be, dwte, dwpe, dout, inp, pos, B, T, C))
FV(rope_forward_packed,
   (lf_backend * be, float *qkv, const int32_t *pos, int B, int T, int NH, int NKV, int HS, const float *inv_freq,
    float scale),
   (be, qkv, pos, B, T, NH, NKV, HS, inv_freq, scale))
FV(rope_backward_packed,
   (lf_backend * be, float *dqkv, const int32_t *pos, int B, int T, int NH, int NKV, int HS, const float *inv_freq,
    float scale),
   (be, dqkv, pos, B, T, NH, NKV, HS, inv_freq, scale))
FV(attention_forward_packed,
   (lf_backend * be, float *out, float *att, const float *qkv, const int32_t *pos, int B, int T, int C, int NH, int NKV,
    lf_dropout drop),
   (be, out, att, qkv, pos, B, T, C, NH, NKV, drop))
FV(attention_backward_packed,
   (lf_backend * be, float *dqkv, float *scratch, const float *dout, const float *qkv, const float *att,
    const int32_t *pos, int B, int T, int C, int NH, int NKV, lf_dropout drop),
   (be, dqkv, scratch, dout, qkv, att, pos, B, T, C, NH, NKV, drop))
FV(kv_append,
   (lf_backend * be, float *kcache, float *vcache, const float *qkv, int B, int Tn, int NH, int NKV, int HS, int pos0,
    int Tmax),
   (be, kcache, vcache, qkv, B, Tn, NH, NKV, HS, pos0, Tmax))
FV(attention_cached,
   (lf_backend * be, float *out, float *scratch, const float *qkv, const float *kcache, const float *vcache, int B,
    int Tn, int C, int NH, int NKV, int pos0, int Tmax),
   (be, out, scratch, qkv, kcache, vcache, B, Tn, C, NH, NKV, pos0, Tmax))
FV(gelu_forward, (lf_backend * be, void *out, lf_dtype dt, const float *inp, size_t n), (be, out, dt, inp, n))
FV(convert, (lf_backend * be, void *out, lf_dtype dt, const float *inp, size_t n), (be, out, dt, inp, n))
FV(grad_to_bf16, (lf_backend * be, uint16_t *out, const float *inp, size_t n), (be, out, inp, n))
FV(grad_from_bf16, (lf_backend * be, float *out, const uint16_t *inp, size_t n), (be, out, inp, n))
FV(gelu_backward, (lf_backend * be, float *dinp, const float *inp, const float *dout, size_t n),
   (be, dinp, inp, dout, n))
FV(swiglu_forward, (lf_backend * be, void *out, lf_dtype dt, const float *inp, int N, int F), (be, out, dt, inp, N, F))
FV(swiglu_backward, (lf_backend * be, float *dinp, const float *inp, const float *dout, int N, int F),
   (be, dinp, inp, dout, N, F))
FV(residual_forward, (lf_backend * be, float *out, const float *a, const float *b, size_t n), (be, out, a, b, n))
FV(residual_backward, (lf_backend * be, float *da, float *db, const float *dout, size_t n), (be, da, db, dout, n))
FV(dropout_forward, (lf_backend * be, float *out, const float *inp, size_t n, lf_dropout drop), (be, out, inp, n, drop))
FV(dropout_backward, (lf_backend * be, float *dinp, const float *dout, size_t n, lf_dropout drop),
   (be, dinp, dout, n, drop))
FV(crossentropy_forward_backward,
   (lf_backend * be, float *losses, float *dlogits, const float *logits, const int32_t *targets, int N, int V, int Vp,
    float dloss),
   (be, losses, dlogits, logits, targets, N, V, Vp, dloss))
FV(adamw_update,
   (lf_backend * be, float *params, const float *grads, float *m, float *v, size_t n, float lr, float beta1,
    float beta2, float eps, float weight_decay, float grad_scale, int t),
   (be, params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale, t))
FR(int, fp16_round, (lf_backend * be, float *x, size_t n), (be, x, n))
FR(double, sum_squares, (lf_backend * be, const float *x, size_t n), (be, x, n))
FV(add_inplace, (lf_backend * be, float *y, const float *x, size_t n), (be, y, x, n))

static double f_loss_sum(lf_backend *be, const float *losses, const int32_t *targets, int N, long *n_valid) {
    long n = 0; /* n_valid is host memory: written after the fence closes */
    fence_open(be);
    const double r = base()->loss_sum(be, losses, targets, N, &n);
    fence_close(be);
    *n_valid = n;
    return r;
}

static const lf_backend_ops fenced_ops = {
    .name = "cpu-fenced",
    .open = fenced_open,
    .close = fenced_close,
    .host_memory = 0,
    .act_dtypes = LF_DT_BIT(LF_DT_F32),
    .batch_invariant = 1, /* cpu's matmul_forward, which reads the instance's flag */
    .alloc = fenced_alloc,
    .free = fenced_free,
    .allocated = fenced_allocated,
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
    .qknorm_forward = f_qknorm_forward,
    .qknorm_backward = f_qknorm_backward,
    .residual_layernorm_forward = f_residual_layernorm_forward,
    .residual_rmsnorm_forward = f_residual_rmsnorm_forward,
    .matmul_forward = f_matmul_forward,
    .matmul_backward = f_matmul_backward,
    .rope_forward = f_rope_forward,
    .rope_backward = f_rope_backward,
    .attention_forward = f_attention_forward,
    .attention_backward = f_attention_backward,
    .encoder_forward_packed = f_encoder_forward_packed,
    .encoder_backward_packed = f_encoder_backward_packed,
    .rope_forward_packed = f_rope_forward_packed,
    .rope_backward_packed = f_rope_backward_packed,
    .attention_forward_packed = f_attention_forward_packed,
    .attention_backward_packed = f_attention_backward_packed,
    .kv_append = f_kv_append,
    .attention_saved = lf__cpu_attention_saved,
    .attention_scratch = lf__cpu_attention_saved,
    .attention_cached_scratch = lf__cpu_attention_cached_scratch,
    .attention_cached = f_attention_cached,
    .gelu_forward = f_gelu_forward,
    .convert = f_convert,
    .grad_to_bf16 = f_grad_to_bf16,
    .grad_from_bf16 = f_grad_from_bf16,
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
