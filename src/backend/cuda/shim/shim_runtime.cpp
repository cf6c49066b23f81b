/*
 * The CUDA runtime API of the CUDA-on-CPU shim (declared in
 * cuda_runtime_shim.h, whose header comment is the contract): one fake
 * device on host memory, synchronous execution, CUDA's error model (a
 * per-thread last error, a sticky error after a kernel broke a rule, reset
 * by cudaDeviceReset), and the shim's own controls (lf_shim.h). Why ours:
 * the CUDA runtime needs a GPU driver; CI has neither.
 *
 * Invariants:
 *  - All state below is guarded by `mu`, except the per-thread last error
 *    and its detail (thread_local, as CUDA's last error is per thread).
 *  - `allocs` maps every live cudaMalloc pointer to its requested size;
 *    device_range() answers "does this range lie inside one allocation"
 *    for the copies, the memsets and the cuBLASLt mapping. `used` counts
 *    the 256-byte-rounded sizes against the fake device's total.
 *  - The environment (LF_SHIM_SCHEDULE, LF_SHIM_DEVICE_MEMORY,
 *    LF_SHIM_STACK_KB) is read once, at the first call; a bad value is an
 *    initialization error every later call returns, naming the variable.
 *  - Nothing prints or exits; every failure is a cudaError_t with a detail
 *    message (lf_shim_last_error_detail, cudaGetErrorString).
 *
 * Reference: CUDA Runtime API reference (error handling, memory, stream and
 * event management; the error strings are CUDA's own).
 */
#include <cerrno>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <time.h>
#include "shim_internal.h"

struct CUstream_st {
    unsigned flags;
};
struct CUevent_st {
    unsigned flags;
    bool recorded;
    double ms;
};

namespace {

struct alloc_info {
    size_t bytes;    /* requested */
    size_t reserved; /* rounded up to 256, what `used` counts */
};

std::mutex mu;
bool env_read = false;
cudaError_t init_error = cudaSuccess;
std::string init_detail;
cudaError_t sticky = cudaSuccess;
std::string sticky_detail;
std::map<uintptr_t, alloc_info> allocs;
std::set<void *> pinned;
size_t used = 0;
size_t total = (size_t)8 << 30;
long fail_malloc_in = -1; /* lf_shim_fail_malloc: cudaMallocs to let through before one fails; -1: none */
std::set<cudaStream_t> streams;
std::set<cudaEvent_t> events;
std::map<const void *, size_t> func_dyn_shared;
lf_shim_schedule_kind sched_kind = LF_SHIM_SCHEDULE_SHUFFLE;
uint64_t sched_seed = LF_SHIM_DEFAULT_SEED;
unsigned char poison = 0xff;
#if defined(__SANITIZE_ADDRESS__)
size_t stack_bytes = 256 * 1024; /* instrumented frames are larger */
#else
size_t stack_bytes = 64 * 1024;
#endif

thread_local cudaError_t tl_last = cudaSuccess;
thread_local cudaError_t tl_detail_code = cudaSuccess;
thread_local char tl_detail[1024];
thread_local char tl_errstr[1400];

/* mu held */
void read_env_locked() {
    if (env_read) return;
    env_read = true;
    const char *s = getenv("LF_SHIM_SCHEDULE");
    if (s && *s) {
        if (!strcmp(s, "forward")) {
            sched_kind = LF_SHIM_SCHEDULE_FORWARD;
        } else if (!strcmp(s, "reverse")) {
            sched_kind = LF_SHIM_SCHEDULE_REVERSE;
        } else if (!strncmp(s, "shuffle", 7) && (s[7] == 0 || s[7] == ':')) {
            sched_kind = LF_SHIM_SCHEDULE_SHUFFLE;
            if (s[7] == ':') {
                char *end = nullptr;
                errno = 0;
                unsigned long long v = strtoull(s + 8, &end, 0);
                if (errno || end == s + 8 || *end) {
                    init_error = cudaErrorInitializationError;
                    init_detail = std::string("LF_SHIM_SCHEDULE='") + s + "': the seed after 'shuffle:' is not a number";
                    return;
                }
                sched_seed = v;
            }
        } else {
            init_error = cudaErrorInitializationError;
            init_detail = std::string("LF_SHIM_SCHEDULE='") + s + "': expected forward, reverse, shuffle or shuffle:SEED";
            return;
        }
    }
    s = getenv("LF_SHIM_DEVICE_MEMORY");
    if (s && *s) {
        char *end = nullptr;
        errno = 0;
        unsigned long long v = strtoull(s, &end, 10);
        if (errno || end == s || *end || v == 0) {
            init_error = cudaErrorInitializationError;
            init_detail = std::string("LF_SHIM_DEVICE_MEMORY='") + s + "': expected a positive number of bytes";
            return;
        }
        total = (size_t)v;
    }
    s = getenv("LF_SHIM_STACK_KB");
    if (s && *s) {
        char *end = nullptr;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (errno || end == s || *end || v < 16 || v > 65536) {
            init_error = cudaErrorInitializationError;
            init_detail = std::string("LF_SHIM_STACK_KB='") + s + "': expected a stack size from 16 to 65536 KiB";
            return;
        }
        stack_bytes = (size_t)v * 1024;
    }
}

const char *generic_string(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorLaunchTimeout: return "the launch timed out and was terminated";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorUnknown: return "unknown error";
    }
    return "unrecognized error code";
}

