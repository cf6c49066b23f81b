/*
 * The fp32 GEMM of the CPU backend (cpu_gemm.c): which kernel is chosen, and
 * that both kernels compute the product.
 *
 * Selection: lf__cpu_gemm_choose on made-up machines (a CPU OpenBLAS does
 * not know, ONEDNN_MAX_CPU_ISA limits, an AVX2-only CPU, requests), then on
 * this one: with AVX-512 in CPUID the default kernel must report an AVX-512
 * ISA and warn about nothing, whatever OPENBLAS_CORETYPE says (CTest runs
 * this file a second time as backend.test_gemm_prescott, with
 * OPENBLAS_CORETYPE=Prescott, OpenBLAS's generic kernel).
 *
 * Products: every transpose combination, odd sizes, alpha/beta, beta = 0 over
 * NaN, K = 0, on 1 and 2 threads, for oneDNN and OpenBLAS, against a double
 * reference. The bound is the standard one for a dot product of length K in
 * fp32 (Higham, Accuracy and Stability, 3.1): |fl(c) - c| <= gamma_K *
 * sum_k |a_ik b_kj|, gamma_K = K u / (1 - K u), u = 2^-24, plus the rounding
 * of alpha*, beta* and the final sum (3 more u on the same magnitude).
 */
#include "test_util.h"
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include "llmforge/backend.h"
#include "llmforge/backend_cpu.h"
#include "backend/cpu/cpu_internal.h"

static lf__cpu_gemm_facts facts(const char *req, unsigned isa, const char *core, int avx2, int avx512) {
    lf__cpu_gemm_facts f;
    memset(&f, 0, sizeof f);
    f.request = req;
    f.onednn_isa = isa;
    snprintf(f.onednn_version, sizeof f.onednn_version, "2.6.3");
    f.openblas_core = core;
    snprintf(f.openblas_version, sizeof f.openblas_version, "0.3.21");
    f.cpu_avx2 = avx2;
    f.cpu_avx512 = avx512;
    return f;
}

static void test_choose_made_up_machines(void **state) {
    (void)state;
    lf__cpu_gemm_choice c;
    /* family 6 model 207: AVX-512 + AMX, OpenBLAS does not know it (Prescott) */
    lf__cpu_gemm_facts f = facts(NULL, dnnl_cpu_isa_avx512_core_amx, "Prescott", 1, 1);
    lf__cpu_gemm_choose(&f, &c);
    assert_int_equal(c.lib, LF_CPU_GEMM_ONEDNN);
    assert_int_equal(c.vec, LF_CPU_VEC_AVX512);
    assert_string_equal(c.kernel, "oneDNN 2.6.3 avx512_core (jit sgemm)");
    assert_string_equal(c.warning, "");
    assert_int_equal(c.bad_request, 0);
    /* "onednn" spelled out is the default */
    f.request = "onednn";
    lf__cpu_gemm_choose(&f, &c);
    assert_int_equal(c.lib, LF_CPU_GEMM_ONEDNN);
    assert_string_equal(c.warning, "");
    /* OpenBLAS asked for: it runs Prescott there, and the warning says so and what to do */
    f.request = "openblas";
    lf__cpu_gemm_choose(&f, &c);
    assert_int_equal(c.lib, LF_CPU_GEMM_OPENBLAS);
    assert_int_equal(c.vec, LF_CPU_VEC_SSE);
    assert_non_null(strstr(c.kernel, "OpenBLAS 0.3.21 Prescott"));
    assert_non_null(strstr(c.warning, "Prescott"));
    assert_non_null(strstr(c.warning, "AVX-512"));
    assert_non_null(strstr(c.warning, "LLMFORGE_FP32_GEMM"));
    /* OpenBLAS on a core it knows: no warning */
    f.openblas_core = "SkylakeX";
    lf__cpu_gemm_choose(&f, &c);
    assert_int_equal(c.vec, LF_CPU_VEC_AVX512);
    assert_string_equal(c.warning, "");
    /* an AVX2 kernel on an AVX-512 CPU is narrower than the CPU allows */
    f.openblas_core = "Haswell";
    lf__cpu_gemm_choose(&f, &c);
    assert_int_equal(c.vec, LF_CPU_VEC_AVX2);
    assert_non_null(strstr(c.warning, "Haswell"));
    /* ONEDNN_MAX_CPU_ISA=AVX2 on an AVX-512 CPU: oneDNN at AVX2, warned */
    f = facts(NULL, dnnl_cpu_isa_avx2, "SkylakeX", 1, 1);
    lf__cpu_gemm_choose(&f, &c);
    assert_int_equal(c.lib, LF_CPU_GEMM_ONEDNN);
    assert_string_equal(c.kernel, "oneDNN 2.6.3 avx2 (jit sgemm)");
    assert_non_null(strstr(c.warning, "ONEDNN_MAX_CPU_ISA"));
    /* an AVX2-only CPU: oneDNN's avx2 kernel is the widest, nothing to warn */
    f = facts(NULL, dnnl_cpu_isa_avx2_vnni, "Prescott", 1, 0);
    lf__cpu_gemm_choose(&f, &c);
    assert_int_equal(c.vec, LF_CPU_VEC_AVX2);
    assert_string_equal(c.warning, "");
    f.request = "openblas"; /* ... but OpenBLAS's generic kernel there is warned about */
    lf__cpu_gemm_choose(&f, &c);
    assert_non_null(strstr(c.warning, "AVX2"));
    /* an old CPU without AVX2: no warning for either, SSE is all there is */
    f = facts("openblas", dnnl_cpu_isa_sse41, "Nehalem", 0, 0);
    lf__cpu_gemm_choose(&f, &c);
    assert_string_equal(c.warning, "");
    /* oneDNN without a JIT kernel (no SSE4.1): OpenBLAS's, if it has one */
    f = facts(NULL, 0, "Core2", 0, 0);
    lf__cpu_gemm_choose(&f, &c);
    assert_int_equal(c.lib, LF_CPU_GEMM_OPENBLAS);
    /* an unknown request is reported, never silently taken */
    f = facts("mkl", dnnl_cpu_isa_avx512_core, "SkylakeX", 1, 1);
    lf__cpu_gemm_choose(&f, &c);
    assert_int_equal(c.bad_request, 1);
    assert_non_null(strstr(c.warning, "'mkl'"));
    /* an unknown OpenBLAS core name counts as generic */
    f = facts("openblas", dnnl_cpu_isa_avx512_core, "SomeFutureLake", 1, 1);
    lf__cpu_gemm_choose(&f, &c);
    assert_int_equal(c.vec, LF_CPU_VEC_NONE);
    assert_true(c.warning[0] != '\0');
}

