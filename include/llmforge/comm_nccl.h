/*
 * What only the "nccl" communicator has: registering it. Defined only in
 * the nccl libraries (src/comm/nccl/); a program that includes this header
 * must link one of them. The generic communicator API is llmforge/comm.h.
 */
#ifndef LLMFORGE_COMM_NCCL_H
#define LLMFORGE_COMM_NCCL_H

#include "llmforge/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The "nccl" kind, defined only in the nccl libraries (lf_comm_nccl, linked
 * to libnccl, with the CUDA build; lf_comm_nccl_shim: NCCL on MPI over the
 * CUDA-on-CPU shim, for tests): a program linked with one calls this once at
 * start-up, after which lf_comm_open finds "nccl" by name and "auto" picks it
 * for device tensors. Registering twice is harmless. */
lf_status lf_comm_nccl_register(void);

#ifdef __cplusplus
}
#endif
#endif
