/* Micro-benchmark of the decode-shaped products (not a test: build by hand,
 * see the command below). For each product of GPT-2 124M and the SmolLM-135M
 * shape at N = 1..NMAX rows it times lf__cpu_gemv (where it takes the shape)
 * and the GEMM (lf__cpu_sgemm, what matmul_forward ran before), and prints
 * the weight bytes streamed per second and that as a fraction of two
 * bandwidths measured in the same run on the same threads:
 *   read: the same matrices summed (each thread its half of each matrix,
 *         as 8 interleaved streams), timed pass by pass between the
 *         products' passes: what a product that reads W once could reach;
 *   copy: memcpy of 512 MB into another 512 MB counted read + write, as
 *         bench/membw.c and the bound of bench/decode.sh count it (best of
 *         REPS at the start).
 * The weights are cycled through a 1 GB pool (distinct matrices back to
 * back, as decoding walks its layers; membw's footprint too). The
 * last-level cache of the machine this was written on reports 480 MB and
 * its replacement is not LRU, so part of a pass may still hit it; the read
 * passes see the same. Best of REPS passes, as other processes only ever
 * slow a pass down: the machine is shared, and its bandwidth moves by 2x
 * from one second to the next while other sessions compile.
 *   cmake --build build --target lf_backend_cpu
 *   cc -O3 -march=native -fopenmp -Iinclude -Isrc tests/backend/bench_gemv.c \
 *      build/liblf_backend_cpu.a build/liblf_core.a -ldnnl \
 *      -L/usr/lib/x86_64-linux-gnu/openblas-openmp -lopenblas -lcjson -lcrypto -lz -lm -o /tmp/bench_gemv
 *   OMP_NUM_THREADS=2 /tmp/bench_gemv [REPS] [NMAX] [NAME]
 * NAME: only the products whose name holds it ("lm_head", "gpt2").            */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include "backend/cpu/cpu_internal.h"

#define POOL_BYTES (1024L << 20)

enum { IMPL_SGEMM, IMPL_GEMV, IMPL_READ, NIMPL };
static const char *impl_name[NIMPL] = {"sgemm", "gemv", "read"};

static double sink;

/* Sum of x[0..n) read as READ_STREAMS interleaved sequential streams (its
 * equal parts, a vector of each in turn), 16 independent sums per stream:
 * vectorized, never bound by the latency of one chain of adds, and with as
 * many streams in flight as the kernels keep (one stream per thread read
 * ~15% slower than gemv's 8 rows at a time). */
#define READ_STREAMS 8
static float sum_streams(const float *x, size_t n) {
    const size_t part = n / (16 * READ_STREAMS) * 16;
    float acc[READ_STREAMS][16] = {{0}}, s = 0;
    for (size_t i = 0; i < part; i += 16)
        for (int k = 0; k < READ_STREAMS; k++)
            for (int l = 0; l < 16; l++) acc[k][l] += x[k * part + i + l];
    for (size_t i = READ_STREAMS * part; i < n; i++) s += x[i];
    for (int k = 0; k < READ_STREAMS; k++)
        for (int l = 0; l < 16; l++) s += acc[k][l];
    return s;
}

/* Seconds of one memcpy of n floats, the threads each copying a contiguous part. */
static double time_copy(float *dst, const float *src, size_t n) {
    double t0 = lf_time_now();
#pragma omp parallel
    {
        const int nt = omp_get_num_threads(), t = omp_get_thread_num();
        const size_t lo = n * t / nt, hi = n * (t + 1) / nt;
        memcpy(dst + lo, src + lo, (hi - lo) * sizeof(float));
    }
    return lf_time_now() - t0;
}

typedef struct mm_arg {
    float *pool, *inp, *out;
    int N, C, OC, impl, count;
    lf_weight_layout layout;
} mm_arg;

/* Seconds per matrix of one pass over the pool (every matrix once); < 0
 * when gemv declines the shape. */
static double time_pass(const mm_arg *m) {
    const size_t wn = (size_t)m->C * m->OC;
    double t0 = lf_time_now();
    for (int k = 0; k < m->count; k++) {
        const float *w = m->pool + k * wn;
        if (m->impl == IMPL_READ) {
            double s = 0;
#pragma omp parallel reduction(+ : s)
            {
                const int nt = omp_get_num_threads(), t = omp_get_thread_num();
                const size_t lo = wn / 16 * t / nt * 16, hi = t == nt - 1 ? wn : wn / 16 * (t + 1) / nt * 16;
                s += sum_streams(w + lo, hi - lo);
            }
            sink += s;
        } else if (m->impl == IMPL_GEMV) {
            if (!lf__cpu_gemv(m->out, m->inp, w, NULL, m->N, m->C, m->OC, m->layout)) return -1;
        } else if (m->layout == LF_W_IN_OUT) {
            lf__cpu_sgemm(0, 0, m->N, m->OC, m->C, 1.0f, m->inp, m->C, w, m->OC, 0.0f, m->out, m->OC);
        } else {
            lf__cpu_sgemm(0, 1, m->N, m->OC, m->C, 1.0f, m->inp, m->C, w, m->C, 0.0f, m->out, m->OC);
        }
    }
    return (lf_time_now() - t0) / m->count;
}

