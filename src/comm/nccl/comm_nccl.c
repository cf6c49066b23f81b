/*
 * The "nccl" communicator: float collectives on device memory through NCCL,
 * host values through a control handle beside it. Built twice
 * (cmake/cuda.cmake): lf_comm_nccl against libnccl and the CUDA runtime
 * (LF_HAVE_NCCL, with the CUDA build), and lf_comm_nccl_shim against
 * llmforge's NCCL shim on MPI over the CUDA-on-CPU shim (nccl_api.h), what
 * CI runs. Both register the kind with lf_comm_nccl_register.
 *
 * Two paths:
 *  - device: all_reduce, reduce_scatter, all_gather and lf_comm_broadcast
 *    run as NCCL collectives on the communicator's own stream (comm_stream),
 *    ordered against the compute stream (lf_comm_set_stream: the cuda
 *    backend's stream) by events: `ready` recorded on the compute stream and
 *    waited for by comm_stream before the collective, `done` recorded on
 *    comm_stream after it and waited for by the compute stream.
 *  - host: broadcast_bytes, barrier and the f64/i64 reductions (config
 *    hash, skip and stop decisions, checkpoint agreement) go to the control
 *    handle's table directly, with the control handle's position (seq,
 *    coll, count, context) set to this handle's first, so every message and
 *    every "where are you" answer names the nccl handle's collective.
 *    The control kind is "mpi" when MPI launched the job (mpirun, srun),
 *    "single" for one rank; under torchrun (RANK/WORLD_SIZE, no MPI) it is
 *    the "tcp" kind, whose open is the rendezvous at MASTER_ADDR:MASTER_PORT:
 *    it carries the NCCL id and the host values. It fills no serve/diagnose
 *    slots, so an NCCL timeout there names this rank and the collective but
 *    not the missing peers.
 *
 * Bootstrap: rank 0 calls ncclGetUniqueId and broadcasts it over the
 * control handle (with a flag, so a failure there is reported everywhere
 * instead of timing out), then every rank calls ncclCommInitRankConfig with
 * blocking = 0 on its current CUDA device (the backend's: open the backend
 * first) and polls ncclCommGetAsyncError under the same deadline as a
 * collective. Close: ncclCommFinalize, polled, then ncclCommDestroy.
 *
 * Never a hang: the communicator is non-blocking, and each collective is
 * followed by a watchdog loop that polls ncclCommGetAsyncError (until the
 * call is enqueued, and for errors NCCL detects asynchronously: a peer that
 * died, a network failure) and cudaStreamQuery(comm_stream) (until it has
 * run) against the deadline of comm.timeout_s from the call's start,
 * answering the control handle's queries meanwhile. On expiry it calls
 * ncclCommAbort (which stops the collective's kernels) and asks the peers
 * over the control handle which did not arrive, as the mpi kind does
 * (comm_mpi.c); NCCL's errors become LF_ERR_IO/DEVICE/INVALID_ARG with
 * ncclGetErrorString and ncclGetLastError. The collectives are blocking for
 * the caller (the host waits for completion) so that the bound holds; the
 * started reduce-scatter (lf_comm_reduce_scatter_start, for overlap) is not,
 * and lf_comm_wait_all holds the same bound for it (below).
 *
 * Uneven partitions: llmforge's parts (lf_comm_partition) differ by one
 * element when n % size != 0, NCCL's reduce-scatter and all-gather need
 * equal parts. n % size == 0 uses ncclReduceScatter / ncclAllGather (whose
 * in-place layouts are llmforge's); otherwise a group of one ncclReduce /
 * ncclBroadcast per part, rooted at its owner (the same bytes moved, more
 * launches).
 *
 * Data types: fp32 (ncclFloat32) and bf16 (ncclBfloat16, the
 * lf_comm_*_bf16 calls: the trainer's comm.grad_dtype: bf16), one code path
 * with the element size as a parameter; lf_comm_broadcast moves bytes.
 *
 * Determinism (comm.h): real NCCL sums in ring or tree order, not the rank
 * order of the mpi kind (bf16: a rounding per hop); the shim folds in rank
 * order in fp32 and rounds bf16 once.
 *
 * NCCL's environment (NCCL_DEBUG, NCCL_SOCKET_IFNAME, NCCL_IB_DISABLE,
 * NCCL_ASYNC_ERROR_HANDLING, ...) is neither read nor changed here: NCCL
 * reads it itself.
 */
