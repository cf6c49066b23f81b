/*
 * The "mpi" communicator: MPI_COMM_WORLD of a job started by mpirun/mpiexec
 * (Open MPI, MPICH) or srun, float buffers in host memory. Standard MPI-3
 * only (non-blocking collectives, MPI_Comm_idup), nothing implementation-
 * specific.
 *
 * Never a hang. Blocking MPI calls cannot be cancelled, so every collective
 * is a non-blocking one (MPI_Ialltoallv, MPI_Iallgatherv, MPI_Iallgather,
 * MPI_Ibcast, MPI_Ibarrier) polled with MPI_Test against a deadline of
 * opts.timeout_s from the call's start. Opening uses MPI_Comm_idup and an
 * MPI_Iallgather the same way. On expiry the rank asks its peers, over a
 * second duplicated communicator (the side channel), where they are:
 *   - every rank keeps one MPI_Irecv for a "where are you" query posted on
 *     the side channel, and answers it (collective number, kind, element
 *     count, context) whenever it is waiting inside a collective — so an
 *     answer means "inside the communicator", and no answer within the grace
 *     period means "stalled outside it, or dead";
 *   - the rank that timed out sends the query to every peer and waits
 *     lf__comm_grace_s(timeout) for the answers, answering other ranks'
 *     queries meanwhile (they may be diagnosing too).
 * The message then names the collective, its number, the caller's context
 * and each rank that did not arrive (no answer, or inside an earlier
 * collective), or says that every rank arrived with a different element
 * count. The normal path costs one extra MPI_Test per poll and no traffic.
 * Both communicators use MPI_ERRORS_RETURN, so a peer's death comes back as
 * an error status (LF_ERR_IO, with the same diagnosis) where the MPI library
 * notices it rather than tearing the job down itself.
 *
 * Deterministic reductions. all_reduce is reduce-scatter + all-gather, and
 * reduce-scatter is an MPI_Ialltoallv of the parts (rank r receives part r of
 * every rank) followed by a local fold in rank order: ((x_0 + x_1) + x_2)...
 * The sum is therefore the same bits on every rank, every run and under
 * every MPI library, and traffic equals a ring all-reduce's (each rank sends
 * and receives (P-1)/P of the buffer twice). Buffers larger than
 * opts.segment_elems go in rounds so the scratch stays about segment_elems
 * floats and MPI's int counts never overflow. Small reductions
 * (all_reduce_f64/i64) all-gather every rank's values and fold them locally.
 *
 * A control kind (comm_impl.h): serve and diagnose answer and ask the same
 * queries with another handle's position, so the nccl kind, which sends
 * its host values through an mpi handle, names its own collectives and its
 * missing ranks through this side channel.
 *
 * Process-wide MPI state: MPI is initialised by the first open (unless the
 * program did it) and finalised when the last handle closes, unless a
 * collective failed (finalising would wait for peers that are not coming).
 */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <mpi.h>

#include "comm/comm_impl.h"

#if !defined(MPI_VERSION) || MPI_VERSION < 3
#error "llmforge's mpi communicator needs MPI-3 (non-blocking collectives)"
#endif

enum { TAG_QUERY = 101, TAG_REPLY = 102 };

/* Side-channel message: a query carries the asker's position, a reply the
 * answerer's. Plain bytes: every rank runs the same build. */
typedef struct where_msg {
    int64_t seq;
    int64_t count;
    int32_t coll;
    int32_t rank;
    char context[112];
} where_msg;

typedef struct mpi_state {
    MPI_Comm comm; /* collectives */
    MPI_Comm side; /* "where are you" queries and answers */
    int have_comm, have_side;
    double deadline; /* of the collective in progress */
    double started;

    /* scratch for the received parts / gathered scalars */
    void *scratch;
    size_t scratch_bytes;
    int *scounts, *sdispls, *rcounts, *rdispls; /* size entries each */

    /* query service */
    MPI_Request query_req;
    int query_posted;
    where_msg query_in;
    where_msg *replies;      /* size: the answer sent to each asker */
    MPI_Request *reply_reqs; /* size */
    /* diagnosis */
    where_msg query_out;
    where_msg *answers;       /* size */
    MPI_Request *answer_reqs; /* size */
    MPI_Request *ask_reqs;    /* size */
} mpi_state;

