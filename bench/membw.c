/*
 * bench/membw.c -- memory copy bandwidth of this machine, the denominator of
 * the memory-bandwidth bound bench/decode.sh prints for single-stream
 * decoding (each new token reads every weight once, so tokens/s cannot
 * exceed bandwidth / bytes of weights).
 *
 * What it measures: memcpy of a source buffer into a destination buffer,
 * each MB megabytes (default 512, far larger than any last-level cache), split
 * into THREADS (default 2) equal contiguous parts copied by one pthread each,
 * started together on a barrier. Both buffers are written once before timing
 * so no page fault lands inside a timed copy. Best of REPS (default 5) timed
 * copies after one untimed warm-up; the best, because other processes only
 * ever slow a copy down. Bandwidth counts read + write: 2 * MB / seconds (the
 * write-allocate reads a cached store would add are not counted; glibc's
 * memcpy uses non-temporal stores at these sizes, which have none).
 *
 * Why a C program and not a library: the figure wanted is plain memcpy with
 * the same thread count the benchmark gives both implementations; STREAM and
 * friends measure other kernels under OpenMP settings of their own.
 *
 * Usage: membw [MB] [THREADS] [REPS]; prints one JSON line:
 *   {"copy_gbps":G,"copy_gbps_median":M,"mb":MB,"threads":N,"reps":R}
 * where G is the best and M the median of the timed copies, in GB/s (1e9).
 * Built and run by bench/decode.sh (cc -O2 -pthread).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct part {
    char *dst;
    const char *src;
    size_t n;
    pthread_barrier_t *start, *stop;
} part;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static long arg_long(const char *s, const char *what, long lo, long hi) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "membw: %s '%s' is not an integer in [%ld, %ld]\n", what, s, lo, hi);
        exit(2);
    }
    return v;
}

/* Worker: one copy of its part per round, between the start and stop barriers (the main thread takes part in
 * both, so its clock brackets every worker's copy). */
static int g_rounds;
static void *worker(void *arg) {
    part *p = arg;
    for (int r = 0; r < g_rounds; r++) {
        pthread_barrier_wait(p->start);
        memcpy(p->dst, p->src, p->n);
        pthread_barrier_wait(p->stop);
    }
    return NULL;
}

int main(int argc, char **argv) {
    const long mb = argc > 1 ? arg_long(argv[1], "MB", 1, 1L << 20) : 512;
    const long nt = argc > 2 ? arg_long(argv[2], "THREADS", 1, 1024) : 2;
    const long reps = argc > 3 ? arg_long(argv[3], "REPS", 1, 1000) : 5;
    const size_t bytes = (size_t)mb << 20;
    char *src = malloc(bytes), *dst = malloc(bytes);
    double *t = malloc(sizeof(double) * (size_t)reps);
    part *parts = malloc(sizeof(part) * (size_t)nt);
    pthread_t *th = malloc(sizeof(pthread_t) * (size_t)nt);
    if (!src || !dst || !t || !parts || !th) {
        fprintf(stderr, "membw: cannot allocate 2 x %ld MB\n", mb);
        return 1;
    }
    memset(src, 1, bytes); /* fault every page in before timing */
    memset(dst, 2, bytes);
    pthread_barrier_t start, stop;
    pthread_barrier_init(&start, NULL, (unsigned)nt + 1);
    pthread_barrier_init(&stop, NULL, (unsigned)nt + 1);
    g_rounds = (int)reps + 1;
    const size_t chunk = (bytes / (size_t)nt) & ~(size_t)63;
    for (long i = 0; i < nt; i++) {
        const size_t off = (size_t)i * chunk;
        parts[i] = (part){.dst = dst + off, .src = src + off, .n = i == nt - 1 ? bytes - off : chunk,
                          .start = &start, .stop = &stop};
        if (pthread_create(&th[i], NULL, worker, &parts[i])) {
            fprintf(stderr, "membw: pthread_create failed\n");
            return 1;
        }
    }
    for (int r = 0; r < g_rounds; r++) {
        pthread_barrier_wait(&start);
        const double t0 = now();
        pthread_barrier_wait(&stop);
        if (r > 0) t[r - 1] = now() - t0; /* round 0 is the warm-up */
    }
    for (long i = 0; i < nt; i++) pthread_join(th[i], NULL);
    qsort(t, (size_t)reps, sizeof(double), cmp_double);
    const double med = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
    printf("{\"copy_gbps\":%.3f,\"copy_gbps_median\":%.3f,\"mb\":%ld,\"threads\":%ld,\"reps\":%ld}\n",
           2.0 * (double)bytes / t[0] / 1e9, 2.0 * (double)bytes / med / 1e9, mb, nt, reps);
    /* keep the copies observable */
    if (dst[bytes - 1] != src[bytes - 1]) return 1;
    pthread_barrier_destroy(&start);
    pthread_barrier_destroy(&stop);
    free(src);
    free(dst);
    free(t);
    free(parts);
    free(th);
    return 0;
}