#include <stdio.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "cuda_api.h"
#include "nccl/nccl_api.h"
#include "llmforge/comm_nccl.h"

/* A started collective (lf_comm_reduce_scatter_start): its completion
 * event on comm_stream, when it started, what it was (for the watchdog). */
#define NCCL_PENDING 16
typedef struct nccl_pending {
    int64_t ticket;
    double started;
    char desc[192];
} nccl_pending;

typedef struct nccl_state {
    lf_comm *ctl; /* host control handle (mpi, single; tcp under torchrun) */
    ncclComm_t nc;
    int device;
    cudaStream_t comm_stream; /* the collectives' stream */
    cudaStream_t compute;     /* lf_comm_set_stream (NULL: the legacy default stream) */
    cudaEvent_t ready, done;
    int have_stream, have_ready, have_done;
    double started, deadline;
    cudaEvent_t pend_ev[NCCL_PENDING]; /* slot i's completion event */
    cudaEvent_t pend_t0[NCCL_PENDING]; /* recorded before its NCCL call: the two time it (lf_comm_times) */
    int n_pend_ev;                     /* events created */
    nccl_pending pend[NCCL_PENDING];   /* started, not yet completed on the host's watch, in order */
    int n_pend;
    int64_t next_ticket;
} nccl_state;

/* The id message of the bootstrap: ok = 0 when rank 0 could not make one. */
typedef struct id_msg {
    int32_t ok;
    int32_t pad;
    ncclUniqueId id;
    char why[256];
} id_msg;

/* ---------------------------------------------------------------- helpers */
static lf_comm *mirror(lf_comm *c, nccl_state *s) {
    lf_comm *k = s->ctl;
    k->seq = c->seq;
    k->coll = c->coll;
    k->count = c->count;
    k->bf16 = c->bf16;
    memcpy(k->context, c->context, sizeof k->context);
    return k;
}

static lf_status ctl_done(nccl_state *s, lf_status st) {
    if (st != LF_OK && s->ctl->failed == LF_OK) s->ctl->failed = st;
    return st;
}

static void start_clock(lf_comm *c, nccl_state *s) {
    s->started = lf__comm_now_s();
    s->deadline = s->started + c->opts.timeout_s;
}

static void abort_nccl(nccl_state *s) {
    if (!s->nc) return;
    ncclCommAbort(s->nc);
    s->nc = NULL;
}

/* Fail the collective in progress: abort NCCL, ask the peers where they are. */
static lf_status fail_collective(lf_comm *c, nccl_state *s, lf_status st, const char *what) {
    char desc[256], diag[900];
    double waited = lf__comm_now_s() - s->started;
    lf__comm_describe(c, desc, sizeof desc);
    abort_nccl(s);
    diag[0] = '\0';
    if (s->ctl->ops->diagnose) s->ctl->ops->diagnose(mirror(c, s), c, st, diag, sizeof diag);
    if (st == LF_ERR_TIMEOUT)
        return lf_fail(st,
                       "%s timed out on rank %d after %.1f s (comm.timeout_s = %g; NCCL communicator aborted, "
                       "waiting in %s)%s",
                       desc, c->rank, waited, c->opts.timeout_s, what, diag);
    return lf_fail(st, "%s failed on rank %d: %s%s", desc, c->rank, what, diag);
}

static lf_status status_of(ncclResult_t r) {
    switch (r) {
    case ncclUnhandledCudaError: return LF_ERR_DEVICE;
    case ncclInvalidArgument:
    case ncclInvalidUsage: return LF_ERR_INVALID_ARG;
    case ncclInternalError: return LF_ERR_INTERNAL;
    default: return LF_ERR_IO; /* system, remote (a peer died, the network) */
    }
}

static lf_status fail_nccl(lf_comm *c, nccl_state *s, ncclResult_t r, const char *call) {
    char what[900];
    const char *last = s->nc ? ncclGetLastError(s->nc) : ncclGetLastError(NULL);
    snprintf(what, sizeof what, "%s: %s%s%s", call, ncclGetErrorString(r), last && *last ? ": " : "", last ? last : "");
    return fail_collective(c, s, status_of(r), what);
}

