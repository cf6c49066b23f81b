/*
 * Backend registry and instances: the one place that knows which backends
 * were compiled in, and the instance lifecycle and sticky status every
 * backend shares (backend_impl.h).
 *
 * Invariants:
 *  - An instance's status goes from LF_OK to the first failure once
 *    (compare-and-swap in lf__backend_fail) and never back.
 *  - One table of kinds: the built-in CPU kinds are registered at first
 *    use, through the same path (add_table) as the kinds libraries above
 *    register (lf__backend_register: "cuda", "cuda-bf16"), and are looked
 *    up the same way; nothing else names a kind.
 *  - lf_backend_get's instances are made once each (under a lock) and live
 *    until the process exits.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend/backend_impl.h"

/* Every kind of backend, in one table, in registration order: the built-in
 * CPU kinds first (registered at first use, before anything else can be),
 * then those registered at run time by libraries above this one (the CUDA
 * backend: lf_backend_cuda_register). Slots are filled once and never
 * emptied, so a table found is valid for the life of the process. */
#define LF_MAX_BACKENDS 8
static const lf_backend_ops *_Atomic g_tables[LF_MAX_BACKENDS];
static pthread_once_t g_builtin_once = PTHREAD_ONCE_INIT;

static lf_status add_table(const lf_backend_ops *ops) {
    for (int i = 0; i < LF_MAX_BACKENDS; i++) {
        const lf_backend_ops *cur = atomic_load(&g_tables[i]);
        if (cur == ops || (cur && strcmp(cur->name, ops->name) == 0)) return LF_OK;
        const lf_backend_ops *expected = NULL;
        if (!cur && atomic_compare_exchange_strong(&g_tables[i], &expected, ops)) return LF_OK;
        if (expected == ops) return LF_OK;
    }
    return lf_fail(LF_ERR_RANGE, "backend '%s': no room to register it (%d tables at most)", ops->name,
                   LF_MAX_BACKENDS);
}

static void register_builtins(void) {
    (void)add_table(lf__backend_cpu());
    (void)add_table(lf__backend_cpu_bf16());
    (void)add_table(lf__backend_cpu_fenced());
}

static void builtins(void) { pthread_once(&g_builtin_once, register_builtins); }

lf_status lf__backend_register(const lf_backend_ops *ops) {
    builtins();
    return add_table(ops);
}

/* The slot of the table named `name` (NULL: "cpu"), -1 when none is. */
static int slot_of(const char *name) {
    builtins();
    if (!name) name = "cpu";
    for (int i = 0; i < LF_MAX_BACKENDS; i++) {
        const lf_backend_ops *t = atomic_load(&g_tables[i]);
        if (t && strcmp(t->name, name) == 0) return i;
    }
    return -1;
}

static const lf_backend_ops *table_of(const char *name) {
    const int i = slot_of(name);
    return i < 0 ? NULL : atomic_load(&g_tables[i]);
}

/* "cpu, cpu-bf16, cpu-fenced" and the registered tables' names */
static void known_names(char *buf, size_t cap) {
    size_t at = 0;
    buf[0] = '\0';
    builtins();
    for (int i = 0; i < LF_MAX_BACKENDS && at < cap; i++) {
        const lf_backend_ops *t = atomic_load(&g_tables[i]);
        if (t) at += (size_t)snprintf(buf + at, cap - at, "%s%s", at ? ", " : "", t->name);
    }
}

static lf_status unknown(const char *name) {
    /* "cuda" is registered by programs linked with lf_backend_cuda (the CLI
     * does it when built with LF_CUDA); not finding it means this build has none */
    if (name && (strcmp(name, "cuda") == 0 || strcmp(name, "cuda-bf16") == 0))
        return lf_fail(LF_ERR_NOT_FOUND,
                       "backend '%s': this build has no CUDA backend (configured with LF_CUDA=OFF or no nvcc)", name);
    char known[256];
    known_names(known, sizeof known);
    return lf_fail(LF_ERR_NOT_FOUND, "unknown backend '%s' (compiled in: %s)", name, known);
}

static lf_status init(lf_backend *be, const lf_backend_ops *ops) {
    memset(be, 0, sizeof *be);
    be->ops = ops;
    atomic_store(&be->status, LF_OK);
    return ops->open ? ops->open(be) : LF_OK;
}

lf_status lf__backend_open_ops(const lf_backend_ops *ops, lf_backend **out) {
    *out = NULL;
    lf_backend *be = lf_calloc(sizeof *be);
    if (!be) return LF_ERR_NOMEM;
    const lf_status st = init(be, ops);
    if (st != LF_OK) {
        lf_free(be);
        return st;
    }
    *out = be;
    return LF_OK;
}

