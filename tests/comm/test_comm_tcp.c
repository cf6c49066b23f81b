/*
 * The "tcp" communicator and its rendezvous (src/comm/comm_tcp.c,
 * comm_rdzv.c), as 2-4 local ranks: each test forks one process per rank,
 * each with a torchrun-style environment (RANK, WORLD_SIZE, LOCAL_RANK,
 * LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT = a free port) given
 * through lf_comm_options.getenv_fn, and checks what every rank reports and
 * how long it took. No MPI is initialised anywhere here.
 *
 * Equality with the mpi kind: each result is compared bit for bit with the
 * rank-order fold computed locally, ((x_0 + x_1) + x_2) + ..., AVG as that
 * sum / P — the expectation tests/comm/mpi_comm.c holds the mpi kind to
 * (comm.mpi_np*), with the same inputs (magnitudes 2^-8..2^7, so a different
 * order would change the bits). Equal to it means equal to the mpi kind.
 *
 * Faults: a rank that never arrives (rank 0 names it, the others relay),
 * rank 0 that never comes, world sizes that differ, a rank number used
 * twice, a rank stalled before a collective (timeout naming it), rank 0
 * stalled, a rank or rank 0 killed mid-loop (LF_ERR_IO naming it within
 * timeout + 10 s, with SIGPIPE left at its default: a write to the dead
 * rank must not kill the writer), element counts that differ, and a rank
 * that ends the job (lf_comm_abort) while the others wait.
 */
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "llmforge/comm.h"

#define MAX_RANKS 8

/* ---------------------------------------------------------------- the ranks' side */
/* A child's environment and report (each child has its own copy after fork). */
static char g_env_rank[16], g_env_size[16], g_env_lrank[16], g_env_lsize[16], g_env_port[16];
static int g_no_local; /* leave LOCAL_RANK / LOCAL_WORLD_SIZE unset */
static int g_rank, g_size;
static lf_comm *g_comm; /* ended with lf_comm_abort when a check fails */
static char g_report[4096];
static int g_report_fd = -1;

static const char *fake_getenv(const char *name, void *user) {
    (void)user;
    if (!strcmp(name, "RANK")) return g_env_rank;
    if (!strcmp(name, "WORLD_SIZE")) return g_env_size;
    if (!strcmp(name, "LOCAL_RANK")) return g_no_local ? NULL : g_env_lrank;
    if (!strcmp(name, "LOCAL_WORLD_SIZE")) return g_no_local ? NULL : g_env_lsize;
    if (!strcmp(name, "MASTER_ADDR")) return "127.0.0.1";
    if (!strcmp(name, "MASTER_PORT")) return g_env_port;
    return NULL;
}

static void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void report(const char *fmt, ...) {
    size_t at = strlen(g_report);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_report + at, sizeof g_report - at, fmt, ap);
    va_end(ap);
}

static void child_exit(int code) __attribute__((noreturn));
static void child_exit(int code) {
    size_t n = strlen(g_report), at = 0;
    while (at < n) {
        ssize_t w = write(g_report_fd, g_report + at, n - at);
        if (w <= 0) break;
        at += (size_t)w;
    }
    _exit(code);
}

