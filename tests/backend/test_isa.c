/* The CPU backend's ISA selection (cpu_isa.c) and the build's baseline check
 * (src/core/cpu_baseline.c):
 *  - the decision as a pure function on made-up CPUs: CPUID alone, a cap
 *    from LLMFORGE_CPU_ISA, an unknown value and a level above the CPU's
 *    (errors whose message names the variable and the value);
 *  - this process: the level in use is the variable's when set, and every
 *    choice that follows it agrees (GEMV path, small-T attention lanes,
 *    oneDNN's ISA through the fp32 kernel's name);
 *  - the small-T attention at 8 lanes (AVX2) and at 16 (AVX-512) gives the
 *    same bits, forward and backward, GPT-2 and grouped-query heads, where
 *    the CPU runs both (cpu_attention_fast.h's promise);
 *  - GELU forward and backward: the AVX-512 build and the baseline give the
 *    same bits (cpu_gelu.h's promise), odd lengths, threaded and not, and
 *    the edges (0, -0, huge, inf, NaN);
 *  - the baseline check: passes here; on a made-up CPU below the baseline it
 *    names the baseline and each missing feature.
 * With the argument env-bad (CTest sets LLMFORGE_CPU_ISA to a bad value):
 * lf_backend_cpu_check refuses it, naming the variable and the value. */
#include <omp.h>
#include <math.h>
#include <string.h>
#include "llmforge/backend.h"
#include "llmforge/backend_cpu.h"
#include "backend/backend_impl.h"
#include "ref_ops.h"
#include "backend/cpu/cpu_internal.h"
#include "core/cpu_baseline.h"

static void test_choose(void **state) {
    (void)state;
    lf__cpu_isa_choice c;
    lf__cpu_isa_choose(NULL, LF_CPU_ISA_AVX512, &c);
    assert_int_equal(c.isa, LF_CPU_ISA_AVX512);
    assert_int_equal(c.from_env, 0);
    assert_int_equal(c.error, 0);
    lf__cpu_isa_choose("", LF_CPU_ISA_AVX2, &c);
    assert_int_equal(c.isa, LF_CPU_ISA_AVX2);
    assert_int_equal(c.error, 0);
    lf__cpu_isa_choose("avx2", LF_CPU_ISA_AMX, &c);
    assert_int_equal(c.isa, LF_CPU_ISA_AVX2);
    assert_int_equal(c.from_env, 1);
    assert_int_equal(c.error, 0);
    lf__cpu_isa_choose("AVX512", LF_CPU_ISA_AVX512_BF16, &c); /* case-insensitive */
    assert_int_equal(c.isa, LF_CPU_ISA_AVX512);
    lf__cpu_isa_choose("avx512_bf16", LF_CPU_ISA_AVX512_BF16, &c); /* the CPU's own level */
    assert_int_equal(c.isa, LF_CPU_ISA_AVX512_BF16);
    assert_int_equal(c.error, 0);
    lf__cpu_isa_choose("generic", LF_CPU_ISA_AVX2, &c);
    assert_int_equal(c.isa, LF_CPU_ISA_GENERIC);
    /* an unknown value: an error naming the variable and the value; the CPUID level stays */
    lf__cpu_isa_choose("avx-512", LF_CPU_ISA_AVX512, &c);
    assert_int_equal(c.error, LF_CPU_ISA_ERR_UNKNOWN);
    assert_int_equal(c.isa, LF_CPU_ISA_AVX512);
    assert_int_equal(c.from_env, 0);
    assert_non_null(strstr(c.message, "LLMFORGE_CPU_ISA"));
    assert_non_null(strstr(c.message, "'avx-512'"));
    /* above the CPU: an error naming the variable, the value and what the CPU has */
    lf__cpu_isa_choose("avx512", LF_CPU_ISA_AVX2, &c);
    assert_int_equal(c.error, LF_CPU_ISA_ERR_ABOVE_CPU);
    assert_int_equal(c.isa, LF_CPU_ISA_AVX2);
    assert_non_null(strstr(c.message, "LLMFORGE_CPU_ISA"));
    assert_non_null(strstr(c.message, "'avx512'"));
    assert_non_null(strstr(c.message, "(avx2)"));
    lf__cpu_isa_choose("amx", LF_CPU_ISA_GENERIC, &c);
    assert_int_equal(c.error, LF_CPU_ISA_ERR_ABOVE_CPU);
    for (int l = LF_CPU_ISA_GENERIC; l <= LF_CPU_ISA_AMX; l++) {
        lf__cpu_isa_choose(lf__cpu_isa_name((lf__cpu_isa_level)l), LF_CPU_ISA_AMX, &c);
        assert_int_equal(c.isa, l);
    }
}