lf_status lf_backend_open(const char *name, lf_backend **out) {
    const lf_backend_ops *ops = table_of(name);
    if (!ops) {
        *out = NULL;
        return unknown(name);
    }
    return lf__backend_open_ops(ops, out);
}

void lf_backend_close(lf_backend *be) {
    if (!be || be->shared) return;
    if (be->ops->sync) be->ops->sync(be);
    if (be->ops->close) be->ops->close(be);
    lf_free(be);
}

/* ---------------------------------------------------------------- shared instances */

/* The shared instance of each table, made on first use under a lock; a
 * failed open is remembered with its message ("no CUDA device"), which
 * every later call repeats. g_made (release/acquire) lets later calls skip
 * the lock. */
static pthread_mutex_t g_shared_mu = PTHREAD_MUTEX_INITIALIZER;
static lf_backend g_shared[LF_MAX_BACKENDS];
static _Atomic int g_made[LF_MAX_BACKENDS]; /* the instance is open and usable */
static int g_tried[LF_MAX_BACKENDS];
static lf_status g_shared_st[LF_MAX_BACKENDS];
static char g_shared_msg[LF_MAX_BACKENDS][512];

lf_backend *lf_backend_get(const char *name) {
    const int i = slot_of(name);
    if (i < 0) {
        unknown(name);
        return NULL;
    }
    if (atomic_load_explicit(&g_made[i], memory_order_acquire)) return &g_shared[i];
    pthread_mutex_lock(&g_shared_mu);
    if (!g_tried[i]) {
        g_tried[i] = 1;
        g_shared_st[i] = init(&g_shared[i], atomic_load(&g_tables[i]));
        g_shared[i].shared = 1;
        if (g_shared_st[i] == LF_OK) atomic_store_explicit(&g_made[i], 1, memory_order_release);
        else snprintf(g_shared_msg[i], sizeof g_shared_msg[i], "%s", lf_last_error());
    }
    const lf_status st = g_shared_st[i];
    pthread_mutex_unlock(&g_shared_mu);
    if (st != LF_OK) {
        lf_fail(st, "%s", g_shared_msg[i]);
        return NULL;
    }
    return &g_shared[i];
}

/* ---------------------------------------------------------------- selection */

/* lf_backend_set_default's name ("" = none), under g_sel_mu */
static pthread_mutex_t g_sel_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_sel[32];

/* "auto": "cuda" when a "cuda" table is registered and sees a device, else
 * "cpu". The device count is asked once per process (cudaGetDeviceCount
 * starts the driver), after the table was registered. */
static int g_auto_probed, g_auto_devices;

static const char *auto_name(void) {
    const lf_backend_ops *t = table_of("cuda");
    if (!t) return "cpu";
    pthread_mutex_lock(&g_sel_mu);
    if (!g_auto_probed) {
        g_auto_devices = t->devices ? t->devices() : 0;
        g_auto_probed = 1;
    }
    const int n = g_auto_devices;
    pthread_mutex_unlock(&g_sel_mu);
    return n > 0 ? t->name : "cpu";
}

const char *lf_backend_default_name(void) {
    pthread_mutex_lock(&g_sel_mu);
    const lf_backend_ops *t = g_sel[0] ? table_of(g_sel) : NULL;
    pthread_mutex_unlock(&g_sel_mu);
    if (t) return t->name;
    const char *env = getenv("LLMFORGE_BACKEND");
    if (env && *env) return strcmp(env, "auto") == 0 ? auto_name() : env;
    return auto_name();
}

lf_status lf_backend_select(const char *name, const char **out) {
    if (!out) return lf_fail(LF_ERR_INVALID_ARG, "lf_backend_select: out is NULL");
    *out = NULL;
    const lf_backend_ops *t;
    if (!name || !*name || strcmp(name, "auto") == 0) {
        const char *d = lf_backend_default_name();
        if (!(t = table_of(d))) {
            const char *env = getenv("LLMFORGE_BACKEND");
            lf_status st = unknown(d);
            if (env && *env && strcmp(env, d) == 0) lf_error_prefix("environment variable LLMFORGE_BACKEND");
            return st;
        }
    } else if (!(t = table_of(name))) {
        return unknown(name);
    }
    *out = t->name;
    return LF_OK;
}

