/* The nccl communicator as N ranks, started by mpirun (tests/CMakeLists.txt,
 * label `nccl`: the NCCL shim over the CUDA-on-CPU shim; label `gpu`: the
 * same source against libnccl on real GPUs, SKIPPED without one):
 *
 *   nccl_comm                 every collective on device buffers (cudaMalloc,
 *                             odd sizes, in place and not, every op) against
 *                             the rank-order fold computed on the host; the
 *                             host path (broadcast_bytes, barrier, f64/i64)
 *                             beside it; "auto" with device tensors picks
 *                             nccl; host memory handed to a device
 *                             collective is refused (shim); the bf16
 *                             collectives (bf16_check.h)
 *   nccl_comm timeout T       rank 1 stalls; the others return LF_ERR_TIMEOUT
 *                             after T s naming the collective, its context and
 *                             rank 1 (driven by tests/comm/mpi_faults.sh)
 *   nccl_comm timeout-started T  the same for a reduce-scatter started
 *                             (lf_comm_reduce_scatter_start, wait, wait_all):
 *                             the watchdog covers it and names it
 *   nccl_comm torchrun        the nccl kind launched torchrun-style: each
 *                             rank sees only RANK, WORLD_SIZE, LOCAL_RANK,
 *                             LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT (a
 *                             getenv of its own hides mpirun's), so its
 *                             control handle is the tcp kind, the NCCL id goes
 *                             over that rendezvous and the host values over
 *                             TCP; the shim's data path still rides on MPI
 *                             (initialised by the test's own mpi handle)
 *   nccl_comm mismatch T      rank 1 all-reduces one element more
 *   nccl_comm kill T DIR      rank 2 kills itself mid-loop
 *
 * What is compared (the error model): on the shim every reduction is the
 * rank-order fold ((x_0 + x_1) + x_2) ..., so the bits must equal the host
 * fold's. Real NCCL adds in ring or tree order: each element of a sum of P
 * floats then differs from the fold by at most 2 (P - 1) u sum_p |x_p|
 * (u = 2^-24: two orders of P - 1 roundings each, Higham's bound gamma_{P-1}
 * for either), which is what the GPU build checks; MAX/MIN and the gathers
 * and broadcasts are exact everywhere, and every rank must hold the same
 * bits in all cases.
 *
 * Not a cmocka program: a failed check on one rank ends every rank
 * (lf_comm_abort), or the others would wait for it. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "llmforge/comm.h"
#include "llmforge/comm_nccl.h"
#include "cuda_api.h"

#include "comm/mpi_check.h"
#include "comm/bf16_check.h"

static int g_size = 0;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#ifdef LF_NCCL_SHIM
static const int k_exact = 1; /* the shim folds in rank order */
#else
static const int k_exact = 0; /* NCCL: ring/tree order, within the bound above */
#endif

/* Element i of rank p's input: magnitudes from 2^-8 to 2^7, so the order of
 * a float sum changes its bits. */
static float val(uint64_t salt, int p, size_t i) {
    uint64_t h = lf_rng_mix(lf_rng_mix(salt, (uint64_t)p), (uint64_t)i);
    float u = (float)(h >> 40) * (1.0f / 16777216.0f) - 0.5f;
    return ldexpf(u, (int)((h >> 8) & 15) - 8);
}

/* The fold of element i over ranks in rank order, and sum_p |x_p|. */
static float expect_at(uint64_t salt, size_t i, lf_comm_op op, double *abs_sum) {
    float e = val(salt, 0, i);
    double a = fabs((double)e);
    for (int p = 1; p < g_size; p++) {
        float v = val(salt, p, i);
        a += fabs((double)v);
        if (op == LF_COMM_SUM || op == LF_COMM_AVG) e = e + v;
        else if (op == LF_COMM_MAX) e = v > e ? v : e;
        else e = v < e ? v : e;
    }
    if (abs_sum) *abs_sum = op == LF_COMM_AVG ? a / g_size : a;
    return op == LF_COMM_AVG ? e / (float)g_size : e;
}

