/*
 * The "cuda" backend instance: open/close/sync, device memory with its
 * accounting, host<->device copies, and the ops tables, assembled once from
 * the op families' installers (cuda_internal.h): "cuda" (fp32) and
 * "cuda-bf16" (bf16 matmul operands and activation storage, the same
 * instance machinery; cuda_bf16.c). Built into lf_backend_cuda
 * (the real runtime) and lf_backend_cuda_shim (the CUDA-on-CPU shim, what
 * CI runs).
 *
 * Device selection: the instance uses the device lf_backend_cuda_set_device
 * chose (default: the one LLMFORGE_CUDA_DEVICE names, else 0).
 *
 * Invariants:
 *  - Memory comes from cudaMalloc only; each live block's size is kept in a
 *    host-side table (device memory has no header the host could read), so
 *    `allocated` answers without touching the device.
 *  - Copies run on the instance's stream; to_host waits for it (the data it
 *    returns is final), to_device does not need to (the source is copied
 *    before cudaMemcpyAsync returns for pageable host memory).
 *  - A CUDA error is recorded (lf__cuda_check) and the instance stays failed,
 *    as its CUDA context would.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmforge/backend.h"
#include "llmforge/backend_cuda.h"
#include "cuda_internal.h"

#define LF_CUDA_WORKSPACE_BYTES ((size_t)32 << 20) /* cuBLASLt's recommended 32 MiB on Hopper */

/* ---------------------------------------------------------------- errors */

int lf__cuda_check(lf_backend *be, cudaError_t err, const char *op, const char *call) {
    if (err == cudaSuccess) return 0;
    (void)cudaGetLastError(); /* clear the thread's last error (a sticky one stays in the context) */
    const lf_status code = err == cudaErrorMemoryAllocation ? LF_ERR_NOMEM : LF_ERR_DEVICE;
    lf__backend_fail(be, code, "%s: %s: %s (%s)", op, call, cudaGetErrorName(err), cudaGetErrorString(err));
    return 1;
}

int lf__cuda_check_lt(lf_backend *be, cublasStatus_t st, const char *op, const char *call) {
    if (st == CUBLAS_STATUS_SUCCESS) return 0;
    const lf_status code = st == CUBLAS_STATUS_ALLOC_FAILED    ? LF_ERR_NOMEM
                           : st == CUBLAS_STATUS_NOT_SUPPORTED ? LF_ERR_UNSUPPORTED
                                                               : LF_ERR_DEVICE;
    lf__backend_fail(be, code, "%s: %s: cuBLASLt status %d", op, call, (int)st);
    return 1;
}

/* ---------------------------------------------------------------- device choice */

static _Atomic int g_device = -1; /* -1: LLMFORGE_CUDA_DEVICE, else 0 */

lf_status lf_backend_cuda_set_device(int device) {
    if (device < 0) return lf_fail(LF_ERR_RANGE, "CUDA device %d: must be >= 0", device);
    atomic_store(&g_device, device);
    return LF_OK;
}

static lf_status chosen_device(int *out) {
    int d = atomic_load(&g_device);
    if (d < 0) {
        const char *env = getenv("LLMFORGE_CUDA_DEVICE");
        d = 0;
        if (env && *env) {
            char *end = NULL;
            long v = strtol(env, &end, 10);
            if (*end || v < 0 || v > 1024)
                return lf_fail(LF_ERR_CONFIG, "LLMFORGE_CUDA_DEVICE='%s': not a device number", env);
            d = (int)v;
        }
    }
    *out = d;
    return LF_OK;
}

/* ---------------------------------------------------------------- allocation table */

typedef struct alloc_entry {
    void *p;
    size_t bytes;
} alloc_entry;

typedef struct alloc_table {
    pthread_mutex_t mu;
    alloc_entry *e;
    size_t n, cap;
} alloc_table;

/* one table per instance would need the instance in free(); the table is
 * keyed by pointer and device pointers are unique process-wide */
static alloc_table g_allocs = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0};

static int table_add(void *p, size_t bytes) {
    pthread_mutex_lock(&g_allocs.mu);
    if (g_allocs.n == g_allocs.cap) {
        size_t cap = g_allocs.cap ? 2 * g_allocs.cap : 64;
        alloc_entry *e = realloc(g_allocs.e, cap * sizeof *e);
        if (!e) {
            pthread_mutex_unlock(&g_allocs.mu);
            return -1;
        }
        g_allocs.e = e;
        g_allocs.cap = cap;
    }
    g_allocs.e[g_allocs.n++] = (alloc_entry){p, bytes};
    pthread_mutex_unlock(&g_allocs.mu);
    return 0;
}

/* bytes of p (0 when unknown); remove: also drop it */
static size_t table_find(const void *p, int remove) {
    size_t bytes = 0;
    pthread_mutex_lock(&g_allocs.mu);
    for (size_t i = g_allocs.n; i-- > 0;) {
        if (g_allocs.e[i].p == p) {
            bytes = g_allocs.e[i].bytes;
            if (remove) g_allocs.e[i] = g_allocs.e[--g_allocs.n];
            break;
        }
    }
    pthread_mutex_unlock(&g_allocs.mu);
    return bytes;
}