lf_status lf_backend_set_default(const char *name) {
    const char *sel = NULL;
    if (name && *name) {
        /* "auto" is resolved now; an unknown name is refused now */
        lf_status st = lf_backend_select(name, &sel);
        if (st != LF_OK) return st;
    }
    pthread_mutex_lock(&g_sel_mu);
    snprintf(g_sel, sizeof g_sel, "%s", sel ? sel : "");
    pthread_mutex_unlock(&g_sel_mu);
    return LF_OK;
}

const char *lf_backend_precision_name(const char *base, int bf16) {
    if (!base) base = "cpu";
    if (!bf16) return base;
    if (strcmp(base, "cpu") == 0) return "cpu-bf16";
    if (strcmp(base, "cuda") == 0) return "cuda-bf16";
    return base;
}

lf_backend *lf_backend_default(void) { return lf_backend_get(lf_backend_default_name()); }

const char *lf_backend_name(const lf_backend *be) { return be ? be->ops->name : "(none)"; }

int lf_backend_host_memory(const lf_backend *be) { return be && be->ops->host_memory; }

lf_status lf_backend_mem_info(lf_backend *be, size_t *free_bytes, size_t *total_bytes) {
    if (free_bytes) *free_bytes = 0;
    if (total_bytes) *total_bytes = 0;
    if (!be || !free_bytes || !total_bytes) return lf_fail(LF_ERR_INVALID_ARG, "lf_backend_mem_info: NULL argument");
    if (!be->ops->mem_info)
        return lf_fail(LF_ERR_UNSUPPORTED, "backend '%s': its memory is the host's (no device memory to report)",
                       be->ops->name);
    return be->ops->mem_info(be, free_bytes, total_bytes);
}

const char *lf_backend_device_name(const lf_backend *be) {
    /* the slot reads the instance's context, which it does not change */
    const char *n = be && be->ops->device_name ? be->ops->device_name((lf_backend *)be) : NULL;
    return n ? n : "";
}

/* ---------------------------------------------------------------- sticky status */

lf_status lf_backend_status(const lf_backend *be) { return (lf_status)atomic_load(&be->status); }

lf_status lf_backend_set_batch_invariant(lf_backend *be, int on) {
    if (!be) return lf_fail(LF_ERR_INVALID_ARG, "lf_backend_set_batch_invariant: no backend instance");
    if (on && !be->ops->batch_invariant)
        return lf_fail(LF_ERR_UNSUPPORTED,
                       "backend '%s' has no batch-invariant products (\"cpu\" and \"cpu-fenced\" do)", be->ops->name);
    be->batch_invariant = on != 0;
    return LF_OK;
}

int lf_backend_batch_invariant(const lf_backend *be) { return be && be->batch_invariant; }

lf_status lf_backend_sync(lf_backend *be) {
    if (be->ops->sync) be->ops->sync(be);
    const lf_status st = lf_backend_status(be);
    if (st == LF_OK) return LF_OK;
    return lf_fail(st, "backend '%s': %s", be->ops->name, be->msg);
}

/* ================================================================ buffers and ops for the layers above
 * (backend.h): each wrapper checks the instance and the slot, then calls it. */

#define NEED_BE(fn) \
    do { \
        if (!be) return lf_fail(LF_ERR_INVALID_ARG, fn ": no backend instance"); \
    } while (0)
#define NEED_SLOT(slot, what) \
    do { \
        if (!be->ops->slot) return lf_fail(LF_ERR_UNSUPPORTED, "backend '%s' has no %s", be->ops->name, what); \
    } while (0)

const lf_backend_ops *lf_backend_table(const lf_backend *be) { return be ? be->ops : NULL; }

int lf_backend_is_device(const lf_backend *be) { return be && !be->ops->host_memory && be->ops->mem_info; }

int lf_backend_replicas(lf_backend *be, int B) {
    return be && be->ops->replicas && B >= 1 ? be->ops->replicas(be, B) : 1;
}

void *lf_backend_alloc(lf_backend *be, size_t bytes) {
    if (!be) {
        lf_fail(LF_ERR_INVALID_ARG, "lf_backend_alloc: no backend instance");
        return NULL;
    }
    return be->ops->alloc(be, bytes);
}

void lf_backend_free(lf_backend *be, void *p) {
    if (be && p) be->ops->free(be, p);
}

size_t lf_backend_allocated(lf_backend *be, const void *p) {
    return be && p && be->ops->allocated ? be->ops->allocated(be, p) : 0;
}

lf_status lf_backend_to_host(lf_backend *be, void *host_dst, const void *src, size_t bytes) {
    NEED_BE("lf_backend_to_host");
    if (!bytes) return LF_OK;
    NEED_SLOT(to_host, "copy to the host");
    be->ops->to_host(be, host_dst, src, bytes);
    return LF_OK;
}