static const char *op_name(lf_comm_op op) {
    return op == LF_COMM_SUM ? "sum" : op == LF_COMM_AVG ? "avg" : op == LF_COMM_MAX ? "max" : "min";
}

/* ---------------------------------------------------------------- device buffers */
static float *dev_alloc(size_t n) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, (n ? n : 1) * sizeof(float));
    CHECK(e == cudaSuccess, "cudaMalloc(%zu floats): %s", n, cudaGetErrorString(e));
    return p;
}
static void to_dev(float *d, const float *h, size_t n) {
    if (n) CHECK(cudaMemcpy(d, h, n * sizeof *h, cudaMemcpyHostToDevice) == cudaSuccess, "cudaMemcpy to device");
}
static void from_dev(float *h, const float *d, size_t n) {
    if (n) CHECK(cudaMemcpy(h, d, n * sizeof *h, cudaMemcpyDeviceToHost) == cudaSuccess, "cudaMemcpy to host");
}
/* bf16_check.h's hooks: device buffers */
static void *dev_bytes(size_t bytes) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    CHECK(e == cudaSuccess, "cudaMalloc(%zu bytes): %s", bytes, cudaGetErrorString(e));
    return p;
}
static void dev_release(void *p) { cudaFree(p); }
static void dev_put(void *d, const void *h, size_t bytes) {
    if (bytes) CHECK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) == cudaSuccess, "cudaMemcpy to device");
}
static void dev_get(void *h, const void *d, size_t bytes) {
    if (bytes) CHECK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost) == cudaSuccess, "cudaMemcpy to host");
}

static float *host_alloc(size_t n) {
    float *p = malloc((n ? n : 1) * sizeof *p);
    CHECK(p, "out of memory (%zu floats)", n);
    return p;
}

static void compare(const float *got, uint64_t salt, size_t from, size_t n, lf_comm_op op, const char *what,
                    size_t total) {
    for (size_t i = 0; i < n; i++) {
        double a = 0;
        float e = expect_at(salt, from + i, op, &a);
        int ok = k_exact || op == LF_COMM_MAX || op == LF_COMM_MIN
                     ? memcmp(&got[i], &e, sizeof e) == 0
                     : fabs((double)got[i] - (double)e) <= 2.0 * (g_size - 1) * ldexp(1.0, -24) * a;
        if (!ok)
            fail_at(__FILE__, __LINE__, "%s n=%zu %s: element %zu is %.9g, expected %.9g%s", what, total, op_name(op),
                    from + i, got[i], e, k_exact ? " (the rank-order fold, bit for bit)" : "");
    }
}

/* The same bits on every rank: a hash, compared by max == min. */
static void same_everywhere(lf_comm *c, const float *h, size_t n, const char *what) {
    uint64_t x = 1469598103934665603ull;
    const unsigned char *b = (const unsigned char *)h;
    for (size_t i = 0; i < n * sizeof *h; i++) x = (x ^ b[i]) * 1099511628211ull;
    int64_t mx = (int64_t)(x >> 1), mn = mx;
    OK(lf_comm_all_reduce_i64(c, &mx, 1, LF_COMM_MAX));
    OK(lf_comm_all_reduce_i64(c, &mn, 1, LF_COMM_MIN));
    CHECK(mx == mn, "%s n=%zu: the ranks hold different bits", what, n);
}

static void check_all_reduce(lf_comm *c, size_t n, lf_comm_op op, uint64_t salt) {
    float *h = host_alloc(n), *d = dev_alloc(n);
    for (size_t i = 0; i < n; i++) h[i] = val(salt, g_rank, i);
    to_dev(d, h, n);
    OK(lf_comm_all_reduce(c, d, n, op));
    from_dev(h, d, n);
    compare(h, salt, 0, n, op, "all_reduce", n);
    if (op == LF_COMM_SUM) same_everywhere(c, h, n, "all_reduce");
    cudaFree(d);
    free(h);
}

