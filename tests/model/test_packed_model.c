/*
 * Packed SFT rows through the whole model (lf_forward_opts.pos): a batch of
 * rows that each pack several examples (and padding at the end: target -1)
 * gives every example the loss it has when run alone, and the sum of the
 * examples' parameter gradients, for GPT-2 (learned position embeddings)
 * and Llama (RoPE, grouped-query attention, SwiGLU) on the fp32 cpu
 * backend, with the batch split over 1 and 2 model replicas. Also: a row
 * whose positions break the rule is refused naming row and column, a
 * backend without the packed ops is refused naming the op, and a forward
 * without positions afterwards is the plain one again (bits equal to a
 * model that never saw packed rows).
 *
 * Error model. Packed and alone, every activation is computed from the
 * same fp32 terms (the masked attention entries are exact zeros), summed in
 * other groupings (GEMM blocking over more rows, attention lanes keyed by
 * column). A dot product of n terms then differs by at most 2 n u
 * sum|terms| (u = 2^-24), and with n <= K = max(4C, T) = 192 here each
 * activation's relative difference stays below ~2 K u through the 2-3
 * layers. So:
 *  - an example's loss (a sum of its tokens' losses, each O(1) and a
 *    smooth function of the activations) within 8 K u (1 + its loss);
 *  - the gradient, normwise: every element within 8 K u max_i sum_e
 *    |g_(e,i)| (the examples' gradients taken one by one: what the sums
 *    are made of; normwise because an element's own terms, per token, may
 *    cancel far below their size, which an elementwise bound on the
 *    examples' sums cannot see: a Llama embedding gradient of 4e-3 differs
 *    by 3e-7 where its per-token terms are ~0.1).
 * The test prints the worst error as a fraction of its bound with
 * LF_TEST_VERBOSE (losses below 1e-3 of theirs, gradients below 1e-2); attention
 * across an example boundary or a position off by one changes an example's
 * loss by O(1e-2), thousands of times its bound, and fails.
 */
#include <math.h>
#include "test_util.h"
#include "backend/backend_impl.h"
#include "llmforge/backend.h"
#include "llmforge/backend_cpu.h"
#include "llmforge/model.h"

enum { T = 32, B = 3, V = 97 };
#define U32 (1.0 / 16777216.0)
#define KDOT 192.0

/* examples' lengths, packed first-fit in order into B rows of T (the rest
 * of a row is padding) */
static const int g_lens[] = {7, 12, 1, 9, 20, 3, 5, 2, 30};
#define N_EX 9

typedef struct ex {
    int row, col, len;
} ex;

static lf_model_config config(lf_arch arch) {
    lf_model_config c = {.n_layer = 2,
                         .n_head = 4,
                         .n_embd = 48,
                         .block_size = T,
                         .vocab_size = V,
                         .padded_vocab_size = 128,
                         .bias = 1,
                         .dropout = 0.0f};
    if (arch == LF_ARCH_LLAMA) {
        c.arch = LF_ARCH_LLAMA;
        c.n_layer = 3;
        c.bias = 0;
        c.n_kv_head = 2;
        c.ffn_hidden = 96;
        c.tie_embeddings = 0;
    }
    return c;
}

/* Pack the examples first-fit in order; tokens from the test stream, the
 * first third of each example's targets masked (a prompt), pads token 0
 * with target -1 and positions of their own run. */
static void make_batch(ex *e, int32_t *in, int32_t *tg, int32_t *pos) {
    int fill[B] = {0};
    for (int k = 0; k < N_EX; k++) {
        int r = 0;
        while (r < B && fill[r] + g_lens[k] > T) r++;
        assert_true(r < B);
        e[k] = (ex){r, fill[r], g_lens[k]};
        for (int i = 0; i < g_lens[k]; i++) {
            const size_t n = (size_t)r * T + fill[r] + i;
            in[n] = (int32_t)(lf_rng_u64(21, LF_RNG_TEST, 2 * n) % V);
            tg[n] = i < g_lens[k] / 3 ? -1 : (int32_t)(lf_rng_u64(21, LF_RNG_TEST, 2 * n + 1) % V);
            pos[n] = i;
        }
        fill[r] += g_lens[k];
    }
    for (int r = 0; r < B; r++)
        for (int t = fill[r]; t < T; t++) {
            const size_t n = (size_t)r * T + t;
            in[n] = 0;
            tg[n] = -1;
            pos[n] = t - fill[r];
        }
}

