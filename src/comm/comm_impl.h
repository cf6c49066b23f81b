/*
 * The communicator operations table (private interface; see DESIGN.md
 * "Communicator" and include/llmforge/comm.h for the contract).
 *
 * The public wrappers in comm.c check arguments, number the collective
 * (c->seq, c->coll, c->count) and record failures on the handle; a kind
 * implements the table below and sees only valid calls:
 *  - buffers are non-NULL whenever their element count is > 0;
 *  - op is valid for the element type; root is in [0, size);
 *  - reduce_scatter / all_gather have n < 2^31;
 *  - no call arrives after one failed (the wrapper refuses it).
 * A NULL slot means "unsupported": the wrapper returns LF_ERR_UNSUPPORTED.
 * Every collective must return within c->opts.timeout_s of its start plus
 * at most LF_COMM_GRACE_MAX_S of diagnosis, with LF_ERR_TIMEOUT and a
 * message naming c->coll, c->seq, c->context and the missing ranks.
 *
 * Every kind is in comm.c's one table: the built-in kinds are registered
 * there at first use. Kinds registered at run time (lf__comm_register): the nccl kind lives in
 * lf_comm_nccl / lf_comm_nccl_shim, above this library, and registers
 * itself (lf_comm_nccl_register), as the cuda backend does. Its table says
 * device_buffers = 1: the float collectives and lf_comm_broadcast take
 * device memory, while broadcast_bytes and the f64/i64 reductions stay host
 * memory (they go over its host control handle, see comm_nccl.c).
 *
 * A control kind: a kind another kind bootstraps over and sends its host
 * values through (nccl over "mpi"; under torchrun, over a "tcp" kind when
 * one is registered) fills `serve` and `diagnose`, so the kind above can
 * answer "where are you" queries while it waits in its own collectives and
 * name the missing ranks after a timeout, with its own position (seq, coll,
 * count, context) instead of the control handle's.
 */
#ifndef LLMFORGE_COMM_IMPL_H
#define LLMFORGE_COMM_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include "llmforge/comm.h"

/* Diagnosis after a timeout waits this long for peers to answer: 10% of
 * the timeout, clamped to [LF_COMM_GRACE_MIN_S, LF_COMM_GRACE_MAX_S]. */
#define LF_COMM_GRACE_MIN_S 1.0
#define LF_COMM_GRACE_MAX_S 5.0
#define LF_COMM_SEGMENT_DEFAULT ((size_t)1 << 22)
#define LF_COMM_SCALARS_MAX 4096

/* Collective identifiers (named in messages and sent between ranks). */
typedef enum lf_comm_coll {
    LF_COMM_COLL_OPEN = 0,
    LF_COMM_COLL_ALL_REDUCE = 1,
    LF_COMM_COLL_REDUCE_SCATTER = 2,
    LF_COMM_COLL_ALL_GATHER = 3,
    LF_COMM_COLL_BROADCAST = 4,
    LF_COMM_COLL_BARRIER = 5,
    LF_COMM_COLL_ALL_REDUCE_F64 = 6,
    LF_COMM_COLL_ALL_REDUCE_I64 = 7,
    LF_COMM_COLL_COUNT_ = 8,
} lf_comm_coll;

struct lf_comm_ops {
    const char *name;
    int device_buffers; /* 0: host memory (single, mpi); 1: device memory (nccl) */

    /* Fill c->rank, c->size, c->local_rank, c->local_size and c->impl.
     * c->opts and c->env are set. On failure release everything built. */
    lf_status (*open)(lf_comm *c);
    void (*close)(lf_comm *c); /* c->failed says whether a collective failed */
    lf_status (*abort)(lf_comm *c, int code);

    lf_status (*all_reduce)(lf_comm *c, float *buf, size_t n, lf_comm_op op);
    lf_status (*reduce_scatter)(lf_comm *c, const float *send, float *recv, size_t n, lf_comm_op op);
    lf_status (*all_gather)(lf_comm *c, const float *send, float *recv, size_t n);
    lf_status (*broadcast)(lf_comm *c, void *buf, size_t bytes, int root);
    lf_status (*barrier)(lf_comm *c);
    lf_status (*all_reduce_f64)(lf_comm *c, double *v, size_t n, lf_comm_op op);
    lf_status (*all_reduce_i64)(lf_comm *c, int64_t *v, size_t n, lf_comm_op op);