double now_ms() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* mu held */
bool range_locked(const void *p, size_t n) {
    uintptr_t a = (uintptr_t)p;
    auto it = allocs.upper_bound(a);
    if (it == allocs.begin()) return false;
    --it;
    uintptr_t lo = it->first, hi = it->first + it->second.bytes;
    return a >= lo && a <= hi && n <= hi - a;
}

bool stream_locked(cudaStream_t s) {
    return s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread || streams.count(s) != 0;
}

#define ENTER()                                                                                    \
    do {                                                                                           \
        cudaError_t e_ = lf_shim_rt::enter();                                                      \
        if (e_ != cudaSuccess) return lf_shim_rt::ret(e_);                                         \
    } while (0)

} // namespace

/* ------------------------------------------------------------ shared with the other parts */
namespace lf_shim_rt {

cudaError_t enter(void) {
    std::lock_guard<std::mutex> lk(mu);
    read_env_locked();
    if (init_error != cudaSuccess) return init_error;
    return sticky;
}

cudaError_t ret(cudaError_t e) {
    if (e != cudaSuccess) {
        tl_last = e;
        tl_detail_code = cudaSuccess;
    }
    return e;
}

cudaError_t fail(cudaError_t e, const char *fmt, ...) {
    tl_last = e;
    tl_detail_code = e;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tl_detail, sizeof tl_detail, fmt, ap);
    va_end(ap);
    return e;
}

cudaError_t fail_sticky(cudaError_t e, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    {
        std::lock_guard<std::mutex> lk(mu);
        if (sticky == cudaSuccess) {
            sticky = e;
            sticky_detail = buf;
        }
    }
    tl_last = e;
    tl_detail_code = e;
    snprintf(tl_detail, sizeof tl_detail, "%s", buf);
    return e;
}

int device_range(const void *p, size_t bytes) {
    std::lock_guard<std::mutex> lk(mu);
    return range_locked(p, bytes);
}

int stream_valid(cudaStream_t s) {
    std::lock_guard<std::mutex> lk(mu);
    return stream_locked(s);
}

size_t max_dynamic_shared(const void *key) {
    std::lock_guard<std::mutex> lk(mu);
    auto it = func_dyn_shared.find(key);
    return it == func_dyn_shared.end() ? kSharedPerBlock : it->second;
}

void schedule(lf_shim_schedule_kind *kind, uint64_t *seed) {
    std::lock_guard<std::mutex> lk(mu);
    read_env_locked();
    *kind = sched_kind;
    *seed = sched_seed;
}

unsigned char poison_byte(void) {
    std::lock_guard<std::mutex> lk(mu);
    return poison;
}

size_t fiber_stack_bytes(void) {
    std::lock_guard<std::mutex> lk(mu);
    read_env_locked();
    return stack_bytes;
}

} // namespace lf_shim_rt

using lf_shim_rt::fail;
using lf_shim_rt::ret;