static void check_reduce_scatter(lf_comm *c, size_t n, lf_comm_op op, uint64_t salt, int in_place) {
    size_t off, cnt;
    lf_comm_partition(n, g_size, g_rank, &off, &cnt);
    float *h = host_alloc(n), *send = dev_alloc(n), *recv = in_place ? send + off : dev_alloc(cnt);
    for (size_t i = 0; i < n; i++) h[i] = val(salt, g_rank, i);
    to_dev(send, h, n);
    OK(lf_comm_reduce_scatter(c, send, recv, n, op));
    from_dev(h, recv, cnt);
    compare(h, salt, off, cnt, op, in_place ? "reduce_scatter (in place)" : "reduce_scatter", n);
    if (!in_place) {
        from_dev(h, send, n);
        for (size_t i = 0; i < n; i++) /* the input is left alone */
            CHECK(h[i] == val(salt, g_rank, i), "reduce_scatter n=%zu changed its input at %zu", n, i);
        cudaFree(recv);
    }
    cudaFree(send);
    free(h);
}

/* Started reduce-scatters (lf_comm_reduce_scatter_start, the trainer's
 * overlap): k of them in flight at once (k > the kind's 16 slots makes it
 * retire the oldest first), waited for in an order of their own, each
 * part the blocking collective's (in place and not), every ticket named
 * once; lf_comm_wait of a retired or unknown ticket is free. */
static void check_started(lf_comm *c, int k, uint64_t salt) {
    const size_t n = 1000 + (size_t)k; /* not a multiple of 2..4 ranks for odd k */
    size_t off, cnt;
    lf_comm_partition(n, g_size, g_rank, &off, &cnt);
    float *h = host_alloc(n), *send[24], *recv[24];
    int64_t ticket[24];
    CHECK(k <= 24, "k %d", k);
    for (int j = 0; j < k; j++) {
        send[j] = dev_alloc(n);
        recv[j] = j % 2 ? send[j] + off : dev_alloc(cnt); /* in place every other one */
        for (size_t i = 0; i < n; i++) h[i] = val(salt + (uint64_t)j, g_rank, i);
        to_dev(send[j], h, n);
    }
    double busy0 = 0, exposed0 = 0, busy1 = 0, exposed1 = 0;
    lf_comm_times(c, &busy0, &exposed0);
    for (int j = 0; j < k; j++) {
        OK(lf_comm_reduce_scatter_start(c, send[j], recv[j], n, LF_COMM_SUM, &ticket[j]));
        CHECK(ticket[j] > 0 && (j == 0 || ticket[j] > ticket[j - 1]), "ticket %lld after %lld", (long long)ticket[j],
              (long long)(j ? ticket[j - 1] : 0));
    }
    for (int j = k - 1; j >= 0; j -= 2) OK(lf_comm_wait(c, ticket[j])); /* some, newest first */
    OK(lf_comm_wait_all(c));
    OK(lf_comm_wait(c, ticket[0])); /* retired: nothing to do */
    OK(lf_comm_wait(c, 0));
    /* lf_comm_times counted them: their time on the stream (busy) and the host's in the calls (exposed) */
    lf_comm_times(c, &busy1, &exposed1);
    CHECK(busy1 > busy0 && exposed1 > exposed0, "%d started reduce-scatters: busy %.3f -> %.3f ms, exposed %.3f -> "
          "%.3f ms", k, busy0, busy1, exposed0, exposed1);
    for (int j = 0; j < k; j++) {
        from_dev(h, recv[j], cnt);
        compare(h, salt + (uint64_t)j, off, cnt, LF_COMM_SUM, j % 2 ? "started reduce_scatter (in place)"
                                                                     : "started reduce_scatter", n);
        if (!(j % 2)) cudaFree(recv[j]);
        cudaFree(send[j]);
    }
    int64_t none = -1;
    OK(lf_comm_reduce_scatter_start(c, send[0], send[0], 0, LF_COMM_SUM, &none)); /* nothing to sum */
    CHECK(none == 0, "an empty started reduce-scatter got ticket %lld", (long long)none);
    free(h);
}

