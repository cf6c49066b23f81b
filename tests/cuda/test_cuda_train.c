/*
 * Training on the "cuda" backend against "cpu": through the CUDA-on-CPU shim
 * (cuda.test_cuda_train, every CI run) and, with LF_CUDA, on a real GPU
 * (gpu.test_cuda_train: SKIPPED where none answers). GPT-2 and Llama (GQA,
 * untied head) at a tiny shape with dropout 0.1, ten AdamW steps each.
 *
 * Checked, with the error model behind each tolerance:
 *  - the first forward's loss: every op of "cuda" equals the CPU's to float
 *    rounding of a different summation order (each dot product of length K
 *    within ~2 K u sum|a_i b_i|, u = 2^-24; K <= 128 here, the logits are
 *    O(1)), so the mean loss agrees to 1e-5 relative;
 *  - the first backward's gradients: the same model through the chain rule
 *    with a few more reductions: every component within 1e-4 of the
 *    largest |gradient| (relative to the largest, since components near
 *    zero carry only absolute error); dropout masks equal (the same
 *    counter-based RNG) or this fails by O(1);
 *  - ten steps' losses within 1e-3 relative: AdamW divides by sqrt(v), so a
 *    near-zero gradient component whose sign differs moves its parameter by
 *    up to 2 lr per step, but such components barely move the loss (its
 *    gradient is ~0 there): the loss path stays close while a wrong op (a
 *    transposed product, a wrong mask) moves it by far more than 1e-3;
 *  - determinism: a second "cuda" run gives the same bits (losses and
 *    parameters), as issue 15 asks of the default mode;
 *  - sessions (the eval / generation path, its own plan) on the initial
 *    weights: the full forward's logits within 1e-5 of the largest |logit|
 *    of cpu's (forward only, as the first loss), and on "cuda" the cached
 *    path (a prefill of T-1 tokens, then one decoded token) gives the full
 *    forward's last row to the same bound.
 *
 * Mixed precision, the same ten steps:
 *  - bf16: "cuda-bf16" against "cpu-bf16" (bf16 matmul operands, fp32
 *    accumulation, bf16 activation storage on both; on a CPU without bf16
 *    instructions cpu-bf16's emulation of them, since its own path there
 *    rounds only the layer input). Both round the same
 *    kind of operands with round-to-nearest-even, and a bf16 product is
 *    exact in fp32, so a product differs only by fp32 summation order -
 *    except that its operands come from the rest of the network, where
 *    the two backends differ by fp32 rounding (the fp32 bounds above): an
 *    operand within a few fp32 ulps of a bf16 rounding boundary rounds to
 *    the neighbouring bf16 value on one backend, a change of up to 2^-8 of
 *    that element (a fraction ~2^-16 per ulp of the elements do). Those
 *    flips average out in the loss (one element moves a K-term dot product
 *    by 2^-8 / K of its scale at most, and few elements flip), so the first
 *    forward and backward get ten times fp32's bounds: the first loss 1e-4
 *    relative, the first gradients 1e-3 of the largest; the ten losses
 *    keep fp32's 1e-3 (the flips average out over the loss, and AdamW's
 *    sign flips of near-zero components barely move it, as above). bf16
 *    itself moves the first gradients by ~5e-4 of the largest from fp32's
 *    (measured), so a product left in fp32 or a wrong operand shows. bf16 must show: cuda-bf16's first gradients are not
 *    cuda's fp32 ones. Reruns give the same bits. Sessions (full forward
 *    and the cached prefill + decode) within 1e-4 of the largest |logit|.
 *  - fp16 (fp32 compute, gradients rounded to fp16 by fp16_round, DeepSpeed's
 *    dynamic loss scaler as the trainer runs it: loss scaled from 2^20, an
 *    overflowing step skipped and the scale halved (hysteresis 1: the first
 *    steps overflow, 2^20 |g| > 65504), else the gradients
 *    divided by the scale before AdamW): "cuda" against "cpu". The rounding
 *    is the same function on both (test_cuda_pointwise checks it bit for
 *    bit), applied to gradients that differ by the fp32 model above: a
 *    component within that difference of an fp16 rounding boundary lands
 *    one fp16 step (2^-11 relative) apart. So: the same steps overflow and
 *    are skipped on both (the gradients' largest scaled component is far
 *    from fp16's limit except at the skipped scales); first applied
 *    gradients within 1e-4 of the largest plus 2^-10 of each component;
 *    losses within 1e-3 relative as in fp32. Reruns give the same bits.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "../test_util.h"
#include "backend/backend_impl.h"
#include "backend/cpu/cpu_internal.h" /* lf__cpu_bf16_force_emulation */
#include "llmforge/infer.h"
#include "llmforge/loss_scaler.h"
#include "llmforge/model.h"
#include "llmforge/train.h"
#include "llmforge/backend_cuda.h"
#include "cuda_test_util.h"