/* ------------------------------------------------------------ the shim's controls */
extern "C" void lf_shim_set_schedule(lf_shim_schedule_kind kind, uint64_t seed) {
    std::lock_guard<std::mutex> lk(mu);
    read_env_locked();
    if (kind == LF_SHIM_SCHEDULE_FORWARD || kind == LF_SHIM_SCHEDULE_REVERSE || kind == LF_SHIM_SCHEDULE_SHUFFLE)
        sched_kind = kind;
    sched_seed = seed;
}

extern "C" void lf_shim_get_schedule(lf_shim_schedule_kind *kind, uint64_t *seed) {
    std::lock_guard<std::mutex> lk(mu);
    read_env_locked();
    if (kind) *kind = sched_kind;
    if (seed) *seed = sched_seed;
}

extern "C" void lf_shim_set_poison(unsigned char byte) {
    std::lock_guard<std::mutex> lk(mu);
    poison = byte;
}

extern "C" void lf_shim_set_device_memory(size_t bytes) {
    std::lock_guard<std::mutex> lk(mu);
    read_env_locked();
    total = bytes;
}

extern "C" void lf_shim_fail_malloc(long after) {
    std::lock_guard<std::mutex> lk(mu);
    fail_malloc_in = after < 0 ? -1 : after;
}

extern "C" const char *lf_shim_last_error_detail(void) {
    std::lock_guard<std::mutex> lk(mu);
    if (init_error != cudaSuccess) return init_detail.c_str();
    if (sticky != cudaSuccess) return sticky_detail.c_str();
    return tl_detail_code != cudaSuccess ? tl_detail : "";
}

/* ------------------------------------------------------------ errors */
extern "C" const char *cudaGetErrorString(cudaError_t e) {
    const char *g = generic_string(e);
    std::lock_guard<std::mutex> lk(mu);
    const char *detail = nullptr;
    if (e == init_error && !init_detail.empty())
        detail = init_detail.c_str();
    else if (e == sticky && !sticky_detail.empty())
        detail = sticky_detail.c_str();
    else if (e == tl_detail_code && tl_detail[0])
        detail = tl_detail;
    if (!detail || e == cudaSuccess) return g;
    snprintf(tl_errstr, sizeof tl_errstr, "%s (shim: %s)", g, detail);
    return tl_errstr;
}

extern "C" const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInvalidDeviceFunction: return "cudaErrorInvalidDeviceFunction";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    case cudaErrorLaunchTimeout: return "cudaErrorLaunchTimeout";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    case cudaErrorUnknown: return "cudaErrorUnknown";
    }
    return "cudaErrorUnknown";
}

extern "C" cudaError_t cudaGetLastError(void) {
    cudaError_t e = lf_shim_rt::enter();
    if (e != cudaSuccess) return e; /* sticky: every call returns it */
    e = tl_last;
    tl_last = cudaSuccess;
    return e;
}

extern "C" cudaError_t cudaPeekAtLastError(void) {
    cudaError_t e = lf_shim_rt::enter();
    return e != cudaSuccess ? e : tl_last;
}

/* ------------------------------------------------------------ device */
extern "C" cudaError_t cudaGetDeviceCount(int *count) {
    ENTER();
    if (!count) return fail(cudaErrorInvalidValue, "cudaGetDeviceCount: count is NULL");
    *count = 1;
    return cudaSuccess;
}

extern "C" cudaError_t cudaSetDevice(int device) {
    ENTER();
    if (device != 0) return fail(cudaErrorInvalidDevice, "cudaSetDevice(%d): the shim has one device, 0", device);
    return cudaSuccess;
}

extern "C" cudaError_t cudaGetDevice(int *device) {
    ENTER();
    if (!device) return fail(cudaErrorInvalidValue, "cudaGetDevice: device is NULL");
    *device = 0;
    return cudaSuccess;
}

