/*
 * Shared by the model tests that compare runs bit for bit (test_recompute.c,
 * test_bf16_acts.c): a backend whose alloc counts what it hands out (for
 * planned == allocated), the small GPT-2 they train (3 layers x 48 channels,
 * vocabulary 97 padded to 128, biases) and its deterministic batches of
 * B x T tokens with a few ignored targets.
 */
#ifndef LF_TEST_MODEL_FIXTURE_H
#define LF_TEST_MODEL_FIXTURE_H

#include "backend/backend_impl.h"
#include "llmforge/model.h"

static lf_backend_ops counting;
static const lf_backend_ops *counting_base;
static size_t allocated; /* bytes handed out by counting.alloc, ever */
static int n_allocs;

static lf_backend *counting_be;

static inline void *counting_alloc(lf_backend *be, size_t bytes) {
    void *p = counting_base->alloc(be, bytes);
    if (p) {
        allocated += bytes;
        n_allocs++;
    }
    return p;
}

/* An instance of `base` with an alloc that counts (one per test program,
 * open until the program exits). */
static inline lf_backend *counting_backend_of(const lf_backend_ops *base) {
    if (counting_be) return counting_be;
    counting_base = base;
    counting = *base;
    counting.alloc = counting_alloc;
    if (lf__backend_open_ops(&counting, &counting_be) != LF_OK) return NULL;
    return counting_be;
}

static inline lf_model_config fixture_config(int T, float dropout) {
    lf_model_config c = {.n_layer = 3, .n_head = 4, .n_embd = 48, .block_size = T, .vocab_size = 97,
                        .padded_vocab_size = 128, .bias = 1, .dropout = dropout};
    return c;
}

/* Batch k of B x T tokens from stream `seed`; targets at i % mod == rem are ignored (-1). */
static inline void fixture_batch(uint64_t seed, int mod, int rem, int k, int B, int T, int32_t *in, int32_t *tg) {
    for (int i = 0; i < B * T; i++) {
        in[i] = (int32_t)(lf_rng_u64(seed, LF_RNG_TEST, (uint64_t)(k * 2 * B * T + i)) % 97);
        tg[i] = (int32_t)(lf_rng_u64(seed, LF_RNG_TEST, (uint64_t)(k * 2 * B * T + B * T + i)) % 97);
        if (i % mod == rem) tg[i] = -1;
    }
}

#endif
