/*
 * Language-modelling metrics from summed negative log-likelihoods:
 * perplexity = exp(nll_sum / n_tokens), bits per byte =
 * nll_sum / (ln 2 * n_bytes). Chunks are added in order, so the sum (and
 * the result) is reproducible.
 */
#include <math.h>
#include "eval/eval_impl.h"

void lf_lm_stats_add(lf_lm_stats *s, double nll_sum, uint64_t n_tokens, uint64_t n_bytes) {
    if (!s) return;
    s->nll_sum += nll_sum;
    s->n_tokens += n_tokens;
    s->n_bytes += n_bytes;
}

lf_status lf_lm_perplexity(const lf_lm_stats *s, double *ppl) {
    if (!s || !ppl) return lf_fail(LF_ERR_INVALID_ARG, "perplexity: NULL argument");
    if (!s->n_tokens) return lf_fail(LF_ERR_INVALID_ARG, "perplexity: no tokens");
    if (!isfinite(s->nll_sum)) return lf_fail(LF_ERR_NUMERIC, "perplexity: NLL sum is %g", s->nll_sum);
    *ppl = exp(s->nll_sum / (double)s->n_tokens);
    return LF_OK;
}

lf_status lf_lm_bits_per_byte(const lf_lm_stats *s, double *bpb) {
    if (!s || !bpb) return lf_fail(LF_ERR_INVALID_ARG, "bits per byte: NULL argument");
    if (!s->n_bytes) return lf_fail(LF_ERR_INVALID_ARG, "bits per byte: no bytes");
    if (!isfinite(s->nll_sum)) return lf_fail(LF_ERR_NUMERIC, "bits per byte: NLL sum is %g", s->nll_sum);
    *bpb = s->nll_sum / (M_LN2 * (double)s->n_bytes);
    return LF_OK;
}