static lf_status fail_cuda(lf_comm *c, nccl_state *s, cudaError_t e, const char *call) {
    char what[600];
    snprintf(what, sizeof what, "%s: %s (%s)", call, cudaGetErrorName(e), cudaGetErrorString(e));
    (void)cudaGetLastError();
    return fail_collective(c, s, LF_ERR_DEVICE, what);
}

/* The watchdog: wait for NCCL to take the call (async state leaves
 * ncclInProgress), then, with stream = 1, for comm_stream to run it; then
 * make the compute stream wait for it. Bounded by s->deadline. */
static lf_status wait_nccl(lf_comm *c, nccl_state *s, const char *call, int stream) {
    double t0 = lf__comm_now_s();
    int enqueued = 0;
    for (long it = 0;; it++) {
        ncclResult_t ar = ncclSuccess, r = ncclCommGetAsyncError(s->nc, &ar);
        if (r != ncclSuccess) ar = r;
        if (ar != ncclSuccess && ar != ncclInProgress) return fail_nccl(c, s, ar, call);
        if (ar == ncclSuccess && !enqueued) {
            enqueued = 1;
            if (!stream) return LF_OK;
        }
        if (enqueued) {
            cudaError_t e = cudaStreamQuery(s->comm_stream);
            if (e == cudaSuccess) break;
            if (e != cudaErrorNotReady) return fail_cuda(c, s, e, "cudaStreamQuery (the NCCL stream)");
        }
        if ((it & 15) == 0 && s->ctl->ops->serve) s->ctl->ops->serve(s->ctl, c);
        double now = lf__comm_now_s();
        if (now >= s->deadline) return fail_collective(c, s, LF_ERR_TIMEOUT, call);
        lf__comm_pause(it, now - t0);
    }
    cudaError_t e = cudaEventRecord(s->done, s->comm_stream);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(s->compute, s->done, 0);
    if (e != cudaSuccess) return fail_cuda(c, s, e, "cudaEventRecord/cudaStreamWaitEvent (after the collective)");
    return LF_OK;
}

/* Before a device collective: comm_stream waits for the compute stream's work. */
static lf_status begin_device(lf_comm *c, nccl_state *s) {
    start_clock(c, s);
    cudaError_t e = cudaEventRecord(s->ready, s->compute);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(s->comm_stream, s->ready, 0);
    if (e != cudaSuccess) return fail_cuda(c, s, e, "cudaEventRecord/cudaStreamWaitEvent (before the collective)");
    return LF_OK;
}

static lf_status issued(lf_comm *c, nccl_state *s, ncclResult_t r, const char *call) {
    if (r != ncclSuccess && r != ncclInProgress) return fail_nccl(c, s, r, call);
    return wait_nccl(c, s, call, 1);
}

static ncclRedOp_t red_op(lf_comm_op op) {
    switch (op) {
    case LF_COMM_AVG: return ncclAvg;
    case LF_COMM_MAX: return ncclMax;
    case LF_COMM_MIN: return ncclMin;
    default: return ncclSum;
    }
}

/* ---------------------------------------------------------------- device collectives
 * Each on fp32 (ncclFloat32) or bf16 (ncclBfloat16, lf_comm_*_bf16)
 * elements: dt names NCCL's type, buffers are bytes, offsets elements. */
static size_t dt_size(ncclDataType_t dt) { return dt == ncclBfloat16 ? 2 : 4; }

static lf_status all_reduce_dt(lf_comm *c, void *buf, size_t n, ncclDataType_t dt, lf_comm_op op) {
    nccl_state *s = c->impl;
    if (n == 0) return LF_OK;
    lf_status st = begin_device(c, s);
    if (st != LF_OK) return st;
    return issued(c, s, ncclAllReduce(buf, buf, n, dt, red_op(op), s->nc, s->comm_stream), "ncclAllReduce");
}
static lf_status nccl_all_reduce(lf_comm *c, float *buf, size_t n, lf_comm_op op) {
    return all_reduce_dt(c, buf, n, ncclFloat32, op);
}
static lf_status nccl_all_reduce_bf16(lf_comm *c, uint16_t *buf, size_t n, lf_comm_op op) {
    return all_reduce_dt(c, buf, n, ncclBfloat16, op);
}

