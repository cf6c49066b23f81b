/*
 * The NCCL API subset of llmforge's NCCL shim (C): the names, types and
 * numeric values of <nccl.h> (NCCL 2.28) that src/comm/nccl/comm_nccl.c
 * uses, implemented on MPI over the CUDA-on-CPU shim (shim_nccl.c), so the
 * nccl communicator runs in CI with no GPU and no NCCL. The real header is
 * picked instead when LF_NCCL_SHIM is not defined (../nccl_api.h).
 *
 * Why our own: NCCL needs GPUs; nothing runs its API on CPUs. Under the CUDA
 * shim device memory is host memory, so a collective is the MPI collective
 * of the same buffers.
 *
 * What matches NCCL:
 *  - the calls, argument orders and in-place rules (all_reduce with
 *    send == recv; reduce_scatter with recv == send + rank * recvcount;
 *    all_gather with send == recv + rank * sendcount; reduce and broadcast
 *    with send == recv on the root); the non-blocking communicator model
 *    (ncclConfig_t.blocking = 0: calls return ncclInProgress, completion is
 *    seen through ncclCommGetAsyncError); ncclCommAbort; error codes.
 *  - Buffers must be device memory: a range outside every live cudaMalloc
 *    allocation is ncclInvalidArgument (lf_shim_device_range), as a host
 *    pointer faults on a GPU.
 *
 * What is the shim's own (differences a test must not rely on):
 *  - Reductions are folds in rank order, ((x_0 op x_1) op x_2) ..., the
 *    same bits on every rank and every run; AVG is that sum divided by the
 *    rank count. Real NCCL sums in ring or tree order (not this one).
 *  - A communicator spans MPI_COMM_WORLD: nranks must be MPI's world size
 *    and rank MPI's rank (one communicator per process is all llmforge
 *    makes). With nranks 1 no MPI is needed.
 *  - Completion: a collective is an MPI non-blocking collective started at
 *    the call; it completes when ncclCommGetAsyncError (or a blocking
 *    communicator's call itself) finds its MPI requests done, and only then
 *    are the results folded into the receive buffer. The stream argument is
 *    checked to be a live stream and otherwise ignored (the CUDA shim runs
 *    everything synchronously), so event ordering is not exercised.
 *  - Reductions on float32 and bfloat16 (bf16: every rank's values widened
 *    to fp32, folded in rank order in fp32, rounded once to bf16 — where
 *    real NCCL rounds after every hop); broadcast and all_gather of any
 *    type (bytes); counts up to INT_MAX / nranks elements.
 *  - ncclCommAbort leaves pending MPI requests and the MPI communicator as
 *    they are (they cannot be cancelled); the process is expected to end.
 */
#ifndef LF_NCCL_SHIM_H
#define LF_NCCL_SHIM_H

#include <stddef.h>
#include <limits.h>
#include "shim/cuda_runtime_shim.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 0
#define NCCL_VERSION(X, Y, Z) (((X) <= 2 && (Y) <= 8) ? (X)*1000 + (Y)*100 + (Z) : (X)*10000 + (Y)*100 + (Z))
#define NCCL_VERSION_CODE NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH)

typedef struct ncclComm *ncclComm_t;
#define NCCL_COMM_NULL NULL

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
    ncclNumResults = 8
} ncclResult_t;

#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL

/* The fields llmforge sets; the rest of NCCL's struct is not read. */
typedef struct ncclConfig_shim {
    size_t size;
    unsigned int magic;
    unsigned int version;
    int blocking;
} ncclConfig_t;
#define NCCL_CONFIG_INITIALIZER \
    { sizeof(ncclConfig_t), 0xcafebeef, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), NCCL_CONFIG_UNDEF_INT }

typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4, ncclNumOps = 5 } ncclRedOp_t;

typedef enum {
    ncclInt8 = 0,
    ncclChar = 0,
    ncclUint8 = 1,
    ncclInt32 = 2,
    ncclInt = 2,
    ncclUint32 = 3,
    ncclInt64 = 4,
    ncclUint64 = 5,
    ncclFloat16 = 6,
    ncclHalf = 6,
    ncclFloat32 = 7,
    ncclFloat = 7,
    ncclFloat64 = 8,
    ncclDouble = 8,
    ncclBfloat16 = 9,
    ncclNumTypes = 12
} ncclDataType_t;

ncclResult_t ncclGetVersion(int *version);
ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId);
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t *config);
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
const char *ncclGetErrorString(ncclResult_t result);
const char *ncclGetLastError(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError);
ncclResult_t ncclCommCount(const ncclComm_t comm, int *count);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank);

ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

#ifdef __cplusplus
}
#endif
#endif
