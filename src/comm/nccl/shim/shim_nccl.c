/*
 * llmforge's NCCL shim: the NCCL calls of src/comm/nccl/comm_nccl.c on MPI,
 * over the CUDA-on-CPU shim's "device" memory (host memory), so the nccl
 * communicator is tested in CI with no GPU and no NCCL. Contract and
 * differences from NCCL: nccl_shim.h. Written here because nothing provides
 * NCCL's API without GPUs.
 *
 * Model: every collective starts one MPI non-blocking collective at the
 * call (all ranks issue NCCL calls in the same order, as NCCL requires, so
 * the MPI calls match) and joins the communicator's queue of pending
 * operations; the queue advances (MPI_Test, then the local fold into the
 * receive buffer) whenever ncclCommGetAsyncError or another call on the
 * communicator runs, and a blocking communicator drives it to the end
 * before returning. Reductions gather every rank's values (all-gather,
 * gather or all-to-all of the parts) and fold them in rank order with
 * lf__comm_reduce_f32, the fold the mpi communicator uses, so the shim's
 * results are that communicator's bits. Traffic is P times a ring's: fine
 * for the sizes CI runs.
 *
 * Invariants:
 *  - state is ncclSuccess (idle), ncclInProgress (initialising or
 *    operations pending) or the first error (sticky, message in msg).
 *  - An operation's buffers are read by MPI until it completes and its
 *    receive buffer is written only at completion (reductions) or by MPI.
 *  - Not thread-safe: one thread drives all communicators (what llmforge
 *    does); the group depth is process-wide.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <mpi.h>

#include "comm/comm_impl.h"
#include "core/bf16.h"
#include "nccl/shim/nccl_shim.h"
#include "shim/lf_shim.h"

typedef enum { OP_ALL_REDUCE, OP_REDUCE, OP_BROADCAST, OP_REDUCE_SCATTER, OP_ALL_GATHER } op_kind;

typedef struct pending {
    op_kind kind;
    MPI_Request req;
    void *recv;
    size_t count; /* floats folded into recv (reductions) */
    lf_comm_op op;
    int fold; /* 1: fold scratch into recv at completion */
    int bf16; /* the elements are bf16: scratch holds their bits, folded through wide */
    float *scratch;
    float *wide; /* bf16: (nranks + 1) * count floats, the widened rows and the fp32 fold */
    struct pending *next;
} pending;

struct ncclComm {
    int nranks, rank, blocking;
    MPI_Comm comm;
    int have_comm;
    ncclResult_t state;
    int init_phase; /* 0 done, 1 waiting for the duplicate, 2 for the ids */
    MPI_Request init_req;
    ncclUniqueId id;
    char *ids; /* nranks ids (phase 2) */
    pending *head, *tail;
    int aborted;
    char msg[512];
};

static char g_last[512];
static int g_group;
#define MAX_TOUCHED 8
static ncclComm_t g_touched[MAX_TOUCHED];
static int g_n_touched;

/* ---------------------------------------------------------------- errors */
static ncclResult_t fail(ncclComm_t comm, ncclResult_t r, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static ncclResult_t fail(ncclComm_t comm, ncclResult_t r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_last, sizeof g_last, fmt, ap);
    va_end(ap);
    if (comm) snprintf(comm->msg, sizeof comm->msg, "%s", g_last);
    return r;
}

/* A failure of the communicator's traffic: sticky. */
static ncclResult_t fail_mpi(ncclComm_t comm, int rc, const char *call) {
    char s[MPI_MAX_ERROR_STRING + 1];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS || len <= 0) snprintf(s, sizeof s, "MPI error %d", rc);
    s[len > 0 && len <= MPI_MAX_ERROR_STRING ? len : MPI_MAX_ERROR_STRING] = '\0';
    comm->state = ncclSystemError;
    return fail(comm, ncclSystemError, "NCCL shim: %s failed on rank %d: %s", call, comm->rank, s);
}

