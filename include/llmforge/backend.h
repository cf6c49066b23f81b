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