static void child_fail(int line, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void child_fail(int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    report("FAIL (line %d): ", line);
    size_t at = strlen(g_report);
    vsnprintf(g_report + at, sizeof g_report - at, fmt, ap);
    va_end(ap);
    if (g_comm) lf_comm_abort(g_comm, 1);
    child_exit(1);
}

#define CHECK(cond, ...)                                   \
    do {                                                   \
        if (!(cond)) child_fail(__LINE__, __VA_ARGS__);    \
    } while (0)
#define OK(expr)                                                                         \
    do {                                                                                 \
        lf_status s_ = (expr);                                                           \
        CHECK(s_ == LF_OK, "%s -> %s: %s", #expr, lf_status_str(s_), lf_last_error());   \
    } while (0)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static lf_comm_options opts_with(double timeout_s, size_t segment) {
    lf_comm_options o = lf_comm_options_default();
    o.timeout_s = timeout_s;
    o.segment_elems = segment;
    o.getenv_fn = fake_getenv;
    return o;
}

/* ---------------------------------------------------------------- expectations */
/* Element i of rank p's input (as tests/comm/mpi_comm.c). */
static float val(uint64_t salt, int p, size_t i) {
    uint64_t h = lf_rng_mix(lf_rng_mix(salt, (uint64_t)p), (uint64_t)i);
    float u = (float)(h >> 40) * (1.0f / 16777216.0f) - 0.5f;
    return ldexpf(u, (int)((h >> 8) & 15) - 8);
}

/* Element i reduced over ranks 0..P-1 in rank order: what the mpi kind computes. */
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

static void *xalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    CHECK(p, "out of memory (%zu bytes)", bytes);
    return p;
}

static void same_bits(const float *got, uint64_t salt, size_t from, size_t n, lf_comm_op op, const char *what) {
    for (size_t i = 0; i < n; i++) {
        float e = expect_at(salt, g_size, from + i, op);
        CHECK(memcmp(&got[i], &e, sizeof e) == 0, "%s op %d: element %zu is %.9g, expected %.9g", what, (int)op,
              from + i, got[i], e);
    }
}

static void check_all_reduce(lf_comm *c, size_t n, lf_comm_op op, uint64_t salt) {
    float *buf = xalloc(n * sizeof *buf);
    for (size_t i = 0; i < n; i++) buf[i] = val(salt, g_rank, i);
    OK(lf_comm_all_reduce(c, buf, n, op));
    same_bits(buf, salt, 0, n, op, "all_reduce");
    free(buf);
}

static void check_reduce_scatter(lf_comm *c, size_t n, lf_comm_op op, uint64_t salt, int in_place) {
    size_t off, cnt;
    lf_comm_partition(n, g_size, g_rank, &off, &cnt);
    float *send = xalloc(n * sizeof *send), *recv = in_place ? send + off : xalloc(cnt * sizeof *recv);
    for (size_t i = 0; i < n; i++) send[i] = val(salt, g_rank, i);
    OK(lf_comm_reduce_scatter(c, send, recv, n, op));
    same_bits(recv, salt, off, cnt, op, in_place ? "reduce_scatter (in place)" : "reduce_scatter");
    if (!in_place) {
        for (size_t i = 0; i < n; i++)
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
        CHECK(recv[i] == val(salt, 77, i), "all_gather%s n=%zu: element %zu", in_place ? " (in place)" : "", n, i);
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
    size_t nb = 2 * n + 1;
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
            v[j] = ldexp((double)val(salt, g_rank, (size_t)j), 30) + g_rank;
            e[j] = ldexp((double)val(salt, 0, (size_t)j), 30);
            for (int p = 1; p < g_size; p++) {
                double x = ldexp((double)val(salt, p, (size_t)j), 30) + p;
                e[j] = ops[k] == LF_COMM_MAX ? (x > e[j] ? x : e[j]) : ops[k] == LF_COMM_MIN ? (x < e[j] ? x : e[j]) : e[j] + x;
            }
            if (ops[k] == LF_COMM_AVG) e[j] = e[j] / (double)g_size;
        }
        OK(lf_comm_all_reduce_f64(c, v, N, ops[k]));
        CHECK(memcmp(v, e, sizeof v) == 0, "all_reduce_f64 op %d: %.17g, expected %.17g", k, v[0], e[0]);
        if (ops[k] == LF_COMM_AVG) continue;
        int64_t l[N], le[N];
        for (int j = 0; j < N; j++) {
            l[j] = (int64_t)g_rank * 1000003 + j - 50;
            le[j] = ops[k] == LF_COMM_MIN ? j - 50
                    : ops[k] == LF_COMM_MAX ? (int64_t)(g_size - 1) * 1000003 + j - 50
                                            : (int64_t)1000003 * g_size * (g_size - 1) / 2 + (int64_t)g_size * (j - 50);
        }
        OK(lf_comm_all_reduce_i64(c, l, N, ops[k]));
        CHECK(memcmp(l, le, sizeof l) == 0, "all_reduce_i64 op %d: %lld, expected %lld", k, (long long)l[0],
              (long long)le[0]);
    }
}

