/*
 * Communicator front end: the kind table, argument checks, collective
 * numbering, error recording on the handle, and the local reductions every
 * kind shares.
 *
 * Invariants:
 *  - One table of kinds: the built-in kinds (single, mpi, tcp) are
 *    registered there at first use, through the same path as the kinds
 *    libraries above register (lf__comm_register: nccl).
 *  - A kind's table sees only valid calls (comm_impl.h); the wrappers here
 *    reject the rest before anything is numbered or sent.
 *  - c->seq counts collectives handed to the kind, the same on every rank
 *    as long as every rank makes the same calls (which MPI requires).
 *  - The first failure of a collective is sticky: the peers may be inside
 *    an operation this rank abandoned, so nothing more is sent on the handle.
 */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "comm/comm_impl.h"
#include "core/bf16.h"

/* Kinds that can be opened by name, in one table, in registration order:
 * the built-in kinds first (registered at first use, before anything else
 * can be), then those registered at run time by libraries above this one
 * (lf__comm_register: the nccl kind). Slots are filled once, never emptied. */
#define LF_COMM_MAX_KINDS 8
static const struct lf_comm_ops *_Atomic g_kinds[LF_COMM_MAX_KINDS];
static pthread_once_t g_builtin_once = PTHREAD_ONCE_INIT;

static lf_status add_kind(const struct lf_comm_ops *ops) {
    for (int i = 0; i < LF_COMM_MAX_KINDS; i++) {
        const struct lf_comm_ops *cur = atomic_load(&g_kinds[i]);
        if (cur == ops || (cur && strcmp(cur->name, ops->name) == 0)) return LF_OK;
        const struct lf_comm_ops *expected = NULL;
        if (!cur && atomic_compare_exchange_strong(&g_kinds[i], &expected, ops)) return LF_OK;
        if (expected == ops) return LF_OK;
    }
    return lf_fail(LF_ERR_RANGE, "communicator '%s': no room to register it (%d kinds at most)", ops->name,
                   LF_COMM_MAX_KINDS);
}

static void register_builtins(void) {
    (void)add_kind(&lf__comm_single_ops);
    (void)add_kind(&lf__comm_mpi_ops);
    (void)add_kind(&lf__comm_tcp_ops);
}

lf_status lf__comm_register(const struct lf_comm_ops *ops) {
    if (!ops || !ops->name || !ops->open) return lf_fail(LF_ERR_INVALID_ARG, "lf__comm_register: incomplete table");
    pthread_once(&g_builtin_once, register_builtins);
    return add_kind(ops);
}

static const struct lf_comm_ops *find_kind(const char *name) {
    pthread_once(&g_builtin_once, register_builtins);
    for (int i = 0; i < LF_COMM_MAX_KINDS; i++) {
        const struct lf_comm_ops *t = atomic_load(&g_kinds[i]);
        if (t && strcmp(t->name, name) == 0) return t;
    }
    return NULL;
}

int lf_comm_kind_available(const char *kind) { return kind && find_kind(kind) != NULL; }

lf_comm_options lf_comm_options_default(void) {
    lf_comm_options o;
    memset(&o, 0, sizeof o);
    o.timeout_s = 300.0;
    o.segment_elems = 0;
    o.getenv_fn = NULL;
    o.getenv_user = NULL;
    return o;
}

double lf__comm_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double lf__comm_grace_s(double timeout_s) {
    double g = 0.1 * timeout_s;
    if (g < LF_COMM_GRACE_MIN_S) g = LF_COMM_GRACE_MIN_S;
    if (g > LF_COMM_GRACE_MAX_S) g = LF_COMM_GRACE_MAX_S;
    return g;
}

void lf__comm_pause(long it, double waited) {
    if (it < 200) return; /* spin: small collectives finish in microseconds */
    if (waited < 0.002) {
        sched_yield();
        return;
    }
    /* up to 1 ms: latency is noise for what takes this long, and an
     * oversubscribed host needs the cores */
    long ns = waited < 0.05 ? 50000 : (waited < 1.0 ? 200000 : 1000000);
    struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
}

void lf__comm_append(char *out, size_t cap, const char *fmt, ...) {
    size_t at = strlen(out);
    if (at + 1 >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out + at, cap - at, fmt, ap);
    va_end(ap);
}

const char *lf__comm_coll_name(lf_comm_coll coll) {
    switch (coll) {
    case LF_COMM_COLL_OPEN: return "open";
    case LF_COMM_COLL_ALL_REDUCE: return "all_reduce";
    case LF_COMM_COLL_REDUCE_SCATTER: return "reduce_scatter";
    case LF_COMM_COLL_ALL_GATHER: return "all_gather";
    case LF_COMM_COLL_BROADCAST: return "broadcast";
    case LF_COMM_COLL_BARRIER: return "barrier";
    case LF_COMM_COLL_ALL_REDUCE_F64: return "all_reduce_f64";
    case LF_COMM_COLL_ALL_REDUCE_I64: return "all_reduce_i64";
    case LF_COMM_COLL_COUNT_: break;
    }
    return "collective";
}