int main(int argc, char **argv) {
    const int reps = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 7;
    const int nmax = argc > 2 ? (int)strtol(argv[2], NULL, 10) : 5;
    const char *only = argc > 3 ? argv[3] : "";
    if (reps < 1 || nmax < 1 || nmax > 8) {
        fprintf(stderr, "usage: bench_gemv [REPS >= 1] [NMAX 1..8] [NAME]\n");
        return 2;
    }
    const size_t pool_n = POOL_BYTES / sizeof(float);
    float *pool = lf_alloc(POOL_BYTES), *copy = lf_alloc(POOL_BYTES / 2);
    float *inp = lf_alloc(8 * 4096 * sizeof(float)), *out = lf_alloc((size_t)8 * 50304 * sizeof(float));
    if (!pool || !copy || !inp || !out) return 1;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < pool_n; i++) pool[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    memset(copy, 0, POOL_BYTES / 2);
    for (int i = 0; i < 8 * 4096; i++) inp[i] = (float)(i % 17) * 0.1f - 0.8f;

    double tc = 1e30;
    time_copy(copy, pool, pool_n / 2);
    for (int r = 0; r < reps; r++) {
        const double t = time_copy(copy, pool, pool_n / 2);
        if (t < tc) tc = t;
    }
    const double cp = POOL_BYTES / tc / 1e9; /* 512 MB read + 512 MB written */
    printf("threads %d, gemv path %d (4 = AVX-512, 3 = AVX2, 0 = plain C), best of %d passes over 1 GB\n",
           omp_get_max_threads(), (int)lf__cpu_gemv_vec(), reps);
    printf("copy bandwidth (read + write) %.2f GB/s\n", cp);

    static const struct {
        const char *name;
        int C, OC;
        lf_weight_layout layout;
    } shapes[] = {
        {"gpt2 c_attn", 768, 2304, LF_W_IN_OUT},   {"gpt2 attn.c_proj", 768, 768, LF_W_IN_OUT},
        {"gpt2 c_fc", 768, 3072, LF_W_IN_OUT},     {"gpt2 mlp.c_proj", 3072, 768, LF_W_IN_OUT},
        {"gpt2 lm_head", 768, 50304, LF_W_OUT_IN}, {"smollm qkv", 576, 960, LF_W_OUT_IN},
        {"smollm o_proj", 576, 576, LF_W_OUT_IN},  {"smollm gate_up", 576, 3072, LF_W_OUT_IN},
        {"smollm down", 1536, 576, LF_W_OUT_IN},   {"smollm lm_head", 576, 49152, LF_W_OUT_IN},
    };
    printf("%-17s %5s %6s %2s %9s %9s %6s %6s %9s %6s %6s %9s\n", "product", "C", "OC", "N", "read GB/s", "gemv GB/s",
           "of rd", "of cp", "sgemm", "of rd", "of cp", "gemv/sgemm");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        if (!strstr(shapes[s].name, only)) continue;
        const size_t wn = (size_t)shapes[s].C * shapes[s].OC;
        const int count = (int)(pool_n / wn);
        for (int N = 1; N <= nmax; N++) {
            /* the three alternate pass by pass, so a burst of load elsewhere hits all of them */
            mm_arg m[NIMPL];
            double t[NIMPL] = {1e30, 1e30, 1e30};
            for (int g = 0; g < NIMPL; g++) {
                m[g] = (mm_arg){pool, inp, out, N, shapes[s].C, shapes[s].OC, g, count, shapes[s].layout};
                time_pass(&m[g]); /* warm-up */
            }
            for (int r = 0; r < reps; r++)
                for (int g = 0; g < NIMPL; g++) {
                    const double x = time_pass(&m[g]);
                    if (x > 0 && x < t[g]) t[g] = x;
                }
            double gbs[NIMPL];
            for (int g = 0; g < NIMPL; g++) gbs[g] = t[g] < 1e30 ? wn * sizeof(float) / t[g] / 1e9 : 0;
            printf("%-17s %5d %6d %2d %9.2f ", shapes[s].name, shapes[s].C, shapes[s].OC, N, gbs[IMPL_READ]);
            if (gbs[IMPL_GEMV] > 0)
                printf("%9.2f %5.1f%% %5.1f%% ", gbs[IMPL_GEMV], 100 * gbs[IMPL_GEMV] / gbs[IMPL_READ],
                       100 * gbs[IMPL_GEMV] / cp);
            else
                printf("%9s %6s %6s ", "-", "", "");
            printf("%9.2f %5.1f%% %5.1f%% ", gbs[IMPL_SGEMM], 100 * gbs[IMPL_SGEMM] / gbs[IMPL_READ],
                   100 * gbs[IMPL_SGEMM] / cp);
            if (gbs[IMPL_GEMV] > 0) printf("%9.2fx", gbs[IMPL_GEMV] / gbs[IMPL_SGEMM]);
            printf("\n");
        }
    }
    printf("(%s, %s, %s: sink %g)\n", impl_name[0], impl_name[1], impl_name[2], sink);
    return 0;
}