/* ---------------------------------------------------------------- rank bodies */
typedef struct job {
    double timeout_s;
    int stall_rank;   /* sleeps before the collective (-1: none) */
    int kill_rank;    /* raises SIGKILL at step 20 (-1: none) */
    int odd_rank;     /* calls all_reduce with one element more */
    int abort_rank;   /* ends the job before the barrier */
    double hub_delay; /* rank 0 enters the collective this much later */
} job;

static int body_collectives(const job *jb) {
    lf_comm *a = NULL, *b = NULL;
    lf_comm_options o = opts_with(60, 0);
    OK(lf_comm_open(&a, "auto", &o)); /* auto under torchrun's variables is tcp */
    g_comm = a;
    CHECK(!strcmp(lf_comm_name(a), "tcp"), "auto picked '%s' under torchrun's variables", lf_comm_name(a));
    CHECK(lf_comm_rank(a) == g_rank && lf_comm_size(a) == g_size, "rank %d of %d", lf_comm_rank(a), lf_comm_size(a));
    CHECK(lf_comm_local_rank(a) == g_rank && lf_comm_local_size(a) == g_size, "local rank %d of %d",
          lf_comm_local_rank(a), lf_comm_local_size(a));
    /* a second handle on the same port, 1000-float segments: many rounds;
     * without LOCAL_* the local rank comes from the host names */
    g_no_local = 1;
    o = opts_with(60, 1000);
    OK(lf_comm_open(&b, "tcp", &o));
    CHECK(lf_comm_local_rank(b) == g_rank && lf_comm_local_size(b) == g_size, "local rank from host names: %d of %d",
          lf_comm_local_rank(b), lf_comm_local_size(b));

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
    /* 12 MB, odd size: several rounds of the default 4M-float segment on 4 ranks */
    const size_t big = 3 * 1024 * 1024 + 7;
    check_all_reduce(a, big, LF_COMM_SUM, salt++);
    check_all_reduce(a, big, LF_COMM_AVG, salt++);
    check_reduce_scatter(a, big, LF_COMM_SUM, salt++, 1);
    check_all_gather(a, big, salt++, 1);
    check_broadcast(a, big, salt++);
    int64_t seq[2] = {lf_comm_seq(a), lf_comm_seq(b)}, mn[2] = {seq[0], seq[1]};
    OK(lf_comm_all_reduce_i64(a, seq, 2, LF_COMM_MAX));
    OK(lf_comm_all_reduce_i64(a, mn, 2, LF_COMM_MIN));
    CHECK(seq[0] == mn[0] && seq[1] == mn[1], "collective numbers differ between ranks");
    lf_comm_close(b);
    g_comm = NULL;
    lf_comm_close(a);
    report("PASS collectives");
    (void)jb;
    return 0;
}

/* Open, then one all_reduce of 1000 floats at "step 12" (collective #2,
 * after a barrier); a stalled rank sleeps before it. */
static int body_stall(const job *jb) {
    lf_comm *c = NULL;
    lf_comm_options o = opts_with(jb->timeout_s, 0);
    OK(lf_comm_open(&c, "tcp", &o));
    OK(lf_comm_barrier(c));
    lf_comm_set_context(c, "step %d", 12);
    float buf[1001];
    for (int i = 0; i < 1001; i++) buf[i] = (float)i;
    if (g_rank == jb->stall_rank) {
        struct timespec ts = {(time_t)(jb->timeout_s + 3), 0};
        nanosleep(&ts, NULL);
    }
    if (g_rank == 0 && jb->hub_delay > 0) {
        struct timespec ts = {(time_t)jb->hub_delay, 0};
        nanosleep(&ts, NULL);
    }
    size_t n = g_rank == jb->odd_rank ? 1001 : 1000;
    double t0 = now_s();
    lf_status st = lf_comm_all_reduce(c, buf, n, LF_COMM_SUM);
    report("%s after %.2f s: %s", lf_status_str(st), now_s() - t0, lf_comm_errmsg(c));
    lf_comm_close(c);
    return st == LF_OK ? 0 : 3;
}