    /* Optional (NULL: absent). */
    /* broadcast of host bytes when `broadcast` takes device memory
     * (lf_comm_broadcast_bytes uses it; NULL: `broadcast` serves both) */
    lf_status (*broadcast_bytes)(lf_comm *c, void *buf, size_t bytes, int root);
    /* the compute stream device collectives are ordered against (lf_comm_set_stream) */
    lf_status (*set_stream)(lf_comm *c, void *stream);
    /* control kinds: answer the peers' "where are you" queries with pos's
     * position (called often while pos waits in a collective of its own) */
    void (*serve)(lf_comm *c, const lf_comm *pos);
    /* control kinds: after pos's collective failed with st, ask the peers
     * where they are and describe the ranks not at pos's collective into out
     * ("; rank that did not arrive: 2 ..."), waiting at most the grace */
    void (*diagnose)(lf_comm *c, const lf_comm *pos, lf_status st, char *out, size_t cap);
    /* asynchronous kinds (all five or none): enqueue a reduce-scatter, an all-gather or an all-reduce and
     * name it (*ticket > 0); order the compute stream after one; complete
     * them all under the watchdog (lf_comm_*_start, lf_comm_wait*) */
    lf_status (*reduce_scatter_start)(lf_comm *c, const float *send, float *recv, size_t n, lf_comm_op op,
                                      int64_t *ticket);
    lf_status (*all_gather_start)(lf_comm *c, const float *send, float *recv, size_t n, int64_t *ticket);
    lf_status (*all_reduce_start)(lf_comm *c, float *buf, size_t n, lf_comm_op op, int64_t *ticket);
    lf_status (*wait)(lf_comm *c, int64_t ticket);
    lf_status (*wait_all)(lf_comm *c);
    /* bf16 collectives the kind moves as bf16 itself (nccl: ncclBfloat16),
     * the fp32 slots' contracts on uint16_t elements; the started ones only
     * on asynchronous kinds. NULL on a host kind (device_buffers 0): comm.c
     * widens to fp32 scratch, calls the fp32 slot and rounds once (comm.h
     * "bf16"); NULL on a device kind: LF_ERR_UNSUPPORTED. */
    lf_status (*all_reduce_bf16)(lf_comm *c, uint16_t *buf, size_t n, lf_comm_op op);
    lf_status (*reduce_scatter_bf16)(lf_comm *c, const uint16_t *send, uint16_t *recv, size_t n, lf_comm_op op);
    lf_status (*all_gather_bf16)(lf_comm *c, const uint16_t *send, uint16_t *recv, size_t n);
    lf_status (*reduce_scatter_start_bf16)(lf_comm *c, const uint16_t *send, uint16_t *recv, size_t n, lf_comm_op op,
                                           int64_t *ticket);
    lf_status (*all_gather_start_bf16)(lf_comm *c, const uint16_t *send, uint16_t *recv, size_t n, int64_t *ticket);
};

struct lf_comm {
    const struct lf_comm_ops *ops;
    lf_comm_options opts;
    lf_comm_env env;
    int rank, size, local_rank, local_size;

    /* the collective in progress (or the last one) */
    int64_t seq; /* 1, 2, ... per collective; 0 while opening */
    lf_comm_coll coll;
    size_t count;      /* elements (bytes for broadcast_bytes) */
    int bf16;          /* 1: the elements are bf16 (lf_comm_*_bf16) */
    char context[128]; /* lf_comm_set_context */

    /* lf_comm_times: host time in every call (exposed) and the collectives'
     * own time (busy: blocking calls' host time; a started collective's
     * time on the kind's stream, added by the kind when it completes) */
    double busy_ms, exposed_ms;
    double call_t0; /* start of the call in progress (lf__comm_now_s) */

    lf_status failed; /* LF_OK, or the status of the first failed collective */
    char errmsg[1024];
    void *impl;
};

extern const struct lf_comm_ops lf__comm_single_ops;
extern const struct lf_comm_ops lf__comm_mpi_ops;
extern const struct lf_comm_ops lf__comm_tcp_ops;

/* Make a kind openable by name (a library above this one: the nccl kind).
 * Registering the same table twice is harmless; LF_ERR_RANGE when the
 * registry (8 kinds, the built-in ones included) is full. The table must
 * outlive the process's use of it (a static). */
lf_status lf__comm_register(const struct lf_comm_ops *ops);

/* "all_reduce" etc. */
const char *lf__comm_coll_name(lf_comm_coll coll);
/* "all_reduce #57 (step 12, 1000 floats)" into buf. */
void lf__comm_describe(const lf_comm *c, char *buf, size_t cap);
/* Seconds the diagnosis waits for answers, from the timeout. */
double lf__comm_grace_s(double timeout_s);
/* Monotonic clock, seconds. */
double lf__comm_now_s(void);
/* Between two polls of a wait: nothing for the first 200 iterations, then a
 * yield, then sleeps growing to 1 ms with the time already waited. */
void lf__comm_pause(long it, double waited);
/* Append printf-style text to out (NUL-terminated, cut at cap): the
 * kinds' diagnoses of a collective that did not complete. */
void lf__comm_append(char *out, size_t cap, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* out (n) := op over nrows rows (row p at rows + p*stride), folded in row
 * order: ((r0 op r1) op r2) ...; AVG divides the sum by nrows. out must not
 * overlap rows. MAX/MIN propagate NaN. */
void lf__comm_reduce_f32(float *out, const float *rows, size_t stride, int nrows, size_t n, lf_comm_op op);
void lf__comm_reduce_f64(double *out, const double *rows, size_t stride, int nrows, size_t n, lf_comm_op op);
void lf__comm_reduce_i64(int64_t *out, const int64_t *rows, size_t stride, int nrows, size_t n, lf_comm_op op);

/* The launcher's rank and size variable names ("OMPI_COMM_WORLD_RANK", ...),
 * for messages; "" for LF_COMM_LAUNCHER_NONE. */
void lf__comm_env_vars(lf_comm_launcher l, const char **rank_var, const char **size_var);

#endif