static float *grads_copy(lf_model *m) {
    const size_t n = lf_model_num_params(m);
    float *g = malloc(n * sizeof *g);
    assert_non_null(g);
    memcpy(g, lf_model_grads(m), n * sizeof *g); /* cpu: host memory */
    return g;
}

static void packed_vs_alone(lf_arch arch, int threads) {
    lf_backend_cpu_set_threads(threads);
    lf_backend *be = lf_backend_get("cpu");
    const lf_model_config c = config(arch);
    lf_model *m = NULL;
    LF_ASSERT_OK(lf_model_create(&m, &c, be));
    LF_ASSERT_OK(lf_model_init_weights(m, 5));
    const size_t np = lf_model_num_params(m);
    ex e[N_EX];
    int32_t in[B * T], tg[B * T], pos[B * T], only[B * T];
    make_batch(e, in, tg, pos);

    /* packed: the whole batch's gradient, then each example's loss (the
     * other targets ignored) */
    lf_forward_opts fo = {.dloss = 1.0f, .pos = pos};
    double loss_all;
    long valid_all;
    lf_model_zero_grad(m);
    LF_ASSERT_OK(lf_model_forward(m, in, tg, B, T, &fo, &loss_all, &valid_all));
    LF_ASSERT_OK(lf_model_backward(m));
    float *g_packed = grads_copy(m);
    double loss_packed[N_EX];
    lf_forward_opts fe = {.pos = pos};
    for (int k = 0; k < N_EX; k++) {
        for (int i = 0; i < B * T; i++) only[i] = -1;
        for (int i = 0; i < e[k].len; i++) {
            const size_t n = (size_t)e[k].row * T + e[k].col + i;
            only[n] = tg[n];
        }
        LF_ASSERT_OK(lf_model_forward(m, in, only, B, T, &fe, &loss_packed[k], NULL));
    }

    /* alone: each example a batch of one row of its own length */
    double *sum_abs = calloc(np, sizeof *sum_abs), *g_sum = calloc(np, sizeof *g_sum);
    double worst_loss = 0, worst_grad = 0, loss_sum = 0;
    for (int k = 0; k < N_EX; k++) {
        const size_t n0 = (size_t)e[k].row * T + e[k].col;
        lf_forward_opts fa = {.dloss = 1.0f};
        double loss;
        long valid;
        lf_model_zero_grad(m);
        LF_ASSERT_OK(lf_model_forward(m, in + n0, tg + n0, 1, e[k].len, &fa, &loss, &valid));
        LF_ASSERT_OK(lf_model_backward(m));
        const float *g = lf_model_grads(m);
        for (size_t i = 0; i < np; i++) {
            sum_abs[i] += fabs((double)g[i]);
            g_sum[i] += (double)g[i];
        }
        const double bound = 8 * KDOT * U32 * (1 + fabs(loss));
        const double d = fabs(loss - loss_packed[k]);
        if (!(d <= bound))
            fail_msg("%s, %d thread(s): example %d (%d tokens at row %d col %d): loss %.9g alone, %.9g packed "
                     "(bound %.3g)",
                     c.arch == LF_ARCH_LLAMA ? "llama" : "gpt2", threads, k, e[k].len, e[k].row, e[k].col, loss,
                     loss_packed[k], bound);
        worst_loss = fmax(worst_loss, d / bound);
        loss_sum += loss;
    }
    if (!(fabs(loss_sum - loss_all) <= 8 * KDOT * U32 * (N_EX + fabs(loss_sum))))
        fail_msg("batch loss %.9g packed, %.9g summed alone", loss_all, loss_sum);
    double scale = 0;
    for (size_t i = 0; i < np; i++) scale = fmax(scale, sum_abs[i]);
    const double gbound = 8 * KDOT * U32 * scale;
    for (size_t i = 0; i < np; i++) {
        const double d = fabs((double)g_packed[i] - g_sum[i]);
        if (!(d <= gbound))
            fail_msg("%s, %d thread(s): gradient element %zu: %.9g packed, %.9g summed alone (bound %.3g)",
                     c.arch == LF_ARCH_LLAMA ? "llama" : "gpt2", threads, i, (double)g_packed[i], g_sum[i], gbound);
        worst_grad = fmax(worst_grad, d / gbound);
    }
    if (getenv("LF_TEST_VERBOSE"))
        printf("  %s %d thread(s): worst loss error %.3g of its bound, gradient %.3g\n",
               c.arch == LF_ARCH_LLAMA ? "llama" : "gpt2", threads, worst_loss, worst_grad);
    free(sum_abs);
    free(g_sum);
    free(g_packed);
    lf_model_free(m);
}