/* All ranks loop over all_reduce; one raises SIGKILL at step 20. */
static int body_kill(const job *jb) {
    lf_comm *c = NULL;
    lf_comm_options o = opts_with(jb->timeout_s, 0);
    OK(lf_comm_open(&c, "tcp", &o));
    static float buf[4096];
    for (int step = 1; step <= 1000000; step++) {
        lf_comm_set_context(c, "step %d", step);
        if (g_rank == jb->kill_rank && step == 20) raise(SIGKILL);
        for (int i = 0; i < 4096; i++) buf[i] = (float)(i + g_rank);
        double t0 = now_s();
        lf_status st = lf_comm_all_reduce(c, buf, 4096, LF_COMM_AVG);
        if (st != LF_OK) {
            report("%s after %.2f s: %s", lf_status_str(st), now_s() - t0, lf_comm_errmsg(c));
            lf_comm_abort(c, 4); /* what the trainer does: the others learn at once */
            lf_comm_close(c);
            return 4;
        }
    }
    report("FAIL the loop finished although rank %d died", jb->kill_rank);
    return 1;
}

/* One rank ends the job (lf_comm_abort) while the others wait in a barrier. */
static int body_abort(const job *jb) {
    lf_comm *c = NULL;
    lf_comm_options o = opts_with(jb->timeout_s, 0);
    OK(lf_comm_open(&c, "tcp", &o));
    OK(lf_comm_barrier(c));
    if (g_rank == jb->abort_rank) {
        lf_comm_abort(c, 3);
        lf_comm_close(c);
        report("aborted");
        return 3;
    }
    double t0 = now_s();
    lf_status st = lf_comm_barrier(c);
    report("%s after %.2f s: %s", lf_status_str(st), now_s() - t0, lf_comm_errmsg(c));
    lf_comm_close(c);
    return st == LF_OK ? 0 : 4;
}

/* Only opens (the rendezvous tests). */
static int body_open(const job *jb) {
    lf_comm *c = NULL;
    lf_comm_options o = opts_with(jb->timeout_s, 0);
    double t0 = now_s();
    lf_status st = lf_comm_open(&c, "tcp", &o);
    report("%s after %.2f s: %s", lf_status_str(st), now_s() - t0, st == LF_OK ? "" : lf_last_error());
    if (st == LF_OK) {
        st = lf_comm_barrier(c);
        lf_comm_close(c);
    }
    return st == LF_OK ? 0 : 3;
}

/* ---------------------------------------------------------------- the parent's side */
typedef struct spec {
    int rank, size; /* RANK, WORLD_SIZE of this process */
} spec;

typedef struct outcome {
    int code;      /* exit status, or 128 + signal */
    double secs;   /* from the start of all ranks to this one's exit */
    char text[4096];
} outcome;

static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t sl = sizeof a;
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &sl), 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* Start one process per spec running body(jb); wait at most bound_s for
 * all of them (then SIGKILL: a hang fails the test). */
