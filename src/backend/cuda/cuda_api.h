/*
 * The CUDA runtime and cuBLASLt API for the CUDA backend's host C code:
 * the real headers, or the CUDA-on-CPU shim's C declarations of the same
 * names when LF_CUDA_SHIM is defined (lf_backend_cuda_shim), so one C
 * source builds into both libraries. Under the shim the shim's own
 * controls (shim/lf_shim.h, lf_shim_ prefix) are declared too; code that
 * uses them is shim-only and says so with #ifdef LF_CUDA_SHIM.
 */
#ifndef LF_CUDA_API_H
#define LF_CUDA_API_H

#if defined(LF_CUDA_SHIM)
#include "shim/cuda_runtime_shim.h"
#include "shim/cublasLt_shim.h"
#include "shim/lf_shim.h"
#else
#include <cuda_runtime_api.h>
#include <cublasLt.h>
#endif

#endif
