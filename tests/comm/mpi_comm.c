/* The mpi communicator as N ranks, started by mpirun (CTest runs it through
 * lf_add_mpi_test and tests/comm/mpi_faults.sh; see tests/CMakeLists.txt).
 *
 *   mpi_comm                    every collective on 1..N ranks against a
 *                               locally computed expectation, bit for bit
 *   mpi_comm timeout T          rank 1 stalls; the others must return
 *                               LF_ERR_TIMEOUT after T s naming it
 *   mpi_comm kill T DIR         rank 2 kills itself (SIGKILL) mid-loop;
 *                               writes DIR/pid.<rank> for the driver
 *
 * Not a cmocka program: a failed check on one rank must end every rank
 * (lf_comm_abort), or the others would wait for it. */
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "llmforge/comm.h"

#include "comm/mpi_check.h"
#include "comm/bf16_check.h"

static int g_size = 0;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Element i of rank p's input: magnitudes from 2^-8 to 2^7, so the order of
 * a float sum changes its bits. */
static float val(uint64_t salt, int p, size_t i) {
    uint64_t h = lf_rng_mix(lf_rng_mix(salt, (uint64_t)p), (uint64_t)i);
    float u = (float)(h >> 40) * (1.0f / 16777216.0f) - 0.5f;
    return ldexpf(u, (int)((h >> 8) & 15) - 8);
}

/* The reduction of element i over ranks 0..P-1, folded in rank order. */
static float expect_at(uint64_t salt, int P, size_t i, lf_comm_op op) {
    float e = val(salt, 0, i);
    for (int p = 1; p < P; p++) {
        float v = val(salt, p, i);
        if (op == LF_COMM_SUM || op == LF_COMM_AVG) e = e + v;
        else if (op == LF_COMM_MAX) e = v > e ? v : e;
        else e = v < e ? v : e;
    }
    return op == LF_COMM_AVG ? e / (float)P : e;
}

static const char *op_name(lf_comm_op op) {
    return op == LF_COMM_SUM ? "sum" : op == LF_COMM_AVG ? "avg" : op == LF_COMM_MAX ? "max" : "min";
}

static void *xalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    CHECK(p, "out of memory (%zu bytes)", bytes);
    return p;
}

static void host_copy(void *dst, const void *src, size_t bytes) {
    if (bytes) memcpy(dst, src, bytes);
}

static void same_bits(const float *got, uint64_t salt, size_t from, size_t n, lf_comm_op op, const char *what,
                      size_t total) {
    for (size_t i = 0; i < n; i++) {
        float e = expect_at(salt, g_size, from + i, op);
        if (memcmp(&got[i], &e, sizeof e) != 0)
            fail_at(__FILE__, __LINE__, "%s n=%zu %s: element %zu is %.9g, expected %.9g", what, total, op_name(op), from + i,
                    got[i], e);
    }
}

static double g_coll_s; /* seconds the last checked all_reduce took */

static void check_all_reduce(lf_comm *c, size_t n, lf_comm_op op, uint64_t salt) {
    float *buf = xalloc(n * sizeof *buf);
    for (size_t i = 0; i < n; i++) buf[i] = val(salt, g_rank, i);
    double t0 = now_s();
    OK(lf_comm_all_reduce(c, buf, n, op));
    g_coll_s = now_s() - t0;
    same_bits(buf, salt, 0, n, op, "all_reduce", n);
    free(buf);
}

static void check_reduce_scatter(lf_comm *c, size_t n, lf_comm_op op, uint64_t salt, int in_place) {
    size_t off, cnt;
    lf_comm_partition(n, g_size, g_rank, &off, &cnt);
    float *send = xalloc(n * sizeof *send), *recv = in_place ? send + off : xalloc(cnt * sizeof *recv);
    for (size_t i = 0; i < n; i++) send[i] = val(salt, g_rank, i);
    OK(lf_comm_reduce_scatter(c, send, recv, n, op));
    same_bits(recv, salt, off, cnt, op, in_place ? "reduce_scatter (in place)" : "reduce_scatter", n);
    if (!in_place) {
        for (size_t i = 0; i < n; i++) /* the input is left alone */
            CHECK(send[i] == val(salt, g_rank, i), "reduce_scatter n=%zu changed its input at %zu", n, i);
        free(recv);
    }
    free(send);
}

static void check_all_gather(lf_comm *c, size_t n, uint64_t salt, int in_place) {
    size_t off, cnt;
    lf_comm_partition(n, g_size, g_rank, &off, &cnt);
    float *recv = xalloc(n * sizeof *recv), *send = in_place ? recv + off : xalloc(cnt * sizeof *send);
    for (size_t i = 0; i < n; i++) recv[i] = -1e30f;
    for (size_t i = 0; i < cnt; i++) send[i] = val(salt, 77, off + i);
    OK(lf_comm_all_gather(c, send, recv, n));
    for (size_t i = 0; i < n; i++)
        CHECK(recv[i] == val(salt, 77, i), "all_gather%s n=%zu: element %zu is %g, expected %g",
              in_place ? " (in place)" : "", n, i, recv[i], val(salt, 77, i));
    if (!in_place) free(send);
    free(recv);
}