static void run_ranks(int n, const spec *sp, int (*body)(const job *), const job *jb, double bound_s, outcome *out) {
    int port = free_port();
    pid_t pid[MAX_RANKS];
    int rfd[MAX_RANKS], done[MAX_RANKS] = {0};
    size_t got[MAX_RANKS] = {0};
    fflush(stdout);
    fflush(stderr);
    double t0 = now_s();
    for (int i = 0; i < n; i++) {
        int p[2];
        assert_int_equal(pipe(p), 0);
        pid[i] = fork();
        assert_true(pid[i] >= 0);
        if (pid[i] == 0) {
            close(p[0]);
            g_report_fd = p[1];
            g_report[0] = '\0';
            g_rank = sp[i].rank;
            g_size = sp[i].size;
            g_no_local = 0;
            snprintf(g_env_rank, sizeof g_env_rank, "%d", sp[i].rank);
            snprintf(g_env_size, sizeof g_env_size, "%d", sp[i].size);
            snprintf(g_env_lrank, sizeof g_env_lrank, "%d", sp[i].rank);
            snprintf(g_env_lsize, sizeof g_env_lsize, "%d", sp[i].size);
            snprintf(g_env_port, sizeof g_env_port, "%d", port);
            child_exit(body(jb));
        }
        close(p[1]);
        rfd[i] = p[0];
        memset(&out[i], 0, sizeof out[i]);
        out[i].code = -1;
    }
    int left = n;
    while (left > 0) {
        for (int i = 0; i < n; i++) {
            if (done[i]) continue;
            int status;
            pid_t w = waitpid(pid[i], &status, WNOHANG);
            if (w == pid[i]) {
                done[i] = 1;
                left--;
                out[i].code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
                out[i].secs = now_s() - t0;
                ssize_t r;
                while (got[i] + 1 < sizeof out[i].text &&
                       (r = read(rfd[i], out[i].text + got[i], sizeof out[i].text - 1 - got[i])) > 0)
                    got[i] += (size_t)r;
                close(rfd[i]);
            }
        }
        if (left && now_s() - t0 > bound_s) {
            for (int i = 0; i < n; i++)
                if (!done[i]) {
                    kill(pid[i], SIGKILL);
                    waitpid(pid[i], NULL, 0);
                    close(rfd[i]);
                    print_message("rank %d hung (killed after %.0f s)\n", sp[i].rank, bound_s);
                }
            fail_msg("ranks hung past %.0f s", bound_s);
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    for (int i = 0; i < n; i++) print_message("  rank %d (exit %d, %.2f s): %s\n", sp[i].rank, out[i].code, out[i].secs,
                                              out[i].text);
}

static void contains(const outcome *o, const char *want) {
    if (!strstr(o->text, want)) fail_msg("expected '%s' in: %s", want, o->text);
}

static const job k_job = {.timeout_s = 2, .stall_rank = -1, .kill_rank = -1, .odd_rank = -1, .abort_rank = -1};

static void collectives_on(int P) {
    spec sp[MAX_RANKS] = {{0}}; /* set below for the P ranks used (GCC -O1 cannot tell) */
    outcome out[MAX_RANKS];
    for (int i = 0; i < P; i++) sp[i] = (spec){i, P};
    run_ranks(P, sp, body_collectives, &k_job, 240, out);
    for (int i = 0; i < P; i++) {
        assert_int_equal(out[i].code, 0);
        contains(&out[i], "PASS collectives");
    }
}

static void test_collectives_2(void **state) {
    (void)state;
    collectives_on(2);
}

static void test_collectives_4(void **state) {
    (void)state;
    collectives_on(4);
}

/* World 3, rank 2 never starts: rank 0 names it, rank 1 relays rank 0's words. */
static void test_missing_rank(void **state) {
    (void)state;
    spec sp[2] = {{0, 3}, {1, 3}};
    outcome out[2];
    job jb = k_job;
    run_ranks(2, sp, body_open, &jb, 30, out);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(out[i].code, 3);
        contains(&out[i], "LF_ERR_TIMEOUT");
        contains(&out[i], "2 of 3 ranks joined; rank that never arrived: 2");
        /* timeout 2 s, a peer waits one grace (1 s) more for rank 0's account */
        assert_true(out[i].secs >= 1.9 && out[i].secs <= 2.0 + 1.0 + 5.0);
    }
    contains(&out[1], "turned away by rank 0");
}

/* Rank 0 never starts: rank 1 says it could not reach MASTER_ADDR:MASTER_PORT. */
static void test_no_master(void **state) {
    (void)state;
    spec sp[1] = {{1, 2}};
    outcome out[1];
    run_ranks(1, sp, body_open, &k_job, 30, out);
    assert_int_equal(out[0].code, 3);
    contains(&out[0], "LF_ERR_TIMEOUT");
    contains(&out[0], "could not reach rank 0 at MASTER_ADDR:MASTER_PORT = 127.0.0.1:");
    assert_true(out[0].secs >= 1.9 && out[0].secs <= 2.0 + 5.0);
}

/* Rank 1 believes in a world of 3, rank 0 in one of 2: refused on both, naming both sizes. */
static void test_world_mismatch(void **state) {
    (void)state;
    spec sp[2] = {{0, 2}, {1, 3}};
    outcome out[2];
    run_ranks(2, sp, body_open, &k_job, 30, out);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(out[i].code, 3);
        contains(&out[i], "LF_ERR_MISMATCH");
        contains(&out[i], "world size mismatch: rank 1");
        contains(&out[i], "has WORLD_SIZE=3, rank 0 has WORLD_SIZE=2");
        assert_true(out[i].secs < 2.0 + 5.0); /* at once, not at the timeout */
    }
}

