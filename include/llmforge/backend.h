/*
 * Backends: the compute behind the model. A backend is an operations table
 * (src/backend/backend_impl.h) and instances of it; this public header
 * opens, selects and synchronises them. The CPU backend is the reference every other backend is tested
 * against.
 */
#ifndef LLMFORGE_BACKEND_H
#define LLMFORGE_BACKEND_H

#include "llmforge/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lf_backend_ops lf_backend_ops; /* a kind of backend (private) */
typedef struct lf_backend lf_backend;         /* an instance of one, with its own context */

/* Compiled in:
 *   "cpu"        fp32 throughout (OpenMP, oneDNN/OpenBLAS products);
 *   "cpu-bf16"   the same, except that matrix products take bf16 operands
 *                and accumulate in fp32 (oneDNN on CPUs with AVX512-BF16 or
 *                AMX, else a fallback; see lf_backend_cpu_bf16_kernel).
 *                Weights, gradients, optimizer state, norms, softmax,
 *                attention and the loss stay fp32. Training config:
 *                bf16.enabled;
 *   "cpu-fenced" a test backend: cpu's ops on memory the host cannot touch
 *                outside a backend call (src/backend/cpu/cpu_fenced.c).
 * An instance carries its backend's context (a device's stream, handles and
 * workspace; cpu-fenced's regions) and a sticky status: an op that fails
 * records the failure there, and lf_backend_sync reports it. */

/* A new instance of the backend registered under `name` (NULL: "cpu"):
 * LF_OK, or LF_ERR_NOT_FOUND naming the backends compiled in, or the
 * backend's own error. Close it with lf_backend_close after every model on
 * it is freed. */
lf_status lf_backend_open(const char *name, lf_backend **out);
/* Frees an instance from lf_backend_open (and its context). NULL and the
 * shared instances of lf_backend_get are left alone. */
void lf_backend_close(lf_backend *be);
/* The process-wide shared instance of `name` (NULL: "cpu"; also a
 * registered backend such as "cuda"), made on first use and never closed;
 * NULL (message recorded, LF_ERR_NOT_FOUND) for an unknown name, NULL with
 * the open's message (e.g. "no CUDA device") when it could not be opened.
 * Convenient where one instance per process is enough; a failure on it is
 * seen by every user of it. */
lf_backend *lf_backend_get(const char *name);
/* The name of the fp32 backend the trainer (training config key `backend`:
 * "auto", its default), bench, eval, sample and serve use, first found of:
 * the name lf_backend_set_default chose; the environment variable
 * LLMFORGE_BACKEND (e.g. "cpu-fenced"; "auto" as below); "cuda" when a CUDA
 * backend is registered (lf_backend_cuda_register) and cudaGetDeviceCount
 * sees a device (asked once per process); else "cpu". An unknown name in
 * LLMFORGE_BACKEND is returned as is (opening it fails, naming it). */
const char *lf_backend_default_name(void);
/* The backend a run selects with `name` (the config key `backend`): NULL,
 * "" or "auto" is lf_backend_default_name(); any other name must be a
 * compiled-in or registered backend. *out: the table's name (static).
 * LF_OK, or LF_ERR_NOT_FOUND naming the backends there are ("cuda" in a
 * build without it: "this build has no CUDA backend ..."). Opens nothing. */
lf_status lf_backend_select(const char *name, const char **out);
/* The process-wide choice lf_backend_default_name returns first (the CLI's
 * --backend option): "auto" is resolved now, an unknown name is refused
 * (LF_ERR_NOT_FOUND, as lf_backend_select); NULL or "" clears it. */
lf_status lf_backend_set_default(const char *name);
/* The backend that runs `base` (an fp32 backend's name, e.g.
 * lf_backend_default_name()) in bf16 mixed precision (bf16 != 0: the
 * training config's bf16.enabled): "cpu-bf16" for "cpu", "cuda-bf16" for
 * "cuda"; `base` itself when bf16 is 0 or `base` has no bf16 variant (the
 * open then runs fp32, e.g. "cpu-fenced"; base NULL is "cpu"). A static
 * string or `base`; never NULL. Thread-safe. */