enum { STEPS = 10, B = 3, T = 16, N = B * T, VOCAB = 41 };

typedef struct run {
    double loss[STEPS];
    float *grad0, *params;
    size_t n;
} run;

static lf_model_config tiny(lf_arch arch) {
    lf_model_config c = {.arch = arch, .n_layer = 2, .n_head = 4, .n_embd = 32, .block_size = T,
                         .vocab_size = VOCAB, .bias = arch == LF_ARCH_GPT2, .tie_embeddings = 1, .dropout = 0.1f};
    if (arch == LF_ARCH_LLAMA) {
        c.n_kv_head = 2;
        c.tie_embeddings = 0;
    }
    return c;
}

static void batch(int s, int32_t *in, int32_t *tg) {
    for (int i = 0; i < N; i++) {
        in[i] = (int32_t)(lf_rng_u64(9, LF_RNG_TEST, (uint64_t)(s * 2 * N + i)) % VOCAB);
        tg[i] = i % 7 == 3 ? -1 : (int32_t)(lf_rng_u64(9, LF_RNG_TEST, (uint64_t)(s * 2 * N + N + i)) % VOCAB);
    }
}

/* fp16: the trainer's loss scaler (scaled dloss, fp16_round of the
 * gradients, skip on overflow, unscale); skipped[s] says which steps were. */
static run train_fp(lf_arch arch, lf_backend *be, int fp16, int *skipped) {
    run r = {0};
    lf_model_config c = tiny(arch);
    lf_model *m = NULL;
    LF_ASSERT_OK(lf_model_create(&m, &c, be));
    LF_ASSERT_OK(lf_model_init_weights(m, 5));
    r.n = lf_model_num_params(m);
    float *m1 = be->ops->alloc(be, r.n * sizeof(float)), *m2 = be->ops->alloc(be, r.n * sizeof(float));
    assert_non_null(m1);
    assert_non_null(m2);
    be->ops->zero(be, m1, r.n);
    be->ops->zero(be, m2, r.n);
    lf_train_config tc = lf_train_config_default();
    int32_t in[N], tg[N];
    r.grad0 = malloc(r.n * sizeof(float));
    lf_loss_scaler ls;
    lf_loss_scaler_init(&ls, 0.0, 20, 1000, 1, 0, 1.0);
    long t = 0;
    int have_grad0 = 0;
    for (int s = 0; s < STEPS; s++) {
        batch(s, in, tg);
        lf_model_zero_grad(m);
        const double scale = fp16 ? ls.scale : 1.0;
        lf_forward_opts fo = {.dloss = (float)(scale / N), .train = 1, .seed = 3, .key = (uint64_t)s};
        long cnt = 0;
        double sum = 0;
        LF_ASSERT_OK(lf_model_forward(m, in, tg, B, T, &fo, &sum, &cnt));
        r.loss[s] = sum / (double)cnt;
        LF_ASSERT_OK(lf_model_backward(m));
        if (fp16) {
            skipped[s] = be->ops->fp16_round(be, lf_model_grads(m), r.n);
            LF_ASSERT_OK(lf_loss_scaler_update(&ls, skipped[s]));
            if (skipped[s]) continue;
            be->ops->scale(be, lf_model_grads(m), r.n, (float)(1.0 / scale));
        }
        if (!have_grad0) be->ops->to_host(be, r.grad0, lf_model_grads(m), r.n * sizeof(float));
        have_grad0 = 1;
        double norm;
        LF_ASSERT_OK(lf_adamw_step(m, be, m1, m2, ++t, 1e-3f, &tc, &norm));
    }
    r.params = malloc(r.n * sizeof(float));
    be->ops->to_host(be, r.params, lf_model_params(m), r.n * sizeof(float));
    LF_ASSERT_OK(lf_backend_sync(be));
    be->ops->free(be, m1);
    be->ops->free(be, m2);
    lf_model_free(m);
    return r;
}

