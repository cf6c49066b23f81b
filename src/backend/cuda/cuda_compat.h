/*
 * The first include of every .cu file of the CUDA backend: the same source
 * compiles with nvcc against the real CUDA headers (lf_backend_cuda) and
 * with the host C++ compiler against the CUDA-on-CPU shim (LF_CUDA_SHIM
 * defined: lf_backend_cuda_shim, what CI tests). See README.md for the
 * rules this imposes on kernels.
 *
 * The two things CUDA C++ spells in a way a macro cannot reproduce, and
 * that kernels must therefore write through these macros:
 *   LF_CUDA_LAUNCH(kernel, grid, block, shmem, stream, args...)
 *     is kernel<<<grid, block, shmem, stream>>>(args...) under nvcc; the
 *     launch error is then read with cudaGetLastError() as usual. A
 *     template kernel is launched through a pointer to its instance
 *     (`auto *k = &kern<128>; LF_CUDA_LAUNCH(k, ...)`), since a template
 *     argument list has commas.
 *   LF_CUDA_DYNAMIC_SHARED(T, name);
 *     declares `T *name` pointing at the launch's dynamic shared memory
 *     (16-byte aligned), what `extern __shared__ T name[];` gives under
 *     nvcc; raw `extern __shared__` does not compile on the shim.
 */
#ifndef LF_CUDA_COMPAT_H
#define LF_CUDA_COMPAT_H

#if defined(LF_CUDA_SHIM)

#include "shim/cuda_device_shim.h"
#include "shim/cublasLt_shim.h"
#define LF_CUDA_LAUNCH(kernel, grid, block, shmem, stream, ...) \
    lf_shim::make_launcher(#kernel, kernel, (grid), (block), (shmem), (stream))(__VA_ARGS__)
#define LF_CUDA_DYNAMIC_SHARED(T, name) T *name = static_cast<T *>(lf_shim_tls_dynamic_shared)

#else

#if !defined(__CUDACC__)
#error "cuda_compat.h: a .cu file is compiled by nvcc, or by the host compiler with LF_CUDA_SHIM defined"
#endif
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cublasLt.h>
#define LF_CUDA_LAUNCH(kernel, grid, block, shmem, stream, ...) \
    kernel<<<(grid), (block), (shmem), (stream)>>>(__VA_ARGS__)
#define LF_CUDA_DYNAMIC_SHARED(T, name) \
    extern __shared__ __align__(16) unsigned char lf_cuda_dynamic_smem[]; \
    T *name = reinterpret_cast<T *>(lf_cuda_dynamic_smem)

#endif

#endif