lf_status lf_backend_to_device(lf_backend *be, void *dst, const void *host_src, size_t bytes) {
    NEED_BE("lf_backend_to_device");
    if (!bytes) return LF_OK;
    NEED_SLOT(to_device, "copy from the host");
    be->ops->to_device(be, dst, host_src, bytes);
    return LF_OK;
}

lf_status lf_backend_copy(lf_backend *be, void *dst, const void *src, size_t bytes) {
    NEED_BE("lf_backend_copy");
    if (!bytes) return LF_OK;
    NEED_SLOT(copy, "copy");
    be->ops->copy(be, dst, src, bytes);
    return LF_OK;
}

lf_status lf_backend_zero(lf_backend *be, float *x, size_t n) {
    NEED_BE("lf_backend_zero");
    if (!n) return LF_OK;
    NEED_SLOT(zero, "zero op");
    be->ops->zero(be, x, n);
    return LF_OK;
}

lf_status lf_backend_scale(lf_backend *be, float *x, size_t n, float s) {
    NEED_BE("lf_backend_scale");
    if (!n) return LF_OK;
    NEED_SLOT(scale, "scale op");
    be->ops->scale(be, x, n, s);
    return LF_OK;
}

lf_status lf_backend_add(lf_backend *be, float *y, const float *x, size_t n) {
    NEED_BE("lf_backend_add");
    if (!n) return LF_OK;
    NEED_SLOT(add_inplace, "add op");
    be->ops->add_inplace(be, y, x, n);
    return LF_OK;
}

lf_status lf_backend_sum_squares(lf_backend *be, const float *x, size_t n, double *out) {
    *out = 0;
    NEED_BE("lf_backend_sum_squares");
    if (!n) return LF_OK;
    NEED_SLOT(sum_squares, "sum of squares");
    *out = be->ops->sum_squares(be, x, n);
    return LF_OK;
}

lf_status lf_backend_adamw(lf_backend *be, float *params, const float *grads, float *m, float *v, size_t n, float lr,
                           float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t) {
    NEED_BE("lf_backend_adamw");
    if (!n) return LF_OK;
    NEED_SLOT(adamw_update, "AdamW");
    be->ops->adamw_update(be, params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale, t);
    return LF_OK;
}

lf_status lf_backend_fp16_round(lf_backend *be, float *x, size_t n, int *nonfinite) {
    *nonfinite = 0;
    NEED_BE("lf_backend_fp16_round");
    if (!n) return LF_OK;
    NEED_SLOT(fp16_round, "fp16 rounding");
    *nonfinite = be->ops->fp16_round(be, x, n);
    return LF_OK;
}

lf_status lf_backend_grad_to_bf16(lf_backend *be, uint16_t *out, const float *inp, size_t n) {
    NEED_BE("lf_backend_grad_to_bf16");
    NEED_SLOT(grad_to_bf16, "bf16 gradient conversion");
    if (n) be->ops->grad_to_bf16(be, out, inp, n);
    return LF_OK;
}

lf_status lf_backend_grad_from_bf16(lf_backend *be, float *out, const uint16_t *inp, size_t n) {
    NEED_BE("lf_backend_grad_from_bf16");
    NEED_SLOT(grad_from_bf16, "bf16 gradient conversion");
    if (n) be->ops->grad_from_bf16(be, out, inp, n);
    return LF_OK;
}

void lf_backend_params_changed(lf_backend *be) {
    if (be && be->ops->params_changed) be->ops->params_changed(be);
}

int lf_backend_can_pin(const lf_backend *be) { return be && be->ops->host_alloc && be->ops->host_free; }

void *lf_backend_host_alloc(lf_backend *be, size_t bytes) {
    if (!lf_backend_can_pin(be)) {
        lf_fail(LF_ERR_UNSUPPORTED, "backend '%s' has no pinned host memory", lf_backend_name(be));
        return NULL;
    }
    return be->ops->host_alloc(be, bytes);
}

void lf_backend_host_free(lf_backend *be, void *p) {
    if (p && lf_backend_can_pin(be)) be->ops->host_free(be, p);
}

lf_status lf_backend_native_stream(lf_backend *be, void **stream) {
    *stream = NULL;
    NEED_BE("lf_backend_native_stream");
    NEED_SLOT(native_stream, "device stream");
    *stream = be->ops->native_stream(be);
    return LF_OK;
}
#undef NEED_BE
#undef NEED_SLOT
/* ================================================================ end of buffers and ops */