static int g_mpi_handles; /* open "mpi" handles in this process */
static int g_mpi_owned;   /* we called MPI_Init_thread */

/* ---------------------------------------------------------------- helpers */
static void mpi_errstr(int rc, char *buf, size_t cap) {
    char s[MPI_MAX_ERROR_STRING + 1];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS || len <= 0) snprintf(s, sizeof s, "MPI error %d", rc);
    s[len > 0 && len <= MPI_MAX_ERROR_STRING ? len : MPI_MAX_ERROR_STRING] = '\0';
    snprintf(buf, cap, "%s", s);
}

static void fill_where(const lf_comm *c, where_msg *w) {
    memset(w, 0, sizeof *w);
    w->seq = c->seq;
    w->count = (int64_t)c->count;
    w->coll = (int32_t)c->coll;
    w->rank = c->rank;
    snprintf(w->context, sizeof w->context, "%s", c->context);
}

static void post_query_recv(mpi_state *m) {
    m->query_posted = MPI_Irecv(&m->query_in, (int)sizeof m->query_in, MPI_BYTE, MPI_ANY_SOURCE, TAG_QUERY, m->side,
                                &m->query_req) == MPI_SUCCESS;
}

/* Answer the queries that arrived (called while waiting inside a collective). */
static void serve_queries(const lf_comm *c, mpi_state *m) {
    for (int guard = 0; guard < c->size && m->query_posted; guard++) {
        int done = 0;
        MPI_Status st;
        if (MPI_Test(&m->query_req, &done, &st) != MPI_SUCCESS) {
            m->query_posted = 0;
            return;
        }
        if (!done) return;
        int src = st.MPI_SOURCE;
        if (src >= 0 && src < c->size) {
            if (m->reply_reqs[src] != MPI_REQUEST_NULL) {
                int d = 0;
                MPI_Test(&m->reply_reqs[src], &d, MPI_STATUS_IGNORE);
            }
            if (m->reply_reqs[src] == MPI_REQUEST_NULL) { /* else the previous answer is still in flight */
                fill_where(c, &m->replies[src]);
                if (MPI_Isend(&m->replies[src], (int)sizeof(where_msg), MPI_BYTE, src, TAG_REPLY, m->side,
                              &m->reply_reqs[src]) != MPI_SUCCESS)
                    m->reply_reqs[src] = MPI_REQUEST_NULL;
            }
        }
        post_query_recv(m);
    }
}


/* Ask every peer where it is; describe those that are not at this
 * collective into out. */
