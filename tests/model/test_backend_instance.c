/*
 * Backend instances and their sticky status (backend_impl.h, backend.c):
 *  - lf_backend_open gives an instance of its own; an unknown name fails
 *    with the names compiled in;
 *  - an op given what it must refuse (a KV-cache write past the cache) does
 *    nothing and records LF_ERR_INVALID_ARG naming the op; lf_backend_sync
 *    reports it, and keeps reporting it (sticky); other instances are not
 *    touched;
 *  - a kernel library failure deep inside an op (an fp32 product that
 *    "oneDNN refused", injected) is no silent fallback: the result is still
 *    computed, but the instance is failed with LF_ERR_DEVICE naming the op;
 *  - a model forward on a failed instance returns the failure;
 *  - the activation plan asks the backend how much attention saves and
 *    needs as scratch (attention_saved / attention_scratch);
 *  - cpu-fenced's regions belong to its instance: an op of one fenced
 *    instance does not open the memory of another (SIGSEGV in a child).
 */
#include <math.h>
#include <signal.h>
#include <sys/wait.h>
#include "test_util.h"
#include "backend/backend_impl.h"
#include "backend/cpu/cpu_internal.h"
#include "llmforge/backend.h"
#include "llmforge/model.h"

/* The plain RoPE table the model passes the rope ops (src/model/rope.c's default). */
static const float *rope_tab(int HS, float theta) {
    static float inv[1024];
    for (int i = 0; i < HS / 2 && i < 1024; i++) inv[i] = 1.0f / powf(theta, (float)(2 * i) / (float)HS);
    return inv;
}

static void test_open_unknown(void **state) {
    (void)state;
    lf_backend *be = (lf_backend *)1;
    assert_int_equal(lf_backend_open("cpu-fp8", &be), LF_ERR_NOT_FOUND);
    assert_null(be);
    LF_ASSERT_ERR_CONTAINS("cpu-fp8");
    LF_ASSERT_ERR_CONTAINS("cpu-fenced");
    LF_ASSERT_OK(lf_backend_open(NULL, &be));
    assert_string_equal(lf_backend_name(be), "cpu");
    assert_ptr_not_equal(be, lf_backend_get("cpu")); /* its own, not the shared one */
    LF_ASSERT_OK(lf_backend_sync(be));
    lf_backend_close(be);
    lf_backend_close(lf_backend_get("cpu")); /* the shared instance stays open */
    LF_ASSERT_OK(lf_backend_sync(lf_backend_get("cpu")));
}

/* bf16.enabled's backend for the one LLMFORGE_BACKEND names; "cuda-bf16"
 * without the CUDA library linked (this test links none) is the same
 * "no CUDA backend" as "cuda". */
static void test_precision_name(void **state) {
    (void)state;
    assert_string_equal(lf_backend_precision_name("cpu", 1), "cpu-bf16");
    assert_string_equal(lf_backend_precision_name("cuda", 1), "cuda-bf16");
    assert_string_equal(lf_backend_precision_name(NULL, 1), "cpu-bf16");
    assert_string_equal(lf_backend_precision_name(NULL, 0), "cpu");
    assert_string_equal(lf_backend_precision_name("cpu", 0), "cpu");
    assert_string_equal(lf_backend_precision_name("cuda", 0), "cuda");
    assert_string_equal(lf_backend_precision_name("cpu-fenced", 1), "cpu-fenced"); /* no bf16 variant: fp32 */
    assert_string_equal(lf_backend_precision_name("cpu-bf16", 1), "cpu-bf16");
    lf_backend *be = (lf_backend *)1;
    assert_int_equal(lf_backend_open("cuda-bf16", &be), LF_ERR_NOT_FOUND);
    assert_null(be);
    LF_ASSERT_ERR_CONTAINS("backend 'cuda-bf16': this build has no CUDA backend");
}