static run train(lf_arch arch, lf_backend *be) { return train_fp(arch, be, 0, NULL); }

/* Logits of a session forward over batch 0 (row 0) into out (T*VOCAB, the
 * vocabulary padded rows cut), and on the cached path the decode of the last
 * position into last (VOCAB). */
static void session_logits(lf_arch arch, lf_backend *be, float *out, float *last) {
    lf_model_config c = tiny(arch);
    LF_ASSERT_OK(lf_model_config_resolve(&c));
    lf_model *m = NULL;
    LF_ASSERT_OK(lf_model_create(&m, &c, be));
    LF_ASSERT_OK(lf_model_init_weights(m, 5));
    int32_t in[N], tg[N];
    batch(0, in, tg);
    lf_session *s = NULL;
    LF_ASSERT_OK(lf_session_create(&s, m, 1, T, 1));
    LF_ASSERT_OK(lf_session_forward(s, in, 1, T, 0));
    const size_t vp = (size_t)(c.padded_vocab_size ? c.padded_vocab_size : c.vocab_size);
    float *rows = malloc((size_t)T * vp * sizeof(float));
    LF_ASSERT_OK(lf_session_copy_logits(s, 0, T, rows));
    for (int t = 0; t < T; t++) memcpy(out + (size_t)t * VOCAB, rows + (size_t)t * vp, VOCAB * sizeof(float));
    lf_session_reset(s);
    LF_ASSERT_OK(lf_session_forward(s, in, 1, T - 1, 1));
    LF_ASSERT_OK(lf_session_forward(s, in + T - 1, 1, 1, 1));
    LF_ASSERT_OK(lf_session_copy_logits(s, 0, 1, rows));
    memcpy(last, rows, VOCAB * sizeof(float));
    free(rows);
    lf_session_free(s);
    lf_model_free(m);
}

static float max_abs(const float *x, size_t n) {
    float m = 0;
    for (size_t i = 0; i < n; i++) m = fmaxf(m, fabsf(x[i]));
    return m;
}

static float max_diff(const float *a, const float *b, size_t n) {
    float m = 0;
    for (size_t i = 0; i < n; i++) m = fmaxf(m, fabsf(a[i] - b[i]));
    return m;
}

static void run_free(run *r) {
    free(r->grad0);
    free(r->params);
}

static void same_as_cpu(lf_arch arch) {
    if (!have_device()) {
        print_message("SKIPPED: no CUDA device\n");
        skip();
    }
    assert_int_equal(lf_backend_cuda_register(), LF_OK);
    lf_backend *cuda = NULL;
    LF_ASSERT_OK(lf_backend_open("cuda", &cuda));
    run a = train(arch, lf_backend_get("cpu"));
    run b = train(arch, cuda);
    run b2 = train(arch, cuda);
    printf("%s: loss step 0 %.9g (cpu) %.9g (cuda); step %d %.9g / %.9g\n", lf_arch_name(arch), a.loss[0], b.loss[0],
           STEPS - 1, a.loss[STEPS - 1], b.loss[STEPS - 1]);
    assert_true(fabs(a.loss[0] - b.loss[0]) <= 1e-5 * fabs(a.loss[0]));
    float gmax = 0, gdiff = 0;
    for (size_t i = 0; i < a.n; i++) {
        gmax = fmaxf(gmax, fabsf(a.grad0[i]));
        gdiff = fmaxf(gdiff, fabsf(a.grad0[i] - b.grad0[i]));
    }
    printf("%s: first gradients: max |cpu - cuda| %.3g of max |g| %.3g\n", lf_arch_name(arch), gdiff, gmax);
    assert_true(gmax > 0);
    assert_true(gdiff <= 1e-4f * gmax);
    for (int s = 0; s < STEPS; s++) assert_true(fabs(a.loss[s] - b.loss[s]) <= 1e-3 * fabs(a.loss[s]));
    /* the steps moved the model (the comparison is not of two flat lines) */
    assert_true(fabs(a.loss[STEPS - 1] - a.loss[0]) > 1e-3 * fabs(a.loss[0]));
    assert_memory_equal(b.loss, b2.loss, sizeof b.loss);
    assert_memory_equal(b.params, b2.params, b.n * sizeof(float));
    run_free(&a);
    run_free(&b);
    run_free(&b2);

    float la[T * VOCAB], lb[T * VOCAB], da[VOCAB], db[VOCAB];
    session_logits(arch, lf_backend_get("cpu"), la, da);
    session_logits(arch, cuda, lb, db);
    const float lmax = max_abs(la, T * VOCAB);
    printf("%s: session logits: max |cpu - cuda| %.3g, cached vs full (cuda) %.3g, of max |logit| %.3g\n",
           lf_arch_name(arch), max_diff(la, lb, T * VOCAB), max_diff(db, lb + (T - 1) * VOCAB, VOCAB), lmax);
    assert_true(lmax > 0);
    assert_true(max_diff(la, lb, T * VOCAB) <= 1e-5f * lmax);
    assert_true(max_diff(db, lb + (T - 1) * VOCAB, VOCAB) <= 1e-5f * lmax);
    lf_backend_close(cuda);
}