static void diagnose(const lf_comm *c, mpi_state *m, lf_status st, char *out, size_t cap) {
    out[0] = '\0';
    int P = c->size, me = c->rank;
    if (P <= 1 || !m->have_side) return;
    fill_where(c, &m->query_out);
    int *got = lf_calloc((size_t)P * sizeof *got);
    if (!got) {
        lf__comm_append(out, cap, "; could not ask the other ranks where they are (out of memory)");
        return;
    }
    for (int p = 0; p < P; p++) {
        m->answer_reqs[p] = MPI_REQUEST_NULL;
        m->ask_reqs[p] = MPI_REQUEST_NULL;
        if (p == me) continue;
        if (MPI_Irecv(&m->answers[p], (int)sizeof(where_msg), MPI_BYTE, p, TAG_REPLY, m->side, &m->answer_reqs[p]) !=
            MPI_SUCCESS)
            m->answer_reqs[p] = MPI_REQUEST_NULL, got[p] = -1;
        if (MPI_Isend(&m->query_out, (int)sizeof(where_msg), MPI_BYTE, p, TAG_QUERY, m->side, &m->ask_reqs[p]) !=
            MPI_SUCCESS)
            m->ask_reqs[p] = MPI_REQUEST_NULL, got[p] = -1;
    }
    double grace = lf__comm_grace_s(c->opts.timeout_s), t0 = lf__comm_now_s();
    for (long it = 0;; it++) {
        int pending = 0;
        for (int p = 0; p < P; p++) {
            if (p == me || got[p] != 0) continue;
            int done = 0;
            if (MPI_Test(&m->answer_reqs[p], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
                got[p] = -1;
                continue;
            }
            if (done) got[p] = 1;
            else pending++;
        }
        serve_queries(c, m);
        double waited = lf__comm_now_s() - t0;
        if (!pending || waited >= grace) break;
        lf__comm_pause(it + 200, waited);
    }
    for (int p = 0; p < P; p++) {
        if (m->answer_reqs[p] != MPI_REQUEST_NULL) { /* cancelling a receive completes locally */
            MPI_Cancel(&m->answer_reqs[p]);
            MPI_Wait(&m->answer_reqs[p], MPI_STATUS_IGNORE);
        }
        if (m->ask_reqs[p] != MPI_REQUEST_NULL) MPI_Request_free(&m->ask_reqs[p]); /* query_out outlives it */
    }

    /* ranks not at this collective, and ranks already past it */
    int missing = 0, listed = 0, ahead = 0, odd = -1;
    char list[640], past[256];
    list[0] = past[0] = '\0';
    for (int p = 0; p < P; p++) {
        if (p == me) continue;
        const where_msg *w = &m->answers[p];
        char where[200] = "";
        if (got[p] == 1) {
            lf_comm_coll wc = w->coll >= 0 && w->coll < LF_COMM_COLL_COUNT_ ? (lf_comm_coll)w->coll
                                                                            : LF_COMM_COLL_COUNT_;
            char ctx[sizeof w->context + 1];
            memcpy(ctx, w->context, sizeof w->context);
            ctx[sizeof w->context] = '\0';
            snprintf(where, sizeof where, "in %s #%lld%s%s%s", lf__comm_coll_name(wc), (long long)w->seq,
                     ctx[0] ? " (" : "", ctx, ctx[0] ? ")" : "");
        }
        if (got[p] == 1 && w->seq > c->seq) { /* passed it: a broadcast root, or sizes that differ */
            if (ahead++ < 4) lf__comm_append(past, sizeof past, "%s%d (%s)", ahead > 1 ? ", " : "", p, where);
            continue;
        }
        if (got[p] == 1 && w->seq == c->seq) {
            if (odd < 0 && (w->count != (int64_t)c->count || w->coll != (int32_t)c->coll)) odd = p;
            continue;
        }
        missing++;
        if (listed >= 16) continue;
        listed++;
        if (got[p] == 1) lf__comm_append(list, sizeof list, "%s%d (waiting %s)", listed > 1 ? ", " : "", p, where);
        else if (got[p] < 0)
            lf__comm_append(list, sizeof list, "%s%d (unreachable: MPI refused to send to it)", listed > 1 ? ", " : "",
                            p);
        else lf__comm_append(list, sizeof list, "%s%d", listed > 1 ? ", " : "", p);
    }
    int silent = 0;
    for (int p = 0; p < P; p++)
        if (p != me && got[p] == 0) silent++;
    if (missing) {
        lf__comm_append(out, cap, "; rank%s that did not arrive: %s", missing > 1 ? "s" : "", list);
        if (missing > listed) lf__comm_append(out, cap, " and %d more", missing - listed);
        if (silent)
            lf__comm_append(
                out, cap,
                "%s no answer within %.1f s means stalled outside the communicator, failed out of it, or dead",
                silent == missing ? ";" : "; for those without a note,", grace);
    }
    if (odd >= 0)
        lf__comm_append(out, cap, "; rank %d called %s #%lld with %lld elements (this rank: %zu)", odd,
                        lf__comm_coll_name((lf_comm_coll)m->answers[odd].coll), (long long)c->seq,
                        (long long)m->answers[odd].count, c->count);
    if (ahead) lf__comm_append(out, cap, "; already past it: %s%s", past, ahead > 4 ? " and more" : "");
    if (!missing && odd < 0 && !ahead && st == LF_ERR_TIMEOUT)
        lf__comm_append(out, cap, "; every rank arrived, so the transport is stuck (network or MPI library fault)");
    lf_free(got);
}

/* Fail the collective in progress with status st (TIMEOUT or IO). */
static lf_status fail_collective(lf_comm *c, mpi_state *m, lf_status st, const char *what) {
    char desc[256], diag[900];
    double waited = lf__comm_now_s() - m->started; /* before the diagnosis adds its grace */
    lf__comm_describe(c, desc, sizeof desc);
    diagnose(c, m, st, diag, sizeof diag);
    if (st == LF_ERR_TIMEOUT)
        return lf_fail(st, "%s timed out on rank %d after %.1f s (comm.timeout_s = %g)%s", desc, c->rank, waited,
                       c->opts.timeout_s, diag);
    return lf_fail(st, "%s failed on rank %d: %s%s", desc, c->rank, what, diag);
}

static lf_status mpi_call_fail(lf_comm *c, mpi_state *m, int rc, const char *call) {
    char es[MPI_MAX_ERROR_STRING + 64], what[MPI_MAX_ERROR_STRING + 128];
    mpi_errstr(rc, es, sizeof es);
    snprintf(what, sizeof what, "%s: %s", call, es);
    return fail_collective(c, m, LF_ERR_IO, what);
}

/* Wait for req until the collective's deadline. */
static lf_status wait_req(lf_comm *c, mpi_state *m, MPI_Request *req, const char *call) {
    double t0 = lf__comm_now_s();
    for (long it = 0;; it++) {
        int done = 0;
        int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_call_fail(c, m, rc, call);
        if (done) return LF_OK;
        if ((it & 15) == 0) serve_queries(c, m);
        double now = lf__comm_now_s();
        if (now >= m->deadline) return fail_collective(c, m, LF_ERR_TIMEOUT, call);
        lf__comm_pause(it, now - t0);
    }
}

static void start_clock(lf_comm *c, mpi_state *m) {
    m->started = lf__comm_now_s();
    m->deadline = m->started + c->opts.timeout_s;
}

static lf_status need_scratch(mpi_state *m, size_t bytes) {
    if (bytes <= m->scratch_bytes) return LF_OK;
    void *p = lf_alloc(bytes);
    if (!p) return lf_fail(LF_ERR_NOMEM, "communicator scratch: %zu bytes", bytes);
    lf_free(m->scratch);
    m->scratch = p;
    m->scratch_bytes = bytes;
    return LF_OK;
}

static size_t clampz(size_t total, size_t done, size_t cap) {
    if (total <= done) return 0;
    return total - done < cap ? total - done : cap;
}

/* ---------------------------------------------------------------- reduce-scatter core
 * One round: this rank sends scounts[q] floats from send + sdispls[q] to
 * every rank q, receives rcount floats from every rank into scratch row p,
 * and folds the rows in rank order into out (rcount). */
static lf_status rs_round(lf_comm *c, mpi_state *m, const float *send, int rcount, float *out, lf_comm_op op) {
    int P = c->size;
    lf_status st = need_scratch(m, (size_t)P * (size_t)(rcount > 0 ? rcount : 1) * sizeof(float));
    if (st != LF_OK) return st;
    for (int p = 0; p < P; p++) {
        m->rcounts[p] = rcount;
        m->rdispls[p] = p * rcount; /* P * rcount <= segment + P fits an int (segment <= 2^30) */
    }
    MPI_Request req;
    int rc = MPI_Ialltoallv(send, m->scounts, m->sdispls, MPI_FLOAT, m->scratch, m->rcounts, m->rdispls, MPI_FLOAT,
                            m->comm, &req);
    if (rc != MPI_SUCCESS) return mpi_call_fail(c, m, rc, "MPI_Ialltoallv");
    if ((st = wait_req(c, m, &req, "MPI_Ialltoallv")) != LF_OK) return st;
    lf__comm_reduce_f32(out, (const float *)m->scratch, (size_t)rcount, P, (size_t)rcount, op);
    return LF_OK;
}

/* Rounds of the partitioned reduce-scatter over n < 2^31 floats: round i
 * moves the i-th slice of at most s floats of every part. */
static lf_status reduce_scatter_rounds(lf_comm *c, mpi_state *m, const float *send, float *recv, size_t n,
                                       lf_comm_op op) {
    int P = c->size;
    size_t s = (c->opts.segment_elems + (size_t)P - 1) / (size_t)P; /* a segment's parts fit one round */
    size_t biggest = 0, my_off = 0, mine = 0;
    lf_comm_partition(n, P, 0, NULL, &biggest);
    lf_comm_partition(n, P, c->rank, &my_off, &mine);
    (void)my_off;
    for (size_t done = 0; done < biggest; done += s) {
        for (int q = 0; q < P; q++) {
            size_t off, cnt;
            lf_comm_partition(n, P, q, &off, &cnt);
            size_t k = clampz(cnt, done, s);
            m->scounts[q] = (int)k;
            m->sdispls[q] = k ? (int)(off + done) : 0;
        }
        size_t rk = clampz(mine, done, s);
        lf_status st = rs_round(c, m, send, (int)rk, rk ? recv + done : recv, op); /* recv may be NULL when empty */
        if (st != LF_OK) return st;
    }
    return LF_OK;
}

/* Rounds of the partitioned all-gather (same slicing). */
static lf_status all_gather_rounds(lf_comm *c, mpi_state *m, const float *send, float *recv, size_t n) {
    int P = c->size;
    size_t s = (c->opts.segment_elems + (size_t)P - 1) / (size_t)P; /* a segment's parts fit one round */
    size_t biggest = 0, my_off = 0, mine = 0;
    lf_comm_partition(n, P, 0, NULL, &biggest);
    lf_comm_partition(n, P, c->rank, &my_off, &mine);
    int in_place = send == recv + my_off;
    for (size_t done = 0; done < biggest; done += s) {
        for (int q = 0; q < P; q++) {
            size_t off, cnt;
            lf_comm_partition(n, P, q, &off, &cnt);
            size_t k = clampz(cnt, done, s);
            m->rcounts[q] = (int)k;
            m->rdispls[q] = k ? (int)(off + done) : 0;
        }
        size_t mk = clampz(mine, done, s);
        MPI_Request req;
        int rc;
        if (in_place)
            rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, recv, m->rcounts, m->rdispls, MPI_FLOAT, m->comm, &req);
        else
            rc = MPI_Iallgatherv(mk ? send + done : send, (int)mk, MPI_FLOAT, recv, m->rcounts, m->rdispls, MPI_FLOAT,
                                 m->comm, &req);
        if (rc != MPI_SUCCESS) return mpi_call_fail(c, m, rc, "MPI_Iallgatherv");
        lf_status st = wait_req(c, m, &req, "MPI_Iallgatherv");
        if (st != LF_OK) return st;
    }
    return LF_OK;
}