static const char *count_unit(lf_comm_coll coll, int bf16) {
    if (bf16) return "bf16 values";
    switch (coll) {
    case LF_COMM_COLL_BROADCAST: return "bytes";
    case LF_COMM_COLL_ALL_REDUCE_F64: return "doubles";
    case LF_COMM_COLL_ALL_REDUCE_I64: return "int64s";
    default: return "floats";
    }
}

void lf__comm_describe(const lf_comm *c, char *buf, size_t cap) {
    if (c->coll == LF_COMM_COLL_OPEN) {
        snprintf(buf, cap, "open");
        return;
    }
    if (c->coll == LF_COMM_COLL_BARRIER)
        snprintf(buf, cap, "barrier #%lld%s%s%s", (long long)c->seq, c->context[0] ? " (" : "", c->context,
                 c->context[0] ? ")" : "");
    else
        snprintf(buf, cap, "%s #%lld (%s%s%zu %s)", lf__comm_coll_name(c->coll), (long long)c->seq, c->context,
                 c->context[0] ? ", " : "", c->count, count_unit(c->coll, c->bf16));
}

void lf_comm_partition(size_t n, int size, int rank, size_t *offset, size_t *count) {
    if (size < 1 || rank < 0 || rank >= size) {
        if (offset) *offset = 0;
        if (count) *count = 0;
        return;
    }
    size_t q = n / (size_t)size, r = n % (size_t)size, k = (size_t)rank;
    if (offset) *offset = k * q + (k < r ? k : r);
    if (count) *count = q + (k < r ? 1 : 0);
}

/* ---------------------------------------------------------------- local reductions */
static inline float max_f32(float a, float b) { return (isnan(a) || a >= b) ? a : b; }
static inline float min_f32(float a, float b) { return (isnan(a) || a <= b) ? a : b; }
static inline double max_f64(double a, double b) { return (isnan(a) || a >= b) ? a : b; }
static inline double min_f64(double a, double b) { return (isnan(a) || a <= b) ? a : b; }

void lf__comm_reduce_f32(float *out, const float *rows, size_t stride, int nrows, size_t n, lf_comm_op op) {
    if (n == 0 || nrows < 1) return;
    memcpy(out, rows, n * sizeof *out);
    for (int p = 1; p < nrows; p++) {
        const float *x = rows + (size_t)p * stride;
        switch (op) {
        case LF_COMM_SUM:
        case LF_COMM_AVG:
            for (size_t j = 0; j < n; j++) out[j] = out[j] + x[j];
            break;
        case LF_COMM_MAX:
            for (size_t j = 0; j < n; j++) out[j] = max_f32(out[j], x[j]);
            break;
        case LF_COMM_MIN:
            for (size_t j = 0; j < n; j++) out[j] = min_f32(out[j], x[j]);
            break;
        }
    }
    if (op == LF_COMM_AVG && nrows > 1) {
        float d = (float)nrows;
        for (size_t j = 0; j < n; j++) out[j] = out[j] / d;
    }
}

void lf__comm_reduce_f64(double *out, const double *rows, size_t stride, int nrows, size_t n, lf_comm_op op) {
    if (n == 0 || nrows < 1) return;
    memcpy(out, rows, n * sizeof *out);
    for (int p = 1; p < nrows; p++) {
        const double *x = rows + (size_t)p * stride;
        for (size_t j = 0; j < n; j++) {
            switch (op) {
            case LF_COMM_SUM:
            case LF_COMM_AVG: out[j] = out[j] + x[j]; break;
            case LF_COMM_MAX: out[j] = max_f64(out[j], x[j]); break;
            case LF_COMM_MIN: out[j] = min_f64(out[j], x[j]); break;
            }
        }
    }
    if (op == LF_COMM_AVG && nrows > 1)
        for (size_t j = 0; j < n; j++) out[j] = out[j] / (double)nrows;
}

void lf__comm_reduce_i64(int64_t *out, const int64_t *rows, size_t stride, int nrows, size_t n, lf_comm_op op) {
    if (n == 0 || nrows < 1) return;
    memcpy(out, rows, n * sizeof *out);
    for (int p = 1; p < nrows; p++) {
        const int64_t *x = rows + (size_t)p * stride;
        for (size_t j = 0; j < n; j++) {
            switch (op) {
            case LF_COMM_SUM:
            case LF_COMM_AVG: /* refused by the wrapper; sum keeps the switch total */
                /* wrap-around instead of undefined behaviour on overflow */
                out[j] = (int64_t)((uint64_t)out[j] + (uint64_t)x[j]);
                break;
            case LF_COMM_MAX: out[j] = out[j] >= x[j] ? out[j] : x[j]; break;
            case LF_COMM_MIN: out[j] = out[j] <= x[j] ? out[j] : x[j]; break;
            }
        }
    }
}