/* This machine, as the default (no LLMFORGE_FP32_GEMM) would run it. */
static void test_choose_this_machine(void **state) {
    (void)state;
    lf__cpu_gemm_facts f;
    lf__cpu_gemm_facts_here(&f);
    const char *coretype = getenv("OPENBLAS_CORETYPE");
    printf("CPU: avx2 %d, avx512 %d; oneDNN %s ISA %s; OpenBLAS %s core %s (OPENBLAS_CORETYPE %s)\n", f.cpu_avx2,
           f.cpu_avx512, f.onednn_version, lf__cpu_onednn_isa_name(f.onednn_isa), f.openblas_version,
           f.openblas_core, coretype ? coretype : "unset");
    printf("in use: %s\n", lf_backend_cpu_fp32_kernel());
    if (coretype && !strcasecmp(coretype, "Prescott")) assert_string_equal(f.openblas_core, "Prescott");
    f.request = NULL;
    lf__cpu_gemm_choice c;
    lf__cpu_gemm_choose(&f, &c);
    const char *limit = getenv("ONEDNN_MAX_CPU_ISA");
    if (f.cpu_avx512 && !(limit && *limit)) {
        assert_int_equal(c.lib, LF_CPU_GEMM_ONEDNN);
        assert_non_null(strstr(c.kernel, "avx512"));
        assert_string_equal(c.warning, "");
    } else if (f.cpu_avx2 && !(limit && *limit)) {
        assert_true(c.vec >= LF_CPU_VEC_AVX2);
        assert_string_equal(c.warning, "");
    }
    /* what the process runs is this choice unless the environment asked otherwise */
    const char *req = getenv("LLMFORGE_FP32_GEMM");
    if (!req || !*req) {
        assert_string_equal(lf_backend_cpu_fp32_kernel(), c.kernel);
        if (c.warning[0])
            assert_string_equal(lf_backend_cpu_kernel_warning(), c.warning);
        else
            assert_null(lf_backend_cpu_kernel_warning());
        assert_int_equal(lf_backend_cpu_check(), LF_OK);
    }
}

/* ---------------------------------------------------------------- products */

static float frand(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((*s >> 40) & 0xFFFFFF) / 16777216.0f * 2.0f - 1.0f;
}