/* Enqueue a reduce-scatter on comm_stream; *call names what was called. */
static ncclResult_t enqueue_reduce_scatter(lf_comm *c, nccl_state *s, const void *sendv, void *recv, size_t n,
                                           ncclDataType_t dt, lf_comm_op op, const char **call) {
    size_t P = (size_t)c->size, es = dt_size(dt);
    const char *send = sendv;
    if (n % P == 0) { /* recv == send + rank * n/P is NCCL's in-place layout too */
        *call = "ncclReduceScatter";
        return ncclReduceScatter(send, recv, n / P, dt, red_op(op), s->nc, s->comm_stream);
    }
    *call = "ncclReduce (group, one per part)";
    ncclResult_t r = ncclGroupStart();
    for (int p = 0; p < c->size && (r == ncclSuccess || r == ncclInProgress); p++) {
        size_t off = 0, cnt = 0;
        lf_comm_partition(n, c->size, p, &off, &cnt);
        if (!cnt) continue;
        /* recvbuff is read on the root only */
        r = ncclReduce(send + off * es, p == c->rank ? recv : (void *)(send + off * es), cnt, dt, red_op(op), p, s->nc,
                       s->comm_stream);
    }
    ncclResult_t e = ncclGroupEnd();
    if (r == ncclSuccess || r == ncclInProgress) r = e;
    return r;
}

static lf_status reduce_scatter_dt(lf_comm *c, const void *send, void *recv, size_t n, ncclDataType_t dt,
                                   lf_comm_op op) {
    nccl_state *s = c->impl;
    if (n == 0) return LF_OK;
    lf_status st = begin_device(c, s);
    if (st != LF_OK) return st;
    const char *call = "";
    ncclResult_t r = enqueue_reduce_scatter(c, s, send, recv, n, dt, op, &call);
    return issued(c, s, r, call);
}
static lf_status nccl_reduce_scatter(lf_comm *c, const float *send, float *recv, size_t n, lf_comm_op op) {
    return reduce_scatter_dt(c, send, recv, n, ncclFloat32, op);
}
static lf_status nccl_reduce_scatter_bf16(lf_comm *c, const uint16_t *send, uint16_t *recv, size_t n, lf_comm_op op) {
    return reduce_scatter_dt(c, send, recv, n, ncclBfloat16, op);
}

/* ---------------------------------------------------------------- started collectives
 * Overlap (the trainer's ZeRO-2/3 gradients and ZeRO-3's prefetch of the
 * next unit's parameters): a started reduce-scatter or all-gather is
 * enqueued on comm_stream after the compute stream's work so far, and the
 * host goes on at once (it waits only until NCCL has taken the call, as a
 * blocking collective does first). lf_comm_wait orders the compute stream
 * after it on the device (cudaStreamWaitEvent: no host wait), so compute
 * enqueued before that runs beside it. The watchdog holds for them in
 * lf_comm_wait_all: the host polls each one's event, answering the control
 * handle's queries, until comm.timeout_s after its start, then aborts as
 * for a blocking collective, naming the started one. A blocking collective
 * after starts waits for comm_stream, so for them too. */
static lf_status nccl_wait_all(lf_comm *c);
static ncclResult_t enqueue_all_gather(lf_comm *c, nccl_state *s, const void *send, void *recv, size_t n,
                                       ncclDataType_t dt, const char **call);

/* What a started collective is. */
enum { START_REDUCE_SCATTER = 0, START_ALL_GATHER = 1, START_ALL_REDUCE = 2 };