static lf_status record(lf_comm *c, lf_status st);

/* ---------------------------------------------------------------- open / close */
lf_status lf_comm_open(lf_comm **out, const char *kind, const lf_comm_options *opts) {
    if (!out) return lf_fail(LF_ERR_INVALID_ARG, "lf_comm_open: out is NULL");
    *out = NULL;
    if (!kind) kind = "auto";
    lf_comm_options o = opts ? *opts : lf_comm_options_default();
    if (!(o.timeout_s > 0.0 && o.timeout_s <= 1e6))
        return lf_fail(LF_ERR_RANGE, "communicator: timeout_s = %g is outside (0, 1e6] seconds", o.timeout_s);
    if (o.segment_elems == 0) o.segment_elems = LF_COMM_SEGMENT_DEFAULT;
    if (o.segment_elems > ((size_t)1 << 30))
        return lf_fail(LF_ERR_RANGE, "communicator: segment_elems = %zu exceeds 2^30", o.segment_elems);

    lf_comm_env env;
    lf_status st = lf_comm_env_detect(&env, o.getenv_fn, o.getenv_user);
    if (st != LF_OK) return st;

    const char *want = kind;
    /* device tensors (a GPU backend) on several ranks: the nccl kind, where
     * this program registered it (the CUDA build) */
    if (strcmp(kind, "auto") == 0 && o.device_tensors && env.size > 1 && find_kind("nccl")) kind = want = "nccl";
    if (strcmp(kind, "auto") == 0) {
        want = "single";
        if (env.size > 1) {
            /* torchrun's processes are no MPI job: they meet at MASTER_ADDR:MASTER_PORT */
            want = env.launcher == LF_COMM_LAUNCHER_TORCHRUN ? "tcp" : "mpi";
        }
    } else if (strcmp(kind, "nccl") == 0 && !find_kind("nccl")) {
        return lf_fail(LF_ERR_UNSUPPORTED, "communicator 'nccl' is not built into this program (it comes with the "
                                           "CUDA build, which registers it: lf_comm_nccl_register); use 'mpi', "
                                           "'tcp' or 'single'");
    }
    const struct lf_comm_ops *ops = find_kind(want);
    if (!ops) return lf_fail(LF_ERR_INVALID_ARG, "unknown communicator '%s' (auto, single, mpi, tcp, nccl)", kind);

    lf_comm *c = lf_calloc(sizeof *c);
    if (!c) return LF_ERR_NOMEM;
    c->ops = ops;
    c->opts = o;
    c->env = env;
    c->coll = LF_COMM_COLL_OPEN;
    c->failed = LF_OK;
    st = ops->open(c);
    if (st != LF_OK) {
        lf_free(c);
        return st;
    }
    *out = c;
    return LF_OK;
}

void lf_comm_close(lf_comm *c) {
    if (!c) return;
    if (c->ops->close) c->ops->close(c);
    lf_free(c);
}

lf_status lf_comm_abort(lf_comm *c, int code) {
    if (!c) return lf_fail(LF_ERR_INVALID_ARG, "lf_comm_abort: communicator is NULL");
    if (!c->ops->abort) return LF_OK;
    return c->ops->abort(c, code);
}

const char *lf_comm_name(const lf_comm *c) { return c ? c->ops->name : "none"; }
int lf_comm_device_buffers(const lf_comm *c) { return c ? c->ops->device_buffers : 0; }

lf_status lf_comm_set_stream(lf_comm *c, void *stream) {
    if (!c) return lf_fail(LF_ERR_INVALID_ARG, "lf_comm_set_stream: communicator is NULL");
    if (!c->ops->set_stream) return LF_OK; /* host-buffer kinds order nothing */
    lf_status st = c->ops->set_stream(c, stream);
    return st == LF_OK ? LF_OK : record(c, st);
}
int lf_comm_rank(const lf_comm *c) { return c ? c->rank : 0; }
int lf_comm_size(const lf_comm *c) { return c ? c->size : 1; }
int lf_comm_local_rank(const lf_comm *c) { return c ? c->local_rank : 0; }
int lf_comm_local_size(const lf_comm *c) { return c ? c->local_size : 1; }
double lf_comm_timeout(const lf_comm *c) { return c ? c->opts.timeout_s : 0.0; }
const lf_comm_env *lf_comm_launch_env(const lf_comm *c) { return c ? &c->env : NULL; }
const char *lf_comm_errmsg(const lf_comm *c) { return c ? c->errmsg : ""; }
int64_t lf_comm_seq(const lf_comm *c) { return c ? c->seq : 0; }