const char *lf_backend_precision_name(const char *base, int bf16);
/* lf_backend_get(lf_backend_default_name()). */
lf_backend *lf_backend_default(void);
const char *lf_backend_name(const lf_backend *be);
/* 1 when the backend's memory is the host's (callers may read it in place). */
int lf_backend_host_memory(const lf_backend *be);
/* The device memory behind an instance, now: its free and total bytes
 * ("cuda": cudaMemGetInfo, the instance's own context and 32 MiB cuBLASLt
 * workspace already taken). LF_OK; LF_ERR_UNSUPPORTED (message recorded)
 * for a backend whose memory is the host's; the device's error otherwise. */
lf_status lf_backend_mem_info(lf_backend *be, size_t *free_bytes, size_t *total_bytes);
/* "NVIDIA H200 (device 0)" for a device backend, "" otherwise (static or
 * the instance's; valid while it is open). */
const char *lf_backend_device_name(const lf_backend *be);

/* Waits until every op queued on the instance has finished, then returns
 * its sticky status: LF_OK, or the first failure of an op since the
 * instance was opened (message recorded: "backend 'NAME': ..."). Once
 * failed, an instance stays failed. */
lf_status lf_backend_sync(lf_backend *be);
/* The sticky status without waiting (no message recorded). */
lf_status lf_backend_status(const lf_backend *be);

/* ================================================================ buffers and ops for the layers above
 * What the trainer, the memory planner and checkpoint loading need of an
 * instance, without the private table (src/backend/backend_impl.h): thin
 * wrappers over its slots, which keep the slots' semantics and bits.
 *
 * Contract (every function below):
 *  - be is an open instance; "backend memory" is memory from
 *    lf_backend_alloc on the same instance (or a model's buffers on it),
 *    "host" memory is the caller's. Nothing here takes ownership of a
 *    pointer except lf_backend_free / lf_backend_host_free, which release
 *    what the matching alloc returned.
 *  - An op (copies, zero, scale, add, AdamW, conversions) is queued on the
 *    instance and may still run on return (a device stream); a failure
 *    while it runs becomes the instance's sticky status, which
 *    lf_backend_sync waits for and reports. The status these return is
 *    about the call: LF_OK (queued); LF_ERR_UNSUPPORTED when the backend
 *    has no such op (a NULL slot; message recorded, nothing done);
 *    LF_ERR_INVALID_ARG when be is NULL. n = 0 (or bytes = 0) is LF_OK
 *    and does nothing, whether or not the backend has the op, except for
 *    the bf16 conversions (there n = 0 asks whether the backend has them).
 *  - Not thread-safe on one instance: one thread queues ops at a time (a
 *    different instance may be used concurrently).
 * Every slot these wrap is documented in backend_impl.h. */

/* The instance's table, opaque outside src/backend (what an activation
 * plan is computed for: lf_mem_plan.ops); NULL for NULL. */
const lf_backend_ops *lf_backend_table(const lf_backend *be);
/* 1 when backend memory lives on a device that reports its memory
 * (lf_backend_mem_info answers: cuda), 0 for host memory and for memory
 * that is neither (cpu-fenced) or a NULL be. */
int lf_backend_is_device(const lf_backend *be);
/* How many model replicas a batch of B rows is split into (the CPU
 * backend: one per thread); 1 for a backend that does not split, or B < 1. */
int lf_backend_replicas(lf_backend *be, int B);

/* bytes of backend memory, 64-byte aligned, uninitialised; NULL on failure
 * (LF_ERR_NOMEM recorded) or for NULL be. Release with lf_backend_free. */
void *lf_backend_alloc(lf_backend *be, size_t bytes);
/* Releases lf_backend_alloc's p; NULL p (or be) is a no-op. */
void lf_backend_free(lf_backend *be, void *p);
/* Bytes the backend reserved for p (lf_backend_alloc's; 0 for NULL): what
 * memory accounting compares with the plan. */
size_t lf_backend_allocated(lf_backend *be, const void *p);
/* Copies of bytes: host_dst (host) := src (backend memory); dst (backend)
 * := host_src (host); dst := src (both backend memory, disjoint or equal). */