/* This process: the variable's level when set, and each choice follows it. */
static void test_this_process(void **state) {
    (void)state;
    const lf__cpu_isa_choice *c = lf__cpu_isa_here();
    const char *env = getenv("LLMFORGE_CPU_ISA");
    printf("cpu isa: %s (%s); CPUID level %s; fp32 kernel %s; bf16 kernel %s\n", lf_backend_cpu_isa(),
           lf_backend_cpu_isa_source(), lf__cpu_isa_name(c->cpu), lf_backend_cpu_fp32_kernel(),
           lf_backend_cpu_bf16_kernel());
    assert_int_equal(c->cpu, lf__cpu_isa_cpuid());
    assert_int_equal(c->error, 0);
    assert_int_equal(lf_backend_cpu_check(), LF_OK);
    if (env && *env) {
        assert_string_equal(lf_backend_cpu_isa(), env);
        assert_string_equal(lf_backend_cpu_isa_source(), "LLMFORGE_CPU_ISA");
    } else {
        assert_int_equal(c->isa, c->cpu);
        assert_string_equal(lf_backend_cpu_isa_source(), "cpuid");
    }
    const lf__cpu_isa_level isa = lf__cpu_isa();
#if defined(__x86_64__)
    lf__cpu_gemv_force(-1);
    assert_int_equal(lf__cpu_gemv_vec(), isa >= LF_CPU_ISA_AVX512 ? LF_CPU_VEC_AVX512
                                         : isa >= LF_CPU_ISA_AVX2 ? LF_CPU_VEC_AVX2
                                                                  : LF_CPU_VEC_NONE);
    assert_int_equal(lf__cpu_attention_lanes(64, 32), isa >= LF_CPU_ISA_AVX512 ? 16 : isa >= LF_CPU_ISA_AVX2 ? 8 : 0);
    /* oneDNN follows the cap (its sgemm kernel's ISA) unless its own variable says otherwise */
    const char *dl = getenv("ONEDNN_MAX_CPU_ISA");
    if (!(dl && *dl) && lf__cpu_gemm_lib() == LF_CPU_GEMM_ONEDNN) {
        const char *k = lf_backend_cpu_fp32_kernel();
        if (isa >= LF_CPU_ISA_AVX512) assert_non_null(strstr(k, "avx512_core"));
        else if (isa == LF_CPU_ISA_AVX2) assert_non_null(strstr(k, " avx2 "));
        else assert_null(strstr(k, "avx"));
        if (isa < LF_CPU_ISA_AVX512_BF16) assert_int_equal(lf__cpu_bf16_uses_onednn(), 0);
    }
#endif
    assert_int_equal(lf__cpu_attention_lanes(64, 24), 0); /* HS not whole 16-column blocks: GEMM path */
    assert_int_equal(lf__cpu_attention_lanes(129, 32), 0);
}

static void fill(float *x, size_t n, uint64_t seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (float)((double)(seed >> 40) / (double)(1 << 24) * 2.0 - 1.0);
    }
}