/* ---------------------------------------------------------------- lifecycle */

static void cuda_close(lf_backend *be) {
    lf_cuda_ctx *c = lf__cuda_ctx(be);
    if (!c) return;
    if (c->stream) (void)cudaStreamSynchronize(c->stream);
    if (c->workspace) {
        (void)table_find(c->workspace, 1);
        (void)cudaFree(c->workspace);
    }
    if (c->reduce_buf) (void)cudaFree(c->reduce_buf);
    lf__cuda_bf16_release(c);
    if (c->lt) (void)cublasLtDestroy(c->lt);
    if (c->stream) (void)cudaStreamDestroy(c->stream);
    (void)cudaGetLastError();
    free(c);
    be->ctx = NULL;
}

static lf_status cuda_open(lf_backend *be) {
    int dev = 0, count = 0;
    lf_status st = chosen_device(&dev);
    if (st != LF_OK) return st;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        (void)cudaGetLastError();
        return lf_fail(LF_ERR_DEVICE, "backend 'cuda': no CUDA device (cudaGetDeviceCount: %s)",
                       e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    }
    if (dev >= count)
        return lf_fail(LF_ERR_RANGE, "backend 'cuda': device %d does not exist (%d device%s: 0..%d)", dev, count,
                       count == 1 ? "" : "s", count - 1);
    lf_cuda_ctx *c = calloc(1, sizeof *c);
    if (!c) return lf_fail(LF_ERR_NOMEM, "backend 'cuda': no memory for the context");
    be->ctx = c;
    c->device = dev;
    struct cudaDeviceProp prop;
    const char *call = "cudaSetDevice";
    if ((e = cudaSetDevice(dev)) != cudaSuccess) goto fail;
    call = "cudaGetDeviceProperties";
    if ((e = cudaGetDeviceProperties(&prop, dev)) != cudaSuccess) goto fail;
    snprintf(c->device_name, sizeof c->device_name, "%s", prop.name);
    snprintf(c->label, sizeof c->label, "%.255s (device %d)", prop.name, dev);
    call = "cudaStreamCreateWithFlags";
    if ((e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess) goto fail;
    call = "cudaMalloc (cuBLASLt workspace)";
    if ((e = cudaMalloc(&c->workspace, LF_CUDA_WORKSPACE_BYTES)) != cudaSuccess) goto fail;
    c->workspace_bytes = LF_CUDA_WORKSPACE_BYTES;
    if (table_add(c->workspace, c->workspace_bytes)) {
        cuda_close(be);
        return lf_fail(LF_ERR_NOMEM, "backend 'cuda': no memory for the allocation table");
    }
    cublasStatus_t ls = cublasLtCreate(&c->lt);
    if (ls != CUBLAS_STATUS_SUCCESS) {
        c->lt = NULL;
        cuda_close(be);
        return lf_fail(LF_ERR_DEVICE, "backend 'cuda': cublasLtCreate: status %d", (int)ls);
    }
    return LF_OK;
fail:
    (void)cudaGetLastError();
    st = lf_fail(e == cudaErrorMemoryAllocation ? LF_ERR_NOMEM : LF_ERR_DEVICE,
                 "backend 'cuda' (device %d): %s: %s (%s)", dev, call, cudaGetErrorName(e), cudaGetErrorString(e));
    cuda_close(be);
    return st;
}

static void cuda_sync(lf_backend *be) {
    lf_cuda_ctx *c = lf__cuda_ctx(be);
    if (c && c->stream) lf__cuda_check(be, cudaStreamSynchronize(c->stream), "sync", "cudaStreamSynchronize");
}

/* ---------------------------------------------------------------- memory */

static void *cuda_alloc(lf_backend *be, size_t bytes) {
    void *p = NULL;
    if (bytes == 0) bytes = 1;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        /* an allocation failure is the caller's to report (NULL), not a
         * sticky failure of the instance: the planner turns it into advice */
        (void)cudaGetLastError();
        return NULL;
    }
    if (table_add(p, bytes)) {
        (void)cudaFree(p);
        return NULL;
    }
    atomic_fetch_add(&lf__cuda_ctx(be)->live_bytes, bytes);
    return p;
}

static void cuda_free(lf_backend *be, void *p) {
    if (!p) return;
    const size_t bytes = table_find(p, 1);
    atomic_fetch_sub(&lf__cuda_ctx(be)->live_bytes, bytes);
    /* cudaFree synchronises the device; pending ops on p have finished */
    lf__cuda_check(be, cudaFree(p), "free", "cudaFree");
}

/* Pinned host memory (cudaMallocHost): an allocation failure is NULL, not a
 * sticky failure, as for cuda_alloc. */
