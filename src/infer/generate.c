/*
 * Autoregressive generation on a session (lf_session: its own activation
 * plan and KV cache, so a model in training keeps its plan).
 *
 * With the cache (the default): prefill the prompt (its last block_size
 * tokens) once, then decode one token at a time against the per-layer K/V
 * caches: each new token costs one row through the model instead of a
 * forward over the whole context. Without it (opts->no_cache, or a backend
 * without cached attention): nanoGPT's generate, a forward over the context
 * cropped to block_size for every token.
 *
 * Invariants:
 *  - Both paths see the same context: once the sequence outgrows
 *    block_size, nanoGPT crops the context to its last block_size tokens
 *    every step, which moves every position; the cached path then re-fills
 *    the cache from the cropped context for each token (the same forward as
 *    the uncached path), so greedy decoding gives the same tokens either way.
 *  - Sampling is lf_sample_token (temperature, top-k, top-p) with the
 *    counter-based RNG at index = the position of the generated token, so a
 *    seed reproduces a sample on any backend and thread count.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "llmforge/infer.h"

lf_status lf_sample_opts_validate(const lf_sample_opts *o) {
    if (o->max_new_tokens < 0) return lf_fail(LF_ERR_RANGE, "max_new_tokens %d is negative", o->max_new_tokens);
    if (!(o->temperature >= 0.0f) || !isfinite(o->temperature))
        return lf_fail(LF_ERR_RANGE, "temperature %g must be a finite number >= 0", (double)o->temperature);
    if (o->top_k < 0) return lf_fail(LF_ERR_RANGE, "top_k %d is negative", o->top_k);
    if (!(o->top_p >= 0.0f && o->top_p <= 1.0f))
        return lf_fail(LF_ERR_RANGE, "top_p %g is outside (0, 1] (0 = off)", (double)o->top_p);
    return LF_OK;
}

lf_status lf_generate(lf_model *m, const uint32_t *prompt, size_t n_prompt, const lf_sample_opts *opts,
                      lf_token_fn on_token, void *user, uint32_t **out, size_t *n_out) {
    *out = NULL;
    *n_out = 0;
    const lf_model_config *c = lf_model_get_config(m);
    const int V = c->vocab_size, Vp = c->padded_vocab_size > 0 ? c->padded_vocab_size : V, Tmax = c->block_size;
    if (n_prompt == 0) return lf_fail(LF_ERR_INVALID_ARG, "generation needs a prompt of at least one token");
    lf_status st = lf_sample_opts_validate(opts);
    if (st != LF_OK) return st;
    for (size_t i = 0; i < n_prompt; i++)
        if (prompt[i] >= (uint32_t)V)
            return lf_fail(LF_ERR_RANGE, "prompt token %u at position %zu is outside the vocabulary [0, %d)", prompt[i],
                           i, V);
    const size_t total = n_prompt + (size_t)opts->max_new_tokens;
    uint32_t *seq = lf_alloc(sizeof(uint32_t) * total);
    int32_t *ctx = lf_alloc(sizeof(int32_t) * (size_t)Tmax);
    float *work = lf_alloc(sizeof(float) * (size_t)V);
    float *row = lf_alloc(sizeof(float) * (size_t)Vp); /* the logits wanted, on the host */
    int *iwork = lf_alloc(sizeof(int) * (size_t)V);
    lf_session *s = NULL;
    if (!seq || !ctx || !work || !iwork || !row) {
        st = lf_fail(LF_ERR_NOMEM, "generation: out of memory");
        goto done;
    }
    memcpy(seq, prompt, sizeof(uint32_t) * n_prompt);
    if ((st = lf_session_create(&s, m, 1, Tmax, !opts->no_cache)) != LF_OK) goto done;
    const int cached = !opts->no_cache && lf_session_has_cache(s);
    size_t len = n_prompt;
    for (int k = 0; k < opts->max_new_tokens; k++) {
        const int T = len > (size_t)Tmax ? Tmax : (int)len;
        int rows; /* rows of this forward; the logits wanted are its last */
        if (cached && len <= (size_t)Tmax && lf_session_pos(s) > 0) {
            ctx[0] = (int32_t)seq[len - 1]; /* decode: the newest token only */
            rows = 1;
            st = lf_session_forward(s, ctx, 1, 1, 1);
        } else {
            for (int i = 0; i < T; i++) ctx[i] = (int32_t)seq[len - (size_t)T + (size_t)i];
            rows = T;
            if (cached) { /* prefill (again, after a crop) */
                lf_session_reset(s);
                st = lf_session_forward(s, ctx, 1, T, 1);
            } else {
                st = lf_session_forward(s, ctx, 1, T, 0);
            }
        }
        if (st == LF_OK) st = lf_session_copy_logits(s, (size_t)(rows - 1), 1, row);
        if (st != LF_OK) goto done;
        const int next = lf_sample_token(row, V, opts->temperature, opts->top_k, opts->top_p > 0 ? opts->top_p : 1.0f,
                                         opts->seed, (uint64_t)len, work, iwork);
        seq[len++] = (uint32_t)next;
        if (on_token && on_token((uint32_t)next, user)) break;
    }
    *n_out = len - n_prompt;
    *out = lf_alloc(sizeof(uint32_t) * (*n_out + 1));
    if (!*out) {
        st = lf_fail(LF_ERR_NOMEM, "generation: out of memory");
        *n_out = 0;
        goto done;
    }
    memcpy(*out, seq + n_prompt, sizeof(uint32_t) * *n_out);
done:
    lf_session_free(s);
    lf_free(seq);
    lf_free(ctx);
    lf_free(work);
    lf_free(iwork);
    lf_free(row);
    return st;
}