const char *ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

const char *ncclGetLastError(ncclComm_t comm) { return comm ? comm->msg : g_last; }

ncclResult_t ncclGetVersion(int *version) {
    if (!version) return fail(NULL, ncclInvalidArgument, "ncclGetVersion: version is NULL");
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    if (!id) return fail(NULL, ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
    memset(id, 0, sizeof *id);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long v[3] = {(long long)getpid(), (long long)ts.tv_sec, (long long)ts.tv_nsec};
    memcpy(id->internal, "llmforge-nccl-shim", 18);
    memcpy(id->internal + 32, v, sizeof v);
    return ncclSuccess;
}

/* ---------------------------------------------------------------- progress */
/* A reduction's fold: fp32 rows in rank order, the mpi communicator's; bf16
 * rows widened (exact), folded so in fp32, rounded once (comm.h "bf16"). */
static void complete(pending *p, int nranks) {
    if (!p->fold) return;
    if (!p->bf16) {
        lf__comm_reduce_f32(p->recv, p->scratch, p->count, nranks, p->count, p->op);
        return;
    }
    const size_t rows = p->count * (size_t)nranks;
    float *out = p->wide + rows;
    lf__bf16_widen(p->wide, (const uint16_t *)p->scratch, rows);
    lf__comm_reduce_f32(out, p->wide, p->count, nranks, p->count, p->op);
    lf__bf16_round(p->recv, out, p->count);
}

static void free_op(pending *p) {
    free(p->wide);
    free(p->scratch);
    free(p);
}

/* Advance initialisation and the queue as far as MPI lets without waiting. */
static void progress(ncclComm_t comm) {
    if (comm->aborted || (comm->state != ncclSuccess && comm->state != ncclInProgress)) return;
    int done = 0, rc;
    if (comm->init_phase == 1) {
        if ((rc = MPI_Test(&comm->init_req, &done, MPI_STATUS_IGNORE)) != MPI_SUCCESS) {
            fail_mpi(comm, rc, "MPI_Comm_idup");
            return;
        }
        if (!done) return;
        comm->have_comm = 1;
        MPI_Comm_set_errhandler(comm->comm, MPI_ERRORS_RETURN);
        rc = MPI_Iallgather(comm->id.internal, NCCL_UNIQUE_ID_BYTES, MPI_BYTE, comm->ids, NCCL_UNIQUE_ID_BYTES,
                            MPI_BYTE, comm->comm, &comm->init_req);
        if (rc != MPI_SUCCESS) {
            fail_mpi(comm, rc, "MPI_Iallgather (unique ids)");
            return;
        }
        comm->init_phase = 2;
    }
    if (comm->init_phase == 2) {
        if ((rc = MPI_Test(&comm->init_req, &done, MPI_STATUS_IGNORE)) != MPI_SUCCESS) {
            fail_mpi(comm, rc, "MPI_Iallgather (unique ids)");
            return;
        }
        if (!done) return;
        comm->init_phase = 0;
        for (int p = 0; p < comm->nranks; p++)
            if (memcmp(comm->ids + (size_t)p * NCCL_UNIQUE_ID_BYTES, comm->id.internal, NCCL_UNIQUE_ID_BYTES)) {
                comm->state = ncclInvalidUsage;
                fail(comm, ncclInvalidUsage, "NCCL shim: rank %d passed another ncclUniqueId than rank %d", p,
                     comm->rank);
                return;
            }
        free(comm->ids);
        comm->ids = NULL;
    }
    while (comm->head) {
        pending *p = comm->head;
        if ((rc = MPI_Test(&p->req, &done, MPI_STATUS_IGNORE)) != MPI_SUCCESS) {
            fail_mpi(comm, rc, "an MPI collective");
            return;
        }
        if (!done) break;
        complete(p, comm->nranks);
        comm->head = p->next;
        if (!comm->head) comm->tail = NULL;
        free_op(p);
    }
    comm->state = comm->head || comm->init_phase ? ncclInProgress : ncclSuccess;
}

/* A blocking communicator: wait here (no deadline, as NCCL's blocking calls). */
static ncclResult_t drive(ncclComm_t comm) {
    for (long it = 0; comm->state == ncclInProgress; it++) {
        progress(comm);
        if (comm->state == ncclInProgress && it > 1000) {
            struct timespec ts = {0, 100000};
            nanosleep(&ts, NULL);
        }
    }
    return comm->state;
}

/* What a call returns once its operation is queued. */
static ncclResult_t queued(ncclComm_t comm) {
    if (g_group > 0) {
        int seen = 0;
        for (int i = 0; i < g_n_touched; i++) seen |= g_touched[i] == comm;
        if (!seen && g_n_touched < MAX_TOUCHED) g_touched[g_n_touched++] = comm;
        return ncclSuccess;
    }
    progress(comm);
    if (comm->blocking) return drive(comm);
    return comm->state;
}

/* ---------------------------------------------------------------- communicators */
ncclResult_t ncclCommInitRankConfig(ncclComm_t *out, int nranks, ncclUniqueId id, int rank, ncclConfig_t *config) {
    if (!out) return fail(NULL, ncclInvalidArgument, "ncclCommInitRankConfig: comm is NULL");
    *out = NULL;
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return fail(NULL, ncclInvalidArgument, "ncclCommInitRankConfig: rank %d of %d", rank, nranks);
    if (memcmp(id.internal, "llmforge-nccl-shim", 18) != 0)
        return fail(NULL, ncclInvalidArgument, "ncclCommInitRankConfig: not an id from ncclGetUniqueId");
    ncclComm_t comm = calloc(1, sizeof *comm);
    if (!comm) return fail(NULL, ncclSystemError, "ncclCommInitRankConfig: out of memory");
    comm->nranks = nranks;
    comm->rank = rank;
    comm->blocking = !config || config->blocking == NCCL_CONFIG_UNDEF_INT || config->blocking != 0;
    comm->id = id;
    comm->state = ncclSuccess;
    if (nranks > 1) {
        int inited = 0, finalized = 0, wr = -1, ws = 0;
        MPI_Initialized(&inited);
        MPI_Finalized(&finalized);
        if (!inited || finalized) {
            free(comm);
            return fail(NULL, ncclInvalidUsage,
                        "NCCL shim: %d ranks need MPI, which is not initialised (the nccl "
                        "communicator opens its mpi control handle first)",
                        nranks);
        }
        MPI_Comm_rank(MPI_COMM_WORLD, &wr);
        MPI_Comm_size(MPI_COMM_WORLD, &ws);
        if (ws != nranks || wr != rank) {
            free(comm);
            return fail(NULL, ncclInvalidArgument,
                        "NCCL shim: rank %d of %d, but MPI_COMM_WORLD has rank %d of %d "
                        "(the shim's communicators span the MPI world)",
                        rank, nranks, wr, ws);
        }
        comm->ids = malloc((size_t)nranks * NCCL_UNIQUE_ID_BYTES);
        if (!comm->ids) {
            free(comm);
            return fail(NULL, ncclSystemError, "ncclCommInitRankConfig: out of memory");
        }
        int rc = MPI_Comm_idup(MPI_COMM_WORLD, &comm->comm, &comm->init_req);
        if (rc != MPI_SUCCESS) {
            free(comm->ids);
            free(comm);
            return fail(NULL, ncclSystemError, "NCCL shim: MPI_Comm_idup failed (%d)", rc);
        }
        comm->init_phase = 1;
        comm->state = ncclInProgress;
    }
    *out = comm;
    progress(comm);
    if (comm->blocking) {
        ncclResult_t r = drive(comm);
        if (r != ncclSuccess) snprintf(g_last, sizeof g_last, "%s", comm->msg);
        return r;
    }
    return comm->state;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *err) {
    if (!comm || !err) return fail(NULL, ncclInvalidArgument, "ncclCommGetAsyncError: NULL argument");
    progress(comm);
    *err = comm->state;
    return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count) {
    if (!comm || !count) return fail(NULL, ncclInvalidArgument, "ncclCommCount: NULL argument");
    *count = comm->nranks;
    return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank) {
    if (!comm || !rank) return fail(NULL, ncclInvalidArgument, "ncclCommUserRank: NULL argument");
    *rank = comm->rank;
    return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
    if (!comm) return fail(NULL, ncclInvalidArgument, "ncclCommFinalize: comm is NULL");
    progress(comm);
    return comm->blocking ? drive(comm) : comm->state;
}

/* Free what no MPI request still uses; leave the rest (it cannot be cancelled). */
static void release(ncclComm_t comm) {
    int busy = comm->head != NULL || comm->init_phase != 0;
    if (busy) return; /* pending MPI requests write into these: the process is about to end */
    if (comm->have_comm) MPI_Comm_free(&comm->comm);
    free(comm->ids);
    free(comm);
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (!comm) return ncclSuccess;
    progress(comm);
    release(comm);
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
    if (!comm) return ncclSuccess;
    comm->aborted = 1;
    release(comm);
    return ncclSuccess;
}

/* ---------------------------------------------------------------- collectives */
static size_t type_size(ncclDataType_t t) {
    switch (t) {
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 0;
    }
}

/* Checks every call shares; on success *opp is the reduction (when wanted). */
static ncclResult_t check(const char *fn, ncclComm_t comm, const void *send, const void *recv, size_t send_elems,
                          size_t recv_elems, ncclDataType_t dt, int reduce, ncclRedOp_t op, lf_comm_op *opp,
                          cudaStream_t stream, int need_send, int need_recv) {
    if (!comm) return fail(NULL, ncclInvalidArgument, "%s: comm is NULL", fn);
    if (comm->aborted) return fail(comm, ncclInvalidUsage, "%s: the communicator was aborted", fn);
    if (comm->state != ncclSuccess && comm->state != ncclInProgress) return comm->state;
    if (comm->init_phase)
        return fail(comm, ncclInvalidUsage,
                    "%s: the communicator is still initialising (poll "
                    "ncclCommGetAsyncError until ncclSuccess first)",
                    fn);
    size_t es = type_size(dt);
    if (!es) return fail(comm, ncclInvalidArgument, "%s: datatype %d", fn, (int)dt);
    if (reduce) {
        if (dt != ncclFloat32 && dt != ncclBfloat16)
            return fail(comm, ncclInvalidArgument, "%s: the NCCL shim reduces float32 and bfloat16 only (datatype %d)",
                        fn, (int)dt);
        switch (op) {
        case ncclSum: *opp = LF_COMM_SUM; break;
        case ncclAvg: *opp = LF_COMM_AVG; break;
        case ncclMax: *opp = LF_COMM_MAX; break;
        case ncclMin: *opp = LF_COMM_MIN; break;
        default: return fail(comm, ncclInvalidArgument, "%s: the NCCL shim has no reduction %d", fn, (int)op);
        }
    }
    size_t most = send_elems > recv_elems ? send_elems : recv_elems;
    if (most > (size_t)INT_MAX / (size_t)comm->nranks / es)
        return fail(comm, ncclInvalidArgument, "%s: %zu elements exceed the NCCL shim's MPI counts", fn, most);
    if (need_send && send_elems && (!send || !lf_shim_device_range(send, send_elems * es)))
        return fail(comm, ncclInvalidArgument,
                    "%s: sendbuff [%p, +%zu bytes) is not device memory (not inside one "
                    "cudaMalloc allocation)",
                    fn, send, send_elems * es);
    if (need_recv && recv_elems && (!recv || !lf_shim_device_range(recv, recv_elems * es)))
        return fail(comm, ncclInvalidArgument,
                    "%s: recvbuff [%p, +%zu bytes) is not device memory (not inside one "
                    "cudaMalloc allocation)",
                    fn, recv, recv_elems * es);
    if (cudaStreamQuery(stream) == cudaErrorInvalidResourceHandle) {
        (void)cudaGetLastError();
        return fail(comm, ncclInvalidArgument, "%s: stream %p is not a live stream", fn, (void *)stream);
    }
    return ncclSuccess;
}

/* A pending operation; a reduction (scratch > 0: the gathered rows, in
 * elements of dt) folds them into recv at completion. */
static pending *new_op(ncclComm_t comm, op_kind k, void *recv, size_t fold_count, lf_comm_op op, size_t scratch,
                       ncclDataType_t dt) {
    pending *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->kind = k;
    p->recv = recv;
    p->count = fold_count;
    p->op = op;
    p->fold = scratch > 0;
    p->bf16 = dt == ncclBfloat16;
    if (scratch && !(p->scratch = malloc(scratch * sizeof(float)))) {
        free(p);
        return NULL;
    }
    if (scratch && p->bf16 && !(p->wide = malloc((scratch + fold_count) * sizeof(float)))) {
        free_op(p);
        return NULL;
    }
    (void)comm;
    return p;
}

/* The MPI type of a reduction's elements (fp32 or bf16 bits). */
static MPI_Datatype mpi_type(ncclDataType_t dt) { return dt == ncclBfloat16 ? MPI_UINT16_T : MPI_FLOAT; }

static ncclResult_t enqueue(ncclComm_t comm, pending *p, int rc, const char *call) {
    if (rc != MPI_SUCCESS) {
        free_op(p);
        return fail_mpi(comm, rc, call);
    }
    if (comm->tail) comm->tail->next = p;
    else comm->head = p;
    comm->tail = p;
    comm->state = ncclInProgress;
    return queued(comm);
}

#define NOMEM(fn) fail(comm, ncclSystemError, "%s: out of memory", fn)

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t n, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
    lf_comm_op o = LF_COMM_SUM;
    ncclResult_t r = check("ncclAllReduce", comm, send, recv, n, n, dt, 1, op, &o, stream, 1, 1);
    if (r != ncclSuccess) return r;
    if (comm->nranks == 1 || n == 0) {
        if (n && recv != send) memmove(recv, send, n * type_size(dt));
        return ncclSuccess;
    }
    pending *p = new_op(comm, OP_ALL_REDUCE, recv, n, o, n * (size_t)comm->nranks, dt);
    if (!p) return NOMEM("ncclAllReduce");
    int rc = MPI_Iallgather(send, (int)n, mpi_type(dt), p->scratch, (int)n, mpi_type(dt), comm->comm, &p->req);
    return enqueue(comm, p, rc, "MPI_Iallgather (ncclAllReduce)");
}

