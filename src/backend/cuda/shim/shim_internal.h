/*
 * What the shim's three parts share (private): the runtime's error state
 * and memory registry (shim_runtime.cpp), used by the scheduler
 * (shim_fiber.cpp) and the cuBLASLt mapping (shim_cublaslt.cpp).
 *
 * Invariants: every function here may be called from any thread; the
 * runtime's state is behind one mutex inside shim_runtime.cpp. Nothing
 * here prints or exits.
 */
#ifndef LF_SHIM_INTERNAL_H
#define LF_SHIM_INTERNAL_H

#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include "cuda_runtime_shim.h"
#include "lf_shim.h"

namespace lf_shim_rt {

/* Fake device limits (an sm_90-shaped device). */
constexpr int kMaxThreadsPerBlock = 1024;
constexpr unsigned kMaxBlockDim[3] = {1024, 1024, 64};
constexpr unsigned long long kMaxGridDim[3] = {2147483647ull, 65535ull, 65535ull};
constexpr size_t kSharedPerBlock = 48 * 1024;   /* without the opt-in attribute */
constexpr size_t kSharedPerBlockOptin = 232448; /* 227 KiB, H100/H200 */
constexpr size_t kSharedPerSM = 233472;
constexpr int kMultiProcessors = 4;

/* Reads the environment once (LF_SHIM_SCHEDULE, LF_SHIM_DEVICE_MEMORY,
 * LF_SHIM_STACK_KB). Returns cudaSuccess, the sticky error, or
 * cudaErrorInitializationError for a bad variable (detail says which);
 * every runtime entry point starts with it. Does not touch the last error. */
cudaError_t enter(void);

/* Record `e` as the calling thread's last error (when not cudaSuccess) and
 * return it. detail: the message lf_shim_last_error_detail and
 * cudaGetErrorString give for it (NULL: none). */
cudaError_t fail(cudaError_t e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
cudaError_t ret(cudaError_t e);

/* Make `e` the sticky error (the device is "faulted" until
 * cudaDeviceReset), with its detail, and record it as the last error. */
cudaError_t fail_sticky(cudaError_t e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* 1 if [p, p+bytes) lies inside one live cudaMalloc allocation (bytes 0:
 * p inside or at the end of one). */
int device_range(const void *p, size_t bytes);

/* 1 if s is 0, cudaStreamLegacy, cudaStreamPerThread or a live stream. */
int stream_valid(cudaStream_t s);

/* The kernel's dynamic shared memory limit (cudaFuncSetAttribute). */
size_t max_dynamic_shared(const void *kernel_key);

/* Schedule and poison as set (lf_shim.h) and the fiber stack size. */
void schedule(lf_shim_schedule_kind *kind, uint64_t *seed);
unsigned char poison_byte(void);
size_t fiber_stack_bytes(void);

} // namespace lf_shim_rt

#endif