/* ---------------------------------------------------------------- collectives */
static lf_status mpi_all_reduce(lf_comm *c, float *buf, size_t n, lf_comm_op op) {
    mpi_state *m = c->impl;
    start_clock(c, m);
    if (c->size == 1) return LF_OK; /* a reduction over one rank is the identity */
    /* each segment is its own reduce-scatter + all-gather, both in place */
    size_t seg = c->opts.segment_elems;
    for (size_t a = 0; a < n; a += seg) {
        size_t len = n - a < seg ? n - a : seg, off = 0;
        lf_comm_partition(len, c->size, c->rank, &off, NULL);
        lf_status st = reduce_scatter_rounds(c, m, buf + a, buf + a + off, len, op);
        if (st == LF_OK) st = all_gather_rounds(c, m, buf + a + off, buf + a, len);
        if (st != LF_OK) return st;
    }
    return LF_OK;
}

static lf_status mpi_reduce_scatter(lf_comm *c, const float *send, float *recv, size_t n, lf_comm_op op) {
    mpi_state *m = c->impl;
    start_clock(c, m);
    if (c->size == 1) {
        if (n && recv != send) memcpy(recv, send, n * sizeof *recv);
        return LF_OK;
    }
    return reduce_scatter_rounds(c, m, send, recv, n, op);
}

