/*
 * The CUDA runtime API subset of the CUDA-on-CPU shim (C; see ../README.md).
 *
 * What: the types, constants and functions of the CUDA runtime that the
 * CUDA backend's host code and kernels use, with the real names and the
 * real numeric values (driver_types.h, vector_types.h, library_types.h of
 * CUDA 13), implemented on host memory with synchronous execution
 * (shim_runtime.cpp). Host C code reaches it through ../cuda_api.h, which
 * picks the real <cuda_runtime_api.h> when LF_CUDA_SHIM is not defined, so
 * the same C compiles against either.
 *
 * Why our own: CI has no GPU and no CUDA toolkit; no library runs CUDA on
 * a CPU at the level a kernel test needs (every rule of the real API
 * checked, nothing hidden behind a second implementation of the kernels).
 *
 * Invariants (what matches a GPU, what is the shim's):
 *  - One fake device, number 0, whose name says it is the shim; its memory
 *    is host memory from aligned_alloc (256-byte aligned, as cudaMalloc),
 *    new allocations filled with the poison byte (lf_shim.h), the total
 *    capped at lf_shim_set_device_memory's figure so out-of-memory can be
 *    tested (cudaErrorMemoryAllocation, nothing allocated).
 *  - Every copy and memset checks that its device side lies inside one live
 *    cudaMalloc allocation (cudaErrorInvalidValue otherwise, nothing
 *    copied): an out-of-range copy fails here as it faults on a GPU.
 *  - Everything runs synchronously on the calling thread; streams and
 *    events are checked handles, events record host time.
 *  - Errors: every failing call sets the calling thread's last error
 *    (cudaGetLastError returns and clears it, cudaPeekAtLastError returns
 *    it). A kernel that breaks a shim rule (lf_shim.h) is a sticky error
 *    (cudaErrorLaunchFailure) as a fault is on a GPU: every later call
 *    returns it until cudaDeviceReset, which also frees every allocation,
 *    stream and event. cudaGetErrorString of that code carries the shim's
 *    detailed message (kernel, block, thread, rule).
 *  - Thread safety: every function may be called from any thread; launches
 *    are serialized process-wide (one kernel runs at a time).
 *
 * Reference: CUDA Runtime API reference (docs.nvidia.com/cuda/cuda-runtime-api).
 */
#ifndef LF_CUDA_RUNTIME_SHIM_H
#define LF_CUDA_RUNTIME_SHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------ errors */
typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorInvalidDeviceFunction = 98,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchOutOfResources = 701,
    cudaErrorLaunchTimeout = 702,
    cudaErrorLaunchFailure = 719,
    cudaErrorNotSupported = 801,
    cudaErrorUnknown = 999
} cudaError_t;

/* ------------------------------------------------------------ handles */
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamPerThread ((cudaStream_t)0x2)
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
};

enum cudaFuncAttribute {
    cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
    cudaFuncAttributePreferredSharedMemoryCarveout = 9
};

enum cudaDeviceAttr {
    cudaDevAttrMaxThreadsPerBlock = 1,
    cudaDevAttrMaxBlockDimX = 2,
    cudaDevAttrMaxBlockDimY = 3,
    cudaDevAttrMaxBlockDimZ = 4,
    cudaDevAttrMaxGridDimX = 5,
    cudaDevAttrMaxGridDimY = 6,
    cudaDevAttrMaxGridDimZ = 7,
    cudaDevAttrMaxSharedMemoryPerBlock = 8,
    cudaDevAttrWarpSize = 10,
    cudaDevAttrMultiProcessorCount = 16,
    cudaDevAttrL2CacheSize = 38,
    cudaDevAttrComputeCapabilityMajor = 75,
    cudaDevAttrComputeCapabilityMinor = 76,
    cudaDevAttrMaxSharedMemoryPerMultiprocessor = 81,
    cudaDevAttrMaxSharedMemoryPerBlockOptin = 97
};

/* The fields of cudaDeviceProp a backend reads (a subset: code reading
 * another field fails to compile against the shim, which is the cue to add
 * it here with the fake device's value). */
struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    int regsPerBlock;
    int warpSize;
    int maxThreadsPerBlock;
    int maxThreadsDim[3];
    int maxGridSize[3];
    size_t totalConstMem;
    int major;
    int minor;
    int multiProcessorCount;
    int l2CacheSize;
    int maxThreadsPerMultiProcessor;
    size_t sharedMemPerMultiprocessor;
    size_t sharedMemPerBlockOptin;
};

/* ------------------------------------------------------------ vector types */
typedef struct char2 {
    signed char x, y;
} char2;
typedef struct uchar2 {
    unsigned char x, y;
} uchar2;
typedef struct __attribute__((aligned(8))) int2 {
    int x, y;
} int2;
typedef struct int3 {
    int x, y, z;
} int3;
typedef struct __attribute__((aligned(16))) int4 {
    int x, y, z, w;
} int4;
typedef struct __attribute__((aligned(8))) uint2 {
    unsigned int x, y;
} uint2;
typedef struct uint3 {
    unsigned int x, y, z;
} uint3;
typedef struct __attribute__((aligned(16))) uint4 {
    unsigned int x, y, z, w;
} uint4;
typedef struct __attribute__((aligned(8))) float2 {
    float x, y;
} float2;
typedef struct float3 {
    float x, y, z;
} float3;
typedef struct __attribute__((aligned(16))) float4 {
    float x, y, z, w;
} float4;
typedef struct __attribute__((aligned(16))) double2 {
    double x, y;
} double2;

static inline int2 make_int2(int x, int y) {
    int2 v = {x, y};
    return v;
}
static inline int4 make_int4(int x, int y, int z, int w) {
    int4 v = {x, y, z, w};
    return v;
}
static inline uint2 make_uint2(unsigned x, unsigned y) {
    uint2 v = {x, y};
    return v;
}
static inline uint3 make_uint3(unsigned x, unsigned y, unsigned z) {
    uint3 v = {x, y, z};
    return v;
}
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) {
    uint4 v = {x, y, z, w};
    return v;
}
static inline float2 make_float2(float x, float y) {
    float2 v = {x, y};
    return v;
}
static inline float3 make_float3(float x, float y, float z) {
    float3 v = {x, y, z};
    return v;
}
static inline float4 make_float4(float x, float y, float z, float w) {
    float4 v = {x, y, z, w};
    return v;
}
static inline double2 make_double2(double x, double y) {
    double2 v = {x, y};
    return v;
}

/* ------------------------------------------------------------ library types (library_types.h) */
typedef enum cudaDataType_t {
    CUDA_R_32F = 0,
    CUDA_R_64F = 1,
    CUDA_R_16F = 2,
    CUDA_R_8I = 3,
    CUDA_R_32I = 10,
    CUDA_R_16BF = 14
} cudaDataType_t;
typedef cudaDataType_t cudaDataType;

/* ------------------------------------------------------------ functions */
const char *cudaGetErrorString(cudaError_t error);
const char *cudaGetErrorName(cudaError_t error);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);

cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device);
cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaDeviceReset(void);
cudaError_t cudaRuntimeGetVersion(int *version);
cudaError_t cudaDriverGetVersion(int *version);

cudaError_t cudaMalloc(void **devPtr, size_t size);
cudaError_t cudaFree(void *devPtr);
cudaError_t cudaMallocHost(void **ptr, size_t size);
cudaError_t cudaFreeHost(void *ptr);
cudaError_t cudaMemGetInfo(size_t *free, size_t *total);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream);
cudaError_t cudaMemset(void *devPtr, int value, size_t count);
cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream);

cudaError_t cudaStreamCreate(cudaStream_t *stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags);

cudaError_t cudaEventCreate(cudaEvent_t *event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);

/* func: the kernel (cast to const void *; C++ callers may pass the kernel
 * itself). Only cudaFuncAttributeMaxDynamicSharedMemorySize changes what a
 * launch accepts; the carveout is accepted and ignored, as a hint. */
cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value);

#ifdef __cplusplus
}
template <typename T> static inline cudaError_t cudaFuncSetAttribute(T *func, enum cudaFuncAttribute attr, int value) {
    return cudaFuncSetAttribute(reinterpret_cast<const void *>(func), attr, value);
}
#endif

#endif
