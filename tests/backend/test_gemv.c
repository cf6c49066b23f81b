/* The CPU backend's matrix-vector path (cpu_gemv.c: matmul_forward with N <=
 * LF_CPU_GEMV_MAX_N rows, decoding's products): against the double-precision
 * reference for N = 1..5 (5 is past the cutoff, the GEMM's path, through
 * the same op), both layouts, with and without bias, sizes that are no
 * multiple of any vector width, on every vector path this CPU can run
 * (AVX-512, AVX2+FMA, plain C); the error bound is the rounding model of a
 * sum of C products plus the bias, not a constant fitted to one run.
 * Then what cpu_gemv.c promises besides: which N it takes and that it writes
 * nothing where it declines; the same bits for 1, 2 and 3 threads, for a row
 * alone or in a batch, and on the replicas' threads (thread count 1 inside
 * a parallel region); and that nothing past the end of inp or W is read
 * into a result.
 * The batch-invariant GEMM (lf__cpu_gemm_invariant, any N): against the
 * reference by the same bound; each of its N rows bit-identical to that row
 * computed alone by the matrix-vector path, for N past the 4-row blocks and
 * past W's cache tiles, with 1, 2 and 3 threads; and the "cpu" instance's
 * matmul_forward with lf_backend_set_batch_invariant on (and what it
 * refuses). */
#include <omp.h>
#include "llmforge/backend.h"
#include "backend/backend_impl.h"
#include "ref_ops.h"
#include "backend/cpu/cpu_internal.h"

static const lf__cpu_vec all_paths[] = {LF_CPU_VEC_AVX512, LF_CPU_VEC_AVX2, LF_CPU_VEC_NONE};
static const char *path_name(lf__cpu_vec v) {
    return v == LF_CPU_VEC_AVX512 ? "AVX-512" : v == LF_CPU_VEC_AVX2 ? "AVX2" : "plain C";
}

/* Selects path v; 0 when this CPU cannot run it (the caller skips it). */
static int use_path(lf__cpu_vec v) {
    lf__cpu_gemv_force(-1);
    if (v > lf__cpu_gemv_vec()) return 0;
    lf__cpu_gemv_force((int)v);
    assert_int_equal(lf__cpu_gemv_vec(), v);
    return 1;
}

/* Sizes: C and OC below, at and past the vector widths (8, 16), the row
 * blocks (4 or 8 rows of W), the 16-column thread blocks, the column tiles
 * (at most 1024 columns for 4 inputs) and IN_OUT's two halves of the rows
 * (C >= 16 and OC <= 4096; 4500 columns take the column split), and some
 * large enough to run on a team of threads (C * OC >= LF_CPU_PAR_MIN). */
static const int sizes[][2] = {{1, 1},    {37, 1000}, {16, 17},  {15, 33},  {7, 5},
                               {129, 65}, {1000, 37}, {64, 2100}, {333, 70}, {21, 4500}};

/* gamma_k = k u / (1 - k u) at unit roundoff u (Higham, eq. 3.8). */
static double gamma_k(double k, double u) { return k * u / (1.0 - k * u); }

/* out (N,OC) from the op against the reference: each element within
 * gamma_(C+1) of fp32 times sum_c |inp||W| + |bias| (any summation order of
 * C products and one bias addition), plus the reference's own fp64 error. */
static void check_against_ref(const char *what, const float *out, const ten *inp, const ten *w, const ten *b,
                              int N, int C, int OC, lf_weight_layout layout) {
    double *want = calloc((size_t)N * OC, sizeof(double));
    assert_non_null(want);
    ref_matmul_forward(want, inp->d, w->d, b ? b->d : NULL, N, C, OC, layout);
    const double g = gamma_k(C + 1, 0x1p-24) + gamma_k(C + 1, 0x1p-53);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double abs_sum = b ? fabs(b->d[o]) : 0.0;
            for (int c = 0; c < C; c++) {
                const double wv = layout == LF_W_IN_OUT ? w->d[(size_t)c * OC + o] : w->d[(size_t)o * C + c];
                abs_sum += fabs(inp->d[(size_t)n * C + c] * wv);
            }
            const double got = out[(size_t)n * OC + o], ref = want[(size_t)n * OC + o];
            const double err = fabs(got - ref);
            if (!(err <= g * abs_sum))
                fail_msg("%s: N=%d C=%d OC=%d %s bias=%d: out[%d,%d] = %.9g, reference %.9g, error %.3g > bound %.3g",
                         what, N, C, OC, layout == LF_W_IN_OUT ? "IN_OUT" : "OUT_IN", b != NULL, n, o, got, ref,
                         err, g * abs_sum);
        }
    free(want);
}

