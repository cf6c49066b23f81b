/*
 * What only the CUDA backend ("cuda", "cuda-bf16") has: registering its
 * kinds and picking the device. Defined only in the CUDA libraries
 * (lf_backend_cuda, lf_backend_cuda_shim; src/backend/cuda/); a program
 * that includes this header must link one of them. The generic backend API
 * is llmforge/backend.h.
 */
#ifndef LLMFORGE_BACKEND_CUDA_H
#define LLMFORGE_BACKEND_CUDA_H

#include "llmforge/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The CUDA backend ("cuda" and "cuda-bf16"), defined only in the CUDA
 * libraries: a program linked with lf_backend_cuda (nvcc; a real GPU) or
 * lf_backend_cuda_shim (the CUDA-on-CPU emulation, for tests) calls
 * lf_backend_cuda_register once at start-up, after which
 * lf_backend_open("cuda") and lf_backend_open("cuda-bf16") find them. The device of
 * instances opened afterwards: lf_backend_cuda_set_device (default: the
 * LLMFORGE_CUDA_DEVICE environment variable, else 0). */
lf_status lf_backend_cuda_register(void);
lf_status lf_backend_cuda_set_device(int device);

#ifdef __cplusplus
}
#endif
#endif