/* One attention forward + backward at the lanes set by lf__cpu_attention_force_lanes. */
static void run_attention(float *out, float *att, float *dqkv, const float *qkv, const float *dout, int B, int T, int C,
                          int NH, int NKV) {
    const int HS = C / NH;
    const size_t W = (size_t)C + 2 * (size_t)NKV * HS;
    float *scratch = malloc(sizeof(float) * (size_t)B * NH * T * T);
    assert_non_null(scratch);
    const lf_dropout none = {0};
    lf__cpu_attention_forward(out, att, qkv, B, T, C, NH, NKV, none);
    memset(dqkv, 0, sizeof(float) * (size_t)B * T * W);
    lf__cpu_attention_backward(dqkv, scratch, dout, qkv, att, B, T, C, NH, NKV, none);
    free(scratch);
}

static void test_attention_same_bits(void **state) {
    (void)state;
    lf__cpu_attention_force_lanes(0);
    if (lf__cpu_attention_lanes(64, 32) != 16) {
        printf("16-lane kernels not in use at this level (%s): nothing to compare\n", lf_backend_cpu_isa());
        return;
    }
    /* B, T, C, NH, NKV: shakespeare_char's layer, odd T (the padded last block),
     * HS 64 and 128 (column chunks), grouped-query heads (dk, dv summed per group) */
    static const int shapes[][5] = {{2, 64, 128, 4, 4},  {1, 37, 128, 2, 2}, {2, 21, 256, 2, 2},
                                    {1, 128, 256, 4, 2}, {2, 9, 128, 8, 1},  {1, 1, 32, 2, 2}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const int B = shapes[s][0], T = shapes[s][1], C = shapes[s][2], NH = shapes[s][3], NKV = shapes[s][4];
        const size_t W = (size_t)C + 2 * (size_t)NKV * (C / NH), nq = (size_t)B * T * W, no = (size_t)B * T * C,
                     na = (size_t)B * NH * T * T;
        float *qkv = malloc(sizeof(float) * nq), *dout = malloc(sizeof(float) * no);
        float *o[2], *a[2], *d[2];
        assert_non_null(qkv);
        assert_non_null(dout);
        fill(qkv, nq, 11 + s);
        fill(dout, no, 97 + s);
        for (int k = 0; k < 2; k++) {
            o[k] = malloc(sizeof(float) * no);
            a[k] = malloc(sizeof(float) * na);
            d[k] = malloc(sizeof(float) * nq);
            assert_true(o[k] && a[k] && d[k]);
            lf__cpu_attention_force_lanes(k ? 8 : 0);
            assert_int_equal(lf__cpu_attention_lanes(T, C / NH), k ? 8 : 16);
            run_attention(o[k], a[k], d[k], qkv, dout, B, T, C, NH, NKV);
        }
        lf__cpu_attention_force_lanes(0);
        if (memcmp(o[0], o[1], sizeof(float) * no) || memcmp(a[0], a[1], sizeof(float) * na) ||
            memcmp(d[0], d[1], sizeof(float) * nq))
            fail_msg("attention B %d T %d C %d NH %d NKV %d: 8 and 16 lanes differ", B, T, C, NH, NKV);
        for (int k = 0; k < 2; k++) {
            free(o[k]);
            free(a[k]);
            free(d[k]);
        }
        free(qkv);
        free(dout);
    }
}