static void test_against_reference(void **state) {
    (void)state;
    int paths = 0;
    for (size_t p = 0; p < sizeof all_paths / sizeof all_paths[0]; p++) {
        if (!use_path(all_paths[p])) continue;
        paths++;
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            const int C = sizes[s][0], OC = sizes[s][1];
            for (int N = 1; N <= 5; N++)
                for (int layout = 0; layout < 2; layout++)
                    for (int with_bias = 0; with_bias < 2; with_bias++) {
                        const uint64_t k = 100 * s + 10 * N;
                        ten inp = ten_rand((size_t)N * C, 1, k + 1), w = ten_rand((size_t)C * OC, 0.5f, k + 2);
                        ten b = ten_rand((size_t)OC, 1, k + 3);
                        float *out = malloc((size_t)N * OC * sizeof(float));
                        assert_non_null(out);
                        for (size_t i = 0; i < (size_t)N * OC; i++) out[i] = NAN; /* the op overwrites */
                        lf__cpu_matmul_forward(out, inp.f, w.f, with_bias ? b.f : NULL, N, C, OC,
                                               (lf_weight_layout)layout);
                        check_against_ref(path_name(all_paths[p]), out, &inp, &w, with_bias ? &b : NULL, N, C,
                                          OC, (lf_weight_layout)layout);
                        free(out);
                        ten_free(&inp); ten_free(&w); ten_free(&b);
                    }
        }
    }
    lf__cpu_gemv_force(-1);
    assert_true(paths >= 1);
    printf("gemv paths checked on this CPU: %d (this CPU's: %s)\n", paths, path_name(lf__cpu_gemv_vec()));
}

/* The rows it takes, and that it writes nothing where it declines. */
static void test_cutoff(void **state) {
    (void)state;
    enum { C = 20, OC = 24, NMAX = LF_CPU_GEMV_MAX_N + 2 };
    ten inp = ten_rand((size_t)NMAX * C, 1, 1), w = ten_rand((size_t)C * OC, 1, 2);
    float out[NMAX * OC];
    for (int N = -1; N <= NMAX; N++)
        for (int layout = 0; layout < 2; layout++) {
            for (int i = 0; i < NMAX * OC; i++) out[i] = 1234.5f;
            const int took = lf__cpu_gemv(out, inp.f, w.f, NULL, N, C, OC, (lf_weight_layout)layout);
            assert_int_equal(took, N >= 1 && N <= LF_CPU_GEMV_MAX_N);
            const int written = took ? N * OC : 0;
            for (int i = written; i < NMAX * OC; i++)
                if (out[i] != 1234.5f) fail_msg("N=%d: out[%d] written past the %d outputs", N, i, written);
        }
    /* no channels or no outputs: the GEMM's (the op's) business */
    assert_int_equal(lf__cpu_gemv(out, inp.f, w.f, NULL, 1, 0, OC, LF_W_OUT_IN), 0);
    assert_int_equal(lf__cpu_gemv(out, inp.f, w.f, NULL, 1, C, 0, LF_W_IN_OUT), 0);
    ten_free(&inp); ten_free(&w);
}

/* The same bits for 1, 2 and 3 threads, and for each row of an N-row batch
 * computed alone (N = 1), on every path. */