/* Two processes with RANK=1: refused everywhere, naming the rank. */
static void test_duplicate_rank(void **state) {
    (void)state;
    spec sp[3] = {{0, 3}, {1, 3}, {1, 3}};
    outcome out[3];
    run_ranks(3, sp, body_open, &k_job, 30, out);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(out[i].code, 3);
        contains(&out[i], "LF_ERR_MISMATCH");
        contains(&out[i], "rank 1 joined twice");
    }
}

/* Rank 1 stalls outside the communicator: ranks 0 and 2 time out naming it,
 * after the timeout and within the grace. */
static void test_stalled_rank(void **state) {
    (void)state;
    spec sp[3] = {{0, 3}, {1, 3}, {2, 3}};
    outcome out[3];
    job jb = k_job;
    jb.stall_rank = 1;
    run_ranks(3, sp, body_stall, &jb, 40, out);
    for (int i = 0; i < 3; i += 2) {
        assert_int_equal(out[i].code, 3);
        contains(&out[i], "LF_ERR_TIMEOUT");
        contains(&out[i], "all_reduce #2 (step 12, 1000 floats)");
        contains(&out[i], "rank that did not arrive: 1 (last heard from in barrier #1)");
        double dt = strtod(strstr(out[i].text, " after ") + 7, NULL);
        assert_true(dt >= 2.0 - 0.01 && dt <= 2.0 + 5.0);
    }
    /* the late rank learns at once when it arrives */
    assert_int_equal(out[1].code, 3);
    contains(&out[1], "rank 0 (the hub) reports:");
}

/* The same, with rank 0 arriving 2 s after rank 2: rank 2's deadline comes
 * first, it asks rank 0 (QUERY) and reports rank 0's answer: whom rank 0
 * waits for. */
static void test_stalled_rank_asks_hub(void **state) {
    (void)state;
    spec sp[3] = {{0, 3}, {1, 3}, {2, 3}};
    outcome out[3];
    job jb = k_job;
    jb.timeout_s = 4;
    jb.stall_rank = 1;
    jb.hub_delay = 2;
    run_ranks(3, sp, body_stall, &jb, 60, out);
    assert_int_equal(out[2].code, 3);
    /* the waited time is measured: on a loaded machine 4.1 s; its range is checked below */
    contains(&out[2], "all_reduce #2 (step 12, 1000 floats) timed out on rank 2 after ");
    contains(&out[2], "rank 0 (the hub) answers: rank 0 is in all_reduce #2 (step 12, 1000 floats); rank that did not "
                      "arrive: 1 (last heard from in barrier #1)");
    double dt = strtod(strstr(out[2].text, " after ") + 7, NULL);
    assert_true(dt >= 4.0 - 0.01 && dt <= 4.0 + 1.0 + 0.5); /* the timeout and at most the 1 s grace */
    assert_int_equal(out[0].code, 3);
    contains(&out[0], "rank that did not arrive: 1");
}