/* Started all-reduces (lf_comm_all_reduce_start, data parallel's per-unit
 * gradient sums): k in flight (k > 16 retires the oldest first), each the
 * blocking collective's result, every ticket increasing. */
static void check_all_reduce_started(lf_comm *c, int k, uint64_t salt) {
    const size_t n = 999 + (size_t)k;
    float *h = host_alloc(n), *buf[24];
    int64_t ticket[24];
    CHECK(k <= 24, "k %d", k);
    for (int j = 0; j < k; j++) {
        buf[j] = dev_alloc(n);
        for (size_t i = 0; i < n; i++) h[i] = val(salt + (uint64_t)j, g_rank, i);
        to_dev(buf[j], h, n);
    }
    for (int j = 0; j < k; j++) {
        OK(lf_comm_all_reduce_start(c, buf[j], n, LF_COMM_SUM, &ticket[j]));
        CHECK(ticket[j] > 0 && (j == 0 || ticket[j] > ticket[j - 1]), "all_reduce ticket %lld after %lld",
              (long long)ticket[j], (long long)(j ? ticket[j - 1] : 0));
    }
    OK(lf_comm_wait(c, ticket[k - 1]));
    OK(lf_comm_wait_all(c));
    for (int j = 0; j < k; j++) {
        from_dev(h, buf[j], n);
        compare(h, salt + (uint64_t)j, 0, n, LF_COMM_SUM, "started all_reduce", n);
        cudaFree(buf[j]);
    }
    free(h);
}

static void check_all_gather(lf_comm *c, size_t n, uint64_t salt, int in_place) {
    size_t off, cnt;
    lf_comm_partition(n, g_size, g_rank, &off, &cnt);
    float *h = host_alloc(n), *recv = dev_alloc(n), *send = in_place ? recv + off : dev_alloc(cnt);
    for (size_t i = 0; i < n; i++) h[i] = -1e30f;
    to_dev(recv, h, n);
    for (size_t i = 0; i < cnt; i++) h[i] = val(salt, 77, off + i);
    to_dev(send, h, cnt);
    OK(lf_comm_all_gather(c, send, recv, n));
    from_dev(h, recv, n);
    for (size_t i = 0; i < n; i++)
        CHECK(h[i] == val(salt, 77, i), "all_gather%s n=%zu: element %zu is %g, expected %g",
              in_place ? " (in place)" : "", n, i, h[i], val(salt, 77, i));
    if (!in_place) cudaFree(send);
    cudaFree(recv);
    free(h);
}

static void check_broadcast(lf_comm *c, size_t n, uint64_t salt) {
    int root = (int)(n % (size_t)g_size);
    float *h = host_alloc(n), *d = dev_alloc(n);
    for (size_t i = 0; i < n; i++) h[i] = g_rank == root ? val(salt, root, i) : -2.0f;
    to_dev(d, h, n);
    OK(lf_comm_broadcast(c, d, n, root));
    from_dev(h, d, n);
    for (size_t i = 0; i < n; i++) CHECK(h[i] == val(salt, root, i), "broadcast n=%zu root %d: element %zu", n, root, i);
    cudaFree(d);
    free(h);
    size_t nb = 2 * n + 1; /* host bytes, odd count */
    unsigned char *b = malloc(nb);
    CHECK(b, "out of memory");
    for (size_t i = 0; i < nb; i++) b[i] = g_rank == root ? (unsigned char)(i * 31 + 7) : 0;
    OK(lf_comm_broadcast_bytes(c, b, nb, root));
    for (size_t i = 0; i < nb; i++) CHECK(b[i] == (unsigned char)(i * 31 + 7), "broadcast_bytes %zu: byte %zu", nb, i);
    free(b);
}