static void test_bits_threads_and_batch(void **state) {
    (void)state;
    /* IN_OUT: the two-halves path, and (OC > 4096) the column-split one */
    const int shapes[][2] = {{300, 1000}, {768, 131}, {41, 2049}, {17, 4500}};
    for (size_t p = 0; p < sizeof all_paths / sizeof all_paths[0]; p++) {
        if (!use_path(all_paths[p])) continue;
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            const int C = shapes[s][0], OC = shapes[s][1], N = LF_CPU_GEMV_MAX_N;
            assert_true((long)C * OC >= LF_CPU_PAR_MIN); /* so 2 and 3 threads really split it */
            ten inp = ten_rand((size_t)N * C, 1, 40 + s), w = ten_rand((size_t)C * OC, 1, 50 + s);
            ten b = ten_rand((size_t)OC, 1, 60 + s);
            const size_t no = (size_t)N * OC;
            float *res[4], *alone = malloc(no * sizeof(float));
            assert_non_null(alone);
            for (int layout = 0; layout < 2; layout++) {
                const lf_weight_layout L = (lf_weight_layout)layout;
                for (int t = 1; t <= 3; t++) {
                    omp_set_num_threads(t);
                    res[t] = malloc(no * sizeof(float));
                    assert_non_null(res[t]);
                    assert_int_equal(lf__cpu_gemv(res[t], inp.f, w.f, b.f, N, C, OC, L), 1);
                }
                omp_set_num_threads(2);
                for (int t = 2; t <= 3; t++)
                    if (memcmp(res[1], res[t], no * sizeof(float)) != 0)
                        fail_msg("%s C=%d OC=%d layout %d: 1 and %d threads differ", path_name(all_paths[p]), C, OC,
                                 layout, t);
                for (int nb = 1; nb < N; nb++) /* the first nb rows as a batch of their own */
                    for (int n0 = 0; n0 + nb <= N; n0 += nb) {
                        assert_int_equal(lf__cpu_gemv(alone, inp.f + (size_t)n0 * C, w.f, b.f, nb, C, OC, L), 1);
                        if (memcmp(alone, res[1] + (size_t)n0 * OC, (size_t)nb * OC * sizeof(float)) != 0)
                            fail_msg("%s C=%d OC=%d layout %d: rows %d..%d alone differ from the batch of %d",
                                     path_name(all_paths[p]), C, OC, layout, n0, n0 + nb - 1, N);
                    }
                for (int t = 1; t <= 3; t++) free(res[t]);
            }
            free(alone);
            ten_free(&inp); ten_free(&w); ten_free(&b);
        }
    }
    lf__cpu_gemv_force(-1);
}

/* On the replicas' threads (each sets its thread count to 1 inside the
 * model's parallel region): two products at once, one per thread, give
 * the bits of the same products made outside. */
static void test_inside_parallel_region(void **state) {
    (void)state;
    enum { C = 500, OC = 777 };
    ten inp = ten_rand(2 * C, 1, 70), w = ten_rand((size_t)C * OC, 1, 71), b = ten_rand(OC, 1, 72);
    for (int layout = 0; layout < 2; layout++) {
        const lf_weight_layout L = (lf_weight_layout)layout;
        float *want = malloc(2 * OC * sizeof(float)), *got = malloc(2 * OC * sizeof(float));
        assert_non_null(want);
        assert_non_null(got);
        for (int i = 0; i < 2; i++) assert_int_equal(lf__cpu_gemv(want + i * OC, inp.f + i * C, w.f, b.f, 1, C, OC, L), 1);
        int took[2] = {0, 0};
#pragma omp parallel for num_threads(2) schedule(static, 1)
        for (int i = 0; i < 2; i++) {
            omp_set_num_threads(1);
            took[i] = lf__cpu_gemv(got + i * OC, inp.f + i * C, w.f, b.f, 1, C, OC, L);
        }
        assert_int_equal(took[0] + took[1], 2);
        assert_memory_equal(want, got, 2 * OC * sizeof(float));
        free(want);
        free(got);
    }
    ten_free(&inp); ten_free(&w); ten_free(&b);
}

/* NaN just past the end of inp and of W: a tail load that read past the
 * matrix (a mask one lane too wide) would put it into a result. */