extern "C" cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
    ENTER();
    if (!prop) return fail(cudaErrorInvalidValue, "cudaGetDeviceProperties: prop is NULL");
    if (device != 0)
        return fail(cudaErrorInvalidDevice, "cudaGetDeviceProperties(%d): the shim has one device, 0", device);
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "llmforge CUDA-on-CPU shim (no GPU)");
    {
        std::lock_guard<std::mutex> lk(mu);
        prop->totalGlobalMem = total;
    }
    using namespace lf_shim_rt;
    prop->sharedMemPerBlock = kSharedPerBlock;
    prop->regsPerBlock = 65536;
    prop->warpSize = 32;
    prop->maxThreadsPerBlock = kMaxThreadsPerBlock;
    for (int i = 0; i < 3; i++) {
        prop->maxThreadsDim[i] = (int)kMaxBlockDim[i];
        prop->maxGridSize[i] = (int)kMaxGridDim[i];
    }
    prop->totalConstMem = 65536;
    prop->major = 9;
    prop->minor = 0;
    prop->multiProcessorCount = kMultiProcessors;
    prop->l2CacheSize = 0;
    prop->maxThreadsPerMultiProcessor = 2048;
    prop->sharedMemPerMultiprocessor = kSharedPerSM;
    prop->sharedMemPerBlockOptin = kSharedPerBlockOptin;
    return cudaSuccess;
}

extern "C" cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device) {
    ENTER();
    if (!value) return fail(cudaErrorInvalidValue, "cudaDeviceGetAttribute: value is NULL");
    if (device != 0)
        return fail(cudaErrorInvalidDevice, "cudaDeviceGetAttribute(device %d): the shim has one device, 0", device);
    using namespace lf_shim_rt;
    switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = kMaxThreadsPerBlock; break;
    case cudaDevAttrMaxBlockDimX: *value = (int)kMaxBlockDim[0]; break;
    case cudaDevAttrMaxBlockDimY: *value = (int)kMaxBlockDim[1]; break;
    case cudaDevAttrMaxBlockDimZ: *value = (int)kMaxBlockDim[2]; break;
    case cudaDevAttrMaxGridDimX: *value = (int)kMaxGridDim[0]; break;
    case cudaDevAttrMaxGridDimY: *value = (int)kMaxGridDim[1]; break;
    case cudaDevAttrMaxGridDimZ: *value = (int)kMaxGridDim[2]; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = (int)kSharedPerBlock; break;
    case cudaDevAttrWarpSize: *value = 32; break;
    case cudaDevAttrMultiProcessorCount: *value = kMultiProcessors; break;
    case cudaDevAttrL2CacheSize: *value = 0; break;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = (int)kSharedPerSM; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = (int)kSharedPerBlockOptin; break;
    default: return fail(cudaErrorInvalidValue, "cudaDeviceGetAttribute: attribute %d is not in the shim", (int)attr);
    }
    return cudaSuccess;
}

extern "C" cudaError_t cudaDeviceSynchronize(void) {
    ENTER();
    return cudaSuccess;
}

extern "C" cudaError_t cudaDeviceReset(void) {
    {
        std::lock_guard<std::mutex> lk(mu);
        read_env_locked();
        for (auto &a : allocs) free((void *)a.first);
        allocs.clear();
        used = 0;
        for (void *p : pinned) free(p);
        pinned.clear();
        for (cudaStream_t s : streams) delete s;
        streams.clear();
        for (cudaEvent_t e : events) delete e;
        events.clear();
        func_dyn_shared.clear();
        sticky = cudaSuccess;
        sticky_detail.clear();
        if (init_error != cudaSuccess) return init_error;
    }
    tl_last = cudaSuccess;
    tl_detail_code = cudaSuccess;
    return cudaSuccess;
}

extern "C" cudaError_t cudaRuntimeGetVersion(int *version) {
    if (!version) return fail(cudaErrorInvalidValue, "cudaRuntimeGetVersion: version is NULL");
    *version = 13000;
    return cudaSuccess;
}

extern "C" cudaError_t cudaDriverGetVersion(int *version) {
    if (!version) return fail(cudaErrorInvalidValue, "cudaDriverGetVersion: version is NULL");
    *version = 13000;
    return cudaSuccess;
}