/* A reduce-scatter, an all-gather or an all-reduce (in place: send == recv), started. */
static lf_status start_collective(lf_comm *c, int kind, const void *send, void *recv, size_t n, ncclDataType_t dt,
                                  lf_comm_op op, int64_t *ticket) {
    nccl_state *s = c->impl;
    *ticket = 0;
    if (n == 0) return LF_OK;
    if (s->n_pend == s->n_pend_ev) { /* every slot taken: the oldest must be complete first */
        lf_status st = nccl_wait_all(c);
        if (st != LF_OK) return st;
    }
    lf_status st = begin_device(c, s);
    if (st != LF_OK) return st;
    cudaError_t e0 = cudaEventRecord(s->pend_t0[s->n_pend], s->comm_stream); /* after comm_stream waited `ready` */
    if (e0 != cudaSuccess) return fail_cuda(c, s, e0, "cudaEventRecord (before a started collective)");
    const char *call = "";
    ncclResult_t r;
    if (kind == START_ALL_REDUCE) {
        call = "ncclAllReduce";
        r = ncclAllReduce(send, recv, n, dt, red_op(op), s->nc, s->comm_stream);
    } else {
        r = kind == START_ALL_GATHER ? enqueue_all_gather(c, s, send, recv, n, dt, &call)
                                     : enqueue_reduce_scatter(c, s, send, recv, n, dt, op, &call);
    }
    if (r != ncclSuccess && r != ncclInProgress) return fail_nccl(c, s, r, call);
    if ((st = wait_nccl(c, s, call, 0)) != LF_OK) return st; /* taken by NCCL, not waited for */
    const int i = s->n_pend;
    cudaError_t e = cudaEventRecord(s->pend_ev[i], s->comm_stream);
    if (e != cudaSuccess) return fail_cuda(c, s, e, "cudaEventRecord (after a started collective)");
    nccl_pending *p = &s->pend[i];
    p->ticket = ++s->next_ticket;
    p->started = s->started;
    lf__comm_describe(c, p->desc, sizeof p->desc);
    s->n_pend++;
    *ticket = p->ticket;
    return LF_OK;
}

static lf_status nccl_reduce_scatter_start(lf_comm *c, const float *send, float *recv, size_t n, lf_comm_op op,
                                           int64_t *ticket) {
    return start_collective(c, START_REDUCE_SCATTER, send, recv, n, ncclFloat32, op, ticket);
}
static lf_status nccl_reduce_scatter_start_bf16(lf_comm *c, const uint16_t *send, uint16_t *recv, size_t n,
                                                lf_comm_op op, int64_t *ticket) {
    return start_collective(c, START_REDUCE_SCATTER, send, recv, n, ncclBfloat16, op, ticket);
}

static lf_status nccl_all_gather_start(lf_comm *c, const float *send, float *recv, size_t n, int64_t *ticket) {
    return start_collective(c, START_ALL_GATHER, send, recv, n, ncclFloat32, LF_COMM_SUM, ticket);
}
static lf_status nccl_all_gather_start_bf16(lf_comm *c, const uint16_t *send, uint16_t *recv, size_t n,
                                            int64_t *ticket) {
    return start_collective(c, START_ALL_GATHER, send, recv, n, ncclBfloat16, LF_COMM_SUM, ticket);
}

static lf_status nccl_all_reduce_start(lf_comm *c, float *buf, size_t n, lf_comm_op op, int64_t *ticket) {
    return start_collective(c, START_ALL_REDUCE, buf, buf, n, ncclFloat32, op, ticket);
}

static lf_status nccl_wait(lf_comm *c, int64_t ticket) {
    nccl_state *s = c->impl;
    for (int i = 0; i < s->n_pend; i++) {
        if (s->pend[i].ticket != ticket) continue;
        cudaError_t e = cudaStreamWaitEvent(s->compute, s->pend_ev[i], 0);
        if (e != cudaSuccess) return fail_cuda(c, s, e, "cudaStreamWaitEvent (a started collective)");
        return LF_OK;
    }
    return LF_OK; /* completed and retired by lf_comm_wait_all, or never started */
}

static lf_status nccl_wait_all(lf_comm *c) {
    nccl_state *s = c->impl;
    for (int i = 0; i < s->n_pend; i++) {
        const nccl_pending *p = &s->pend[i];
        s->started = p->started;
        s->deadline = p->started + c->opts.timeout_s;
        char what[256];
        snprintf(what, sizeof what, "the started %s", p->desc);
        for (long it = 0;; it++) {
            cudaError_t e = cudaEventQuery(s->pend_ev[i]);
            if (e == cudaSuccess) break;
            if (e != cudaErrorNotReady) return fail_cuda(c, s, e, "cudaEventQuery (a started collective)");
            ncclResult_t ar = ncclSuccess, r = ncclCommGetAsyncError(s->nc, &ar);
            if (r != ncclSuccess) ar = r;
            if (ar != ncclSuccess && ar != ncclInProgress) return fail_nccl(c, s, ar, what);
            if ((it & 15) == 0 && s->ctl->ops->serve) s->ctl->ops->serve(s->ctl, c);
            double now = lf__comm_now_s();
            if (now >= s->deadline) return fail_collective(c, s, LF_ERR_TIMEOUT, what);
            lf__comm_pause(it, now - p->started);
        }
        float ms = 0; /* its time on comm_stream: busy communication */
        if (cudaEventElapsedTime(&ms, s->pend_t0[i], s->pend_ev[i]) == cudaSuccess && ms > 0) c->busy_ms += ms;
        (void)cudaGetLastError();
        cudaError_t e = cudaStreamWaitEvent(s->compute, s->pend_ev[i], 0);
        if (e != cudaSuccess) return fail_cuda(c, s, e, "cudaStreamWaitEvent (a started collective)");
    }
    s->n_pend = 0;
    return LF_OK;
}