static void test_no_read_past_end(void **state) {
    (void)state;
    const int sz[][2] = {{37, 45}, {5, 3}, {100, 1025}};
    for (size_t p = 0; p < sizeof all_paths / sizeof all_paths[0]; p++) {
        if (!use_path(all_paths[p])) continue;
        for (size_t s = 0; s < sizeof sz / sizeof sz[0]; s++)
            for (int N = 1; N <= LF_CPU_GEMV_MAX_N; N++)
                for (int layout = 0; layout < 2; layout++) {
                    const int C = sz[s][0], OC = sz[s][1];
                    const size_t ni = (size_t)N * C, nw = (size_t)C * OC;
                    ten inp = ten_rand(ni, 1, 80 + s), w = ten_rand(nw, 1, 90 + s);
                    float *xi = malloc((ni + 32) * sizeof(float)), *xw = malloc((nw + 32) * sizeof(float));
                    float *out = malloc((size_t)N * OC * sizeof(float));
                    assert_non_null(xi);
                    assert_non_null(xw);
                    assert_non_null(out);
                    memcpy(xi, inp.f, ni * sizeof(float));
                    memcpy(xw, w.f, nw * sizeof(float));
                    for (int i = 0; i < 32; i++) xi[ni + i] = xw[nw + i] = NAN;
                    assert_int_equal(lf__cpu_gemv(out, xi, xw, NULL, N, C, OC, (lf_weight_layout)layout), 1);
                    check_against_ref("past the end", out, &inp, &w, NULL, N, C, OC, (lf_weight_layout)layout);
                    free(xi); free(xw); free(out);
                    ten_free(&inp); ten_free(&w);
                }
    }
    lf__cpu_gemv_force(-1);
}

/* Shapes for the invariant GEMM: IN_OUT with halves and without (OC >
 * 4096; C < 16), OUT_IN with C large enough that a tile holds few rows (so
 * rows cross tile edges), and GPT-2's c_fc (768 -> 3072). */
static const int inv_shapes[][2] = {{300, 1000}, {17, 4500}, {9, 70}, {3000, 97}, {768, 3072}, {129, 65}};
static const int inv_rows[] = {5, 7, 9, 33, 64, 130};

static void test_invariant_against_reference(void **state) {
    (void)state;
    for (size_t p = 0; p < sizeof all_paths / sizeof all_paths[0]; p++) {
        if (!use_path(all_paths[p])) continue;
        for (size_t s = 0; s < sizeof inv_shapes / sizeof inv_shapes[0]; s++)
            for (int layout = 0; layout < 2; layout++) {
                const int C = inv_shapes[s][0], OC = inv_shapes[s][1], N = inv_rows[s];
                ten inp = ten_rand((size_t)N * C, 1, 300 + s), w = ten_rand((size_t)C * OC, 0.5f, 310 + s);
                ten b = ten_rand((size_t)OC, 1, 320 + s);
                float *out = malloc((size_t)N * OC * sizeof(float));
                assert_non_null(out);
                for (size_t i = 0; i < (size_t)N * OC; i++) out[i] = NAN;
                assert_int_equal(lf__cpu_gemm_invariant(out, inp.f, w.f, layout ? b.f : NULL, N, C, OC,
                                                        (lf_weight_layout)layout), 1);
                check_against_ref("invariant GEMM", out, &inp, &w, layout ? &b : NULL, N, C, OC, (lf_weight_layout)layout);
                free(out);
                ten_free(&inp); ten_free(&w); ten_free(&b);
            }
    }
    lf__cpu_gemv_force(-1);
}

/* Each row of the batch equals the row alone through lf__cpu_gemv (N = 1),
 * and any contiguous sub-batch, for 1, 2 and 3 threads. */
static void test_invariant_bits(void **state) {
    (void)state;
    for (size_t p = 0; p < sizeof all_paths / sizeof all_paths[0]; p++) {
        if (!use_path(all_paths[p])) continue;
        for (size_t s = 0; s < sizeof inv_shapes / sizeof inv_shapes[0]; s++)
            for (int layout = 0; layout < 2; layout++) {
                const int C = inv_shapes[s][0], OC = inv_shapes[s][1], N = inv_rows[s];
                const lf_weight_layout L = (lf_weight_layout)layout;
                ten inp = ten_rand((size_t)N * C, 1, 400 + s), w = ten_rand((size_t)C * OC, 1, 410 + s);
                ten b = ten_rand((size_t)OC, 1, 420 + s);
                const size_t no = (size_t)N * OC;
                float *batch = malloc(no * sizeof(float)), *alone = malloc(no * sizeof(float));
                assert_non_null(batch);
                assert_non_null(alone);
                for (int n = 0; n < N; n++) assert_int_equal(lf__cpu_gemv(alone + (size_t)n * OC, inp.f + (size_t)n * C, w.f,
                                                                          b.f, 1, C, OC, L), 1);
                for (int t = 1; t <= 3; t++) {
                    omp_set_num_threads(t);
                    assert_int_equal(lf__cpu_gemm_invariant(batch, inp.f, w.f, b.f, N, C, OC, L), 1);
                    for (int n = 0; n < N; n++)
                        if (memcmp(batch + (size_t)n * OC, alone + (size_t)n * OC, (size_t)OC * sizeof(float)))
                            fail_msg("%s C=%d OC=%d layout %d, %d threads: row %d of %d differs from the row alone",
                                     path_name(all_paths[p]), C, OC, layout, t, n, N);
                    /* rows 3.. as a batch of their own (N - 3 >= 2 rows: the 4-row blocks fall elsewhere) */
                    assert_int_equal(lf__cpu_gemm_invariant(batch, inp.f + 3 * (size_t)C, w.f, b.f, N - 3, C, OC, L), 1);
                    if (memcmp(batch, alone + 3 * (size_t)OC, (size_t)(N - 3) * OC * sizeof(float)))
                        fail_msg("%s C=%d OC=%d layout %d: rows 3..%d as a batch differ", path_name(all_paths[p]), C,
                                 OC, layout, N - 1);
                }
                omp_set_num_threads(2);
                free(batch);
                free(alone);
                ten_free(&inp); ten_free(&w); ten_free(&b);
            }
    }
    lf__cpu_gemv_force(-1);
}

