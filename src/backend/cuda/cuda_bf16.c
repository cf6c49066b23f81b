/*
 * The "cuda-bf16" backend's own state (see cuda_internal.h): the bf16 copies
 * of the weights, the operand scratch of the bf16 products, and the table
 * slots that differ from "cuda" because of them (the memory ops that
 * invalidate copies, AdamW that renews them). The products themselves are
 * cuda_ops_dense.c's (lf__cuda_install_dense_bf16); the norms, GELU, SwiGLU
 * and convert write bf16 activations through the "cuda" slots, which
 * honour out_dt when the table offers it.
 *
 * cuda-bf16 is to "cuda" what cpu-bf16 is to "cpu" (cpu_bf16.c): both
 * operands of every matmul product are rounded to bf16 (nearest even),
 * products accumulate in fp32 (cuBLASLt, CUBLAS_COMPUTE_32F), and the
 * master weights, gradients, AdamW state and every other op stay fp32.
 *
 * Weight copies. The bf16 copy of each weight is cached on the device,
 * keyed by (address, length), made at the weight's first product and used
 * while valid. The staleness rules are cpu-bf16's, per range:
 *  - to_device, copy and zero writing any byte of a weight invalidate its
 *    copy (cpu-bf16 invalidates every copy on any to_device, which on a
 *    host-memory backend only checkpoint loads and initialisation call; on
 *    a device every step uploads its tokens, so the range matters here);
 *  - free drops the copies of weights inside the freed block (a later
 *    tensor may get that address);
 *  - params_changed invalidates every copy;
 *  - adamw_update on exactly [params, params + n) writes the new copy in
 *    the same pass (every element of it: the copy is then valid whatever
 *    it was before); a copy that only overlaps the range is invalidated.
 * The contract (backend_impl.h) says parameters change only through
 * to_device and adamw_update or are followed by params_changed; copy and
 * zero are covered too because it costs a scan of a few dozen entries.
 *
 * Memory. Copies and scratch are cudaMalloc'd outside the allocation table
 * (like reduce_buf): `llmforge plan` counts them ("bf16 weight copies", 2
 * bytes a matmul parameter; "bf16 operand scratch", the largest product's
 * operands), as it does for cpu-bf16. The scratch grows only, so after the
 * first step of a fixed shape nothing is allocated. A cudaMalloc that fails
 * is the instance's sticky LF_ERR_NOMEM naming the op and the bytes.
 *
 * Threads: the cuda tables have no replicas, so one thread runs an
 * instance's ops at a time (the contract); the cache needs no lock.
 */
#include <stdio.h>
#include <stdlib.h>
#include "cuda_internal.h"
#include "cuda_dense.h"

/* ---------------------------------------------------------------- the cache */

static int overlaps(const lf_cuda_wcopy *e, const void *p, size_t bytes) {
    const uintptr_t lo = (uintptr_t)p, hi = lo + bytes;
    const uintptr_t elo = (uintptr_t)e->w, ehi = (uintptr_t)(e->w + e->n);
    return elo < hi && lo < ehi;
}

static void invalidate_range(lf_cuda_ctx *c, const void *p, size_t bytes) {
    if (!c || !bytes) return;
    for (int i = 0; i < c->n_wcopies; i++)
        if (overlaps(&c->wcopies[i], p, bytes)) c->wcopies[i].valid = 0;
}

/* drop (and free) the copies of weights overlapping the block */
static void drop_range(lf_backend *be, const void *p, size_t bytes) {
    lf_cuda_ctx *c = lf__cuda_ctx(be);
    if (!c || !bytes) return;
    for (int i = c->n_wcopies; i-- > 0;) {
        if (!overlaps(&c->wcopies[i], p, bytes)) continue;
        lf__cuda_check(be, cudaFree(c->wcopies[i].data), "free", "cudaFree (bf16 weight copy)");
        c->wcopies[i] = c->wcopies[--c->n_wcopies];
    }
}