static void check_broadcast(lf_comm *c, size_t n, uint64_t salt) {
    int root = (int)(n % (size_t)g_size);
    float *buf = xalloc(n * sizeof *buf);
    for (size_t i = 0; i < n; i++) buf[i] = g_rank == root ? val(salt, root, i) : -2.0f;
    OK(lf_comm_broadcast(c, buf, n, root));
    for (size_t i = 0; i < n; i++) CHECK(buf[i] == val(salt, root, i), "broadcast n=%zu root %d: element %zu", n, root, i);
    free(buf);
    size_t nb = 2 * n + 1; /* odd byte count */
    unsigned char *b = xalloc(nb);
    for (size_t i = 0; i < nb; i++) b[i] = g_rank == root ? (unsigned char)(i * 31 + 7) : 0;
    OK(lf_comm_broadcast_bytes(c, b, nb, root));
    for (size_t i = 0; i < nb; i++) CHECK(b[i] == (unsigned char)(i * 31 + 7), "broadcast_bytes %zu: byte %zu", nb, i);
    free(b);
}

static void check_scalars(lf_comm *c, uint64_t salt) {
    enum { N = 5 };
    const lf_comm_op ops[4] = {LF_COMM_SUM, LF_COMM_AVG, LF_COMM_MAX, LF_COMM_MIN};
    for (int k = 0; k < 4; k++) {
        double v[N], e[N];
        for (int j = 0; j < N; j++) {
            v[j] = ldexp((double)val(salt, g_rank, (size_t)j), 30) + g_rank; /* exact scaling */
            e[j] = ldexp((double)val(salt, 0, (size_t)j), 30);
            for (int p = 1; p < g_size; p++) {
                double x = ldexp((double)val(salt, p, (size_t)j), 30) + p;
                e[j] = ops[k] == LF_COMM_MAX ? (x > e[j] ? x : e[j])
                       : ops[k] == LF_COMM_MIN ? (x < e[j] ? x : e[j])
                                               : e[j] + x;
            }
            if (ops[k] == LF_COMM_AVG) e[j] = e[j] / (double)g_size;
        }
        OK(lf_comm_all_reduce_f64(c, v, N, ops[k]));
        CHECK(memcmp(v, e, sizeof v) == 0, "all_reduce_f64 %s: %.17g, expected %.17g", op_name(ops[k]), v[0], e[0]);
        if (ops[k] == LF_COMM_AVG) continue;
        int64_t l[N], le[N];
        for (int j = 0; j < N; j++) {
            l[j] = (int64_t)g_rank * 1000003 + j - 50;
            le[j] = ops[k] == LF_COMM_MIN ? j - 50
                    : ops[k] == LF_COMM_MAX ? (int64_t)(g_size - 1) * 1000003 + j - 50
                                            : (int64_t)1000003 * g_size * (g_size - 1) / 2 + (int64_t)g_size * (j - 50);
        }
        OK(lf_comm_all_reduce_i64(c, l, N, ops[k]));
        CHECK(memcmp(l, le, sizeof l) == 0, "all_reduce_i64 %s: %lld, expected %lld", op_name(ops[k]),
              (long long)l[0], (long long)le[0]);
    }
    /* "did any rank overflow?" */
    int64_t flag = g_rank == g_size - 1;
    OK(lf_comm_all_reduce_i64(c, &flag, 1, LF_COMM_MAX));
    CHECK(flag == 1, "overflow flag: %lld", (long long)flag);
}

/* The same bits on every rank: a hash of the result, compared by max == min. */
static void check_same_everywhere(lf_comm *c, size_t n, uint64_t salt) {
    float *buf = xalloc(n * sizeof *buf);
    int64_t h[2];
    for (int run = 0; run < 2; run++) {
        for (size_t i = 0; i < n; i++) buf[i] = val(salt, g_rank, i);
        OK(lf_comm_all_reduce(c, buf, n, LF_COMM_SUM));
        uint64_t x = 1469598103934665603ull;
        const unsigned char *b = (const unsigned char *)buf;
        for (size_t i = 0; i < n * sizeof *buf; i++) x = (x ^ b[i]) * 1099511628211ull;
        h[run] = (int64_t)(x >> 1);
    }
    CHECK(h[0] == h[1], "all_reduce of the same input gave different bits on a second run");
    int64_t mx = h[0], mn = h[0];
    OK(lf_comm_all_reduce_i64(c, &mx, 1, LF_COMM_MAX));
    OK(lf_comm_all_reduce_i64(c, &mn, 1, LF_COMM_MIN));
    CHECK(mx == mn, "all_reduce results differ between ranks (hash max %llx, min %llx)", (unsigned long long)mx,
          (unsigned long long)mn);
    free(buf);
}