/* GELU at the AVX-512 build and at the baseline (lf__cpu_gelu_force_baseline). */
static void test_gelu_same_bits(void **state) {
    (void)state;
    if (lf__cpu_isa() < LF_CPU_ISA_AVX512) {
        printf("AVX-512 GELU not in use at this level (%s): nothing to compare\n", lf_backend_cpu_isa());
        return;
    }
    static const size_t lens[] = {1, 15, 17, 1000, 70001}; /* 70001: above LF_CPU_PAR_MIN, threads split it */
    static const float edges[] = {0.0f,    -0.0f, 1e-30f, -1e-30f,  30.0f,     -30.0f, 100.0f,
                                  -100.0f, 1e30f, -1e30f, INFINITY, -INFINITY, NAN};
    for (size_t s = 0; s < sizeof lens / sizeof *lens; s++) {
        const size_t n = lens[s];
        float *x = malloc(sizeof(float) * n), *dout = malloc(sizeof(float) * n), *o[2], *d[2];
        assert_true(x && dout);
        fill(x, n, 5 + s);
        fill(dout, n, 50 + s);
        for (size_t i = 0; i < n; i++) x[i] *= 6.0f; /* past the tanh's knees */
        for (size_t i = 0; i < n && i < sizeof edges / sizeof *edges; i++) x[i * 7 % n] = edges[i];
        for (int k = 0; k < 2; k++) {
            o[k] = malloc(sizeof(float) * n);
            d[k] = malloc(sizeof(float) * n);
            assert_true(o[k] && d[k]);
            lf__cpu_gelu_force_baseline(k);
            lf__cpu_gelu_forward(o[k], x, n);
            lf__cpu_gelu_backward(d[k], x, dout, n);
        }
        lf__cpu_gelu_force_baseline(0);
        if (memcmp(o[0], o[1], sizeof(float) * n) || memcmp(d[0], d[1], sizeof(float) * n))
            fail_msg("gelu n %zu: the AVX-512 build and the baseline differ", n);
        for (int k = 0; k < 2; k++) {
            free(o[k]);
            free(d[k]);
        }
        free(x);
        free(dout);
    }
}

static void test_baseline(void **state) {
    (void)state;
    char msg[320];
    assert_int_equal(lf_cpu_baseline_check(msg, sizeof msg), LF_OK); /* this process runs, so it passes */
    assert_string_equal(msg, "");
    printf("baseline %s: required %#llx, this CPU %#llx\n", lf_cpu_baseline_name(), lf__cpu_baseline_required,
           lf__cpu_features_here());
    assert_int_equal(lf__cpu_baseline_required & ~lf__cpu_features_here(), 0);
    /* a made-up CPU without AVX2 and FMA (bits 6, 7) under an AVX2 baseline */
    const unsigned long long req = (1ULL << 5) | (1ULL << 6) | (1ULL << 7), have = 1ULL << 5;
    assert_int_equal(lf__cpu_baseline_compare(req, have, "x86-64-v3", msg, sizeof msg), LF_ERR_UNSUPPORTED);
    assert_non_null(strstr(msg, "'x86-64-v3'"));
    assert_non_null(strstr(msg, " avx2"));
    assert_non_null(strstr(msg, " fma"));
    assert_null(strstr(msg, " avx "));
    assert_int_equal(lf__cpu_baseline_compare(req, req | 1, "x86-64-v3", msg, sizeof msg), LF_OK);
    /* a short buffer truncates, never overflows */
    char small[8];
    assert_int_equal(lf__cpu_baseline_compare(req, 0, "native", small, sizeof small), LF_ERR_UNSUPPORTED);
    assert_int_equal(strlen(small), sizeof small - 1);
}

/* CTest runs this with LLMFORGE_CPU_ISA set to a bad value. */
static void test_env_bad(void **state) {
    (void)state;
    const char *env = getenv("LLMFORGE_CPU_ISA");
    assert_non_null(env);
    assert_int_equal(lf_backend_cpu_check(), LF_ERR_CONFIG);
    printf("refused: %s\n", lf_last_error());
    assert_non_null(strstr(lf_last_error(), "LLMFORGE_CPU_ISA"));
    char quoted[80];
    snprintf(quoted, sizeof quoted, "'%s'", env);
    assert_non_null(strstr(lf_last_error(), quoted));
    /* meanwhile the CPUID level stays in use */
    assert_int_equal(lf__cpu_isa(), lf__cpu_isa_cpuid());
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "env-bad")) {
        const struct CMUnitTest bad[] = {cmocka_unit_test(test_env_bad)};
        return cmocka_run_group_tests(bad, NULL, NULL);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_choose),
        cmocka_unit_test(test_this_process),
        cmocka_unit_test(test_attention_same_bits),
        cmocka_unit_test(test_gelu_same_bits),
        cmocka_unit_test(test_baseline),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