static void *cuda_host_alloc(lf_backend *be, size_t bytes) {
    (void)be;
    void *p = NULL;
    if (cudaMallocHost(&p, bytes ? bytes : 1) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return p;
}

static void cuda_host_free(lf_backend *be, void *p) {
    if (p) lf__cuda_check(be, cudaFreeHost(p), "host_free", "cudaFreeHost");
}

static size_t cuda_allocated(lf_backend *be, const void *p) {
    (void)be;
    return p ? table_find(p, 0) : 0;
}

static void cuda_to_device(lf_backend *be, void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    lf__cuda_check(be, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, lf__cuda_stream(be)), "to_device",
                   "cudaMemcpyAsync");
}

static void cuda_to_host(lf_backend *be, void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    if (lf__cuda_check(be, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, lf__cuda_stream(be)), "to_host",
                       "cudaMemcpyAsync"))
        return;
    lf__cuda_check(be, cudaStreamSynchronize(lf__cuda_stream(be)), "to_host", "cudaStreamSynchronize");
}

static void cuda_copy(lf_backend *be, void *dst, const void *src, size_t bytes) {
    if (!bytes || dst == src) return;
    lf__cuda_check(be, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, lf__cuda_stream(be)), "copy",
                   "cudaMemcpyAsync");
}

static void cuda_zero(lf_backend *be, float *x, size_t n) {
    if (!n) return;
    lf__cuda_check(be, cudaMemsetAsync(x, 0, n * sizeof(float), lf__cuda_stream(be)), "zero", "cudaMemsetAsync");
}

static void cuda_params_changed(lf_backend *be) { (void)be; } /* fp32: nothing derived from the weights */

/* ---------------------------------------------------------------- the device */

static lf_status cuda_mem_info(lf_backend *be, size_t *free_bytes, size_t *total_bytes) {
    lf_cuda_ctx *c = lf__cuda_ctx(be);
    cudaError_t e = cudaSetDevice(c->device);
    if (e == cudaSuccess) e = cudaMemGetInfo(free_bytes, total_bytes);
    if (e == cudaSuccess) return LF_OK;
    (void)cudaGetLastError();
    *free_bytes = *total_bytes = 0;
    return lf_fail(LF_ERR_DEVICE, "backend 'cuda' (device %d): cudaMemGetInfo: %s (%s)", c->device, cudaGetErrorName(e),
                   cudaGetErrorString(e));
}

static const char *cuda_device_name(lf_backend *be) {
    lf_cuda_ctx *c = lf__cuda_ctx(be);
    return c ? c->label : "";
}

static int cuda_devices(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}
static void *cuda_native_stream(lf_backend *be) { return (void *)lf__cuda_stream(be); }

/* ---------------------------------------------------------------- the table */

static lf_backend_ops g_cuda_ops;
static pthread_once_t g_cuda_once = PTHREAD_ONCE_INIT;

static void cuda_table_init(void) {
    lf_backend_ops *o = &g_cuda_ops;
    o->name = "cuda";
    o->open = cuda_open;
    o->close = cuda_close;
    o->sync = cuda_sync;
    o->act_dtypes = LF_DT_BIT(LF_DT_F32);
    o->host_memory = 0;
    o->alloc = cuda_alloc;
    o->free = cuda_free;
    o->host_alloc = cuda_host_alloc;
    o->host_free = cuda_host_free;
    o->allocated = cuda_allocated;
    o->to_device = cuda_to_device;
    o->to_host = cuda_to_host;
    o->copy = cuda_copy;
    o->zero = cuda_zero;
    o->params_changed = cuda_params_changed;
    o->mem_info = cuda_mem_info;
    o->device_name = cuda_device_name;
    o->devices = cuda_devices;
    o->native_stream = cuda_native_stream;
    lf__cuda_install_dense(o);
    lf__cuda_install_pointwise(o);
    lf__cuda_install_attention(o);
}

const lf_backend_ops *lf__backend_cuda(void) {
    pthread_once(&g_cuda_once, cuda_table_init);
    return &g_cuda_ops;
}

/* "cuda-bf16": the "cuda" table (the same instance machinery: open, close,
 * memory, streams, every kernel) with bf16 matmul operands and bf16
 * activation storage (cuda_bf16.c says what differs and why). */
static lf_backend_ops g_cuda_bf16_ops;
static pthread_once_t g_cuda_bf16_once = PTHREAD_ONCE_INIT;

static void cuda_bf16_table_init(void) {
    g_cuda_bf16_ops = *lf__backend_cuda();
    g_cuda_bf16_ops.name = "cuda-bf16";
    g_cuda_bf16_ops.act_dtypes = LF_DT_BIT(LF_DT_F32) | LF_DT_BIT(LF_DT_BF16);
    lf__cuda_install_bf16(&g_cuda_bf16_ops);
}

const lf_backend_ops *lf__backend_cuda_bf16(void) {
    pthread_once(&g_cuda_bf16_once, cuda_bf16_table_init);
    return &g_cuda_bf16_ops;
}

lf_status lf_backend_cuda_register(void) {
    const lf_status st = lf__backend_register(lf__backend_cuda());
    return st != LF_OK ? st : lf__backend_register(lf__backend_cuda_bf16());
}
