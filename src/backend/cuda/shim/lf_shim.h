/*
 * The CUDA-on-CPU shim's own controls (C): what a test sets and reads that
 * a GPU has no API for. Everything here is lf_shim_-prefixed; the CUDA
 * names live in cuda_runtime_shim.h, cublasLt_shim.h and cuda_device_shim.h.
 *
 * The schedule. Every CUDA thread runs as a fiber; a fiber runs until it
 * reaches a scheduling point (__syncthreads, __syncwarp, a shuffle or vote)
 * or ends. The blocks of a grid run one after another, in an order the
 * schedule picks; inside a block the fibers run in rounds: every fiber
 * runnable at the start of a round runs once, in the round's order, to its
 * next scheduling point. So the interleaving between scheduling points is
 * fixed by (kind, seed) and reproducible, but not the program order that
 * hides a missing __syncthreads: with SHUFFLE (the default) every round and
 * the block order are a fresh permutation drawn from the seed, block and
 * round; FORWARD runs thread 0 first, REVERSE the last thread first. Tests
 * that want two schedules set them here; LF_SHIM_SCHEDULE=forward|reverse|
 * shuffle[:SEED] sets the starting value (read once, at the first call into
 * the shim; a bad value makes every call fail with cudaErrorInitialization-
 * Error and a message naming it).
 *
 * The poison. At every block's start all static __shared__ storage and the
 * dynamic shared buffer are filled with the poison byte, and so is every
 * new cudaMalloc allocation: 0xff by default, which reads as a NaN in
 * float, bf16 and fp16 and as -1 in a signed integer, so a read before the
 * write shows in the result.
 *
 * Thread safety: the setters take effect at the next launch or allocation;
 * call them between launches (they are not meant for use during one).
 */
#ifndef LF_SHIM_H
#define LF_SHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum lf_shim_schedule_kind {
    LF_SHIM_SCHEDULE_SHUFFLE = 0, /* seeded permutations (default) */
    LF_SHIM_SCHEDULE_FORWARD = 1, /* ascending thread and block order */
    LF_SHIM_SCHEDULE_REVERSE = 2, /* descending thread and block order */
} lf_shim_schedule_kind;

/* The default seed of SHUFFLE. */
#define LF_SHIM_DEFAULT_SEED 0x5eedULL

void lf_shim_set_schedule(lf_shim_schedule_kind kind, uint64_t seed);
void lf_shim_get_schedule(lf_shim_schedule_kind *kind, uint64_t *seed);

/* The byte new device memory and shared memory are filled with. */
void lf_shim_set_poison(unsigned char byte);

/* The fake device's memory (what cudaMemGetInfo reports and cudaMalloc may
 * hand out in all); default 8 GiB; LF_SHIM_DEVICE_MEMORY=<bytes> sets the
 * starting value. A total below what is allocated now makes the next
 * cudaMalloc fail, nothing else. */
void lf_shim_set_device_memory(size_t bytes);

/* Fault injection: let `after` more cudaMalloc calls through, then fail the
 * next one with cudaErrorMemoryAllocation (once; 0 = the next call fails;
 * a negative value disarms it). */
void lf_shim_fail_malloc(long after);

/* The detailed message of the calling thread's last failed launch or of
 * the sticky error (the rule a kernel broke, naming the kernel, block,
 * thread and source line); "" when there is none. Valid until the next
 * launch or cudaDeviceReset. */
const char *lf_shim_last_error_detail(void);

/* 1 when [p, p + bytes) lies inside one live cudaMalloc allocation (what
 * the copies check), else 0: for libraries layered on the shim that take
 * device pointers (the NCCL shim, src/comm/nccl/shim), so host memory
 * passed where a GPU needs device memory fails here as it would there. */
int lf_shim_device_range(const void *p, size_t bytes);
/* Fiber switches made since the process started (a measure of what a
 * kernel cost the scheduler; a switch is one jump between a fiber and the
 * scheduler). */
uint64_t lf_shim_fiber_switches(void);

/* Nanoseconds per switch of a ping-pong between two fibers, measured on
 * `iterations` round trips with the shim's switch (_setjmp/_longjmp) and,
 * for comparison, with glibc's swapcontext (which makes a sigprocmask
 * system call per switch; not measured under AddressSanitizer, whose
 * swapcontext interceptor warns: 0 there). Returns 0 on success, -1 if a
 * stack could not be allocated. */
int lf_shim_measure_switch(long iterations, double *ns_shim, double *ns_swapcontext);

#ifdef __cplusplus
}
#endif

#endif
