/*
 * The "single" communicator: one process, rank 0 of 1. Reductions over one
 * rank are the identity (AVG divides by 1, which is exact), gathers and
 * scatters are copies, broadcast and barrier do nothing. Never touches MPI,
 * so a plain `llmforge train` needs no MPI runtime.
 */
#include <string.h>

#include "comm/comm_impl.h"

static lf_status single_open(lf_comm *c) {
    c->rank = 0;
    c->size = 1;
    c->local_rank = 0;
    c->local_size = 1;
    c->impl = NULL;
    return LF_OK;
}

static lf_status single_all_reduce(lf_comm *c, float *buf, size_t n, lf_comm_op op) {
    (void)c, (void)buf, (void)n, (void)op;
    return LF_OK;
}

static lf_status single_reduce_scatter(lf_comm *c, const float *send, float *recv, size_t n, lf_comm_op op) {
    (void)c, (void)op;
    if (n && recv != send) memcpy(recv, send, n * sizeof *recv);
    return LF_OK;
}

static lf_status single_all_gather(lf_comm *c, const float *send, float *recv, size_t n) {
    (void)c;
    if (n && recv != send) memcpy(recv, send, n * sizeof *recv);
    return LF_OK;
}

static lf_status single_broadcast(lf_comm *c, void *buf, size_t bytes, int root) {
    (void)c, (void)buf, (void)bytes, (void)root;
    return LF_OK;
}

static lf_status single_barrier(lf_comm *c) {
    (void)c;
    return LF_OK;
}

static lf_status single_all_reduce_f64(lf_comm *c, double *v, size_t n, lf_comm_op op) {
    (void)c, (void)v, (void)n, (void)op;
    return LF_OK;
}

static lf_status single_all_reduce_i64(lf_comm *c, int64_t *v, size_t n, lf_comm_op op) {
    (void)c, (void)v, (void)n, (void)op;
    return LF_OK;
}

const struct lf_comm_ops lf__comm_single_ops = {
    .name = "single",
    .device_buffers = 0,
    .open = single_open,
    .close = NULL,
    .abort = NULL, /* nothing to stop but this process: the caller exits */
    .all_reduce = single_all_reduce,
    .reduce_scatter = single_reduce_scatter,
    .all_gather = single_all_gather,
    .broadcast = single_broadcast,
    .barrier = single_barrier,
    .all_reduce_f64 = single_all_reduce_f64,
    .all_reduce_i64 = single_all_reduce_i64,
};