/* Rank 0 stalls: the others ask it, get no answer, and say so. */
static void test_stalled_hub(void **state) {
    (void)state;
    spec sp[3] = {{0, 3}, {1, 3}, {2, 3}};
    outcome out[3];
    job jb = k_job;
    jb.stall_rank = 0;
    run_ranks(3, sp, body_stall, &jb, 40, out);
    for (int i = 1; i < 3; i++) {
        assert_int_equal(out[i].code, 3);
        contains(&out[i], "LF_ERR_TIMEOUT");
        contains(&out[i], "all_reduce #2 (step 12, 1000 floats) timed out on rank");
        contains(&out[i], "rank that did not arrive: 0 (the hub; no answer within 1.0 s");
    }
    /* rank 0, when it arrives, finds its peers gone */
    assert_int_not_equal(out[0].code, 0);
}

/* Rank 1 passes 1001 elements where the others pass 1000: refused at once,
 * naming the rank and both calls. */
static void test_count_mismatch(void **state) {
    (void)state;
    spec sp[3] = {{0, 3}, {1, 3}, {2, 3}};
    outcome out[3];
    job jb = k_job;
    jb.timeout_s = 20;
    jb.odd_rank = 1;
    run_ranks(3, sp, body_stall, &jb, 40, out);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(out[i].code, 3);
        contains(&out[i], "LF_ERR_MISMATCH");
        if (i != 1) contains(&out[i], "rank 1 called all_reduce #2 with 1001 elements (this rank: all_reduce #2 with 1000)");
        assert_true(out[i].secs < 10); /* not the 20 s timeout */
    }
}

/* kill -9 of a rank mid-loop: every survivor fails with LF_ERR_IO naming it,
 * well within timeout + 10 s, and none dies of SIGPIPE. */
static void kill_one(int victim) {
    spec sp[4] = {{0, 4}, {1, 4}, {2, 4}, {3, 4}};
    outcome out[4];
    job jb = k_job;
    jb.timeout_s = 5;
    jb.kill_rank = victim;
    run_ranks(4, sp, body_kill, &jb, 60, out);
    char name[64];
    snprintf(name, sizeof name, victim == 0 ? "rank 0 (the hub) closed its connection" : "rank %d closed its connection",
             victim);
    for (int i = 0; i < 4; i++) {
        if (i == victim) {
            assert_int_equal(out[i].code, 128 + SIGKILL);
            continue;
        }
        assert_int_equal(out[i].code, 4); /* its own report and abort: no SIGPIPE (141) */
        contains(&out[i], "LF_ERR_IO");
        contains(&out[i], "all_reduce #");
        contains(&out[i], name);
        assert_true(out[i].secs < jb.timeout_s + 10);
    }
}

static void test_killed_rank(void **state) {
    (void)state;
    kill_one(2);
}

static void test_killed_hub(void **state) {
    (void)state;
    kill_one(0);
}

/* Rank 2 ends the job while the others wait in a barrier: they fail at once
 * with its words, not after the timeout. */
static void test_abort(void **state) {
    (void)state;
    spec sp[3] = {{0, 3}, {1, 3}, {2, 3}};
    outcome out[3];
    job jb = k_job;
    jb.timeout_s = 30;
    jb.abort_rank = 2;
    run_ranks(3, sp, body_abort, &jb, 60, out);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(out[i].code, 4);
        contains(&out[i], "barrier #2");
        contains(&out[i], "rank 2 ended the job (exit code 3)");
        assert_true(out[i].secs < 10);
    }
}

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_DFL); /* a write to a dead peer must not end the writer */
    if (argc > 1) cmocka_set_test_filter(argv[1]); /* by hand: test_comm_tcp 'test_stalled*' */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_collectives_2), cmocka_unit_test(test_collectives_4),
        cmocka_unit_test(test_missing_rank),  cmocka_unit_test(test_no_master),
        cmocka_unit_test(test_world_mismatch), cmocka_unit_test(test_duplicate_rank),
        cmocka_unit_test(test_stalled_rank),  cmocka_unit_test(test_stalled_rank_asks_hub),
        cmocka_unit_test(test_stalled_hub),
        cmocka_unit_test(test_count_mismatch), cmocka_unit_test(test_killed_rank),
        cmocka_unit_test(test_killed_hub),    cmocka_unit_test(test_abort),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