static void check_scalars(lf_comm *c) {
    double v[3] = {0.5 * g_rank, 1.0, -(double)g_rank};
    OK(lf_comm_all_reduce_f64(c, v, 3, LF_COMM_SUM));
    double e0 = 0;
    for (int p = 0; p < g_size; p++) e0 += 0.5 * p;
    CHECK(v[0] == e0 && v[1] == g_size && v[2] == -2 * e0, "all_reduce_f64: %g %g %g", v[0], v[1], v[2]);
    int64_t flag = g_rank == g_size - 1;
    OK(lf_comm_all_reduce_i64(c, &flag, 1, LF_COMM_MAX));
    CHECK(flag == 1, "all_reduce_i64 max: %lld", (long long)flag);
}

static int run_collectives(void) {
    lf_comm *c = NULL, *a = NULL;
    OK(lf_comm_open(&c, "nccl", NULL));
    g_abort_via = c;
    g_rank = lf_comm_rank(c);
    g_size = lf_comm_size(c);
    CHECK(strcmp(lf_comm_name(c), "nccl") == 0 && lf_comm_device_buffers(c) == 1, "kind %s", lf_comm_name(c));
    OK(lf_comm_set_stream(c, NULL)); /* the legacy default stream, where the copies below run */

    /* "auto" with device tensors: nccl on several ranks, single on one */
    lf_comm_options o = lf_comm_options_default();
    o.device_tensors = 1;
    o.timeout_s = 120;
    OK(lf_comm_open(&a, "auto", &o));
    const char *want = g_size > 1 ? "nccl" : "single";
    CHECK(strcmp(lf_comm_name(a), want) == 0, "auto with device tensors opened '%s', expected '%s'", lf_comm_name(a),
          want);

    const lf_comm_op ops[4] = {LF_COMM_SUM, LF_COMM_AVG, LF_COMM_MAX, LF_COMM_MIN};
    /* multiples of 1..4 ranks and not (NCCL's equal-part path and the grouped one) */
    const size_t sizes[] = {1, 2, 3, 5, 12, 17, 1000, 4099, 100003};
    uint64_t salt = 1;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t n = sizes[s];
        lf_comm_set_context(c, "n=%zu", n);
        for (int k = 0; k < 4; k++) {
            check_all_reduce(c, n, ops[k], salt++);
            check_reduce_scatter(c, n, ops[k], salt++, 0);
            check_reduce_scatter(c, n, ops[k], salt++, 1);
        }
        check_all_gather(c, n, salt++, 0);
        check_all_gather(c, n, salt++, 1);
        check_broadcast(c, n, salt++);
        OK(lf_comm_barrier(c));
    }
    check_scalars(c);
    CHECK(lf_comm_async(c), "the nccl kind says its started collectives are not asynchronous");
    check_started(c, 3, salt);
    salt += 3;
    check_started(c, 21, salt); /* more than its 16 slots */
    salt += 21;
    check_all_reduce_started(c, 3, salt);
    salt += 3;
    check_all_reduce_started(c, 20, salt);
    salt += 20;
    check_all_reduce(a, 4099, LF_COMM_SUM, salt++); /* the second handle works beside the first */

    /* bf16 (ncclBfloat16): the shim's bits are bf16 of the fp32 rank-order
     * fold; NCCL's within (P - 1) 2^-8 sum|x| (bf16_check.h) */
    const bf16_mem dev = {dev_bytes, dev_release, dev_put, dev_get};
    const size_t bf16_sizes[] = {1, 3, 12, 17, 1000, 4099, 100003};
    for (size_t s = 0; s < sizeof bf16_sizes / sizeof bf16_sizes[0]; s++, salt += 8)
        check_bf16_collectives(c, &dev, bf16_sizes[s], salt, k_exact);

    /* the handles numbered their collectives alike on every rank */
    int64_t seq[2] = {lf_comm_seq(c), lf_comm_seq(a)}, seqmin[2] = {seq[0], seq[1]};
    OK(lf_comm_all_reduce_i64(c, seq, 2, LF_COMM_MAX));
    OK(lf_comm_all_reduce_i64(c, seqmin, 2, LF_COMM_MIN));
    CHECK(seq[0] == seqmin[0] && seq[1] == seqmin[1], "collective numbers differ between ranks");