static void test_gpt2(void **state) {
    (void)state;
    packed_vs_alone(LF_ARCH_GPT2, 1);
    packed_vs_alone(LF_ARCH_GPT2, 2);
}

static void test_llama(void **state) {
    (void)state;
    packed_vs_alone(LF_ARCH_LLAMA, 1);
    packed_vs_alone(LF_ARCH_LLAMA, 2);
}

/* Bad positions, a backend without the packed ops, and the plain path after a packed forward. */
static void test_refusals_and_plain_after(void **state) {
    (void)state;
    lf_backend_cpu_set_threads(2);
    const lf_model_config c = config(LF_ARCH_GPT2);
    lf_model *m = NULL, *fresh = NULL;
    LF_ASSERT_OK(lf_model_create(&m, &c, lf_backend_get("cpu")));
    LF_ASSERT_OK(lf_model_init_weights(m, 5));
    ex e[N_EX];
    int32_t in[B * T], tg[B * T], pos[B * T];
    make_batch(e, in, tg, pos);

    const int32_t keep = pos[T + 5];
    pos[T + 5] = pos[T + 4] + 2; /* row 1 column 5 skips a position */
    lf_forward_opts fo = {.pos = pos};
    assert_int_equal(lf_model_forward(m, in, tg, B, T, &fo, NULL, NULL), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("row 1 column 5");
    pos[T + 5] = keep;
    LF_ASSERT_OK(lf_model_forward(m, in, tg, B, T, &fo, NULL, NULL));
    pos[0] = 1; /* a row must start an example */
    assert_int_equal(lf_model_forward(m, in, tg, B, T, &fo, NULL, NULL), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("row 0 column 0");
    pos[0] = 0;

    /* the plain forward after packed ones: the bits of a model that never saw any */
    double l1, l2;
    LF_ASSERT_OK(lf_model_create(&fresh, &c, lf_backend_get("cpu")));
    LF_ASSERT_OK(lf_model_init_weights(fresh, 5));
    LF_ASSERT_OK(lf_model_forward(m, in, tg, B, T, NULL, &l1, NULL));
    LF_ASSERT_OK(lf_model_forward(fresh, in, tg, B, T, NULL, &l2, NULL));
    assert_memory_equal(&l1, &l2, sizeof l1);
    lf_model_free(fresh);
    lf_model_free(m);

    /* a backend without the packed attention: refused by the slot's name */
    lf_backend_ops no_packed = *lf__backend_cpu();
    no_packed.attention_forward_packed = NULL;
    lf_backend *be = NULL;
    LF_ASSERT_OK(lf__backend_open_ops(&no_packed, &be));
    LF_ASSERT_OK(lf_model_create(&m, &c, be));
    LF_ASSERT_OK(lf_model_init_weights(m, 5));
    assert_int_equal(lf_model_forward(m, in, tg, B, T, &fo, NULL, NULL), LF_ERR_UNSUPPORTED);
    LF_ASSERT_ERR_CONTAINS("attention_forward_packed");
    lf_model_free(m);
    lf_backend_close(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt2),
        cmocka_unit_test(test_llama),
        cmocka_unit_test(test_refusals_and_plain_after),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