static void test_precondition_is_sticky(void **state) {
    (void)state;
    lf_backend *be;
    LF_ASSERT_OK(lf_backend_open("cpu", &be));
    const int B = 1, NH = 2, NKV = 1, HS = 4, Tmax = 3, W = (NH + 2 * NKV) * HS;
    float kc[12], vc[12], qkv[2 * 16];
    for (int i = 0; i < 12; i++) kc[i] = vc[i] = -7.0f;
    for (int i = 0; i < 2 * W; i++) qkv[i] = (float)i;
    /* two rows at position 2 of a 3-position cache: one too many */
    be->ops->kv_append(be, kc, vc, qkv, B, 2, NH, NKV, HS, 2, Tmax);
    for (int i = 0; i < 12; i++) assert_true(kc[i] == -7.0f && vc[i] == -7.0f); /* nothing written */
    assert_int_equal(lf_backend_status(be), LF_ERR_INVALID_ARG);
    assert_int_equal(lf_backend_sync(be), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS("backend 'cpu': kv_append");
    LF_ASSERT_ERR_CONTAINS("position 2 of a cache of 3");
    /* a later good op does not clear it, nor does a second failure replace it */
    be->ops->kv_append(be, kc, vc, qkv, B, 1, NH, NKV, HS, 0, Tmax);
    assert_true(kc[0] == qkv[NH * HS]); /* that op ran */
    be->ops->rope_forward(be, qkv, 1, 1, NH, NKV, 3, 0, rope_tab(3, 10000.0f), 1.0f);
    assert_int_equal(lf_backend_sync(be), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS("kv_append");
    /* the shared instance is another instance */
    LF_ASSERT_OK(lf_backend_sync(lf_backend_get("cpu")));
    lf_backend_close(be);
    /* rope on an odd head size, on a fresh instance */
    LF_ASSERT_OK(lf_backend_open("cpu", &be));
    be->ops->rope_forward(be, qkv, 1, 1, NH, NKV, 3, 0, rope_tab(3, 10000.0f), 1.0f);
    assert_int_equal(lf_backend_sync(be), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS("rope_forward: head size 3");
    lf_backend_close(be);
}

static void test_library_failure_reported(void **state) {
    (void)state;
    lf_backend *be;
    LF_ASSERT_OK(lf_backend_open("cpu", &be));
    const int N = 8, C = 5, OC = 4; /* more rows than the matrix-vector path takes: the GEMM */
    float x[40], w[20], y[32];
    for (int i = 0; i < 40; i++) x[i] = 0.25f * (float)(i % 7) - 0.5f;
    for (int i = 0; i < 20; i++) w[i] = 0.125f * (float)(i % 5) - 0.25f;
    const long before = lf__cpu_gemm_failures();
    lf__cpu_gemm_inject_failures(1);
    be->ops->matmul_forward(be, y, x, LF_DT_F32, w, NULL, N, C, OC, LF_W_IN_OUT);
    lf__cpu_gemm_inject_failures(0);
    assert_int_equal(lf__cpu_gemm_failures(), before + 1);
    /* computed anyway (exactly: these products are short sums of dyadic numbers) */
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double ref = 0;
            for (int c = 0; c < C; c++) ref += (double)x[n * C + c] * (double)w[c * OC + o];
            assert_true(y[n * OC + o] == (float)ref);
        }
    assert_int_equal(lf_backend_sync(be), LF_ERR_DEVICE);
    LF_ASSERT_ERR_CONTAINS("matmul_forward");
    LF_ASSERT_ERR_CONTAINS("injected");
    lf_backend_close(be);
}

static void test_model_forward_reports(void **state) {
    (void)state;
    lf_backend *be;
    LF_ASSERT_OK(lf_backend_open("cpu", &be));
    lf_model_config c = {.n_layer = 1, .n_head = 2, .n_embd = 16, .block_size = 8, .vocab_size = 13, .bias = 1};
    /* 8 rows per forward: the products go to the GEMM (not the matrix-vector path of <= 4 rows) */
    lf_model *m;
    LF_ASSERT_OK(lf_model_create(&m, &c, be));
    LF_ASSERT_OK(lf_model_init_weights(m, 1));
    int32_t in[8], tg[8];
    for (int i = 0; i < 8; i++) {
        in[i] = i % 13;
        tg[i] = (i + 1) % 13;
    }
    lf_forward_opts o = {.dloss = 1.0f / 8};
    double loss;
    long nv;
    LF_ASSERT_OK(lf_model_forward(m, in, tg, 1, 8, &o, &loss, &nv));
    LF_ASSERT_OK(lf_model_backward(m));
    lf__cpu_gemm_inject_failures(1);
    assert_int_equal(lf_model_forward(m, in, tg, 1, 8, &o, &loss, &nv), LF_ERR_DEVICE);
    lf__cpu_gemm_inject_failures(0);
    LF_ASSERT_ERR_CONTAINS("backend 'cpu'");
    LF_ASSERT_ERR_CONTAINS("injected");
    /* no backward after a failed forward, and the instance stays failed */
    assert_int_equal(lf_model_backward(m), LF_ERR_INVALID_ARG);
    assert_int_equal(lf_model_forward(m, in, tg, 1, 8, &o, &loss, &nv), LF_ERR_DEVICE);
    lf_model_free(m);
    lf_backend_close(be);
}

/* The planner asks the backend what attention saves: a table whose
 * attention_saved / attention_scratch report more (as a fused attention
 * would report less) moves the plan by exactly that, per layer and once. */
static size_t more_saved(int B, int NH, int T) { return lf_backend_get("cpu")->ops->attention_saved(B, NH, T) + 64; }
static size_t more_scratch(int B, int NH, int T) {
    return lf_backend_get("cpu")->ops->attention_scratch(B, NH, T) + 32;
}

static void test_plan_asks_attention(void **state) {
    (void)state;
    lf_backend_ops t = *lf_backend_get("cpu")->ops;
    t.attention_saved = more_saved;
    t.attention_scratch = more_scratch;
    lf_backend *be;
    LF_ASSERT_OK(lf__backend_open_ops(&t, &be));
    for (int a = 0; a < 2; a++) {
        lf_model_config c = {.arch = a ? LF_ARCH_LLAMA : LF_ARCH_GPT2, .n_layer = 3, .n_head = 2, .n_embd = 16,
                             .block_size = 8, .vocab_size = 13, .bias = !a};
        lf_model *m0, *m1;
        LF_ASSERT_OK(lf_model_create(&m0, &c, lf_backend_get("cpu")));
        LF_ASSERT_OK(lf_model_create(&m1, &c, be));
        LF_ASSERT_OK(lf_model_set_recompute(m0, LF_RECOMPUTE_NONE));
        LF_ASSERT_OK(lf_model_set_recompute(m1, LF_RECOMPUTE_NONE));
        size_t b0, b1;
        LF_ASSERT_OK(lf_model_plan(m0, 1, 8, &b0)); /* one row: one replica on either */
        LF_ASSERT_OK(lf_model_plan(m1, 1, 8, &b1));
        lf_act_bytes x0, x1;
        lf_model_activation_bytes(m0, &x0);
        lf_model_activation_bytes(m1, &x1);
        assert_int_equal(x1.saved - x0.saved, 3 * 64 * sizeof(float));
        assert_int_equal(x1.work - x0.work, 32 * sizeof(float));
        assert_int_equal(b1 - b0, (3 * 64 + 32) * sizeof(float));
        /* and the public plan, which sizes as the CPU does, equals the cpu model's */
        lf_act_bytes pub;
        LF_ASSERT_OK(lf_model_plan_bytes(&c, 1, 8, LF_RECOMPUTE_NONE, LF_ACT_FP32, 1, &pub));
        assert_int_equal(pub.total, b0);
        lf_model_free(m0);
        lf_model_free(m1);
    }
    lf_backend_close(be);
}

static void test_fenced_instances_apart(void **state) {
    (void)state;
    lf_backend *a, *b;
    LF_ASSERT_OK(lf_backend_open("cpu-fenced", &a));
    LF_ASSERT_OK(lf_backend_open("cpu-fenced", &b));
    float *xa = a->ops->alloc(a, 64 * sizeof(float)), *xb = b->ops->alloc(b, 64 * sizeof(float));
    assert_non_null(xa);
    assert_non_null(xb);
    b->ops->zero(b, xb, 64); /* its own memory: fine */
    a->ops->zero(a, xa, 64);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL); /* cmocka's handler would catch it */
        b->ops->zero(b, xa, 64);  /* b's op does not open a's regions */
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV);
    a->ops->free(a, xa);
    b->ops->free(b, xb);
    LF_ASSERT_OK(lf_backend_sync(a));
    LF_ASSERT_OK(lf_backend_sync(b));
    lf_backend_close(a);
    lf_backend_close(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_unknown),
        cmocka_unit_test(test_precision_name),
        cmocka_unit_test(test_precondition_is_sticky),
        cmocka_unit_test(test_library_failure_reported),
        cmocka_unit_test(test_model_forward_reports),
        cmocka_unit_test(test_plan_asks_attention),
        cmocka_unit_test(test_fenced_instances_apart),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