static lf_status mpi_all_gather(lf_comm *c, const float *send, float *recv, size_t n) {
    mpi_state *m = c->impl;
    start_clock(c, m);
    if (c->size == 1) {
        if (n && recv != send) memcpy(recv, send, n * sizeof *recv);
        return LF_OK;
    }
    return all_gather_rounds(c, m, send, recv, n);
}

static lf_status mpi_broadcast(lf_comm *c, void *buf, size_t bytes, int root) {
    mpi_state *m = c->impl;
    start_clock(c, m);
    const size_t chunk = (size_t)1 << 30;
    for (size_t a = 0; a < bytes; a += chunk) {
        size_t len = bytes - a < chunk ? bytes - a : chunk;
        MPI_Request req;
        int rc = MPI_Ibcast((char *)buf + a, (int)len, MPI_BYTE, root, m->comm, &req);
        if (rc != MPI_SUCCESS) return mpi_call_fail(c, m, rc, "MPI_Ibcast");
        lf_status st = wait_req(c, m, &req, "MPI_Ibcast");
        if (st != LF_OK) return st;
    }
    return LF_OK;
}

static lf_status mpi_barrier(lf_comm *c) {
    mpi_state *m = c->impl;
    start_clock(c, m);
    MPI_Request req;
    int rc = MPI_Ibarrier(m->comm, &req);
    if (rc != MPI_SUCCESS) return mpi_call_fail(c, m, rc, "MPI_Ibarrier");
    return wait_req(c, m, &req, "MPI_Ibarrier");
}