#ifdef LF_NCCL_SHIM
    /* host memory where a GPU needs device memory: refused, on every rank alike */
    if (g_size > 1) {
        float host[8] = {0};
        lf_status st = lf_comm_all_reduce(a, host, 8, LF_COMM_SUM);
        CHECK(st == LF_ERR_INVALID_ARG && strstr(lf_comm_errmsg(a), "not device memory"),
              "all_reduce of host memory returned %s: %s", lf_status_str(st), lf_comm_errmsg(a));
    }
#endif
    OK(lf_comm_barrier(c));
    if (g_rank == 0)
        printf("nccl_comm: %d rank(s): every collective on device buffers matches the rank-order fold %s\n", g_size,
               k_exact ? "bit for bit (NCCL shim)" : "within 2 (P-1) u sum|x| (NCCL)");
    lf_comm_close(a);
    g_abort_via = NULL;
    lf_comm_close(c);
    return 0;
}

static lf_comm *open_faulty(double T) {
    lf_comm *c = NULL;
    lf_comm_options o = lf_comm_options_default();
    o.timeout_s = T;
    OK(lf_comm_open(&c, "nccl", &o));
    g_abort_via = c;
    g_rank = lf_comm_rank(c);
    g_size = lf_comm_size(c);
    return c;
}

static int run_timeout(double T, int started) {
    lf_comm *c = open_faulty(T);
    CHECK(g_size >= 3, "the timeout test needs 3 ranks or more (got %d)", g_size);
    OK(lf_comm_barrier(c));
    lf_comm_set_context(c, "step %d", 12);
    float *d = dev_alloc(1000);
    if (g_rank == 1) { /* the late rank: stalls outside the communicator */
        sleep((unsigned)(T + 60));
        fail_at(__FILE__, __LINE__, "the late rank was not stopped by the others' abort");
    }
    double t0 = now_s();
    lf_status st;
    if (started) { /* the watchdog over a started collective: in the start (the shim) or in wait_all */
        int64_t ticket = 0;
        size_t off = 0;
        lf_comm_partition(1000, g_size, g_rank, &off, NULL);
        st = lf_comm_reduce_scatter_start(c, d, d + off, 1000, LF_COMM_SUM, &ticket);
        if (st == LF_OK) st = lf_comm_wait(c, ticket);
        if (st == LF_OK) st = lf_comm_wait_all(c);
    } else {
        st = lf_comm_all_reduce(c, d, 1000, LF_COMM_SUM);
    }
    double dt = now_s() - t0;
    const char *msg = lf_comm_errmsg(c);
    const char *coll = started ? "reduce_scatter #2 (step 12, 1000 floats)" : "all_reduce #2 (step 12, 1000 floats)";
    CHECK(st == LF_ERR_TIMEOUT, "%s returned %s after %.2f s: %s", coll, lf_status_str(st), dt, msg);
    CHECK(strstr(msg, coll), "message lacks the collective and context: %s", msg);
    CHECK(strstr(msg, "rank that did not arrive: 1;"), "message does not name rank 1 alone: %s", msg);
    CHECK(strstr(msg, "NCCL communicator aborted"), "message does not say NCCL was aborted: %s", msg);
    CHECK(dt >= T - 0.01 && dt <= T + 5.0 + 2.0, "returned after %.2f s for a %.1f s timeout", dt, T);
    st = lf_comm_barrier(c);
    CHECK(st == LF_ERR_INVALID_ARG && strstr(lf_last_error(), "unusable"), "a failed handle was used again: %s",
          lf_status_str(st));
    printf("rank %d: PASS timeout after %.2f s: %s\n", g_rank, dt, msg);
    fflush(stdout);
    sleep(2); /* let the other waiting ranks report too */
    lf_comm_abort(c, 3);
    return 1;
}