ncclResult_t ncclReduce(const void *send, void *recv, size_t n, ncclDataType_t dt, ncclRedOp_t op, int root,
                        ncclComm_t comm, cudaStream_t stream) {
    lf_comm_op o = LF_COMM_SUM;
    int is_root = comm && comm->rank == root;
    ncclResult_t r = check("ncclReduce", comm, send, recv, n, n, dt, 1, op, &o, stream, 1, is_root);
    if (r != ncclSuccess) return r;
    if (root < 0 || root >= comm->nranks) return fail(comm, ncclInvalidArgument, "ncclReduce: root %d", root);
    if (comm->nranks == 1 || n == 0) {
        if (n && recv != send) memmove(recv, send, n * type_size(dt));
        return ncclSuccess;
    }
    pending *p = new_op(comm, OP_REDUCE, recv, n, o, is_root ? n * (size_t)comm->nranks : 0, dt);
    if (!p) return NOMEM("ncclReduce");
    int rc = MPI_Igather(send, (int)n, mpi_type(dt), p->scratch, (int)n, mpi_type(dt), root, comm->comm, &p->req);
    return enqueue(comm, p, rc, "MPI_Igather (ncclReduce)");
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t n, ncclDataType_t dt, int root, ncclComm_t comm,
                           cudaStream_t stream) {
    int is_root = comm && comm->rank == root;
    ncclResult_t r = check("ncclBroadcast", comm, send, recv, n, n, dt, 0, ncclSum, NULL, stream, is_root, 1);
    if (r != ncclSuccess) return r;
    if (root < 0 || root >= comm->nranks) return fail(comm, ncclInvalidArgument, "ncclBroadcast: root %d", root);
    size_t bytes = n * type_size(dt);
    if (is_root && bytes && recv != send) memmove(recv, send, bytes);
    if (comm->nranks == 1 || n == 0) return ncclSuccess;
    pending *p = new_op(comm, OP_BROADCAST, recv, 0, LF_COMM_SUM, 0, dt);
    if (!p) return NOMEM("ncclBroadcast");
    int rc = MPI_Ibcast(recv, (int)bytes, MPI_BYTE, root, comm->comm, &p->req);
    return enqueue(comm, p, rc, "MPI_Ibcast (ncclBroadcast)");
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t k, ncclDataType_t dt, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t stream) {
    lf_comm_op o = LF_COMM_SUM;
    size_t P = comm ? (size_t)comm->nranks : 1;
    ncclResult_t r = check("ncclReduceScatter", comm, send, recv, k * P, k, dt, 1, op, &o, stream, 1, 1);
    if (r != ncclSuccess) return r;
    if (P == 1 || k == 0) {
        if (k && recv != send) memmove(recv, send, k * type_size(dt));
        return ncclSuccess;
    }
    pending *p = new_op(comm, OP_REDUCE_SCATTER, recv, k, o, k * P, dt);
    if (!p) return NOMEM("ncclReduceScatter");
    int rc = MPI_Ialltoall(send, (int)k, mpi_type(dt), p->scratch, (int)k, mpi_type(dt), comm->comm, &p->req);
    return enqueue(comm, p, rc, "MPI_Ialltoall (ncclReduceScatter)");
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t k, ncclDataType_t dt, ncclComm_t comm,
                           cudaStream_t stream) {
    size_t P = comm ? (size_t)comm->nranks : 1;
    ncclResult_t r = check("ncclAllGather", comm, send, recv, k, k * P, dt, 0, ncclSum, NULL, stream, 1, 1);
    if (r != ncclSuccess) return r;
    size_t bytes = k * type_size(dt);
    char *mine = (char *)recv + (size_t)comm->rank * bytes;
    if (P == 1 || k == 0) {
        if (bytes && mine != send) memmove(mine, send, bytes);
        return ncclSuccess;
    }
    pending *p = new_op(comm, OP_ALL_GATHER, recv, 0, LF_COMM_SUM, 0, dt);
    if (!p) return NOMEM("ncclAllGather");
    int rc;
    if (mine == send) rc = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_BYTE, recv, (int)bytes, MPI_BYTE, comm->comm, &p->req);
    else rc = MPI_Iallgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, comm->comm, &p->req);
    return enqueue(comm, p, rc, "MPI_Iallgather (ncclAllGather)");
}

ncclResult_t ncclGroupStart(void) {
    if (g_group++ == 0) g_n_touched = 0;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
    if (g_group <= 0) return fail(NULL, ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    if (--g_group > 0) return ncclSuccess;
    ncclResult_t out = ncclSuccess;
    for (int i = 0; i < g_n_touched; i++) {
        ncclComm_t comm = g_touched[i];
        progress(comm);
        ncclResult_t r = comm->blocking ? drive(comm) : comm->state;
        if (r != ncclSuccess && (out == ncclSuccess || out == ncclInProgress)) out = r;
    }
    g_n_touched = 0;
    return out;
}