/* Through the op of a "cpu" instance: off, an N = 64 product is oneDNN's
 * (within the bound, not necessarily the bits of a row alone); on, every row
 * is the row alone. cpu-bf16 refuses the mode. */
static void test_invariant_instance(void **state) {
    (void)state;
    enum { N = 64, C = 768, OC = 2304 };
    lf_backend *be = NULL, *bf = NULL;
    assert_int_equal(lf_backend_open("cpu", &be), LF_OK);
    assert_int_equal(lf_backend_batch_invariant(be), 0);
    ten inp = ten_rand((size_t)N * C, 1, 500), w = ten_rand((size_t)C * OC, 1, 501), b = ten_rand(OC, 1, 502);
    float *out = malloc((size_t)N * OC * sizeof(float)), *alone = malloc((size_t)OC * sizeof(float));
    assert_non_null(out);
    assert_non_null(alone);
    assert_int_equal(lf_backend_set_batch_invariant(be, 1), LF_OK);
    assert_int_equal(lf_backend_batch_invariant(be), 1);
    be->ops->matmul_forward(be, out, inp.f, LF_DT_F32, w.f, b.f, N, C, OC, LF_W_IN_OUT);
    assert_int_equal(lf_backend_sync(be), LF_OK);
    for (int n = 0; n < N; n++) {
        be->ops->matmul_forward(be, alone, inp.f + (size_t)n * C, LF_DT_F32, w.f, b.f, 1, C, OC, LF_W_IN_OUT);
        if (memcmp(alone, out + (size_t)n * OC, OC * sizeof(float))) fail_msg("row %d of %d differs from the row alone", n, N);
    }
    assert_int_equal(lf_backend_set_batch_invariant(be, 0), LF_OK);
    be->ops->matmul_forward(be, out, inp.f, LF_DT_F32, w.f, b.f, N, C, OC, LF_W_IN_OUT);
    check_against_ref("cpu instance, not invariant", out, &inp, &w, &b, N, C, OC, LF_W_IN_OUT);
    lf_backend_close(be);
    assert_int_equal(lf_backend_open("cpu-bf16", &bf), LF_OK);
    assert_int_equal(lf_backend_set_batch_invariant(bf, 1), LF_ERR_UNSUPPORTED);
    assert_non_null(strstr(lf_last_error(), "cpu-bf16"));
    assert_int_equal(lf_backend_batch_invariant(bf), 0);
    assert_int_equal(lf_backend_set_batch_invariant(bf, 0), LF_OK);
    lf_backend_close(bf);
    assert_int_equal(lf_backend_set_batch_invariant(NULL, 1), LF_ERR_INVALID_ARG);
    free(out);
    free(alone);
    ten_free(&inp); ten_free(&w); ten_free(&b);
}

int main(void) {
    omp_set_num_threads(2);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_reference),
        cmocka_unit_test(test_cutoff),
        cmocka_unit_test(test_bits_threads_and_batch),
        cmocka_unit_test(test_inside_parallel_region),
        cmocka_unit_test(test_no_read_past_end),
        cmocka_unit_test(test_invariant_against_reference),
        cmocka_unit_test(test_invariant_bits),
        cmocka_unit_test(test_invariant_instance),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