static int run_mismatch(double T) {
    lf_comm *c = open_faulty(T);
    float *d = dev_alloc(1001);
    lf_comm_set_context(c, "step 3");
    double t0 = now_s();
    lf_status st = lf_comm_all_reduce(c, d, g_rank == 1 ? 1001 : 1000, LF_COMM_SUM);
    double dt = now_s() - t0;
    if (st == LF_OK) { /* this rank cannot tell; the ranks that can end the job while it waits */
        printf("rank %d: all_reduce returned LF_OK; waiting for the others' abort\n", g_rank);
        fflush(stdout);
        st = lf_comm_barrier(c);
        fail_at(__FILE__, __LINE__, "the barrier after a mismatched all_reduce returned %s", lf_status_str(st));
    }
    CHECK(st == LF_ERR_TIMEOUT || st == LF_ERR_IO, "mismatched all_reduce returned %s", lf_status_str(st));
    printf("rank %d: PASS mismatch after %.2f s: %s: %s\n", g_rank, dt, lf_status_str(st), lf_comm_errmsg(c));
    fflush(stdout);
    sleep(1);
    lf_comm_abort(c, 3);
    return 1;
}

static int run_kill(double T, const char *dir) {
    lf_comm *c = open_faulty(T);
    char path[4096];
    snprintf(path, sizeof path, "%s/pid.%d", dir, g_rank);
    FILE *f = fopen(path, "w");
    CHECK(f, "cannot write %s", path);
    fprintf(f, "%ld\n", (long)getpid());
    fclose(f);
    float *d = dev_alloc(4096);
    for (int step = 1; step <= 1000000; step++) {
        lf_comm_set_context(c, "step %d", step);
        if (g_rank == 2 && step == 20) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            snprintf(path, sizeof path, "%s/killed_at", dir);
            f = fopen(path, "w");
            CHECK(f, "cannot write %s", path);
            fprintf(f, "%lld.%09ld\n", (long long)ts.tv_sec, ts.tv_nsec);
            fclose(f);
            raise(SIGKILL);
        }
        double t0 = now_s();
        lf_status st = lf_comm_all_reduce(c, d, 4096, LF_COMM_AVG);
        if (st != LF_OK) {
            printf("rank %d: ERROR after %.2f s: %s: %s\n", g_rank, now_s() - t0, lf_status_str(st),
                   lf_comm_errmsg(c));
            fflush(stdout);
            sleep(1);
            lf_comm_abort(c, 4);
        }
    }
    printf("rank %d: FAIL the loop finished although rank 2 died\n", g_rank);
    lf_comm_close(c);
    return 0;
}

/* ---------------------------------------------------------------- torchrun-style */
static char g_tr_rank[16], g_tr_size[16], g_tr_port[16];
static const char *torchrun_getenv(const char *name, void *user) {
    (void)user;
    if (!strcmp(name, "RANK") || !strcmp(name, "LOCAL_RANK")) return g_tr_rank;
    if (!strcmp(name, "WORLD_SIZE") || !strcmp(name, "LOCAL_WORLD_SIZE")) return g_tr_size;
    if (!strcmp(name, "MASTER_ADDR")) return "127.0.0.1";
    if (!strcmp(name, "MASTER_PORT")) return g_tr_port;
    return NULL; /* no OMPI_*, PMI_*, SLURM_*: what torchrun's children see */
}

/* A port nobody listens on now (bound to 0, read back, closed). */
static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(fd >= 0, "socket");
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    CHECK(bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0,
          "bind to a free port");
    close(fd);
    return ntohs(a.sin_port);
}

