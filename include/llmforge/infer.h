/*
 * Generation: autoregressive sampling from a model (temperature, top-k),
 * deterministic in the seed through the counter-based RNG (purpose SAMPLE,
 * index = position of the generated token).
 */
#ifndef LLMFORGE_INFER_H
#define LLMFORGE_INFER_H

#include "llmforge/core.h"
#include "llmforge/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lf_sample_opts {
    int max_new_tokens;
    float temperature;   /* 0 = greedy (argmax) */
    int top_k;           /* 0 = no top-k filter */
    uint64_t seed;
} lf_sample_opts;

/* Called for each new token; return non-zero to stop early. */
typedef int (*lf_token_fn)(uint32_t token, void *user);

/* Generate after `prompt` (n_prompt >= 1 tokens). The context is the last
 * block_size tokens (nanoGPT's crop). *out (lf_free) receives the new tokens. */
lf_status lf_generate(lf_model *m, const uint32_t *prompt, size_t n_prompt, const lf_sample_opts *opts,
                      lf_token_fn on_token, void *user, uint32_t **out, size_t *n_out);

#ifdef __cplusplus
}
#endif
#endif