void lf_comm_set_context(lf_comm *c, const char *fmt, ...) {
    if (!c) return;
    if (!fmt) {
        c->context[0] = '\0';
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->context, sizeof c->context, fmt, ap);
    va_end(ap);
}

/* ---------------------------------------------------------------- collectives */
/* Record a failure on the handle (its message is the thread's last error). */
static lf_status record(lf_comm *c, lf_status st) {
    snprintf(c->errmsg, sizeof c->errmsg, "%s", lf_last_error());
    return st;
}

static lf_status refuse(lf_comm *c, lf_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static lf_status refuse(lf_comm *c, lf_status st, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    lf_fail(st, "%s", msg);
    return record(c, st);
}

/* Checks common to every collective; on success numbers the call. */
static lf_status begin(lf_comm *c, lf_comm_coll coll, const char *fn, size_t n, int has_buf) {
    if (!c) return lf_fail(LF_ERR_INVALID_ARG, "%s: communicator is NULL", fn);
    if (c->failed != LF_OK)
        return lf_fail(LF_ERR_INVALID_ARG, "%s: the communicator is unusable after an earlier failure: %s", fn,
                       c->errmsg);
    if (n > 0 && !has_buf) return refuse(c, LF_ERR_INVALID_ARG, "%s: buffer is NULL for %zu elements", fn, n);
    c->seq++;
    c->coll = coll;
    c->count = n;
    c->bf16 = 0;
    c->call_t0 = lf__comm_now_s();
    return LF_OK;
}

/* After the kind returned: a failure makes the handle unusable. */
static lf_status finish_as(lf_comm *c, lf_status st, int started) {
    double ms = (lf__comm_now_s() - c->call_t0) * 1e3;
    c->exposed_ms += ms;
    if (!started) c->busy_ms += ms; /* a started one's own time comes from the kind */
    if (st == LF_OK) return LF_OK;
    c->failed = st;
    return record(c, st);
}

/* The host time of a blocking collective is both busy and exposed; that of
 * a start, wait or wait_all only exposed (lf_comm_times). */
static lf_status finish(lf_comm *c, lf_status st) { return finish_as(c, st, 0); }

static lf_status unsupported(lf_comm *c, const char *fn) {
    return refuse(c, LF_ERR_UNSUPPORTED, "%s: the '%s' communicator does not support it", fn, c->ops->name);
}

static int op_valid(lf_comm_op op) {
    return op == LF_COMM_SUM || op == LF_COMM_AVG || op == LF_COMM_MAX || op == LF_COMM_MIN;
}

#define LF_COMM_PART_MAX ((size_t)1 << 31)

/* The part buffer (k elements of es bytes) is either exactly at full + off
 * or disjoint from the full buffer (n elements). */
static int placement_ok(const void *full, size_t n, const void *part, size_t off, size_t k, size_t es) {
    if (!full || !part || k == 0 || n == 0) return 1;
    uintptr_t f0 = (uintptr_t)full, f1 = f0 + n * es;
    uintptr_t p0 = (uintptr_t)part, p1 = p0 + k * es;
    if (p0 == f0 + off * es) return 1;
    return p1 <= f0 || f1 <= p0;
}
static int part_placement_ok(const float *full, size_t n, const float *part, size_t off, size_t k) {
    return placement_ok(full, n, part, off, k, sizeof(float));
}

lf_status lf_comm_all_reduce(lf_comm *c, float *buf, size_t n, lf_comm_op op) {
    if (c && !op_valid(op))
        return refuse(c, LF_ERR_INVALID_ARG, "lf_comm_all_reduce: op %d is not a reduction", (int)op);
    lf_status st = begin(c, LF_COMM_COLL_ALL_REDUCE, "lf_comm_all_reduce", n, buf != NULL);
    if (st != LF_OK) return st;
    if (!c->ops->all_reduce) return unsupported(c, "lf_comm_all_reduce");
    return finish(c, c->ops->all_reduce(c, buf, n, op));
}

lf_status lf_comm_reduce_scatter(lf_comm *c, const float *send, float *recv, size_t n, lf_comm_op op) {
    if (c && !op_valid(op))
        return refuse(c, LF_ERR_INVALID_ARG, "lf_comm_reduce_scatter: op %d is not a reduction", (int)op);
    if (c && n >= LF_COMM_PART_MAX)
        return refuse(c, LF_ERR_RANGE, "lf_comm_reduce_scatter: %zu elements (at most 2^31 - 1)", n);
    size_t off = 0, mine = 0;
    if (c) lf_comm_partition(n, c->size, c->rank, &off, &mine);
    if (c && !part_placement_ok(send, n, recv, off, mine))
        return refuse(c, LF_ERR_INVALID_ARG,
                      "lf_comm_reduce_scatter: recv overlaps send without being send + %zu (this rank's part)", off);
    lf_status st = begin(c, LF_COMM_COLL_REDUCE_SCATTER, "lf_comm_reduce_scatter", n, send && (recv || !mine));
    if (st != LF_OK) return st;
    if (!c->ops->reduce_scatter) return unsupported(c, "lf_comm_reduce_scatter");
    return finish(c, c->ops->reduce_scatter(c, send, recv, n, op));
}

lf_status lf_comm_reduce_scatter_start(lf_comm *c, const float *send, float *recv, size_t n, lf_comm_op op,
                                       int64_t *ticket) {
    if (ticket) *ticket = 0;
    if (!ticket) return lf_fail(LF_ERR_INVALID_ARG, "lf_comm_reduce_scatter_start: ticket is NULL");
    if (!c || !c->ops->reduce_scatter_start) return lf_comm_reduce_scatter(c, send, recv, n, op);
    if (!op_valid(op))
        return refuse(c, LF_ERR_INVALID_ARG, "lf_comm_reduce_scatter_start: op %d is not a reduction", (int)op);
    if (n >= LF_COMM_PART_MAX)
        return refuse(c, LF_ERR_RANGE, "lf_comm_reduce_scatter_start: %zu elements (at most 2^31 - 1)", n);
    size_t off = 0, mine = 0;
    lf_comm_partition(n, c->size, c->rank, &off, &mine);
    if (!part_placement_ok(send, n, recv, off, mine))
        return refuse(c, LF_ERR_INVALID_ARG,
                      "lf_comm_reduce_scatter_start: recv overlaps send without being send + "
                      "%zu (this rank's part)",
                      off);
    lf_status st = begin(c, LF_COMM_COLL_REDUCE_SCATTER, "lf_comm_reduce_scatter_start", n, send && (recv || !mine));
    if (st != LF_OK) return st;
    return finish_as(c, c->ops->reduce_scatter_start(c, send, recv, n, op, ticket), 1);
}

lf_status lf_comm_all_reduce_start(lf_comm *c, float *buf, size_t n, lf_comm_op op, int64_t *ticket) {
    if (ticket) *ticket = 0;
    if (!ticket) return lf_fail(LF_ERR_INVALID_ARG, "lf_comm_all_reduce_start: ticket is NULL");
    if (!c || !c->ops->all_reduce_start) return lf_comm_all_reduce(c, buf, n, op);
    if (!op_valid(op))
        return refuse(c, LF_ERR_INVALID_ARG, "lf_comm_all_reduce_start: op %d is not a reduction", (int)op);
    lf_status st = begin(c, LF_COMM_COLL_ALL_REDUCE, "lf_comm_all_reduce_start", n, buf != NULL);
    if (st != LF_OK) return st;
    return finish_as(c, c->ops->all_reduce_start(c, buf, n, op, ticket), 1);
}

lf_status lf_comm_all_gather_start(lf_comm *c, const float *send, float *recv, size_t n, int64_t *ticket) {
    if (ticket) *ticket = 0;
    if (!ticket) return lf_fail(LF_ERR_INVALID_ARG, "lf_comm_all_gather_start: ticket is NULL");
    if (!c || !c->ops->all_gather_start) return lf_comm_all_gather(c, send, recv, n);
    if (n >= LF_COMM_PART_MAX)
        return refuse(c, LF_ERR_RANGE, "lf_comm_all_gather_start: %zu elements (at most 2^31 - 1)", n);
    size_t off = 0, mine = 0;
    lf_comm_partition(n, c->size, c->rank, &off, &mine);
    if (!part_placement_ok(recv, n, send, off, mine))
        return refuse(c, LF_ERR_INVALID_ARG,
                      "lf_comm_all_gather_start: send overlaps recv without being recv + %zu "
                      "(this rank's part)",
                      off);
    lf_status st = begin(c, LF_COMM_COLL_ALL_GATHER, "lf_comm_all_gather_start", n, recv && (send || !mine));
    if (st != LF_OK) return st;
    return finish_as(c, c->ops->all_gather_start(c, send, recv, n, ticket), 1);
}

lf_status lf_comm_wait(lf_comm *c, int64_t ticket) {
    if (!c) return lf_fail(LF_ERR_INVALID_ARG, "lf_comm_wait: communicator is NULL");
    if (ticket == 0 || !c->ops->wait) return LF_OK;
    if (c->failed != LF_OK)
        return lf_fail(LF_ERR_INVALID_ARG, "lf_comm_wait: the communicator is unusable after an earlier failure: %s",
                       c->errmsg);
    c->call_t0 = lf__comm_now_s();
    return finish_as(c, c->ops->wait(c, ticket), 1);
}

lf_status lf_comm_wait_all(lf_comm *c) {
    if (!c) return lf_fail(LF_ERR_INVALID_ARG, "lf_comm_wait_all: communicator is NULL");
    if (!c->ops->wait_all) return LF_OK;
    if (c->failed != LF_OK)
        return lf_fail(LF_ERR_INVALID_ARG,
                       "lf_comm_wait_all: the communicator is unusable after an earlier failure: "
                       "%s",
                       c->errmsg);
    c->call_t0 = lf__comm_now_s();
    return finish_as(c, c->ops->wait_all(c), 1);
}

void lf_comm_times(const lf_comm *c, double *busy_ms, double *exposed_ms) {
    if (busy_ms) *busy_ms = c ? c->busy_ms : 0.0;
    if (exposed_ms) *exposed_ms = c ? c->exposed_ms : 0.0;
}

int lf_comm_async(const lf_comm *c) { return c && c->ops->reduce_scatter_start != NULL; }

lf_status lf_comm_all_gather(lf_comm *c, const float *send, float *recv, size_t n) {
    if (c && n >= LF_COMM_PART_MAX)
        return refuse(c, LF_ERR_RANGE, "lf_comm_all_gather: %zu elements (at most 2^31 - 1)", n);
    size_t off = 0, mine = 0;
    if (c) lf_comm_partition(n, c->size, c->rank, &off, &mine);
    if (c && !part_placement_ok(recv, n, send, off, mine))
        return refuse(c, LF_ERR_INVALID_ARG,
                      "lf_comm_all_gather: send overlaps recv without being recv + %zu (this rank's part)", off);
    lf_status st = begin(c, LF_COMM_COLL_ALL_GATHER, "lf_comm_all_gather", n, recv && (send || !mine));
    if (st != LF_OK) return st;
    if (!c->ops->all_gather) return unsupported(c, "lf_comm_all_gather");
    return finish(c, c->ops->all_gather(c, send, recv, n));
}

static lf_status broadcast(lf_comm *c, void *buf, size_t bytes, size_t n, int root, const char *fn, int host) {
    if (c && (root < 0 || root >= c->size))
        return refuse(c, LF_ERR_INVALID_ARG, "%s: root %d is outside the %d ranks", fn, root, c->size);
    lf_status st = begin(c, LF_COMM_COLL_BROADCAST, fn, n, buf != NULL);
    if (st != LF_OK) return st;
    c->count = bytes;
    lf_status (*slot)(lf_comm *, void *, size_t, int) = host && c->ops->broadcast_bytes ? c->ops->broadcast_bytes
                                                                                        : c->ops->broadcast;
    if (!slot) return unsupported(c, fn);
    return finish(c, slot(c, buf, bytes, root));
}

lf_status lf_comm_broadcast(lf_comm *c, float *buf, size_t n, int root) {
    if (n > SIZE_MAX / sizeof(float))
        return c ? refuse(c, LF_ERR_RANGE, "lf_comm_broadcast: %zu floats", n) : LF_ERR_RANGE;
    return broadcast(c, buf, n * sizeof(float), n, root, "lf_comm_broadcast", 0);
}

lf_status lf_comm_broadcast_bytes(lf_comm *c, void *buf, size_t bytes, int root) {
    return broadcast(c, buf, bytes, bytes, root, "lf_comm_broadcast_bytes", 1);
}

lf_status lf_comm_barrier(lf_comm *c) {
    lf_status st = begin(c, LF_COMM_COLL_BARRIER, "lf_comm_barrier", 0, 1);
    if (st != LF_OK) return st;
    if (!c->ops->barrier) return unsupported(c, "lf_comm_barrier");
    return finish(c, c->ops->barrier(c));
}

lf_status lf_comm_all_reduce_f64(lf_comm *c, double *v, size_t n, lf_comm_op op) {
    if (c && !op_valid(op))
        return refuse(c, LF_ERR_INVALID_ARG, "lf_comm_all_reduce_f64: op %d is not a reduction", (int)op);
    if (c && n > LF_COMM_SCALARS_MAX)
        return refuse(c, LF_ERR_RANGE, "lf_comm_all_reduce_f64: %zu values (at most %d)", n, LF_COMM_SCALARS_MAX);
    lf_status st = begin(c, LF_COMM_COLL_ALL_REDUCE_F64, "lf_comm_all_reduce_f64", n, v != NULL);
    if (st != LF_OK) return st;
    if (!c->ops->all_reduce_f64) return unsupported(c, "lf_comm_all_reduce_f64");
    return finish(c, c->ops->all_reduce_f64(c, v, n, op));
}

lf_status lf_comm_all_reduce_i64(lf_comm *c, int64_t *v, size_t n, lf_comm_op op) {
    if (c && (!op_valid(op) || op == LF_COMM_AVG))
        return refuse(c, LF_ERR_INVALID_ARG, "lf_comm_all_reduce_i64: op %d is not sum, max or min", (int)op);
    if (c && n > LF_COMM_SCALARS_MAX)
        return refuse(c, LF_ERR_RANGE, "lf_comm_all_reduce_i64: %zu values (at most %d)", n, LF_COMM_SCALARS_MAX);
    lf_status st = begin(c, LF_COMM_COLL_ALL_REDUCE_I64, "lf_comm_all_reduce_i64", n, v != NULL);
    if (st != LF_OK) return st;
    if (!c->ops->all_reduce_i64) return unsupported(c, "lf_comm_all_reduce_i64");
    return finish(c, c->ops->all_reduce_i64(c, v, n, op));
}

/* ---------------------------------------------------------------- bf16
 * A kind that moves bf16 itself fills the *_bf16 slots (nccl). A host kind
 * without them gets the host path here: every rank's values widened to
 * fp32 scratch (exact), the kind's fp32 collective (its rank-order fold),
 * and one rounding back to bf16; the bits comm.h promises. */

/* fp32 scratch of n elements for the host path (NULL and refused: none). */
static float *bf16_scratch(lf_comm *c, const char *fn, size_t n) {
    float *w = lf_alloc((n ? n : 1) * sizeof(float));
    if (!w) refuse(c, LF_ERR_NOMEM, "%s: out of memory for the fp32 scratch of %zu bf16 values", fn, n);
    return w;
}

/* The checks of a reduce-scatter (gather 0: recv is the part of send) or
 * an all-gather (gather 1: send is the part of recv) of es-byte elements. */
static lf_status check_parted(lf_comm *c, const char *fn, const void *send, const void *recv, size_t n, size_t es,
                              int gather) {
    if (!c) return LF_OK; /* begin() names the NULL handle */
    if (n >= LF_COMM_PART_MAX) return refuse(c, LF_ERR_RANGE, "%s: %zu elements (at most 2^31 - 1)", fn, n);
    size_t off = 0, mine = 0;
    lf_comm_partition(n, c->size, c->rank, &off, &mine);
    const void *full = gather ? recv : send, *part = gather ? send : recv;
    if (!placement_ok(full, n, part, off, mine, es))
        return refuse(c, LF_ERR_INVALID_ARG, "%s: %s overlaps %s without being %s + %zu (this rank's part)", fn,
                      gather ? "send" : "recv", gather ? "recv" : "send", gather ? "recv" : "send", off);
    return LF_OK;
}

static int part_present(const lf_comm *c, size_t n, const void *part) {
    size_t off = 0, mine = 0;
    if (c) lf_comm_partition(n, c->size, c->rank, &off, &mine);
    return part || !mine;
}

lf_status lf_comm_all_reduce_bf16(lf_comm *c, uint16_t *buf, size_t n, lf_comm_op op) {
    const char *fn = "lf_comm_all_reduce_bf16";
    if (c && !op_valid(op)) return refuse(c, LF_ERR_INVALID_ARG, "%s: op %d is not a reduction", fn, (int)op);
    lf_status st = begin(c, LF_COMM_COLL_ALL_REDUCE, fn, n, buf != NULL);
    if (st != LF_OK) return st;
    c->bf16 = 1;
    if (c->ops->all_reduce_bf16) return finish(c, c->ops->all_reduce_bf16(c, buf, n, op));
    if (c->ops->device_buffers || !c->ops->all_reduce) return unsupported(c, fn);
    float *w = bf16_scratch(c, fn, n);
    if (!w) return finish(c, LF_ERR_NOMEM);
    lf__bf16_widen(w, buf, n);
    st = c->ops->all_reduce(c, w, n, op);
    if (st == LF_OK) lf__bf16_round(buf, w, n);
    lf_free(w);
    return finish(c, st);
}

/* The host path of a reduce-scatter: the whole send widened, reduced in
 * place (this rank's part lands at its offset), that part rounded. */
static lf_status rs_bf16_host(lf_comm *c, const char *fn, const uint16_t *send, uint16_t *recv, size_t n,
                              lf_comm_op op) {
    if (c->ops->device_buffers || !c->ops->reduce_scatter) return unsupported(c, fn);
    float *w = bf16_scratch(c, fn, n);
    if (!w) return finish(c, LF_ERR_NOMEM);
    size_t off = 0, mine = 0;
    lf_comm_partition(n, c->size, c->rank, &off, &mine);
    lf__bf16_widen(w, send, n);
    lf_status st = c->ops->reduce_scatter(c, w, w + off, n, op);
    if (st == LF_OK) lf__bf16_round(recv, w + off, mine);
    lf_free(w);
    return finish(c, st);
}

lf_status lf_comm_reduce_scatter_bf16(lf_comm *c, const uint16_t *send, uint16_t *recv, size_t n, lf_comm_op op) {
    const char *fn = "lf_comm_reduce_scatter_bf16";
    if (c && !op_valid(op)) return refuse(c, LF_ERR_INVALID_ARG, "%s: op %d is not a reduction", fn, (int)op);
    lf_status st = check_parted(c, fn, send, recv, n, sizeof(uint16_t), 0);
    if (st != LF_OK) return st;
    st = begin(c, LF_COMM_COLL_REDUCE_SCATTER, fn, n, send && part_present(c, n, recv));
    if (st != LF_OK) return st;
    c->bf16 = 1;
    if (c->ops->reduce_scatter_bf16) return finish(c, c->ops->reduce_scatter_bf16(c, send, recv, n, op));
    return rs_bf16_host(c, fn, send, recv, n, op);
}

lf_status lf_comm_reduce_scatter_start_bf16(lf_comm *c, const uint16_t *send, uint16_t *recv, size_t n, lf_comm_op op,
                                            int64_t *ticket) {
    const char *fn = "lf_comm_reduce_scatter_start_bf16";
    if (ticket) *ticket = 0;
    if (!ticket) return lf_fail(LF_ERR_INVALID_ARG, "%s: ticket is NULL", fn);
    if (!c || !c->ops->reduce_scatter_start_bf16) return lf_comm_reduce_scatter_bf16(c, send, recv, n, op);
    if (!op_valid(op)) return refuse(c, LF_ERR_INVALID_ARG, "%s: op %d is not a reduction", fn, (int)op);
    lf_status st = check_parted(c, fn, send, recv, n, sizeof(uint16_t), 0);
    if (st != LF_OK) return st;
    st = begin(c, LF_COMM_COLL_REDUCE_SCATTER, fn, n, send && part_present(c, n, recv));
    if (st != LF_OK) return st;
    c->bf16 = 1;
    return finish_as(c, c->ops->reduce_scatter_start_bf16(c, send, recv, n, op, ticket), 1);
}

/* The host path of an all-gather: this rank's part widened into place, the
 * fp32 all-gather in place, everything rounded back (exact: every value
 * came from a bf16). */
static lf_status ag_bf16_host(lf_comm *c, const char *fn, const uint16_t *send, uint16_t *recv, size_t n) {
    if (c->ops->device_buffers || !c->ops->all_gather) return unsupported(c, fn);
    float *w = bf16_scratch(c, fn, n);
    if (!w) return finish(c, LF_ERR_NOMEM);
    size_t off = 0, mine = 0;
    lf_comm_partition(n, c->size, c->rank, &off, &mine);
    lf__bf16_widen(w + off, send, mine);
    lf_status st = c->ops->all_gather(c, w + off, w, n);
    if (st == LF_OK) lf__bf16_round(recv, w, n);
    lf_free(w);
    return finish(c, st);
}

lf_status lf_comm_all_gather_bf16(lf_comm *c, const uint16_t *send, uint16_t *recv, size_t n) {
    const char *fn = "lf_comm_all_gather_bf16";
    lf_status st = check_parted(c, fn, send, recv, n, sizeof(uint16_t), 1);
    if (st != LF_OK) return st;
    st = begin(c, LF_COMM_COLL_ALL_GATHER, fn, n, recv && part_present(c, n, send));
    if (st != LF_OK) return st;
    c->bf16 = 1;
    if (c->ops->all_gather_bf16) return finish(c, c->ops->all_gather_bf16(c, send, recv, n));
    return ag_bf16_host(c, fn, send, recv, n);
}

lf_status lf_comm_all_gather_start_bf16(lf_comm *c, const uint16_t *send, uint16_t *recv, size_t n, int64_t *ticket) {
    const char *fn = "lf_comm_all_gather_start_bf16";
    if (ticket) *ticket = 0;
    if (!ticket) return lf_fail(LF_ERR_INVALID_ARG, "%s: ticket is NULL", fn);
    if (!c || !c->ops->all_gather_start_bf16) return lf_comm_all_gather_bf16(c, send, recv, n);
    lf_status st = check_parted(c, fn, send, recv, n, sizeof(uint16_t), 1);
    if (st != LF_OK) return st;
    st = begin(c, LF_COMM_COLL_ALL_GATHER, fn, n, recv && part_present(c, n, send));
    if (st != LF_OK) return st;
    c->bf16 = 1;
    return finish_as(c, c->ops->all_gather_start_bf16(c, send, recv, n, ticket), 1);
}

/* Bytes on every kind: the device broadcast slot moves them unchanged. */
lf_status lf_comm_broadcast_bf16(lf_comm *c, uint16_t *buf, size_t n, int root) {
    if (n > SIZE_MAX / sizeof(uint16_t))
        return c ? refuse(c, LF_ERR_RANGE, "lf_comm_broadcast_bf16: %zu values", n) : LF_ERR_RANGE;
    return broadcast(c, buf, n * sizeof(uint16_t), n, root, "lf_comm_broadcast_bf16", 0);
}
