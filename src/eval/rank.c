/*
 * Ranking metrics: the rank of the gold candidate among scored candidates
 * under a tie policy, in the raw or filtered setting, and Hits@N / MRR /
 * mean rank over queries. Definitions in eval.h.
 *
 * Ties are counted, never broken by position, so the result does not
 * depend on the order of the candidates.
 */
#include <math.h>
#include <string.h>
#include "eval/eval_impl.h"

lf_status lf_rank_query(const double *scores, size_t n, const size_t *gold, size_t n_gold, const size_t *filtered,
                        size_t n_filtered, lf_tie_policy ties, double *rank) {
    if (!scores || !gold || !rank || (n_filtered && !filtered))
        return lf_fail(LF_ERR_INVALID_ARG, "rank: NULL argument");
    if (n_gold == 0) return lf_fail(LF_ERR_INVALID_ARG, "rank: no gold candidate");
    if ((unsigned)ties > LF_TIES_AVERAGE) return lf_fail(LF_ERR_INVALID_ARG, "rank: unknown tie policy %d", (int)ties);
    for (size_t i = 0; i < n; i++)
        if (isnan(scores[i])) return lf_fail(LF_ERR_INVALID_ARG, "rank: score %zu is NaN", i);
    double best = -INFINITY;
    for (size_t g = 0; g < n_gold; g++) {
        if (gold[g] >= n) return lf_fail(LF_ERR_RANGE, "rank: gold index %zu, but only %zu candidates", gold[g], n);
        if (g == 0 || scores[gold[g]] > best) best = scores[gold[g]];
    }
    for (size_t f = 0; f < n_filtered; f++)
        if (filtered[f] >= n)
            return lf_fail(LF_ERR_RANGE, "rank: filtered index %zu, but only %zu candidates", filtered[f], n);
    uint64_t greater = 0, equal = 0;
    for (size_t i = 0; i < n; i++) {
        int skip = 0;
        for (size_t g = 0; g < n_gold && !skip; g++) skip = gold[g] == i;
        for (size_t f = 0; f < n_filtered && !skip; f++) skip = filtered[f] == i;
        if (skip) continue;
        if (scores[i] > best) greater++;
        else if (scores[i] == best) equal++;
    }
    switch (ties) {
    case LF_TIES_OPTIMISTIC: *rank = 1.0 + (double)greater; break;
    case LF_TIES_AVERAGE: *rank = 1.0 + (double)greater + (double)equal / 2.0; break;
    default: *rank = 1.0 + (double)greater + (double)equal; break;
    }
    return LF_OK;
}

lf_status lf_ranking_init(lf_ranking *r, const long *ks, size_t n_k) {
    if (!r || (n_k && !ks)) return lf_fail(LF_ERR_INVALID_ARG, "ranking: NULL argument");
    if (n_k > LF_RANKING_MAX_K)
        return lf_fail(LF_ERR_RANGE, "ranking: at most %d cut-offs, got %zu", LF_RANKING_MAX_K, n_k);
    memset(r, 0, sizeof *r);
    for (size_t i = 0; i < n_k; i++) {
        if (ks[i] < 1) return lf_fail(LF_ERR_RANGE, "ranking: Hits@%ld: the cut-off must be >= 1", ks[i]);
        r->k[i] = ks[i];
    }
    r->n_k = n_k;
    return LF_OK;
}

lf_status lf_ranking_add(lf_ranking *r, double rank) {
    if (!r) return lf_fail(LF_ERR_INVALID_ARG, "ranking: NULL argument");
    if (!(rank >= 1.0) || isinf(rank))
        return lf_fail(LF_ERR_RANGE, "ranking: rank %g is not a finite number >= 1", rank);
    for (size_t i = 0; i < r->n_k; i++) r->hits[i] += rank <= (double)r->k[i] ? 1.0 : 0.0;
    r->rr_sum += 1.0 / rank;
    r->rank_sum += rank;
    r->n++;
    return LF_OK;
}

lf_status lf_ranking_result(const lf_ranking *r, double *hits, double *mrr, double *mean_rank) {
    if (!r) return lf_fail(LF_ERR_INVALID_ARG, "ranking: NULL argument");
    if (!r->n) return lf_fail(LF_ERR_INVALID_ARG, "ranking: no queries");
    double n = (double)r->n;
    if (hits)
        for (size_t i = 0; i < r->n_k; i++) hits[i] = r->hits[i] / n;
    if (mrr) *mrr = r->rr_sum / n;
    if (mean_rank) *mean_rank = r->rank_sum / n;
    return LF_OK;
}