/* Enqueue an all-gather on comm_stream; *call names what was called. */
static ncclResult_t enqueue_all_gather(lf_comm *c, nccl_state *s, const void *send, void *recvv, size_t n,
                                       ncclDataType_t dt, const char **call) {
    size_t P = (size_t)c->size, es = dt_size(dt);
    char *recv = recvv;
    if (n % P == 0) { /* send == recv + rank * n/P is NCCL's in-place layout too */
        *call = "ncclAllGather";
        return ncclAllGather(send, recv, n / P, dt, s->nc, s->comm_stream);
    }
    *call = "ncclBroadcast (group, one per part)";
    ncclResult_t r = ncclGroupStart();
    for (int p = 0; p < c->size && (r == ncclSuccess || r == ncclInProgress); p++) {
        size_t off = 0, cnt = 0;
        lf_comm_partition(n, c->size, p, &off, &cnt);
        if (!cnt) continue;
        r = ncclBroadcast(p == c->rank ? send : (const void *)(recv + off * es), recv + off * es, cnt, dt, p, s->nc,
                          s->comm_stream);
    }
    ncclResult_t e = ncclGroupEnd();
    if (r == ncclSuccess || r == ncclInProgress) r = e;
    return r;
}

static lf_status all_gather_dt(lf_comm *c, const void *send, void *recv, size_t n, ncclDataType_t dt) {
    nccl_state *s = c->impl;
    if (n == 0) return LF_OK;
    lf_status st = begin_device(c, s);
    if (st != LF_OK) return st;
    const char *call = "";
    ncclResult_t r = enqueue_all_gather(c, s, send, recv, n, dt, &call);
    return issued(c, s, r, call);
}
static lf_status nccl_all_gather(lf_comm *c, const float *send, float *recv, size_t n) {
    return all_gather_dt(c, send, recv, n, ncclFloat32);
}
static lf_status nccl_all_gather_bf16(lf_comm *c, const uint16_t *send, uint16_t *recv, size_t n) {
    return all_gather_dt(c, send, recv, n, ncclBfloat16);
}

static lf_status nccl_broadcast(lf_comm *c, void *buf, size_t bytes, int root) {
    nccl_state *s = c->impl;
    if (bytes == 0) return LF_OK;
    lf_status st = begin_device(c, s);
    if (st != LF_OK) return st;
    return issued(c, s, ncclBroadcast(buf, buf, bytes, ncclUint8, root, s->nc, s->comm_stream), "ncclBroadcast");
}

/* ---------------------------------------------------------------- host values (control handle) */
static lf_status nccl_broadcast_bytes(lf_comm *c, void *buf, size_t bytes, int root) {
    nccl_state *s = c->impl;
    lf_comm *k = mirror(c, s);
    return ctl_done(s, k->ops->broadcast(k, buf, bytes, root));
}

static lf_status nccl_barrier(lf_comm *c) {
    nccl_state *s = c->impl;
    lf_comm *k = mirror(c, s);
    return ctl_done(s, k->ops->barrier(k));
}

static lf_status nccl_all_reduce_f64(lf_comm *c, double *v, size_t n, lf_comm_op op) {
    nccl_state *s = c->impl;
    lf_comm *k = mirror(c, s);
    return ctl_done(s, k->ops->all_reduce_f64(k, v, n, op));
}

static lf_status nccl_all_reduce_i64(lf_comm *c, int64_t *v, size_t n, lf_comm_op op) {
    nccl_state *s = c->impl;
    lf_comm *k = mirror(c, s);
    return ctl_done(s, k->ops->all_reduce_i64(k, v, n, op));
}