/* ------------------------------------------------------------ memory */
extern "C" cudaError_t cudaMalloc(void **devPtr, size_t size) {
    ENTER();
    if (!devPtr) return fail(cudaErrorInvalidValue, "cudaMalloc: devPtr is NULL");
    if (size == 0) {
        *devPtr = nullptr;
        return cudaSuccess;
    }
    if (size > SIZE_MAX - 255) return fail(cudaErrorMemoryAllocation, "cudaMalloc(%zu): too large", size);
    size_t reserved = (size + 255) & ~(size_t)255;
    unsigned char pb;
    {
        std::lock_guard<std::mutex> lk(mu);
        size_t avail = total > used ? total - used : 0;
        if (fail_malloc_in == 0) {
            fail_malloc_in = -1;
            return fail(cudaErrorMemoryAllocation, "cudaMalloc(%zu): failed on purpose (lf_shim_fail_malloc)", size);
        }
        if (fail_malloc_in > 0) fail_malloc_in--;
        if (reserved > avail)
            return fail(cudaErrorMemoryAllocation,
                        "cudaMalloc(%zu): the fake device has %zu of its %zu bytes free (lf_shim_set_device_memory)",
                        size, avail, total);
        pb = poison;
    }
    void *p = aligned_alloc(256, reserved);
    if (!p) return fail(cudaErrorMemoryAllocation, "cudaMalloc(%zu): host allocation failed", size);
    memset(p, pb, reserved);
    {
        std::lock_guard<std::mutex> lk(mu);
        allocs[(uintptr_t)p] = alloc_info{size, reserved};
        used += reserved;
    }
    *devPtr = p;
    return cudaSuccess;
}

extern "C" cudaError_t cudaFree(void *devPtr) {
    ENTER();
    if (!devPtr) return cudaSuccess;
    std::lock_guard<std::mutex> lk(mu);
    auto it = allocs.find((uintptr_t)devPtr);
    if (it == allocs.end())
        return fail(cudaErrorInvalidValue, "cudaFree(%p): not the start of a live cudaMalloc allocation", devPtr);
    used -= it->second.reserved;
    allocs.erase(it);
    free(devPtr);
    return cudaSuccess;
}

extern "C" cudaError_t cudaMallocHost(void **ptr, size_t size) {
    ENTER();
    if (!ptr) return fail(cudaErrorInvalidValue, "cudaMallocHost: ptr is NULL");
    if (size > SIZE_MAX - 255) return fail(cudaErrorMemoryAllocation, "cudaMallocHost(%zu): too large", size);
    void *p = aligned_alloc(256, size ? (size + 255) & ~(size_t)255 : 256);
    if (!p) return fail(cudaErrorMemoryAllocation, "cudaMallocHost(%zu): host allocation failed", size);
    std::lock_guard<std::mutex> lk(mu);
    pinned.insert(p);
    *ptr = p;
    return cudaSuccess;
}

extern "C" cudaError_t cudaFreeHost(void *ptr) {
    ENTER();
    if (!ptr) return cudaSuccess;
    std::lock_guard<std::mutex> lk(mu);
    if (!pinned.erase(ptr))
        return fail(cudaErrorInvalidValue, "cudaFreeHost(%p): not a live cudaMallocHost allocation", ptr);
    free(ptr);
    return cudaSuccess;
}

extern "C" cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    ENTER();
    if (!free_bytes || !total_bytes) return fail(cudaErrorInvalidValue, "cudaMemGetInfo: a result pointer is NULL");
    std::lock_guard<std::mutex> lk(mu);
    *free_bytes = total > used ? total - used : 0;
    *total_bytes = total;
    return cudaSuccess;
}

namespace {
cudaError_t copy(const char *fn, void *dst, const void *src, size_t count, enum cudaMemcpyKind kind) {
    if (count == 0) return cudaSuccess;
    if (!dst || !src) return fail(cudaErrorInvalidValue, "%s: %s is NULL", fn, dst ? "src" : "dst");
    bool dst_dev = false, src_dev = false;
    switch (kind) {
    case cudaMemcpyHostToHost: break;
    case cudaMemcpyHostToDevice: dst_dev = true; break;
    case cudaMemcpyDeviceToHost: src_dev = true; break;
    case cudaMemcpyDeviceToDevice: dst_dev = src_dev = true; break;
    case cudaMemcpyDefault: break;
    default: return fail(cudaErrorInvalidMemcpyDirection, "%s: kind %d is not a cudaMemcpyKind", fn, (int)kind);
    }
    {
        std::lock_guard<std::mutex> lk(mu);
        if (dst_dev && !range_locked(dst, count))
            return fail(cudaErrorInvalidValue, "%s: destination [%p, +%zu bytes) is not inside one device allocation",
                        fn, dst, count);
        if (src_dev && !range_locked(src, count))
            return fail(cudaErrorInvalidValue, "%s: source [%p, +%zu bytes) is not inside one device allocation", fn,
                        src, count);
    }
    memmove(dst, src, count);
    return cudaSuccess;
}
} // namespace

