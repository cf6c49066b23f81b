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
    float temperature; /* 0 = greedy (argmax) */
    int top_k;         /* 0 = no top-k filter */
    uint64_t seed;
    float top_p;  /* nucleus: the smallest set of tokens with probability >= top_p; 0 or 1 = off */
    int no_cache; /* 1: a forward over the whole context per token (the reference path) */
} lf_sample_opts;

/* LF_ERR_RANGE naming the field: max_new_tokens < 0, temperature not finite
 * or < 0, top_k < 0, top_p outside [0, 1]. */
lf_status lf_sample_opts_validate(const lf_sample_opts *opts);

/* ---------------------------------------------------------------- sampling one token (sample.c)
 *
 * Validation is the caller's, once, before generating: lf_sample_opts_validate
 * (above) for an options struct, lf_sample_check for the arguments of
 * lf_sample_token called directly. lf_sample_check returns LF_OK or
 * LF_ERR_RANGE with a message naming the bad field and its value: V >= 1;
 * temperature finite and >= 0; top_k >= 0; top_p in (0, 1] (lf_sample_opts's
 * "0 = off" is the caller's to turn into 1, as lf_generate does). Thread-safe
 * (the message is the calling thread's). */
lf_status lf_sample_check(int V, float temperature, int top_k, float top_p);

/* The next token from one row of logits (V entries; a padded row's extra
 * columns are not passed). A pure function of its arguments: the same
 * (logits, seed, step) give the same token, on any thread, in any order.
 *  - temperature <= 0: argmax (the lowest id among equal maxima).
 *  - otherwise: the top_k largest logits (0 or >= V: all; every logit equal
 *    to the k-th largest is kept, as Hugging Face's TopKLogitsWarper), then
 *    softmax(logits / temperature) over them, then the nucleus (Holtzman et
 *    al. 2019, Hugging Face's TopPLogitsWarper): tokens in decreasing
 *    probability (equal ones in increasing id) are kept while the mass
 *    before them is < top_p, at least one; top_p = 1 keeps all. One draw u =
 *    lf_rng_uniform(seed, LF_RNG_SAMPLE, step) picks the first kept token,
 *    in increasing id, whose cumulative renormalised mass exceeds u.
 *    With top_p = 1 that is the draw lf_generate made before top_p existed
 *    (the same token for the same seed and step = the generated token's
 *    position).
 * Logits: NaN is never chosen (unless every logit is NaN: id 0); -inf only
 * when every kept logit is -inf (then the lowest kept id); a +inf logit
 * wins (the lowest id among them).
 * work (V floats) and iwork (V ints) are scratch, contents undefined after.
 * Cost: O(V) (radix selects for top-k and the nucleus, no sort, no
 * allocation); one expf per kept token.
 * Returns the id in [0, V), or -1 (no message recorded: callers validate
 * first) when V < 1, temperature is not finite, top_k < 0, top_p is outside
 * (0, 1], or a pointer is NULL (work and iwork may be NULL when temperature
 * <= 0). A negative temperature samples greedily here but fails
 * lf_sample_check, which takes it for a mistake. */
int lf_sample_token(const float *logits, int V, float temperature, int top_k, float top_p, uint64_t seed, uint64_t step,
                    float *work, int *iwork);

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
