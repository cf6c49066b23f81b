/*
 * The cpu-fenced backend (src/backend/cpu/cpu_fenced.c): backend memory the
 * host cannot touch outside a backend call.
 *  - The fence is real: a host read of fenced memory outside an op kills
 *    the process with SIGSEGV (in a forked child), one inside to_host works.
 *  - Training steps, an eval forward and KV-cache generation run on it for
 *    both architectures, and give exactly what "cpu" gives with one replica
 *    (cpu-fenced runs one replica), both on one thread: losses, gradients,
 *    parameters after AdamW, logits and generated tokens, bit for bit. One
 *    thread on both sides because the fp32 products are not bit-identical
 *    across thread counts (oneDNN and OpenBLAS split C by the thread count;
 *    docs/backend.md "Thread count").
 */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include "test_util.h"
#include "backend/backend_impl.h"
#include "llmforge/infer.h"
#include "llmforge/model.h"
#include "llmforge/train.h"
#include "llmforge/backend_cpu.h"

static void test_host_access_faults(void **state) {
    (void)state;
    lf_backend *f = lf_backend_get("cpu-fenced");
    assert_non_null(f);
    assert_int_equal(f->ops->host_memory, 0);
    float *x = f->ops->alloc(f, 1000 * sizeof(float));
    assert_non_null(x);
    float host[4] = {1, 2, 3, 4}, back[4] = {0};
    f->ops->to_device(f, x, host, sizeof host);
    f->ops->scale(f, x, 4, 2.0f);
    f->ops->to_host(f, back, x, sizeof back);
    assert_true(back[0] == 2 && back[3] == 8);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL); /* cmocka's handler would catch it */
        volatile float v = x[1];  /* outside any backend call */
        (void)v;
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV);
    f->ops->free(f, x);
}

typedef struct run {
    double loss[3];
    float *params, *logits;
    uint32_t *gen;
    size_t n, nl, ngen;
} run;

static run train_and_generate(lf_arch arch, lf_backend *be) {
    run r = {0};
    lf_model_config c = {.arch = arch, .n_layer = 2, .n_head = 4, .n_embd = 32, .block_size = 16, .vocab_size = 41,
                         .bias = arch == LF_ARCH_GPT2, .tie_embeddings = 1, .dropout = 0.1f};
    if (arch == LF_ARCH_LLAMA) {
        c.n_kv_head = 2;
        c.tie_embeddings = 0;
    }
    lf_model *m = NULL;
    LF_ASSERT_OK(lf_model_create(&m, &c, be));
    LF_ASSERT_OK(lf_model_init_weights(m, 5));
    const int B = 3, T = 16, N = B * T;
    r.n = lf_model_num_params(m);
    float *m1 = be->ops->alloc(be, r.n * sizeof(float)), *m2 = be->ops->alloc(be, r.n * sizeof(float));
    be->ops->zero(be, m1, r.n);
    be->ops->zero(be, m2, r.n);
    lf_train_config tc = lf_train_config_default();
    int32_t in[48], tg[48];
    for (int s = 0; s < 3; s++) {
        for (int i = 0; i < N; i++) {
            in[i] = (int32_t)(lf_rng_u64(9, LF_RNG_TEST, (uint64_t)(s * 2 * N + i)) % 41);
            tg[i] = i % 7 == 3 ? -1 : (int32_t)(lf_rng_u64(9, LF_RNG_TEST, (uint64_t)(s * 2 * N + N + i)) % 41);
        }
        lf_model_zero_grad(m);
        lf_forward_opts fo = {.dloss = 1.0f / N, .train = 1, .seed = 3, .key = (uint64_t)s};
        long cnt;
        LF_ASSERT_OK(lf_model_forward(m, in, tg, B, T, &fo, &r.loss[s], &cnt));
        LF_ASSERT_OK(lf_model_backward(m));
        double norm;
        LF_ASSERT_OK(lf_adamw_step(m, be, m1, m2, s + 1, 1e-3f, &tc, &norm));
    }
    r.params = malloc(r.n * sizeof(float));
    be->ops->to_host(be, r.params, lf_model_params(m), r.n * sizeof(float));
    lf_session *ses = NULL;
    LF_ASSERT_OK(lf_session_create(&ses, m, B, T, 0));
    LF_ASSERT_OK(lf_session_forward(ses, in, B, T, 0));
    r.nl = (size_t)N * 41;
    r.logits = malloc(r.nl * sizeof(float));
    LF_ASSERT_OK(lf_session_copy_logits(ses, 0, (size_t)N, r.logits));
    lf_session_free(ses);
    uint32_t prompt[3] = {1, 2, 3};
    lf_sample_opts so = {.max_new_tokens = 24, .temperature = 0.8f, .top_k = 10, .seed = 4};
    LF_ASSERT_OK(lf_generate(m, prompt, 3, &so, NULL, NULL, &r.gen, &r.ngen));
    be->ops->free(be, m1);
    be->ops->free(be, m2);
    lf_model_free(m);
    return r;
}

static void same_as_cpu(lf_arch arch) {
    lf_backend_cpu_set_threads(1); /* "cpu" with one replica, as cpu-fenced runs */
    run a = train_and_generate(arch, lf_backend_get("cpu"));
    /* the same thread count: the libraries' threaded products differ in the last bit across thread counts */
    run b = train_and_generate(arch, lf_backend_get("cpu-fenced"));
    printf("%s: losses %.9g %.9g %.9g (cpu) / %.9g %.9g %.9g (cpu-fenced)\n", lf_arch_name(arch), a.loss[0], a.loss[1],
           a.loss[2], b.loss[0], b.loss[1], b.loss[2]);
    assert_memory_equal(a.loss, b.loss, sizeof a.loss);
    assert_memory_equal(a.params, b.params, a.n * sizeof(float));
    assert_memory_equal(a.logits, b.logits, a.nl * sizeof(float));
    assert_int_equal(a.ngen, b.ngen);
    assert_memory_equal(a.gen, b.gen, a.ngen * sizeof(uint32_t));
    free(a.params);
    free(b.params);
    free(a.logits);
    free(b.logits);
    lf_free(a.gen);
    lf_free(b.gen);
}

static void test_gpt2_same_as_cpu(void **state) {
    (void)state;
    same_as_cpu(LF_ARCH_GPT2);
}
static void test_llama_same_as_cpu(void **state) {
    (void)state;
    same_as_cpu(LF_ARCH_LLAMA);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_host_access_faults),
        cmocka_unit_test(test_gpt2_same_as_cpu),
        cmocka_unit_test(test_llama_same_as_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
