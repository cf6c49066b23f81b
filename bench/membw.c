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
 * Then the read bandwidth: the same threads each sum their part of the
 * source (64-bit words, 8 independent sums, which the compiler vectorises at
 * -O3), best of REPS after a warm-up, counting the bytes read. That is the
 * ceiling of a kernel that reads each weight once and writes almost
 * nothing, as single-stream decoding does: on the machines this was written
 * on it is ~0.75-0.8x the copy figure, so the copy-based bound of
 * bench/decode.sh is one no fp32 decoder there can reach.
 *
 * Why a C program and not a library: the figure wanted is plain memcpy with
 * the same thread count the benchmark gives both implementations; STREAM and
 * friends measure other kernels under OpenMP settings of their own.
 *
 * Usage: membw [MB] [THREADS] [REPS]; prints one JSON line:
 *   {"copy_gbps":G,"copy_gbps_median":M,"read_gbps":RG,"read_gbps_median":RM,
 *    "mb":MB,"threads":N,"reps":R}
 * where G is the best and M the median of the timed copies, RG and RM those
 * of the reads, in GB/s (1e9). Built and run by bench/decode.sh
 * (cc -O3 -march=native -pthread).
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
    unsigned long long sum; /* of the read rounds: keeps them observable */
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

/* Sum of the 64-bit words of p (n a multiple of 64 bytes, the tail ignored), 8 independent sums. */
static unsigned long long read_sum(const char *p, size_t n) {
    unsigned long long s[8] = {0};
    const unsigned long long *w = (const unsigned long long *)(const void *)p;
    for (size_t i = 0; i + 8 <= n / 8; i += 8)
        for (int k = 0; k < 8; k++) s[k] += w[i + (size_t)k];
    return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

static void *worker(void *arg) {
    part *p = arg;
    for (int r = 0; r < g_rounds; r++) {
        pthread_barrier_wait(p->start);
        memcpy(p->dst, p->src, p->n);
        pthread_barrier_wait(p->stop);
    }
    for (int r = 0; r < g_rounds; r++) {
        pthread_barrier_wait(p->start);
        p->sum += read_sum(p->src, p->n);
        pthread_barrier_wait(p->stop);
    }
    return NULL;
}

/* Median of the sorted t[0..n). */
static double median(const double *t, long n) { return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]); }

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
    double *tr = malloc(sizeof(double) * (size_t)reps);
    if (!tr) {
        fprintf(stderr, "membw: out of memory\n");
        return 1;
    }
    for (int pass = 0; pass < 2; pass++) /* the copies, then the reads */
        for (int r = 0; r < g_rounds; r++) {
            pthread_barrier_wait(&start);
            const double t0 = now();
            pthread_barrier_wait(&stop);
            if (r > 0) (pass ? tr : t)[r - 1] = now() - t0; /* round 0 is the warm-up */
        }
    unsigned long long sum = 0;
    for (long i = 0; i < nt; i++) {
        pthread_join(th[i], NULL);
        sum += parts[i].sum;
    }
    qsort(t, (size_t)reps, sizeof(double), cmp_double);
    qsort(tr, (size_t)reps, sizeof(double), cmp_double);
    const double read_bytes = (double)(chunk & ~(size_t)63) * (double)(nt - 1) + (double)((bytes - (size_t)(nt - 1) * chunk) & ~(size_t)63);
    printf("{\"copy_gbps\":%.3f,\"copy_gbps_median\":%.3f,\"read_gbps\":%.3f,\"read_gbps_median\":%.3f,"
           "\"mb\":%ld,\"threads\":%ld,\"reps\":%ld}\n",
           2.0 * (double)bytes / t[0] / 1e9, 2.0 * (double)bytes / median(t, reps) / 1e9, read_bytes / tr[0] / 1e9,
           read_bytes / median(tr, reps) / 1e9, mb, nt, reps);
    /* every source byte is 1, so each word is 0x0101...01: the sum is known */
    if (sum != (unsigned long long)g_rounds * (unsigned long long)(read_bytes / 8) * 0x0101010101010101ULL) return 1;
    free(tr);
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