static int run_torchrun(void) {
    lf_comm *m = NULL, *c = NULL;
    OK(lf_comm_open(&m, "mpi", NULL)); /* the test's own handle: MPI for the shim's data path, and the abort */
    g_abort_via = m;
    g_rank = lf_comm_rank(m);
    g_size = lf_comm_size(m);
    int64_t port = g_rank == 0 ? free_port() : 0;
    OK(lf_comm_all_reduce_i64(m, &port, 1, LF_COMM_MAX));
    snprintf(g_tr_rank, sizeof g_tr_rank, "%d", g_rank);
    snprintf(g_tr_size, sizeof g_tr_size, "%d", g_size);
    snprintf(g_tr_port, sizeof g_tr_port, "%d", (int)port);
    lf_comm_options o = lf_comm_options_default();
    o.getenv_fn = torchrun_getenv;
    o.timeout_s = 60;
    OK(lf_comm_open(&c, "nccl", &o));
    CHECK(lf_comm_launch_env(c)->launcher == LF_COMM_LAUNCHER_TORCHRUN, "launcher %s, expected torchrun",
          lf_comm_launcher_name(lf_comm_launch_env(c)->launcher));
    CHECK(lf_comm_rank(c) == g_rank && lf_comm_size(c) == g_size && !strcmp(lf_comm_name(c), "nccl"),
          "torchrun-style nccl: rank %d of %d (%s), MPI says %d of %d", lf_comm_rank(c), lf_comm_size(c),
          lf_comm_name(c), g_rank, g_size);
    OK(lf_comm_set_stream(c, NULL));
    uint64_t salt = 7000;
    lf_comm_set_context(c, "torchrun");
    check_all_reduce(c, 4099, LF_COMM_SUM, salt++);
    check_all_reduce(c, 17, LF_COMM_MAX, salt++);
    check_reduce_scatter(c, 1003, LF_COMM_SUM, salt++, 1);
    check_all_gather(c, 1003, salt++, 0);
    check_broadcast(c, 101, salt++); /* broadcast_bytes over the tcp control path */
    check_scalars(c);                /* f64/i64 over it too */
    const bf16_mem dev = {dev_bytes, dev_release, dev_put, dev_get};
    check_bf16_collectives(c, &dev, 1000, salt, k_exact);
    OK(lf_comm_barrier(c));
    if (g_rank == 0)
        printf("nccl_comm torchrun: %d rank(s) from torchrun's variables alone: the NCCL id over the tcp rendezvous "
               "at 127.0.0.1:%d, collectives and host values as under mpirun\n", g_size, (int)port);
    lf_comm_close(c);
    g_abort_via = NULL;
    lf_comm_close(m);
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        (void)cudaGetLastError();
        printf("SKIPPED: no CUDA device\n");
        return 0;
    }
    if (lf_comm_nccl_register() != LF_OK) {
        fprintf(stderr, "FAIL: lf_comm_nccl_register: %s\n", lf_last_error());
        return 1;
    }
    /* one GPU per local rank (the launcher's), as the CLI chooses */
    lf_comm_env env;
    if (lf_comm_env_detect(&env, NULL, NULL) == LF_OK && env.local_rank > 0 && ndev > 1)
        cudaSetDevice(env.local_rank % ndev);
    const char *mode = argc > 1 ? argv[1] : "collectives";
    double T = argc > 2 ? strtod(argv[2], NULL) : 2.0;
    if (strcmp(mode, "collectives") == 0) return run_collectives();
    if (strcmp(mode, "torchrun") == 0) return run_torchrun();
    if (strcmp(mode, "timeout") == 0) return run_timeout(T, 0);
    if (strcmp(mode, "timeout-started") == 0) return run_timeout(T, 1);
    if (strcmp(mode, "mismatch") == 0) return run_mismatch(T);
    if (strcmp(mode, "kill") == 0 && argc > 3) return run_kill(T, argv[3]);
    fprintf(stderr, "usage: nccl_comm [collectives | timeout T | timeout-started T | mismatch T | kill T DIR]\n");
    return 2;
}