/* One product against the double reference; returns the worst err/bound. */
static double check_product(int ta, int tb, int M, int N, int K, float alpha, float beta, int pad) {
    const int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
    const size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb, nc = (size_t)M * ldc;
    float *A = malloc(na * sizeof *A), *B = malloc(nb * sizeof *B), *C = malloc(nc * sizeof *C),
          *C0 = malloc(nc * sizeof *C0);
    assert_non_null(A);
    assert_non_null(B);
    assert_non_null(C);
    assert_non_null(C0);
    uint64_t s = (uint64_t)(M * 131 + N * 17 + K * 7 + ta * 3 + tb);
    for (size_t i = 0; i < na; i++) A[i] = frand(&s);
    for (size_t i = 0; i < nb; i++) B[i] = frand(&s);
    for (size_t i = 0; i < nc; i++) C0[i] = beta == 0.0f ? NAN : frand(&s); /* beta 0: C must not be read */
    memcpy(C, C0, nc * sizeof *C);
    lf__cpu_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    const double u = ldexp(1.0, -24), gk = K * u / (1 - K * u) + 3 * u;
    double worst = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double ref = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                const double a = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                const double b = tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                ref += a * b;
                mag += fabs(a * b);
            }
            const double c0 = beta == 0.0f ? 0.0 : C0[(size_t)i * ldc + j];
            ref = alpha * ref + beta * c0;
            const double bound = gk * (fabs(alpha) * mag + fabs(beta * c0)) + 1e-30;
            const double err = fabs(C[(size_t)i * ldc + j] - ref);
            const double r = err / bound;
            if (!(r <= worst)) worst = r != r ? INFINITY : r;
        }
    /* padding columns are never written */
    for (int i = 0; i < M; i++)
        for (int j = N; j < ldc; j++)
            if (memcmp(&C[(size_t)i * ldc + j], &C0[(size_t)i * ldc + j], sizeof(float)))
                fail_msg("sgemm wrote column %d >= N = %d", j, N);
    free(A);
    free(B);
    free(C);
    free(C0);
    return worst;
}

static void products(int lib) {
    lf__cpu_gemm_force(lib);
    assert_int_equal(lf__cpu_gemm_lib(), lib);
    static const int shapes[][3] = {{1, 1, 1}, {7, 5, 3}, {33, 17, 65}, {64, 64, 64}, {130, 97, 200},
                                    {256, 48, 31}, {3, 300, 512}, {300, 2, 1}};
    const float ab[][2] = {{1.0f, 0.0f}, {1.0f, 1.0f}, {0.125f, -0.5f}, {-2.0f, 0.0f}};
    const long failures0 = lf__cpu_gemm_failures();
    double worst = 0;
    for (int th = 1; th <= 2; th++) {
        omp_set_num_threads(th);
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
            for (int t = 0; t < 4; t++)
                for (size_t k = 0; k < sizeof ab / sizeof *ab; k++) {
                    double r = check_product(t & 1, t >> 1, shapes[s][0], shapes[s][1], shapes[s][2], ab[k][0],
                                             ab[k][1], (int)(s % 3));
                    if (r > 1.0)
                        fail_msg("lib %d threads %d M %d N %d K %d ta %d tb %d alpha %g beta %g: err %.3g x bound",
                                 lib, th, shapes[s][0], shapes[s][1], shapes[s][2], t & 1, t >> 1, ab[k][0],
                                 ab[k][1], r);
                    if (r > worst) worst = r;
                }
    }
    printf("lib %d (%s): worst err/bound %.3g\n", lib, lf_backend_cpu_fp32_kernel(), worst);
    assert_int_equal(lf__cpu_gemm_failures(), failures0);
    /* K = 0: C = beta * C, and NaN in C is not read when beta = 0 */
    float C[6] = {NAN, NAN, NAN, 2.0f, 4.0f, 6.0f}, A1 = 1.0f, B1 = 1.0f;
    lf__cpu_sgemm(0, 0, 1, 3, 0, 1.0f, &A1, 1, &B1, 3, 0.0f, C, 3);
    lf__cpu_sgemm(0, 0, 1, 3, 0, 1.0f, &A1, 1, &B1, 3, 0.5f, C + 3, 3);
    const float want[6] = {0, 0, 0, 1, 2, 3};
    assert_memory_equal(C, want, sizeof want);
    lf__cpu_gemm_force(0);
}

static void test_products_onednn(void **state) {
    (void)state;
    products(LF_CPU_GEMM_ONEDNN);
}

static void test_products_openblas(void **state) {
    (void)state;
    products(LF_CPU_GEMM_OPENBLAS);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_choose_made_up_machines),
        cmocka_unit_test(test_choose_this_machine),
        cmocka_unit_test(test_products_onednn),
        cmocka_unit_test(test_products_openblas),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