extern "C" cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind) {
    ENTER();
    return copy("cudaMemcpy", dst, src, count, kind);
}

extern "C" cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                                       cudaStream_t stream) {
    ENTER();
    if (!lf_shim_rt::stream_valid(stream))
        return fail(cudaErrorInvalidResourceHandle, "cudaMemcpyAsync: stream %p is not a live stream", (void *)stream);
    return copy("cudaMemcpyAsync", dst, src, count, kind);
}

namespace {
cudaError_t set(const char *fn, void *dev, int value, size_t count) {
    if (count == 0) return cudaSuccess;
    if (!lf_shim_rt::device_range(dev, count))
        return fail(cudaErrorInvalidValue, "%s: [%p, +%zu bytes) is not inside one device allocation", fn, dev, count);
    memset(dev, value, count);
    return cudaSuccess;
}
} // namespace

extern "C" cudaError_t cudaMemset(void *devPtr, int value, size_t count) {
    ENTER();
    return set("cudaMemset", devPtr, value, count);
}

extern "C" cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream) {
    ENTER();
    if (!lf_shim_rt::stream_valid(stream))
        return fail(cudaErrorInvalidResourceHandle, "cudaMemsetAsync: stream %p is not a live stream", (void *)stream);
    return set("cudaMemsetAsync", devPtr, value, count);
}

/* ------------------------------------------------------------ streams */
extern "C" cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags) {
    ENTER();
    if (!stream) return fail(cudaErrorInvalidValue, "cudaStreamCreateWithFlags: stream is NULL");
    if (flags & ~(unsigned)cudaStreamNonBlocking)
        return fail(cudaErrorInvalidValue, "cudaStreamCreateWithFlags: flags 0x%x are not stream flags", flags);
    cudaStream_t s = new CUstream_st{flags};
    std::lock_guard<std::mutex> lk(mu);
    streams.insert(s);
    *stream = s;
    return cudaSuccess;
}

extern "C" cudaError_t cudaStreamCreate(cudaStream_t *stream) { return cudaStreamCreateWithFlags(stream, 0); }

extern "C" cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    ENTER();
    std::lock_guard<std::mutex> lk(mu);
    if (!streams.erase(stream))
        return fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy(%p): not a live stream", (void *)stream);
    delete stream;
    return cudaSuccess;
}

extern "C" cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    ENTER();
    if (!lf_shim_rt::stream_valid(stream))
        return fail(cudaErrorInvalidResourceHandle, "cudaStreamSynchronize(%p): not a live stream", (void *)stream);
    return cudaSuccess;
}

extern "C" int lf_shim_device_range(const void *p, size_t bytes) { return lf_shim_rt::device_range(p, bytes); }

extern "C" cudaError_t cudaStreamQuery(cudaStream_t stream) {
    ENTER();
    if (!lf_shim_rt::stream_valid(stream))
        return fail(cudaErrorInvalidResourceHandle, "cudaStreamQuery(%p): not a live stream", (void *)stream);
    return cudaSuccess;
}

extern "C" cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
    ENTER();
    std::lock_guard<std::mutex> lk(mu);
    if (!stream_locked(stream))
        return fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: stream %p is not a live stream",
                    (void *)stream);
    if (!events.count(event))
        return fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: event %p is not a live event", (void *)event);
    if (flags != 0) return fail(cudaErrorInvalidValue, "cudaStreamWaitEvent: flags 0x%x", flags);
    return cudaSuccess;
}