lf_status lf_backend_to_host(lf_backend *be, void *host_dst, const void *src, size_t bytes);
lf_status lf_backend_to_device(lf_backend *be, void *dst, const void *host_src, size_t bytes);
lf_status lf_backend_copy(lf_backend *be, void *dst, const void *src, size_t bytes);
/* x (n floats, backend memory) := 0; x *= s; y += x (element-wise). */
lf_status lf_backend_zero(lf_backend *be, float *x, size_t n);
lf_status lf_backend_scale(lf_backend *be, float *x, size_t n, float s);
lf_status lf_backend_add(lf_backend *be, float *y, const float *x, size_t n);
/* *out (host) := the sum of squares of x (n floats, backend memory),
 * accumulated in double; waits for the result. 0 on any failure. */
lf_status lf_backend_sum_squares(lf_backend *be, const float *x, size_t n, double *out);
/* AdamW as torch.optim.AdamW on n parameters (all backend memory): decoupled
 * weight decay first, grads multiplied by grad_scale (clipping folded in),
 * step count t >= 1. */
lf_status lf_backend_adamw(lf_backend *be, float *params, const float *grads, float *m, float *v, size_t n, float lr,
                           float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t);
/* fp16 training: x (n floats, backend memory) rounded to fp16 in place (ties
 * to even, out of range -> inf); *nonfinite (host) := 1 when any result is
 * not finite, else 0. Waits for the answer. */
lf_status lf_backend_fp16_round(lf_backend *be, float *x, size_t n, int *nonfinite);
/* Gradients on the wire in bf16: out (n bf16 bits) := inp rounded (ties to
 * even), out and inp disjoint; and back, exact. n = 0 converts nothing and
 * answers whether the backend can (LF_OK) or not (LF_ERR_UNSUPPORTED). */
lf_status lf_backend_grad_to_bf16(lf_backend *be, uint16_t *out, const float *inp, size_t n);
lf_status lf_backend_grad_from_bf16(lf_backend *be, float *out, const uint16_t *inp, size_t n);
/* Parameters in backend memory were written by a route other than
 * lf_backend_to_device or lf_backend_adamw (a collective, a host write on a
 * host-memory backend): drop what the backend derived from them (cpu-bf16's
 * bf16 weight copies). A no-op where the backend derives nothing. Never
 * while ops run. */
void lf_backend_params_changed(lf_backend *be);

/* 1 when the backend offers pinned (page-locked) host memory (cuda), whose
 * copies to and from the device run at full bus speed; 0 otherwise. */
int lf_backend_can_pin(const lf_backend *be);
/* bytes of pinned host memory (host-readable); NULL on failure or where
 * lf_backend_can_pin is 0 (LF_ERR_NOMEM / LF_ERR_UNSUPPORTED recorded).
 * lf_backend_host_free releases it (NULL: a no-op). */
void *lf_backend_host_alloc(lf_backend *be, size_t bytes);
void lf_backend_host_free(lf_backend *be, void *p);
/* *stream := the device stream every op of the instance is queued on (a
 * cudaStream_t as void *), for a communicator that moves backend memory
 * itself (lf_comm_set_stream). LF_ERR_UNSUPPORTED (*stream NULL) for a
 * backend with synchronous ops on host memory. */
lf_status lf_backend_native_stream(lf_backend *be, void **stream);
/* ================================================================ end of buffers and ops */

/* Batch-invariant products on the instance (on = 1; 0 turns it off): each
 * row of a matrix product's output then has the same bits whether the row
 * is computed alone or among any number of others, so a forward over a
 * batch of sequences gives each one exactly what it gets alone (what
 * `llmforge serve` needs for per-request determinism under continuous
 * batching, and what vLLM calls batch-invariant mode). On "cpu" the
 * products then go through llmforge's own kernels at every row count
 * (src/backend/cpu/cpu_gemv.c) instead of oneDNN's sgemm, which picks its
 * summation order from the row count. LF_OK, or LF_ERR_UNSUPPORTED (message
 * recorded) when the backend has no such mode ("cpu-bf16"). Set it before
 * the instance runs ops, from one thread. */
lf_status lf_backend_set_batch_invariant(lf_backend *be, int on);
int lf_backend_batch_invariant(const lf_backend *be);

#ifdef __cplusplus
}
#endif
#endif