/* A fake environment claiming one rank more than the real world. */
static char g_fake_size[16], g_fake_rank[16];
static const char *fake_getenv(const char *name, void *user) {
    (void)user;
    if (strcmp(name, "SLURM_PROCID") == 0) return g_fake_rank;
    if (strcmp(name, "SLURM_NTASKS") == 0) return g_fake_size;
    return NULL;
}

static int run_collectives(void) {
    lf_comm *a = NULL, *b = NULL;
    OK(lf_comm_open(&a, "mpi", NULL));
    g_abort_via = a;
    g_rank = lf_comm_rank(a);
    g_size = lf_comm_size(a);
    CHECK(strcmp(lf_comm_name(a), "mpi") == 0, "name %s", lf_comm_name(a));
    CHECK(lf_comm_local_rank(a) >= 0 && lf_comm_local_rank(a) < lf_comm_local_size(a) &&
              lf_comm_local_size(a) <= g_size,
          "local rank %d of %d", lf_comm_local_rank(a), lf_comm_local_size(a));
    const lf_comm_env *env = lf_comm_launch_env(a);
    if (env->launcher != LF_COMM_LAUNCHER_NONE)
        CHECK(env->rank == g_rank && env->size == g_size, "launcher says %d of %d", env->rank, env->size);

    /* a launcher that disagrees with MPI is refused (a Slurm batch script
     * without srun looks like this) */
    snprintf(g_fake_rank, sizeof g_fake_rank, "%d", g_rank);
    snprintf(g_fake_size, sizeof g_fake_size, "%d", g_size + 1);
    lf_comm_options o = lf_comm_options_default();
    o.getenv_fn = fake_getenv;
    lf_comm *bad = NULL;
    lf_status st = lf_comm_open(&bad, "mpi", &o);
    CHECK(st == LF_ERR_MISMATCH && bad == NULL, "open with SLURM_NTASKS=%s: %s", g_fake_size, lf_status_str(st));
    CHECK(strstr(lf_last_error(), "SLURM_NTASKS") && strstr(lf_last_error(), "srun"), "message: %s", lf_last_error());

    /* a second handle with a small segment: many rounds per collective */
    o = lf_comm_options_default();
    o.segment_elems = 1000;
    o.timeout_s = 120;
    OK(lf_comm_open(&b, "mpi", &o));
    CHECK(lf_comm_rank(b) == g_rank && lf_comm_size(b) == g_size, "second handle");

    const lf_comm_op ops[4] = {LF_COMM_SUM, LF_COMM_AVG, LF_COMM_MAX, LF_COMM_MIN};
    const size_t sizes[] = {0, 1, 2, 3, 5, 17, 1000, 4099, 100003};
    uint64_t salt = 1;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t n = sizes[s];
        for (int h = 0; h < 2; h++) {
            lf_comm *c = h ? b : a;
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
    }
    check_scalars(a, salt++);
    check_scalars(b, salt++);

    /* large buffers (12 MB, odd size) and determinism */
    const size_t big = 3 * 1024 * 1024 + 7;
    check_all_reduce(a, big, LF_COMM_SUM, salt++);
    double t_big = g_coll_s;
    check_all_reduce(a, big, LF_COMM_AVG, salt++);
    check_reduce_scatter(a, big, LF_COMM_SUM, salt++, 1);
    check_all_gather(a, big, salt++, 1);
    check_broadcast(a, big, salt++);
    check_same_everywhere(a, big, salt++);
    check_same_everywhere(b, 100003, salt++);

    /* bf16 (comm.h "bf16"): the host path, bf16 of the fp32 rank-order fold */
    const bf16_mem host = {xalloc, free, host_copy, host_copy};
    const size_t bf16_sizes[] = {0, 1, 3, 17, 1000, 4099};
    for (size_t s = 0; s < sizeof bf16_sizes / sizeof bf16_sizes[0]; s++) {
        check_bf16_collectives(a, &host, bf16_sizes[s], salt, 1);
        check_bf16_collectives(b, &host, bf16_sizes[s], salt + 1000, 1);
        salt += 8;
    }

    /* the handles numbered their collectives alike on every rank */
    int64_t seq[2] = {lf_comm_seq(a), lf_comm_seq(b)}, seqmin[2] = {seq[0], seq[1]};
    OK(lf_comm_all_reduce_i64(a, seq, 2, LF_COMM_MAX));
    OK(lf_comm_all_reduce_i64(a, seqmin, 2, LF_COMM_MIN));
    CHECK(seq[0] == seqmin[0] && seq[1] == seqmin[1], "collective numbers differ between ranks");

    if (g_rank == 0)
        printf("mpi_comm: %d rank(s): every collective matches; all_reduce of %.1f MB took %.1f ms\n", g_size,
               (double)big * 4 / 1e6, 1e3 * t_big);
    lf_comm_close(b);
    g_abort_via = NULL;
    lf_comm_close(a);
    return 0;
}