static lf_status nccl_set_stream(lf_comm *c, void *stream) {
    nccl_state *s = c->impl;
    cudaError_t e = cudaStreamQuery((cudaStream_t)stream);
    if (e != cudaSuccess && e != cudaErrorNotReady) {
        (void)cudaGetLastError();
        return lf_fail(LF_ERR_DEVICE, "nccl communicator: stream %p: cudaStreamQuery: %s (%s)", stream,
                       cudaGetErrorName(e), cudaGetErrorString(e));
    }
    s->compute = (cudaStream_t)stream;
    return LF_OK;
}

/* ---------------------------------------------------------------- open / close */
static const char *control_kind(const lf_comm_env *e) {
    if (e->size <= 1) return "single";
    if (e->launcher == LF_COMM_LAUNCHER_TORCHRUN) return "tcp"; /* the rendezvous kind, where registered */
    return "mpi";
}

static void free_state(nccl_state *s, lf_status failed) {
    if (!s) return;
    if (failed == LF_OK && s->nc) {
        ncclCommDestroy(s->nc);
        s->nc = NULL;
    }
    abort_nccl(s);
    for (int i = 0; i < s->n_pend_ev; i++) {
        cudaEventDestroy(s->pend_ev[i]);
        cudaEventDestroy(s->pend_t0[i]);
    }
    if (s->have_done) cudaEventDestroy(s->done);
    if (s->have_ready) cudaEventDestroy(s->ready);
    if (s->have_stream) cudaStreamDestroy(s->comm_stream);
    (void)cudaGetLastError();
    if (s->ctl) {
        /* a collective that timed out or lost a peer may leave the control
         * path's requests in flight: the mpi close must then leave them (and
         * not finalize); a refused call (a host pointer, a bad argument)
         * started nothing, so the control handle closes normally */
        if ((failed == LF_ERR_TIMEOUT || failed == LF_ERR_IO) && s->ctl->failed == LF_OK) s->ctl->failed = failed;
        lf_comm_close(s->ctl);
    }
    lf_free(s);
}

static lf_status nccl_open(lf_comm *c) {
    nccl_state *s = lf_calloc(sizeof *s);
    if (!s) return lf_fail(LF_ERR_NOMEM, "nccl communicator: out of memory");
    lf_comm_options o = c->opts;
    o.device_tensors = 0;
    const char *ck = control_kind(&c->env);
    lf_status st = lf_comm_open(&s->ctl, ck, &o);
    if (st != LF_OK) {
        lf_error_prefix("nccl communicator: opening its '%s' control handle%s", ck,
                        !strcmp(ck, "tcp") ? " (torchrun's variables: the rendezvous at MASTER_ADDR:MASTER_PORT)" : "");
        lf_free(s);
        return st;
    }
    c->impl = s;
    c->rank = s->ctl->rank;
    c->size = s->ctl->size;
    c->local_rank = s->ctl->local_rank;
    c->local_size = s->ctl->local_size;
    c->coll = LF_COMM_COLL_OPEN;

    const char *call = "cudaGetDevice";
    cudaError_t e = cudaGetDevice(&s->device);
    if (e == cudaSuccess && (call = "cudaStreamCreateWithFlags",
                             e = cudaStreamCreateWithFlags(&s->comm_stream, cudaStreamNonBlocking)) == cudaSuccess)
        s->have_stream = 1;
    if (e == cudaSuccess && (call = "cudaEventCreateWithFlags",
                             e = cudaEventCreateWithFlags(&s->ready, cudaEventDisableTiming)) == cudaSuccess)
        s->have_ready = 1;
    if (e == cudaSuccess && (e = cudaEventCreateWithFlags(&s->done, cudaEventDisableTiming)) == cudaSuccess)
        s->have_done = 1;
    /* a slot's two events time its collective (cudaEventElapsedTime): timing stays on */
    while (e == cudaSuccess && s->n_pend_ev < NCCL_PENDING &&
           (e = cudaEventCreate(&s->pend_ev[s->n_pend_ev])) == cudaSuccess) {
        if ((e = cudaEventCreate(&s->pend_t0[s->n_pend_ev])) != cudaSuccess) {
            cudaEventDestroy(s->pend_ev[s->n_pend_ev]);
            break;
        }
        s->n_pend_ev++;
    }
    if (e != cudaSuccess) {
        st = lf_fail(LF_ERR_DEVICE, "nccl communicator (rank %d): %s: %s (%s)", c->rank, call, cudaGetErrorName(e),
                     cudaGetErrorString(e));
        (void)cudaGetLastError();
        goto fail;
    }

    /* the id: made by rank 0, sent over the control handle */
    id_msg msg;
    memset(&msg, 0, sizeof msg);
    if (c->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&msg.id);
        msg.ok = r == ncclSuccess;
        if (!msg.ok) snprintf(msg.why, sizeof msg.why, "%s: %s", ncclGetErrorString(r), ncclGetLastError(NULL));
    }
    start_clock(c, s);
    lf_comm *k = mirror(c, s);
    if ((st = ctl_done(s, k->ops->broadcast(k, &msg, sizeof msg, 0))) != LF_OK) goto fail;
    if (!msg.ok) {
        msg.why[sizeof msg.why - 1] = '\0';
        st = lf_fail(LF_ERR_IO, "nccl communicator: rank 0 could not make the NCCL id (ncclGetUniqueId: %s)", msg.why);
        goto fail;
    }
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0; /* every wait is ours, bounded by the timeout */
    start_clock(c, s);
    ncclResult_t r = ncclCommInitRankConfig(&s->nc, c->size, msg.id, c->rank, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) {
        st = fail_nccl(c, s, r, "ncclCommInitRankConfig");
        goto fail;
    }
    if ((st = wait_nccl(c, s, "ncclCommInitRankConfig", 0)) != LF_OK) goto fail;
    s->compute = NULL;
    return LF_OK;

