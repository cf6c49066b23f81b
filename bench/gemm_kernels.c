/*
 * bench/gemm_kernels.c -- fp32 GEMM throughput of the two kernels llmforge
 * can use (src/backend/cpu/cpu_gemm.c): oneDNN's dnnl_sgemm (the default)
 * and OpenBLAS's cblas_sgemm, on the products of a GPT-2 124M training step
 * (B*T = 1024 rows) and of attention (T 256, HS 64), one thread, best of
 * several repetitions. Built and run by bench/gemm_kernels.sh, which runs it
 * once as is and once with OPENBLAS_CORETYPE=Prescott (OpenBLAS's generic
 * kernel, what Debian's 0.3.21 runs on CPUs it does not know).
 * Prints one line per product and kernel, then the medians.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cblas.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

char *openblas_get_corename(void);

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(void) {
    omp_set_num_threads(1);
    openblas_set_num_threads(1);
    /* M, N, K, transa, transb: forward (NN), dinp (NT), dweight (TN) of c_attn, c_proj, c_fc, mlp c_proj,
     * lm_head; attention scores and att @ v */
    static const struct { int M, N, K, ta, tb; const char *what; } p[] = {
        {1024, 2304, 768, 0, 0, "c_attn fwd"},    {1024, 768, 2304, 0, 1, "c_attn dinp"},
        {768, 2304, 1024, 1, 0, "c_attn dW"},     {1024, 3072, 768, 0, 0, "c_fc fwd"},
        {1024, 768, 3072, 0, 0, "mlp proj fwd"},  {3072, 768, 1024, 1, 0, "mlp proj dW"},
        {1024, 50304, 768, 0, 1, "lm_head fwd"},  {256, 256, 64, 0, 1, "att q@k^T"},
        {256, 64, 256, 0, 0, "att @ v"},
    };
    const int np = sizeof p / sizeof *p;
    double g[2][16];
    printf("OpenBLAS core %s; oneDNN ISA 0x%x\n", openblas_get_corename(), (unsigned)dnnl_get_effective_cpu_isa());
    for (int i = 0; i < np; i++) {
        const int M = p[i].M, N = p[i].N, K = p[i].K, ta = p[i].ta, tb = p[i].tb;
        const int lda = ta ? M : K, ldb = tb ? K : N;
        float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * K * N), *C = malloc(sizeof(float) * M * N);
        if (!A || !B || !C) return 1;
        for (long j = 0; j < (long)M * K; j++) A[j] = (float)(j % 97) / 97.0f - 0.5f;
        for (long j = 0; j < (long)K * N; j++) B[j] = (float)(j % 89) / 89.0f - 0.5f;
        const double flop = 2.0 * M * N * K;
        const int reps = flop > 1e9 ? 3 : flop > 1e8 ? 10 : 200;
        for (int impl = 0; impl < 2; impl++) {
            double best = 1e30;
            for (int r = 0; r < reps + 1; r++) {
                double t = now();
                if (impl == 0)
                    dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, N);
                else
                    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M,
                                N, K, 1.0f, A, lda, B, ldb, 0.0f, C, N);
                t = now() - t;
                if (r > 0 && t < best) best = t; /* the first is a warm-up */
            }
            g[impl][i] = flop / best / 1e9;
        }
        printf("%-14s %5d x %5d x %5d  oneDNN %7.1f GFLOP/s  OpenBLAS %7.1f GFLOP/s  ratio %.2f\n", p[i].what, M, N,
               K, g[0][i], g[1][i], g[0][i] / g[1][i]);
        free(A);
        free(B);
        free(C);
    }
    qsort(g[0], np, sizeof(double), cmp);
    qsort(g[1], np, sizeof(double), cmp);
    printf("median: oneDNN %.1f GFLOP/s, OpenBLAS (%s) %.1f GFLOP/s\n", g[0][np / 2], openblas_get_corename(),
           g[1][np / 2]);
    return 0;
}