/* ------------------------------------------------------------ events */
extern "C" cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
    ENTER();
    if (!event) return fail(cudaErrorInvalidValue, "cudaEventCreateWithFlags: event is NULL");
    if (flags & ~0x7u) return fail(cudaErrorInvalidValue, "cudaEventCreateWithFlags: flags 0x%x are not event flags", flags);
    if ((flags & 0x4u) && !(flags & cudaEventDisableTiming))
        return fail(cudaErrorInvalidValue, "cudaEventCreateWithFlags: an interprocess event needs cudaEventDisableTiming");
    cudaEvent_t e = new CUevent_st{flags, false, 0.0};
    std::lock_guard<std::mutex> lk(mu);
    events.insert(e);
    *event = e;
    return cudaSuccess;
}

extern "C" cudaError_t cudaEventCreate(cudaEvent_t *event) { return cudaEventCreateWithFlags(event, 0); }

extern "C" cudaError_t cudaEventDestroy(cudaEvent_t event) {
    ENTER();
    std::lock_guard<std::mutex> lk(mu);
    if (!events.erase(event))
        return fail(cudaErrorInvalidResourceHandle, "cudaEventDestroy(%p): not a live event", (void *)event);
    delete event;
    return cudaSuccess;
}

extern "C" cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
    ENTER();
    std::lock_guard<std::mutex> lk(mu);
    if (!events.count(event))
        return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: %p is not a live event", (void *)event);
    if (!stream_locked(stream))
        return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: stream %p is not a live stream", (void *)stream);
    event->recorded = true;
    event->ms = now_ms();
    return cudaSuccess;
}

extern "C" cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    ENTER();
    std::lock_guard<std::mutex> lk(mu);
    if (!events.count(event))
        return fail(cudaErrorInvalidResourceHandle, "cudaEventSynchronize(%p): not a live event", (void *)event);
    return cudaSuccess;
}

extern "C" cudaError_t cudaEventQuery(cudaEvent_t event) {
    ENTER();
    std::lock_guard<std::mutex> lk(mu);
    if (!events.count(event))
        return fail(cudaErrorInvalidResourceHandle, "cudaEventQuery(%p): not a live event", (void *)event);
    return cudaSuccess;
}

extern "C" cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
    ENTER();
    if (!ms) return fail(cudaErrorInvalidValue, "cudaEventElapsedTime: ms is NULL");
    std::lock_guard<std::mutex> lk(mu);
    if (!events.count(start) || !events.count(end))
        return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: %p is not a live event",
                    (void *)(events.count(start) ? end : start));
    if ((start->flags | end->flags) & cudaEventDisableTiming)
        return fail(cudaErrorInvalidResourceHandle,
                    "cudaEventElapsedTime: an event was created with cudaEventDisableTiming");
    if (!start->recorded || !end->recorded)
        return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: event %p was never recorded",
                    (void *)(start->recorded ? end : start));
    *ms = (float)(end->ms - start->ms);
    return cudaSuccess;
}

/* ------------------------------------------------------------ kernels */
extern "C" cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value) {
    ENTER();
    if (!func) return fail(cudaErrorInvalidDeviceFunction, "cudaFuncSetAttribute: func is NULL");
    switch (attr) {
    case cudaFuncAttributeMaxDynamicSharedMemorySize:
        if (value < 0 || (size_t)value > lf_shim_rt::kSharedPerBlockOptin)
            return fail(cudaErrorInvalidValue,
                        "cudaFuncSetAttribute: %d bytes of dynamic shared memory, the device allows 0 to %zu", value,
                        lf_shim_rt::kSharedPerBlockOptin);
        {
            std::lock_guard<std::mutex> lk(mu);
            func_dyn_shared[func] = (size_t)value;
        }
        return cudaSuccess;
    case cudaFuncAttributePreferredSharedMemoryCarveout:
        if (value < -1 || value > 100)
            return fail(cudaErrorInvalidValue, "cudaFuncSetAttribute: carveout %d is not -1 or a percentage", value);
        return cudaSuccess;
    }
    return fail(cudaErrorInvalidValue, "cudaFuncSetAttribute: attribute %d is not in the shim", (int)attr);
}