static float grad_max(const run *a) { return max_abs(a->grad0, a->n); }

static void bf16_same_as_cpu_bf16(lf_arch arch) {
    if (!have_device()) {
        print_message("SKIPPED: no CUDA device\n");
        skip();
    }
    assert_int_equal(lf_backend_cuda_register(), LF_OK);
    lf_backend *cuda = NULL, *cuda16 = NULL, *cpu16 = NULL;
    LF_ASSERT_OK(lf_backend_open(lf_backend_precision_name("cuda", 1), &cuda16));
    assert_string_equal(lf_backend_name(cuda16), "cuda-bf16");
    LF_ASSERT_OK(lf_backend_open("cuda", &cuda));
    LF_ASSERT_OK(lf_backend_open("cpu-bf16", &cpu16));
    /* cpu-bf16's bf16 numbers on any CPU: where it has no bf16 instructions,
     * its products are fp32 ones on the bf16-stored input (closer to fp32),
     * so the comparison takes the emulation of the instructions (every
     * operand rounded, as cuBLASLt's bf16 products do) */
    const int emulate = !lf__cpu_bf16_uses_onednn();
    if (emulate) lf__cpu_bf16_force_emulation(1);
    run a = train(arch, cpu16), b = train(arch, cuda16), b2 = train(arch, cuda16), f = train(arch, cuda);
    const float gmax = grad_max(&a), gdiff = max_diff(a.grad0, b.grad0, a.n);
    printf("%s bf16: loss step 0 %.9g (cpu-bf16) %.9g (cuda-bf16) %.9g (cuda fp32); step %d %.9g / %.9g; first "
           "gradients: max |cpu-bf16 - cuda-bf16| %.3g, |cuda-bf16 - cuda| %.3g, of max |g| %.3g\n",
           lf_arch_name(arch), a.loss[0], b.loss[0], f.loss[0], STEPS - 1, a.loss[STEPS - 1], b.loss[STEPS - 1],
           gdiff, max_diff(b.grad0, f.grad0, a.n), gmax);
    assert_true(gmax > 0);
    assert_true(fabs(a.loss[0] - b.loss[0]) <= 1e-4 * fabs(a.loss[0]));
    assert_true(gdiff <= 1e-3f * gmax);
    for (int s = 0; s < STEPS; s++) assert_true(fabs(a.loss[s] - b.loss[s]) <= 1e-3 * fabs(a.loss[s]));
    assert_true(fabs(a.loss[STEPS - 1] - a.loss[0]) > 1e-3 * fabs(a.loss[0]));
    /* bf16 was used: the gradients are not fp32's */
    assert_true(max_diff(b.grad0, f.grad0, a.n) > 0);
    assert_memory_equal(b.loss, b2.loss, sizeof b.loss);
    assert_memory_equal(b.params, b2.params, b.n * sizeof(float));
    run_free(&a), run_free(&b), run_free(&b2), run_free(&f);

    /* sessions on bf16 storage: ten times fp32's bounds, as the first loss */
    float la[T * VOCAB], lb[T * VOCAB], da[VOCAB], db[VOCAB];
    session_logits(arch, cpu16, la, da);
    session_logits(arch, cuda16, lb, db);
    const float lmax = max_abs(la, T * VOCAB);
    printf("%s bf16: session logits: max |cpu-bf16 - cuda-bf16| %.3g, cached vs full (cuda-bf16) %.3g, of max "
           "|logit| %.3g\n",
           lf_arch_name(arch), max_diff(la, lb, T * VOCAB), max_diff(db, lb + (T - 1) * VOCAB, VOCAB), lmax);
    assert_true(lmax > 0);
    assert_true(max_diff(la, lb, T * VOCAB) <= 1e-4f * lmax);
    assert_true(max_diff(db, lb + (T - 1) * VOCAB, VOCAB) <= 1e-4f * lmax);
    if (emulate) lf__cpu_bf16_force_emulation(0);
    lf_backend_close(cpu16);
    lf_backend_close(cuda);
    lf_backend_close(cuda16);
}

