/*
 * Generation: autoregressive sampling from a model (temperature, top-k,
 * top-p) with a KV cache (src/infer/generate.c), deterministic in the seed
 * through the counter-based RNG (purpose SAMPLE, index = position of the
 * generated token).
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
    float top_p;         /* nucleus: the smallest set of tokens with probability >= top_p; 0 or 1 = off */
    int no_cache;        /* 1: a forward over the whole context per token (the reference path) */
} lf_sample_opts;

/* LF_ERR_RANGE naming the field: max_new_tokens < 0, temperature not finite
 * or < 0, top_k < 0, top_p outside [0, 1]. */
lf_status lf_sample_opts_validate(const lf_sample_opts *opts);

/* The next token from one logits row (V entries): argmax when temperature
 * <= 0 (lowest id on ties); else softmax(logits / temperature) over the
 * top_k largest (0 = all), then the most probable tokens while the mass
 * before them is below top_p (1 = all, at least one), renormalised, and one
 * draw lf_rng_uniform(seed, LF_RNG_SAMPLE, step). work: V floats, iwork: V
 * ints of scratch. */
int lf_sample_token(const float *logits, int V, float temperature, int top_k, float top_p, uint64_t seed,
                    uint64_t step, float *work, int *iwork);

/* Called for each new token; return non-zero to stop early. */
typedef int (*lf_token_fn)(uint32_t token, void *user);

/* Generate after `prompt` (n_prompt >= 1 tokens) on a session of m (the
 * model's own activation plan is not touched). The context is the last
 * block_size tokens (nanoGPT's crop); the KV cache is used unless
 * opts->no_cache, with the same tokens under greedy decoding (generate.c).
 * *out (lf_free) receives the new tokens. */
lf_status lf_generate(lf_model *m, const uint32_t *prompt, size_t n_prompt, const lf_sample_opts *opts,
                      lf_token_fn on_token, void *user, uint32_t **out, size_t *n_out);

#ifdef __cplusplus
}
#endif
#endif