fail:
    c->impl = NULL;
    free_state(s, st == LF_ERR_TIMEOUT || st == LF_ERR_IO ? st : LF_OK);
    return st;
}

static void nccl_close(lf_comm *c) {
    nccl_state *s = c->impl;
    if (!s) return;
    lf_status failed = c->failed;
    if (failed == LF_OK && s->nc) { /* flush, bounded like a collective; abort if it does not finish */
        start_clock(c, s);
        ncclResult_t r = ncclCommFinalize(s->nc), ar = r;
        for (long it = 0; r == ncclSuccess || r == ncclInProgress; it++) {
            if (ncclCommGetAsyncError(s->nc, &ar) != ncclSuccess || ar != ncclInProgress) break;
            double now = lf__comm_now_s();
            if (now >= s->deadline) {
                ar = ncclInternalError;
                break;
            }
            lf__comm_pause(it, now - s->started);
        }
        if (ar != ncclSuccess || (r != ncclSuccess && r != ncclInProgress)) abort_nccl(s);
    }
    free_state(s, failed);
    c->impl = NULL;
}

static lf_status nccl_abort(lf_comm *c, int code) {
    nccl_state *s = c->impl;
    if (!s) return LF_OK;
    abort_nccl(s);
    return lf_comm_abort(s->ctl, code); /* mpi: MPI_Abort, does not return */
}

static const struct lf_comm_ops k_nccl_ops = {
    .name = "nccl",
    .device_buffers = 1,
    .open = nccl_open,
    .close = nccl_close,
    .abort = nccl_abort,
    .all_reduce = nccl_all_reduce,
    .reduce_scatter = nccl_reduce_scatter,
    .all_gather = nccl_all_gather,
    .broadcast = nccl_broadcast,
    .barrier = nccl_barrier,
    .all_reduce_f64 = nccl_all_reduce_f64,
    .all_reduce_i64 = nccl_all_reduce_i64,
    .broadcast_bytes = nccl_broadcast_bytes,
    .set_stream = nccl_set_stream,
    .reduce_scatter_start = nccl_reduce_scatter_start,
    .all_gather_start = nccl_all_gather_start,
    .all_reduce_start = nccl_all_reduce_start,
    .wait = nccl_wait,
    .wait_all = nccl_wait_all,
    .all_reduce_bf16 = nccl_all_reduce_bf16,
    .reduce_scatter_bf16 = nccl_reduce_scatter_bf16,
    .all_gather_bf16 = nccl_all_gather_bf16,
    .reduce_scatter_start_bf16 = nccl_reduce_scatter_start_bf16,
    .all_gather_start_bf16 = nccl_all_gather_start_bf16,
};

lf_status lf_comm_nccl_register(void) { return lf__comm_register(&k_nccl_ops); }