static void fp16_same_as_cpu(lf_arch arch) {
    if (!have_device()) {
        print_message("SKIPPED: no CUDA device\n");
        skip();
    }
    assert_int_equal(lf_backend_cuda_register(), LF_OK);
    lf_backend *cuda = NULL;
    LF_ASSERT_OK(lf_backend_open("cuda", &cuda));
    int sa[STEPS] = {0}, sb[STEPS] = {0}, sb2[STEPS] = {0};
    run a = train_fp(arch, lf_backend_get("cpu"), 1, sa), b = train_fp(arch, cuda, 1, sb);
    run b2 = train_fp(arch, cuda, 1, sb2);
    int nskip = 0;
    for (int s = 0; s < STEPS; s++) nskip += sa[s];
    const float gmax = grad_max(&a);
    float worst = 0; /* the largest |diff| / bound */
    for (size_t i = 0; i < a.n; i++) {
        const float bound = 1e-4f * gmax + ldexpf(1.0f, -10) * fabsf(a.grad0[i]);
        worst = fmaxf(worst, fabsf(a.grad0[i] - b.grad0[i]) / bound);
    }
    printf("%s fp16: %d of %d steps skipped (loss scale from 2^20); loss step 0 %.9g (cpu) %.9g (cuda); step %d "
           "%.9g / %.9g; first applied gradients at %.3g of their bound\n",
           lf_arch_name(arch), nskip, STEPS, a.loss[0], b.loss[0], STEPS - 1, a.loss[STEPS - 1], b.loss[STEPS - 1],
           worst);
    assert_memory_equal(sa, sb, sizeof sa);
    assert_true(nskip >= 1 && nskip <= 3); /* the skip path ran, and most steps were applied */
    assert_true(gmax > 0);
    assert_true(worst <= 1.0f);
    for (int s = 0; s < STEPS; s++) assert_true(fabs(a.loss[s] - b.loss[s]) <= 1e-3 * fabs(a.loss[s]));
    assert_memory_equal(sb, sb2, sizeof sb);
    assert_memory_equal(b.loss, b2.loss, sizeof b.loss);
    assert_memory_equal(b.params, b2.params, b.n * sizeof(float));
    run_free(&a), run_free(&b), run_free(&b2);
    lf_backend_close(cuda);
}

static void test_gpt2_bf16(void **state) {
    (void)state;
    bf16_same_as_cpu_bf16(LF_ARCH_GPT2);
}
static void test_llama_bf16(void **state) {
    (void)state;
    bf16_same_as_cpu_bf16(LF_ARCH_LLAMA);
}
static void test_gpt2_fp16(void **state) {
    (void)state;
    fp16_same_as_cpu(LF_ARCH_GPT2);
}
static void test_llama_fp16(void **state) {
    (void)state;
    fp16_same_as_cpu(LF_ARCH_LLAMA);
}

static void test_gpt2(void **state) {
    (void)state;
    same_as_cpu(LF_ARCH_GPT2);
}
static void test_llama(void **state) {
    (void)state;
    same_as_cpu(LF_ARCH_LLAMA);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt2),
        cmocka_unit_test(test_llama),
        cmocka_unit_test(test_gpt2_bf16),
        cmocka_unit_test(test_llama_bf16),
        cmocka_unit_test(test_gpt2_fp16),
        cmocka_unit_test(test_llama_fp16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
