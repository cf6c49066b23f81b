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

#include "backend/backend_impl.h"
#include "cuda_api.h"

typedef struct lf_cuda_ctx {
    int device;                 /* the CUDA device of this instance */
    cudaStream_t stream;        /* every op's stream */
    cublasLtHandle_t lt;        /* cuBLASLt handle (matmuls) */
    void *workspace;            /* cuBLASLt workspace (device memory) */
    size_t workspace_bytes;
    _Atomic size_t live_bytes;  /* device bytes allocated through the instance */
    char device_name[256];
    char label[288];            /* "NAME (device N)": lf_backend_device_name */
    void *reduce_buf;           /* cuda_ops_pointwise.c: a small device buffer (LF_CUDA_REDUCE_BYTES) for the ops
                                   that return a host value (loss_sum, sum_squares, fp16_round); allocated at
                                   first use, freed by close; outside the allocation table (not plan memory) */
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

/* The "cuda" table (fp32 activations, fp32 matmuls, TF32 off). */
const lf_backend_ops *lf__backend_cuda(void);

#endif
