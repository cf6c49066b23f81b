/*
 * The CUDA backend's private interface between its host C files (the
 * backend_impl.h table, the context, error mapping) and its op families.
 *
 * Layout (src/backend/cuda/README.md):
 *   cuda_backend.c        the instance: open/close/sync, device memory and
 *                         its accounting, copies, the ops table (assembled
 *                         once from the families' installers below)
 *   cuda_ops_<family>.c   host glue of one op family: the table slots'
 *                         exact signatures, argument checks, the launch of
 *                         that family's kernels on the instance's stream,
 *                         errors recorded with lf__cuda_check
 *   cuda_bf16.c           cuda-bf16: the weights' bf16 copies, operand
 *                         scratch, the table's overrides of the memory ops
 *                         and AdamW
 *   cuda_<family>.cu      the kernels, behind C wrappers declared in
 *                         cuda_<family>.h (cudaError_t, a stream argument;
 *                         the .cu files never see backend_impl.h, whose C11
 *                         atomics C++ does not parse)
 * Every file is compiled twice: by nvcc/the host C compiler into
 * lf_backend_cuda, and against the CUDA-on-CPU shim into
 * lf_backend_cuda_shim (cmake/cuda.cmake).
 *
 * Invariants:
 *  - Every op runs on the instance's stream (lf__cuda_stream); ops never
 *    synchronise except those that return a host value (loss_sum,
 *    fp16_round, sum_squares) and to_host.
 *  - Every CUDA runtime / cuBLASLt failure becomes the instance's sticky
 *    status through lf__cuda_check / lf__cuda_check_lt, with the op, the
 *    call and CUDA's message; nothing aborts, nothing falls back silently.
 *  - Gradients are deterministic: fixed-order reductions, no float atomics.
 */
#ifndef LF_CUDA_INTERNAL_H
#define LF_CUDA_INTERNAL_H

#include <stdint.h>
#include "backend/backend_impl.h"
#include "cuda_api.h"

/* cuda-bf16 (cuda_bf16.c): the bf16 copy of one weight, keyed by the fp32
 * tensor's address and length; valid while the weight has not changed
 * since the copy was made. */
typedef struct lf_cuda_wcopy {
    const float *w; /* the fp32 weight (device) */
    size_t n;       /* its elements */
    uint16_t *data; /* the bf16 copy (device; cudaMalloc, outside the allocation table) */
    int valid;
} lf_cuda_wcopy;

typedef struct lf_cuda_ctx {
    int device;          /* the CUDA device of this instance */
    cudaStream_t stream; /* every op's stream */
    cublasLtHandle_t lt; /* cuBLASLt handle (matmuls) */
    void *workspace;     /* cuBLASLt workspace (device memory) */
    size_t workspace_bytes;
    _Atomic size_t live_bytes; /* device bytes allocated through the instance */
    char device_name[256];
    char label[288];  /* "NAME (device N)": lf_backend_device_name */
    void *reduce_buf; /* cuda_ops_pointwise.c: a small device buffer (LF_CUDA_REDUCE_BYTES) for the ops
                                   that return a host value (loss_sum, sum_squares, fp16_round); allocated at
                                   first use, freed by close; outside the allocation table (not plan memory) */
    /* cuda-bf16 only (cuda_bf16.c); empty on "cuda". Like reduce_buf, device memory outside the allocation
     * table: `plan` counts it as "bf16 weight copies" and "bf16 operand scratch", as for cpu-bf16. */
    lf_cuda_wcopy *wcopies; /* the weights' bf16 copies */
    int n_wcopies, cap_wcopies;
    uint16_t *opnd[2];  /* operand scratch: [0] a product's fp32 inp, [1] backward's dout, rounded */
    size_t opnd_cap[2]; /* elements of each */
} lf_cuda_ctx;

#define LF_CUDA_REDUCE_BYTES 4096

static inline lf_cuda_ctx *lf__cuda_ctx(lf_backend *be) { return (lf_cuda_ctx *)be->ctx; }
static inline cudaStream_t lf__cuda_stream(lf_backend *be) { return lf__cuda_ctx(be)->stream; }

/* Record err (when not cudaSuccess) on the instance as LF_ERR_DEVICE (an
 * out-of-memory error as LF_ERR_NOMEM) with "op: call: CUDA's name and
 * message"; returns 1 when it was a failure, else 0. Also clears the
 * thread's last CUDA error. */
int lf__cuda_check(lf_backend *be, cudaError_t err, const char *op, const char *call);
/* The same for a cuBLASLt status. */
int lf__cuda_check_lt(lf_backend *be, cublasStatus_t st, const char *op, const char *call);

/* The op families fill their slots of the table (called once, before the
 * table is first used). */
void lf__cuda_install_dense(lf_backend_ops *ops);     /* cuda_ops_dense.c: matmuls (cuBLASLt), copies, scale, convert */
void lf__cuda_install_pointwise(lf_backend_ops *ops); /* cuda_ops_pointwise.c: embedding, norms, GELU, SwiGLU, RoPE,
                                                         residual, dropout, loss, AdamW, reductions */
void lf__cuda_install_attention(lf_backend_ops *ops); /* cuda_ops_attention.c: attention fwd/bwd, KV cache */

void lf__cuda_install_dense_bf16(lf_backend_ops *ops); /* cuda_ops_dense.c: cuda-bf16's matmul pair */
/* cuda_bf16.c: what turns a copy of the "cuda" table into "cuda-bf16": the
 * matmul pair, AdamW renewing the weight copies, and the memory ops that
 * invalidate them. */
void lf__cuda_install_bf16(lf_backend_ops *ops);

/* AdamW (cuda_ops_pointwise.c) with the CPU's constants; shadow NULL, or
 * n bf16 values that receive the new parameters rounded (cuda-bf16). */
void lf__cuda_adamw(lf_backend *be, float *params, const float *grads, float *m, float *v, uint16_t *shadow, size_t n,
                    float lr, float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t);

/* cuda-bf16 (cuda_bf16.c). The bf16 copy of weight w[0..n) on the device,
 * converted now (on the stream) unless a valid one exists; NULL when it
 * cannot be had (failure recorded on be, naming op). */
const uint16_t *lf__cuda_bf16_weight(lf_backend *be, const char *op, const float *w, size_t n);
/* Operand scratch `slot` (0 or 1) of at least n bf16 elements; grows only
 * (a growth frees the old buffer, which synchronises the device). NULL:
 * failure recorded. */
uint16_t *lf__cuda_bf16_scratch(lf_backend *be, const char *op, int slot, size_t n);
/* Frees the copies and the scratch (close). */
void lf__cuda_bf16_release(lf_cuda_ctx *c);

/* The "cuda" table (fp32 activations, fp32 matmuls, TF32 off). */
const lf_backend_ops *lf__backend_cuda(void);
/* The "cuda-bf16" table: "cuda" with bf16 matmul operands (fp32
 * accumulation) and bf16 activation storage, as cpu-bf16 is to cpu. */
const lf_backend_ops *lf__backend_cuda_bf16(void);

#endif