/* Gather n 8-byte values from every rank into scratch (row p = rank p). */
static lf_status gather8(lf_comm *c, mpi_state *m, const void *v, size_t n) {
    lf_status st = need_scratch(m, (size_t)c->size * (n ? n : 1) * 8);
    if (st != LF_OK) return st;
    MPI_Request req;
    int rc = MPI_Iallgather(v, (int)(n * 8), MPI_BYTE, m->scratch, (int)(n * 8), MPI_BYTE, m->comm, &req);
    if (rc != MPI_SUCCESS) return mpi_call_fail(c, m, rc, "MPI_Iallgather");
    return wait_req(c, m, &req, "MPI_Iallgather");
}

static lf_status mpi_all_reduce_f64(lf_comm *c, double *v, size_t n, lf_comm_op op) {
    mpi_state *m = c->impl;
    start_clock(c, m);
    lf_status st = gather8(c, m, v, n);
    if (st != LF_OK) return st;
    lf__comm_reduce_f64(v, (const double *)m->scratch, n, c->size, n, op);
    return LF_OK;
}

static lf_status mpi_all_reduce_i64(lf_comm *c, int64_t *v, size_t n, lf_comm_op op) {
    mpi_state *m = c->impl;
    start_clock(c, m);
    lf_status st = gather8(c, m, v, n);
    if (st != LF_OK) return st;
    lf__comm_reduce_i64(v, (const int64_t *)m->scratch, n, c->size, n, op);
    return LF_OK;
}

/* ---------------------------------------------------------------- open / close */
static void free_state(mpi_state *m) {
    if (!m) return;
    lf_free(m->scratch);
    lf_free(m->scounts);
    lf_free(m->replies);
    lf_free(m->reply_reqs);
    lf_free(m->answers);
    lf_free(m->answer_reqs);
    lf_free(m->ask_reqs);
    lf_free(m);
}