const uint16_t *lf__cuda_bf16_weight(lf_backend *be, const char *op, const float *w, size_t n) {
    lf_cuda_ctx *c = lf__cuda_ctx(be);
    lf_cuda_wcopy *e = NULL;
    for (int i = 0; i < c->n_wcopies; i++)
        if (c->wcopies[i].w == w && c->wcopies[i].n == n) {
            e = &c->wcopies[i];
            break;
        }
    if (!e) {
        if (c->n_wcopies == c->cap_wcopies) {
            const int cap = c->cap_wcopies ? 2 * c->cap_wcopies : 64;
            lf_cuda_wcopy *nw = realloc(c->wcopies, (size_t)cap * sizeof *nw);
            if (!nw) {
                lf__backend_fail(be, LF_ERR_NOMEM, "%s: no host memory for the bf16 weight-copy table", op);
                return NULL;
            }
            c->wcopies = nw;
            c->cap_wcopies = cap;
        }
        void *data = NULL;
        char call[96];
        snprintf(call, sizeof call, "cudaMalloc (bf16 weight copy, %zu bytes)", n * sizeof(uint16_t));
        if (lf__cuda_check(be, cudaMalloc(&data, n * sizeof(uint16_t)), op, call)) return NULL;
        e = &c->wcopies[c->n_wcopies++];
        *e = (lf_cuda_wcopy){.w = w, .n = n, .data = data, .valid = 0};
    }
    if (!e->valid) {
        if (lf__cuda_check(be, lf__cuk_cast_bf16(e->data, w, n, lf__cuda_stream(be)), op,
                           "dense_cast_bf16 (weight copy)"))
            return NULL;
        e->valid = 1;
    }
    return e->data;
}

uint16_t *lf__cuda_bf16_scratch(lf_backend *be, const char *op, int slot, size_t n) {
    lf_cuda_ctx *c = lf__cuda_ctx(be);
    if (c->opnd_cap[slot] >= n) return c->opnd[slot];
    if (c->opnd[slot]) {
        /* cudaFree waits for the device: the products queued on the old buffer are done */
        (void)lf__cuda_check(be, cudaFree(c->opnd[slot]), op, "cudaFree (bf16 operand scratch)");
        c->opnd[slot] = NULL;
        c->opnd_cap[slot] = 0;
    }
    void *p = NULL;
    char call[96];
    snprintf(call, sizeof call, "cudaMalloc (bf16 operand scratch, %zu bytes)", n * sizeof(uint16_t));
    if (lf__cuda_check(be, cudaMalloc(&p, n * sizeof(uint16_t)), op, call)) return NULL;
    c->opnd[slot] = p;
    c->opnd_cap[slot] = n;
    return p;
}

void lf__cuda_bf16_release(lf_cuda_ctx *c) {
    for (int i = 0; i < c->n_wcopies; i++) (void)cudaFree(c->wcopies[i].data);
    free(c->wcopies);
    c->wcopies = NULL;
    c->n_wcopies = c->cap_wcopies = 0;
    for (int s = 0; s < 2; s++) {
        if (c->opnd[s]) (void)cudaFree(c->opnd[s]);
        c->opnd[s] = NULL;
        c->opnd_cap[s] = 0;
    }
}

/* ---------------------------------------------------------------- the table's slots */

static void bf16_free(lf_backend *be, void *p) {
    if (!p) return;
    drop_range(be, p, lf__backend_cuda()->allocated(be, p));
    lf__backend_cuda()->free(be, p);
}

static void bf16_to_device(lf_backend *be, void *dst, const void *src, size_t bytes) {
    invalidate_range(lf__cuda_ctx(be), dst, bytes);
    lf__backend_cuda()->to_device(be, dst, src, bytes);
}

static void bf16_copy(lf_backend *be, void *dst, const void *src, size_t bytes) {
    invalidate_range(lf__cuda_ctx(be), dst, bytes);
    lf__backend_cuda()->copy(be, dst, src, bytes);
}

static void bf16_zero(lf_backend *be, float *x, size_t n) {
    invalidate_range(lf__cuda_ctx(be), x, n * sizeof(float));
    lf__backend_cuda()->zero(be, x, n);
}

static void bf16_params_changed(lf_backend *be) {
    lf_cuda_ctx *c = lf__cuda_ctx(be);
    for (int i = 0; c && i < c->n_wcopies; i++) c->wcopies[i].valid = 0;
}

static void bf16_adamw_update(lf_backend *be, float *params, const float *grads, float *m, float *v, size_t n, float lr,
                              float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t) {
    lf_cuda_ctx *c = lf__cuda_ctx(be);
    uint16_t *shadow = NULL;
    for (int i = 0; i < c->n_wcopies; i++) {
        lf_cuda_wcopy *e = &c->wcopies[i];
        if (e->w == params && e->n == n) {
            shadow = e->data;
            e->valid = 1; /* the update writes every element of it */
        } else if (overlaps(e, params, n * sizeof(float))) {
            e->valid = 0;
        }
    }
    lf__cuda_adamw(be, params, grads, m, v, shadow, n, lr, beta1, beta2, eps, weight_decay, grad_scale, t);
}

void lf__cuda_install_bf16(lf_backend_ops *ops) {
    ops->free = bf16_free;
    ops->to_device = bf16_to_device;
    ops->copy = bf16_copy;
    ops->zero = bf16_zero;
    ops->params_changed = bf16_params_changed;
    ops->adamw_update = bf16_adamw_update;
    lf__cuda_install_dense_bf16(ops);
}
