/* The FMA probe (lf_backend_cpu_peak_flops, cpu_peak.c; bench's and the
 * trainer's MFU denominator) against a lower bound that holds on any
 * machine: an sgemm cannot run faster than the FMA units it runs on, so the
 * probe must never report less than a 512^3 sgemm (lf__cpu_sgemm) reaches in
 * the same process on the same threads. (The old probe spilled its chains on
 * AVX2 and reported a tenth of the peak: 1036% MFU.) On 1 thread and on
 * omp_get_max_threads(). The machine may be shared, so probe and sgemm are
 * interleaved over several rounds and the best of each compared, up to
 * six tries. */
#include <omp.h>
#include "llmforge/backend.h"
#include "llmforge/backend_cpu.h"
#include "backend/backend_impl.h"
#include "ref_ops.h"
#include "backend/cpu/cpu_internal.h"

#define N 512

static double sgemm_rate(const float *A, const float *B, float *C) {
    double best = 0;
    for (int r = 0; r < 3; r++) {
        const double t0 = lf_time_now();
        lf__cpu_sgemm(0, 0, N, N, N, 1.0f, A, N, B, N, 0.0f, C, N);
        const double dt = lf_time_now() - t0;
        const double rate = 2.0 * N * N * N / dt;
        if (rate > best) best = rate;
    }
    return best;
}

static void test_probe_above_sgemm(void **state) {
    (void)state;
    float *A = malloc(sizeof(float) * N * N), *B = malloc(sizeof(float) * N * N), *C = malloc(sizeof(float) * N * N);
    assert_true(A && B && C);
    for (int i = 0; i < N * N; i++) {
        A[i] = (float)(i % 7) * 0.25f - 0.75f;
        B[i] = (float)(i % 5) * 0.5f - 1.0f;
    }
    const int maxt = omp_get_max_threads();
    const int counts[2] = {1, maxt};
    for (int k = 0; k < (maxt > 1 ? 2 : 1); k++) {
        omp_set_num_threads(counts[k]);
        sgemm_rate(A, B, C); /* warm: oneDNN's first call JITs its kernel */
        double probe = 0, gemm = 0;
        int ok = 0;
        for (int attempt = 0; attempt < 6 && !ok; attempt++) {
            for (int r = 0; r < 3; r++) {
                const double p = lf_backend_cpu_peak_flops(0.05), g = sgemm_rate(A, B, C);
                if (p > probe) probe = p;
                if (g > gemm) gemm = g;
            }
            ok = probe >= gemm;
        }
        printf("%d thread%s, ISA %s (%s): FMA probe %.1f GFLOP/s, sgemm %dx%dx%d %.1f GFLOP/s (%s), ratio %.2f\n",
               counts[k], counts[k] > 1 ? "s" : "", lf_backend_cpu_isa(), lf_backend_cpu_isa_source(), probe / 1e9,
               N, N, N, gemm / 1e9, lf_backend_cpu_fp32_kernel(), probe / gemm);
        if (!ok) fail_msg("the FMA probe (%.1f GFLOP/s) is below what an sgemm reaches (%.1f GFLOP/s)", probe / 1e9,
                          gemm / 1e9);
    }
    omp_set_num_threads(maxt);
    free(A);
    free(B);
    free(C);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_probe_above_sgemm)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
