/*
 * Autoregressive sampling (nanoGPT's generate): crop the context to
 * block_size, forward, take the last position's logits, divide by the
 * temperature, keep the top k, softmax, draw. Without a KV cache each token
 * costs a forward over the context; the KV cache comes with the serving work.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "llmforge/infer.h"

static int cmp_desc(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

lf_status lf_generate(lf_model *m, const uint32_t *prompt, size_t n_prompt, const lf_sample_opts *opts,
                      lf_token_fn on_token, void *user, uint32_t **out, size_t *n_out) {
    *out = NULL;
    *n_out = 0;
    const lf_model_config *c = lf_model_get_config(m);
    int V = c->vocab_size, Vp = c->padded_vocab_size > 0 ? c->padded_vocab_size : V, Tmax = c->block_size;
    if (n_prompt == 0) return lf_fail(LF_ERR_INVALID_ARG, "generation needs a prompt of at least one token");
    if (opts->max_new_tokens < 0) return lf_fail(LF_ERR_RANGE, "max_new_tokens %d is negative", opts->max_new_tokens);
    if (!(opts->temperature >= 0.0f) || !isfinite(opts->temperature))
        return lf_fail(LF_ERR_RANGE, "temperature %g must be a finite number >= 0", (double)opts->temperature);
    size_t total = n_prompt + (size_t)opts->max_new_tokens;
    uint32_t *seq = lf_alloc(sizeof(uint32_t) * total);
    int32_t *ctx = lf_alloc(sizeof(int32_t) * (size_t)Tmax);
    float *probs = lf_alloc(sizeof(float) * (size_t)V);
    float *sorted = lf_alloc(sizeof(float) * (size_t)V);
    lf_status st = LF_OK;
    if (!seq || !ctx || !probs || !sorted) {
        st = LF_ERR_NOMEM;
        goto done;
    }
    for (size_t i = 0; i < n_prompt; i++) {
        if (prompt[i] >= (uint32_t)V) {
            st = lf_fail(LF_ERR_RANGE, "prompt token %u at position %zu is outside the vocabulary [0, %d)", prompt[i], i, V);
            goto done;
        }
        seq[i] = prompt[i];
    }
    st = lf_model_plan(m, 1, Tmax, NULL);
    if (st != LF_OK) goto done;
    size_t len = n_prompt;
    for (int k = 0; k < opts->max_new_tokens; k++) {
        int T = len > (size_t)Tmax ? Tmax : (int)len;
        for (int i = 0; i < T; i++) ctx[i] = (int32_t)seq[len - (size_t)T + (size_t)i];
        st = lf_model_forward(m, ctx, NULL, 1, T, NULL, NULL, NULL);
        if (st != LF_OK) goto done;
        const float *logits = lf_model_logits(m) + (size_t)(T - 1) * Vp;
        uint32_t next = 0;
        if (opts->temperature == 0.0f) {
            for (int v = 1; v < V; v++)
                if (logits[v] > logits[next]) next = (uint32_t)v;
        } else {
            float thresh = -INFINITY;
            if (opts->top_k > 0 && opts->top_k < V) {
                for (int v = 0; v < V; v++) sorted[v] = logits[v];
                qsort(sorted, (size_t)V, sizeof(float), cmp_desc);
                thresh = sorted[opts->top_k - 1];
            }
            float mx = -INFINITY;
            for (int v = 0; v < V; v++)
                if (logits[v] >= thresh && logits[v] > mx) mx = logits[v];
            double sum = 0;
            for (int v = 0; v < V; v++) {
                probs[v] = logits[v] >= thresh ? expf((logits[v] - mx) / opts->temperature) : 0.0f;
                sum += probs[v];
            }
            double r = (double)lf_rng_uniform(opts->seed, LF_RNG_SAMPLE, (uint64_t)len) * sum, acc = 0;
            next = (uint32_t)(V - 1);
            for (int v = 0; v < V; v++) {
                acc += probs[v];
                if (probs[v] > 0 && r < acc) {
                    next = (uint32_t)v;
                    break;
                }
            }
            while (probs[next] == 0.0f && next > 0) next--; /* rounding at the very end */
        }
        seq[len++] = next;
        if (on_token && on_token(next, user)) break;
    }
    *n_out = len - n_prompt;
    *out = lf_alloc(sizeof(uint32_t) * (*n_out + 1));
    if (!*out) {
        st = LF_ERR_NOMEM;
        goto done;
    }
    memcpy(*out, seq + n_prompt, sizeof(uint32_t) * *n_out);
done:
    lf_free(seq);
    lf_free(ctx);
    lf_free(probs);
    lf_free(sorted);
    return st;
}