/* Release MPI objects of a handle whose collectives all completed. */
static void release_mpi(lf_comm *c, mpi_state *m) {
    if (m->query_posted) {
        MPI_Cancel(&m->query_req);
        MPI_Wait(&m->query_req, MPI_STATUS_IGNORE);
        m->query_posted = 0;
    }
    for (int p = 0; p < c->size; p++)
        if (m->reply_reqs && m->reply_reqs[p] != MPI_REQUEST_NULL) {
            /* a small eager send; if it has not left after a second the
             * asker is gone — forget it (the buffer lives until free_state) */
            double t0 = lf__comm_now_s();
            int done = 0;
            while (!done && lf__comm_now_s() - t0 < 1.0)
                if (MPI_Test(&m->reply_reqs[p], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;
            if (!done && m->reply_reqs[p] != MPI_REQUEST_NULL) MPI_Request_free(&m->reply_reqs[p]);
        }
    if (m->have_side) MPI_Comm_free(&m->side);
    if (m->have_comm) MPI_Comm_free(&m->comm);
    m->have_side = m->have_comm = 0;
}

static lf_status idup(lf_comm *c, mpi_state *m, MPI_Comm *out, int *have) {
    MPI_Request req;
    int rc = MPI_Comm_idup(MPI_COMM_WORLD, out, &req);
    if (rc != MPI_SUCCESS) return mpi_call_fail(c, m, rc, "MPI_Comm_idup");
    lf_status st = wait_req(c, m, &req, "MPI_Comm_idup");
    if (st != LF_OK) return st;
    *have = 1;
    MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN);
    return LF_OK;
}

/* Rank and size on this host: ranks whose processor name equals ours. */
static lf_status local_ranks(lf_comm *c, mpi_state *m) {
    int P = c->size, len = 0;
    char *names = lf_calloc((size_t)P * MPI_MAX_PROCESSOR_NAME);
    char mine[MPI_MAX_PROCESSOR_NAME];
    if (!names) return LF_ERR_NOMEM;
    memset(mine, 0, sizeof mine);
    MPI_Get_processor_name(mine, &len);
    MPI_Request req;
    lf_status st = LF_OK;
    int rc = MPI_Iallgather(mine, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, m->comm,
                            &req);
    if (rc != MPI_SUCCESS) st = mpi_call_fail(c, m, rc, "MPI_Iallgather");
    else st = wait_req(c, m, &req, "MPI_Iallgather (host names)");
    if (st == LF_OK) {
        c->local_rank = 0;
        c->local_size = 0;
        for (int p = 0; p < P; p++)
            if (strncmp(names + (size_t)p * MPI_MAX_PROCESSOR_NAME, mine, MPI_MAX_PROCESSOR_NAME) == 0) {
                if (p < c->rank) c->local_rank++;
                c->local_size++;
            }
    }
    lf_free(names);
    return st;
}

static lf_status check_env(const lf_comm *c) {
    const lf_comm_env *e = &c->env;
    if (e->launcher == LF_COMM_LAUNCHER_NONE) return LF_OK;
    if (e->rank == c->rank && e->size == c->size) return LF_OK;
    const char *rv, *sv;
    lf__comm_env_vars(e->launcher, &rv, &sv);
    const char *hint =
        e->launcher == LF_COMM_LAUNCHER_SLURM
            ? " (a Slurm batch script must start the ranks with srun, and Open MPI needs srun --mpi=pmix)"
            : (e->launcher == LF_COMM_LAUNCHER_TORCHRUN ? " (torchrun starts ranks that MPI does not know about)" : "");
    return lf_fail(LF_ERR_MISMATCH,
                   "mpi communicator: the launcher says %s=%d of %s=%d, but MPI_COMM_WORLD has rank %d of %d "
                   "processes%s",
                   rv, e->rank, sv, e->size, c->rank, c->size, hint);
}

static lf_status mpi_open(lf_comm *c) {
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (finalized)
        return lf_fail(LF_ERR_UNSUPPORTED, "mpi communicator: MPI was finalised earlier in this process (MPI can be "
                                           "initialised once per process)");
    if (!inited) {
        int provided = 0;
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
        if (rc != MPI_SUCCESS) {
            char es[MPI_MAX_ERROR_STRING + 1];
            mpi_errstr(rc, es, sizeof es);
            return lf_fail(LF_ERR_IO, "mpi communicator: MPI_Init_thread failed: %s", es);
        }
        g_mpi_owned = 1;
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c->size);
    c->local_rank = 0;
    c->local_size = 1;
    lf_status st = check_env(c);
    if (st != LF_OK) return st;

    size_t P = (size_t)c->size;
    mpi_state *m = lf_calloc(sizeof *m);
    if (!m) return LF_ERR_NOMEM;
    c->impl = m;
    m->scounts = lf_calloc(4 * P * sizeof(int));
    m->replies = lf_calloc(P * sizeof(where_msg));
    m->reply_reqs = lf_calloc(P * sizeof(MPI_Request));
    m->answers = lf_calloc(P * sizeof(where_msg));
    m->answer_reqs = lf_calloc(P * sizeof(MPI_Request));
    m->ask_reqs = lf_calloc(P * sizeof(MPI_Request));
    if (!m->scounts || !m->replies || !m->reply_reqs || !m->answers || !m->answer_reqs || !m->ask_reqs) {
        st = LF_ERR_NOMEM;
        goto fail;
    }
    m->sdispls = m->scounts + P;
    m->rcounts = m->scounts + 2 * P;
    m->rdispls = m->scounts + 3 * P;
    for (size_t p = 0; p < P; p++) m->reply_reqs[p] = m->answer_reqs[p] = m->ask_reqs[p] = MPI_REQUEST_NULL;

    /* the open is collective too: bounded by the same timeout */
    c->coll = LF_COMM_COLL_OPEN;
    start_clock(c, m);
    if ((st = idup(c, m, &m->side, &m->have_side)) != LF_OK) goto fail;
    post_query_recv(m);
    if ((st = idup(c, m, &m->comm, &m->have_comm)) != LF_OK) goto fail;
    if ((st = local_ranks(c, m)) != LF_OK) goto fail;
    g_mpi_handles++;
    return LF_OK;

fail:
    /* pending requests may remain after a timeout: leave MPI objects alone then */
    if (st != LF_ERR_TIMEOUT && st != LF_ERR_IO) {
        release_mpi(c, m);
        free_state(m);
    }
    c->impl = NULL;
    return st;
}

static void mpi_close(lf_comm *c) {
    mpi_state *m = c->impl;
    if (!m) return;
    if (c->failed != LF_OK) {
        /* collectives may still be in flight and write into m's buffers:
         * leave everything; the process is about to abort */
        g_mpi_handles--;
        return;
    }
    release_mpi(c, m);
    free_state(m);
    c->impl = NULL;
    if (--g_mpi_handles == 0 && g_mpi_owned) {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Finalize();
    }
}

static lf_status mpi_abort(lf_comm *c, int code) {
    (void)c;
    MPI_Abort(MPI_COMM_WORLD, code); /* the whole job, whichever handle failed */
    return lf_fail(LF_ERR_INTERNAL, "MPI_Abort(%d) returned", code);
}

/* The control-kind slots (comm_impl.h): pos is a handle of another kind
 * over the same ranks (nccl), answering and asking with pos's position. */
static void mpi_serve(lf_comm *c, const lf_comm *pos) {
    mpi_state *m = c->impl;
    if (m && m->have_side && pos->size == c->size && pos->rank == c->rank) serve_queries(pos, m);
}

static void mpi_diagnose(lf_comm *c, const lf_comm *pos, lf_status st, char *out, size_t cap) {
    mpi_state *m = c->impl;
    if (cap) out[0] = '\0';
    if (m && pos->size == c->size && pos->rank == c->rank) diagnose(pos, m, st, out, cap);
}

const struct lf_comm_ops lf__comm_mpi_ops = {
    .name = "mpi",
    .device_buffers = 0,
    .open = mpi_open,
    .close = mpi_close,
    .abort = mpi_abort,
    .all_reduce = mpi_all_reduce,
    .reduce_scatter = mpi_reduce_scatter,
    .all_gather = mpi_all_gather,
    .broadcast = mpi_broadcast,
    .barrier = mpi_barrier,
    .all_reduce_f64 = mpi_all_reduce_f64,
    .all_reduce_i64 = mpi_all_reduce_i64,
    .serve = mpi_serve,
    .diagnose = mpi_diagnose,
};