static int run_timeout(double T) {
    lf_comm *c = NULL;
    lf_comm_options o = lf_comm_options_default();
    o.timeout_s = T;
    OK(lf_comm_open(&c, "mpi", &o));
    g_abort_via = c;
    g_rank = lf_comm_rank(c);
    g_size = lf_comm_size(c);
    CHECK(g_size >= 3, "the timeout test needs 3 ranks or more (got %d)", g_size);
    OK(lf_comm_barrier(c));
    lf_comm_set_context(c, "step %d", 12);
    float buf[1000];
    for (int i = 0; i < 1000; i++) buf[i] = (float)i;
    if (g_rank == 1) { /* the late rank: stalls outside the communicator */
        sleep((unsigned)(T + 60));
        fail_at(__FILE__, __LINE__, "the late rank was not stopped by the others' abort");
    }
    double t0 = now_s();
    lf_status st = lf_comm_all_reduce(c, buf, 1000, LF_COMM_SUM);
    double dt = now_s() - t0;
    const char *msg = lf_comm_errmsg(c);
    CHECK(st == LF_ERR_TIMEOUT, "all_reduce returned %s after %.2f s: %s", lf_status_str(st), dt, msg);
    CHECK(strstr(msg, "all_reduce #2 (step 12, 1000 floats)"), "message lacks the collective and context: %s", msg);
    CHECK(strstr(msg, "rank that did not arrive: 1;"), "message does not name rank 1 alone: %s", msg);
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

/* Rank 1 calls all_reduce with one element more than the others: the call
 * must fail on every rank (an MPI error or the timeout), never hang. */
static int run_mismatch(double T) {
    lf_comm *c = NULL;
    lf_comm_options o = lf_comm_options_default();
    o.timeout_s = T;
    OK(lf_comm_open(&c, "mpi", &o));
    g_abort_via = c;
    g_rank = lf_comm_rank(c);
    g_size = lf_comm_size(c);
    float buf[1001] = {0};
    lf_comm_set_context(c, "step 3");
    double t0 = now_s();
    lf_status st = lf_comm_all_reduce(c, buf, g_rank == 1 ? 1001 : 1000, LF_COMM_SUM);
    double dt = now_s() - t0;
    if (st == LF_OK) {
        /* a receive larger than what arrives is legal MPI: this rank cannot
         * tell; the ranks that can end the job while it waits here */
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
    lf_comm *c = NULL;
    lf_comm_options o = lf_comm_options_default();
    o.timeout_s = T;
    OK(lf_comm_open(&c, "mpi", &o));
    g_abort_via = c;
    g_rank = lf_comm_rank(c);
    g_size = lf_comm_size(c);
    char path[4096];
    snprintf(path, sizeof path, "%s/pid.%d", dir, g_rank);
    FILE *f = fopen(path, "w");
    CHECK(f, "cannot write %s", path);
    fprintf(f, "%ld\n", (long)getpid());
    fclose(f);
    static float buf[4096];
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
        for (int i = 0; i < 4096; i++) buf[i] = (float)(i + g_rank);
        double t0 = now_s();
        lf_status st = lf_comm_all_reduce(c, buf, 4096, LF_COMM_AVG);
        if (st != LF_OK) {
            printf("rank %d: ERROR after %.2f s: %s: %s\n", g_rank, now_s() - t0, lf_status_str(st),
                   lf_comm_errmsg(c));
            fflush(stdout);
            sleep(1); /* let the other survivors report too */
            lf_comm_abort(c, 4);
        }
    }
    printf("rank %d: FAIL the loop finished although rank 2 died\n", g_rank);
    lf_comm_close(c);
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *mode = argc > 1 ? argv[1] : "collectives";
    double T = argc > 2 ? strtod(argv[2], NULL) : 2.0;
    if (strcmp(mode, "collectives") == 0) return run_collectives();
    if (strcmp(mode, "timeout") == 0) return run_timeout(T);
    if (strcmp(mode, "mismatch") == 0) return run_mismatch(T);
    if (strcmp(mode, "kill") == 0 && argc > 3) return run_kill(T, argv[3]);
    fprintf(stderr, "usage: mpi_comm [collectives | timeout T | kill T DIR]\n");
    return 2;
}
