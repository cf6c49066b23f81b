/*
 * The NCCL API for the nccl communicator (comm_nccl.c): the real <nccl.h>
 * (lf_comm_nccl, linked to libnccl), or llmforge's NCCL shim on MPI
 * (shim/nccl_shim.h, lf_comm_nccl_shim) when LF_NCCL_SHIM is defined, so
 * one source builds into both, as the CUDA backend's files do
 * (src/backend/cuda/cuda_api.h picks the CUDA runtime the same way).
 */
#ifndef LF_NCCL_API_H
#define LF_NCCL_API_H

#if defined(LF_NCCL_SHIM)
#if !defined(LF_CUDA_SHIM)
#error "the NCCL shim runs over the CUDA-on-CPU shim: define LF_CUDA_SHIM too"
#endif
#include "nccl/shim/nccl_shim.h"
#else
#include <nccl.h>
#endif

#endif
